/* Compiled steps (nx_plan_*): a GPT training step (forward, cross-entropy, backward, clipping,
 * AdamW with a cosine schedule) run 100 times eagerly and 100 times through a plan from the same
 * initial state and batches gives the same losses and parameters bit for bit; shapes get their own
 * compiled step; stale plans are captured again; what a replay cannot repeat is refused by name;
 * the plan prints as a table and as DOT. The device is NEXUS_TEST_DEVICE (cpu unless "cuda"). */
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
} Gpt;

static const int64_t kVocab = 61, kContext = 16, kDim = 32;

static void gpt_init(Gpt* g, nx_device dev) {
  memset(g, 0, sizeof *g);
  nx_transformer_config cfg = {sizeof(nx_transformer_config), kVocab, kContext, kDim, 2, 4, 0, 0, false, true, true,
                               true, true, 0.0, NX_ACTIVATION_GELU, 0};
  NX_OK_(nx_random_set_seed(77));
  NX_OK_(nx_gpt_create(&g->model, &cfg, NX_F32, dev, NULL));
  NX_OK_(nx_module_parameters(g->model, &g->params, &g->nparams));
  const nx_adam_options adamw = {sizeof adamw, 3e-3, 0.9, 0.95, 1e-8, 0.1, true};
  NX_OK_(nx_adam_create(&g->opt, g->params, g->nparams, &adamw));
  g->context = kContext;
  g->vocab = kVocab;
}
static void gpt_free(Gpt* g) {
  nx_tensor_array_free(g->params, g->nparams);
  nx_optimizer_free(g->opt);
  nx_module_free(g->model);
}

/* The step: what a training loop's body does between getting a batch and reading the loss. */
static nx_status gpt_step(nx_tensor* outputs, size_t noutputs, const nx_tensor* inputs, size_t ninputs, void* user) {
  Gpt* g = (Gpt*)user;
  (void)noutputs;
  (void)ninputs;
  int64_t shape[2];
  TRY(nx_tensor_shape(inputs[0], shape, 2));
  nx_tensor logits = NULL, flat = NULL, yflat = NULL, loss = NULL;
  TRY(nx_module_forward(&logits, g->model, inputs[0], NULL));
  const int64_t fs[2] = {shape[0] * shape[1], g->vocab}, ys[1] = {shape[0] * shape[1]};
  TRY(nx_reshape(&flat, logits, fs, 2, NULL));
  TRY(nx_reshape(&yflat, inputs[1], ys, 1, NULL));
  TRY(nx_cross_entropy(&loss, flat, yflat, -100, 0.0, NX_REDUCTION_MEAN, NULL));
  nx_tensor_free(logits);
  nx_tensor_free(flat);
  nx_tensor_free(yflat);
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

/* ---------------------------------------------------------------- replay equals eager */
static void test_replay_equals_eager_bit_for_bit(void** state) {
  (void)state;
  NX_OK_(nx_runtime_set_deterministic(true));
  const int64_t steps = 100, batch = 4;
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
  if (test_device().type == NX_CUDA && !getenv("NEXUS_TEST_PLAN_FUSE")) { /* bit for bit with fusion on */
    assert_true(st.fused_groups > 10);
    assert_true(st.fused_ops >= 2 * st.fused_groups);
  }
  nx_plan_free(plan);
  gpt_free(&eager);
  gpt_free(&compiled);
  NX_OK_(nx_runtime_set_deterministic(false));
}

/* The optimizer's step count advances at every replay as eagerly: saved state says 10 steps. */
static void test_replay_advances_optimizer_state(void** state) {
  (void)state;
  Gpt g;
  gpt_init(&g, test_device());
  nx_plan plan = make_plan(&g);
  for (int64_t s = 0; s < 10; ++s) run_step(&g, plan, 2, s, 10);
  assert_int_equal(plan_stats(plan).replays, 8);
  char path[] = "plan_opt_state.safetensors";
  NX_OK_(nx_optimizer_save(g.opt, path));
  nx_safetensors st;
  NX_OK_(nx_safetensors_open(&st, path));
  nx_tensor steps_t = NULL;
  NX_OK_(nx_safetensors_get(&steps_t, st, "step", test_device(), NULL));
  double v;
  NX_OK_(nx_tensor_item(steps_t, &v, NULL));
  assert_int_equal((int64_t)v, 10);
  nx_tensor_free(steps_t);
  nx_safetensors_free(st);
  remove(path);
  nx_plan_free(plan);
  gpt_free(&g);
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

/* ---------------------------------------------------------------- refusals */
static void test_host_read_inside_the_step_is_refused(void** state) {
  (void)state;
  Gpt g;
  gpt_init(&g, test_device());
  g.read_loss = true;
  nx_plan plan = make_plan(&g);
  nx_tensor x, y, loss = SENTINEL;
  make_batch(&x, &y, 2, 0, test_device());
  const nx_tensor in[2] = {x, y};
  NX_OK_(nx_plan_run(plan, &loss, 1, in, 2, NULL)); /* eager: fine */
  nx_tensor_free(loss);
  loss = SENTINEL;
  EXPECT_ERR(NX_ERR_STATE, nx_plan_run(plan, &loss, 1, in, 2, NULL), "nx_plan_run", "cannot be captured",
             "nx_tensor_item", "on the host");
  assert_null(loss);
  g.read_loss = false; /* the plan works once the step no longer reads */
  NX_OK_(nx_plan_run(plan, &loss, 1, in, 2, NULL));
  nx_tensor_free(loss);
  nx_tensor_free(x);
  nx_tensor_free(y);
  nx_plan_free(plan);
  gpt_free(&g);
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

int main(void) {
  if (test_device().type == NX_CUDA && nx_cuda_device_count() == 0) {
    printf("NEXUS_TEST_DEVICE=cuda but no CUDA device: skipped\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      NX_TEST(test_replay_equals_eager_bit_for_bit), NX_TEST(test_replay_advances_optimizer_state),
      NX_TEST(test_new_shape_compiles_its_own_step), NX_TEST(test_max_plans_bounds_the_cache),
      NX_TEST(test_host_read_inside_the_step_is_refused), NX_TEST(test_misuse),
      NX_TEST(test_plan_prints_as_table_and_dot),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
