// The online-softmax step and the end of a flash-decoding split kernel, shared by the bf16/f16 one (attention.cu) and the 8-bit
// one (attention_8bit.cu): the block's row groups each hold a running (max m, sum l, acc) per
// query in log2 units, over PER_LANE of the D dimensions per lane; they are merged through shared
// memory into one partial per query, written to part_acc [slot][D] and part_ml [slot][2] with
// slot = (first_slot + i) * splits + split. The max is written divided by ml_divisor (1 keeps log2
// units, log2(e) gives natural ones).
#pragma once
#include <cstdint>

namespace nx::cuda {

// One step of the online softmax of a flash-decoding row group: the running (m, l, acc) rescaled
// to the new maximum mx of the keys just scored (log2 units). False when no key is visible yet
// (mx is -inf), in which case nothing changes and the keys are skipped.
template <int PER_LANE>
__device__ __forceinline__ bool rescale_running(float& m, float& l, float (&acc)[PER_LANE], float mx) {
  if (mx == -INFINITY) return false;
  const float corr = exp2f(m - mx);
  m = mx;
  l *= corr;
#pragma unroll
  for (int x = 0; x < PER_LANE; ++x) acc[x] *= corr;
  return true;
}

template <int NQ, int ROWS, int D, int PER_LANE>
__device__ __forceinline__ void merge_split_partials(const float (&m)[NQ], const float (&l)[NQ],
                                                     const float (&acc)[NQ][PER_LANE], int grp, int li, int nq,
                                                     int64_t first_slot, int splits, int split, float ml_divisor,
                                                     float* __restrict__ part_acc, float* __restrict__ part_ml) {
  __shared__ float sm[NQ][ROWS], sl[NQ][ROWS], sacc[NQ][ROWS][D];
#pragma unroll
  for (int i = 0; i < NQ; ++i) {
    if (li == 0) {
      sm[i][grp] = m[i];
      sl[i][grp] = l[i];
    }
#pragma unroll
    for (int x = 0; x < PER_LANE; ++x) sacc[i][grp][li * PER_LANE + x] = acc[i][x];
  }
  __syncthreads();
  for (int i = 0; i < NQ && i < nq; ++i) {
    float M = -INFINITY;
    for (int r = 0; r < ROWS; ++r) M = fmaxf(M, sm[i][r]);
    const float base = M == -INFINITY ? 0.f : M;
    const int64_t slot = (first_slot + i) * splits + split;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
      float sum = 0.f;
      for (int r = 0; r < ROWS; ++r) sum += sacc[i][r][d] * exp2f(sm[i][r] - base);
      part_acc[slot * D + d] = sum;
    }
    if (threadIdx.x == 0) {
      float L = 0.f;
      for (int r = 0; r < ROWS; ++r) L += sl[i][r] * exp2f(sm[i][r] - base);
      part_ml[slot * 2] = M / ml_divisor;
      part_ml[slot * 2 + 1] = L;
    }
  }
}

}  // namespace nx::cuda
