// Flash-attention forward on Hopper's warpgroup MMA (wgmma, sm_90a), bf16/f16, head_dim 64 or 128.
//
// A block owns 64 query rows per compute warpgroup of one (batch, head): two compute warpgroups at
// head_dim 128, three at head_dim 64 (where the softmax takes longer than the matrix products of
// one tile, so two warpgroups cannot keep the tensor cores busy), and a loader warpgroup that only
// loads (cp.async into the 128-byte-swizzled layout wgmma reads through descriptors; see
// flash_sm90.cuh) and gives its registers to the compute warpgroups (setmaxnreg).
// K and V tiles (128 keys) stream through a ring of stages guarded by mbarriers: "full" when the
// loader's copies have landed; "empty" (K and V apart) when every compute warpgroup is done with it.
// Per key tile j, a compute warpgroup issues S_j = Q K_j^T (both operands from shared memory) and
// O += P_{j-1} V_{j-1} (P from registers), waits for S_j only and runs the online softmax of
// tile j while the tensor cores still work on P V. The compute warpgroups take turns issuing (named
// barriers, round robin), so one's softmax runs under the others' matrix products.
// TMA (the default since session 19: 2-10% faster forward on the H200; NEXUS_FLASH_TMA=0 keeps the
// cp.async loader, which also serves where no tensor map can be made): one loader thread issues
// each tile as tensor-map copies (cp.async.bulk.tensor, 128-byte swizzle: the same layout
// load_sw128 writes, zeros past the head's rows), counted on the stage's mbarrier in bytes; the
// other loader threads exit at once.
// Persistent (with TMA at up to 4096 keys since session 20, see persistent_for; otherwise a launch
// block per query block): one launch block per multiprocessor takes query blocks in order from a
// counter until none is left, so short rows (causal, s512-s2048: 1-16 key tiles a block) no
// longer pay a launch block's start and end each: the loader brings the next block's first K/V
// tile and, once the compute warps' last S of a block has landed (q_empty), its Q, while they
// finish that block's softmax; the block's last P V is issued with the next block's S_0, and its
// stores run under that S_0 (session 25). The K/V ring, its phases and the warpgroups' turns run
// on across blocks.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <utility>

#include "cuda/flash_fwd_pipeline.cuh"
#include "cuda/flash_sm90.cuh"
#include "cuda/flash_tma.hpp"

namespace nx::cuda {
namespace {

using namespace flash;

constexpr int kFwdKeys = 128, kFwdStages = 3;
// Lazy rescale (flash_common.cuh, softmax_step): the output is rescaled only when a row's max grew by
// more than 2^8 since the last rescale, so the weights stay below 256 (bf16 and f16 hold them with
// the same relative precision as below 1); on random scores only a row's first tiles rescale.
// NEXUS_FLASH_LAZY_RESCALE=0 rescales at every growth (to measure it).
float lazy_rescale_threshold() { return switch_on("NEXUS_FLASH_LAZY_RESCALE") ? 8.f : -INFINITY; }
// WGS compute warpgroups of 64 rows each, and the loader
__host__ __device__ constexpr int fwd_rows(int wgs) { return 64 * wgs; }
__host__ __device__ constexpr int fwd_threads(int wgs) { return 128 * (wgs + 1); }
// setmaxnreg: 128 x 56 + 256 x 224 registers (two compute warpgroups) and 128 x 32 + 384 x 160
// (three) fit the 64K file; the loader needs few. ptxas compiles the compute code to the raised
// count: at 152 it serialized the wgmmas of the three-warpgroup kernel, at 160 it does not.

// What the loader tells the compute warps of the query block in a Q buffer (persistent blocks):
// bh < 0 after the last.
struct BlockSlot {
  int bh, h, q0, ntiles;
};
// Shared memory: QB Q buffers, S K stages, S V stages, (STAGE_O) the block's output tile, then the
// mbarriers and the QB block slots.
template <int D, int WGS, int QB, int S, bool STAGE_O = false>
struct FwdSmem {
  static constexpr int kQ = fwd_rows(WGS) * D * 2, kKV = kFwdKeys * D * 2, kO = STAGE_O ? kQ : 0;
  static constexpr int kBarriers = QB * kQ + 2 * S * kKV + kO;  // offset of the barrier array
  static constexpr size_t kBytes = 1024 + kBarriers + (2 * QB + 4 * S) * 8 + sizeof(BlockSlot) * QB;  // + alignment slack
  static constexpr bool kFits = kBytes <= 227 * 1024;  // a block's shared memory on sm_90
};
// Persistent blocks may hold two Q buffers (session 27), so that the next query block's Q loads
// during this one instead of after its last S: by default with three warpgroups (head_dim 64),
// where it measured 1.5% faster, and at head_dim 128, where it costs a K/V stage (227 KB in all;
// two stages run as fast as three since K and V are released apart) and the stage it frees holds
// the output tile (STAGE_O); NEXUS_FLASH_FWD_QBUF=1|2 forces one or two (fwd_two_q_buffers).
template <int D, bool PERSIST>
__host__ __device__ constexpr int fwd_stages(int qb) {
  return PERSIST && qb == 2 && D == 128 ? 2 : kFwdStages;
}

// Tensor maps of q, k and v as [batch * heads, rows, D] (TMA loads; unused otherwise), and of the
// output in boxes of one warp's 16 rows (STAGE_O's stores).
struct FwdMaps {
  CUtensorMap q, k, v, o;
};

template <int D, int WGS, bool BF16, bool ALIBI, bool TMA, bool PERSIST, int QB, bool STAGE_O>
__global__ void __launch_bounds__(fwd_threads(WGS), 1) flash_fwd_wgmma(TcParams p, const uint16_t* __restrict__ q,
                                                                  const uint16_t* __restrict__ k,
                                                                  const uint16_t* __restrict__ v,
                                                                  uint16_t* __restrict__ out, float* __restrict__ lse,
                                                                  const __grid_constant__ FwdMaps maps, int blocks,
                                                                  int* __restrict__ next_block) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(WGS == 2 || (WGS == 3 && D == 64), "three warpgroups fit the registers at head_dim 64 only");
  static_assert(TMA || !PERSIST, "the persistent loader is one TMA thread");
  static_assert(QB == 1 || (QB == 2 && PERSIST), "a second Q buffer serves the next query block");
  static_assert(!STAGE_O || TMA, "the output tile leaves by TMA stores");
  constexpr int S = fwd_stages<D, PERSIST>(QB);
  using L = FwdSmem<D, WGS, QB, S, STAGE_O>;
  static_assert(L::kFits, "over a block's shared memory on sm_90");
  constexpr int BM = fwd_rows(WGS), BN = kFwdKeys, NT = BN / 8, DT = D / 8;
  constexpr int kCompute = 128 * WGS;
  extern __shared__ uint8_t smem_raw[];
  // swizzle atoms must start on 1024-byte boundaries (the launcher adds the slack)
  uint8_t* qs = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  uint8_t* kbuf = qs + QB * L::kQ;
  uint8_t* vbuf = kbuf + S * L::kKV;
  uint8_t* obuf = vbuf + S * L::kKV;  // STAGE_O: 16 rows x D per compute warp, as the output map's boxes
  uint64_t* q_full = reinterpret_cast<uint64_t*>(qs + L::kBarriers);
  uint64_t* k_full = q_full + QB;
  uint64_t* v_full = k_full + S;
  uint64_t* k_empty = v_full + S;  // K stage: its S has landed; V stage: its P V has
  uint64_t* v_empty = k_empty + S;
  uint64_t* q_empty = v_empty + S;
  volatile BlockSlot* block_slot = reinterpret_cast<volatile BlockSlot*>(q_empty + QB);  // the block in each Q buffer
  const int tq = int(p.tq), tk = int(p.tk), offset = tk - tq;
  const int nqb = (tq + BM - 1) / BM;  // query blocks per head; `blocks` in all
  // Block `blk`: query rows q0.. of (batch b, head h); causal: the longest rows of a head first.
  // bh: the (batch, head) row of q and out, bhk: of k and v
  struct Block {
    int bh, h, bhk, q0, ntiles;
  };
  auto block_at = [&](int blk) {
    const int bh = blk / nqb, qi = blk % nqb, qb = p.causal ? nqb - 1 - qi : qi;
    Block x;
    x.bh = bh, x.h = bh % int(p.heads), x.q0 = qb * BM;
    x.bhk = (bh / int(p.heads)) * int(p.kv_heads) + x.h / int(p.heads / p.kv_heads);  // < 2^31: the launcher checks
    // At least one tile, also for rows that see no key (causal with Tq > Tk, or Tk = 0): the mask
    // then leaves P = 0, so they store zeros and lse = inf, and every block has the same phases.
    const int key_end = p.causal ? max(0, min(tk, offset + min(tq, x.q0 + BM))) : tk;
    x.ntiles = max(1, (key_end + BN - 1) / BN);
    return x;
  };
  constexpr int kLoadArrivals = TMA ? 1 : 128;  // the TMA thread's, or one per loader thread
  if (threadIdx.x == 0) {
    for (int b = 0; b < QB; ++b) {
      mbar_init(q_full + b, kLoadArrivals);
      mbar_init(q_empty + b, kCompute / 32);
    }
    for (int s = 0; s < S; ++s) {
      mbar_init(k_full + s, kLoadArrivals);
      mbar_init(v_full + s, kLoadArrivals);
      mbar_init(k_empty + s, kCompute / 32);  // one per compute warp
      mbar_init(v_empty + s, kCompute / 32);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (threadIdx.x >= kCompute) {  // the loader warpgroup
    if constexpr (WGS == 2) asm volatile("setmaxnreg.dec.sync.aligned.u32 56;\n");
    else asm volatile("setmaxnreg.dec.sync.aligned.u32 32;\n");
    const int tid = threadIdx.x - kCompute;
    if constexpr (TMA) {
      if (tid != 0) return;
      // PERSIST: this block's first query block is its index, each later one the next not taken
      // (a counter across the grid, so that the blocks finish together however long each is);
      // K and V tiles run through the ring across query blocks (g counts them).
      int n = 0, g = 0;
      // Q of query block blk into buffer buf, and the block's fields into its slot (published by
      // the arrival); blk < 0: the end.
      auto load_q = [&](int buf, int blk) {
        volatile BlockSlot* slot = block_slot + buf;
        if (blk < 0) {
          slot->bh = -1;
          mbar_arrive(q_full + buf);
          return;
        }
        const Block x = block_at(blk);
        slot->bh = x.bh, slot->h = x.h, slot->q0 = x.q0, slot->ntiles = x.ntiles;
        mbar_arrive_expect_bytes(q_full + buf, L::kQ);
        for (int c = 0; c < D / 64; ++c) tma_load_3d(qs + buf * L::kQ + c * BM * 128, &maps.q, 64 * c, x.q0, x.bh, q_full + buf);
      };
      auto claim = [&] { return PERSIST ? int(gridDim.x) + atomicAdd(next_block, 1) : blocks; };
      // QB = 2: the block after the current one is claimed a block ahead, and its Q loaded into the
      // other buffer once the block before the current one is done with it.
      int ahead = 0;
      if constexpr (QB == 2) {
        load_q(0, blockIdx.x);
        ahead = claim();
      }
      for (int blk = blockIdx.x; blk < blocks; ++n) {
        const Block x = block_at(blk);
        const int bhk = x.bhk;
        auto load_kv = [&](int j) {  // K and V tile j of this block into the ring's next stage
          const int s = g % S, parity = (g / S - 1) & 1;  // of tile g - S leaving the stage
          if (g >= S) {  // K a phase before V (kv_split: tile g - S's S has landed; otherwise its P V too)
            mbar_wait(k_empty + s, parity);
            if (!p.kv_split) mbar_wait(v_empty + s, parity);
          }
          mbar_arrive_expect_bytes(k_full + s, L::kKV);
          for (int c = 0; c < D / 64; ++c)
            tma_load_3d(kbuf + s * L::kKV + c * BN * 128, &maps.k, 64 * c, j * BN, bhk, k_full + s);
          if (g >= S) mbar_wait(v_empty + s, parity);
          mbar_arrive_expect_bytes(v_full + s, L::kKV);
          for (int c = 0; c < D / 64; ++c)
            tma_load_3d(vbuf + s * L::kKV + c * BN * 128, &maps.v, 64 * c, j * BN, bhk, v_full + s);
          ++g;
        };
        int next;
        if constexpr (QB == 2) {
          load_kv(0);
          const int nb = (n + 1) % 2;  // block n - 1's buffer (its (n - 1) / 2-th use)
          if (n >= 1) mbar_wait(q_empty + nb, ((n - 1) / 2) & 1);
          load_q(nb, ahead < blocks ? ahead : -1);
          next = ahead;
          if (next < blocks) ahead = claim();  // under the loads below
        } else {
          // The first tile before Q: its stage is free by now unless the last block was long, while
          // Q waits for the last block's last S.
          load_kv(0);
          if (n > 0) mbar_wait(q_empty, (n - 1) & 1);  // every compute warp is done with the last Q
          load_q(0, blk);
          next = claim();  // under the loads below
        }
        for (int j = 1; j < x.ntiles; ++j) load_kv(j);
        blk = next;
      }
      if constexpr (PERSIST && QB == 1) {  // no more blocks: the compute warps read -1 at q_full's next phase
        mbar_wait(q_empty, (n - 1) & 1);
        load_q(0, -1);
      }
      return;
    }
    const Block x = block_at(blockIdx.x);
    const uint16_t* kg = k + (int64_t(x.bhk) * p.tk) * D;
    const uint16_t* vg = v + (int64_t(x.bhk) * p.tk) * D;
    load_sw128<D, BM, 128>(qs, q + (int64_t(x.bh) * p.tq) * D, x.q0, p.tq, tid);
    mbar_arrive_on_copies(q_full);
    for (int j = 0; j < x.ntiles; ++j) {
      const int s = j % S;
      if (j >= S) mbar_wait(k_empty + s, (j / S - 1) & 1);  // tile j - S's S has landed
      load_sw128<D, BN, 128>(kbuf + s * L::kKV, kg, int64_t(j) * BN, p.tk, tid);
      mbar_arrive_on_copies(k_full + s);
      if (j >= S) mbar_wait(v_empty + s, (j / S - 1) & 1);  // and its P V
      load_sw128<D, BN, 128>(vbuf + s * L::kKV, vg, int64_t(j) * BN, p.tk, tid);
      mbar_arrive_on_copies(v_full + s);
    }
    cp_async_wait_all();  // nothing may stay in flight at exit
    return;
  }
  if constexpr (WGS == 2) asm volatile("setmaxnreg.inc.sync.aligned.u32 224;\n");
  else asm volatile("setmaxnreg.inc.sync.aligned.u32 160;\n");
  const int wg = warpgroup_index(), warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  float o[1][DT][4], s[1][NT][4], m[1][2], l[1][2], corr[1][2];
  uint32_t pa[BN / 16][4];  // P of the previous tile as wgmma A fragments
  int row_pos[1][2];
  const float scale2 = p.scale * kLog2e;
  const uint32_t q_addr = smem_addr(qs) + wg * 64 * 128;  // this warpgroup's 64 rows of buffer 0
  FwdComputeWarp<S, WGS> cw(k_full, v_full, k_empty, v_empty, wg, lane);
  int q0 = 0;  // the block's first row
  float slope2 = 0.f;

  uint64_t q_rows = sw128_desc(q_addr, 16, 1024);  // of the current block's Q buffer
  // Half tiles: a warpgroup's last tile of a block takes its softmax over the tile's first BN / 2
  // keys when its rows see none of the others (the causal diagonal for the first of two warpgroups,
  // a short last tile): the others would only be masked to weights of exactly 0. Their weights are
  // written as zeros, so S and P V stay whole tiles: narrowing S (wgmma n64 into half of s, or into
  // an array of its own) made ptxas serialize the wgmmas of every two-warpgroup kernel (C7511),
  // as did leaving s's other half as it was; narrowing P V (a branch between 4 and 8 products) made
  // it inject warpgroup fences (C7519). Only the last tile qualifies (an earlier one has a key the
  // block's rows see).
  auto half_last = [&](const Block& b) {
    const int key_end = p.causal ? min(tk, offset + b.q0 + wg * 64 + 64) : tk;  // past this warpgroup's keys
    return p.half_tiles && (b.ntiles - 1) * BN + BN / 2 >= key_end;
  };
  auto issue_s = [&](int j) {  // S_j = Q K_j^T over head-dim chunks of 16
    const uint64_t k_rows = sw128_desc(smem_addr(kbuf + cw.stage(j) * L::kKV), 16, 1024);
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc)
      mma_ss<BN, BF16>(&s[0][0][0], desc_plus(q_rows, (kc / 4) * (BM * 128) + (kc % 4) * 32),
                       desc_plus(k_rows, (kc / 4) * (BN * 128) + (kc % 4) * 32), kc > 0);
    wg_commit();
  };
  auto issue_pv = [&](int j) {  // O += P_j V_j, V as the N-major B operand (keys kc*16..)
    const uint64_t v_cols = sw128_desc(smem_addr(vbuf + cw.stage(j) * L::kKV), BN * 128, 1024);
#pragma unroll
    for (int kc = 0; kc < BN / 16; ++kc) mma_rs<D, BF16>(&o[0][0][0], pa[kc], desc_plus(v_cols, kc * 16 * 128));
    wg_commit();
  };
  // Of tile j, once S_j has landed. The reference maxima move only when a row's grows by more
  // than 2^8 (lazy_rescale_threshold): true when they did and O must be rescaled (the same on the warp).
  constexpr bool kLazy = !(ALIBI && WGS == 3);  // there its registers spilled (ptxas)
  // Head_dim 64 with two warpgroups: one column group in 8 takes its exponentials on the FMA pipe
  // (ex2_fma), 2% faster at causal s1024-s2048 (H200, ncu, session 29; causal from 2048 rows takes
  // three warpgroups since session 31), where a tile's 8192 exponentials take the MUFU as long as
  // the tile's products take the tensor cores; 2 groups in 8 gained nothing, 3 lost 2%, and any
  // share lost 3-10% with three warpgroups (busier issue slots).
  constexpr int kFmaExp = D == 64 && WGS == 2 ? 0x80 : 0;
  auto softmax = [&](int j, bool half) {
    const int j0 = j * BN;
    if (half) {
      const bool moved = softmax_step<ALIBI, true, false, kLazy, 0, NT / 2>(s, m, l, corr, row_pos, j0, t, tk, p.causal,
                                                                            scale2, slope2, p.lazy_rescale);
      // the other half's weights: 0 (see half_last)
#pragma unroll
      for (int n = NT / 2; n < NT; ++n) s[0][n][0] = s[0][n][1] = s[0][n][2] = s[0][n][3] = 0.f;
      return moved;
    }
    const bool edge = j0 + BN > tk || (p.causal && j0 + BN - 1 > offset + q0 + wg * 64);
    if (edge) return softmax_step<ALIBI, true, false, kLazy>(s, m, l, corr, row_pos, j0, t, tk, p.causal, scale2, slope2,
                                                             p.lazy_rescale);
    return softmax_step<ALIBI, false, false, kLazy, kFmaExp>(s, m, l, corr, row_pos, j0, t, tk, p.causal, scale2, slope2,
                                                      p.lazy_rescale);
  };
  auto zero_o = [&] {
#pragma unroll
    for (int i = 0; i < DT; ++i) o[0][i][0] = o[0][i][1] = o[0][i][2] = o[0][i][3] = 0.f;
  };
  auto start_block = [&](const Block& x) {  // O is zero already
    q0 = x.q0;
    slope2 = ALIBI ? p.slopes[x.h] * kLog2e : 0.f;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      m[0][r] = -INFINITY;
      l[0][r] = 0.f;
      row_pos[0][r] = offset + q0 + wg * 64 + warp * 16 + g + r * 8;
    }
  };
  // STAGE_O: this warp's 16 rows of O in shared memory, D / 64 boxes of 16 rows x 128 bytes
  // swizzled as the output map reads them
  uint8_t* const o_warp_buf = obuf + (wg * 4 + warp) * (D / 64) * 2048;
  const uint32_t o_warp = smem_addr(o_warp_buf);
  auto finish_block = [&](const Block& x) {  // normalize and store O and the lse; O zeroed
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = l[0][r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      inv[r] = sum > 0.f ? 1.f / sum : 0.f;
      const int row = x.q0 + wg * 64 + warp * 16 + g + r * 8;
      if (row >= tq) continue;
      if (t == 0) lse[int64_t(x.bh) * p.tq + row] = sum > 0.f ? (m[0][r] + log2f(sum)) / kLog2e : INFINITY;
      if constexpr (!STAGE_O) {
        uint16_t* orow = out + (int64_t(x.bh) * p.tq + row) * D;
#pragma unroll
        for (int dn = 0; dn < DT; ++dn)
          *reinterpret_cast<uint32_t*>(orow + dn * 8 + t * 2) = pack2<BF16>(o[0][dn][r * 2] * inv[r], o[0][dn][r * 2 + 1] * inv[r]);
      }
    }
    if constexpr (STAGE_O) {
      // Once the last block's stores have read the buffer: O into it, then one TMA store a box,
      // issued by lane 0 (rows past tq are not written).
      if (lane == 0) bulk_wait_read();
      __syncwarp();
      stage_rows16<BF16>(o_warp, o[0], inv[0], inv[1], lane);
      fence_async_smem();
      __syncwarp();
      if (lane == 0) {
#pragma unroll
        for (int c = 0; c < D / 64; ++c)
          tma_store_3d(&maps.o, o_warp_buf + c * 2048, 64 * c, x.q0 + wg * 64 + warp * 16, x.bh);
        bulk_commit();
      }
    }
    zero_o();
  };
  // the block in Q buffer buf, as the loader wrote it (bh < 0: none)
  auto slot_block = [&](int buf) {
    const volatile BlockSlot* slot = block_slot + buf;
    Block x;
    x.bh = slot->bh, x.h = slot->h, x.bhk = 0, x.q0 = slot->q0, x.ntiles = slot->ntiles;
    return x;
  };
  zero_o();
  mbar_wait(q_full, 0);
  const Block first = PERSIST ? slot_block(0) : block_at(int(blockIdx.x));  // never the end
  // the shared pipeline (flash_fwd_pipeline.cuh); O rescaled where a row's max moved
  run_query_blocks<PERSIST>(
      cw, first, issue_s, issue_pv, half_last, softmax,
      [&](bool moved) {
        if (moved) rescale_rows(o, corr);
      },
      [&] { to_a_fragments<BF16>(pa, s); }, [&](int n) { cw.release(q_empty + n % QB); },
      [&](int n) {  // the (n + 1)-th block is in Q buffer (n + 1) % QB, its (n + 1) / QB-th use
        const int nb = (n + 1) % QB;
        mbar_wait(q_full + nb, ((n + 1) / QB) & 1);
        return slot_block(nb);
      },
      [&](int n) { q_rows = sw128_desc(q_addr + (n % QB) * L::kQ, 16, 1024); }, start_block, finish_block);
  if constexpr (STAGE_O) {
    if (lane == 0) bulk_wait_read();  // shared memory stays until the stores have read it
  }
#endif
}

// NEXUS_FLASH_FWD_QBUF=1|2 forces one or two Q buffers (to measure).
bool fwd_two_q_buffers(int d, int wgs) {
  const char* s = std::getenv("NEXUS_FLASH_FWD_QBUF");
  if (s && (std::strcmp(s, "1") == 0 || std::strcmp(s, "2") == 0)) return s[0] == '2';
  return wgs == 3 || d == 128;
}
// Persistent blocks write O through shared memory by TMA stores where it fits (at head_dim 128
// with two Q buffers and two stages); NEXUS_FLASH_FWD_STAGE_O=0 stores it from registers.
bool fwd_stage_o() { return switch_on("NEXUS_FLASH_FWD_STAGE_O"); }
// NEXUS_FLASH_KV_SPLIT=0: the loader refills a stage's K only when its V is free too (to measure).
bool kv_split_release() { return switch_on("NEXUS_FLASH_KV_SPLIT"); }

template <int D, int WGS, bool BF16>
void launch_fwd_wgmma(const ExecContext& ctx, const AttentionParams& a, const View& q, const View& k, const View& v,
                      const View& out, const View& lse) {
  TcParams p = tc_params(a);
  p.lazy_rescale = lazy_rescale_threshold();
  p.kv_split = kv_split_release();
  p.half_tiles = switch_on("NEXUS_FLASH_HALF_TILE");
  FwdMaps maps{};
  const bool tma = tma_requested() && encode_rows(&maps.q, q.data, BF16, a.batch * a.heads, a.tq, D, fwd_rows(WGS)) &&
                   encode_rows(&maps.k, k.data, BF16, a.batch * a.kv_heads, a.tk, D, kFwdKeys) &&
                   encode_rows(&maps.v, v.data, BF16, a.batch * a.kv_heads, a.tk, D, kFwdKeys);
  const int64_t blocks = a.batch * a.heads * ((a.tq + fwd_rows(WGS) - 1) / fwd_rows(WGS));
  // Persistent: a block per multiprocessor, each taking query blocks until none is left; the
  // counter of those taken starts at zero in every call.
  const bool persist = tma && blocks < INT32_MAX && persistent_for(a.tk);
  std::optional<Scratch> next_block;
  if (persist) {
    next_block.emplace(ctx, sizeof(int));
    NX_CUDA_CHECK(cudaMemsetAsync(next_block->ptr, 0, sizeof(int), stream_of(ctx)));
  }
  const bool stage_o = persist && fwd_stage_o() && encode_rows(&maps.o, out.data, BF16, a.batch * a.heads, a.tq, D, 16);
  auto go = [&](auto alibi_tag, auto tma_tag, auto persist_tag, auto qbuf_tag) {
    constexpr bool kPersist = decltype(persist_tag)::value;
    constexpr int kQB = decltype(qbuf_tag)::value, kS = fwd_stages<D, kPersist>(kQB);
    constexpr bool kCanStage = kPersist && FwdSmem<D, WGS, kQB, kS, true>::kFits;
    auto pick = [&](auto stage_tag) {
      auto kernel = flash_fwd_wgmma<D, WGS, BF16, decltype(alibi_tag)::value, decltype(tma_tag)::value, kPersist, kQB,
                                    decltype(stage_tag)::value>;
      return std::make_pair(kernel, FwdSmem<D, WGS, kQB, kS, decltype(stage_tag)::value>::kBytes);
    };
    const auto [kernel, smem] = [&] {
      if constexpr (kCanStage) {
        if (stage_o) return pick(std::true_type{});
      }
      return pick(std::false_type{});
    }();
    NX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    const int64_t grid = persist ? std::min<int64_t>(blocks, sm_count()) : blocks;
    kernel<<<unsigned(grid), fwd_threads(WGS), smem, stream_of(ctx)>>>(p, static_cast<const uint16_t*>(q.data),
        static_cast<const uint16_t*>(k.data), static_cast<const uint16_t*>(v.data), static_cast<uint16_t*>(out.data),
        static_cast<float*>(lse.data), maps, int(std::min<int64_t>(blocks, INT32_MAX)),
        persist ? static_cast<int*>(next_block->ptr) : nullptr);
    NX_CUDA_LAUNCH_CHECK();
  };
  auto with_tma = [&](auto alibi_tag) {
    using one = std::integral_constant<int, 1>;
    if (persist && fwd_two_q_buffers(D, WGS)) go(alibi_tag, std::true_type{}, std::true_type{}, std::integral_constant<int, 2>{});
    else if (persist) go(alibi_tag, std::true_type{}, std::true_type{}, one{});
    else if (tma) go(alibi_tag, std::true_type{}, std::false_type{}, one{});
    else go(alibi_tag, std::false_type{}, std::false_type{}, one{});
  };
  a.alibi_slopes.empty() ? with_tma(std::false_type{}) : with_tma(std::true_type{});
}

// Head_dim 64: three compute warpgroups (192-row blocks) except causal attention over short queries,
// where the blocks' masked diagonal and the last partial block cost more than the overlap gains
// (H200, session 17: full 8-29% faster, causal 4096-16384 5-18% faster, causal 1024 13-16%
// slower; session 31, ncu, persistent kernels: causal 2048 3-5% faster, 1024 8-10% slower).
// NEXUS_FLASH_FWD_WARPGROUPS=2|3 forces one (for measuring).
bool fwd_three_warpgroups(const AttentionParams& a) {
  static const int forced = [] {
    const char* s = std::getenv("NEXUS_FLASH_FWD_WARPGROUPS");
    return s ? std::atoi(s) : 0;
  }();
  if (forced == 2 || forced == 3) return forced == 3;
  return !a.causal || a.tq >= 2048;
}

}  // namespace

// The wgmma forward where the build has sm_90a code and the device is a compute-capability 9.0
// part; false where it does not apply (the mma.sync kernels take the call).
bool attention_wgmma(const ExecContext& ctx, const AttentionParams& a, const View& q, const View& k, const View& v,
                     const View& out, const View& lse) {
#if defined(NEXUS_HAVE_SM90A)
  if (compute_capability() != 90 || (a.dim != 64 && a.dim != 128)) return false;
  const bool bf16 = q.dtype == DType::BF16;
  if (a.dim == 64 && fwd_three_warpgroups(a)) bf16 ? launch_fwd_wgmma<64, 3, true>(ctx, a, q, k, v, out, lse)
                                                 : launch_fwd_wgmma<64, 3, false>(ctx, a, q, k, v, out, lse);
  else if (a.dim == 64) bf16 ? launch_fwd_wgmma<64, 2, true>(ctx, a, q, k, v, out, lse)
                             : launch_fwd_wgmma<64, 2, false>(ctx, a, q, k, v, out, lse);
  else bf16 ? launch_fwd_wgmma<128, 2, true>(ctx, a, q, k, v, out, lse)
            : launch_fwd_wgmma<128, 2, false>(ctx, a, q, k, v, out, lse);
  return true;
#else
  return false;
#endif
}

}  // namespace nx::cuda
