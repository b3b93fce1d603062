#!/usr/bin/env bash
# Sourced by gen-header.sh / check-header.sh: makes the PINNED cbindgen available as $CBINDGEN.
# The header's exact text depends on the cbindgen version, so every regeneration and every
# check uses this one version; it is installed (crates.io, --locked) when missing.
CBINDGEN_VERSION=0.29.4
CBINDGEN_ROOT="${CBINDGEN_ROOT:-$HOME/.cache/xce-cbindgen-$CBINDGEN_VERSION}"
CBINDGEN="$CBINDGEN_ROOT/bin/cbindgen"
if ! "$CBINDGEN" --version 2>/dev/null | grep -qx "cbindgen $CBINDGEN_VERSION"; then
  # An already installed cbindgen of the pinned version is reused as is.
  if command -v cbindgen >/dev/null 2>&1 \
      && cbindgen --version 2>/dev/null | grep -qx "cbindgen $CBINDGEN_VERSION"; then
    CBINDGEN=$(command -v cbindgen)
  else
    echo "cbindgen $CBINDGEN_VERSION not found: installing it into $CBINDGEN_ROOT" >&2
    cargo install --quiet --locked --root "$CBINDGEN_ROOT" cbindgen --version "=$CBINDGEN_VERSION" >&2
  fi
fi
export CBINDGEN
