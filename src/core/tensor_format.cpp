// PyTorch 1.13's tensor printing (torch/_tensor_str.py: _Formatter, _vector_str,
// _tensor_str_with_formatter, _add_suffixes, _str_intern), step by step, on host values. Python's
// "{:.Nf}" / "{:.Ne}" and C's "%.*f" / "%.*e" both round the exact binary value correctly, so
// they agree digit for digit; only NaN differs (glibc writes "-nan"), and is spelled here.
#include "core/tensor_format.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace nx {
namespace {

// Python's format(v, ".{precision}f") or format(v, ".{precision}e").
std::string py_format(double v, int precision, bool sci) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char small[64];
  const char* spec = sci ? "%.*e" : "%.*f";
  int n = std::snprintf(small, sizeof small, spec, precision, v);
  if (n >= 0 && size_t(n) < sizeof small) return std::string(small, size_t(n));
  std::string big(size_t(n) + 1, '\0');
  std::snprintf(big.data(), big.size(), spec, precision, v);
  big.resize(size_t(n));
  return big;
}

// torch's _Formatter: one width and one notation for every entry shown.
class Formatter {
 public:
  Formatter(const TensorText& t, const PrintOptions& o) : t_(t), precision_(o.precision) {
    floating_ = is_floating(t.dtype) || t.dtype == DType::F8E4M3 || t.dtype == DType::F8E5M2;
    if (!floating_) {
      for (int64_t v : t.ints) width_ = std::max(width_, int_str(v).size());
      return;
    }
    double lo = INFINITY, hi = 0;
    bool any = false;
    for (double v : t.values) {
      if (!std::isfinite(v) || v == 0) continue;
      any = true;
      lo = std::min(lo, std::fabs(v));
      hi = std::max(hi, std::fabs(v));
      if (v != std::ceil(v)) int_mode_ = false;
    }
    if (!any) return;  // no nonzero finite value: torch returns before applying options.sci_mode
    if (int_mode_) {
      sci_ = hi / lo > 1000.0 || hi > 1.0e8;
    } else {
      sci_ = hi / lo > 1000.0 || hi > 1.0e8 || lo < 1.0e-4;
    }
    for (double v : t.values) {
      if (!std::isfinite(v) || v == 0) continue;
      const size_t w = sci_ ? py_format(v, precision_, true).size()
                            : int_mode_ ? py_format(v, 0, false).size() + 1 : py_format(v, precision_, false).size();
      width_ = std::max(width_, w);
    }
    if (o.sci_mode != NX_PRINT_SCI_AUTO) sci_ = o.sci_mode == NX_PRINT_SCI_ALWAYS;
  }

  size_t width() const { return width_; }

  // Entry i of the gathered values, right-aligned to the width.
  void append(std::string& out, int64_t i) const {
    std::string s;
    if (floating_) {
      const double v = t_.values[size_t(i)];
      if (sci_) {
        s = py_format(v, precision_, true);
      } else if (int_mode_) {
        s = py_format(v, 0, false);
        if (std::isfinite(v)) s += '.';
      } else {
        s = py_format(v, precision_, false);
      }
    } else {
      s = int_str(t_.ints[size_t(i)]);
    }
    if (s.size() < width_) out.append(width_ - s.size(), ' ');
    out += s;
  }

 private:
  std::string int_str(int64_t v) const {
    if (t_.dtype == DType::Bool) return v ? "True" : "False";
    return std::to_string(v);
  }

  const TensorText& t_;
  int precision_;
  bool floating_ = false;
  bool int_mode_ = true;
  bool sci_ = false;
  size_t width_ = 1;
};

// _tensor_str_with_formatter and _vector_str over the gathered block.
class Printer {
 public:
  Printer(const TensorText& t, const PrintOptions& o, const Formatter& f) : o_(o), f_(f) {
    const size_t nd = t.shape.size();
    block_.resize(nd);
    elided_.resize(nd);
    strides_.resize(nd);
    for (size_t d = 0; d < nd; ++d) {
      elided_[d] = t.summarize && print_elides(t.shape[d], o.edge_items);
      block_[d] = elided_[d] ? 2 * o.edge_items : t.shape[d];
    }
    int64_t acc = 1;
    for (size_t d = nd; d-- > 0;) {
      strides_[d] = acc;
      acc *= block_[d];
    }
  }

  void tensor_str(std::string& out, size_t d, int64_t offset, int64_t indent) const {
    const size_t nd = block_.size();
    if (nd == 0) return f_.append(out, 0);
    if (d + 1 == nd) return vector_str(out, d, offset, indent);
    std::string sep(1, ',');  // built by appends: "," + std::string(...) trips GCC 12's -Wrestrict
    sep.append(nd - d - 1, '\n');
    sep.append(size_t(indent + 1), ' ');
    out += '[';
    for (int64_t k = 0; k < block_[d]; ++k) {
      if (k > 0) out += sep;
      if (elided_[d] && k == o_.edge_items) {
        out += "...";
        out += sep;
      }
      tensor_str(out, d + 1, offset + k * strides_[d], indent + 1);
    }
    out += ']';
  }

 private:
  void vector_str(std::string& out, size_t d, int64_t offset, int64_t indent) const {
    const double element_length = double(f_.width() + 2);
    const int64_t per_line = std::max<int64_t>(1, int64_t(std::floor(double(o_.line_width - indent) / element_length)));
    std::string line_sep(",\n");
    line_sep.append(size_t(indent + 1), ' ');
    int64_t column = 0;
    auto next = [&] {
      if (column == per_line) {
        out += line_sep;
        column = 0;
      } else if (column > 0) {
        out += ", ";
      }
      ++column;
    };
    out += '[';
    for (int64_t k = 0; k < block_[d]; ++k) {
      if (elided_[d] && k == o_.edge_items) {
        next();
        out += " ...";
      }
      next();
      f_.append(out, offset + k * strides_[d]);
    }
    out += ']';
  }

  const PrintOptions& o_;
  const Formatter& f_;
  Shape block_, strides_;
  std::vector<bool> elided_;
};

// PyTorch's dtype names (str(torch.float64) without "torch.").
const char* torch_dtype_name(DType d) {
  switch (d) {
    case DType::F32: return "float32";
    case DType::F64: return "float64";
    case DType::F16: return "float16";
    case DType::BF16: return "bfloat16";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
    case DType::Bool: return "bool";
    case DType::I8: return "int8";
    case DType::F8E4M3: return "float8_e4m3fn";
    case DType::F8E5M2: return "float8_e5m2";
  }
  return "invalid";
}

}  // namespace

std::string format_tensor(const TensorText& t, const PrintOptions& o) {
  const int64_t indent = 7;  // "tensor("
  std::string s = "tensor(";
  std::vector<std::string> suffixes;
  if (!t.device.is_cpu()) suffixes.push_back("device='cuda:" + std::to_string(t.device.index) + "'");
  if (numel_of(t.shape) == 0) {
    if (t.shape.size() != 1) {  // the shape cannot be told from "[]"
      std::string size = "size=(";
      for (size_t d = 0; d < t.shape.size(); ++d) size += (d ? ", " : "") + std::to_string(t.shape[d]);
      suffixes.push_back(size + ")");
    }
    if (t.dtype != DType::F32) suffixes.push_back(std::string("dtype=") + torch_dtype_name(t.dtype));
    s += "[]";
  } else {
    if (t.dtype != DType::F32 && t.dtype != DType::I64 && t.dtype != DType::Bool)
      suffixes.push_back(std::string("dtype=") + torch_dtype_name(t.dtype));
    const Formatter f(t, o);
    Printer(t, o, f).tensor_str(s, 0, 0, indent);
  }
  if (!t.grad_fn.empty()) {
    suffixes.push_back("grad_fn=<" + t.grad_fn + ">");
  } else if (t.requires_grad) {
    suffixes.push_back("requires_grad=True");
  }
  // _add_suffixes, its reckoning of the last line's length included
  const size_t nl = s.rfind('\n');
  int64_t last_line = nl == std::string::npos ? int64_t(s.size()) + 2 : int64_t(s.size() - nl) + 1;
  for (const std::string& suffix : suffixes) {
    const int64_t n = int64_t(suffix.size());
    if (last_line + n + 2 > o.line_width) {
      s += ",\n";
      s.append(size_t(indent), ' ');
      s += suffix;
      last_line = indent + n;
    } else {
      s += ", ";
      s += suffix;
      last_line += n + 2;
    }
  }
  s += ')';
  return s;
}

}  // namespace nx
