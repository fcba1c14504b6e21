// The backend a device answers with while a profiler runs (backend(), core/device.cpp): every
// kernel of the registry (kernels.inc) becomes a "kernel" event named after it and its op code
// (binary.add), with its operands' shapes, timed on the device by CUDA events; allocations and
// releases feed the events' byte counts and the memory timeline. Everything is forwarded to the
// device's own backend, answers included, so a profiled step computes what an unprofiled one does.
#include <mutex>
#include <unordered_map>

#include "core/backend.hpp"
#include "core/profiler.hpp"

namespace nx::profiler {

namespace {

// A kernel's event: its operands are described first, then it opens just before the launch.
class KernelScope : public Scope {
 public:
  explicit KernelScope(const char* kernel) : name_(kernel) {}
  template <class... A>
  void describe(const ExecContext& ctx, const A&... args) {
    (add(args), ...);
    open(Kind::Kernel, name_.c_str(), ctx.device, std::move(shapes_), ctx.stream);
  }

 private:
  void add(const View& v) {
    if (!shapes_.empty()) shapes_ += ' ';
    shapes_ += dtype_name(v.dtype);
    shapes_ += shape_str(v.shape);
  }
  void add(UnaryOp op) { name_.append(".").append(op_name(op)); }
  void add(BinaryOp op) { name_.append(".").append(op_name(op)); }
  void add(ReduceOp op) {
    static const char* names[] = {"sum", "max", "min", "argmax"};
    name_.append(".").append(names[int(op)]);
  }
  template <class T>
  void add(const T&) {}  // scalars and parameter blocks: not shown

  std::string name_, shapes_;
};

class ProfilingBackend final : public Backend {
 public:
  explicit ProfilingBackend(Backend& inner, Device device) : inner_(inner), device_(device) {}

  void* allocate(const ExecContext& ctx, size_t nbytes) override {
    void* p = inner_.allocate(ctx, nbytes);
    if (recording()) memory_event(ctx.device, int64_t(nbytes));
    return p;
  }
  void deallocate(void* p, size_t nbytes) override {
    inner_.deallocate(p, nbytes);
    if (recording() && p) memory_event(device_, -int64_t(nbytes));
  }
  void synchronize(const ExecContext& ctx) override {
    Scope s(Kind::Api, "synchronize");
    inner_.synchronize(ctx);
  }
  void upload(const ExecContext& ctx, void* dst, const void* src, size_t n) override {
    KernelScope s("upload");
    s.describe(ctx);
    inner_.upload(ctx, dst, src, n);
  }
  void download(const ExecContext& ctx, void* dst, const void* src, size_t n) override {
    KernelScope s("download");
    s.describe(ctx);
    inner_.download(ctx, dst, src, n);
  }
  void copy_bytes(const ExecContext& ctx, void* dst, const void* src, size_t n) override {
    KernelScope s("copy_bytes");
    s.describe(ctx);
    inner_.copy_bytes(ctx, dst, src, n);
  }
#define NX_PROFILED_KERNEL(name, params, args) \
  void name params override {                  \
    KernelScope s(#name);                      \
    s.describe args;                           \
    inner_.name args;                          \
  }
  NX_KERNELS(NX_PROFILED_KERNEL)
#undef NX_PROFILED_KERNEL
  void fused_elementwise(const ExecContext& ctx, const FusedProgram& program) override {
    KernelScope s("fused_elementwise");
    s.describe(ctx);
    inner_.fused_elementwise(ctx, program);
  }
  void fused_reduce_rows(const ExecContext& ctx, const FusedProgram& program, int reg, ReduceOp op, const View& dst,
                         int64_t rows, int64_t cols) override {
    KernelScope s("fused_reduce_rows");
    s.describe(ctx);
    inner_.fused_reduce_rows(ctx, program, reg, op, dst, rows, cols);
  }
  bool native_half_attention() const override { return inner_.native_half_attention(); }
  bool native_half_matmul() const override { return inner_.native_half_matmul(); }

 private:
  Backend& inner_;
  Device device_;
};

}  // namespace

Backend& profiling_backend(Backend& inner, Device device) {
  static std::mutex mu;
  static auto* wrappers = new std::unordered_map<Backend*, Backend*>;  // never freed: storages
  std::lock_guard<std::mutex> lock(mu);                                // freed at exit use them
  Backend*& w = (*wrappers)[&inner];
  if (!w) w = new ProfilingBackend(inner, device);
  return *w;
}

}  // namespace nx::profiler
