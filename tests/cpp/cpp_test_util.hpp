// Helpers shared by the GoogleTest files in tests/cpp (not itself a test: the CMake glob only
// picks up test_*.cpp).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "autograd/engine.hpp"
#include "graph/node.hpp"
#include "core/backend.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/tensor.hpp"
#include "ops/ops.hpp"

namespace nxt {

using nx::DType;
using nx::Shape;
using nx::Tensor;

inline nx::Device cpu() { return nx::Device{}; }

// A contiguous CPU tensor holding vals (converted to dtype).
inline Tensor make(const std::vector<double>& vals, const Shape& shape, DType dtype = DType::F64) {
  EXPECT_EQ(int64_t(vals.size()), nx::numel_of(shape));
  Tensor f = nx::from_data(vals.data(), shape, DType::F64, cpu());
  if (dtype == DType::F64) return f;
  nx::GradModeGuard off(false);
  return nx::cast(f, dtype);
}

inline Tensor make_i64(const std::vector<int64_t>& vals, const Shape& shape) {
  return nx::from_data(vals.data(), shape, DType::I64, cpu());
}

// Logical (row-major) contents of any tensor, as doubles.
inline std::vector<double> values(const Tensor& t) {
  nx::GradModeGuard off(false);
  Tensor c = nx::contiguous(nx::cast(nx::detach(t), DType::F64));
  std::vector<double> out(size_t(c.numel()));
  if (!out.empty()) std::memcpy(out.data(), c.data(), out.size() * sizeof(double));
  return out;
}

// Storage offset (in elements) of the element with row-major linear index i of view t.
inline int64_t element_offset(const Tensor& t, int64_t i) {
  int64_t off = t.offset();
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    int64_t n = t.shape()[size_t(d)];
    off += (i % n) * t.strides()[size_t(d)];
    i /= n;
  }
  return off;
}

inline std::vector<double> uniform(std::mt19937_64& g, size_t n, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// Runs f and returns the nx_status of the nx::Error it throws (NX_OK if it does not throw).
template <class F>
nx_status status_of(F&& f) {
  try {
    f();
  } catch (const nx::Error& e) {
    return e.status();
  }
  return NX_OK;
}

}  // namespace nxt
