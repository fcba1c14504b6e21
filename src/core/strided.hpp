// Walks K same-shaped strided operands row by row: dimensions are coalesced where every operand
// is contiguous across them, the innermost remaining dimension becomes the row, and rows are
// spread over OpenMP threads when the work is large enough to pay for it.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "core/backend.hpp"

namespace nx::cpu {

constexpr int64_t kParallelGrain = 1 << 15;  // elements below which threads cost more than they save

template <int K>
struct RowPlan {
  std::vector<int64_t> sizes;                  // coalesced outer dims (outermost first)
  std::vector<std::array<int64_t, K>> strides; // per outer dim, per operand
  int64_t inner = 1;
  std::array<int64_t, K> inner_strides{};
  int64_t rows = 1;
};

template <int K>
RowPlan<K> plan_rows(const std::vector<int64_t>& shape, const std::array<const std::vector<int64_t>*, K>& st) {
  // Empty: nothing to walk (and its other dimensions may be huge, so no stride products).
  for (int64_t s : shape)
    if (s == 0) {
      RowPlan<K> empty;
      empty.rows = 0;
      return empty;
    }
  std::vector<int64_t> sizes;
  std::vector<std::array<int64_t, K>> strides;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    std::array<int64_t, K> s;
    for (int k = 0; k < K; ++k) s[k] = (*st[k])[d];
    if (!sizes.empty()) {
      bool merge = true;
      for (int k = 0; k < K; ++k) merge &= strides.back()[k] == s[k] * shape[d];
      if (merge) {
        sizes.back() *= shape[d];
        strides.back() = s;
        continue;
      }
    }
    sizes.push_back(shape[d]);
    strides.push_back(s);
  }
  RowPlan<K> plan;
  if (!sizes.empty()) {
    plan.inner = sizes.back();
    plan.inner_strides = strides.back();
    sizes.pop_back();
    strides.pop_back();
  }
  for (int64_t s : sizes) plan.rows *= s;
  plan.sizes = std::move(sizes);
  plan.strides = std::move(strides);
  for (int64_t s : shape)
    if (s == 0) plan.rows = 0;
  return plan;
}

// fn(std::array<int64_t, K> element_offsets, int64_t n, std::array<int64_t, K> inner_strides)
template <int K, class Fn>
void for_each_row(const std::vector<int64_t>& shape, const std::array<const std::vector<int64_t>*, K>& st, Fn fn) {
  RowPlan<K> p = plan_rows<K>(shape, st);
  const int64_t rows = p.rows, nd = int64_t(p.sizes.size());
  // Few long rows are cut into chunks so that every thread gets work.
  const int64_t chunk = rows >= 64 ? p.inner : std::max<int64_t>(kParallelGrain / 2, 1);
  const int64_t chunks = (p.inner + chunk - 1) / std::max<int64_t>(chunk, 1);
  auto run = [&](int64_t task) {
    int64_t r = task / chunks, c = task % chunks;
    std::array<int64_t, K> off{};
    int64_t rem = r;
    for (int64_t d = nd - 1; d >= 0; --d) {
      int64_t idx = rem % p.sizes[size_t(d)];
      rem /= p.sizes[size_t(d)];
      for (int k = 0; k < K; ++k) off[k] += idx * p.strides[size_t(d)][k];
    }
    int64_t start = c * chunk;
    for (int k = 0; k < K; ++k) off[k] += start * p.inner_strides[k];
    fn(off, std::min(chunk, p.inner - start), p.inner_strides);
  };
  const int64_t tasks = rows * chunks;
  if (rows * p.inner >= kParallelGrain && tasks > 1) {
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < tasks; ++t) run(t);
  } else {
    for (int64_t t = 0; t < tasks; ++t) run(t);
  }
}

}  // namespace nx::cpu
