#include <mutex>
#include <unordered_set>

#include "capi/capi.hpp"

namespace nx::capi {

static thread_local std::string tls_message;

nx_status set_error(nx_status status, const std::string& message) {
  tls_message = message;
  return status;
}
const char* last_error() { return tls_message.c_str(); }
void clear_error() { tls_message.clear(); }

namespace {
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::unordered_set<const void*>& registry() {
  static auto* live = new std::unordered_set<const void*>();  // never destroyed: handles may outlive statics
  return *live;
}
}  // namespace

nx_tensor wrap(Tensor t) {
  auto* h = new nx_tensor_s{kTensorMagic, std::move(t)};
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry().insert(h);
  return h;
}

const Tensor& unwrap(nx_tensor h, const char* what) {
  if (!h) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": ", what, " is NULL");
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    if (!registry().count(h))
      fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": ", what, " is not a live tensor handle (already freed, or not "
           "created by NexusGrad)");
  }
  return h->tensor;
}

Tensor unwrap_optional(nx_tensor h, const char* what) { return h ? unwrap(h, what) : Tensor(); }

void release(nx_tensor h) {
  if (!h) return;
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    if (!registry().erase(h)) return;  // double free or foreign pointer: ignore rather than crash
  }
  h->magic = kDeadMagic;
  delete h;
}

int64_t live_tensors() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  return int64_t(registry().size());
}

Shape dims_arg(const int64_t* dims, size_t ndim, const char* what) {
  if (ndim > 0 && !dims) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": ", what, " is NULL but ndim is ", ndim);
  if (ndim > 1024) fail(NX_ERR_SHAPE, current_api(), ": ndim ", ndim, " is not plausible (at most 1024)");
  return Shape(dims, dims + ndim);
}

Shape shape_arg(const int64_t* shape, size_t ndim, const char* what) {
  Shape s = dims_arg(shape, ndim, what);
  for (int64_t d : s)
    if (d < 0) fail(NX_ERR_SHAPE, current_api(), ": negative dimension in ", what, " ", shape_str(s));
  return s;
}

Device device_arg(const nx_device& device) {
  const int type = enum_value(device.type);
  if (type != NX_CPU && type != NX_CUDA)
    fail(NX_ERR_DEVICE, current_api(), ": unknown device type ", type, " (expected NX_CPU=1 or NX_CUDA=2)");
  if (device.index < 0) fail(NX_ERR_DEVICE, current_api(), ": negative device index ", device.index);
  Device d{nx_device_type(type), device.index};
  backend(d);  // fails with NX_ERR_DEVICE when the device does not exist
  return d;
}

DType dtype_arg(const nx_dtype& dtype) {
  const int value = enum_value(dtype);
  if (!is_valid_dtype(value)) fail(NX_ERR_DTYPE, current_api(), ": invalid dtype value ", value);
  return DType(value);
}

void check_stream(nx_stream stream, Device device) {
  if (!stream) return;
  if (stream->magic != kStreamMagic)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": stream is not a live stream handle");
  if (stream->device != device)
    fail(NX_ERR_DEVICE, current_api(), ": stream is on ", device_str(stream->device), " but the tensors are on ",
         device_str(device));
  set_current_stream(stream->native);
}

std::vector<int64_t> axes_arg(const int64_t* axes, size_t naxes) {
  if (naxes && !axes) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": axes is NULL but naxes is ", naxes);
  return std::vector<int64_t>(axes, axes + naxes);
}

std::vector<Tensor> tensor_list(const nx_tensor* xs, size_t n) {
  if (!xs) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": the tensor array is NULL");
  std::vector<Tensor> v;
  v.reserve(n);
  for (size_t i = 0; i < n; ++i) v.push_back(unwrap(xs[i], "an element of the tensor array"));
  return v;
}

Reduction reduction_arg(const nx_reduction& reduction) {
  const int r = enum_value(reduction);
  if (r != NX_REDUCTION_MEAN && r != NX_REDUCTION_SUM && r != NX_REDUCTION_NONE)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": invalid reduction ", r);
  return Reduction(r);
}

void wrap_outs(std::initializer_list<nx_tensor*> outs, const std::vector<Tensor>& results) {
  std::vector<nx_tensor> made;
  try {
    for (const Tensor& t : results) made.push_back(wrap(t));
  } catch (...) {
    for (nx_tensor h : made) release(h);
    throw;
  }
  size_t i = 0;
  for (nx_tensor* out : outs) *out = made[i++];
}

}  // namespace nx::capi
