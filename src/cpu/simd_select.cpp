#include <cstring>

#include "cpu/simd.hpp"

namespace nx::cpu {

static const SimdTable* detect() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return &simd_avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &simd_avx2;
  return &simd_scalar;
}

static const SimdTable*& current() {
  static const SimdTable* table = detect();
  return table;
}

const SimdTable& simd() { return *current(); }
const char* simd_level_name() { return simd().name; }

bool set_simd_level(const char* name) {
  __builtin_cpu_init();
  if (std::strcmp(name, "scalar") == 0) { current() = &simd_scalar; return true; }
  if (std::strcmp(name, "avx2") == 0 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    current() = &simd_avx2;
    return true;
  }
  if (std::strcmp(name, "avx512") == 0 && __builtin_cpu_supports("avx512f")) {
    current() = &simd_avx512;
    return true;
  }
  return false;
}

}  // namespace nx::cpu
