#!/usr/bin/env bash
# A Go program outside the repository (main.go here, copied to a temporary directory) that
# requires the module github.com/xce-project/libxce/go with a `replace` to this checkout,
# builds against an installed prefix through pkg-config (scripts/install.sh PREFIX), carries
# no RUNPATH into the checkout, and survives a kill -9 of the primary controller.
#   go/testdata/outside/check.sh XCE_CONTROLLER_BINARY
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
controller=$1
tmp=$(mktemp -d /tmp/xce-outside.XXXXXX)
cluster_pid=
cleanup() {
  [ -n "$cluster_pid" ] && kill -INT "$cluster_pid" 2>/dev/null && wait "$cluster_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

prefix=$tmp/prefix
"$root/scripts/install.sh" --no-tools "$prefix" >/dev/null
echo "installed into $prefix"

mkdir "$tmp/app"
cp "$here/main.go" "$tmp/app/"
cat > "$tmp/app/go.mod" <<EOM
module example.com/outside

go 1.19

require github.com/xce-project/libxce/go v0.1.0

replace github.com/xce-project/libxce/go => $root/go
EOM
(
  cd "$tmp/app"
  # A fresh build cache: Go's cache does not notice which .pc the package linked with
  # (golang/go#24544), and the repository's tests link the build tree's.
  export GOTOOLCHAIN=local GOPROXY=off GOFLAGS= PKG_CONFIG_PATH="$prefix/lib/pkgconfig" \
    GOCACHE="$tmp/gocache"
  unset PKG_CONFIG_LIBDIR
  go build -o outside .
)
app=$tmp/app/outside
echo "built $app outside the repository"

# Linked against the installed soname, with no path into the checkout.
readelf -d "$app" | grep -q 'NEEDED.*libxce\.so\.0' || { echo "FAIL: not linked against libxce.so.0"; exit 1; }
if readelf -d "$app" | grep -E 'RUNPATH|RPATH' | grep -q "$root"; then
  echo "FAIL: RUNPATH into the checkout:"; readelf -d "$app" | grep -E 'RUNPATH|RPATH'; exit 1
fi
resolved=$(LD_LIBRARY_PATH="$prefix/lib" ldd "$app" | awk '/libxce/ {print $3}')
[ "$resolved" = "$prefix/lib/libxce.so.0" ] || { echo "FAIL: libxce resolves to '$resolved'"; exit 1; }
echo "links $resolved, no RUNPATH into the checkout"

# A 3-node cluster on free ports; the program runs while the primary is killed.
base=$(python3 - <<'PY'
import random, socket
for _ in range(500):
    b = random.randint(20000, 29000)
    try:
        socks = []
        for p in (b, b + 1, b + 2, b + 1000, b + 1001, b + 1002):
            s = socket.socket(); s.bind(("127.0.0.1", p)); socks.append(s)
        print(b); break
    except OSError:
        pass
    finally:
        for s in socks: s.close()
PY
)
"$controller" cluster --nodes 3 --base-port "$base" --data "$tmp/data" >"$tmp/cluster.out" 2>"$tmp/cluster.err" &
cluster_pid=$!
for _ in $(seq 300); do grep -q '^primary ' "$tmp/cluster.out" && break; sleep 0.1; done
grep -q '^primary ' "$tmp/cluster.out" || { echo "FAIL: no primary"; cat "$tmp/cluster.out" "$tmp/cluster.err"; exit 1; }
masters=$(sed -n 's/^node [0-9]* client=\([^ ]*\) .*/\1/p' "$tmp/cluster.out" | paste -sd, -)

LD_LIBRARY_PATH="$prefix/lib" XCE_LOG=off "$app" --masters "$masters" --duration 6s --expect-failover >"$tmp/app.out" 2>&1 &
app_pid=$!
# The kill must meet a client that was served (F17: finding a primary is no failover).
for _ in $(seq 300); do grep -q '^outside: joined' "$tmp/app.out" && break; sleep 0.1; done
grep -q '^outside: joined' "$tmp/app.out" || { echo "FAIL: the outside program did not join"; cat "$tmp/app.out"; exit 1; }
primary=$(sed -n 's/^primary \([0-9]*\) .*/\1/p' "$tmp/cluster.out" | tail -1)
pid=$(sed -n "s/^node $primary client=[^ ]* pid=\([0-9]*\)/\1/p" "$tmp/cluster.out")
echo "kill -9 primary node $primary (pid $pid)"
kill -9 "$pid"
rc=0; wait $app_pid || rc=$?
cat "$tmp/app.out"
[ $rc -eq 0 ] || { echo "FAIL: the outside program exited $rc"; exit 1; }
echo "outside: ok"
