// C API: DLPack export and import (zero-copy exchange with PyTorch, NumPy, CuPy...).
//
// Export hands out a DLManagedTensor whose manager_ctx holds a reference to the tensor's Storage,
// so the memory lives until the consumer calls the deleter. Import wraps foreign memory in a
// Storage that must not free it: Storage's constructor/destructor always go through the device
// backend, so the Storage is built empty on the CPU (a small backend allocation that is kept
// aside), then pointed at the foreign memory; the shared_ptr's deleter puts the original
// allocation back before deleting it and calls the producer's deleter. No core file changes.
#include <limits>
#include <memory>

#include "capi/capi.hpp"

using namespace nx;
using namespace nx::capi;

namespace {

struct ExportCtx {
  std::shared_ptr<Storage> storage;  // keeps the memory alive
  Shape shape, strides;
  DLManagedTensor managed{};
};

void export_deleter(DLManagedTensor* self) {
  if (!self) return;
  delete static_cast<ExportCtx*>(self->manager_ctx);  // never throws
}

DLDataType to_dl_dtype(DType dt) {
  switch (dt) {
    case DType::F32: return {kDLFloat, 32, 1};
    case DType::F64: return {kDLFloat, 64, 1};
    case DType::F16: return {kDLFloat, 16, 1};
    case DType::BF16: return {kDLBfloat, 16, 1};
    case DType::I32: return {kDLInt, 32, 1};
    case DType::I64: return {kDLInt, 64, 1};
    case DType::Bool: return {kDLBool, 8, 1};
  }
  fail(NX_ERR_DTYPE, current_api(), ": dtype ", int(dt), " has no DLPack equivalent");
}

DType from_dl_dtype(DLDataType d) {
  if (d.lanes != 1)
    fail(NX_ERR_DTYPE, current_api(), ": vector dtypes (lanes ", d.lanes, ") are not supported");
  switch (d.code) {
    case kDLFloat:
      if (d.bits == 32) return DType::F32;
      if (d.bits == 64) return DType::F64;
      if (d.bits == 16) return DType::F16;
      break;
    case kDLBfloat:
      if (d.bits == 16) return DType::BF16;
      break;
    case kDLInt:
      if (d.bits == 32) return DType::I32;
      if (d.bits == 64) return DType::I64;
      break;
    case kDLBool:
      if (d.bits == 8) return DType::Bool;
      break;
    default:
      break;
  }
  static const char* names[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
  fail(NX_ERR_DTYPE, current_api(), ": DLPack dtype ", d.code < 7 ? names[d.code] : "code ", d.code < 7 ? "" : std::to_string(d.code),
       int(d.bits), " has no NexusGrad equivalent (supported: float16/32/64, bfloat16, int32/64, bool)");
}

}  // namespace

extern "C" {

nx_status nx_tensor_to_dlpack(DLManagedTensor** out, nx_tensor t) {
  clear_out(out);
  return guard("nx_tensor_to_dlpack", [&] {
    check_out(out);
    const Tensor& x = unwrap(t, "t");
    auto ctx = std::make_unique<ExportCtx>();
    ctx->storage = x.impl()->storage;
    ctx->shape = x.shape();
    ctx->strides = x.strides();
    DLTensor& dl = ctx->managed.dl_tensor;
    dl.data = x.data();  // address of element 0 (the view's offset applied)
    dl.device = DLDevice{x.device().is_cpu() ? kDLCPU : kDLCUDA, x.device().is_cpu() ? 0 : x.device().index};
    dl.ndim = int32_t(x.dim());
    dl.dtype = to_dl_dtype(x.dtype());
    dl.shape = ctx->shape.empty() ? nullptr : ctx->shape.data();
    dl.strides = ctx->strides.empty() ? nullptr : ctx->strides.data();
    dl.byte_offset = 0;
    // Work enqueued on the default stream must be finished before another library reads it.
    if (!x.device().is_cpu()) backend(x.device()).synchronize();
    ctx->managed.manager_ctx = ctx.get();
    ctx->managed.deleter = &export_deleter;
    *out = &ctx.release()->managed;
  });
}

nx_status nx_tensor_from_dlpack(nx_tensor* out, DLManagedTensor* managed) {
  clear_out(out);
  return guard("nx_tensor_from_dlpack", [&] {
    check_out(out);
    if (!managed) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": managed is NULL");
    const DLTensor& dl = managed->dl_tensor;
    Device dev;
    if (dl.device.device_type == kDLCPU) {
      dev = Device{NX_CPU, 0};
    } else if (dl.device.device_type == kDLCUDA) {
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
    // Extent of the addressed memory, in elements past element 0.
    int64_t last = 0;
    for (int i = 0; i < dl.ndim; ++i) {
      if (shape[size_t(i)] > 1 && strides[size_t(i)] < 0)
        fail(NX_ERR_NOT_IMPLEMENTED, current_api(), ": negative strides are not supported (strides ",
             shape_str(strides), ")");
      if (shape[size_t(i)] > 1) last += (shape[size_t(i)] - 1) * strides[size_t(i)];
      if (strides[size_t(i)] < 0) strides[size_t(i)] = 0;  // unused on a dimension of size <= 1
    }
    if (!dl.data && n > 0) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": data is NULL");
    const size_t esize = dtype_size(dt);
    void* first = static_cast<char*>(dl.data) + dl.byte_offset;
    const size_t extent = n > 0 ? size_t(last + 1) * esize : 0;

    // A Storage that does not own its memory (see the comment at the top of this file). The
    // producer's deleter runs only once the handle exists ("armed"): if anything below fails,
    // managed is left to the caller as documented.
    struct Foreign {
      void* own;
      DLManagedTensor* managed;
      bool armed;
    };
    auto* raw = new Storage(0, Device{NX_CPU, 0});
    Foreign* f = nullptr;
    try {
      f = new Foreign{raw->data, managed, false};
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
      if (f->armed && f->managed->deleter) f->managed->deleter(f->managed);
      delete f;
    });
    raw->data = n > 0 ? first : f->own;
    raw->nbytes = extent;
    raw->device = dev;
    auto impl = std::make_shared<TensorImpl>();
    impl->storage = std::move(storage);
    impl->shape = std::move(shape);
    impl->strides = std::move(strides);
    impl->offset = 0;
    impl->dtype = dt;
    nx_tensor h = wrap(Tensor(std::move(impl)));
    f->armed = true;
    *out = h;
  });
}

}  // extern "C"
