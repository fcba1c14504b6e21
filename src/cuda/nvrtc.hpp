// Kernels compiled at run time with NVRTC (the generated fused kernels, fused_codegen.cpp).
// NVRTC is opened with dlopen on first use, not linked: an embedding program that never fuses
// never loads it, and a machine without it runs the interpreter kernel instead. Compiled cubins
// are cached on disk, keyed by the source, the embedded headers, the
// options, NVRTC's version and the GPU architecture, so a second run of a program skips NVRTC.
//
// Disk cache: $NEXUS_KERNEL_CACHE if set (an empty value or "off" turns it off), else
// $XDG_CACHE_HOME/nexusgrad/kernels, else ~/.cache/nexusgrad/kernels. Files are written
// atomically (core/atomic_file.hpp) and checked on load (a second hash of the key, the size, a hash
// of the cubin); a
// damaged or foreign file is compiled again and replaced. Each entry is one small cubin (tens of
// KB); nothing evicts them (delete the folder to clear it).
#pragma once
#include <cstdint>
#include <string>

namespace nx::cuda {

struct EmbeddedHeader {
  const char* name;  // as written in an #include
  const char* text;
};
extern const EmbeddedHeader kEmbeddedHeaders[];
extern const int kEmbeddedHeaderCount;

struct RuntimeCompileStats {
  int64_t compiled = 0;    // NVRTC compilations
  int64_t disk_hits = 0;   // cubins read from the disk cache instead
  int64_t failures = 0;    // compilations or loads that failed (the caller fell back)
  std::string last_error;  // the latest failure, or why NVRTC is unavailable
};
RuntimeCompileStats runtime_compile_stats();

// Whether NVRTC could be opened; why not in *why otherwise.
bool nvrtc_available(std::string* why = nullptr);

// A cubin of source for sm_<arch> (e.g. 90), from the disk cache or compiled (and then stored).
// Throws NX_ERR_DEVICE with NVRTC's log when the source does not compile or NVRTC is missing.
// Needs no GPU: the tests compile every generated kernel on CI's CPU-only machine.
std::string compile_cubin(const std::string& source, int arch, bool* from_disk = nullptr);

// The kernel `name` of source, compiled (or read from the disk cache) and loaded on device: a
// cudaKernel_t, launched with cudaLaunchKernel; nullptr when that fails (the reason goes to
// runtime_compile_stats()). Each call loads a library, so callers keep what they get
// (generated_kernel, fused_codegen.cpp, keeps one per program structure, failures included).
const void* runtime_kernel(int device, const std::string& source, const char* name);

}  // namespace nx::cuda
