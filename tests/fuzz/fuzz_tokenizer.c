/* libFuzzer: the tokenizer loader and decoder. The first byte chooses the target: a tokenizer
 * file to load (then used to encode and decode sample text), or ids to decode with the byte
 * tokenizer and with a small trained one (ids out of range, huge counts, short buffers). */
#include "fuzz_util.h"

static void use(nx_tokenizer tok, FuzzIn* in) {
  int64_t vocab = 0;
  if (nx_tokenizer_vocab_size(tok, &vocab) != NX_OK || vocab < 256) abort();
  nx_tensor ids = NULL;
  const char text[] = "Call me Ishmael. Some years ago, never mind how long precisely";
  if (nx_tokenizer_encode(&ids, tok, text, sizeof text - 1) == NX_OK) {
    int64_t n = 0;
    int64_t* p = NULL;
    if (nx_tensor_numel(ids, &n) != NX_OK || nx_tensor_data_ptr(ids, (void**)&p) != NX_OK) abort();
    char buf[256];
    size_t len = 0;
    if (nx_tokenizer_decode(tok, p, (size_t)n, buf, sizeof buf, &len) != NX_OK || len != sizeof text - 1 ||
        memcmp(buf, text, len) != 0)
      abort(); /* encode then decode must give the text back */
    nx_tensor_free(ids);
  }
  /* fuzzed ids, a fuzzed capacity */
  int64_t fids[64];
  const size_t count = fuzz_u8(in) % 65;
  for (size_t i = 0; i < count; ++i) fids[i] = (int64_t)fuzz_u64(in) % (vocab + 3) - 1;
  char out[128];
  size_t len = 0;
  const size_t cap = fuzz_u8(in) % sizeof out;
  /* too small a buffer is NX_ERR_INVALID_ARGUMENT with the size needed in len */
  if (nx_tokenizer_decode(tok, fids, count, out, cap, &len) == NX_OK && len > cap) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int64_t before[NX_HANDLE_PROFILE + 1];
  fuzz_count_handles(before);
  FuzzIn in = {data, size};
  const uint8_t mode = fuzz_u8(&in) % 2;
  nx_tokenizer tok = NULL;
  if (mode == 0) {
    const char* path = fuzz_path(".tok");
    if (fuzz_write(path, in.p, in.n) != 0) return 0;
    if (nx_tokenizer_load(&tok, path) == NX_OK) {
      FuzzIn tail = {data, size};
      use(tok, &tail);
      nx_tokenizer_free(tok);
    }
  } else {
    if (nx_tokenizer_bytes_create(&tok) != NX_OK) abort();
    use(tok, &in);
    nx_tokenizer_free(tok);
  }
  fuzz_check_handles(before);
  return 0;
}
