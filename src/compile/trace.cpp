#include "compile/trace.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <type_traits>
#include <tuple>
#include <utility>

#include "ops/ops.hpp"

namespace nx::compile {
namespace {

// Which parameters each kernel writes (src/ops/ops.yaml, `writes:`).
#define NX_WRITES_ENUM(name, mask) constexpr unsigned kWrites_##name = mask;
NX_KERNEL_WRITES(NX_WRITES_ENUM)
#undef NX_WRITES_ENUM

// The memory arguments of a kernel: a View's data (skipped when absent or empty, as no kernel
// touches it) and Adam's slots (param, m, v written when the slots are; the gradient read).
void visit_arg(const Call::Visitor& f, View& v, bool written) {
  if (v.data && v.numel() > 0) f(v.data, written, &v);
}
void visit_arg(const Call::Visitor& f, std::vector<AdamSlot>& slots, bool written) {
  for (AdamSlot& s : slots) {
    if (s.n == 0) continue;
    f(s.param, written, nullptr);
    f(s.grad, false, nullptr);
    f(s.m, written, nullptr);
    f(s.v, written, nullptr);
  }
}
void visit_arg(const Call::Visitor& f, std::vector<TensorSlot>& slots, bool written) {
  for (TensorSlot& s : slots)
    if (s.n) f(s.data, written, nullptr);
}
template <class T>
void visit_arg(const Call::Visitor&, T&, bool) {}

template <class T>
void print_scalar(std::ostringstream& os, const T& v) {
  if constexpr (std::is_arithmetic_v<T>) os << " " << v;
  else if constexpr (std::is_enum_v<T>) os << " " << int(v);
  else if constexpr (std::is_same_v<T, AdamParams>)
    os << " lr=" << v.lr << " wd=" << v.weight_decay << (v.skip_if_nan ? " skip_if_nan" : "");
  else if constexpr (std::is_same_v<T, NormParams>) os << " eps=" << v.eps;
  else if constexpr (std::is_same_v<T, AttentionParams>) os << " scale=" << v.scale << " causal=" << v.causal;
}

template <class... A>
class KernelCall final : public Call {
 public:
  using Fn = void (Backend::*)(const ExecContext&, A...);
  KernelCall(const char* name, unsigned writes, Fn fn, std::decay_t<A>... args)
      : name_(name), writes_(writes), fn_(fn), args_(std::move(args)...) {}
  const char* name() const override { return name_; }
  void run(Backend& backend, const ExecContext& ctx) override {
    std::apply([&](auto&... a) { (backend.*fn_)(ctx, a...); }, args_);
  }
  void visit(const Visitor& f) override { visit_each(f, std::index_sequence_for<A...>{}); }
  bool elementwise(ElementwiseCall* out) override {
    using Args = std::tuple<std::decay_t<A>...>;
    if constexpr (std::is_same_v<Args, std::tuple<UnaryOp, View, View, double, double>>) {
      *out = ElementwiseCall{FusedInstr::Unary, int(std::get<0>(args_)), std::get<3>(args_), std::get<4>(args_),
                             &std::get<1>(args_), {&std::get<2>(args_), nullptr}, 1};
      return true;
    } else if constexpr (std::is_same_v<Args, std::tuple<BinaryOp, View, View, View>>) {
      *out = ElementwiseCall{FusedInstr::Binary, int(std::get<0>(args_)), 0, 0, &std::get<1>(args_),
                             {&std::get<2>(args_), &std::get<3>(args_)}, 2};
      return true;
    } else if constexpr (std::is_same_v<Args, std::tuple<View, View>>) {
      if (std::strcmp(name_, "copy") != 0) return false;
      *out = ElementwiseCall{FusedInstr::Copy, 0, 0, 0, &std::get<0>(args_), {&std::get<1>(args_), nullptr}, 1};
      return true;
    }
    return false;
  }
  bool reduce_rows(ReduceRowsCall* out) override {
    if constexpr (std::is_same_v<std::tuple<std::decay_t<A>...>, std::tuple<ReduceOp, View, View, int64_t, int64_t>>) {
      if (std::strcmp(name_, "reduce_rows") != 0) return false;
      *out = ReduceRowsCall{std::get<0>(args_), &std::get<1>(args_), &std::get<2>(args_), std::get<3>(args_),
                            std::get<4>(args_)};
      return true;
    }
    return false;
  }
  View* norm_output() override {
    if constexpr (std::tuple_size_v<std::tuple<std::decay_t<A>...>> == 9) {
      if constexpr (std::is_same_v<std::decay_t<std::tuple_element_t<0, std::tuple<A...>>>, NormParams>)
        if (std::strcmp(name_, "norm_forward") == 0) return &std::get<1>(args_);
    }
    return nullptr;
  }
  std::string scalars() const override {
    std::ostringstream os;
    std::apply([&](const auto&... a) { (print_scalar(os, a), ...); }, args_);
    return os.str();
  }

 private:
  template <size_t... I>
  void visit_each(const Visitor& f, std::index_sequence<I...>) {
    (visit_arg(f, std::get<I>(args_), ((writes_ >> I) & 1) != 0), ...);
  }
  const char* name_;
  unsigned writes_;
  Fn fn_;
  std::tuple<std::decay_t<A>...> args_;
};

// Host bytes copied into device memory inside the step: a constant of the plan (data the step
// read on the host, frozen as JAX freezes a traced function's constants). On a GPU the compiler
// gives it a device copy, so that a replay (and a CUDA graph) copies device to device.
class UploadCall final : public Call {
 public:
  UploadCall(void* dst, const void* src, size_t n)
      : dst_(dst), bytes_(static_cast<const char*>(src), static_cast<const char*>(src) + n) {}
  const char* name() const override { return "upload"; }
  void run(Backend& backend, const ExecContext& ctx) override {
    if (device_copy_) backend.copy_bytes(ctx, dst_, device_copy_, bytes_.size());
    else backend.upload(ctx, dst_, bytes_.data(), bytes_.size());
  }
  void visit(const Visitor& f) override {
    if (!bytes_.empty()) f(dst_, true, nullptr);
  }
  size_t constant_bytes() const override { return bytes_.size() * (device_copy_ ? 2 : 1); }
  void make_device_constant(Backend& backend, const ExecContext& ctx, std::vector<void*>* owned) override {
    if (bytes_.empty() || device_copy_) return;
    void* p = backend.allocate(ctx, bytes_.size());
    owned->push_back(p);
    backend.upload(ctx, p, bytes_.data(), bytes_.size());
    device_copy_ = p;
  }

 private:
  void* dst_;
  std::vector<char> bytes_;
  const void* device_copy_ = nullptr;
};

class CopyBytesCall final : public Call {
 public:
  CopyBytesCall(void* dst, const void* src, size_t n) : dst_(dst), src_(const_cast<void*>(src)), n_(n) {}
  const char* name() const override { return "copy_bytes"; }
  void run(Backend& backend, const ExecContext& ctx) override { backend.copy_bytes(ctx, dst_, src_, n_); }
  void visit(const Visitor& f) override {
    if (!n_) return;
    f(dst_, true, nullptr);
    f(src_, false, nullptr);
  }

 private:
  void *dst_, *src_;
  size_t n_;
};

#define NX_UNPAREN(...) __VA_ARGS__

// The backend a traced step's ops get: each call is recorded, then run by the device's own one.
class RecordingBackend final : public Backend {
 public:
  explicit RecordingBackend(Trace& trace) : trace_(trace), inner_(trace.inner) {}
  void* allocate(const ExecContext& ctx, size_t nbytes) override {
    void* p = inner_.allocate(ctx, nbytes);
    trace_.on_allocate(p, nbytes);
    return p;
  }
  void deallocate(void* p, size_t nbytes) override {
    trace_.on_deallocate(p);
    inner_.deallocate(p, nbytes);
  }
  void synchronize(const ExecContext& ctx) override { inner_.synchronize(ctx); }
  void upload(const ExecContext& ctx, void* dst, const void* src, size_t n) override {
    trace_.record(std::make_unique<UploadCall>(dst, src, n));
    inner_.upload(ctx, dst, src, n);
  }
  void download(const ExecContext&, void*, const void*, size_t) override {
    trace_.refuse(std::string(current_api()) +
                  " copies a tensor to the host inside the captured step (a replay runs no host code); return the "
                  "tensor as an output of the step and read it after nx_plan_run");
  }
  void copy_bytes(const ExecContext& ctx, void* dst, const void* src, size_t n) override {
    trace_.record(std::make_unique<CopyBytesCall>(dst, src, n));
    inner_.copy_bytes(ctx, dst, src, n);
  }
  void fused_elementwise(const ExecContext&, const FusedProgram&) override {
    // No op calls it: a compiled plan's replay does, on the device's own backend. A call reaching a
    // trace would go unrecorded, so the capture is refused.
    trace_.refuse(std::string(current_api()) + " runs a fused elementwise program inside the captured step");
  }
  void fused_reduce_rows(const ExecContext&, const FusedProgram&, int, ReduceOp, const View&, int64_t,
                         int64_t) override {
    trace_.refuse(std::string(current_api()) + " runs a fused reduction inside the captured step");
  }
  bool native_half_attention() const override { return inner_.native_half_attention(); }
  bool native_half_matmul() const override { return inner_.native_half_matmul(); }

#define NX_RECORDED_KERNEL(name, params, args) \
  void name params override { forward(#name, kWrites_##name, &Backend::name, NX_UNPAREN args); }
  NX_KERNELS(NX_RECORDED_KERNEL)
#undef NX_RECORDED_KERNEL

 private:
  template <class... A, class... B>
  void forward(const char* name, unsigned writes, void (Backend::*fn)(const ExecContext&, A...), const ExecContext& ctx,
               B&&... b) {
    trace_.record(std::make_unique<KernelCall<A...>>(name, writes, fn, std::decay_t<A>(b)...));
    (inner_.*fn)(ctx, std::forward<B>(b)...);
  }
  Trace& trace_;
  Backend& inner_;
};

}  // namespace

Trace::Trace(Device device)
    : inner(device_backend(device)), device_(device), recording_(std::make_unique<RecordingBackend>(*this)) {
  const RandomState at = shared_random_state();
  random_seed_ = replay_seed_ = at.seed;
  random_start_ = replay_start_ = at.offset;
}

Trace::~Trace() {
  for (auto& d : dynamics)
    if (!d->owner.defined()) inner.deallocate(d->device, d->bytes);
}

Backend* Trace::backend_for(Device device) { return device == device_ ? recording_.get() : nullptr; }

void Trace::observe(const Tensor& t) {
  if (t.device() != device_) return;
  const std::shared_ptr<Storage>& s = t.impl()->storage;
  if (t.requires_grad() && !t.grad_fn() && leaf_set_.insert(t.impl()).second) leaves.push_back(t.impl_ptr());
  const auto base = reinterpret_cast<uintptr_t>(s->data);
  if (auto it = live_.find(base); it != live_.end()) {
    Allocation& a = allocations[it->second];
    if (a.storage.expired()) a.storage = s;
    return;
  }
  if (external_at_.count(base)) return;
  external_at_[base] = externals.size();
  externals.push_back(s);
}

bool Trace::resolve(void* p, BufferRef* out) const {
  const auto at = reinterpret_cast<uintptr_t>(p);
  auto it = live_.upper_bound(at);
  if (it != live_.begin()) {
    --it;
    const Allocation& a = allocations[it->second];
    if (at < it->first + a.bytes) {
      *out = BufferRef{BufferRef::Internal, it->second, size_t(at - it->first), false};
      return true;
    }
  }
  auto et = external_at_.upper_bound(at);
  if (et != external_at_.begin()) {
    --et;
    if (at < et->first + externals[et->second]->nbytes) {
      *out = BufferRef{BufferRef::External, et->second, size_t(at - et->first), false};
      return true;
    }
  }
  return false;
}

void Trace::record(std::unique_ptr<Call> call) {
  call->api = current_api();
  Call& c = *call;
  c.visit([&](void*& p, bool written, const View*) {
    BufferRef ref{};
    if (!resolve(p, &ref))
      refuse(std::string(current_api()) + ": kernel " + c.name() +
             " uses memory that is neither a tensor of the step nor one made before it; a plan cannot keep it");
    ref.written = written;
    c.refs.push_back(ref);
  });
  // Memory of the step that a kernel reads before any recorded call wrote it was written by the
  // host (a CPU tensor made from a C array, arange's values): its bytes now are a constant of
  // the plan, recorded as an upload just before the call.
  for (const BufferRef& r : c.refs) {
    if (r.kind != BufferRef::Internal || r.written || allocations[r.index].written) continue;
    Allocation& a = allocations[r.index];
    a.written = true;
    if (!device_.is_cpu()) {  // device memory is written only by recorded calls: a read of garbage
      unwritten_reads.push_back(calls.size());
      continue;
    }
    auto snapshot = std::make_unique<UploadCall>(a.ptr, a.ptr, a.bytes);
    snapshot->api = c.api;
    snapshot->refs.push_back(BufferRef{BufferRef::Internal, r.index, 0, true});
    calls.push_back(std::move(snapshot));
  }
  for (const BufferRef& r : c.refs)
    if (r.kind == BufferRef::Internal && r.written) allocations[r.index].written = true;
  calls.push_back(std::move(call));
}

void Trace::on_allocate(void* ptr, size_t bytes) {
  live_[reinterpret_cast<uintptr_t>(ptr)] = allocations.size();
  allocations.push_back(Allocation{ptr, bytes, calls.size(), Allocation::kAlive, {}});
}

void Trace::on_deallocate(void* ptr) {
  auto it = live_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == live_.end()) return;  // made before the trace
  allocations[it->second].died = calls.size();
  live_.erase(it);
}

void Trace::refuse(const std::string& why) {
  if (refusal.empty()) refusal = why;
  fail(NX_ERR_STATE, why);
}

void Trace::index_range_trusted(const Tensor& index, int64_t n) {
  if (index.device() != device_) return;
  observe(index);  // its storage may not have reached a kernel yet
  BufferRef ref{};
  if (!resolve(index.impl()->storage->data, &ref))
    refuse(std::string(current_api()) + ": an index tensor the plan cannot keep");
  index_requirements.push_back({ref, n});
}

void Trace::host_read(const Tensor& t) {
  if (t.device() != device_) return;
  refuse(std::string(current_api()) +
         " reads a tensor's values on the host inside the captured step (a replay runs no host code); return the "
         "tensor as an output of the step and read it after nx_plan_run");
}

void Trace::host_action(std::function<void()> action) {
  action();
  host_actions.push_back(std::move(action));
}

template <class T>
DynamicArray<T>& Trace::add_dynamic(size_t n, std::function<void(T*)> fill) {
  auto d = std::make_unique<DynamicArray<T>>();
  d->bytes = n * sizeof(T);
  d->device = inner.allocate(exec_context(device_), d->bytes);
  d->host.assign(n, T{});
  d->fill = std::move(fill);
  DynamicArray<T>& out = *d;
  dynamics.push_back(std::move(d));
  upload_dynamic(out);
  return out;
}

void Trace::upload_dynamic(DynamicValues& d) { inner.upload(exec_context(device_), d.device, d.refill(), d.bytes); }

const double* Trace::dynamic_values(Device device, size_t n, std::function<void(double*)> fill) {
  if (device != device_) refuse(std::string(current_api()) + ": step values for another device than the plan's");
  return static_cast<const double*>(add_dynamic<double>(n, std::move(fill)).device);
}

void Trace::refill_before_replay(const Tensor& t, std::function<void(void*)> fill) {
  if (t.device() != device_ || !t.is_contiguous())
    refuse(std::string(current_api()) + ": a value refilled before each replay must be a contiguous tensor on the plan's device");
  if (live_.count(reinterpret_cast<uintptr_t>(t.impl()->storage->data)))
    refuse(std::string(current_api()) + ": a value refilled before each replay was made inside the step");
  observe(t);
  auto d = std::make_unique<DynamicArray<char>>();
  d->bytes = t.nbytes();
  d->device = t.data();
  d->owner = t;
  d->host.assign(d->bytes, 0);
  d->fill = [fill = std::move(fill)](char* out) { fill(out); };
  upload_dynamic(*d);
  dynamics.push_back(std::move(d));
}

void Trace::after_replay(std::function<void()> action) { after_actions.push_back(std::move(action)); }

const uint64_t* Trace::random_draw(Device device, uint64_t seed, uint64_t offset, uint64_t count) {
  if (device != device_) return nullptr;
  if (seed != random_seed_ || offset < random_start_)
    refuse(std::string(current_api()) +
           " draws random numbers that do not follow from the generator's state when the step began (a checkpoint "
           "segment whose forward ran before the step, or a seed set by another thread meanwhile); a replay could "
           "not place them");
  const size_t i = random_deltas_.size(), slot = i % kRandomSlots;
  random_deltas_.push_back(offset - random_start_);
  random_end_ = std::max(random_end_, offset - random_start_ + count);
  if (slot == 0) {
    random_block_ = &add_dynamic<uint64_t>(2 * kRandomSlots, [this, first = i](uint64_t* out) {
      for (size_t k = first; k < random_deltas_.size() && k < first + kRandomSlots; ++k) {
        out[2 * (k - first)] = replay_seed_;
        out[2 * (k - first) + 1] = replay_start_ + random_deltas_[k];
      }
    });
  } else {
    upload_dynamic(*random_block_);  // the traced kernel reads its slot now
  }
  return static_cast<const uint64_t*>(random_block_->device) + 2 * slot;
}

void Trace::finish() {
  const RandomState end = shared_random_state();
  if (end.seed != random_seed_ || end.offset < random_start_ + random_end_)
    refuse(std::string(current_api()) +
           ": the random generator was re-seeded (by another thread) while the step was captured; the numbers the "
           "step drew cannot be drawn again at replay");
  // The eager step took [start, end) from the generator; a replay takes as many, as one block,
  // before its step values are written (so a seed set between replays applies, as eagerly).
  random_taken_ = end.offset - random_start_;
  if (random_taken_)
    host_actions.push_back([this] {
      const RandomState at = take_shared_random(random_taken_);
      replay_seed_ = at.seed;
      replay_start_ = at.offset;
    });
}

void Trace::guard(std::function<bool()> still_valid) { guards.push_back(std::move(still_valid)); }

TraceScope::TraceScope(Trace& trace) : previous_(tl_capture_hooks) {
  if (previous_) fail(NX_ERR_STATE, current_api(), ": a step is already being captured on this thread (plans do not nest)");
  tl_capture_hooks = &trace;
}
TraceScope::~TraceScope() { tl_capture_hooks = previous_; }

}  // namespace nx::compile
