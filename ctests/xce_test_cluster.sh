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
id=$(sed -n 's/^job \([0-9]*\) submitted$/\1/p' <<<"$out")
[ -n "$id" ] || { echo "no job id"; exit 1; }
grep -q "^$id ctest PEND" <<<"$out" || { echo "job $id not listed as PEND"; exit 1; }
out2=$(printf '%s\n' "set masters 127.0.0.1:$port" client "jobinfo $id" "jobctrl $id kill" "jobinfo $id" "jobinfo 1" quit | timeout 60 "$xce_test")
echo "$out2"
grep -q "^job $id kill: ok$" <<<"$out2" || { echo "jobctrl failed"; exit 1; }
grep -q "^jobinfo: " <<<"$out2" || { echo "unknown job id did not report an error"; exit 1; }
echo "xce_test cluster: ok"
