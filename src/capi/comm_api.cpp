// C API: communicators (nx_comm), their bootstrap ids, collectives and data parallelism (nx_ddp).
// Arguments are checked before NCCL is touched, so the error paths behave the same in every build.
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "capi/capi.hpp"
#include "comm/comm.hpp"
#include "comm/ddp.hpp"
#ifdef NEXUS_HAVE_MPI
#include <mpi.h>
#endif

struct nx_comm_s {
  std::shared_ptr<nx::dist::Comm> comm;
};
struct nx_ddp_s {
  std::unique_ptr<nx::dist::DataParallel> ddp;
};
NX_HANDLE_OBJECT(nx_comm_s, Comm);
NX_HANDLE_OBJECT(nx_ddp_s, Ddp);

using namespace nx;
using namespace nx::capi;

namespace {

dist::Comm& comm_arg(nx_comm c) {
  return *handle_object(c, "comm").comm;
}
dist::DataParallel& ddp_arg(nx_ddp d) {
  return *handle_object(d, "ddp").ddp;
}
dist::Reduce op_arg(const nx_reduce_op& op) {
  const int v = enum_value(op);
  if (v < NX_REDUCE_SUM || v > NX_REDUCE_PROD)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": invalid reduction ", v, " (NX_REDUCE_SUM..NX_REDUCE_PROD)");
  return dist::Reduce(v);
}
void check_rank(int64_t rank, int64_t size) {
  if (size < 1) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": size must be at least 1, got ", size);
  if (rank < 0 || rank >= size)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": rank ", rank, " is outside [0, ", size, ")");
}
dist::UniqueId id_from_hex(const char* hex, const char* what) {
  if (!hex) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": ", what, " is NULL");
  const size_t n = std::strlen(hex);
  if (n != 2 * dist::kIdBytes)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": ", what, " has ", n, " characters, expected ", 2 * dist::kIdBytes,
         " hex digits");
  auto digit = [&](char ch, size_t at) -> int {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": ", what, " has a non-hex character at position ", at);
  };
  dist::UniqueId id;
  for (size_t i = 0; i < dist::kIdBytes; ++i) id.bytes[i] = uint8_t(digit(hex[2 * i], 2 * i) * 16 + digit(hex[2 * i + 1], 2 * i + 1));
  return id;
}
dist::UniqueId id_from_file(const char* path, double timeout_s) {
  if (!path) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": path is NULL");
  if (!(timeout_s >= 0)) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": timeout_s must be >= 0, got ", timeout_s);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    if (FILE* f = std::fopen(path, "rb")) {  // the writer renames a complete file into place
      dist::UniqueId id;
      size_t got = std::fread(id.bytes, 1, dist::kIdBytes, f);
      std::fclose(f);
      if (got != dist::kIdBytes)
        fail(NX_ERR_IO, current_api(), ": ", path, " holds ", got, " bytes, expected a ", dist::kIdBytes, "-byte id");
      return id;
    }
    if (std::chrono::steady_clock::now() >= deadline)
      fail(NX_ERR_IO, current_api(), ": ", path, " did not appear within ", timeout_s, " s (", std::strerror(errno), ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}
int64_t env_int(const char* name, int64_t fallback, bool required) {
  const char* v = std::getenv(name);
  if (!v || !*v) {
    if (required) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": environment variable ", name, " is not set");
    return fallback;
  }
  char* end = nullptr;
  long long x = std::strtoll(v, &end, 10);
  if (*end) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": environment variable ", name, "='", v, "' is not an integer");
  return x;
}
nx_comm make_comm(const dist::UniqueId& id, int64_t rank, int64_t size, nx_device device) {
  check_rank(rank, size);
  Device d = device_arg(device);
  if (d.is_cpu()) fail(NX_ERR_DEVICE, current_api(), ": communicators live on CUDA devices, got cpu");
  return make_handle(std::make_unique<nx_comm_s>(nx_comm_s{dist::comm_create(id, int(rank), int(size), d.index)}));
}
}  // namespace

extern "C" {

nx_status nx_comm_id_create(nx_comm_id* out) {
  return guard("nx_comm_id_create", [&] {
    check_out(out);
    dist::UniqueId id = dist::unique_id();
    std::memcpy(out->bytes, id.bytes, sizeof out->bytes);
  });
}

nx_status nx_comm_id_to_hex(const nx_comm_id* id, char* buf, size_t capacity, size_t* len) {
  return guard("nx_comm_id_to_hex", [&] {
    if (!id) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": id is NULL");
    check_out(len, "len");
    *len = 2 * NX_COMM_ID_BYTES;
    if (!buf || capacity < *len + 1)
      fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": buffer of ", capacity, " bytes is too small for ", *len,
           " hex digits and a NUL");
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < NX_COMM_ID_BYTES; ++i) {
      buf[2 * i] = digits[id->bytes[i] >> 4];
      buf[2 * i + 1] = digits[id->bytes[i] & 15];
    }
    buf[*len] = 0;
  });
}

nx_status nx_comm_id_from_hex(nx_comm_id* out, const char* hex) {
  return guard("nx_comm_id_from_hex", [&] {
    check_out(out);
    dist::UniqueId id = id_from_hex(hex, "hex");
    std::memcpy(out->bytes, id.bytes, sizeof out->bytes);
  });
}

nx_status nx_comm_id_save(const nx_comm_id* id, const char* path) {
  return guard("nx_comm_id_save", [&] {
    if (!id) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": id is NULL");
    if (!path) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": path is NULL");
    // Readers poll for path: they must never see a partly written file.
    std::string tmp = cat(path, ".tmp", std::this_thread::get_id());
    FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f) fail(NX_ERR_IO, current_api(), ": cannot write ", tmp, ": ", std::strerror(errno));
    bool ok = std::fwrite(id->bytes, 1, NX_COMM_ID_BYTES, f) == NX_COMM_ID_BYTES;
    ok = std::fclose(f) == 0 && ok;
    if (!ok || std::rename(tmp.c_str(), path) != 0) {
      std::remove(tmp.c_str());
      fail(NX_ERR_IO, current_api(), ": cannot write ", path, ": ", std::strerror(errno));
    }
  });
}

nx_status nx_comm_id_load(nx_comm_id* out, const char* path, double timeout_s) {
  return guard("nx_comm_id_load", [&] {
    check_out(out);
    dist::UniqueId id = id_from_file(path, timeout_s);
    std::memcpy(out->bytes, id.bytes, sizeof out->bytes);
  });
}

nx_status nx_comm_create(nx_comm* out, const nx_comm_id* id, int32_t rank, int32_t size, nx_device device) {
  clear_out(out);
  return guard("nx_comm_create", [&] {
    check_out(out);
    if (!id) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": id is NULL");
    dist::UniqueId uid;
    std::memcpy(uid.bytes, id->bytes, sizeof uid.bytes);
    *out = make_comm(uid, rank, size, device);
  });
}

nx_status nx_comm_create_from_env(nx_comm* out) {
  clear_out(out);
  return guard("nx_comm_create_from_env", [&] {
    check_out(out);
    const int64_t rank = env_int("NEXUS_RANK", 0, true), size = env_int("NEXUS_WORLD_SIZE", 0, true);
    const int64_t local = env_int("NEXUS_LOCAL_RANK", rank, false);
    check_rank(rank, size);
    const char* hex = std::getenv("NEXUS_COMM_ID");
    const char* file = std::getenv("NEXUS_COMM_ID_FILE");
    if (!(hex && *hex) && !(file && *file))
      fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": neither NEXUS_COMM_ID nor NEXUS_COMM_ID_FILE is set");
    dist::UniqueId id = hex && *hex ? id_from_hex(hex, "NEXUS_COMM_ID") : id_from_file(file, 60.0);
    if (local < 0 || local > INT32_MAX) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": NEXUS_LOCAL_RANK ", local, " is not a device index");
    *out = make_comm(id, rank, size, nx_device{NX_CUDA, int32_t(local)});
  });
}

nx_status nx_comm_create_mpi(nx_comm* out) {
  clear_out(out);
  return guard("nx_comm_create_mpi", [&] {
    check_out(out);
#ifdef NEXUS_HAVE_MPI
    int initialized = 0, rank = 0, size = 0;
    MPI_Initialized(&initialized);
    if (!initialized) fail(NX_ERR_STATE, current_api(), ": call MPI_Init before nx_comm_create_mpi");
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const int devices = nx_cuda_device_count();
    if (devices == 0) fail(NX_ERR_DEVICE, current_api(), ": no CUDA device on this node");
    dist::UniqueId id{};
    if (rank == 0) id = dist::unique_id();
    if (MPI_Bcast(id.bytes, int(dist::kIdBytes), MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
      fail(NX_ERR_IO, current_api(), ": MPI_Bcast of the communicator id failed");
    *out = make_comm(id, rank, size, nx_device{NX_CUDA, rank % devices});
#else
    fail(NX_ERR_NOT_IMPLEMENTED, current_api(), ": this build has no MPI support; configure with -DNEXUS_MPI=ON, or "
         "pass the id through nx_comm_create_from_env or nx_comm_id_save/load");
#endif
  });
}

nx_status nx_comm_rank(nx_comm comm, int32_t* out) {
  return guard("nx_comm_rank", [&] {
    check_out(out);
    *out = comm_arg(comm).rank;
  });
}
nx_status nx_comm_size(nx_comm comm, int32_t* out) {
  return guard("nx_comm_size", [&] {
    check_out(out);
    *out = comm_arg(comm).size;
  });
}
nx_status nx_comm_device(nx_comm comm, nx_device* out) {
  return guard("nx_comm_device", [&] {
    check_out(out);
    *out = comm_arg(comm).device.to_c();
  });
}
void nx_comm_free(nx_comm comm) { free_handle(comm); }

nx_status nx_comm_all_reduce(nx_tensor t, nx_comm comm, nx_reduce_op op, nx_stream stream) {
  return guard("nx_comm_all_reduce", [&] {
    auto& c = comm_arg(comm);
    const Tensor& x = unwrap(t, "t");
    dist::Reduce r = op_arg(op);
    check_stream(stream, c.device);
    dist::all_reduce(c, x, r);
  });
}
nx_status nx_comm_broadcast(nx_tensor t, nx_comm comm, int32_t root, nx_stream stream) {
  return guard("nx_comm_broadcast", [&] {
    auto& c = comm_arg(comm);
    const Tensor& x = unwrap(t, "t");
    check_stream(stream, c.device);
    dist::broadcast(c, x, root);
  });
}
nx_status nx_comm_reduce_scatter(nx_tensor* out, nx_tensor x, nx_comm comm, nx_reduce_op op, nx_stream stream) {
  clear_out(out);
  return guard("nx_comm_reduce_scatter", [&] {
    check_out(out);
    auto& c = comm_arg(comm);
    const Tensor& xt = unwrap(x, "x");
    dist::Reduce r = op_arg(op);
    check_stream(stream, c.device);
    *out = wrap(dist::reduce_scatter(c, xt, r));
  });
}
nx_status nx_comm_all_gather(nx_tensor* out, nx_tensor x, nx_comm comm, nx_stream stream) {
  clear_out(out);
  return guard("nx_comm_all_gather", [&] {
    check_out(out);
    auto& c = comm_arg(comm);
    const Tensor& xt = unwrap(x, "x");
    check_stream(stream, c.device);
    *out = wrap(dist::all_gather(c, xt));
  });
}

nx_status nx_ddp_create(nx_ddp* out, const nx_tensor* params, size_t n, nx_comm comm, size_t bucket_bytes,
                        nx_stream stream) {
  clear_out(out);
  return guard("nx_ddp_create", [&] {
    check_out(out);
    if (!params && n) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": params is NULL but n is ", n);
    if (n == 0) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": no parameters (n is 0)");
    auto& c = comm_arg(comm);
    std::vector<Tensor> ps;
    for (size_t i = 0; i < n; ++i) ps.push_back(unwrap(params[i], "params[i]"));
    check_stream(stream, c.device);
    auto ddp = std::make_unique<dist::DataParallel>(handle_object(comm, "comm").comm, std::move(ps), bucket_bytes);
    *out = make_handle(std::make_unique<nx_ddp_s>(nx_ddp_s{std::move(ddp)}));
  });
}
nx_status nx_ddp_finish(nx_ddp ddp, nx_stream stream) {
  return guard("nx_ddp_finish", [&] {
    auto& d = ddp_arg(ddp);
    check_stream(stream, d.device());
    d.finish();
  });
}
nx_status nx_ddp_bucket_count(nx_ddp ddp, size_t* out) {
  return guard("nx_ddp_bucket_count", [&] {
    check_out(out);
    *out = ddp_arg(ddp).bucket_count();
  });
}
void nx_ddp_free(nx_ddp ddp) { free_handle(ddp); }

}  // extern "C"
