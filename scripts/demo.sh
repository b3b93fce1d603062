#!/usr/bin/env bash
# The main job (README): a local 3-controller cluster (real xce-controller processes on
# loopback), clients working through libxce, a kill -9 of the primary, and a timeline of what
# happened with the recovery time; then a check that exactly one job exists per submitted id,
# and a clean stop. Extra arguments go to xce-demo (e.g. --kills 3).
#
# ./scripts/demo.sh --system: the whole system instead — 3 controllers, the C worker (x2) and
# scheduler, the Go apiserver; jobs submitted over HTTP while the primary is killed and a
# worker restarted, shown as a timeline, then the verdict table (daemons/systest). Extra
# arguments go to xce-systest (e.g. --jobs 100 --kills 10).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
if [ "${1:-}" = "--system" ]; then
  shift
  echo "building (release library, controller, daemons)..."
  cargo build --release --quiet --workspace   # as scripts/test.sh (same feature resolution)
  ln -sfn libxce.so target/release/libxce.so.0
  daemons/build.sh
  exec build/go/xce-systest --timeline --controller target/release/xce-controller \
    --worker build/c/daemons/xce-worker --scheduler build/c/daemons/xce-scheduler \
    --apiserver build/go/xce-apiserver "$@"
fi
echo "building (release)..."
cargo build --release --quiet -p xce-controller -p xce-proof --bin xce-controller --bin xce-demo
exec ./target/release/xce-demo "$@"
