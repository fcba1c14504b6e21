// Collective communication between ranks (one per CUDA device, in one or several processes).
// The raw layer (Comm, comm_create, nccl_*) is NCCL: src/dist/nccl.cpp when NCCL is compiled in,
// src/dist/nccl_stubs.cpp otherwise (NX_ERR_DEVICE "built without NCCL"). The tensor layer
// (all_reduce, ..., in collectives.cpp) checks tensors and is shared by the C API and DDP.
// Everything is enqueued on current_stream() (null: the device's default stream).
#pragma once
#include <cstdint>
#include <memory>

#include "core/tensor.hpp"

namespace nx::dist {

constexpr size_t kIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
struct UniqueId {
  uint8_t bytes[kIdBytes];
};
enum class Reduce { Sum, Avg, Max, Min, Prod };

struct Comm {
  int rank = 0, size = 1;
  Device device;
  void* native = nullptr;  // ncclComm_t
  ~Comm();                 // ncclCommDestroy
};

bool nccl_compiled();
// A fresh id (rank 0 makes it and passes it to the others). Starts NCCL's bootstrap listener in
// this process, which must stay alive until every rank has called comm_create.
UniqueId unique_id();
// Blocks until all size ranks have joined. Sets NCCL_NVLS_ENABLE=0 first when it is unset.
std::unique_ptr<Comm> comm_create(const UniqueId& id, int rank, int size, int device);

// Raw collectives on contiguous device buffers of count elements of dtype.
void nccl_all_reduce(Comm& c, const void* send, void* recv, size_t count, DType dtype, Reduce op);
void nccl_reduce_scatter(Comm& c, const void* send, void* recv, size_t recv_count, DType dtype, Reduce op);
void nccl_all_gather(Comm& c, const void* send, void* recv, size_t send_count, DType dtype);
void nccl_broadcast(Comm& c, void* buf, size_t count, DType dtype, int root);

// Tensor collectives (not recorded by autodiff). In-place ones need a contiguous t on c.device
// and bump its version counter.
void all_reduce(Comm& c, const Tensor& t, Reduce op);
void broadcast(Comm& c, const Tensor& t, int root);
// x [n * size, ...] -> this rank's [n, ...] block of the reduction.
Tensor reduce_scatter(Comm& c, const Tensor& x, Reduce op);
// x [n, ...] -> [n * size, ...], rank r's x at block r.
Tensor all_gather(Comm& c, const Tensor& x);

// Makes a native stream current for the rest of a scope (collectives on a side stream).
struct StreamScope {
  void* previous;
  explicit StreamScope(void* stream) : previous(current_stream()) { set_current_stream(stream); }
  ~StreamScope() { set_current_stream(previous); }
};

}  // namespace nx::dist
