// Generated kernels for fused elementwise chains (core/fused_program.hpp): each program becomes a
// straight-line CUDA kernel (its ops, wiring, dtypes, rank and contiguity written out), compiled
// by NVRTC (nvrtc.hpp) and run instead of the interpreter kernel of elementwise.cu, which decodes
// every instruction of every element. Each op is float_ops.cuh's expression, its result rounded
// to its tensor's dtype, compiled without FMA contraction as the eager kernels are (so no FMA
// joins two ops), and a generated kernel gives the unfused ops' bits. NEXUS_FUSE_CODEGEN=0 keeps
// the interpreter.
#pragma once
#include <string>

#include "core/fused_program.hpp"

namespace nx::cuda {

// The kernel's source; programs that differ only in addresses, sizes, non-zero strides and
// scalar parameters share it (those travel in FusedKernelArgs).
std::string fused_kernel_source(const FusedProgram& program);
FusedKernelArgs fused_kernel_args(const FusedProgram& program);

// fused_codegen_enabled (NEXUS_FUSE_CODEGEN is not 0, and NVRTC opens) and fused_prepare are
// declared in core/cuda_iface.hpp, for the compiler.
// The program's kernel on device (a cudaKernel_t for cudaLaunchKernel, with one FusedKernelArgs
// argument and kFusedThreads threads a block), compiled on first use; nullptr when there is none
// and the caller runs the interpreter.
constexpr int kFusedThreads = 256;
const void* generated_kernel(int device, const FusedProgram& program);

}  // namespace nx::cuda
