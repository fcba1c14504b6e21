// Trace -> compile -> replay (docs/compiler.md). A Plan wraps a step function (forward, backward,
// optimizer step on given inputs). A new input signature's first call runs eagerly (lazily made
// state, such as optimizer moments, comes into being); its second call is traced (src/compile/
// trace.hpp) and compiled into a CompiledStep: the recorded kernel list with dead calls removed,
// every temporary placed in one arena by liveness, uploads turned into device constants, and on
// CUDA the whole list captured once as a CUDA graph. Later calls replay it: inputs are copied in,
// host actions (step counts, the random numbers the step takes) run, step values (lr, bias
// corrections, where each random draw starts) are written to device memory, and the kernels run
// with no dispatch, autodiff or allocation. Guards (module mode, requires_grad,
// a parameter's gradient replaced, deterministic mode, autocast, an optimizer's frozen lr) send a
// stale plan back to capture.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "compile/trace.hpp"

namespace nx::compile {

struct PlanStats {
  int64_t eager_runs = 0, captures = 0, recaptures = 0, replays = 0;
  // Of the step compiled last:
  int64_t ops = 0, ops_eliminated = 0, uploads = 0, fused_ops = 0, fused_groups = 0;
  int64_t arena_bytes = 0, eager_peak_bytes = 0, kept_bytes = 0;
  bool cuda_graph = false;
  // Of all the plan's compiled steps:
  int64_t held_bytes = 0, evictions = 0;
};

using StepFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;

class CompiledStep;

class Plan {
 public:
  // At most max_steps compiled steps, holding at most max_bytes together (0: no byte bound).
  Plan(StepFn fn, size_t max_steps, size_t max_bytes, bool cuda_graph, bool fuse);
  ~Plan();
  // Runs the step on inputs (all on one device): eagerly, by capturing it, or by replaying.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs);
  PlanStats stats() const;
  // The step compiled last, as a table (op, call, buffers with arena offsets) or Graphviz DOT.
  std::string table() const;
  std::string dot() const;

 private:
  struct Entry {
    int64_t calls = 0;
    uint64_t last_use = 0;
    std::unique_ptr<CompiledStep> step;
  };
  StepFn fn_;
  // Drops the least recently used compiled step other than keep; false when there is none.
  bool evict_one(const CompiledStep* keep);
  size_t held_bytes() const;

  size_t max_steps_, max_bytes_;
  bool cuda_graph_, fuse_;
  std::map<std::string, Entry> entries_;
  uint64_t clock_ = 0;
  PlanStats stats_;
  const CompiledStep* last_ = nullptr;
  std::mutex busy_;
};

}  // namespace nx::compile
