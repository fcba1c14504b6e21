// Data-parallel gradients: each rank runs forward and backward on its shard of the batch; the
// gradients are averaged over the ranks while backward is still running.
//
// Parameters are grouped into buckets (reverse registration order, since backward produces the
// last layers' gradients first). A grad_ready hook on each parameter (autograd engine) copies its
// final gradient into the bucket's flat buffer on the compute stream; when a bucket is full it
// records an event there, the communication stream waits for it and all-reduces (average) the
// buffer. Buckets launch strictly in index order so that every rank issues the same sequence of
// NCCL calls. finish() launches what is left, makes the compute stream wait for the reductions,
// and leaves every .grad a view of its bucket.
#pragma once
#include <memory>
#include <vector>

#include "comm/comm.hpp"

namespace nx::dist {

class DataParallel {
 public:
  // Broadcasts the parameters from rank 0 (on the current stream) and installs the hooks.
  DataParallel(std::shared_ptr<Comm> comm, std::vector<Tensor> params, size_t bucket_bytes);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;
  // After backward: every gradient is the average over ranks once the current stream gets there.
  void finish();
  size_t bucket_count() const { return buckets_.size(); }
  Device device() const { return comm_->device; }

 private:
  struct Bucket {
    DType dtype = DType::F32;
    Tensor buffer;                 // flat, the members' gradients back to back
    std::vector<size_t> members;   // parameter indices
    std::vector<int64_t> offsets;  // element offset of each member in buffer
    size_t ready = 0;
    void* filled = nullptr;        // event: compute stream wrote the buffer
  };
  void on_grad_ready(size_t param);
  void release() noexcept;  // hooks off, then the stream and events (after the reductions end)
  void launch(size_t bucket);
  Tensor slot(size_t param) const;

  std::shared_ptr<Comm> comm_;
  std::vector<Tensor> params_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_, index_in_bucket_;
  std::vector<bool> got_;  // parameter reported ready since the last finish()
  size_t next_launch_ = 0;
  void* comm_stream_ = nullptr;
  void* reduced_ = nullptr;  // event: the reductions so far are done
};

}  // namespace nx::dist
