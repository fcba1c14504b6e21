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
  View ov{out.data(), {nb, m, n}, {m * n, n, 1}, cd};
  if (nb * m * n > 0) kernels(a.device()).matmul(ov, View::of(av), View::of(bv));
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
  Tensor out = matmul(x, transpose(weight, 0, 1));
  if (!bias.defined()) return out;
  if (bias.dim() != 1 || bias.shape()[0] != weight.shape()[0])
    fail(NX_ERR_SHAPE, current_api(), ": bias must be [", weight.shape()[0], "], got ", shape_str(bias.shape()));
  return add(out, bias);
}

}  // namespace nx
