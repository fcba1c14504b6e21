/* The C contract of communicators, data parallelism and loader sharding that holds on every
 * machine: argument checks (NULL, bad rank/size, bad ids), the id's hex and file forms, sharded
 * text batches, and NX_ERR_DEVICE where no GPU or no NCCL exists. With a GPU, tests/gpu/test_dist.cpp
 * covers the collectives themselves. */
#include <unistd.h>

#include "nx_test.h"

static const nx_device GPU0 = {NX_CUDA, 0};

static nx_comm_id sample_id(void) {
  nx_comm_id id;
  for (int i = 0; i < NX_COMM_ID_BYTES; ++i) id.bytes[i] = (uint8_t)(i * 37 + 11);
  return id;
}

static void test_id_hex_round_trip(void** state) {
  (void)state;
  nx_comm_id id = sample_id(), back;
  char hex[2 * NX_COMM_ID_BYTES + 1];
  size_t len = 0;
  NX_OK_(nx_comm_id_to_hex(&id, hex, sizeof hex, &len));
  assert_int_equal(len, 2 * NX_COMM_ID_BYTES);
  assert_int_equal(strlen(hex), len);
  assert_memory_equal(hex, "0b3055", 6); /* 11, 48, 85 */
  NX_OK_(nx_comm_id_from_hex(&back, hex));
  assert_memory_equal(back.bytes, id.bytes, NX_COMM_ID_BYTES);
  hex[0] = 'A'; /* upper case is accepted */
  NX_OK_(nx_comm_id_from_hex(&back, hex));
  assert_int_equal(back.bytes[0], 0xab);

  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_comm_id_to_hex(&id, hex, 2 * NX_COMM_ID_BYTES, &len), "nx_comm_id_to_hex",
             "too small", "256");
  assert_int_equal(len, 2 * NX_COMM_ID_BYTES); /* the size needed */
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_comm_id_to_hex(NULL, hex, sizeof hex, &len), "id is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_comm_id_to_hex(&id, hex, sizeof hex, NULL), "len is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_comm_id_from_hex(&back, "abc"), "nx_comm_id_from_hex", "3 characters");
  hex[17] = 'g';
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_comm_id_from_hex(&back, hex), "non-hex character at position 17");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_comm_id_from_hex(&back, NULL), "hex is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_comm_id_from_hex(NULL, hex), "out is NULL");
}

static void test_id_file_round_trip(void** state) {
  (void)state;
  char path[64];
  snprintf(path, sizeof path, "comm_id_%d.bin", (int)getpid());
  nx_comm_id id = sample_id(), back;
  NX_OK_(nx_comm_id_save(&id, path));
  NX_OK_(nx_comm_id_load(&back, path, 0.0));
  assert_memory_equal(back.bytes, id.bytes, NX_COMM_ID_BYTES);
  FILE* f = fopen(path, "wb"); /* truncated file */
  fwrite(id.bytes, 1, 10, f);
  fclose(f);
  EXPECT_ERR(NX_ERR_IO, nx_comm_id_load(&back, path, 0.0), "nx_comm_id_load", "holds 10 bytes");
  remove(path);
  EXPECT_ERR(NX_ERR_IO, nx_comm_id_load(&back, path, 0.05), "did not appear within 0.05 s");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_comm_id_load(&back, path, -1.0), "timeout_s must be >= 0");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_comm_id_load(&back, NULL, 0.0), "path is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_comm_id_save(NULL, path), "id is NULL");
  EXPECT_ERR(NX_ERR_IO, nx_comm_id_save(&id, "/nonexistent-dir/id.bin"), "nx_comm_id_save", "cannot write");
}

static void test_create_checks_arguments_first(void** state) {
  (void)state;
  nx_comm_id id = sample_id();
  nx_comm c = (nx_comm)SENTINEL;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_comm_create(&c, &id, 2, 2, GPU0), "nx_comm_create", "rank 2 is outside [0, 2)");
  assert_null(c);
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_comm_create(&c, &id, -1, 2, GPU0), "rank -1");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_comm_create(&c, &id, 0, 0, GPU0), "size must be at least 1, got 0");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_comm_create(&c, NULL, 0, 1, GPU0), "id is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_comm_create(NULL, &id, 0, 1, GPU0), "out is NULL");
  EXPECT_ERR(NX_ERR_DEVICE, nx_comm_create(&c, &id, 0, 1, CPU), "communicators live on CUDA devices");
  nx_device bad = {(nx_device_type)7, 0};
  EXPECT_ERR(NX_ERR_DEVICE, nx_comm_create(&c, &id, 0, 1, bad), "unknown device type 7");
  if (nx_cuda_device_count() == 0) {
    EXPECT_ERR(NX_ERR_DEVICE, nx_comm_create(&c, &id, 0, 1, GPU0), "nx_comm_create");
    nx_comm_id fresh;
    EXPECT_ERR(NX_ERR_DEVICE, nx_comm_id_create(&fresh), "nx_comm_id_create");
  }
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_comm_id_create(NULL), "out is NULL");
#ifndef NEXUS_TEST_HAVE_MPI
  EXPECT_ERR(NX_ERR_NOT_IMPLEMENTED, nx_comm_create_mpi(&c), "nx_comm_create_mpi", "no MPI support");
#endif
}

static void test_create_from_env_reports_what_is_missing(void** state) {
  (void)state;
  nx_comm c = (nx_comm)SENTINEL;
  unsetenv("NEXUS_RANK");
  unsetenv("NEXUS_WORLD_SIZE");
  unsetenv("NEXUS_COMM_ID");
  unsetenv("NEXUS_COMM_ID_FILE");
  unsetenv("NEXUS_LOCAL_RANK");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_comm_create_from_env(&c), "nx_comm_create_from_env", "NEXUS_RANK is not set");
  assert_null(c);
  setenv("NEXUS_RANK", "1", 1);
  setenv("NEXUS_WORLD_SIZE", "x2", 1);
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_comm_create_from_env(&c), "NEXUS_WORLD_SIZE='x2' is not an integer");
  setenv("NEXUS_WORLD_SIZE", "1", 1);
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_comm_create_from_env(&c), "rank 1 is outside [0, 1)");
  setenv("NEXUS_WORLD_SIZE", "2", 1);
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_comm_create_from_env(&c), "neither NEXUS_COMM_ID nor NEXUS_COMM_ID_FILE");
  setenv("NEXUS_COMM_ID", "00ff", 1);
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_comm_create_from_env(&c), "NEXUS_COMM_ID has 4 characters");
  unsetenv("NEXUS_RANK");
  unsetenv("NEXUS_WORLD_SIZE");
  unsetenv("NEXUS_COMM_ID");
}

static void test_collectives_reject_null_and_foreign_handles(void** state) {
  (void)state;
  int64_t shape[1] = {4};
  nx_tensor t, out = (nx_tensor)SENTINEL;
  NX_OK_(nx_tensor_ones(&t, shape, 1, NX_F32, CPU, NULL));
  int32_t v;
  nx_device d;
  size_t n;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_comm_all_reduce(t, NULL, NX_REDUCE_SUM, NULL), "nx_comm_all_reduce",
             "comm is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_comm_broadcast(t, NULL, 0, NULL), "nx_comm_broadcast", "comm is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_comm_reduce_scatter(&out, t, NULL, NX_REDUCE_SUM, NULL),
             "nx_comm_reduce_scatter", "comm is NULL");
  assert_null(out);
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_comm_all_gather(&out, t, NULL, NULL), "nx_comm_all_gather", "comm is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_comm_all_gather(NULL, t, NULL, NULL), "out is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_comm_rank(NULL, &v), "nx_comm_rank", "comm is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_comm_size((nx_comm)t, &v), "nx_comm_size", "not a live communicator");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_comm_device(NULL, &d), "nx_comm_device");
  nx_ddp ddp = (nx_ddp)SENTINEL;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_ddp_create(&ddp, &t, 1, NULL, 0, NULL), "nx_ddp_create", "comm is NULL");
  assert_null(ddp);
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_ddp_create(&ddp, NULL, 3, NULL, 0, NULL), "params is NULL but n is 3");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_ddp_create(&ddp, &t, 0, NULL, 0, NULL), "no parameters");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_ddp_finish(NULL, NULL), "nx_ddp_finish", "ddp is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_ddp_bucket_count(NULL, &n), "nx_ddp_bucket_count");
  nx_comm_free(NULL); /* no-ops */
  nx_ddp_free(NULL);
  nx_tensor_free(t);
}

/* world ranks with batch b see exactly the rows one loader with batch world * b gives, epoch
 * boundaries (reshuffles) included. */
static void test_sharded_loader_matches_one_big_batch(void** state) {
  (void)state;
  enum { N = 203, B = 3, T = 5, W = 3, STEPS = 7 };
  int64_t ids[N];
  for (int i = 0; i < N; ++i) ids[i] = (i * 7919) % 101;
  int64_t shape[1] = {N};
  nx_tensor tokens;
  NX_OK_(nx_tensor_from_data(&tokens, ids, shape, 1, NX_I64, CPU, NULL));
  nx_text_loader whole, part[W];
  NX_OK_(nx_text_loader_create(&whole, tokens, W * B, T, 42));
  for (int r = 0; r < W; ++r) {
    NX_OK_(nx_text_loader_create(&part[r], tokens, B, T, 42));
    NX_OK_(nx_text_loader_shard(part[r], r, W));
  }
  int64_t per_epoch = 0;
  NX_OK_(nx_text_loader_batches_per_epoch(part[0], &per_epoch));
  assert_int_equal(per_epoch, (N / T) / (W * B)); /* 40 windows / 9 per global batch */
  for (int step = 0; step < STEPS; ++step) { /* 7 * 9 = 63 windows: crosses an epoch */
    nx_tensor x, y;
    NX_OK_(nx_text_loader_next(&x, &y, whole, CPU, NULL));
    int64_t *wx, *wy;
    NX_OK_(nx_tensor_data_ptr(x, (void**)&wx));
    NX_OK_(nx_tensor_data_ptr(y, (void**)&wy));
    for (int r = 0; r < W; ++r) {
      nx_tensor px, py;
      NX_OK_(nx_text_loader_next(&px, &py, part[r], CPU, NULL));
      int64_t *a, *b;
      NX_OK_(nx_tensor_data_ptr(px, (void**)&a));
      NX_OK_(nx_tensor_data_ptr(py, (void**)&b));
      assert_memory_equal(a, wx + r * B * T, B * T * sizeof(int64_t));
      assert_memory_equal(b, wy + r * B * T, B * T * sizeof(int64_t));
      nx_tensor_free(px);
      nx_tensor_free(py);
    }
    nx_tensor_free(x);
    nx_tensor_free(y);
  }
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_text_loader_shard(part[0], 3, 3), "nx_text_loader_shard", "rank 3 and world size 3");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_text_loader_shard(part[0], 0, 0), "world size 0");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_text_loader_shard(NULL, 0, 1), "loader is NULL");
  /* a huge batch whose global batch wraps around int64 once sharded: refused, not a division by
   * zero in batches_per_epoch (issue 17) */
  nx_text_loader huge = NULL;
  NX_OK_(nx_text_loader_create(&huge, tokens, (int64_t)1 << 61, 1, 5));
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_text_loader_shard(huge, 0, 8), "nx_text_loader_shard", "overflows int64");
  int64_t huge_per_epoch = 0;
  NX_OK_(nx_text_loader_batches_per_epoch(huge, &huge_per_epoch));
  assert_int_equal(huge_per_epoch, 1);
  nx_text_loader_free(huge);
  nx_text_loader huge_window = SENTINEL;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_text_loader_create(&huge_window, tokens, (int64_t)1 << 40, (int64_t)1 << 30, 5),
             "nx_text_loader_create", "overflows int64");
  assert_null(huge_window);
  for (int r = 0; r < W; ++r) nx_text_loader_free(part[r]);
  nx_text_loader_free(whole);
  nx_tensor_free(tokens);
  assert_int_equal(nx_live_handle_count(NX_HANDLE_TENSOR), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_id_hex_round_trip),
      cmocka_unit_test(test_id_file_round_trip),
      cmocka_unit_test(test_create_checks_arguments_first),
      cmocka_unit_test(test_create_from_env_reports_what_is_missing),
      cmocka_unit_test(test_collectives_reject_null_and_foreign_handles),
      cmocka_unit_test(test_sharded_loader_matches_one_big_batch),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
