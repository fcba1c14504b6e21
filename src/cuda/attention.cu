// Flash attention on CUDA (SIMT path). Layout: contiguous q [B, H, Tq, D], k/v [B, Hkv, Tk, D];
// query i sits at absolute position Tk - Tq + i. Nothing of size Tq x Tk is stored: the forward
// keeps an online softmax (running max m and sum l) per query row, the backward recomputes the
// probabilities from the saved lse = m + log l.
//
// Thread mapping: 8 consecutive lanes ("a team") own one row (a query row in the forward and
// dQ kernels, a key row in the dK/dV kernel); each lane holds D/8 of that row's dimensions in
// registers, and a dot product is a partial sum plus 3 shuffles inside the team. Keys (or
// queries) stream through shared memory in chunks. Every output element is written by exactly
// one thread, so results are deterministic (no atomics).
//
// Decode (few queries, long cache): the keys of one (batch, head) are split over many blocks and
// teams (flash-decoding); partial (m, l, acc) are merged in a second kernel.
#include <cfloat>
#include <cmath>
#include <cstdlib>

#include "cuda/decode_merge.cuh"
#include "cuda/kernels.cuh"

namespace nx::cuda {
namespace {

constexpr int kTeam = 8;          // lanes per row
constexpr int kRows = 32;         // rows per block (256 threads)
constexpr int kChunk = 32;        // keys/queries staged in shared memory at a time
constexpr int kMaxPer = 256 / kTeam;  // dims per lane for D <= 256
constexpr int kDecodeBlocksPerSm = 32;  // flash-decoding blocks per SM to aim for (decode_splits)
constexpr int kDecodeMinKeys = 512;     // keys per split at least (decode_splits)

// Element to accumulator: f64 stays f64, every other type widens to f32.
template <class T> __device__ __forceinline__ auto to_acc(T x) {
  if constexpr (std::is_same_v<T, double>) return x;
  else if constexpr (std::is_same_v<T, Half>) return __half2float(__ushort_as_half(x.bits));
  else if constexpr (std::is_same_v<T, BFloat16>) return __bfloat162float(__ushort_as_bfloat16(x.bits));
  else return float(x);
}

// Sum over the 8 lanes of a team. The mask names only the team, and every branch in these
// kernels is uniform within a team, so teams of one warp may diverge freely.
template <class A> __device__ __forceinline__ A team_sum(A v) {
  const unsigned mask = 0xffu << ((threadIdx.x & 31u) & ~7u);
  v += __shfl_xor_sync(mask, v, 1);
  v += __shfl_xor_sync(mask, v, 2);
  v += __shfl_xor_sync(mask, v, 4);
  return v;
}

struct Params {
  int64_t batch, heads, kv_heads, tq, tk, dim;
  double scale;  // double, so that the f64 path is exact to 1e-16
  bool causal, alibi;
  double slopes[128];
};

template <class A>
__device__ __forceinline__ A biased_score(const Params& p, A dotv, int h, int64_t qpos, int64_t key) {
  if (p.causal && key > qpos) return A(-INFINITY);
  A s = dotv * A(p.scale);
  if (p.alibi) s -= A(p.slopes[h]) * A(qpos - key);
  return s;
}

// Stages rows [first, first + n) (n <= kChunk) of two row-major [*, p.dim] tensors a and b into
// kChunk rows of shared memory (as, bs) as accumulator type, zeros past row n. The whole block
// takes part; the caller places the barriers around it.
template <class T, class A>
__device__ __forceinline__ void stage_rows(const Params& p, A* as, A* bs, const T* a, const T* b, int64_t first, int n) {
  for (int e = threadIdx.x; e < kChunk * p.dim; e += blockDim.x) {
    const int r = e / int(p.dim);
    as[e] = r < n ? A(to_acc(a[(first + r) * p.dim + e % p.dim])) : A(0);
    bs[e] = r < n ? A(to_acc(b[(first + r) * p.dim + e % p.dim])) : A(0);
  }
}

template <class T, class A, int PER>
__global__ void fwd_kernel(Params p, const T* q, const T* k, const T* v, T* out, A* lse) {
  extern __shared__ unsigned char smem_raw[];
  A* ks = reinterpret_cast<A*>(smem_raw);
  A* vs = ks + kChunk * p.dim;
  const int team = threadIdx.x / kTeam, lane = threadIdx.x % kTeam;
  const int64_t nqb = (p.tq + kRows - 1) / kRows;
  const int64_t qb = blockIdx.x % nqb, bh = blockIdx.x / nqb;
  const int h = int(bh % p.heads), b = int(bh / p.heads), hk = h / int(p.heads / p.kv_heads);
  const int64_t row = qb * kRows + team, offset = p.tk - p.tq, qpos = offset + row;
  const bool active = row < p.tq;
  const T* qr = q + ((int64_t(b) * p.heads + h) * p.tq + (active ? row : 0)) * p.dim;
  const T* kh = k + (int64_t(b) * p.kv_heads + hk) * p.tk * p.dim;
  const T* vh = v + (int64_t(b) * p.kv_heads + hk) * p.tk * p.dim;
  A qv[PER], acc[PER];
#pragma unroll
  for (int t = 0; t < PER; ++t) {
    const int d = lane + t * kTeam;
    qv[t] = d < p.dim ? A(to_acc(qr[d])) : A(0);
    acc[t] = A(0);
  }
  A m = A(-INFINITY), l = A(0);
  const int64_t block_last = p.causal ? min(p.tk, offset + min(p.tq, (qb + 1) * kRows)) : p.tk;
  for (int64_t j0 = 0; j0 < block_last; j0 += kChunk) {
    const int cols = int(min(int64_t(kChunk), p.tk - j0));
    __syncthreads();
    stage_rows(p, ks, vs, kh, vh, j0, cols);
    __syncthreads();
    for (int c = 0; c < cols; ++c) {
      A part = 0;
#pragma unroll
      for (int t = 0; t < PER; ++t) {
        const int d = lane + t * kTeam;
        if (d < p.dim) part += qv[t] * ks[c * p.dim + d];
      }
      const A s = biased_score(p, team_sum(part), h, qpos, j0 + c);
      if (s == A(-INFINITY)) continue;
      const A mn = s > m ? s : m;
      const A corr = exp(m - mn), pr = exp(s - mn);
      l = l * corr + pr;
      m = mn;
#pragma unroll
      for (int t = 0; t < PER; ++t) {
        const int d = lane + t * kTeam;
        acc[t] = acc[t] * corr + pr * (d < p.dim ? vs[c * p.dim + d] : A(0));
      }
    }
  }
  if (!active) return;
  T* orow = out + ((int64_t(b) * p.heads + h) * p.tq + row) * p.dim;
  const A inv = l > A(0) ? A(1) / l : A(0);
#pragma unroll
  for (int t = 0; t < PER; ++t) {
    const int d = lane + t * kTeam;
    if (d < p.dim) store_f64(orow + d, double(acc[t] * inv));
  }
  if (lane == 0) lse[(int64_t(b) * p.heads + h) * p.tq + row] = l > A(0) ? m + log(l) : A(INFINITY);
}

// ---------------------------------------------------------------- decode (split keys)
// Block = (b, h, split); its 32 teams take keys split_start + team, + 32, ...; each team keeps its
// own online softmax for every query (tq <= 4), then the block merges its teams and writes one
// partial (m, l, acc) per query.
// VEC: 16-bit types with head_dim a multiple of 64: lane owns whole 16-byte chunks (dims
// (lane + 8u) * 8 .. +7), so a team reads each cache row with coalesced 16-byte loads.
template <bool VEC>
__device__ __forceinline__ int dim_of(int lane, int t) {
  return VEC ? ((lane + kTeam * (t / 8)) * 8 + t % 8) : (lane + t * kTeam);
}

template <class T, class A, int PER, bool VEC>
__device__ __forceinline__ void load_row(const T* row, int lane, int64_t dim, A (&dst)[PER]) {
  if constexpr (VEC) {
#pragma unroll
    for (int u = 0; u < PER / 8; ++u) {
      const uint4 raw = *reinterpret_cast<const uint4*>(row + (lane + kTeam * u) * 8);
      const uint16_t* e = reinterpret_cast<const uint16_t*>(&raw);
#pragma unroll
      for (int j = 0; j < 8; ++j) dst[u * 8 + j] = A(to_acc(T{e[j]}));
    }
  } else {
#pragma unroll
    for (int t = 0; t < PER; ++t) {
      const int d = lane + t * kTeam;
      dst[t] = d < dim ? A(to_acc(row[d])) : A(0);
    }
  }
}

template <class T, class A, int PER, int MAXQ, bool VEC>
__global__ void decode_kernel(Params p, const T* q, const T* k, const T* v, A* part_acc, A* part_ml, int splits) {
  const int team = threadIdx.x / kTeam, lane = threadIdx.x % kTeam;
  const int split = blockIdx.x % splits;
  const int64_t bh = blockIdx.x / splits;
  const int h = int(bh % p.heads), b = int(bh / p.heads), hk = h / int(p.heads / p.kv_heads);
  const int64_t per_split = (p.tk + splits - 1) / splits, j_begin = split * per_split,
                j_end = min(p.tk, j_begin + per_split), offset = p.tk - p.tq;
  const T* kh = k + (int64_t(b) * p.kv_heads + hk) * p.tk * p.dim;
  const T* vh = v + (int64_t(b) * p.kv_heads + hk) * p.tk * p.dim;
  A qv[MAXQ][PER], acc[MAXQ][PER], m[MAXQ], l[MAXQ];
  for (int i = 0; i < MAXQ; ++i) {
    m[i] = A(-INFINITY);
    l[i] = A(0);
    const T* qr = q + ((int64_t(b) * p.heads + h) * p.tq + min(int64_t(i), p.tq - 1)) * p.dim;
    load_row<T, A, PER, VEC>(qr, lane, p.dim, qv[i]);
#pragma unroll
    for (int t = 0; t < PER; ++t) acc[i][t] = A(0);
  }
  for (int64_t j = j_begin + team; j < j_end; j += kRows) {
    A kv[PER], vv[PER];
    load_row<T, A, PER, VEC>(kh + j * p.dim, lane, p.dim, kv);
    load_row<T, A, PER, VEC>(vh + j * p.dim, lane, p.dim, vv);
    for (int i = 0; i < MAXQ && i < p.tq; ++i) {
      A part = 0;
#pragma unroll
      for (int t = 0; t < PER; ++t) part += qv[i][t] * kv[t];
      const A s = biased_score(p, team_sum(part), h, offset + i, j);
      if (s == A(-INFINITY)) continue;
      const A mn = s > m[i] ? s : m[i];
      const A corr = exp(m[i] - mn), pr = exp(s - mn);
      l[i] = l[i] * corr + pr;
      m[i] = mn;
#pragma unroll
      for (int t = 0; t < PER; ++t) acc[i][t] = acc[i][t] * corr + pr * vv[t];
    }
  }
  // merge the 32 teams through shared memory, one query at a time
  __shared__ A sm[kRows], sl[kRows];
  extern __shared__ unsigned char smem_raw[];
  A* sacc = reinterpret_cast<A*>(smem_raw);  // [kRows][dim]
  for (int i = 0; i < MAXQ && i < p.tq; ++i) {
    __syncthreads();
    if (lane == 0) { sm[team] = m[i]; sl[team] = l[i]; }
#pragma unroll
    for (int t = 0; t < PER; ++t) {
      const int d = dim_of<VEC>(lane, t);
      if (d < p.dim) sacc[team * p.dim + d] = acc[i][t];
    }
    __syncthreads();
    A M = A(-INFINITY);
    for (int w = 0; w < kRows; ++w) M = sm[w] > M ? sm[w] : M;
    const int64_t slot = (bh * p.tq + i) * splits + split;
    for (int d = threadIdx.x; d < p.dim; d += blockDim.x) {
      A a = 0;
      for (int w = 0; w < kRows; ++w)
        if (sm[w] != A(-INFINITY)) a += sacc[w * p.dim + d] * exp(sm[w] - M);
      part_acc[slot * p.dim + d] = a;
    }
    if (threadIdx.x == 0) {
      A L = 0;
      for (int w = 0; w < kRows; ++w)
        if (sm[w] != A(-INFINITY)) L += sl[w] * exp(sm[w] - M);
      part_ml[slot * 2] = M;
      part_ml[slot * 2 + 1] = L;
    }
  }
}

// Flash-decoding for bf16/f16 caches: a block of WARPS warps takes one split of the keys of one
// (batch, head). A key row is D/8 lanes of 16-byte loads (a warp covers 32/(D/8) rows at once) and
// every lane keeps U rows of K and of V in flight before using any, so the loop streams the cache
// at memory speed. Scores are in log2 units (q pre-scaled by scale * log2 e); each step folds U
// keys into the running (max, sum, acc) with one rescale. Partials go to decode_combine.
// MINB: blocks per SM the registers must allow (one query: 4, as the compiler chose without a bound;
// 5 spilled and ran 30% slower on the H200, session 14; 2 for the one-split kernel of 8 warps).
// ONE_SPLIT: the block is its pair's only split and writes the output and lse itself (OneSplitRows,
// what decode_combine would write); otherwise its partial goes to part_acc / part_ml.
template <class T>
struct OneSplitRows {
  T* out;
  float* lse;
  int dim;
  __device__ void value(int64_t r, int d, float sum, float L) const {
    store_f64(out + r * dim + d, L > 0.f ? double(sum / L) : 0.0);
  }
  __device__ void stats(int64_t r, float M, float L) const {
    lse[r] = L > 0.f ? M / kLog2e + logf(L) : INFINITY;  // M in log2 units
  }
};
template <class T, int D, int NQ, int U, int MINB, bool ONE_SPLIT, int WARPS = 4, bool PIPE = false>
__global__ void __launch_bounds__(32 * WARPS, MINB) decode_half_kernel(Params p, const T* __restrict__ q, const T* __restrict__ k,
                                                          const T* __restrict__ v, float* __restrict__ part_acc,
                                                          float* __restrict__ part_ml, int splits, T* __restrict__ out,
                                                          float* __restrict__ lse) {
  constexpr int LPR = D / 8, RPW = 32 / LPR, ROWS = WARPS * RPW;  // lanes per row, rows per warp, per block
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, sub = lane / LPR, li = lane % LPR;
  const int split = blockIdx.x % splits;
  const int64_t bh = blockIdx.x / splits;
  const int h = int(bh % p.heads), b = int(bh / p.heads), hk = h / int(p.heads / p.kv_heads);
  const int64_t per_split = (p.tk + splits - 1) / splits, j_begin = split * per_split,
                j_end = min(p.tk, j_begin + per_split), offset = p.tk - p.tq;
  const T* kh = k + (int64_t(b) * p.kv_heads + hk) * p.tk * D + li * 8;
  const T* vh = v + (int64_t(b) * p.kv_heads + hk) * p.tk * D + li * 8;
  const float slope2 = p.alibi ? float(p.slopes[h]) * kLog2e : 0.f;
  const unsigned group_mask = (LPR == 32 ? 0xffffffffu : ((1u << LPR) - 1u) << (sub * LPR));
  auto widen = [](const uint4& raw, float (&f)[8]) {
    const uint16_t* e = reinterpret_cast<const uint16_t*>(&raw);
#pragma unroll
    for (int x = 0; x < 8; ++x) f[x] = to_acc(T{e[x]});
  };
  float qf[NQ][8], acc[NQ][8], m[NQ], l[NQ];
#pragma unroll
  for (int i = 0; i < NQ; ++i) {
    const int64_t qi = min(int64_t(i), p.tq - 1);
    widen(*reinterpret_cast<const uint4*>(q + ((int64_t(b) * p.heads + h) * p.tq + qi) * D + li * 8), qf[i]);
#pragma unroll
    for (int x = 0; x < 8; ++x) {
      qf[i][x] *= float(p.scale) * kLog2e;
      acc[i][x] = 0.f;
    }
    m[i] = -INFINITY;
    l[i] = 0.f;
  }
  auto load = [&](uint4 (&kr)[U], uint4 (&vr)[U], int64_t j0) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t j = j0 + int64_t(u) * ROWS;
      const bool ok = j < j_end;
      kr[u] = ok ? __ldcs(reinterpret_cast<const uint4*>(kh + j * D)) : make_uint4(0, 0, 0, 0);
      vr[u] = ok ? __ldcs(reinterpret_cast<const uint4*>(vh + j * D)) : make_uint4(0, 0, 0, 0);
    }
  };
  // PIPE: the next step's rows are requested before this step's are used (two register sets)
  [[maybe_unused]] uint4 kn[U], vn[U];
  if constexpr (PIPE) load(kn, vn, j_begin + warp * RPW + sub);
  for (int64_t j0 = j_begin + warp * RPW + sub; j0 < j_end; j0 += int64_t(ROWS) * U) {
    uint4 kr[U], vr[U];
    if constexpr (PIPE) {
#pragma unroll
      for (int u = 0; u < U; ++u) kr[u] = kn[u], vr[u] = vn[u];
      load(kn, vn, j0 + int64_t(ROWS) * U);
    } else {
      load(kr, vr, j0);
    }
#pragma unroll
    for (int i = 0; i < NQ; ++i) {
      if (i >= p.tq) break;
      const int64_t qpos = offset + i;
      float s[U], mx = m[i];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        float kf[8];
        widen(kr[u], kf);
        float dot = 0.f;
#pragma unroll
        for (int x = 0; x < 8; ++x) dot = fmaf(qf[i][x], kf[x], dot);
#pragma unroll
        for (int o = LPR / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(group_mask, dot, o);
        const int64_t j = j0 + int64_t(u) * ROWS;
        if (p.alibi) dot -= slope2 * float(qpos - j);
        s[u] = (j >= j_end || (p.causal && j > qpos)) ? -INFINITY : dot;
        mx = fmaxf(mx, s[u]);
      }
      if (!rescale_running(m[i], l[i], acc[i], mx)) continue;  // nothing visible yet (uniform in the row's lanes)
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const float w = exp2f(s[u] - mx);
        float vf[8];
        widen(vr[u], vf);
        l[i] += w;
#pragma unroll
        for (int x = 0; x < 8; ++x) acc[i][x] = fmaf(w, vf[x], acc[i][x]);
      }
    }
  }
  // merge the ROWS row groups of the block into one result per query
  const int grp = warp * RPW + sub, nq = int(min(int64_t(NQ), p.tq));
  if constexpr (ONE_SPLIT)
    merge_row_groups<NQ, ROWS, D, 8>(m, l, acc, grp, li, nq, bh * p.tq, OneSplitRows<T>{out, lse, D});
  else  // natural units for decode_combine
    merge_row_groups<NQ, ROWS, D, 8>(m, l, acc, grp, li, nq, bh * p.tq,
                                     SplitSlots{part_acc, part_ml, splits, split, D, kLog2e});
}

template <class T, class A>
__global__ void decode_combine(Params p, const A* part_acc, const A* part_ml, int splits, T* out, A* lse) {
  const int64_t row = blockIdx.x;  // (b, h, i)
  A M = A(-INFINITY);
  for (int s = 0; s < splits; ++s) M = part_ml[(row * splits + s) * 2] > M ? part_ml[(row * splits + s) * 2] : M;
  A L = 0;
  for (int s = 0; s < splits; ++s) {
    const A ms = part_ml[(row * splits + s) * 2];
    if (ms != A(-INFINITY)) L += part_ml[(row * splits + s) * 2 + 1] * exp(ms - M);
  }
  for (int d = threadIdx.x; d < p.dim; d += blockDim.x) {
    A a = 0;
    for (int s = 0; s < splits; ++s) {
      const A ms = part_ml[(row * splits + s) * 2];
      if (ms != A(-INFINITY)) a += part_acc[(row * splits + s) * p.dim + d] * exp(ms - M);
    }
    store_f64(out + row * p.dim + d, L > A(0) ? double(a / L) : 0.0);
  }
  if (threadIdx.x == 0) lse[row] = L > A(0) ? M + log(L) : A(INFINITY);
}

// ---------------------------------------------------------------- backward
// delta_i = dot(dO_i, O_i)
template <class T, class A>
__global__ void delta_kernel(const T* out, const T* dout, A* delta, int64_t rows, int64_t dim) {
  const int team = threadIdx.x / kTeam, lane = threadIdx.x % kTeam;
  const int64_t r = int64_t(blockIdx.x) * kRows + team;
  A part = 0;
  if (r < rows)
    for (int64_t d = lane; d < dim; d += kTeam) part += A(to_acc(out[r * dim + d])) * A(to_acc(dout[r * dim + d]));
  part = team_sum(part);
  if (r < rows && lane == 0) delta[r] = part;
}

// Block = (b, hk, 32-key chunk); a team owns one key row of dK and dV; all query rows of the
// heads sharing hk stream through shared memory.
template <class T, class A, int PER>
__global__ void dkdv_kernel(Params p, const T* q, const T* k, const T* v, const T* dout, const A* lse,
                            const A* delta, T* dk, T* dv) {
  extern __shared__ unsigned char smem_raw[];
  A* qs = reinterpret_cast<A*>(smem_raw);
  A* ds = qs + kChunk * p.dim;
  __shared__ A ls[kChunk], dl[kChunk];
  const int team = threadIdx.x / kTeam, lane = threadIdx.x % kTeam;
  const int64_t nkb = (p.tk + kRows - 1) / kRows;
  const int64_t kb = blockIdx.x % nkb, bhk = blockIdx.x / nkb;
  const int hk = int(bhk % p.kv_heads), b = int(bhk / p.kv_heads), group = int(p.heads / p.kv_heads);
  const int64_t key = kb * kRows + team, offset = p.tk - p.tq;
  const bool active = key < p.tk;
  const int64_t kbase = ((int64_t(b) * p.kv_heads + hk) * p.tk + (active ? key : 0)) * p.dim;
  A kv[PER], vv[PER], dka[PER], dva[PER];
#pragma unroll
  for (int t = 0; t < PER; ++t) {
    const int d = lane + t * kTeam;
    kv[t] = d < p.dim ? A(to_acc(k[kbase + d])) : A(0);
    vv[t] = d < p.dim ? A(to_acc(v[kbase + d])) : A(0);
    dka[t] = dva[t] = A(0);
  }
  const int64_t first_query = p.causal ? max(int64_t(0), kb * kRows - offset) : 0;
  for (int g = 0; g < group; ++g) {
    const int h = hk * group + g;
    const int64_t qbase = (int64_t(b) * p.heads + h) * p.tq;
    for (int64_t i0 = first_query; i0 < p.tq; i0 += kChunk) {
      const int rows = int(min(int64_t(kChunk), p.tq - i0));
      __syncthreads();
      stage_rows(p, qs, ds, q, dout, qbase + i0, rows);
      if (threadIdx.x < kChunk) {
        ls[threadIdx.x] = threadIdx.x < rows ? lse[qbase + i0 + threadIdx.x] : A(INFINITY);
        dl[threadIdx.x] = threadIdx.x < rows ? delta[qbase + i0 + threadIdx.x] : A(0);
      }
      __syncthreads();
      if (!active) continue;
      for (int r = 0; r < rows; ++r) {
        if (ls[r] == A(INFINITY)) continue;
        A s_part = 0, dp_part = 0;
#pragma unroll
        for (int t = 0; t < PER; ++t) {
          const int d = lane + t * kTeam;
          if (d < p.dim) {
            s_part += qs[r * p.dim + d] * kv[t];
            dp_part += ds[r * p.dim + d] * vv[t];
          }
        }
        const A s = biased_score(p, team_sum(s_part), h, offset + i0 + r, key);
        if (s == A(-INFINITY)) continue;
        const A pr = exp(s - ls[r]);
        const A dsv = pr * (team_sum(dp_part) - dl[r]) * A(p.scale);
#pragma unroll
        for (int t = 0; t < PER; ++t) {
          const int d = lane + t * kTeam;
          if (d < p.dim) {
            dva[t] += pr * ds[r * p.dim + d];
            dka[t] += dsv * qs[r * p.dim + d];
          }
        }
      }
    }
  }
  if (!active) return;
#pragma unroll
  for (int t = 0; t < PER; ++t) {
    const int d = lane + t * kTeam;
    if (d < p.dim) {
      store_f64(dk + kbase + d, double(dka[t]));
      store_f64(dv + kbase + d, double(dva[t]));
    }
  }
}

// Block = (b, h, 32-query chunk); a team owns one query row of dQ; keys stream through smem.
template <class T, class A, int PER>
__global__ void dq_kernel(Params p, const T* q, const T* k, const T* v, const T* dout, const A* lse,
                          const A* delta, T* dq) {
  extern __shared__ unsigned char smem_raw[];
  A* ks = reinterpret_cast<A*>(smem_raw);
  A* vs = ks + kChunk * p.dim;
  const int team = threadIdx.x / kTeam, lane = threadIdx.x % kTeam;
  const int64_t nqb = (p.tq + kRows - 1) / kRows;
  const int64_t qb = blockIdx.x % nqb, bh = blockIdx.x / nqb;
  const int h = int(bh % p.heads), b = int(bh / p.heads), hk = h / int(p.heads / p.kv_heads);
  const int64_t row = qb * kRows + team, offset = p.tk - p.tq, qpos = offset + row;
  const bool active = row < p.tq;
  const int64_t qbase = ((int64_t(b) * p.heads + h) * p.tq + (active ? row : 0));
  const T* kh = k + (int64_t(b) * p.kv_heads + hk) * p.tk * p.dim;
  const T* vh = v + (int64_t(b) * p.kv_heads + hk) * p.tk * p.dim;
  A qv[PER], dov[PER], dqa[PER];
#pragma unroll
  for (int t = 0; t < PER; ++t) {
    const int d = lane + t * kTeam;
    qv[t] = d < p.dim ? A(to_acc(q[qbase * p.dim + d])) : A(0);
    dov[t] = d < p.dim ? A(to_acc(dout[qbase * p.dim + d])) : A(0);
    dqa[t] = A(0);
  }
  const A L = lse[qbase], dl = delta[qbase];
  const int64_t block_last = p.causal ? min(p.tk, offset + min(p.tq, (qb + 1) * kRows)) : p.tk;
  for (int64_t j0 = 0; j0 < block_last; j0 += kChunk) {
    const int cols = int(min(int64_t(kChunk), p.tk - j0));
    __syncthreads();
    stage_rows(p, ks, vs, kh, vh, j0, cols);
    __syncthreads();
    if (!active || L == A(INFINITY)) continue;
    for (int c = 0; c < cols; ++c) {
      A s_part = 0, dp_part = 0;
#pragma unroll
      for (int t = 0; t < PER; ++t) {
        const int d = lane + t * kTeam;
        if (d < p.dim) {
          s_part += qv[t] * ks[c * p.dim + d];
          dp_part += dov[t] * vs[c * p.dim + d];
        }
      }
      const A s = biased_score(p, team_sum(s_part), h, qpos, j0 + c);
      const A dpv = team_sum(dp_part);
      if (s == A(-INFINITY)) continue;
      const A dsv = exp(s - L) * (dpv - dl) * A(p.scale);
#pragma unroll
      for (int t = 0; t < PER; ++t) {
        const int d = lane + t * kTeam;
        if (d < p.dim) dqa[t] += dsv * ks[c * p.dim + d];
      }
    }
  }
  if (!active) return;
#pragma unroll
  for (int t = 0; t < PER; ++t) {
    const int d = lane + t * kTeam;
    if (d < p.dim) store_f64(dq + qbase * p.dim + d, double(dqa[t]));
  }
}

Params make_params(const AttentionParams& a) {
  if (a.heads > 128 && !a.alibi_slopes.empty())
    fail(NX_ERR_NOT_IMPLEMENTED, current_api(), ": ALiBi on CUDA supports up to 128 heads, got ", a.heads);
  Params p{};
  p.batch = a.batch; p.heads = a.heads; p.kv_heads = a.kv_heads; p.tq = a.tq; p.tk = a.tk; p.dim = a.dim;
  p.scale = a.scale;
  p.causal = a.causal;
  p.alibi = !a.alibi_slopes.empty();
  for (size_t i = 0; i < a.alibi_slopes.size() && i < 128; ++i) p.slopes[i] = a.alibi_slopes[i];
  return p;
}

// Calls f(std::integral_constant<int, PER>) with PER = ceil(dim / 8) rounded up to 4, 8, 16, 32.
template <class F>
void dispatch_per(int64_t dim, F&& f) {
  const int64_t per = (dim + kTeam - 1) / kTeam;
  if (per <= 4) f(std::integral_constant<int, 4>{});
  else if (per <= 8) f(std::integral_constant<int, 8>{});
  else if (per <= 16) f(std::integral_constant<int, 16>{});
  else f(std::integral_constant<int, kMaxPer>{});
}

template <class F>
void dispatch_attn_dtype(DType d, F&& f) {
  switch (d) {
    case DType::F32: f(float{}, float{}); break;
    case DType::F64: f(double{}, double{}); break;
    case DType::F16: f(Half{}, float{}); break;
    case DType::BF16: f(BFloat16{}, float{}); break;
    default: fail(NX_ERR_DTYPE, current_api(), ": attention needs a floating dtype");
  }
}

// Always raise the dynamic limit: dynamic plus a kernel's static shared memory (the dK/dV kernel's
// lse/delta staging) may pass the 48 KiB default even when the dynamic part alone does not.
template <class K>
void set_smem(K kernel, size_t bytes) {
  NX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

// Key splits of the bf16/f16 flash-decoding kernel for bh (batch, head) pairs: blocks of equal
// work, so the last wave of blocks decides how much of the GPU idles at the end. One split when
// the pairs alone give nearly every SM two blocks: then no merge kernel runs (it cost 5-6.5 us of
// ~244 at batch 8 x 32 heads, 8k cache, where cuDNN's decode is one kernel of one block per pair:
// docs/benchmarks.md, session 22). Otherwise enough splits for about 32 blocks per SM, each split
// at least 512 keys: on the H200 16 splits ran 2-4% faster than 9, 24, 32, 48 or 64 (session 12).
// NEXUS_DECODE_SPLITS=n forces n (a tuning knob for benchmarks and tests).
int decode_splits(int64_t bh, int64_t tk) {
  const int64_t most = std::max<int64_t>(1, (tk + kDecodeMinKeys - 1) / kDecodeMinKeys);
  if (const char* forced = std::getenv("NEXUS_DECODE_SPLITS"); forced && std::atoi(forced) > 0)
    return int(std::min<int64_t>(std::atoi(forced), std::max<int64_t>(1, tk)));
  if (decode_pairs_fill_gpu(bh, sm_count())) return 1;
  const int64_t want = (int64_t(kDecodeBlocksPerSm) * sm_count() + bh - 1) / bh;
  return int(std::max<int64_t>(1, std::min(want, most)));
}

// The bf16/f16 flash-decoding path for head_dim 64, 128 or 256 (16-byte aligned rows).
template <class T>
bool decode_half_typed(const ExecContext& ctx, const Params& p, const View& q, const View& k, const View& v,
                       const View& out, const View& lse) {
  if (p.dim != 64 && p.dim != 128 && p.dim != 256) return false;
  for (const View* x : {&q, &k, &v})
    if (reinterpret_cast<uintptr_t>(x->data) & 15) return false;
  const int splits = decode_splits(p.batch * p.heads, p.tk);
  const bool direct = splits == 1;  // the kernel writes the output: no scratch, no merge kernel
  Scratch part_acc(ctx, direct ? 0 : size_t(p.batch * p.heads * p.tq * splits * p.dim) * sizeof(float));
  Scratch part_ml(ctx, direct ? 0 : size_t(p.batch * p.heads * p.tq * splits * 2) * sizeof(float));
  auto go = [&](auto d_tag, auto nq_tag) {
    constexpr int D = decltype(d_tag)::value, NQ = decltype(nq_tag)::value, MINB = NQ == 1 ? 4 : NQ == 2 ? 2 : 1;
    auto launch = [&](auto kernel, int warps = 4) {
      kernel<<<unsigned(p.batch * p.heads * splits), 32 * warps, 0, stream_of(ctx)>>>(
          p, static_cast<const T*>(q.data), static_cast<const T*>(k.data), static_cast<const T*>(v.data),
          static_cast<float*>(part_acc.ptr), static_cast<float*>(part_ml.ptr), splits, static_cast<T*>(out.data),
          static_cast<float*>(lse.data));
    };
    // one split of one query: 8 warps at 2 blocks per SM (those blocks are all there is), as many
    // warps per SM as the split kernel's 4 blocks (0.8% faster than 4 warps, session 23); 4 rows a
    // step per lane with the next step's 4 requested before this step's are used (PIPE): 0.6-1%
    // faster than 8 rows loaded then used (docs/benchmarks.md, session 24)
    if (!direct) launch(decode_half_kernel<T, D, NQ, 8, MINB, false>);
    else if constexpr (NQ == 1) {
      constexpr int kOneSplitWarps = 8;
      launch(decode_half_kernel<T, D, NQ, 4, 2, true, kOneSplitWarps, true>, kOneSplitWarps);
    }
    else launch(decode_half_kernel<T, D, NQ, 8, MINB, true>);
  };
  auto by_nq = [&](auto d_tag) {
    if (p.tq == 1) go(d_tag, std::integral_constant<int, 1>{});
    else if (p.tq == 2) go(d_tag, std::integral_constant<int, 2>{});
    else go(d_tag, std::integral_constant<int, 4>{});
  };
  if (p.dim == 64) by_nq(std::integral_constant<int, 64>{});
  else if (p.dim == 128) by_nq(std::integral_constant<int, 128>{});
  else by_nq(std::integral_constant<int, 256>{});
  NX_CUDA_LAUNCH_CHECK();
  if (direct) return true;
  decode_combine<T, float><<<unsigned(p.batch * p.heads * p.tq), 128, 0, stream_of(ctx)>>>(p, static_cast<const float*>(part_acc.ptr),
      static_cast<const float*>(part_ml.ptr), splits, static_cast<T*>(out.data), static_cast<float*>(lse.data));
  NX_CUDA_LAUNCH_CHECK();
  return true;
}
}  // namespace

bool attention_tensor_core(const ExecContext& ctx, const AttentionParams& a, const View& q, const View& k,
                           const View& v, const View& out, const View& lse);
bool attention_backward_tensor_core(const ExecContext& ctx, const AttentionParams& a, const View& q, const View& k,
                                    const View& v, const View& dout, const float* lse, const float* delta,
                                    const View& dq, const View& dk, const View& dv);
// f32 on TF32 tensor cores when TF32 is enabled (flash_tf32.cu); false where it does not apply.
bool attention_tf32(const ExecContext& ctx, const AttentionParams& a, const View& q, const View& k, const View& v,
                    const View& out, const View& lse);
bool attention_backward_tf32(const ExecContext& ctx, const AttentionParams& a, const View& q, const View& k,
                             const View& v, const View& dout, const float* lse, const float* delta, const View& dq,
                             const View& dk, const View& dv);

void launch_attention_forward(const ExecContext& ctx, const AttentionParams& a, const View& q, const View& k,
                              const View& v, const View& out, const View& lse) {
  if (attention_tensor_core(ctx, a, q, k, v, out, lse)) return;
  if (attention_tf32(ctx, a, q, k, v, out, lse)) return;
  Params p = make_params(a);
  const int64_t bh_blocks = p.batch * p.heads * ((p.tq + kRows - 1) / kRows);
  dispatch_attn_dtype(q.dtype, [&](auto ttag, auto atag) {
    using T = decltype(ttag);
    using A = decltype(atag);
    dispatch_per(p.dim, [&](auto per_tag) {
      constexpr int PER = decltype(per_tag)::value;
      if constexpr (sizeof(T) == 2) {  // flash-decoding of half caches, whatever the batch
        if (p.tq <= 4 && p.tk >= 256 && decode_half_typed<T>(ctx, p, q, k, v, out, lse)) return;
      }
      if (p.tq <= 4 && bh_blocks < 2 * sm_count() && p.tk >= 256) {
        // flash-decoding: enough splits to give every SM several blocks
        const int splits = int(std::min<int64_t>((p.tk + 255) / 256, std::max<int64_t>(1, 4 * sm_count() / (p.batch * p.heads))));
        Scratch part_acc(ctx, size_t(p.batch * p.heads * p.tq * splits * p.dim) * sizeof(A));
        Scratch part_ml(ctx, size_t(p.batch * p.heads * p.tq * splits * 2) * sizeof(A));
        const size_t smem = size_t(kRows * p.dim) * sizeof(A);
        constexpr bool kVecType = sizeof(T) == 2;
        auto kernel = (kVecType && p.dim == PER * kTeam && PER % 8 == 0) ? decode_kernel<T, A, PER, 4, kVecType> : decode_kernel<T, A, PER, 4, false>;
        set_smem(kernel, smem);
        kernel<<<unsigned(p.batch * p.heads * splits), kRows * kTeam, smem, stream_of(ctx)>>>(p, static_cast<const T*>(q.data),
            static_cast<const T*>(k.data), static_cast<const T*>(v.data), static_cast<A*>(part_acc.ptr),
            static_cast<A*>(part_ml.ptr), splits);
        NX_CUDA_LAUNCH_CHECK();
        decode_combine<T, A><<<unsigned(p.batch * p.heads * p.tq), 128, 0, stream_of(ctx)>>>(p, static_cast<const A*>(part_acc.ptr),
            static_cast<const A*>(part_ml.ptr), splits, static_cast<T*>(out.data), static_cast<A*>(lse.data));
        NX_CUDA_LAUNCH_CHECK();
        return;
      }
      const size_t smem = size_t(2 * kChunk * p.dim) * sizeof(A);
      auto kernel = fwd_kernel<T, A, PER>;
      set_smem(kernel, smem);
      kernel<<<unsigned(bh_blocks), kRows * kTeam, smem, stream_of(ctx)>>>(p, static_cast<const T*>(q.data),
          static_cast<const T*>(k.data), static_cast<const T*>(v.data), static_cast<T*>(out.data), static_cast<A*>(lse.data));
      NX_CUDA_LAUNCH_CHECK();
    });
  });
}

void launch_attention_backward(const ExecContext& ctx, const AttentionParams& a, const View& q, const View& k,
                               const View& v, const View& out, const View& dout, const View& lse, const View& dq,
                               const View& dk, const View& dv) {
  Params p = make_params(a);
  const int64_t rows = p.batch * p.heads * p.tq;
  dispatch_attn_dtype(q.dtype, [&](auto ttag, auto atag) {
    using T = decltype(ttag);
    using A = decltype(atag);
    Scratch delta(ctx, size_t(rows) * sizeof(A));
    delta_kernel<T, A><<<unsigned((rows + kRows - 1) / kRows), kRows * kTeam, 0, stream_of(ctx)>>>(
        static_cast<const T*>(out.data), static_cast<const T*>(dout.data), static_cast<A*>(delta.ptr), rows, p.dim);
    NX_CUDA_LAUNCH_CHECK();
    if constexpr (std::is_same_v<A, float>) {
      if (attention_backward_tensor_core(ctx, a, q, k, v, dout, static_cast<const float*>(lse.data),
                                         static_cast<const float*>(delta.ptr), dq, dk, dv))
        return;
      if (attention_backward_tf32(ctx, a, q, k, v, dout, static_cast<const float*>(lse.data),
                                  static_cast<const float*>(delta.ptr), dq, dk, dv))
        return;
    }
    dispatch_per(p.dim, [&](auto per_tag) {
      constexpr int PER = decltype(per_tag)::value;
      const size_t smem = size_t(2 * kChunk * p.dim) * sizeof(A);
      auto k1 = dkdv_kernel<T, A, PER>;
      set_smem(k1, smem);
      k1<<<unsigned(p.batch * p.kv_heads * ((p.tk + kRows - 1) / kRows)), kRows * kTeam, smem, stream_of(ctx)>>>(
          p, static_cast<const T*>(q.data), static_cast<const T*>(k.data), static_cast<const T*>(v.data),
          static_cast<const T*>(dout.data), static_cast<const A*>(lse.data), static_cast<const A*>(delta.ptr),
          static_cast<T*>(dk.data), static_cast<T*>(dv.data));
      NX_CUDA_LAUNCH_CHECK();
      auto k2 = dq_kernel<T, A, PER>;
      set_smem(k2, smem);
      k2<<<unsigned(p.batch * p.heads * ((p.tq + kRows - 1) / kRows)), kRows * kTeam, smem, stream_of(ctx)>>>(
          p, static_cast<const T*>(q.data), static_cast<const T*>(k.data), static_cast<const T*>(v.data),
          static_cast<const T*>(dout.data), static_cast<const A*>(lse.data), static_cast<const A*>(delta.ptr),
          static_cast<T*>(dq.data));
      NX_CUDA_LAUNCH_CHECK();
    });
  });
}

}  // namespace nx::cuda
