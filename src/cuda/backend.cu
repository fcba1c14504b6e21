// The CUDA implementation of the kernel interface, plus device, stream and event management.
#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "core/cuda_iface.hpp"
#include "cuda/fused.cuh"
#include "cuda/kernels.cuh"

namespace nx::cuda {

void throw_cuda(cudaError_t err, const char* what, const char* file, int line) {
  nx_status st = err == cudaErrorMemoryAllocation ? NX_ERR_OUT_OF_MEMORY : NX_ERR_CUDA;
  const char* base = file;
  for (const char* p = file; *p; ++p)
    if (*p == '/') base = p + 1;
  throw Error(st, cat(current_api(), ": CUDA error ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ") in ",
                      what, " at ", base, ":", line));
}

static thread_local int tls_device = -1;
int current_device() { return tls_device < 0 ? 0 : tls_device; }

static void use_device(int device) {
  if (tls_device != device) {
    NX_CUDA_CHECK(cudaSetDevice(device));
    tls_device = device;
  }
}

int device_count() {
  static int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();
      n = 0;
    }
    return n;
  }();
  return count;
}
bool compiled() { return true; }

namespace {
// One attribute of the current device, queried once per device (cache holds 0 until then).
template <class Query>
int cached_per_device(std::atomic<int> (&cache)[64], Query query) {
  int dev = 0;
  NX_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= 64) fail(NX_ERR_DEVICE, current_api(), ": device index ", dev, " out of range");
  int n = cache[dev].load(std::memory_order_relaxed);
  if (!n) {
    n = std::max(query(dev), 1);
    cache[dev].store(n, std::memory_order_relaxed);
  }
  return n;
}
}  // namespace

int sm_count() {
  static std::atomic<int> counts[64] = {};
  return cached_per_device(counts, [](int dev) {
    int n = 0;
    NX_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    return n;
  });
}

int compute_capability() {
  static std::atomic<int> versions[64] = {};
  return cached_per_device(versions, [](int dev) {
    int major = 0, minor = 0;
    NX_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    NX_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    return major * 10 + minor;
  });
}

namespace {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {}
  void* allocate(const ExecContext& ctx, size_t nbytes) override {
    use_device(device_);
    return device_allocate(device_, nbytes, stream_of(ctx));
  }
  void deallocate(void* p, size_t) override { device_free(device_, p); }
  void synchronize(const ExecContext& ctx) override {
    use_device(device_);
    count_host_sync();
    NX_CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));
  }
  void upload(const ExecContext& ctx, void* dst, const void* src, size_t n) override {
    use_device(device_);
    if (!n) return;
    // Staged through pinned blocks: the copy runs asynchronously on the stream and src may be
    // reused as soon as this returns.
    staged_upload(ctx, dst, src, n);
  }
  void download(const ExecContext& ctx, void* dst, const void* src, size_t n) override {
    use_device(device_);
    if (!n) return;
    NX_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, stream_of(ctx)));
    count_host_sync();
    NX_CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));
  }
  void copy_bytes(const ExecContext& ctx, void* dst, const void* src, size_t n) override {
    use_device(device_);
    if (n) NX_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream_of(ctx)));
  }
  void fused_elementwise(const ExecContext& ctx, const FusedProgram& program) override {
    use_device(device_);
    cuda::fused_elementwise(device_, ctx.stream, program);
  }
  bool native_half_matmul() const override { return true; }
  bool native_half_attention() const override { return true; }
  // Each kernel of the registry: select this backend's device, then launch on ctx's stream
  // (cuda::launch_<name>, which gets the ctx among args).
#define NX_CUDA_KERNEL(name, params, args) \
  void name params override {              \
    use_device(device_);                   \
    launch_##name args;                    \
  }
  NX_KERNELS(NX_CUDA_KERNEL)
#undef NX_CUDA_KERNEL

 private:
  int device_;
};

// Fails with core's message (backend(), core/device.cpp) unless cuda:device exists.
void check_device(int device) { backend(Device{NX_CUDA, device}); }

// One backend per device, made on first use; core has checked the index against device_count().
Backend& backend_of(int device) {
  static std::mutex m;
  static std::vector<std::unique_ptr<CudaBackend>>* backends = new std::vector<std::unique_ptr<CudaBackend>>(size_t(device_count()));
  std::lock_guard<std::mutex> lock(m);
  auto& b = (*backends)[size_t(device)];
  if (!b) b = std::make_unique<CudaBackend>(device);
  return *b;
}
// Registered with core at static initialization (kept by the linker because nexus_core is linked
// whole, CMakeLists.txt); device_count() runs at the first lookup, not here.
const BackendRegistrar registrar(NX_CUDA, {"CUDA", device_count, backend_of});

}  // namespace

void* stream_create(int device) {
  check_device(device);
  use_device(device);
  cudaStream_t s;
  NX_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}
void stream_destroy(int device, void* s) {
  if (!s) return;
  use_device(device);
  cudaStreamDestroy(static_cast<cudaStream_t>(s));
}
void stream_synchronize(int device, void* s) {
  check_device(device);
  use_device(device);
  count_host_sync();
  NX_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(s)));
}
void* event_create(int device) {
  check_device(device);
  use_device(device);
  cudaEvent_t e;
  NX_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}
void event_record(void* e, void* s) { NX_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(e), static_cast<cudaStream_t>(s))); }
void stream_wait_event(void* s, void* e) {
  NX_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(s), static_cast<cudaEvent_t>(e), 0));
}
void event_synchronize(void* e) {
  count_host_sync();
  NX_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(e)));
}
void event_destroy(void* e) {
  if (e) cudaEventDestroy(static_cast<cudaEvent_t>(e));
}
void* timing_event_create(int device) {
  check_device(device);
  use_device(device);
  cudaEvent_t e;
  NX_CUDA_CHECK(cudaEventCreate(&e));
  return e;
}
double event_elapsed_ms(void* start, void* end) {
  float ms = 0;
  NX_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end)));
  return ms;
}

}  // namespace nx::cuda
