// Softmax cross-entropy over rows of logits [rows, V] (V up to the hundreds of thousands), i64
// targets. No [rows, V] probability tensor is ever stored. One block per row (rows are too wide
// for registers: 50257 f32 logits are 196 KiB); each thread walks its share of the row's
// 16-byte-aligned part in chunks of U packs, all U loads issued before any use (U x 16 bytes in
// flight per thread, 16..48 warps per SM), plus a scalar head and tail (odd widths such as a
// 50257-token vocabulary leave every row at a different alignment phase).
//   forward:  one pass with an online (max, sum of exp): per chunk, the chunk's max first, then
//             one rescale of the running sum and one exp per element; merged across the block;
//             lse = max + log(sum); loss = lse - logit[target] (0 if ignored, NaN for a target
//             outside [0, V): checking it on the host would need a sync). DRAM: the row once.
//   backward: one pass: dlogits = scale[row] (exp(logit - lse) - [j == target]), the row read
//             once and written once with streaming 16-byte loads and stores.
// exp is exp2f((v - m) log2 e) for f32/f16/bf16 (ex2.approx, 2 ulp), exp for f64.
#include <cmath>

#include "cuda/fused.cuh"

namespace nx::cuda {
namespace {

using namespace fused;

template <class A>
__device__ __forceinline__ void merge(A& m, A& s, A m2, A s2) {
  if (m2 == A(-INFINITY)) return;
  if (m == A(-INFINITY)) { m = m2; s = s2; return; }
  if (m2 > m) { s = s * exp(m - m2) + s2; m = m2; }
  else s += s2 * exp(m2 - m);
}

__device__ __forceinline__ float exp_diff(float a, float b) { return exp2f((a - b) * 1.4426950408889634f); }
__device__ __forceinline__ double exp_diff(double a, double b) { return exp(a - b); }

constexpr int kUnroll = 4;  // packs of 16 bytes per thread per chunk

// Online (m, s) with one more element v.
template <class A>
__device__ __forceinline__ void online_one(A& m, A& s, A v) {
  if (v > m) {
    s = s * exp_diff(m, v) + A(1);  // m = -inf: s is 0 and exp(-inf) 0
    m = v;
  } else if (m != A(-INFINITY)) {
    s += exp_diff(v, m);
  }
}

template <class T, int U>
__global__ void __launch_bounds__(512) xent_fwd_kernel(typename AccT<T>::type* loss, typename AccT<T>::type* lse,
                                                       const T* logits, const int64_t* target, int64_t cols,
                                                       int64_t ignore_index) {
  using A = typename AccT<T>::type;
  constexpr int N = Pack<T>::N;
  __shared__ A ms[32], ss[32];
  const int64_t row = blockIdx.x, stride = blockDim.x;
  const T* x = logits + row * cols;
  const int64_t h = head_of<T>(x, cols), nv = (cols - h) / N, tail = h + nv * N;
  const T* xv = x + h;
  A m = A(-INFINITY), s = A(0);
  for (int64_t base = threadIdx.x; base < nv; base += U * stride) {
    Pack<T> pk[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (base + u * stride < nv) pk[u] = ld_stream(xv + (base + u * stride) * N);
    A cm = A(-INFINITY);
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (base + u * stride < nv)
#pragma unroll
        for (int e = 0; e < N; ++e) cm = fmax(cm, to_acc<A>(pk[u].v[e]));
    if (cm > m) {
      s *= exp_diff(m, cm);
      m = cm;
    }
    if (m != A(-INFINITY)) {
      A cs = A(0);
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (base + u * stride < nv)
#pragma unroll
          for (int e = 0; e < N; ++e) cs += exp_diff(to_acc<A>(pk[u].v[e]), m);
      s += cs;
    }
  }
  if (threadIdx.x < h) online_one(m, s, to_acc<A>(x[threadIdx.x]));
  if (tail + threadIdx.x < cols) online_one(m, s, to_acc<A>(x[tail + threadIdx.x]));
  for (int o = 16; o > 0; o >>= 1) merge(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) { ms[warp] = m; ss[warp] = s; }
  __syncthreads();
  if (threadIdx.x == 0) {
    A tm = A(-INFINITY), ts = A(0);
    for (int w = 0; w < int((blockDim.x + 31) >> 5); ++w) merge(tm, ts, ms[w], ss[w]);
    const A l = tm + log(ts);
    lse[row] = l;
    const int64_t t = target[row];
    A v = A(0);
    if (t != ignore_index) v = (t < 0 || t >= cols) ? A(NAN) : l - to_acc<A>(x[t]);
    loss[row] = v;
  }
}

template <class T, int U>
__global__ void __launch_bounds__(512) xent_bwd_kernel(T* dlogits, const T* logits, const int64_t* target,
                                                       const typename AccT<T>::type* lse,
                                                       const typename AccT<T>::type* scale, int64_t cols,
                                                       int64_t ignore_index) {
  using A = typename AccT<T>::type;
  constexpr int N = Pack<T>::N;
  const int64_t row = blockIdx.x, t = target[row], stride = blockDim.x;
  const A l = lse[row], sc = t == ignore_index ? A(0) : scale[row];
  const T* x = logits + row * cols;
  T* y = dlogits + row * cols;
  auto f = [&](int64_t j, A v) { return sc * (exp_diff(v, l) - (j == t ? A(1) : A(0))); };
  if ((reinterpret_cast<uintptr_t>(x) & 15) != (reinterpret_cast<uintptr_t>(y) & 15)) {  // no common 16-byte phase
    for (int64_t j = threadIdx.x; j < cols; j += stride) y[j] = from_acc<T>(f(j, to_acc<A>(x[j])));
    return;
  }
  const int64_t h = head_of<T>(x, cols), nv = (cols - h) / N, tail = h + nv * N;
  for (int64_t base = threadIdx.x; base < nv; base += U * stride) {
    Pack<T> pk[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (base + u * stride < nv) pk[u] = ld_stream(x + h + (base + u * stride) * N);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t i = base + u * stride;
      if (i >= nv) continue;
      Pack<T> out;
#pragma unroll
      for (int e = 0; e < N; ++e) out.v[e] = from_acc<T>(f(h + i * N + e, to_acc<A>(pk[u].v[e])));
      st_stream(y + h + i * N, out);
    }
  }
  if (threadIdx.x < h) y[threadIdx.x] = from_acc<T>(f(threadIdx.x, to_acc<A>(x[threadIdx.x])));
  if (tail + threadIdx.x < cols) {
    const int64_t j = tail + threadIdx.x;
    y[j] = from_acc<T>(f(j, to_acc<A>(x[j])));
  }
}

int xent_threads(int64_t cols) { return cols >= 8192 ? 512 : cols >= 1024 ? 256 : 128; }

}  // namespace

void launch_xent_forward(const View& loss, const View& lse, const View& logits, const View& target, int64_t rows,
                         int64_t cols, int64_t ignore_index) {
  if (rows > 2147483647) fail(NX_ERR_NOT_IMPLEMENTED, current_api(), ": more than 2^31 rows");
  dispatch_float(logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = typename AccT<T>::type;
    xent_fwd_kernel<T, kUnroll><<<unsigned(rows), xent_threads(cols), 0, stream()>>>(
        static_cast<A*>(loss.data), static_cast<A*>(lse.data), static_cast<const T*>(logits.data),
        static_cast<const int64_t*>(target.data), cols, ignore_index);
    NX_CUDA_LAUNCH_CHECK();
  });
}

void launch_xent_backward(const View& dlogits, const View& logits, const View& target, const View& lse,
                          const View& scale, int64_t rows, int64_t cols, int64_t ignore_index) {
  if (rows > 2147483647) fail(NX_ERR_NOT_IMPLEMENTED, current_api(), ": more than 2^31 rows");
  dispatch_float(logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = typename AccT<T>::type;
    xent_bwd_kernel<T, kUnroll><<<unsigned(rows), xent_threads(cols), 0, stream()>>>(
        static_cast<T*>(dlogits.data), static_cast<const T*>(logits.data), static_cast<const int64_t*>(target.data),
        static_cast<const A*>(lse.data), static_cast<const A*>(scale.data), cols, ignore_index);
    NX_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace nx::cuda
