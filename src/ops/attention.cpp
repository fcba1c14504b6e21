// Flash attention as one op: the kernels of each device never materialize the [Tq, Tk] scores;
// the node saves q, k, v, the output and the per-row log-sum-exp, and the VJP is the device's
// fused backward. (Unlike the composite nn::fn::attention, this op's gradient is not itself
// differentiable: no double backward through it.)
#include <cmath>

#include "ops/autocast.hpp"
#include "ops/ops.hpp"

namespace nx {

std::vector<double> alibi_slopes(int64_t heads) {
  // For n a power of two: 2^(-8/n), 2^(-16/n), ...; otherwise the closest power of two's slopes
  // followed by every other slope of twice that many heads (Press et al.'s construction).
  auto pow2 = [](int64_t n) {
    std::vector<double> s;
    double start = std::pow(2.0, -8.0 / double(n));
    for (int64_t i = 0; i < n; ++i) s.push_back(std::pow(start, double(i + 1)));
    return s;
  };
  int64_t p = 1;
  while (p <= heads / 2) p *= 2;  // not p * 2 <= heads: that product could overflow
  std::vector<double> s = pow2(p);
  if (p < heads) {
    std::vector<double> extra = pow2(2 * p);
    for (int64_t i = 0; int64_t(s.size()) < heads; i += 2) s.push_back(extra[size_t(i)]);
  }
  return s;
}

// The sizes of q [B, H, Tq, D] against k, v [B, Hkv, Tk, D] (grouped-query heads), checked.
AttentionParams attention_shapes(const Tensor& q, const Tensor& k, const Tensor& v, const char* k_name,
                                 const char* v_name, const char* tk_name) {
  if (q.dim() != 4 || k.dim() != 4)
    fail(NX_ERR_SHAPE, current_api(), ": expected q [B, H, Tq, D] and ", k_name, ", ", v_name, " [B, Hkv, ", tk_name,
         ", D], got ", shape_str(q.shape()), " and ", shape_str(k.shape()));
  AttentionParams p;
  p.batch = q.shape()[0];
  p.heads = q.shape()[1];
  p.tq = q.shape()[2];
  p.dim = q.shape()[3];
  p.kv_heads = k.shape()[1];
  p.tk = k.shape()[2];
  if (k.shape()[0] != p.batch || k.shape()[3] != p.dim || p.kv_heads == 0 || p.heads % p.kv_heads)
    fail(NX_ERR_SHAPE, current_api(), ": ", k_name, " must be [", p.batch, ", Hkv, ", tk_name, ", ", p.dim, "] with ",
         p.heads, " heads a multiple of Hkv; got ", shape_str(k.shape()));
  if (v.shape() != k.shape())
    fail(NX_ERR_SHAPE, current_api(), ": ", v_name, " must be ", shape_str(k.shape()), " as ", k_name, ", got ",
         shape_str(v.shape()));
  if (p.dim == 0 || p.dim > 256) fail(NX_ERR_SHAPE, current_api(), ": head_dim must be in 1..256, got ", p.dim);
  return p;
}

Tensor flash_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, bool causal, bool alibi,
                       double scale) {
  Tensor q = q_in, k = k_in, v = v_in;
  autocast_low({&q, &k, &v});
  check_same_device(q, k, "q", "k");
  check_same_device(q, v, "q", "v");
  check_floating(q, "q");
  if (k.dtype() != q.dtype() || v.dtype() != q.dtype())
    fail(NX_ERR_DTYPE, current_api(), ": q, k and v must share a dtype, got ", dtype_name(q.dtype()), ", ",
         dtype_name(k.dtype()), ", ", dtype_name(v.dtype()));
  AttentionParams p = attention_shapes(q, k, v, "k", "v", "Tk");
  p.scale = scale > 0 ? scale : 1.0 / std::sqrt(double(p.dim));
  p.causal = causal;
  p.deterministic = deterministic();
  const Kernels kernel = kernels(q.device());
  const DType cd = kernel.be.native_half_attention() ? q.dtype() : compute_dtype(q.dtype());
  // A one-query step that records no gradient (decoding with a KV cache) on the CPU reads k and v
  // where they are: the cache's first positions are a strided view, and copying them every step
  // cost about as much as the attention. Every other call gets contiguous k and v.
  const bool kv_in_place_ok = q.device().type == NX_CPU && p.tq == 1 && !any_requires_grad({q, k, v});
  Tensor qc, kc, vc;
  {
    GradModeGuard off(false);
    qc = contiguous(cast_if_needed(detach(q), cd));  // no copy of inputs already in place
    kc = cast_if_needed(detach(k), cd);
    vc = cast_if_needed(detach(v), cd);
    const bool in_place = kv_in_place_ok && kc.strides().back() == 1 && vc.strides().back() == 1;
    if (!in_place) {
      kc = contiguous(kc);
      vc = contiguous(vc);
    }
  }
  Tensor out = Tensor::empty(q.shape(), cd, q.device());
  // f64 keeps an f64 log-sum-exp: the backward's exp(s - lse) needs it to 1e-16.
  Tensor lse = Tensor::empty({p.batch, p.heads, p.tq}, cd == DType::F64 ? DType::F64 : DType::F32, q.device());
  // The slopes (one per head) after the allocations: a view of more heads than memory can hold
  // fails there at once, and an empty one needs none; built first, an expanded or empty q with
  // 2^40 heads had the host build 2^40 slopes (found by tests/fuzz/fuzz_capi).
  if (alibi && out.numel()) p.alibi_slopes = alibi_slopes(p.heads);
  if (out.numel()) kernel.attention_forward(p, View::of(qc), View::of(kc), View::of(vc), View::of(out), View::of(lse));
  Tensor result = cast_if_needed(out, q.dtype());
  return record1("FlashAttentionBackward", detach(result), {q, k, v}, {qc, kc, vc, out, lse},
                 [p](const std::vector<Tensor>& g, const std::vector<Tensor>& s, const std::vector<bool>&) {
    GradModeGuard off(false);
    const DType cd = s[0].dtype();
    Tensor dout = contiguous(cast_if_needed(detach(g[0]), cd));
    Tensor dq = Tensor::empty(s[0].shape(), cd, s[0].device());
    Tensor dk = Tensor::empty(s[1].shape(), cd, s[0].device());
    Tensor dv = Tensor::empty(s[2].shape(), cd, s[0].device());
    if (dq.numel() && dk.numel())
      kernels(s[0].device()).attention_backward(p, View::of(s[0]), View::of(s[1]), View::of(s[2]), View::of(s[3]),
                                                View::of(dout), View::of(s[4]), View::of(dq), View::of(dk), View::of(dv));
    else {
      dq = zeros_like(dq); dk = zeros_like(dk); dv = zeros_like(dv);
    }
    const DType want = g[0].dtype();
    return std::vector<Tensor>{cast_if_needed(dq, want), cast_if_needed(dk, want), cast_if_needed(dv, want)};
  });
}

}  // namespace nx
