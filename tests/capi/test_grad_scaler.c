/* The gradient scaler (nx_grad_scaler_*), against torch.cuda.amp.GradScaler's semantics: a scaled
 * loss gives scale times the gradients and unscaling gives them back; a step whose gradients hold
 * Inf or NaN is skipped (parameters unchanged) and the scale backs off; the scale grows after
 * growth_interval clean steps in a row; the per-optimizer state machine (unscale once, not after
 * step, step once, update after something was unscaled) reports NX_ERR_STATE; options are
 * validated; disabled, it only steps. Also: gradients that share storage (add's VJP hands both
 * operands one gradient) are each unscaled once, and an f16 gradient that flushes to zero
 * without scaling survives with it. */
#include "nx_test.h"

static const int64_t kFour[] = {4};

static nx_tensor leaf(const double* v, const int64_t* shape, size_t ndim) {
  nx_tensor t = make_from_f64(v, shape, ndim, NX_F32);
  NX_OK_(nx_tensor_set_requires_grad(t, true));
  return t;
}

static nx_grad_scaler make_scaler(double init_scale, int64_t growth_interval) {
  nx_grad_scaler_options o = NX_GRAD_SCALER_OPTIONS_DEFAULT;
  o.init_scale = init_scale;
  o.growth_interval = growth_interval;
  nx_grad_scaler s = NULL;
  NX_OK_(nx_grad_scaler_create(&s, &o));
  return s;
}

static double scale_of(nx_grad_scaler s) {
  double v = NAN;
  NX_OK_(nx_grad_scaler_get_scale(s, &v));
  return v;
}

/* loss = sum(p * x): d loss / d p = x. */
static nx_tensor dot_loss(nx_tensor p, const double* x) {
  nx_tensor xt = make_from_f64(x, kFour, 1, NX_F32), px = NULL, loss = NULL;
  NX_OK_(nx_mul(&px, p, xt, NULL));
  NX_OK_(nx_sum(&loss, px, NULL, 0, false, NULL));
  nx_tensor_free(px);
  nx_tensor_free(xt);
  return loss;
}

/* Backward of scaler.scale(loss). */
static void scaled_backward(nx_grad_scaler s, nx_tensor loss) {
  nx_tensor scaled = NULL;
  NX_OK_(nx_grad_scaler_scale(&scaled, s, loss, NULL));
  NX_OK_(nx_backward(scaled, NULL, NULL, NULL));
  nx_tensor_free(scaled);
}

static void assert_grad(nx_tensor p, const double* want, double rtol) {
  nx_tensor g = NULL;
  NX_OK_(nx_tensor_grad(&g, p));
  assert_non_null(g);
  assert_tensor_close(g, want, 4, rtol, 0);
  nx_tensor_free(g);
}

static void test_defaults_and_scaled_gradients(void** state) {
  (void)state;
  nx_grad_scaler s = NULL;
  NX_OK_(nx_grad_scaler_create(&s, NULL));
  assert_true(scale_of(s) == 65536.0);
  nx_grad_scaler_free(s);

  const double p0[] = {1, -2, 3, 0.5}, x[] = {0.25, -1, 2, 3};
  nx_tensor p = leaf(p0, kFour, 1);
  s = make_scaler(1024, 2000);
  nx_tensor loss = dot_loss(p, x), scaled = NULL;
  NX_OK_(nx_grad_scaler_scale(&scaled, s, loss, NULL));
  assert_true(scalar_of(scaled) == 1024.0 * scalar_of(loss));
  NX_OK_(nx_backward(scaled, NULL, NULL, NULL));
  const double x1024[] = {256, -1024, 2048, 3072};
  assert_grad(p, x1024, 0); /* scale times the unscaled gradient x */

  nx_optimizer opt = NULL;
  NX_OK_(nx_sgd_create(&opt, &p, 1, NULL));
  NX_OK_(nx_grad_scaler_unscale(s, opt, NULL));
  assert_grad(p, x, 0); /* exact: the scale is a power of two */
  bool stepped = false;
  NX_OK_(nx_grad_scaler_step(&stepped, s, opt, NULL)); /* uses the unscaled gradients, no second division */
  assert_true(stepped);
  double want[4];
  for (int i = 0; i < 4; ++i) want[i] = (double)(float)(p0[i] - (double)(float)1e-3 * x[i]);
  assert_tensor_close(p, want, 4, 1e-6, 0);
  NX_OK_(nx_grad_scaler_update(s));
  assert_true(scale_of(s) == 1024.0);

  nx_optimizer_free(opt);
  nx_grad_scaler_free(s);
  nx_tensor_free(scaled);
  nx_tensor_free(loss);
  nx_tensor_free(p);
}

static void test_inf_or_nan_gradient_skips_the_step_and_backs_off(void** state) {
  (void)state;
  const double p0[] = {1, 2, 3, 4};
  const double bad[2][4] = {{1, INFINITY, 1, 1}, {1, 1, NAN, 1}};
  for (int k = 0; k < 2; ++k) {
    nx_tensor p = leaf(p0, kFour, 1);
    nx_optimizer opt = NULL;
    const nx_sgd_options so = {sizeof so, 0.1, 0.0, false, 0.0};
    NX_OK_(nx_sgd_create(&opt, &p, 1, &so));
    nx_grad_scaler s = make_scaler(8, 2000);
    nx_tensor loss = dot_loss(p, bad[k]);
    scaled_backward(s, loss);
    bool stepped = true;
    NX_OK_(nx_grad_scaler_step(&stepped, s, opt, NULL));
    assert_false(stepped);
    assert_tensor_close(p, p0, 4, 0, 0); /* unchanged */
    assert_true(scale_of(s) == 8.0);     /* the scale changes in update, not in step */
    NX_OK_(nx_grad_scaler_update(s));
    assert_true(scale_of(s) == 4.0);
    /* the next clean iteration steps again */
    const double x[] = {1, 1, 1, 1};
    nx_tensor loss2 = dot_loss(p, x);
    NX_OK_(nx_optimizer_zero_grad(opt));
    scaled_backward(s, loss2);
    NX_OK_(nx_grad_scaler_step(NULL, s, opt, NULL)); /* stepped may be NULL */
    NX_OK_(nx_grad_scaler_update(s));
    double want[4];
    for (int i = 0; i < 4; ++i) want[i] = (double)(float)(p0[i] - (double)(float)0.1);
    assert_tensor_close(p, want, 4, 1e-7, 0);
    nx_tensor_free(loss2);
    nx_tensor_free(loss);
    nx_grad_scaler_free(s);
    nx_optimizer_free(opt);
    nx_tensor_free(p);
  }
}

/* One iteration with gradient x (finite or not); returns whether it stepped. */
static bool iteration(nx_grad_scaler s, nx_optimizer opt, nx_tensor p, bool finite) {
  const double good[] = {1, 2, 3, 4}, bad[] = {1, 2, INFINITY, 4};
  NX_OK_(nx_optimizer_zero_grad(opt));
  nx_tensor loss = dot_loss(p, finite ? good : bad);
  scaled_backward(s, loss);
  nx_tensor_free(loss);
  bool stepped = false;
  NX_OK_(nx_grad_scaler_step(&stepped, s, opt, NULL));
  NX_OK_(nx_grad_scaler_update(s));
  return stepped;
}

static void test_growth_after_growth_interval_clean_steps(void** state) {
  (void)state;
  const double p0[] = {0, 0, 0, 0};
  nx_tensor p = leaf(p0, kFour, 1);
  nx_optimizer opt = NULL;
  NX_OK_(nx_sgd_create(&opt, &p, 1, NULL));
  nx_grad_scaler s = make_scaler(16, 3);
  /* clean, clean, clean: grows on the third update */
  assert_true(iteration(s, opt, p, true));
  assert_true(iteration(s, opt, p, true));
  assert_true(scale_of(s) == 16.0);
  assert_true(iteration(s, opt, p, true));
  assert_true(scale_of(s) == 32.0);
  /* clean, clean, Inf: backs off and the count restarts */
  assert_true(iteration(s, opt, p, true));
  assert_true(iteration(s, opt, p, true));
  assert_false(iteration(s, opt, p, false));
  assert_true(scale_of(s) == 16.0);
  assert_true(iteration(s, opt, p, true));
  assert_true(iteration(s, opt, p, true));
  assert_true(scale_of(s) == 16.0);
  assert_true(iteration(s, opt, p, true));
  assert_true(scale_of(s) == 32.0);
  nx_grad_scaler_free(s);

  /* growth that would overflow f32 keeps the scale */
  s = make_scaler(3e38, 1);
  const double tiny[] = {1e-3, 1e-3, 1e-3, 1e-3};
  NX_OK_(nx_optimizer_zero_grad(opt));
  nx_tensor loss = dot_loss(p, tiny);
  scaled_backward(s, loss);
  bool stepped = false;
  NX_OK_(nx_grad_scaler_step(&stepped, s, opt, NULL));
  assert_true(stepped);
  NX_OK_(nx_grad_scaler_update(s));
  assert_true(scale_of(s) == (double)(float)3e38);
  nx_tensor_free(loss);
  nx_grad_scaler_free(s);
  nx_optimizer_free(opt);
  nx_tensor_free(p);
}

static void test_state_errors(void** state) {
  (void)state;
  const double p0[] = {1, 2, 3, 4}, x[] = {1, 1, 1, 1};
  nx_tensor p = leaf(p0, kFour, 1);
  nx_optimizer opt = NULL;
  NX_OK_(nx_sgd_create(&opt, &p, 1, NULL));
  nx_grad_scaler s = make_scaler(4, 2000);

  /* nothing to check: no gradient yet */
  bool stepped = true;
  EXPECT_ERR(NX_ERR_STATE, nx_grad_scaler_step(&stepped, s, opt, NULL), "nx_grad_scaler_step", "no parameter", "gradient");
  assert_false(stepped); /* a failed step writes false */
  EXPECT_ERR(NX_ERR_STATE, nx_grad_scaler_update(s), "nx_grad_scaler_update", "no gradients were unscaled");
  nx_grad_scaler_free(s);
  s = make_scaler(4, 2000);
  EXPECT_ERR(NX_ERR_STATE, nx_grad_scaler_update(s), "nx_grad_scaler_update", "no gradients were unscaled");

  nx_tensor loss = dot_loss(p, x);
  scaled_backward(s, loss);
  NX_OK_(nx_grad_scaler_unscale(s, opt, NULL));
  EXPECT_ERR(NX_ERR_STATE, nx_grad_scaler_unscale(s, opt, NULL), "nx_grad_scaler_unscale", "already unscaled");
  assert_grad(p, x, 0); /* the failed call did not unscale again */
  NX_OK_(nx_grad_scaler_step(NULL, s, opt, NULL));
  EXPECT_ERR(NX_ERR_STATE, nx_grad_scaler_unscale(s, opt, NULL), "nx_grad_scaler_unscale", "after this optimizer's step");
  EXPECT_ERR(NX_ERR_STATE, nx_grad_scaler_step(NULL, s, opt, NULL), "nx_grad_scaler_step", "already stepped");
  NX_OK_(nx_grad_scaler_update(s));
  /* a new iteration starts clean */
  NX_OK_(nx_optimizer_zero_grad(opt));
  nx_tensor_free(loss);
  loss = dot_loss(p, x);
  scaled_backward(s, loss);
  NX_OK_(nx_grad_scaler_unscale(s, opt, NULL));
  NX_OK_(nx_grad_scaler_update(s)); /* update after unscale without step is allowed, as in torch */

  /* bad arguments */
  nx_tensor out = SENTINEL;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_grad_scaler_scale(&out, NULL, loss, NULL), "nx_grad_scaler_scale", "scaler is NULL");
  assert_null(out);
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_grad_scaler_scale(NULL, s, loss, NULL), "nx_grad_scaler_scale", "out is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_grad_scaler_scale(&out, s, NULL, NULL), "loss is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_grad_scaler_unscale(s, NULL, NULL), "nx_grad_scaler_unscale", "opt is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_grad_scaler_get_scale(s, NULL), "nx_grad_scaler_get_scale", "out is NULL");
  nx_tensor ids = NULL;
  NX_OK_(nx_tensor_arange(&ids, 0, 4, 1, NX_I64, CPU, NULL));
  EXPECT_ERR(NX_ERR_DTYPE, nx_grad_scaler_scale(&out, s, ids, NULL), "nx_grad_scaler_scale", "loss");
  nx_tensor_free(ids);

  nx_tensor_free(loss);
  nx_grad_scaler_free(s);
  nx_optimizer_free(opt);
  nx_tensor_free(p);
}

static void test_option_validation(void** state) {
  (void)state;
  struct {
    double init_scale, growth_factor, backoff_factor;
    int64_t growth_interval;
    const char* field;
    const char* value;
  } bad[] = {
      {0, 2, 0.5, 10, "init_scale", "got 0"},
      {-1, 2, 0.5, 10, "init_scale", "got -1"},
      {INFINITY, 2, 0.5, 10, "init_scale", "got inf"},
      {1e39, 2, 0.5, 10, "init_scale", "got 1e+39"}, /* not finite in f32 */
      {NAN, 2, 0.5, 10, "init_scale", "got nan"},
      {1, 1, 0.5, 10, "growth_factor", "got 1"},
      {1, 0.5, 0.5, 10, "growth_factor", "got 0.5"},
      {1, INFINITY, 0.5, 10, "growth_factor", "got inf"},
      {1, 2, 1, 10, "backoff_factor", "got 1"},
      {1, 2, 0, 10, "backoff_factor", "got 0"},
      {1, 2, -0.5, 10, "backoff_factor", "got -0.5"},
      {1, 2, 0.5, 0, "growth_interval", "got 0"},
      {1, 2, 0.5, -3, "growth_interval", "got -3"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    nx_grad_scaler_options o = NX_GRAD_SCALER_OPTIONS_DEFAULT;
    o.init_scale = bad[i].init_scale;
    o.growth_factor = bad[i].growth_factor;
    o.backoff_factor = bad[i].backoff_factor;
    o.growth_interval = bad[i].growth_interval;
    nx_grad_scaler s = SENTINEL;
    EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_grad_scaler_create(&s, &o), "nx_grad_scaler_create", bad[i].field,
               bad[i].value);
    assert_null(s);
    o.enabled = false; /* validated even when disabled */
    EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_grad_scaler_create(&s, &o), "nx_grad_scaler_create", bad[i].field);
  }
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_grad_scaler_create(NULL, NULL), "nx_grad_scaler_create", "out is NULL");
  /* rule 4: a newer, larger struct is refused by name; an exact one is read */
  nx_grad_scaler_options o = NX_GRAD_SCALER_OPTIONS_DEFAULT;
  o.struct_size = sizeof o + 8;
  nx_grad_scaler s = NULL;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_grad_scaler_create(&s, &o), "options->struct_size");
  o.struct_size = sizeof o;
  o.init_scale = 2;
  NX_OK_(nx_grad_scaler_create(&s, &o));
  assert_true(scale_of(s) == 2.0);
  nx_grad_scaler_free(s);
}

static void test_disabled_only_steps(void** state) {
  (void)state;
  nx_grad_scaler_options o = NX_GRAD_SCALER_OPTIONS_DEFAULT;
  o.enabled = false;
  nx_grad_scaler s = NULL;
  NX_OK_(nx_grad_scaler_create(&s, &o));
  assert_true(scale_of(s) == 1.0);
  const double p0[] = {1, 2, 3, 4}, x[] = {1, INFINITY, 1, 1};
  nx_tensor p = leaf(p0, kFour, 1);
  nx_optimizer opt = NULL;
  NX_OK_(nx_sgd_create(&opt, &p, 1, NULL));
  nx_tensor loss = dot_loss(p, x), scaled = NULL;
  NX_OK_(nx_grad_scaler_scale(&scaled, s, loss, NULL));
  assert_true(scalar_of(scaled) == scalar_of(loss) || isnan(scalar_of(loss)));
  NX_OK_(nx_backward(scaled, NULL, NULL, NULL));
  NX_OK_(nx_grad_scaler_unscale(s, opt, NULL)); /* does nothing, any number of times */
  NX_OK_(nx_grad_scaler_unscale(s, opt, NULL));
  assert_grad(p, x, 0);
  bool stepped = false;
  NX_OK_(nx_grad_scaler_step(&stepped, s, opt, NULL)); /* steps even with an Inf gradient */
  assert_true(stepped);
  double* now = host_f64(p);
  assert_true(isinf(now[1]));
  free(now);
  NX_OK_(nx_grad_scaler_update(s));
  assert_true(scale_of(s) == 1.0);
  nx_tensor_free(scaled);
  nx_tensor_free(loss);
  nx_optimizer_free(opt);
  nx_tensor_free(p);
  nx_grad_scaler_free(s);
}

static void test_gradients_sharing_storage_are_unscaled_once_each(void** state) {
  (void)state;
  /* loss = sum(a + b): the engine gives a and b one gradient tensor (add's VJP passes it on, sum's
   * expands it), so an in-place unscale of a's would unscale b's too. */
  const double ones[] = {1, 1, 1, 1};
  nx_tensor a = leaf(ones, kFour, 1), b = leaf(ones, kFour, 1), ab = NULL, loss = NULL;
  NX_OK_(nx_add(&ab, a, b, NULL));
  NX_OK_(nx_sum(&loss, ab, NULL, 0, false, NULL));
  nx_tensor params[] = {a, b};
  nx_optimizer opt = NULL;
  NX_OK_(nx_sgd_create(&opt, params, 2, NULL));
  nx_grad_scaler s = make_scaler(64, 2000);
  scaled_backward(s, loss);
  nx_tensor before = NULL; /* a handle taken before unscale keeps the scaled values */
  NX_OK_(nx_tensor_grad(&before, a));
  NX_OK_(nx_grad_scaler_unscale(s, opt, NULL));
  assert_grad(a, ones, 0);
  assert_grad(b, ones, 0);
  const double s64[] = {64, 64, 64, 64};
  assert_tensor_close(before, s64, 4, 0, 0);
  nx_tensor_free(before);

  /* the caller's backward seed is not touched either */
  NX_OK_(nx_grad_scaler_update(s));
  NX_OK_(nx_optimizer_zero_grad(opt));
  const double seedv[] = {8, 8, 8, 8};
  nx_tensor seed = make_from_f64(seedv, kFour, 1, NX_F32);
  NX_OK_(nx_backward(a, seed, NULL, NULL)); /* a is the root: its gradient is the seed */
  NX_OK_(nx_grad_scaler_unscale(s, opt, NULL));
  const double s8[] = {0.125, 0.125, 0.125, 0.125};
  assert_grad(a, s8, 0);
  assert_tensor_close(seed, seedv, 4, 0, 0);
  nx_tensor_free(seed);

  nx_grad_scaler_free(s);
  nx_optimizer_free(opt);
  nx_tensor_free(loss);
  nx_tensor_free(ab);
  nx_tensor_free(b);
  nx_tensor_free(a);
}

/* f32 master weights, f16 compute: loss = sum(f32(x16 * 1e-4 * 1e-4)) with x16 = f16(p). The
 * gradient reaching x16 is 1e-8, below f16's smallest subnormal (6e-8): unscaled it is 0; with
 * the loss scaled by 4096 it travels as 4.1e-5 and comes back as 1e-8 in p's f32 gradient. */
static double f16_chain_grad(nx_grad_scaler s) {
  const double p0[] = {1, 2, 3, 4};
  nx_tensor p = leaf(p0, kFour, 1), x16 = NULL, y1 = NULL, y2 = NULL, y32 = NULL, loss = NULL;
  NX_OK_(nx_cast(&x16, p, NX_F16, NULL));
  NX_OK_(nx_mul_scalar(&y1, x16, 1e-4, NULL));
  NX_OK_(nx_mul_scalar(&y2, y1, 1e-4, NULL));
  NX_OK_(nx_cast(&y32, y2, NX_F32, NULL));
  NX_OK_(nx_sum(&loss, y32, NULL, 0, false, NULL));
  nx_optimizer opt = NULL;
  NX_OK_(nx_sgd_create(&opt, &p, 1, NULL));
  if (s) {
    scaled_backward(s, loss);
    NX_OK_(nx_grad_scaler_unscale(s, opt, NULL));
  } else {
    NX_OK_(nx_backward(loss, NULL, NULL, NULL));
  }
  nx_tensor g = NULL;
  NX_OK_(nx_tensor_grad(&g, p));
  assert_int_equal(tensor_dtype(g), NX_F32);
  double v[4];
  read_f64(g, v, 4);
  for (int i = 1; i < 4; ++i) assert_true(v[i] == v[0]);
  nx_tensor_free(g);
  nx_optimizer_free(opt);
  nx_tensor_free(loss);
  nx_tensor_free(y32);
  nx_tensor_free(y2);
  nx_tensor_free(y1);
  nx_tensor_free(x16);
  nx_tensor_free(p);
  return v[0];
}

static void test_scaling_keeps_small_f16_gradients(void** state) {
  (void)state;
  assert_true(f16_chain_grad(NULL) == 0.0);
  nx_grad_scaler s = make_scaler(4096, 2000);
  const double g = f16_chain_grad(s);
  assert_true(fabs(g - 1e-8) <= 0.01 * 1e-8);
  nx_grad_scaler_free(s);
}

static void test_two_optimizers_share_one_scaler(void** state) {
  (void)state;
  const double p0[] = {1, 2, 3, 4}, good[] = {1, 1, 1, 1}, bad[] = {1, NAN, 1, 1};
  nx_tensor p = leaf(p0, kFour, 1), q = leaf(p0, kFour, 1);
  nx_optimizer op = NULL, oq = NULL;
  NX_OK_(nx_sgd_create(&op, &p, 1, NULL));
  NX_OK_(nx_sgd_create(&oq, &q, 1, NULL));
  nx_grad_scaler s = make_scaler(2, 2000);
  nx_tensor lp = dot_loss(p, good), lq = dot_loss(q, bad), l = NULL;
  NX_OK_(nx_add(&l, lp, lq, NULL));
  scaled_backward(s, l);
  bool sp = false, sq = true;
  NX_OK_(nx_grad_scaler_step(&sp, s, op, NULL));
  NX_OK_(nx_grad_scaler_step(&sq, s, oq, NULL));
  assert_true(sp);
  assert_false(sq);
  NX_OK_(nx_grad_scaler_update(s)); /* one optimizer found NaN: the scale backs off */
  assert_true(scale_of(s) == 1.0);
  nx_tensor_free(l);
  nx_tensor_free(lq);
  nx_tensor_free(lp);
  nx_grad_scaler_free(s);
  nx_optimizer_free(oq);
  nx_optimizer_free(op);
  nx_tensor_free(q);
  nx_tensor_free(p);
}

static void test_no_scaler_handle_leaks(void** state) {
  (void)state;
  assert_int_equal(nx_live_handle_count(NX_HANDLE_GRAD_SCALER), 0);
  assert_int_equal(nx_live_handle_count(NX_HANDLE_OPTIMIZER), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      NX_TEST(test_defaults_and_scaled_gradients),
      NX_TEST(test_inf_or_nan_gradient_skips_the_step_and_backs_off),
      NX_TEST(test_growth_after_growth_interval_clean_steps),
      NX_TEST(test_state_errors),
      NX_TEST(test_option_validation),
      NX_TEST(test_disabled_only_steps),
      NX_TEST(test_gradients_sharing_storage_are_unscaled_once_each),
      NX_TEST(test_scaling_keeps_small_f16_gradients),
      NX_TEST(test_two_optimizers_share_one_scaler),
      NX_TEST(test_no_scaler_handle_leaks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
