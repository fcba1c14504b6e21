// Helpers for the CUDA tests: skip without a GPU, compare a CUDA tensor with a CPU one.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/cuda_iface.hpp"
#include "autograd/engine.hpp"
#include "ops/ops.hpp"

namespace nx::gputest {

inline const Device kCpu{NX_CPU, 0};
inline const Device kGpu{NX_CUDA, 0};

#define NX_REQUIRE_GPU() \
  do { if (::nx::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device"; } while (0)

inline std::vector<double> values(const Tensor& t) {
  Tensor d = cast(detach(to_device(detach(t), kCpu)), DType::F64);
  std::vector<double> v(static_cast<size_t>(d.numel()));
  copy_to_host(d, v.data(), v.size() * sizeof(double));
  return v;
}

// Largest |t| (any device, any floating dtype), in f64.
inline double max_abs(const Tensor& t) {
  return item(amax(unary(UnaryOp::Abs, cast(detach(to_device(t, kCpu)), DType::F64)), {}, false));
}
// Largest |a - b|, in f64.
inline double max_err(const Tensor& a, const Tensor& b) {
  return max_abs(sub(cast(detach(to_device(a, kCpu)), DType::F64), cast(detach(to_device(b, kCpu)), DType::F64)));
}
// A detached copy of t's data that requires grad (a leaf of a new graph).
inline Tensor grad_leaf(const Tensor& t) {
  Tensor l = detach(t);
  l.impl()->requires_grad = true;
  return l;
}

// The oracle of the GPU attention tests: the f64 CPU flash attention of q, k, v (cast up) and its
// q/k/v gradients for the upstream gradient gout.
struct AttentionReference {
  Tensor out;
  std::vector<Tensor> grads;
};
inline AttentionReference f64_attention_reference(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                                  bool alibi, const Tensor& gout) {
  Tensor q64 = grad_leaf(cast(q, DType::F64)), k64 = grad_leaf(cast(k, DType::F64)), v64 = grad_leaf(cast(v, DType::F64));
  Tensor out = flash_attention(q64, k64, v64, causal, alibi, 0.0);
  BackwardOptions opt;
  opt.accumulate = false;
  return {out, run_backward(out, cast(gout, DType::F64), opt, {q64, k64, v64})};
}

// max |a-b| - (atol + rtol |b|) <= 0 elementwise; reports the worst element.
inline ::testing::AssertionResult close(const Tensor& got, const Tensor& want, double atol, double rtol) {
  if (got.shape() != want.shape())
    return ::testing::AssertionFailure() << "shape " << shape_str(got.shape()) << " vs " << shape_str(want.shape());
  auto g = values(got), w = values(want);
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    double excess = std::fabs(g[i] - w[i]) - (atol + rtol * std::fabs(w[i]));
    if (std::isnan(g[i]) != std::isnan(w[i])) excess = INFINITY;
    if (std::isnan(g[i]) && std::isnan(w[i])) excess = 0;
    if (excess > worst) { worst = excess; at = i; }
  }
  if (worst > 0)
    return ::testing::AssertionFailure() << "element " << at << ": got " << g[at] << " want " << w[at]
                                         << " (atol " << atol << ", rtol " << rtol << ")";
  return ::testing::AssertionSuccess();
}

}  // namespace nx::gputest
