// The one exception type used inside the engine. The C boundary (src/capi) turns it into an
// nx_status and a thread-local message; nothing else may escape a C function.
#pragma once
#include <exception>
#include <sstream>
#include <string>
#include <vector>

#include "nexus.h"

namespace nx {

class Error : public std::exception {
 public:
  Error(nx_status status, std::string message) : status_(status), message_(std::move(message)) {}
  nx_status status() const { return status_; }
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  nx_status status_;
  std::string message_;
};

inline void append_all(std::ostringstream&) {}
template <class T, class... R>
void append_all(std::ostringstream& os, const T& v, const R&... rest) {
  os << v;
  append_all(os, rest...);
}

// Builds a message from pieces: cat("a is ", shape_str(a), ", b is ", 3).
template <class... A>
std::string cat(const A&... parts) {
  std::ostringstream os;
  append_all(os, parts...);
  return os.str();
}

template <class... A>
[[noreturn]] void fail(nx_status status, const A&... parts) {
  throw Error(status, cat(parts...));
}

std::string shape_str(const std::vector<int64_t>& shape);

// The op name prefix for messages: set by the C shim ("nx_matmul"), read by ops when they fail.
const char* current_api();
// The native stream (cudaStream_t) that the current C call enqueues on; null = the device's
// default stream. Set by the C boundary from the call's nx_stream argument; read by
// exec_context() (core/backend.hpp), which hands it to the backends, and by src/comm for NCCL.
void* current_stream();
void set_current_stream(void* stream);
// Names the running C function and restores the previous name and stream when it returns
// (C calls nest, e.g. inside a checkpoint's segment function).
struct ApiScope {
  const char* previous;
  void* previous_stream;
  explicit ApiScope(const char* name);
  ~ApiScope();
};

}  // namespace nx
