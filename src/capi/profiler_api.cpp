// C API: the profiler (nx_profiler_*, nx_profile_*), over core/profiler.hpp (recording) and
// capi/profile_report.hpp (the table and the Chrome trace). The profiler's own calls are not
// recorded (guard<false>): a range pushed must not sit inside its push call's event.
#include <cstddef>

#include "capi/capi.hpp"
#include "capi/profile_report.hpp"
#include "core/atomic_file.hpp"
#include "io/json.hpp"

struct nx_profile_s {
  std::unique_ptr<nx::profiler::Profile> profile;
};
NX_HANDLE_OBJECT(nx_profile_s, Profile);

using namespace nx;
using namespace nx::capi;

namespace {

const profiler::Profile& profile_of(nx_profile p) { return *handle_object(p, "profile").profile; }

template <class V>
const auto& entry(const std::vector<V>& list, int64_t index, const char* what) {
  if (index < 0 || uint64_t(index) >= list.size())
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": index ", index, " is out of range for the profile's ", list.size(),
         " ", what);
  return list[size_t(index)];
}

// An out struct of this nexus.h (rule 4): the caller sets struct_size.
template <class S>
void check_struct_size(const S& out) {
  if (out.struct_size != sizeof(S))
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": out->struct_size is ", out.struct_size, ", expected ", sizeof(S));
}

}  // namespace

extern "C" {

nx_status nx_profiler_start(const nx_profiler_options* options) {
  return guard<false>("nx_profiler_start", [&] {
    const nx_profiler_options o = struct_arg(options, nx_profiler_options NX_PROFILER_OPTIONS_DEFAULT, "options");
    profiler::Options po;
    po.device_time = o.device_time;
    po.nvtx = o.nvtx;
    po.memory = o.memory;
    po.shapes = o.shapes;
    profiler::start(po);
  });
}

nx_status nx_profiler_stop(nx_profile* out) {
  clear_out(out);
  return guard<false>("nx_profiler_stop", [&] {
    check_out(out);
    auto obj = std::make_unique<nx_profile_s>();
    obj->profile = profiler::stop();
    *out = make_handle(std::move(obj));
  });
}

bool nx_profiler_enabled(void) { return profiler::recording(); }

nx_status nx_profiler_range_push(const char* name) {
  return guard<false>("nx_profiler_range_push", [&] {
    if (!name || !*name) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": name is ", name ? "empty" : "NULL");
    const std::string s(name);
    try {  // the JSON reader's UTF-8 check: names go into the Chrome trace
      json::parse(json::quote(s));
    } catch (const Error& e) {
      fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": name is not valid UTF-8 (", e.what(), ")");
    }
    profiler::push_range(s);
  });
}

nx_status nx_profiler_range_pop(void) {
  return guard<false>("nx_profiler_range_pop", [&] { profiler::pop_range(); });
}

nx_status nx_profile_event_count(nx_profile profile, int64_t* out) {
  return guard<false>("nx_profile_event_count", [&] {
    check_out(out);
    *out = int64_t(profile_of(profile).events.size());
  });
}

nx_status nx_profile_get_event(nx_profile profile, int64_t index, nx_profile_event* out) {
  return guard<false>("nx_profile_get_event", [&] {
    check_out(out);
    check_struct_size(*out);
    const profiler::Event& e = entry(profile_of(profile).events, index, "events");
    nx_profile_event r{};
    r.struct_size = sizeof r;
    r.name = e.name.c_str();
    r.shapes = e.shapes.c_str();
    r.kind = nx_profile_event_kind(int(e.kind));
    r.device = nx_device{e.device.type, e.device.index};
    r.thread = e.thread;
    r.depth = e.depth;
    r.parent = e.parent;
    r.start_us = e.start_ns / 1e3;
    r.duration_us = (e.end_ns - e.start_ns) / 1e3;
    r.device_start_us = e.device_start_us;
    r.device_duration_us = e.device_us;
    r.bytes_allocated = e.bytes;
    *out = r;
  });
}

nx_status nx_profile_memory_count(nx_profile profile, int64_t* out) {
  return guard<false>("nx_profile_memory_count", [&] {
    check_out(out);
    *out = int64_t(profile_of(profile).memory.size());
  });
}

nx_status nx_profile_get_memory_sample(nx_profile profile, int64_t index, nx_profile_memory_sample* out) {
  return guard<false>("nx_profile_get_memory_sample", [&] {
    check_out(out);
    check_struct_size(*out);
    const profiler::MemorySample& m = entry(profile_of(profile).memory, index, "memory samples");
    *out = nx_profile_memory_sample{sizeof(nx_profile_memory_sample), m.time_ns / 1e3,
                                    nx_device{m.device.type, m.device.index}, m.delta, m.allocated, m.reserved, m.event};
  });
}

nx_status nx_profile_summary(nx_profile profile, nx_profile_sort sort_by, int64_t row_limit, char** out) {
  clear_out(out);
  return guard<false>("nx_profile_summary", [&] {
    check_out(out);
    const profiler::Profile& p = profile_of(profile);
    const int sort = enum_value(sort_by);
    if (sort < NX_PROFILE_SORT_TOTAL || sort > NX_PROFILE_SORT_CALLS)
      fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": sort_by is ", sort,
           ", expected NX_PROFILE_SORT_TOTAL (0), _SELF (1), _DEVICE (2) or _CALLS (3)");
    if (row_limit < 0) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": row_limit is ", row_limit, ", expected >= 0 (0: all)");
    *out = malloc_string(profiler::summary(p, profiler::Sort(sort), row_limit));
  });
}

nx_status nx_profile_save_chrome_trace(nx_profile profile, const char* path) {
  return guard<false>("nx_profile_save_chrome_trace", [&] {
    const profiler::Profile& p = profile_of(profile);
    if (!path || !*path) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": path is ", path ? "empty" : "NULL");
    AtomicFile file(path);
    file.write(profiler::chrome_trace(p));
    file.commit();
  });
}

void nx_profile_free(nx_profile profile) {
  guard<false>("nx_profile_free", [&] { free_handle(profile); });
}

}  // extern "C"
