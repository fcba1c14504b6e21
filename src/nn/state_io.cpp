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
  GradModeGuard off(false);
  for (auto& [name, t] : params) {
    Tensor v = f.get(name, t->device());
    if (v.shape() != t->shape() || v.dtype() != t->dtype())
      fail(NX_ERR_SHAPE, current_api(), ": \"", name, "\" in ", path, " is ", shape_str(v.shape()), " ", dtype_name(v.dtype()),
           " but the module's parameter is ", shape_str(t->shape()), " ", dtype_name(t->dtype()));
    copy_(*t, v);
  }
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
  for (auto& e : f.entries())
    if (e.name != "step") state[e.name] = f.get(e.name, Device{});
  opt.load_state(state);
  int64_t steps = 0;
  copy_to_host(f.get("step", Device{}), &steps, sizeof steps);
  opt.steps = steps;
}

}  // namespace nx::nn
