/* The 8-bit quantizer and the 8-bit KV cache (nexus.h: nx_quantize_8bit, nx_kv_cache_append_8bit,
 * nx_attention_decode_8bit), on the CPU and, when there is one, on the GPU, against oracles written
 * here: the quantizer's codes and scales from the formula of nexus.h (FP8 codes by the brute-force
 * search of fp8_ref.h), the append's rows at their positions with the rows around them untouched,
 * and decode attention against an f64 reference computed from the dequantized cache (lengths
 * differing per sequence, grouped-query heads, causal, ALiBi, more queries than a CUDA block takes,
 * head_dim 64, 128, 256), then every error path. */
#include "nx_test.h"

#include "fp8_ref.h"

static float rnd(void) { return (float)rng_uniform(-1.0, 1.0); }

static int device_count(void) { return 1 + (nx_cuda_device_count() > 0); }
static nx_device device_at(int i) { return i == 0 ? CPU : (nx_device){NX_CUDA, 0}; }

static nx_tensor make(const void* data, const int64_t* shape, size_t ndim, nx_dtype dtype, nx_device dev) {
  nx_tensor t;
  NX_OK_(nx_tensor_from_data(&t, data, shape, ndim, dtype, dev, NULL));
  return t;
}
static void host(nx_tensor t, void* out, size_t nbytes) { NX_OK_(nx_tensor_copy_to_host(t, out, nbytes, NULL)); }
static int64_t numel(nx_tensor t) {
  int64_t n;
  NX_OK_(nx_tensor_numel(t, &n));
  return n;
}

static const char* dev_name(nx_device d) { return d.type == NX_CPU ? "cpu" : "cuda"; }
static const Fp8* fp8_of(nx_dtype d) { return d == NX_F8E4M3 ? &E4M3 : &E5M2; }
static double qmax_of(nx_dtype d) { return d == NX_I8 ? 127.0 : fp8_of(d)->max_finite; }
static double code_value(uint8_t c, nx_dtype d) { return d == NX_I8 ? (double)(int8_t)c : ref_decode(fp8_of(d), c); }

/* nexus.h's quantizer on one row, in f32 as it says: the scale and the codes. */
static float ref_row(const float* x, int64_t n, nx_dtype d, uint8_t* codes) {
  float absmax = 0.f;
  for (int64_t c = 0; c < n; ++c) absmax = fmaxf(absmax, fabsf(x[c]));
  float s = absmax / (float)qmax_of(d);
  if (!(s > 0.f)) s = 1.f;
  for (int64_t c = 0; c < n; ++c) {
    const float q = x[c] / s;
    if (d != NX_I8) {
      codes[c] = ref_encode(fp8_of(d), (double)q);
    } else {
      const float r = isnan(q) ? 0.f : fminf(fmaxf(rintf(q), -127.f), 127.f);
      codes[c] = (uint8_t)(int8_t)r;
    }
  }
  return s;
}

static const nx_dtype kCodes[] = {NX_I8, NX_F8E4M3, NX_F8E5M2};

/* Codes and scales, bit for bit, per tensor, per (b, h) and per row, from f32 and bf16, including
 * an all-zero row, a NaN and outliers. */
static void test_quantize_matches_the_oracle(void** state) {
  (void)state;
  enum { B = 2, H = 3, T = 5, D = 16, N = B * H * T * D };
  float x[N];
  for (int i = 0; i < N; ++i) x[i] = rnd() * (i % 37 == 0 ? 40.f : 1.f);
  for (int i = 0; i < D; ++i) x[2 * D + i] = 0.f; /* row 2: all zero */
  x[5 * D + 3] = NAN;                              /* a NaN in row 5 */
  const int64_t shape[] = {B, H, T, D};
  for (int dev = 0; dev < device_count(); ++dev) {
    for (int src = 0; src < 2; ++src) {
      nx_tensor xf = make(x, shape, 4, NX_F32, device_at(dev)), xs = xf;
      if (src == 1) NX_OK_(nx_cast(&xs, xf, NX_BF16, NULL));
      float xv[N]; /* the values the quantizer sees */
      nx_tensor back;
      NX_OK_(nx_cast(&back, xs, NX_F32, NULL));
      host(back, xv, sizeof xv);
      for (int k = 0; k < 3; ++k) {
        const int64_t keeps[] = {0, 2, 3};
        for (int kk = 0; kk < 3; ++kk) {
          nx_tensor q, s;
          NX_OK_(nx_quantize_8bit(&q, &s, xs, kCodes[k], keeps[kk], NULL));
          nx_dtype qd;
          NX_OK_(nx_tensor_dtype(q, &qd));
          assert_int_equal(qd, kCodes[k]);
          const int64_t rows = numel(s), cols = N / rows;
          assert_int_equal(rows, keeps[kk] == 0 ? 1 : keeps[kk] == 2 ? B * H : B * H * T);
          uint8_t got[N], want[N];
          float gs[B * H * T];
          host(q, got, N), host(s, gs, (size_t)rows * 4);
          for (int64_t r = 0; r < rows; ++r) {
            const float ws = ref_row(xv + r * cols, cols, kCodes[k], want + r * cols);
            if (gs[r] != ws)
              fail_msg("%s %s keep %lld row %lld: scale %.9g, want %.9g", dev_name(device_at(dev)),
                       nx_dtype_name(kCodes[k]), (long long)keeps[kk], (long long)r, gs[r], ws);
          }
          for (int i = 0; i < N; ++i)
            if (got[i] != want[i])
              fail_msg("%s %s keep %lld: element %d (x %g) gave 0x%02x, want 0x%02x",
                       dev_name(device_at(dev)), nx_dtype_name(kCodes[k]), (long long)keeps[kk], i,
                       (double)xv[i], got[i], want[i]);
          nx_tensor_free(q), nx_tensor_free(s);
        }
      }
      if (src == 1) nx_tensor_free(xs);
      nx_tensor_free(xf), nx_tensor_free(back);
    }
  }
}

/* Rows land at pos[b] + t; rows before, between and after keep their bytes; rows past Tmax and
 * before 0 are dropped. */
static void test_append_writes_rows_at_their_positions(void** state) {
  (void)state;
  enum { B = 2, H = 2, TMAX = 10, T = 3, D = 16 };
  float x[B * H * T * D];
  for (int i = 0; i < B * H * T * D; ++i) x[i] = rnd() * 3.f;
  const int64_t cshape[] = {B, H, TMAX, D}, sshape[] = {B, H, TMAX}, xshape[] = {B, H, T, D}, pshape[] = {B};
  const int32_t pos[B] = {-1, 8}; /* sequence 0: row -1 dropped, rows 0, 1; sequence 1: rows 8, 9, row 10 dropped */
  for (int dev = 0; dev < device_count(); ++dev) {
    for (int k = 0; k < 3; ++k) {
      nx_tensor cache, scale, xt = make(x, xshape, 4, NX_F32, device_at(dev)),
                              pt = make(pos, pshape, 1, NX_I32, device_at(dev));
      NX_OK_(nx_tensor_full(&cache, cshape, 4, 0.0, kCodes[k], device_at(dev), NULL));
      NX_OK_(nx_tensor_full(&scale, sshape, 3, -7.0, NX_F32, device_at(dev), NULL));
      NX_OK_(nx_kv_cache_append_8bit(cache, scale, xt, pt, NULL));
      uint8_t got[B * H * TMAX * D], row[D];
      float gs[B * H * TMAX];
      host(cache, got, sizeof got), host(scale, gs, sizeof gs);
      for (int b = 0; b < B; ++b)
        for (int h = 0; h < H; ++h)
          for (int r = 0; r < TMAX; ++r) {
            const int t = r - pos[b], at = (b * H + h) * TMAX + r;
            if (t >= 0 && t < T) {
              const float ws = ref_row(x + ((b * H + h) * T + t) * D, D, kCodes[k], row);
              assert_true(gs[at] == ws);
              assert_memory_equal(got + at * D, row, D);
            } else {
              assert_true(gs[at] == -7.f);
              for (int c = 0; c < D; ++c) assert_int_equal(got[at * D + c], 0);
            }
          }
      nx_tensor_free(cache), nx_tensor_free(scale), nx_tensor_free(xt), nx_tensor_free(pt);
    }
  }
}

typedef struct {
  int64_t b, h, hkv, tq, tmax, d;
  int32_t len[8];
  bool causal, alibi;
  nx_dtype code, qdtype;
} DecodeCase;

/* One decode case: cache from nx_quantize_8bit, attention against the f64 reference of the
 * dequantized cache; the error is max |got - ref| over max |ref|. */
static void run_decode_case(const DecodeCase* c, nx_device dev) {
  const int64_t qn = c->b * c->h * c->tq * c->d, kn = c->b * c->hkv * c->tmax * c->d, rows = c->b * c->hkv * c->tmax;
  float* q = malloc(sizeof(float) * (size_t)qn);
  float* kv[2] = {malloc(sizeof(float) * (size_t)kn), malloc(sizeof(float) * (size_t)kn)};
  for (int64_t i = 0; i < qn; ++i) q[i] = rnd() * 2.f;
  for (int w = 0; w < 2; ++w)
    for (int64_t i = 0; i < kn; ++i) kv[w][i] = rnd() * ((i / c->d) % 11 == 0 ? 6.f : 1.f); /* some loud rows */
  const int64_t qshape[] = {c->b, c->h, c->tq, c->d}, cshape[] = {c->b, c->hkv, c->tmax, c->d}, lshape[] = {c->b};
  nx_tensor q32 = make(q, qshape, 4, NX_F32, dev), qt = q32, lt = make(c->len, lshape, 1, NX_I32, dev);
  if (c->qdtype != NX_F32) NX_OK_(nx_cast(&qt, q32, c->qdtype, NULL));
  nx_tensor back;
  NX_OK_(nx_cast(&back, qt, NX_F32, NULL));
  host(back, q, sizeof(float) * (size_t)qn); /* the reference reads the rounded q */
  nx_tensor codes[2], scales[2];
  uint8_t* hc[2];
  float* hs[2];
  for (int w = 0; w < 2; ++w) {
    nx_tensor src = make(kv[w], cshape, 4, NX_F32, dev);
    NX_OK_(nx_quantize_8bit(&codes[w], &scales[w], src, c->code, 3, NULL));
    hc[w] = malloc((size_t)kn), hs[w] = malloc(sizeof(float) * (size_t)rows);
    host(codes[w], hc[w], (size_t)kn), host(scales[w], hs[w], sizeof(float) * (size_t)rows);
    nx_tensor_free(src);
  }
  nx_tensor out;
  NX_OK_(nx_attention_decode_8bit(&out, qt, codes[0], scales[0], codes[1], scales[1], lt, c->causal, c->alibi, 0.0,
                                  NULL));
  nx_dtype od;
  NX_OK_(nx_tensor_dtype(out, &od));
  assert_int_equal(od, c->qdtype);
  nx_tensor out32;
  NX_OK_(nx_cast(&out32, out, NX_F32, NULL));
  float* got = malloc(sizeof(float) * (size_t)qn);
  host(out32, got, sizeof(float) * (size_t)qn);
  double* sc = malloc(sizeof(double) * (size_t)c->tmax);
  double worst = 0, ref_max = 0;
  const double scale = 1.0 / sqrt((double)c->d);
  for (int64_t b = 0; b < c->b; ++b) {
    const int64_t n = c->len[b] < 0 ? 0 : (c->len[b] > c->tmax ? c->tmax : c->len[b]);
    for (int64_t h = 0; h < c->h; ++h) {
      const int64_t row0 = (b * c->hkv + h / (c->h / c->hkv)) * c->tmax;
      const double slope = pow(2.0, -8.0 / (double)c->h * (double)(h + 1)); /* c->h a power of two */
      for (int64_t i = 0; i < c->tq; ++i) {
        const int64_t qpos = n - c->tq + i;
        const float* qr = q + ((b * c->h + h) * c->tq + i) * c->d;
        double m = -INFINITY, l = 0;
        for (int64_t j = 0; j < n; ++j) {
          sc[j] = -INFINITY;
          if (c->causal && j > qpos) continue;
          double dot = 0;
          for (int64_t x = 0; x < c->d; ++x)
            dot += (double)qr[x] * code_value(hc[0][(row0 + j) * c->d + x], c->code) * (double)hs[0][row0 + j];
          sc[j] = dot * scale - (c->alibi ? slope * (double)(qpos - j) : 0.0);
          if (sc[j] > m) m = sc[j];
        }
        for (int64_t x = 0; x < c->d; ++x) {
          double acc = 0;
          l = 0;
          for (int64_t j = 0; j < n; ++j) {
            if (sc[j] == -INFINITY) continue;
            const double p = exp(sc[j] - m);
            l += p;
            acc += p * code_value(hc[1][(row0 + j) * c->d + x], c->code) * (double)hs[1][row0 + j];
          }
          const double ref = l > 0 ? acc / l : 0.0;
          const double g = got[((b * c->h + h) * c->tq + i) * c->d + x];
          if (fabs(ref) > ref_max) ref_max = fabs(ref);
          if (!(fabs(g - ref) <= worst)) worst = fabs(g - ref); /* NaN propagates as a failure */
        }
      }
    }
  }
  const double rel = worst / (ref_max > 0 ? ref_max : 1.0), tol = c->qdtype == NX_F32 ? 2e-5 : 1e-2;
  if (!(rel <= tol))
    fail_msg("%s %s q %s b%lld h%lld/%lld tq %lld tmax %lld d %lld causal %d alibi %d: error %.3g of max %.3g (tol %.1g)",
             dev_name(dev), nx_dtype_name(c->code), nx_dtype_name(c->qdtype), (long long)c->b,
             (long long)c->h, (long long)c->hkv, (long long)c->tq, (long long)c->tmax, (long long)c->d, c->causal,
             c->alibi, rel, ref_max, tol);
  for (int w = 0; w < 2; ++w) nx_tensor_free(codes[w]), nx_tensor_free(scales[w]), free(hc[w]), free(hs[w]), free(kv[w]);
  if (qt != q32) nx_tensor_free(qt);
  nx_tensor_free(q32), nx_tensor_free(lt), nx_tensor_free(back), nx_tensor_free(out), nx_tensor_free(out32);
  free(q), free(got), free(sc);
}

static void test_decode_matches_the_f64_reference(void** state) {
  (void)state;
  const DecodeCase cases[] = {
      /* b, h, hkv, tq, tmax, d, lengths, causal, alibi, code, q dtype */
      {2, 4, 2, 1, 40, 64, {37, 12}, false, false, NX_I8, NX_F32},
      {2, 4, 2, 3, 40, 64, {37, 12}, true, false, NX_I8, NX_F32},
      {2, 4, 2, 6, 40, 64, {40, 5}, true, true, NX_I8, NX_F32}, /* 6 queries: two CUDA launches */
      {2, 4, 4, 2, 40, 64, {0, 40}, false, true, NX_F8E4M3, NX_F32}, /* an empty sequence: zeros */
      {2, 4, 1, 1, 40, 64, {33, 99}, true, false, NX_F8E5M2, NX_F32}, /* a length past Tmax: clamped */
      {2, 4, 2, 1, 40, 64, {37, 12}, false, false, NX_I8, NX_BF16},
      {2, 4, 2, 2, 40, 64, {37, 3}, true, false, NX_F8E4M3, NX_F16}, /* Tq > length: early queries see nothing */
      {2, 8, 2, 1, 3000, 128, {2999, 1500}, false, false, NX_I8, NX_BF16}, /* many splits, the unrolled loop */
      {2, 8, 2, 1, 3000, 128, {2999, 1500}, true, true, NX_F8E4M3, NX_F32},
      {1, 4, 2, 4, 700, 256, {700, 0}, true, false, NX_I8, NX_F32},
      {1, 4, 2, 2, 700, 256, {650, 0}, false, false, NX_F8E5M2, NX_BF16},
      /* 256 (batch, head) pairs: on a GPU of up to 134 SMs one block per pair writes the output
       * rows itself, no merge kernel (decode_pairs_fill_gpu) */
      {8, 32, 8, 1, 600, 128, {600, 590, 0, 301, 600, 17, 599, 450}, true, false, NX_I8, NX_BF16},
      {8, 32, 8, 6, 300, 64, {300, 2, 299, 150, 0, 300, 64, 7}, true, true, NX_F8E4M3, NX_F16},
  };
  for (int dev = 0; dev < device_count(); ++dev)
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
      run_decode_case(&cases[i], device_at(dev));
}

static void test_errors_name_the_call_and_the_values(void** state) {
  (void)state;
  const int64_t qs[] = {1, 2, 1, 64}, cs[] = {1, 1, 8, 64}, ss[] = {1, 1, 8}, ls[] = {1}, bad_cs[] = {1, 1, 8, 32};
  nx_tensor q, k, ks, lens, kf, bad_k, out = NULL, s = NULL;
  NX_OK_(nx_tensor_full(&q, qs, 4, 0.5, NX_F32, CPU, NULL));
  NX_OK_(nx_tensor_full(&k, cs, 4, 1.0, NX_I8, CPU, NULL));
  NX_OK_(nx_tensor_full(&ks, ss, 3, 1.0, NX_F32, CPU, NULL));
  NX_OK_(nx_tensor_full(&lens, ls, 1, 8.0, NX_I32, CPU, NULL));
  NX_OK_(nx_tensor_full(&kf, cs, 4, 1.0, NX_F32, CPU, NULL));
  NX_OK_(nx_tensor_full(&bad_k, bad_cs, 4, 1.0, NX_I8, CPU, NULL));
  EXPECT_ERR(NX_ERR_DTYPE, nx_attention_decode_8bit(&out, q, kf, ks, kf, ks, lens, false, false, 0, NULL),
             "nx_attention_decode_8bit", "k_cache", "f32");
  EXPECT_ERR(NX_ERR_DTYPE, nx_attention_decode_8bit(&out, q, k, ks, k, ks, ks, false, false, 0, NULL),
             "nx_attention_decode_8bit", "lengths", "i32");
  EXPECT_ERR(NX_ERR_SHAPE, nx_attention_decode_8bit(&out, q, bad_k, ks, bad_k, ks, lens, false, false, 0, NULL),
             "nx_attention_decode_8bit", "[1,1,8,32]");
  EXPECT_ERR(NX_ERR_SHAPE, nx_attention_decode_8bit(&out, q, k, q, k, ks, lens, false, false, 0, NULL),
             "nx_attention_decode_8bit", "k_scale", "[1,1,8]");
  nx_tensor kt;
  NX_OK_(nx_transpose(&kt, k, 2, 3, NULL)); /* [1, 1, 64, 8]: wrong shape first */
  nx_tensor k2, k2t;
  const int64_t sq[] = {1, 1, 64, 64}, sqs[] = {1, 1, 64};
  NX_OK_(nx_tensor_full(&k2, sq, 4, 1.0, NX_I8, CPU, NULL));
  NX_OK_(nx_transpose(&k2t, k2, 2, 3, NULL));
  nx_tensor ks2;
  NX_OK_(nx_tensor_full(&ks2, sqs, 3, 1.0, NX_F32, CPU, NULL));
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_attention_decode_8bit(&out, q, k2t, ks2, k2, ks2, lens, false, false, 0, NULL),
             "nx_attention_decode_8bit", "contiguous");
  NX_OK_(nx_tensor_set_requires_grad(q, true));
  EXPECT_ERR(NX_ERR_NOT_IMPLEMENTED, nx_attention_decode_8bit(&out, q, k, ks, k, ks, lens, false, false, 0, NULL),
             "nx_attention_decode_8bit", "requires grad");
  EXPECT_ERR(NX_ERR_NOT_IMPLEMENTED, nx_quantize_8bit(&out, &s, q, NX_I8, 1, NULL), "nx_quantize_8bit",
             "requires grad");
  NX_OK_(nx_tensor_set_requires_grad(q, false));
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_quantize_8bit(&out, &s, q, NX_I8, 5, NULL), "nx_quantize_8bit",
             "keep_dims", "[0, 4]", "5");
  EXPECT_ERR(NX_ERR_DTYPE, nx_quantize_8bit(&out, &s, q, NX_BF16, 1, NULL), "nx_quantize_8bit", "bf16");
  EXPECT_ERR(NX_ERR_DTYPE, nx_quantize_8bit(&out, &s, k, NX_I8, 1, NULL), "nx_quantize_8bit", "i8");
  assert_null(out);
  assert_null(s);
  /* append: x of another head_dim, pos of another dtype, a cache that is not 8-bit */
  const int64_t xs[] = {1, 1, 2, 32}, xs_ok[] = {1, 1, 2, 64};
  nx_tensor x_bad, x_ok;
  NX_OK_(nx_tensor_full(&x_bad, xs, 4, 1.0, NX_F32, CPU, NULL));
  NX_OK_(nx_tensor_full(&x_ok, xs_ok, 4, 1.0, NX_F32, CPU, NULL));
  nx_tensor pos64;
  NX_OK_(nx_tensor_full(&pos64, ls, 1, 0.0, NX_I64, CPU, NULL));
  EXPECT_ERR(NX_ERR_SHAPE, nx_kv_cache_append_8bit(k, ks, x_bad, lens, NULL), "nx_kv_cache_append_8bit", "x",
             "[1,1,2,32]");
  EXPECT_ERR(NX_ERR_DTYPE, nx_kv_cache_append_8bit(k, ks, x_ok, pos64, NULL), "nx_kv_cache_append_8bit", "pos", "i64");
  EXPECT_ERR(NX_ERR_DTYPE, nx_kv_cache_append_8bit(kf, ks, x_ok, lens, NULL), "nx_kv_cache_append_8bit", "cache",
             "f32");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_kv_cache_append_8bit(NULL, ks, x_ok, lens, NULL), "nx_kv_cache_append_8bit",
             "cache");
  if (nx_cuda_device_count() > 0) { /* CUDA takes head_dim 64, 128, 256 */
    const nx_device gpu = {NX_CUDA, 0};
    const int64_t q32s[] = {1, 1, 1, 32};
    nx_tensor gq, gk, gks, gl, q32;
    NX_OK_(nx_tensor_full(&q32, q32s, 4, 1.0, NX_F32, CPU, NULL));
    NX_OK_(nx_tensor_to(&gq, q32, gpu, NULL));
    NX_OK_(nx_tensor_to(&gk, bad_k, gpu, NULL));
    NX_OK_(nx_tensor_to(&gks, ks, gpu, NULL));
    NX_OK_(nx_tensor_to(&gl, lens, gpu, NULL));
    EXPECT_ERR(NX_ERR_NOT_IMPLEMENTED, nx_attention_decode_8bit(&out, gq, gk, gks, gk, gks, gl, false, false, 0, NULL),
               "nx_attention_decode_8bit", "head_dim", "32");
    EXPECT_ERR(NX_ERR_DEVICE, nx_attention_decode_8bit(&out, gq, gk, gks, gk, gks, lens, false, false, 0, NULL),
               "nx_attention_decode_8bit", "lengths", "cpu");
    nx_tensor_free(gq), nx_tensor_free(gk), nx_tensor_free(gks), nx_tensor_free(gl), nx_tensor_free(q32);
  }
  nx_tensor_free(q), nx_tensor_free(k), nx_tensor_free(ks), nx_tensor_free(lens), nx_tensor_free(kf);
  nx_tensor_free(bad_k), nx_tensor_free(kt), nx_tensor_free(k2), nx_tensor_free(k2t), nx_tensor_free(ks2);
  nx_tensor_free(x_bad), nx_tensor_free(x_ok), nx_tensor_free(pos64);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_quantize_matches_the_oracle),
      cmocka_unit_test(test_append_writes_rows_at_their_positions),
      cmocka_unit_test(test_decode_matches_the_f64_reference),
      cmocka_unit_test(test_errors_name_the_call_and_the_values),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
