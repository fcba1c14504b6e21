#include "autograd/checkpoint.hpp"

#include "autograd/engine.hpp"
#include "ops/autocast.hpp"
#include "ops/ops.hpp"

namespace nx {

std::vector<Tensor> checkpoint(const SegmentFn& fn, const std::vector<Tensor>& inputs) {
  // No input to differentiate: the node would not be recorded and the segment's own parameters
  // would get nothing, so run the segment as it is (correct gradients, no memory saved).
  if (!any_requires_grad(inputs)) return fn(inputs);
  std::vector<Tensor> detached, outs;
  for (const Tensor& t : inputs) detached.push_back(detach(t));
  const RandomState first_draw = random_state();
  {
    GradModeGuard off(false);
    for (const Tensor& t : fn(detached)) outs.push_back(detach(t));
  }
  return record("CheckpointBackward", outs, inputs, inputs,
                [fn, first_draw, forward_autocast = autocast_state()](const std::vector<Tensor>& g,
                                                                       const std::vector<Tensor>& saved,
                                                                       const std::vector<bool>&) {
    // Fresh leaves for the inputs, so their gradients can be read back apart from any other leaf's.
    std::vector<Tensor> leaves;
    for (const Tensor& s : saved) {
      Tensor leaf = detach(s);
      leaf.impl()->requires_grad = is_floating(leaf.dtype());
      leaves.push_back(leaf);
    }
    GradModeGuard on(true);
    std::vector<Tensor> redo;
    {
      // Backward suspends autocast; the segment runs again as it first did.
      AutocastStateGuard as_first(forward_autocast);
      RandomReplayGuard same_draws(first_draw);
      redo = fn(leaves);
    }
    Tensor total;
    for (size_t i = 0; i < redo.size() && i < g.size(); ++i) {
      if (!redo[i].requires_grad() || !g[i].defined()) continue;
      Tensor term = sum(mul(redo[i], g[i]), {}, false);
      total = total.defined() ? add(total, term) : term;
    }
    std::vector<Tensor> grads(leaves.size());
    if (!total.defined()) return grads;
    BackwardOptions opt;
    opt.accumulate = backward_accumulates();  // parameters inside the segment, as without checkpointing
    std::vector<Tensor> wanted;
    std::vector<size_t> where;
    for (size_t i = 0; i < leaves.size(); ++i)
      if (leaves[i].requires_grad()) {
        wanted.push_back(leaves[i]);
        where.push_back(i);
      }
    auto got = run_backward(total, Tensor(), opt, wanted);
    for (size_t i = 0; i < where.size(); ++i) grads[where[i]] = got[i];
    return grads;
  });
}

}  // namespace nx
