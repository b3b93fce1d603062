#!/usr/bin/env bash
# Installs (or uninstalls) libxce: the shared library with its soname and symbol versions, the
# static library, the header, a pkg-config file, the xce_test tool, the reference controller
# xce-controller, and their manual pages.
# docs/install.md explains every choice; `scripts/install.sh --help` lists the options.
set -euo pipefail
caller=$PWD                       # relative paths given by the caller are relative to here
repo=$(cd "$(dirname "$0")/.." && pwd)

usage() {
  cat <<'EOF'
usage: scripts/install.sh [OPTIONS] [PREFIX]
       scripts/install.sh --uninstall [OPTIONS] [PREFIX]

Builds the release library (cargo decides what is stale), links the installable libxce.so
(soname libxce.so.0, every export versioned XCE_0.1, debug info split off), and installs:
  LIBDIR/libxce.so.VERSION, libxce.so.0 -> it, libxce.so -> libxce.so.0
  LIBDIR/.debug/libxce.so.VERSION.debug     (found by gdb through the .gnu_debuglink)
  LIBDIR/libxce.a, LIBDIR/pkgconfig/xce.pc, INCLUDEDIR/xce/xce.h
  BINDIR/xce_test, MANDIR/man1/xce_test.1   (unless --no-tools)
  BINDIR/xce-controller, MANDIR/man1/xce-controller.1   (unless --no-tools; built in release)

options:
  --prefix DIR      installation prefix (default /usr/local); the positional PREFIX is the same.
                    A relative DIR is taken relative to the current directory.
  --libdir DIR      default PREFIX/lib (e.g. lib/x86_64-linux-gnu); relative: under PREFIX
  --includedir DIR  default PREFIX/include; relative: under PREFIX
  --bindir DIR      default PREFIX/bin; relative: under PREFIX
  --mandir DIR      default PREFIX/share/man; relative: under PREFIX
  --destdir DIR     stage under DIR (as $DESTDIR does); paths inside files stay PREFIX-based
  --no-tools        library, header and pkg-config file only (no xce_test, no xce-controller)
  --no-build        use what is already in target/release (fails if it is missing)
  --uninstall       remove exactly what an install with the same options installs, and the
                    directories that leaves empty (never PREFIX itself)
  -h, --help        this text
EOF
}

prefix=/usr/local; libdir=; includedir=; bindir=; mandir=; destdir=${DESTDIR:-}
tools=1; build=1; action=install
while [ $# -gt 0 ]; do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --prefix|--libdir|--includedir|--bindir|--mandir|--destdir)
      [ $# -ge 2 ] || { echo "install.sh: $1 needs a value" >&2; usage >&2; exit 2; }
      v=$2; case $1 in
        --prefix) prefix=$v ;; --libdir) libdir=$v ;; --includedir) includedir=$v ;;
        --bindir) bindir=$v ;; --mandir) mandir=$v ;; --destdir) destdir=$v ;;
      esac; shift 2 ;;
    --prefix=*|--libdir=*|--includedir=*|--bindir=*|--mandir=*|--destdir=*)
      set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;
    --no-tools) tools=0; shift ;;
    --no-build) build=0; shift ;;
    --uninstall) action=uninstall; shift ;;
    -*) echo "install.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) prefix=$1; shift ;;
  esac
done

# Absolute, normalised paths: PREFIX against the caller's directory, the others under PREFIX.
abspath() { case $1 in /*) realpath -m -- "$1" ;; *) realpath -m -- "$2/$1" ;; esac; }
prefix=$(abspath "$prefix" "$caller")
libdir=$(abspath "${libdir:-lib}" "$prefix")
includedir=$(abspath "${includedir:-include}" "$prefix")
bindir=$(abspath "${bindir:-bin}" "$prefix")
mandir=$(abspath "${mandir:-share/man}" "$prefix")
[ -z "$destdir" ] || destdir=$(abspath "$destdir" "$caller")

cd "$repo"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
major=${version%%.*}
real="libxce.so.$version"
dist=target/release/dist

# What an install puts where (uninstall removes exactly these).
files=("$libdir/$real" "$libdir/libxce.so.$major" "$libdir/libxce.so" "$libdir/.debug/$real.debug"
       "$libdir/libxce.a" "$libdir/pkgconfig/xce.pc" "$includedir/xce/xce.h")
[ $tools -eq 0 ] || files+=("$bindir/xce_test" "$mandir/man1/xce_test.1"
                            "$bindir/xce-controller" "$mandir/man1/xce-controller.1")

if [ $action = uninstall ]; then
  removed=0
  for f in "${files[@]}"; do
    if [ -e "$destdir$f" ] || [ -L "$destdir$f" ]; then rm -f -- "$destdir$f"; removed=$((removed + 1)); fi
  done
  # Directories the install created and that are now empty, deepest first; PREFIX stays.
  for d in "$libdir/.debug" "$libdir/pkgconfig" "$includedir/xce" "$mandir/man1" "$mandir" \
           "$(dirname "$mandir")" "$bindir" "$includedir" "$libdir"; do
    while [ "$d" != "$prefix" ] && [ "$d" != / ] && [ "${d#"$prefix"/}" != "$d" ]; do
      rmdir -- "$destdir$d" 2>/dev/null || break
      d=$(dirname "$d")
    done
  done
  echo "uninstalled libxce $version from $destdir$prefix ($removed files)"
  exit 0
fi

# 1. The release library. cargo rebuilds whatever is stale; --print native-static-libs gives
#    the system libraries a static link needs (cargo replays the note when nothing changed).
if [ $build -eq 1 ]; then
  log=$(cargo rustc --release -p xce --lib --quiet -- --print native-static-libs 2>&1) \
    || { echo "$log" >&2; echo "install.sh: cargo build failed" >&2; exit 1; }
  native=$(sed -n 's/.*native-static-libs: //p' <<<"$log" | tail -1)
  [ -n "$native" ] || { echo "$log" >&2; echo "install.sh: rustc did not print native-static-libs" >&2; exit 1; }
  mkdir -p "$dist"; printf '%s\n' "$native" > "$dist/native-static-libs"
  if [ $tools -eq 1 ]; then
    cargo build --release -p xce-controller --quiet \
      || { echo "install.sh: cargo build of xce-controller failed" >&2; exit 1; }
  fi
else
  # Issue 26: no cargo needed. A library built by `cargo build --release` (not by this script)
  # has no recorded native-static-libs: the list rustc prints for linux-gnu is used then.
  [ -f target/release/libxce.a ] \
    || { echo "install.sh: --no-build, but no target/release/libxce.a (build it first: cargo build --release -p xce)" >&2; exit 1; }
  [ $tools -eq 0 ] || [ -x target/release/xce-controller ] \
    || { echo "install.sh: --no-build, but no target/release/xce-controller (build it: cargo build --release -p xce-controller; or use --no-tools)" >&2; exit 1; }
  mkdir -p "$dist"
  if [ -f "$dist/native-static-libs" ]; then
    native=$(cat "$dist/native-static-libs")
  else
    native="-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"
    echo "install.sh: --no-build: no recorded native-static-libs, using: $native" >&2
  fi
fi

# 2. The installable shared library, linked from the static one: rustc gives a cdylib its own
#    anonymous version script, which GNU ld lets win over ours, so the symbol versions of
#    xce.map (XCE_0.1) are applied by this link. Debug info goes to a separate file.
cc=${CC:-cc}
# shellcheck disable=SC2086
"$cc" -shared -o "$dist/$real" -Wl,--whole-archive target/release/libxce.a -Wl,--no-whole-archive \
  -Wl,--version-script=xce.map -Wl,-soname,libxce.so.$major -Wl,--gc-sections \
  -Wl,-z,relro,-z,now,-z,noexecstack -Wl,--as-needed $native
objcopy --only-keep-debug "$dist/$real" "$dist/$real.debug"
strip --strip-unneeded "$dist/$real"
( cd "$dist" && objcopy --add-gnu-debuglink="$real.debug" "$real" )
strip --strip-debug -o "$dist/libxce.a" target/release/libxce.a
ln -sfn "$real" "$dist/libxce.so.$major"; ln -sfn "libxce.so.$major" "$dist/libxce.so"

# 3. The pkg-config file: paths under ${prefix} when they are, Libs.private from rustc, with
#    the static unwinder (-lgcc_eh) for rustc's -lgcc_s: `pkg-config --static` is for static
#    links, and a fully static one (-static) has no libgcc_s to link.
rel() { case $1 in "$prefix") echo '${prefix}' ;; "$prefix"/*) echo "\${prefix}/${1#"$prefix"/}" ;; *) echo "$1" ;; esac; }
sed -e "s|@PREFIX@|$prefix|g" -e "s|@LIBDIR@|$(rel "$libdir")|g" \
    -e "s|@INCLUDEDIR@|$(rel "$includedir")|g" -e "s|@VERSION@|$version|g" \
    -e "s|@LIBS_PRIVATE@|$(sed -E 's/(^| )-lgcc_s( |$)/\1-lgcc_eh\2/g' <<<"$native")|g" \
    xce.pc.in > "$dist/xce.pc"

# 4. xce_test, linked against the library being installed; it finds it relative to itself.
if [ $tools -eq 1 ]; then
  rpath=()
  case $libdir in /usr/lib|/usr/lib64|/lib|/lib64|/usr/lib/*-linux-gnu) ;;
    *) rpath=("-Wl,-rpath,\$ORIGIN/$(realpath -m --relative-to="$bindir" "$libdir")") ;;
  esac
  "$cc" -std=c11 -O2 -Wall -Wextra -Werror -Iinclude ctests/xce_test.c -o "$dist/xce_test" \
    -L"$dist" -lxce "${rpath[@]}"
fi

# 5. Copy into place.
install -d "$destdir$libdir/.debug" "$destdir$libdir/pkgconfig" "$destdir$includedir/xce"
install -m 0755 "$dist/$real" "$destdir$libdir/$real"
install -m 0644 "$dist/$real.debug" "$destdir$libdir/.debug/$real.debug"
ln -sfn "$real" "$destdir$libdir/libxce.so.$major"
ln -sfn "libxce.so.$major" "$destdir$libdir/libxce.so"
install -m 0644 "$dist/libxce.a" "$destdir$libdir/libxce.a"
install -m 0644 "$dist/xce.pc" "$destdir$libdir/pkgconfig/xce.pc"
install -m 0644 include/xce/xce.h "$destdir$includedir/xce/xce.h"
if [ $tools -eq 1 ]; then
  install -d "$destdir$bindir" "$destdir$mandir/man1"
  install -m 0755 "$dist/xce_test" "$destdir$bindir/xce_test"
  install -m 0644 docs/man/xce_test.1 "$destdir$mandir/man1/xce_test.1"
  install -m 0755 target/release/xce-controller "$destdir$bindir/xce-controller"
  install -m 0644 docs/man/xce-controller.1 "$destdir$mandir/man1/xce-controller.1"
fi
echo "installed libxce $version into $destdir$prefix (libdir $libdir)"
