// C API: the op shims that do not fit the generated pattern (src/capi/ops_gen.cpp holds the rest;
// src/ops/ops.yaml declares both): nx_split writes a counted array of outputs, nx_adam_step_multi
// takes four counted arrays that must agree.
#include "capi/capi.hpp"

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

nx_status nx_adam_step_multi(const nx_tensor* params, size_t n, const nx_tensor* grads, size_t ngrads,
                             const nx_tensor* exp_avgs, size_t nexp_avgs, const nx_tensor* exp_avg_sqs,
                             size_t nexp_avg_sqs, int64_t step, double lr, double beta1, double beta2, double eps,
                             double weight_decay, bool decoupled_weight_decay, nx_stream stream) {
  return guard("nx_adam_step_multi", [&] {
    if (ngrads != n || nexp_avgs != n || nexp_avg_sqs != n)
      fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": the four arrays must have one count; got params ", n, ", grads ",
           ngrads, ", exp_avgs ", nexp_avgs, ", exp_avg_sqs ", nexp_avg_sqs);
    if (n == 0) return;
    std::vector<Tensor> p = tensor_list(params, n), g = tensor_list(grads, n), m = tensor_list(exp_avgs, n),
                        v = tensor_list(exp_avg_sqs, n);
    check_stream(stream, p[0].device());
    GradModeGuard off(false);  // an optimizer update: parameters that require grad are fine
    adam_step_multi(p, g, m, v, std::vector<int64_t>(n, step),
                    AdamParams{lr, beta1, beta2, eps, weight_decay, decoupled_weight_decay});
  });
}

}  // extern "C"
