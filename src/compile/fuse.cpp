#include "compile/fuse.hpp"

#include "core/cuda_iface.hpp"

#include <cstdlib>
#include <limits>
#include <map>
#include <numeric>
#include <sstream>

namespace nx::compile {
namespace {

bool f32_family(DType d) { return d == DType::F32 || d == DType::F16 || d == DType::BF16; }

// The same elements in the same order. A dimension of size 1 is never stepped along, so its stride
// does not count (a broadcast operand's view gives it stride 0, the tensor its own stride).
bool same_view(const View& a, const View& b) {
  if (a.data != b.data || a.shape != b.shape || a.dtype != b.dtype) return false;
  for (size_t d = 0; d < a.shape.size(); ++d)
    if (a.shape[d] != 1 && a.strides[d] != b.strides[d]) return false;
  return true;
}

// Whether two views with the same shape and strides share no element: the view of b is a's moved
// by d elements, a's innermost dimension (stride 1, size n) spans [0, n) modulo P, the gcd of the
// other strides, and b's spans [d, d + n) modulo P. Enough for the halves of a concatenation along
// the last dimension (RoPE's cat), which two copies of one run write; false when unsure.
bool disjoint(const View& a, const View& b) {
  if (a.dtype != b.dtype || a.shape != b.shape) return false;
  const int64_t es = int64_t(dtype_size(a.dtype));
  const int64_t bytes = static_cast<const char*>(b.data) - static_cast<const char*>(a.data);
  if (bytes % es != 0) return false;
  const int64_t d = bytes / es;
  int64_t n = 0, period = 0;
  for (size_t k = 0; k < a.shape.size(); ++k) {
    if (a.shape[k] == 1) continue;
    if (a.strides[k] != b.strides[k]) return false;
    if (a.strides[k] == 1 && n == 0) n = a.shape[k];
    else period = std::gcd(period, a.strides[k] < 0 ? -a.strides[k] : a.strides[k]);
  }
  if (n == 0) return false;
  if (period == 0) return d >= n || d <= -n;
  const int64_t r = ((d % period) + period) % period;
  return r >= n && r + n <= period;
}


// A run of calls fused into one kernel. Its memory arguments are the distinct input views (read)
// and the stored outputs (written), visited in that order.
// With a reduction, the run's register reduce_reg_ is not stored but reduced as the reduce_rows
// call after the run did (into reduce_dst_, written last).
class FusedCall final : public Call {
 public:
  const char* name() const override { return "fused"; }
  void run(Backend& backend, const ExecContext& ctx) override {
    FusedProgram p = program_;
    for (int k = 0; k < p.ninputs; ++k) p.inputs[k].data = inputs_[size_t(k)].data;
    for (int k = 0; k < p.noutputs; ++k) p.outputs[k].data = outputs_[size_t(k)].data;
    if (reduce_reg_ >= 0) backend.fused_reduce_rows(ctx, p, reduce_reg_, reduce_op_, reduce_dst_, rows_, cols_);
    else backend.fused_elementwise(ctx, p);
  }
  void visit(const Visitor& f) override {
    for (View& v : inputs_) f(v.data, false, &v);
    for (View& v : outputs_) f(v.data, true, &v);
    if (reduce_reg_ >= 0) f(reduce_dst_.data, true, &reduce_dst_);
  }
  std::string scalars() const override {
    std::string s = " [" + ops_ + "]" + (generated_ ? " generated" : "");
    if (reduce_reg_ >= 0)
      s += " -> reduce_rows op=" + std::to_string(int(reduce_op_)) + " rows=" + std::to_string(rows_) +
           " cols=" + std::to_string(cols_);
    return s;
  }

  FusedProgram program_;
  bool generated_ = false;  // CUDA: runs its own generated kernel (else the interpreter)
  std::vector<View> inputs_, outputs_;
  std::string ops_;
  int reduce_reg_ = -1;  // >= 0: the register reduced instead of stored
  ReduceOp reduce_op_ = ReduceOp::Sum;
  View reduce_dst_;
  int64_t rows_ = 0, cols_ = 0;
};

struct Member {
  Call* call;
  ElementwiseCall ew;
};

// The largest run fused, in elements. GPU with generated kernels (NVRTC, src/cuda/fused_codegen.cpp):
// no cap; each is a straight-line vectorized loop that reads and writes only what the run must.
// GPU with the interpreter only: above 2^20 the unfused kernels (16-byte vector loads) beat the
// interpreter's scalar loop; below it a step is launch-bound and fusion wins. Measured on the H200
// (session 7, docs/benchmarks.md): fusing every size made the GPT-2 124M bf16 step 0.81x its
// unfused replay, while the 6 x 256 model (1M-element activations) gained. CPU: no cap. Its
// interpreter runs the eager kernels' own vector loops on tiles that stay in L1, so a fused run
// costs no more compute than the unfused ops and saves their memory traffic at every size.
// NEXUS_FUSE_MAX_NUMEL overrides both (for measuring; 0 turns fusion off; docs/benchmarks.md).
int64_t fuse_max_numel(Device device) {
  static const char* env = std::getenv("NEXUS_FUSE_MAX_NUMEL");
  if (env && *env) return std::strtoll(env, nullptr, 10);
  if (device.is_cpu() || cuda::fused_codegen_enabled()) return std::numeric_limits<int64_t>::max();
  return int64_t(1) << 20;
}

// cpu: a cast of a bool mask to a float type may join too (the CPU interpreter reads bool inputs;
// the generated CUDA kernels do not).
bool fusible(Call* c, ElementwiseCall* ew, int64_t max_numel, bool cpu) {
  if (!c->elementwise(ew) || ew->dst->numel() == 0 || ew->dst->numel() > max_numel ||
      ew->dst->shape.size() > size_t(kFuseMaxRank))
    return false;
  if (!f32_family(ew->dst->dtype)) return false;
  for (int k = 0; k < ew->ninputs; ++k) {
    const bool mask = cpu && ew->kind == FusedInstr::Copy && ew->in[k]->dtype == DType::Bool;
    if ((!f32_family(ew->in[k]->dtype) && !mask) || ew->in[k]->shape != ew->dst->shape) return false;
  }
  if (ew->kind == FusedInstr::Binary && is_comparison(BinaryOp(ew->op))) return false;
  return c->refs.size() == size_t(1 + ew->ninputs);
}

class Fuser {
 public:
  Fuser(const Trace& trace, const std::vector<Call*>& list)
      : trace_(trace), list_(list), max_numel_(fuse_max_numel(trace.device())) {
    // Where each buffer is read, by list position: an intermediate is dropped only when every
    // read of it is inside its own group.
    for (size_t i = 0; i < list.size(); ++i)
      for (const BufferRef& r : list[i]->refs)
        if (!r.written) readers_[id_of(r)].push_back(i);
  }

  FusionResult run() {
    for (size_t i = 0; i < list_.size(); ++i) {
      Member m{list_[i], {}};
      const bool ok = fusible(m.call, &m.ew, max_numel_, trace_.device().is_cpu());
      if (ok && !group_.empty() && joins(m)) {
        group_.push_back(m);
        positions_.push_back(i);
        continue;
      }
      if (!group_.empty() && ends_in_reduction(i)) continue;
      flush();
      if (ok) {
        group_.push_back(m);
        positions_.push_back(i);
      } else {
        out_.list.push_back(list_[i]);
      }
    }
    flush();
    return std::move(out_);
  }

 private:
  // Whether m can join the group: same shape, its inputs either a member's exact output or
  // memory the group does not write, and its output memory untouched by the group (or read by
  // it through the very same view, element by element, or written by it at other elements).
  bool joins(const Member& m) const {
    if (group_.size() >= size_t(kFuseMaxInstrs) || m.ew.dst->shape != group_[0].ew.dst->shape) return false;
    const BufferId dst = id_of(m.call->refs[0]);
    for (const Member& g : group_) {
      if (id_of(g.call->refs[0]) == dst && !disjoint(*g.ew.dst, *m.ew.dst)) return false;  // written twice
      for (int k = 0; k < g.ew.ninputs; ++k)
        if (id_of(g.call->refs[size_t(1 + k)]) == dst && !same_view(*g.ew.in[k], *m.ew.dst)) return false;
    }
    for (int k = 0; k < m.ew.ninputs; ++k) {
      const BufferId in = id_of(m.call->refs[size_t(1 + k)]);
      for (const Member& g : group_)
        if (id_of(g.call->refs[0]) == in && !same_view(*g.ew.dst, *m.ew.in[k])) return false;
    }
    return true;
  }

  // CPU: the reduce_rows call at list position i consumes the last member's result, which nothing
  // else reads; the run becomes one call that reduces that result instead of storing it (the
  // bits of reduce_rows: Backend::fused_reduce_rows). Needs every operand contiguous (each row of
  // the reduction is then one range of elements) and room for one more output; a row of the
  // reduction is held in a buffer per thread, so rows of more than 2^20 elements stay unfused.
  bool ends_in_reduction(size_t i) {
    const char* env = std::getenv("NEXUS_FUSE_REDUCE");  // "0": no reductions fused (read at each compile)
    if (!trace_.device().is_cpu() || (env && std::string(env) == "0")) return false;
    ReduceRowsCall rc;
    if (!list_[i]->reduce_rows(&rc) || rc.op == ReduceOp::ArgMax || list_[i]->refs.size() != 2) return false;
    const Member& last = group_.back();
    const BufferRef& src = list_[i]->refs[1];
    // the same elements in the same order (a reshape between them changes neither)
    if (id_of(src) != id_of(last.call->refs[0]) || rc.src->data != last.ew.dst->data ||
        rc.src->dtype != last.ew.dst->dtype || !contiguous_over_shape(*rc.src))
      return false;
    if (rc.rows * rc.cols != last.ew.dst->numel() || (rc.rows > 1 && rc.cols > (int64_t(1) << 20))) return false;
    const BufferId dst = id_of(list_[i]->refs[0]);
    for (const Member& g : group_)
      for (const BufferRef& r : g.call->refs)
        if (id_of(r) == dst) return false;  // rows are written while later rows are still read
    for (const Member& g : group_) {
      if (!contiguous_over_shape(*g.ew.dst)) return false;
      for (int k = 0; k < g.ew.ninputs; ++k)
        if (!contiguous_over_shape(*g.ew.in[k])) return false;
    }
    positions_.push_back(i);
    int stored = 0;
    for (size_t g = 0; g < group_.size(); ++g) stored += needed(group_[g].call->refs[0]);
    if (needed(src) || stored >= kFuseMaxOutputs) {
      positions_.pop_back();
      return false;
    }
    reduction_ = rc;
    reduce_call_ = list_[i];
    build();
    reduce_call_ = nullptr;
    group_.clear();
    positions_.clear();
    return true;
  }
  // Over the group's shape: element e at offset e (dimensions of size 1 not stepped).
  static bool contiguous_over_shape(const View& v) {
    int64_t expect = 1;
    for (size_t d = v.shape.size(); d-- > 0;) {
      if (v.shape[d] != 1 && v.strides[d] != expect) return false;
      expect *= v.shape[d];
    }
    return true;
  }
  // Whether a member's result must be stored: read outside the group's positions, or outliving the step.
  bool needed(const BufferRef& r) const {
    bool need = r.kind == BufferRef::External || trace_.allocations[r.index].died == Allocation::kAlive;
    auto it = readers_.find(id_of(r));
    if (it != readers_.end())
      for (size_t pos : it->second) need = need || pos < positions_.front() || pos > positions_.back();
    return need;
  }

  void emit_unfused() {
    for (const Member& g : group_) out_.list.push_back(g.call);
    if (reduce_call_) out_.list.push_back(reduce_call_);
  }

  void flush() {
    if (group_.size() >= 2) build();
    else emit_unfused();
    group_.clear();
    positions_.clear();
  }

  void build() {
    auto fc = std::make_unique<FusedCall>();
    FusedProgram& p = fc->program_;
    const View& shape_view = *group_[0].ew.dst;
    p.rank = int(shape_view.shape.size());
    p.numel = shape_view.numel();
    for (int d = 0; d < p.rank; ++d) p.shape[d] = shape_view.shape[size_t(d)];
    std::ostringstream ops;
    std::vector<BufferRef> in_refs;
    bool contiguous = true;
    // The latest member that wrote this buffer through this view gives a register (>= 0); else a
    // load (-1 - input), or kNoRoom when the inputs are full. (Addresses alone can repeat: a freed
    // buffer's address is reused within a step.) kNoRoom is no register number: before it was
    // kFuseMaxInputs (8), a read of member 8's result looked like "too many inputs" and every
    // group of more than 9 members reading it, RoPE's 16 calls of q and k among them, ran unfused.
    constexpr int kNoRoom = std::numeric_limits<int>::min();
    auto operand_of = [&](const View& v, const BufferRef& r, size_t member) -> int {
      for (size_t g = member; g-- > 0;)
        if (id_of(group_[g].call->refs[0]) == id_of(r) && same_view(*group_[g].ew.dst, v)) return int(g);
      for (size_t k = 0; k < fc->inputs_.size(); ++k)
        if (id_of(in_refs[k]) == id_of(r) && same_view(fc->inputs_[k], v)) return -int(k) - 1;
      if (fc->inputs_.size() >= size_t(kFuseMaxInputs)) return kNoRoom;
      fc->inputs_.push_back(v);
      in_refs.push_back(r);
      contiguous = contiguous && contiguous_over_shape(v);
      return -int(fc->inputs_.size());
    };
    for (size_t g = 0; g < group_.size(); ++g) {
      const ElementwiseCall& ew = group_[g].ew;
      FusedInstr& ins = p.instrs[g];
      ins.kind = FusedInstr::Kind(ew.kind);
      ins.op = int16_t(ew.op);
      ins.dtype = ew.dst->dtype;
      ins.p0 = float(ew.p0);
      ins.p1 = float(ew.p1);
      int ops_in[2] = {0, 0};
      for (int k = 0; k < ew.ninputs; ++k) {
        ops_in[k] = operand_of(*ew.in[k], group_[g].call->refs[size_t(1 + k)], g);
        if (ops_in[k] == kNoRoom) return emit_unfused();
      }
      ins.a = int8_t(ops_in[0]);
      ins.b = int8_t(ops_in[1]);
      ops << (g ? "," : "") << group_[g].call->name();
      if (ew.kind == FusedInstr::Unary) ops << ":" << op_name(UnaryOp(ew.op));
      if (ew.kind == FusedInstr::Binary) ops << ":" << op_name(BinaryOp(ew.op));
    }
    p.ninstrs = int(group_.size());
    p.ninputs = int(fc->inputs_.size());
    // Outputs: every member's result that is read outside the group, or outlives the step.
    std::vector<BufferRef> out_refs;
    for (size_t g = 0; g < group_.size(); ++g) {
      const BufferRef& r = group_[g].call->refs[0];
      if (!needed(r)) continue;
      if (fc->outputs_.size() >= size_t(kFuseMaxOutputs)) return emit_unfused();
      p.output_reg[fc->outputs_.size()] = int8_t(g);
      fc->outputs_.push_back(*group_[g].ew.dst);
      out_refs.push_back(r);
      contiguous = contiguous && contiguous_over_shape(*group_[g].ew.dst);
    }
    p.noutputs = int(fc->outputs_.size());
    p.contiguous = contiguous;
    for (int k = 0; k < p.ninputs; ++k) {
      p.inputs[k].dtype = fc->inputs_[size_t(k)].dtype;
      for (int d = 0; d < p.rank; ++d) p.inputs[k].strides[d] = fc->inputs_[size_t(k)].strides[size_t(d)];
    }
    for (int k = 0; k < p.noutputs; ++k) {
      p.outputs[k].dtype = fc->outputs_[size_t(k)].dtype;
      for (int d = 0; d < p.rank; ++d) p.outputs[k].strides[d] = fc->outputs_[size_t(k)].strides[size_t(d)];
    }
    if (reduce_call_) {
      fc->reduce_reg_ = int(group_.size()) - 1;
      fc->reduce_op_ = reduction_.op;
      fc->reduce_dst_ = *reduction_.dst;
      fc->rows_ = reduction_.rows;
      fc->cols_ = reduction_.cols;
      out_refs.push_back(reduce_call_->refs[0]);
      out_.fused_calls++;
      out_.reductions++;
    }
    fc->refs = in_refs;
    fc->refs.insert(fc->refs.end(), out_refs.begin(), out_refs.end());
    for (BufferRef& r : fc->refs) r.written = false;
    for (size_t k = in_refs.size(); k < fc->refs.size(); ++k) fc->refs[k].written = true;
    fc->api = group_[0].call->api;
    fc->ops_ = ops.str();
    out_.fused_calls += int64_t(group_.size());
    out_.groups++;
    out_.list.push_back(fc.get());
    out_.owned.push_back(std::move(fc));
  }

  const Trace& trace_;
  const std::vector<Call*>& list_;
  const int64_t max_numel_;
  std::map<BufferId, std::vector<size_t>> readers_;
  std::vector<Member> group_;
  std::vector<size_t> positions_;
  Call* reduce_call_ = nullptr;  // while building a run that ends in this reduce_rows call
  ReduceRowsCall reduction_{};
  FusionResult out_;
};

}  // namespace

FusionResult fuse_elementwise(const Trace& trace, const std::vector<Call*>& list) { return Fuser(trace, list).run(); }

void prepare_fused_kernels(FusionResult& fusion, Device device) {
  if (device.is_cpu()) return;
  for (auto& call : fusion.owned) {
    auto* fc = static_cast<FusedCall*>(call.get());
    fc->generated_ = cuda::fused_prepare(device.index, fc->program_);
    fusion.generated += fc->generated_;
  }
}

}  // namespace nx::compile
