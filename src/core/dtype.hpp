// Element types: sizes, names, promotion, and f16/bf16 <-> f32 conversion (round to nearest even).
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

#include "nexus.h"

namespace nx {

enum class DType : int { F32 = NX_F32, F64 = NX_F64, F16 = NX_F16, BF16 = NX_BF16,
                         I32 = NX_I32, I64 = NX_I64, Bool = NX_BOOL,
                         I8 = NX_I8, F8E4M3 = NX_F8E4M3, F8E5M2 = NX_F8E5M2 };

size_t dtype_size(DType d);
const char* dtype_name(DType d);
bool is_valid_dtype(int d);
inline bool is_floating(DType d) {
  return d == DType::F32 || d == DType::F64 || d == DType::F16 || d == DType::BF16;
}
inline bool is_half(DType d) { return d == DType::F16 || d == DType::BF16; }
// The 8-bit dtypes hold data only (nexus.h): made, copied, cast, saved; no op computes on them.
inline bool is_storage_only(DType d) { return d == DType::I8 || d == DType::F8E4M3 || d == DType::F8E5M2; }
// PyTorch's promotion lattice restricted to our types.
DType promote(DType a, DType b);
// The dtype kernels compute in: f32 for the half types, itself otherwise.
inline DType compute_dtype(DType d) { return is_half(d) ? DType::F32 : d; }

struct Half { uint16_t bits; };
struct BFloat16 { uint16_t bits; };
struct Float8E4M3 { uint8_t bits; };
struct Float8E5M2 { uint8_t bits; };

// Refuses an 8-bit storage dtype in a kernel that computes: NX_ERR_DTYPE naming the running C
// function and the dtype, and saying to cast first.
[[noreturn]] void fail_storage_only(DType d);

// Calls f(T{}) with T the C++ storage type of d (Half/BFloat16 for the 16-bit floats). The dtypes
// kernels compute on; an 8-bit storage dtype fails (fail_storage_only), so no compute kernel can
// be reached with one.
template <class F>
void dispatch_dtype(DType d, F&& f) {
  switch (d) {
    case DType::F32: f(float{}); break;
    case DType::F64: f(double{}); break;
    case DType::F16: f(Half{}); break;
    case DType::BF16: f(BFloat16{}); break;
    case DType::I32: f(int32_t{}); break;
    case DType::I64: f(int64_t{}); break;
    case DType::Bool: f(bool{}); break;
    default: fail_storage_only(d);
  }
}
// Every dtype, the 8-bit storage ones included: for the kernels that only move or convert
// elements (copy and cast, fill, printing).
template <class F>
void dispatch_storage_dtype(DType d, F&& f) {
  switch (d) {
    case DType::I8: f(int8_t{}); break;
    case DType::F8E4M3: f(Float8E4M3{}); break;
    case DType::F8E5M2: f(Float8E5M2{}); break;
    default: dispatch_dtype(d, f);
  }
}

inline uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

inline float bf16_to_f32(uint16_t h) { return bits_f32(uint32_t(h) << 16); }
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

inline float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    if (man == 0) return bits_f32(sign);
    // subnormal: value = man * 2^-24
    float v = float(man) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}
inline uint16_t f32_to_f16(float f) {
  uint32_t u = f32_bits(f);
  uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u);            // NaN
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);           // overflow -> inf
  if (a < 0x38800000u) {                                           // subnormal or zero
    float v = bits_f32(a) * 16777216.0f;                            // scale by 2^24
    // round to nearest even integer count of 2^-24 units
    uint32_t m = uint32_t(v);
    float rem = v - float(m);
    if (rem > 0.5f || (rem == 0.5f && (m & 1u))) ++m;
    return uint16_t(sign | m);
  }
  uint32_t e = ((a >> 23) - 112u) << 10, man = (a >> 13) & 0x3ffu;
  uint32_t h = e | man, rest = a & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return uint16_t(sign | h);
}

// FP8 (OCP E4M3 "fn" and E5M2) <-> wider floats. Decoding is exact. Encoding rounds x once to
// the nearest value, ties to even, saturating at the largest finite value (448, 57344); E5M2 keeps
// infinities, E4M3 (which has none) saturates them; NaN becomes 0x7f, a NaN in both formats.
float f8_to_f32(uint8_t bits, DType d);
uint8_t f8_from_f64(double x, DType d);

}  // namespace nx
