#include "nn/grad_scaler.hpp"

#include <cmath>
#include <cstring>

#include "core/capture_hooks.hpp"

namespace nx::nn {

GradScaler::GradScaler(const GradScalerOptions& o)
    : shared_(std::make_shared<Shared>(Shared{o, float(o.init_scale)})) {
  const float scale = shared_->scale;
  if (!(o.init_scale > 0) || !std::isfinite(scale) || scale <= 0)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": init_scale must be positive and finite in f32, got ", o.init_scale);
  if (!(o.growth_factor > 1) || !std::isfinite(o.growth_factor))
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": growth_factor must be finite and > 1, got ", o.growth_factor);
  if (!(o.backoff_factor > 0 && o.backoff_factor < 1))
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": backoff_factor must be in (0, 1), got ", o.backoff_factor);
  if (o.growth_interval < 1)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": growth_interval must be >= 1, got ", o.growth_interval);
}

// torch's _amp_update_scale_: products in f64, the scale stored in f32.
void GradScaler::Shared::update(bool found) {
  if (found) {
    scale = float(double(scale) * options.backoff_factor);
    tracker = 0;
  } else if (++tracker == options.growth_interval) {
    const float grown = float(double(scale) * options.growth_factor);
    if (std::isfinite(grown)) scale = grown;
    tracker = 0;
  }
}

// The reciprocal in f64, rounded to f32, as torch computes it.
float GradScaler::Shared::inverse() const { return float(1.0 / double(scale)); }

const Tensor& GradScaler::value_on(Device device, bool inverse) {
  DeviceValues& v = values_[{int(device.type), device.index}];
  if (!v.scale.defined()) {
    const OutsideCapture outside;  // state of the scaler, not of the step
    GradModeGuard off(false);
    v.scale = zeros({}, DType::F32, device);
    v.inv = zeros({}, DType::F32, device);
  }
  const Tensor& t = inverse ? v.inv : v.scale;
  auto fill = [s = shared_, inverse](void* out) {
    const float x = inverse ? s->inverse() : s->scale;
    std::memcpy(out, &x, sizeof(float));
  };
  if (CaptureHooks* hooks = capture_hooks()) {
    hooks->refill_before_replay(t, fill);
  } else {
    GradModeGuard off(false);
    float x;
    fill(&x);
    copy_(t, to_device(from_data(&x, {}, DType::F32, Device{}), device));
  }
  return t;
}

const Tensor& GradScaler::flag_of(const Optimizer& opt, Device device) {
  Tensor& flag = flags_[&opt];
  if (!flag.defined() || flag.device() != device) {
    const OutsideCapture outside;
    GradModeGuard off(false);
    flag = zeros({}, DType::F32, device);
  }
  return flag;
}

Tensor GradScaler::scale(const Tensor& loss) {
  check_floating(loss, "loss");
  if (!enabled()) return loss;
  return mul(loss, value_on(loss.device(), false));
}

void GradScaler::unscale(const Optimizer& opt) {
  if (!enabled()) return;
  PerOptimizer& state = states_[&opt];
  if (state.stage == Stage::Unscaled)
    fail(NX_ERR_STATE, current_api(), ": this optimizer's gradients were already unscaled since the last update");
  if (state.stage == Stage::Stepped)
    fail(NX_ERR_STATE, current_api(), ": unscale after this optimizer's step (call update first)");
  GradModeGuard off(false);
  std::vector<Tensor> probes, inverses;  // per device, in the same order
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
    size_t at = 0;
    while (at < probes.size() && probes[at].device() != g.device()) ++at;
    if (at < probes.size()) {
      probes[at] = add(probes[at], probe);
    } else {
      probes.push_back(probe);
      inverses.push_back(value_on(g.device(), true));
    }
    // A new tensor rather than an in-place write: a leaf's gradient can share its storage with
    // another leaf's (add's VJP hands both operands the same gradient) or with the caller's
    // backward seed, and scaling that storage in place would unscale it twice or change the seed.
    // The product is taken in f32 and rounded to the gradient's dtype, as torch's unscale does.
    Tensor unscaled = mul(g, inverses[at]);
    p.impl()->grad = cast_if_needed(unscaled, g.dtype()).impl_ptr();
  }
  if (CaptureHooks* hooks = capture_hooks(); hooks && !probes.empty()) {
    if (probes.size() > 1)
      hooks->refuse(std::string(current_api()) + ": the optimizer's gradients lie on several devices; a captured "
                    "step's scaler keeps one Inf/NaN flag per optimizer");
    copy_(flag_of(opt, probes[0].device()), probes[0]);  // read by the optimizer's kernel and after the replay
    state.captured = true;
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
  if (!enabled()) {
    opt.step();
    return true;
  }
  PerOptimizer& state = states_[&opt];
  if (state.stage == Stage::Stepped)
    fail(NX_ERR_STATE, current_api(), ": this optimizer already stepped since the last update");
  if (state.stage == Stage::Ready) unscale(opt);
  if (state.probes.empty())
    fail(NX_ERR_STATE, current_api(), ": no parameter of the optimizer has a gradient, so none was checked for Inf/NaN");
  state.stage = Stage::Stepped;
  if (state.captured) {  // the device decides, at every replay
    opt.step_unless_nan(flags_.at(&opt));
    return true;
  }
  const bool skip = found_inf(state);
  if (!skip) opt.step();
  return !skip;
}

void GradScaler::update() {
  if (!enabled()) return;
  bool any_unscaled = false, found = false;
  std::vector<Tensor> captured_flags;
  for (auto& [opt, state] : states_) {
    if (state.stage == Stage::Ready || state.probes.empty()) continue;
    any_unscaled = true;
    if (state.captured) captured_flags.push_back(flags_.at(opt));
    else found = found_inf(state) || found;
  }
  if (!any_unscaled)
    fail(NX_ERR_STATE, current_api(), ": no gradients were unscaled since the last update (call step first)");
  states_.clear();
  if (CaptureHooks* hooks = capture_hooks(); hooks && !captured_flags.empty()) {
    // After the device work of the capture and of every replay: the flags are final then.
    hooks->after_replay([s = shared_, flags = std::move(captured_flags), found] {
      bool any = found;
      for (const Tensor& f : flags) any = any || std::isnan(item(f));
      s->update(any);
    });
    return;
  }
  shared_->update(found);
}

}  // namespace nx::nn
