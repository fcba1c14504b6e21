#include "core/dtype.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace nx {

size_t dtype_size(DType d) {
  switch (d) {
    case DType::F32: case DType::I32: return 4;
    case DType::F64: case DType::I64: return 8;
    case DType::F16: case DType::BF16: return 2;
    case DType::Bool: case DType::I8: case DType::F8E4M3: case DType::F8E5M2: return 1;
  }
  return 0;
}

const char* dtype_name(DType d) {
  switch (d) {
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::Bool: return "bool";
    case DType::I8: return "i8";
    case DType::F8E4M3: return "f8e4m3";
    case DType::F8E5M2: return "f8e5m2";
  }
  return "invalid";
}

bool is_valid_dtype(int d) { return d >= NX_F32 && d <= NX_F8E5M2; }

void fail_storage_only(DType d) {
  if (!is_storage_only(d)) fail(NX_ERR_DTYPE, current_api(), ": invalid dtype ", int(d));
  fail(NX_ERR_DTYPE, current_api(), ": no kernel computes on ", dtype_name(d),
       " (an 8-bit storage dtype); cast it to a floating dtype first (nx_cast)");
}

namespace {
struct F8Format {
  int man_bits, bias;
  bool has_inf;
  double max_finite;
  uint8_t max_code;
};
F8Format f8_format(DType d) {
  if (d == DType::F8E4M3) return {3, 7, false, 448.0, 0x7e};
  return {2, 15, true, 57344.0, 0x7b};
}
}  // namespace

float f8_to_f32(uint8_t bits, DType d) {
  const F8Format f = f8_format(d);
  const bool negative = bits & 0x80u;
  const int field = (bits & 0x7f) >> f.man_bits, man = bits & ((1 << f.man_bits) - 1);
  const int top = (1 << (7 - f.man_bits)) - 1;  // the all-ones exponent field
  float v;
  if (f.has_inf && field == top) v = man == 0 ? INFINITY : NAN;
  else if (!f.has_inf && field == top && man == (1 << f.man_bits) - 1) v = NAN;
  else if (field == 0) v = std::ldexp(float(man), 1 - f.bias - f.man_bits);  // subnormal
  else v = std::ldexp(float((1 << f.man_bits) + man), field - f.bias - f.man_bits);
  return negative ? -v : v;
}

uint8_t f8_from_f64(double x, DType d) {
  const F8Format f = f8_format(d);
  if (std::isnan(x)) return 0x7f;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(x);
  if (std::isinf(a)) return uint8_t(sign | (f.has_inf ? 0x7c : f.max_code));
  if (a == 0.0) return sign;
  // The quantum at a's binade (never finer than the subnormals'); a / quantum is exact in a
  // double, and rounding it to an integer is the one rounding (ties to even: the default mode).
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1): a's binade is 2^(e - 1)
  const int min_exp = 1 - f.bias;
  const int quantum_exp = std::max(e - 1, min_exp) - f.man_bits;
  const double units = std::nearbyint(std::ldexp(a, -quantum_exp));
  const double r = std::ldexp(units, quantum_exp);
  if (r > f.max_finite) return uint8_t(sign | f.max_code);
  if (r == 0.0) return sign;
  std::frexp(r, &e);
  const int field = e - 1 + f.bias;
  if (field <= 0) return uint8_t(sign | int(std::ldexp(r, f.bias - 1 + f.man_bits)));  // subnormal
  const int man = int(std::ldexp(r, f.man_bits - (e - 1))) - (1 << f.man_bits);
  return uint8_t(sign | (field << f.man_bits) | man);
}

static int rank_of(DType d) {
  if (is_storage_only(d)) fail_storage_only(d);
  switch (d) {
    case DType::Bool: return 0;
    case DType::I32: return 1;
    case DType::I64: return 2;
    case DType::F16: case DType::BF16: return 3;
    case DType::F32: return 4;
    case DType::F64: return 5;
    default: return 0;
  }
}

DType promote(DType a, DType b) {
  if (is_storage_only(a)) fail_storage_only(a);
  if (is_storage_only(b)) fail_storage_only(b);
  if (a == b) return a;
  if (is_half(a) && is_half(b)) return DType::F32;
  return rank_of(a) >= rank_of(b) ? a : b;
}

}  // namespace nx
