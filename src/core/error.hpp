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
struct ApiScope {
  const char* previous;
  explicit ApiScope(const char* name);
  ~ApiScope();
};

}  // namespace nx
