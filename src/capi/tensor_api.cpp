// C API: version, errors, runtime settings, streams, tensor creation and inspection.
#ifdef NEXUS_OPENMP
#include <omp.h>
#endif

#include <atomic>
#include <cmath>
#include <cstring>

#include "capi/capi.hpp"
#include "core/cuda_iface.hpp"
#include "core/cpu_iface.hpp"

using namespace nx;
using namespace nx::capi;

// OpenMP's thread count is a per-thread setting (omp_set_num_threads changes the calling
// thread's only), while nx_cpu_set_num_threads promises the whole process: each thread applies
// the latest setting when its next call starts (guard() compares an epoch).
namespace nx::capi {
std::atomic<uint32_t> g_cpu_threads_epoch{0};
thread_local uint32_t tl_cpu_threads_epoch = 0;
namespace {
std::atomic<int32_t> g_cpu_threads{0};  // 0: OpenMP's default (all cores)
#ifdef NEXUS_OPENMP
const int32_t g_default_threads = omp_get_max_threads();  // read once, before any setting
#endif
}  // namespace
void apply_cpu_threads() {
  tl_cpu_threads_epoch = g_cpu_threads_epoch.load();
#ifdef NEXUS_OPENMP
  const int32_t n = g_cpu_threads.load();
  omp_set_num_threads(n > 0 ? n : g_default_threads);
#endif
}
}  // namespace nx::capi

#define NX_STR2(x) #x
#define NX_STR(x) NX_STR2(x)

namespace {

using Maker = Tensor (*)(const Shape&, DType, Device);

// A fill value the dtype cannot hold is refused, as torch.full refuses it ("value cannot be
// converted to type ... without overflow"): NaN or a value past the range of an integer dtype,
// a finite value past the largest finite value of a narrower floating dtype. Fractions truncate.
void check_fill_value(double v, DType dt) {
  double lo = 0, hi = 0;  // the open interval of representable values (integers) or +-max (floats)
  bool integral = true;
  switch (dt) {
    case DType::I32: lo = -2147483649.0, hi = 2147483648.0; break;
    case DType::I64: lo = -9223372036854777856.0, hi = 9223372036854775808.0; break;  // the doubles around int64
    case DType::F32: integral = false, hi = 3.4028234663852886e38; break;
    case DType::F16: integral = false, hi = 65504.0; break;
    case DType::BF16: integral = false, hi = 3.3895313892515355e38; break;
    case DType::I8: lo = -129.0, hi = 128.0; break;
    case DType::F8E4M3: integral = false, hi = 448.0; break;
    case DType::F8E5M2: integral = false, hi = 57344.0; break;
    default: return;  // f64 holds every double, bool every value (nonzero is true)
  }
  const bool ok = integral ? (v > lo && v < hi) : (!std::isfinite(v) || std::fabs(v) <= hi);
  if (!ok)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": value ", v, " cannot be converted to ", dtype_name(dt),
         " without overflow");
}

nx_status make_tensor(const char* api, nx_tensor* out, const int64_t* shape, size_t ndim, const nx_dtype& dtype,
                      nx_device device, nx_stream stream, Maker maker) {
  clear_out(out);
  return guard(api, [&] {
    check_out(out);
    Shape s = shape_arg(shape, ndim);
    DType dt = dtype_arg(dtype);
    Device dev = device_arg(device);
    check_stream(stream, dev);
    *out = wrap(maker(s, dt, dev));
  });
}

template <class F>
nx_status query(const char* api, nx_tensor t, void* out, F f) {
  return guard(api, [&] {
    check_out(out);
    f(unwrap(t, "t"));
  });
}


}  // namespace

extern "C" {

const char* nx_version_string(void) {
  return NX_STR(NX_VERSION_MAJOR) "." NX_STR(NX_VERSION_MINOR) "." NX_STR(NX_VERSION_PATCH);
}
uint32_t nx_abi_version(void) { return NX_ABI_VERSION; }

const char* nx_status_string(nx_status status) {
  switch (enum_value(status)) {  // any int may arrive from C
    case NX_OK: return "NX_OK";
    case NX_ERR_INVALID_ARGUMENT: return "NX_ERR_INVALID_ARGUMENT";
    case NX_ERR_SHAPE: return "NX_ERR_SHAPE";
    case NX_ERR_DTYPE: return "NX_ERR_DTYPE";
    case NX_ERR_DEVICE: return "NX_ERR_DEVICE";
    case NX_ERR_OUT_OF_MEMORY: return "NX_ERR_OUT_OF_MEMORY";
    case NX_ERR_CUDA: return "NX_ERR_CUDA";
    case NX_ERR_IO: return "NX_ERR_IO";
    case NX_ERR_NOT_IMPLEMENTED: return "NX_ERR_NOT_IMPLEMENTED";
    case NX_ERR_STATE: return "NX_ERR_STATE";
    case NX_ERR_INTERNAL: return "NX_ERR_INTERNAL";
  }
  return "NX_ERR_UNKNOWN";
}

const char* nx_last_error_message(void) { return capi::last_error(); }
void nx_clear_error(void) { capi::clear_error(); }

size_t nx_dtype_size(nx_dtype dtype) {
  const int v = enum_value(dtype);  // any int may arrive from C
  return is_valid_dtype(v) ? dtype_size(DType(v)) : 0;
}
const char* nx_dtype_name(nx_dtype dtype) {
  const int v = enum_value(dtype);
  return is_valid_dtype(v) ? dtype_name(DType(v)) : "invalid";
}

nx_status nx_cpu_set_num_threads(int32_t n) {
  return guard("nx_cpu_set_num_threads", [&] {
    g_cpu_threads.store(n > 0 ? n : 0);
    g_cpu_threads_epoch.fetch_add(1);
    apply_cpu_threads();
  });
}
nx_status nx_cpu_get_num_threads(int32_t* out) {
  return guard("nx_cpu_get_num_threads", [&] {
    check_out(out);
#ifdef NEXUS_OPENMP
    *out = omp_get_max_threads();
#else
    *out = 1;  // built without OpenMP: the kernels run on the calling thread
#endif
  });
}

nx_status nx_cpu_get_simd_level(const char** out) {
  return guard("nx_cpu_get_simd_level", [&] {
    check_out(out);
    *out = cpu::simd_level_name();
  });
}
nx_status nx_cpu_set_simd_level(const char* level) {
  return guard("nx_cpu_set_simd_level", [&] {
    check_out(level, "level");
    if (std::strcmp(level, "scalar") && std::strcmp(level, "avx2") && std::strcmp(level, "avx512"))
      fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": unknown level \"", level, "\" (expected avx512, avx2 or scalar)");
    if (!cpu::set_simd_level(level))
      fail(NX_ERR_NOT_IMPLEMENTED, current_api(), ": this processor does not support ", level);
  });
}

nx_status nx_random_set_seed(uint64_t seed) {
  return guard("nx_random_set_seed", [&] { manual_seed(seed); });
}
nx_status nx_runtime_set_deterministic(bool enabled) {
  return guard("nx_runtime_set_deterministic", [&] { set_deterministic(enabled); });
}
nx_status nx_runtime_get_deterministic(bool* out) {
  return guard("nx_runtime_get_deterministic", [&] {
    check_out(out);
    *out = deterministic();
  });
}
nx_status nx_runtime_get_host_syncs(uint64_t* out) {
  return guard("nx_runtime_get_host_syncs", [&] {
    check_out(out);
    *out = host_syncs();
  });
}
int64_t nx_live_handle_count(nx_handle_type type) {
  const int t = enum_value(type);
  return t >= NX_HANDLE_TENSOR && t <= NX_HANDLE_PROFILE ? handle_count(HandleKind(t)) : -1;
}

// ---------------------------------------------------------------- streams
nx_status nx_stream_create(nx_stream* out, nx_device device) {
  clear_out(out);
  return guard("nx_stream_create", [&] {
    check_out(out);
    Device d = device_arg(device);
    void* native = d.is_cpu() ? nullptr : cuda::stream_create(d.index);
    *out = make_handle(std::make_unique<nx_stream_s>(nx_stream_s{d, native}));
  });
}
nx_status nx_stream_synchronize(nx_stream stream) {
  return guard("nx_stream_synchronize", [&] {
    if (!stream) {  // every device's default stream
      for (int i = 0; i < cuda::device_count(); ++i) cuda::stream_synchronize(i, nullptr);
      return;
    }
    const nx_stream_s& s = handle_object(stream, "stream");
    if (!s.device.is_cpu()) cuda::stream_synchronize(s.device.index, s.native);
  });
}
nx_status nx_stream_device(nx_stream stream, nx_device* out) {
  return guard("nx_stream_device", [&] {
    check_out(out);
    if (!stream) { *out = nx_device{NX_CPU, 0}; return; }
    *out = handle_object(stream, "stream").device.to_c();
  });
}
void nx_stream_free(nx_stream stream) {
  free_handle(stream, [](nx_stream_s& s) {
    if (!s.device.is_cpu()) cuda::stream_destroy(s.device.index, s.native);
  });
}

// ---------------------------------------------------------------- creation
nx_status nx_tensor_from_data(nx_tensor* out, const void* data, const int64_t* shape, size_t ndim, nx_dtype dtype,
                              nx_device device, nx_stream stream) {
  clear_out(out);
  return guard("nx_tensor_from_data", [&] {
    check_out(out);
    Shape s = shape_arg(shape, ndim);
    DType dt = dtype_arg(dtype);
    Device dev = device_arg(device);
    check_stream(stream, dev);
    if (!data && numel_of(s) > 0) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": data is NULL");
    *out = wrap(from_data(data, s, dt, dev));
  });
}
nx_status nx_tensor_zeros(nx_tensor* out, const int64_t* shape, size_t ndim, nx_dtype dtype, nx_device device,
                          nx_stream stream) {
  return make_tensor("nx_tensor_zeros", out, shape, ndim, dtype, device, stream, &zeros);
}
nx_status nx_tensor_ones(nx_tensor* out, const int64_t* shape, size_t ndim, nx_dtype dtype, nx_device device,
                         nx_stream stream) {
  return make_tensor("nx_tensor_ones", out, shape, ndim, dtype, device, stream, &ones);
}
nx_status nx_tensor_randn(nx_tensor* out, const int64_t* shape, size_t ndim, nx_dtype dtype, nx_device device,
                          nx_stream stream) {
  return make_tensor("nx_tensor_randn", out, shape, ndim, dtype, device, stream, &randn);
}
nx_status nx_tensor_rand(nx_tensor* out, const int64_t* shape, size_t ndim, nx_dtype dtype, nx_device device,
                         nx_stream stream) {
  return make_tensor("nx_tensor_rand", out, shape, ndim, dtype, device, stream, &rand);
}
nx_status nx_tensor_full(nx_tensor* out, const int64_t* shape, size_t ndim, double value, nx_dtype dtype,
                         nx_device device, nx_stream stream) {
  clear_out(out);
  return guard("nx_tensor_full", [&] {
    check_out(out);
    Shape s = shape_arg(shape, ndim);
    DType dt = dtype_arg(dtype);
    Device dev = device_arg(device);
    check_stream(stream, dev);
    check_fill_value(value, dt);
    *out = wrap(full(s, value, dt, dev));
  });
}
nx_status nx_tensor_arange(nx_tensor* out, double start, double end, double step, nx_dtype dtype, nx_device device,
                           nx_stream stream) {
  clear_out(out);
  return guard("nx_tensor_arange", [&] {
    check_out(out);
    DType dt = dtype_arg(dtype);
    Device dev = device_arg(device);
    check_stream(stream, dev);
    *out = wrap(arange(start, end, step, dt, dev));
  });
}

// ---------------------------------------------------------------- inspection
nx_status nx_tensor_copy_to_host(nx_tensor t, void* dst, size_t nbytes, nx_stream stream) {
  return guard("nx_tensor_copy_to_host", [&] {
    const Tensor& x = unwrap(t, "t");
    check_stream(stream, x.device());
    if (!dst && nbytes) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": dst is NULL");
    copy_to_host(x, dst, nbytes);
  });
}
nx_status nx_tensor_ndim(nx_tensor t, size_t* out) {
  return query("nx_tensor_ndim", t, out, [&](const Tensor& x) { *out = size_t(x.dim()); });
}
static void write_dims(const Shape& dims, int64_t* out, size_t capacity) {
  if (capacity < dims.size())
    fail(NX_ERR_SHAPE, current_api(), ": capacity ", capacity, " is smaller than the tensor's rank ", dims.size());
  std::copy(dims.begin(), dims.end(), out);
}
nx_status nx_tensor_shape(nx_tensor t, int64_t* out, size_t capacity) {
  return guard("nx_tensor_shape", [&] {
    const Tensor& x = unwrap(t, "t");
    if (!out && x.dim() > 0) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": out is NULL");
    write_dims(x.shape(), out, capacity);
  });
}
nx_status nx_tensor_strides(nx_tensor t, int64_t* out, size_t capacity) {
  return guard("nx_tensor_strides", [&] {
    const Tensor& x = unwrap(t, "t");
    if (!out && x.dim() > 0) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": out is NULL");
    write_dims(x.strides(), out, capacity);
  });
}
nx_status nx_tensor_numel(nx_tensor t, int64_t* out) {
  return query("nx_tensor_numel", t, out, [&](const Tensor& x) { *out = x.numel(); });
}
nx_status nx_tensor_dtype(nx_tensor t, nx_dtype* out) {
  return query("nx_tensor_dtype", t, out, [&](const Tensor& x) { *out = nx_dtype(x.dtype()); });
}
nx_status nx_tensor_device(nx_tensor t, nx_device* out) {
  return query("nx_tensor_device", t, out, [&](const Tensor& x) { *out = x.device().to_c(); });
}
nx_status nx_tensor_is_contiguous(nx_tensor t, bool* out) {
  return query("nx_tensor_is_contiguous", t, out, [&](const Tensor& x) { *out = x.is_contiguous(); });
}
nx_status nx_tensor_item(nx_tensor t, double* out, nx_stream stream) {
  return guard("nx_tensor_item", [&] {
    check_out(out);
    const Tensor& x = unwrap(t, "t");
    check_stream(stream, x.device());
    *out = item(x);
  });
}
nx_status nx_tensor_data_ptr(nx_tensor t, void** out) {
  return guard("nx_tensor_data_ptr", [&] {
    check_out(out);
    const Tensor& x = unwrap(t, "t");
    if (!x.device().is_cpu())
      fail(NX_ERR_DEVICE, current_api(), ": the tensor is on ", device_str(x.device()), "; only CPU data is host-addressable");
    if (CaptureHooks* hooks = capture_hooks()) hooks->host_read(x);
    x.impl()->storage->mark_shared();  // the caller may write it
    *out = x.data();
  });
}
nx_status nx_tensor_retain(nx_tensor* out, nx_tensor t) {
  clear_out(out);
  return guard("nx_tensor_retain", [&] {
    check_out(out);
    *out = wrap(unwrap(t, "t"));
  });
}
void nx_tensor_free(nx_tensor t) { release(t); }

}  // extern "C"
