// 8-bit quantization and attention against an 8-bit KV cache (docs/attention_8bit.md). The data
// are the storage dtypes I8 / F8E4M3 / F8E5M2, the scales plain f32 tensors beside them; the
// value represented is data * scale. Inference only: these ops record no graph and refuse inputs
// that require grad while grad mode is on, rather than return a result silently cut off from it.
#include <cmath>

#include "ops/ops.hpp"

namespace nx {
namespace {

void check_8bit(const Tensor& t, const char* what) {
  if (!is_storage_only(t.dtype()))
    fail(NX_ERR_DTYPE, current_api(), ": ", what, " must be i8, f8e4m3 or f8e5m2, got ", dtype_name(t.dtype()));
}
void check_dtype(const Tensor& t, DType want, const char* what) {
  if (t.dtype() != want)
    fail(NX_ERR_DTYPE, current_api(), ": ", what, " must be ", dtype_name(want), ", got ", dtype_name(t.dtype()));
}
void check_shape(const Tensor& t, const Shape& want, const char* what) {
  if (t.shape() != want)
    fail(NX_ERR_SHAPE, current_api(), ": ", what, " must be ", shape_str(want), ", got ", shape_str(t.shape()));
}
// The caches are read (or written) in place: a copy of a many-gigabyte cache per call would
// defeat the point, so a strided one is refused instead of copied.
void check_contiguous(const Tensor& t, const char* what) {
  if (!t.is_contiguous())
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": ", what, " of shape ", shape_str(t.shape()), " and strides ",
         shape_str(t.strides()), " must be contiguous (it is read and written in place)");
}
void check_no_grad(const Tensor& t, const char* what) {
  if (grad_enabled() && t.requires_grad())
    fail(NX_ERR_NOT_IMPLEMENTED, current_api(), ": ", what, " requires grad, but 8-bit attention and quantization "
         "have no backward (inference only); run them with grad mode off");
}

}  // namespace

std::vector<Tensor> quantize_8bit(const Tensor& x, DType dtype, int64_t keep_dims) {
  check_floating(x, "x");
  check_no_grad(x, "x");
  if (!is_storage_only(dtype))
    fail(NX_ERR_DTYPE, current_api(), ": dtype must be i8, f8e4m3 or f8e5m2, got ", dtype_name(dtype));
  const int64_t rank = x.dim();
  if (keep_dims < 0 || keep_dims > rank)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": keep_dims must be in [0, ", rank, "] for x of shape ",
         shape_str(x.shape()), ", got ", keep_dims);
  Shape scale_shape(x.shape().begin(), x.shape().begin() + keep_dims);
  int64_t rows = 1, cols = 1;
  for (int64_t d = 0; d < rank; ++d) (d < keep_dims ? rows : cols) *= x.shape()[size_t(d)];
  Tensor data = Tensor::empty(x.shape(), dtype, x.device());
  Tensor scale = Tensor::empty(keep_dims ? scale_shape : Shape{1}, DType::F32, x.device());
  GradModeGuard off(false);
  if (cols == 0) {
    kernels(x.device()).fill(View::of(scale), 1.0);  // an empty row's scale, as an all-zero row's
  } else if (rows > 0) {
    Tensor src = reshape(contiguous(detach(x)), {rows, cols});
    kernels(x.device()).quantize_rows_8bit(View::of(reshape(data, {rows, cols})), View::of(reshape(scale, {rows})),
                                           View::of(src), View{nullptr, {}, {}, DType::I32});
  }
  return {data, scale};
}

void kv_cache_append_8bit(const Tensor& cache, const Tensor& scale, const Tensor& x, const Tensor& pos) {
  check_8bit(cache, "cache");
  check_floating(x, "x");
  check_no_grad(x, "x");
  check_dtype(scale, DType::F32, "scale");
  check_dtype(pos, DType::I32, "pos");
  check_same_device(cache, scale, "cache", "scale");
  check_same_device(cache, x, "cache", "x");
  check_same_device(cache, pos, "cache", "pos");
  if (cache.dim() != 4 || x.dim() != 4)
    fail(NX_ERR_SHAPE, current_api(), ": expected cache [B, Hkv, Tmax, D] and x [B, Hkv, T, D], got ",
         shape_str(cache.shape()), " and ", shape_str(x.shape()));
  const Shape& c = cache.shape();
  check_shape(x, {c[0], c[1], x.shape()[2], c[3]}, "x");
  check_shape(scale, {c[0], c[1], c[2]}, "scale");
  check_shape(pos, {c[0]}, "pos");
  check_contiguous(cache, "cache");
  check_contiguous(scale, "scale");
  check_in_place_layout(pos, "pos");
  if (x.numel() && c[2]) {
    GradModeGuard off(false);
    kernels(x.device()).quantize_rows_8bit(View::of(cache), View::of(scale), View::of(contiguous(detach(x))),
                                           View::of(contiguous(pos)));
  }
  cache.impl()->storage->version++;
  scale.impl()->storage->version++;
}

Tensor attention_decode_8bit(const Tensor& q, const Tensor& k_cache, const Tensor& k_scale, const Tensor& v_cache,
                             const Tensor& v_scale, const Tensor& lengths, bool causal, bool alibi, double scale) {
  check_no_grad(q, "q");
  if (q.dtype() != DType::F32 && q.dtype() != DType::F16 && q.dtype() != DType::BF16)
    fail(NX_ERR_DTYPE, current_api(), ": q must be f32, f16 or bf16, got ", dtype_name(q.dtype()));
  check_8bit(k_cache, "k_cache");
  if (v_cache.dtype() != k_cache.dtype())
    fail(NX_ERR_DTYPE, current_api(), ": k_cache and v_cache must share a dtype, got ", dtype_name(k_cache.dtype()),
         " and ", dtype_name(v_cache.dtype()));
  check_dtype(k_scale, DType::F32, "k_scale");
  check_dtype(v_scale, DType::F32, "v_scale");
  check_dtype(lengths, DType::I32, "lengths");
  check_same_device(q, k_cache, "q", "k_cache");
  check_same_device(q, k_scale, "q", "k_scale");
  check_same_device(q, v_cache, "q", "v_cache");
  check_same_device(q, v_scale, "q", "v_scale");
  check_same_device(q, lengths, "q", "lengths");
  AttentionParams p = attention_shapes(q, k_cache, v_cache, "k_cache", "v_cache", "Tmax");
  check_shape(k_scale, {p.batch, p.kv_heads, p.tk}, "k_scale");
  check_shape(v_scale, {p.batch, p.kv_heads, p.tk}, "v_scale");
  check_shape(lengths, {p.batch}, "lengths");
  if (!q.device().is_cpu() && p.dim != 64 && p.dim != 128 && p.dim != 256)
    fail(NX_ERR_NOT_IMPLEMENTED, current_api(), ": on CUDA head_dim must be 64, 128 or 256, got ", p.dim);
  check_contiguous(k_cache, "k_cache");
  check_contiguous(v_cache, "v_cache");
  check_contiguous(k_scale, "k_scale");
  check_contiguous(v_scale, "v_scale");
  p.scale = scale > 0 ? scale : 1.0 / std::sqrt(double(p.dim));
  p.causal = causal;
  Tensor out = Tensor::empty(q.shape(), q.dtype(), q.device());
  if (alibi && out.numel()) p.alibi_slopes = alibi_slopes(p.heads);
  if (out.numel()) {
    GradModeGuard off(false);
    kernels(q.device()).attention_decode_8bit(p, View::of(contiguous(detach(q))), View::of(k_cache), View::of(k_scale),
                                              View::of(v_cache), View::of(v_scale), View::of(contiguous(lengths)),
                                              View::of(out));
  }
  return out;
}


// A scale tensor's shape is its granularity: [1] for the tensor, [B, heads] per head, and (when
// per_row) [B, heads, rows] per row.
static void check_scale_shape(const Tensor& s, int64_t batch, int64_t heads, int64_t rows, bool per_row,
                              const char* what) {
  check_dtype(s, DType::F32, what);
  check_contiguous(s, what);
  const Shape& sh = s.shape();
  if (sh == Shape{1} || sh == Shape{batch, heads} || (per_row && sh == Shape{batch, heads, rows})) return;
  fail(NX_ERR_SHAPE, current_api(), ": ", what, " must be [1] or ", shape_str({batch, heads}),
       per_row ? cat(" or ", shape_str({batch, heads, rows})) : std::string(), ", got ", shape_str(sh));
}

Tensor attention_fp8(const Tensor& q, const Tensor& q_scale, const Tensor& k, const Tensor& k_scale, const Tensor& v,
                     const Tensor& v_scale, bool causal, bool alibi, double scale, DType out_dtype) {
  for (const auto& [t, name] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}}) {
    check_dtype(*t, DType::F8E4M3, name);
    check_contiguous(*t, name);
    check_same_device(q, *t, "q", name);
  }
  for (const auto& [t, name] : {std::pair{&q_scale, "q_scale"}, {&k_scale, "k_scale"}, {&v_scale, "v_scale"}})
    check_same_device(q, *t, "q", name);
  if (out_dtype != DType::BF16 && out_dtype != DType::F16 && out_dtype != DType::F32)
    fail(NX_ERR_DTYPE, current_api(), ": out_dtype must be bf16, f16 or f32, got ", dtype_name(out_dtype));
  AttentionParams p = attention_shapes(q, k, v, "k", "v", "Tk");
  check_scale_shape(q_scale, p.batch, p.heads, p.tq, true, "q_scale");
  check_scale_shape(k_scale, p.batch, p.kv_heads, p.tk, true, "k_scale");
  check_scale_shape(v_scale, p.batch, p.kv_heads, p.tk, false, "v_scale");
  p.scale = scale > 0 ? scale : 1.0 / std::sqrt(double(p.dim));
  p.causal = causal;
  Tensor out = Tensor::empty(q.shape(), out_dtype, q.device());
  if (alibi && out.numel()) p.alibi_slopes = alibi_slopes(p.heads);
  if (out.numel()) {
    GradModeGuard off(false);
    kernels(q.device()).attention_forward_fp8(p, View::of(q), View::of(q_scale), View::of(k), View::of(k_scale),
                                              View::of(v), View::of(v_scale), View::of(out));
  }
  return out;
}

}  // namespace nx
