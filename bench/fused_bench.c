/* The fused kernels on CUDA through the public C API; one JSON object per line
 *   {"name": ..., "seconds": per-iteration time, "bytes": bytes the op must move, "flops": 0}
 * bench/fused_bench.py runs this next to PyTorch's eager equivalent on the same GPU and prints
 * time ratios and bandwidth against the device-to-device copy measured in the same run.
 *   rms_norm_{f32,bf16}        [16384, 4096] forward: reads x, writes y
 *   rms_norm_fb_{f32,bf16}     forward + backward (x, w leaves): x, y, dy, x again, dx
 *   xent_{f32,bf16}            [8192, 50257] softmax cross-entropy forward: reads the logits
 *   xent_fb_{f32,bf16}         forward + backward: logits twice, dlogits once
 *   adamw_124m                 one AdamW step over GPT-2 small's 148 tensors (124M f32):
 *                              reads p, g, m, v and writes p, m, v */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nexus.h>

#include "bench_util.h" /* TIME_IT, report, CHECK */

static nx_stream g_stream;
static const nx_device kGpu = {NX_CUDA, 0};

static nx_tensor randn_as(const int64_t* shape, size_t nd, nx_dtype dt) {
  nx_tensor a, b;
  CHECK(nx_tensor_randn(&a, shape, nd, NX_F32, kGpu, g_stream));
  CHECK(nx_cast(&b, a, dt, g_stream));
  nx_tensor_free(a);
  return b;
}

/* A fresh leaf over t's storage, so gradients do not accumulate across iterations. */
static nx_tensor leaf_of(nx_tensor t) {
  nx_tensor l;
  CHECK(nx_tensor_detach(&l, t));
  CHECK(nx_tensor_set_requires_grad(l, true));
  return l;
}

static void bench_copy(void) {
  const int64_t shape[1] = {(int64_t)1 << 28};
  nx_tensor a = randn_as(shape, 1, NX_F32), out;
  double s;
  TIME_IT(s, 2, 10, { CHECK(nx_clone(&out, a, g_stream)); nx_tensor_free(out); });
  report("copy_d2d", s, 2.0 * 4.0 * (double)shape[0], 0);
  nx_tensor_free(a);
}

static void bench_rms_norm(nx_dtype dt, const char* tag) {
  const int64_t shape[2] = {16384, 4096}, wshape[1] = {4096};
  const double esz = dt == NX_F32 ? 4 : 2, n = (double)shape[0] * (double)shape[1];
  nx_tensor x = randn_as(shape, 2, dt), w = randn_as(wshape, 1, dt), gy = randn_as(shape, 2, dt), y;
  char name[64];
  double s;
  TIME_IT(s, 3, 20, { CHECK(nx_rms_norm(&y, x, w, 1e-6, g_stream)); nx_tensor_free(y); });
  snprintf(name, sizeof name, "rms_norm_%s", tag);
  report(name, s, 2 * n * esz, 0);
  TIME_IT(s, 3, 20, {
    nx_tensor xl = leaf_of(x);
    nx_tensor wl = leaf_of(w);
    CHECK(nx_rms_norm(&y, xl, wl, 1e-6, g_stream));
    CHECK(nx_backward(y, gy, NULL, g_stream));
    nx_tensor_free(y); nx_tensor_free(xl); nx_tensor_free(wl);
  });
  snprintf(name, sizeof name, "rms_norm_fb_%s", tag);
  report(name, s, 5 * n * esz, 0);
  nx_tensor_free(x); nx_tensor_free(w); nx_tensor_free(gy);
}

static void bench_xent(nx_dtype dt, const char* tag) {
  const int64_t shape[2] = {8192, 50257}, tshape[1] = {8192};
  const double esz = dt == NX_F32 ? 4 : 2, n = (double)shape[0] * (double)shape[1];
  nx_tensor logits = randn_as(shape, 2, dt), u, t, loss;
  /* targets: uniform integers in [0, V) */
  CHECK(nx_tensor_rand(&u, tshape, 1, NX_F32, kGpu, g_stream));
  nx_tensor us;
  CHECK(nx_mul_scalar(&us, u, 50256.999, g_stream));
  CHECK(nx_cast(&t, us, NX_I64, g_stream));
  char name[64];
  double s;
  TIME_IT(s, 3, 20, {
    CHECK(nx_softmax_cross_entropy(&loss, logits, t, -100, NX_REDUCTION_MEAN, g_stream));
    nx_tensor_free(loss);
  });
  snprintf(name, sizeof name, "xent_%s", tag);
  report(name, s, n * esz, 0);
  TIME_IT(s, 3, 20, {
    nx_tensor l = leaf_of(logits);
    CHECK(nx_softmax_cross_entropy(&loss, l, t, -100, NX_REDUCTION_MEAN, g_stream));
    CHECK(nx_backward(loss, NULL, NULL, g_stream));
    nx_tensor_free(loss); nx_tensor_free(l);
  });
  snprintf(name, sizeof name, "xent_fb_%s", tag);
  report(name, s, 3 * n * esz, 0);
  nx_tensor_free(logits); nx_tensor_free(u); nx_tensor_free(us); nx_tensor_free(t);
}

/* GPT-2 small's parameter shapes (fused_bench.py builds the same list for torch). */
static size_t gpt2_shapes(int64_t (*shapes)[2], size_t* nd) {
  size_t k = 0;
#define ADD1(a) (shapes[k][0] = (a), nd[k++] = 1)
#define ADD2(a, b) (shapes[k][0] = (a), shapes[k][1] = (b), nd[k++] = 2)
  ADD2(50257, 768);
  ADD2(1024, 768);
  for (int l = 0; l < 12; ++l) {
    ADD1(768); ADD1(768);
    ADD2(2304, 768); ADD1(2304);
    ADD2(768, 768); ADD1(768);
    ADD1(768); ADD1(768);
    ADD2(3072, 768); ADD1(3072);
    ADD2(768, 3072); ADD1(768);
  }
  ADD1(768); ADD1(768);
#undef ADD1
#undef ADD2
  return k;
}

static void bench_adamw(void) {
  int64_t shapes[160][2];
  size_t nd[160];
  const size_t n = gpt2_shapes(shapes, nd);
  nx_tensor p[160], g[160], m[160], v[160];
  const nx_adam_options adamw = {sizeof adamw, 6e-4, 0.9, 0.95, 1e-8, 0.1, true};
  double total = 0;
  for (size_t i = 0; i < n; ++i) {
    p[i] = randn_as(shapes[i], nd[i], NX_F32);
    g[i] = randn_as(shapes[i], nd[i], NX_F32);
    CHECK(nx_tensor_zeros(&m[i], shapes[i], nd[i], NX_F32, kGpu, g_stream));
    CHECK(nx_tensor_zeros(&v[i], shapes[i], nd[i], NX_F32, kGpu, g_stream));
    total += (double)shapes[i][0] * (nd[i] == 2 ? (double)shapes[i][1] : 1.0);
  }
  double s;
  int64_t step = 0;
  TIME_IT(s, 3, 20, {
    ++step;
    CHECK(nx_adam_step_multi(p, g, m, v, n, step, &adamw, g_stream));
  });
  report("adamw_124m", s, 7.0 * 4.0 * total, 0);
  fprintf(stderr, "fused_bench: adamw over %zu tensors, %.1fM parameters\n", n, total / 1e6);
  for (size_t i = 0; i < n; ++i) {
    nx_tensor_free(p[i]); nx_tensor_free(g[i]); nx_tensor_free(m[i]); nx_tensor_free(v[i]);
  }
}

int main(int argc, char** argv) {
  if (nx_cuda_device_count() == 0) {
    fprintf(stderr, "fused_bench: no CUDA device; nothing to measure\n");
    return 0;
  }
  const char* only = argc > 1 ? argv[1] : "all";
  CHECK(nx_stream_create(&g_stream, kGpu));
  bench_copy();
  if (!strcmp(only, "all") || !strcmp(only, "norm")) {
    bench_rms_norm(NX_F32, "f32");
    bench_rms_norm(NX_BF16, "bf16");
  }
  if (!strcmp(only, "all") || !strcmp(only, "xent")) {
    bench_xent(NX_F32, "f32");
    bench_xent(NX_BF16, "bf16");
  }
  if (!strcmp(only, "all") || !strcmp(only, "adamw")) bench_adamw();
  nx_stream_free(g_stream);
  return 0;
}
