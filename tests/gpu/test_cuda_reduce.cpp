// Reductions over a leading or middle axis on CUDA against the CPU on the same inputs: the tall
// case (few outputs, many rows: a bias gradient, [8192, 3072] over axis 0) that the chunked
// two-kernel path takes, widths that are and are not a multiple of a 16-byte pack, several outer
// slices, the one-thread-per-output kernel for many outputs; every dtype; sum, mean, amax, amin.
// Also: a tall sum is bitwise reproducible (no atomics), and f16/bf16 softmax (read as stored,
// computed in f32) matches the CPU.
#include <string>

#include "gpu_test_util.hpp"

namespace nx::gputest {
namespace {

Tensor uniform(const Shape& shape, DType dt, double lo, double hi, uint64_t seed) {
  manual_seed(seed);
  Tensor u = add_scalar(mul_scalar(rand(shape, DType::F32, kCpu), hi - lo), lo);
  if (dt == DType::Bool) return detach(cast(cast(u, DType::I32), DType::Bool));  // lo 0, hi 2: half true
  return detach(cast(u, dt));
}

// Sums: the CPU accumulates in f64, CUDA in f32 per chunk (f64 for f64 inputs, i64 exactly for
// integers); half results are each rounded once, so they may differ by one rounding.
struct Tol { double atol, rtol; };
Tol sum_tol(DType dt) {
  switch (dt) {
    case DType::F64: return {1e-10, 1e-10};
    case DType::F32: return {1e-3, 1e-5};
    case DType::F16: return {1e-3, 2e-3};
    case DType::BF16: return {1e-2, 1.6e-2};
    default: return {0, 0};
  }
}

struct Shaped { Shape shape; Axes axes; bool keepdim; };

void compare_reductions(const Shaped& c, DType dt) {
  const bool floating = is_floating(dt);
  Tensor x = uniform(c.shape, dt, floating ? -1.0 : dt == DType::Bool ? 0.0 : -100.0, floating ? 1.0 : dt == DType::Bool ? 2.0 : 100.0, 11);
  Tensor xg = to_device(x, kGpu);
  const std::string tag = std::string(dtype_name(dt)) + " " + shape_str(c.shape) + " axes " +
                          std::to_string(c.axes.size()) + (c.keepdim ? " keepdim" : "");
  const Tol t = sum_tol(dt);
  EXPECT_TRUE(close(sum(xg, c.axes, c.keepdim), sum(x, c.axes, c.keepdim), t.atol, t.rtol)) << "sum " << tag;
  EXPECT_TRUE(close(amax(xg, c.axes, c.keepdim), amax(x, c.axes, c.keepdim), 0, 0)) << "amax " << tag;
  EXPECT_TRUE(close(amin(xg, c.axes, c.keepdim), amin(x, c.axes, c.keepdim), 0, 0)) << "amin " << tag;
  if (floating)
    EXPECT_TRUE(close(mean(xg, c.axes, c.keepdim), mean(x, c.axes, c.keepdim), t.atol, t.rtol)) << "mean " << tag;
}

TEST(CudaReduce, TallAndMiddleAxesMatchCpu) {
  NX_REQUIRE_GPU();
  const std::vector<Shaped> shapes{
      {{4096, 96}, {0}, false},       // one outer slice, many chunks, packed loads
      {{1500, 7}, {0}, true},         // a width that is not a multiple of a pack
      {{3, 2000, 5}, {1}, true},      // several outer slices, odd width
      {{16, 128, 24}, {0, 1}, false}, // two leading axes
      {{40, 3, 200}, {1}, false},     // few rows: one chunk, written directly
      {{2, 100001, 3}, {1}, false},   // very tall and narrow
      {{4, 3, 300000}, {1}, false},   // many outputs: one thread per output
      {{0, 3}, {0}, false},           // nothing to sum
  };
  for (DType dt : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64, DType::Bool})
    for (const Shaped& c : shapes) {
      if (c.shape[0] == 0) {  // amax/amin over an empty axis is an error: the sum only
        Tensor x = uniform(c.shape, dt, -1, 1, 3);
        EXPECT_TRUE(close(sum(to_device(x, kGpu), c.axes, c.keepdim), sum(x, c.axes, c.keepdim), 0, 0));
        continue;
      }
      compare_reductions(c, dt);
    }
}

TEST(CudaReduce, BiasGradientShape) {
  NX_REQUIRE_GPU();  // GPT-2's [B*T, 3072] bias gradient: the shape the chunked kernel is for
  for (DType dt : {DType::F32, DType::BF16, DType::F16}) compare_reductions({{8192, 3072}, {0}, false}, dt);
  // a view at an odd element offset: rows not 16-byte aligned, so no packed loads
  Tensor flat = uniform({1000 * 768 + 1}, DType::F32, -1, 1, 5);
  Tensor x = reshape(slice(flat, 0, 1, 1000 * 768 + 1, 1), {1000, 768});
  Tensor want = sum(x, {0}, false);
  EXPECT_TRUE(close(sum(to_device(x, kGpu), {0}, false), want, 1e-3, 1e-5));
  Tensor xg = reshape(slice(to_device(flat, kGpu), 0, 1, 1000 * 768 + 1, 1), {1000, 768});
  EXPECT_TRUE(close(sum(xg, {0}, false), want, 1e-3, 1e-5)) << "misaligned view";
}

TEST(CudaReduce, TallSumIsBitwiseReproducible) {
  NX_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::BF16}) {
    Tensor x = to_device(uniform({8192, 3072}, dt, -1, 1, 7), kGpu);
    Tensor a = sum(x, {0}, false), b = sum(x, {0}, false);
    EXPECT_TRUE(close(a, b, 0, 0)) << dtype_name(dt);
  }
}

TEST(CudaReduce, HalfSoftmaxMatchesCpu) {
  NX_REQUIRE_GPU();
  for (DType dt : {DType::F16, DType::BF16}) {
    const double atol = dt == DType::F16 ? 1e-3 : 1e-2, rtol = dt == DType::F16 ? 2e-3 : 1.6e-2;
    for (const Shape& s : std::vector<Shape>{{64, 40}, {37, 1000}, {5, 9000}, {3, 20000}}) {
      Tensor x = uniform(s, dt, -4, 4, 9), xg = to_device(x, kGpu);
      for (int64_t axis : {int64_t(-1), int64_t(0)}) {
        const std::string tag = std::string(dtype_name(dt)) + " " + shape_str(s) + " axis " + std::to_string(axis);
        Tensor y = softmax(xg, axis), ly = log_softmax(xg, axis);
        EXPECT_EQ(y.dtype(), dt) << tag;
        EXPECT_TRUE(close(y, softmax(x, axis), atol, rtol)) << "softmax " << tag;
        EXPECT_TRUE(close(ly, log_softmax(x, axis), atol, rtol)) << "log_softmax " << tag;
      }
    }
  }
}

// Deterministic mode: index_add (embedding's backward) and scatter_add (gather's) sort the rows
// by destination and add each destination's rows in order instead of with atomics: two runs agree
// bit for bit, and both agree with the CPU (many repeats of few ids, f32 and bf16 sources).
TEST(CudaIndex, DeterministicScatterRepeatsAndAgreesWithCpu) {
  NX_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::BF16}) {
    const Tensor src = uniform({4096, 96}, dt, -1, 1, 41), ids = cast(uniform({4096}, DType::F32, 0, 37, 42), DType::I64);
    const Tensor base = uniform({37, 96}, dt, -1, 1, 43);
    const Tensor flat_src = reshape(src, {4096 * 96}), flat_ids = cast(uniform({4096 * 96}, DType::F32, 0, 500, 44), DType::I64);
    auto run = [&](Device d) {
      set_deterministic(true);
      Tensor a = index_add(to_device(base, d), 0, to_device(ids, d), to_device(src, d));
      Tensor b = scatter_add(to_device(zeros({500}, dt, kCpu), d), 0, to_device(flat_ids, d), to_device(flat_src, d));
      set_deterministic(false);
      return std::make_pair(a, b);
    };
    auto [a1, b1] = run(kGpu);
    auto [a2, b2] = run(kGpu);
    auto [ac, bc] = run(kCpu);
    EXPECT_TRUE(close(a1, a2, 0, 0)) << "index_add repeats, " << dtype_name(dt);
    EXPECT_TRUE(close(b1, b2, 0, 0)) << "scatter_add repeats, " << dtype_name(dt);
    const double tol = dt == DType::F32 ? 1e-4 : 0.1;
    EXPECT_TRUE(close(a1, ac, tol, tol)) << "index_add against the CPU, " << dtype_name(dt);
    EXPECT_TRUE(close(b1, bc, tol, tol)) << "scatter_add against the CPU, " << dtype_name(dt);
  }
}

}  // namespace
}  // namespace nx::gputest
