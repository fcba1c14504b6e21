// Reverse-mode engine: Kahn's algorithm over the nodes reachable from the root, gradients summed
// per (node, output) slot, leaves accumulated into .grad. Saved tensors are version-checked
// before each VJP and released right after it unless the graph is retained.
#include <cmath>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "autograd/engine.hpp"
#include "core/backend.hpp"
#include "core/profiler.hpp"
#include "ops/autocast.hpp"
#include "ops/ops.hpp"

namespace nx {

static bool all_finite(const Tensor& t) {
  GradModeGuard off(false);
  Tensor f = cast(t, DType::F64);
  Tensor s = sum(mul_scalar(f, 0.0), {}, false);  // NaN*0 = NaN, Inf*0 = NaN
  double v = item(s);
  return v == v;
}

static thread_local bool tls_accumulating = false;
bool backward_accumulates() { return tls_accumulating; }

namespace {
struct AccumulatingGuard {
  bool previous;
  explicit AccumulatingGuard(bool on) : previous(tls_accumulating) { tls_accumulating = on; }
  ~AccumulatingGuard() { tls_accumulating = previous; }
};
}  // namespace

std::vector<Tensor> run_backward(const Tensor& root, Tensor grad, const BackwardOptions& opt,
                                 const std::vector<Tensor>& inputs) {
  const char* api = current_api();
  AccumulatingGuard accumulating(opt.accumulate);
  // The VJPs follow the dtypes the forward recorded: autocast does not apply to them.
  AutocastStateGuard no_autocast(autocast_suspended());
  if (!root.requires_grad())
    fail(NX_ERR_STATE, api, ": the root tensor does not require grad (no input of the computation "
         "has requires_grad set, or it was computed with grad mode disabled)");
  if (!grad.defined()) {
    if (root.numel() != 1)
      fail(NX_ERR_SHAPE, api, ": grad may be NULL only for a one-element root; root has shape ",
           shape_str(root.shape()));
    grad = ones(root.shape(), root.dtype(), root.device());
  } else if (grad.shape() != root.shape()) {
    fail(NX_ERR_SHAPE, api, ": grad has shape ", shape_str(grad.shape()), " but root has shape ",
         shape_str(root.shape()));
  } else if (grad.device() != root.device()) {
    fail(NX_ERR_DEVICE, api, ": grad is on ", device_str(grad.device()), " but root is on ",
         device_str(root.device()));
  }
  // Gradients have their tensor's dtype (the VJPs rely on it, and leaves' .grad must match them):
  // a grad of another dtype is converted, as PyTorch does.
  if (grad.dtype() != root.dtype()) grad = cast(grad, root.dtype());
  GradModeGuard mode(opt.create_graph);
  if (!opt.create_graph) grad = detach(grad);

  // Where the caller asked for gradients of specific tensors: leaf impl or (node, slot).
  std::vector<Tensor> result(inputs.size());
  std::unordered_map<TensorImpl*, std::vector<size_t>> want_leaf;
  std::map<std::pair<Node*, uint32_t>, std::vector<size_t>> want_slot;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].grad_fn()) want_slot[{inputs[i].grad_fn().get(), inputs[i].impl()->output_nr}].push_back(i);
    else want_leaf[inputs[i].impl()].push_back(i);
  }
  auto add_into = [](Tensor& slot, const Tensor& g) { slot = slot.defined() ? add(slot, g) : g; };
  auto deliver_leaf = [&](const std::shared_ptr<TensorImpl>& leaf, const Tensor& g) {
    auto it = want_leaf.find(leaf.get());
    if (it != want_leaf.end())
      for (size_t i : it->second) add_into(result[i], g);
    if (opt.accumulate) {
      Tensor old = leaf->grad ? Tensor(leaf->grad) : Tensor();
      Tensor updated = old.defined() ? add(old, g) : (opt.create_graph ? g : detach(g));
      leaf->grad = updated.impl_ptr();
    }
  };

  if (!root.grad_fn()) {  // the root is itself a leaf
    deliver_leaf(root.impl_ptr(), grad);
    if (opt.accumulate && root.impl()->grad_ready) root.impl()->grad_ready();
    return result;
  }

  auto order = topological_nodes(root.grad_fn());
  // Leaves with a grad_ready hook: count the edges that may still deliver to each; the hook fires
  // when the last of them has been visited (skipped nodes included) and a gradient arrived.
  std::unordered_map<TensorImpl*, size_t> hook_edges;
  std::unordered_set<TensorImpl*> hook_delivered;
  if (opt.accumulate)
    for (const auto& node : order)
      for (const auto& e : node->next)
        if (e.leaf && e.leaf->grad_ready) ++hook_edges[e.leaf.get()];
  auto retire_edges = [&](const Node& node) {
    for (const auto& e : node.next) {
      if (!e.leaf) continue;
      auto h = hook_edges.find(e.leaf.get());
      if (h != hook_edges.end() && --h->second == 0 && hook_delivered.count(e.leaf.get())) e.leaf->grad_ready();
    }
  };
  std::unordered_map<Node*, std::vector<Tensor>> pending;
  pending[root.grad_fn().get()].resize(root.grad_fn()->out_shapes.size());
  pending[root.grad_fn().get()][root.impl()->output_nr] = grad;

  for (const auto& node : order) {
    auto it = pending.find(node.get());
    if (it == pending.end()) {  // reached only through inputs that need no grad
      retire_edges(*node);
      continue;
    }
    std::vector<Tensor> gouts = std::move(it->second);
    pending.erase(it);
    for (uint32_t k = 0; k < gouts.size(); ++k) {
      auto w = want_slot.find({node.get(), k});
      if (w != want_slot.end() && gouts[k].defined())
        for (size_t i : w->second) add_into(result[i], gouts[k]);
      if (!gouts[k].defined()) gouts[k] = zeros(node->out_shapes[k], node->out_dtypes[k], node->device);
    }
    if (node->released)
      fail(NX_ERR_STATE, api, ": the graph through ", node->name, " was already freed by an earlier "
           "backward; pass retain_graph to backward twice");
    std::vector<Tensor> saved;
    for (const auto& s : node->saved) {
      if (s.tensor.defined() && s.tensor.impl()->storage->version.load() != s.version)
        fail(NX_ERR_STATE, api, ": a tensor of shape ", shape_str(s.tensor.shape()), " saved by ",
             node->name, " for backward was modified by an in-place op (version ",
             s.tensor.impl()->storage->version.load(), ", saved at version ", s.version,
             "); use the out-of-place op instead");
      saved.push_back(s.tensor);
    }
    std::vector<bool> needs;
    for (const auto& e : node->next) needs.push_back(e.active());
    std::vector<Tensor> gins;
    {
      profiler::Scope profiled(profiler::Kind::Backward, node->name.c_str());
      gins = node->vjp(gouts, saved, needs);
    }
    if (!opt.retain_graph) {
      node->saved.clear();
      node->released = true;
    }
    for (size_t j = 0; j < node->next.size(); ++j) {
      const Edge& e = node->next[j];
      if (!e.active() || j >= gins.size() || !gins[j].defined()) continue;
      Tensor g = gins[j];
      if (g.shape() != node->in_shapes[j])
        fail(NX_ERR_INTERNAL, api, ": ", node->name, " produced a gradient of shape ",
             shape_str(g.shape()), " for an input of shape ", shape_str(node->in_shapes[j]));
      if (opt.check_finite && !all_finite(g))
        fail(NX_ERR_STATE, api, ": ", node->name, " produced a non-finite (NaN or Inf) gradient for its input ",
             j, " of shape ", shape_str(g.shape()));
      if (e.fn) {
        auto& slots = pending[e.fn.get()];
        slots.resize(e.fn->out_shapes.size());
        add_into(slots[e.output_nr], g);
      } else {
        deliver_leaf(e.leaf, g);
        if (hook_edges.count(e.leaf.get())) hook_delivered.insert(e.leaf.get());
      }
    }
    retire_edges(*node);
  }
  return result;
}

}  // namespace nx
