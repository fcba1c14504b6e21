// Two-lane replay of a CPU plan (docs/compiler.md, "Lanes"). A small step on a few cores spends
// much of its time in kernels too small to keep every thread busy: a 512 x 128 x 128 GEMM runs
// 1.0-1.3x faster on two threads than on one. Independent calls (a linear's dX and dW, q/k/v's
// projections) can instead run side by side, one thread each. The replay measures every call
// with all threads and with one, then splits the list into stages by dynamic programming over
// those times: a stage is either one call on all threads, or a run of consecutive calls spread
// over two lanes (one thread each) in list order, a lane waiting for a call of the other lane
// only where the plan's memory says it must (a read after a write, or a write after a read or
// write, of overlapping bytes).
//
// Results are bit-identical to the sequential replay: every CPU kernel computes each output in
// an order that does not depend on the thread count (fixed reduction chunks, one owner per GEMM
// tile), and the dependencies keep every read after the write it saw in the list.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compile/trace.hpp"

namespace nx::compile {

// Bytes [lo, hi) of memory a call reads, or writes when `written`.
struct MemRange {
  uintptr_t lo, hi;
  bool written;
};

class Lanes {
 public:
  // How the schedule is made and run (NEXUS_PLAN_LANES, read at each compile).
  enum class Mode {
    measured,   // from each call's measured times (the default)
    alternate,  // as measured, but every other scheduled replay runs in order instead, and both
                // are timed (summary): the lanes against the in-order replay in one process on a
                // machine whose speed drifts
    paired,     // every call taken as fast on one thread as on all, and a stage as free: any calls
                // the memory lets run side by side do, whatever the timings (for tests, which must
                // not depend on how loaded the machine is)
  };
  // list: the replayed calls in order; ranges[i]: the memory call i touches; alone[i]: call i
  // must run with nothing beside it (it reads memory its ranges do not name).
  Lanes(std::vector<Call*> list, const std::vector<std::vector<MemRange>>& ranges, std::vector<bool> alone,
        Mode mode);
  ~Lanes();
  // One replay of the list: in order while calibrating (the first two runs time each call on all
  // threads, the third on one), then by the schedule made from those times; in order when fewer
  // than two threads are available. A changed thread count starts the calibration again.
  void run(Backend& backend, const ExecContext& ctx);
  // One line: stages, calls in two lanes, the schedule's estimate against the in-order time,
  // and the measured mean replay times.
  std::string summary() const;
  // Call i's lane for the plan's table: '0' or '1' in a two-lane stage, '-' on all threads, '.'
  // before the schedule is made.
  char lane_of(size_t call) const;
  // Call i's time on all threads as the calibration measured it (seconds, the fastest of its
  // timed runs); negative before it was measured.
  double call_seconds(size_t call) const;
  // One line: the calibration's times summed by call name, the longest first, as
  // "name=ms ms (calls)" ("" before the calibration ends).
  std::string time_by_call_name() const;

 private:
  struct Stage {
    size_t first, last;           // calls [first, last)
    bool paired;                  // two lanes, or one call on all threads
    std::vector<size_t> lane[2];  // the calls of each lane, in list order
  };
  void run_sequential(Backend& backend, const ExecContext& ctx, std::vector<double>* seconds, bool one_thread);
  void run_paired(const Stage& stage, Backend& backend, const ExecContext& ctx);
  void make_schedule();
  // Simulates calls [first, first + n) on two lanes from time 0 (each call when its lane is free
  // and its dependencies in the stage are done); the makespan, and each call's lane when asked.
  double simulate(size_t first, size_t n, std::vector<int>* lane_of) const;

  std::vector<Call*> list_;
  std::vector<std::vector<size_t>> deps_;  // per call: the earlier calls within a stage's reach it must follow
  std::vector<bool> alone_;
  std::vector<double> t_all_, t_one_;      // measured seconds per call: all threads, one thread
  double stage_cost_ = 0;                  // seconds to start and join a two-lane stage
  std::vector<Stage> stages_;
  double estimate_ = 0, sequential_ = 0;
  struct Timer {
    double seconds = 0;
    int64_t runs = 0;
    void add(double s) { seconds += s, ++runs; }
    double mean() const { return seconds / double(runs); }
  } scheduled_, in_order_;
  Mode mode_;
  int threads_ = 0;                        // the thread count the schedule was made for
  int calibrated_ = 0;                     // runs timed so far (kTimedAll + 1: scheduled)
  std::unique_ptr<std::atomic<uint64_t>[]> done_;  // per call: the run number that finished it
  uint64_t run_number_ = 0;
};

}  // namespace nx::compile
