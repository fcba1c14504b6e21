// C API: the op shims that do not fit the generated pattern (src/capi/ops_gen.cpp holds the rest;
// src/ops/ops.yaml declares both): nx_split writes a counted array of outputs, nx_adam_step_multi
// takes four arrays of one count and an options struct.
#include "capi/capi.hpp"
#include "ops/autocast.hpp"

using namespace nx;
using namespace nx::capi;

extern "C" {

nx_status nx_split(nx_tensor* outs, nx_tensor x, const int64_t* sizes, size_t nsizes, int64_t axis, nx_stream stream) {
  if (outs)
    for (size_t i = 0; i < nsizes; ++i) outs[i] = nullptr;
  return guard("nx_split", [&] {
    check_out(outs, "outs");
    const Tensor& t = unwrap(x, "x");
    check_stream(stream, t.device());
    auto parts = split(t, dims_arg(sizes, nsizes, "sizes"), axis);
    for (size_t i = 0; i < parts.size(); ++i) outs[i] = wrap(parts[i]);
  });
}

nx_status nx_adam_step_multi(const nx_tensor* params, const nx_tensor* grads, const nx_tensor* exp_avgs,
                             const nx_tensor* exp_avg_sqs, size_t n, int64_t step, const nx_adam_options* options,
                             nx_stream stream) {
  return guard("nx_adam_step_multi", [&] {
    const nx_adam_options o = struct_arg(options, nx_adam_options NX_ADAM_OPTIONS_DEFAULT, "options");
    if (n == 0) return;
    std::vector<Tensor> p = tensor_list(params, n), g = tensor_list(grads, n), m = tensor_list(exp_avgs, n),
                        v = tensor_list(exp_avg_sqs, n);
    check_stream(stream, p[0].device());
    GradModeGuard off(false);  // an optimizer update: parameters that require grad are fine
    adam_step_multi(p, g, m, v, std::vector<int64_t>(n, step),
                    AdamParams{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.decoupled_weight_decay});
  });
}

nx_status nx_autocast_push(nx_device_type device_type, nx_dtype dtype, bool enabled) {
  return guard("nx_autocast_push", [&] {
    autocast_push(AutocastScope{device_type_arg(device_type), compute_dtype_arg(dtype), enabled});
  });
}
nx_status nx_autocast_pop(void) {
  return guard("nx_autocast_pop", [&] { autocast_pop(); });
}
nx_status nx_autocast_get_dtype(nx_device_type device_type, nx_dtype* out) {
  return guard("nx_autocast_get_dtype", [&] {
    check_out(out);
    *out = nx_dtype(int(autocast_dtype(Device{device_type_arg(device_type), 0}).value_or(DType::F32)));
  });
}

}  // extern "C"
