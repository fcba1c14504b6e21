// How the ranks of one communicator agree on its id and find their place: the id travels as hex
// (an environment variable), as a file that one rank writes and the others wait for, or over
// MPI. Messages name the running C function (current_api()).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "comm/comm.hpp"

namespace nx::dist {

// NX_ERR_INVALID_ARGUMENT unless size >= 1 and 0 <= rank < size.
void check_rank(int64_t rank, int64_t size);

std::string id_to_hex(const UniqueId& id);  // 2 * kIdBytes lowercase digits
// what names the text in messages ("hex", "NEXUS_COMM_ID").
UniqueId id_from_hex(std::string_view hex, const char* what);
// Atomically (a temporary file, then rename): readers poll for path.
void save_id(const UniqueId& id, const std::string& path);
// Waits up to timeout_s seconds for path to appear.
UniqueId load_id(const std::string& path, double timeout_s);

// What a rank needs to join a communicator.
struct JoinSpec {
  UniqueId id;
  int64_t rank = 0, size = 1;
  int32_t cuda_device = 0;
};
// From NEXUS_RANK, NEXUS_WORLD_SIZE, NEXUS_COMM_ID or NEXUS_COMM_ID_FILE (waited for up to 60 s)
// and NEXUS_LOCAL_RANK (default: the rank).
JoinSpec join_spec_from_env();
// Rank 0 makes the id and broadcasts it over MPI_COMM_WORLD; device rank % device count.
// NX_ERR_NOT_IMPLEMENTED in builds without MPI (-DNEXUS_MPI=ON).
JoinSpec join_spec_from_mpi();

}  // namespace nx::dist
