// Pieces shared by the tensor-core flash-attention kernels (flash_tc.cu on mma.sync, flash_wgmma.cu
// on Hopper's wgmma): parameters, cp.async, conversions and the online softmax over accumulator
// fragments laid out as mma.sync's m16n8 C (which is also wgmma's m64nN accumulator, per warp).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <type_traits>

#include "cuda/kernels.cuh"

namespace nx::cuda::flash {

struct TcParams {
  int64_t heads, kv_heads, tq, tk;
  float scale;
  bool causal, alibi;
  float slopes[128];
  // The forward's lazy rescale threshold (log2 units; -inf: rescale whenever a max grows), read by
  // kernels built with it (softmax_step's LAZY); NEXUS_FLASH_LAZY_RESCALE=0 turns it off to compare.
  float lazy_rescale;
  // The forward's loader refills a stage's K once that tile's S has landed, before its P V has
  // (NEXUS_FLASH_KV_SPLIT=0: with V, to compare).
  bool kv_split;
  // The wgmma forward runs a warpgroup's last tile of a block over its first half of the keys when
  // the warpgroup's rows see none of the rest (NEXUS_FLASH_HALF_TILE=0: the whole tile, to compare).
  bool half_tiles;
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Commits what was issued since the last commit, then waits for every group.
__device__ __forceinline__ void cp_async_wait_all() {
  cp_async_commit();
  asm volatile("cp.async.wait_group 0;\n" ::);
}

__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 4 : 0));
}
template <int N>
__device__ __forceinline__ void cp_async_wait_pending() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

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

// 2^x in one instruction (ex2.approx, ~2 ulp; flushes results below 2^-126 to zero, which no
// softmax weight can notice).
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// 2^x on the FMA pipe, for x <= 128 (smaller x gives 2^-125 or about that, never 0, so only
// scores that cannot be masked take it): x = n + f with n rounded to the nearest integer (added
// to 1.5 * 2^23, n lands in the low mantissa bits), 2^f on [-0.5, 0.5] by a degree-3 minimax
// polynomial (relative error 7.6e-5, under a bf16 weight's rounding, 2^-9), n added to the
// exponent bits. Eight FMA-pipe instructions against one MUFU one: the MUFU gives 16 results a
// clock an SM and the FMA pipe 128 instructions, so where the exponentials bound a tile, taking a
// few of them here shortens it (FlashAttention-4's trick on Blackwell).
__device__ __forceinline__ float ex2_fma(float x) {
  constexpr float kRound = 12582912.f;  // 1.5 * 2^23
  x = fmaxf(x, -125.f);
  const float t = x + kRound;
  const float f = x - (t - kRound);
  const float p = fmaf(fmaf(fmaf(0.0552226342f, f, 0.242615178f), f, 0.69325161f), f, 0.99992758f);
  return __int_as_float(__float_as_int(p) + (__float_as_int(t) << 23));
}

// One online-softmax step over S tiles (raw Q K^T in s; rows g and g + 8 of each m16 tile across
// the 4 lanes t that share them): ALiBi and masks, the running row max m (log2 units) and sum l,
// and s replaced by the unnormalized weights 2^(s * scale2 - m). Without ALiBi the max is taken
// on raw scores (scale2 > 0), so each weight costs one FFMA and one ex2. Returns in corr the
// factor the running output must be multiplied by (rescale_rows), which the caller may apply later
// (the wgmma kernel does, once the previous P V product has landed). P448: the weights are
// 448 times that, the whole e4m3 range (the FP8 forward; l then sums those).
// LAZY: a warp keeps its rows' reference maxima until one of them grows past its reference by more
// than `lazy` (log2 units), so that most tiles need no rescale of the output: the weights are
// then up to 2^lazy instead of 1 (bf16/f16 keep their relative precision; the sum and the
// output accumulate in f32), and the lse uses the same reference. Returns whether the maxima
// moved (the same on every lane of the warp); when not, corr is 1 and rescale_rows can be skipped.
// FMA_EXP: a mask over n % 8 of the column groups whose weights take ex2_fma instead of the MUFU
// (unmasked tiles only: a masked score must give exactly 0).
// COLS: the softmax covers the first COLS column groups of s only (0: all; the wgmma forward's half
// tiles).
template <bool ALIBI, bool MASK, bool P448 = false, bool LAZY = false, int FMA_EXP = 0, int COLS = 0, int MT, int NT>
__device__ __forceinline__ bool softmax_step(float (&s)[MT][NT][4], float (&m)[MT][2], float (&l)[MT][2],
                                             float (&corr)[MT][2], const int (&row_pos)[MT][2], int j0, int t,
                                             int tk, bool causal, float scale2, float slope2, float lazy = 0.f) {
  static_assert(!(P448 && LAZY), "FP8 weights must stay within e4m3's range");
  static_assert(!LAZY || MT == 1, "one vote per warp and tile: one m16 row tile");
  const float sc = ALIBI ? 1.f : scale2;  // what still multiplies s in the exponent
  constexpr int kCols = COLS > 0 ? COLS : NT;
  bool moved = true;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    float mx[2] = {-INFINITY, -INFINITY};
    // Masked: key >= tk, or causal and key > the row's position, i.e. key >= lim, one bound per
    // row. Element (n, e) holds key j0 + 2t + 8n + (e & 1), so the test is one compare of a
    // constant against the bound taken relative to j0 + 2t (two instructions an element).
    int lim[2] = {0, 0};
    if constexpr (MASK)
#pragma unroll
      for (int r = 0; r < 2; ++r) lim[r] = (causal ? min(tk, row_pos[mt][r] + 1) : tk) - (j0 + t * 2);
#pragma unroll
    for (int n = 0; n < kCols; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1, key = j0 + n * 8 + t * 2 + (e & 1);
        float x = s[mt][n][e];
        if constexpr (ALIBI) x = x * scale2 - slope2 * float(row_pos[mt][r] - key);
        if constexpr (MASK)
          if (n * 8 + (e & 1) >= lim[r]) x = -INFINITY;
        s[mt][n][e] = x;
        mx[r] = fmaxf(mx[r], x);
      }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    }
    if constexpr (LAZY) {  // a row that saw no key yet (m = -inf) grows with its first finite score
      const bool grows = mx[0] * sc > m[mt][0] + lazy || mx[1] * sc > m[mt][1] + lazy;
      moved = __any_sync(0xffffffffu, grows);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m_new = moved ? fmaxf(m[mt][r], mx[r] * sc) : m[mt][r];
      const float base = m_new == -INFINITY ? 0.f : m_new;  // a fully masked row so far stays at zero
      corr[mt][r] = ex2(m[mt][r] - base);
      m[mt][r] = m_new;
      float sum = l[mt][r] * corr[mt][r];
      const float shift = P448 ? base - 8.807354922057604f : base;  // log2(448)
#pragma unroll
      for (int n = 0; n < kCols; ++n) {
        const bool on_fma = !MASK && !P448 && ((FMA_EXP >> (n % 8)) & 1);
        const float x0 = fmaf(s[mt][n][r * 2], sc, -shift), x1 = fmaf(s[mt][n][r * 2 + 1], sc, -shift);
        const float p0 = on_fma ? ex2_fma(x0) : ex2(x0), p1 = on_fma ? ex2_fma(x1) : ex2(x1);
        sum += p0 + p1;
        s[mt][n][r * 2] = p0;
        s[mt][n][r * 2 + 1] = p1;
      }
      l[mt][r] = sum;
    }
  }
  return moved;
}

// o (accumulator rows g, g + 8 of each m16 tile) *= corr of its row.
template <int MT, int DT>
__device__ __forceinline__ void rescale_rows(float (&o)[MT][DT][4], const float (&corr)[MT][2]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int i = 0; i < DT; ++i) {
      o[mt][i][0] *= corr[mt][0];
      o[mt][i][1] *= corr[mt][0];
      o[mt][i][2] *= corr[mt][1];
      o[mt][i][3] *= corr[mt][1];
    }
}

// softmax_step with the output rescaled at once.
template <bool ALIBI, bool MASK, int MT, int NT, int DT>
__device__ __forceinline__ void online_softmax(float (&s)[MT][NT][4], float (&o)[MT][DT][4], float (&m)[MT][2],
                                               float (&l)[MT][2], const int (&row_pos)[MT][2], int j0, int t, int tk,
                                               bool causal, float scale2, float slope2) {
  float corr[MT][2];
  softmax_step<ALIBI, MASK>(s, m, l, corr, row_pos, j0, t, tk, causal, scale2, slope2);
  rescale_rows(o, corr);
}

// The walk of a backward block that owns KB keys of one (batch, kv head): the query tiles of T rows,
// of every head sharing that kv head, that see any of its keys (causal: those at or after the
// first key), head-major. Tile i is query rows q0(i).. of head head(i).
struct KeyBlockWalk {
  int b, hk, k0, group, first_q, tiles_per_head, total;
  __device__ KeyBlockWalk(const TcParams& p, int KB, int T) {
    const int tq = int(p.tq), tk = int(p.tk), nkb = (tk + KB - 1) / KB;
    const int64_t bhk = blockIdx.x / nkb;
    hk = int(bhk % p.kv_heads);
    b = int(bhk / p.kv_heads);
    k0 = int(blockIdx.x % nkb) * KB;
    group = int(p.heads / p.kv_heads);
    first_q = p.causal ? max(0, k0 - (tk - tq)) / T * T : 0;
    tiles_per_head = first_q < tq ? (tq - first_q + T - 1) / T : 0;
    total = tiles_per_head * group;
  }
  __device__ int head(int i) const { return hk * group + i / tiles_per_head; }
  __device__ int q0(int i, int T) const { return first_q + (i % tiles_per_head) * T; }
};

inline TcParams tc_params(const AttentionParams& a) {
  TcParams p{};
  p.heads = a.heads; p.kv_heads = a.kv_heads; p.tq = a.tq; p.tk = a.tk;
  p.scale = float(a.scale);
  p.causal = a.causal;
  p.alibi = !a.alibi_slopes.empty();
  for (size_t i = 0; i < a.alibi_slopes.size(); ++i) p.slopes[i] = float(a.alibi_slopes[i]);
  return p;
}

// The head_dims the mma.sync kernels (bf16/f16 and TF32) are built for.
inline bool mma_head_dim(int64_t d) { return d == 32 || d == 64 || d == 128; }

// go(D) with the call's head_dim as a compile-time constant (callers check mma_head_dim first).
template <class Go>
void with_head_dim(int64_t dim, Go&& go) {
  if (dim == 32) go(std::integral_constant<int, 32>{});
  else if (dim == 64) go(std::integral_constant<int, 64>{});
  else go(std::integral_constant<int, 128>{});
}

}  // namespace nx::cuda::flash
