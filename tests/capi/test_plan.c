/* Compiled steps (nx_plan_*): a GPT training step (forward, cross-entropy, backward, clipping,
 * AdamW with a cosine schedule) run 100 times eagerly and 100 times through a plan from the same
 * initial state and batches gives the same losses and parameters bit for bit, with dropout too
 * (each replay draws the masks of the eager step it stands for) and with dynamic loss scaling
 * (steps skipped on the device); shapes get their own
 * compiled step; stale plans are captured again; what a replay cannot repeat is refused by name;
 * the plan prints as a table and as DOT. The device is NEXUS_TEST_DEVICE (cpu unless "cuda"). */
#include <stddef.h>

#include "nx_test.h"

#define TRY(call)                    \
  do {                               \
    nx_status st__ = (call);         \
    if (st__ != NX_OK) return st__;  \
  } while (0)

static nx_device test_device(void) {
  const char* d = getenv("NEXUS_TEST_DEVICE");
  nx_device dev = {NX_CPU, 0};
  if (d && !strcmp(d, "cuda")) dev.type = NX_CUDA;
  return dev;
}

typedef struct {
  nx_module model;
  nx_optimizer opt;
  nx_tensor* params;
  size_t nparams;
  int64_t batch, context, vocab;
  bool read_loss;  /* the step reads its loss on the host (refused when captured) */
  bool reseed;     /* the step re-seeds the random generator first (refused when captured) */
} Gpt;

static const int64_t kVocab = 61, kContext = 16, kDim = 32;

/* A GPT with dropout p in its blocks and embeddings, checkpointing every n-th block (0: none). */
static void gpt_init_with(Gpt* g, nx_device dev, double dropout, int64_t checkpoint_every) {
  memset(g, 0, sizeof *g);
  nx_transformer_config cfg = {sizeof(nx_transformer_config), kVocab, kContext, kDim, 2, 4, 0, 0, false, true, true,
                               true, true, dropout, NX_ACTIVATION_GELU, checkpoint_every};
  NX_OK_(nx_random_set_seed(77));
  NX_OK_(nx_gpt_create(&g->model, &cfg, NX_F32, dev, NULL));
  NX_OK_(nx_module_parameters(g->model, &g->params, &g->nparams));
  const nx_adam_options adamw = {sizeof adamw, 3e-3, 0.9, 0.95, 1e-8, 0.1, true};
  NX_OK_(nx_adam_create(&g->opt, g->params, g->nparams, &adamw));
  g->context = kContext;
  g->vocab = kVocab;
}
static void gpt_init(Gpt* g, nx_device dev) { gpt_init_with(g, dev, 0.0, 0); }
static void gpt_free(Gpt* g) {
  nx_tensor_array_free(g->params, g->nparams);
  nx_optimizer_free(g->opt);
  nx_module_free(g->model);
}

/* The mean cross-entropy of the model's logits on x = inputs[0] against y = inputs[1]. */
static nx_status gpt_loss(Gpt* g, const nx_tensor* inputs, nx_tensor* loss) {
  int64_t shape[2];
  TRY(nx_tensor_shape(inputs[0], shape, 2));
  nx_tensor logits = NULL, flat = NULL, yflat = NULL;
  TRY(nx_module_forward(&logits, g->model, inputs[0], NULL));
  const int64_t fs[2] = {shape[0] * shape[1], g->vocab}, ys[1] = {shape[0] * shape[1]};
  nx_status st = nx_reshape(&flat, logits, fs, 2, NULL);
  if (st == NX_OK) st = nx_reshape(&yflat, inputs[1], ys, 1, NULL);
  if (st == NX_OK) st = nx_cross_entropy(loss, flat, yflat, -100, 0.0, NX_REDUCTION_MEAN, NULL);
  nx_tensor_free(logits);
  nx_tensor_free(flat);
  nx_tensor_free(yflat);
  return st;
}

/* The step: what a training loop's body does between getting a batch and reading the loss. */
static nx_status gpt_step(nx_tensor* outputs, size_t noutputs, const nx_tensor* inputs, size_t ninputs, void* user) {
  Gpt* g = (Gpt*)user;
  (void)noutputs;
  (void)ninputs;
  if (g->reseed) TRY(nx_random_set_seed(5));
  nx_tensor loss = NULL;
  TRY(gpt_loss(g, inputs, &loss));
  TRY(nx_optimizer_zero_grad(g->opt));
  TRY(nx_backward(loss, NULL, NULL, NULL));
  TRY(nx_clip_grad_norm(NULL, g->params, g->nparams, 1.0, NULL));
  TRY(nx_optimizer_step(g->opt, NULL));
  if (g->read_loss) {
    double v;
    nx_status st = nx_tensor_item(loss, &v, NULL);
    if (st != NX_OK) {
      nx_tensor_free(loss);
      return st;
    }
  }
  outputs[0] = loss;
  return NX_OK;
}

/* Batch `step` of random tokens: x [batch, context] and its next-token targets y. */
static void make_batch(nx_tensor* x, nx_tensor* y, int64_t batch, int64_t step, nx_device dev) {
  int64_t* ids = malloc(sizeof(int64_t) * (size_t)(batch * (kContext + 1)));
  rng_seed(1000 + (uint64_t)step);
  for (int64_t i = 0; i < batch * (kContext + 1); ++i) ids[i] = (int64_t)(rng_uniform(0, 1) * (kVocab - 1));
  int64_t* xs = malloc(sizeof(int64_t) * (size_t)(batch * kContext));
  int64_t* ys = malloc(sizeof(int64_t) * (size_t)(batch * kContext));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < kContext; ++t) {
      xs[b * kContext + t] = ids[b * (kContext + 1) + t];
      ys[b * kContext + t] = ids[b * (kContext + 1) + t + 1];
    }
  const int64_t shape[2] = {batch, kContext};
  NX_OK_(nx_tensor_from_data(x, xs, shape, 2, NX_I64, dev, NULL));
  NX_OK_(nx_tensor_from_data(y, ys, shape, 2, NX_I64, dev, NULL));
  free(ids);
  free(xs);
  free(ys);
}

static double run_step(Gpt* g, nx_plan plan, int64_t batch, int64_t step, int64_t steps) {
  nx_tensor x, y, loss = NULL;
  make_batch(&x, &y, batch, step, test_device());
  NX_OK_(nx_optimizer_set_lr(g->opt, nx_lr_cosine_warmup(3e-3, step, 5, steps, 3e-4)));
  const nx_tensor in[2] = {x, y};
  if (plan) NX_OK_(nx_plan_run(plan, &loss, 1, in, 2, NULL));
  else NX_OK_(gpt_step(&loss, 1, in, 2, g));
  double v;
  NX_OK_(nx_tensor_item(loss, &v, NULL));
  nx_tensor_free(x);
  nx_tensor_free(y);
  nx_tensor_free(loss);
  return v;
}

static void assert_same_params(const Gpt* a, const Gpt* b) {
  assert_int_equal(a->nparams, b->nparams);
  for (size_t i = 0; i < a->nparams; ++i) {
    int64_t n;
    NX_OK_(nx_tensor_numel(a->params[i], &n));
    float* pa = malloc(sizeof(float) * (size_t)n);
    float* pb = malloc(sizeof(float) * (size_t)n);
    NX_OK_(nx_tensor_copy_to_host(a->params[i], pa, sizeof(float) * (size_t)n, NULL));
    NX_OK_(nx_tensor_copy_to_host(b->params[i], pb, sizeof(float) * (size_t)n, NULL));
    if (memcmp(pa, pb, sizeof(float) * (size_t)n) != 0) fail_msg("parameter %zu differs between eager and replay", i);
    free(pa);
    free(pb);
  }
}

/* The first parameter (index, max |difference|) where a and b differ, or -1 (diagnostics). */
static int first_param_diff(const Gpt* a, const Gpt* b, double* maxdiff) {
  for (size_t i = 0; i < a->nparams; ++i) {
    int64_t n;
    NX_OK_(nx_tensor_numel(a->params[i], &n));
    float* pa = malloc(sizeof(float) * (size_t)n);
    float* pb = malloc(sizeof(float) * (size_t)n);
    NX_OK_(nx_tensor_copy_to_host(a->params[i], pa, sizeof(float) * (size_t)n, NULL));
    NX_OK_(nx_tensor_copy_to_host(b->params[i], pb, sizeof(float) * (size_t)n, NULL));
    double m = 0;
    for (int64_t j = 0; j < n; ++j) m = fmax(m, fabs((double)pa[j] - (double)pb[j]));
    free(pa);
    free(pb);
    if (m > 0) {
      *maxdiff = m;
      return (int)i;
    }
  }
  return -1;
}

static nx_plan make_plan(Gpt* g) {
  nx_plan plan = NULL;
  nx_plan_options o = NX_PLAN_OPTIONS_DEFAULT;
  const char* graph = getenv("NEXUS_TEST_PLAN_GRAPH"); /* 0: replay a GPU plan as its kernel list */
  if (graph && !strcmp(graph, "0")) o.cuda_graph = false;
  const char* fuse = getenv("NEXUS_TEST_PLAN_FUSE"); /* 0: no elementwise fusion */
  if (fuse && !strcmp(fuse, "0")) o.fuse = false;
  NX_OK_(nx_plan_create(&plan, gpt_step, g, 1, &o));
  return plan;
}

static nx_plan_stats plan_stats(nx_plan plan) {
  nx_plan_stats s;
  s.struct_size = sizeof s;
  NX_OK_(nx_plan_get_stats(plan, &s));
  return s;
}

/* Steps of a training test: n, or NEXUS_TEST_PLAN_STEPS when it is from 3 to n (fewer steps under
 * compute-sanitizer, where each costs seconds; from step 3 on every step replays the same captured
 * kernels). */
static int64_t plan_steps(int64_t n) {
  const char* env = getenv("NEXUS_TEST_PLAN_STEPS");
  return env && atoll(env) >= 3 && atoll(env) <= n ? atoll(env) : n;
}

/* ---------------------------------------------------------------- replay equals eager */
static void test_replay_equals_eager_bit_for_bit(void** state) {
  (void)state;
  NX_OK_(nx_runtime_set_deterministic(true));
  const int64_t steps = plan_steps(100), batch = 4;
  Gpt eager, control, compiled;
  gpt_init(&eager, test_device());
  gpt_init(&control, test_device());
  gpt_init(&compiled, test_device());
  nx_plan plan = make_plan(&compiled);
  for (int64_t s = 0; s < steps; ++s) {
    const double want = run_step(&eager, NULL, batch, s, steps);
    const double again = run_step(&control, NULL, batch, s, steps);  /* eager is deterministic here */
    const double got = run_step(&compiled, plan, batch, s, steps);
    if (getenv("NEXUS_TEST_PLAN_DIAG")) {
      double d = 0;
      const int i = first_param_diff(&eager, &compiled, &d);
      const char* name = "";
      nx_tensor t = NULL;
      if (i >= 0) NX_OK_(nx_module_parameter(eager.model, (size_t)i, &name, &t));
      printf("step %lld: loss %s; first differing parameter %d %s (max diff %.3g)\n", (long long)s,
             want == got ? "same" : "differs", i, name, d);
      nx_tensor_free(t);
      if (s == 12) break;
      continue;
    }
    if (want != again) fail_msg("step %lld: two eager runs differ (%.17g, %.17g)", (long long)s, want, again);
    if (want != got) fail_msg("step %lld: eager loss %.17g, replayed %.17g", (long long)s, want, got);
  }
  gpt_free(&control);
  assert_same_params(&eager, &compiled);
  const nx_plan_stats st = plan_stats(plan);
  assert_int_equal(st.eager_runs, 1);
  assert_int_equal(st.captures, 1);
  assert_int_equal(st.recaptures, 0);
  assert_int_equal(st.replays, steps - 2);
  assert_true(st.ops > 50);
  assert_true(st.arena_bytes > 0);
  /* the greedy placement may lose a little to fragmentation against the eager peak */
  assert_true(st.arena_bytes <= st.eager_peak_bytes + st.eager_peak_bytes / 10);
  if (!getenv("NEXUS_TEST_PLAN_FUSE")) { /* bit for bit with fusion on (CPU and CUDA) */
    /* 8 groups of 24 ops since RoPE is one kernel (session 25; its products and sums were more) */
    assert_true(st.fused_groups >= 5);
    assert_true(st.fused_ops >= 2 * st.fused_groups);
  }
  nx_plan_free(plan);
  gpt_free(&eager);
  gpt_free(&compiled);
  NX_OK_(nx_runtime_set_deterministic(false));
}

/* ---------------------------------------------------------------- two lanes (CPU) */
/* The count of two-lane stages in the plan's "lanes:" line (compile/lanes.hpp); -1 when the line
 * says the lanes are off. */
static long two_lane_stages(nx_plan plan) {
  const char* text = NULL;
  NX_OK_(nx_plan_to_string(plan, NX_PLAN_TABLE, &text));
  const char* line = strstr(text, "lanes: ");
  if (!line) fail_msg("the table has no lanes line:\n%.1500s", text);
  if (!strncmp(line, "lanes: off", 10)) return -1;
  const char* of = strstr(line, " stages, ");
  if (!of) fail_msg("unexpected lanes line: %.200s", line);
  return strtol(of + 9, NULL, 10);
}

/* After the lanes' calibration the table gives each call's measured time: a "time by call" line
 * naming matmul with a positive time, and a number in the us column of the first call's row. */
static void assert_call_times(nx_plan plan) {
  const char* text = NULL;
  NX_OK_(nx_plan_to_string(plan, NX_PLAN_TABLE, &text));
  const char* line = strstr(text, "time by call (calibration, all threads): ");
  if (!line) fail_msg("the table has no time-by-call line:\n%.1500s", text);
  const char *matmul = strstr(line, " matmul="), *eol = strchr(line, '\n');
  if (!matmul || (eol && matmul > eol) || !(strtod(matmul + 8, NULL) > 0))
    fail_msg("no positive matmul time in: %.400s", line);
  const char* row = strstr(text, "\n0     ");
  if (!row) fail_msg("no row of call 0:\n%.1500s", text);
  char op[32], tag[16], lane[8], us[24];
  if (sscanf(row + 1, "%*s %31s %15s %7s %23s", op, tag, lane, us) != 4 || us[0] == '-' || strtod(us, NULL) < 0)
    fail_msg("call 0 has no measured time: %.200s", row + 1);
}

/* On the CPU with two threads the replay runs independent calls side by side (one thread each);
 * with one thread it replays in order, and back at two it measures and schedules again. The
 * losses equal eager's at every step throughout, and the parameters at the end: the lanes wait
 * wherever the plan's memory says they must, and every CPU kernel's result is the same on one
 * thread as on two. The default schedule pairs calls only where their measured times say it
 * pays, which a loaded machine (ctest -j) can make nowhere; NEXUS_PLAN_LANES=paired, read at
 * compile, pairs wherever the memory allows, so that this test always runs two lanes. */
static void test_cpu_lanes_equal_eager_and_follow_the_thread_count(void** state) {
  (void)state;
  if (test_device().type != NX_CPU) skip();
  int32_t threads = 0;
  NX_OK_(nx_cpu_get_num_threads(&threads));
  NX_OK_(nx_runtime_set_deterministic(true));
  const int64_t steps = 36, batch = 4;
  Gpt eager, compiled;
  gpt_init(&eager, test_device());
  gpt_init(&compiled, test_device());
  setenv("NEXUS_PLAN_LANES", "paired", 1); /* read when the first replay compiles the step */
  nx_plan plan = make_plan(&compiled);
  for (int64_t s = 0; s < steps; ++s) {
    const int32_t want_threads = s >= 12 && s < 24 ? 1 : 2;
    NX_OK_(nx_cpu_set_num_threads(want_threads));
    const double want = run_step(&eager, NULL, batch, s, steps);
    const double got = run_step(&compiled, plan, batch, s, steps);
    if (want != got)
      fail_msg("step %lld (%d threads): eager loss %.17g, replayed %.17g", (long long)s, want_threads, want, got);
    /* replays from step 2; three of them measure, the fourth on follows the schedule */
    if (s == 11 || s == 35) {
      const long stages = two_lane_stages(plan);
      if (stages < 1) fail_msg("step %lld: no two-lane stage in the GPT's plan (%ld)", (long long)s, stages);
      assert_call_times(plan);
    }
    if (s == 23) assert_int_equal(two_lane_stages(plan), -1);
  }
  assert_same_params(&eager, &compiled);
  unsetenv("NEXUS_PLAN_LANES");
  NX_OK_(nx_cpu_set_num_threads(threads));
  nx_plan_free(plan);
  gpt_free(&eager);
  gpt_free(&compiled);
  NX_OK_(nx_runtime_set_deterministic(false));
}

/* ---------------------------------------------------------------- random draws (dropout) */
/* Dropout's draws inside a plan: each replay takes the numbers from the generator that the eager
 * step would, and its kernels read where they start from memory the plan rewrites. A GPT with
 * dropout 0.2 trained eagerly and through a plan from the same seed gives the same losses at every
 * step and the same parameters, with and without checkpointed blocks (whose recomputation in
 * backward draws its masks again from where its forward drew them). */
static void test_dropout_replay_equals_eager_bit_for_bit(void** state) {
  (void)state;
  NX_OK_(nx_runtime_set_deterministic(true));
  const int64_t steps = plan_steps(20), batch = 3;
  for (int64_t checkpoint = 0; checkpoint <= 1; ++checkpoint) {
    double want[20], got[20];
    Gpt eager, compiled;
    gpt_init_with(&eager, test_device(), 0.2, checkpoint);
    NX_OK_(nx_random_set_seed(4242));
    for (int64_t s = 0; s < steps; ++s) want[s] = run_step(&eager, NULL, batch, s, steps);
    gpt_init_with(&compiled, test_device(), 0.2, checkpoint);
    nx_plan plan = make_plan(&compiled);
    NX_OK_(nx_random_set_seed(4242));
    for (int64_t s = 0; s < steps; ++s) got[s] = run_step(&compiled, plan, batch, s, steps);
    for (int64_t s = 0; s < steps; ++s)
      if (want[s] != got[s])
        fail_msg("checkpoint %lld, step %lld: eager loss %.17g, replayed %.17g", (long long)checkpoint, (long long)s,
                 want[s], got[s]);
    assert_same_params(&eager, &compiled);
    const nx_plan_stats st = plan_stats(plan);
    assert_int_equal(st.captures, 1);
    assert_int_equal(st.recaptures, 0);
    assert_int_equal(st.replays, steps - 2);
    nx_plan_free(plan);
    gpt_free(&eager);
    gpt_free(&compiled);
  }
  NX_OK_(nx_runtime_set_deterministic(false));
}

/* The loss of a GPT with dropout 0.2 on a fixed batch, in training mode (no backward, no update:
 * only the masks change from call to call). */
static nx_status dropout_loss_step(nx_tensor* outputs, size_t noutputs, const nx_tensor* inputs, size_t ninputs,
                                   void* user) {
  (void)noutputs;
  (void)ninputs;
  return gpt_loss((Gpt*)user, inputs, &outputs[0]);
}

/* The losses of n calls of dropout_loss_step on one batch, through plan (NULL: eagerly); the
 * generator is re-seeded with reseed[i] before call i where reseed[i] is not 0. */
static void dropout_losses(Gpt* g, nx_plan plan, int n, const uint64_t* reseed, double* out) {
  nx_tensor x, y;
  make_batch(&x, &y, 2, 7, test_device());
  const nx_tensor in[2] = {x, y};
  for (int i = 0; i < n; ++i) {
    if (reseed[i]) NX_OK_(nx_random_set_seed(reseed[i]));
    nx_tensor loss = NULL;
    if (plan) NX_OK_(nx_plan_run(plan, &loss, 1, in, 2, NULL));
    else NX_OK_(dropout_loss_step(&loss, 1, in, 2, g));
    NX_OK_(nx_tensor_item(loss, &out[i], NULL));
    nx_tensor_free(loss);
  }
  nx_tensor_free(x);
  nx_tensor_free(y);
}

/* Calls 0 and 1 run eagerly and capture; calls 2 to 6 replay. Every replay draws new masks (the
 * losses of one batch differ), the same as eager's calls; re-seeding between replays
 * (nx_random_set_seed) gives what eager gives after the same seed: the seed of call 0 again gives
 * call 0's masks, another seed other masks. */
static void test_dropout_replays_draw_new_masks_and_follow_the_seed(void** state) {
  (void)state;
  enum { kCalls = 7 };
  const uint64_t reseed[kCalls] = {31, 0, 0, 0, 31, 0, 97};
  double want[kCalls], got[kCalls];
  NX_OK_(nx_runtime_set_deterministic(true));
  Gpt g;
  gpt_init_with(&g, test_device(), 0.2, 0);
  dropout_losses(&g, NULL, kCalls, reseed, want);
  nx_plan plan = NULL;
  nx_plan_options o = NX_PLAN_OPTIONS_DEFAULT;
  NX_OK_(nx_plan_create(&plan, dropout_loss_step, &g, 1, &o));
  dropout_losses(&g, plan, kCalls, reseed, got);
  const nx_plan_stats st = plan_stats(plan);
  assert_int_equal(st.captures, 1);
  assert_int_equal(st.replays, kCalls - 2);
  for (int i = 0; i < kCalls; ++i)
    if (want[i] != got[i]) fail_msg("call %d: eager loss %.17g, through the plan %.17g", i, want[i], got[i]);
  for (int i = 1; i < 4; ++i)
    if (got[i] == got[i - 1]) fail_msg("calls %d and %d drew the same masks (loss %.17g)", i - 1, i, got[i]);
  if (got[4] != got[0]) fail_msg("the seed of call 0 again: loss %.17g, not call 0's %.17g", got[4], got[0]);
  if (got[5] != got[1]) fail_msg("the call after it: loss %.17g, not call 1's %.17g", got[5], got[1]);
  if (got[6] == got[0]) fail_msg("another seed drew call 0's masks again");
  nx_plan_free(plan);
  gpt_free(&g);
  NX_OK_(nx_runtime_set_deterministic(false));
}

/* The optimizer's step count, as its saved state has it. */
static int64_t saved_step_count(nx_optimizer opt) {
  char path[] = "plan_opt_steps.safetensors";
  NX_OK_(nx_optimizer_save(opt, path));
  nx_safetensors st;
  NX_OK_(nx_safetensors_open(&st, path));
  nx_tensor steps_t = NULL;
  NX_OK_(nx_safetensors_get(&steps_t, st, "step", (nx_device){NX_CPU, 0}, NULL));
  double v;
  NX_OK_(nx_tensor_item(steps_t, &v, NULL));
  nx_tensor_free(steps_t);
  nx_safetensors_free(st);
  remove(path);
  return (int64_t)v;
}

/* The optimizer's step count advances at every replay as eagerly: saved state says 10 steps. */
static void test_replay_advances_optimizer_state(void** state) {
  (void)state;
  Gpt g;
  gpt_init(&g, test_device());
  nx_plan plan = make_plan(&g);
  for (int64_t s = 0; s < 10; ++s) run_step(&g, plan, 2, s, 10);
  assert_int_equal(plan_stats(plan).replays, 8);
  assert_int_equal(saved_step_count(g.opt), 10);
  nx_plan_free(plan);
  gpt_free(&g);
}

/* ---------------------------------------------------------------- loss scaling */
/* A training step with dynamic loss scaling inside the plan: scale, backward, unscale, clip,
 * the scaler's step and update, with AdamW and with SGD. A third input multiplies the loss before scaling: 1, or 1e38 on
 * the steps that must overflow (Inf gradients: the step is skipped on the device and the scale
 * backs off); the scale grows after every 3 clean steps. Eager and replay give the same losses,
 * scales, parameters and Adam step count, through skipped and taken steps. */
typedef struct {
  Gpt gpt;
  nx_grad_scaler scaler;
  bool ask_stepped; /* pass a stepped pointer to nx_grad_scaler_step (refused when captured) */
} ScaledGpt;

static nx_status scaled_step(nx_tensor* outputs, size_t noutputs, const nx_tensor* inputs, size_t ninputs, void* user) {
  ScaledGpt* sg = (ScaledGpt*)user;
  Gpt* g = &sg->gpt;
  (void)noutputs, (void)ninputs;
  nx_tensor loss = NULL, boosted = NULL, scaled = NULL;
  TRY(gpt_loss(g, inputs, &loss));
  nx_status st = nx_mul(&boosted, loss, inputs[2], NULL);
  if (st == NX_OK) st = nx_grad_scaler_scale(&scaled, sg->scaler, boosted, NULL);
  if (st == NX_OK) st = nx_optimizer_zero_grad(g->opt);
  if (st == NX_OK) st = nx_backward(scaled, NULL, NULL, NULL);
  if (st == NX_OK) st = nx_grad_scaler_unscale(sg->scaler, g->opt, NULL);
  if (st == NX_OK) st = nx_clip_grad_norm(NULL, g->params, g->nparams, 1.0, NULL);
  bool stepped = false;
  if (st == NX_OK) st = nx_grad_scaler_step(sg->ask_stepped ? &stepped : NULL, sg->scaler, g->opt, NULL);
  if (st == NX_OK) st = nx_grad_scaler_update(sg->scaler);
  nx_tensor_free(scaled);
  nx_tensor_free(boosted);
  if (st != NX_OK) {
    nx_tensor_free(loss);
    return st;
  }
  outputs[0] = loss;
  return NX_OK;
}

static void scaled_init(ScaledGpt* sg, bool sgd) {
  gpt_init(&sg->gpt, test_device());
  if (sgd) {
    nx_optimizer_free(sg->gpt.opt);
    const nx_sgd_options o = {sizeof o, 1e-2, 0.9, false, 0.0};
    NX_OK_(nx_sgd_create(&sg->gpt.opt, sg->gpt.params, sg->gpt.nparams, &o));
  }
  nx_grad_scaler_options o = NX_GRAD_SCALER_OPTIONS_DEFAULT;
  o.growth_interval = 3;
  NX_OK_(nx_grad_scaler_create(&sg->scaler, &o));
  sg->ask_stepped = false;
}

/* Whether step s overflows on purpose: a few steps among the replays, two of them in a row. */
static bool overflow_step(int64_t s) { return s == 4 || s == 9 || s == 10 || s == 17 || s == 25; }

static double scaled_run(ScaledGpt* sg, nx_plan plan, int64_t step, double* scale) {
  nx_tensor x, y, boost, loss = NULL;
  make_batch(&x, &y, 3, step, test_device());
  const float b = overflow_step(step) ? 1e38f : 1.0f;
  NX_OK_(nx_tensor_from_data(&boost, &b, NULL, 0, NX_F32, test_device(), NULL));
  const nx_tensor in[3] = {x, y, boost};
  if (plan) NX_OK_(nx_plan_run(plan, &loss, 1, in, 3, NULL));
  else NX_OK_(scaled_step(&loss, 1, in, 3, sg));
  double v;
  NX_OK_(nx_tensor_item(loss, &v, NULL));
  NX_OK_(nx_grad_scaler_get_scale(sg->scaler, scale));
  nx_tensor_free(x);
  nx_tensor_free(y);
  nx_tensor_free(boost);
  nx_tensor_free(loss);
  return v;
}

static void scaled_free(ScaledGpt* sg) {
  nx_grad_scaler_free(sg->scaler);
  gpt_free(&sg->gpt);
}

static void loss_scaled_replay_equals_eager(bool sgd) {
  NX_OK_(nx_runtime_set_deterministic(true));
  const int64_t steps = plan_steps(30);
  ScaledGpt eager, compiled;
  scaled_init(&eager, sgd);
  scaled_init(&compiled, sgd);
  nx_plan plan = NULL;
  NX_OK_(nx_plan_create(&plan, scaled_step, &compiled, 1, NULL));
  int skipped = 0, grown = 0;
  double last_scale = 65536;
  for (int64_t s = 0; s < steps; ++s) {
    double want_scale, got_scale;
    const double want = scaled_run(&eager, NULL, s, &want_scale);
    const double got = scaled_run(&compiled, plan, s, &got_scale);
    if (want != got) fail_msg("step %lld: eager loss %.17g, replayed %.17g", (long long)s, want, got);
    if (want_scale != got_scale) fail_msg("step %lld: eager scale %g, replayed %g", (long long)s, want_scale, got_scale);
    /* the scaler saw the overflow (it backs off) exactly on the steps made to overflow */
    if ((want_scale < last_scale) != overflow_step(s))
      fail_msg("step %lld: scale %g after %g", (long long)s, want_scale, last_scale);
    skipped += want_scale < last_scale;
    grown += want_scale > last_scale;
    last_scale = want_scale;
  }
  assert_true(skipped >= 3 && grown >= 3);
  assert_same_params(&eager.gpt, &compiled.gpt);
  const int64_t taken = saved_step_count(eager.gpt.opt);
  assert_int_equal(taken, steps - skipped);
  assert_int_equal(saved_step_count(compiled.gpt.opt), taken);
  const nx_plan_stats st = plan_stats(plan);
  assert_int_equal(st.captures, 1);
  assert_int_equal(st.replays, steps - 2);
  nx_plan_free(plan);
  scaled_free(&eager);
  scaled_free(&compiled);
  NX_OK_(nx_runtime_set_deterministic(false));
}
/* AdamW skips in its kernel; SGD (momentum 0.9) keeps its old parameters and momentum through
 * where() on the flag. */
static void test_loss_scaled_replay_equals_eager_bit_for_bit(void** state) {
  (void)state;
  loss_scaled_replay_equals_eager(false);
  loss_scaled_replay_equals_eager(true);
}

/* What only the host could say is refused by name: whether the optimizer stepped. */
static void test_loss_scaled_step_refusals(void** state) {
  (void)state;
  ScaledGpt sg;
  scaled_init(&sg, false);
  sg.ask_stepped = true;
  nx_plan plan = NULL;
  NX_OK_(nx_plan_create(&plan, scaled_step, &sg, 1, NULL));
  nx_tensor x, y, boost, loss = NULL;
  make_batch(&x, &y, 2, 0, test_device());
  const float one = 1.0f;
  NX_OK_(nx_tensor_from_data(&boost, &one, NULL, 0, NX_F32, test_device(), NULL));
  const nx_tensor in[3] = {x, y, boost};
  NX_OK_(nx_plan_run(plan, &loss, 1, in, 3, NULL)); /* eager: fine */
  nx_tensor_free(loss);
  loss = NULL;
  EXPECT_ERR(NX_ERR_STATE, nx_plan_run(plan, &loss, 1, in, 3, NULL), "nx_plan_run", "cannot be captured",
             "nx_grad_scaler_step", "pass NULL for stepped");
  nx_tensor_free(x);
  nx_tensor_free(y);
  nx_tensor_free(boost);
  nx_plan_free(plan);
  scaled_free(&sg);
}

/* SGD with momentum (and Nesterov) inside a plan: its momentum buffers are state the step updates,
 * so replays must read each step's buffer, not the one the capture saw. */
static void test_sgd_momentum_replay_equals_eager_bit_for_bit(void** state) {
  (void)state;
  NX_OK_(nx_runtime_set_deterministic(true));
  for (int nesterov = 0; nesterov < 2; ++nesterov) {
    Gpt eager, compiled;
    gpt_init(&eager, test_device());
    gpt_init(&compiled, test_device());
    const nx_sgd_options o = {sizeof o, 3e-2, 0.9, nesterov != 0, 1e-4};
    for (Gpt* g = &eager; g; g = g == &eager ? &compiled : NULL) {
      nx_optimizer_free(g->opt);
      NX_OK_(nx_sgd_create(&g->opt, g->params, g->nparams, &o));
    }
    nx_plan plan = make_plan(&compiled);
    for (int64_t s = 0; s < 12; ++s) {
      nx_tensor x, y, lw = NULL, lc = NULL;
      make_batch(&x, &y, 3, s, test_device());
      const nx_tensor in[2] = {x, y};
      NX_OK_(gpt_step(&lw, 1, in, 2, &eager));
      NX_OK_(nx_plan_run(plan, &lc, 1, in, 2, NULL));
      double want, got;
      NX_OK_(nx_tensor_item(lw, &want, NULL));
      NX_OK_(nx_tensor_item(lc, &got, NULL));
      if (want != got) fail_msg("nesterov %d step %lld: eager loss %.17g, replayed %.17g", nesterov, (long long)s, want, got);
      nx_tensor_free(x);
      nx_tensor_free(y);
      nx_tensor_free(lw);
      nx_tensor_free(lc);
    }
    assert_same_params(&eager, &compiled);
    assert_int_equal(plan_stats(plan).replays, 10);
    nx_plan_free(plan);
    gpt_free(&eager);
    gpt_free(&compiled);
  }
  NX_OK_(nx_runtime_set_deterministic(false));
}

/* ---------------------------------------------------------------- shapes and invalidation */
static void test_new_shape_compiles_its_own_step(void** state) {
  (void)state;
  Gpt g;
  gpt_init(&g, test_device());
  nx_plan plan = make_plan(&g);
  for (int64_t s = 0; s < 3; ++s) run_step(&g, plan, 4, s, 20);  /* eager, capture, replay */
  for (int64_t s = 3; s < 6; ++s) run_step(&g, plan, 3, s, 20);  /* the smaller last batch */
  run_step(&g, plan, 4, 6, 20);                                   /* back to the first shape: a replay */
  nx_plan_stats st = plan_stats(plan);
  assert_int_equal(st.eager_runs, 2);
  assert_int_equal(st.captures, 2);
  assert_int_equal(st.replays, 3);
  /* requires_grad changed: the next call captures again (and still trains the others) */
  NX_OK_(nx_tensor_set_requires_grad(g.params[0], false));
  run_step(&g, plan, 4, 7, 20);
  st = plan_stats(plan);
  assert_int_equal(st.recaptures, 1);
  run_step(&g, plan, 4, 8, 20);
  assert_int_equal(plan_stats(plan).replays, 4);
  NX_OK_(nx_tensor_set_requires_grad(g.params[0], true));
  /* evaluation between steps (eval, then train again) keeps the plan; a step in eval mode does not
   * replay the training-mode capture */
  run_step(&g, plan, 4, 9, 20);
  NX_OK_(nx_module_set_training(g.model, false));
  NX_OK_(nx_module_set_training(g.model, true));
  run_step(&g, plan, 4, 10, 20);
  assert_int_equal(plan_stats(plan).recaptures, 2);
  NX_OK_(nx_module_set_training(g.model, false));
  run_step(&g, plan, 4, 11, 20);
  assert_int_equal(plan_stats(plan).recaptures, 3);
  NX_OK_(nx_module_set_training(g.model, true));
  nx_plan_free(plan);
  gpt_free(&g);
}

static void test_max_plans_bounds_the_cache(void** state) {
  (void)state;
  Gpt g;
  gpt_init(&g, test_device());
  nx_plan plan = NULL;
  const nx_plan_options one = {sizeof one, 1, true, true};
  NX_OK_(nx_plan_create(&plan, gpt_step, &g, 1, &one));
  for (int64_t s = 0; s < 2; ++s) run_step(&g, plan, 2, s, 20);
  for (int64_t s = 2; s < 4; ++s) run_step(&g, plan, 3, s, 20);
  run_step(&g, plan, 2, 4, 20); /* its step was dropped for batch 3's: captured again */
  assert_int_equal(plan_stats(plan).captures, 3);
  nx_plan_free(plan);
  gpt_free(&g);
}

/* ---------------------------------------------------------------- 1.3 callers */
static nx_status double_input(nx_tensor* outputs, size_t noutputs, const nx_tensor* inputs, size_t ninputs,
                              void* user) {
  (void)noutputs, (void)ninputs, (void)user;
  return nx_add(&outputs[0], inputs[0], inputs[0], NULL);
}
/* A program built against 1.3 passes the smaller structs (rule 4): the options' max_bytes is not
 * read, and nx_plan_get_stats writes only the 1.3 fields. */
static void test_structs_of_c_api_1_3_still_work(void** state) {
  (void)state;
  nx_plan_options old = {offsetof(nx_plan_options, max_bytes), 2, false, true, -5 /* past struct_size */};
  nx_plan plan = NULL;
  NX_OK_(nx_plan_create(&plan, double_input, NULL, 1, &old));
  const int64_t shape[1] = {8};
  nx_tensor x = NULL;
  NX_OK_(nx_tensor_ones(&x, shape, 1, NX_F32, test_device(), NULL));
  for (int i = 0; i < 3; ++i) {
    nx_tensor y = NULL;
    NX_OK_(nx_plan_run(plan, &y, 1, &x, 1, NULL));
    nx_tensor_free(y);
  }
  nx_plan_stats s;
  memset(&s, 0x5a, sizeof s);
  s.struct_size = offsetof(nx_plan_stats, held_bytes);
  NX_OK_(nx_plan_get_stats(plan, &s));
  assert_int_equal(s.struct_size, offsetof(nx_plan_stats, held_bytes));
  assert_int_equal(s.captures, 1);
  assert_int_equal(s.replays, 1);
  assert_int_equal(s.held_bytes, 0x5a5a5a5a5a5a5a5aLL);  /* untouched */
  s.struct_size = sizeof s;
  NX_OK_(nx_plan_get_stats(plan, &s));
  assert_true(s.held_bytes > 0);
  assert_int_equal(s.evictions, 0);
  s.struct_size = offsetof(nx_plan_stats, evictions);  /* neither 1.3 nor 1.4 */
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_plan_get_stats(plan, &s), "nx_plan_get_stats", "struct_size");
  nx_plan_free(plan);
  nx_tensor_free(x);
  const nx_plan_options negative = {sizeof negative, 4, true, true, -1};
  plan = SENTINEL;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_plan_create(&plan, double_input, NULL, 1, &negative), "max_bytes", "-1");
  assert_null(plan);
}

/* ---------------------------------------------------------------- refusals */
/* What a replay could not repeat, done inside the step, fails its capture, naming the call: a host
 * read (the loss read back), and re-seeding the random generator (a replay would not re-seed).
 * The plan works once the step no longer does it. */
static void test_host_work_inside_the_step_is_refused(void** state) {
  (void)state;
  for (int c = 0; c < 2; ++c) {
    Gpt g;
    gpt_init_with(&g, test_device(), c == 1 ? 0.2 : 0.0, 0);
    bool* flag = c == 0 ? &g.read_loss : &g.reseed;
    *flag = true;
    nx_plan plan = make_plan(&g);
    nx_tensor x, y, loss = SENTINEL;
    make_batch(&x, &y, 2, 0, test_device());
    const nx_tensor in[2] = {x, y};
    NX_OK_(nx_plan_run(plan, &loss, 1, in, 2, NULL)); /* eager: fine */
    nx_tensor_free(loss);
    loss = SENTINEL;
    if (c == 0)
      EXPECT_ERR(NX_ERR_STATE, nx_plan_run(plan, &loss, 1, in, 2, NULL), "nx_plan_run", "cannot be captured",
                 "nx_tensor_item", "on the host");
    else
      EXPECT_ERR(NX_ERR_STATE, nx_plan_run(plan, &loss, 1, in, 2, NULL), "nx_plan_run", "cannot be captured",
                 "nx_random_set_seed", "re-seeds");
    assert_null(loss);
    *flag = false;
    NX_OK_(nx_plan_run(plan, &loss, 1, in, 2, NULL));
    nx_tensor_free(loss);
    nx_tensor_free(x);
    nx_tensor_free(y);
    nx_plan_free(plan);
    gpt_free(&g);
  }
}

static nx_status failing_step(nx_tensor* outputs, size_t noutputs, const nx_tensor* inputs, size_t ninputs, void* u) {
  (void)outputs, (void)noutputs, (void)ninputs, (void)u;
  nx_tensor bad = NULL;
  const int64_t shape[1] = {3};
  return nx_reshape(&bad, inputs[0], shape, 1, NULL); /* 2 elements into 3: refused */
}

static void test_misuse(void** state) {
  (void)state;
  nx_plan plan = SENTINEL;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_plan_create(&plan, NULL, NULL, 1, NULL), "nx_plan_create", "fn is NULL");
  assert_null(plan);
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_plan_create(&plan, gpt_step, NULL, 0, NULL), "noutputs");
  const nx_plan_options zero = {sizeof zero, 0, true, true};
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_plan_create(&plan, gpt_step, NULL, 1, &zero), "max_plans", "0");
  NX_OK_(nx_plan_create(&plan, failing_step, NULL, 1, NULL));
  nx_tensor out = SENTINEL;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_plan_run(plan, &out, 1, NULL, 0, NULL), "nx_plan_run", "at least one input");
  int64_t v[2] = {1, 2};
  const int64_t shape[1] = {2};
  nx_tensor x;
  NX_OK_(nx_tensor_from_data(&x, v, shape, 1, NX_I64, test_device(), NULL));
  nx_status st = nx_plan_run(plan, &out, 1, &x, 1, NULL);
  assert_int_not_equal(st, NX_OK);
  assert_non_null(strstr(nx_last_error_message(), "the step function failed"));
  assert_null(out);
  const char* text = SENTINEL;
  NX_OK_(nx_plan_to_string(plan, NX_PLAN_TABLE, &text));
  assert_non_null(strstr(text, "nothing compiled yet"));
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_plan_to_string(plan, (nx_plan_format)7, &text), "invalid format", "7");
  nx_plan_stats s = {0};
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_plan_get_stats(plan, &s), "struct_size");
  nx_plan_free(plan);
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_plan_run(plan, &out, 1, &x, 1, NULL), "not a live plan handle");
  nx_plan_free(plan); /* a second free does nothing */
  assert_int_equal(nx_live_handle_count(NX_HANDLE_PLAN), 0);
  nx_tensor_free(x);
}

/* ---------------------------------------------------------------- fused chains */
/* Two chains of elementwise ops that fusion folds into one kernel each. The first, over
 * [16, 50, 71] (rows of 71 elements, several rows per tile), casts to bf16, adds a bf16 bias
 * broadcast over the rows, multiplies by a transposed (non-contiguous) bf16 input, runs gelu,
 * sigmoid and a scalar multiply in bf16, and divides in f32 by a value broadcast along the rows
 * (stride 0), then squares the quotient: ten members, the last reading the ninth's result (a
 * register number once mistaken for the "too many inputs" mark, which left the group unfused);
 * its bf16 intermediate g is also an output, so it is stored. The second, over
 * [40, 3001] (tiles inside a row), runs gelu, tanh, a broadcast multiply and a scalar add in f32:
 * its tiles end where the eager kernel's rows do not, so a row function whose result depended on
 * an element's position (a scalar tail rounding unlike the vector body) would show here. */
static const int64_t kChainShape[3] = {16, 50, 71}, kWideShape[2] = {40, 3001};

static nx_status chain_step(nx_tensor* out, size_t noutputs, const nx_tensor* in, size_t ninputs, void* user) {
  (void)noutputs;
  (void)ninputs;
  (void)user;
  nx_tensor xb, a, g, yt, m, sg, e, o1, of, se, d, zg, zt, ce, zz;
  TRY(nx_cast(&xb, in[0], NX_BF16, NULL));
  TRY(nx_add(&a, xb, in[1], NULL));
  TRY(nx_gelu(&g, a, false, NULL));
  TRY(nx_transpose(&yt, in[2], 0, 1, NULL));
  TRY(nx_mul(&m, g, yt, NULL));
  TRY(nx_sigmoid(&sg, m, NULL));
  TRY(nx_mul_scalar(&e, sg, 3.0, NULL));
  TRY(nx_sub(&o1, e, xb, NULL));
  TRY(nx_cast(&of, o1, NX_F32, NULL));
  TRY(nx_expand(&se, in[3], kChainShape, 3, NULL));
  TRY(nx_div(&d, of, se, NULL));
  TRY(nx_mul(&out[0], d, d, NULL)); /* the 10th member reads the 9th's result (register 8) */
  out[1] = g;
  TRY(nx_gelu(&zg, in[4], false, NULL));
  TRY(nx_tanh(&zt, zg, NULL));
  TRY(nx_expand(&ce, in[5], kWideShape, 2, NULL));
  TRY(nx_mul(&zz, zt, ce, NULL));
  TRY(nx_add_scalar(&out[2], zz, 0.5, NULL));
  nx_tensor tmp[] = {xb, a, yt, m, sg, e, o1, of, se, d, zg, zt, ce, zz};
  for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; ++i) nx_tensor_free(tmp[i]);
  return NX_OK;
}

static void chain_inputs(nx_tensor* in, uint64_t seed) {
  rng_seed(seed);
  const int64_t w[1] = {71}, y[3] = {50, 16, 71}, s[3] = {16, 50, 1}, c[2] = {40, 1};
  in[0] = rand_tensor(NULL, kChainShape, 3, NX_F32, -4, 4);
  in[1] = rand_tensor(NULL, w, 1, NX_BF16, -1, 1);
  in[2] = rand_tensor(NULL, y, 3, NX_BF16, -2, 2);
  in[3] = rand_tensor(NULL, s, 3, NX_F32, 0.5, 2);
  in[4] = rand_tensor(NULL, kWideShape, 2, NX_F32, -3, 3);
  in[5] = rand_tensor(NULL, c, 2, NX_F32, -2, 2);
}

static void assert_same_bits(nx_tensor a, nx_tensor b, const char* what, int run) {
  const int64_t n = tensor_numel(a);
  assert_int_equal(n, tensor_numel(b));
  const size_t bytes = (size_t)n * nx_dtype_size(tensor_dtype(a));
  assert_int_equal(tensor_dtype(a), tensor_dtype(b));
  char* pa = malloc(bytes);
  char* pb = malloc(bytes);
  NX_OK_(nx_tensor_copy_to_host(a, pa, bytes, NULL));
  NX_OK_(nx_tensor_copy_to_host(b, pb, bytes, NULL));
  if (memcmp(pa, pb, bytes) != 0) fail_msg("run %d: %s differs between eager and the fused replay", run, what);
  free(pa);
  free(pb);
}

/* Each of n eager outputs against its replayed twin, bit for bit; frees both. */
static void assert_outputs_same_bits(nx_tensor* want, nx_tensor* got, const char* const* names, int n, int run) {
  for (int k = 0; k < n; ++k) {
    assert_same_bits(want[k], got[k], names[k], run);
    nx_tensor_free(want[k]);
    nx_tensor_free(got[k]);
  }
}

static void test_fused_chains_equal_eager_bit_for_bit(void** state) {
  (void)state;
  if (test_device().type != NX_CPU) skip(); /* the inputs are made on the CPU */
  nx_plan plan = NULL;
  nx_plan_options o = NX_PLAN_OPTIONS_DEFAULT;
  NX_OK_(nx_plan_create(&plan, chain_step, NULL, 3, &o));
  for (int run = 0; run < 4; ++run) { /* eager, capture, then replays */
    nx_tensor in[6], want[3], got[3];
    chain_inputs(in, 500 + (uint64_t)run);
    NX_OK_(chain_step(want, 3, in, 6, NULL));
    NX_OK_(nx_plan_run(plan, got, 3, in, 6, NULL));
    const char* names[3] = {"the bf16 chain's f32 output", "its stored bf16 intermediate", "the wide f32 chain"};
    assert_outputs_same_bits(want, got, names, 3, run);
    for (int k = 0; k < 6; ++k) nx_tensor_free(in[k]);
  }
  const nx_plan_stats st = plan_stats(plan);
  assert_int_equal(st.replays, 2);
  assert_int_equal(st.fused_groups, 2);
  assert_int_equal(st.fused_ops, 14);
  nx_plan_free(plan);
}

/* A fused run whose input (h, f16) is freed by eager after its first member reads it, and whose
 * stored output (y, f32, read afterwards by a sum) is made after that: eager may give y h's memory,
 * but the fused call reads h and writes y together, so the arena must keep them apart (it places
 * each buffer over the calls of the replayed list that use it). Sharing memory, the tiles that
 * write y would overwrite the parts of h that later tiles read. */
static nx_status arena_step(nx_tensor* out, size_t noutputs, const nx_tensor* in, size_t ninputs, void* user) {
  (void)noutputs;
  (void)ninputs;
  (void)user;
  const int64_t flat[1] = {12000}, rows[2] = {300, 40}, axis[1] = {1};
  nx_tensor xt, h, hf, t, u, y, y2;
  TRY(nx_transpose(&xt, in[0], 0, 1, NULL));
  TRY(nx_cast(&h, xt, NX_F16, NULL)); /* [300, 40]: a copy of its own shape, not fused with the run */
  nx_tensor_free(xt);
  TRY(nx_reshape(&hf, h, flat, 1, NULL));
  nx_tensor_free(h);
  TRY(nx_mul_scalar(&t, hf, 0.5, NULL));
  nx_tensor_free(hf); /* h's storage is freed here */
  TRY(nx_exp(&u, t, NULL));
  nx_tensor_free(t);
  TRY(nx_cast(&y, u, NX_F32, NULL)); /* made after h was freed */
  nx_tensor_free(u);
  TRY(nx_reshape(&y2, y, rows, 2, NULL));
  nx_tensor_free(y);
  TRY(nx_sum(&out[0], y2, axis, 1, false, NULL));
  nx_tensor_free(y2);
  return NX_OK;
}

static void test_fused_call_buffers_do_not_share_arena_memory(void** state) {
  (void)state;
  if (test_device().type != NX_CPU) skip(); /* the inputs are made on the CPU */
  nx_plan plan = NULL;
  nx_plan_options o = NX_PLAN_OPTIONS_DEFAULT;
  NX_OK_(nx_plan_create(&plan, arena_step, NULL, 1, &o));
  setenv("NEXUS_FUSE_REDUCE", "0", 1); /* else the sum takes y from the run, and y is never stored */
  const int64_t shape[2] = {40, 300};
  for (int run = 0; run < 4; ++run) {
    rng_seed(900 + (uint64_t)run);
    nx_tensor x = rand_tensor(NULL, shape, 2, NX_F32, -2, 2), want, got;
    NX_OK_(arena_step(&want, 1, &x, 1, NULL));
    NX_OK_(nx_plan_run(plan, &got, 1, &x, 1, NULL));
    assert_same_bits(want, got, "the sums of the fused run's stored output", run);
    nx_tensor_free(want);
    nx_tensor_free(got);
    nx_tensor_free(x);
  }
  unsetenv("NEXUS_FUSE_REDUCE");
  const nx_plan_stats st = plan_stats(plan);
  assert_int_equal(st.fused_groups, 1);
  nx_plan_free(plan);
}

/* Chains ending in the reductions that consume them (CPU): each becomes one call that reduces its
 * last result instead of storing it, with reduce_rows's bits. Rows of 300 (several per thread),
 * one row of 200000 (reduce_rows sums it in fixed chunks across threads), a bf16 chain's max over
 * rows of 77, a one-op chain under a mean, a bool mask cast to f32 and counted per row (the
 * cross-entropy's count of targets), and a chain whose first result is also an output (so it is
 * stored while the last is reduced). */
static const int64_t kRedRows[2] = {64, 300}, kRedLong[1] = {200000}, kRedHalf[3] = {4, 8, 77};

static nx_status reduce_step(nx_tensor* out, size_t noutputs, const nx_tensor* in, size_t ninputs, void* user) {
  (void)noutputs, (void)ninputs, (void)user;
  const int64_t last[1] = {1}, half_last[1] = {2};
  nx_tensor t, s, e, h, g, q, m, mf;
  TRY(nx_mul(&out[0], in[0], in[1], NULL));
  TRY(nx_tanh(&t, out[0], NULL));
  TRY(nx_sum(&out[1], t, last, 1, false, NULL));
  TRY(nx_mul_scalar(&s, in[2], 0.25, NULL));
  TRY(nx_exp(&e, s, NULL));
  TRY(nx_sum(&out[2], e, NULL, 0, false, NULL));
  TRY(nx_cast(&h, in[3], NX_BF16, NULL));
  TRY(nx_gelu(&g, h, false, NULL));
  TRY(nx_max(&out[3], g, half_last, 1, false, NULL));
  TRY(nx_sigmoid(&q, in[0], NULL));
  TRY(nx_mean(&out[4], q, last, 1, false, NULL));
  TRY(nx_gt(&m, in[0], in[1], NULL));
  TRY(nx_cast(&mf, m, NX_F32, NULL));
  TRY(nx_sum(&out[5], mf, last, 1, false, NULL));
  nx_tensor tmp[] = {t, s, e, h, g, q, m, mf};
  for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; ++i) nx_tensor_free(tmp[i]);
  return NX_OK;
}

static void test_chains_fused_into_reductions_equal_eager(void** state) {
  (void)state;
  if (test_device().type != NX_CPU) skip(); /* fused reductions are the CPU's */
  nx_plan plan = NULL;
  nx_plan_options o = NX_PLAN_OPTIONS_DEFAULT;
  NX_OK_(nx_plan_create(&plan, reduce_step, NULL, 6, &o));
  for (int run = 0; run < 4; ++run) { /* eager, capture, then replays */
    rng_seed(700 + (uint64_t)run);
    nx_tensor in[4] = {rand_tensor(NULL, kRedRows, 2, NX_F32, -2, 2), rand_tensor(NULL, kRedRows, 2, NX_F32, -2, 2),
                       rand_tensor(NULL, kRedLong, 1, NX_F32, -4, 4), rand_tensor(NULL, kRedHalf, 3, NX_F32, -3, 3)};
    nx_tensor want[6], got[6];
    NX_OK_(reduce_step(want, 6, in, 4, NULL));
    NX_OK_(nx_plan_run(plan, got, 6, in, 4, NULL));
    const char* names[6] = {"the stored product", "the row sums of tanh", "the sum of 200000 exps",
                            "the bf16 row maxima", "the row means of sigmoid", "the counts of a mask"};
    assert_outputs_same_bits(want, got, names, 6, run);
    for (int k = 0; k < 4; ++k) nx_tensor_free(in[k]);
  }
  const nx_plan_stats st = plan_stats(plan);
  assert_int_equal(st.replays, 2);
  assert_int_equal(st.fused_groups, 5);
  assert_int_equal(st.fused_ops, 13); /* 8 elementwise calls and 5 reductions */
  const char* text = NULL;
  NX_OK_(nx_plan_to_string(plan, NX_PLAN_TABLE, &text));
  if (!strstr(text, "5 of them ending in a reduction") || !strstr(text, "-> reduce_rows op=0 rows=1 cols=200000"))
    fail_msg("the table does not show the fused reductions:\n%.3000s", text);
  nx_plan_free(plan);
}

/* ---------------------------------------------------------------- the plan's text */
static void test_plan_prints_as_table_and_dot(void** state) {
  (void)state;
  Gpt g;
  gpt_init(&g, test_device());
  nx_plan plan = make_plan(&g);
  for (int64_t s = 0; s < 2; ++s) run_step(&g, plan, 2, s, 10);
  const char* text = NULL;
  NX_OK_(nx_plan_to_string(plan, NX_PLAN_TABLE, &text));
  const char* wanted[] = {"ops", "arena", "matmul", "nx_module_forward", "nx_backward", "adam_multi",
                          "nx_optimizer_step", "arena@", "w:"};
  for (size_t i = 0; i < sizeof wanted / sizeof wanted[0]; ++i)
    if (!strstr(text, wanted[i])) fail_msg("the table lacks \"%s\":\n%.2000s", wanted[i], text);
  if (getenv("NEXUS_PLAN_DUMP")) printf("%s", text);
  NX_OK_(nx_plan_to_string(plan, NX_PLAN_DOT, &text));
  assert_non_null(strstr(text, "digraph plan {"));
  assert_non_null(strstr(text, "->"));
  nx_plan_free(plan);
  gpt_free(&g);
}

/* ---------------------------------------------------------------- repeated calls */
/* exp(x) twice: the second reads the same x, unchanged, and is dropped from the plan. exp(t)
 * twice with an in-place add to t between them: both stay (the input changed). */
static nx_status repeated_step(nx_tensor* outputs, size_t noutputs, const nx_tensor* inputs, size_t ninputs,
                               void* user) {
  (void)noutputs, (void)ninputs, (void)user;
  nx_tensor a = NULL, b = NULL, ab = NULL, t = NULL, c = NULL, d = NULL;
  nx_status st = nx_exp(&a, inputs[0], NULL);
  if (st == NX_OK) st = nx_exp(&b, inputs[0], NULL);
  if (st == NX_OK) st = nx_mul(&ab, a, b, NULL);
  if (st == NX_OK) st = nx_mul_scalar(&t, inputs[0], 0.5, NULL);
  if (st == NX_OK) st = nx_exp(&c, t, NULL);
  if (st == NX_OK) st = nx_add_(t, inputs[0], NULL);
  if (st == NX_OK) st = nx_exp(&d, t, NULL);
  if (st == NX_OK) st = nx_sub(&outputs[0], ab, c, NULL);
  if (st == NX_OK) st = nx_add(&outputs[1], c, d, NULL);
  nx_tensor_free(a), nx_tensor_free(b), nx_tensor_free(ab), nx_tensor_free(t), nx_tensor_free(c), nx_tensor_free(d);
  return st;
}
static void test_repeated_calls_are_computed_once(void** state) {
  (void)state;
  nx_plan plan = NULL;
  nx_plan_options o = NX_PLAN_OPTIONS_DEFAULT;
  NX_OK_(nx_plan_create(&plan, repeated_step, NULL, 2, &o));
  const int64_t shape[1] = {1000};
  for (int run = 0; run < 4; ++run) { /* eager, capture, then replays, each on new values */
    NX_OK_(nx_random_set_seed(70 + (uint64_t)run));
    nx_tensor x = NULL, want[2], got[2];
    NX_OK_(nx_tensor_randn(&x, shape, 1, NX_F32, test_device(), NULL));
    NX_OK_(repeated_step(want, 2, &x, 1, NULL));
    NX_OK_(nx_plan_run(plan, got, 2, &x, 1, NULL));
    for (int k = 0; k < 2; ++k) {
      float w[1000], g[1000];
      NX_OK_(nx_tensor_copy_to_host(want[k], w, sizeof w, NULL));
      NX_OK_(nx_tensor_copy_to_host(got[k], g, sizeof g, NULL));
      if (memcmp(w, g, sizeof w) != 0) fail_msg("run %d, output %d: replay differs from eager", run, k);
      nx_tensor_free(want[k]), nx_tensor_free(got[k]);
    }
    nx_tensor_free(x);
  }
  const char* text = NULL;
  NX_OK_(nx_plan_to_string(plan, NX_PLAN_TABLE, &text));
  if (!strstr(text, "1 repeated removed")) fail_msg("expected one repeated call removed:\n%.1500s", text);
  nx_plan_free(plan);
}

/* Two RMSNorms whose f32 outputs are cast to bf16 (as autocast casts a linear's input): the first
 * output's only reader is its cast, so the compiled step's norm writes bf16 itself (a cast folded
 * into the norm); the second output is also read in f32, so its cast stays. user: the second
 * norm's width (256 takes CUDA's vectorized rows, 100 its other path). */
static nx_status norm_cast_step(nx_tensor* outputs, size_t noutputs, const nx_tensor* inputs, size_t ninputs,
                                void* user) {
  (void)noutputs, (void)ninputs, (void)user;
  nx_tensor y1 = NULL, y1b = NULL, y2 = NULL, y2b = NULL;
  nx_status st = nx_rms_norm(&y1, inputs[0], inputs[1], 1e-5, NULL);
  if (st == NX_OK) st = nx_cast(&y1b, y1, NX_BF16, NULL);
  if (st == NX_OK) st = nx_mul_scalar(&outputs[0], y1b, 2.0, NULL);
  if (st == NX_OK) st = nx_rms_norm(&y2, inputs[2], NULL, 1e-5, NULL);
  if (st == NX_OK) st = nx_cast(&y2b, y2, NX_BF16, NULL);
  if (st == NX_OK) st = nx_add_scalar(&outputs[1], y2, 1.0, NULL);
  if (st == NX_OK) st = nx_cast(&outputs[2], y2b, NX_F32, NULL);
  nx_tensor_free(y1), nx_tensor_free(y1b), nx_tensor_free(y2), nx_tensor_free(y2b);
  return st;
}
static void test_norm_writes_the_cast_of_its_output(void** state) {
  (void)state;
  const int64_t widths[2] = {256, 100};  /* both of CUDA's paths for the folded norm */
  for (int wi = 0; wi < 2; ++wi) {
    nx_plan plan = NULL;
    nx_plan_options o = NX_PLAN_OPTIONS_DEFAULT;
    NX_OK_(nx_plan_create(&plan, norm_cast_step, NULL, 3, &o));
    const int64_t xs[2] = {64, widths[wi]}, ws[1] = {widths[wi]}, x2s[2] = {16, 48};
    for (int run = 0; run < 4; ++run) {
      NX_OK_(nx_random_set_seed(90 + (uint64_t)run));
      nx_tensor in[3], want[3], got[3];
      NX_OK_(nx_tensor_randn(&in[0], xs, 2, NX_F32, test_device(), NULL));
      NX_OK_(nx_tensor_randn(&in[1], ws, 1, NX_F32, test_device(), NULL));
      NX_OK_(nx_tensor_randn(&in[2], x2s, 2, NX_F32, test_device(), NULL));
      NX_OK_(norm_cast_step(want, 3, in, 3, NULL));
      NX_OK_(nx_plan_run(plan, got, 3, in, 3, NULL));
      for (int k = 0; k < 3; ++k) {
        int64_t n;
        nx_dtype dt;
        NX_OK_(nx_tensor_numel(want[k], &n));
        NX_OK_(nx_tensor_dtype(want[k], &dt));
        n *= (int64_t)nx_dtype_size(dt);
        char* w = malloc((size_t)n);
        char* g = malloc((size_t)n);
        NX_OK_(nx_tensor_copy_to_host(want[k], w, (size_t)n, NULL));
        NX_OK_(nx_tensor_copy_to_host(got[k], g, (size_t)n, NULL));
        if (memcmp(w, g, (size_t)n) != 0) fail_msg("width %lld, run %d, output %d: replay differs from eager",
                                                  (long long)widths[wi], run, k);
        free(w), free(g);
        nx_tensor_free(want[k]), nx_tensor_free(got[k]);
      }
      for (int k = 0; k < 3; ++k) nx_tensor_free(in[k]);
    }
    const char* text = NULL;
    NX_OK_(nx_plan_to_string(plan, NX_PLAN_TABLE, &text));
    if (!strstr(text, "1 casts folded into norms")) fail_msg("expected one cast folded into its norm:\n%.1500s", text);
    nx_plan_free(plan);
  }
}

int main(void) {
  if (test_device().type == NX_CUDA && nx_cuda_device_count() == 0) {
    printf("NEXUS_TEST_DEVICE=cuda but no CUDA device: skipped\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      NX_TEST(test_replay_equals_eager_bit_for_bit), NX_TEST(test_dropout_replay_equals_eager_bit_for_bit),
      NX_TEST(test_dropout_replays_draw_new_masks_and_follow_the_seed), NX_TEST(test_replay_advances_optimizer_state),
      NX_TEST(test_new_shape_compiles_its_own_step), NX_TEST(test_max_plans_bounds_the_cache),
      NX_TEST(test_host_work_inside_the_step_is_refused), NX_TEST(test_misuse),
      NX_TEST(test_structs_of_c_api_1_3_still_work),
      NX_TEST(test_fused_chains_equal_eager_bit_for_bit), NX_TEST(test_fused_call_buffers_do_not_share_arena_memory),
      NX_TEST(test_chains_fused_into_reductions_equal_eager),
      NX_TEST(test_plan_prints_as_table_and_dot), NX_TEST(test_loss_scaled_replay_equals_eager_bit_for_bit),
      NX_TEST(test_loss_scaled_step_refusals), NX_TEST(test_sgd_momentum_replay_equals_eager_bit_for_bit),
      NX_TEST(test_repeated_calls_are_computed_once), NX_TEST(test_norm_writes_the_cast_of_its_output),
      NX_TEST(test_cpu_lanes_equal_eager_and_follow_the_thread_count),
  };
  /* NX_TEST_FILTER=pattern runs the matching tests only (compute-sanitizer's racecheck takes one
   * test at a time: scripts/gpu_run.sh sanitize with SAN_SPLIT=1) */
  if (getenv("NX_TEST_FILTER")) cmocka_set_test_filter(getenv("NX_TEST_FILTER"));
  return cmocka_run_group_tests(tests, NULL, NULL);
}
