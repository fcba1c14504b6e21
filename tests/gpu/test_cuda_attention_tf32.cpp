// Flash attention in f32 with TF32 enabled (the tensor-core kernels of flash_tf32.cu) against the
// f64 CPU kernels on the same inputs, forward and the three gradients, over a grid: head_dim 32,
// 64 and 128, causal and full, ALiBi, grouped-query heads, fewer queries than keys (and more, so that
// causal rows without keys occur), lengths 17, 100, 1000, 1024, batches of 2. TF32 keeps 10
// mantissa bits (about 5e-4 relative per rounded operand): bounds 3e-3 on the output, 1e-2 on the
// gradients, each as max abs error over the max magnitude of the reference. With TF32 off the same
// call must give the f32 SIMT result (1e-5), and the TF32 result must differ from it, which shows
// that the switch routes both directions.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "autograd/engine.hpp"
#include "gpu_test_util.hpp"

namespace nx::gputest {
namespace {

struct Tf32Case { int64_t b, h, hkv, tq, tk, d; bool causal, alibi; };

double rel_err(const Tensor& got, const Tensor& want) { return max_err(got, want) / std::max(1e-3, max_abs(want)); }

// Puts the process-wide TF32 switch back as the test found it.
struct Tf32Restore {
  bool was = cuda::tf32_enabled();
  ~Tf32Restore() { cuda::set_tf32(was); }
};

class CudaAttentionTf32 : public ::testing::TestWithParam<Tf32Case> {};

TEST_P(CudaAttentionTf32, MatchesF64ReferenceAndSwitchRoutes) {
  NX_REQUIRE_GPU();
  const Tf32Restore restore;
  const Tf32Case c = GetParam();
  manual_seed(41);
  Tensor q = randn({c.b, c.h, c.tq, c.d}, DType::F32, kCpu), k = randn({c.b, c.hkv, c.tk, c.d}, DType::F32, kCpu),
         v = randn({c.b, c.hkv, c.tk, c.d}, DType::F32, kCpu);
  manual_seed(6);
  Tensor gout = randn(q.shape(), DType::F32, kCpu);  // the output's shape: v's head_dim is q's
  const AttentionReference reference = f64_attention_reference(q, k, v, c.causal, c.alibi, gout);
  const Tensor& ref = reference.out;
  const std::vector<Tensor>& gr = reference.grads;
  BackwardOptions opt;
  opt.accumulate = false;

  struct Result { Tensor out; std::vector<Tensor> grads; };
  auto run = [&](bool tf32) {  // forward and backward both under the switch
    cuda::set_tf32(tf32);
    Tensor qg = grad_leaf(to_device(q, kGpu)), kg = grad_leaf(to_device(k, kGpu)), vg = grad_leaf(to_device(v, kGpu));
    Tensor got = flash_attention(qg, kg, vg, c.causal, c.alibi, 0.0);
    auto gg = run_backward(got, to_device(gout, kGpu), opt, {qg, kg, vg});
    return Result{got, gg};
  };
  const Result on = run(true), off = run(false);
  ASSERT_EQ(on.out.dtype(), DType::F32);

  const double fwd = rel_err(on.out, ref), fwd_off = rel_err(off.out, ref);
  double grads[3], grads_off = 0, grads_between = 0;
  for (int i = 0; i < 3; ++i) {
    grads[i] = rel_err(on.grads[size_t(i)], gr[size_t(i)]);
    grads_off = std::max(grads_off, rel_err(off.grads[size_t(i)], gr[size_t(i)]));
    grads_between = std::max(grads_between, max_err(on.grads[size_t(i)], off.grads[size_t(i)]) /
                                                std::max(1e-3, max_abs(gr[size_t(i)])));
  }
  const double fwd_between = max_err(on.out, off.out) / std::max(1e-3, max_abs(ref));
  std::printf("attention tf32 b%lld h%lld/%lld tq%lld tk%lld d%lld %s%s: fwd rel err %.2e, dq %.2e dk %.2e dv %.2e "
              "(bounds 3e-3, 1e-2); tf32 off: fwd %.2e grads %.2e (bound 1e-5); on vs off: fwd %.2e grads %.2e\n",
              (long long)c.b, (long long)c.h, (long long)c.hkv, (long long)c.tq, (long long)c.tk, (long long)c.d,
              c.causal ? "causal" : "full", c.alibi ? "+alibi" : "", fwd, grads[0], grads[1], grads[2], fwd_off,
              grads_off, fwd_between, grads_between);
  EXPECT_LT(fwd, 3e-3);
  for (int i = 0; i < 3; ++i) EXPECT_LT(grads[i], 1e-2) << "gradient " << i;
  EXPECT_LT(fwd_off, 1e-5) << "TF32 off must run the f32 SIMT forward";
  EXPECT_LT(grads_off, 1e-5) << "TF32 off must run the f32 SIMT backward";
  // TF32 rounding moves the result by ~1e-4; an identical result means the SIMT kernels ran.
  EXPECT_GT(fwd_between, 1e-6) << "TF32 on did not take the tensor-core forward";
  EXPECT_GT(grads_between, 1e-6) << "TF32 on did not take the tensor-core backward";
}

INSTANTIATE_TEST_SUITE_P(Grid, CudaAttentionTf32, ::testing::Values(
    Tf32Case{2, 4, 4, 17, 17, 64, false, false}, Tf32Case{2, 4, 2, 17, 17, 128, true, false},
    Tf32Case{2, 4, 2, 100, 100, 64, true, true}, Tf32Case{1, 8, 2, 1000, 1000, 128, true, false},
    Tf32Case{1, 4, 4, 1000, 1000, 64, false, true}, Tf32Case{2, 4, 4, 1024, 1024, 64, true, false},
    Tf32Case{1, 2, 2, 1024, 1024, 128, false, true}, Tf32Case{2, 4, 1, 100, 1000, 128, true, true},
    Tf32Case{2, 4, 2, 17, 1024, 64, true, false}, Tf32Case{1, 4, 4, 1000, 1024, 128, false, false},
    // more queries than keys, causal: the first 83 rows see no key (lse = +inf, zero output and gradient)
    Tf32Case{1, 4, 2, 100, 17, 64, true, false},
    // head_dim 32: the "bench" GPT's heads, then GQA + ALiBi with Tq < Tk
    Tf32Case{4, 8, 8, 128, 128, 32, true, false}, Tf32Case{2, 4, 2, 100, 1000, 32, true, true}));

}  // namespace
}  // namespace nx::gputest
