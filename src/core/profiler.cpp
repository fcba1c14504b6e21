// Recording for the profiler (core/profiler.hpp): one session at a time, process-wide, events from
// every thread in one list under a mutex (profiling is the slow path; what must stay cheap is the
// check when nothing records). CUDA kernel times come from pairs of timing events on the kernel's
// stream, read back at stop against a base event per device recorded with a host time.
#include "core/profiler.hpp"

#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>

#include "core/cuda_iface.hpp"
#include "core/error.hpp"

#ifdef NEXUS_HAVE_CUDA
#include <nvtx3/nvToolsExt.h>
#endif

namespace nx::profiler {

namespace {

uint32_t initial_flags() {
  const char* v = std::getenv("NEXUS_NVTX");
  return v && *v && std::string(v) != "0" ? kNvtx : 0;
}

void nvtx_push(const char* name) {
#ifdef NEXUS_HAVE_CUDA
  nvtxRangePushA(name);
#else
  (void)name;
#endif
}
void nvtx_pop() {
#ifdef NEXUS_HAVE_CUDA
  nvtxRangePop();
#endif
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct DeviceBase {
  void* event = nullptr;
  int64_t host_ns = 0;  // the session clock when the event was recorded
};

struct Session {
  uint64_t id = 0;
  Options options;
  int64_t t0 = 0;
  Profile profile;
  int32_t threads = 0;
  int64_t cpu_in_use = 0;
  std::map<int, DeviceBase> bases;  // per CUDA device index
};

std::mutex g_mu;
std::unique_ptr<Session> g_session;  // guarded by g_mu
uint64_t g_next_id = 1;
uint32_t g_env_flags = initial_flags();  // NEXUS_NVTX, read once

// A user region: a scope that lives on ThreadState::ranges between push and pop.
class RangeScope : public Scope {
 public:
  explicit RangeScope(const std::string& name) { open(Kind::Region, name.c_str(), {NX_CPU, 0}, std::string()); }
};

// This thread's view of the session: its index and the events open on it.
struct ThreadState {
  uint64_t session = 0;
  int32_t index = 0;
  std::vector<int64_t> open;
  std::vector<std::unique_ptr<RangeScope>> ranges;  // nx_profiler_range_push's (Scope's destructor is not virtual)
};
thread_local ThreadState tl;

// Attaches the calling thread to s (under g_mu).
ThreadState& thread_state(Session& s) {
  if (tl.session != s.id) {
    tl.session = s.id;
    tl.index = s.threads++;
    tl.open.clear();
  }
  return tl;
}

}  // namespace

std::atomic<uint32_t> g_flags{g_env_flags};

bool recording() { return g_flags.load(std::memory_order_relaxed) & kRecording; }

void start(const Options& options) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_session) fail(NX_ERR_STATE, current_api(), ": a profiler is already running (one per process)");
  auto s = std::make_unique<Session>();
  s->id = g_next_id++;
  s->options = options;
  s->t0 = now_ns();
  g_session = std::move(s);
  g_flags.store(kRecording | g_env_flags | (options.nvtx ? kNvtx : 0));
}

std::unique_ptr<Profile> stop() {
  std::unique_ptr<Session> s;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (!g_session) fail(NX_ERR_STATE, current_api(), ": no profiler is running (nx_profiler_start first)");
    s = std::move(g_session);
    g_flags.store(g_env_flags);
  }
  const int64_t end = now_ns() - s->t0;
  for (Event& e : s->profile.events)
    if (e.end_ns < 0) e.end_ns = end;  // still open: a range not popped, another thread's call
  // Device times: each kernel's events against its device's base event.
  for (Event& e : s->profile.events) {
    if (!e.cuda_start) continue;
    const DeviceBase& base = s->bases.at(e.device.index);
    cuda::event_synchronize(e.cuda_end);
    e.device_start_us = base.host_ns / 1e3 + cuda::event_elapsed_ms(base.event, e.cuda_start) * 1e3;
    e.device_us = cuda::event_elapsed_ms(e.cuda_start, e.cuda_end) * 1e3;
    cuda::event_destroy(e.cuda_start);
    cuda::event_destroy(e.cuda_end);
    e.cuda_start = e.cuda_end = nullptr;
  }
  for (auto& [index, base] : s->bases) cuda::event_destroy(base.event);
  return std::make_unique<Profile>(std::move(s->profile));
}

void Scope::open(Kind kind, const char* name, Device device, std::string shapes, void* stream) {
  const uint32_t flags = g_flags.load(std::memory_order_relaxed);
  if (flags & kNvtx) {
    nvtx_push(name);
    nvtx_ = true;
  }
  if (!(flags & kRecording)) return;
  const bool timed = device.type == NX_CUDA;
  void* cuda_start = nullptr;
  std::lock_guard<std::mutex> lock(g_mu);
  Session* s = g_session.get();
  if (!s) return;
  ThreadState& t = thread_state(*s);
  Event e;
  e.name = name;
  if (s->options.shapes) e.shapes = std::move(shapes);
  e.kind = kind;
  e.device = device;
  e.thread = t.index;
  e.depth = int32_t(t.open.size());
  e.parent = t.open.empty() ? -1 : t.open.back();
  if (timed && s->options.device_time) {
    DeviceBase& base = s->bases[device.index];
    if (!base.event) {
      base.event = cuda::timing_event_create(device.index);
      base.host_ns = now_ns() - s->t0;
      cuda::event_record(base.event, stream);
    }
    cuda_start = cuda::timing_event_create(device.index);
    cuda_end_ = cuda::timing_event_create(device.index);
    e.cuda_start = cuda_start;
    e.cuda_end = cuda_end_;
    stream_ = stream;
    device_index_ = device.index;
  }
  slot_ = int64_t(s->profile.events.size());
  session_ = s->id;
  e.start_ns = now_ns() - s->t0;
  s->profile.events.push_back(std::move(e));
  t.open.push_back(slot_);
  if (cuda_start) cuda::event_record(cuda_start, stream);
}

void Scope::close() {
  if (nvtx_) nvtx_pop();
  if (slot_ < 0) return;
  if (cuda_end_) cuda::event_record(cuda_end_, stream_);
  std::lock_guard<std::mutex> lock(g_mu);
  Session* s = g_session.get();
  if (!s || s->id != session_) return;  // stopped meanwhile: the stop ended the event
  s->profile.events[size_t(slot_)].end_ns = now_ns() - s->t0;
  ThreadState& t = thread_state(*s);
  for (size_t i = t.open.size(); i-- > 0;)  // usually the top; a range popped out of order is not
    if (t.open[i] == slot_) {
      t.open.erase(t.open.begin() + std::ptrdiff_t(i));
      break;
    }
}

void push_range(const std::string& name) {
  if (!active()) return;
  tl.ranges.push_back(std::make_unique<RangeScope>(name));
}

void pop_range() {
  if (tl.ranges.empty()) {
    if (!active()) return;
    fail(NX_ERR_STATE, current_api(), ": no range is open on this thread (nx_profiler_range_push first)");
  }
  tl.ranges.pop_back();
}

void memory_event(Device device, int64_t delta) {
  std::lock_guard<std::mutex> lock(g_mu);
  Session* s = g_session.get();
  if (!s) return;
  ThreadState& t = thread_state(*s);
  for (int64_t slot : t.open) s->profile.events[size_t(slot)].bytes += delta > 0 ? delta : 0;
  if (!s->options.memory) return;
  MemorySample m{now_ns() - s->t0, device, delta, 0, 0, t.open.empty() ? -1 : t.open.back()};
  if (device.type == NX_CUDA) {
    const cuda::MemoryStats st = cuda::memory_stats(device.index);
    m.allocated = int64_t(st.allocated);
    m.reserved = int64_t(st.reserved);
  } else {
    s->cpu_in_use += delta;
    m.allocated = m.reserved = s->cpu_in_use;
  }
  s->profile.memory.push_back(m);
}

}  // namespace nx::profiler
