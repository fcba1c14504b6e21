// Finite-difference gradient checks in f64 of the differentiable internals of src/ops/ops.hpp that
// have no C function of their own (every registry op's gradients, first and second order, are
// the op harness's: tests/harness/op_harness.py, modes gradcheck and gradgrad), plus what is not
// one op: closed-form loss gradients, accumulation, a composite's Hessian, the nn layer
// composites of src/nn/functional.hpp, and the checker's own meta-test.
//
// For an op f and leaves x_1..x_k, the objective is L = sum_i w_i f(x)_i with fixed random
// weights w (a plain sum would hide e.g. softmax's gradient, which sums to zero). The analytic
// gradient comes from nx::run_backward(y, w, {accumulate = false}, leaves); the numeric one from
// central differences (L(x + eps e_j) - L(x - eps e_j)) / 2 eps with eps = 1e-6, perturbing the
// leaf's storage element in place. They must agree to |a - n| <= 1e-6 |n| + 1e-8 max(1, |L|)
// (the second term is the central difference's rounding noise, ~1e-16 |L| / eps).
//
// Leaves are often non-contiguous (a transposed view of their storage, set requires_grad
// directly, so no extra graph node) and broadcast against each other. Inputs stay away from
// kinks.
//
// Second order: the Hessian-vector product obtained by differentiating the create_graph
// gradient is compared with central differences of the analytic gradient.
//
// The last test (Gradcheck.Summary) runs whatever case did not run in this process, checks that
// every internal op of the list below was verified, and prints
//   gradcheck: N internal ops verified by finite differences in f64
#include <algorithm>
#include <functional>
#include <set>
#include <string>

#include "autograd/engine.hpp"
#include "cpp_test_util.hpp"
#include "nn/functional.hpp"

namespace {

using nx::DType;
using nx::Shape;
using nx::Tensor;
using nx::UnaryOp;
using nxt::values;

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
using Sampler = std::function<double(std::mt19937_64&)>;

// ---------------------------------------------------------------- the op list
// The differentiable ops of ops.hpp without a C function (reached only as parts of other ops'
// forwards and VJPs); Gradcheck.Summary requires all of them. The registry's ops are not listed:
// the op harness fails for a registry op whose finite differences ran nowhere.
const char* const kRequiredOps[] = {
    "square", "reciprocal", "erf",            // UnaryOps without a C function
    "sum_to",                                 // the VJP of broadcasting
    "slice_scatter",                          // the VJP of slice
    "index_add", "scatter_add",               // the indexing ops' VJPs
};

std::set<std::string>& verified() {
  static std::set<std::string> s;
  return s;
}
std::set<std::string>& second_order_verified() {
  static std::set<std::string> s;
  return s;
}

// ---------------------------------------------------------------- randomness and leaves
uint64_t fnv(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (char c : s) h = (h ^ uint64_t(uint8_t(c))) * 1099511628211ull;
  return h;
}

Sampler U(double lo, double hi) {
  return [lo, hi](std::mt19937_64& g) { return std::uniform_real_distribution<double>(lo, hi)(g); };
}
// Uniform on [-hi, -lo] U [lo, hi].
Sampler away_from_zero(double lo, double hi) {
  return [lo, hi](std::mt19937_64& g) {
    double v = std::uniform_real_distribution<double>(lo, hi)(g);
    return (g() & 1) ? v : -v;
  };
}

// A leaf that requires grad. transposed: the storage holds the transpose of the last two dims,
// and the leaf is a non-contiguous view of it (shape as asked, strides swapped).
Tensor leaf(std::mt19937_64& g, const Shape& shape, const Sampler& s, bool transposed = false,
            DType dtype = DType::F64) {
  Shape store = shape;
  if (transposed) {
    EXPECT_GE(shape.size(), 2u);
    std::swap(store[store.size() - 1], store[store.size() - 2]);
  }
  std::vector<double> v(size_t(nx::numel_of(store)));
  for (auto& x : v) x = s(g);
  Tensor base = nxt::make(v, store, dtype);
  Tensor t = base;
  if (transposed) {
    Shape st = base.strides();
    std::swap(st[st.size() - 1], st[st.size() - 2]);
    t = base.alias(shape, st, base.offset());
    if (shape[shape.size() - 1] > 1 && shape[shape.size() - 2] > 1) {
      EXPECT_FALSE(t.is_contiguous());
    }
  }
  t.impl()->requires_grad = true;
  return t;
}

// Storage element j (row-major logical index) of a leaf, as a double, and writing it back.
double get_elem(const Tensor& t, int64_t j) {
  int64_t off = nxt::element_offset(t, j);
  char* base = static_cast<char*>(t.impl()->storage->data);
  if (t.dtype() == DType::F64) return reinterpret_cast<double*>(base)[off];
  return double(reinterpret_cast<float*>(base)[off]);
}
void set_elem(const Tensor& t, int64_t j, double v) {
  int64_t off = nxt::element_offset(t, j);
  char* base = static_cast<char*>(t.impl()->storage->data);
  if (t.dtype() == DType::F64) reinterpret_cast<double*>(base)[off] = v;
  else reinterpret_cast<float*>(base)[off] = float(v);
}

// ---------------------------------------------------------------- the checks
struct Objective {
  std::vector<std::vector<double>> w;  // one weight vector per output
  std::vector<Tensor> wt;

  // L = sum_k sum_i w_k,i y_k,i, evaluated without recording a graph
  long double eval(const Fn& f, const std::vector<Tensor>& in) const {
    nx::GradModeGuard off(false);
    auto ys = f(in);
    long double L = 0;
    for (size_t k = 0; k < ys.size(); ++k) {
      auto v = values(ys[k]);
      for (size_t i = 0; i < v.size(); ++i) L += (long double)(w[k][i]) * v[i];
    }
    return L;
  }
};

// The analytic gradients of L with respect to the leaves (undefined -> zeros).
std::vector<Tensor> analytic(const Fn& f, const std::vector<Tensor>& in, Objective& obj, std::mt19937_64* g,
                             bool create_graph) {
  std::vector<Tensor> ys = f(in);
  if (obj.w.empty()) {  // first call: draw the weights
    for (const Tensor& y : ys) {
      std::vector<double> w(size_t(y.numel()));
      for (auto& x : w) x = std::uniform_real_distribution<double>(-1, 1)(*g);
      obj.w.push_back(w);
      obj.wt.push_back(nxt::make(w, y.shape(), y.dtype()));
    }
  }
  nx::BackwardOptions opt;
  opt.accumulate = false;
  opt.create_graph = create_graph;
  opt.retain_graph = create_graph;  // as the C API (and PyTorch) do: a second backward goes through it
  std::vector<Tensor> grads;
  if (ys.size() == 1) {
    EXPECT_TRUE(ys[0].requires_grad());
    grads = nx::run_backward(ys[0], obj.wt[0], opt, in);  // the VJP with w itself
  } else {
    Tensor root;
    for (size_t k = 0; k < ys.size(); ++k) {
      Tensor term = nx::sum(nx::mul(ys[k], obj.wt[k]), {}, false);
      root = root.defined() ? nx::add(root, term) : term;
    }
    grads = nx::run_backward(root, Tensor(), opt, in);
  }
  for (size_t i = 0; i < in.size(); ++i) {
    if (!grads[i].defined()) grads[i] = nx::zeros(in[i].shape(), in[i].dtype(), in[i].device());
    EXPECT_EQ(grads[i].shape(), in[i].shape());
  }
  return grads;
}

struct Options {
  double eps = 1e-6;
  double rtol = 1e-6;
  std::vector<bool> check;  // which leaves to check (default all)
  bool quiet = false;       // report a mismatch only through the return value (meta-tests)
};

// Checks every leaf of in; records op as verified when all elements agree.
bool gradcheck(const std::string& op, const Fn& f, const std::vector<Tensor>& in, Options o = {}) {
  std::mt19937_64 g(fnv(op) ^ 0x9e3779b97f4a7c15ull);
  Objective obj;
  std::vector<Tensor> grads = analytic(f, in, obj, &g, false);
  const long double L0 = obj.eval(f, in);
  const double atol = 1e-8 * std::max(1.0, double(std::fabs(L0)));
  bool ok = true;
  double worst = 0;
  int64_t count = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!o.check.empty() && !o.check[i]) continue;
    std::vector<double> a = values(grads[i]);
    for (int64_t j = 0; j < in[i].numel(); ++j) {
      const double x0 = get_elem(in[i], j);
      set_elem(in[i], j, x0 + o.eps);
      long double lp = obj.eval(f, in);
      set_elem(in[i], j, x0 - o.eps);
      long double lm = obj.eval(f, in);
      set_elem(in[i], j, x0);
      // the step actually taken (x0 +- eps rounds in the leaf's dtype)
      double num = double((lp - lm) / ((long double)(x0 + o.eps) - (long double)(x0 - o.eps)));
      if (in[i].dtype() == DType::F32)
        num = double((lp - lm) / ((long double)(float(x0 + o.eps)) - (long double)(float(x0 - o.eps))));
      double err = std::fabs(a[size_t(j)] - num);
      double allowed = o.rtol * std::fabs(num) + atol;
      worst = std::max(worst, err / allowed);
      ++count;
      if (!(err <= allowed)) {
        if (ok && !o.quiet)
          ADD_FAILURE() << op << ": input " << i << " element " << j << ": analytic " << a[size_t(j)] << ", numeric "
                        << num << " (|diff| " << err << " > " << allowed << ")";
        ok = false;
      }
    }
  }
  EXPECT_GT(count, 0) << op;
  if (ok) verified().insert(op);
  std::printf("  %-16s %4lld elements, max error %.3f of the tolerance\n", op.c_str(), (long long)count, worst);
  return ok;
}

// Second order: H(x) = sum_i v_i . dL/dx_i; its gradient from differentiating the create_graph
// gradient against central differences of the analytic first-order gradient.
bool gradgradcheck(const std::string& op, const Fn& f, const std::vector<Tensor>& in, bool quiet = false) {
  const double eps = 1e-6;
  std::mt19937_64 g(fnv(op) ^ 0x51ed27ull);
  Objective obj;
  std::vector<Tensor> g1 = analytic(f, in, obj, &g, true);
  std::vector<std::vector<double>> v;
  Tensor H;
  for (size_t i = 0; i < in.size(); ++i) {
    v.push_back(nxt::uniform(g, size_t(in[i].numel()), -1, 1));
    if (!g1[i].requires_grad()) continue;  // this gradient does not depend on any leaf
    Tensor term = nx::sum(nx::mul(g1[i], nxt::make(v[i], in[i].shape())), {}, false);
    H = H.defined() ? nx::add(H, term) : term;
  }
  if (!H.defined()) {
    if (!quiet) ADD_FAILURE() << op << ": the first-order gradient has no graph (create_graph)";
    return false;
  }
  nx::BackwardOptions opt;
  opt.accumulate = false;
  std::vector<Tensor> hv = nx::run_backward(H, Tensor(), opt, in);
  auto Hval = [&]() {
    std::vector<Tensor> gr = analytic(f, in, obj, nullptr, false);
    long double s = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      auto gv = values(gr[i]);
      for (size_t j = 0; j < gv.size(); ++j) s += (long double)(v[i][j]) * gv[j];
    }
    return s;
  };
  const double atol = 1e-8 * std::max(1.0, double(std::fabs(Hval())));
  bool ok = true;
  double worst = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    std::vector<double> a = hv[i].defined() ? values(hv[i]) : std::vector<double>(size_t(in[i].numel()), 0.0);
    for (int64_t j = 0; j < in[i].numel(); ++j) {
      const double x0 = get_elem(in[i], j);
      set_elem(in[i], j, x0 + eps);
      long double hp = Hval();
      set_elem(in[i], j, x0 - eps);
      long double hm = Hval();
      set_elem(in[i], j, x0);
      double num = double((hp - hm) / ((long double)(x0 + eps) - (long double)(x0 - eps)));
      double err = std::fabs(a[size_t(j)] - num), allowed = 1e-6 * std::fabs(num) + atol;
      worst = std::max(worst, err / allowed);
      if (!(err <= allowed)) {
        if (ok && !quiet)
          ADD_FAILURE() << op << " (second order): input " << i << " element " << j << ": analytic " << a[size_t(j)]
                        << ", numeric " << num;
        ok = false;
      }
    }
  }
  if (ok) second_order_verified().insert(op);
  std::printf("  %-16s second order: max error %.3f of the tolerance\n", op.c_str(), worst);
  return ok;
}

Fn unary_fn(UnaryOp op, double p0 = 0, double p1 = 0) {
  return [=](const std::vector<Tensor>& x) { return std::vector<Tensor>{nx::unary(op, x[0], p0, p1)}; };
}
Fn one(std::function<Tensor(const std::vector<Tensor>&)> f) {
  return [f](const std::vector<Tensor>& x) { return std::vector<Tensor>{f(x)}; };
}

// ---------------------------------------------------------------- case registry
// Every TEST below is also registered here, so that Gradcheck.Summary can run the ones that did
// not run in this process (ctest runs each test in its own process).
std::vector<std::pair<std::string, void (*)()>>& cases() {
  static std::vector<std::pair<std::string, void (*)()>> c;
  return c;
}
std::set<std::string>& ran() {
  static std::set<std::string> s;
  return s;
}
bool register_case(const char* name, void (*fn)()) {
  cases().push_back({name, fn});
  return true;
}

#define GRAD_CASE(Name)                                                \
  void Name##_body();                                                  \
  TEST(Gradcheck, Name) {                                              \
    ran().insert(#Name);                                               \
    Name##_body();                                                     \
  }                                                                    \
  const bool Name##_registered = register_case(#Name, &Name##_body);  \
  void Name##_body()

// ---------------------------------------------------------------- unary
struct UnaryCase {
  UnaryOp op;
  const char* name;
  Sampler s;
};

GRAD_CASE(InternalUnaryOps) {
  const UnaryCase cases_[] = {
      {UnaryOp::Square, "square", U(-2, 2)},
      {UnaryOp::Reciprocal, "reciprocal", away_from_zero(0.4, 2)},
      {UnaryOp::Erf, "erf", U(-2, 2)},
  };
  std::mt19937_64 g(11);
  for (const auto& c : cases_) {
    SCOPED_TRACE(c.name);
    // contiguous [3, 4], and a transposed (non-contiguous) [4, 3]
    bool a = gradcheck(c.name, unary_fn(c.op), {leaf(g, {3, 4}, c.s)});
    bool b = gradcheck(c.name, unary_fn(c.op), {leaf(g, {4, 3}, c.s, true)});
    if (!(a && b)) verified().erase(c.name);
  }
}

// ---------------------------------------------------------------- sum_to
// Distinct values at least 0.01 apart (no ties for max_pool2d, NnComposites below).
Sampler distinct() {
  auto used = std::make_shared<std::set<int>>();
  return [used](std::mt19937_64& r) {
    int k;
    do k = int(r() % 400) - 200;
    while (!used->insert(k).second);
    return 0.01 * k + 0.003;
  };
}

GRAD_CASE(SumTo) {
  std::mt19937_64 g(34);
  bool ok = gradcheck("sum_to", one([](auto& x) { return nx::sum_to(x[0], {3, 1}); }), {leaf(g, {2, 3, 4}, U(-2, 2))});
  ok &= gradcheck("sum_to", one([](auto& x) { return nx::sum_to(x[0], {4}); }), {leaf(g, {3, 4}, U(-2, 2), true)});
  ok &= gradcheck("sum_to", one([](auto& x) { return nx::sum_to(x[0], {}); }), {leaf(g, {2, 2}, U(-2, 2))});
  if (!ok) verified().erase("sum_to");
}

// ---------------------------------------------------------------- slice_scatter
// f(view(x)) with a nonlinear f after the op, so that the element mapping matters.
Tensor post(const Tensor& y) { return nx::mul(y, nx::unary(UnaryOp::Sin, y)); }

GRAD_CASE(SliceScatter) {
  std::mt19937_64 g(51);
  // the gradient of slice, itself differentiable
  bool ok = gradcheck("slice_scatter", one([](auto& x) { return post(nx::slice_scatter(x[0], {7, 2}, 0, 1, 3)); }),
                      {leaf(g, {2, 2}, U(-2, 2))});
  if (!ok) verified().erase("slice_scatter");
}

// ---------------------------------------------------------------- index_add, scatter_add
GRAD_CASE(IndexAddScatterAdd) {
  std::mt19937_64 g(61);
  auto s = U(-2, 2);
  Tensor ai = nxt::make_i64({1, 1, 3}, {3});
  bool ok = gradcheck("index_add", one([ai](auto& x) { return post(nx::index_add(x[0], 0, ai, x[1])); }),
                      {leaf(g, {4, 3}, s, true), leaf(g, {3, 3}, s)});
  ok &= gradcheck("index_add", one([ai](auto& x) { return post(nx::index_add(x[0], 1, ai, x[1])); }),
                  {leaf(g, {2, 4}, s), leaf(g, {2, 3}, s, true)});
  if (!ok) verified().erase("index_add");

  Tensor si = nxt::make_i64({0, 0, 3, 1, 2, 2}, {3, 2});
  ok = gradcheck("scatter_add", one([si](auto& x) { return post(nx::scatter_add(x[0], 1, si, x[1])); }),
                 {leaf(g, {3, 4}, s, true), leaf(g, {3, 2}, s)});
  Tensor si0 = nxt::make_i64({2, 2, 0, 1}, {2, 2});
  ok &= gradcheck("scatter_add", one([si0](auto& x) { return post(nx::scatter_add(x[0], 0, si0, x[1])); }),
                  {leaf(g, {3, 2}, s), leaf(g, {2, 2}, s, true)});
  if (!ok) verified().erase("scatter_add");
}

// ---------------------------------------------------------------- losses
// Closed-form spot checks of two loss gradients (independent of finite differences).
GRAD_CASE(LossClosedForms) {
  std::mt19937_64 g(72);
  // d mean-CE / d logits = (softmax - onehot) / N over the rows that count
  Tensor x = leaf(g, {3, 4}, U(-2, 2));
  Tensor t = nxt::make_i64({1, -100, 3}, {3});
  Tensor loss = nx::cross_entropy(x, t, -100, 0.0, nx::Reduction::Mean);
  nx::BackwardOptions opt;
  opt.accumulate = false;
  auto gx = values(nx::run_backward(loss, Tensor(), opt, {x})[0]);
  auto xv = values(x);
  const int64_t tv[] = {1, -100, 3};
  for (int64_t i = 0; i < 3; ++i) {
    double mx = -1e300, z = 0;
    for (int64_t j = 0; j < 4; ++j) mx = std::max(mx, xv[size_t(i * 4 + j)]);
    for (int64_t j = 0; j < 4; ++j) z += std::exp(xv[size_t(i * 4 + j)] - mx);
    for (int64_t j = 0; j < 4; ++j) {
      double p = std::exp(xv[size_t(i * 4 + j)] - mx) / z;
      double want = tv[i] == -100 ? 0.0 : (p - (j == tv[i] ? 1.0 : 0.0)) / 2.0;
      EXPECT_NEAR(gx[size_t(i * 4 + j)], want, 1e-14) << i << "," << j;
    }
  }
  // d sum-BCE / d logits = sigmoid(x) - t (to e^-20: softplus's derivative is exactly 1 above 20,
  // torch's threshold)
  Tensor l = leaf(g, {5}, U(-30, 30));
  Tensor tt = nxt::make({0, 1, 0.5, 0.25, 1}, {5});
  Tensor b = nx::bce_with_logits(l, tt, nx::Reduction::Sum);
  auto gl = values(nx::run_backward(b, Tensor(), opt, {l})[0]);
  auto lv = values(l);
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(gl[size_t(i)], 1 / (1 + std::exp(-lv[size_t(i)])) - values(tt)[size_t(i)], 2.1e-9);
}

// ---------------------------------------------------------------- second order
// erf (no C function) and a composite: the Hessian of a small MLP's loss (linear, tanh, matmul
// and cross-entropy with label smoothing in one graph). The registry ops' own second order is
// the op harness's gradgrad mode.
GRAD_CASE(SecondOrder) {
  std::mt19937_64 g(81);
  gradgradcheck("erf", unary_fn(UnaryOp::Erf), {leaf(g, {2, 3}, U(-2, 2), true)});
  Tensor tgt = nxt::make_i64({1, 0}, {2});
  gradgradcheck("mlp", one([tgt](auto& x) {
                  Tensor h = nx::unary(UnaryOp::Tanh, nx::linear(x[0], x[1], Tensor()));
                  return nx::cross_entropy(nx::matmul(h, x[2]), tgt, -100, 0.1, nx::Reduction::Mean);
                }),
                {leaf(g, {2, 3}, U(-1, 1)), leaf(g, {4, 3}, U(-1, 1)), leaf(g, {4, 2}, U(-1, 1))});
  for (const char* op : {"erf", "mlp"}) EXPECT_TRUE(second_order_verified().count(op)) << op;
}

// Gradients accumulate into .grad across backward calls and through shared subexpressions.
GRAD_CASE(AccumulationAndReuse) {
  std::mt19937_64 g(82);
  Tensor x = leaf(g, {3}, U(0.5, 2));
  // y = x * x + exp(x) uses x three times; dy/dx = 2x + exp(x)
  auto xv = values(x);
  for (int round = 1; round <= 2; ++round) {
    Tensor y = nx::sum(nx::add(nx::mul(x, x), nx::exp(x)), {}, false);
    nx::run_backward(y, Tensor(), nx::BackwardOptions{});
    ASSERT_TRUE(x.impl()->grad);
    auto gv = values(Tensor(x.impl()->grad));
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(gv[size_t(i)], round * (2 * xv[size_t(i)] + std::exp(xv[size_t(i)])), 1e-13);
  }
}

// ---------------------------------------------------------------- nn composites
// Layer ops of src/nn/functional.hpp (composed from the ops above): checked too, counted apart.
std::set<std::string>& composites_verified() {
  static std::set<std::string> s;
  return s;
}

GRAD_CASE(NnComposites) {
  std::mt19937_64 g(101);
  auto s = U(-1.5, 1.5);
  auto rec = [](const char* name, bool ok) {
    verified().erase(name);  // not one of the ops.hpp ops
    if (ok) composites_verified().insert(name);
    else composites_verified().erase(name);
  };
  rec("layer_norm", gradcheck("layer_norm", one([](auto& x) { return nx::fn::layer_norm(x[0], x[1], x[2], 1e-5); }),
                              {leaf(g, {3, 5}, s, true), leaf(g, {5}, s), leaf(g, {5}, s)}) &&
                        gradcheck("layer_norm", one([](auto& x) { return nx::fn::layer_norm(x[0], Tensor(), Tensor(), 1e-5); }),
                                  {leaf(g, {2, 2, 4}, s)}));
  rec("rms_norm", gradcheck("rms_norm", one([](auto& x) { return nx::fn::rms_norm(x[0], x[1], 1e-6); }),
                            {leaf(g, {3, 4}, s, true), leaf(g, {4}, s)}));
  rec("rope", gradcheck("rope", one([](auto& x) { return nx::fn::rope(x[0], 3, 10000.0); }), {leaf(g, {1, 2, 3, 4}, s)}));
  rec("attention",
      gradcheck("attention", one([](auto& x) { return nx::fn::attention(x[0], x[1], x[2], true, true, 0.5); }),
                {leaf(g, {1, 2, 3, 4}, s), leaf(g, {1, 1, 5, 4}, s), leaf(g, {1, 1, 5, 4}, s, true)}) &&
          gradcheck("attention", one([](auto& x) { return nx::fn::attention(x[0], x[1], x[2], false, false, 0.7); }),
                    {leaf(g, {2, 1, 2, 3}, s), leaf(g, {2, 1, 4, 3}, s), leaf(g, {2, 1, 4, 3}, s)}));
  rec("unfold2d", gradcheck("unfold2d", one([](auto& x) { return post(nx::fn::unfold2d(x[0], 2, 3, 2, 1)); }),
                            {leaf(g, {1, 2, 4, 5}, s, true)}));
  rec("conv2d", gradcheck("conv2d", one([](auto& x) { return nx::fn::conv2d(x[0], x[1], x[2], 2, 1); }),
                          {leaf(g, {2, 2, 5, 5}, s), leaf(g, {3, 2, 3, 3}, s), leaf(g, {3}, s)}));
  rec("max_pool2d", gradcheck("max_pool2d", one([](auto& x) { return nx::fn::max_pool2d(x[0], 2, 2); }),
                              {leaf(g, {1, 2, 4, 4}, distinct())}));
  rec("avg_pool2d", gradcheck("avg_pool2d", one([](auto& x) { return post(nx::fn::avg_pool2d(x[0], 2, 1)); }),
                              {leaf(g, {1, 2, 4, 3}, s, true)}));
  for (const char* name : {"layer_norm", "rms_norm", "rope", "attention", "unfold2d", "conv2d", "max_pool2d", "avg_pool2d"})
    EXPECT_TRUE(composites_verified().count(name)) << name;
}

// ---------------------------------------------------------------- the checks can fail
// sin with a hand-written VJP: scaled by `scale`, and computed on detached values when
// `detached` (right to first order, but not differentiable: its second order is wrong).
Tensor sabotaged_sin(const Tensor& x, double scale, bool detached) {
  Tensor out;
  {
    nx::GradModeGuard off(false);
    out = nx::unary(UnaryOp::Sin, nx::detach(x));
  }
  return nx::record1("SabotagedSinBackward", out, {x}, {x}, [=](const auto& g, const auto& s, const auto&) {
    Tensor c = nx::unary(UnaryOp::Cos, detached ? nx::detach(s[0]) : s[0]);
    Tensor gx = nx::mul(g[0], c);
    return std::vector<Tensor>{scale == 1.0 ? gx : nx::mul_scalar(gx, scale)};
  });
}

TEST(GradcheckMeta, DetectsWrongGradients) {
  std::mt19937_64 g(91);
  Options quiet;
  quiet.quiet = true;
  auto f = [](double scale, bool detached) {
    return one([=](auto& x) { return sabotaged_sin(x[0], scale, detached); });
  };
  // the correct VJP passes, to first and second order
  EXPECT_TRUE(gradcheck("sabotaged_sin_ok", f(1.0, false), {leaf(g, {3, 4}, U(-3, 3), true)}, quiet));
  EXPECT_TRUE(gradgradcheck("sabotaged_sin_ok", f(1.0, false), {leaf(g, {3, 4}, U(-3, 3))}, true));
  // a relative error of 1e-5 is caught (the tolerance is 1e-6 relative)
  EXPECT_FALSE(gradcheck("sabotaged_sin_scaled", f(1.0 + 1e-5, false), {leaf(g, {3, 4}, U(-3, 3))}, quiet));
  // a VJP that is right but not differentiable passes first order and fails second order
  EXPECT_TRUE(gradcheck("sabotaged_sin_detached", f(1.0, true), {leaf(g, {3, 4}, U(-3, 3))}, quiet));
  EXPECT_FALSE(gradgradcheck("sabotaged_sin_detached", f(1.0, true), {leaf(g, {3, 4}, U(-3, 3))}, true));
  // a wrong element mapping: the gradient of a transposed leaf read as if it were contiguous
  Fn swapped = one([](auto& x) {
    Tensor out;
    {
      nx::GradModeGuard off(false);
      out = nx::unary(UnaryOp::Square, nx::detach(x[0]));
    }
    return nx::record1("SwappedBackward", out, {x[0]}, {x[0]}, [](const auto& gg, const auto& s, const auto&) {
      Tensor gx = nx::mul(gg[0], nx::mul_scalar(nx::contiguous(s[0]), 2.0));
      return std::vector<Tensor>{nx::transpose(nx::reshape(gx, {s[0].shape()[1], s[0].shape()[0]}), 0, 1)};
    });
  });
  EXPECT_FALSE(gradcheck("swapped", swapped, {leaf(g, {3, 4}, U(-2, 2), true)}, quiet));
  for (const char* name : {"sabotaged_sin_ok", "sabotaged_sin_scaled", "sabotaged_sin_detached", "swapped"}) {
    verified().erase(name);
    second_order_verified().erase(name);
  }
}

// ---------------------------------------------------------------- summary
TEST(Gradcheck, Summary) {
  for (const auto& [name, fn] : cases()) {
    if (ran().count(name)) continue;
    SCOPED_TRACE("case " + name);
    ran().insert(name);
    fn();
  }
  std::vector<std::string> missing;
  for (const char* op : kRequiredOps)
    if (!verified().count(op)) missing.push_back(op);
  std::string list;
  for (const auto& m : missing) list += " " + m;
  EXPECT_TRUE(missing.empty()) << "ops not verified:" << list;
  std::set<std::string> required(std::begin(kRequiredOps), std::end(kRequiredOps));
  for (const auto& op : verified()) EXPECT_TRUE(required.count(op)) << "verified op missing from kRequiredOps: " << op;
  size_t second = 0;
  for (const auto& op : second_order_verified()) second += required.count(op);
  std::printf("gradcheck: %zu internal ops verified by finite differences in f64 (%zu of them also to second "
              "order; plus %zu nn layer composites)\n",
              verified().size(), second, composites_verified().size());
}

}  // namespace
