/* Integer semantics against PyTorch, through the C API on the CPU: the expected values are
 * literals that torch 1.13 gives (each with the torch expression in a comment).
 *  - integer -> floating casts round as torch's: to f32/f64 once, directly (int64 -> f32 through a
 *    double rounded twice: 2^60 + 2^36 + 1 gave 2^60, torch gives 2^60 + 2^37), to f16/bf16
 *    through f32 (c10::Half and c10::BFloat16 are made from a float);
 *  - integer pow is exact and wraps modulo 2^bits (3^40 in int64 saturated to INT64_MAX through a
 *    double pow; 3^39 lost its low bits);
 *  - int64 comparisons and argmax compare the integers, not doubles (2^53 == 2^53 + 1 was true).
 * Integer index_add / scatter_add (internal, no C entry point) are in tests/cpp/test_integer_semantics.cpp.
 * In the comments, M = 2**63 - 1 and m = -2**63. */
#include "nx_test.h"

static nx_tensor from_i64(const int64_t* v, int64_t n) {
  return make_tensor(v, &n, 1, NX_I64);
}
static nx_tensor from_i32(const int32_t* v, int64_t n) {
  return make_tensor(v, &n, 1, NX_I32);
}
/* x cast to dt, its bytes copied to out (nbytes exactly). */
static void cast_to_host(nx_tensor x, nx_dtype dt, void* out, size_t nbytes) {
  nx_tensor y = NULL;
  NX_OK_(nx_cast(&y, x, dt, NULL));
  NX_OK_(nx_tensor_copy_to_host(y, out, nbytes, NULL));
  nx_tensor_free(y);
}
static void assert_bits16(const uint16_t* got, const uint16_t* want, int n, const char* what) {
  for (int i = 0; i < n; ++i)
    if (got[i] != want[i]) {
      print_error("%s: element %d is 0x%04x, expected 0x%04x\n", what, i, got[i], want[i]);
      fail();
    }
}
static void assert_i64s(const int64_t* got, const int64_t* want, int n, const char* what) {
  for (int i = 0; i < n; ++i)
    if (got[i] != want[i]) {
      print_error("%s: element %d is %lld, expected %lld\n", what, i, (long long)got[i], (long long)want[i]);
      fail();
    }
}

#define P(k) ((int64_t)1 << (k))

/* ---------------------------------------------------------------- int64 -> f32 / f64 / f16 / bf16 */
/* v = torch.tensor([2**60+2**36+1, -(2**60+2**36+1), 2**60+2**52+2**36+1, 2**53+2**29+1, 2**53+1,
 *                   2**24+2**16+1, 2**63-2**39-1, M, m, 65519, 65520, -65520]) */
#define N64 12
static const int64_t kI64[N64] = {P(60) + P(36) + 1, -(P(60) + P(36) + 1), P(60) + P(52) + P(36) + 1,
                                  P(53) + P(29) + 1, P(53) + 1, P(24) + P(16) + 1, INT64_MAX - P(39),
                                  INT64_MAX, INT64_MIN, 65519, 65520, -65520};

static void test_cast_i64_to_f32(void** state) {
  (void)state;
  nx_tensor x = from_i64(kI64, N64);
  float got[N64];
  cast_to_host(x, NX_F32, got, sizeof got);
  /* v.to(torch.float32): one rounding (through a double, the first four gave 2^60, -2^60,
   * 2^60 + 2^52 and 2^53) */
  const float want[N64] = {1152921642045800448.0f, -1152921642045800448.0f, 1157425241673170944.0f,
                           9007200328482816.0f, 9007199254740992.0f, 16842752.0f, 9223371487098961920.0f,
                           9223372036854775808.0f, -9223372036854775808.0f, 65519.0f, 65520.0f, -65520.0f};
  for (int i = 0; i < N64; ++i)
    if (got[i] != want[i]) {
      print_error("i64 -> f32: element %d (%lld) is %.9g, expected %.9g\n", i, (long long)kI64[i], got[i], want[i]);
      fail();
    }
  nx_tensor_free(x);
}

static void test_cast_i64_to_f64(void** state) {
  (void)state;
  nx_tensor x = from_i64(kI64, N64);
  double got[N64];
  cast_to_host(x, NX_F64, got, sizeof got);
  /* v.to(torch.float64) */
  const double want[N64] = {1152921573326323712.0, -1152921573326323712.0, 1157425172953694208.0,
                            9007199791611904.0, 9007199254740992.0, 16842753.0, 9223371487098961920.0,
                            9223372036854775808.0, -9223372036854775808.0, 65519.0, 65520.0, -65520.0};
  assert_close(got, want, N64, 0.0, 0.0);
  nx_tensor_free(x);
}

static void test_cast_i64_to_half(void** state) {
  (void)state;
  nx_tensor x = from_i64(kI64, N64);
  uint16_t f16[N64], bf16[N64];
  cast_to_host(x, NX_F16, f16, sizeof f16);
  cast_to_host(x, NX_BF16, bf16, sizeof bf16);
  /* v.to(torch.float16).view(torch.int16) & 0xffff */
  const uint16_t want16[N64] = {0x7c00, 0xfc00, 0x7c00, 0x7c00, 0x7c00, 0x7c00,
                                0x7c00, 0x7c00, 0xfc00, 0x7bff, 0x7c00, 0xfc00};
  /* v.to(torch.bfloat16).view(torch.int16) & 0xffff: through f32, so 2**60+2**52+2**36+1 is
   * 2^60 + 2^53 (0x5d81; through a double it rounded to the tie 2^60 + 2^52, then to 2^60) and
   * 2**24+2**16+1 is 2^24 (its f32 value 2^24 + 2^16 is a bf16 tie) */
  const uint16_t want_bf16[N64] = {0x5d80, 0xdd80, 0x5d81, 0x5a00, 0x5a00, 0x4b80,
                                   0x5f00, 0x5f00, 0xdf00, 0x4780, 0x4780, 0xc780};
  assert_bits16(f16, want16, N64, "i64 -> f16");
  assert_bits16(bf16, want_bf16, N64, "i64 -> bf16");
  nx_tensor_free(x);
}

/* ---------------------------------------------------------------- int32 -> f32 / f64 / f16 / bf16 */
/* w = torch.tensor([2**24+1, 2**24+3, 2**31-1, -2**31, 2**30+65, 2**24+2**16+1, 2**25+2**17+2**16+1,
 *                   65519, 65520, -65520], dtype=torch.int32) */
#define N32 10
static const int32_t kI32[N32] = {16777217, 16777219, INT32_MAX, INT32_MIN, 1073741889, 16842753, 33751041,
                                  65519, 65520, -65520};

static void test_cast_i32_to_floating(void** state) {
  (void)state;
  nx_tensor x = from_i32(kI32, N32);
  float f32[N32];
  double f64[N32];
  uint16_t f16[N32], bf16[N32];
  cast_to_host(x, NX_F32, f32, sizeof f32);
  cast_to_host(x, NX_F64, f64, sizeof f64);
  cast_to_host(x, NX_F16, f16, sizeof f16);
  cast_to_host(x, NX_BF16, bf16, sizeof bf16);
  /* w.to(torch.float32) */
  const float want32[N32] = {16777216.0f, 16777220.0f, 2147483648.0f, -2147483648.0f, 1073741952.0f,
                             16842752.0f, 33751040.0f, 65519.0f, 65520.0f, -65520.0f};
  for (int i = 0; i < N32; ++i)
    if (f32[i] != want32[i]) {
      print_error("i32 -> f32: element %d (%d) is %.9g, expected %.9g\n", i, kI32[i], f32[i], want32[i]);
      fail();
    }
  /* w.to(torch.float64): exact */
  for (int i = 0; i < N32; ++i) assert_true(f64[i] == (double)kI32[i]);
  /* w.to(torch.float16).view(torch.int16) & 0xffff */
  const uint16_t want16[N32] = {0x7c00, 0x7c00, 0x7c00, 0xfc00, 0x7c00, 0x7c00, 0x7c00, 0x7bff, 0x7c00, 0xfc00};
  /* w.to(torch.bfloat16).view(torch.int16) & 0xffff (2**24+2**16+1 -> 2^24 through f32's tie) */
  const uint16_t want_bf16[N32] = {0x4b80, 0x4b80, 0x4f00, 0xcf00, 0x4e80, 0x4b80, 0x4c01, 0x4780, 0x4780, 0xc780};
  assert_bits16(f16, want16, N32, "i32 -> f16");
  assert_bits16(bf16, want_bf16, N32, "i32 -> bf16");
  nx_tensor_free(x);
}

/* ---------------------------------------------------------------- integer pow */
static void test_int64_pow_scalar_wraps(void** state) {
  (void)state;
  const int64_t v[5] = {3, -3, 2, 7, 3};
  nx_tensor x = from_i64(v, 5), y = NULL, z = NULL;
  NX_OK_(nx_pow_scalar(&y, x, 40.0, NULL));
  assert_int_equal(tensor_dtype(y), NX_I64);
  int64_t got[5];
  NX_OK_(nx_tensor_copy_to_host(y, got, sizeof got, NULL));
  /* (torch.tensor([3, -3, 2, 7, 3]) ** 40).tolist() (a double pow saturated all but 2^40 to M) */
  const int64_t want[5] = {-6289078614652622815LL, -6289078614652622815LL, 1099511627776LL,
                           -6212923193149656639LL, -6289078614652622815LL};
  assert_i64s(got, want, 5, "int64 ** 40");
  NX_OK_(nx_pow_scalar(&z, x, 39.0, NULL));
  NX_OK_(nx_tensor_copy_to_host(z, got, sizeof got, NULL));
  /* (torch.tensor([3]) ** 39).item() == 4052555153018976267 (a double pow gave ...256) */
  assert_true(got[0] == 4052555153018976267LL);
  nx_tensor_free(x); nx_tensor_free(y); nx_tensor_free(z);
}

static void test_int32_pow_wraps(void** state) {
  (void)state;
  const int32_t v[3] = {3, 5, -7}, e[3] = {21, 14, 13};
  nx_tensor x = from_i32(v, 3), ex = from_i32(e, 3), y = NULL, z = NULL;
  NX_OK_(nx_pow_scalar(&y, x, 21.0, NULL));
  NX_OK_(nx_pow(&z, x, ex, NULL));
  assert_int_equal(tensor_dtype(y), NX_I32);
  assert_int_equal(tensor_dtype(z), NX_I32);
  int32_t gy[3], gz[3];
  NX_OK_(nx_tensor_copy_to_host(y, gy, sizeof gy, NULL));
  NX_OK_(nx_tensor_copy_to_host(z, gz, sizeof gz, NULL));
  /* (torch.tensor([3, 5, -7], dtype=torch.int32) ** 21).tolist() */
  const int32_t wy[3] = {1870418611, 1299066613, -192061479};
  /* torch.tensor([3, 5, -7], dtype=torch.int32).pow(torch.tensor([21, 14, 13], dtype=torch.int32)).tolist() */
  const int32_t wz[3] = {1870418611, 1808548329, 1895237401};
  for (int i = 0; i < 3; ++i) {
    assert_int_equal(gy[i], wy[i]);
    assert_int_equal(gz[i], wz[i]);
  }
  nx_tensor_free(x); nx_tensor_free(ex); nx_tensor_free(y); nx_tensor_free(z);
}

static void test_int64_pow_tensor(void** state) {
  (void)state;
  const int64_t b[9] = {3, -3, 2, 7, 2, 1, -1, -1, 0}, e[9] = {40, 41, 64, 23, -1, -5, -3, -4, -2};
  nx_tensor x = from_i64(b, 9), ex = from_i64(e, 9), y = NULL;
  NX_OK_(nx_pow(&y, x, ex, NULL));
  assert_int_equal(tensor_dtype(y), NX_I64);
  int64_t got[9];
  NX_OK_(nx_tensor_copy_to_host(y, got, sizeof got, NULL));
  /* torch.pow(torch.tensor([3, -3, 2, 7]), torch.tensor([40, 41, 64, 23])).tolist();
   * torch.pow(torch.tensor([2, 1, -1, -1, 0]), torch.tensor([-1, -5, -3, -4, -2])).tolist() */
  const int64_t want[9] = {-6289078614652622815LL, 420491770248316829LL, 0, 8922003266371364727LL, 0, 1, -1, 1, 0};
  assert_i64s(got, want, 9, "int64 pow");
  nx_tensor_free(x); nx_tensor_free(ex); nx_tensor_free(y);
}

/* ---------------------------------------------------------------- int64 comparisons and argmax */
static void test_int64_comparisons_exact(void** state) {
  (void)state;
  /* a = torch.tensor([2**53, 2**53, M, m, -2**53-1]); b = torch.tensor([2**53+1, 2**53, M-1, m+1, -2**53]) */
  const int64_t av[5] = {P(53), P(53), INT64_MAX, INT64_MIN, -P(53) - 1};
  const int64_t bv[5] = {P(53) + 1, P(53), INT64_MAX - 1, INT64_MIN + 1, -P(53)};
  nx_tensor a = from_i64(av, 5), b = from_i64(bv, 5);
  typedef nx_status (*cmp_fn)(nx_tensor*, nx_tensor, nx_tensor, nx_stream);
  const cmp_fn fns[6] = {nx_eq, nx_ne, nx_lt, nx_le, nx_gt, nx_ge};
  const char* names[6] = {"eq", "ne", "lt", "le", "gt", "ge"};
  /* getattr(torch, op)(a, b).tolist() for op in eq, ne, lt, le, gt, ge */
  const bool want[6][5] = {{false, true, false, false, false}, {true, false, true, true, true},
                           {true, false, false, true, true},   {true, true, false, true, true},
                           {false, false, true, false, false}, {false, true, true, false, false}};
  for (int k = 0; k < 6; ++k) {
    nx_tensor r = NULL;
    NX_OK_(fns[k](&r, a, b, NULL));
    assert_int_equal(tensor_dtype(r), NX_BOOL);
    bool got[5];
    NX_OK_(nx_tensor_copy_to_host(r, got, sizeof got, NULL));
    for (int i = 0; i < 5; ++i)
      if (got[i] != want[k][i]) {
        print_error("%s element %d is %d, expected %d\n", names[k], i, got[i], want[k][i]);
        fail();
      }
    nx_tensor_free(r);
  }
  nx_tensor_free(a); nx_tensor_free(b);
}

static void test_int64_argmax_exact(void** state) {
  (void)state;
  const int64_t v1[3] = {P(53), P(53) + 1, P(53)}, v2[3] = {INT64_MAX - 1, INT64_MAX, INT64_MAX - 2};
  const int64_t v3[4] = {P(53) + 1, P(53) + 2, P(60) + 1, P(60)}, shape3[2] = {2, 2};
  nx_tensor x1 = from_i64(v1, 3), x2 = from_i64(v2, 3), x3 = make_tensor(v3, shape3, 2, NX_I64);
  nx_tensor r1 = NULL, r2 = NULL, r3 = NULL;
  NX_OK_(nx_argmax(&r1, x1, 0, false, NULL));
  NX_OK_(nx_argmax(&r2, x2, 0, false, NULL));
  NX_OK_(nx_argmax(&r3, x3, 1, false, NULL));
  int64_t g1 = -1, g2 = -1, g3[2] = {-1, -1};
  NX_OK_(nx_tensor_copy_to_host(r1, &g1, sizeof g1, NULL));
  NX_OK_(nx_tensor_copy_to_host(r2, &g2, sizeof g2, NULL));
  NX_OK_(nx_tensor_copy_to_host(r3, g3, sizeof g3, NULL));
  /* torch.argmax(torch.tensor([2**53, 2**53+1, 2**53])).item() == 1 (through doubles: 0) */
  assert_int_equal(g1, 1);
  /* torch.argmax(torch.tensor([M-1, M, M-2])).item() == 1 */
  assert_int_equal(g2, 1);
  /* torch.argmax(torch.tensor([[2**53+1, 2**53+2], [2**60+1, 2**60]]), 1).tolist() == [1, 0] */
  assert_int_equal(g3[0], 1);
  assert_int_equal(g3[1], 0);
  nx_tensor_free(x1); nx_tensor_free(x2); nx_tensor_free(x3);
  nx_tensor_free(r1); nx_tensor_free(r2); nx_tensor_free(r3);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      NX_TEST(test_cast_i64_to_f32),        NX_TEST(test_cast_i64_to_f64),
      NX_TEST(test_cast_i64_to_half),       NX_TEST(test_cast_i32_to_floating),
      NX_TEST(test_int64_pow_scalar_wraps), NX_TEST(test_int32_pow_wraps),
      NX_TEST(test_int64_pow_tensor),       NX_TEST(test_int64_comparisons_exact),
      NX_TEST(test_int64_argmax_exact),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
