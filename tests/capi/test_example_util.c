/* The C examples' helpers (examples/c/example_util.h and plot.h; issue 19).
 *
 * ex_plot: the file is a valid PNG, checked by this file's own reader (signature, IHDR, every
 * chunk's CRC-32 computed bit by bit here, the zlib header, the IDAT stream inflated and its
 * Adler-32 recomputed here, the scanline filters undone), whose pixels are exactly those that
 * ex_plot_render draws: a white majority, a black frame and text, both series' colours; the
 * points of a shorter series sit at their own x (not stretched over the other's length); NaN and
 * infinite points, empty, constant, single-point and huge-valued series, and sizes at both font
 * scales do not crash and still give a valid PNG; bad arguments return -1. The 1-2-5 ticks and
 * their labels are checked directly.
 *
 * ex_read_file: .gz files made by the system gzip (levels 1 and 9, so stored, fixed and dynamic
 * blocks, with the original name in the header) at paths with a single quote, spaces and
 * non-ASCII bytes come back byte for byte, as do concatenated members and trailing zero padding;
 * corrupt (single-bit flips at 300 places), truncated and non-gzip .gz files give
 * NULL, random bytes never crash the inflater; Debian's Fashion-MNIST files, when
 * installed, match `gzip -dc`. gzip runs through fork/exec with an argv, never a shell. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../examples/c/example_util.h"
#include "nx_test.h"

/* ---------------------------------------------------------------- files */
/* Runs gzip with args (NULL-terminated, after "gzip"), stdout to out_path when given; its exit
 * status, 127 when there is no gzip. */
static int run_gzip(const char* const* args, const char* out_path) {
  const char* argv[16] = {"gzip"};
  int n = 1;
  while (args[n - 1] && n < 15) argv[n] = args[n - 1], ++n;
  argv[n] = NULL;
  pid_t pid = fork();
  if (pid == 0) {
    if (out_path) {
      int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0 || dup2(fd, 1) < 0) _exit(126);
    }
    execvp("gzip", (char* const*)argv);
    _exit(127);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

/* ---------------------------------------------------------------- an independent PNG reader */
static uint32_t crc_bitwise(const unsigned char* p, size_t n, uint32_t crc) {
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc & 1) ? (crc >> 1) ^ 0xEDB88320u : crc >> 1;
  }
  return ~crc;
}
static uint32_t adler_plain(const unsigned char* p, size_t n) {
  uint32_t a = 1, b = 0;
  for (size_t i = 0; i < n; ++i) a = (a + p[i]) % 65521, b = (b + a) % 65521;
  return (b << 16) | a;
}
static uint32_t be32(const unsigned char* p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static int paeth(int a, int b, int c) {
  int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
  return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

/* Reads an 8-bit RGB PNG, failing the test on any defect; returns its w * h * 3 pixels. */
static unsigned char* png_read(const char* path, int* w, int* h) {
  size_t n = 0;
  unsigned char* f = nx_read_file(path, &n);
  assert_non_null(f);
  static const unsigned char sig[8] = {137, 80, 78, 71, 13, 10, 26, 10};
  assert_true(n > 8 + 25 + 12);
  assert_memory_equal(f, sig, 8);
  unsigned char* idat = NULL;
  size_t idat_len = 0, pos = 8;
  int chunks = 0, iend = 0;
  while (pos < n) {
    assert_false(iend); /* nothing after IEND */
    assert_true(n - pos >= 12);
    uint32_t len = be32(f + pos);
    assert_true(len <= n - pos - 12);
    const unsigned char* type = f + pos + 4;
    assert_int_equal(be32(f + pos + 8 + len), crc_bitwise(type, 4 + (size_t)len, 0));
    if (chunks == 0) { /* IHDR first */
      assert_memory_equal(type, "IHDR", 4);
      assert_int_equal(len, 13);
      *w = (int)be32(f + pos + 8), *h = (int)be32(f + pos + 12);
      const unsigned char* d = f + pos + 16;
      assert_int_equal(d[0], 8); /* bit depth */
      assert_int_equal(d[1], 2); /* RGB */
      assert_int_equal(d[2], 0), assert_int_equal(d[3], 0), assert_int_equal(d[4], 0);
    } else if (!memcmp(type, "IDAT", 4)) {
      idat = (unsigned char*)realloc(idat, idat_len + len);
      memcpy(idat + idat_len, f + pos + 8, len);
      idat_len += len;
    } else if (!memcmp(type, "IEND", 4)) {
      assert_int_equal(len, 0);
      iend = 1;
    }
    pos += 12 + (size_t)len, ++chunks;
  }
  assert_true(iend);
  assert_true(*w > 0 && *h > 0);
  /* the zlib stream: header, deflate data, Adler-32 of the inflated bytes */
  assert_true(idat_len > 6);
  assert_int_equal(idat[0] & 15, 8);                      /* deflate */
  assert_true((idat[0] >> 4) <= 7);                      /* window <= 32 KiB */
  assert_int_equal((idat[0] * 256 + idat[1]) % 31, 0);   /* FCHECK */
  assert_int_equal(idat[1] & 0x20, 0);                   /* no preset dictionary */
  unsigned char* raw = NULL;
  size_t raw_len = 0, cap = 0, used = 0;
  assert_int_equal(ex_inflate(idat + 2, idat_len - 2, &used, &raw, &raw_len, &cap), 0);
  assert_int_equal(2 + used + 4, idat_len);
  const size_t row = 1 + 3 * (size_t)*w;
  assert_int_equal(raw_len, row * (size_t)*h);
  assert_int_equal(be32(idat + idat_len - 4), adler_plain(raw, raw_len));
  /* undo the filters */
  unsigned char* px = (unsigned char*)malloc((size_t)*w * *h * 3);
  for (int y = 0; y < *h; ++y) {
    const unsigned char* in = raw + (size_t)y * row;
    unsigned char *out = px + (size_t)y * *w * 3, *up = y ? out - (size_t)*w * 3 : NULL;
    assert_true(in[0] <= 4);
    for (int i = 0; i < *w * 3; ++i) {
      int a = i >= 3 ? out[i - 3] : 0, b = up ? up[i] : 0, c = up && i >= 3 ? up[i - 3] : 0;
      int pred = in[0] == 0 ? 0 : in[0] == 1 ? a : in[0] == 2 ? b : in[0] == 3 ? (a + b) / 2 : paeth(a, b, c);
      out[i] = (unsigned char)(in[1 + i] + pred);
    }
  }
  free(raw), free(idat), free(f);
  return px;
}

static size_t count_colour(const unsigned char* px, int w, int h, uint32_t rgb) {
  size_t n = 0;
  for (size_t i = 0; i < (size_t)w * h; ++i)
    n += px[3 * i] == (rgb >> 16 & 255) && px[3 * i + 1] == (rgb >> 8 & 255) && px[3 * i + 2] == (rgb & 255);
  return n;
}
/* The leftmost and rightmost columns holding the colour; -1 when absent. */
static void colour_columns(const unsigned char* px, int w, int h, uint32_t rgb, int* lo, int* hi) {
  *lo = *hi = -1;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const unsigned char* p = px + ((size_t)y * w + x) * 3;
      if (p[0] != (rgb >> 16 & 255) || p[1] != (rgb >> 8 & 255) || p[2] != (rgb & 255)) continue;
      if (*lo < 0 || x < *lo) *lo = x;
      if (x > *hi) *hi = x;
    }
}

/* Plots to a file, reads it back, checks it equals what ex_plot_render draws; returns the pixels. */
static unsigned char* plot_and_read(const char* name, const ExSeries* s, int ns, const char* title, int w, int h) {
  const char* path = nx_scratch_path(name);
  assert_int_equal(ex_plot(path, s, ns, title, "step", "loss", w, h), 0);
  int rw = 0, rh = 0;
  unsigned char* px = png_read(path, &rw, &rh);
  assert_int_equal(rw, w);
  assert_int_equal(rh, h);
  unsigned char* want = (unsigned char*)malloc((size_t)w * h * 3);
  assert_int_equal(ex_plot_render(want, s, ns, title, "step", "loss", w, h), 0);
  assert_memory_equal(px, want, (size_t)w * h * 3);
  free(want);
  return px;
}

/* ---------------------------------------------------------------- the plot */
static void test_plot_png(void** state) {
  (void)state;
  enum { N = 300 };
  double tx[N], ty[N];
  for (int i = 0; i < N; ++i) tx[i] = i, ty[i] = 4.0 + 2.5 * exp(-i / 50.0) + 0.15 * sin(i * 0.7);
  ty[37] = NAN, ty[120] = INFINITY, ty[200] = -INFINITY, tx[250] = NAN; /* skipped */
  const double vx[6] = {0, 60, 120, 180, 240, 300}, vy[6] = {6.6, 5.1, 4.6, 4.4, 4.3, 4.25};
  const ExSeries s[2] = {{tx, ty, N, "train", EX_PLOT_BLUE, 0}, {vx, vy, 6, "validation", EX_PLOT_ORANGE, 1}};
  const int sizes[2][2] = {{640, 360}, {800, 480}}; /* font scale 1 and 2 */
  for (int k = 0; k < 2; ++k) {
    const int w = sizes[k][0], h = sizes[k][1];
    unsigned char* px = plot_and_read(k ? "loss2.png" : "loss1.png", s, 2, "GPT small: loss", w, h);
    size_t white = count_colour(px, w, h, EX_PLOT_WHITE), black = count_colour(px, w, h, EX_PLOT_BLACK);
    size_t blue = count_colour(px, w, h, EX_PLOT_BLUE), orange = count_colour(px, w, h, EX_PLOT_ORANGE);
    size_t grid = count_colour(px, w, h, EX_PLOT_GRID);
    print_message("%dx%d: white %zu, black %zu, grid %zu, blue %zu, orange %zu of %d\n", w, h, white, black, grid,
                  blue, orange, w * h);
    assert_true(white > (size_t)w * h / 2);      /* a white background */
    assert_true(black > (size_t)(w + h) * 2);    /* at least the frame; also ticks and text */
    assert_true(grid > (size_t)w);               /* grid lines at the ticks */
    assert_true(blue > (size_t)w);               /* a 2-pixel line across the plot */
    assert_true(orange > 6 * 25);                /* six markers and the lines between them */
    assert_true(white + black + grid + blue + orange < (size_t)w * h + 1);
    /* the frame: a black column and row of pixels, each spanning much of the image */
    int long_col = 0, long_row = 0;
    for (int x = 0; x < w; ++x) {
      int run = 0;
      for (int y = 0; y < h; ++y) run += px[((size_t)y * w + x) * 3] == 0 && px[((size_t)y * w + x) * 3 + 2] == 0;
      long_col += run > h / 2;
    }
    for (int y = 0; y < h; ++y) {
      int run = 0;
      for (int x = 0; x < w; ++x) run += px[((size_t)y * w + x) * 3] == 0 && px[((size_t)y * w + x) * 3 + 2] == 0;
      long_row += run > w / 2;
    }
    assert_true(long_col >= 2);
    assert_true(long_row >= 2);
    free(px);
  }
}

/* A shorter series keeps its own x: validation points at 0, 25, 50 over a training run to 100
 * end halfway across, where index stretching would put the last at the right edge. */
static void test_plot_true_x(void** state) {
  (void)state;
  double tx[101], ty[101];
  for (int i = 0; i <= 100; ++i) tx[i] = i, ty[i] = 3.0 - i * 0.01;
  const double vx[3] = {0, 25, 50}, vy[3] = {3.1, 2.8, 2.6};
  const ExSeries s[2] = {{tx, ty, 101, NULL, EX_PLOT_BLUE, 0}, {vx, vy, 3, NULL, EX_PLOT_ORANGE, 1}}; /* no legend */
  unsigned char* px = plot_and_read("true_x.png", s, 2, NULL, 640, 360);
  int blo, bhi, olo, ohi;
  colour_columns(px, 640, 360, EX_PLOT_BLUE, &blo, &bhi);
  colour_columns(px, 640, 360, EX_PLOT_ORANGE, &olo, &ohi);
  print_message("train columns [%d, %d], validation columns [%d, %d]\n", blo, bhi, olo, ohi);
  assert_true(blo > 0 && bhi > blo + 400);
  const int mk = 2; /* a marker is 5 pixels square at font scale 1 */
  assert_true(abs(olo - (blo - mk)) <= 1);
  assert_true(abs(ohi - ((blo + bhi - 1) / 2 + mk)) <= 2);
  free(px);
}

static void test_plot_edge_cases(void** state) {
  (void)state;
  const double nan3[3] = {NAN, NAN, NAN}, one[1] = {2.5}, flat[4] = {1, 1, 1, 1}, xs[4] = {10, 20, 30, 40};
  const double huge[4] = {1e308, -1e308, DBL_MAX, -DBL_MAX}, tiny[4] = {1e-300, 2e-300, 3e-300, 4e-300};
  const double bigx[4] = {-1e300, 0, 1e300, INFINITY}, close[4] = {1.0, 1.0 + 1e-15, 1.0 - 1e-15, 1.0};
  const double mixed[5] = {NAN, 3.0, NAN, 4.0, INFINITY};
  const struct {
    ExSeries s[2];
    int n;
    const char* title;
  } cases[] = {
      {{{NULL, NULL, 0, "empty", EX_PLOT_BLUE, 0}, {NULL, nan3, 3, "all NaN", EX_PLOT_ORANGE, 0}}, 2, "empty"},
      {{{NULL, one, 1, "one point", EX_PLOT_BLUE, 0}}, 1, NULL},
      {{{xs, flat, 4, "flat", EX_PLOT_BLUE, 0}, {NULL, one, 1, NULL, EX_PLOT_RED, 1}}, 2, "flat"},
      {{{NULL, huge, 4, "huge", EX_PLOT_BLUE, 1}, {bigx, tiny, 4, "tiny", EX_PLOT_GREEN, 0}}, 2, "huge"},
      {{{xs, tiny, 4, "tiny", EX_PLOT_BLUE, 0}}, 1, "tiny values"},
      {{{xs, close, 4, "close", EX_PLOT_BLUE, 0}}, 1, "a range of 2e-15"},
      {{{NULL, mixed, 5, "isolated points", EX_PLOT_BLUE, 0}}, 1, "mixed"},
      {{{NULL, NULL, 0, NULL, 0, 0}}, 0, "no series at all"},
      {{{xs, flat, 4, "a legend entry far wider than the plot area itself, so it is left out entirely ...",
         EX_PLOT_BLUE, 0}},
       1,
       "A title much wider than the image, clipped at its edges: \xc3\xa9\xe2\x82\xac (non-ASCII shows as '?') "
       "and more text"},
  };
  char name[64];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    for (int k = 0; k < 2; ++k) {
      snprintf(name, sizeof name, "edge%zu_%d.png", i, k);
      unsigned char* px = plot_and_read(name, cases[i].s, cases[i].n, cases[i].title, k ? 800 : 320, k ? 480 : 200);
      free(px);
    }
  }
  /* the isolated points of "mixed" (3.0 and 4.0, between NaNs) are drawn as markers */
  unsigned char* px = plot_and_read("isolated.png", cases[6].s, 1, NULL, 640, 360);
  assert_true(count_colour(px, 640, 360, EX_PLOT_BLUE) >= 2 * 25 + 20 * 2); /* 2 markers, the legend's line */
  free(px);
  /* bad arguments */
  const ExSeries ok = {xs, flat, 4, "ok", EX_PLOT_BLUE, 0}, negative = {xs, flat, -1, "bad", EX_PLOT_BLUE, 0};
  const ExSeries no_y = {xs, NULL, 4, "bad", EX_PLOT_BLUE, 0};
  assert_int_equal(ex_plot(NULL, &ok, 1, "t", "x", "y", 640, 360), -1);
  assert_int_equal(ex_plot(nx_scratch_path("small.png"), &ok, 1, "t", "x", "y", 10, 10), -1);
  assert_int_equal(ex_plot(nx_scratch_path("neg.png"), &negative, 1, "t", "x", "y", 640, 360), -1);
  assert_int_equal(ex_plot(nx_scratch_path("noy.png"), &no_y, 1, "t", "x", "y", 640, 360), -1);
  assert_int_equal(ex_plot(nx_scratch_path("null.png"), NULL, 1, "t", "x", "y", 640, 360), -1);
  assert_int_equal(ex_plot(nx_scratch_path("no such dir/x.png"), &ok, 1, "t", "x", "y", 640, 360), -1);
}

static void test_plot_ticks(void** state) {
  (void)state;
  double t[64];
  char label[64];
  /* a loss from 3.7 to 6.3 in about 5 steps: 0.5 apart, labelled with one decimal */
  double step = ex_axis_step(3.7, 6.3, 5);
  assert_true(fabs(step - 0.5) < 1e-12);
  int n = ex_ticks(3.7, 6.3, step, t, 64);
  assert_int_equal(n, 5);
  assert_true(fabs(t[0] - 4.0) < 1e-12 && fabs(t[4] - 6.0) < 1e-12);
  ex_tick_label(label, sizeof label, t[1], step, 6.3);
  assert_string_equal(label, "4.5");
  /* steps 0..1500: 500 apart (1-2-5), integers */
  step = ex_axis_step(-30, 1530, 5);
  assert_true(fabs(step - 500) < 1e-9);
  n = ex_ticks(-30, 1530, step, t, 64);
  assert_int_equal(n, 4);
  ex_tick_label(label, sizeof label, t[3], step, 1530);
  assert_string_equal(label, "1500");
  /* 2-steps, and no "-0" */
  step = ex_axis_step(-0.9, 0.9, 6);
  assert_true(fabs(step - 0.2) < 1e-12 || fabs(step - 0.5) < 1e-12);
  n = ex_ticks(-0.9, 0.9, 0.2, t, 64);
  assert_int_equal(n, 9);
  ex_tick_label(label, sizeof label, t[4], 0.2, 0.9);
  assert_string_equal(label, "0.0");
  ex_tick_label(label, sizeof label, t[0], 0.2, 0.9);
  assert_string_equal(label, "-0.8");
  /* exponent form for tiny and huge values */
  ex_tick_label(label, sizeof label, 2e-7, 1e-7, 5e-7);
  assert_string_equal(label, "2e-07");
  ex_tick_label(label, sizeof label, 3e9, 1e9, 5e9);
  assert_string_equal(label, "3e+09");
  /* degenerate steps give no ticks */
  assert_int_equal(ex_ticks(0, 1, 0, t, 64), 0);
  assert_int_equal(ex_ticks(0, 1, NAN, t, 64), 0);
}

/* ---------------------------------------------------------------- gzip input */
static unsigned char* sample_bytes(size_t n) { /* text, a random stretch, a run of zeros */
  static const char* words[] = {"whale ", "Ahab ", "sea ", "the ", "Pequod ", "harpoon\n", "Ishmael, ", "white "};
  unsigned char* b = (unsigned char*)malloc(n);
  uint32_t r = 12345;
  for (size_t i = 0; i < n;) {
    r = r * 1664525u + 1013904223u;
    if (i > n / 2 && i < n / 2 + 70000) {
      b[i++] = (unsigned char)(r >> 24);
    } else if (i >= n / 2 + 70000 && i < n / 2 + 72000) {
      b[i++] = 0;
    } else {
      for (const char* w = words[(r >> 20) % 8]; *w && i < n; ++w) b[i++] = (unsigned char)*w;
    }
  }
  return b;
}

static void expect_file(const char* path, const unsigned char* want, size_t n) {
  size_t got_n = 0;
  unsigned char* got = ex_read_file(path, &got_n);
  assert_non_null(got);
  assert_int_equal(got_n, n);
  assert_memory_equal(got, want, n);
  free(got);
}

static void test_read_gz_odd_paths(void** state) {
  (void)state;
  const size_t n = 300000;
  unsigned char* data = sample_bytes(n);
  const char* names[] = {"it's a file.bin", "l'\xc3\xa9t\xc3\xa9 \"x\" $(echo pwned) `id` ;|&.bin", "tab\there.bin"};
  const char* levels[] = {"-1", "-9"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
    for (int l = 0; l < 2; ++l) {
      const char* plain = nx_scratch_path(names[i]);
      nx_write_file(plain, data, n);
      expect_file(plain, data, n); /* a plain file at the odd path */
      const char* args[] = {"-f", levels[l], "--", plain, NULL};
      int rc = run_gzip(args, NULL);
      if (rc == 127) skip();
      assert_int_equal(rc, 0);
      char gz[600];
      snprintf(gz, sizeof gz, "%s.gz", plain);
      expect_file(gz, data, n);
      unlink(gz);
    }
  }
  /* a tiny file: one fixed-Huffman block */
  const char* hello = nx_scratch_path("it's tiny.txt");
  nx_write_file(hello, "hello, hello, hello\n", 20);
  const char* args[] = {"-f", "-n", "--", hello, NULL};
  assert_int_equal(run_gzip(args, NULL), 0);
  char hello_gz[600];
  snprintf(hello_gz, sizeof hello_gz, "%s.gz", hello);
  expect_file(hello_gz, (const unsigned char*)"hello, hello, hello\n", 20);

  /* two members, then trailing zeros; corrupt, truncated and non-gzip files fail */
  const char* big = nx_scratch_path("big 'one'.bin");
  nx_write_file(big, data, n);
  const char* args9[] = {"-f", "-9", "--", big, NULL};
  assert_int_equal(run_gzip(args9, NULL), 0);
  char big_gz[600];
  snprintf(big_gz, sizeof big_gz, "%s.gz", big);
  size_t a_n = 0, b_n = 0;
  unsigned char *a = nx_read_file(big_gz, &a_n), *b = nx_read_file(hello_gz, &b_n);
  unsigned char* two = (unsigned char*)malloc(a_n + b_n + 16);
  memcpy(two, a, a_n), memcpy(two + a_n, b, b_n);
  nx_write_file(nx_scratch_path("two members.gz"), two, a_n + b_n);
  unsigned char* want = (unsigned char*)malloc(n + 20);
  memcpy(want, data, n), memcpy(want + n, "hello, hello, hello\n", 20);
  expect_file(nx_scratch_path("two members.gz"), want, n + 20);
  memset(two + a_n + b_n, 0, 16);
  nx_write_file(nx_scratch_path("padded.gz"), two, a_n + b_n + 16);
  expect_file(nx_scratch_path("padded.gz"), want, n + 20);
  size_t got_n = 0;
  two[a_n + b_n + 7] = 1; /* garbage after the zeros */
  nx_write_file(nx_scratch_path("garbage.gz"), two, a_n + b_n + 16);
  assert_null(ex_read_file(nx_scratch_path("garbage.gz"), &got_n));
  a[a_n - 6] ^= 1; /* the CRC */
  nx_write_file(nx_scratch_path("bad crc.gz"), a, a_n);
  assert_null(ex_read_file(nx_scratch_path("bad crc.gz"), &got_n));
  a[a_n - 6] ^= 1;
  a[a_n - 2] ^= 1; /* the length */
  nx_write_file(nx_scratch_path("bad size.gz"), a, a_n);
  assert_null(ex_read_file(nx_scratch_path("bad size.gz"), &got_n));
  a[a_n - 2] ^= 1;
  for (size_t cut = 1; cut < a_n; cut = cut * 3 + 1) { /* truncated anywhere */
    nx_write_file(nx_scratch_path("cut.gz"), a, a_n - cut);
    assert_null(ex_read_file(nx_scratch_path("cut.gz"), &got_n));
  }
  a[a_n / 2] ^= 0x5a; /* corrupt deflate data: an error or a CRC mismatch, never a crash */
  nx_write_file(nx_scratch_path("flipped.gz"), a, a_n);
  assert_null(ex_read_file(nx_scratch_path("flipped.gz"), &got_n));
  a[a_n / 2] ^= 0x5a;
  /* single-bit flips anywhere: the right bytes (a flip in the header's time or name) or NULL */
  uint32_t r = 99;
  for (int k = 0; k < 300; ++k) {
    r = r * 1664525u + 1013904223u;
    size_t at = k < 40 ? (size_t)k : (r >> 8) % a_n, out_n = 0;
    const char* why = NULL;
    a[at] ^= (unsigned char)(1u << (r >> 29));
    unsigned char* got = ex_gunzip(a, a_n, &out_n, &why);
    if (got) assert_true(out_n == n && !memcmp(got, data, n));
    else assert_non_null(why);
    free(got);
    a[at] ^= (unsigned char)(1u << (r >> 29));
  }
  /* random bytes as raw deflate data: an error or some output, never a crash */
  unsigned char junk[256];
  for (int k = 0; k < 2000; ++k) {
    for (size_t i = 0; i < sizeof junk; ++i) r = r * 1664525u + 1013904223u, junk[i] = (unsigned char)(r >> 24);
    unsigned char* out = NULL;
    size_t out_n = 0, cap = 0, used = 0;
    if (ex_inflate(junk, 1 + (size_t)k % sizeof junk, &used, &out, &out_n, &cap) == 0)
      assert_true(used <= 1 + (size_t)k % sizeof junk);
    free(out);
  }
  nx_write_file(nx_scratch_path("plain text.gz"), "not gzip at all, just text\n", 27);
  assert_null(ex_read_file(nx_scratch_path("plain text.gz"), &got_n));
  assert_null(ex_read_file(nx_scratch_path("missing.gz"), &got_n));
  nx_write_file(nx_scratch_path("empty.txt"), "", 0);
  assert_null(ex_read_file(nx_scratch_path("empty.txt"), &got_n)); /* empty: NULL, as before */
  free(a), free(b), free(two), free(want), free(data);
}

/* Hand-made deflate streams: a stored block, a stored block followed by an empty fixed block,
 * a bad stored length, a reserved block type; the bytes used stop at the stream's end. */
static void test_inflate_blocks(void** state) {
  (void)state;
  static const unsigned char stored[] = {0x01, 5, 0, 0xFA, 0xFF, 'h', 'e', 'l', 'l', 'o', 0xEE};
  static const unsigned char two[] = {0x00, 3, 0, 0xFC, 0xFF, 'a', 'b', 'c', 0x03, 0x00, 0xEE, 0xEE};
  static const unsigned char bad_len[] = {0x01, 5, 0, 0xFA, 0xFE, 'h', 'e', 'l', 'l', 'o'};
  static const unsigned char reserved[] = {0x07, 0, 0, 0};
  unsigned char* out = NULL;
  size_t n = 0, cap = 0, used = 0;
  assert_int_equal(ex_inflate(stored, sizeof stored, &used, &out, &n, &cap), 0);
  assert_int_equal(used, 10);
  assert_int_equal(n, 5);
  assert_memory_equal(out, "hello", 5);
  assert_int_equal(ex_inflate(two, sizeof two, &used, &out, &n, &cap), 0); /* appends */
  assert_int_equal(used, 10);
  assert_int_equal(n, 8);
  assert_memory_equal(out, "helloabc", 8);
  assert_int_equal(ex_inflate(bad_len, sizeof bad_len, &used, &out, &n, &cap), -1);
  assert_int_equal(ex_inflate(reserved, sizeof reserved, &used, &out, &n, &cap), -1);
  assert_int_equal(ex_inflate(stored, 7, &used, &out, &n, &cap), -1); /* truncated */
  free(out);
}

/* Debian's Fashion-MNIST (dataset-fashion-mnist), when installed: the same bytes as gzip -dc. */
static void test_read_gz_fashion_mnist(void** state) {
  (void)state;
  const char* files[] = {"/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz",
                         "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"};
  for (int i = 0; i < 2; ++i) {
    if (access(files[i], R_OK) != 0) skip();
    const char* args[] = {"-dc", "--", files[i], NULL};
    int rc = run_gzip(args, nx_scratch_path("mnist.raw"));
    if (rc == 127) skip();
    assert_int_equal(rc, 0);
    size_t n = 0;
    unsigned char* want = nx_read_file(nx_scratch_path("mnist.raw"), &n);
    assert_true(n == (i ? 16 + 10000 * 784 : 8 + 10000));
    expect_file(files[i], want, n);
    free(want);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_plot_png),          cmocka_unit_test(test_plot_true_x),
      cmocka_unit_test(test_plot_edge_cases),   cmocka_unit_test(test_plot_ticks),
      cmocka_unit_test(test_read_gz_odd_paths), cmocka_unit_test(test_inflate_blocks),
      cmocka_unit_test(test_read_gz_fashion_mnist),
  };
  return cmocka_run_group_tests(tests, nx_scratch_create, nx_scratch_remove);
}
