// Optimizers (torch.optim semantics) over a list of parameter tensors, learning-rate schedules
// and gradient clipping. Updates run under no-grad as in-place writes.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ops/ops.hpp"

namespace nx::nn {

// Owned through a shared_ptr (the C handle's): a compiled plan that steps it keeps it alive.
class Optimizer : public std::enable_shared_from_this<Optimizer> {
 public:
  explicit Optimizer(std::vector<Tensor> params, double lr);
  virtual ~Optimizer() = default;
  virtual void step() = 0;
  // Steps unless flag (a 0-d f32 on the parameters' device, a gradient scaler's) is NaN. Inside a
  // captured step the device decides at every replay (Adam); an optimizer that cannot skip there
  // fails with NX_ERR_NOT_IMPLEMENTED. Outside one, the flag is read on the host.
  virtual void step_unless_nan(const Tensor& flag);
  virtual const char* kind() const = 0;
  void zero_grad();
  double lr;
  // State tensors by name ("m.3", "v.3", "momentum.0"), for save/load; the step count is steps.
  virtual std::map<std::string, Tensor> state() const = 0;
  // Replaces the state and the step count ("step") with those of state, read from source (named
  // in messages). All or nothing: every entry is checked against the live parameters (names,
  // shapes, floating moments, integer non-negative step counts) before anything changes.
  virtual void load_state(const std::map<std::string, Tensor>& state, const std::string& source) = 0;
  int64_t steps = 0;
  // The tensors it updates, in the order given (the gradient scaler unscales their gradients).
  const std::vector<Tensor>& params() const { return params_; }

 protected:
  std::vector<Tensor> params_;
  Tensor grad_of(size_t i) const;  // undefined when the parameter has no gradient
  // For load_state, each failing with NX_ERR_IO (NX_ERR_SHAPE for a shape) naming source:
  // every name of state is "step" or "<prefix>.<i>" for one of prefixes and a parameter index i;
  void check_state_names(const std::map<std::string, Tensor>& state, const std::vector<std::string>& prefixes,
                         const std::string& source) const;
  // the step count `name`: one integer element (i32 or i64, shape [] as saved), >= 0;
  int64_t state_step(const Tensor& value, const std::string& name, const std::string& source) const;
  // a moment of parameter i: floating with the parameter's shape, returned as a private copy in
  // the parameter's dtype and on its device (the steps update moments in place).
  Tensor state_moment(const Tensor& value, const std::string& name, size_t i, const std::string& source) const;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, double lr, double momentum, bool nesterov, double weight_decay);
  void step() override;
  void step_unless_nan(const Tensor& flag) override;
  const char* kind() const override { return "SGD"; }
  std::map<std::string, Tensor> state() const override;
  void load_state(const std::map<std::string, Tensor>& state, const std::string& source) override;
  double momentum, weight_decay;
  bool nesterov;

 private:
  std::vector<Tensor> buf_;
  // step(), or inside a captured step with skip (a 0-d bool tensor): the updates of parameters
  // and momentum buffers keep the old values where skip is true (where()).
  void update(const Tensor* skip);
};

// Adam, or AdamW when decoupled (weight decay applied to the weights, not the gradient). When
// every parameter with a gradient is contiguous, on one device and of one dtype, a step is one
// multi-tensor kernel (nx::adam_step_multi) updating the moments in place; else per tensor.
class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, double lr, double beta1, double beta2, double eps, double weight_decay, bool decoupled);
  void step() override;
  void step_unless_nan(const Tensor& flag) override;
  const char* kind() const override { return decoupled ? "AdamW" : "Adam"; }
  std::map<std::string, Tensor> state() const override;
  void load_state(const std::map<std::string, Tensor>& state, const std::string& source) override;
  double beta1, beta2, eps, weight_decay;
  bool decoupled;

 private:
  std::vector<Tensor> m_, v_;
  // Steps taken by each parameter (torch.optim's per-parameter state['step']): a parameter
  // without a gradient at some step is skipped, and its bias corrections do not advance.
  std::vector<int64_t> t_;
  std::vector<std::vector<size_t>> fusable_groups() const;
  // step() inside a plan being captured (core/capture_hooks.hpp): fused groups only, with the
  // step counts advanced by a host action and lr, bias corrections read from step_values. With
  // skip_if_nan the kernels leave everything unchanged when it is NaN, and the step counts are
  // taken back after that replay.
  void step_captured(CaptureHooks& hooks, const Tensor* skip_if_nan = nullptr);
};

// Scales all gradients so that their global L2 norm is at most max_norm; returns the norm before,
// as a 0-d f64 tensor on the gradients' device (reading it is the caller's choice: a host sync).
Tensor clip_grad_norm(const std::vector<Tensor>& params, double max_norm);
double lr_step(double base, int64_t step, int64_t step_size, double gamma);
double lr_cosine_warmup(double base, int64_t step, int64_t warmup, int64_t total, double min_lr);

}  // namespace nx::nn
