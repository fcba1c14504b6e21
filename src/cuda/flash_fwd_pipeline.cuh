// The compute warpgroups' side of the Hopper forward kernels' pipeline, shared by the bf16 kernel
// (flash_wgmma.cu) and the FP8 one (flash_fp8_wgmma.cu): the loader's ring of K/V stages as a
// compute warp sees it, the warpgroups' turns at the tensor cores, and the phases a launch block
// runs over the query blocks it takes. The kernels differ only in what a phase computes (their
// products, softmax and O update), which they pass in as callbacks; everything here is inlined, so
// each kernel compiles to what it did when it held its own copy of this loop.
#pragma once
#include "cuda/flash_sm90.cuh"

namespace nx::cuda::flash {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// S stages, each with a full barrier (the loader's copies landed) and an empty one (every compute
// warp is done with it) for K and for V; WGS compute warpgroups taking turns at the tensor cores.
template <int S, int WGS>
struct FwdComputeWarp {
  uint64_t *k_full, *v_full, *k_empty, *v_empty;
  int wg, lane;
  // named barriers (see take_turn), computed once: ids derived at each use made ptxas allocate the
  // kernels' registers differently
  int my_turn, next_turn;
  int tile0 = 0;  // the ring position of the current query block's first tile

  __device__ __forceinline__ FwdComputeWarp(uint64_t* k_full_, uint64_t* v_full_, uint64_t* k_empty_,
                                            uint64_t* v_empty_, int wg_, int lane_)
      : k_full(k_full_), v_full(v_full_), k_empty(k_empty_), v_empty(v_empty_), wg(wg_), lane(lane_),
        my_turn(1 + wg_), next_turn(1 + (wg_ + 1) % WGS) {}

  __device__ __forceinline__ int stage(int j) const { return (tile0 + j) % S; }
  __device__ __forceinline__ void wait_full(uint64_t* full, int j) const {
    mbar_wait(full + (tile0 + j) % S, ((tile0 + j) / S) & 1);
  }
  // this warp is done with a stage (or a Q buffer)
  __device__ __forceinline__ void release(uint64_t* empty) const {
    fence_async_smem();
    __syncwarp();
    if (lane == 0) mbar_arrive(empty);
  }
  // Turns: warpgroup w > 0 issues phase j after warpgroup w - 1's phase j, warpgroup 0 issues phase
  // j after the last warpgroup's phase j - 1 (named barrier 1 + wg is this warpgroup's go: it syncs
  // there, the one before it arrives, 256 threads). The phases run on from one query block to the
  // next; warpgroup 0's first go is free, and its go after the last phase is taken at the end.
  __device__ __forceinline__ void take_turn(bool first_phase = false) const {
    if (wg > 0 || !first_phase) named_sync(my_turn, 256);
    wg_fence();
  }
  __device__ __forceinline__ void pass_turn() const { named_arrive(next_turn, 256); }
};

// One pipeline across the query blocks a launch block takes (all of them when PERSIST): S_j of
// tile j is issued with P_{j-1} V_{j-1}, and the softmax of tile j runs under that P V. The last
// phase of a block issues its last P V and the next block's S_0 together, and the block's stores
// run while that S_0 is in flight, so a block boundary costs no phase of its own (short causal rows
// have 1-4 tiles a block). Every block runs the same phases, so the wgmma groups outstanding at
// each wait do not depend on the data (ptxas serializes the wgmmas where they would).
//
// The kernel's part, per call:
//   issue_s(j), issue_pv(j)     issue (and commit) S_j = Q K_j^T, and P_j V_j from the fragments
//   half_last(x)                the block's last tile needs only its first half of the keys
//   softmax(j, half) -> bool    the online softmax of S_j, once it has landed; true when O must be
//                               rescaled once P_{j-1} V_{j-1} has landed
//   after_pv(moved)             P_{j-1} V_{j-1} has landed and softmax(j) has run: update O
//   to_fragments()              P_j as the A operand of the next P V
//   release_q(n)                every S of the n-th block has landed: its Q buffer may be refilled
//   next_block(n) -> Block      (PERSIST) the (n + 1)-th block, once its Q is in (bh < 0: none)
//   use_q(n)                    (PERSIST) the next S_0 reads the n-th block's Q buffer
//   start_block(x)              a block's softmax state (O is zero)
//   finish_block(x)             every P V of the block has landed: store it, zero O
template <bool PERSIST, int S, int WGS, class Block, class IssueS, class IssuePv, class HalfLast, class Softmax,
          class AfterPv, class ToFragments, class ReleaseQ, class NextBlock, class UseQ, class StartBlock,
          class FinishBlock>
__device__ __forceinline__ void run_query_blocks(FwdComputeWarp<S, WGS>& w, Block x, IssueS&& issue_s,
                                                 IssuePv&& issue_pv, HalfLast&& half_last, Softmax&& softmax,
                                                 AfterPv&& after_pv, ToFragments&& to_fragments,
                                                 ReleaseQ&& release_q, NextBlock&& next_block, UseQ&& use_q,
                                                 StartBlock&& start_block, FinishBlock&& finish_block) {
  int n = 0;  // query blocks taken
  w.wait_full(w.k_full, 0);
  fence_async_smem();
  w.take_turn(true);
  issue_s(0);
  w.pass_turn();
  start_block(x);
  wg_wait<0>();
  for (;;) {  // S_0 of block x has landed
    const int ntiles = x.ntiles;
    const bool half_end = half_last(x);
    w.release(w.k_empty + w.tile0 % S);
    if (ntiles == 1) release_q(n);  // the block's last S has landed: Q may be replaced
    softmax(0, ntiles == 1 && half_end);
    to_fragments();
    // phases 1 .. ntiles - 1: S_j and P_{j-1} V_{j-1}; the softmax of tile j runs under P V
    for (int j = 1; j < ntiles; ++j) {
      w.wait_full(w.k_full, j);
      w.wait_full(w.v_full, j - 1);
      fence_async_smem();
      w.take_turn();
      issue_s(j);
      issue_pv(j - 1);
      w.pass_turn();
      wg_wait<1>();
      w.release(w.k_empty + (w.tile0 + j) % S);
      if (j == ntiles - 1) release_q(n);
      const bool moved = softmax(j, j == ntiles - 1 && half_end);
      wg_wait<0>();  // P_{j-1} V_{j-1} has landed: O may be rescaled, P overwritten, the stage freed
      w.release(w.v_empty + (w.tile0 + j - 1) % S);
      after_pv(moved);
      to_fragments();
    }
    // last phase: P V of the last tile, and (persistent) S_0 of the next block once its Q and
    // first tile are in; after the last block an S_0 of what the buffers hold, never read
    w.wait_full(w.v_full, ntiles - 1);
    fence_async_smem();
    w.take_turn();
    issue_pv(ntiles - 1);
    Block next{-1, 0, 0, 0, 0};
    if constexpr (PERSIST) {
      next = next_block(n);
      if (next.bh >= 0) {
        w.wait_full(w.k_full, ntiles);
        fence_async_smem();
      }
      use_q(n + 1);
      wg_fence();
      issue_s(ntiles);
    }
    w.pass_turn();
    // the stores of this block run under the next block's S_0
    if constexpr (PERSIST) wg_wait<1>();
    else wg_wait<0>();
    w.release(w.v_empty + (w.tile0 + ntiles - 1) % S);
    finish_block(x);
    w.tile0 += ntiles;
    ++n;
    if (next.bh < 0) break;
    x = next;
    start_block(x);
    wg_wait<0>();
  }
  if constexpr (PERSIST) wg_wait<0>();  // the unread S_0
  if (w.wg == 0) named_sync(w.my_turn, 256);  // the last warpgroup's arrival after the last phase
}
#endif

}  // namespace nx::cuda::flash
