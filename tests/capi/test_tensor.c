/* The C contract of nexus.h, part 1: version/ABI, status strings, dtypes, tensor creation,
 * inspection, views and shape ops, streams, runtime settings (threads, SIMD level).
 * Every value is checked against a hand-computed or scalar C reference. */
#include "nx_test.h"

/* ---------------------------------------------------------------- reference conversions */
/* f16: the compiler's _Float16 (IEEE binary16, round to nearest even) is the oracle; where the
 * compiler has none (clang 14 on x86, the fuzzing build), the CPU's F16C conversions are. */
#ifdef __FLT16_MAX__
static float ref_f16_to_f32(uint16_t bits) {
  _Float16 h;
  memcpy(&h, &bits, 2);
  return (float)h;
}
static uint16_t ref_f32_to_f16(float f) {
  _Float16 h = (_Float16)f;
  uint16_t bits;
  memcpy(&bits, &h, 2);
  return bits;
}
#else
#include <immintrin.h>
__attribute__((target("f16c"))) static float ref_f16_to_f32(uint16_t bits) { return _cvtsh_ss(bits); }
__attribute__((target("f16c"))) static uint16_t ref_f32_to_f16(float f) {
  return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}
#endif
static uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float float_of(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
/* bf16 = the top 16 bits of an f32. Reference rounding chooses between the two neighbours by
 * comparing distances in double precision (ties to the even mantissa). */
static float ref_bf16_to_f32(uint16_t b) { return float_of((uint32_t)b << 16); }
static uint16_t ref_f32_to_bf16(float f) {
  if (isnan(f)) return 0x7fc0;
  uint32_t u = bits_of(f);
  uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
  /* past the largest finite bf16 the next step is 2^128 (which overflows to infinity) */
  double vhi = isinf(ref_bf16_to_f32(hi)) ? copysign(ldexp(1.0, 128), f) : (double)ref_bf16_to_f32(hi);
  double dlo = fabs((double)f - (double)ref_bf16_to_f32(lo));
  double dhi = fabs(vhi - (double)f);
  if ((u & 0xffffu) == 0) return lo;
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo & 1u) ? hi : lo;
}

/* Expected bytes of value v stored as dtype dt. */
static void encode(nx_dtype dt, double v, void* dst) {
  switch (dt) {
    case NX_F32: { float f = (float)v; memcpy(dst, &f, 4); break; }
    case NX_F64: memcpy(dst, &v, 8); break;
    case NX_F16: { uint16_t b = ref_f32_to_f16((float)v); memcpy(dst, &b, 2); break; }
    case NX_BF16: { uint16_t b = ref_f32_to_bf16((float)v); memcpy(dst, &b, 2); break; }
    case NX_I32: { int32_t i = (int32_t)v; memcpy(dst, &i, 4); break; }
    case NX_I64: { int64_t i = (int64_t)v; memcpy(dst, &i, 8); break; }
    case NX_BOOL: { uint8_t b = v != 0; memcpy(dst, &b, 1); break; }
  }
}

static const nx_dtype kAllDtypes[] = {NX_F32, NX_F64, NX_F16, NX_BF16, NX_I32, NX_I64, NX_BOOL};
#define NDTYPES (sizeof kAllDtypes / sizeof kAllDtypes[0])

/* ---------------------------------------------------------------- version, status, dtypes */
static void test_version_and_abi(void** state) {
  (void)state;
  char want[32];
  snprintf(want, sizeof want, "%d.%d.%d", NX_VERSION_MAJOR, NX_VERSION_MINOR, NX_VERSION_PATCH);
  assert_string_equal(nx_version_string(), want);
  assert_ptr_equal(nx_version_string(), nx_version_string()); /* static storage */
  assert_int_equal(nx_abi_version(), NX_ABI_VERSION);
  assert_true(nx_cuda_device_count() >= 0);
}

static void test_status_strings(void** state) {
  (void)state;
  static const struct { nx_status s; const char* name; } table[] = {
      {NX_OK, "NX_OK"},
      {NX_ERR_INVALID_ARGUMENT, "NX_ERR_INVALID_ARGUMENT"},
      {NX_ERR_SHAPE, "NX_ERR_SHAPE"},
      {NX_ERR_DTYPE, "NX_ERR_DTYPE"},
      {NX_ERR_DEVICE, "NX_ERR_DEVICE"},
      {NX_ERR_OUT_OF_MEMORY, "NX_ERR_OUT_OF_MEMORY"},
      {NX_ERR_CUDA, "NX_ERR_CUDA"},
      {NX_ERR_IO, "NX_ERR_IO"},
      {NX_ERR_NOT_IMPLEMENTED, "NX_ERR_NOT_IMPLEMENTED"},
      {NX_ERR_STATE, "NX_ERR_STATE"},
      {NX_ERR_INTERNAL, "NX_ERR_INTERNAL"},
  };
  const size_t n = sizeof table / sizeof table[0];
  for (size_t i = 0; i < n; ++i) {
    assert_int_equal((int)table[i].s, (int)i); /* codes are append-only: 0, 1, 2, ... */
    assert_string_equal(nx_status_string(table[i].s), table[i].name);
  }
  /* A code this build does not know still gives a static string, not one of the known names. */
  const nx_status unknown_codes[2] = {(nx_status)1000, (nx_status)-1};
  for (int k = 0; k < 2; ++k) {
    const char* unknown = nx_status_string(unknown_codes[k]);
    assert_non_null(unknown);
    for (size_t i = 0; i < n; ++i) assert_string_not_equal(unknown, table[i].name);
  }
}

static void test_dtype_size_and_name(void** state) {
  (void)state;
  static const size_t sizes[] = {4, 8, 2, 2, 4, 8, 1};
  static const char* names[] = {"f32", "f64", "f16", "bf16", "i32", "i64", "bool"};
  for (size_t i = 0; i < NDTYPES; ++i) {
    assert_int_equal(nx_dtype_size(kAllDtypes[i]), sizes[i]);
    assert_string_equal(nx_dtype_name(kAllDtypes[i]), names[i]);
  }
  assert_int_equal(nx_dtype_size((nx_dtype)10), 0);
  assert_string_equal(nx_dtype_name((nx_dtype)10), "invalid");
  assert_int_equal(nx_dtype_size((nx_dtype)-1), 0);
  assert_string_equal(nx_dtype_name((nx_dtype)-1), "invalid");
  assert_int_equal(nx_dtype_size((nx_dtype)1000), 0);
  assert_string_equal(nx_dtype_name((nx_dtype)1000), "invalid");
}

/* ---------------------------------------------------------------- creation */
static void check_metadata(nx_tensor t, nx_dtype dt, const int64_t* shape, size_t ndim) {
  size_t nd = 99;
  NX_OK_(nx_tensor_ndim(t, &nd));
  assert_int_equal(nd, ndim);
  int64_t got[8], st[8], want_st[8];
  NX_OK_(nx_tensor_shape(t, got, 8));
  NX_OK_(nx_tensor_strides(t, st, 8));
  contiguous_strides_of(shape, ndim, want_st);
  for (size_t i = 0; i < ndim; ++i) {
    assert_int_equal(got[i], shape[i]);
    if (shape[i] > 1) assert_int_equal(st[i], want_st[i]);
  }
  assert_int_equal(tensor_numel(t), numel_of(shape, ndim));
  assert_int_equal(tensor_dtype(t), dt);
  nx_device dev = {NX_CUDA, 7};
  NX_OK_(nx_tensor_device(t, &dev));
  assert_int_equal(dev.type, NX_CPU);
  assert_int_equal(dev.index, 0);
  bool contig = false;
  NX_OK_(nx_tensor_is_contiguous(t, &contig));
  assert_true(contig);
}

static void test_from_data_every_dtype(void** state) {
  (void)state;
  rng_seed(1);
  const int64_t shape[3] = {2, 3, 4};
  for (size_t k = 0; k < NDTYPES; ++k) {
    nx_dtype dt = kAllDtypes[k];
    size_t es = nx_dtype_size(dt);
    unsigned char data[24 * 8], back[24 * 8];
    for (int i = 0; i < 24; ++i) encode(dt, dt == NX_BOOL ? (double)(rng_u64() & 1) : rng_uniform(-100, 100), data + i * es);
    nx_tensor t = make_tensor(data, shape, 3, dt);
    check_metadata(t, dt, shape, 3);
    memset(back, 0xab, sizeof back);
    NX_OK_(nx_tensor_copy_to_host(t, back, 24 * es, NULL));
    assert_memory_equal(back, data, 24 * es);
    /* the tensor holds a copy: changing the source afterwards changes nothing */
    memset(data, 0, sizeof data);
    NX_OK_(nx_tensor_copy_to_host(t, data, 24 * es, NULL));
    assert_memory_equal(back, data, 24 * es);
    void* p = NULL;
    NX_OK_(nx_tensor_data_ptr(t, &p));
    assert_memory_equal(p, back, 24 * es);
    nx_tensor_free(t);
  }
  /* rank 0 with shape NULL, and an empty tensor with data NULL */
  double v = -2.25;
  nx_tensor s = NULL;
  NX_OK_(nx_tensor_from_data(&s, &v, NULL, 0, NX_F64, CPU, NULL));
  assert_scalar_shape(s);
  assert_int_equal(tensor_numel(s), 1);
  assert_true(scalar_of(s) == -2.25);
  nx_tensor e = NULL;
  const int64_t eshape[2] = {0, 3};
  NX_OK_(nx_tensor_from_data(&e, NULL, eshape, 2, NX_F32, CPU, NULL));
  assert_shape(e, 0, 3);
  assert_int_equal(tensor_numel(e), 0);
  NX_OK_(nx_tensor_copy_to_host(e, NULL, 0, NULL));
  /* empty tensors are contiguous whatever their shape (no element is addressed) */
  const int64_t eshape3[3] = {3, 0, 2};
  nx_tensor e3 = NULL, e3t = NULL;
  NX_OK_(nx_tensor_zeros(&e3, eshape3, 3, NX_F64, CPU, NULL));
  bool contig = false;
  NX_OK_(nx_tensor_is_contiguous(e3, &contig));
  assert_true(contig);
  NX_OK_(nx_transpose(&e3t, e3, 0, 2, NULL));
  assert_shape(e3t, 2, 0, 3);
  contig = false;
  NX_OK_(nx_tensor_is_contiguous(e3t, &contig));
  assert_true(contig);
  nx_tensor_free(e3);
  nx_tensor_free(e3t);
  nx_tensor_free(s);
  nx_tensor_free(e);
}

static void test_zeros_ones_full_every_dtype(void** state) {
  (void)state;
  const int64_t shape[2] = {3, 5};
  for (size_t k = 0; k < NDTYPES; ++k) {
    nx_dtype dt = kAllDtypes[k];
    size_t es = nx_dtype_size(dt);
    double fill_value = dt == NX_BOOL ? 1.0 : (dt == NX_I32 || dt == NX_I64) ? -7.0 : 0.1;
    for (int which = 0; which < 3; ++which) {
      nx_tensor t = NULL;
      double v = which == 0 ? 0.0 : which == 1 ? 1.0 : fill_value;
      if (which == 0) NX_OK_(nx_tensor_zeros(&t, shape, 2, dt, CPU, NULL));
      if (which == 1) NX_OK_(nx_tensor_ones(&t, shape, 2, dt, CPU, NULL));
      if (which == 2) NX_OK_(nx_tensor_full(&t, shape, 2, fill_value, dt, CPU, NULL));
      check_metadata(t, dt, shape, 2);
      unsigned char got[15 * 8], one[8];
      encode(dt, v, one);
      NX_OK_(nx_tensor_copy_to_host(t, got, 15 * es, NULL));
      for (int i = 0; i < 15; ++i) assert_memory_equal(got + i * es, one, es);
      nx_tensor_free(t);
    }
  }
  /* scalars: ndim 0, shape NULL */
  nx_tensor z = NULL, f = NULL;
  NX_OK_(nx_tensor_zeros(&z, NULL, 0, NX_F32, CPU, NULL));
  NX_OK_(nx_tensor_full(&f, NULL, 0, 3.5, NX_F64, CPU, NULL));
  assert_scalar_shape(z);
  assert_true(scalar_of(z) == 0.0);
  assert_true(scalar_of(f) == 3.5);
  /* full converts: a value that f32 cannot hold exactly is rounded like a C cast */
  nx_tensor g = NULL;
  const int64_t one[1] = {1};
  NX_OK_(nx_tensor_full(&g, one, 1, 1.0 / 3.0, NX_F32, CPU, NULL));
  assert_true(scalar_of(g) == (double)(float)(1.0 / 3.0));
  nx_tensor_free(z);
  nx_tensor_free(f);
  nx_tensor_free(g);
}

static void check_arange(double start, double end, double step, nx_dtype dt, const double* want, int64_t n) {
  nx_tensor t = NULL;
  NX_OK_(nx_tensor_arange(&t, start, end, step, dt, CPU, NULL));
  assert_int_equal(tensor_dtype(t), dt);
  assert_shape(t, n);
  if (n) assert_tensor_close(t, want, n, 0, 0);
  nx_tensor_free(t);
}

static void test_arange(void** state) {
  (void)state;
  const double a[] = {0, 1, 2, 3, 4};
  check_arange(0, 5, 1, NX_F32, a, 5);
  check_arange(0, 5, 1, NX_I64, a, 5);
  const double b[] = {1, 1.25, 1.5, 1.75};
  check_arange(1, 2, 0.25, NX_F64, b, 4);
  const double c[] = {5, 3.5, 2, 0.5};
  check_arange(5, 0, -1.5, NX_F32, c, 4);
  const double d[] = {0, 3, 6, 9};
  check_arange(0, 10, 3, NX_I32, d, 4);
  const double e[] = {-3, -2, -1};
  check_arange(-3, 0, 1, NX_F16, e, 3);
  check_arange(-3, 0, 1, NX_BF16, e, 3);
  check_arange(4, 1, 1, NX_F32, NULL, 0); /* empty, like torch.arange(4, 1) */
  check_arange(2, 2, 1, NX_F64, NULL, 0);
  /* 0.1 steps: the elements are start + i*step, 10 of them, last below end */
  double f[10];
  for (int i = 0; i < 10; ++i) f[i] = 0.1 * i;
  check_arange(0, 1 - 1e-9, 0.1, NX_F64, f, 10);
}

static void moments(const double* x, int64_t n, double* mean, double* var) {
  double s = 0, q = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i];
  *mean = s / (double)n;
  for (int64_t i = 0; i < n; ++i) q += (x[i] - *mean) * (x[i] - *mean);
  *var = q / (double)(n - 1);
}

static void test_rand_range_and_moments(void** state) {
  (void)state;
  enum { N = 20000 };
  const int64_t shape[2] = {100, 200};
  const nx_dtype dts[] = {NX_F32, NX_F64, NX_F16, NX_BF16};
  double* x = malloc(sizeof(double) * N);
  nx_random_set_seed(7);
  for (size_t k = 0; k < 4; ++k) {
    nx_tensor t = NULL;
    NX_OK_(nx_tensor_rand(&t, shape, 2, dts[k], CPU, NULL));
    assert_int_equal(tensor_dtype(t), dts[k]);
    assert_shape(t, 100, 200);
    read_f64(t, x, N);
    double lo = 1, hi = 0;
    int64_t bins[10] = {0};
    for (int i = 0; i < N; ++i) {
      if (x[i] < lo) lo = x[i];
      if (x[i] > hi) hi = x[i];
      int b = (int)(x[i] * 10);
      if (b >= 0 && b < 10) bins[b]++;
    }
    if (!(lo >= 0.0 && hi < 1.0))
      fail_msg("nx_tensor_rand(%s): values must lie in [0, 1), got min %.17g max %.17g", nx_dtype_name(dts[k]), lo, hi);
    double m, v;
    moments(x, N, &m, &v);
    assert_true(fabs(m - 0.5) < 0.01);
    assert_true(fabs(v - 1.0 / 12.0) < 0.005);
    for (int b = 0; b < 10; ++b) assert_true(labs((long)bins[b] - N / 10) < N / 100);
    nx_tensor_free(t);
  }
  free(x);
}

static void test_randn_moments(void** state) {
  (void)state;
  enum { N = 20000 };
  const int64_t shape[1] = {N};
  const nx_dtype dts[] = {NX_F32, NX_F64, NX_F16, NX_BF16};
  double* x = malloc(sizeof(double) * N);
  nx_random_set_seed(11);
  for (size_t k = 0; k < 4; ++k) {
    nx_tensor t = NULL;
    NX_OK_(nx_tensor_randn(&t, shape, 1, dts[k], CPU, NULL));
    assert_int_equal(tensor_dtype(t), dts[k]);
    read_f64(t, x, N);
    double m, v, third = 0;
    int64_t within1 = 0;
    moments(x, N, &m, &v);
    for (int i = 0; i < N; ++i) {
      assert_true(isfinite(x[i]));
      third += pow((x[i] - m), 3);
      within1 += fabs(x[i]) < 1.0;
    }
    third /= N * pow(v, 1.5);
    assert_true(fabs(m) < 0.03);
    assert_true(fabs(v - 1.0) < 0.06);
    assert_true(fabs(third) < 0.1);                              /* symmetric */
    assert_true(fabs((double)within1 / N - 0.682689) < 0.02);    /* normal, not uniform */
    nx_tensor_free(t);
  }
  free(x);
}

static void test_random_reproducibility(void** state) {
  (void)state;
  enum { N = 10000 }; /* large enough for the parallel path */
  const int64_t shape[1] = {N};
  float* a = malloc(sizeof(float) * N);
  float* b = malloc(sizeof(float) * N);
  nx_tensor t = NULL;
  for (int normal = 0; normal < 2; ++normal) {
    nx_random_set_seed(42);
    NX_OK_(normal ? nx_tensor_randn(&t, shape, 1, NX_F32, CPU, NULL) : nx_tensor_rand(&t, shape, 1, NX_F32, CPU, NULL));
    NX_OK_(nx_tensor_copy_to_host(t, a, sizeof(float) * N, NULL));
    nx_tensor_free(t);
    /* same seed: same numbers */
    nx_random_set_seed(42);
    NX_OK_(normal ? nx_tensor_randn(&t, shape, 1, NX_F32, CPU, NULL) : nx_tensor_rand(&t, shape, 1, NX_F32, CPU, NULL));
    NX_OK_(nx_tensor_copy_to_host(t, b, sizeof(float) * N, NULL));
    nx_tensor_free(t);
    assert_memory_equal(a, b, sizeof(float) * N);
    /* no reseed: the generator moved on */
    NX_OK_(normal ? nx_tensor_randn(&t, shape, 1, NX_F32, CPU, NULL) : nx_tensor_rand(&t, shape, 1, NX_F32, CPU, NULL));
    NX_OK_(nx_tensor_copy_to_host(t, b, sizeof(float) * N, NULL));
    nx_tensor_free(t);
    assert_memory_not_equal(a, b, sizeof(float) * N);
    /* another seed: other numbers */
    nx_random_set_seed(43);
    NX_OK_(normal ? nx_tensor_randn(&t, shape, 1, NX_F32, CPU, NULL) : nx_tensor_rand(&t, shape, 1, NX_F32, CPU, NULL));
    NX_OK_(nx_tensor_copy_to_host(t, b, sizeof(float) * N, NULL));
    nx_tensor_free(t);
    assert_memory_not_equal(a, b, sizeof(float) * N);
  }
  /* independent of the thread count */
  NX_OK_(nx_cpu_set_num_threads(1));
  nx_random_set_seed(5);
  NX_OK_(nx_tensor_randn(&t, shape, 1, NX_F32, CPU, NULL));
  NX_OK_(nx_tensor_copy_to_host(t, a, sizeof(float) * N, NULL));
  nx_tensor_free(t);
  NX_OK_(nx_cpu_set_num_threads(2));
  nx_random_set_seed(5);
  NX_OK_(nx_tensor_randn(&t, shape, 1, NX_F32, CPU, NULL));
  NX_OK_(nx_tensor_copy_to_host(t, b, sizeof(float) * N, NULL));
  nx_tensor_free(t);
  NX_OK_(nx_cpu_set_num_threads(0));
  assert_memory_equal(a, b, sizeof(float) * N);
  /* two draws of 5000 after a seed continue the stream of one draw of 10000 */
  const int64_t half[1] = {N / 2};
  nx_random_set_seed(5);
  NX_OK_(nx_tensor_randn(&t, half, 1, NX_F32, CPU, NULL));
  NX_OK_(nx_tensor_copy_to_host(t, b, sizeof(float) * N / 2, NULL));
  nx_tensor_free(t);
  NX_OK_(nx_tensor_randn(&t, half, 1, NX_F32, CPU, NULL));
  NX_OK_(nx_tensor_copy_to_host(t, b + N / 2, sizeof(float) * N / 2, NULL));
  nx_tensor_free(t);
  assert_memory_equal(a, b, sizeof(float) * N);
  free(a);
  free(b);
}

/* nx_runtime_set_deterministic: off by default, round trips; results on the CPU do not depend on it */
static void test_deterministic_switch(void** state) {
  (void)state;
  assert_false(deterministic_enabled());
  const int64_t shape[4] = {1, 2, 33, 16};
  nx_tensor q, out[2];
  float got[2][2 * 33 * 16];
  nx_random_set_seed(3);
  NX_OK_(nx_tensor_randn(&q, shape, 4, NX_F32, CPU, NULL));
  for (int det = 0; det < 2; ++det) {
    nx_runtime_set_deterministic(det == 1);
    assert_int_equal(deterministic_enabled(), det == 1);
    NX_OK_(nx_flash_attention(&out[det], q, q, q, true, true, 0.0, NULL));
    NX_OK_(nx_tensor_copy_to_host(out[det], got[det], sizeof(got[det]), NULL));
    nx_tensor_free(out[det]);
  }
  nx_runtime_set_deterministic(false);
  assert_memory_equal(got[0], got[1], sizeof(got[0]));
  nx_tensor_free(q);
}

/* nx_runtime_get_host_syncs: the CPU never waits for a device, so CPU work and reads leave the
 * count as it was; a NULL out is refused */
static void test_host_sync_counter(void** state) {
  (void)state;
  uint64_t before = 0, after = 0;
  NX_OK_(nx_runtime_get_host_syncs(&before));
  const int64_t shape[2] = {64, 32};
  nx_tensor x, y;
  double total;
  NX_OK_(nx_tensor_randn(&x, shape, 2, NX_F32, CPU, NULL));
  NX_OK_(nx_sum(&y, x, NULL, 0, false, NULL));
  NX_OK_(nx_tensor_item(y, &total, NULL));
  NX_OK_(nx_runtime_get_host_syncs(&after));
  assert_int_equal(after, before);
  assert_int_equal(nx_runtime_get_host_syncs(NULL), NX_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(nx_last_error_message(), "nx_runtime_get_host_syncs"));
  nx_tensor_free(x);
  nx_tensor_free(y);
}

/* ---------------------------------------------------------------- f16 / bf16 */
static void test_f16_round_trips(void** state) {
  (void)state;
  /* every f16 bit pattern -> f32 -> f16 */
  enum { N = 65536 };
  uint16_t* bits = malloc(2 * N);
  uint16_t* back = malloc(2 * N);
  float* f = malloc(4 * N);
  for (int i = 0; i < N; ++i) bits[i] = (uint16_t)i;
  const int64_t shape[1] = {N};
  nx_tensor h = make_tensor(bits, shape, 1, NX_F16), w = NULL, h2 = NULL;
  NX_OK_(nx_cast(&w, h, NX_F32, NULL));
  NX_OK_(nx_tensor_copy_to_host(w, f, 4 * N, NULL));
  for (int i = 0; i < N; ++i) {
    float want = ref_f16_to_f32((uint16_t)i);
    if (isnan(want)) assert_true(isnan(f[i]));
    else if (bits_of(f[i]) != bits_of(want)) fail_msg("f16 0x%04x -> %.9g, expected %.9g", i, f[i], want);
  }
  NX_OK_(nx_cast(&h2, w, NX_F16, NULL));
  NX_OK_(nx_tensor_copy_to_host(h2, back, 2 * N, NULL));
  for (int i = 0; i < N; ++i) {
    if (isnan(ref_f16_to_f32((uint16_t)i))) assert_true((back[i] & 0x7c00) == 0x7c00 && (back[i] & 0x3ff));
    else if (back[i] != i) fail_msg("f16 0x%04x does not round-trip through f32 (got 0x%04x)", i, back[i]);
  }
  nx_tensor_free(h);
  nx_tensor_free(w);
  nx_tensor_free(h2);

  /* f32 -> f16 rounding: random values over the whole range (subnormals, overflow) and exact ties */
  rng_seed(3);
  for (int i = 0; i < N; ++i) {
    if (i % 2) {
      f[i] = (float)(rng_uniform(-1, 1) * pow(2.0, (double)rng_int(48) - 28)); /* 2^-28 .. 2^19: subnormal .. overflow */
    } else {
      uint16_t b = (uint16_t)rng_int(0x7bff); /* finite, below the largest */
      float lo = ref_f16_to_f32(b), hi = ref_f16_to_f32((uint16_t)(b + 1));
      f[i] = (lo + hi) / 2 * ((rng_u64() & 1) ? 1.0f : -1.0f); /* exactly halfway */
    }
  }
  nx_tensor src = make_tensor(f, shape, 1, NX_F32), dst = NULL;
  NX_OK_(nx_cast(&dst, src, NX_F16, NULL));
  NX_OK_(nx_tensor_copy_to_host(dst, back, 2 * N, NULL));
  for (int i = 0; i < N; ++i)
    if (back[i] != ref_f32_to_f16(f[i]))
      fail_msg("f32 %.9g -> f16 0x%04x, expected 0x%04x", f[i], back[i], ref_f32_to_f16(f[i]));
  nx_tensor_free(src);
  nx_tensor_free(dst);
  free(bits);
  free(back);
  free(f);
}

static void test_bf16_round_trips(void** state) {
  (void)state;
  enum { N = 65536 };
  uint16_t* bits = malloc(2 * N);
  uint16_t* back = malloc(2 * N);
  float* f = malloc(4 * N);
  for (int i = 0; i < N; ++i) bits[i] = (uint16_t)i;
  const int64_t shape[1] = {N};
  nx_tensor h = make_tensor(bits, shape, 1, NX_BF16), w = NULL, h2 = NULL;
  NX_OK_(nx_cast(&w, h, NX_F32, NULL));
  NX_OK_(nx_tensor_copy_to_host(w, f, 4 * N, NULL));
  for (int i = 0; i < N; ++i) {
    float want = ref_bf16_to_f32((uint16_t)i);
    if (isnan(want)) assert_true(isnan(f[i]));
    else if (bits_of(f[i]) != bits_of(want)) fail_msg("bf16 0x%04x -> %.9g, expected %.9g", i, f[i], want);
  }
  NX_OK_(nx_cast(&h2, w, NX_BF16, NULL));
  NX_OK_(nx_tensor_copy_to_host(h2, back, 2 * N, NULL));
  for (int i = 0; i < N; ++i) {
    if (isnan(ref_bf16_to_f32((uint16_t)i))) assert_true(isnan(ref_bf16_to_f32(back[i])));
    else if (back[i] != i) fail_msg("bf16 0x%04x does not round-trip through f32 (got 0x%04x)", i, back[i]);
  }
  nx_tensor_free(h);
  nx_tensor_free(w);
  nx_tensor_free(h2);

  rng_seed(4);
  for (int i = 0; i < N; ++i) {
    uint32_t u = (uint32_t)rng_u64();
    if ((u & 0x7f800000u) == 0x7f800000u) u &= 0xbfffffffu; /* keep finite */
    if (i % 4 == 0) u = (u & 0xffff0000u) | 0x8000u;         /* exact tie */
    f[i] = float_of(u);
  }
  nx_tensor src = make_tensor(f, shape, 1, NX_F32), dst = NULL;
  NX_OK_(nx_cast(&dst, src, NX_BF16, NULL));
  NX_OK_(nx_tensor_copy_to_host(dst, back, 2 * N, NULL));
  for (int i = 0; i < N; ++i)
    if (back[i] != ref_f32_to_bf16(f[i]))
      fail_msg("f32 %.9g (0x%08x) -> bf16 0x%04x, expected 0x%04x", f[i], bits_of(f[i]), back[i], ref_f32_to_bf16(f[i]));
  nx_tensor_free(src);
  nx_tensor_free(dst);
  free(bits);
  free(back);
  free(f);
}

static void test_casts_between_dtypes(void** state) {
  (void)state;
  const double v[8] = {-2.75, -1.5, -0.25, 0, 0.5, 1.0, 2.5, 100.75};
  const int64_t shape[1] = {8};
  nx_tensor x = make_tensor(v, shape, 1, NX_F64);
  for (size_t k = 0; k < NDTYPES; ++k) {
    nx_dtype dt = kAllDtypes[k];
    nx_tensor c = NULL;
    NX_OK_(nx_cast(&c, x, dt, NULL));
    assert_int_equal(tensor_dtype(c), dt);
    unsigned char got[64], want[8];
    NX_OK_(nx_tensor_copy_to_host(c, got, 8 * nx_dtype_size(dt), NULL));
    for (int i = 0; i < 8; ++i) {
      encode(dt, v[i], want); /* C conversion: truncation toward zero for integers, != 0 for bool */
      assert_memory_equal(got + i * nx_dtype_size(dt), want, nx_dtype_size(dt));
    }
    nx_tensor_free(c);
  }
  /* bool -> i64 -> f32 */
  const uint8_t b[4] = {1, 0, 0, 1};
  const int64_t bs[1] = {4};
  nx_tensor tb = make_tensor(b, bs, 1, NX_BOOL), ti = NULL, tf = NULL;
  NX_OK_(nx_cast(&ti, tb, NX_I64, NULL));
  NX_OK_(nx_cast(&tf, ti, NX_F32, NULL));
  const double want[4] = {1, 0, 0, 1};
  assert_tensor_close(tf, want, 4, 0, 0);
  /* large i64 survive a cast to f64 exactly */
  const int64_t big[2] = {(int64_t)1 << 52, -((int64_t)1 << 40) - 3};
  const int64_t s2[1] = {2};
  nx_tensor tbig = make_tensor(big, s2, 1, NX_I64);
  const double wbig[2] = {4503599627370496.0, -1099511627779.0};
  assert_tensor_close(tbig, wbig, 2, 0, 0);
  nx_tensor_free(x);
  nx_tensor_free(tb);
  nx_tensor_free(ti);
  nx_tensor_free(tf);
  nx_tensor_free(tbig);
}

/* ---------------------------------------------------------------- inspection */
static void test_inspection(void** state) {
  (void)state;
  float data[24];
  for (int i = 0; i < 24; ++i) data[i] = (float)i;
  const int64_t shape[3] = {2, 3, 4};
  nx_tensor x = make_tensor(data, shape, 3, NX_F32);
  int64_t st[3];
  NX_OK_(nx_tensor_strides(x, st, 3));
  assert_int_equal(st[0], 12);
  assert_int_equal(st[1], 4);
  assert_int_equal(st[2], 1);
  /* capacity larger than the rank is fine; entries past ndim are not written */
  int64_t big[5] = {-9, -9, -9, -9, -9};
  NX_OK_(nx_tensor_shape(x, big, 5));
  assert_int_equal(big[2], 4);
  assert_int_equal(big[3], -9);

  nx_tensor t = t_transpose(x, 0, 2); /* [4,3,2], strides [1,4,12] */
  assert_shape(t, 4, 3, 2);
  NX_OK_(nx_tensor_strides(t, st, 3));
  assert_int_equal(st[0], 1);
  assert_int_equal(st[1], 4);
  assert_int_equal(st[2], 12);
  bool contig = true;
  NX_OK_(nx_tensor_is_contiguous(t, &contig));
  assert_false(contig);
  assert_int_equal(tensor_numel(t), 24);

  /* item: one-element tensors of any rank and dtype */
  nx_tensor one = NULL;
  NX_OK_(nx_slice(&one, x, 0, 1, 2, 1, NULL)); /* [1,3,4] */
  nx_tensor one2 = NULL, one3 = NULL;
  NX_OK_(nx_slice(&one2, one, 1, 2, 3, 1, NULL));
  NX_OK_(nx_slice(&one3, one2, 2, 3, 4, 1, NULL)); /* [1,1,1] = x[1][2][3] = 23 */
  assert_true(scalar_of(one3) == 23.0);
  const int64_t i64v = ((int64_t)1 << 40) + 1;
  nx_tensor ti = make_tensor(&i64v, NULL, 0, NX_I64);
  assert_true(scalar_of(ti) == 1099511627777.0);
  const uint8_t bv = 1;
  nx_tensor tb = make_tensor(&bv, NULL, 0, NX_BOOL);
  assert_true(scalar_of(tb) == 1.0);
  const uint16_t hv = 0xc170; /* f16 -2.71875 */
  const int64_t s1[1] = {1};
  nx_tensor th = make_tensor(&hv, s1, 1, NX_F16);
  assert_true(scalar_of(th) == -2.71875);

  /* data_ptr points at element 0 of the view */
  void *px = NULL, *pv = NULL;
  NX_OK_(nx_tensor_data_ptr(x, &px));
  NX_OK_(nx_tensor_data_ptr(one3, &pv));
  assert_ptr_equal(pv, (float*)px + 23);

  /* retain: a new handle to the same tensor; it outlives the original handle */
  int64_t live = nx_live_handle_count(NX_HANDLE_TENSOR);
  nx_tensor r = NULL;
  NX_OK_(nx_tensor_retain(&r, x));
  assert_non_null(r);
  assert_ptr_not_equal(r, x);
  assert_int_equal(nx_live_handle_count(NX_HANDLE_TENSOR), live + 1);
  void* pr = NULL;
  NX_OK_(nx_tensor_data_ptr(r, &pr));
  assert_ptr_equal(pr, px);
  nx_tensor_free(x);
  assert_int_equal(nx_live_handle_count(NX_HANDLE_TENSOR), live);
  float back[24];
  NX_OK_(nx_tensor_copy_to_host(r, back, sizeof back, NULL));
  assert_memory_equal(back, data, sizeof back);
  /* same autodiff identity: requires_grad set through one handle is seen through the other */
  nx_tensor r2 = NULL;
  NX_OK_(nx_tensor_retain(&r2, r));
  NX_OK_(nx_tensor_set_requires_grad(r2, true));
  bool rg = false;
  NX_OK_(nx_tensor_get_requires_grad(r, &rg));
  assert_true(rg);
  nx_tensor_free(r2);
  nx_tensor_free(r);
  nx_tensor_free(t);
  nx_tensor_free(one);
  nx_tensor_free(one2);
  nx_tensor_free(one3);
  nx_tensor_free(ti);
  nx_tensor_free(tb);
  nx_tensor_free(th);
  nx_tensor_free(NULL); /* no-op */
}

/* ---------------------------------------------------------------- views share storage */
static void test_views_share_storage(void** state) {
  (void)state;
  float data[12];
  for (int i = 0; i < 12; ++i) data[i] = (float)i;
  const int64_t shape[2] = {3, 4};
  nx_tensor x = make_tensor(data, shape, 2, NX_F32);
  nx_tensor t = t_transpose(x, 0, 1); /* [4,3] */
  nx_tensor s = NULL;
  NX_OK_(nx_slice(&s, x, 1, 1, 4, 2, NULL)); /* columns 1 and 3: [3,2] */
  float* p = NULL;
  NX_OK_(nx_tensor_data_ptr(x, (void**)&p));
  p[1 * 4 + 3] = 100.0f; /* x[1][3] */
  float tv[12], sv[6];
  NX_OK_(nx_tensor_copy_to_host(t, tv, sizeof tv, NULL));
  assert_true(tv[3 * 3 + 1] == 100.0f); /* t[3][1] */
  NX_OK_(nx_tensor_copy_to_host(s, sv, sizeof sv, NULL));
  assert_true(sv[1 * 2 + 1] == 100.0f); /* s[1][1] */
  assert_true(sv[0] == 1.0f && sv[1] == 3.0f && sv[4] == 9.0f && sv[5] == 11.0f);
  /* writing through the view's pointer is seen by the base */
  float* ps = NULL;
  NX_OK_(nx_tensor_data_ptr(s, (void**)&ps));
  assert_ptr_equal(ps, p + 1);
  ps[2 * 4 + 2] = -5.0f; /* s[2][1] = x[2][3] */
  float xv[12];
  NX_OK_(nx_tensor_copy_to_host(x, xv, sizeof xv, NULL));
  assert_true(xv[11] == -5.0f);
  /* in-place op on a view changes the base */
  nx_tensor two = NULL;
  const int64_t one[1] = {1};
  NX_OK_(nx_tensor_full(&two, one, 1, 2.0, NX_F32, CPU, NULL));
  NX_OK_(nx_mul_(s, two, NULL));
  NX_OK_(nx_tensor_copy_to_host(x, xv, sizeof xv, NULL));
  const float want[12] = {0, 2, 2, 6, 4, 10, 6, 200, 8, 18, 10, -10};
  assert_memory_equal(xv, want, sizeof want);
  /* the views keep the storage alive after the base handle is freed */
  nx_tensor_free(x);
  NX_OK_(nx_tensor_copy_to_host(t, tv, sizeof tv, NULL));
  assert_true(tv[3 * 3 + 2] == -10.0f);
  nx_tensor_free(t);
  nx_tensor_free(s);
  nx_tensor_free(two);
}

/* ---------------------------------------------------------------- shape ops vs a C reference */
/* The values of view v equal base viewed with (shape, strides, offset). */
static void check_view(nx_tensor v, const double* base, const int64_t* shape, const int64_t* strides, int64_t offset,
                       size_t ndim) {
  size_t nd = 0;
  NX_OK_(nx_tensor_ndim(v, &nd));
  assert_int_equal(nd, ndim);
  int64_t got[8];
  NX_OK_(nx_tensor_shape(v, got, 8));
  for (size_t i = 0; i < ndim; ++i) assert_int_equal(got[i], shape[i]);
  int64_t n = numel_of(shape, ndim);
  double* want = malloc(sizeof(double) * (size_t)(n ? n : 1));
  strided_read(base, shape, strides, offset, ndim, want);
  assert_tensor_close(v, want, n, 0, 0);
  free(want);
}
static void check_strides(nx_tensor v, const int64_t* want, size_t ndim) {
  int64_t got[8];
  NX_OK_(nx_tensor_strides(v, got, 8));
  for (size_t i = 0; i < ndim; ++i) assert_int_equal(got[i], want[i]);
}
static bool shares_storage_at(nx_tensor a, nx_tensor b) {
  void *pa = NULL, *pb = NULL;
  NX_OK_(nx_tensor_data_ptr(a, &pa));
  NX_OK_(nx_tensor_data_ptr(b, &pb));
  return pa == pb;
}

static void test_reshape_and_view(void** state) {
  (void)state;
  rng_seed(10);
  double base[24];
  const int64_t shape[3] = {2, 3, 4};
  nx_tensor x = rand_tensor(base, shape, 3, NX_F64, -1, 1);
  /* contiguous: reshape and view are views (same data pointer), -1 inferred */
  const int64_t s1[2] = {6, -1}, s1r[2] = {6, 4}, st1[2] = {4, 1};
  nx_tensor r = NULL, v = NULL;
  NX_OK_(nx_reshape(&r, x, s1, 2, NULL));
  check_view(r, base, s1r, st1, 0, 2);
  assert_true(shares_storage_at(r, x));
  const int64_t s2[4] = {2, 2, 3, 2}, st2[4] = {12, 6, 2, 1};
  NX_OK_(nx_view(&v, x, s2, 4, NULL));
  check_view(v, base, s2, st2, 0, 4);
  assert_true(shares_storage_at(v, x));
  /* reshape to a scalar-like and back */
  nx_tensor flat = NULL;
  const int64_t m1[1] = {-1};
  NX_OK_(nx_reshape(&flat, x, m1, 1, NULL));
  assert_shape(flat, 24);
  assert_tensor_close(flat, base, 24, 0, 0);

  /* non-contiguous: a transpose viewed as [4, 6] needs a copy; reshape copies, view fails */
  nx_tensor t = t_transpose(x, 0, 2); /* [4,3,2] strides [1,4,12] */
  const int64_t tshape[3] = {4, 3, 2}, tstr[3] = {1, 4, 12};
  double tref[24];
  strided_read(base, tshape, tstr, 0, 3, tref);
  const int64_t s3[2] = {4, 6};
  nx_tensor rc = NULL, vc = SENTINEL;
  NX_OK_(nx_reshape(&rc, t, s3, 2, NULL));
  assert_shape(rc, 4, 6);
  assert_tensor_close(rc, tref, 24, 0, 0);
  assert_false(shares_storage_at(rc, x));
  EXPECT_ERR(NX_ERR_SHAPE, nx_view(&vc, t, s3, 2, NULL), "nx_view");
  assert_null(vc);
  /* ... but splitting one dimension of it keeps strides: a view */
  const int64_t s4[4] = {2, 2, 3, 2}, st4[4] = {2, 1, 4, 12};
  nx_tensor vt = NULL;
  NX_OK_(nx_view(&vt, t, s4, 4, NULL));
  check_view(vt, base, s4, st4, 0, 4);
  check_strides(vt, st4, 4);
  nx_tensor_free(x);
  nx_tensor_free(r);
  nx_tensor_free(v);
  nx_tensor_free(flat);
  nx_tensor_free(t);
  nx_tensor_free(rc);
  nx_tensor_free(vt);
}

static void test_transpose_and_permute(void** state) {
  (void)state;
  rng_seed(11);
  double base[120];
  const int64_t shape[4] = {2, 3, 4, 5}, cst[4] = {60, 20, 5, 1};
  nx_tensor x = rand_tensor(base, shape, 4, NX_F64, -1, 1);
  const int64_t perms[4][4] = {{3, 2, 1, 0}, {0, 2, 1, 3}, {1, 3, 0, 2}, {-1, 0, -2, 1}};
  for (int k = 0; k < 4; ++k) {
    nx_tensor p = NULL;
    NX_OK_(nx_permute(&p, x, perms[k], 4, NULL));
    int64_t ps[4], pst[4];
    for (int i = 0; i < 4; ++i) {
      int64_t d = perms[k][i] < 0 ? perms[k][i] + 4 : perms[k][i];
      ps[i] = shape[d];
      pst[i] = cst[d];
    }
    check_view(p, base, ps, pst, 0, 4);
    check_strides(p, pst, 4);
    assert_true(shares_storage_at(p, x));
    /* a permute of the permute (non-contiguous input) */
    nx_tensor q = t_transpose(p, 0, -1);
    int64_t qs[4] = {ps[3], ps[1], ps[2], ps[0]}, qst[4] = {pst[3], pst[1], pst[2], pst[0]};
    check_view(q, base, qs, qst, 0, 4);
    nx_tensor_free(p);
    nx_tensor_free(q);
  }
  /* transpose with negative axes and of an axis with itself */
  nx_tensor t = t_transpose(x, -1, -3), same = t_transpose(x, 2, 2);
  const int64_t ts[4] = {2, 5, 4, 3}, tst[4] = {60, 1, 5, 20};
  check_view(t, base, ts, tst, 0, 4);
  check_view(same, base, shape, cst, 0, 4);
  nx_tensor_free(t);
  nx_tensor_free(same);
  nx_tensor_free(x);
}

/* Python slice semantics for step > 0, computed independently. */
static void py_slice(int64_t n, int64_t start, int64_t end, int64_t step, int64_t* s, int64_t* len) {
  if (start < 0) start += n;
  if (end < 0) end += n;
  if (start < 0) start = 0;
  if (start > n) start = n;
  if (end < 0) end = 0;
  if (end > n) end = n;
  *s = start;
  *len = end > start ? (end - start + step - 1) / step : 0;
}

static void test_slice(void** state) {
  (void)state;
  rng_seed(12);
  double base[60];
  const int64_t shape[3] = {3, 4, 5}, cst[3] = {20, 5, 1};
  nx_tensor x = rand_tensor(base, shape, 3, NX_F64, -1, 1);
  const int64_t cases[][4] = {
      /* axis, start, end, step */
      {0, 0, 3, 1}, {0, 1, 3, 1}, {1, 1, 4, 2}, {2, 0, 5, 3}, {2, -3, -1, 1}, {-1, -100, 100, 2},
      {1, 3, 1, 1}, {2, 5, 9, 1}, {-2, -1, 4, 1}, {0, 2, 3, 5}, {2, 1, 5, 4},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; ++k) {
    int64_t axis = cases[k][0] < 0 ? cases[k][0] + 3 : cases[k][0];
    nx_tensor s = NULL;
    NX_OK_(nx_slice(&s, x, cases[k][0], cases[k][1], cases[k][2], cases[k][3], NULL));
    int64_t start, len, ss[3] = {3, 4, 5}, sst[3] = {20, 5, 1};
    py_slice(shape[axis], cases[k][1], cases[k][2], cases[k][3], &start, &len);
    ss[axis] = len;
    sst[axis] *= cases[k][3];
    check_view(s, base, ss, sst, start * cst[axis], 3);
    if (len > 1) check_strides(s, sst, 3);
    nx_tensor_free(s);
  }
  /* slicing a non-contiguous view: x^T[1:4:2] along axis 0 of [5,4,3] */
  nx_tensor t = t_transpose(x, 0, 2), s = NULL, s2 = NULL;
  NX_OK_(nx_slice(&s, t, 0, 1, 4, 2, NULL));
  const int64_t ts[3] = {2, 4, 3}, tst[3] = {2, 5, 20};
  check_view(s, base, ts, tst, 1, 3);
  NX_OK_(nx_slice(&s2, s, 2, -2, 3, 1, NULL)); /* then the last two of axis 2 */
  const int64_t ts2[3] = {2, 4, 2}, tst2[3] = {2, 5, 20};
  check_view(s2, base, ts2, tst2, 1 + 20, 3);
  nx_tensor_free(t);
  nx_tensor_free(s);
  nx_tensor_free(s2);
  nx_tensor_free(x);
}

static void test_expand(void** state) {
  (void)state;
  rng_seed(13);
  double base[3];
  const int64_t shape[2] = {3, 1};
  nx_tensor x = rand_tensor(base, shape, 2, NX_F64, -1, 1);
  const int64_t to[3] = {2, 3, 4}, st[3] = {0, 1, 0};
  nx_tensor e = NULL;
  NX_OK_(nx_expand(&e, x, to, 3, NULL));
  check_view(e, base, to, st, 0, 3);
  check_strides(e, st, 3);
  assert_true(shares_storage_at(e, x));
  /* -1 keeps a dimension */
  const int64_t to2[2] = {-1, 5}, s2[2] = {3, 5}, st2[2] = {1, 0};
  nx_tensor e2 = NULL;
  NX_OK_(nx_expand(&e2, x, to2, 2, NULL));
  check_view(e2, base, s2, st2, 0, 2);
  /* expand of a non-contiguous view: row 1 of a [2,3] transposed to [3,1]... use slice */
  double b2[6];
  const int64_t sh2[2] = {2, 3};
  nx_tensor y = rand_tensor(b2, sh2, 2, NX_F64, -1, 1);
  nx_tensor yt = t_transpose(y, 0, 1), col = NULL, e3 = NULL; /* [3,2] strides [1,3] */
  NX_OK_(nx_slice(&col, yt, 1, 1, 2, 1, NULL));               /* [3,1]: y[1][:] */
  const int64_t to3[3] = {2, 3, 4}, st3[3] = {0, 1, 0};
  NX_OK_(nx_expand(&e3, col, to3, 3, NULL));
  check_view(e3, b2, to3, st3, 3, 3);
  /* an expanded view feeds ops like any tensor: sum over the broadcast axes */
  nx_tensor sm = NULL;
  const int64_t axes[2] = {0, 2};
  NX_OK_(nx_sum(&sm, e3, axes, 2, false, NULL));
  const double want[3] = {8 * b2[3], 8 * b2[4], 8 * b2[5]};
  assert_tensor_close(sm, want, 3, 1e-12, 0);
  nx_tensor_free(x);
  nx_tensor_free(e);
  nx_tensor_free(e2);
  nx_tensor_free(y);
  nx_tensor_free(yt);
  nx_tensor_free(col);
  nx_tensor_free(e3);
  nx_tensor_free(sm);
}

static void test_squeeze_unsqueeze_flatten(void** state) {
  (void)state;
  rng_seed(14);
  double base[12];
  const int64_t shape[4] = {3, 1, 4, 1};
  nx_tensor x = rand_tensor(base, shape, 4, NX_F64, -1, 1);
  nx_tensor a = NULL, b = NULL, c = NULL, d = NULL, e = NULL, f = NULL, g = NULL;
  NX_OK_(nx_squeeze(&a, x, 1, NULL));
  assert_shape(a, 3, 4, 1);
  NX_OK_(nx_squeeze(&b, a, -1, NULL));
  assert_shape(b, 3, 4);
  assert_tensor_close(b, base, 12, 0, 0);
  NX_OK_(nx_unsqueeze(&c, b, 0, NULL));
  assert_shape(c, 1, 3, 4);
  NX_OK_(nx_unsqueeze(&d, b, -1, NULL));
  assert_shape(d, 3, 4, 1);
  NX_OK_(nx_unsqueeze(&e, b, 1, NULL));
  assert_shape(e, 3, 1, 4);
  assert_tensor_close(e, base, 12, 0, 0);
  assert_true(shares_storage_at(e, x));
  NX_OK_(nx_flatten(&f, x, 0, -1, NULL));
  assert_shape(f, 12);
  assert_tensor_close(f, base, 12, 0, 0);
  NX_OK_(nx_flatten(&g, x, 1, 2, NULL));
  assert_shape(g, 3, 4, 1);
  /* flatten of a non-contiguous tensor: the row-major order of the view */
  nx_tensor t = t_transpose(b, 0, 1), ft = NULL, ut = NULL; /* [4,3] */
  NX_OK_(nx_flatten(&ft, t, 0, 1, NULL));
  const int64_t ts[2] = {4, 3}, tst[2] = {1, 4};
  double tref[12];
  strided_read(base, ts, tst, 0, 2, tref);
  assert_shape(ft, 12);
  assert_tensor_close(ft, tref, 12, 0, 0);
  NX_OK_(nx_unsqueeze(&ut, t, 1, NULL));
  assert_shape(ut, 4, 1, 3);
  assert_tensor_close(ut, tref, 12, 0, 0);
  nx_tensor_free(x);
  nx_tensor_free(a);
  nx_tensor_free(b);
  nx_tensor_free(c);
  nx_tensor_free(d);
  nx_tensor_free(e);
  nx_tensor_free(f);
  nx_tensor_free(g);
  nx_tensor_free(t);
  nx_tensor_free(ft);
  nx_tensor_free(ut);
}

/* reference cat: out[..., at + j, ...] = xs[i][..., j, ...] */
static void test_cat(void** state) {
  (void)state;
  rng_seed(15);
  const nx_dtype dts[3] = {NX_F32, NX_F64, NX_I64};
  for (int kd = 0; kd < 3; ++kd) {
    nx_dtype dt = dts[kd];
    for (int axis = -3; axis < 3; ++axis) {
      int ax = axis < 0 ? axis + 3 : axis;
      int64_t shapes[3][3] = {{2, 3, 4}, {2, 3, 4}, {2, 3, 4}};
      shapes[0][ax] = 1;
      shapes[1][ax] = 3;
      shapes[2][ax] = 2;
      double data[3][48];
      nx_tensor xs[3];
      for (int i = 0; i < 3; ++i) {
        for (int j = 0; j < 48; ++j) data[i][j] = dt == NX_I64 ? (double)rng_int(1000) : rng_uniform(-1, 1);
        if (i == 1) {
          /* the middle input is a non-contiguous view: built transposed, then transposed back */
          int64_t tsh[3] = {shapes[1][2], shapes[1][1], shapes[1][0]};
          int64_t tst[3] = {1, shapes[1][2], shapes[1][2] * shapes[1][1]};
          double tdata[48];
          strided_read(data[1], tsh, tst, 0, 3, tdata); /* tdata[c][b][a] = data[a][b][c] */
          nx_tensor raw = make_from_f64(tdata, tsh, 3, dt);
          xs[1] = t_transpose(raw, 0, 2);
          nx_tensor_free(raw);
          bool contig = true;
          NX_OK_(nx_tensor_is_contiguous(xs[1], &contig));
          assert_false(contig);
        } else {
          xs[i] = make_from_f64(data[i], shapes[i], 3, dt);
        }
      }
      nx_tensor out = NULL;
      NX_OK_(nx_cat(&out, xs, 3, axis, NULL));
      int64_t oshape[3] = {2, 3, 4};
      oshape[ax] = 6;
      assert_shape(out, oshape[0], oshape[1], oshape[2]);
      assert_int_equal(tensor_dtype(out), dt);
      double want[6 * 3 * 4];
      int64_t coord[3] = {0, 0, 0}, e = 0;
      do {
        int64_t c = coord[ax], src = 0;
        while (c >= shapes[src][ax]) c -= shapes[src][ax], src++;
        int64_t cc[3] = {coord[0], coord[1], coord[2]};
        cc[ax] = c;
        want[e++] = data[src][(cc[0] * shapes[src][1] + cc[1]) * shapes[src][2] + cc[2]];
      } while (next_coord(coord, oshape, 3));
      assert_tensor_close(out, want, numel_of(oshape, 3), dt == NX_F32 ? 1e-7 : 0, 0);
      for (int i = 0; i < 3; ++i) nx_tensor_free(xs[i]);
      nx_tensor_free(out);
    }
  }
}

static void test_stack(void** state) {
  (void)state;
  rng_seed(16);
  double data[3][6];
  const int64_t shape[2] = {2, 3};
  nx_tensor xs[3];
  for (int i = 0; i < 3; ++i) xs[i] = rand_tensor(data[i], shape, 2, NX_F64, -1, 1);
  /* replace xs[2] by a non-contiguous tensor with the same values */
  {
    const int64_t ts[2] = {3, 2}, tst[2] = {1, 3};
    double td[6];
    strided_read(data[2], ts, tst, 0, 2, td);
    nx_tensor raw = make_tensor(td, ts, 2, NX_F64);
    nx_tensor_free(xs[2]);
    xs[2] = t_transpose(raw, 0, 1);
    nx_tensor_free(raw);
  }
  for (int axis = -3; axis < 3; ++axis) {
    int ax = axis < 0 ? axis + 3 : axis;
    nx_tensor out = NULL;
    NX_OK_(nx_stack(&out, xs, 3, axis, NULL));
    int64_t oshape[3], k = 0;
    for (int d = 0; d < 3; ++d) oshape[d] = d == ax ? 3 : shape[k++];
    assert_shape(out, oshape[0], oshape[1], oshape[2]);
    double want[18];
    int64_t coord[3] = {0, 0, 0}, e = 0;
    do {
      int64_t rest[2], r = 0;
      for (int d = 0; d < 3; ++d)
        if (d != ax) rest[r++] = coord[d];
      want[e++] = data[coord[ax]][rest[0] * 3 + rest[1]];
    } while (next_coord(coord, oshape, 3));
    assert_tensor_close(out, want, 18, 0, 0);
    nx_tensor_free(out);
  }
  for (int i = 0; i < 3; ++i) nx_tensor_free(xs[i]);
}

static void test_split(void** state) {
  (void)state;
  rng_seed(17);
  double base[42];
  const int64_t shape[2] = {6, 7}, cst[2] = {7, 1};
  nx_tensor x = rand_tensor(base, shape, 2, NX_F64, -1, 1);
  const int64_t sizes[4] = {2, 0, 4, 1};
  nx_tensor parts[4] = {SENTINEL, SENTINEL, SENTINEL, SENTINEL};
  NX_OK_(nx_split(parts, x, sizes, 4, -1, NULL));
  int64_t at = 0;
  for (int i = 0; i < 4; ++i) {
    assert_non_null(parts[i]);
    const int64_t ps[2] = {6, sizes[i]};
    check_view(parts[i], base, ps, cst, at, 2);
    at += sizes[i];
  }
  /* the parts are views: writing through x shows in them */
  double* p = NULL;
  NX_OK_(nx_tensor_data_ptr(x, (void**)&p));
  p[5 * 7 + 6] = 1234.5; /* x[5][6] is parts[3][5][0] */
  double last[6];
  read_f64(parts[3], last, 6);
  assert_true(last[5] == 1234.5);
  for (int i = 0; i < 4; ++i) nx_tensor_free(parts[i]);
  /* along axis 0 of a non-contiguous tensor */
  base[5 * 7 + 6] = 1234.5;
  nx_tensor t = t_transpose(x, 0, 1); /* [7,6], strides [1,7] */
  const int64_t sz2[2] = {3, 4};
  nx_tensor q[2] = {NULL, NULL};
  NX_OK_(nx_split(q, t, sz2, 2, 0, NULL));
  const int64_t q0[2] = {3, 6}, q1[2] = {4, 6}, qst[2] = {1, 7};
  check_view(q[0], base, q0, qst, 0, 2);
  check_view(q[1], base, q1, qst, 3, 2);
  nx_tensor_free(q[0]);
  nx_tensor_free(q[1]);
  nx_tensor_free(t);
  nx_tensor_free(x);
}

static void test_contiguous_and_clone(void** state) {
  (void)state;
  rng_seed(18);
  double base[20];
  const int64_t shape[2] = {4, 5};
  nx_tensor x = rand_tensor(base, shape, 2, NX_F64, -1, 1);
  nx_tensor c = NULL;
  NX_OK_(nx_contiguous(&c, x, NULL));
  assert_true(shares_storage_at(c, x)); /* already contiguous: the same data */
  nx_tensor t = t_transpose(x, 0, 1), tc = NULL;
  NX_OK_(nx_contiguous(&tc, t, NULL));
  bool contig = false;
  NX_OK_(nx_tensor_is_contiguous(tc, &contig));
  assert_true(contig);
  const int64_t ts[2] = {5, 4}, tst[2] = {1, 5}, cst[2] = {4, 1};
  check_view(tc, base, ts, tst, 0, 2);
  check_strides(tc, cst, 2);
  assert_false(shares_storage_at(tc, x));
  /* clone: own storage, same values */
  nx_tensor k = NULL;
  NX_OK_(nx_clone(&k, x, NULL));
  assert_false(shares_storage_at(k, x));
  double* pk = NULL;
  NX_OK_(nx_tensor_data_ptr(k, (void**)&pk));
  pk[0] = 99;
  assert_tensor_close(x, base, 20, 0, 0);
  nx_tensor_free(x);
  nx_tensor_free(c);
  nx_tensor_free(t);
  nx_tensor_free(tc);
  nx_tensor_free(k);
}

/* ---------------------------------------------------------------- streams */
static void test_streams(void** state) {
  (void)state;
  nx_stream s = NULL;
  NX_OK_(nx_stream_create(&s, CPU));
  assert_non_null(s);
  nx_device d = {NX_CUDA, 3};
  NX_OK_(nx_stream_device(s, &d));
  assert_int_equal(d.type, NX_CPU);
  assert_int_equal(d.index, 0);
  /* work on the stream: CPU work is synchronous, results are there at once */
  const float a[3] = {1, 2, 3};
  const int64_t shape[1] = {3};
  nx_tensor x = NULL, y = NULL;
  NX_OK_(nx_tensor_from_data(&x, a, shape, 1, NX_F32, CPU, s));
  NX_OK_(nx_mul(&y, x, x, s));
  NX_OK_(nx_stream_synchronize(s));
  float got[3];
  NX_OK_(nx_tensor_copy_to_host(y, got, sizeof got, s));
  assert_true(got[0] == 1 && got[1] == 4 && got[2] == 9);
  /* NULL stream: the CPU default stream */
  NX_OK_(nx_stream_synchronize(NULL));
  d.type = NX_CUDA;
  NX_OK_(nx_stream_device(NULL, &d));
  assert_int_equal(d.type, NX_CPU);
  nx_stream_free(s);
  nx_stream_free(NULL); /* no-op */
  /* a stream on CUDA in a build or machine without a GPU */
  if (nx_cuda_device_count() == 0) {
    nx_stream g = SENTINEL;
    const nx_device cuda = {NX_CUDA, 0};
    EXPECT_ERR(NX_ERR_DEVICE, nx_stream_create(&g, cuda), "nx_stream_create", "cuda");
    assert_null(g);
  }
  nx_tensor_free(x);
  nx_tensor_free(y);
}

/* ---------------------------------------------------------------- threads and SIMD levels */
static void matmul_ref(const double* a, const double* b, double* c, int64_t m, int64_t k, int64_t n) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += a[i * k + p] * b[p * n + j];
      c[i * n + j] = s;
    }
}

static void test_num_threads(void** state) {
  (void)state;
  int32_t initial = num_threads();
  assert_true(initial >= 1);
  rng_seed(19);
  enum { M = 96, K = 130, N = 70 };
  double *a = malloc(sizeof(double) * M * K), *b = malloc(sizeof(double) * K * N), *c = malloc(sizeof(double) * M * N);
  const int64_t sa[2] = {M, K}, sb[2] = {K, N};
  nx_tensor ta = rand_tensor(a, sa, 2, NX_F32, -1, 1), tb = rand_tensor(b, sb, 2, NX_F32, -1, 1);
  matmul_ref(a, b, c, M, K, N);
  for (int32_t n = 1; n <= 3; ++n) {
    NX_OK_(nx_cpu_set_num_threads(n));
    assert_int_equal(num_threads(), n);
    nx_tensor y = NULL;
    NX_OK_(nx_matmul(&y, ta, tb, NULL));
    assert_tensor_close(y, c, M * N, 1e-5, 1e-5);
    nx_tensor_free(y);
  }
  NX_OK_(nx_cpu_set_num_threads(0)); /* restores the default */
  assert_int_equal(num_threads(), initial);
  NX_OK_(nx_cpu_set_num_threads(1));
  NX_OK_(nx_cpu_set_num_threads(-4));
  assert_int_equal(num_threads(), initial);
  nx_tensor_free(ta);
  nx_tensor_free(tb);
  free(a);
  free(b);
  free(c);
}

/* The results of a few ops at the current SIMD level, concatenated. */
static double* simd_probe(nx_tensor x, nx_tensor a, nx_tensor b, int64_t* count) {
  nx_tensor r[7] = {NULL};
  NX_OK_(nx_exp(&r[0], x, NULL));
  NX_OK_(nx_tanh(&r[1], x, NULL));
  NX_OK_(nx_sigmoid(&r[2], x, NULL));
  NX_OK_(nx_softmax(&r[3], x, -1, NULL));
  const int64_t ax[1] = {1};
  NX_OK_(nx_sum(&r[4], x, ax, 1, false, NULL));
  NX_OK_(nx_matmul(&r[5], a, b, NULL));
  NX_OK_(nx_gelu(&r[6], x, false, NULL));
  int64_t total = 0;
  for (int i = 0; i < 7; ++i) total += tensor_numel(r[i]);
  double* out = malloc(sizeof(double) * (size_t)total);
  int64_t at = 0;
  for (int i = 0; i < 7; ++i) {
    int64_t n = tensor_numel(r[i]);
    read_f64(r[i], out + at, n);
    at += n;
    nx_tensor_free(r[i]);
  }
  *count = total;
  return out;
}

static void test_simd_levels(void** state) {
  (void)state;
  char initial[16];
  snprintf(initial, sizeof initial, "%s", simd_level());
  assert_true(!strcmp(initial, "avx512") || !strcmp(initial, "avx2") || !strcmp(initial, "scalar"));
  rng_seed(20);
  const int64_t sx[2] = {17, 300}, sa[2] = {40, 50}, sb[2] = {50, 45};
  double xa[17 * 300], aa[40 * 50], ba[50 * 45];
  nx_tensor x = rand_tensor(xa, sx, 2, NX_F32, -6, 6), a = rand_tensor(aa, sa, 2, NX_F32, -1, 1),
            b = rand_tensor(ba, sb, 2, NX_F32, -1, 1);
  NX_OK_(nx_cpu_set_simd_level("scalar"));
  assert_string_equal(simd_level(), "scalar");
  int64_t n0 = 0;
  double* ref = simd_probe(x, a, b, &n0);
  /* the scalar level against a double-precision reference for exp and the matmul */
  for (int i = 0; i < 17 * 300; ++i) assert_true(fabs(ref[i] - exp(xa[i])) <= 4e-7 * exp(xa[i]));
  double mm[40 * 45];
  matmul_ref(aa, ba, mm, 40, 50, 45);
  int64_t mm_at = n0 - 17 * 300 - 40 * 45;
  assert_close(ref + mm_at, mm, 40 * 45, 1e-5, 1e-5);
  const char* levels[2] = {"avx2", "avx512"};
  for (int i = 0; i < 2; ++i) {
    nx_status st = nx_cpu_set_simd_level(levels[i]);
    if (st == NX_ERR_NOT_IMPLEMENTED) {
      assert_non_null(strstr(nx_last_error_message(), levels[i]));
      assert_string_not_equal(simd_level(), levels[i]);
      continue;
    }
    assert_int_equal(st, NX_OK);
    assert_string_equal(simd_level(), levels[i]);
    int64_t n1 = 0;
    double* got = simd_probe(x, a, b, &n1);
    assert_int_equal(n1, n0);
    /* exp, tanh, sigmoid, softmax: a few ulp; row sums and the matmul: reassociation */
    int64_t seg = 4 * 17 * 300;
    assert_close(got, ref, seg, 2e-6, 1e-7);
    assert_close(got + seg, ref + seg, 17, 1e-5, 1e-3);
    assert_close(got + seg + 17, ref + seg + 17, 40 * 45, 1e-5, 1e-5);
    assert_close(got + seg + 17 + 40 * 45, ref + seg + 17 + 40 * 45, 17 * 300, 2e-6, 1e-7);
    free(got);
  }
  NX_OK_(nx_cpu_set_simd_level(initial));
  assert_string_equal(simd_level(), initial);
  free(ref);
  nx_tensor_free(x);
  nx_tensor_free(a);
  nx_tensor_free(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      NX_TEST(test_version_and_abi),
      NX_TEST(test_status_strings),
      NX_TEST(test_dtype_size_and_name),
      NX_TEST(test_from_data_every_dtype),
      NX_TEST(test_zeros_ones_full_every_dtype),
      NX_TEST(test_arange),
      NX_TEST(test_rand_range_and_moments),
      NX_TEST(test_randn_moments),
      NX_TEST(test_random_reproducibility),
      NX_TEST(test_f16_round_trips),
      NX_TEST(test_bf16_round_trips),
      NX_TEST(test_casts_between_dtypes),
      NX_TEST(test_inspection),
      NX_TEST(test_views_share_storage),
      NX_TEST(test_reshape_and_view),
      NX_TEST(test_transpose_and_permute),
      NX_TEST(test_slice),
      NX_TEST(test_expand),
      NX_TEST(test_squeeze_unsqueeze_flatten),
      NX_TEST(test_cat),
      NX_TEST(test_stack),
      NX_TEST(test_split),
      NX_TEST(test_contiguous_and_clone),
      NX_TEST(test_streams),
      NX_TEST(test_num_threads),
      NX_TEST(test_simd_levels),
      NX_TEST(test_deterministic_switch),
      NX_TEST(test_host_sync_counter),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
