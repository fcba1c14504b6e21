// Unary and binary elementwise ops, where and clamp: dtype promotion, broadcasting, dispatch,
// and each op's VJP (written with ops, hence differentiable again).
#include <cmath>
#include <cstring>
#include <iterator>

#include "ops/ops.hpp"

namespace nx {
namespace {

using Grads = std::vector<Tensor>;

// Kernel-level cast (not recorded): the op's own node accounts for it.
Tensor raw_cast(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  Tensor out = Tensor::empty(x.shape(), dtype, x.device());
  kernels(x.device()).copy(View::of(out), View::of(x));
  return out;
}

Tensor u(UnaryOp op, const Tensor& x, double p0 = 0) { return unary(op, x, p0); }

// d op(x) / dx * g, with ops.
Tensor unary_vjp(UnaryOp op, const Tensor& x, const Tensor& g, double p0, double p1) {
  switch (op) {
    case UnaryOp::Neg: return neg(g);
    case UnaryOp::Abs: return mul(g, u(UnaryOp::Sign, x));
    case UnaryOp::Exp: return mul(g, exp(x));
    case UnaryOp::Log: return div(g, x);
    case UnaryOp::Sqrt: return mul(g, mul_scalar(u(UnaryOp::Rsqrt, x), 0.5));
    case UnaryOp::Rsqrt: return mul(g, mul_scalar(pow_scalar(x, -1.5), -0.5));
    case UnaryOp::Sin: return mul(g, u(UnaryOp::Cos, x));
    case UnaryOp::Cos: return neg(mul(g, u(UnaryOp::Sin, x)));
    case UnaryOp::Tanh: return mul(g, add_scalar(neg(square(u(UnaryOp::Tanh, x))), 1.0));
    case UnaryOp::Sinh: return mul(g, u(UnaryOp::Cosh, x));
    case UnaryOp::Cosh: return mul(g, u(UnaryOp::Sinh, x));
    case UnaryOp::Sigmoid: {
      Tensor s = u(UnaryOp::Sigmoid, x);
      return mul(g, mul(s, add_scalar(neg(s), 1.0)));
    }
    case UnaryOp::Relu:  // g where x > 0 or x is NaN (like torch), 0 where x <= 0
      return where(binary(BinaryOp::Le, x, zeros_like(x)), zeros_like(g), g);
    case UnaryOp::LeakyRelu:
      return mul(g, add_scalar(mul_scalar(u(UnaryOp::Step, x), 1.0 - p0), p0));
    // one fused kernel each (BinaryOp::*Backward) instead of a dozen passes over memory
    case UnaryOp::Gelu: return binary(BinaryOp::GeluBackward, g, x);
    case UnaryOp::GeluTanh: return binary(BinaryOp::GeluTanhBackward, g, x);
    case UnaryOp::Silu: return binary(BinaryOp::SiluBackward, g, x);
    case UnaryOp::Softplus: {
      // torch: derivative 1 above the threshold 20, sigmoid(x) below
      Tensor s = u(UnaryOp::Sigmoid, x);
      return mul(g, where(binary(BinaryOp::Gt, x, full_like(x, 20.0)), full_like(x, 1.0), s));
    }
    case UnaryOp::Mish: {
      Tensor t = u(UnaryOp::Tanh, u(UnaryOp::Softplus, x));
      Tensor d = add(t, mul(mul(x, u(UnaryOp::Sigmoid, x)), add_scalar(neg(square(t)), 1.0)));
      return mul(g, d);
    }
    // The cone family. Where x = 1 the kink of |x - 1| gets sign(0) = 0, as torch.abs's gradient.
    case UnaryOp::Cone: return neg(mul(g, u(UnaryOp::Sign, add_scalar(x, -1.0))));
    case UnaryOp::ParabolicCone: return mul(g, add_scalar(mul_scalar(x, -2.0), 2.0));
    case UnaryOp::ParCon: {
      // -beta |d|^(beta - 1) sign(d), d = x - 1, in torch's order for 1 - d.abs().pow(beta): the
      // pow factor first, then sign(d), so that beta < 1 gives inf * 0 = NaN at d = 0 as torch does
      Tensor d = add_scalar(x, -1.0);
      Tensor slope = mul_scalar(pow_scalar(u(UnaryOp::Abs, d), p0 - 1.0), -p0);
      return mul(mul(g, slope), u(UnaryOp::Sign, d));
    }
    case UnaryOp::Clamp: {
      Tensor inside = binary(BinaryOp::Mul, cast(binary(BinaryOp::Ge, x, full_like(x, p0)), x.dtype()),
                             cast(binary(BinaryOp::Le, x, full_like(x, p1)), x.dtype()));
      return mul(g, inside);
    }
    case UnaryOp::AddScalar: return g;
    case UnaryOp::MulScalar: return mul_scalar(g, p0);
    case UnaryOp::PowScalar:
      if (p0 == 0.0) return zeros_like(g);
      return mul(g, mul_scalar(pow_scalar(x, p0 - 1.0), p0));
    case UnaryOp::Square: return mul(g, mul_scalar(x, 2.0));
    case UnaryOp::Reciprocal: return neg(div(g, square(x)));
    case UnaryOp::Erf: return mul(g, mul_scalar(exp(neg(square(x))), 1.1283791670955126));
    case UnaryOp::Sign: case UnaryOp::Step: return zeros_like(g);
  }
  return zeros_like(g);
}

// f''(x) of the activations whose gradient grad * f'(x) is a fused binary op, with ops: the
// x-gradient of that op (double backward). Computed in f32 for f16/bf16 x: its terms cancel, and
// a dozen half-precision roundings would leave few correct bits.
Tensor activation_second_derivative(BinaryOp op, const Tensor& x_in) {
  const Tensor x = cast_if_needed(x_in, compute_dtype(x_in.dtype()));
  switch (op) {
    case BinaryOp::GeluBackward: {  // phi(x) (2 - x^2)
      Tensor x2 = square(x);
      return mul(mul_scalar(exp(mul_scalar(x2, -0.5)), 0.3989422804014327), add_scalar(neg(x2), 2.0));
    }
    case BinaryOp::GeluTanhBackward: {
      // f = x (1 + t) / 2, t = tanh(u), u = c (x + k x^3):
      // f'' = (1 - t^2) (u' + 3 c k x^2 - x t u'^2), u' = c (1 + 3 k x^2)
      const double c = 0.7978845608028654, k = 0.044715;
      Tensor x2 = square(x);
      Tensor t = u(UnaryOp::Tanh, mul_scalar(add(x, mul_scalar(mul(x2, x), k)), c));
      Tensor du = mul_scalar(add_scalar(mul_scalar(x2, 3.0 * k), 1.0), c);
      Tensor inner = sub(add(du, mul_scalar(x2, 3.0 * c * k)), mul(mul(x, t), square(du)));
      return mul(add_scalar(neg(square(t)), 1.0), inner);
    }
    case BinaryOp::SiluBackward: {  // s (1 - s) (2 + x (1 - 2 s)), s = sigmoid(x)
      Tensor s = u(UnaryOp::Sigmoid, x);
      Tensor ds = mul(s, add_scalar(neg(s), 1.0));
      return mul(ds, add_scalar(mul(x, add_scalar(mul_scalar(s, -2.0), 1.0)), 2.0));
    }
    default: fail(NX_ERR_INTERNAL, "activation_second_derivative: ", op_name(op), " is no activation gradient");
  }
}

}  // namespace

// ---- the registry's facts per op code (core/op_enums.inc, generated from src/ops/ops.yaml)
namespace {
struct UnaryInfo { const char* name; const char* node; bool int_kernel; };
struct BinaryInfo { const char* name; const char* node; BinaryResult result; };
#define NX_UNARY_INFO(Enum, name, int_kernel) {name, #Enum "Backward", int_kernel},
constexpr UnaryInfo kUnary[] = {NX_UNARY_OPS(NX_UNARY_INFO)};
#undef NX_UNARY_INFO
#define NX_BINARY_INFO(Enum, name, result) {name, #Enum "Backward", BinaryResult::result},
constexpr BinaryInfo kBinary[] = {NX_BINARY_OPS(NX_BINARY_INFO)};
#undef NX_BINARY_INFO
}  // namespace

const char* op_name(UnaryOp op) { return kUnary[size_t(op)].name; }
const char* node_name(UnaryOp op) { return kUnary[size_t(op)].node; }
bool has_integer_kernel(UnaryOp op) { return kUnary[size_t(op)].int_kernel; }
bool unary_from_name(const char* name, UnaryOp* op) {
  for (size_t i = 0; i < std::size(kUnary); ++i)
    if (std::strcmp(kUnary[i].name, name) == 0) {
      *op = UnaryOp(i);
      return true;
    }
  return false;
}
const char* op_name(BinaryOp op) { return kBinary[size_t(op)].name; }
const char* node_name(BinaryOp op) { return kBinary[size_t(op)].node; }
BinaryResult binary_result(BinaryOp op) { return kBinary[size_t(op)].result; }

Tensor unary(UnaryOp op, const Tensor& x, double p0, double p1) {
  // PyTorch's result dtypes: integer inputs stay integer where the op has an integer kernel and
  // its scalars are whole numbers (x + 2, x ** 2, clamp(x, 0, 5)); bool becomes int64 for the
  // scalar arithmetic (True + 1 == 2) and f32 for the rest.
  auto whole = [](double v) { return std::isfinite(v) && v == std::floor(v); };
  const bool scalar_op = op == UnaryOp::AddScalar || op == UnaryOp::MulScalar || op == UnaryOp::Clamp;
  const bool whole_scalars = op == UnaryOp::PowScalar ? whole(p0) && p0 >= 0
                             : op == UnaryOp::Clamp   ? whole(p0) && whole(p1)
                             : scalar_op              ? whole(p0)
                                                      : true;
  DType out_dtype = x.dtype();
  if (!is_floating(out_dtype)) {
    if (!has_integer_kernel(op) || !whole_scalars || (out_dtype == DType::Bool && !scalar_op)) out_dtype = DType::F32;
    else if (out_dtype == DType::Bool) out_dtype = DType::I64;
  }
  // f16/bf16 run natively (the kernels compute in f32 registers); integers promoted to a float
  // result are converted first.
  Tensor xin = raw_cast(x, out_dtype);
  Tensor out = Tensor::empty(x.shape(), out_dtype, x.device());
  kernels(x.device()).unary(op, View::of(out), View::of(xin), p0, p1);
  if (!is_floating(out_dtype) || op == UnaryOp::Sign || op == UnaryOp::Step) return out;
  return record1(node_name(op), out, {x}, {x}, [op, p0, p1](const Grads& g, const Grads& s, const auto&) {
    Tensor gx = unary_vjp(op, s[0], g[0], p0, p1);
    return Grads{gx.dtype() == s[0].dtype() ? gx : cast(gx, s[0].dtype())};
  });
}

Tensor clamp(const Tensor& x, double lo, double hi) {
  if (!(lo <= hi))
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": lo must not exceed hi (got lo=", lo, ", hi=", hi, ")");
  return unary(UnaryOp::Clamp, x, lo, hi);
}

Tensor parcon(const Tensor& x, double beta) {
  if (!(std::isfinite(beta) && beta > 0))
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": beta must be finite and > 0 (got beta=", beta, ")");
  return unary(UnaryOp::ParCon, x, beta);
}

static Grads binary_vjp(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& g,
                        const std::vector<bool>& needs) {
  Tensor ga, gb;
  switch (op) {
    case BinaryOp::Add: ga = g; gb = g; break;
    case BinaryOp::Sub: ga = g; if (needs[1]) gb = neg(g); break;
    case BinaryOp::Mul: if (needs[0]) ga = mul(g, b); if (needs[1]) gb = mul(g, a); break;
    case BinaryOp::Div:
      if (needs[0]) ga = div(g, b);
      if (needs[1]) gb = neg(div(mul(g, a), square(b)));
      break;
    case BinaryOp::Pow:
      if (needs[0]) {
        // b a^(b-1), taken as 0 where b == 0 (as PyTorch does; 0^-1 would give 0 * inf = NaN)
        Tensor term = mul(g, mul(b, binary(BinaryOp::Pow, a, sub(b, full_like(b, 1.0)))));
        ga = where(binary(BinaryOp::Eq, b, zeros_like(b)), zeros_like(term), term);
      }
      if (needs[1]) {
        // d/db a^b = a^b log a, taken as 0 where a == 0 (as PyTorch does)
        Tensor term = mul(g, mul(binary(BinaryOp::Pow, a, b), log(a)));
        gb = where(binary(BinaryOp::Eq, a, zeros_like(a)), zeros_like(term), term);
      }
      break;
    case BinaryOp::Maximum: case BinaryOp::Minimum: {
      // ties share the gradient equally, like PyTorch
      BinaryOp wins = op == BinaryOp::Maximum ? BinaryOp::Gt : BinaryOp::Lt;
      DType dt = g.dtype();
      Tensor half = mul_scalar(cast(binary(BinaryOp::Eq, a, b), dt), 0.5);
      Tensor wa = add(cast(binary(wins, a, b), dt), half);
      Tensor wb = add(cast(binary(wins, b, a), dt), half);
      if (needs[0]) ga = mul(g, wa);
      if (needs[1]) gb = mul(g, wb);
      break;
    }
    case BinaryOp::AddRelu: case BinaryOp::AddGelu: case BinaryOp::AddGeluTanh: {
      UnaryOp act = op == BinaryOp::AddRelu ? UnaryOp::Relu : op == BinaryOp::AddGelu ? UnaryOp::Gelu : UnaryOp::GeluTanh;
      ga = gb = unary_vjp(act, add(a, b), g, 0, 0);
      break;
    }
    case BinaryOp::MulTanh: {
      Tensor t = unary(UnaryOp::Tanh, b);
      if (needs[0]) ga = mul(g, t);
      if (needs[1]) gb = mul(mul(g, a), add_scalar(neg(square(t)), 1.0));
      break;
    }
    case BinaryOp::SiluMul:  // d/da silu(a) b = b silu'(a); d/db = silu(a)
      if (needs[0]) ga = binary(BinaryOp::SiluBackward, mul(g, b), a);
      if (needs[1]) gb = mul(g, unary(UnaryOp::Silu, a));
      break;
    case BinaryOp::GeluBackward: case BinaryOp::GeluTanhBackward: case BinaryOp::SiluBackward:
      // a * f'(b) (a the gradient, b the activation's input): d/da = f'(b), this op again;
      // d/db = a f''(b)
      if (needs[0]) ga = binary(op, g, b);
      if (needs[1]) gb = mul(mul(g, a), activation_second_derivative(op, b));
      break;
    default: break;
  }
  Grads out(2);
  if (needs[0] && ga.defined()) out[0] = sum_to(ga.dtype() == a.dtype() ? ga : cast(ga, a.dtype()), a.shape());
  if (needs[1] && gb.defined()) out[1] = sum_to(gb.dtype() == b.dtype() ? gb : cast(gb, b.dtype()), b.shape());
  return out;
}

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  check_same_device(a, b, "a", "b");
  Shape shape = broadcast_shapes(a.shape(), b.shape());
  DType dt = promote(a.dtype(), b.dtype());
  if (binary_result(op) == BinaryResult::Float && !is_floating(dt)) dt = DType::F32;
  // bool arithmetic: + is logical or and * logical and (PyTorch's bool results); the others count in int64
  const bool bool_result = dt == DType::Bool && (op == BinaryOp::Add || op == BinaryOp::Mul ||
                                                  op == BinaryOp::Maximum || op == BinaryOp::Minimum);
  if (dt == DType::Bool && !is_comparison(op) && !bool_result) dt = DType::I64;
  // Floating operands go to the kernel as they are, f16/bf16 included, even of two dtypes
  // (bf16 + f32): the kernels convert while loading. Comparisons and integer results take
  // operands of one dtype.
  auto operand = [&](const Tensor& x) {
    return is_floating(dt) && is_floating(x.dtype()) && !is_comparison(op) ? x : raw_cast(x, dt);
  };
  Tensor ac = operand(a), bc = operand(b);
  Tensor out = Tensor::empty(shape, is_comparison(op) ? DType::Bool : dt, a.device());
  kernels(a.device()).binary(op, View::of(out), View::broadcast(ac, shape), View::broadcast(bc, shape));
  if (is_comparison(op) || !is_floating(dt)) return out;
  return record1(node_name(op), out, {a, b}, {a, b}, [op](const Grads& g, const Grads& s, const auto& needs) {
    return binary_vjp(op, s[0], s[1], g[0], needs);
  });
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_same_device(cond, a, "cond", "a");
  check_same_device(a, b, "a", "b");
  if (cond.dtype() != DType::Bool)
    fail(NX_ERR_DTYPE, current_api(), ": cond must be a bool tensor, got ", dtype_name(cond.dtype()));
  Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape()), b.shape());
  DType dt = promote(a.dtype(), b.dtype());
  Tensor ac = raw_cast(a, dt), bc = raw_cast(b, dt);
  Tensor out = Tensor::empty(shape, dt, a.device());
  kernels(a.device()).where(View::of(out), View::broadcast(cond, shape), View::broadcast(ac, shape),
                            View::broadcast(bc, shape));
  if (!is_floating(dt)) return out;
  return record1("WhereBackward", out, {cond, a, b}, {cond, a, b}, [](const Grads& g, const Grads& s, const auto& needs) {
    Grads r(3);
    Tensor z = zeros_like(g[0]);
    if (needs[1]) r[1] = sum_to(cast(where(s[0], g[0], z), s[1].dtype()), s[1].shape());
    if (needs[2]) r[2] = sum_to(cast(where(s[0], z, g[0]), s[2].dtype()), s[2].shape());
    return r;
  });
}

static void check_in_place(const Tensor& dst) {
  if (grad_enabled() && dst.requires_grad())
    fail(NX_ERR_STATE, current_api(), ": in-place op on a tensor that requires grad (shape ",
         shape_str(dst.shape()), "); autodiff cannot record it. Use the out-of-place op, or disable "
         "grad mode for parameter updates");
}

void binary_(BinaryOp op, const Tensor& dst, const Tensor& b) {
  check_same_device(dst, b, "x", "b");
  check_in_place(dst);
  check_in_place_layout(dst, "x");
  if (grad_enabled() && b.requires_grad())
    fail(NX_ERR_STATE, current_api(), ": in-place op with an operand that requires grad is not recorded by autodiff");
  if (broadcast_shapes(dst.shape(), b.shape()) != dst.shape())
    fail(NX_ERR_SHAPE, current_api(), ": operand of shape ", shape_str(b.shape()),
         " does not broadcast to the in-place target's shape ", shape_str(dst.shape()));
  // Straight into dst when it is contiguous, floating, keeps its dtype, and b lives in other
  // memory (an overlapping b could be read after the element it shares was written); otherwise
  // through a temporary.
  const bool direct = dst.is_contiguous() && is_floating(dst.dtype()) && is_floating(b.dtype()) &&
                      promote(dst.dtype(), b.dtype()) == dst.dtype() && !is_comparison(op) &&
                      b.impl()->storage != dst.impl()->storage;
  if (direct) {
    kernels(dst.device()).binary(op, View::of(dst), View::of(dst), View::broadcast(b, dst.shape()));
  } else {
    Tensor r;
    {
      GradModeGuard off(false);
      r = binary(op, dst, b);
    }
    check_in_place_dtype(r.dtype(), dst, "x");  // int_tensor.add_(float_tensor) is refused, as in PyTorch
    kernels(dst.device()).copy(View::of(dst), View::of(r));
  }
  dst.impl()->storage->version++;
}

void unary_(UnaryOp op, const Tensor& dst, double p0) {
  check_in_place(dst);
  check_in_place_layout(dst, "x");
  Tensor r;
  {
    GradModeGuard off(false);
    r = unary(op, dst, p0);
  }
  check_in_place_dtype(r.dtype(), dst, "x");  // an i32 tensor times 1.5 is an f32 result
  kernels(dst.device()).copy(View::of(dst), View::of(r));
  dst.impl()->storage->version++;
}

}  // namespace nx
