// The reverse-mode engine: runs the VJPs of a recorded graph (src/graph) from a root. It sits
// above the ops, since accumulating gradients and the VJPs themselves are ops.
#pragma once
#include <vector>

#include "graph/node.hpp"

namespace nx {

struct BackwardOptions {
  bool retain_graph = false;
  bool create_graph = false;
  bool check_finite = false;   // fail naming the first node that produced a NaN/Inf gradient
  bool accumulate = true;      // into leaves' .grad (false: only collect for `inputs`)
};

// Backpropagates grad (ones if undefined, for one-element roots) from root. When inputs is not
// empty, returns their gradients (undefined where unreachable).
std::vector<Tensor> run_backward(const Tensor& root, Tensor grad, const BackwardOptions& options,
                                 const std::vector<Tensor>& inputs = {});

// Whether the backward running on this thread accumulates into leaves' .grad (nx_backward) or
// only collects gradients of given inputs (nx_autograd_grad); false outside a backward. A VJP that
// runs a backward of its own (gradient checkpointing) follows it.
bool backward_accumulates();

}  // namespace nx
