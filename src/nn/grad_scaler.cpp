#include "nn/grad_scaler.hpp"

#include <cmath>

namespace nx::nn {

GradScaler::GradScaler(const GradScalerOptions& o) : options_(o), scale_(float(o.init_scale)) {
  if (!(o.init_scale > 0) || !std::isfinite(scale_) || scale_ <= 0)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": init_scale must be positive and finite in f32, got ", o.init_scale);
  if (!(o.growth_factor > 1) || !std::isfinite(o.growth_factor))
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": growth_factor must be finite and > 1, got ", o.growth_factor);
  if (!(o.backoff_factor > 0 && o.backoff_factor < 1))
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": backoff_factor must be in (0, 1), got ", o.backoff_factor);
  if (o.growth_interval < 1)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": growth_interval must be >= 1, got ", o.growth_interval);
}

Tensor GradScaler::scale(const Tensor& loss) const {
  check_floating(loss, "loss");
  if (!options_.enabled) return loss;
  return mul_scalar(loss, double(scale_));
}

void GradScaler::unscale(const Optimizer& opt) {
  if (!options_.enabled) return;
  PerOptimizer& state = states_[&opt];
  if (state.stage == Stage::Unscaled)
    fail(NX_ERR_STATE, current_api(), ": this optimizer's gradients were already unscaled since the last update");
  if (state.stage == Stage::Stepped)
    fail(NX_ERR_STATE, current_api(), ": unscale after this optimizer's step (call update first)");
  GradModeGuard off(false);
  // The reciprocal in f64, rounded to f32, as torch computes it; the kernels take it in the
  // gradient's dtype.
  const double inv = double(float(1.0 / double(scale_)));
  std::vector<Tensor> probes;
  for (const Tensor& p : opt.params()) {
    if (!p.impl()->grad) continue;
    const Tensor g(p.impl()->grad);
    // The Inf/NaN check costs no host synchronization here: g * 0 is 0 for a finite element and
    // NaN for an Inf or NaN one (IEEE 754), so sum(g * 0) is NaN iff g holds a non-finite value,
    // and the sum of those sums over a device is NaN iff any of its gradients does. Unlike sum(g)
    // it cannot overflow into a false alarm (every term is 0). step() reads it with one item()
    // per device, where torch reads its found_inf flag. Like torch, the check looks at the
    // scaled gradients.
    Tensor probe = cast(sum(mul_scalar(g, 0.0), {}, false), DType::F32);
    bool merged = false;
    for (Tensor& q : probes)
      if (q.device() == g.device()) {
        q = add(q, probe);
        merged = true;
      }
    if (!merged) probes.push_back(probe);
    // A new tensor rather than an in-place write: a leaf's gradient can share its storage with
    // another leaf's (add's VJP hands both operands the same gradient) or with the caller's
    // backward seed, and scaling that storage in place would unscale it twice or change the seed.
    p.impl()->grad = mul_scalar(g, inv).impl_ptr();
  }
  state.probes = std::move(probes);
  state.found_inf = -1;
  state.stage = Stage::Unscaled;
}

bool GradScaler::found_inf(PerOptimizer& state) {
  if (state.found_inf < 0) {
    bool found = false;
    for (const Tensor& q : state.probes) found = found || !std::isfinite(item(q));
    state.found_inf = found;
  }
  return state.found_inf;
}

bool GradScaler::step(Optimizer& opt) {
  if (!options_.enabled) {
    opt.step();
    return true;
  }
  PerOptimizer& state = states_[&opt];
  if (state.stage == Stage::Stepped)
    fail(NX_ERR_STATE, current_api(), ": this optimizer already stepped since the last update");
  if (state.stage == Stage::Ready) unscale(opt);
  if (state.probes.empty())
    fail(NX_ERR_STATE, current_api(), ": no parameter of the optimizer has a gradient, so none was checked for Inf/NaN");
  const bool skip = found_inf(state);
  if (!skip) opt.step();
  state.stage = Stage::Stepped;
  return !skip;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  bool any_unscaled = false, found = false;
  for (auto& [opt, state] : states_) {
    if (state.stage == Stage::Ready || state.probes.empty()) continue;
    any_unscaled = true;
    found = found_inf(state) || found;
  }
  if (!any_unscaled)
    fail(NX_ERR_STATE, current_api(), ": no gradients were unscaled since the last update (call step first)");
  // torch's _amp_update_scale_: products in f64, the scale stored in f32.
  if (found) {
    scale_ = float(double(scale_) * options_.backoff_factor);
    tracker_ = 0;
  } else if (++tracker_ == options_.growth_interval) {
    const float grown = float(double(scale_) * options_.growth_factor);
    if (std::isfinite(grown)) scale_ = grown;
    tracker_ = 0;
  }
  states_.clear();
}

}  // namespace nx::nn
