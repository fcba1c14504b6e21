// Tensor-core flash attention for bf16/f16 with head_dim 32, 64 or 128 (FlashAttention-2 structure
// on mma.sync m16n8k16, fragments through ldmatrix).
//
// Forward: a block owns 128 query rows of one (batch, head), 4 warps of 32 rows. Q stays in shared
// memory; K and V tiles stream through it (cp.async, rows padded by 16 bytes so ldmatrix hits 32
// distinct banks), each loaded one phase ahead of its use. Per tile: S = Q K^T on tensor cores
// (f32 accumulators), scale/ALiBi/masks in registers, online softmax across the 4 lanes that share
// a row, P rounded to the input type and fed straight from the S accumulators into the A fragments
// of O += P V. The output is divided by the row sum at the end and the log-sum-exp saved for the
// backward.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdlib>
#include <string_view>

#include "cuda/flash_common.cuh"

namespace nx::cuda {
namespace {

using namespace flash;

constexpr int kWarps = 4, kPad = 8;  // backward: 4 warps; rows padded by 8 elements (16 bytes)

template <bool BF16>
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (BF16) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// The accumulator quad of n8 tile n (rows g, g + 8; columns 2t, 2t + 1) into the A fragments of
// the 16-wide k chunk n / 2, rounded to the input type: how P and dS feed the next product.
template <bool BF16, int NC>
__device__ __forceinline__ void pack_a(uint32_t (&frag)[NC][4], int n, const float (&v)[4]) {
  frag[n / 2][(n % 2) * 2 + 0] = pack2<BF16>(v[0], v[1]);
  frag[n / 2][(n % 2) * 2 + 1] = pack2<BF16>(v[2], v[3]);
}

// Rows [r0, r0 + ROWS) of a [n, D] matrix into a padded shared tile; rows past n are zero-filled.
template <int D, int ROWS>
__device__ __forceinline__ void stage_tile(uint16_t* dst, const uint16_t* src, int64_t r0, int64_t n) {
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  for (int c = threadIdx.x; c < ROWS * kChunks; c += blockDim.x) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const bool ok = r0 + r < n;
    cp_async16(dst + r * (D + kPad) + col, src + (ok ? (r0 + r) * D + col : 0), ok);
  }
}

// Four 8x8 16-bit matrices from shared memory; lane l gives the address of row l % 8 of matrix l / 8.
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const uint16_t* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const uint16_t* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
// A fragment (16 x 16) of a row-major tile X at rows r0.., columns k0..
__device__ __forceinline__ void ldsm_a(uint32_t (&a)[4], const uint16_t* x, int ld, int r0, int k0, int lane) {
  ldsm_x4(a, x + (r0 + lane % 16) * ld + k0 + (lane / 16) * 8);
}
// B fragments of two n8 tiles (n0 and n0 + 8) where B[k][n] = X[n][k]: {b0, b1} of n0, then of n0 + 8.
__device__ __forceinline__ void ldsm_b_rows_n(uint32_t (&b)[4], const uint16_t* x, int ld, int n0, int k0, int lane) {
  ldsm_x4(b, x + (n0 + lane % 8 + (lane / 16) * 8) * ld + k0 + ((lane / 8) % 2) * 8);
}
// B fragments of two n8 tiles (n0, n0 + 8) where B[k][n] = X[k][n] (X rows are the k index).
__device__ __forceinline__ void ldsm_b_rows_k(uint32_t (&b)[4], const uint16_t* x, int ld, int k0, int n0, int lane) {
  ldsm_x4_trans(b, x + (k0 + lane % 16) * ld + n0 + (lane / 16) * 8);
}

// Forward. A block owns 128 query rows of one (batch, head); each of its 4 warps owns 32 rows (two
// m16 tiles), so every K/V fragment read from shared memory feeds two mma instructions. K and V
// tiles are double-buffered: tile j + 1 loads while tile j is computed, one barrier per tile.
constexpr int kFwdWarps = 4, kFwdRows = 128, kFwdTiles = 2;  // m16 tiles per warp
constexpr int kFwdKeys = 64;  // keys per tile (128 spills registers at head_dim 64)

template <int D, bool BF16, bool ALIBI>
__global__ void __launch_bounds__(kFwdWarps * 32, 2) flash_fwd_tc(TcParams p, const uint16_t* __restrict__ q,
                                                                  const uint16_t* __restrict__ k, const uint16_t* __restrict__ v,
                                                                  uint16_t* __restrict__ out, float* __restrict__ lse) {
  constexpr int LD = D + kPad, BC = kFwdKeys, MT = kFwdTiles;
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* qs = smem;
  uint16_t* kv0 = qs + kFwdRows * LD;  // two buffers, each a K tile then a V tile
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  // positions fit in int: the launcher sends sequences of 2^31 or more elsewhere
  const int tq = int(p.tq), tk = int(p.tk);
  const int nqb = (tq + kFwdRows - 1) / kFwdRows;
  const int64_t bh = blockIdx.x / nqb;
  const int qi = int(blockIdx.x % nqb);
  const int qb = p.causal ? nqb - 1 - qi : qi;  // causal: the longest rows of a head start first
  const int h = int(bh % p.heads), b = int(bh / p.heads), hk = h / int(p.heads / p.kv_heads);
  const int q0 = qb * kFwdRows, offset = tk - tq;
  const int wr = warp * 16 * MT;  // the warp's first row in the block tile
  const uint16_t* kg = k + ((int64_t(b) * p.kv_heads + hk) * p.tk) * D;
  const uint16_t* vg = v + ((int64_t(b) * p.kv_heads + hk) * p.tk) * D;
  stage_tile<D, kFwdRows>(qs, q + ((int64_t(b) * p.heads + h) * p.tq) * D, q0, p.tq);
  stage_tile<D, BC>(kv0, kg, 0, p.tk);
  stage_tile<D, BC>(kv0 + BC * LD, vg, 0, p.tk);
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
  const int key_end = p.causal ? min(tk, offset + min(tq, q0 + kFwdRows)) : tk;

  for (int j0 = 0, buf = 0; j0 < key_end; j0 += BC, buf ^= 1) {
    cp_async_wait_all();
    __syncthreads();  // K[j], V[j] (and Q) visible; every warp is done with the other buffer
    const uint16_t* ks = kv0 + buf * 2 * BC * LD;
    const uint16_t* vs = ks + BC * LD;
    if (j0 + BC < key_end) {  // tile j + 1 loads during all of tile j's work
      uint16_t* next = kv0 + (buf ^ 1) * 2 * BC * LD;
      stage_tile<D, BC>(next, kg, j0 + BC, p.tk);
      stage_tile<D, BC>(next + BC * LD, vg, j0 + BC, p.tk);
      cp_async_commit();
    }

    // S = Q K^T (32 x BC per warp)
    float s[MT][BC / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int n = 0; n < BC / 8; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.f;
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc) {
      uint32_t a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) ldsm_a(a[mt], qs, LD, wr + mt * 16, kc * 16, lane);
#pragma unroll
      for (int n = 0; n < BC / 8; n += 2) {
        uint32_t bk[4];
        ldsm_b_rows_n(bk, ks, LD, n * 8, kc * 16, lane);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma<BF16>(s[mt][n], a[mt], bk[0], bk[1]);
          mma<BF16>(s[mt][n + 1], a[mt], bk[2], bk[3]);
        }
      }
    }
    // masks only where the tile crosses the sequence end or the diagonal
    const bool edge = j0 + BC > tk || (p.causal && j0 + BC - 1 > offset + q0 + wr);
    if (edge) online_softmax<ALIBI, true>(s, o, m, l, row_pos, j0, t, tk, p.causal, scale2, slope2);
    else online_softmax<ALIBI, false>(s, o, m, l, row_pos, j0, t, tk, p.causal, scale2, slope2);
    // O += P V: P rounded to the input type, straight from the S accumulators into A fragments
#pragma unroll
    for (int kc = 0; kc < BC / 16; ++kc) {
      uint32_t pa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        pa[mt][0] = pack2<BF16>(s[mt][2 * kc][0], s[mt][2 * kc][1]);
        pa[mt][1] = pack2<BF16>(s[mt][2 * kc][2], s[mt][2 * kc][3]);
        pa[mt][2] = pack2<BF16>(s[mt][2 * kc + 1][0], s[mt][2 * kc + 1][1]);
        pa[mt][3] = pack2<BF16>(s[mt][2 * kc + 1][2], s[mt][2 * kc + 1][3]);
      }
#pragma unroll
      for (int dn = 0; dn < D / 8; dn += 2) {
        uint32_t bv[4];
        ldsm_b_rows_k(bv, vs, LD, kc * 16, dn * 8, lane);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma<BF16>(o[mt][dn], pa[mt], bv[0], bv[1]);
          mma<BF16>(o[mt][dn + 1], pa[mt], bv[2], bv[3]);
        }
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
      uint16_t* orow = out + ((int64_t(b) * p.heads + h) * p.tq + row) * D;
#pragma unroll
      for (int dn = 0; dn < D / 8; ++dn)
        *reinterpret_cast<uint32_t*>(orow + dn * 8 + t * 2) = pack2<BF16>(o[mt][dn][r * 2] * inv, o[mt][dn][r * 2 + 1] * inv);
      if (t == 0)
        lse[(int64_t(b) * p.heads + h) * p.tq + row] = sum > 0.f ? (m[mt][r] + log2f(sum)) / kLog2e : INFINITY;
    }
}

// ---------------------------------------------------------------- backward
// Fragment loads from padded shared tiles X[row][LD] (16-bit elements):
//   A (16 x 16, rows r0.., k-chunk kc): X[r0 + g (+8)][kc*16 + t*2 (+8)]
//   B (16 x 8) with B[k][n] = X[n][k] (rows are the n index): X[n0 + g][kc*16 + t*2 (+8)]
//   B (16 x 8) with B[k][n] = X[k][n] (rows are the k index): ldmatrix.trans of rows k0..k0+15
__device__ __forceinline__ void load_a(const uint16_t* x, int ld, int r0, int kc, int g, int t, uint32_t (&a)[4]) {
  const uint16_t* p0 = x + (r0 + g) * ld + kc * 16 + t * 2;
  const uint16_t* p1 = p0 + 8 * ld;
  a[0] = *reinterpret_cast<const uint32_t*>(p0);
  a[1] = *reinterpret_cast<const uint32_t*>(p1);
  a[2] = *reinterpret_cast<const uint32_t*>(p0 + 8);
  a[3] = *reinterpret_cast<const uint32_t*>(p1 + 8);
}
__device__ __forceinline__ void load_b_rows_n(const uint16_t* x, int ld, int n0, int kc, int g, int t, uint32_t& b0, uint32_t& b1) {
  const uint16_t* p = x + (n0 + g) * ld + kc * 16 + t * 2;
  b0 = *reinterpret_cast<const uint32_t*>(p);
  b1 = *reinterpret_cast<const uint32_t*>(p + 8);
}
// The backward's two 16 x 64 products of a warp at once, over 16-wide chunks of D: x = A1 B1^T and
// y = A2 B2^T, rows r0.. of A1 and A2, the 64 rows of B1 and B2 (as the n index); x and y zeroed first.
template <int D, bool BF16>
__device__ __forceinline__ void two_products(float (&x)[8][4], const uint16_t* a1, const uint16_t* b1, float (&y)[8][4],
                                             const uint16_t* a2, const uint16_t* b2, int ld, int r0, int g, int t) {
#pragma unroll
  for (int n = 0; n < 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) x[n][e] = y[n][e] = 0.f;
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc) {
      uint32_t a[4], f0, f1;
      load_a(a1, ld, r0, kc, g, t, a);
      load_b_rows_n(b1, ld, n * 8, kc, g, t, f0, f1);
      mma<BF16>(x[n], a, f0, f1);
      load_a(a2, ld, r0, kc, g, t, a);
      load_b_rows_n(b2, ld, n * 8, kc, g, t, f0, f1);
      mma<BF16>(y[n], a, f0, f1);
    }
  }
}
__device__ __forceinline__ void load_b_rows_k(const uint16_t* x, int ld, int k0, int n0, int lane, uint32_t& b0, uint32_t& b1) {
  const uint16_t* row = x + (k0 + (lane % 16)) * ld + n0;
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n" : "=r"(b0), "=r"(b1) : "r"(smem_addr(row)));
}

// Block = 64 keys of one (batch, kv head); warp w owns keys w*16..w*16+15. For every query tile of
// every head sharing the kv head: S^T = K Q^T, dP^T = V dO^T, P^T = exp(S^T - lse),
// dS^T = P^T (dP^T - delta); dV += P^T dO, dK += dS^T Q. Each dK/dV element has one writer.
template <int D, bool BF16>
__global__ void __launch_bounds__(kWarps * 32) flash_bwd_dkdv_tc(TcParams p, const uint16_t* __restrict__ q,
    const uint16_t* __restrict__ k, const uint16_t* __restrict__ v, const uint16_t* __restrict__ dout,
    const float* __restrict__ lse, const float* __restrict__ delta, uint16_t* __restrict__ dk, uint16_t* __restrict__ dv) {
  constexpr int LD = D + kPad;
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* ks = smem;
  uint16_t* vs = ks + 64 * LD;
  uint16_t* qs = vs + 64 * LD;
  uint16_t* dos = qs + 64 * LD;
  __shared__ float ls[64], dl[64];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t nkb = (p.tk + 63) / 64;
  const int64_t kb = blockIdx.x % nkb, bhk = blockIdx.x / nkb;
  const int hk = int(bhk % p.kv_heads), b = int(bhk / p.kv_heads), group = int(p.heads / p.kv_heads);
  const int64_t k0 = kb * 64, offset = p.tk - p.tq;
  const uint16_t* kg = k + ((int64_t(b) * p.kv_heads + hk) * p.tk) * D;
  const uint16_t* vg = v + ((int64_t(b) * p.kv_heads + hk) * p.tk) * D;
  stage_tile<D, 64>(ks, kg, k0, p.tk);
  stage_tile<D, 64>(vs, vg, k0, p.tk);
  cp_async_wait_all();
  float dka[D / 8][4], dva[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) dka[i][e] = dva[i][e] = 0.f;
  const int64_t keys[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};
  const int64_t first_q = p.causal ? max(int64_t(0), k0 - offset) / 64 * 64 : 0;
  for (int gh = 0; gh < group; ++gh) {
    const int h = hk * group + gh;
    const int64_t base = (int64_t(b) * p.heads + h) * p.tq;
    const float slope = p.alibi ? p.slopes[h] : 0.f;
    for (int64_t q0 = first_q; q0 < p.tq; q0 += 64) {
      __syncthreads();  // previous tiles fully consumed
      stage_tile<D, 64>(qs, q + base * D, q0, p.tq);
      stage_tile<D, 64>(dos, dout + base * D, q0, p.tq);
      if (threadIdx.x < 64) {
        const bool ok = q0 + threadIdx.x < p.tq;
        ls[threadIdx.x] = ok ? lse[base + q0 + threadIdx.x] : INFINITY;
        dl[threadIdx.x] = ok ? delta[base + q0 + threadIdx.x] : 0.f;
      }
      cp_async_wait_all();
      __syncthreads();
      float st[8][4], dpt[8][4];
      two_products<D, BF16>(st, ks, qs, dpt, vs, dos, LD, warp * 16, g, t);
      uint32_t pa[4][4], dsa[4][4];
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        float pv[4], dsv[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = n * 8 + t * 2 + (e & 1);
          const int64_t query = q0 + col, key = keys[e >> 1], qpos = offset + query;
          const bool masked = query >= p.tq || key >= p.tk || (p.causal && key > qpos) || ls[col] == INFINITY;
          float x = st[n][e] * p.scale;
          if (p.alibi) x -= slope * float(qpos - key);
          pv[e] = masked ? 0.f : __expf(x - ls[col]);
          dsv[e] = pv[e] * (dpt[n][e] - dl[col]);
        }
        pack_a<BF16>(pa, n, pv);
        pack_a<BF16>(dsa, n, dsv);
      }
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int dn = 0; dn < D / 8; ++dn) {
          uint32_t b0, b1;
          load_b_rows_k(dos, LD, j * 16, dn * 8, lane, b0, b1);
          mma<BF16>(dva[dn], pa[j], b0, b1);
          load_b_rows_k(qs, LD, j * 16, dn * 8, lane, b0, b1);
          mma<BF16>(dka[dn], dsa[j], b0, b1);
        }
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (keys[r] >= p.tk) continue;
    const int64_t at = ((int64_t(b) * p.kv_heads + hk) * p.tk + keys[r]) * D;
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn) {
      *reinterpret_cast<uint32_t*>(dk + at + dn * 8 + t * 2) = pack2<BF16>(dka[dn][r * 2] * p.scale, dka[dn][r * 2 + 1] * p.scale);
      *reinterpret_cast<uint32_t*>(dv + at + dn * 8 + t * 2) = pack2<BF16>(dva[dn][r * 2], dva[dn][r * 2 + 1]);
    }
  }
}

// Block = 64 queries of one (batch, head), like the forward: S = Q K^T, dP = dO V^T,
// dS = P (dP - delta), dQ += dS K over the key tiles. One writer per dQ element.
template <int D, bool BF16>
__global__ void __launch_bounds__(kWarps * 32) flash_bwd_dq_tc(TcParams p, const uint16_t* __restrict__ q,
    const uint16_t* __restrict__ k, const uint16_t* __restrict__ v, const uint16_t* __restrict__ dout,
    const float* __restrict__ lse, const float* __restrict__ delta, uint16_t* __restrict__ dq) {
  constexpr int LD = D + kPad;
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* qs = smem;
  uint16_t* dos = qs + 64 * LD;
  uint16_t* ks = dos + 64 * LD;
  uint16_t* vs = ks + 64 * LD;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t nqb = (p.tq + 63) / 64;
  const int64_t qb = blockIdx.x % nqb, bh = blockIdx.x / nqb;
  const int h = int(bh % p.heads), b = int(bh / p.heads), hk = h / int(p.heads / p.kv_heads);
  const int64_t q0 = qb * 64, offset = p.tk - p.tq, base = (int64_t(b) * p.heads + h) * p.tq;
  const uint16_t* kg = k + ((int64_t(b) * p.kv_heads + hk) * p.tk) * D;
  const uint16_t* vg = v + ((int64_t(b) * p.kv_heads + hk) * p.tk) * D;
  stage_tile<D, 64>(qs, q + base * D, q0, p.tq);
  stage_tile<D, 64>(dos, dout + base * D, q0, p.tq);
  const int64_t rows[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  float L[2], Dl[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    L[r] = rows[r] < p.tq ? lse[base + rows[r]] : INFINITY;
    Dl[r] = rows[r] < p.tq ? delta[base + rows[r]] : 0.f;
  }
  const float slope = p.alibi ? p.slopes[h] : 0.f;
  float dqa[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) dqa[i][0] = dqa[i][1] = dqa[i][2] = dqa[i][3] = 0.f;
  const int64_t key_end = p.causal ? min(p.tk, offset + min(p.tq, q0 + 64)) : p.tk;
  for (int64_t j0 = 0; j0 < key_end; j0 += 64) {
    __syncthreads();
    stage_tile<D, 64>(ks, kg, j0, p.tk);
    stage_tile<D, 64>(vs, vg, j0, p.tk);
    cp_async_wait_all();
    __syncthreads();
    float s[8][4], dp[8][4];
    two_products<D, BF16>(s, qs, ks, dp, dos, vs, LD, warp * 16, g, t);
    uint32_t dsa[4][4];
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      float dsv[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        const int64_t key = j0 + n * 8 + t * 2 + (e & 1), qpos = offset + rows[r];
        const bool masked = rows[r] >= p.tq || key >= p.tk || (p.causal && key > qpos) || L[r] == INFINITY;
        float x = s[n][e] * p.scale;
        if (p.alibi) x -= slope * float(qpos - key);
        const float pr = masked ? 0.f : __expf(x - L[r]);
        dsv[e] = pr * (dp[n][e] - Dl[r]);
      }
      pack_a<BF16>(dsa, n, dsv);
    }
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int dn = 0; dn < D / 8; ++dn) {
        uint32_t b0, b1;
        load_b_rows_k(ks, LD, j * 16, dn * 8, lane, b0, b1);
        mma<BF16>(dqa[dn], dsa[j], b0, b1);
      }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (rows[r] >= p.tq) continue;
    uint16_t* out = dq + (base + rows[r]) * D;
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn)
      *reinterpret_cast<uint32_t*>(out + dn * 8 + t * 2) = pack2<BF16>(dqa[dn][r * 2] * p.scale, dqa[dn][r * 2 + 1] * p.scale);
  }
}

// Fused backward (FlashAttention-2 order): a block owns 64 keys of one (batch, kv head), 4 warps of
// 16 keys, and walks the query tiles of every head sharing that kv head. Per tile:
//   S^T = K Q^T, dP^T = V dO^T, P^T = 2^(S^T scale2 - lse2), dS^T = P^T (dP^T - delta)
//   dV += P^T dO and dK += dS^T Q in registers (one writer each),
//   dQ += dS K through shared memory (dS^T) and f32 vector atomics into dq_acc.
// Five GEMMs per tile against seven for the two-kernel deterministic path. Q, dO, lse and delta
// tiles are double-buffered: tile i + 1 loads while tile i is computed.
constexpr int kBwdTile = 64, kLdS = kBwdTile + kPad;


__device__ __forceinline__ void red_add2(float* at, float x, float y) {
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(at), "f"(x), "f"(y) : "memory");
}
// A fragment (16 x 16, rows r0.., columns k0..) of X^T, where X is stored [k][r] in shared memory.
__device__ __forceinline__ void ldsm_a_trans(uint32_t (&a)[4], const uint16_t* x, int ld, int r0, int k0, int lane) {
  ldsm_x4_trans(a, x + (k0 + lane % 8 + (lane / 16) * 8) * ld + r0 + ((lane / 8) % 2) * 8);
}

template <int D, bool BF16, bool ALIBI, int NW>
__global__ void __launch_bounds__(NW * 32) flash_bwd_fused_tc(TcParams p, const uint16_t* __restrict__ q,
    const uint16_t* __restrict__ k, const uint16_t* __restrict__ v, const uint16_t* __restrict__ dout,
    const float* __restrict__ lse, const float* __restrict__ delta, float* __restrict__ dq_acc,
    uint16_t* __restrict__ dk, uint16_t* __restrict__ dv) {
  constexpr int LD = D + kPad, T = kBwdTile, KB = 16 * NW;  // query rows per tile, keys per block
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* ks = smem;
  uint16_t* vs = ks + KB * LD;
  uint16_t* qbuf = vs + KB * LD;        // two Q tiles
  uint16_t* dobuf = qbuf + 2 * T * LD;  // two dO tiles
  uint16_t* dss = dobuf + 2 * T * LD;   // dS^T [key][query]
  float* stats = reinterpret_cast<float*>(dss + KB * kLdS);  // [buffer][lse | delta][T]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int tq = int(p.tq), tk = int(p.tk), offset = tk - tq;
  const KeyBlockWalk walk(p, KB, T);
  const int b = walk.b, hk = walk.hk, k0 = walk.k0, total = walk.total;
  const uint16_t* kg = k + ((int64_t(b) * p.kv_heads + hk) * p.tk) * D;
  const uint16_t* vg = v + ((int64_t(b) * p.kv_heads + hk) * p.tk) * D;
  auto stage = [&](int i, int buf) {  // query tile i of the walk (head-major) into buffer buf
    const int h = walk.head(i), q0 = walk.q0(i, T);
    const int64_t base = (int64_t(b) * p.heads + h) * p.tq;
    stage_tile<D, T>(qbuf + buf * T * LD, q + base * D, q0, p.tq);
    stage_tile<D, T>(dobuf + buf * T * LD, dout + base * D, q0, p.tq);
    if (threadIdx.x < T) {
      const bool ok = q0 + int(threadIdx.x) < tq;
      const int64_t at = ok ? base + q0 + threadIdx.x : 0;
      cp_async4(stats + buf * 2 * T + threadIdx.x, lse + at, ok);
      cp_async4(stats + buf * 2 * T + T + threadIdx.x, delta + at, ok);
    }
  };
  stage_tile<D, KB>(ks, kg, k0, p.tk);
  stage_tile<D, KB>(vs, vg, k0, p.tk);
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
    if (i + 1 < total) stage(i + 1, buf ^ 1);
    cp_async_commit();
    cp_async_wait_pending<1>();  // everything but the tile just issued has landed
    __syncthreads();
    const uint16_t* qs = qbuf + buf * T * LD;
    const uint16_t* dos = dobuf + buf * T * LD;
    const float* ls = stats + buf * 2 * T;
    const float* dl = ls + T;

    // S^T and dP^T (16 keys x 64 queries per warp)
    float st[T / 8][4], dpt[T / 8][4];
#pragma unroll
    for (int n = 0; n < T / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) st[n][e] = dpt[n][e] = 0.f;
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc) {
      uint32_t ak[4], av[4];
      ldsm_a(ak, ks, LD, warp * 16, kc * 16, lane);
      ldsm_a(av, vs, LD, warp * 16, kc * 16, lane);
#pragma unroll
      for (int n = 0; n < T / 8; n += 2) {
        uint32_t bq[4], bo[4];
        ldsm_b_rows_n(bq, qs, LD, n * 8, kc * 16, lane);
        mma<BF16>(st[n], ak, bq[0], bq[1]);
        mma<BF16>(st[n + 1], ak, bq[2], bq[3]);
        ldsm_b_rows_n(bo, dos, LD, n * 8, kc * 16, lane);
        mma<BF16>(dpt[n], av, bo[0], bo[1]);
        mma<BF16>(dpt[n + 1], av, bo[2], bo[3]);
      }
    }
    // P^T and dS^T; masks only on tiles that cross a sequence end or the diagonal
    const bool edge = q0 + T > tq || k0 + KB > tk || (p.causal && k0 + KB - 1 > offset + q0);
    const float slope2 = ALIBI ? p.slopes[h] * kLog2e : 0.f;
    uint32_t pa[T / 16][4], dsa[T / 16][4];
#pragma unroll
    for (int n = 0; n < T / 8; ++n) {
      float pv[4], dsv[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = n * 8 + t * 2 + (e & 1), query = q0 + col, key = keys[e >> 1], qpos = offset + query;
        float x = fmaf(st[n][e], scale2, -ls[col] * kLog2e);
        if constexpr (ALIBI) x -= slope2 * float(qpos - key);
        pv[e] = ex2(x);  // rows without keys have lse = +inf: weight 0
        if (edge && (query >= tq || key >= tk || (p.causal && key > qpos))) pv[e] = 0.f;
        dsv[e] = pv[e] * (dpt[n][e] - dl[col]);
      }
      pack_a<BF16>(pa, n, pv);
      pack_a<BF16>(dsa, n, dsv);
      // dS^T to shared memory for the dQ product (rows: this warp's keys)
      *reinterpret_cast<uint32_t*>(dss + (warp * 16 + g) * kLdS + n * 8 + t * 2) = dsa[n / 2][(n % 2) * 2 + 0];
      *reinterpret_cast<uint32_t*>(dss + (warp * 16 + g + 8) * kLdS + n * 8 + t * 2) = dsa[n / 2][(n % 2) * 2 + 1];
    }
    // dV += P^T dO, dK += dS^T Q
#pragma unroll
    for (int j = 0; j < T / 16; ++j)
#pragma unroll
      for (int dn = 0; dn < D / 8; dn += 2) {
        uint32_t bo[4], bq[4];
        ldsm_b_rows_k(bo, dos, LD, j * 16, dn * 8, lane);
        mma<BF16>(dva[dn], pa[j], bo[0], bo[1]);
        mma<BF16>(dva[dn + 1], pa[j], bo[2], bo[3]);
        ldsm_b_rows_k(bq, qs, LD, j * 16, dn * 8, lane);
        mma<BF16>(dka[dn], dsa[j], bq[0], bq[1]);
        mma<BF16>(dka[dn + 1], dsa[j], bq[2], bq[3]);
      }
    __syncthreads();  // dS^T complete
    // dQ += dS K, added atomically in f32 (other key blocks add too). Warp w takes 16 queries
    // ((w % 4) * 16..) and D / (NW / 4) columns of the 64 x D tile, over all KB keys.
    constexpr int CS = NW / 4, DW = D / CS;
    const int qr0 = (warp % 4) * 16, c0 = (warp / 4) * DW;
    uint32_t as[KB / 16][4];
#pragma unroll
    for (int kc = 0; kc < KB / 16; ++kc) ldsm_a_trans(as[kc], dss, kLdS, qr0, kc * 16, lane);
    const int rows[2] = {q0 + qr0 + g, q0 + qr0 + g + 8};
    float* dqh = dq_acc + ((int64_t(b) * p.heads + h) * p.tq) * D;
#pragma unroll
    for (int dn = 0; dn < DW / 8; dn += 2) {
      float acc[2][4] = {};
#pragma unroll
      for (int kc = 0; kc < KB / 16; ++kc) {
        uint32_t bk[4];
        ldsm_b_rows_k(bk, ks, LD, kc * 16, c0 + dn * 8, lane);
        mma<BF16>(acc[0], as[kc], bk[0], bk[1]);
        mma<BF16>(acc[1], as[kc], bk[2], bk[3]);
      }
#pragma unroll
      for (int r = 0; r < 2; ++r)
        if (rows[r] < tq)
#pragma unroll
          for (int u = 0; u < 2; ++u)
            red_add2(dqh + int64_t(rows[r]) * D + c0 + (dn + u) * 8 + t * 2, acc[u][r * 2], acc[u][r * 2 + 1]);
    }
  }
  cp_async_wait_pending<0>();
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (keys[r] >= tk) continue;
    const int64_t at = ((int64_t(b) * p.kv_heads + hk) * p.tk + keys[r]) * D;
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn) {
      *reinterpret_cast<uint32_t*>(dk + at + dn * 8 + t * 2) = pack2<BF16>(dka[dn][r * 2] * p.scale, dka[dn][r * 2 + 1] * p.scale);
      *reinterpret_cast<uint32_t*>(dv + at + dn * 8 + t * 2) = pack2<BF16>(dva[dn][r * 2], dva[dn][r * 2 + 1]);
    }
  }
}

// dq = scale * dq_acc, rounded to the input type.
template <bool BF16>
__global__ void dq_from_acc(const float* __restrict__ acc, uint16_t* __restrict__ dq, int64_t n, float scale, bool vec) {
  for (int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 4; i < n; i += int64_t(gridDim.x) * blockDim.x * 4) {
    if (vec && i + 4 <= n) {
      const float4 x = *reinterpret_cast<const float4*>(acc + i);
      uint2 packed{pack2<BF16>(x.x * scale, x.y * scale), pack2<BF16>(x.z * scale, x.w * scale)};
      *reinterpret_cast<uint2*>(dq + i) = packed;
    } else {
      for (int64_t j = i; j < min(n, i + 4); ++j) dq[j] = to_bits<BF16>(acc[j] * scale);
    }
  }
}

template <int D, bool BF16>
void launch_bwd_tc(const ExecContext& ctx, const AttentionParams& a, const View& q, const View& k, const View& v,
                   const View& dout, const float* lse, const float* delta, const View& dq, const View& dk,
                   const View& dv) {
  TcParams p = tc_params(a);
  const size_t smem = size_t(4 * 64) * (D + kPad) * sizeof(uint16_t);
  auto k1 = flash_bwd_dkdv_tc<D, BF16>;
  auto k2 = flash_bwd_dq_tc<D, BF16>;
  NX_CUDA_CHECK(cudaFuncSetAttribute(k1, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  NX_CUDA_CHECK(cudaFuncSetAttribute(k2, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  auto u16 = [](const View& x) { return static_cast<const uint16_t*>(x.data); };
  k1<<<unsigned(a.batch * a.kv_heads * ((a.tk + 63) / 64)), kWarps * 32, smem, stream_of(ctx)>>>(
      p, u16(q), u16(k), u16(v), u16(dout), lse, delta, static_cast<uint16_t*>(dk.data), static_cast<uint16_t*>(dv.data));
  NX_CUDA_LAUNCH_CHECK();
  k2<<<unsigned(a.batch * a.heads * ((a.tq + 63) / 64)), kWarps * 32, smem, stream_of(ctx)>>>(
      p, u16(q), u16(k), u16(v), u16(dout), lse, delta, static_cast<uint16_t*>(dq.data));
  NX_CUDA_LAUNCH_CHECK();
}

// Keys per block of the fused backward: 16 per warp. 8 warps (128 keys) halve the dQ atomics and
// the Q/dO tile reads per key against 4 warps (64 keys).
int bwd_warps() {
  static const int n = [] {
    const char* e = std::getenv("NEXUS_FLASH_BWD_WARPS");  // tuning knob for benchmarks: 4 or 8
    return e && std::atoi(e) == 4 ? 4 : 8;
  }();
  return n;
}

// NEXUS_FLASH_KERNEL=mma keeps Hopper on the mma.sync kernels (the tests compare both families;
// read per call so a test can switch it).
bool hopper_kernels_wanted() {
  const char* kind = std::getenv("NEXUS_FLASH_KERNEL");
  return !(kind && std::string_view(kind) == "mma");
}

template <int D, bool BF16>
void launch_bwd_fused_tc(const ExecContext& ctx, const AttentionParams& a, const View& q, const View& k, const View& v,
                         const View& dout, const float* lse, const float* delta, const View& dq, const View& dk,
                         const View& dv) {
  TcParams p = tc_params(a);
  const int64_t n = a.batch * a.heads * a.tq * D;
  Scratch acc(ctx, size_t(n) * sizeof(float));
  NX_CUDA_CHECK(cudaMemsetAsync(acc.ptr, 0, size_t(n) * sizeof(float), stream_of(ctx)));
  auto u16 = [](const View& x) { return static_cast<const uint16_t*>(x.data); };
  auto go = [&](auto nw_tag) {
    constexpr int NW = decltype(nw_tag)::value, KB = 16 * NW;
    const size_t smem = size_t((2 * KB + 4 * kBwdTile) * (D + kPad) + KB * kLdS) * sizeof(uint16_t) +
                        4 * kBwdTile * sizeof(float);
    auto kernel = a.alibi_slopes.empty() ? flash_bwd_fused_tc<D, BF16, false, NW> : flash_bwd_fused_tc<D, BF16, true, NW>;
    NX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    kernel<<<unsigned(a.batch * a.kv_heads * ((a.tk + KB - 1) / KB)), NW * 32, smem, stream_of(ctx)>>>(
        p, u16(q), u16(k), u16(v), u16(dout), lse, delta, static_cast<float*>(acc.ptr), static_cast<uint16_t*>(dk.data),
        static_cast<uint16_t*>(dv.data));
  };
  if (bwd_warps() == 4) go(std::integral_constant<int, 4>{});
  else go(std::integral_constant<int, 8>{});
  NX_CUDA_LAUNCH_CHECK();
  const bool vec = (reinterpret_cast<uintptr_t>(dq.data) & 7) == 0;
  dq_from_acc<BF16><<<unsigned(std::min<int64_t>((n / 4 + 255) / 256 + 1, 65535)), 256, 0, stream_of(ctx)>>>(
      static_cast<const float*>(acc.ptr), static_cast<uint16_t*>(dq.data), n, p.scale, vec);
  NX_CUDA_LAUNCH_CHECK();
}

template <int D, bool BF16>
void launch_tc(const ExecContext& ctx, const AttentionParams& a, const View& q, const View& k, const View& v,
               const View& out, const View& lse) {
  TcParams p = tc_params(a);
  const size_t smem = size_t(kFwdRows + 4 * kFwdKeys) * (D + kPad) * sizeof(uint16_t);
  auto kernel = a.alibi_slopes.empty() ? flash_fwd_tc<D, BF16, false> : flash_fwd_tc<D, BF16, true>;
  NX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const int64_t blocks = a.batch * a.heads * ((a.tq + kFwdRows - 1) / kFwdRows);
  kernel<<<unsigned(blocks), kFwdWarps * 32, smem, stream_of(ctx)>>>(p, static_cast<const uint16_t*>(q.data),
      static_cast<const uint16_t*>(k.data), static_cast<const uint16_t*>(v.data), static_cast<uint16_t*>(out.data),
      static_cast<float*>(lse.data));
  NX_CUDA_LAUNCH_CHECK();
}

// go(D, BF16) with the call's head_dim (mma_head_dim holds) and type as compile-time constants.
template <class Go>
void dispatch_tc(int64_t dim, bool bf16, Go&& go) {
  with_head_dim(dim, [&](auto d_tag) { bf16 ? go(d_tag, std::true_type{}) : go(d_tag, std::false_type{}); });
}

}  // namespace

// Takes the tensor-core path when it applies: f16/bf16, head_dim 32, 64 or 128, at most 128 heads,
// and enough query rows to fill the tiles (few-query decode goes to the split-key kernel). Hopper
// runs its wgmma kernels at 64 and 128; head_dim 32 (small models, e.g. 8 heads of a 256-wide
// GPT) stays on mma.sync everywhere.
bool attention_tensor_core(const ExecContext& ctx, const AttentionParams& a, const View& q, const View& k,
                           const View& v, const View& out, const View& lse) {
  const bool half = q.dtype == DType::BF16 || q.dtype == DType::F16;
  if (!half || !mma_head_dim(a.dim) || a.heads > 128 || a.tq <= 4 || a.tk >= INT32_MAX) return false;
  if (hopper_kernels_wanted() && attention_wgmma(ctx, a, q, k, v, out, lse)) return true;
  dispatch_tc(a.dim, q.dtype == DType::BF16, [&](auto d_tag, auto bf16_tag) {
    launch_tc<decltype(d_tag)::value, decltype(bf16_tag)::value>(ctx, a, q, k, v, out, lse);
  });
  return true;
}

}  // namespace nx::cuda

namespace nx::cuda {
// Tensor-core backward for the same cases as the forward; delta = rowsum(dO * O) comes in f32.
bool attention_backward_tensor_core(const ExecContext& ctx, const AttentionParams& a, const View& q, const View& k,
                                    const View& v, const View& dout, const float* lse, const float* delta,
                                    const View& dq, const View& dk, const View& dv) {
  const bool half = q.dtype == DType::BF16 || q.dtype == DType::F16;
  if (!half || !mma_head_dim(a.dim) || a.heads > 128) return false;
  // Hopper: the wgmma backward, in deterministic mode too (dQ's parts added in a fixed order).
  // Elsewhere, deterministic: dQ by query blocks (two kernels, seven GEMMs per tile); else one
  // kernel with f32 atomics for dQ (five GEMMs), whose sums may differ in the last bits.
  if (a.tk < INT32_MAX && hopper_kernels_wanted() &&
      attention_backward_wgmma(ctx, a, q, k, v, dout, lse, delta, dq, dk, dv))
    return true;
  dispatch_tc(a.dim, q.dtype == DType::BF16, [&](auto d_tag, auto bf16_tag) {
    constexpr int D = decltype(d_tag)::value;
    constexpr bool B16 = decltype(bf16_tag)::value;
    if (a.deterministic || a.tk >= INT32_MAX) launch_bwd_tc<D, B16>(ctx, a, q, k, v, dout, lse, delta, dq, dk, dv);
    else launch_bwd_fused_tc<D, B16>(ctx, a, q, k, v, dout, lse, delta, dq, dk, dv);
  });
  return true;
}
}  // namespace nx::cuda
