// Elementwise fusion of a compiled step's kernel list (docs/compiler.md, "Fusion"): runs of
// consecutive unary / binary / copy calls over one shape become one FusedCall, run by the device's
// Backend::fused_elementwise (CUDA: a kernel generated for the group and compiled by NVRTC, or an
// interpreter kernel, both keeping the intermediates in registers; CPU: a tile interpreter that
// keeps them in L1 tiles); an intermediate that nothing
// outside the run reads is never stored, and its buffer drops out of the arena.
#pragma once
#include <memory>
#include <vector>

#include "compile/trace.hpp"

namespace nx::compile {

struct FusionResult {
  std::vector<Call*> list;                    // the new kernel list
  std::vector<std::unique_ptr<Call>> owned;   // its fused calls
  int64_t fused_calls = 0, groups = 0;        // calls folded into groups, and the groups
  int64_t generated = 0;                      // CUDA: groups that run a generated kernel
  int64_t reductions = 0;                     // CPU: groups that end in the reduction after them
};

// list: the kept calls of trace, in order. Only f32-family floating tensors are fused.
FusionResult fuse_elementwise(const Trace& trace, const std::vector<Call*>& list);
// CUDA: compiles (or loads from the caches) each group's generated kernel before the step is
// captured into a CUDA graph, and counts them; a group without one runs the interpreter kernel.
void prepare_fused_kernels(FusionResult& fusion, Device device);

}  // namespace nx::compile
