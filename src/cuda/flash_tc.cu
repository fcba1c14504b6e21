// Tensor-core flash attention forward for bf16/f16 with head_dim 64 or 128 (FlashAttention-2
// structure on mma.sync m16n8k16).
//
// A block owns 64 query rows of one (batch, head): 4 warps of 16 rows. Q is staged once in shared
// memory and kept in registers as mma A fragments; K and V tiles of 64 keys stream through shared
// memory (cp.async, rows padded by 16 bytes so fragment loads hit 32 distinct banks). Per tile:
// S = Q K^T on tensor cores (f32 accumulators), scale/ALiBi/causal mask in registers, online
// softmax across the 4 lanes that share a row, P rounded to the input type and fed straight from
// the S accumulators into the A fragments of O += P V (V's B fragments come from ldmatrix.trans).
// The output is divided by the row sum at the end and the log-sum-exp saved for the backward.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "cuda/kernels.cuh"

namespace nx::cuda {
namespace {

constexpr int kBr = 64, kBc = 64, kWarps = 4, kPad = 8;

struct TcParams {
  int64_t heads, kv_heads, tq, tk;
  float scale;
  bool causal, alibi;
  float slopes[128];
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.commit_group;\n" ::);
  asm volatile("cp.async.wait_group 0;\n" ::);
}

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

template <bool BF16>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (BF16) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

template <bool BF16>
__device__ __forceinline__ uint16_t to_bits(float x) {
  if constexpr (BF16) return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  else return __half_as_ushort(__float2half_rn(x));
}

template <int D, bool BF16>
__global__ void __launch_bounds__(kWarps * 32) flash_fwd_tc(TcParams p, const uint16_t* __restrict__ q,
                                                            const uint16_t* __restrict__ k, const uint16_t* __restrict__ v,
                                                            uint16_t* __restrict__ out, float* __restrict__ lse) {
  constexpr int LD = D + kPad;  // padded row, in 16-bit elements
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* qs = smem;
  uint16_t* ks = qs + kBr * LD;
  uint16_t* vs = ks + kBc * LD;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t nqb = (p.tq + kBr - 1) / kBr;
  const int64_t qb = blockIdx.x % nqb, bh = blockIdx.x / nqb;
  const int h = int(bh % p.heads), b = int(bh / p.heads), hk = h / int(p.heads / p.kv_heads);
  const int64_t q0 = qb * kBr, offset = p.tk - p.tq;
  const uint16_t* qg = q + ((int64_t(b) * p.heads + h) * p.tq) * D;
  const uint16_t* kg = k + ((int64_t(b) * p.kv_heads + hk) * p.tk) * D;
  const uint16_t* vg = v + ((int64_t(b) * p.kv_heads + hk) * p.tk) * D;
  constexpr int kChunks = D / 8;  // 16-byte chunks per row

  for (int c = threadIdx.x; c < kBr * kChunks; c += blockDim.x) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const bool ok = q0 + r < p.tq;
    cp_async16(qs + r * LD + col, qg + (ok ? (q0 + r) * D + col : 0), ok);
  }
  cp_async_wait_all();
  __syncthreads();

  // Q as A fragments: rows warp*16 + g (+8), columns kc*16 + t*2 (+1) (+8)
  uint32_t qa[D / 16][4];
#pragma unroll
  for (int kc = 0; kc < D / 16; ++kc) {
    const uint16_t* r0 = qs + (warp * 16 + g) * LD + kc * 16 + t * 2;
    const uint16_t* r1 = r0 + 8 * LD;
    qa[kc][0] = *reinterpret_cast<const uint32_t*>(r0);
    qa[kc][1] = *reinterpret_cast<const uint32_t*>(r1);
    qa[kc][2] = *reinterpret_cast<const uint32_t*>(r0 + 8);
    qa[kc][3] = *reinterpret_cast<const uint32_t*>(r1 + 8);
  }

  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const int64_t row_pos[2] = {offset + q0 + warp * 16 + g, offset + q0 + warp * 16 + g + 8};
  const float log2e = 1.4426950408889634f, scale2 = p.scale * log2e;
  const float slope2 = p.alibi ? p.slopes[h] * log2e : 0.f;
  const int64_t key_end = p.causal ? min(p.tk, offset + min(p.tq, q0 + kBr)) : p.tk;

  for (int64_t j0 = 0; j0 < key_end; j0 += kBc) {
    __syncthreads();  // every warp is done with the previous K/V tile
    for (int c = threadIdx.x; c < kBc * kChunks; c += blockDim.x) {
      const int r = c / kChunks, col = (c % kChunks) * 8;
      const bool ok = j0 + r < p.tk;
      const int64_t src = ok ? (j0 + r) * D + col : 0;
      cp_async16(ks + r * LD + col, kg + src, ok);
      cp_async16(vs + r * LD + col, vg + src, ok);
    }
    cp_async_wait_all();
    __syncthreads();

    // S = Q K^T (16 x 64 per warp), in log2 units
    float s[kBc / 8][4];
#pragma unroll
    for (int n = 0; n < kBc / 8; ++n) {
      s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
      for (int kc = 0; kc < D / 16; ++kc) {
        const uint16_t* kr = ks + (n * 8 + g) * LD + kc * 16 + t * 2;
        mma<BF16>(s[n], qa[kc], *reinterpret_cast<const uint32_t*>(kr), *reinterpret_cast<const uint32_t*>(kr + 8));
      }
    }
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int n = 0; n < kBc / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t key = j0 + n * 8 + t * 2 + (e & 1);
        const int r = e >> 1;
        float x = s[n][e] * scale2;
        if (p.alibi) x -= slope2 * float(row_pos[r] - key);
        if (key >= p.tk || (p.causal && key > row_pos[r])) x = -INFINITY;
        s[n][e] = x;
        mx[r] = fmaxf(mx[r], x);
      }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    }
    float corr[2], base[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      base[r] = mx[r] == -INFINITY ? 0.f : mx[r];  // a fully masked row so far stays at zero
      corr[r] = exp2f(m[r] - base[r]);
      m[r] = mx[r];
      l[r] *= corr[r];
    }
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      o[i][0] *= corr[0]; o[i][1] *= corr[0];
      o[i][2] *= corr[1]; o[i][3] *= corr[1];
    }
    // P = 2^(S - m): summed in f32, rounded to the input type as the A operand of P V
    uint32_t pa[kBc / 16][4];
#pragma unroll
    for (int n = 0; n < kBc / 8; ++n) {
      const float p0 = exp2f(s[n][0] - base[0]), p1 = exp2f(s[n][1] - base[0]);
      const float p2 = exp2f(s[n][2] - base[1]), p3 = exp2f(s[n][3] - base[1]);
      l[0] += p0 + p1;
      l[1] += p2 + p3;
      pa[n / 2][(n % 2) * 2 + 0] = pack2<BF16>(p0, p1);
      pa[n / 2][(n % 2) * 2 + 1] = pack2<BF16>(p2, p3);
    }
    // O += P V: B fragments of V [key][d] through ldmatrix.trans (lanes 0-15 address key rows)
#pragma unroll
    for (int kc = 0; kc < kBc / 16; ++kc) {
#pragma unroll
      for (int dn = 0; dn < D / 8; ++dn) {
        uint32_t b0, b1;
        const uint16_t* row = vs + (kc * 16 + (lane % 16)) * LD + dn * 8;
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                     : "=r"(b0), "=r"(b1)
                     : "r"(smem_addr(row)));
        mma<BF16>(o[dn], pa[kc], b0, b1);
      }
    }
  }
  // row sums across the quad, then normalize and store
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  const int64_t rows[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (rows[r] >= p.tq) continue;
    const float inv = l[r] > 0.f ? 1.f / l[r] : 0.f;
    uint16_t* orow = out + ((int64_t(b) * p.heads + h) * p.tq + rows[r]) * D;
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn) {
      const uint32_t packed = pack2<BF16>(o[dn][r * 2] * inv, o[dn][r * 2 + 1] * inv);
      *reinterpret_cast<uint32_t*>(orow + dn * 8 + t * 2) = packed;
    }
    if (t == 0)
      lse[(int64_t(b) * p.heads + h) * p.tq + rows[r]] = l[r] > 0.f ? (m[r] + log2f(l[r])) / log2e : INFINITY;
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
__device__ __forceinline__ void load_b_rows_k(const uint16_t* x, int ld, int k0, int n0, int lane, uint32_t& b0, uint32_t& b1) {
  const uint16_t* row = x + (k0 + (lane % 16)) * ld + n0;
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n" : "=r"(b0), "=r"(b1) : "r"(smem_addr(row)));
}

// Tile of 64 rows x D from global rows [r0, r0 + 64) of a [n, D] matrix into padded shared memory.
template <int D>
__device__ __forceinline__ void stage_tile(uint16_t* dst, const uint16_t* src, int64_t r0, int64_t n) {
  constexpr int kChunks = D / 8;
  for (int c = threadIdx.x; c < 64 * kChunks; c += blockDim.x) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const bool ok = r0 + r < n;
    cp_async16(dst + r * (D + kPad) + col, src + (ok ? (r0 + r) * D + col : 0), ok);
  }
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
  stage_tile<D>(ks, kg, k0, p.tk);
  stage_tile<D>(vs, vg, k0, p.tk);
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
      stage_tile<D>(qs, q + base * D, q0, p.tq);
      stage_tile<D>(dos, dout + base * D, q0, p.tq);
      if (threadIdx.x < 64) {
        const bool ok = q0 + threadIdx.x < p.tq;
        ls[threadIdx.x] = ok ? lse[base + q0 + threadIdx.x] : INFINITY;
        dl[threadIdx.x] = ok ? delta[base + q0 + threadIdx.x] : 0.f;
      }
      cp_async_wait_all();
      __syncthreads();
      float st[8][4], dpt[8][4];
#pragma unroll
      for (int n = 0; n < 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) st[n][e] = dpt[n][e] = 0.f;
#pragma unroll
        for (int kc = 0; kc < D / 16; ++kc) {
          uint32_t a[4], b0, b1;
          load_a(ks, LD, warp * 16, kc, g, t, a);
          load_b_rows_n(qs, LD, n * 8, kc, g, t, b0, b1);
          mma<BF16>(st[n], a, b0, b1);
          load_a(vs, LD, warp * 16, kc, g, t, a);
          load_b_rows_n(dos, LD, n * 8, kc, g, t, b0, b1);
          mma<BF16>(dpt[n], a, b0, b1);
        }
      }
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
        pa[n / 2][(n % 2) * 2 + 0] = pack2<BF16>(pv[0], pv[1]);
        pa[n / 2][(n % 2) * 2 + 1] = pack2<BF16>(pv[2], pv[3]);
        dsa[n / 2][(n % 2) * 2 + 0] = pack2<BF16>(dsv[0], dsv[1]);
        dsa[n / 2][(n % 2) * 2 + 1] = pack2<BF16>(dsv[2], dsv[3]);
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
  stage_tile<D>(qs, q + base * D, q0, p.tq);
  stage_tile<D>(dos, dout + base * D, q0, p.tq);
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
    stage_tile<D>(ks, kg, j0, p.tk);
    stage_tile<D>(vs, vg, j0, p.tk);
    cp_async_wait_all();
    __syncthreads();
    float s[8][4], dp[8][4];
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] = dp[n][e] = 0.f;
#pragma unroll
      for (int kc = 0; kc < D / 16; ++kc) {
        uint32_t a[4], b0, b1;
        load_a(qs, LD, warp * 16, kc, g, t, a);
        load_b_rows_n(ks, LD, n * 8, kc, g, t, b0, b1);
        mma<BF16>(s[n], a, b0, b1);
        load_a(dos, LD, warp * 16, kc, g, t, a);
        load_b_rows_n(vs, LD, n * 8, kc, g, t, b0, b1);
        mma<BF16>(dp[n], a, b0, b1);
      }
    }
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
      dsa[n / 2][(n % 2) * 2 + 0] = pack2<BF16>(dsv[0], dsv[1]);
      dsa[n / 2][(n % 2) * 2 + 1] = pack2<BF16>(dsv[2], dsv[3]);
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

TcParams tc_params(const AttentionParams& a) {
  TcParams p{};
  p.heads = a.heads; p.kv_heads = a.kv_heads; p.tq = a.tq; p.tk = a.tk;
  p.scale = float(a.scale);
  p.causal = a.causal;
  p.alibi = !a.alibi_slopes.empty();
  for (size_t i = 0; i < a.alibi_slopes.size(); ++i) p.slopes[i] = float(a.alibi_slopes[i]);
  return p;
}

template <int D, bool BF16>
void launch_bwd_tc(const AttentionParams& a, const View& q, const View& k, const View& v, const View& dout,
                   const float* lse, const float* delta, const View& dq, const View& dk, const View& dv) {
  TcParams p = tc_params(a);
  const size_t smem = size_t(4 * 64) * (D + kPad) * sizeof(uint16_t);
  auto k1 = flash_bwd_dkdv_tc<D, BF16>;
  auto k2 = flash_bwd_dq_tc<D, BF16>;
  NX_CUDA_CHECK(cudaFuncSetAttribute(k1, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  NX_CUDA_CHECK(cudaFuncSetAttribute(k2, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  auto u16 = [](const View& x) { return static_cast<const uint16_t*>(x.data); };
  k1<<<unsigned(a.batch * a.kv_heads * ((a.tk + 63) / 64)), kWarps * 32, smem, stream()>>>(
      p, u16(q), u16(k), u16(v), u16(dout), lse, delta, static_cast<uint16_t*>(dk.data), static_cast<uint16_t*>(dv.data));
  NX_CUDA_LAUNCH_CHECK();
  k2<<<unsigned(a.batch * a.heads * ((a.tq + 63) / 64)), kWarps * 32, smem, stream()>>>(
      p, u16(q), u16(k), u16(v), u16(dout), lse, delta, static_cast<uint16_t*>(dq.data));
  NX_CUDA_LAUNCH_CHECK();
}

template <int D, bool BF16>
void launch_tc(const AttentionParams& a, const View& q, const View& k, const View& v, const View& out, const View& lse) {
  TcParams p = tc_params(a);
  const size_t smem = size_t(kBr + 2 * kBc) * (D + kPad) * sizeof(uint16_t);
  auto kernel = flash_fwd_tc<D, BF16>;
  NX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const int64_t blocks = a.batch * a.heads * ((a.tq + kBr - 1) / kBr);
  kernel<<<unsigned(blocks), kWarps * 32, smem, stream()>>>(p, static_cast<const uint16_t*>(q.data),
      static_cast<const uint16_t*>(k.data), static_cast<const uint16_t*>(v.data), static_cast<uint16_t*>(out.data),
      static_cast<float*>(lse.data));
  NX_CUDA_LAUNCH_CHECK();
}

}  // namespace

// Takes the tensor-core path when it applies: f16/bf16, head_dim 64 or 128, at most 128 heads,
// and enough query rows to fill the tiles (few-query decode goes to the split-key kernel).
bool attention_tensor_core(const AttentionParams& a, const View& q, const View& k, const View& v, const View& out,
                           const View& lse) {
  const bool half = q.dtype == DType::BF16 || q.dtype == DType::F16;
  if (!half || (a.dim != 64 && a.dim != 128) || a.heads > 128 || a.tq <= 4) return false;
  const bool bf16 = q.dtype == DType::BF16;
  if (a.dim == 64) bf16 ? launch_tc<64, true>(a, q, k, v, out, lse) : launch_tc<64, false>(a, q, k, v, out, lse);
  else bf16 ? launch_tc<128, true>(a, q, k, v, out, lse) : launch_tc<128, false>(a, q, k, v, out, lse);
  return true;
}

}  // namespace nx::cuda

namespace nx::cuda {
// Tensor-core backward for the same cases as the forward; delta = rowsum(dO * O) comes in f32.
bool attention_backward_tensor_core(const AttentionParams& a, const View& q, const View& k, const View& v,
                                    const View& dout, const float* lse, const float* delta, const View& dq,
                                    const View& dk, const View& dv) {
  const bool half = q.dtype == DType::BF16 || q.dtype == DType::F16;
  if (!half || (a.dim != 64 && a.dim != 128) || a.heads > 128) return false;
  const bool bf16 = q.dtype == DType::BF16;
  if (a.dim == 64) bf16 ? launch_bwd_tc<64, true>(a, q, k, v, dout, lse, delta, dq, dk, dv)
                        : launch_bwd_tc<64, false>(a, q, k, v, dout, lse, delta, dq, dk, dv);
  else bf16 ? launch_bwd_tc<128, true>(a, q, k, v, dout, lse, delta, dq, dk, dv)
            : launch_bwd_tc<128, false>(a, q, k, v, dout, lse, delta, dq, dk, dv);
  return true;
}
}  // namespace nx::cuda
