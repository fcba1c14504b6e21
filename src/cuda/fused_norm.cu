// RMSNorm / LayerNorm over rows of a contiguous [rows, cols] matrix.
//   forward:  s = x (+ residual); mu = mean(s) (LayerNorm); rstd = 1/sqrt(mean((s - mu)^2) + eps);
//             y = (s - mu) rstd w + b. The variance is taken around the mean (no E[x^2] - mu^2
//             cancellation).
//   backward: xhat = (s - mu) rstd, g = dy w; dx = rstd (g - mean(g) - xhat mean(g xhat)) (no
//             mean(g) term for RMSNorm); dw = sum over rows of dy xhat, db = sum of dy.
// Fast path (rows whose width is a multiple of 16 bytes, every pointer 16-byte aligned, up to
// 8 packs of 16 bytes per thread): a persistent grid (occupancy-sized, every block the same
// number of rows) where block b owns rows b, b + G, ...; a thread holds its P packs of the row in
// registers (thread t: packs t, t + blockDim, ...), so DRAM sees each input once and each output
// once, and the next row's loads are issued before the current row's block reductions, so reads
// stay in flight through the barriers. w and b are read through L1 (every row reuses them). In
// the backward a thread owns the same columns in every row, so it sums dw and db for its
// block's rows in registers and writes row b of a [G, cols] partial; a second kernel adds the G
// partials in a fixed order: deterministic (for a given device: G follows its occupancy).
// Other shapes (odd widths, offset views, very wide rows) take the one-block-per-row kernels
// below, which re-read the row through L1/L2 and use the same [G, cols] partials.
#include <algorithm>
#include <functional>

#include "cuda/fused.cuh"

namespace nx::cuda {
namespace {

using namespace fused;

constexpr int kRegThreads = 512;

template <class T, int P>
__device__ __forceinline__ void load_row(Pack<T> (&v)[P], const T* row, int nvec) {
  constexpr int N = Pack<T>::N;
#pragma unroll
  for (int k = 0; k < P; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i < nvec) v[k] = ld_stream(row + int64_t(i) * N);
  }
}

// Forward over rows held in registers; RES: s = x + residual (rounded to T) is written and
// normalized. P packs per thread cover cols = nvec * N.
// Y: y's element type, T's, or bf16/f16 for f32 rows (a compiled step's cast epilogue,
// compile/epilogue.hpp): the f32 result rounded once more, as the cast after it did.
template <class T, int P, bool RES, class Y = T>
__global__ void __launch_bounds__(kRegThreads) norm_fwd_regs(NormParams p, Y* y, T* s, const T* x, const T* res,
                                                              const T* w, const T* b, typename AccT<T>::type* mean,
                                                              typename AccT<T>::type* rstd) {
  using A = typename AccT<T>::type;
  constexpr int N = Pack<T>::N;
  __shared__ A red[2][32];
  const int64_t cols = p.cols, rows = p.rows, step = gridDim.x;
  const int nvec = int(cols / N);
  Pack<T> cur[P], nxt[P], rcur[P], rnxt[P];
  int64_t row = blockIdx.x;
  if (row < rows) {
    load_row<T, P>(cur, x + row * cols, nvec);
    if (RES) load_row<T, P>(rcur, res + row * cols, nvec);
  }
  for (int slot = 0; row < rows; row += step) {
    if (row + step < rows) {  // the next row's reads go out before this row's reductions
      load_row<T, P>(nxt, x + (row + step) * cols, nvec);
      if (RES) load_row<T, P>(rnxt, res + (row + step) * cols, nvec);
    }
    if (RES) {
#pragma unroll
      for (int k = 0; k < P; ++k) {
        const int i = threadIdx.x + k * blockDim.x;
        if (i >= nvec) continue;
#pragma unroll
        for (int e = 0; e < N; ++e) cur[k].v[e] = from_acc<T>(to_acc<A>(cur[k].v[e]) + to_acc<A>(rcur[k].v[e]));
        st_plain(s + row * cols + int64_t(i) * N, cur[k]);  // read again: the next residual, the backward
      }
    }
    A mu = A(0);
    if (!p.rms) {
      A acc[1] = {A(0)};
#pragma unroll
      for (int k = 0; k < P; ++k)
        if (threadIdx.x + k * blockDim.x < nvec)
#pragma unroll
          for (int e = 0; e < N; ++e) acc[0] += to_acc<A>(cur[k].v[e]);
      block_sums<A, 1>(acc, red[slot]);
      slot ^= 1;
      mu = acc[0] / A(cols);
    }
    A acc[1] = {A(0)};
#pragma unroll
    for (int k = 0; k < P; ++k)
      if (threadIdx.x + k * blockDim.x < nvec)
#pragma unroll
        for (int e = 0; e < N; ++e) {
          const A d = to_acc<A>(cur[k].v[e]) - mu;
          acc[0] += d * d;
        }
    block_sums<A, 1>(acc, red[slot]);
    slot ^= 1;
    const A rs = A(1) / sqrt(acc[0] / A(cols) + A(p.eps));
#pragma unroll
    for (int k = 0; k < P; ++k) {
      const int i = threadIdx.x + k * blockDim.x;
      if (i >= nvec) continue;
      Pack<T> wp, bp, out;
      if (w) wp = ld_cached(w + int64_t(i) * N);
      if (b) bp = ld_cached(b + int64_t(i) * N);
#pragma unroll
      for (int e = 0; e < N; ++e) {
        A o = (to_acc<A>(cur[k].v[e]) - mu) * rs;
        if (w) o *= to_acc<A>(wp.v[e]);
        if (b) o += to_acc<A>(bp.v[e]);
        out.v[e] = from_acc<T>(o);
      }
      if constexpr (std::is_same_v<Y, T>) {
        st_stream(y + row * cols + int64_t(i) * N, out);
      } else {
        struct alignas(sizeof(Y) * N) Narrow { Y v[N]; } n;
#pragma unroll
        for (int e = 0; e < N; ++e) n.v[e] = from_acc<Y>(float(out.v[e]));
        *reinterpret_cast<Narrow*>(y + row * cols + int64_t(i) * N) = n;
      }
    }
    if (threadIdx.x == 0) {
      if (mean) mean[row] = mu;
      rstd[row] = rs;
    }
#pragma unroll
    for (int k = 0; k < P; ++k) {
      cur[k] = nxt[k];
      if (RES) rcur[k] = rnxt[k];
    }
  }
}

// Backward over rows held in registers (x and dy: one read each, dx: one write). Thread t owns
// the columns of packs t, t + blockDim, ... in every row: it sums dy xhat (and dy, LN) for its
// block's rows in registers and writes them as row blockIdx.x of part_w (part_b) [G, cols].
// MINB = 3 (blocks of at most 256 threads, at most 85 registers: three blocks per SM instead of
// two) for f16/bf16 RMSNorm at P = 2, which fits there without spills: half-width rows carry half
// the bytes per row in flight, so they need the extra resident rows more.
template <class T, int P, bool LN, int MINB = 1>
__global__ void __launch_bounds__(MINB == 1 ? kRegThreads : 256, MINB) norm_bwd_regs(NormParams p, T* dx, const T* dy, const T* x, const T* w,
                                                              const typename AccT<T>::type* mean,
                                                              const typename AccT<T>::type* rstd,
                                                              typename AccT<T>::type* part_w,
                                                              typename AccT<T>::type* part_b) {
  using A = typename AccT<T>::type;
  constexpr int N = Pack<T>::N;
  __shared__ A red[2][2 * 32];
  const int64_t cols = p.cols, rows = p.rows, step = gridDim.x;
  const int nvec = int(cols / N);
  Pack<T> xc[P], gc[P], xn[P], gn[P];
  A dwa[P][N], dba[LN ? P : 1][N];
#pragma unroll
  for (int k = 0; k < P; ++k)
#pragma unroll
    for (int e = 0; e < N; ++e) {
      dwa[k][e] = A(0);
      if constexpr (LN) dba[k][e] = A(0);
    }
  int64_t row = blockIdx.x;
  A mu = A(0), rs = A(0), mu_n = A(0), rs_n = A(0);
  if (row < rows) {
    load_row<T, P>(xc, x + row * cols, nvec);
    load_row<T, P>(gc, dy + row * cols, nvec);
    rs = rstd[row];
    if (LN) mu = mean[row];
  }
  for (int slot = 0; row < rows; row += step, slot ^= 1) {
    if (row + step < rows) {
      load_row<T, P>(xn, x + (row + step) * cols, nvec);
      load_row<T, P>(gn, dy + (row + step) * cols, nvec);
      rs_n = rstd[row + step];
      if (LN) mu_n = mean[row + step];
    }
    A acc[LN ? 2 : 1] = {};
#pragma unroll
    for (int k = 0; k < P; ++k) {
      const int i = threadIdx.x + k * blockDim.x;
      if (i >= nvec) continue;
      Pack<T> wp;
      if (w) wp = ld_cached(w + int64_t(i) * N);
#pragma unroll
      for (int e = 0; e < N; ++e) {
        const A xh = (to_acc<A>(xc[k].v[e]) - mu) * rs, d = to_acc<A>(gc[k].v[e]);
        const A g = w ? d * to_acc<A>(wp.v[e]) : d;
        acc[0] += g * xh;  // sum of g xhat
        dwa[k][e] += d * xh;
        if constexpr (LN) {
          acc[1] += g;
          dba[k][e] += d;
        }
      }
    }
    block_sums<A, LN ? 2 : 1>(acc, red[slot]);
    const A mgx = acc[0] / A(cols);
    A mg = A(0);
    if constexpr (LN) mg = acc[1] / A(cols);
#pragma unroll
    for (int k = 0; k < P; ++k) {
      const int i = threadIdx.x + k * blockDim.x;
      if (i >= nvec) continue;
      Pack<T> wp, out;
      if (w) wp = ld_cached(w + int64_t(i) * N);
#pragma unroll
      for (int e = 0; e < N; ++e) {
        const A xh = (to_acc<A>(xc[k].v[e]) - mu) * rs, d = to_acc<A>(gc[k].v[e]);
        const A g = w ? d * to_acc<A>(wp.v[e]) : d;
        out.v[e] = from_acc<T>(rs * (g - mg - xh * mgx));
      }
      st_stream(dx + row * cols + int64_t(i) * N, out);
    }
#pragma unroll
    for (int k = 0; k < P; ++k) {
      xc[k] = xn[k];
      gc[k] = gn[k];
    }
    mu = mu_n;
    rs = rs_n;
  }
#pragma unroll
  for (int k = 0; k < P; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i >= nvec) continue;
    const int64_t at = int64_t(blockIdx.x) * cols + int64_t(i) * N;
#pragma unroll
    for (int e = 0; e < N; ++e) {
      if (part_w) part_w[at + e] = dwa[k][e];
      if constexpr (LN) {
        if (part_b) part_b[at + e] = dba[k][e];
      }
    }
  }
}

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

// out[j] = sum over i < g of part[i, j]: block (32, 16) owns 32 columns; thread (c, r) adds rows
// r, r + 16, ... in order, then thread (c, 0) adds the 16 sums in order. Deterministic.
template <class A>
__global__ void __launch_bounds__(512) sum_partials_kernel(A* out, const A* part, int64_t g, int64_t cols) {
  __shared__ A sh[16][33];
  const int64_t j = int64_t(blockIdx.x) * 32 + threadIdx.x;
  A s = A(0);
  if (j < cols) {
#pragma unroll 8
    for (int64_t i = threadIdx.y; i < g; i += 16) s += part[i * cols + j];
  }
  sh[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && j < cols) {
    A t = A(0);
    for (int r = 0; r < 16; ++r) t += sh[r][threadIdx.x];
    out[j] = t;
  }
}

int row_threads(int64_t cols) { return cols >= 2048 ? 256 : cols >= 512 ? 128 : 64; }

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Threads and packs per thread for rows of nvec packs held in registers: about `target` packs per
// thread, blocks of 32..512 threads, P a power of two up to max_p; P = 0 when the row is too wide.
struct RegShape { int threads, packs; };
RegShape reg_shape(int64_t nvec, int target, int max_p) {
  const int64_t t = std::min<int64_t>(kRegThreads, std::max<int64_t>(32, ((nvec + target - 1) / target + 31) / 32 * 32));
  const int64_t per = (nvec + t - 1) / t;
  int p = 1;
  while (p < per) p *= 2;
  return {int(t), p <= max_p ? p : 0};
}

// f(integral_constant<P>) for p in {1, 2, 4, 8}, instantiating only P <= MaxP (p <= MaxP).
template <int MaxP, class F>
void with_packs(int p, F&& f) {
  if (p <= 1) f(std::integral_constant<int, 1>{});
  else if (p <= 2 || MaxP < 4) f(std::integral_constant<int, (MaxP < 2 ? MaxP : 2)>{});
  else if (p <= 4 || MaxP < 8) f(std::integral_constant<int, (MaxP < 4 ? MaxP : 4)>{});
  else f(std::integral_constant<int, MaxP>{});
}

// Packs of 16 bytes per thread: the register kernels aim for `target` and take at most `max`
// (else the row goes to the fallback). The limits keep every instantiation within its 128
// registers without spills (ptxas -v, sm_90): forward 39..128 registers, P = 8 only without a
// residual; backward 40..124 (f32, f64 up to P = 4; f16/bf16 up to P = 2, whose dw and db
// partials take 8 registers per pack each; 80 with MINB = 3).
constexpr int kFwdTarget = 4, kBwdTarget = 2;
template <class T> constexpr int fwd_max(bool res) { return res ? 4 : 8; }
template <class T> constexpr int bwd_max() { return sizeof(T) == 2 ? 2 : 4; }

}  // namespace

namespace {
// The register-row kernel for T rows written as Y (T, or bf16/f16 for f32 rows); false when the
// rows' width or alignment does not fit it.
template <class T, class Y>
bool norm_forward_regs(const ExecContext& ctx, const NormParams& p, const View& y, const View& sum_out, const View& x,
                       const View& residual, const View& w, const View& b, const View& mean, const View& rstd) {
  using A = typename AccT<T>::type;
  constexpr int N = Pack<T>::N;
  const RegShape rsh = reg_shape(p.cols / N, kFwdTarget, fwd_max<T>(residual.data != nullptr));
  const bool fast = p.cols % N == 0 && rsh.packs && aligned16(y.data) && aligned16(x.data) && aligned16(sum_out.data) &&
                    aligned16(residual.data) && aligned16(w.data) && aligned16(b.data);
  if (!fast) return false;
  auto go = [&](auto kernel) {
    const int64_t grid = persistent_grid(kernel, rsh.threads, p.rows);
    kernel<<<unsigned(grid), rsh.threads, 0, stream_of(ctx)>>>(
        p, static_cast<Y*>(y.data), static_cast<T*>(sum_out.data), static_cast<const T*>(x.data),
        static_cast<const T*>(residual.data), static_cast<const T*>(w.data), static_cast<const T*>(b.data),
        static_cast<A*>(mean.data), static_cast<A*>(rstd.data));
  };
  if (residual.data)
    with_packs<fwd_max<T>(true)>(rsh.packs, [&](auto pc) { go(norm_fwd_regs<T, decltype(pc)::value, true, Y>); });
  else
    with_packs<fwd_max<T>(false)>(rsh.packs, [&](auto pc) { go(norm_fwd_regs<T, decltype(pc)::value, false, Y>); });
  NX_CUDA_LAUNCH_CHECK();
  return true;
}
}  // namespace

void launch_norm_forward(const ExecContext& ctx, const NormParams& p, const View& y, const View& sum_out, const View& x,
                         const View& residual, const View& w, const View& b, const View& mean, const View& rstd) {
  if (p.rows > 2147483647) fail(NX_ERR_NOT_IMPLEMENTED, current_api(), ": more than 2^31 rows");
  if (y.dtype != x.dtype) {  // f32 rows, bf16/f16 y: the cast epilogue of a compiled step
    if (x.dtype != DType::F32 || (y.dtype != DType::BF16 && y.dtype != DType::F16))
      fail(NX_ERR_INTERNAL, current_api(), ": a norm of ", dtype_name(x.dtype), " rows cannot write ", dtype_name(y.dtype));
    const bool done = y.dtype == DType::BF16
                          ? norm_forward_regs<float, BFloat16>(ctx, p, y, sum_out, x, residual, w, b, mean, rstd)
                          : norm_forward_regs<float, Half>(ctx, p, y, sum_out, x, residual, w, b, mean, rstd);
    if (!done) {  // the other shapes: the f32 rows, then the cast (what the step did before folding)
      Scratch f32(ctx, size_t(p.rows * p.cols) * sizeof(float));
      View yf{f32.ptr, y.shape, y.strides, DType::F32};
      launch_norm_forward(ctx, p, yf, sum_out, x, residual, w, b, mean, rstd);
      launch_copy(ctx, y, yf);
    }
    return;
  }
  dispatch_float(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = typename AccT<T>::type;
    if (norm_forward_regs<T, T>(ctx, p, y, sum_out, x, residual, w, b, mean, rstd)) return;
    norm_fwd_kernel<T><<<unsigned(p.rows), row_threads(p.cols), 0, stream_of(ctx)>>>(
        p, static_cast<T*>(y.data), static_cast<T*>(sum_out.data), static_cast<const T*>(x.data),
        static_cast<const T*>(residual.data), static_cast<const T*>(w.data), static_cast<const T*>(b.data),
        static_cast<A*>(mean.data), static_cast<A*>(rstd.data));
    NX_CUDA_LAUNCH_CHECK();
  });
}

void launch_norm_backward(const ExecContext& ctx, const NormParams& p, const View& dx, const View& dw, const View& db,
                          const View& dy, const View& x, const View& w, const View& mean, const View& rstd) {
  dispatch_float(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = typename AccT<T>::type;
    constexpr int N = Pack<T>::N;
    const bool want = dw.data || db.data;
    const RegShape rsh = reg_shape(p.cols / N, kBwdTarget, bwd_max<T>());
    const bool fast = p.cols % N == 0 && rsh.packs && p.rows <= 2147483647 && aligned16(dx.data) && aligned16(dy.data) &&
                      aligned16(x.data) && aligned16(w.data);
    int64_t g = 0;
    std::function<void(A*, A*)> run;
    if (fast) {
      with_packs<bwd_max<T>()>(rsh.packs, [&](auto pc) {
        constexpr int P = decltype(pc)::value;
        auto setup = [&](auto kernel) {
          g = persistent_grid(kernel, rsh.threads, p.rows);
          run = [&, kernel, g](A* pw, A* pb) {
            kernel<<<unsigned(g), rsh.threads, 0, stream_of(ctx)>>>(
                p, static_cast<T*>(dx.data), static_cast<const T*>(dy.data), static_cast<const T*>(x.data),
                static_cast<const T*>(w.data), static_cast<const A*>(mean.data), static_cast<const A*>(rstd.data), pw, pb);
          };
        };
        if (!p.rms) setup(norm_bwd_regs<T, P, true>);
        else if (sizeof(T) == 2 && P == 2 && rsh.threads <= 256) setup(norm_bwd_regs<T, P, false, 3>);
        else setup(norm_bwd_regs<T, P, false>);
      });
    } else {
      // G depends on rows only (not on the device), so the summation order is reproducible.
      g = std::min<int64_t>(p.rows, 1024);
      const size_t smem = want ? size_t(2 * p.cols) * sizeof(A) : 0;
      const bool in_smem = want && smem <= 160 * 1024;
      if (in_smem && smem > 48 * 1024)
        NX_CUDA_CHECK(cudaFuncSetAttribute(norm_bwd_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
      run = [&, g, in_smem, smem](A* pw, A* pb) {
        norm_bwd_kernel<T><<<unsigned(g), row_threads(p.cols), in_smem ? smem : 0, stream_of(ctx)>>>(
            p, static_cast<T*>(dx.data), static_cast<const T*>(dy.data), static_cast<const T*>(x.data),
            static_cast<const T*>(w.data), static_cast<const A*>(mean.data), static_cast<const A*>(rstd.data), pw, pb,
            in_smem);
      };
    }
    Scratch part(ctx, want ? size_t(2 * g * p.cols) * sizeof(A) : 1);
    A* pw = dw.data ? static_cast<A*>(part.ptr) : nullptr;
    A* pb = db.data ? static_cast<A*>(part.ptr) + g * p.cols : nullptr;
    run(pw, pb);
    NX_CUDA_LAUNCH_CHECK();
    for (auto [out, src] : {std::pair<void*, A*>{dw.data, pw}, std::pair<void*, A*>{db.data, pb}}) {
      if (!out) continue;
      sum_partials_kernel<A><<<unsigned((p.cols + 31) / 32), dim3(32, 16), 0, stream_of(ctx)>>>(static_cast<A*>(out), src, g,
                                                                                       p.cols);
      NX_CUDA_LAUNCH_CHECK();
    }
  });
}

}  // namespace nx::cuda
