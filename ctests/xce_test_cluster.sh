#!/usr/bin/env bash
# xce_test against a real single-node controller: the brief's commands end to end.
# Skips (exit 77) when the controller binary is not there.
set -uo pipefail
xce_test=$1; controller=$2
[ -x "$controller" ] || { echo "SKIP: no xce-controller at $controller"; exit 77; }
dir=$(mktemp -d)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
port=$(free_port); raft=$(free_port)
"$controller" run --id 1 --cluster "1=127.0.0.1:$port/127.0.0.1:$raft" --data "$dir" >"$dir/log" 2>&1 &
pid=$!
cleanup() { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
# Wait (bounded) until the node accepts connections.
for _ in $(seq 100); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || { echo "controller exited"; cat "$dir/log"; exit 1; }
  sleep 0.1
done
script="set masters 127.0.0.1:$port
set retry 40
client
hello
jobsub ctest sleep 100
joblist
workerlist
clusterconf
stats
quit"
# The node needs a moment to elect itself; the retry budget covers that.
out=$(printf '%s\n' "$script" | timeout 60 "$xce_test"); rc=$?
echo "$out"
[ $rc -eq 0 ] || { echo "xce_test exited $rc"; cat "$dir/log" | tail -20; exit 1; }
id=$(sed -n 's/^job \([0-9]*\) submitted (%1)$/\1/p' <<<"$out")
[ -n "$id" ] || { echo "no job id"; exit 1; }
grep -q "^$id ctest PEND" <<<"$out" || { echo "job $id not listed as PEND"; exit 1; }
# Job ids by short form and by prefix (of ids this session printed); an unknown id in words.
# The prefix of the first job is one digit longer than what it shares with the second (ids
# made a moment apart share leading digits).
out2=$(printf '%s\n' "set masters 127.0.0.1:$port" client "jobsub second sleep 1" "jobinfo %1" \
  "jobctrl %% kill" joblist quit | timeout 60 "$xce_test"); rc=$?
echo "$out2"
[ $rc -eq 0 ] || { echo "xce_test exited $rc"; exit 1; }
id2=$(sed -n 's/^job \([0-9]*\) submitted (%1)$/\1/p' <<<"$out2")
[ -n "$id2" ] || { echo "no second job id"; exit 1; }
grep -q "^$id2 second PEND" <<<"$out2" || { echo "%1 did not name job $id2"; exit 1; }
grep -q "^job $id2 kill: ok$" <<<"$out2" || { echo "jobctrl %% failed"; exit 1; }
n=0; while [ "${id:$n:1}" = "${id2:$n:1}" ]; do n=$((n + 1)); done
prefix=${id:0:$((n + 1))}; common=${id:0:$n}
# An id no job has: its first digit starts neither job's id (a fixed "42" was a prefix of
# both when the ids happened to start with 42).
for d in 1 2 3 4 5 6 7 8 9; do
  [ "$d" != "${id:0:1}" ] && [ "$d" != "${id2:0:1}" ] && { unknown=${d}2; break; }
done
out2=$(printf '%s\n' "set masters 127.0.0.1:$port" client joblist "jobinfo $prefix" \
  "jobinfo $common" "jobinfo %9" "jobinfo $unknown" "jobctrl $unknown kill" quit \
  | timeout 60 "$xce_test"); rc=$?
echo "$out2"
[ $rc -eq 1 ] || { echo "a failed command must exit 1, got $rc"; exit 1; }
[ "$(grep -c "^$id ctest" <<<"$out2")" = 2 ] || { echo "prefix $prefix did not name job $id"; exit 1; }
[ -z "$common" ] || grep -qxF "jobinfo $common: ambiguous: a prefix of 2 job ids" <<<"$out2" \
  || { echo "an ambiguous prefix was not refused"; exit 1; }
grep -qxF "jobinfo %9: no such job in this session (0 submitted)" <<<"$out2" || { echo "bad %9 text"; exit 1; }
grep -qxF "jobinfo $unknown: no such job" <<<"$out2" || { echo "unknown job id not reported as such"; exit 1; }
grep -qxF "jobctrl $unknown: no such job" <<<"$out2" || { echo "jobctrl on an unknown id not reported as such"; exit 1; }
echo "xce_test cluster: ok"
