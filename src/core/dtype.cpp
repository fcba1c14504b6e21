#include "core/dtype.hpp"

namespace nx {

size_t dtype_size(DType d) {
  switch (d) {
    case DType::F32: case DType::I32: return 4;
    case DType::F64: case DType::I64: return 8;
    case DType::F16: case DType::BF16: return 2;
    case DType::Bool: return 1;
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
  }
  return "invalid";
}

bool is_valid_dtype(int d) { return d >= NX_F32 && d <= NX_BOOL; }

static int rank_of(DType d) {
  switch (d) {
    case DType::Bool: return 0;
    case DType::I32: return 1;
    case DType::I64: return 2;
    case DType::F16: case DType::BF16: return 3;
    case DType::F32: return 4;
    case DType::F64: return 5;
  }
  return 0;
}

DType promote(DType a, DType b) {
  if (a == b) return a;
  if (is_half(a) && is_half(b)) return DType::F32;
  return rank_of(a) >= rank_of(b) ? a : b;
}

}  // namespace nx
