// The C boundary: handle structs, argument checks and the guard that turns every exception into
// an nx_status plus a thread-local message. Every extern "C" function body runs inside guard().
#pragma once
#include <atomic>
#include <cstring>
#include <initializer_list>
#include <new>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "nexus.h"
#include "graph/node.hpp"
#include "ops/ops.hpp"

#include "capi/handle_table.hpp"
#include "core/profiler.hpp"

// The objects behind the handles (a handle is an id into the handle table, never one of these).
struct nx_tensor_s {
  nx::Tensor tensor;
};
struct nx_stream_s {
  nx::Device device;
  void* native;  // cudaStream_t on CUDA, null on the CPU
};
// The graph object (autograd_api.cpp; nn_api.cpp names its leaves after a module's parameters).
struct nx_graph_s {
  nx::Tensor root;
  std::vector<std::shared_ptr<nx::Node>> nodes;
  std::string dot;   // nx_graph_to_dot's text, made at creation
  std::string dump;  // nx_graph_dump's last text
  std::unordered_map<const nx::TensorImpl*, std::string> leaf_names;
};
NX_HANDLE_OBJECT(nx_graph_s, Graph);
NX_HANDLE_OBJECT(nx_tensor_s, Tensor);
NX_HANDLE_OBJECT(nx_stream_s, Stream);

namespace nx::capi {

nx_status set_error(nx_status status, const std::string& message);
const char* last_error();
void clear_error();

// The process-wide CPU thread count, applied to the calling thread when it changed since the
// thread's last call (tensor_api.cpp).
extern std::atomic<uint32_t> g_cpu_threads_epoch;
extern thread_local uint32_t tl_cpu_threads_epoch;
void apply_cpu_threads();

// Profiled: the call is an "api" event of a running profiler (core/profiler.hpp); the
// profiler's own functions are not, so that a range pushed is not nested in its push call.
template <bool Profiled = true, class F>
nx_status guard(const char* api, F&& body) {
  ApiScope scope(api);
  std::optional<profiler::Scope> profiled;
  if constexpr (Profiled)
    if (profiler::active()) profiled.emplace(profiler::Kind::Api, api);
  if (tl_cpu_threads_epoch != g_cpu_threads_epoch.load(std::memory_order_relaxed)) apply_cpu_threads();
  try {
    body();
    return NX_OK;
  } catch (const Error& e) {
    return set_error(e.status(), e.what());
  } catch (const std::bad_alloc&) {
    return set_error(NX_ERR_OUT_OF_MEMORY, std::string(api) + ": out of host memory");
  } catch (const std::exception& e) {
    return set_error(NX_ERR_INTERNAL, std::string(api) + ": internal error: " + e.what());
  } catch (...) {
    return set_error(NX_ERR_INTERNAL, std::string(api) + ": unknown internal error");
  }
}

// Tensor handles (through the handle table: a freed or foreign handle is reported, not used).
nx_tensor wrap(Tensor t);
const Tensor& unwrap(nx_tensor h, const char* what);
// Like unwrap but NULL gives an undefined Tensor (for optional inputs).
Tensor unwrap_optional(nx_tensor h, const char* what);
void release(nx_tensor h);
// Ops that compute refuse the 8-bit storage dtypes (nexus.h) before any implicit cast could take
// them in, naming the op, the argument and the dtype (the generated shims call it; views, casts
// and copies do not).
inline void check_computable(const Tensor& t, const char* what) {
  if (t.defined() && is_storage_only(t.dtype()))
    fail(NX_ERR_DTYPE, current_api(), ": ", what, " has the 8-bit storage dtype ", dtype_name(t.dtype()),
         ", which no op computes on; cast it to a floating dtype first (nx_cast)");
}

template <class P>
void check_out(P* out, const char* what = "out") {
  if (!out) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": ", what, " is NULL");
}
template <class P>
void clear_out(P* out) {
  if (out) *out = nullptr;
}

// A counted array of dimensions (may hold -1 where the op allows it).
Shape dims_arg(const int64_t* dims, size_t ndim, const char* what = "shape");
// dims_arg with every dimension >= 0.
Shape shape_arg(const int64_t* shape, size_t ndim, const char* what = "shape");
// C callers may pass any int as an enum: these take the argument by reference and read it as an
// int (loading an out-of-range value as the C++ enum type would be undefined behaviour).
Device device_arg(const nx_device& device);
nx_device_type device_type_arg(const nx_device_type& device_type);  // NX_CPU or NX_CUDA, else NX_ERR_DEVICE
DType dtype_arg(const nx_dtype& dtype);
// dtype_arg for a dtype an op or a module computes in: the 8-bit storage dtypes are refused.
DType compute_dtype_arg(const nx_dtype& dtype);
// The int value of a C enum argument, read without an enum-typed load.
template <class E>
int enum_value(const E& e) {
  static_assert(sizeof(E) == sizeof(int), "C enums are int-sized");
  int v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}
// Rule 4 of nexus.h: an options or config struct from the caller, read through its struct_size.
// The fields it covers are taken, later fields keep `defaults`, so a program built against an
// older, smaller struct keeps working; min_size is the struct's size at 1.0 (pass the 1.0 size
// once a field has been appended). NULL gives the defaults, or fails when the struct is required.
template <class S>
S struct_arg(const S* given, const S& defaults, const char* what, bool required = false,
             size_t min_size = sizeof(S)) {
  if (!given) {
    if (required) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": ", what, " is NULL");
    return defaults;
  }
  if (given->struct_size < min_size || given->struct_size > sizeof(S))
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": ", what, "->struct_size is ", given->struct_size,
         ", expected ", sizeof(S), given->struct_size > sizeof(S) ? " (a program built against a newer nexus.h)" : "");
  S s = defaults;
  const size_t head = sizeof(s.struct_size);
  std::memcpy(reinterpret_cast<char*>(&s) + head, reinterpret_cast<const char*>(given) + head, given->struct_size - head);
  s.struct_size = sizeof(S);
  return s;
}
// A copy of s in memory the caller frees with nx_string_free (print_api.cpp).
char* malloc_string(const std::string& s);
// Checks that a stream (if given) is valid and on device.
void check_stream(nx_stream stream, Device device);

// Arguments of the op shims (src/capi/ops_gen.cpp, generated from src/ops/ops.yaml).
std::vector<int64_t> axes_arg(const int64_t* axes, size_t naxes);
std::vector<Tensor> tensor_list(const nx_tensor* xs, size_t n);
Reduction reduction_arg(const nx_reduction& reduction);  // by reference: see enum_value
// Runs a user function of tensors (a checkpoint segment, a plan's step) on handles to inputs and
// returns its noutputs results; a failure surfaces with the function's own status and message,
// prefixed by who ("nx_checkpoint: the segment function").
std::vector<Tensor> call_tensor_fn(nx_status (*fn)(nx_tensor*, size_t, const nx_tensor*, size_t, void*), void* user_data,
                                   const std::vector<Tensor>& inputs, size_t noutputs, const char* who);
// Handles to every result, or none: on failure releases the handles already made.
std::vector<nx_tensor> wrap_all(const std::vector<Tensor>& results);
// Writes results[i] to *outs[i] (wrap_all's handles).
void wrap_outs(std::initializer_list<nx_tensor*> outs, const std::vector<Tensor>& results);

}  // namespace nx::capi
