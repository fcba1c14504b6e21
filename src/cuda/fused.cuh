// Fused kernels (fused_norm.cu, fused_loss.cu, fused_optim.cu): the row helpers
// they share. Rows are contiguous; a block owns a row and walks it with 16-byte vector accesses
// over the part that is 16-byte aligned (a scalar head and tail cover the rest, so odd widths
// such as a 50257-token vocabulary still vectorize). Arithmetic in A = float (double for f64).
#pragma once
#include <algorithm>
#include <cstring>
#include <vector>

#include "cuda/kernels.cuh"  // the launchers (launch_norm_forward...)

namespace nx::cuda {

namespace fused {

template <class T> struct AccT { using type = float; };
template <> struct AccT<double> { using type = double; };

template <class A> __device__ __forceinline__ A to_acc(float v) { return A(v); }
template <class A> __device__ __forceinline__ A to_acc(double v) { return A(v); }
template <class A> __device__ __forceinline__ A to_acc(Half v) { return A(__half2float(__ushort_as_half(v.bits))); }
template <class A> __device__ __forceinline__ A to_acc(BFloat16 v) { return A(__bfloat162float(__ushort_as_bfloat16(v.bits))); }
template <class T> __device__ __forceinline__ T from_acc(float v) { return T(v); }
template <> __device__ __forceinline__ Half from_acc<Half>(float v) { return Half{__half_as_ushort(__float2half_rn(v))}; }
template <> __device__ __forceinline__ BFloat16 from_acc<BFloat16>(float v) {
  return BFloat16{__bfloat16_as_ushort(__float2bfloat16_rn(v))};
}
template <class T> __device__ __forceinline__ T from_acc(double v) { return T(v); }

template <class T> struct alignas(16) Pack { static constexpr int N = 16 / sizeof(T); T v[N]; };

// Elements before the first 16-byte boundary of p (p is at least element-aligned).
template <class T> __device__ __forceinline__ int64_t head_of(const void* p, int64_t cols) {
  const int64_t mis = int64_t(reinterpret_cast<uintptr_t>(p) & 15);
  const int64_t h = mis ? (16 - mis) / int64_t(sizeof(T)) : 0;
  return h < cols ? h : cols;
}

// f(j, x[j]) for every j of a row of cols elements, x read with 16-byte loads where aligned.
// Element j is always visited by the same thread for the same (row pointer, cols), so a thread
// may write x[j] in one pass and read it back in the next without synchronization.
template <class T, class A, class F>
__device__ __forceinline__ void for_row(const T* x, int64_t cols, F&& f) {
  constexpr int N = Pack<T>::N;
  const int64_t h = head_of<T>(x, cols), nv = (cols - h) / N, tail = h + nv * N;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) f(j, to_acc<A>(x[j]));
  const Pack<T>* xv = reinterpret_cast<const Pack<T>*>(x + h);
  for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
    Pack<T> pk = xv[i];
#pragma unroll
    for (int k = 0; k < N; ++k) f(h + i * N + k, to_acc<A>(pk.v[k]));
  }
  for (int64_t j = tail + threadIdx.x; j < cols; j += blockDim.x) f(j, to_acc<A>(x[j]));
}

// y[j] = f(j, x[j]) with 16-byte loads and stores where x and y have the same alignment phase.
template <class T, class A, class F>
__device__ __forceinline__ void map_row(T* y, const T* x, int64_t cols, F&& f) {
  constexpr int N = Pack<T>::N;
  if ((reinterpret_cast<uintptr_t>(x) & 15) != (reinterpret_cast<uintptr_t>(y) & 15)) {
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) y[j] = from_acc<T>(f(j, to_acc<A>(x[j])));
    return;
  }
  const int64_t h = head_of<T>(x, cols), nv = (cols - h) / N, tail = h + nv * N;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) y[j] = from_acc<T>(f(j, to_acc<A>(x[j])));
  const Pack<T>* xv = reinterpret_cast<const Pack<T>*>(x + h);
  Pack<T>* yv = reinterpret_cast<Pack<T>*>(y + h);
  for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
    Pack<T> pk = xv[i], out;
#pragma unroll
    for (int k = 0; k < N; ++k) out.v[k] = from_acc<T>(f(h + i * N + k, to_acc<A>(pk.v[k])));
    yv[i] = out;
  }
  for (int64_t j = tail + threadIdx.x; j < cols; j += blockDim.x) y[j] = from_acc<T>(f(j, to_acc<A>(x[j])));
}

// 16-byte loads and stores of a Pack (p 16-byte aligned): streaming (evict-first, for data read
// or written once), read-only through L1 (for a weight every row reuses), and plain.
template <class T> __device__ __forceinline__ Pack<T> ld_stream(const T* p) {
  const uint4 u = __ldcs(reinterpret_cast<const uint4*>(p));
  Pack<T> r;
  memcpy(&r, &u, 16);
  return r;
}
template <class T> __device__ __forceinline__ Pack<T> ld_cached(const T* p) {
  const uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
  Pack<T> r;
  memcpy(&r, &u, 16);
  return r;
}
template <class T> __device__ __forceinline__ void st_stream(T* p, const Pack<T>& v) {
  uint4 u;
  memcpy(&u, &v, 16);
  __stcs(reinterpret_cast<uint4*>(p), u);
}
template <class T> __device__ __forceinline__ void st_plain(T* p, const Pack<T>& v) {
  *reinterpret_cast<Pack<T>*>(p) = v;
}

// Sums of NV values over the block, returned to every thread in place: one barrier. slot: NV * 32
// values of shared memory. Callers alternate between two slots across consecutive calls (a
// thread writes slot a in call k+2 only after passing call k+1's barrier, which every thread
// reaches after reading slot a in call k), so no trailing barrier is needed. Fixed order.
template <class A, int NV>
__device__ __forceinline__ void block_sums(A (&v)[NV], A* slot) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    for (int o = 16; o > 0; o >>= 1) v[k] += __shfl_xor_sync(0xffffffffu, v[k], o);
    if (lane == 0) slot[k * 32 + warp] = v[k];
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    A total = A(0);
    for (int w = 0; w < nwarps; ++w) total += slot[k * 32 + w];
    v[k] = total;
  }
}

// Sum over the block, returned to every thread. scratch: 32 values of shared memory; the
// trailing barrier lets the caller reuse scratch at once.
template <class A>
__device__ __forceinline__ A block_sum(A v, A* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  A total = A(0);
  for (int w = 0; w < nwarps; ++w) total += scratch[w];  // same order in every thread
  __syncthreads();
  return total;
}

// Calls f(T{}) for the floating storage types.
template <class F>
void dispatch_float(DType d, F&& f) {
  switch (d) {
    case DType::F32: f(float{}); break;
    case DType::F64: f(double{}); break;
    case DType::F16: f(Half{}); break;
    case DType::BF16: f(BFloat16{}); break;
    default: fail(NX_ERR_DTYPE, current_api(), ": fused kernels need a floating dtype, got ", dtype_name(d));
  }
}

}  // namespace fused
}  // namespace nx::cuda
