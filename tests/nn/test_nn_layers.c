/* Layer parity with PyTorch: `test_nn_layers FIXTURE_DIR`.
 *
 * For every case of layers.safetensors (gen_nn_fixtures.py) the module is created through the C
 * API (nx_linear_create, nx_attention_create, nx_gpt_create...), its weights are loaded with
 * nx_module_load from w_<case>.safetensors (torch's weights written under NexusGrad's parameter
 * names: the file must hold exactly the module's parameters), the fixture input goes through
 * nx_module_forward, and nx_backward(out, gout) runs with torch's random upstream gradient. The
 * output, the input gradient (float inputs) and the gradient of EVERY parameter must match torch:
 * atol 1e-5 / rtol 1e-4 for f32 modules, 1e-10 / 1e-10 for f64 modules. One CMocka test per case;
 * each also checks that no tensor handle leaks. All cases run at every SIMD level the processor
 * has (nx_cpu_set_simd_level: avx512, avx2, scalar). */
#include "nn_test.h"

static nx_safetensors g_layers;

static nx_module make_module(const char* c) {
  const char* kind = conf_str(c, "kind");
  const nx_dtype dt = conf_dtype(c);
  nx_module m = NULL;
  if (strcmp(kind, "linear") == 0) {
    NX_OK_(nx_linear_create(&m, conf_int(c, "in_"), conf_int(c, "out"), conf_bool(c, "bias"), dt, CPU, NULL));
  } else if (strcmp(kind, "embedding") == 0) {
    NX_OK_(nx_embedding_create(&m, conf_int(c, "num"), conf_int(c, "dim"), dt, CPU, NULL));
  } else if (strcmp(kind, "layer_norm") == 0) {
    NX_OK_(nx_layer_norm_create(&m, conf_int(c, "dim"), conf_real(c, "eps"), dt, CPU, NULL));
  } else if (strcmp(kind, "rms_norm") == 0) {
    NX_OK_(nx_rms_norm_create(&m, conf_int(c, "dim"), conf_real(c, "eps"), dt, CPU, NULL));
  } else if (strcmp(kind, "activation") == 0) {
    NX_OK_(nx_activation_create(&m, conf_str(c, "name")));
  } else if (strcmp(kind, "swiglu") == 0) {
    NX_OK_(nx_swiglu_create(&m, conf_int(c, "dim"), conf_int(c, "hidden"), dt, CPU, NULL));
  } else if (strcmp(kind, "attention") == 0) {
    nx_attention_config a;
    memset(&a, 0, sizeof a);
    a.struct_size = sizeof a;
    a.dim = conf_int(c, "dim");
    a.heads = conf_int(c, "heads");
    a.kv_heads = conf_int(c, "kv_heads");
    a.causal = conf_bool(c, "causal");
    a.alibi = conf_bool(c, "alibi");
    a.rope = conf_bool(c, "rope");
    NX_OK_(nx_attention_create(&m, &a, dt, CPU, NULL));
  } else if (strcmp(kind, "conv2d") == 0) {
    NX_OK_(nx_conv2d_create(&m, conf_int(c, "cin"), conf_int(c, "cout"), conf_int(c, "kernel"), conf_int(c, "stride"),
                            conf_int(c, "padding"), conf_bool(c, "bias"), dt, CPU, NULL));
  } else if (strcmp(kind, "max_pool2d") == 0) {
    NX_OK_(nx_max_pool2d_create(&m, conf_int(c, "kernel"), conf_int(c, "stride")));
  } else if (strcmp(kind, "avg_pool2d") == 0) {
    NX_OK_(nx_avg_pool2d_create(&m, conf_int(c, "kernel"), conf_int(c, "stride")));
  } else if (strcmp(kind, "flatten") == 0) {
    NX_OK_(nx_flatten_create(&m));
  } else if (strcmp(kind, "cnn") == 0) {
    nx_module l[5] = {NULL};
    NX_OK_(nx_conv2d_create(&l[0], 1, 4, 3, 1, 1, true, dt, CPU, NULL));
    NX_OK_(nx_activation_create(&l[1], "relu"));
    NX_OK_(nx_max_pool2d_create(&l[2], 2, 2));
    NX_OK_(nx_flatten_create(&l[3]));
    NX_OK_(nx_linear_create(&l[4], 64, 5, true, dt, CPU, NULL));
    NX_OK_(nx_sequential_create(&m, l, 5));
    for (int i = 0; i < 5; ++i) nx_module_free(l[i]); /* the container shares them */
  } else if (strcmp(kind, "block") == 0) {
    nx_transformer_config t = transformer_config(c);
    NX_OK_(nx_transformer_block_create(&m, &t, dt, CPU, NULL));
  } else if (strcmp(kind, "gpt") == 0) {
    nx_transformer_config t = transformer_config(c);
    NX_OK_(nx_gpt_create(&m, &t, dt, CPU, NULL));
  } else {
    print_error("unknown module kind \"%s\"\n", kind);
    fail();
  }
  return m;
}

/* The weights file must hold exactly the module's parameters (same names, shapes and dtypes are
 * checked by nx_module_load itself). */
static void check_weight_names(nx_module m, const char* key) {
  char file[256];
  snprintf(file, sizeof file, "w_%s.safetensors", key);
  nx_safetensors w = open_fixture(file);
  size_t nfile = 0, nmod = param_count(m);
  NX_OK_(nx_safetensors_count(w, &nfile));
  if (nfile != nmod) {
    print_error("%s holds %zu tensors, the module has %zu parameters\n", file, nfile, nmod);
    fail();
  }
  for (size_t i = 0; i < nmod; ++i) {
    const char* name = NULL;
    nx_tensor p = t_param(m, i, &name);
    nx_tensor_free(p);
    if (!st_has(w, name)) {
      print_error("parameter \"%s\" is not in %s\n", name, file);
      fail();
    }
  }
  nx_safetensors_free(w);
}

static void run_case(void** state) {
  const char* key = (const char*)*state;
  char name[256];
  snprintf(name, sizeof name, "case.%s", key);
  const char* c = st_meta(g_layers, name);
  nx_module m = make_module(c);
  const size_t np = param_count(m);
  assert_int_equal(np, (size_t)conf_int(c, "nparams"));
  if (np) {
    check_weight_names(m, key);
    char file[256];
    snprintf(file, sizeof file, "w_%s.safetensors", key);
    NX_OK_(nx_module_load(m, fix_path(file)));
  }
  nx_tensor x = st_getf(g_layers, "%s.x", key);
  const nx_dtype xdt = tensor_dtype(x);
  const bool float_in = xdt == NX_F32 || xdt == NX_F64;
  if (float_in) NX_OK_(nx_tensor_set_requires_grad(x, true));
  nx_tensor out = t_forward(m, x);
  nx_tensor want = st_getf(g_layers, "%s.out", key);
  char what[320];
  snprintf(what, sizeof what, "%s output", key);
  double err_out = expect_close_dt(out, want, what);
  nx_tensor gout = st_getf(g_layers, "%s.gout", key);
  NX_OK_(nx_backward(out, gout, NULL, NULL));
  double err_grad = 0.0;
  size_t ngrads = 0;
  if (float_in) {
    nx_tensor g = t_grad(x), gw = st_getf(g_layers, "%s.grad.x", key);
    assert_non_null(g);
    snprintf(what, sizeof what, "%s input gradient", key);
    double e = expect_close_dt(g, gw, what);
    if (e > err_grad) err_grad = e;
    ++ngrads;
    nx_tensor_free(g);
    nx_tensor_free(gw);
  }
  for (size_t i = 0; i < np; ++i) {
    const char* pname = NULL;
    nx_tensor p = t_param(m, i, &pname);
    nx_tensor g = t_grad(p), gw = st_getf(g_layers, "%s.grad.%s", key, pname);
    if (!g) {
      print_error("%s: parameter %s has no gradient after backward\n", key, pname);
      fail();
    }
    snprintf(what, sizeof what, "%s gradient of %s", key, pname);
    double e = expect_close_dt(g, gw, what);
    if (e > err_grad) err_grad = e;
    ++ngrads;
    nx_tensor_free(g);
    nx_tensor_free(gw);
    nx_tensor_free(p);
  }
  /* every gradient torch recorded was compared */
  size_t nst = 0, recorded = 0;
  char prefix[256];
  snprintf(prefix, sizeof prefix, "%s.grad.", key);
  NX_OK_(nx_safetensors_count(g_layers, &nst));
  for (size_t i = 0; i < nst; ++i) {
    const char* s = NULL;
    NX_OK_(nx_safetensors_name(g_layers, i, &s));
    if (strncmp(s, prefix, strlen(prefix)) == 0) ++recorded;
  }
  assert_int_equal(recorded, ngrads);
  printf("  %-34s %s  %2zu gradients  max |err| out %.2e grad %.2e\n", key, nx_dtype_name(conf_dtype(c)), ngrads,
         err_out, err_grad);
  nx_tensor_free(gout);
  nx_tensor_free(want);
  nx_tensor_free(out);
  nx_tensor_free(x);
  nx_module_free(m);
}

int main(int argc, char** argv) {
  parse_fixdir(argc, argv);
  g_layers = open_fixture("layers.safetensors");
  const char* list = st_meta(g_layers, "cases");
  size_t n = 0;
  char buf[256];
  while (list_item(list, n, buf, sizeof buf)) ++n;
  struct CMUnitTest* tests = calloc(n, sizeof *tests);
  char** keys = calloc(n, sizeof *keys);
  for (size_t i = 0; i < n; ++i) {
    list_item(list, i, buf, sizeof buf);
    keys[i] = strdup(buf);
    tests[i].name = keys[i];
    tests[i].test_func = run_case;
    tests[i].setup_func = leak_setup;
    tests[i].teardown_func = leak_teardown;
    tests[i].initial_state = keys[i];
  }
  printf("layer parity: %zu cases from %s (torch %s)\n", n, fix_path("layers.safetensors"),
         st_meta(g_layers, "torch_version"));
  /* every case at every SIMD level the processor has */
  const char* levels[3] = {"avx512", "avx2", "scalar"};
  const char* dflt = simd_level();
  int rc = 0, passes = 0;
  for (int l = 0; l < 3; ++l) {
    if (nx_cpu_set_simd_level(levels[l]) != NX_OK) continue;
    printf("SIMD level %s:\n", levels[l]);
    char group[64];
    snprintf(group, sizeof group, "nn_layers_%s", levels[l]);
    rc |= _cmocka_run_group_tests(group, tests, n, NULL, NULL);
    ++passes;
  }
  nx_cpu_set_simd_level(dflt);
  if (!passes) rc = 1;
  print_headroom("layer parity (all SIMD levels)");
  for (size_t i = 0; i < n; ++i) free(keys[i]);
  free(keys);
  free(tests);
  nx_safetensors_free(g_layers);
  return rc;
}
