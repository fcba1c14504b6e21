// Dynamic loss scaling for f16 training, with torch.cuda.amp.GradScaler's semantics: scale the
// loss, unscale the gradients, skip the optimizer step and back off when one is Inf/NaN, grow the
// scale after growth_interval clean steps. Messages name the running C function (current_api()).
#pragma once
#include <map>
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
  // loss * scale, recorded by autodiff; loss itself when disabled.
  Tensor scale(const Tensor& loss) const;
  // Replaces each gradient of opt's parameters by gradient / scale and keeps, per device, a probe
  // that is NaN iff one of them held Inf/NaN; no host synchronization. NX_ERR_STATE when opt was
  // already unscaled or stepped since the last update.
  void unscale(const Optimizer& opt);
  // Unscales opt unless done, then steps it unless a gradient was Inf/NaN (one item() per device);
  // returns whether it stepped. NX_ERR_STATE when opt was already stepped since the last update,
  // or when none of its parameters has a gradient.
  bool step(Optimizer& opt);
  // Backs off (any optimizer found Inf/NaN) or counts a clean step and grows every
  // growth_interval of them; then forgets the iteration. NX_ERR_STATE when nothing was unscaled.
  void update();
  // The current scale (1 when disabled).
  double get_scale() const { return options_.enabled ? double(scale_) : 1.0; }
  bool enabled() const { return options_.enabled; }
  int64_t growth_tracker() const { return tracker_; }

 private:
  enum class Stage { Ready, Unscaled, Stepped };
  struct PerOptimizer {
    Stage stage = Stage::Ready;
    std::vector<Tensor> probes;  // one scalar per device of the gradients: NaN iff Inf/NaN seen
    int found_inf = -1;          // -1: probes not read yet
  };
  bool found_inf(PerOptimizer& state);  // reads the probes once (the host synchronization)

  GradScalerOptions options_;
  float scale_;  // f32, as torch keeps it: the same rounding of the scale and of its inverse
  int64_t tracker_ = 0;
  // Keyed by address, like torch's id(optimizer); cleared by update().
  std::map<const Optimizer*, PerOptimizer> states_;
};

}  // namespace nx::nn
