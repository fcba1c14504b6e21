#!/usr/bin/env bash
# usage: cmake_consumer.sh BUILD_DIR PREFIX SOURCE.c — find_package(Nexus) from a separate project
set -euo pipefail
build=$1 prefix=$2 src=$3
rm -rf "$prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$src" "$work/prog.c"
cat > "$work/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.25)
project(consumer C)
find_package(Nexus REQUIRED)
add_executable(prog prog.c)
target_link_libraries(prog PRIVATE Nexus::nexus)
CM
cmake -S "$work" -B "$work/build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/build" >/dev/null
"$work/build/prog" | grep -q "live tensors after freeing: 0"
echo "find_package(Nexus) consumer built and ran"
