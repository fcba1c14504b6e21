// Pieces of the tensor-core FP8 forward shared by its kernels (flash_fp8_wgmma.cu: cp.async loads, a
// launch block per query block; flash_fp8_tma.cu: TMA loads, persistent blocks): the key order of
// the V^T tiles and P's packing into e4m3 A fragments, the scales, the output stores.
#pragma once
#include "cuda/flash_sm90.cuh"

namespace nx::cuda::flash {

constexpr int kFp8D = 128, kFp8Keys = 128, kFp8Rows = 128;
constexpr int kVtRows = kFp8D + 8;  // a V^T tile in shared memory: the head-dim rows, then 8 rows of ones
static_assert(kFp8Keys == kFp8KeyTile, "P is rounded at the running max of the definition's key tiles");

// Where key `pos` of a V^T tile comes from: position 16h + 4t + j of each group of 32 holds key
// 16h + 2t + (j & 1) + 8 (j >> 1). A thread's S accumulator holds, per 8-key block, keys 2t and
// 2t + 1 of rows g and g + 8; the e4m3 A fragment of a k32 step wants k = 4t..4t+3 (and 16 + 4t..)
// of those rows in one register each, so packing blocks 2c and 2c + 1 side by side is that fragment
// for this key order. (The fragment layouts: m64nNk32's 8-bit A fragment is row g + 8 (r % 2),
// k 4t + byte + 16 (r / 2) for register r, as CUTLASS's ALayout_64x32 decodes; the f32
// accumulator holds column 8n + 2t + (e % 2) of row g + 8 (e / 2) in element 4n + e.)
__host__ __device__ constexpr int fp8_key_at(int pos) {
  const int h = (pos % 32) / 16, t = (pos % 16) / 4, j = pos % 4;
  return pos / 32 * 32 + 16 * h + 2 * t + (j & 1) + 8 * (j >> 1);
}
// Every key of a tile lands exactly once.
constexpr bool fp8_key_order_is_a_permutation() {
  bool seen[kFp8Keys] = {};
  for (int p = 0; p < kFp8Keys; ++p) {
    const int key = fp8_key_at(p);
    if (key < 0 || key >= kFp8Keys || seen[key]) return false;
    seen[key] = true;
  }
  return true;
}
static_assert(fp8_key_order_is_a_permutation(), "fp8_key_at must permute each tile's keys");

// Byte `byte` of A register `reg` of k-step c comes from S accumulator block fp8_a_block, element
// fp8_a_elem (to_fragments packs by these).
__host__ __device__ constexpr int fp8_a_block(int c, int reg, int byte) { return 4 * c + 2 * (reg / 2) + byte / 2; }
__host__ __device__ constexpr int fp8_a_elem(int reg, int byte) { return 2 * (reg % 2) + byte % 2; }
// For every lane quad position t, register and byte: the A fragment's (row, k) (row g + 8 (reg % 2),
// k = 4t + byte + 16 (reg / 2)) and the S entry packed there (row g + 8 (elem / 2), key
// 8 block + 2t + elem % 2) are the same row, and the key is the one V^T holds at position k.
// (Swapping the two terms of fp8_key_at's within-quad step fails it.)
constexpr bool fp8_packing_matches_key_order() {
  for (int c = 0; c < kFp8Keys / 32; ++c)
    for (int t = 0; t < 4; ++t)
      for (int reg = 0; reg < 4; ++reg)
        for (int byte = 0; byte < 4; ++byte) {
          const int block = fp8_a_block(c, reg, byte), elem = fp8_a_elem(reg, byte);
          if (elem / 2 != reg % 2) return false;
          if (8 * block + 2 * t + elem % 2 != fp8_key_at(32 * c + 4 * t + byte + 16 * (reg / 2))) return false;
        }
  return true;
}
static_assert(fp8_packing_matches_key_order(), "P's packing and V^T's key order must agree");

// q, k and v scales: kind 0 one for the tensor, 1 one per (batch, head).
struct Fp8Scales {
  const float *q, *k, *v;
  int q_kind, k_kind, v_kind;
};
__device__ __forceinline__ float scale_of(const float* s, int kind, int64_t bh) { return kind == 0 ? s[0] : s[bh]; }

// Four f32 as e4m3 codes in one register, the first in the low byte (satfinite: at most 448).
__device__ __forceinline__ uint32_t pack4_e4m3(float x0, float x1, float x2, float x3) {
  uint16_t lo, hi;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(lo) : "f"(x1), "f"(x0));  // first operand: high byte
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(hi) : "f"(x3), "f"(x2));
  return uint32_t(lo) | uint32_t(hi) << 16;
}

// OUT: 0 f32, 1 bf16, 2 f16.
template <int OUT>
__device__ __forceinline__ void store2(void* out, int64_t at, float x, float y) {
  if constexpr (OUT == 0) *reinterpret_cast<float2*>(static_cast<float*>(out) + at) = make_float2(x, y);
  else *reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(out) + at) = pack2<OUT == 1>(x, y);
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// S (448 exp(s - m) of a 128-key tile) as k-step c's e4m3 A fragments: S blocks 4c .. 4c + 3 in
// fp8_key_at's order.
__device__ __forceinline__ void fp8_to_fragments(uint32_t (&pa)[kFp8Keys / 32][4], const float (&s)[1][kFp8Keys / 8][4]) {
#pragma unroll
  for (int c = 0; c < kFp8Keys / 32; ++c)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      auto at = [&](int byte) { return s[0][fp8_a_block(c, r, byte)][fp8_a_elem(r, byte)]; };
      pa[c][r] = pack4_e4m3(at(0), at(1), at(2), at(3));
    }
}
#endif

}  // namespace nx::cuda::flash

namespace nx::cuda {
// The TMA FP8 forward (flash_fp8_tma.cu) over V^T tiles already written (fp8_transpose_v's layout,
// `vt_tiles` a (batch, kv head)); false where it does not apply (no tensor map, sizes past its
// index range), the caller then takes another kernel.
bool attention_forward_fp8_tma(const ExecContext& ctx, const AttentionParams& a, const View& q, const View& q_scale,
                               const View& k, const View& k_scale, const void* vt, int64_t vt_tiles,
                               const View& v_scale, const View& out);
}  // namespace nx::cuda
