// avx512 build of the CPU kernels (target flags set in CMakeLists.txt).
#define NX_SIMD_NS isa_avx512
#define NX_SIMD_LABEL "avx512"
#define NX_SIMD_TABLE simd_avx512
#define NX_VEC_BYTES 64
#include "cpu/simd_kernels.inl"
