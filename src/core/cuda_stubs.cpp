// Without the CUDA backend every CUDA entry point reports that no CUDA device exists.
#ifndef NEXUS_HAVE_CUDA
#include "core/cuda_iface.hpp"
#include "core/error.hpp"

namespace nx::cuda {

[[noreturn]] static void unavailable(int device) {
  fail(NX_ERR_DEVICE, current_api(), ": this build of NexusGrad has no CUDA support (asked for cuda:", device,
       "); rebuild with -DNEXUS_CUDA=ON on a machine with the CUDA toolkit");
}

int device_count() { return 0; }
bool compiled() { return false; }
Backend& backend(int device) { unavailable(device); }
void* stream_create(int device) { unavailable(device); }
void stream_destroy(int, void*) {}
void stream_synchronize(int device, void*) { unavailable(device); }
void* event_create(int device) { unavailable(device); }
void event_record(void*, void*) { unavailable(0); }
void stream_wait_event(void*, void*) { unavailable(0); }
void event_synchronize(void*) { unavailable(0); }
void event_destroy(void*) {}
MemoryStats memory_stats(int device) { unavailable(device); }
void reset_peak(int device) { unavailable(device); }
void empty_cache(int device) { unavailable(device); }
static bool g_tf32 = false;
void set_tf32(bool enabled) { g_tf32 = enabled; }
bool tf32_enabled() { return g_tf32; }

}  // namespace nx::cuda
#endif
