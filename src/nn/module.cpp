#include "nn/module.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "autograd/checkpoint.hpp"
#include "core/int_math.hpp"

namespace nx::nn {

std::vector<std::pair<std::string, Tensor*>> Module::named_parameters() {
  std::vector<std::pair<std::string, Tensor*>> out;
  for (auto& [name, t] : params_) out.emplace_back(name, t.get());
  for (auto& [prefix, child] : children_)
    for (auto& [name, t] : child->named_parameters()) out.emplace_back(prefix + "." + name, t);
  return out;
}

void Module::to(Device device) {
  GradModeGuard off(false);
  for (auto& [name, t] : params_) {
    if (t->device() == device) continue;
    bump_capture_epoch();  // a captured plan holds the old parameter's memory
    bool rg = t->requires_grad();
    *t = detach(to_device(*t, device));
    t->impl()->requires_grad = rg;
  }
  for (auto& [name, child] : children_) child->to(device);
}

std::vector<bool> Module::modes() const {
  std::vector<bool> out{training_};
  for (const auto& [name, child] : children_) {
    const std::vector<bool> sub = child->modes();
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

void Module::train(bool training) {
  training_ = training;
  for (auto& [name, child] : children_) child->train(training);
}

Tensor& Module::add_parameter(const std::string& name, Tensor value) {
  value = detach(value);
  value.impl()->requires_grad = true;
  params_.emplace_back(name, std::make_unique<Tensor>(value));
  return *params_.back().second;
}

Tensor uniform_param(const Shape& shape, double bound, DType dtype, Device device) {
  GradModeGuard off(false);
  return add_scalar(mul_scalar(rand(shape, dtype, device), 2 * bound), -bound);
}

Linear::Linear(int64_t in, int64_t out, bool bias_on, DType dtype, Device device) {
  if (in <= 0 || out <= 0) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": Linear sizes must be positive, got ", in, " -> ", out);
  const double bound = 1.0 / std::sqrt(double(in));
  weight = &add_parameter("weight", uniform_param({out, in}, bound, dtype, device));
  if (bias_on) bias = &add_parameter("bias", uniform_param({out}, bound, dtype, device));
}
Tensor Linear::forward(const Tensor& x) { return linear(x, *weight, bias ? *bias : Tensor()); }

Embedding::Embedding(int64_t num, int64_t dim, DType dtype, Device device) {
  if (num <= 0 || dim <= 0) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": Embedding sizes must be positive");
  GradModeGuard off(false);
  weight = &add_parameter("weight", randn({num, dim}, dtype, device));
}
Tensor Embedding::forward(const Tensor& indices) { return embedding(*weight, indices); }

// A norm over dim > 0 features with a finite eps >= 0 (a norm of no features divides by zero).
static void check_norm_args(const char* kind, int64_t dim, double eps) {
  if (dim <= 0) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": ", kind, " dim must be positive, got ", dim);
  if (!(eps >= 0) || !std::isfinite(eps))
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": ", kind, " eps must be finite and >= 0, got ", eps);
}

LayerNorm::LayerNorm(int64_t dim, double e, DType dtype, Device device) : eps(e) {
  check_norm_args("LayerNorm", dim, e);
  add_parameter("weight", ones({dim}, dtype, device));
  add_parameter("bias", zeros({dim}, dtype, device));
}
Tensor LayerNorm::forward(const Tensor& x) {
  auto p = named_parameters();
  return nx::layer_norm(x, *p[0].second, *p[1].second, eps);  // fused; fn::layer_norm is the composite reference
}

RMSNorm::RMSNorm(int64_t dim, double e, DType dtype, Device device) : eps(e) {
  check_norm_args("RMSNorm", dim, e);
  add_parameter("weight", ones({dim}, dtype, device));
}
Tensor RMSNorm::forward(const Tensor& x) { return nx::rms_norm(x, *named_parameters()[0].second, eps); }

// {norm(x + residual), x + residual} in one fused pass for our norms; other modules add first.
static std::vector<Tensor> add_norm(Module& norm, const Tensor& x, const Tensor& residual) {
  if (auto* r = dynamic_cast<RMSNorm*>(&norm))
    return fused_norm(x, residual, *r->named_parameters()[0].second, Tensor(), r->eps, true);
  if (auto* l = dynamic_cast<LayerNorm*>(&norm)) {
    auto p = l->named_parameters();
    return fused_norm(x, residual, *p[0].second, *p[1].second, l->eps, false);
  }
  Tensor s = add(x, residual);
  return {norm.forward(s), s};
}

Activation::Activation(std::string n) : name(std::move(n)) {
  fn::activation(name, zeros({1}, DType::F32, Device{}));  // validates the name now
}

Conv2d::Conv2d(int64_t in, int64_t out, int64_t kernel, int64_t s, int64_t p, bool bias_on, DType dtype, Device device)
    : stride(s), padding(p) {
  const int64_t fan_in = checked_mul(checked_mul(in, kernel, "Conv2d's fan-in"), kernel, "Conv2d's fan-in");
  const double bound = 1.0 / std::sqrt(double(fan_in));
  add_parameter("weight", uniform_param({out, in, kernel, kernel}, bound, dtype, device));
  if (bias_on) add_parameter("bias", uniform_param({out}, bound, dtype, device));
}
Tensor Conv2d::forward(const Tensor& x) {
  auto p = named_parameters();
  return fn::conv2d(x, *p[0].second, p.size() > 1 ? *p[1].second : Tensor(), stride, padding);
}

Tensor Pool2d::forward(const Tensor& x) {
  return is_max ? fn::max_pool2d(x, kernel, stride) : fn::avg_pool2d(x, kernel, stride);
}

Sequential::Sequential(std::vector<ModulePtr> ls) : layers(std::move(ls)) {
  for (size_t i = 0; i < layers.size(); ++i) add_module(std::to_string(i), layers[i]);
}
Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (auto& l : layers) y = l->forward(y);
  return y;
}

Residual::Residual(ModulePtr m) : inner(std::move(m)) { add_module("inner", inner); }

SwiGLU::SwiGLU(int64_t dim, int64_t hidden, DType dtype, Device device) {
  w1 = add_module("w1", std::make_shared<Linear>(dim, hidden, false, dtype, device));
  w2 = add_module("w2", std::make_shared<Linear>(hidden, dim, false, dtype, device));
  w3 = add_module("w3", std::make_shared<Linear>(dim, hidden, false, dtype, device));
}
Tensor SwiGLU::forward(const Tensor& x) {
  return w2->forward(swiglu(w1->forward(x), w3->forward(x)));
}

MultiHeadAttention::MultiHeadAttention(const AttentionConfig& c, DType dtype, Device device) : cfg(c) {
  if (cfg.kv_heads == 0) cfg.kv_heads = cfg.heads;
  if (cfg.heads <= 0 || cfg.dim % cfg.heads || cfg.heads % cfg.kv_heads)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": attention needs dim divisible by heads and heads by kv_heads (dim ",
         cfg.dim, ", heads ", cfg.heads, ", kv_heads ", cfg.kv_heads, ")");
  const int64_t hd = cfg.dim / cfg.heads;
  wq = add_module("wq", std::make_shared<Linear>(cfg.dim, cfg.dim, false, dtype, device));
  wk = add_module("wk", std::make_shared<Linear>(cfg.dim, cfg.kv_heads * hd, false, dtype, device));
  wv = add_module("wv", std::make_shared<Linear>(cfg.dim, cfg.kv_heads * hd, false, dtype, device));
  wo = add_module("wo", std::make_shared<Linear>(cfg.dim, cfg.dim, false, dtype, device));
}

Tensor MultiHeadAttention::forward_cached(const Tensor& x, KVCache* cache) {
  if (x.dim() != 3 || x.shape()[2] != cfg.dim)
    fail(NX_ERR_SHAPE, current_api(), ": attention input must be [batch, seq, ", cfg.dim, "], got ", shape_str(x.shape()));
  const int64_t b = x.shape()[0], t = x.shape()[1], hd = cfg.dim / cfg.heads;
  auto heads = [&](const Tensor& y, int64_t h) { return transpose(reshape(y, {b, t, h, hd}), 1, 2); };
  Tensor q = heads(wq->forward(x), cfg.heads);
  Tensor k = heads(wk->forward(x), cfg.kv_heads);
  Tensor v = heads(wv->forward(x), cfg.kv_heads);
  const int64_t start = cache ? cache->length : 0;
  if (cfg.rope) {
    q = fn::rope(q, start, cfg.rope_base);
    k = fn::rope(k, start, cfg.rope_base);
  }
  if (cache) {
    const int64_t max_len = cache->k.shape()[2];
    if (start + t > max_len)
      fail(NX_ERR_STATE, current_api(), ": KV cache holds ", max_len, " positions; ", start, " used and ", t, " more requested");
    GradModeGuard off(false);
    copy_(slice(cache->k, 2, start, start + t, 1), k);
    copy_(slice(cache->v, 2, start, start + t, 1), v);
    cache->length = start + t;
    k = slice(cache->k, 2, 0, start + t, 1);
    v = slice(cache->v, 2, 0, start + t, 1);
  }
  // The fused kernel (no [T, T] scores kept); fn::attention is the composite reference.
  Tensor o = flash_attention(q, k, v, cfg.causal, cfg.alibi, 1.0 / std::sqrt(double(hd)));
  return wo->forward(reshape(transpose(o, 1, 2), {b, t, cfg.dim}));
}

TransformerBlock::TransformerBlock(const BlockConfig& c, DType dtype, Device device) : cfg(c) {
  const int64_t d = cfg.attn.dim, hidden = cfg.ffn_hidden ? cfg.ffn_hidden : checked_mul(4, d, "the hidden size 4 * dim");
  auto make_norm = [&]() -> ModulePtr {
    if (cfg.rms_norm) return std::make_shared<RMSNorm>(d, cfg.eps, dtype, device);
    return std::make_shared<LayerNorm>(d, cfg.eps, dtype, device);
  };
  norm1 = add_module("norm1", make_norm());
  attn = add_module("attn", std::make_shared<MultiHeadAttention>(cfg.attn, dtype, device));
  norm2 = add_module("norm2", make_norm());
  if (cfg.swiglu) {
    ffn = add_module("ffn", std::make_shared<SwiGLU>(d, hidden, dtype, device));
  } else {
    ffn = add_module("ffn", std::make_shared<Sequential>(std::vector<ModulePtr>{
        std::make_shared<Linear>(d, hidden, true, dtype, device), std::make_shared<Activation>(cfg.activation),
        std::make_shared<Linear>(hidden, d, true, dtype, device)}));
  }
  drop = add_module("drop", std::make_shared<Dropout>(cfg.dropout));
}

static Tensor block_forward(Module& norm1, MultiHeadAttention& attn, Module& norm2, Module& ffn, Dropout& drop,
                            const Tensor& x, KVCache* cache) {
  // h = x + attention, and norm2(h), in one pass (the fused residual add + norm)
  std::vector<Tensor> nh = add_norm(norm2, drop.forward(attn.forward_cached(norm1.forward(x), cache)), x);
  return add(nh[1], drop.forward(ffn.forward(nh[0])));
}

Tensor TransformerBlock::forward_cached(const Tensor& x, KVCache* cache) {
  if (cfg.checkpoint && !cache && training() && grad_enabled()) {
    // The segment holds its modules (not this block), so a graph outliving the block stays valid.
    auto segment = [n1 = norm1, a = attn, n2 = norm2, f = ffn, d = drop](const std::vector<Tensor>& xs) {
      return std::vector<Tensor>{block_forward(*n1, *a, *n2, *f, *d, xs[0], nullptr)};
    };
    return checkpoint(segment, {x})[0];
  }
  return block_forward(*norm1, *attn, *norm2, *ffn, *drop, x, cache);
}

GPT::GPT(const GPTConfig& c, DType dt, Device dev) : cfg(c), dtype(dt), device(dev) {
  tok = add_module("tok", std::make_shared<Embedding>(cfg.vocab, cfg.dim, dtype, device));
  {
    GradModeGuard off(false);  // GPT-2 style small init of the embedding
    Tensor& w = *tok->weight;
    copy_(w, mul_scalar(w, 0.02));
  }
  if (!cfg.rope && !cfg.alibi) {
    pos = add_module("pos", std::make_shared<Embedding>(cfg.context, cfg.dim, dtype, device));
    GradModeGuard off(false);
    copy_(*pos->weight, mul_scalar(*pos->weight, 0.01));
  }
  BlockConfig bc;
  bc.attn.dim = cfg.dim;
  bc.attn.heads = cfg.heads;
  bc.attn.kv_heads = cfg.kv_heads;
  bc.attn.causal = true;
  bc.attn.alibi = cfg.alibi;
  bc.attn.rope = cfg.rope;
  bc.ffn_hidden = cfg.ffn_hidden;
  bc.activation = cfg.activation;
  bc.swiglu = cfg.swiglu;
  bc.rms_norm = cfg.rms_norm;
  bc.dropout = cfg.dropout;
  for (int64_t i = 0; i < cfg.layers; ++i) {
    bc.checkpoint = cfg.checkpoint_every > 0 && i % cfg.checkpoint_every == 0;
    blocks.push_back(add_module("blocks." + std::to_string(i), std::make_shared<TransformerBlock>(bc, dtype, device)));
  }
  if (cfg.rms_norm) norm = add_module("norm", std::make_shared<RMSNorm>(cfg.dim, 1e-5, dtype, device));
  else norm = add_module("norm", std::make_shared<LayerNorm>(cfg.dim, 1e-5, dtype, device));
  if (!cfg.tie_embeddings) head = add_module("head", std::make_shared<Linear>(cfg.dim, cfg.vocab, false, dtype, device));
}

std::vector<KVCache> GPT::make_cache(int64_t batch, int64_t max_len) const {
  const int64_t kvh = cfg.kv_heads ? cfg.kv_heads : cfg.heads, hd = cfg.dim / cfg.heads;
  std::vector<KVCache> caches(size_t(cfg.layers));
  for (auto& c : caches) {
    c.k = zeros({batch, kvh, max_len, hd}, dtype, blocks.empty() ? device : blocks[0]->attn->wq->weight->device());
    c.v = zeros_like(c.k);
  }
  return caches;
}

Tensor GPT::forward_cached(const Tensor& tokens, std::vector<KVCache>* caches) {
  if (tokens.dim() != 2) fail(NX_ERR_SHAPE, current_api(), ": GPT input must be [batch, seq] token ids, got ", shape_str(tokens.shape()));
  const int64_t t = tokens.shape()[1];
  const int64_t start = caches && !caches->empty() ? (*caches)[0].length : 0;
  if (pos && start + t > cfg.context)
    fail(NX_ERR_SHAPE, current_api(), ": sequence of ", start + t, " positions exceeds the context of ", cfg.context);
  Tensor x = tok->forward(tokens);
  if (pos) {
    if (!positions_.defined() || positions_.device() != tokens.device())
      positions_ = arange(0, double(cfg.context), 1, DType::I64, tokens.device());
    x = add(x, pos->forward(slice(positions_, 0, start, start + t, 1)));
  }
  for (size_t i = 0; i < blocks.size(); ++i) x = blocks[i]->forward_cached(x, caches ? &(*caches)[i] : nullptr);
  x = norm->forward(x);
  return head ? head->forward(x) : matmul(x, transpose(*tok->weight, 0, 1));
}

static int64_t sample(std::vector<double> logits, const SampleOptions& opt, std::mt19937_64& rng) {
  const size_t n = logits.size();
  // A NaN breaks the sort's ordering (undefined behaviour in std::sort) and +inf the softmax.
  for (size_t i = 0; i < n; ++i)
    if (std::isnan(logits[i]) || logits[i] == INFINITY)
      fail(NX_ERR_STATE, current_api(), ": the model's logit ", i, " is ", logits[i], "; cannot sample from it");
  if (opt.temperature <= 0) return int64_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  for (double& l : logits) l /= opt.temperature;
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return logits[a] > logits[b]; });
  size_t keep = n;
  if (opt.top_k > 0) keep = std::min(keep, size_t(opt.top_k));
  const double mx = logits[order[0]];
  // A tiny temperature can scale the top logit to +inf (the distribution is then a point mass on
  // it), and all logits -inf leaves nothing to weigh: the top token either way.
  if (std::isinf(mx)) return int64_t(order[0]);
  std::vector<double> p(keep);
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += (p[i] = std::exp(logits[order[i]] - mx));
  if (opt.top_p < 1.0) {  // smallest prefix whose probability reaches top_p
    double acc = 0;
    for (size_t i = 0; i < keep; ++i) {
      acc += p[i] / total;
      if (acc >= opt.top_p) { keep = i + 1; break; }
    }
    total = 0;
    for (size_t i = 0; i < keep; ++i) total += p[i];
  }
  double r = std::uniform_real_distribution<double>(0, total)(rng);
  for (size_t i = 0; i < keep; ++i) {
    r -= p[i];
    if (r <= 0) return int64_t(order[i]);
  }
  return int64_t(order[keep - 1]);
}

// Puts a module in evaluation mode and restores its training flag on every way out.
class EvalModeGuard {
 public:
  explicit EvalModeGuard(Module& m) : module_(m), was_training_(m.training()) { m.train(false); }
  ~EvalModeGuard() { module_.train(was_training_); }
  EvalModeGuard(const EvalModeGuard&) = delete;
  EvalModeGuard& operator=(const EvalModeGuard&) = delete;

 private:
  Module& module_;
  bool was_training_;
};

Tensor generate(GPT& model, const std::vector<int64_t>& prompt, int64_t new_tokens, const SampleOptions& opt) {
  if (prompt.empty()) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": the prompt needs at least one token");
  if (new_tokens < 0) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": new_tokens must be >= 0, got ", new_tokens);
  // Written so that NaN fails: a NaN temperature or top-p silently sampled garbage.
  if (!(opt.temperature >= 0) || std::isinf(opt.temperature))
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": temperature must be finite and >= 0 (0: greedy), got ", opt.temperature);
  if (!(opt.top_p >= 0 && opt.top_p <= 1))
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": top_p must be in [0, 1] (1: off), got ", opt.top_p);
  if (opt.top_k < 0) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": top_k must be >= 0 (0: off), got ", opt.top_k);
  const int64_t n = int64_t(prompt.size());
  const int64_t total = checked_add(n, new_tokens, "the prompt length plus new_tokens");
  // The model reads the prompt and every new token but the last; past its context a learned
  // position table has no row and RoPE/ALiBi models were never trained there (and the KV cache
  // would be sized by a caller's count).
  const int64_t positions = new_tokens ? total - 1 : 0;
  if (positions > model.cfg.context)
    fail(NX_ERR_SHAPE, current_api(), ": the prompt (", n, " tokens) and ", new_tokens, " new tokens need ", positions,
         " positions, more than the model's context of ", model.cfg.context);
  GradModeGuard off(false);
  EvalModeGuard eval(model);  // a failure below leaves the model's mode as it was
  const Device dev = model.tok->weight->device();
  auto caches = model.make_cache(1, total);
  std::mt19937_64 rng(opt.seed);
  std::vector<int64_t> out = prompt;
  Tensor input = to_device(from_data(prompt.data(), {1, int64_t(prompt.size())}, DType::I64, Device{}), dev);
  for (int64_t i = 0; i < new_tokens; ++i) {
    Tensor logits = model.forward_cached(input, &caches);
    Tensor last = cast(reshape(slice(logits, 1, logits.shape()[1] - 1, logits.shape()[1], 1), {model.cfg.vocab}), DType::F64);
    std::vector<double> host(size_t(model.cfg.vocab));
    copy_to_host(last, host.data(), host.size() * sizeof(double));
    int64_t next = sample(host, opt, rng);
    out.push_back(next);
    input = to_device(from_data(&next, {1, 1}, DType::I64, Device{}), dev);
  }
  return from_data(out.data(), {1, int64_t(out.size())}, DType::I64, Device{});
}

}  // namespace nx::nn
