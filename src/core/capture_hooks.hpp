// What a step being captured into a plan (src/compile) sees of the engine on this thread. Null
// when nothing is captured, so an eager call pays one thread-local read per hook site. The
// compiler implements it; core, ops and nn only call it, so they depend on no compiler code.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "core/tensor.hpp"

namespace nx {

class Backend;

class CaptureHooks {
 public:
  virtual ~CaptureHooks() = default;
  // The backend that ops on device get now: the recording one for the plan's device, else null
  // (the device's own backend).
  virtual Backend* backend_for(Device device) = 0;
  // t's memory is about to reach a kernel (View::of): the plan keeps what it does not allocate.
  virtual void observe(const Tensor& t) = 0;
  // An index op relies on index's values lying in [0, n) (checked now, or known): a replay must
  // check the same of whatever index's memory holds then.
  virtual void index_range_trusted(const Tensor& index, int64_t n) = 0;
  // The host is about to read t's values (item, a copy to the host, a data pointer): a replay
  // would not run the host code that uses them, so a plan refuses this for its device's tensors.
  virtual void host_read(const Tensor& t) = 0;
  // Host work that a replay repeats, in this order, before it launches the device work (an
  // optimizer's step counts). It runs once now, too.
  virtual void host_action(std::function<void()> action) = 0;
  // n doubles in device memory (host memory on the CPU) that fill writes before each replay and
  // once now; kernels read values that change every step (learning rate, bias corrections) here.
  virtual const double* dynamic_values(Device device, size_t n, std::function<void(double*)> fill) = 0;
  // The same for a tensor the caller owns, made before the step began and kept alive by the
  // plan (a gradient scaler's scale): fill writes its bytes before each replay and once now.
  virtual void refill_before_replay(const Tensor& t, std::function<void(void*)> fill) = 0;
  // Host work after the step's device work, at every replay and once when the capture ends,
  // with no capture active (it may read device values: a scaler learning whether the step
  // found Inf/NaN, an optimizer taking back a step count the device skipped).
  virtual void after_replay(std::function<void()> action) = 0;
  // A draw of count random numbers on device, which the generator placed at (seed, offset): the
  // two words it returns (device memory, host memory on the CPU: seed, then offset) are where the
  // draw's kernel reads them. A replay takes the step's numbers from the generator, as the eager
  // step would, and writes there where this draw lies among them. Null for another device.
  virtual const uint64_t* random_draw(Device device, uint64_t seed, uint64_t offset, uint64_t count) = 0;
  // Host work that a replay could not repeat (why names the C call and the way out): the capture
  // fails with NX_ERR_STATE.
  [[noreturn]] virtual void refuse(const std::string& why) = 0;
  // A condition the capture assumed (a learning rate frozen into the step): a replay first
  // checks it and captures the step again when it no longer holds.
  virtual void guard(std::function<bool()> still_valid) = 0;
};

inline thread_local CaptureHooks* tl_capture_hooks = nullptr;
inline CaptureHooks* capture_hooks() { return tl_capture_hooks; }

// For its lifetime nothing is captured on this thread: what is made here (a cache's table, a
// scaler's state) exists before and after the step, as if made outside it.
class OutsideCapture {
 public:
  OutsideCapture() : saved_(tl_capture_hooks) { tl_capture_hooks = nullptr; }
  ~OutsideCapture() { tl_capture_hooks = saved_; }
  OutsideCapture(const OutsideCapture&) = delete;
  OutsideCapture& operator=(const OutsideCapture&) = delete;

 private:
  CaptureHooks* saved_;
};

}  // namespace nx

namespace nx {
// Bumped by every change that makes a captured step stale although its inputs look the same:
// a tensor's requires_grad, a parameter moved, loaded optimizer state, the TF32 or deterministic
// setting. A plan captured under another epoch is captured again. (Train/eval modes are guarded
// per module by nx_module_forward: switching to eval and back between replays keeps the plan.)
void bump_capture_epoch();
uint64_t capture_epoch();
}  // namespace nx
