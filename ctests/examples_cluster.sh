#!/usr/bin/env bash
# The examples of examples/ against a real single-node controller, and without one.
#   examples_cluster.sh HELLO JOBS CONTROLLER      (skips, exit 77, without the controller)
set -uo pipefail
hello=$1; jobs=$2; controller=$3
[ -x "$controller" ] || { echo "SKIP: no xce-controller at $controller"; exit 77; }
here=$(cd "$(dirname "$0")" && pwd)
. "$here/single_node.sh"
start_single_node "$controller" || exit 1
fails=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails + 1)); fi; }
export XCE_MAX_RETRIES=40          # the node needs a moment to elect itself
out=$(timeout 60 "$hello" "127.0.0.1:$port" 2>&1); rc=$?; echo "$out"
check "hello answers" '[ $rc -eq 0 ] && grep -q "^controller 1 answered; primary is 1 at 127.0.0.1:$port" <<<"$out"'
out=$(timeout 60 "$jobs" "127.0.0.1:$port" "sleep 5" 2>&1); rc=$?; echo "$out"
check "jobs submits and reads back" '[ $rc -eq 0 ] && grep -q "^job [0-9]* \"example\" in queue normal: state 0$" <<<"$out"'
out=$(timeout 60 "$hello" "127.0.0.1:$free" 2>&1); rc=$?; echo "$out"
check "hello without a controller: exit 1, says why" '[ $rc -eq 1 ] && grep -q "^no controller reachable: Connection refused$" <<<"$out"'
out=$(timeout 60 "$hello" "nohost" 2>&1); rc=$?
check "hello with a bad list: exit 2" '[ $rc -eq 2 ]'
out=$(timeout 60 "$jobs" 2>&1); rc=$?
check "jobs without arguments: usage, exit 2" '[ $rc -eq 2 ] && grep -q "^usage:" <<<"$out"'
[ $fails -eq 0 ] || { echo "examples: $fails FAILED"; exit 1; }
echo "examples: ok"
