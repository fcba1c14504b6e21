#include <algorithm>

#include "capi/capi.hpp"

namespace nx::capi {

static thread_local std::string tls_message;

nx_status set_error(nx_status status, const std::string& message) {
  tls_message = message;
  return status;
}
const char* last_error() { return tls_message.c_str(); }
void clear_error() { tls_message.clear(); }

nx_tensor wrap(Tensor t) { return make_handle(std::make_unique<nx_tensor_s>(nx_tensor_s{std::move(t)})); }

const Tensor& unwrap(nx_tensor h, const char* what) { return handle_object(h, what).tensor; }

Tensor unwrap_optional(nx_tensor h, const char* what) { return h ? unwrap(h, what) : Tensor(); }

void release(nx_tensor h) { free_handle(h); }


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

nx_device_type device_type_arg(const nx_device_type& device_type) {
  const int type = enum_value(device_type);
  if (type != NX_CPU && type != NX_CUDA)
    fail(NX_ERR_DEVICE, current_api(), ": unknown device type ", type, " (expected NX_CPU=1 or NX_CUDA=2)");
  return nx_device_type(type);
}

Device device_arg(const nx_device& device) {
  const nx_device_type type = device_type_arg(device.type);
  if (device.index < 0) fail(NX_ERR_DEVICE, current_api(), ": negative device index ", device.index);
  Device d{type, device.index};
  backend(d);  // fails with NX_ERR_DEVICE when the device does not exist
  return d;
}

DType dtype_arg(const nx_dtype& dtype) {
  const int value = enum_value(dtype);
  if (!is_valid_dtype(value)) fail(NX_ERR_DTYPE, current_api(), ": invalid dtype value ", value);
  return DType(value);
}

DType compute_dtype_arg(const nx_dtype& dtype) {
  const DType d = dtype_arg(dtype);
  if (is_storage_only(d))
    fail(NX_ERR_DTYPE, current_api(), ": dtype ", dtype_name(d), " is an 8-bit storage dtype, which no op computes in");
  return d;
}

void check_stream(nx_stream stream, Device device) {
  if (!stream) return;
  const nx_stream_s& s = handle_object(stream, "stream");
  if (s.device != device)
    fail(NX_ERR_DEVICE, current_api(), ": stream is on ", device_str(s.device), " but the tensors are on ",
         device_str(device));
  set_current_stream(s.native);
}

std::vector<int64_t> axes_arg(const int64_t* axes, size_t naxes) {
  if (naxes && !axes) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": axes is NULL but naxes is ", naxes);
  // A tensor has at most 1024 dimensions (dims_arg): more axes than that is a bad axis list, not
  // a vector too long to allocate (which used to surface as NX_ERR_INTERNAL).
  if (naxes > 1024) fail(NX_ERR_SHAPE, current_api(), ": naxes ", naxes, " is not plausible (at most 1024)");
  return std::vector<int64_t>(axes, axes + naxes);
}

std::vector<Tensor> tensor_list(const nx_tensor* xs, size_t n) {
  if (!xs) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": the tensor array is NULL");
  std::vector<Tensor> v;
  // n is the caller's count: a bad one is found at its first bad handle below, not turned into
  // an allocation of SIZE_MAX elements (std::length_error, which surfaced as NX_ERR_INTERNAL)
  v.reserve(std::min<size_t>(n, 4096));
  for (size_t i = 0; i < n; ++i) v.push_back(unwrap(xs[i], "an element of the tensor array"));
  return v;
}

Reduction reduction_arg(const nx_reduction& reduction) {
  const int r = enum_value(reduction);
  if (r != NX_REDUCTION_MEAN && r != NX_REDUCTION_SUM && r != NX_REDUCTION_NONE)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": invalid reduction ", r);
  return Reduction(r);
}

std::vector<nx_tensor> wrap_all(const std::vector<Tensor>& results) {
  std::vector<nx_tensor> made;
  try {
    for (const Tensor& t : results) made.push_back(wrap(t));
  } catch (...) {
    for (nx_tensor h : made) release(h);
    throw;
  }
  return made;
}

void wrap_outs(std::initializer_list<nx_tensor*> outs, const std::vector<Tensor>& results) {
  const std::vector<nx_tensor> made = wrap_all(results);
  size_t i = 0;
  for (nx_tensor* out : outs) *out = made[i++];
}

std::vector<Tensor> call_tensor_fn(nx_status (*fn)(nx_tensor*, size_t, const nx_tensor*, size_t, void*), void* user_data,
                                   const std::vector<Tensor>& inputs, size_t noutputs, const char* who) {
  std::vector<nx_tensor> in_handles, out_handles(noutputs, nullptr);
  auto free_all = [&] {
    for (nx_tensor h : in_handles) release(h);
    for (nx_tensor h : out_handles) release(h);
  };
  try {
    for (const Tensor& t : inputs) in_handles.push_back(wrap(t));
  } catch (...) {
    free_all();
    throw;
  }
  nx_status st = fn(out_handles.data(), noutputs, in_handles.data(), in_handles.size(), user_data);
  if (st != NX_OK) {
    std::string msg = last_error();
    free_all();
    fail(st, who, " failed: ", msg);
  }
  std::vector<Tensor> outs;
  for (size_t i = 0; i < noutputs; ++i) {
    if (!out_handles[i]) {
      free_all();
      fail(NX_ERR_STATE, who, " returned NX_OK but left output ", i, " NULL");
    }
    outs.push_back(unwrap(out_handles[i], "an output of the function"));
  }
  free_all();
  return outs;
}

}  // namespace nx::capi
