// Per-ISA kernel table. The same template source (simd_kernels.inl) is compiled three times:
// portable baseline ("scalar"), AVX2+FMA+F16C, AVX-512F; the table is chosen once at run time from
// CPUID, and can be overridden for tests (nx_cpu_set_simd_level).
#pragma once
#include <cstdint>

#include "core/backend.hpp"
#include "core/cpu_iface.hpp"

namespace nx::cpu {

// Flash attention's shape and options as plain data (the per-ISA files take no std::vector).
struct AttnArgs {
  int64_t batch, heads, kv_heads, tq, tk, dim;
  double scale;
  bool causal;
  const double* slopes;  // one per head, or null: no ALiBi
  // Element strides of k and v ([batch, kv head, key]; the last dimension is contiguous). Only the
  // one-query forward reads them (a KV cache's first positions, a strided view); every other path
  // takes contiguous k and v (cpu/attention.cpp checks).
  int64_t k_strides[3], v_strides[3];
};

// One Adam(W) step's constants for f32 parameters (cpu/fused.cpp's adam_multi): mode 0 no weight
// decay, 1 Adam's g += wd p, 2 AdamW's p *= decay; step = lr / bc1, then
// p -= step m / (sqrt(v) inv_sqrt_bc2 + eps).
struct AdamF32 {
  float b1, b2, eps, wd, decay, step, inv_sqrt_bc2;
  int mode;
};

// Strides are in elements. Inner loops: the caller walks the outer dimensions.
struct SimdTable {
  const char* name;
  void (*unary_f32)(UnaryOp, float* out, const float* x, int64_t sx, int64_t n, float p0, float p1);
  void (*unary_f64)(UnaryOp, double* out, const double* x, int64_t sx, int64_t n, double p0,
                    double p1);
  // arithmetic ops only (comparisons go through the generic path)
  void (*binary_f32)(BinaryOp, float* out, const float* a, int64_t sa, const float* b, int64_t sb,
                     int64_t n);
  void (*binary_f64)(BinaryOp, double* out, const double* a, int64_t sa, const double* b,
                     int64_t sb, int64_t n);
  double (*sum_f32)(const float* x, int64_t n);  // accumulates in blocks, combines in f64
  double (*sum_f64)(const double* x, int64_t n);
  void (*softmax_f32)(float* out, const float* x, int64_t n, bool log);
  void (*softmax_f64)(double* out, const double* x, int64_t n, bool log);
  // C[m,n] (row stride ldc) = A[m,k] @ B[k,n] with element strides (rsa, csa), (rsb, csb). f16/bf16
  // operands are widened to f32 as they are packed, summed in f32 and C rounded once.
  void (*gemm_f32)(float* c, int64_t ldc, const float* a, int64_t rsa, int64_t csa, const float* b,
                   int64_t rsb, int64_t csb, int64_t m, int64_t n, int64_t k);
  void (*gemm_f64)(double* c, int64_t ldc, const double* a, int64_t rsa, int64_t csa,
                   const double* b, int64_t rsb, int64_t csb, int64_t m, int64_t n, int64_t k);
  void (*gemm_f16)(Half* c, int64_t ldc, const Half* a, int64_t rsa, int64_t csa, const Half* b,
                   int64_t rsb, int64_t csb, int64_t m, int64_t n, int64_t k);
  void (*gemm_bf16)(BFloat16* c, int64_t ldc, const BFloat16* a, int64_t rsa, int64_t csa, const BFloat16* b,
                    int64_t rsb, int64_t csb, int64_t m, int64_t n, int64_t k);
  // flash attention on contiguous [B, H, T, D] tensors (src/cpu/attention_kernels.inl); the
  // log-sum-exp is f32 for f16/bf16 tensors
  void (*attn_forward_f32)(const AttnArgs&, const float* q, const float* k, const float* v, float* out, float* lse);
  void (*attn_forward_f64)(const AttnArgs&, const double* q, const double* k, const double* v, double* out,
                           double* lse);
  void (*attn_forward_f16)(const AttnArgs&, const Half* q, const Half* k, const Half* v, Half* out, float* lse);
  void (*attn_forward_bf16)(const AttnArgs&, const BFloat16* q, const BFloat16* k, const BFloat16* v, BFloat16* out,
                            float* lse);
  void (*attn_backward_f32)(const AttnArgs&, const float* q, const float* k, const float* v, const float* out,
                            const float* dout, const float* lse, float* dq, float* dk, float* dv);
  void (*attn_backward_f64)(const AttnArgs&, const double* q, const double* k, const double* v, const double* out,
                            const double* dout, const double* lse, double* dq, double* dk, double* dv);
  void (*attn_backward_f16)(const AttnArgs&, const Half* q, const Half* k, const Half* v, const Half* out,
                            const Half* dout, const float* lse, Half* dq, Half* dk, Half* dv);
  void (*attn_backward_bf16)(const AttnArgs&, const BFloat16* q, const BFloat16* k, const BFloat16* v,
                             const BFloat16* out, const BFloat16* dout, const float* lse, BFloat16* dq, BFloat16* dk,
                             BFloat16* dv);
  // n contiguous f16/bf16 elements widened to f32, or f32 elements rounded to f16/bf16 (to nearest
  // even): bit for bit what core's f16_to_f32, bf16_to_f32, f32_to_f16, f32_to_bf16 give
  // (core/dtype.hpp), NaN payloads included; the AVX2 and AVX-512 builds convert with the vector unit
  void (*widen_f16)(float* dst, const Half* src, int64_t n);
  void (*widen_bf16)(float* dst, const BFloat16* src, int64_t n);
  void (*narrow_f16)(Half* dst, const float* src, int64_t n);
  void (*narrow_bf16)(BFloat16* dst, const float* src, int64_t n);
  // Cross-entropy's f32 rows (cpu/fused.cpp): the sum over j of exp(x[j] - shift), exp in f32,
  // blocks of 1024 summed in f32 and combined in f64; and out[j] = scale * exp(x[j] - shift).
  double (*sum_exp_f32)(const float* x, int64_t n, float shift);
  void (*scale_exp_f32)(float* out, const float* x, int64_t n, float shift, float scale);
  // The largest of n f32 elements, NaNs skipped (std::max(m, x[i]) folded from -inf: exact).
  float (*max_f32)(const float* x, int64_t n);
  // The sum of x[i]^2 in f64 over 8 interleaved lanes (lane j takes i = j mod 8) folded pairwise:
  // each square is exact in f64, so every ISA gives the same bits (gradient clipping's norm).
  double (*sumsq_f32)(const float* x, int64_t n);
  // One Adam(W) step over n contiguous f32 parameters and their moments.
  void (*adam_f32)(float* p, float* m, float* v, const float* g, int64_t n, const AdamF32& a);
};

extern const SimdTable simd_scalar;
extern const SimdTable simd_avx2;
extern const SimdTable simd_avx512;

const SimdTable& simd();  // set_simd_level: core/cpu_iface.hpp

// n contiguous elements of an f16 or bf16 tensor (dtype dt) widened into dst, or dst's elements
// rounded from src, through t's run conversions. Defined in simd_select.cpp (baseline flags), not
// inline here: an ISA file must not emit a copy of them (the ODR note in simd_kernels.inl).
void widen_run(const SimdTable& t, DType dt, float* dst, const void* src, int64_t n);
void narrow_run(const SimdTable& t, DType dt, void* dst, const float* src, int64_t n);

}  // namespace nx::cpu
