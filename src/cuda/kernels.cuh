// Launchers of the CUDA kernels, one family per .cu file; all enqueue on their ExecContext's stream.
#pragma once
#include "cuda/common.cuh"

namespace nx::cuda {

// The launchers of the registry's kernels (src/core/kernels.inc): launch_copy, launch_gather...
#define NX_LAUNCHER(name, params, args) void launch_##name params;
NX_KERNELS(NX_LAUNCHER)
#undef NX_LAUNCHER
// Hopper (sm_90a) flash-attention forward; false where the build or the device lacks it (flash_wgmma.cu).
bool attention_wgmma(const ExecContext& ctx, const AttentionParams& p, const View& q, const View& k, const View& v,
                     const View& out, const View& lse);
// Hopper (sm_90a) flash-attention backward (dQ by f32 bulk reduce-adds, in a fixed order in
// deterministic mode); false where it does not apply.
bool attention_backward_wgmma(const ExecContext& ctx, const AttentionParams& p, const View& q, const View& k,
                              const View& v, const View& dout, const float* lse, const float* delta, const View& dq,
                              const View& dk, const View& dv);
// A same-size copy with 16-byte vectors when both views' innermost run (g.inner) is contiguous
// and every row starts 16-byte aligned; false (nothing launched) otherwise (copy_rows.cu).
bool copy_rows_vectorized(const ExecContext& ctx, const View& dst, const View& src, const Geometry<2>& g);
// Blocks until event has completed; counted as a host sync (nx_runtime_get_host_syncs) only when
// the device had not reached it yet, i.e. when the host really waited (staging.cu).
void wait_for_event(cudaEvent_t event);
// Host-to-device copy through pinned staging blocks on ctx's stream; returns before the GPU copy
// ends (staging.cu).
void staged_upload(const ExecContext& ctx, void* dst, const void* src, size_t n);

// Caching allocator (allocator.cu): a block is reused only for allocations on the stream it was
// allocated for.
void* device_allocate(int device, size_t bytes, cudaStream_t stream);
void device_free(int device, void* ptr);
// Blocks allocated on a held stream stay reserved for it (never returned to the driver by an
// out-of-memory retry or empty_cache) until release_stream_blocks frees its free blocks: a CUDA
// graph captured on that stream keeps using their addresses.
void hold_stream_blocks(int device, cudaStream_t stream);
void release_stream_blocks(int device, cudaStream_t stream);

// The argument table of a multi-tensor kernel (slots, chunks) in device memory, for work on ctx's
// stream (multi_tensor.cu). A training loop passes the same tensors every step, so each cache
// (one per call site) keeps the last table it uploaded, per device, and returns it again without
// a copy; a new table goes through a ring of pinned buffers (a pageable copy would synchronize
// the stream). While a CUDA graph is captured the table is a copy the graph owns.
enum class TableSite { Adam, SumSquares, Scale, Count };
const void* upload_table(const ExecContext& ctx, TableSite site, std::vector<char> bytes);

// CUDA graphs (graph.cu). Whether stream is being captured into a graph now.
bool stream_capturing(cudaStream_t stream);
// A device copy of n host bytes owned by the graph being captured on this thread (freed with
// it): what a captured kernel reads that a later eager call could overwrite (Adam's slot table).
const void* graph_owned_copy(const void* host, size_t n);

}  // namespace nx::cuda
