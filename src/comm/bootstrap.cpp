#include "comm/bootstrap.hpp"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/atomic_file.hpp"
#include "core/cuda_iface.hpp"
#ifdef NEXUS_HAVE_MPI
#include <mpi.h>
#endif

namespace nx::dist {
namespace {

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

}  // namespace

void check_rank(int64_t rank, int64_t size) {
  if (size < 1) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": size must be at least 1, got ", size);
  if (rank < 0 || rank >= size)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": rank ", rank, " is outside [0, ", size, ")");
}

std::string id_to_hex(const UniqueId& id) {
  static const char digits[] = "0123456789abcdef";
  std::string hex(2 * kIdBytes, '0');
  for (size_t i = 0; i < kIdBytes; ++i) {
    hex[2 * i] = digits[id.bytes[i] >> 4];
    hex[2 * i + 1] = digits[id.bytes[i] & 15];
  }
  return hex;
}

UniqueId id_from_hex(std::string_view hex, const char* what) {
  if (hex.size() != 2 * kIdBytes)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": ", what, " has ", hex.size(), " characters, expected ", 2 * kIdBytes,
         " hex digits");
  auto digit = [&](size_t at) -> int {
    const char ch = hex[at];
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": ", what, " has a non-hex character at position ", at);
  };
  UniqueId id;
  for (size_t i = 0; i < kIdBytes; ++i) id.bytes[i] = uint8_t(digit(2 * i) * 16 + digit(2 * i + 1));
  return id;
}

void save_id(const UniqueId& id, const std::string& path) {
  // Readers poll for path: they must never see a partly written file (AtomicFile renames a
  // complete, fsynced file into place).
  AtomicFile file(path);
  file.write(id.bytes, kIdBytes);
  file.commit();
}

UniqueId load_id(const std::string& path, double timeout_s) {
  if (!(timeout_s >= 0)) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": timeout_s must be >= 0, got ", timeout_s);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    if (FILE* f = std::fopen(path.c_str(), "rb")) {  // the writer renames a complete file into place
      UniqueId id;
      size_t got = std::fread(id.bytes, 1, kIdBytes, f);
      std::fclose(f);
      if (got != kIdBytes)
        fail(NX_ERR_IO, current_api(), ": ", path, " holds ", got, " bytes, expected a ", kIdBytes, "-byte id");
      return id;
    }
    if (std::chrono::steady_clock::now() >= deadline)
      fail(NX_ERR_IO, current_api(), ": ", path, " did not appear within ", timeout_s, " s (", std::strerror(errno), ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

JoinSpec join_spec_from_env() {
  JoinSpec spec;
  spec.rank = env_int("NEXUS_RANK", 0, true);
  spec.size = env_int("NEXUS_WORLD_SIZE", 0, true);
  const int64_t local = env_int("NEXUS_LOCAL_RANK", spec.rank, false);
  check_rank(spec.rank, spec.size);
  const char* hex = std::getenv("NEXUS_COMM_ID");
  const char* file = std::getenv("NEXUS_COMM_ID_FILE");
  if (!(hex && *hex) && !(file && *file))
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": neither NEXUS_COMM_ID nor NEXUS_COMM_ID_FILE is set");
  spec.id = hex && *hex ? id_from_hex(hex, "NEXUS_COMM_ID") : load_id(file, 60.0);
  if (local < 0 || local > INT32_MAX) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": NEXUS_LOCAL_RANK ", local, " is not a device index");
  spec.cuda_device = int32_t(local);
  return spec;
}

JoinSpec join_spec_from_mpi() {
#ifdef NEXUS_HAVE_MPI
  int initialized = 0, rank = 0, size = 0;
  MPI_Initialized(&initialized);
  if (!initialized) fail(NX_ERR_STATE, current_api(), ": call MPI_Init before ", current_api());
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int devices = cuda::device_count();
  if (devices == 0) fail(NX_ERR_DEVICE, current_api(), ": no CUDA device on this node");
  JoinSpec spec{UniqueId{}, rank, size, rank % devices};
  if (rank == 0) spec.id = unique_id();
  if (MPI_Bcast(spec.id.bytes, int(kIdBytes), MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
    fail(NX_ERR_IO, current_api(), ": MPI_Bcast of the communicator id failed");
  return spec;
#else
  fail(NX_ERR_NOT_IMPLEMENTED, current_api(), ": this build has no MPI support; configure with -DNEXUS_MPI=ON, or "
       "pass the id through nx_comm_create_from_env or nx_comm_id_save/load");
#endif
}

}  // namespace nx::dist
