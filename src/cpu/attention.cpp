// CPU flash attention: tiles of queries against tiles of keys with an online softmax, so no
// [Tq, Tk] score matrix is ever stored (memory O(T * D) per head). Backward recomputes the
// probabilities tile by tile from the saved log-sum-exp; each (batch, kv head) is owned by one
// thread, which makes it deterministic and race-free under grouped-query attention.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/backend.hpp"

namespace nx::cpu {
namespace {

constexpr int64_t kBr = 32, kBc = 64;

template <class T>
inline T dot(const T* a, const T* b, int64_t n) {
  T s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Scaled score with ALiBi bias, or -inf when masked.
template <class T>
inline T score(const AttentionParams& p, T raw, int64_t h, int64_t qpos, int64_t key) {
  if (p.causal && key > qpos) return -std::numeric_limits<T>::infinity();
  T s = raw * T(p.scale);
  if (!p.alibi_slopes.empty()) s -= T(p.alibi_slopes[size_t(h)]) * T(qpos - key);
  return s;
}

template <class T>
void forward(const AttentionParams& p, const T* q, const T* k, const T* v, T* out, T* lse) {
  const int64_t D = p.dim, nqb = (p.tq + kBr - 1) / kBr, group = p.heads / p.kv_heads, offset = p.tk - p.tq;
  const int64_t tasks = p.batch * p.heads * nqb;
#pragma omp parallel
  {
    std::vector<T> acc(size_t(kBr * D)), s(size_t(kBr * kBc));
    std::vector<T> m(kBr), l(kBr);
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t qb = task % nqb, bh = task / nqb, h = bh % p.heads, b = bh / p.heads;
      const int64_t hk = h / group, i0 = qb * kBr, rows = std::min(kBr, p.tq - i0);
      const T* qh = q + ((b * p.heads + h) * p.tq) * D;
      const T* kh = k + ((b * p.kv_heads + hk) * p.tk) * D;
      const T* vh = v + ((b * p.kv_heads + hk) * p.tk) * D;
      std::fill(acc.begin(), acc.end(), T(0));
      std::fill(m.begin(), m.end(), -std::numeric_limits<T>::infinity());
      std::fill(l.begin(), l.end(), T(0));
      const int64_t last_key = p.causal ? std::min(p.tk, offset + i0 + rows) : p.tk;
      for (int64_t j0 = 0; j0 < last_key; j0 += kBc) {
        const int64_t cols = std::min(kBc, p.tk - j0);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t qpos = offset + i0 + r;
          T mx = m[size_t(r)];
          for (int64_t c = 0; c < cols; ++c) {
            T sc = score(p, dot(qh + (i0 + r) * D, kh + (j0 + c) * D, D), h, qpos, j0 + c);
            s[size_t(r * kBc + c)] = sc;
            mx = std::max(mx, sc);
          }
          if (mx == -std::numeric_limits<T>::infinity()) continue;  // nothing visible yet
          const T corr = std::exp(m[size_t(r)] - mx);
          T* a = acc.data() + r * D;
          for (int64_t d = 0; d < D; ++d) a[d] *= corr;
          T sum = 0;
          for (int64_t c = 0; c < cols; ++c) {
            const T pr = std::exp(s[size_t(r * kBc + c)] - mx);
            sum += pr;
            const T* vr = vh + (j0 + c) * D;
#pragma omp simd
            for (int64_t d = 0; d < D; ++d) a[d] += pr * vr[d];
          }
          l[size_t(r)] = l[size_t(r)] * corr + sum;
          m[size_t(r)] = mx;
        }
      }
      for (int64_t r = 0; r < rows; ++r) {
        T* o = out + ((b * p.heads + h) * p.tq + i0 + r) * D;
        const T inv = l[size_t(r)] > 0 ? T(1) / l[size_t(r)] : T(0);  // fully masked rows give 0
        for (int64_t d = 0; d < D; ++d) o[d] = acc[size_t(r * D + d)] * inv;
        lse[(b * p.heads + h) * p.tq + i0 + r] =
            l[size_t(r)] > 0 ? m[size_t(r)] + std::log(l[size_t(r)]) : std::numeric_limits<T>::infinity();
      }
    }
  }
}

template <class T>
void backward(const AttentionParams& p, const T* q, const T* k, const T* v, const T* out, const T* dout,
              const T* lse, T* dq, T* dk, T* dv) {
  const int64_t D = p.dim, group = p.heads / p.kv_heads, offset = p.tk - p.tq;
#pragma omp parallel for schedule(dynamic)
  for (int64_t task = 0; task < p.batch * p.kv_heads; ++task) {
    const int64_t b = task / p.kv_heads, hk = task % p.kv_heads;
    const T* kh = k + ((b * p.kv_heads + hk) * p.tk) * D;
    const T* vh = v + ((b * p.kv_heads + hk) * p.tk) * D;
    T* dkh = dk + ((b * p.kv_heads + hk) * p.tk) * D;
    T* dvh = dv + ((b * p.kv_heads + hk) * p.tk) * D;
    std::fill(dkh, dkh + p.tk * D, T(0));
    std::fill(dvh, dvh + p.tk * D, T(0));
    for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
      const int64_t base = (b * p.heads + h) * p.tq;
      for (int64_t i = 0; i < p.tq; ++i) {
        const T* qi = q + (base + i) * D;
        const T* doi = dout + (base + i) * D;
        T* dqi = dq + (base + i) * D;
        std::fill(dqi, dqi + D, T(0));
        const T L = lse[base + i];
        if (!std::isfinite(double(L))) continue;
        const T di = dot(doi, out + (base + i) * D, D);
        const int64_t qpos = offset + i, last = p.causal ? std::min(p.tk, qpos + 1) : p.tk;
        for (int64_t j = 0; j < last; ++j) {
          const T sc = score(p, dot(qi, kh + j * D, D), h, qpos, j);
          const T pr = std::exp(sc - L);
          const T ds = pr * (dot(doi, vh + j * D, D) - di) * T(p.scale);
          const T* kj = kh + j * D;
          T* dkj = dkh + j * D;
          T* dvj = dvh + j * D;
#pragma omp simd
          for (int64_t d = 0; d < D; ++d) {
            dvj[d] += pr * doi[d];
            dqi[d] += ds * kj[d];
            dkj[d] += ds * qi[d];
          }
        }
      }
    }
  }
}

}  // namespace

void attention_forward_cpu(const AttentionParams& p, const View& q, const View& k, const View& v, const View& out,
                           const View& lse) {
  if (q.dtype == DType::F32)
    forward(p, static_cast<const float*>(q.data), static_cast<const float*>(k.data), static_cast<const float*>(v.data),
            static_cast<float*>(out.data), static_cast<float*>(lse.data));
  else
    forward(p, static_cast<const double*>(q.data), static_cast<const double*>(k.data), static_cast<const double*>(v.data),
            static_cast<double*>(out.data), static_cast<double*>(lse.data));
}

void attention_backward_cpu(const AttentionParams& p, const View& q, const View& k, const View& v, const View& out,
                            const View& dout, const View& lse, const View& dq, const View& dk, const View& dv) {
  auto run = [&](auto tag) {
    using T = decltype(tag);
    backward(p, static_cast<const T*>(q.data), static_cast<const T*>(k.data), static_cast<const T*>(v.data),
             static_cast<const T*>(out.data), static_cast<const T*>(dout.data), static_cast<const T*>(lse.data),
             static_cast<T*>(dq.data), static_cast<T*>(dk.data), static_cast<T*>(dv.data));
  };
  if (q.dtype == DType::F32) run(float{});
  else run(double{});
}

}  // namespace nx::cpu
