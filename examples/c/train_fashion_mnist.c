/* Trains an MLP or a small CNN on Fashion-MNIST (Debian's dataset-fashion-mnist) through the C
 * API and reports test accuracy. Writes to out_dir (default out/) the train loss and test
 * accuracy per epoch (fashion_mnist_<model>_epochs.csv) and the confusion matrix of the last test
 * pass (fashion_mnist_<model>_confusion.csv), and prints the command that plots them.
 *   usage: train_fashion_mnist [mlp|cnn] [epochs] [data_dir] [out_dir]
 * Runs on the first GPU when there is one (NEXUS_DEVICE=cpu forces the CPU). */
#include <sys/stat.h>

#include "example_util.h"

#define DEFAULT_DIR "/usr/share/datasets/fashion-mnist"
#define NCLASSES 10
static const char* const CLASS_NAMES[NCLASSES] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                  "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

static nx_device DEV;

/* IDX file -> float images [n, 784] normalized, or labels [n] i64 */
static float* load_images(const char* dir, const char* name, int64_t* n) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  size_t size;
  unsigned char* raw = ex_read_file(path, &size);
  if (!raw || size < 16) { fprintf(stderr, "cannot read %s (install dataset-fashion-mnist)\n", path); exit(1); }
  int64_t count = ((int64_t)raw[4] << 24) | (raw[5] << 16) | (raw[6] << 8) | raw[7];
  if ((size - 16) / 784 < (size_t)count) {
    fprintf(stderr, "%s: %zu bytes hold fewer than the %lld images its header counts\n", path, size, (long long)count);
    exit(1);
  }
  float* out = (float*)malloc((size_t)count * 784 * sizeof(float));
  for (int64_t i = 0; i < count * 784; ++i) out[i] = ((float)raw[16 + i] / 255.0f - 0.2860f) / 0.3530f;
  free(raw);
  *n = count;
  return out;
}
static int64_t* load_labels(const char* dir, const char* name, int64_t n) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  size_t size;
  unsigned char* raw = ex_read_file(path, &size);
  if (!raw || size < 8 + (size_t)n) { fprintf(stderr, "cannot read %s\n", path); exit(1); }
  int64_t* out = (int64_t*)malloc((size_t)n * sizeof(int64_t));
  for (int64_t i = 0; i < n; ++i) {
    out[i] = raw[8 + i];
    if (out[i] >= NCLASSES) {
      fprintf(stderr, "%s: label %lld at index %lld (expected 0-9)\n", path, (long long)out[i], (long long)i);
      exit(1);
    }
  }
  free(raw);
  return out;
}

static nx_module build(int cnn) {
  nx_module layers[12];
  size_t n = 0;
  if (!cnn) {
    CHECK(nx_flatten_create(&layers[n++]));
    CHECK(nx_linear_create(&layers[n++], 784, 256, true, NX_F32, DEV, NULL));
    CHECK(nx_activation_create(&layers[n++], "relu"));
    CHECK(nx_linear_create(&layers[n++], 256, 128, true, NX_F32, DEV, NULL));
    CHECK(nx_activation_create(&layers[n++], "relu"));
    CHECK(nx_linear_create(&layers[n++], 128, 10, true, NX_F32, DEV, NULL));
  } else {
    CHECK(nx_conv2d_create(&layers[n++], 1, 16, 3, 1, 1, true, NX_F32, DEV, NULL));
    CHECK(nx_activation_create(&layers[n++], "relu"));
    CHECK(nx_max_pool2d_create(&layers[n++], 2, 2));
    CHECK(nx_conv2d_create(&layers[n++], 16, 32, 3, 1, 1, true, NX_F32, DEV, NULL));
    CHECK(nx_activation_create(&layers[n++], "relu"));
    CHECK(nx_max_pool2d_create(&layers[n++], 2, 2));
    CHECK(nx_flatten_create(&layers[n++]));
    CHECK(nx_dropout_create(&layers[n++], 0.25));
    CHECK(nx_linear_create(&layers[n++], 32 * 7 * 7, 128, true, NX_F32, DEV, NULL));
    CHECK(nx_activation_create(&layers[n++], "relu"));
    CHECK(nx_linear_create(&layers[n++], 128, 10, true, NX_F32, DEV, NULL));
  }
  nx_module model;
  CHECK(nx_sequential_create(&model, layers, n));
  for (size_t i = 0; i < n; ++i) nx_module_free(layers[i]); /* the container keeps them */
  return model;
}

/* Accuracy over n examples of x [n, 1, 28, 28], in batches, without recording a graph; fills
 * confusion[true][predicted] (NCLASSES x NCLASSES counts) from the model's argmax and the labels. */
static double accuracy(nx_module model, nx_tensor x, nx_tensor y, int64_t n, double* confusion) {
  CHECK(nx_module_set_training(model, false));
  nx_autograd_set_enabled(false);
  enum { CHUNK = 1000 };
  int64_t pred_host[CHUNK], label_host[CHUNK];
  double correct = 0;
  memset(confusion, 0, NCLASSES * NCLASSES * sizeof(double));
  for (int64_t s = 0; s < n; s += CHUNK) {
    int64_t e = s + CHUNK < n ? s + CHUNK : n;
    nx_tensor xb, yb, logits, pred;
    CHECK(nx_slice(&xb, x, 0, s, e, 1, NULL));
    CHECK(nx_slice(&yb, y, 0, s, e, 1, NULL));
    CHECK(nx_module_forward(&logits, model, xb, NULL));
    CHECK(nx_argmax(&pred, logits, 1, false, NULL));
    CHECK(nx_tensor_copy_to_host(pred, pred_host, (size_t)(e - s) * sizeof(int64_t), NULL));
    CHECK(nx_tensor_copy_to_host(yb, label_host, (size_t)(e - s) * sizeof(int64_t), NULL));
    for (int64_t i = 0; i < e - s; ++i) {
      confusion[label_host[i] * NCLASSES + pred_host[i]] += 1;
      correct += pred_host[i] == label_host[i];
    }
    nx_tensor_free(xb); nx_tensor_free(yb); nx_tensor_free(logits); nx_tensor_free(pred);
  }
  nx_autograd_set_enabled(true);
  CHECK(nx_module_set_training(model, true));
  return correct / (double)n;
}

int main(int argc, char** argv) {
  int cnn = argc > 1 && strcmp(argv[1], "cnn") == 0;
  int epochs = argc > 2 ? atoi(argv[2]) : (cnn ? 4 : 8);
  const char* dir = argc > 3 ? argv[3] : DEFAULT_DIR;
  const char* out_dir = argc > 4 ? argv[4] : "out";
  if (epochs < 1) {
    fprintf(stderr, "epochs must be at least 1 (got %s)\n", argv[2]);
    return 2;
  }
  mkdir(out_dir, 0755);
  DEV = ex_default_device();
  nx_random_set_seed(1);
  int64_t ntrain, ntest;
  float* xtr = load_images(dir, "train-images-idx3-ubyte.gz", &ntrain);
  float* xte = load_images(dir, "t10k-images-idx3-ubyte.gz", &ntest);
  int64_t* ytr = load_labels(dir, "train-labels-idx1-ubyte.gz", ntrain);
  int64_t* yte = load_labels(dir, "t10k-labels-idx1-ubyte.gz", ntest);
  printf("Fashion-MNIST: %lld train, %lld test images; model %s on %s, %d epochs\n", (long long)ntrain,
         (long long)ntest, cnn ? "CNN" : "MLP", DEV.type == NX_CUDA ? "cuda:0" : "cpu", epochs);

  int64_t trs[4] = {ntrain, 1, 28, 28}, tes[4] = {ntest, 1, 28, 28}, trl[1] = {ntrain}, tel[1] = {ntest};
  nx_tensor xtrain, xtest, ytrain, ytest;
  CHECK(nx_tensor_from_data(&xtrain, xtr, trs, 4, NX_F32, DEV, NULL));
  CHECK(nx_tensor_from_data(&xtest, xte, tes, 4, NX_F32, DEV, NULL));
  CHECK(nx_tensor_from_data(&ytrain, ytr, trl, 1, NX_I64, DEV, NULL));
  CHECK(nx_tensor_from_data(&ytest, yte, tel, 1, NX_I64, DEV, NULL));
  free(xtr); free(xte); free(ytr); free(yte);

  nx_module model = build(cnn);
  nx_tensor* params;
  size_t nparams;
  CHECK(nx_module_parameters(model, &params, &nparams));
  nx_optimizer opt;
  const double lr = 1e-3;
  nx_adam_options adam = NX_ADAM_OPTIONS_DEFAULT;
  adam.lr = lr;
  CHECK(nx_adam_create(&opt, params, nparams, &adam));

  const int64_t batch = 128, steps_per_epoch = ntrain / batch, total_steps = steps_per_epoch * epochs;
  int64_t* perm = (int64_t*)malloc((size_t)ntrain * sizeof(int64_t));
  srand(1);
  double start = ex_now();
  int64_t step = 0;
  double* per_epoch = (double*)malloc((size_t)epochs * 3 * sizeof(double)); /* epoch, train loss, test accuracy */
  double confusion[NCLASSES * NCLASSES], acc = 0;
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    for (int64_t i = 0; i < ntrain; ++i) perm[i] = i;
    for (int64_t i = ntrain - 1; i > 0; --i) {
      int64_t j = ((int64_t)rand() * RAND_MAX + rand()) % (i + 1), t = perm[i];
      perm[i] = perm[j]; perm[j] = t;
    }
    double loss_sum = 0;
    for (int64_t b = 0; b < steps_per_epoch; ++b, ++step) {
      int64_t ishape[1] = {batch};
      nx_tensor idx, xb, yb, logits, loss;
      CHECK(nx_tensor_from_data(&idx, perm + b * batch, ishape, 1, NX_I64, DEV, NULL));
      CHECK(nx_index_select(&xb, xtrain, idx, 0, NULL));
      CHECK(nx_index_select(&yb, ytrain, idx, 0, NULL));
      CHECK(nx_module_forward(&logits, model, xb, NULL));
      CHECK(nx_cross_entropy(&loss, logits, yb, -100, 0.0, NX_REDUCTION_MEAN, NULL));
      CHECK(nx_optimizer_zero_grad(opt));
      CHECK(nx_backward(loss, NULL, NULL, NULL));
      CHECK(nx_optimizer_set_lr(opt, nx_lr_cosine_warmup(lr, step, 100, total_steps, lr * 0.05)));
      CHECK(nx_optimizer_step(opt, NULL));
      double l;
      CHECK(nx_tensor_item(loss, &l, NULL));
      loss_sum += l;
      if (b % 20 == 0 || b == steps_per_epoch - 1) {
        char extra[64];
        snprintf(extra, sizeof extra, "epoch %d loss %.4f", epoch, loss_sum / (double)(b + 1));
        ex_progress(step + 1, total_steps, start, extra);
      }
      nx_tensor_free(idx); nx_tensor_free(xb); nx_tensor_free(yb); nx_tensor_free(logits); nx_tensor_free(loss);
    }
    acc = accuracy(model, xtest, ytest, ntest, confusion);
    double* row = per_epoch + 3 * (epoch - 1);
    row[0] = epoch, row[1] = loss_sum / (double)steps_per_epoch, row[2] = acc;
    printf("epoch %d: train loss %.4f, test accuracy %.4f (%.0f s)\n", epoch, row[1], acc, ex_now() - start);
    fflush(stdout);
  }
  printf("final test accuracy (%s): %.4f\n", cnn ? "CNN" : "MLP", acc);

  char epochs_csv[1024], confusion_csv[1024];
  snprintf(epochs_csv, sizeof epochs_csv, "%s/fashion_mnist_%s_epochs.csv", out_dir, cnn ? "cnn" : "mlp");
  snprintf(confusion_csv, sizeof confusion_csv, "%s/fashion_mnist_%s_confusion.csv", out_dir, cnn ? "cnn" : "mlp");
  const char* const epoch_columns[3] = {"epoch", "train_loss", "test_accuracy"};
  if (ex_write_csv(epochs_csv, NULL, NULL, epoch_columns, 3, per_epoch, epochs) == 0 &&
      ex_write_csv(confusion_csv, "true_class", CLASS_NAMES, CLASS_NAMES, NCLASSES, confusion, NCLASSES) == 0) {
    printf("per-epoch loss and accuracy, and the test set's confusion matrix (rows: true class), written to %s/\n",
           out_dir);
    const char* const csvs[2] = {epochs_csv, confusion_csv};
    char title[64];
    snprintf(title, sizeof title, "Fashion-MNIST, %s", cnn ? "CNN" : "MLP");
    ex_print_plot_command(title, csvs, 2);
  }
  free(per_epoch);
  free(perm);
  nx_optimizer_free(opt);
  nx_tensor_array_free(params, nparams);
  nx_module_free(model);
  nx_tensor_free(xtrain); nx_tensor_free(xtest); nx_tensor_free(ytrain); nx_tensor_free(ytest);
  return 0;
}
