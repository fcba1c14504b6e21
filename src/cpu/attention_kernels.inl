// CPU flash attention, included into simd_kernels.inl so that it is compiled once per ISA (the
// inner loops vectorize at the width of the machine, like every other CPU kernel).
//
// Forward: tiles of kAttnRows queries against tiles of kAttnKeys keys with an online softmax; no
// [Tq, Tk] score matrix is stored (memory O(T * D) per thread). The key tile is transposed into a
// [D][kAttnKeys] buffer so a row of scores is a sum of D vector FMAs over the tile's keys.
// Backward: one thread owns a (batch, kv head), so dK/dV have one writer and grouped-query
// attention needs no atomics (deterministic); it recomputes P tile by tile from the saved
// log-sum-exp: dV += P^T dO, dS = P (dP - delta) scale, dK += dS^T Q, dQ += dS K.
// Plain data only (AttnArgs, Buffer): see the ODR note at the top of simd_kernels.inl.

constexpr int64_t kAttnRows = 32, kAttnKeys = 64;

template <class T> inline T neg_inf() { return -std::numeric_limits<T>::infinity(); }

// K (or V) rows [j0, j0 + cols) of a [*, D] matrix as a [D][kAttnKeys] tile, zero-padded.
template <class T>
inline void transpose_tile(T* dst, const T* src, int64_t j0, int64_t cols, int64_t D) {
  for (int64_t d = 0; d < D; ++d) {
    T* row = dst + d * kAttnKeys;
    for (int64_t c = 0; c < cols; ++c) row[c] = src[(j0 + c) * D + d];
    for (int64_t c = cols; c < kAttnKeys; ++c) row[c] = T(0);
  }
}

// s[c] = scale * dot(x, tile column c) for the kAttnKeys columns of a transposed tile.
template <class T>
inline void row_times_tile(T* s, const T* x, const T* tile, int64_t D, T scale) {
#pragma omp simd
  for (int64_t c = 0; c < kAttnKeys; ++c) s[c] = T(0);
  for (int64_t d = 0; d < D; ++d) {
    const T xd = x[d] * scale;
    const T* t = tile + d * kAttnKeys;
#pragma omp simd
    for (int64_t c = 0; c < kAttnKeys; ++c) s[c] += xd * t[c];
  }
}

// ALiBi bias and causal mask on a row of scores (keys j0.., query at position qpos).
template <class T>
inline void bias_and_mask(T* s, const AttnArgs& p, int64_t h, int64_t qpos, int64_t j0, int64_t cols) {
  if (p.slopes) {
    const T slope = T(p.slopes[h]);
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) s[c] -= slope * T(qpos - (j0 + c));
  }
  if (p.causal)
    for (int64_t c = vmax<int64_t>(0, qpos + 1 - j0); c < cols; ++c) s[c] = neg_inf<T>();
}

template <class T>
inline void axpy(T* y, T a, const T* x, int64_t n) {
#pragma omp simd
  for (int64_t d = 0; d < n; ++d) y[d] += a * x[d];
}

template <class T>
void attn_forward(const AttnArgs& p, const T* q, const T* k, const T* v, T* out, T* lse) {
  const int64_t D = p.dim, nqb = (p.tq + kAttnRows - 1) / kAttnRows, group = p.heads / p.kv_heads;
  const int64_t offset = p.tk - p.tq, tasks = p.batch * p.heads * nqb;
#pragma omp parallel
  {
    Buffer<T> acc(static_cast<size_t>(kAttnRows * D)), s(static_cast<size_t>(kAttnKeys)), kt(static_cast<size_t>(D * kAttnKeys));
    T m[kAttnRows], l[kAttnRows];
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t qb = task % nqb, bh = task / nqb, h = bh % p.heads, b = bh / p.heads;
      const int64_t hk = h / group, i0 = qb * kAttnRows, rows = vmin(kAttnRows, p.tq - i0);
      const T* qh = q + ((b * p.heads + h) * p.tq) * D;
      const T* kh = k + ((b * p.kv_heads + hk) * p.tk) * D;
      const T* vh = v + ((b * p.kv_heads + hk) * p.tk) * D;
      for (int64_t i = 0; i < rows * D; ++i) acc.p[i] = T(0);
      for (int64_t r = 0; r < rows; ++r) { m[r] = neg_inf<T>(); l[r] = T(0); }
      const int64_t last_key = p.causal ? vmin(p.tk, offset + i0 + rows) : p.tk;
      for (int64_t j0 = 0; j0 < last_key; j0 += kAttnKeys) {
        const int64_t cols = vmin(kAttnKeys, p.tk - j0);
        transpose_tile(kt.p, kh, j0, cols, D);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t qpos = offset + i0 + r;
          T* sr = s.p;
          row_times_tile(sr, qh + (i0 + r) * D, kt.p, D, T(p.scale));
          bias_and_mask(sr, p, h, qpos, j0, cols);
          T mx = m[r];
          for (int64_t c = 0; c < cols; ++c) mx = vmax(mx, sr[c]);
          if (mx == neg_inf<T>()) continue;  // nothing visible yet
          const T corr = vexp(m[r] - mx);
          T sum = 0;
#pragma omp simd reduction(+ : sum)
          for (int64_t c = 0; c < cols; ++c) {
            sr[c] = vexp(sr[c] - mx);
            sum += sr[c];
          }
          T* a = acc.p + r * D;
#pragma omp simd
          for (int64_t d = 0; d < D; ++d) a[d] *= corr;
          for (int64_t c = 0; c < cols; ++c) axpy(a, sr[c], vh + (j0 + c) * D, D);
          l[r] = l[r] * corr + sum;
          m[r] = mx;
        }
      }
      for (int64_t r = 0; r < rows; ++r) {
        T* o = out + ((b * p.heads + h) * p.tq + i0 + r) * D;
        const T inv = l[r] > 0 ? T(1) / l[r] : T(0);  // fully masked rows give 0
#pragma omp simd
        for (int64_t d = 0; d < D; ++d) o[d] = acc.p[r * D + d] * inv;
        lse[(b * p.heads + h) * p.tq + i0 + r] = l[r] > 0 ? m[r] + vlog(l[r]) : -neg_inf<T>();
      }
    }
  }
}

template <class T>
void attn_backward(const AttnArgs& p, const T* q, const T* k, const T* v, const T* out, const T* dout, const T* lse,
                   T* dq, T* dk, T* dv) {
  const int64_t D = p.dim, group = p.heads / p.kv_heads, offset = p.tk - p.tq;
#pragma omp parallel
  {
    const size_t tile = static_cast<size_t>(D * kAttnKeys), row = static_cast<size_t>(kAttnKeys);
    Buffer<T> kt(tile), vt(tile), pr(row), ds(row), delta(static_cast<size_t>(p.tq));
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < p.batch * p.kv_heads; ++task) {
      const int64_t b = task / p.kv_heads, hk = task % p.kv_heads;
      const T* kh = k + ((b * p.kv_heads + hk) * p.tk) * D;
      const T* vh = v + ((b * p.kv_heads + hk) * p.tk) * D;
      T* dkh = dk + ((b * p.kv_heads + hk) * p.tk) * D;
      T* dvh = dv + ((b * p.kv_heads + hk) * p.tk) * D;
      for (int64_t i = 0; i < p.tk * D; ++i) dkh[i] = dvh[i] = T(0);
      for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
        const int64_t base = (b * p.heads + h) * p.tq;
        for (int64_t i = 0; i < p.tq * D; ++i) dq[base * D + i] = T(0);
        for (int64_t i = 0; i < p.tq; ++i) {  // delta_i = dO_i . O_i, once per query row
          const T* doi = dout + (base + i) * D;
          const T* oi = out + (base + i) * D;
          T di = 0;
#pragma omp simd reduction(+ : di)
          for (int64_t d = 0; d < D; ++d) di += doi[d] * oi[d];
          delta.p[i] = di;
        }
        for (int64_t j0 = 0; j0 < p.tk; j0 += kAttnKeys) {
          const int64_t cols = vmin(kAttnKeys, p.tk - j0);
          // queries that see any key of this tile (causal: from position j0 on)
          const int64_t first = p.causal ? vmax<int64_t>(0, j0 - offset) : 0;
          if (first >= p.tq) break;
          transpose_tile(kt.p, kh, j0, cols, D);
          transpose_tile(vt.p, vh, j0, cols, D);
          for (int64_t i = first; i < p.tq; ++i) {
            const T L = lse[base + i];
            if (!(L < -neg_inf<T>())) continue;  // a row without keys: no gradient
            const T* qi = q + (base + i) * D;
            const T* doi = dout + (base + i) * D;
            const T di = delta.p[i];
            row_times_tile(pr.p, qi, kt.p, D, T(p.scale));
            bias_and_mask(pr.p, p, h, offset + i, j0, cols);
            row_times_tile(ds.p, doi, vt.p, D, T(1));
#pragma omp simd
            for (int64_t c = 0; c < cols; ++c) {
              pr.p[c] = vexp(pr.p[c] - L);
              ds.p[c] = pr.p[c] * (ds.p[c] - di) * T(p.scale);
            }
            T* dqi = dq + (base + i) * D;
            for (int64_t c = 0; c < cols; ++c) {
              axpy(dvh + (j0 + c) * D, pr.p[c], doi, D);
              axpy(dkh + (j0 + c) * D, ds.p[c], qi, D);
              axpy(dqi, ds.p[c], kh + (j0 + c) * D, D);
            }
          }
        }
      }
    }
  }
}

static void attn_forward_f32(const AttnArgs& p, const float* q, const float* k, const float* v, float* out, float* lse) {
  attn_forward<float>(p, q, k, v, out, lse);
}
static void attn_forward_f64(const AttnArgs& p, const double* q, const double* k, const double* v, double* out,
                             double* lse) {
  attn_forward<double>(p, q, k, v, out, lse);
}
static void attn_backward_f32(const AttnArgs& p, const float* q, const float* k, const float* v, const float* out,
                              const float* dout, const float* lse, float* dq, float* dk, float* dv) {
  attn_backward<float>(p, q, k, v, out, dout, lse, dq, dk, dv);
}
static void attn_backward_f64(const AttnArgs& p, const double* q, const double* k, const double* v, const double* out,
                              const double* dout, const double* lse, double* dq, double* dk, double* dv) {
  attn_backward<double>(p, q, k, v, out, dout, lse, dq, dk, dv);
}
