/* The C contract of nexus.h, part 4: autodiff. Gradients against hand-computed ones,
 * accumulation, retain_graph, autograd_grad, no-grad mode, detach, in-place version checks,
 * checked backward, the graph object, forward mode (jvp) against finite differences, double
 * backward, checkpointing, and a long training loop that must not leak handles. Each op's own
 * gradients, first and second order (finite differences of sum(w * op(x)) and of its gradient,
 * through nx_autograd_grad with create_graph), are the op harness's (tests/harness, modes
 * gradcheck and gradgrad). */
#include <pthread.h>

#include "nx_test.h"

static nx_tensor leaf(double* host, const int64_t* shape, size_t ndim, nx_dtype dt, double lo, double hi) {
  return t_requiring_grad(rand_tensor(host, shape, ndim, dt, lo, hi));
}
static void assert_no_grad(nx_tensor t) {
  nx_tensor g = SENTINEL;
  NX_OK_(nx_tensor_grad(&g, t));
  assert_null(g);
}
static void assert_grad_close(nx_tensor t, const double* want, int64_t n, double tol) {
  nx_tensor g = t_grad(t);
  if (!g) fail_msg("the tensor has no gradient");
  assert_tensor_close(g, want, n, tol, tol);
  nx_tensor_free(g);
}
static void matmul_ref(const double* a, const double* b, double* c, int m, int k, int n, bool ta, bool tb) {
  /* c[m,n] = op(a) @ op(b), op = transpose when asked (a stored [k,m] / b stored [n,k]) */
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int p = 0; p < k; ++p) s += (ta ? a[p * m + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * n + j]);
      c[i * n + j] = s;
    }
}

/* ---------------------------------------------------------------- backward vs hand gradients */
static void test_backward_elementwise_broadcast(void** state) {
  (void)state;
  rng_seed(200);
  double x[6], w[3];
  const int64_t xs[2] = {2, 3}, ws[1] = {3};
  nx_tensor tx = leaf(x, xs, 2, NX_F64, -1, 1), tw = leaf(w, ws, 1, NX_F64, -1, 1);
  nx_tensor e = NULL, m = NULL, s = NULL, a = NULL, L = NULL;
  NX_OK_(nx_exp(&e, tx, NULL));
  NX_OK_(nx_mul(&m, e, tw, NULL)); /* w broadcasts over the rows */
  NX_OK_(nx_sin(&s, tx, NULL));
  NX_OK_(nx_add(&a, m, s, NULL));
  L = t_sum_all(a);
  bool flag = false;
  NX_OK_(nx_tensor_is_leaf(tx, &flag));
  assert_true(flag);
  NX_OK_(nx_tensor_is_leaf(L, &flag));
  assert_false(flag);
  NX_OK_(nx_tensor_get_requires_grad(L, &flag));
  assert_true(flag);
  NX_OK_(nx_backward(L, NULL, NULL, NULL));
  double gx[6], gw[3] = {0, 0, 0};
  for (int i = 0; i < 6; ++i) {
    gx[i] = exp(x[i]) * w[i % 3] + cos(x[i]);
    gw[i % 3] += exp(x[i]);
  }
  assert_grad_close(tx, gx, 6, 1e-12);
  assert_grad_close(tw, gw, 3, 1e-12);
  /* intermediate (non-leaf) tensors accumulate nothing */
  assert_no_grad(a);
  nx_tensor ts[] = {tx, tw, e, m, s, a, L};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; ++i) nx_tensor_free(ts[i]);
}

static void test_backward_matmul_and_views(void** state) {
  (void)state;
  rng_seed(201);
  double A[12], B[8], C[6];
  const int64_t as[2] = {3, 4}, bs[2] = {4, 2}, cs[2] = {3, 2};
  nx_tensor tA = leaf(A, as, 2, NX_F64, -1, 1), tB = leaf(B, bs, 2, NX_F64, -1, 1);
  nx_tensor tC = rand_tensor(C, cs, 2, NX_F64, -1, 1), y = NULL, yc = NULL;
  NX_OK_(nx_matmul(&y, tA, tB, NULL));
  NX_OK_(nx_mul(&yc, y, tC, NULL));
  nx_tensor L = t_sum_all(yc);
  NX_OK_(nx_backward(L, NULL, NULL, NULL));
  double gA[12], gB[8];
  matmul_ref(C, B, gA, 3, 2, 4, false, true); /* C @ B^T */
  matmul_ref(A, C, gB, 4, 3, 2, true, false); /* A^T @ C */
  assert_grad_close(tA, gA, 12, 1e-12);
  assert_grad_close(tB, gB, 8, 1e-12);
  assert_no_grad(tC); /* does not require grad */
  nx_tensor_free(y);
  nx_tensor_free(yc);
  nx_tensor_free(L);

  /* through views: sum(transpose(x)[1:3]^2) touches columns 1 and 2 of x */
  double x[12];
  nx_tensor tx = leaf(x, as, 2, NX_F64, -1, 1), t = NULL, sl = NULL, sq = NULL;
  t = t_transpose(tx, 0, 1);
  NX_OK_(nx_slice(&sl, t, 0, 1, 3, 1, NULL));
  NX_OK_(nx_mul(&sq, sl, sl, NULL));
  L = t_sum_all(sq);
  NX_OK_(nx_backward(L, NULL, NULL, NULL));
  double gx[12];
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) gx[i * 4 + j] = (j == 1 || j == 2) ? 2 * x[i * 4 + j] : 0;
  assert_grad_close(tx, gx, 12, 1e-14);
  nx_tensor_free(t);
  nx_tensor_free(sl);
  nx_tensor_free(sq);
  nx_tensor_free(L);

  /* an explicit output gradient for a non-scalar root */
  nx_tensor y2 = NULL, g = NULL;
  NX_OK_(nx_mul_scalar(&y2, tx, 3, NULL));
  double gv[12];
  for (int i = 0; i < 12; ++i) gv[i] = i - 5;
  g = make_tensor(gv, as, 2, NX_F64);
  NX_OK_(nx_tensor_zero_grad(tx));
  NX_OK_(nx_backward(y2, g, NULL, NULL));
  for (int i = 0; i < 12; ++i) gx[i] = 3 * gv[i];
  assert_grad_close(tx, gx, 12, 0);
  /* and NULL for a non-scalar root is a shape error */
  nx_tensor y3 = NULL;
  NX_OK_(nx_mul_scalar(&y3, tx, 3, NULL));
  EXPECT_ERR(NX_ERR_SHAPE, nx_backward(y3, NULL, NULL, NULL), "nx_backward", "[3,4]");
  nx_tensor ts[] = {tA, tB, tC, tx, y2, g, y3};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; ++i) nx_tensor_free(ts[i]);
}

static void test_backward_cross_entropy(void** state) {
  (void)state;
  rng_seed(202);
  enum { N = 5, C = 4 };
  double z[N * C];
  const int64_t zs[2] = {N, C}, ts[1] = {N};
  const int64_t t[N] = {0, 3, 1, 1, 2};
  nx_tensor tz = leaf(z, zs, 2, NX_F64, -2, 2), tt = make_tensor(t, ts, 1, NX_I64), L = NULL;
  NX_OK_(nx_cross_entropy(&L, tz, tt, -100, 0, NX_REDUCTION_MEAN, NULL));
  NX_OK_(nx_backward(L, NULL, NULL, NULL));
  double g[N * C];
  for (int i = 0; i < N; ++i) {
    double mx = -INFINITY, s = 0;
    for (int j = 0; j < C; ++j) mx = fmax(mx, z[i * C + j]);
    for (int j = 0; j < C; ++j) s += exp(z[i * C + j] - mx);
    for (int j = 0; j < C; ++j) g[i * C + j] = (exp(z[i * C + j] - mx) / s - (j == t[i])) / N;
  }
  assert_grad_close(tz, g, N * C, 1e-12);
  nx_tensor_free(tz);
  nx_tensor_free(tt);
  nx_tensor_free(L);
}

/* ---------------------------------------------------------------- accumulation */
static void test_gradient_accumulation(void** state) {
  (void)state;
  rng_seed(203);
  double x[3];
  const int64_t s3[1] = {3};
  nx_tensor tx = leaf(x, s3, 1, NX_F64, -1, 1), y = NULL, L = NULL;
  /* x used twice in one op */
  NX_OK_(nx_mul(&y, tx, tx, NULL));
  L = t_sum_all(y);
  NX_OK_(nx_backward(L, NULL, NULL, NULL));
  double want[3];
  for (int i = 0; i < 3; ++i) want[i] = 2 * x[i];
  assert_grad_close(tx, want, 3, 1e-15);
  nx_tensor_free(y);
  nx_tensor_free(L);
  /* a second graph adds to .grad */
  NX_OK_(nx_mul_scalar(&y, tx, 3, NULL));
  L = t_sum_all(y);
  NX_OK_(nx_backward(L, NULL, NULL, NULL));
  for (int i = 0; i < 3; ++i) want[i] = 2 * x[i] + 3;
  assert_grad_close(tx, want, 3, 1e-15);
  nx_tensor_free(y);
  nx_tensor_free(L);
  /* zero_grad drops it */
  NX_OK_(nx_tensor_zero_grad(tx));
  assert_no_grad(tx);
  /* x reaching the root along two paths: sum(exp(x) + x) */
  nx_tensor e = NULL;
  NX_OK_(nx_exp(&e, tx, NULL));
  NX_OK_(nx_add(&y, e, tx, NULL));
  L = t_sum_all(y);
  NX_OK_(nx_backward(L, NULL, NULL, NULL));
  for (int i = 0; i < 3; ++i) want[i] = exp(x[i]) + 1;
  assert_grad_close(tx, want, 3, 1e-15);
  /* the gradient handle is a snapshot owned by the caller; a later backward replaces .grad */
  nx_tensor g1 = t_grad(tx);
  nx_tensor y2 = NULL, L2 = NULL;
  NX_OK_(nx_mul_scalar(&y2, tx, 2, NULL));
  L2 = t_sum_all(y2);
  NX_OK_(nx_backward(L2, NULL, NULL, NULL));
  assert_tensor_close(g1, want, 3, 1e-15, 0);
  for (int i = 0; i < 3; ++i) want[i] += 2;
  assert_grad_close(tx, want, 3, 1e-15);
  nx_tensor ts[] = {tx, e, y, L, g1, y2, L2};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; ++i) nx_tensor_free(ts[i]);
}

static void test_retain_graph(void** state) {
  (void)state;
  rng_seed(204);
  double x[4];
  const int64_t s4[1] = {4};
  nx_tensor tx = leaf(x, s4, 1, NX_F64, -1, 1), e = NULL;
  NX_OK_(nx_exp(&e, tx, NULL));
  nx_tensor L = t_sum_all(e);
  double want[4];
  NX_OK_(nx_backward(L, NULL, &RETAIN_GRAPH, NULL));
  NX_OK_(nx_backward(L, NULL, &RETAIN_GRAPH, NULL)); /* retained: works again */
  for (int i = 0; i < 4; ++i) want[i] = 2 * exp(x[i]);
  assert_grad_close(tx, want, 4, 1e-14);
  NX_OK_(nx_backward(L, NULL, NULL, NULL)); /* the last one may free the graph */
  for (int i = 0; i < 4; ++i) want[i] = 3 * exp(x[i]);
  assert_grad_close(tx, want, 4, 1e-14);
  EXPECT_ERR(NX_ERR_STATE, nx_backward(L, NULL, NULL, NULL), "nx_backward", "retain_graph");
  EXPECT_ERR(NX_ERR_STATE, nx_backward(L, NULL, &RETAIN_GRAPH, NULL), "nx_backward", "already freed");
  assert_grad_close(tx, want, 4, 1e-14); /* the failures changed nothing */
  nx_tensor_free(L);
  nx_tensor_free(e);
  /* backward with options but no retain_graph frees the graph */
  NX_OK_(nx_exp(&e, tx, NULL));
  L = t_sum_all(e);
  NX_OK_(nx_backward(L, NULL, NULL, NULL));
  EXPECT_ERR(NX_ERR_STATE, nx_backward(L, NULL, NULL, NULL), "nx_backward", "already freed", "SumBackward");
  nx_tensor_free(L);
  nx_tensor_free(e);
  nx_tensor_free(tx);
}

static void test_autograd_grad(void** state) {
  (void)state;
  rng_seed(205);
  double x[3], w[3], z[3];
  const int64_t s3[1] = {3};
  nx_tensor tx = leaf(x, s3, 1, NX_F64, -1, 1), tw = leaf(w, s3, 1, NX_F64, -1, 1),
            tz = leaf(z, s3, 1, NX_F64, -1, 1), y = NULL, e = NULL;
  NX_OK_(nx_mul(&y, tx, tw, NULL));
  NX_OK_(nx_exp(&e, y, NULL));
  nx_tensor L = t_sum_all(e);
  nx_tensor inputs[4] = {tx, tz, y, tw};
  nx_tensor grads[4] = {SENTINEL, SENTINEL, SENTINEL, SENTINEL};
  NX_OK_(nx_autograd_grad(grads, L, NULL, inputs, 4, &RETAIN_GRAPH, NULL));
  double gx[3], gy[3], gw[3];
  for (int i = 0; i < 3; ++i) {
    gy[i] = exp(x[i] * w[i]);
    gx[i] = gy[i] * w[i];
    gw[i] = gy[i] * x[i];
  }
  assert_tensor_close(grads[0], gx, 3, 1e-14, 0);
  assert_null(grads[1]); /* z does not reach L */
  assert_tensor_close(grads[2], gy, 3, 1e-14, 0); /* a non-leaf input */
  assert_tensor_close(grads[3], gw, 3, 1e-14, 0);
  /* no .grad was touched */
  assert_no_grad(tx);
  assert_no_grad(tw);
  assert_no_grad(tz);
  for (int i = 0; i < 4; ++i) nx_tensor_free(grads[i]);
  /* an input that does not require grad is a state error; grads are all NULL */
  nx_tensor c = NULL;
  NX_OK_(nx_tensor_zeros(&c, s3, 1, NX_F64, CPU, NULL));
  nx_tensor bad[2] = {tx, c};
  nx_tensor g2[2] = {SENTINEL, SENTINEL};
  EXPECT_ERR(NX_ERR_STATE, nx_autograd_grad(g2, L, NULL, bad, 2, &RETAIN_GRAPH, NULL), "nx_autograd_grad",
             "inputs[1]");
  assert_null(g2[0]);
  assert_null(g2[1]);
  /* the graph was retained: plain backward still works */
  NX_OK_(nx_backward(L, NULL, NULL, NULL));
  assert_grad_close(tx, gx, 3, 1e-14);
  nx_tensor ts[] = {tx, tw, tz, y, e, L, c};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; ++i) nx_tensor_free(ts[i]);
}

/* ---------------------------------------------------------------- no-grad, detach, flags */
static void* grad_mode_in_thread(void* arg) {
  *(bool*)arg = grad_enabled();
  return NULL;
}

static void test_no_grad_mode(void** state) {
  (void)state;
  const int64_t s3[1] = {3};
  double x[3];
  nx_tensor tx = leaf(x, s3, 1, NX_F32, -1, 1), y = NULL;
  assert_true(grad_enabled());
  nx_autograd_set_enabled(false);
  assert_false(grad_enabled());
  NX_OK_(nx_mul(&y, tx, tx, NULL));
  bool rg = true, is_leaf = false;
  NX_OK_(nx_tensor_get_requires_grad(y, &rg));
  NX_OK_(nx_tensor_is_leaf(y, &is_leaf));
  assert_false(rg);
  assert_true(is_leaf);
  nx_graph g = NULL;
  size_t n = 99;
  NX_OK_(nx_graph_create(&g, y));
  NX_OK_(nx_graph_node_count(g, &n));
  assert_int_equal(n, 0);
  nx_graph_free(g);
  /* grad mode is per thread: another thread starts enabled */
  bool other = false;
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, grad_mode_in_thread, &other), 0);
  assert_int_equal(pthread_join(th, NULL), 0);
  assert_true(other);
  nx_autograd_set_enabled(true);
  nx_tensor L = t_sum_all(y);
  EXPECT_ERR(NX_ERR_STATE, nx_backward(L, NULL, NULL, NULL), "nx_backward", "does not require grad");
  assert_no_grad(tx);
  nx_tensor_free(L);
  nx_tensor_free(y);
  /* integer results never require grad */
  nx_tensor gt = NULL, z = NULL;
  NX_OK_(nx_tensor_zeros(&z, s3, 1, NX_F32, CPU, NULL));
  NX_OK_(nx_gt(&gt, tx, z, NULL));
  NX_OK_(nx_tensor_get_requires_grad(gt, &rg));
  assert_false(rg);
  nx_tensor am = NULL;
  NX_OK_(nx_argmax(&am, tx, 0, false, NULL));
  NX_OK_(nx_tensor_get_requires_grad(am, &rg));
  assert_false(rg);
  nx_tensor_free(gt);
  nx_tensor_free(am);
  nx_tensor_free(z);
  nx_tensor_free(tx);
}

static void test_detach(void** state) {
  (void)state;
  rng_seed(206);
  double x[4];
  const int64_t s4[1] = {4};
  nx_tensor tx = leaf(x, s4, 1, NX_F64, -1, 1), y = NULL, d = NULL, p = NULL;
  NX_OK_(nx_mul_scalar(&y, tx, 2, NULL));
  NX_OK_(nx_tensor_detach(&d, y));
  bool rg = true, lf = false;
  NX_OK_(nx_tensor_get_requires_grad(d, &rg));
  NX_OK_(nx_tensor_is_leaf(d, &lf));
  assert_false(rg);
  assert_true(lf);
  void *py = NULL, *pd = NULL;
  NX_OK_(nx_tensor_data_ptr(y, &py));
  NX_OK_(nx_tensor_data_ptr(d, &pd));
  assert_ptr_equal(py, pd); /* a view of the same data */
  /* sum(detach(2x) * x): the detached factor is a constant, so the gradient is 2x, not 4x */
  NX_OK_(nx_mul(&p, d, tx, NULL));
  nx_tensor L = t_sum_all(p);
  NX_OK_(nx_backward(L, NULL, NULL, NULL));
  double want[4];
  for (int i = 0; i < 4; ++i) want[i] = 2 * x[i];
  assert_grad_close(tx, want, 4, 1e-15);
  /* a detached tensor may become a new leaf */
  NX_OK_(nx_tensor_set_requires_grad(d, true));
  nx_tensor q = NULL;
  NX_OK_(nx_mul(&q, d, d, NULL));
  nx_tensor L2 = t_sum_all(q);
  NX_OK_(nx_backward(L2, NULL, NULL, NULL));
  for (int i = 0; i < 4; ++i) want[i] = 4 * x[i]; /* 2 * d */
  assert_grad_close(d, want, 4, 1e-15);
  nx_tensor ts[] = {tx, y, d, p, L, q, L2};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; ++i) nx_tensor_free(ts[i]);
}

static void test_set_requires_grad_errors(void** state) {
  (void)state;
  const int64_t s2[1] = {2};
  nx_tensor x = NULL, y = NULL, i = NULL;
  NX_OK_(nx_tensor_ones(&x, s2, 1, NX_F32, CPU, NULL));
  NX_OK_(nx_tensor_set_requires_grad(x, true));
  NX_OK_(nx_mul_scalar(&y, x, 2, NULL));
  EXPECT_ERR(NX_ERR_STATE, nx_tensor_set_requires_grad(y, true), "nx_tensor_set_requires_grad", "leaf",
             "MulScalarBackward");
  EXPECT_ERR(NX_ERR_STATE, nx_tensor_set_requires_grad(y, false), "nx_tensor_set_requires_grad", "leaf");
  NX_OK_(nx_tensor_zeros(&i, s2, 1, NX_I32, CPU, NULL));
  EXPECT_ERR(NX_ERR_DTYPE, nx_tensor_set_requires_grad(i, true), "nx_tensor_set_requires_grad", "i32");
  bool rg = true;
  NX_OK_(nx_tensor_get_requires_grad(i, &rg));
  assert_false(rg);
  /* every floating dtype may require grad; a leaf may turn it off again */
  const nx_dtype fl[4] = {NX_F32, NX_F64, NX_F16, NX_BF16};
  for (int k = 0; k < 4; ++k) {
    nx_tensor t = NULL;
    NX_OK_(nx_tensor_zeros(&t, s2, 1, fl[k], CPU, NULL));
    NX_OK_(nx_tensor_set_requires_grad(t, true));
    NX_OK_(nx_tensor_get_requires_grad(t, &rg));
    assert_true(rg);
    NX_OK_(nx_tensor_set_requires_grad(t, false));
    NX_OK_(nx_tensor_get_requires_grad(t, &rg));
    assert_false(rg);
    nx_tensor_free(t);
  }
  nx_tensor_free(x);
  nx_tensor_free(y);
  nx_tensor_free(i);
}

/* ---------------------------------------------------------------- in-place and versions */
static void test_in_place_version_counter(void** state) {
  (void)state;
  const int64_t s3[1] = {3};
  const float xv[3] = {1, 2, 3};
  nx_tensor x = make_tensor(xv, s3, 1, NX_F32), w = NULL, y = NULL, L = NULL;
  NX_OK_(nx_tensor_ones(&w, s3, 1, NX_F32, CPU, NULL));
  NX_OK_(nx_tensor_set_requires_grad(w, true));
  NX_OK_(nx_mul(&y, x, w, NULL)); /* saves x for w's gradient */
  NX_OK_(nx_mul_scalar_(x, 2, NULL)); /* x does not require grad: allowed */
  L = t_sum_all(y);
  EXPECT_ERR(NX_ERR_STATE, nx_backward(L, NULL, NULL, NULL), "nx_backward", "in-place", "MulBackward");
  assert_no_grad(w);
  nx_tensor_free(y);
  nx_tensor_free(L);
  /* the same through a view that shares x's storage */
  nx_tensor v = NULL;
  NX_OK_(nx_mul(&y, x, w, NULL));
  NX_OK_(nx_slice(&v, x, 0, 1, 2, 1, NULL));
  NX_OK_(nx_mul_scalar_(v, 5, NULL));
  L = t_sum_all(y);
  EXPECT_ERR(NX_ERR_STATE, nx_backward(L, NULL, NULL, NULL), "nx_backward", "in-place");
  nx_tensor_free(y);
  nx_tensor_free(L);
  nx_tensor_free(v);
  /* nx_copy_ and nx_add_ bump the version too */
  nx_tensor src = NULL;
  NX_OK_(nx_tensor_zeros(&src, s3, 1, NX_F32, CPU, NULL));
  NX_OK_(nx_mul(&y, x, w, NULL));
  NX_OK_(nx_copy_(x, src, NULL));
  L = t_sum_all(y);
  EXPECT_ERR(NX_ERR_STATE, nx_backward(L, NULL, NULL, NULL), "nx_backward", "in-place");
  nx_tensor_free(y);
  nx_tensor_free(L);
  /* writes through data_ptr bypass the check: backward uses the new values */
  NX_OK_(nx_mul(&y, x, w, NULL));
  float* px = NULL;
  NX_OK_(nx_tensor_data_ptr(x, (void**)&px));
  px[0] = 10;
  px[1] = 20;
  px[2] = 30;
  L = t_sum_all(y);
  NX_OK_(nx_backward(L, NULL, NULL, NULL));
  const double gw[3] = {10, 20, 30};
  assert_grad_close(w, gw, 3, 0);
  nx_tensor_free(y);
  nx_tensor_free(L);
  /* in-place on a leaf that requires grad, or on a non-leaf, is refused in grad mode */
  EXPECT_ERR(NX_ERR_STATE, nx_mul_scalar_(w, 2, NULL), "nx_mul_scalar_", "requires grad");
  EXPECT_ERR(NX_ERR_STATE, nx_add_(w, x, NULL), "nx_add_", "requires grad");
  EXPECT_ERR(NX_ERR_STATE, nx_mul_(w, x, NULL), "nx_mul_", "requires grad");
  EXPECT_ERR(NX_ERR_STATE, nx_copy_(w, x, NULL), "nx_copy_", "grad");
  EXPECT_ERR(NX_ERR_STATE, nx_add_(x, w, NULL), "nx_add_", "grad"); /* operand requiring grad */
  NX_OK_(nx_mul(&y, x, w, NULL));
  EXPECT_ERR(NX_ERR_STATE, nx_add_(y, x, NULL), "nx_add_", "requires grad");
  float wv[3];
  NX_OK_(nx_tensor_copy_to_host(w, wv, sizeof wv, NULL));
  assert_true(wv[0] == 1 && wv[1] == 1 && wv[2] == 1); /* unchanged */
  /* with grad mode off (an optimizer step) it is allowed */
  nx_autograd_set_enabled(false);
  NX_OK_(nx_mul_scalar_(w, 2, NULL));
  NX_OK_(nx_add_(w, x, NULL));
  nx_autograd_set_enabled(true);
  NX_OK_(nx_tensor_copy_to_host(w, wv, sizeof wv, NULL));
  assert_true(wv[0] == 12 && wv[1] == 22 && wv[2] == 32);
  nx_tensor_free(y);
  nx_tensor_free(src);
  nx_tensor_free(x);
  nx_tensor_free(w);
}

/* Autocast: linear runs in bf16 inside a CPU scope, its f32 leaves get f32 gradients, softmax
 * runs in f32, a disabling scope and the end of the scope restore f32; misuse is refused. */
static void test_autocast_scopes(void** state) {
  (void)state;
  double xh[6], wh[12];
  const int64_t sx[2] = {2, 3}, sw[2] = {4, 3};
  nx_tensor x = leaf(xh, sx, 2, NX_F32, -1, 1), w = leaf(wh, sw, 2, NX_F32, -1, 1), y = NULL, p = NULL, y32 = NULL;
  nx_dtype dt = NX_F64;
  NX_OK_(nx_autocast_get_dtype(NX_CPU, &dt));
  assert_int_equal(dt, NX_F32);
  NX_OK_(nx_autocast_push(NX_CPU, NX_BF16, true));
  NX_OK_(nx_autocast_get_dtype(NX_CPU, &dt));
  assert_int_equal(dt, NX_BF16);
  NX_OK_(nx_autocast_get_dtype(NX_CUDA, &dt)); /* scopes are per device type */
  assert_int_equal(dt, NX_F32);
  NX_OK_(nx_linear(&y, x, w, NULL, NULL));
  NX_OK_(nx_tensor_dtype(y, &dt));
  assert_int_equal(dt, NX_BF16);
  NX_OK_(nx_softmax(&p, y, 1, NULL));
  NX_OK_(nx_tensor_dtype(p, &dt));
  assert_int_equal(dt, NX_F32);
  NX_OK_(nx_autocast_push(NX_CPU, NX_BF16, false));
  NX_OK_(nx_linear(&y32, x, w, NULL, NULL));
  NX_OK_(nx_tensor_dtype(y32, &dt));
  assert_int_equal(dt, NX_F32);
  NX_OK_(nx_autocast_pop());
  nx_tensor L = t_sum_all(p);
  NX_OK_(nx_backward(L, NULL, NULL, NULL)); /* inside the scope: backward suspends autocast */
  NX_OK_(nx_autocast_pop());
  nx_tensor gw = t_grad(w);
  NX_OK_(nx_tensor_dtype(gw, &dt));
  assert_int_equal(dt, NX_F32);
  EXPECT_ERR(NX_ERR_STATE, nx_autocast_pop(), "nx_autocast_pop", "no autocast scope");
  EXPECT_ERR(NX_ERR_DTYPE, nx_autocast_push(NX_CPU, NX_F64, true), "nx_autocast_push", "f16 or bf16", "f64");
  EXPECT_ERR(NX_ERR_DEVICE, nx_autocast_push((nx_device_type)7, NX_BF16, true), "nx_autocast_push", "7");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_autocast_get_dtype(NX_CPU, NULL), "nx_autocast_get_dtype", "NULL");
  nx_tensor ts[] = {x, w, y, p, y32, L, gw};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; ++i) nx_tensor_free(ts[i]);
}

static void test_backward_checked(void** state) {
  (void)state;
  const int64_t s3[1] = {3};
  const double xv[3] = {0, 1, 4};
  nx_tensor x = t_requiring_grad(make_tensor(xv, s3, 1, NX_F64)), r = NULL, m = NULL, L = NULL;
  /* d sqrt(x)/dx at 0 is inf */
  NX_OK_(nx_sqrt(&r, x, NULL));
  NX_OK_(nx_mul_scalar(&m, r, 2, NULL));
  L = t_sum_all(m);
  EXPECT_ERR(NX_ERR_STATE, nx_backward(L, NULL, &CHECK_FINITE, NULL), "nx_backward", "SqrtBackward", "non-finite");
  nx_tensor_free(r);
  nx_tensor_free(m);
  nx_tensor_free(L);
  /* d log(x)/dx at 0 is inf too */
  NX_OK_(nx_log(&r, x, NULL));
  L = t_sum_all(r);
  EXPECT_ERR(NX_ERR_STATE, nx_backward(L, NULL, &CHECK_FINITE, NULL), "nx_backward", "LogBackward");
  nx_tensor_free(r);
  nx_tensor_free(L);
  /* finite gradients: same result as plain backward */
  NX_OK_(nx_tensor_zero_grad(x));
  NX_OK_(nx_mul(&m, x, x, NULL));
  L = t_sum_all(m);
  NX_OK_(nx_backward(L, NULL, &CHECK_FINITE, NULL));
  const double want[3] = {0, 2, 8};
  assert_grad_close(x, want, 3, 0);
  /* the unchecked backward lets the inf through */
  NX_OK_(nx_tensor_zero_grad(x));
  NX_OK_(nx_sqrt(&r, x, NULL));
  nx_tensor L2 = t_sum_all(r);
  NX_OK_(nx_backward(L2, NULL, NULL, NULL));
  double g[3];
  nx_tensor tg = t_grad(x);
  read_f64(tg, g, 3);
  assert_true(isinf(g[0]) && fabs(g[1] - 0.5) < 1e-15 && fabs(g[2] - 0.25) < 1e-15);
  nx_tensor ts[] = {x, m, L, r, L2, tg};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; ++i) nx_tensor_free(ts[i]);
}

/* ---------------------------------------------------------------- graph object */
static void test_graph_object(void** state) {
  (void)state;
  rng_seed(207);
  const int64_t xs[2] = {2, 3}, ws[2] = {3, 4};
  nx_tensor x = leaf(NULL, xs, 2, NX_F32, -1, 1), w = leaf(NULL, ws, 2, NX_F32, -1, 1), h = NULL, r = NULL;
  NX_OK_(nx_matmul(&h, x, w, NULL));
  NX_OK_(nx_relu(&r, h, NULL));
  nx_tensor L = t_sum_all(r);
  nx_graph g = NULL;
  NX_OK_(nx_graph_create(&g, L));
  size_t n = 0, bytes = 0;
  NX_OK_(nx_graph_node_count(g, &n));
  assert_int_equal(n, 3);
  const char* name = NULL;
  const char* want[3] = {"SumBackward", "ReluBackward", "MatmulBackward"}; /* root first */
  for (size_t i = 0; i < 3; ++i) {
    NX_OK_(nx_graph_node_name(g, i, &name));
    assert_string_equal(name, want[i]);
  }
  NX_OK_(nx_graph_saved_bytes(g, &bytes));
  assert_true(bytes >= (2 * 3 + 3 * 4) * sizeof(float)); /* matmul keeps both operands */
  const char* dot = NULL;
  NX_OK_(nx_graph_to_dot(g, &dot));
  const char* needles[] = {"digraph", "MatmulBackward", "ReluBackward", "SumBackward", "[2,3]", "[3,4]", "[2,4]",
                           "f32", "->"};
  for (size_t i = 0; i < sizeof needles / sizeof needles[0]; ++i)
    if (!strstr(dot, needles[i])) fail_msg("DOT text lacks \"%s\":\n%s", needles[i], dot);
  /* the snapshot outlives the caller's handles, and sees the saved tensors freed by backward */
  NX_OK_(nx_backward(L, NULL, NULL, NULL));
  nx_tensor_free(L);
  nx_tensor_free(r);
  nx_tensor_free(h);
  NX_OK_(nx_graph_saved_bytes(g, &bytes));
  assert_int_equal(bytes, 0);
  NX_OK_(nx_graph_node_name(g, 2, &name));
  assert_string_equal(name, "MatmulBackward");
  nx_graph_free(g);
  /* retain_graph keeps the saved bytes */
  NX_OK_(nx_matmul(&h, x, w, NULL));
  L = t_sum_all(h);
  NX_OK_(nx_graph_create(&g, L));
  size_t before = 0, after = 0;
  NX_OK_(nx_graph_saved_bytes(g, &before));
  NX_OK_(nx_backward(L, NULL, &RETAIN_GRAPH, NULL));
  NX_OK_(nx_graph_saved_bytes(g, &after));
  assert_int_equal(before, after);
  assert_true(after >= (2 * 3 + 3 * 4) * sizeof(float));
  nx_graph_free(g);
  /* the graph of a leaf is empty */
  NX_OK_(nx_graph_create(&g, x));
  NX_OK_(nx_graph_node_count(g, &n));
  assert_int_equal(n, 0);
  NX_OK_(nx_graph_saved_bytes(g, &bytes));
  assert_int_equal(bytes, 0);
  NX_OK_(nx_graph_to_dot(g, &dot));
  assert_non_null(strstr(dot, "digraph"));
  assert_non_null(strstr(dot, "[2,3]"));
  nx_graph_free(g);
  nx_tensor_free(L);
  nx_tensor_free(h);
  nx_tensor_free(x);
  nx_tensor_free(w);
}

/* ---------------------------------------------------------------- forward mode */
typedef nx_tensor (*fn2)(nx_tensor a, nx_tensor b);
static nx_tensor f_exp(nx_tensor a, nx_tensor b) {
  (void)b;
  nx_tensor y = NULL;
  NX_OK_(nx_exp(&y, a, NULL));
  return y;
}
static nx_tensor f_matmul(nx_tensor a, nx_tensor b) {
  nx_tensor y = NULL;
  NX_OK_(nx_matmul(&y, a, b, NULL));
  return y;
}
static nx_tensor f_sum_axis(nx_tensor a, nx_tensor b) {
  (void)b;
  nx_tensor y = NULL;
  const int64_t ax[1] = {1};
  NX_OK_(nx_sum(&y, a, ax, 1, false, NULL));
  return y;
}
static nx_tensor f_sum_sq(nx_tensor a, nx_tensor b) {
  (void)b;
  nx_tensor s = NULL;
  NX_OK_(nx_mul(&s, a, a, NULL));
  nx_tensor y = t_sum_all(s);
  nx_tensor_free(s);
  return y;
}
/* x + h v, computed outside the graph */
static nx_tensor shifted(nx_tensor x, nx_tensor v, double h) {
  nx_tensor hv = NULL, out = NULL;
  NX_OK_(nx_mul_scalar(&hv, v, h, NULL));
  NX_OK_(nx_add(&out, x, hv, NULL));
  nx_tensor_free(hv);
  return out;
}

/* J v from nx_jvp against (f(x + h v) - f(x - h v)) / 2h, for f of one or two inputs. */
static void check_jvp(fn2 f, const int64_t* as, size_t an, const int64_t* bs, size_t bn, int ninputs) {
  nx_tensor a = leaf(NULL, as, an, NX_F64, -1, 1), b = ninputs > 1 ? leaf(NULL, bs, bn, NX_F64, -1, 1) : NULL;
  nx_tensor va = rand_tensor(NULL, as, an, NX_F64, -1, 1), vb = ninputs > 1 ? rand_tensor(NULL, bs, bn, NX_F64, -1, 1) : NULL;
  nx_tensor y = f(a, b), jv = NULL;
  nx_tensor inputs[2] = {a, b}, tangents[2] = {va, vb};
  NX_OK_(nx_jvp(&jv, y, inputs, tangents, (size_t)ninputs, NULL));
  /* finite difference, no graph */
  nx_autograd_set_enabled(false);
  const double h = 1e-5;
  nx_tensor ap = shifted(a, va, h), am = shifted(a, va, -h);
  nx_tensor bp = b ? shifted(b, vb, h) : NULL, bm = b ? shifted(b, vb, -h) : NULL;
  nx_tensor yp = f(ap, bp), ym = f(am, bm), diff = NULL, fd = NULL;
  NX_OK_(nx_sub(&diff, yp, ym, NULL));
  NX_OK_(nx_mul_scalar(&fd, diff, 1 / (2 * h), NULL));
  nx_autograd_set_enabled(true);
  int64_t n = tensor_numel(y);
  assert_int_equal(tensor_numel(jv), n);
  int64_t ys[8], js[8];
  size_t yn = 0, jn = 0;
  NX_OK_(nx_tensor_ndim(y, &yn));
  NX_OK_(nx_tensor_ndim(jv, &jn));
  assert_int_equal(yn, jn);
  NX_OK_(nx_tensor_shape(y, ys, 8));
  NX_OK_(nx_tensor_shape(jv, js, 8));
  for (size_t i = 0; i < yn; ++i) assert_int_equal(ys[i], js[i]);
  double* want = host_f64(fd);
  assert_tensor_close(jv, want, n, 1e-7, 1e-8);
  free(want);
  /* jvp leaves .grad alone and the graph usable */
  assert_no_grad(a);
  nx_tensor L = t_sum_all(y);
  NX_OK_(nx_backward(L, NULL, NULL, NULL));
  nx_tensor ts[] = {a, b, va, vb, y, jv, ap, am, bp, bm, yp, ym, diff, fd, L};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; ++i) nx_tensor_free(ts[i]);
}

static void test_jvp_against_finite_differences(void** state) {
  (void)state;
  rng_seed(208);
  const int64_t s5[1] = {5}, s34[2] = {3, 4}, s42[2] = {4, 2};
  check_jvp(f_exp, s5, 1, NULL, 0, 1);
  check_jvp(f_exp, s34, 2, NULL, 0, 1);
  check_jvp(f_matmul, s34, 2, s42, 2, 2);
  check_jvp(f_sum_axis, s34, 2, NULL, 0, 1);
  check_jvp(f_sum_sq, s34, 2, NULL, 0, 1);
  /* exact values too: J v of exp is exp(x) v */
  double x[5], v[5];
  nx_tensor tx = leaf(x, s5, 1, NX_F64, -1, 1), tv = rand_tensor(v, s5, 1, NX_F64, -1, 1), y = NULL, jv = NULL;
  NX_OK_(nx_exp(&y, tx, NULL));
  NX_OK_(nx_jvp(&jv, y, &tx, &tv, 1, NULL));
  double want[5];
  for (int i = 0; i < 5; ++i) want[i] = exp(x[i]) * v[i];
  assert_tensor_close(jv, want, 5, 1e-14, 0);
  nx_tensor_free(jv);
  /* an input the output does not depend on contributes nothing */
  nx_tensor z = leaf(NULL, s5, 1, NX_F64, -1, 1);
  NX_OK_(nx_jvp(&jv, y, &z, &tv, 1, NULL));
  const double zeros[5] = {0, 0, 0, 0, 0};
  assert_tensor_close(jv, zeros, 5, 0, 0);
  nx_tensor_free(jv);
  /* tangent of the wrong shape */
  nx_tensor bad = NULL;
  const int64_t s4[1] = {4};
  NX_OK_(nx_tensor_zeros(&bad, s4, 1, NX_F64, CPU, NULL));
  jv = SENTINEL;
  EXPECT_ERR(NX_ERR_SHAPE, nx_jvp(&jv, y, &tx, &bad, 1, NULL), "nx_jvp", "[4]", "[5]");
  assert_null(jv);
  nx_tensor ts[] = {tx, tv, y, z, bad};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; ++i) nx_tensor_free(ts[i]);
}

/* ---------------------------------------------------------------- double backward */
static void test_double_backward_cubic(void** state) {
  (void)state;
  rng_seed(209);
  double x[4];
  const int64_t s4[1] = {4};
  nx_tensor tx = leaf(x, s4, 1, NX_F64, -2, 2), c = NULL;
  NX_OK_(nx_pow_scalar(&c, tx, 3, NULL));
  nx_tensor y = t_sum_all(c);
  nx_tensor g = NULL;
  NX_OK_(nx_autograd_grad(&g, y, NULL, &tx, 1, &CREATE_GRAPH, NULL));
  double want[4];
  for (int i = 0; i < 4; ++i) want[i] = 3 * x[i] * x[i];
  assert_tensor_close(g, want, 4, 1e-14, 0);
  bool rg = false;
  NX_OK_(nx_tensor_get_requires_grad(g, &rg));
  assert_true(rg); /* create_graph: the gradient is differentiable */
  nx_tensor s = t_sum_all(g), gg = NULL;
  NX_OK_(nx_autograd_grad(&gg, s, NULL, &tx, 1, &CREATE_GRAPH, NULL));
  for (int i = 0; i < 4; ++i) want[i] = 6 * x[i];
  assert_tensor_close(gg, want, 4, 1e-14, 0);
  nx_tensor s3 = t_sum_all(gg), ggg = NULL;
  NX_OK_(nx_autograd_grad(&ggg, s3, NULL, &tx, 1, NULL, NULL));
  const double six[4] = {6, 6, 6, 6};
  assert_tensor_close(ggg, six, 4, 1e-14, 0);
  assert_no_grad(tx);
  /* the same through backward with create_graph: .grad = 3x^2, then backward of its sum adds 6x */
  nx_tensor c2 = NULL;
  NX_OK_(nx_pow_scalar(&c2, tx, 3, NULL));
  nx_tensor y2 = t_sum_all(c2);
  NX_OK_(nx_backward(y2, NULL, &CREATE_GRAPH, NULL));
  nx_tensor gx = t_grad(tx);
  NX_OK_(nx_tensor_get_requires_grad(gx, &rg));
  assert_true(rg);
  nx_tensor sg = t_sum_all(gx);
  NX_OK_(nx_backward(sg, NULL, NULL, NULL));
  for (int i = 0; i < 4; ++i) want[i] = 3 * x[i] * x[i] + 6 * x[i];
  assert_grad_close(tx, want, 4, 1e-14);
  nx_tensor ts[] = {tx, c, y, g, s, gg, s3, ggg, c2, y2, gx, sg};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; ++i) nx_tensor_free(ts[i]);
}

static void test_double_backward_matmul(void** state) {
  (void)state;
  rng_seed(210);
  enum { M = 3, K = 4, N = 2 };
  double A[M * K], B[K * N], V[M * K];
  const int64_t as[2] = {M, K}, bs[2] = {K, N};
  nx_tensor tA = leaf(A, as, 2, NX_F64, -1, 1), tB = leaf(B, bs, 2, NX_F64, -1, 1);
  nx_tensor tV = rand_tensor(V, as, 2, NX_F64, -1, 1), y = NULL, sq = NULL;
  NX_OK_(nx_matmul(&y, tA, tB, NULL));
  NX_OK_(nx_mul(&sq, y, y, NULL));
  nx_tensor L = t_sum_all(sq);
  nx_tensor ins[2] = {tA, tB}, g[2] = {NULL, NULL};
  NX_OK_(nx_autograd_grad(g, L, NULL, ins, 2, &CREATE_GRAPH, NULL));
  /* gA = 2 (A B) B^T */
  double AB[M * N], gA[M * K], BBt[K * K];
  matmul_ref(A, B, AB, M, K, N, false, false);
  matmul_ref(AB, B, gA, M, N, K, false, true);
  for (int i = 0; i < M * K; ++i) gA[i] *= 2;
  assert_tensor_close(g[0], gA, M * K, 1e-13, 1e-14);
  /* h = sum(gA * V): dh/dA = 2 V B B^T, dh/dB = 2 (V^T A + A^T V) B */
  nx_tensor p = NULL;
  NX_OK_(nx_mul(&p, g[0], tV, NULL));
  nx_tensor h = t_sum_all(p), gg[2] = {NULL, NULL};
  NX_OK_(nx_autograd_grad(gg, h, NULL, ins, 2, NULL, NULL));
  double hA[M * K], hB[K * N], VtA[K * K], AtV[K * K], Msym[K * K];
  matmul_ref(B, B, BBt, K, N, K, false, true);
  matmul_ref(V, BBt, hA, M, K, K, false, false);
  for (int i = 0; i < M * K; ++i) hA[i] *= 2;
  matmul_ref(V, A, VtA, K, M, K, true, false);
  matmul_ref(A, V, AtV, K, M, K, true, false);
  for (int i = 0; i < K * K; ++i) Msym[i] = VtA[i] + AtV[i];
  matmul_ref(Msym, B, hB, K, K, N, false, false);
  for (int i = 0; i < K * N; ++i) hB[i] *= 2;
  assert_tensor_close(gg[0], hA, M * K, 1e-13, 1e-14);
  assert_tensor_close(gg[1], hB, K * N, 1e-13, 1e-14);
  nx_tensor ts[] = {tA, tB, tV, y, sq, L, g[0], g[1], p, h, gg[0], gg[1]};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; ++i) nx_tensor_free(ts[i]);
}

/* ---------------------------------------------------------------- checkpointing */
/* out = tanh(x @ W1) @ W2 */
static nx_tensor mlp(nx_tensor x, nx_tensor w1, nx_tensor w2) {
  nx_tensor a = NULL, t = NULL, out = NULL;
  NX_OK_(nx_matmul(&a, x, w1, NULL));
  NX_OK_(nx_tanh(&t, a, NULL));
  NX_OK_(nx_matmul(&out, t, w2, NULL));
  nx_tensor_free(a);
  nx_tensor_free(t);
  return out;
}
static nx_status mlp_segment(nx_tensor* outputs, size_t noutputs, const nx_tensor* inputs, size_t ninputs,
                             void* user_data) {
  if (noutputs != 1 || ninputs != 3) return NX_ERR_INVALID_ARGUMENT;
  ++*(int*)user_data;
  nx_tensor a = NULL, t = NULL;
  nx_status st = nx_matmul(&a, inputs[0], inputs[1], NULL);
  if (st == NX_OK) st = nx_tanh(&t, a, NULL);
  if (st == NX_OK) st = nx_matmul(&outputs[0], t, inputs[2], NULL);
  nx_tensor_free(a);
  nx_tensor_free(t);
  return st;
}
static nx_tensor square_sum(nx_tensor y) {
  nx_tensor sq = NULL;
  NX_OK_(nx_mul(&sq, y, y, NULL));
  nx_tensor L = t_sum_all(sq);
  nx_tensor_free(sq);
  return L;
}
static size_t graph_bytes(nx_tensor root) {
  nx_graph g = NULL;
  size_t b = 0;
  NX_OK_(nx_graph_create(&g, root));
  NX_OK_(nx_graph_saved_bytes(g, &b));
  nx_graph_free(g);
  return b;
}

static void test_checkpoint(void** state) {
  (void)state;
  rng_seed(211);
  const int64_t xs[2] = {8, 16}, w1s[2] = {16, 32}, w2s[2] = {32, 4};
  double xv[8 * 16], w1v[16 * 32], w2v[32 * 4];
  nx_tensor x = leaf(xv, xs, 2, NX_F64, -1, 1), w1 = leaf(w1v, w1s, 2, NX_F64, -0.5, 0.5),
            w2 = leaf(w2v, w2s, 2, NX_F64, -0.5, 0.5);
  /* plain */
  nx_tensor y = mlp(x, w1, w2), L = square_sum(y);
  size_t plain_bytes = graph_bytes(L);
  NX_OK_(nx_backward(L, NULL, NULL, NULL));
  nx_tensor gx = t_grad(x), gw1 = t_grad(w1), gw2 = t_grad(w2);
  double* want_y = host_f64(y);
  NX_OK_(nx_tensor_zero_grad(x));
  NX_OK_(nx_tensor_zero_grad(w1));
  NX_OK_(nx_tensor_zero_grad(w2));
  /* checkpointed */
  int calls = 0;
  nx_tensor ins[3] = {x, w1, w2}, outs[1] = {NULL};
  NX_OK_(nx_checkpoint(outs, 1, ins, 3, mlp_segment, &calls, NULL));
  assert_int_equal(calls, 1);
  assert_tensor_close(outs[0], want_y, 8 * 4, 1e-15, 0);
  bool rg = false;
  NX_OK_(nx_tensor_get_requires_grad(outs[0], &rg));
  assert_true(rg);
  nx_tensor Lc = square_sum(outs[0]);
  size_t ckpt_bytes = graph_bytes(Lc);
  if (!(ckpt_bytes < plain_bytes))
    fail_msg("checkpointing should save fewer bytes: %zu with, %zu without", ckpt_bytes, plain_bytes);
  NX_OK_(nx_backward(Lc, NULL, NULL, NULL));
  assert_int_equal(calls, 2); /* recomputed once inside backward */
  double* w = host_f64(gx);
  assert_grad_close(x, w, 8 * 16, 1e-12);
  free(w);
  w = host_f64(gw1);
  assert_grad_close(w1, w, 16 * 32, 1e-12);
  free(w);
  w = host_f64(gw2);
  assert_grad_close(w2, w, 32 * 4, 1e-12);
  free(w);
  free(want_y);
  nx_tensor ts[] = {x, w1, w2, y, L, gx, gw1, gw2, outs[0], Lc};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; ++i) nx_tensor_free(ts[i]);
}

static nx_status failing_segment(nx_tensor* outputs, size_t noutputs, const nx_tensor* inputs, size_t ninputs,
                                 void* user_data) {
  (void)noutputs;
  (void)ninputs;
  (void)user_data;
  return nx_matmul(&outputs[0], inputs[0], inputs[0], NULL); /* [2,3] @ [2,3]: shape error */
}

static void test_checkpoint_segment_failure(void** state) {
  (void)state;
  const int64_t s23[2] = {2, 3};
  nx_tensor x = NULL;
  NX_OK_(nx_tensor_ones(&x, s23, 2, NX_F32, CPU, NULL));
  NX_OK_(nx_tensor_set_requires_grad(x, true));
  nx_tensor outs[1] = {SENTINEL};
  EXPECT_ERR(NX_ERR_SHAPE, nx_checkpoint(outs, 1, &x, 1, failing_segment, NULL, NULL), "nx_checkpoint",
             "inner dimensions differ");
  assert_null(outs[0]);
  nx_tensor_free(x);
}

/* ---------------------------------------------------------------- gradient dtypes */
static void test_gradient_dtype_matches_leaf(void** state) {
  (void)state;
  const int64_t s3[1] = {3};
  const nx_dtype dts[4] = {NX_F32, NX_F64, NX_F16, NX_BF16};
  for (int k = 0; k < 4; ++k) {
    nx_tensor x = NULL, y = NULL, L = NULL, g = NULL;
    NX_OK_(nx_tensor_full(&x, s3, 1, 1.5, dts[k], CPU, NULL));
    NX_OK_(nx_tensor_set_requires_grad(x, true));
    NX_OK_(nx_mul(&y, x, x, NULL));
    L = t_sum_all(y);
    assert_int_equal(tensor_dtype(L), dts[k]);
    /* an output gradient of another dtype is converted to the root's */
    NX_OK_(nx_tensor_full(&g, NULL, 0, 2.0, dts[k] == NX_F64 ? NX_F32 : NX_F64, CPU, NULL));
    NX_OK_(nx_backward(L, g, NULL, NULL));
    nx_tensor gx = t_grad(x);
    if (tensor_dtype(gx) != dts[k])
      fail_msg("the gradient of a %s leaf has dtype %s", nx_dtype_name(dts[k]), nx_dtype_name(tensor_dtype(gx)));
    const double want[3] = {6, 6, 6}; /* 2 * 2x at x = 1.5 */
    assert_tensor_close(gx, want, 3, 0, 0);
    nx_tensor ts[] = {x, y, L, g, gx};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; ++i) nx_tensor_free(ts[i]);
  }
}

/* ---------------------------------------------------------------- threads */
/* Different threads may use different tensors freely: each thread trains its own copy of a
 * small model and must get exactly the single-threaded gradients. */
struct worker {
  int iterations;
  double grad[8];
  int failures;
};
static void mlp_grad(double* out) {
  const int64_t xs[2] = {2, 3}, ws[2] = {3, 4};
  const double xv[6] = {0.5, -1, 2, 0.25, 0.75, -0.5};
  const double wv[12] = {0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8, 0.9, 1.0, -1.1, 1.2};
  nx_tensor x = make_tensor(xv, xs, 2, NX_F64), w = t_requiring_grad(make_tensor(wv, ws, 2, NX_F64));
  nx_tensor h = NULL, t = NULL, L = NULL, g = NULL;
  nx_matmul(&h, x, w, NULL);
  nx_tanh(&t, h, NULL);
  nx_sum(&L, t, NULL, 0, false, NULL);
  nx_backward(L, NULL, NULL, NULL);
  nx_tensor_grad(&g, w);
  double all[12] = {0};
  if (g) nx_tensor_copy_to_host(g, all, sizeof all, NULL);
  memcpy(out, all, 8 * sizeof(double));
  nx_tensor ts[] = {x, w, h, t, L, g};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; ++i) nx_tensor_free(ts[i]);
}
static void* worker_main(void* arg) {
  struct worker* w = arg;
  for (int i = 0; i < w->iterations; ++i) {
    double g[8];
    mlp_grad(g);
    if (memcmp(g, w->grad, sizeof g)) w->failures++;
  }
  return NULL;
}
static void test_threads_use_their_own_tensors(void** state) {
  (void)state;
  double ref[8];
  mlp_grad(ref);
  struct worker ws[4];
  pthread_t th[4];
  for (int i = 0; i < 4; ++i) {
    ws[i].iterations = 300;
    ws[i].failures = 0;
    memcpy(ws[i].grad, ref, sizeof ref);
    assert_int_equal(pthread_create(&th[i], NULL, worker_main, &ws[i]), 0);
  }
  for (int i = 0; i < 4; ++i) assert_int_equal(pthread_join(th[i], NULL), 0);
  for (int i = 0; i < 4; ++i) assert_int_equal(ws[i].failures, 0);
  assert_true(fabs(ref[0]) > 0);
}

/* ---------------------------------------------------------------- memory over a long loop */
static void test_training_loop_keeps_live_count_flat(void** state) {
  (void)state;
  const int64_t s4[1] = {4};
  const float xv[4] = {0.5f, -1.0f, 0.25f, 2.0f}, w0[4] = {0, 0, 0, 0};
  const double target = 3.0, lr = 0.05;
  nx_tensor x = make_tensor(xv, s4, 1, NX_F32), w = t_requiring_grad(make_tensor(w0, s4, 1, NX_F32));
  int64_t live0 = nx_live_handle_count(NX_HANDLE_TENSOR);
  double loss = 0;
  for (int step = 0; step < 10000; ++step) {
    if (nx_live_handle_count(NX_HANDLE_TENSOR) != live0)
      fail_msg("step %d: %lld live tensor handles, %lld at the start", step, (long long)nx_live_handle_count(NX_HANDLE_TENSOR),
               (long long)live0);
    nx_tensor y = NULL, s = NULL, d = NULL, l = NULL, g = NULL, upd = NULL;
    NX_OK_(nx_mul(&y, w, x, NULL));
    NX_OK_(nx_sum(&s, y, NULL, 0, false, NULL));
    NX_OK_(nx_add_scalar(&d, s, -target, NULL));
    NX_OK_(nx_mul(&l, d, d, NULL));
    NX_OK_(nx_backward(l, NULL, NULL, NULL));
    NX_OK_(nx_tensor_grad(&g, w));
    nx_autograd_set_enabled(false);
    NX_OK_(nx_mul_scalar(&upd, g, -lr, NULL));
    NX_OK_(nx_add_(w, upd, NULL));
    nx_autograd_set_enabled(true);
    NX_OK_(nx_tensor_zero_grad(w));
    if (step == 9999) loss = scalar_of(l);
    nx_tensor_free(y);
    nx_tensor_free(s);
    nx_tensor_free(d);
    nx_tensor_free(l);
    nx_tensor_free(g);
    nx_tensor_free(upd);
  }
  assert_int_equal(nx_live_handle_count(NX_HANDLE_TENSOR), live0);
  /* the loop did train: w . x reaches the target */
  assert_true(loss < 1e-8);
  float wv[4];
  NX_OK_(nx_tensor_copy_to_host(w, wv, sizeof wv, NULL));
  double dot = 0;
  for (int i = 0; i < 4; ++i) dot += (double)wv[i] * xv[i];
  assert_true(fabs(dot - target) < 1e-4);
  nx_tensor_free(x);
  nx_tensor_free(w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      NX_TEST(test_backward_elementwise_broadcast),
      NX_TEST(test_backward_matmul_and_views),
      NX_TEST(test_backward_cross_entropy),
      NX_TEST(test_gradient_accumulation),
      NX_TEST(test_retain_graph),
      NX_TEST(test_autograd_grad),
      NX_TEST(test_no_grad_mode),
      NX_TEST(test_detach),
      NX_TEST(test_set_requires_grad_errors),
      NX_TEST(test_in_place_version_counter),
      NX_TEST(test_backward_checked),
      NX_TEST(test_autocast_scopes),
      NX_TEST(test_graph_object),
      NX_TEST(test_jvp_against_finite_differences),
      NX_TEST(test_double_backward_cubic),
      NX_TEST(test_double_backward_matmul),
      NX_TEST(test_checkpoint),
      NX_TEST(test_checkpoint_segment_failure),
      NX_TEST(test_gradient_dtype_matches_leaf),
      NX_TEST(test_threads_use_their_own_tensors),
      NX_TEST(test_training_loop_keeps_live_count_flat),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
