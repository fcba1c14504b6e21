/* The profiler on a GPT training step (example_util.h's sizes; the step of train_gpt): its
 * summary table and Chrome trace for one step, the cost of recording, and the cost of the hooks
 * when nothing records.
 *
 * usage: profiler_bench [size=small] [cpu|cuda] [steps=20] [trace.json]
 * Runs `steps` steps unprofiled, `steps` steps profiled (alternating blocks of 5, so drift in
 * clocks hits both), then profiles one more step alone and prints its table (sorted by total
 * time, then by device time on a GPU) and writes its trace. The last line:
 *   RESULT size=S device=D step_ms_off=A step_ms_on=B on_overhead=B/A-1 hooks_per_step=E
 *          hook_ns=H off_overhead_bound=E*H/A
 * A hook that finds the profiler off is one relaxed atomic load and a branch; hook_ns times that
 * here (a C11 relaxed load in a loop of this program, the same instruction), and
 * off_overhead_bound is the hooks one step passes (its events and memory samples) times it, as
 * a fraction of the unprofiled step. */
#include <stdatomic.h>

#include "bench_util.h"

enum { kBatches = 4, kBlock = 5 };

static double timed_steps(ExGptTrainer* m, nx_tensor* xs, nx_tensor* ys, int64_t steps, bool profiled,
                          int64_t* events) {
  nx_profile p = NULL;
  if (profiled) CHECK(nx_profiler_start(NULL));
  CHECK(nx_stream_synchronize(NULL));
  const double t0 = ex_now();
  for (int64_t s = 0; s < steps; ++s) {
    const nx_tensor in[2] = {xs[s % kBatches], ys[s % kBatches]};
    nx_tensor loss;
    CHECK(ex_gpt_train_step(&loss, 1, in, 2, m));
    double v;
    CHECK(nx_tensor_item(loss, &v, NULL)); /* a training loop logs the loss every step */
    nx_tensor_free(loss);
  }
  CHECK(nx_stream_synchronize(NULL));
  const double t = ex_now() - t0;
  if (profiled) {
    CHECK(nx_profiler_stop(&p));
    int64_t samples = 0;
    CHECK(nx_profile_event_count(p, events));
    CHECK(nx_profile_memory_count(p, &samples));
    *events += samples; /* each allocation and release passes a hook too (backend()) */
    nx_profile_free(p);
  }
  return t;
}

/* Nanoseconds of one relaxed atomic load and a not-taken branch, the check of a hook when off. */
static double hook_ns(void) {
  static _Atomic unsigned flags = 0;
  const long n = 200000000;
  long taken = 0;
  const double t0 = ex_now();
  for (long i = 0; i < n; ++i)
    if (atomic_load_explicit(&flags, memory_order_relaxed)) taken++;
  const double t = ex_now() - t0;
  if (taken) printf("unexpected\n");
  return t / n * 1e9;
}

int main(int argc, char** argv) {
  const char* size_name = argc > 1 ? argv[1] : "small";
  const ExGptSize* sz = bench_gpt_size(size_name);
  const nx_device dev = {argc > 2 && !strcmp(argv[2], "cuda") ? NX_CUDA : NX_CPU, 0};
  const int64_t steps = argc > 3 ? atoll(argv[3]) : 20;
  const char* trace_path = argc > 4 ? argv[4] : "profile_trace.json";
  if (dev.type == NX_CUDA && nx_cuda_device_count() == 0) {
    fprintf(stderr, "profiler_bench: no CUDA device (pass cpu)\n");
    return 2;
  }
  if (dev.type == NX_CUDA) CHECK(nx_cuda_set_tf32(true));
  nx_tensor xs[kBatches], ys[kBatches];
  bench_token_batches(sz, dev, kBatches, xs, ys);
  ExGptTrainer m = bench_gpt_model(sz, dev, false);
  int64_t events = 0;
  timed_steps(&m, xs, ys, 3, false, &events); /* warm-up: caches, kernels chosen */
  double off = 0, on = 0;
  int64_t on_events = 0;
  for (int64_t done = 0; done < steps; done += kBlock) {
    const double a = timed_steps(&m, xs, ys, kBlock, false, &events);
    const double b = timed_steps(&m, xs, ys, kBlock, true, &events);
    printf("block %lld: %.3f ms a step unprofiled, %.3f profiled\n", (long long)(done / kBlock), a * 1e3 / kBlock,
           b * 1e3 / kBlock);
    off += a, on += b;
    on_events += events;
  }
  const int64_t blocks = (steps + kBlock - 1) / kBlock, n = blocks * kBlock;
  const double step_off = off / n, step_on = on / n;
  const double per_step = (double)on_events / n;

  /* One step alone: its table and trace. */
  CHECK(nx_profiler_start(NULL));
  CHECK(nx_profiler_range_push("train step"));
  const nx_tensor in[2] = {xs[0], ys[0]};
  nx_tensor loss;
  CHECK(ex_gpt_train_step(&loss, 1, in, 2, &m));
  double v;
  CHECK(nx_tensor_item(loss, &v, NULL));
  nx_tensor_free(loss);
  CHECK(nx_profiler_range_pop());
  nx_profile p;
  CHECK(nx_profiler_stop(&p));
  char* table;
  CHECK(nx_profile_summary(p, NX_PROFILE_SORT_TOTAL, 25, &table));
  printf("== one training step of GPT %s on %s, by total time ==\n%s", size_name, dev.type == NX_CUDA ? "cuda" : "cpu",
         table);
  nx_string_free(table);
  if (dev.type == NX_CUDA) {
    CHECK(nx_profile_summary(p, NX_PROFILE_SORT_DEVICE, 25, &table));
    printf("== the same step by device time ==\n%s", table);
    nx_string_free(table);
  }
  CHECK(nx_profile_save_chrome_trace(p, trace_path));
  printf("Chrome trace of the step: %s\n", trace_path);
  nx_profile_free(p);

  const double h = hook_ns();
  printf("RESULT size=%s device=%s step_ms_off=%.3f step_ms_on=%.3f on_overhead=%.4f hooks_per_step=%.0f hook_ns=%.3f "
         "off_overhead_bound=%.2e\n",
         size_name, dev.type == NX_CUDA ? "cuda" : "cpu", step_off * 1e3, step_on * 1e3, step_on / step_off - 1,
         per_step, h, per_step * h * 1e-9 / step_off);
  bench_gpt_free(&m);
  for (int i = 0; i < kBatches; ++i) nx_tensor_free(xs[i]), nx_tensor_free(ys[i]);
  return 0;
}
