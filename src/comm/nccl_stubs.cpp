// Without NCCL (no CUDA, or NCCL not found at configure time) no communicator can exist: the
// entry points that would make one report NX_ERR_DEVICE; the others are unreachable.
#ifndef NEXUS_HAVE_NCCL
#include "comm/comm.hpp"

namespace nx::dist {

[[noreturn]] static void unavailable() {
  fail(NX_ERR_DEVICE, current_api(), ": this build of NexusGrad was built without NCCL, so it has no multi-GPU "
       "communication; rebuild with -DNEXUS_CUDA=ON where nccl.h and libnccl are installed");
}

Comm::~Comm() = default;
bool nccl_compiled() { return false; }
UniqueId unique_id() { unavailable(); }
std::unique_ptr<Comm> comm_create(const UniqueId&, int, int, int) { unavailable(); }
void nccl_all_reduce(Comm&, const void*, void*, size_t, DType, Reduce) { unavailable(); }
void nccl_reduce_scatter(Comm&, const void*, void*, size_t, DType, Reduce) { unavailable(); }
void nccl_all_gather(Comm&, const void*, void*, size_t, DType) { unavailable(); }
void nccl_broadcast(Comm&, void*, size_t, DType, int) { unavailable(); }

}  // namespace nx::dist
#endif
