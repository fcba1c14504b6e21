#include "cuda/nvrtc.hpp"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nvrtc.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <vector>

#include "core/atomic_file.hpp"
#include "core/error.hpp"

namespace nx::cuda {
namespace {

// The NVRTC entry points the engine uses, resolved from the shared library.
struct Nvrtc {
  void* lib = nullptr;
  std::string why;  // when lib is null
  decltype(&nvrtcCreateProgram) create = nullptr;
  decltype(&nvrtcCompileProgram) compile = nullptr;
  decltype(&nvrtcGetProgramLogSize) log_size = nullptr;
  decltype(&nvrtcGetProgramLog) log = nullptr;
  decltype(&nvrtcGetCUBINSize) cubin_size = nullptr;
  decltype(&nvrtcGetCUBIN) cubin = nullptr;
  decltype(&nvrtcDestroyProgram) destroy = nullptr;
  decltype(&nvrtcGetErrorString) error_string = nullptr;
  decltype(&nvrtcVersion) version = nullptr;
  int major = 0, minor = 0;
};

template <class F>
bool resolve(Nvrtc& n, F& f, const char* symbol) {
  f = reinterpret_cast<F>(dlsym(n.lib, symbol));
  if (!f) n.why = cat("libnvrtc has no ", symbol);
  return f != nullptr;
}

// $NEXUS_NVRTC_LIBRARY, then the loader's search path (sonames of this CUDA major, of the
// previous one, the unversioned name), then the toolkit this library was built against.
Nvrtc open_nvrtc() {
  Nvrtc n;
  std::vector<std::string> names;
  if (const char* env = std::getenv("NEXUS_NVRTC_LIBRARY"); env && *env) names.push_back(env);
  names.push_back("libnvrtc.so." + std::to_string(CUDART_VERSION / 1000));
  names.push_back("libnvrtc.so." + std::to_string(CUDART_VERSION / 1000 - 1));
  names.push_back("libnvrtc.so");
#ifdef NEXUS_NVRTC_FALLBACK
  names.push_back(NEXUS_NVRTC_FALLBACK);
#endif
  for (const std::string& name : names)
    if ((n.lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL))) break;
  if (!n.lib) {
    n.why = "libnvrtc could not be opened (tried " + names.front() + " and " + std::to_string(names.size() - 1) +
            " other names; set NEXUS_NVRTC_LIBRARY)";
    return n;
  }
  const bool ok = resolve(n, n.create, "nvrtcCreateProgram") && resolve(n, n.compile, "nvrtcCompileProgram") &&
                  resolve(n, n.log_size, "nvrtcGetProgramLogSize") && resolve(n, n.log, "nvrtcGetProgramLog") &&
                  resolve(n, n.cubin_size, "nvrtcGetCUBINSize") && resolve(n, n.cubin, "nvrtcGetCUBIN") &&
                  resolve(n, n.destroy, "nvrtcDestroyProgram") && resolve(n, n.error_string, "nvrtcGetErrorString") &&
                  resolve(n, n.version, "nvrtcVersion");
  if (!ok || n.version(&n.major, &n.minor) != NVRTC_SUCCESS) {
    if (n.why.empty()) n.why = "nvrtcVersion failed";
    dlclose(n.lib);
    n.lib = nullptr;
  }
  return n;
}

const Nvrtc& nvrtc() {
  static const Nvrtc n = open_nvrtc();
  return n;
}

std::mutex g_mutex;  // guards the statistics
RuntimeCompileStats g_stats;

// The flags elementwise.cu is compiled with (CMakeLists.txt): no FMA contraction, IEEE division
// and square root, no flush to zero, so that a generated kernel computes each op as the eager
// kernel does.
std::vector<std::string> options(int arch) {
  return {"--std=c++17", "--gpu-architecture=sm_" + std::to_string(arch), "--fmad=false", "--ftz=false",
          "--prec-div=true", "--prec-sqrt=true"};
}

uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}
// Two independent 64-bit hashes of everything a cubin depends on: the first names the cache
// file, the second is stored in it and checked on load.
std::pair<uint64_t, uint64_t> cache_key(const std::string& source, int arch) {
  std::string key = source;
  for (int i = 0; i < kEmbeddedHeaderCount; ++i) (key += '\0') += kEmbeddedHeaders[i].text;
  for (const std::string& o : options(arch)) (key += '\0') += o;
  key += cat('\0', "nvrtc ", nvrtc().major, '.', nvrtc().minor);
  return {fnv1a(14695981039346656037ull, key.data(), key.size()), fnv1a(0x9e3779b97f4a7c15ull, key.data(), key.size())};
}

std::string cache_dir() {
  if (const char* env = std::getenv("NEXUS_KERNEL_CACHE")) return std::strcmp(env, "off") == 0 ? "" : env;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/nexusgrad/kernels";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/nexusgrad/kernels";
  return "";
}

// A cache file: magic, the key's second hash, the cubin's size and its hash, the cubin.
constexpr char kMagic[8] = {'N', 'X', 'C', 'U', 'B', 'I', 'N', '1'};
uint64_t content_hash(const std::string& bytes) { return fnv1a(14695981039346656037ull, bytes.data(), bytes.size()); }

std::string read_cached(const std::string& path, uint64_t check) {
  std::ifstream f(path, std::ios::binary);
  char magic[8];
  uint64_t stored = 0, size = 0, hash = 0;
  if (!f.read(magic, 8) || std::memcmp(magic, kMagic, 8) != 0) return "";
  if (!f.read(reinterpret_cast<char*>(&stored), 8) || stored != check) return "";
  if (!f.read(reinterpret_cast<char*>(&size), 8) || size == 0 || size > (uint64_t(1) << 30)) return "";
  if (!f.read(reinterpret_cast<char*>(&hash), 8)) return "";
  std::string cubin(size_t(size), '\0');
  if (!f.read(cubin.data(), std::streamsize(size)) || f.peek() != EOF || content_hash(cubin) != hash) return "";
  return cubin;
}

void write_cached(const std::string& dir, const std::string& path, uint64_t check, const std::string& cubin) {
  try {
    std::filesystem::create_directories(dir);
    AtomicFile f(path);
    const uint64_t size = cubin.size(), hash = content_hash(cubin);
    f.write(kMagic, 8);
    f.write(&check, 8);
    f.write(&size, 8);
    f.write(&hash, 8);
    f.write(cubin);
    f.commit();
  } catch (const std::exception&) {
    // An unwritable cache only costs the next run a compilation.
  }
}

std::string nvrtc_compile(const std::string& source, int arch) {
  const Nvrtc& n = nvrtc();
  if (!n.lib) fail(NX_ERR_DEVICE, "NVRTC: ", n.why);
  std::vector<const char*> names, texts;
  for (int i = 0; i < kEmbeddedHeaderCount; ++i) {
    names.push_back(kEmbeddedHeaders[i].name);
    texts.push_back(kEmbeddedHeaders[i].text);
  }
  nvrtcProgram prog = nullptr;
  nvrtcResult r = n.create(&prog, source.c_str(), "nexus_fused.cu", int(names.size()), texts.data(), names.data());
  if (r != NVRTC_SUCCESS) fail(NX_ERR_DEVICE, "nvrtcCreateProgram: ", n.error_string(r));
  const std::vector<std::string> opts = options(arch);
  std::vector<const char*> argv;
  for (const std::string& o : opts) argv.push_back(o.c_str());
  r = n.compile(prog, int(argv.size()), argv.data());
  std::string log;
  size_t log_size = 0;
  if (n.log_size(prog, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    log.resize(log_size);
    n.log(prog, log.data());
    log.resize(log_size - 1);
  }
  std::string cubin;
  size_t size = 0;
  if (r == NVRTC_SUCCESS && n.cubin_size(prog, &size) == NVRTC_SUCCESS) {
    cubin.resize(size);
    r = n.cubin(prog, cubin.data());
  }
  n.destroy(&prog);
  if (r != NVRTC_SUCCESS || cubin.empty())
    fail(NX_ERR_DEVICE, "NVRTC ", n.major, '.', n.minor, " could not compile a generated kernel for sm_", arch, ": ",
         n.error_string(r), "\n", log, "\nsource:\n", source);
  return cubin;
}

}  // namespace

RuntimeCompileStats runtime_compile_stats() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_stats;
}

bool nvrtc_available(std::string* why) {
  if (why) *why = nvrtc().why;
  return nvrtc().lib != nullptr;
}

std::string compile_cubin(const std::string& source, int arch, bool* from_disk) {
  if (from_disk) *from_disk = false;
  if (!nvrtc().lib) fail(NX_ERR_DEVICE, "NVRTC: ", nvrtc().why);
  const auto [name, check] = cache_key(source, arch);
  const std::string dir = cache_dir();
  char file[32];
  std::snprintf(file, sizeof file, "%016llx.cubin", static_cast<unsigned long long>(name));
  const std::string path = dir.empty() ? "" : dir + "/" + file;
  if (!path.empty()) {
    std::string cubin = read_cached(path, check);
    if (!cubin.empty()) {
      if (from_disk) *from_disk = true;
      std::lock_guard<std::mutex> lock(g_mutex);
      g_stats.disk_hits++;
      return cubin;
    }
  }
  std::string cubin = nvrtc_compile(source, arch);
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_stats.compiled++;
  }
  if (!path.empty()) write_cached(dir, path, check, cubin);
  return cubin;
}

const void* runtime_kernel(int device, const std::string& source, const char* name) {
  const void* kernel = nullptr;
  try {
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess)
      fail(NX_ERR_DEVICE, "no compute capability for device ", device);
    const std::string cubin = compile_cubin(source, major * 10 + minor);
    cudaLibrary_t library = nullptr;
    cudaKernel_t k = nullptr;
    cudaError_t e = cudaLibraryLoadData(&library, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0);
    if (e == cudaSuccess) e = cudaLibraryGetKernel(&k, library, name);
    if (e != cudaSuccess) fail(NX_ERR_CUDA, "loading a generated kernel: ", cudaGetErrorName(e));
    kernel = reinterpret_cast<const void*>(k);  // libraries stay loaded: their kernels may sit in CUDA graphs
  } catch (const std::exception& err) {
    cudaGetLastError();  // a failed load must not surface at the next launch check
    std::lock_guard<std::mutex> lock(g_mutex);
    g_stats.failures++;
    g_stats.last_error = err.what();
  }
  return kernel;
}

}  // namespace nx::cuda
