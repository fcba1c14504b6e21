// Building blocks of the fused kernels generated at run time (fused_codegen.cpp writes a kernel
// that includes this header; NVRTC compiles it, never nvcc, with --fmad=false as elementwise.cu).
// Loads widen f16/bf16 to f32, stores narrow with the conversion instructions the eager kernels'
// __float2bfloat16_rn and __float2half_rn compile to on sm_80+, so a stored element has eager's
// bits.
#pragma once
#include "core/fused_args.hpp"
#include "cuda/float_ops.cuh"

namespace nx::gen {

__device__ __forceinline__ float widen_bf16(unsigned short h) { return __uint_as_float(unsigned(h) << 16); }
__device__ __forceinline__ float widen_f16(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ unsigned short narrow_bf16(float v) {
  unsigned short h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
  return h;
}
__device__ __forceinline__ unsigned short narrow_f16(float v) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
  return h;
}
// An op's result rounded to its tensor's dtype, as a store and a reload would.
__device__ __forceinline__ float round_f32(float v) { return v; }
__device__ __forceinline__ float round_bf16(float v) { return widen_bf16(narrow_bf16(v)); }
__device__ __forceinline__ float round_f16(float v) { return widen_f16(narrow_f16(v)); }

template <class I> __device__ __forceinline__ float load_f32(const void* p, I i) { return static_cast<const float*>(p)[i]; }
template <class I> __device__ __forceinline__ float load_bf16(const void* p, I i) {
  return widen_bf16(static_cast<const unsigned short*>(p)[i]);
}
template <class I> __device__ __forceinline__ float load_f16(const void* p, I i) {
  return widen_f16(static_cast<const unsigned short*>(p)[i]);
}
template <class I> __device__ __forceinline__ void store_f32(void* p, I i, float v) { static_cast<float*>(p)[i] = v; }
template <class I> __device__ __forceinline__ void store_bf16(void* p, I i, float v) {
  static_cast<unsigned short*>(p)[i] = narrow_bf16(v);
}
template <class I> __device__ __forceinline__ void store_f16(void* p, I i, float v) {
  static_cast<unsigned short*>(p)[i] = narrow_f16(v);
}

// Four consecutive elements in one access (16 bytes of f32, 8 of f16/bf16); v counts groups of 4.
struct alignas(16) Floats4 { float v[4]; };
struct alignas(8) Halves4 { unsigned short v[4]; };
__device__ __forceinline__ void load4_f32(const void* p, long long v, float (&x)[4]) {
  const Floats4 q = static_cast<const Floats4*>(p)[v];
  for (int j = 0; j < 4; ++j) x[j] = q.v[j];
}
__device__ __forceinline__ void load4_bf16(const void* p, long long v, float (&x)[4]) {
  const Halves4 q = static_cast<const Halves4*>(p)[v];
  for (int j = 0; j < 4; ++j) x[j] = widen_bf16(q.v[j]);
}
__device__ __forceinline__ void load4_f16(const void* p, long long v, float (&x)[4]) {
  const Halves4 q = static_cast<const Halves4*>(p)[v];
  for (int j = 0; j < 4; ++j) x[j] = widen_f16(q.v[j]);
}
__device__ __forceinline__ void store4_f32(void* p, long long v, const float (&y)[4]) {
  Floats4 q;
  for (int j = 0; j < 4; ++j) q.v[j] = y[j];
  static_cast<Floats4*>(p)[v] = q;
}
__device__ __forceinline__ void store4_bf16(void* p, long long v, const float (&y)[4]) {
  Halves4 q;
  for (int j = 0; j < 4; ++j) q.v[j] = narrow_bf16(y[j]);
  static_cast<Halves4*>(p)[v] = q;
}
__device__ __forceinline__ void store4_f16(void* p, long long v, const float (&y)[4]) {
  Halves4 q;
  for (int j = 0; j < 4; ++j) q.v[j] = narrow_f16(y[j]);
  static_cast<Halves4*>(p)[v] = q;
}

}  // namespace nx::gen
