// Dynamic loss scaling for f16 training, with torch.cuda.amp.GradScaler's semantics: scale the
// loss, unscale the gradients, skip the optimizer step and back off when one is Inf/NaN, grow the
// scale after growth_interval clean steps. Messages name the running C function (current_api()).
//
// Inside a step being captured into a plan (core/capture_hooks.hpp) the same calls work with
// nothing read on the host during the step: the scale and its reciprocal are 0-d f32 tensors
// that the plan refills before each replay, the optimizer skips on the device when a gradient
// was Inf/NaN (AdamParams::skip_if_nan), and the host's half of the update (back off or grow, an
// optimizer's step count taken back) runs after each replay from the flag the step left.
#pragma once
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "nn/optim.hpp"

namespace nx::nn {

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;
};

class GradScaler {
 public:
  // NX_ERR_INVALID_ARGUMENT for options out of range (even when disabled).
  explicit GradScaler(const GradScalerOptions& options);
  // loss * scale (a 0-d f32 tensor on loss's device), recorded by autodiff; loss itself when disabled.
  Tensor scale(const Tensor& loss);
  // Replaces each gradient of opt's parameters by gradient * (1 / scale) and keeps, per device, a
  // probe that is NaN iff one of them held Inf/NaN; no host synchronization. NX_ERR_STATE when opt
  // was already unscaled or stepped since the last update.
  void unscale(const Optimizer& opt);
  // Unscales opt unless done, then steps it unless a gradient was Inf/NaN (one item() per device;
  // inside a captured step the optimizer decides on the device and this returns true); returns
  // whether it stepped. NX_ERR_STATE when opt was already stepped since the last update, or when
  // none of its parameters has a gradient.
  bool step(Optimizer& opt);
  // Backs off (any optimizer found Inf/NaN) or counts a clean step and grows every
  // growth_interval of them; then forgets the iteration. NX_ERR_STATE when nothing was unscaled.
  // Inside a captured step the update runs after each replay, from the step's flags.
  void update();
  // The current scale (1 when disabled).
  double get_scale() const { return shared_->options.enabled ? double(shared_->scale) : 1.0; }
  bool enabled() const { return shared_->options.enabled; }
  int64_t growth_tracker() const { return shared_->tracker; }

 private:
  // What a compiled plan's refills and after-replay actions read and write: they may outlive
  // this object (the plan holds them), so they share it rather than point at the scaler.
  struct Shared {
    GradScalerOptions options;
    float scale;  // f32, as torch keeps it: the same rounding of the scale and of its inverse
    int64_t tracker = 0;
    void update(bool found_inf);
    float inverse() const;
  };
  // Per device: the scale and its reciprocal as 0-d f32 tensors, made outside any capture.
  struct DeviceValues {
    Tensor scale, inv;
  };
  enum class Stage { Ready, Unscaled, Stepped };
  struct PerOptimizer {
    Stage stage = Stage::Ready;
    std::vector<Tensor> probes;  // one scalar per device of the gradients: NaN iff Inf/NaN seen
    int found_inf = -1;          // -1: probes not read yet
    bool captured = false;       // unscaled inside a captured step: the flag is flags_[opt]
  };
  bool found_inf(PerOptimizer& state);  // reads the probes once (the host synchronization)
  // The scale (or its reciprocal) on device, current: uploaded now (eager), or refilled before
  // each replay of a step being captured.
  const Tensor& value_on(Device device, bool inverse);
  // opt's flag for captured steps: a 0-d f32 on device, made once outside any capture.
  const Tensor& flag_of(const Optimizer& opt, Device device);

  std::shared_ptr<Shared> shared_;
  std::map<std::pair<int, int>, DeviceValues> values_;
  std::map<const Optimizer*, Tensor> flags_;
  // Keyed by address, like torch's id(optimizer); cleared by update().
  std::map<const Optimizer*, PerOptimizer> states_;
};

}  // namespace nx::nn
