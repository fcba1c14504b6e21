// The FP8 (e4m3) flash-attention forward on Hopper's warpgroup MMA (wgmma, sm_90a), head_dim 128,
// q and k scaled per tensor or per (batch, head): the op of attention_fp8.cu's reference kernel
// (ops.yaml attention_forward_fp8, P rounded at the running max of 128-key tiles) on the tensor
// cores. Plan and reasoning: docs/attention_8bit.md, "The tensor-core FP8 forward".
//
// The bf16 forward (flash_wgmma.cu) carries over byte for byte at its head_dim-64 geometry: an e4m3
// row of 128 is 128 bytes, one 128-byte-swizzled column block, and S = Q K^T is m64n128k32 in four
// k-steps with the same descriptors; the loader, the mbarrier ring, the two compute warpgroups
// taking turns and the overlap of tile j's softmax with P_{j-1} V_{j-1} are the same. What differs:
// - FP8 wgmma reads both operands K-major, so P V reads V^T. A pre-pass (fp8_transpose_v) writes
//   it in 128-key tiles, zero past Tk, with the keys permuted within groups of 32 (fp8_key_at) so
//   that P's accumulator fragments are its A fragments after a plain pack (no shuffles).
// - V^T tiles in shared memory carry 8 rows of ones after the head dims, so P V is m64n136k32 and
//   accumulator columns 128..135 hold the sum of the rounded P, rescaled with O: the definition
//   divides by the sum of the rounded weights, which the tensor cores thus give exactly as rounded.
// - P is 448 exp(s - m) (the whole e4m3 range, m the running max in log2 units), packed with
//   satfinite conversions; the 448 cancels in O / sum.
// - Each tile's [P V | sum P] comes from the tensor cores into its own accumulator and is added to
//   O in f32 registers. Hopper's FP8 MMA keeps fewer bits than f32 as it accumulates: one
//   accumulator over all keys lost 74% of the output at 16k keys of uniform attention (H200,
//   session 19; 8e-5 with the per-tile sum). The second accumulator takes registers, so the compute
//   warpgroups raise theirs to 240 and the loader keeps 24 (128 x 24 + 256 x 240 fit the 64K file).
#include "cuda/flash_fp8.cuh"
#include "cuda/flash_tma.hpp"

namespace nx::cuda {
namespace {

using namespace flash;

constexpr int kFp8Stages = 3, kFp8Threads = 384;

// V [B, Hkv, Tk, 128] e4m3 -> V^T tiles [B, Hkv, ceil(Tk / 128), 128, 128]: row d of tile j holds
// V[128 j + fp8_key_at(p)][d] at p, zero past Tk. One block per tile, through shared memory.
__global__ void fp8_transpose_v(const uint8_t* __restrict__ v, uint8_t* __restrict__ vt, int64_t tk, int tiles) {
  __shared__ uint8_t tile[kFp8Keys][kFp8D + 4];  // + 4: the column reads spread over the banks
  const int64_t bh = blockIdx.x / tiles, j = blockIdx.x % tiles;
  const uint8_t* src = v + (bh * tk + j * kFp8Keys) * kFp8D;
  const int64_t keys = tk - j * kFp8Keys;
  for (int w = threadIdx.x; w < kFp8Keys * kFp8D / 4; w += blockDim.x) {
    const int key = w / (kFp8D / 4), c = w % (kFp8D / 4);
    *reinterpret_cast<uint32_t*>(&tile[key][c * 4]) =
        key < keys ? reinterpret_cast<const uint32_t*>(src + int64_t(key) * kFp8D)[c] : 0u;
  }
  __syncthreads();
  uint32_t* dst = reinterpret_cast<uint32_t*>(vt + (bh * tiles + j) * int64_t(kFp8D * kFp8Keys));
  for (int w = threadIdx.x; w < kFp8D * kFp8Keys / 4; w += blockDim.x) {
    const int d = w / (kFp8Keys / 4), p0 = (w % (kFp8Keys / 4)) * 4;
    uint32_t x = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) x |= uint32_t(tile[fp8_key_at(p0 + i)][d]) << (8 * i);
    dst[w] = x;
  }
}

// Shared memory: Q, then the K stages, the V^T stages (with their rows of ones), and the mbarriers.
struct Fp8Smem {
  static constexpr int kQ = kFp8Rows * 128, kK = kFp8Keys * 128, kVt = kVtRows * 128;
  static constexpr int kBarriers = kQ + kFp8Stages * (kK + kVt);
  static constexpr size_t kBytes = 1024 + kBarriers + (1 + 3 * kFp8Stages) * 8;  // + alignment slack
};
static_assert(Fp8Smem::kVt % 1024 == 0, "each V^T stage starts a swizzle atom");

template <bool ALIBI, int OUT>
__global__ void __launch_bounds__(kFp8Threads, 1) flash_fwd_fp8_wgmma(TcParams p, Fp8Scales scales,
                                                                     const uint8_t* __restrict__ q,
                                                                     const uint8_t* __restrict__ k,
                                                                     const uint8_t* __restrict__ vt, void* out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = Fp8Smem;
  constexpr int BM = kFp8Rows, BN = kFp8Keys, S = kFp8Stages, NT = BN / 8, OT = kVtRows / 8, kCompute = 256;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* qs = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  uint8_t* kbuf = qs + L::kQ;
  uint8_t* vbuf = kbuf + S * L::kK;
  uint64_t* q_full = reinterpret_cast<uint64_t*>(qs + L::kBarriers);
  uint64_t* k_full = q_full + 1;
  uint64_t* v_full = k_full + S;
  uint64_t* empty = v_full + S;
  const int tq = int(p.tq), tk = int(p.tk), vt_tiles = (tk + BN - 1) / BN;
  const int nqb = (tq + BM - 1) / BM;
  const int64_t bh = blockIdx.x / nqb;
  const int qi = int(blockIdx.x % nqb);
  const int qb = p.causal ? nqb - 1 - qi : qi;  // causal: the longest rows of a head start first
  const int h = int(bh % p.heads), b = int(bh / p.heads), hk = h / int(p.heads / p.kv_heads);
  const int64_t bhk = int64_t(b) * p.kv_heads + hk;
  const int q0 = qb * BM, offset = tk - tq;
  const int key_end = p.causal ? max(0, min(tk, offset + min(tq, q0 + BM))) : tk;
  const int ntiles = (key_end + BN - 1) / BN;
  if (threadIdx.x == 0) {
    mbar_init(q_full, 128);
    for (int s = 0; s < S; ++s) {
      mbar_init(k_full + s, 128);  // one arrival per loader thread
      mbar_init(v_full + s, 128);
      mbar_init(empty + s, kCompute / 32);  // one per compute warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  // the rows of ones under every V^T stage (the loader writes rows 0..127 only)
  for (int i = threadIdx.x; i < S * 8 * 128 / 4; i += blockDim.x)
    reinterpret_cast<uint32_t*>(vbuf + (i / (8 * 32)) * L::kVt + kFp8D * 128)[i % (8 * 32)] = 0x38383838u;  // e4m3 1.0
  fence_async_smem();
  __syncthreads();

  if (threadIdx.x >= kCompute) {  // the loader warpgroup: 128-byte rows, loaded as 64 16-bit elements
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
    const int tid = threadIdx.x - kCompute;
    const uint16_t* kg = reinterpret_cast<const uint16_t*>(k + bhk * p.tk * kFp8D);
    const uint8_t* vg = vt + bhk * vt_tiles * int64_t(kFp8D * BN);
    load_sw128<64, BM, 128>(qs, reinterpret_cast<const uint16_t*>(q + (int64_t(b) * p.heads + h) * p.tq * kFp8D), q0,
                            p.tq, tid);
    mbar_arrive_on_copies(q_full);
    for (int j = 0; j < ntiles; ++j) {
      const int s = j % S;
      if (j >= S) mbar_wait(empty + s, (j / S - 1) & 1);  // tile j - S has left the stage
      load_sw128<64, BN, 128>(kbuf + s * L::kK, kg, int64_t(j) * BN, p.tk, tid);
      mbar_arrive_on_copies(k_full + s);
      load_sw128<64, kFp8D, 128>(vbuf + s * L::kVt, reinterpret_cast<const uint16_t*>(vg + int64_t(j) * kFp8D * BN), 0,
                                 kFp8D, tid);
      mbar_arrive_on_copies(v_full + s);
    }
    cp_async_wait_all();  // nothing may stay in flight at exit
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n");
  const int wg = threadIdx.x / 128, warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  float o[1][OT][4], pv[1][OT][4], s[1][NT][4], m[1][2], l[1][2], corr[1][2];
  uint32_t pa[BN / 32][4];  // P of the previous tile as e4m3 A fragments
  int row_pos[1][2];
#pragma unroll
  for (int i = 0; i < OT; ++i) o[0][i][0] = o[0][i][1] = o[0][i][2] = o[0][i][3] = 0.f;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    m[0][r] = -INFINITY;
    l[0][r] = 0.f;
    row_pos[0][r] = offset + q0 + wg * 64 + warp * 16 + g + r * 8;
  }
  const float scale2 = p.scale * scale_of(scales.q, scales.q_kind, bh) * scale_of(scales.k, scales.k_kind, bhk) * kLog2e;
  const float slope2 = ALIBI ? p.slopes[h] * kLog2e : 0.f;
  const uint32_t q_addr = smem_addr(qs) + wg * 64 * 128;  // this warpgroup's 64 rows
  mbar_wait(q_full, 0);

  auto issue_s = [&](int j) {  // S_j = Q K_j^T over head-dim chunks of 32
    const uint32_t k_addr = smem_addr(kbuf + (j % S) * L::kK);
#pragma unroll
    for (int kc = 0; kc < kFp8D / 32; ++kc)
      wgmma_ss_n128_e4m3(&s[0][0][0], sw128_desc(q_addr + kc * 32, 16, 1024), sw128_desc(k_addr + kc * 32, 16, 1024),
                         kc > 0);
    wg_commit();
  };
  auto issue_pv = [&](int j) {  // pv = P_j [V_j^T | ones]^T = [P_j V_j | sum P_j], over key chunks of 32
    const uint32_t v_addr = smem_addr(vbuf + (j % S) * L::kVt);
#pragma unroll
    for (int kc = 0; kc < BN / 32; ++kc)
      wgmma_rs_n136_e4m3(&pv[0][0][0], pa[kc], sw128_desc(v_addr + kc * 32, 16, 1024), kc > 0);
    wg_commit();
  };
  auto softmax = [&](int j) {  // of tile j, once S_j has landed: s becomes 448 exp(s - m)
    const int j0 = j * BN;
    const bool edge = j0 + BN > tk || (p.causal && j0 + BN - 1 > offset + q0 + wg * 64);
    if (edge) softmax_step<ALIBI, true, true>(s, m, l, corr, row_pos, j0, t, tk, p.causal, scale2, slope2);
    else softmax_step<ALIBI, false, true>(s, m, l, corr, row_pos, j0, t, tk, p.causal, scale2, slope2);
  };
  auto to_fragments = [&] { fp8_to_fragments(pa, s); };
  // O = (O + P_{j-1} V_{j-1}) * corr: each tile's product comes from the tensor cores alone and is
  // summed here in f32 (Hopper's FP8 MMA keeps fewer bits than f32 as it accumulates)
  auto add_rescaled = [&](float (&acc)[1][OT][4], const float (&tile)[1][OT][4], const float (&c)[1][2]) {
#pragma unroll
    for (int i = 0; i < OT; ++i) {
      acc[0][i][0] = (acc[0][i][0] + tile[0][i][0]) * c[0][0];
      acc[0][i][1] = (acc[0][i][1] + tile[0][i][1]) * c[0][0];
      acc[0][i][2] = (acc[0][i][2] + tile[0][i][2]) * c[0][1];
      acc[0][i][3] = (acc[0][i][3] + tile[0][i][3]) * c[0][1];
    }
  };
  auto release = [&](int j) {  // this warp is done with tile j's stage
    fence_async_smem();
    __syncwarp();
    if (lane == 0) mbar_arrive(empty + j % S);
  };
  // Turns at the tensor cores as in flash_wgmma.cu: warpgroup 1 issues phase j after warpgroup 0's
  // phase j, warpgroup 0 after warpgroup 1's phase j - 1 (named barriers 1 and 2, 256 threads).
  const int my_turn = 1 + wg, next_turn = 1 + (wg + 1) % 2;
  if (ntiles > 0) {
    mbar_wait(k_full, 0);
    fence_async_smem();
    if (wg > 0) named_sync(my_turn, 256);
    wg_fence();
    issue_s(0);
    named_arrive(next_turn, 256);
    wg_wait<0>();
    softmax(0);
    to_fragments();
    for (int j = 1; j < ntiles; ++j) {
      mbar_wait(k_full + j % S, (j / S) & 1);
      mbar_wait(v_full + (j - 1) % S, ((j - 1) / S) & 1);
      fence_async_smem();
      named_sync(my_turn, 256);
      wg_fence();
      issue_s(j);
      issue_pv(j - 1);
      named_arrive(next_turn, 256);
      wg_wait<1>();
      softmax(j);
      wg_wait<0>();  // P_{j-1} V_{j-1} has landed: O may be rescaled, P overwritten, the stage freed
      release(j - 1);
      add_rescaled(o, pv, corr);
      to_fragments();
    }
    mbar_wait(v_full + (ntiles - 1) % S, ((ntiles - 1) / S) & 1);
    fence_async_smem();
    named_sync(my_turn, 256);
    wg_fence();
    issue_pv(ntiles - 1);
    if (wg == 0) named_arrive(next_turn, 256);  // warpgroup 0 waits for no later phase
    wg_wait<0>();
#pragma unroll
    for (int i = 0; i < OT; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[0][i][e] += pv[0][i][e];
  }
  // out = O / sum P * v's scale; the sum is in the ones block's columns (each the whole row's)
  const float vs = scale_of(scales.v, scales.v_kind, bhk);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = q0 + wg * 64 + warp * 16 + g + r * 8;
    if (row >= tq) continue;
    const float sum = o[0][OT - 1][r * 2], f = sum > 0.f ? vs / sum : 0.f;
    const int64_t at = ((int64_t(b) * p.heads + h) * p.tq + row) * kFp8D + t * 2;
#pragma unroll
    for (int dn = 0; dn < kFp8D / 8; ++dn) store2<OUT>(out, at + dn * 8, o[0][dn][r * 2] * f, o[0][dn][r * 2 + 1] * f);
  }
#endif
}

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
  if (a.tk > INT32_MAX - kFp8Keys || blocks > INT32_MAX || a.batch * a.kv_heads * tiles > INT32_MAX) return false;
  Scratch vt(ctx, size_t(a.batch * a.kv_heads * tiles) * kFp8D * kFp8Keys);
  fp8_transpose_v<<<unsigned(a.batch * a.kv_heads * tiles), 256, 0, stream_of(ctx)>>>(
      static_cast<const uint8_t*>(v.data), static_cast<uint8_t*>(vt.ptr), a.tk, int(tiles));
  NX_CUDA_LAUNCH_CHECK();
  // the TMA kernel unless NEXUS_FP8_TMA=0 (this one then takes every call, to compare)
  if (switch_on("NEXUS_FP8_TMA") &&
      attention_forward_fp8_tma(ctx, a, q, q_scale, k, k_scale, vt.ptr, tiles, v_scale, out))
    return true;
  const Fp8Scales scales{static_cast<const float*>(q_scale.data), static_cast<const float*>(k_scale.data),
                         static_cast<const float*>(v_scale.data), int(q_scale.shape.size()) - 1,
                         int(k_scale.shape.size()) - 1, int(v_scale.shape.size()) - 1};
  const TcParams p = tc_params(a);
  auto go = [&](auto alibi_tag, auto out_tag) {
    auto kernel = flash_fwd_fp8_wgmma<decltype(alibi_tag)::value, decltype(out_tag)::value>;
    NX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Fp8Smem::kBytes)));
    kernel<<<unsigned(blocks), kFp8Threads, Fp8Smem::kBytes, stream_of(ctx)>>>(
        p, scales, static_cast<const uint8_t*>(q.data), static_cast<const uint8_t*>(k.data),
        static_cast<const uint8_t*>(vt.ptr), out.data);
    NX_CUDA_LAUNCH_CHECK();
  };
  auto with_out = [&](auto alibi_tag) {
    if (out.dtype == DType::BF16) go(alibi_tag, std::integral_constant<int, 1>{});
    else if (out.dtype == DType::F16) go(alibi_tag, std::integral_constant<int, 2>{});
    else go(alibi_tag, std::integral_constant<int, 0>{});
  };
  a.alibi_slopes.empty() ? with_out(std::false_type{}) : with_out(std::true_type{});
  return true;
#else
  return false;
#endif
}

}  // namespace nx::cuda
