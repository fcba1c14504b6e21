#include "nn/functional.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "core/backend.hpp"
#include "core/capture_hooks.hpp"
#include "core/int_math.hpp"

namespace nx::fn {

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  check_floating(x, "x");
  Tensor mu = mean(x, {-1}, true);
  Tensor xc = sub(x, mu);
  Tensor v = mean(square(xc), {-1}, true);
  Tensor y = mul(xc, unary(UnaryOp::Rsqrt, add_scalar(v, eps)));
  if (weight.defined()) y = mul(y, weight);
  if (bias.defined()) y = add(y, bias);
  return y;
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  check_floating(x, "x");
  Tensor ms = mean(square(x), {-1}, true);
  Tensor y = mul(x, unary(UnaryOp::Rsqrt, add_scalar(ms, eps)));
  return weight.defined() ? mul(y, weight) : y;
}

Tensor dropout(const Tensor& x, double p, bool training) {
  if (!(p >= 0 && p < 1)) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": dropout probability must be in [0, 1), got ", p);
  if (!training || p == 0) return x;
  Tensor u = rand(x.shape(), x.dtype(), x.device());
  Tensor keep = binary(BinaryOp::Ge, u, full_like(u, p));
  return where(keep, mul_scalar(x, 1.0 / (1.0 - p)), zeros_like(x));
}

namespace {

// cos and sin of angle[p, i] = p / base^(2i/d) for positions [0, rows), in dtype on device.
struct RopeTables {
  Tensor cos, sin;
  int64_t rows = 0;
};

RopeTables make_rope_tables(int64_t rows, int64_t d, double base, DType dtype, Device device) {
  Tensor pos = arange(0, double(rows), 1, DType::F64, device);
  Tensor inv = exp(mul_scalar(arange(0, double(d / 2), 1, DType::F64, device), -2.0 * std::log(base) / double(d)));
  Tensor ang = mul(unsqueeze(pos, 1), unsqueeze(inv, 0));  // [rows, d/2]
  return {cast(unary(UnaryOp::Cos, ang), dtype), cast(unary(UnaryOp::Sin, ang), dtype), rows};
}

// The tables of positions [start, start + t), as views of tables kept per (device, dtype, d,
// base) and grown by doubling: every layer's q and k used to rebuild them (11 kernels each, 22 per
// layer and step), and a compiled plan replayed those too. Each element is computed from its own
// position exactly as before, so the values do not depend on what the table holds besides them.
// Built with no capture active: a plan sees them as state made before the step, never as step
// memory it would rewrite on replay while another thread reads the table. Shared by all threads
// (the tables are never written after they are made); held until exit, on purpose (freeing device
// memory from a static destructor would run after the CUDA runtime is gone).
std::pair<Tensor, Tensor> rope_tables(int64_t start, int64_t t, int64_t d, double base, DType dtype, Device device) {
  using Key = std::tuple<int, int, int, int64_t, uint64_t>;
  static std::mutex mutex;
  static auto* cache = new std::map<Key, RopeTables>();
  uint64_t base_bits;
  std::memcpy(&base_bits, &base, sizeof base);
  const Key key{int(device.type), int(device.index), int(dtype), d, base_bits};
  const int64_t need = checked_add(start, t, "rotary positions");
  RopeTables tables;
  {
    std::lock_guard<std::mutex> lock(mutex);
    tables = (*cache)[key];
  }
  if (tables.rows < need) {
    const OutsideCapture outside;  // made now, outside any step being captured
    GradModeGuard off(false);
    int64_t rows = std::max<int64_t>(64, tables.rows);
    while (rows < need) rows = rows > INT64_MAX / 2 ? need : rows * 2;
    tables = make_rope_tables(rows, d, base, dtype, device);
    std::lock_guard<std::mutex> lock(mutex);
    RopeTables& held = (*cache)[key];
    if (held.rows < tables.rows) held = tables;
  }
  return {slice(tables.cos, 0, start, start + t, 1), slice(tables.sin, 0, start, start + t, 1)};
}

// x's halves rotated by the tables' angles, rotate-half convention: (x1 c - x2 s, x2 c + x1 s);
// inverse, by minus the angles: (x1 c + x2 s, x2 c - x1 s). One `rotary` kernel (a 4-D x read
// through its strides; another rank as a contiguous [1, rows, t, d]) with the rounding of the
// composite of slices, products and cat it replaced (8 kernels a call), so the bits are the same.
Tensor rotate_halves(const Tensor& x, const Tensor& c, const Tensor& s, bool inverse) {
  const Tensor xc = x.dtype() == c.dtype() ? x : cast(x, c.dtype());
  const Shape& shape = xc.shape();
  const int64_t t = shape[size_t(xc.dim() - 2)], d = shape.back(), rows = t != 0 && d != 0 ? xc.numel() / (t * d) : 0;
  const Tensor x4 = xc.dim() == 4 ? xc : reshape(contiguous(xc), {1, rows, t, d});
  Tensor out = Tensor::empty(x4.shape(), xc.dtype(), xc.device());
  kernels(xc.device()).rotary(View::of(out), View::of(x4), View::of(c), View::of(s), inverse);
  return xc.dim() == 4 ? out : reshape(out, shape);
}

}  // namespace

Tensor rope(const Tensor& x, int64_t start, double base) {
  check_floating(x, "x");
  if (x.dim() < 2) fail(NX_ERR_SHAPE, current_api(), ": rotary embeddings need [..., seq, head_dim], got ", shape_str(x.shape()));
  const int64_t t = x.shape()[size_t(x.dim() - 2)], d = x.shape().back();
  if (d % 2) fail(NX_ERR_SHAPE, current_api(), ": rotary embeddings need an even head dimension, got ", d);
  if (start < 0) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": rotary positions start at ", start, ", below 0");
  const auto tables = rope_tables(start, t, d, base, x.dtype(), x.device());  // cos, sin [t, d/2]
  const Tensor c = tables.first, s = tables.second;
  // One node whose VJP rotates the gradient back (a rotation's transpose is its inverse). The
  // composite's own backward built each half's gradient in a zero-filled full tensor and added
  // the two: per call two fills, two copies and a full add more, in eager and in a plan. The
  // values are the same: each gradient element is the same two products summed.
  Tensor out;
  {
    GradModeGuard off(false);
    out = rotate_halves(detach(x), c, s, false);
  }
  return record1("RopeBackward", out, {x}, {}, [c, s](const std::vector<Tensor>& g, const std::vector<Tensor>&, const auto&) {
    return std::vector<Tensor>{rotate_halves(g[0], c, s, true)};
  });
}

std::vector<double> alibi_slopes(int64_t heads) { return nx::alibi_slopes(heads); }

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, bool alibi, double scale) {
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4)
    fail(NX_ERR_SHAPE, current_api(), ": attention expects [batch, heads, seq, head_dim] tensors, got q ",
         shape_str(q.shape()), ", k ", shape_str(k.shape()), ", v ", shape_str(v.shape()));
  const int64_t b = q.shape()[0], h = q.shape()[1], tq = q.shape()[2], d = q.shape()[3];
  const int64_t hkv = k.shape()[1], tk = k.shape()[2];
  if (k.shape() != v.shape() || k.shape()[0] != b || k.shape()[3] != d || hkv == 0 || h % hkv)
    fail(NX_ERR_SHAPE, current_api(), ": k and v must be [", b, ", Hkv, Tk, ", d, "] with ", h,
         " a multiple of Hkv; got k ", shape_str(k.shape()), ", v ", shape_str(v.shape()));
  Tensor kk = k, vv = v;
  if (hkv != h) {  // grouped-query: each kv head serves h / hkv query heads
    const int64_t g = h / hkv;
    kk = reshape(expand(unsqueeze(k, 2), {b, hkv, g, tk, d}), {b, h, tk, d});
    vv = reshape(expand(unsqueeze(v, 2), {b, hkv, g, tk, d}), {b, h, tk, d});
  }
  Tensor scores = mul_scalar(matmul(q, transpose(kk, -1, -2)), scale);  // [b, h, tq, tk]
  if (causal || alibi) {
    // distance[i, j] = (query position) - (key position), query i at absolute position tk - tq + i
    Tensor qpos = arange(double(tk - tq), double(tk), 1, DType::F64, q.device());
    Tensor kpos = arange(0, double(tk), 1, DType::F64, q.device());
    Tensor dist = sub(unsqueeze(qpos, 1), unsqueeze(kpos, 0));  // [tq, tk]
    if (alibi) {
      auto slopes = alibi_slopes(h);
      Tensor sl = reshape(from_data(slopes.data(), {h}, DType::F64, Device{}), {h, 1, 1});
      sl = to_device(sl, q.device());
      scores = add(scores, cast(mul(neg(sl), unsqueeze(dist, 0)), scores.dtype()));
    }
    if (causal) {
      Tensor future = binary(BinaryOp::Lt, dist, zeros_like(dist));
      scores = where(future, full({}, -INFINITY, scores.dtype(), q.device()), scores);
    }
  }
  return matmul(softmax(scores, -1), vv);
}

Tensor unfold2d(const Tensor& x, int64_t kh, int64_t kw, int64_t stride, int64_t padding) {
  if (x.dim() != 4) fail(NX_ERR_SHAPE, current_api(), ": expected [N, C, H, W], got ", shape_str(x.shape()));
  if (kh <= 0 || kw <= 0 || stride <= 0 || padding < 0)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": kernel and stride must be positive and padding >= 0");
  const int64_t n = x.shape()[0], c = x.shape()[1], hh = x.shape()[2], ww = x.shape()[3];
  const int64_t pad2 = checked_mul(2, padding, "the padded input size");
  const int64_t hp = checked_add(hh, pad2, "the padded input size"), wp = checked_add(ww, pad2, "the padded input size");
  if (hp < kh || wp < kw)
    fail(NX_ERR_SHAPE, current_api(), ": kernel ", kh, "x", kw, " does not fit the padded input ", hp, "x", wp);
  const int64_t ho = (hp - kh) / stride + 1, wo = (wp - kw) / stride + 1;
  // The padded plane (the index values reach hp * wp), the gather index (kh*kw*ho*wo entries)
  // and the columns must be countable, even when n or c is 0.
  checked_mul(hp, wp, "the padded input size");
  const int64_t taps = checked_mul(kh, kw, "the kernel's size"), positions = checked_mul(ho, wo, "the output size");
  checked_mul(taps, positions, "the unfolded size");
  Tensor xp = x;
  if (padding) {  // zero padding as a differentiable scatter into a larger zero tensor
    Tensor rows = slice_scatter(x, {n, c, hp, ww}, 2, padding, 1);
    xp = slice_scatter(rows, {n, c, hp, wp}, 3, padding, 1);
  }
  // index[(ky * kw + kx) * L + oy * wo + ox] = (oy * stride + ky) * wp + ox * stride + kx
  std::vector<int64_t> idx;
  idx.reserve(size_t(kh * kw * ho * wo));
  for (int64_t ky = 0; ky < kh; ++ky)
    for (int64_t kx = 0; kx < kw; ++kx)
      for (int64_t oy = 0; oy < ho; ++oy)
        for (int64_t ox = 0; ox < wo; ++ox) idx.push_back((oy * stride + ky) * wp + ox * stride + kx);
  Tensor index = to_device(from_data(idx.data(), {int64_t(idx.size())}, DType::I64, Device{}), x.device());
  Tensor cols = index_select(reshape(xp, {n, c, hp * wp}), 2, index);  // [n, c, kh*kw*L]
  return reshape(cols, {n, c * kh * kw, ho * wo});
}

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding) {
  if (weight.dim() != 4 || x.dim() != 4 || weight.shape()[1] != x.shape()[1])
    fail(NX_ERR_SHAPE, current_api(), ": conv2d needs x [N, C, H, W] and weight [O, C, kh, kw], got ",
         shape_str(x.shape()), " and ", shape_str(weight.shape()));
  const int64_t n = x.shape()[0], o = weight.shape()[0];
  Tensor cols = unfold2d(x, weight.shape()[2], weight.shape()[3], stride, padding);  // [n, C*kh*kw, L]; checks the sizes
  // the output size unfold2d found: H and W are known to fit with the padding
  const int64_t ho = (x.shape()[2] + 2 * padding - weight.shape()[2]) / stride + 1,
                wo = (x.shape()[3] + 2 * padding - weight.shape()[3]) / stride + 1;
  Tensor w2 = reshape(weight, {o, -1});                            // [O, C*kh*kw]
  Tensor y = matmul(w2, cols);                                     // [n, O, L] (broadcast batch)
  if (bias.defined()) y = add(y, reshape(bias, {o, 1}));
  return reshape(y, {n, o, ho, wo});
}

static Tensor pool(const Tensor& x, int64_t kernel, int64_t stride, bool is_max) {
  // Checked before the shape is read: a 3-d input used to index past its shape (issue 17).
  if (x.dim() != 4)
    fail(NX_ERR_SHAPE, current_api(), ": pooling needs x [N, C, H, W], got ", shape_str(x.shape()));
  if (kernel <= 0 || stride <= 0)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": kernel and stride must be positive, got ", kernel, " and ", stride);
  if (x.shape()[2] < kernel || x.shape()[3] < kernel)
    fail(NX_ERR_SHAPE, current_api(), ": the ", kernel, "x", kernel, " pooling window does not fit in x ",
         shape_str(x.shape()));
  const int64_t n = x.shape()[0], c = x.shape()[1];
  const int64_t ho = (x.shape()[2] - kernel) / stride + 1, wo = (x.shape()[3] - kernel) / stride + 1;
  Tensor cols = reshape(unfold2d(reshape(x, {n * c, 1, x.shape()[2], x.shape()[3]}), kernel, kernel, stride, 0),
                        {n, c, kernel * kernel, ho * wo});
  Tensor r = is_max ? amax(cols, {2}, false) : mean(cols, {2}, false);
  return reshape(r, {n, c, ho, wo});
}
Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride) { return pool(x, kernel, stride, true); }
Tensor avg_pool2d(const Tensor& x, int64_t kernel, int64_t stride) { return pool(x, kernel, stride, false); }

// The unary ops of the registry that take a parameter: activations by name only where
// `activation` gives them a default (leaky_relu, parcon).
static bool has_parameter(UnaryOp op) {
  return op == UnaryOp::LeakyRelu || op == UnaryOp::ParCon || op == UnaryOp::Clamp || op == UnaryOp::AddScalar ||
         op == UnaryOp::MulScalar || op == UnaryOp::PowScalar;
}

// By name: the few below (parameterized ops with their defaults among them), else any
// parameterless unary op of the op registry (relu, gelu, gelu_tanh, silu, softplus, sigmoid,
// tanh, cone, parabolic_cone...), so a new unary op is an activation at once.
Tensor activation(const std::string& name, const Tensor& x) {
  if (name == "leaky_relu") return unary(UnaryOp::LeakyRelu, x, 0.01);
  if (name == "parcon") return parcon(x, kParconDefaultBeta);
  if (name == "swish") return unary(UnaryOp::Silu, x);
  if (name == "gcu") return mul(x, unary(UnaryOp::Cos, x));
  if (name == "gaussian") return exp(neg(square(x)));
  if (name == "softmax") return softmax(x, -1);
  if (name == "identity") return x;
  UnaryOp op;
  if (unary_from_name(name.c_str(), &op) && !has_parameter(op)) return unary(op, x);
  std::string names;
  for (int i = 0; i < kUnaryOpCount; ++i)
    if (!has_parameter(UnaryOp(i))) names.append(", ").append(op_name(UnaryOp(i)));
  fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": unknown activation \"", name,
       "\" (leaky_relu, parcon, swish, gcu, gaussian, softmax, identity", names, ")");
}

}  // namespace nx::fn
