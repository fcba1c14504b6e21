// Launchers of the CUDA kernels, one family per .cu file; all enqueue on cuda::stream().
#pragma once
#include "cuda/common.cuh"

namespace nx::cuda {

void launch_copy(const View& dst, const View& src);
void launch_fill(const View& dst, double value);
void launch_unary(UnaryOp op, const View& dst, const View& src, double p0, double p1);
void launch_binary(BinaryOp op, const View& dst, const View& a, const View& b);
void launch_where(const View& dst, const View& cond, const View& a, const View& b);
void launch_reduce_rows(ReduceOp op, const View& dst, const View& src, int64_t rows, int64_t cols);
void launch_reduce_middle(ReduceOp op, const View& dst, const View& src, int64_t outer, int64_t n, int64_t inner);
void launch_softmax_rows(const View& dst, const View& src, int64_t rows, int64_t cols, bool log);
void launch_index_select(const View& dst, const View& src, const View& index, int64_t outer, int64_t n, int64_t inner);
void launch_index_add(const View& dst, const View& src, const View& index, int64_t outer, int64_t n, int64_t inner);
void launch_gather(const View& dst, const View& src, const View& index, int64_t axis);
void launch_scatter_add(const View& dst, const View& src, const View& index, int64_t axis);
void launch_random(const View& dst, uint64_t seed, uint64_t offset, bool normal);
void gemm(const View& dst, const View& a, const View& b);
void attention_forward(const AttentionParams& p, const View& q, const View& k, const View& v, const View& out,
                       const View& lse);
// Hopper (sm_90a) flash-attention forward; false where the build or the device lacks it (flash_wgmma.cu).
bool attention_wgmma(const AttentionParams& p, const View& q, const View& k, const View& v, const View& out,
                     const View& lse);
// Hopper (sm_90a) flash-attention backward (dQ by f32 atomics); false where it does not apply.
bool attention_backward_wgmma(const AttentionParams& p, const View& q, const View& k, const View& v,
                              const View& dout, const float* lse, const float* delta, const View& dq, const View& dk,
                              const View& dv);
void attention_backward(const AttentionParams& p, const View& q, const View& k, const View& v, const View& out,
                        const View& dout, const View& lse, const View& dq, const View& dk, const View& dv);

// Host-to-device copy through pinned staging blocks; returns before the GPU copy ends (staging.cu).
void staged_upload(int device, void* dst, const void* src, size_t n);

// Caching allocator (allocator.cu).
void* device_allocate(int device, size_t bytes);
void device_free(int device, void* ptr);

}  // namespace nx::cuda
