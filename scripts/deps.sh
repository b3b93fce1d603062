#!/usr/bin/env bash
# Installs what building and testing libxce needs, only when it is missing, so a fresh
# Debian machine with a Rust toolchain goes from clone to green with the README alone.
# Idempotent and quiet when everything is there. Needs root (or sudo) for apt-get.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'deps: %s\n' "$*"; }

# Debian packages: command -> package.
declare -A APT=(
  [capnp]=capnproto          # schema compiler used by proto/build.rs (capnpc)
  [meson]=meson              # C tests and xce_test
  [ninja]=ninja-build
  [go]=golang-go             # the Go package over the header (cgo)
  [valgrind]=valgrind        # leak check of the C surface
  [cc]=gcc
  [c++]=g++                  # C++ header test and examples/jobs.cpp
  [objcopy]=binutils         # scripts/install.sh: split debug info, strip; check-exports.sh
  [pkg-config]=pkg-config
  [ip]=iproute2              # network namespaces of the S11 network-fault tests (run as root)
  [openssl]=openssl          # s_server/s_client: the TLS record layer's interoperability tests
  [unshare]=util-linux       # S15 extended: a namespace with its own hosts file (the loopback rule)
  [setpriv]=util-linux       # S15 extended: reading a node's data files as another user
  [mount]=mount              # S15 extended: the hosts file bind-mounted in that namespace
)
missing=()
for cmd in "${!APT[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${APT[$cmd]}")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  say "installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

command -v cargo >/dev/null 2>&1 || { say "cargo not found: install a Rust toolchain (rustup) first"; exit 1; }

# pycapnp: the independent (C++) Cap'n Proto implementation for the interoperability test.
if ! python3 -c 'import capnp' >/dev/null 2>&1; then
  say "installing pycapnp (PyPI)"
  python3 -m pip install -q --root-user-action=ignore pycapnp
fi
