// The per-element math of the floating elementwise ops, in one place. The eager CUDA kernels
// (elementwise.cu) compute every f32/f64 element with it (f16/bf16 in f32 registers), and the
// fused kernels generated at run time (fused_codegen.cpp) are compiled by NVRTC with this very
// text, so a generated kernel computes each op with the expression the eager kernel compiled and,
// under the same compiler flags, gives its bits. Self-contained for that reason: no standard or
// toolkit headers, only the op enums and the CUDA math functions NVRTC provides built in.
#pragma once
#include "core/op_enums.hpp"

namespace nx {

template <class T>
__device__ __forceinline__ T gelu_derivative(T x) {
  T cdf = T(0.5) * (T(1) + erf(x * T(0.70710678118654752440)));
  T pdf = T(0.39894228040143267794) * exp(T(-0.5) * x * x);
  return cdf + x * pdf;
}
template <class T>
__device__ __forceinline__ T gelu_tanh_derivative(T x) {
  const T beta = T(0.79788456080286535588), kappa = T(0.044715);
  T t = tanh(beta * (x + kappa * x * x * x));
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * beta * (T(1) + T(3) * kappa * x * x);
}
template <class T>
__device__ __forceinline__ T silu_derivative(T x) {
  T s = T(1) / (T(1) + exp(-x));
  return s * (T(1) + x * (T(1) - s));
}

// T is float or double. NaN passes through relu, clamp, maximum and minimum as torch's do.
template <class T>
__device__ __forceinline__ T float_unary(UnaryOp op, T x, T p0, T p1) {
  switch (op) {
    case UnaryOp::Neg: return -x;
    case UnaryOp::Abs: return x < T(0) ? -x : x;
    case UnaryOp::Relu: return x <= T(0) ? T(0) : x;
    case UnaryOp::Clamp: return x < p0 ? p0 : (x > p1 ? p1 : x);
    case UnaryOp::AddScalar: return x + p0;
    case UnaryOp::MulScalar: return x * p0;
    case UnaryOp::Square: return x * x;
    case UnaryOp::Sign: return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0));
    case UnaryOp::Step: return x > T(0) ? T(1) : T(0);
    case UnaryOp::Exp: return exp(x);
    case UnaryOp::Log: return log(x);
    case UnaryOp::Sqrt: return sqrt(x);
    case UnaryOp::Rsqrt: return T(1) / sqrt(x);
    case UnaryOp::Sin: return sin(x);
    case UnaryOp::Cos: return cos(x);
    case UnaryOp::Tanh: return tanh(x);
    case UnaryOp::Sinh: return sinh(x);
    case UnaryOp::Cosh: return cosh(x);
    case UnaryOp::Sigmoid: return T(1) / (T(1) + exp(-x));
    case UnaryOp::LeakyRelu: return x > T(0) ? x : x * p0;
    case UnaryOp::Gelu: return T(0.5) * x * (T(1) + erf(x * T(0.70710678118654752440)));
    case UnaryOp::GeluTanh: {
      T inner = T(0.79788456080286535588) * (x + T(0.044715) * x * x * x);
      return T(0.5) * x * (T(1) + tanh(inner));
    }
    case UnaryOp::Silu: return x / (T(1) + exp(-x));
    case UnaryOp::Softplus: return x > T(20) ? x : log1p(exp(x));
    case UnaryOp::Mish: {
      T sp = x > T(20) ? x : log1p(exp(x));
      return x * tanh(sp);
    }
    case UnaryOp::Cone: return T(1) - fabs(x - T(1));
    case UnaryOp::ParabolicCone: return x * (T(2) - x);
    case UnaryOp::ParCon: return T(1) - pow(fabs(x - T(1)), p0);
    case UnaryOp::PowScalar: return pow(x, p0);
    case UnaryOp::Reciprocal: return T(1) / x;
    case UnaryOp::Erf: return erf(x);
    default: return T(0);
  }
}

template <class T>
__device__ __forceinline__ T float_binary(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::Add: return a + b;
    case BinaryOp::Sub: return a - b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div: return a / b;
    case BinaryOp::Pow: return pow(a, b);
    case BinaryOp::Maximum: return a != a ? a : (b != b ? b : (a > b ? a : b));
    case BinaryOp::Minimum: return a != a ? a : (b != b ? b : (a < b ? a : b));
    case BinaryOp::AddRelu: { T s = a + b; return s <= T(0) ? T(0) : s; }
    case BinaryOp::AddGelu: { T s = a + b; return T(0.5) * s * (T(1) + erf(s * T(0.70710678118654752440))); }
    case BinaryOp::AddGeluTanh: {
      T s = a + b, inner = T(0.79788456080286535588) * (s + T(0.044715) * s * s * s);
      return T(0.5) * s * (T(1) + tanh(inner));
    }
    case BinaryOp::MulTanh: return a * tanh(b);
    case BinaryOp::SiluMul: return a / (T(1) + exp(-a)) * b;
    case BinaryOp::GeluBackward: return a * gelu_derivative(b);
    case BinaryOp::GeluTanhBackward: return a * gelu_tanh_derivative(b);
    case BinaryOp::SiluBackward: return a * silu_derivative(b);
    default: return T(0);
  }
}

}  // namespace nx
