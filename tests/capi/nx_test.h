/* Shared helpers for the CMocka tests of the C contract (nexus.h). Header-only: every
 * tests/capi/test_*.c is its own executable and includes this once. */
#ifndef NX_CAPI_TEST_H
#define NX_CAPI_TEST_H

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nexus.h"

#define NX_UNUSED __attribute__((unused))

static const nx_device CPU = {NX_CPU, 0};

/* ---------------------------------------------------------------- status checks */
/* The call must succeed; on failure print the status and the engine's message. */
#define NX_OK_(call)                                                                          \
  do {                                                                                        \
    nx_status st_ = (call);                                                                   \
    if (st_ != NX_OK) {                                                                       \
      print_error("%s returned %s: %s\n", #call, nx_status_string(st_), nx_last_error_message()); \
      _fail(__FILE__, __LINE__);                                                              \
    }                                                                                         \
  } while (0)

NX_UNUSED static void check_err_(nx_status got, nx_status want, const char* call, const char* const* needles,
                                 size_t nneedles, const char* file, int line) {
  const char* msg = nx_last_error_message();
  if (got != want) {
    print_error("%s returned %s, expected %s (message: \"%s\")\n", call, nx_status_string(got),
                nx_status_string(want), msg);
    _fail(file, line);
  }
  for (size_t i = 0; i < nneedles; ++i) {
    if (!strstr(msg, needles[i])) {
      print_error("%s: message \"%s\" does not contain \"%s\"\n", call, msg, needles[i]);
      _fail(file, line);
    }
  }
}
/* The call must fail with status `want` and a message containing every string given. */
#define EXPECT_ERR(want, call, ...)                                                        \
  do {                                                                                     \
    nx_status st_ = (call);                                                                \
    const char* const needles_[] = {__VA_ARGS__};                                          \
    check_err_(st_, want, #call, needles_, sizeof needles_ / sizeof needles_[0], __FILE__, __LINE__); \
  } while (0)

/* ---------------------------------------------------------------- settings read back */
/* The getters of nexus.h's settings write through a pointer (rule 3); these read one value. */
#define NX_GETTER_(name, type, call)   \
  NX_UNUSED static type name(void) {   \
    type v_;                           \
    NX_OK_(call(&v_));                 \
    return v_;                         \
  }
NX_GETTER_(grad_enabled, bool, nx_autograd_get_enabled)
NX_GETTER_(num_threads, int32_t, nx_cpu_get_num_threads)
NX_GETTER_(simd_level, const char*, nx_cpu_get_simd_level)
NX_GETTER_(deterministic_enabled, bool, nx_runtime_get_deterministic)

/* nx_backward's options as the tests use them */
NX_UNUSED static const nx_backward_options RETAIN_GRAPH = {sizeof(nx_backward_options), true, false, false};
NX_UNUSED static const nx_backward_options CREATE_GRAPH = {sizeof(nx_backward_options), false, true, false};
NX_UNUSED static const nx_backward_options CHECK_FINITE = {sizeof(nx_backward_options), false, false, true};

/* A non-NULL sentinel written to an out handle before a call expected to fail: the contract
 * says the call sets *out to NULL. */
#define SENTINEL ((void*)(uintptr_t)0x5a5a5a50u)

/* ---------------------------------------------------------------- a scratch directory */
/* One fresh directory per test group (mkdtemp under $TMPDIR, else /tmp), for the tests that write
 * files: create it in the group setup, remove it, with everything in it, in the teardown. */
static char nx_scratch_dir[256];

/* A path in the scratch directory; 8 buffers in turn, so a test may hold several. */
NX_UNUSED static const char* nx_scratch_path(const char* name) {
  static char bufs[8][512];
  static unsigned next;
  char* b = bufs[next++ % 8];
  snprintf(b, sizeof bufs[0], "%s/%s", nx_scratch_dir, name);
  return b;
}
/* Removes path, and below it everything, even what a test made read-only. */
NX_UNUSED static void nx_remove_tree(const char* path) {
  struct stat s;
  if (lstat(path, &s) != 0) return;
  if (S_ISDIR(s.st_mode)) {
    chmod(path, 0700);
    DIR* d = opendir(path);
    for (struct dirent* e; d && (e = readdir(d));) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      char p[600];
      snprintf(p, sizeof p, "%s/%s", path, e->d_name);
      nx_remove_tree(p);
    }
    if (d) closedir(d);
    rmdir(path);
  } else {
    unlink(path);
  }
}
/* Writes n bytes to path (created or truncated), failing the test when it cannot. */
NX_UNUSED static void nx_write_file(const char* path, const void* data, size_t n) {
  FILE* f = fopen(path, "wb");
  assert_non_null(f);
  if (n) assert_int_equal(fwrite(data, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}
/* Group setup and teardown (cmocka_run_group_tests); the directory is 0755, so that a child
 * process running as another user may enter it. */
NX_UNUSED static int nx_scratch_create(void** state) {
  (void)state;
  const char* tmp = getenv("TMPDIR");
  snprintf(nx_scratch_dir, sizeof nx_scratch_dir, "%s/nx_test_XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(nx_scratch_dir)) return -1;
  chmod(nx_scratch_dir, 0755);
  return 0;
}
NX_UNUSED static int nx_scratch_remove(void** state) {
  (void)state;
  nx_remove_tree(nx_scratch_dir);
  return 0;
}

/* The whole file at path (malloc'd, one spare byte; the caller frees it); fails the test when it
 * cannot be read. */
NX_UNUSED static unsigned char* nx_read_file(const char* path, size_t* n) {
  FILE* f = fopen(path, "rb");
  if (!f) {
    print_error("cannot open %s\n", path);
    fail();
  }
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char* buf = malloc((size_t)size + 1);
  assert_int_equal(fread(buf, 1, (size_t)size, f), (size_t)size);
  fclose(f);
  *n = (size_t)size;
  return buf;
}

/* ---------------------------------------------------------------- leak check per test */
static int64_t g_live_at_setup;
NX_UNUSED static int leak_setup(void** state) {
  (void)state;
  nx_autograd_set_enabled(true);
  g_live_at_setup = nx_live_handle_count(NX_HANDLE_TENSOR);
  return 0;
}
NX_UNUSED static int leak_teardown(void** state) {
  (void)state;
  int64_t now = nx_live_handle_count(NX_HANDLE_TENSOR);
  nx_autograd_set_enabled(true);
  if (now != g_live_at_setup) {
    print_error("tensor handles leaked by this test: %lld live before, %lld after\n",
                (long long)g_live_at_setup, (long long)now);
    return -1;
  }
  return 0;
}
#define NX_TEST(f) cmocka_unit_test_setup_teardown(f, leak_setup, leak_teardown)

/* ---------------------------------------------------------------- deterministic test data */
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
NX_UNUSED static void rng_seed(uint64_t s) { g_rng = s * 0x9e3779b97f4a7c15ull + 1; }
NX_UNUSED static uint64_t rng_u64(void) { /* xorshift64* */
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return g_rng * 0x2545f4914f6cdd1dull;
}
/* Uniform in [lo, hi). */
NX_UNUSED static double rng_uniform(double lo, double hi) {
  return lo + (hi - lo) * (double)(rng_u64() >> 11) * (1.0 / 9007199254740992.0);
}
NX_UNUSED static int64_t rng_int(int64_t n) { return (int64_t)(rng_u64() % (uint64_t)n); }

NX_UNUSED static int64_t numel_of(const int64_t* shape, size_t ndim) {
  int64_t n = 1;
  for (size_t i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

/* ---------------------------------------------------------------- tensor helpers */
NX_UNUSED static nx_tensor make_tensor(const void* data, const int64_t* shape, size_t ndim, nx_dtype dt) {
  nx_tensor t = NULL;
  NX_OK_(nx_tensor_from_data(&t, data, shape, ndim, dt, CPU, NULL));
  return t;
}
/* A tensor of doubles converted to dtype dt (through nx_cast from f64). */
NX_UNUSED static nx_tensor make_from_f64(const double* data, const int64_t* shape, size_t ndim, nx_dtype dt) {
  nx_tensor t = make_tensor(data, shape, ndim, NX_F64);
  if (dt == NX_F64) return t;
  nx_tensor c = NULL;
  NX_OK_(nx_cast(&c, t, dt, NULL));
  nx_tensor_free(t);
  return c;
}
/* Random uniform data in [lo, hi): fills host (numel doubles, if not NULL) and returns a tensor
 * of dtype dt holding the same values (rounded to dt; host is then rounded too). */
NX_UNUSED static nx_tensor rand_tensor(double* host, const int64_t* shape, size_t ndim, nx_dtype dt, double lo,
                                       double hi) {
  int64_t n = numel_of(shape, ndim);
  double* buf = malloc(sizeof(double) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; ++i) {
    buf[i] = rng_uniform(lo, hi);
    if (dt == NX_F32) buf[i] = (double)(float)buf[i];
  }
  nx_tensor t = make_from_f64(buf, shape, ndim, dt);
  if (host) memcpy(host, buf, sizeof(double) * (size_t)n);
  free(buf);
  return t;
}

NX_UNUSED static int64_t tensor_numel(nx_tensor t) {
  int64_t n = -1;
  NX_OK_(nx_tensor_numel(t, &n));
  return n;
}
NX_UNUSED static nx_dtype tensor_dtype(nx_tensor t) {
  nx_dtype d = NX_F32;
  NX_OK_(nx_tensor_dtype(t, &d));
  return d;
}
/* The elements of t (any dtype, any view) as doubles, row-major; `n` must equal numel. */
NX_UNUSED static void read_f64(nx_tensor t, double* out, int64_t n) {
  assert_int_equal(tensor_numel(t), n);
  nx_tensor c = NULL;
  NX_OK_(nx_cast(&c, t, NX_F64, NULL));
  NX_OK_(nx_tensor_copy_to_host(c, out, sizeof(double) * (size_t)n, NULL));
  nx_tensor_free(c);
}
/* Malloc'ed copy of t's elements as doubles. */
NX_UNUSED static double* host_f64(nx_tensor t) {
  int64_t n = tensor_numel(t);
  double* p = malloc(sizeof(double) * (size_t)(n ? n : 1));
  read_f64(t, p, n);
  return p;
}
NX_UNUSED static double scalar_of(nx_tensor t) {
  double v = NAN;
  NX_OK_(nx_tensor_item(t, &v, NULL));
  return v;
}

#define assert_shape(t, ...)                                                  \
  do {                                                                        \
    const int64_t want_[] = {__VA_ARGS__};                                    \
    assert_shape_(t, want_, sizeof want_ / sizeof want_[0], __FILE__, __LINE__); \
  } while (0)
NX_UNUSED static void assert_shape_(nx_tensor t, const int64_t* want, size_t ndim, const char* file, int line) {
  size_t nd = 0;
  int64_t got[16];
  NX_OK_(nx_tensor_ndim(t, &nd));
  if (nd <= 16) NX_OK_(nx_tensor_shape(t, got, 16));
  int ok = nd == ndim;
  for (size_t i = 0; ok && i < nd; ++i) ok = got[i] == want[i];
  if (!ok) {
    char g[256] = "", w[256] = "";
    for (size_t i = 0; i < nd && i < 16; ++i) snprintf(g + strlen(g), sizeof g - strlen(g), "%lld,", (long long)got[i]);
    for (size_t i = 0; i < ndim; ++i) snprintf(w + strlen(w), sizeof w - strlen(w), "%lld,", (long long)want[i]);
    print_error("shape [%s] (rank %zu), expected [%s] (rank %zu)\n", g, nd, w, ndim);
    _fail(file, line);
  }
}
/* A scalar (rank-0) result. */
NX_UNUSED static void assert_scalar_shape(nx_tensor t) {
  size_t nd = 99;
  NX_OK_(nx_tensor_ndim(t, &nd));
  assert_int_equal(nd, 0);
}

/* |got - want| <= atol + rtol |want| elementwise; NaNs must match NaNs, infinities exactly. */
NX_UNUSED static void assert_close_(const double* got, const double* want, int64_t n, double rtol, double atol,
                                    const char* what, const char* file, int line) {
  for (int64_t i = 0; i < n; ++i) {
    double g = got[i], w = want[i];
    int ok;
    if (isnan(w)) ok = isnan(g);
    else if (isinf(w)) ok = g == w;
    else ok = fabs(g - w) <= atol + rtol * fabs(w);
    if (!ok) {
      print_error("%s: element %lld is %.17g, expected %.17g (rtol %g, atol %g)\n", what, (long long)i, g, w, rtol,
                  atol);
      _fail(file, line);
    }
  }
}
#define assert_close(got, want, n, rtol, atol) assert_close_(got, want, n, rtol, atol, #got, __FILE__, __LINE__)

/* The tensor's values against a reference (n must be its numel). */
NX_UNUSED static void assert_tensor_close_(nx_tensor t, const double* want, int64_t n, double rtol, double atol,
                                           const char* what, const char* file, int line) {
  int64_t numel = tensor_numel(t);
  if (numel != n) {
    print_error("%s: numel %lld, expected %lld\n", what, (long long)numel, (long long)n);
    _fail(file, line);
  }
  double* got = host_f64(t);
  assert_close_(got, want, n, rtol, atol, what, file, line);
  free(got);
}
#define assert_tensor_close(t, want, n, rtol, atol) \
  assert_tensor_close_(t, want, n, rtol, atol, #t, __FILE__, __LINE__)

/* ---------------------------------------------------------------- strided reference */
NX_UNUSED static void contiguous_strides_of(const int64_t* shape, size_t ndim, int64_t* strides) {
  int64_t acc = 1;
  for (size_t i = ndim; i-- > 0;) {
    strides[i] = acc;
    acc *= shape[i] > 1 ? shape[i] : 1;
  }
}
/* out[row-major index over shape] = base[offset + sum coord[d] * strides[d]]. */
NX_UNUSED static void strided_read(const double* base, const int64_t* shape, const int64_t* strides, int64_t offset,
                                   size_t ndim, double* out) {
  int64_t n = numel_of(shape, ndim);
  int64_t coord[16] = {0};
  for (int64_t e = 0; e < n; ++e) {
    int64_t off = offset;
    for (size_t d = 0; d < ndim; ++d) off += coord[d] * strides[d];
    out[e] = base[off];
    for (size_t d = ndim; d-- > 0;) {
      if (++coord[d] < shape[d]) break;
      coord[d] = 0;
    }
  }
}
/* Index of the element at `coord` of a row-major tensor broadcast from `shape` (rank ndim,
 * right-aligned) into a result of rank out_ndim. */
NX_UNUSED static int64_t broadcast_index(const int64_t* coord, size_t out_ndim, const int64_t* shape, size_t ndim) {
  int64_t idx = 0;
  for (size_t d = 0; d < ndim; ++d) {
    int64_t c = shape[d] == 1 ? 0 : coord[out_ndim - ndim + d];
    idx = idx * shape[d] + c;
  }
  return idx;
}
NX_UNUSED static int next_coord(int64_t* coord, const int64_t* shape, size_t ndim) {
  for (size_t d = ndim; d-- > 0;) {
    if (++coord[d] < shape[d]) return 1;
    coord[d] = 0;
  }
  return 0;
}

/* A non-contiguous tensor (rank >= 2) holding the row-major values vals of shape: built with
 * its last two dimensions swapped, then transposed back. */
NX_UNUSED static nx_tensor make_noncontig(const double* vals, const int64_t* shape, size_t ndim, nx_dtype dt) {
  int64_t pshape[16], pstrides[16];
  contiguous_strides_of(shape, ndim, pstrides);
  memcpy(pshape, shape, sizeof(int64_t) * ndim);
  pshape[ndim - 2] = shape[ndim - 1];
  pshape[ndim - 1] = shape[ndim - 2];
  int64_t t = pstrides[ndim - 2];
  pstrides[ndim - 2] = pstrides[ndim - 1];
  pstrides[ndim - 1] = t;
  int64_t n = numel_of(shape, ndim);
  double* pdata = malloc(sizeof(double) * (size_t)(n ? n : 1));
  strided_read(vals, pshape, pstrides, 0, ndim, pdata);
  nx_tensor raw = make_from_f64(pdata, pshape, ndim, dt), out = NULL;
  free(pdata);
  NX_OK_(nx_transpose(&out, raw, -1, -2, NULL));
  nx_tensor_free(raw);
  return out;
}

/* ---------------------------------------------------------------- small wrappers */
NX_UNUSED static nx_tensor t_transpose(nx_tensor x, int64_t a, int64_t b) {
  nx_tensor t = NULL;
  NX_OK_(nx_transpose(&t, x, a, b, NULL));
  return t;
}
NX_UNUSED static nx_tensor t_sum_all(nx_tensor x) {
  nx_tensor t = NULL;
  NX_OK_(nx_sum(&t, x, NULL, 0, false, NULL));
  return t;
}
NX_UNUSED static nx_tensor t_grad(nx_tensor x) {
  nx_tensor g = NULL;
  NX_OK_(nx_tensor_grad(&g, x));
  return g;
}
NX_UNUSED static nx_tensor t_requiring_grad(nx_tensor t) {
  NX_OK_(nx_tensor_set_requires_grad(t, true));
  return t;
}

#endif /* NX_CAPI_TEST_H */
