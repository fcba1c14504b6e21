// RMSNorm / LayerNorm over rows of a contiguous [rows, cols] matrix.
//   forward:  s = x (+ residual); mu = mean(s) (LayerNorm); rstd = 1/sqrt(mean((s - mu)^2) + eps);
//             y = (s - mu) rstd w + b. One block per row; the row is re-read from L1/L2 for the
//             second statistic and the output (DRAM sees it once), and the variance is taken
//             around the mean (no E[x^2] - mu^2 cancellation).
//   backward: xhat = (s - mu) rstd, g = dy w; dx = rstd (g - mean(g) - xhat mean(g xhat)) (no
//             mean(g) term for RMSNorm). A fixed grid of G blocks strides over the rows; each
//             block sums dw = dy xhat and db = dy for its rows in shared memory (each column owned
//             by one thread: no atomics), writes them as row b of a [G, cols] partial, and a
//             second kernel adds the G partials in order: deterministic, one read of dy and x.
#include <algorithm>

#include "cuda/fused.cuh"

namespace nx::cuda {
namespace {

using namespace fused;

template <class T>
__global__ void norm_fwd_kernel(NormParams p, T* y, T* s, const T* x, const T* res, const T* w, const T* b,
                                typename AccT<T>::type* mean, typename AccT<T>::type* rstd) {
  using A = typename AccT<T>::type;
  __shared__ A scratch[32];
  const int64_t row = blockIdx.x, cols = p.cols;
  const T* xr = x + row * cols;
  if (res) {  // s = x + residual, rounded to T as the unfused add would be
    T* sr = s + row * cols;
    const T* rr = res + row * cols;
    map_row<T, A>(sr, xr, cols, [&](int64_t j, A v) { return v + to_acc<A>(rr[j]); });
    xr = sr;
    __syncthreads();  // x and s may differ in alignment, so other threads read what this one wrote
  }
  A mu = A(0);
  if (!p.rms) {
    A acc = A(0);
    for_row<T, A>(xr, cols, [&](int64_t, A v) { acc += v; });
    mu = block_sum(acc, scratch) / A(cols);
  }
  A acc = A(0);
  for_row<T, A>(xr, cols, [&](int64_t, A v) { acc += (v - mu) * (v - mu); });
  const A rs = A(1) / sqrt(block_sum(acc, scratch) / A(cols) + A(p.eps));
  map_row<T, A>(y + row * cols, xr, cols, [&](int64_t j, A v) {
    A o = (v - mu) * rs;
    if (w) o *= to_acc<A>(w[j]);
    if (b) o += to_acc<A>(b[j]);
    return o;
  });
  if (threadIdx.x == 0) {
    if (mean) mean[row] = mu;
    rstd[row] = rs;
  }
}

// The [G, cols] partials: in shared memory when 2 cols fit (pw, pb), else in global memory.
template <class T>
__global__ void norm_bwd_kernel(NormParams p, T* dx, const T* dy, const T* x, const T* w,
                                const typename AccT<T>::type* mean, const typename AccT<T>::type* rstd,
                                typename AccT<T>::type* part_w, typename AccT<T>::type* part_b, bool in_smem) {
  using A = typename AccT<T>::type;
  extern __shared__ unsigned char smem_raw[];
  __shared__ A scratch[32];
  const int64_t cols = p.cols;
  A* pw = part_w ? (in_smem ? reinterpret_cast<A*>(smem_raw) : part_w + int64_t(blockIdx.x) * cols) : nullptr;
  A* pb = part_b ? (in_smem ? reinterpret_cast<A*>(smem_raw) + cols : part_b + int64_t(blockIdx.x) * cols) : nullptr;
  // Columns are visited by a fixed thread (for_row over dy rows of one alignment phase is not
  // guaranteed, so partials are indexed by plain striding: thread t owns columns t, t + blockDim...).
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    if (pw) pw[j] = A(0);
    if (pb) pb[j] = A(0);
  }
  __syncthreads();
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const T *xr = x + row * cols, *gr = dy + row * cols;
    const A mu = p.rms ? A(0) : mean[row], rs = rstd[row];
    A sg = A(0), sgx = A(0);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const A xh = (to_acc<A>(xr[j]) - mu) * rs, d = to_acc<A>(gr[j]), g = w ? d * to_acc<A>(w[j]) : d;
      sg += g;
      sgx += g * xh;
      if (pw) pw[j] += d * xh;
      if (pb) pb[j] += d;
    }
    const A mg = p.rms ? A(0) : block_sum(sg, scratch) / A(cols);
    const A mgx = block_sum(sgx, scratch) / A(cols);
    map_row<T, A>(dx + row * cols, gr, cols, [&](int64_t j, A d) {
      const A xh = (to_acc<A>(xr[j]) - mu) * rs, g = w ? d * to_acc<A>(w[j]) : d;
      return rs * (g - mg - xh * mgx);
    });
  }
  if (in_smem) {
    __syncthreads();
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      if (part_w) part_w[int64_t(blockIdx.x) * cols + j] = pw[j];
      if (part_b) part_b[int64_t(blockIdx.x) * cols + j] = pb[j];
    }
  }
}

template <class A>
__global__ void sum_partials_kernel(A* out, const A* part, int64_t g, int64_t cols) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < cols; j += int64_t(gridDim.x) * blockDim.x) {
    A s = A(0);
    for (int64_t i = 0; i < g; ++i) s += part[i * cols + j];  // coalesced across j, fixed order
    out[j] = s;
  }
}

int row_threads(int64_t cols) { return cols >= 2048 ? 256 : cols >= 512 ? 128 : 64; }

}  // namespace

void launch_norm_forward(const NormParams& p, const View& y, const View& sum_out, const View& x, const View& residual,
                         const View& w, const View& b, const View& mean, const View& rstd) {
  if (p.rows > 2147483647) fail(NX_ERR_NOT_IMPLEMENTED, current_api(), ": more than 2^31 rows");
  dispatch_float(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = typename AccT<T>::type;
    norm_fwd_kernel<T><<<unsigned(p.rows), row_threads(p.cols), 0, stream()>>>(
        p, static_cast<T*>(y.data), static_cast<T*>(sum_out.data), static_cast<const T*>(x.data),
        static_cast<const T*>(residual.data), static_cast<const T*>(w.data), static_cast<const T*>(b.data),
        static_cast<A*>(mean.data), static_cast<A*>(rstd.data));
    NX_CUDA_LAUNCH_CHECK();
  });
}

void launch_norm_backward(const NormParams& p, const View& dx, const View& dw, const View& db, const View& dy,
                          const View& x, const View& w, const View& mean, const View& rstd) {
  dispatch_float(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = typename AccT<T>::type;
    // G depends on rows only (not on the device), so the summation order is reproducible.
    const int64_t g = std::min<int64_t>(p.rows, 1024);
    const bool want = dw.data || db.data;
    Scratch part(current_device(), want ? size_t(2 * g * p.cols) * sizeof(A) : 1);
    A* pw = dw.data ? static_cast<A*>(part.ptr) : nullptr;
    A* pb = db.data ? static_cast<A*>(part.ptr) + g * p.cols : nullptr;
    const size_t smem = want ? size_t(2 * p.cols) * sizeof(A) : 0;
    const bool in_smem = want && smem <= 160 * 1024;
    if (in_smem && smem > 48 * 1024)
      NX_CUDA_CHECK(cudaFuncSetAttribute(norm_bwd_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    norm_bwd_kernel<T><<<unsigned(g), row_threads(p.cols), in_smem ? smem : 0, stream()>>>(
        p, static_cast<T*>(dx.data), static_cast<const T*>(dy.data), static_cast<const T*>(x.data),
        static_cast<const T*>(w.data), static_cast<const A*>(mean.data), static_cast<const A*>(rstd.data), pw, pb, in_smem);
    NX_CUDA_LAUNCH_CHECK();
    for (auto [out, src] : {std::pair<void*, A*>{dw.data, pw}, std::pair<void*, A*>{db.data, pb}}) {
      if (!out) continue;
      sum_partials_kernel<A><<<blocks_for(p.cols), kThreads, 0, stream()>>>(static_cast<A*>(out), src, g, p.cols);
      NX_CUDA_LAUNCH_CHECK();
    }
  });
}

}  // namespace nx::cuda
