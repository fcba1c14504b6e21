// The autograd engine's grad_ready hook (used by data parallelism to start reducing a gradient
// while backward goes on): it fires once per backward, after the leaf's last contribution, with
// the final gradient in .grad; never for leaves that got no gradient, nor for nx_autograd_grad.
#include <map>
#include <string>

#include "autograd/engine.hpp"
#include "graph/node.hpp"
#include "cpp_test_util.hpp"

namespace {

using nx::Tensor;
using nxt::make;
using nxt::values;

struct Recorder {
  std::map<std::string, int> calls;
  std::map<std::string, std::vector<double>> grads;  // .grad when the hook fired
  void watch(const Tensor& leaf, const std::string& name) {
    leaf.impl()->grad_ready = [this, leaf_impl = leaf.impl(), name] {
      ++calls[name];
      grads[name] = values(Tensor(leaf_impl->grad));
    };
  }
};

Tensor leaf(const std::vector<double>& v) {
  Tensor t = make(v, {int64_t(v.size())});
  t.impl()->requires_grad = true;
  return t;
}

TEST(GradReadyHook, FiresOnceAfterTheLastContribution) {
  // w is used twice (early and late in the graph, like tied embeddings), b once, unused never.
  Tensor w = leaf({1, 2}), b = leaf({3, 4}), unused = leaf({5, 6});
  Recorder r;
  r.watch(w, "w");
  r.watch(b, "b");
  r.watch(unused, "unused");
  Tensor h = nx::mul(w, b);                        // dh/dw = b, dh/db = w
  Tensor y = nx::sum(nx::mul(h, w), {}, false);    // y = sum(w^2 b): dy/dw = 2 w b, dy/db = w^2
  nx::run_backward(y, Tensor(), nx::BackwardOptions{});
  EXPECT_EQ(r.calls["w"], 1);
  EXPECT_EQ(r.calls["b"], 1);
  EXPECT_EQ(r.calls.count("unused"), 0u);
  EXPECT_EQ(r.grads["w"], (std::vector<double>{6, 16}));  // the sum of both paths, not a partial one
  EXPECT_EQ(r.grads["b"], (std::vector<double>{1, 4}));
  for (Tensor t : {w, b, unused}) t.impl()->grad_ready = nullptr;
}

TEST(GradReadyHook, FiresThroughNodesThatNeedNoGradientAndForALeafRoot) {
  Tensor w = leaf({2, 3});
  Tensor c = make({1, 1}, {2});  // constant: its branch is skipped by the engine
  Recorder r;
  r.watch(w, "w");
  Tensor y = nx::sum(nx::add(nx::mul(w, w), nx::unary(nx::UnaryOp::Exp, c, 0, 0)), {}, false);
  nx::run_backward(y, Tensor(), nx::BackwardOptions{});
  EXPECT_EQ(r.calls["w"], 1);
  EXPECT_EQ(r.grads["w"], (std::vector<double>{4, 6}));

  Tensor s = leaf({7});
  r.watch(s, "s");
  nx::run_backward(s, Tensor(), nx::BackwardOptions{});
  EXPECT_EQ(r.calls["s"], 1);
  w.impl()->grad_ready = nullptr;
  s.impl()->grad_ready = nullptr;
}

TEST(GradReadyHook, NotFiredWhenGradientsAreOnlyCollected) {
  Tensor w = leaf({1, 2});
  Recorder r;
  r.watch(w, "w");
  Tensor y = nx::sum(nx::mul(w, w), {}, false);
  nx::BackwardOptions opt;
  opt.accumulate = false;  // nx_autograd_grad
  auto g = nx::run_backward(y, Tensor(), opt, {w});
  EXPECT_EQ(values(g[0]), (std::vector<double>{2, 4}));
  EXPECT_EQ(r.calls.count("w"), 0u);
  w.impl()->grad_ready = nullptr;
}

}  // namespace
