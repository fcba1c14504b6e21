// The online-softmax step and the end of a flash-decoding block, shared by the bf16/f16 kernel
// (attention.cu) and the 8-bit one (attention_8bit.cu): the block's row groups each hold a running
// (max m, sum l, acc) per query in log2 units, over PER_LANE of the D dimensions per lane; they are
// merged through shared memory into one (M, L, acc) per query, which a sink takes: SplitSlots when
// the block is one split of several (a merge kernel combines the splits), or the caller's own
// sink that writes the output row when the block is the only split.
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

// A split's partial of query row r (a global (b, h, i) index) to part_acc [slot][dim] and part_ml
// [slot][2], slot = r * splits + split, for the merge kernel. The max is written divided by
// ml_divisor (1 keeps log2 units, log2(e) gives natural ones).
struct SplitSlots {
  float* part_acc;
  float* part_ml;
  int splits, split, dim;
  float ml_divisor;
  __device__ int64_t slot(int64_t r) const { return r * splits + split; }
  __device__ void value(int64_t r, int d, float sum, float /*L*/) const { part_acc[slot(r) * dim + d] = sum; }
  __device__ void stats(int64_t r, float M, float L) const {
    part_ml[slot(r) * 2] = M / ml_divisor;
    part_ml[slot(r) * 2 + 1] = L;
  }
};

// Merges the block's ROWS row groups of queries first_row + [0, nq) and hands each query's result
// to sink: value(r, d, acc_d, L) for every dimension, and stats(r, M, L) once (thread 0); M is
// the max in log2 units, L the sum of exp2(score - M), acc_d unnormalized.
template <int NQ, int ROWS, int D, int PER_LANE, class Sink>
__device__ __forceinline__ void merge_row_groups(const float (&m)[NQ], const float (&l)[NQ],
                                                 const float (&acc)[NQ][PER_LANE], int grp, int li, int nq,
                                                 int64_t first_row, const Sink& sink) {
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
    float L = 0.f;
    for (int r = 0; r < ROWS; ++r) L += sl[i][r] * exp2f(sm[i][r] - base);
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
      float sum = 0.f;
      for (int r = 0; r < ROWS; ++r) sum += sacc[i][r][d] * exp2f(sm[i][r] - base);
      sink.value(first_row + i, d, sum, L);
    }
    if (threadIdx.x == 0) sink.stats(first_row + i, M, L);
  }
}

// Whether batch x heads pairs alone nearly give every SM two blocks, so a decode runs one block
// per pair and no merge kernel (which cost 5-6.5 us of ~244 at batch 8 x 32 heads, 8k bf16 cache,
// where cuDNN's decode is one kernel of one block per pair: docs/benchmarks.md, session 22).
inline bool decode_pairs_fill_gpu(int64_t pairs, int sms) { return 10 * pairs >= 19 * int64_t(sms); }

}  // namespace nx::cuda
