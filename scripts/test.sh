#!/usr/bin/env bash
# The project's one test command (README): installs what is missing, then runs every test —
# Rust unit and integration tests (wire, failover core, reference controller, scenarios),
# clippy, the C surface (header check, meson C tests, ASan/UBSan, valgrind) and the Go package.
#
#   scripts/test.sh           everything, quick versions of the long scenarios
#   XCE_LONG=1 scripts/test.sh   also the long scenario versions (hundreds of kill trials)
#
# Runs every step even when one fails, then prints a summary and exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
export XCE_REQUIRE_INTEROP=1     # the pycapnp interop test must run, not skip

./scripts/deps.sh || { echo "test.sh: dependency installation failed"; exit 1; }

passed=(); failed=()
step() {
  local name=$1; shift
  printf '\n==== %s: %s\n' "$name" "$*"
  local t0=$SECONDS
  if "$@"; then passed+=("$name"); printf '==== %s: ok (%ss)\n' "$name" $((SECONDS - t0))
  else failed+=("$name"); printf '==== %s: FAILED (%ss)\n' "$name" $((SECONDS - t0)); fi
}

step fmt      cargo fmt --all -- --check
step clippy   cargo clippy --workspace --all-targets --quiet -- -D warnings
step build    cargo build --workspace --release --quiet
step cargo-test cargo test --workspace --quiet --no-fail-fast -- --test-threads=2
[ -x scripts/ctest.sh ] && step c-and-go scripts/ctest.sh

echo
echo "test.sh steps passed: ${passed[*]:-none}"
[ ${#failed[@]} -eq 0 ] || echo "test.sh steps FAILED: ${failed[*]}"
echo "test.sh: ${#passed[@]} passed, ${#failed[@]} failed"
[ ${#failed[@]} -eq 0 ]
