// Flash-attention backward on Hopper's warpgroup MMA (wgmma, sm_90a), bf16/f16, head_dim 64 or 128.
#include <climits>

#include "cuda/flash_order.hpp"
#include "cuda/flash_sm90.cuh"
#include "cuda/flash_tma.hpp"

namespace nx::cuda {
namespace {

using namespace flash;

constexpr int kBwdCompute = 256, kBwdThreads = 384, kBwdStages = 2;
static_assert(kBwdThreads == kBwdCompute + 128, "two compute warpgroups and one loader");
// setmaxnreg: 128 x 56 + 256 x 224 registers fit the 64K file; the loader needs few

// A block owns 128 keys of one (batch, kv head) and has three warpgroups: two compute (warpgroup w
// owns keys 64w.. and keeps their dK and dV in registers), the third loads K and V once and then
// the Q and dO tiles of every head sharing the kv head into a ring of stages guarded by mbarriers,
// as in the forward. Each tile's lse (in log2 units) and delta come from tile_stats
// (bwd_tile_stats), brought by one loader thread's bulk copy. Per tile:
//   S^T = K Q^T and dP^T = V dO^T (both operands from shared memory), P^T = exp(S^T - lse),
//   dS^T = P^T (dP^T - delta); dV += P^T dO and dK += dS^T Q with P^T and dS^T from registers;
//   dS^T goes to shared memory, where dQ = dS K is formed in two parts (by rows or by columns,
//   see bwd_dq_cols), staged in f32 and added to dq_acc by one bulk reduce-add
//   (cp.reduce.async.bulk). dq_acc holds each tile in fragment order (dq_index), so the staging
//   stores are whole 16-byte rows of consecutive lanes (no bank conflicts); dq_from_fragments
//   converts it.
// Loads (session 21): with TMA (the default, as in the forward) one loader thread brings K and V
// and each stage's Q, dO and statistics by tensor-map and bulk copies counted in bytes on the
// stage's mbarrier; NEXUS_FLASH_TMA=0, or where no tensor map can be made, 128 loader threads
// (64 in deterministic mode) copy them with cp.async.
// The warpgroups take turns forming dQ (session 21): warpgroup i % 2 owns tile i's. The other hands
// its half of dS^T over (bar.arrive, no wait) and runs on into tile i + 1, so one warpgroup's
// exponentials and dS run under the other's dQ products; when each formed half of every tile's dQ,
// both met at each tile and their element-wise phases left the tensor cores idle together.
// dS^T is double-buffered: a warpgroup reaches tile i + 2's dS^T only after the owner of tile i + 1
// has had its half, which its owner hands over after finishing tile i.
// Query rows per tile: 64 at head_dim 128 (registers: dK and dV alone take 128), 128 at head_dim
// 64 (half the barriers and staging per FLOP).
// Deterministic mode (DET) adds each dQ tile's parts in a fixed order (flash_order.hpp): the walk
// starts at TileOrder::rotation, and the adds move off the compute warps to one writer thread in
// the loader warpgroup (whose loads then take two warps). The compute warpgroups stage dQ and
// arrive on dq_full; the writer waits until the tile's turn counter shows every earlier part
// added, adds the whole tile, frees the staging buffer (dq_empty) once the add has read it, and
// counts its part once the add has landed. Waiting for the turn, for the add and the release
// fence that publishes it cost the compute warps 13-29% when they did it themselves (session 16).
// Two writers take alternate tiles (session 28: with one, waiting for each add to land before the
// next tile's add cost head_dim 128 9-31% against the default backward; three were slower).
constexpr int kDqWriters = 2;
constexpr int kBwdKeys = 128;
// A tile's lse and delta come by a bulk copy that completes on the stage's mbarrier (session 18: when
// the compute threads loaded them, the loads were waited for at the fences opening the next tile).
// Until session 21 the compute threads loaded them at head_dim 128, a tile ahead, published by the
// per-tile meeting of the warpgroups, which no longer exists.
// Threads of the loader warpgroup that load (the deterministic writer has one of the other two warps).
template <bool DET>
__host__ __device__ constexpr int bwd_loaders() { return DET ? 64 : 128; }
// load_sw128's 128-thread split, done by LOADERS threads.
template <int D, int ROWS, int LOADERS>
__device__ __forceinline__ void load_tile(uint8_t* dst, const uint16_t* src, int64_t r0, int64_t n, int tid) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#pragma unroll
  for (int v = tid; v < 128; v += LOADERS) load_sw128<D, ROWS, 128>(dst, src, r0, n, v);
#endif
}
__host__ __device__ constexpr int bwd_rows(int d) { return d == 64 ? 128 : 64; }
// dQ columns per part of a tile (the owner forms two parts): the whole head at 128-row tiles
// (parts split the rows), half of it at 64-row tiles (parts split the columns).
__host__ __device__ constexpr int bwd_dq_cols(int d) { return bwd_rows(d) == 128 ? d : d / 2; }
// First row and first column of part `part` of a dQ tile.
template <int D>
__host__ __device__ constexpr int dq_part_row0(int part) { return bwd_rows(D) == 128 ? part * 64 : 0; }
template <int D>
__host__ __device__ constexpr int dq_part_col0(int part) { return bwd_rows(D) == 128 ? 0 : part * bwd_dq_cols(D); }
// Offset in a dq_acc tile of accumulator element e of n8 block n held by lane `lane` of warp `warp`
// for part `part`: part-major, so each part is one contiguous range.
template <int D>
__host__ __device__ constexpr int dq_index(int part, int warp, int n, int lane, int e) {
  return (((part * 4 + warp) * (bwd_dq_cols(D) / 8) + n) * 32 + lane) * 4 + e;
}

// Per query tile of T rows, T values of lse * log2(e) (+inf past the last row: weight 0) and T of
// delta (0 past it), so each tile's statistics are one aligned block a bulk copy can bring.
__global__ void bwd_tile_stats(const float* __restrict__ lse, const float* __restrict__ delta, float* __restrict__ out,
                               int64_t tiles, int tq, int T) {
  const int64_t n = tiles * T;
  for (int64_t u = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; u < n; u += int64_t(gridDim.x) * blockDim.x) {
    const int64_t tile = u / T, ntiles = (tq + T - 1) / T;
    const int row = int(tile % ntiles) * T + int(u % T);
    const int64_t at = (tile / ntiles) * tq + row;
    out[tile * 2 * T + u % T] = row < tq ? lse[at] * kLog2e : INFINITY;
    out[tile * 2 * T + T + u % T] = row < tq ? delta[at] : 0.f;
  }
}

// Tensor maps of q, dout (boxes of a tile's rows) and k, v (boxes of the block's keys) as
// [batch * heads, rows, D] (TMA loads; unused otherwise), and of dk, dv in boxes of one warp's 16
// keys (the stores of stage_dkv).
struct BwdMaps {
  CUtensorMap q, dout, k, v, dk, dv;
};

template <int D, bool BF16, bool ALIBI, bool DET, bool TMA>
__global__ void __launch_bounds__(kBwdThreads, 1) flash_bwd_wgmma(TcParams p, const uint16_t* __restrict__ q,
    const uint16_t* __restrict__ k, const uint16_t* __restrict__ v, const uint16_t* __restrict__ dout,
    const float* __restrict__ tile_stats, float* __restrict__ dq_acc,
    int* __restrict__ dq_turns, uint16_t* __restrict__ dk, uint16_t* __restrict__ dv,
    const __grid_constant__ BwdMaps maps, bool stage_dkv) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int KB = kBwdKeys, T = bwd_rows(D), NT = T / 8, DT = D / 8, S = kBwdStages;
  // the dQ tile [T][D] in two parts: rows when T = 128, columns when T = 64
  constexpr int NQ = bwd_dq_cols(D);
  constexpr int kKVBytes = KB * D * 2, kTileBytes = T * D * 2;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* ks = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  uint8_t* vs = ks + kKVBytes;
  uint8_t* qbuf = vs + kKVBytes;             // S Q tiles
  uint8_t* dobuf = qbuf + S * kTileBytes;    // S dO tiles
  uint8_t* dst = dobuf + S * kTileBytes;     // two dS^T [query / 64][key][query % 64], swizzled
  float* dqs = reinterpret_cast<float*>(dst + 2 * KB * T * 2);  // dQ tile (T x D f32), as in dq_acc
  float* stats = dqs + T * D;                // [i % 2][lse * log2(e) | delta][T]
  uint64_t* kv_full = reinterpret_cast<uint64_t*>(stats + 2 * 2 * T);
  uint64_t* full = kv_full + 1;
  uint64_t* empty = full + S;
  uint64_t* dq_full = empty + S;  // DET: tile i's dQ is staged ([i % kDqWriters]: one per writer)
  uint64_t* dq_empty = dq_full + kDqWriters;  // DET: the writer's add has read the staging buffer
  constexpr int kLoaders = bwd_loaders<DET>();
  const int tq = int(p.tq), tk = int(p.tk), offset = tk - tq, ntiles = (tq + T - 1) / T;
  constexpr uint32_t kStatBytes = 2 * T * sizeof(float);
  const KeyBlockWalk walk(p, KB, T);
  const int b = walk.b, hk = walk.hk, k0 = walk.k0, total = walk.total;
  const int rotation = DET ? TileOrder<T, KB>(tq, tk, walk.group, p.causal).rotation(k0 / KB) : 0;
  auto slot = [&](int i) { return i + rotation < total ? i + rotation : i + rotation - total; };  // step -> walk position
  // Query tile qt of head h among all (batch, head, tile): its index in dq_acc, the turn counters
  // and tile_stats (< 2^31: the launcher checks).
  auto tile_of = [&](int h, int qt) { return (b * int(p.heads) + h) * ntiles + qt; };
  constexpr int kLoadArrivals = TMA ? 1 : kLoaders;  // the TMA thread's, or one per loader thread
  if (threadIdx.x == 0) {
    mbar_init(kv_full, kLoadArrivals);
    for (int s = 0; s < S; ++s) {
      mbar_init(full + s, kLoadArrivals);
      mbar_init(empty + s, kBwdCompute / 32);  // one per compute warp
    }
    for (int w = 0; w < kDqWriters; ++w) mbar_init(dq_full + w, 1);  // the owner's issuer
    mbar_init(dq_empty, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (threadIdx.x >= kBwdCompute) {  // the loader warpgroup
    asm volatile("setmaxnreg.dec.sync.aligned.u32 56;\n");
    const int tid = threadIdx.x - kBwdCompute;
    if constexpr (DET) {
      // the writers (lane 0 of the two non-loading warps) take alternate tiles: one waits for its
      // add to land before passing the turn while the other already adds the next tile; each has
      // its own dq_full (a writer a tile ahead would take the other's phase for its own)
      static_assert(kDqWriters * 32 == 128 - bwd_loaders<true>(), "one writer a non-loading warp");
      if (tid >= kLoaders && (tid - kLoaders) % 32 == 0) {
        const TileOrder<T, KB> order(tq, tk, walk.group, p.causal);
        for (int i = (tid - kLoaders) / 32; i < total; i += kDqWriters) {
          const int h = walk.head(slot(i)), qt = walk.q0(slot(i), T) / T, tile = tile_of(h, qt);
          const int turn = order.turn(k0 / KB, h - hk * walk.group, qt);
          mbar_wait(dq_full + i % kDqWriters, (i / kDqWriters) & 1);
          wait_turn(dq_turns + tile, turn);
          bulk_reduce_add_f32(dq_acc + int64_t(tile) * T * D, dqs, uint32_t(T * D * 4));
          bulk_wait_read();
          mbar_arrive(dq_empty);
          pass_turn(dq_turns + tile);
        }
        return;
      }
      if (tid >= kLoaders) return;
    }
    if constexpr (TMA) {
      if (tid != 0) return;
      const int bhk = b * int(p.kv_heads) + hk;
      mbar_arrive_expect_bytes(kv_full, 2 * kKVBytes);
      for (int c = 0; c < D / 64; ++c) {
        tma_load_3d(ks + c * KB * 128, &maps.k, 64 * c, k0, bhk, kv_full);
        tma_load_3d(vs + c * KB * 128, &maps.v, 64 * c, k0, bhk, kv_full);
      }
      for (int i = 0; i < total; ++i) {
        const int s = i % S, h = walk.head(slot(i)), q0 = walk.q0(slot(i), T), bh = b * int(p.heads) + h;
        if (i >= S) mbar_wait(empty + s, (i / S - 1) & 1);  // tile i - S has left the stage
        // the compute threads' plain reads of this stage's stats come before the copies over them
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        mbar_arrive_expect_bytes(full + s, kStatBytes + 2 * kTileBytes);
        bulk_copy_to_shared(stats + s * 2 * T, tile_stats + int64_t(tile_of(h, q0 / T)) * 2 * T, kStatBytes, full + s);
        for (int c = 0; c < D / 64; ++c) {
          tma_load_3d(qbuf + s * kTileBytes + c * T * 128, &maps.q, 64 * c, q0, bh, full + s);
          tma_load_3d(dobuf + s * kTileBytes + c * T * 128, &maps.dout, 64 * c, q0, bh, full + s);
        }
      }
      return;
    }
    load_tile<D, KB, kLoaders>(ks, k + ((int64_t(b) * p.kv_heads + hk) * p.tk) * D, k0, p.tk, tid);
    load_tile<D, KB, kLoaders>(vs, v + ((int64_t(b) * p.kv_heads + hk) * p.tk) * D, k0, p.tk, tid);
    mbar_arrive_on_copies(kv_full);
    for (int i = 0; i < total; ++i) {
      const int s = i % S, q0 = walk.q0(slot(i), T);
      if (i >= S) mbar_wait(empty + s, (i / S - 1) & 1);  // tile i - S has left the stage
      const int64_t base = (int64_t(b) * p.heads + walk.head(slot(i))) * p.tq;
      if (tid == 0) {
        // the compute threads' plain reads of this stage's stats (released by `empty`) come before the
        // bulk copy's async-proxy writes over them
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        mbar_expect_bytes(full + s, kStatBytes);  // before this thread's arrival below, so the phase waits for it
        const float* from = tile_stats + int64_t(tile_of(walk.head(slot(i)), q0 / T)) * 2 * T;
        bulk_copy_to_shared(stats + s * 2 * T, from, kStatBytes, full + s);
      }
      load_tile<D, T, kLoaders>(qbuf + s * kTileBytes, q + base * D, q0, p.tq, tid);
      load_tile<D, T, kLoaders>(dobuf + s * kTileBytes, dout + base * D, q0, p.tq, tid);
      mbar_arrive_on_copies(full + s);
    }
    cp_async_wait_all();  // nothing may stay in flight at exit
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 224;\n");
  const int wg = warpgroup_index(), warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;

  float dka[1][DT][4], dva[1][DT][4];
#pragma unroll
  for (int i = 0; i < DT; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) dka[0][i][e] = dva[0][i][e] = 0.f;
  const int key_row = wg * 64 + warp * 16 + g;  // this thread's first key row in the block
  const int keys[2] = {k0 + key_row, k0 + key_row + 8};
  const float scale2 = p.scale * kLog2e;
  const uint32_t k_addr = smem_addr(ks), v_addr = smem_addr(vs);
  // Descriptors of this warpgroup's K and V rows (K-major, S^T and dP^T) and of all K (N-major, dQ):
  // once per block; each product adds its offset (desc_plus).
  const uint64_t k_rows = sw128_desc(k_addr + wg * 64 * 128, 16, 1024), v_rows = sw128_desc(v_addr + wg * 64 * 128, 16, 1024);
  const uint64_t k_cols = sw128_desc(k_addr, KB * 128, 1024);
  mbar_wait(kv_full, 0);

  const bool issuer = threadIdx.x % 128 == 0;  // issues this warpgroup's bulk adds of dQ (DET: hands them over)
  auto release = [&](uint64_t* bar) {  // this warp is done with a stage
    fence_async_smem();
    __syncwarp();
    if (lane == 0) mbar_arrive(bar);
  };
  for (int i = 0; i < total; ++i) {
    const int s = i % S, h = walk.head(slot(i)), q0 = walk.q0(slot(i), T);
    mbar_wait(full + s, (i / S) & 1);
    fence_async_smem();
    const uint32_t q_addr = smem_addr(qbuf + s * kTileBytes), do_addr = smem_addr(dobuf + s * kTileBytes);
    const float* ls = stats + (i % 2) * 2 * T;  // lse * log2(e)
    const float* dl = ls + T;
    uint8_t* dsb = dst + (i % 2) * (KB * T * 2);  // this tile's dS^T
    const uint32_t ds_addr = smem_addr(dsb);

    // S^T = K Q^T and dP^T = V dO^T: 64 keys x 64 queries per warpgroup
    float st[1][NT][4], dpt[1][NT][4];
    const uint64_t q_rows = sw128_desc(q_addr, 16, 1024), do_rows = sw128_desc(do_addr, 16, 1024);
    wg_fence();
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc) {
      const uint32_t a_off = (kc / 4) * (KB * 128) + (kc % 4) * 32, b_off = (kc / 4) * (T * 128) + (kc % 4) * 32;
      mma_ss<T, BF16>(&st[0][0][0], desc_plus(k_rows, a_off), desc_plus(q_rows, b_off), kc > 0);
    }
    wg_commit();
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc) {
      const uint32_t a_off = (kc / 4) * (KB * 128) + (kc % 4) * 32, b_off = (kc / 4) * (T * 128) + (kc % 4) * 32;
      mma_ss<T, BF16>(&dpt[0][0][0], desc_plus(v_rows, a_off), desc_plus(do_rows, b_off), kc > 0);
    }
    wg_commit();
    // P^T, with masks only on tiles that cross a sequence end or the diagonal. Two instantiations:
    // with the mask under a runtime test, the compiler computed it for every element of every tile
    // (ncu, session 18: a third of the compute warps' instructions at d64 were compares and selects).
    const bool edge = q0 + T > tq || k0 + KB > tk || (p.causal && k0 + wg * 64 + 63 > offset + q0);
    const float slope2 = ALIBI ? p.slopes[h] * kLog2e : 0.f;
    auto probabilities = [&](auto masked) {
      if constexpr (ALIBI) {
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int col = n * 8 + t * 2 + (e & 1), query = q0 + col, key = keys[e >> 1], qpos = offset + query;
            float x = fmaf(st[0][n][e], scale2, -ls[col]) - slope2 * float(qpos - key);
            float pv = ex2(x);  // rows without keys have lse = +inf: weight 0
            if constexpr (decltype(masked)::value)
              if (query >= tq || key >= tk || (p.causal && key > qpos)) pv = 0.f;
            st[0][n][e] = pv;
          }
      } else {
        // Kept: query < tq, key < tk and (causal) key <= offset + query, i.e. lo[r] <= c < hi for
        // the element's column c = n * 8 + (e & 1) past the thread's first (query q0 + 2t): the
        // bounds once per row, then two compares of a constant and a select per element. (ALiBi
        // keeps the test above: with its distances live, these bounds made ptxas spill.)
        int lo[2] = {0, 0}, hi = 0;
        if constexpr (decltype(masked)::value) {
          hi = tq - q0 - t * 2;
#pragma unroll
          for (int r = 0; r < 2; ++r)
            lo[r] = keys[r] >= tk ? INT_MAX : p.causal ? keys[r] - offset - q0 - t * 2 : INT_MIN;
        }
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int c = n * 8 + (e & 1);
            float pv = ex2(fmaf(st[0][n][e], scale2, -ls[c + t * 2]));  // lse = +inf: weight 0
            if constexpr (decltype(masked)::value)
              if (c < lo[e >> 1] || c >= hi) pv = 0.f;
            st[0][n][e] = pv;
          }
      }
    };
    wg_wait<1>();
    if (edge) probabilities(std::true_type{});
    else probabilities(std::false_type{});
    uint32_t pa[NT / 2][4], dsa[NT / 2][4];
    to_a_fragments<BF16>(pa, st);
    wg_wait<0>();
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) dpt[0][n][e] = st[0][n][e] * (dpt[0][n][e] - dl[n * 8 + t * 2 + (e & 1)]);
    to_a_fragments<BF16>(dsa, dpt);
    // dV += P^T dO, dK += dS^T Q (B operands N-major: head_dim contiguous)
    const uint64_t do_cols = sw128_desc(do_addr, T * 128, 1024), q_cols = sw128_desc(q_addr, T * 128, 1024);
    wg_fence();
#pragma unroll
    for (int kc = 0; kc < T / 16; ++kc) {
      mma_rs<D, BF16>(&dva[0][0][0], pa[kc], desc_plus(do_cols, kc * 16 * 128));
      mma_rs<D, BF16>(&dka[0][0][0], dsa[kc], desc_plus(q_cols, kc * 16 * 128));
    }
    wg_commit();
    // dS^T to shared memory (swizzled rows of 64 queries) for dQ = dS K
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = key_row + r * 8;
        *reinterpret_cast<uint32_t*>(dsb + (n / 8) * (KB * 128) + row * 128 + (((n % 8) ^ (row % 8)) << 4) + t * 4) =
            dsa[n / 2][(n % 2) * 2 + r];
      }
    fence_async_smem();
    const int ds_bar = 1 + (i & 1);  // named barrier of tile i's hand-over (2 x 128 threads)
    if ((i & 1) != wg) {  // the other warpgroup forms tile i's dQ
      if (issuer) {  // this warpgroup's add of tile i - 1 has read the staging buffer, which tile i's owner fills
        if constexpr (DET) {
          if (i > 0) mbar_wait(dq_empty, (i - 1) & 1);
        } else {
          bulk_wait_read();
        }
      }
      named_arrive(ds_bar, kBwdCompute);  // this half of dS^T is written (published by the arrival)
      wg_wait<0>();  // dV and dK of tile i are done: its stage may be refilled
      release(empty + s);
      continue;
    }
    named_sync(ds_bar, kBwdCompute);  // the other half of dS^T is written and the staging buffer free
    // dQ part p = dS K over the block's 128 keys (A = dS M-major, B = K N-major): rows or columns
    // dq_part_row0(p).., dq_part_col0(p)..; the second is issued once the first (and dV, dK) are
    // done, and runs while the first is staged.
    const uint64_t ds_cols = sw128_desc(ds_addr, KB * 128, 1024);
    auto issue_dq = [&](int part, float (&acc)[NQ / 8][4]) {
      wg_fence();
#pragma unroll
      for (int kc = 0; kc < KB / 16; ++kc) {
        const uint32_t a_off = (dq_part_row0<D>(part) / 64) * (KB * 128) + kc * 16 * 128;
        const uint32_t b_off = (dq_part_col0<D>(part) / 64) * (KB * 128) + (dq_part_col0<D>(part) % 64) * 2 + kc * 16 * 128;
        mma_ss<NQ, BF16, true>(&acc[0][0], desc_plus(ds_cols, a_off), desc_plus(k_cols, b_off), kc > 0);
      }
      wg_commit();
    };
    auto stage_dq = [&](int part, const float (&acc)[NQ / 8][4]) {
#pragma unroll
      for (int n = 0; n < NQ / 8; ++n)
        *reinterpret_cast<float4*>(dqs + dq_index<D>(part, warp, n, lane, 0)) =
            make_float4(acc[n][0], acc[n][1], acc[n][2], acc[n][3]);
    };
    float dq0[NQ / 8][4], dq1[NQ / 8][4];
    issue_dq(0, dq0);
    wg_wait<0>();  // every product of tile i but dQ's second part is done: its stage may be refilled
    release(empty + s);
    issue_dq(1, dq1);
    stage_dq(0, dq0);
    wg_wait<0>();
    stage_dq(1, dq1);
    fence_async_smem();
    named_sync(3 + wg, 128);  // the tile is staged
    if (issuer) {
      if constexpr (DET) {
        mbar_arrive(dq_full + i % kDqWriters);
      } else {
        bulk_reduce_add_f32(dq_acc + int64_t(tile_of(h, q0 / T)) * T * D, dqs, uint32_t(T * D * 4));
      }
    }
  }
  if (!DET && issuer) bulk_wait_all();
  const int bhk = b * int(p.kv_heads) + hk;
  if (TMA && stage_dkv) {
    // dK and dV leave through shared memory by TMA stores (full lines, not 32-bit stores of 16
    // bytes a row): the Q and dO stages (64 KB) are free once both warpgroups are past their last
    // tile (each waited for its products before this barrier); keys past tk are not written.
    named_sync(5, kBwdCompute);
    uint8_t* dk_buf = qbuf + (wg * 4 + warp) * (D / 64) * 2048;
    uint8_t* dv_buf = dk_buf + 8 * (D / 64) * 2048;
    stage_rows16<BF16>(smem_addr(dk_buf), dka[0], p.scale, p.scale, lane);
    stage_rows16<BF16>(smem_addr(dv_buf), dva[0], 1.f, 1.f, lane);
    fence_async_smem();
    __syncwarp();
    if (lane == 0) {
      for (int c = 0; c < D / 64; ++c) {
        tma_store_3d(&maps.dk, dk_buf + c * 2048, 64 * c, k0 + key_row - g, bhk);
        tma_store_3d(&maps.dv, dv_buf + c * 2048, 64 * c, k0 + key_row - g, bhk);
      }
      bulk_commit();
      bulk_wait_read();  // shared memory stays until the stores have read it
    }
    return;
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (keys[r] >= tk) continue;
    const int64_t at = (int64_t(bhk) * p.tk + keys[r]) * D;
#pragma unroll
    for (int dn = 0; dn < DT; ++dn) {
      *reinterpret_cast<uint32_t*>(dk + at + dn * 8 + t * 2) = pack2<BF16>(dka[0][dn][r * 2] * p.scale, dka[0][dn][r * 2 + 1] * p.scale);
      *reinterpret_cast<uint32_t*>(dv + at + dn * 8 + t * 2) = pack2<BF16>(dva[0][dn][r * 2], dva[0][dn][r * 2 + 1]);
    }
  }
#endif
}

// dq = scale * dq_acc, from the fragment-ordered tiles back to [batch * heads, tq, D] rows; one
// thread per 4 accumulator elements (rows g and g + 8, two columns).
template <int D, bool BF16>
__global__ void dq_from_fragments(const float4* __restrict__ acc, uint16_t* __restrict__ dq, int64_t units, int tq,
                                  float scale) {
  constexpr int T = bwd_rows(D), NQ = bwd_dq_cols(D), kUnits = T * D / 4;
  const int ntiles = (tq + T - 1) / T;
  for (int64_t u = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; u < units; u += int64_t(gridDim.x) * blockDim.x) {
    const int64_t tile = u / kUnits;
    const int within = int(u % kUnits), lane = within % 32, n = (within / 32) % (NQ / 8), partwarp = within / 32 / (NQ / 8);
    const int part = partwarp / 4, warp = partwarp % 4;
    const int row = int(tile % ntiles) * T + dq_part_row0<D>(part) + warp * 16 + lane / 4;
    const int col = dq_part_col0<D>(part) + n * 8 + (lane % 4) * 2;
    const float4 x = acc[u];
    uint16_t* base = dq + ((tile / ntiles) * tq) * D + col;
    if (row < tq) *reinterpret_cast<uint32_t*>(base + int64_t(row) * D) = pack2<BF16>(x.x * scale, x.y * scale);
    if (row + 8 < tq) *reinterpret_cast<uint32_t*>(base + int64_t(row + 8) * D) = pack2<BF16>(x.z * scale, x.w * scale);
  }
}

template <int D, bool BF16, bool DET>
void launch_bwd_wgmma(const ExecContext& ctx, const AttentionParams& a, const View& q, const View& k, const View& v,
                      const View& dout, const float* lse, const float* delta, const View& dq, const View& dk,
                      const View& dv) {
  TcParams p = tc_params(a);
  constexpr int T = bwd_rows(D), S = kBwdStages;
  const int64_t tiles = a.batch * a.heads * ((a.tq + T - 1) / T), units = tiles * T * D / 4;
  Scratch tile_stats(ctx, size_t(tiles) * 2 * T * sizeof(float));
  bwd_tile_stats<<<unsigned(std::min<int64_t>((tiles * T + 255) / 256, 65535)), 256, 0, stream_of(ctx)>>>(
      lse, delta, static_cast<float*>(tile_stats.ptr), tiles, int(a.tq), T);
  NX_CUDA_LAUNCH_CHECK();
  // dq_acc, then (deterministic) a turn counter per tile; zeroed together
  const size_t acc_bytes = size_t(units) * 16, bytes = acc_bytes + (DET ? size_t(tiles) * sizeof(int) : 0);
  Scratch acc(ctx, bytes);
  NX_CUDA_CHECK(cudaMemsetAsync(acc.ptr, 0, bytes, stream_of(ctx)));
  int* turns = DET ? reinterpret_cast<int*>(static_cast<uint8_t*>(acc.ptr) + acc_bytes) : nullptr;
  const size_t smem = 1024 + size_t(2 * kBwdKeys + 2 * S * T) * D * 2 + 2 * size_t(kBwdKeys) * T * 2 +
                      size_t(T) * D * 4 + S * 2 * T * sizeof(float) + (1 + 2 * S + kDqWriters + 1) * 8;
  BwdMaps maps{};
  const bool tma = tma_requested() && encode_rows(&maps.q, q.data, BF16, a.batch * a.heads, a.tq, D, T) &&
                   encode_rows(&maps.dout, dout.data, BF16, a.batch * a.heads, a.tq, D, T) &&
                   encode_rows(&maps.k, k.data, BF16, a.batch * a.kv_heads, a.tk, D, kBwdKeys) &&
                   encode_rows(&maps.v, v.data, BF16, a.batch * a.kv_heads, a.tk, D, kBwdKeys);
  // dK and dV by TMA stores (the Q and dO stages hold them: 2 x 128 keys x D x 2 bytes fit);
  // NEXUS_FLASH_BWD_STAGE_DKV=0 stores them from registers (to measure)
  static_assert(kBwdKeys <= S * T, "dK and dV fit the Q and dO stages");
  const bool stage_dkv = tma && switch_on("NEXUS_FLASH_BWD_STAGE_DKV") &&
                         encode_rows(&maps.dk, dk.data, BF16, a.batch * a.kv_heads, a.tk, D, 16) &&
                         encode_rows(&maps.dv, dv.data, BF16, a.batch * a.kv_heads, a.tk, D, 16);
  auto go = [&](auto alibi_tag, auto tma_tag) {
    auto kernel = flash_bwd_wgmma<D, BF16, decltype(alibi_tag)::value, DET, decltype(tma_tag)::value>;
    NX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    auto u16 = [](const View& x) { return static_cast<const uint16_t*>(x.data); };
    kernel<<<unsigned(a.batch * a.kv_heads * ((a.tk + kBwdKeys - 1) / kBwdKeys)), kBwdThreads, smem, stream_of(ctx)>>>(
        p, u16(q), u16(k), u16(v), u16(dout), static_cast<const float*>(tile_stats.ptr), static_cast<float*>(acc.ptr),
        turns, static_cast<uint16_t*>(dk.data), static_cast<uint16_t*>(dv.data), maps, stage_dkv);
    NX_CUDA_LAUNCH_CHECK();
  };
  auto with_tma = [&](auto alibi_tag) { tma ? go(alibi_tag, std::true_type{}) : go(alibi_tag, std::false_type{}); };
  a.alibi_slopes.empty() ? with_tma(std::false_type{}) : with_tma(std::true_type{});
  dq_from_fragments<D, BF16><<<unsigned(std::min<int64_t>((units + 255) / 256, 65535)), 256, 0, stream_of(ctx)>>>(
      static_cast<const float4*>(acc.ptr), static_cast<uint16_t*>(dq.data), units, int(a.tq), p.scale);
  NX_CUDA_LAUNCH_CHECK();
}

}  // namespace

// The wgmma backward; false where it does not apply. dQ's parts are added by f32 bulk reduce-adds:
// in any order by default, in a fixed one (TileOrder) in deterministic mode, which needs every key
// block of a (batch, kv head) resident at once: at most one per multiprocessor.
bool attention_backward_wgmma(const ExecContext& ctx, const AttentionParams& a, const View& q, const View& k,
                              const View& v, const View& dout, const float* lse, const float* delta, const View& dq,
                              const View& dk, const View& dv) {
#if defined(NEXUS_HAVE_SM90A)
  if (compute_capability() != 90 || (a.dim != 64 && a.dim != 128)) return false;
  if (a.batch * a.heads * (a.tq / 64 + 1) * 2 >= INT32_MAX) return false;  // tile and counter indices in int
  if (a.deterministic && ((a.tk + kBwdKeys - 1) / kBwdKeys > sm_count() ||  // all of a (batch, kv head) resident
                          int64_t(sm_count()) * a.heads * (a.tq / 64 + 1) >= INT32_MAX))
    return false;
  const bool bf16 = q.dtype == DType::BF16;
  auto go = [&](auto d_tag, auto bf16_tag, auto det_tag) {
    launch_bwd_wgmma<decltype(d_tag)::value, decltype(bf16_tag)::value, decltype(det_tag)::value>(
        ctx, a, q, k, v, dout, lse, delta, dq, dk, dv);
  };
  auto with_det = [&](auto d_tag, auto bf16_tag) {
    a.deterministic ? go(d_tag, bf16_tag, std::true_type{}) : go(d_tag, bf16_tag, std::false_type{});
  };
  auto with_dtype = [&](auto d_tag) {
    bf16 ? with_det(d_tag, std::true_type{}) : with_det(d_tag, std::false_type{});
  };
  a.dim == 64 ? with_dtype(std::integral_constant<int, 64>{}) : with_dtype(std::integral_constant<int, 128>{});
  return true;
#else
  return false;
#endif
}

}  // namespace nx::cuda
