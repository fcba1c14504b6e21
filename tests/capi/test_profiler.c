/* The profiler (nx_profiler_*, nx_profile_*): what a step records (calls, kernels with shapes,
 * VJPs, bytes, user ranges, a plan's replayed kernels), how the events nest, the summary table's
 * figures against the events, the Chrome trace on disk, and every error path. NEXUS_TEST_DEVICE=cuda
 * runs it on the GPU (scripts/gpu_run.sh), where kernels must also carry device times.
 * tests/python/test_profiler.py parses the Chrome trace with a JSON reader. */
#include <pthread.h>

#include "nx_test.h"

static nx_device test_device(void) {
  const char* d = getenv("NEXUS_TEST_DEVICE");
  nx_device dev = {NX_CPU, 0};
  if (d && !strcmp(d, "cuda")) dev.type = NX_CUDA;
  return dev;
}

static nx_profile_event event_at(nx_profile p, int64_t i) {
  nx_profile_event e = {sizeof e};
  NX_OK_(nx_profile_get_event(p, i, &e));
  return e;
}

static int64_t event_count(nx_profile p) {
  int64_t n = -1;
  NX_OK_(nx_profile_event_count(p, &n));
  return n;
}

/* The index of the k-th event (0-based) of this kind and name, or -1. */
static int64_t find_event(nx_profile p, nx_profile_event_kind kind, const char* name, int k) {
  for (int64_t i = 0, n = event_count(p); i < n; ++i) {
    nx_profile_event e = event_at(p, i);
    if (e.kind == kind && !strcmp(e.name, name) && k-- == 0) return i;
  }
  return -1;
}

/* Every event lies inside its parent, on its thread, one level deeper, and began after it. */
static void assert_nesting(nx_profile p) {
  for (int64_t i = 0, n = event_count(p); i < n; ++i) {
    nx_profile_event e = event_at(p, i);
    assert_true(e.duration_us >= 0);
    if (e.parent < 0) {
      assert_int_equal(e.depth, 0);
      continue;
    }
    assert_true(e.parent < i);
    nx_profile_event q = event_at(p, e.parent);
    assert_int_equal(e.depth, q.depth + 1);
    assert_int_equal(e.thread, q.thread);
    assert_true(e.start_us >= q.start_us);
    assert_true(e.start_us + e.duration_us <= q.start_us + q.duration_us + 1e-3);
  }
}

static nx_tensor randn(const int64_t* shape, size_t ndim, bool grad) {
  nx_tensor t = NULL;
  NX_OK_(nx_tensor_randn(&t, shape, ndim, NX_F32, test_device(), NULL));
  if (grad) NX_OK_(nx_tensor_set_requires_grad(t, true));
  return t;
}

/* loss = sum(x @ w), backward: the step the tests profile. */
static void matmul_step(nx_tensor x, nx_tensor w) {
  nx_tensor y = NULL, loss = NULL;
  NX_OK_(nx_matmul(&y, x, w, NULL));
  NX_OK_(nx_sum(&loss, y, NULL, 0, false, NULL));
  NX_OK_(nx_backward(loss, NULL, NULL, NULL));
  nx_tensor_free(y);
  nx_tensor_free(loss);
}

static void test_records_calls_kernels_and_vjps(void** state) {
  (void)state;
  const int64_t sx[] = {4, 8}, sw[] = {8, 3};
  nx_tensor x = randn(sx, 2, false), w = randn(sw, 2, true);
  assert_false(nx_profiler_enabled());
  NX_OK_(nx_profiler_start(NULL));
  assert_true(nx_profiler_enabled());
  matmul_step(x, w);
  nx_profile p = NULL;
  NX_OK_(nx_profiler_stop(&p));
  assert_false(nx_profiler_enabled());
  assert_nesting(p);

  /* The call, and inside it the kernel with its operands (destination first). */
  const int64_t call = find_event(p, NX_PROFILE_API, "nx_matmul", 0);
  assert_true(call >= 0);
  const int64_t kernel = find_event(p, NX_PROFILE_KERNEL, "matmul", 0);
  assert_true(kernel >= 0);
  nx_profile_event k = event_at(p, kernel), c = event_at(p, call);
  assert_int_equal(k.parent, call);
  assert_string_equal(k.shapes, "f32[1,4,3] f32[1,4,8] f32[1,8,3]"); /* [batch, m, n] */
  assert_int_equal(k.device.type, test_device().type);
  assert_string_equal(c.shapes, "");
  assert_true(c.bytes_allocated >= 4 * 3 * 4); /* the product, at least */
  if (test_device().type == NX_CUDA) {
    assert_true(k.device_duration_us > 0);
    assert_true(k.device_start_us >= 0);
  } else {
    assert_true(k.device_duration_us == -1 && k.device_start_us == -1);
  }
  /* The VJPs inside nx_backward, each with the kernels it ran. */
  const int64_t backward = find_event(p, NX_PROFILE_API, "nx_backward", 0);
  const int64_t mm_vjp = find_event(p, NX_PROFILE_BACKWARD, "MatmulBackward", 0);
  const int64_t sum_vjp = find_event(p, NX_PROFILE_BACKWARD, "SumBackward", 0);
  assert_true(backward >= 0 && mm_vjp > backward && sum_vjp > backward);
  assert_int_equal(event_at(p, mm_vjp).parent, backward);
  assert_true(sum_vjp < mm_vjp); /* reverse order of the forward */
  int vjp_kernels = 0;
  for (int64_t i = 0, n = event_count(p); i < n; ++i)
    if (event_at(p, i).parent == mm_vjp && event_at(p, i).kind == NX_PROFILE_KERNEL) vjp_kernels++;
  assert_true(vjp_kernels >= 1); /* dW = x^T @ dy (a matmul at least) */

  /* The memory timeline: the product's allocation, inside the matmul kernel's call. */
  int64_t nmem = 0, found = 0;
  NX_OK_(nx_profile_memory_count(p, &nmem));
  assert_true(nmem > 0);
  for (int64_t i = 0; i < nmem; ++i) {
    nx_profile_memory_sample m = {sizeof m};
    NX_OK_(nx_profile_get_memory_sample(p, i, &m));
    assert_true(m.reserved >= m.allocated);
    if (m.delta == 4 * 3 * 4 && m.event >= 0 && (m.event == call || event_at(p, m.event).parent == call)) found++;
  }
  assert_int_equal(found, 1);

  /* Recording stopped: more calls change nothing in the profile. */
  const int64_t n = event_count(p);
  matmul_step(x, w);
  assert_int_equal(event_count(p), n);
  nx_profile_free(p);
  nx_tensor_free(x);
  nx_tensor_free(w);
}

/* The column of a summary row ("Calls" is field 2 after name and kind), or -1 when absent. */
static double summary_field(const char* table, const char* name, const char* kind, int field) {
  char key[128];
  snprintf(key, sizeof key, "\n%s ", name);
  for (const char* s = strstr(table, key); s; s = strstr(s + 1, key)) {
    char got_name[128], got_kind[32];
    double v[4];
    if (sscanf(s + 1, "%127s %31s %lf %lf %lf", got_name, got_kind, &v[0], &v[1], &v[2]) == 5 &&
        !strcmp(got_kind, kind))
      return v[field];
  }
  return -1;
}

static void test_summary_table(void** state) {
  (void)state;
  const int64_t sx[] = {16, 32}, sw[] = {32, 8};
  nx_tensor x = randn(sx, 2, false), w = randn(sw, 2, true);
  NX_OK_(nx_profiler_start(NULL));
  for (int i = 0; i < 3; ++i) matmul_step(x, w);
  nx_profile p = NULL;
  NX_OK_(nx_profiler_stop(&p));
  char* table = NULL;
  NX_OK_(nx_profile_summary(p, NX_PROFILE_SORT_TOTAL, 0, &table));
  assert_non_null(strstr(table, "Name"));
  /* Calls against the events; total time against the events' durations. */
  assert_true(summary_field(table, "nx_matmul", "api", 0) == 3);
  assert_true(summary_field(table, "MatmulBackward", "backward", 0) == 3);
  double total_ms = 0;
  for (int k = 0; k < 3; ++k) total_ms += event_at(p, find_event(p, NX_PROFILE_API, "nx_backward", k)).duration_us / 1e3;
  assert_true(fabs(summary_field(table, "nx_backward", "api", 1) - total_ms) <= 2e-3);
  /* Rows in descending order of the sort key. */
  const char* rows = strstr(strstr(table, "---") , "\n") + 1;
  double previous = INFINITY;
  int nrows = 0;
  for (const char* line = rows; *line && strncmp(line, "---", 3); line = strchr(line, '\n') + 1, ++nrows) {
    char name[128], kind[32];
    double calls, total;
    assert_int_equal(sscanf(line, "%127s %31s %lf %lf", name, kind, &calls, &total), 4);
    assert_true(total <= previous);
    previous = total;
  }
  assert_true(nrows >= 6);
  nx_string_free(table);
  NX_OK_(nx_profile_summary(p, NX_PROFILE_SORT_CALLS, 2, &table));
  rows = strstr(strstr(table, "---"), "\n") + 1;
  int limited = 0;
  for (const char* line = rows; *line && strncmp(line, "---", 3); line = strchr(line, '\n') + 1) limited++;
  assert_int_equal(limited, 2);
  nx_string_free(table);
  nx_profile_free(p);
  nx_tensor_free(x);
  nx_tensor_free(w);
}

static void test_ranges_enclose_the_calls(void** state) {
  (void)state;
  const int64_t s[] = {8, 8};
  nx_tensor x = randn(s, 2, false), w = randn(s, 2, true);
  NX_OK_(nx_profiler_range_push("outside")); /* no profiler: nothing, and no error */
  NX_OK_(nx_profiler_range_pop());
  NX_OK_(nx_profiler_start(NULL));
  NX_OK_(nx_profiler_range_push("step \"1\""));
  NX_OK_(nx_profiler_range_push("forward"));
  nx_tensor y = NULL;
  NX_OK_(nx_matmul(&y, x, w, NULL));
  NX_OK_(nx_profiler_range_pop());
  NX_OK_(nx_profiler_range_pop());
  EXPECT_ERR(NX_ERR_STATE, nx_profiler_range_pop(), "nx_profiler_range_pop", "no range is open");
  nx_profile p = NULL;
  NX_OK_(nx_profiler_stop(&p));
  assert_nesting(p);
  const int64_t step = find_event(p, NX_PROFILE_REGION, "step \"1\"", 0);
  const int64_t fwd = find_event(p, NX_PROFILE_REGION, "forward", 0);
  const int64_t mm = find_event(p, NX_PROFILE_API, "nx_matmul", 0);
  assert_true(step >= 0 && fwd >= 0 && mm >= 0);
  assert_int_equal(event_at(p, fwd).parent, step);
  assert_int_equal(event_at(p, mm).parent, fwd);
  assert_int_equal(find_event(p, NX_PROFILE_REGION, "outside", 0), -1);
  assert_int_equal(find_event(p, NX_PROFILE_API, "nx_profiler_range_push", 0), -1);
  nx_profile_free(p);
  nx_tensor_free(y);
  nx_tensor_free(x);
  nx_tensor_free(w);
}

static nx_status square_sum_step(nx_tensor* outputs, size_t noutputs, const nx_tensor* inputs, size_t ninputs,
                                 void* user) {
  (void)noutputs, (void)ninputs, (void)user;
  nx_tensor sq = NULL;
  nx_status st = nx_mul(&sq, inputs[0], inputs[0], NULL);
  if (st == NX_OK) st = nx_sum(&outputs[0], sq, NULL, 0, false, NULL);
  nx_tensor_free(sq);
  return st;
}

/* A compiled plan's replay: its nx_plan_run call holds the replayed kernels (CPU), or one
 * "CUDA graph" kernel event (GPU). */
static void test_plan_replay_shows_its_kernels(void** state) {
  (void)state;
  nx_plan plan = NULL;
  NX_OK_(nx_plan_create(&plan, square_sum_step, NULL, 1, NULL));
  const int64_t s[] = {64};
  nx_tensor x = randn(s, 1, false), out = NULL;
  for (int i = 0; i < 3; ++i) { /* eager, capture, then replays */
    NX_OK_(nx_plan_run(plan, &out, 1, &x, 1, NULL));
    nx_tensor_free(out);
  }
  NX_OK_(nx_profiler_start(NULL));
  NX_OK_(nx_plan_run(plan, &out, 1, &x, 1, NULL));
  nx_tensor_free(out);
  nx_profile p = NULL;
  NX_OK_(nx_profiler_stop(&p));
  nx_plan_stats st = {sizeof st};
  NX_OK_(nx_plan_get_stats(plan, &st));
  assert_true(st.replays >= 2);
  const int64_t run = find_event(p, NX_PROFILE_API, "nx_plan_run", 0);
  assert_true(run >= 0);
  int kernels = 0, graphs = 0;
  for (int64_t i = 0, n = event_count(p); i < n; ++i) {
    nx_profile_event e = event_at(p, i);
    if (e.parent != run || e.kind != NX_PROFILE_KERNEL) continue;
    kernels++;
    graphs += !strcmp(e.name, "CUDA graph");
  }
  if (st.cuda_graph) {
    assert_int_equal(graphs, 1);
  } else {
    assert_true(kernels >= 2); /* the input's copy, mul (or the fused chain), the sum */
  }
  nx_profile_free(p);
  nx_tensor_free(x);
  nx_plan_free(plan);
}

static void* thread_steps(void* arg) {
  nx_tensor* xw = (nx_tensor*)arg;
  for (int i = 0; i < 5; ++i) matmul_step(xw[0], xw[1]);
  return NULL;
}

/* Events of other threads land in the same profile, each nested on its own thread. */
static void test_threads_record_their_own_tracks(void** state) {
  (void)state;
  const int64_t s[] = {8, 8};
  nx_tensor xw[2][2];
  for (int t = 0; t < 2; ++t) xw[t][0] = randn(s, 2, false), xw[t][1] = randn(s, 2, true);
  NX_OK_(nx_profiler_start(NULL));
  pthread_t th[2];
  for (int t = 0; t < 2; ++t) assert_int_equal(pthread_create(&th[t], NULL, thread_steps, xw[t]), 0);
  for (int t = 0; t < 2; ++t) pthread_join(th[t], NULL);
  nx_profile p = NULL;
  NX_OK_(nx_profiler_stop(&p));
  assert_nesting(p);
  int per_thread[3] = {0, 0, 0};
  for (int64_t i = 0, n = event_count(p); i < n; ++i) {
    nx_profile_event e = event_at(p, i);
    assert_true(e.thread >= 0 && e.thread < 2);
    if (e.kind == NX_PROFILE_API && !strcmp(e.name, "nx_matmul")) per_thread[e.thread]++;
  }
  assert_int_equal(per_thread[0], 5);
  assert_int_equal(per_thread[1], 5);
  nx_profile_free(p);
  for (int t = 0; t < 2; ++t) nx_tensor_free(xw[t][0]), nx_tensor_free(xw[t][1]);
}

static void test_chrome_trace_is_written(void** state) {
  (void)state;
  const int64_t s[] = {8, 8};
  nx_tensor x = randn(s, 2, false), w = randn(s, 2, true);
  NX_OK_(nx_profiler_start(NULL));
  matmul_step(x, w);
  nx_profile p = NULL;
  NX_OK_(nx_profiler_stop(&p));
  const char* path = nx_scratch_path("trace.json");
  NX_OK_(nx_profile_save_chrome_trace(p, path));
  size_t n = 0;
  unsigned char* text = nx_read_file(path, &n);
  assert_non_null(text);
  assert_non_null(strstr((char*)text, "\"traceEvents\":["));
  assert_non_null(strstr((char*)text, "{\"name\":\"nx_matmul\",\"cat\":\"api\",\"ph\":\"X\""));
  assert_non_null(strstr((char*)text, "\"name\":\"MatmulBackward\",\"cat\":\"backward\""));
  assert_non_null(strstr((char*)text, "\"name\":\"memory\",\"ph\":\"C\""));
  free(text);
  char bad[512];
  snprintf(bad, sizeof bad, "%s/no/such/dir/trace.json", nx_scratch_path(""));
  EXPECT_ERR(NX_ERR_IO, nx_profile_save_chrome_trace(p, bad), "nx_profile_save_chrome_trace");
  nx_profile_free(p);
  nx_tensor_free(x);
  nx_tensor_free(w);
}

static void test_options_turn_parts_off(void** state) {
  (void)state;
  const int64_t s[] = {8, 8};
  nx_tensor x = randn(s, 2, false), w = randn(s, 2, true);
  const nx_profiler_options bare = {sizeof bare, false, false, false, false};
  NX_OK_(nx_profiler_start(&bare));
  matmul_step(x, w);
  nx_profile p = NULL;
  NX_OK_(nx_profiler_stop(&p));
  int64_t nmem = -1;
  NX_OK_(nx_profile_memory_count(p, &nmem));
  assert_int_equal(nmem, 0);
  nx_profile_event k = event_at(p, find_event(p, NX_PROFILE_KERNEL, "matmul", 0));
  assert_string_equal(k.shapes, "");
  assert_true(k.device_duration_us == -1);
  assert_true(event_at(p, find_event(p, NX_PROFILE_API, "nx_matmul", 0)).bytes_allocated > 0); /* still counted */
  nx_profile_free(p);
  nx_tensor_free(x);
  nx_tensor_free(w);
}

static void test_errors(void** state) {
  (void)state;
  nx_profile p = SENTINEL;
  EXPECT_ERR(NX_ERR_STATE, nx_profiler_stop(&p), "nx_profiler_stop", "no profiler is running");
  assert_null(p);
  nx_profiler_options bad = {7, true, true, true, true};
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_profiler_start(&bad), "nx_profiler_start", "struct_size is 7");
  assert_false(nx_profiler_enabled());
  NX_OK_(nx_profiler_start(NULL));
  EXPECT_ERR(NX_ERR_STATE, nx_profiler_start(NULL), "nx_profiler_start", "already running");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_profiler_range_push(NULL), "nx_profiler_range_push", "NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_profiler_range_push(""), "nx_profiler_range_push", "empty");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_profiler_range_push("bad \xff byte"), "nx_profiler_range_push", "UTF-8");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_profiler_stop(NULL), "nx_profiler_stop", "out");
  assert_true(nx_profiler_enabled()); /* a refused stop stops nothing */
  NX_OK_(nx_profiler_stop(&p));
  int64_t n = 0;
  NX_OK_(nx_profile_event_count(p, &n));
  nx_profile_event e = {sizeof e};
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_profile_get_event(p, n, &e), "nx_profile_get_event", "out of range");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_profile_get_event(p, -1, &e), "nx_profile_get_event", "-1");
  e.struct_size = 8;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_profile_get_event(p, 0, &e), "nx_profile_get_event", "struct_size is 8");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_profile_event_count(p, NULL), "nx_profile_event_count", "out");
  nx_profile_memory_sample m = {sizeof m};
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_profile_get_memory_sample(p, 0, &m), "nx_profile_get_memory_sample",
             "out of range");
  char* s = SENTINEL;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_profile_summary(p, (nx_profile_sort)7, 0, &s), "nx_profile_summary",
             "sort_by is 7");
  assert_null(s);
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_profile_summary(p, NX_PROFILE_SORT_SELF, -1, &s), "row_limit is -1");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_profile_save_chrome_trace(p, NULL), "nx_profile_save_chrome_trace", "path");
  nx_profile_free(p);
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_profile_event_count(p, &n), "nx_profile_event_count", "freed");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_profile_summary((nx_profile)SENTINEL, NX_PROFILE_SORT_TOTAL, 0, &s),
             "nx_profile_summary", "profile");
  nx_profile_free(p); /* a second free does nothing */
}

int main(void) {
  if (test_device().type == NX_CUDA && nx_cuda_device_count() == 0) {
    printf("NEXUS_TEST_DEVICE=cuda but no CUDA device: skipped\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      NX_TEST(test_records_calls_kernels_and_vjps),
      NX_TEST(test_summary_table),
      NX_TEST(test_ranges_enclose_the_calls),
      NX_TEST(test_plan_replay_shows_its_kernels),
      NX_TEST(test_threads_record_their_own_tracks),
      cmocka_unit_test_setup_teardown(test_chrome_trace_is_written, nx_scratch_create, nx_scratch_remove),
      NX_TEST(test_options_turn_parts_off),
      NX_TEST(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
