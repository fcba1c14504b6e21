// CPU flash attention, included into simd_kernels.inl so that it is compiled once per ISA (the
// inner loops vectorize at the width of the machine, like every other CPU kernel).
//
// Forward: tiles of kAttnRows queries against tiles of kAttnKeys keys with an online softmax; no
// [Tq, Tk] score matrix is stored (memory O(T * D) per thread). The key tile is transposed into a
// [D][kAttnKeys] buffer so a row of scores is a sum of D vector FMAs over the tile's keys.
// Backward: one thread owns a (batch, kv head), so dK/dV have one writer and grouped-query
// attention needs no atomics (deterministic); it recomputes P tile by tile from the saved
// log-sum-exp: dV += P^T dO, dS = P (dP - delta) scale, dK += dS^T Q, dQ += dS K.
// f16/bf16 tensors (S) are widened to f32 (T = ComputeOf<S>) as their tiles and rows are loaded;
// scores, softmax, accumulators and the log-sum-exp are f32, and each output is rounded once.
// Plain data only (AttnArgs, Buffer): see the ODR note at the top of simd_kernels.inl.

constexpr int64_t kAttnRows = 32, kAttnKeys = 64;

template <class T> inline T neg_inf() { return -std::numeric_limits<T>::infinity(); }

// cols rows of a [cols, D] matrix (K or V rows of a tile, in the compute type) as a
// [D][kAttnKeys] tile, zero-padded.
template <class T>
inline void transpose_tile(T* dst, const T* rows, int64_t cols, int64_t D) {
  for (int64_t d = 0; d < D; ++d) {
    T* row = dst + d * kAttnKeys;
    for (int64_t c = 0; c < cols; ++c) row[c] = rows[c * D + d];
    for (int64_t c = cols; c < kAttnKeys; ++c) row[c] = T(0);
  }
}

// n contiguous elements of src in the compute type: src itself when it is stored so, else
// widened into buf.
template <class T, class S>
inline const T* widened(T* buf, const S* src, int64_t n) {
  if constexpr (std::is_same_v<S, T>) {
    return src;
  } else {
    widen_n(buf, src, n);
    return buf;
  }
}

// Where a gradient accumulates: in the output itself when it is stored in the compute type, else
// in buf (rounded into the output once, by round_into).
template <class T, class S> inline T* accumulator(S* out, T* buf) {
  if constexpr (std::is_same_v<S, T>) return out; else return buf;
}
template <class T, class S> inline void round_into(S* out, const T* acc, int64_t n) {
  if constexpr (!std::is_same_v<S, T>) narrow_n(out, acc, n);
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

// y[d] += w[c] * rows[c][d] for c = 0, 1, .. cols - 1 in that order (as cols axpy calls would
// add them), with y held in registers across the rows, 32 columns at a time: an axpy per row
// loads and stores y again, which made the attention kernels store-bound at small head_dim.
template <class T>
inline void accumulate_rows(T* y, const T* w, const T* rows, int64_t cols, int64_t D) {
  constexpr int64_t R = 32;
  int64_t d0 = 0;
  for (; d0 + R <= D; d0 += R) {
    T reg[R];
#pragma omp simd
    for (int64_t x = 0; x < R; ++x) reg[x] = y[d0 + x];
    for (int64_t c = 0; c < cols; ++c) {
      const T wc = w[c];
      const T* r = rows + c * D + d0;
#pragma omp simd
      for (int64_t x = 0; x < R; ++x) reg[x] += wc * r[x];
    }
#pragma omp simd
    for (int64_t x = 0; x < R; ++x) y[d0 + x] = reg[x];
  }
  if (d0 < D)
    for (int64_t c = 0; c < cols; ++c) axpy(y + d0, w[c], rows + c * D + d0, D - d0);
}

template <class S>
void attn_forward(const AttnArgs& p, const S* q, const S* k, const S* v, S* out, ComputeOf<S>* lse) {
  using T = ComputeOf<S>;
  constexpr bool half = !std::is_same_v<S, T>;
  const int64_t D = p.dim, nqb = (p.tq + kAttnRows - 1) / kAttnRows, group = p.heads / p.kv_heads;
  const int64_t offset = p.tk - p.tq, tasks = p.batch * p.heads * nqb;
#pragma omp parallel
  {
    Buffer<T> acc(static_cast<size_t>(kAttnRows * D)), s(static_cast<size_t>(kAttnKeys)), kt(static_cast<size_t>(D * kAttnKeys));
    // f16/bf16 only: the task's query rows and the tile's key and value rows widened
    Buffer<T> qw(static_cast<size_t>(half ? kAttnRows * D : 0)), kw(static_cast<size_t>(half ? kAttnKeys * D : 0)),
        vw(static_cast<size_t>(half ? kAttnKeys * D : 0));
    T m[kAttnRows], l[kAttnRows];
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t qb = task % nqb, bh = task / nqb, h = bh % p.heads, b = bh / p.heads;
      const int64_t hk = h / group, i0 = qb * kAttnRows, rows = vmin(kAttnRows, p.tq - i0);
      const T* qb_rows = widened(qw.p, q + ((b * p.heads + h) * p.tq + i0) * D, rows * D);
      const S* kh = k + ((b * p.kv_heads + hk) * p.tk) * D;
      const S* vh = v + ((b * p.kv_heads + hk) * p.tk) * D;
      for (int64_t i = 0; i < rows * D; ++i) acc.p[i] = T(0);
      for (int64_t r = 0; r < rows; ++r) { m[r] = neg_inf<T>(); l[r] = T(0); }
      const int64_t last_key = p.causal ? vmin(p.tk, offset + i0 + rows) : p.tk;
      for (int64_t j0 = 0; j0 < last_key; j0 += kAttnKeys) {
        const int64_t cols = vmin(kAttnKeys, p.tk - j0);
        transpose_tile(kt.p, widened(kw.p, kh + j0 * D, cols * D), cols, D);
        const T* v_rows = widened(vw.p, vh + j0 * D, cols * D);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t qpos = offset + i0 + r;
          T* sr = s.p;
          row_times_tile(sr, qb_rows + r * D, kt.p, D, T(p.scale));
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
          accumulate_rows(a, sr, v_rows, cols, D);
          l[r] = l[r] * corr + sum;
          m[r] = mx;
        }
      }
      for (int64_t r = 0; r < rows; ++r) {
        T* a = acc.p + r * D;
        const T inv = l[r] > 0 ? T(1) / l[r] : T(0);  // fully masked rows give 0
#pragma omp simd
        for (int64_t d = 0; d < D; ++d) a[d] *= inv;
        narrow_n(out + ((b * p.heads + h) * p.tq + i0 + r) * D, a, D);
        lse[(b * p.heads + h) * p.tq + i0 + r] = l[r] > 0 ? m[r] + vlog(l[r]) : -neg_inf<T>();
      }
    }
  }
}

template <class S>
void attn_backward(const AttnArgs& p, const S* q, const S* k, const S* v, const S* out, const S* dout,
                   const ComputeOf<S>* lse, S* dq, S* dk, S* dv) {
  using T = ComputeOf<S>;
  constexpr bool half = !std::is_same_v<S, T>;
  const int64_t D = p.dim, group = p.heads / p.kv_heads, offset = p.tk - p.tq;
#pragma omp parallel
  {
    const size_t tile = static_cast<size_t>(D * kAttnKeys), row = static_cast<size_t>(kAttnKeys);
    Buffer<T> kt(tile), vt(tile), pr(row), ds(row), delta(static_cast<size_t>(p.tq));
    // f16/bf16 only: the tile's key and value rows, a query (or O) row and its dO row widened; dQ
    // of one head and dK, dV of the task summed in f32
    auto if_half = [&](int64_t n) { return static_cast<size_t>(half ? n : 0); };
    Buffer<T> kw(if_half(kAttnKeys * D)), vw(if_half(kAttnKeys * D)), qw(if_half(D)), dow(if_half(D)),
        dq_sum(if_half(p.tq * D)), dk_sum(if_half(p.tk * D)), dv_sum(if_half(p.tk * D));
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < p.batch * p.kv_heads; ++task) {
      const int64_t b = task / p.kv_heads, hk = task % p.kv_heads, kv_base = (b * p.kv_heads + hk) * p.tk * D;
      const S* kh = k + kv_base;
      const S* vh = v + kv_base;
      T* dkh = accumulator(dk + kv_base, dk_sum.p);
      T* dvh = accumulator(dv + kv_base, dv_sum.p);
      for (int64_t i = 0; i < p.tk * D; ++i) dkh[i] = dvh[i] = T(0);
      for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
        const int64_t base = (b * p.heads + h) * p.tq;
        T* dqh = accumulator(dq + base * D, dq_sum.p);
        for (int64_t i = 0; i < p.tq * D; ++i) dqh[i] = T(0);
        for (int64_t i = 0; i < p.tq; ++i) {  // delta_i = dO_i . O_i, once per query row
          const T* doi = widened(dow.p, dout + (base + i) * D, D);
          const T* oi = widened(qw.p, out + (base + i) * D, D);
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
          const T* k_rows = widened(kw.p, kh + j0 * D, cols * D);
          transpose_tile(kt.p, k_rows, cols, D);
          transpose_tile(vt.p, widened(vw.p, vh + j0 * D, cols * D), cols, D);
          for (int64_t i = first; i < p.tq; ++i) {
            const T L = lse[base + i];
            if (!(L < -neg_inf<T>())) continue;  // a row without keys: no gradient
            const T* qi = widened(qw.p, q + (base + i) * D, D);
            const T* doi = widened(dow.p, dout + (base + i) * D, D);
            const T di = delta.p[i];
            row_times_tile(pr.p, qi, kt.p, D, T(p.scale));
            bias_and_mask(pr.p, p, h, offset + i, j0, cols);
            row_times_tile(ds.p, doi, vt.p, D, T(1));
#pragma omp simd
            for (int64_t c = 0; c < cols; ++c) {
              pr.p[c] = vexp(pr.p[c] - L);
              ds.p[c] = pr.p[c] * (ds.p[c] - di) * T(p.scale);
            }
            for (int64_t c = 0; c < cols; ++c) {
              axpy(dvh + (j0 + c) * D, pr.p[c], doi, D);
              axpy(dkh + (j0 + c) * D, ds.p[c], qi, D);
            }
            accumulate_rows(dqh + i * D, ds.p, k_rows, cols, D);
          }
        }
        round_into(dq + base * D, dqh, p.tq * D);
      }
      round_into(dk + kv_base, dkh, p.tk * D);
      round_into(dv + kv_base, dvh, p.tk * D);
    }
  }
}
