// The FP8 (e4m3) flash-attention forward on Hopper's warpgroup MMA (wgmma, sm_90a), head_dim 128,
// q and k scaled per tensor or per (batch, head): the op of attention_fp8.cu's reference kernel
// (ops.yaml attention_forward_fp8, P rounded at the running max of 128-key tiles) on the tensor
// cores. Plan and reasoning: docs/attention_8bit.md, "The tensor-core FP8 forward" and "The FP8
// forward on the bf16 forward's machinery".
//
// The bf16 forward (flash_wgmma.cu) carries over at its head_dim-64 byte geometry: an e4m3 row of
// 128 is 128 bytes, one 128-byte-swizzled column block, and S = Q K^T is m64n128k32 in four k-steps
// with the same descriptors; one TMA loader thread, the K and V stages released apart, two compute
// warpgroups taking turns, the overlap of tile j's softmax with P_{j-1} V_{j-1}, persistent launch
// blocks at up to kPersistentKeys keys (the next block's S_0 issued with a block's last P V) and
// output tiles stored through shared memory are the same (session 31: 0.62-0.94 -> 0.85-1.21 of
// our bf16 forward over the cp.async kernel of session 19). What differs:
// - FP8 wgmma reads both operands K-major, so P V reads V^T. A pre-pass (fp8_transpose_v) writes
//   it in 128-key tiles, zero past Tk, with the keys permuted within groups of 32 (fp8_key_at) so
//   that P's accumulator fragments are its A fragments after a plain pack (no shuffles).
// - V^T tiles in shared memory carry 8 rows of ones after the head dims, so P V is m64n136k32 and
//   accumulator columns 128..135 hold the sum of the rounded P, rescaled with O: the definition
//   divides by the sum of the rounded weights, which the tensor cores thus give exactly as rounded.
// - P is 448 exp(s - m) (the whole e4m3 range, m the running max in log2 units), packed with
//   satfinite conversions; the 448 cancels in O / sum. (The bf16 kernel's lazy rescale would let
//   weights pass 448.)
// - Each tile's [P V | sum P] comes from the tensor cores into its own accumulator and is added to
//   O in f32 registers. Hopper's FP8 MMA keeps fewer bits than f32 as it accumulates: one
//   accumulator over all keys lost 74% of the output at 16k keys of uniform attention (H200,
//   session 19; 8e-5 with the per-tile sum; summing every 2 or 4 tiles measured no faster, session
//   31). O is rescaled only where a row's max moved (corr is exactly 1 elsewhere). The second
//   accumulator takes registers, so the compute warpgroups raise theirs to 240 and the loader keeps
//   24 (128 x 24 + 256 x 240 fit the 64K file).
#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>

#include "cuda/flash_fwd_pipeline.cuh"
#include "cuda/flash_sm90.cuh"
#include "cuda/flash_tma.hpp"

namespace nx::cuda {
namespace {

using namespace flash;

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

// The pre-pass's shared tile holds key rows of eight 16-byte units, unit u of key `key` at
// u ^ vt_unit_swizzle(key): the eight keys one warp's transposes read at once (fp8_key_at(4 pw + e)
// for 8 consecutive pw) then sit in eight different units, so those 32 word reads (4 head dims
// each) hit 32 banks.
__host__ __device__ constexpr int vt_unit_swizzle(int key) { return ((key >> 1) & 3) | ((key >> 4) & 1) << 2; }
constexpr bool vt_reads_spread_over_banks() {
  for (int first = 0; first < kFp8Keys / 4; first += 8)
    for (int e = 0; e < 4; ++e) {
      bool seen[8] = {};
      for (int pw = first; pw < first + 8; ++pw) {
        const int u = vt_unit_swizzle(fp8_key_at(4 * pw + e));
        if (seen[u]) return false;
        seen[u] = true;
      }
    }
  return true;
}
static_assert(vt_reads_spread_over_banks(), "a warp's V^T reads must not share banks");

// V [B, Hkv, Tk, 128] e4m3 -> V^T tiles [B, Hkv, ceil(Tk / 128), 128, 128]: row d of tile j holds
// V[128 j + fp8_key_at(p)][d] at p, zero past Tk. One block of 256 threads per tile: each thread
// loads four 16-byte pieces, all in flight before any is stored (one 4-byte load at a time per
// thread ran at a quarter of the bandwidth, session 31), into the swizzled shared tile; then each
// thread writes, per unit of four keys x four head dims, the four keys' words transposed in
// registers (byte permutes) to four V^T rows, a warp covering 32 bytes of each of four rows.
constexpr int kVtThreads = 256, kVtPieces = kFp8Keys * kFp8D / 16 / kVtThreads;
__global__ void __launch_bounds__(kVtThreads) fp8_transpose_v(const uint8_t* __restrict__ v, uint8_t* __restrict__ vt,
                                                             int64_t tk, int tiles) {
  constexpr int kUnits = kFp8D / 16;  // 16-byte units a key row
  __shared__ uint4 tile[kFp8Keys][kUnits];
  const int64_t bh = blockIdx.x / tiles, j = blockIdx.x % tiles, keys = tk - j * kFp8Keys;
  const uint4* src = reinterpret_cast<const uint4*>(v + (bh * tk + j * kFp8Keys) * kFp8D);
  uint4 piece[kVtPieces];
#pragma unroll
  for (int i = 0; i < kVtPieces; ++i) {
    const int w = threadIdx.x + kVtThreads * i;
    piece[i] = w / kUnits < keys ? __ldg(src + w) : make_uint4(0u, 0u, 0u, 0u);
  }
#pragma unroll
  for (int i = 0; i < kVtPieces; ++i) {
    const int w = threadIdx.x + kVtThreads * i, key = w / kUnits;
    tile[key][(w % kUnits) ^ vt_unit_swizzle(key)] = piece[i];
  }
  __syncthreads();
  const uint32_t* words = reinterpret_cast<const uint32_t*>(&tile[0][0]);
  uint32_t* dst = reinterpret_cast<uint32_t*>(vt + (bh * tiles + j) * int64_t(kFp8D * kFp8Keys));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  constexpr int kRowWords = kFp8Keys / 4, kWarpUnits = (kFp8Keys / 4) * (kFp8D / 4) / kVtThreads;
#pragma unroll
  for (int i = 0; i < kWarpUnits; ++i) {
    const int unit = warp + (kVtThreads / 32) * i;
    const int pw = 8 * (unit % 4) + lane % 8, d4 = 4 * (unit / 4) + lane / 8;  // V^T word pw of rows 4 d4 ..
    uint32_t w[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = fp8_key_at(4 * pw + e);
      w[e] = words[key * kRowWords + (d4 ^ 4 * vt_unit_swizzle(key))];
    }
    // byte r of row 4 d4 + r's word: byte r of w[0], w[1], w[2], w[3]
    const uint32_t lo01 = __byte_perm(w[0], w[1], 0x5140), hi01 = __byte_perm(w[0], w[1], 0x7362);
    const uint32_t lo23 = __byte_perm(w[2], w[3], 0x5140), hi23 = __byte_perm(w[2], w[3], 0x7362);
    dst[(4 * d4 + 0) * kRowWords + pw] = __byte_perm(lo01, lo23, 0x5410);
    dst[(4 * d4 + 1) * kRowWords + pw] = __byte_perm(lo01, lo23, 0x7632);
    dst[(4 * d4 + 2) * kRowWords + pw] = __byte_perm(hi01, hi23, 0x5410);
    dst[(4 * d4 + 3) * kRowWords + pw] = __byte_perm(hi01, hi23, 0x7632);
  }
}

constexpr int kFp8Stages = 3, kFp8Threads = 384, kFp8Compute = 256;

struct Fp8Slot {  // the query block in the Q buffer, as the loader publishes it (bh < 0: none left)
  int bh, h, bhk, q0, ntiles;
};
// Shared memory: Q, the K stages, the V^T stages (with their rows of ones), (STAGE_O) the output
// tile, then the mbarriers and the block slot.
template <bool STAGE_O>
struct Fp8Smem {
  static constexpr int kQ = kFp8Rows * 128, kK = kFp8Keys * 128, kVt = kVtRows * 128, kVtLoad = kFp8D * 128;
  static constexpr int kO = STAGE_O ? kFp8Rows * kFp8D * 2 : 0;  // 16 rows x 256 bytes a compute warp
  static constexpr int kBarriers = kQ + kFp8Stages * (kK + kVt) + kO;
  static constexpr size_t kBytes = 1024 + kBarriers + (2 + 4 * kFp8Stages) * 8 + sizeof(Fp8Slot);  // + alignment slack
};
static_assert(Fp8Smem<false>::kVt % 1024 == 0 && Fp8Smem<false>::kK % 1024 == 0,
              "each stage starts a swizzle atom");
// q, k and the V^T tiles as 128-byte rows; the output (STAGE_O) in boxes of one warp's 16 rows.
struct Fp8Maps {
  CUtensorMap q, k, vt, o;
};

// STAGE_O (persistent blocks, 16-bit outputs): O leaves through shared memory by TMA stores, as in
// the bf16 forward (session 28: 5-15% at short rows there), instead of 4-byte stores from registers.
template <bool ALIBI, int OUT, bool PERSIST, bool STAGE_O>
__global__ void __launch_bounds__(kFp8Threads, 1) flash_fwd_fp8_wgmma(TcParams p, Fp8Scales scales, void* out,
                                                                const __grid_constant__ Fp8Maps maps, int blocks,
                                                                int* __restrict__ next_block) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(!STAGE_O || (PERSIST && OUT != 0), "the staged stores serve persistent blocks' 16-bit outputs");
  using L = Fp8Smem<STAGE_O>;
  constexpr int BM = kFp8Rows, BN = kFp8Keys, S = kFp8Stages, NT = BN / 8, OT = kVtRows / 8;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* qs = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  uint8_t* kbuf = qs + L::kQ;
  uint8_t* vbuf = kbuf + S * L::kK;
  uint8_t* obuf = vbuf + S * L::kVt;  // STAGE_O: 16 rows x 128 head dims a compute warp, 2 boxes of 2 KB
  uint64_t* q_full = reinterpret_cast<uint64_t*>(qs + L::kBarriers);
  uint64_t* k_full = q_full + 1;
  uint64_t* v_full = k_full + S;
  uint64_t* k_empty = v_full + S;  // K stage: its S has landed; V^T stage: its P V has
  uint64_t* v_empty = k_empty + S;
  uint64_t* q_empty = v_empty + S;
  volatile Fp8Slot* slot = reinterpret_cast<volatile Fp8Slot*>(q_empty + 1);
  const int tq = int(p.tq), tk = int(p.tk), offset = tk - tq, vt_tiles = (tk + BN - 1) / BN;
  const int nqb = (tq + BM - 1) / BM;
  auto block_at = [&](int blk) {  // causal: the longest rows of a head first
    const int bh = blk / nqb, qi = blk % nqb, qb = p.causal ? nqb - 1 - qi : qi;
    Fp8Slot x;
    x.bh = bh, x.h = bh % int(p.heads), x.q0 = qb * BM;
    x.bhk = (bh / int(p.heads)) * int(p.kv_heads) + x.h / int(p.heads / p.kv_heads);
    // at least one tile, also for rows that see no key: P = 0 there, so they store zeros
    const int key_end = p.causal ? max(0, min(tk, offset + min(tq, x.q0 + BM))) : tk;
    x.ntiles = max(1, (key_end + BN - 1) / BN);
    return x;
  };
  if (threadIdx.x == 0) {
    mbar_init(q_full, 1);
    mbar_init(q_empty, kFp8Compute / 32);
    for (int s = 0; s < S; ++s) {
      mbar_init(k_full + s, 1);  // the TMA thread's arrival, with the bytes
      mbar_init(v_full + s, 1);
      mbar_init(k_empty + s, kFp8Compute / 32);  // one per compute warp
      mbar_init(v_empty + s, kFp8Compute / 32);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  // the rows of ones under every V^T stage (the copies write rows 0..127 only)
  for (int i = threadIdx.x; i < S * 8 * 128 / 4; i += blockDim.x)
    reinterpret_cast<uint32_t*>(vbuf + (i / (8 * 32)) * L::kVt + L::kVtLoad)[i % (8 * 32)] = 0x38383838u;  // e4m3 1.0
  fence_async_smem();
  __syncthreads();

  if (threadIdx.x >= kFp8Compute) {  // the loader warpgroup: one thread issues every copy
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
    if (threadIdx.x != kFp8Compute) return;
    int n = 0, g = 0;  // query blocks taken; K/V^T tiles through the ring, across blocks
    auto load_q = [&](int blk) {  // Q of query block blk and its fields (blk < 0: the end)
      if (blk < 0) {
        slot->bh = -1;
        mbar_arrive(q_full);
        return;
      }
      const Fp8Slot x = block_at(blk);
      slot->bh = x.bh, slot->h = x.h, slot->bhk = x.bhk, slot->q0 = x.q0, slot->ntiles = x.ntiles;
      mbar_arrive_expect_bytes(q_full, L::kQ);
      tma_load_3d(qs, &maps.q, 0, x.q0, x.bh, q_full);
    };
    for (int blk = blockIdx.x; blk < blocks; ++n) {
      const Fp8Slot x = block_at(blk);
      auto load_kv = [&](int j) {  // K and V^T tile j into the ring's next stage
        const int s = g % S, parity = (g / S - 1) & 1;  // of tile g - S leaving the stage
        if (g >= S) mbar_wait(k_empty + s, parity);  // K a phase before V^T: tile g - S's S has landed
        mbar_arrive_expect_bytes(k_full + s, L::kK);
        tma_load_3d(kbuf + s * L::kK, &maps.k, 0, j * BN, x.bhk, k_full + s);
        if (g >= S) mbar_wait(v_empty + s, parity);
        mbar_arrive_expect_bytes(v_full + s, L::kVtLoad);
        tma_load_3d(vbuf + s * L::kVt, &maps.vt, 0, 0, x.bhk * vt_tiles + j, v_full + s);
        ++g;
      };
      // the first tile before Q: its stage is free by now unless the last block was long, while Q
      // waits for the last block's last S
      load_kv(0);
      if (n > 0) mbar_wait(q_empty, (n - 1) & 1);
      load_q(blk);
      const int next = PERSIST ? int(gridDim.x) + atomicAdd(next_block, 1) : blocks;
      for (int j = 1; j < x.ntiles; ++j) load_kv(j);
      blk = next;
    }
    if constexpr (PERSIST) {  // no more blocks: the compute warps read -1 at q_full's next phase
      mbar_wait(q_empty, (n - 1) & 1);
      load_q(-1);
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n");
  const int wg = warpgroup_index(), warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  float o[1][OT][4], pv[1][OT][4], s[1][NT][4], m[1][2], l[1][2], corr[1][2];
  uint32_t pa[BN / 32][4];  // P of the previous tile as e4m3 A fragments
  int row_pos[1][2];
  FwdComputeWarp<S, 2> cw(k_full, v_full, k_empty, v_empty, wg, lane);
  float scale2 = 0.f, slope2 = 0.f, v_scale = 0.f;
  const uint64_t q_rows = sw128_desc(smem_addr(qs) + wg * 64 * 128, 16, 1024);  // this warpgroup's 64 rows
  auto issue_s = [&](int j) {  // S_j = Q K_j^T over head-dim chunks of 32
    const uint64_t k_rows = sw128_desc(smem_addr(kbuf + cw.stage(j) * L::kK), 16, 1024);
#pragma unroll
    for (int kc = 0; kc < kFp8D / 32; ++kc)
      wgmma_ss_n128_e4m3(&s[0][0][0], desc_plus(q_rows, kc * 32), desc_plus(k_rows, kc * 32), kc > 0);
    wg_commit();
  };
  // pv = P_j [V_j^T | ones]^T = [P_j V_j | sum P_j] over key chunks of 32
  auto issue_pv = [&](int j) {
    const uint64_t v_rows = sw128_desc(smem_addr(vbuf + cw.stage(j) * L::kVt), 16, 1024);
#pragma unroll
    for (int kc = 0; kc < BN / 32; ++kc)
      wgmma_rs_n136_e4m3(&pv[0][0][0], pa[kc], desc_plus(v_rows, kc * 32), kc > 0);
    wg_commit();
  };
  int q0 = 0;
  // of tile j, once S_j has landed: s becomes 448 exp(s - m); O's rescale waits for fold
  auto softmax = [&](int j, bool /*half: never*/) {
    const int j0 = j * BN;
    const bool edge = j0 + BN > tk || (p.causal && j0 + BN - 1 > offset + q0 + wg * 64);
    if (edge) softmax_step<ALIBI, true, true>(s, m, l, corr, row_pos, j0, t, tk, p.causal, scale2, slope2);
    else softmax_step<ALIBI, false, true>(s, m, l, corr, row_pos, j0, t, tk, p.causal, scale2, slope2);
    return false;
  };
  // P V of tile j has landed and the softmax of tile j + 1 has set corr: O += that product, then
  // O *= corr where a row's max moved (corr is exactly 1 on the others, so skipping them is exact)
  auto fold = [&](bool last) {
#pragma unroll
    for (int i = 0; i < OT; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[0][i][e] += pv[0][i][e];
    if (!last && __any_sync(0xffffffffu, corr[0][0] != 1.f || corr[0][1] != 1.f)) rescale_rows(o, corr);
  };
  auto start_block = [&](const Fp8Slot& x) {  // O is zero already
    q0 = x.q0;
    scale2 = p.scale * scale_of(scales.q, scales.q_kind, x.bh) * scale_of(scales.k, scales.k_kind, x.bhk) * kLog2e;
    slope2 = ALIBI ? p.slopes[x.h] * kLog2e : 0.f;
    v_scale = scale_of(scales.v, scales.v_kind, x.bhk);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      m[0][r] = -INFINITY;
      l[0][r] = 0.f;
      row_pos[0][r] = offset + q0 + wg * 64 + warp * 16 + g + r * 8;
    }
  };
  uint8_t* const o_warp_buf = obuf + (wg * 4 + warp) * 2 * 2048;
  auto finish_block = [&](const Fp8Slot& x) {  // out = O / sum P * v's scale; O zeroed
    float f[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float sum = o[0][OT - 1][r * 2];  // the ones' columns
      f[r] = sum > 0.f ? v_scale / sum : 0.f;
    }
    if constexpr (STAGE_O) {
      // once the last block's stores have read the buffer: O into it, then a TMA store a box,
      // issued by lane 0 (rows past tq are not written); the ones' block is left out
      if (lane == 0) bulk_wait_read();
      __syncwarp();
      stage_rows16<OUT == 1>(smem_addr(o_warp_buf), o[0], f[0], f[1], lane);
      fence_async_smem();
      __syncwarp();
      if (lane == 0) {
        for (int c = 0; c < 2; ++c) tma_store_3d(&maps.o, o_warp_buf + c * 2048, 64 * c, x.q0 + wg * 64 + warp * 16, x.bh);
        bulk_commit();
      }
    } else {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = x.q0 + wg * 64 + warp * 16 + g + r * 8;
        if (row >= tq) continue;
        const int64_t at = (int64_t(x.bh) * p.tq + row) * kFp8D + t * 2;
#pragma unroll
        for (int dn = 0; dn < kFp8D / 8; ++dn)
          store2<OUT>(out, at + dn * 8, o[0][dn][r * 2] * f[r], o[0][dn][r * 2 + 1] * f[r]);
      }
    }
#pragma unroll
    for (int i = 0; i < OT; ++i) o[0][i][0] = o[0][i][1] = o[0][i][2] = o[0][i][3] = 0.f;
  };
  auto read_slot = [&] {
    Fp8Slot x;
    x.bh = slot->bh, x.h = slot->h, x.bhk = slot->bhk, x.q0 = slot->q0, x.ntiles = slot->ntiles;
    return x;
  };
#pragma unroll
  for (int i = 0; i < OT; ++i) o[0][i][0] = o[0][i][1] = o[0][i][2] = o[0][i][3] = 0.f;
  mbar_wait(q_full, 0);
  // the shared pipeline (flash_fwd_pipeline.cuh); no half tiles, O updated by fold, one Q buffer
  run_query_blocks<PERSIST>(
      cw, read_slot() /* the first is never the end */, issue_s, issue_pv, [](const Fp8Slot&) { return false; },
      softmax, [&](bool) { fold(false); }, [&] { fp8_to_fragments(pa, s); }, [&](int) { cw.release(q_empty); },
      [&](int n) {
        mbar_wait(q_full, (n + 1) & 1);
        return read_slot();
      },
      [](int) {}, start_block,
      [&](const Fp8Slot& x) {
        fold(true);
        finish_block(x);
      });
  if constexpr (STAGE_O) {
    if (lane == 0) bulk_wait_read();  // shared memory stays until the stores have read it
  }
#endif
}

#if defined(NEXUS_HAVE_SM90A)
// V^T written by the pre-pass, then the kernel; false where no tensor map can be made or v's rows
// are not 16-byte aligned (the pre-pass's loads), before any launch: the reference kernel then
// takes the call.
bool launch_fp8(const ExecContext& ctx, const AttentionParams& a, const View& q, const View& q_scale, const View& k,
                const View& k_scale, const View& v, const View& v_scale, const View& out) {
  if (reinterpret_cast<uintptr_t>(v.data) % 16 != 0) return false;
  const int64_t vt_tiles = (a.tk + kFp8Keys - 1) / kFp8Keys;
  Scratch vt(ctx, size_t(a.batch * a.kv_heads * vt_tiles) * kFp8D * kFp8Keys);
  Fp8Maps maps{};
  if (!encode_byte_rows(&maps.q, q.data, a.batch * a.heads, a.tq, kFp8Rows) ||
      !encode_byte_rows(&maps.k, k.data, a.batch * a.kv_heads, a.tk, kFp8Keys) ||
      !encode_byte_rows(&maps.vt, vt.ptr, a.batch * a.kv_heads * vt_tiles, kFp8D, kFp8Keys))
    return false;
  // the pre-pass with the shared memory carveout the attention kernel has anyway, so that the SM's
  // L1 / shared split need not change between the two
  NX_CUDA_CHECK(cudaFuncSetAttribute(fp8_transpose_v, cudaFuncAttributePreferredSharedMemoryCarveout,
                                     int(cudaSharedmemCarveoutMaxShared)));
  fp8_transpose_v<<<unsigned(a.batch * a.kv_heads * vt_tiles), kVtThreads, 0, stream_of(ctx)>>>(
      static_cast<const uint8_t*>(v.data), static_cast<uint8_t*>(vt.ptr), a.tk, int(vt_tiles));
  NX_CUDA_LAUNCH_CHECK();
  const int64_t blocks = a.batch * a.heads * ((a.tq + kFp8Rows - 1) / kFp8Rows);
  const bool persist = persistent_for(a.tk);
  std::optional<Scratch> next_block;
  if (persist) {
    next_block.emplace(ctx, sizeof(int));
    NX_CUDA_CHECK(cudaMemsetAsync(next_block->ptr, 0, sizeof(int), stream_of(ctx)));
  }
  const Fp8Scales scales{static_cast<const float*>(q_scale.data), static_cast<const float*>(k_scale.data),
                         static_cast<const float*>(v_scale.data), int(q_scale.shape.size()) - 1,
                         int(k_scale.shape.size()) - 1, int(v_scale.shape.size()) - 1};
  const TcParams p = tc_params(a);
  // staged stores unless NEXUS_FLASH_FWD_STAGE_O=0 (the bf16 forward's switch)
  const bool stage_o = persist && out.dtype != DType::F32 && switch_on("NEXUS_FLASH_FWD_STAGE_O") &&
                       encode_rows(&maps.o, out.data, out.dtype == DType::BF16, a.batch * a.heads, a.tq, kFp8D, 16);
  auto go = [&](auto alibi_tag, auto out_tag, auto persist_tag, auto stage_tag) {
    constexpr bool kStage = decltype(stage_tag)::value;
    auto kernel = flash_fwd_fp8_wgmma<decltype(alibi_tag)::value, decltype(out_tag)::value, decltype(persist_tag)::value,
                                    kStage>;
    constexpr size_t smem = Fp8Smem<kStage>::kBytes;
    NX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    const int64_t grid = persist ? std::min<int64_t>(blocks, sm_count()) : blocks;
    kernel<<<unsigned(grid), kFp8Threads, smem, stream_of(ctx)>>>(
        p, scales, out.data, maps, int(blocks), persist ? static_cast<int*>(next_block->ptr) : nullptr);
    NX_CUDA_LAUNCH_CHECK();
  };
  auto with_persist = [&](auto alibi_tag, auto out_tag) {
    if (!persist) return go(alibi_tag, out_tag, std::false_type{}, std::false_type{});
    if constexpr (decltype(out_tag)::value != 0) {
      if (stage_o) return go(alibi_tag, out_tag, std::true_type{}, std::true_type{});
    }
    go(alibi_tag, out_tag, std::true_type{}, std::false_type{});
  };
  auto with_out = [&](auto alibi_tag) {
    if (out.dtype == DType::BF16) with_persist(alibi_tag, std::integral_constant<int, 1>{});
    else if (out.dtype == DType::F16) with_persist(alibi_tag, std::integral_constant<int, 2>{});
    else with_persist(alibi_tag, std::integral_constant<int, 0>{});
  };
  a.alibi_slopes.empty() ? with_out(std::false_type{}) : with_out(std::true_type{});
  return true;
}
#endif

// NEXUS_FP8_ATTENTION=reference sends every call to the reference kernel (for comparisons).
bool reference_forced() {
  static const bool forced = [] {
    const char* s = std::getenv("NEXUS_FP8_ATTENTION");
    return s && std::string(s) == "reference";
  }();
  return forced;
}

}  // namespace

// The tensor-core FP8 forward where it applies (an sm_90a build on a compute-capability 9.0 part,
// head_dim 128, q and k scaled per tensor or per head); false otherwise (the reference takes it).
bool attention_forward_fp8_wgmma(const ExecContext& ctx, const AttentionParams& a, const View& q, const View& q_scale,
                                 const View& k, const View& k_scale, const View& v, const View& v_scale,
                                 const View& out) {
#if defined(NEXUS_HAVE_SM90A)
  if (compute_capability() != 90 || a.dim != kFp8D || q_scale.shape.size() > 2 || k_scale.shape.size() > 2 ||
      a.tq == 0 || a.tk == 0 || a.alibi_slopes.size() > 128 || reference_forced())
    return false;
  const int64_t tiles = (a.tk + kFp8Keys - 1) / kFp8Keys, blocks = a.batch * a.heads * ((a.tq + kFp8Rows - 1) / kFp8Rows);
  if (a.tk > INT32_MAX - kFp8Keys || blocks >= INT32_MAX || a.batch * a.kv_heads * tiles > INT32_MAX) return false;
  return launch_fp8(ctx, a, q, q_scale, k, k_scale, v, v_scale, out);
#else
  return false;
#endif
}

}  // namespace nx::cuda
