// Module parameters and optimizer state as SafeTensors files (what nx_module_save/load and
// nx_optimizer_save/load write and read). Messages name the running C function (current_api()).
#pragma once
#include <string>

#include "nn/module.hpp"
#include "nn/optim.hpp"

namespace nx::nn {

// Writes every named parameter ("blocks.0.attn.wq.weight"), detached, to path.
void save_state(Module& module, const std::string& path);
// Copies each parameter from path; NX_ERR_SHAPE when one's shape or dtype differs, NX_ERR_IO when
// one is missing or the file is unreadable. All or nothing: on failure no parameter has changed.
void load_state(Module& module, const std::string& path);
// Writes the optimizer's state tensors and its step count, its kind in the metadata.
void save_state(const Optimizer& opt, const std::string& path);
// NX_ERR_IO when path holds no state of this optimizer's kind; Optimizer::load_state checks the
// rest. All or nothing, as for modules. (Saves replace the file atomically: io/atomic_file.hpp.)
void load_state(Optimizer& opt, const std::string& path);

}  // namespace nx::nn
