// The graph as text: Graphviz DOT with one box per leaf and one ellipse per op node, edges in
// the direction data flows (input -> op), labelled with shapes and dtypes; optionally the leaves'
// names, value summaries of leaves, saved tensors and the output, and each op's saved bytes.
#include <sstream>
#include <unordered_map>

#include "graph/node.hpp"

namespace nx {

static std::string describe(const Shape& shape, DType dtype) {
  return cat(shape_str(shape), " ", dtype_name(dtype));
}

// Text inside a DOT label: quotes and backslashes escaped, line breaks as \n.
static std::string label_text(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string graph_to_dot(const Tensor& root, const DotOptions& options) {
  auto values = [&](const Tensor& t) { return options.summary ? "\\n" + label_text(options.summary(t)) : std::string(); };
  auto leaf_label = [&](const std::shared_ptr<TensorImpl>& leaf) {
    std::string name = options.leaf_name ? options.leaf_name(*leaf) : std::string();
    return (name.empty() ? std::string("leaf") : label_text(name)) + "\\n" + describe(leaf->shape, leaf->dtype) +
           values(Tensor(leaf));
  };
  std::ostringstream os;
  os << "digraph nexus {\n  rankdir=BT;\n  node [fontname=\"Helvetica\", fontsize=10];\n";
  auto nodes = topological_nodes(root.grad_fn());
  std::unordered_map<const void*, std::string> ids;
  auto id_of = [&](const void* p, const char* prefix) {
    auto it = ids.find(p);
    if (it != ids.end()) return it->second;
    std::string id = cat(prefix, ids.size());
    ids.emplace(p, id);
    return id;
  };
  if (!root.grad_fn()) {
    os << "  " << id_of(root.impl(), "leaf") << " [shape=box, label=\"" << leaf_label(root.impl_ptr()) << "\"];\n}\n";
    return os.str();
  }
  for (const auto& node : nodes) {
    std::string nid = id_of(node.get(), "op");
    os << "  " << nid << " [label=\"" << node->name;
    for (size_t i = 0; i < node->out_shapes.size(); ++i) os << "\\n" << describe(node->out_shapes[i], node->out_dtypes[i]);
    if (options.saved_bytes) os << "\\nsaved " << node->saved_bytes() << " bytes";
    if (options.summary && !node->released)
      for (size_t k = 0; k < node->saved.size(); ++k)
        if (node->saved[k].tensor.defined())
          os << "\\nsaved " << k << ": " << describe(node->saved[k].tensor.shape(), node->saved[k].tensor.dtype())
             << values(node->saved[k].tensor);
    os << "\"];\n";
    for (size_t j = 0; j < node->next.size(); ++j) {
      const Edge& e = node->next[j];
      if (e.fn) {
        os << "  " << id_of(e.fn.get(), "op") << " -> " << nid << ";\n";
      } else if (e.leaf) {
        std::string lid = id_of(e.leaf.get(), "leaf");
        os << "  " << lid << " [shape=box, style=filled, fillcolor=lightblue, label=\"" << leaf_label(e.leaf) << "\"];\n";
        os << "  " << lid << " -> " << nid << ";\n";
      }
    }
  }
  os << "  out [shape=box, style=filled, fillcolor=lightyellow, label=\"output\\n" << describe(root.shape(), root.dtype())
     << values(root) << "\"];\n  " << id_of(root.grad_fn().get(), "op") << " -> out;\n}\n";
  return os.str();
}

}  // namespace nx
