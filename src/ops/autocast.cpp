#include "ops/autocast.hpp"

#include "ops/ops.hpp"

namespace nx {

static thread_local AutocastState tls_autocast;

void autocast_push(const AutocastScope& scope) {
  if (scope.dtype != DType::F16 && scope.dtype != DType::BF16)
    fail(NX_ERR_DTYPE, current_api(), ": autocast runs in f16 or bf16, got ", dtype_name(scope.dtype));
  tls_autocast.scopes.push_back(scope);
}

void autocast_pop() {
  if (tls_autocast.scopes.empty()) fail(NX_ERR_STATE, current_api(), ": no autocast scope is open on this thread");
  tls_autocast.scopes.pop_back();
}

std::optional<DType> autocast_dtype(Device device) {
  if (tls_autocast.suspended) return std::nullopt;
  for (auto s = tls_autocast.scopes.rbegin(); s != tls_autocast.scopes.rend(); ++s)
    if (s->device_type == device.type) return s->enabled ? std::optional<DType>(s->dtype) : std::nullopt;
  return std::nullopt;
}

AutocastState autocast_state() { return tls_autocast; }
void set_autocast_state(AutocastState state) { tls_autocast = std::move(state); }

// f64 keeps its precision and integers are not numbers autocast reasons about (PyTorch's rule).
static bool eligible(const Tensor& t) { return t.defined() && is_floating(t.dtype()) && t.dtype() != DType::F64; }

void autocast_low(std::initializer_list<Tensor*> operands) {
  for (Tensor* t : operands)
    if (eligible(*t))
      if (auto dt = autocast_dtype(t->device())) *t = cast_if_needed(*t, *dt);
}

void autocast_f32(std::initializer_list<Tensor*> operands) {
  for (Tensor* t : operands)
    if (eligible(*t) && autocast_dtype(t->device())) *t = cast_if_needed(*t, DType::F32);
}

}  // namespace nx
