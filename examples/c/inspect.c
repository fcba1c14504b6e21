/* Seeing inside a model from C: print tensors (nx_tensor_print), dump the autodiff graph of a
 * loss with parameter names and value summaries (nx_graph_dump), and profile a training step
 * (nx_profiler_*: the summary table, and a Chrome trace to open in ui.perfetto.dev).
 *   usage: inspect [out_dir=out]    (writes out_dir/inspect_graph.dot and out_dir/inspect_trace.json) */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <nexus.h>

#define CHECK(call)                                                                                  \
  do {                                                                                               \
    nx_status st_ = (call);                                                                          \
    if (st_ != NX_OK) {                                                                              \
      fprintf(stderr, "%s failed: %s: %s\n", #call, nx_status_string(st_), nx_last_error_message()); \
      exit(1);                                                                                       \
    }                                                                                                \
  } while (0)

static const nx_device CPU = {NX_CPU, 0};

/* mean cross-entropy of model(x) against y */
static nx_tensor loss_of(nx_module model, nx_tensor x, nx_tensor y) {
  nx_tensor logits, loss;
  CHECK(nx_module_forward(&logits, model, x, NULL));
  CHECK(nx_cross_entropy(&loss, logits, y, -100, 0.0, NX_REDUCTION_MEAN, NULL));
  nx_tensor_free(logits);
  return loss;
}

int main(int argc, char** argv) {
  const char* out_dir = argc > 1 ? argv[1] : "out";
  mkdir(out_dir, 0755);
  CHECK(nx_random_set_seed(7));

  /* A small classifier: Linear(4, 8) -> ParCon -> Linear(8, 3). */
  nx_module layers[3], model;
  CHECK(nx_linear_create(&layers[0], 4, 8, true, NX_F32, CPU, NULL));
  CHECK(nx_activation_create(&layers[1], "parcon"));
  CHECK(nx_linear_create(&layers[2], 8, 3, true, NX_F32, CPU, NULL));
  CHECK(nx_sequential_create(&model, layers, 3));
  const int64_t xs[2] = {6, 4}, ys[1] = {6};
  const int64_t labels[6] = {0, 1, 2, 1, 0, 2};
  nx_tensor x, y;
  CHECK(nx_tensor_randn(&x, xs, 2, NX_F32, CPU, NULL));
  CHECK(nx_tensor_from_data(&y, labels, ys, 1, NX_I64, CPU, NULL));

  /* 1. Tensors, as PyTorch prints them; a large one is summarized. */
  printf("== x ==\n");
  CHECK(nx_tensor_print(x, NULL));
  const int64_t big_shape[2] = {1000, 1000};
  nx_tensor big;
  CHECK(nx_tensor_rand(&big, big_shape, 2, NX_F64, CPU, NULL));
  nx_print_options opts = NX_PRINT_OPTIONS_DEFAULT;
  opts.precision = 2, opts.edge_items = 2;
  printf("== a 1000 x 1000 tensor, precision 2, 2 edge items ==\n");
  CHECK(nx_tensor_print(big, &opts));
  nx_tensor_free(big);

  /* 2. The graph of the loss: parameter names on the leaves, a value summary on every node. */
  nx_tensor loss = loss_of(model, x, y);
  printf("== loss ==\n");
  CHECK(nx_tensor_print(loss, NULL));
  nx_graph g;
  CHECK(nx_graph_create(&g, loss));
  CHECK(nx_graph_name_parameters(g, model));
  const nx_graph_dump_options dump = {sizeof dump, true, true}; /* values, saved bytes */
  const char* dot;
  CHECK(nx_graph_dump(g, &dump, &dot));
  printf("== the autodiff graph (Graphviz DOT) ==\n%s", dot);
  char path[1024];
  snprintf(path, sizeof path, "%s/inspect_graph.dot", out_dir);
  FILE* f = fopen(path, "w");
  if (f) fputs(dot, f), fclose(f);
  nx_graph_free(g);
  nx_tensor_free(loss);

  /* 3. One training step, profiled. */
  nx_tensor* params;
  size_t nparams;
  CHECK(nx_module_parameters(model, &params, &nparams));
  nx_sgd_options sgd = NX_SGD_OPTIONS_DEFAULT;
  sgd.lr = 0.1;
  nx_optimizer opt;
  CHECK(nx_sgd_create(&opt, params, nparams, &sgd));
  CHECK(nx_profiler_start(NULL));
  CHECK(nx_profiler_range_push("train step"));
  loss = loss_of(model, x, y);
  CHECK(nx_optimizer_zero_grad(opt));
  CHECK(nx_backward(loss, NULL, NULL, NULL));
  CHECK(nx_optimizer_step(opt, NULL));
  CHECK(nx_profiler_range_pop());
  nx_profile prof;
  CHECK(nx_profiler_stop(&prof));
  char* table;
  CHECK(nx_profile_summary(prof, NX_PROFILE_SORT_TOTAL, 15, &table));
  printf("== one training step, profiled ==\n%s", table);
  nx_string_free(table);
  snprintf(path, sizeof path, "%s/inspect_trace.json", out_dir);
  CHECK(nx_profile_save_chrome_trace(prof, path));
  printf("graph: %s/inspect_graph.dot (dot -Tpng); Chrome trace: %s (ui.perfetto.dev)\n", out_dir, path);

  nx_profile_free(prof);
  nx_tensor_free(loss);
  nx_optimizer_free(opt);
  nx_tensor_array_free(params, nparams);
  nx_tensor_free(x);
  nx_tensor_free(y);
  nx_module_free(model);
  for (int i = 0; i < 3; ++i) nx_module_free(layers[i]);
  return 0;
}
