// Pinned host staging for uploads. A host-to-device copy from pageable memory is first copied
// (memcpy) into a pinned block, whose DMA then runs asynchronously on the caller's stream; the
// call returns without waiting for the GPU, and the caller may reuse its buffer at once. Each
// block carries an event recorded after its copy; a block is reused only once that event has
// completed, so a busy block is never overwritten. Large copies go through in block-sized chunks.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "cuda/kernels.cuh"

namespace nx::cuda {

void wait_for_event(cudaEvent_t event) {
  const cudaError_t state = cudaEventQuery(event);
  if (state == cudaSuccess) return;
  if (state != cudaErrorNotReady) NX_CUDA_CHECK(state);
  count_host_sync();
  NX_CUDA_CHECK(cudaEventSynchronize(event));
}
namespace {

constexpr size_t kBlockBytes = size_t(8) << 20;  // a chunk: large enough for full PCIe/NVLink speed
constexpr size_t kMaxBlocks = 8;                  // at most 64 MiB pinned per device

struct PinnedBlock {
  void* host = nullptr;
  cudaEvent_t done = nullptr;
};

struct StagingPool {
  std::mutex mutex;
  std::vector<PinnedBlock> blocks;
  size_t next = 0;

  // A block whose previous copy has finished; grows the pool up to kMaxBlocks, then waits on the
  // oldest block in round-robin order.
  PinnedBlock& acquire() {
    for (auto& b : blocks)
      if (cudaEventQuery(b.done) == cudaSuccess) return b;
    cudaGetLastError();  // cudaErrorNotReady from the queries is not an error
    if (blocks.size() < kMaxBlocks) {
      PinnedBlock b;
      NX_CUDA_CHECK(cudaHostAlloc(&b.host, kBlockBytes, cudaHostAllocPortable));
      if (cudaEventCreateWithFlags(&b.done, cudaEventDisableTiming) != cudaSuccess) {
        cudaFreeHost(b.host);
        NX_CUDA_CHECK(cudaGetLastError());
      }
      blocks.push_back(b);
      return blocks.back();
    }
    PinnedBlock& b = blocks[next++ % blocks.size()];
    wait_for_event(b.done);  // the previous copy has left the pinned buffer
    return b;
  }
};

StagingPool& pool(int device) {
  static std::mutex m;
  static std::vector<StagingPool*> pools(64, nullptr);  // never destroyed: uploads may run at exit
  std::lock_guard<std::mutex> lock(m);
  if (!pools[size_t(device)]) pools[size_t(device)] = new StagingPool();
  return *pools[size_t(device)];
}

}  // namespace

void staged_upload(const ExecContext& ctx, void* dst, const void* src, size_t n) {
  StagingPool& p = pool(ctx.device.index);
  const cudaStream_t stream = stream_of(ctx);
  std::lock_guard<std::mutex> lock(p.mutex);
  for (size_t done = 0; done < n; done += kBlockBytes) {
    const size_t chunk = std::min(kBlockBytes, n - done);
    PinnedBlock& b = p.acquire();
    std::memcpy(b.host, static_cast<const char*>(src) + done, chunk);
    NX_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst) + done, b.host, chunk, cudaMemcpyHostToDevice, stream));
    NX_CUDA_CHECK(cudaEventRecord(b.done, stream));
  }
}

}  // namespace nx::cuda
