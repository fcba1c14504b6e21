// The FP8 codec (OCP E4M3 "fn" and E5M2), one copy for the host and the device: the CPU's casts
// (core/dtype.cpp), the CUDA cast kernels and the 8-bit KV-cache kernels all call these, so a
// CUDA cast gives the CPU's byte. Decoding is exact. Encoding rounds once from a double to the
// nearest value, ties to even, saturating at the largest finite value (448, 57344); E5M2 keeps
// infinities, E4M3 (which has none) saturates them; NaN becomes 0x7f, a NaN in both formats.
#pragma once
#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define NX_F8_HD __host__ __device__
#else
#define NX_F8_HD
#endif

namespace nx::f8 {

struct Format {
  int man_bits, bias;
  bool has_inf;
  double max_finite;
  uint8_t max_code;
};
NX_F8_HD inline Format format(bool e4m3) {
  return e4m3 ? Format{3, 7, false, 448.0, 0x7e} : Format{2, 15, true, 57344.0, 0x7b};
}

NX_F8_HD inline float decode(uint8_t bits, bool e4m3) {
  const Format f = format(e4m3);
  const bool negative = bits & 0x80u;
  const int field = (bits & 0x7f) >> f.man_bits, man = bits & ((1 << f.man_bits) - 1);
  const int top = (1 << (7 - f.man_bits)) - 1;  // the all-ones exponent field
  float v;
  if (f.has_inf && field == top) v = man == 0 ? INFINITY : NAN;
  else if (!f.has_inf && field == top && man == (1 << f.man_bits) - 1) v = NAN;
  else if (field == 0) v = ldexpf(float(man), 1 - f.bias - f.man_bits);  // subnormal
  else v = ldexpf(float((1 << f.man_bits) + man), field - f.bias - f.man_bits);
  return negative ? -v : v;
}

NX_F8_HD inline uint8_t encode(double x, bool e4m3) {
  const Format f = format(e4m3);
  if (isnan(x)) return 0x7f;
  const uint8_t sign = signbit(x) ? 0x80 : 0;
  const double a = fabs(x);
  if (isinf(a)) return uint8_t(sign | (f.has_inf ? 0x7c : f.max_code));
  if (a == 0.0) return sign;
  // The quantum at a's binade (never finer than the subnormals'); a / quantum is exact in a
  // double, and rounding it to an integer is the one rounding (rint: ties to even).
  int e = 0;
  frexp(a, &e);  // a = m * 2^e, m in [0.5, 1): a's binade is 2^(e - 1)
  const int min_exp = 1 - f.bias;
  const int quantum_exp = (e - 1 > min_exp ? e - 1 : min_exp) - f.man_bits;
  const double units = rint(ldexp(a, -quantum_exp));
  const double r = ldexp(units, quantum_exp);
  if (r > f.max_finite) return uint8_t(sign | f.max_code);
  if (r == 0.0) return sign;
  frexp(r, &e);
  const int field = e - 1 + f.bias;
  if (field <= 0) return uint8_t(sign | int(ldexp(r, f.bias - 1 + f.man_bits)));  // subnormal
  const int man = int(ldexp(r, f.man_bits - (e - 1))) - (1 << f.man_bits);
  return uint8_t(sign | (field << f.man_bits) | man);
}

}  // namespace nx::f8

namespace nx::q8 {
// The 8-bit quantizer's arithmetic, shared by the CPU and CUDA kernels so both give the same bytes
// (ops.yaml, kernel quantize_rows_8bit). kind: 0 I8, 1 F8E4M3, 2 F8E5M2.
NX_F8_HD inline float qmax(int kind) { return kind == 0 ? 127.f : (kind == 1 ? 448.f : 57344.f); }
// The scale of a row of absolute maximum absmax: absmax / qmax, 1 where that is not positive (an
// all-zero row, or a maximum so small the quotient underflows).
NX_F8_HD inline float row_scale(float absmax, int kind) {
  const float s = absmax / qmax(kind);
  return s > 0.f ? s : 1.f;
}
// The code of x / scale (the f32 quotient): I8 rounds to nearest even and clamps to [-127, 127]
// (NaN gives 0); FP8 rounds once, saturating (f8::encode).
NX_F8_HD inline uint8_t encode(float quotient, int kind) {
  if (kind != 0) return f8::encode(double(quotient), kind == 1);
  if (isnan(quotient)) return 0;
  const float r = fminf(fmaxf(rintf(quotient), -127.f), 127.f);
  return uint8_t(int8_t(r));
}
}  // namespace nx::q8
