/* The C contract of nexus.h, part 2: elementwise ops, broadcasting, dtype promotion, in-place
 * ops, reductions, matmul/linear, softmax, indexing and losses, each against a scalar C
 * reference on random inputs (contiguous and non-contiguous). */
#include "nx_test.h"

/* Random values of shape rounded to dt's precision when dt is f32 (so that the reference sees
 * exactly what the engine sees). */
static double* random_values(int64_t n, double lo, double hi, nx_dtype dt) {
  double* v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; ++i) {
    v[i] = rng_uniform(lo, hi);
    if (dt == NX_F32) v[i] = (double)(float)v[i];
  }
  return v;
}
/* The tensor holding vals, contiguous or not (non-contiguous needs rank >= 2). */
static nx_tensor tensor_of(const double* vals, const int64_t* shape, size_t ndim, nx_dtype dt, bool noncontig) {
  if (noncontig) {
    nx_tensor t = make_noncontig(vals, shape, ndim, dt);
    bool c = true;
    NX_OK_(nx_tensor_is_contiguous(t, &c));
    assert_false(c);
    return t;
  }
  return make_from_f64(vals, shape, ndim, dt);
}

/* ---------------------------------------------------------------- unary */
typedef nx_status (*unary_api)(nx_tensor*, nx_tensor, nx_stream);
static nx_status api_leaky(nx_tensor* o, nx_tensor x, nx_stream s) { return nx_leaky_relu(o, x, 0.1, s); }
static nx_status api_gelu(nx_tensor* o, nx_tensor x, nx_stream s) { return nx_gelu(o, x, false, s); }
static nx_status api_gelu_tanh(nx_tensor* o, nx_tensor x, nx_stream s) { return nx_gelu(o, x, true, s); }
static nx_status api_clamp(nx_tensor* o, nx_tensor x, nx_stream s) { return nx_clamp(o, x, -0.5, 0.75, s); }
static nx_status api_add_scalar(nx_tensor* o, nx_tensor x, nx_stream s) { return nx_add_scalar(o, x, 2.5, s); }
static nx_status api_mul_scalar(nx_tensor* o, nx_tensor x, nx_stream s) { return nx_mul_scalar(o, x, -1.75, s); }
static nx_status api_pow_scalar(nx_tensor* o, nx_tensor x, nx_stream s) { return nx_pow_scalar(o, x, 2.5, s); }

static double r_neg(double x) { return -x; }
static double r_abs(double x) { return fabs(x); }
static double r_rsqrt(double x) { return 1 / sqrt(x); }
static double r_sigmoid(double x) { return 1 / (1 + exp(-x)); }
static double r_relu(double x) { return x > 0 ? x : 0; }
static double r_leaky(double x) { return x > 0 ? x : 0.1 * x; }
static double r_gelu(double x) { return 0.5 * x * (1 + erf(x / sqrt(2.0))); }
static double r_gelu_tanh(double x) {
  return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
static double r_silu(double x) { return x / (1 + exp(-x)); }
static double r_softplus(double x) { return x > 20 ? x : log1p(exp(x)); }
static double r_mish(double x) { return x * tanh(r_softplus(x)); }
static double r_clamp(double x) { return x < -0.5 ? -0.5 : x > 0.75 ? 0.75 : x; }
static double r_add_scalar(double x) { return x + 2.5; }
static double r_mul_scalar(double x) { return x * -1.75; }
static double r_pow_scalar(double x) { return pow(x, 2.5); }

static const struct unary_case {
  const char* name;
  unary_api fn;
  double (*ref)(double);
  double lo, hi;
} kUnary[] = {
    {"neg", nx_neg, r_neg, -4, 4},
    {"abs", nx_abs, r_abs, -4, 4},
    {"exp", nx_exp, exp, -10, 10},
    {"log", nx_log, log, 0.01, 50},
    {"sqrt", nx_sqrt, sqrt, 0, 50},
    {"rsqrt", nx_rsqrt, r_rsqrt, 0.01, 50},
    {"sin", nx_sin, sin, -6, 6},
    {"cos", nx_cos, cos, -6, 6},
    {"tanh", nx_tanh, tanh, -5, 5},
    {"sinh", nx_sinh, sinh, -4, 4},
    {"cosh", nx_cosh, cosh, -4, 4},
    {"sigmoid", nx_sigmoid, r_sigmoid, -8, 8},
    {"relu", nx_relu, r_relu, -4, 4},
    {"leaky_relu", api_leaky, r_leaky, -4, 4},
    {"gelu", api_gelu, r_gelu, -5, 5},
    {"gelu_tanh", api_gelu_tanh, r_gelu_tanh, -5, 5},
    {"silu", nx_silu, r_silu, -6, 6},
    {"softplus", nx_softplus, r_softplus, -6, 25},
    {"mish", nx_mish, r_mish, -6, 6},
    {"clamp", api_clamp, r_clamp, -2, 2},
    {"add_scalar", api_add_scalar, r_add_scalar, -4, 4},
    {"mul_scalar", api_mul_scalar, r_mul_scalar, -4, 4},
    {"pow_scalar", api_pow_scalar, r_pow_scalar, 0, 4},
};

static void test_unary_ops(void** state) {
  (void)state;
  rng_seed(100);
  const int64_t shape[2] = {9, 13};
  const int64_t n = 9 * 13;
  const nx_dtype dts[2] = {NX_F32, NX_F64};
  for (size_t k = 0; k < sizeof kUnary / sizeof kUnary[0]; ++k) {
    for (int d = 0; d < 2; ++d) {
      for (int nc = 0; nc < 2; ++nc) {
        double* x = random_values(n, kUnary[k].lo, kUnary[k].hi, dts[d]);
        double* want = malloc(sizeof(double) * n);
        for (int64_t i = 0; i < n; ++i) want[i] = kUnary[k].ref(x[i]);
        nx_tensor t = tensor_of(x, shape, 2, dts[d], nc), y = NULL;
        NX_OK_(kUnary[k].fn(&y, t, NULL));
        assert_int_equal(tensor_dtype(y), dts[d]);
        assert_shape(y, 9, 13);
        double* got = host_f64(y);
        for (int64_t i = 0; i < n; ++i) {
          double tol = dts[d] == NX_F32 ? 1e-6 + 1e-5 * fabs(want[i]) : 1e-14 + 1e-12 * fabs(want[i]);
          if (!(fabs(got[i] - want[i]) <= tol))
            fail_msg("nx_%s(%s, %s) at %.17g: %.17g, expected %.17g", kUnary[k].name, nx_dtype_name(dts[d]),
                     nc ? "non-contiguous" : "contiguous", x[i], got[i], want[i]);
        }
        free(got);
        free(x);
        free(want);
        nx_tensor_free(t);
        nx_tensor_free(y);
      }
    }
  }
}

static void test_unary_special_values(void** state) {
  (void)state;
  const double x[8] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 100.0, -100.0, 1e-30};
  const int64_t shape[1] = {8};
  nx_tensor t = make_tensor(x, shape, 1, NX_F64), t32 = NULL, y = NULL;
  NX_OK_(nx_cast(&t32, t, NX_F32, NULL));
  nx_tensor srcs[2] = {t, t32};
  for (int d = 0; d < 2; ++d) {
    double got[8];
    NX_OK_(nx_exp(&y, srcs[d], NULL));
    read_f64(y, got, 8);
    nx_tensor_free(y);
    assert_true(got[0] == 1 && got[1] == 1 && got[2] == INFINITY && got[3] == 0 && isnan(got[4]));
    assert_true(d == 0 ? got[5] == exp(100.0) : isinf(got[5]));
    assert_true(got[6] >= 0 && got[6] < 1e-37);
    NX_OK_(nx_log(&y, srcs[d], NULL));
    read_f64(y, got, 8);
    nx_tensor_free(y);
    assert_true(got[0] == -INFINITY && got[2] == INFINITY && isnan(got[3]) && isnan(got[4]));
    assert_true(fabs(got[5] - log(100.0)) < 1e-6 && isnan(got[6]));
    assert_true(fabs(got[7] - log(d == 0 ? 1e-30 : (double)(float)1e-30)) < 1e-5);
    NX_OK_(nx_tanh(&y, srcs[d], NULL));
    read_f64(y, got, 8);
    nx_tensor_free(y);
    assert_true(got[0] == 0 && got[2] == 1 && got[3] == -1 && isnan(got[4]) && got[5] == 1 && got[6] == -1);
    NX_OK_(nx_sigmoid(&y, srcs[d], NULL));
    read_f64(y, got, 8);
    nx_tensor_free(y);
    assert_true(got[0] == 0.5 && got[2] == 1 && got[3] == 0 && isnan(got[4]));
    NX_OK_(nx_softplus(&y, srcs[d], NULL));
    read_f64(y, got, 8);
    nx_tensor_free(y);
    assert_true(fabs(got[0] - log(2.0)) < 1e-6 && got[2] == INFINITY && got[3] == 0 && got[5] == 100.0);
    assert_true(got[6] >= 0 && got[6] < 1e-40);
    /* clamp keeps NaN, like torch.clamp */
    NX_OK_(nx_clamp(&y, srcs[d], -1, 1, NULL));
    read_f64(y, got, 8);
    nx_tensor_free(y);
    assert_true(got[2] == 1 && got[3] == -1 && isnan(got[4]) && got[5] == 1 && got[6] == -1);
  }
  nx_tensor_free(t);
  nx_tensor_free(t32);
}

static void test_unary_integer_and_half(void** state) {
  (void)state;
  const int32_t xi[6] = {-3, -1, 0, 1, 2, 7};
  const int64_t shape[1] = {6};
  nx_tensor t = make_tensor(xi, shape, 1, NX_I32), y = NULL;
  /* sign-preserving ops keep the integer dtype */
  NX_OK_(nx_neg(&y, t, NULL));
  assert_int_equal(tensor_dtype(y), NX_I32);
  int32_t gi[6];
  NX_OK_(nx_tensor_copy_to_host(y, gi, sizeof gi, NULL));
  for (int i = 0; i < 6; ++i) assert_int_equal(gi[i], -xi[i]);
  nx_tensor_free(y);
  NX_OK_(nx_abs(&y, t, NULL));
  assert_int_equal(tensor_dtype(y), NX_I32);
  NX_OK_(nx_tensor_copy_to_host(y, gi, sizeof gi, NULL));
  for (int i = 0; i < 6; ++i) assert_int_equal(gi[i], abs(xi[i]));
  nx_tensor_free(y);
  NX_OK_(nx_relu(&y, t, NULL));
  assert_int_equal(tensor_dtype(y), NX_I32);
  NX_OK_(nx_tensor_copy_to_host(y, gi, sizeof gi, NULL));
  for (int i = 0; i < 6; ++i) assert_int_equal(gi[i], xi[i] > 0 ? xi[i] : 0);
  nx_tensor_free(y);
  NX_OK_(nx_clamp(&y, t, -1, 1, NULL));
  assert_int_equal(tensor_dtype(y), NX_I32);
  NX_OK_(nx_tensor_copy_to_host(y, gi, sizeof gi, NULL));
  for (int i = 0; i < 6; ++i) assert_int_equal(gi[i], xi[i] < -1 ? -1 : xi[i] > 1 ? 1 : xi[i]);
  nx_tensor_free(y);
  /* add/mul by an integral scalar stay integer; by a fractional one give f32 */
  NX_OK_(nx_add_scalar(&y, t, 3, NULL));
  assert_int_equal(tensor_dtype(y), NX_I32);
  NX_OK_(nx_tensor_copy_to_host(y, gi, sizeof gi, NULL));
  for (int i = 0; i < 6; ++i) assert_int_equal(gi[i], xi[i] + 3);
  nx_tensor_free(y);
  NX_OK_(nx_mul_scalar(&y, t, 0.5, NULL));
  assert_int_equal(tensor_dtype(y), NX_F32);
  double want[6], gd[6];
  for (int i = 0; i < 6; ++i) want[i] = xi[i] * 0.5;
  assert_tensor_close(y, want, 6, 0, 0);
  nx_tensor_free(y);
  /* transcendental ops on integers give f32 */
  NX_OK_(nx_exp(&y, t, NULL));
  assert_int_equal(tensor_dtype(y), NX_F32);
  for (int i = 0; i < 6; ++i) want[i] = exp(xi[i]);
  assert_tensor_close(y, want, 6, 1e-6, 0);
  nx_tensor_free(y);
  NX_OK_(nx_sigmoid(&y, t, NULL));
  assert_int_equal(tensor_dtype(y), NX_F32);
  for (int i = 0; i < 6; ++i) want[i] = r_sigmoid(xi[i]);
  assert_tensor_close(y, want, 6, 1e-6, 0);
  nx_tensor_free(y);
  nx_tensor_free(t);

  /* f16 / bf16 compute in f32 and round to their own dtype */
  rng_seed(101);
  const nx_dtype halves[2] = {NX_F16, NX_BF16};
  for (int h = 0; h < 2; ++h) {
    double* x = random_values(6, -3, 3, NX_F64);
    nx_tensor th = make_from_f64(x, shape, 1, halves[h]);
    double xr[6];
    read_f64(th, xr, 6); /* the values as rounded to the half type */
    NX_OK_(nx_exp(&y, th, NULL));
    assert_int_equal(tensor_dtype(y), halves[h]);
    read_f64(y, gd, 6);
    for (int i = 0; i < 6; ++i) assert_true(fabs(gd[i] - exp(xr[i])) <= exp(xr[i]) * (h ? 4e-3 : 5e-4));
    nx_tensor_free(y);
    NX_OK_(nx_gelu(&y, th, true, NULL));
    assert_int_equal(tensor_dtype(y), halves[h]);
    read_f64(y, gd, 6);
    for (int i = 0; i < 6; ++i) assert_true(fabs(gd[i] - r_gelu_tanh(xr[i])) <= 1e-3 + fabs(r_gelu_tanh(xr[i])) * (h ? 4e-3 : 5e-4));
    nx_tensor_free(y);
    nx_tensor_free(th);
    free(x);
  }
}

/* ---------------------------------------------------------------- binary with broadcasting */
typedef nx_status (*binary_api)(nx_tensor*, nx_tensor, nx_tensor, nx_stream);
static double b_add(double a, double b) { return a + b; }
static double b_sub(double a, double b) { return a - b; }
static double b_mul(double a, double b) { return a * b; }
static double b_div(double a, double b) { return a / b; }
static double b_max(double a, double b) { return a > b ? a : b; }
static double b_min(double a, double b) { return a < b ? a : b; }
static double b_eq(double a, double b) { return a == b; }
static double b_ne(double a, double b) { return a != b; }
static double b_lt(double a, double b) { return a < b; }
static double b_le(double a, double b) { return a <= b; }
static double b_gt(double a, double b) { return a > b; }
static double b_ge(double a, double b) { return a >= b; }

static const struct binary_case {
  const char* name;
  binary_api fn;
  double (*ref)(double, double);
  bool compare;
  int domain; /* 0: any, 1: b != 0, 2: a > 0 */
} kBinary[] = {
    {"add", nx_add, b_add, false, 0},     {"sub", nx_sub, b_sub, false, 0},
    {"mul", nx_mul, b_mul, false, 0},     {"div", nx_div, b_div, false, 1},
    {"pow", nx_pow, pow, false, 2},       {"maximum", nx_maximum, b_max, false, 0},
    {"minimum", nx_minimum, b_min, false, 0}, {"eq", nx_eq, b_eq, true, 0},
    {"ne", nx_ne, b_ne, true, 0},         {"lt", nx_lt, b_lt, true, 0},
    {"le", nx_le, b_le, true, 0},         {"gt", nx_gt, b_gt, true, 0},
    {"ge", nx_ge, b_ge, true, 0},
};

/* Values on a grid of halves in [-2, 2] so that comparisons see ties. */
static double* grid_values(int64_t n, int domain, bool is_b) {
  double* v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; ++i) {
    v[i] = (double)(rng_int(9) - 4) / 2;
    if (domain == 1 && is_b && v[i] == 0) v[i] = 0.5;
    if (domain == 2 && !is_b) v[i] = fabs(v[i]) + 0.25;
  }
  return v;
}

static void run_binary_case(const struct binary_case* c, nx_dtype dt, const int64_t* as, size_t an, bool anc,
                            const int64_t* bs, size_t bn, bool bnc) {
  int64_t na = numel_of(as, an), nb = numel_of(bs, bn);
  double* a = grid_values(na, c->domain, false);
  double* b = grid_values(nb, c->domain, true);
  nx_tensor ta = tensor_of(a, as, an, dt, anc), tb = tensor_of(b, bs, bn, dt, bnc), y = NULL;
  NX_OK_(c->fn(&y, ta, tb, NULL));
  /* broadcast shape */
  size_t on = an > bn ? an : bn;
  int64_t os[8];
  for (size_t d = 0; d < on; ++d) {
    int64_t da = d < on - an ? 1 : as[d - (on - an)], db = d < on - bn ? 1 : bs[d - (on - bn)];
    os[d] = da == 1 ? db : da;
  }
  assert_shape_(y, os, on, __FILE__, __LINE__);
  assert_int_equal(tensor_dtype(y), c->compare ? NX_BOOL : dt);
  int64_t n = numel_of(os, on), coord[8] = {0};
  double* want = malloc(sizeof(double) * (size_t)(n ? n : 1));
  for (int64_t e = 0; e < n; ++e) {
    want[e] = c->ref(a[broadcast_index(coord, on, as, an)], b[broadcast_index(coord, on, bs, bn)]);
    if (dt == NX_F32 && !c->compare) want[e] = (double)(float)want[e];
    next_coord(coord, os, on);
  }
  double* got = host_f64(y);
  for (int64_t e = 0; e < n; ++e) {
    if (!(got[e] == want[e] || fabs(got[e] - want[e]) <= 1e-6 * fabs(want[e])))
      fail_msg("nx_%s(%s): element %lld is %.17g, expected %.17g", c->name, nx_dtype_name(dt), (long long)e, got[e],
               want[e]);
  }
  free(got);
  free(want);
  free(a);
  free(b);
  nx_tensor_free(ta);
  nx_tensor_free(tb);
  nx_tensor_free(y);
}

static void test_binary_ops_broadcasting(void** state) {
  (void)state;
  rng_seed(102);
  const int64_t s314[3] = {3, 1, 4}, s21[2] = {2, 1}, s34[2] = {3, 4}, s4[1] = {4}, s234[3] = {2, 3, 4},
                s31[2] = {3, 1}, s23[2] = {2, 3}, s53[2] = {5, 3};
  const nx_dtype dts[2] = {NX_F32, NX_F64};
  for (size_t k = 0; k < sizeof kBinary / sizeof kBinary[0]; ++k) {
    for (int d = 0; d < 2; ++d) {
      const struct binary_case* c = &kBinary[k];
      run_binary_case(c, dts[d], s314, 3, false, s21, 2, false); /* [3,1,4] x [2,1] -> [3,2,4] */
      run_binary_case(c, dts[d], s34, 2, true, s4, 1, false);    /* non-contiguous a */
      run_binary_case(c, dts[d], s234, 3, true, s31, 2, false);  /* [2,3,4]nc x [3,1] */
      run_binary_case(c, dts[d], NULL, 0, false, s23, 2, true);  /* scalar x non-contiguous */
      run_binary_case(c, dts[d], s53, 2, true, s53, 2, true);    /* both non-contiguous */
    }
  }
  /* large enough for the threaded paths: [300, 257] + [257] */
  const int64_t big[2] = {300, 257}, row[1] = {257};
  run_binary_case(&kBinary[0], NX_F32, big, 2, true, row, 1, false);
  run_binary_case(&kBinary[2], NX_F64, big, 2, false, big, 2, true);
}

static void test_where(void** state) {
  (void)state;
  rng_seed(103);
  uint8_t cond[3 * 4];
  for (int i = 0; i < 12; ++i) cond[i] = rng_u64() & 1;
  const int64_t cs[2] = {3, 4}, as[1] = {4}, bs[2] = {3, 1};
  double a[4], b[3];
  nx_tensor tc = make_tensor(cond, cs, 2, NX_BOOL);
  nx_tensor ta = rand_tensor(a, as, 1, NX_F64, -1, 1);
  nx_tensor tb = rand_tensor(b, bs, 2, NX_F64, -1, 1), y = NULL;
  NX_OK_(nx_where(&y, tc, ta, tb, NULL));
  assert_shape(y, 3, 4);
  double want[12];
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) want[i * 4 + j] = cond[i * 4 + j] ? a[j] : b[i];
  assert_tensor_close(y, want, 12, 0, 0);
  nx_tensor_free(y);
  /* mixed dtypes promote: where(cond, i32, f32) is f32 */
  const int32_t ai[4] = {1, 2, 3, 4};
  nx_tensor tai = make_tensor(ai, as, 1, NX_I32), tbf = NULL;
  NX_OK_(nx_cast(&tbf, tb, NX_F32, NULL));
  NX_OK_(nx_where(&y, tc, tai, tbf, NULL));
  assert_int_equal(tensor_dtype(y), NX_F32);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) want[i * 4 + j] = cond[i * 4 + j] ? ai[j] : (double)(float)b[i];
  assert_tensor_close(y, want, 12, 0, 0);
  nx_tensor_free(y);
  nx_tensor_free(tc);
  nx_tensor_free(ta);
  nx_tensor_free(tb);
  nx_tensor_free(tai);
  nx_tensor_free(tbf);
}

/* ---------------------------------------------------------------- dtype promotion */
static void check_promotion(binary_api fn, nx_dtype da, nx_dtype db, nx_dtype want, const double* a,
                            const double* b, double (*ref)(double, double)) {
  const int64_t shape[1] = {4};
  nx_tensor ta = make_from_f64(a, shape, 1, da), tb = make_from_f64(b, shape, 1, db), y = NULL;
  NX_OK_(fn(&y, ta, tb, NULL));
  if (tensor_dtype(y) != want)
    fail_msg("%s op %s gave %s, expected %s", nx_dtype_name(da), nx_dtype_name(db), nx_dtype_name(tensor_dtype(y)),
             nx_dtype_name(want));
  double w[4];
  for (int i = 0; i < 4; ++i) w[i] = ref(a[i], b[i]);
  assert_tensor_close(y, w, 4, 1e-3, 0);
  nx_tensor_free(ta);
  nx_tensor_free(tb);
  nx_tensor_free(y);
}

static void test_dtype_promotion(void** state) {
  (void)state;
  const double a[4] = {1, -2, 3, 7}, b[4] = {2, 2, -4, 2}, bb[4] = {1, 0, 1, 1};
  check_promotion(nx_add, NX_I32, NX_F32, NX_F32, a, b, b_add);
  check_promotion(nx_add, NX_F32, NX_I32, NX_F32, a, b, b_add);
  check_promotion(nx_mul, NX_I32, NX_I64, NX_I64, a, b, b_mul);
  check_promotion(nx_sub, NX_BOOL, NX_I32, NX_I32, bb, b, b_sub);
  check_promotion(nx_add, NX_I64, NX_F16, NX_F16, a, b, b_add);
  check_promotion(nx_add, NX_F16, NX_BF16, NX_F32, a, b, b_add);
  check_promotion(nx_add, NX_F16, NX_F16, NX_F16, a, b, b_add);
  check_promotion(nx_add, NX_BF16, NX_F32, NX_F32, a, b, b_add);
  check_promotion(nx_mul, NX_F32, NX_F64, NX_F64, a, b, b_mul);
  check_promotion(nx_maximum, NX_I32, NX_F64, NX_F64, a, b, b_max);
  /* true division of integers gives f32 */
  check_promotion(nx_div, NX_I32, NX_I32, NX_F32, a, b, b_div);
  check_promotion(nx_div, NX_I64, NX_I32, NX_F32, a, b, b_div);
  /* comparisons give bool whatever the operands */
  check_promotion(nx_lt, NX_I32, NX_F32, NX_BOOL, a, b, b_lt);
  check_promotion(nx_eq, NX_F16, NX_BF16, NX_BOOL, a, b, b_eq);
  check_promotion(nx_ge, NX_I64, NX_I64, NX_BOOL, a, b, b_ge);
  check_promotion(nx_ne, NX_BOOL, NX_F64, NX_BOOL, bb, b, b_ne);
  /* exact integer arithmetic beyond f32's range of exact integers */
  const int64_t big[2] = {(int64_t)1 << 40, -((int64_t)1 << 35)}, one[2] = {1, 3};
  const int64_t s2[1] = {2};
  nx_tensor tx = make_tensor(big, s2, 1, NX_I64), ty = make_tensor(one, s2, 1, NX_I64), y = NULL;
  NX_OK_(nx_add(&y, tx, ty, NULL));
  int64_t got[2];
  NX_OK_(nx_tensor_copy_to_host(y, got, sizeof got, NULL));
  assert_true(got[0] == ((int64_t)1 << 40) + 1 && got[1] == -((int64_t)1 << 35) + 3);
  nx_tensor_free(tx);
  nx_tensor_free(ty);
  nx_tensor_free(y);
}

/* ---------------------------------------------------------------- in-place ops */
static void test_in_place_ops(void** state) {
  (void)state;
  rng_seed(104);
  double x[6], b[3];
  const int64_t xs[2] = {2, 3}, bs[1] = {3};
  nx_tensor tx = rand_tensor(x, xs, 2, NX_F64, -2, 2), tb = rand_tensor(b, bs, 1, NX_F64, -2, 2);
  void* p0 = NULL;
  NX_OK_(nx_tensor_data_ptr(tx, &p0));
  NX_OK_(nx_add_(tx, tb, NULL));
  for (int i = 0; i < 6; ++i) x[i] += b[i % 3];
  assert_tensor_close(tx, x, 6, 1e-15, 0);
  NX_OK_(nx_mul_(tx, tb, NULL));
  for (int i = 0; i < 6; ++i) x[i] *= b[i % 3];
  assert_tensor_close(tx, x, 6, 1e-15, 0);
  NX_OK_(nx_mul_scalar_(tx, -3, NULL));
  for (int i = 0; i < 6; ++i) x[i] *= -3;
  assert_tensor_close(tx, x, 6, 1e-15, 0);
  void* p1 = NULL;
  NX_OK_(nx_tensor_data_ptr(tx, &p1));
  assert_ptr_equal(p0, p1); /* same storage */
  /* copy_: broadcast and cast (f32 source into f64 destination), through a transposed view */
  const float src[2] = {0.5f, -1.25f};
  const int64_t ss[1] = {2};
  nx_tensor ts = make_tensor(src, ss, 1, NX_F32), tt = t_transpose(tx, 0, 1); /* [3,2] */
  NX_OK_(nx_copy_(tt, ts, NULL));
  const double want[6] = {0.5, 0.5, 0.5, -1.25, -1.25, -1.25};
  assert_tensor_close(tx, want, 6, 0, 0);
  /* an in-place op on a view (a column of tx) */
  nx_tensor col = NULL;
  NX_OK_(nx_slice(&col, tx, 1, 1, 2, 1, NULL));
  NX_OK_(nx_mul_scalar_(col, 10, NULL));
  const double want2[6] = {0.5, 5, 0.5, -1.25, -12.5, -1.25};
  assert_tensor_close(tx, want2, 6, 0, 0);
  /* an integer tensor stays integer */
  const int32_t iv[3] = {1, 2, 3};
  nx_tensor ti = make_tensor(iv, bs, 1, NX_I32);
  NX_OK_(nx_add_(ti, ti, NULL));
  int32_t ig[3];
  NX_OK_(nx_tensor_copy_to_host(ti, ig, sizeof ig, NULL));
  assert_true(ig[0] == 2 && ig[1] == 4 && ig[2] == 6 && tensor_dtype(ti) == NX_I32);
  nx_tensor_free(tx);
  nx_tensor_free(tb);
  nx_tensor_free(ts);
  nx_tensor_free(tt);
  nx_tensor_free(col);
  nx_tensor_free(ti);
}

/* ---------------------------------------------------------------- reductions */
enum { R_SUM, R_MEAN, R_MAX, R_MIN, R_VAR };

/* Reference reduction over the axes in mask; out has the non-reduced dims, row-major. */
static int64_t reduce_ref(const double* x, const int64_t* shape, size_t nd, unsigned mask, int kind, int64_t corr,
                          double* out) {
  int64_t oshape[8], on = 0, count = 1;
  for (size_t d = 0; d < nd; ++d) {
    if (mask & (1u << d)) count *= shape[d];
    else oshape[on++] = shape[d];
  }
  int64_t no = numel_of(oshape, (size_t)on);
  double* mean = calloc((size_t)no, sizeof(double));
  for (int64_t o = 0; o < no; ++o)
    out[o] = kind == R_MAX ? -INFINITY : kind == R_MIN ? INFINITY : 0;
  for (int pass = 0; pass < (kind == R_VAR ? 2 : 1); ++pass) {
    int64_t coord[8] = {0}, n = numel_of(shape, nd);
    for (int64_t e = 0; e < n; ++e) {
      int64_t o = 0;
      for (size_t d = 0; d < nd; ++d)
        if (!(mask & (1u << d))) o = o * shape[d] + coord[d];
      double v = x[e];
      if (kind == R_SUM || kind == R_MEAN) out[o] += v;
      else if (kind == R_MAX) out[o] = v > out[o] ? v : out[o];
      else if (kind == R_MIN) out[o] = v < out[o] ? v : out[o];
      else if (pass == 0) mean[o] += v / (double)count;
      else out[o] += (v - mean[o]) * (v - mean[o]);
      next_coord(coord, shape, nd);
    }
  }
  for (int64_t o = 0; o < no; ++o) {
    if (kind == R_MEAN) out[o] /= (double)count;
    if (kind == R_VAR) out[o] /= (double)(count - corr);
  }
  free(mean);
  return no;
}

static void test_reductions_all_axes_subsets(void** state) {
  (void)state;
  rng_seed(105);
  const int64_t shape[3] = {3, 4, 5};
  const int64_t n = 60;
  const nx_dtype dts[2] = {NX_F32, NX_F64};
  for (int d = 0; d < 2; ++d) {
    for (int nc = 0; nc < 2; ++nc) {
      double* x = random_values(n, -3, 3, dts[d]);
      nx_tensor t = tensor_of(x, shape, 3, dts[d], nc);
      for (unsigned mask = 0; mask < 8; ++mask) {
        /* axes: ascending, or negative and descending; mask 7 also as naxes 0 */
        int64_t axes[3];
        size_t naxes = 0;
        for (int a = 2; a >= 0; --a)
          if (mask & (1u << a)) axes[naxes++] = (mask & 1u) ? a - 3 : a;
        for (int keep = 0; keep < 2; ++keep) {
          for (int kind = R_SUM; kind <= R_VAR; ++kind) {
            for (int64_t corr = 0; corr < (kind == R_VAR ? 2 : 1); ++corr) {
              if (mask == 0) continue; /* naxes 0 means "all", covered by mask 7 */
              size_t na = (mask == 7 && keep == 0 && kind != R_VAR) ? 0 : naxes;
              nx_tensor y = NULL;
              switch (kind) {
                case R_SUM: NX_OK_(nx_sum(&y, t, axes, na, keep, NULL)); break;
                case R_MEAN: NX_OK_(nx_mean(&y, t, axes, na, keep, NULL)); break;
                case R_MAX: NX_OK_(nx_max(&y, t, axes, na, keep, NULL)); break;
                case R_MIN: NX_OK_(nx_min(&y, t, axes, na, keep, NULL)); break;
                case R_VAR: NX_OK_(nx_var(&y, t, axes, na, corr, keep, NULL)); break;
              }
              assert_int_equal(tensor_dtype(y), dts[d]);
              int64_t ys[3], ny = 0;
              for (int a = 0; a < 3; ++a) {
                if (!(mask & (1u << a))) ys[ny++] = shape[a];
                else if (keep) ys[ny++] = 1;
              }
              assert_shape_(y, ys, (size_t)ny, __FILE__, __LINE__);
              double want[60];
              int64_t no = reduce_ref(x, shape, 3, mask, kind, corr, want);
              double tol = dts[d] == NX_F32 ? 1e-5 : 1e-12;
              double* got = host_f64(y);
              for (int64_t i = 0; i < no; ++i)
                if (!(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i]))))
                  fail_msg("reduction kind %d mask %u keepdim %d corr %lld (%s, %s): element %lld is %.17g, expected %.17g",
                           kind, mask, keep, (long long)corr, nx_dtype_name(dts[d]), nc ? "nc" : "c", (long long)i,
                           got[i], want[i]);
              free(got);
              nx_tensor_free(y);
            }
          }
        }
      }
      nx_tensor_free(t);
      free(x);
    }
  }
}

static void test_reductions_dtypes_and_edges(void** state) {
  (void)state;
  /* sum of integers is i64 and exact */
  const int32_t xi[6] = {2000000000, 2000000000, -5, 7, 1, 1};
  const int64_t s23[2] = {2, 3};
  nx_tensor ti = make_tensor(xi, s23, 2, NX_I32), y = NULL;
  NX_OK_(nx_sum(&y, ti, NULL, 0, false, NULL));
  assert_int_equal(tensor_dtype(y), NX_I64);
  int64_t total = 0;
  NX_OK_(nx_tensor_copy_to_host(y, &total, sizeof total, NULL));
  assert_true(total == 4000000004LL);
  nx_tensor_free(y);
  const int64_t ax1[1] = {1};
  NX_OK_(nx_max(&y, ti, ax1, 1, false, NULL));
  assert_int_equal(tensor_dtype(y), NX_I32);
  int32_t mx[2];
  NX_OK_(nx_tensor_copy_to_host(y, mx, sizeof mx, NULL));
  assert_true(mx[0] == 2000000000 && mx[1] == 7);
  nx_tensor_free(y);
  nx_tensor_free(ti);
  /* bool sums count */
  const uint8_t bv[5] = {1, 0, 1, 1, 0};
  const int64_t s5[1] = {5};
  nx_tensor tb = make_tensor(bv, s5, 1, NX_BOOL);
  NX_OK_(nx_sum(&y, tb, NULL, 0, false, NULL));
  assert_true(scalar_of(y) == 3);
  nx_tensor_free(y);
  nx_tensor_free(tb);
  /* the sum over an empty axis is zero */
  const int64_t s03[2] = {0, 3};
  nx_tensor te = NULL;
  NX_OK_(nx_tensor_zeros(&te, s03, 2, NX_F32, CPU, NULL));
  const int64_t ax0[1] = {0};
  NX_OK_(nx_sum(&y, te, ax0, 1, false, NULL));
  assert_shape(y, 3);
  const double zeros3[3] = {0, 0, 0};
  assert_tensor_close(y, zeros3, 3, 0, 0);
  nx_tensor_free(y);
  nx_tensor_free(te);
  /* a long f32 sum keeps precision (blocked accumulation) */
  enum { N = 1 << 20 };
  const int64_t sn[1] = {N};
  nx_tensor ones = NULL;
  NX_OK_(nx_tensor_full(&ones, sn, 1, 0.1, NX_F32, CPU, NULL));
  NX_OK_(nx_sum(&y, ones, NULL, 0, false, NULL));
  /* blocked f32 accumulation (combined in f64): the error grows with the block, not with n; a
   * running f32 sum of 2^20 values of 0.1 drifts by several percent */
  assert_true(fabs(scalar_of(y) - N * (double)0.1f) < 1e-4 * N * 0.1);
  nx_tensor_free(y);
  NX_OK_(nx_mean(&y, ones, NULL, 0, true, NULL));
  assert_shape(y, 1);
  assert_true(fabs(scalar_of(y) - (double)0.1f) < 1e-4 * 0.1);
  nx_tensor_free(y);
  nx_tensor_free(ones);
  /* f16 reductions keep the f16 dtype */
  const double hv[4] = {0.5, 1.5, 2.0, -1.0};
  const int64_t s4[1] = {4};
  nx_tensor th = make_from_f64(hv, s4, 1, NX_F16);
  NX_OK_(nx_sum(&y, th, NULL, 0, false, NULL));
  assert_int_equal(tensor_dtype(y), NX_F16);
  assert_true(scalar_of(y) == 3.0);
  nx_tensor_free(y);
  NX_OK_(nx_var(&y, th, NULL, 0, 1, false, NULL));
  double m = 0.75, v = ((0.5 - m) * (0.5 - m) + (1.5 - m) * (1.5 - m) + (2 - m) * (2 - m) + (-1 - m) * (-1 - m)) / 3;
  assert_true(fabs(scalar_of(y) - v) < 2e-3);
  nx_tensor_free(y);
  nx_tensor_free(th);
}

static void test_argmax(void** state) {
  (void)state;
  rng_seed(106);
  const int64_t shape[3] = {4, 5, 6};
  double x[120];
  for (int i = 0; i < 120; ++i) x[i] = (double)rng_int(5); /* many ties: the first index wins */
  for (int nc = 0; nc < 2; ++nc) {
    nx_tensor t = tensor_of(x, shape, 3, NX_F32, nc);
    for (int axis = -3; axis < 3; ++axis) {
      int ax = axis < 0 ? axis + 3 : axis;
      for (int keep = 0; keep < 2; ++keep) {
        nx_tensor y = NULL;
        NX_OK_(nx_argmax(&y, t, axis, keep, NULL));
        assert_int_equal(tensor_dtype(y), NX_I64);
        int64_t ys[3], ny = 0;
        for (int d = 0; d < 3; ++d) {
          if (d != ax) ys[ny++] = shape[d];
          else if (keep) ys[ny++] = 1;
        }
        assert_shape_(y, ys, (size_t)ny, __FILE__, __LINE__);
        int64_t got[30], want[30], k = 0;
        NX_OK_(nx_tensor_copy_to_host(y, got, sizeof(int64_t) * (size_t)(120 / shape[ax]), NULL));
        int64_t os[2], on = 0;
        for (int d = 0; d < 3; ++d)
          if (d != ax) os[on++] = shape[d];
        int64_t oc[2] = {0, 0};
        do {
          int64_t best = 0;
          double bv = -1;
          for (int64_t i = 0; i < shape[ax]; ++i) {
            int64_t c[3], r = 0;
            for (int d = 0; d < 3; ++d) c[d] = d == ax ? i : oc[r++];
            double v = x[(c[0] * 5 + c[1]) * 6 + c[2]];
            if (v > bv) bv = v, best = i;
          }
          want[k++] = best;
        } while (next_coord(oc, os, 2));
        for (int64_t i = 0; i < k; ++i) assert_int_equal(got[i], want[i]);
        nx_tensor_free(y);
      }
    }
    nx_tensor_free(t);
  }
}

/* NaN propagates through max/min (like torch.max/amax) and argmax points at the first NaN. */
static void test_reductions_nan(void** state) {
  (void)state;
  const double v[2 * 3 * 2] = {1, 2, NAN, 0, 3, 4, /* */ 5, 6, 7, 8, 9, NAN};
  const int64_t s[3] = {2, 3, 2};
  for (int d = 0; d < 2; ++d) {
    nx_tensor x = make_from_f64(v, s, 3, d ? NX_F32 : NX_F64), y = NULL;
    /* inner axis (row kernel) */
    const int64_t ax2[1] = {2};
    NX_OK_(nx_max(&y, x, ax2, 1, false, NULL));
    double got[6];
    read_f64(y, got, 6);
    assert_true(got[0] == 2 && isnan(got[1]) && got[2] == 4 && got[3] == 6 && got[4] == 8 && isnan(got[5]));
    nx_tensor_free(y);
    /* middle axis (strided kernel) */
    const int64_t ax1[1] = {1};
    NX_OK_(nx_min(&y, x, ax1, 1, false, NULL));
    read_f64(y, got, 4);
    assert_true(isnan(got[0]) && got[1] == 0 && got[2] == 5 && isnan(got[3]));
    nx_tensor_free(y);
    NX_OK_(nx_max(&y, x, NULL, 0, false, NULL));
    assert_true(isnan(scalar_of(y)));
    nx_tensor_free(y);
    NX_OK_(nx_argmax(&y, x, 1, false, NULL));
    int64_t am[4];
    NX_OK_(nx_tensor_copy_to_host(y, am, sizeof am, NULL));
    assert_true(am[0] == 1 && am[1] == 2 && am[2] == 2 && am[3] == 2);
    nx_tensor_free(y);
    /* elementwise maximum/minimum propagate NaN from either side */
    nx_tensor z = NULL;
    NX_OK_(nx_tensor_zeros(&z, s, 3, d ? NX_F32 : NX_F64, CPU, NULL));
    NX_OK_(nx_maximum(&y, z, x, NULL));
    double all[12];
    read_f64(y, all, 12);
    assert_true(isnan(all[2]) && isnan(all[11]) && all[3] == 0 && all[0] == 1);
    nx_tensor_free(y);
    NX_OK_(nx_minimum(&y, x, z, NULL));
    read_f64(y, all, 12);
    assert_true(isnan(all[2]) && isnan(all[11]) && all[3] == 0 && all[0] == 0);
    nx_tensor_free(y);
    nx_tensor_free(z);
    nx_tensor_free(x);
  }
}

/* Index tensors (and conditions) that are themselves non-contiguous views. */
static void test_noncontiguous_indices(void** state) {
  (void)state;
  rng_seed(115);
  double x[5 * 4];
  const int64_t xs[2] = {5, 4};
  nx_tensor tx = rand_tensor(x, xs, 2, NX_F64, -1, 1);
  /* index = [4, 0, 2, 1, 3, 0][::2] = [4, 2, 3] */
  const int64_t iv[6] = {4, 0, 2, 1, 3, 0};
  const int64_t s6[1] = {6};
  nx_tensor raw = make_tensor(iv, s6, 1, NX_I64), idx = NULL, y = NULL;
  NX_OK_(nx_slice(&idx, raw, 0, 0, 6, 2, NULL));
  NX_OK_(nx_index_select(&y, tx, 0, idx, NULL));
  double want[20];
  const int64_t rows[3] = {4, 2, 3};
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) want[r * 4 + c] = x[rows[r] * 4 + c];
  assert_tensor_close(y, want, 12, 0, 0);
  nx_tensor_free(y);
  NX_OK_(nx_embedding(&y, tx, idx, NULL));
  assert_tensor_close(y, want, 12, 0, 0);
  nx_tensor_free(y);
  /* gather with a transposed index: index [4,5] viewed as [5,4] */
  int64_t gv[20];
  for (int i = 0; i < 20; ++i) gv[i] = rng_int(5);
  const int64_t gs[2] = {4, 5};
  nx_tensor graw = make_tensor(gv, gs, 2, NX_I64), gt = t_transpose(graw, 0, 1); /* gt[i][j] = gv[j][i] */
  NX_OK_(nx_gather(&y, tx, 0, gt, NULL));
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 4; ++j) want[i * 4 + j] = x[gv[j * 5 + i] * 4 + j];
  assert_tensor_close(y, want, 20, 0, 0);
  nx_tensor_free(y);
  /* one_hot of a transposed index */
  NX_OK_(nx_one_hot(&y, gt, 5, NX_F64, NULL));
  assert_shape(y, 5, 4, 5);
  double oh[100];
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 4; ++j)
      for (int c = 0; c < 5; ++c) oh[(i * 4 + j) * 5 + c] = gv[j * 5 + i] == c;
  assert_tensor_close(y, oh, 100, 0, 0);
  nx_tensor_free(y);
  /* where with a transposed condition */
  uint8_t cv[20];
  for (int i = 0; i < 20; ++i) cv[i] = rng_u64() & 1;
  nx_tensor craw = make_tensor(cv, gs, 2, NX_BOOL), ct = t_transpose(craw, 0, 1), zero = NULL;
  NX_OK_(nx_tensor_zeros(&zero, NULL, 0, NX_F64, CPU, NULL));
  NX_OK_(nx_where(&y, ct, tx, zero, NULL));
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 4; ++j) want[i * 4 + j] = cv[j * 5 + i] ? x[i * 4 + j] : 0;
  assert_tensor_close(y, want, 20, 0, 0);
  nx_tensor ts[] = {tx, raw, idx, y, graw, gt, craw, ct, zero};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; ++i) nx_tensor_free(ts[i]);
}

/* ---------------------------------------------------------------- matmul and linear */
/* Reference torch.matmul for operands of rank >= 1 (1-d promoted), batch dims broadcast.
 * Returns the malloc'ed result and writes its shape. */
static double* matmul_ref_nd(const double* a, const int64_t* as0, size_t an0, const double* b, const int64_t* bs0,
                             size_t bn0, int64_t* oshape, size_t* ondim) {
  int64_t as[8], bs[8];
  size_t an = an0, bn = bn0;
  if (an0 == 1) { as[0] = 1; as[1] = as0[0]; an = 2; } else memcpy(as, as0, sizeof(int64_t) * an0);
  if (bn0 == 1) { bs[0] = bs0[0]; bs[1] = 1; bn = 2; } else memcpy(bs, bs0, sizeof(int64_t) * bn0);
  int64_t m = as[an - 2], k = as[an - 1], n = bs[bn - 1];
  size_t ab = an - 2, bb = bn - 2, nb = ab > bb ? ab : bb;
  int64_t batch[8];
  for (size_t d = 0; d < nb; ++d) {
    int64_t da = d < nb - ab ? 1 : as[d - (nb - ab)], db = d < nb - bb ? 1 : bs[d - (nb - bb)];
    batch[d] = da == 1 ? db : da;
  }
  int64_t nbatch = numel_of(batch, nb), coord[8] = {0};
  double* out = malloc(sizeof(double) * (size_t)(nbatch * m * n + 1));
  for (int64_t bi = 0; bi < nbatch; ++bi) {
    int64_t ia = broadcast_index(coord, nb, as, ab), ib = broadcast_index(coord, nb, bs, bb);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) s += a[ia * m * k + i * k + p] * b[ib * k * n + p * n + j];
        out[bi * m * n + i * n + j] = s;
      }
    next_coord(coord, batch, nb);
  }
  size_t on = 0;
  for (size_t d = 0; d < nb; ++d) oshape[on++] = batch[d];
  if (an0 > 1) oshape[on++] = m;
  if (bn0 > 1) oshape[on++] = n;
  *ondim = on;
  return out;
}

static void run_matmul_case(nx_dtype dt, const int64_t* as, size_t an, bool anc, const int64_t* bs, size_t bn,
                            bool bnc, double rtol, double atol) {
  int64_t na = numel_of(as, an), nb = numel_of(bs, bn);
  double* a = random_values(na, -1, 1, dt);
  double* b = random_values(nb, -1, 1, dt);
  nx_tensor ta = tensor_of(a, as, an, dt, anc), tb = tensor_of(b, bs, bn, dt, bnc), y = NULL;
  /* the reference sees the operands as stored (rounded to f16/bf16 where they are) */
  read_f64(ta, a, na);
  read_f64(tb, b, nb);
  NX_OK_(nx_matmul(&y, ta, tb, NULL));
  int64_t os[8];
  size_t on = 0;
  double* want = matmul_ref_nd(a, as, an, b, bs, bn, os, &on);
  assert_shape_(y, os, on, __FILE__, __LINE__);
  assert_int_equal(tensor_dtype(y), dt);
  assert_tensor_close(y, want, numel_of(os, on), rtol, atol);
  free(want);
  free(a);
  free(b);
  nx_tensor_free(ta);
  nx_tensor_free(tb);
  nx_tensor_free(y);
}

static void test_matmul(void** state) {
  (void)state;
  rng_seed(107);
  const int64_t a57[2] = {5, 7}, b73[2] = {7, 3};
  const int64_t a_big[2] = {70, 130}, b_big[2] = {130, 50};
  const int64_t a234[3] = {2, 3, 4}, b245[3] = {2, 4, 5};
  const int64_t a4135[4] = {4, 1, 3, 5}, b256[3] = {2, 5, 6};
  const int64_t a35[2] = {3, 5}, b254[3] = {2, 5, 4};
  const int64_t v4[1] = {4}, m43[2] = {4, 3}, m34[2] = {3, 4}, v5[1] = {5}, b243[3] = {2, 4, 3};
  const int64_t a30[2] = {3, 0}, b04[2] = {0, 4};
  const int64_t a_tall[2] = {300, 40}, b_wide[2] = {40, 200};
  const nx_dtype dts[2] = {NX_F32, NX_F64};
  for (int d = 0; d < 2; ++d) {
    double tol = dts[d] == NX_F32 ? 1e-5 : 1e-12, atol = dts[d] == NX_F32 ? 5e-5 : 1e-12;
    for (int nc = 0; nc < 4; ++nc) {
      bool anc = nc & 1, bnc = nc & 2;
      run_matmul_case(dts[d], a57, 2, anc, b73, 2, bnc, tol, atol);
      run_matmul_case(dts[d], a_big, 2, anc, b_big, 2, bnc, tol, atol); /* the packed GEMM path */
      run_matmul_case(dts[d], a234, 3, anc, b245, 3, bnc, tol, atol);   /* batched */
      run_matmul_case(dts[d], a4135, 4, anc, b256, 3, bnc, tol, atol);  /* broadcast batch -> [4,2,3,6] */
      run_matmul_case(dts[d], a35, 2, anc, b254, 3, bnc, tol, atol);    /* 2-d against a batch */
      run_matmul_case(dts[d], m34, 2, anc, v4, 1, false, tol, atol);    /* matrix @ vector -> [3] */
      run_matmul_case(dts[d], v4, 1, false, m43, 2, bnc, tol, atol);    /* vector @ matrix -> [3] */
      run_matmul_case(dts[d], v4, 1, false, b243, 3, bnc, tol, atol);   /* vector @ batch -> [2,3] */
      run_matmul_case(dts[d], a234, 3, anc, v4, 1, false, tol, atol);   /* batch @ vector -> [2,3] */
    }
    run_matmul_case(dts[d], v5, 1, false, v5, 1, false, tol, atol); /* dot product -> scalar */
    run_matmul_case(dts[d], a30, 2, false, b04, 2, false, tol, atol); /* k = 0 -> zeros [3,4] */
    run_matmul_case(dts[d], a_tall, 2, true, b_wide, 2, false, tol, atol);
  }
  /* f16 / bf16 operands give their own dtype */
  const int64_t h1[2] = {8, 16}, h2[2] = {16, 8};
  run_matmul_case(NX_F16, h1, 2, false, h2, 2, false, 2e-3, 2e-3);
  run_matmul_case(NX_BF16, h1, 2, false, h2, 2, true, 1e-2, 1e-2);
}

static void test_linear(void** state) {
  (void)state;
  rng_seed(108);
  double x[2 * 6 * 5], w[4 * 5], b[4];
  const int64_t xs[3] = {2, 6, 5}, ws[2] = {4, 5}, bs[1] = {4};
  nx_tensor tx = rand_tensor(x, xs, 3, NX_F64, -1, 1), tw = rand_tensor(w, ws, 2, NX_F64, -1, 1),
            tb = rand_tensor(b, bs, 1, NX_F64, -1, 1);
  double want[48], want_nb[48];
  for (int r = 0; r < 12; ++r)
    for (int o = 0; o < 4; ++o) {
      double s = 0;
      for (int i = 0; i < 5; ++i) s += x[r * 5 + i] * w[o * 5 + i];
      want_nb[r * 4 + o] = s;
      want[r * 4 + o] = s + b[o];
    }
  nx_tensor y = NULL, y2 = NULL;
  NX_OK_(nx_linear(&y, tx, tw, tb, NULL));
  assert_shape(y, 2, 6, 4);
  assert_tensor_close(y, want, 48, 1e-12, 1e-14);
  NX_OK_(nx_linear(&y2, tx, tw, NULL, NULL));
  assert_shape(y2, 2, 6, 4);
  assert_tensor_close(y2, want_nb, 48, 1e-12, 1e-14);
  nx_tensor_free(tx);
  nx_tensor_free(tw);
  nx_tensor_free(tb);
  nx_tensor_free(y);
  nx_tensor_free(y2);
}

/* ---------------------------------------------------------------- softmax */
static void softmax_ref(const double* x, const int64_t* shape, size_t nd, int axis, bool log_, double* out) {
  int64_t outer = 1, n = shape[axis], inner = 1;
  for (int d = 0; d < (int)nd; ++d) {
    if (d < axis) outer *= shape[d];
    if (d > axis) inner *= shape[d];
  }
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double mx = -INFINITY, s = 0;
      for (int64_t j = 0; j < n; ++j) mx = fmax(mx, x[(o * n + j) * inner + i]);
      for (int64_t j = 0; j < n; ++j) s += exp(x[(o * n + j) * inner + i] - mx);
      for (int64_t j = 0; j < n; ++j) {
        double v = x[(o * n + j) * inner + i] - mx;
        out[(o * n + j) * inner + i] = log_ ? v - log(s) : exp(v) / s;
      }
    }
}

static void test_softmax_and_log_softmax(void** state) {
  (void)state;
  rng_seed(109);
  const int64_t s47[2] = {4, 7}, s235[3] = {2, 3, 5};
  const int64_t* shapes[2] = {s47, s235};
  const size_t ndims[2] = {2, 3};
  const nx_dtype dts[2] = {NX_F32, NX_F64};
  for (int si = 0; si < 2; ++si)
    for (int d = 0; d < 2; ++d)
      for (int nc = 0; nc < 2; ++nc)
        for (int shift = 0; shift < 2; ++shift) {
          int64_t n = numel_of(shapes[si], ndims[si]);
          double* x = random_values(n, -5, 5, dts[d]);
          if (shift) /* large logits: stable, no overflow */
            for (int64_t i = 0; i < n; ++i) x[i] = dts[d] == NX_F32 ? (double)(float)(x[i] + 1000) : x[i] + 1000;
          nx_tensor t = tensor_of(x, shapes[si], ndims[si], dts[d], nc);
          for (int axis = -(int)ndims[si]; axis < (int)ndims[si]; ++axis) {
            int ax = axis < 0 ? axis + (int)ndims[si] : axis;
            for (int lg = 0; lg < 2; ++lg) {
              nx_tensor y = NULL;
              NX_OK_(lg ? nx_log_softmax(&y, t, axis, NULL) : nx_softmax(&y, t, axis, NULL));
              assert_shape_(y, shapes[si], ndims[si], __FILE__, __LINE__);
              double want[30];
              softmax_ref(x, shapes[si], ndims[si], ax, lg, want);
              assert_tensor_close(y, want, n, dts[d] == NX_F32 ? 1e-5 : 1e-12, dts[d] == NX_F32 ? 1e-6 : 1e-14);
              nx_tensor_free(y);
            }
          }
          nx_tensor_free(t);
          free(x);
        }
  /* -inf entries get probability 0 */
  const double xi[3] = {-INFINITY, 0.0, 0.0};
  const int64_t s3[1] = {3};
  nx_tensor t = make_tensor(xi, s3, 1, NX_F64), y = NULL;
  NX_OK_(nx_softmax(&y, t, 0, NULL));
  const double w[3] = {0, 0.5, 0.5};
  assert_tensor_close(y, w, 3, 1e-15, 0);
  nx_tensor_free(y);
  nx_tensor_free(t);
}

/* ---------------------------------------------------------------- indexing */
static void test_index_select(void** state) {
  (void)state;
  rng_seed(110);
  double x[4 * 5];
  const int64_t xs[2] = {4, 5};
  for (int nc = 0; nc < 2; ++nc) {
    for (int i = 0; i < 20; ++i) x[i] = rng_uniform(-1, 1);
    nx_tensor tx = tensor_of(x, xs, 2, NX_F64, nc);
    const int64_t i0[3] = {3, 0, 3};
    const int32_t i1[4] = {4, 4, 1, 0};
    const int64_t s3[1] = {3}, s4[1] = {4}, s0[1] = {0};
    nx_tensor ti0 = make_tensor(i0, s3, 1, NX_I64), ti1 = make_tensor(i1, s4, 1, NX_I32), y = NULL;
    NX_OK_(nx_index_select(&y, tx, 0, ti0, NULL));
    assert_shape(y, 3, 5);
    double want[20];
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 5; ++c) want[r * 5 + c] = x[i0[r] * 5 + c];
    assert_tensor_close(y, want, 15, 0, 0);
    nx_tensor_free(y);
    NX_OK_(nx_index_select(&y, tx, -1, ti1, NULL));
    assert_shape(y, 4, 4);
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 4; ++c) want[r * 4 + c] = x[r * 5 + i1[c]];
    assert_tensor_close(y, want, 16, 0, 0);
    nx_tensor_free(y);
    nx_tensor te = NULL;
    NX_OK_(nx_tensor_zeros(&te, s0, 1, NX_I64, CPU, NULL));
    NX_OK_(nx_index_select(&y, tx, 0, te, NULL));
    assert_shape(y, 0, 5);
    nx_tensor_free(y);
    nx_tensor_free(te);
    nx_tensor_free(tx);
    nx_tensor_free(ti0);
    nx_tensor_free(ti1);
  }
  /* integer data */
  const int32_t xi[6] = {10, 11, 12, 20, 21, 22};
  const int64_t s23[2] = {2, 3}, s2[1] = {2};
  const int64_t idx[2] = {1, 1};
  nx_tensor tx = make_tensor(xi, s23, 2, NX_I32), ti = make_tensor(idx, s2, 1, NX_I64), y = NULL;
  NX_OK_(nx_index_select(&y, tx, 0, ti, NULL));
  int32_t got[6];
  NX_OK_(nx_tensor_copy_to_host(y, got, sizeof got, NULL));
  const int32_t w[6] = {20, 21, 22, 20, 21, 22};
  assert_memory_equal(got, w, sizeof w);
  nx_tensor_free(y);
  nx_tensor_free(tx);
  nx_tensor_free(ti);
}

static void test_gather(void** state) {
  (void)state;
  rng_seed(111);
  double x[3 * 4 * 5];
  const int64_t xs[3] = {3, 4, 5};
  for (int nc = 0; nc < 2; ++nc) {
    for (int i = 0; i < 60; ++i) x[i] = rng_uniform(-1, 1);
    nx_tensor tx = tensor_of(x, xs, 3, NX_F32, nc);
    for (int axis = 0; axis < 3; ++axis) {
      /* index may be smaller than x outside the axis, and any size along it */
      int64_t is[3] = {2, 3, 4};
      is[axis] = 6;
      int64_t ni = numel_of(is, 3);
      int64_t idx[72];
      for (int64_t i = 0; i < ni; ++i) idx[i] = rng_int(xs[axis]);
      nx_tensor ti = make_tensor(idx, is, 3, NX_I64), y = NULL;
      NX_OK_(nx_gather(&y, tx, axis, ti, NULL));
      assert_shape(y, is[0], is[1], is[2]);
      double want[72];
      int64_t c[3] = {0, 0, 0}, e = 0;
      do {
        int64_t s[3] = {c[0], c[1], c[2]};
        s[axis] = idx[e];
        want[e++] = (double)(float)x[(s[0] * 4 + s[1]) * 5 + s[2]];
      } while (next_coord(c, is, 3));
      assert_tensor_close(y, want, ni, 0, 1e-7);
      nx_tensor_free(ti);
      nx_tensor_free(y);
    }
    nx_tensor_free(tx);
  }
}

static void test_embedding_and_one_hot(void** state) {
  (void)state;
  rng_seed(112);
  double w[10 * 3];
  const int64_t ws[2] = {10, 3};
  nx_tensor tw = rand_tensor(w, ws, 2, NX_F64, -1, 1);
  const int64_t idx[8] = {0, 9, 3, 3, 7, 1, 0, 2};
  const int64_t is[2] = {2, 4};
  nx_tensor ti = make_tensor(idx, is, 2, NX_I64), y = NULL;
  NX_OK_(nx_embedding(&y, tw, ti, NULL));
  assert_shape(y, 2, 4, 3);
  double want[24];
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 3; ++j) want[i * 3 + j] = w[idx[i] * 3 + j];
  assert_tensor_close(y, want, 24, 0, 0);
  nx_tensor_free(y);
  /* i32 indices, and a non-contiguous weight */
  const int32_t idx32[3] = {5, 5, 8};
  const int64_t s3[1] = {3};
  nx_tensor ti32 = make_tensor(idx32, s3, 1, NX_I32), twn = make_noncontig(w, ws, 2, NX_F64);
  NX_OK_(nx_embedding(&y, twn, ti32, NULL));
  assert_shape(y, 3, 3);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) want[i * 3 + j] = w[idx32[i] * 3 + j];
  assert_tensor_close(y, want, 9, 0, 0);
  nx_tensor_free(y);

  /* one_hot in several dtypes */
  const nx_dtype dts[3] = {NX_F32, NX_I64, NX_BOOL};
  for (int k = 0; k < 3; ++k) {
    NX_OK_(nx_one_hot(&y, ti, 10, dts[k], NULL));
    assert_shape(y, 2, 4, 10);
    assert_int_equal(tensor_dtype(y), dts[k]);
    double oh[80];
    for (int i = 0; i < 8; ++i)
      for (int c = 0; c < 10; ++c) oh[i * 10 + c] = idx[i] == c;
    assert_tensor_close(y, oh, 80, 0, 0);
    nx_tensor_free(y);
  }
  nx_tensor_free(tw);
  nx_tensor_free(twn);
  nx_tensor_free(ti);
  nx_tensor_free(ti32);
}

/* ---------------------------------------------------------------- losses */
static void log_softmax_rows(const double* x, int64_t n, int64_t c, double* lp) {
  for (int64_t i = 0; i < n; ++i) {
    double mx = -INFINITY, s = 0;
    for (int64_t j = 0; j < c; ++j) mx = fmax(mx, x[i * c + j]);
    for (int64_t j = 0; j < c; ++j) s += exp(x[i * c + j] - mx);
    for (int64_t j = 0; j < c; ++j) lp[i * c + j] = x[i * c + j] - mx - log(s);
  }
}
/* PyTorch's cross entropy on log-probabilities: per-row loss, mean over the rows that count. */
static void ce_ref(const double* lp, const int64_t* t, int64_t n, int64_t c, int64_t ignore, double eps,
                   double* per, double* sum, double* mean) {
  double s = 0;
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (t[i] == ignore) {
      per[i] = 0;
      continue;
    }
    double smooth = 0;
    for (int64_t j = 0; j < c; ++j) smooth += -lp[i * c + j] / (double)c;
    per[i] = (1 - eps) * -lp[i * c + t[i]] + eps * smooth;
    s += per[i];
    count++;
  }
  *sum = s;
  *mean = s / (double)count;
}

static void test_cross_entropy_and_nll(void** state) {
  (void)state;
  rng_seed(113);
  enum { N = 6, C = 5 };
  const int64_t ls[2] = {N, C}, ts[1] = {N};
  const nx_dtype dts[2] = {NX_F32, NX_F64};
  for (int d = 0; d < 2; ++d)
    for (int nc = 0; nc < 2; ++nc)
      for (int variant = 0; variant < 3; ++variant) {
        double* x = random_values(N * C, -3, 3, dts[d]);
        int64_t t[N];
        for (int i = 0; i < N; ++i) t[i] = rng_int(C);
        int64_t ignore = variant == 0 ? -100 : variant == 1 ? 2 : -100;
        double eps = variant == 2 ? 0.1 : 0.0;
        if (variant == 0) t[2] = -100; /* ignored row */
        if (variant == 1) t[0] = 2;
        nx_tensor tl = tensor_of(x, ls, 2, dts[d], nc), tt = make_tensor(t, ts, 1, NX_I64);
        double lp[N * C], per[N], sum, mean;
        log_softmax_rows(x, N, C, lp);
        ce_ref(lp, t, N, C, ignore, eps, per, &sum, &mean);
        double tol = dts[d] == NX_F32 ? 1e-5 : 1e-12;
        nx_tensor y = NULL;
        NX_OK_(nx_cross_entropy(&y, tl, tt, ignore, eps, NX_REDUCTION_MEAN, NULL));
        assert_scalar_shape(y);
        assert_int_equal(tensor_dtype(y), dts[d]);
        assert_true(fabs(scalar_of(y) - mean) <= tol * (1 + fabs(mean)));
        nx_tensor_free(y);
        NX_OK_(nx_cross_entropy(&y, tl, tt, ignore, eps, NX_REDUCTION_SUM, NULL));
        assert_true(fabs(scalar_of(y) - sum) <= tol * (1 + fabs(sum)));
        nx_tensor_free(y);
        NX_OK_(nx_cross_entropy(&y, tl, tt, ignore, eps, NX_REDUCTION_NONE, NULL));
        assert_shape(y, N);
        assert_tensor_close(y, per, N, tol, tol);
        nx_tensor_free(y);
        /* nll_loss on the log-probabilities gives the same without smoothing */
        if (eps == 0) {
          nx_tensor tlp = NULL;
          NX_OK_(nx_log_softmax(&tlp, tl, 1, NULL));
          NX_OK_(nx_nll_loss(&y, tlp, tt, ignore, NX_REDUCTION_MEAN, NULL));
          assert_true(fabs(scalar_of(y) - mean) <= tol * (1 + fabs(mean)));
          nx_tensor_free(y);
          NX_OK_(nx_nll_loss(&y, tlp, tt, ignore, NX_REDUCTION_NONE, NULL));
          assert_tensor_close(y, per, N, tol, tol);
          nx_tensor_free(y);
          nx_tensor_free(tlp);
        }
        nx_tensor_free(tl);
        nx_tensor_free(tt);
        free(x);
      }
  /* nll_loss on arbitrary values is -x[target]; i32 targets work too */
  const double v[6] = {0.5, -1.0, 2.0, 3.0, -4.0, 0.25};
  const int32_t tg[2] = {2, 0};
  const int64_t vs[2] = {2, 3}, s2[1] = {2};
  nx_tensor tv = make_tensor(v, vs, 2, NX_F64), tt = make_tensor(tg, s2, 1, NX_I32), y = NULL;
  NX_OK_(nx_nll_loss(&y, tv, tt, -100, NX_REDUCTION_SUM, NULL));
  assert_true(scalar_of(y) == -(2.0 + 3.0));
  nx_tensor_free(y);
  NX_OK_(nx_nll_loss(&y, tv, tt, -100, NX_REDUCTION_MEAN, NULL));
  assert_true(scalar_of(y) == -(2.0 + 3.0) / 2);
  nx_tensor_free(y);
  nx_tensor_free(tv);
  nx_tensor_free(tt);
}

static void test_mse_and_bce(void** state) {
  (void)state;
  rng_seed(114);
  const int64_t s[2] = {4, 6};
  const int64_t n = 24;
  const nx_dtype dts[2] = {NX_F32, NX_F64};
  for (int d = 0; d < 2; ++d)
    for (int nc = 0; nc < 2; ++nc) {
      double* x = random_values(n, -3, 3, dts[d]);
      double* t = random_values(n, -3, 3, dts[d]);
      nx_tensor tx = tensor_of(x, s, 2, dts[d], nc), tt = tensor_of(t, s, 2, dts[d], !nc);
      double per[24], sum = 0;
      for (int64_t i = 0; i < n; ++i) {
        per[i] = (x[i] - t[i]) * (x[i] - t[i]);
        sum += per[i];
      }
      double tol = dts[d] == NX_F32 ? 1e-5 : 1e-12;
      nx_tensor y = NULL;
      NX_OK_(nx_mse_loss(&y, tx, tt, NX_REDUCTION_MEAN, NULL));
      assert_scalar_shape(y);
      assert_true(fabs(scalar_of(y) - sum / n) <= tol * (1 + sum / n));
      nx_tensor_free(y);
      NX_OK_(nx_mse_loss(&y, tx, tt, NX_REDUCTION_SUM, NULL));
      assert_true(fabs(scalar_of(y) - sum) <= tol * (1 + sum));
      nx_tensor_free(y);
      NX_OK_(nx_mse_loss(&y, tx, tt, NX_REDUCTION_NONE, NULL));
      assert_shape(y, 4, 6);
      assert_tensor_close(y, per, n, tol, tol);
      nx_tensor_free(y);
      nx_tensor_free(tx);
      nx_tensor_free(tt);
      /* binary cross entropy with logits, including logits far out (no overflow) */
      for (int64_t i = 0; i < n; ++i) {
        if (i % 6 == 0) x[i] = (i % 12 ? 1 : -1) * 60.0;
        t[i] = (double)rng_int(2) * 0.75 + (i % 5 == 0 ? 0.125 : 0);
        if (dts[d] == NX_F32) t[i] = (double)(float)t[i];
      }
      tx = tensor_of(x, s, 2, dts[d], nc);
      tt = tensor_of(t, s, 2, dts[d], false);
      sum = 0;
      for (int64_t i = 0; i < n; ++i) {
        per[i] = fmax(x[i], 0) - x[i] * t[i] + log1p(exp(-fabs(x[i])));
        sum += per[i];
      }
      NX_OK_(nx_bce_with_logits(&y, tx, tt, NX_REDUCTION_NONE, NULL));
      assert_tensor_close(y, per, n, tol, tol);
      nx_tensor_free(y);
      NX_OK_(nx_bce_with_logits(&y, tx, tt, NX_REDUCTION_MEAN, NULL));
      assert_true(fabs(scalar_of(y) - sum / n) <= tol * (1 + sum / n));
      nx_tensor_free(y);
      NX_OK_(nx_bce_with_logits(&y, tx, tt, NX_REDUCTION_SUM, NULL));
      assert_true(fabs(scalar_of(y) - sum) <= tol * (1 + sum));
      nx_tensor_free(y);
      nx_tensor_free(tx);
      nx_tensor_free(tt);
      free(x);
      free(t);
    }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      NX_TEST(test_unary_ops),
      NX_TEST(test_unary_special_values),
      NX_TEST(test_unary_integer_and_half),
      NX_TEST(test_binary_ops_broadcasting),
      NX_TEST(test_where),
      NX_TEST(test_dtype_promotion),
      NX_TEST(test_in_place_ops),
      NX_TEST(test_reductions_all_axes_subsets),
      NX_TEST(test_reductions_dtypes_and_edges),
      NX_TEST(test_argmax),
      NX_TEST(test_reductions_nan),
      NX_TEST(test_noncontiguous_indices),
      NX_TEST(test_matmul),
      NX_TEST(test_linear),
      NX_TEST(test_softmax_and_log_softmax),
      NX_TEST(test_index_select),
      NX_TEST(test_gather),
      NX_TEST(test_embedding_and_one_hot),
      NX_TEST(test_cross_entropy_and_nll),
      NX_TEST(test_mse_and_bce),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
