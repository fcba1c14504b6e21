// The graph's bookkeeping: grad mode, recording a node for an op's outputs, the topological walk
// that the engine (src/autograd) and the graph dumps share. Ops record; they never run backward.
#include <unordered_set>

#include "graph/node.hpp"

namespace nx {

static thread_local bool tls_grad_enabled = true;
bool grad_enabled() { return tls_grad_enabled; }
void set_grad_enabled(bool enabled) { tls_grad_enabled = enabled; }

size_t Node::saved_bytes() const {
  size_t total = 0;
  for (const auto& s : saved)
    if (s.tensor.defined()) total += s.tensor.nbytes();
  return total;
}

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!grad_enabled()) return false;
  for (const auto& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

std::vector<Tensor> record(const char* name, std::vector<Tensor> outputs,
                           const std::vector<Tensor>& inputs, const std::vector<Tensor>& saved,
                           VjpFn vjp) {
  if (!any_requires_grad(inputs)) return outputs;
  auto node = std::make_shared<Node>();
  node->name = name;
  node->vjp = std::move(vjp);
  node->device = outputs[0].device();
  for (const auto& t : inputs) {
    Edge e;
    if (t.defined() && t.requires_grad()) {
      if (t.grad_fn()) {
        e.fn = t.grad_fn();
        e.output_nr = t.impl()->output_nr;
      } else {
        e.leaf = t.impl_ptr();
      }
    }
    node->next.push_back(std::move(e));
    node->in_shapes.push_back(t.defined() ? t.shape() : Shape{});
  }
  for (const auto& t : saved)
    node->saved.push_back(SavedTensor{t, t.defined() ? t.impl()->storage->version.load() : 0});
  for (size_t i = 0; i < outputs.size(); ++i) {
    Tensor& out = outputs[i];
    // Outputs that alias an input (views) get their own TensorImpl so metadata stays separate.
    out.impl()->grad_fn = node;
    out.impl()->output_nr = uint32_t(i);
    out.impl()->requires_grad = is_floating(out.dtype());
    node->out_shapes.push_back(out.shape());
    node->out_dtypes.push_back(out.dtype());
  }
  return outputs;
}

std::vector<std::shared_ptr<Node>> topological_nodes(const std::shared_ptr<Node>& root) {
  std::vector<std::shared_ptr<Node>> order;
  if (!root) return order;
  // Iterative DFS post-order, then reversed: a node comes before every node it feeds into.
  std::unordered_set<Node*> seen{root.get()};
  std::vector<std::pair<std::shared_ptr<Node>, size_t>> stack{{root, 0}};
  while (!stack.empty()) {
    auto& [node, i] = stack.back();
    if (i < node->next.size()) {
      const auto& e = node->next[i++];
      if (e.fn && seen.insert(e.fn.get()).second) stack.push_back({e.fn, 0});
    } else {
      order.push_back(node);
      stack.pop_back();
    }
  }
  return {order.rbegin(), order.rend()};
}

}  // namespace nx
