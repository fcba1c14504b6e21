// Shared by the CUDA kernel files: error checking that turns CUDA failures into nx::Error
// (NX_ERR_CUDA with the error's name, NX_ERR_OUT_OF_MEMORY for allocation failures), the stream
// of a call's context, launch geometry, and element conversions for every storage dtype.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/backend.hpp"
#include "core/strided.hpp"
#include "core/error.hpp"

namespace nx::cuda {

// log2(e): the attention, softmax and loss kernels keep scores in log2 units and call exp2
constexpr double kLog2eF64 = 1.4426950408889634;
constexpr float kLog2e = float(kLog2eF64);

[[noreturn]] void throw_cuda(cudaError_t err, const char* what, const char* file, int line);

#define NX_CUDA_CHECK(expr)                                                      \
  do {                                                                           \
    cudaError_t nx_err_ = (expr);                                                \
    if (nx_err_ != cudaSuccess) ::nx::cuda::throw_cuda(nx_err_, #expr, __FILE__, __LINE__); \
  } while (0)
#define NX_CUDA_LAUNCH_CHECK() NX_CUDA_CHECK(cudaGetLastError())

// The stream a launcher enqueues on: its call's, never an ambient one (core/backend.hpp).
inline cudaStream_t stream_of(const ExecContext& ctx) { return static_cast<cudaStream_t>(ctx.stream); }

constexpr int kThreads = 256;
inline unsigned blocks_for(int64_t n, int per_thread = 1) {
  int64_t b = (n + int64_t(kThreads) * per_thread - 1) / (int64_t(kThreads) * per_thread);
  return unsigned(b < 1 ? 1 : (b > 1048576 ? 1048576 : b));  // grid-stride loops cover the rest
}

// Element load/store through float/double for any storage dtype.
template <class T> __device__ __forceinline__ double load_f64(const T* p) { return double(*p); }
template <> __device__ __forceinline__ double load_f64(const Half* p) {
  return double(__half2float(__ushort_as_half(p->bits)));
}
template <> __device__ __forceinline__ double load_f64(const BFloat16* p) {
  return double(__bfloat162float(__ushort_as_bfloat16(p->bits)));
}
template <class T> __device__ __forceinline__ void store_f64(T* p, double v) { *p = T(v); }
template <> __device__ __forceinline__ void store_f64(bool* p, double v) { *p = v != 0.0; }
template <> __device__ __forceinline__ void store_f64(Half* p, double v) {
  p->bits = __half_as_ushort(__float2half_rn(float(v)));
}
template <> __device__ __forceinline__ void store_f64(BFloat16* p, double v) {
  p->bits = __bfloat16_as_ushort(__float2bfloat16_rn(float(v)));
}

// Up to kMaxDims coalesced outer dimensions plus a contiguous-or-strided inner one.
constexpr int kMaxDims = 8;
template <int K>
struct Geometry {
  int nd = 0;
  int64_t inner = 1;
  int64_t sizes[kMaxDims];
  int64_t strides[kMaxDims][K];
  int64_t inner_strides[K];
  __device__ __forceinline__ void offsets(int64_t e, int64_t (&off)[K]) const {
    int64_t row = e / inner, col = e - row * inner;
#pragma unroll
    for (int k = 0; k < K; ++k) off[k] = col * inner_strides[k];
    for (int d = nd - 1; d >= 0; --d) {
      int64_t idx = row % sizes[d];
      row /= sizes[d];
#pragma unroll
      for (int k = 0; k < K; ++k) off[k] += idx * strides[d][k];
    }
  }
};

// Builds the geometry of K same-shaped views (first one usually the contiguous output).
template <int K>
Geometry<K> make_geometry(const std::vector<int64_t>& shape, const std::array<const std::vector<int64_t>*, K>& st) {
  cpu::RowPlan<K> p = cpu::plan_rows<K>(shape, st);
  if (p.sizes.size() > size_t(kMaxDims))
    fail(NX_ERR_NOT_IMPLEMENTED, current_api(), ": more than ", kMaxDims,
         " non-mergeable dimensions in one CUDA kernel; make the tensor contiguous first");
  Geometry<K> g;
  g.nd = int(p.sizes.size());
  g.inner = p.inner;
  for (int d = 0; d < g.nd; ++d) {
    g.sizes[d] = p.sizes[size_t(d)];
    for (int k = 0; k < K; ++k) g.strides[d][k] = p.strides[size_t(d)][k];
  }
  for (int k = 0; k < K; ++k) g.inner_strides[k] = p.inner_strides[k];
  return g;
}

// Calls f(U{}) with U the unsigned integer of `bytes` bytes: for kernels that move elements
// without doing arithmetic on them (copies, where, gather), one instantiation per element size.
template <class F>
void dispatch_bits(size_t bytes, F&& f) {
  switch (bytes) {
    case 1: f(uint8_t{}); break;
    case 2: f(uint16_t{}); break;
    case 4: f(uint32_t{}); break;
    default: f(uint64_t{}); break;
  }
}

// Temporary device memory from the caching allocator for work on ctx's stream, returned when it
// goes out of scope.
struct Scratch {
  void* ptr = nullptr;
  size_t bytes = 0;
  int device = 0;
  Scratch(const ExecContext& ctx, size_t bytes);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

// The device of the backend running the current call (set by CudaBackend before each kernel).
int current_device();

// Multiprocessors of the current device (queried once per device).
int sm_count();

// Compute capability of the current device as major * 10 + minor (queried once per device).
int compute_capability();

// Blocks of a persistent grid over rows: as many as fit on the device at once (occupancy of
// kernel at threads), then evened out so every block gets the same number of rows (+-1).
// The occupancy query is cached per (kernel, threads, device) in each host thread.
template <class K>
int64_t persistent_grid(K kernel, int threads, int64_t rows) {
  struct Entry { const void* kernel; int threads, device; int64_t most; };
  thread_local std::vector<Entry> cache;
  int dev = 0;
  NX_CUDA_CHECK(cudaGetDevice(&dev));
  int64_t most = 0;
  for (const Entry& e : cache)
    if (e.kernel == reinterpret_cast<const void*>(kernel) && e.threads == threads && e.device == dev) most = e.most;
  if (!most) {
    int per_sm = 0;
    NX_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0));
    most = int64_t(sm_count()) * std::max(1, per_sm);
    cache.push_back({reinterpret_cast<const void*>(kernel), threads, dev, most});
  }
  if (rows <= most) return std::max<int64_t>(rows, 1);
  const int64_t per_block = (rows + most - 1) / most;
  return (rows + per_block - 1) / per_block;
}

}  // namespace nx::cuda
