/* Helpers shared by the CMocka tests of tests/nn (layers, optimizers, training, generation,
 * SafeTensors, text) on top of tests/capi/nx_test.h (status macros, leak checks, host reads).
 * Header-only: every tests/nn/test_*.c is its own executable and includes this once.
 *
 * The fixtures come from gen_nn_fixtures.py (PyTorch), in the directory given as argv[1]. A
 * "config" string is the "key=value;key=value" metadata the generator writes for each case. */
#ifndef NX_NN_TEST_H
#define NX_NN_TEST_H

#include "nx_test.h"

/* ---------------------------------------------------------------- fixture files */
static const char* g_fixdir = ".";
/* "<fixture dir>/<name>" in one of 4 rotating static buffers. */
NX_UNUSED static const char* fix_path(const char* name) {
  static char bufs[4][1024];
  static int next = 0;
  char* b = bufs[next++ & 3];
  snprintf(b, sizeof bufs[0], "%s/%s", g_fixdir, name);
  return b;
}
NX_UNUSED static nx_safetensors open_fixture(const char* name) {
  nx_safetensors st = NULL;
  if (nx_safetensors_open(&st, fix_path(name)) != NX_OK) {
    fprintf(stderr, "cannot open fixture %s: %s\n(build the nn_fixtures target: it runs gen_nn_fixtures.py)\n",
            fix_path(name), nx_last_error_message());
    exit(1);
  }
  return st;
}
/* Fixture tensor `name` (the test fails when it is missing). */
NX_UNUSED static nx_tensor st_get(nx_safetensors st, const char* name) {
  nx_tensor t = NULL;
  if (nx_safetensors_get(&t, st, name, CPU, NULL) != NX_OK) {
    print_error("fixture tensor \"%s\": %s\n", name, nx_last_error_message());
    fail();
  }
  return t;
}
NX_UNUSED static bool st_has(nx_safetensors st, const char* name) {
  size_t n = 0;
  NX_OK_(nx_safetensors_count(st, &n));
  for (size_t i = 0; i < n; ++i) {
    const char* s = NULL;
    NX_OK_(nx_safetensors_name(st, i, &s));
    if (strcmp(s, name) == 0) return true;
  }
  return false;
}
NX_UNUSED static nx_tensor st_getf(nx_safetensors st, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
NX_UNUSED static nx_tensor st_getf(nx_safetensors st, const char* fmt, ...) {
  char name[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(name, sizeof name, fmt, ap);
  va_end(ap);
  return st_get(st, name);
}
NX_UNUSED static const char* st_meta(nx_safetensors st, const char* key) {
  const char* v = NULL;
  NX_OK_(nx_safetensors_metadata(st, key, &v));
  if (!v) {
    print_error("fixture metadata \"%s\" is missing\n", key);
    fail();
  }
  return v;
}

/* ---------------------------------------------------------------- config strings */
/* Value of key in "k1=v1;k2=v2" copied to buf; false when absent. */
NX_UNUSED static bool conf_find(const char* conf, const char* key, char* buf, size_t cap) {
  const size_t klen = strlen(key);
  const char* p = conf;
  while (p && *p) {
    const char* end = strchr(p, ';');
    if (!end) end = p + strlen(p);
    if ((size_t)(end - p) > klen && strncmp(p, key, klen) == 0 && p[klen] == '=') {
      size_t len = (size_t)(end - p) - klen - 1;
      if (len >= cap) return false;
      memcpy(buf, p + klen + 1, len);
      buf[len] = '\0';
      return true;
    }
    p = *end ? end + 1 : end;
  }
  return false;
}
NX_UNUSED static const char* conf_str(const char* conf, const char* key) {
  static char buf[4][256];
  static int next = 0;
  char* b = buf[next++ & 3];
  if (!conf_find(conf, key, b, sizeof buf[0])) {
    print_error("config \"%s\" has no key \"%s\"\n", conf, key);
    fail();
  }
  return b;
}
NX_UNUSED static double conf_real(const char* conf, const char* key) {
  char* end = NULL;
  const char* s = conf_str(conf, key);
  double v = strtod(s, &end);
  if (end == s || *end) {
    print_error("config key \"%s\" = \"%s\" is not a number\n", key, s);
    fail();
  }
  return v;
}
NX_UNUSED static int64_t conf_int(const char* conf, const char* key) {
  char* end = NULL;
  const char* s = conf_str(conf, key);
  long long v = strtoll(s, &end, 10);
  if (end == s || *end) {
    print_error("config key \"%s\" = \"%s\" is not an integer\n", key, s);
    fail();
  }
  return (int64_t)v;
}
NX_UNUSED static bool conf_bool(const char* conf, const char* key) { return conf_int(conf, key) != 0; }
NX_UNUSED static bool conf_has(const char* conf, const char* key) {
  char b[256];
  return conf_find(conf, key, b, sizeof b);
}
NX_UNUSED static nx_dtype conf_dtype(const char* conf) {
  const char* d = conf_str(conf, "dt");
  if (strcmp(d, "f32") == 0) return NX_F32;
  if (strcmp(d, "f64") == 0) return NX_F64;
  print_error("config dt=%s is not f32 or f64\n", d);
  fail();
  return NX_F32;
}
/* The i-th comma-separated item of list (copied to buf); false past the end. */
NX_UNUSED static bool list_item(const char* list, size_t i, char* buf, size_t cap) {
  const char* p = list;
  for (size_t k = 0; k < i; ++k) {
    p = strchr(p, ',');
    if (!p) return false;
    ++p;
  }
  if (!*p) return false;
  size_t len = strcspn(p, ",");
  if (len >= cap) return false;
  memcpy(buf, p, len);
  buf[len] = '\0';
  return true;
}

/* ---------------------------------------------------------------- comparisons */
/* Tolerances of the suite: |got - want| <= atol + rtol |want|. */
#define F32_ATOL 1e-5
#define F32_RTOL 1e-4
#define F64_ATOL 1e-10
#define F64_RTOL 1e-10

/* Largest |got - want| and largest error / (atol + rtol |want|) seen so far, per dtype (0: f32,
 * 1: f64): printed at the end, as the headroom the tolerances leave. */
static double g_max_abs[2], g_max_ratio[2];
static char g_max_where[2][160];

/* Compares got with want (same dtype, same shape, values within atol/rtol); returns the max abs
 * error. Fails the test with the first offending element otherwise. With atol = rtol = 0 the
 * values must be bitwise equal (as doubles). */
NX_UNUSED static double expect_close_(nx_tensor got, nx_tensor want, double atol, double rtol, const char* what,
                                      const char* file, int line) {
  nx_dtype gd = tensor_dtype(got), wd = tensor_dtype(want);
  if (gd != wd) {
    print_error("%s: dtype %s, expected %s\n", what, nx_dtype_name(gd), nx_dtype_name(wd));
    _fail(file, line);
  }
  size_t gn = 0, wn = 0;
  int64_t gs[16], ws[16];
  NX_OK_(nx_tensor_ndim(got, &gn));
  NX_OK_(nx_tensor_ndim(want, &wn));
  NX_OK_(nx_tensor_shape(got, gs, 16));
  NX_OK_(nx_tensor_shape(want, ws, 16));
  bool same = gn == wn;
  for (size_t d = 0; same && d < gn; ++d) same = gs[d] == ws[d];
  if (!same) {
    char a[200] = "", b[200] = "";
    for (size_t d = 0; d < gn; ++d) snprintf(a + strlen(a), sizeof a - strlen(a), "%s%lld", d ? "," : "", (long long)gs[d]);
    for (size_t d = 0; d < wn; ++d) snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld", d ? "," : "", (long long)ws[d]);
    print_error("%s: shape [%s], expected [%s]\n", what, a, b);
    _fail(file, line);
  }
  int64_t n = tensor_numel(got);
  double* g = host_f64(got);
  double* w = host_f64(want);
  double max_abs = 0.0, max_ratio = 0.0;
  int64_t bad = -1, nbad = 0;
  for (int64_t i = 0; i < n; ++i) {
    double e = fabs(g[i] - w[i]);
    bool ok = isfinite(w[i]) ? (isfinite(g[i]) && e <= atol + rtol * fabs(w[i])) : (g[i] == w[i] || (isnan(g[i]) && isnan(w[i])));
    if (!ok) {
      if (bad < 0) bad = i;
      ++nbad;
    }
    if (isfinite(e)) {
      if (e > max_abs) max_abs = e;
      if (atol + rtol * fabs(w[i]) > 0 && e / (atol + rtol * fabs(w[i])) > max_ratio) max_ratio = e / (atol + rtol * fabs(w[i]));
    }
  }
  if (nbad) {
    print_error("%s: %lld of %lld elements differ; first at %lld: got %.17g, expected %.17g; max abs error %.3g "
                "(atol %g, rtol %g)\n",
                what, (long long)nbad, (long long)n, (long long)bad, g[bad], w[bad], max_abs, atol, rtol);
    free(g);
    free(w);
    _fail(file, line);
  }
  /* The comparison must be able to fail: a perturbed expectation is rejected. */
  if (n && (atol > 0 || rtol > 0)) {
    int64_t k = n / 2;
    double wrong = w[k] + 10.0 * (atol + rtol * fabs(w[k]));
    if (isfinite(wrong) && fabs(g[k] - wrong) <= atol + rtol * fabs(wrong)) {
      print_error("%s: the comparison accepted a perturbed expectation\n", what);
      _fail(file, line);
    }
  }
  const int fi = gd == NX_F64 ? 1 : 0;
  if (max_abs > g_max_abs[fi]) g_max_abs[fi] = max_abs;
  if (max_ratio > g_max_ratio[fi]) {
    g_max_ratio[fi] = max_ratio;
    snprintf(g_max_where[fi], sizeof g_max_where[fi], "%s", what);
  }
  free(g);
  free(w);
  return max_abs;
}
#define expect_close(got, want, atol, rtol, what) expect_close_(got, want, atol, rtol, what, __FILE__, __LINE__)
/* With the suite's tolerance for the tensors' dtype. */
NX_UNUSED static double expect_close_dt_(nx_tensor got, nx_tensor want, const char* what, const char* file, int line) {
  const bool f64 = tensor_dtype(want) == NX_F64;
  return expect_close_(got, want, f64 ? F64_ATOL : F32_ATOL, f64 ? F64_RTOL : F32_RTOL, what, file, line);
}
#define expect_close_dt(got, want, what) expect_close_dt_(got, want, what, __FILE__, __LINE__)

/* Bitwise equality of two tensors' bytes (same dtype and numel). */
NX_UNUSED static void expect_identical_(nx_tensor a, nx_tensor b, const char* what, const char* file, int line) {
  nx_dtype da = tensor_dtype(a), db = tensor_dtype(b);
  int64_t na = tensor_numel(a), nb = tensor_numel(b);
  if (da != db || na != nb) {
    print_error("%s: %s[%lld] vs %s[%lld]\n", what, nx_dtype_name(da), (long long)na, nx_dtype_name(db), (long long)nb);
    _fail(file, line);
  }
  size_t bytes = (size_t)na * nx_dtype_size(da);
  void* pa = malloc(bytes + 1);
  void* pb = malloc(bytes + 1);
  NX_OK_(nx_tensor_copy_to_host(a, pa, bytes, NULL));
  NX_OK_(nx_tensor_copy_to_host(b, pb, bytes, NULL));
  int diff = memcmp(pa, pb, bytes);
  free(pa);
  free(pb);
  if (diff) {
    print_error("%s: the tensors are not bitwise identical\n", what);
    _fail(file, line);
  }
}
#define expect_identical(a, b, what) expect_identical_(a, b, what, __FILE__, __LINE__)

NX_UNUSED static void print_headroom(const char* suite) {
  printf("%s: max abs error f32 %.3g, f64 %.3g; worst error/tolerance f32 %.3f (%s), f64 %.3f (%s)\n", suite,
         g_max_abs[0], g_max_abs[1], g_max_ratio[0], g_max_where[0], g_max_ratio[1], g_max_where[1]);
}

/* ---------------------------------------------------------------- small wrappers */
NX_UNUSED static nx_tensor t_forward(nx_module m, nx_tensor x) {
  nx_tensor y = NULL;
  NX_OK_(nx_module_forward(&y, m, x, NULL));
  return y;
}
NX_UNUSED static nx_tensor t_param(nx_module m, size_t i, const char** name) {
  nx_tensor p = NULL;
  NX_OK_(nx_module_parameter(m, i, name, &p));
  return p;
}
NX_UNUSED static size_t param_count(nx_module m) {
  size_t n = 0;
  NX_OK_(nx_module_parameter_count(m, &n));
  return n;
}
NX_UNUSED static nx_tensor t_i64(const int64_t* v, const int64_t* shape, size_t ndim) {
  return make_tensor(v, shape, ndim, NX_I64);
}

/* A GPT/block config from a fixture config string (keys vocab, context, dim, layers, heads,
 * kv_heads, ffn_hidden, alibi, rope, swiglu, rms_norm, tie; the absent ones get block defaults). */
NX_UNUSED static nx_transformer_config transformer_config(const char* c) {
  nx_transformer_config t;
  memset(&t, 0, sizeof t);
  t.struct_size = sizeof t;
  t.vocab = conf_has(c, "vocab") ? conf_int(c, "vocab") : 1;
  t.context = conf_has(c, "context") ? conf_int(c, "context") : 1;
  t.dim = conf_int(c, "dim");
  t.layers = conf_has(c, "layers") ? conf_int(c, "layers") : 1;
  t.heads = conf_int(c, "heads");
  t.kv_heads = conf_int(c, "kv_heads");
  t.ffn_hidden = conf_int(c, "ffn_hidden");
  t.alibi = conf_bool(c, "alibi");
  t.rope = conf_bool(c, "rope");
  t.swiglu = conf_bool(c, "swiglu");
  t.rms_norm = conf_bool(c, "rms_norm");
  t.tie_embeddings = conf_has(c, "tie") ? conf_bool(c, "tie") : true;
  t.dropout = 0.0;
  return t;
}

/* argv[1]: the fixture directory (default "."). */
NX_UNUSED static void parse_fixdir(int argc, char** argv) {
  if (argc > 1) g_fixdir = argv[1];
}

#endif /* NX_NN_TEST_H */
