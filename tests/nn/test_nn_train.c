/* 50-step training of a tiny GPT against PyTorch: `test_nn_train FIXTURE_DIR`.
 *
 * train.safetensors holds, per run, torch's initial weights (train_w_<run>.safetensors, under
 * NexusGrad's names), 50 fixed batches of (input, target) token ids and torch's loss at every
 * step, plus the final parameters. The same f64 GPT (rope, SwiGLU, RMSNorm, grouped-query heads,
 * tied embeddings) is created with nx_gpt_create, loaded, and trained through the C API with the
 * same AdamW settings: forward, nx_cross_entropy (mean), nx_backward, optionally
 * nx_clip_grad_norm, nx_optimizer_step, nx_optimizer_zero_grad. Every step's loss must be within
 * 1e-8 of torch's, and the final parameters within 1e-8 (abs) + 1e-8 (rel). The whole curve and
 * the largest deviation are printed. */
#include "nn_test.h"

#define LOSS_TOL 1e-8

static nx_safetensors g_train;

/* batch s of a [steps, B, T] i64 fixture tensor as a new [B, T] tensor */
static nx_tensor batch_of(nx_tensor all, int64_t s) {
  nx_tensor sl = NULL, sq = NULL;
  NX_OK_(nx_slice(&sl, all, 0, s, s + 1, 1, NULL));
  NX_OK_(nx_squeeze(&sq, sl, 0, NULL));
  nx_tensor_free(sl);
  return sq;
}

static void run_training(void** state) {
  const char* key = (const char*)*state;
  char name[200];
  snprintf(name, sizeof name, "run.%s", key);
  const char* c = st_meta(g_train, name);
  const int64_t steps = conf_int(c, "steps"), vocab = conf_int(c, "vocab");
  const double clip = conf_real(c, "clip");
  nx_transformer_config cfg = transformer_config(c);
  nx_module gpt = NULL;
  NX_OK_(nx_gpt_create(&gpt, &cfg, NX_F64, CPU, NULL));
  snprintf(name, sizeof name, "train_w_%s.safetensors", key);
  NX_OK_(nx_module_load(gpt, fix_path(name)));
  nx_tensor* params = NULL;
  size_t np = 0;
  NX_OK_(nx_module_parameters(gpt, &params, &np));
  nx_optimizer opt = NULL;
  const nx_adam_options adamw = {sizeof adamw, conf_real(c, "lr"), conf_real(c, "beta1"), conf_real(c, "beta2"),
                                 conf_real(c, "eps"), conf_real(c, "wd"), true};
  NX_OK_(nx_adam_create(&opt, params, np, &adamw));
  nx_tensor xs = st_getf(g_train, "%s.x", key), ys = st_getf(g_train, "%s.y", key);
  nx_tensor want_loss = st_getf(g_train, "%s.loss", key);
  assert_int_equal(tensor_numel(want_loss), steps);
  double* torch_loss = host_f64(want_loss);
  double* our_loss = calloc((size_t)steps, sizeof(double));
  double max_diff = 0.0;
  int64_t worst = 0;
  for (int64_t s = 0; s < steps; ++s) {
    nx_tensor x = batch_of(xs, s), y = batch_of(ys, s), logits = t_forward(gpt, x), l2 = NULL, y1 = NULL, loss = NULL;
    const int64_t flat[2] = {-1, vocab}, flat1[1] = {-1};
    NX_OK_(nx_reshape(&l2, logits, flat, 2, NULL));
    NX_OK_(nx_reshape(&y1, y, flat1, 1, NULL));
    NX_OK_(nx_cross_entropy(&loss, l2, y1, -100, 0.0, NX_REDUCTION_MEAN, NULL));
    our_loss[s] = scalar_of(loss);
    NX_OK_(nx_backward(loss, NULL, NULL, NULL));
    if (clip > 0) {
      double norm = 0.0;
      NX_OK_(nx_clip_grad_norm(&norm, params, np, clip, NULL));
      assert_true(norm > 0.0);
    }
    NX_OK_(nx_optimizer_step(opt, NULL));
    NX_OK_(nx_optimizer_zero_grad(opt));
    const double d = fabs(our_loss[s] - torch_loss[s]);
    if (!(d <= max_diff)) max_diff = d, worst = s;
    nx_tensor_free(loss);
    nx_tensor_free(y1);
    nx_tensor_free(l2);
    nx_tensor_free(logits);
    nx_tensor_free(y);
    nx_tensor_free(x);
  }
  printf("run %s (AdamW lr %g, betas %g/%g, wd %g, clip %g): %lld steps\n  step        torch loss         nexus loss    |diff|\n",
         key, conf_real(c, "lr"), conf_real(c, "beta1"), conf_real(c, "beta2"), conf_real(c, "wd"), clip,
         (long long)steps);
  for (int64_t s = 0; s < steps; ++s)
    printf("  %4lld  %.15f  %.15f  %.2e\n", (long long)s + 1, torch_loss[s], our_loss[s],
           fabs(our_loss[s] - torch_loss[s]));
  printf("run %s: loss %.10f -> %.10f (torch) vs %.10f -> %.10f (nexus); max |diff| %.3e at step %lld\n", key,
         torch_loss[0], torch_loss[steps - 1], our_loss[0], our_loss[steps - 1], max_diff, (long long)worst + 1);
  if (!(max_diff <= LOSS_TOL)) {
    print_error("run %s: the loss curve departs from torch's by %.3e (> %g) at step %lld\n", key, max_diff, LOSS_TOL,
                (long long)worst + 1);
    fail();
  }
  assert_true(our_loss[steps - 1] < our_loss[0] - 0.5); /* it did learn */
  double max_param = 0.0;
  for (size_t i = 0; i < np; ++i) {
    const char* pname = NULL;
    nx_tensor p = t_param(gpt, i, &pname), want = st_getf(g_train, "%s.final.%s", key, pname);
    char what[256];
    snprintf(what, sizeof what, "%s final %s", key, pname);
    double e = expect_close(p, want, LOSS_TOL, LOSS_TOL, what);
    if (e > max_param) max_param = e;
    nx_tensor_free(want);
    nx_tensor_free(p);
  }
  printf("run %s: final parameters: max |diff| %.3e over %zu tensors\n", key, max_param, np);
  free(our_loss);
  free(torch_loss);
  nx_tensor_free(want_loss);
  nx_tensor_free(ys);
  nx_tensor_free(xs);
  nx_optimizer_free(opt);
  nx_tensor_array_free(params, np);
  nx_module_free(gpt);
}

int main(int argc, char** argv) {
  parse_fixdir(argc, argv);
  g_train = open_fixture("train.safetensors");
  const char* list = st_meta(g_train, "runs");
  size_t n = 0;
  char buf[256];
  while (list_item(list, n, buf, sizeof buf)) ++n;
  struct CMUnitTest* tests = calloc(n, sizeof *tests);
  char** keys = calloc(n, sizeof *keys);
  for (size_t i = 0; i < n; ++i) {
    list_item(list, i, buf, sizeof buf);
    keys[i] = strdup(buf);
    tests[i] = (struct CMUnitTest){keys[i], run_training, leak_setup, leak_teardown, keys[i]};
  }
  int rc = _cmocka_run_group_tests("nn_train", tests, n, NULL, NULL);
  for (size_t i = 0; i < n; ++i) free(keys[i]);
  free(keys);
  free(tests);
  nx_safetensors_free(g_train);
  return rc;
}
