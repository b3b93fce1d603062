#!/usr/bin/env bash
# The main job (README): a local 3-controller cluster (real xce-controller processes on
# loopback), clients working through libxce, a kill -9 of the primary, and a timeline of what
# happened with the recovery time; then a check that exactly one job exists per submitted id,
# and a clean stop. Extra arguments go to xce-demo (e.g. --kills 3).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
echo "building (release)..."
cargo build --release --quiet -p xce-controller -p xce-proof --bin xce-controller --bin xce-demo
exec ./target/release/xce-demo "$@"
