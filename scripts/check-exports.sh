#!/usr/bin/env bash
# Checks an installable libxce.so (as scripts/install.sh links it) against the header, at test
# time: the functions it exports are exactly the functions include/xce/xce.h declares, every
# one carries the symbol version XCE_0.1 (xce.map) as its default version, nothing else is
# exported, the soname is libxce.so.0, and no symbol needs a glibc newer than the floor that
# docs/abi.md states.
#   scripts/check-exports.sh LIB [HEADER]
set -euo pipefail
lib=$1
repo=$(cd "$(dirname "$0")/.." && pwd)
header=${2:-$repo/include/xce/xce.h}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
bad() { echo "check-exports: $*" >&2; fails=$((fails + 1)); }

# Functions the header declares: a declaration starts in column 0 with its return type and
# name; typedefs of function pointers ("(*name)") do not match.
grep -E '^[A-Za-z_][A-Za-z0-9_ ]*[ *]+(xce|xcecli)_[A-Za-z0-9_]*\(' "$header" \
  | sed -E 's/^.*[ *]((xce|xcecli)_[A-Za-z0-9_]*)\(.*/\1/' | sort -u > "$tmp/header"
[ -s "$tmp/header" ] || bad "no function found in $header"

# Defined global dynamic symbols, as NAME@@VERSION (the version definition itself excluded).
readelf --dyn-syms -W "$lib" \
  | awk '$5 == "GLOBAL" || $5 == "WEAK" { if ($7 != "UND" && $8 !~ /^XCE_[0-9.]+$/) print $8 }' \
  | sort -u > "$tmp/exported"
sed 's/@.*//' "$tmp/exported" | sort -u > "$tmp/names"
if ! diff -u "$tmp/header" "$tmp/names" > "$tmp/diff"; then
  cat "$tmp/diff" >&2
  bad "exported functions differ from the header's (- header only, + library only)"
fi
grep -v '@@XCE_0\.1$' "$tmp/exported" > "$tmp/unversioned" || true
[ ! -s "$tmp/unversioned" ] || { cat "$tmp/unversioned" >&2; bad "exports without the default version XCE_0.1"; }

soname=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = libxce.so.0 ] || bad "soname is '$soname', not libxce.so.0"

floor=$(grep -m1 -oE 'glibc [0-9]+\.[0-9]+ or later' "$repo/docs/abi.md" | grep -oE '[0-9]+\.[0-9]+' || true)
need=$(objdump -T "$lib" | grep -oE 'GLIBC_[0-9]+\.[0-9]+(\.[0-9]+)?' | sed 's/GLIBC_//' | sort -V | tail -1)
if [ -z "$floor" ]; then bad "docs/abi.md states no glibc floor"
elif [ "$(printf '%s\n%s\n' "$need" "$floor" | sort -V | tail -1)" != "$floor" ]; then
  bad "the library needs glibc $need, above the floor docs/abi.md states ($floor)"
fi

n=$(wc -l < "$tmp/header")
[ $fails -eq 0 ] || exit 1
echo "check-exports: $n functions = the header's, all @@XCE_0.1; soname $soname; needs glibc $need (floor $floor)"
