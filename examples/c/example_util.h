/* Small helpers shared by the C examples: error checks, timing, a progress bar, file input with
 * an in-process gzip decoder (a small inflater: no zlib, no gzip program), and through plot.h a
 * dependency-free PNG line plot with axes, ticks, labels and a legend. */
#ifndef NEXUS_EXAMPLE_UTIL_H
#define NEXUS_EXAMPLE_UTIL_H
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nexus.h>

#include "plot.h" /* ex_plot; also ex_crc32 and the deflate tables that the gzip reader uses */

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

/* ---------------------------------------------------------------- gzip input, in process */
/* An inflater (RFC 1951) over a whole input in memory, appending to a growing output. Bits are
 * read through a 64-bit buffer; past the end of the input it reads zeros and counts them in
 * `virt`, and decoding fails once it has used one of them (the input was truncated). */
typedef struct {
  const unsigned char* in;
  size_t in_len, pos, virt;
  uint64_t bits;
  int nbits;
  unsigned char* out;
  size_t len, cap;
} ExInflate;

#define EX_FAST_BITS 10
/* A canonical Huffman code: a table of the next EX_FAST_BITS input bits, entry (length << 9) |
 * symbol (0: a longer code), and the counts and sorted symbols for longer codes (puff's way). */
typedef struct {
  uint16_t fast[1 << EX_FAST_BITS];
  uint16_t count[16], symbol[320];
} ExHuffman;

static inline void ex_inf_fill(ExInflate* s) {
  while (s->nbits <= 56) {
    if (s->pos < s->in_len) s->bits |= (uint64_t)s->in[s->pos++] << s->nbits;
    else ++s->virt;
    s->nbits += 8;
  }
}
static inline uint32_t ex_inf_bits(ExInflate* s, int n) { /* n <= 32 */
  if (s->nbits < n) ex_inf_fill(s);
  uint32_t v = (uint32_t)(s->bits & ((1ull << n) - 1));
  s->bits >>= n;
  s->nbits -= n;
  return v;
}
static inline int ex_inf_overrun(const ExInflate* s) { return (size_t)s->nbits < 8 * s->virt; }

/* Builds the code of n symbols with the given lengths (0: unused). -1 for an over-subscribed
 * code; incomplete codes are allowed (their unused codes fail when decoded). */
static inline int ex_huffman_build(ExHuffman* h, const unsigned char* lens, int n) {
  uint16_t offs[16], next[16];
  memset(h->count, 0, sizeof h->count);
  memset(h->fast, 0, sizeof h->fast);
  for (int i = 0; i < n; ++i) h->count[lens[i]]++;
  int left = 1;
  for (int len = 1; len < 16; ++len) {
    left = 2 * left - h->count[len];
    if (left < 0) return -1;
  }
  offs[1] = 0, next[1] = 0;
  for (int len = 1; len < 15; ++len) {
    offs[len + 1] = (uint16_t)(offs[len] + h->count[len]);
    next[len + 1] = (uint16_t)((next[len] + h->count[len]) << 1);
  }
  for (int sym = 0; sym < n; ++sym) {
    int len = lens[sym];
    if (!len) continue;
    h->symbol[offs[len]++] = (uint16_t)sym;
    unsigned code = next[len]++, rev = 0;
    if (len > EX_FAST_BITS) continue;
    for (int i = 0; i < len; ++i) rev |= ((code >> i) & 1u) << (len - 1 - i);
    for (unsigned j = rev; j < (1u << EX_FAST_BITS); j += 1u << len) h->fast[j] = (uint16_t)((len << 9) | sym);
  }
  return 0;
}
/* The next symbol, or -1. */
static inline int ex_huffman_decode(ExInflate* s, const ExHuffman* h) {
  if (s->nbits < 15) ex_inf_fill(s);
  unsigned e = h->fast[s->bits & ((1u << EX_FAST_BITS) - 1)];
  if (e) {
    s->bits >>= e >> 9;
    s->nbits -= (int)(e >> 9);
    return (int)(e & 511);
  }
  int code = 0, first = 0, index = 0;
  for (int len = 1; len < 16; ++len) {
    code |= (int)((s->bits >> (len - 1)) & 1);
    int count = h->count[len];
    if (code - count < first) {
      s->bits >>= len;
      s->nbits -= len;
      return h->symbol[index + (code - first)];
    }
    index += count, first += count;
    first <<= 1, code <<= 1;
  }
  return -1;
}
static inline int ex_inf_room(ExInflate* s, size_t need) {
  if (s->cap - s->len >= need) return 0;
  size_t cap = s->cap ? s->cap : 1 << 16;
  while (cap - s->len < need) {
    if (cap > SIZE_MAX / 2) return -1;
    cap *= 2;
  }
  unsigned char* p = (unsigned char*)realloc(s->out, cap);
  if (!p) return -1;
  s->out = p, s->cap = cap;
  return 0;
}

/* Inflates the raw deflate stream at in[0, in_len), appending to *out (*out_len bytes used of
 * *out_cap; realloc'd as needed; *out may start NULL). *used: the bytes the stream took, up to
 * its last whole byte. Returns 0, or -1 on corrupt or truncated data or no memory. */
static inline int ex_inflate(const unsigned char* in, size_t in_len, size_t* used, unsigned char** out,
                             size_t* out_len, size_t* out_cap) {
  static const unsigned char order[19] = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15};
  const uint16_t *lbase = ex_deflate_table(0), *lext = ex_deflate_table(1);
  const uint16_t *dbase = ex_deflate_table(2), *dext = ex_deflate_table(3);
  ExInflate s = {in, in_len, 0, 0, 0, 0, *out, *out_len, *out_cap};
  ExHuffman* hs = (ExHuffman*)malloc(3 * sizeof(ExHuffman)); /* literal/length, distance, code lengths */
  int rc = hs ? 0 : -1, last = 1;
  do {
    if (rc) break;
    last = (int)ex_inf_bits(&s, 1);
    int type = (int)ex_inf_bits(&s, 2);
    if (type == 0) { /* stored: LEN, ~LEN, then LEN bytes from the next byte boundary */
      ex_inf_bits(&s, s.nbits % 8);
      if (ex_inf_overrun(&s)) { rc = -1; break; }
      s.pos -= (size_t)s.nbits / 8 - s.virt; /* give the buffered whole bytes back */
      s.bits = 0, s.nbits = 0, s.virt = 0;
      if (s.in_len - s.pos < 4) { rc = -1; break; }
      size_t len = in[s.pos] | (size_t)in[s.pos + 1] << 8, nlen = in[s.pos + 2] | (size_t)in[s.pos + 3] << 8;
      s.pos += 4;
      if (len != (~nlen & 0xffff) || s.in_len - s.pos < len || ex_inf_room(&s, len)) { rc = -1; break; }
      memcpy(s.out + s.len, in + s.pos, len);
      s.len += len, s.pos += len;
      continue;
    }
    unsigned char lens[320];
    int nlen = 288, ndist = 30;
    if (type == 1) { /* fixed codes */
      for (int i = 0; i < 288; ++i) lens[i] = i < 144 ? 8 : i < 256 ? 9 : i < 280 ? 7 : 8;
      for (int i = 0; i < 30; ++i) lens[288 + i] = 5;
      rc = ex_huffman_build(&hs[0], lens, 288) || ex_huffman_build(&hs[1], lens + 288, 30) ? -1 : 0;
    } else if (type == 2) { /* dynamic: the code lengths, themselves Huffman coded */
      nlen = (int)ex_inf_bits(&s, 5) + 257, ndist = (int)ex_inf_bits(&s, 5) + 1;
      int ncode = (int)ex_inf_bits(&s, 4) + 4;
      if (nlen > 286 || ndist > 30) { rc = -1; break; }
      unsigned char cl[19] = {0};
      for (int i = 0; i < ncode; ++i) cl[order[i]] = (unsigned char)ex_inf_bits(&s, 3);
      if (ex_huffman_build(&hs[2], cl, 19)) { rc = -1; break; }
      for (int i = 0; i < nlen + ndist && !rc;) {
        int sym = ex_huffman_decode(&s, &hs[2]), rep = 1;
        unsigned char len = 0;
        if (sym < 0 || ex_inf_overrun(&s)) { rc = -1; break; }
        if (sym < 16) len = (unsigned char)sym;
        else if (sym == 16) {
          if (!i) { rc = -1; break; }
          len = lens[i - 1 < nlen ? i - 1 : 288 + (i - 1 - nlen)], rep = 3 + (int)ex_inf_bits(&s, 2);
        } else rep = sym == 17 ? 3 + (int)ex_inf_bits(&s, 3) : 11 + (int)ex_inf_bits(&s, 7);
        if (i + rep > nlen + ndist) { rc = -1; break; }
        for (; rep > 0; --rep, ++i) lens[i < nlen ? i : 288 + (i - nlen)] = len;
      }
      if (rc || !lens[256]) { rc = -1; break; }
      rc = ex_huffman_build(&hs[0], lens, nlen) || ex_huffman_build(&hs[1], lens + 288, ndist) ? -1 : 0;
    } else {
      rc = -1;
    }
    while (!rc) { /* the compressed data, up to the end-of-block symbol */
      int sym = ex_huffman_decode(&s, &hs[0]);
      if (sym < 0 || ex_inf_overrun(&s) || ex_inf_room(&s, 258)) { rc = -1; break; }
      if (sym < 256) {
        s.out[s.len++] = (unsigned char)sym;
      } else if (sym == 256) {
        break;
      } else {
        sym -= 257;
        if (sym >= 29) { rc = -1; break; }
        size_t len = lbase[sym] + ex_inf_bits(&s, lext[sym]);
        int d = ex_huffman_decode(&s, &hs[1]);
        if (d < 0 || d >= 30) { rc = -1; break; }
        size_t dist = dbase[d] + ex_inf_bits(&s, dext[d]);
        if (dist > s.len || ex_inf_overrun(&s)) { rc = -1; break; }
        /* dist <= s.len, so the source index never goes below 0 (o[k - dist] wrapped k - dist) */
        for (size_t k = 0; k < len; ++k) s.out[s.len + k] = s.out[s.len + k - dist];
        s.len += len;
      }
    }
  } while (!last);
  free(hs);
  if (!rc && ex_inf_overrun(&s)) rc = -1;
  *out = s.out, *out_len = s.len, *out_cap = s.cap;
  if (!rc) *used = s.pos - ((size_t)s.nbits / 8 - s.virt); /* the partial last byte counts as used */
  return rc;
}

/* Decompresses a whole .gz file (RFC 1952; concatenated members too, trailing zero padding
 * allowed): malloc'd bytes or NULL with *why set. Checks every member's CRC-32 and length. */
static inline unsigned char* ex_gunzip(const unsigned char* in, size_t n, size_t* out_len, const char** why) {
  unsigned char* out = NULL;
  size_t len = 0, cap = 0, pos = 0;
  if (n >= 18) { /* the last member's length (mod 2^32) as the first guess of the size */
    size_t isize = in[n - 4] | (size_t)in[n - 3] << 8 | (size_t)in[n - 2] << 16 | (size_t)in[n - 1] << 24;
    if (isize && isize / 1032 <= n && (out = (unsigned char*)malloc(isize))) cap = isize;
  }
  *why = NULL;
  while (!*why) {
    if (n - pos < 18 || in[pos] != 0x1f || in[pos + 1] != 0x8b) {
      *why = pos ? NULL : "not a gzip file";
      for (size_t i = pos; pos && i < n; ++i)
        if (in[i]) *why = "trailing garbage after the gzip data";
      break;
    }
    const unsigned char flags = in[pos + 3];
    if (in[pos + 2] != 8 || (flags & 0xe0)) { *why = "unknown gzip compression method or flags"; break; }
    size_t p = pos + 10;
    if (flags & 4) p = p + 2 <= n ? p + 2 + (in[p] | (size_t)in[p + 1] << 8) : n + 1; /* FEXTRA */
    for (int field = 8; field <= 16; field *= 2) /* FNAME, FCOMMENT: zero-terminated */
      if (flags & field) {
        while (p < n && in[p]) ++p;
        ++p;
      }
    if (flags & 2) p += 2; /* FHCRC */
    size_t start = len, used = 0;
    if (p > n) { *why = "truncated gzip header"; break; }
    if (ex_inflate(in + p, n - p, &used, &out, &len, &cap)) { *why = "corrupt or truncated deflate data"; break; }
    p += used;
    if (n - p < 8) { *why = "truncated gzip trailer"; break; }
    uint32_t crc = (uint32_t)in[p] | (uint32_t)in[p + 1] << 8 | (uint32_t)in[p + 2] << 16 | (uint32_t)in[p + 3] << 24;
    uint32_t size = (uint32_t)in[p + 4] | (uint32_t)in[p + 5] << 8 | (uint32_t)in[p + 6] << 16 |
                    (uint32_t)in[p + 7] << 24;
    if (crc != ex_crc32(out + start, len - start, 0)) { *why = "gzip CRC-32 mismatch"; break; }
    if (size != (uint32_t)(len - start)) { *why = "gzip length mismatch"; break; }
    pos = p + 8;
    if (pos == n) break;
  }
  if (*why) {
    free(out);
    return NULL;
  }
  *out_len = len;
  return out ? out : (unsigned char*)malloc(1);
}

/* Reads a whole file, decompressing it in process when the name ends in .gz (any path works:
 * no shell is involved). Returns malloc'd bytes (caller frees) or NULL for a missing, unreadable,
 * empty or corrupt file (corrupt .gz files are named on stderr). */
static inline unsigned char* ex_read_file(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 20, len = 0;
  unsigned char* buf = (unsigned char*)malloc(cap);
  while (buf) {
    if (len == cap) {
      unsigned char* more = (unsigned char*)realloc(buf, cap *= 2);
      if (!more) free(buf);
      buf = more;
      if (!buf) break;
    }
    size_t got = fread(buf + len, 1, cap - len, f);
    if (!got) break;
    len += got;
  }
  int bad = !buf || ferror(f);
  fclose(f);
  if (bad || !len) {
    free(buf);
    return NULL;
  }
  size_t n = strlen(path);
  if (n > 3 && strcmp(path + n - 3, ".gz") == 0) {
    const char* why;
    unsigned char* raw = ex_gunzip(buf, len, &len, &why);
    free(buf);
    if (!raw) fprintf(stderr, "%s: %s\n", path, why);
    if (!raw || !len) {
      free(raw);
      return NULL;
    }
    buf = raw;
  }
  *size = len;
  return buf;
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
