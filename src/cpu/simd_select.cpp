#include <cpuid.h>

#include <cstring>

#include "cpu/simd.hpp"

namespace nx::cpu {

// The avx2 build also converts f16 with F16C (-mf16c), CPUID leaf 1, ECX bit 29 (clang 14's
// __builtin_cpu_supports has no "f16c"). AVX-512F has the 512-bit conversions.
static bool has_avx2() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29));
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
}

static const SimdTable* detect() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return &simd_avx512;
  if (has_avx2()) return &simd_avx2;
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
  if (std::strcmp(name, "avx2") == 0 && has_avx2()) {
    current() = &simd_avx2;
    return true;
  }
  if (std::strcmp(name, "avx512") == 0 && __builtin_cpu_supports("avx512f")) {
    current() = &simd_avx512;
    return true;
  }
  return false;
}

void widen_run(const SimdTable& t, DType dt, float* dst, const void* src, int64_t n) {
  if (dt == DType::F16) t.widen_f16(dst, static_cast<const Half*>(src), n);
  else t.widen_bf16(dst, static_cast<const BFloat16*>(src), n);
}
void narrow_run(const SimdTable& t, DType dt, void* dst, const float* src, int64_t n) {
  if (dt == DType::F16) t.narrow_f16(static_cast<Half*>(dst), src, n);
  else t.narrow_bf16(static_cast<BFloat16*>(dst), src, n);
}

}  // namespace nx::cpu
