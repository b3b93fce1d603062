#!/usr/bin/env bash
# Fails when the checked-in include/xce/xce.h differs from what the code generates with the
# pinned cbindgen (run scripts/gen-header.sh and commit to fix).
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
scripts/gen-header.sh "$tmp/xce.h"
if ! diff -u include/xce/xce.h "$tmp/xce.h" > "$tmp/diff"; then
  head -60 "$tmp/diff"
  echo "check-header: include/xce/xce.h is STALE: run scripts/gen-header.sh and commit it" >&2
  exit 1
fi
# Parsing the whole crate must give the same header: only src/ffi is C surface (the other
# modules are marked cbindgen:ignore in src/lib.rs).
. scripts/cbindgen-pin.sh
"$CBINDGEN" --quiet --config cbindgen.toml --crate xce --output "$tmp/crate.h"
if ! diff -u include/xce/xce.h "$tmp/crate.h" > "$tmp/diff"; then
  head -60 "$tmp/diff"
  echo "check-header: cbindgen over the whole crate emits more than src/ffi: mark the module cbindgen:ignore" >&2
  exit 1
fi
echo "check-header: include/xce/xce.h is up to date"
