// C API: views, elementwise, reductions, linear algebra, softmax, indexing and losses. Each
// function checks its handles and stream, then calls the op layer (src/ops).
#include "capi/capi.hpp"

using namespace nx;
using namespace nx::capi;

namespace {

template <class F>
nx_status op1(const char* api, nx_tensor* out, nx_tensor x, nx_stream stream, F f) {
  clear_out(out);
  return guard(api, [&] {
    check_out(out);
    const Tensor& t = unwrap(x, "x");
    check_stream(stream, t.device());
    *out = wrap(f(t));
  });
}

template <class F>
nx_status op2(const char* api, nx_tensor* out, nx_tensor a, nx_tensor b, nx_stream stream, F f) {
  clear_out(out);
  return guard(api, [&] {
    check_out(out);
    const Tensor& ta = unwrap(a, "a");
    const Tensor& tb = unwrap(b, "b");
    check_stream(stream, ta.device());
    *out = wrap(f(ta, tb));
  });
}

Axes axes_arg(const int64_t* axes, size_t naxes) {
  if (naxes && !axes) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": axes is NULL but naxes is ", naxes);
  return Axes(axes, axes + naxes);
}

std::vector<Tensor> tensor_list(const nx_tensor* xs, size_t n) {
  if (!xs) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": the tensor array is NULL");
  std::vector<Tensor> v;
  for (size_t i = 0; i < n; ++i) v.push_back(unwrap(xs[i], "an element of the tensor array"));
  return v;
}

Reduction reduction_arg(const nx_reduction& reduction) {  // by reference: see enum_value
  const int r = enum_value(reduction);
  if (r != NX_REDUCTION_MEAN && r != NX_REDUCTION_SUM && r != NX_REDUCTION_NONE)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": invalid reduction ", r);
  return Reduction(r);
}

}  // namespace

#define NX_UNARY_API(name, OP)                                                              \
  nx_status name(nx_tensor* out, nx_tensor x, nx_stream stream) {                           \
    return op1(#name, out, x, stream, [](const Tensor& t) { return unary(UnaryOp::OP, t); }); \
  }
#define NX_BINARY_API(name, OP)                                                                          \
  nx_status name(nx_tensor* out, nx_tensor a, nx_tensor b, nx_stream stream) {                           \
    return op2(#name, out, a, b, stream, [](const Tensor& x, const Tensor& y) { return binary(BinaryOp::OP, x, y); }); \
  }

extern "C" {

// ---------------------------------------------------------------- views and shape ops
nx_status nx_reshape(nx_tensor* out, nx_tensor x, const int64_t* shape, size_t ndim, nx_stream stream) {
  return op1("nx_reshape", out, x, stream, [&](const Tensor& t) { return reshape(t, dims_arg(shape, ndim)); });
}
nx_status nx_view(nx_tensor* out, nx_tensor x, const int64_t* shape, size_t ndim, nx_stream stream) {
  return op1("nx_view", out, x, stream, [&](const Tensor& t) { return view(t, dims_arg(shape, ndim)); });
}
nx_status nx_transpose(nx_tensor* out, nx_tensor x, int64_t dim0, int64_t dim1, nx_stream stream) {
  return op1("nx_transpose", out, x, stream, [&](const Tensor& t) { return transpose(t, dim0, dim1); });
}
nx_status nx_permute(nx_tensor* out, nx_tensor x, const int64_t* dims, size_t ndim, nx_stream stream) {
  return op1("nx_permute", out, x, stream, [&](const Tensor& t) { return permute(t, dims_arg(dims, ndim, "dims")); });
}
nx_status nx_slice(nx_tensor* out, nx_tensor x, int64_t axis, int64_t start, int64_t end, int64_t step,
                   nx_stream stream) {
  return op1("nx_slice", out, x, stream, [&](const Tensor& t) { return slice(t, axis, start, end, step); });
}
nx_status nx_expand(nx_tensor* out, nx_tensor x, const int64_t* shape, size_t ndim, nx_stream stream) {
  return op1("nx_expand", out, x, stream, [&](const Tensor& t) { return expand(t, dims_arg(shape, ndim)); });
}
nx_status nx_squeeze(nx_tensor* out, nx_tensor x, int64_t axis, nx_stream stream) {
  return op1("nx_squeeze", out, x, stream, [&](const Tensor& t) { return squeeze(t, axis); });
}
nx_status nx_unsqueeze(nx_tensor* out, nx_tensor x, int64_t axis, nx_stream stream) {
  return op1("nx_unsqueeze", out, x, stream, [&](const Tensor& t) { return unsqueeze(t, axis); });
}
nx_status nx_flatten(nx_tensor* out, nx_tensor x, int64_t start_axis, int64_t end_axis, nx_stream stream) {
  return op1("nx_flatten", out, x, stream, [&](const Tensor& t) { return flatten(t, start_axis, end_axis); });
}
nx_status nx_contiguous(nx_tensor* out, nx_tensor x, nx_stream stream) {
  return op1("nx_contiguous", out, x, stream, [&](const Tensor& t) { return contiguous(t); });
}
nx_status nx_cast(nx_tensor* out, nx_tensor x, nx_dtype dtype, nx_stream stream) {
  return op1("nx_cast", out, x, stream, [&](const Tensor& t) { return cast(t, dtype_arg(dtype)); });
}
nx_status nx_clone(nx_tensor* out, nx_tensor x, nx_stream stream) {
  return op1("nx_clone", out, x, stream, [&](const Tensor& t) { return clone(t); });
}
nx_status nx_cat(nx_tensor* out, const nx_tensor* xs, size_t n, int64_t axis, nx_stream stream) {
  clear_out(out);
  return guard("nx_cat", [&] {
    check_out(out);
    auto v = tensor_list(xs, n);
    if (!v.empty()) check_stream(stream, v[0].device());
    *out = wrap(cat(v, axis));
  });
}
nx_status nx_stack(nx_tensor* out, const nx_tensor* xs, size_t n, int64_t axis, nx_stream stream) {
  clear_out(out);
  return guard("nx_stack", [&] {
    check_out(out);
    auto v = tensor_list(xs, n);
    if (!v.empty()) check_stream(stream, v[0].device());
    *out = wrap(stack(v, axis));
  });
}
nx_status nx_split(nx_tensor* outs, nx_tensor x, const int64_t* sizes, size_t nsizes, int64_t axis, nx_stream stream) {
  if (outs)
    for (size_t i = 0; i < nsizes; ++i) outs[i] = nullptr;
  return guard("nx_split", [&] {
    check_out(outs, "outs");
    const Tensor& t = unwrap(x, "x");
    check_stream(stream, t.device());
    auto parts = split(t, dims_arg(sizes, nsizes, "sizes"), axis);
    for (size_t i = 0; i < parts.size(); ++i) outs[i] = wrap(parts[i]);
  });
}

// ---------------------------------------------------------------- elementwise
NX_BINARY_API(nx_add, Add)
NX_BINARY_API(nx_sub, Sub)
NX_BINARY_API(nx_mul, Mul)
NX_BINARY_API(nx_div, Div)
NX_BINARY_API(nx_pow, Pow)
NX_BINARY_API(nx_maximum, Maximum)
NX_BINARY_API(nx_minimum, Minimum)
NX_BINARY_API(nx_eq, Eq)
NX_BINARY_API(nx_ne, Ne)
NX_BINARY_API(nx_lt, Lt)
NX_BINARY_API(nx_le, Le)
NX_BINARY_API(nx_gt, Gt)
NX_BINARY_API(nx_ge, Ge)
NX_UNARY_API(nx_neg, Neg)
NX_UNARY_API(nx_abs, Abs)
NX_UNARY_API(nx_exp, Exp)
NX_UNARY_API(nx_log, Log)
NX_UNARY_API(nx_sqrt, Sqrt)
NX_UNARY_API(nx_rsqrt, Rsqrt)
NX_UNARY_API(nx_sin, Sin)
NX_UNARY_API(nx_cos, Cos)
NX_UNARY_API(nx_tanh, Tanh)
NX_UNARY_API(nx_sinh, Sinh)
NX_UNARY_API(nx_cosh, Cosh)
NX_UNARY_API(nx_sigmoid, Sigmoid)
NX_UNARY_API(nx_relu, Relu)
NX_UNARY_API(nx_silu, Silu)
NX_UNARY_API(nx_softplus, Softplus)
NX_UNARY_API(nx_mish, Mish)

NX_BINARY_API(nx_add_relu, AddRelu)
NX_BINARY_API(nx_mul_tanh, MulTanh)
nx_status nx_bias_gelu(nx_tensor* out, nx_tensor x, nx_tensor bias, bool approximate_tanh, nx_stream stream) {
  return op2("nx_bias_gelu", out, x, bias, stream, [&](const Tensor& a, const Tensor& b) {
    return binary(approximate_tanh ? BinaryOp::AddGeluTanh : BinaryOp::AddGelu, a, b);
  });
}
nx_status nx_add_scalar(nx_tensor* out, nx_tensor x, double value, nx_stream stream) {
  return op1("nx_add_scalar", out, x, stream, [&](const Tensor& t) { return add_scalar(t, value); });
}
nx_status nx_mul_scalar(nx_tensor* out, nx_tensor x, double value, nx_stream stream) {
  return op1("nx_mul_scalar", out, x, stream, [&](const Tensor& t) { return mul_scalar(t, value); });
}
nx_status nx_pow_scalar(nx_tensor* out, nx_tensor x, double exponent, nx_stream stream) {
  return op1("nx_pow_scalar", out, x, stream, [&](const Tensor& t) { return pow_scalar(t, exponent); });
}
nx_status nx_leaky_relu(nx_tensor* out, nx_tensor x, double negative_slope, nx_stream stream) {
  return op1("nx_leaky_relu", out, x, stream, [&](const Tensor& t) { return unary(UnaryOp::LeakyRelu, t, negative_slope); });
}
nx_status nx_gelu(nx_tensor* out, nx_tensor x, bool approximate_tanh, nx_stream stream) {
  return op1("nx_gelu", out, x, stream, [&](const Tensor& t) {
    return unary(approximate_tanh ? UnaryOp::GeluTanh : UnaryOp::Gelu, t);
  });
}
nx_status nx_clamp(nx_tensor* out, nx_tensor x, double lo, double hi, nx_stream stream) {
  return op1("nx_clamp", out, x, stream, [&](const Tensor& t) { return clamp(t, lo, hi); });
}
nx_status nx_where(nx_tensor* out, nx_tensor cond, nx_tensor a, nx_tensor b, nx_stream stream) {
  clear_out(out);
  return guard("nx_where", [&] {
    check_out(out);
    const Tensor& c = unwrap(cond, "cond");
    const Tensor& ta = unwrap(a, "a");
    const Tensor& tb = unwrap(b, "b");
    check_stream(stream, ta.device());
    *out = wrap(where(c, ta, tb));
  });
}

static nx_status in_place(const char* api, nx_tensor x, nx_tensor b, nx_stream stream, BinaryOp op) {
  return guard(api, [&] {
    const Tensor& t = unwrap(x, "x");
    const Tensor& tb = unwrap(b, "b");
    check_stream(stream, t.device());
    binary_(op, t, tb);
  });
}
nx_status nx_add_(nx_tensor x, nx_tensor b, nx_stream stream) { return in_place("nx_add_", x, b, stream, BinaryOp::Add); }
nx_status nx_mul_(nx_tensor x, nx_tensor b, nx_stream stream) { return in_place("nx_mul_", x, b, stream, BinaryOp::Mul); }
nx_status nx_mul_scalar_(nx_tensor x, double value, nx_stream stream) {
  return guard("nx_mul_scalar_", [&] {
    const Tensor& t = unwrap(x, "x");
    check_stream(stream, t.device());
    unary_(UnaryOp::MulScalar, t, value);
  });
}
nx_status nx_copy_(nx_tensor x, nx_tensor src, nx_stream stream) {
  return guard("nx_copy_", [&] {
    const Tensor& t = unwrap(x, "x");
    const Tensor& s = unwrap(src, "src");
    check_stream(stream, t.device());
    copy_(t, s);
  });
}

// ---------------------------------------------------------------- reductions
nx_status nx_sum(nx_tensor* out, nx_tensor x, const int64_t* axes, size_t naxes, bool keepdim, nx_stream stream) {
  return op1("nx_sum", out, x, stream, [&](const Tensor& t) { return sum(t, axes_arg(axes, naxes), keepdim); });
}
nx_status nx_mean(nx_tensor* out, nx_tensor x, const int64_t* axes, size_t naxes, bool keepdim, nx_stream stream) {
  return op1("nx_mean", out, x, stream, [&](const Tensor& t) { return mean(t, axes_arg(axes, naxes), keepdim); });
}
nx_status nx_max(nx_tensor* out, nx_tensor x, const int64_t* axes, size_t naxes, bool keepdim, nx_stream stream) {
  return op1("nx_max", out, x, stream, [&](const Tensor& t) { return amax(t, axes_arg(axes, naxes), keepdim); });
}
nx_status nx_min(nx_tensor* out, nx_tensor x, const int64_t* axes, size_t naxes, bool keepdim, nx_stream stream) {
  return op1("nx_min", out, x, stream, [&](const Tensor& t) { return amin(t, axes_arg(axes, naxes), keepdim); });
}
nx_status nx_var(nx_tensor* out, nx_tensor x, const int64_t* axes, size_t naxes, int64_t correction, bool keepdim,
                 nx_stream stream) {
  return op1("nx_var", out, x, stream, [&](const Tensor& t) { return var(t, axes_arg(axes, naxes), correction, keepdim); });
}
nx_status nx_argmax(nx_tensor* out, nx_tensor x, int64_t axis, bool keepdim, nx_stream stream) {
  return op1("nx_argmax", out, x, stream, [&](const Tensor& t) { return argmax(t, axis, keepdim); });
}

// ---------------------------------------------------------------- linear algebra, softmax
nx_status nx_matmul(nx_tensor* out, nx_tensor a, nx_tensor b, nx_stream stream) {
  return op2("nx_matmul", out, a, b, stream, [](const Tensor& x, const Tensor& y) { return matmul(x, y); });
}
nx_status nx_linear(nx_tensor* out, nx_tensor x, nx_tensor weight, nx_tensor bias, nx_stream stream) {
  clear_out(out);
  return guard("nx_linear", [&] {
    check_out(out);
    const Tensor& t = unwrap(x, "x");
    const Tensor& w = unwrap(weight, "weight");
    Tensor bt = unwrap_optional(bias, "bias");
    check_stream(stream, t.device());
    *out = wrap(linear(t, w, bt));
  });
}
nx_status nx_softmax(nx_tensor* out, nx_tensor x, int64_t axis, nx_stream stream) {
  return op1("nx_softmax", out, x, stream, [&](const Tensor& t) { return softmax(t, axis); });
}
nx_status nx_log_softmax(nx_tensor* out, nx_tensor x, int64_t axis, nx_stream stream) {
  return op1("nx_log_softmax", out, x, stream, [&](const Tensor& t) { return log_softmax(t, axis); });
}

nx_status nx_flash_attention(nx_tensor* out, nx_tensor q, nx_tensor k, nx_tensor v, bool causal, bool alibi,
                             double scale, nx_stream stream) {
  clear_out(out);
  return guard("nx_flash_attention", [&] {
    check_out(out);
    const Tensor& tq = unwrap(q, "q");
    const Tensor& tk = unwrap(k, "k");
    const Tensor& tv = unwrap(v, "v");
    check_stream(stream, tq.device());
    *out = wrap(flash_attention(tq, tk, tv, causal, alibi, scale));
  });
}

// ---------------------------------------------------------------- indexing
nx_status nx_index_select(nx_tensor* out, nx_tensor x, int64_t axis, nx_tensor index, nx_stream stream) {
  return op2("nx_index_select", out, x, index, stream, [&](const Tensor& t, const Tensor& i) { return index_select(t, axis, i); });
}
nx_status nx_gather(nx_tensor* out, nx_tensor x, int64_t axis, nx_tensor index, nx_stream stream) {
  return op2("nx_gather", out, x, index, stream, [&](const Tensor& t, const Tensor& i) { return gather(t, axis, i); });
}
nx_status nx_embedding(nx_tensor* out, nx_tensor weight, nx_tensor indices, nx_stream stream) {
  return op2("nx_embedding", out, weight, indices, stream, [](const Tensor& w, const Tensor& i) { return embedding(w, i); });
}
nx_status nx_one_hot(nx_tensor* out, nx_tensor indices, int64_t num_classes, nx_dtype dtype, nx_stream stream) {
  return op1("nx_one_hot", out, indices, stream, [&](const Tensor& i) { return one_hot(i, num_classes, dtype_arg(dtype)); });
}

// ---------------------------------------------------------------- losses
nx_status nx_cross_entropy(nx_tensor* out, nx_tensor logits, nx_tensor target, int64_t ignore_index,
                           double label_smoothing, nx_reduction reduction, nx_stream stream) {
  return op2("nx_cross_entropy", out, logits, target, stream, [&](const Tensor& l, const Tensor& t) {
    return cross_entropy(l, t, ignore_index, label_smoothing, reduction_arg(reduction));
  });
}
nx_status nx_nll_loss(nx_tensor* out, nx_tensor log_probs, nx_tensor target, int64_t ignore_index,
                      nx_reduction reduction, nx_stream stream) {
  return op2("nx_nll_loss", out, log_probs, target, stream, [&](const Tensor& l, const Tensor& t) {
    return nll_loss(l, t, ignore_index, reduction_arg(reduction));
  });
}
nx_status nx_mse_loss(nx_tensor* out, nx_tensor input, nx_tensor target, nx_reduction reduction, nx_stream stream) {
  return op2("nx_mse_loss", out, input, target, stream, [&](const Tensor& i, const Tensor& t) {
    return mse_loss(i, t, reduction_arg(reduction));
  });
}
nx_status nx_bce_with_logits(nx_tensor* out, nx_tensor logits, nx_tensor target, nx_reduction reduction,
                             nx_stream stream) {
  return op2("nx_bce_with_logits", out, logits, target, stream, [&](const Tensor& l, const Tensor& t) {
    return bce_with_logits(l, t, reduction_arg(reduction));
  });
}

// ---------------------------------------------------------------- fused kernels
nx_status nx_rms_norm(nx_tensor* out, nx_tensor x, nx_tensor weight, double eps, nx_stream stream) {
  clear_out(out);
  return guard("nx_rms_norm", [&] {
    check_out(out);
    const Tensor& tx = unwrap(x, "x");
    check_stream(stream, tx.device());
    *out = wrap(rms_norm(tx, unwrap_optional(weight, "weight"), eps));
  });
}
nx_status nx_layer_norm(nx_tensor* out, nx_tensor x, nx_tensor weight, nx_tensor bias, double eps, nx_stream stream) {
  clear_out(out);
  return guard("nx_layer_norm", [&] {
    check_out(out);
    const Tensor& tx = unwrap(x, "x");
    check_stream(stream, tx.device());
    *out = wrap(layer_norm(tx, unwrap_optional(weight, "weight"), unwrap_optional(bias, "bias"), eps));
  });
}
static nx_status add_norm(const char* api, nx_tensor* out, nx_tensor* sum_out, nx_tensor x, nx_tensor residual,
                          nx_tensor weight, nx_tensor bias, double eps, bool rms, nx_stream stream) {
  clear_out(out);
  clear_out(sum_out);
  return guard(api, [&] {
    check_out(out);
    check_out(sum_out, "sum_out");
    const Tensor& tx = unwrap(x, "x");
    const Tensor& tr = unwrap(residual, "residual");
    check_stream(stream, tx.device());
    std::vector<Tensor> r = fused_norm(tx, tr, unwrap_optional(weight, "weight"), unwrap_optional(bias, "bias"), eps, rms);
    nx_tensor y = wrap(r[0]);
    try {
      *sum_out = wrap(r[1]);
    } catch (...) {
      release(y);
      throw;
    }
    *out = y;
  });
}
nx_status nx_add_rms_norm(nx_tensor* out, nx_tensor* sum_out, nx_tensor x, nx_tensor residual, nx_tensor weight,
                          double eps, nx_stream stream) {
  return add_norm("nx_add_rms_norm", out, sum_out, x, residual, weight, nullptr, eps, true, stream);
}
nx_status nx_add_layer_norm(nx_tensor* out, nx_tensor* sum_out, nx_tensor x, nx_tensor residual, nx_tensor weight,
                            nx_tensor bias, double eps, nx_stream stream) {
  return add_norm("nx_add_layer_norm", out, sum_out, x, residual, weight, bias, eps, false, stream);
}
nx_status nx_softmax_cross_entropy(nx_tensor* out, nx_tensor logits, nx_tensor target, int64_t ignore_index,
                                   nx_reduction reduction, nx_stream stream) {
  return op2("nx_softmax_cross_entropy", out, logits, target, stream, [&](const Tensor& l, const Tensor& t) {
    return softmax_cross_entropy(l, t, ignore_index, reduction_arg(reduction));
  });
}
nx_status nx_swiglu(nx_tensor* out, nx_tensor gate, nx_tensor up, nx_stream stream) {
  return op2("nx_swiglu", out, gate, up, stream, [](const Tensor& g, const Tensor& u) { return swiglu(g, u); });
}
nx_status nx_adam_step_multi(const nx_tensor* params, size_t n, const nx_tensor* grads, size_t ngrads,
                             const nx_tensor* exp_avgs, size_t nexp_avgs, const nx_tensor* exp_avg_sqs,
                             size_t nexp_avg_sqs, int64_t step, double lr, double beta1, double beta2, double eps,
                             double weight_decay, bool decoupled_weight_decay, nx_stream stream) {
  return guard("nx_adam_step_multi", [&] {
    if (ngrads != n || nexp_avgs != n || nexp_avg_sqs != n)
      fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": the four arrays must have one count; got params ", n, ", grads ",
           ngrads, ", exp_avgs ", nexp_avgs, ", exp_avg_sqs ", nexp_avg_sqs);
    if (n == 0) return;
    std::vector<Tensor> p = tensor_list(params, n), g = tensor_list(grads, n), m = tensor_list(exp_avgs, n),
                        v = tensor_list(exp_avg_sqs, n);
    check_stream(stream, p[0].device());
    GradModeGuard off(false);  // an optimizer update: parameters that require grad are fine
    adam_step_multi(p, g, m, v, std::vector<int64_t>(n, step),
                    AdamParams{lr, beta1, beta2, eps, weight_decay, decoupled_weight_decay});
  });
}

}  // extern "C"
