// Indexing kernels (index_select/index_add, gather/scatter_add; the adds use atomics, so their
// float sums are not bit-reproducible run to run; f16/bf16 destinations accumulate in f32) and
// the counter-based random generator, which is the same Philox function as the CPU's: a seed
// gives identical tensors on both devices.
#include <cub/device/device_radix_sort.cuh>

#include "core/philox.hpp"
#include "cuda/kernels.cuh"

namespace nx::cuda {
namespace {

__device__ __forceinline__ int64_t index_at(const void* index, bool i64, int64_t j) {
  return i64 ? static_cast<const int64_t*>(index)[j] : int64_t(static_cast<const int32_t*>(index)[j]);
}

template <class B>
__global__ void index_select_kernel(B* dst, const B* src, const void* index, bool i64, int64_t nidx, int64_t n,
                                    int64_t inner, int64_t total) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e % inner, row = e / inner, j = row % nidx, o = row / nidx;
    dst[e] = src[(o * n + index_at(index, i64, j)) * inner + i];
  }
}

// Hardware atomic adds in the accumulation type: f32 and f64 add into dst itself; f16/bf16 add
// into an f32 buffer (with_accumulator below), each source element converted in registers.
__device__ __forceinline__ void atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(double* p, double v) { atomicAdd(p, v); }
template <class T> __device__ __forceinline__ T widen(T v) { return v; }
__device__ __forceinline__ float widen(Half v) { return __half2float(__ushort_as_half(v.bits)); }
__device__ __forceinline__ float widen(BFloat16 v) { return __bfloat162float(__ushort_as_bfloat16(v.bits)); }

// A is the accumulator's type: T for f32/f64, float for f16/bf16.
template <class T, class A>
__global__ void index_add_kernel(A* dst, const T* src, const void* index, bool i64, int64_t nidx, int64_t n,
                                 int64_t inner, int64_t total) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e % inner, row = e / inner, j = row % nidx, o = row / nidx;
    atomic_add(dst + (o * n + index_at(index, i64, j)) * inner + i, widen(src[e]));
  }
}

struct Dims {
  int nd;
  int64_t index_shape[kMaxDims];
  int64_t target_strides[kMaxDims];  // contiguous strides of the gathered-from / scattered-to tensor
};

__device__ __forceinline__ int64_t target_offset(const Dims& d, int64_t e, int64_t axis, int64_t idx) {
  int64_t off = 0;
  for (int k = d.nd - 1; k >= 0; --k) {
    int64_t c = e % d.index_shape[k];
    e /= d.index_shape[k];
    off += (k == axis ? idx : c) * d.target_strides[k];
  }
  return off;
}

template <class B>
__global__ void gather_kernel(B* dst, const B* src, const void* index, bool i64, Dims d, int64_t axis, int64_t total) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x)
    dst[e] = src[target_offset(d, e, axis, index_at(index, i64, e))];
}

template <class T, class A>
__global__ void scatter_add_kernel(A* dst, const T* src, const void* index, bool i64, Dims d, int64_t axis, int64_t total) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x)
    atomic_add(dst + target_offset(d, e, axis, index_at(index, i64, e)), widen(src[e]));
}

template <class T>
__global__ void random_kernel(T* dst, int64_t n, uint64_t seed, uint64_t offset, const uint64_t* at, bool normal) {
  if (at) {  // a compiled plan's draw: (seed, offset) read from device memory at run time, not graph arguments
    seed = at[0];
    offset = at[1];
  }
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    double v = normal ? philox_normal(offset + uint64_t(i), seed) : philox_uniform(offset + uint64_t(i), seed);
    if constexpr (std::is_same_v<T, double>) {
      dst[i] = v;
    } else {
      float f = float(v);
      if (!normal && f >= 1.0f) f = 0.99999994f;
      store_f64(dst + i, double(f));
    }
  }
}

Dims make_dims(const View& index, const std::vector<int64_t>& target_shape) {
  if (index.shape.size() > size_t(kMaxDims))
    fail(NX_ERR_NOT_IMPLEMENTED, current_api(), ": gather/scatter on CUDA supports up to ", kMaxDims, " dimensions");
  Dims d{};
  d.nd = int(index.shape.size());
  auto st = contiguous_strides(target_shape);
  for (int k = 0; k < d.nd; ++k) {
    d.index_shape[k] = index.shape[size_t(k)];
    d.target_strides[k] = st[size_t(k)];
  }
  return d;
}

// Calls add(T{}, A* acc) for dst's dtype T with the accumulator acc that the atomic adds go to:
// dst itself for f32/f64; for f16/bf16 an f32 copy of dst in scratch memory, written back into dst
// (rounded once) after add. Half-precision atomics would round every partial sum: 4096 ones added
// into one bf16 element stop at 256 (256 + 1 rounds back to 256), a frequent token's embedding
// gradient loses most of its mass. The price is two passes over dst (widen, narrow) and 4 bytes of
// scratch per element, against a sum that is right to f32 before its one rounding.
template <class F>
void with_accumulator(const ExecContext& ctx, const View& dst, F&& add) {
  auto in_f32 = [&](auto tag) {
    Scratch acc(ctx, size_t(dst.numel()) * sizeof(float));
    View wide{acc.ptr, dst.shape, contiguous_strides(dst.shape), DType::F32};
    launch_copy(ctx, wide, dst);
    add(tag, static_cast<float*>(acc.ptr));
    launch_copy(ctx, dst, wide);
  };
  switch (dst.dtype) {
    case DType::F32: add(float{}, static_cast<float*>(dst.data)); break;
    case DType::F64: add(double{}, static_cast<double*>(dst.data)); break;
    case DType::F16: in_f32(Half{}); break;
    case DType::BF16: in_f32(BFloat16{}); break;
    default:
      fail(NX_ERR_DTYPE, current_api(), ": CUDA index_add/scatter_add support f32, f64, f16 and bf16, got ",
           dtype_name(dst.dtype));
  }
}

}  // namespace

void launch_index_select(const ExecContext& ctx, const View& dst, const View& src, const View& index, int64_t outer,
                         int64_t n, int64_t inner) {
  const int64_t nidx = index.numel(), total = outer * nidx * inner;
  if (!total) return;
  dispatch_bits(dtype_size(src.dtype), [&](auto tag) {
    using B = decltype(tag);
    index_select_kernel<B><<<blocks_for(total), kThreads, 0, stream_of(ctx)>>>(static_cast<B*>(dst.data), static_cast<const B*>(src.data),
        index.data, index.dtype == DType::I64, nidx, n, inner, total);
  });
  NX_CUDA_LAUNCH_CHECK();
}

// Deterministic index_add (nx_runtime_set_deterministic): the source rows are stably sorted by
// destination row (CUB radix sort of (o * n + index[j], o * nidx + j)), then one thread per
// (run of equal destinations, inner element) adds the run's rows in ascending source order: the
// same sums in the same order every time, where atomics add in whatever order blocks arrive.
__global__ void index_keys_kernel(const void* index, bool i64, int64_t nidx, int64_t n, int64_t rows, int64_t* keys,
                                  int64_t* vals) {
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += int64_t(gridDim.x) * blockDim.x) {
    keys[r] = (r / nidx) * n + index_at(index, i64, r % nidx);
    vals[r] = r;
  }
}
template <class T, class A>
__global__ void index_add_sorted_kernel(A* dst, const T* src, const int64_t* keys, const int64_t* rows_sorted,
                                        int64_t rows, int64_t inner) {
  const int64_t total = rows * inner;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t p = e / inner, i = e % inner;
    if (p > 0 && keys[p - 1] == keys[p]) continue;  // not the start of a run
    A acc = dst[keys[p] * inner + i];
    for (int64_t q = p; q < rows && keys[q] == keys[p]; ++q) acc += widen(src[rows_sorted[q] * inner + i]);
    dst[keys[p] * inner + i] = acc;
  }
}

__global__ void scatter_keys_kernel(const void* index, bool i64, Dims d, int64_t axis, int64_t total, int64_t* keys,
                                    int64_t* vals) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    keys[e] = target_offset(d, e, axis, index_at(index, i64, e));
    vals[e] = e;
  }
}

// dst[key * inner + i] += src[row * inner + i] for every (key, row) that make_keys writes (rows
// of them, into keys_in / vals_in), deterministically: sorted, then summed run by run.
template <class MakeKeys>
void ordered_add(const ExecContext& ctx, const View& dst, const View& src, int64_t rows, int64_t inner, MakeKeys make_keys) {
  if (rows > INT32_MAX) fail(NX_ERR_NOT_IMPLEMENTED, current_api(), ": deterministic scatter of more than 2^31 rows");
  Scratch pairs(ctx, size_t(rows) * 4 * sizeof(int64_t));
  int64_t* keys_in = static_cast<int64_t*>(pairs.ptr);
  int64_t *vals_in = keys_in + rows, *keys_out = vals_in + rows, *vals_out = keys_out + rows;
  make_keys(keys_in, vals_in);
  NX_CUDA_LAUNCH_CHECK();
  size_t temp_bytes = 0;
  NX_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in, keys_out, vals_in, vals_out, int(rows), 0, 64,
                                                stream_of(ctx)));
  Scratch temp(ctx, std::max<size_t>(temp_bytes, 1));
  NX_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.ptr, temp_bytes, keys_in, keys_out, vals_in, vals_out, int(rows), 0,
                                                64, stream_of(ctx)));
  with_accumulator(ctx, dst, [&](auto tag, auto* acc) {
    using T = decltype(tag);
    using A = std::remove_pointer_t<decltype(acc)>;
    index_add_sorted_kernel<T, A><<<blocks_for(rows * inner), kThreads, 0, stream_of(ctx)>>>(
        acc, static_cast<const T*>(src.data), keys_out, vals_out, rows, inner);
    NX_CUDA_LAUNCH_CHECK();
  });
}

void launch_index_add(const ExecContext& ctx, const View& dst, const View& src, const View& index, int64_t outer,
                      int64_t n, int64_t inner) {
  const int64_t nidx = index.numel(), total = outer * nidx * inner;
  if (!total) return;
  if (deterministic()) {
    const int64_t rows = outer * nidx;
    ordered_add(ctx, dst, src, rows, inner, [&](int64_t* keys, int64_t* vals) {
      index_keys_kernel<<<blocks_for(rows), kThreads, 0, stream_of(ctx)>>>(index.data, index.dtype == DType::I64, nidx,
                                                                           n, rows, keys, vals);
    });
    return;
  }
  with_accumulator(ctx, dst, [&](auto tag, auto* acc) {
    using T = decltype(tag);
    using A = std::remove_pointer_t<decltype(acc)>;
    index_add_kernel<T, A><<<blocks_for(total), kThreads, 0, stream_of(ctx)>>>(acc, static_cast<const T*>(src.data),
        index.data, index.dtype == DType::I64, nidx, n, inner, total);
    NX_CUDA_LAUNCH_CHECK();
  });
}

void launch_gather(const ExecContext& ctx, const View& dst, const View& src, const View& index, int64_t axis) {
  const int64_t total = index.numel();
  if (!total) return;
  Dims d = make_dims(index, src.shape);
  dispatch_bits(dtype_size(src.dtype), [&](auto tag) {
    using B = decltype(tag);
    gather_kernel<B><<<blocks_for(total), kThreads, 0, stream_of(ctx)>>>(static_cast<B*>(dst.data), static_cast<const B*>(src.data),
        index.data, index.dtype == DType::I64, d, axis, total);
  });
  NX_CUDA_LAUNCH_CHECK();
}

void launch_scatter_add(const ExecContext& ctx, const View& dst, const View& src, const View& index, int64_t axis) {
  const int64_t total = index.numel();
  if (!total) return;
  Dims d = make_dims(index, dst.shape);
  if (deterministic()) {
    ordered_add(ctx, dst, src, total, 1, [&](int64_t* keys, int64_t* vals) {
      scatter_keys_kernel<<<blocks_for(total), kThreads, 0, stream_of(ctx)>>>(index.data, index.dtype == DType::I64, d,
                                                                              axis, total, keys, vals);
    });
    return;
  }
  with_accumulator(ctx, dst, [&](auto tag, auto* acc) {
    using T = decltype(tag);
    using A = std::remove_pointer_t<decltype(acc)>;
    scatter_add_kernel<T, A><<<blocks_for(total), kThreads, 0, stream_of(ctx)>>>(acc, static_cast<const T*>(src.data),
        index.data, index.dtype == DType::I64, d, axis, total);
    NX_CUDA_LAUNCH_CHECK();
  });
}

void launch_random(const ExecContext& ctx, const View& dst, uint64_t seed, uint64_t offset, const uint64_t* at,
                   bool normal) {
  const int64_t n = dst.numel();
  if (!n) return;
  dispatch_dtype(dst.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      random_kernel<T><<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(static_cast<T*>(dst.data), n, seed, offset, at,
                                                                          normal);
    } else {
      fail(NX_ERR_DTYPE, current_api(), ": random tensors need a floating dtype");
    }
  });
  NX_CUDA_LAUNCH_CHECK();
}

}  // namespace nx::cuda
