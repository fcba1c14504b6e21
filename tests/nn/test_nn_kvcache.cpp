// KV cache against full recomputation, through the C++ internals (src/nn): the logits of
// nx::nn::GPT::forward_cached with make_cache, fed the sequence in pieces (a prefill, then one
// token at a time, or uneven chunks), must equal the matching positions of GPT::forward on the
// whole sequence: max |diff| < 1e-5 in f32 and < 1e-10 in f64, for rope + grouped-query heads,
// ALiBi + LayerNorm + GELU MLP + untied head, learned positions + multi-query, rope + ALiBi; batch
// 2. Also: the cache length advances, a cache too short is NX_ERR_STATE, learned positions past
// the context are NX_ERR_SHAPE, and nn::generate (greedy) equals argmax by full recomputation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "core/error.hpp"
#include "nn/module.hpp"
#include "ops/ops.hpp"

namespace {

using nx::DType;
using nx::Tensor;

struct Config {
  const char* name;
  nx::nn::GPTConfig gpt;
};

std::vector<Config> configs() {
  std::vector<Config> out;
  nx::nn::GPTConfig c;
  c.vocab = 53; c.context = 32; c.dim = 32; c.layers = 2; c.heads = 4; c.kv_heads = 2; c.ffn_hidden = 40;
  c.rope = true; c.alibi = false; c.swiglu = true; c.rms_norm = true; c.tie_embeddings = true;
  out.push_back({"rope_gqa_swiglu_rms_tied", c});
  c.heads = 3; c.kv_heads = 0; c.dim = 24; c.rope = false; c.alibi = true; c.swiglu = false; c.rms_norm = false;
  c.tie_embeddings = false; c.ffn_hidden = 0;
  out.push_back({"alibi_gelu_ln_untied", c});
  c.heads = 2; c.kv_heads = 1; c.dim = 16; c.alibi = false; c.swiglu = true; c.rms_norm = true; c.tie_embeddings = true;
  c.ffn_hidden = 24; c.layers = 3;
  out.push_back({"learned_mqa", c});
  c.heads = 4; c.kv_heads = 2; c.dim = 16; c.rope = true; c.alibi = true; c.layers = 2;
  out.push_back({"rope_alibi_gqa", c});
  return out;
}

Tensor random_tokens(int64_t b, int64_t t, int64_t vocab, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<int64_t> ids(size_t(b * t));
  for (auto& v : ids) v = int64_t(g() % uint64_t(vocab));
  return nx::from_data(ids.data(), {b, t}, DType::I64, nx::Device{});
}

std::vector<double> values(const Tensor& t) {
  Tensor c = nx::contiguous(nx::cast(nx::detach(t), DType::F64));
  std::vector<double> v(size_t(c.numel()));
  nx::copy_to_host(c, v.data(), v.size() * sizeof(double));
  return v;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  auto va = values(a), vb = values(b);
  double m = 0;
  for (size_t i = 0; i < va.size(); ++i) m = std::max(m, std::fabs(va[i] - vb[i]));
  return m;
}

// Feeds tokens [B, T] in chunks of the given sizes through the cache; returns the worst
// |cached - full| over all positions.
double cached_vs_full(nx::nn::GPT& model, const Tensor& tokens, const std::vector<int64_t>& chunks) {
  nx::GradModeGuard off(false);
  const int64_t b = tokens.shape()[0], t = tokens.shape()[1];
  Tensor full = model.forward(tokens);
  auto caches = model.make_cache(b, t);
  int64_t at = 0;
  double worst = 0;
  for (int64_t n : chunks) {
    Tensor piece = nx::slice(tokens, 1, at, at + n, 1);
    Tensor got = model.forward_cached(piece, &caches);
    for (auto& c : caches) EXPECT_EQ(c.length, at + n);
    worst = std::max(worst, max_abs_diff(got, nx::slice(full, 1, at, at + n, 1)));
    at += n;
  }
  EXPECT_EQ(at, t);
  return worst;
}

void check_cached_logits(DType dt) {
  const double tol = dt == DType::F32 ? 1e-5 : 1e-10;
  uint64_t seed = 1;
  for (const auto& cfg : configs()) {
    nx::manual_seed(seed++);
    nx::nn::GPT model(cfg.gpt, dt, nx::Device{});
    model.train(false);
    {  // a larger embedding than the 0.02 init, so that the logits are not all tiny
      nx::GradModeGuard off(false);
      nx::copy_(*model.tok->weight, nx::mul_scalar(*model.tok->weight, 25.0));
    }
    const int64_t t = cfg.gpt.context;
    Tensor tokens = random_tokens(2, t, cfg.gpt.vocab, seed * 7);
    std::vector<int64_t> one_by_one(size_t(t - 5), 1);
    one_by_one.insert(one_by_one.begin(), 5);  // prefill 5, then single tokens
    std::vector<int64_t> uneven = {3, 1, 7, 2, t - 13};
    std::vector<int64_t> single = {t};
    const double e1 = cached_vs_full(model, tokens, one_by_one);
    const double e2 = cached_vs_full(model, tokens, uneven);
    const double e3 = cached_vs_full(model, tokens, single);
    std::printf("  %-26s %s: max |cached - full| prefill+1s %.2e, uneven chunks %.2e, one chunk %.2e\n", cfg.name,
                dt == DType::F32 ? "f32" : "f64", e1, e2, e3);
    EXPECT_LT(e1, tol) << cfg.name;
    EXPECT_LT(e2, tol) << cfg.name;
    EXPECT_LT(e3, tol) << cfg.name;
  }
}

TEST(KVCache, CachedLogitsEqualFullRecomputationF32) { check_cached_logits(DType::F32); }
TEST(KVCache, CachedLogitsEqualFullRecomputationF64) { check_cached_logits(DType::F64); }

TEST(KVCacheLimits, OverflowAndContext) {
  auto cfgs = configs();
  nx::manual_seed(9);
  nx::nn::GPT rope(cfgs[0].gpt, DType::F32, nx::Device{});
  nx::GradModeGuard off(false);
  auto caches = rope.make_cache(1, 4);
  Tensor three = random_tokens(1, 3, cfgs[0].gpt.vocab, 3);
  rope.forward_cached(three, &caches);
  nx_status st = NX_OK;
  try {
    rope.forward_cached(three, &caches);  // 6 > 4 positions
  } catch (const nx::Error& e) {
    st = e.status();
  }
  EXPECT_EQ(st, NX_ERR_STATE);
  nx::nn::GPT learned(cfgs[2].gpt, DType::F32, nx::Device{});  // learned positions, context 32
  auto big = learned.make_cache(1, 40);
  learned.forward_cached(random_tokens(1, 30, cfgs[2].gpt.vocab, 4), &big);
  st = NX_OK;
  try {
    learned.forward_cached(random_tokens(1, 3, cfgs[2].gpt.vocab, 5), &big);  // 33 > context 32
  } catch (const nx::Error& e) {
    st = e.status();
  }
  EXPECT_EQ(st, NX_ERR_SHAPE);
}

TEST(KVCacheGenerate, GreedyEqualsArgmaxOfFullRecomputation) {
  for (const auto& cfg : configs()) {
    nx::manual_seed(21);
    nx::nn::GPT model(cfg.gpt, DType::F32, nx::Device{});
    {
      nx::GradModeGuard off(false);
      nx::copy_(*model.tok->weight, nx::mul_scalar(*model.tok->weight, 25.0));
    }
    std::vector<int64_t> prompt = {1, 4, 9};
    const int64_t n = cfg.gpt.context - 3;
    nx::nn::SampleOptions opt;
    opt.temperature = 0;
    Tensor gen = nx::nn::generate(model, prompt, n, opt);
    std::vector<int64_t> got(size_t(gen.numel()));
    nx::copy_to_host(gen, got.data(), got.size() * sizeof(int64_t));
    nx::GradModeGuard off(false);
    std::vector<int64_t> seq = prompt;
    for (int64_t i = 0; i < n; ++i) {
      Tensor x = nx::from_data(seq.data(), {1, int64_t(seq.size())}, DType::I64, nx::Device{});
      Tensor logits = model.forward(x);
      Tensor last = nx::slice(logits, 1, int64_t(seq.size()) - 1, int64_t(seq.size()), 1);
      seq.push_back(int64_t(nx::item(nx::argmax(nx::reshape(last, {cfg.gpt.vocab}), 0, false))));
    }
    EXPECT_EQ(got, seq) << cfg.name;
    EXPECT_TRUE(model.training());  // generate restores the mode
  }
}

}  // namespace
