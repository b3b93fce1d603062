#!/usr/bin/env bash
# xce-controller's command line: --help for the tool and for every command exits 0 and prints
# usage on stdout; a usage error exits 2 with the failing command's usage on stderr.
# Skips (exit 77) when the controller binary is not there.
set -uo pipefail
controller=$1
[ -x "$controller" ] || { echo "SKIP: no xce-controller at $controller"; exit 77; }
fails=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fails=$((fails + 1)); }
for args in "--help" "-h" "help" "run --help" "cluster --help" "cluster -h" "help run" \
            "help cluster" "run --id 1 --help"; do
  # shellcheck disable=SC2086
  out=$("$controller" $args 2>/dev/null); rc=$?
  if [ $rc -eq 0 ] && grep -q "^usage: xce-controller" <<<"$out"; then ok "$args"; else bad "$args (exit $rc)"; fi
done
grep -q -- "--election-min-ms" <<<"$("$controller" run --help)" && ok "run --help lists the knobs" || bad "run --help lists the knobs"
for args in "" "bogus" "run" "cluster --data" "run --id 1 --nope 3"; do
  # shellcheck disable=SC2086
  err=$("$controller" $args 2>&1 >/dev/null); rc=$?
  if [ $rc -eq 2 ] && grep -q "^usage: xce-controller" <<<"$err"; then ok "usage error: '$args'"; else bad "usage error: '$args' (exit $rc)"; fi
done
[ $fails -eq 0 ] || { echo "controller help: $fails FAILED"; exit 1; }
echo "controller help: ok"
