/* Graph debugging (issue 19): nx_graph_dump with value summaries and saved bytes, parameter
 * names on the leaves (nx_graph_name_parameters), saved bytes per node. */
#include "nx_test.h"

/* loss = sum(linear(x) * w2), w2 holding a NaN and an Inf: a graph with named parameters, an
 * unnamed leaf with non-finite values, and ops that save tensors. */
struct net {
  nx_module lin;
  nx_tensor x, w2, y, prod, loss;
};
static void build(struct net* n) {
  NX_OK_(nx_random_set_seed(11));
  NX_OK_(nx_linear_create(&n->lin, 4, 3, true, NX_F32, CPU, NULL));
  const float xv[8] = {0.5f, -1.0f, 2.0f, 0.25f, 1.0f, 1.5f, -0.5f, 3.0f};
  const float wv[6] = {1.0f, NAN, 2.0f, INFINITY, -1.0f, 0.5f};
  const int64_t xs[2] = {2, 4}, ws[2] = {2, 3};
  n->x = make_tensor(xv, xs, 2, NX_F32);
  n->w2 = t_requiring_grad(make_tensor(wv, ws, 2, NX_F32));
  NX_OK_(nx_module_forward(&n->y, n->lin, n->x, NULL));
  NX_OK_(nx_mul(&n->prod, n->y, n->w2, NULL));
  NX_OK_(nx_sum(&n->loss, n->prod, NULL, 0, false, NULL));
}
static void release(struct net* n) {
  nx_tensor ts[] = {n->x, n->w2, n->y, n->prod, n->loss};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; ++i) nx_tensor_free(ts[i]);
  nx_module_free(n->lin);
}

static void test_dump_names_parameters_and_summarizes_values(void** state) {
  (void)state;
  struct net n;
  build(&n);
  nx_graph g = NULL;
  NX_OK_(nx_graph_create(&g, n.loss));
  const char* plain = NULL;
  NX_OK_(nx_graph_dump(g, NULL, &plain));
  assert_null(strstr(plain, "weight"));  // no names until asked
  assert_null(strstr(plain, "mean"));
  NX_OK_(nx_graph_name_parameters(g, n.lin));
  const nx_graph_dump_options with_values = {sizeof(nx_graph_dump_options), true, false};
  const char* dot = NULL;
  NX_OK_(nx_graph_dump(g, &with_values, &dot));
  const char* p0 = NULL;
  nx_tensor w = NULL;
  NX_OK_(nx_module_parameter(n.lin, 0, &p0, &w));
  assert_non_null(strstr(dot, p0));         // "weight"
  assert_non_null(strstr(dot, "bias\\n"));  // the other parameter, then its shape
  assert_non_null(strstr(dot, "leaf\\n[2,3] f32\\nmin -1 max 2 mean 0.625\\nnan 1 inf 1"));
  assert_non_null(strstr(dot, "output\\n[] f32\\nno finite value\\nnan 1 inf 0"));
  assert_non_null(strstr(dot, "saved 0: "));  // mul saved its inputs, with their summaries
  /* the weight's summary is its values' */
  float wv[12];
  NX_OK_(nx_tensor_copy_to_host(w, wv, sizeof wv, NULL));
  float lo = wv[0], hi = wv[0];
  for (int i = 1; i < 12; ++i) lo = wv[i] < lo ? wv[i] : lo, hi = wv[i] > hi ? wv[i] : hi;
  char want[64];
  snprintf(want, sizeof want, "min %.4g max %.4g", (double)lo, (double)hi);
  assert_non_null(strstr(dot, want));
  nx_tensor_free(w);
  /* the plain DOT of nx_graph_to_dot is unchanged: no names, no values */
  const char* orig = NULL;
  NX_OK_(nx_graph_to_dot(g, &orig));
  assert_null(strstr(orig, p0));
  assert_null(strstr(orig, "mean"));
  nx_graph_free(g);
  release(&n);
}

static void test_saved_bytes_per_node(void** state) {
  (void)state;
  struct net n;
  build(&n);
  nx_graph g = NULL;
  NX_OK_(nx_graph_create(&g, n.loss));
  size_t count = 0, total = 0, sum = 0, nonzero = 0;
  NX_OK_(nx_graph_node_count(g, &count));
  NX_OK_(nx_graph_saved_bytes(g, &total));
  const nx_graph_dump_options with_bytes = {sizeof(nx_graph_dump_options), false, true};
  const char* dot = NULL;
  NX_OK_(nx_graph_dump(g, &with_bytes, &dot));
  for (size_t i = 0; i < count; ++i) {
    size_t b = 0;
    NX_OK_(nx_graph_node_saved_bytes(g, i, &b));
    sum += b;
    nonzero += b > 0;
    char want[64];
    snprintf(want, sizeof want, "saved %zu bytes", b);
    assert_non_null(strstr(dot, want));
  }
  assert_int_equal(sum, total);
  assert_true(nonzero >= 2);  // mul saved y and w2 (2 x [2, 3] f32), the linear layer its input
  NX_OK_(nx_backward(n.loss, NULL, NULL, NULL));  // frees what the nodes saved
  for (size_t i = 0; i < count; ++i) {
    size_t b = 1;
    NX_OK_(nx_graph_node_saved_bytes(g, i, &b));
    assert_int_equal(b, 0);
  }
  nx_graph_free(g);
  release(&n);
}

static void test_graph_dump_errors(void** state) {
  (void)state;
  struct net n;
  build(&n);
  nx_graph g = NULL;
  NX_OK_(nx_graph_create(&g, n.loss));
  const char* s = SENTINEL;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_graph_dump(g, NULL, NULL), "nx_graph_dump", "out");
  nx_graph_dump_options bad = {3, true, true};
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_graph_dump(g, &bad, &s), "nx_graph_dump", "struct_size is 3");
  assert_null(s);
  size_t b = 0;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_graph_node_saved_bytes(g, 99, &b), "nx_graph_node_saved_bytes", "99",
             "out of range");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_graph_node_saved_bytes(g, 0, NULL), "nx_graph_node_saved_bytes", "out");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_graph_name_parameters(g, (nx_module)n.x), "nx_graph_name_parameters");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_graph_name_parameters(NULL, n.lin), "nx_graph_name_parameters");
  nx_graph_free(g);
  s = SENTINEL;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_graph_dump(g, NULL, &s), "nx_graph_dump", "freed");
  assert_null(s);
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_graph_name_parameters(g, n.lin), "nx_graph_name_parameters", "freed");
  release(&n);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dump_names_parameters_and_summarizes_values),
      cmocka_unit_test(test_saved_bytes_per_node),
      cmocka_unit_test(test_graph_dump_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
