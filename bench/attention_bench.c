/* Flash attention benchmarks through the C API (bf16). Prints one JSON object per line.
 * bench/attention_bench.py runs `decode` and `memory` from here; its grid runs ours through the
 * Python module beside torch SDPA on the same tensors (this `grid` is the C API alone).
 * Inputs and upstream gradients are random; q/k/v gradients accumulate across iterations.
 *   attention_bench grid     : batch x seq = 16k tokens, hidden 2048, head_dim 64/128, causal or not
 *   attention_bench decode   : batch 8, 32 heads, head_dim 128, one query against an 8k cache
 *                              (bf16, then the same cache in I8 and F8E4M3 with per-row scales)
 *   attention_bench memory   : peak device memory of forward+backward at 4k, 16k, 64k tokens
 *   attention_bench one D SEQ causal|full : one shape of the grid, one forward then one forward
 *                              and backward, for a profiler (ncu) to attach to
 *   attention_bench deterministic : what deterministic mode (nx_runtime_set_deterministic) costs
 *                              the backward, on grid shapes (issue 18: at most 10%)
 *   attention_bench fp8      : the FP8 forward (nx_flash_attention_fp8, q/k/v quantized per head)
 *                              against the bf16 forward on the same inputs, head_dim 128, grid
 *                              shapes (issue 18: at least 1.5x), with its output's difference;
 *                              FP8_VARIANTS="VAR=VALUE ..." adds the FP8 forward under each setting
 *   attention_bench fp8one SEQ causal|full : one FP8 forward after a warm-up, for a profiler
 *   attention_bench fwdvar [SEQ,SEQ...] : the bf16 forward's call time under the default and each
 *                              FWD_VARIANTS="VAR=VALUE ..." setting, alternated (fwd_variants) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nexus.h>

#include "example_util.h" /* CHECK, ex_now: shared with the examples */

static const nx_device GPU = {NX_CUDA, 0};
static nx_stream S;

static nx_tensor rnd(int64_t b, int64_t h, int64_t t, int64_t d, int grad) {
  int64_t shape[4] = {b, h, t, d};
  nx_tensor f, x;
  CHECK(nx_tensor_randn(&f, shape, 4, NX_F32, GPU, S));
  CHECK(nx_cast(&x, f, NX_BF16, S));
  nx_tensor_free(f);
  if (grad) CHECK(nx_tensor_set_requires_grad(x, true));
  return x;
}

/* seconds per call of fwd (and of fwd+bwd when backward): one warm-up call, then iters timed
 * calls. backward uses one random upstream gradient (made in the warm-up, outside the timing) and
 * lets the q/k/v gradients accumulate across calls, as over micro-batches. */
static double run(nx_tensor q, nx_tensor k, nx_tensor v, int causal, int backward, int iters) {
  nx_tensor o, g = NULL;
  double t0 = 0;
  for (int i = -1; i < iters; ++i) {
    if (i == 0) { CHECK(nx_stream_synchronize(S)); t0 = ex_now(); }
    CHECK(nx_flash_attention(&o, q, k, v, causal, false, 0.0, S));
    if (backward) {
      if (!g) {
        int64_t shape[4];
        CHECK(nx_tensor_shape(o, shape, 4));
        g = rnd(shape[0], shape[1], shape[2], shape[3], 0);
      }
      CHECK(nx_backward(o, g, NULL, S));
    }
    nx_tensor_free(o);
  }
  CHECK(nx_stream_synchronize(S));
  double t = (ex_now() - t0) / iters;
  if (g) nx_tensor_free(g);
  return t;
}

/* Environment settings "VAR=VALUE ..." (at most MAX_VARIANTS) that a bench times beside the default,
 * one at a time, alternated in one process: the kernels' switches read the environment at every call. */
enum { MAX_VARIANTS = 6 };
typedef struct {
  int n;
  char var[MAX_VARIANTS][64], value[MAX_VARIANTS][64], name[MAX_VARIANTS][130];
} variants;

static variants read_variants(const char* env_name) {
  variants v = {0};
  const char* at = getenv(env_name);
  char item[128];
  for (int used = 0; at && v.n < MAX_VARIANTS && sscanf(at, "%127s%n", item, &used) == 1; at += used) {
    char* eq = strchr(item, '=');
    if (!eq || eq - item >= 64 || strlen(eq + 1) >= 64) {
      fprintf(stderr, "%s: %s is not VAR=VALUE (names and values under 64 characters)\n", env_name, item);
      exit(2);
    }
    *eq = 0;
    snprintf(v.var[v.n], sizeof v.var[v.n], "%s", item);
    snprintf(v.value[v.n], sizeof v.value[v.n], "%s", eq + 1);
    snprintf(v.name[v.n], sizeof v.name[v.n], "%s=%s", item, eq + 1);
    ++v.n;
  }
  return v;
}

/* Sets variant i; returns the variable's old value (or NULL) for variant_end. */
static char* variant_begin(const variants* v, int i) {
  const char* old = getenv(v->var[i]);
  char* saved = old ? strdup(old) : NULL;
  setenv(v->var[i], v->value[i], 1);
  return saved;
}
static void variant_end(const variants* v, int i, char* saved) {
  saved ? setenv(v->var[i], saved, 1) : unsetenv(v->var[i]);
  free(saved);
}

/* The bf16 forward (seconds per call, C API, 20 calls) under the default and each FWD_VARIANTS
 * setting, alternated three times (best of each), at head_dim 64 and 128, full and causal, over
 * the given sequence lengths (grid batch and heads): to decide a switch by call time, which a
 * profiler's kernel time leaves out (allocations, memsets, launch gaps). */
static void fwd_variants(int argc, char** argv) {
  const variants var = read_variants("FWD_VARIANTS");
  const char* list = argc > 2 ? argv[2] : "512,1024,2048";
  for (int di = 0; di < 2; ++di)
    for (int causal = 0; causal < 2; ++causal)
      for (const char* at = list; *at;) {
        const int64_t d = di ? 128 : 64, t = atoll(at), h = 2048 / d, b = t > 0 ? 16384 / t : 0;
        at += strcspn(at, ",");
        at += *at == ',';
        if (b <= 0) continue;
        nx_tensor q = rnd(b, h, t, d, 0), k = rnd(b, h, t, d, 0), v = rnd(b, h, t, d, 0);
        double best = 1e30, vbest[MAX_VARIANTS];
        for (int i = 0; i < MAX_VARIANTS; ++i) vbest[i] = 1e30;
        for (int rep = 0; rep < 3; ++rep) {
          best = fmin(best, run(q, k, v, causal, 0, 20));
          for (int i = 0; i < var.n; ++i) {
            char* saved = variant_begin(&var, i);
            vbest[i] = fmin(vbest[i], run(q, k, v, causal, 0, 20));
            variant_end(&var, i, saved);
          }
        }
        printf("{\"name\": \"fwd_d%lld_s%lld_%s\", \"fwd_s\": %.9g", (long long)d, (long long)t,
               causal ? "causal" : "full", best);
        for (int i = 0; i < var.n; ++i)
          printf(", \"%s\": {\"fwd_s\": %.9g, \"default_over_this\": %.4f}", var.name[i], vbest[i], best / vbest[i]);
        printf("}\n");
        fflush(stdout);
        nx_tensor_free(q); nx_tensor_free(k); nx_tensor_free(v);
      }
}

static void grid(void) {
  const int seqs[6] = {512, 1024, 2048, 4096, 8192, 16384};
  const int dims[2] = {64, 128};
  for (int di = 0; di < 2; ++di)
    for (int causal = 0; causal < 2; ++causal)
      for (int si = 0; si < 6; ++si) {
        int64_t d = dims[di], h = 2048 / d, t = seqs[si], b = 16384 / t;
        nx_tensor q = rnd(b, h, t, d, 1), k = rnd(b, h, t, d, 1), v = rnd(b, h, t, d, 1);
        double flops = 4.0 * (double)b * (double)h * (double)t * (double)t * (double)d / (causal ? 2.0 : 1.0);
        double fwd = run(q, k, v, causal, 0, 3);
        int bw_iters = fwd > 0.5 ? 1 : 2;
        double both = run(q, k, v, causal, 1, bw_iters);
        printf("{\"name\": \"attn_d%lld_s%lld_%s\", \"batch\": %lld, \"heads\": %lld, \"seq\": %lld, \"dim\": %lld, "
               "\"causal\": %d, \"fwd_s\": %.9g, \"fwdbwd_s\": %.9g, \"flops\": %.17g}\n",
               (long long)d, (long long)t, causal ? "causal" : "full", (long long)b, (long long)h, (long long)t,
               (long long)d, causal, fwd, both, flops);
        fflush(stdout);
        nx_tensor_free(q); nx_tensor_free(k); nx_tensor_free(v);
      }
}

/* max |got - want| over max |want|, both read back as f32 */
static double max_rel_diff(nx_tensor got, nx_tensor want) {
  nx_tensor g32, w32;
  int64_t n;
  CHECK(nx_cast(&g32, got, NX_F32, S));
  CHECK(nx_cast(&w32, want, NX_F32, S));
  CHECK(nx_tensor_numel(w32, &n));
  float* g = malloc(sizeof(float) * (size_t)n);
  float* w = malloc(sizeof(float) * (size_t)n);
  CHECK(nx_tensor_copy_to_host(g32, g, sizeof(float) * (size_t)n, S));
  CHECK(nx_tensor_copy_to_host(w32, w, sizeof(float) * (size_t)n, S));
  double diff = 0, top = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff = fmax(diff, fabs((double)g[i] - (double)w[i]));
    top = fmax(top, fabs((double)w[i]));
  }
  free(g), free(w);
  nx_tensor_free(g32), nx_tensor_free(w32);
  return diff / (top > 0 ? top : 1.0);
}

/* The same decode against the cache quantized to 8 bits (nx_quantize_8bit, one scale per row):
 * seconds per call, the bytes it must read (codes and scales), and its output's error against the
 * bf16 decode's (max |difference| over max |bf16 output|). bf16_seconds is the bf16 decode above. */
static void decode_8bit(nx_tensor q, nx_tensor k, nx_tensor v, double bf16_seconds) {
  const nx_dtype codes[2] = {NX_I8, NX_F8E4M3};
  int64_t shape[4];
  CHECK(nx_tensor_shape(k, shape, 4));
  const int64_t b = shape[0], n = shape[0] * shape[1] * shape[2] * shape[3];
  int32_t* len = malloc(sizeof(int32_t) * (size_t)b);
  for (int64_t i = 0; i < b; ++i) len[i] = (int32_t)shape[2];
  nx_tensor lengths, ref;
  CHECK(nx_tensor_from_data(&lengths, len, &b, 1, NX_I32, GPU, S));
  CHECK(nx_flash_attention(&ref, q, k, v, 1, false, 0.0, S));
  for (int c = 0; c < 2; ++c) {
    nx_tensor kq, ks, vq, vs, o;
    CHECK(nx_quantize_8bit(&kq, &ks, k, codes[c], 3, S));
    CHECK(nx_quantize_8bit(&vq, &vs, v, codes[c], 3, S));
    const int iters = 20;
    double t0 = 0;
    for (int i = -1; i < iters; ++i) {
      if (i == 0) { CHECK(nx_stream_synchronize(S)); t0 = ex_now(); }
      CHECK(nx_attention_decode_8bit(&o, q, kq, ks, vq, vs, lengths, 1, false, 0.0, S));
      if (i < iters - 1) nx_tensor_free(o);
    }
    CHECK(nx_stream_synchronize(S));
    const double t = (ex_now() - t0) / iters;
    printf("{\"name\": \"decode8_%s_b8_h32_d128_8k\", \"seconds\": %.9g, \"bytes\": %.17g, \"bf16_seconds\": %.9g, "
           "\"error_vs_bf16\": %.6g}\n", nx_dtype_name(codes[c]), t, (double)n * 2.0 + (double)(n / shape[3]) * 8.0,
           bf16_seconds, max_rel_diff(o, ref));
    fflush(stdout);
    nx_tensor_free(kq), nx_tensor_free(ks), nx_tensor_free(vq), nx_tensor_free(vs), nx_tensor_free(o);
  }
  free(len);
  nx_tensor_free(lengths), nx_tensor_free(ref);
}

static void decode(void) {
  const int64_t b = 8, h = 32, d = 128, cache = 8192;
  nx_tensor q = rnd(b, h, 1, d, 0), k = rnd(b, h, cache, d, 0), v = rnd(b, h, cache, d, 0), c;
  double t = run(q, k, v, 1, 0, 20);
  /* the memory ceiling of this run: a device-to-device copy of the same bytes */
  CHECK(nx_clone(&c, k, S));
  nx_tensor_free(c);
  CHECK(nx_stream_synchronize(S));
  double t0 = ex_now();
  for (int i = 0; i < 20; ++i) { CHECK(nx_clone(&c, k, S)); nx_tensor_free(c); }
  CHECK(nx_stream_synchronize(S));
  double copy = (ex_now() - t0) / 20;
  double bytes = 2.0 * (double)(b * h * cache * d) * 2.0;  /* K and V, bf16 */
  printf("{\"name\": \"decode_b8_h32_d128_8k\", \"seconds\": %.9g, \"bytes\": %.17g, \"copy_bytes_per_s\": %.17g}\n", t,
         bytes, 2.0 * (double)(b * h * cache * d) * 2.0 / copy);
  decode_8bit(q, k, v, t);
  nx_tensor_free(q); nx_tensor_free(k); nx_tensor_free(v);
}

static void memory(void) {
  const int64_t seqs[3] = {4096, 16384, 65536};
  for (int i = 0; i < 3; ++i) {
    int64_t t = seqs[i], h = 2, d = 128;
    CHECK(nx_cuda_empty_cache(0));
    nx_tensor q = rnd(1, h, t, d, 1), k = rnd(1, h, t, d, 1), v = rnd(1, h, t, d, 1);
    CHECK(nx_stream_synchronize(S));
    CHECK(nx_cuda_reset_peak_memory(0));
    nx_cuda_memory_stats before = {sizeof(nx_cuda_memory_stats)}, after = {sizeof(nx_cuda_memory_stats)};
    CHECK(nx_cuda_get_memory_stats(0, &before));
    run(q, k, v, 1, 1, 1);
    CHECK(nx_cuda_get_memory_stats(0, &after));
    printf("{\"name\": \"memory_s%lld\", \"seq\": %lld, \"inputs_bytes\": %llu, \"peak_bytes\": %llu, "
           "\"scores_matrix_bytes_if_materialized\": %.17g}\n",
           (long long)t, (long long)t, (unsigned long long)before.allocated_bytes,
           (unsigned long long)after.peak_allocated_bytes, 4.0 * (double)(h * t * t));
    nx_tensor_free(q); nx_tensor_free(k); nx_tensor_free(v);
  }
}

/* Forward, and forward+backward with the default backward and in deterministic mode, alternated
 * twice per shape; the backward's cost is fwd+bwd minus fwd. */
static void deterministic(void) {
  const int seqs[2] = {1024, 4096}, dims[2] = {64, 128};
  for (int di = 0; di < 2; ++di)
    for (int causal = 0; causal < 2; ++causal)
      for (int si = 0; si < 2; ++si) {
        int64_t d = dims[di], h = 2048 / d, t = seqs[si], b = 16384 / t;
        nx_tensor q = rnd(b, h, t, d, 1), k = rnd(b, h, t, d, 1), v = rnd(b, h, t, d, 1);
        double fwd = run(q, k, v, causal, 0, 5), both[2] = {1e30, 1e30};
        for (int rep = 0; rep < 2; ++rep)
          for (int det = 0; det < 2; ++det) {
            CHECK(nx_runtime_set_deterministic(det != 0));
            const double x = run(q, k, v, causal, 1, 3);
            if (x < both[det]) both[det] = x;
          }
        CHECK(nx_runtime_set_deterministic(false));
        printf("{\"name\": \"determinism_d%lld_s%lld_%s\", \"fwd_s\": %.9g, \"fwdbwd_s\": %.9g, "
               "\"fwdbwd_deterministic_s\": %.9g, \"bwd_cost_ratio\": %.4f}\n",
               (long long)d, (long long)t, causal ? "causal" : "full", fwd, both[0], both[1],
               (both[1] - fwd) / (both[0] - fwd));
        fflush(stdout);
        nx_tensor_free(q); nx_tensor_free(k); nx_tensor_free(v);
      }
}

/* Seconds per call of the FP8 forward (after one warm-up call), and its output when out is given. */
static double time_fp8(nx_tensor* codes, nx_tensor* scales, int causal, int iters, nx_tensor* out) {
  double t0 = 0;
  for (int i = -1; i < iters; ++i) {
    nx_tensor o;
    if (i == 0) { CHECK(nx_stream_synchronize(S)); t0 = ex_now(); }
    CHECK(nx_flash_attention_fp8(&o, codes[0], scales[0], codes[1], scales[1], codes[2], scales[2], causal != 0, false,
                                 0.0, NX_BF16, S));
    if (out && i == iters - 1) *out = o;
    else nx_tensor_free(o);
  }
  CHECK(nx_stream_synchronize(S));
  return (ex_now() - t0) / iters;
}

/* The FP8 forward against the bf16 forward on the same inputs (quantized per head by
 * nx_quantize_8bit, which is not timed): seconds per call of each, alternated twice (best of
 * each), and the FP8 output's difference from the bf16 output. FP8_VARIANTS="VAR=VALUE ..." (at
 * most 6) also times the FP8 forward with each of those environment settings in turn (one at a
 * time, in the same alternation), with each one's output difference: the kernels' switches
 * (NEXUS_FLASH_FWD_STAGE_O=0, NEXUS_FLASH_PERSISTENT=0) read the environment at every call. */
static void fp8(void) {
  const int seqs[3] = {1024, 4096, 16384};
  const variants var = read_variants("FP8_VARIANTS");
  const int nvar = var.n;
  for (int causal = 0; causal < 2; ++causal)
    for (int si = 0; si < 3; ++si) {
      const int64_t d = 128, h = 2048 / d, t = seqs[si], b = 16384 / t;
      nx_tensor q = rnd(b, h, t, d, 0), k = rnd(b, h, t, d, 0), v = rnd(b, h, t, d, 0), codes[3], scales[3], ref, o;
      nx_tensor in[3] = {q, k, v}, vo[MAX_VARIANTS] = {NULL};
      for (int i = 0; i < 3; ++i) CHECK(nx_quantize_8bit(&codes[i], &scales[i], in[i], NX_F8E4M3, 2, S));
      double best[2] = {1e30, 1e30}, vbest[MAX_VARIANTS];
      for (int i = 0; i < MAX_VARIANTS; ++i) vbest[i] = 1e30;
      for (int rep = 0; rep < 2; ++rep) {
        const double bf16 = run(q, k, v, causal, 0, 5);
        if (bf16 < best[0]) best[0] = bf16;
        const double f8 = time_fp8(codes, scales, causal, 5, NULL);
        if (f8 < best[1]) best[1] = f8;
        for (int i = 0; i < nvar; ++i) {
          char* saved = variant_begin(&var, i);
          if (vo[i]) nx_tensor_free(vo[i]);
          const double x = time_fp8(codes, scales, causal, 5, &vo[i]);
          if (x < vbest[i]) vbest[i] = x;
          variant_end(&var, i, saved);
        }
      }
      CHECK(nx_flash_attention(&ref, q, k, v, causal, false, 0.0, S));
      CHECK(nx_flash_attention_fp8(&o, codes[0], scales[0], codes[1], scales[1], codes[2], scales[2], causal != 0, false,
                                   0.0, NX_BF16, S));
      const double flops = 4.0 * (double)b * (double)h * (double)t * (double)t * (double)d / (causal ? 2.0 : 1.0);
      printf("{\"name\": \"fp8_d128_s%lld_%s\", \"bf16_fwd_s\": %.9g, \"fp8_fwd_s\": %.9g, \"speedup\": %.4f, "
             "\"bf16_tflops\": %.1f, \"fp8_tflops\": %.1f, \"diff_vs_bf16\": %.4g",
             (long long)t, causal ? "causal" : "full", best[0], best[1], best[0] / best[1], flops / best[0] * 1e-12,
             flops / best[1] * 1e-12, max_rel_diff(o, ref));
      for (int i = 0; i < nvar; ++i)
        printf(", \"%s\": {\"fp8_fwd_s\": %.9g, \"speedup\": %.4f, \"diff_vs_bf16\": %.4g}", var.name[i], vbest[i],
               best[0] / vbest[i], max_rel_diff(vo[i], ref));
      printf("}\n");
      fflush(stdout);
      nx_tensor_free(ref), nx_tensor_free(o);
      for (int i = 0; i < nvar; ++i) nx_tensor_free(vo[i]);
      for (int i = 0; i < 3; ++i) nx_tensor_free(codes[i]), nx_tensor_free(scales[i]), nx_tensor_free(in[i]);
    }
}

/* One FP8 forward call after one warm-up, for a profiler: head_dim 128, grid batch and heads. */
static void fp8_one(int argc, char** argv) {
  if (argc < 4) { fprintf(stderr, "usage: attention_bench fp8one SEQ causal|full\n"); exit(2); }
  const int64_t d = 128, t = atoll(argv[2]), h = 2048 / d, b = 16384 / t;
  const int causal = !strcmp(argv[3], "causal");
  nx_tensor in[3] = {rnd(b, h, t, d, 0), rnd(b, h, t, d, 0), rnd(b, h, t, d, 0)}, codes[3], scales[3];
  for (int i = 0; i < 3; ++i) CHECK(nx_quantize_8bit(&codes[i], &scales[i], in[i], NX_F8E4M3, 2, S));
  printf("{\"name\": \"fp8one_d128_s%lld_%s\", \"fp8_fwd_s\": %.9g}\n", (long long)t, argv[3],
         time_fp8(codes, scales, causal, 1, NULL));
  for (int i = 0; i < 3; ++i) nx_tensor_free(codes[i]), nx_tensor_free(scales[i]), nx_tensor_free(in[i]);
}

static void one(int argc, char** argv) {
  if (argc < 5) { fprintf(stderr, "usage: attention_bench one D SEQ causal|full\n"); exit(2); }
  int64_t d = atoll(argv[2]), t = atoll(argv[3]), h = 2048 / d, b = 16384 / t;
  int causal = !strcmp(argv[4], "causal");
  nx_tensor q = rnd(b, h, t, d, 1), k = rnd(b, h, t, d, 1), v = rnd(b, h, t, d, 1);
  printf("{\"name\": \"one_d%lld_s%lld_%s\", \"fwd_s\": %.9g, ", (long long)d, (long long)t, argv[4],
         run(q, k, v, causal, 0, 1));
  printf("\"fwdbwd_s\": %.9g}\n", run(q, k, v, causal, 1, 1));
  nx_tensor_free(q); nx_tensor_free(k); nx_tensor_free(v);
}

int main(int argc, char** argv) {
  if (nx_cuda_device_count() == 0) {
    fprintf(stderr, "attention_bench: no CUDA device\n");
    return 0;
  }
  CHECK(nx_stream_create(&S, GPU));
  const char* what = argc > 1 ? argv[1] : "all";
  if (!strcmp(what, "all") || !strcmp(what, "memory")) memory();
  if (!strcmp(what, "all") || !strcmp(what, "decode")) decode();
  if (!strcmp(what, "all") || !strcmp(what, "grid")) grid();
  if (!strcmp(what, "one")) one(argc, argv);
  if (!strcmp(what, "deterministic")) deterministic();
  if (!strcmp(what, "fp8")) fp8();
  if (!strcmp(what, "fp8one")) fp8_one(argc, argv);
  if (!strcmp(what, "fwdvar")) fwd_variants(argc, argv);
  nx_stream_free(S);
  return 0;
}
