// Indexing: index_select / index_add (each the other's VJP), gather / scatter_add (likewise),
// embedding (index_select on rows) and one_hot.
#include "core/int_math.hpp"
#include "ops/ops.hpp"

namespace nx {

// Indices are validated before any kernel runs, so kernels never see bad ones.
void check_index_range(const Tensor& index, int64_t n, const char* what) {
  check_integer(index, "index");
  if (index.numel() == 0) return;
  Storage& storage = *index.impl()->storage;
  int64_t lo = 0, hi = 0;
  CaptureHooks* hooks = capture_hooks();  // a replay must check the values it will hold then
  if (storage.value_range(&lo, &hi) && lo >= 0 && hi < n) {  // known bounds: no device read
    if (hooks) hooks->index_range_trusted(index, n);
    return;
  }
  if (!index.device().is_cpu()) {
    // On a GPU: the index's range (two reductions, two scalars copied back) instead of the whole
    // index copied to the host and scanned; only an index out of range pays for the scan below,
    // which names the first bad position. An index covering its whole storage keeps the bounds
    // found, so the backward's index op on the same ids does not read them again.
    const double mn = item(amin(index, {}, false)), mx = item(amax(index, {}, false));
    if (mn >= 0 && mx < double(n)) {
      if (index.offset() == 0 && index.is_contiguous() && index.nbytes() == storage.nbytes)
        storage.set_value_range(int64_t(mn), int64_t(mx));
      if (hooks) hooks->index_range_trusted(index, n);
      return;
    }
  }
  Tensor host = contiguous(detach(to_device(index, Device{})));
  const int64_t count = host.numel();
  for (int64_t i = 0; i < count; ++i) {
    const int64_t v = index_at(host, i);
    if (v < 0 || v >= n)
      fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": index ", v, " at position ", i, " is out of range for ",
           what, " of size ", n);
  }
  if (hooks) hooks->index_range_trusted(index, n);
}

namespace {

using Grads = std::vector<Tensor>;

struct Split3 { int64_t outer = 1, n = 1, inner = 1; };
// The products fit when s has no zero dimension (they divide its element count); an empty s may
// have huge other dimensions, and no kernel runs over it: all zero then.
Split3 around(const Shape& s, int64_t axis) {
  Split3 r;
  if (numel_of(s) == 0) return Split3{0, 0, 0};
  for (int64_t d = 0; d < int64_t(s.size()); ++d) (d < axis ? r.outer : d == axis ? r.n : r.inner) *= s[size_t(d)];
  return r;
}

}  // namespace

Tensor index_select(const Tensor& x, int64_t axis, const Tensor& index) {
  check_same_device(x, index, "x", "index");
  if (index.dim() != 1)
    fail(NX_ERR_SHAPE, current_api(), ": index must be 1-d, got shape ", shape_str(index.shape()));
  if (x.dim() == 0) fail(NX_ERR_SHAPE, current_api(), ": cannot index a scalar");
  int64_t a = wrap_axis(axis, x.dim());
  check_index_range(index, x.shape()[size_t(a)], "axis");
  Tensor src = contiguous(detach(x)), idx = contiguous(detach(index));
  Shape shape = x.shape();
  shape[size_t(a)] = index.numel();
  Tensor out = Tensor::empty(shape, x.dtype(), x.device());
  Split3 s = around(x.shape(), a);
  if (out.numel()) kernels(x.device()).index_select(View::of(out), View::of(src), View::of(idx), s.outer, s.n, s.inner);
  if (!is_floating(x.dtype())) return out;
  return record1("IndexSelectBackward", out, {x, index}, {index}, [a, xs = x.shape()](const Grads& g, const Grads& s, const auto&) {
    return Grads{index_add(zeros(xs, g[0].dtype(), g[0].device()), a, s[0], g[0]), Tensor()};
  });
}

Tensor index_add(const Tensor& base, int64_t axis, const Tensor& index, const Tensor& src) {
  check_same_device(base, src, "base", "src");
  if (base.dim() == 0) fail(NX_ERR_SHAPE, current_api(), ": cannot index a scalar");
  int64_t a = wrap_axis(axis, base.dim());
  check_index_range(index, base.shape()[size_t(a)], "axis");
  Shape expect = base.shape();
  expect[size_t(a)] = index.numel();
  if (src.shape() != expect || src.dtype() != base.dtype())
    fail(NX_ERR_SHAPE, current_api(), ": src must have shape ", shape_str(expect), " and base's dtype, got ",
         shape_str(src.shape()));
  Tensor out = clone(detach(base)), s = contiguous(detach(src)), idx = contiguous(detach(index));
  Split3 sp = around(base.shape(), a);
  if (s.numel()) kernels(base.device()).index_add(View::of(out), View::of(s), View::of(idx), sp.outer, sp.n, sp.inner);
  return record1("IndexAddBackward", out, {base, index, src}, {index}, [a](const Grads& g, const Grads& s, const auto& needs) {
    Grads r(3);
    if (needs[0]) r[0] = g[0];
    if (needs[2]) r[2] = index_select(g[0], a, s[0]);
    return r;
  });
}

Tensor gather(const Tensor& x, int64_t axis, const Tensor& index) {
  check_same_device(x, index, "x", "index");
  if (x.dim() == 0) fail(NX_ERR_SHAPE, current_api(), ": cannot gather from a scalar (found by tests/fuzz/fuzz_capi)");
  int64_t a = wrap_axis(axis, x.dim());
  if (index.dim() != x.dim())
    fail(NX_ERR_SHAPE, current_api(), ": index must have the rank of x (", x.dim(), "), got shape ", shape_str(index.shape()));
  for (int64_t d = 0; d < x.dim(); ++d)
    if (d != a && index.shape()[size_t(d)] > x.shape()[size_t(d)])
      fail(NX_ERR_SHAPE, current_api(), ": index shape ", shape_str(index.shape()), " exceeds x's shape ",
           shape_str(x.shape()), " at axis ", d);
  check_index_range(index, x.shape()[size_t(a)], "axis");
  Tensor src = contiguous(detach(x)), idx = contiguous(detach(index));
  // Dimensions other than axis may be smaller in index: gather from the leading corner of x.
  Tensor out = Tensor::empty(index.shape(), x.dtype(), x.device());
  View sv = View::of(src);
  if (out.numel()) kernels(x.device()).gather(View::of(out), sv, View::of(idx), a);
  if (!is_floating(x.dtype())) return out;
  return record1("GatherBackward", out, {x, index}, {index}, [a, xs = x.shape()](const Grads& g, const Grads& s, const auto&) {
    return Grads{scatter_add(zeros(xs, g[0].dtype(), g[0].device()), a, s[0], g[0]), Tensor()};
  });
}

Tensor scatter_add(const Tensor& base, int64_t axis, const Tensor& index, const Tensor& src) {
  check_same_device(base, src, "base", "src");
  if (base.dim() == 0) fail(NX_ERR_SHAPE, current_api(), ": cannot scatter into a scalar");
  int64_t a = wrap_axis(axis, base.dim());
  if (src.shape() != index.shape() || src.dtype() != base.dtype())
    fail(NX_ERR_SHAPE, current_api(), ": src must have index's shape ", shape_str(index.shape()), " and base's dtype");
  check_index_range(index, base.shape()[size_t(a)], "axis");
  Tensor out = clone(detach(base)), s = contiguous(detach(src)), idx = contiguous(detach(index));
  if (s.numel()) kernels(base.device()).scatter_add(View::of(out), View::of(s), View::of(idx), a);
  return record1("ScatterAddBackward", out, {base, index, src}, {index}, [a](const Grads& g, const Grads& s, const auto& needs) {
    Grads r(3);
    if (needs[0]) r[0] = g[0];
    if (needs[2]) r[2] = gather(g[0], a, s[0]);
    return r;
  });
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  if (weight.dim() != 2)
    fail(NX_ERR_SHAPE, current_api(), ": weight must be [num_embeddings, dim], got ", shape_str(weight.shape()));
  check_integer(indices, "indices");
  Tensor flat = reshape(detach(indices), {indices.numel()});
  Tensor rows = index_select(weight, 0, flat);
  Shape shape = indices.shape();
  shape.push_back(weight.shape()[1]);
  return reshape(rows, shape);
}

Tensor one_hot(const Tensor& indices, int64_t num_classes, DType dtype) {
  if (num_classes <= 0)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": num_classes must be positive, got ", num_classes);
  // The result's element count, before a num_classes-long arange is made for nothing
  checked_mul(indices.numel(), num_classes, "the one-hot element count");
  check_index_range(indices, num_classes, "num_classes");
  Tensor classes = arange(0, double(num_classes), 1, DType::I64, indices.device());
  Tensor eq = binary(BinaryOp::Eq, unsqueeze(detach(indices), -1), classes);
  return cast(eq, dtype);
}

}  // namespace nx
