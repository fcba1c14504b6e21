// The kernel interface a device implements. Ops (src/ops) decide shapes, dtypes and autodiff,
// then call these; kernels (src/cpu, src/cuda) know nothing of graphs. Every View handed to a
// kernel already has the output's shape (inputs broadcast with stride 0) unless noted.
#pragma once
#include <cstdint>
#include <vector>

#include "core/dtype.hpp"
#include "core/tensor.hpp"

namespace nx {

struct View {
  void* data;
  std::vector<int64_t> shape, strides;  // strides in elements
  DType dtype;
  static View of(const Tensor& t) { return View{t.data(), t.shape(), t.strides(), t.dtype()}; }
  // t broadcast to shape (stride 0 on new or size-1 dimensions).
  static View broadcast(const Tensor& t, const Shape& shape);
  int64_t numel() const { return numel_of(shape); }
};

enum class UnaryOp {
  Neg, Abs, Exp, Log, Sqrt, Rsqrt, Sin, Cos, Tanh, Sinh, Cosh, Sigmoid, Relu, LeakyRelu,
  Gelu, GeluTanh, Silu, Softplus, Mish, Clamp, AddScalar, MulScalar, PowScalar, Square,
  Reciprocal, Sign, Erf, Step /* x > 0 */
};
// AddRelu .. SiluMul are the fused ops: relu(a+b), gelu(a+b), gelu_tanh(a+b), a*tanh(b).
// SiluMul is SwiGLU's gate: silu(a) * b.
enum class BinaryOp { Add, Sub, Mul, Div, Pow, Maximum, Minimum, AddRelu, AddGelu, AddGeluTanh, MulTanh, SiluMul,
                      Eq, Ne, Lt, Le, Gt, Ge };
enum class ReduceOp { Sum, Max, Min, ArgMax };

inline bool is_comparison(BinaryOp op) { return op >= BinaryOp::Eq; }

// Flash attention over contiguous q [B, H, Tq, D], k/v [B, Hkv, Tk, D] (H a multiple of Hkv);
// query i sits at absolute position Tk - Tq + i (a prefill after a cache), causal masks later keys,
// ALiBi adds -slope[h] * (query position - key position) to the scaled scores.
struct AttentionParams {
  int64_t batch, heads, kv_heads, tq, tk, dim;
  double scale;
  bool causal;
  std::vector<double> alibi_slopes;  // empty: no ALiBi; else one per head
  bool deterministic = false;        // nx_set_deterministic: no order-dependent atomics
};

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
struct AdamParams {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled;  // AdamW: p *= 1 - lr wd; else Adam's g += wd p
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* p, size_t nbytes) = 0;
  // dst[i] = cast(src[i]); any dtypes, any strides, same shape.
  virtual void copy(const View& dst, const View& src) = 0;
  virtual void fill(const View& dst, double value) = 0;
  // dst contiguous; src same shape, any strides; dst and src of one dtype (f32, f64, i32, i64).
  virtual void unary(UnaryOp op, const View& dst, const View& src, double p0, double p1) = 0;
  // dst contiguous; a, b same dtype and shape as dst (strided); dst Bool for comparisons.
  virtual void binary(BinaryOp op, const View& dst, const View& a, const View& b) = 0;
  // dst contiguous = cond ? a : b; cond Bool.
  virtual void where(const View& dst, const View& cond, const View& a, const View& b) = 0;
  // src contiguous [rows, cols] -> dst contiguous [rows] (I64 for ArgMax).
  virtual void reduce_rows(ReduceOp op, const View& dst, const View& src, int64_t rows,
                           int64_t cols) = 0;
  // src contiguous [outer, n, inner] reduced over n -> dst contiguous [outer, inner] (Sum/Max/Min)
  virtual void reduce_middle(ReduceOp op, const View& dst, const View& src, int64_t outer,
                             int64_t n, int64_t inner) = 0;
  // dst [batch, m, n] contiguous = a [batch, m, k] @ b [batch, k, n] (a, b any strides).
  virtual void matmul(const View& dst, const View& a, const View& b) = 0;
  // rows of contiguous src [rows, cols] -> dst, softmax or log_softmax.
  virtual void softmax_rows(const View& dst, const View& src, int64_t rows, int64_t cols,
                            bool log) = 0;
  // dst [outer, nidx, inner] = src [outer, n, inner] at index [nidx] (contiguous src, dst).
  virtual void index_select(const View& dst, const View& src, const View& index, int64_t outer,
                            int64_t n, int64_t inner) = 0;
  // dst [outer, n, inner] += src [outer, nidx, inner] scattered at index (backward of above).
  virtual void index_add(const View& dst, const View& src, const View& index, int64_t outer,
                         int64_t n, int64_t inner) = 0;
  // torch.gather / scatter_add along axis; all contiguous, index I64 with dst's (gather) shape.
  virtual void gather(const View& dst, const View& src, const View& index, int64_t axis) = 0;
  virtual void scatter_add(const View& dst, const View& src, const View& index, int64_t axis) = 0;
  // Counter-based random numbers: element i depends only on (seed, offset + i).
  virtual void random(const View& dst, uint64_t seed, uint64_t offset, bool normal) = 0;
  virtual void synchronize() = 0;
  // Host <-> device transfers of n contiguous bytes; download returns once dst holds the data.
  virtual void upload(void* dst, const void* host_src, size_t n) = 0;
  virtual void download(void* host_dst, const void* src, size_t n) = 0;
  // out [B, H, Tq, D] and lse [B, H, Tq] (the log-sum-exp of each row's scaled scores; f64 for
  // f64 inputs, f32 otherwise; +inf for a row whose keys are all masked).
  virtual void attention_forward(const AttentionParams& p, const View& q, const View& k, const View& v,
                                 const View& out, const View& lse) = 0;
  // Gradients from the saved lse; dk, dv summed over the query heads sharing a kv head.
  // Deterministic (no atomics).
  virtual void attention_backward(const AttentionParams& p, const View& q, const View& k, const View& v,
                                  const View& out, const View& dout, const View& lse, const View& dq,
                                  const View& dk, const View& dv) = 0;
  // y = (x - mean) rstd w + b (rms: x rstd w); w, b may have null data (absent). With residual
  // data non-null, the row is s = x + residual, written to sum_out, and normalized. mean and rstd
  // [rows] in the accumulation dtype (mean unused by rms, may be null).
  virtual void norm_forward(const NormParams& p, const View& y, const View& sum_out, const View& x,
                            const View& residual, const View& w, const View& b, const View& mean,
                            const View& rstd) = 0;
  // dx from dy and the saved statistics; dw, db [cols] (accumulation dtype; null data when not
  // wanted) summed over rows in a fixed order (deterministic).
  virtual void norm_backward(const NormParams& p, const View& dx, const View& dw, const View& db, const View& dy,
                             const View& x, const View& w, const View& mean, const View& rstd) = 0;
  // Softmax cross-entropy over rows of logits [rows, cols] with i64 target [rows]: lse [rows] and
  // loss [rows] = lse - logit[target] (0 where target == ignore_index), accumulation dtype.
  // A target outside [0, cols) gives NaN (CUDA) or throws (CPU).
  virtual void xent_forward(const View& loss, const View& lse, const View& logits, const View& target,
                            int64_t rows, int64_t cols, int64_t ignore_index) = 0;
  // dlogits = scale[row] (softmax - onehot(target)), 0 on ignored rows; scale [rows] in the
  // accumulation dtype.
  virtual void xent_backward(const View& dlogits, const View& logits, const View& target, const View& lse,
                             const View& scale, int64_t rows, int64_t cols, int64_t ignore_index) = 0;
  // One Adam(W) update of every slot (one launch on CUDA), in place; dtype of all slots.
  virtual void adam_multi(const std::vector<AdamSlot>& slots, DType dtype, const AdamParams& p) = 0;
  // Whether attention takes f16/bf16 directly (else the op casts to f32 around it).
  virtual bool native_half_attention() const { return false; }
  // Whether matmul takes f16/bf16 operands directly (accumulating in f32).
  virtual bool native_half_matmul() const { return false; }
};

Backend& backend(Device device);
// nx_set_deterministic: kernels avoid atomics whose order changes the last bits of a result.
void set_deterministic(bool on);
bool deterministic();
Backend& cpu_backend();

}  // namespace nx
