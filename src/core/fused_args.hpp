// The arguments of a generated fused kernel (src/cuda/fused_codegen.cpp): what changes between
// launches of one compiled kernel (addresses, sizes, strides, the ops' scalar parameters), while
// the program's structure (ops, wiring, dtypes, rank, contiguity) is compiled into the kernel.
// Plain types only: the host fills it and NVRTC compiles its definition from this very text.
#pragma once

namespace nx {

constexpr int kFuseMaxRank = 6, kFuseMaxInputs = 8, kFuseMaxOutputs = 6, kFuseMaxInstrs = 16;

struct FusedKernelArgs {
  void* in[kFuseMaxInputs];
  void* out[kFuseMaxOutputs];
  long long numel;
  long long shape[kFuseMaxRank];
  long long in_strides[kFuseMaxInputs][kFuseMaxRank];  // elements
  long long out_strides[kFuseMaxOutputs][kFuseMaxRank];
  float p0[kFuseMaxInstrs], p1[kFuseMaxInstrs];  // each unary instruction's parameters
  int vectorized;  // contiguous, and every operand aligned for 4-element vector accesses
};

}  // namespace nx
