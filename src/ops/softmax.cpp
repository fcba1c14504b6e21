// softmax and log_softmax along one axis: the axis is moved innermost, rows go to the kernel.
// The VJPs recompute the forward from the saved input (no saved output, so no reference cycle
// and exact higher-order gradients).
#include "ops/autocast.hpp"
#include "ops/ops.hpp"

namespace nx {
namespace {

using Grads = std::vector<Tensor>;

Tensor softmax_raw(const Tensor& x, int64_t axis, bool log) {
  check_floating(x, "x");
  const int64_t nd = x.dim();
  int64_t a = wrap_axis(axis, nd);
  GradModeGuard off(false);
  // f16/bf16 rows go to the kernel as stored: it computes in f32 registers and rounds each
  // output once, so there is no f32 copy of the input or the output.
  Tensor src = detach(x);
  Tensor moved = nd ? transpose(src, a, -1) : src;
  Tensor rows = contiguous(moved);
  Tensor out = Tensor::empty(rows.shape(), x.dtype(), x.device());
  int64_t cols = nd ? rows.shape().back() : 1;
  if (out.numel())
    kernels(x.device()).softmax_rows(View::of(out), View::of(rows), out.numel() / cols, cols, log);
  return nd ? contiguous(transpose(out, a, -1)) : out;
}

}  // namespace

Tensor softmax(const Tensor& x_in, int64_t axis) {
  Tensor x = x_in;
  autocast_f32({&x});
  Tensor out = softmax_raw(x, axis, false);
  return record1("SoftmaxBackward", out, {x}, {x}, [axis](const Grads& g, const Grads& s, const auto&) {
    Tensor y = softmax(s[0], axis);
    Tensor dot = sum(mul(g[0], y), {axis}, true);
    return Grads{mul(y, sub(g[0], dot))};
  });
}

Tensor log_softmax(const Tensor& x_in, int64_t axis) {
  Tensor x = x_in;
  autocast_f32({&x});
  Tensor out = softmax_raw(x, axis, true);
  return record1("LogSoftmaxBackward", out, {x}, {x}, [axis](const Grads& g, const Grads& s, const auto&) {
    Tensor p = softmax(s[0], axis);
    return Grads{sub(g[0], mul(p, sum(g[0], {axis}, true)))};
  });
}

}  // namespace nx
