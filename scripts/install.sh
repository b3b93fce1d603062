#!/usr/bin/env bash
# Installs libxce into PREFIX: lib/libxce.so.VERSION (+ libxce.so.0, libxce.so symlinks),
# lib/libxce.a, include/xce/xce.h, lib/pkgconfig/xce.pc (from xce.pc.in).
#   scripts/install.sh PREFIX          (DESTDIR is honoured for staged installs)
# Builds the release library first when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 1 ] || { echo "usage: $0 PREFIX" >&2; exit 2; }
prefix=$1
case $prefix in /*) ;; *) prefix=$(cd "$prefix" 2>/dev/null && pwd || echo "$PWD/$prefix");; esac
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
major=${version%%.*}
[ -f target/release/libxce.so ] || cargo build --release --lib --quiet
dest="${DESTDIR:-}$prefix"
install -d "$dest/lib/pkgconfig" "$dest/include/xce"
install -m 0755 target/release/libxce.so "$dest/lib/libxce.so.$version"
ln -sfn "libxce.so.$version" "$dest/lib/libxce.so.$major"
ln -sfn "libxce.so.$major" "$dest/lib/libxce.so"
install -m 0644 target/release/libxce.a "$dest/lib/libxce.a"
install -m 0644 include/xce/xce.h "$dest/include/xce/xce.h"
sed -e "s|@PREFIX@|$prefix|g" -e "s|@VERSION@|$version|g" xce.pc.in > "$dest/lib/pkgconfig/xce.pc"
echo "installed libxce $version into $dest"
