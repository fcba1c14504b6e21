#include "comm/ddp.hpp"

#include <unordered_set>

#include "graph/node.hpp"
#include "core/cuda_iface.hpp"
#include "ops/ops.hpp"

namespace nx::dist {

DataParallel::DataParallel(std::shared_ptr<Comm> comm, std::vector<Tensor> params, size_t bucket_bytes)
    : comm_(std::move(comm)), params_(std::move(params)) {
  if (bucket_bytes == 0) bucket_bytes = size_t(25) << 20;  // PyTorch DDP's default
  std::unordered_set<TensorImpl*> seen;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    if (!p.requires_grad() || p.grad_fn())
      fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": parameter ", i, " is not a leaf tensor that requires grad");
    if (p.device() != comm_->device)
      fail(NX_ERR_DEVICE, current_api(), ": parameter ", i, " is on ", device_str(p.device()),
           " but the communicator is on ", device_str(comm_->device));
    if (!p.is_contiguous())
      fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": parameter ", i, " of shape ", shape_str(p.shape()),
           " is a non-contiguous view");
    if (!seen.insert(p.impl()).second)
      fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": parameter ", i, " appears twice in the list");
    if (p.impl()->grad_ready)
      fail(NX_ERR_STATE, current_api(), ": parameter ", i, " already belongs to another data-parallel wrapper");
  }
  // Buckets in reverse order; a new one when the dtype changes or the current one is full.
  bucket_of_.resize(params_.size());
  index_in_bucket_.resize(params_.size());
  std::vector<int64_t> sizes;
  for (size_t k = params_.size(); k-- > 0;) {
    const Tensor& p = params_[k];
    bool fresh = buckets_.empty() || buckets_.back().dtype != p.dtype() ||
                 size_t(sizes.back()) * dtype_size(p.dtype()) >= bucket_bytes;
    if (fresh) {
      buckets_.push_back(Bucket{});
      buckets_.back().dtype = p.dtype();
      sizes.push_back(0);
    }
    Bucket& b = buckets_.back();
    bucket_of_[k] = buckets_.size() - 1;
    index_in_bucket_[k] = b.members.size();
    b.members.push_back(k);
    b.offsets.push_back(sizes.back());
    sizes.back() += p.numel();
  }
  GradModeGuard off(false);
  try {
    for (size_t j = 0; j < buckets_.size(); ++j) {
      Bucket& b = buckets_[j];
      b.buffer = zeros({sizes[j]}, b.dtype, comm_->device);
      b.filled = cuda::event_create(comm_->device.index);
    }
    comm_stream_ = cuda::stream_create(comm_->device.index);
    reduced_ = cuda::event_create(comm_->device.index);
    for (const Tensor& p : params_) broadcast(*comm_, p, 0);
  } catch (...) {
    release();
    throw;
  }
  got_.assign(params_.size(), false);
  for (size_t i = 0; i < params_.size(); ++i) params_[i].impl()->grad_ready = [this, i] { on_grad_ready(i); };
}

DataParallel::~DataParallel() { release(); }

void DataParallel::release() noexcept {
  for (Tensor& p : params_) p.impl()->grad_ready = nullptr;
  const int device = comm_->device.index;
  try {  // nothing to report from a destructor: a CUDA error here leaves the rest to process exit
    if (comm_stream_) cuda::stream_synchronize(device, comm_stream_);
    for (Bucket& b : buckets_)
      if (b.filled) cuda::event_destroy(b.filled);
    if (reduced_) cuda::event_destroy(reduced_);
    if (comm_stream_) cuda::stream_destroy(device, comm_stream_);
  } catch (...) {
  }
}

Tensor DataParallel::slot(size_t i) const {
  const Bucket& b = buckets_[bucket_of_[i]];
  const Tensor& p = params_[i];
  return b.buffer.alias(p.shape(), contiguous_strides(p.shape()), b.buffer.offset() + b.offsets[index_in_bucket_[i]]);
}

void DataParallel::on_grad_ready(size_t i) {
  if (got_[i])
    fail(NX_ERR_STATE, current_api(), ": parameter ", i, " got a second gradient before nx_ddp_finish; call "
         "nx_ddp_finish after every backward");
  got_[i] = true;
  GradModeGuard off(false);
  Tensor s = slot(i);
  copy_(s, Tensor(params_[i].impl()->grad));
  params_[i].impl()->grad = s.impl_ptr();
  Bucket& b = buckets_[bucket_of_[i]];
  ++b.ready;
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].ready == buckets_[next_launch_].members.size())
    launch(next_launch_++);
}

void DataParallel::launch(size_t j) {
  Bucket& b = buckets_[j];
  cuda::event_record(b.filled, current_stream());
  cuda::stream_wait_event(comm_stream_, b.filled);
  StreamScope on_comm(comm_stream_);
  all_reduce(*comm_, b.buffer, Reduce::Avg);
}

void DataParallel::finish() {
  GradModeGuard off(false);
  // A parameter that got no gradient on this rank counts as zero, so that every rank reduces the
  // same buckets and ends with the same gradients.
  for (size_t i = 0; i < params_.size(); ++i)
    if (!got_[i]) {
      Tensor s = slot(i);
      copy_(s, zeros({}, s.dtype(), s.device()));
      params_[i].impl()->grad = s.impl_ptr();
    }
  while (next_launch_ < buckets_.size()) launch(next_launch_++);
  cuda::event_record(reduced_, comm_stream_);
  cuda::stream_wait_event(current_stream(), reduced_);
  for (Bucket& b : buckets_) b.ready = 0;
  got_.assign(params_.size(), false);
  next_launch_ = 0;
}

}  // namespace nx::dist
