#!/usr/bin/env bash
# Data-parallel scaling of the GPT-2 124M step (bench/dist_bench.c): a plain one-process run as
# the baseline, then --gpus 1, 2, 4, ... up to the device count (or MAX_GPUS); prints tokens/s
# and the efficiency against linear scaling of the baseline.
# usage: bench/dist_bench.sh BUILD_DIR [batch_per_gpu=8] [steps=20] [f32|bf16]
set -euo pipefail
bin=${1:?usage: bench/dist_bench.sh BUILD_DIR [batch] [steps] [f32|bf16]}/bench/dist_bench
shift
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
devices=$(nvidia-smi -L 2>/dev/null | wc -l)
max=${MAX_GPUS:-$devices}
(( max >= 1 )) || { echo "no GPU"; exit 1; }
runs=(0)
for ((n = 1; n < max; n *= 2)); do runs+=("$n"); done
runs+=("$max")
base=""
printf "%-6s %-4s %14s %10s %11s\n" gpus ddp tokens/s step_ms efficiency
for n in "${runs[@]}"; do
  if (( n == 0 )); then line=$("$bin" "$@" | grep '^RESULT'); else line=$("$bin" --gpus "$n" "$@" | grep '^RESULT'); fi
  tps=$(sed -E 's/.*tokens_per_s=([0-9.]+).*/\1/' <<<"$line")
  ms=$(sed -E 's/.*step_ms=([0-9.]+).*/\1/' <<<"$line")
  g=$(sed -E 's/.*gpus=([0-9]+).*/\1/' <<<"$line")
  d=$(sed -E 's/.*ddp=([01]).*/\1/' <<<"$line")
  [[ -z $base ]] && base=$tps
  eff=$(awk -v t="$tps" -v b="$base" -v g="$g" 'BEGIN { printf "%.1f%%", 100 * t / (g * b) }')
  printf "%-6s %-4s %14s %10s %11s\n" "$g" "$d" "$tps" "$ms" "$eff"
done
