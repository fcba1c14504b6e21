/* Small helpers shared by the C examples: error checks, timing, a progress bar, gzip input via
 * the gzip program, and a dependency-free PNG line plot (stored deflate blocks, no zlib). */
#ifndef NEXUS_EXAMPLE_UTIL_H
#define NEXUS_EXAMPLE_UTIL_H
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nexus.h>

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

/* Reads a whole file, decompressing with gzip -dc when the name ends in .gz. Returns malloc'd
 * bytes (caller frees) or NULL. */
static inline unsigned char* ex_read_file(const char* path, size_t* size) {
  size_t n = strlen(path);
  FILE* f;
  int piped = n > 3 && strcmp(path + n - 3, ".gz") == 0;
  if (piped) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "gzip -dc '%s'", path);
    f = popen(cmd, "r");
  } else {
    f = fopen(path, "rb");
  }
  if (!f) return NULL;
  size_t cap = 1 << 20, len = 0;
  unsigned char* buf = (unsigned char*)malloc(cap);
  for (;;) {
    if (len == cap) buf = (unsigned char*)realloc(buf, cap *= 2);
    size_t got = fread(buf + len, 1, cap - len, f);
    if (!got) break;
    len += got;
  }
  int bad = piped ? pclose(f) != 0 : (fclose(f), 0);
  if (bad || !len) { free(buf); return NULL; }
  *size = len;
  return buf;
}

static inline uint32_t ex_crc32(const unsigned char* p, size_t n, uint32_t crc) {
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

static inline void ex_be32(unsigned char* p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16); p[2] = (unsigned char)(v >> 8); p[3] = (unsigned char)v;
}

static inline void ex_chunk(FILE* f, const char* type, const unsigned char* data, uint32_t n) {
  unsigned char hdr[8];
  ex_be32(hdr, n);
  memcpy(hdr + 4, type, 4);
  fwrite(hdr, 1, 8, f);
  if (n) fwrite(data, 1, n, f);
  uint32_t crc = ex_crc32((const unsigned char*)type, 4, 0);
  crc = ex_crc32(data, n, crc);
  unsigned char c[4];
  ex_be32(c, crc);
  fwrite(c, 1, 4, f);
}

/* Plots up to two series (y1 required, y2 may be NULL; NAN entries are skipped) against their
 * index into a w x h RGB PNG with axes; y1 blue, y2 orange. Returns 0 on success. */
static inline int ex_plot_png(const char* path, const double* y1, const double* y2, int n, int w, int h) {
  unsigned char* img = (unsigned char*)malloc((size_t)w * h * 3);
  memset(img, 255, (size_t)w * h * 3);
  double lo = INFINITY, hi = -INFINITY;
  for (int i = 0; i < n; ++i) {
    if (!isnan(y1[i])) { lo = fmin(lo, y1[i]); hi = fmax(hi, y1[i]); }
    if (y2 && !isnan(y2[i])) { lo = fmin(lo, y2[i]); hi = fmax(hi, y2[i]); }
  }
  if (!(hi > lo)) { hi = lo + 1; }
  const int m = 30;
#define EX_PX(x, y, r, g, b) do { int xx_ = (x), yy_ = (y); if (xx_ >= 0 && xx_ < w && yy_ >= 0 && yy_ < h) { \
    unsigned char* p_ = img + ((size_t)yy_ * w + xx_) * 3; p_[0] = (r); p_[1] = (g); p_[2] = (b); } } while (0)
  for (int x = m; x < w - m; ++x) EX_PX(x, h - m, 0, 0, 0);
  for (int y = m; y < h - m; ++y) EX_PX(m, y, 0, 0, 0);
  for (int s = 0; s < 2; ++s) {
    const double* y = s ? y2 : y1;
    if (!y) continue;
    int px = -1, py = -1;
    for (int i = 0; i < n; ++i) {
      if (isnan(y[i])) continue;
      int x = m + (int)((double)(w - 2 * m) * i / (n > 1 ? n - 1 : 1));
      int yy = (h - m) - (int)((double)(h - 2 * m) * (y[i] - lo) / (hi - lo));
      if (px >= 0) {
        int steps = abs(x - px) > abs(yy - py) ? abs(x - px) : abs(yy - py);
        for (int k = 0; k <= steps; ++k) {
          int ix = px + (steps ? (x - px) * k / steps : 0), iy = py + (steps ? (yy - py) * k / steps : 0);
          for (int d = 0; d < 2; ++d) {
            if (s == 0) EX_PX(ix, iy + d, 31, 119, 180); else EX_PX(ix, iy + d, 255, 127, 14);
          }
        }
      }
      px = x; py = yy;
    }
  }
#undef EX_PX
  /* zlib stream of stored blocks: each scanline is filter byte 0 + RGB */
  size_t raw_len = (size_t)h * (1 + (size_t)w * 3);
  unsigned char* raw = (unsigned char*)malloc(raw_len);
  for (int y = 0; y < h; ++y) {
    raw[(size_t)y * (1 + w * 3)] = 0;
    memcpy(raw + (size_t)y * (1 + w * 3) + 1, img + (size_t)y * w * 3, (size_t)w * 3);
  }
  size_t nblocks = (raw_len + 65534) / 65535;
  size_t zlen = 2 + raw_len + nblocks * 5 + 4;
  unsigned char* z = (unsigned char*)malloc(zlen);
  size_t at = 0;
  z[at++] = 0x78; z[at++] = 0x01;
  uint32_t a = 1, b = 0;
  for (size_t off = 0; off < raw_len; off += 65535) {
    size_t len = raw_len - off < 65535 ? raw_len - off : 65535;
    z[at++] = off + len == raw_len ? 1 : 0;
    z[at++] = (unsigned char)(len & 0xff); z[at++] = (unsigned char)(len >> 8);
    z[at++] = (unsigned char)(~len & 0xff); z[at++] = (unsigned char)((~len >> 8) & 0xff);
    memcpy(z + at, raw + off, len);
    at += len;
  }
  for (size_t i = 0; i < raw_len; ++i) { a = (a + raw[i]) % 65521; b = (b + a) % 65521; }
  ex_be32(z + at, (b << 16) | a);
  at += 4;
  FILE* f = fopen(path, "wb");
  int rc = -1;
  if (f) {
    static const unsigned char sig[8] = {137, 80, 78, 71, 13, 10, 26, 10};
    unsigned char ihdr[13];
    ex_be32(ihdr, (uint32_t)w); ex_be32(ihdr + 4, (uint32_t)h);
    ihdr[8] = 8; ihdr[9] = 2; ihdr[10] = 0; ihdr[11] = 0; ihdr[12] = 0;
    fwrite(sig, 1, 8, f);
    ex_chunk(f, "IHDR", ihdr, 13);
    ex_chunk(f, "IDAT", z, (uint32_t)at);
    ex_chunk(f, "IEND", NULL, 0);
    rc = fclose(f);
  }
  free(img); free(raw); free(z);
  return rc;
}

/* The first CUDA device when there is one, else the CPU (NEXUS_DEVICE=cpu forces the CPU). */
static inline nx_device ex_default_device(void) {
  const char* want = getenv("NEXUS_DEVICE");
  nx_device d = {NX_CPU, 0};
  if ((!want || strcmp(want, "cpu") != 0) && nx_cuda_device_count() > 0) d.type = NX_CUDA;
  return d;
}

/* Named GPT sizes (examples/c/train_gpt.c, bench/plan_bench.c): NEXUS_GPT_SIZE picks one, so that
 * tuning the main job's defaults does not move a benchmark's figure. RoPE, SwiGLU, RMSNorm and
 * tied embeddings; AdamW. "small" is the CPU main job, "bench" the GPU one (the compiler issue's
 * 6 x 256 model at batch 32 x 128; "medium" is its old name), "gpt2" GPT-2 124M's shape. */
typedef struct {
  const char* name;
  int64_t dim, layers, heads, context, batch, vocab;
  double lr;
} ExGptSize;
static const ExGptSize ex_gpt_sizes[] = {
    {"small", 128, 3, 4, 64, 16, 512, 2e-3},
    {"bench", 256, 6, 8, 128, 32, 1024, 1e-3},
    {"medium", 256, 6, 8, 128, 32, 1024, 1e-3},
    {"gpt2", 768, 12, 12, 1024, 8, 50257, 3e-4},
};
/* The size called name, or NULL. */
static inline const ExGptSize* ex_gpt_size(const char* name) {
  for (size_t i = 0; i < sizeof ex_gpt_sizes / sizeof ex_gpt_sizes[0]; ++i)
    if (!strcmp(ex_gpt_sizes[i].name, name)) return &ex_gpt_sizes[i];
  return NULL;
}
static inline nx_transformer_config ex_gpt_config(const ExGptSize* s) {
  nx_transformer_config cfg = {sizeof(nx_transformer_config), s->vocab, s->context, s->dim, s->layers, s->heads, 0, 0,
                               false, true, true, true, true, 0.0, NX_ACTIVATION_GELU, 0};
  return cfg;
}
/* One training step of a GPT (the body of train_gpt's loop, and nx_plan_run's step function):
 * inputs x [batch, context] and its next tokens (any shape of batch * context), output the loss.
 * bf16 runs forward and loss under CUDA autocast. */
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
  if (st == NX_OK && t->bf16) st = nx_autocast_push(NX_CUDA, NX_BF16, true);
  if (st == NX_OK) st = nx_module_forward(&logits, t->model, inputs[0], NULL);
  if (st == NX_OK) st = nx_reshape(&flat, logits, fs, 2, NULL);
  if (st == NX_OK) st = nx_reshape(&yflat, inputs[1], ys, 1, NULL);
  if (st == NX_OK) st = nx_cross_entropy(&loss, flat, yflat, -100, 0.0, NX_REDUCTION_MEAN, NULL);
  if (t->bf16) nx_autocast_pop();
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
