// Gradient checkpointing: a segment's activations are not kept; backward runs the segment again
// to rebuild its graph, then backpropagates through it.
#pragma once
#include <functional>
#include <vector>

#include "graph/node.hpp"

namespace nx {

using SegmentFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;

// Runs fn(inputs) without recording and returns its outputs, recorded as one node. Its backward
// runs fn again under the first run's autocast state and random-stream position (so dropout draws
// the same masks), then:
// - the inputs get their gradients through the node, as any op's inputs;
// - tensors fn reaches by itself (a module's parameters) get theirs accumulated into .grad when
//   the outer backward accumulates (nx_backward), as if the segment had not been checkpointed;
//   under nx_autograd_grad they get none, and the node's inputs are the only ones differentiated.
std::vector<Tensor> checkpoint(const SegmentFn& fn, const std::vector<Tensor>& inputs);

}  // namespace nx
