// Caching, stream-ordered device allocator: freed blocks are kept per (device, stream) and
// reused by later allocations on the same stream, whose order makes the reuse safe; steady-state
// training does no cudaMalloc. Out of memory: the cache is emptied and the allocation retried
// once before NX_ERR_OUT_OF_MEMORY.
// NEXUS_CUDA_NO_CACHING=1 (for compute-sanitizer runs, like PyTorch's
// PYTORCH_NO_CUDA_MEMORY_CACHING): every block is cudaMalloc'd at its exact size and cudaFree'd
// when released, so memcheck sees each tensor's bounds and initcheck sees fresh memory. Blocks of
// streams a CUDA graph holds are still kept (cudaFree is not allowed while capturing).
#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/cuda_iface.hpp"
#include "cuda/kernels.cuh"

namespace nx::cuda {
namespace {

constexpr size_t kSmall = size_t(1) << 20;      // below: 512-byte classes, exact reuse
constexpr size_t kLargeRound = size_t(2) << 20; // above: 2 MiB multiples

size_t round_size(size_t n) {
  if (n == 0) n = 1;
  if (n > SIZE_MAX - kLargeRound)  // rounding up would wrap to a tiny block
    fail(NX_ERR_OUT_OF_MEMORY, current_api(), ": cannot allocate ", n, " bytes on a GPU");
  if (n < kSmall) return (n + 511) / 512 * 512;
  return (n + kLargeRound - 1) / kLargeRound * kLargeRound;
}

struct Block {
  void* ptr;
  size_t size;
  cudaStream_t stream;
};

struct DeviceCache {
  std::mutex mutex;
  std::multimap<size_t, Block> free_blocks;
  std::unordered_map<void*, Block> in_use;
  MemoryStats stats;

  std::vector<cudaStream_t> held;  // streams whose blocks a CUDA graph uses

  // Returns the free blocks that release(block) selects to the driver.
  template <class Pred>
  void release_free_blocks_if(Pred release) {
    for (auto it = free_blocks.begin(); it != free_blocks.end();) {
      if (!release(it->second)) {
        ++it;
        continue;
      }
      cudaFree(it->second.ptr);
      stats.reserved -= it->second.size;
      it = free_blocks.erase(it);
    }
  }
  // Every free block but those of held streams.
  void release_free_blocks() {
    release_free_blocks_if([&](const Block& b) { return std::find(held.begin(), held.end(), b.stream) == held.end(); });
  }
};

DeviceCache& cache(int device) {
  static std::vector<DeviceCache*> caches(64, nullptr);  // never destroyed: tensors may outlive statics
  static std::mutex m;
  std::lock_guard<std::mutex> lock(m);
  if (device < 0 || device >= 64) fail(NX_ERR_DEVICE, current_api(), ": device index ", device, " out of range");
  if (!caches[size_t(device)]) caches[size_t(device)] = new DeviceCache();
  return *caches[size_t(device)];
}

bool caching() {
  static const bool on = [] {
    const char* v = std::getenv("NEXUS_CUDA_NO_CACHING");
    return !(v && *v && *v != '0');
  }();
  return on;
}

}  // namespace

void* device_allocate(int device, size_t bytes, cudaStream_t s) {
  DeviceCache& c = cache(device);
  const size_t rounded = round_size(bytes);  // also refuses sizes near SIZE_MAX
  const size_t size = caching() ? rounded : std::max<size_t>(bytes, 1);
  std::lock_guard<std::mutex> lock(c.mutex);
  const size_t limit = size < kSmall ? size : size + size / 8;
  for (auto it = c.free_blocks.lower_bound(size); it != c.free_blocks.end() && it->first <= limit; ++it) {
    if (it->second.stream != s) continue;
    Block b = it->second;
    c.free_blocks.erase(it);
    c.in_use[b.ptr] = b;
    c.stats.allocated += b.size;
    c.stats.peak_allocated = std::max(c.stats.peak_allocated, c.stats.allocated);
    return b.ptr;
  }
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, size);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear the sticky-free error state
    c.release_free_blocks();
    err = cudaMalloc(&p, size);
  }
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    fail(NX_ERR_OUT_OF_MEMORY, current_api(), ": out of memory on cuda:", device, " allocating ", size,
         " bytes (", c.stats.allocated, " bytes in use, ", c.stats.reserved, " reserved; cache already emptied)");
  }
  if (err != cudaSuccess) throw_cuda(err, "cudaMalloc", __FILE__, __LINE__);
  Block b{p, size, s};
  c.in_use[p] = b;
  c.stats.reserved += size;
  c.stats.num_device_allocs++;
  c.stats.allocated += size;
  c.stats.peak_allocated = std::max(c.stats.peak_allocated, c.stats.allocated);
  return p;
}

void device_free(int device, void* ptr) {
  if (!ptr) return;
  DeviceCache& c = cache(device);
  std::lock_guard<std::mutex> lock(c.mutex);
  auto it = c.in_use.find(ptr);
  if (it == c.in_use.end()) return;
  Block b = it->second;
  c.in_use.erase(it);
  c.stats.allocated -= b.size;
  if (!caching() && c.held.empty()) {
    cudaFree(b.ptr);  // synchronizes the device, so no queued kernel still reads the block
    c.stats.reserved -= b.size;
    return;
  }
  c.free_blocks.emplace(b.size, b);
}

void hold_stream_blocks(int device, cudaStream_t stream) {
  DeviceCache& c = cache(device);
  std::lock_guard<std::mutex> lock(c.mutex);
  c.held.push_back(stream);
}

void release_stream_blocks(int device, cudaStream_t stream) {
  DeviceCache& c = cache(device);
  std::lock_guard<std::mutex> lock(c.mutex);
  c.held.erase(std::remove(c.held.begin(), c.held.end(), stream), c.held.end());
  c.release_free_blocks_if([&](const Block& b) { return b.stream == stream; });
}

MemoryStats memory_stats(int device) {
  DeviceCache& c = cache(device);
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.stats;
}

void reset_peak(int device) {
  DeviceCache& c = cache(device);
  std::lock_guard<std::mutex> lock(c.mutex);
  c.stats.peak_allocated = c.stats.allocated;
}

void empty_cache(int device) {
  DeviceCache& c = cache(device);
  NX_CUDA_CHECK(cudaSetDevice(device));
  count_host_sync();
  NX_CUDA_CHECK(cudaDeviceSynchronize());  // blocks may still be read by queued kernels
  std::lock_guard<std::mutex> lock(c.mutex);
  c.release_free_blocks();
}

Scratch::Scratch(const ExecContext& ctx, size_t n) : bytes(n), device(ctx.device.index) {
  if (n) ptr = device_allocate(device, n, stream_of(ctx));  // none asked: ptr stays null
}
Scratch::~Scratch() { device_free(device, ptr); }

}  // namespace nx::cuda
