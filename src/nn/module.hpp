// Layers as modules: a module owns named parameters and child modules, runs forward on tensors
// (recording the graph like any op), moves to a device, and switches train/eval mode. The C API
// exposes them as nx_module handles (src/capi/nn_api.cpp).
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nn/functional.hpp"

namespace nx::nn {

class Module {
 public:
  virtual ~Module() = default;
  virtual Tensor forward(const Tensor& x) = 0;
  virtual const char* kind() const = 0;
  // Parameters of this module and its children, names joined with '.' ("blocks.0.attn.wq.weight").
  std::vector<std::pair<std::string, Tensor*>> named_parameters();
  void to(Device device);
  void train(bool training);
  bool training() const { return training_; }
  // The training flag of this module and of each descendant, depth first: what a captured
  // step's forward assumed (a compiled plan checks it before each replay).
  std::vector<bool> modes() const;

 protected:
  Tensor& add_parameter(const std::string& name, Tensor value);
  template <class M>
  std::shared_ptr<M> add_module(const std::string& name, std::shared_ptr<M> m) {
    children_.emplace_back(name, m);
    return m;
  }
  bool training_ = true;

 private:
  std::vector<std::pair<std::string, std::unique_ptr<Tensor>>> params_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};
using ModulePtr = std::shared_ptr<Module>;

// Parameter initializations (like PyTorch's defaults): uniform(-b, b).
Tensor uniform_param(const Shape& shape, double bound, DType dtype, Device device);

class Linear : public Module {
 public:
  Linear(int64_t in, int64_t out, bool bias, DType dtype, Device device);
  Tensor forward(const Tensor& x) override;
  const char* kind() const override { return "Linear"; }
  Tensor* weight;
  Tensor* bias = nullptr;
};

class Embedding : public Module {
 public:
  Embedding(int64_t num, int64_t dim, DType dtype, Device device);
  Tensor forward(const Tensor& indices) override;
  const char* kind() const override { return "Embedding"; }
  Tensor* weight;
};

class LayerNorm : public Module {
 public:
  LayerNorm(int64_t dim, double eps, DType dtype, Device device);
  Tensor forward(const Tensor& x) override;
  const char* kind() const override { return "LayerNorm"; }
  double eps;
};

class RMSNorm : public Module {
 public:
  RMSNorm(int64_t dim, double eps, DType dtype, Device device);
  Tensor forward(const Tensor& x) override;
  const char* kind() const override { return "RMSNorm"; }
  double eps;
};

class Dropout : public Module {
 public:
  explicit Dropout(double p) : p(p) {
    if (!(p >= 0 && p < 1))  // NaN too
      fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": dropout probability must be in [0, 1), got ", p);
  }
  Tensor forward(const Tensor& x) override { return fn::dropout(x, p, training_); }
  const char* kind() const override { return "Dropout"; }
  double p;
};

class Activation : public Module {
 public:
  explicit Activation(std::string name);
  Tensor forward(const Tensor& x) override { return fn::activation(name, x); }
  const char* kind() const override { return "Activation"; }
  std::string name;
};

class Flatten : public Module {
 public:
  Tensor forward(const Tensor& x) override { return flatten(x, 1, -1); }
  const char* kind() const override { return "Flatten"; }
};

class Conv2d : public Module {
 public:
  Conv2d(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding, bool bias, DType dtype, Device device);
  Tensor forward(const Tensor& x) override;
  const char* kind() const override { return "Conv2d"; }
  int64_t stride, padding;
};

class Pool2d : public Module {
 public:
  Pool2d(bool is_max, int64_t kernel, int64_t stride) : is_max(is_max), kernel(kernel), stride(stride) {}
  Tensor forward(const Tensor& x) override;
  const char* kind() const override { return is_max ? "MaxPool2d" : "AvgPool2d"; }
  bool is_max;
  int64_t kernel, stride;
};

class Sequential : public Module {
 public:
  explicit Sequential(std::vector<ModulePtr> layers);
  Tensor forward(const Tensor& x) override;
  const char* kind() const override { return "Sequential"; }
  std::vector<ModulePtr> layers;
};

// x + inner(x)
class Residual : public Module {
 public:
  explicit Residual(ModulePtr inner);
  Tensor forward(const Tensor& x) override { return add(x, inner->forward(x)); }
  const char* kind() const override { return "Residual"; }
  ModulePtr inner;
};

// SwiGLU feed-forward: W2 (silu(W1 x) * W3 x)
class SwiGLU : public Module {
 public:
  SwiGLU(int64_t dim, int64_t hidden, DType dtype, Device device);
  Tensor forward(const Tensor& x) override;
  const char* kind() const override { return "SwiGLU"; }
  std::shared_ptr<Linear> w1, w2, w3;
};

struct AttentionConfig {
  int64_t dim = 0, heads = 1, kv_heads = 0;  // kv_heads 0: = heads
  bool causal = true, alibi = false, rope = false;
  double rope_base = 10000.0;
};

// Per-layer key/value cache, preallocated for max_len positions.
struct KVCache {
  Tensor k, v;       // [B, Hkv, max_len, D]
  int64_t length = 0;
};

class MultiHeadAttention : public Module {
 public:
  MultiHeadAttention(const AttentionConfig& cfg, DType dtype, Device device);
  Tensor forward(const Tensor& x) override { return forward_cached(x, nullptr); }
  // With a cache: x holds the new positions only; keys/values are appended to the cache.
  Tensor forward_cached(const Tensor& x, KVCache* cache);
  const char* kind() const override { return "MultiHeadAttention"; }
  AttentionConfig cfg;
  std::shared_ptr<Linear> wq, wk, wv, wo;
};

struct BlockConfig {
  AttentionConfig attn;
  int64_t ffn_hidden = 0;
  bool swiglu = true, rms_norm = true;
  double dropout = 0.0, eps = 1e-5;
  std::string activation = "gelu";  // the MLP's activation when not swiglu (an Activation name)
  bool checkpoint = false;          // training forward keeps only the block's input (recomputed in backward)
};

// Pre-norm transformer block: x + attn(norm(x)), then x + ffn(norm(x)).
class TransformerBlock : public Module {
 public:
  TransformerBlock(const BlockConfig& cfg, DType dtype, Device device);
  Tensor forward(const Tensor& x) override { return forward_cached(x, nullptr); }
  Tensor forward_cached(const Tensor& x, KVCache* cache);
  const char* kind() const override { return "TransformerBlock"; }
  BlockConfig cfg;
  ModulePtr norm1, norm2, ffn;
  std::shared_ptr<MultiHeadAttention> attn;
  std::shared_ptr<Dropout> drop;
};

struct GPTConfig {
  int64_t vocab = 256, context = 128, dim = 128, layers = 4, heads = 4, kv_heads = 0, ffn_hidden = 0;
  bool alibi = false, rope = true, swiglu = true, rms_norm = true, tie_embeddings = true;
  double dropout = 0.0;
  std::string activation = "gelu";
  int64_t checkpoint_every = 0;  // block i checkpointed when i % checkpoint_every == 0 (0: none)
};

// Decoder-only language model: token embedding (+ learned positions unless rope/alibi), blocks,
// final norm, LM head (tied to the embedding by default). forward: [B, T] int -> [B, T, vocab].
class GPT : public Module {
 public:
  GPT(const GPTConfig& cfg, DType dtype, Device device);
  Tensor forward(const Tensor& tokens) override { return forward_cached(tokens, nullptr); }
  Tensor forward_cached(const Tensor& tokens, std::vector<KVCache>* caches);
  std::vector<KVCache> make_cache(int64_t batch, int64_t max_len) const;
  const char* kind() const override { return "GPT"; }
  GPTConfig cfg;
  std::shared_ptr<Embedding> tok;
  std::shared_ptr<Embedding> pos;
  std::vector<std::shared_ptr<TransformerBlock>> blocks;
  ModulePtr norm;
  std::shared_ptr<Linear> head;  // null when tied
  DType dtype;
  Device device;

 private:
  // 0 .. context-1 on the device the tokens came from, made once: a step then slices it instead of
  // uploading a new arange (an upload per step waits on the staging buffer).
  Tensor positions_;
};

struct SampleOptions {
  double temperature = 1.0;  // 0: greedy
  int64_t top_k = 0;         // 0: off
  double top_p = 1.0;        // 1: off
  uint64_t seed = 0;
};
// Autoregressive generation with the KV cache; returns prompt + new tokens ([1, T + n] i64).
Tensor generate(GPT& model, const std::vector<int64_t>& prompt, int64_t new_tokens, const SampleOptions& opt);

}  // namespace nx::nn
