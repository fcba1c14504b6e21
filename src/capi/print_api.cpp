// C API: printing tensors (nx_tensor_to_string, nx_tensor_print, nx_string_free). The layout is
// src/core/tensor_format.cpp's; this file checks the options and brings the entries shown to the
// host: only the summarized part of a large tensor is gathered (on its device) and copied.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "capi/capi.hpp"
#include "core/capture_hooks.hpp"
#include "core/tensor_format.hpp"

using namespace nx;
using namespace nx::capi;

namespace {

PrintOptions print_options(const nx_print_options* options) {
  const nx_print_options o = struct_arg(options, nx_print_options NX_PRINT_OPTIONS_DEFAULT, "options");
  if (o.precision < 0 || o.precision > 64)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": options->precision is ", o.precision, ", expected 0 to 64");
  if (o.threshold < 0)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": options->threshold is ", o.threshold,
         ", expected >= 0 (INT64_MAX: never summarize)");
  if (o.edge_items < 1)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": options->edge_items is ", o.edge_items, ", expected >= 1");
  if (o.line_width < 1)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": options->line_width is ", o.line_width, ", expected >= 1");
  const int sci = enum_value(o.sci_mode);
  if (sci != NX_PRINT_SCI_AUTO && sci != NX_PRINT_SCI_NEVER && sci != NX_PRINT_SCI_ALWAYS)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": options->sci_mode is ", sci,
         ", expected NX_PRINT_SCI_AUTO (0), NX_PRINT_SCI_NEVER (1) or NX_PRINT_SCI_ALWAYS (2)");
  PrintOptions p;
  p.precision = o.precision;
  p.threshold = o.threshold;
  p.edge_items = o.edge_items;
  p.line_width = o.line_width;
  p.sci_mode = nx_print_sci_mode(sci);
  return p;
}

// The entries shown, on x's device: x itself, or (summarized) x with every elided dimension from
// d on cut to its first and last edge entries. Slices are views; only the corners are copied.
Tensor gather_shown(const Tensor& x, size_t d, int64_t edge) {
  for (; d < size_t(x.dim()); ++d) {
    const int64_t n = x.shape()[d];
    if (print_elides(n, edge)) {
      const int64_t axis = int64_t(d);
      Tensor head = gather_shown(slice(x, axis, 0, edge, 1), d + 1, edge);
      Tensor tail = gather_shown(slice(x, axis, n - edge, n, 1), d + 1, edge);
      return cat({head, tail}, axis);
    }
  }
  return x;
}

std::string tensor_text(const Tensor& x, const PrintOptions& o) {
  // Refused inside a plan's step, as every host read is (a replay would print nothing).
  if (CaptureHooks* hooks = capture_hooks()) hooks->host_read(x);
  TensorText t;
  t.dtype = x.dtype();
  t.device = x.device();
  t.shape = x.shape();
  t.summarize = x.numel() > o.threshold;
  t.requires_grad = x.requires_grad();
  if (x.grad_fn()) t.grad_fn = x.grad_fn()->name;
  if (x.numel() > 0) {
    GradModeGuard no_grad(false);
    Tensor shown = detach(x);
    // 8-bit storage dtypes are shown through their exact values in f32 / i64 (no op gathers them)
    if (is_storage_only(x.dtype())) shown = cast(to_device(shown, Device{}), x.dtype() == DType::I8 ? DType::I64 : DType::F32);
    if (t.summarize) shown = gather_shown(shown, 0, o.edge_items);
    const bool floating = is_floating(shown.dtype());
    // On the host first: the casts to f64 / i64 (exact for every dtype) then run on the CPU.
    Tensor host = cast(to_device(shown, Device{}), floating ? DType::F64 : DType::I64);
    const size_t n = size_t(host.numel());
    if (floating) {
      t.values.resize(n);
      copy_to_host(host, t.values.data(), n * sizeof(double));
    } else {
      t.ints.resize(n);
      copy_to_host(host, t.ints.data(), n * sizeof(int64_t));
    }
  }
  return format_tensor(t, o);
}

}  // namespace

extern "C" {

nx_status nx_tensor_to_string(nx_tensor t, const nx_print_options* options, char** out) {
  clear_out(out);
  return guard("nx_tensor_to_string", [&] {
    check_out(out);
    const Tensor& x = unwrap(t, "t");
    const std::string s = tensor_text(x, print_options(options));
    *out = malloc_string(s);
  });
}

nx_status nx_tensor_print(nx_tensor t, const nx_print_options* options) {
  return guard("nx_tensor_print", [&] {
    const Tensor& x = unwrap(t, "t");
    const std::string s = tensor_text(x, print_options(options)) + "\n";
    errno = 0;
    const bool ok = std::fwrite(s.data(), 1, s.size(), stdout) == s.size();
    if (!ok || std::fflush(stdout) != 0) {
      const int err = errno;
      std::clearerr(stdout);
      fail(NX_ERR_IO, current_api(), ": writing to stdout failed", err ? std::string(": ") + std::strerror(err) : "");
    }
  });
}

void nx_string_free(char* s) { std::free(s); }

}  // extern "C"

char* nx::capi::malloc_string(const std::string& s) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (!p) throw std::bad_alloc();
  std::memcpy(p, s.c_str(), s.size() + 1);
  return p;
}
