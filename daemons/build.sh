#!/usr/bin/env bash
# Builds the daemons from a checkout whose release library is built (cargo build --release):
# the C worker and scheduler with meson (build/c/daemons/xce-worker, xce-scheduler) and the
# Go apiserver and whole-system test with go build (build/go/xce-apiserver, xce-systest),
# linking the build tree's library through build/c/xce-uninstalled.pc.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
controller=$root/target/release/xce-controller
if [ -f build/c/build.ninja ]; then
  meson setup --reconfigure build/c -Dcontroller="$controller" >/dev/null
else
  meson setup build/c -Dcontroller="$controller" >/dev/null
fi
ninja -C build/c daemons/xce-worker daemons/xce-scheduler >/dev/null
mkdir -p build/go
cd daemons
export GOTOOLCHAIN=local GOPROXY=off GOFLAGS= PKG_CONFIG_PATH="$root/build/c${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
go build -o "$root/build/go/xce-apiserver" ./apiserver
go build -o "$root/build/go/xce-systest" ./systest
