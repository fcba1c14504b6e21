/* The C examples' helpers (examples/c/example_util.h; issue 19).
 *
 * ex_read_file: .gz files compressed here with zlib (levels 0, 1 and 9: stored, fixed and dynamic
 * blocks; one and two members) at paths with quotes, $(...), backticks, tabs and non-ASCII bytes
 * come back byte for byte, as do plain files at those paths. Truncated files (cut at many
 * points), a wrong CRC or length, and non-gzip bytes under a .gz name give NULL and a message on
 * stderr naming the file; a byte changed anywhere gives NULL or, where gzip ignores the byte (the
 * header's time, the padding bits), the right bytes, and most changes give NULL. Missing and
 * empty files give NULL. Debian's Fashion-MNIST test files, when installed, hold the IDX headers
 * and 1000 images of each class (a property of the data set, not of the reader).
 *
 * ex_write_csv: tables parsed back by this file's own RFC 4180 reader: names with commas, quotes
 * and line breaks, NaN as an empty field, 10 significant digits, integers as integers; bad
 * arguments and an unwritable path give -1 and a message.
 *
 * ex_print_plot_command: the printed command, split into words by /bin/sh, gives back the title
 * and the paths, whatever characters they hold. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../examples/c/example_util.h"
#include "nx_test.h"

/* ---------------------------------------------------------------- helpers */
/* n bytes: English words, then a stretch of random bytes, then zeros (all three block kinds). */
static unsigned char* sample_bytes(size_t n, uint32_t seed) {
  static const char* words[] = {"whale ", "Ahab ", "sea ", "the ", "Pequod ", "harpoon\n", "Ishmael, ", "white "};
  unsigned char* b = (unsigned char*)malloc(n);
  uint32_t r = seed;
  for (size_t i = 0; i < n;) {
    r = r * 1664525u + 1013904223u;
    if (i > n / 2 && i < n / 2 + n / 5) {
      b[i++] = (unsigned char)(r >> 24);
    } else if (i >= n / 2 + n / 5 && i < n / 2 + n / 4) {
      b[i++] = 0;
    } else {
      for (const char* w = words[(r >> 20) % 8]; *w && i < n; ++w) b[i++] = (unsigned char)*w;
    }
  }
  return b;
}

/* data as one gzip member (zlib's deflate with a gzip wrapper), malloc'd. */
static unsigned char* gzip_bytes(const unsigned char* data, size_t n, int level, size_t* out_n) {
  z_stream z;
  memset(&z, 0, sizeof z);
  assert_int_equal(deflateInit2(&z, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  const size_t cap = deflateBound(&z, (uLong)n) + 64;
  unsigned char* out = (unsigned char*)malloc(cap);
  z.next_in = (Bytef*)data, z.avail_in = (uInt)n;
  z.next_out = out, z.avail_out = (uInt)cap;
  assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
  *out_n = z.total_out;
  assert_int_equal(deflateEnd(&z), Z_OK);
  return out;
}

/* Sends file descriptor fd (1 or 2) to a scratch file until catch_end; returns fd's old target. */
static int catch_begin(int fd) {
  fflush(fd == 1 ? stdout : stderr);
  const int saved = dup(fd), log = open(nx_scratch_path("caught.log"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  assert_true(saved >= 0 && log >= 0);
  assert_true(dup2(log, fd) >= 0);
  close(log);
  return saved;
}
/* Puts fd back; what was written to it meanwhile, NUL-terminated, in text (at most cap - 1 bytes). */
static void catch_end(int fd, int saved, char* text, size_t cap) {
  fflush(fd == 1 ? stdout : stderr);
  dup2(saved, fd);
  close(saved);
  FILE* f = fopen(nx_scratch_path("caught.log"), "rb");
  assert_non_null(f);
  text[fread(text, 1, cap - 1, f)] = 0;
  fclose(f);
}

/* Runs ex_read_file with stderr caught; what it wrote lands in msg. */
static unsigned char* read_catching_stderr(const char* path, size_t* n, char* msg, size_t msg_cap) {
  const int saved = catch_begin(2);
  unsigned char* got = ex_read_file(path, n);
  catch_end(2, saved, msg, msg_cap);
  return got;
}

static void expect_bytes(const char* path, const unsigned char* want, size_t n) {
  size_t got_n = 0;
  char msg[1024];
  unsigned char* got = read_catching_stderr(path, &got_n, msg, sizeof msg);
  if (!got) print_error("%s: NULL; stderr: %s\n", path, msg);
  assert_non_null(got);
  assert_int_equal(got_n, n);
  assert_memory_equal(got, want, n);
  assert_string_equal(msg, ""); /* nothing said about a good file */
  free(got);
}

/* NULL, and a message on stderr that names the file and holds `says`. */
static void expect_refused(const char* path, const char* says) {
  size_t got_n = 12345;
  char msg[2048];
  unsigned char* got = read_catching_stderr(path, &got_n, msg, sizeof msg);
  assert_null(got);
  assert_int_equal(got_n, 12345); /* untouched */
  if (!strstr(msg, path) || !strstr(msg, says)) print_error("message for %s: %s (expected '%s')\n", path, msg, says);
  assert_non_null(strstr(msg, path));
  assert_non_null(strstr(msg, says));
}

/* ---------------------------------------------------------------- gzip input through zlib */
static const char* const hostile_names[] = {
    "it's a file.bin",
    "l'\xc3\xa9t\xc3\xa9 \"x\" $(touch pwned) `touch pwned2` ;|&.bin",
    "tab\there and\nnewline.bin",
};

static void test_read_gz_hostile_paths(void** state) {
  (void)state;
  const size_t n = 300000;
  unsigned char* data = sample_bytes(n, 12345);
  const int levels[] = {0, 1, 9};
  char gz[600];
  for (size_t i = 0; i < sizeof hostile_names / sizeof hostile_names[0]; ++i) {
    char plain[600]; /* a copy: nx_scratch_path's buffers are reused */
    snprintf(plain, sizeof plain, "%s", nx_scratch_path(hostile_names[i]));
    nx_write_file(plain, data, n);
    expect_bytes(plain, data, n); /* a plain file at the odd path */
    for (int l = 0; l < 3; ++l) {
      size_t zn = 0;
      unsigned char* z = gzip_bytes(data, n, levels[l], &zn);
      assert_true(levels[l] == 0 || zn < n); /* compressed, so the reader really inflated */
      snprintf(gz, sizeof gz, "%s.gz", plain);
      nx_write_file(gz, z, zn);
      expect_bytes(gz, data, n);
      free(z);
    }
  }
  /* no shell ran: the $(...) and backticks made no file */
  assert_int_equal(access(nx_scratch_path("pwned"), F_OK), -1);
  assert_int_equal(access("pwned", F_OK), -1);
  assert_int_equal(access("pwned2", F_OK), -1);

  /* two members, as `cat a.gz b.gz` makes: both parts, in order */
  unsigned char* tail = sample_bytes(5000, 777);
  size_t an = 0, bn = 0;
  unsigned char *a = gzip_bytes(data, n, 6, &an), *b = gzip_bytes(tail, 5000, 9, &bn);
  unsigned char* two = (unsigned char*)malloc(an + bn + 16);
  memcpy(two, a, an), memcpy(two + an, b, bn);
  nx_write_file(nx_scratch_path("two members.gz"), two, an + bn);
  unsigned char* want = (unsigned char*)malloc(n + 5000);
  memcpy(want, data, n), memcpy(want + n, tail, 5000);
  expect_bytes(nx_scratch_path("two members.gz"), want, n + 5000);
  /* bytes after the last member that are not another member are ignored, as gzip -d does */
  memcpy(two + an + bn, "not gzip at all!", 16);
  nx_write_file(nx_scratch_path("trailing.gz"), two, an + bn + 16);
  expect_bytes(nx_scratch_path("trailing.gz"), want, n + 5000);
  free(a), free(b), free(two), free(want), free(tail), free(data);
}

static void test_read_gz_refused(void** state) {
  (void)state;
  const size_t n = 200000;
  unsigned char* data = sample_bytes(n, 4242);
  size_t zn = 0;
  unsigned char* z = gzip_bytes(data, n, 9, &zn);
  char path[600]; /* a copy: nx_scratch_path's buffers are reused */
  snprintf(path, sizeof path, "%s", nx_scratch_path("l'\xc3\xa9t\xc3\xa9 $(x).gz"));

  /* truncated anywhere: in the header, the deflate data, the trailer */
  for (size_t keep = 1; keep < zn; keep = keep < 32 ? keep + 1 : keep * 5 / 4) {
    nx_write_file(path, z, keep);
    expect_refused(path, keep < 2 ? "not a gzip file" : "truncated");
  }
  nx_write_file(path, z, zn - 1);
  expect_refused(path, "truncated");

  /* the CRC-32 and the length of the trailer */
  z[zn - 6] ^= 0x10;
  nx_write_file(path, z, zn);
  expect_refused(path, "corrupt");
  z[zn - 6] ^= 0x10;
  z[zn - 2] ^= 0x01;
  nx_write_file(path, z, zn);
  expect_refused(path, "corrupt");
  z[zn - 2] ^= 0x01;
  nx_write_file(path, z, zn);
  expect_bytes(path, data, n); /* restored: fine again */

  /* one byte changed anywhere: NULL, or the right bytes where gzip itself ignores the byte;
   * past the 10-byte header, almost always NULL */
  uint32_t r = 99;
  int refused = 0, body_changes = 0;
  for (int k = 0; k < 150; ++k) {
    r = r * 1664525u + 1013904223u;
    const size_t at = k < 10 ? (size_t)k : 10 + (r >> 8) % (zn - 10);
    const unsigned char flip = (unsigned char)(1 + (r >> 24) % 255);
    z[at] ^= flip;
    nx_write_file(path, z, zn);
    size_t got_n = 0;
    char msg[2048];
    unsigned char* got = read_catching_stderr(path, &got_n, msg, sizeof msg);
    if (got) {
      assert_int_equal(got_n, n);
      assert_memory_equal(got, data, n);
    } else {
      assert_non_null(strstr(msg, path));
    }
    body_changes += at >= 10;
    refused += at >= 10 && !got;
    free(got);
    z[at] ^= flip;
  }
  print_message("changed bytes past the header: %d of %d refused\n", refused, body_changes);
  assert_true(refused >= body_changes * 9 / 10);

  /* not gzip at all, under a .gz name: zlib would pass it through; the reader refuses */
  nx_write_file(path, "plain text, no gzip magic\n", 26);
  expect_refused(path, "not a gzip file");
  /* the gzip magic, then nonsense */
  nx_write_file(path, "\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 20);
  expect_refused(path, "corrupt");

  /* missing and empty files: NULL (the examples then say they cannot read the file) */
  size_t got_n = 0;
  assert_null(ex_read_file(nx_scratch_path("missing.gz"), &got_n));
  assert_null(ex_read_file(nx_scratch_path("missing.txt"), &got_n));
  nx_write_file(nx_scratch_path("empty.txt"), "", 0);
  assert_null(ex_read_file(nx_scratch_path("empty.txt"), &got_n));
  size_t en = 0;
  unsigned char* empty_gz = gzip_bytes((const unsigned char*)"", 0, 6, &en);
  nx_write_file(nx_scratch_path("empty.gz"), empty_gz, en);
  assert_null(ex_read_file(nx_scratch_path("empty.gz"), &got_n)); /* a valid gzip of nothing: empty */
  free(empty_gz), free(z), free(data);
}

static uint32_t be32(const unsigned char* p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Debian's Fashion-MNIST test files (dataset-fashion-mnist), when installed. */
static void test_read_gz_fashion_mnist(void** state) {
  (void)state;
  const char* labels_path = "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz";
  const char* images_path = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";
  if (access(labels_path, R_OK) != 0 || access(images_path, R_OK) != 0) skip();
  size_t n = 0;
  unsigned char* labels = ex_read_file(labels_path, &n);
  assert_non_null(labels);
  assert_int_equal(n, 8 + 10000);
  assert_int_equal(be32(labels), 0x801);
  assert_int_equal(be32(labels + 4), 10000);
  int per_class[10] = {0};
  for (size_t i = 8; i < n; ++i) {
    assert_true(labels[i] < 10);
    per_class[labels[i]]++;
  }
  for (int c = 0; c < 10; ++c) assert_int_equal(per_class[c], 1000);
  unsigned char* images = ex_read_file(images_path, &n);
  assert_non_null(images);
  assert_int_equal(n, 16 + 10000 * 784);
  assert_int_equal(be32(images), 0x803);
  assert_int_equal(be32(images + 4), 10000);
  assert_int_equal(be32(images + 8), 28);
  assert_int_equal(be32(images + 12), 28);
  free(labels), free(images);
}

/* ---------------------------------------------------------------- CSV output */
/* An RFC 4180 reader: rows of fields (malloc'd strings), quotes undone. */
typedef struct {
  char* fields[64][16];
  int nfields[64];
  int nrows;
} Table;

static void csv_parse(const char* text, Table* t) {
  memset(t, 0, sizeof *t);
  char field[256];
  size_t len = 0;
  int quoted = 0, row = 0, col = 0, any = 0;
  for (const char* p = text;; ++p) {
    const char c = *p;
    if (quoted) {
      assert_true(c != 0); /* an unclosed quote */
      if (c == '"' && p[1] == '"') field[len++] = '"', ++p;
      else if (c == '"') quoted = 0;
      else field[len++] = c;
    } else if (c == '"') {
      assert_int_equal(len, 0); /* a quote opens a field, or it must be quoted itself */
      quoted = 1, any = 1;
    } else if (c == ',' || c == '\n' || c == 0) {
      if (c == 0 && !any && col == 0) break; /* the file ended with its last line break */
      assert_true(row < 64 && col < 16 && len < sizeof field);
      field[len] = 0;
      t->fields[row][col++] = strdup(field);
      len = 0, any = 1;
      if (c != ',') t->nfields[row++] = col, col = 0, any = 0;
      if (c == 0) break;
    } else {
      assert_true(c != '\r');
      field[len++] = c, any = 1;
    }
    assert_true(len < sizeof field);
  }
  t->nrows = row;
}
static void csv_free(Table* t) {
  for (int r = 0; r < t->nrows; ++r)
    for (int c = 0; c < t->nfields[r]; ++c) free(t->fields[r][c]);
}

static Table* read_csv(const char* path) {
  size_t n = 0;
  unsigned char* text = nx_read_file(path, &n);
  text[n] = 0;
  assert_true(n > 0 && text[n - 1] == '\n'); /* every row ends with a line break */
  Table* t = (Table*)malloc(sizeof(Table));
  csv_parse((const char*)text, t);
  free(text);
  return t;
}

static void test_write_csv(void** state) {
  (void)state;
  /* a loss table: step, two series, NaN where a series was not measured */
  enum { ROWS = 40 };
  double v[ROWS * 3];
  uint32_t r = 5;
  for (int i = 0; i < ROWS; ++i) {
    r = r * 1664525u + 1013904223u;
    v[3 * i] = i;
    v[3 * i + 1] = i + 1 < ROWS ? 6.0 * exp(-i / 9.0) + (r >> 8) * 1e-9 : NAN;
    v[3 * i + 2] = i % 10 == 0 ? -((r >> 4) / 3.0) * pow(10.0, (double)(i % 7) * 40 - 150) : NAN;
  }
  v[3 * 5 + 1] = INFINITY; /* a diverged loss stays visible */
  const char* const cols[3] = {"step", "train_loss", "val_loss"};
  const char* path = nx_scratch_path("loss 'curve'.csv");
  assert_int_equal(ex_write_csv(path, NULL, NULL, cols, 3, v, ROWS), 0);
  Table* t = read_csv(path);
  assert_int_equal(t->nrows, ROWS + 1);
  for (int c = 0; c < 3; ++c) assert_string_equal(t->fields[0][c], cols[c]);
  for (int i = 0; i < ROWS; ++i) {
    assert_int_equal(t->nfields[i + 1], 3);
    char want_step[16];
    snprintf(want_step, sizeof want_step, "%d", i); /* integers as integers */
    assert_string_equal(t->fields[i + 1][0], want_step);
    for (int c = 1; c < 3; ++c) {
      const char* f = t->fields[i + 1][c];
      const double want = v[3 * i + c];
      if (isnan(want)) {
        assert_string_equal(f, "");
        continue;
      }
      char* end;
      const double got = strtod(f, &end);
      assert_true(*f && *end == 0);
      if (isinf(want)) assert_true(got == want);
      else if (fabs(got - want) > 6e-10 * fabs(want)) fail_msg("row %d col %d: %s for %.17g", i, c, f, want);
    }
  }
  csv_free(t), free(t);

  /* a confusion matrix: row names, names that need quoting */
  const char* const names[4] = {"T-shirt/top", "a, b", "say \"hi\"", "two\nlines"};
  double counts[16];
  for (int i = 0; i < 16; ++i) counts[i] = i % 5 == 0 ? 1000 - i : i * 7;
  path = nx_scratch_path("confusion.csv");
  assert_int_equal(ex_write_csv(path, "true_class", names, names, 4, counts, 4), 0);
  t = read_csv(path);
  assert_int_equal(t->nrows, 5);
  assert_string_equal(t->fields[0][0], "true_class");
  for (int i = 0; i < 4; ++i) {
    assert_int_equal(t->nfields[i + 1], 5);
    assert_string_equal(t->fields[0][i + 1], names[i]);
    assert_string_equal(t->fields[i + 1][0], names[i]);
    for (int j = 0; j < 4; ++j) {
      char want[32];
      snprintf(want, sizeof want, "%d", (int)counts[i * 4 + j]);
      assert_string_equal(t->fields[i + 1][j + 1], want);
    }
  }
  csv_free(t), free(t);

  /* a header only */
  assert_int_equal(ex_write_csv(nx_scratch_path("empty.csv"), NULL, NULL, cols, 3, NULL, 0), 0);
  t = read_csv(nx_scratch_path("empty.csv"));
  assert_int_equal(t->nrows, 1);
  csv_free(t), free(t);

  /* errors: -1, nothing written */
  assert_int_equal(ex_write_csv(NULL, NULL, NULL, cols, 3, v, 1), -1);
  assert_int_equal(ex_write_csv(nx_scratch_path("bad1.csv"), NULL, NULL, cols, 0, v, 1), -1);
  assert_int_equal(ex_write_csv(nx_scratch_path("bad2.csv"), NULL, NULL, cols, 3, v, -1), -1);
  assert_int_equal(ex_write_csv(nx_scratch_path("bad3.csv"), NULL, NULL, cols, 3, NULL, 2), -1);
  assert_int_equal(ex_write_csv(nx_scratch_path("bad4.csv"), NULL, names, names, 4, counts, 4), -1);
  assert_int_equal(ex_write_csv(nx_scratch_path("bad5.csv"), NULL, NULL, NULL, 3, v, 1), -1);
  for (int k = 1; k <= 5; ++k) {
    char name[16];
    snprintf(name, sizeof name, "bad%d.csv", k);
    assert_int_equal(access(nx_scratch_path(name), F_OK), -1);
  }
  assert_int_equal(ex_write_csv(nx_scratch_path("no such dir/x.csv"), NULL, NULL, cols, 3, v, 1), -1);
  if (access("/dev/full", W_OK) == 0) /* a full disk: seen at the flush */
    assert_int_equal(ex_write_csv("/dev/full", NULL, NULL, cols, 3, v, ROWS), -1);
}

/* The printed command, split into words by /bin/sh (printf prints each word and a NUL). */
static void test_plot_command_quoting(void** state) {
  (void)state;
  const char* title = "GPT small on it's \"$(echo x)\" `id` \t\xc3\xa9";
  const char* const paths[3] = {"out/loss_curve.csv", "o'dir/$(touch pwned)/a b.csv", "-x;|&*?[a].csv"};
  char text[2048];
  const int saved = catch_begin(1);
  ex_print_plot_command(title, paths, 3);
  catch_end(1, saved, text, sizeof text);
  const char* prefix = "plots: /usr/bin/python3 scripts/plot.py ";
  assert_int_equal(strncmp(text, prefix, strlen(prefix)), 0);
  char* line_end = strchr(text, '\n');
  assert_non_null(line_end);
  *line_end = 0;
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "printf '%%s\\0' %s", text + strlen(prefix));
  FILE* sh = popen(cmd, "r");
  assert_non_null(sh);
  char words[2048];
  const size_t got = fread(words, 1, sizeof words, sh);
  assert_int_equal(pclose(sh), 0);
  const char* want[5] = {"--title", title, paths[0], paths[1], paths[2]};
  size_t pos = 0;
  for (int i = 0; i < 5; ++i) {
    assert_true(pos < got);
    assert_string_equal(words + pos, want[i]);
    pos += strlen(want[i]) + 1;
  }
  assert_int_equal(pos, got);
  assert_int_equal(access("o'dir", F_OK), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_read_gz_hostile_paths), cmocka_unit_test(test_read_gz_refused),
      cmocka_unit_test(test_read_gz_fashion_mnist), cmocka_unit_test(test_write_csv),
      cmocka_unit_test(test_plot_command_quoting),
  };
  return cmocka_run_group_tests(tests, nx_scratch_create, nx_scratch_remove);
}
