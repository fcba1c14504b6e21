/* CUDA benchmarks through the public C API. Prints one JSON object per line:
 *   {"name": ..., "seconds": per-iteration time, "bytes": bytes moved, "flops": ...}
 * bench/cuda_bench.py runs this next to PyTorch on the same GPU and prints the ratios.
 * Timing: warm-up, then N iterations between two stream synchronizations (wall clock); the
 * sizes are large enough (1 GiB operands) that launch latency is negligible, except for the
 * launch-overhead case, which measures exactly that. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nexus.h>

#include "bench_util.h" /* TIME_IT, report; CHECK, ex_now from the examples */


typedef nx_status (*op1_fn)(nx_tensor*, nx_tensor, nx_stream);

static nx_stream g_stream;

/* One bandwidth row: `call` (which makes the tensor `out`) timed over 10 runs after 2, reported
 * with the bytes it moves. */
#define BANDWIDTH(name, bytes, call)                                      \
  do {                                                                    \
    double s_;                                                            \
    TIME_IT(s_, 2, 10, { CHECK(call); nx_tensor_free(out); });            \
    report((name), s_, (bytes), 0);                                       \
  } while (0)

static void bench_bandwidth(void) {
  const nx_device gpu = {NX_CUDA, 0};
  const int64_t n = (int64_t)1 << 28;
  int64_t shape[1] = {n};
  int64_t rows_shape[2] = {n / 4096, 4096};
  nx_tensor a, b, r, out;
  CHECK(nx_tensor_randn(&a, shape, 1, NX_F32, gpu, g_stream));
  CHECK(nx_tensor_randn(&b, shape, 1, NX_F32, gpu, g_stream));
  CHECK(nx_reshape(&r, a, rows_shape, 2, g_stream));
  const double f = 4.0 * (double)n;
  BANDWIDTH("copy_d2d", 2 * f, nx_clone(&out, a, g_stream));
  BANDWIDTH("add", 3 * f, nx_add(&out, a, b, g_stream));
  BANDWIDTH("add_relu", 3 * f, nx_add_relu(&out, a, b, g_stream));
  BANDWIDTH("softmax_rows4096", 2 * f, nx_softmax(&out, r, 1, g_stream));
  BANDWIDTH("sum", f, nx_sum(&out, a, NULL, 0, false, g_stream));
  nx_tensor_free(r);

  /* Half precision (bf16) on the same 2^28 elements: bytes count every element read and written
   * at its own size (bf16 2 bytes, f32 4), so the rows compare with copy_d2d's bandwidth. */
  const double h = 2.0 * (double)n;
  nx_tensor ah, bh;
  CHECK(nx_cast(&ah, a, NX_BF16, g_stream));
  CHECK(nx_cast(&bh, b, NX_BF16, g_stream));
  BANDWIDTH("copy_bf16", 2 * h, nx_clone(&out, ah, g_stream));
  BANDWIDTH("add_bf16", 3 * h, nx_add(&out, ah, bh, g_stream));
  BANDWIDTH("mul_bf16", 3 * h, nx_mul(&out, ah, bh, g_stream));
  BANDWIDTH("cast_f32_to_bf16", f + h, nx_cast(&out, a, NX_BF16, g_stream));
  BANDWIDTH("cast_bf16_to_f32", h + f, nx_cast(&out, ah, NX_F32, g_stream));
  /* mixed: bf16 + f32 -> f32, converted while loading (no cast kernel) */
  BANDWIDTH("add_bf16_f32", h + 2 * f, nx_add(&out, ah, b, g_stream));
  nx_tensor_free(ah); nx_tensor_free(bh);
  nx_tensor_free(a); nx_tensor_free(b);
}

static void bench_gemm(void) {
  const nx_device gpu = {NX_CUDA, 0};
  const int sizes[2] = {4096, 8192};
  const nx_dtype dts[2] = {NX_F32, NX_BF16};
  for (int si = 0; si < 2; ++si) {
    int64_t n = sizes[si];
    int64_t shape[2] = {n, n};
    for (int mode = 0; mode < 3; ++mode) { /* fp32, tf32, bf16 */
      nx_dtype dt = mode == 2 ? dts[1] : dts[0];
      nx_cuda_set_tf32(mode == 1);
      nx_tensor a0, b0, a, b, c;
      CHECK(nx_tensor_randn(&a0, shape, 2, NX_F32, gpu, g_stream));
      CHECK(nx_tensor_randn(&b0, shape, 2, NX_F32, gpu, g_stream));
      CHECK(nx_cast(&a, a0, dt, g_stream));
      CHECK(nx_cast(&b, b0, dt, g_stream));
      double s;
      int iters = n == 8192 ? 5 : 20;
      TIME_IT(s, 3, iters, { CHECK(nx_matmul(&c, a, b, g_stream)); nx_tensor_free(c); });
      char name[64];
      snprintf(name, sizeof name, "gemm_%s_%lld", mode == 0 ? "fp32" : mode == 1 ? "tf32" : "bf16", (long long)n);
      report(name, s, 0, 2.0 * (double)n * (double)n * (double)n);
      nx_tensor_free(a0); nx_tensor_free(b0); nx_tensor_free(a); nx_tensor_free(b);
    }
  }
  nx_cuda_set_tf32(false);
}

static void bench_launch(void) {
  const nx_device gpu = {NX_CUDA, 0};
  int64_t shape[1] = {16};
  nx_tensor a, b, c;
  CHECK(nx_tensor_ones(&a, shape, 1, NX_F32, gpu, g_stream));
  CHECK(nx_tensor_ones(&b, shape, 1, NX_F32, gpu, g_stream));
  double s;
  TIME_IT(s, 100, 20000, { CHECK(nx_add(&c, a, b, g_stream)); nx_tensor_free(c); });
  report("tiny_add_16", s, 0, 0);
  nx_tensor_free(a); nx_tensor_free(b);
}

int main(int argc, char** argv) {
  if (nx_cuda_device_count() == 0) {
    fprintf(stderr, "cuda_bench: no CUDA device; nothing to measure\n");
    return 0;
  }
  const char* only = argc > 1 ? argv[1] : "all";
  CHECK(nx_stream_create(&g_stream, (nx_device){NX_CUDA, 0}));
  if (!strcmp(only, "all") || !strcmp(only, "bandwidth")) bench_bandwidth();
  if (!strcmp(only, "all") || !strcmp(only, "gemm")) bench_gemm();
  if (!strcmp(only, "all") || !strcmp(only, "launch")) bench_launch();
  nx_stream_free(g_stream);
  return 0;
}
