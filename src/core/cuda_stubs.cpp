// Without the CUDA backend every CUDA entry point reports that no CUDA device exists (and no
// CUDA backend registers itself, so backend() says the same for cuda:N).
#ifndef NEXUS_HAVE_CUDA
#include "core/backend.hpp"
#include "core/cuda_iface.hpp"

namespace nx::cuda {

[[noreturn]] static void unavailable(int device) { no_backend(Device{NX_CUDA, device}); }

int device_count() { return 0; }
bool compiled() { return false; }
void* stream_create(int device) { unavailable(device); }
void stream_destroy(int, void*) {}
void stream_synchronize(int device, void*) { unavailable(device); }
void* event_create(int device) { unavailable(device); }
void event_record(void*, void*) { unavailable(0); }
void stream_wait_event(void*, void*) { unavailable(0); }
void event_synchronize(void*) { unavailable(0); }
void event_destroy(void*) {}
void* timing_event_create(int device) { unavailable(device); }
double event_elapsed_ms(void*, void*) { unavailable(0); }
MemoryStats memory_stats(int device) { unavailable(device); }
void reset_peak(int device) { unavailable(device); }
void empty_cache(int device) { unavailable(device); }
void* graph_capture(int device, const std::function<void(void*)>&) { unavailable(device); }
void graph_launch(void*, void*) { unavailable(0); }
void graph_destroy(void*) {}
void fused_elementwise(int device, void*, const FusedProgram&, bool) { unavailable(device); }
bool fused_prepare(int, const FusedProgram&) { return false; }
bool fused_codegen_enabled() { return false; }
static bool g_tf32 = false;
void set_tf32(bool enabled) { g_tf32 = enabled; }
bool tf32_enabled() { return g_tf32; }

}  // namespace nx::cuda
#endif
