// C API: autodiff (requires_grad, backward, grad, jvp, no-grad mode), checkpointing and the
// graph object.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "autograd/checkpoint.hpp"
#include "autograd/engine.hpp"
#include "capi/capi.hpp"


using namespace nx;
using namespace nx::capi;

namespace {

nx_graph_s& graph_arg(nx_graph g) { return handle_object(g, "g"); }

// min / max / mean of the finite values and the NaN and Inf counts, from an f64 copy on the CPU.
std::string value_summary(const Tensor& t) {
  GradModeGuard off(false);
  if (t.numel() == 0) return "empty";
  const Tensor c = cast(to_device(detach(t), Device{NX_CPU, 0}), DType::F64);
  std::vector<double> v(size_t(c.numel()));
  copy_to_host(contiguous(c), v.data(), v.size() * sizeof(double));
  double lo = HUGE_VAL, hi = -HUGE_VAL, total = 0;
  int64_t finite = 0, nan = 0, inf = 0;
  for (double x : v) {
    if (std::isnan(x)) {
      nan++;
    } else if (std::isinf(x)) {
      inf++;
    } else {
      lo = std::min(lo, x);
      hi = std::max(hi, x);
      total += x;
      finite++;
    }
  }
  char buf[160];
  if (finite) std::snprintf(buf, sizeof buf, "min %.4g max %.4g mean %.4g", lo, hi, total / double(finite));
  else std::snprintf(buf, sizeof buf, "no finite value");
  std::string s = buf;
  if (nan || inf) s += cat("\nnan ", nan, " inf ", inf);
  return s;
}

}  // namespace

extern "C" {

nx_status nx_tensor_set_requires_grad(nx_tensor t, bool requires_grad) {
  return guard("nx_tensor_set_requires_grad", [&] {
    const Tensor& x = unwrap(t, "t");
    if (x.grad_fn())
      fail(NX_ERR_STATE, current_api(), ": only leaf tensors can change requires_grad; this one was produced by ",
           x.grad_fn()->name, " (use nx_tensor_detach first)");
    if (requires_grad && !is_floating(x.dtype()))
      fail(NX_ERR_DTYPE, current_api(), ": only floating tensors can require grad, this one is ", dtype_name(x.dtype()));
    if (x.impl()->requires_grad != requires_grad) bump_capture_epoch();
    x.impl()->requires_grad = requires_grad;
  });
}
nx_status nx_tensor_get_requires_grad(nx_tensor t, bool* out) {
  return guard("nx_tensor_get_requires_grad", [&] {
    check_out(out);
    *out = unwrap(t, "t").requires_grad();
  });
}
nx_status nx_tensor_is_leaf(nx_tensor t, bool* out) {
  return guard("nx_tensor_is_leaf", [&] {
    check_out(out);
    *out = !unwrap(t, "t").grad_fn();
  });
}

// The engine's options from the C struct (create_graph implies retain_graph, as in PyTorch).
static BackwardOptions backward_options(const nx_backward_options* options) {
  const nx_backward_options o = struct_arg(options, nx_backward_options NX_BACKWARD_OPTIONS_DEFAULT, "options");
  BackwardOptions opt;
  opt.retain_graph = o.retain_graph || o.create_graph;
  opt.create_graph = o.create_graph;
  opt.check_finite = o.check_finite;
  return opt;
}

nx_status nx_backward(nx_tensor root, nx_tensor grad, const nx_backward_options* options, nx_stream stream) {
  return guard("nx_backward", [&] {
    const Tensor& r = unwrap(root, "root");
    Tensor g = unwrap_optional(grad, "grad");
    check_stream(stream, r.device());
    run_backward(r, g, backward_options(options));
  });
}

nx_status nx_autograd_grad(nx_tensor* grads, nx_tensor root, nx_tensor grad, const nx_tensor* inputs, size_t ninputs,
                           const nx_backward_options* options, nx_stream stream) {
  // The outs are nulled as far as the caller's arrays are known to reach: through the leading
  // live tensor handles of inputs and the entry after them. A huge ninputs with a shorter array
  // (its end marked by NULL) must not make this loop write past grads.
  if (grads) {
    size_t known = 0;
    while (inputs && known < ninputs && handle_lookup(handle_id(inputs[known]), HandleKind::Tensor)) ++known;
    for (size_t i = 0; i < known + (known < ninputs ? 1 : 0); ++i) grads[i] = nullptr;
  }
  return guard("nx_autograd_grad", [&] {
    check_out(grads, "grads");
    if (!inputs && ninputs) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": inputs is NULL");
    const Tensor& r = unwrap(root, "root");
    Tensor g = unwrap_optional(grad, "grad");
    check_stream(stream, r.device());
    std::vector<Tensor> ins;
    for (size_t i = 0; i < ninputs; ++i) {
      ins.push_back(unwrap(inputs[i], "an element of inputs"));
      if (!ins.back().requires_grad())
        fail(NX_ERR_STATE, current_api(), ": inputs[", i, "] does not require grad");
    }
    BackwardOptions opt = backward_options(options);
    opt.accumulate = false;
    auto result = run_backward(r, g, opt, ins);
    for (size_t i = 0; i < ninputs; ++i)
      if (result[i].defined()) grads[i] = wrap(result[i]);
  });
}

nx_status nx_jvp(nx_tensor* out, nx_tensor output, const nx_tensor* inputs, const nx_tensor* tangents, size_t ninputs,
                 nx_stream stream) {
  clear_out(out);
  return guard("nx_jvp", [&] {
    check_out(out);
    if (ninputs && (!inputs || !tangents)) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": inputs or tangents is NULL");
    const Tensor& y = unwrap(output, "output");
    check_stream(stream, y.device());
    std::vector<Tensor> ins, vs;
    for (size_t i = 0; i < ninputs; ++i) {
      ins.push_back(unwrap(inputs[i], "an element of inputs"));
      vs.push_back(unwrap(tangents[i], "an element of tangents"));
      if (vs.back().shape() != ins.back().shape())
        fail(NX_ERR_SHAPE, current_api(), ": tangent ", i, " has shape ", shape_str(vs.back().shape()),
             " but its input has shape ", shape_str(ins.back().shape()));
    }
    // J v = d/du <J^T u, v>: the VJP is linear in u, and differentiable because it is made of ops.
    Tensor u = zeros_like(y);
    u.impl()->requires_grad = true;
    BackwardOptions opt;
    opt.retain_graph = true;
    opt.create_graph = true;
    opt.accumulate = false;
    auto vjps = run_backward(y, u, opt, ins);
    GradModeGuard on(true);
    Tensor s;
    for (size_t i = 0; i < ninputs; ++i) {
      if (!vjps[i].defined()) continue;
      Tensor term = sum(mul(vjps[i], cast(vs[i], vjps[i].dtype())), {}, false);
      s = s.defined() ? add(s, term) : term;
    }
    if (!s.defined() || !s.requires_grad()) {
      *out = wrap(zeros_like(y));
      return;
    }
    BackwardOptions second;
    second.accumulate = false;
    auto jv = run_backward(s, Tensor(), second, {u});
    *out = wrap(jv[0].defined() ? detach(jv[0]) : zeros_like(y));
  });
}

nx_status nx_tensor_grad(nx_tensor* out, nx_tensor t) {
  clear_out(out);
  return guard("nx_tensor_grad", [&] {
    check_out(out);
    const Tensor& x = unwrap(t, "t");
    if (x.impl()->grad) *out = wrap(Tensor(x.impl()->grad));
  });
}
nx_status nx_tensor_zero_grad(nx_tensor t) {
  return guard("nx_tensor_zero_grad", [&] { unwrap(t, "t").impl()->grad.reset(); });
}
nx_status nx_tensor_detach(nx_tensor* out, nx_tensor t) {
  clear_out(out);
  return guard("nx_tensor_detach", [&] {
    check_out(out);
    *out = wrap(detach(unwrap(t, "t")));
  });
}
nx_status nx_autograd_set_enabled(bool enabled) {
  return guard("nx_autograd_set_enabled", [&] { set_grad_enabled(enabled); });
}
nx_status nx_autograd_get_enabled(bool* out) {
  return guard("nx_autograd_get_enabled", [&] {
    check_out(out);
    *out = grad_enabled();
  });
}

nx_status nx_checkpoint(nx_tensor* outputs, size_t noutputs, const nx_tensor* inputs, size_t ninputs,
                        nx_checkpoint_fn fn, void* user_data, nx_stream stream) {
  if (outputs)
    for (size_t i = 0; i < noutputs; ++i) outputs[i] = nullptr;
  return guard("nx_checkpoint", [&] {
    check_out(outputs, "outputs");
    if (!fn) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": fn is NULL");
    if (!noutputs) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": noutputs must be at least 1");
    if (!inputs && ninputs) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": inputs is NULL");
    std::vector<Tensor> ins;
    for (size_t i = 0; i < ninputs; ++i) ins.push_back(unwrap(inputs[i], "an element of inputs"));
    if (!ins.empty()) check_stream(stream, ins[0].device());
    std::vector<Tensor> outs = checkpoint(
        [fn, user_data, noutputs](const std::vector<Tensor>& xs) { return call_tensor_fn(fn, user_data, xs, noutputs, "nx_checkpoint: the segment function"); },
        ins);
    const std::vector<nx_tensor> made = wrap_all(outs);  // all or none, as nx_plan_run
    std::copy(made.begin(), made.end(), outputs);
  });
}

// ---------------------------------------------------------------- graph object
nx_status nx_graph_create(nx_graph* out, nx_tensor root) {
  clear_out(out);
  return guard("nx_graph_create", [&] {
    check_out(out);
    const Tensor& r = unwrap(root, "root");
    auto g = std::make_unique<nx_graph_s>();
    g->root = r;
    g->nodes = topological_nodes(r.grad_fn());
    g->dot = graph_to_dot(r);
    *out = make_handle(std::move(g));
  });
}
nx_status nx_graph_node_count(nx_graph g, size_t* out) {
  return guard("nx_graph_node_count", [&] {
    check_out(out);
    *out = graph_arg(g).nodes.size();
  });
}
nx_status nx_graph_node_name(nx_graph g, size_t i, const char** out) {
  return guard("nx_graph_node_name", [&] {
    check_out(out);
    const auto& graph = graph_arg(g);
    if (i >= graph.nodes.size())
      fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": node index ", i, " out of range (graph has ", graph.nodes.size(), " nodes)");
    *out = graph.nodes[i]->name.c_str();
  });
}
nx_status nx_graph_saved_bytes(nx_graph g, size_t* out) {
  return guard("nx_graph_saved_bytes", [&] {
    check_out(out);
    size_t total = 0;
    for (const auto& n : graph_arg(g).nodes) total += n->saved_bytes();
    *out = total;
  });
}
nx_status nx_graph_node_saved_bytes(nx_graph g, size_t i, size_t* out) {
  return guard("nx_graph_node_saved_bytes", [&] {
    check_out(out);
    const auto& graph = graph_arg(g);
    if (i >= graph.nodes.size())
      fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": node index ", i, " out of range (graph has ", graph.nodes.size(), " nodes)");
    *out = graph.nodes[i]->saved_bytes();
  });
}
nx_status nx_graph_dump(nx_graph g, const nx_graph_dump_options* options, const char** out) {
  clear_out(out);
  return guard("nx_graph_dump", [&] {
    nx_graph_s& graph = graph_arg(g);
    check_out(out);
    const nx_graph_dump_options o = struct_arg(options, nx_graph_dump_options NX_GRAPH_DUMP_OPTIONS_DEFAULT, "options");
    DotOptions dot;
    dot.saved_bytes = o.saved_bytes;
    if (o.values) dot.summary = value_summary;
    dot.leaf_name = [&graph](const TensorImpl& leaf) {
      auto it = graph.leaf_names.find(&leaf);
      return it == graph.leaf_names.end() ? std::string() : it->second;
    };
    graph.dump = graph_to_dot(graph.root, dot);
    *out = graph.dump.c_str();
  });
}
nx_status nx_graph_to_dot(nx_graph g, const char** out) {
  return guard("nx_graph_to_dot", [&] {
    check_out(out);
    *out = graph_arg(g).dot.c_str();
  });
}
void nx_graph_free(nx_graph g) {
  free_handle(g);
}

}  // extern "C"
