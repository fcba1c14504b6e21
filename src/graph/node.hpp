// A node of the explicit autodiff graph: one recorded op application. It keeps the edges to the
// producers of its inputs, the tensors its VJP needs (with their version at save time), and the
// VJP itself, which is written with ops so that it runs on any device and can be differentiated.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.hpp"

namespace nx {

struct Edge {
  std::shared_ptr<Node> fn;          // producer of the input, or null for a leaf / no grad
  uint32_t output_nr = 0;            // which output of fn
  std::shared_ptr<TensorImpl> leaf;  // leaf that accumulates the gradient (requires_grad)
  bool active() const { return fn || leaf; }
};

struct SavedTensor {
  Tensor tensor;
  uint64_t version = 0;
};

// grads_out[i] is the gradient of output i (never undefined: zeros are filled in);
// needs[j] says whether input j wants a gradient. Returns one gradient per input (undefined
// where not needed).
using VjpFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& grads_out,
                                                const std::vector<Tensor>& saved,
                                                const std::vector<bool>& needs)>;

struct Node {
  std::string name;
  std::vector<Edge> next;               // one per input
  std::vector<SavedTensor> saved;
  std::vector<Shape> out_shapes;
  std::vector<DType> out_dtypes;
  std::vector<Shape> in_shapes;
  Device device;
  VjpFn vjp;
  bool released = false;                // saved tensors were freed by a backward
  size_t saved_bytes() const;
};

// Grad mode (thread-local).
bool grad_enabled();
void set_grad_enabled(bool enabled);
struct GradModeGuard {
  bool previous;
  explicit GradModeGuard(bool enabled) : previous(grad_enabled()) { set_grad_enabled(enabled); }
  ~GradModeGuard() { set_grad_enabled(previous); }
};

// True when grad mode is on and some input requires grad.
bool any_requires_grad(const std::vector<Tensor>& inputs);

// Records outputs as produced by a node named name from inputs. Does nothing (and returns
// outputs unchanged) unless any_requires_grad(inputs).
std::vector<Tensor> record(const char* name, std::vector<Tensor> outputs,
                           const std::vector<Tensor>& inputs, const std::vector<Tensor>& saved,
                           VjpFn vjp);
inline Tensor record1(const char* name, Tensor output, const std::vector<Tensor>& inputs,
                      const std::vector<Tensor>& saved, VjpFn vjp) {
  return record(name, {std::move(output)}, inputs, saved, std::move(vjp))[0];
}

// Nodes reachable from root.grad_fn in topological order (root first).
std::vector<std::shared_ptr<Node>> topological_nodes(const std::shared_ptr<Node>& root);
// What a DOT dump shows beyond op names, shapes and dtypes.
struct DotOptions {
  std::function<std::string(const TensorImpl&)> leaf_name;  // "" or unset: "leaf"
  std::function<std::string(const Tensor&)> summary;        // a tensor's values, one or more lines
  bool saved_bytes = false;                                 // each op's saved bytes
};
std::string graph_to_dot(const Tensor& root, const DotOptions& options = {});

}  // namespace nx
