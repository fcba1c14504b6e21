// Reductions over any set of axes (sum, mean, amax, amin, var, argmax) and sum_to, the reverse
// of broadcasting. The kernel sees either [rows, cols] (reduced axes innermost) or
// [outer, n, inner] (one contiguous block of reduced axes); anything else is permuted first.
#include <algorithm>

#include "ops/autocast.hpp"
#include "ops/ops.hpp"

namespace nx {
namespace {

using Grads = std::vector<Tensor>;

std::vector<bool> reduced_mask(const Tensor& x, const Axes& axes) {
  const int64_t nd = x.dim();
  std::vector<bool> mask(size_t(nd), axes.empty());
  for (int64_t a : axes) {
    int64_t w = wrap_axis(a, nd);
    if (nd == 0) continue;
    if (mask[size_t(w)] && !axes.empty())
      fail(NX_ERR_SHAPE, current_api(), ": axis ", a, " appears twice in the reduction axes");
    mask[size_t(w)] = true;
  }
  return mask;
}

Shape reduced_shape(const Tensor& x, const std::vector<bool>& mask, bool keepdim) {
  Shape out;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (!mask[size_t(d)]) out.push_back(x.shape()[size_t(d)]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

// Reduction kernel call; result has shape reduced_shape(keepdim) and dtype out_dtype. The kernels
// read every dtype as stored (f16/bf16 widened in registers, accumulated in f32 or wider) and
// write out_dtype directly: no f32 copy of a half input, no cast of the result.
Tensor reduce_raw(ReduceOp op, const Tensor& x, const std::vector<bool>& mask, bool keepdim, DType out_dtype) {
  const int64_t nd = x.dim();
  Shape out_shape = reduced_shape(x, mask, keepdim);
  Tensor out = Tensor::empty(out_shape, out_dtype, x.device());
  const Kernels kernel = kernels(x.device());
  int64_t first = -1, last = -1;
  for (int64_t d = 0; d < nd; ++d)
    if (mask[size_t(d)]) { if (first < 0) first = d; last = d; }
  // An empty input sums to zeros (its other dimensions may be huge: no products of them below);
  // max/min over an empty axis were refused before, so out is then empty too.
  if (x.numel() == 0) {
    if (out.numel() > 0) kernel.fill(View::of(out), 0.0);
    return out;
  }
  bool block = first >= 0;
  for (int64_t d = first; block && d <= last; ++d) block = mask[size_t(d)];
  if (block && x.is_contiguous() && op != ReduceOp::ArgMax) {
    int64_t outer = 1, n = 1, inner = 1;
    for (int64_t d = 0; d < nd; ++d) (d < first ? outer : d <= last ? n : inner) *= x.shape()[size_t(d)];
    if (inner == 1) kernel.reduce_rows(op, View::of(out), View::of(x), outer, n);
    else kernel.reduce_middle(op, View::of(out), View::of(x), outer, n, inner);
  } else {
    Axes order;
    for (int64_t d = 0; d < nd; ++d) if (!mask[size_t(d)]) order.push_back(d);
    int64_t rows = 1, cols = 1;
    for (int64_t d = 0; d < nd; ++d) (mask[size_t(d)] ? cols : rows) *= x.shape()[size_t(d)];
    for (int64_t d = 0; d < nd; ++d) if (mask[size_t(d)]) order.push_back(d);
    Tensor p = contiguous(detach(nd ? permute(detach(x), order) : x));
    kernel.reduce_rows(op, View::of(out), View::of(p), rows, cols);
  }
  return out;
}

// Brings a reduced gradient back to x's shape (a broadcasting view).
Tensor expand_back(const Tensor& g, const Tensor& x, const std::vector<bool>& mask, bool keepdim) {
  Tensor gk = keepdim ? g : reshape(g, reduced_shape(x, mask, true));
  return expand(gk, x.shape());
}

Tensor extreme(ReduceOp op, const char* name, const Tensor& x, const Axes& axes, bool keepdim) {
  auto mask = reduced_mask(x, axes);
  for (int64_t d = 0; d < x.dim(); ++d)
    if (mask[size_t(d)] && x.shape()[size_t(d)] == 0)
      fail(NX_ERR_SHAPE, current_api(), ": cannot reduce over the empty axis ", d, " of shape ", shape_str(x.shape()));
  Tensor out = reduce_raw(op, x, mask, keepdim, x.dtype());
  if (!is_floating(x.dtype())) return out;
  return record1(name, out, {x}, {x, detach(out)}, [mask, keepdim](const Grads& g, const Grads& s, const auto&) {
    // The gradient is shared equally among the elements that attain the extreme (PyTorch's rule).
    Tensor hit = cast(binary(BinaryOp::Eq, s[0], expand_back(s[1], s[0], mask, keepdim)), s[0].dtype());
    Tensor count = sum(hit, [&] { Axes a; for (size_t d = 0; d < mask.size(); ++d) if (mask[d]) a.push_back(int64_t(d)); return a; }(), true);
    return Grads{div(mul(hit, expand_back(g[0], s[0], mask, keepdim)), count)};
  });
}

}  // namespace

Tensor sum(const Tensor& x_in, const Axes& axes, bool keepdim) {
  Tensor x = x_in;
  autocast_f32({&x});
  auto mask = reduced_mask(x, axes);
  DType out_dtype = is_floating(x.dtype()) ? x.dtype() : DType::I64;
  Tensor out = reduce_raw(ReduceOp::Sum, x, mask, keepdim, out_dtype);
  if (!is_floating(out_dtype)) return out;
  return record1("SumBackward", out, {x}, {}, [mask, keepdim, xshape = x.shape()](const Grads& g, const Grads&, const auto&) {
    Tensor gk = keepdim ? g[0] : reshape(g[0], [&] {
      Shape s;
      for (size_t d = 0; d < xshape.size(); ++d) s.push_back(mask[d] ? 1 : xshape[d]);
      return s;
    }());
    return Grads{expand(gk, xshape)};
  });
}

// The number of elements each output of a reduction over mask sums, computed without overflow:
// for an empty x (whose other dimensions may be huge) it is 0 when a reduced dimension is 0, and
// irrelevant otherwise (the result is empty); else a product of dimensions of x, which fits.
static int64_t reduced_count(const Tensor& x, const std::vector<bool>& mask) {
  if (x.numel() == 0) return 0;
  Shape reduced;
  for (int64_t d = 0; d < x.dim(); ++d) if (mask[size_t(d)]) reduced.push_back(x.shape()[size_t(d)]);
  return numel_of(reduced);
}

Tensor mean(const Tensor& x, const Axes& axes, bool keepdim) {
  auto mask = reduced_mask(x, axes);
  const int64_t count = reduced_count(x, mask);
  Tensor xf = is_floating(x.dtype()) ? x : cast(x, DType::F32);
  return mul_scalar(sum(xf, axes, keepdim), 1.0 / double(count));
}

Tensor amax(const Tensor& x, const Axes& axes, bool keepdim) { return extreme(ReduceOp::Max, "AmaxBackward", x, axes, keepdim); }
Tensor amin(const Tensor& x, const Axes& axes, bool keepdim) { return extreme(ReduceOp::Min, "AminBackward", x, axes, keepdim); }

Tensor var(const Tensor& x, const Axes& axes, int64_t correction, bool keepdim) {
  check_floating(x, "x");
  auto mask = reduced_mask(x, axes);
  const int64_t count = reduced_count(x, mask);
  if (correction < 0)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": correction must be >= 0, got ", correction);
  // Two passes (mean, then squared deviations): no cancellation, and autodiff comes for free.
  Tensor dev = sub(x, mean(x, axes, true));
  double denom = double(std::max<int64_t>(count - correction, 0));
  return mul_scalar(sum(square(dev), axes, keepdim), 1.0 / denom);
}

Tensor argmax(const Tensor& x, int64_t axis, bool keepdim) {
  int64_t a = wrap_axis(axis, x.dim());
  if (x.dim() && x.shape()[size_t(a)] == 0)
    fail(NX_ERR_SHAPE, current_api(), ": argmax over the empty axis ", axis, " of shape ", shape_str(x.shape()));
  std::vector<bool> mask(size_t(x.dim()), false);
  if (x.dim()) mask[size_t(a)] = true;
  return reduce_raw(ReduceOp::ArgMax, detach(x), mask, keepdim, DType::I64);
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const size_t lead = g.shape().size() - shape.size();
  Axes axes;
  for (size_t i = 0; i < g.shape().size(); ++i)
    if (i < lead || (shape[i - lead] == 1 && g.shape()[i] != 1)) axes.push_back(int64_t(i));
  Tensor s = axes.empty() ? g : sum(g, axes, true);
  return reshape(s, shape);
}

}  // namespace nx
