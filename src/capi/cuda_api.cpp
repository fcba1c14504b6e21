// C API: device transfers, CUDA events, allocator statistics and TF32. Compiled in every build;
// without CUDA the nx::cuda functions report NX_ERR_DEVICE (src/core/cuda_stubs.cpp).
#include "capi/capi.hpp"
#include "core/cuda_iface.hpp"

struct nx_event_s {
  nx::Device device;
  void* native;
};
NX_HANDLE_OBJECT(nx_event_s, Event);

using namespace nx;
using namespace nx::capi;

namespace {
nx_event_s& event_arg(nx_event e) { return handle_object(e, "event"); }
void* native_stream(nx_stream stream) { return stream ? handle_object(stream, "stream").native : nullptr; }
int cuda_index(int32_t device) {
  Device d = device_arg(nx_device{NX_CUDA, device});
  return d.index;
}
}  // namespace

extern "C" {

int32_t nx_cuda_device_count(void) { return cuda::device_count(); }

nx_status nx_tensor_to(nx_tensor* out, nx_tensor t, nx_device device, nx_stream stream) {
  clear_out(out);
  return guard("nx_tensor_to", [&] {
    check_out(out);
    const Tensor& x = unwrap(t, "t");
    Device d = device_arg(device);
    check_stream(stream, d.is_cpu() ? x.device() : d);
    *out = wrap(to_device(x, d));
  });
}

nx_status nx_event_create(nx_event* out, nx_device device) {
  clear_out(out);
  return guard("nx_event_create", [&] {
    check_out(out);
    Device d = device_arg(device);
    if (d.is_cpu()) fail(NX_ERR_DEVICE, current_api(), ": events exist on CUDA devices only (CPU work is synchronous)");
    *out = make_handle(std::make_unique<nx_event_s>(nx_event_s{d, cuda::event_create(d.index)}));
  });
}
nx_status nx_event_record(nx_event event, nx_stream stream) {
  return guard("nx_event_record", [&] {
    auto& e = event_arg(event);
    check_stream(stream, e.device);
    cuda::event_record(e.native, native_stream(stream));
  });
}
nx_status nx_event_wait(nx_event event, nx_stream stream) {
  return guard("nx_event_wait", [&] {
    auto& e = event_arg(event);
    check_stream(stream, e.device);
    cuda::stream_wait_event(native_stream(stream), e.native);
  });
}
nx_status nx_event_synchronize(nx_event event) {
  return guard("nx_event_synchronize", [&] { cuda::event_synchronize(event_arg(event).native); });
}
void nx_event_free(nx_event event) {
  free_handle(event, [](nx_event_s& e) { cuda::event_destroy(e.native); });
}

nx_status nx_cuda_get_memory_stats(int32_t device, nx_cuda_memory_stats* out) {
  return guard("nx_cuda_get_memory_stats", [&] {
    check_out(out);
    if (out->struct_size < sizeof(nx_cuda_memory_stats))
      fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": out->struct_size is ", out->struct_size, ", expected ",
           sizeof(nx_cuda_memory_stats), " (set it to sizeof(nx_cuda_memory_stats))");
    auto s = cuda::memory_stats(cuda_index(device));
    out->allocated_bytes = s.allocated;
    out->reserved_bytes = s.reserved;
    out->peak_allocated_bytes = s.peak_allocated;
    out->num_device_allocs = s.num_device_allocs;
  });
}
nx_status nx_cuda_reset_peak_memory(int32_t device) {
  return guard("nx_cuda_reset_peak_memory", [&] { cuda::reset_peak(cuda_index(device)); });
}
nx_status nx_cuda_empty_cache(int32_t device) {
  return guard("nx_cuda_empty_cache", [&] { cuda::empty_cache(cuda_index(device)); });
}
nx_status nx_cuda_set_tf32(bool enabled) {
  return guard("nx_cuda_set_tf32", [&] { cuda::set_tf32(enabled); });
}
nx_status nx_cuda_get_tf32(bool* out) {
  return guard("nx_cuda_get_tf32", [&] {
    check_out(out);
    *out = cuda::tf32_enabled();
  });
}

}  // extern "C"
