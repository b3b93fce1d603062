#!/usr/bin/env bash
# xce_test without a controller: parses a script, reports errors as "CMD: <xce_strerror text>".
set -euo pipefail
xce_test=$1
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
out=$(printf '%s\n' "# comment" "joblist" "set masters nohost" "set masters 127.0.0.1:$port" \
  "set retry 1" "client" "bogus" "quit" "joblist" | "$xce_test" || true)
echo "$out"
expect() { grep -qxF "$1" <<<"$out" || { echo "missing line: $1"; exit 1; }; }
expect "joblist: no client (run \"client\" first)"
expect "set masters: Invalid argument"
expect "masters: 1"
expect "retry: 1"
expect "client: Connection refused"
expect "bogus: unknown command"
# nothing after quit runs
[ "$(grep -c '^joblist' <<<"$out")" = 1 ] || { echo "ran past quit"; exit 1; }
echo "xce_test offline: ok"
