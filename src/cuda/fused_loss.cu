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
//             A 16-bit element costs about 5.5 instructions (bf16 [*, 50257] was bound by
//             instructions, not DRAM, at 15): a widening (shift, mask or HADD2.F32), half a
//             packed max, one FFMA, one ex2 and one FADD; see Exp below. A thread's last chunk is
//             padded with -inf instead of testing every element.
//   backward: one pass: dlogits = scale[row] (exp(logit - lse) - [j == target]), the row read
//             once and written once with streaming 16-byte loads and stores.
// exp is ex2.approx (2 ulp) for f32/f16/bf16, exp for f64.
#include <cmath>

#include "cuda/fused.cuh"

namespace nx::cuda {
namespace {

using namespace fused;

// The forward's online state is (m, s): m the running max, s the sum of E::exp(v k - M) with
// M = scaled(m) = m k rounded. f32/f16/bf16: k = log2 e and E::exp = ex2.approx.ftz, so an element
// costs one FFMA (exact product, one rounding) and one MUFU; results below 2^-126 flush to zero,
// which no sum of at least 1 can notice. s is the true sum of exp(v - m) times 2^rho, rho = m k - M
// (the rounding of M, below half an ulp), so lse = m + (log s - rho ln 2): as exact as m + log(sum).
// f64: k = 1, M = m, E::exp = exp, as before.
template <class A> struct Exp;
template <> struct Exp<float> {
  static constexpr float k = kLog2e;
  __device__ static __forceinline__ float scaled(float m) { return __fmul_rn(m, k); }  // never fused into an FFMA
  __device__ static __forceinline__ float exp(float t) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(t));
    return y;
  }
  __device__ static __forceinline__ float lse(float m, float s) {
    if (isinf(m)) return m + logf(s);  // -inf (no finite logit) or NaN (a +inf logit), as before
    const float rho = fmaf(m, k, -scaled(m));
    const float l = m + (logf(s) - rho * 0.6931471805599453f);
    return l < m ? m : l;  // lse >= max (so a loss is never negative), which ex2's error could break; keeps NaN
  }
};
template <> struct Exp<double> {
  static constexpr double k = 1.0;
  __device__ static __forceinline__ double scaled(double m) { return m; }
  __device__ static __forceinline__ double exp(double t) { return ::exp(t); }
  __device__ static __forceinline__ double lse(double m, double s) { return m + log(s); }
};

// Merges the online state (m2, s2) into (m, s).
template <class A>
__device__ __forceinline__ void merge(A& m, A& s, A m2, A s2) {
  using E = Exp<A>;
  if (m2 == A(-INFINITY)) return;
  if (m == A(-INFINITY)) { m = m2; s = s2; return; }
  if (m2 > m) { s = s * E::exp(E::scaled(m) - E::scaled(m2)) + s2; m = m2; }
  else s += s2 * E::exp(E::scaled(m2) - E::scaled(m));
}

__device__ __forceinline__ float exp_diff(float a, float b) { return exp2f((a - b) * kLog2e); }
__device__ __forceinline__ double exp_diff(double a, double b) { return exp(a - b); }

// A 16-byte pack as 32-bit words: its elements widened to A, the max of its elements, and a pack
// of -inf (what a chunk's slots past the row's end hold: they change neither max nor sum). Two
// 16-bit elements share a word: their max is one packed max (like fmax it ignores a NaN, which
// the sum still catches); bf16 widens with a shift or a mask.
template <class T> struct Words;
template <> struct Words<float> {
  __device__ static __forceinline__ uint4 neg_inf() { return make_uint4(0xff800000u, 0xff800000u, 0xff800000u, 0xff800000u); }
  __device__ static __forceinline__ void widen(const uint4& w, float (&v)[4]) {
    v[0] = __uint_as_float(w.x); v[1] = __uint_as_float(w.y); v[2] = __uint_as_float(w.z); v[3] = __uint_as_float(w.w);
  }
};
template <> struct Words<double> {
  __device__ static __forceinline__ uint4 neg_inf() { return make_uint4(0u, 0xfff00000u, 0u, 0xfff00000u); }
  __device__ static __forceinline__ void widen(const uint4& w, double (&v)[2]) {
    v[0] = __hiloint2double(int(w.y), int(w.x));
    v[1] = __hiloint2double(int(w.w), int(w.z));
  }
};
// max of two words of two 16-bit values each, as the packed type P (__hmax2: one HMNMX2 on sm_80+).
template <class P>
__device__ __forceinline__ uint32_t max_x2(uint32_t a, uint32_t b) {
  P x, y;
  memcpy(&x, &a, 4);
  memcpy(&y, &b, 4);
  const P r = __hmax2(x, y);
  uint32_t d;
  memcpy(&d, &r, 4);
  return d;
}
template <> struct Words<BFloat16> {
  __device__ static __forceinline__ uint4 neg_inf() { return make_uint4(0xff80ff80u, 0xff80ff80u, 0xff80ff80u, 0xff80ff80u); }
  __device__ static __forceinline__ uint32_t max2(uint32_t a, uint32_t b) { return max_x2<__nv_bfloat162>(a, b); }
  __device__ static __forceinline__ float lo(uint32_t w) { return __uint_as_float(w << 16); }
  __device__ static __forceinline__ float hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }
};
template <> struct Words<Half> {
  __device__ static __forceinline__ uint4 neg_inf() { return make_uint4(0xfc00fc00u, 0xfc00fc00u, 0xfc00fc00u, 0xfc00fc00u); }
  __device__ static __forceinline__ uint32_t max2(uint32_t a, uint32_t b) { return max_x2<__half2>(a, b); }
  __device__ static __forceinline__ float lo(uint32_t w) { return __half2float(__ushort_as_half((unsigned short)(w & 0xffffu))); }
  __device__ static __forceinline__ float hi(uint32_t w) { return __half2float(__ushort_as_half((unsigned short)(w >> 16))); }
};

// a[0] = f(... f(a[0], a[1]) ...) over a[0, 2H) as a tree of depth log2(2H) (H a power of 2).
template <int H, class V, class F>
__device__ __forceinline__ void fold(V* a, F f) {
  if constexpr (H > 0) {
#pragma unroll
    for (int i = 0; i < H; ++i) a[i] = f(a[i], a[i + H]);
    fold<H / 2>(a, f);
  }
}

// The U packs of a chunk as U * N values of A and their max (for 16-bit types the max is taken on
// the packed words, a tree of max2, before widening).
template <class T, int U>
__device__ __forceinline__ typename AccT<T>::type widen_chunk(const uint4 (&pk)[U],
                                                              typename AccT<T>::type (&v)[U * Pack<T>::N]) {
  using A = typename AccT<T>::type;
  constexpr int N = Pack<T>::N;
  if constexpr (sizeof(T) == 2) {
    uint32_t w[4 * U];
#pragma unroll
    for (int u = 0; u < U; ++u) { w[4 * u] = pk[u].x; w[4 * u + 1] = pk[u].y; w[4 * u + 2] = pk[u].z; w[4 * u + 3] = pk[u].w; }
#pragma unroll
    for (int i = 0; i < 4 * U; ++i) { v[2 * i] = Words<T>::lo(w[i]); v[2 * i + 1] = Words<T>::hi(w[i]); }
    fold<2 * U>(w, Words<T>::max2);
    return fmaxf(Words<T>::lo(w[0]), Words<T>::hi(w[0]));
  } else {
    A mx[U * N];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      A e[N];
      Words<T>::widen(pk[u], e);
#pragma unroll
      for (int k = 0; k < N; ++k) v[u * N + k] = mx[u * N + k] = e[k];
    }
    fold<U * N / 2>(mx, [](A a, A b) { return fmax(a, b); });
    return mx[0];
  }
}

// The online (m, s) with n more values whose max is cm: one rescale, then one FFMA and one exp
// per value, summed in P independent partial sums. While m is -inf every value so far is -inf
// (or NaN, which fmax skips), and the sum stays 0.
template <class A, int n, int P>
__device__ __forceinline__ void online_chunk(A& m, A& s, const A (&v)[n], A cm) {
  using E = Exp<A>;
  if (cm > m) {
    s *= E::exp(E::scaled(m) - E::scaled(cm));  // m = -inf: s is 0 and the factor 0
    m = cm;
  }
  if (m == A(-INFINITY)) return;
  const A M = E::scaled(m);
  A part[P];
#pragma unroll
  for (int p = 0; p < P; ++p) part[p] = A(0);
#pragma unroll
  for (int i = 0; i < n; ++i) part[i % P] += E::exp(fma(v[i], E::k, -M));
  fold<P / 2>(part, [](A a, A b) { return a + b; });
  s += part[0];
}

constexpr int kUnroll = 4;  // packs of 16 bytes per thread per chunk, all loaded before any use
// The forward's: f64 at U = 4 spills registers around exp's slow path (and is bound by exp's DFMAs)
template <class T> constexpr int kFwdUnroll = sizeof(T) == 8 ? 2 : kUnroll;

template <class T, int U>
__global__ void __launch_bounds__(512) xent_fwd_kernel(typename AccT<T>::type* loss, typename AccT<T>::type* lse,
                                                       const T* logits, const int64_t* target, int64_t cols,
                                                       int64_t ignore_index) {
  using A = typename AccT<T>::type;
  constexpr int N = Pack<T>::N;
  __shared__ A ms[32], ss[32];
  const int64_t row = blockIdx.x;
  const T* x = logits + row * cols;
  const int64_t h = head_of<T>(x, cols), nv = (cols - h) / N, tail = h + nv * N;
  A m = A(-INFINITY), s = A(0);
  auto chunk = [&](const uint4(&pk)[U]) {
    A v[U * N];
    const A cm = widen_chunk<T, U>(pk, v);
    online_chunk<A, U * N, U>(m, s, v, cm);
  };
  // This thread's packs: cnt of them, stride apart (cnt < 2^31: a row of 2^31 * 128 packs
  // would not fit in memory). Whole chunks first, unpredicated, then one partial chunk.
  const int stride = int(blockDim.x);
  const int cnt = threadIdx.x < nv ? int((nv - 1 - threadIdx.x) / stride) + 1 : 0;
  const uint4* p = reinterpret_cast<const uint4*>(x + h) + threadIdx.x;
  int c = 0;
  for (; c + U <= cnt; c += U, p += U * stride) {
    uint4 pk[U];
#pragma unroll
    for (int u = 0; u < U; ++u) pk[u] = __ldcs(p + u * stride);
    chunk(pk);
  }
  if (c < cnt) {
    const uint4 neg_inf = Words<T>::neg_inf();
    uint4 pk[U];
#pragma unroll
    for (int u = 0; u < U; ++u) pk[u] = c + u < cnt ? __ldcs(p + u * stride) : neg_inf;
    chunk(pk);
  }
  if (threadIdx.x < h) {
    const A v[1] = {to_acc<A>(x[threadIdx.x])};
    online_chunk<A, 1, 1>(m, s, v, v[0]);
  }
  if (tail + threadIdx.x < cols) {
    const A v[1] = {to_acc<A>(x[tail + threadIdx.x])};
    online_chunk<A, 1, 1>(m, s, v, v[0]);
  }
  for (int o = 16; o > 0; o >>= 1) merge(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) { ms[warp] = m; ss[warp] = s; }
  __syncthreads();
  if (threadIdx.x == 0) {
    A tm = A(-INFINITY), ts = A(0);
    for (int w = 0; w < int((blockDim.x + 31) >> 5); ++w) merge(tm, ts, ms[w], ss[w]);
    const A l = Exp<A>::lse(tm, ts);
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

void launch_xent_forward(const ExecContext& ctx, const View& loss, const View& lse, const View& logits,
                         const View& target, int64_t rows, int64_t cols, int64_t ignore_index) {
  if (rows > 2147483647) fail(NX_ERR_NOT_IMPLEMENTED, current_api(), ": more than 2^31 rows");
  dispatch_float(logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = typename AccT<T>::type;
    xent_fwd_kernel<T, kFwdUnroll<T>><<<unsigned(rows), xent_threads(cols), 0, stream_of(ctx)>>>(
        static_cast<A*>(loss.data), static_cast<A*>(lse.data), static_cast<const T*>(logits.data),
        static_cast<const int64_t*>(target.data), cols, ignore_index);
    NX_CUDA_LAUNCH_CHECK();
  });
}

void launch_xent_backward(const ExecContext& ctx, const View& dlogits, const View& logits, const View& target,
                          const View& lse, const View& scale, int64_t rows, int64_t cols, int64_t ignore_index) {
  if (rows > 2147483647) fail(NX_ERR_NOT_IMPLEMENTED, current_api(), ": more than 2^31 rows");
  dispatch_float(logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = typename AccT<T>::type;
    xent_bwd_kernel<T, kUnroll><<<unsigned(rows), xent_threads(cols), 0, stream_of(ctx)>>>(
        static_cast<T*>(dlogits.data), static_cast<const T*>(logits.data), static_cast<const int64_t*>(target.data),
        static_cast<const A*>(lse.data), static_cast<const A*>(scale.data), cols, ignore_index);
    NX_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace nx::cuda
