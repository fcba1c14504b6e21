#!/usr/bin/env bash
# On the GPU machine (see ../shared/gpu/README.md): build the CUDA configuration, run the GPU
# tests, compute-sanitizer and the CUDA benchmarks; logs go to $OUT (or ./gpu-out).
# usage: scripts/gpu_run.sh [targets...]   (build test sanitize initprobe castprobe bench attention fused parity_attn harness opbench gpt dist train124m profile proftable amp_curve plan)   (default: everything GPU-related; `dist` runs the multi-GPU
# tests, a 2-rank train_gpt and bench/dist_bench.sh, and is not in the default)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
[ -f .gpu/setup.sh ] && source .gpu/setup.sh
export NCCL_NVLS_ENABLE=0
steps=${*:-build test harness sanitize bench}
log() { echo "== $*" | tee -a "$out/summary.txt"; }
# The CUDA build with the Python module, in build-gpu-py (the attention parity and the op harness use it).
build_python_module() {
  cmake -S . -B build-gpu-py -G Ninja -DNEXUS_CUDA=ON -DNEXUS_CUDA_ARCHS=90a -DNEXUS_PYTHON=ON -DNEXUS_TESTS=OFF \
    -DPython3_EXECUTABLE="$(command -v python3)" > "$out/configure_py.log" 2>&1 && \
  cmake --build build-gpu-py --target nexus_python nexus_python_package > "$out/build_py.log" 2>&1 \
    || { tail -30 "$out/configure_py.log" "$out/build_py.log"; exit 1; }
}
if [[ $steps == *build* ]]; then
  log "build"
  cmake -S . -B build-gpu -G Ninja -DNEXUS_CUDA=ON -DNEXUS_CUDA_ARCHS=90a -DNEXUS_TORCH_PYTHON="$(command -v python3)" \
    > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
  cmake --build build-gpu --target ${BUILD_TARGETS:-nexus_gpu_tests nexus_gpu_oom_test cuda_bench fused_bench attention_bench dist_bench train_gpt2 quickstart train_gpt plan_bench profiler_bench capi_gpu_tests} > "$out/build.log" 2>&1 \
    || { grep -E 'error' -A3 "$out/build.log" | head -60; exit 1; }
fi
if [[ $steps == *test* ]]; then
  log "ctest -L gpu"
  ctest --test-dir build-gpu -L gpu -j8 --output-on-failure > "$out/ctest_gpu.log" 2>&1
  tail -4 "$out/ctest_gpu.log" | tee -a "$out/summary.txt"
  grep -E 'Failed|\*\*\*' "$out/ctest_gpu.log" | head -40
fi
if [[ $steps == *sanitize* ]]; then
  # The four compute-sanitizer tools at once, each over the CUDA gtest suite and the compiled-plan
  # test (CUDA graphs, fusion), with the caching allocator off (NEXUS_CUDA_NO_CACHING) so memcheck
  # sees each tensor's exact bounds and initcheck fresh memory. Left out: the tests that count
  # cudaMalloc calls (they assert the cache), the device-filling OOM test and the multi-GPU ones.
  log "compute-sanitizer ${SAN_TOOLS:-memcheck racecheck initcheck synccheck}"
  san_filter=${SAN_FILTER:--*CachingAllocatorReusesMemory*:*NoNewAllocation*:*OutOfMemory*:Dist.*}
  for tool in ${SAN_TOOLS:-memcheck racecheck initcheck synccheck}; do
    (
      export NEXUS_CUDA_NO_CACHING=1 NEXUS_CUDA_INITCHECK=1  # exact-size tensors; cuBLAS half outputs zeroed first
      san="timeout ${SAN_TIMEOUT:-500} compute-sanitizer --tool $tool --error-exitcode 9 --print-limit 1000000"
      : > "$out/sanitizer_${tool}.status"
      if [ "${SAN_GTEST:-1}" = 1 ]; then  # SAN_GTEST=0: only the C API tests below
        $san build-gpu/tests/gpu/nexus_gpu_tests --gtest_filter="$san_filter" > "$out/sanitizer_${tool}.log" 2>&1
        echo "$tool nexus_gpu_tests: exit $?" >> "$out/sanitizer_${tool}.status"
      fi
      if [ "${SAN_CAPI:-1}" = 0 ]; then  # SAN_CAPI=0: only the gtest suite above
        :
      elif [ "${SAN_SPLIT:-0}" = 1 ]; then  # one process per test, each with its own timeout
        for t in $(grep -o 'NX_TEST(test_[a-z0-9_]*' tests/capi/test_plan.c | cut -c9-); do
          NX_TEST_FILTER=$t NEXUS_TEST_PLAN_STEPS=${SAN_PLAN_STEPS:-10} NEXUS_TEST_DEVICE=cuda $san build-gpu/tests/capi/capi_test_plan >> "$out/sanitizer_${tool}_plan.log" 2>&1
          echo "$tool capi_test_plan $t: exit $?" >> "$out/sanitizer_${tool}.status"
        done
      else
        NEXUS_TEST_DEVICE=cuda $san build-gpu/tests/capi/capi_test_plan > "$out/sanitizer_${tool}_plan.log" 2>&1
        echo "$tool capi_test_plan: exit $?" >> "$out/sanitizer_${tool}.status"
      fi
      if [ "${SAN_CAPI:-1}" != 0 ]; then
        NEXUS_TEST_DEVICE=cuda $san build-gpu/tests/capi/capi_test_profiler > "$out/sanitizer_${tool}_profiler.log" 2>&1
        echo "$tool capi_test_profiler: exit $?" >> "$out/sanitizer_${tool}.status"
      fi
    ) &
  done
  wait
  # Per tool: exit codes, the summaries, and the reports counted by test and by kernel (the logs
  # themselves go back as one archive: the device tool returns only a few files).
  for tool in ${SAN_TOOLS:-memcheck racecheck initcheck synccheck}; do
    cat "$out/sanitizer_${tool}.status" | tee -a "$out/summary.txt"
    for f in "$out/sanitizer_${tool}.log" "$out/sanitizer_${tool}_plan.log" "$out/sanitizer_${tool}_profiler.log"; do
      [ -f "$f" ] || continue
      grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|\[  PASSED  \]|\[  FAILED  \]' "$f" | sort | uniq -c
      awk '/\[ RUN /{t=$NF} /^=========  *(Uninitialized|Invalid|Race|Barrier|Error|Program hit|Divergent|Warning)/{n[t]++}
           /^=========     at /{k[$3]++} END{for (x in n) print "  reports in", x, n[x]; for (x in k) print "  at", x, k[x]}' "$f" |
        sort -k4 -nr | head -25
    done | tee -a "$out/summary.txt"
  done
  tar -czf "$out/sanitizer_logs.tar.gz" -C "$out" $(cd "$out" && ls sanitizer_*.log sanitizer_*.status) && \
    rm -f "$out"/sanitizer_*.log "$out"/sanitizer_*.status
fi
if [[ $steps == *castprobe* ]]; then
  # bf16 -> f32 cast variants against the copy rate (bench/cast_probe.cu; docs/decisions.md, session 10)
  log "cast probe"
  nvcc -arch=sm_90a -O3 -std=c++17 -o build-gpu/cast_probe bench/cast_probe.cu > "$out/cast_probe_build.log" 2>&1 \
    && build-gpu/cast_probe | tee "$out/cast_probe.txt" | tee -a "$out/summary.txt"
fi
if [[ $steps == *initprobe* ]]; then
  # Does initcheck see cuBLAS's stores? One cuBLAS GEMM into a fresh buffer, then a plain kernel
  # reads it (tests/gpu/initcheck_probe.cu); "uninit" is the control that must be reported.
  log "initcheck probe"
  nvcc -arch=sm_90a -o build-gpu/initcheck_probe tests/gpu/initcheck_probe.cu -lcublas > "$out/probe_build.log" 2>&1 \
    || tail -20 "$out/probe_build.log"
  for mode in uninit f32 tf32 f16 bf16; do
    compute-sanitizer --tool initcheck --print-limit 3 build-gpu/initcheck_probe $mode > "$out/probe_$mode.log" 2>&1
    echo "probe $mode: exit $? $(grep -E 'ERROR SUMMARY' "$out/probe_$mode.log")" | tee -a "$out/summary.txt"
    grep -m2 -E 'Uninitialized|at .*0x' "$out/probe_$mode.log" | tee -a "$out/summary.txt"
  done
fi
if [[ $steps == *proftable* ]]; then
  # The profiler on a GPT training step (bench/profiler_bench.c): the step's table and Chrome
  # trace, the cost of recording, and the bound on the hooks' cost when off; GPU and host CPU.
  log "profiler bench"
  build-gpu/bench/profiler_bench ${PROF_SIZE:-bench} cuda 20 "$out/profile_trace_cuda.json" > "$out/profiler_cuda.txt" 2>&1
  tail -1 "$out/profiler_cuda.txt" | tee -a "$out/summary.txt"
  OMP_NUM_THREADS=${PROF_CPU_THREADS:-2} build-gpu/bench/profiler_bench small cpu 20 "$out/profile_trace_cpu.json" \
    > "$out/profiler_cpu.txt" 2>&1
  tail -1 "$out/profiler_cpu.txt" | tee -a "$out/summary.txt"
fi
if [[ $steps == *bench* ]]; then
  log "cuda bench"
  python3 bench/cuda_bench.py build-gpu/bench/cuda_bench --json "$out/cuda_bench.json" 2>&1 | tee "$out/cuda_bench.txt"
fi
if [[ $steps == *attention* ]]; then
  # grid: ours through the Python module beside torch SDPA flash and cuDNN, same tensors, one process;
  # decode and memory: the C binary build-gpu/bench/attention_bench (from the build step)
  log "attention bench"
  build_python_module
  PYTHONPATH=build-gpu-py/python timeout ${ATTN_TIMEOUT:-420} python3 bench/attention_bench.py ${ATTN_WHAT:-all} \
    --nexus-bin build-gpu/bench/attention_bench --json "$out/attention_bench.json" 2>&1 | tee "$out/attention_bench.txt"
fi
if [[ $steps == *fused* ]]; then
  # fused kernels (issue #7 part 5): their CPU-vs-CUDA tests, then the benchmark against torch
  log "fused kernels"
  [ -f build-gpu/build.ninja ] || cmake -S . -B build-gpu -G Ninja -DNEXUS_CUDA=ON -DNEXUS_CUDA_ARCHS=90a \
    -DNEXUS_TORCH_PYTHON="$(command -v python3)" > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
  cmake --build build-gpu --target nexus_gpu_tests fused_bench > "$out/build_fused.log" 2>&1 \
    || { grep -E 'error' -A3 "$out/build_fused.log" | head -60; exit 1; }
  build-gpu/tests/gpu/nexus_gpu_tests --gtest_filter='CudaFused*' > "$out/fused_tests.log" 2>&1
  echo "exit $?" | tee -a "$out/summary.txt"
  grep -E '^\[  (PASSED|FAILED|SKIPPED)|Failure|error' "$out/fused_tests.log" | head -30 | tee -a "$out/summary.txt"
  timeout ${FUSED_TIMEOUT:-420} python3 bench/fused_bench.py build-gpu/bench/fused_bench --json "$out/fused_bench.json" 2>&1 \
    | tee "$out/fused_bench.txt"
fi
if [[ $steps == *parity_attn* ]]; then
  # flash attention against torch on this GPU (f64 math reference, SDPA's own error beside ours)
  log "attention parity vs torch"
  build_python_module
  PYTHONPATH=build-gpu-py/python timeout ${PARITY_TIMEOUT:-400} python3 tests/gpu/attention_parity_torch.py \
    > "$out/attention_parity.txt" 2>&1
  echo "exit $?" | tee -a "$out/summary.txt"
  tail -5 "$out/attention_parity.txt" | tee -a "$out/summary.txt"
fi
if [[ $steps == *harness* ]]; then
  # the op harness (tests/harness): every registry op on CPU and CUDA, against torch and CPU-vs-CUDA
  log "op harness"
  build_python_module
  # HARNESS_ARGS (e.g. "--op cone,parcon --device cuda") narrows it to some ops
  PYTHONPATH=build-gpu-py/python timeout ${HARNESS_TIMEOUT:-400} python3 tests/harness/op_harness.py ${HARNESS_ARGS:-} \
    > "$out/op_harness.txt" 2>&1
  echo "exit $?" | tee -a "$out/summary.txt"
  grep -E '^FAIL' "$out/op_harness.txt" | head -40
  tail -1 "$out/op_harness.txt" | tee -a "$out/summary.txt"
  [ -n "${HARNESS_ARGS:-}" ] || {
  log "mixed precision from Python on CUDA (autocast, loss scaling)"
  PYTHONPATH=build-gpu-py/python timeout 300 python3 -m pytest -q -p no:cacheprovider tests/python/test_autocast.py \
    tests/python/test_amp.py > "$out/pytest_amp.txt" 2>&1
  tail -3 "$out/pytest_amp.txt" | tee -a "$out/summary.txt"
  }
  if [[ $steps == *opbench* ]]; then
    PYTHONPATH=build-gpu-py/python timeout ${OPBENCH_TIMEOUT:-300} python3 bench/op_bench.py --device cuda \
      2>&1 | tee "$out/op_bench.txt"
  fi
fi
if [[ $steps == *gpt* ]]; then
  log "train_gpt on the GPU"
  scripts/get_data.sh >/dev/null 2>&1 || true
  [ -s data/mobydick.txt ] && timeout ${GPT_TIMEOUT:-400} build-gpu/train_gpt data/mobydick.txt ${GPT_STEPS:-0} "$out/gpt" 2> "$out/gpt_progress.txt" | tee "$out/train_gpt.txt"
fi
if [[ $steps == *train124m* ]]; then
  # GPT-2 124M training step (issue 15): ours (bench/train_gpt2.c) beside torch eager, and
  # torch.compile with TRAIN_COMPILE=1, for TRAIN_MODES x TRAIN_BATCHES
  log "GPT-2 124M train step vs torch"
  timeout ${TRAIN_TIMEOUT:-500} python3 bench/train_gpt2.py --nexus build-gpu/bench/train_gpt2 \
    --modes ${TRAIN_MODES:-f32,bf16} --batches ${TRAIN_BATCHES:-8,16} ${TRAIN_COMPILE:+--compile} 2>&1 \
    | tee "$out/train_gpt2.txt" | tail -12 | tee -a "$out/summary.txt"
fi
if [[ $steps == *profile* ]]; then
  # where the GPT-2 step's GPU time goes, ours and torch's, kernel by kernel (torch.profiler/CUPTI)
  log "GPT-2 124M step kernel profile"
  build_python_module
  for mode in ${PROFILE_MODES:-f32 bf16}; do
    PYTHONPATH=build-gpu-py/python timeout 300 python3 bench/gpt2_profile.py $mode ${PROFILE_BATCH:-8} \
      > "$out/gpt2_profile_$mode.txt" 2>&1
    grep '^==' "$out/gpt2_profile_$mode.txt" | tee -a "$out/summary.txt"
  done
fi
if [[ $steps == *amp_curve* ]]; then
  # bf16 autocast training of a small GPT, ours and torch's from the same initial weights (issue 15)
  log "bf16 loss curves vs torch"
  build_python_module
  scripts/get_data.sh >/dev/null 2>&1 || true
  PYTHONPATH=build-gpu-py/python timeout 400 python3 bench/gpt_bf16_parity.py data/mobydick.txt "$out" ${AMP_STEPS:-200} \
    > "$out/gpt_bf16_parity.txt" 2>&1
  echo "exit $?" | tee -a "$out/summary.txt"
  tail -3 "$out/gpt_bf16_parity.txt" | tee -a "$out/summary.txt"
fi
if [[ $steps == *plan* ]]; then
  # Compiled steps (issue 16): the plan tests on the GPU (CUDA graphs; bit for bit in deterministic
  # mode), then eager against replay, same process, per size (bench/plan_bench.c).
  log "plan: capi_test_plan on cuda"
  NEXUS_TEST_DEVICE=cuda NEXUS_PLAN_DUMP=1 build-gpu/tests/capi/capi_test_plan > "$out/plan_test.log" 2>&1
  echo "exit $?" | tee -a "$out/summary.txt"
  grep -E '^\[  (PASSED|FAILED|ERROR) |OK \]|ERROR|Failure' "$out/plan_test.log" | head -20 | tee -a "$out/summary.txt"
  log "plan_bench"
  while read -r args; do
    timeout 300 build-gpu/bench/plan_bench $args 2>&1 | tail -3 | tee -a "$out/plan_bench.txt" "$out/summary.txt"
  done <<< "${PLAN_BENCH_RUNS:-bench cuda 100 f32
bench cuda 100 bf16
gpt2 cuda 20 bf16 8
gpt2 cuda 20 bf16 16
gpt2 cuda 10 f32 8
small cpu 20}"
  PLAN_BENCH_DUMP="$out/plan_table_bench.txt" build-gpu/bench/plan_bench bench cuda 5 f32 > /dev/null 2>&1
fi
if [[ $steps == *dist* ]]; then
  log "dist: tests (Dist.*) on $(nvidia-smi -L | wc -l) GPU(s)"
  build-gpu/tests/gpu/nexus_gpu_tests --gtest_filter='Dist.*' > "$out/dist_tests.log" 2>&1
  echo "exit $?" | tee -a "$out/summary.txt"
  grep -E '^\[  (PASSED|FAILED|SKIPPED) |Failure' "$out/dist_tests.log" | head -20 | tee -a "$out/summary.txt"
  scripts/get_data.sh >/dev/null 2>&1 || true
  ngpu=$(nvidia-smi -L | wc -l)
  if [ -s data/mobydick.txt ] && (( ngpu >= 2 )); then
    log "train_gpt --gpus 2"
    timeout ${GPT_TIMEOUT:-300} build-gpu/train_gpt --gpus 2 data/mobydick.txt "${GPT_STEPS:-300}" "$out/gpt_dist" \
      2> "$out/gpt_dist_progress.txt" | tee "$out/train_gpt_dist.txt"
  fi
  log "dist bench (GPT-2 124M step)"
  timeout ${DIST_BENCH_TIMEOUT:-400} bench/dist_bench.sh build-gpu ${DIST_BENCH_ARGS:-8 20 f32} 2>&1 | tee "$out/dist_bench.txt"
fi
