/* libFuzzer: DLPack import. The input describes a DLManagedTensor (plain or versioned): device,
 * rank, dtype code/bits/lanes, shape, strides (or NULL), byte offset, version and flags, over a
 * buffer the harness owns. On success the tensor's values are read (when the harness's own
 * extent computation says they lie in its buffer) and the deleter must run exactly once when
 * the last handle goes; on failure it must not run at all. */
#include "fuzz_util.h"

static int g_deleted;
static void deleter(nx_dl_managed_tensor* self) { (void)self, ++g_deleted; }
static void deleter_v(nx_dl_managed_tensor_versioned* self) { (void)self, ++g_deleted; }

enum { kBufBytes = 1 << 16 };
static unsigned char g_buf[kBufBytes] __attribute__((aligned(64)));

/* The bytes the tensor spans from data + byte_offset, or -1 when that overflows or reaches a
 * negative offset (only then may the engine have refused for a reason of range). */
static int64_t extent(int ndim, const int64_t* shape, const int64_t* strides, int64_t elem) {
  int64_t last = 0;
  for (int d = 0; d < ndim; ++d) {
    if (shape[d] < 0) return -1;
    if (shape[d] == 0) return 0;
  }
  int64_t contiguous = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    const int64_t st = strides ? strides[d] : contiguous;
    if (st < 0) return -1;
    int64_t step;
    if (__builtin_mul_overflow(shape[d] - 1, st, &step) || __builtin_add_overflow(last, step, &last)) return -1;
    if (!strides && __builtin_mul_overflow(contiguous, shape[d], &contiguous)) return -1;
  }
  int64_t bytes;
  if (__builtin_add_overflow(last, 1, &bytes) || __builtin_mul_overflow(bytes, elem, &bytes)) return -1;
  return bytes;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int64_t before[NX_HANDLE_PROFILE + 1];
  fuzz_count_handles(before);
  FuzzIn in = {data, size};
  const int versioned = fuzz_u8(&in) & 1;
  /* DLPack's arrays hold ndim entries: room for any rank the engine calls plausible (1024) */
  static int64_t shape[1025], strides[1025];
  for (int d = 0; d < 1025; ++d) shape[d] = 1, strides[d] = 0;
  nx_dl_tensor t;
  memset(&t, 0, sizeof t);
  const uint8_t dev = fuzz_u8(&in);
  t.device.device_type = dev < 240 ? 1 : (int32_t)(dev - 240);  /* mostly the CPU */
  t.device.device_id = fuzz_u8(&in) < 250 ? 0 : (int32_t)fuzz_u32(&in);
  const uint8_t nd = fuzz_u8(&in);
  t.ndim = nd < 250 ? nd % 7 : (int32_t)(fuzz_u32(&in) % 1100);
  const uint8_t code = fuzz_u8(&in);
  static const uint8_t kBits[] = {8, 16, 32, 64, 1, 0, 128};
  t.dtype.code = code % 8;
  t.dtype.bits = kBits[fuzz_u8(&in) % 7];
  t.dtype.lanes = fuzz_u8(&in) < 240 ? 1 : (uint16_t)fuzz_u32(&in);
  const int rank = t.ndim >= 0 && t.ndim <= 8 ? t.ndim : 0;  /* fuzzed entries; the rest stay 1 / 0 */
  for (int d = 0; d < rank; ++d) {
    const uint8_t k = fuzz_u8(&in);
    shape[d] = k < 200 ? k % 9 : (int64_t)fuzz_u64(&in);
  }
  const int with_strides = fuzz_u8(&in) & 1;
  for (int d = 0; d < rank; ++d) {
    const uint8_t k = fuzz_u8(&in);
    strides[d] = k < 200 ? k % 17 : (int64_t)fuzz_u64(&in);
  }
  t.shape = t.ndim > 0 ? shape : NULL;
  t.strides = with_strides && t.ndim > 0 ? strides : NULL;
  const uint8_t off = fuzz_u8(&in);
  t.byte_offset = off < 200 ? off : fuzz_u64(&in);
  t.data = fuzz_u8(&in) < 250 ? (void*)g_buf : NULL;

  const int64_t elem = t.dtype.bits / 8 > 0 ? t.dtype.bits / 8 : 1;
  const int64_t span = t.ndim >= 0 && t.ndim <= 1024 ? extent(t.ndim, shape, t.strides, elem) : -1;
  int64_t numel = 1;
  for (int d = 0; d < rank && numel >= 0; ++d)
    if (shape[d] < 0 || __builtin_mul_overflow(numel, shape[d], &numel)) numel = -1;
  /* read back only what lies in the buffer, and not a stride-0 view of a billion elements */
  const int readable = span >= 0 && t.byte_offset < kBufBytes && (uint64_t)span <= kBufBytes - t.byte_offset &&
                       numel >= 0 && numel <= (1 << 16) && t.ndim <= 8;

  g_deleted = 0;
  nx_tensor x = NULL;
  nx_status st;
  nx_dl_managed_tensor m = {t, NULL, deleter};
  nx_dl_managed_tensor_versioned mv;
  memset(&mv, 0, sizeof mv);
  mv.version.major = fuzz_u8(&in) < 240 ? NX_DL_MAJOR_VERSION : fuzz_u32(&in);
  mv.version.minor = fuzz_u8(&in);
  mv.deleter = deleter_v;
  mv.flags = fuzz_u8(&in) < 200 ? 0 : fuzz_u64(&in);
  mv.dl_tensor = t;
  st = versioned ? nx_tensor_from_dlpack_versioned(&x, &mv) : nx_tensor_from_dlpack(&x, &m);
  if (st != NX_OK) {
    if (x || g_deleted) abort(); /* refused: no handle, the struct still the caller's */
  } else {
    if (!x || g_deleted) abort();
    if (readable && t.device.device_type == 1) {
      nx_tensor s = NULL;
      nx_tensor f = NULL;
      if (nx_cast(&f, x, NX_F64, NULL) == NX_OK) nx_sum(&s, f, NULL, 0, false, NULL);
      nx_tensor_free(s);
      nx_tensor_free(f);
    }
    nx_tensor_free(x);
    if (g_deleted != 1) abort(); /* the last handle ran the deleter once */
  }
  fuzz_check_handles(before);
  return 0;
}
