// What the rest of the engine (the C API) needs from the CPU backend beyond the kernel interface;
// src/cpu implements it. Like core/cuda_iface.hpp, it keeps callers out of the backend's headers.
#pragma once

namespace nx::cpu {

const char* simd_level_name();          // "scalar", "avx2" or "avx512": the kernels in use
bool set_simd_level(const char* name);  // false when the processor lacks the level

}  // namespace nx::cpu
