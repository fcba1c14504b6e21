/* KV-cache generation against full recomputation: `test_nn_generate FIXTURE_DIR`.
 *
 * Greedy nx_gpt_generate (one prefill of the prompt, then one token at a time through the
 * preallocated per-layer KV cache) must produce exactly the tokens obtained by running
 * nx_module_forward on the whole sequence again for every new token and taking the argmax of the
 * last position. Checked on torch-initialised models from gen.safetensors (rope + grouped-query
 * heads + tied embeddings; ALiBi + LayerNorm + GELU MLP + untied head; learned positions +
 * multi-query heads), in f64 (where the tokens must also equal torch's greedy continuation,
 * computed by full recomputation) and f32, and on NexusGrad-initialised models. Also: sampling
 * is reproducible for a seed, top_k = 1 is greedy, and the cache/context limits are enforced. */
#include "nn_test.h"

static nx_safetensors g_gen;

static nx_sample_config greedy(void) {
  nx_sample_config s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  s.temperature = 0.0;
  s.top_k = 0;
  s.top_p = 1.0;
  s.seed = 0;
  return s;
}

/* prompt + new_tokens tokens by full recomputation (no cache): argmax of the last position. */
static int64_t* full_recompute(nx_module gpt, const int64_t* prompt, size_t n, int64_t new_tokens) {
  int64_t* seq = calloc(n + (size_t)new_tokens, sizeof(int64_t));
  memcpy(seq, prompt, n * sizeof(int64_t));
  const bool was = grad_enabled();
  nx_autograd_set_enabled(false);
  for (int64_t i = 0; i < new_tokens; ++i) {
    const int64_t len = (int64_t)n + i, shape[2] = {1, len};
    nx_tensor x = t_i64(seq, shape, 2), logits = t_forward(gpt, x), last = NULL, am = NULL;
    NX_OK_(nx_slice(&last, logits, 1, len - 1, len, 1, NULL));
    NX_OK_(nx_argmax(&am, last, -1, false, NULL));
    seq[len] = (int64_t)scalar_of(am);
    nx_tensor_free(am);
    nx_tensor_free(last);
    nx_tensor_free(logits);
    nx_tensor_free(x);
  }
  nx_autograd_set_enabled(was);
  return seq;
}

static int64_t* generate(nx_module gpt, const int64_t* prompt, size_t n, int64_t new_tokens, const nx_sample_config* s) {
  nx_tensor out = NULL;
  NX_OK_(nx_gpt_generate(&out, gpt, prompt, n, new_tokens, s, NULL));
  assert_shape(out, 1, (int64_t)n + new_tokens);
  assert_int_equal(tensor_dtype(out), NX_I64);
  int64_t* v = calloc(n + (size_t)new_tokens, sizeof(int64_t));
  NX_OK_(nx_tensor_copy_to_host(out, v, (n + (size_t)new_tokens) * sizeof(int64_t), NULL));
  nx_tensor_free(out);
  return v;
}

static void print_tokens(const char* label, const int64_t* v, size_t n) {
  printf("    %-8s", label);
  for (size_t i = 0; i < n; ++i) printf(" %lld", (long long)v[i]);
  printf("\n");
}

static void expect_same_tokens(const int64_t* got, const int64_t* want, size_t n, const char* what) {
  for (size_t i = 0; i < n; ++i)
    if (got[i] != want[i]) {
      print_tokens("got", got, n);
      print_tokens("want", want, n);
      print_error("%s: token %zu is %lld, expected %lld\n", what, i, (long long)got[i], (long long)want[i]);
      fail();
    }
}

/* One fixture config in dtype dt: cache == recomputation (and == torch in f64). */
static void run_fixture(const char* key, nx_dtype dt) {
  char name[200];
  snprintf(name, sizeof name, "gen.%s", key);
  const char* c = st_meta(g_gen, name);
  nx_transformer_config cfg = transformer_config(c);
  const int64_t new_tokens = conf_int(c, "new_tokens");
  nx_module gpt = NULL;
  NX_OK_(nx_gpt_create(&gpt, &cfg, dt, CPU, NULL));
  snprintf(name, sizeof name, "gen_w_%s_%s.safetensors", key, nx_dtype_name(dt));
  NX_OK_(nx_module_load(gpt, fix_path(name)));
  nx_tensor pt = st_getf(g_gen, "%s.prompt", key), tt = st_getf(g_gen, "%s.tokens", key);
  const size_t n = (size_t)tensor_numel(pt), total = n + (size_t)new_tokens;
  assert_int_equal(tensor_numel(tt), (int64_t)total);
  int64_t* prompt = calloc(n, sizeof(int64_t));
  int64_t* torch_tokens = calloc(total, sizeof(int64_t));
  NX_OK_(nx_tensor_copy_to_host(pt, prompt, n * sizeof(int64_t), NULL));
  NX_OK_(nx_tensor_copy_to_host(tt, torch_tokens, total * sizeof(int64_t), NULL));
  nx_sample_config s = greedy();
  int64_t* cached = generate(gpt, prompt, n, new_tokens, &s);
  int64_t* full = full_recompute(gpt, prompt, n, new_tokens);
  char what[256];
  snprintf(what, sizeof what, "%s %s: KV-cache generation vs full recomputation", key, nx_dtype_name(dt));
  expect_same_tokens(cached, full, total, what);
  bool same_as_torch = memcmp(cached, torch_tokens, total * sizeof(int64_t)) == 0;
  printf("  %-16s %s: %lld greedy tokens, cache == recomputation; %s torch's (f64) continuation\n", key,
         nx_dtype_name(dt), (long long)new_tokens, same_as_torch ? "==" : "!=");
  print_tokens("tokens", cached, total);
  if (dt == NX_F64) {
    snprintf(what, sizeof what, "%s f64: greedy tokens vs torch", key);
    expect_same_tokens(cached, torch_tokens, total, what);
  }
  /* the first call did not leave state behind: generating again gives the same tokens */
  int64_t* again = generate(gpt, prompt, n, new_tokens, &s);
  expect_same_tokens(again, cached, total, "second generation");
  free(again);
  free(full);
  free(cached);
  free(torch_tokens);
  free(prompt);
  nx_tensor_free(tt);
  nx_tensor_free(pt);
  nx_module_free(gpt);
}

static void test_fixture_models(void** state) {
  (void)state;
  const char* list = st_meta(g_gen, "gens");
  char key[128];
  for (size_t i = 0; list_item(list, i, key, sizeof key); ++i) {
    run_fixture(key, NX_F64);
    run_fixture(key, NX_F32);
  }
}

/* NexusGrad's own initialisation, several configurations, a longer run, a 1-token prompt. */
static void test_native_models(void** state) {
  (void)state;
  struct {
    int64_t vocab, context, dim, layers, heads, kv;
    bool alibi, rope, swiglu, rms, tie;
  } cfgs[] = {
      {61, 64, 32, 2, 4, 2, false, true, true, true, true},
      {50, 64, 24, 2, 6, 3, true, false, false, false, false},
      {45, 40, 16, 1, 2, 0, false, false, true, false, true},
      {33, 48, 16, 2, 4, 1, true, true, true, true, true},
  };
  for (size_t k = 0; k < sizeof cfgs / sizeof cfgs[0]; ++k) {
    nx_transformer_config c;
    memset(&c, 0, sizeof c);
    c.struct_size = sizeof c;
    c.vocab = cfgs[k].vocab;
    c.context = cfgs[k].context;
    c.dim = cfgs[k].dim;
    c.layers = cfgs[k].layers;
    c.heads = cfgs[k].heads;
    c.kv_heads = cfgs[k].kv;
    c.alibi = cfgs[k].alibi;
    c.rope = cfgs[k].rope;
    c.swiglu = cfgs[k].swiglu;
    c.rms_norm = cfgs[k].rms;
    c.tie_embeddings = cfgs[k].tie;
    nx_random_set_seed(100 + k);
    nx_module gpt = NULL;
    NX_OK_(nx_gpt_create(&gpt, &c, NX_F32, CPU, NULL));
    /* scale the embedding up from its 0.02 init so that logits are well separated */
    const char* wname = NULL;
    nx_tensor w = t_param(gpt, 0, &wname);
    assert_string_equal(wname, "tok.weight");
    float* wp = NULL;
    NX_OK_(nx_tensor_data_ptr(w, (void**)&wp));
    for (int64_t i = 0; i < tensor_numel(w); ++i) wp[i] *= 25.0f;
    nx_tensor_free(w);
    for (int plen = 1; plen <= 7; plen += 6) {
      int64_t prompt[7];
      for (int i = 0; i < plen; ++i) prompt[i] = (int64_t)((k * 7 + (size_t)i * 13) % (size_t)c.vocab);
      const int64_t new_tokens = c.context - plen;
      nx_sample_config s = greedy();
      int64_t* cached = generate(gpt, prompt, (size_t)plen, new_tokens, &s);
      int64_t* full = full_recompute(gpt, prompt, (size_t)plen, new_tokens);
      expect_same_tokens(cached, full, (size_t)plen + (size_t)new_tokens, "native model: cache vs recomputation");
      printf("  native config %zu, prompt %d: %lld tokens (to the full context), cache == recomputation\n", k, plen,
             (long long)new_tokens);
      free(full);
      free(cached);
    }
    nx_module_free(gpt);
  }
}

static void test_sampling(void** state) {
  (void)state;
  nx_transformer_config c;
  memset(&c, 0, sizeof c);
  c.struct_size = sizeof c;
  c.vocab = 40;
  c.context = 32;
  c.dim = 16;
  c.layers = 1;
  c.heads = 2;
  c.rope = true;
  c.swiglu = true;
  c.rms_norm = true;
  c.tie_embeddings = true;
  nx_random_set_seed(5);
  nx_module gpt = NULL;
  NX_OK_(nx_gpt_create(&gpt, &c, NX_F32, CPU, NULL));
  const int64_t prompt[3] = {1, 2, 3};
  nx_sample_config s = greedy();
  s.temperature = 0.9;
  s.top_k = 10;
  s.top_p = 0.95;
  s.seed = 42;
  int64_t* a = generate(gpt, prompt, 3, 20, &s);
  int64_t* b = generate(gpt, prompt, 3, 20, &s);
  expect_same_tokens(a, b, 23, "sampling with the same seed");
  for (int i = 0; i < 23; ++i) assert_true(a[i] >= 0 && a[i] < 40);
  s.top_k = 1; /* top-1 sampling is greedy */
  int64_t* t1 = generate(gpt, prompt, 3, 20, &s);
  nx_sample_config g = greedy();
  int64_t* gr = generate(gpt, prompt, 3, 20, &g);
  expect_same_tokens(t1, gr, 23, "top_k = 1 vs greedy");
  free(a);
  free(b);
  free(t1);
  free(gr);
  /* learned positions: generating past the context is an error, not a crash */
  c.rope = false;
  nx_module gpt2 = NULL;
  NX_OK_(nx_gpt_create(&gpt2, &c, NX_F32, CPU, NULL));
  nx_tensor out = SENTINEL;
  EXPECT_ERR(NX_ERR_SHAPE, nx_gpt_generate(&out, gpt2, prompt, 3, 40, &g, NULL), "context");
  assert_null(out);
  nx_module_free(gpt2);
  nx_module_free(gpt);
}

int main(int argc, char** argv) {
  parse_fixdir(argc, argv);
  g_gen = open_fixture("gen.safetensors");
  const struct CMUnitTest tests[] = {
      NX_TEST(test_fixture_models),
      NX_TEST(test_native_models),
      NX_TEST(test_sampling),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  nx_safetensors_free(g_gen);
  return rc;
}
