#!/usr/bin/env bash
# The first command of a new user: install what is missing, build, run the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh build
echo "== main job: examples/c/quickstart =="
./build/quickstart
