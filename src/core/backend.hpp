// The kernel interface a device implements. Ops (src/ops) decide shapes, dtypes and autodiff,
// then call these; kernels (src/cpu, src/cuda) know nothing of graphs. Every View handed to a
// kernel already has the output's shape (inputs broadcast with stride 0) unless noted.
#pragma once
#include <cstdint>
#include <vector>

#include "core/capture_hooks.hpp"
#include "core/dtype.hpp"
#include "core/op_enums.hpp"
#include "core/tensor.hpp"

namespace nx {

struct FusedProgram;  // core/fused_program.hpp

struct View {
  void* data;
  std::vector<int64_t> shape, strides;  // strides in elements
  DType dtype;
  static View of(const Tensor& t) {
    if (CaptureHooks* h = capture_hooks()) h->observe(t);
    return View{t.data(), t.shape(), t.strides(), t.dtype()};
  }
  // t broadcast to shape (stride 0 on new or size-1 dimensions).
  static View broadcast(const Tensor& t, const Shape& shape);
  int64_t numel() const { return numel_of(shape); }
};

// Where a backend call runs: the device, and the stream its work is enqueued on (null = the
// device's default stream; the CPU has none). Every kernel and transfer takes it as an argument
// rather than reading thread-local state, so a backend does what its caller says: the call site
// decides the stream, and a kernel file cannot pick up a stream meant for another call.
struct ExecContext {
  Device device;
  void* stream;  // cudaStream_t on CUDA
};

#include "core/kernels.inc"
// The elementwise op codes (UnaryOp, BinaryOp) come from core/op_enums.hpp, generated from the op
// registry (src/ops/ops.yaml). Step is x > 0; AddRelu .. SiluMul are fused: relu(a+b), a*tanh(b),
// gelu(a+b), gelu_tanh(a+b), and SwiGLU's gate silu(a) * b; GeluBackward, GeluTanhBackward,
// SiluBackward are a * f'(b), the activations' gradients.
enum class ReduceOp { Sum, Max, Min, ArgMax };
// What a BinaryOp gives: the promoted dtype, f32 for integer inputs, or bool.
enum class BinaryResult { Same, Float, Bool };

// Registry facts of each op code (tables in src/ops/elementwise.cpp).
const char* op_name(UnaryOp op);        // "mish"
const char* node_name(UnaryOp op);      // "MishBackward", the autodiff node's name
bool has_integer_kernel(UnaryOp op);    // computes on i32/i64 (others promote integers to f32)
bool unary_from_name(const char* name, UnaryOp* op);
const char* op_name(BinaryOp op);
const char* node_name(BinaryOp op);
BinaryResult binary_result(BinaryOp op);
inline bool is_comparison(BinaryOp op) { return binary_result(op) == BinaryResult::Bool; }

// Flash attention over contiguous q [B, H, Tq, D], k/v [B, Hkv, Tk, D] (H a multiple of Hkv);
// query i sits at absolute position Tk - Tq + i (a prefill after a cache), causal masks later keys,
// ALiBi adds -slope[h] * (query position - key position) to the scaled scores.
struct AttentionParams {
  int64_t batch, heads, kv_heads, tq, tk, dim;
  double scale;
  bool causal;
  std::vector<double> alibi_slopes;  // empty: no ALiBi; else one per head
  bool deterministic = false;        // nx_runtime_set_deterministic: no order-dependent atomics
};
// The FP8 forward rounds P at the running max over key tiles of this many keys, in key order, as
// a single-pass tensor-core kernel can (docs/attention_8bit.md, "P at the running max").
constexpr int64_t kFp8KeyTile = 128;

// Fused kernels (src/ops/fused.cpp). Rows of contiguous [rows, cols] matrices; one pass per row.
// Statistics (mean, rstd, lse) and weight gradients are f64 for f64 inputs, f32 otherwise
// ("the accumulation dtype"); x, y, dx share the input dtype (f32, f64, f16, bf16).
struct NormParams {
  int64_t rows, cols;
  double eps;
  bool rms;  // RMSNorm (no mean, no bias) or LayerNorm
};
// One tensor of a multi-tensor Adam step: param, grad, m, v contiguous, one dtype, n elements;
// bc1, bc2 the bias corrections 1 - beta^t of its own step count.
struct AdamSlot {
  void *param, *grad, *m, *v;
  int64_t n;
  double bc1, bc2;
};
// One contiguous tensor of a multi-tensor kernel: its data and element count.
struct TensorSlot {
  void* data;
  int64_t n;
};
struct AdamParams {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled;  // AdamW: p *= 1 - lr wd; else Adam's g += wd p
  // Set inside a compiled plan: lr, then lr / bc1 and 1 / sqrt(bc2) of each slot in turn, read
  // from this memory (the device's) when the kernel runs, so that a replay sees each step's
  // values; lr and the slots' bc1, bc2 above are then ignored.
  const double* step_values = nullptr;
  // Set by a gradient scaler inside a compiled plan: one f32 in the device's memory, NaN when a
  // gradient held Inf/NaN; the kernel then leaves parameters and moments unchanged (the step is
  // skipped on the device, as an eager step is skipped on the host).
  const float* skip_if_nan = nullptr;
};

class Backend {
 public:
  virtual ~Backend() = default;
  // Memory for work on ctx's stream (CUDA reuses a freed block only on the stream it was
  // allocated for); deallocate needs no context, as it runs from destructors.
  virtual void* allocate(const ExecContext& ctx, size_t nbytes) = 0;
  virtual void deallocate(void* p, size_t nbytes) = 0;
  virtual void synchronize(const ExecContext& ctx) = 0;  // waits for the work on ctx's stream
  // Host <-> device transfers of n contiguous bytes; download returns once dst holds the data.
  virtual void upload(const ExecContext& ctx, void* dst, const void* host_src, size_t n) = 0;
  virtual void download(const ExecContext& ctx, void* host_dst, const void* src, size_t n) = 0;
  // n bytes from src to dst, both this device's memory, in stream order.
  virtual void copy_bytes(const ExecContext& ctx, void* dst, const void* src, size_t n) = 0;
  // The kernels, declared once in src/ops/ops.yaml (`kernels:`) with their contracts.
#define NX_PURE_KERNEL(name, params, args) virtual void name params = 0;
  NX_KERNELS(NX_PURE_KERNEL)
#undef NX_PURE_KERNEL
  // A chain of elementwise ops fused by a compiled plan (src/compile/fuse.cpp builds it; no op
  // calls it), over f32/f16/bf16: the bits of running its ops one by one, without storing the
  // intermediates that nothing else reads (docs/compiler.md, "Fusion").
  virtual void fused_elementwise(const ExecContext& ctx, const FusedProgram& program) = 0;
  // The same chain with one more result, register reg of the program, reduced as reduce_rows
  // reduces a contiguous [rows, cols] source (same bits) instead of stored. Only the CPU has it:
  // the compiler fuses a chain into a reduction on the CPU only (docs/compiler.md).
  virtual void fused_reduce_rows(const ExecContext&, const FusedProgram&, int reg, ReduceOp, const View& dst,
                                 int64_t rows, int64_t cols) {
    (void)reg, (void)dst, (void)rows, (void)cols;
    fail(NX_ERR_NOT_IMPLEMENTED, current_api(), ": this device has no fused reductions");
  }
  // Whether attention takes f16/bf16 directly (else the op casts to f32 around it).
  virtual bool native_half_attention() const { return false; }
  // Whether matmul takes f16/bf16 operands directly (accumulating in f32).
  virtual bool native_half_matmul() const { return false; }
};

// The backend of a device (src/core/device.cpp); fails with NX_ERR_DEVICE, naming the running C
// function, for an unknown device type, a type this build lacks, or an index out of range. While
// a step is captured (core/capture_hooks.hpp), the plan's device answers with a recording backend.
Backend& backend(Device device);
// The device's own backend, never the recording one (what a recording backend forwards to).
Backend& device_backend(Device device);
// The context of a call on device from the running C function: the stream its nx_stream argument
// set (current_stream(), core/error.hpp). Kernel calls read the ambient stream here and only here.
ExecContext exec_context(Device device);

// A device's kernels bound to the context of the running call, so that an op writes
// kernels(x.device()).copy(dst, src) for backend(d).copy(exec_context(d), dst, src).
struct Kernels {
  Backend& be;
  ExecContext ctx;
  // Each kernel without its first parameter (the ctx), forwarding this->ctx in its place.
#define NX_DROP_CTX(ctx, ...) (__VA_ARGS__)
#define NX_BOUND_KERNEL(name, params, args) \
  void name NX_DROP_CTX params const { be.name args; }
  NX_KERNELS(NX_BOUND_KERNEL)
#undef NX_BOUND_KERNEL
#undef NX_DROP_CTX
};
inline Kernels kernels(Device device) { return Kernels{backend(device), exec_context(device)}; }

// Backends register themselves, each from its own file (src/cpu/cpu_backend.cpp,
// src/cuda/backend.cu), so that core names none of them. The registrars are static objects that
// nothing references: CMakeLists.txt links nexus_core whole (WHOLE_ARCHIVE) so that the linker
// keeps them.
struct BackendProvider {
  const char* name;             // "CPU", "CUDA": for messages
  int (*device_count)();        // the devices of this type this process sees
  Backend& (*get)(int index);   // index already checked against device_count()
};
void register_backend(nx_device_type type, BackendProvider provider);
struct BackendRegistrar {
  BackendRegistrar(nx_device_type type, BackendProvider provider) { register_backend(type, provider); }
};
// Fails with NX_ERR_DEVICE: this build has no backend for device's type (or the type is unknown).
[[noreturn]] void no_backend(Device device);

// nx_runtime_set_deterministic: kernels avoid atomics whose order changes the last bits of a result.
void set_deterministic(bool on);
bool deterministic();
// Host waits on a device (stream or event synchronizes, device-to-host reads), counted process-wide
// for nx_runtime_get_host_syncs: a training step's hot path should do none.
void count_host_sync();
uint64_t host_syncs();

}  // namespace nx
