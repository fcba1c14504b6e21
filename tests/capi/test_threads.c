/* The thread-safety rules of nexus.h ("Threads"), one test each. CI runs this file under
 * ThreadSanitizer with OpenMP off (.ci/run), so a data race inside the engine fails the test
 * even when the values come out right. */
#include <pthread.h>
#include <semaphore.h>

#include "nx_test.h"

#define NTHREADS 4

/* CMocka's checks jump out of the test and may only run on the main thread: inside the
 * threads a failed call is printed and counted, and each test asserts the count after join. */
static int g_thread_failures;
#define T_OK(call)                                                                               \
  do {                                                                                           \
    nx_status st_ = (call);                                                                      \
    if (st_ != NX_OK) {                                                                          \
      fprintf(stderr, "%s:%d: %s returned %s: %s\n", __FILE__, __LINE__, #call, nx_status_string(st_), \
              nx_last_error_message());                                                          \
      __atomic_fetch_add(&g_thread_failures, 1, __ATOMIC_SEQ_CST);                               \
    }                                                                                            \
  } while (0)

static void run_threads(void* (*fn)(void*), void* args, size_t arg_size, int n) {
  pthread_t th[NTHREADS];
  for (int i = 0; i < n; ++i) assert_int_equal(pthread_create(&th[i], NULL, fn, (char*)args + (size_t)i * arg_size), 0);
  for (int i = 0; i < n; ++i) assert_int_equal(pthread_join(th[i], NULL), 0);
  assert_int_equal(__atomic_load_n(&g_thread_failures, __ATOMIC_SEQ_CST), 0);
}

static nx_tensor randn2(int64_t a, int64_t b) {
  const int64_t shape[2] = {a, b};
  nx_tensor t = NULL;
  T_OK(nx_tensor_randn(&t, shape, 2, NX_F32, CPU, NULL));
  return t;
}

/* ---------------------------------------------------------------- process-wide thread count */
struct count_reader {
  sem_t go, read;
  int32_t before, after;
};
static void* read_thread_count(void* arg) {
  struct count_reader* r = arg;
  T_OK(nx_cpu_get_num_threads(&r->before));  // this thread has made a call before the change
  sem_post(&r->read);
  sem_wait(&r->go);
  T_OK(nx_cpu_get_num_threads(&r->after));
  return NULL;
}
static void test_thread_count_applies_to_every_thread(void** state) {
  (void)state;
  const int32_t initial = num_threads();
  struct count_reader r;
  sem_init(&r.go, 0, 0);
  sem_init(&r.read, 0, 0);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, read_thread_count, &r), 0);
  sem_wait(&r.read);
  NX_OK_(nx_cpu_set_num_threads(1));  // on this thread: the other must see it
  sem_post(&r.go);
  assert_int_equal(pthread_join(th, NULL), 0);
  assert_int_equal(r.before, initial);
  assert_int_equal(r.after, 1);
  NX_OK_(nx_cpu_set_num_threads(0));  // back to the default, in new threads too
  r.before = -1;
  sem_post(&r.go);
  assert_int_equal(pthread_create(&th, NULL, read_thread_count, &r), 0);
  sem_wait(&r.read);
  assert_int_equal(pthread_join(th, NULL), 0);
  assert_int_equal(r.before, initial);
  assert_int_equal(num_threads(), initial);
  sem_destroy(&r.go);
  sem_destroy(&r.read);
}

/* ---------------------------------------------------------------- handles across threads */
/* Threads create handles of several types and put them in a shared pool; each thread frees
 * whatever the pool hands it, so most handles are freed by a thread that did not make them. */
#define POOL 64
static struct {
  pthread_mutex_t lock;
  void* items[POOL];
  int kinds[POOL];
  int count;
} g_pool = {PTHREAD_MUTEX_INITIALIZER, {0}, {0}, 0};

static void free_kind(int kind, void* h) {
  switch (kind) {
    case 0: nx_tensor_free((nx_tensor)h); break;
    case 1: nx_module_free((nx_module)h); break;
    case 2: nx_tokenizer_free((nx_tokenizer)h); break;
    default: nx_stream_free((nx_stream)h); break;
  }
}
static void* make_kind(int kind) {
  const int64_t s[1] = {8};
  void* h = NULL;
  switch (kind) {
    case 0: T_OK(nx_tensor_ones((nx_tensor*)&h, s, 1, NX_F32, CPU, NULL)); break;
    case 1: T_OK(nx_linear_create((nx_module*)&h, 4, 3, true, NX_F32, CPU, NULL)); break;
    case 2: T_OK(nx_tokenizer_bytes_create((nx_tokenizer*)&h)); break;
    default: T_OK(nx_stream_create((nx_stream*)&h, CPU)); break;
  }
  return h;
}
struct churn {
  unsigned seed;
  int failures;
};
static void* churn_handles(void* arg) {
  struct churn* c = arg;
  for (int i = 0; i < 400; ++i) {
    const int kind = (int)(rand_r(&c->seed) % 4);
    void* h = make_kind(kind);
    /* use it once, so lookups run beside the other threads' creates and frees */
    if (kind == 0) {
      int64_t numel = 0;
      if (nx_tensor_numel((nx_tensor)h, &numel) != NX_OK || numel != 8) c->failures++;
    } else if (kind == 1) {
      size_t n = 0;
      if (nx_module_parameter_count((nx_module)h, &n) != NX_OK || n != 2) c->failures++;
    }
    void* victim = NULL;
    int victim_kind = 0;
    pthread_mutex_lock(&g_pool.lock);
    if (g_pool.count == POOL || (g_pool.count > 0 && rand_r(&c->seed) % 2)) {
      const int k = (int)(rand_r(&c->seed) % (unsigned)g_pool.count);
      victim = g_pool.items[k];
      victim_kind = g_pool.kinds[k];
      g_pool.items[k] = g_pool.items[g_pool.count - 1];
      g_pool.kinds[k] = g_pool.kinds[g_pool.count - 1];
      g_pool.count--;
    }
    g_pool.items[g_pool.count] = h;
    g_pool.kinds[g_pool.count++] = kind;
    pthread_mutex_unlock(&g_pool.lock);
    if (victim) free_kind(victim_kind, victim);
  }
  return NULL;
}
static void test_handles_made_and_freed_on_any_thread(void** state) {
  (void)state;
  const nx_handle_type types[] = {NX_HANDLE_TENSOR, NX_HANDLE_MODULE, NX_HANDLE_TOKENIZER, NX_HANDLE_STREAM};
  int64_t before[4];
  for (int t = 0; t < 4; ++t) before[t] = nx_live_handle_count(types[t]);
  struct churn cs[NTHREADS];
  for (int i = 0; i < NTHREADS; ++i) cs[i] = (struct churn){(unsigned)(17 + i), 0};
  run_threads(churn_handles, cs, sizeof cs[0], NTHREADS);
  for (int i = 0; i < NTHREADS; ++i) assert_int_equal(cs[i].failures, 0);
  for (int k = 0; k < g_pool.count; ++k) free_kind(g_pool.kinds[k], g_pool.items[k]);
  g_pool.count = 0;
  for (int t = 0; t < 4; ++t) assert_int_equal(nx_live_handle_count(types[t]), before[t]);
}

/* A handle freed on one thread is reported as freed on another, however many handles were
 * made since (a stale handle never aliases a newer object). */
static void* make_and_free_tensor(void* arg) {
  nx_tensor* out = arg;
  *out = randn2(3, 3);
  nx_tensor_free(*out);
  for (int i = 0; i < 500; ++i) nx_tensor_free(randn2(2, 2));
  return NULL;
}
static void test_stale_handle_from_another_thread(void** state) {
  (void)state;
  nx_tensor stale = NULL;
  run_threads(make_and_free_tensor, &stale, sizeof stale, 1);
  assert_non_null(stale);
  nx_tensor y = SENTINEL;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_neg(&y, stale, NULL), "nx_neg", "freed");
  assert_null(y);
  nx_tensor_free(stale);  // a second free is a no-op, not a crash
}

/* ---------------------------------------------------------------- many readers of one tensor */
static nx_tensor g_w;     // shared weights, requires grad
static float g_want[16];  // the single-thread result
static void reader_result(float out[16], nx_tensor x) {
  nx_tensor h = NULL, r = NULL;
  T_OK(nx_matmul(&h, x, g_w, NULL));
  T_OK(nx_tanh(&r, h, NULL));
  T_OK(nx_tensor_copy_to_host(r, out, 16 * sizeof(float), NULL));
  nx_tensor_free(h);
  nx_tensor_free(r);
}
struct reader {
  nx_tensor x;
  int failures;
};
static void* read_shared(void* arg) {
  struct reader* r = arg;
  for (int i = 0; i < 100; ++i) {
    float got[16];
    /* grad mode on: each thread records its own graph over the shared leaf, and asks only for
     * its input's gradient, so no two threads accumulate into one tensor */
    reader_result(got, r->x);
    if (memcmp(got, g_want, sizeof got)) r->failures++;
    nx_tensor h = NULL, l = NULL, gx = NULL;
    T_OK(nx_matmul(&h, r->x, g_w, NULL));
    T_OK(nx_sum(&l, h, NULL, 0, false, NULL));
    T_OK(nx_autograd_grad(&gx, l, NULL, &r->x, 1, NULL, NULL));
    if (!gx) r->failures++;
    nx_tensor_free(h);
    nx_tensor_free(l);
    nx_tensor_free(gx);
  }
  return NULL;
}
static void test_threads_read_one_tensor(void** state) {
  (void)state;
  NX_OK_(nx_random_set_seed(3));
  g_w = randn2(8, 8);
  NX_OK_(nx_tensor_set_requires_grad(g_w, true));
  struct reader rs[NTHREADS];
  nx_tensor x = randn2(2, 8);
  NX_OK_(nx_tensor_set_requires_grad(x, true));
  reader_result(g_want, x);
  for (int i = 0; i < NTHREADS; ++i) {
    rs[i].x = x;  // one input too: read by every thread
    rs[i].failures = 0;
  }
  run_threads(read_shared, rs, sizeof rs[0], NTHREADS);
  for (int i = 0; i < NTHREADS; ++i) assert_int_equal(rs[i].failures, 0);
  nx_tensor g = SENTINEL;
  NX_OK_(nx_tensor_grad(&g, g_w));
  assert_null(g);  // nothing accumulated into the shared weights
  nx_tensor_free(x);
  nx_tensor_free(g_w);
}

/* ---------------------------------------------------------------- one model per thread */
struct trainer {
  nx_module gpt;
  nx_tensor tokens, targets;
  float losses[8];
};
static nx_module tiny_gpt(uint64_t seed) {
  nx_transformer_config c = {sizeof(nx_transformer_config), 32, 16, 32, 2, 2, 0, 0, false, true, true, true, true,
                             0.0, NX_ACTIVATION_GELU, 0};
  NX_OK_(nx_random_set_seed(seed));
  nx_module m = NULL;
  NX_OK_(nx_gpt_create(&m, &c, NX_F32, CPU, NULL));
  return m;
}
static void* train(void* arg) {
  struct trainer* t = arg;
  nx_tensor* params = NULL;
  size_t n = 0;
  T_OK(nx_module_parameters(t->gpt, &params, &n));
  nx_adam_options o = NX_ADAM_OPTIONS_DEFAULT;
  o.lr = 1e-2;
  o.decoupled_weight_decay = true;
  o.weight_decay = 0.1;
  nx_optimizer opt = NULL;
  T_OK(nx_adam_create(&opt, params, n, &o));
  for (int step = 0; step < 8; ++step) {
    nx_tensor logits = NULL, flat = NULL, loss = NULL;
    const int64_t flat_shape[2] = {-1, 32};
    T_OK(nx_module_forward(&logits, t->gpt, t->tokens, NULL));
    T_OK(nx_reshape(&flat, logits, flat_shape, 2, NULL));
    T_OK(nx_cross_entropy(&loss, flat, t->targets, -100, 0.0, NX_REDUCTION_MEAN, NULL));
    T_OK(nx_backward(loss, NULL, NULL, NULL));
    T_OK(nx_optimizer_step(opt, NULL));
    T_OK(nx_optimizer_zero_grad(opt));
    double v = 0;
    T_OK(nx_tensor_item(loss, &v, NULL));
    t->losses[step] = (float)v;
    nx_tensor_free(logits);
    nx_tensor_free(flat);
    nx_tensor_free(loss);
  }
  nx_optimizer_free(opt);
  nx_tensor_array_free(params, n);
  return NULL;
}
static void make_trainer(struct trainer* t, uint64_t seed) {
  t->gpt = tiny_gpt(seed);
  int64_t ids[2 * 16], next[2 * 16];
  for (int i = 0; i < 32; ++i) {
    ids[i] = (int64_t)((seed * 7 + (uint64_t)i * 5) % 32);
    next[i] = (int64_t)((seed * 3 + (uint64_t)i * 11) % 32);
  }
  const int64_t s[2] = {2, 16}, f[1] = {32};
  NX_OK_(nx_tensor_from_data(&t->tokens, ids, s, 2, NX_I64, CPU, NULL));
  NX_OK_(nx_tensor_from_data(&t->targets, next, f, 1, NX_I64, CPU, NULL));
}
static void free_trainer(struct trainer* t) {
  nx_module_free(t->gpt);
  nx_tensor_free(t->tokens);
  nx_tensor_free(t->targets);
}
static void test_each_thread_trains_its_own_model(void** state) {
  (void)state;
  struct trainer alone[NTHREADS], together[NTHREADS];
  for (int i = 0; i < NTHREADS; ++i) {
    make_trainer(&alone[i], 100 + (uint64_t)i);
    train(&alone[i]);
    make_trainer(&together[i], 100 + (uint64_t)i);
  }
  run_threads(train, together, sizeof together[0], NTHREADS);
  for (int i = 0; i < NTHREADS; ++i) {
    assert_memory_equal(alone[i].losses, together[i].losses, sizeof alone[i].losses);
    assert_true(together[i].losses[7] < together[i].losses[0]);
    free_trainer(&alone[i]);
    free_trainer(&together[i]);
  }
}

/* ---------------------------------------------------------------- the random generator */
/* Draws from several threads each take their own part of the stream: no two draws overlap. */
#define DRAWS 50
struct drawer {
  float first[DRAWS];
};
static void* draw(void* arg) {
  struct drawer* d = arg;
  for (int i = 0; i < DRAWS; ++i) {
    nx_tensor t = randn2(4, 16);
    float all[64];
    T_OK(nx_tensor_copy_to_host(t, all, sizeof all, NULL));
    d->first[i] = all[0];
    nx_tensor_free(t);
  }
  return NULL;
}
static int cmp_float(const void* a, const void* b) {
  const float x = *(const float*)a, y = *(const float*)b;
  return (x > y) - (x < y);
}
static void test_random_draws_from_threads_do_not_overlap(void** state) {
  (void)state;
  struct drawer ds[NTHREADS];
  run_threads(draw, ds, sizeof ds[0], NTHREADS);
  float all[NTHREADS * DRAWS];
  for (int i = 0; i < NTHREADS; ++i) memcpy(all + i * DRAWS, ds[i].first, sizeof ds[i].first);
  qsort(all, NTHREADS * DRAWS, sizeof(float), cmp_float);
  for (int i = 1; i < NTHREADS * DRAWS; ++i)
    if (all[i] == all[i - 1]) fail_msg("two draws start with the same value %g: the stream overlapped", (double)all[i]);
}

/* ---------------------------------------------------------------- settings while others compute */
static void* toggle_settings(void* arg) {
  (void)arg;
  for (int i = 0; i < 200; ++i) {
    T_OK(nx_runtime_set_deterministic(i % 2 == 0));
    T_OK(nx_cuda_set_tf32(i % 3 == 0));
    T_OK(nx_cpu_set_num_threads(1 + i % 2));
  }
  return NULL;
}
static void* compute(void* arg) {
  (void)arg;
  for (int i = 0; i < 100; ++i) {
    nx_tensor a = randn2(16, 16), b = NULL, s = NULL;
    T_OK(nx_matmul(&b, a, a, NULL));
    T_OK(nx_sum(&s, b, NULL, 0, false, NULL));
    bool det = false;
    T_OK(nx_runtime_get_deterministic(&det));
    nx_tensor_free(a);
    nx_tensor_free(b);
    nx_tensor_free(s);
  }
  return NULL;
}
static void test_settings_change_while_others_compute(void** state) {
  (void)state;
  bool det0 = false, tf32 = false;
  NX_OK_(nx_runtime_get_deterministic(&det0));
  NX_OK_(nx_cuda_get_tf32(&tf32));
  pthread_t setter, workers[2];
  assert_int_equal(pthread_create(&setter, NULL, toggle_settings, NULL), 0);
  for (int i = 0; i < 2; ++i) assert_int_equal(pthread_create(&workers[i], NULL, compute, NULL), 0);
  assert_int_equal(pthread_join(setter, NULL), 0);
  for (int i = 0; i < 2; ++i) assert_int_equal(pthread_join(workers[i], NULL), 0);
  assert_int_equal(g_thread_failures, 0);
  NX_OK_(nx_runtime_set_deterministic(det0));
  NX_OK_(nx_cuda_set_tf32(tf32));
  NX_OK_(nx_cpu_set_num_threads(0));
}

/* ---------------------------------------------------------------- per-thread state */
static void* autocast_elsewhere(void* arg) {
  nx_dtype* out = arg;
  T_OK(nx_autocast_get_dtype(NX_CPU, out));
  return NULL;
}
static void test_autocast_scope_is_per_thread(void** state) {
  (void)state;
  NX_OK_(nx_autocast_push(NX_CPU, NX_BF16, true));
  nx_dtype here = NX_F32, there = NX_BF16;
  NX_OK_(nx_autocast_get_dtype(NX_CPU, &here));
  run_threads(autocast_elsewhere, &there, sizeof there, 1);
  NX_OK_(nx_autocast_pop());
  assert_int_equal(here, NX_BF16);
  assert_int_equal(there, NX_F32);
}

/* ---------------------------------------------------------------- a plan, one thread at a time */
static struct {
  sem_t inside, release;
  bool block;
} g_plan_sync;
static nx_status double_it(nx_tensor* outputs, size_t noutputs, const nx_tensor* inputs, size_t ninputs, void* user) {
  (void)noutputs, (void)ninputs, (void)user;
  if (g_plan_sync.block) {
    sem_post(&g_plan_sync.inside);
    sem_wait(&g_plan_sync.release);
  }
  return nx_add(&outputs[0], inputs[0], inputs[0], NULL);
}
struct plan_call {
  nx_plan plan;
  nx_tensor x;
  nx_status status;
};
static void* run_plan(void* arg) {
  struct plan_call* c = arg;
  nx_tensor y = NULL;
  c->status = nx_plan_run(c->plan, &y, 1, &c->x, 1, NULL);
  nx_tensor_free(y);
  return NULL;
}
static void test_plan_refuses_a_second_thread(void** state) {
  (void)state;
  sem_init(&g_plan_sync.inside, 0, 0);
  sem_init(&g_plan_sync.release, 0, 0);
  struct plan_call c = {NULL, randn2(4, 4), NX_ERR_INTERNAL};
  NX_OK_(nx_plan_create(&c.plan, double_it, NULL, 1, NULL));
  g_plan_sync.block = true;
  pthread_t first;
  assert_int_equal(pthread_create(&first, NULL, run_plan, &c), 0);
  sem_wait(&g_plan_sync.inside);  // the first thread is inside the step
  nx_tensor y = SENTINEL;
  EXPECT_ERR(NX_ERR_STATE, nx_plan_run(c.plan, &y, 1, &c.x, 1, NULL), "nx_plan_run", "another thread");
  assert_null(y);
  g_plan_sync.block = false;
  sem_post(&g_plan_sync.release);
  assert_int_equal(pthread_join(first, NULL), 0);
  assert_int_equal(c.status, NX_OK);
  for (int i = 0; i < 3; ++i) {  // later calls from other threads, one at a time, trace and replay
    c.status = NX_ERR_INTERNAL;
    run_threads(run_plan, &c, sizeof c, 1);
    assert_int_equal(c.status, NX_OK);
  }
  nx_plan_stats st = {sizeof st};
  NX_OK_(nx_plan_get_stats(c.plan, &st));
  assert_true(st.replays >= 1);
  nx_plan_free(c.plan);
  nx_tensor_free(c.x);
  sem_destroy(&g_plan_sync.inside);
  sem_destroy(&g_plan_sync.release);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_thread_count_applies_to_every_thread),
      cmocka_unit_test(test_handles_made_and_freed_on_any_thread),
      cmocka_unit_test(test_stale_handle_from_another_thread),
      cmocka_unit_test(test_threads_read_one_tensor),
      cmocka_unit_test(test_each_thread_trains_its_own_model),
      cmocka_unit_test(test_random_draws_from_threads_do_not_overlap),
      cmocka_unit_test(test_settings_change_while_others_compute),
      cmocka_unit_test(test_autocast_scope_is_per_thread),
      cmocka_unit_test(test_plan_refuses_a_second_thread),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
