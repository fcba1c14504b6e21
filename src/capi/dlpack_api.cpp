// C API: DLPack export and import (zero-copy exchange with PyTorch, NumPy, CuPy...), for the legacy
// struct (nx_dl_managed_tensor = DLManagedTensor) and the versioned one of DLPack 1.x
// (nx_dl_managed_tensor_versioned = DLManagedTensorVersioned). Both wrap one nx_dl_tensor; the
// code is written once over the managed struct type M, and the versioned struct only adds its
// version and flags (managed_header).
//
// Export hands out a managed struct whose manager_ctx holds a reference to the tensor's Storage,
// so the memory lives until the consumer calls the deleter. Import wraps foreign memory in a
// Storage that must not free it: Storage's constructor/destructor always go through the device
// backend, so the Storage is built empty on the CPU (a small backend allocation that is kept
// aside), then pointed at the foreign memory; the shared_ptr's deleter puts the original
// allocation back before deleting it and calls the producer's deleter. No core file changes.
#include <cstddef>
#include <limits>
#include <memory>

#include "capi/capi.hpp"
#include "core/int_math.hpp"

using namespace nx;
using namespace nx::capi;

namespace {

template <class M>
struct ExportCtx {
  std::shared_ptr<Storage> storage;  // keeps the memory alive
  Shape shape, strides;
  M managed{};
};

template <class M>
void export_deleter(M* self) {
  if (!self) return;
  delete static_cast<ExportCtx<M>*>(self->manager_ctx);  // never throws
}

nx_dl_data_type to_dl_dtype(DType dt) {
  switch (dt) {
    case DType::F32: return {NX_DL_FLOAT, 32, 1};
    case DType::F64: return {NX_DL_FLOAT, 64, 1};
    case DType::F16: return {NX_DL_FLOAT, 16, 1};
    case DType::BF16: return {NX_DL_BFLOAT, 16, 1};
    case DType::I32: return {NX_DL_INT, 32, 1};
    case DType::I64: return {NX_DL_INT, 64, 1};
    case DType::Bool: return {NX_DL_BOOL, 8, 1};
    case DType::I8: return {NX_DL_INT, 8, 1};
    case DType::F8E4M3: return {NX_DL_FLOAT8_E4M3FN, 8, 1};
    case DType::F8E5M2: return {NX_DL_FLOAT8_E5M2, 8, 1};
  }
  fail(NX_ERR_DTYPE, current_api(), ": dtype ", int(dt), " has no DLPack equivalent");
}

DType from_dl_dtype(nx_dl_data_type d) {
  if (d.lanes != 1)
    fail(NX_ERR_DTYPE, current_api(), ": vector dtypes (lanes ", d.lanes, ") are not supported");
  switch (d.code) {
    case NX_DL_FLOAT:
      if (d.bits == 32) return DType::F32;
      if (d.bits == 64) return DType::F64;
      if (d.bits == 16) return DType::F16;
      break;
    case NX_DL_BFLOAT:
      if (d.bits == 16) return DType::BF16;
      break;
    case NX_DL_INT:
      if (d.bits == 32) return DType::I32;
      if (d.bits == 64) return DType::I64;
      if (d.bits == 8) return DType::I8;
      break;
    case NX_DL_BOOL:
      if (d.bits == 8) return DType::Bool;
      break;
    case NX_DL_FLOAT8_E4M3FN:
      if (d.bits == 8) return DType::F8E4M3;
      break;
    case NX_DL_FLOAT8_E5M2:
      if (d.bits == 8) return DType::F8E5M2;
      break;
    default:
      break;
  }
  static const char* names[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
  fail(NX_ERR_DTYPE, current_api(), ": DLPack dtype ", d.code < 7 ? names[d.code] : "code ", d.code < 7 ? "" : std::to_string(d.code),
       int(d.bits), " has no NexusGrad equivalent (supported: float16/32/64, bfloat16, int8/32/64, bool, "
       "float8_e4m3fn, float8_e5m2)");
}

// The fields only the versioned struct has.
void managed_header(nx_dl_managed_tensor&) {}
void managed_header(nx_dl_managed_tensor_versioned& m) {
  m.version = nx_dl_version{NX_DL_MAJOR_VERSION, NX_DL_MINOR_VERSION};
  m.flags = 0;  // shared and writable
}

template <class M>
void export_tensor(M** out, nx_tensor t) {
  check_out(out);
  const Tensor& x = unwrap(t, "t");
  auto ctx = std::make_unique<ExportCtx<M>>();
  ctx->storage = x.impl()->storage;
  ctx->storage->mark_shared();  // the consumer may write it
  ctx->shape = x.shape();
  ctx->strides = x.strides();
  nx_dl_tensor& dl = ctx->managed.dl_tensor;
  dl.data = x.data();  // address of element 0 (the view's offset applied)
  dl.device = nx_dl_device{x.device().is_cpu() ? NX_CPU : NX_CUDA, x.device().is_cpu() ? 0 : x.device().index};
  dl.ndim = int32_t(x.dim());
  dl.dtype = to_dl_dtype(x.dtype());
  dl.shape = ctx->shape.empty() ? nullptr : ctx->shape.data();
  dl.strides = ctx->strides.empty() ? nullptr : ctx->strides.data();
  dl.byte_offset = 0;
  managed_header(ctx->managed);
  // Work enqueued on the default stream must be finished before another library reads it.
  if (!x.device().is_cpu()) backend(x.device()).synchronize(exec_context(x.device()));
  ctx->managed.manager_ctx = ctx.get();
  ctx->managed.deleter = &export_deleter<M>;
  *out = &ctx.release()->managed;
}

// What the versioned struct adds to the checks: a major version this header describes, and a
// tensor that may be written.
void check_importable(const nx_dl_managed_tensor&) {}
void check_importable(const nx_dl_managed_tensor_versioned& m) {
  if (m.version.major != NX_DL_MAJOR_VERSION)
    fail(NX_ERR_NOT_IMPLEMENTED, current_api(), ": DLPack major version ", m.version.major, ".", m.version.minor,
         " is not supported (expected ", NX_DL_MAJOR_VERSION, ".x); the caller still owns managed and calls its deleter");
  if (m.flags & NX_DL_FLAG_READ_ONLY)
    fail(NX_ERR_NOT_IMPLEMENTED, current_api(), ": the tensor is read-only (NX_DL_FLAG_READ_ONLY) and NexusGrad "
         "tensors are writable; export a copy instead");
}

template <class M>
void call_deleter(void* managed) {
  M* m = static_cast<M*>(managed);
  if (m->deleter) m->deleter(m);
}

template <class M>
void import_tensor(nx_tensor* out, M* managed) {
  check_out(out);
  if (!managed) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": managed is NULL");
  check_importable(*managed);
  const nx_dl_tensor& dl = managed->dl_tensor;
  Device dev;
  if (dl.device.device_type == NX_CPU) {
    dev = Device{NX_CPU, 0};
  } else if (dl.device.device_type == NX_CUDA) {
    dev = device_arg(nx_device{NX_CUDA, dl.device.device_id});  // NX_ERR_DEVICE when absent
  } else {
    fail(NX_ERR_DEVICE, current_api(), ": DLPack device type ", int(dl.device.device_type),
         " is not supported (expected kDLCPU=1 or kDLCUDA=2)");
  }
  DType dt = from_dl_dtype(dl.dtype);
  if (dl.ndim < 0 || dl.ndim > 1024) fail(NX_ERR_SHAPE, current_api(), ": ndim ", dl.ndim, " is not plausible");
  if (dl.ndim > 0 && !dl.shape) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": shape is NULL but ndim is ", dl.ndim);
  Shape shape(dl.shape, dl.shape + dl.ndim);
  for (int64_t s : shape)
    if (s < 0) fail(NX_ERR_SHAPE, current_api(), ": negative dimension in shape ", shape_str(shape));
  Shape strides = dl.strides ? Shape(dl.strides, dl.strides + dl.ndim) : contiguous_strides(shape);
  const int64_t n = numel_of(shape);
  // Extent of the addressed memory, in elements past element 0. Every product and sum is
  // checked: strides whose extent overflows were accepted and the first read then crashed.
  int64_t last = 0;
  for (int i = 0; i < dl.ndim; ++i) {
    if (shape[size_t(i)] > 1 && strides[size_t(i)] < 0)
      fail(NX_ERR_NOT_IMPLEMENTED, current_api(), ": negative strides are not supported (strides ",
           shape_str(strides), ")");
    if (shape[size_t(i)] > 1)
      last = checked_add(last, checked_mul(shape[size_t(i)] - 1, strides[size_t(i)], "the extent of the strides"),
                         "the extent of the strides");
    if (strides[size_t(i)] < 0) strides[size_t(i)] = 0;  // unused on a dimension of size <= 1
  }
  if (!dl.data && n > 0) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": data is NULL");
  const size_t esize = dtype_size(dt);
  // The bytes addressed, from element 0, must fit a byte offset (int64) and the address space.
  const int64_t extent_bytes =
      n > 0 ? checked_mul(checked_add(last, 1, "the extent of the strides"), int64_t(esize), "the extent in bytes") : 0;
  const uintptr_t base = reinterpret_cast<uintptr_t>(dl.data);
  if (n > 0 && (dl.byte_offset > UINTPTR_MAX - base || uint64_t(extent_bytes) > UINTPTR_MAX - base - dl.byte_offset))
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": data ", dl.data, " + byte_offset ", dl.byte_offset, " + ",
         extent_bytes, " bytes of extent wraps around the address space");
  void* first = n > 0 ? static_cast<char*>(dl.data) + dl.byte_offset : dl.data;
  // Kernels load whole elements: a misaligned first element would be undefined behaviour (and a
  // fault on a GPU), so it is refused, as DLPack requires alignment to the element type.
  if (n > 0 && reinterpret_cast<uintptr_t>(first) % esize != 0)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": data ", dl.data, " + byte_offset ", dl.byte_offset,
         " is not aligned to the ", esize, "-byte element of ", dtype_name(dt));
  const size_t extent = size_t(extent_bytes);

  // A Storage that does not own its memory (see the comment at the top of this file). The
  // producer's deleter runs only once the handle exists ("armed"): if anything below fails,
  // managed is left to the caller as documented.
  struct Foreign {
    void* own;
    void* managed;
    void (*release)(void* managed);
    bool armed;
  };
  auto* raw = new Storage(0, Device{NX_CPU, 0});
  Foreign* f = nullptr;
  try {
    f = new Foreign{raw->data, managed, &call_deleter<M>, false};
  } catch (...) {
    delete raw;
    throw;
  }
  // If the control block cannot be allocated, shared_ptr calls the deleter itself.
  std::shared_ptr<Storage> storage(raw, [f](Storage* s) {
    s->data = f->own;
    s->nbytes = 0;
    s->device = Device{NX_CPU, 0};
    delete s;
    if (f->armed) f->release(f->managed);
    delete f;
  });
  raw->data = n > 0 ? first : f->own;
  raw->nbytes = extent;
  raw->device = dev;
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->storage->mark_shared();  // the producer may still write it
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = 0;
  impl->dtype = dt;
  nx_tensor h = wrap(Tensor(std::move(impl)));
  f->armed = true;
  *out = h;
}

// DLPack's layout on 64-bit targets (tests/capi/test_dlpack*.c compare with a real dlpack.h).
static_assert(sizeof(void*) != 8 || (sizeof(nx_dl_tensor) == 48 && sizeof(nx_dl_managed_tensor) == 64 &&
                                     sizeof(nx_dl_managed_tensor_versioned) == 80 &&
                                     offsetof(nx_dl_managed_tensor_versioned, dl_tensor) == 32),
              "the nx_dl_* structs must keep DLPack's layout");

}  // namespace

extern "C" {

nx_status nx_tensor_to_dlpack(nx_dl_managed_tensor** out, nx_tensor t) {
  clear_out(out);
  return guard("nx_tensor_to_dlpack", [&] { export_tensor(out, t); });
}

nx_status nx_tensor_to_dlpack_versioned(nx_dl_managed_tensor_versioned** out, nx_tensor t) {
  clear_out(out);
  return guard("nx_tensor_to_dlpack_versioned", [&] { export_tensor(out, t); });
}

nx_status nx_tensor_from_dlpack(nx_tensor* out, nx_dl_managed_tensor* managed) {
  clear_out(out);
  return guard("nx_tensor_from_dlpack", [&] { import_tensor(out, managed); });
}

nx_status nx_tensor_from_dlpack_versioned(nx_tensor* out, nx_dl_managed_tensor_versioned* managed) {
  clear_out(out);
  return guard("nx_tensor_from_dlpack_versioned", [&] { import_tensor(out, managed); });
}

}  // extern "C"
