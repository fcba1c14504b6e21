/* Small helpers shared by the C examples: error checks, timing, a progress bar, file input that
 * reads .gz files through zlib, and CSV output that scripts/plot.py renders with matplotlib. */
#ifndef NEXUS_EXAMPLE_UTIL_H
#define NEXUS_EXAMPLE_UTIL_H
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nexus.h>
#include <zlib.h>

#define CHECK(call)                                                                                   \
  do {                                                                                                \
    nx_status st_ = (call);                                                                           \
    if (st_ != NX_OK) {                                                                               \
      fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #call, nx_status_string(st_), \
              nx_last_error_message());                                                               \
      exit(1);                                                                                        \
    }                                                                                                 \
  } while (0)

static inline double ex_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* [#####.....] step/total  extra  ETA */
static inline void ex_progress(int64_t step, int64_t total, double start, const char* extra) {
  const int width = 24;
  int filled = (int)(width * step / (total > 0 ? total : 1));
  double elapsed = ex_now() - start, eta = step > 0 ? elapsed * (double)(total - step) / (double)step : 0;
  char bar[32];
  for (int i = 0; i < width; ++i) bar[i] = i < filled ? '#' : '.';
  bar[width] = 0;
  fprintf(stderr, "\r[%s] %lld/%lld %s ETA %4.0fs ", bar, (long long)step, (long long)total, extra, eta);
  if (step == total) fputc('\n', stderr);
  fflush(stderr);
}

/* ---------------------------------------------------------------- file input (gzip through zlib) */
/* Appends everything left in a plain file (f) or a gzip stream (gz) to a growing buffer; NULL on
 * a read error or no memory. */
static inline unsigned char* ex_read_stream(FILE* f, gzFile gz, size_t* len) {
  size_t cap = 1 << 20, n = 0;
  unsigned char* buf = (unsigned char*)malloc(cap);
  while (buf) {
    if (n == cap) {
      unsigned char* more = cap <= SIZE_MAX / 2 ? (unsigned char*)realloc(buf, cap * 2) : NULL;
      if (!more) break;
      buf = more, cap *= 2;
    }
    const size_t room = cap - n < (1u << 30) ? cap - n : (1u << 30); /* gzread counts in an int */
    const long got = gz ? (long)gzread(gz, buf + n, (unsigned)room) : (long)fread(buf + n, 1, room, f);
    if (got < 0 || (!gz && got == 0 && ferror(f))) break;
    if (got == 0) {
      *len = n;
      return buf;
    }
    n += (size_t)got;
  }
  free(buf);
  return NULL;
}

/* Reads a whole file, decompressing it with zlib when the name ends in .gz (any path works: no
 * shell is involved). Returns malloc'd bytes (caller frees) or NULL for a missing, unreadable or
 * empty file, and for a .gz file that is not gzip, corrupt or truncated (those named on stderr
 * with the reason). Bytes after the last gzip member are ignored, as gzip -d does. */
static inline unsigned char* ex_read_file(const char* path, size_t* size) {
  const size_t n = strlen(path);
  size_t len = 0;
  unsigned char* buf = NULL;
  if (n > 3 && strcmp(path + n - 3, ".gz") == 0) {
    gzFile gz = gzopen(path, "rb");
    if (!gz) return NULL;
    gzbuffer(gz, 1 << 18);
    buf = ex_read_stream(NULL, gz, &len);
    int zerr = Z_OK;
    const char* why = gzerror(gz, &zerr);
    if (zerr == Z_ERRNO) why = strerror(errno);
    else if (!strncmp(why, path, n) && !strncmp(why + n, ": ", 2)) why += n + 2; /* zlib's own prefix */
    if (buf && len && gzdirect(gz)) { /* zlib passes non-gzip bytes through; a .gz name promised gzip */
      fprintf(stderr, "%s: not a gzip file\n", path);
      free(buf), buf = NULL;
    } else if (zerr != Z_OK || !buf) {
      fprintf(stderr, "%s: corrupt or truncated gzip file (zlib: %s)\n", path, zerr != Z_OK ? why : "out of memory");
      free(buf), buf = NULL;
    }
    gzclose(gz);
  } else {
    FILE* f = fopen(path, "rb");
    if (!f) return NULL;
    buf = ex_read_stream(f, NULL, &len);
    fclose(f);
  }
  if (buf && !len) free(buf), buf = NULL;
  if (buf) *size = len;
  return buf;
}

/* ---------------------------------------------------------------- CSV output, plotted by scripts/plot.py */
/* One CSV field: quoted, with quotes doubled, when it holds a comma, a quote or a line break. */
static inline void ex_csv_field(FILE* f, const char* s) {
  if (!strpbrk(s, ",\"\r\n")) {
    fputs(s, f);
    return;
  }
  fputc('"', f);
  for (; *s; ++s) {
    if (*s == '"') fputc('"', f);
    fputc(*s, f);
  }
  fputc('"', f);
}

/* Writes a CSV table to path: a header row, then `rows` rows of `ncols` values (row-major). With
 * row_names, each row starts with its name and row_header names that first column. Numbers keep
 * 10 significant digits; NaN is written as an empty field (a value not measured at that row, like
 * the validation loss between evaluations). Returns 0, or -1 with the reason on stderr. */
static inline int ex_write_csv(const char* path, const char* row_header, const char* const* row_names,
                               const char* const* col_names, int ncols, const double* values, int64_t rows) {
  if (!path || !col_names || ncols < 1 || rows < 0 || (rows > 0 && !values) || (row_names && !row_header)) {
    fprintf(stderr, "ex_write_csv: bad arguments (path %s, ncols %d, rows %lld)\n", path ? path : "NULL", ncols,
            (long long)rows);
    return -1;
  }
  FILE* f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
    return -1;
  }
  if (row_names) ex_csv_field(f, row_header), fputc(',', f);
  for (int c = 0; c < ncols; ++c) ex_csv_field(f, col_names[c]), fputc(c + 1 < ncols ? ',' : '\n', f);
  for (int64_t r = 0; r < rows; ++r) {
    if (row_names) ex_csv_field(f, row_names[r]), fputc(',', f);
    for (int c = 0; c < ncols; ++c) {
      const double v = values[r * ncols + c];
      if (!isnan(v)) fprintf(f, "%.10g", v);
      fputc(c + 1 < ncols ? ',' : '\n', f);
    }
  }
  int bad = ferror(f);
  bad |= fclose(f); /* a full disk shows at the flush */
  if (bad) fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
  return bad ? -1 : 0;
}

/* s in single quotes for a POSIX shell (a quote inside becomes '\''), so a printed command can be
 * pasted whatever the path holds. */
static inline void ex_shell_quote(FILE* f, const char* s) {
  fputc('\'', f);
  for (; *s; ++s) {
    if (*s == '\'') fputs("'\\''", f);
    else fputc(*s, f);
  }
  fputc('\'', f);
}

/* Prints the command that renders the CSV files into PNGs beside them (scripts/plot.py, with
 * matplotlib). The examples do not run it: they stay free of a Python dependency (docs/decisions.md). */
static inline void ex_print_plot_command(const char* title, const char* const* csv_paths, int n) {
  printf("plots: /usr/bin/python3 scripts/plot.py");
  if (title) printf(" --title "), ex_shell_quote(stdout, title);
  for (int i = 0; i < n; ++i) putchar(' '), ex_shell_quote(stdout, csv_paths[i]);
  printf("\n       (each CSV becomes a PNG beside it; Debian's python3-matplotlib, scripts/deps.sh)\n");
}

/* The first CUDA device when there is one, else the CPU (NEXUS_DEVICE=cpu forces the CPU). */
static inline nx_device ex_default_device(void) {
  const char* want = getenv("NEXUS_DEVICE");
  nx_device d = {NX_CPU, 0};
  if ((!want || strcmp(want, "cpu") != 0) && nx_cuda_device_count() > 0) d.type = NX_CUDA;
  return d;
}

/* Named GPT sizes (examples/c/train_gpt.c, bench/plan_bench.c): NEXUS_GPT_SIZE picks one, so that
 * tuning the main job's defaults does not move a benchmark's figure. RoPE, SwiGLU, RMSNorm;
 * AdamW. "cpu" and "gpu" are the main job's defaults (about 2 minutes on a 2-core CPU; on a GPU,
 * 12.6 epochs with dropout, where validation still falls: docs/decisions.md, sessions 9 and 10,
 * have the tuning tables and the reasoning), "small" the old CPU default,
 * "bench" the compiler issue's 6 x 256 model at batch 32 x 128 ("medium" is its old name),
 * "gpt2" GPT-2 124M's shape. dropout is the blocks' residual dropout; steps is train_gpt's
 * default step count; tie_embeddings shares the token embedding with the output layer. */
typedef struct {
  const char* name;
  int64_t dim, layers, heads, context, batch, vocab;
  double lr, weight_decay, dropout;
  int64_t steps;
  bool tie_embeddings;
} ExGptSize;
static const ExGptSize ex_gpt_sizes[] = {
    {"cpu", 128, 4, 4, 128, 4, 4096, 3e-3, 0.1, 0.0, 3000, false},
    {"gpu", 384, 6, 6, 256, 32, 1024, 1e-3, 0.1, 0.2, 650, false},
    {"small", 128, 3, 4, 64, 16, 512, 2e-3, 0.1, 0.0, 250, true},
    {"bench", 256, 6, 8, 128, 32, 1024, 1e-3, 0.1, 0.0, 1500, true},
    {"medium", 256, 6, 8, 128, 32, 1024, 1e-3, 0.1, 0.0, 1500, true},
    {"gpt2", 768, 12, 12, 1024, 8, 50257, 3e-4, 0.1, 0.0, 1500, true},
};
/* The size called name, or NULL. */
static inline const ExGptSize* ex_gpt_size(const char* name) {
  for (size_t i = 0; i < sizeof ex_gpt_sizes / sizeof ex_gpt_sizes[0]; ++i)
    if (!strcmp(ex_gpt_sizes[i].name, name)) return &ex_gpt_sizes[i];
  return NULL;
}
static inline nx_transformer_config ex_gpt_config(const ExGptSize* s) {
  nx_transformer_config cfg = {sizeof(nx_transformer_config), s->vocab, s->context, s->dim, s->layers, s->heads, 0, 0,
                               false, true, true, true, s->tie_embeddings, s->dropout, NX_ACTIVATION_GELU, 0};
  return cfg;
}
/* One training step of a GPT (the body of train_gpt's loop, and nx_plan_run's step function):
 * inputs x [batch, context] and its next tokens (any shape of batch * context), output the loss.
 * bf16 runs forward and loss under bf16 autocast on the inputs' device. */
typedef struct {
  nx_module model;
  nx_optimizer opt;
  nx_tensor* params;
  size_t nparams;
  int64_t vocab;
  bool bf16;
} ExGptTrainer;
static inline nx_status ex_gpt_train_step(nx_tensor* outputs, size_t noutputs, const nx_tensor* inputs, size_t ninputs,
                                          void* user) {
  (void)noutputs, (void)ninputs;
  const ExGptTrainer* t = (const ExGptTrainer*)user;
  nx_tensor logits = NULL, flat = NULL, yflat = NULL, loss = NULL;
  int64_t shape[2];
  nx_status st = nx_tensor_shape(inputs[0], shape, 2);
  const int64_t fs[2] = {shape[0] * shape[1], t->vocab}, ys[1] = {shape[0] * shape[1]};
  nx_device dev = {NX_CPU, 0};
  if (st == NX_OK && t->bf16) st = nx_tensor_device(inputs[0], &dev);
  if (st == NX_OK && t->bf16) st = nx_autocast_push(dev.type, NX_BF16, true);
  const bool pushed = st == NX_OK && t->bf16;
  if (st == NX_OK) st = nx_module_forward(&logits, t->model, inputs[0], NULL);
  if (st == NX_OK) st = nx_reshape(&flat, logits, fs, 2, NULL);
  if (st == NX_OK) st = nx_reshape(&yflat, inputs[1], ys, 1, NULL);
  if (st == NX_OK) st = nx_cross_entropy(&loss, flat, yflat, -100, 0.0, NX_REDUCTION_MEAN, NULL);
  if (pushed) nx_autocast_pop();
  if (st == NX_OK) st = nx_optimizer_zero_grad(t->opt);
  if (st == NX_OK) st = nx_backward(loss, NULL, NULL, NULL);
  if (st == NX_OK) st = nx_clip_grad_norm(NULL, t->params, t->nparams, 1.0, NULL);
  if (st == NX_OK) st = nx_optimizer_step(t->opt, NULL);
  nx_tensor_free(logits), nx_tensor_free(flat), nx_tensor_free(yflat);
  if (st != NX_OK) nx_tensor_free(loss);
  else outputs[0] = loss;
  return st;
}

/* Removes the flag `name` from argv; whether it was there. */
static inline int ex_take_flag(int* argc, char** argv, const char* name) {
  for (int i = 1; i < *argc; ++i)
    if (!strcmp(argv[i], name)) {
      for (int j = i; j + 1 < *argc; ++j) argv[j] = argv[j + 1];
      --*argc;
      return 1;
    }
  return 0;
}

#endif
