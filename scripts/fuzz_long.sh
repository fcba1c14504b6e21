#!/usr/bin/env bash
# The long fuzzing runs (outside CI): each libFuzzer harness of tests/fuzz for RUNS executions
# (default 10^6) from its committed seeds, two at a time, in the clang sanitizer build that CI
# uses (BUILD_DIR, default build-sanitize; configured here if missing). Prints one line per harness
# (executions, edges covered, corpus size, seconds) for docs/fuzzing.md; a finding stops that
# harness and leaves its input as crash-* / timeout-* / oom-* in OUT (default fuzz-out).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build-sanitize}
runs=${RUNS:-1000000}
out=${OUT:-fuzz-out}
mkdir -p "$out"
if [ ! -d "$build/tests/fuzz" ]; then
  CC=clang CXX=clang++ scripts/build.sh "$build" -DNEXUS_SANITIZE=ON -DNEXUS_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DNEXUS_CUDA=OFF -DNEXUS_PYTHON=OFF -DNEXUS_JAVA=OFF
fi
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
run() {
  local h=$1 start
  start=$(date +%s)
  mkdir -p "$out/corpus/$h"
  (cd "$out" && "$OLDPWD/$build/tests/fuzz/$h" -runs="$runs" -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
     "corpus/$h" "$OLDPWD/tests/fuzz/seeds/$h" > "$h.log" 2>&1) && status=ok || status="FINDING (see $out/$h.log)"
  local execs cov corp
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$out/$h.log" | tail -1 | awk '{print $2}')
  cov=$(grep -o 'cov: [0-9]*' "$out/$h.log" | tail -1 | awk '{print $2}')
  corp=$(ls "$out/corpus/$h" | wc -l)
  echo "$h: $status, ${execs:-?} executions, ${cov:-?} edges covered, $corp corpus inputs, $(( $(date +%s) - start )) s"
}
harnesses=$(cd tests/fuzz && ls fuzz_*.c | sed 's/\.c$//')
pids=()
for h in $harnesses; do
  run "$h" &
  pids+=($!)
  if (( ${#pids[@]} >= 2 )); then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
done
wait
