#include "core/backend.hpp"
#include "core/cuda_iface.hpp"

#include <atomic>

namespace nx {

View View::broadcast(const Tensor& t, const Shape& shape) {
  View v{t.data(), shape, Shape(shape.size(), 0), t.dtype()};
  const size_t off = shape.size() - t.shape().size();
  for (size_t i = 0; i < t.shape().size(); ++i)
    v.strides[off + i] = t.shape()[i] == 1 ? 0 : t.strides()[i];
  return v;
}

Backend& backend(Device device) {
  if (device.type == NX_CPU) {
    if (device.index != 0)
      fail(NX_ERR_DEVICE, current_api(), ": CPU device index must be 0, got ", device.index);
    return cpu_backend();
  }
  if (device.type == NX_CUDA) return cuda::backend(device.index);
  fail(NX_ERR_DEVICE, current_api(), ": unknown device type ", int(device.type),
       " (expected NX_CPU=1 or NX_CUDA=2)");
}

static std::atomic<bool> g_deterministic{false};
void set_deterministic(bool on) { g_deterministic = on; }
bool deterministic() { return g_deterministic; }

}  // namespace nx
