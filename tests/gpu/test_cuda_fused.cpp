// The fused kernels on CUDA against the CPU on the same inputs, forward and gradients: norms
// (aligned and odd widths, non-contiguous inputs, residual add), softmax cross-entropy over a
// 50257-wide vocabulary, SwiGLU's gate and the multi-tensor Adam step; f32 and bf16 (f64 where
// cheap). bf16 compares against the CPU's bf16 result, which also accumulates in wider precision.
#include <functional>

#include "autograd/engine.hpp"
#include "gpu_test_util.hpp"
#include "nn/functional.hpp"

namespace nx::gputest {
namespace {

double tol_of(DType dt) { return dt == DType::F64 ? 1e-10 : dt == DType::F32 ? 2e-5 : 2e-2; }

Tensor uniform(const Shape& shape, DType dt, double lo, double hi, uint64_t seed) {
  manual_seed(seed);
  return detach(cast(add_scalar(mul_scalar(rand(shape, DType::F32, kCpu), hi - lo), lo), dt));
}
Tensor leaf_on(const Tensor& t, Device d) {
  Tensor c = detach(to_device(t, d));
  c.impl()->requires_grad = true;
  return c;
}

// Runs f on CPU leaves and on CUDA copies of them; compares outputs and the gradients of
// sum(out * w) for fixed random weights w.
void compare(const std::string& name, const std::vector<Tensor>& inputs, DType dt,
             const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& f, bool transpose_first = false,
             double atol = -1) {
  SCOPED_TRACE(name);
  std::vector<Tensor> grads[2], outs[2];
  for (int dev = 0; dev < 2; ++dev) {
    const Device d = dev ? kGpu : kCpu;
    std::vector<Tensor> leaves, fed;
    for (const Tensor& t : inputs) leaves.push_back(is_floating(t.dtype()) ? leaf_on(t, d) : to_device(t, d));
    fed = leaves;
    if (transpose_first) fed[0] = transpose(leaves[0], 0, 1);  // a non-contiguous view
    outs[dev] = f(fed);
    Tensor loss;
    for (size_t k = 0; k < outs[dev].size(); ++k) {
      Tensor w = to_device(uniform(outs[dev][k].shape(), outs[dev][k].dtype(), -1, 1, 77 + k), d);
      Tensor term = sum(cast(mul(outs[dev][k], w), DType::F64), {}, false);
      loss = loss.defined() ? add(loss, term) : term;
    }
    run_backward(loss, Tensor(), BackwardOptions{});
    for (const Tensor& l : leaves) grads[dev].push_back(l.impl()->grad ? Tensor(l.impl()->grad) : Tensor());
  }
  const double tol = tol_of(dt), at = atol >= 0 ? atol : tol;
  for (size_t k = 0; k < outs[0].size(); ++k) EXPECT_TRUE(close(outs[1][k], outs[0][k], at, tol)) << "output " << k;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!grads[0][i].defined()) continue;
    ASSERT_TRUE(grads[1][i].defined()) << "grad " << i;
    EXPECT_TRUE(close(grads[1][i], grads[0][i], at, tol)) << "grad " << i;
  }
}

TEST(CudaFused, Norms) {
  NX_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::BF16, DType::F64}) {
    for (int64_t cols : {4096, 1000, 37}) {
      const int64_t rows = 67;
      Tensor x = uniform({rows, cols}, dt, -2, 2, 1), r = uniform({rows, cols}, dt, -1, 1, 2);
      Tensor w = uniform({cols}, dt, 0.5, 1.5, 3), b = uniform({cols}, dt, -0.5, 0.5, 4);
      const std::string tag = std::string(dtype_name(dt)) + " cols " + std::to_string(cols);
      compare("rms_norm " + tag, {x, w}, dt, [](auto& v) { return std::vector<Tensor>{rms_norm(v[0], v[1], 1e-6)}; });
      compare("layer_norm " + tag, {x, w, b}, dt,
              [](auto& v) { return std::vector<Tensor>{layer_norm(v[0], v[1], v[2], 1e-5)}; });
      compare("add_rms_norm " + tag, {x, r, w}, dt, [](auto& v) { return fused_norm(v[0], v[1], v[2], Tensor(), 1e-6, true); });
      compare("add_layer_norm " + tag, {x, r, w, b}, dt,
              [](auto& v) { return fused_norm(v[0], v[1], v[2], v[3], 1e-5, false); });
    }
    // a transposed (non-contiguous) input, no weight
    Tensor xt = uniform({48, 33}, dt, -2, 2, 5);
    compare(std::string("rms_norm transposed ") + dtype_name(dt), {xt}, dt,
            [](auto& v) { return std::vector<Tensor>{rms_norm(v[0], Tensor(), 1e-6)}; }, true);
  }
}

TEST(CudaFused, NormManyRowsUsesFixedGrid) {
  NX_REQUIRE_GPU();  // more rows than the backward's 1024 blocks: each block strides over rows
  Tensor x = uniform({3000, 96}, DType::F32, -2, 2, 6), w = uniform({96}, DType::F32, 0.5, 1.5, 7);
  compare("rms_norm 3000 rows", {x, w}, DType::F32, [](auto& v) { return std::vector<Tensor>{rms_norm(v[0], v[1], 1e-6)}; });
}

// The register kernels (persistent grid, row in registers, next row prefetched, dw and db summed
// per thread): more rows than the grid holds at once (every block takes several rows, unevenly
// when rows do not divide), widths that take 1, 2, 4 and 8 packs per thread, f16 as well; widths
// too wide for them (the fallback for the backward, and for the forward with a residual); an
// input at an odd element offset (the fallback); dw and db bitwise reproducible.
TEST(CudaFused, NormsRegisterPathManyRows) {
  NX_REQUIRE_GPU();
  struct Case { DType dt; int64_t rows, cols; };
  const std::vector<Case> cases{{DType::F32, 1500, 4096}, {DType::BF16, 1500, 4096}, {DType::F16, 700, 4096},
                                {DType::F32, 9000, 64},   {DType::BF16, 9000, 64},   {DType::F32, 700, 1000},
                                {DType::BF16, 700, 1000}, {DType::F64, 300, 4096},   {DType::F64, 2000, 40},
                                {DType::F32, 40, 16384},  {DType::BF16, 40, 16384},  {DType::BF16, 3, 32768}};
  for (const Case& c : cases) {
    Tensor x = uniform({c.rows, c.cols}, c.dt, -2, 2, 1), r = uniform({c.rows, c.cols}, c.dt, -1, 1, 2);
    Tensor w = uniform({c.cols}, c.dt, 0.5, 1.5, 3), b = uniform({c.cols}, c.dt, -0.5, 0.5, 4);
    const std::string tag = std::string(dtype_name(c.dt)) + " " + std::to_string(c.rows) + "x" + std::to_string(c.cols);
    compare("rms_norm " + tag, {x, w}, c.dt, [](auto& v) { return std::vector<Tensor>{rms_norm(v[0], v[1], 1e-6)}; });
    compare("layer_norm " + tag, {x, w, b}, c.dt,
            [](auto& v) { return std::vector<Tensor>{layer_norm(v[0], v[1], v[2], 1e-5)}; });
    compare("add_rms_norm " + tag, {x, r, w}, c.dt, [](auto& v) { return fused_norm(v[0], v[1], v[2], Tensor(), 1e-6, true); });
    compare("add_layer_norm " + tag, {x, r, w, b}, c.dt,
            [](auto& v) { return fused_norm(v[0], v[1], v[2], v[3], 1e-5, false); });
    compare("rms_norm no weight " + tag, {x}, c.dt, [](auto& v) { return std::vector<Tensor>{rms_norm(v[0], Tensor(), 1e-6)}; });
  }
  // x at an odd element offset into its storage (every row misaligned): the fallback kernels
  for (DType dt : {DType::F32, DType::BF16}) {
    const int64_t rows = 50, cols = 4096, n = rows * cols;
    Tensor flat = uniform({n + 1}, dt, -2, 2, 8), w = uniform({cols}, dt, 0.5, 1.5, 9);
    compare(std::string("rms_norm offset view ") + dtype_name(dt), {flat, w}, dt, [=](auto& v) {
      return std::vector<Tensor>{rms_norm(reshape(slice(v[0], 0, 1, n + 1, 1), {rows, cols}), v[1], 1e-6)};
    });
  }
  // the weight gradients twice: the same bits (a fixed summation order)
  for (DType dt : {DType::F32, DType::BF16}) {
    Tensor x = to_device(uniform({2000, 4096}, dt, -2, 2, 10), kGpu), gy = to_device(uniform({2000, 4096}, dt, -1, 1, 11), kGpu);
    Tensor w = uniform({4096}, dt, 0.5, 1.5, 12), b = uniform({4096}, dt, -0.5, 0.5, 13);
    std::vector<Tensor> dws;
    for (int rep = 0; rep < 2; ++rep) {
      Tensor wl = leaf_on(w, kGpu), bl = leaf_on(b, kGpu);
      Tensor y = layer_norm(x, wl, bl, 1e-5);
      run_backward(y, gy, BackwardOptions{});
      dws.push_back(Tensor(wl.impl()->grad));
      dws.push_back(Tensor(bl.impl()->grad));
    }
    EXPECT_TRUE(close(dws[2], dws[0], 0, 0)) << dtype_name(dt) << " dw";
    EXPECT_TRUE(close(dws[3], dws[1], 0, 0)) << dtype_name(dt) << " db";
  }
}

TEST(CudaFused, SoftmaxCrossEntropyLargeVocabulary) {
  NX_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::BF16}) {
    const int64_t rows = 9, vocab = 50257;
    Tensor logits = uniform({rows, vocab}, dt, -8, 8, 11);
    std::vector<int64_t> tv{0, 50256, 17, -100, 25000, 3, -100, 50255, 1};
    Tensor t = from_data(tv.data(), {rows}, DType::I64, kCpu);
    for (auto red : {Reduction::Mean, Reduction::Sum, Reduction::None})
      compare(std::string("xent ") + dtype_name(dt), {logits, t}, dt,
              [red](auto& v) { return std::vector<Tensor>{softmax_cross_entropy(v[0], v[1], -100, red)}; }, false,
              dt == DType::F32 ? 1e-9 : -1);  // the gradients are ~1e-5: compare them relatively
  }
  // odd width, transposed logits
  Tensor lt = uniform({40, 13}, DType::F32, -3, 3, 12);
  std::vector<int64_t> tv(13);
  for (size_t i = 0; i < tv.size(); ++i) tv[i] = int64_t(i * 7 % 40);
  Tensor t = from_data(tv.data(), {13}, DType::I64, kCpu);
  compare("xent transposed", {lt, t}, DType::F32,
          [](auto& v) { return std::vector<Tensor>{softmax_cross_entropy(v[0], v[1], -100, Reduction::Mean)}; }, true);
}

// Odd widths (a different 16-byte phase in every row: scalar heads and tails, partial chunks),
// widths under one pack, f16, and logits at an odd element offset (logits and dlogits then have
// different phases: the backward's scalar path).
TEST(CudaFused, SoftmaxCrossEntropyOddWidths) {
  NX_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::BF16, DType::F16, DType::F64}) {
    for (int64_t cols : {1000, 37, 3, 8193}) {
      const int64_t rows = 23;
      Tensor logits = uniform({rows, cols}, dt, -6, 6, 14);
      std::vector<int64_t> tv(rows);
      for (int64_t i = 0; i < rows; ++i) tv[size_t(i)] = i % 5 == 4 ? -100 : (i * 7919) % cols;
      Tensor t = from_data(tv.data(), {rows}, DType::I64, kCpu);
      compare(std::string("xent ") + dtype_name(dt) + " cols " + std::to_string(cols), {logits, t}, dt,
              [](auto& v) { return std::vector<Tensor>{softmax_cross_entropy(v[0], v[1], -100, Reduction::Sum)}; }, false,
              dt == DType::F32 ? 1e-7 : -1);
    }
  }
  for (DType dt : {DType::F32, DType::BF16}) {
    const int64_t rows = 7, cols = 50257, n = rows * cols;
    Tensor flat = uniform({n + 1}, dt, -8, 8, 15);
    std::vector<int64_t> tv{5, 50256, 0, -100, 31337, 2, 50000};
    Tensor t = from_data(tv.data(), {rows}, DType::I64, kCpu);
    compare(std::string("xent offset view ") + dtype_name(dt), {flat, t}, dt, [=](auto& v) {
      return std::vector<Tensor>{
          softmax_cross_entropy(reshape(slice(v[0], 0, 1, n + 1, 1), {rows, cols}), v[1], -100, Reduction::Mean)};
    }, false, dt == DType::F32 ? 1e-9 : -1);
  }
}

// -inf logits (a masked vocabulary) over a 50257-wide row: scattered; filling whole chunks and a
// row's head and tail; all but three logits, the target one of them; all but a few with the
// target ignored; and a target on a -inf logit (loss +inf, a finite gradient). (A row of nothing
// but -inf is left out: the CPU gives NaN there and CUDA -inf.)
TEST(CudaFused, SoftmaxCrossEntropyNegInfLogits) {
  NX_REQUIRE_GPU();
  const int64_t rows = 6, vocab = 50257;
  std::vector<float> x(size_t(rows * vocab));
  uint32_t state = 12345u;
  for (float& v : x) {  // uniform in [-8, 8)
    state = state * 1664525u + 1013904223u;
    v = float(state >> 8) * (16.f / 16777216.f) - 8.f;
  }
  auto at = [&](int64_t r, int64_t j) -> float& { return x[size_t(r * vocab + j)]; };
  for (int64_t j = 0; j < vocab; j += 7) at(0, j) = -INFINITY;
  for (int64_t j = 0; j < 20000; ++j) at(1, j) = -INFINITY;
  for (int64_t j = vocab - 9; j < vocab; ++j) at(1, j) = -INFINITY;
  for (int64_t j = 0; j < vocab; ++j) if (j != 100 && j != 31337 && j != 50000) at(2, j) = -INFINITY;
  at(2, 100) = at(2, 31337) - 0.5f;  // the target's probability about 1/3: no cancellation in its gradient
  at(2, 50000) = at(2, 31337) + 1.f;
  for (int64_t j = 0; j < vocab; ++j) if (j % 1000 != 3) at(3, j) = -INFINITY;
  for (int64_t j = 1; j < vocab; j += 2) at(4, j) = -INFINITY;
  // row 5: no -inf
  std::vector<int64_t> tv{1, 25000, 31337, -100, 4001, 50256};
  Tensor t = from_data(tv.data(), {rows}, DType::I64, kCpu);
  for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
    Tensor logits = cast(from_data(x.data(), {rows, vocab}, DType::F32, kCpu), dt);
    for (auto red : {Reduction::None, Reduction::Sum})
      compare(std::string("xent -inf logits ") + dtype_name(dt), {logits, t}, dt,
              [red](auto& v) { return std::vector<Tensor>{softmax_cross_entropy(v[0], v[1], -100, red)}; }, false,
              dt == DType::F32 ? 1e-9 : -1);
  }
  // the forward's values themselves: 0 on the ignored row 3, +inf on row 4
  Tensor logits = to_device(cast(from_data(x.data(), {rows, vocab}, DType::F32, kCpu), DType::BF16), kGpu);
  auto v = values(softmax_cross_entropy(logits, to_device(t, kGpu), -100, Reduction::None));
  EXPECT_EQ(v[3], 0.0);
  EXPECT_TRUE(std::isinf(v[4]) && v[4] > 0);
  for (int r : {0, 1, 2, 5}) EXPECT_TRUE(std::isfinite(v[size_t(r)]) && v[size_t(r)] > 0) << "row " << r;
}

TEST(CudaFused, CrossEntropyTargetOutOfRangeIsNaN) {
  NX_REQUIRE_GPU();
  Tensor logits = to_device(uniform({2, 5}, DType::F32, -1, 1, 13), kGpu);
  std::vector<int64_t> tv{1, 5};
  Tensor t = from_data(tv.data(), {2}, DType::I64, kGpu);
  auto v = values(softmax_cross_entropy(logits, t, -100, Reduction::None));
  EXPECT_FALSE(std::isnan(v[0]));
  EXPECT_TRUE(std::isnan(v[1]));
}

// RoPE's `rotary` kernel rounds each product and sum as the composite's ops do, on either device:
// CUDA's output and gradient have the CPU's bits, for a head-transposed (strided) x, in f32, bf16
// and f16, and positions past the start of the tables; f64 agrees to its last bits (its cos/sin
// tables are computed on each device, and CUDA's f64 cos/sin are not libm's).
TEST(CudaFused, RopeHasTheCpuBits) {
  NX_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtype_name(dt));
    manual_seed(21);
    const Tensor base = cast(randn({2, 33, 4, 64}, DType::F32, kCpu), dt), up = cast(randn({2, 4, 33, 64}, DType::F32, kCpu), dt);
    std::vector<uint8_t> bits[2][2];
    for (int dev = 0; dev < 2; ++dev) {
      const Device d = dev ? kGpu : kCpu;
      Tensor leaf = leaf_on(base, d);
      Tensor y = fn::rope(transpose(leaf, 1, 2), 100, 10000.0);
      run_backward(sum(mul(y, to_device(up, d)), {}, false), Tensor(), BackwardOptions{});
      for (int k = 0; k < 2; ++k) {
        const Tensor t = contiguous(to_device(k ? Tensor(leaf.impl()->grad) : y, kCpu));
        bits[dev][k].resize(size_t(t.numel()) * dtype_size(dt));
        copy_to_host(t, bits[dev][k].data(), bits[dev][k].size());
      }
    }
    if (dt == DType::F64) {  // f64 tables differ in the last bit: CUDA's cos/sin are not the CPU's libm
      for (int k = 0; k < 2; ++k) {
        const double* a = reinterpret_cast<const double*>(bits[0][k].data());
        const double* b = reinterpret_cast<const double*>(bits[1][k].data());
        for (size_t i = 0; i < bits[0][k].size() / 8; ++i) ASSERT_NEAR(a[i], b[i], 1e-14 * (1 + std::fabs(a[i]))) << k << " " << i;
      }
      continue;
    }
    EXPECT_TRUE(bits[0][0] == bits[1][0]) << "forward";
    EXPECT_TRUE(bits[0][1] == bits[1][1]) << "gradient";
  }
}

TEST(CudaFused, SwiGLU) {
  NX_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::BF16}) {
    Tensor a = uniform({33, 65}, dt, -4, 4, 21), b = uniform({33, 65}, dt, -2, 2, 22);
    compare(std::string("swiglu ") + dtype_name(dt), {a, b}, dt, [](auto& v) { return std::vector<Tensor>{swiglu(v[0], v[1])}; });
  }
}

TEST(CudaFused, AdamMultiTensor) {
  NX_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::BF16, DType::F64}) {
    for (bool decoupled : {true, false}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + (decoupled ? " AdamW" : " Adam"));
      const std::vector<int64_t> sizes{200003, 1, 65536, 4097, 7};
      std::vector<Tensor> t[2][4];
      std::vector<int64_t> steps;
      for (size_t i = 0; i < sizes.size(); ++i) {
        Tensor init[4] = {uniform({sizes[i]}, dt, -1, 1, 30 + i), uniform({sizes[i]}, dt, -1, 1, 40 + i),
                          uniform({sizes[i]}, dt, -0.1, 0.1, 50 + i), uniform({sizes[i]}, dt, 0, 0.1, 60 + i)};
        for (int k = 0; k < 4; ++k) {
          t[0][k].push_back(clone(init[k]));
          t[1][k].push_back(to_device(init[k], kGpu));
        }
        steps.push_back(int64_t(i) + 2);
      }
      const AdamParams hp{3e-3, 0.9, 0.95, 1e-8, 0.1, decoupled};
      for (int dev = 0; dev < 2; ++dev) adam_step_multi(t[dev][0], t[dev][1], t[dev][2], t[dev][3], steps, hp);
      const double tol = dt == DType::BF16 ? 1e-2 : tol_of(dt);
      for (size_t i = 0; i < sizes.size(); ++i)
        for (int k : {0, 2, 3}) EXPECT_TRUE(close(t[1][k][i], t[0][k][i], tol, tol)) << "tensor " << i << " part " << k;
    }
  }
}

}  // namespace
}  // namespace nx::gputest
