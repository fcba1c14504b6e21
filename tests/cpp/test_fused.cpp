// The fused ops on the CPU beyond gradcheck: the multi-tensor Adam(W) step against torch.optim's
// formulas in f64, the optimizer's fused path against its per-tensor path, half-precision norms
// and cross-entropy against the composite ops, and argument errors.
#include "autograd/engine.hpp"
#include "cpp_test_util.hpp"
#include "nn/functional.hpp"
#include "nn/optim.hpp"

namespace {

using nx::DType;
using nx::Tensor;
using nxt::values;

// torch.optim.Adam(W) for one element sequence, in f64.
void adam_reference(std::vector<double>& p, const std::vector<double>& g, std::vector<double>& m,
                    std::vector<double>& v, int64_t t, const nx::AdamParams& hp) {
  const double bc1 = 1 - std::pow(hp.beta1, double(t)), bc2 = 1 - std::pow(hp.beta2, double(t));
  for (size_t i = 0; i < p.size(); ++i) {
    double gi = g[i];
    if (hp.decoupled) p[i] *= 1 - hp.lr * hp.weight_decay;
    else gi += hp.weight_decay * p[i];
    m[i] = hp.beta1 * m[i] + (1 - hp.beta1) * gi;
    v[i] = hp.beta2 * v[i] + (1 - hp.beta2) * gi * gi;
    p[i] -= hp.lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + hp.eps);
  }
}

TEST(FusedAdam, MatchesTorchFormulaOverManyTensors) {
  std::mt19937_64 g(5);
  for (DType dt : {DType::F64, DType::F32}) {
    for (bool decoupled : {true, false}) {
      const nx::AdamParams hp{1e-2, 0.9, 0.99, 1e-8, 0.1, decoupled};
      // sizes around the 65536-element chunk, an odd one, and a scalar
      const std::vector<int64_t> sizes{70001, 3, 1, 65536, 129};
      std::vector<Tensor> ps, gs, ms, vs;
      std::vector<std::vector<double>> rp, rg, rm, rv;
      std::vector<int64_t> steps;
      for (size_t i = 0; i < sizes.size(); ++i) {
        rp.push_back(nxt::uniform(g, size_t(sizes[i]), -1, 1));
        rg.push_back(nxt::uniform(g, size_t(sizes[i]), -1, 1));
        rm.push_back(nxt::uniform(g, size_t(sizes[i]), -0.1, 0.1));
        rv.push_back(nxt::uniform(g, size_t(sizes[i]), 0, 0.1));
        ps.push_back(nxt::make(rp[i], {sizes[i]}, dt));
        gs.push_back(nxt::make(rg[i], {sizes[i]}, dt));
        ms.push_back(nxt::make(rm[i], {sizes[i]}, dt));
        vs.push_back(nxt::make(rv[i], {sizes[i]}, dt));
        steps.push_back(int64_t(i) + 1);  // per-tensor step counts
        // the reference starts from the values as stored (f32 rounding)
        rp[i] = values(ps[i]); rg[i] = values(gs[i]); rm[i] = values(ms[i]); rv[i] = values(vs[i]);
      }
      nx::adam_step_multi(ps, gs, ms, vs, steps, hp);
      const double tol = dt == DType::F64 ? 1e-12 : 2e-6;
      for (size_t i = 0; i < sizes.size(); ++i) {
        adam_reference(rp[i], rg[i], rm[i], rv[i], steps[i], hp);
        auto p = values(ps[i]), m = values(ms[i]), v = values(vs[i]);
        for (size_t j = 0; j < p.size(); ++j) {
          ASSERT_NEAR(p[j], rp[i][j], tol * (1 + std::fabs(rp[i][j]))) << "tensor " << i << " element " << j;
          ASSERT_NEAR(m[j], rm[i][j], tol * (1 + std::fabs(rm[i][j])));
          ASSERT_NEAR(v[j], rv[i][j], tol * (1 + std::fabs(rv[i][j])));
        }
      }
    }
  }
}

TEST(FusedAdam, RejectsBadArguments) {
  Tensor a = nxt::make({1, 2, 3, 4}, {2, 2}), b = nxt::make({1, 2}, {2}), f = nxt::make({1, 2, 3, 4}, {2, 2}, DType::F32);
  const nx::AdamParams hp{1e-3, 0.9, 0.999, 1e-8, 0, true};
  EXPECT_EQ(nxt::status_of([&] { nx::adam_step_multi({a}, {b}, {a}, {a}, {1}, hp); }), NX_ERR_SHAPE);
  EXPECT_EQ(nxt::status_of([&] { nx::adam_step_multi({a}, {f}, {a}, {a}, {1}, hp); }), NX_ERR_DTYPE);
  EXPECT_EQ(nxt::status_of([&] { nx::adam_step_multi({a}, {nx::transpose(a, 0, 1)}, {a}, {a}, {1}, hp); }),
            NX_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(nxt::status_of([&] { nx::adam_step_multi({a}, {a}, {a}, {a}, {0}, hp); }), NX_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(nxt::status_of([&] { nx::adam_step_multi({a}, {a, a}, {a}, {a}, {1}, hp); }), NX_ERR_INVALID_ARGUMENT);
  nx::AdamParams bad = hp;
  bad.beta1 = 1.0;
  EXPECT_EQ(nxt::status_of([&] { nx::adam_step_multi({a}, {a}, {a}, {a}, {1}, bad); }), NX_ERR_INVALID_ARGUMENT);
}

// nn::Adam's fused path (contiguous params) and its per-tensor path (a non-contiguous param
// forces it) agree over a few steps, including a parameter that skips a step.
TEST(FusedAdam, OptimizerFusedPathMatchesPerTensorPath) {
  std::mt19937_64 g(9);
  auto w0 = nxt::uniform(g, 12, -1, 1), b0 = nxt::uniform(g, 3, -1, 1);
  auto run = [&](bool contiguous) {
    Tensor w = nxt::make(w0, {3, 4}), b = nxt::make(b0, {3});
    if (!contiguous) w = nx::contiguous(nx::transpose(nxt::make(w0, {3, 4}), 0, 1)).alias({3, 4}, {1, 3}, 0);
    w.impl()->requires_grad = true;
    b.impl()->requires_grad = true;
    nx::nn::Adam opt({w, b}, 0.05, 0.9, 0.999, 1e-8, 0.01, true);
    for (int step = 0; step < 3; ++step) {
      opt.zero_grad();
      Tensor x = nxt::make({0.5, -1, 2, 0.25}, {4});
      Tensor y = nx::sum(nx::square(nx::add(nx::matmul(w, x), step == 1 ? nx::zeros({3}, DType::F64, nxt::cpu()) : b)), {}, false);
      nx::run_backward(y, Tensor(), nx::BackwardOptions{});
      opt.step();
    }
    std::vector<double> out = values(w), bv = values(b);
    out.insert(out.end(), bv.begin(), bv.end());
    return out;
  };
  auto fused = run(true), plain = run(false);
  ASSERT_EQ(fused.size(), plain.size());
  for (size_t i = 0; i < fused.size(); ++i) EXPECT_NEAR(fused[i], plain[i], 1e-13) << i;
}

TEST(FusedOps, HalfNormsAndCrossEntropyMatchComposites) {
  std::mt19937_64 g(3);
  for (DType dt : {DType::BF16, DType::F16, DType::F32}) {
    Tensor x = nxt::make(nxt::uniform(g, 6 * 37, -2, 2), {6, 37}, dt), w = nxt::make(nxt::uniform(g, 37, 0.5, 1.5), {37}, dt);
    Tensor bias = nxt::make(nxt::uniform(g, 37, -1, 1), {37}, dt);
    const double tol = dt == DType::F32 ? 1e-5 : dt == DType::BF16 ? 2e-2 : 4e-3;
    auto near = [&](const Tensor& a, const Tensor& b) {
      EXPECT_EQ(a.dtype(), dt);
      auto va = values(a), vb = values(nx::cast(b, DType::F64));
      for (size_t i = 0; i < va.size(); ++i) ASSERT_NEAR(va[i], vb[i], tol * (1 + std::fabs(vb[i]))) << i;
    };
    Tensor x64 = nx::cast(x, DType::F64), w64 = nx::cast(w, DType::F64), b64 = nx::cast(bias, DType::F64);
    near(nx::rms_norm(x, w, 1e-6), nx::fn::rms_norm(x64, w64, 1e-6));
    near(nx::layer_norm(x, w, bias, 1e-5), nx::fn::layer_norm(x64, w64, b64, 1e-5));
    Tensor t = nxt::make_i64({0, 36, 5, 7, -100, 1}, {6});
    near(nx::softmax_cross_entropy(x, t, -100, nx::Reduction::None),
         nx::nll_loss(nx::log_softmax(x64, 1), t, -100, nx::Reduction::None));
  }
}

TEST(FusedOps, ArgumentErrors) {
  Tensor x = nxt::make({1, 2, 3, 4, 5, 6}, {2, 3}), w = nxt::make({1, 2}, {2});
  EXPECT_EQ(nxt::status_of([&] { nx::rms_norm(x, w, 1e-5); }), NX_ERR_SHAPE);
  EXPECT_EQ(nxt::status_of([&] { nx::rms_norm(x, Tensor(), -1); }), NX_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(nxt::status_of([&] { nx::fused_norm(x, w, Tensor(), Tensor(), 1e-5, true); }), NX_ERR_SHAPE);
  EXPECT_EQ(nxt::status_of([&] { nx::rms_norm(nxt::make_i64({1, 2}, {2}), Tensor(), 1e-5); }), NX_ERR_DTYPE);
  EXPECT_EQ(nxt::status_of([&] { nx::softmax_cross_entropy(x, nxt::make_i64({0, 3}, {2}), -100, nx::Reduction::Mean); }),
            NX_ERR_INVALID_ARGUMENT);  // 3 is outside [0, 3)
  EXPECT_EQ(nxt::status_of([&] { nx::softmax_cross_entropy(x, nxt::make_i64({0}, {1}), -100, nx::Reduction::Mean); }),
            NX_ERR_SHAPE);
  EXPECT_EQ(nxt::status_of([&] { nx::softmax_cross_entropy(x, x, -100, nx::Reduction::Mean); }), NX_ERR_DTYPE);
  // all rows ignored: the mean is NaN, as in PyTorch
  EXPECT_TRUE(std::isnan(nx::item(nx::softmax_cross_entropy(x, nxt::make_i64({-1, -1}, {2}), -1, nx::Reduction::Mean))));
}

}  // namespace
