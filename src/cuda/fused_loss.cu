// Softmax cross-entropy over rows of logits [rows, V] (V up to the hundreds of thousands), i64
// targets. No [rows, V] probability tensor is ever stored.
//   forward:  one block per row, one pass with an online (max, sum of exp) per thread, merged
//             across the block; lse = max + log(sum); loss = lse - logit[target] (0 if ignored,
//             NaN for a target outside [0, V): checking it on the host would need a sync).
//   backward: one block per row: dlogits = scale[row] (exp(logit - lse) - [j == target]).
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

template <class T>
__global__ void xent_fwd_kernel(typename AccT<T>::type* loss, typename AccT<T>::type* lse, const T* logits,
                                const int64_t* target, int64_t cols, int64_t ignore_index) {
  using A = typename AccT<T>::type;
  __shared__ A ms[32], ss[32];
  const int64_t row = blockIdx.x;
  const T* x = logits + row * cols;
  A m = A(-INFINITY), s = A(0);
  for_row<T, A>(x, cols, [&](int64_t, A v) {
    if (v > m) { s = (m == A(-INFINITY) ? A(0) : s * exp(m - v)) + A(1); m = v; }
    else s += exp(v - m);
  });
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

template <class T>
__global__ void xent_bwd_kernel(T* dlogits, const T* logits, const int64_t* target, const typename AccT<T>::type* lse,
                                const typename AccT<T>::type* scale, int64_t cols, int64_t ignore_index) {
  using A = typename AccT<T>::type;
  const int64_t row = blockIdx.x, t = target[row];
  const A l = lse[row], sc = t == ignore_index ? A(0) : scale[row];
  map_row<T, A>(dlogits + row * cols, logits + row * cols, cols,
                [&](int64_t j, A v) { return sc * (exp(v - l) - (j == t ? A(1) : A(0))); });
}

}  // namespace

void launch_xent_forward(const View& loss, const View& lse, const View& logits, const View& target, int64_t rows,
                         int64_t cols, int64_t ignore_index) {
  if (rows > 2147483647) fail(NX_ERR_NOT_IMPLEMENTED, current_api(), ": more than 2^31 rows");
  dispatch_float(logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = typename AccT<T>::type;
    xent_fwd_kernel<T><<<unsigned(rows), cols >= 4096 ? 512 : 128, 0, stream()>>>(
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
    xent_bwd_kernel<T><<<unsigned(rows), cols >= 4096 ? 512 : 128, 0, stream()>>>(
        static_cast<T*>(dlogits.data), static_cast<const T*>(logits.data), static_cast<const int64_t*>(target.data),
        static_cast<const A*>(lse.data), static_cast<const A*>(scale.data), cols, ignore_index);
    NX_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace nx::cuda
