/* Shared by the libFuzzer harnesses (tests/fuzz): the input written to a file that the loaders
 * open (they take paths), and a little reader of the fuzz bytes. Each harness calls the C API only,
 * as a host program would: any status is fine, a crash, a sanitizer report or a leaked handle is
 * not (the harness aborts on a leak, which libFuzzer reports as a crash). */
#ifndef NEXUS_FUZZ_UTIL_H
#define NEXUS_FUZZ_UTIL_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nexus.h"

/* A per-process scratch file for loaders that take a path. */
static const char* fuzz_path(const char* suffix) {
  static char path[256];
  if (!path[0]) snprintf(path, sizeof path, "/tmp/nexus_fuzz_%d%s", (int)getpid(), suffix);
  return path;
}
static int fuzz_write(const char* path, const uint8_t* data, size_t n) {
  FILE* f = fopen(path, "wb");
  if (!f) return -1;
  size_t w = n ? fwrite(data, 1, n, f) : 0;
  fclose(f);
  return w == n ? 0 : -1;
}

/* Bytes consumed from the front of the input; zeros once it runs out. */
typedef struct {
  const uint8_t* p;
  size_t n;
} FuzzIn;
static uint8_t fuzz_u8(FuzzIn* in) {
  if (!in->n) return 0;
  in->n--;
  return *in->p++;
}
static uint32_t fuzz_u32(FuzzIn* in) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= (uint32_t)fuzz_u8(in) << (8 * i);
  return v;
}
static uint64_t fuzz_u64(FuzzIn* in) { return (uint64_t)fuzz_u32(in) | (uint64_t)fuzz_u32(in) << 32; }

/* Live handles of every type must come back to where they were. */
static void fuzz_check_handles(const int64_t* before) {
  for (int t = NX_HANDLE_TENSOR; t <= NX_HANDLE_PROFILE; ++t)
    if (nx_live_handle_count((nx_handle_type)t) != before[t]) {
      fprintf(stderr, "fuzz: handles of type %d leaked (%lld live before, %lld after)\n", t, (long long)before[t],
              (long long)nx_live_handle_count((nx_handle_type)t));
      abort();
    }
}
static void fuzz_count_handles(int64_t* out) {
  for (int t = NX_HANDLE_TENSOR; t <= NX_HANDLE_PROFILE; ++t) out[t] = nx_live_handle_count((nx_handle_type)t);
}
#endif
