// CPU flash attention, included into simd_kernels.inl so that it is compiled once per ISA (the
// inner loops vectorize at the width of the machine, like every other CPU kernel).
//
// Layout: a block of kAttnRows query rows is held transposed (Q^T [D][rows]), so that the
// scores of a tile of kAttnKeys keys come out as S^T [keys][rows], query rows in the vector lanes:
// the softmax's per-row maxima, sums, log-sum-exp and masks are then elementwise vector work, and
// no key tile is ever transposed (only the block of queries, once). Every product is one
// register-blocked micro-kernel (attn_block: an IB x NV-vector block of accumulators in registers,
// each loaded vector reused IB times; sizes here for AVX-512 f32 at head_dim 32):
//   forward  S^T = K Q^T (4 keys x 4 vectors of rows; 8 x 2 or 16 x 1 where fewer rows are
//            left), O += P V (8 rows x 2 vectors of D, over the tile's keys);
//   backward S^T = K Q^T and dP^T = V dO^T (as S^T above), dV += P^T dO and dK += dS^T Q (8 keys x
//            2 vectors of D, over the block's rows), dQ += dS K (as O += P V).
// Causal masks skip whole blocks: a block of keys starts at the first (16-aligned) query row that
// sees it, a block of rows stops at the last key its last row sees.
// Forward: tiles with an online softmax; no [Tq, Tk] score matrix is stored (memory O(T * D) per
// thread). Backward: one thread owns a (batch, kv head), so dK/dV have one writer (summed in a
// local buffer across the group's heads and query blocks, stored once) and grouped-query
// attention needs no atomics (deterministic); it recomputes P tile by tile from the saved
// log-sum-exp: dV += P^T dO, dS = P (dP - delta) scale, dK += dS^T Q, dQ += dS K.
// f16/bf16 tensors (S) are widened to f32 (T = ComputeOf<S>) as their tiles and rows are loaded;
// scores, softmax, accumulators and the log-sum-exp are f32 (f64 for f64 tensors), and each output
// is rounded once. Plain data only (AttnArgs, Buffer): see the ODR note at the top of
// simd_kernels.inl.

constexpr int64_t kAttnRows = 64, kAttnKeys = 64;
// Accumulator vectors of a register block (of 32 zmm registers, or 16 ymm/xmm), keys per block of
// the score products, rows (or keys) per block of the other products, and the alignment of the
// row ranges causal masks skip (a multiple of every vector width and of both block sizes).
constexpr int kAttnAcc = NX_VEC_BYTES >= 64 ? 16 : 8, kAttnScoreKeys = 4, kAttnIB = kAttnAcc / 2;
constexpr int64_t kAttnAlign = 16;

template <class T> inline T neg_inf() { return -std::numeric_limits<T>::infinity(); }

// y[i ldy + v W + x] (+)= sum over k0 <= k < k1 of a[i ai + k ak] * b[k ldb + v W + x], for i < IB,
// v < NV, x < W: the IB x NV vectors of y stay in registers over k, each loaded vector of b is
// used IB times and each broadcast of a NV times.
template <int IB, int NV, class T>
inline void attn_block(T* y, int64_t ldy, const T* a, int64_t ai, int64_t ak, const T* b, int64_t ldb, int64_t k0,
                       int64_t k1, bool accumulate) {
  using V = typename GemmShape<T>::vec;
  constexpr int W = GemmShape<T>::W;
  V acc[IB][NV];
  for (int i = 0; i < IB; ++i)
    for (int v = 0; v < NV; ++v) acc[i][v] = V{};
  for (int64_t k = k0; k < k1; ++k) {
    V bv[NV];
    for (int v = 0; v < NV; ++v) std::memcpy(&bv[v], b + k * ldb + v * W, sizeof(V));
    for (int i = 0; i < IB; ++i) {
      const V av = a[i * ai + k * ak] - V{};  // a broadcast (see micro_kernel)
      for (int v = 0; v < NV; ++v) acc[i][v] += av * bv[v];
    }
  }
  for (int i = 0; i < IB; ++i) {
    for (int v = 0; v < NV; ++v) {
      T* dst = y + i * ldy + v * W;
      if (accumulate) {
        V c;
        std::memcpy(&c, dst, sizeof(V));
        acc[i][v] += c;
      }
      std::memcpy(dst, &acc[i][v], sizeof(V));
    }
  }
}

// attn_block over nvec vectors of columns: blocks as wide as the registers allow, then narrower.
template <int IB, class T>
inline void attn_rows(T* y, int64_t ldy, const T* a, int64_t ai, int64_t ak, const T* b, int64_t ldb, int64_t nvec,
                      int64_t k0, int64_t k1, bool accumulate) {
  constexpr int NV = kAttnAcc / IB;
  constexpr int64_t W = GemmShape<T>::W;
  int64_t v = 0;
  for (; v + NV <= nvec; v += NV) attn_block<IB, NV>(y + v * W, ldy, a, ai, ak, b + v * W, ldb, k0, k1, accumulate);
  if constexpr (NV > 2)
    for (; v + 2 <= nvec; v += 2) attn_block<IB, 2>(y + v * W, ldy, a, ai, ak, b + v * W, ldb, k0, k1, accumulate);
  for (; v < nvec; ++v) attn_block<IB, 1>(y + v * W, ldy, a, ai, ak, b + v * W, ldb, k0, k1, accumulate);
}

// n rows of D contiguous elements (src_ld apart; D when 0) widened into dst (row stride ld),
// zero-padded to ld columns and to rows_to rows.
template <class T, class S>
inline void load_rows(T* dst, int64_t ld, const S* src, int64_t n, int64_t D, int64_t rows_to, int64_t src_ld = 0) {
  if (src_ld == 0) src_ld = D;
  for (int64_t r = 0; r < n; ++r) {
    widen_n(dst + r * ld, src + r * src_ld, D);
    for (int64_t d = D; d < ld; ++d) dst[r * ld + d] = T(0);
  }
  for (int64_t i = n * ld; i < rows_to * ld; ++i) dst[i] = T(0);
}

// A tile's cols key (or value) rows (src_ld apart; D when 0) in the compute type with a row stride
// of at least Dp (set in ld): in place when they are stored so with D = Dp and the tile is whole,
// else widened into buf and zero-padded to Dp columns and to a multiple of kAttnAcc rows
// (scores_t's groups of keys read past the end of a short last tile).
template <class T, class S>
inline const T* tile_rows(T* buf, const S* src, int64_t cols, int64_t D, int64_t Dp, int64_t& ld, int64_t src_ld = 0) {
  if (src_ld == 0) src_ld = D;
  if constexpr (std::is_same_v<S, T>) {
    if (D == Dp && cols == kAttnKeys) {
      ld = src_ld;
      return src;
    }
  }
  load_rows(buf, Dp, src, cols, D, (cols + kAttnAcc - 1) / kAttnAcc * kAttnAcc, src_ld);
  ld = Dp;
  return buf;
}

// dst[d ldd + r] = src[r lds + d] for r < n, d < D.
template <class T>
inline void transpose_rows(T* dst, int64_t ldd, const T* src, int64_t lds, int64_t n, int64_t D) {
  for (int64_t r = 0; r < n; ++r)
    for (int64_t d = 0; d < D; ++d) dst[d * ldd + r] = src[r * lds + d];
}

// The first of a block's nrp rows (query positions qpos0..) that needs the scores of key `key`
// (causal: the first that sees the block of kAttnIB keys holding it), rounded down to kAttnAlign.
inline int64_t attn_row_start(bool causal, int64_t key, int64_t qpos0, int64_t nrp) {
  static_assert((kAttnIB & (kAttnIB - 1)) == 0 && (kAttnAlign & (kAttnAlign - 1)) == 0, "powers of two");
  if (!causal) return 0;
  const int64_t first = vmin(nrp, vmax<int64_t>(0, (key & ~int64_t(kAttnIB - 1)) - qpos0));  // key >= 0
  return first & ~(kAttnAlign - 1);
}
// Keys of a tile (j0, cols) seen by a query at position qpos (causal), or all of them.
inline int64_t attn_visible(bool causal, int64_t qpos, int64_t j0, int64_t cols) {
  return causal ? vmin(cols, vmax<int64_t>(0, qpos + 1 - j0)) : cols;
}

// S^T [kAttnKeys][ldr] = K Q^T for the tile's cols keys (rows ld apart) against the transposed
// block qt [D][ldr] of nrp rows, from each key block's first row on. Keys go in groups of kAttnAcc:
// a group whose rows fill at least kAttnAcc / kAttnScoreKeys vectors is done kAttnScoreKeys keys
// at a time (each from its own first row), a group with fewer (the corner of a causal tile, or a
// block of a few rows: decoding) as kAttnAcc keys of one vector or kAttnAcc / 2 keys of two, so
// that a block always has kAttnAcc independent accumulators (FMA latency, not one chain per key).
template <class T>
inline void scores_t(T* st, int64_t ldr, const T* kr, int64_t ld, const T* qt, int64_t cols, int64_t D, bool causal,
                     int64_t j0, int64_t qpos0, int64_t nrp) {
  constexpr int64_t W = GemmShape<T>::W, G = kAttnAcc, wide = kAttnAcc / kAttnScoreKeys;
  for (int64_t g0 = 0; g0 < cols; g0 += G) {
    const int64_t r0 = attn_row_start(causal, j0 + g0, qpos0, nrp), nv = (nrp - r0) / W;
    if (nv <= 0) continue;
    if (nv == 1) {
      attn_block<G, 1>(st + g0 * ldr + r0, ldr, kr + g0 * ld, ld, 1, qt + r0, ldr, 0, D, false);
    } else if (nv == 2 && wide > 2) {
      for (int64_t c0 = g0; c0 < g0 + G; c0 += G / 2)
        attn_block<G / 2, 2>(st + c0 * ldr + r0, ldr, kr + c0 * ld, ld, 1, qt + r0, ldr, 0, D, false);
    } else {
      for (int64_t c0 = g0; c0 < vmin(cols, g0 + G); c0 += kAttnScoreKeys) {
        const int64_t r = attn_row_start(causal, j0 + c0, qpos0, nrp);
        if (r < nrp)
          attn_rows<kAttnScoreKeys>(st + c0 * ldr + r, ldr, kr + c0 * ld, ld, 1, qt + r, ldr, (nrp - r) / W, 0, D,
                                    false);
      }
    }
  }
}

// y [rows][Dp] += P [rows][keys] R [keys][Dp] with P given transposed (pt [kAttnKeys][ldr]),
// blocks of kAttnIB rows up to the last key their last row sees (the O += P V and dQ += dS K steps);
// a last block of 1 or 2 rows (decoding) as such.
template <class T>
inline void rows_times_keys(T* y, int64_t Dp, const T* pt, int64_t ldr, const T* r, int64_t ld, int64_t cols,
                            bool causal, int64_t j0, int64_t qpos0, int64_t rows, int64_t nrp) {
  constexpr int64_t W = GemmShape<T>::W;
  for (int64_t r0 = attn_row_start(causal, j0, qpos0, nrp); r0 < rows; r0 += kAttnIB) {
    const int64_t kend = attn_visible(causal, qpos0 + r0 + kAttnIB - 1, j0, cols);
    if (kend <= 0) continue;
    if (rows - r0 == 1) attn_rows<1>(y + r0 * Dp, Dp, pt + r0, 1, ldr, r, ld, Dp / W, 0, kend, true);
    else if (rows - r0 == 2) attn_rows<2>(y + r0 * Dp, Dp, pt + r0, 1, ldr, r, ld, Dp / W, 0, kend, true);
    else attn_rows<kAttnIB>(y + r0 * Dp, Dp, pt + r0, 1, ldr, r, ld, Dp / W, 0, kend, true);
  }
}

// One query row per (batch, head), as when decoding with a KV cache: the block layout above would
// put that row in one of a vector's lanes (scores, masks and exps computed W times over), so here
// the keys take the lanes instead. Scores are dot products over D, the online softmax runs over
// each tile's keys as vectors, and O += P V is the same register block as the general path's.
template <class S>
void attn_forward_one_query(const AttnArgs& p, const S* q, const S* k, const S* v, S* out, ComputeOf<S>* lse) {
  using T = ComputeOf<S>;
  constexpr int64_t W = GemmShape<T>::W;
  const int64_t D = p.dim, Dp = (D + W - 1) / W * W, group = p.heads / p.kv_heads, tasks = p.batch * p.heads;
  const int64_t qpos = p.tk - 1, last_key = p.causal ? vmin(p.tk, qpos + 1) : p.tk;  // causal: every key
  const T scale = T(p.scale);
#pragma omp parallel
  {
    Buffer<T> qp(static_cast<size_t>(Dp)), o(static_cast<size_t>(Dp)), kb(static_cast<size_t>(kAttnKeys * Dp)),
        vb(static_cast<size_t>(kAttnKeys * Dp));
    alignas(64) T sc[kAttnKeys];
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t h = task % p.heads, b = task / p.heads, hk = h / group;
      const T slope = p.slopes ? T(p.slopes[h]) : T(0);
      load_rows(qp.p, Dp, q + (b * p.heads + h) * D, 1, D, 1);
      const S* kh = k + b * p.k_strides[0] + hk * p.k_strides[1];  // strided: a KV cache's first positions
      const S* vh = v + b * p.v_strides[0] + hk * p.v_strides[1];
      for (int64_t d = 0; d < Dp; ++d) o.p[d] = T(0);
      T m = neg_inf<T>(), l = T(0);
      for (int64_t j0 = 0; j0 < last_key; j0 += kAttnKeys) {
        const int64_t cols = vmin(kAttnKeys, last_key - j0);
        int64_t ldk, ldv;
        const T* kr = tile_rows(kb.p, kh + j0 * p.k_strides[2], cols, D, Dp, ldk, p.k_strides[2]);
        const T* vr = tile_rows(vb.p, vh + j0 * p.v_strides[2], cols, D, Dp, ldv, p.v_strides[2]);
        T mx = m;
        for (int64_t c = 0; c < cols; ++c) {
          const T* kc = kr + c * ldk;
          T dot = T(0);
#pragma omp simd reduction(+ : dot)
          for (int64_t d = 0; d < Dp; ++d) dot += qp.p[d] * kc[d];
          const T s = dot * scale - slope * T(qpos - (j0 + c));
          sc[c] = s;
          mx = mx < s ? s : mx;
        }
        const bool none = mx == neg_inf<T>();  // nothing visible yet
        const T corr = none ? T(1) : vexp(m - mx), sub = none ? T(0) : mx;
        T sum = T(0);
#pragma omp simd reduction(+ : sum)
        for (int64_t c = 0; c < cols; ++c) {
          sc[c] = vexp(sc[c] - sub);
          sum += sc[c];
        }
        l = l * corr + sum;
        m = mx;
        if (corr != T(1))
#pragma omp simd
          for (int64_t d = 0; d < Dp; ++d) o.p[d] *= corr;
        attn_rows<1>(o.p, Dp, sc, 1, 1, vr, ldv, Dp / W, 0, cols, true);  // O += P V
      }
      const T inv = l > 0 ? T(1) / l : T(0);
#pragma omp simd
      for (int64_t d = 0; d < D; ++d) o.p[d] *= inv;
      narrow_n(out + (b * p.heads + h) * D, o.p, D);
      lse[b * p.heads + h] = l > 0 ? m + vlog(l) : -neg_inf<T>();
    }
  }
}

template <class S>
void attn_forward(const AttnArgs& p, const S* q, const S* k, const S* v, S* out, ComputeOf<S>* lse) {
  using T = ComputeOf<S>;
  constexpr int64_t W = GemmShape<T>::W;
  if (p.tq == 1) return attn_forward_one_query(p, q, k, v, out, lse);
  // rows per block (fewer when all the queries are fewer, as when decoding)
  const int64_t C = vmin(kAttnRows, (p.tq + kAttnAlign - 1) / kAttnAlign * kAttnAlign);
  const int64_t D = p.dim, Dp = (D + W - 1) / W * W, nqb = (p.tq + C - 1) / C, group = p.heads / p.kv_heads;
  const int64_t offset = p.tk - p.tq, tasks = p.batch * p.heads * nqb;
  const T scale = T(p.scale);
  const bool causal = p.causal;
#pragma omp parallel
  {
    Buffer<T> qp(static_cast<size_t>(C * Dp)), qt(static_cast<size_t>(D * C)), o(static_cast<size_t>(C * Dp)),
        st(static_cast<size_t>(kAttnKeys * C)), kb(static_cast<size_t>(kAttnKeys * Dp)),
        vb(static_cast<size_t>(kAttnKeys * Dp));
    // lanes past a block's rows are never read into an output: zeroed once so they hold numbers
    for (int64_t i = 0; i < kAttnKeys * C; ++i) st.p[i] = T(0);
    for (int64_t i = 0; i < D * C; ++i) qt.p[i] = T(0);
    T m[kAttnRows], l[kAttnRows], mx[kAttnRows], sub[kAttnRows], corr[kAttnRows];
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t qb = task % nqb, bh = task / nqb, h = bh % p.heads, b = bh / p.heads;
      const int64_t hk = h / group, i0 = qb * C, rows = vmin(C, p.tq - i0);
      const int64_t nrp = (rows + kAttnAlign - 1) / kAttnAlign * kAttnAlign, qpos0 = offset + i0;
      const T slope = p.slopes ? T(p.slopes[h]) : T(0);
      load_rows(qp.p, Dp, q + ((b * p.heads + h) * p.tq + i0) * D, rows, D, rows);
      transpose_rows(qt.p, C, qp.p, Dp, rows, D);
      const S* kh = k + ((b * p.kv_heads + hk) * p.tk) * D;
      const S* vh = v + ((b * p.kv_heads + hk) * p.tk) * D;
      for (int64_t i = 0; i < nrp * Dp; ++i) o.p[i] = T(0);
      for (int64_t r = 0; r < nrp; ++r) { m[r] = neg_inf<T>(); l[r] = T(0); }
      const int64_t last_key = causal ? vmin(p.tk, qpos0 + rows) : p.tk;
      for (int64_t j0 = 0; j0 < last_key; j0 += kAttnKeys) {
        const int64_t cols = vmin(kAttnKeys, p.tk - j0);
        int64_t ldk, ldv;
        const T* kr = tile_rows(kb.p, kh + j0 * D, cols, D, Dp, ldk);
        const T* vr = tile_rows(vb.p, vh + j0 * D, cols, D, Dp, ldv);
        scores_t(st.p, C, kr, ldk, qt.p, cols, D, causal, j0, qpos0, nrp);
        // online softmax, rows in the lanes: scale, ALiBi, mask and the new running maxima
        for (int64_t r = 0; r < nrp; ++r) mx[r] = m[r];
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t j = j0 + c;
          for (int64_t r0 = attn_row_start(causal, j, qpos0, nrp); r0 < nrp; r0 += kAttnAlign) {
            T* sc = st.p + c * C + r0;
            T* mr = mx + r0;
            const int rel = int(qpos0 + r0 - j);  // query position - key position, at lane 0
#pragma omp simd
            for (int x = 0; x < int(kAttnAlign); ++x) {
              T s = sc[x] * scale - slope * T(rel + x);
              s = causal & (rel + x < 0) ? neg_inf<T>() : s;
              sc[x] = s;
              mr[x] = mr[x] < s ? s : mr[x];
            }
          }
        }
#pragma omp simd
        for (int64_t r = 0; r < nrp; ++r) {
          const bool none = mx[r] == neg_inf<T>();  // nothing visible yet
          corr[r] = none ? T(1) : vexp(m[r] - mx[r]);
          sub[r] = none ? T(0) : mx[r];
          l[r] *= corr[r];
          m[r] = mx[r];
        }
        for (int64_t c = 0; c < cols; ++c) {
          for (int64_t r0 = attn_row_start(causal, j0 + c, qpos0, nrp); r0 < nrp; r0 += kAttnAlign) {
            T* sc = st.p + c * C + r0;
#pragma omp simd
            for (int64_t x = 0; x < kAttnAlign; ++x) {
              sc[x] = vexp(sc[x] - sub[r0 + x]);
              l[r0 + x] += sc[x];
            }
          }
        }
        for (int64_t r = 0; r < nrp; ++r) {
          if (corr[r] == T(1)) continue;
          T* a = o.p + r * Dp;
          const T cr = corr[r];
#pragma omp simd
          for (int64_t d = 0; d < Dp; ++d) a[d] *= cr;
        }
        rows_times_keys(o.p, Dp, st.p, C, vr, ldv, cols, causal, j0, qpos0, rows, nrp);  // O += P V
      }
      const int64_t row0 = (b * p.heads + h) * p.tq + i0;
      for (int64_t r = 0; r < rows; ++r) {
        T* a = o.p + r * Dp;
        const T inv = l[r] > 0 ? T(1) / l[r] : T(0);  // fully masked rows give 0
#pragma omp simd
        for (int64_t d = 0; d < D; ++d) a[d] *= inv;
        narrow_n(out + (row0 + r) * D, a, D);
      }
#pragma omp simd
      for (int64_t r = 0; r < rows; ++r) lse[row0 + r] = l[r] > 0 ? m[r] + vlog(l[r]) : -neg_inf<T>();
    }
  }
}

template <class S>
void attn_backward(const AttnArgs& p, const S* q, const S* k, const S* v, const S* out, const S* dout,
                   const ComputeOf<S>* lse, S* dq, S* dk, S* dv) {
  using T = ComputeOf<S>;
  constexpr int64_t W = GemmShape<T>::W;
  const int64_t C = vmin(kAttnRows, (p.tq + kAttnAlign - 1) / kAttnAlign * kAttnAlign);  // as in attn_forward
  const int64_t D = p.dim, Dp = (D + W - 1) / W * W, group = p.heads / p.kv_heads, offset = p.tk - p.tq;
  const int64_t tkp = (p.tk + kAttnKeys - 1) / kAttnKeys * kAttnKeys;  // dK/dV rows, whole tiles
  const T scale = T(p.scale);
  const bool causal = p.causal;
#pragma omp parallel
  {
    auto n = [](int64_t x) { return static_cast<size_t>(x); };
    // the block's Q and dO rows (padded to Dp) and transposed; S^T then P^T, dP^T then dS^T; dQ of
    // the block; the tile's K and V rows (when not read in place); an O row; dK, dV of the task
    Buffer<T> qp(n(C * Dp)), dop(n(C * Dp)), qt(n(D * C)), dot(n(D * C)), st(n(kAttnKeys * C)),
        dpt(n(kAttnKeys * C)), dqb(n(C * Dp)), kb(n(kAttnKeys * Dp)), vb(n(kAttnKeys * Dp)), orow(n(Dp)),
        dks(n(tkp * Dp)), dvs(n(tkp * Dp));
    // lanes past a block's rows are never read into an output (P = dS = 0 there): zeroed once so
    // they hold numbers
    for (int64_t i = 0; i < kAttnKeys * C; ++i) st.p[i] = dpt.p[i] = T(0);
    for (int64_t i = 0; i < D * C; ++i) qt.p[i] = dot.p[i] = T(0);
    T L[kAttnRows], delta[kAttnRows];
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < p.batch * p.kv_heads; ++task) {
      const int64_t b = task / p.kv_heads, hk = task % p.kv_heads, kv_base = (b * p.kv_heads + hk) * p.tk * D;
      const S* kh = k + kv_base;
      const S* vh = v + kv_base;
      for (int64_t i = 0; i < tkp * Dp; ++i) dks.p[i] = dvs.p[i] = T(0);
      for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
        const T slope = p.slopes ? T(p.slopes[h]) : T(0);
        for (int64_t i0 = 0; i0 < p.tq; i0 += C) {
          const int64_t base = (b * p.heads + h) * p.tq + i0, rows = vmin(C, p.tq - i0);
          const int64_t nrp = (rows + kAttnAlign - 1) / kAttnAlign * kAttnAlign, qpos0 = offset + i0;
          load_rows(qp.p, Dp, q + base * D, rows, D, rows);
          load_rows(dop.p, Dp, dout + base * D, rows, D, rows);
          transpose_rows(qt.p, C, qp.p, Dp, rows, D);
          transpose_rows(dot.p, C, dop.p, Dp, rows, D);
          for (int64_t r = 0; r < nrp; ++r) {  // delta_r = dO_r . O_r; padded rows as rows without keys
            L[r] = r < rows ? lse[base + r] : -neg_inf<T>();
            T di = 0;
            if (r < rows) {
              widen_n(orow.p, out + (base + r) * D, D);
              const T* dor = dop.p + r * Dp;
#pragma omp simd reduction(+ : di)
              for (int64_t d = 0; d < D; ++d) di += dor[d] * orow.p[d];
            }
            delta[r] = di;
          }
          for (int64_t i = 0; i < nrp * Dp; ++i) dqb.p[i] = T(0);
          const int64_t last_key = causal ? vmin(p.tk, qpos0 + rows) : p.tk;
          for (int64_t j0 = 0; j0 < last_key; j0 += kAttnKeys) {
            const int64_t cols = vmin(kAttnKeys, p.tk - j0);
            int64_t ldk, ldv;
            const T* kr = tile_rows(kb.p, kh + j0 * D, cols, D, Dp, ldk);
            const T* vr = tile_rows(vb.p, vh + j0 * D, cols, D, Dp, ldv);
            scores_t(st.p, C, kr, ldk, qt.p, cols, D, causal, j0, qpos0, nrp);   // S^T = K Q^T
            scores_t(dpt.p, C, vr, ldv, dot.p, cols, D, causal, j0, qpos0, nrp);  // dP^T = V dO^T
            for (int64_t c = 0; c < cols; ++c) {  // P^T, dS^T; rows without keys (L = inf) give 0
              const int64_t j = j0 + c;
              for (int64_t r0 = attn_row_start(causal, j, qpos0, nrp); r0 < nrp; r0 += kAttnAlign) {
                T* sc = st.p + c * C + r0;
                T* dc = dpt.p + c * C + r0;
                const T* lr = L + r0;
                const T* dr = delta + r0;
                const int rel = int(qpos0 + r0 - j);  // query position - key position, at lane 0
#pragma omp simd
                for (int x = 0; x < int(kAttnAlign); ++x) {
                  const bool seen = (lr[x] < -neg_inf<T>()) & !(causal & (rel + x < 0));
                  const T pr = vexp(sc[x] * scale - slope * T(rel + x) - lr[x]), dpv = dc[x];
                  sc[x] = seen ? pr : T(0);
                  dc[x] = seen ? pr * (dpv - dr[x]) * scale : T(0);
                }
              }
            }
            // dV += P^T dO and dK += dS^T Q, blocks of kAttnIB keys over the rows that see them
            for (int64_t c0 = 0; c0 < cols; c0 += kAttnIB) {
              const int64_t r0 = attn_row_start(causal, j0 + c0, qpos0, nrp);
              if (r0 >= rows) continue;
              attn_rows<kAttnIB>(dvs.p + (j0 + c0) * Dp, Dp, st.p + c0 * C, C, 1, dop.p, Dp, Dp / W, r0, rows, true);
              attn_rows<kAttnIB>(dks.p + (j0 + c0) * Dp, Dp, dpt.p + c0 * C, C, 1, qp.p, Dp, Dp / W, r0, rows, true);
            }
            rows_times_keys(dqb.p, Dp, dpt.p, C, kr, ldk, cols, causal, j0, qpos0, rows, nrp);  // dQ += dS K
          }
          for (int64_t r = 0; r < rows; ++r) narrow_n(dq + (base + r) * D, dqb.p + r * Dp, D);
        }
      }
      for (int64_t j = 0; j < p.tk; ++j) {
        narrow_n(dk + kv_base + j * D, dks.p + j * Dp, D);
        narrow_n(dv + kv_base + j * D, dvs.p + j * Dp, D);
      }
    }
  }
}
