#!/usr/bin/env bash
# Regenerates include/xce/xce.h from src/ffi/ with the pinned cbindgen. Commit the result.
#   scripts/gen-header.sh [OUTPUT]     (default include/xce/xce.h)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/cbindgen-pin.sh
out=${1:-include/xce/xce.h}
# Only src/ffi/ is parsed (its mod.rs as the root): the header is exactly the C surface.
"$CBINDGEN" --quiet --config cbindgen.toml --output "$out" src/ffi/mod.rs
