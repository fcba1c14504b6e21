// The fused flash attention (CPU kernels) against the composite attention built from ops
// (matmul, softmax, masks: itself gradchecked), forward and the three gradients, over a grid of
// shapes: lengths that are not tile multiples, Tq < Tk (prefill after a cache), grouped-query
// heads, causal and ALiBi.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>

#include "autograd/engine.hpp"
#include "cpu/simd.hpp"
#include "nn/functional.hpp"

namespace nx {
namespace {

double max_abs_diff(const Tensor& a, const Tensor& b) {
  Tensor d = amax(unary(UnaryOp::Abs, sub(cast(a, DType::F64), cast(b, DType::F64))), {}, false);
  return item(d);
}

struct Case { int64_t b, h, hkv, tq, tk, d; bool causal, alibi; };

class FlashVsComposite : public ::testing::TestWithParam<Case> {};

TEST_P(FlashVsComposite, ForwardAndGradientsMatch) {
  const Case c = GetParam();
  const Device cpu{};
  manual_seed(11);
  auto leaf = [&](Shape s) { Tensor t = randn(s, DType::F64, cpu); t.impl()->requires_grad = true; return t; };
  Tensor q = leaf({c.b, c.h, c.tq, c.d}), k = leaf({c.b, c.hkv, c.tk, c.d}), v = leaf({c.b, c.hkv, c.tk, c.d});
  const double scale = 1.0 / std::sqrt(double(c.d));
  Tensor ref = fn::attention(q, k, v, c.causal, c.alibi, scale);
  Tensor gout = randn(ref.shape(), DType::F64, cpu);
  BackwardOptions opt;
  opt.accumulate = false;
  opt.retain_graph = true;
  auto gr = run_backward(ref, gout, opt, {q, k, v});
  const std::string restore = cpu::simd().name;
  // the kernels are compiled once per ISA: every level this processor has must agree
  for (const char* level : {"scalar", "avx2", "avx512"}) {
    if (!cpu::set_simd_level(level)) continue;
    Tensor got = flash_attention(q, k, v, c.causal, c.alibi, 0.0);
    EXPECT_LT(max_abs_diff(got, ref), 1e-10) << level;
    auto gg = run_backward(got, gout, opt, {q, k, v});
    for (int i = 0; i < 3; ++i) EXPECT_LT(max_abs_diff(gg[size_t(i)], gr[size_t(i)]), 1e-10) << level << " gradient " << i;
  }
  cpu::set_simd_level(restore.c_str());
}

INSTANTIATE_TEST_SUITE_P(Grid, FlashVsComposite, ::testing::Values(
    Case{1, 1, 1, 1, 1, 8, false, false}, Case{2, 2, 2, 17, 17, 16, true, false}, Case{1, 4, 2, 33, 33, 32, true, true},
    Case{2, 4, 1, 5, 70, 64, true, false}, Case{1, 2, 2, 70, 70, 24, false, true}, Case{1, 8, 8, 1, 100, 64, true, true},
    Case{1, 3, 1, 40, 65, 128, false, false}, Case{1, 2, 1, 66, 66, 96, true, true}));

TEST(FlashAttention, F32AndErrors) {
  const Device cpu{};
  manual_seed(3);
  Tensor q = randn({2, 4, 50, 32}, DType::F32, cpu), k = randn({2, 2, 50, 32}, DType::F32, cpu), v = randn({2, 2, 50, 32}, DType::F32, cpu);
  EXPECT_LT(max_abs_diff(flash_attention(q, k, v, true, false, 0.0), fn::attention(q, k, v, true, false, 1 / std::sqrt(32.0))), 1e-5);
  Tensor bf = flash_attention(cast(q, DType::BF16), cast(k, DType::BF16), cast(v, DType::BF16), true, false, 0.0);
  EXPECT_EQ(bf.dtype(), DType::BF16);
  EXPECT_LT(max_abs_diff(bf, fn::attention(q, k, v, true, false, 1 / std::sqrt(32.0))), 3e-2);
  try {
    flash_attention(q, randn({2, 3, 50, 32}, DType::F32, cpu), v, false, false, 0.0);
    FAIL() << "3 kv heads for 4 heads must fail";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), NX_ERR_SHAPE);
  }
  try {
    flash_attention(q, cast(k, DType::F64), v, false, false, 0.0);
    FAIL() << "mixed dtypes must fail";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), NX_ERR_DTYPE);
  }
}

}  // namespace
}  // namespace nx
