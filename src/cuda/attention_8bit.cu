// The 8-bit KV cache on CUDA (docs/attention_8bit.md): the row quantizer (nx_quantize_8bit and the
// cache append) and flash-decoding against a cache of I8 / F8E4M3 / F8E5M2 rows with one f32
// scale per row.
//
// Decode reads half the bytes of a bf16 cache, so the kernel must dequantize at twice the key
// rate of the bf16 one with the same memory pipeline: a lane loads 16 codes (16 bytes) of a row,
// a row is D/16 lanes, and every lane keeps U rows of K and V in flight before using any.
// Dequantization is integer and f32 arithmetic only (no conversion instructions, which issue at a
// quarter of the FMA rate): an I8 code becomes 2^23 + (code + 128) by placing its byte under the
// exponent bits of 2^23 (one byte permute), then one exact subtraction; an FP8 code's fields are
// shifted into an f32's (the NaN and infinity codes, which the quantizer of finite data never
// writes, read as large finite values here).
#include <cmath>
#include <cstdlib>

#include "core/f8_codec.hpp"
#include "cuda/decode_merge.cuh"
#include "cuda/kernels.cuh"

namespace nx::cuda {
namespace {

constexpr int kQuantThreads = 128;

template <class T> __device__ __forceinline__ float as_float(T x) {
  if constexpr (std::is_same_v<T, Half>) return __half2float(__ushort_as_half(x.bits));
  else if constexpr (std::is_same_v<T, BFloat16>) return __bfloat162float(__ushort_as_bfloat16(x.bits));
  else return float(x);
}
template <class T> __device__ __forceinline__ T from_float(float x) {
  if constexpr (std::is_same_v<T, Half>) return Half{__half_as_ushort(__float2half_rn(x))};
  else if constexpr (std::is_same_v<T, BFloat16>) return BFloat16{__bfloat16_as_ushort(__float2bfloat16_rn(x))};
  else return x;
}

// ---------------------------------------------------------------- quantizer
// One block per source row: its absmax, the scale, then the codes (q8:: in core/f8_codec.hpp, the
// CPU kernel's arithmetic). With pos, row (b, h, t) of src [B, H, T, cols] lands in row
// (b, h, pos[b] + t) of dst [B, H, Tmax, cols]; without, row r in row r.
template <class T>
__global__ void __launch_bounds__(kQuantThreads) quantize_rows_kernel(uint8_t* dst, float* scale, const T* src,
                                                                      int64_t cols, int kind, const int32_t* pos,
                                                                      int64_t heads, int64_t t_src, int64_t t_dst) {
  const int64_t r = blockIdx.x;
  int64_t to = r;
  if (pos) {
    const int64_t bh = r / t_src, row = int64_t(pos[bh / heads]) + r % t_src;
    if (row < 0 || row >= t_dst) return;  // uniform over the block
    to = bh * t_dst + row;
  }
  const T* x = src + r * cols;
  float m = 0.f;
  for (int64_t c = threadIdx.x; c < cols; c += kQuantThreads) m = fmaxf(m, fabsf(as_float(x[c])));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  __shared__ float warp_max[kQuantThreads / 32];
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = m;
  __syncthreads();
#pragma unroll
  for (int w = 0; w < kQuantThreads / 32; ++w) m = fmaxf(m, warp_max[w]);
  const float s = q8::row_scale(m, kind);
  for (int64_t c = threadIdx.x; c < cols; c += kQuantThreads) dst[to * cols + c] = q8::encode(as_float(x[c]) / s, kind);
  if (threadIdx.x == 0) scale[to] = s;
}

// ---------------------------------------------------------------- decode
struct DecodeArgs {
  int64_t heads, kv_heads, tq, tmax;
  int64_t q_first, nq;  // the queries of this launch: [q_first, q_first + nq), nq <= the kernel's NQ
  float scale_log2;  // softmax scale * log2(e): scores in log2 units, exp2 in the loop
  bool causal, alibi;
  float slopes_log2[128];
};

// The 16 codes of one lane's 16 bytes as f32 values (without the row's scale). kind: 0 I8,
// 1 E4M3, 2 E5M2.
template <int kKind>
__device__ __forceinline__ void dequantize16(const uint4& raw, float (&f)[16]) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int t = 0; t < 4; ++t) {
    if constexpr (kKind == 0) {
      const uint32_t u = w[t] ^ 0x80808080u;  // code + 128 in each byte
#pragma unroll
      for (int e = 0; e < 4; ++e) f[t * 4 + e] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7540u | e)) - 8388736.f;
    } else {
      // sign to bit 31, exponent and mantissa below the f32 exponent's top, then rebias by a
      // power of two (exact, subnormal codes included: f32 has no flush to zero here)
      constexpr int kShift = kKind == 1 ? 4 : 3;
      constexpr float kRebias = kKind == 1 ? 0x1p120f : 0x1p112f;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const uint32_t b = __byte_perm(w[t], 0u, 0x0444u | (e << 12));  // byte e at bits 24..31, zeros below
        f[t * 4 + e] = __uint_as_float((b & 0x80000000u) | ((b & 0x7f000000u) >> kShift)) * kRebias;
      }
    }
  }
}

// A bf16 or f16 query against an I8 cache: the lane's 16 q values as q ~= s * (256 * hi + lo), hi
// and lo int8 (packed four to a word), so the key dot product is two dp4a per four codes instead of
// a conversion and an FMA per code (the 8-bit decode is issue-bound, docs/benchmarks.md, session
// 24). 16 bits against the lane's largest |q|: below the rounding of the bf16/f16 q itself. A
// non-finite q makes s NaN, so the scores stay NaN as the float path's would.
__device__ __forceinline__ void split_q16(const float (&qf)[16], uint32_t (&hi)[4], uint32_t (&lo)[4], float& s) {
  constexpr float kLimit = 32512.f;  // 127 * 256: hi = floor((Q + 128) / 256) stays within [-127, 127]
  float amax = 0.f, poison = 0.f;
#pragma unroll
  for (int x = 0; x < 16; ++x) {
    amax = fmaxf(amax, fabsf(qf[x]));
    poison += qf[x] * 0.f;  // NaN when any q is inf or NaN (fmaxf would drop a NaN)
  }
  const float inv = amax > 0.f ? kLimit / amax : 0.f;
  s = (amax > 0.f ? amax / kLimit : 0.f) + poison;
#pragma unroll
  for (int t = 0; t < 4; ++t) {
    hi[t] = lo[t] = 0u;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int Q = min(max(__float2int_rn(qf[t * 4 + e] * inv), -32512), 32512);
      const int h = (Q + 128) >> 8, l = Q - h * 256;  // l in [-128, 127]
      hi[t] |= uint32_t(h & 0xff) << (8 * e);
      lo[t] |= uint32_t(l & 0xff) << (8 * e);
    }
  }
}

// Block = (b, h, split) of WARPS warps; a key row is LPR = D/16 lanes; partial (m, l, acc) per
// query of the block's split go to decode_8bit_combine, or with ONE_SPLIT (the pair's only split)
// the block writes the output rows itself (OneSplitRows8). Scores are in log2 units. A launch takes
// the queries [q_first, q_first + nq) (nq <= NQ; more queries take more launches).
// MINB: blocks per SM the registers must allow (the occupancy the kernel is compiled for).
template <class T>
struct OneSplitRows8 {
  T* out;
  int dim;
  __device__ void value(int64_t r, int d, float sum, float L) const { out[r * dim + d] = from_float<T>(L > 0.f ? sum / L : 0.f); }
  __device__ void stats(int64_t, float, float) const {}
};
template <class T, int kKind, int D, int NQ, int U, int MINB, bool ONE_SPLIT, int WARPS = 4>
__global__ void __launch_bounds__(32 * WARPS, MINB) decode_8bit_kernel(DecodeArgs a, const T* __restrict__ q,
                                                          const uint8_t* __restrict__ k, const float* __restrict__ ks,
                                                          const uint8_t* __restrict__ v, const float* __restrict__ vs,
                                                          const int32_t* __restrict__ lengths,
                                                          float* __restrict__ part_acc, float* __restrict__ part_ml,
                                                          int splits, T* __restrict__ out) {
  constexpr int LPR = D / 16, RPW = 32 / LPR, ROWS = WARPS * RPW;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, sub = lane / LPR, li = lane % LPR;
  const int split = blockIdx.x % splits;
  const int64_t bh = blockIdx.x / splits;
  const int h = int(bh % a.heads), b = int(bh / a.heads), hk = h / int(a.heads / a.kv_heads);
  const int64_t n = min(int64_t(max(lengths[b], 0)), a.tmax);
  const int64_t per_split = (n + splits - 1) / splits, j_begin = split * per_split,
                j_end = min(n, j_begin + per_split), offset = n - a.tq;
  const int64_t cache_row0 = (int64_t(b) * a.kv_heads + hk) * a.tmax;
  const uint8_t* kh = k + cache_row0 * D + li * 16;
  const uint8_t* vh = v + cache_row0 * D + li * 16;
  const float* ksh = ks + cache_row0;
  const float* vsh = vs + cache_row0;
  const float slope = a.alibi ? a.slopes_log2[h] : 0.f;
  const unsigned group_mask = (LPR == 32 ? 0xffffffffu : ((1u << LPR) - 1u) << (sub * LPR));
  // an f32 q keeps float dot products: its tests hold the error to 2e-5, the split q's is ~1.5e-5
  constexpr bool kIntDot = kKind == 0 && !std::is_same_v<T, float>;
  float qf[NQ][16], acc[NQ][16], m[NQ], l[NQ], qs[NQ];
  uint32_t qhi[NQ][4], qlo[NQ][4];
#pragma unroll
  for (int i = 0; i < NQ; ++i) {
    const int64_t qi = a.q_first + min(int64_t(i), a.nq - 1);
    const T* qrow = q + ((int64_t(b) * a.heads + h) * a.tq + qi) * D + li * 16;
#pragma unroll
    for (int x = 0; x < 16; ++x) {
      qf[i][x] = as_float(qrow[x]) * a.scale_log2;
      acc[i][x] = 0.f;
    }
    if constexpr (kIntDot) split_q16(qf[i], qhi[i], qlo[i], qs[i]);
    m[i] = -INFINITY;
    l[i] = 0.f;
  }
  struct Rows {  // U cache rows of K and V per lane (16 codes each) and their scales
    uint4 k[U], v[U];
    float ks[U], vs[U];
  };
  auto load = [&](Rows& r, int64_t j0) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t j = j0 + int64_t(u) * ROWS;
      const bool ok = j < j_end;
      r.k[u] = ok ? __ldcs(reinterpret_cast<const uint4*>(kh + j * D)) : make_uint4(0, 0, 0, 0);
      r.v[u] = ok ? __ldcs(reinterpret_cast<const uint4*>(vh + j * D)) : make_uint4(0, 0, 0, 0);
      r.ks[u] = ok ? __ldcs(ksh + j) : 0.f;
      r.vs[u] = ok ? __ldcs(vsh + j) : 0.f;
    }
  };
  auto consume = [&](const Rows& r, int64_t j0) {
#pragma unroll
    for (int i = 0; i < NQ; ++i) {
      if (i >= a.nq) break;
      const int64_t qpos = offset + a.q_first + i;
      float s[U], mx = m[i];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        float dot = 0.f;
        if constexpr (kIntDot) {
          const uint32_t w[4] = {r.k[u].x, r.k[u].y, r.k[u].z, r.k[u].w};
          int hi = 0, lo = 0;
#pragma unroll
          for (int t = 0; t < 4; ++t) {
            hi = __dp4a(int(qhi[i][t]), int(w[t]), hi);
            lo = __dp4a(int(qlo[i][t]), int(w[t]), lo);
          }
          dot = float(hi * 256 + lo) * qs[i];  // |hi| <= 16 * 127 * 128: no overflow
        } else {
          float kf[16];
          dequantize16<kKind>(r.k[u], kf);
#pragma unroll
          for (int x = 0; x < 16; ++x) dot = fmaf(qf[i][x], kf[x], dot);
        }
#pragma unroll
        for (int o = LPR / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(group_mask, dot, o);
        const int64_t j = j0 + int64_t(u) * ROWS;
        dot *= r.ks[u];
        if (a.alibi) dot -= slope * float(qpos - j);
        s[u] = (j >= j_end || (a.causal && j > qpos)) ? -INFINITY : dot;
        mx = fmaxf(mx, s[u]);
      }
      if (!rescale_running(m[i], l[i], acc[i], mx)) continue;  // nothing visible yet (uniform in the row's lanes)
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const float w = exp2f(s[u] - mx);
        l[i] += w;
        const float wv = w * r.vs[u];
        float vf[16];
        dequantize16<kKind>(r.v[u], vf);
#pragma unroll
        for (int x = 0; x < 16; ++x) acc[i][x] = fmaf(wv, vf[x], acc[i][x]);
      }
    }
  };
  for (int64_t j0 = j_begin + warp * RPW + sub; j0 < j_end; j0 += int64_t(ROWS) * U) {
    Rows r;
    load(r, j0);
    consume(r, j0);
  }
  // merge the ROWS row groups of the block into one result per query (log2 units)
  const int64_t first_row = bh * a.tq + a.q_first;
  if constexpr (ONE_SPLIT)
    merge_row_groups<NQ, ROWS, D, 16>(m, l, acc, warp * RPW + sub, li, int(a.nq), first_row, OneSplitRows8<T>{out, D});
  else
    merge_row_groups<NQ, ROWS, D, 16>(m, l, acc, warp * RPW + sub, li, int(a.nq), first_row,
                                      SplitSlots{part_acc, part_ml, splits, split, D, 1.f});
}

// One block per query row: the splits' partials merged (log2 units), divided by the sum.
template <class T>
__global__ void decode_8bit_combine(const float* part_acc, const float* part_ml, int splits, int dim, T* out) {
  const int64_t row = blockIdx.x;
  const float* ml = part_ml + row * splits * 2;
  float M = -INFINITY;
  for (int s = 0; s < splits; ++s) M = fmaxf(M, ml[2 * s]);
  float L = 0.f;
  for (int s = 0; s < splits; ++s)
    if (ml[2 * s] != -INFINITY) L += ml[2 * s + 1] * exp2f(ml[2 * s] - M);
  for (int d = threadIdx.x; d < dim; d += blockDim.x) {
    float sum = 0.f;
    for (int s = 0; s < splits; ++s)
      if (ml[2 * s] != -INFINITY) sum += part_acc[(row * splits + s) * dim + d] * exp2f(ml[2 * s] - M);
    out[row * dim + d] = from_float<T>(L > 0.f ? sum / L : 0.f);
  }
}

// Key splits per (batch, head): about 32 blocks per SM, each split at least 2048 keys (a block must
// stream long enough to amortize its start and its merge: on the H200, batch 8 x 32 heads, 8k
// cache, 4 splits ran 2-4% faster than 6 or 8 and 10% faster than 16; docs/benchmarks.md, session
// 14); NEXUS_DECODE_SPLITS=n forces n for benchmarks. An I8 cache takes one split per pair when
// the pairs fill the GPU (decode_pairs_fill_gpu): there 2.8% faster than 4 splits and the merge;
// the FP8 codes' dequantization is costlier and one split ran 4% slower (session 23).
int decode_8bit_splits(int64_t bh, int64_t tmax, int kind) {
  static const int min_keys = [] {
    const char* s = std::getenv("NEXUS_DECODE8_MIN_KEYS");
    return s && std::atoi(s) > 0 ? std::atoi(s) : 2048;
  }();
  const int64_t most = std::max<int64_t>(1, (tmax + min_keys - 1) / min_keys);
  if (const char* forced = std::getenv("NEXUS_DECODE_SPLITS"); forced && std::atoi(forced) > 0)
    return int(std::min<int64_t>(std::atoi(forced), std::max<int64_t>(1, tmax)));
  if (kind == 0 && decode_pairs_fill_gpu(bh, sm_count())) return 1;
  const int64_t want = (32 * int64_t(sm_count()) + bh - 1) / bh;
  return int(std::max<int64_t>(1, std::min(want, most)));
}

int kind_of(DType d) { return d == DType::I8 ? 0 : (d == DType::F8E4M3 ? 1 : 2); }

}  // namespace

void launch_quantize_rows_8bit(const ExecContext& ctx, const View& dst, const View& scale, const View& src,
                               const View& pos) {
  const int64_t cols = src.shape.back(), rows = cols ? src.numel() / cols : 0;
  if (!rows) return;
  const bool append = pos.data != nullptr;
  const int64_t heads = append ? src.shape[1] : 1, t_src = append ? src.shape[2] : rows,
                t_dst = append ? dst.shape[2] : rows;
  auto go = [&](auto tag) {
    using T = decltype(tag);
    quantize_rows_kernel<T><<<unsigned(rows), kQuantThreads, 0, stream_of(ctx)>>>(
        static_cast<uint8_t*>(dst.data), static_cast<float*>(scale.data), static_cast<const T*>(src.data), cols,
        kind_of(dst.dtype), static_cast<const int32_t*>(pos.data), heads, t_src, t_dst);
  };
  switch (src.dtype) {
    case DType::F64: go(double{}); break;
    case DType::F16: go(Half{}); break;
    case DType::BF16: go(BFloat16{}); break;
    default: go(float{}); break;
  }
  NX_CUDA_LAUNCH_CHECK();
}

void launch_attention_decode_8bit(const ExecContext& ctx, const AttentionParams& p, const View& q, const View& k,
                                  const View& k_scale, const View& v, const View& v_scale, const View& lengths,
                                  const View& out) {
  if (p.alibi_slopes.size() > 128)
    fail(NX_ERR_NOT_IMPLEMENTED, current_api(), ": ALiBi on CUDA supports up to 128 heads, got ", p.heads);
  DecodeArgs a{};
  a.heads = p.heads, a.kv_heads = p.kv_heads, a.tq = p.tq, a.tmax = p.tk;
  a.scale_log2 = float(p.scale * kLog2eF64);
  a.causal = p.causal, a.alibi = !p.alibi_slopes.empty();
  for (size_t h = 0; h < p.alibi_slopes.size(); ++h) a.slopes_log2[h] = float(p.alibi_slopes[h] * kLog2eF64);
  const int splits = decode_8bit_splits(p.batch * p.heads, p.tk, kind_of(k.dtype));
  const int64_t rows = p.batch * p.heads * p.tq;
  for (const View* x : {&q, &k, &v})
    if (reinterpret_cast<uintptr_t>(x->data) & 15)
      fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": CUDA needs 16-byte aligned q and caches (a view at an odd offset?)");
  const bool direct = splits == 1;  // the kernel writes the output: no scratch, no merge kernel
  Scratch part_acc(ctx, direct ? 0 : size_t(rows * splits * p.dim) * sizeof(float));
  Scratch part_ml(ctx, direct ? 0 : size_t(rows * splits * 2) * sizeof(float));
  auto launch = [&](auto t_tag, auto kind_tag, auto d_tag, auto nq_tag) {
    using T = decltype(t_tag);
    constexpr int kKind = decltype(kind_tag)::value, D = decltype(d_tag)::value, NQ = decltype(nq_tag)::value;
    auto run = [&](auto kernel, int warps = 4) {
      kernel<<<unsigned(p.batch * p.heads * splits), 32 * warps, 0, stream_of(ctx)>>>(
          a, static_cast<const T*>(q.data), static_cast<const uint8_t*>(k.data),
          static_cast<const float*>(k_scale.data), static_cast<const uint8_t*>(v.data),
          static_cast<const float*>(v_scale.data), static_cast<const int32_t*>(lengths.data),
          static_cast<float*>(part_acc.ptr), static_cast<float*>(part_ml.ptr), splits, static_cast<T*>(out.data));
      NX_CUDA_LAUNCH_CHECK();
    };
    for (a.q_first = 0; a.q_first < p.tq; a.q_first += NQ) {
      a.nq = std::min<int64_t>(NQ, p.tq - a.q_first);
      // Split: 4 rows in flight per lane, 4 blocks per SM for one query (the registers allow 3 with 8
      // rows, which measured 2-3% slower), 1 for several queries (their q and accumulators fill the
      // rest). One split of one query: 8 warps of 4 rows at 2 blocks per SM, the split kernel's warps
      // and bytes in flight per SM (4 warps there ran 28% slower; docs/benchmarks.md, session 23).
      if constexpr (NQ == 1) {
        constexpr int kOneSplitWarps = 8;
        if (direct) run(decode_8bit_kernel<T, kKind, D, NQ, 4, 2, true, kOneSplitWarps>, kOneSplitWarps);
        else run(decode_8bit_kernel<T, kKind, D, NQ, 4, 4, false>);
      } else if (direct) {
        run(decode_8bit_kernel<T, kKind, D, NQ, 4, 1, true>);
      } else {
        run(decode_8bit_kernel<T, kKind, D, NQ, 4, 1, false>);
      }
    }
    if (direct) return;
    decode_8bit_combine<T><<<unsigned(rows), 128, 0, stream_of(ctx)>>>(static_cast<const float*>(part_acc.ptr),
                                                                        static_cast<const float*>(part_ml.ptr), splits,
                                                                        int(p.dim), static_cast<T*>(out.data));
    NX_CUDA_LAUNCH_CHECK();
  };
  using I = std::integral_constant<int, 0>;
  auto by_nq = [&](auto t, auto kind, auto d) {
    // up to 4 queries per block (a decode step or a short speculative run); more run in blocks of 4
    if (p.tq == 1) launch(t, kind, d, std::integral_constant<int, 1>{});
    else if (p.tq == 2) launch(t, kind, d, std::integral_constant<int, 2>{});
    else launch(t, kind, d, std::integral_constant<int, 4>{});
  };
  auto by_dim = [&](auto t, auto kind) {
    if (p.dim == 64) by_nq(t, kind, std::integral_constant<int, 64>{});
    else if (p.dim == 128) by_nq(t, kind, std::integral_constant<int, 128>{});
    else by_nq(t, kind, std::integral_constant<int, 256>{});
  };
  auto by_kind = [&](auto t) {
    if (k.dtype == DType::I8) by_dim(t, I{});
    else if (k.dtype == DType::F8E4M3) by_dim(t, std::integral_constant<int, 1>{});
    else by_dim(t, std::integral_constant<int, 2>{});
  };
  if (q.dtype == DType::F16) by_kind(Half{});
  else if (q.dtype == DType::BF16) by_kind(BFloat16{});
  else by_kind(float{});
}

}  // namespace nx::cuda
