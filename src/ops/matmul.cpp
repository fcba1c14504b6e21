// matmul with torch.matmul semantics (1-d promotion, broadcast batch dimensions) and linear.
#include "ops/autocast.hpp"
#include "ops/ops.hpp"

namespace nx {
namespace {

using Grads = std::vector<Tensor>;

// [..., r, c] broadcast to batch + [r, c], as a [B, r, c] kernel view (a copy only when the
// broadcast batch dimensions cannot be folded into one stride).
Tensor as_batched(const Tensor& x, const Shape& batch, int64_t batch_numel) {
  GradModeGuard off(false);
  Shape full = batch;
  full.push_back(x.shape()[size_t(x.dim() - 2)]);
  full.push_back(x.shape()[size_t(x.dim() - 1)]);
  Tensor e = expand(detach(x), full);
  return reshape(e, {batch_numel, full[full.size() - 2], full.back()});
}

Tensor matmul_nd(const Tensor& a, const Tensor& b) {
  const int64_t m = a.shape()[size_t(a.dim() - 2)], k = a.shape().back();
  const int64_t kb = b.shape()[size_t(b.dim() - 2)], n = b.shape().back();
  if (k != kb)
    fail(NX_ERR_SHAPE, current_api(), ": inner dimensions differ: a is ", shape_str(a.shape()), ", b is ",
         shape_str(b.shape()));
  Shape batch = broadcast_shapes(Shape(a.shape().begin(), a.shape().end() - 2), Shape(b.shape().begin(), b.shape().end() - 2));
  const int64_t nb = numel_of(batch);
  DType cd = backend(a.device()).native_half_matmul() ? a.dtype() : compute_dtype(a.dtype());
  Tensor ac = a.dtype() == cd ? a : cast(detach(a), cd), bc = b.dtype() == cd ? b : cast(detach(b), cd);
  Tensor av = as_batched(ac, batch, nb), bv = as_batched(bc, batch, nb);
  Shape out_shape = batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  Tensor out = Tensor::empty(out_shape, cd, a.device());
  if (out.numel() > 0) {  // then nb * m * n fits; an empty result may have huge other dimensions
    View ov{out.data(), {nb, m, n}, {m * n, n, 1}, cd};
    kernels(a.device()).matmul(ov, View::of(av), View::of(bv));
  }
  if (cd != a.dtype()) out = cast(out, a.dtype());
  return record1("MatmulBackward", out, {a, b}, {a, b}, [](const Grads& g, const Grads& s, const auto& needs) {
    Grads r(2);
    if (needs[0]) r[0] = sum_to(matmul_nd(g[0], transpose(s[1], -1, -2)), s[0].shape());
    if (needs[1]) r[1] = sum_to(matmul_nd(transpose(s[0], -1, -2), g[0]), s[1].shape());
    return r;
  });
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  Tensor a = a_in, b = b_in;
  autocast_low({&a, &b});
  check_same_device(a, b, "a", "b");
  check_floating(a, "a");
  if (a.dtype() != b.dtype())
    fail(NX_ERR_DTYPE, current_api(), ": a has dtype ", dtype_name(a.dtype()), " but b has ", dtype_name(b.dtype()),
         "; cast one first");
  if (a.dim() == 0 || b.dim() == 0)
    fail(NX_ERR_SHAPE, current_api(), ": both operands need at least one dimension, got ", shape_str(a.shape()),
         " and ", shape_str(b.shape()));
  if (a.dim() >= 3 && b.dim() == 2 && a.shape().back() == b.shape()[0]) {
    // [..., m, k] @ [k, n] as one [M, k] @ [k, n] product over all the rows (as torch folds it):
    // one large GEMM, and b's gradient is one [k, M] @ [M, n] product instead of a batch of
    // products summed over the batch afterwards.
    Shape out_shape(a.shape().begin(), a.shape().end() - 1);
    const int64_t rows = numel_of(out_shape);
    out_shape.push_back(b.shape()[1]);
    return reshape(matmul_nd(reshape(a, {rows, a.shape().back()}), b), out_shape);
  }
  Tensor a2 = a.dim() == 1 ? unsqueeze(a, 0) : a;
  Tensor b2 = b.dim() == 1 ? unsqueeze(b, 1) : b;
  Tensor out = matmul_nd(a2, b2);
  if (a.dim() == 1) out = squeeze(out, -2);
  if (b.dim() == 1) out = squeeze(out, -1);
  return out;
}

Tensor linear(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in) {
  Tensor x = x_in, weight = weight_in, bias = bias_in;
  autocast_low({&x, &weight, &bias});  // the bias too, so the output stays in the low dtype
  if (weight.dim() != 2)
    fail(NX_ERR_SHAPE, current_api(), ": weight must be [out_features, in_features], got ", shape_str(weight.shape()));
  if (x.dim() == 0 || x.shape().back() != weight.shape()[1])
    fail(NX_ERR_SHAPE, current_api(), ": x has shape ", shape_str(x.shape()), " but weight expects ",
         weight.shape()[1], " input features (weight is ", shape_str(weight.shape()), ")");
  if (x.dtype() != weight.dtype())
    fail(NX_ERR_DTYPE, current_api(), ": x is ", dtype_name(x.dtype()), " but weight is ", dtype_name(weight.dtype()),
         " (one floating dtype for both)");
  if (bias.defined() && (bias.dim() != 1 || bias.shape()[0] != weight.shape()[0]))
    fail(NX_ERR_SHAPE, current_api(), ": bias must be [", weight.shape()[0], "], got ", shape_str(bias.shape()));
  Tensor out;
  {
    GradModeGuard off(false);
    out = matmul(detach(x), transpose(detach(weight), 0, 1));
    if (bias.defined()) out = add(out, detach(bias));
  }
  // One node with its own VJP, so that the weight's gradient is computed in the weight's layout
  // (g^T x, [out, in] contiguous) rather than as the transposed gradient of W^T, and the bias's
  // as one sum over all rows.
  return record1("LinearBackward", out, {x, weight, bias}, {x, weight},
                 [](const Grads& g, const Grads& s, const std::vector<bool>& needs) {
    const Tensor &x = s[0], &w = s[1];
    const int64_t in = w.shape()[1], outf = w.shape()[0];
    Grads r(3);
    if (needs[0]) r[0] = matmul(g[0], w);
    if (needs[1] || needs[2]) {
      const int64_t rows = x.dim() == 1 ? 1 : numel_of(Shape(x.shape().begin(), x.shape().end() - 1));
      Tensor g2 = reshape(g[0], {rows, outf});
      if (needs[1]) r[1] = matmul(transpose(g2, 0, 1), reshape(x, {rows, in}));
      if (needs[2]) r[2] = sum(g2, {0}, false);
    }
    return r;
  });
}

}  // namespace nx
