// The FP8 forward on CUDA (ops.yaml attention_forward_fp8; docs/attention_8bit.md): a reference
// kernel, one block per query row, that computes exactly the op's definition (scores; per key tile
// of kFp8KeyTile, the running max and P rounded to e4m3 at 448 times its value there, the sums so
// far rescaled to it; both sums over the same rounded P). It serves what the tensor-core kernel
// (flash_fp8_wgmma.cu) does not (head_dims other than 128, per-row q or k scales, GPUs other than
// sm_90) and is the oracle's twin; it is not fast (scalar dot products, every key read by one thread).
#include <cmath>

#include "core/f8_codec.hpp"
#include "cuda/kernels.cuh"

namespace nx::cuda {
namespace {

constexpr int kRowThreads = 128;  // threads per query row; also the keys weighed per round
static_assert(kRowThreads == kFp8KeyTile, "a round of the row's loop is one key tile of the definition");
constexpr int kMaxHeads = 128;    // ALiBi slopes passed by value

struct Fp8Args {
  int64_t heads, kv_heads, tq, tk, dim;
  float scale;
  bool causal, alibi;
  float slopes[kMaxHeads];
  // Scale granularity per operand: 0 one for the tensor, 1 per (b, head), 2 per (b, head, row).
  int q_kind, k_kind, v_kind;
};

__device__ __forceinline__ float scale_at(const float* s, int kind, int64_t b, int64_t h, int64_t heads, int64_t row,
                                          int64_t rows) {
  return kind == 0 ? s[0] : (kind == 1 ? s[b * heads + h] : s[(b * heads + h) * rows + row]);
}
__device__ __forceinline__ float e4m3(uint8_t c) { return f8::decode(c, true); }

// The block's sum (op = 0) or max (op = 1) of x, on every thread.
__device__ float block_reduce(float x, int op, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) {
    const float y = __shfl_xor_sync(0xffffffffu, x, o);
    x = op ? fmaxf(x, y) : x + y;
  }
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = x;
  __syncthreads();
  x = scratch[0];
  for (int w = 1; w < kRowThreads / 32; ++w) x = op ? fmaxf(x, scratch[w]) : x + scratch[w];
  __syncthreads();
  return x;
}

template <class O>
__global__ void __launch_bounds__(kRowThreads) fp8_forward_kernel(Fp8Args a, const uint8_t* q, const float* q_scale,
                                                                   const uint8_t* k, const float* k_scale,
                                                                   const uint8_t* v, const float* v_scale, O* out) {
  __shared__ float qrow[256], weight[kRowThreads], scratch[kRowThreads / 32];
  const int64_t r = blockIdx.x, D = a.dim;
  const int64_t b = r / (a.heads * a.tq), h = r / a.tq % a.heads, i = r % a.tq, hk = h / (a.heads / a.kv_heads);
  const int64_t kv = (b * a.kv_heads + hk) * a.tk, qpos = a.tk - a.tq + i;
  for (int64_t d = threadIdx.x; d < D; d += kRowThreads) qrow[d] = e4m3(q[r * D + d]);
  __syncthreads();
  const float qs = scale_at(q_scale, a.q_kind, b, h, a.heads, i, a.tq) * a.scale;
  const int64_t visible = a.causal ? (qpos + 1 < 0 ? 0 : (qpos + 1 > a.tk ? a.tk : qpos + 1)) : a.tk;
  auto score = [&](int64_t j) {
    float dot = 0.f;
    for (int64_t d = 0; d < D; ++d) dot += qrow[d] * e4m3(k[(kv + j) * D + d]);
    float s = dot * qs * scale_at(k_scale, a.k_kind, b, hk, a.kv_heads, j, a.tk);
    if (a.alibi) s -= a.slopes[h] * float(qpos - j);
    return s;
  };
  float m = -INFINITY, acc[2] = {0.f, 0.f}, l = 0.f;  // columns threadIdx.x and threadIdx.x + 128 (D <= 256)
  for (int64_t j0 = 0; j0 < visible; j0 += kRowThreads) {
    const int64_t j = j0 + threadIdx.x;
    const float s = j < visible ? score(j) : -INFINITY;
    const float m_new = fmaxf(m, block_reduce(s, 1, scratch));
    if (m_new > m) {  // the running max moved: the sums so far to its scale (exp(-inf) = 0 at first)
      const float c = float(exp(double(m) - double(m_new)));
      l *= c, acc[0] *= c, acc[1] *= c;
      m = m_new;
    }
    float w = 0.f;
    if (j < visible) w = e4m3(f8::encode(448.0 * exp(double(s - m)), true)) / 448.f;
    weight[threadIdx.x] = w;
    l += w;
    __syncthreads();
    const int64_t n = visible - j0 < kRowThreads ? visible - j0 : kRowThreads;
    for (int c = 0; c < 2; ++c) {
      const int64_t d = threadIdx.x + c * kRowThreads;
      if (d >= D) break;
      for (int64_t jj = 0; jj < n; ++jj) acc[c] += weight[jj] * e4m3(v[(kv + j0 + jj) * D + d]);
    }
    __syncthreads();
  }
  l = block_reduce(l, 0, scratch);
  const float vs = scale_at(v_scale, a.v_kind, b, hk, a.kv_heads, 0, 1);
  for (int c = 0; c < 2; ++c) {
    const int64_t d = threadIdx.x + c * kRowThreads;
    if (d < D) store_f64(out + r * D + d, l > 0.f ? double(acc[c] * vs / l) : 0.0);
  }
}

int granularity(const View& s) { return s.shape.size() == 1 ? 0 : (s.shape.size() == 2 ? 1 : 2); }

}  // namespace

bool attention_forward_fp8_wgmma(const ExecContext& ctx, const AttentionParams& p, const View& q, const View& q_scale,
                                 const View& k, const View& k_scale, const View& v, const View& v_scale,
                                 const View& out);

void launch_attention_forward_fp8(const ExecContext& ctx, const AttentionParams& p, const View& q,
                                  const View& q_scale, const View& k, const View& k_scale, const View& v,
                                  const View& v_scale, const View& out) {
  if (p.alibi_slopes.size() > size_t(kMaxHeads))
    fail(NX_ERR_NOT_IMPLEMENTED, current_api(), ": ALiBi on CUDA supports up to ", kMaxHeads, " heads, got ", p.heads);
  if (attention_forward_fp8_wgmma(ctx, p, q, q_scale, k, k_scale, v, v_scale, out)) return;  // flash_fp8_wgmma.cu
  Fp8Args a{};
  a.heads = p.heads, a.kv_heads = p.kv_heads, a.tq = p.tq, a.tk = p.tk, a.dim = p.dim;
  a.scale = float(p.scale);
  a.causal = p.causal, a.alibi = !p.alibi_slopes.empty();
  for (size_t h = 0; h < p.alibi_slopes.size(); ++h) a.slopes[h] = float(p.alibi_slopes[h]);
  a.q_kind = granularity(q_scale), a.k_kind = granularity(k_scale), a.v_kind = granularity(v_scale);
  const int64_t rows = p.batch * p.heads * p.tq;
  auto go = [&](auto tag) {
    using O = decltype(tag);
    fp8_forward_kernel<O><<<unsigned(rows), kRowThreads, 0, stream_of(ctx)>>>(
        a, static_cast<const uint8_t*>(q.data), static_cast<const float*>(q_scale.data),
        static_cast<const uint8_t*>(k.data), static_cast<const float*>(k_scale.data),
        static_cast<const uint8_t*>(v.data), static_cast<const float*>(v_scale.data), static_cast<O*>(out.data));
  };
  switch (out.dtype) {
    case DType::F16: go(Half{}); break;
    case DType::BF16: go(BFloat16{}); break;
    default: go(float{}); break;
  }
  NX_CUDA_LAUNCH_CHECK();
}

}  // namespace nx::cuda
