// Creation, casts, copies, host transfer and the random-number state.
#include <atomic>
#include <cmath>
#include <cstring>

#include "ops/ops.hpp"

namespace nx {

static std::atomic<uint64_t> g_seed{0x5eed5eedULL};
static std::atomic<uint64_t> g_offset{0};

void manual_seed(uint64_t seed) {
  // A replay would not re-seed: refused by name (seed between the plan's runs instead).
  if (CaptureHooks* hooks = capture_hooks())
    hooks->refuse(std::string(current_api()) +
                  " re-seeds the random generator inside the captured step (a replay runs no host code); seed it "
                  "before nx_plan_run, and the replays draw as eager steps do after that seed");
  g_seed = seed;
  g_offset = 0;
}

static thread_local bool tls_replaying = false;
static thread_local RandomState tls_replay;

uint64_t next_random_offset(uint64_t count, uint64_t* seed) {
  if (tls_replaying) {
    *seed = tls_replay.seed;
    const uint64_t at = tls_replay.offset;
    tls_replay.offset += count;
    return at;
  }
  const RandomState at = take_shared_random(count);
  *seed = at.seed;
  return at.offset;
}

RandomState random_state() { return tls_replaying ? tls_replay : shared_random_state(); }
RandomState shared_random_state() { return RandomState{g_seed.load(), g_offset.load()}; }
RandomState take_shared_random(uint64_t count) { return RandomState{g_seed.load(), g_offset.fetch_add(count)}; }

RandomReplayGuard::RandomReplayGuard(RandomState from) : had_previous_(tls_replaying), previous_(tls_replay) {
  tls_replaying = true;
  tls_replay = from;
}
RandomReplayGuard::~RandomReplayGuard() {
  tls_replaying = had_previous_;
  tls_replay = previous_;
}

Tensor from_data(const void* data, const Shape& shape, DType dtype, Device device) {
  Tensor host = Tensor::empty(shape, dtype, Device{});
  if (host.nbytes()) std::memcpy(host.data(), data, host.nbytes());
  return device.is_cpu() ? host : to_device(host, device);
}

Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = Tensor::empty(shape, dtype, device);
  kernels(device).fill(View::of(t), value);
  return t;
}
Tensor zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }
Tensor ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype(), t.device()); }
Tensor full_like(const Tensor& t, double value) { return full(t.shape(), value, t.dtype(), t.device()); }

Tensor arange(double start, double end, double step, DType dtype, Device device) {
  if (step == 0 || !std::isfinite(start) || !std::isfinite(end) || !std::isfinite(step))
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": start, end and step must be finite and step non-zero (got ",
         start, ", ", end, ", ", step, ")");
  double count = std::ceil((end - start) / step);  // may be inf: end - start can overflow a double
  if (!(count < 9223372036854775807.0))  // converting 2^63 or more to int64 is undefined
    fail(NX_ERR_SHAPE, current_api(), ": arange(", start, ", ", end, ", ", step, ") has ", count,
         " elements, more than an int64 can count");
  int64_t n = count > 0 ? int64_t(count) : 0;
  Tensor host = Tensor::empty({n}, DType::F64, Device{});
  for (int64_t i = 0; i < n; ++i) host.data_as<double>()[i] = start + double(i) * step;
  return to_device(cast(host, dtype), device);
}

static Tensor random_tensor(const Shape& shape, DType dtype, Device device, bool normal) {
  if (!is_floating(dtype))
    fail(NX_ERR_DTYPE, current_api(), ": random tensors need a floating dtype, got ", dtype_name(dtype));
  Tensor t = Tensor::empty(shape, dtype, device);
  uint64_t seed;
  const uint64_t count = uint64_t(t.numel()), offset = next_random_offset(count, &seed);
  // Inside a captured step the kernel reads (seed, offset) from memory that each replay rewrites.
  const uint64_t* at = nullptr;
  if (CaptureHooks* hooks = capture_hooks()) at = hooks->random_draw(device, seed, offset, count);
  kernels(device).random(View::of(t), seed, offset, at, normal);
  return t;
}
Tensor rand(const Shape& shape, DType dtype, Device device) { return random_tensor(shape, dtype, device, false); }
Tensor randn(const Shape& shape, DType dtype, Device device) { return random_tensor(shape, dtype, device, true); }

// Token ids and other indices uploaded from the host: their bounds cost one scan here, and save
// every index op on the device a range check that reads two scalars back (a host sync).
static void record_uploaded_range(const Tensor& host, const Tensor& out) {
  if ((host.dtype() != DType::I64 && host.dtype() != DType::I32) || host.numel() == 0) return;
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  const int64_t count = host.numel();
  for (int64_t i = 0; i < count; ++i) {
    const int64_t v = index_at(host, i);
    lo = v < lo ? v : lo;
    hi = v > hi ? v : hi;
  }
  out.impl()->storage->set_value_range(lo, hi);
}

Tensor to_device(const Tensor& t, Device device) {
  if (t.device() == device) return t;
  Backend& dst_be = backend(device);  // fails with a clear message when the device is unavailable
  Tensor src;
  {
    GradModeGuard off(false);
    src = contiguous(detach(t));
  }
  Tensor out = Tensor::empty(t.shape(), t.dtype(), device);
  const size_t n = t.nbytes();
  if (t.device().is_cpu()) {
    dst_be.upload(exec_context(device), out.data(), src.data(), n);
    record_uploaded_range(src, out);
  } else if (device.is_cpu()) {
    backend(t.device()).download(exec_context(t.device()), out.data(), src.data(), n);
  } else {  // between two GPUs: staged through the host
    Tensor host = Tensor::empty(t.shape(), t.dtype(), Device{});
    backend(t.device()).download(exec_context(t.device()), host.data(), src.data(), n);
    dst_be.upload(exec_context(device), out.data(), host.data(), n);
  }
  if (!is_floating(t.dtype())) return out;
  return record1("ToDeviceBackward", out, {t}, {}, [from = t.device()](const auto& g, const auto&, const auto&) {
    return std::vector<Tensor>{to_device(g[0], from)};
  });
}

void copy_to_host(const Tensor& t, void* dst, size_t nbytes) {
  if (nbytes != t.nbytes())
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": buffer is ", nbytes, " bytes but the tensor of shape ",
         shape_str(t.shape()), " and dtype ", dtype_name(t.dtype()), " needs ", t.nbytes());
  if (CaptureHooks* hooks = capture_hooks()) hooks->host_read(t);
  Tensor c = contiguous(to_device(t, Device{}));
  if (nbytes) std::memcpy(dst, c.data(), nbytes);
}

double item(const Tensor& t) {
  if (t.numel() != 1)
    fail(NX_ERR_SHAPE, current_api(), ": item needs a one-element tensor, got shape ", shape_str(t.shape()));
  double v = 0;
  Tensor d = cast(detach(t), DType::F64);
  copy_to_host(d, &v, sizeof v);
  return v;
}

Tensor detach(const Tensor& x) { return x.alias(x.shape(), x.strides(), x.offset()); }

Tensor cast(const Tensor& x, DType dtype) {
  Tensor out = Tensor::empty(x.shape(), dtype, x.device());
  kernels(x.device()).copy(View::of(out), View::of(x));
  if (!is_floating(dtype)) return out;
  DType from = x.dtype();
  return record1("CastBackward", out, {x}, {}, [from](const auto& g, const auto&, const auto&) {
    return std::vector<Tensor>{cast(g[0], from)};
  });
}

Tensor clone(const Tensor& x) {
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  kernels(x.device()).copy(View::of(out), View::of(x));
  int64_t lo = 0, hi = 0;  // a copy of part of ids with known bounds is within them too
  if (!is_floating(x.dtype()) && x.numel() && x.impl()->storage->value_range(&lo, &hi))
    out.impl()->storage->set_value_range(lo, hi);
  return record1("CloneBackward", out, {x}, {}, [](const auto& g, const auto&, const auto&) {
    return std::vector<Tensor>{g[0]};
  });
}

Tensor cast_if_needed(const Tensor& x, DType dtype) { return x.dtype() == dtype ? x : cast(x, dtype); }

Tensor contiguous(const Tensor& x) {
  if (!x.is_contiguous()) return clone(x);
  Tensor out = detach(x);
  return record1("ContiguousBackward", out, {x}, {}, [](const auto& g, const auto&, const auto&) {
    return std::vector<Tensor>{g[0]};
  });
}

void copy_(const Tensor& dst, const Tensor& src) {
  check_same_device(dst, src, "destination", "source");
  check_in_place_layout(dst, "the destination");  // converting any dtype is allowed (truncates, as PyTorch's)
  if (grad_enabled() && (dst.requires_grad() || src.requires_grad()))
    fail(NX_ERR_STATE, current_api(), ": in-place copy involving a tensor that requires grad is not "
         "recorded by autodiff; disable grad mode (nx_autograd_set_enabled(false)) or use nx_clone");
  broadcast_shapes(src.shape(), dst.shape());
  if (broadcast_shapes(src.shape(), dst.shape()) != dst.shape())
    fail(NX_ERR_SHAPE, current_api(), ": source of shape ", shape_str(src.shape()),
         " does not broadcast to destination shape ", shape_str(dst.shape()));
  kernels(dst.device()).copy(View::of(dst), View::broadcast(src, dst.shape()));
  dst.impl()->storage->version++;
}

}  // namespace nx
