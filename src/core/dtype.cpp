#include "core/dtype.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/f8_codec.hpp"

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

float f8_to_f32(uint8_t bits, DType d) { return f8::decode(bits, d == DType::F8E4M3); }
uint8_t f8_from_f64(double x, DType d) { return f8::encode(x, d == DType::F8E4M3); }

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
