// CPU flash attention: the kernels live in attention_kernels.inl, compiled once per ISA with the
// other CPU kernels; this file hands them the tensors (f32, f64, f16 or bf16; the log-sum-exp f32,
// or f64 with f64 tensors) and the options as plain data.
#include "core/backend.hpp"
#include "core/error.hpp"
#include "cpu/simd.hpp"

namespace nx::cpu {
namespace {

// With k and v's strides ([batch, kv head, key]). Only the one-query forward reads a strided view
// (a KV cache's first positions, see AttnArgs); every other call gets contiguous k and v.
AttnArgs attn_args(const AttentionParams& p, const View& k, const View& v, bool strided_kv_ok) {
  AttnArgs a{p.batch, p.heads, p.kv_heads, p.tq, p.tk, p.dim, p.scale, p.causal,
             p.alibi_slopes.empty() ? nullptr : p.alibi_slopes.data(), {}, {}};
  const int64_t sizes[3] = {p.batch, p.kv_heads, p.tk}, dense[3] = {p.kv_heads * p.tk * p.dim, p.tk * p.dim, p.dim};
  bool strided = false;
  for (int i = 0; i < 3; ++i) {
    a.k_strides[i] = a.v_strides[i] = dense[i];
    if (sizes[i] == 1) continue;  // a size-1 dimension's stride is never used
    strided = strided || k.strides[size_t(i)] != dense[i] || v.strides[size_t(i)] != dense[i];
  }
  if (!strided) return a;
  if (!strided_kv_ok || k.strides[3] != 1 || v.strides[3] != 1)
    fail(NX_ERR_INTERNAL, current_api(), ": CPU attention got k or v with strides [", k.strides[0], ", ", k.strides[1],
         ", ", k.strides[2], ", ", k.strides[3], "] for ", p.tq, " queries; only a one-query forward reads them in place");
  for (int i = 0; i < 3; ++i) {
    a.k_strides[i] = k.strides[size_t(i)];
    a.v_strides[i] = v.strides[size_t(i)];
  }
  return a;
}

template <class T> const T* in(const View& v) { return static_cast<const T*>(v.data); }
template <class T> T* at(const View& v) { return static_cast<T*>(v.data); }

}  // namespace

void attention_forward_cpu(const AttentionParams& p, const View& q, const View& k, const View& v, const View& out,
                           const View& lse) {
  const AttnArgs a = attn_args(p, k, v, p.tq == 1);
  const SimdTable& t = simd();
  auto run = [&](auto kernel, auto tag, auto lse_tag) {
    using T = decltype(tag);
    using L = decltype(lse_tag);
    kernel(a, in<T>(q), in<T>(k), in<T>(v), at<T>(out), at<L>(lse));
  };
  switch (q.dtype) {
    case DType::F64: run(t.attn_forward_f64, double{}, double{}); break;
    case DType::F16: run(t.attn_forward_f16, Half{}, float{}); break;
    case DType::BF16: run(t.attn_forward_bf16, BFloat16{}, float{}); break;
    default: run(t.attn_forward_f32, float{}, float{}); break;
  }
}

void attention_backward_cpu(const AttentionParams& p, const View& q, const View& k, const View& v, const View& out,
                            const View& dout, const View& lse, const View& dq, const View& dk, const View& dv) {
  const AttnArgs a = attn_args(p, k, v, false);
  const SimdTable& t = simd();
  auto run = [&](auto kernel, auto tag, auto lse_tag) {
    using T = decltype(tag);
    using L = decltype(lse_tag);
    kernel(a, in<T>(q), in<T>(k), in<T>(v), in<T>(out), in<T>(dout), in<L>(lse), at<T>(dq), at<T>(dk), at<T>(dv));
  };
  switch (q.dtype) {
    case DType::F64: run(t.attn_backward_f64, double{}, double{}); break;
    case DType::F16: run(t.attn_backward_f16, Half{}, float{}); break;
    case DType::BF16: run(t.attn_backward_bf16, BFloat16{}, float{}); break;
    default: run(t.attn_backward_f32, float{}, float{}); break;
  }
}

}  // namespace nx::cpu
