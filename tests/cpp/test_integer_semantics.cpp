// Integer index_add / scatter_add against PyTorch (they have no C entry point; the casts, pow,
// comparisons and argmax are in tests/capi/test_integer_semantics.c): int64 sums are exact past
// 2^53 and wrap modulo 2^64 (through a double, 2^53 + 1 + 1 gave 2^53 and INT64_MAX + 1
// saturated), int32 sums wrap modulo 2^32. The expected values are literals torch 1.13 gives,
// with the torch expression in a comment (M = 2**63 - 1, m = -2**63).
#include <cstring>
#include <limits>

#include "cpp_test_util.hpp"

namespace {

using nx::DType;
using nx::Tensor;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max(), kMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kP53 = int64_t(1) << 53;

template <class T> std::vector<T> ints_of(const Tensor& t) {
  Tensor c = nx::contiguous(t);
  std::vector<T> out(size_t(c.numel()));
  if (!out.empty()) std::memcpy(out.data(), c.data(), out.size() * sizeof(T));
  return out;
}

TEST(IntegerSemantics, Int64IndexAddExactAndWrapping) {
  // torch.tensor([2**53, M, m, 5]).index_add(0, torch.tensor([0, 1, 2, 0, 3]), torch.tensor([1, 1, -1, 1, -7]))
  Tensor base = nxt::make_i64({kP53, kMax, kMin, 5}, {4});
  Tensor r = nx::index_add(base, 0, nxt::make_i64({0, 1, 2, 0, 3}, {5}), nxt::make_i64({1, 1, -1, 1, -7}, {5}));
  EXPECT_EQ(ints_of<int64_t>(r), (std::vector<int64_t>{9007199254740994, kMin, kMax, -2}));
  // torch.tensor([[2**53, 0], [M, m]]).index_add(1, torch.tensor([1, 0, 0]), torch.tensor([[3, 1, 1], [1, 1, -1]]))
  Tensor b2 = nxt::make_i64({kP53, 0, kMax, kMin}, {2, 2});
  Tensor r2 = nx::index_add(b2, 1, nxt::make_i64({1, 0, 0}, {3}), nxt::make_i64({3, 1, 1, 1, 1, -1}, {2, 3}));
  EXPECT_EQ(ints_of<int64_t>(r2), (std::vector<int64_t>{9007199254740994, 3, kMax, kMin + 1}));
}

TEST(IntegerSemantics, Int64ScatterAddExactAndWrapping) {
  // torch.tensor([2**53, M, m, 5]).scatter_add(0, torch.tensor([0, 1, 2, 0, 3]), torch.tensor([1, 1, -1, 1, -7]))
  Tensor base = nxt::make_i64({kP53, kMax, kMin, 5}, {4});
  Tensor r = nx::scatter_add(base, 0, nxt::make_i64({0, 1, 2, 0, 3}, {5}), nxt::make_i64({1, 1, -1, 1, -7}, {5}));
  EXPECT_EQ(ints_of<int64_t>(r), (std::vector<int64_t>{9007199254740994, kMin, kMax, -2}));
  // torch.tensor([[2**53, 0], [M, m]]).scatter_add(0, torch.tensor([[1, 0], [0, 1]]), torch.tensor([[1, 5], [1, -1]]))
  Tensor b2 = nxt::make_i64({kP53, 0, kMax, kMin}, {2, 2});
  Tensor r2 = nx::scatter_add(b2, 0, nxt::make_i64({1, 0, 0, 1}, {2, 2}), nxt::make_i64({1, 5, 1, -1}, {2, 2}));
  EXPECT_EQ(ints_of<int64_t>(r2), (std::vector<int64_t>{9007199254740993, 5, kMin, kMax}));
}

TEST(IntegerSemantics, Int32IndexAddAndScatterAddWrap) {
  const std::vector<int32_t> bv = {std::numeric_limits<int32_t>::max(), 16777217, std::numeric_limits<int32_t>::min()};
  const std::vector<int32_t> sv = {1, 1, -1};
  Tensor base = nx::from_data(bv.data(), {3}, DType::I32, nxt::cpu());
  Tensor src = nx::from_data(sv.data(), {3}, DType::I32, nxt::cpu());
  Tensor idx = nxt::make_i64({0, 1, 2}, {3});
  // torch.tensor([2**31-1, 16777217, -2**31], dtype=torch.int32).index_add(0, torch.tensor([0, 1, 2]),
  //     torch.tensor([1, 1, -1], dtype=torch.int32)).tolist() == [-2**31, 16777218, 2**31-1]; scatter_add likewise
  const std::vector<int32_t> want = {std::numeric_limits<int32_t>::min(), 16777218, std::numeric_limits<int32_t>::max()};
  EXPECT_EQ(ints_of<int32_t>(nx::index_add(base, 0, idx, src)), want);
  EXPECT_EQ(ints_of<int32_t>(nx::scatter_add(base, 0, idx, src)), want);
}

}  // namespace
