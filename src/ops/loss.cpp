// Losses, composed from differentiable ops (so their gradients, and gradients of gradients,
// come from the ops' VJPs).
#include "ops/autocast.hpp"
#include "ops/ops.hpp"

namespace nx {
namespace {

Tensor reduce_loss(const Tensor& per_item, Reduction r) {
  switch (r) {
    case Reduction::Mean: return mean(per_item, {}, false);
    case Reduction::Sum: return sum(per_item, {}, false);
    case Reduction::None: return per_item;
  }
  fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": unknown reduction ", int(r));
}

void check_reduction(Reduction r) {
  if (r != Reduction::Mean && r != Reduction::Sum && r != Reduction::None)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": reduction must be NX_REDUCTION_MEAN, _SUM or _NONE, got ", int(r));
}

// Per-row loss -(1-eps) lp[target] - eps mean(lp), zero where target == ignore_index; reduced
// with the mean over the rows that count (PyTorch's rule).
Tensor classification_loss(const Tensor& lp, const Tensor& target, int64_t ignore_index, double eps,
                           Reduction reduction) {
  check_reduction(reduction);
  check_floating(lp, "input");
  check_integer(target, "target");
  if (lp.dim() != 2 || target.dim() != 1 || target.shape()[0] != lp.shape()[0])
    fail(NX_ERR_SHAPE, current_api(), ": expected input [N, C] and target [N], got ", shape_str(lp.shape()), " and ",
         shape_str(target.shape()));
  if (!(eps >= 0 && eps <= 1))  // NaN too
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": label_smoothing must be in [0, 1], got ", eps);
  Tensor t64 = cast_if_needed(detach(target), DType::I64);
  Tensor keep = binary(BinaryOp::Ne, t64, full_like(t64, double(ignore_index)));
  Tensor safe = where(keep, t64, zeros_like(t64));  // ignored rows gather class 0, then get masked
  Tensor picked = squeeze(gather(lp, 1, unsqueeze(safe, 1)), 1);
  Tensor per = mul_scalar(picked, -(1.0 - eps));
  if (eps > 0) per = sub(per, mul_scalar(mean(lp, {1}, false), eps));
  per = where(keep, per, zeros_like(per));
  if (reduction == Reduction::Mean) {
    double count = item(sum(keep, {}, false));
    return mul_scalar(sum(per, {}, false), 1.0 / count);  // count 0 gives NaN, like PyTorch
  }
  return reduce_loss(per, reduction);
}

}  // namespace

Tensor cross_entropy(const Tensor& logits_in, const Tensor& target, int64_t ignore_index, double label_smoothing,
                     Reduction reduction) {
  Tensor logits = logits_in;
  check_floating(logits, "logits");
  if (logits.dim() != 2)
    fail(NX_ERR_SHAPE, current_api(), ": logits must be [N, C], got ", shape_str(logits.shape()));
  // Without label smoothing: the fused kernel (no [N, C] log-probabilities kept; under autocast it
  // reads half logits as they are and returns an f32 loss).
  if (label_smoothing == 0.0 && is_floating(logits.dtype()) && (target.dtype() == DType::I32 || target.dtype() == DType::I64)) {
    check_reduction(reduction);
    return softmax_cross_entropy(logits, target, ignore_index, reduction);
  }
  autocast_f32({&logits});
  return classification_loss(log_softmax(logits, 1), target, ignore_index, label_smoothing, reduction);
}

Tensor nll_loss(const Tensor& log_probs_in, const Tensor& target, int64_t ignore_index, Reduction reduction) {
  Tensor log_probs = log_probs_in;
  autocast_f32({&log_probs});
  return classification_loss(log_probs, target, ignore_index, 0.0, reduction);
}

Tensor mse_loss(const Tensor& input_in, const Tensor& target_in, Reduction reduction) {
  Tensor input = input_in, target = target_in;
  autocast_f32({&input, &target});
  check_reduction(reduction);
  check_floating(input, "input");
  if (input.shape() != target.shape())
    fail(NX_ERR_SHAPE, current_api(), ": input ", shape_str(input.shape()), " and target ", shape_str(target.shape()),
         " must have the same shape");
  return reduce_loss(square(sub(input, target)), reduction);
}

Tensor bce_with_logits(const Tensor& logits_in, const Tensor& target_in, Reduction reduction) {
  Tensor logits = logits_in, target = target_in;
  autocast_f32({&logits, &target});
  check_reduction(reduction);
  check_floating(logits, "logits");
  if (logits.shape() != target.shape())
    fail(NX_ERR_SHAPE, current_api(), ": logits ", shape_str(logits.shape()), " and target ", shape_str(target.shape()),
         " must have the same shape");
  // softplus(x) - x t == max(x,0) - x t + log(1 + e^-|x|), stable for any x
  return reduce_loss(sub(unary(UnaryOp::Softplus, logits), mul(logits, target)), reduction);
}

}  // namespace nx
