// RoPE's rotation (the `rotary` kernel of src/ops/ops.yaml): one kernel in place of the composite's
// four products, difference, sum and two-part concatenation, with the composite's rounding (each
// product and each sum rounded to the storage dtype; the _rn intrinsics keep nvcc from contracting
// a product into the sum), so the output has the composite's bits and the CPU kernel's.
#include "cuda/kernels.cuh"

namespace nx::cuda {
namespace {

template <class A> __device__ __forceinline__ A mul_rn(A a, A b);
template <> __device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
template <> __device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
template <class A> __device__ __forceinline__ A add_rn(A a, A b);
template <> __device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
template <> __device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }
template <class A> __device__ __forceinline__ A sub_rn(A a, A b);
template <> __device__ __forceinline__ float sub_rn(float a, float b) { return __fsub_rn(a, b); }
template <> __device__ __forceinline__ double sub_rn(double a, double b) { return __dsub_rn(a, b); }

// v rounded to T and widened back (identity for f32, f64)
template <class T, class A>
__device__ __forceinline__ A rounded(A v) {
  T r;
  store_f64(&r, double(v));
  return A(load_f64(&r));
}

template <class T>
__global__ void rotary_kernel(T* __restrict__ dst, const T* __restrict__ x, const T* __restrict__ cosp,
                              const T* __restrict__ sinp, int64_t heads, int64_t tn, int64_t half, int64_t s0, int64_t s1,
                              int64_t s2, int64_t s3, int64_t n, bool inverse) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e % half, r = e / half, t = r % tn, h = (r / tn) % heads, b = r / tn / heads;
    const T* xr = x + b * s0 + h * s1 + t * s2;
    const A x1 = A(load_f64(xr + i * s3)), x2 = A(load_f64(xr + (i + half) * s3));
    const A c = A(load_f64(cosp + t * half + i)), s = A(load_f64(sinp + t * half + i));
    const A x1c = rounded<T>(mul_rn(x1, c)), x2s = rounded<T>(mul_rn(x2, s));
    const A x2c = rounded<T>(mul_rn(x2, c)), x1s = rounded<T>(mul_rn(x1, s));
    T* dr = dst + r * 2 * half;
    store_f64(dr + i, double(inverse ? add_rn(x1c, x2s) : sub_rn(x1c, x2s)));
    store_f64(dr + half + i, double(inverse ? sub_rn(x2c, x1s) : add_rn(x2c, x1s)));
  }
}

}  // namespace

void launch_rotary(const ExecContext& ctx, const View& dst, const View& x, const View& cosv, const View& sinv, bool inverse) {
  const int64_t half = x.shape[3] / 2, n = x.shape[0] * x.shape[1] * x.shape[2] * half;
  if (!n) return;
  auto go = [&](auto tag) {
    using T = decltype(tag);
    rotary_kernel<T><<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(
        static_cast<T*>(dst.data), static_cast<const T*>(x.data), static_cast<const T*>(cosv.data),
        static_cast<const T*>(sinv.data), x.shape[1], x.shape[2], half, x.strides[0], x.strides[1], x.strides[2],
        x.strides[3], n, inverse);
  };
  switch (x.dtype) {
    case DType::F32: go(float{}); break;
    case DType::F64: go(double{}); break;
    case DType::F16: go(Half{}); break;
    case DType::BF16: go(BFloat16{}); break;
    default: fail(NX_ERR_DTYPE, current_api(), ": rotary embedding needs a floating dtype, got ", dtype_name(x.dtype));
  }
  NX_CUDA_LAUNCH_CHECK();
}

}  // namespace nx::cuda
