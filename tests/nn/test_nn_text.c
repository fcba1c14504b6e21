/* Tokenizers and the text loader: `test_nn_text [DIR]` (DIR/saved receives the tokenizer files).
 *
 *  - The byte tokenizer and a BPE tokenizer trained (nx_tokenizer_bpe_train) on a few KB of text
 *    round-trip arbitrary bytes through encode/decode: ASCII, multi-byte UTF-8 (Latin, Greek, CJK),
 *    4-byte emoji and ZWJ sequences, invalid UTF-8 (lone continuation bytes, truncated sequences,
 *    overlong forms, 0xFF), NUL bytes, whitespace runs, the empty string and random byte strings.
 *  - BPE learns merges (vocab_size tokens, fewer tokens than bytes on its corpus), ids stay in the
 *    vocabulary, save/load gives identical encodings, and training is deterministic.
 *  - The text loader: targets are the inputs shifted by one; the windows are the non-overlapping
 *    seq-long windows of the corpus, and every window is visited exactly once per epoch. */
#include "nn_test.h"

static char g_dir[1024] = ".";

static const char* k_corpus_base =
    "Call me Ishmael. Some years ago, never mind how long precisely, having little or no money in my purse, and "
    "nothing particular to interest me on shore, I thought I would sail about a little and see the watery part of "
    "the world. It is a way I have of driving off the spleen and regulating the circulation.\n\n"
    "Cafe\xcc\x81 cre\xcc\x80me bru\xcc\x82le\xcc\x81" "e, na\xc3\xafve fa\xc3\xa7" "ade, \xc3\xbc" "ber Stra\xc3\x9f" "e. "
    "\xce\x9a\xce\xb1\xce\xbb\xce\xb7\xce\xbc\xce\xad\xcf\x81\xce\xb1 \xce\xba\xcf\x8c\xcf\x83\xce\xbc\xce\xb5! "
    "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe3\x83\x86\xe3\x82\xad\xe3\x82\xb9\xe3\x83\x88\xe3\x80\x82 "
    "\xf0\x9f\x90\x8b\xf0\x9f\x8c\x8a \xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7 "
    "tabs\tand  double  spaces\r\nend.\n";

/* A few KB of text: the paragraph repeated with a counter, so BPE has frequent pairs. */
static char* make_corpus(size_t* len) {
  size_t cap = 16384, n = 0;
  char* s = malloc(cap);
  for (int i = 0; i < 10; ++i) n += (size_t)snprintf(s + n, cap - n, "[%d] %s", i, k_corpus_base);
  *len = n;
  return s;
}

static int64_t* encode(nx_tokenizer tok, const char* text, size_t len, size_t* n) {
  nx_tensor t = NULL;
  NX_OK_(nx_tokenizer_encode(&t, tok, text, len));
  size_t nd = 0;
  NX_OK_(nx_tensor_ndim(t, &nd));
  assert_int_equal(nd, 1);
  assert_int_equal(tensor_dtype(t), NX_I64);
  *n = (size_t)tensor_numel(t);
  int64_t* ids = malloc(sizeof(int64_t) * (*n + 1));
  if (*n) NX_OK_(nx_tensor_copy_to_host(t, ids, sizeof(int64_t) * *n, NULL));
  nx_tensor_free(t);
  return ids;
}

/* encode then decode must give the same bytes back; returns the number of tokens. */
static size_t roundtrip(nx_tokenizer tok, const char* text, size_t len, const char* what) {
  size_t n = 0, out_len = 0;
  int64_t* ids = encode(tok, text, len, &n);
  int64_t vocab = 0;
  NX_OK_(nx_tokenizer_vocab_size(tok, &vocab));
  for (size_t i = 0; i < n; ++i) assert_true(ids[i] >= 0 && ids[i] < vocab);
  assert_true(n <= len);
  if (len) assert_true(n > 0);
  char* buf = malloc(len + 1);
  NX_OK_(nx_tokenizer_decode(tok, ids, n, buf, len, &out_len));
  if (out_len != len || memcmp(buf, text, len) != 0) {
    print_error("%s: %zu bytes decode to %zu different bytes\n", what, len, out_len);
    fail();
  }
  if (len) { /* a buffer one byte short is refused and reports the size needed */
    size_t need = 0;
    assert_int_equal(nx_tokenizer_decode(tok, ids, n, buf, len - 1, &need), NX_ERR_INVALID_ARGUMENT);
    assert_int_equal(need, len);
  }
  free(buf);
  free(ids);
  return n;
}

typedef struct {
  const char* name;
  const char* bytes;
  size_t len;
} sample;
#define S(name, lit) {name, lit, sizeof(lit) - 1}
static const sample k_samples[] = {
    S("empty", ""),
    S("ascii", "Hello, world! The quick brown fox jumps over the lazy dog."),
    S("one byte", "a"),
    S("whitespace runs", "  \t\t\n\n  x  \r\n \n"),
    S("latin-1 in utf-8", "na\xc3\xafve caf\xc3\xa9 \xc3\xbc" "ber \xc3\x9f"),
    S("combining marks", "e\xcc\x81\xcc\x80\xcc\x82"),
    S("greek", "\xce\x9a\xce\xb1\xce\xbb\xce\xb7\xce\xbc\xce\xad\xcf\x81\xce\xb1"),
    S("cjk", "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe3\x83\x86\xe3\x82\xad\xe3\x82\xb9\xe3\x83\x88"),
    S("emoji", "\xf0\x9f\x90\x8b\xf0\x9f\x8c\x8a\xf0\x9f\x98\x80"),
    S("zwj family", "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7"),
    S("flag", "\xf0\x9f\x87\xab\xf0\x9f\x87\xb7"),
    S("nul bytes", "a\0b\0\0c"),
    S("lone continuation", "\x80\x81\xbf abc \x80"),
    S("truncated sequences", "\xe6\x97 \xf0\x9f\x90 \xc3"),
    S("overlong and invalid", "\xc0\xaf \xe0\x80\xaf \xf5\x80\x80\x80 \xff\xfe \xed\xa0\x80"),
    S("all high bytes", "\xf8\xf9\xfa\xfb\xfc\xfd\xfe\xff"),
    S("mixed", "Call me \xf0\x9f\x90\x8b Ishmael\xff. caf\xc3\xa9\x80 \xe6\x97\xa5\n"),
};
#define NSAMPLES (sizeof k_samples / sizeof k_samples[0])

static void check_all_samples(nx_tokenizer tok, const char* which) {
  char what[128];
  for (size_t i = 0; i < NSAMPLES; ++i) {
    snprintf(what, sizeof what, "%s: %s", which, k_samples[i].name);
    roundtrip(tok, k_samples[i].bytes, k_samples[i].len, what);
  }
  /* every byte value once, and 300 random byte strings (lengths 0..200), biased toward UTF-8 lead
   * and continuation bytes and spaces */
  char all[256];
  for (int i = 0; i < 256; ++i) all[i] = (char)i;
  snprintf(what, sizeof what, "%s: all 256 bytes", which);
  roundtrip(tok, all, 256, what);
  rng_seed(99);
  char buf[256];
  for (int r = 0; r < 300; ++r) {
    size_t len = (size_t)rng_int(201);
    for (size_t i = 0; i < len; ++i) {
      int64_t kind = rng_int(6);
      buf[i] = kind == 0 ? ' ' : kind == 1 ? (char)(0x80 + rng_int(64)) : kind == 2 ? (char)(0xc0 + rng_int(64))
                                                                          : kind == 3 ? (char)rng_int(256)
                                                                                      : (char)('a' + rng_int(26));
    }
    snprintf(what, sizeof what, "%s: random bytes #%d", which, r);
    roundtrip(tok, buf, len, what);
  }
}

static void test_byte_tokenizer(void** state) {
  (void)state;
  nx_tokenizer tok = NULL;
  NX_OK_(nx_tokenizer_bytes_create(&tok));
  int64_t vocab = 0;
  NX_OK_(nx_tokenizer_vocab_size(tok, &vocab));
  assert_int_equal(vocab, 256);
  check_all_samples(tok, "bytes");
  /* one token per byte, the byte's value */
  size_t n = 0;
  const char* s = "\xf0\x9f\x90\x8b a\xff";
  int64_t* ids = encode(tok, s, 7, &n);
  assert_int_equal(n, 7);
  for (size_t i = 0; i < 7; ++i) assert_int_equal(ids[i], (int64_t)(unsigned char)s[i]);
  free(ids);
  /* ids outside the vocabulary are refused */
  const int64_t bad[2] = {65, 256};
  char out[4];
  size_t len = 0;
  assert_int_not_equal(nx_tokenizer_decode(tok, bad, 2, out, sizeof out, &len), NX_OK);
  nx_tokenizer_free(tok);
}

static void test_bpe_tokenizer(void** state) {
  (void)state;
  size_t clen = 0;
  char* corpus = make_corpus(&clen);
  assert_true(clen > 3000);
  nx_tokenizer tok = NULL, tok2 = NULL, loaded = NULL;
  NX_OK_(nx_tokenizer_bpe_train(&tok, corpus, clen, 400));
  int64_t vocab = 0;
  NX_OK_(nx_tokenizer_vocab_size(tok, &vocab));
  assert_int_equal(vocab, 400);
  check_all_samples(tok, "bpe");
  const size_t ntok = roundtrip(tok, corpus, clen, "bpe: its training corpus");
  printf("  BPE: %zu bytes of corpus -> %zu tokens with %lld tokens of vocabulary\n", clen, ntok, (long long)vocab);
  assert_true(ntok * 2 < clen); /* it compresses its own corpus */
  /* deterministic training */
  NX_OK_(nx_tokenizer_bpe_train(&tok2, corpus, clen, 400));
  /* save / load: identical encodings */
  char path[1100];
  snprintf(path, sizeof path, "%s/saved/bpe_tokenizer.txt", g_dir);
  NX_OK_(nx_tokenizer_save(tok, path));
  NX_OK_(nx_tokenizer_load(&loaded, path));
  NX_OK_(nx_tokenizer_vocab_size(loaded, &vocab));
  assert_int_equal(vocab, 400);
  const nx_tokenizer others[2] = {tok2, loaded};
  for (int o = 0; o < 2; ++o) {
    for (size_t i = 0; i <= NSAMPLES; ++i) {
      const char* text = i < NSAMPLES ? k_samples[i].bytes : corpus;
      const size_t len = i < NSAMPLES ? k_samples[i].len : clen;
      size_t na = 0, nb = 0;
      int64_t* a = encode(tok, text, len, &na);
      int64_t* b = encode(others[o], text, len, &nb);
      assert_int_equal(na, nb);
      assert_memory_equal(a, b, sizeof(int64_t) * na);
      free(a);
      free(b);
    }
  }
  check_all_samples(loaded, "bpe loaded");
  /* a tiny corpus stops early (no pair occurs twice): still a valid byte-level tokenizer */
  nx_tokenizer small = NULL;
  NX_OK_(nx_tokenizer_bpe_train(&small, "abc", 3, 1000));
  NX_OK_(nx_tokenizer_vocab_size(small, &vocab));
  assert_true(vocab >= 256 && vocab <= 1000);
  roundtrip(small, "\xf0\x9f\x90\x8b abc", 8, "bpe small");
  nx_tokenizer bad = SENTINEL;
  assert_int_not_equal(nx_tokenizer_bpe_train(&bad, corpus, clen, 100), NX_OK); /* < 256 */
  assert_null(bad);
  nx_tokenizer_free(small);
  nx_tokenizer_free(loaded);
  nx_tokenizer_free(tok2);
  nx_tokenizer_free(tok);
  free(corpus);
}

/* Window start of an input row: tokens are 0, 1, 2, ... so the first input is the start. */
static void check_loader(int64_t ntokens, int64_t batch, int64_t seq, uint64_t seed) {
  int64_t* ids = malloc(sizeof(int64_t) * (size_t)ntokens);
  for (int64_t i = 0; i < ntokens; ++i) ids[i] = i;
  const int64_t shape[1] = {ntokens};
  nx_tensor tokens = t_i64(ids, shape, 1);
  nx_text_loader loader = NULL;
  NX_OK_(nx_text_loader_create(&loader, tokens, batch, seq, seed));
  const int64_t nwin = (ntokens - 1) / seq; /* windows s = 0, seq, 2 seq, ... with s + seq + 1 <= n */
  int64_t per_epoch = 0;
  NX_OK_(nx_text_loader_batches_per_epoch(loader, &per_epoch));
  assert_int_equal(per_epoch, nwin / batch > 0 ? nwin / batch : 1);
  /* three epochs' worth of windows, in order */
  const int64_t want = 3 * nwin, nbatches = (want + batch - 1) / batch;
  int64_t* starts = malloc(sizeof(int64_t) * (size_t)(nbatches * batch));
  int64_t got = 0;
  int64_t* in = malloc(sizeof(int64_t) * (size_t)(batch * seq));
  int64_t* tg = malloc(sizeof(int64_t) * (size_t)(batch * seq));
  for (int64_t b = 0; b < nbatches; ++b) {
    nx_tensor x = NULL, y = NULL;
    NX_OK_(nx_text_loader_next(&x, &y, loader, CPU, NULL));
    assert_shape(x, batch, seq);
    assert_shape(y, batch, seq);
    assert_int_equal(tensor_dtype(x), NX_I64);
    NX_OK_(nx_tensor_copy_to_host(x, in, sizeof(int64_t) * (size_t)(batch * seq), NULL));
    NX_OK_(nx_tensor_copy_to_host(y, tg, sizeof(int64_t) * (size_t)(batch * seq), NULL));
    for (int64_t r = 0; r < batch; ++r) {
      const int64_t s = in[r * seq];
      assert_true(s % seq == 0 && s + seq + 1 <= ntokens); /* an aligned, complete window */
      for (int64_t i = 0; i < seq; ++i) {
        assert_int_equal(in[r * seq + i], s + i);     /* contiguous tokens */
        assert_int_equal(tg[r * seq + i], s + i + 1); /* targets = inputs shifted by one */
      }
      starts[got++] = s;
    }
    nx_tensor_free(x);
    nx_tensor_free(y);
  }
  /* consecutive runs of nwin windows are permutations of all windows: each visited once per epoch */
  char* seen = malloc((size_t)nwin);
  bool reshuffled = false;
  for (int64_t e = 0; e < 3; ++e) {
    memset(seen, 0, (size_t)nwin);
    for (int64_t i = 0; i < nwin; ++i) {
      const int64_t w = starts[e * nwin + i] / seq;
      if (seen[w]) {
        print_error("epoch %lld visits window %lld twice (n %lld, batch %lld, seq %lld)\n", (long long)e, (long long)w,
                    (long long)ntokens, (long long)batch, (long long)seq);
        fail();
      }
      seen[w] = 1;
      if (e > 0 && starts[e * nwin + i] != starts[i]) reshuffled = true;
    }
  }
  if (nwin > 3) assert_true(reshuffled); /* a new order every epoch */
  /* the same seed gives the same stream */
  nx_text_loader again = NULL;
  NX_OK_(nx_text_loader_create(&again, tokens, batch, seq, seed));
  for (int64_t b = 0; b < nbatches && b < 4; ++b) {
    nx_tensor x = NULL, y = NULL;
    NX_OK_(nx_text_loader_next(&x, &y, again, CPU, NULL));
    NX_OK_(nx_tensor_copy_to_host(x, in, sizeof(int64_t) * (size_t)(batch * seq), NULL));
    for (int64_t r = 0; r < batch; ++r) assert_int_equal(in[r * seq], starts[b * batch + r]);
    nx_tensor_free(x);
    nx_tensor_free(y);
  }
  printf("  loader: %lld tokens, batch %lld, seq %lld: %lld windows, %lld batches/epoch; 3 epochs each a permutation\n",
         (long long)ntokens, (long long)batch, (long long)seq, (long long)nwin, (long long)per_epoch);
  nx_text_loader_free(again);
  free(seen);
  free(in);
  free(tg);
  free(starts);
  nx_text_loader_free(loader);
  nx_tensor_free(tokens);
  free(ids);
}

static void test_text_loader(void** state) {
  (void)state;
  check_loader(1001, 4, 10, 1);  /* 100 windows, a multiple of the batch */
  check_loader(1000, 4, 10, 2);  /* 99 windows: epochs straddle batches */
  check_loader(97, 3, 8, 3);     /* 12 windows */
  check_loader(50, 1, 7, 4);     /* 7 windows, batch 1 */
  check_loader(9, 2, 8, 5);      /* a single window, batch larger than the epoch */
  /* too short a corpus, bad sizes */
  const int64_t ids[4] = {1, 2, 3, 4}, shape[1] = {4};
  nx_tensor t = t_i64(ids, shape, 1);
  nx_text_loader l = SENTINEL;
  assert_int_not_equal(nx_text_loader_create(&l, t, 1, 4, 0), NX_OK);
  assert_null(l);
  assert_int_not_equal(nx_text_loader_create(&l, t, 0, 2, 0), NX_OK);
  nx_tensor_free(t);
  /* the loader over a BPE encoding of real text: targets shifted by one */
  size_t clen = 0;
  char* corpus = make_corpus(&clen);
  nx_tokenizer tok = NULL;
  NX_OK_(nx_tokenizer_bpe_train(&tok, corpus, clen, 300));
  nx_tensor enc = NULL;
  NX_OK_(nx_tokenizer_encode(&enc, tok, corpus, clen));
  NX_OK_(nx_text_loader_create(&l, enc, 2, 16, 7));
  nx_tensor x = NULL, y = NULL, xs = NULL, ys = NULL;
  NX_OK_(nx_text_loader_next(&x, &y, l, CPU, NULL));
  NX_OK_(nx_slice(&xs, x, 1, 1, 16, 1, NULL));
  NX_OK_(nx_slice(&ys, y, 1, 0, 15, 1, NULL));
  expect_identical(xs, ys, "inputs[1:] vs targets[:-1]");
  nx_tensor_free(xs);
  nx_tensor_free(ys);
  nx_tensor_free(x);
  nx_tensor_free(y);
  nx_text_loader_free(l);
  nx_tensor_free(enc);
  nx_tokenizer_free(tok);
  free(corpus);
}

int main(int argc, char** argv) {
  if (argc > 1) snprintf(g_dir, sizeof g_dir, "%s", argv[1]);
  const struct CMUnitTest tests[] = {
      NX_TEST(test_byte_tokenizer),
      NX_TEST(test_bpe_tokenizer),
      NX_TEST(test_text_loader),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
