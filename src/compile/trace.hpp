// Trace: one run of a step with every backend call of the plan's device recorded (the kernels
// with their arguments, uploads of host bytes) and every allocation's lifetime, in call order.
// Installed as the thread's CaptureHooks (core/capture_hooks.hpp) while the step runs, it hands
// ops a recording backend that forwards each call to the device's own backend after noting it,
// so the traced run computes real results. Each memory argument is resolved when recorded to
// the buffer it lies in (an allocation of the trace, or a tensor made before it), because a
// later allocation may reuse the address.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/backend.hpp"
#include "core/fused_program.hpp"

namespace nx::compile {

// An elementwise kernel call as fusion sees it (unary, binary or copy): its op, parameters and
// views (pointing into the call, so that they follow its rewrites). refs[0] is dst's, then the
// inputs' in order.
struct ElementwiseCall {
  int kind;  // FusedInstr::Kind
  int op;
  double p0 = 0, p1 = 0;
  View* dst;
  View* in[2];
  int ninputs;
};

// A reduce_rows kernel call (dst [rows] = op over each row of the contiguous src [rows, cols]);
// refs[0] is dst's, refs[1] src's.
struct ReduceRowsCall {
  ReduceOp op;
  View* dst;
  View* src;
  int64_t rows, cols;
};

// Where a memory argument lies: in allocation `index` of the trace (Internal) or in external
// buffer `index` (a storage that existed before the trace), `offset` bytes in.
struct BufferRef {
  enum Kind { Internal, External } kind;
  size_t index;
  size_t offset;
  bool written;
};
// Which buffer a ref lies in (kind and index; the offset within it left out).
using BufferId = std::pair<int, size_t>;
inline BufferId id_of(const BufferRef& r) { return {int(r.kind), r.index}; }

// One recorded call. Its memory arguments are visited in a fixed order, each with its pointer
// (which the compiler rewrites), whether the call writes it, and its view when it has one.
class Call {
 public:
  virtual ~Call() = default;
  virtual const char* name() const = 0;
  virtual void run(Backend& backend, const ExecContext& ctx) = 0;
  using Visitor = std::function<void(void*& ptr, bool written, const View* view)>;
  virtual void visit(const Visitor& f) = 0;
  // Its number arguments ("op=3 rows=64 eps=1e-05"...), for the plan's table.
  virtual std::string scalars() const { return ""; }
  // Fills *out and says true when the call is an elementwise unary, binary or copy kernel.
  virtual bool elementwise(ElementwiseCall*) { return false; }
  // Fills *out and says true when the call is a reduce_rows kernel.
  virtual bool reduce_rows(ReduceRowsCall*) { return false; }
  // A norm_forward call's output view y (its first memory argument, refs[0]); null for others.
  virtual View* norm_output() { return nullptr; }
  // An upload of host bytes gives them a device copy (owned by the caller's list), so that a
  // replay, and a CUDA graph, copies device to device; other calls do nothing.
  virtual void make_device_constant(Backend&, const ExecContext&, std::vector<void*>*) {}
  // Bytes of host data the call keeps for replays (an upload's), counted in a plan's memory.
  virtual size_t constant_bytes() const { return 0; }
  std::vector<BufferRef> refs;  // one per visited non-null pointer, in visit order
  std::string api;              // the C function that made the call (for the plan's table)
};

struct Allocation {
  void* ptr;
  size_t bytes;
  size_t born, died;  // the number of calls recorded before its allocation and before its free
  std::weak_ptr<Storage> storage;  // the tensor storage on it, once a kernel has seen one
  bool written = false;            // by a recorded call
  static constexpr size_t kAlive = ~size_t(0);
};

// Values that change every step (CaptureHooks::dynamic_values, random_draw): memory of the plan's
// device (host memory on the CPU) that kernels read, refilled on the host and uploaded before
// every replay.
struct DynamicValues {
  virtual ~DynamicValues() = default;
  virtual const void* refill() = 0;  // runs the fill; returns the bytes to upload
  void* device = nullptr;
  size_t bytes = 0;
  Tensor owner;  // set when device is a caller's tensor (refill_before_replay), not the trace's memory
};
template <class T>
struct DynamicArray final : DynamicValues {
  std::vector<T> host;
  std::function<void(T*)> fill;
  const void* refill() override {
    fill(host.data());
    return host.data();
  }
};

class Trace final : public CaptureHooks {
 public:
  explicit Trace(Device device);
  ~Trace() override;
  Device device() const { return device_; }

  // CaptureHooks
  Backend* backend_for(Device device) override;
  void observe(const Tensor& t) override;
  void index_range_trusted(const Tensor& index, int64_t n) override;
  void host_read(const Tensor& t) override;
  void host_action(std::function<void()> action) override;
  const double* dynamic_values(Device device, size_t n, std::function<void(double*)> fill) override;
  void refill_before_replay(const Tensor& t, std::function<void(void*)> fill) override;
  void after_replay(std::function<void()> action) override;
  const uint64_t* random_draw(Device device, uint64_t seed, uint64_t offset, uint64_t count) override;
  [[noreturn]] void refuse(const std::string& why) override;
  void guard(std::function<bool()> still_valid) override;
  // Called once the step has run: the numbers it took from the random generator become a host
  // action that takes as many at every replay.
  void finish();

  // What the recording backend reports.
  void record(std::unique_ptr<Call> call);
  void on_allocate(void* ptr, size_t bytes);
  void on_deallocate(void* ptr);

  Backend& inner;  // the device's own backend
  std::vector<std::unique_ptr<Call>> calls;
  std::vector<Allocation> allocations;
  std::vector<std::shared_ptr<Storage>> externals;   // kept alive by the plan
  std::vector<std::function<void()>> host_actions;
  std::vector<std::function<void()>> after_actions;  // after_replay's, in order
  std::vector<std::unique_ptr<DynamicValues>> dynamics;
  std::vector<std::function<bool()>> guards;
  struct IndexRequirement {  // the index's buffer (offset unused), resolved when it was trusted
    BufferRef buffer;
    int64_t n;
  };
  std::vector<IndexRequirement> index_requirements;
  std::vector<std::weak_ptr<TensorImpl>> leaves;  // tensors seen that require grad (their .grad is guarded)
  std::string refusal;                             // set when the step did something a plan cannot replay
  // Calls (indices into calls) that read device memory of the step no recorded call had written:
  // uninitialized reads, which a replay from an arena cannot reproduce (the plan's table lists them).
  std::vector<size_t> unwritten_reads;

 private:
  Device device_;
  std::unique_ptr<Backend> recording_;
  std::map<uintptr_t, size_t> live_;           // base address -> allocations index, while allocated
  std::map<uintptr_t, size_t> external_at_;    // base address -> externals index
  std::set<const TensorImpl*> leaf_set_;
  bool resolve(void* p, BufferRef* out) const;
  template <class T>
  DynamicArray<T>& add_dynamic(size_t n, std::function<void(T*)> fill);
  void upload_dynamic(DynamicValues& d);
  // The random draws on the plan's device. The step takes the numbers [start, start + taken) of
  // the generator (seed); each draw lies at start + its delta. A replay takes `taken` numbers
  // again (replay_start: where they begin) and writes (seed, replay_start + delta) for each
  // draw into its slot, two words, kRandomSlots slots per DynamicValues block.
  static constexpr size_t kRandomSlots = 32;
  uint64_t random_seed_, random_start_, random_taken_ = 0, random_end_ = 0;
  uint64_t replay_seed_, replay_start_;
  std::vector<uint64_t> random_deltas_;
  DynamicArray<uint64_t>* random_block_ = nullptr;  // the block of the latest draw
};

// Removes from list the calls whose drop flag (by position) is set, keeping the others' order.
inline void remove_calls(std::vector<Call*>& list, const std::vector<bool>& drop) {
  std::vector<Call*> kept;
  for (size_t i = 0; i < list.size(); ++i)
    if (!drop[i]) kept.push_back(list[i]);
  list = std::move(kept);
}

// Installs a trace as this thread's hooks for its lifetime.
class TraceScope {
 public:
  explicit TraceScope(Trace& trace);
  ~TraceScope();
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  CaptureHooks* previous_;
};

}  // namespace nx::compile
