// TF32 tensor-core flash attention for f32 inputs when TF32 is enabled (nx_cuda_set_tf32), head_dim
// 64 or 128: FlashAttention-2 on mma.sync m16n8k8 .tf32 with f32 accumulators. Same semantics as
// the bf16/f16 kernels of flash_tc.cu (causal mask aligned to the end, ALiBi, grouped-query heads,
// log-sum-exp in natural log, +inf for a row without keys); only the products are rounded.
//
// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k8", .tf32), g = lane / 4, t = lane % 4:
//   A 16x8 (row):  a0 = A[g][t], a1 = A[g+8][t], a2 = A[g][t+4], a3 = A[g+8][t+4]
//   B 8x8 (col):   b0 = B[t][g], b1 = B[t+4][g]
//   C 16x8:        c0 = C[g][2t], c1 = C[g][2t+1], c2 = C[g+8][2t], c3 = C[g+8][2t+1]
// Tiles stay f32 in shared memory (cp.async, 16-byte chunks), rows padded by 4 floats: a row then
// starts 4 banks after the one above, so the 8 rows x 4 columns of an A or B fragment, and the
// rows 2t / 2t+1 x 8 columns of the permuted B below, hit 32 distinct banks. Every operand is
// rounded to tf32 (cvt.rna) as it is loaded into its fragment.
//
// How P (and dS) reach the next product: the accumulator quad of an n8 tile holds columns (keys)
// 2t and 2t+1, an A fragment wants columns t and t+4. A product sums over its k index in any
// order, so the k step is taken in the order (0, 2, 4, 6, 1, 3, 5, 7): A column t stands for key
// 2t and column t+4 for key 2t+1, i.e. a = {c0, c2, c1, c3}, and the B fragment is loaded in the
// same order, b0 = V[2t][n], b1 = V[2t+1][n] (frag_b_rows_k). No shuffle and no shared-memory
// round trip, and the B loads stay conflict-free.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <type_traits>

#include "core/cuda_iface.hpp"
#include "cuda/flash_common.cuh"

namespace nx::cuda {
namespace {

using namespace flash;

constexpr int kPad = 4;      // floats of padding per shared-memory row
constexpr int kFlashThreads = 128;  // 4 warps in every kernel of this file

__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Fragment loads from a padded shared tile X[row][ld] (ld = D + kPad, a multiple of 4 but not of 8
// words: bank(row, col) = 4 row + col mod 32).
// A (16 x 8) of X itself: rows r0.., columns k0.. .
__device__ __forceinline__ void frag_a(uint32_t (&a)[4], const float* x, int ld, int r0, int k0, int g, int t) {
  const float* p = x + (r0 + g) * ld + k0 + t;
  a[0] = to_tf32(p[0]);           // X[r0 + g][k0 + t]
  a[1] = to_tf32(p[8 * ld]);      // X[r0 + g + 8][k0 + t]
  a[2] = to_tf32(p[4]);           // X[r0 + g][k0 + t + 4]
  a[3] = to_tf32(p[8 * ld + 4]);  // X[r0 + g + 8][k0 + t + 4]
}
// B (8 x 8) with B[k][n] = X[n0 + n][k0 + k] (tile rows are the n index, as K in Q K^T).
__device__ __forceinline__ void frag_b_rows_n(uint32_t& b0, uint32_t& b1, const float* x, int ld, int n0, int k0, int g,
                                              int t) {
  const float* p = x + (n0 + g) * ld + k0 + t;
  b0 = to_tf32(p[0]);  // B[t][g]
  b1 = to_tf32(p[4]);  // B[t + 4][g]
}
// B (8 x 8) with B[k][n] = X[k0 + k][n0 + n] (tile rows are the k index, as V in P V) in the
// permuted k order of acc_as_a: k = t is row 2t, k = t + 4 is row 2t + 1.
__device__ __forceinline__ void frag_b_rows_k(uint32_t& b0, uint32_t& b1, const float* x, int ld, int k0, int n0, int g,
                                              int t) {
  const float* p = x + (k0 + 2 * t) * ld + n0 + g;
  b0 = to_tf32(p[0]);   // X[k0 + 2t][n0 + g]
  b1 = to_tf32(p[ld]);  // X[k0 + 2t + 1][n0 + g]
}
// The accumulator of an n8 tile (rows g, g + 8; columns 2t, 2t + 1) as the A fragment of a k8
// step in the permuted order (A column t = column 2t, A column t + 4 = column 2t + 1).
__device__ __forceinline__ void acc_as_a(uint32_t (&a)[4], const float (&c)[4]) {
  a[0] = to_tf32(c[0]);  // row g,     column 2t
  a[1] = to_tf32(c[2]);  // row g + 8, column 2t
  a[2] = to_tf32(c[1]);  // row g,     column 2t + 1
  a[3] = to_tf32(c[3]);  // row g + 8, column 2t + 1
}

// Rows [r0, r0 + ROWS) of a [n, D] f32 matrix into a padded shared tile; rows past n are
// zero-filled. 16-byte chunks: src must be 16-byte aligned (checked by the launchers).
template <int D, int ROWS>
__device__ __forceinline__ void stage_rows(float* dst, const float* src, int64_t r0, int64_t n) {
  constexpr int kChunks = D / 4;  // 16-byte chunks per row
  for (int c = threadIdx.x; c < ROWS * kChunks; c += kFlashThreads) {
    const int r = c / kChunks, col = (c % kChunks) * 4;
    const bool ok = r0 + r < n;
    cp_async16(dst + r * (D + kPad) + col, src + (ok ? (r0 + r) * D + col : 0), ok);
  }
}

__device__ __forceinline__ void store2(float* at, float x, float y) { *reinterpret_cast<float2*>(at) = make_float2(x, y); }

// The backward's two products of a warp at once, k steps over head_dim: x = A1 B1^T and
// y = A2 B2^T, rows r0.. of A1 and A2 (16), the 8 NT rows of B1 and B2 as the n index; zeroed first.
template <int D, int NT>
__device__ __forceinline__ void two_products(float (&x)[NT][4], const float* a1, const float* b1, float (&y)[NT][4],
                                             const float* a2, const float* b2, int ld, int r0, int g, int t) {
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) x[n][e] = y[n][e] = 0.f;
#pragma unroll
  for (int kc = 0; kc < D / 8; ++kc) {
    uint32_t fa1[4], fa2[4];
    frag_a(fa1, a1, ld, r0, kc * 8, g, t);
    frag_a(fa2, a2, ld, r0, kc * 8, g, t);
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      uint32_t f0, f1;
      frag_b_rows_n(f0, f1, b1, ld, n * 8, kc * 8, g, t);
      mma_tf32(x[n], fa1, f0, f1);
      frag_b_rows_n(f0, f1, b2, ld, n * 8, kc * 8, g, t);
      mma_tf32(y[n], fa2, f0, f1);
    }
  }
}

// Tile shapes per head_dim, chosen so that a block fits twice into an SM's shared memory (H100:
// 227 KiB) where it can:
//   forward  D=64:  128 queries (4 warps x 2 m16 tiles, every K/V fragment feeds 2 mma), 64-key
//                   tiles; Q + 2 x (K + V) = (128 + 256) x 68 x 4 B = 102 KiB, 2 blocks per SM.
//            D=128: 64 queries (4 warps x 1 m16 tile), 32-key tiles: (64 + 128) x 132 x 4 B = 99 KiB.
//   dK/dV    64 keys per block (4 warps x 16), query tiles of 64 (D=64: 103 KiB) or 32 rows
//            (D=128: 132.5 KiB, one block per SM).
//   dQ       64 queries per block (4 warps x 16), key tiles of 64 (D=64: 102 KiB) or 32 (D=128:
//            132 KiB, one block per SM).
template <int D>
struct Tiles;
template <>
struct Tiles<32> {  // small heads: the D=64 shapes at half the row width (55 / 56 / 54 KiB)
  static constexpr int kFwdMT = 2, kFwdKeys = 64, kBwdQueries = 64, kBwdKeys = 64;
};
template <>
struct Tiles<64> {
  static constexpr int kFwdMT = 2, kFwdKeys = 64, kBwdQueries = 64, kBwdKeys = 64;
};
template <>
struct Tiles<128> {
  static constexpr int kFwdMT = 1, kFwdKeys = 32, kBwdQueries = 32, kBwdKeys = 32;
};

// ---------------------------------------------------------------- forward
// Block = 64 * MT query rows of one (batch, head); warp w owns rows w * 16 * MT.. (MT m16 tiles).
// Shared: Q [64 MT][D + 4], then two buffers, each a K tile [BC][D + 4] then a V tile [BC][D + 4];
// tile j + 1 loads (cp.async) while tile j is computed, one barrier per tile. Per tile:
// S = Q K^T (f32 accumulators), scale / ALiBi / masks and the online softmax in registers
// (flash_common.cuh), O += P V with P taken from the S accumulators (acc_as_a). At the end O is
// divided by the row sum and the log-sum-exp written.
template <int D, int MT, int BC, bool ALIBI>
__global__ void __launch_bounds__(kFlashThreads, 2) flash_fwd_tf32(TcParams p, const float* __restrict__ q,
                                                              const float* __restrict__ k, const float* __restrict__ v,
                                                              float* __restrict__ out, float* __restrict__ lse) {
  constexpr int LD = D + kPad, ROWS = 64 * MT;
  extern __shared__ __align__(16) float smem_f32[];
  float* qs = smem_f32;
  float* kv0 = qs + ROWS * LD;  // two buffers of 2 * BC rows: K tile, then V tile
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  // positions fit in int: the launcher sends sequences of 2^31 or more elsewhere
  const int tq = int(p.tq), tk = int(p.tk);
  const int nqb = (tq + ROWS - 1) / ROWS;
  const int64_t bh = blockIdx.x / nqb;
  const int qi = int(blockIdx.x % nqb);
  const int qb = p.causal ? nqb - 1 - qi : qi;  // causal: the longest rows of a head start first
  const int h = int(bh % p.heads), b = int(bh / p.heads), hk = h / int(p.heads / p.kv_heads);
  const int q0 = qb * ROWS, offset = tk - tq;
  const int wr = warp * 16 * MT;  // the warp's first row in the block tile
  const float* kg = k + ((int64_t(b) * p.kv_heads + hk) * p.tk) * D;
  const float* vg = v + ((int64_t(b) * p.kv_heads + hk) * p.tk) * D;
  stage_rows<D, ROWS>(qs, q + ((int64_t(b) * p.heads + h) * p.tq) * D, q0, p.tq);
  stage_rows<D, BC>(kv0, kg, 0, p.tk);
  stage_rows<D, BC>(kv0 + BC * LD, vg, 0, p.tk);
  cp_async_commit();

  float o[MT][D / 8][4], m[MT][2], l[MT][2];
  int row_pos[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int i = 0; i < D / 8; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.f;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      m[mt][r] = -INFINITY;
      l[mt][r] = 0.f;
      row_pos[mt][r] = offset + q0 + wr + mt * 16 + g + r * 8;
    }
  }
  const float scale2 = p.scale * kLog2e;
  const float slope2 = ALIBI ? p.slopes[h] * kLog2e : 0.f;
  const int key_end = p.causal ? min(tk, offset + min(tq, q0 + ROWS)) : tk;

  for (int j0 = 0, buf = 0; j0 < key_end; j0 += BC, buf ^= 1) {
    cp_async_wait_all();
    __syncthreads();  // K[j], V[j] (and Q) visible; every warp is done with the other buffer
    const float* ks = kv0 + buf * 2 * BC * LD;
    const float* vs = ks + BC * LD;
    if (j0 + BC < key_end) {  // tile j + 1 loads during all of tile j's work
      float* next = kv0 + (buf ^ 1) * 2 * BC * LD;
      stage_rows<D, BC>(next, kg, j0 + BC, p.tk);
      stage_rows<D, BC>(next + BC * LD, vg, j0 + BC, p.tk);
      cp_async_commit();
    }

    // S = Q K^T (16 MT x BC per warp): k steps over head_dim, B[d][key] = K[key][d]
    float s[MT][BC / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int n = 0; n < BC / 8; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.f;
#pragma unroll
    for (int kc = 0; kc < D / 8; ++kc) {
      uint32_t a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) frag_a(a[mt], qs, LD, wr + mt * 16, kc * 8, g, t);
#pragma unroll
      for (int n = 0; n < BC / 8; ++n) {
        uint32_t b0, b1;
        frag_b_rows_n(b0, b1, ks, LD, n * 8, kc * 8, g, t);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) mma_tf32(s[mt][n], a[mt], b0, b1);
      }
    }
    // masks only where the tile crosses the sequence end or the diagonal (of this warp's rows)
    const bool edge = j0 + BC > tk || (p.causal && j0 + BC - 1 > offset + q0 + wr);
    if (edge) online_softmax<ALIBI, true>(s, o, m, l, row_pos, j0, t, tk, p.causal, scale2, slope2);
    else online_softmax<ALIBI, false>(s, o, m, l, row_pos, j0, t, tk, p.causal, scale2, slope2);
    // O += P V: k steps over the keys of each n8 tile of S, in the permuted order (header)
#pragma unroll
    for (int n = 0; n < BC / 8; ++n) {
      uint32_t pa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) acc_as_a(pa[mt], s[mt][n]);
#pragma unroll
      for (int dn = 0; dn < D / 8; ++dn) {
        uint32_t b0, b1;
        frag_b_rows_k(b0, b1, vs, LD, n * 8, dn * 8, g, t);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) mma_tf32(o[mt][dn], pa[mt], b0, b1);
      }
    }
  }
  cp_async_wait_all();  // nothing may stay in flight at exit (a block with no keys)
  // row sums across the quad, then normalize and store
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = l[mt][r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int row = q0 + wr + mt * 16 + g + r * 8;
      if (row >= tq) continue;
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
      float* orow = out + ((int64_t(b) * p.heads + h) * p.tq + row) * D;
#pragma unroll
      for (int dn = 0; dn < D / 8; ++dn) store2(orow + dn * 8 + t * 2, o[mt][dn][r * 2] * inv, o[mt][dn][r * 2 + 1] * inv);
      if (t == 0)
        lse[(int64_t(b) * p.heads + h) * p.tq + row] = sum > 0.f ? (m[mt][r] + log2f(sum)) / kLog2e : INFINITY;
    }
}

// ---------------------------------------------------------------- backward
// dK/dV. Block = 64 keys of one (batch, kv head); warp w owns keys k0 + w * 16... It walks the
// query tiles of T rows of every head sharing the kv head (KeyBlockWalk; causal: from the first
// tile that sees the block's keys). Shared: K [64][D + 4], V [64][D + 4], then two buffers of
// Q [T][D + 4], two of dO [T][D + 4], two of [lse | delta][T]; tile i + 1 loads while tile i is
// computed. Per tile (16 keys x T queries per warp):
//   S^T = K Q^T, dP^T = V dO^T, P^T = 2^(S^T scale2 - lse log2 e), dS^T = P^T (dP^T - delta),
//   dV += P^T dO, dK += dS^T Q (P^T and dS^T straight from their accumulators, acc_as_a).
// Each dK/dV element has one writer (no atomics: deterministic).
template <int D, int T, bool ALIBI>
__global__ void __launch_bounds__(kFlashThreads) flash_bwd_dkdv_tf32(TcParams p, const float* __restrict__ q,
    const float* __restrict__ k, const float* __restrict__ v, const float* __restrict__ dout,
    const float* __restrict__ lse, const float* __restrict__ delta, float* __restrict__ dk, float* __restrict__ dv) {
  constexpr int LD = D + kPad, KB = 64;  // keys per block
  extern __shared__ __align__(16) float smem_f32[];
  float* ks = smem_f32;
  float* vs = ks + KB * LD;
  float* qbuf = vs + KB * LD;        // two Q tiles
  float* dobuf = qbuf + 2 * T * LD;  // two dO tiles
  float* stats = dobuf + 2 * T * LD;  // [buffer][lse | delta][T]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int tq = int(p.tq), tk = int(p.tk), offset = tk - tq;
  const KeyBlockWalk walk(p, KB, T);
  const int b = walk.b, hk = walk.hk, k0 = walk.k0, total = walk.total;
  const float* kg = k + ((int64_t(b) * p.kv_heads + hk) * p.tk) * D;
  const float* vg = v + ((int64_t(b) * p.kv_heads + hk) * p.tk) * D;
  auto stage = [&](int i, int buf) {  // query tile i of the walk (head-major) into buffer buf
    const int h = walk.head(i), q0 = walk.q0(i, T);
    const int64_t base = (int64_t(b) * p.heads + h) * p.tq;
    stage_rows<D, T>(qbuf + buf * T * LD, q + base * D, q0, p.tq);
    stage_rows<D, T>(dobuf + buf * T * LD, dout + base * D, q0, p.tq);
    if (threadIdx.x < T) {  // rows past tq read as 0 (masked below)
      const bool ok = q0 + int(threadIdx.x) < tq;
      const int64_t at = ok ? base + q0 + threadIdx.x : 0;
      cp_async4(stats + buf * 2 * T + threadIdx.x, lse + at, ok);
      cp_async4(stats + buf * 2 * T + T + threadIdx.x, delta + at, ok);
    }
  };
  stage_rows<D, KB>(ks, kg, k0, p.tk);
  stage_rows<D, KB>(vs, vg, k0, p.tk);
  if (total > 0) stage(0, 0);
  cp_async_commit();

  float dka[D / 8][4], dva[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) dka[i][e] = dva[i][e] = 0.f;
  const int keys[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};
  const float scale2 = p.scale * kLog2e;

  for (int i = 0; i < total; ++i) {
    const int buf = i & 1, h = walk.head(i), q0 = walk.q0(i, T);
    cp_async_wait_all();
    __syncthreads();  // tile i (and K, V) visible; every warp is done with buffer buf ^ 1
    if (i + 1 < total) {
      stage(i + 1, buf ^ 1);
      cp_async_commit();
    }
    const float* qs = qbuf + buf * T * LD;
    const float* dos = dobuf + buf * T * LD;
    const float* ls = stats + buf * 2 * T;
    const float* dl = ls + T;

    // S^T and dP^T (16 keys x T queries per warp): k steps over head_dim
    float st[T / 8][4], dpt[T / 8][4];
    two_products<D>(st, ks, qs, dpt, vs, dos, LD, warp * 16, g, t);
    // P^T into st, dS^T into dpt; masks only on tiles that cross a sequence end or the diagonal
    const bool edge = q0 + T > tq || k0 + KB > tk || (p.causal && k0 + KB - 1 > offset + q0);
    const float slope2 = ALIBI ? p.slopes[h] * kLog2e : 0.f;
#pragma unroll
    for (int n = 0; n < T / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = n * 8 + t * 2 + (e & 1), query = q0 + col, key = keys[e >> 1], qpos = offset + query;
        float x = fmaf(st[n][e], scale2, -ls[col] * kLog2e);
        if constexpr (ALIBI) x -= slope2 * float(qpos - key);
        float pv = ex2(x);  // rows without keys have lse = +inf: weight 0
        if (edge && (query >= tq || key >= tk || (p.causal && key > qpos))) pv = 0.f;
        st[n][e] = pv;
        dpt[n][e] = pv * (dpt[n][e] - dl[col]);
      }
    // dV += P^T dO, dK += dS^T Q: k steps over the queries of each n8 tile, permuted order
#pragma unroll
    for (int n = 0; n < T / 8; ++n) {
      uint32_t pa[4], da[4];
      acc_as_a(pa, st[n]);
      acc_as_a(da, dpt[n]);
#pragma unroll
      for (int dn = 0; dn < D / 8; ++dn) {
        uint32_t b0, b1;
        frag_b_rows_k(b0, b1, dos, LD, n * 8, dn * 8, g, t);
        mma_tf32(dva[dn], pa, b0, b1);
        frag_b_rows_k(b0, b1, qs, LD, n * 8, dn * 8, g, t);
        mma_tf32(dka[dn], da, b0, b1);
      }
    }
  }
  cp_async_wait_all();  // a block no query sees still staged K and V
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (keys[r] >= tk) continue;
    const int64_t at = ((int64_t(b) * p.kv_heads + hk) * p.tk + keys[r]) * D;
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn) {
      store2(dk + at + dn * 8 + t * 2, dka[dn][r * 2] * p.scale, dka[dn][r * 2 + 1] * p.scale);
      store2(dv + at + dn * 8 + t * 2, dva[dn][r * 2], dva[dn][r * 2 + 1]);
    }
  }
}

// dQ. Block = 64 queries of one (batch, head); warp w owns rows q0 + w * 16... Shared: Q [64][D + 4],
// dO [64][D + 4], then two buffers, each a K tile [BC][D + 4] then a V tile [BC][D + 4]; tile j + 1
// loads while tile j is computed. Per tile (16 queries x BC keys per warp): S = Q K^T,
// dP = dO V^T, dS = P (dP - delta), dQ += dS K (dS straight from its accumulators, acc_as_a).
// One writer per dQ element.
template <int D, int BC, bool ALIBI>
__global__ void __launch_bounds__(kFlashThreads) flash_bwd_dq_tf32(TcParams p, const float* __restrict__ q,
    const float* __restrict__ k, const float* __restrict__ v, const float* __restrict__ dout,
    const float* __restrict__ lse, const float* __restrict__ delta, float* __restrict__ dq) {
  constexpr int LD = D + kPad, ROWS = 64;
  extern __shared__ __align__(16) float smem_f32[];
  float* qs = smem_f32;
  float* dos = qs + ROWS * LD;
  float* kv0 = dos + ROWS * LD;  // two buffers of 2 * BC rows: K tile, then V tile
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int tq = int(p.tq), tk = int(p.tk), offset = tk - tq;
  const int nqb = (tq + ROWS - 1) / ROWS;
  const int64_t bh = blockIdx.x / nqb;
  const int qi = int(blockIdx.x % nqb);
  const int qb = p.causal ? nqb - 1 - qi : qi;  // causal: the longest rows of a head start first
  const int h = int(bh % p.heads), b = int(bh / p.heads), hk = h / int(p.heads / p.kv_heads);
  const int q0 = qb * ROWS, wr = warp * 16;
  const int64_t base = (int64_t(b) * p.heads + h) * p.tq;
  const float* kg = k + ((int64_t(b) * p.kv_heads + hk) * p.tk) * D;
  const float* vg = v + ((int64_t(b) * p.kv_heads + hk) * p.tk) * D;
  stage_rows<D, ROWS>(qs, q + base * D, q0, p.tq);
  stage_rows<D, ROWS>(dos, dout + base * D, q0, p.tq);
  stage_rows<D, BC>(kv0, kg, 0, p.tk);
  stage_rows<D, BC>(kv0 + BC * LD, vg, 0, p.tk);
  cp_async_commit();

  const float scale2 = p.scale * kLog2e;
  const float slope2 = ALIBI ? p.slopes[h] * kLog2e : 0.f;
  const int rows[2] = {q0 + wr + g, q0 + wr + g + 8};
  float L2[2], Dl[2];  // lse in log2 units (+inf: no keys, or a row past tq), delta
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    L2[r] = rows[r] < tq ? lse[base + rows[r]] * kLog2e : INFINITY;
    Dl[r] = rows[r] < tq ? delta[base + rows[r]] : 0.f;
  }
  float dqa[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) dqa[i][0] = dqa[i][1] = dqa[i][2] = dqa[i][3] = 0.f;
  const int key_end = p.causal ? min(tk, offset + min(tq, q0 + ROWS)) : tk;

  for (int j0 = 0, buf = 0; j0 < key_end; j0 += BC, buf ^= 1) {
    cp_async_wait_all();
    __syncthreads();  // K[j], V[j] (and Q, dO) visible; every warp is done with the other buffer
    const float* ks = kv0 + buf * 2 * BC * LD;
    const float* vs = ks + BC * LD;
    if (j0 + BC < key_end) {
      float* next = kv0 + (buf ^ 1) * 2 * BC * LD;
      stage_rows<D, BC>(next, kg, j0 + BC, p.tk);
      stage_rows<D, BC>(next + BC * LD, vg, j0 + BC, p.tk);
      cp_async_commit();
    }
    // S and dP (16 x BC per warp): k steps over head_dim
    float s[BC / 8][4], dp[BC / 8][4];
    two_products<D>(s, qs, ks, dp, dos, vs, LD, wr, g, t);
    // dS into s; rows past tq have L2 = +inf (weight 0), so only keys need masks
    const bool edge = j0 + BC > tk || (p.causal && j0 + BC - 1 > offset + q0 + wr);
#pragma unroll
    for (int n = 0; n < BC / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1, key = j0 + n * 8 + t * 2 + (e & 1), qpos = offset + rows[r];
        float x = fmaf(s[n][e], scale2, -L2[r]);
        if constexpr (ALIBI) x -= slope2 * float(qpos - key);
        float pv = ex2(x);
        if (edge && (key >= tk || (p.causal && key > qpos))) pv = 0.f;
        s[n][e] = pv * (dp[n][e] - Dl[r]);
      }
    // dQ += dS K: k steps over the keys of each n8 tile, permuted order
#pragma unroll
    for (int n = 0; n < BC / 8; ++n) {
      uint32_t da[4];
      acc_as_a(da, s[n]);
#pragma unroll
      for (int dn = 0; dn < D / 8; ++dn) {
        uint32_t b0, b1;
        frag_b_rows_k(b0, b1, ks, LD, n * 8, dn * 8, g, t);
        mma_tf32(dqa[dn], da, b0, b1);
      }
    }
  }
  cp_async_wait_all();  // a block with no keys still staged tile 0
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (rows[r] >= tq) continue;
    float* orow = dq + (base + rows[r]) * D;
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn) store2(orow + dn * 8 + t * 2, dqa[dn][r * 2] * p.scale, dqa[dn][r * 2 + 1] * p.scale);
  }
}

// ---------------------------------------------------------------- launchers
template <int D>
constexpr size_t fwd_smem() {
  return size_t(64 * Tiles<D>::kFwdMT + 4 * Tiles<D>::kFwdKeys) * (D + kPad) * sizeof(float);
}
template <int D>
constexpr size_t dkdv_smem() {
  constexpr int T = Tiles<D>::kBwdQueries;
  return size_t(2 * 64 + 4 * T) * (D + kPad) * sizeof(float) + 4 * T * sizeof(float);
}
template <int D>
constexpr size_t dq_smem() {
  return size_t(2 * 64 + 4 * Tiles<D>::kBwdKeys) * (D + kPad) * sizeof(float);
}

// The opt-in shared memory per block of the current device (queried once per device).
int smem_per_block() {
  static std::atomic<int> cache[64] = {};
  const int dev = current_device();
  if (dev < 0 || dev >= 64) return 0;
  int n = cache[dev].load(std::memory_order_relaxed);
  if (!n) {
    NX_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    cache[dev].store(n, std::memory_order_relaxed);
  }
  return n;
}

bool aligned(const void* p, uintptr_t bytes) { return (reinterpret_cast<uintptr_t>(p) & (bytes - 1)) == 0; }

// What both directions need: f32 with TF32 enabled, the shapes the kernels cover (head_dim 32, 64
// or 128, ALiBi slopes for at most 128 heads, int positions), more than a few queries (decode keeps
// the split-key SIMT kernel), an sm_80+ device with room for the tiles. Inputs are contiguous
// [B, H, T, D] (ops/attention.cpp makes them so), as for the bf16/f16 kernels.
bool tf32_applies(const AttentionParams& a, const View& q) {
  if (q.dtype != DType::F32 || !tf32_enabled()) return false;
  if (!mma_head_dim(a.dim) || a.heads > 128 || a.tq <= 4 || a.tk < 1) return false;
  if (a.tk >= INT32_MAX || a.tq >= INT32_MAX) return false;
  if (compute_capability() < 80) return false;
  size_t need = 0;
  with_head_dim(a.dim, [&](auto d_tag) {
    constexpr int D = decltype(d_tag)::value;
    need = std::max({fwd_smem<D>(), dkdv_smem<D>(), dq_smem<D>()});
  });
  return size_t(smem_per_block()) >= need;
}

template <int D>
void launch_fwd_tf32(const ExecContext& ctx, const AttentionParams& a, const View& q, const View& k, const View& v,
                     const View& out, const View& lse) {
  constexpr int MT = Tiles<D>::kFwdMT, BC = Tiles<D>::kFwdKeys, ROWS = 64 * MT;
  const TcParams p = tc_params(a);
  constexpr size_t smem = fwd_smem<D>();
  auto kernel = a.alibi_slopes.empty() ? flash_fwd_tf32<D, MT, BC, false> : flash_fwd_tf32<D, MT, BC, true>;
  NX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const int64_t blocks = a.batch * a.heads * ((a.tq + ROWS - 1) / ROWS);
  kernel<<<unsigned(blocks), kFlashThreads, smem, stream_of(ctx)>>>(p, static_cast<const float*>(q.data),
      static_cast<const float*>(k.data), static_cast<const float*>(v.data), static_cast<float*>(out.data),
      static_cast<float*>(lse.data));
  NX_CUDA_LAUNCH_CHECK();
}

template <int D>
void launch_bwd_tf32(const ExecContext& ctx, const AttentionParams& a, const View& q, const View& k, const View& v,
                     const View& dout, const float* lse, const float* delta, const View& dq, const View& dk,
                     const View& dv) {
  constexpr int T = Tiles<D>::kBwdQueries, BC = Tiles<D>::kBwdKeys;
  const TcParams p = tc_params(a);
  const bool alibi = !a.alibi_slopes.empty();
  auto f32 = [](const View& x) { return static_cast<const float*>(x.data); };
  constexpr size_t smem1 = dkdv_smem<D>(), smem2 = dq_smem<D>();
  auto k1 = alibi ? flash_bwd_dkdv_tf32<D, T, true> : flash_bwd_dkdv_tf32<D, T, false>;
  auto k2 = alibi ? flash_bwd_dq_tf32<D, BC, true> : flash_bwd_dq_tf32<D, BC, false>;
  NX_CUDA_CHECK(cudaFuncSetAttribute(k1, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem1)));
  NX_CUDA_CHECK(cudaFuncSetAttribute(k2, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem2)));
  k1<<<unsigned(a.batch * a.kv_heads * ((a.tk + 63) / 64)), kFlashThreads, smem1, stream_of(ctx)>>>(
      p, f32(q), f32(k), f32(v), f32(dout), lse, delta, static_cast<float*>(dk.data), static_cast<float*>(dv.data));
  NX_CUDA_LAUNCH_CHECK();
  k2<<<unsigned(a.batch * a.heads * ((a.tq + 63) / 64)), kFlashThreads, smem2, stream_of(ctx)>>>(
      p, f32(q), f32(k), f32(v), f32(dout), lse, delta, static_cast<float*>(dq.data));
  NX_CUDA_LAUNCH_CHECK();
}

}  // namespace

// The TF32 forward when it applies (tf32_applies); false leaves the call to the f32 SIMT kernels.
bool attention_tf32(const ExecContext& ctx, const AttentionParams& a, const View& q, const View& k, const View& v,
                    const View& out, const View& lse) {
  if (!tf32_applies(a, q)) return false;
  // cp.async reads 16-byte chunks, the stores write float2
  if (!aligned(q.data, 16) || !aligned(k.data, 16) || !aligned(v.data, 16) || !aligned(out.data, 8)) return false;
  with_head_dim(a.dim, [&](auto d_tag) { launch_fwd_tf32<decltype(d_tag)::value>(ctx, a, q, k, v, out, lse); });
  return true;
}

// The TF32 backward for the same cases; delta = rowsum(dO * O) and lse (the forward's) in f32.
// Two kernels (dK/dV by key blocks, dQ by query blocks), each output element with one writer, so
// the result is deterministic.
bool attention_backward_tf32(const ExecContext& ctx, const AttentionParams& a, const View& q, const View& k,
                             const View& v, const View& dout, const float* lse, const float* delta, const View& dq,
                             const View& dk, const View& dv) {
  if (!tf32_applies(a, q)) return false;
  for (const View* x : {&q, &k, &v, &dout})
    if (!aligned(x->data, 16)) return false;
  for (const View* x : {&dq, &dk, &dv})
    if (!aligned(x->data, 8)) return false;
  with_head_dim(a.dim, [&](auto d_tag) {
    launch_bwd_tf32<decltype(d_tag)::value>(ctx, a, q, k, v, dout, lse, delta, dq, dk, dv);
  });
  return true;
}

}  // namespace nx::cuda
