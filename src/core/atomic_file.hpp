// Replacing a file all at once: every file the engine writes (module and optimizer state,
// SafeTensors, tokenizers, communicator ids) goes through AtomicFile, so that a kill, a crash or
// a full disk at any moment of a save leaves at the path either the previous file, untouched, or
// the complete new one; never a truncated mix. In core, so that io and comm both use it.
//
// How: the bytes go to a temporary file in the same directory (".<name>.tmp-<pid>-<n>": same
// filesystem, so the rename is atomic; hidden, and not matched by "*.safetensors"), which is
// fsynced and closed, renamed over the path, and then the directory is fsynced so that the
// rename itself survives a power loss. Any failure (open, write, fsync, close or rename; a full
// disk shows up as ENOSPC or EFBIG in write or fsync) throws NX_ERR_IO naming the running C
// function, the path and strerror, removes the temporary and leaves the path as it was. A
// process killed mid-save cannot clean up: its temporary stays beside the path.
//
// The new file keeps the permission bits of the file it replaces (0666 minus the umask for a new
// one). A symbolic link at the path is replaced by the new file, its target left as it was.
#pragma once
#include <cstddef>
#include <string>

namespace nx {

class AtomicFile {
 public:
  // Creates the temporary file beside path.
  explicit AtomicFile(std::string path);
  // Without commit(): the temporary is removed and path is left as it was.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);
  void write(const std::string& bytes) { write(bytes.data(), bytes.size()); }
  // fsync, close, rename over path, fsync the directory. Once only.
  void commit();

 private:
  [[noreturn]] void fail_io(const std::string& step, int err);
  void discard() noexcept;  // closes and removes the temporary, if still there
  std::string path_, tmp_, dir_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace nx
