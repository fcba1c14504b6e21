/* The C contract of nexus.h, part 3: error paths common to every function. Each failing call
 * must return its documented status, leave a thread-local message naming the function and the
 * values involved, and set *out (and every out array entry) to NULL (checked by pre-setting them
 * to a non-NULL sentinel). Nothing may crash. Covered here: NULL and freed handles, NULL out
 * pointers and arrays, invalid dtype/device values and shapes at creation, sizes that overflow,
 * the tensor API's own checks, graphs, checkpoints and the thread-local message. Each op's own
 * failures (shapes, axes, dtypes, index ranges, attribute values, device mismatches) are error
 * variants of its case in tests/harness/op_cases.py (the op harness's errors mode). */
#include <pthread.h>

#include "nx_test.h"

/* The call fails with `want`, its message contains every needle, and `out` is NULL afterwards. */
#define EXPECT_ERR_OUT(want, out, call, ...)                                         \
  do {                                                                               \
    (out) = SENTINEL;                                                                \
    EXPECT_ERR(want, call, __VA_ARGS__);                                             \
    if ((out) != NULL) {                                                             \
      print_error("%s failed but left *out non-NULL (%p)\n", #call, (void*)(out));   \
      _fail(__FILE__, __LINE__);                                                     \
    }                                                                                \
  } while (0)

static nx_tensor filled(const int64_t* shape, size_t ndim, nx_dtype dt, double v) {
  nx_tensor t = NULL;
  NX_OK_(nx_tensor_full(&t, shape, ndim, v, dt, CPU, NULL));
  return t;
}

/* ---------------------------------------------------------------- NULL arguments */
static void test_null_handles(void** state) {
  (void)state;
  const int64_t s2[1] = {2};
  nx_tensor a = filled(s2, 1, NX_F32, 1), out;
  EXPECT_ERR_OUT(NX_ERR_INVALID_ARGUMENT, out, nx_add(&out, NULL, a, NULL), "nx_add", "a is NULL");
  EXPECT_ERR_OUT(NX_ERR_INVALID_ARGUMENT, out, nx_add(&out, a, NULL, NULL), "nx_add", "b is NULL");
  EXPECT_ERR_OUT(NX_ERR_INVALID_ARGUMENT, out, nx_exp(&out, NULL, NULL), "nx_exp", "x is NULL");
  EXPECT_ERR_OUT(NX_ERR_INVALID_ARGUMENT, out, nx_matmul(&out, NULL, a, NULL), "nx_matmul", "NULL");
  EXPECT_ERR_OUT(NX_ERR_INVALID_ARGUMENT, out, nx_sum(&out, NULL, NULL, 0, false, NULL), "nx_sum", "NULL");
  EXPECT_ERR_OUT(NX_ERR_INVALID_ARGUMENT, out, nx_tensor_retain(&out, NULL), "nx_tensor_retain", "t is NULL");
  EXPECT_ERR_OUT(NX_ERR_INVALID_ARGUMENT, out, nx_tensor_detach(&out, NULL), "nx_tensor_detach", "NULL");
  EXPECT_ERR_OUT(NX_ERR_INVALID_ARGUMENT, out, nx_tensor_grad(&out, NULL), "nx_tensor_grad", "NULL");
  EXPECT_ERR_OUT(NX_ERR_INVALID_ARGUMENT, out, nx_where(&out, NULL, a, a, NULL), "nx_where", "cond is NULL");
  EXPECT_ERR_OUT(NX_ERR_INVALID_ARGUMENT, out, nx_linear(&out, a, NULL, NULL, NULL), "nx_linear", "weight is NULL");
  nx_tensor xs[2] = {a, NULL};
  EXPECT_ERR_OUT(NX_ERR_INVALID_ARGUMENT, out, nx_cat(&out, xs, 2, 0, NULL), "nx_cat", "NULL");
  EXPECT_ERR_OUT(NX_ERR_INVALID_ARGUMENT, out, nx_stack(&out, NULL, 2, 0, NULL), "nx_stack", "NULL");
  size_t nd;
  int64_t n, shape[4];
  double v;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_ndim(NULL, &nd), "nx_tensor_ndim", "t is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_numel(NULL, &n), "nx_tensor_numel", "t is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_shape(NULL, shape, 4), "nx_tensor_shape", "t is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_item(NULL, &v, NULL), "nx_tensor_item", "NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_copy_to_host(NULL, &v, 8, NULL), "nx_tensor_copy_to_host", "NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_set_requires_grad(NULL, true), "nx_tensor_set_requires_grad", "NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_backward(NULL, NULL, NULL, NULL), "nx_backward", "root is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_add_(NULL, a, NULL), "nx_add_", "NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_mul_scalar_(NULL, 2, NULL), "nx_mul_scalar_", "NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_copy_(a, NULL, NULL), "nx_copy_", "src is NULL");
  nx_tensor_free(a);
}

static void test_null_out_pointers(void** state) {
  (void)state;
  const int64_t s2[1] = {2};
  nx_tensor a = filled(s2, 1, NX_F32, 1);
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_zeros(NULL, s2, 1, NX_F32, CPU, NULL), "nx_tensor_zeros", "out is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_from_data(NULL, s2, s2, 1, NX_I64, CPU, NULL), "nx_tensor_from_data",
             "out is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_arange(NULL, 0, 1, 1, NX_F32, CPU, NULL), "nx_tensor_arange",
             "out is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_add(NULL, a, a, NULL), "nx_add", "out is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_exp(NULL, a, NULL), "nx_exp", "out is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_sum(NULL, a, NULL, 0, false, NULL), "nx_sum", "out is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_retain(NULL, a), "nx_tensor_retain", "out is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_ndim(a, NULL), "nx_tensor_ndim", "out is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_numel(a, NULL), "nx_tensor_numel", "out is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_dtype(a, NULL), "nx_tensor_dtype", "out is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_device(a, NULL), "nx_tensor_device", "out is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_is_contiguous(a, NULL), "nx_tensor_is_contiguous", "out is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_shape(a, NULL, 4), "nx_tensor_shape", "out is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_item(a, NULL, NULL), "nx_tensor_item", "out is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_data_ptr(a, NULL), "nx_tensor_data_ptr", "out is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_get_requires_grad(a, NULL), "nx_tensor_get_requires_grad", "out is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_grad(NULL, a), "nx_tensor_grad", "out is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_stream_create(NULL, CPU), "nx_stream_create", "out is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_stream_device(NULL, NULL), "nx_stream_device", "out is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_graph_create(NULL, a), "nx_graph_create", "out is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_safetensors_open(NULL, "x.safetensors"), "nx_safetensors_open", "out is NULL");
  const int64_t sizes[2] = {1, 1};
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_split(NULL, a, sizes, 2, 0, NULL), "nx_split", "outs is NULL");
  /* NULL array arguments with a non-zero count */
  nx_tensor out;
  EXPECT_ERR_OUT(NX_ERR_INVALID_ARGUMENT, out, nx_tensor_zeros(&out, NULL, 2, NX_F32, CPU, NULL), "nx_tensor_zeros",
                 "shape is NULL", "2");
  EXPECT_ERR_OUT(NX_ERR_INVALID_ARGUMENT, out, nx_tensor_from_data(&out, NULL, s2, 1, NX_F32, CPU, NULL),
                 "nx_tensor_from_data", "data is NULL");
  EXPECT_ERR_OUT(NX_ERR_INVALID_ARGUMENT, out, nx_sum(&out, a, NULL, 1, false, NULL), "nx_sum", "axes is NULL");
  EXPECT_ERR_OUT(NX_ERR_INVALID_ARGUMENT, out, nx_reshape(&out, a, NULL, 1, NULL), "nx_reshape", "NULL");
  EXPECT_ERR_OUT(NX_ERR_INVALID_ARGUMENT, out, nx_permute(&out, a, NULL, 1, NULL), "nx_permute", "dims is NULL");
  double buf[2];
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_copy_to_host(a, NULL, 8, NULL), "nx_tensor_copy_to_host", "dst is NULL");
  (void)buf;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_cpu_set_simd_level(NULL), "nx_cpu_set_simd_level", "NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_cpu_set_simd_level("sse9"), "nx_cpu_set_simd_level", "sse9");
  nx_tensor_free(a);
}

/* ---------------------------------------------------------------- freed handles */
static void test_freed_handles(void** state) {
  (void)state;
  const int64_t s2[1] = {2};
  nx_tensor a = filled(s2, 1, NX_F32, 1), b = filled(s2, 1, NX_F32, 2), out;
  nx_tensor dead = filled(s2, 1, NX_F32, 3);
  int64_t live = nx_live_handle_count(NX_HANDLE_TENSOR);
  nx_tensor_free(dead);
  assert_int_equal(nx_live_handle_count(NX_HANDLE_TENSOR), live - 1);
  /* No new tensor is created before the stale handle is used (a new handle could reuse the
   * address). Each use is reported, never dereferenced. */
  int64_t n;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_numel(dead, &n), "nx_tensor_numel", "not a live tensor handle");
  EXPECT_ERR_OUT(NX_ERR_INVALID_ARGUMENT, out, nx_add(&out, a, dead, NULL), "nx_add", "b is not a live tensor handle");
  EXPECT_ERR_OUT(NX_ERR_INVALID_ARGUMENT, out, nx_exp(&out, dead, NULL), "nx_exp", "not a live");
  EXPECT_ERR_OUT(NX_ERR_INVALID_ARGUMENT, out, nx_tensor_retain(&out, dead), "nx_tensor_retain", "not a live");
  nx_tensor xs[3] = {a, dead, b};
  EXPECT_ERR_OUT(NX_ERR_INVALID_ARGUMENT, out, nx_cat(&out, xs, 3, 0, NULL), "nx_cat", "not a live");
  double v;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_item(dead, &v, NULL), "nx_tensor_item", "not a live");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_copy_to_host(dead, &v, 8, NULL), "nx_tensor_copy_to_host", "not a live");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_backward(dead, NULL, NULL, NULL), "nx_backward", "not a live");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_set_requires_grad(dead, true), "nx_tensor_set_requires_grad",
             "not a live");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_mul_(a, dead, NULL), "nx_mul_", "not a live");
  /* freeing twice is harmless and does not disturb the count */
  nx_tensor_free(dead);
  assert_int_equal(nx_live_handle_count(NX_HANDLE_TENSOR), live - 1);
  /* the other handles still work */
  NX_OK_(nx_add(&out, a, b, NULL));
  const double want[2] = {3, 3};
  assert_tensor_close(out, want, 2, 0, 0);
  nx_tensor_free(out);
  /* a pointer that never was a handle is also reported */
  static uint64_t not_a_tensor[8];
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_numel((nx_tensor)(void*)not_a_tensor, &n), "nx_tensor_numel",
             "not a live");
  nx_tensor_free(a);
  nx_tensor_free(b);
}

/* ---------------------------------------------------------------- out arrays */
/* A failing call with several outputs sets every one of them to NULL (the op's own error is the
 * harness's; here it is only the vehicle). */
static void test_out_arrays_nulled_on_failure(void** state) {
  (void)state;
  const int64_t s23[2] = {2, 3}, s32[2] = {3, 2}, s3[1] = {3};
  nx_tensor a23 = filled(s23, 2, NX_F32, 1), x32 = filled(s32, 2, NX_F32, 1), w3 = filled(s3, 1, NX_F32, 1), out, sum;
  const int64_t sizes[2] = {1, 1};
  nx_tensor parts[2] = {SENTINEL, SENTINEL};
  EXPECT_ERR(NX_ERR_SHAPE, nx_split(parts, a23, sizes, 2, 1, NULL), "nx_split", "2", "3");
  assert_null(parts[0]);
  assert_null(parts[1]);
  sum = SENTINEL;
  EXPECT_ERR_OUT(NX_ERR_SHAPE, out, nx_add_rms_norm(&out, &sum, a23, x32, w3, 1e-5, NULL), "nx_add_rms_norm", "residual");
  assert_null(sum);
  nx_tensor_free(a23);
  nx_tensor_free(x32);
  nx_tensor_free(w3);
}

/* ---------------------------------------------------------------- dtypes */
static void test_creation_dtypes(void** state) {
  (void)state;
  const int64_t s2[1] = {2};
  nx_tensor out;
  /* random numbers are floating */
  EXPECT_ERR_OUT(NX_ERR_DTYPE, out, nx_tensor_rand(&out, s2, 1, NX_I32, CPU, NULL), "nx_tensor_rand", "i32");
  EXPECT_ERR_OUT(NX_ERR_DTYPE, out, nx_tensor_randn(&out, s2, 1, NX_BOOL, CPU, NULL), "nx_tensor_randn", "bool");
}

static void test_invalid_dtype_and_device_values(void** state) {
  (void)state;
  const int64_t s2[1] = {2};
  const float data[2] = {1, 2};
  nx_tensor out;
  const nx_dtype bad_dtypes[3] = {(nx_dtype)10, (nx_dtype)-1, (nx_dtype)99};
  for (int k = 0; k < 3; ++k) {
    char val[16];
    snprintf(val, sizeof val, "%d", (int)bad_dtypes[k]);
    EXPECT_ERR_OUT(NX_ERR_DTYPE, out, nx_tensor_zeros(&out, s2, 1, bad_dtypes[k], CPU, NULL), "nx_tensor_zeros", val);
    EXPECT_ERR_OUT(NX_ERR_DTYPE, out, nx_tensor_ones(&out, s2, 1, bad_dtypes[k], CPU, NULL), "nx_tensor_ones", val);
    EXPECT_ERR_OUT(NX_ERR_DTYPE, out, nx_tensor_full(&out, s2, 1, 1.0, bad_dtypes[k], CPU, NULL), "nx_tensor_full", val);
    EXPECT_ERR_OUT(NX_ERR_DTYPE, out, nx_tensor_rand(&out, s2, 1, bad_dtypes[k], CPU, NULL), "nx_tensor_rand", val);
    EXPECT_ERR_OUT(NX_ERR_DTYPE, out, nx_tensor_from_data(&out, data, s2, 1, bad_dtypes[k], CPU, NULL),
                   "nx_tensor_from_data", val);
    EXPECT_ERR_OUT(NX_ERR_DTYPE, out, nx_tensor_arange(&out, 0, 3, 1, bad_dtypes[k], CPU, NULL), "nx_tensor_arange",
                   val);
  }
  /* devices */
  const nx_device bad_type0 = {(nx_device_type)0, 0}, bad_type3 = {(nx_device_type)3, 0};
  const nx_device bad_type99 = {(nx_device_type)99, 0}, bad_type_neg = {(nx_device_type)-5, 0};
  EXPECT_ERR_OUT(NX_ERR_DEVICE, out, nx_tensor_rand(&out, s2, 1, NX_F32, bad_type99, NULL), "nx_tensor_rand",
                 "device type 99");
  EXPECT_ERR_OUT(NX_ERR_DEVICE, out, nx_tensor_full(&out, s2, 1, 0, NX_F32, bad_type_neg, NULL), "nx_tensor_full",
                 "device type -5");
  const nx_device cpu1 = {NX_CPU, 1}, cpu_neg = {NX_CPU, -1};
  EXPECT_ERR_OUT(NX_ERR_DEVICE, out, nx_tensor_zeros(&out, s2, 1, NX_F32, bad_type0, NULL), "nx_tensor_zeros",
                 "device type 0");
  EXPECT_ERR_OUT(NX_ERR_DEVICE, out, nx_tensor_zeros(&out, s2, 1, NX_F32, bad_type3, NULL), "nx_tensor_zeros",
                 "device type 3");
  EXPECT_ERR_OUT(NX_ERR_DEVICE, out, nx_tensor_ones(&out, s2, 1, NX_F32, cpu1, NULL), "nx_tensor_ones", "1");
  EXPECT_ERR_OUT(NX_ERR_DEVICE, out, nx_tensor_from_data(&out, data, s2, 1, NX_F32, cpu_neg, NULL),
                 "nx_tensor_from_data", "-1");
  nx_stream s;
  EXPECT_ERR_OUT(NX_ERR_DEVICE, s, nx_stream_create(&s, bad_type3), "nx_stream_create", "3");
  if (nx_cuda_device_count() == 0) {
    /* a CUDA device in a build (or on a machine) without a GPU */
    const nx_device cuda0 = {NX_CUDA, 0};
    EXPECT_ERR_OUT(NX_ERR_DEVICE, out, nx_tensor_zeros(&out, s2, 1, NX_F32, cuda0, NULL), "nx_tensor_zeros", "cuda");
    EXPECT_ERR_OUT(NX_ERR_DEVICE, out, nx_tensor_from_data(&out, data, s2, 1, NX_F32, cuda0, NULL),
                   "nx_tensor_from_data", "cuda");
    EXPECT_ERR_OUT(NX_ERR_DEVICE, out, nx_tensor_randn(&out, s2, 1, NX_F32, cuda0, NULL), "nx_tensor_randn", "cuda");
    EXPECT_ERR_OUT(NX_ERR_DEVICE, out, nx_tensor_arange(&out, 0, 2, 1, NX_F32, cuda0, NULL), "nx_tensor_arange",
                   "cuda");
    EXPECT_ERR_OUT(NX_ERR_DEVICE, s, nx_stream_create(&s, cuda0), "nx_stream_create", "cuda");
  }
}

static void test_negative_dimensions(void** state) {
  (void)state;
  const int64_t bad[2] = {2, -1}, bad3[3] = {-5, 1, 1};
  const float data[2] = {1, 2};
  nx_tensor out;
  EXPECT_ERR_OUT(NX_ERR_SHAPE, out, nx_tensor_zeros(&out, bad, 2, NX_F32, CPU, NULL), "nx_tensor_zeros", "negative",
                 "[2,-1]");
  EXPECT_ERR_OUT(NX_ERR_SHAPE, out, nx_tensor_ones(&out, bad3, 3, NX_F64, CPU, NULL), "nx_tensor_ones", "[-5,1,1]");
  EXPECT_ERR_OUT(NX_ERR_SHAPE, out, nx_tensor_full(&out, bad, 2, 1, NX_I32, CPU, NULL), "nx_tensor_full", "[2,-1]");
  EXPECT_ERR_OUT(NX_ERR_SHAPE, out, nx_tensor_rand(&out, bad, 2, NX_F32, CPU, NULL), "nx_tensor_rand", "[2,-1]");
  EXPECT_ERR_OUT(NX_ERR_SHAPE, out, nx_tensor_randn(&out, bad, 2, NX_F32, CPU, NULL), "nx_tensor_randn", "[2,-1]");
  EXPECT_ERR_OUT(NX_ERR_SHAPE, out, nx_tensor_from_data(&out, data, bad, 2, NX_F32, CPU, NULL), "nx_tensor_from_data",
                 "[2,-1]");
}

/* Shapes whose element count or byte count does not fit: an error, never a wrapped-around
 * small allocation that kernels then overrun. */
/* Found by the fuzzers (tests/fuzz): gather on a 0-d tensor read its empty shape vector (index_add
 * and scatter_add, its relatives inside autodiff, refuse scalars the same way). */
static void test_index_ops_refuse_scalars(void** state) {
  (void)state;
  nx_tensor x = NULL, idx = NULL, out;
  const double v = 2.0;
  const int64_t zero = 0;
  NX_OK_(nx_tensor_from_data(&x, &v, NULL, 0, NX_F64, CPU, NULL));
  NX_OK_(nx_tensor_from_data(&idx, &zero, NULL, 0, NX_I64, CPU, NULL));
  EXPECT_ERR_OUT(NX_ERR_SHAPE, out, nx_gather(&out, x, idx, 0, NULL), "nx_gather", "scalar");
  /* cat of empty [3, 2^62, 0] tensors on axis 0: the third part's offset, 6 * 2^62, overflowed */
  const int64_t empty_shape[3] = {3, (int64_t)1 << 62, 0};
  nx_tensor e = NULL, parts[3];
  NX_OK_(nx_tensor_zeros(&e, empty_shape, 3, NX_F32, CPU, NULL));
  parts[0] = parts[1] = parts[2] = e;
  NX_OK_(nx_cat(&out, parts, 3, 0, NULL));
  nx_tensor_free(out);
  nx_tensor_free(e);
  nx_tensor_free(x);
  nx_tensor_free(idx);
}

/* ALiBi attention on a view with 2^40 heads (an expanded q, or an empty batch of them): refused
 * or done at once, without building a slope per head first (found by tests/fuzz/fuzz_capi). */
static void test_alibi_attention_on_huge_head_counts(void** state) {
  (void)state;
  const int64_t one[4] = {1, 1, 1, 8}, huge[4] = {1, (int64_t)1 << 40, 1, 8}, empty[4] = {0, (int64_t)1 << 40, 1, 8};
  nx_tensor base = NULL, q = NULL, e = NULL, out = SENTINEL;
  NX_OK_(nx_tensor_ones(&base, one, 4, NX_F32, CPU, NULL));
  NX_OK_(nx_expand(&q, base, huge, 4, NULL));
  EXPECT_ERR(NX_ERR_OUT_OF_MEMORY, nx_flash_attention(&out, q, q, q, true, true, 0.0, NULL), "nx_flash_attention");
  assert_null(out);
  NX_OK_(nx_expand(&e, base, empty, 4, NULL));
  NX_OK_(nx_flash_attention(&out, e, e, e, false, true, 0.0, NULL));
  int64_t n = -1;
  NX_OK_(nx_tensor_numel(out, &n));
  assert_int_equal(n, 0);
  nx_tensor_free(out);
  nx_tensor_free(e);
  nx_tensor_free(q);
  nx_tensor_free(base);
}

static void test_huge_shapes(void** state) {
  (void)state;
  const int64_t s62[1] = {(int64_t)1 << 62}, s40[2] = {(int64_t)1 << 40, (int64_t)1 << 40};
  const float data[1] = {0};
  nx_tensor out;
  /* 2^62 f64 elements: 2^65 bytes */
  EXPECT_ERR_OUT(NX_ERR_OUT_OF_MEMORY, out, nx_tensor_zeros(&out, s62, 1, NX_F64, CPU, NULL), "nx_tensor_zeros",
                 "[4611686018427387904]", "f64");
  EXPECT_ERR_OUT(NX_ERR_OUT_OF_MEMORY, out, nx_tensor_full(&out, s62, 1, 1.0, NX_I32, CPU, NULL), "nx_tensor_full",
                 "[4611686018427387904]");
  /* INT64_MAX bf16 elements: 2^64 - 2 bytes, which the CPU allocator's rounding to 64 bytes
   * wrapped to 0, so a kernel wrote past a 64-byte block (found by tests/fuzz/fuzz_capi) */
  const int64_t smax[1] = {INT64_MAX};
  EXPECT_ERR_OUT(NX_ERR_OUT_OF_MEMORY, out, nx_tensor_randn(&out, smax, 1, NX_BF16, CPU, NULL), "nx_tensor_randn",
                 "cannot allocate");
  /* 2^80 elements: more than an int64 counts */
  EXPECT_ERR_OUT(NX_ERR_SHAPE, out, nx_tensor_zeros(&out, s40, 2, NX_F32, CPU, NULL), "nx_tensor_zeros",
                 "[1099511627776,1099511627776]");
  EXPECT_ERR_OUT(NX_ERR_SHAPE, out, nx_tensor_ones(&out, s40, 2, NX_BOOL, CPU, NULL), "nx_tensor_ones", "1099511627776");
  EXPECT_ERR_OUT(NX_ERR_SHAPE, out, nx_tensor_from_data(&out, data, s40, 2, NX_F32, CPU, NULL), "nx_tensor_from_data",
                 "1099511627776");
  EXPECT_ERR_OUT(NX_ERR_SHAPE, out, nx_tensor_randn(&out, s40, 2, NX_F32, CPU, NULL), "nx_tensor_randn",
                 "1099511627776");
#ifndef __SANITIZE_ADDRESS__ /* ASan aborts on allocations past its limit instead of returning NULL */
  /* representable but larger than any memory: 2^45 f32 = 128 TiB */
  const int64_t s45[1] = {(int64_t)1 << 45};
  EXPECT_ERR_OUT(NX_ERR_OUT_OF_MEMORY, out, nx_tensor_zeros(&out, s45, 1, NX_F32, CPU, NULL), "nx_tensor_zeros",
                 "140737488355328");
#endif
  /* with a zero dimension any other sizes give an empty tensor */
  const int64_t z[3] = {(int64_t)1 << 40, (int64_t)1 << 40, 0};
  NX_OK_(nx_tensor_zeros(&out, z, 3, NX_F32, CPU, NULL));
  assert_int_equal(tensor_numel(out), 0);
  /* reshaping it to a shape whose count overflows is refused */
  const int64_t big[2] = {(int64_t)1 << 32, (int64_t)1 << 32};
  nx_tensor r;
  EXPECT_ERR_OUT(NX_ERR_SHAPE, r, nx_reshape(&r, out, big, 2, NULL), "nx_reshape", "4294967296");
  /* ... while -1 next to huge dimensions infers the 0 */
  const int64_t infer[3] = {(int64_t)1 << 40, (int64_t)1 << 40, -1};
  NX_OK_(nx_reshape(&r, out, infer, 3, NULL));
  assert_shape(r, (int64_t)1 << 40, (int64_t)1 << 40, 0);
  nx_tensor_free(r);
  nx_tensor_free(out);
}

/* ---------------------------------------------------------------- values */
static void test_bad_values(void** state) {
  (void)state;
  const int64_t s23[2] = {2, 3};
  nx_tensor x = filled(s23, 2, NX_F32, 1), out;
  /* copy_to_host with a wrong byte count */
  float buf[8];
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_copy_to_host(x, buf, 20, NULL), "nx_tensor_copy_to_host", "20", "24",
             "[2,3]");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_copy_to_host(x, buf, 32, NULL), "nx_tensor_copy_to_host", "32", "24");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_copy_to_host(x, buf, 0, NULL), "nx_tensor_copy_to_host", "24");
  /* shape/strides with too small a capacity */
  int64_t dims[2] = {-7, -7};
  const int64_t s234[3] = {2, 3, 4};
  nx_tensor x3 = filled(s234, 3, NX_F32, 0);
  EXPECT_ERR(NX_ERR_SHAPE, nx_tensor_shape(x3, dims, 2), "nx_tensor_shape", "capacity 2", "3");
  EXPECT_ERR(NX_ERR_SHAPE, nx_tensor_strides(x3, dims, 1), "nx_tensor_strides", "capacity 1", "3");
  EXPECT_ERR(NX_ERR_SHAPE, nx_tensor_shape(x3, dims, 0), "nx_tensor_shape", "capacity 0");
  /* item of more than one element */
  double v;
  EXPECT_ERR(NX_ERR_SHAPE, nx_tensor_item(x, &v, NULL), "nx_tensor_item", "[2,3]");
  /* arange */
  EXPECT_ERR_OUT(NX_ERR_INVALID_ARGUMENT, out, nx_tensor_arange(&out, 0, 5, 0, NX_F32, CPU, NULL), "nx_tensor_arange",
                 "step");
  EXPECT_ERR_OUT(NX_ERR_INVALID_ARGUMENT, out, nx_tensor_arange(&out, 0, INFINITY, 1, NX_F32, CPU, NULL),
                 "nx_tensor_arange", "inf");
  EXPECT_ERR_OUT(NX_ERR_INVALID_ARGUMENT, out, nx_tensor_arange(&out, NAN, 1, 1, NX_F32, CPU, NULL),
                 "nx_tensor_arange", "nan");
  nx_tensor_free(x);
  nx_tensor_free(x3);
}

/* NULL handles, out pointers and arrays (and array entries) of the fused ops, which have optional
 * tensors (NULL allowed) beside required ones, and two outputs or four arrays. */
static void test_fused_null_arguments(void** state) {
  (void)state;
  const int64_t s23[2] = {2, 3}, s3[1] = {3};
  nx_tensor x = filled(s23, 2, NX_F32, 1), w3 = filled(s3, 1, NX_F32, 1), out, sum;
  EXPECT_ERR_OUT(NX_ERR_INVALID_ARGUMENT, out, nx_rms_norm(&out, NULL, w3, 1e-5, NULL), "nx_rms_norm", "x is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_rms_norm(NULL, x, w3, 1e-5, NULL), "nx_rms_norm", "out is NULL");
  sum = SENTINEL;
  EXPECT_ERR_OUT(NX_ERR_INVALID_ARGUMENT, out, nx_add_layer_norm(&out, &sum, x, NULL, w3, w3, 1e-5, NULL),
                 "nx_add_layer_norm", "residual is NULL");
  assert_null(sum);
  EXPECT_ERR_OUT(NX_ERR_INVALID_ARGUMENT, out, nx_add_rms_norm(&out, NULL, x, x, w3, 1e-5, NULL), "nx_add_rms_norm",
                 "sum_out is NULL");
  EXPECT_ERR_OUT(NX_ERR_INVALID_ARGUMENT, out, nx_softmax_cross_entropy(&out, x, NULL, -100, NX_REDUCTION_MEAN, NULL),
                 "nx_softmax_cross_entropy", "NULL");
  /* multi-tensor Adam: a NULL array with a non-zero count, a NULL entry, a wrong struct_size */
  nx_tensor p[1] = {x}, nul[1] = {NULL}, m[1] = {NULL}, v[1] = {NULL};
  NX_OK_(nx_tensor_zeros(&m[0], s23, 2, NX_F32, CPU, NULL));
  NX_OK_(nx_tensor_zeros(&v[0], s23, 2, NX_F32, CPU, NULL));
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_adam_step_multi(NULL, p, m, v, 1, 1, NULL, NULL),
             "nx_adam_step_multi", "NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_adam_step_multi(p, nul, m, v, 1, 1, NULL, NULL),
             "nx_adam_step_multi", "NULL");
  nx_adam_options small = NX_ADAM_OPTIONS_DEFAULT, big = NX_ADAM_OPTIONS_DEFAULT;
  small.struct_size = 3;
  big.struct_size = sizeof big + 8;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_adam_step_multi(p, p, m, v, 1, 1, &small, NULL), "nx_adam_step_multi",
             "options->struct_size is 3");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_adam_step_multi(p, p, m, v, 1, 1, &big, NULL), "nx_adam_step_multi",
             "newer nexus.h");
  nx_tensor_free(x);
  nx_tensor_free(w3);
  nx_tensor_free(m[0]);
  nx_tensor_free(v[0]);
}

static void test_other_objects(void** state) {
  (void)state;
  /* graph and safetensors handles: NULL is reported */
  size_t n;
  const char* s;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_graph_node_count(NULL, &n), "nx_graph_node_count", "NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_graph_node_name(NULL, 0, &s), "nx_graph_node_name", "NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_graph_to_dot(NULL, &s), "nx_graph_to_dot", "NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_graph_saved_bytes(NULL, &n), "nx_graph_saved_bytes", "NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_safetensors_count(NULL, &n), "nx_safetensors_count", "NULL");
  nx_graph_free(NULL);
  nx_safetensors_free(NULL);
  /* a graph node index past the end */
  const int64_t s2[1] = {2};
  nx_tensor x = filled(s2, 1, NX_F32, 1), y = NULL;
  NX_OK_(nx_tensor_set_requires_grad(x, true));
  NX_OK_(nx_exp(&y, x, NULL));
  nx_graph g = NULL;
  NX_OK_(nx_graph_create(&g, y));
  NX_OK_(nx_graph_node_count(g, &n));
  assert_int_equal(n, 1);
  s = SENTINEL;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_graph_node_name(g, 1, &s), "nx_graph_node_name", "1", "1 nodes");
  nx_graph_free(g);
  /* checkpoint without a function */
  nx_tensor outs[1] = {SENTINEL};
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_checkpoint(outs, 1, &x, 1, NULL, NULL, NULL), "nx_checkpoint", "fn");
  assert_null(outs[0]);
  nx_tensor_free(x);
  nx_tensor_free(y);
}

/* ---------------------------------------------------------------- thread-local errors */
struct thread_result {
  char initial[64];
  char message[512];
  nx_status status;
  bool grad_enabled;
};

static void* other_thread(void* arg) {
  struct thread_result* r = arg;
  snprintf(r->initial, sizeof r->initial, "%s", nx_last_error_message());
  r->grad_enabled = grad_enabled();
  const int64_t s2[1] = {2}, s3[1] = {3};
  nx_tensor a = NULL, b = NULL, out = SENTINEL;
  nx_tensor_zeros(&a, s2, 1, NX_F32, CPU, NULL);
  nx_tensor_zeros(&b, s3, 1, NX_F32, CPU, NULL);
  r->status = nx_add(&out, a, b, NULL);
  snprintf(r->message, sizeof r->message, "%s", nx_last_error_message());
  nx_tensor_free(a);
  nx_tensor_free(b);
  return NULL;
}

static void test_last_error_is_thread_local(void** state) {
  (void)state;
  const int64_t s24[2] = {2, 4}, s33[2] = {3, 3};
  nx_tensor a = filled(s24, 2, NX_F32, 1), b = filled(s33, 2, NX_F32, 1), out;
  EXPECT_ERR_OUT(NX_ERR_SHAPE, out, nx_matmul(&out, a, b, NULL), "nx_matmul", "inner dimensions differ");
  char mine[512];
  snprintf(mine, sizeof mine, "%s", nx_last_error_message());
  nx_autograd_set_enabled(false);
  struct thread_result r;
  memset(&r, 0, sizeof r);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, other_thread, &r), 0);
  assert_int_equal(pthread_join(th, NULL), 0);
  nx_autograd_set_enabled(true);
  /* the new thread started with no error and with its own grad mode */
  assert_string_equal(r.initial, "");
  assert_true(r.grad_enabled);
  /* it saw its own error ... */
  assert_int_equal(r.status, NX_ERR_SHAPE);
  assert_non_null(strstr(r.message, "nx_add"));
  assert_non_null(strstr(r.message, "[2]"));
  assert_non_null(strstr(r.message, "[3]"));
  /* ... and this thread's message is untouched */
  assert_string_equal(nx_last_error_message(), mine);
  assert_non_null(strstr(nx_last_error_message(), "nx_matmul"));
  /* clear_error forgets it */
  nx_clear_error();
  assert_string_equal(nx_last_error_message(), "");
  nx_tensor_free(a);
  nx_tensor_free(b);
}

/* Pooling reads H and W of a [N, C, H, W] input: a 3-d input used to read past its shape
 * (issue 17); a window larger than the image is refused too. */
static void test_pooling_shapes(void** state) {
  (void)state;
  nx_module pools[2] = {NULL, NULL};
  NX_OK_(nx_max_pool2d_create(&pools[0], 2, 2));
  NX_OK_(nx_avg_pool2d_create(&pools[1], 3, 1));
  const int64_t s3[3] = {2, 4, 4}, small[4] = {1, 1, 2, 2};
  nx_tensor x3 = NULL, xs = NULL, out = SENTINEL;
  NX_OK_(nx_tensor_zeros(&x3, s3, 3, NX_F32, CPU, NULL));
  NX_OK_(nx_tensor_zeros(&xs, small, 4, NX_F32, CPU, NULL));
  for (int i = 0; i < 2; ++i) {
    out = SENTINEL;
    EXPECT_ERR(NX_ERR_SHAPE, nx_module_forward(&out, pools[i], x3, NULL), "nx_module_forward", "[N, C, H, W]", "[2,4,4]");
    assert_null(out);
  }
  EXPECT_ERR(NX_ERR_SHAPE, nx_module_forward(&out, pools[1], xs, NULL), "nx_module_forward", "3x3", "does not fit");
  assert_null(out);
  nx_tensor_free(x3);
  nx_tensor_free(xs);
  nx_module_free(pools[0]);
  nx_module_free(pools[1]);
}

/* nx_transformer_config grew a field in 1.1 (activation): a struct of the 1.0 size is still read
 * (rule 4) and means exact GELU; a smaller size, a larger one and a bad activation are refused. */
static nx_tensor gpt_logits(const nx_transformer_config* cfg) {
  nx_module gpt = NULL;
  nx_random_set_seed(77);
  NX_OK_(nx_gpt_create(&gpt, cfg, NX_F32, CPU, NULL));
  const int64_t ids[4] = {1, 2, 3, 4}, shape[2] = {1, 4};
  nx_tensor x = NULL, logits = NULL;
  NX_OK_(nx_tensor_from_data(&x, ids, shape, 2, NX_I64, CPU, NULL));
  NX_OK_(nx_module_forward(&logits, gpt, x, NULL));
  nx_tensor_free(x);
  nx_module_free(gpt);
  return logits;
}
static void test_transformer_config_sizes(void** state) {
  (void)state;
  nx_transformer_config c = {sizeof c, 16, 8, 16, 1, 2, 0, 0, false, false, false, false, false, 0.0,
                             NX_ACTIVATION_GELU};
  nx_tensor gelu = gpt_logits(&c);
  c.struct_size = (uint32_t)offsetof(nx_transformer_config, activation); /* a program built against 1.0 */
  c.activation = (nx_activation)99;                                      /* beyond its struct: not read */
  nx_tensor old = gpt_logits(&c);
  c.struct_size = sizeof c;
  c.activation = NX_ACTIVATION_GELU_TANH;
  nx_tensor tanh_approx = gpt_logits(&c);
  float a[64], b[64], t[64];
  NX_OK_(nx_tensor_copy_to_host(gelu, a, sizeof a, NULL));
  NX_OK_(nx_tensor_copy_to_host(old, b, sizeof b, NULL));
  NX_OK_(nx_tensor_copy_to_host(tanh_approx, t, sizeof t, NULL));
  double differs = 0;
  for (int i = 0; i < 64; ++i) {
    assert_true(a[i] == b[i]);
    differs = fmax(differs, fabs((double)a[i] - t[i]));
  }
  assert_true(differs > 0 && differs < 1e-2); /* the tanh approximation, not another model */
  nx_module m = SENTINEL;
  c.activation = (nx_activation)9;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_gpt_create(&m, &c, NX_F32, CPU, NULL), "nx_gpt_create",
             "config->activation is 9");
  assert_null(m);
  c.activation = NX_ACTIVATION_GELU;
  c.checkpoint_every = -1;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_gpt_create(&m, &c, NX_F32, CPU, NULL), "checkpoint_every must be >= 0");
  c.struct_size = (uint32_t)offsetof(nx_transformer_config, checkpoint_every); /* a program built against 1.1 */
  NX_OK_(nx_gpt_create(&m, &c, NX_F32, CPU, NULL));                              /* -1 beyond its struct: not read */
  nx_module_free(m);
  c.struct_size = 8;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_gpt_create(&m, &c, NX_F32, CPU, NULL), "config->struct_size is 8");
  c.struct_size = sizeof c + 8;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_gpt_create(&m, &c, NX_F32, CPU, NULL), "newer nexus.h");
  nx_tensor_free(gelu);
  nx_tensor_free(old);
  nx_tensor_free(tanh_approx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      NX_TEST(test_null_handles),
      NX_TEST(test_null_out_pointers),
      NX_TEST(test_freed_handles),
      NX_TEST(test_out_arrays_nulled_on_failure),
      NX_TEST(test_creation_dtypes),
      NX_TEST(test_invalid_dtype_and_device_values),
      NX_TEST(test_negative_dimensions),
      NX_TEST(test_huge_shapes), NX_TEST(test_alibi_attention_on_huge_head_counts),
      NX_TEST(test_index_ops_refuse_scalars),
      NX_TEST(test_bad_values),
      NX_TEST(test_fused_null_arguments),
      NX_TEST(test_other_objects),
      NX_TEST(test_pooling_shapes),
      NX_TEST(test_transformer_config_sizes),
      NX_TEST(test_last_error_is_thread_local),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
