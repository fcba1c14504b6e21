#include "core/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.hpp"

namespace nx {
namespace {

// Temporary names are unique within the process (the counter) and across processes (the pid);
// O_EXCL makes a leftover of a killed process with a reused pid a retry, not a clash.
std::atomic<uint64_t> g_temp_counter{0};
constexpr size_t kMaxBaseInTempName = 200;  // the temporary's name must stay under NAME_MAX (255)

// Linux frees the descriptor even when close reports EINTR: never close it twice.
int close_once(int fd) { return ::close(fd) == 0 || errno == EINTR ? 0 : errno; }

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  const size_t slash = path_.rfind('/');
  dir_ = slash == std::string::npos ? "." : slash == 0 ? "/" : path_.substr(0, slash);
  const std::string base = slash == std::string::npos ? path_ : path_.substr(slash + 1);
  if (base.empty() || base == "." || base == "..")
    fail(NX_ERR_IO, current_api(), ": cannot write \"", path_, "\": the path names a directory, not a file");
  const std::string prefix = (slash == std::string::npos ? std::string() : path_.substr(0, slash + 1)) + "." +
                             base.substr(0, kMaxBaseInTempName) + ".tmp-" + std::to_string(::getpid()) + "-";
  for (int attempt = 0;; ++attempt) {
    tmp_ = prefix + std::to_string(g_temp_counter.fetch_add(1));
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ >= 0) break;
    if (errno == EINTR || (errno == EEXIST && attempt < 100)) continue;
    const int err = errno;
    fail(NX_ERR_IO, current_api(), ": cannot write ", path_, ": creating the temporary file ", tmp_, " failed: ",
         std::strerror(err));
  }
  // Replacing a file must not change who may read it. Best effort: a file system without
  // permission bits refuses fchmod, and the save is still worth doing.
  struct stat old;
  if (::stat(path_.c_str(), &old) == 0 && S_ISREG(old.st_mode)) (void)::fchmod(fd_, old.st_mode & 07777);
}

AtomicFile::~AtomicFile() { discard(); }

void AtomicFile::discard() noexcept {
  if (fd_ >= 0) {
    close_once(fd_);
    fd_ = -1;
  }
  if (!committed_ && !tmp_.empty()) {
    ::unlink(tmp_.c_str());
    tmp_.clear();
  }
}

void AtomicFile::fail_io(const std::string& step, int err) {
  discard();
  fail(NX_ERR_IO, current_api(), ": cannot write ", path_, ": ", step, " failed: ", std::strerror(err),
       " (the previous file, if any, is unchanged)");
}

void AtomicFile::write(const void* data, size_t n) {
  if (fd_ < 0) fail(NX_ERR_INTERNAL, current_api(), ": AtomicFile::write on ", path_, " after commit or failure");
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t done = ::write(fd_, p, n);  // a full disk: ENOSPC (or EFBIG past the file-size limit)
    if (done < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      fail_io("writing the temporary file " + tmp_, err);
    }
    p += done;
    n -= size_t(done);
  }
}

void AtomicFile::commit() {
  if (fd_ < 0) fail(NX_ERR_INTERNAL, current_api(), ": AtomicFile::commit on ", path_, " twice or after a failure");
  // The data must be on disk before the rename makes it the file at path_: otherwise a power
  // loss could leave a renamed, empty file (the delayed-allocation problem of ext4 and others).
  if (::fsync(fd_) != 0) {
    const int err = errno;
    fail_io("fsync of the temporary file " + tmp_, err);
  }
  const int close_err = close_once(fd_);  // NFS reports a failed write-back here
  fd_ = -1;
  if (close_err) fail_io("closing the temporary file " + tmp_, close_err);
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    fail_io("renaming " + tmp_ + " over it", err);
  }
  committed_ = true;
  // The rename is durable only once the directory is synced. Past this point the new file is in
  // place: a failure is still reported, as the save may not survive a power loss. A directory
  // that cannot be opened for reading, or a file system that cannot sync directories (EINVAL),
  // offers no way to do it: that is not an error.
  const int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    const int err = errno;
    if (err == EACCES) return;
    fail(NX_ERR_IO, current_api(), ": ", path_, " was written, but opening its directory ", dir_,
         " to sync it failed: ", std::strerror(err));
  }
  const int err = ::fsync(dfd) == 0 ? 0 : errno;
  close_once(dfd);
  if (err != 0 && err != EINVAL && err != ENOTSUP)
    fail(NX_ERR_IO, current_api(), ": ", path_, " was written, but fsync of its directory ", dir_,
         " failed: ", std::strerror(err));
}

}  // namespace nx
