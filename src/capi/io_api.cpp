// C API: SafeTensors files.
#include "capi/capi.hpp"
#include "io/safetensors.hpp"

struct nx_safetensors_s {
  nx::SafeTensorsFile file;
};
NX_HANDLE_OBJECT(nx_safetensors_s, SafeTensors);

using namespace nx;
using namespace nx::capi;

namespace {
const SafeTensorsFile& file_arg(nx_safetensors st) { return handle_object(st, "st").file; }
}  // namespace

extern "C" {

nx_status nx_safetensors_open(nx_safetensors* out, const char* path) {
  clear_out(out);
  return guard("nx_safetensors_open", [&] {
    check_out(out);
    check_out(path, "path");
    *out = make_handle(std::make_unique<nx_safetensors_s>(nx_safetensors_s{SafeTensorsFile::open(path)}));
  });
}
nx_status nx_safetensors_count(nx_safetensors st, size_t* out) {
  return guard("nx_safetensors_count", [&] {
    check_out(out);
    *out = file_arg(st).entries().size();
  });
}
nx_status nx_safetensors_name(nx_safetensors st, size_t i, const char** out) {
  return guard("nx_safetensors_name", [&] {
    check_out(out);
    const auto& entries = file_arg(st).entries();
    if (i >= entries.size())
      fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": index ", i, " out of range (file has ", entries.size(), " tensors)");
    *out = entries[i].name.c_str();
  });
}
nx_status nx_safetensors_get(nx_tensor* out, nx_safetensors st, const char* name, nx_device device, nx_stream stream) {
  clear_out(out);
  return guard("nx_safetensors_get", [&] {
    check_out(out);
    check_out(name, "name");
    Device d = device_arg(device);
    check_stream(stream, d);
    *out = wrap(file_arg(st).get(name, d));
  });
}
nx_status nx_safetensors_metadata(nx_safetensors st, const char* key, const char** out) {
  return guard("nx_safetensors_metadata", [&] {
    check_out(out);
    check_out(key, "key");
    const auto& md = file_arg(st).metadata();
    auto it = md.find(key);
    *out = it == md.end() ? nullptr : it->second.c_str();
  });
}
void nx_safetensors_free(nx_safetensors st) { free_handle(st); }
nx_status nx_safetensors_save(const char* path, const char* const* names, const nx_tensor* tensors, size_t n) {
  return guard("nx_safetensors_save", [&] {
    check_out(path, "path");
    if (n && (!names || !tensors)) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": names or tensors is NULL");
    std::vector<std::pair<std::string, Tensor>> items;
    for (size_t i = 0; i < n; ++i) {
      if (!names[i]) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": names[", i, "] is NULL");
      items.emplace_back(names[i], unwrap(tensors[i], "an element of tensors"));
    }
    save_safetensors(path, items);
  });
}

}  // extern "C"
