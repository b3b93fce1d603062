#!/usr/bin/env bash
# What a new user and a packager do (issue 11), end to end:
#  1. scripts/install.sh into a RELATIVE prefix, run from another directory: everything lands
#     there (nothing in the checkout), the .so is stripped with its debug info beside it;
#  2. the installed library's exports = the header's functions, all @@XCE_0.1 (check-exports);
#  3. the examples build against the installed copy with pkg-config, dynamic and static (C and
#     C++), and run against a real single-node controller;
#  4. the installed xce_test answers --help and talks to the node;
#  5. a DESTDIR staging install puts the same files under DESTDIR with PREFIX-based contents;
#  6. uninstall leaves nothing behind.
# Needs the release controller for step 3/4 (skips those without it).
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
controller=${1:-$repo/target/release/xce-controller}
work=$(mktemp -d)
cleanup_work() { rm -rf "$work"; }
trap cleanup_work EXIT
fails=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails + 1)); fi; }
mkdir -p "$work/elsewhere"; cd "$work/elsewhere"
before=$(cd "$repo" && git status --porcelain --untracked-files=all 2>/dev/null | sort)

# 1. Install into a relative prefix from another directory.
"$repo/scripts/install.sh" rel/prefix || { echo "FAIL: install.sh"; exit 1; }
p=$work/elsewhere/rel/prefix
check "installed under the caller's relative prefix" '[ -f "$p/lib/libxce.so.0.1.0" ] && [ -f "$p/include/xce/xce.h" ] && [ -x "$p/bin/xce_test" ]'
check "xce-controller and its manual page installed" '[ -x "$p/bin/xce-controller" ] && "$p/bin/xce-controller" --version | grep -q "^xce-controller 0\." && grep -q "^\.TH XCE-CONTROLLER 1" "$p/share/man/man1/xce-controller.1"'
check "nothing written into the checkout" '[ ! -e "$repo/rel" ] && [ "$(cd "$repo" && git status --porcelain --untracked-files=all 2>/dev/null | sort)" = "$before" ]'
check "symlinks by soname" '[ "$(readlink "$p/lib/libxce.so.0")" = libxce.so.0.1.0 ] && [ "$(readlink "$p/lib/libxce.so")" = libxce.so.0 ]'
sec_so=$(readelf -S "$p/lib/libxce.so.0.1.0"); sec_dbg=$(readelf -S "$p/lib/.debug/libxce.so.0.1.0.debug")
check "the .so is stripped, its debug info split off" '! grep -q "\.debug_info" <<<"$sec_so" && grep -q "\.gnu_debuglink" <<<"$sec_so" && grep -q "\.debug_info" <<<"$sec_dbg"'
size=$(stat -c %s "$p/lib/libxce.so.0.1.0")
echo "installed libxce.so: $size bytes"
check "the .so is small (< 6 MB)" '[ "$size" -lt 6000000 ]'
check "xce.pc: Libs.private from rustc" 'grep -q "^Libs.private: .*-lpthread" "$p/lib/pkgconfig/xce.pc"'
check "xce.pc: the static unwinder (-lgcc_eh), not -lgcc_s" 'grep -q "^Libs.private: .*-lgcc_eh" "$p/lib/pkgconfig/xce.pc" && ! grep -q -- "-lgcc_s" "$p/lib/pkgconfig/xce.pc"'

# 2. Exports.
check "exports = header, all XCE_0.1" '"$repo/scripts/check-exports.sh" "$p/lib/libxce.so.0.1.0"'

# 3. The examples against the installed copy, through pkg-config.
export PKG_CONFIG_PATH=$p/lib/pkgconfig
cflags=$(pkg-config --cflags xce); libs=$(pkg-config --libs xce)
static=$(pkg-config --static --libs xce | sed 's/-lxce\b/-l:libxce.a/')
ex=$repo/examples
# shellcheck disable=SC2086
check "C example, dynamic" 'cc -std=c11 -Wall -Wextra -Werror $cflags "$ex/hello.c" $libs -Wl,-rpath,"$p/lib" -o hello_dyn'
# shellcheck disable=SC2086
check "C example, static" 'cc -std=c11 -Wall -Wextra -Werror $cflags "$ex/hello.c" $static -o hello_static'
# shellcheck disable=SC2086
check "C example, fully static (-static)" 'cc -std=c11 -static $cflags "$ex/hello.c" $static -o hello_full_static 2>full_static.err && [ -z "$(readelf -d hello_full_static 2>/dev/null | grep NEEDED)" ]'
# shellcheck disable=SC2086
check "C++ example, dynamic" 'c++ -std=c++17 -Wall -Wextra -Werror $cflags "$ex/jobs.cpp" $libs -Wl,-rpath,"$p/lib" -o jobs_dyn'
# shellcheck disable=SC2086
check "C++ example, static" 'c++ -std=c++17 -Wall -Wextra -Werror $cflags "$ex/jobs.cpp" $static -o jobs_static'
# (whole outputs captured first: grep -q closing a pipe early fails it under pipefail)
ldd_h=$(ldd ./hello_dyn); ldd_j=$(ldd ./jobs_dyn)
check "dynamic ones load the installed libxce.so.0" 'grep -q "libxce.so.0 => $p/lib/libxce.so.0" <<<"$ldd_h" && grep -q "libxce.so.0 => $p/lib/" <<<"$ldd_j"'
dyn_h=$(readelf -d hello_static); dyn_j=$(readelf -d jobs_static)
check "static ones need no libxce.so" '! grep -q libxce <<<"$dyn_h" && ! grep -q libxce <<<"$dyn_j"'
if [ -x "$controller" ]; then
  . "$repo/ctests/single_node.sh"
  start_single_node "$controller" || exit 1
  trap 'kill "$node_pid" 2>/dev/null; wait "$node_pid" 2>/dev/null; rm -rf "$node_dir"; cleanup_work' EXIT
  export XCE_MAX_RETRIES=40      # the node needs a moment to elect itself
  for b in hello_dyn hello_static hello_full_static; do
    out=$(timeout 60 "./$b" "127.0.0.1:$port" 2>&1)
    check "$b runs: $out" '[ $? -eq 0 ] && grep -q "^controller 1 answered" <<<"$out"'
  done
  for b in jobs_dyn jobs_static; do
    out=$(timeout 60 "./$b" "127.0.0.1:$port" "sleep 1" 2>&1)
    check "$b runs: $(head -1 <<<"$out")" '[ $? -eq 0 ] && grep -q "^job [0-9]* \"example\"" <<<"$out"'
  done
  # 4. The installed tool.
  out=$("$p/bin/xce_test" --help); check "installed xce_test --help" '[ $? -eq 0 ] && grep -q "^usage: xce_test" <<<"$out"'
  out=$("$p/bin/xce_test" -m "127.0.0.1:$port" -c "hello" 2>&1)
  check "installed xce_test talks to the node" '[ $? -eq 0 ] && grep -q "^controller 1 PRIMARY" <<<"$out"'
  check "its manual page" 'grep -q "^\.TH XCE_TEST 1" "$p/share/man/man1/xce_test.1"'
else
  echo "SKIP: running the examples (no controller at $controller)"
fi

# 5. A staged install (a packager's): same files under DESTDIR, contents name PREFIX.
DESTDIR=$work/stage "$repo/scripts/install.sh" --no-build --prefix /usr --libdir lib/x86_64-linux-gnu >/dev/null
check "DESTDIR: staged under it" '[ -f "$work/stage/usr/lib/x86_64-linux-gnu/libxce.so.0.1.0" ] && [ -f "$work/stage/usr/bin/xce_test" ]'
check "DESTDIR: xce.pc names the final prefix" 'grep -qx "prefix=/usr" "$work/stage/usr/lib/x86_64-linux-gnu/pkgconfig/xce.pc" && grep -qx "libdir=\${prefix}/lib/x86_64-linux-gnu" "$work/stage/usr/lib/x86_64-linux-gnu/pkgconfig/xce.pc"'
DESTDIR=$work/stage "$repo/scripts/install.sh" --uninstall --prefix /usr --libdir lib/x86_64-linux-gnu >/dev/null
check "DESTDIR: uninstall empties the stage" '[ -z "$(find "$work/stage" -mindepth 1 -not -path "$work/stage/usr")" ]'

# 6. Uninstall from the same relative prefix and directory.
"$repo/scripts/install.sh" --uninstall rel/prefix
left=$(find "$p" -mindepth 1)
check "uninstall leaves nothing${left:+: $left}" '[ -z "$left" ]'

[ $fails -eq 0 ] || { echo "install test: $fails FAILED"; exit 1; }
echo "install test: ok"
