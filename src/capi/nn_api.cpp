// C API: modules (layers, transformer, GPT), generation, optimizers, tokenizers, text batches.
#include <cstring>

#include "capi/capi.hpp"
#include "io/tokenizer.hpp"
#include "nn/grad_scaler.hpp"
#include "nn/module.hpp"
#include "nn/optim.hpp"
#include "nn/state_io.hpp"

struct nx_module_s {
  std::shared_ptr<nx::nn::Module> module;
  std::vector<std::string> names;  // stable storage for nx_module_parameter's name
};
struct nx_optimizer_s {
  std::shared_ptr<nx::nn::Optimizer> opt;
};
struct nx_grad_scaler_s {
  nx::nn::GradScaler scaler;
};
struct nx_tokenizer_s {
  nx::Tokenizer tok;
};
struct nx_text_loader_s {
  nx::TextBatches batches;
};
NX_HANDLE_OBJECT(nx_module_s, Module);
NX_HANDLE_OBJECT(nx_optimizer_s, Optimizer);
NX_HANDLE_OBJECT(nx_grad_scaler_s, GradScaler);
NX_HANDLE_OBJECT(nx_tokenizer_s, Tokenizer);
NX_HANDLE_OBJECT(nx_text_loader_s, TextLoader);

using namespace nx;
using namespace nx::capi;

namespace {

nx::nn::Module& module_arg(nx_module m, const char* what = "m") { return *handle_object(m, what).module; }
nx::nn::Optimizer& opt_arg(nx_optimizer o) { return *handle_object(o, "opt").opt; }
const Tokenizer& tok_arg(nx_tokenizer t) { return handle_object(t, "tok").tok; }
TextBatches& loader_arg(nx_text_loader l) { return handle_object(l, "loader").batches; }

// Creates a module through make() after the usual argument checks.
template <class F>
nx_status create(const char* api, nx_module* out, F make) {
  clear_out(out);
  return guard(api, [&] {
    check_out(out);
    std::shared_ptr<nn::Module> m = make();
    *out = make_handle(std::make_unique<nx_module_s>(nx_module_s{std::move(m), {}}));
  });
}

struct Placement {
  DType dtype;
  Device device;
};
Placement placement(const nx_dtype& dtype, nx_device device, nx_stream stream) {  // by reference: see enum_value
  Placement p{compute_dtype_arg(dtype), device_arg(device)};
  if (!is_floating(p.dtype)) fail(NX_ERR_DTYPE, current_api(), ": layer parameters need a floating dtype, got ", dtype_name(p.dtype));
  check_stream(stream, p.device);
  return p;
}

// A required config struct (rule 4 of nexus.h: read through its struct_size). The smallest size
// accepted is the struct's size at 1.0: fields appended since keep their zero defaults.
template <class C> constexpr size_t kConfigSize10 = sizeof(C);
template <> constexpr size_t kConfigSize10<nx_transformer_config> = offsetof(nx_transformer_config, activation);
template <class C>
C config_arg(const C* c) {
  return struct_arg(c, C{}, "config", /*required=*/true, kConfigSize10<C>);
}

// The Activation name of an nx_activation (read as an int: any value may arrive from C).
const char* activation_name(const nx_activation& a) {
  switch (enum_value(a)) {
    case NX_ACTIVATION_GELU: return "gelu";
    case NX_ACTIVATION_GELU_TANH: return "gelu_tanh";
    case NX_ACTIVATION_RELU: return "relu";
    case NX_ACTIVATION_SILU: return "silu";
    default:
      fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": config->activation is ", enum_value(a),
           ", not an nx_activation (0..3)");
  }
}

nn::GPTConfig gpt_config(const nx_transformer_config& c) {
  nn::GPTConfig g;
  g.vocab = c.vocab; g.context = c.context; g.dim = c.dim; g.layers = c.layers; g.heads = c.heads;
  g.kv_heads = c.kv_heads; g.ffn_hidden = c.ffn_hidden; g.alibi = c.alibi; g.rope = c.rope; g.swiglu = c.swiglu;
  g.rms_norm = c.rms_norm; g.tie_embeddings = c.tie_embeddings; g.dropout = c.dropout;
  g.activation = activation_name(c.activation);
  if (c.checkpoint_every < 0)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": config->checkpoint_every must be >= 0, got ", c.checkpoint_every);
  g.checkpoint_every = c.checkpoint_every;
  if (g.vocab <= 0 || g.context <= 0 || g.dim <= 0 || g.layers < 0 || g.heads <= 0 || g.dim % g.heads)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": invalid transformer config (vocab ", g.vocab, ", context ", g.context,
         ", dim ", g.dim, ", layers ", g.layers, ", heads ", g.heads, "): sizes must be positive and dim divisible by heads");
  return g;
}

std::vector<Tensor> tensors_arg(const nx_tensor* ts, size_t n, const char* what) {
  if (n && !ts) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": ", what, " is NULL");
  std::vector<Tensor> v;
  for (size_t i = 0; i < n; ++i) v.push_back(unwrap(ts[i], what));
  return v;
}

}  // namespace

extern "C" {

nx_status nx_linear_create(nx_module* out, int64_t in, int64_t outf, bool bias, nx_dtype dtype, nx_device device,
                           nx_stream stream) {
  return create("nx_linear_create", out, [&] {
    auto p = placement(dtype, device, stream);
    return std::make_shared<nn::Linear>(in, outf, bias, p.dtype, p.device);
  });
}
nx_status nx_embedding_create(nx_module* out, int64_t num, int64_t dim, nx_dtype dtype, nx_device device, nx_stream stream) {
  return create("nx_embedding_create", out, [&] {
    auto p = placement(dtype, device, stream);
    return std::make_shared<nn::Embedding>(num, dim, p.dtype, p.device);
  });
}
nx_status nx_layer_norm_create(nx_module* out, int64_t dim, double eps, nx_dtype dtype, nx_device device, nx_stream stream) {
  return create("nx_layer_norm_create", out, [&] {
    auto p = placement(dtype, device, stream);
    return std::make_shared<nn::LayerNorm>(dim, eps, p.dtype, p.device);
  });
}
nx_status nx_rms_norm_create(nx_module* out, int64_t dim, double eps, nx_dtype dtype, nx_device device, nx_stream stream) {
  return create("nx_rms_norm_create", out, [&] {
    auto p = placement(dtype, device, stream);
    return std::make_shared<nn::RMSNorm>(dim, eps, p.dtype, p.device);
  });
}
nx_status nx_dropout_create(nx_module* out, double p) {
  return create("nx_dropout_create", out, [&] {
    if (!(p >= 0 && p < 1)) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": p must be in [0, 1), got ", p);  // NaN too
    return std::make_shared<nn::Dropout>(p);
  });
}
nx_status nx_activation_create(nx_module* out, const char* name) {
  return create("nx_activation_create", out, [&] {
    check_out(name, "name");
    return std::make_shared<nn::Activation>(name);
  });
}
nx_status nx_flatten_create(nx_module* out) {
  return create("nx_flatten_create", out, [] { return std::make_shared<nn::Flatten>(); });
}
nx_status nx_conv2d_create(nx_module* out, int64_t in, int64_t outc, int64_t kernel, int64_t stride, int64_t padding,
                           bool bias, nx_dtype dtype, nx_device device, nx_stream stream) {
  return create("nx_conv2d_create", out, [&] {
    auto p = placement(dtype, device, stream);
    if (in <= 0 || outc <= 0 || kernel <= 0 || stride <= 0 || padding < 0)
      fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": channels, kernel and stride must be positive, padding >= 0");
    return std::make_shared<nn::Conv2d>(in, outc, kernel, stride, padding, bias, p.dtype, p.device);
  });
}
static nx_status pool_create(const char* api, nx_module* out, bool is_max, int64_t kernel, int64_t stride) {
  return create(api, out, [&] {
    if (kernel <= 0 || stride <= 0) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": kernel and stride must be positive");
    return std::make_shared<nn::Pool2d>(is_max, kernel, stride);
  });
}
nx_status nx_max_pool2d_create(nx_module* out, int64_t kernel, int64_t stride) {
  return pool_create("nx_max_pool2d_create", out, true, kernel, stride);
}
nx_status nx_avg_pool2d_create(nx_module* out, int64_t kernel, int64_t stride) {
  return pool_create("nx_avg_pool2d_create", out, false, kernel, stride);
}
nx_status nx_sequential_create(nx_module* out, const nx_module* layers, size_t n) {
  return create("nx_sequential_create", out, [&] {
    if (n && !layers) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": layers is NULL");
    std::vector<nn::ModulePtr> ls;
    for (size_t i = 0; i < n; ++i) {
      ls.push_back(handle_object(layers[i], "an element of layers").module);
    }
    return std::make_shared<nn::Sequential>(std::move(ls));
  });
}
nx_status nx_residual_create(nx_module* out, nx_module inner) {
  return create("nx_residual_create", out, [&] {
    return std::make_shared<nn::Residual>(handle_object(inner, "inner").module);
  });
}
nx_status nx_swiglu_create(nx_module* out, int64_t dim, int64_t hidden, nx_dtype dtype, nx_device device, nx_stream stream) {
  return create("nx_swiglu_create", out, [&] {
    auto p = placement(dtype, device, stream);
    return std::make_shared<nn::SwiGLU>(dim, hidden, p.dtype, p.device);
  });
}
nx_status nx_attention_create(nx_module* out, const nx_attention_config* config, nx_dtype dtype, nx_device device,
                              nx_stream stream) {
  return create("nx_attention_create", out, [&] {
    const auto& c = config_arg(config);
    auto p = placement(dtype, device, stream);
    nn::AttentionConfig a;
    a.dim = c.dim; a.heads = c.heads; a.kv_heads = c.kv_heads; a.causal = c.causal; a.alibi = c.alibi; a.rope = c.rope;
    return std::make_shared<nn::MultiHeadAttention>(a, p.dtype, p.device);
  });
}
nx_status nx_transformer_block_create(nx_module* out, const nx_transformer_config* config, nx_dtype dtype,
                                      nx_device device, nx_stream stream) {
  return create("nx_transformer_block_create", out, [&] {
    auto g = gpt_config(config_arg(config));
    auto p = placement(dtype, device, stream);
    nn::BlockConfig b;
    b.attn.dim = g.dim; b.attn.heads = g.heads; b.attn.kv_heads = g.kv_heads; b.attn.alibi = g.alibi; b.attn.rope = g.rope;
    b.ffn_hidden = g.ffn_hidden; b.swiglu = g.swiglu; b.rms_norm = g.rms_norm; b.dropout = g.dropout;
    b.activation = g.activation;
    b.checkpoint = g.checkpoint_every > 0;
    return std::make_shared<nn::TransformerBlock>(b, p.dtype, p.device);
  });
}
nx_status nx_gpt_create(nx_module* out, const nx_transformer_config* config, nx_dtype dtype, nx_device device,
                        nx_stream stream) {
  return create("nx_gpt_create", out, [&] {
    auto g = gpt_config(config_arg(config));
    auto p = placement(dtype, device, stream);
    return std::make_shared<nn::GPT>(g, p.dtype, p.device);
  });
}

nx_status nx_module_forward(nx_tensor* out, nx_module m, nx_tensor x, nx_stream stream) {
  clear_out(out);
  return guard("nx_module_forward", [&] {
    check_out(out);
    auto& mod = module_arg(m);
    const Tensor& t = unwrap(x, "x");
    check_stream(stream, t.device());
    if (CaptureHooks* hooks = capture_hooks())  // a replay must see the same train/eval modes
      hooks->guard([module = handle_object(m, "m").module, modes = mod.modes()] { return module->modes() == modes; });
    *out = wrap(mod.forward(t));
  });
}
nx_status nx_module_kind(nx_module m, const char** out) {
  return guard("nx_module_kind", [&] {
    check_out(out);
    *out = module_arg(m).kind();
  });
}
nx_status nx_module_parameter_count(nx_module m, size_t* out) {
  return guard("nx_module_parameter_count", [&] {
    check_out(out);
    *out = module_arg(m).named_parameters().size();
  });
}
nx_status nx_module_parameter(nx_module m, size_t i, const char** name, nx_tensor* out) {
  clear_out(out);
  return guard("nx_module_parameter", [&] {
    check_out(out);
    auto params = module_arg(m).named_parameters();
    if (i >= params.size())
      fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": index ", i, " out of range (", params.size(), " parameters)");
    if (name) {
      auto& names = handle_object(m, "m").names;
      names.resize(params.size());
      names[i] = params[i].first;
      *name = names[i].c_str();
    }
    *out = wrap(*params[i].second);
  });
}
nx_status nx_graph_name_parameters(nx_graph g, nx_module m) {
  return guard("nx_graph_name_parameters", [&] {
    nx_graph_s& graph = handle_object(g, "g");
    for (const auto& [name, param] : module_arg(m).named_parameters()) graph.leaf_names[param->impl()] = name;
  });
}
nx_status nx_module_parameters(nx_module m, nx_tensor** out, size_t* n) {
  if (out) *out = nullptr;
  if (n) *n = 0;
  return guard("nx_module_parameters", [&] {
    check_out(out);
    check_out(n, "n");
    auto params = module_arg(m).named_parameters();
    auto* arr = static_cast<nx_tensor*>(std::calloc(std::max<size_t>(params.size(), 1), sizeof(nx_tensor)));
    if (!arr) throw std::bad_alloc();
    for (size_t i = 0; i < params.size(); ++i) arr[i] = wrap(*params[i].second);
    *out = arr;
    *n = params.size();
  });
}
void nx_tensor_array_free(nx_tensor* tensors, size_t n) {
  if (!tensors) return;
  for (size_t i = 0; i < n; ++i) release(tensors[i]);
  std::free(tensors);
}
nx_status nx_module_to(nx_module m, nx_device device, nx_stream stream) {
  return guard("nx_module_to", [&] {
    auto& mod = module_arg(m);
    Device d = device_arg(device);
    check_stream(stream, d);
    mod.to(d);
  });
}
nx_status nx_module_set_training(nx_module m, bool training) {
  return guard("nx_module_set_training", [&] { module_arg(m).train(training); });
}
nx_status nx_module_get_training(nx_module m, bool* out) {
  return guard("nx_module_get_training", [&] {
    check_out(out);
    *out = module_arg(m).training();
  });
}
nx_status nx_module_save(nx_module m, const char* path) {
  return guard("nx_module_save", [&] {
    check_out(path, "path");
    nn::save_state(module_arg(m), path);
  });
}
nx_status nx_module_load(nx_module m, const char* path) {
  return guard("nx_module_load", [&] {
    check_out(path, "path");
    nn::load_state(module_arg(m), path);
  });
}
void nx_module_free(nx_module m) { free_handle(m); }

nx_status nx_gpt_generate(nx_tensor* out, nx_module gpt, const int64_t* prompt, size_t n, int64_t new_tokens,
                          const nx_sample_config* config, nx_stream stream) {
  clear_out(out);
  return guard("nx_gpt_generate", [&] {
    check_out(out);
    auto* model = dynamic_cast<nn::GPT*>(&module_arg(gpt, "gpt"));
    if (!model) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": gpt is a ", module_arg(gpt, "gpt").kind(), ", not a GPT module");
    if (!prompt || !n) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": the prompt is empty");
    if (new_tokens < 0) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": new_tokens must be >= 0");
    const auto& c = config_arg(config);
    check_stream(stream, model->tok->weight->device());
    for (size_t i = 0; i < n; ++i)
      if (prompt[i] < 0 || prompt[i] >= model->cfg.vocab)
        fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": prompt token ", prompt[i], " is outside the vocabulary of ", model->cfg.vocab);
    nn::SampleOptions opt;
    opt.temperature = c.temperature;
    opt.top_k = c.top_k;
    opt.top_p = c.top_p;
    opt.seed = c.seed;
    *out = wrap(nn::generate(*model, std::vector<int64_t>(prompt, prompt + n), new_tokens, opt));
  });
}

// ---------------------------------------------------------------- optimizers
nx_status nx_sgd_create(nx_optimizer* out, const nx_tensor* params, size_t n, const nx_sgd_options* options) {
  clear_out(out);
  return guard("nx_sgd_create", [&] {
    check_out(out);
    auto ps = tensors_arg(params, n, "params");
    const auto o = struct_arg(options, nx_sgd_options NX_SGD_OPTIONS_DEFAULT, "options");
    *out = make_handle(std::make_unique<nx_optimizer_s>(
        nx_optimizer_s{std::make_shared<nn::SGD>(ps, o.lr, o.momentum, o.nesterov, o.weight_decay)}));
  });
}
nx_status nx_adam_create(nx_optimizer* out, const nx_tensor* params, size_t n, const nx_adam_options* options) {
  clear_out(out);
  return guard("nx_adam_create", [&] {
    check_out(out);
    auto ps = tensors_arg(params, n, "params");
    const auto o = struct_arg(options, nx_adam_options NX_ADAM_OPTIONS_DEFAULT, "options");
    *out = make_handle(std::make_unique<nx_optimizer_s>(nx_optimizer_s{
        std::make_shared<nn::Adam>(ps, o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.decoupled_weight_decay)}));
  });
}
nx_status nx_optimizer_step(nx_optimizer opt, nx_stream stream) {
  return guard("nx_optimizer_step", [&] {
    auto& o = opt_arg(opt);
    if (stream) check_stream(stream, handle_object(stream, "stream").device);
    o.step();
  });
}
nx_status nx_optimizer_zero_grad(nx_optimizer opt) {
  return guard("nx_optimizer_zero_grad", [&] { opt_arg(opt).zero_grad(); });
}
nx_status nx_optimizer_set_lr(nx_optimizer opt, double lr) {
  return guard("nx_optimizer_set_lr", [&] {
    if (!(lr >= 0)) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": learning rate must be >= 0, got ", lr);
    opt_arg(opt).lr = lr;
  });
}
nx_status nx_optimizer_get_lr(nx_optimizer opt, double* out) {
  return guard("nx_optimizer_get_lr", [&] {
    check_out(out);
    *out = opt_arg(opt).lr;
  });
}
nx_status nx_optimizer_save(nx_optimizer opt, const char* path) {
  return guard("nx_optimizer_save", [&] {
    check_out(path, "path");
    nn::save_state(opt_arg(opt), path);
  });
}
nx_status nx_optimizer_load(nx_optimizer opt, const char* path) {
  return guard("nx_optimizer_load", [&] {
    check_out(path, "path");
    nn::load_state(opt_arg(opt), path);
  });
}
void nx_optimizer_free(nx_optimizer opt) { free_handle(opt); }
nx_status nx_clip_grad_norm(double* total_norm, const nx_tensor* params, size_t n, double max_norm, nx_stream stream) {
  return guard("nx_clip_grad_norm", [&] {
    auto ps = tensors_arg(params, n, "params");
    if (!(max_norm > 0)) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": max_norm must be positive, got ", max_norm);
    if (!ps.empty()) check_stream(stream, ps[0].device());
    Tensor t = nn::clip_grad_norm(ps, max_norm);
    if (total_norm) *total_norm = item(t);  // the only host sync, and only when asked for
  });
}
double nx_lr_step(double base, int64_t step, int64_t step_size, double gamma) {
  return step_size > 0 ? nn::lr_step(base, step, step_size, gamma) : base;
}
double nx_lr_cosine_warmup(double base, int64_t step, int64_t warmup, int64_t total, double min_lr) {
  return nn::lr_cosine_warmup(base, step, warmup, total, min_lr);
}

// ---------------------------------------------------------------- gradient scaler
namespace {
nn::GradScaler& scaler_arg(nx_grad_scaler s) { return handle_object(s, "scaler").scaler; }
// The stream of a call on opt's gradients, checked against its first parameter's device.
void check_opt_stream(const nn::Optimizer& o, nx_stream stream) {
  if (!o.params().empty()) check_stream(stream, o.params()[0].device());
  else if (stream) check_stream(stream, handle_object(stream, "stream").device);
}
}  // namespace

nx_status nx_grad_scaler_create(nx_grad_scaler* out, const nx_grad_scaler_options* options) {
  clear_out(out);
  return guard("nx_grad_scaler_create", [&] {
    check_out(out);
    const auto o = struct_arg(options, nx_grad_scaler_options NX_GRAD_SCALER_OPTIONS_DEFAULT, "options");
    nn::GradScalerOptions opts{o.init_scale, o.growth_factor, o.backoff_factor, o.growth_interval, o.enabled};
    *out = make_handle(std::make_unique<nx_grad_scaler_s>(nx_grad_scaler_s{nn::GradScaler(opts)}));
  });
}
nx_status nx_grad_scaler_scale(nx_tensor* out, nx_grad_scaler scaler, nx_tensor loss, nx_stream stream) {
  clear_out(out);
  return guard("nx_grad_scaler_scale", [&] {
    check_out(out);
    auto& s = scaler_arg(scaler);
    const Tensor& l = unwrap(loss, "loss");
    check_stream(stream, l.device());
    *out = wrap(s.scale(l));
  });
}
nx_status nx_grad_scaler_unscale(nx_grad_scaler scaler, nx_optimizer opt, nx_stream stream) {
  return guard("nx_grad_scaler_unscale", [&] {
    auto& s = scaler_arg(scaler);
    auto& o = opt_arg(opt);
    check_opt_stream(o, stream);
    s.unscale(o);
  });
}
nx_status nx_grad_scaler_step(bool* stepped, nx_grad_scaler scaler, nx_optimizer opt, nx_stream stream) {
  if (stepped) *stepped = false;
  return guard("nx_grad_scaler_step", [&] {
    auto& s = scaler_arg(scaler);
    auto& o = opt_arg(opt);
    check_opt_stream(o, stream);
    if (stepped && capture_hooks())  // a replay decides on the device: no host value could say
      capture_hooks()->refuse("nx_grad_scaler_step: inside a captured step whether the optimizer stepped is decided on "
                              "the device at every replay; pass NULL for stepped");
    const bool did = s.step(o);
    if (stepped) *stepped = did;
  });
}
nx_status nx_grad_scaler_update(nx_grad_scaler scaler) {
  return guard("nx_grad_scaler_update", [&] { scaler_arg(scaler).update(); });
}
nx_status nx_grad_scaler_get_scale(nx_grad_scaler scaler, double* out) {
  return guard("nx_grad_scaler_get_scale", [&] {
    check_out(out);
    *out = scaler_arg(scaler).get_scale();
  });
}
void nx_grad_scaler_free(nx_grad_scaler scaler) { free_handle(scaler); }

// ---------------------------------------------------------------- text
nx_status nx_tokenizer_bytes_create(nx_tokenizer* out) {
  clear_out(out);
  return guard("nx_tokenizer_bytes_create", [&] {
    check_out(out);
    *out = make_handle(std::make_unique<nx_tokenizer_s>(nx_tokenizer_s{Tokenizer::bytes()}));
  });
}
nx_status nx_tokenizer_bpe_train(nx_tokenizer* out, const char* text, size_t len, int64_t vocab_size) {
  clear_out(out);
  return guard("nx_tokenizer_bpe_train", [&] {
    check_out(out);
    if (!text && len) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": text is NULL");
    *out = make_handle(std::make_unique<nx_tokenizer_s>(nx_tokenizer_s{Tokenizer::train_bpe(std::string(text ? text : "", len), vocab_size)}));
  });
}
nx_status nx_tokenizer_load(nx_tokenizer* out, const char* path) {
  clear_out(out);
  return guard("nx_tokenizer_load", [&] {
    check_out(out);
    check_out(path, "path");
    *out = make_handle(std::make_unique<nx_tokenizer_s>(nx_tokenizer_s{Tokenizer::load(path)}));
  });
}
nx_status nx_tokenizer_save(nx_tokenizer tok, const char* path) {
  return guard("nx_tokenizer_save", [&] {
    check_out(path, "path");
    tok_arg(tok).save(path);
  });
}
nx_status nx_tokenizer_vocab_size(nx_tokenizer tok, int64_t* out) {
  return guard("nx_tokenizer_vocab_size", [&] {
    check_out(out);
    *out = tok_arg(tok).vocab_size();
  });
}
nx_status nx_tokenizer_encode(nx_tensor* out, nx_tokenizer tok, const char* text, size_t len) {
  clear_out(out);
  return guard("nx_tokenizer_encode", [&] {
    check_out(out);
    if (!text && len) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": text is NULL");
    auto ids = tok_arg(tok).encode(std::string(text ? text : "", len));
    *out = wrap(from_data(ids.data(), {int64_t(ids.size())}, DType::I64, Device{}));
  });
}
nx_status nx_tokenizer_decode(nx_tokenizer tok, const int64_t* ids, size_t n, char* buf, size_t capacity, size_t* len) {
  return guard("nx_tokenizer_decode", [&] {
    check_out(len, "len");
    if (!ids && n) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": ids is NULL");
    std::string s = tok_arg(tok).decode(std::vector<int64_t>(ids, ids + n));
    *len = s.size();
    if (s.size() > capacity || (!buf && !s.empty()))
      fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": buffer of ", capacity, " bytes is too small for ", s.size(), " bytes");
    if (!s.empty()) std::memcpy(buf, s.data(), s.size());
  });
}
void nx_tokenizer_free(nx_tokenizer tok) { free_handle(tok); }
nx_status nx_text_loader_create(nx_text_loader* out, nx_tensor tokens, int64_t batch, int64_t seq, uint64_t seed) {
  clear_out(out);
  return guard("nx_text_loader_create", [&] {
    check_out(out);
    Tensor t = cast(detach(to_device(unwrap(tokens, "tokens"), Device{})), DType::I64);
    if (t.dim() != 1) fail(NX_ERR_SHAPE, current_api(), ": tokens must be 1-d, got ", shape_str(t.shape()));
    t = contiguous(t);
    std::vector<int64_t> ids(t.data_as<int64_t>(), t.data_as<int64_t>() + t.numel());
    *out = make_handle(std::make_unique<nx_text_loader_s>(nx_text_loader_s{TextBatches(std::move(ids), batch, seq, seed)}));
  });
}
nx_status nx_text_loader_next(nx_tensor* inputs, nx_tensor* targets, nx_text_loader loader, nx_device device,
                              nx_stream stream) {
  clear_out(inputs);
  clear_out(targets);
  return guard("nx_text_loader_next", [&] {
    check_out(inputs, "inputs");
    check_out(targets, "targets");
    auto& b = loader_arg(loader);
    Device d = device_arg(device);
    check_stream(stream, d);
    Tensor x = Tensor::empty({b.batch(), b.seq()}, DType::I64, Device{});
    Tensor y = Tensor::empty({b.batch(), b.seq()}, DType::I64, Device{});
    b.next(x.data_as<int64_t>(), y.data_as<int64_t>());
    *inputs = wrap(to_device(x, d));
    *targets = wrap(to_device(y, d));
  });
}
nx_status nx_text_loader_batches_per_epoch(nx_text_loader loader, int64_t* out) {
  return guard("nx_text_loader_batches_per_epoch", [&] {
    check_out(out);
    *out = loader_arg(loader).batches_per_epoch();
  });
}
nx_status nx_text_loader_shard(nx_text_loader loader, int32_t rank, int32_t world) {
  return guard("nx_text_loader_shard", [&] {
    loader_arg(loader).shard(rank, world);
  });
}
void nx_text_loader_free(nx_text_loader loader) { free_handle(loader); }

}  // extern "C"
