/* A dependency-free line plot for the C examples (C99 and libc only): ex_plot renders series of
 * (x, y) points into an RGB image with a title, a framed plot area, x and y axes with 1-2-5 tick
 * values and labels (a built-in 5x7 bitmap font), axis titles and a legend, and writes it as a
 * PNG. The PNG's zlib stream is one fixed-Huffman deflate block whose matches are the previous
 * pixel and the row above (a plot is mostly runs of one colour), so no zlib is needed.
 * Also the checksums shared with the gzip reader of example_util.h (CRC-32, Adler-32). */
#ifndef NEXUS_EXAMPLE_PLOT_H
#define NEXUS_EXAMPLE_PLOT_H
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- checksums */
/* CRC-32 (the one of PNG chunks and gzip members); crc is 0 to start, the previous result to go on. */
static inline uint32_t ex_crc32(const unsigned char* p, size_t n, uint32_t crc) {
  static const uint32_t t[16] = {0x00000000u, 0x1DB71064u, 0x3B6E20C8u, 0x26D930ACu, 0x76DC4190u, 0x6B6B51F4u,
                                 0x4DB26158u, 0x5005713Cu, 0xEDB88320u, 0xF00F9344u, 0xD6D6A3E8u, 0xCB61B38Cu,
                                 0x9B64C2B0u, 0x86D3D2D4u, 0xA00AE278u, 0xBDBDF21Cu};
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    crc = (crc >> 4) ^ t[crc & 15];
    crc = (crc >> 4) ^ t[crc & 15];
  }
  return ~crc;
}

/* Adler-32 (the trailer of a zlib stream); adler is 1 to start. */
static inline uint32_t ex_adler32(const unsigned char* p, size_t n, uint32_t adler) {
  uint32_t a = adler & 0xffffu, b = adler >> 16;
  while (n) {
    size_t k = n < 5552 ? n : 5552; /* the most bytes before b can overflow 32 bits */
    n -= k;
    while (k--) {
      a += *p++;
      b += a;
    }
    a %= 65521u;
    b %= 65521u;
  }
  return (b << 16) | a;
}

/* Deflate's length and distance codes (RFC 1951, 3.2.5): which 0: length bases (codes 257..285),
 * 1: their extra bits, 2: distance bases, 3: their extra bits. */
static inline const uint16_t* ex_deflate_table(int which) {
  static const uint16_t t[4][30] = {
      {3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227,
       258},
      {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0},
      {1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097,
       6145, 8193, 12289, 16385, 24577},
      {0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13}};
  return t[which];
}

/* ---------------------------------------------------------------- PNG writer */
typedef struct {
  unsigned char* p;
  size_t len;
  uint64_t acc;
  int nbits;
} ExBitWriter;

static inline void ex_bits_put(ExBitWriter* o, uint32_t bits, int n) { /* deflate packs LSB first */
  o->acc |= (uint64_t)bits << o->nbits;
  o->nbits += n;
  while (o->nbits >= 8) {
    o->p[o->len++] = (unsigned char)o->acc;
    o->acc >>= 8;
    o->nbits -= 8;
  }
}
static inline void ex_bits_huff(ExBitWriter* o, uint32_t code, int len) { /* Huffman codes go MSB first */
  uint32_t r = 0;
  for (int i = 0; i < len; ++i) r |= ((code >> i) & 1u) << (len - 1 - i);
  ex_bits_put(o, r, len);
}
static inline void ex_bits_litlen(ExBitWriter* o, int sym) { /* the fixed literal/length code */
  if (sym < 144) ex_bits_huff(o, 0x30u + (uint32_t)sym, 8);
  else if (sym < 256) ex_bits_huff(o, 0x190u + (uint32_t)(sym - 144), 9);
  else if (sym < 280) ex_bits_huff(o, (uint32_t)(sym - 256), 7);
  else ex_bits_huff(o, 0xC0u + (uint32_t)(sym - 280), 8);
}

/* A zlib stream of in[0, n): one fixed-Huffman block whose matches are at distance 3 (the pixel
 * to the left) or `row` (the pixel above). Returns malloc'd bytes or NULL. */
static inline unsigned char* ex_zlib_rle(const unsigned char* in, size_t n, size_t row, size_t* zlen) {
  const uint16_t *lbase = ex_deflate_table(0), *lext = ex_deflate_table(1);
  const uint16_t *dbase = ex_deflate_table(2), *dext = ex_deflate_table(3);
  ExBitWriter o = {NULL, 0, 0, 0};
  o.p = (unsigned char*)malloc(n + n / 8 + 64); /* a literal is at most 9 bits, a match less per byte */
  if (!o.p) return NULL;
  o.p[o.len++] = 0x78; /* deflate, 32 KiB window */
  o.p[o.len++] = 0x01; /* no dictionary; 0x7801 % 31 == 0 */
  ex_bits_put(&o, 1, 1); /* the last block */
  ex_bits_put(&o, 1, 2); /* fixed Huffman codes */
  const size_t dist[2] = {3, row <= 32768 ? row : 0};
  for (size_t i = 0; i < n;) {
    size_t best = 0, bestd = 0, most = n - i < 258 ? n - i : 258;
    for (int c = 0; c < 2; ++c) {
      size_t d = dist[c], len = 0;
      if (!d || d > i) continue;
      while (len < most && in[i + len] == in[i + len - d]) ++len;
      if (len > best) best = len, bestd = d;
    }
    if (best >= 3) {
      int k = 28, j = 29;
      while (lbase[k] > best) --k;
      while (dbase[j] > bestd) --j;
      ex_bits_litlen(&o, 257 + k);
      ex_bits_put(&o, (uint32_t)(best - lbase[k]), lext[k]);
      ex_bits_huff(&o, (uint32_t)j, 5);
      ex_bits_put(&o, (uint32_t)(bestd - dbase[j]), dext[j]);
      i += best;
    } else {
      ex_bits_litlen(&o, in[i++]);
    }
  }
  ex_bits_litlen(&o, 256); /* end of block */
  if (o.nbits) ex_bits_put(&o, 0, 8 - o.nbits);
  uint32_t a = ex_adler32(in, n, 1);
  for (int k = 3; k >= 0; --k) o.p[o.len++] = (unsigned char)(a >> (8 * k));
  *zlen = o.len;
  return o.p;
}

static inline int ex_png_chunk(FILE* f, const char* type, const unsigned char* data, uint32_t n) {
  unsigned char hdr[8], tail[4];
  uint32_t crc = ex_crc32(data, n, ex_crc32((const unsigned char*)type, 4, 0));
  for (int k = 0; k < 4; ++k) {
    hdr[k] = (unsigned char)(n >> (24 - 8 * k));
    hdr[4 + k] = (unsigned char)type[k];
    tail[k] = (unsigned char)(crc >> (24 - 8 * k));
  }
  return fwrite(hdr, 1, 8, f) == 8 && (!n || fwrite(data, 1, n, f) == n) && fwrite(tail, 1, 4, f) == 4 ? 0 : -1;
}

/* Writes w x h RGB pixels (row-major, 3 bytes each) as an 8-bit RGB PNG. Returns 0 or -1. */
static inline int ex_png_write(const char* path, const unsigned char* rgb, int w, int h) {
  if (!path || !rgb || w <= 0 || h <= 0 || w > 65535 || h > 65535) return -1;
  size_t row = 1 + 3 * (size_t)w, n = row * (size_t)h, zlen = 0;
  unsigned char* raw = (unsigned char*)malloc(n);
  if (!raw) return -1;
  for (int y = 0; y < h; ++y) {
    raw[(size_t)y * row] = 0; /* filter: none */
    memcpy(raw + (size_t)y * row + 1, rgb + (size_t)y * w * 3, (size_t)w * 3);
  }
  unsigned char* z = ex_zlib_rle(raw, n, row, &zlen);
  free(raw);
  if (!z) return -1;
  FILE* f = fopen(path, "wb");
  int rc = -1;
  if (f) {
    static const unsigned char sig[8] = {137, 80, 78, 71, 13, 10, 26, 10};
    unsigned char ihdr[13] = {0};
    for (int k = 0; k < 4; ++k) {
      ihdr[k] = (unsigned char)((uint32_t)w >> (24 - 8 * k));
      ihdr[4 + k] = (unsigned char)((uint32_t)h >> (24 - 8 * k));
    }
    ihdr[8] = 8; /* bits per channel */
    ihdr[9] = 2; /* RGB; compression, filter method and interlace 0 */
    rc = fwrite(sig, 1, 8, f) == 8 ? 0 : -1;
    if (!rc) rc = ex_png_chunk(f, "IHDR", ihdr, 13);
    for (size_t at = 0; !rc && at < zlen; at += 1u << 30) {
      size_t part = zlen - at < (1u << 30) ? zlen - at : (1u << 30);
      rc = ex_png_chunk(f, "IDAT", z + at, (uint32_t)part);
    }
    if (!rc) rc = ex_png_chunk(f, "IEND", NULL, 0);
    if (fclose(f) != 0) rc = -1;
  }
  free(z);
  return rc;
}

/* ---------------------------------------------------------------- drawing */
/* The 5x7 glyph of a printable ASCII character ('?' for others): 5 columns, bit r = row r from the
 * top; row 7 holds the descenders of g, j, p, q and y. */
static inline const unsigned char* ex_glyph(unsigned char c) {
  static const unsigned char font[95][5] = {
      {0x00, 0x00, 0x00, 0x00, 0x00}, {0x00, 0x00, 0x5F, 0x00, 0x00}, {0x00, 0x07, 0x00, 0x07, 0x00}, /*  !" */
      {0x14, 0x7F, 0x14, 0x7F, 0x14}, {0x24, 0x2A, 0x7F, 0x2A, 0x12}, {0x23, 0x13, 0x08, 0x64, 0x62}, /* #$% */
      {0x36, 0x49, 0x55, 0x22, 0x50}, {0x00, 0x05, 0x03, 0x00, 0x00}, {0x00, 0x1C, 0x22, 0x41, 0x00}, /* &'( */
      {0x00, 0x41, 0x22, 0x1C, 0x00}, {0x14, 0x08, 0x3E, 0x08, 0x14}, {0x08, 0x08, 0x3E, 0x08, 0x08}, /* )*+ */
      {0x00, 0x50, 0x30, 0x00, 0x00}, {0x08, 0x08, 0x08, 0x08, 0x08}, {0x00, 0x60, 0x60, 0x00, 0x00}, /* ,-. */
      {0x20, 0x10, 0x08, 0x04, 0x02}, {0x3E, 0x51, 0x49, 0x45, 0x3E}, {0x00, 0x42, 0x7F, 0x40, 0x00}, /* /01 */
      {0x42, 0x61, 0x51, 0x49, 0x46}, {0x21, 0x41, 0x45, 0x4B, 0x31}, {0x18, 0x14, 0x12, 0x7F, 0x10}, /* 234 */
      {0x27, 0x45, 0x45, 0x45, 0x39}, {0x3C, 0x4A, 0x49, 0x49, 0x30}, {0x01, 0x71, 0x09, 0x05, 0x03}, /* 567 */
      {0x36, 0x49, 0x49, 0x49, 0x36}, {0x06, 0x49, 0x49, 0x29, 0x1E}, {0x00, 0x36, 0x36, 0x00, 0x00}, /* 89: */
      {0x00, 0x56, 0x36, 0x00, 0x00}, {0x08, 0x14, 0x22, 0x41, 0x00}, {0x14, 0x14, 0x14, 0x14, 0x14}, /* ;<= */
      {0x00, 0x41, 0x22, 0x14, 0x08}, {0x02, 0x01, 0x51, 0x09, 0x06}, {0x32, 0x49, 0x79, 0x41, 0x3E}, /* >?@ */
      {0x7E, 0x11, 0x11, 0x11, 0x7E}, {0x7F, 0x49, 0x49, 0x49, 0x36}, {0x3E, 0x41, 0x41, 0x41, 0x22}, /* ABC */
      {0x7F, 0x41, 0x41, 0x22, 0x1C}, {0x7F, 0x49, 0x49, 0x49, 0x41}, {0x7F, 0x09, 0x09, 0x09, 0x01}, /* DEF */
      {0x3E, 0x41, 0x49, 0x49, 0x7A}, {0x7F, 0x08, 0x08, 0x08, 0x7F}, {0x00, 0x41, 0x7F, 0x41, 0x00}, /* GHI */
      {0x20, 0x40, 0x41, 0x3F, 0x01}, {0x7F, 0x08, 0x14, 0x22, 0x41}, {0x7F, 0x40, 0x40, 0x40, 0x40}, /* JKL */
      {0x7F, 0x02, 0x0C, 0x02, 0x7F}, {0x7F, 0x04, 0x08, 0x10, 0x7F}, {0x3E, 0x41, 0x41, 0x41, 0x3E}, /* MNO */
      {0x7F, 0x09, 0x09, 0x09, 0x06}, {0x3E, 0x41, 0x51, 0x21, 0x5E}, {0x7F, 0x09, 0x19, 0x29, 0x46}, /* PQR */
      {0x46, 0x49, 0x49, 0x49, 0x31}, {0x01, 0x01, 0x7F, 0x01, 0x01}, {0x3F, 0x40, 0x40, 0x40, 0x3F}, /* STU */
      {0x1F, 0x20, 0x40, 0x20, 0x1F}, {0x3F, 0x40, 0x38, 0x40, 0x3F}, {0x63, 0x14, 0x08, 0x14, 0x63}, /* VWX */
      {0x07, 0x08, 0x70, 0x08, 0x07}, {0x61, 0x51, 0x49, 0x45, 0x43}, {0x00, 0x7F, 0x41, 0x41, 0x00}, /* YZ[ */
      {0x02, 0x04, 0x08, 0x10, 0x20}, {0x00, 0x41, 0x41, 0x7F, 0x00}, {0x04, 0x02, 0x01, 0x02, 0x04}, /* \]^ */
      {0x40, 0x40, 0x40, 0x40, 0x40}, {0x00, 0x01, 0x02, 0x04, 0x00}, {0x20, 0x54, 0x54, 0x54, 0x78}, /* _`a */
      {0x7F, 0x48, 0x44, 0x44, 0x38}, {0x38, 0x44, 0x44, 0x44, 0x20}, {0x38, 0x44, 0x44, 0x48, 0x7F}, /* bcd */
      {0x38, 0x54, 0x54, 0x54, 0x18}, {0x08, 0x7E, 0x09, 0x01, 0x02}, {0x18, 0xA4, 0xA4, 0xA4, 0x7C}, /* efg */
      {0x7F, 0x08, 0x04, 0x04, 0x78}, {0x00, 0x44, 0x7D, 0x40, 0x00}, {0x40, 0x80, 0x84, 0x7D, 0x00}, /* hij */
      {0x7F, 0x10, 0x28, 0x44, 0x00}, {0x00, 0x41, 0x7F, 0x40, 0x00}, {0x7C, 0x04, 0x18, 0x04, 0x78}, /* klm */
      {0x7C, 0x08, 0x04, 0x04, 0x78}, {0x38, 0x44, 0x44, 0x44, 0x38}, {0xFC, 0x24, 0x24, 0x24, 0x18}, /* nop */
      {0x18, 0x24, 0x24, 0x24, 0xFC}, {0x7C, 0x08, 0x04, 0x04, 0x08}, {0x48, 0x54, 0x54, 0x54, 0x20}, /* qrs */
      {0x04, 0x3F, 0x44, 0x40, 0x20}, {0x3C, 0x40, 0x40, 0x20, 0x7C}, {0x1C, 0x20, 0x40, 0x20, 0x1C}, /* tuv */
      {0x3C, 0x40, 0x30, 0x40, 0x3C}, {0x44, 0x28, 0x10, 0x28, 0x44}, {0x1C, 0xA0, 0xA0, 0xA0, 0x7C}, /* wxy */
      {0x44, 0x64, 0x54, 0x4C, 0x44}, {0x00, 0x08, 0x36, 0x41, 0x00}, {0x00, 0x00, 0x7F, 0x00, 0x00}, /* z{| */
      {0x00, 0x41, 0x36, 0x08, 0x00}, {0x08, 0x04, 0x08, 0x10, 0x08}};                                 /* }~ */
  if (c < 32 || c > 126) c = '?';
  return font[c - 32];
}

/* An RGB image with a clip rectangle [x0, x1) x [y0, y1) that every drawing call respects. */
typedef struct {
  unsigned char* px;
  int w, h, x0, y0, x1, y1;
} ExCanvas;

static inline void ex_put(ExCanvas* c, int x, int y, uint32_t rgb) {
  if (x < c->x0 || x >= c->x1 || y < c->y0 || y >= c->y1) return;
  unsigned char* p = c->px + ((size_t)y * (size_t)c->w + (size_t)x) * 3;
  p[0] = (unsigned char)(rgb >> 16), p[1] = (unsigned char)(rgb >> 8), p[2] = (unsigned char)rgb;
}
static inline void ex_rect_fill(ExCanvas* c, int x0, int y0, int x1, int y1, uint32_t rgb) { /* inclusive */
  for (int y = y0; y <= y1; ++y)
    for (int x = x0; x <= x1; ++x) ex_put(c, x, y, rgb);
}
static inline void ex_rect_frame(ExCanvas* c, int x0, int y0, int x1, int y1, uint32_t rgb) {
  ex_rect_fill(c, x0, y0, x1, y0, rgb), ex_rect_fill(c, x0, y1, x1, y1, rgb);
  ex_rect_fill(c, x0, y0, x0, y1, rgb), ex_rect_fill(c, x1, y0, x1, y1, rgb);
}
/* A line `width` pixels wide (Bresenham with a width x width brush). */
static inline void ex_line(ExCanvas* c, int x0, int y0, int x1, int y1, int width, uint32_t rgb) {
  int dx = abs(x1 - x0), dy = -abs(y1 - y0), sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1, err = dx + dy;
  const int lo = -(width - 1) / 2, hi = width / 2;
  for (;;) {
    ex_rect_fill(c, x0 + lo, y0 + lo, x0 + hi, y0 + hi, rgb);
    if (x0 == x1 && y0 == y1) break;
    int e2 = 2 * err;
    if (e2 >= dy) err += dy, x0 += sx;
    if (e2 <= dx) err += dx, y0 += sy;
  }
}
static inline int ex_text_width(const char* s, int scale) {
  int n = (int)strlen(s);
  return n ? (6 * n - 1) * scale : 0;
}
/* Text at scale x the 5x7 font; (x, y) is the top left of its box, 8 * scale high with the
 * descenders. vertical: rotated a quarter turn counterclockwise (read bottom to top), the box
 * then 8 * scale wide. */
static inline void ex_text(ExCanvas* c, int x, int y, const char* s, int scale, uint32_t rgb, int vertical) {
  const int w = ex_text_width(s, scale);
  for (int i = 0; s[i]; ++i) {
    const unsigned char* g = ex_glyph((unsigned char)s[i]);
    for (int col = 0; col < 5; ++col)
      for (int r = 0; r < 8; ++r) {
        if (!((g[col] >> r) & 1)) continue;
        int gx = (6 * i + col) * scale, gy = r * scale;
        for (int dy = 0; dy < scale; ++dy)
          for (int dx = 0; dx < scale; ++dx) {
            if (vertical) ex_put(c, x + gy + dy, y + w - 1 - (gx + dx), rgb);
            else ex_put(c, x + gx + dx, y + gy + dy, rgb);
          }
      }
  }
}

/* ---------------------------------------------------------------- axes */
/* The step of about `target` intervals over range: 1, 2 or 5 times a power of ten, the nearest
 * to range / target (Heckbert's nice numbers). */
static inline double ex_nice_step(double range, int target) {
  double raw = range / (target > 0 ? target : 1), mag = pow(10.0, floor(log10(raw))), f = raw / mag;
  return (f < 1.5 ? 1.0 : f < 3.0 ? 2.0 : f < 7.0 ? 5.0 : 10.0) * mag;
}
/* The tick step for [lo, hi] with about target (at least 2) intervals; finite for any finite lo, hi. */
static inline double ex_axis_step(double lo, double hi, int target) {
  if (target < 2) target = 2;
  return isfinite(hi - lo) ? ex_nice_step(hi - lo, target) : 2 * ex_nice_step(hi / 2 - lo / 2, target);
}
/* The multiples of step in [lo, hi] (at most max of them); returns how many. */
static inline int ex_ticks(double lo, double hi, double step, double* out, int max) {
  if (!(step > 0) || !isfinite(step) || !isfinite(lo) || !isfinite(hi)) return 0;
  double first = ceil(lo / step - 1e-9);
  int n = 0;
  for (int k = 0; n < max; ++k) {
    double v = (first + k) * step;
    if (!isfinite(v) || v > hi + step * 1e-9) break;
    out[n++] = fabs(v) < step * 1e-9 ? 0.0 : v;
  }
  return n;
}
/* A tick label: as many decimals as the step needs; exponent form for very large or small values. */
static inline void ex_tick_label(char* buf, size_t size, double v, double step, double maxabs) {
  int decimals = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
  if (v != 0 && (maxabs >= 1e6 || decimals > 5)) {
    int digits = (int)floor(log10(maxabs)) - (int)floor(log10(step)) + 1;
    snprintf(buf, size, "%.*g", digits < 1 ? 1 : digits > 17 ? 17 : digits, v);
  } else {
    snprintf(buf, size, "%.*f", decimals, v);
  }
}

/* ---------------------------------------------------------------- the plot */
/* One line of a plot. Points whose x or y is NaN or infinite are skipped and break the line. */
typedef struct {
  const double* x;  /* n x positions, or NULL for 0, 1, ..., n-1 */
  const double* y;  /* n values */
  int n;
  const char* name; /* the legend's entry; NULL leaves the series out of the legend */
  uint32_t color;   /* 0xRRGGBB */
  int markers;      /* nonzero: a square marker at every point (a point with no neighbour always gets one) */
} ExSeries;

#define EX_PLOT_BLUE 0x1F77B4u   /* the colours of matplotlib's first series */
#define EX_PLOT_ORANGE 0xFF7F0Eu
#define EX_PLOT_GREEN 0x2CA02Cu
#define EX_PLOT_RED 0xD62728u
#define EX_PLOT_BLACK 0x000000u
#define EX_PLOT_GRID 0xE6E6E6u
#define EX_PLOT_WHITE 0xFFFFFFu

static inline int ex_plot_point(const ExSeries* s, int i, double* x, double* y) {
  *x = s->x ? s->x[i] : (double)i;
  *y = s->y[i];
  return isfinite(*x) && isfinite(*y);
}
/* The data range [lo, hi] widened by margin (a fraction of it) on each side; a point-like range
 * becomes a small interval around it, an empty one [0, 1]. */
static inline void ex_plot_range(double* lo, double* hi, double margin) {
  if (!(*lo <= *hi)) *lo = 0, *hi = 1;
  if (*hi - *lo <= fabs(*hi) * 1e-12 || *hi - *lo < DBL_MIN) {
    double d = fabs(*lo) * 0.1 > DBL_MIN ? fabs(*lo) * 0.1 : 1.0;
    *lo -= d, *hi += d;
  }
  double m = (*hi / 2 - *lo / 2) * 2 * margin;
  *lo = isfinite(*lo - m) ? *lo - m : -DBL_MAX;
  *hi = isfinite(*hi + m) ? *hi + m : DBL_MAX;
}
/* Where v falls in [lo, hi] as a fraction (computed on halves, so that no range overflows). */
static inline double ex_plot_frac(double v, double lo, double hi) { return (v / 2 - lo / 2) / (hi / 2 - lo / 2); }

/* Renders the plot into rgb (w x h x 3 bytes, which it overwrites). Returns 0, or -1 when the
 * arguments are unusable (no pixels, too small for the axes). */
static inline int ex_plot_render(unsigned char* rgb, const ExSeries* series, int nseries, const char* title,
                                 const char* xlabel, const char* ylabel, int w, int h) {
  if (!rgb || w < 64 || h < 48 || w > 16384 || h > 16384 || nseries < 0 || (nseries && !series)) return -1;
  for (int k = 0; k < nseries; ++k)
    if (series[k].n < 0 || (series[k].n > 0 && !series[k].y)) return -1;
  ExCanvas cv = {rgb, w, h, 0, 0, w, h};
  memset(rgb, 255, (size_t)w * (size_t)h * 3);
  const int s = w >= 720 && h >= 400 ? 2 : 1; /* the font's scale for labels; the title's is s + 1 */
  const int gap = 4 * s, tick = 4 * s, fh = 8 * s; /* fh: a text line's height */
  double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
  for (int k = 0; k < nseries; ++k)
    for (int i = 0; i < series[k].n; ++i) {
      double x, y;
      if (!ex_plot_point(&series[k], i, &x, &y)) continue;
      xlo = fmin(xlo, x), xhi = fmax(xhi, x), ylo = fmin(ylo, y), yhi = fmax(yhi, y);
    }

  /* Layout: rows from the top (title) and the bottom (tick labels, x title) first, then the y
   * ticks for that height, whose labels' width sets the left margin. */
  int ts = s + 1; /* the title's scale, smaller when it would not fit */
  while (title && ts > 1 && ex_text_width(title, ts) > w - 2 * gap) --ts;
  const int top = 2 * gap + (title && *title ? 8 * ts + gap : 0);
  const int bottom = tick + gap + fh + (xlabel && *xlabel ? 2 * gap + fh : 0) + gap;
  const int py0 = top, py1 = h - 1 - bottom;
  if (py1 - py0 < 16) return -1;
  /* margins: 6% of the data range in y, 2% in x, and room for a marker at either end */
  const int mk = 1 + s; /* a marker is (2 mk + 1) pixels square */
  ex_plot_range(&ylo, &yhi, fmax(0.06, 1.2 * (mk + 2) / (py1 - py0)));
  double yt[64], xt[64];
  const double ystep = ex_axis_step(ylo, yhi, (py1 - py0) / (28 * s + 12));
  const int nyt = ex_ticks(ylo, yhi, ystep, yt, 64);
  char label[64];
  int ylw = 0;
  double ymax = fmax(fabs(ylo), fabs(yhi));
  for (int i = 0; i < nyt; ++i) {
    ex_tick_label(label, sizeof label, yt[i], ystep, ymax);
    if (ex_text_width(label, s) > ylw) ylw = ex_text_width(label, s);
  }
  const int left = gap + (ylabel && *ylabel ? fh + 2 * gap : 0) + ylw + gap + tick;
  const int right = 3 * 6 * s + gap;
  const int px0 = left, px1 = w - 1 - right;
  if (px1 - px0 < 16) return -1;
  ex_plot_range(&xlo, &xhi, fmax(0.02, 1.2 * (mk + 2) / (px1 - px0)));
  /* x ticks: fewer while their labels would not leave a gap between them */
  double xmax = fmax(fabs(xlo), fabs(xhi)), xstep = 0;
  int nxt = 0;
  for (int target = (px1 - px0) / (50 * s + 20); ; --target) {
    xstep = ex_axis_step(xlo, xhi, target);
    nxt = ex_ticks(xlo, xhi, xstep, xt, 64);
    int widest = 0;
    for (int i = 0; i < nxt; ++i) {
      ex_tick_label(label, sizeof label, xt[i], xstep, xmax);
      if (ex_text_width(label, s) > widest) widest = ex_text_width(label, s);
    }
    if (nxt < 2 || target <= 2) break;
    if ((ex_plot_frac(xt[1], xlo, xhi) - ex_plot_frac(xt[0], xlo, xhi)) * (px1 - px0) >= widest + 3 * gap) break;
  }
#define EX_PX_X(v) (px0 + (int)lround(ex_plot_frac((v), xlo, xhi) * (px1 - px0)))
#define EX_PX_Y(v) (py1 - (int)lround(ex_plot_frac((v), ylo, yhi) * (py1 - py0)))

  /* grid, ticks and their labels */
  for (int i = 0; i < nyt; ++i) {
    int y = EX_PX_Y(yt[i]);
    ex_rect_fill(&cv, px0 + 1, y, px1 - 1, y, EX_PLOT_GRID);
    ex_rect_fill(&cv, px0 - tick, y, px0 - 1, y, EX_PLOT_BLACK);
    ex_tick_label(label, sizeof label, yt[i], ystep, ymax);
    ex_text(&cv, px0 - tick - gap - ex_text_width(label, s), y - 7 * s / 2, label, s, EX_PLOT_BLACK, 0);
  }
  for (int i = 0; i < nxt; ++i) {
    int x = EX_PX_X(xt[i]);
    ex_rect_fill(&cv, x, py0 + 1, x, py1 - 1, EX_PLOT_GRID);
    ex_rect_fill(&cv, x, py1 + 1, x, py1 + tick, EX_PLOT_BLACK);
    ex_tick_label(label, sizeof label, xt[i], xstep, xmax);
    ex_text(&cv, x - ex_text_width(label, s) / 2, py1 + tick + gap, label, s, EX_PLOT_BLACK, 0);
  }
  if (title && *title)
    ex_text(&cv, (w - ex_text_width(title, ts)) / 2, 2 * gap, title, ts, EX_PLOT_BLACK, 0);
  if (xlabel && *xlabel)
    ex_text(&cv, (px0 + px1 - ex_text_width(xlabel, s)) / 2, py1 + tick + gap + fh + 2 * gap, xlabel, s,
            EX_PLOT_BLACK, 0);
  if (ylabel && *ylabel)
    ex_text(&cv, gap, (py0 + py1 - ex_text_width(ylabel, s)) / 2, ylabel, s, EX_PLOT_BLACK, 1);

  /* the series, clipped to the inside of the frame */
  cv.x0 = px0 + 1, cv.y0 = py0 + 1, cv.x1 = px1, cv.y1 = py1;
  for (int k = 0; k < nseries; ++k) {
    const ExSeries* se = &series[k];
    int have = 0, px = 0, py = 0;
    for (int i = 0; i < se->n; ++i) {
      double x, y;
      if (!ex_plot_point(se, i, &x, &y)) {
        have = 0;
        continue;
      }
      int X = EX_PX_X(x), Y = EX_PX_Y(y);
      if (have) ex_line(&cv, px, py, X, Y, 2, se->color);
      double nx, ny;
      int alone = !have && !(i + 1 < se->n && ex_plot_point(se, i + 1, &nx, &ny));
      if (se->markers || alone) ex_rect_fill(&cv, X - mk, Y - mk, X + mk, Y + mk, se->color);
      have = 1, px = X, py = Y;
    }
  }
#undef EX_PX_X
#undef EX_PX_Y

  /* the legend, in the corner of the plot area with the fewest drawn pixels */
  int rows = 0, namew = 0;
  for (int k = 0; k < nseries; ++k)
    if (series[k].name) {
      ++rows;
      if (ex_text_width(series[k].name, s) > namew) namew = ex_text_width(series[k].name, s);
    }
  const int sample = 20 * s, lw = gap + sample + gap + namew + gap, lh = gap + rows * (fh + gap);
  if (rows && lw < px1 - px0 - 2 * gap && lh < py1 - py0 - 2 * gap) {
    int best = -1, bx = 0, by = 0;
    for (int corner = 0; corner < 4; ++corner) { /* upper right, upper left, lower right, lower left */
      int x = corner % 2 ? px0 + 1 + gap : px1 - gap - lw, y = corner < 2 ? py0 + 1 + gap : py1 - gap - lh, ink = 0;
      for (int yy = y; yy <= y + lh; ++yy)
        for (int xx = x; xx <= x + lw; ++xx) {
          const unsigned char* p = rgb + ((size_t)yy * (size_t)w + (size_t)xx) * 3;
          ink += !(p[0] == p[1] && p[1] == p[2] && p[0] >= 0xE6); /* not background nor grid */
        }
      if (best < 0 || ink < best) best = ink, bx = x, by = y;
    }
    ex_rect_fill(&cv, bx, by, bx + lw, by + lh, EX_PLOT_WHITE);
    ex_rect_frame(&cv, bx, by, bx + lw, by + lh, EX_PLOT_BLACK);
    int y = by + gap;
    for (int k = 0; k < nseries; ++k) {
      if (!series[k].name) continue;
      int cy = y + 7 * s / 2;
      ex_line(&cv, bx + gap, cy, bx + gap + sample, cy, 2, series[k].color);
      if (series[k].markers) ex_rect_fill(&cv, bx + gap + sample / 2 - mk, cy - mk, bx + gap + sample / 2 + mk,
                                          cy + mk, series[k].color);
      ex_text(&cv, bx + gap + sample + gap, y, series[k].name, s, EX_PLOT_BLACK, 0);
      y += fh + gap;
    }
  }
  cv.x0 = 0, cv.y0 = 0, cv.x1 = w, cv.y1 = h;
  ex_rect_frame(&cv, px0, py0, px1, py1, EX_PLOT_BLACK);
  return 0;
}

/* Plots the series (drawn in order, so the last is on top) into a w x h PNG at path: white
 * background, framed axes with 1-2-5 ticks, the title above, xlabel below, ylabel up the left
 * side, a legend of the named series. Points sit at their own x: series of different lengths or
 * spacings share the axes. Returns 0 on success, -1 on bad arguments or an I/O error. */
static inline int ex_plot(const char* path, const ExSeries* series, int nseries, const char* title,
                          const char* xlabel, const char* ylabel, int w, int h) {
  if (!path || w < 64 || h < 48 || w > 16384 || h > 16384) return -1;
  unsigned char* rgb = (unsigned char*)malloc((size_t)w * (size_t)h * 3);
  if (!rgb) return -1;
  int rc = ex_plot_render(rgb, series, nseries, title, xlabel, ylabel, w, h);
  if (!rc) rc = ex_png_write(path, rgb, w, h);
  free(rgb);
  return rc;
}

#endif
