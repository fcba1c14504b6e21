#include "compile/lanes.hpp"

#ifdef NEXUS_OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <chrono>
#include <exception>
#include <mutex>
#include <sstream>
#include <thread>

namespace nx::compile {
namespace {

constexpr int kTimedAll = 2;   // calibration runs on all threads (the first also warms the arena)
constexpr size_t kWindow = 64;  // the longest paired stage the schedule considers, in calls

// A call's time before any timed run measured it (runs keep the fastest, so any time replaces it).
constexpr double kUnmeasured = 1e30;

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

int max_threads() {
#ifdef NEXUS_OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

bool conflict(const std::vector<MemRange>& a, const std::vector<MemRange>& b) {
  for (const MemRange& x : a)
    for (const MemRange& y : b)
      if ((x.written || y.written) && x.lo < y.hi && y.lo < x.hi) return true;
  return false;
}

}  // namespace

Lanes::Lanes(std::vector<Call*> list, const std::vector<std::vector<MemRange>>& ranges, std::vector<bool> alone,
             Mode mode)
    : list_(std::move(list)), deps_(list_.size()), alone_(std::move(alone)), mode_(mode),
      done_(new std::atomic<uint64_t>[list_.size()]) {
  for (size_t i = 0; i < list_.size(); ++i) {
    done_[i].store(0);
    // Only the last kWindow calls can share a stage with call i; earlier ones are done before it.
    for (size_t j = i > kWindow ? i - kWindow : 0; j < i; ++j)
      if (conflict(ranges[i], ranges[j])) deps_[i].push_back(j);
  }
}

Lanes::~Lanes() = default;

void Lanes::run_sequential(Backend& backend, const ExecContext& ctx, std::vector<double>* seconds, bool one_thread) {
  // The calling thread's count, set to one for the one-thread timing and put back however the
  // run ends.
  struct OneThread {
    explicit OneThread(bool on) : previous(on ? max_threads() : 0) {
#ifdef NEXUS_OPENMP
      if (previous) omp_set_num_threads(1);
#endif
    }
    ~OneThread() {
#ifdef NEXUS_OPENMP
      if (previous) omp_set_num_threads(previous);
#endif
    }
    int previous;
  } scope(one_thread);
  for (size_t i = 0; i < list_.size(); ++i) {
    const double t0 = seconds ? now() : 0;
    list_[i]->run(backend, ctx);
    if (seconds) (*seconds)[i] = std::min((*seconds)[i], now() - t0);
  }
}

void Lanes::run(Backend& backend, const ExecContext& ctx) {
  const int threads = max_threads();
  if (threads != threads_) {  // first run, or the count changed: calibrate again
    threads_ = threads;
    calibrated_ = 0;
    stages_.clear();
    t_all_.assign(list_.size(), kUnmeasured);
    t_one_.assign(list_.size(), kUnmeasured);
    scheduled_ = in_order_ = Timer{};
  }
  if (threads < 2) return run_sequential(backend, ctx, nullptr, false);
  if (calibrated_ < kTimedAll + 1) {
    const bool one = calibrated_ == kTimedAll;
    run_sequential(backend, ctx, one ? &t_one_ : &t_all_, one);
    if (++calibrated_ == kTimedAll + 1) make_schedule();
    return;
  }
  ++run_number_;
  const double t0 = now();
  if (mode_ == Mode::alternate && run_number_ % 2 == 0) {
    run_sequential(backend, ctx, nullptr, false);
    in_order_.add(now() - t0);
    return;
  }
  for (const Stage& s : stages_) {
    if (s.paired) run_paired(s, backend, ctx);
    else list_[s.first]->run(backend, ctx);
  }
  scheduled_.add(now() - t0);
}

double Lanes::call_seconds(size_t call) const {
  return call < t_all_.size() && t_all_[call] < kUnmeasured ? t_all_[call] : -1.0;
}

std::string Lanes::time_by_call_name() const {
  if (stages_.empty()) return "";
  std::vector<std::pair<std::string, std::pair<double, int>>> by;  // name, (seconds, calls)
  for (size_t i = 0; i < list_.size(); ++i) {
    auto it = std::find_if(by.begin(), by.end(), [&](const auto& e) { return e.first == list_[i]->name(); });
    if (it == by.end()) it = by.insert(by.end(), {list_[i]->name(), {0.0, 0}});
    it->second.first += t_all_[i], it->second.second++;
  }
  std::stable_sort(by.begin(), by.end(), [](const auto& x, const auto& y) { return x.second.first > y.second.first; });
  std::ostringstream os;
  os.precision(3);
  os << "time by call (calibration, all threads):";
  for (size_t k = 0; k < by.size(); ++k)
    os << (k ? ", " : " ") << by[k].first << "=" << std::fixed << by[k].second.first * 1e3 << " ms ("
       << by[k].second.second << ")";
  return os.str();
}

char Lanes::lane_of(size_t call) const {
  for (const Stage& s : stages_)
    if (call >= s.first && call < s.last) {
      if (!s.paired) return '-';
      return std::find(s.lane[0].begin(), s.lane[0].end(), call) != s.lane[0].end() ? '0' : '1';
    }
  return '.';
}

void Lanes::run_paired(const Stage& stage, Backend& backend, const ExecContext& ctx) {
#ifdef NEXUS_OPENMP
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  const uint64_t number = run_number_;
  auto run_call = [&](size_t c) {
    try {
      list_[c]->run(backend, ctx);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
      failed.store(true);
    }
    done_[c].store(number, std::memory_order_release);
  };
#pragma omp parallel num_threads(2)
  {
    omp_set_num_threads(1);  // this lane's kernels run on its own thread (this region's setting only)
    const int lane = omp_get_thread_num();
    if (omp_get_num_threads() < 2) {  // no second thread here (a caller's parallel region): in order
      for (size_t c = stage.first; c < stage.last && !failed.load(); ++c) run_call(c);
    } else {
      for (size_t c : stage.lane[lane]) {
        for (size_t d : deps_[c]) {
          if (d < stage.first) continue;  // finished before the stage began
          for (unsigned spins = 0; done_[d].load(std::memory_order_acquire) != number && !failed.load(); ++spins) {
            cpu_relax();
            if (spins % 4096 == 4095) std::this_thread::yield();  // a lane sharing its core with the other
          }
        }
        if (failed.load()) break;
        run_call(c);
      }
    }
  }
  if (error) std::rethrow_exception(error);
#else
  for (size_t c = stage.first; c < stage.last; ++c) list_[c]->run(backend, ctx);
#endif
}

double Lanes::simulate(size_t first, size_t n, std::vector<int>* lane_of) const {
  std::vector<double> finish(n);
  double free_at[2] = {0, 0};
  for (size_t k = 0; k < n; ++k) {
    const size_t c = first + k;
    double ready = 0;
    for (size_t d : deps_[c])
      if (d >= first) ready = std::max(ready, finish[d - first]);
    const int lane = std::max(ready, free_at[0]) <= std::max(ready, free_at[1]) ? 0 : 1;
    finish[k] = free_at[lane] = std::max(ready, free_at[lane]) + t_one_[c];
    if (lane_of) (*lane_of)[k] = lane;
  }
  return std::max(free_at[0], free_at[1]);
}

void Lanes::make_schedule() {
#ifdef NEXUS_OPENMP
  // What a two-lane stage costs beyond its calls: starting the second thread and joining it.
  stage_cost_ = 1e30;
  for (int r = 0; r < 16; ++r) {
    const double t0 = now();
#pragma omp parallel num_threads(2)
    { omp_get_thread_num(); }
    stage_cost_ = std::min(stage_cost_, now() - t0);
  }
#endif
  if (mode_ == Mode::paired) t_one_ = t_all_, stage_cost_ = 0;
  const size_t n = list_.size();
  // best[j]: the fastest schedule of calls [0, j); from[j]: where its last stage starts (paired
  // when pair[j]).
  std::vector<double> best(n + 1, 1e300);
  std::vector<size_t> from(n + 1, 0);
  std::vector<bool> pair(n + 1, false);
  best[0] = 0;
  for (size_t i = 0; i < n; ++i) {
    if (best[i] + t_all_[i] < best[i + 1]) best[i + 1] = best[i] + t_all_[i], from[i + 1] = i, pair[i + 1] = false;
    for (size_t len = 2; len <= kWindow && i + len <= n && !alone_[i + len - 1]; ++len) {
      if (alone_[i]) break;
      const double t = best[i] + stage_cost_ + simulate(i, len, nullptr);
      if (t < best[i + len]) best[i + len] = t, from[i + len] = i, pair[i + len] = true;
    }
  }
  stages_.clear();
  for (size_t j = n; j > 0; j = from[j]) {
    Stage s{from[j], j, pair[j], {}};
    if (s.paired) {
      std::vector<int> lane(j - s.first);
      simulate(s.first, j - s.first, &lane);
      for (size_t k = 0; k < lane.size(); ++k) s.lane[lane[k]].push_back(s.first + k);
    }
    stages_.push_back(std::move(s));
  }
  std::reverse(stages_.begin(), stages_.end());
  estimate_ = best[n];
  sequential_ = 0;
  for (double t : t_all_) sequential_ += t;
}

std::string Lanes::summary() const {
  std::ostringstream os;
  os << "lanes: ";
  if (threads_ < 2) return os.str() + "off (one thread)";
  if (stages_.empty()) return os.str() + "calibrating (" + std::to_string(calibrated_) + " of " +
                              std::to_string(kTimedAll + 1) + " timed runs done)";
  size_t paired = 0, calls = 0;
  for (const Stage& s : stages_)
    if (s.paired) paired++, calls += s.last - s.first;
  os.precision(3);
  os << stages_.size() << " stages, " << paired << " of them two-lane with " << calls << " of " << list_.size()
     << " calls; estimated " << estimate_ * 1e3 << " ms a step against " << sequential_ * 1e3
     << " ms in order on " << threads_ << " threads";
  if (scheduled_.runs) os << "; measured " << scheduled_.mean() * 1e3 << " ms (" << scheduled_.runs << " replays)";
  if (in_order_.runs) os << " against " << in_order_.mean() * 1e3 << " ms in order (" << in_order_.runs << " replays)";
  return os.str();
}

}  // namespace nx::compile
