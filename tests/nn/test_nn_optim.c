/* Optimizers against torch.optim: `test_nn_optim FIXTURE_DIR`.
 *
 * For every case of optim.safetensors (SGD plain / momentum / Nesterov / weight decay, Adam,
 * Adam with L2 weight decay, AdamW; f64 and f32; and variants where one parameter has no
 * gradient at one step, which torch.optim skips) the same initial parameters get the same
 * gradients for 3 steps; after every nx_optimizer_step each parameter must match torch's
 * (f64: atol/rtol 1e-10; f32: 1e-5 / 1e-4). Then the saved state (nx_optimizer_save) must hold
 * torch's exp_avg / exp_avg_sq / per-parameter step / momentum_buffer and the step count, and a
 * state round trip must
 * continue exactly: a fresh optimizer over fresh copies of the parameters after step 2, loaded
 * with nx_optimizer_load, takes a step 3 bitwise identical to the original's. The saved files
 * stay in FIXTURE_DIR/saved for check_saved.py. */
#include "nn_test.h"

static nx_safetensors g_opt;

typedef struct {
  const char* key;
  const char* conf;
  size_t n;
  int64_t steps;
  nx_dtype dt;
} optim_case;

static nx_optimizer make_optimizer(const optim_case* c, nx_tensor* params) {
  nx_optimizer o = NULL;
  if (strcmp(conf_str(c->conf, "kind"), "sgd") == 0) {
    const nx_sgd_options opt = {sizeof opt, conf_real(c->conf, "lr"), conf_real(c->conf, "momentum"),
                                conf_bool(c->conf, "nesterov"), conf_real(c->conf, "wd")};
    NX_OK_(nx_sgd_create(&o, params, c->n, &opt));
  } else {
    const nx_adam_options opt = {sizeof opt, conf_real(c->conf, "lr"), conf_real(c->conf, "beta1"),
                                 conf_real(c->conf, "beta2"), conf_real(c->conf, "eps"), conf_real(c->conf, "wd"),
                                 conf_bool(c->conf, "decoupled")};
    NX_OK_(nx_adam_create(&o, params, c->n, &opt));
  }
  return o;
}

/* A fresh leaf requiring grad holding t's values. */
static nx_tensor fresh_leaf(nx_tensor t) {
  int64_t shape[16];
  size_t nd = 0;
  NX_OK_(nx_tensor_ndim(t, &nd));
  NX_OK_(nx_tensor_shape(t, shape, 16));
  double* v = host_f64(t);
  nx_tensor c = make_from_f64(v, shape, nd, tensor_dtype(t));
  free(v);
  NX_OK_(nx_tensor_set_requires_grad(c, true));
  return c;
}

/* Gives every parameter that has a gradient at step s in the fixture exactly that gradient
 * (backward of p * 1 with upstream g). */
static void set_grads(const optim_case* c, nx_tensor* params, int64_t s) {
  for (size_t i = 0; i < c->n; ++i) {
    char name[160];
    snprintf(name, sizeof name, "%s.g.%lld.%zu", c->key, (long long)s, i);
    if (!st_has(g_opt, name)) continue;
    nx_tensor g = st_get(g_opt, name), y = NULL;
    NX_OK_(nx_mul_scalar(&y, params[i], 1.0, NULL));
    NX_OK_(nx_backward(y, g, NULL, NULL));
    nx_tensor_free(y);
    nx_tensor_free(g);
  }
}

static void run_case(void** state) {
  optim_case c = {.key = (const char*)*state};
  char name[200];
  snprintf(name, sizeof name, "optim.%s", c.key);
  c.conf = st_meta(g_opt, name);
  c.n = (size_t)conf_int(c.conf, "nparams");
  c.steps = conf_int(c.conf, "steps");
  c.dt = conf_dtype(c.conf);
  assert_true(c.n <= 8 && c.steps == 3);
  nx_tensor p[8] = {NULL}, q[8] = {NULL};
  for (size_t i = 0; i < c.n; ++i) {
    p[i] = st_getf(g_opt, "%s.p.%zu", c.key, i);
    assert_int_equal(tensor_dtype(p[i]), c.dt);
    NX_OK_(nx_tensor_set_requires_grad(p[i], true));
  }
  nx_optimizer opt = make_optimizer(&c, p), opt2 = NULL;
  double max_err = 0.0;
  char path[1024];
  snprintf(path, sizeof path, "%s", fix_path("saved"));
  snprintf(path + strlen(path), sizeof path - strlen(path), "/optim_%s.safetensors", c.key);
  for (int64_t s = 0; s < c.steps; ++s) {
    if (s == c.steps - 1) {
      /* state round trip before the last step: fresh parameters (copies) + a fresh optimizer */
      for (size_t i = 0; i < c.n; ++i) q[i] = fresh_leaf(p[i]);
      NX_OK_(nx_optimizer_save(opt, path));
      opt2 = make_optimizer(&c, q);
      NX_OK_(nx_optimizer_load(opt2, path));
      set_grads(&c, q, s);
      NX_OK_(nx_optimizer_step(opt2, NULL));
    }
    set_grads(&c, p, s);
    NX_OK_(nx_optimizer_step(opt, NULL));
    NX_OK_(nx_optimizer_zero_grad(opt));
    for (size_t i = 0; i < c.n; ++i) {
      nx_tensor want = st_getf(g_opt, "%s.after.%lld.%zu", c.key, (long long)s, i);
      char what[256];
      snprintf(what, sizeof what, "%s parameter %zu after step %lld", c.key, i, (long long)s + 1);
      double e = expect_close_dt(p[i], want, what);
      if (e > max_err) max_err = e;
      if (q[i]) {
        snprintf(what, sizeof what, "%s parameter %zu after step %lld with the reloaded state", c.key, i, (long long)s + 1);
        expect_identical(q[i], p[i], what);
      }
      nx_tensor_free(want);
    }
  }
  /* the state after the last step against torch's */
  NX_OK_(nx_optimizer_save(opt, path));
  nx_safetensors st = NULL;
  NX_OK_(nx_safetensors_open(&st, path));
  const char* kind = NULL;
  NX_OK_(nx_safetensors_metadata(st, "optimizer", &kind));
  assert_non_null(kind);
  const bool adam = strcmp(conf_str(c.conf, "kind"), "adam") == 0;
  assert_string_equal(kind, adam ? (conf_bool(c.conf, "decoupled") ? "AdamW" : "Adam") : "SGD");
  nx_tensor step = st_get(st, "step");
  assert_int_equal((int64_t)scalar_of(step), c.steps);
  nx_tensor_free(step);
  size_t nstate = 0, nsaved = 0;
  for (size_t i = 0; i < c.n; ++i) {
    /* Adam: exp_avg, exp_avg_sq and the per-parameter step count; SGD: momentum_buffer */
    const char* ours[3] = {adam ? "m" : "momentum", adam ? "v" : NULL, adam ? "step" : NULL};
    const char* theirs[3] = {adam ? "m" : "buf", adam ? "v" : NULL, adam ? "step" : NULL};
    for (int k = 0; k < 3 && ours[k]; ++k) {
      char tn[160];
      snprintf(tn, sizeof tn, "%s.%s.%zu", c.key, theirs[k], i);
      if (!st_has(g_opt, tn)) continue; /* SGD without momentum keeps no state */
      nx_tensor want = st_get(g_opt, tn), got = st_getf(st, "%s.%zu", ours[k], i);
      char what[256];
      snprintf(what, sizeof what, "%s saved state %s.%zu", c.key, ours[k], i);
      expect_close_dt(got, want, what);
      ++nstate;
      nx_tensor_free(want);
      nx_tensor_free(got);
    }
  }
  NX_OK_(nx_safetensors_count(st, &nsaved));
  assert_int_equal(nsaved, nstate + 1); /* the state tensors and "step", nothing else */
  nx_safetensors_free(st);
  printf("  %-20s %s  3 steps, %zu parameters: max |err| %.2e; %zu state tensors match; reload continues exactly\n",
         c.key, nx_dtype_name(c.dt), c.n, max_err, nstate);
  nx_optimizer_free(opt);
  nx_optimizer_free(opt2);
  for (size_t i = 0; i < c.n; ++i) {
    nx_tensor_free(p[i]);
    nx_tensor_free(q[i]);
  }
}

/* Loading one optimizer kind's state into another is refused. */
static void test_load_wrong_kind(void** state) {
  (void)state;
  double v[3] = {1, 2, 3};
  int64_t shape[1] = {3};
  nx_tensor p = make_from_f64(v, shape, 1, NX_F64);
  NX_OK_(nx_tensor_set_requires_grad(p, true));
  nx_optimizer sgd = NULL, adam = NULL;
  const nx_sgd_options sgd_opt = {sizeof sgd_opt, 0.1, 0.9, false, 0.0};
  const nx_adam_options adam_opt = {sizeof adam_opt, 0.1, 0.9, 0.999, 1e-8, 0.0, false};
  NX_OK_(nx_sgd_create(&sgd, &p, 1, &sgd_opt));
  NX_OK_(nx_adam_create(&adam, &p, 1, &adam_opt));
  char path[1024];
  snprintf(path, sizeof path, "%s/optim_wrong_kind.safetensors", fix_path("saved"));
  NX_OK_(nx_optimizer_save(sgd, path));
  EXPECT_ERR(NX_ERR_IO, nx_optimizer_load(adam, path), "Adam");
  nx_optimizer_free(sgd);
  nx_optimizer_free(adam);
  nx_tensor_free(p);
}

int main(int argc, char** argv) {
  parse_fixdir(argc, argv);
  g_opt = open_fixture("optim.safetensors");
  const char* list = st_meta(g_opt, "optims");
  size_t n = 0;
  char buf[256];
  while (list_item(list, n, buf, sizeof buf)) ++n;
  struct CMUnitTest* tests = calloc(n + 1, sizeof *tests);
  char** keys = calloc(n, sizeof *keys);
  for (size_t i = 0; i < n; ++i) {
    list_item(list, i, buf, sizeof buf);
    keys[i] = strdup(buf);
    tests[i] = (struct CMUnitTest){keys[i], run_case, leak_setup, leak_teardown, keys[i]};
  }
  tests[n] = (struct CMUnitTest)NX_TEST(test_load_wrong_kind);
  int rc = _cmocka_run_group_tests("nn_optim", tests, n + 1, NULL, NULL);
  print_headroom("optimizer parity");
  for (size_t i = 0; i < n; ++i) free(keys[i]);
  free(keys);
  free(tests);
  nx_safetensors_free(g_opt);
  return rc;
}
