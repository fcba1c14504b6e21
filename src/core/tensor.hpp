// Tensor = shared handle to TensorImpl: a strided view (shape, strides in elements, offset) of a
// reference-counted Storage, plus the autodiff metadata. Kernels never see this type; they get
// a View (src/core/backend.hpp).
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"

namespace nx {

using Shape = std::vector<int64_t>;

struct Device {
  nx_device_type type = NX_CPU;
  int32_t index = 0;
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  bool is_cpu() const { return type == NX_CPU; }
  nx_device to_c() const { return nx_device{type, index}; }
};
std::string device_str(Device d);

struct Storage {
  void* data = nullptr;
  size_t nbytes = 0;
  Device device;
  std::atomic<uint64_t> version{0};  // bumped by every in-place write; checked by autodiff
  // Bounds of an integer storage's values known without reading the device (an upload from the
  // host scans them; an index op that checked a whole storage records them), valid while
  // `version` is unchanged: index ops then skip their range check, a host round trip on a GPU.
  void set_value_range(int64_t lo, int64_t hi);
  bool value_range(int64_t* lo, int64_t* hi) const;
  // Others may now write the memory without bumping `version` (a DLPack export, a raw pointer
  // handed out): no value range is trusted from then on.
  void mark_shared();
  Storage(size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

 private:
  mutable std::mutex range_mutex_;
  int64_t range_lo_ = 0, range_hi_ = -1;
  uint64_t range_version_ = UINT64_MAX;  // no range known
  bool shared_ = false;
};

struct Node;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape, strides;
  int64_t offset = 0;
  DType dtype = DType::F32;
  // autodiff
  bool requires_grad = false;         // leaf flag, or "has a grad_fn" for non-leaves
  std::shared_ptr<Node> grad_fn;      // producer in the graph (null for leaves)
  uint32_t output_nr = 0;             // which output of grad_fn this is
  std::shared_ptr<TensorImpl> grad;   // accumulated gradient of a leaf
  // Called by backward once this leaf's gradient for that backward is final (its last incoming
  // edge was visited): data parallelism starts reducing it while backward goes on.
  std::function<void()> grad_ready;
};

int64_t numel_of(const Shape& shape);
Shape contiguous_strides(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // A new uninitialized contiguous tensor.
  static Tensor empty(const Shape& shape, DType dtype, Device device);

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

  const Shape& shape() const { return impl_->shape; }
  const Shape& strides() const { return impl_->strides; }
  int64_t dim() const { return int64_t(impl_->shape.size()); }
  int64_t size(int64_t axis) const;
  int64_t numel() const { return numel_of(impl_->shape); }
  DType dtype() const { return impl_->dtype; }
  Device device() const { return impl_->storage->device; }
  int64_t offset() const { return impl_->offset; }
  bool is_contiguous() const;
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype()); }
  // Address of element 0 of this view.
  void* data() const {
    return static_cast<char*>(impl_->storage->data) + impl_->offset * int64_t(dtype_size(dtype()));
  }
  template <class T> T* data_as() const { return static_cast<T*>(data()); }

  // A new TensorImpl sharing storage with different geometry (no autodiff metadata).
  Tensor alias(const Shape& shape, const Shape& strides, int64_t offset) const;

  bool requires_grad() const { return impl_->requires_grad; }
  const std::shared_ptr<Node>& grad_fn() const { return impl_->grad_fn; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// Normalizes a possibly negative axis for a tensor of rank ndim (ndim+1 when inserting).
int64_t wrap_axis(int64_t axis, int64_t ndim, const char* what = "axis");
// Broadcast of two shapes (NumPy rules); fails with NX_ERR_SHAPE.
Shape broadcast_shapes(const Shape& a, const Shape& b);

}  // namespace nx
