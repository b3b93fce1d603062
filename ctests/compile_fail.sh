#!/usr/bin/env bash
# F20 (amended): mixing the two handle types does not compile. Each ctests/compile_fail/*.c
# except control.c must FAIL to compile with the header (C11, incompatible pointer types are
# errors, as in every C test build); control.c, the same calls with the right handles, must
# compile (so a broken include path cannot pass this test).
# Usage: compile_fail.sh CC INCLUDE_DIR SNIPPET_DIR
set -u
cc=$1 inc=$2 dir=$3
flags=(-std=c11 -Wall -Wextra -Werror=incompatible-pointer-types -fsyntax-only -I "$inc")
rc=0
if ! "$cc" "${flags[@]}" "$dir/control.c"; then
  echo "FAIL: control.c does not compile"; rc=1
fi
for f in "$dir"/*.c; do
  [ "$(basename "$f")" = control.c ] && continue
  if "$cc" "${flags[@]}" "$f" 2>/dev/null; then
    echo "FAIL: $(basename "$f") compiled"; rc=1
  else
    echo "ok: $(basename "$f") does not compile"
  fi
done
exit $rc
