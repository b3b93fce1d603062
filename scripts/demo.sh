#!/usr/bin/env bash
# The main job (README). Until the failover demo lands this builds everything and runs the
# library's own tests, so a fresh machine shows a working build.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
cargo build --workspace --release
cargo test --quiet --lib
