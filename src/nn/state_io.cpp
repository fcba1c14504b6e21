#include "nn/state_io.hpp"

#include "io/safetensors.hpp"

namespace nx::nn {

void save_state(Module& module, const std::string& path) {
  std::vector<std::pair<std::string, Tensor>> items;
  for (auto& [name, t] : module.named_parameters()) items.emplace_back(name, detach(*t));
  save_safetensors(path, items);
}

void load_state(Module& module, const std::string& path) {
  auto params = module.named_parameters();
  SafeTensorsFile f = SafeTensorsFile::open(path);
  // Every value is found, checked and read before the first parameter changes: a load that
  // fails leaves the module as it was.
  std::vector<Tensor> values;
  values.reserve(params.size());
  for (auto& [name, t] : params) {
    const SafeTensorsEntry* entry = nullptr;
    for (const auto& e : f.entries())
      if (e.name == name) entry = &e;
    if (!entry)
      fail(NX_ERR_IO, current_api(), ": ", path, " has no tensor \"", name, "\" for the module's parameter of shape ",
           shape_str(t->shape()), " ", dtype_name(t->dtype()));
    if (entry->shape != t->shape() || entry->dtype != t->dtype())
      fail(NX_ERR_SHAPE, current_api(), ": \"", name, "\" in ", path, " is ", shape_str(entry->shape), " ",
           dtype_name(entry->dtype), " but the module's parameter is ", shape_str(t->shape()), " ", dtype_name(t->dtype()));
    values.push_back(f.get(name, t->device()));
  }
  GradModeGuard off(false);
  for (size_t i = 0; i < params.size(); ++i) copy_(*params[i].second, values[i]);
}

void save_state(const Optimizer& opt, const std::string& path) {
  std::vector<std::pair<std::string, Tensor>> items;
  for (auto& [k, v] : opt.state()) items.emplace_back(k, v);
  items.emplace_back("step", from_data(&opt.steps, {}, DType::I64, Device{}));
  save_safetensors(path, items, {{"optimizer", opt.kind()}});
}

void load_state(Optimizer& opt, const std::string& path) {
  SafeTensorsFile f = SafeTensorsFile::open(path);
  auto kind = f.metadata().find("optimizer");
  if (kind == f.metadata().end() || kind->second != opt.kind())
    fail(NX_ERR_IO, current_api(), ": ", path, " holds no ", opt.kind(), " state");
  std::map<std::string, Tensor> state;
  for (auto& e : f.entries()) state[e.name] = f.get(e.name, Device{});
  opt.load_state(state, path);  // checks all of it against the live optimizer before changing anything
}

}  // namespace nx::nn
