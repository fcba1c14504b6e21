/* The C contract of nexus.h's DLPack part: export and import of the legacy struct
 * (nx_dl_managed_tensor = DLManagedTensor) and of the versioned one (nx_dl_managed_tensor_versioned
 * = DLManagedTensorVersioned) share memory both ways, hand the deleter over exactly once, refuse
 * what they cannot take (leaving the struct to its owner); and nexus.h, included first, leaves
 * dlpack.h its own names (test_dlpack_header_first.c includes them the other way round). */
#include "nx_test.h"

/* nexus.h defines no DLPack name or macro: a dlpack.h included after it is not skipped. */
#if defined(DLPACK_DLPACK_H_) || defined(DLPACK_VERSION) || defined(DLPACK_MAJOR_VERSION) || \
    defined(DLPACK_ABI_VERSION) || defined(DLPACK_EXTERN_C) || defined(DLPACK_DLL)
#error "nexus.h defines a DLPack macro"
#endif
#if __has_include(<dlpack/dlpack.h>)
#include <dlpack/dlpack.h>
#define NX_HAVE_DLPACK_H 1
#ifndef DLPACK_DLPACK_H_
#error "dlpack.h included after nexus.h did not define its declarations"
#endif
#endif
#include "dlpack_layout.h"

static const double VALS[6] = {0, 1, 2, 3, 4, 5};
static const int64_t SHAPE23[2] = {2, 3};

/* ---------------------------------------------------------------- ours -> ours */
static void test_legacy_round_trip_shares_memory(void** state) {
  (void)state;
  nx_tensor t = make_tensor(VALS, SHAPE23, 2, NX_F64), tt = NULL, back = NULL;
  NX_OK_(nx_transpose(&tt, t, 0, 1, NULL)); /* a strided view travels as one */
  nx_dl_managed_tensor* m = NULL;
  NX_OK_(nx_tensor_to_dlpack(&m, tt));
  assert_non_null(m->deleter);
  assert_int_equal(m->dl_tensor.ndim, 2);
  assert_int_equal(m->dl_tensor.shape[0], 3);
  assert_int_equal(m->dl_tensor.strides[0], 1);
  assert_int_equal(m->dl_tensor.strides[1], 3);
  assert_int_equal(m->dl_tensor.device.device_type, NX_CPU);
  assert_int_equal(m->dl_tensor.dtype.code, NX_DL_FLOAT);
  NX_OK_(nx_tensor_from_dlpack(&back, m)); /* back owns m now */
  assert_shape(back, 3, 2);
  double got[6];
  read_f64(back, got, 6);
  assert_true(got[1] == 3 && got[4] == 2);
  nx_tensor_free(tt);
  nx_tensor_free(t); /* back keeps the memory alive */
  read_f64(back, got, 6);
  assert_true(got[5] == 5);
  nx_tensor_free(back);
}

static void test_versioned_round_trip_shares_memory(void** state) {
  (void)state;
  nx_tensor t = make_tensor(VALS, SHAPE23, 2, NX_F64), back = NULL, one = NULL;
  nx_dl_managed_tensor_versioned* m = NULL;
  NX_OK_(nx_tensor_to_dlpack_versioned(&m, t));
  assert_int_equal(m->version.major, NX_DL_MAJOR_VERSION);
  assert_int_equal(m->version.minor, NX_DL_MINOR_VERSION);
  assert_int_equal(m->flags, 0);
  assert_int_equal(m->dl_tensor.ndim, 2);
  assert_int_equal(m->dl_tensor.dtype.bits, 64);
  assert_non_null(m->manager_ctx);
  m->flags |= NX_DL_FLAG_IS_COPIED; /* accepted: the consumer owns a copy alone */
  NX_OK_(nx_tensor_from_dlpack_versioned(&back, m));
  const int64_t one_by_one[2] = {1, 1};
  NX_OK_(nx_tensor_full(&one, one_by_one, 2, 7.0, NX_F64, CPU, NULL));
  nx_tensor row = NULL, cell = NULL;
  NX_OK_(nx_slice(&row, back, 0, 1, 2, 1, NULL));
  NX_OK_(nx_slice(&cell, row, 1, 2, 3, 1, NULL)); /* element [1][2] */
  NX_OK_(nx_copy_(cell, one, NULL)); /* written through the import ... */
  double got[6];
  read_f64(t, got, 6);
  assert_true(got[5] == 7); /* ... seen by the exporter */
  nx_tensor_free(cell);
  nx_tensor_free(row);
  nx_tensor_free(one);
  nx_tensor_free(back);
  nx_tensor_free(t);
}

/* ---------------------------------------------------------------- refusals */
static int g_deleted;
static void count_deleter(nx_dl_managed_tensor_versioned* self) {
  (void)self;
  ++g_deleted;
}

static nx_dl_managed_tensor_versioned foreign_versioned(double* data, int64_t* shape, uint32_t major, uint64_t flags) {
  nx_dl_managed_tensor_versioned m;
  memset(&m, 0, sizeof m);
  m.version.major = major;
  m.flags = flags;
  m.deleter = count_deleter;
  describe_f64_vector(&m.dl_tensor, data, shape);
  return m;
}

/* A first element not aligned to its type (data + byte_offset): kernels would load it misaligned,
 * undefined behaviour that clang's UBSan reported under tests/fuzz/fuzz_dlpack. Refused. */
static void test_import_refuses_misaligned_data(void** state) {
  (void)state;
  double data[5] = {1, 2, 3, 4, 5};
  int64_t shape[1] = {4};
  nx_dl_managed_tensor_versioned m = foreign_versioned(data, shape, NX_DL_MAJOR_VERSION, 0);
  m.dl_tensor.byte_offset = 4;
  g_deleted = 0;
  nx_tensor t = SENTINEL;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_from_dlpack_versioned(&t, &m), "not aligned", "8-byte");
  assert_null(t);
  assert_int_equal(g_deleted, 0);
  m.dl_tensor.byte_offset = 8; /* aligned: accepted */
  NX_OK_(nx_tensor_from_dlpack_versioned(&t, &m));
  nx_tensor_free(t);
  assert_int_equal(g_deleted, 1);
}

static void test_versioned_import_refuses_read_only_and_other_majors(void** state) {
  (void)state;
  double data[4] = {1, 2, 3, 4};
  int64_t shape[1] = {4};
  nx_tensor out = SENTINEL;
  g_deleted = 0;
  nx_dl_managed_tensor_versioned ro = foreign_versioned(data, shape, NX_DL_MAJOR_VERSION, NX_DL_FLAG_READ_ONLY);
  EXPECT_ERR(NX_ERR_NOT_IMPLEMENTED, nx_tensor_from_dlpack_versioned(&out, &ro), "nx_tensor_from_dlpack_versioned",
             "read-only", "NX_DL_FLAG_READ_ONLY");
  assert_null(out);
  nx_dl_managed_tensor_versioned v2 = foreign_versioned(data, shape, NX_DL_MAJOR_VERSION + 1, 0);
  v2.version.minor = 3;
  out = SENTINEL;
  EXPECT_ERR(NX_ERR_NOT_IMPLEMENTED, nx_tensor_from_dlpack_versioned(&out, &v2), "nx_tensor_from_dlpack_versioned",
             "major version 2.3");
  assert_null(out);
  assert_int_equal(g_deleted, 0); /* refused: still the caller's */
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_from_dlpack_versioned(&out, NULL), "managed is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_to_dlpack_versioned(NULL, NULL), "nx_tensor_to_dlpack_versioned");

  /* accepted: the tensor owns the struct and calls its deleter once, when the last view dies */
  nx_dl_managed_tensor_versioned ok = foreign_versioned(data, shape, NX_DL_MAJOR_VERSION, 0);
  nx_tensor t = NULL, v = NULL;
  NX_OK_(nx_tensor_from_dlpack_versioned(&t, &ok));
  NX_OK_(nx_slice(&v, t, 0, 1, 3, 1, NULL));
  nx_tensor_free(t);
  assert_int_equal(g_deleted, 0);
  double got[2];
  read_f64(v, got, 2);
  assert_true(got[0] == 2 && got[1] == 3);
  nx_tensor_free(v);
  assert_int_equal(g_deleted, 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      NX_TEST(test_layout_matches_dlpack_h),
      NX_TEST(test_dlpack_h_structs_cross_with_a_cast),
      NX_TEST(test_legacy_round_trip_shares_memory),
      NX_TEST(test_versioned_round_trip_shares_memory),
      NX_TEST(test_versioned_import_refuses_read_only_and_other_majors), NX_TEST(test_import_refuses_misaligned_data),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
