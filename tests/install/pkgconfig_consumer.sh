#!/usr/bin/env bash
# usage: pkgconfig_consumer.sh BUILD_DIR PREFIX SOURCE.c
set -euo pipefail
build=$1 prefix=$2 src=$3
rm -rf "$prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig:$prefix/lib/x86_64-linux-gnu/pkgconfig"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$src" "$work/prog.c"
cd "$work"
cc prog.c $(pkg-config --cflags --libs nexus) -o prog
./prog | tee out.txt
grep -q "loss = " out.txt
grep -q "live tensors after freeing: 0" out.txt
