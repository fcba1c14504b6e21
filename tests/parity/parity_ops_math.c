/* Parity ops, part 1: elementwise (binary, comparisons, unary, scalar, where), reductions,
 * matmul/linear and softmax, each calling the public C API with the case's attributes. */
#include "parity.h"

/* ---------------------------------------------------------------- elementwise */
#define BINARY(NAME)                                                               \
  static nx_status op_##NAME(const parity_case* c, const nx_tensor* x, nx_tensor* out) { \
    (void)c;                                                                       \
    return nx_##NAME(&out[0], x[0], x[1], NULL);                                   \
  }
#define UNARY(NAME)                                                                \
  static nx_status op_##NAME(const parity_case* c, const nx_tensor* x, nx_tensor* out) { \
    (void)c;                                                                       \
    return nx_##NAME(&out[0], x[0], NULL);                                         \
  }

BINARY(add)
BINARY(sub)
BINARY(mul)
BINARY(div)
BINARY(pow)
BINARY(maximum)
BINARY(minimum)
BINARY(eq)
BINARY(ne)
BINARY(lt)
BINARY(le)
BINARY(gt)
BINARY(ge)
UNARY(neg)
UNARY(abs)
UNARY(exp)
UNARY(log)
UNARY(sqrt)
UNARY(rsqrt)
UNARY(sin)
UNARY(cos)
UNARY(tanh)
UNARY(sinh)
UNARY(cosh)
UNARY(sigmoid)
UNARY(relu)
UNARY(silu)
UNARY(softplus)
UNARY(mish)

static nx_status op_leaky_relu(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  return nx_leaky_relu(&out[0], x[0], meta_real(c, "slope"), NULL);
}
static nx_status op_gelu(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  return nx_gelu(&out[0], x[0], meta_int(c, "approx") != 0, NULL);
}
static nx_status op_clamp(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  return nx_clamp(&out[0], x[0], meta_real(c, "lo"), meta_real(c, "hi"), NULL);
}
static nx_status op_add_scalar(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  return nx_add_scalar(&out[0], x[0], meta_real(c, "value"), NULL);
}
static nx_status op_mul_scalar(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  return nx_mul_scalar(&out[0], x[0], meta_real(c, "value"), NULL);
}
static nx_status op_pow_scalar(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  return nx_pow_scalar(&out[0], x[0], meta_real(c, "value"), NULL);
}
static nx_status op_where(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  (void)c;
  return nx_where(&out[0], x[0], x[1], x[2], NULL);
}

/* ---------------------------------------------------------------- reductions */
typedef nx_status (*reduce_fn)(nx_tensor*, nx_tensor, const int64_t*, size_t, bool, nx_stream);

static nx_status reduce(const parity_case* c, const nx_tensor* x, nx_tensor* out, reduce_fn f) {
  int64_t axes[PARITY_MAX_IO];
  size_t n = meta_ints(c, "axes", axes, PARITY_MAX_IO);
  return f(&out[0], x[0], axes, n, meta_int(c, "keepdim") != 0, NULL);
}
static nx_status op_sum(const parity_case* c, const nx_tensor* x, nx_tensor* out) { return reduce(c, x, out, nx_sum); }
static nx_status op_mean(const parity_case* c, const nx_tensor* x, nx_tensor* out) { return reduce(c, x, out, nx_mean); }
static nx_status op_max(const parity_case* c, const nx_tensor* x, nx_tensor* out) { return reduce(c, x, out, nx_max); }
static nx_status op_min(const parity_case* c, const nx_tensor* x, nx_tensor* out) { return reduce(c, x, out, nx_min); }
static nx_status op_var(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  int64_t axes[PARITY_MAX_IO];
  size_t n = meta_ints(c, "axes", axes, PARITY_MAX_IO);
  return nx_var(&out[0], x[0], axes, n, meta_int(c, "correction"), meta_int(c, "keepdim") != 0, NULL);
}
static nx_status op_argmax(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  return nx_argmax(&out[0], x[0], meta_int(c, "axis"), meta_int(c, "keepdim") != 0, NULL);
}

/* ---------------------------------------------------------------- matmul, linear, softmax */
BINARY(matmul)
static nx_status op_linear(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  return nx_linear(&out[0], x[0], x[1], c->nin > 2 ? x[2] : NULL, NULL);
}
static nx_status op_softmax(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  return nx_softmax(&out[0], x[0], meta_int(c, "axis"), NULL);
}
static nx_status op_log_softmax(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  return nx_log_softmax(&out[0], x[0], meta_int(c, "axis"), NULL);
}

#define OP(NAME) {#NAME, op_##NAME, false}
const parity_op parity_math_ops[] = {
    OP(add), OP(sub), OP(mul), OP(div), OP(pow), OP(maximum), OP(minimum),
    OP(eq), OP(ne), OP(lt), OP(le), OP(gt), OP(ge),
    OP(neg), OP(abs), OP(exp), OP(log), OP(sqrt), OP(rsqrt), OP(sin), OP(cos), OP(tanh), OP(sinh),
    OP(cosh), OP(sigmoid), OP(relu), OP(leaky_relu), OP(gelu), OP(silu), OP(softplus), OP(mish),
    OP(clamp), OP(add_scalar), OP(mul_scalar), OP(pow_scalar), OP(where),
    OP(sum), OP(mean), OP(max), OP(min), OP(var), OP(argmax),
    OP(matmul), OP(linear), OP(softmax), OP(log_softmax),
    {NULL, NULL, false},
};
