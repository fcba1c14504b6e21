// C API: 8-bit quantization, attention against an 8-bit KV cache, and the FP8 forward (nexus.h;
// the ops live in src/ops/quantize.cpp). Hand-written shims: the registry's generated ones refuse
// the 8-bit storage dtypes these take by design.
#include "capi/capi.hpp"

using namespace nx;
using namespace nx::capi;

extern "C" {

nx_status nx_quantize_8bit(nx_tensor* out, nx_tensor* scale, nx_tensor x, nx_dtype dtype, int64_t keep_dims,
                           nx_stream stream) {
  clear_out(out);
  clear_out(scale);
  return guard("nx_quantize_8bit", [&] {
    check_out(out);
    check_out(scale, "scale");
    const Tensor& x_ = unwrap(x, "x");
    check_stream(stream, x_.device());
    wrap_outs({out, scale}, quantize_8bit(x_, dtype_arg(dtype), keep_dims));
  });
}

nx_status nx_kv_cache_append_8bit(nx_tensor cache, nx_tensor scale, nx_tensor x, nx_tensor pos, nx_stream stream) {
  return guard("nx_kv_cache_append_8bit", [&] {
    const Tensor& cache_ = unwrap(cache, "cache");
    const Tensor& scale_ = unwrap(scale, "scale");
    const Tensor& x_ = unwrap(x, "x");
    const Tensor& pos_ = unwrap(pos, "pos");
    check_stream(stream, cache_.device());
    kv_cache_append_8bit(cache_, scale_, x_, pos_);
  });
}

nx_status nx_attention_decode_8bit(nx_tensor* out, nx_tensor q, nx_tensor k_cache, nx_tensor k_scale, nx_tensor v_cache,
                                   nx_tensor v_scale, nx_tensor lengths, bool causal, bool alibi, double scale,
                                   nx_stream stream) {
  clear_out(out);
  return guard("nx_attention_decode_8bit", [&] {
    check_out(out);
    const Tensor& q_ = unwrap(q, "q");
    const Tensor& k_ = unwrap(k_cache, "k_cache");
    const Tensor& ks_ = unwrap(k_scale, "k_scale");
    const Tensor& v_ = unwrap(v_cache, "v_cache");
    const Tensor& vs_ = unwrap(v_scale, "v_scale");
    const Tensor& len_ = unwrap(lengths, "lengths");
    check_stream(stream, q_.device());
    *out = wrap(attention_decode_8bit(q_, k_, ks_, v_, vs_, len_, causal, alibi, scale));
  });
}

nx_status nx_flash_attention_fp8(nx_tensor* out, nx_tensor q, nx_tensor q_scale, nx_tensor k, nx_tensor k_scale,
                                 nx_tensor v, nx_tensor v_scale, bool causal, bool alibi, double scale,
                                 nx_dtype out_dtype, nx_stream stream) {
  clear_out(out);
  return guard("nx_flash_attention_fp8", [&] {
    check_out(out);
    const Tensor& q_ = unwrap(q, "q");
    const Tensor& qs_ = unwrap(q_scale, "q_scale");
    const Tensor& k_ = unwrap(k, "k");
    const Tensor& ks_ = unwrap(k_scale, "k_scale");
    const Tensor& v_ = unwrap(v, "v");
    const Tensor& vs_ = unwrap(v_scale, "v_scale");
    check_stream(stream, q_.device());
    *out = wrap(attention_fp8(q_, qs_, k_, ks_, v_, vs_, causal, alibi, scale, dtype_arg(out_dtype)));
  });
}

}  // extern "C"
