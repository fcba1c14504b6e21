/* Trains a two-layer MLP on a synthetic two-spiral problem through the C API only: forward,
 * cross-entropy, backward, SGD update under no-grad. Reports loss and accuracy, the process's
 * resident memory at the start and the end of the loop (it must not grow), and writes the
 * autodiff graph of one step as Graphviz DOT.
 *   usage: train_mlp [steps=2000] [graph.dot] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nexus.h>

#define CHECK(call)                                                                            \
  do {                                                                                         \
    nx_status st_ = (call);                                                                    \
    if (st_ != NX_OK) {                                                                        \
      fprintf(stderr, "%s failed: %s: %s\n", #call, nx_status_string(st_), nx_last_error_message()); \
      exit(1);                                                                                 \
    }                                                                                          \
  } while (0)

enum { N = 512, IN = 2, HIDDEN = 64, CLASSES = 2 };
static const nx_device CPU = {NX_CPU, 0};

static long rss_kib(void) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  long kib = -1;
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, "VmRSS:", 6) == 0) kib = atol(line + 6);
  if (f) fclose(f);
  return kib;
}

/* Two interleaved spirals: class 0 and class 1, with a little noise. */
static void make_data(float* x, int64_t* y) {
  for (int i = 0; i < N; ++i) {
    int c = i % 2;
    double t = 0.25 + 3.0 * (double)(i / 2) / (N / 2);
    double r = t / 3.25;
    double a = t * 2.2 + c * M_PI;
    x[2 * i] = (float)(r * cos(a) + 0.02 * ((rand() % 1000) / 500.0 - 1.0));
    x[2 * i + 1] = (float)(r * sin(a) + 0.02 * ((rand() % 1000) / 500.0 - 1.0));
    y[i] = c;
  }
}

static nx_tensor param(int64_t rows, int64_t cols, double scale) {
  int64_t shape[2] = {rows, cols};
  nx_tensor raw, p;
  CHECK(nx_tensor_randn(&raw, shape, cols ? 2 : 1, NX_F32, CPU, NULL));
  CHECK(nx_mul_scalar(&p, raw, scale, NULL));
  nx_tensor_free(raw);
  CHECK(nx_tensor_set_requires_grad(p, true));
  return p;
}

/* logits = relu(x W1^T + b1) W2^T + b2 ; returns the loss, and the logits in *logits_out */
static nx_tensor forward(nx_tensor x, nx_tensor y, nx_tensor* params, nx_tensor* logits_out) {
  nx_tensor h, a, logits, loss;
  CHECK(nx_linear(&h, x, params[0], params[1], NULL));
  CHECK(nx_relu(&a, h, NULL));
  CHECK(nx_linear(&logits, a, params[2], params[3], NULL));
  CHECK(nx_cross_entropy(&loss, logits, y, -100, 0.0, NX_REDUCTION_MEAN, NULL));
  nx_tensor_free(h);
  nx_tensor_free(a);
  *logits_out = logits;
  return loss;
}

int main(int argc, char** argv) {
  int steps = argc > 1 ? atoi(argv[1]) : 2000;
  const char* dot_path = argc > 2 ? argv[2] : NULL;
  srand(7);
  nx_random_set_seed(7);
  static float xs[N * IN];
  static int64_t ys[N];
  make_data(xs, ys);
  int64_t xshape[2] = {N, IN}, yshape[1] = {N};
  nx_tensor x, y;
  CHECK(nx_tensor_from_data(&x, xs, xshape, 2, NX_F32, CPU, NULL));
  CHECK(nx_tensor_from_data(&y, ys, yshape, 1, NX_I64, CPU, NULL));
  int64_t b1[1] = {HIDDEN}, b2[1] = {CLASSES};
  nx_tensor params[4];
  params[0] = param(HIDDEN, IN, 1.0);
  CHECK(nx_tensor_zeros(&params[1], b1, 1, NX_F32, CPU, NULL));
  CHECK(nx_tensor_set_requires_grad(params[1], true));
  params[2] = param(CLASSES, HIDDEN, 0.2);
  CHECK(nx_tensor_zeros(&params[3], b2, 1, NX_F32, CPU, NULL));
  CHECK(nx_tensor_set_requires_grad(params[3], true));

  if (dot_path) { /* the graph of one step, before training */
    nx_tensor logits, loss = forward(x, y, params, &logits);
    nx_graph g;
    const char* dot;
    size_t nodes, saved;
    CHECK(nx_graph_create(&g, loss));
    CHECK(nx_graph_node_count(g, &nodes));
    CHECK(nx_graph_saved_bytes(g, &saved));
    CHECK(nx_graph_to_dot(g, &dot));
    FILE* f = fopen(dot_path, "w");
    if (f) { fputs(dot, f); fclose(f); }
    printf("graph: %zu nodes, %zu bytes saved for backward, DOT written to %s\n", nodes, saved, dot_path);
    nx_graph_free(g);
    nx_tensor_free(logits);
    nx_tensor_free(loss);
  }

  const double lr = 0.5;
  long rss_start = 0;
  int64_t live_start = 0;
  for (int step = 1; step <= steps; ++step) {
    nx_tensor logits, loss = forward(x, y, params, &logits);
    CHECK(nx_backward(loss, NULL, NULL, NULL));
    nx_autograd_set_enabled(false); /* parameter updates are not part of the graph */
    for (int i = 0; i < 4; ++i) {
      nx_tensor g, step_t;
      CHECK(nx_tensor_grad(&g, params[i]));
      CHECK(nx_mul_scalar(&step_t, g, -lr, NULL));
      CHECK(nx_add_(params[i], step_t, NULL));
      CHECK(nx_tensor_zero_grad(params[i]));
      nx_tensor_free(step_t);
      nx_tensor_free(g);
    }
    nx_autograd_set_enabled(true);
    if (step == 10) { rss_start = rss_kib(); live_start = nx_live_handle_count(NX_HANDLE_TENSOR); }
    if (step % (steps / 10 > 0 ? steps / 10 : 1) == 0 || step == steps) {
      double l;
      nx_tensor pred, eq, acc, accf;
      CHECK(nx_tensor_item(loss, &l, NULL));
      CHECK(nx_argmax(&pred, logits, 1, false, NULL));
      CHECK(nx_eq(&eq, pred, y, NULL));
      CHECK(nx_cast(&accf, eq, NX_F32, NULL));
      CHECK(nx_mean(&acc, accf, NULL, 0, false, NULL));
      double a;
      CHECK(nx_tensor_item(acc, &a, NULL));
      printf("step %5d  loss %.4f  train accuracy %.3f\n", step, l, a);
      nx_tensor_free(pred); nx_tensor_free(eq); nx_tensor_free(acc); nx_tensor_free(accf);
    }
    nx_tensor_free(logits);
    nx_tensor_free(loss);
  }
  printf("memory: RSS %ld KiB at step 10, %ld KiB at step %d; live tensors %lld -> %lld\n", rss_start, rss_kib(),
         steps, (long long)live_start, (long long)nx_live_handle_count(NX_HANDLE_TENSOR));
  for (int i = 0; i < 4; ++i) nx_tensor_free(params[i]);
  nx_tensor_free(x);
  nx_tensor_free(y);
  return 0;
}
