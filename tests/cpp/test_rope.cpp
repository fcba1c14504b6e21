// Rotary embeddings read their cos/sin tables from a cache grown by doubling (nn/functional.cpp):
// every call must give exactly what building the tables for its own positions gives, whatever
// the cache held before, from any thread.
#include <thread>

#include "cpp_test_util.hpp"
#include "nn/functional.hpp"

namespace {

using nxt::cpu;
using nx::DType;
using nx::Tensor;

// The tables built for positions [start, start + t) alone (the implementation before the cache).
Tensor rope_uncached(const Tensor& x, int64_t start, double base) {
  const int64_t t = x.shape()[size_t(x.dim() - 2)], d = x.shape().back();
  Tensor pos = nx::arange(double(start), double(start + t), 1, DType::F64, x.device());
  Tensor inv = nx::exp(nx::mul_scalar(nx::arange(0, double(d / 2), 1, DType::F64, x.device()),
                                      -2.0 * std::log(base) / double(d)));
  Tensor ang = nx::mul(nx::unsqueeze(pos, 1), nx::unsqueeze(inv, 0));
  Tensor c = nx::cast(nx::unary(nx::UnaryOp::Cos, ang), x.dtype()), s = nx::cast(nx::unary(nx::UnaryOp::Sin, ang), x.dtype());
  Tensor x1 = nx::slice(x, -1, 0, d / 2, 1), x2 = nx::slice(x, -1, d / 2, d, 1);
  return nx::cat({nx::sub(nx::mul(x1, c), nx::mul(x2, s)), nx::add(nx::mul(x2, c), nx::mul(x1, s))}, -1);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const size_t n = size_t(a.numel()) * nx::dtype_size(a.dtype());
  std::vector<unsigned char> x(n), y(n);
  nx::copy_to_host(nx::contiguous(a), x.data(), n);
  nx::copy_to_host(nx::contiguous(b), y.data(), n);
  return x == y;
}

// Windows in an order that makes the cache grow (64 -> 128 -> 512 rows) and then serves older,
// shorter windows from the grown tables.
const std::pair<int64_t, int64_t> kWindows[] = {{0, 5}, {3, 4}, {60, 10}, {130, 7}, {0, 300}, {0, 1}, {299, 1}, {17, 33}};

// Since session 25 rope runs one `rotary` kernel that rounds each product and sum as the composite's
// ops did: the same bits in every floating dtype.
TEST(Rope, CachedTablesGiveTheBitsOfTablesBuiltPerCall) {
  nx::manual_seed(3);
  for (DType dt : {DType::F64, DType::F32, DType::BF16, DType::F16})
    for (int64_t d : {4, 10})
      for (double base : {10000.0, 500.0})
        for (const auto& [start, t] : kWindows) {
          Tensor x = nx::randn({2, 3, t, d}, dt, cpu());
          EXPECT_TRUE(same_bits(nx::fn::rope(x, start, base), rope_uncached(x, start, base)))
              << nx::dtype_name(dt) << " d " << d << " base " << base << " start " << start << " t " << t;
        }
}

// rope's one-node VJP (the gradient rotated back) against the composite's autograd (slices, products,
// cat: each half's gradient built in a zero-filled tensor and the two added), on a random upstream
// gradient of a non-contiguous x: equal values (each element is the same two products summed; ==
// also takes -0 for +0, the one difference the zero-filled sum can make).
TEST(Rope, GradientEqualsTheCompositesGradient) {
  nx::manual_seed(4);
  for (DType dt : {DType::F64, DType::F32, DType::BF16, DType::F16}) {
    Tensor base = nx::randn({2, 7, 3, 8}, dt, cpu());
    Tensor up = nx::randn({2, 3, 7, 8}, dt, cpu());
    auto grad_of = [&](bool composite) {
      Tensor x = nx::detach(nx::transpose(base, 1, 2));  // [2, 3, 7, 8], not contiguous
      x.impl()->requires_grad = true;
      Tensor y = composite ? rope_uncached(x, 5, 10000.0) : nx::fn::rope(x, 5, 10000.0);
      nx::run_backward(nx::sum(nx::mul(y, up), {}, false), Tensor(), nx::BackwardOptions{});
      return nx::cast(Tensor(x.impl()->grad), DType::F64);
    };
    const std::vector<double> got = nxt::values(grad_of(false)), want = nxt::values(grad_of(true));
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << nx::dtype_name(dt) << " element " << i;
  }
}

// The kernel reads x through its strides (the attention layer's q and k are head-transposed views)
// and takes any rank >= 2 (as [1, rows, t, d]): the composite's bits for each layout.
TEST(Rope, StridedAndOtherRankInputsGiveTheCompositesBits) {
  nx::manual_seed(5);
  for (DType dt : {DType::F32, DType::BF16}) {
    Tensor base = nx::randn({2, 9, 3, 8}, dt, cpu());
    Tensor heads = nx::transpose(base, 1, 2);  // [2, 3, 9, 8], not contiguous
    EXPECT_TRUE(same_bits(nx::fn::rope(heads, 7, 10000.0), rope_uncached(heads, 7, 10000.0))) << nx::dtype_name(dt);
    Tensor every_other = nx::slice(nx::randn({2, 3, 9, 16}, dt, cpu()), -1, 0, 16, 2);  // last stride 2
    EXPECT_TRUE(same_bits(nx::fn::rope(every_other, 0, 500.0), rope_uncached(every_other, 0, 500.0)));
    for (const nx::Shape& shape : std::vector<nx::Shape>{{9, 8}, {4, 9, 8}, {2, 2, 2, 9, 8}}) {
      Tensor x = nx::randn(shape, dt, cpu());
      EXPECT_TRUE(same_bits(nx::fn::rope(x, 3, 10000.0), rope_uncached(x, 3, 10000.0))) << shape.size() << "-d";
    }
    Tensor empty = nx::randn({2, 0, 9, 8}, dt, cpu());
    EXPECT_EQ(nx::fn::rope(empty, 0, 10000.0).numel(), 0);
  }
}

TEST(Rope, TablesAreSharedSafelyBetweenThreads) {
  // A head dimension no other test uses, so the threads race to build and grow the same tables.
  std::vector<std::thread> threads;
  std::vector<int> ok(8, 0);
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([i, &ok] {
      bool good = true;
      for (int rep = 0; rep < 5; ++rep) {
        const int64_t start = (i * 97 + rep * 61) % 700, t = 1 + (i + rep) % 9;
        Tensor x = nx::randn({1, 2, t, 6}, DType::F32, cpu());
        good = good && same_bits(nx::fn::rope(x, start, 10000.0), rope_uncached(x, start, 10000.0));
      }
      ok[size_t(i)] = good;
    });
  for (auto& th : threads) th.join();
  for (int i = 0; i < 8; ++i) EXPECT_EQ(ok[size_t(i)], 1) << "thread " << i;
}

TEST(Rope, OddHeadDimensionsNegativeStartsAndIntegersAreRefused) {
  Tensor x = nx::randn({1, 1, 4, 5}, DType::F32, cpu());
  EXPECT_THROW(nx::fn::rope(x, 0, 10000.0), nx::Error);
  Tensor y = nx::randn({1, 1, 4, 6}, DType::F32, cpu());
  EXPECT_THROW(nx::fn::rope(y, -1, 10000.0), nx::Error);
  Tensor ints = nx::zeros({1, 1, 4, 6}, DType::I32, cpu());
  EXPECT_THROW(nx::fn::rope(ints, 0, 10000.0), nx::Error);
}

}  // namespace
