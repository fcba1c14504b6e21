#include "capi/profile_report.hpp"

#include <algorithm>
#include <cstdio>
#include <map>

#include "io/json.hpp"

namespace nx::profiler {

namespace {

const char* kind_name(Kind k) {
  static const char* names[] = {"region", "api", "backward", "kernel"};
  return names[int(k)];
}

double host_us(const Event& e) { return (e.end_ns - e.start_ns) / 1e3; }

// Per event: host time of the events directly inside (for self time) and device time of the
// kernels inside (for the device time of calls and regions). Children begin after their parent,
// so one backward pass adds each event into its parent.
struct Inclusive {
  std::vector<double> children_us, device_us;
};
Inclusive inclusive(const Profile& p) {
  const size_t n = p.events.size();
  Inclusive r{std::vector<double>(n, 0), std::vector<double>(n, 0)};
  for (size_t i = n; i-- > 0;) {
    const Event& e = p.events[i];
    if (e.device_us > 0) r.device_us[i] += e.device_us;
    if (e.parent >= 0) {
      r.children_us[size_t(e.parent)] += host_us(e);
      r.device_us[size_t(e.parent)] += r.device_us[i];
    }
  }
  return r;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

std::string summary(const Profile& p, Sort sort, int64_t row_limit) {
  struct Row {
    std::string name;
    Kind kind;
    int64_t calls = 0, bytes = 0;
    double total_us = 0, self_us = 0, device_us = 0;
  };
  const Inclusive inc = inclusive(p);
  std::map<std::pair<int, std::string>, Row> rows;
  double top_us = 0, kernel_device_us = 0;
  for (size_t i = 0; i < p.events.size(); ++i) {
    const Event& e = p.events[i];
    Row& r = rows[{int(e.kind), e.name}];
    r.name = e.name;
    r.kind = e.kind;
    r.calls++;
    r.bytes += e.bytes;
    r.total_us += host_us(e);
    r.self_us += std::max(0.0, host_us(e) - inc.children_us[i]);
    r.device_us += inc.device_us[i];
    if (e.parent < 0) top_us += host_us(e);
    if (e.device_us > 0) kernel_device_us += e.device_us;
  }
  std::vector<Row> sorted;
  for (auto& [key, r] : rows) sorted.push_back(r);
  auto key = [sort](const Row& r) {
    switch (sort) {
      case Sort::Self: return r.self_us;
      case Sort::Device: return r.device_us;
      case Sort::Calls: return double(r.calls);
      default: return r.total_us;
    }
  };
  std::stable_sort(sorted.begin(), sorted.end(), [&](const Row& a, const Row& b) { return key(a) > key(b); });
  if (row_limit > 0 && sorted.size() > size_t(row_limit)) sorted.resize(size_t(row_limit));

  size_t width = 4;
  for (const Row& r : sorted) width = std::max(width, std::min<size_t>(r.name.size(), 48));
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-*s  %-8s %8s %12s %12s %7s %11s %12s %11s\n", int(width), "Name", "Kind", "Calls",
                "Total ms", "Self ms", "Self %", "Avg us", "Device ms", "Alloc MiB");
  out += line;
  out += std::string(width + 92, '-') + "\n";
  for (const Row& r : sorted) {
    const std::string name = r.name.size() > width ? r.name.substr(0, width - 3) + "..." : r.name;
    std::snprintf(line, sizeof line, "%-*s  %-8s %8lld %12.3f %12.3f %6.1f%% %11.1f %12s %11.2f\n", int(width),
                  name.c_str(), kind_name(r.kind), (long long)r.calls, r.total_us / 1e3, r.self_us / 1e3,
                  top_us > 0 ? 100.0 * r.self_us / top_us : 0.0, r.total_us / double(r.calls),
                  r.device_us > 0 ? fmt("%.3f", r.device_us / 1e3).c_str() : "-", r.bytes / 1048576.0);
    out += line;
  }
  out += std::string(width + 92, '-') + "\n";
  std::snprintf(line, sizeof line, "%zu events; host time of the outermost events %.3f ms; device time of the kernels %.3f ms\n",
                p.events.size(), top_us / 1e3, kernel_device_us / 1e3);
  out += line;
  return out;
}

std::string chrome_trace(const Profile& p) {
  // Host events: pid 0, a track per thread. CUDA kernels: pid 1 + device, on the device's clock
  // aligned to the host's at each device's first kernel.
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  out += R"({"name":"process_name","ph":"M","pid":0,"args":{"name":"host"}})";
  std::map<int, bool> devices;
  int32_t threads = 0;
  for (const Event& e : p.events) {
    threads = std::max(threads, e.thread + 1);
    if (e.device_us >= 0) devices[e.device.index] = true;
  }
  char buf[256];
  for (int32_t t = 0; t < threads; ++t) {
    std::snprintf(buf, sizeof buf, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,\"args\":{\"name\":\"thread %d\"}}", t, t);
    out += buf;
  }
  for (const auto& [d, _] : devices) {
    std::snprintf(buf, sizeof buf, ",\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"cuda:%d\"}}", 1 + d, d);
    out += buf;
  }
  for (size_t i = 0; i < p.events.size(); ++i) {
    const Event& e = p.events[i];
    const std::string name = json::quote(e.name), shapes = json::quote(e.shapes);
    std::snprintf(buf, sizeof buf, R"(,"ph":"X","pid":0,"tid":%d,"ts":%.3f,"dur":%.3f,"args":{"index":%zu,"bytes":%lld,"shapes":)",
                  e.thread, e.start_ns / 1e3, host_us(e), i, (long long)e.bytes);
    out += ",\n{\"name\":" + name + ",\"cat\":\"" + kind_name(e.kind) + "\"" + buf + shapes + "}}";
    if (e.device_us >= 0) {
      std::snprintf(buf, sizeof buf, R"(,"cat":"cuda","ph":"X","pid":%d,"tid":0,"ts":%.3f,"dur":%.3f,"args":{"index":%zu,"shapes":)",
                    1 + e.device.index, e.device_start_us, e.device_us, i);
      out += ",\n{\"name\":" + name + buf + shapes + "}}";
    }
  }
  for (const MemorySample& m : p.memory) {
    const int pid = m.device.type == NX_CUDA ? 1 + m.device.index : 0;
    std::snprintf(buf, sizeof buf, R"(,
{"name":"memory","ph":"C","pid":%d,"ts":%.3f,"args":{"allocated":%lld,"reserved":%lld}})", pid, m.time_ns / 1e3,
                  (long long)m.allocated, (long long)m.reserved);
    out += buf;
  }
  out += "\n]}\n";
  return out;
}

}  // namespace nx::profiler
