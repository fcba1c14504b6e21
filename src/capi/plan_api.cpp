// C API: compiled steps (nx_plan_*), over src/compile/plan.hpp.
#include <algorithm>
#include <cstddef>

#include "capi/capi.hpp"
#include "compile/plan.hpp"

struct nx_plan_s {
  std::unique_ptr<nx::compile::Plan> plan;
  std::string text;  // nx_plan_to_string's result
};
NX_HANDLE_OBJECT(nx_plan_s, Plan);

using namespace nx;
using namespace nx::capi;

extern "C" {

nx_status nx_plan_create(nx_plan* out, nx_plan_fn fn, void* user_data, size_t noutputs, const nx_plan_options* options) {
  clear_out(out);
  return guard("nx_plan_create", [&] {
    check_out(out);
    if (!fn) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": fn is NULL");
    if (!noutputs) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": noutputs must be at least 1 (the loss)");
    const nx_plan_options o = struct_arg(options, nx_plan_options NX_PLAN_OPTIONS_DEFAULT, "options", false,
                                         offsetof(nx_plan_options, max_bytes));  // the 1.3 struct
    if (o.max_plans < 1) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": options->max_plans must be >= 1, got ", o.max_plans);
    if (o.max_bytes < 0) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": options->max_bytes must be >= 0, got ", o.max_bytes);
    compile::StepFn step = [fn, user_data, noutputs](const std::vector<Tensor>& xs) {
      return call_tensor_fn(fn, user_data, xs, noutputs, "nx_plan_run: the step function");
    };
    auto obj = std::make_unique<nx_plan_s>();
    obj->plan = std::make_unique<compile::Plan>(std::move(step), size_t(o.max_plans), size_t(o.max_bytes),
                                                o.cuda_graph, o.fuse);
    *out = make_handle(std::move(obj));
  });
}

nx_status nx_plan_run(nx_plan plan, nx_tensor* outputs, size_t noutputs, const nx_tensor* inputs, size_t ninputs,
                      nx_stream stream) {
  if (outputs)
    for (size_t i = 0; i < noutputs; ++i) outputs[i] = nullptr;
  return guard("nx_plan_run", [&] {
    nx_plan_s& p = handle_object(plan, "plan");
    check_out(outputs, "outputs");
    if (!ninputs) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": a plan's step needs at least one input tensor");
    if (!inputs) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": inputs is NULL");
    std::vector<Tensor> ins = tensor_list(inputs, ninputs);
    if (!ins.empty()) check_stream(stream, ins[0].device());
    std::vector<Tensor> outs = p.plan->run(ins);
    if (outs.size() != noutputs)
      fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": noutputs is ", noutputs, " but the plan's step makes ", outs.size());
    const std::vector<nx_tensor> made = wrap_all(outs);
    std::copy(made.begin(), made.end(), outputs);
  });
}

nx_status nx_plan_get_stats(nx_plan plan, nx_plan_stats* out) {
  return guard("nx_plan_get_stats", [&] {
    const nx_plan_s& p = handle_object(plan, "plan");
    check_out(out);
    // A caller built against 1.3 passes the smaller struct: it gets the fields it has (rule 4).
    const size_t size = out->struct_size, v13 = offsetof(nx_plan_stats, held_bytes);
    if (size != sizeof(nx_plan_stats) && size != v13)
      fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": out->struct_size is ", size, ", expected ",
           sizeof(nx_plan_stats), " (or ", v13, ", the 1.3 struct)");
    const compile::PlanStats s = p.plan->stats();
    const nx_plan_stats all{sizeof(nx_plan_stats), s.eager_runs, s.captures, s.recaptures, s.replays, s.ops,
                            s.ops_eliminated, s.uploads, s.arena_bytes, s.eager_peak_bytes, s.kept_bytes,
                            s.cuda_graph, s.fused_ops, s.fused_groups, s.held_bytes, s.evictions};
    std::memcpy(out, &all, size);
    out->struct_size = size;
  });
}

nx_status nx_plan_to_string(nx_plan plan, nx_plan_format format, const char** out) {
  clear_out(out);
  return guard("nx_plan_to_string", [&] {
    nx_plan_s& p = handle_object(plan, "plan");
    check_out(out);
    const int f = enum_value(format);
    if (f != NX_PLAN_TABLE && f != NX_PLAN_DOT)
      fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": invalid format ", f, " (NX_PLAN_TABLE or NX_PLAN_DOT)");
    p.text = f == NX_PLAN_TABLE ? p.plan->table() : p.plan->dot();
    *out = p.text.c_str();
  });
}

void nx_plan_free(nx_plan plan) {
  guard("nx_plan_free", [&] { free_handle(plan, [](nx_plan_s&) {}); });
}

}  // extern "C"
