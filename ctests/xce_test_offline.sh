#!/usr/bin/env bash
# xce_test without a controller: the command line (--help, usage, exit status), script parsing,
# error texts "CMD: <why>", and the XCE_* environment warnings (once per process).
set -uo pipefail
xce_test=$1
fails=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails + 1)); fi; }
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')

# The command line.
out=$("$xce_test" --help); rc=$?
check "--help exits 0" '[ $rc -eq 0 ]'
check "--help prints usage and commands" 'grep -q "^usage: xce_test" <<<"$out" && grep -q "^commands:" <<<"$out" && grep -q "^exit status:" <<<"$out"'
out=$("$xce_test" -h); check "-h exits 0" '[ $? -eq 0 ] && grep -q "^usage:" <<<"$out"'
out=$("$xce_test" --version); check "--version names the library" '[ $? -eq 0 ] && grep -q "libxce 0\." <<<"$out"'
err=$("$xce_test" --bogus 2>&1 >/dev/null); rc=$?
check "an unknown option is a usage error (2) with usage on stderr" '[ $rc -eq 2 ] && grep -q "unknown option --bogus" <<<"$err" && grep -q "^usage:" <<<"$err"'
err=$("$xce_test" /nonexistent/script 2>&1 >/dev/null); rc=$?
check "an unreadable script is a usage error (2) naming it" '[ $rc -eq 2 ] && grep -q "cannot read script /nonexistent/script" <<<"$err"'
"$xce_test" -c 2>/dev/null; check "-c without commands: 2" '[ $? -eq 2 ]'
out=$("$xce_test" -c "help; sleep 1"); rc=$?
check "help as a command; all succeeded: 0" '[ $rc -eq 0 ] && grep -q "^commands:" <<<"$out"'
out=$(printf 'help\n' | "$xce_test" -); check "script from stdin (-)" '[ $? -eq 0 ] && grep -q "^  jobsub" <<<"$out"'
out=$("$xce_test" -e -c "bogus; help"); rc=$?
check "-e stops at the first failure (1)" '[ $rc -eq 1 ] && ! grep -q "^commands:" <<<"$out"'

# A script: errors as "CMD: <why>", exit 1, nothing after quit.
script=$(mktemp); trap 'rm -f "$script"' EXIT
printf '%s\n' "# comment" "" "joblist" "set masters nohost" "set masters 127.0.0.1:$port" \
  "set retry 1" "set retry x" "client" "bogus" "jobinfo" "quit" "joblist" >"$script"
out=$("$xce_test" "$script"); rc=$?
echo "$out"
check "a failed command: exit 1" '[ $rc -eq 1 ]'
expect() { want=$1; check "line: $want" 'grep -qxF -- "$want" <<<"$out"'; }
expect 'joblist: no client (run "client" first)'
expect "set masters: usage: set masters HOST:PORT[,HOST:PORT...] (up to 8)"
expect "masters: 1"
expect "retry: 1"
expect "set retry: usage: set retry N"
expect "client: Connection refused"
expect 'bogus: unknown command ("help" lists them)'
expect 'jobinfo: no client (run "client" first)'
check "nothing after quit runs" '[ "$(grep -c "^joblist" <<<"$out")" = 1 ]'
out=$("$xce_test" -m "127.0.0.1:$port" -c "hello"); rc=$?
check "-m connects first; a refused connection ends the run (1)" '[ $rc -eq 1 ] && grep -qxF "client: Connection refused" <<<"$out" && ! grep -q "^hello" <<<"$out"'

# XCE_* values the library cannot use: one warning per variable per process, default kept.
err=$(XCE_MAX_RETRIES=three XCE_LOG=verbose XCE_WAIT_PRIMARY=yes \
  "$xce_test" -c "set masters 127.0.0.1:$port; client; client; client" 2>&1 >/dev/null)
echo "$err"
for v in XCE_MAX_RETRIES XCE_LOG XCE_WAIT_PRIMARY; do
  check "$v warned exactly once" '[ "$(grep -c "ignoring $v=" <<<"$err")" = 1 ]'
done
err=$(XCE_MAX_RETRIES=3 XCE_LOG=warn "$xce_test" -c "set masters 127.0.0.1:$port; client" 2>&1 >/dev/null)
check "good values: no warning" '! grep -q "ignoring XCE_" <<<"$err"'

# Over-long input is refused whole, never cut short and run in pieces (a 10 KB line).
long=$(python3 -c 'print("jobsub big " + "x" * 10240 + " help")')
printf '%s\nhelp\n' "$long" >"$script"
out=$("$xce_test" "$script"); rc=$?
check "a 10 KB script line is refused (exit 1), the next line runs" '[ $rc -eq 1 ] && grep -q "^line 1 of 10256 bytes refused: longer than 4095 bytes (not run)$" <<<"$out" && grep -q "^commands:" <<<"$out"'
check "nothing of the long line ran" '! grep -q "unknown command\|^jobsub" <<<"$out"'
out=$("$xce_test" -e "$script"); rc=$?
check "-e stops at a refused line" '[ $rc -eq 1 ] && ! grep -q "^commands:" <<<"$out"'
out=$("$xce_test" -c "$long; help"); rc=$?
check "-c: a 10 KB command is refused, the next runs" '[ $rc -eq 1 ] && grep -q "^command of 10256 bytes refused" <<<"$out" && grep -q "^commands:" <<<"$out" && ! grep -q "unknown command" <<<"$out"'
out=$(printf '%s\n' "$long" | "$xce_test" -); rc=$?
check "stdin: refused too" '[ $rc -eq 1 ] && grep -q "^line 1 of 10256 bytes refused" <<<"$out"'

[ $fails -eq 0 ] || { echo "xce_test offline: $fails FAILED"; exit 1; }
echo "xce_test offline: ok"
