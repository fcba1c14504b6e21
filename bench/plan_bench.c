/* Eager against compiled (nx_plan_run) training steps of one GPT, in one process: two copies of
 * the model from the same seed, trained on the same batches, one step at a time as a user's loop
 * runs them (set the learning rate, run the step, read the loss on the host every step, as the
 * PyTorch twins do). The sizes are example_util.h's (NEXUS_GPT_SIZE names): "small" is the CPU
 * main job, "bench" the GPU one (6 x 256, batch 32 x 128), "gpt2" GPT-2 124M's shape.
 *
 * usage: plan_bench [size=bench] [cpu|cuda] [steps=50] [f32|bf16] [batch=size's]
 * Prints one line per mode (eager, then plan) and a summary:
 *   RESULT size=S device=D mode=M batch=B eager_tok_s=X plan_tok_s=Y ratio=Y/X eager_peak_mib=P
 *          plan_peak_mib=Q peak_ratio=Q/P arena_mib=A step_peak_mib=E ops=N graph=G max_loss_diff=L
 * PLAN_BENCH_INTERLEAVE=1 alternates the two models step by step (run_interleaved) and also prints
 * pair_ratio_median, the median of each step pair's eager / replay time (0 otherwise).
 * Peaks are the CUDA allocator's over the timed steps (0 on the CPU); arena_mib against
 * step_peak_mib compares the plan's arena with the step's own allocations at their eager peak. */
#include <math.h>

#include "bench_util.h"

typedef ExGptTrainer Model;

enum { kBatches = 4, kWarmup = 3 };

/* Step s of m (through plan when given): sets the learning rate, runs the step, reads the loss on
 * the host. Returns the loss; *seconds is the step's wall time, host read included. */
static double one_step(Model* m, nx_plan plan, nx_tensor* xs, nx_tensor* ys, int64_t s, int64_t total, double lr,
                       double* seconds) {
  const double t0 = ex_now();
  CHECK(nx_optimizer_set_lr(m->opt, nx_lr_cosine_warmup(lr, s, 5, total, lr * 0.1)));
  const nx_tensor in[2] = {xs[s % kBatches], ys[s % kBatches]};
  nx_tensor loss;
  if (plan) CHECK(nx_plan_run(plan, &loss, 1, in, 2, NULL));
  else CHECK(ex_gpt_train_step(&loss, 1, in, 2, m));
  double v;
  CHECK(nx_tensor_item(loss, &v, NULL));  /* every step, as a training loop logs it */
  nx_tensor_free(loss);
  *seconds = ex_now() - t0;
  return v;
}

/* Trains m for warmup + steps steps (through plan when given); losses[steps] of the timed ones. */
static double run(Model* m, nx_plan plan, nx_tensor* xs, nx_tensor* ys, int64_t steps, double lr, nx_device dev,
                  double* losses, double* peak_mib) {
  double elapsed = 0, dt;
  for (int64_t s = 0; s < kWarmup + steps; ++s) {
    if (s == kWarmup) {
      CHECK(nx_stream_synchronize(NULL));
      if (dev.type == NX_CUDA) CHECK(nx_cuda_reset_peak_memory(0));
    }
    const double v = one_step(m, plan, xs, ys, s, kWarmup + steps, lr, &dt);
    if (s >= kWarmup) losses[s - kWarmup] = v, elapsed += dt;
  }
  CHECK(nx_stream_synchronize(NULL));
  *peak_mib = 0;
  if (dev.type == NX_CUDA) {
    nx_cuda_memory_stats mem = {sizeof mem};
    CHECK(nx_cuda_get_memory_stats(0, &mem));
    *peak_mib = (double)mem.peak_allocated_bytes / 1048576.0;
  }
  return elapsed;
}

/* PLAN_BENCH_INTERLEAVE=1: both models train side by side, eager step s then replayed step s, so
 * a machine whose speed drifts during the run (a shared VM) slows both alike; the ratio is that of
 * the summed step times. Peaks are not separable then (both models live at once) and read 0. */
static int by_value(const void* x, const void* y) {
  const double a = *(const double*)x, b = *(const double*)y;
  return (a > b) - (a < b);
}

/* Also returns the median over steps of eager's step time / the replay's next to it: a machine
 * whose speed drifts moves both halves of a pair alike, so this is steadier than the totals'
 * ratio on a shared VM. */
static double run_interleaved(Model* a, Model* b, nx_plan plan, nx_tensor* xs, nx_tensor* ys, int64_t steps,
                              double lr, double* eager_loss, double* plan_loss, double* t_eager, double* t_plan) {
  double dt_e, dt_p;
  double* pair_ratio = malloc(sizeof(double) * (size_t)steps);
  *t_eager = *t_plan = 0;
  for (int64_t s = 0; s < kWarmup + steps; ++s) {
    const double ve = one_step(a, NULL, xs, ys, s, kWarmup + steps, lr, &dt_e);
    const double vp = one_step(b, plan, xs, ys, s, kWarmup + steps, lr, &dt_p);
    if (s < kWarmup) continue;
    eager_loss[s - kWarmup] = ve, *t_eager += dt_e;
    plan_loss[s - kWarmup] = vp, *t_plan += dt_p;
    pair_ratio[s - kWarmup] = dt_e / dt_p;
  }
  qsort(pair_ratio, (size_t)steps, sizeof(double), by_value);
  const double median = steps % 2 ? pair_ratio[steps / 2] : 0.5 * (pair_ratio[steps / 2 - 1] + pair_ratio[steps / 2]);
  free(pair_ratio);
  return median;
}

int main(int argc, char** argv) {
  const char* size_name = argc > 1 ? argv[1] : "bench";
  ExGptSize sz = *bench_gpt_size(size_name);
  const nx_device dev = {argc > 2 && !strcmp(argv[2], "cpu") ? NX_CPU : NX_CUDA, 0};
  const int64_t steps = argc > 3 ? atoll(argv[3]) : 50;
  const bool bf16 = argc > 4 && !strcmp(argv[4], "bf16");
  if (argc > 5) sz.batch = atoll(argv[5]);
  if (dev.type == NX_CUDA && nx_cuda_device_count() == 0) {
    fprintf(stderr, "plan_bench: no CUDA device (pass cpu)\n");
    return 2;
  }
  if (dev.type == NX_CUDA) CHECK(nx_cuda_set_tf32(true));

  nx_tensor xs[kBatches], ys[kBatches];
  bench_token_batches(&sz, dev, kBatches, xs, ys);

  double* eager_loss = (double*)malloc((size_t)steps * sizeof(double));
  double* plan_loss = (double*)malloc((size_t)steps * sizeof(double));
  double eager_peak = 0, plan_peak = 0, t_eager, t_plan, pair_median = 0;
  const bool interleave = getenv("PLAN_BENCH_INTERLEAVE") && atoi(getenv("PLAN_BENCH_INTERLEAVE"));
  Model a = bench_gpt_model(&sz, dev, bf16);
  if (!interleave) {
    t_eager = run(&a, NULL, xs, ys, steps, sz.lr, dev, eager_loss, &eager_peak);
    bench_gpt_free(&a);
    CHECK(nx_stream_synchronize(NULL));
    if (dev.type == NX_CUDA) CHECK(nx_cuda_empty_cache(0));
  }
  Model b = bench_gpt_model(&sz, dev, bf16);
  nx_plan plan;
  CHECK(nx_plan_create(&plan, ex_gpt_train_step, &b, 1, NULL));
  if (interleave) {
    pair_median = run_interleaved(&a, &b, plan, xs, ys, steps, sz.lr, eager_loss, plan_loss, &t_eager, &t_plan);
    bench_gpt_free(&a);
  } else {
    t_plan = run(&b, plan, xs, ys, steps, sz.lr, dev, plan_loss, &plan_peak);
  }
  nx_plan_stats ps = {sizeof ps};
  CHECK(nx_plan_get_stats(plan, &ps));
  if (getenv("PLAN_BENCH_DUMP")) {
    const char* text;
    CHECK(nx_plan_to_string(plan, NX_PLAN_TABLE, &text));
    FILE* f = fopen(getenv("PLAN_BENCH_DUMP"), "w");
    if (f) fputs(text, f), fclose(f);
  }
  double max_diff = 0;
  for (int64_t s = 0; s < steps; ++s) max_diff = fmax(max_diff, fabs(eager_loss[s] - plan_loss[s]));
  const double tokens = (double)(steps * sz.batch * sz.context);
  printf("RESULT size=%s device=%s mode=%s batch=%lld eager_tok_s=%.0f plan_tok_s=%.0f ratio=%.3f eager_peak_mib=%.1f "
         "plan_peak_mib=%.1f peak_ratio=%.3f arena_mib=%.1f step_peak_mib=%.1f ops=%lld graph=%d replays=%lld "
         "max_loss_diff=%.3g loss_last=%.4f pair_ratio_median=%.3f\n",
         size_name, dev.type == NX_CUDA ? "cuda" : "cpu", bf16 ? "bf16" : "f32", (long long)sz.batch,
         tokens / t_eager, tokens / t_plan, t_eager / t_plan, eager_peak, plan_peak,
         eager_peak > 0 ? plan_peak / eager_peak : 0.0, ps.arena_bytes / 1048576.0, ps.eager_peak_bytes / 1048576.0,
         (long long)ps.ops, ps.cuda_graph ? 1 : 0, (long long)ps.replays, max_diff, plan_loss[steps - 1], pair_median);
  nx_plan_free(plan);
  bench_gpt_free(&b);
  for (int i = 0; i < kBatches; ++i) nx_tensor_free(xs[i]), nx_tensor_free(ys[i]);
  free(eager_loss), free(plan_loss);
  return 0;
}
