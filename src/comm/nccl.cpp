// The NCCL side of src/dist/comm.hpp. NCCL calls need the rank's device current on the calling
// thread; the CUDA backend caches the current device per thread, so we restore the previous one
// rather than leave the cache stale.
#ifdef NEXUS_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>

#include "core/cuda_iface.hpp"
#include "comm/comm.hpp"

static_assert(nx::dist::kIdBytes == NCCL_UNIQUE_ID_BYTES, "kIdBytes must match NCCL's unique id");

namespace nx::dist {
namespace {

void check(ncclResult_t r, const char* what) {
  if (r == ncclSuccess || r == ncclInProgress) return;
  const char* detail = ncclGetLastError(nullptr);
  fail(r == ncclInvalidArgument || r == ncclInvalidUsage ? NX_ERR_INVALID_ARGUMENT : NX_ERR_CUDA, current_api(),
       ": NCCL error in ", what, ": ", ncclGetErrorString(r), detail && *detail ? cat(" (", detail, ")") : "");
}

struct DeviceScope {  // makes device current, restores the previous one
  int previous = 0;
  explicit DeviceScope(int device) {
    cudaGetDevice(&previous);
    if (cudaSetDevice(device) != cudaSuccess) {
      cudaGetLastError();
      fail(NX_ERR_DEVICE, current_api(), ": cannot use cuda:", device);
    }
  }
  ~DeviceScope() { cudaSetDevice(previous); }
};

ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::F16: return ncclFloat16;
    case DType::BF16: return ncclBfloat16;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
    case DType::Bool: return ncclUint8;
    default: break;  // the 8-bit storage dtypes: collectives compute, so they refuse them
  }
  fail(NX_ERR_DTYPE, current_api(), ": dtype ", dtype_name(d), " has no NCCL type");
}

ncclRedOp_t nccl_op(Reduce op) {
  switch (op) {
    case Reduce::Sum: return ncclSum;
    case Reduce::Avg: return ncclAvg;
    case Reduce::Max: return ncclMax;
    case Reduce::Min: return ncclMin;
    case Reduce::Prod: return ncclProd;
  }
  fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": unknown reduction");
}

ncclComm_t native(Comm& c) { return static_cast<ncclComm_t>(c.native); }
cudaStream_t stream() { return static_cast<cudaStream_t>(current_stream()); }

// NVLink SHARP (NVLS) multicast buffers are not available on the lent machines; NCCL reads the
// variable at init, so it must be set before the first communicator.
void disable_nvls() { setenv("NCCL_NVLS_ENABLE", "0", 0); }

}  // namespace

Comm::~Comm() {
  if (native) ncclCommDestroy(static_cast<ncclComm_t>(native));
}

bool nccl_compiled() { return true; }

UniqueId unique_id() {
  if (cuda::device_count() == 0) fail(NX_ERR_DEVICE, current_api(), ": no CUDA device, so no NCCL communicator");
  disable_nvls();
  ncclUniqueId id;
  check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  UniqueId out;
  std::memcpy(out.bytes, id.internal, kIdBytes);
  return out;
}

std::unique_ptr<Comm> comm_create(const UniqueId& id, int rank, int size, int device) {
  disable_nvls();
  DeviceScope scope(device);
  ncclUniqueId nid;
  std::memcpy(nid.internal, id.bytes, kIdBytes);
  auto c = std::make_unique<Comm>();
  ncclComm_t comm = nullptr;
  check(ncclCommInitRank(&comm, size, nid, rank), "ncclCommInitRank");
  c->native = comm;
  c->rank = rank;
  c->size = size;
  c->device = Device{NX_CUDA, device};
  return c;
}

void nccl_all_reduce(Comm& c, const void* send, void* recv, size_t count, DType dtype, Reduce op) {
  DeviceScope scope(c.device.index);
  check(ncclAllReduce(send, recv, count, nccl_type(dtype), nccl_op(op), native(c), stream()), "ncclAllReduce");
}
void nccl_reduce_scatter(Comm& c, const void* send, void* recv, size_t recv_count, DType dtype, Reduce op) {
  DeviceScope scope(c.device.index);
  check(ncclReduceScatter(send, recv, recv_count, nccl_type(dtype), nccl_op(op), native(c), stream()),
        "ncclReduceScatter");
}
void nccl_all_gather(Comm& c, const void* send, void* recv, size_t send_count, DType dtype) {
  DeviceScope scope(c.device.index);
  check(ncclAllGather(send, recv, send_count, nccl_type(dtype), native(c), stream()), "ncclAllGather");
}
void nccl_broadcast(Comm& c, void* buf, size_t count, DType dtype, int root) {
  DeviceScope scope(c.device.index);
  check(ncclBroadcast(buf, buf, count, nccl_type(dtype), root, native(c), stream()), "ncclBroadcast");
}

}  // namespace nx::dist
#endif
