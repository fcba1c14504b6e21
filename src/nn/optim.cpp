#include "nn/optim.hpp"

#include <algorithm>
#include <cmath>

namespace nx::nn {

Optimizer::Optimizer(std::vector<Tensor> params, double lr_) : lr(lr_), params_(std::move(params)) {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i].requires_grad() || params_[i].grad_fn())
      fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": parameter ", i, " is not a leaf tensor that requires grad");
  }
  if (!(lr_ >= 0)) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": learning rate must be >= 0, got ", lr_);
}

Tensor Optimizer::grad_of(size_t i) const {
  auto& g = params_[i].impl()->grad;
  return g ? detach(Tensor(g)) : Tensor();
}

void Optimizer::zero_grad() {
  for (auto& p : params_) p.impl()->grad.reset();
}

SGD::SGD(std::vector<Tensor> params, double lr_, double mom, bool nest, double wd)
    : Optimizer(std::move(params), lr_), momentum(mom), weight_decay(wd), nesterov(nest), buf_(params_.size()) {
  if (nesterov && momentum <= 0)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": Nesterov momentum needs momentum > 0");
}

void SGD::step() {
  GradModeGuard off(false);
  ++steps;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor g = grad_of(i);
    if (!g.defined()) continue;
    Tensor& p = params_[i];
    if (weight_decay) g = add(g, mul_scalar(p, weight_decay));
    if (momentum) {
      buf_[i] = buf_[i].defined() ? add(mul_scalar(buf_[i], momentum), g) : clone(g);
      g = nesterov ? add(g, mul_scalar(buf_[i], momentum)) : buf_[i];
    }
    copy_(p, sub(p, mul_scalar(g, lr)));
  }
}

std::map<std::string, Tensor> SGD::state() const {
  std::map<std::string, Tensor> s;
  for (size_t i = 0; i < buf_.size(); ++i)
    if (buf_[i].defined()) s["momentum." + std::to_string(i)] = buf_[i];
  return s;
}
void SGD::load_state(const std::map<std::string, Tensor>& s) {
  for (size_t i = 0; i < buf_.size(); ++i) {
    auto it = s.find("momentum." + std::to_string(i));
    buf_[i] = it == s.end() ? Tensor() : to_device(it->second, params_[i].device());
  }
}

Adam::Adam(std::vector<Tensor> params, double lr_, double b1, double b2, double e, double wd, bool dec)
    : Optimizer(std::move(params), lr_), beta1(b1), beta2(b2), eps(e), weight_decay(wd), decoupled(dec),
      m_(params_.size()), v_(params_.size()), t_(params_.size(), 0) {
  if (b1 < 0 || b1 >= 1 || b2 < 0 || b2 >= 1)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": betas must be in [0, 1), got ", b1, ", ", b2);
}

// The parameters with a gradient that can go through the multi-tensor kernel, grouped by device
// and dtype (one launch per group): a contiguous parameter whose gradient has its dtype and shape.
// A strided gradient (a tied weight's, from a transposed matmul) is copied to a contiguous one
// rather than sending every parameter down the per-op path.
std::vector<std::vector<size_t>> Adam::fusable_groups() const {
  std::vector<std::vector<size_t>> groups;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor g = grad_of(i);
    const Tensor& p = params_[i];
    if (!g.defined() || !p.is_contiguous() || g.dtype() != p.dtype() || g.shape() != p.shape() ||
        g.device() != p.device() || (m_[i].defined() && !(m_[i].is_contiguous() && v_[i].is_contiguous())))
      continue;
    auto same = [&](const std::vector<size_t>& grp) {
      return params_[grp[0]].device() == p.device() && params_[grp[0]].dtype() == p.dtype();
    };
    auto it = std::find_if(groups.begin(), groups.end(), same);
    if (it == groups.end()) groups.push_back({i});
    else it->push_back(i);
  }
  return groups;
}

void Adam::step() {
  GradModeGuard off(false);
  ++steps;
  std::vector<bool> done(params_.size(), false);
  for (const auto& idx : fusable_groups()) {
    std::vector<Tensor> ps, gs, ms, vs;
    std::vector<int64_t> ts;
    for (size_t i : idx) {
      if (t_[i] == 0 && m_[i].defined()) t_[i] = steps - 1;  // state loaded from a file without "step.<i>"
      if (!m_[i].defined()) { m_[i] = zeros_like(params_[i]); v_[i] = zeros_like(params_[i]); }
      Tensor g = grad_of(i);
      ps.push_back(params_[i]);
      gs.push_back(g.is_contiguous() ? g : contiguous(g));
      ms.push_back(m_[i]);
      vs.push_back(v_[i]);
      ts.push_back(++t_[i]);
      done[i] = true;
    }
    adam_step_multi(ps, gs, ms, vs, ts, AdamParams{lr, beta1, beta2, eps, weight_decay, decoupled});
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor g = grad_of(i);
    if (!g.defined() || done[i]) continue;
    if (t_[i] == 0 && m_[i].defined()) t_[i] = steps - 1;  // state loaded from a file without "step.<i>"
    const int64_t t = ++t_[i];
    const double bc1 = 1 - std::pow(beta1, double(t)), bc2 = 1 - std::pow(beta2, double(t));
    Tensor& p = params_[i];
    Tensor base = p;
    if (weight_decay && decoupled) base = mul_scalar(p, 1 - lr * weight_decay);
    else if (weight_decay) g = add(g, mul_scalar(p, weight_decay));
    if (!m_[i].defined()) { m_[i] = zeros_like(p); v_[i] = zeros_like(p); }
    m_[i] = add(mul_scalar(m_[i], beta1), mul_scalar(g, 1 - beta1));
    v_[i] = add(mul_scalar(v_[i], beta2), mul_scalar(square(g), 1 - beta2));
    // p -= lr * (m / bc1) / (sqrt(v / bc2) + eps), in torch's operation order
    Tensor denom = add_scalar(mul_scalar(unary(UnaryOp::Sqrt, v_[i]), 1.0 / std::sqrt(bc2)), eps);
    copy_(p, sub(base, mul_scalar(div(m_[i], denom), lr / bc1)));
  }
}

std::map<std::string, Tensor> Adam::state() const {
  std::map<std::string, Tensor> s;
  for (size_t i = 0; i < m_.size(); ++i) {
    if (!m_[i].defined()) continue;
    s["m." + std::to_string(i)] = m_[i];
    s["v." + std::to_string(i)] = v_[i];
    s["step." + std::to_string(i)] = from_data(&t_[i], {}, DType::I64, Device{});
  }
  return s;
}
void Adam::load_state(const std::map<std::string, Tensor>& s) {
  for (size_t i = 0; i < m_.size(); ++i) {
    auto m = s.find("m." + std::to_string(i)), v = s.find("v." + std::to_string(i));
    // copies: the fused step updates the moments in place, which must not write into the caller's tensors
    m_[i] = m == s.end() ? Tensor() : clone(to_device(m->second, params_[i].device()));
    v_[i] = v == s.end() ? Tensor() : clone(to_device(v->second, params_[i].device()));
    auto t = s.find("step." + std::to_string(i));
    t_[i] = 0;
    if (t != s.end()) copy_to_host(cast(t->second, DType::I64), &t_[i], sizeof(int64_t));
  }
}

Tensor clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  GradModeGuard off(false);
  // The norm and the clip factor stay on the gradients' device, and every gradient is multiplied
  // by min(1, max_norm / (norm + 1e-6)) unconditionally, as torch.nn.utils.clip_grad_norm_ does:
  // no value comes back to the host, so a training step does not wait here. Squares are summed in
  // f32 (f64 for f64 gradients); f16/bf16 would overflow or underflow when squared.
  Tensor total_sq;
  for (const auto& p : params) {
    if (!p.impl()->grad) continue;
    Tensor g(p.impl()->grad);
    Tensor sq = cast(sum(square(cast_if_needed(g, compute_dtype(g.dtype()))), {}, false), DType::F64);
    if (total_sq.defined() && sq.device() != total_sq.device()) sq = to_device(sq, total_sq.device());
    total_sq = total_sq.defined() ? add(total_sq, sq) : sq;
  }
  if (!total_sq.defined()) return zeros({}, DType::F64, Device{});
  Tensor total = unary(UnaryOp::Sqrt, total_sq);
  Tensor coef = clamp(div(full_like(total, max_norm), add_scalar(total, 1e-6)), 0.0, 1.0);
  for (const auto& p : params) {
    if (!p.impl()->grad) continue;
    Tensor g(p.impl()->grad);  // a new gradient, not in place: gradients may share storage
    Tensor c = cast(coef.device() == g.device() ? coef : to_device(coef, g.device()), g.dtype());
    p.impl()->grad = mul(g, c).impl_ptr();
  }
  return total;
}

double lr_step(double base, int64_t step, int64_t step_size, double gamma) {
  if (step_size <= 0) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": step_size must be positive");
  return base * std::pow(gamma, double(step / step_size));
}

double lr_cosine_warmup(double base, int64_t step, int64_t warmup, int64_t total, double min_lr) {
  if (step < warmup) return base * double(step + 1) / double(warmup);
  if (step >= total) return min_lr;
  const double progress = double(step - warmup) / double(std::max<int64_t>(1, total - warmup));
  return min_lr + 0.5 * (base - min_lr) * (1 + std::cos(M_PI * progress));
}

}  // namespace nx::nn
