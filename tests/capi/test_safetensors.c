/* The C contract of nexus.h, part 5: SafeTensors I/O. Round trips of every dtype, the file
 * layout written, metadata, lookups, and malformed files (each must give NX_ERR_IO, a message
 * naming nx_safetensors_open and the reason, and a NULL handle). */
#include <unistd.h>

#include "nx_test.h"

static char g_path[256];
static const char* tmp_path(const char* tag) {
  snprintf(g_path, sizeof g_path, "nx_capi_st_%ld_%s.safetensors", (long)getpid(), tag);
  return g_path;
}

static void write_bytes(const char* path, const void* data, size_t n) {
  FILE* f = fopen(path, "wb");
  assert_non_null(f);
  if (n) assert_int_equal(fwrite(data, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}
/* A file: 8-byte little-endian header_len (which may lie), the header text, then data. */
static void write_st_len(const char* path, uint64_t header_len, const char* header, const void* data, size_t ndata) {
  size_t nh = strlen(header);
  unsigned char* buf = malloc(8 + nh + ndata + 1);
  for (int i = 0; i < 8; ++i) buf[i] = (unsigned char)(header_len >> (8 * i));
  memcpy(buf + 8, header, nh);
  if (ndata) memcpy(buf + 8 + nh, data, ndata);
  write_bytes(path, buf, 8 + nh + ndata);
  free(buf);
}
static void write_st(const char* path, const char* header, const void* data, size_t ndata) {
  write_st_len(path, strlen(header), header, data, ndata);
}

/* ---------------------------------------------------------------- round trip */
struct item {
  const char* name;
  nx_dtype dt;
  int64_t shape[3];
  size_t ndim;
};

static void test_round_trip_every_dtype(void** state) {
  (void)state;
  rng_seed(300);
  /* names given out of order: the file stores them sorted */
  const struct item items[] = {
      {"w_f32", NX_F32, {2, 3}, 2},   {"b_f64", NX_F64, {4}, 1},     {"h_f16", NX_F16, {3, 2}, 2},
      {"g_bf16", NX_BF16, {5}, 1},    {"i_i32", NX_I32, {2, 2, 2}, 3}, {"k_i64", NX_I64, {0}, 0},
      {"m_bool", NX_BOOL, {7}, 1},    {"e_empty", NX_F32, {0, 3}, 2},
  };
  enum { NI = sizeof items / sizeof items[0] };
  nx_tensor ts[NI + 1];
  unsigned char* raw[NI + 1];
  size_t nbytes[NI + 1];
  const char* names[NI + 1];
  for (int i = 0; i < NI; ++i) {
    size_t es = nx_dtype_size(items[i].dt);
    int64_t n = numel_of(items[i].shape, items[i].ndim);
    nbytes[i] = (size_t)n * es;
    raw[i] = malloc(nbytes[i] + 1);
    for (size_t b = 0; b < nbytes[i]; ++b) raw[i][b] = (unsigned char)rng_u64();
    if (items[i].dt == NX_BOOL)
      for (int64_t k = 0; k < n; ++k) raw[i][k] &= 1;
    ts[i] = make_tensor(raw[i], items[i].shape, items[i].ndim, items[i].dt);
    names[i] = items[i].name;
  }
  /* plus a non-contiguous view: stored in the view's row-major order */
  double base[12];
  const int64_t s34[2] = {3, 4};
  nx_tensor b34 = rand_tensor(base, s34, 2, NX_F64, -1, 1);
  ts[NI] = t_transpose(b34, 0, 1);
  nx_tensor_free(b34);
  names[NI] = "t_view";
  nbytes[NI] = 12 * 8;
  raw[NI] = malloc(nbytes[NI]);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 3; ++c) ((double*)raw[NI])[r * 3 + c] = base[c * 4 + r];

  const char* path = tmp_path("roundtrip");
  NX_OK_(nx_safetensors_save(path, names, ts, NI + 1));

  /* the layout: LE header length, a JSON object padded so the data is 8-byte aligned, then the
   * tensors back to back in name order */
  size_t fsize = 0;
  unsigned char* file = nx_read_file(path, &fsize);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | file[i];
  assert_true(8 + hlen <= fsize);
  assert_int_equal((8 + hlen) % 8, 0);
  assert_int_equal(file[8], '{');
  char* header = malloc(hlen + 1);
  memcpy(header, file + 8, hlen);
  header[hlen] = 0;
  const char* needles[] = {"\"dtype\":\"F32\"", "\"dtype\":\"F64\"", "\"dtype\":\"F16\"", "\"dtype\":\"BF16\"",
                           "\"dtype\":\"I32\"", "\"dtype\":\"I64\"", "\"dtype\":\"BOOL\"", "\"t_view\"",
                           "\"shape\":[4,3]", "\"shape\":[]", "\"shape\":[0,3]", "data_offsets"};
  for (size_t i = 0; i < sizeof needles / sizeof needles[0]; ++i)
    if (!strstr(header, needles[i])) fail_msg("header lacks %s: %s", needles[i], header);
  size_t total = 0;
  for (int i = 0; i <= NI; ++i) total += nbytes[i];
  assert_int_equal(fsize, 8 + hlen + total);
  free(header);

  nx_safetensors st = NULL;
  NX_OK_(nx_safetensors_open(&st, path));
  size_t count = 0;
  NX_OK_(nx_safetensors_count(st, &count));
  assert_int_equal(count, NI + 1);
  /* file order is sorted by name, and the data section follows it */
  const char* prev = "";
  size_t at = 8 + hlen;
  for (size_t i = 0; i < count; ++i) {
    const char* name = NULL;
    NX_OK_(nx_safetensors_name(st, i, &name));
    assert_true(strcmp(prev, name) < 0);
    prev = name;
    int k = -1;
    for (int j = 0; j <= NI; ++j)
      if (!strcmp(names[j], name)) k = j;
    assert_true(k >= 0);
    assert_memory_equal(file + at, raw[k], nbytes[k]);
    at += nbytes[k];
  }
  free(file);
  /* every tensor comes back with its dtype, shape and bytes */
  for (int i = 0; i <= NI; ++i) {
    nx_tensor t = NULL;
    NX_OK_(nx_safetensors_get(&t, st, names[i], CPU, NULL));
    nx_dtype dt = i < NI ? items[i].dt : NX_F64;
    assert_int_equal(tensor_dtype(t), dt);
    size_t nd = 99;
    int64_t shape[4];
    NX_OK_(nx_tensor_ndim(t, &nd));
    NX_OK_(nx_tensor_shape(t, shape, 4));
    if (i < NI) {
      assert_int_equal(nd, items[i].ndim);
      for (size_t d = 0; d < nd; ++d) assert_int_equal(shape[d], items[i].shape[d]);
    } else {
      assert_int_equal(nd, 2);
      assert_true(shape[0] == 4 && shape[1] == 3);
    }
    unsigned char* back = malloc(nbytes[i] + 1);
    NX_OK_(nx_tensor_copy_to_host(t, back, nbytes[i], NULL));
    assert_memory_equal(back, raw[i], nbytes[i]);
    free(back);
    /* a copy: writing into it does not change the file's next read */
    if (nbytes[i]) {
      void* p = NULL;
      NX_OK_(nx_tensor_data_ptr(t, &p));
      memset(p, 0, nbytes[i]);
      nx_tensor t2 = NULL;
      NX_OK_(nx_safetensors_get(&t2, st, names[i], CPU, NULL));
      unsigned char* again = malloc(nbytes[i]);
      NX_OK_(nx_tensor_copy_to_host(t2, again, nbytes[i], NULL));
      assert_memory_equal(again, raw[i], nbytes[i]);
      free(again);
      nx_tensor_free(t2);
    }
    nx_tensor_free(t);
  }
  /* no metadata in a file written by nx_safetensors_save */
  const char* v = SENTINEL;
  NX_OK_(nx_safetensors_metadata(st, "format", &v));
  assert_null(v);
  /* lookups that fail */
  nx_tensor missing = SENTINEL;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_safetensors_get(&missing, st, "nope", CPU, NULL), "nx_safetensors_get",
             "\"nope\"");
  assert_null(missing);
  const char* nm = NULL;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_safetensors_name(st, NI + 1, &nm), "nx_safetensors_name", "9");
  if (nx_cuda_device_count() == 0) {
    const nx_device cuda = {NX_CUDA, 0};
    missing = SENTINEL;
    EXPECT_ERR(NX_ERR_DEVICE, nx_safetensors_get(&missing, st, "w_f32", cuda, NULL), "nx_safetensors_get", "cuda");
    assert_null(missing);
  }
  nx_safetensors_free(st);
  /* the file is read fully at open: it may be removed while the handle lives */
  NX_OK_(nx_safetensors_open(&st, path));
  assert_int_equal(remove(path), 0);
  nx_tensor t = NULL;
  NX_OK_(nx_safetensors_get(&t, st, "w_f32", CPU, NULL));
  nx_tensor_free(t);
  nx_safetensors_free(st);
  for (int i = 0; i <= NI; ++i) {
    nx_tensor_free(ts[i]);
    free(raw[i]);
  }
}

static void test_save_errors(void** state) {
  (void)state;
  const int64_t s2[1] = {2};
  nx_tensor a = NULL, b = NULL;
  NX_OK_(nx_tensor_zeros(&a, s2, 1, NX_F32, CPU, NULL));
  NX_OK_(nx_tensor_ones(&b, s2, 1, NX_F32, CPU, NULL));
  nx_tensor ts[2] = {a, b};
  const char* dup[2] = {"x", "x"};
  const char* path = tmp_path("save_errors");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_safetensors_save(path, dup, ts, 2), "nx_safetensors_save", "\"x\"", "twice");
  const char* withnull[2] = {"x", NULL};
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_safetensors_save(path, withnull, ts, 2), "nx_safetensors_save", "names[1]");
  const char* ok[2] = {"x", "y"};
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_safetensors_save(NULL, ok, ts, 2), "nx_safetensors_save", "path");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_safetensors_save(path, NULL, ts, 2), "nx_safetensors_save", "NULL");
  EXPECT_ERR(NX_ERR_IO, nx_safetensors_save("/nonexistent-dir/sub/x.safetensors", ok, ts, 2), "nx_safetensors_save",
             "/nonexistent-dir/sub/x.safetensors");
  /* zero tensors is a valid (empty) file */
  NX_OK_(nx_safetensors_save(path, NULL, NULL, 0));
  nx_safetensors st = NULL;
  NX_OK_(nx_safetensors_open(&st, path));
  size_t n = 99;
  NX_OK_(nx_safetensors_count(st, &n));
  assert_int_equal(n, 0);
  nx_safetensors_free(st);
  remove(path);
  nx_tensor_free(a);
  nx_tensor_free(b);
}

/* ---------------------------------------------------------------- files written by hand */
static void test_metadata_and_foreign_files(void** state) {
  (void)state;
  const char* path = tmp_path("metadata");
  /* metadata, entries out of offset order, escapes, whitespace, space padding (as the
   * reference implementation writes) */
  const char* header =
      "{ \"__metadata__\" : {\"format\":\"pt\", \"note\":\"h\\u00e9llo \\\"q\\\"\\n\"},\n"
      "  \"z\" : {\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[8,16]},\n"
      "  \"caf\\u00e9\": {\"shape\":[2], \"data_offsets\":[0,8], \"dtype\":\"F32\"} }      ";
  unsigned char data[16];
  const float f[2] = {1.5f, -2.25f};
  const int64_t z = -77;
  memcpy(data, f, 8);
  memcpy(data + 8, &z, 8);
  write_st(path, header, data, sizeof data);
  nx_safetensors st = NULL;
  NX_OK_(nx_safetensors_open(&st, path));
  const char* v = NULL;
  NX_OK_(nx_safetensors_metadata(st, "format", &v));
  assert_string_equal(v, "pt");
  NX_OK_(nx_safetensors_metadata(st, "note", &v));
  assert_string_equal(v, "h\xc3\xa9llo \"q\"\n");
  v = SENTINEL;
  NX_OK_(nx_safetensors_metadata(st, "absent", &v));
  assert_null(v);
  size_t n = 0;
  NX_OK_(nx_safetensors_count(st, &n));
  assert_int_equal(n, 2); /* __metadata__ is not a tensor */
  nx_tensor t = NULL;
  NX_OK_(nx_safetensors_get(&t, st, "caf\xc3\xa9", CPU, NULL));
  const double wf[2] = {1.5, -2.25};
  assert_int_equal(tensor_dtype(t), NX_F32);
  assert_tensor_close(t, wf, 2, 0, 0);
  nx_tensor_free(t);
  NX_OK_(nx_safetensors_get(&t, st, "z", CPU, NULL));
  assert_int_equal(tensor_dtype(t), NX_I64);
  assert_true(scalar_of(t) == -77);
  nx_tensor_free(t);
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_safetensors_metadata(st, NULL, &v), "nx_safetensors_metadata", "key");
  nx_safetensors_free(st);
  /* an empty header object: no tensors */
  write_st(path, "{}", NULL, 0);
  NX_OK_(nx_safetensors_open(&st, path));
  NX_OK_(nx_safetensors_count(st, &n));
  assert_int_equal(n, 0);
  nx_safetensors_free(st);
  remove(path);
}

/* ---------------------------------------------------------------- malformed files */
static void expect_corrupt(const char* path, const char* reason) {
  nx_safetensors st = SENTINEL;
  nx_status s = nx_safetensors_open(&st, path);
  if (s != NX_ERR_IO)
    fail_msg("%s: nx_safetensors_open returned %s, expected NX_ERR_IO (message: %s)", reason, nx_status_string(s),
             nx_last_error_message());
  if (st) fail_msg("%s: the handle is not NULL after a failed open", reason);
  const char* msg = nx_last_error_message();
  if (!strstr(msg, "nx_safetensors_open")) fail_msg("%s: message does not name the function: %s", reason, msg);
  if (!strstr(msg, reason)) fail_msg("message \"%s\" does not mention \"%s\"", msg, reason);
}

static const char* k_two = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                           "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}";

static void test_corrupt_truncated(void** state) {
  (void)state;
  const char* path = tmp_path("truncated");
  const int64_t s4[1] = {4};
  nx_tensor a = NULL;
  NX_OK_(nx_tensor_ones(&a, s4, 1, NX_F64, CPU, NULL));
  const char* names[1] = {"a"};
  NX_OK_(nx_safetensors_save(path, names, &a, 1));
  nx_tensor_free(a);
  size_t n = 0;
  unsigned char* good = nx_read_file(path, &n);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | good[i];
  /* the data section is 3 bytes short */
  write_bytes(path, good, n - 3);
  expect_corrupt(path, "past the");
  /* cut inside the header */
  write_bytes(path, good, 8 + hlen / 2);
  expect_corrupt(path, "header length");
  /* shorter than the length prefix itself */
  write_bytes(path, good, 5);
  expect_corrupt(path, "5 bytes");
  write_bytes(path, good, 0);
  expect_corrupt(path, "0 bytes");
  /* one byte too many: trailing data owned by no tensor */
  unsigned char* longer = malloc(n + 1);
  memcpy(longer, good, n);
  longer[n] = 0;
  write_bytes(path, longer, n + 1);
  expect_corrupt(path, "trailing");
  free(longer);
  /* the intact file still opens */
  write_bytes(path, good, n);
  nx_safetensors st = NULL;
  NX_OK_(nx_safetensors_open(&st, path));
  nx_safetensors_free(st);
  free(good);
  remove(path);
  /* a file that does not exist */
  nx_safetensors none = SENTINEL;
  EXPECT_ERR(NX_ERR_IO, nx_safetensors_open(&none, "nx_capi_no_such_file.safetensors"), "nx_safetensors_open",
             "nx_capi_no_such_file.safetensors");
  assert_null(none);
}

static void test_corrupt_header_length(void** state) {
  (void)state;
  const char* path = tmp_path("hlen");
  unsigned char data[16] = {0};
  /* past the end of the file */
  write_st_len(path, 1000, k_two, data, 16);
  expect_corrupt(path, "header length 1000");
  write_st_len(path, strlen(k_two) + 17, k_two, data, 16);
  expect_corrupt(path, "past the end");
  /* absurdly large (must not try to allocate it) */
  write_st_len(path, (uint64_t)1 << 62, k_two, data, 16);
  expect_corrupt(path, "exceeds");
  write_st_len(path, UINT64_MAX, k_two, data, 16);
  expect_corrupt(path, "exceeds");
  /* zero: an empty header is not a JSON object */
  write_st_len(path, 0, "", data, 16);
  expect_corrupt(path, "{");
  /* shorter than the header: the JSON text is cut */
  write_st_len(path, strlen(k_two) - 5, k_two, data, 16);
  expect_corrupt(path, "JSON");
  remove(path);
}

static void test_corrupt_offsets(void** state) {
  (void)state;
  const char* path = tmp_path("offsets");
  unsigned char data[24] = {0};
  write_st(path, k_two, data, 16);
  nx_safetensors st = NULL;
  NX_OK_(nx_safetensors_open(&st, path)); /* the reference layout is fine */
  nx_safetensors_free(st);
  /* overlapping: b starts inside a */
  write_st(path,
           "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
           "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
           data, 12);
  expect_corrupt(path, "overlaps");
  /* two tensors on the same bytes */
  write_st(path,
           "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
           "\"b\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
           data, 8);
  expect_corrupt(path, "overlaps");
  /* a hole between a and b */
  write_st(path,
           "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
           "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}",
           data, 20);
  expect_corrupt(path, "hole");
  /* a hole at the start */
  write_st(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", data, 12);
  expect_corrupt(path, "hole");
  /* begin after end */
  write_st(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", data, 8);
  expect_corrupt(path, "after end");
  /* end past the data section */
  write_st(path, "{\"a\":{\"dtype\":\"F64\",\"shape\":[3],\"data_offsets\":[0,24]}}", data, 16);
  expect_corrupt(path, "past the 16-byte data section");
  /* offsets that are not non-negative integers */
  write_st(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}", data, 8);
  expect_corrupt(path, "data_offsets");
  write_st(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8.5]}}", data, 8);
  expect_corrupt(path, "data_offsets");
  write_st(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", data, 8);
  expect_corrupt(path, "data_offsets");
  remove(path);
}

static void test_corrupt_entries(void** state) {
  (void)state;
  const char* path = tmp_path("entries");
  unsigned char data[16] = {0};
  /* shape times dtype size differs from the byte length */
  write_st(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", data, 8);
  expect_corrupt(path, "needs 12");
  write_st(path, "{\"a\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", data, 16);
  expect_corrupt(path, "needs 8");
  /* dtype strings this engine does not know, or in the wrong case */
  write_st(path, "{\"a\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 8);
  expect_corrupt(path, "Q4");
  write_st(path, "{\"a\":{\"dtype\":\"f32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 8);
  expect_corrupt(path, "f32");
  write_st(path, "{\"a\":{\"dtype\":7,\"shape\":[2],\"data_offsets\":[0,8]}}", data, 8);
  expect_corrupt(path, "dtype");
  /* bad shapes */
  write_st(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", data, 8);
  expect_corrupt(path, "shape");
  write_st(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,8]}}", data, 8);
  expect_corrupt(path, "shape");
  write_st(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", data, 8);
  expect_corrupt(path, "shape");
  /* a huge shape whose byte count overflows */
  write_st(path, "{\"a\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,8]}}", data, 8);
  expect_corrupt(path, "\"a\"");
  /* missing or unknown fields, entries that are not objects */
  write_st(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", data, 8);
  expect_corrupt(path, "data_offsets");
  write_st(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"extra\":1}}", data, 8);
  expect_corrupt(path, "extra");
  write_st(path, "{\"a\":[1,2]}", data, 8);
  expect_corrupt(path, "\"a\"");
  /* metadata that is not string to string */
  write_st(path, "{\"__metadata__\":{\"n\":3}}", data, 0);
  expect_corrupt(path, "\"n\"");
  write_st(path, "{\"__metadata__\":[\"x\"]}", data, 0);
  expect_corrupt(path, "__metadata__");
  remove(path);
}

static void test_corrupt_json(void** state) {
  (void)state;
  const char* path = tmp_path("json");
  unsigned char data[8] = {0};
  const char* bad[] = {
      "not json at all",                                                        /* not an object */
      "[1,2,3]",                                                                /* an array */
      "{\"a\": }",                                                              /* missing value */
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}",        /* unterminated */
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}} x",     /* trailing text */
      "{\"a\":{\"dtype\":\"F32,\"shape\":[2],\"data_offsets\":[0,8]}}",         /* broken string */
      "{'a':{}}",                                                               /* single quotes */
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,],\"data_offsets\":[0,8]}}",      /* trailing comma */
      "{\"a\":{\"dtype\":\"F\\q32\",\"shape\":[2],\"data_offsets\":[0,8]}}",    /* bad escape */
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8e]}}",      /* bad number */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    write_st(path, bad[i], data, 8);
    nx_safetensors st = SENTINEL;
    nx_status s = nx_safetensors_open(&st, path);
    if (s != NX_ERR_IO || st != NULL)
      fail_msg("header %s: %s (handle %p), expected NX_ERR_IO and NULL", bad[i], nx_status_string(s), (void*)st);
    assert_non_null(strstr(nx_last_error_message(), "nx_safetensors_open"));
  }
  /* deep nesting is rejected without exhausting the stack */
  char deep[4096];
  size_t k = 0;
  deep[k++] = '{';
  memcpy(deep + k, "\"a\":", 4);
  k += 4;
  for (int i = 0; i < 1000; ++i) deep[k++] = '[';
  for (int i = 0; i < 1000; ++i) deep[k++] = ']';
  deep[k++] = '}';
  deep[k] = 0;
  write_st(path, deep, data, 0);
  expect_corrupt(path, "deep");
  /* a control character inside a string */
  write_st(path, "{\"a\x01\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 8);
  expect_corrupt(path, "control character");
  remove(path);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      NX_TEST(test_round_trip_every_dtype),
      NX_TEST(test_save_errors),
      NX_TEST(test_metadata_and_foreign_files),
      NX_TEST(test_corrupt_truncated),
      NX_TEST(test_corrupt_header_length),
      NX_TEST(test_corrupt_offsets),
      NX_TEST(test_corrupt_entries),
      NX_TEST(test_corrupt_json),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
