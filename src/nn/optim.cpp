#include "nn/optim.hpp"

#include <algorithm>
#include <cmath>
#include <set>

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

void Optimizer::check_state_names(const std::map<std::string, Tensor>& state, const std::vector<std::string>& prefixes,
                                  const std::string& source) const {
  if (!state.count("step")) fail(NX_ERR_IO, current_api(), ": ", source, " has no step count \"step\"");
  for (const auto& [name, value] : state) {
    if (name == "step") continue;
    const size_t dot = name.rfind('.');
    const std::string prefix = dot == std::string::npos ? name : name.substr(0, dot);
    const std::string index = dot == std::string::npos ? "" : name.substr(dot + 1);
    const bool known = std::find(prefixes.begin(), prefixes.end(), prefix) != prefixes.end();
    // the index must be spelled as state() spells it ("3", not "03" or "+3")
    bool is_index = !index.empty() && index.size() <= 18 && (index == "0" || index[0] != '0') &&
                    std::all_of(index.begin(), index.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!known || !is_index)
      fail(NX_ERR_IO, current_api(), ": ", source, " holds \"", name, "\", which is not ", kind(), " state");
    if (std::stoull(index) >= params_.size())
      fail(NX_ERR_IO, current_api(), ": ", source, " holds \"", name, "\" but the optimizer has ", params_.size(),
           " parameters");
  }
}

int64_t Optimizer::state_step(const Tensor& value, const std::string& name, const std::string& source) const {
  if (value.dtype() != DType::I64 && value.dtype() != DType::I32)
    fail(NX_ERR_IO, current_api(), ": step count \"", name, "\" in ", source, " is ", dtype_name(value.dtype()),
         "; it must be an integer (i64 or i32)");
  if (!value.shape().empty())
    fail(NX_ERR_IO, current_api(), ": step count \"", name, "\" in ", source, " has shape ", shape_str(value.shape()),
         "; it must be a scalar (shape [])");
  int64_t count = 0;
  copy_to_host(cast(value, DType::I64), &count, sizeof count);
  if (count < 0) fail(NX_ERR_IO, current_api(), ": step count \"", name, "\" in ", source, " is ", count, "; it must be >= 0");
  return count;
}

Tensor Optimizer::state_moment(const Tensor& value, const std::string& name, size_t i, const std::string& source) const {
  const Tensor& p = params_[i];
  if (!is_floating(value.dtype()))
    fail(NX_ERR_IO, current_api(), ": \"", name, "\" in ", source, " is ", dtype_name(value.dtype()),
         "; optimizer state must be floating-point");
  if (value.shape() != p.shape())  // exactly: a [1] moment would broadcast silently
    fail(NX_ERR_SHAPE, current_api(), ": \"", name, "\" in ", source, " has shape ", shape_str(value.shape()),
         " but parameter ", i, " has shape ", shape_str(p.shape()));
  return clone(to_device(cast_if_needed(value, p.dtype()), p.device()));
}

void Optimizer::step_unless_nan(const Tensor& flag) {
  if (capture_hooks())
    fail(NX_ERR_NOT_IMPLEMENTED, current_api(), ": ", kind(), " cannot skip a step on a device flag inside a captured ",
         "step (a gradient scaler's); Adam, AdamW and SGD can, or run the scaler's step outside nx_plan_run");
  if (!std::isnan(item(flag))) step();
}

SGD::SGD(std::vector<Tensor> params, double lr_, double mom, bool nest, double wd)
    : Optimizer(std::move(params), lr_), momentum(mom), weight_decay(wd), nesterov(nest), buf_(params_.size()) {
  // torch.optim.SGD's checks; written so that NaN fails them too
  if (!(mom >= 0)) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": momentum must be >= 0, got ", mom);
  if (!(wd >= 0)) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": weight_decay must be >= 0, got ", wd);
  if (nesterov && momentum <= 0)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": Nesterov momentum needs momentum > 0");
}

void SGD::step() { update(nullptr); }

void SGD::step_unless_nan(const Tensor& flag) {
  CaptureHooks* hooks = capture_hooks();
  if (!hooks) return Optimizer::step_unless_nan(flag);
  GradModeGuard off(false);
  const Tensor skip = binary(BinaryOp::Ne, flag, flag);  // true where NaN
  update(&skip);
  std::shared_ptr<Optimizer> self = weak_from_this().lock();  // update() checked it is owned
  hooks->after_replay([self, flag] {  // a skipped step takes no step count
    if (std::isnan(item(flag))) --self->steps;
  });
}

void SGD::update(const Tensor* skip) {
  GradModeGuard off(false);
  // With skip (a 0-d bool on the device), every state write keeps the old value where it is true.
  auto unless_skipped = [skip](const Tensor& old, const Tensor& updated) {
    return skip ? where(*skip, old, updated) : updated;
  };
  if (CaptureHooks* hooks = capture_hooks()) {
    // Its update is written with ops that take lr as a constant: a plan keeps it only while lr
    // is unchanged (a schedule makes each step a new capture), and repeats the step count.
    std::shared_ptr<Optimizer> self = weak_from_this().lock();
    if (!self) fail(NX_ERR_STATE, current_api(), ": this optimizer is not owned by a handle and cannot be captured");
    hooks->guard([self, at = lr] { return self->lr == at; });
    hooks->host_action([self] { ++self->steps; });
  } else {
    ++steps;
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor g = grad_of(i);
    if (!g.defined()) continue;
    Tensor& p = params_[i];
    if (weight_decay) g = add(g, mul_scalar(p, weight_decay));
    if (momentum) {
      if (!buf_[i].defined() && !capture_hooks()) {
        buf_[i] = clone(g);
      } else {
        if (!buf_[i].defined()) {  // first step inside a capture: state made outside it (0 * momentum + g is g)
          const OutsideCapture outside;
          buf_[i] = zeros_like(p);
        }
        // In place, as torch's momentum_buffer.mul_().add_(): rebinding buf_[i] to a new tensor
        // inside a captured step left every replay reading the buffer the capture saw.
        copy_(buf_[i], unless_skipped(buf_[i], add(mul_scalar(buf_[i], momentum), g)));
      }
      g = nesterov ? add(g, mul_scalar(buf_[i], momentum)) : buf_[i];
    }
    copy_(p, unless_skipped(p, sub(p, mul_scalar(g, lr))));
  }
}

std::map<std::string, Tensor> SGD::state() const {
  std::map<std::string, Tensor> s;
  for (size_t i = 0; i < buf_.size(); ++i)
    if (buf_[i].defined()) s["momentum." + std::to_string(i)] = buf_[i];
  return s;
}
void SGD::load_state(const std::map<std::string, Tensor>& s, const std::string& source) {
  check_state_names(s, {"momentum"}, source);
  const int64_t new_steps = state_step(s.at("step"), "step", source);
  std::vector<Tensor> buf(buf_.size());
  for (size_t i = 0; i < buf.size(); ++i) {
    const std::string name = "momentum." + std::to_string(i);
    auto it = s.find(name);
    if (it != s.end()) buf[i] = state_moment(it->second, name, i, source);
  }
  // All checked: from here on nothing can fail.
  buf_.swap(buf);
  steps = new_steps;
}

Adam::Adam(std::vector<Tensor> params, double lr_, double b1, double b2, double e, double wd, bool dec)
    : Optimizer(std::move(params), lr_), beta1(b1), beta2(b2), eps(e), weight_decay(wd), decoupled(dec),
      m_(params_.size()), v_(params_.size()), t_(params_.size(), 0) {
  // torch.optim.Adam's checks; written so that NaN fails them too
  if (!(b1 >= 0 && b1 < 1) || !(b2 >= 0 && b2 < 1))
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": betas must be in [0, 1), got ", b1, ", ", b2);
  if (!(e >= 0)) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": eps must be >= 0, got ", e);
  if (!(wd >= 0)) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": weight_decay must be >= 0, got ", wd);
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
  if (CaptureHooks* hooks = capture_hooks()) return step_captured(*hooks);
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

void Adam::step_unless_nan(const Tensor& flag) {
  GradModeGuard off(false);
  if (CaptureHooks* hooks = capture_hooks()) return step_captured(*hooks, &flag);
  Optimizer::step_unless_nan(flag);
}

void Adam::step_captured(CaptureHooks& hooks, const Tensor* skip_if_nan) {
  std::shared_ptr<Optimizer> self = weak_from_this().lock();
  if (!self) fail(NX_ERR_STATE, current_api(), ": this optimizer is not owned by a handle and cannot be captured");
  const auto groups = fusable_groups();
  std::vector<bool> fused(params_.size(), false);
  for (const auto& idx : groups)
    for (size_t i : idx) {
      if (!m_[i].defined()) {  // no step taken yet (the eager run's was skipped by a scaler): zeros, as eager makes
        const OutsideCapture outside;  // state that outlives the step
        m_[i] = zeros_like(params_[i]);
        v_[i] = zeros_like(params_[i]);
      }
      fused[i] = true;
    }
  for (size_t i = 0; i < params_.size(); ++i)
    if (grad_of(i).defined() && !fused[i])
      fail(NX_ERR_NOT_IMPLEMENTED, current_api(), ": parameter ", i, " cannot join a fused Adam kernel (not ",
           "contiguous, or another device or dtype); its per-tensor update would freeze lr into the plan");
  // The step counts advance on the host at every replay, as eager steps advance them.
  hooks.host_action([self, this, groups] {
    ++steps;
    for (const auto& idx : groups)
      for (size_t i : idx) ++t_[i];
  });
  if (skip_if_nan) {
    hooks.observe(*skip_if_nan);
    hooks.after_replay([self, this, groups, flag = *skip_if_nan] {  // a skipped step takes no step count
      if (!std::isnan(item(flag))) return;
      --steps;
      for (const auto& idx : groups)
        for (size_t i : idx) --t_[i];
    });
  }
  for (const auto& idx : groups) {
    std::vector<Tensor> ps, gs, ms, vs;
    std::vector<int64_t> ts;
    for (size_t i : idx) {
      Tensor g = grad_of(i);
      ps.push_back(params_[i]);
      gs.push_back(g.is_contiguous() ? g : contiguous(g));
      ms.push_back(m_[i]);
      vs.push_back(v_[i]);
      ts.push_back(t_[i]);
    }
    AdamParams hp{lr, beta1, beta2, eps, weight_decay, decoupled};
    if (skip_if_nan) hp.skip_if_nan = skip_if_nan->data_as<const float>();
    hp.step_values = hooks.dynamic_values(params_[idx[0]].device(), 1 + 2 * idx.size(), [self, this, idx](double* out) {
      out[0] = lr;
      for (size_t k = 0; k < idx.size(); ++k) {
        const double t = double(t_[idx[k]]);
        out[1 + 2 * k] = lr / (1 - std::pow(beta1, t));
        out[2 + 2 * k] = 1 / std::sqrt(1 - std::pow(beta2, t));
      }
    });
    adam_step_multi(ps, gs, ms, vs, ts, hp);
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
void Adam::load_state(const std::map<std::string, Tensor>& s, const std::string& source) {
  check_state_names(s, {"m", "v", "step"}, source);
  const int64_t new_steps = state_step(s.at("step"), "step", source);
  std::vector<Tensor> m(m_.size()), v(v_.size());
  std::vector<int64_t> t(t_.size(), 0);  // 0: a file without "step.<i>"; step() then assumes steps - 1
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string mi = "m." + std::to_string(i), vi = "v." + std::to_string(i), ti = "step." + std::to_string(i);
    auto mit = s.find(mi), vit = s.find(vi), tit = s.find(ti);
    if ((mit == s.end()) != (vit == s.end()) || (tit != s.end() && mit == s.end()))
      fail(NX_ERR_IO, current_api(), ": ", source, " holds ", mit != s.end() ? "" : "no ", mi, ", ",
           vit != s.end() ? "" : "no ", vi, " and ", tit != s.end() ? "" : "no ", ti,
           "; the moments come in pairs, and a parameter's step count with them");
    if (mit == s.end()) continue;
    m[i] = state_moment(mit->second, mi, i, source);
    v[i] = state_moment(vit->second, vi, i, source);
    if (tit == s.end()) continue;
    t[i] = state_step(tit->second, ti, source);
    if (t[i] > new_steps)
      fail(NX_ERR_IO, current_api(), ": ", source, " says parameter ", i, " took ", t[i],
           " steps, more than the optimizer's ", new_steps);
  }
  // All checked: from here on nothing can fail.
  m_.swap(m);
  v_.swap(v);
  t_.swap(t);
  steps = new_steps;
  bump_capture_epoch();  // a captured plan steps the old moments
}

Tensor clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  GradModeGuard off(false);
  // The norm and the clip factor stay on the gradients' device, and every gradient is multiplied
  // by min(1, max_norm / (norm + 1e-6)) unconditionally, as torch.nn.utils.clip_grad_norm_ does:
  // no value comes back to the host, so a training step does not wait here. Squares are summed in
  // f32 (f64 for f64 gradients); f16/bf16 would overflow or underflow when squared.
  // One device, one dtype, contiguous and no shared memory (the usual case): one kernel sums the
  // squares (f64) and one scales every gradient in place.
  std::vector<Tensor> grads;
  std::set<const Storage*> storages;
  bool fusable = true;
  for (const auto& p : params) {
    if (!p.impl()->grad) continue;
    Tensor g(p.impl()->grad);
    fusable = fusable && g.is_contiguous() && storages.insert(g.impl()->storage.get()).second;
    if (!grads.empty()) fusable = fusable && g.dtype() == grads[0].dtype() && g.device() == grads[0].device();
    grads.push_back(g);
  }
  if (fusable && !grads.empty()) {
    Tensor total = unary(UnaryOp::Sqrt, sum_of_squares_multi(grads));
    scale_multi_(grads, clamp(div(full_like(total, max_norm), add_scalar(total, 1e-6)), 0.0, 1.0));
    return total;
  }
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
  // in doubles: step - warmup and total - warmup overflow int64 for extreme arguments
  const double progress = (double(step) - double(warmup)) / std::max(1.0, double(total) - double(warmup));
  return min_lr + 0.5 * (base - min_lr) * (1 + std::cos(M_PI * progress));
}

}  // namespace nx::nn
