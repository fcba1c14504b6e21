// scalar build of the CPU kernels (target flags set in CMakeLists.txt).
#define NX_SIMD_NS isa_scalar
#define NX_SIMD_LABEL "scalar"
#define NX_SIMD_TABLE simd_scalar
#define NX_VEC_BYTES 16
#include "cpu/simd_kernels.inl"
