// The text of a tensor, laid out as PyTorch 1.13's str(tensor) (torch/_tensor_str.py): one
// formatter (width, integer / fixed / scientific notation) for all the entries shown, rows wrapped
// at the line width, long dimensions summarized with "...", then the suffixes. Pure string work on
// values already on the host: the C API (src/capi/print_api.cpp) gathers them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.hpp"

namespace nx {

struct PrintOptions {
  int32_t precision = 4;
  int64_t threshold = 1000;  // summarize when numel > threshold
  int64_t edge_items = 3;
  int32_t line_width = 80;
  nx_print_sci_mode sci_mode = NX_PRINT_SCI_AUTO;
};

// Whether a dimension of size n shows only its edge_items first and last entries (when the tensor
// is summarized): n > 2 * edge_items, without overflow.
inline bool print_elides(int64_t n, int64_t edge_items) { return n > edge_items && n - edge_items > edge_items; }

// What is printed of a tensor. `values` (floating dtypes, as doubles) or `ints` (integer dtypes;
// bool as 0/1) hold the entries shown in row-major order over the gathered block: the tensor
// itself, or when summarized, every elided dimension cut to its first and last edge_items entries.
struct TensorText {
  DType dtype = DType::F32;
  Device device;
  Shape shape;        // of the whole tensor
  bool summarize = false;
  std::vector<double> values;
  std::vector<int64_t> ints;
  std::string grad_fn;  // node name, "" for none
  bool requires_grad = false;
};

std::string format_tensor(const TensorText& t, const PrintOptions& options);

}  // namespace nx
