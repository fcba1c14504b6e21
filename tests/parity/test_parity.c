/* PyTorch parity test: `test_parity FIXTURES.safetensors [cuda | --device cpu|cuda]`.
 *
 * gen_fixtures.py records, for every case k, the inputs, PyTorch's outputs, a random upstream
 * gradient per output and PyTorch's gradient of every input that requires grad, plus a
 * metadata line "case.k" (op name and attributes). This program replays each case through the
 * public C API only: load the inputs, mark the ones listed in grad= as requiring grad, apply the
 * transposes tr<i>=d0,d1 and strided slices sl<i>=axis,start,end,step (non-contiguous inputs),
 * run the op (parity_ops_*.c), compare every
 * output, call nx_backward(out, gout) and compare every input gradient. Tolerances:
 * |got - want| <= atol + rtol |want| with atol 1e-5 / rtol 1e-4 for f32 tensors, 1e-10 / 1e-10
 * for f64, exact for integer and bool tensors. Every case runs at every SIMD level the processor
 * has. Each comparison is also checked to be able to fail (a perturbed expectation must be
 * rejected), every op of the tables needs a fixture, and no handle may outlive the test.
 *
 * With `cuda` (the fixtures of `gen_fixtures.py --device cuda`), every input and upstream
 * gradient is loaded on the CPU and moved to CUDA device 0 with nx_tensor_to (inputs are marked
 * requiring grad after the move, so the leaves live on the GPU), the ops and their backward run
 * there, and each result (which must be on that device) is copied back to the host and compared
 * with the same tolerances; one pass, no SIMD levels. Exit code 77 (a skip for ctest) when no
 * CUDA device is usable or the fixture file does not exist (it is built only on a GPU machine).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parity.h"

#define MIN_BACKWARD_OPS 45 /* the coverage floor */
#define MAX_OPS 128
#define EXIT_SKIP 77 /* ctest's SKIP_RETURN_CODE */

/* ---------------------------------------------------------------- metadata */
bool parity_meta_error = false;

/* The value of key in "k1=v1;k2=v2" (not NUL-terminated: *len is its length), or NULL. */
static const char* meta_find(const char* meta, const char* key, size_t* len) {
  const size_t klen = strlen(key);
  const char* p = meta;
  while (p && *p) {
    const char* end = strchr(p, ';');
    if (!end) end = p + strlen(p);
    if ((size_t)(end - p) > klen && strncmp(p, key, klen) == 0 && p[klen] == '=') {
      *len = (size_t)(end - p) - klen - 1;
      return p + klen + 1;
    }
    p = *end ? end + 1 : end;
  }
  return NULL;
}

/* Copies key's value into buf; false (and parity_meta_error) when absent or too long. */
static bool meta_value(const parity_case* c, const char* key, char* buf, size_t cap) {
  size_t len = 0;
  const char* v = meta_find(c->meta, key, &len);
  if (!v || len >= cap) {
    fprintf(stderr, "parity: case %s: metadata key \"%s\" is %s\n", c->id, key, v ? "too long" : "missing");
    parity_meta_error = true;
    if (cap) buf[0] = '\0';
    return false;
  }
  memcpy(buf, v, len);
  buf[len] = '\0';
  return true;
}

bool meta_has(const parity_case* c, const char* key) {
  size_t len = 0;
  return meta_find(c->meta, key, &len) != NULL;
}

int64_t meta_int(const parity_case* c, const char* key) {
  char buf[64], *end = NULL;
  if (!meta_value(c, key, buf, sizeof buf)) return 0;
  long long v = strtoll(buf, &end, 10);
  if (end == buf || *end) parity_meta_error = true;
  return (int64_t)v;
}

double meta_real(const parity_case* c, const char* key) {
  char buf[64], *end = NULL;
  if (!meta_value(c, key, buf, sizeof buf)) return 0.0;
  double v = strtod(buf, &end);
  if (end == buf || *end) parity_meta_error = true;
  return v;
}

size_t meta_ints(const parity_case* c, const char* key, int64_t* out, size_t cap) {
  char buf[256];
  if (!meta_value(c, key, buf, sizeof buf)) return 0;
  size_t n = 0;
  const char* p = buf;
  while (*p) {
    char* end = NULL;
    long long v = strtoll(p, &end, 10);
    if (end == p || n == cap || (*end && *end != ',')) {
      parity_meta_error = true;
      return n;
    }
    out[n++] = (int64_t)v;
    p = *end ? end + 1 : end;
  }
  return n;
}

nx_dtype meta_dtype(const parity_case* c, const char* key) {
  static const struct { const char* name; nx_dtype dt; } names[] = {
      {"f32", NX_F32}, {"f64", NX_F64}, {"i32", NX_I32}, {"i64", NX_I64}, {"bool", NX_BOOL}};
  char buf[16];
  if (meta_value(c, key, buf, sizeof buf))
    for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i)
      if (strcmp(buf, names[i].name) == 0) return names[i].dt;
  parity_meta_error = true;
  return NX_F32;
}

void free_all(nx_tensor* ts, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    nx_tensor_free(ts[i]);
    ts[i] = NULL;
  }
}

/* ---------------------------------------------------------------- reporting */
static const char* g_level = ""; /* SIMD level of the current pass, or "cuda" */
/* Where the ops run: inputs and upstream gradients are moved there, results must be there. */
static nx_device g_device = {NX_CPU, 0};
/* Largest |got - want| / (atol + rtol |want|) seen in passing f32 and f64 comparisons: how much
 * headroom the tolerances leave (printed at the end). */
static double g_worst_ratio[2] = {0.0, 0.0};
static char g_worst_case[2][48];

static void report(const parity_case* c, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "FAIL [%s] case %s (%s): ", g_level, c->id, c->meta);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

/* ---------------------------------------------------------------- comparison */
/* The elements of t in row-major order, as doubles (malloc'ed; *n set). NULL on failure. */
static double* host_values(nx_tensor t, int64_t* n) {
  nx_dtype dt;
  if (nx_tensor_dtype(t, &dt) != NX_OK || nx_tensor_numel(t, n) != NX_OK) return NULL;
  const size_t sz = nx_dtype_size(dt), count = (size_t)*n;
  void* raw = malloc(count * sz + 1);
  double* v = malloc(count * sizeof(double) + 1);
  if (!raw || !v || nx_tensor_copy_to_host(t, raw, count * sz, NULL) != NX_OK) {
    free(raw);
    free(v);
    return NULL;
  }
  for (size_t i = 0; i < count; ++i) {
    switch (dt) {
      case NX_F32: v[i] = ((const float*)raw)[i]; break;
      case NX_F64: v[i] = ((const double*)raw)[i]; break;
      case NX_I32: v[i] = ((const int32_t*)raw)[i]; break;
      case NX_I64: v[i] = (double)((const int64_t*)raw)[i]; break;
      case NX_BOOL: v[i] = ((const uint8_t*)raw)[i] ? 1.0 : 0.0; break;
      default: v[i] = NAN; break;
    }
  }
  free(raw);
  return v;
}

static bool within(double got, double want, double atol, double rtol) {
  if (isnan(want) || isnan(got)) return isnan(want) && isnan(got);
  if (isinf(want) || isinf(got)) return got == want;
  return fabs(got - want) <= atol + rtol * fabs(want);
}

/* Compares got against want (dtype, shape, values); reports and returns false on a mismatch. */
static bool compare(const parity_case* c, const char* what, nx_tensor got, nx_tensor want) {
  nx_dtype gd, wd;
  size_t gn = 0, wn = 0;
  int64_t gs[16], ws[16];
  if (nx_tensor_dtype(got, &gd) || nx_tensor_dtype(want, &wd) || nx_tensor_ndim(got, &gn) ||
      nx_tensor_ndim(want, &wn) || gn > 16 || wn > 16 || nx_tensor_shape(got, gs, 16) ||
      nx_tensor_shape(want, ws, 16)) {
    report(c, "%s: cannot inspect the tensors: %s", what, nx_last_error_message());
    return false;
  }
  nx_device gdev = {NX_CPU, -1};
  if (nx_tensor_device(got, &gdev) != NX_OK || gdev.type != g_device.type || gdev.index != g_device.index) {
    report(c, "%s: computed on %s:%d, expected on %s:%d", what, gdev.type == NX_CUDA ? "cuda" : "cpu",
           (int)gdev.index, g_device.type == NX_CUDA ? "cuda" : "cpu", (int)g_device.index);
    return false;
  }
  if (gd != wd) {
    report(c, "%s: dtype %s, PyTorch has %s", what, nx_dtype_name(gd), nx_dtype_name(wd));
    return false;
  }
  bool same_shape = gn == wn;
  for (size_t d = 0; same_shape && d < gn; ++d) same_shape = gs[d] == ws[d];
  if (!same_shape) {
    char a[160] = "", b[160] = "";
    for (size_t d = 0; d < gn; ++d) snprintf(a + strlen(a), sizeof a - strlen(a), "%s%lld", d ? "," : "", (long long)gs[d]);
    for (size_t d = 0; d < wn; ++d) snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld", d ? "," : "", (long long)ws[d]);
    report(c, "%s: shape [%s], PyTorch has [%s]", what, a, b);
    return false;
  }
  const double atol = gd == NX_F64 ? 1e-10 : gd == NX_F32 ? 1e-5 : 0.0;
  const double rtol = gd == NX_F64 ? 1e-10 : gd == NX_F32 ? 1e-4 : 0.0;
  int64_t n = 0, n2 = 0;
  double* g = host_values(got, &n);
  double* w = host_values(want, &n2);
  bool ok = g && w && n == n2;
  if (!ok) {
    report(c, "%s: cannot read the values: %s", what, nx_last_error_message());
  } else if (n == 0) {
    report(c, "%s: empty tensor, nothing to compare", what);
    ok = false;
  } else {
    int64_t bad = 0, worst = 0;
    double max_err = -1.0, max_ratio = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      double err = isnan(g[i]) != isnan(w[i]) ? INFINITY : fabs(g[i] - w[i]);
      if (isnan(err)) err = 0.0; /* both NaN, or equal infinities */
      if (!within(g[i], w[i], atol, rtol)) ++bad;
      if (err > max_err) max_err = err, worst = i;
      if (atol > 0.0 && err / (atol + rtol * fabs(w[i])) > max_ratio) max_ratio = err / (atol + rtol * fabs(w[i]));
    }
    const int fi = gd == NX_F64 ? 1 : 0;
    if (!bad && atol > 0.0 && max_ratio > g_worst_ratio[fi]) {
      g_worst_ratio[fi] = max_ratio;
      snprintf(g_worst_case[fi], sizeof g_worst_case[fi], "%s %s, %s", c->id, what, g_level);
    }
    if (bad) {
      report(c, "%s: %lld of %lld elements differ; max abs error %.3g at element %lld (got %.10g, PyTorch %.10g); "
                "tolerance atol %.0e rtol %.0e",
             what, (long long)bad, (long long)n, max_err, (long long)worst, g[worst], w[worst], atol, rtol);
      ok = false;
    } else {
      /* The comparison must be able to fail: a perturbed expectation has to be rejected. */
      const int64_t k = n / 2;
      const double wrong = !isfinite(w[k]) ? 0.0 : w[k] + 10.0 * (atol + rtol * fabs(w[k])) + (atol == 0.0 ? 1.0 : 0.0);
      if (within(g[k], wrong, atol, rtol)) {
        report(c, "%s: comparison accepted a perturbed expectation (element %lld: %.10g vs %.10g)", what,
               (long long)k, g[k], wrong);
        ok = false;
      }
    }
  }
  free(g);
  free(w);
  return ok;
}

/* ---------------------------------------------------------------- running cases */
static const parity_op* find_op(const char* name) {
  const parity_op* tables[] = {parity_math_ops, parity_tensor_ops};
  for (size_t t = 0; t < 2; ++t)
    for (const parity_op* op = tables[t]; op->name; ++op)
      if (strcmp(op->name, name) == 0) return op;
  return NULL;
}

/* Loads fixture tensor "<id>.<kind><i>" on the CPU; with on_device, moves it to g_device (the
 * CPU copy is freed; it does not require grad, so the moved tensor is a leaf there). Expected
 * values stay on the CPU: they are only read back. */
static nx_tensor load(nx_safetensors st, const parity_case* c, const char* kind, size_t i, bool on_device) {
  char name[64];
  nx_tensor t = NULL, moved = NULL;
  snprintf(name, sizeof name, "%s.%s%zu", c->id, kind, i);
  if (nx_safetensors_get(&t, st, name, (nx_device){NX_CPU, 0}, NULL) != NX_OK) {
    report(c, "fixture tensor %s: %s", name, nx_last_error_message());
    return NULL;
  }
  if (!on_device || g_device.type == NX_CPU) return t;
  const nx_status s = nx_tensor_to(&moved, t, g_device, NULL);
  nx_tensor_free(t);
  if (s != NX_OK) {
    report(c, "moving fixture tensor %s to the device: %s", name, nx_last_error_message());
    return NULL;
  }
  return moved;
}

/* Runs one case; true when every output and gradient matches. */
static bool run_case(nx_safetensors st, const parity_case* c, const char* op) {
  nx_tensor leaf[PARITY_MAX_IO] = {NULL}, view[PARITY_MAX_IO] = {NULL}, sliced[PARITY_MAX_IO] = {NULL};
  nx_tensor use[PARITY_MAX_IO] = {NULL};
  nx_tensor out[PARITY_MAX_IO] = {NULL}, gout[PARITY_MAX_IO] = {NULL};
  int64_t gidx[PARITY_MAX_IO];
  bool ok = true;
  parity_meta_error = false;
  const parity_op* entry = find_op(op);
  parity_fn fn = entry ? entry->fn : NULL;
  const size_t ng = meta_has(c, "grad") ? meta_ints(c, "grad", gidx, PARITY_MAX_IO) : 0;
  if (!fn) {
    report(c, "no C implementation for op \"%s\"", op);
    return false;
  }
  if (c->nin == 0 || c->nin > PARITY_MAX_IO || c->nout == 0 || c->nout > PARITY_MAX_IO || parity_meta_error) {
    report(c, "bad nin/nout/grad metadata");
    return false;
  }
  for (size_t i = 0; ok && i < c->nin; ++i) ok = (leaf[i] = load(st, c, "in", i, true)) != NULL;
  for (size_t k = 0; ok && k < ng; ++k) {
    if (gidx[k] < 0 || (size_t)gidx[k] >= c->nin || nx_tensor_set_requires_grad(leaf[gidx[k]], true) != NX_OK) {
      report(c, "cannot make input %lld require grad: %s", (long long)gidx[k], nx_last_error_message());
      ok = false;
    }
  }
  /* Non-contiguous inputs: tr<i>=d0,d1 transposes input i, then sl<i>=axis,start,end,step slices
   * it with a step; the gradient is still compared on the leaf. */
  for (size_t i = 0; ok && i < c->nin; ++i) {
    char key[16];
    int64_t a[4];
    use[i] = leaf[i];
    snprintf(key, sizeof key, "tr%zu", i);
    if (meta_has(c, key)) {
      if (meta_ints(c, key, a, 2) != 2 || nx_transpose(&view[i], use[i], a[0], a[1], NULL) != NX_OK) {
        report(c, "cannot transpose input %zu: %s", i, nx_last_error_message());
        ok = false;
      }
      use[i] = view[i];
    }
    snprintf(key, sizeof key, "sl%zu", i);
    if (ok && meta_has(c, key)) {
      if (meta_ints(c, key, a, 4) != 4 || nx_slice(&sliced[i], use[i], a[0], a[1], a[2], a[3], NULL) != NX_OK) {
        report(c, "cannot slice input %zu: %s", i, nx_last_error_message());
        ok = false;
      }
      use[i] = sliced[i];
    }
  }
  if (ok) {
    nx_status s = fn(c, use, out);
    if (s != NX_OK) {
      report(c, "%s: %s", nx_status_string(s), nx_last_error_message());
      ok = false;
    } else if (parity_meta_error) {
      report(c, "the op's metadata is incomplete");
      ok = false;
    }
  }
  for (size_t j = 0; ok && j < c->nout; ++j) {
    char what[32];
    nx_tensor want = load(st, c, "out", j, false);
    snprintf(what, sizeof what, "out%zu", j);
    ok = want && compare(c, what, out[j], want);
    nx_tensor_free(want);
  }
  for (size_t j = 0; ok && ng && j < c->nout; ++j) {
    ok = (gout[j] = load(st, c, "gout", j, true)) != NULL;
    /* several outputs (split) may share graph nodes: keep the graph until the last one */
    const nx_status s = !ok ? NX_OK
                        : j + 1 < c->nout ? nx_backward_ex(out[j], gout[j], true, false, NULL)
                                          : nx_backward(out[j], gout[j], NULL);
    if (s != NX_OK) {
      report(c, "nx_backward(out%zu): %s", j, nx_last_error_message());
      ok = false;
    }
  }
  for (size_t k = 0; ok && k < ng; ++k) {
    char what[32];
    nx_tensor grad = NULL, want = NULL;
    snprintf(what, sizeof what, "grad%lld", (long long)gidx[k]);
    if (nx_tensor_grad(&grad, leaf[gidx[k]]) != NX_OK || !grad) {
      report(c, "%s: no gradient was accumulated (%s)", what, nx_last_error_message());
      ok = false;
    } else {
      want = load(st, c, "grad", (size_t)gidx[k], false);
      ok = want && compare(c, what, grad, want);
    }
    nx_tensor_free(grad);
    nx_tensor_free(want);
  }
  free_all(out, PARITY_MAX_IO);
  free_all(gout, PARITY_MAX_IO);
  free_all(sliced, PARITY_MAX_IO);
  free_all(view, PARITY_MAX_IO);
  free_all(leaf, PARITY_MAX_IO);
  return ok;
}

/* ---------------------------------------------------------------- main */
typedef struct {
  char name[32];
  bool backward, failed;
} op_stat;

static op_stat* stat_for(op_stat* stats, size_t* nstats, const char* name) {
  for (size_t i = 0; i < *nstats; ++i)
    if (strcmp(stats[i].name, name) == 0) return &stats[i];
  if (*nstats == MAX_OPS) return NULL;
  op_stat* s = &stats[(*nstats)++];
  snprintf(s->name, sizeof s->name, "%s", name);
  s->backward = s->failed = false;
  return s;
}

static int usage(const char* argv0) {
  fprintf(stderr, "usage: %s FIXTURES.safetensors [cuda | cpu | --device cuda|cpu]\n", argv0);
  return 2;
}

int main(int argc, char** argv) {
  const char* path = NULL;
  const char* device = NULL;
  for (int a = 1; a < argc; ++a) {
    if (strcmp(argv[a], "--device") == 0) {
      if (device || ++a == argc) return usage(argv[0]);
      device = argv[a];
    } else if (strncmp(argv[a], "--device=", 9) == 0) {
      if (device) return usage(argv[0]);
      device = argv[a] + 9;
    } else if (!path) {
      path = argv[a];
    } else if (!device) {
      device = argv[a];
    } else {
      return usage(argv[0]);
    }
  }
  if (!path || (device && strcmp(device, "cpu") != 0 && strcmp(device, "cuda") != 0)) return usage(argv[0]);
  const bool cuda = device && strcmp(device, "cuda") == 0;
  if (cuda) {
    if (nx_cuda_device_count() <= 0) {
      printf("parity: skipped: no CUDA device (nx_cuda_device_count() == 0)\n");
      return EXIT_SKIP;
    }
    FILE* f = fopen(path, "rb");
    if (!f) { /* generated only by the parity_fixtures_cuda target, on a machine with a GPU */
      printf("parity: skipped: no CUDA fixture file %s (build the target parity_fixtures_cuda with a CUDA torch)\n",
             path);
      return EXIT_SKIP;
    }
    fclose(f);
    g_device = (nx_device){NX_CUDA, 0};
    nx_cuda_set_tf32(false); /* full f32 matmul, as the fixtures were computed (its default too) */
  }
  nx_safetensors st = NULL;
  if (nx_safetensors_open(&st, path) != NX_OK) {
    fprintf(stderr, "parity: cannot open %s: %s\n", path, nx_last_error_message());
    return 1;
  }
  const char* ncases_text = NULL;
  nx_safetensors_metadata(st, "ncases", &ncases_text);
  const long ncases = ncases_text ? strtol(ncases_text, NULL, 10) : 0;
  if (ncases <= 0) {
    fprintf(stderr, "parity: %s has no \"ncases\" metadata\n", path);
    nx_safetensors_free(st);
    return 1;
  }
  const char *fixture_device = NULL, *torch_version = NULL;
  nx_safetensors_metadata(st, "device", &fixture_device); /* absent in CPU fixtures */
  nx_safetensors_metadata(st, "torch_version", &torch_version);
  char fixture_info[96];
  snprintf(fixture_info, sizeof fixture_info, "torch %s on %s", torch_version ? torch_version : "?",
           fixture_device ? fixture_device : "cpu");
  if (cuda && !(fixture_device && strcmp(fixture_device, "cuda") == 0))
    fprintf(stderr, "parity: note: %s holds fixtures computed by %s, not by torch on CUDA\n", path, fixture_info);

  static op_stat stats[MAX_OPS];
  size_t nstats = 0;
  long failures = 0;
  int levels_run = 0;
  char levels_text[64] = "", original[16];
  snprintf(original, sizeof original, "%s", nx_cpu_simd_level());
  /* On the CPU every case runs at each SIMD level the processor has; on CUDA once. */
  const char* cpu_levels[] = {"scalar", "avx2", "avx512"};
  const char* cuda_pass[] = {"cuda"};
  const char** levels = cuda ? cuda_pass : cpu_levels;
  const size_t nlevels = cuda ? 1 : sizeof cpu_levels / sizeof cpu_levels[0];
  for (size_t l = 0; l < nlevels; ++l) {
    if (!cuda && nx_cpu_set_simd_level(levels[l]) != NX_OK) { /* the processor lacks it */
      nx_clear_error();
      continue;
    }
    g_level = levels[l];
    ++levels_run;
    snprintf(levels_text + strlen(levels_text), sizeof levels_text - strlen(levels_text), " %s", levels[l]);
    for (long i = 0; i < ncases; ++i) {
      char id[32], key[48], op[32];
      const char* meta = NULL;
      snprintf(id, sizeof id, "c%03ld", i);
      snprintf(key, sizeof key, "case.%s", id);
      parity_case c = {id, "", 0, 0};
      if (nx_safetensors_metadata(st, key, &meta) != NX_OK || !meta) {
        fprintf(stderr, "FAIL [%s] case %s: no metadata \"%s\"\n", g_level, id, key);
        ++failures;
        continue;
      }
      c.meta = meta;
      parity_meta_error = false;
      c.nin = (size_t)meta_int(&c, "nin");
      c.nout = (size_t)meta_int(&c, "nout");
      meta_value(&c, "op", op, sizeof op);
      op_stat* s = stat_for(stats, &nstats, op);
      bool ok = !parity_meta_error && s && run_case(st, &c, op);
      if (s) {
        s->backward |= meta_has(&c, "grad");
        s->failed |= !ok;
      }
      if (!ok) ++failures;
    }
  }
  if (!cuda) nx_cpu_set_simd_level(original);
  nx_safetensors_free(st);

  /* Every op the tables can run must have fixtures (a generator that lost cases must not pass). */
  const parity_op* tables[] = {parity_math_ops, parity_tensor_ops};
  for (size_t t = 0; t < 2; ++t)
    for (const parity_op* op = tables[t]; op->name; ++op) {
      bool found = false;
      for (size_t i = 0; i < nstats && !found; ++i) found = strcmp(stats[i].name, op->name) == 0;
      if (!found) {
        fprintf(stderr, "FAIL: op \"%s\" has no fixture case\n", op->name);
        ++failures;
      }
    }
  size_t nbackward = 0, nforward = 0, ncomposite = 0;
  char composites[128] = "";
  for (size_t i = 0; i < nstats; ++i) {
    const parity_op* entry = find_op(stats[i].name);
    if (stats[i].failed || !entry) continue;
    if (entry->composite) {
      snprintf(composites + strlen(composites), sizeof composites - strlen(composites), "%s%s",
               ncomposite++ ? ", " : "", stats[i].name);
    } else if (stats[i].backward) {
      ++nbackward;
    } else {
      ++nforward;
    }
  }
  if (levels_run == 0) {
    fprintf(stderr, "FAIL: no SIMD level could be selected\n");
    ++failures;
  }
  if (nbackward < MIN_BACKWARD_OPS) {
    fprintf(stderr, "FAIL: only %zu ops verified forward+backward, fewer than the required %d\n", nbackward,
            MIN_BACKWARD_OPS);
    ++failures;
  }
  const int64_t live = nx_live_tensor_count();
  if (live != 0) {
    fprintf(stderr, "FAIL: %lld tensor handles still alive at exit\n", (long long)live);
    ++failures;
  }
  if (cuda) {
    printf("parity: device cuda:%d, fixtures from %s; worst error/tolerance ratio f32 %.3g (%s), f64 %.3g (%s)\n",
           (int)g_device.index, fixture_info, g_worst_ratio[0], g_worst_case[0], g_worst_ratio[1], g_worst_case[1]);
    printf("parity: %zu ops forward+backward verified against PyTorch on CUDA\n", nbackward);
    printf("parity: %zu forward-only ops, %zu composite checks (%s), %ld cases on cuda:%d, %ld failures\n", nforward,
           ncomposite, composites, ncases, (int)g_device.index, failures);
    return failures ? 1 : 0;
  }
  printf("parity: SIMD levels tested:%s; worst error/tolerance ratio f32 %.3g (%s), f64 %.3g (%s)\n",
         levels_text, g_worst_ratio[0], g_worst_case[0], g_worst_ratio[1], g_worst_case[1]);
  printf("parity: %zu ops forward+backward verified against PyTorch\n", nbackward);
  printf("parity: %zu forward-only ops, %zu composite checks (%s), %ld cases at %d SIMD levels, %ld failures\n",
         nforward, ncomposite, composites, ncases, levels_run, failures);
  return failures ? 1 : 0;
}
