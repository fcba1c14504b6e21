#include "core/backend.hpp"
#include "core/profiler.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iterator>

namespace nx {

View View::broadcast(const Tensor& t, const Shape& shape) {
  if (CaptureHooks* h = capture_hooks()) h->observe(t);
  View v{t.data(), shape, Shape(shape.size(), 0), t.dtype()};
  const size_t off = shape.size() - t.shape().size();
  for (size_t i = 0; i < t.shape().size(); ++i)
    v.strides[off + i] = t.shape()[i] == 1 ? 0 : t.strides()[i];
  return v;
}

// The registry: one provider per nx_device_type value. Constant-initialized (zeros before any
// static constructor runs), so registrars in other files may fill it during static initialization.
static BackendProvider g_providers[4];

// A type's registry slot; null for a value outside the table.
static BackendProvider* slot(nx_device_type type) {
  return int(type) > 0 && size_t(type) < std::size(g_providers) ? &g_providers[type] : nullptr;
}

void register_backend(nx_device_type type, BackendProvider provider) {
  BackendProvider* s = slot(type);
  if (!s || s->get) fail(NX_ERR_INTERNAL, "register_backend: device type ", int(type), " is out of range or taken");
  *s = provider;
}

void no_backend(Device device) {
  if (device.type == NX_CUDA)
    fail(NX_ERR_DEVICE, current_api(), ": this build of NexusGrad has no CUDA support (asked for cuda:", device.index,
         "); rebuild with -DNEXUS_CUDA=ON on a machine with the CUDA toolkit");
  fail(NX_ERR_DEVICE, current_api(), ": unknown device type ", int(device.type), " (expected NX_CPU=1 or NX_CUDA=2)");
}

Backend& backend(Device device) {
  if (CaptureHooks* h = capture_hooks())
    if (Backend* recording = h->backend_for(device)) return *recording;
  return profiler::observed(device_backend(device), device);
}

Backend& device_backend(Device device) {
  const BackendProvider* s = slot(device.type);
  if (!s || !s->get) no_backend(device);
  const int n = s->device_count();
  if (device.index < 0 || device.index >= n)
    fail(NX_ERR_DEVICE, current_api(), ": ", device_str(device), " is not available (this process sees ", n, " ",
         s->name, " device", n == 1 ? "" : "s", ")");
  return s->get(device.index);
}

ExecContext exec_context(Device device) { return ExecContext{device, current_stream()}; }

static std::atomic<uint64_t> g_capture_epoch{0};
void bump_capture_epoch() { g_capture_epoch.fetch_add(1); }
uint64_t capture_epoch() { return g_capture_epoch.load(); }

static std::atomic<bool> g_deterministic{false};
void set_deterministic(bool on) {
  if (g_deterministic.exchange(on) != on) bump_capture_epoch();
}
bool deterministic() { return g_deterministic; }
static std::atomic<uint64_t> g_host_syncs{0};
void count_host_sync() {
  g_host_syncs.fetch_add(1, std::memory_order_relaxed);
  // NEXUS_TRACE_SYNCS=1 names the C API call that waited, to find a step's round trips.
  static const bool trace = std::getenv("NEXUS_TRACE_SYNCS") != nullptr;
  if (trace) std::fprintf(stderr, "nexus: host sync #%llu in %s\n", (unsigned long long)g_host_syncs.load(), current_api());
}
uint64_t host_syncs() { return g_host_syncs.load(std::memory_order_relaxed); }

}  // namespace nx
