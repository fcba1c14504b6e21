// Fused ops: RMSNorm / LayerNorm (optionally after a residual add), softmax cross-entropy, and
// the multi-tensor Adam(W) step. Each forward is one kernel per row that saves only per-row
// statistics (rstd, mean, log-sum-exp); each backward is one kernel that recomputes what it needs
// from the saved inputs. Under create_graph the VJPs use the same formulas written with ops
// instead, so gradients of these ops stay differentiable (gradgradcheck covers them).
#include <cmath>

#include "ops/autocast.hpp"
#include "ops/ops.hpp"

namespace nx {
namespace {

using Grads = std::vector<Tensor>;

DType acc_dtype(DType d) { return d == DType::F64 ? DType::F64 : DType::F32; }

// A detached contiguous copy in dtype dt (no copy when t already is one).
Tensor prep(const Tensor& t, DType dt) {
  GradModeGuard off(false);
  return contiguous(cast_if_needed(detach(t), dt));
}
View view_or_null(const Tensor& t) { return t.defined() ? View::of(t) : View{nullptr, {}, {}, DType::F32}; }

void check_vector(const Tensor& x, const Tensor& t, const char* what, int64_t cols) {
  if (!t.defined()) return;
  check_same_device(x, t, "x", what);
  check_floating(t, what);
  if (t.shape() != Shape{cols})
    fail(NX_ERR_SHAPE, current_api(), ": ", what, " must be [", cols, "] (x's last dimension), got ", shape_str(t.shape()));
}

// The VJP of norm(s) with s = x (+ residual), written with ops (differentiable again).
Grads norm_vjp_ops(const Tensor& s, const Tensor& w, const Tensor& gy, double eps, bool rms, Tensor* dw, Tensor* db) {
  Tensor xc = rms ? s : sub(s, mean(s, {-1}, true));
  Tensor rstd = unary(UnaryOp::Rsqrt, add_scalar(mean(square(xc), {-1}, true), eps));
  Tensor xhat = mul(xc, rstd);
  Tensor g = w.defined() ? mul(gy, w) : gy;
  Tensor inner = sub(g, mul(xhat, mean(mul(g, xhat), {-1}, true)));
  if (!rms) inner = sub(inner, mean(g, {-1}, true));
  if (dw) *dw = sum_to(mul(gy, xhat), w.shape());
  if (db) *db = sum_to(gy, {s.shape().back()});
  return {mul(rstd, inner)};
}

}  // namespace

std::vector<Tensor> fused_norm(const Tensor& x_in, const Tensor& residual_in, const Tensor& weight_in,
                               const Tensor& bias_in, double eps, bool rms) {
  Tensor x = x_in, residual = residual_in, weight = weight_in, bias = bias_in;
  autocast_f32({&x, &residual, &weight, &bias});
  check_floating(x, "x");
  if (x.dim() < 1) fail(NX_ERR_SHAPE, current_api(), ": x must have at least one dimension, got a scalar");
  if (!(eps >= 0) || !std::isfinite(eps)) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": eps must be finite and >= 0, got ", eps);
  const int64_t cols = x.shape().back();
  check_vector(x, weight, "weight", cols);
  check_vector(x, bias, "bias", cols);
  if (residual.defined()) {
    check_same_device(x, residual, "x", "residual");
    check_floating(residual, "residual");
    if (residual.shape() != x.shape())
      fail(NX_ERR_SHAPE, current_api(), ": residual ", shape_str(residual.shape()), " must have x's shape ",
           shape_str(x.shape()));
  }
  const DType dt = x.dtype(), ad = acc_dtype(dt);
  const NormParams p{cols ? x.numel() / cols : numel_of(Shape(x.shape().begin(), x.shape().end() - 1)), cols, eps, rms};
  Tensor xc = prep(x, dt), rc = residual.defined() ? prep(residual, dt) : Tensor();
  Tensor wc = weight.defined() ? prep(weight, dt) : Tensor(), bc = bias.defined() ? prep(bias, dt) : Tensor();
  Tensor y = Tensor::empty(x.shape(), dt, x.device());
  Tensor s = residual.defined() ? Tensor::empty(x.shape(), dt, x.device()) : Tensor();
  Tensor mean_t = rms ? Tensor() : Tensor::empty({p.rows}, ad, x.device());
  Tensor rstd = Tensor::empty({p.rows}, ad, x.device());
  if (p.rows && cols)
    kernels(x.device()).norm_forward(p, View::of(y), view_or_null(s), View::of(xc), view_or_null(rc), view_or_null(wc),
                                     view_or_null(bc), view_or_null(mean_t), View::of(rstd));
  std::vector<Tensor> outs{y};
  if (s.defined()) outs.push_back(s);
  const char* name = rms ? (s.defined() ? "AddRMSNormBackward" : "RMSNormBackward")
                         : (s.defined() ? "AddLayerNormBackward" : "LayerNormBackward");
  // Saved: the inputs themselves (for the differentiable path and to recompute x + residual),
  // and the statistics. Never the outputs (a reference cycle, see docs/decisions.md).
  return record(name, outs, {x, residual, weight, bias}, {x, residual, weight, bias, mean_t, rstd},
                [p](const Grads& g, const Grads& sv, const std::vector<bool>& needs) {
    const Tensor &x = sv[0], &r = sv[1], &w = sv[2], &b = sv[3];
    const DType dt = x.dtype();
    Tensor dx, dw, db;
    if (grad_enabled()) {  // create_graph: the same gradient, written with ops
      Tensor s = r.defined() ? add(x, cast(r, dt)) : x;
      Tensor wd = w.defined() ? cast(w, dt) : Tensor();
      dx = norm_vjp_ops(s, wd, g[0], p.eps, p.rms, w.defined() && needs[2] ? &dw : nullptr,
                        b.defined() && needs[3] ? &db : nullptr)[0];
    } else {
      Tensor s = r.defined() ? add(x, cast(r, dt)) : x;  // recomputed: cheaper than saving it
      Tensor sc = prep(s, dt), gy = prep(g[0], dt), wc = w.defined() ? prep(w, dt) : Tensor();
      const DType ad = acc_dtype(dt);
      dx = Tensor::empty(x.shape(), dt, x.device());
      if (w.defined() && needs[2]) dw = Tensor::empty({p.cols}, ad, x.device());
      if (b.defined() && needs[3]) db = Tensor::empty({p.cols}, ad, x.device());
      if (p.rows && p.cols)
        kernels(x.device()).norm_backward(p, View::of(dx), view_or_null(dw), view_or_null(db), View::of(gy), View::of(sc),
                                          view_or_null(wc), view_or_null(sv[4]), View::of(sv[5]));
      else {
        dx = zeros_like(dx);
        if (dw.defined()) dw = zeros_like(dw);
        if (db.defined()) db = zeros_like(db);
      }
    }
    if (r.defined()) dx = add(dx, cast(g[1], dt));  // the sum output's own gradient
    Grads out(4);
    if (needs[0]) out[0] = dx;
    if (needs[1]) out[1] = cast(dx, r.dtype());
    if (dw.defined()) out[2] = cast(dw, w.dtype());
    if (db.defined()) out[3] = cast(db, b.dtype());
    return out;
  });
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  return fused_norm(x, Tensor(), weight, Tensor(), eps, true)[0];
}
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  return fused_norm(x, Tensor(), weight, bias, eps, false)[0];
}

Tensor softmax_cross_entropy(const Tensor& logits_in, const Tensor& target, int64_t ignore_index, Reduction reduction) {
  const Tensor& logits = logits_in;
  // Under autocast the loss is f32 (PyTorch's policy), but half logits are not copied to f32
  // first: the kernels widen them in registers and compute in f32 either way, so the result is the
  // same within rounding of the sums' order, and the [N, V] f32 copy and the f32 gradient (1.6 GB
  // each for GPT-2 at batch 8) are never made. The gradient comes back in the logits' dtype, as the
  // cast's backward would round it.
  const bool f32_loss = autocast_dtype(logits.device()).has_value() && is_half(logits.dtype());
  check_floating(logits, "logits");
  check_integer(target, "target");
  check_same_device(logits, target, "logits", "target");
  if (reduction != Reduction::Mean && reduction != Reduction::Sum && reduction != Reduction::None)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": reduction must be NX_REDUCTION_MEAN, _SUM or _NONE, got ", int(reduction));
  if (logits.dim() != 2 || target.dim() != 1 || target.shape()[0] != logits.shape()[0])
    fail(NX_ERR_SHAPE, current_api(), ": expected logits [N, V] and target [N], got ", shape_str(logits.shape()), " and ",
         shape_str(target.shape()));
  const int64_t rows = logits.shape()[0], cols = logits.shape()[1];
  if (cols == 0 && rows > 0) fail(NX_ERR_SHAPE, current_api(), ": logits have no classes (shape ", shape_str(logits.shape()), ")");
  const DType dt = logits.dtype(), ad = acc_dtype(dt);
  Tensor lc = prep(logits, dt), tc = prep(target, DType::I64);
  Tensor per = Tensor::empty({rows}, ad, logits.device()), lse = Tensor::empty({rows}, ad, logits.device());
  if (rows) kernels(logits.device()).xent_forward(View::of(per), View::of(lse), View::of(lc), View::of(tc), rows, cols, ignore_index);
  Tensor loss;
  {
    GradModeGuard off(false);
    Tensor keep = cast(binary(BinaryOp::Ne, tc, full_like(tc, double(ignore_index))), ad);
    if (reduction == Reduction::Mean) loss = div(sum(per, {}, false), sum(keep, {}, false));  // 0/0 = NaN, as torch
    else if (reduction == Reduction::Sum) loss = sum(per, {}, false);
    else loss = per;
    loss = cast(loss, f32_loss ? DType::F32 : dt);
  }
  return record1("SoftmaxCrossEntropyBackward", loss, {logits, target}, {logits, tc, lse},
                 [ignore_index, reduction](const Grads& g, const Grads& sv, const std::vector<bool>& needs) {
    const Tensor &x = sv[0], &t = sv[1];
    const DType dt = x.dtype(), ad = acc_dtype(dt);
    const int64_t rows = x.shape()[0];
    // per-row scale of (softmax - onehot): the loss's gradient, 1/count for the mean, 0 if ignored
    Tensor keep = cast(binary(BinaryOp::Ne, t, full_like(t, double(ignore_index))), ad);
    Tensor gr = cast(g[0], ad);
    Tensor scale = reduction == Reduction::None ? mul(gr, keep) : mul(expand(gr, {rows}), keep);
    if (reduction == Reduction::Mean) scale = div(scale, sum(keep, {}, false));
    Grads out(2);
    if (!needs[0]) return out;
    if (grad_enabled()) {  // create_graph: written with ops
      Tensor onehot = one_hot(where(binary(BinaryOp::Ne, t, full_like(t, double(ignore_index))), t, zeros_like(t)),
                              x.shape()[1], dt);
      out[0] = mul(sub(softmax(x, 1), onehot), unsqueeze(cast(scale, dt), 1));
      return out;
    }
    Tensor xc = prep(x, dt), sc = prep(scale, ad);
    Tensor dx = Tensor::empty(x.shape(), dt, x.device());
    if (dx.numel())
      kernels(x.device()).xent_backward(View::of(dx), View::of(xc), View::of(t), View::of(sv[2]), View::of(sc), rows,
                                        x.shape()[1], ignore_index);
    out[0] = dx;
    return out;
  });
}

Tensor swiglu(const Tensor& gate, const Tensor& up) { return binary(BinaryOp::SiluMul, gate, up); }

namespace {
// ts as slots of one multi-tensor kernel, after checking what its contract needs.
std::vector<TensorSlot> multi_slots(const std::vector<Tensor>& ts) {
  std::vector<TensorSlot> slots;
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    if (t.device() != ts[0].device() || t.dtype() != ts[0].dtype() || !t.is_contiguous() || !is_floating(t.dtype()))
      fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": tensor ", i, " of a multi-tensor call is ", dtype_name(t.dtype()),
           " on ", device_str(t.device()), t.is_contiguous() ? "" : " (not contiguous)", "; tensor 0 is ",
           dtype_name(ts[0].dtype()), " on ", device_str(ts[0].device()), " (all floating, contiguous, alike)");
    if (CaptureHooks* hooks = capture_hooks()) hooks->observe(t);  // raw pointers: the plan must see the tensors
    slots.push_back({t.data(), t.numel()});
  }
  return slots;
}
}  // namespace

Tensor sum_of_squares_multi(const std::vector<Tensor>& ts) {
  if (ts.empty()) return zeros({}, DType::F64, Device{});
  std::vector<TensorSlot> slots = multi_slots(ts);
  Tensor out = Tensor::empty({}, DType::F64, ts[0].device());
  kernels(ts[0].device()).sumsq_multi(slots, ts[0].dtype(), View::of(out));
  return out;
}

void scale_multi_(const std::vector<Tensor>& ts, const Tensor& factor) {
  if (ts.empty()) return;
  std::vector<TensorSlot> slots = multi_slots(ts);
  if (factor.dtype() != DType::F64 || factor.numel() != 1 || factor.device() != ts[0].device())
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": the factor must be one f64 element on ", device_str(ts[0].device()));
  kernels(ts[0].device()).scale_multi(slots, ts[0].dtype(), View::of(contiguous(factor)));
  for (const Tensor& t : ts) t.impl()->storage->version++;
}

void adam_step_multi(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const std::vector<Tensor>& m,
                     const std::vector<Tensor>& v, const std::vector<int64_t>& steps, const AdamParams& p) {
  const size_t n = params.size();
  if (grads.size() != n || m.size() != n || v.size() != n || steps.size() != n)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": expected as many grads, exp_avgs, exp_avg_sqs and steps as params (",
         n, "), got ", grads.size(), ", ", m.size(), ", ", v.size(), ", ", steps.size());
  if (!(p.lr >= 0) || !(p.beta1 >= 0 && p.beta1 < 1) || !(p.beta2 >= 0 && p.beta2 < 1) || !(p.eps >= 0) ||
      !(p.weight_decay >= 0))
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": need lr >= 0, betas in [0, 1), eps >= 0, weight_decay >= 0; got lr ",
         p.lr, ", betas ", p.beta1, ", ", p.beta2, ", eps ", p.eps, ", weight_decay ", p.weight_decay);
  if (n == 0) return;
  const Tensor& p0 = params[0];
  check_floating(p0, "params[0]");
  std::vector<AdamSlot> slots;
  for (size_t i = 0; i < n; ++i) {
    const Tensor* ts[4] = {&params[i], &grads[i], &m[i], &v[i]};
    const char* names[4] = {"param", "grad", "exp_avg", "exp_avg_sq"};
    for (int k = 0; k < 4; ++k) {
      const Tensor& t = *ts[k];
      if (t.device() != p0.device())
        fail(NX_ERR_DEVICE, current_api(), ": ", names[k], " ", i, " is on ", device_str(t.device()), ", params[0] on ",
             device_str(p0.device()));
      if (t.dtype() != p0.dtype())
        fail(NX_ERR_DTYPE, current_api(), ": ", names[k], " ", i, " is ", dtype_name(t.dtype()), ", params[0] is ",
             dtype_name(p0.dtype()), " (all tensors of one call share a dtype)");
      if (t.shape() != params[i].shape())
        fail(NX_ERR_SHAPE, current_api(), ": ", names[k], " ", i, " is ", shape_str(t.shape()), ", its param ",
             shape_str(params[i].shape()));
      if (!t.is_contiguous())
        fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": ", names[k], " ", i, " is not contiguous (make it contiguous)");
      if (k != 1 && grad_enabled() && t.requires_grad())
        fail(NX_ERR_STATE, current_api(), ": ", names[k], " ", i,
             " requires grad and grad mode is on; update parameters under no-grad");
    }
    if (steps[i] < 1) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": step of param ", i, " must be >= 1, got ", steps[i]);
    const double t = double(steps[i]);
    slots.push_back({params[i].data(), grads[i].data(), m[i].data(), v[i].data(), params[i].numel(),
                     1 - std::pow(p.beta1, t), 1 - std::pow(p.beta2, t)});
  }
  if (CaptureHooks* hooks = capture_hooks())  // the slots hold raw pointers: the plan must see the tensors
    for (const auto* list : {&params, &grads, &m, &v})
      for (const Tensor& t : *list) hooks->observe(t);
  kernels(p0.device()).adam_multi(slots, p0.dtype(), p);
  for (size_t i = 0; i < n; ++i)
    for (const Tensor* t : {&params[i], &m[i], &v[i]}) t->impl()->storage->version++;
}

}  // namespace nx
