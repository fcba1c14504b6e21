// CPU reductions ([rows, cols] over cols, [outer, n, inner] over n) and row softmax. Every dtype
// is read as stored: f16/bf16 elements are widened in registers (or in 256-element f32 tiles for
// the vectorized sum and softmax), never through an f32 copy of the tensor, and the result is
// written in dst's dtype. Floating values accumulate in f64, integers and bool in int64 (exact).
// Each output is summed in a fixed order, so results do not depend on the thread count.

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/int_math.hpp"
#include "core/strided.hpp"
#include "cpu/simd.hpp"

namespace nx::cpu {
namespace {

template <class T> constexpr bool kIntegral = std::is_integral_v<T>;  // int32, int64, bool
template <class T> using Acc = std::conditional_t<kIntegral<T>, int64_t, double>;

template <class A, class T> inline A widen(T v) {
  if constexpr (std::is_same_v<T, Half>) return A(f16_to_f32(v.bits));
  else if constexpr (std::is_same_v<T, BFloat16>) return A(bf16_to_f32(v.bits));
  else return A(v);
}
template <class D, class A> inline D narrow(A v) {
  if constexpr (std::is_same_v<D, Half>) return Half{f32_to_f16(float(v))};
  else if constexpr (std::is_same_v<D, BFloat16>) return BFloat16{f32_to_bf16(float(v))};
  else if constexpr (std::is_same_v<D, bool>) return v != A(0);
  else return D(v);
}

template <class A> inline A identity(ReduceOp op) {
  if (op == ReduceOp::Sum) return A(0);
  const bool max = op == ReduceOp::Max;
  if constexpr (std::is_floating_point_v<A>) return max ? -std::numeric_limits<A>::infinity() : std::numeric_limits<A>::infinity();
  else return max ? std::numeric_limits<A>::min() : std::numeric_limits<A>::max();
}
// Max/Min propagate NaN (the first one met), as torch does.
template <class A> inline A combine(ReduceOp op, A a, A b) {
  if (op == ReduceOp::Sum) return wrapping_add(a, b);  // int64 sums wrap, as torch's do
  if constexpr (std::is_floating_point_v<A>) {
    if (a != a) return a;
    if (b != b) return b;
  }
  return op == ReduceOp::Max ? std::max(a, b) : std::min(a, b);
}

constexpr int64_t kTile = 256;  // f32 tile of half elements: stays in L1

// Sum of n contiguous floating elements in f64: f32/f64 through the vector kernel, f16/bf16
// through it one widened tile at a time.
template <class T> double sum_floating(const T* x, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    return simd().sum_f32(x, n);
  } else if constexpr (std::is_same_v<T, double>) {
    return simd().sum_f64(x, n);
  } else {
    float tile[kTile];
    double total = 0;
    for (int64_t i = 0; i < n; i += kTile) {
      const int64_t m = std::min(kTile, n - i);
      for (int64_t k = 0; k < m; ++k) tile[k] = widen<float>(x[i + k]);
      total += simd().sum_f32(tile, m);
    }
    return total;
  }
}

template <class T> Acc<T> reduce_span(ReduceOp op, const T* x, int64_t n) {
  using A = Acc<T>;
  if constexpr (!kIntegral<T>)
    if (op == ReduceOp::Sum) return sum_floating(x, n);
  A acc = identity<A>(op);
  if (op == ReduceOp::Sum) {
    for (int64_t i = 0; i < n; ++i) acc = wrapping_add(acc, widen<A>(x[i]));
    return acc;
  }
  for (int64_t i = 0; i < n; ++i) {
    acc = combine(op, acc, widen<A>(x[i]));
    if constexpr (std::is_floating_point_v<A>)
      if (acc != acc) break;  // NaN is final
  }
  return acc;
}

// Integers compared as themselves (through a double, 2^53 + 1 did not beat 2^53), the rest in f64.
template <class T> void argmax_row(int64_t* dst, const T* x, int64_t n) {
  using V = std::conditional_t<kIntegral<T>, T, double>;
  int64_t best = 0;
  V bv = n ? widen<V>(x[0]) : V(0);
  for (int64_t i = 1; i < n && bv == bv; ++i) {  // the first NaN wins
    V v = widen<V>(x[i]);
    if (v > bv || v != v) { bv = v; best = i; }
  }
  *dst = best;
}

template <class A> void store(const View& dst, int64_t at, A v) {
  dispatch_dtype(dst.dtype, [&](auto tag) {
    using D = decltype(tag);
    static_cast<D*>(dst.data)[at] = narrow<D>(v);
  });
}

// The cuts of reduce_rows (Sum/Max/Min): one long floating row summed in fixed chunks by the
// threads and combined in a fixed order (so the result does not depend on the thread count),
// else row by row. span(first, n, buf) gives elements [first, first + n) of the [rows, cols]
// source: in place, or written into buf (the calling thread's); null when it could not (no
// exception may leave an OpenMP region). Reading in place and a fused chain that produces the
// values (reduce_rows_produced_cpu) share these cuts, so they give the same bits. False on failure.
template <class T, class Span> bool reduce_rows_by(ReduceOp op, const View& dst, int64_t rows, int64_t cols, Span span) {
  bool failed = false;
  if constexpr (!kIntegral<T>) {
    if (op == ReduceOp::Sum && rows == 1 && cols >= 4 * kParallelGrain) {
      const int64_t chunk = kParallelGrain, nchunks = (cols + chunk - 1) / chunk;
      std::vector<double> part(static_cast<size_t>(nchunks));
#pragma omp parallel
      {
        std::vector<T> buf;
#pragma omp for schedule(static)
        for (int64_t c = 0; c < nchunks; ++c) {
          const int64_t n = std::min(chunk, cols - c * chunk);
          if (const T* x = span(c * chunk, n, buf)) part[size_t(c)] = sum_floating(x, n);
          else {
#pragma omp atomic write
            failed = true;
          }
        }
      }
      double total = 0;
      for (double v : part) total += v;
      if (!failed) store(dst, 0, total);
      return !failed;
    }
  }
#pragma omp parallel if (rows * cols >= kParallelGrain && rows > 1)
  {
    std::vector<T> buf;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      if (const T* x = span(r * cols, cols, buf)) store(dst, r, reduce_span(op, x, cols));
      else {
#pragma omp atomic write
        failed = true;
      }
    }
  }
  return !failed;
}

template <class T> void reduce_rows_t(ReduceOp op, const View& dst, const T* s, int64_t rows, int64_t cols) {
  if (op == ReduceOp::ArgMax) {
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelGrain && rows > 1)
    for (int64_t r = 0; r < rows; ++r) argmax_row(static_cast<int64_t*>(dst.data) + r, s + r * cols, cols);
    return;
  }
  reduce_rows_by<T>(op, dst, rows, cols, [s](int64_t first, int64_t, std::vector<T>&) { return s + first; });
}

// Work items are (outer slice, tile of up to kTile columns); each accumulates its columns over
// all n rows in row order (contiguous, vectorizable reads of each row's tile).
template <class T, class D>
void reduce_middle_t(ReduceOp op, D* d, const T* s, int64_t outer, int64_t n, int64_t inner) {
  using A = Acc<T>;
  const int64_t tiles = (inner + kTile - 1) / kTile, work = outer * tiles;
#pragma omp parallel for schedule(static) if (outer * n * inner >= kParallelGrain && work > 1)
  for (int64_t w = 0; w < work; ++w) {
    const int64_t o = w / tiles, c0 = (w % tiles) * kTile, m = std::min(kTile, inner - c0);
    A acc[kTile];
    std::fill(acc, acc + m, identity<A>(op));
    for (int64_t j = 0; j < n; ++j) {
      const T* row = s + (o * n + j) * inner + c0;
      if (op == ReduceOp::Sum) {
        for (int64_t i = 0; i < m; ++i) acc[i] = wrapping_add(acc[i], widen<A>(row[i]));
      } else {
        for (int64_t i = 0; i < m; ++i) acc[i] = combine(op, acc[i], widen<A>(row[i]));
      }
    }
    for (int64_t i = 0; i < m; ++i) d[o * inner + c0 + i] = narrow<D>(acc[i]);
  }
}

}  // namespace

void reduce_rows_cpu(ReduceOp op, const View& dst, const View& src, int64_t rows, int64_t cols) {
  dispatch_dtype(src.dtype, [&](auto tag) {
    using T = decltype(tag);
    reduce_rows_t<T>(op, dst, static_cast<const T*>(src.data), rows, cols);
  });
}

// reduce_rows over values that produce(first, n, buf) writes (elements first.. of the [rows, cols]
// source, as src_dtype) instead of reading them from memory: a fused elementwise chain ending in a
// reduction (compile/fuse.cpp). reduce_rows's own cuts (reduce_rows_by), so the result has its
// bits; one row (or one chunk of a long row) at a time, in a buffer per thread. produce returns
// false when it could not run.
void reduce_rows_produced_cpu(ReduceOp op, const View& dst, DType src_dtype, int64_t rows, int64_t cols,
                              const std::function<bool(int64_t, int64_t, void*)>& produce) {
  bool ok = true;
  dispatch_dtype(src_dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (kIntegral<T>) {
      fail(NX_ERR_INTERNAL, current_api(), ": a fused chain reduced as ", dtype_name(src_dtype));
    } else {
      if (op == ReduceOp::ArgMax) fail(NX_ERR_INTERNAL, current_api(), ": argmax of a fused chain");
      ok = reduce_rows_by<T>(op, dst, rows, cols, [&](int64_t first, int64_t n, std::vector<T>& buf) -> const T* {
        try {
          if (buf.size() < size_t(n)) buf.resize(size_t(n));
        } catch (...) {
          return nullptr;
        }
        return produce(first, n, buf.data()) ? buf.data() : nullptr;
      });
    }
  });
  if (!ok) fail(NX_ERR_OUT_OF_MEMORY, current_api(), ": no memory for a fused reduction's rows");
}

void reduce_middle_cpu(ReduceOp op, const View& dst, const View& src, int64_t outer, int64_t n, int64_t inner) {
  dispatch_dtype(src.dtype, [&](auto tag) {
    using T = decltype(tag);
    dispatch_dtype(dst.dtype, [&](auto dtag) {
      using D = decltype(dtag);
      reduce_middle_t<T, D>(op, static_cast<D*>(dst.data), static_cast<const T*>(src.data), outer, n, inner);
    });
  });
}

void softmax_rows_cpu(const View& dst, const View& src, int64_t rows, int64_t cols, bool log) {
  const auto& t = simd();
  switch (dst.dtype) {
    case DType::F32:
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelGrain && rows > 1)
      for (int64_t r = 0; r < rows; ++r)
        t.softmax_f32(static_cast<float*>(dst.data) + r * cols, static_cast<const float*>(src.data) + r * cols, cols, log);
      return;
    case DType::F64:
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelGrain && rows > 1)
      for (int64_t r = 0; r < rows; ++r)
        t.softmax_f64(static_cast<double*>(dst.data) + r * cols, static_cast<const double*>(src.data) + r * cols, cols, log);
      return;
    case DType::F16: case DType::BF16:
      // Each thread widens one row at a time into its own f32 buffers (a row, not the tensor),
      // runs the f32 kernel and rounds each output once.
      dispatch_dtype(dst.dtype, [&](auto tag) {
        using T = decltype(tag);
        if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
#pragma omp parallel if (rows * cols >= kParallelGrain && rows > 1)
          {
            std::vector<float> in(static_cast<size_t>(cols)), out(static_cast<size_t>(cols));
#pragma omp for schedule(static)
            for (int64_t r = 0; r < rows; ++r) {
              const T* x = static_cast<const T*>(src.data) + r * cols;
              T* y = static_cast<T*>(dst.data) + r * cols;
              for (int64_t i = 0; i < cols; ++i) in[size_t(i)] = widen<float>(x[i]);
              t.softmax_f32(out.data(), in.data(), cols, log);
              for (int64_t i = 0; i < cols; ++i) y[i] = narrow<T>(out[size_t(i)]);
            }
          }
        }
      });
      return;
    default:
      fail(NX_ERR_DTYPE, current_api(), ": softmax needs a floating dtype, got ", dtype_name(dst.dtype));
  }
}

}  // namespace nx::cpu
