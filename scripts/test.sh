#!/usr/bin/env bash
# The whole test suite: builds (incrementally) into BUILD_DIR (default build) and runs ctest.
# Extra arguments go to CMake, e.g. scripts/test.sh build-asan -DNEXUS_SANITIZE=ON
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
dir=${1:-build}; shift || true
# The SWIG bindings are part of the suite (labels python, java); later arguments override.
scripts/build.sh "$dir" -DNEXUS_PYTHON=ON -DNEXUS_JAVA=ON "$@"
ctest --test-dir "$dir" --output-on-failure -j"$(nproc)"
