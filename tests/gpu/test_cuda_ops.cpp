// Every op and every gradient on CUDA against the CPU on the same random inputs (f32 at
// atol 1e-5 / rtol 1e-4 like the parity tests; f64 at 1e-10; atomics-based gradients of
// index_select/gather/embedding at 1e-5 as well since their sums are short).
#include <functional>
#include <string>

#include "gpu_test_util.hpp"

namespace nx::gputest {
namespace {

struct Input {
  Shape shape;
  double lo = -2, hi = 2;
  int64_t index_range = 0;  // > 0: an i64 index tensor with values in [0, index_range)
  bool transposed = false;  // feed a transposed (non-contiguous) view
};

struct OpCase {
  std::string name;
  std::vector<Input> inputs;
  std::function<Tensor(const std::vector<Tensor>&)> f;
  DType dtype = DType::F32;
};

// The leaf (contiguous, requires grad for floats); transposed inputs are fed as a view of it.
Tensor make_leaf(const Input& in, DType dtype, uint64_t seed) {
  manual_seed(seed);
  if (in.index_range > 0) {
    Tensor u = rand(in.shape, DType::F64, kCpu);
    return cast(mul_scalar(u, double(in.index_range) - 1e-9), DType::I64);
  }
  Shape shape = in.shape;
  if (in.transposed) std::swap(shape[0], shape[1]);
  return detach(add_scalar(mul_scalar(rand(shape, dtype, kCpu), in.hi - in.lo), in.lo));
}
Tensor feed(const Input& in, const Tensor& leaf) { return in.transposed ? transpose(leaf, 0, 1) : leaf; }

std::vector<OpCase> cases() {
  using V = const std::vector<Tensor>&;
  std::vector<OpCase> c;
  auto un = [&](const std::string& name, UnaryOp op, double lo = -2, double hi = 2, double p0 = 0, double p1 = 0) {
    c.push_back({name, {{{6, 33}, lo, hi}}, [op, p0, p1](V x) { return unary(op, x[0], p0, p1); }});
    c.push_back({name + "_strided", {{{6, 33}, lo, hi, 0, true}}, [op, p0, p1](V x) { return unary(op, x[0], p0, p1); }});
  };
  un("neg", UnaryOp::Neg); un("abs", UnaryOp::Abs); un("exp", UnaryOp::Exp); un("log", UnaryOp::Log, 0.1, 3);
  un("sqrt", UnaryOp::Sqrt, 0.1, 3); un("rsqrt", UnaryOp::Rsqrt, 0.1, 3); un("sin", UnaryOp::Sin); un("cos", UnaryOp::Cos);
  un("tanh", UnaryOp::Tanh); un("sinh", UnaryOp::Sinh); un("cosh", UnaryOp::Cosh); un("sigmoid", UnaryOp::Sigmoid);
  un("relu", UnaryOp::Relu); un("leaky_relu", UnaryOp::LeakyRelu, -2, 2, 0.1); un("gelu", UnaryOp::Gelu);
  un("gelu_tanh", UnaryOp::GeluTanh); un("silu", UnaryOp::Silu); un("softplus", UnaryOp::Softplus, -30, 30);
  un("mish", UnaryOp::Mish); un("clamp", UnaryOp::Clamp, -2, 2, -0.5, 0.7); un("pow_scalar", UnaryOp::PowScalar, 0.1, 2, 2.5);
  un("add_scalar", UnaryOp::AddScalar, -2, 2, 0.3); un("mul_scalar", UnaryOp::MulScalar, -2, 2, -1.7);
  auto bin = [&](const std::string& name, BinaryOp op, double lo = -2, double hi = 2) {
    c.push_back({name, {{{4, 5, 6}, lo, hi}, {{4, 5, 6}, lo, hi}}, [op](V x) { return binary(op, x[0], x[1]); }});
    c.push_back({name + "_broadcast", {{{3, 1, 6}, lo, hi}, {{4, 6}, lo, hi}}, [op](V x) { return binary(op, x[0], x[1]); }});
  };
  bin("add", BinaryOp::Add); bin("sub", BinaryOp::Sub); bin("mul", BinaryOp::Mul); bin("div", BinaryOp::Div, 0.5, 2);
  bin("pow", BinaryOp::Pow, 0.5, 2); bin("maximum", BinaryOp::Maximum); bin("minimum", BinaryOp::Minimum);
  bin("add_relu", BinaryOp::AddRelu); bin("bias_gelu", BinaryOp::AddGelu); bin("bias_gelu_tanh", BinaryOp::AddGeluTanh);
  bin("mul_tanh", BinaryOp::MulTanh);
  for (auto op : {BinaryOp::Eq, BinaryOp::Lt, BinaryOp::Ge})
    c.push_back({"compare", {{{4, 7}}, {{7}}}, [op](V x) { return cast(binary(op, x[0], x[1]), DType::F32); }});
  c.push_back({"where", {{{5, 6}}, {{5, 6}}, {{1, 6}}}, [](V x) {
    return where(binary(BinaryOp::Gt, x[0], zeros_like(x[0])), x[1], x[2]); }});
  auto red = [&](const std::string& name, std::function<Tensor(const Tensor&)> f, Shape shape = {5, 7, 9}) {
    c.push_back({name, {{shape}}, [f](V x) { return f(x[0]); }});
  };
  red("sum_all", [](const Tensor& x) { return sum(x, {}, false); });
  red("sum_last", [](const Tensor& x) { return sum(x, {-1}, false); });
  red("sum_middle", [](const Tensor& x) { return sum(x, {1}, true); });
  red("sum_0_2", [](const Tensor& x) { return sum(x, {0, 2}, false); });
  red("sum_big", [](const Tensor& x) { return sum(x, {}, false); }, {3, 100000});
  red("mean", [](const Tensor& x) { return mean(x, {0}, false); });
  red("amax", [](const Tensor& x) { return amax(x, {2}, false); });
  red("amin", [](const Tensor& x) { return amin(x, {0, 1}, true); });
  red("var", [](const Tensor& x) { return var(x, {1}, 1, false); });
  red("argmax", [](const Tensor& x) { return cast(argmax(x, 1, false), DType::F32); });
  red("softmax", [](const Tensor& x) { return softmax(x, -1); });
  red("softmax_axis0", [](const Tensor& x) { return softmax(x, 0); });
  red("log_softmax", [](const Tensor& x) { return log_softmax(x, 1); });
  red("softmax_wide", [](const Tensor& x) { return softmax(x, -1); }, {4, 3000});
  // f32 rows of width 4k go to the pipelined kernel: more rows than blocks, and the widest row
  red("softmax_many_rows", [](const Tensor& x) { return softmax(x, -1); }, {9000, 64});
  red("log_softmax_4096", [](const Tensor& x) { return log_softmax(x, -1); }, {300, 4096});
  red("softmax_16384", [](const Tensor& x) { return softmax(x, -1); }, {3, 16384});
  c.push_back({"matmul", {{{33, 17}}, {{17, 29}}}, [](V x) { return matmul(x[0], x[1]); }});
  c.push_back({"matmul_transposed", {{{33, 17}, -2, 2, 0, true}, {{17, 29}, -2, 2, 0, true}}, [](V x) { return matmul(x[0], x[1]); }});
  c.push_back({"matmul_batched_broadcast", {{{2, 1, 5, 4}}, {{3, 4, 6}}}, [](V x) { return matmul(x[0], x[1]); }});
  c.push_back({"matmul_vec", {{{7}}, {{7, 5}}}, [](V x) { return matmul(x[0], x[1]); }});
  c.push_back({"linear", {{{3, 4, 8}}, {{5, 8}}, {{5}}}, [](V x) { return linear(x[0], x[1], x[2]); }});
  c.push_back({"reshape_transpose", {{{4, 6}}}, [](V x) { return reshape(transpose(x[0], 0, 1), {3, 8}); }});
  c.push_back({"permute_slice", {{{4, 5, 6}}}, [](V x) { return slice(permute(x[0], {2, 0, 1}), 1, 1, 4, 2); }});
  c.push_back({"expand", {{{4, 1}}}, [](V x) { return mul(expand(x[0], {3, 4, 5}), full({3, 4, 5}, 2.0, DType::F32, x[0].device())); }});
  c.push_back({"cat", {{{2, 3}}, {{4, 3}}}, [](V x) { return cat({x[0], x[1]}, 0); }});
  c.push_back({"stack", {{{2, 3}}, {{2, 3}}}, [](V x) { return stack({x[0], x[1]}, 1); }});
  c.push_back({"split", {{{7, 3}}}, [](V x) { auto p = split(x[0], {2, 5}, 0); return mul(p[0], slice(p[1], 0, 0, 2, 1)); }});
  c.push_back({"cast_f64", {{{3, 5}}}, [](V x) { return cast(cast(x[0], DType::F64), DType::F32); }});
  c.push_back({"cast_bf16", {{{3, 5}}}, [](V x) { return cast(cast(x[0], DType::BF16), DType::F32); }});
  c.push_back({"cast_f16", {{{3, 5}}}, [](V x) { return cast(cast(x[0], DType::F16), DType::F32); }});
  c.push_back({"index_select", {{{6, 4}}, {{9}, 0, 0, 6}}, [](V x) { return index_select(x[0], 0, x[1]); }});
  c.push_back({"gather", {{{5, 7}}, {{5, 3}, 0, 0, 7}}, [](V x) { return gather(x[0], 1, x[1]); }});
  c.push_back({"embedding", {{{10, 8}}, {{3, 4}, 0, 0, 10}}, [](V x) { return embedding(x[0], x[1]); }});
  c.push_back({"one_hot", {{{6}, 0, 0, 4}}, [](V x) { return one_hot(x[0], 4, DType::F32); }});
  c.push_back({"cross_entropy", {{{8, 5}}, {{8}, 0, 0, 5}}, [](V x) { return cross_entropy(x[0], x[1], 2, 0.1, Reduction::Mean); }});
  c.push_back({"nll_loss", {{{8, 5}}, {{8}, 0, 0, 5}}, [](V x) { return nll_loss(log_softmax(x[0], 1), x[1], -100, Reduction::Sum); }});
  c.push_back({"mse_loss", {{{4, 6}}, {{4, 6}}}, [](V x) { return mse_loss(x[0], x[1], Reduction::Mean); }});
  c.push_back({"bce_with_logits", {{{4, 6}}, {{4, 6}, 0, 1}}, [](V x) { return bce_with_logits(x[0], x[1], Reduction::Mean); }});
  auto fa = [&](const std::string& name, Shape qs, Shape ks, bool causal, bool alibi) {
    c.push_back({name, {{qs}, {ks}, {ks}}, [causal, alibi](V x) { return flash_attention(x[0], x[1], x[2], causal, alibi, 0.0); }});
  };
  fa("flash", {2, 4, 33, 32}, {2, 4, 33, 32}, false, false);
  fa("flash_causal_gqa", {2, 4, 45, 64}, {2, 2, 50, 64}, true, false);
  fa("flash_alibi_d128", {1, 4, 70, 128}, {1, 4, 70, 128}, true, true);
  fa("flash_d96", {1, 2, 17, 96}, {1, 1, 17, 96}, false, true);
  fa("flash_decode", {2, 8, 1, 64}, {2, 8, 700, 64}, true, false);
  fa("flash_decode_gqa", {1, 8, 3, 128}, {1, 2, 1000, 128}, true, true);
  size_t n = c.size();
  for (size_t i = 0; i < n; ++i) {  // an f64 twin of every case, compared at 1e-10
    if (c[i].name.rfind("cast_", 0) == 0) continue;
    OpCase d = c[i];
    d.name += "_f64";
    d.dtype = DType::F64;
    c.push_back(d);
  }
  return c;
}

class CudaOp : public ::testing::TestWithParam<OpCase> {};

TEST_P(CudaOp, MatchesCpuForwardAndBackward) {
  NX_REQUIRE_GPU();
  const OpCase& oc = GetParam();
  const double atol = oc.dtype == DType::F64 ? 1e-10 : 1e-5, rtol = oc.dtype == DType::F64 ? 1e-10 : 1e-4;
  std::vector<Tensor> cpu_leaves, gpu_leaves, cpu_in, gpu_in;
  for (size_t i = 0; i < oc.inputs.size(); ++i) {
    Tensor t = make_leaf(oc.inputs[i], oc.dtype, 1000 + i);
    Tensor g = detach(to_device(t, kGpu));
    if (is_floating(t.dtype())) {
      t.impl()->requires_grad = true;
      g.impl()->requires_grad = true;
      cpu_leaves.push_back(t);
      gpu_leaves.push_back(g);
    }
    cpu_in.push_back(feed(oc.inputs[i], t));
    gpu_in.push_back(feed(oc.inputs[i], g));
  }
  Tensor cpu_out = oc.f(cpu_in), gpu_out = oc.f(gpu_in);
  ASSERT_EQ(gpu_out.device(), kGpu);
  EXPECT_TRUE(close(gpu_out, cpu_out, atol, rtol)) << "forward of " << oc.name;
  if (!cpu_out.requires_grad()) return;
  manual_seed(77);
  Tensor gout = randn(cpu_out.shape(), cpu_out.dtype(), kCpu);
  BackwardOptions opt;
  opt.accumulate = false;
  auto cg = run_backward(cpu_out, gout, opt, cpu_leaves);
  auto gg = run_backward(gpu_out, to_device(gout, kGpu), opt, gpu_leaves);
  for (size_t i = 0; i < cg.size(); ++i) {
    ASSERT_EQ(cg[i].defined(), gg[i].defined());
    if (!cg[i].defined()) continue;
    EXPECT_EQ(gg[i].device(), kGpu) << "gradient must live on the values' device";
    EXPECT_TRUE(close(gg[i], cg[i], atol, rtol)) << "gradient " << i << " of " << oc.name;
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, CudaOp, ::testing::ValuesIn(cases()), [](const auto& info) {
  return info.param.name + "_" + std::to_string(info.index);
});

}  // namespace
}  // namespace nx::gputest
