// What the rest of the engine (the C API) needs from the CUDA backend beyond its Backend, which
// registers itself (core/backend.hpp). With CUDA compiled in, src/cuda implements it; otherwise
// src/core/cuda_stubs.cpp reports that no device exists. Handles are opaque (cudaStream_t /
// cudaEvent_t as void*).
#pragma once
#include <cstddef>
#include <functional>

#include "core/fused_program.hpp"

namespace nx::cuda {

int device_count();  // 0 without CUDA support or without a GPU
bool compiled();     // whether this build contains the CUDA backend
void* stream_create(int device);
void stream_destroy(int device, void* stream);
void stream_synchronize(int device, void* stream);
void* event_create(int device);
void event_record(void* event, void* stream);
void stream_wait_event(void* stream, void* event);
void event_synchronize(void* event);
void event_destroy(void* event);
// The profiler's events: with timing (event_create's are without), and the milliseconds between
// two recorded and completed ones.
void* timing_event_create(int device);
double event_elapsed_ms(void* start, void* end);
struct MemoryStats {
  size_t allocated = 0, reserved = 0, peak_allocated = 0, num_device_allocs = 0;
};
MemoryStats memory_stats(int device);
void reset_peak(int device);
void empty_cache(int device);
// CUDA graphs for compiled plans (src/compile): record enqueues work on the stream it is given,
// which is captured into a graph instead of run; the graph (an opaque handle) is launched on any
// stream of device and destroyed once no launch of it is pending (graph_destroy waits).
void* graph_capture(int device, const std::function<void(void* stream)>& record);
void graph_launch(void* graph, void* stream);
void graph_destroy(void* graph);
// Runs a fused elementwise chain (core/fused_program.hpp) on device's stream (elementwise.cu):
// through its generated kernel (fused_codegen.hpp) when there is one and generated is true, else
// through the interpreter kernel. Both give the unfused ops' bits.
void fused_elementwise(int device, void* stream, const FusedProgram& program, bool generated = true);
// Compiles (or finds in the caches) program's generated kernel ahead of a CUDA graph capture;
// whether it has one. fused_codegen_enabled: whether generated kernels are on at all.
bool fused_prepare(int device, const FusedProgram& program);
bool fused_codegen_enabled();
void set_tf32(bool enabled);
bool tf32_enabled();

}  // namespace nx::cuda
