#!/usr/bin/env bash
# The C surface, end to end (issue #5). Called by scripts/test.sh; runs on its own too.
#   1. cargo build --release (libxce.so with soname libxce.so.0, xce-controller when present)
#   2. header check: include/xce/xce.h == what the pinned cbindgen generates
#   3. meson: C tests + xce_test (+ cluster tests when the controller is built)
#   4. meson with -Db_sanitize=address,undefined (instrumentation verified by a test)
#   5. valgrind: 1,000 start/stop cycles, the API and lifecycle tests, the old caller's
#      joblist and S13's forking daemon (children included), no leaks, no errors
#   6. install: scripts/install.sh into a relative prefix from elsewhere; the exports equal the
#      header's functions, all XCE_0.1; examples/ built with pkg-config (dynamic, static) and
#      run; DESTDIR; uninstall leaves nothing (ctests/install_test.sh)
#   7. go vet + go test -race in go/ (the package) and daemons/ (the apiserver, the daemons)
#   8. the whole-system failover test (daemons/systest; XCE_LONG=1 for the long version)
#   9. a Go program outside the repository, against an installed prefix, through a kill -9
# Every step runs even when one fails; prints a summary; exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export CARGO_TERM_COLOR=never

passed=(); failed=(); skipped=()
step() {
  local name=$1; shift
  printf '\n==== ctest %s\n' "$name"
  local t0=$SECONDS
  "$@"; local rc=$?
  if [ $rc -eq 0 ]; then passed+=("$name ($((SECONDS - t0))s)")
  elif [ $rc -eq 77 ]; then skipped+=("$name")
  else failed+=("$name ($((SECONDS - t0))s)"); fi
  printf '==== ctest %s: %s (%ss)\n' "$name" "$([ $rc -eq 0 ] && echo ok || { [ $rc -eq 77 ] && echo skipped || echo FAILED; })" $((SECONDS - t0))
}

build() {
  # The whole workspace, so dependency features resolve as in scripts/test.sh's release build
  # (building `--lib` alone resolves them differently and recompiles the library).
  cargo build --release --quiet --workspace || return 1
  # Programs linked with -lxce load libxce.so.0 (the soname): make it resolvable in place.
  ln -sfn libxce.so target/release/libxce.so.0
}

controller=$root/target/release/xce-controller

meson_run() {
  local dir=$1; shift
  if [ -f "$dir/build.ninja" ]; then
    meson setup --reconfigure "$dir" "$@" -Dcontroller="$controller" >/dev/null || return 1
  else
    meson setup "$dir" "$@" -Dcontroller="$controller" >/dev/null || return 1
  fi
  ninja -C "$dir" >/dev/null || { ninja -C "$dir"; return 1; }
  meson test -C "$dir" --print-errorlogs --num-processes 2
}

valgrind_run() {
  local vg=(valgrind -q --leak-check=full --show-leak-kinds=definite,indirect
            --errors-for-leak-kinds=definite,indirect --error-exitcode=9)
  "${vg[@]}" build/c/test_cycles 1000 || return 1
  "${vg[@]}" build/c/test_api all >/dev/null || return 1
  "${vg[@]}" build/c/test_lifecycle all || return 1
  "${vg[@]}" build/c/test_handles all || return 1
  # The seeds' joblist shape against a real cluster (77: no controller built, skipped).
  "${vg[@]}" build/c/test_oldcaller "$controller" >/dev/null
  local rc=$?
  [ $rc -eq 0 ] || [ $rc -eq 77 ] || return 1
  # S13: the forking event-loop daemon through kill -9 of the primary, its children checked
  # too (valgrind follows fork): 8 rounds, 2 kills, time bounds x4, no second thread (see the
  # test's header comment).
  "${vg[@]}" build/c/test_s13_daemon "$controller" 8 2 4 0 || return 1
  echo "valgrind: no leaks, no errors"
}

go_test() {
  command -v go >/dev/null || { echo "go not installed"; return 1; }
  # The package links through pkg-config: meson wrote build/c/xce-uninstalled.pc.
  local d
  for d in go daemons; do
    ( cd "$d" && export GOTOOLCHAIN=local GOPROXY=off GOFLAGS= XCE_CONTROLLER="$controller" \
        PKG_CONFIG_PATH="$root/build/c${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}" \
      && go vet ./... && go test -race -count=1 -timeout 300s ./... ) || return 1
  done
}

system_test() {
  daemons/build.sh || return 1
  build/go/xce-systest --controller "$controller" --worker build/c/daemons/xce-worker \
    --scheduler build/c/daemons/xce-scheduler --apiserver build/go/xce-apiserver
}

step build     build
step header    scripts/check-header.sh
step meson     meson_run build/c
step asan      meson_run build/c-asan -Db_sanitize=address,undefined -Db_lundef=false
step valgrind  valgrind_run
step install   ctests/install_test.sh "$controller"
step go        go_test
step system    system_test
step go-outside go/testdata/outside/check.sh "$controller"

echo
echo "ctest passed: ${passed[*]:-none}"
[ ${#skipped[@]} -eq 0 ] || echo "ctest skipped: ${skipped[*]}"
[ ${#failed[@]} -eq 0 ] || echo "ctest FAILED: ${failed[*]}"
echo "ctest: ${#passed[@]} passed, ${#failed[@]} failed"
[ ${#failed[@]} -eq 0 ]
