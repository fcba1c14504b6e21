// Layer-level ops composed from differentiable core ops (so their gradients are exact and
// parity-tested through the ops they use): normalizations, dropout, rotary embeddings,
// attention with causal mask / ALiBi / grouped-query heads, im2col convolution and pooling.
#pragma once
#include "ops/ops.hpp"

namespace nx::fn {

// Normalizes over the last dimension; weight/bias may be undefined.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps);
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps);
// Zeroes elements with probability p and scales the rest by 1/(1-p) (training only).
Tensor dropout(const Tensor& x, double p, bool training);
// Rotary position embedding on [B, H, T, D] (D even), positions start..start+T-1.
Tensor rope(const Tensor& x, int64_t start, double base = 10000.0);
// ALiBi slopes for n heads (Press et al.): 2^(-8 i / n) for the geometric sequence.
std::vector<double> alibi_slopes(int64_t heads);
// softmax(q k^T * scale + bias) v for q [B, H, Tq, D], k, v [B, Hkv, Tk, D] (H a multiple of
// Hkv). causal masks keys after the query's absolute position (query i sits at Tk - Tq + i).
// alibi adds -slope_h * (query position - key position).
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, bool alibi, double scale);
// x [N, C, H, W] -> [N, C * kh * kw, Ho * Wo] (im2col), with zero padding.
Tensor unfold2d(const Tensor& x, int64_t kh, int64_t kw, int64_t stride, int64_t padding);
// weight [O, C, kh, kw], bias [O] or undefined.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding);
Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride);
Tensor avg_pool2d(const Tensor& x, int64_t kernel, int64_t stride);
Tensor activation(const std::string& name, const Tensor& x);

}  // namespace nx::fn
