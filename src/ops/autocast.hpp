// Autocast (torch.autocast's policy): per thread, a stack of scopes, each for one device type and
// one low-precision dtype. Inside a scope for a tensor's device type, the ops that gain from low
// precision (matmul, linear, attention) cast their floating operands to the scope's dtype, and
// the ops that need range (softmax, log-softmax, norms, losses, sum) cast them to f32. The casts
// are ordinary recorded ops, so every gradient comes back in its leaf's own dtype. f64 operands
// and integer ones are never touched. Backward runs with autocast suspended (the VJPs follow the
// dtypes the forward recorded), as in PyTorch.
#pragma once
#include <initializer_list>
#include <optional>
#include <vector>

#include "core/tensor.hpp"

namespace nx {

struct AutocastScope {
  nx_device_type device_type;
  DType dtype;   // F16 or BF16
  bool enabled;  // false: a scope that turns autocast off inside an enclosing one
};
// The whole per-thread state, so that a checkpointed segment can replay its forward under the
// state it first ran with.
struct AutocastState {
  std::vector<AutocastScope> scopes;
  bool suspended = false;
};

void autocast_push(const AutocastScope& scope);  // checks the dtype (F16 or BF16)
void autocast_pop();                             // NX_ERR_STATE when no scope is open
// The low-precision dtype in force for device's type, if any.
std::optional<DType> autocast_dtype(Device device);
AutocastState autocast_state();
void set_autocast_state(AutocastState state);

// Casts, in place of the pointers given, the eligible operands (defined, f32/f16/bf16) to the
// dtype in force for their device (low) or to f32 (range); nothing outside a scope.
void autocast_low(std::initializer_list<Tensor*> operands);
void autocast_f32(std::initializer_list<Tensor*> operands);

// Runs a region with another state and restores the previous one (backward: suspended).
struct AutocastStateGuard {
  AutocastState previous;
  explicit AutocastStateGuard(AutocastState state) : previous(autocast_state()) { set_autocast_state(std::move(state)); }
  ~AutocastStateGuard() { set_autocast_state(std::move(previous)); }
};
inline AutocastState autocast_suspended() {
  AutocastState s = autocast_state();
  s.suspended = true;
  return s;
}

}  // namespace nx
