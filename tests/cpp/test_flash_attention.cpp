// The fused flash attention (CPU kernels) against the composite attention built from ops
// (matmul, softmax, masks: itself gradchecked), forward and the three gradients, over a grid of
// shapes: lengths that are not tile multiples, Tq < Tk (prefill after a cache), grouped-query
// heads, causal and ALiBi.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "autograd/engine.hpp"
#include "graph/node.hpp"
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
    Case{1, 3, 1, 40, 65, 128, false, false}, Case{1, 2, 1, 66, 66, 96, true, true},
    // one query (the keys-in-the-lanes forward): several tiles and a partial one, grouped heads
    Case{2, 4, 2, 1, 150, 32, false, false}, Case{1, 6, 3, 1, 129, 40, true, true}));

// f32, bf16 and f16 (the types the training paths use) against the f64 kernel on the same rounded
// inputs, forward and the three gradients, on every ISA level: shapes of the CPU GPTs (head_dim
// 32, causal), a decoding step (one query), more queries than keys (causal: the first rows see no
// key, output and gradient 0), ALiBi with an odd head_dim. Two runs give the same bits.
TEST(FlashAttention, LowPrecisionMatchesF64OnEveryLevel) {
  const Device cpu{};
  struct LowCase { int64_t b, h, hkv, tq, tk, d; bool causal, alibi; };
  const LowCase cases[] = {{2, 4, 4, 128, 128, 32, true, false}, {3, 4, 2, 70, 70, 32, true, false},
                           {1, 4, 4, 1, 100, 32, true, false},    {1, 2, 1, 40, 24, 16, true, false},
                           {2, 2, 2, 19, 45, 20, false, true}};
  const std::string restore = cpu::simd().name;
  for (const LowCase& c : cases) {
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
      manual_seed(17);
      auto input = [&](Shape s) { return cast(cast(randn(s, DType::F64, cpu), dt), DType::F64); };
      Tensor q = input({c.b, c.h, c.tq, c.d}), k = input({c.b, c.hkv, c.tk, c.d}), v = input({c.b, c.hkv, c.tk, c.d});
      Tensor gout = input({c.b, c.h, c.tq, c.d});
      for (Tensor* t : {&q, &k, &v}) t->impl()->requires_grad = true;
      BackwardOptions opt;
      opt.accumulate = false;
      Tensor ref = flash_attention(q, k, v, c.causal, c.alibi, 0.0);
      auto gr = run_backward(ref, gout, opt, {q, k, v});
      const double tol = dt == DType::F32 ? 2e-5 : dt == DType::F16 ? 4e-3 : 3e-2;
      for (const char* level : {"scalar", "avx2", "avx512"}) {
        if (!cpu::set_simd_level(level)) continue;
        std::vector<Tensor> bits;
        for (int run = 0; run < 2; ++run) {
          Tensor ql, kl, vl;
          {
            GradModeGuard off(false);  // fresh leaves, not casts recorded from q, k, v
            ql = cast(q, dt), kl = cast(k, dt), vl = cast(v, dt);
          }
          for (Tensor* t : {&ql, &kl, &vl}) t->impl()->requires_grad = true;
          Tensor got = flash_attention(ql, kl, vl, c.causal, c.alibi, 0.0);
          auto gg = run_backward(got, cast(gout, dt), opt, {ql, kl, vl});
          const std::string what = std::string(level) + " " + dtype_name(dt) + " tq " + std::to_string(c.tq);
          EXPECT_LT(max_abs_diff(got, ref), tol) << what;
          for (int i = 0; i < 3; ++i) EXPECT_LT(max_abs_diff(gg[size_t(i)], gr[size_t(i)]), tol) << what << " gradient " << i;
          if (c.causal && c.tq > c.tk) {  // queries before the first key: no output, no gradient
            EXPECT_EQ(max_abs_diff(slice(got, 2, 0, c.tq - c.tk, 1), zeros_like(slice(got, 2, 0, c.tq - c.tk, 1))), 0.0);
            EXPECT_EQ(max_abs_diff(slice(gg[0], 2, 0, c.tq - c.tk, 1), zeros_like(slice(gg[0], 2, 0, c.tq - c.tk, 1))), 0.0);
          }
          bits.push_back(got);
          for (const Tensor& g : gg) bits.push_back(g);
        }
        for (size_t i = 0; i < 4; ++i) EXPECT_EQ(max_abs_diff(bits[i], bits[i + 4]), 0.0) << level << " run to run " << i;
      }
    }
  }
  cpu::set_simd_level(restore.c_str());
}

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

// Decoding reads the KV cache where it is: a one-query call that records no gradient takes k and v
// as strided views (a cache's first positions, grouped heads, a batch) and gives the bits of the
// same call on contiguous copies; with a gradient recorded the op makes them contiguous and the
// gradient flows.
TEST(FlashAttention, OneQueryReadsAStridedCacheInPlace) {
  const Device cpu{};
  for (DType dt : {DType::F32, DType::BF16, DType::F64}) {
    manual_seed(23);
    Tensor kcache = cast(randn({2, 3, 90, 32}, DType::F32, cpu), dt), vcache = cast(randn({2, 3, 90, 32}, DType::F32, cpu), dt);
    Tensor q = cast(randn({2, 6, 1, 32}, DType::F32, cpu), dt);
    for (int64_t len : {1, 37, 64, 90}) {
      Tensor k = slice(kcache, 2, 0, len, 1), v = slice(vcache, 2, 0, len, 1);
      if (len < 90) ASSERT_FALSE(k.is_contiguous());
      for (bool alibi : {false, true}) {
        const Tensor strided = flash_attention(q, k, v, true, alibi, 0.0);
        const Tensor dense = flash_attention(q, contiguous(k), contiguous(v), true, alibi, 0.0);
        EXPECT_EQ(max_abs_diff(strided, dense), 0.0) << dtype_name(dt) << " len " << len << " alibi " << alibi;
      }
    }
    Tensor qg = detach(q);
    qg.impl()->requires_grad = true;
    Tensor k = slice(kcache, 2, 0, 37, 1), v = slice(vcache, 2, 0, 37, 1);
    Tensor out = flash_attention(qg, k, v, true, false, 0.0);
    run_backward(sum(out, {}, false), Tensor(), BackwardOptions{});
    ASSERT_TRUE(qg.impl()->grad != nullptr) << dtype_name(dt);
    EXPECT_EQ(max_abs_diff(out, flash_attention(q, contiguous(k), contiguous(v), true, false, 0.0)), 0.0);
  }
}

}  // namespace
}  // namespace nx
