#include "core/error.hpp"

namespace nx {

static thread_local const char* tls_api = "nexus";

const char* current_api() { return tls_api; }
ApiScope::ApiScope(const char* name) : previous(tls_api) { tls_api = name; }
ApiScope::~ApiScope() { tls_api = previous; }

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace nx
