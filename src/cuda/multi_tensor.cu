// Multi-tensor kernels: the device tables they read (upload_table, shared with Adam in
// fused_optim.cu), and the gradient-clipping pair: the sum of squares of many tensors into one f64
// (per-chunk partials summed in a fixed order: deterministic) and the scaling of all of them by a
// factor read from device memory. One launch each instead of a few per tensor.
#include <memory>
#include <mutex>

#include "cuda/fused.cuh"

namespace nx::cuda {
namespace {

using namespace fused;

constexpr int kRing = 4;
struct PinnedBuffer {
  void* host = nullptr;
  size_t cap = 0;
  cudaEvent_t done = nullptr;  // the copy out of it has ended
};
// One call site's tables on one device: the last one uploaded (kept on the device for the next
// call with the same bytes) and the pinned ring that new ones go through.
struct Staging {
  std::mutex mu;
  PinnedBuffer ring[kRing];
  int next = 0;
  std::vector<char> table_bytes;
  std::unique_ptr<Scratch> table;
};
Staging& staging(int device, TableSite site) {
  static std::mutex m;
  static auto* all = new std::vector<std::unique_ptr<Staging>>();  // never freed: used at exit
  std::lock_guard<std::mutex> lock(m);
  const size_t i = size_t(device) * size_t(TableSite::Count) + size_t(site);
  if (all->size() <= i) all->resize(i + 1);
  auto& s = (*all)[i];
  if (!s) s = std::make_unique<Staging>();
  return *s;
}

constexpr int64_t kChunk = 1 << 16;
struct Slot {
  void* data;
  int64_t n;
};
struct Chunk {
  int64_t slot, begin;
};

// The table: slots, then chunks of kChunk elements (one block each).
std::vector<char> slot_table(const std::vector<TensorSlot>& slots, int64_t* nchunks, size_t* slot_bytes) {
  std::vector<Slot> ss;
  std::vector<Chunk> cs;
  for (size_t i = 0; i < slots.size(); ++i) {
    ss.push_back({slots[i].data, slots[i].n});
    for (int64_t b = 0; b < slots[i].n; b += kChunk) cs.push_back({int64_t(i), b});
  }
  if (cs.size() > 2147483647u) fail(NX_ERR_NOT_IMPLEMENTED, current_api(), ": too many chunks in one multi-tensor call");
  *nchunks = int64_t(cs.size());
  *slot_bytes = ss.size() * sizeof(Slot);
  std::vector<char> bytes(*slot_bytes + cs.size() * sizeof(Chunk));
  std::memcpy(bytes.data(), ss.data(), *slot_bytes);
  if (!cs.empty()) std::memcpy(bytes.data() + *slot_bytes, cs.data(), cs.size() * sizeof(Chunk));
  return bytes;
}

// The sum of every thread's acc in the block, in a fixed order (shuffles, then the warps in
// turn); valid in thread 0.
__device__ double block_sum(double acc) {
  __shared__ double warp_sums[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = acc;
  __syncthreads();
  double t = 0;
  if (threadIdx.x == 0)
    for (int w = 0; w < kThreads / 32; ++w) t += warp_sums[w];
  return t;
}

template <class T>
__global__ void sumsq_chunks(const Slot* slots, const Chunk* chunks, double* partial) {
  const Chunk c = chunks[blockIdx.x];
  const Slot s = slots[c.slot];
  const T* x = static_cast<const T*>(s.data) + c.begin;
  const int64_t len = min(kChunk, s.n - c.begin);
  double acc = 0;
  for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
    const double v = double(to_acc<typename AccT<T>::type>(x[i]));
    acc += v * v;
  }
  const double t = block_sum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = t;
}

// One block sums the partials in a fixed order (each thread a strided run, then the warps).
__global__ void sum_partials(const double* partial, int64_t n, double* out) {
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += partial[i];
  const double t = block_sum(acc);
  if (threadIdx.x == 0) *out = t;
}

template <class T>
__global__ void scale_chunks(const Slot* slots, const Chunk* chunks, const double* factor) {
  using A = typename AccT<T>::type;
  const Chunk c = chunks[blockIdx.x];
  const Slot s = slots[c.slot];
  T* x = static_cast<T*>(s.data) + c.begin;
  const int64_t len = min(kChunk, s.n - c.begin);
  const A f = A(*factor);
  for (int64_t i = threadIdx.x; i < len; i += blockDim.x) x[i] = from_acc<T>(to_acc<A>(x[i]) * f);
}

}  // namespace

const void* upload_table(const ExecContext& ctx, TableSite site, std::vector<char> bytes) {
  if (stream_capturing(stream_of(ctx))) return graph_owned_copy(bytes.data(), bytes.size());
  Staging& st = staging(ctx.device.index, site);
  std::lock_guard<std::mutex> lock(st.mu);
  if (st.table && st.table_bytes == bytes) return st.table->ptr;
  PinnedBuffer& pb = st.ring[st.next];
  st.next = (st.next + 1) % kRing;
  if (!pb.done) NX_CUDA_CHECK(cudaEventCreateWithFlags(&pb.done, cudaEventDisableTiming));
  wait_for_event(pb.done);  // its previous copy has left it
  const size_t n = bytes.size();
  if (pb.cap < n) {
    if (pb.host) NX_CUDA_CHECK(cudaFreeHost(pb.host));
    pb.host = nullptr;
    pb.cap = 0;
    NX_CUDA_CHECK(cudaMallocHost(&pb.host, n * 2));
    pb.cap = n * 2;
  }
  std::memcpy(pb.host, bytes.data(), n);
  st.table_bytes.clear();
  st.table = std::make_unique<Scratch>(ctx, n);  // the old one is freed in stream order
  NX_CUDA_CHECK(cudaMemcpyAsync(st.table->ptr, pb.host, n, cudaMemcpyHostToDevice, stream_of(ctx)));
  NX_CUDA_CHECK(cudaEventRecord(pb.done, stream_of(ctx)));
  st.table_bytes = std::move(bytes);
  return st.table->ptr;
}

void launch_sumsq_multi(const ExecContext& ctx, const std::vector<TensorSlot>& slots, DType dtype, const View& out) {
  int64_t nchunks = 0;
  size_t slot_bytes = 0;
  std::vector<char> bytes = slot_table(slots, &nchunks, &slot_bytes);
  double* result = static_cast<double*>(out.data);
  if (nchunks == 0) {
    NX_CUDA_CHECK(cudaMemsetAsync(result, 0, sizeof(double), stream_of(ctx)));
    return;
  }
  const char* table = static_cast<const char*>(upload_table(ctx, TableSite::SumSquares, std::move(bytes)));
  Scratch partial(ctx, size_t(nchunks) * sizeof(double));
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    sumsq_chunks<T><<<unsigned(nchunks), kThreads, 0, stream_of(ctx)>>>(
        reinterpret_cast<const Slot*>(table), reinterpret_cast<const Chunk*>(table + slot_bytes),
        static_cast<double*>(partial.ptr));
    NX_CUDA_LAUNCH_CHECK();
  });
  sum_partials<<<1, kThreads, 0, stream_of(ctx)>>>(static_cast<const double*>(partial.ptr), nchunks, result);
  NX_CUDA_LAUNCH_CHECK();
}

void launch_scale_multi(const ExecContext& ctx, const std::vector<TensorSlot>& slots, DType dtype, const View& factor) {
  int64_t nchunks = 0;
  size_t slot_bytes = 0;
  std::vector<char> bytes = slot_table(slots, &nchunks, &slot_bytes);
  if (nchunks == 0) return;
  const char* table = static_cast<const char*>(upload_table(ctx, TableSite::Scale, std::move(bytes)));
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    scale_chunks<T><<<unsigned(nchunks), kThreads, 0, stream_of(ctx)>>>(
        reinterpret_cast<const Slot*>(table), reinterpret_cast<const Chunk*>(table + slot_bytes),
        static_cast<const double*>(factor.data));
    NX_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace nx::cuda
