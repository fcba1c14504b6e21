#!/usr/bin/env bash
# The first command of a new user: install what is missing, build, run the main job: a small
# GPT trained on Moby Dick (a few minutes on a 2-core CPU; larger and faster on a GPU), which
# ends by printing text sampled with the KV cache.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/get_data.sh
scripts/build.sh build
echo "== main job: examples/c/train_gpt (outputs in out/) =="
if [ -n "${NEXUS_GPT_STEPS:-}" ]; then ./build/train_gpt data/mobydick.txt "$NEXUS_GPT_STEPS" out; else ./build/train_gpt data/mobydick.txt; fi
# The loss curves (out/loss_curve.csv) as out/loss_curve.png. Without matplotlib the script says
# how to install it, and the main job still counts as done.
/usr/bin/python3 scripts/plot.py --title "GPT on Moby Dick" out/loss_curve.csv \
  || echo "(out/loss_curve.png not drawn: see the message above; the training results are in out/)"
