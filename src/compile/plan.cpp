#include "compile/plan.hpp"

#include "compile/epilogue.hpp"
#include "compile/fuse.hpp"
#include "compile/lanes.hpp"
#include "compile/repeated.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "core/cuda_iface.hpp"
#include "core/profiler.hpp"
#include "ops/autocast.hpp"
#include "ops/ops.hpp"

namespace nx::compile {

// Arena offsets keep every buffer as aligned as the allocators' own blocks (CPU 64, CUDA 512
// bytes), so that kernels take the same vector paths, and round the same way, as in the eager run;
// the eager peak is counted in the same granules.
size_t granule(Device d) { return d.is_cpu() ? 64 : 512; }
size_t round_up(size_t n, size_t g) { return (std::max<size_t>(n, 1) + g - 1) / g * g; }

class CompiledStep {
 public:
  // Traces fn on copies of inputs and compiles it; the traced run's outputs go to *outputs.
  CompiledStep(const StepFn& fn, const std::vector<Tensor>& inputs, bool cuda_graph, bool fuse,
               std::vector<Tensor>* outputs);
  ~CompiledStep();
  bool still_valid() const;
  std::vector<Tensor> replay(const std::vector<Tensor>& inputs);
  void fill_stats(PlanStats* s) const;
  size_t held_bytes() const;  // arena, own inputs, kept buffers, constants
  std::string table() const;
  std::string dot() const;

 private:
  void compile();
  void place_temporaries();
  void place(const std::vector<size_t>& order);  // first fit in this order into place_, arena_bytes_
  void find_in_place();
  void check_index_requirements();
  void make_lanes();
  std::string label(const BufferRef& r) const;
  std::string arena_peak() const;  // what the arena holds at its fullest call

  Device device_;
  Trace trace_;
  std::vector<Tensor> inputs_, outputs_;
  std::vector<bool> keep_;                 // per recorded call: not dead
  std::vector<Call*> list_;                // what a replay runs: the kept calls, fused
  FusionResult fusion_;
  size_t repeated_ = 0;  // repeated elementwise calls dropped (compile/repeated.hpp)
  size_t folded_casts_ = 0;  // casts written by the norm before them (compile/epilogue.hpp)
  std::vector<size_t> place_;              // per allocation: arena offset (temporaries in use)
  std::vector<std::pair<size_t, size_t>> uses_;  // per allocation: first and last position in list_ using it
  std::vector<bool> in_arena_;             // per allocation: a temporary that some call of list_ uses
  // Output buffer -> the input it may share memory with: the call that makes it is the input's
  // last use and computes each element from the same element of that input (find_in_place).
  std::map<size_t, size_t> in_place_;
  std::vector<std::shared_ptr<Storage>> kept_;  // allocations alive after the step (gradients, outputs)
  std::vector<Storage*> written_;          // storages a replay writes (versions bumped)
  std::vector<std::pair<size_t, int64_t>> input_ranges_;  // (input, n): its values must lie in [0, n)
  std::vector<std::pair<std::shared_ptr<Storage>, uint64_t>> frozen_ranges_;  // index storages made before the step
  std::vector<void*> constants_;           // device copies of uploaded bytes
  void* arena_ = nullptr;
  size_t arena_bytes_ = 0, eager_peak_ = 0, kept_bytes_ = 0;
  bool use_graph_, fuse_;
  void* graph_ = nullptr;
  std::unique_ptr<Lanes> lanes_;  // the CPU's two-lane replay (compile/lanes.hpp); null elsewhere
  // Guards: what the capture assumed.
  uint64_t epoch_;
  bool deterministic_, grad_enabled_;
  std::optional<DType> autocast_;
  // Each parameter's gradient after the step: one the step made (zero_grad inside it) is put
  // back by every replay, as an eager step would give it new ones; one made before must stay.
  struct LeafGrad {
    std::weak_ptr<TensorImpl> leaf;
    std::shared_ptr<TensorImpl> grad;
    bool made_by_step;
  };
  std::vector<LeafGrad> leaf_grads_;
};

CompiledStep::CompiledStep(const StepFn& fn, const std::vector<Tensor>& inputs, bool cuda_graph, bool fuse,
                           std::vector<Tensor>* outputs)
    : device_(inputs.at(0).device()), trace_(device_), use_graph_(cuda_graph), fuse_(fuse) {
  {
    GradModeGuard off(false);
    for (const Tensor& x : inputs) inputs_.push_back(clone(x));  // the plan's own input buffers
  }
  epoch_ = capture_epoch();
  deterministic_ = deterministic();
  grad_enabled_ = grad_enabled();
  autocast_ = autocast_dtype(device_);
  try {
    TraceScope scope(trace_);
    outputs_ = fn(inputs_);
    trace_.finish();
  } catch (const Error& e) {
    if (!trace_.refusal.empty()) fail(NX_ERR_STATE, current_api(), ": the step cannot be captured: ", trace_.refusal);
    throw;
  }
  if (!trace_.refusal.empty()) fail(NX_ERR_STATE, current_api(), ": the step cannot be captured: ", trace_.refusal);
  for (size_t i = 0; i < outputs_.size(); ++i)
    if (outputs_[i].device() != device_)
      fail(NX_ERR_DEVICE, current_api(), ": output ", i, " of the step is on ", device_str(outputs_[i].device()),
           ", its inputs on ", device_str(device_));
  compile();
  for (const auto& action : trace_.after_actions) action();
  *outputs = outputs_;
}

CompiledStep::~CompiledStep() {
  if (graph_) cuda::graph_destroy(graph_);
  else if (!device_.is_cpu()) device_backend(device_).synchronize(exec_context(device_));
  Backend& be = device_backend(device_);
  for (void* c : constants_) be.deallocate(c, 0);
  if (arena_) be.deallocate(arena_, arena_bytes_);
}

void CompiledStep::compile() {
  auto& calls = trace_.calls;
  auto& allocs = trace_.allocations;
  // Dead calls: walking backwards, a call is kept when it writes memory that outlives the step
  // (a tensor made before it, a kept allocation) or that a kept later call reads.
  keep_.assign(calls.size(), false);
  std::vector<bool> needed(allocs.size(), false);
  for (size_t c = calls.size(); c-- > 0;) {
    bool live = false;
    for (const BufferRef& r : calls[c]->refs)
      if (r.written)
        live = live || r.kind == BufferRef::External || allocs[r.index].died == Allocation::kAlive || needed[r.index];
    if (!live) continue;
    keep_[c] = true;
    for (const BufferRef& r : calls[c]->refs)
      if (r.kind == BufferRef::Internal) needed[r.index] = true;
  }
  for (size_t c = 0; c < calls.size(); ++c)
    if (keep_[c]) list_.push_back(calls[c].get());
  // NEXUS_PLAN_REPEATED=0 keeps repeated calls (for measuring what dropping them gives)
  static const char* repeated_env = std::getenv("NEXUS_PLAN_REPEATED");
  if (!(repeated_env && std::string(repeated_env) == "0")) repeated_ = drop_repeated_calls(trace_, list_);
  // NEXUS_PLAN_NORM_CASTS=0 keeps the casts after norms as calls of their own (for measuring)
  static const char* norm_casts_env = std::getenv("NEXUS_PLAN_NORM_CASTS");
  if (!(norm_casts_env && std::string(norm_casts_env) == "0")) folded_casts_ = fold_casts_into_norms(trace_, list_);
  if (fuse_) {
    fusion_ = fuse_elementwise(trace_, list_);
    prepare_fused_kernels(fusion_, device_);
    list_ = fusion_.list;
  }
  // Allocations alive after the step stay where they are, held by the plan; the others that a
  // kept call touches go to the arena.
  for (size_t a = 0; a < allocs.size(); ++a) {
    if (allocs[a].died != Allocation::kAlive || !needed[a]) continue;
    std::shared_ptr<Storage> s = allocs[a].storage.lock();
    if (!s) fail(NX_ERR_INTERNAL, current_api(), ": a buffer alive after the captured step has no tensor");
    kept_bytes_ += allocs[a].bytes;
    kept_.push_back(std::move(s));
  }
  place_temporaries();
  check_index_requirements();
  // Point every kept call's temporaries into the arena.
  Backend& be = trace_.inner;
  const ExecContext ctx = exec_context(device_);
  if (arena_bytes_) arena_ = be.allocate(ctx, arena_bytes_);
  std::set<Storage*> written;
  for (Call* call : list_) {
    size_t k = 0;
    call->visit([&](void*& p, bool, const View*) {
      const BufferRef& r = call->refs.at(k++);
      if (r.kind == BufferRef::External) {
        if (r.written) written.insert(trace_.externals[r.index].get());
        return;
      }
      const Allocation& a = allocs[r.index];
      if (a.died == Allocation::kAlive) {
        if (r.written) written.insert(allocs[r.index].storage.lock().get());
        return;
      }
      p = static_cast<char*>(arena_) + place_[r.index] + r.offset;
    });
  }
  written.erase(nullptr);
  written_.assign(written.begin(), written.end());
  // Uploaded bytes become device constants, so that a replay copies device to device.
  if (!device_.is_cpu())
    for (Call* call : list_) call->make_device_constant(be, ctx, &constants_);
  for (const auto& leaf : trace_.leaves) {
    auto impl = leaf.lock();
    if (!impl) continue;
    bool made = false;
    for (const auto& k : kept_) made = made || (impl->grad && impl->grad->storage == k);
    leaf_grads_.push_back({leaf, impl->grad, made});
  }
  if (!device_.is_cpu() && use_graph_)
    graph_ = cuda::graph_capture(device_.index, [&](void* stream) {
      const ExecContext gctx{device_, stream};
      for (Call* call : list_) call->run(be, gctx);
    });
  if (device_.is_cpu()) make_lanes();
}

// The memory each call touches, whole buffers (an arena slot, a kept buffer, a tensor made
// before the step) at the addresses the replay uses, for the two-lane schedule's dependencies.
// NEXUS_PLAN_LANES=0 replays in order; =alternate measures both; =paired pairs whatever the
// memory allows (compile/lanes.hpp). Read at each compile, so that a test can set it for one plan.
void CompiledStep::make_lanes() {
  const char* env = std::getenv("NEXUS_PLAN_LANES");
  const std::string mode = env ? env : "";
  if (mode == "0") return;
  std::vector<std::vector<MemRange>> ranges(list_.size());
  std::vector<bool> alone(list_.size(), false);
  for (size_t i = 0; i < list_.size(); ++i) {
    Call& call = *list_[i];
    size_t k = 0;
    call.visit([&](void*& p, bool written, const View*) {
      const BufferRef& r = call.refs.at(k++);
      const size_t bytes = r.kind == BufferRef::External ? trace_.externals[r.index]->nbytes
                                                         : trace_.allocations[r.index].bytes;
      const uintptr_t base = reinterpret_cast<uintptr_t>(p) - r.offset;
      ranges[i].push_back({base, base + std::max<size_t>(bytes, 1), written});
    });
    // Adam reads its step values and a scaler's skip flag through pointers that are not memory
    // arguments: it runs with nothing beside it.
    alone[i] = std::strcmp(call.name(), "adam_multi") == 0;
  }
  const Lanes::Mode lanes_mode = mode == "alternate" ? Lanes::Mode::alternate
                                 : mode == "paired"  ? Lanes::Mode::paired
                                                     : Lanes::Mode::measured;
  lanes_ = std::make_unique<Lanes>(list_, ranges, std::move(alone), lanes_mode);
}

void CompiledStep::place_temporaries() {
  const auto& allocs = trace_.allocations;
  // Peak of the eager run: every allocation of the step alive at once, at the worst moment.
  const size_t g = granule(device_);
  std::vector<std::pair<size_t, int64_t>> events;
  for (const Allocation& a : allocs) {
    events.push_back({a.born, int64_t(round_up(a.bytes, g))});
    if (a.died != Allocation::kAlive) events.push_back({a.died, -int64_t(round_up(a.bytes, g))});
  }
  std::sort(events.begin(), events.end(), [](const auto& x, const auto& y) {
    return x.first != y.first ? x.first < y.first : x.second < y.second;  // frees before allocations
  });
  int64_t live = 0, peak = 0;
  for (const auto& e : events) peak = std::max(peak, live += e.second);
  eager_peak_ = size_t(peak);
  // Temporaries that a kept call uses, placed largest first at the lowest offset free from the
  // first call of the list that uses them to the last (greedy by size, as in TFLite's and XLA's
  // planners). Counted in the replayed list, not in the eager run's allocations: a fused call
  // runs its members together, so every buffer it touches is alive at once, even one whose eager
  // lifetime ended before another's began.
  in_arena_.assign(allocs.size(), false);
  uses_.assign(allocs.size(), {0, 0});
  for (size_t i = 0; i < list_.size(); ++i)
    for (const BufferRef& r : list_[i]->refs)
      if (r.kind == BufferRef::Internal && allocs[r.index].died != Allocation::kAlive) {
        if (!in_arena_[r.index]) uses_[r.index].first = i;
        uses_[r.index].second = i;
        in_arena_[r.index] = true;
      }
  find_in_place();
  std::vector<size_t> by_birth;
  for (size_t a = 0; a < allocs.size(); ++a)
    if (in_arena_[a]) by_birth.push_back(a);
  std::vector<size_t> by_size = by_birth;
  std::stable_sort(by_size.begin(), by_size.end(), [&](size_t x, size_t y) { return allocs[x].bytes > allocs[y].bytes; });
  // Two greedy orders (largest first; first allocated first, as eager does); the smaller arena wins.
  std::vector<size_t> best_place;
  size_t best = ~size_t(0);
  for (const auto* order : {&by_size, &by_birth}) {
    place(*order);
    if (arena_bytes_ < best) {
      best = arena_bytes_;
      best_place = place_;
    }
  }
  place_ = std::move(best_place);
  arena_bytes_ = best == ~size_t(0) ? 0 : best;
}

// Kernels that compute each output element from the same element of their first input (and
// read it before writing it), on both backends: their output may take that input's memory when
// the call is the input's last use. (Only the first input: a kernel could copy one operand into
// its output before reading the other.)
static bool elementwise_in_place(const char* name) {
  return !std::strcmp(name, "unary") || !std::strcmp(name, "binary") || !std::strcmp(name, "xent_backward");
}

void CompiledStep::find_in_place() {
  auto temporary = [&](const BufferRef& r) { return r.kind == BufferRef::Internal && in_arena_[r.index]; };
  in_place_.clear();
  for (size_t i = 0; i < list_.size(); ++i) {
    Call& call = *list_[i];
    if (!elementwise_in_place(call.name()) || call.refs.size() < 2) continue;
    std::vector<const View*> views;
    call.visit([&](void*&, bool, const View* v) { views.push_back(v); });
    const BufferRef &out = call.refs[0], &in = call.refs[1];
    const View *vo = views[0], *vi = views[1];
    bool in_written = false;
    for (size_t k = 1; k < call.refs.size(); ++k)
      in_written = in_written || (call.refs[k].written && call.refs[k].index == in.index && call.refs[k].kind == in.kind);
    if (!out.written || in_written || !vo || !vi || !temporary(out) || !temporary(in) ||
        out.index == in.index || out.offset != in.offset || uses_[out.index].first != i || uses_[in.index].second != i ||
        vo->shape != vi->shape || vo->strides != vi->strides || dtype_size(vo->dtype) != dtype_size(vi->dtype))
      continue;
    in_place_[out.index] = in.index;
  }
}

void CompiledStep::place(const std::vector<size_t>& order) {
  const auto& allocs = trace_.allocations;
  const size_t g = granule(device_);
  arena_bytes_ = 0;
  place_.assign(allocs.size(), 0);
  // An output and the input it may overwrite (in_place_), of the same size, are placed as one
  // buffer over both lifetimes (chains of them too), so the sharing never depends on the order.
  std::vector<size_t> root(allocs.size());
  for (size_t a = 0; a < root.size(); ++a) root[a] = a;
  auto find = [&](size_t a) {
    while (root[a] != a) a = root[a] = root[root[a]];
    return a;
  };
  for (const auto& [out, in] : in_place_)
    if (round_up(allocs[out].bytes, g) == round_up(allocs[in].bytes, g)) root[find(out)] = find(in);
  std::vector<std::pair<size_t, size_t>> span(allocs.size());  // per group root: first and last use
  std::vector<bool> seen(allocs.size(), false);
  for (size_t a : order) {
    const size_t r = find(a);
    span[r] = seen[r] ? std::pair{std::min(span[r].first, uses_[a].first), std::max(span[r].second, uses_[a].second)}
                      : uses_[a];
    seen[r] = true;
  }
  std::vector<size_t> placed;  // group roots
  std::vector<bool> is_placed(allocs.size(), false);
  for (size_t a : order) {
    const size_t r = find(a);
    if (is_placed[r]) continue;
    const size_t size = round_up(allocs[r].bytes, g);
    std::vector<std::pair<size_t, size_t>> busy;  // [offset, end) of placed groups alive with this one
    for (size_t b : placed)
      if (span[b].first <= span[r].second && span[r].first <= span[b].second)
        busy.push_back({place_[b], place_[b] + round_up(allocs[b].bytes, g)});
    std::sort(busy.begin(), busy.end());
    size_t at = 0;
    for (const auto& [lo, hi] : busy) {
      if (at + size <= lo) break;
      at = std::max(at, hi);
    }
    place_[r] = at;
    is_placed[r] = true;
    arena_bytes_ = std::max(arena_bytes_, at + size);
    placed.push_back(r);
  }
  for (size_t a : order) place_[a] = place_[find(a)];
}

void CompiledStep::check_index_requirements() {
  for (const auto& req : trace_.index_requirements) {
    const size_t b = req.buffer.index;
    if (req.buffer.kind == BufferRef::External) {
      const std::shared_ptr<Storage>& s = trace_.externals[b];
      size_t input = 0;
      while (input < inputs_.size() && inputs_[input].impl()->storage != s) ++input;
      if (input < inputs_.size()) input_ranges_.push_back({input, req.n});
      else frozen_ranges_.push_back({s, s->version.load()});  // made before the step: must not change
      continue;
    }
    // Made inside the step: only constants (uploaded bytes) can be trusted at replay.
    bool constant = true;
    for (size_t c = 0; c < trace_.calls.size(); ++c)
      for (const BufferRef& r : trace_.calls[c]->refs)
        if (keep_[c] && r.kind == BufferRef::Internal && r.index == b && r.written &&
            std::strcmp(trace_.calls[c]->name(), "upload") != 0)
          constant = false;
    if (!constant)
      fail(NX_ERR_STATE, current_api(), ": the step cannot be captured: an index computed inside it is used by an ",
           "index op, whose range check a replay could not repeat; pass the index as an input of the step");
  }
}

bool CompiledStep::still_valid() const {
  if (capture_epoch() != epoch_ || deterministic() != deterministic_ || grad_enabled() != grad_enabled_ ||
      autocast_dtype(device_) != autocast_)
    return false;
  for (const LeafGrad& lg : leaf_grads_) {
    auto impl = lg.leaf.lock();
    if (!impl || lg.made_by_step) continue;  // gone (the plan keeps its memory), or put back by replay
    if ((impl->grad ? impl->grad->storage : nullptr) != (lg.grad ? lg.grad->storage : nullptr)) return false;
  }
  for (const auto& [storage, version] : frozen_ranges_)
    if (storage->version.load() != version) return false;
  for (const auto& g : trace_.guards)
    if (!g()) return false;
  return true;
}

std::vector<Tensor> CompiledStep::replay(const std::vector<Tensor>& inputs) {
  for (const auto& [i, n] : input_ranges_) check_index_range(inputs[i], n, "an input of the plan");
  // A running profiler sees the replayed kernels one by one (the CUDA graph as one).
  Backend& be = profiler::observed(trace_.inner, device_);
  const ExecContext ctx = exec_context(device_);
  for (size_t i = 0; i < inputs.size(); ++i) be.copy(ctx, View::of(inputs_[i]), View::of(inputs[i]));
  for (const auto& action : trace_.host_actions) action();
  for (const auto& d : trace_.dynamics) be.upload(ctx, d->device, d->refill(), d->bytes);
  if (graph_) {
    profiler::DeviceScope profiled("CUDA graph", ctx.device, ctx.stream);
    cuda::graph_launch(graph_, ctx.stream);
  } else if (lanes_ && &be == &trace_.inner) {  // not under a profiler, which sees one call at a time
    lanes_->run(be, ctx);
  } else {
    for (Call* call : list_) call->run(be, ctx);
  }
  for (Storage* s : written_) s->version++;
  for (const LeafGrad& lg : leaf_grads_)
    if (lg.made_by_step)
      if (auto impl = lg.leaf.lock()) impl->grad = lg.grad;
  std::vector<Tensor> out;
  GradModeGuard off(false);
  for (const Tensor& o : outputs_) out.push_back(clone(o));
  for (const auto& action : trace_.after_actions) action();
  return out;
}

size_t CompiledStep::held_bytes() const {
  size_t n = arena_bytes_ + kept_bytes_;
  for (const Tensor& x : inputs_) n += size_t(x.numel()) * dtype_size(x.dtype());
  for (const Call* c : list_) n += c->constant_bytes();
  return n;
}

void CompiledStep::fill_stats(PlanStats* s) const {
  s->ops = int64_t(list_.size());
  s->uploads = 0;
  int64_t kept = 0;
  for (size_t c = 0; c < trace_.calls.size(); ++c) {
    if (!keep_[c]) continue;
    kept++;
    if (std::strcmp(trace_.calls[c]->name(), "upload") == 0) s->uploads++;
  }
  s->ops_eliminated = int64_t(trace_.calls.size()) - kept;
  s->fused_ops = fusion_.fused_calls;
  s->fused_groups = fusion_.groups;
  s->arena_bytes = int64_t(arena_bytes_);
  s->eager_peak_bytes = int64_t(eager_peak_);
  s->kept_bytes = int64_t(kept_bytes_);
  s->cuda_graph = graph_ != nullptr;
}

std::string CompiledStep::label(const BufferRef& r) const {
  std::ostringstream os;
  if (r.kind == BufferRef::External) {
    os << "state" << r.index;
    for (size_t i = 0; i < inputs_.size(); ++i)
      if (trace_.externals[r.index] == inputs_[i].impl()->storage) os << "(input " << i << ")";
    if (r.offset) os << "+" << r.offset;
  } else if (trace_.allocations[r.index].died == Allocation::kAlive) {
    os << "kept" << r.index;
    if (r.offset) os << "+" << r.offset;
  } else {
    os << "arena@" << place_[r.index] + r.offset;
  }
  return os.str();
}

static std::string view_str(const View* v) {
  if (!v) return "";
  std::ostringstream os;
  os << dtype_name(v->dtype) << shape_str(v->shape);
  return os.str();
}

std::string CompiledStep::table() const {
  PlanStats s;
  fill_stats(&s);
  std::ostringstream os;
  os << "plan on " << device_str(device_) << ": " << s.ops << " ops (" << s.ops_eliminated << " dead removed, "
     << repeated_ << " repeated removed, " << folded_casts_ << " casts folded into norms, "
     << s.fused_ops << " fused into " << s.fused_groups << " kernels"
     << (device_.is_cpu() ? cat(", ", fusion_.reductions, " of them ending in a reduction")
                          : cat(", ", fusion_.generated, " of them generated"))
     << "), " << s.uploads
     << " constant uploads; arena " << arena_bytes_ << " bytes (the eager run's step allocations peaked at "
     << eager_peak_ << "), " << kept_bytes_ << " bytes kept after the step; CUDA graph: " << (graph_ ? "yes" : "no")
     << "\n";
  if (lanes_) {
    os << lanes_->summary() << "\n";
    if (std::string times = lanes_->time_by_call_name(); !times.empty()) os << times << "\n";
  }
  for (size_t c : trace_.unwritten_reads)
    os << "warning: call " << c << " (" << trace_.calls[c]->name() << " from " << trace_.calls[c]->api
       << ") reads step memory that no kernel wrote before it\n";
  os << arena_peak();
  os << "#     op                   fused  lane us       from C call                   buffers (w: written; arena@offset)\n";
  int64_t group = 0;
  for (size_t n = 0; n < list_.size(); ++n) {
    Call& call = *list_[n];
    const bool fused = std::strcmp(call.name(), "fused") == 0;
    char head[160], tag[24] = "-";
    if (fused) std::snprintf(tag, sizeof tag, "g%lld", (long long)group++);
    const char lane = lanes_ ? lanes_->lane_of(n) : '-';
    const double seconds = lanes_ ? lanes_->call_seconds(n) : -1.0;  // measured on CPU plans with lanes
    char us[16] = "-";
    if (seconds >= 0) std::snprintf(us, sizeof us, "%.0f", seconds * 1e6);
    std::snprintf(head, sizeof head, "%-5zu %-20s %-6s %-4c %-8s %-29s ", n, call.name(), tag, lane, us,
                  call.api.c_str());
    os << head;
    size_t k = 0;
    call.visit([&](void*&, bool written, const View* v) {
      const BufferRef& r = call.refs[k++];
      os << (k > 1 ? ", " : "") << (written ? "w:" : "") << label(r);
      if (v) os << " " << view_str(v);
    });
    os << " |" << call.scalars() << "\n";
  }
  return os.str();
}

std::string CompiledStep::arena_peak() const {
  // A temporary occupies the arena from the first call of the list using it to the last; the
  // fullest call and what is alive there say what a smaller arena would have to give up.
  if (list_.empty()) return "";
  const auto& allocs = trace_.allocations;
  const size_t g = granule(device_);
  std::vector<size_t> temps;
  std::vector<int64_t> delta(list_.size() + 1, 0);
  // An output written over its input's memory takes its own room only after the call making it.
  std::vector<size_t> from(allocs.size());
  for (size_t a = 0; a < allocs.size(); ++a) {
    if (!in_arena_[a]) continue;
    from[a] = uses_[a].first;
    if (auto it = in_place_.find(a); it != in_place_.end() && place_[a] == place_[it->second]) from[a]++;
    if (from[a] > uses_[a].second) continue;
    temps.push_back(a);
    delta[from[a]] += int64_t(round_up(allocs[a].bytes, g));
    delta[uses_[a].second + 1] -= int64_t(round_up(allocs[a].bytes, g));
  }
  size_t at = 0;
  int64_t live = 0, peak = 0;
  for (size_t i = 0; i < list_.size(); ++i)
    if ((live += delta[i]) > peak) peak = live, at = i;
  std::vector<size_t> alive;
  for (size_t a : temps)
    if (from[a] <= at && at <= uses_[a].second) alive.push_back(a);
  std::stable_sort(alive.begin(), alive.end(), [&](size_t x, size_t y) { return allocs[x].bytes > allocs[y].bytes; });
  std::ostringstream os;
  os << "arena peak: " << peak << " bytes in " << alive.size() << " buffers at call " << at << " ("
     << list_[at]->name() << " from " << list_[at]->api << "); the largest (bytes, first and last call, made by):\n";
  for (size_t k = 0; k < alive.size() && k < 12; ++k) {
    const size_t a = alive[k];
    Call& first = *list_[uses_[a].first];
    std::string shape;
    size_t r = 0;
    first.visit([&](void*&, bool, const View* v) {
      const BufferRef& ref = first.refs[r++];
      if (shape.empty() && v && ref.kind == BufferRef::Internal && ref.index == a) shape = view_str(v);
    });
    os << "  " << allocs[a].bytes << "  calls " << uses_[a].first << ".." << uses_[a].second << "  " << first.name()
       << " from " << first.api << (shape.empty() ? "" : " ") << shape << "\n";
  }
  return os.str();
}

std::string CompiledStep::dot() const {
  // Calls are nodes; an edge runs from the last call that wrote a buffer to each call reading it.
  std::ostringstream os;
  os << "digraph plan {\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\", fontsize=10];\n";
  std::map<std::pair<int, size_t>, size_t> last_writer;
  for (size_t n = 0; n < list_.size(); ++n) {
    const Call& call = *list_[n];
    os << "  n" << n << " [label=\"" << call.name() << call.scalars() << "\\n" << call.api << "\"];\n";
    std::set<size_t> from;
    for (const BufferRef& r : call.refs)
      if (!r.written)
        if (auto it = last_writer.find({int(r.kind), r.index}); it != last_writer.end()) from.insert(it->second);
    for (size_t f : from) os << "  n" << f << " -> n" << n << ";\n";
    for (const BufferRef& r : call.refs)
      if (r.written) last_writer[{int(r.kind), r.index}] = n;
  }
  os << "}\n";
  return os.str();
}

// ---------------------------------------------------------------- Plan

Plan::Plan(StepFn fn, size_t max_steps, size_t max_bytes, bool cuda_graph, bool fuse)
    : fn_(std::move(fn)), max_steps_(std::max<size_t>(max_steps, 1)), max_bytes_(max_bytes), cuda_graph_(cuda_graph),
      fuse_(fuse) {}
Plan::~Plan() = default;

static std::string signature(const std::vector<Tensor>& inputs) {
  std::ostringstream os;
  for (const Tensor& x : inputs) os << device_str(x.device()) << dtype_name(x.dtype()) << shape_str(x.shape()) << ";";
  return os.str();
}

std::vector<Tensor> Plan::run(const std::vector<Tensor>& inputs) {
  std::unique_lock<std::mutex> lock(busy_, std::try_to_lock);
  if (!lock.owns_lock())
    fail(NX_ERR_STATE, current_api(), ": the plan is running on another thread (a plan is used by one thread at a time)");
  if (inputs.empty()) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": a plan's step needs at least one input tensor");
  for (size_t i = 1; i < inputs.size(); ++i)
    if (inputs[i].device() != inputs[0].device())
      fail(NX_ERR_DEVICE, current_api(), ": input ", i, " is on ", device_str(inputs[i].device()), ", input 0 on ",
           device_str(inputs[0].device()), " (a plan runs on one device)");
  const std::string key = signature(inputs);
  Entry& e = entries_[key];
  e.last_use = ++clock_;
  if (e.step && e.step->still_valid()) {
    stats_.replays++;
    last_ = e.step.get();
    return e.step->replay(inputs);
  }
  if (e.step) {  // stale: captured again below
    if (last_ == e.step.get()) last_ = nullptr;
    e.step.reset();
    stats_.recaptures++;
  } else if (e.calls++ == 0) {
    stats_.eager_runs++;  // the first call of a signature makes the state its steps update
    return fn_(inputs);
  }
  // Keep at most max_steps_ compiled steps: the least recently used go.
  size_t compiled = 0;
  for (const auto& [k, x] : entries_) compiled += x.step != nullptr;
  for (; compiled >= max_steps_ && evict_one(nullptr); --compiled) {
  }
  std::vector<Tensor> outputs;
  e.step = std::make_unique<CompiledStep>(fn_, inputs, cuda_graph_ && !inputs[0].device().is_cpu(), fuse_, &outputs);
  stats_.captures++;
  last_ = e.step.get();
  // The byte bound is known only once the new step is compiled (its arena comes from the trace).
  while (max_bytes_ && held_bytes() > max_bytes_ && evict_one(e.step.get())) {
  }
  return outputs;
}

bool Plan::evict_one(const CompiledStep* keep) {
  auto victim = entries_.end();
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if (it->second.step && it->second.step.get() != keep &&
        (victim == entries_.end() || it->second.last_use < victim->second.last_use))
      victim = it;
  if (victim == entries_.end()) return false;
  if (last_ == victim->second.step.get()) last_ = nullptr;
  victim->second.step.reset();
  stats_.evictions++;
  return true;
}

size_t Plan::held_bytes() const {
  size_t n = 0;
  for (const auto& [k, e] : entries_)
    if (e.step) n += e.step->held_bytes();
  return n;
}

PlanStats Plan::stats() const {
  PlanStats s = stats_;
  if (last_) last_->fill_stats(&s);
  s.held_bytes = int64_t(held_bytes());
  return s;
}

std::string Plan::table() const { return last_ ? last_->table() : "plan: nothing compiled yet\n"; }
std::string Plan::dot() const { return last_ ? last_->dot() : "digraph plan {\n}\n"; }

}  // namespace nx::compile
