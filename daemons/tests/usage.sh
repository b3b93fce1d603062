#!/usr/bin/env bash
# The daemons refuse bad arguments (usage, exit 2) and stop on SIGTERM within 5 s while no
# controller is reachable (they keep retrying until then).
set -u
worker=$1 scheduler=$2
fail=0
for cmd in "$worker" "$worker --host h" "$scheduler --bogus x" "$scheduler --masters"; do
  $cmd >/dev/null 2>&1; rc=$?
  [ $rc -eq 2 ] || { echo "FAIL: '$cmd' exited $rc, want 2"; fail=1; }
done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# A closed port: nothing listens on port 1 of loopback.
"$worker" --masters 127.0.0.1:1 --host h1 --state-dir "$dir/w" 2>"$dir/w.log" & wpid=$!
"$scheduler" --masters 127.0.0.1:1 2>"$dir/s.log" & spid=$!
sleep 1.5
kill -TERM $wpid $spid
for p in $wpid $spid; do
  for _ in $(seq 50); do kill -0 $p 2>/dev/null || break; sleep 0.1; done
  if kill -0 $p 2>/dev/null; then echo "FAIL: pid $p still running 5 s after SIGTERM"; kill -9 $p; fail=1; fi
  wait $p; rc=$?
  [ $rc -eq 0 ] || { echo "FAIL: pid $p exited $rc after SIGTERM"; fail=1; }
done
grep -q "start: .*retrying" "$dir/w.log" || { echo "FAIL: worker did not retry"; cat "$dir/w.log"; fail=1; }
# A second worker on the same state directory is refused.
"$worker" --masters 127.0.0.1:1 --host h1 --state-dir "$dir/w" 2>"$dir/w2.log" & w1=$!
sleep 0.5
"$worker" --masters 127.0.0.1:1 --host h1 --state-dir "$dir/w" 2>"$dir/w3.log"; rc=$?
kill -TERM $w1; wait $w1
[ $rc -eq 1 ] && grep -q "in use" "$dir/w3.log" || { echo "FAIL: second worker on one state dir: rc $rc"; cat "$dir/w3.log"; fail=1; }
[ $fail -eq 0 ] && echo "daemons: usage, retry and SIGTERM ok"
exit $fail
