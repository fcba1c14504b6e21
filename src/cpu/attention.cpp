// CPU flash attention: the kernels live in attention_kernels.inl, compiled once per ISA with the
// other CPU kernels; this file hands them the tensors and the options as plain data.
#include "core/backend.hpp"
#include "cpu/simd.hpp"

namespace nx::cpu {
namespace {

AttnArgs attn_args(const AttentionParams& p) {
  return AttnArgs{p.batch, p.heads, p.kv_heads, p.tq, p.tk, p.dim, p.scale, p.causal,
                  p.alibi_slopes.empty() ? nullptr : p.alibi_slopes.data()};
}

template <class T> const T* in(const View& v) { return static_cast<const T*>(v.data); }
template <class T> T* at(const View& v) { return static_cast<T*>(v.data); }

}  // namespace

void attention_forward_cpu(const AttentionParams& p, const View& q, const View& k, const View& v, const View& out,
                           const View& lse) {
  const AttnArgs a = attn_args(p);
  if (q.dtype == DType::F32)
    simd().attn_forward_f32(a, in<float>(q), in<float>(k), in<float>(v), at<float>(out), at<float>(lse));
  else
    simd().attn_forward_f64(a, in<double>(q), in<double>(k), in<double>(v), at<double>(out), at<double>(lse));
}

void attention_backward_cpu(const AttentionParams& p, const View& q, const View& k, const View& v, const View& out,
                            const View& dout, const View& lse, const View& dq, const View& dk, const View& dv) {
  const AttnArgs a = attn_args(p);
  if (q.dtype == DType::F32)
    simd().attn_backward_f32(a, in<float>(q), in<float>(k), in<float>(v), in<float>(out), in<float>(dout),
                             in<float>(lse), at<float>(dq), at<float>(dk), at<float>(dv));
  else
    simd().attn_backward_f64(a, in<double>(q), in<double>(k), in<double>(v), in<double>(out), in<double>(dout),
                             in<double>(lse), at<double>(dq), at<double>(dk), at<double>(dv));
}

}  // namespace nx::cpu
