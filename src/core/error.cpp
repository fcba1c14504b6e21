#include "core/error.hpp"

namespace nx {

static thread_local const char* tls_api = "nexus";
static thread_local void* tls_stream = nullptr;

const char* current_api() { return tls_api; }
void* current_stream() { return tls_stream; }
void set_current_stream(void* stream) { tls_stream = stream; }
ApiScope::ApiScope(const char* name) : previous(tls_api), previous_stream(tls_stream) {
  tls_api = name;
  tls_stream = nullptr;
}
ApiScope::~ApiScope() {
  tls_api = previous;
  tls_stream = previous_stream;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace nx
