#include "core/tensor.hpp"

#include "core/backend.hpp"

namespace nx {

std::string device_str(Device d) {
  return cat(d.type == NX_CPU ? "cpu" : "cuda", ":", d.index);
}

Storage::Storage(size_t n, Device dev) : nbytes(n), device(dev) {
  data = backend(dev).allocate(exec_context(dev), n);
}
Storage::~Storage() { backend(device).deallocate(data, nbytes); }
void Storage::set_value_range(int64_t lo, int64_t hi) {
  std::lock_guard<std::mutex> lock(range_mutex_);
  range_lo_ = lo, range_hi_ = hi, range_version_ = version.load();
}
void Storage::mark_shared() {
  std::lock_guard<std::mutex> lock(range_mutex_);
  shared_ = true;
}
bool Storage::value_range(int64_t* lo, int64_t* hi) const {
  std::lock_guard<std::mutex> lock(range_mutex_);
  if (shared_ || range_version_ != version.load()) return false;
  *lo = range_lo_, *hi = range_hi_;
  return true;
}

int64_t numel_of(const Shape& shape) {
  for (int64_t s : shape)
    if (s == 0) return 0;
  int64_t n = 1;
  for (int64_t s : shape)
    if (__builtin_mul_overflow(n, s, &n))
      fail(NX_ERR_SHAPE, current_api(), ": shape ", shape_str(shape), " has more elements than an int64 can count");
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape st(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    st[i] = acc;
    // unsigned: the running product may pass int64 only for empty tensors, whose strides are unused
    acc = int64_t(uint64_t(acc) * uint64_t(std::max<int64_t>(shape[i], 1)));
  }
  return st;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t s : shape)
    if (s < 0) fail(NX_ERR_SHAPE, current_api(), ": negative dimension in shape ", shape_str(shape));
  // An element count past int64 is a shape error (numel_of); a byte count past size_t, memory.
  size_t nbytes = 0;
  if (__builtin_mul_overflow(size_t(numel_of(shape)), dtype_size(dtype), &nbytes))
    fail(NX_ERR_OUT_OF_MEMORY, current_api(), ": a tensor of shape ", shape_str(shape), " and dtype ",
         dtype_name(dtype), " needs more bytes than the address space holds");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(nbytes, device);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

int64_t Tensor::size(int64_t axis) const { return shape()[size_t(wrap_axis(axis, dim()))]; }

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;  // no element is ever addressed
  int64_t expected = 1;
  for (size_t i = impl_->shape.size(); i-- > 0;) {
    if (impl_->shape[i] == 1) continue;
    if (impl_->strides[i] != expected) return false;
    expected *= impl_->shape[i];
  }
  return true;
}

Tensor Tensor::alias(const Shape& shape, const Shape& strides, int64_t offset) const {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = impl_->dtype;
  return Tensor(std::move(impl));
}

int64_t wrap_axis(int64_t axis, int64_t ndim, const char* what) {
  int64_t lo = -std::max<int64_t>(ndim, 1), hi = std::max<int64_t>(ndim, 1) - 1;
  if (axis < lo || axis > hi)
    fail(NX_ERR_SHAPE, current_api(), ": ", what, " ", axis, " is out of range for a tensor of rank ",
         ndim, " (expected ", lo, "..", hi, ")");
  return axis < 0 ? axis + std::max<int64_t>(ndim, 1) : axis;
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      fail(NX_ERR_SHAPE, current_api(), ": shapes ", shape_str(a), " and ", shape_str(b),
           " do not broadcast (dimension ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace nx
