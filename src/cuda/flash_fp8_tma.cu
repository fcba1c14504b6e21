// The FP8 (e4m3) flash-attention forward with TMA loads and persistent launch blocks: the op and
// arithmetic of flash_fp8_wgmma.cu's kernel (V^T tiles with rows of ones, P at 448 exp(s - m)
// packed in fp8_key_at's order, each tile's [P V | sum P] summed into O in f32), on the machinery
// that made the bf16 forward (flash_wgmma.cu) faster since the FP8 kernel was written (d128 s1024:
// 293 -> 226 us full, 218 -> 156 us causal, sessions 19-28), while the FP8 kernel stayed as it was:
// its ratio to bf16 fell from 0.80-0.93 to 0.62-0.68 there. The changes:
// - one loader thread issues each tile as tensor-map copies (Q and K as 128-byte rows, V^T tiles
//   as [128 head dims, 128 keys]), so the rows of ones under every V^T stage stay as written once;
// - persistent blocks (at most kPersistentKeys keys): a launch block per multiprocessor takes query
//   blocks from a counter, the loader brings the next block's first tile and Q while the compute
//   warps finish a block, and a block's last P V is issued with the next block's S_0;
// - K and V^T stages released apart (K once its S has landed);
// - matrix descriptors stepped by desc_plus, the warpgroup index uniform;
// - O rescaled only where a row's max moved (corr exactly 1 otherwise, so skipping is exact);
// - persistent blocks with 16-bit outputs store O through shared memory by TMA;
// - half tiles on the first warpgroup's causal diagonal, as in the bf16 forward (candidate there too);
// - the tensor cores' FP8 accumulator summed into O every `promote` tiles (1 by default: the
//   accuracy of session 19's fix; NEXUS_FP8_PROMOTE=2|4 to measure what fewer f32 sums buy).
// NEXUS_FP8_TMA=0 sends calls to flash_fp8_wgmma.cu's kernel instead (to compare).
#include <algorithm>
#include <optional>

#include "cuda/flash_fp8.cuh"
#include "cuda/flash_tma.hpp"

namespace nx::cuda {
namespace {

using namespace flash;

constexpr int kFp8TmaStages = 3, kFp8TmaThreads = 384, kFp8Compute = 256;

struct Fp8Slot {  // the query block in the Q buffer, as the loader publishes it (bh < 0: none left)
  int bh, h, bhk, q0, ntiles;
};
// Shared memory: Q, the K stages, the V^T stages (with their rows of ones), (STAGE_O) the output
// tile, then the mbarriers and the block slot.
template <bool STAGE_O>
struct Fp8TmaSmem {
  static constexpr int kQ = kFp8Rows * 128, kK = kFp8Keys * 128, kVt = kVtRows * 128, kVtLoad = kFp8D * 128;
  static constexpr int kO = STAGE_O ? kFp8Rows * kFp8D * 2 : 0;  // 16 rows x 256 bytes a compute warp
  static constexpr int kBarriers = kQ + kFp8TmaStages * (kK + kVt) + kO;
  static constexpr size_t kBytes = 1024 + kBarriers + (2 + 4 * kFp8TmaStages) * 8 + sizeof(Fp8Slot);  // + alignment slack
};
static_assert(Fp8TmaSmem<false>::kVt % 1024 == 0 && Fp8TmaSmem<false>::kK % 1024 == 0,
              "each stage starts a swizzle atom");
// q, k and the V^T tiles as 128-byte rows; the output (STAGE_O) in boxes of one warp's 16 rows.
struct Fp8Maps {
  CUtensorMap q, k, vt, o;
};

// STAGE_O (persistent blocks, 16-bit outputs): O leaves through shared memory by TMA stores, as in
// the bf16 forward (session 28: 5-15% at short rows there), instead of 4-byte stores from registers.
template <bool ALIBI, int OUT, bool PERSIST, bool STAGE_O>
__global__ void __launch_bounds__(kFp8TmaThreads, 1) flash_fwd_fp8_tma(TcParams p, Fp8Scales scales, void* out,
                                                                const __grid_constant__ Fp8Maps maps, int blocks,
                                                                int* __restrict__ next_block, int promote) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(!STAGE_O || (PERSIST && OUT != 0), "the staged stores serve persistent blocks' 16-bit outputs");
  using L = Fp8TmaSmem<STAGE_O>;
  constexpr int BM = kFp8Rows, BN = kFp8Keys, S = kFp8TmaStages, NT = BN / 8, OT = kVtRows / 8;
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
  int tile0 = 0;  // the ring position of the block's first tile
  float scale2 = 0.f, slope2 = 0.f, v_scale = 0.f;
  const uint64_t q_rows = sw128_desc(smem_addr(qs) + wg * 64 * 128, 16, 1024);  // this warpgroup's 64 rows
  auto issue_s = [&](int j) {  // S_j = Q K_j^T over head-dim chunks of 32
    const uint64_t k_rows = sw128_desc(smem_addr(kbuf + ((tile0 + j) % S) * L::kK), 16, 1024);
#pragma unroll
    for (int kc = 0; kc < kFp8D / 32; ++kc)
      wgmma_ss_n128_e4m3(&s[0][0][0], desc_plus(q_rows, kc * 32), desc_plus(k_rows, kc * 32), kc > 0);
    wg_commit();
  };
  // pv (+)= P_j [V_j^T | ones]^T = [P_j V_j | sum P_j] over key chunks of 32; `fresh`: pv starts over
  auto issue_pv = [&](int j, bool fresh) {
    const uint64_t v_rows = sw128_desc(smem_addr(vbuf + ((tile0 + j) % S) * L::kVt), 16, 1024);
#pragma unroll
    for (int kc = 0; kc < BN / 32; ++kc)
      wgmma_rs_n136_e4m3(&pv[0][0][0], pa[kc], desc_plus(v_rows, kc * 32), kc > 0 || !fresh);
    wg_commit();
  };
  int q0 = 0;
  // Half tiles as in the bf16 forward (flash_wgmma.cu, half_last): a warpgroup's last tile of a
  // block takes its softmax over the first 64 keys when its rows see none of the others (the first
  // warpgroup's causal diagonal); the others' weights are written as zeros, which the masked keys'
  // would have been, so the output is the same bit for bit (NEXUS_FLASH_HALF_TILE=0 to compare).
  auto half_last = [&](const Fp8Slot& b) {
    const int key_end = p.causal ? min(tk, offset + b.q0 + wg * 64 + 64) : tk;  // past this warpgroup's keys
    return p.half_tiles && (b.ntiles - 1) * BN + BN / 2 >= key_end;
  };
  auto softmax = [&](int j, bool half) {  // of tile j, once S_j has landed: s becomes 448 exp(s - m)
    const int j0 = j * BN;
    if (half) {
      softmax_step<ALIBI, true, true, false, 0, NT / 2>(s, m, l, corr, row_pos, j0, t, tk, p.causal, scale2, slope2);
#pragma unroll
      for (int n = NT / 2; n < NT; ++n) s[0][n][0] = s[0][n][1] = s[0][n][2] = s[0][n][3] = 0.f;
      return;
    }
    const bool edge = j0 + BN > tk || (p.causal && j0 + BN - 1 > offset + q0 + wg * 64);
    if (edge) softmax_step<ALIBI, true, true>(s, m, l, corr, row_pos, j0, t, tk, p.causal, scale2, slope2);
    else softmax_step<ALIBI, false, true>(s, m, l, corr, row_pos, j0, t, tk, p.causal, scale2, slope2);
  };
  // P V of tile j has landed and the softmax of tile j + 1 has set corr: the run of `promote` tiles
  // pv sums is added to O when tile j closes it; O, and pv while it runs on, are rescaled to the
  // new max where it moved (corr is exactly 1 on rows whose max stayed, where skipping is exact).
  auto fold = [&](int j, bool last) {
    const bool closes = last || ((j + 1) & (promote - 1)) == 0;
    const bool moved = !last && __any_sync(0xffffffffu, corr[0][0] != 1.f || corr[0][1] != 1.f);
    if (closes) {
#pragma unroll
      for (int i = 0; i < OT; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[0][i][e] += pv[0][i][e];
    }
    if (moved) {
      rescale_rows(o, corr);
      if (!closes) rescale_rows(pv, corr);
    }
  };
  auto release = [&](uint64_t* bar) {  // this warp is done with a stage (or Q)
    fence_async_smem();
    __syncwarp();
    if (lane == 0) mbar_arrive(bar);
  };
  auto wait_full = [&](uint64_t* full, int j) { mbar_wait(full + (tile0 + j) % S, ((tile0 + j) / S) & 1); };
  // Turns at the tensor cores as in flash_wgmma.cu: warpgroup 1 issues phase j after warpgroup 0's
  // phase j, warpgroup 0 after warpgroup 1's phase j - 1 (named barriers 1 and 2, 256 threads); the
  // phases run on from one query block to the next.
  const int my_turn = 1 + wg, next_turn = 1 + (wg + 1) % 2;
  auto take_turn = [&](bool first_phase = false) {
    if (wg > 0 || !first_phase) named_sync(my_turn, 256);
    wg_fence();
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
  Fp8Slot x = read_slot();  // the first is never the end
  int n = 0;  // query blocks taken
  wait_full(k_full, 0);
  fence_async_smem();
  take_turn(true);
  issue_s(0);
  named_arrive(next_turn, 256);
  start_block(x);
  wg_wait<0>();
  for (;;) {  // S_0 of block x has landed
    const int ntiles = x.ntiles;
    const bool half_end = half_last(x);
    release(k_empty + tile0 % S);
    if (ntiles == 1) release(q_empty);  // the block's last S has landed: Q may be replaced
    softmax(0, ntiles == 1 && half_end);
    fp8_to_fragments(pa, s);
    // phases 1 .. ntiles - 1: S_j and P_{j-1} V_{j-1}; the softmax of tile j runs under P V
    for (int j = 1; j < ntiles; ++j) {
      wait_full(k_full, j);
      wait_full(v_full, j - 1);
      fence_async_smem();
      take_turn();
      issue_s(j);
      issue_pv(j - 1, ((j - 1) & (promote - 1)) == 0);
      named_arrive(next_turn, 256);
      wg_wait<1>();
      release(k_empty + (tile0 + j) % S);
      if (j == ntiles - 1) release(q_empty);
      softmax(j, j == ntiles - 1 && half_end);
      wg_wait<0>();  // P_{j-1} V_{j-1} has landed: O may be rescaled, P overwritten, the stage freed
      release(v_empty + (tile0 + j - 1) % S);
      fold(j - 1, false);
      fp8_to_fragments(pa, s);
    }
    // last phase: P V of the last tile and (persistent) S_0 of the next block once its Q and first
    // tile are in; after the last block an S_0 of what the buffers hold, never read
    wait_full(v_full, ntiles - 1);
    fence_async_smem();
    take_turn();
    issue_pv(ntiles - 1, ((ntiles - 1) & (promote - 1)) == 0);
    Fp8Slot next{-1, 0, 0, 0, 0};
    if constexpr (PERSIST) {
      mbar_wait(q_full, (n + 1) & 1);
      next = read_slot();
      if (next.bh >= 0) {
        wait_full(k_full, ntiles);
        fence_async_smem();
      }
      wg_fence();
      issue_s(ntiles);
    }
    named_arrive(next_turn, 256);
    // the stores of this block run under the next block's S_0
    if constexpr (PERSIST) wg_wait<1>();
    else wg_wait<0>();
    release(v_empty + (tile0 + ntiles - 1) % S);
    fold(ntiles - 1, true);
    finish_block(x);
    tile0 += ntiles;
    ++n;
    if (next.bh < 0) break;
    x = next;
    start_block(x);
    wg_wait<0>();
  }
  if constexpr (PERSIST) wg_wait<0>();  // the unread S_0
  if (wg == 0) named_sync(my_turn, 256);  // warpgroup 1's arrival after the last phase
  if constexpr (STAGE_O) {
    if (lane == 0) bulk_wait_read();  // shared memory stays until the stores have read it
  }
#endif
}

// NEXUS_FP8_PROMOTE=2|4: the FP8 accumulator summed into O every 2 or 4 key tiles (to measure);
// every tile otherwise (a power of two: the kernel takes its runs by masks).
int fp8_promote_every() {
  const char* s = std::getenv("NEXUS_FP8_PROMOTE");
  const int n = s ? std::atoi(s) : 1;
  return n == 2 || n == 4 ? n : 1;
}

}  // namespace

bool attention_forward_fp8_tma(const ExecContext& ctx, const AttentionParams& a, const View& q, const View& q_scale,
                               const View& k, const View& k_scale, const void* vt, int64_t vt_tiles,
                               const View& v_scale, const View& out) {
#if defined(NEXUS_HAVE_SM90A)
  Fp8Maps maps{};
  if (!encode_byte_rows(&maps.q, q.data, a.batch * a.heads, a.tq, kFp8Rows) ||
      !encode_byte_rows(&maps.k, k.data, a.batch * a.kv_heads, a.tk, kFp8Keys) ||
      !encode_byte_rows(&maps.vt, vt, a.batch * a.kv_heads * vt_tiles, kFp8D, kFp8Keys))
    return false;
  const int64_t blocks = a.batch * a.heads * ((a.tq + kFp8Rows - 1) / kFp8Rows);
  if (blocks >= INT32_MAX) return false;
  const bool persist = persistent_for(a.tk);
  std::optional<Scratch> next_block;
  if (persist) {
    next_block.emplace(ctx, sizeof(int));
    NX_CUDA_CHECK(cudaMemsetAsync(next_block->ptr, 0, sizeof(int), stream_of(ctx)));
  }
  const Fp8Scales scales{static_cast<const float*>(q_scale.data), static_cast<const float*>(k_scale.data),
                         static_cast<const float*>(v_scale.data), int(q_scale.shape.size()) - 1,
                         int(k_scale.shape.size()) - 1, int(v_scale.shape.size()) - 1};
  TcParams p = tc_params(a);
  p.half_tiles = switch_on("NEXUS_FLASH_HALF_TILE");
  const int promote = fp8_promote_every();
  // staged stores unless NEXUS_FLASH_FWD_STAGE_O=0 (the bf16 forward's switch)
  const bool stage_o = persist && out.dtype != DType::F32 && switch_on("NEXUS_FLASH_FWD_STAGE_O") &&
                       encode_rows(&maps.o, out.data, out.dtype == DType::BF16, a.batch * a.heads, a.tq, kFp8D, 16);
  auto go = [&](auto alibi_tag, auto out_tag, auto persist_tag, auto stage_tag) {
    constexpr bool kStage = decltype(stage_tag)::value;
    auto kernel = flash_fwd_fp8_tma<decltype(alibi_tag)::value, decltype(out_tag)::value, decltype(persist_tag)::value,
                                    kStage>;
    constexpr size_t smem = Fp8TmaSmem<kStage>::kBytes;
    NX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    const int64_t grid = persist ? std::min<int64_t>(blocks, sm_count()) : blocks;
    kernel<<<unsigned(grid), kFp8TmaThreads, smem, stream_of(ctx)>>>(
        p, scales, out.data, maps, int(blocks), persist ? static_cast<int*>(next_block->ptr) : nullptr, promote);
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
#else
  (void)ctx, (void)a, (void)q, (void)q_scale, (void)k, (void)k_scale, (void)vt, (void)vt_tiles, (void)v_scale, (void)out;
  return false;
#endif
}

}  // namespace nx::cuda
