/* The 8-bit storage dtypes (nexus.h: NX_I8, NX_F8E4M3, NX_F8E5M2). Oracles written here, apart
 * from the engine: FP8 codes decoded from their fields, and every cast into FP8 checked against a
 * brute-force search of the nearest finite code (ties to the even code, saturating past the
 * largest finite value), on every code's value, every midpoint between neighbours and values just
 * beside them, from f32 and from f64 sources. Also: I8 casts (truncate, wrap modulo 2^8), fills,
 * views and copies, every computing op refusing them by name, SafeTensors and DLPack round trips,
 * printing, and (with a GPU) moving them to CUDA and back. */
#define _GNU_SOURCE /* memmem */
#include "nx_test.h"

#include "fp8_ref.h"

static nx_tensor from(const void* data, int64_t n, nx_dtype dtype) {
  nx_tensor t;
  NX_OK_(nx_tensor_from_data(&t, data, &n, 1, dtype, CPU, NULL));
  return t;
}
static void bytes_of(nx_tensor t, void* out, size_t nbytes) { NX_OK_(nx_tensor_copy_to_host(t, out, nbytes, NULL)); }

/* Where cast() runs: the CPU, or (test_cuda_casts_match_the_cpus) the GPU. */
static nx_device g_cast_device = {NX_CPU, 0};

/* x (a 1-d CPU tensor) cast to dtype on g_cast_device, returned on the CPU. On a GPU the cast also
 * runs on a strided view (x broadcast to [n, 2], stride 0: the strided kernel), whose two columns
 * must equal the contiguous kernel's result byte for byte. */
static nx_tensor cast(nx_tensor x, nx_dtype dtype) {
  nx_tensor y;
  if (g_cast_device.type == NX_CPU) {
    NX_OK_(nx_cast(&y, x, dtype, NULL));
    return y;
  }
  int64_t n;
  NX_OK_(nx_tensor_numel(x, &n));
  nx_tensor xg, yg, col, wide, wide_cpu;
  NX_OK_(nx_tensor_to(&xg, x, g_cast_device, NULL));
  NX_OK_(nx_cast(&yg, xg, dtype, NULL));
  NX_OK_(nx_tensor_to(&y, yg, CPU, NULL));
  const int64_t col_shape[] = {n, 1}, wide_shape[] = {n, 2};
  NX_OK_(nx_reshape(&col, xg, col_shape, 2, NULL));
  NX_OK_(nx_expand(&wide, col, wide_shape, 2, NULL));
  nx_tensor wide_cast;
  NX_OK_(nx_cast(&wide_cast, wide, dtype, NULL));
  NX_OK_(nx_tensor_to(&wide_cpu, wide_cast, CPU, NULL));
  const size_t es = nx_dtype_size(dtype);
  unsigned char* a = malloc((size_t)n * es);
  unsigned char* b = malloc((size_t)n * 2 * es);
  bytes_of(y, a, (size_t)n * es);
  bytes_of(wide_cpu, b, (size_t)n * 2 * es);
  for (int64_t i = 0; i < n; ++i)
    for (int c = 0; c < 2; ++c)
      if (memcmp(a + i * es, b + (2 * i + c) * es, es))
        fail_msg("CUDA cast to %s: element %lld differs between the contiguous and the strided kernel",
                 nx_dtype_name(dtype), (long long)i);
  free(a), free(b);
  nx_tensor_free(xg), nx_tensor_free(yg), nx_tensor_free(col), nx_tensor_free(wide), nx_tensor_free(wide_cast);
  nx_tensor_free(wide_cpu);
  return y;
}

static void test_sizes_and_names(void** state) {
  (void)state;
  assert_int_equal(nx_dtype_size(NX_I8), 1);
  assert_int_equal(nx_dtype_size(NX_F8E4M3), 1);
  assert_int_equal(nx_dtype_size(NX_F8E5M2), 1);
  assert_string_equal(nx_dtype_name(NX_I8), "i8");
  assert_string_equal(nx_dtype_name(NX_F8E4M3), "f8e4m3");
  assert_string_equal(nx_dtype_name(NX_F8E5M2), "f8e5m2");
  assert_int_equal(nx_dtype_size((nx_dtype)10), 0);
}

/* Every code of both formats, cast to f32 and f64, against the decoded fields. */
static void test_every_code_decodes_exactly(void** state) {
  (void)state;
  const Fp8* formats[] = {&E4M3, &E5M2};
  for (int k = 0; k < 2; ++k) {
    uint8_t codes[256];
    for (int c = 0; c < 256; ++c) codes[c] = (uint8_t)c;
    nx_tensor t = from(codes, 256, formats[k]->dtype), f = cast(t, NX_F32), d = cast(t, NX_F64);
    float fv[256];
    double dv[256];
    bytes_of(f, fv, sizeof fv);
    bytes_of(d, dv, sizeof dv);
    for (int c = 0; c < 256; ++c) {
      const double want = ref_decode(formats[k], (uint8_t)c);
      if (isnan(want)) {
        assert_true(isnan(fv[c]) && isnan(dv[c]));
      } else {
        if ((double)fv[c] != want || dv[c] != want || !signbit(fv[c]) != !signbit(want))
          fail_msg("%s code 0x%02x: got %g / %g, want %g", formats[k]->name, c, (double)fv[c], dv[c], want);
      }
    }
    nx_tensor_free(t), nx_tensor_free(f), nx_tensor_free(d);
  }
}

/* The inputs of the encoding test: every finite code's value, each midpoint between neighbours
 * and the values one f32 ulp beside both, past the largest value, zeros, infinities, NaN, and
 * random magnitudes over the whole range (subnormals included). */
static size_t encode_inputs(const Fp8* f, double* x, size_t cap) {
  size_t n = 0;
  double values[128];
  int nv = 0;
  for (int c = 0; c < 0x80; ++c) {
    const double v = ref_decode(f, (uint8_t)c);
    if (!isnan(v) && !isinf(v)) values[nv++] = v;
  }
  for (int i = 0; i < nv && n + 8 < cap; ++i) {
    x[n++] = values[i], x[n++] = -values[i];
    if (i + 1 < nv) {
      const double mid = (values[i] + values[i + 1]) / 2;
      x[n++] = mid, x[n++] = -mid;
      x[n++] = nextafterf((float)mid, INFINITY), x[n++] = nextafterf((float)mid, 0.f);
    }
  }
  const double extra[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, f->max_finite * 1.03, -f->max_finite * 1.03, 1e30, -1e30,
                          f->max_finite + ldexp(1, (int)log2(f->max_finite) - f->man_bits - 1)};
  for (size_t i = 0; i < sizeof extra / sizeof extra[0]; ++i) x[n++] = extra[i];
  srand(7);
  while (n < cap) {
    const double m = (double)rand() / RAND_MAX;
    x[n++] = (rand() & 1 ? 1 : -1) * ldexp(m, (rand() % 40) - 20);
  }
  return n;
}

static void check_encode(const Fp8* f, nx_dtype source) {
  enum { N = 2048 };
  double x[N];
  const size_t n = encode_inputs(f, x, N);
  nx_tensor src;
  if (source == NX_F32) {
    float xf[N];
    for (size_t i = 0; i < n; ++i) xf[i] = (float)x[i], x[i] = xf[i];  /* the f32 value is the input */
    src = from(xf, (int64_t)n, NX_F32);
  } else {
    src = from(x, (int64_t)n, NX_F64);
  }
  nx_tensor q = cast(src, f->dtype);
  uint8_t got[N];
  bytes_of(q, got, n);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t want = ref_encode(f, x[i]);
    if (got[i] != want)
      fail_msg("%s from %s: %.17g gave 0x%02x, want 0x%02x", f->name, nx_dtype_name(source), x[i], got[i], want);
  }
  nx_tensor_free(src), nx_tensor_free(q);
}

static void test_casts_into_fp8_round_once_to_nearest_even_and_saturate(void** state) {
  (void)state;
  check_encode(&E4M3, NX_F32);
  check_encode(&E4M3, NX_F64);
  check_encode(&E5M2, NX_F32);
  check_encode(&E5M2, NX_F64);
  /* one rounding from f64: just above a midpoint rounds up, though its f32 rounding is the midpoint */
  const double above = 1.0 + 1.0 / 16 + ldexp(1, -40);  /* E4M3 between 1 and 1.125 */
  nx_tensor s = from(&above, 1, NX_F64), q = cast(s, NX_F8E4M3);
  uint8_t code;
  bytes_of(q, &code, 1);
  assert_int_equal(code, ref_encode(&E4M3, above));
  assert_int_equal(code, 0x39);  /* 1.125 */
  nx_tensor_free(s), nx_tensor_free(q);
}

static void test_int8_casts_truncate_and_wrap(void** state) {
  (void)state;
  const float x[] = {-300.7f, -129.f, -128.9f, -1.5f, -0.5f, 0.f, 0.5f, 127.9f, 128.f, 255.f, 256.f, NAN, INFINITY, -INFINITY};
  const int8_t want[] = {-44, 127, -128, -1, 0, 0, 0, 127, -128, -1, 0, 0, -1, 0};
  nx_tensor t = from(x, 14, NX_F32), q = cast(t, NX_I8);
  int8_t got[14];
  bytes_of(q, got, sizeof got);
  for (int i = 0; i < 14; ++i)
    if (got[i] != want[i]) fail_msg("i8 from f32 %g: got %d, want %d", (double)x[i], got[i], want[i]);
  int8_t all[256];
  for (int i = 0; i < 256; ++i) all[i] = (int8_t)(i - 128);
  nx_tensor a = from(all, 256, NX_I8), af = cast(a, NX_F32), ai = cast(a, NX_I64), ab = cast(a, NX_BOOL);
  float fv[256];
  int64_t iv[256];
  bool bv[256];
  bytes_of(af, fv, sizeof fv), bytes_of(ai, iv, sizeof iv), bytes_of(ab, bv, sizeof bv);
  for (int i = 0; i < 256; ++i) {
    assert_true(fv[i] == (float)(i - 128) && iv[i] == i - 128);
    assert_int_equal(bv[i], i != 128);
  }
  const int64_t wide[] = {300, -129, 1000000007};
  nx_tensor w = from(wide, 3, NX_I64), wq = cast(w, NX_I8);
  int8_t wg[3];
  bytes_of(wq, wg, 3);
  assert_int_equal(wg[0], 44), assert_int_equal(wg[1], 127), assert_int_equal(wg[2], (int8_t)(1000000007 % 256));
  nx_tensor_free(t), nx_tensor_free(q), nx_tensor_free(a), nx_tensor_free(af), nx_tensor_free(ai), nx_tensor_free(ab);
  nx_tensor_free(w), nx_tensor_free(wq);
}

static void test_fill_views_and_copies(void** state) {
  (void)state;
  const int64_t shape[2] = {3, 4};
  nx_tensor t;
  NX_OK_(nx_tensor_full(&t, shape, 2, 1.3, NX_F8E4M3, CPU, NULL));
  uint8_t b[12];
  bytes_of(t, b, 12);
  for (int i = 0; i < 12; ++i) assert_int_equal(b[i], ref_encode(&E4M3, 1.3));
  nx_tensor_free(t);
  nx_tensor bad = NULL;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_full(&bad, shape, 2, 500.0, NX_F8E4M3, CPU, NULL), "500", "f8e4m3");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_full(&bad, shape, 2, 128.0, NX_I8, CPU, NULL), "i8");
  NX_OK_(nx_tensor_full(&t, shape, 2, -7.0, NX_I8, CPU, NULL));
  int8_t ib[12];
  bytes_of(t, ib, 12);
  assert_int_equal(ib[11], -7);
  nx_tensor_free(t);
  /* a transposed view made contiguous moves the bytes as a transpose does */
  uint8_t codes[12];
  for (int i = 0; i < 12; ++i) codes[i] = (uint8_t)(0x30 + i);
  NX_OK_(nx_tensor_from_data(&t, codes, shape, 2, NX_F8E5M2, CPU, NULL));
  nx_tensor tt, tc, cl;
  NX_OK_(nx_transpose(&tt, t, 0, 1, NULL));
  NX_OK_(nx_contiguous(&tc, tt, NULL));
  NX_OK_(nx_clone(&cl, t, NULL));
  uint8_t got[12], same[12];
  bytes_of(tc, got, 12), bytes_of(cl, same, 12);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 3; ++c) assert_int_equal(got[r * 3 + c], codes[c * 4 + r]);
  assert_memory_equal(same, codes, 12);
  nx_tensor_free(t), nx_tensor_free(tt), nx_tensor_free(tc), nx_tensor_free(cl);
}

static void test_computing_ops_refuse_them_by_name(void** state) {
  (void)state;
  const uint8_t codes[4] = {0x38, 0x40, 0x48, 0x50};
  const nx_dtype dts[3] = {NX_F8E4M3, NX_F8E5M2, NX_I8};
  for (int k = 0; k < 3; ++k) {
    const char* name = nx_dtype_name(dts[k]);
    nx_tensor a = from(codes, 4, dts[k]), out = NULL;
    EXPECT_ERR(NX_ERR_DTYPE, nx_add(&out, a, a, NULL), "nx_add", name, "cast");
    EXPECT_ERR(NX_ERR_DTYPE, nx_exp(&out, a, NULL), "nx_exp", name);
    EXPECT_ERR(NX_ERR_DTYPE, nx_sum(&out, a, NULL, 0, false, NULL), "nx_sum", name);
    EXPECT_ERR(NX_ERR_DTYPE, nx_mul_scalar(&out, a, 2.0, NULL), "nx_mul_scalar", name);
    nx_tensor m;
    const int64_t sq[2] = {2, 2};
    NX_OK_(nx_tensor_from_data(&m, codes, sq, 2, dts[k], CPU, NULL));
    nx_status st = nx_matmul(&out, m, m, NULL);
    assert_int_not_equal(st, NX_OK);
    assert_null(out);
    assert_non_null(strstr(nx_last_error_message(), name));
    nx_tensor_free(a), nx_tensor_free(m);
  }
  /* nor is one a dtype to compute in: autocast, a module's parameters, one_hot's output */
  EXPECT_ERR(NX_ERR_DTYPE, nx_autocast_push(NX_CPU, NX_F8E4M3, true), "nx_autocast_push", "f8e4m3", "storage");
  nx_module mod = NULL;
  EXPECT_ERR(NX_ERR_DTYPE, nx_linear_create(&mod, 2, 3, true, NX_I8, CPU, NULL), "nx_linear_create", "i8");
  assert_null(mod);
}

static void test_safetensors_dlpack_and_printing_keep_them(void** state) {
  (void)state;
  const uint8_t codes[6] = {0x00, 0x38, 0xb8, 0x7e, 0x01, 0x7f};
  nx_tensor a = from(codes, 6, NX_F8E4M3), b = from(codes, 6, NX_F8E5M2), c = from(codes, 6, NX_I8);
  const char* names[3] = {"a", "b", "c"};
  const nx_tensor ts[3] = {a, b, c};
  char path[] = "/tmp/nexus_8bit_XXXXXX";
  const int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  NX_OK_(nx_safetensors_save(path, names, ts, 3));
  FILE* fh = fopen(path, "rb");
  char header[512] = {0};
  assert_true(fread(header, 1, sizeof header - 1, fh) > 8);
  fclose(fh);
  assert_non_null(memmem(header, sizeof header, "F8_E4M3", 7));
  assert_non_null(memmem(header, sizeof header, "F8_E5M2", 7));
  assert_non_null(memmem(header, sizeof header, "\"I8\"", 4));
  nx_safetensors st;
  NX_OK_(nx_safetensors_open(&st, path));
  for (int k = 0; k < 3; ++k) {
    nx_tensor back;
    NX_OK_(nx_safetensors_get(&back, st, names[k], CPU, NULL));
    nx_dtype dt;
    NX_OK_(nx_tensor_dtype(back, &dt));
    nx_dtype want;
    NX_OK_(nx_tensor_dtype(ts[k], &want));
    assert_int_equal(dt, want);
    uint8_t got[6];
    bytes_of(back, got, 6);
    assert_memory_equal(got, codes, 6);
    nx_tensor_free(back);
  }
  nx_safetensors_free(st);
  remove(path);
  /* DLPack: DLPack 1.1's codes out, and the same tensor back in */
  const int dl_codes[3] = {NX_DL_FLOAT8_E4M3FN, NX_DL_FLOAT8_E5M2, NX_DL_INT};
  for (int k = 0; k < 3; ++k) {
    nx_dl_managed_tensor* m;
    NX_OK_(nx_tensor_to_dlpack(&m, ts[k]));
    assert_int_equal(m->dl_tensor.dtype.code, dl_codes[k]);
    assert_int_equal(m->dl_tensor.dtype.bits, 8);
    nx_tensor back;
    NX_OK_(nx_tensor_from_dlpack(&back, m));
    nx_dtype dt, want;
    NX_OK_(nx_tensor_dtype(back, &dt));
    NX_OK_(nx_tensor_dtype(ts[k], &want));
    assert_int_equal(dt, want);
    nx_tensor_free(back);
  }
  /* printing shows the values and torch's dtype name */
  char* text = NULL;
  NX_OK_(nx_tensor_to_string(a, NULL, &text));
  assert_non_null(strstr(text, "dtype=float8_e4m3fn"));
  assert_true(strstr(text, "448") || strstr(text, "4.4800e+02"));
  assert_non_null(strstr(text, "nan"));
  nx_string_free(text);
  NX_OK_(nx_tensor_to_string(c, NULL, &text));
  assert_non_null(strstr(text, "dtype=int8"));
  assert_non_null(strstr(text, "127"));
  nx_string_free(text);
  nx_tensor_free(a), nx_tensor_free(b), nx_tensor_free(c);
}

/* With a GPU: the bytes move to CUDA and back unchanged, a CUDA fill writes the CPU's byte, and an
 * op that computes refuses them there too. */
static void test_cuda_moves_and_fills_them(void** state) {
  (void)state;
  if (nx_cuda_device_count() == 0) {
    skip();
    return;
  }
  const nx_device gpu = {NX_CUDA, 0};
  uint8_t codes[256];
  for (int i = 0; i < 256; ++i) codes[i] = (uint8_t)i;
  nx_tensor a = from(codes, 256, NX_F8E4M3), g, back;
  NX_OK_(nx_tensor_to(&g, a, gpu, NULL));
  NX_OK_(nx_tensor_to(&back, g, CPU, NULL));
  uint8_t got[256];
  bytes_of(back, got, 256);
  assert_memory_equal(got, codes, 256);
  nx_tensor out = NULL;
  EXPECT_ERR(NX_ERR_DTYPE, nx_add(&out, g, g, NULL), "nx_add", "f8e4m3");
  const int64_t n = 100;
  nx_tensor fg;
  NX_OK_(nx_tensor_full(&fg, &n, 1, -3.3, NX_F8E5M2, gpu, NULL));
  uint8_t fb[100];
  bytes_of(fg, fb, 100);
  for (int i = 0; i < 100; ++i) assert_int_equal(fb[i], ref_encode(&E5M2, -3.3));
  nx_tensor_free(a), nx_tensor_free(g), nx_tensor_free(back), nx_tensor_free(fg);
}

/* With a GPU: the cast tests again, each cast made by the CUDA kernels (contiguous and strided)
 * against the same oracles. */
static void test_cuda_casts_match_the_oracles(void** state) {
  if (nx_cuda_device_count() == 0) {
    skip();
    return;
  }
  g_cast_device = (nx_device){NX_CUDA, 0};
  test_every_code_decodes_exactly(state);
  test_casts_into_fp8_round_once_to_nearest_even_and_saturate(state);
  test_int8_casts_truncate_and_wrap(state);
  g_cast_device = CPU;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sizes_and_names),
      cmocka_unit_test(test_every_code_decodes_exactly),
      cmocka_unit_test(test_casts_into_fp8_round_once_to_nearest_even_and_saturate),
      cmocka_unit_test(test_int8_casts_truncate_and_wrap),
      cmocka_unit_test(test_fill_views_and_copies),
      cmocka_unit_test(test_computing_ops_refuse_them_by_name),
      cmocka_unit_test(test_safetensors_dlpack_and_printing_keep_them),
      cmocka_unit_test(test_cuda_moves_and_fills_them),
      cmocka_unit_test(test_cuda_casts_match_the_oracles),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
