// View and shape ops: reshape/view, transpose, permute, slice, expand, squeeze/unsqueeze,
// flatten, cat, stack, split. Views alias the input's storage; their VJPs undo the geometry.
#include <algorithm>
#include <optional>

#include "core/int_math.hpp"
#include "ops/ops.hpp"

namespace nx {
namespace {

using Grads = std::vector<Tensor>;

Shape infer_shape(const Tensor& x, const Shape& shape) {
  Shape out = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      if (infer >= 0) fail(NX_ERR_SHAPE, current_api(), ": only one dimension may be -1 in ", shape_str(shape));
      infer = int64_t(i);
    } else if (out[i] < 0) {
      fail(NX_ERR_SHAPE, current_api(), ": invalid dimension ", out[i], " in shape ", shape_str(shape));
    } else if (__builtin_mul_overflow(known, out[i], &known)) {
      known = INT64_MAX;  // saturated: valid only if a later dimension is 0 (numel_of checks below)
    }
  }
  if (infer >= 0) {
    if (known == 0 || x.numel() % known != 0)
      fail(NX_ERR_SHAPE, current_api(), ": cannot reshape ", shape_str(x.shape()), " (", x.numel(),
           " elements) to ", shape_str(shape));
    out[size_t(infer)] = x.numel() / known;
  }
  if (numel_of(out) != x.numel())
    fail(NX_ERR_SHAPE, current_api(), ": cannot reshape ", shape_str(x.shape()), " (", x.numel(),
         " elements) to ", shape_str(shape), " (", numel_of(out), " elements)");
  return out;
}

// Strides that let new_shape view the same elements as (shape, strides), if any exist.
std::optional<Shape> view_strides(const Shape& shape, const Shape& strides, const Shape& new_shape) {
  if (numel_of(shape) == 0 || shape.empty()) return contiguous_strides(new_shape);
  Shape out(new_shape.size());
  int64_t view_d = int64_t(new_shape.size()) - 1;
  int64_t chunk_base = strides.back(), tensor_numel = 1, view_numel = 1;
  for (int64_t d = int64_t(shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= shape[size_t(d)];
    if (d == 0 || (shape[size_t(d - 1)] != 1 && strides[size_t(d - 1)] != tensor_numel * chunk_base)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[size_t(view_d)] == 1)) {
        out[size_t(view_d)] = view_numel * chunk_base;
        view_numel *= new_shape[size_t(view_d)];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base = strides[size_t(d - 1)];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

Tensor reshape_node(const Tensor& x, Tensor out) {
  return record1("ReshapeBackward", out, {x}, {}, [xs = x.shape()](const Grads& g, const Grads&, const auto&) {
    return Grads{reshape(g[0], xs)};
  });
}

}  // namespace

Tensor view(const Tensor& x, const Shape& shape) {
  Shape s = infer_shape(x, shape);
  auto st = view_strides(x.shape(), x.strides(), s);
  if (!st)
    fail(NX_ERR_SHAPE, current_api(), ": a tensor of shape ", shape_str(x.shape()), " and strides ",
         shape_str(x.strides()), " cannot be viewed as ", shape_str(s), " without a copy; use reshape");
  return reshape_node(x, x.alias(s, *st, x.offset()));
}

Tensor reshape(const Tensor& x, const Shape& shape) {
  Shape s = infer_shape(x, shape);
  auto st = view_strides(x.shape(), x.strides(), s);
  if (st) return reshape_node(x, x.alias(s, *st, x.offset()));
  return view(contiguous(x), s);
}

Tensor permute(const Tensor& x, const Axes& dims) {
  const int64_t nd = x.dim();
  if (int64_t(dims.size()) != nd)
    fail(NX_ERR_SHAPE, current_api(), ": permutation has ", dims.size(), " entries for a tensor of rank ", nd);
  Shape shape(static_cast<size_t>(nd)), strides(static_cast<size_t>(nd));
  Axes inverse(static_cast<size_t>(nd), -1);
  for (int64_t i = 0; i < nd; ++i) {
    int64_t d = wrap_axis(dims[size_t(i)], nd, "permutation entry");
    if (inverse[size_t(d)] >= 0) fail(NX_ERR_SHAPE, current_api(), ": axis ", d, " repeats in the permutation");
    inverse[size_t(d)] = i;
    shape[size_t(i)] = x.shape()[size_t(d)];
    strides[size_t(i)] = x.strides()[size_t(d)];
  }
  Tensor out = x.alias(shape, strides, x.offset());
  return record1("PermuteBackward", out, {x}, {}, [inverse](const Grads& g, const Grads&, const auto&) {
    return Grads{permute(g[0], inverse)};
  });
}

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  const int64_t nd = x.dim();
  if (nd < 2 && x.dim() == 0) return permute(x, {});
  int64_t a = wrap_axis(d0, nd), b = wrap_axis(d1, nd);
  Axes order(static_cast<size_t>(nd));
  for (int64_t i = 0; i < nd; ++i) order[size_t(i)] = i;
  std::swap(order[size_t(a)], order[size_t(b)]);
  return permute(x, order);
}

Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t end, int64_t step) {
  int64_t a = wrap_axis(axis, x.dim());
  if (x.dim() == 0) fail(NX_ERR_SHAPE, current_api(), ": cannot slice a scalar");
  if (step <= 0) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": step must be positive, got ", step);
  const int64_t n = x.shape()[size_t(a)];
  auto clampi = [n](int64_t v) { if (v < 0) v += n; return std::min(std::max<int64_t>(v, 0), n); };
  int64_t s = clampi(start), e = clampi(end);
  // ceil((e - s) / step) without forming e - s + step - 1, which overflows for a huge step
  int64_t len = e > s ? (e - s - 1) / step + 1 : 0;
  Shape shape = x.shape(), strides = x.strides();
  shape[size_t(a)] = len;
  // The stride of a dimension of length <= 1 is never used: keep it rather than a product that
  // may overflow; otherwise step < n and the product stays within the input's extent.
  if (len > 1) strides[size_t(a)] = checked_mul(strides[size_t(a)], step, "the slice's stride");
  const int64_t offset = len > 0 ? checked_add(x.offset(), checked_mul(s, x.strides()[size_t(a)], "the slice's offset"),
                                               "the slice's offset")
                                 : x.offset();
  Tensor out = x.alias(shape, strides, offset);
  return record1("SliceBackward", out, {x}, {}, [xs = x.shape(), a, s, step](const Grads& g, const Grads&, const auto&) {
    return Grads{slice_scatter(g[0], xs, a, s, step)};
  });
}

Tensor slice_scatter(const Tensor& g, const Shape& shape, int64_t axis, int64_t start, int64_t step) {
  Tensor out = zeros(shape, g.dtype(), g.device());
  Tensor region = detach(out);
  {
    GradModeGuard off(false);
    // end just past the last element taken: start + step * len would overflow for a huge step
    const int64_t len = g.shape()[size_t(axis)];
    region = slice(region, axis, start, len ? start + step * (len - 1) + 1 : start, step);
  }
  kernels(g.device()).copy(View::of(region), View::of(g));
  return record1("SliceScatterBackward", out, {g}, {}, [axis, start, step, len = g.shape()[size_t(axis)]](
      const Grads& gg, const Grads&, const auto&) {
    return Grads{slice(gg[0], axis, start, len ? start + step * (len - 1) + 1 : start, step)};
  });
}

Tensor expand(const Tensor& x, const Shape& shape) {
  if (shape.size() < x.shape().size())
    fail(NX_ERR_SHAPE, current_api(), ": cannot expand ", shape_str(x.shape()), " to fewer dimensions ", shape_str(shape));
  const size_t lead = shape.size() - x.shape().size();
  Shape out_shape(shape.size()), strides(shape.size(), 0);
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t want = shape[i];
    if (i < lead) {
      if (want < 0)
        fail(NX_ERR_SHAPE, current_api(), ": size ", want, " is not allowed for new leading dimension ", i, " of ",
             shape_str(shape), " (-1 keeps an existing dimension only)");
      out_shape[i] = want;
      continue;
    }
    int64_t have = x.shape()[i - lead];
    if (want == -1) want = have;
    if (want < 0)
      fail(NX_ERR_SHAPE, current_api(), ": invalid size ", want, " for dimension ", i, " in ", shape_str(shape));
    if (have != want && have != 1)
      fail(NX_ERR_SHAPE, current_api(), ": cannot expand ", shape_str(x.shape()), " to ", shape_str(shape),
           " (dimension ", i, " has size ", have, ", not 1)");
    out_shape[i] = want;
    strides[i] = have == want ? x.strides()[i - lead] : 0;
  }
  numel_of(out_shape);  // the view's element count must fit an int64 ([2^40, 2^40] does not)
  Tensor out = x.alias(out_shape, strides, x.offset());
  return record1("ExpandBackward", out, {x}, {}, [xs = x.shape()](const Grads& g, const Grads&, const auto&) {
    return Grads{sum_to(g[0], xs)};
  });
}

Tensor squeeze(const Tensor& x, int64_t axis) {
  int64_t a = wrap_axis(axis, x.dim());
  if (x.dim() == 0) return reshape(x, {});
  if (x.shape()[size_t(a)] != 1)
    fail(NX_ERR_SHAPE, current_api(), ": cannot squeeze axis ", axis, " of size ", x.shape()[size_t(a)],
         " in shape ", shape_str(x.shape()));
  Shape s = x.shape();
  s.erase(s.begin() + a);
  return reshape(x, s);
}

Tensor unsqueeze(const Tensor& x, int64_t axis) {
  int64_t a = wrap_axis(axis, x.dim() + 1);
  Shape s = x.shape();
  s.insert(s.begin() + a, 1);
  return reshape(x, s);
}

Tensor flatten(const Tensor& x, int64_t start_axis, int64_t end_axis) {
  if (x.dim() == 0) return reshape(x, {1});
  int64_t a = wrap_axis(start_axis, x.dim()), b = wrap_axis(end_axis, x.dim());
  if (a > b) fail(NX_ERR_SHAPE, current_api(), ": start axis ", start_axis, " comes after end axis ", end_axis);
  Shape s;
  for (int64_t d = 0; d < a; ++d) s.push_back(x.shape()[size_t(d)]);
  // 0 when a merged dimension is 0, else their product, checked (an empty tensor may have huge
  // other dimensions)
  const int64_t m = numel_of(Shape(x.shape().begin() + a, x.shape().begin() + b + 1));
  s.push_back(m);
  for (int64_t d = b + 1; d < x.dim(); ++d) s.push_back(x.shape()[size_t(d)]);
  return reshape(x, s);
}

Tensor cat(const std::vector<Tensor>& xs, int64_t axis) {
  if (xs.empty()) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": needs at least one tensor");
  const Tensor& first = xs[0];
  if (first.dim() == 0) fail(NX_ERR_SHAPE, current_api(), ": cannot concatenate scalars; use stack");
  int64_t a = wrap_axis(axis, first.dim());
  Shape shape = first.shape();
  shape[size_t(a)] = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& t = xs[i];
    check_same_device(first, t, "tensor 0", "another tensor");
    if (t.dtype() != first.dtype())
      fail(NX_ERR_DTYPE, current_api(), ": tensor ", i, " has dtype ", dtype_name(t.dtype()), " but tensor 0 has ",
           dtype_name(first.dtype()));
    bool ok = t.dim() == first.dim();
    for (int64_t d = 0; ok && d < t.dim(); ++d) ok = d == a || t.shape()[size_t(d)] == first.shape()[size_t(d)];
    if (!ok)
      fail(NX_ERR_SHAPE, current_api(), ": tensor ", i, " has shape ", shape_str(t.shape()), ", incompatible with ",
           shape_str(first.shape()), " outside axis ", a);
    shape[size_t(a)] = checked_add(shape[size_t(a)], t.shape()[size_t(a)], "the concatenated size");
  }
  Tensor out = Tensor::empty(shape, first.dtype(), first.device());
  std::vector<int64_t> sizes;
  int64_t at = 0;
  for (const Tensor& t : xs) {
    int64_t n = t.shape()[size_t(a)];
    sizes.push_back(n);
    // An empty output has nothing to copy, and its strides may be huge (a 0-sized dimension next
    // to a 2^62 one): at * stride would overflow (found by tests/fuzz/fuzz_capi).
    if (out.numel() > 0 && t.numel() > 0) {
      Shape st = out.strides();
      Tensor region = out.alias(t.shape(), st, at * out.strides()[size_t(a)]);
      kernels(out.device()).copy(View::of(region), View::of(t));
    }
    at += n;
  }
  if (!is_floating(out.dtype())) return out;
  return record(("CatBackward"), {out}, xs, {}, [sizes, a](const Grads& g, const Grads&, const auto& needs) {
    Grads r(sizes.size());
    int64_t at = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (needs[i]) r[i] = slice(g[0], a, at, at + sizes[i], 1);
      at += sizes[i];
    }
    return r;
  })[0];
}

Tensor stack(const std::vector<Tensor>& xs, int64_t axis) {
  if (xs.empty()) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": needs at least one tensor");
  int64_t a = wrap_axis(axis, xs[0].dim() + 1);
  for (size_t i = 1; i < xs.size(); ++i)
    if (xs[i].shape() != xs[0].shape())
      fail(NX_ERR_SHAPE, current_api(), ": tensor ", i, " has shape ", shape_str(xs[i].shape()),
           " but tensor 0 has ", shape_str(xs[0].shape()));
  std::vector<Tensor> parts;
  for (const Tensor& t : xs) parts.push_back(unsqueeze(t, a));
  return cat(parts, a);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t axis) {
  int64_t a = wrap_axis(axis, x.dim());
  if (x.dim() == 0) fail(NX_ERR_SHAPE, current_api(), ": cannot split a scalar");
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) fail(NX_ERR_SHAPE, current_api(), ": split sizes must be non-negative, got ", s);
    total = checked_add(total, s, "the sum of the split sizes");
  }
  if (total != x.shape()[size_t(a)])
    fail(NX_ERR_SHAPE, current_api(), ": split sizes sum to ", total, " but axis ", axis, " has size ",
         x.shape()[size_t(a)]);
  std::vector<Tensor> out;
  int64_t at = 0;
  for (int64_t s : sizes) {
    out.push_back(slice(x, a, at, at + s, 1));
    at += s;
  }
  return out;
}

}  // namespace nx
