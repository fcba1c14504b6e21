// Tensor-core flash attention forward (bf16/f16, head_dim 64 or 128) lands here; until then this
// reports "not handled" and the SIMT kernels in attention.cu run.
#include "cuda/kernels.cuh"

namespace nx::cuda {
bool attention_tensor_core(const AttentionParams&, const View&, const View&, const View&, const View&, const View&) {
  return false;
}
}  // namespace nx::cuda
