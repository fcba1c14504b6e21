// Hopper (sm_90a) building blocks of the wgmma flash-attention kernels (flash_wgmma.cu,
// flash_wgmma_bwd.cu): wgmma issue/commit/wait, 128-byte-swizzled shared tiles and their matrix
// descriptors, mbarriers, named barriers and bulk reduce-adds. Everything is compiled only for
// sm_90a (__CUDA_ARCH_FEAT_SM90_ALL).
//
// Swizzled layout: a [rows, D] 16-bit tile is stored as D / 64 column blocks of rows x 128 bytes;
// the 16-byte unit u of row r sits at unit u ^ (r % 8), 1024-byte atoms. wgmma reads it through a
// descriptor (start, lbo = column-block stride for N-/M-major operands, sbo = 8-row stride).
#pragma once
#include "cuda/flash_common.cuh"
#include "cuda/wgmma.cuh"

namespace nx::cuda::flash {

using namespace wgmma;

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
// cp.async writes are generic-proxy; wgmma reads through the async proxy.
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// This thread's warpgroup as a value the compiler knows is the same across the warp (a shuffle
// from lane 0): addresses and wgmma descriptors derived from it can then be formed in uniform
// registers, instead of per thread and moved (R2UR) before every wgmma.
__device__ __forceinline__ int warpgroup_index() { return __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0); }

// Descriptor of a 128-byte-swizzled operand at byte address addr: lbo = distance between 64-element
// column blocks (N-major operands only), sbo = distance between groups of 8 rows.
__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((addr & 0x3FFFF) >> 4) | uint64_t(lbo >> 4) << 16 | uint64_t(sbo >> 4) << 32 | uint64_t(1) << 62;
}

// The descriptor of the operand `bytes` (a multiple of 16) past the one `base` describes. The start
// address is the descriptor's low 14 bits in 16-byte units, and every shared-memory address is under
// 256 KB, so the sum never carries out of them: one 32-bit add where sw128_desc would mask, shift
// and combine the whole address again (and move it to uniform registers) before each wgmma.
__device__ __forceinline__ uint64_t desc_plus(uint64_t base, uint32_t bytes) {
  return (base & ~uint64_t(0xFFFFFFFFu)) | uint32_t(uint32_t(base) + (bytes >> 4));
}

// Rows [r0, r0 + ROWS) of a row-major [n, D] matrix into the swizzled layout: D / 64 column blocks
// of ROWS x 128 bytes; the 16-byte unit u of row r lands at unit u ^ (r % 8). Rows past n are zeros.
// Issued by THREADS threads, this one being number tid: each pass covers THREADS / (D / 8) rows, a
// multiple of 8, so a thread keeps its unit and swizzle phase and only steps its two pointers.
template <int D, int ROWS, int THREADS>
__device__ __forceinline__ void load_sw128(uint8_t* dst, const uint16_t* src, int64_t r0, int64_t n, int tid) {
  constexpr int kUnits = D / 8, kRowsPerPass = THREADS / kUnits;  // 16-byte units per row
  static_assert(THREADS % kUnits == 0 && kRowsPerPass % 8 == 0 && ROWS % kRowsPerPass == 0, "uneven tile split");
  const int u = tid % kUnits, r = tid / kUnits;
  uint8_t* d = dst + (u / 8) * (ROWS * 128) + r * 128 + (((u % 8) ^ (r % 8)) << 4);
  const uint16_t* from = src + (r0 + r) * D + u * 8;
  const int64_t rows_left = n - r0 - r;
#pragma unroll
  for (int i = 0; i < ROWS / kRowsPerPass; ++i) {
    const bool ok = i * kRowsPerPass < rows_left;
    cp_async16(d + i * kRowsPerPass * 128, ok ? from + i * kRowsPerPass * D : src, ok);
  }
}

// D (+)= A B with both operands in shared memory: K-major, or with TRANS both transposed.
template <int N, bool BF16, bool TRANS = false>
__device__ __forceinline__ void mma_ss(float* d, uint64_t a, uint64_t b, int accumulate) {
  if constexpr (TRANS) {
    static_assert(N == 32 || N == 64, "no such transposed shape generated");
    if constexpr (N == 32) BF16 ? wgmma_ss_t_n32_bf16(d, a, b, accumulate) : wgmma_ss_t_n32_f16(d, a, b, accumulate);
    else BF16 ? wgmma_ss_t_n64_bf16(d, a, b, accumulate) : wgmma_ss_t_n64_f16(d, a, b, accumulate);
  } else if constexpr (N == 64) {
    BF16 ? wgmma_ss_n64_bf16(d, a, b, accumulate) : wgmma_ss_n64_f16(d, a, b, accumulate);
  } else {
    BF16 ? wgmma_ss_n128_bf16(d, a, b, accumulate) : wgmma_ss_n128_f16(d, a, b, accumulate);
  }
}
// D += A B with A from registers (m16n8k16 A fragments per warp), B N-major in shared memory.
template <int N, bool BF16>
__device__ __forceinline__ void mma_rs(float* d, const uint32_t* a, uint64_t b) {
  if constexpr (N == 64) BF16 ? wgmma_rs_n64_bf16(d, a, b, 1) : wgmma_rs_n64_f16(d, a, b, 1);
  else BF16 ? wgmma_rs_n128_bf16(d, a, b, 1) : wgmma_rs_n128_f16(d, a, b, 1);
}

// Accumulator tile s (rows g, g + 8; 16-wide column chunks) as A fragments for the next product.
template <bool BF16, int NT>
__device__ __forceinline__ void to_a_fragments(uint32_t (&a)[NT / 2][4], const float (&s)[1][NT][4]) {
#pragma unroll
  for (int kc = 0; kc < NT / 2; ++kc) {
    a[kc][0] = pack2<BF16>(s[0][2 * kc][0], s[0][2 * kc][1]);
    a[kc][1] = pack2<BF16>(s[0][2 * kc][2], s[0][2 * kc][3]);
    a[kc][2] = pack2<BF16>(s[0][2 * kc + 1][0], s[0][2 * kc + 1][1]);
    a[kc][3] = pack2<BF16>(s[0][2 * kc + 1][2], s[0][2 * kc + 1][3]);
  }
}
// dst[0, bytes) += src[0, bytes) in f32, by the bulk-copy engine (asynchronous; see bulk_wait_read).
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, const float* src, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n"
               ::"l"(dst), "r"(smem_addr(src)), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
// The bulk operations this thread issued have finished reading shared memory.
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

// Turn counters between blocks (the deterministic backward's fixed order of dQ additions): the
// waiter acquires the counter, then orders its next bulk (async-proxy) operation after that; the
// finisher waits for its bulk reduce to complete, orders it before the release, and counts.
// A wait past 10 s means an order that cannot complete (the blocks not all resident, say, with
// another process on the GPU): the block then adds out of turn, so the call stays correct and
// finishes, only not bit-reproducible, instead of hanging the caller's process. (A trap here
// made ptxas serialize the backward's wgmmas.)
__device__ __forceinline__ void wait_turn(const int* counter, int turn) {
  int now = 0;
  uint64_t since = 0, t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(since));
  for (;;) {
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(now) : "l"(counter) : "memory");
    if (now == turn) break;
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
    if (t - since > 10000000000ull) break;
  }
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}
__device__ __forceinline__ void pass_turn(int* counter) {
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
  asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(counter) : "memory");
}

// mbarriers: a phase completes when `count` arrivals have been made; waiters name the phase parity.
__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
  } while (!done);
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(smem_addr(bar)) : "memory");
}
// Arrives on bar once every cp.async this thread issued so far has landed (counts as one of the
// barrier's expected arrivals).
__device__ __forceinline__ void mbar_arrive_on_copies(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
// Adds `bytes` to the bytes bar's current phase waits for (before the copies that deliver them land).
__device__ __forceinline__ void mbar_expect_bytes(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
// dst[0, bytes) = src[0, bytes) by the bulk-copy engine, counted on bar (see mbar_expect_bytes)
// when it lands. Both addresses 16-byte aligned, bytes a multiple of 16.
__device__ __forceinline__ void bulk_copy_to_shared(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               ::"r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(bar)) : "memory");
}
// One arrival on bar that also adds `bytes` to what its phase waits for (the TMA loader's).
__device__ __forceinline__ void mbar_arrive_expect_bytes(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
// The box at (x, y, z) of the 3-D tensor map *map into dst (TMA; 128-byte swizzle when the map
// says so, zeros outside the tensor), counted on bar in bytes when it lands.
__device__ __forceinline__ void tma_load_3d(void* dst, const void* map, int x, int y, int z, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n"
      ::"r"(smem_addr(dst)), "l"(map), "r"(x), "r"(y), "r"(z), "r"(smem_addr(bar)) : "memory");
}
// The box at (x, y, z) of the 3-D tensor map *map from src (TMA store in this thread's bulk group,
// src laid out as the map's swizzle says; rows outside the tensor are not written).
__device__ __forceinline__ void tma_store_3d(const void* map, const void* src, int x, int y, int z) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n"
               ::"l"(map), "r"(smem_addr(src)), "r"(x), "r"(y), "r"(z) : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Four 8 x 8 16-bit matrices to shared memory: lane l names the address of row l % 8 of matrix
// l / 8, and register j holds this lane's two values of matrix j (row lane / 4, columns
// 2 (lane % 4) and the next: an MMA accumulator's layout).
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t m0, uint32_t m1, uint32_t m2, uint32_t m3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n"
               ::"r"(addr), "r"(m0), "r"(m1), "r"(m2), "r"(m3) : "memory");
}
// One warp's 16 rows of an MMA accumulator (acc[n8 block][4], rows 0-7 scaled by f0, rows 8-15 by
// f1) as 16-bit values into D / 64 boxes of 16 rows x 128 bytes at base (1024-byte aligned, 2 KB a
// box), 128-byte swizzled as a tensor map's 16-row boxes read them: a stmatrix takes two n8 blocks
// of both row halves (lane l addresses row l % 8 of matrix l / 8: n8 block 2k + l / 16, rows
// 8 (l / 8 % 2)..).
template <bool BF16, int DT>
__device__ __forceinline__ void stage_rows16(uint32_t base, const float (&acc)[DT][4], float f0, float f1, int lane) {
  const int mrow = (lane / 8 % 2) * 8 + lane % 8;
#pragma unroll
  for (int k2 = 0; k2 < DT / 2; ++k2) {
    const int dn = 2 * k2 + lane / 16;
    stmatrix_x4(base + (dn / 8) * 2048 + mrow * 128 + (((dn % 8) ^ (mrow % 8)) << 4),
                pack2<BF16>(acc[2 * k2][0] * f0, acc[2 * k2][1] * f0), pack2<BF16>(acc[2 * k2][2] * f1, acc[2 * k2][3] * f1),
                pack2<BF16>(acc[2 * k2 + 1][0] * f0, acc[2 * k2 + 1][1] * f0),
                pack2<BF16>(acc[2 * k2 + 1][2] * f1, acc[2 * k2 + 1][3] * f1));
  }
}
// Named barriers 1..15 between `threads` threads (0 is __syncthreads).
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace nx::cuda::flash
