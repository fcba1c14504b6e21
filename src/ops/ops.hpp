// The engine's C++ op layer. Each op checks its arguments, infers the output's shape and dtype,
// calls the kernels of the inputs' device, and (when an input requires grad) records a graph
// node whose VJP is written with these same ops. The C API (src/capi) is a thin shim over this.
#pragma once
#include <vector>

#include "graph/node.hpp"
#include "core/backend.hpp"
#include "core/tensor.hpp"

namespace nx {

using Axes = std::vector<int64_t>;

// ---- creation (creation.cpp)
Tensor from_data(const void* data, const Shape& shape, DType dtype, Device device);
Tensor zeros(const Shape& shape, DType dtype, Device device);
Tensor ones(const Shape& shape, DType dtype, Device device);
Tensor full(const Shape& shape, double value, DType dtype, Device device);
Tensor zeros_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
Tensor arange(double start, double end, double step, DType dtype, Device device);
Tensor rand(const Shape& shape, DType dtype, Device device);
Tensor randn(const Shape& shape, DType dtype, Device device);
void manual_seed(uint64_t seed);
uint64_t next_random_offset(uint64_t count, uint64_t* seed);
// Fails with NX_ERR_INVALID_ARGUMENT (naming what and the first bad position) unless every value
// of the integer tensor index lies in [0, n); reads the device only when the bounds are unknown.
void check_index_range(const Tensor& index, int64_t n, const char* what);
// Element i of a contiguous CPU tensor of i32 or i64 (index arrays), as an int64.
inline int64_t index_at(const Tensor& host, int64_t i) {
  return host.dtype() == DType::I64 ? host.data_as<int64_t>()[i] : host.data_as<int32_t>()[i];
}
// The random stream's position: (seed, offset of the next draw).
struct RandomState {
  uint64_t seed = 0, offset = 0;
};
RandomState random_state();
// The shared stream itself, whatever a RandomReplayGuard of this thread says: its position, and
// count numbers taken from it as one block (returns where the block starts). A compiled plan's
// replay takes the block its captured draws took and places each draw in it (src/compile/trace.cpp).
RandomState shared_random_state();
RandomState take_shared_random(uint64_t count);
// While alive, this thread's draws continue from `from` instead of advancing the shared stream,
// so a recomputation (gradient checkpointing) draws the same numbers (dropout masks) again.
class RandomReplayGuard {
 public:
  explicit RandomReplayGuard(RandomState from);
  ~RandomReplayGuard();
  RandomReplayGuard(const RandomReplayGuard&) = delete;
  RandomReplayGuard& operator=(const RandomReplayGuard&) = delete;

 private:
  bool had_previous_;
  RandomState previous_;
};
void copy_to_host(const Tensor& t, void* dst, size_t nbytes);
double item(const Tensor& t);
Tensor to_device(const Tensor& t, Device device);

// ---- casts and copies (creation.cpp)
Tensor cast(const Tensor& x, DType dtype);
// x itself when it already has dtype (no copy), else cast(x, dtype).
Tensor cast_if_needed(const Tensor& x, DType dtype);
Tensor contiguous(const Tensor& x);
Tensor clone(const Tensor& x);
Tensor detach(const Tensor& x);
void copy_(const Tensor& dst, const Tensor& src);  // in place, broadcast + cast

// ---- elementwise (elementwise.cpp)
Tensor unary(UnaryOp op, const Tensor& x, double p0 = 0, double p1 = 0);
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
inline Tensor add(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Add, a, b); }
inline Tensor sub(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Sub, a, b); }
inline Tensor mul(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Mul, a, b); }
inline Tensor div(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Div, a, b); }
inline Tensor neg(const Tensor& x) { return unary(UnaryOp::Neg, x); }
inline Tensor exp(const Tensor& x) { return unary(UnaryOp::Exp, x); }
inline Tensor log(const Tensor& x) { return unary(UnaryOp::Log, x); }
inline Tensor add_scalar(const Tensor& x, double v) { return unary(UnaryOp::AddScalar, x, v); }
inline Tensor mul_scalar(const Tensor& x, double v) { return unary(UnaryOp::MulScalar, x, v); }
inline Tensor pow_scalar(const Tensor& x, double e) { return unary(UnaryOp::PowScalar, x, e); }
inline Tensor square(const Tensor& x) { return unary(UnaryOp::Square, x); }
Tensor clamp(const Tensor& x, double lo, double hi);
// 1 - |x - 1|^beta (the cone family's parameterized member); beta finite and > 0.
Tensor parcon(const Tensor& x, double beta);
// parcon's beta when none is given (nx_activation_create("parcon"), Python's default): between
// cone (1) and parabolic_cone (2), with a continuous derivative. Our choice, not a published one.
constexpr double kParconDefaultBeta = 1.5;
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// In place on dst (no autodiff: dst must not require grad); bumps dst's version.
void binary_(BinaryOp op, const Tensor& dst, const Tensor& b);
void unary_(UnaryOp op, const Tensor& dst, double p0);

// ---- reductions (reduce.cpp)
Tensor sum(const Tensor& x, const Axes& axes, bool keepdim);
Tensor mean(const Tensor& x, const Axes& axes, bool keepdim);
Tensor amax(const Tensor& x, const Axes& axes, bool keepdim);
Tensor amin(const Tensor& x, const Axes& axes, bool keepdim);
Tensor var(const Tensor& x, const Axes& axes, int64_t correction, bool keepdim);
Tensor argmax(const Tensor& x, int64_t axis, bool keepdim);
// Sums a broadcast gradient back to shape (the reverse of broadcasting).
Tensor sum_to(const Tensor& g, const Shape& shape);

// ---- shape (shape.cpp)
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor view(const Tensor& x, const Shape& shape);
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor permute(const Tensor& x, const Axes& dims);
Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t end, int64_t step);
Tensor expand(const Tensor& x, const Shape& shape);
Tensor squeeze(const Tensor& x, int64_t axis);
Tensor unsqueeze(const Tensor& x, int64_t axis);
Tensor flatten(const Tensor& x, int64_t start_axis, int64_t end_axis);
Tensor cat(const std::vector<Tensor>& xs, int64_t axis);
Tensor stack(const std::vector<Tensor>& xs, int64_t axis);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t axis);
// zeros of shape with g written into slice(axis, start, start+step*len, step): slice's VJP.
Tensor slice_scatter(const Tensor& g, const Shape& shape, int64_t axis, int64_t start, int64_t step);

// ---- linear algebra (matmul.cpp)
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);

// ---- softmax (softmax.cpp)
Tensor softmax(const Tensor& x, int64_t axis);
Tensor log_softmax(const Tensor& x, int64_t axis);

// ---- indexing (index.cpp)
Tensor index_select(const Tensor& x, int64_t axis, const Tensor& index);
Tensor index_add(const Tensor& base, int64_t axis, const Tensor& index, const Tensor& src);
Tensor gather(const Tensor& x, int64_t axis, const Tensor& index);
Tensor scatter_add(const Tensor& base, int64_t axis, const Tensor& index, const Tensor& src);
Tensor embedding(const Tensor& weight, const Tensor& indices);
Tensor one_hot(const Tensor& indices, int64_t num_classes, DType dtype);

// ---- attention (attention.cpp)
// softmax(q k^T * scale + alibi) v with q [B, H, Tq, D], k, v [B, Hkv, Tk, D]; scale <= 0 means
// 1/sqrt(D). Fused kernels (no [Tq, Tk] buffer); see AttentionParams for the conventions.
Tensor flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, bool alibi, double scale);
std::vector<double> alibi_slopes(int64_t heads);

// ---- 8-bit quantization and the 8-bit KV cache (quantize.cpp; docs/attention_8bit.md). Inference
// only: no graph is recorded.
// x quantized to dtype (I8, F8E4M3, F8E5M2) with one absmax scale per index of its first
// keep_dims dimensions: {data of x's shape, f32 scale of shape x.shape[:keep_dims] ([1] for 0)}.
std::vector<Tensor> quantize_8bit(const Tensor& x, DType dtype, int64_t keep_dims);
// Writes x [B, Hkv, T, D] into rows [pos[b], pos[b] + T) of cache [B, Hkv, Tmax, D] (8-bit) and
// scale [B, Hkv, Tmax], one absmax scale per row; rows past Tmax are dropped.
void kv_cache_append_8bit(const Tensor& cache, const Tensor& scale, const Tensor& x, const Tensor& pos);
// softmax(q k^T * scale) v against an 8-bit cache with per-row scales and per-sequence lengths.
Tensor attention_decode_8bit(const Tensor& q, const Tensor& k_cache, const Tensor& k_scale, const Tensor& v_cache,
                             const Tensor& v_scale, const Tensor& lengths, bool causal, bool alibi, double scale);
// The sizes of q [B, H, Tq, D] against k, v [B, Hkv, Tk, D] (H a multiple of Hkv, D <= 256),
// checked; errors name k and v as k_name, v_name and their length as tk_name.
AttentionParams attention_shapes(const Tensor& q, const Tensor& k, const Tensor& v, const char* k_name,
                                 const char* v_name, const char* tk_name);
// nx_flash_attention_fp8: e4m3 q, k, v with f32 scale tensors (docs/attention_8bit.md).
Tensor attention_fp8(const Tensor& q, const Tensor& q_scale, const Tensor& k, const Tensor& k_scale, const Tensor& v,
                     const Tensor& v_scale, bool causal, bool alibi, double scale, DType out_dtype);

// ---- losses (loss.cpp)
enum class Reduction { Mean = NX_REDUCTION_MEAN, Sum = NX_REDUCTION_SUM, None = NX_REDUCTION_NONE };
Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                     double label_smoothing, Reduction reduction);
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, int64_t ignore_index,
                Reduction reduction);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction);
Tensor bce_with_logits(const Tensor& logits, const Tensor& target, Reduction reduction);

// ---- fused kernels (fused.cpp): one kernel per row forward and backward, statistics saved
// RMSNorm / LayerNorm over the last axis; weight, bias [C] optional (undefined tensors).
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps);
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps);
// {norm(x + residual), x + residual} (the sum feeds the next residual); residual optional.
std::vector<Tensor> fused_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                               double eps, bool rms);
// Cross-entropy of logits [N, V] against integer target [N] without keeping the probabilities:
// the forward saves the per-row log-sum-exp, the backward recomputes softmax - onehot.
Tensor softmax_cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index, Reduction reduction);
// silu(gate) * up (SwiGLU's gate), broadcasting.
Tensor swiglu(const Tensor& gate, const Tensor& up);
// One Adam(W) step in place over every (param, grad, m, v), one kernel launch on CUDA; steps[i]
// is the step number (>= 1) of param i, for its bias corrections. No autodiff.
// The sum of the squares of every element of ts (contiguous, one device, one floating dtype), as
// a 0-d f64 tensor on their device: one kernel (a deterministic order).
Tensor sum_of_squares_multi(const std::vector<Tensor>& ts);
// Every tensor of ts (contiguous, one device and dtype, no two sharing memory) multiplied in
// place by factor (a 0-d f64 tensor on their device): one kernel; bumps their versions.
void scale_multi_(const std::vector<Tensor>& ts, const Tensor& factor);
void adam_step_multi(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const std::vector<Tensor>& m,
                     const std::vector<Tensor>& v, const std::vector<int64_t>& steps, const AdamParams& p);

// ---- shared checks (checks.cpp)
void check_same_device(const Tensor& a, const Tensor& b, const char* what_a, const char* what_b);
void check_floating(const Tensor& x, const char* what);
void check_integer(const Tensor& x, const char* what);
// An in-place write into dst, refused as PyTorch refuses it: dst must not have a stride-0
// dimension of size > 1 (an expanded view: several of its elements share one memory location),
// and the dtype the op computes must be storable in dst without changing kind (no floating result
// into an integer or bool tensor, no integer result into a bool one; copy_ converts any dtype).
void check_in_place_layout(const Tensor& dst, const char* what);
void check_in_place_dtype(DType result, const Tensor& dst, const char* what);

}  // namespace nx
