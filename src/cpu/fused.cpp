// CPU fused kernels (see the fused section of src/core/backend.hpp): RMSNorm/LayerNorm forward
// and backward, softmax cross-entropy, multi-tensor Adam. Rows go to OpenMP threads; every sum
// is accumulated in f64 whatever the storage dtype (gradcheck runs these in f64 and the half
// types must not lose more than their own rounding). Weight gradients are summed per fixed block
// of rows and the blocks combined in order, so results do not depend on the thread count.

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/backend.hpp"
#include "core/error.hpp"
#include "cpu/simd.hpp"

namespace nx::cpu {
namespace {

inline double ld(float v) { return v; }
inline double ld(double v) { return v; }
inline double ld(Half v) { return f16_to_f32(v.bits); }
inline double ld(BFloat16 v) { return bf16_to_f32(v.bits); }
inline void st(float* p, double v) { *p = float(v); }
inline void st(double* p, double v) { *p = v; }
inline void st(Half* p, double v) { p->bits = f32_to_f16(float(v)); }
inline void st(BFloat16* p, double v) { p->bits = f32_to_bf16(float(v)); }

template <class F>
void dispatch_float(DType d, const char* what, F&& f) {
  switch (d) {
    case DType::F32: f(float{}); break;
    case DType::F64: f(double{}); break;
    case DType::F16: f(Half{}); break;
    case DType::BF16: f(BFloat16{}); break;
    default: fail(NX_ERR_DTYPE, current_api(), ": ", what, " needs a floating dtype, got ", dtype_name(d));
  }
}

// Statistics and weight gradients: f64 for f64 inputs, f32 otherwise (the accumulation dtype).
template <class T> using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class T> const T* cp(const View& v) { return static_cast<const T*>(v.data); }
template <class T> T* mp(const View& v) { return static_cast<T*>(v.data); }

template <class T>
void norm_forward_t(const NormParams& p, const View& y, const View& sum_out, const View& x, const View& residual,
                    const View& w, const View& b, const View& mean, const View& rstd) {
  using A = Acc<T>;
  const int64_t cols = p.cols;
  const T *wp = cp<T>(w), *bp = cp<T>(b), *rp = cp<T>(residual);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < p.rows; ++r) {
    const T* xr = cp<T>(x) + r * cols;
    if (rp) {  // the sum is rounded to T first, as the unfused add would be, then normalized
      T* sr = mp<T>(sum_out) + r * cols;
      for (int64_t j = 0; j < cols; ++j) st(sr + j, ld(xr[j]) + ld(rp[r * cols + j]));
      xr = sr;
    }
    double mu = 0;
    if (!p.rms) {
      for (int64_t j = 0; j < cols; ++j) mu += ld(xr[j]);
      mu /= double(cols);
    }
    double ss = 0;  // two passes (the row is in cache): no cancellation in E[x^2] - mu^2
    for (int64_t j = 0; j < cols; ++j) {
      const double d = ld(xr[j]) - mu;
      ss += d * d;
    }
    const double rs = 1.0 / std::sqrt(ss / double(cols) + p.eps);
    auto value = [&](int64_t j) {
      double v = (ld(xr[j]) - mu) * rs;
      if (wp) v *= ld(wp[j]);
      if (bp) v += ld(bp[j]);
      return v;
    };
    if (y.dtype == x.dtype) {
      T* yr = mp<T>(y) + r * cols;
      for (int64_t j = 0; j < cols; ++j) st(yr + j, value(j));
    } else {  // f32 x, y bf16/f16 (a compiled step's cast epilogue): the f32 result, rounded once more
      uint16_t* yr = mp<uint16_t>(y) + r * cols;
      for (int64_t j = 0; j < cols; ++j) {
        const float f = float(value(j));
        yr[j] = y.dtype == DType::BF16 ? f32_to_bf16(f) : f32_to_f16(f);
      }
    }
    if (mean.data) mp<A>(mean)[r] = A(mu);
    mp<A>(rstd)[r] = A(rs);
  }
}

template <class T>
void norm_backward_t(const NormParams& p, const View& dx, const View& dw, const View& db, const View& dy,
                     const View& x, const View& w, const View& mean, const View& rstd) {
  using A = Acc<T>;
  const int64_t rows = p.rows, cols = p.cols;
  const T* wp = cp<T>(w);
  const bool want_w = dw.data != nullptr, want_b = db.data != nullptr;
  // fixed blocks of rows for the weight gradients (deterministic order)
  const int64_t block = std::max<int64_t>(16, (rows + 255) / 256), nblocks = (rows + block - 1) / block;
  std::vector<double> pw(want_w ? size_t(nblocks * cols) : 0), pb(want_b ? size_t(nblocks * cols) : 0);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    for (int64_t r = blk * block; r < std::min(rows, (blk + 1) * block); ++r) {
      const T *xr = cp<T>(x) + r * cols, *gr = cp<T>(dy) + r * cols;
      const double mu = p.rms ? 0.0 : double(cp<A>(mean)[r]), rs = double(cp<A>(rstd)[r]);
      double sum_g = 0, sum_gx = 0;  // sums of g = dy w and of g xhat over the row
      for (int64_t j = 0; j < cols; ++j) {
        const double xh = (ld(xr[j]) - mu) * rs, g = ld(gr[j]) * (wp ? ld(wp[j]) : 1.0);
        sum_g += g;
        sum_gx += g * xh;
        if (want_w) pw[size_t(blk * cols + j)] += ld(gr[j]) * xh;
        if (want_b) pb[size_t(blk * cols + j)] += ld(gr[j]);
      }
      const double mg = p.rms ? 0.0 : sum_g / double(cols), mgx = sum_gx / double(cols);
      if (!dx.data) continue;
      T* dr = mp<T>(dx) + r * cols;
      for (int64_t j = 0; j < cols; ++j) {
        const double xh = (ld(xr[j]) - mu) * rs, g = ld(gr[j]) * (wp ? ld(wp[j]) : 1.0);
        st(dr + j, rs * (g - mg - xh * mgx));
      }
    }
  }
  auto combine = [&](const std::vector<double>& part, const View& out) {
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < cols; ++j) {
      double s = 0;
      for (int64_t blk = 0; blk < nblocks; ++blk) s += part[size_t(blk * cols + j)];
      mp<A>(out)[j] = A(s);
    }
  };
  if (want_w) combine(pw, dw);
  if (want_b) combine(pb, db);
}

template <class T>
void xent_forward_t(const View& loss, const View& lse, const View& logits, const View& target, int64_t rows,
                    int64_t cols, int64_t ignore_index) {
  using A = Acc<T>;
  const int64_t* tg = cp<int64_t>(target);
  int64_t bad_row = -1;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = cp<T>(logits) + r * cols;
    double m = -std::numeric_limits<double>::infinity();
    if constexpr (std::is_same_v<T, float>) m = double(simd().max_f32(xr, cols));
    else for (int64_t j = 0; j < cols; ++j) m = std::max(m, ld(xr[j]));
    double s = 0;
    if constexpr (std::is_same_v<T, float>) {
      // f32 logits: the vector unit's f32 exp (scalar f64 exp was 15% of a small GPT's CPU step);
      // m is one of the logits, so the shift is exact. An all -inf row keeps the scalar path.
      if (std::isfinite(m)) s = simd().sum_exp_f32(xr, cols, float(m));
      else for (int64_t j = 0; j < cols; ++j) s += std::exp(ld(xr[j]) - m);
    } else {
      for (int64_t j = 0; j < cols; ++j) s += std::exp(ld(xr[j]) - m);
    }
    const double l = m + std::log(s);
    mp<A>(lse)[r] = A(l);
    const int64_t t = tg[r];
    double v = 0;
    if (t != ignore_index) {
      if (t < 0 || t >= cols) {
#pragma omp critical
        bad_row = bad_row < 0 ? r : std::min(bad_row, r);
        v = std::numeric_limits<double>::quiet_NaN();
      } else {
        v = l - ld(xr[t]);
      }
    }
    mp<A>(loss)[r] = A(v);
  }
  if (bad_row >= 0)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": target ", tg[bad_row], " of row ", bad_row,
         " is outside [0, ", cols, ") and is not ignore_index (", ignore_index, ")");
}

template <class T>
void xent_backward_t(const View& dlogits, const View& logits, const View& target, const View& lse,
                     const View& scale, int64_t rows, int64_t cols, int64_t ignore_index) {
  using A = Acc<T>;
  const int64_t* tg = cp<int64_t>(target);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = cp<T>(logits) + r * cols;
    T* dr = mp<T>(dlogits) + r * cols;
    const int64_t t = tg[r];
    const double l = double(cp<A>(lse)[r]), sc = t == ignore_index ? 0.0 : double(cp<A>(scale)[r]);
    if constexpr (std::is_same_v<T, float>) {
      // sc * exp(x - l) as (sc * exp(m - l)) * exp(x - m) with m the row's largest logit: the f32
      // exp sees an exact shift, and the f64 factor carries l's low bits.
      const float m = simd().max_f32(xr, cols);
      if (std::isfinite(m) && std::isfinite(l)) {
        simd().scale_exp_f32(dr, xr, cols, m, float(sc * std::exp(double(m) - l)));
        if (t >= 0 && t < cols) dr[t] = float(double(dr[t]) - sc);
        continue;
      }
    }
    for (int64_t j = 0; j < cols; ++j) st(dr + j, sc * (std::exp(ld(xr[j]) - l) - (j == t ? 1.0 : 0.0)));
  }
}

// v rounded to T and widened back: what an elementwise op's output holds (identity for f32, f64).
template <class T>
inline Acc<T> rounded(Acc<T> v) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    return v;
  } else {
    T r;
    st(&r, double(v));
    return Acc<T>(ld(r));
  }
}

// RoPE's rotation with the rounding of the composite it replaces (four products, a difference and
// a sum, each an elementwise op rounded to T); this file is compiled without FMA (no -mfma), so
// no product is contracted into the sum. Rows of x are read through its strides.
template <class T>
void rotary_t(const View& dst, const View& x, const View& cosv, const View& sinv, bool inverse) {
  using A = Acc<T>;
  const int64_t H = x.shape[1], tn = x.shape[2], half = x.shape[3] / 2, rows = x.shape[0] * H * tn;
  const int64_t s0 = x.strides[0], s1 = x.strides[1], s2 = x.strides[2], s3 = x.strides[3];
  const T *xp = cp<T>(x), *cosp = cp<T>(cosv), *sinp = cp<T>(sinv);
  T* dp = mp<T>(dst);
#pragma omp parallel for schedule(static) if (rows * half >= (int64_t(1) << 15))
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = r % tn, h = (r / tn) % H, b = r / tn / H;
    const T* xr = xp + b * s0 + h * s1 + t * s2;
    const T *cr = cosp + t * half, *sr = sinp + t * half;
    T* dr = dp + r * 2 * half;
    for (int64_t i = 0; i < half; ++i) {
      const A x1 = A(ld(xr[i * s3])), x2 = A(ld(xr[(i + half) * s3])), c = A(ld(cr[i])), s = A(ld(sr[i]));
      const A x1c = rounded<T>(x1 * c), x2s = rounded<T>(x2 * s), x2c = rounded<T>(x2 * c), x1s = rounded<T>(x1 * s);
      st(dr + i, double(inverse ? x1c + x2s : x1c - x2s));
      st(dr + half + i, double(inverse ? x2c - x1s : x2c + x1s));
    }
  }
}

// Multi-tensor kernels work in chunks of elements of one slot (the parallel unit).
struct Chunk {
  size_t slot;
  int64_t begin, end;
};
template <class Slot>
std::vector<Chunk> chunks_of(const std::vector<Slot>& slots) {
  constexpr int64_t kChunk = 1 << 16;
  std::vector<Chunk> chunks;
  for (size_t i = 0; i < slots.size(); ++i)
    for (int64_t b = 0; b < slots[i].n; b += kChunk) chunks.push_back({i, b, std::min(slots[i].n, b + kChunk)});
  return chunks;
}

template <class T>
void adam_multi_t(const std::vector<AdamSlot>& slots, const AdamParams& p) {
  using A = Acc<T>;  // f32 math for f32 and half parameters, like the per-tensor path
  const std::vector<Chunk> chunks = chunks_of(slots);
  const A b1 = A(p.beta1), b2 = A(p.beta2), eps = A(p.eps), wd = A(p.weight_decay);
  if (p.skip_if_nan && std::isnan(*p.skip_if_nan)) return;  // a scaled step that found Inf/NaN
  const double* sv = p.step_values;  // a compiled plan's lr, then (lr / bc1, 1 / sqrt(bc2)) per slot
  const A decay = A(1 - (sv ? sv[0] : p.lr) * p.weight_decay);
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t c = 0; c < chunks.size(); ++c) {
    const AdamSlot& s = slots[chunks[c].slot];
    T *pp = static_cast<T*>(s.param), *mp_ = static_cast<T*>(s.m), *vp = static_cast<T*>(s.v);
    const T* gp = static_cast<const T*>(s.grad);
    const size_t k = chunks[c].slot;
    const A step = A(sv ? sv[1 + 2 * k] : p.lr / s.bc1), inv_sqrt_bc2 = A(sv ? sv[2 + 2 * k] : 1 / std::sqrt(s.bc2));
    if constexpr (std::is_same_v<T, float>) {  // the vector unit's step, same expression
      const AdamF32 a{b1, b2, eps, wd, decay, step, inv_sqrt_bc2, wd == 0.f ? 0 : p.decoupled ? 2 : 1};
      const int64_t b = chunks[c].begin;
      simd().adam_f32(pp + b, mp_ + b, vp + b, gp + b, chunks[c].end - b, a);
    } else {
      for (int64_t i = chunks[c].begin; i < chunks[c].end; ++i) {
        A g = A(ld(gp[i])), w = A(ld(pp[i]));
        if (wd != A(0) && !p.decoupled) g += wd * w;
        if (wd != A(0) && p.decoupled) w *= decay;
        const A m = b1 * A(ld(mp_[i])) + (A(1) - b1) * g;
        const A v = b2 * A(ld(vp[i])) + (A(1) - b2) * g * g;
        st(mp_ + i, m);
        st(vp + i, v);
        st(pp + i, w - step * (m / (std::sqrt(v) * inv_sqrt_bc2 + eps)));
      }
    }
  }
}

}  // namespace

void norm_forward_cpu(const NormParams& p, const View& y, const View& sum_out, const View& x, const View& residual,
                      const View& w, const View& b, const View& mean, const View& rstd) {
  dispatch_float(x.dtype, "norm", [&](auto tag) { norm_forward_t<decltype(tag)>(p, y, sum_out, x, residual, w, b, mean, rstd); });
}
void norm_backward_cpu(const NormParams& p, const View& dx, const View& dw, const View& db, const View& dy,
                       const View& x, const View& w, const View& mean, const View& rstd) {
  dispatch_float(x.dtype, "norm backward", [&](auto tag) { norm_backward_t<decltype(tag)>(p, dx, dw, db, dy, x, w, mean, rstd); });
}
void xent_forward_cpu(const View& loss, const View& lse, const View& logits, const View& target, int64_t rows,
                      int64_t cols, int64_t ignore_index) {
  dispatch_float(logits.dtype, "cross-entropy", [&](auto tag) {
    xent_forward_t<decltype(tag)>(loss, lse, logits, target, rows, cols, ignore_index);
  });
}
void xent_backward_cpu(const View& dlogits, const View& logits, const View& target, const View& lse, const View& scale,
                       int64_t rows, int64_t cols, int64_t ignore_index) {
  dispatch_float(logits.dtype, "cross-entropy backward", [&](auto tag) {
    xent_backward_t<decltype(tag)>(dlogits, logits, target, lse, scale, rows, cols, ignore_index);
  });
}
void rotary_cpu(const View& dst, const View& x, const View& cosv, const View& sinv, bool inverse) {
  dispatch_float(x.dtype, "rotary embedding", [&](auto tag) { rotary_t<decltype(tag)>(dst, x, cosv, sinv, inverse); });
}
void adam_multi_cpu(const std::vector<AdamSlot>& slots, DType dtype, const AdamParams& p) {
  dispatch_float(dtype, "adam", [&](auto tag) { adam_multi_t<decltype(tag)>(slots, p); });
}

// Chunks of kChunk elements: per-chunk f64 partials (in parallel), summed in chunk order, so the
// result does not depend on the thread count.
void sumsq_multi_cpu(const std::vector<TensorSlot>& slots, DType dtype, const View& out) {
  const std::vector<Chunk> chunks = chunks_of(slots);
  std::vector<double> partial(chunks.size(), 0.0);
  dispatch_float(dtype, "sum of squares", [&](auto tag) {
    using T = decltype(tag);
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t c = 0; c < chunks.size(); ++c) {
      const T* x = static_cast<const T*>(slots[chunks[c].slot].data);
      if constexpr (std::is_same_v<T, float>) {  // lanes on the vector unit, not one f64 chain
        partial[c] = simd().sumsq_f32(x + chunks[c].begin, chunks[c].end - chunks[c].begin);
      } else {
        double acc = 0;
        for (int64_t i = chunks[c].begin; i < chunks[c].end; ++i) {
          const double v = double(ld(x[i]));
          acc += v * v;
        }
        partial[c] = acc;
      }
    }
  });
  double total = 0;
  for (double p : partial) total += p;
  *static_cast<double*>(out.data) = total;
}

void scale_multi_cpu(const std::vector<TensorSlot>& slots, DType dtype, const View& factor) {
  const double f = *static_cast<const double*>(factor.data);
  dispatch_float(dtype, "scale", [&](auto tag) {
    using T = decltype(tag);
    using A = Acc<T>;
    const A fa = A(f);
    for (const TensorSlot& s : slots) {
      T* x = static_cast<T*>(s.data);
#pragma omp parallel for schedule(static) if (s.n > 32768)
      for (int64_t i = 0; i < s.n; ++i) st(x + i, A(ld(x[i])) * fa);
    }
  });
}

}  // namespace nx::cpu
