// The profiler's recording (nx_profiler_*, include/nexus.h): scopes that the C API, the autograd
// engine and a wrapper around each device's backend open and close, gathered into one process-wide
// session. When nothing records and NEXUS_NVTX is unset, a scope costs one relaxed atomic load.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.hpp"

namespace nx {
class Backend;
}

namespace nx::profiler {

enum class Kind : uint8_t { Region = 0, Api = 1, Backward = 2, Kernel = 3 };  // nx_profile_event_kind

struct Options {
  bool device_time = true, nvtx = true, memory = true, shapes = true;
};

struct Event {
  std::string name, shapes;
  Kind kind = Kind::Region;
  Device device{NX_CPU, 0};
  int32_t thread = 0, depth = 0;
  int64_t parent = -1;
  int64_t start_ns = 0, end_ns = -1;  // from the session's start; -1 while open
  double device_start_us = -1, device_us = -1;
  int64_t bytes = 0;
  void* cuda_start = nullptr;  // timing events, resolved at stop
  void* cuda_end = nullptr;
};

struct MemorySample {
  int64_t time_ns;
  Device device;
  int64_t delta, allocated, reserved, event;
};

struct Profile {
  std::vector<Event> events;
  std::vector<MemorySample> memory;
};

// What the hooks test: bit 0 a session records, bit 1 NVTX ranges are emitted.
inline constexpr uint32_t kRecording = 1, kNvtx = 2;
extern std::atomic<uint32_t> g_flags;
inline bool active() { return g_flags.load(std::memory_order_relaxed) != 0; }

void start(const Options& options);       // NX_ERR_STATE when a session runs
std::unique_ptr<Profile> stop();          // NX_ERR_STATE when none runs
bool recording();
void push_range(const std::string& name);  // user regions
void pop_range();                          // NX_ERR_STATE when this thread has none open

// An event from construction to destruction (when active() at construction).
class Scope {
 public:
  Scope(Kind kind, const char* name) {
    if (active()) open(kind, name, {NX_CPU, 0}, std::string());
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
  ~Scope() {
    if (slot_ >= 0 || nvtx_) close();
  }

 protected:
  Scope() = default;
  // A kernel's scope opens after its operands are described, just before the launch; stream is
  // the launch's stream, where the CUDA timing events go.
  void open(Kind kind, const char* name, Device device, std::string shapes, void* stream = nullptr);
  void close();

 private:
  int64_t slot_ = -1;
  uint64_t session_ = 0;
  bool nvtx_ = false;
  void* stream_ = nullptr;
  void* cuda_end_ = nullptr;
  int device_index_ = -1;
};

// A kernel event for device work that is not one registry kernel (a replayed CUDA graph).
class DeviceScope : public Scope {
 public:
  DeviceScope(const char* name, Device device, void* stream) {
    if (active()) open(Kind::Kernel, name, device, std::string(), stream);
  }
};

// Bytes allocated (delta > 0) or released on device, for the open events of this thread and the
// memory timeline (CUDA: with the caching allocator's in-use and reserved bytes after it).
void memory_event(Device device, int64_t delta);

// The device's backend wrapped so that every kernel and allocation is recorded (a wrapper per
// backend, made once and kept for the life of the process).
Backend& profiling_backend(Backend& inner, Device device);
// What kernels go through: the wrapper while a profiler runs (or NEXUS_NVTX), else inner itself.
inline Backend& observed(Backend& inner, Device device) {
  return active() ? profiling_backend(inner, device) : inner;
}

}  // namespace nx::profiler
