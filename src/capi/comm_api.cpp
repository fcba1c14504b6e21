// C API: communicators (nx_comm), their bootstrap ids, collectives and data parallelism (nx_ddp).
// Arguments are checked before NCCL is touched, so the error paths behave the same in every build.
#include "capi/capi.hpp"
#include "comm/bootstrap.hpp"
#include "comm/comm.hpp"
#include "comm/ddp.hpp"

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

static_assert(NX_COMM_ID_BYTES == dist::kIdBytes, "nx_comm_id and dist::UniqueId hold the same bytes");

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
dist::UniqueId id_arg(const nx_comm_id* id) {
  if (!id) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": id is NULL");
  dist::UniqueId uid;
  std::memcpy(uid.bytes, id->bytes, sizeof uid.bytes);
  return uid;
}
void write_id(nx_comm_id* out, const dist::UniqueId& id) {
  std::memcpy(out->bytes, id.bytes, sizeof out->bytes);
}
nx_comm make_comm(const dist::UniqueId& id, int64_t rank, int64_t size, nx_device device) {
  dist::check_rank(rank, size);
  Device d = device_arg(device);
  if (d.is_cpu()) fail(NX_ERR_DEVICE, current_api(), ": communicators live on CUDA devices, got cpu");
  return make_handle(std::make_unique<nx_comm_s>(nx_comm_s{dist::comm_create(id, int(rank), int(size), d.index)}));
}
nx_comm make_comm(const dist::JoinSpec& spec) {
  return make_comm(spec.id, spec.rank, spec.size, nx_device{NX_CUDA, spec.cuda_device});
}
}  // namespace

extern "C" {

nx_status nx_comm_id_create(nx_comm_id* out) {
  return guard("nx_comm_id_create", [&] {
    check_out(out);
    write_id(out, dist::unique_id());
  });
}

nx_status nx_comm_id_to_hex(const nx_comm_id* id, char* buf, size_t capacity, size_t* len) {
  return guard("nx_comm_id_to_hex", [&] {
    std::string hex = dist::id_to_hex(id_arg(id));
    check_out(len, "len");
    *len = hex.size();
    if (!buf || capacity < *len + 1)
      fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": buffer of ", capacity, " bytes is too small for ", *len,
           " hex digits and a NUL");
    std::memcpy(buf, hex.c_str(), *len + 1);
  });
}

nx_status nx_comm_id_from_hex(nx_comm_id* out, const char* hex) {
  return guard("nx_comm_id_from_hex", [&] {
    check_out(out);
    check_out(hex, "hex");
    write_id(out, dist::id_from_hex(hex, "hex"));
  });
}

nx_status nx_comm_id_save(const nx_comm_id* id, const char* path) {
  return guard("nx_comm_id_save", [&] {
    dist::UniqueId uid = id_arg(id);
    check_out(path, "path");
    dist::save_id(uid, path);
  });
}

nx_status nx_comm_id_load(nx_comm_id* out, const char* path, double timeout_s) {
  return guard("nx_comm_id_load", [&] {
    check_out(out);
    check_out(path, "path");
    write_id(out, dist::load_id(path, timeout_s));
  });
}

nx_status nx_comm_create(nx_comm* out, const nx_comm_id* id, int32_t rank, int32_t size, nx_device device) {
  clear_out(out);
  return guard("nx_comm_create", [&] {
    check_out(out);
    *out = make_comm(id_arg(id), rank, size, device);
  });
}

nx_status nx_comm_create_from_env(nx_comm* out) {
  clear_out(out);
  return guard("nx_comm_create_from_env", [&] {
    check_out(out);
    *out = make_comm(dist::join_spec_from_env());
  });
}

nx_status nx_comm_create_mpi(nx_comm* out) {
  clear_out(out);
  return guard("nx_comm_create_mpi", [&] {
    check_out(out);
    *out = make_comm(dist::join_spec_from_mpi());
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
