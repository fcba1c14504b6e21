/* The handle table: for every handle type, a NULL, freed, stale (freed, its slot since reused by
 * a new object) and foreign (another type's handle, a made-up value) handle is refused with
 * NX_ERR_INVALID_ARGUMENT and a message naming the argument, a second free does nothing, and
 * nx_live_handle_count follows creation and freeing. Events, communicators and nx_ddp need a
 * GPU to be created; without one their freed/stale cases are skipped and only the NULL and
 * foreign ones run (tests/gpu covers them on the GPU machine). */
#include "nx_test.h"

/* One handle type: how to make one, use one (returning the call's status) and free it. */
typedef struct {
  const char* name;
  nx_handle_type type;
  void* (*make)(void);      /* NULL when it cannot be made here */
  nx_status (*use)(void*);  /* a call that reads the object behind the handle */
  void (*release)(void*);
  const char* argument;     /* the parameter name the message must give */
  bool null_ok;             /* NULL is a valid value (the default stream) */
} handle_kind;

#include <stdbool.h>

static const char* kPath = "test_handles.safetensors";

static nx_tensor small_tensor(void) {
  nx_tensor t = NULL;
  NX_OK_(nx_tensor_arange(&t, 0, 4, 1, NX_F32, CPU, NULL));
  return t;
}

static void* make_tensor_h(void) { return small_tensor(); }
static nx_status use_tensor(void* h) { size_t n; return nx_tensor_ndim((nx_tensor)h, &n); }
static void free_tensor(void* h) { nx_tensor_free((nx_tensor)h); }

static void* make_stream(void) { nx_stream s = NULL; NX_OK_(nx_stream_create(&s, CPU)); return s; }
static nx_status use_stream(void* h) { nx_device d; return nx_stream_device((nx_stream)h, &d); }
static void free_stream(void* h) { nx_stream_free((nx_stream)h); }

static nx_status use_event(void* h) { return nx_event_synchronize((nx_event)h); }
static void free_event(void* h) { nx_event_free((nx_event)h); }

static void* make_module(void) { nx_module m = NULL; NX_OK_(nx_linear_create(&m, 3, 2, true, NX_F32, CPU, NULL)); return m; }
static nx_status use_module(void* h) { size_t n; return nx_module_parameter_count((nx_module)h, &n); }
static void free_module(void* h) { nx_module_free((nx_module)h); }

static void* make_optimizer(void) {
  nx_tensor p = small_tensor();
  NX_OK_(nx_tensor_set_requires_grad(p, true));
  nx_optimizer o = NULL;
  NX_OK_(nx_sgd_create(&o, &p, 1, NULL));
  nx_tensor_free(p);
  return o;
}
static nx_status use_optimizer(void* h) { return nx_optimizer_zero_grad((nx_optimizer)h); }
static void free_optimizer(void* h) { nx_optimizer_free((nx_optimizer)h); }

static void* make_tokenizer(void) { nx_tokenizer t = NULL; NX_OK_(nx_tokenizer_bytes_create(&t)); return t; }
static nx_status use_tokenizer(void* h) { int64_t n; return nx_tokenizer_vocab_size((nx_tokenizer)h, &n); }
static void free_tokenizer(void* h) { nx_tokenizer_free((nx_tokenizer)h); }

static void* make_loader(void) {
  nx_tensor ids = NULL;
  NX_OK_(nx_tensor_arange(&ids, 0, 64, 1, NX_I64, CPU, NULL));
  nx_text_loader l = NULL;
  NX_OK_(nx_text_loader_create(&l, ids, 2, 4, 1));
  nx_tensor_free(ids);
  return l;
}
static nx_status use_loader(void* h) { int64_t n; return nx_text_loader_batches_per_epoch((nx_text_loader)h, &n); }
static void free_loader(void* h) { nx_text_loader_free((nx_text_loader)h); }

static void* make_safetensors(void) {
  nx_tensor t = small_tensor();
  const char* name = "w";
  NX_OK_(nx_safetensors_save(kPath, &name, &t, 1));
  nx_tensor_free(t);
  nx_safetensors f = NULL;
  NX_OK_(nx_safetensors_open(&f, kPath));
  return f;
}
static nx_status use_safetensors(void* h) { size_t n; return nx_safetensors_count((nx_safetensors)h, &n); }
static void free_safetensors(void* h) { nx_safetensors_free((nx_safetensors)h); }

static void* make_graph(void) {
  nx_tensor x = small_tensor(), y = NULL;
  NX_OK_(nx_tensor_set_requires_grad(x, true));
  NX_OK_(nx_exp(&y, x, NULL));
  nx_graph g = NULL;
  NX_OK_(nx_graph_create(&g, y));
  nx_tensor_free(y);
  nx_tensor_free(x);
  return g;
}
static nx_status use_graph(void* h) { size_t n; return nx_graph_node_count((nx_graph)h, &n); }
static void free_graph(void* h) { nx_graph_free((nx_graph)h); }

static nx_status use_comm(void* h) { int32_t n; return nx_comm_size((nx_comm)h, &n); }
static void free_comm(void* h) { nx_comm_free((nx_comm)h); }
static nx_status use_ddp(void* h) { size_t n; return nx_ddp_bucket_count((nx_ddp)h, &n); }
static void free_ddp(void* h) { nx_ddp_free((nx_ddp)h); }

static void* make_grad_scaler(void) { nx_grad_scaler s = NULL; NX_OK_(nx_grad_scaler_create(&s, NULL)); return s; }
static nx_status use_grad_scaler(void* h) { double v; return nx_grad_scaler_get_scale((nx_grad_scaler)h, &v); }
static void free_grad_scaler(void* h) { nx_grad_scaler_free((nx_grad_scaler)h); }

static const handle_kind kKinds[] = {
    {"tensor", NX_HANDLE_TENSOR, make_tensor_h, use_tensor, free_tensor, "t"},
    {"stream", NX_HANDLE_STREAM, make_stream, use_stream, free_stream, "stream", true},
    {"event", NX_HANDLE_EVENT, NULL, use_event, free_event, "event"},
    {"module", NX_HANDLE_MODULE, make_module, use_module, free_module, "m"},
    {"optimizer", NX_HANDLE_OPTIMIZER, make_optimizer, use_optimizer, free_optimizer, "opt"},
    {"tokenizer", NX_HANDLE_TOKENIZER, make_tokenizer, use_tokenizer, free_tokenizer, "tok"},
    {"text loader", NX_HANDLE_TEXT_LOADER, make_loader, use_loader, free_loader, "loader"},
    {"SafeTensors file", NX_HANDLE_SAFETENSORS, make_safetensors, use_safetensors, free_safetensors, "st"},
    {"graph", NX_HANDLE_GRAPH, make_graph, use_graph, free_graph, "g"},
    {"communicator", NX_HANDLE_COMM, NULL, use_comm, free_comm, "comm"},
    {"nx_ddp", NX_HANDLE_DDP, NULL, use_ddp, free_ddp, "ddp"},
    {"gradient scaler", NX_HANDLE_GRAD_SCALER, make_grad_scaler, use_grad_scaler, free_grad_scaler, "scaler"},
};
#define NKINDS (sizeof kKinds / sizeof kKinds[0])

static void expect_refused(const handle_kind* k, void* h, const char* what) {
  nx_status st = k->use(h);
  const char* msg = nx_last_error_message();
  if (st != NX_ERR_INVALID_ARGUMENT || !strstr(msg, k->argument) ||
      (h && !strstr(msg, "not a live")) || (!h && !strstr(msg, "is NULL"))) {
    print_error("%s handle, %s: got %s \"%s\"\n", k->name, what, nx_status_string(st), msg);
    fail();
  }
}

static void test_null_and_made_up_handles_are_refused(void** state) {
  (void)state;
  for (size_t i = 0; i < NKINDS; ++i) {
    if (!kKinds[i].null_ok) expect_refused(&kKinds[i], NULL, "NULL");
    expect_refused(&kKinds[i], (void*)(uintptr_t)0x1234, "a made-up value");
    expect_refused(&kKinds[i], (void*)&kKinds[i], "a pointer to something else");
    kKinds[i].release(NULL);                        /* freeing NULL, */
    kKinds[i].release((void*)(uintptr_t)0x1234);    /* and a foreign value, does nothing */
  }
}

static void test_freed_and_stale_handles_of_every_type_are_refused(void** state) {
  (void)state;
  for (size_t i = 0; i < NKINDS; ++i) {
    const handle_kind* k = &kKinds[i];
    if (!k->make) continue; /* needs a GPU */
    const int64_t live0 = nx_live_handle_count(k->type);
    void* a = k->make();
    assert_int_equal(nx_live_handle_count(k->type), live0 + 1);
    NX_OK_(k->use(a));
    k->release(a);
    assert_int_equal(nx_live_handle_count(k->type), live0);
    expect_refused(k, a, "freed");
    k->release(a); /* a second free does nothing */
    assert_int_equal(nx_live_handle_count(k->type), live0);
    /* The next objects may take the freed slot: the old handle must still be refused, never
     * reach them, and differ from each of them. */
    void* b[4];
    for (int j = 0; j < 4; ++j) {
      b[j] = k->make();
      assert_true(b[j] != a);
    }
    expect_refused(k, a, "stale (slot reused)");
    for (int j = 0; j < 4; ++j) NX_OK_(k->use(b[j]));
    k->release(a); /* freeing the stale handle frees none of the new objects */
    for (int j = 0; j < 4; ++j) NX_OK_(k->use(b[j]));
    for (int j = 0; j < 4; ++j) k->release(b[j]);
    assert_int_equal(nx_live_handle_count(k->type), live0);
  }
  remove(kPath);
}

static void test_a_handle_of_another_type_is_refused(void** state) {
  (void)state;
  void* objects[NKINDS];
  for (size_t i = 0; i < NKINDS; ++i) objects[i] = kKinds[i].make ? kKinds[i].make() : NULL;
  for (size_t i = 0; i < NKINDS; ++i)
    for (size_t j = 0; j < NKINDS; ++j)
      if (i != j && objects[j]) expect_refused(&kKinds[i], objects[j], "another type's handle");
  for (size_t j = 0; j < NKINDS; ++j)
    if (objects[j]) kKinds[j].release(objects[j]);
  remove(kPath);
}

static void test_a_freed_tensor_handle_never_reaches_a_new_tensor(void** state) {
  (void)state;
  /* The case that fooled the old pointer registry: in-place ops through a freed handle whose
   * address was handed to a new tensor. */
  for (int round = 0; round < 100; ++round) {
    nx_tensor old = small_tensor();
    nx_tensor_free(old);
    nx_tensor fresh = small_tensor();
    EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_mul_scalar_(old, 0.0, NULL), "nx_mul_scalar_", "x is not a live tensor handle");
    float v[4];
    NX_OK_(nx_tensor_copy_to_host(fresh, v, sizeof v, NULL));
    assert_true(v[3] == 3.0f);
    nx_tensor_free(fresh);
  }
}

static void test_live_counts(void** state) {
  (void)state;
  assert_int_equal(nx_live_handle_count((nx_handle_type)0), -1);
  assert_int_equal(nx_live_handle_count((nx_handle_type)99), -1);
  assert_int_equal(nx_live_handle_count((nx_handle_type)(NX_HANDLE_PROFILE + 1)), -1);
  assert_int_equal(nx_live_handle_count(NX_HANDLE_GRAD_SCALER), 0);
  const int64_t t0 = nx_live_handle_count(NX_HANDLE_TENSOR);
  assert_int_equal(t0, nx_live_handle_count(NX_HANDLE_TENSOR));
  nx_tensor a = small_tensor(), b = small_tensor();
  assert_int_equal(nx_live_handle_count(NX_HANDLE_TENSOR), t0 + 2);
  nx_tensor_free(a);
  nx_tensor_free(b);
  assert_int_equal(nx_live_handle_count(NX_HANDLE_TENSOR), t0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      NX_TEST(test_null_and_made_up_handles_are_refused),
      NX_TEST(test_freed_and_stale_handles_of_every_type_are_refused),
      NX_TEST(test_a_handle_of_another_type_is_refused),
      NX_TEST(test_a_freed_tensor_handle_never_reaches_a_new_tensor),
      NX_TEST(test_live_counts),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
