// Which query blocks a persistent launch block of the Hopper forwards (flash_wgmma.cu,
// flash_fp8_wgmma.cu) takes. One launch block per multiprocessor starts at its own index; after
// that, causal blocks (of unequal lengths, longest first) come from a counter across the grid, so
// the launch blocks finish together however long each query block is, while full-attention
// blocks, all of one length, go round robin (every gridDim.x-th): no counter, so the call needs
// no allocation and no memset node before the kernel. NEXUS_FLASH_FWD_STATIC=0 puts full
// attention on the counter too (to measure).
#pragma once
#include <optional>

#include "cuda/flash_common.cuh"
#include "cuda/flash_tma.hpp"

namespace nx::cuda::flash {

// The query block this launch block takes after `last` (the one it took last); blocks or more once
// none is left. With a counter, every claim takes one value of it; without one, the claims step
// through the launch block's residue class.
__device__ __forceinline__ int next_query_block(int* counter, int last, int blocks) {
  if (counter) return int(gridDim.x) + atomicAdd(counter, 1);
  return last < blocks - int(gridDim.x) ? last + int(gridDim.x) : blocks;  // no overflow near INT32_MAX
}

// The counter a persistent launch takes causal query blocks from, zeroed on the call's stream and
// kept in `store` until the launch is queued; null for round robin.
inline int* persistent_counter(const ExecContext& ctx, bool causal, std::optional<Scratch>& store) {
  if (!causal && switch_on("NEXUS_FLASH_FWD_STATIC")) return nullptr;
  store.emplace(ctx, sizeof(int));
  NX_CUDA_CHECK(cudaMemsetAsync(store->ptr, 0, sizeof(int), stream_of(ctx)));
  return static_cast<int*>(store->ptr);
}

}  // namespace nx::cuda::flash
