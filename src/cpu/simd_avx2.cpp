// avx2 build of the CPU kernels (target flags set in CMakeLists.txt).
#define NX_SIMD_NS isa_avx2
#define NX_SIMD_LABEL "avx2"
#define NX_SIMD_TABLE simd_avx2
#define NX_VEC_BYTES 32
#include "cpu/simd_kernels.inl"
