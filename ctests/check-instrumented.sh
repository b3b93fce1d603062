#!/usr/bin/env bash
# Fails unless each binary carries the runtime hooks of the sanitizers it was built with:
# __asan_init / __asan_report_* for address, __ubsan_handle_* for undefined. A build where
# -Db_sanitize silently did nothing would pass every test while checking nothing.
set -euo pipefail
kinds=$1; shift
for bin in "$@"; do
  syms=$(nm "$bin" 2>/dev/null; nm -D "$bin" 2>/dev/null) || true
  if [[ $kinds == *address* ]] && ! grep -q '__asan_init\|__asan_report_load' <<<"$syms"; then
    echo "$bin: NOT instrumented by AddressSanitizer"; exit 1
  fi
  if [[ $kinds == *undefined* ]] && ! grep -q '__ubsan_handle_' <<<"$syms"; then
    echo "$bin: NOT instrumented by UndefinedBehaviorSanitizer"; exit 1
  fi
  echo "$bin: instrumented ($kinds)"
done
