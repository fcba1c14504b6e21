/* SafeTensors state of modules and optimizers: `test_nn_io FIXTURE_DIR`.
 *
 *  - nx_module_save, then nx_module_load into a fresh module (differently initialised): the same
 *    parameters bit for bit and the same forward output bit for bit, for Linear, Conv2d, LayerNorm,
 *    a Sequential CNN, attention, a transformer block and GPTs; saving twice writes the same bytes.
 *  - nx_module_load refuses a file with a wrong shape, a wrong dtype or a missing parameter.
 *  - Training continuation: a GPT trained 3 steps (AdamW, SGD Nesterov, Adam), then saved with its
 *    optimizer; a fresh GPT + fresh optimizer loaded from the two files takes a 4th step identical
 *    bit for bit to the original's 4th step (and without loading the optimizer state it differs).
 *  - Files for check_saved.py: FIXTURE_DIR/saved/gpt_f64.safetensors and block_f32.safetensors
 *    (torch's weights of two layer cases, loaded then saved by NexusGrad) and the saved modules. */
#include "nn_test.h"

/* Path of FIXTURE_DIR/saved/<name>. */
static const char* saved_path(const char* name) {
  static char bufs[4][1024];
  static int next = 0;
  char* b = bufs[next++ & 3];
  snprintf(b, sizeof bufs[0], "%s/saved/%s", g_fixdir, name);
  return b;
}

static char* read_file(const char* path, size_t* n) {
  FILE* f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* buf = malloc((size_t)len + 1);
  assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  *n = (size_t)len;
  return buf;
}

static void expect_same_file(const char* a, const char* b) {
  size_t na = 0, nb = 0;
  char* pa = read_file(a, &na);
  char* pb = read_file(b, &nb);
  if (na != nb || memcmp(pa, pb, na) != 0) {
    print_error("%s and %s differ\n", a, b);
    fail();
  }
  free(pa);
  free(pb);
}

typedef nx_module (*make_fn)(nx_dtype dt);
static nx_module mk_linear(nx_dtype dt) {
  nx_module m = NULL;
  NX_OK_(nx_linear_create(&m, 6, 4, true, dt, CPU, NULL));
  return m;
}
static nx_module mk_conv(nx_dtype dt) {
  nx_module m = NULL;
  NX_OK_(nx_conv2d_create(&m, 2, 3, 3, 2, 1, true, dt, CPU, NULL));
  return m;
}
static nx_module mk_layer_norm(nx_dtype dt) {
  nx_module m = NULL;
  NX_OK_(nx_layer_norm_create(&m, 6, 1e-5, dt, CPU, NULL));
  return m;
}
static nx_module mk_cnn(nx_dtype dt) {
  nx_module l[5] = {NULL}, m = NULL;
  NX_OK_(nx_conv2d_create(&l[0], 2, 4, 3, 1, 1, true, dt, CPU, NULL));
  NX_OK_(nx_activation_create(&l[1], "gelu"));
  NX_OK_(nx_avg_pool2d_create(&l[2], 2, 2));
  NX_OK_(nx_flatten_create(&l[3]));
  NX_OK_(nx_linear_create(&l[4], 4 * 3 * 3, 5, false, dt, CPU, NULL));
  NX_OK_(nx_sequential_create(&m, l, 5));
  for (int i = 0; i < 5; ++i) nx_module_free(l[i]);
  return m;
}
static nx_module mk_attention(nx_dtype dt) {
  nx_attention_config a = {sizeof a, 16, 4, 2, true, true, true};
  nx_module m = NULL;
  NX_OK_(nx_attention_create(&m, &a, dt, CPU, NULL));
  return m;
}
static nx_transformer_config small_cfg(bool rope, bool alibi, bool swiglu, bool rms, bool tie) {
  nx_transformer_config c;
  memset(&c, 0, sizeof c);
  c.struct_size = sizeof c;
  c.vocab = 29;
  c.context = 16;
  c.dim = 12;
  c.layers = 2;
  c.heads = 3;
  c.kv_heads = 0;
  c.ffn_hidden = 20;
  c.rope = rope;
  c.alibi = alibi;
  c.swiglu = swiglu;
  c.rms_norm = rms;
  c.tie_embeddings = tie;
  return c;
}
static nx_module mk_block(nx_dtype dt) {
  nx_transformer_config c = small_cfg(true, false, true, true, true);
  nx_module m = NULL;
  NX_OK_(nx_transformer_block_create(&m, &c, dt, CPU, NULL));
  return m;
}
static nx_module mk_gpt(nx_dtype dt) {
  nx_transformer_config c = small_cfg(true, false, true, true, true);
  nx_module m = NULL;
  NX_OK_(nx_gpt_create(&m, &c, dt, CPU, NULL));
  return m;
}
static nx_module mk_gpt_learned(nx_dtype dt) {
  nx_transformer_config c = small_cfg(false, false, false, false, false);
  nx_module m = NULL;
  NX_OK_(nx_gpt_create(&m, &c, dt, CPU, NULL));
  return m;
}

static nx_tensor input_for(const char* kind, nx_dtype dt) {
  rng_seed(11);
  if (strcmp(kind, "gpt") == 0) {
    int64_t ids[2 * 9];
    for (int i = 0; i < 18; ++i) ids[i] = rng_int(29);
    const int64_t shape[2] = {2, 9};
    return t_i64(ids, shape, 2);
  }
  if (strcmp(kind, "conv") == 0) {
    const int64_t shape[4] = {2, 2, 7, 6};
    return rand_tensor(NULL, shape, 4, dt, -2, 2);
  }
  if (strcmp(kind, "cnn") == 0) {
    const int64_t shape[4] = {2, 2, 6, 6};
    return rand_tensor(NULL, shape, 4, dt, -2, 2);
  }
  if (strcmp(kind, "seq12") == 0) {
    const int64_t shape[3] = {2, 5, 12};
    return rand_tensor(NULL, shape, 3, dt, -2, 2);
  }
  if (strcmp(kind, "seq") == 0) {
    const int64_t shape[3] = {2, 5, 16};
    return rand_tensor(NULL, shape, 3, dt, -2, 2);
  }
  const int64_t shape[2] = {3, 6};
  return rand_tensor(NULL, shape, 2, dt, -2, 2);
}

static void test_module_roundtrip(void** state) {
  (void)state;
  struct {
    const char* name;
    make_fn make;
    const char* input;
  } mods[] = {
      {"linear", mk_linear, "vec"},   {"conv2d", mk_conv, "conv"},          {"layer_norm", mk_layer_norm, "vec"},
      {"cnn", mk_cnn, "cnn"},         {"attention", mk_attention, "seq"},   {"block", mk_block, "seq12"},
      {"gpt", mk_gpt, "gpt"},         {"gpt_learned", mk_gpt_learned, "gpt"},
  };
  const nx_dtype dts[2] = {NX_F32, NX_F64};
  size_t checked = 0;
  for (size_t k = 0; k < sizeof mods / sizeof mods[0]; ++k) {
    for (int d = 0; d < 2; ++d) {
      char file[128], file2[128];
      snprintf(file, sizeof file, "module_%s_%s.safetensors", mods[k].name, nx_dtype_name(dts[d]));
      snprintf(file2, sizeof file2, "module_%s_%s_again.safetensors", mods[k].name, nx_dtype_name(dts[d]));
      nx_random_set_seed(1);
      nx_module a = mods[k].make(dts[d]);
      NX_OK_(nx_module_save(a, saved_path(file)));
      nx_random_set_seed(2);
      nx_module b = mods[k].make(dts[d]);
      const size_t np = param_count(a);
      assert_int_equal(param_count(b), np);
      /* a freshly initialised module differs (LayerNorm starts at ones/zeros: no difference) */
      bool differs = false;
      for (size_t i = 0; i < np; ++i) {
        nx_tensor pa = t_param(a, i, NULL), pb = t_param(b, i, NULL);
        double *va = host_f64(pa), *vb = host_f64(pb);
        for (int64_t j = 0; j < tensor_numel(pa); ++j) differs |= va[j] != vb[j];
        free(va);
        free(vb);
        nx_tensor_free(pa);
        nx_tensor_free(pb);
      }
      assert_true(differs || strcmp(mods[k].name, "layer_norm") == 0);
      NX_OK_(nx_module_load(b, saved_path(file)));
      for (size_t i = 0; i < np; ++i) {
        const char *na = NULL, *nb = NULL;
        nx_tensor pa = t_param(a, i, &na), pb = t_param(b, i, &nb);
        assert_string_equal(na, nb);
        expect_identical(pb, pa, na);
        nx_tensor_free(pa);
        nx_tensor_free(pb);
      }
      nx_tensor x = input_for(mods[k].input, dts[d]);
      nx_tensor ya = t_forward(a, x), yb = t_forward(b, x);
      expect_identical(yb, ya, "output after reload");
      NX_OK_(nx_module_save(b, saved_path(file2)));
      expect_same_file(saved_path(file), saved_path(file2));
      ++checked;
      nx_tensor_free(ya);
      nx_tensor_free(yb);
      nx_tensor_free(x);
      nx_module_free(a);
      nx_module_free(b);
    }
  }
  printf("  %zu module save/load round trips: parameters, outputs and files identical\n", checked);
}

static void test_module_load_errors(void** state) {
  (void)state;
  nx_module a = NULL, b = NULL, c = NULL, d = NULL;
  NX_OK_(nx_linear_create(&a, 6, 4, false, NX_F32, CPU, NULL));
  NX_OK_(nx_module_save(a, saved_path("err_linear_nobias.safetensors")));
  NX_OK_(nx_linear_create(&b, 6, 4, true, NX_F32, CPU, NULL)); /* needs "bias" */
  assert_int_not_equal(nx_module_load(b, saved_path("err_linear_nobias.safetensors")), NX_OK);
  assert_non_null(strstr(nx_last_error_message(), "bias"));
  NX_OK_(nx_linear_create(&c, 6, 5, false, NX_F32, CPU, NULL)); /* wrong shape */
  EXPECT_ERR(NX_ERR_SHAPE, nx_module_load(c, saved_path("err_linear_nobias.safetensors")), "weight");
  NX_OK_(nx_linear_create(&d, 6, 4, false, NX_F64, CPU, NULL)); /* wrong dtype */
  EXPECT_ERR(NX_ERR_SHAPE, nx_module_load(d, saved_path("err_linear_nobias.safetensors")), "f32");
  assert_int_not_equal(nx_module_load(a, saved_path("no_such_file.safetensors")), NX_OK);
  nx_module_free(a);
  nx_module_free(b);
  nx_module_free(c);
  nx_module_free(d);
}

/* The layer fixtures' torch weights, loaded and saved again by NexusGrad (for check_saved.py). */
static void test_resave_torch_weights(void** state) {
  (void)state;
  nx_safetensors layers = open_fixture("layers.safetensors");
  struct {
    const char* key;
    const char* out;
  } cases[] = {{"gpt_rope_swiglu_rms_tied_f64", "gpt_f64.safetensors"},
               {"block_rope_swiglu_rms_gqa", "block_f32.safetensors"}};
  for (size_t k = 0; k < 2; ++k) {
    char name[256];
    snprintf(name, sizeof name, "case.%s", cases[k].key);
    const char* c = st_meta(layers, name);
    nx_transformer_config cfg = transformer_config(c);
    nx_module m = NULL;
    if (strcmp(conf_str(c, "kind"), "gpt") == 0) NX_OK_(nx_gpt_create(&m, &cfg, conf_dtype(c), CPU, NULL));
    else NX_OK_(nx_transformer_block_create(&m, &cfg, conf_dtype(c), CPU, NULL));
    snprintf(name, sizeof name, "w_%s.safetensors", cases[k].key);
    NX_OK_(nx_module_load(m, fix_path(name)));
    NX_OK_(nx_module_save(m, saved_path(cases[k].out)));
    nx_module_free(m);
  }
  nx_safetensors_free(layers);
}

/* ---------------------------------------------------------------- training continuation */
typedef enum { OPT_ADAMW, OPT_ADAM, OPT_SGD_NESTEROV } opt_kind;

static nx_optimizer make_opt(opt_kind k, nx_module m) {
  nx_tensor* ps = NULL;
  size_t n = 0;
  NX_OK_(nx_module_parameters(m, &ps, &n));
  nx_optimizer o = NULL;
  const nx_adam_options adamw = {sizeof adamw, 1e-2, 0.9, 0.95, 1e-8, 0.1, true},
                        adam = {sizeof adam, 1e-2, 0.8, 0.99, 1e-6, 0.01, false};
  const nx_sgd_options sgd = {sizeof sgd, 0.05, 0.9, true, 0.01};
  if (k == OPT_ADAMW) NX_OK_(nx_adam_create(&o, ps, n, &adamw));
  else if (k == OPT_ADAM) NX_OK_(nx_adam_create(&o, ps, n, &adam));
  else NX_OK_(nx_sgd_create(&o, ps, n, &sgd));
  nx_tensor_array_free(ps, n);
  return o;
}

/* One training step on batch `seed` (random tokens, next-token targets). */
static void train_step(nx_module gpt, nx_optimizer opt, int seed) {
  rng_seed((uint64_t)seed + 1000);
  int64_t ids[2 * 11];
  for (int i = 0; i < 22; ++i) ids[i] = rng_int(29);
  int64_t in[2 * 10], tg[2 * 10];
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 10; ++t) in[b * 10 + t] = ids[b * 11 + t], tg[b * 10 + t] = ids[b * 11 + t + 1];
  const int64_t shape[2] = {2, 10}, tshape[1] = {20}, lshape[2] = {20, 29};
  nx_tensor x = t_i64(in, shape, 2), y = t_i64(tg, tshape, 1), logits = t_forward(gpt, x), l2 = NULL, loss = NULL;
  NX_OK_(nx_reshape(&l2, logits, lshape, 2, NULL));
  NX_OK_(nx_cross_entropy(&loss, l2, y, -100, 0.0, NX_REDUCTION_MEAN, NULL));
  NX_OK_(nx_backward(loss, NULL, NULL, NULL));
  NX_OK_(nx_optimizer_step(opt, NULL));
  NX_OK_(nx_optimizer_zero_grad(opt));
  nx_tensor_free(loss);
  nx_tensor_free(l2);
  nx_tensor_free(logits);
  nx_tensor_free(y);
  nx_tensor_free(x);
}

/* true when every parameter of a and b is bitwise identical */
static bool same_params(nx_module a, nx_module b) {
  bool same = true;
  for (size_t i = 0; i < param_count(a); ++i) {
    nx_tensor pa = t_param(a, i, NULL), pb = t_param(b, i, NULL);
    const int64_t n = tensor_numel(pa);
    double *va = host_f64(pa), *vb = host_f64(pb);
    same &= memcmp(va, vb, sizeof(double) * (size_t)n) == 0;
    free(va);
    free(vb);
    nx_tensor_free(pa);
    nx_tensor_free(pb);
  }
  return same;
}

static void test_training_continuation(void** state) {
  (void)state;
  const opt_kind kinds[3] = {OPT_ADAMW, OPT_ADAM, OPT_SGD_NESTEROV};
  const char* names[3] = {"adamw", "adam", "sgd_nesterov"};
  for (int k = 0; k < 3; ++k) {
    char mfile[128], ofile[128];
    snprintf(mfile, sizeof mfile, "continue_%s_model.safetensors", names[k]);
    snprintf(ofile, sizeof ofile, "continue_%s_optim.safetensors", names[k]);
    nx_random_set_seed(3);
    nx_module a = mk_gpt(NX_F32);
    nx_optimizer oa = make_opt(kinds[k], a);
    for (int s = 0; s < 3; ++s) train_step(a, oa, s);
    NX_OK_(nx_module_save(a, saved_path(mfile)));
    NX_OK_(nx_optimizer_save(oa, saved_path(ofile)));
    train_step(a, oa, 3); /* the reference 4th step */

    nx_random_set_seed(4); /* a different initialisation, overwritten by the load */
    nx_module b = mk_gpt(NX_F32);
    nx_optimizer ob = make_opt(kinds[k], b);
    NX_OK_(nx_module_load(b, saved_path(mfile)));
    NX_OK_(nx_optimizer_load(ob, saved_path(ofile)));
    train_step(b, ob, 3);
    if (!same_params(a, b)) {
      print_error("%s: the step after reloading model and optimizer differs from the uninterrupted step\n", names[k]);
      fail();
    }
    /* control: without the optimizer state the 4th step is different */
    nx_module c = mk_gpt(NX_F32);
    nx_optimizer oc = make_opt(kinds[k], c);
    NX_OK_(nx_module_load(c, saved_path(mfile)));
    train_step(c, oc, 3);
    assert_false(same_params(a, c));
    /* and one more step after the reload still agrees */
    train_step(a, oa, 4);
    train_step(b, ob, 4);
    assert_true(same_params(a, b));
    double lr = 0;
    NX_OK_(nx_optimizer_get_lr(ob, &lr));
    printf("  %s: save after 3 steps, reload into a fresh GPT + optimizer: steps 4 and 5 identical (lr %g)\n",
           names[k], lr);
    nx_optimizer_free(oa);
    nx_optimizer_free(ob);
    nx_optimizer_free(oc);
    nx_module_free(a);
    nx_module_free(b);
    nx_module_free(c);
  }
}

int main(int argc, char** argv) {
  parse_fixdir(argc, argv);
  const struct CMUnitTest tests[] = {
      NX_TEST(test_module_roundtrip),
      NX_TEST(test_module_load_errors),
      NX_TEST(test_resave_torch_weights),
      NX_TEST(test_training_continuation),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
