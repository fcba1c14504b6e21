/* nx_tensor_to_string, nx_tensor_print, nx_string_free: PyTorch 1.13's str(tensor) layout from C.
 * The expected strings are torch's own output (python3 -c "print(repr(str(t)))" with torch 1.13),
 * with "torch." dropped from the dtype names; tests/python/test_print.py compares many more cases
 * with torch directly. */
#include <unistd.h>

#include "nx_test.h"

/* t printed with options must be exactly want. */
#define assert_prints(t, options, want) assert_prints_(t, options, want, __FILE__, __LINE__)
static void assert_prints_(nx_tensor t, const nx_print_options* options, const char* want, const char* file,
                           int line) {
  char* got = SENTINEL;
  nx_status st = nx_tensor_to_string(t, options, &got);
  if (st != NX_OK) {
    print_error("nx_tensor_to_string returned %s: %s\n", nx_status_string(st), nx_last_error_message());
    _fail(file, line);
  }
  if (strcmp(got, want) != 0) {
    print_error("printed:\n%s\nexpected:\n%s\n", got, want);
    nx_string_free(got);
    _fail(file, line);
  }
  nx_string_free(got);
}

static nx_tensor f32_tensor(const float* v, const int64_t* shape, size_t ndim) {
  return make_tensor(v, shape, ndim, NX_F32);
}

static void test_floating_notations(void** state) {
  (void)state;
  const int64_t s22[] = {2, 2}, s3[] = {3}, s2[] = {2}, s5[] = {5};
  const float a[] = {0.1234567f, -1.5f, 2.0f, 0.0f};
  nx_tensor t = f32_tensor(a, s22, 2);
  assert_prints(t, NULL, "tensor([[ 0.1235, -1.5000],\n        [ 2.0000,  0.0000]])");
  nx_tensor_free(t);

  const float ints[] = {1, 2, -3}; /* integral values: "1." */
  t = f32_tensor(ints, s3, 1);
  assert_prints(t, NULL, "tensor([ 1.,  2., -3.])");
  nx_tensor_free(t);

  const float small[] = {1e-5f, 1.0f, 123.25f}; /* min < 1e-4 (and max/min > 1000): scientific */
  t = f32_tensor(small, s3, 1);
  assert_prints(t, NULL, "tensor([1.0000e-05, 1.0000e+00, 1.2325e+02])");
  nx_tensor_free(t);

  const float wide[] = {1.0f, 1e9f}; /* integral but max > 1e8 */
  t = f32_tensor(wide, s2, 1);
  assert_prints(t, NULL, "tensor([1.0000e+00, 1.0000e+09])");
  nx_tensor_free(t);

  /* the width comes from the nonzero finite values only; NaN never prints as -nan */
  const float odd[] = {NAN, INFINITY, -INFINITY, 1.5f, 0.0f};
  t = f32_tensor(odd, s5, 1);
  assert_prints(t, NULL, "tensor([   nan,    inf,   -inf, 1.5000, 0.0000])");
  nx_tensor_free(t);
  const float nan0[] = {-NAN, 0.0f};
  t = f32_tensor(nan0, s2, 1);
  assert_prints(t, NULL, "tensor([nan, 0.])");
  nx_tensor_free(t);

  const float negzero[] = {-0.0f, 1.0f};
  t = f32_tensor(negzero, s2, 1);
  assert_prints(t, NULL, "tensor([-0., 1.])");
  nx_tensor_free(t);

  /* 0-d */
  const float three_half = 3.5f;
  t = f32_tensor(&three_half, NULL, 0);
  assert_prints(t, NULL, "tensor(3.5000)");
  nx_tensor_free(t);
}

static void test_dtypes(void** state) {
  (void)state;
  const int64_t s3[] = {3}, s2[] = {2};
  nx_tensor t = NULL;
  NX_OK_(nx_tensor_arange(&t, 0, 10, 1, NX_I64, CPU, NULL));
  assert_shape(t, 10);
  assert_prints(t, NULL, "tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 9])");
  nx_tensor_free(t);

  const int32_t i32[] = {-5, 100, 7};
  t = make_tensor(i32, s3, 1, NX_I32);
  assert_prints(t, NULL, "tensor([ -5, 100,   7], dtype=int32)");
  nx_tensor_free(t);

  const int64_t big[] = {(int64_t)1 << 62, -((int64_t)1 << 62)}; /* exact: no trip through double */
  t = make_tensor(big, s2, 1, NX_I64);
  assert_prints(t, NULL, "tensor([ 4611686018427387904, -4611686018427387904])");
  nx_tensor_free(t);

  const bool b[] = {true, false, true};
  t = make_tensor(b, s3, 1, NX_BOOL);
  assert_prints(t, NULL, "tensor([ True, False,  True])");
  nx_tensor_free(t);

  const double f64[] = {0.5, 0.25};
  t = make_tensor(f64, s2, 1, NX_F64);
  assert_prints(t, NULL, "tensor([0.5000, 0.2500], dtype=float64)");
  nx_tensor_free(t);

  const int64_t i7 = 7;
  t = make_tensor(&i7, NULL, 0, NX_I64);
  assert_prints(t, NULL, "tensor(7)");
  nx_tensor_free(t);

  /* half types print their values (widened exactly), as torch does */
  const double h[] = {0.0999755859375, 0.333251953125, 65504.0};
  t = make_from_f64(h, s3, 1, NX_F16);
  assert_prints(t, NULL, "tensor([9.9976e-02, 3.3325e-01, 6.5504e+04], dtype=float16)");
  nx_tensor_free(t);
  const double bf[] = {0.10009765625, 0.333984375, 3.00405527047391e+38};
  t = make_from_f64(bf, s3, 1, NX_BF16);
  assert_prints(t, NULL, "tensor([1.0010e-01, 3.3398e-01, 3.0041e+38], dtype=bfloat16)");
  nx_tensor_free(t);
}

static void test_empty_tensors(void** state) {
  (void)state;
  const int64_t s03[] = {0, 3}, s0[] = {0}, s20[] = {2, 0};
  nx_tensor t = NULL;
  NX_OK_(nx_tensor_zeros(&t, s03, 2, NX_F32, CPU, NULL));
  assert_prints(t, NULL, "tensor([], size=(0, 3))");
  nx_tensor_free(t);
  NX_OK_(nx_tensor_zeros(&t, s0, 1, NX_I64, CPU, NULL)); /* every dtype but f32 is named when empty */
  assert_prints(t, NULL, "tensor([], dtype=int64)");
  nx_tensor_free(t);
  NX_OK_(nx_tensor_zeros(&t, s20, 2, NX_BOOL, CPU, NULL));
  assert_prints(t, NULL, "tensor([], size=(2, 0), dtype=bool)");
  nx_tensor_free(t);
  NX_OK_(nx_tensor_zeros(&t, s0, 1, NX_F32, CPU, NULL));
  assert_prints(t, NULL, "tensor([])");
  nx_tensor_free(t);
}

static void test_layout(void** state) {
  (void)state;
  nx_tensor t = NULL, r = NULL;
  /* rows wrap at 80 characters, continuation lines indented under the first entry */
  float v[30];
  for (int i = 0; i < 30; ++i) v[i] = (float)i / 3.0f;
  const int64_t s30[] = {30};
  t = f32_tensor(v, s30, 1);
  assert_prints(t, NULL,
                "tensor([0.0000, 0.3333, 0.6667, 1.0000, 1.3333, 1.6667, 2.0000, 2.3333, 2.6667,\n"
                "        3.0000, 3.3333, 3.6667, 4.0000, 4.3333, 4.6667, 5.0000, 5.3333, 5.6667,\n"
                "        6.0000, 6.3333, 6.6667, 7.0000, 7.3333, 7.6667, 8.0000, 8.3333, 8.6667,\n"
                "        9.0000, 9.3333, 9.6667])");
  nx_tensor_free(t);

  /* rank 3: a blank line between the blocks of the first dimension */
  const int64_t s223[] = {2, 2, 3};
  NX_OK_(nx_tensor_arange(&t, 0, 12, 1, NX_I64, CPU, NULL));
  NX_OK_(nx_reshape(&r, t, s223, 3, NULL));
  assert_prints(r, NULL,
                "tensor([[[ 0,  1,  2],\n         [ 3,  4,  5]],\n\n        [[ 6,  7,  8],\n         [ 9, 10, 11]]])");
  nx_tensor_free(t);
  nx_tensor_free(r);

  /* a non-contiguous view prints its logical order */
  const double m[] = {1.5, 2, 3, 4, 5, 6};
  const int64_t s23[] = {2, 3};
  t = make_tensor(m, s23, 2, NX_F64);
  r = t_transpose(t, 0, 1);
  bool contiguous = true;
  NX_OK_(nx_tensor_is_contiguous(r, &contiguous));
  assert_false(contiguous);
  assert_prints(r, NULL,
                "tensor([[1.5000, 4.0000],\n        [2.0000, 5.0000],\n        [3.0000, 6.0000]], dtype=float64)");
  nx_tensor_free(t);
  nx_tensor_free(r);
}

static void test_summarized(void** state) {
  (void)state;
  nx_tensor t = NULL, r = NULL;
  NX_OK_(nx_tensor_arange(&t, 0, 2000, 1, NX_F32, CPU, NULL)); /* 2000 > threshold 1000 */
  assert_prints(t, NULL,
                "tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 1.9970e+03, 1.9980e+03,\n        1.9990e+03])");
  nx_tensor_free(t);

  /* 100 x 100: the formatter sees only the corners shown (torch's get_summarized_data) */
  float* v = malloc(sizeof(float) * 10000);
  for (int i = 0; i < 10000; ++i) v[i] = (float)i / 7.0f;
  const int64_t s100[] = {100, 100};
  t = f32_tensor(v, s100, 2);
  free(v);
  assert_prints(t, NULL,
                "tensor([[0.0000e+00, 1.4286e-01, 2.8571e-01,  ..., 1.3857e+01, 1.4000e+01,\n"
                "         1.4143e+01],\n"
                "        [1.4286e+01, 1.4429e+01, 1.4571e+01,  ..., 2.8143e+01, 2.8286e+01,\n"
                "         2.8429e+01],\n"
                "        [2.8571e+01, 2.8714e+01, 2.8857e+01,  ..., 4.2429e+01, 4.2571e+01,\n"
                "         4.2714e+01],\n"
                "        ...,\n"
                "        [1.3857e+03, 1.3859e+03, 1.3860e+03,  ..., 1.3996e+03, 1.3997e+03,\n"
                "         1.3999e+03],\n"
                "        [1.4000e+03, 1.4001e+03, 1.4003e+03,  ..., 1.4139e+03, 1.4140e+03,\n"
                "         1.4141e+03],\n"
                "        [1.4143e+03, 1.4144e+03, 1.4146e+03,  ..., 1.4281e+03, 1.4283e+03,\n"
                "         1.4284e+03]])");
  nx_tensor_free(t);

  /* a huge dimension (2^40 elements, a stride-0 view of one zero): only the corners are read */
  const int64_t one[] = {1}, huge[] = {1, (int64_t)1 << 40};
  NX_OK_(nx_tensor_zeros(&t, one, 1, NX_F32, CPU, NULL));
  NX_OK_(nx_expand(&r, t, huge, 2, NULL));
  assert_prints(r, NULL, "tensor([[0., 0., 0.,  ..., 0., 0., 0.]])");
  nx_tensor_free(t);
  nx_tensor_free(r);
}

static void test_options(void** state) {
  (void)state;
  const int64_t s2[] = {2};
  nx_tensor t = NULL;
  nx_print_options o = NX_PRINT_OPTIONS_DEFAULT;
  assert_int_equal(o.struct_size, sizeof(nx_print_options));
  assert_int_equal(o.precision, 4);
  assert_int_equal(o.threshold, 1000);
  assert_int_equal(o.edge_items, 3);
  assert_int_equal(o.line_width, 80);
  assert_int_equal(o.sci_mode, NX_PRINT_SCI_AUTO);

  const float a[] = {1.23456f, 2.5f};
  t = f32_tensor(a, s2, 1);
  o.precision = 2;
  assert_prints(t, &o, "tensor([1.23, 2.50])");
  o.precision = 4;
  const float b[] = {1.5f, 2.0f};
  nx_tensor_free(t);
  t = f32_tensor(b, s2, 1);
  o.sci_mode = NX_PRINT_SCI_ALWAYS;
  assert_prints(t, &o, "tensor([1.5000e+00, 2.0000e+00])");
  nx_tensor_free(t);
  /* NEVER keeps the width torch computed for scientific notation */
  const float c[] = {1e-5f, 1.0f};
  t = f32_tensor(c, s2, 1);
  o.sci_mode = NX_PRINT_SCI_NEVER;
  assert_prints(t, &o, "tensor([    0.0000,     1.0000])");
  nx_tensor_free(t);
  o.sci_mode = NX_PRINT_SCI_AUTO;

  NX_OK_(nx_tensor_arange(&t, 0, 10, 1, NX_I64, CPU, NULL));
  o.threshold = 0;
  o.edge_items = 1;
  assert_prints(t, &o, "tensor([0,  ..., 9])");
  o.threshold = 1000;
  o.edge_items = 3;
  nx_tensor_free(t);

  NX_OK_(nx_tensor_arange(&t, 0, 12, 1, NX_I64, CPU, NULL));
  o.line_width = 20;
  assert_prints(t, &o, "tensor([ 0,  1,  2,\n         3,  4,  5,\n         6,  7,  8,\n         9, 10, 11])");
  nx_tensor_free(t);
}

static void test_autograd_suffixes(void** state) {
  (void)state;
  const int64_t s2[] = {2};
  const float a[] = {1.0f, 2.0f};
  nx_tensor x = t_requiring_grad(f32_tensor(a, s2, 1)), y = NULL, z = NULL;
  assert_prints(x, NULL, "tensor([1., 2.], requires_grad=True)");
  NX_OK_(nx_mul(&y, x, x, NULL));
  assert_prints(y, NULL, "tensor([1., 4.], grad_fn=<MulBackward>)");
  /* printing records nothing */
  NX_OK_(nx_tensor_detach(&z, y));
  assert_prints(z, NULL, "tensor([1., 4.])");
  /* a long suffix goes to its own line, as in torch's _add_suffixes */
  nx_print_options narrow = NX_PRINT_OPTIONS_DEFAULT;
  narrow.line_width = 30;
  assert_prints(y, &narrow, "tensor([1., 4.],\n       grad_fn=<MulBackward>)");
  nx_tensor_free(x);
  nx_tensor_free(y);
  nx_tensor_free(z);
}

static void test_print_to_stdout(void** state) {
  (void)state;
  const int64_t s2[] = {2};
  const float a[] = {0.5f, -2.0f};
  nx_tensor t = f32_tensor(a, s2, 1);
  char path[] = "/tmp/nx_print_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  fflush(stdout);
  int saved = dup(STDOUT_FILENO);
  assert_true(saved >= 0);
  assert_true(dup2(fd, STDOUT_FILENO) >= 0);
  nx_status st = nx_tensor_print(t, NULL);
  fflush(stdout);
  dup2(saved, STDOUT_FILENO);
  close(saved);
  close(fd);
  NX_OK_(st);
  size_t n = 0;
  unsigned char* text = nx_read_file(path, &n);
  text[n] = 0;
  unlink(path);
  assert_string_equal((const char*)text, "tensor([ 0.5000, -2.0000])\n");
  free(text);
  nx_tensor_free(t);
}

static void test_errors(void** state) {
  (void)state;
  const int64_t s2[] = {2};
  const float a[] = {1.0f, 2.0f};
  nx_tensor t = f32_tensor(a, s2, 1);
  char* s = SENTINEL;

  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_to_string(t, NULL, NULL), "nx_tensor_to_string", "out is NULL");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_to_string(NULL, NULL, &s), "nx_tensor_to_string");
  assert_null(s);
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_print(NULL, NULL), "nx_tensor_print");

  nx_print_options o = NX_PRINT_OPTIONS_DEFAULT;
  o.struct_size = 4;
  s = SENTINEL;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_to_string(t, &o, &s), "nx_tensor_to_string",
             "options->struct_size is 4");
  assert_null(s);
  o.struct_size = sizeof o + 8;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_to_string(t, &o, &s), "options->struct_size", "newer nexus.h");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_print(t, &o), "nx_tensor_print", "options->struct_size");

  o = (nx_print_options)NX_PRINT_OPTIONS_DEFAULT;
  o.precision = -1;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_to_string(t, &o, &s), "nx_tensor_to_string",
             "options->precision is -1");
  o.precision = 65;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_to_string(t, &o, &s), "options->precision is 65", "0 to 64");
  o = (nx_print_options)NX_PRINT_OPTIONS_DEFAULT;
  o.threshold = -1;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_to_string(t, &o, &s), "options->threshold is -1");
  o = (nx_print_options)NX_PRINT_OPTIONS_DEFAULT;
  o.edge_items = 0;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_to_string(t, &o, &s), "options->edge_items is 0");
  o = (nx_print_options)NX_PRINT_OPTIONS_DEFAULT;
  o.line_width = 0;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_to_string(t, &o, &s), "options->line_width is 0");
  o = (nx_print_options)NX_PRINT_OPTIONS_DEFAULT;
  o.sci_mode = (nx_print_sci_mode)7;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_to_string(t, &o, &s), "options->sci_mode is 7");
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_print(t, &o), "nx_tensor_print", "options->sci_mode is 7");
  assert_null(s);

  /* extreme but valid values */
  o = (nx_print_options)NX_PRINT_OPTIONS_DEFAULT;
  o.threshold = INT64_MAX;
  o.edge_items = INT64_MAX;
  o.line_width = 1;
  o.precision = 64;
  NX_OK_(nx_tensor_to_string(t, &o, &s));
  assert_string_equal(s, "tensor([1.,\n        2.])");
  nx_string_free(s);

  /* a freed handle */
  nx_tensor freed = f32_tensor(a, s2, 1);
  nx_tensor_free(freed);
  s = SENTINEL;
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_to_string(freed, NULL, &s), "nx_tensor_to_string");
  assert_null(s);
  EXPECT_ERR(NX_ERR_INVALID_ARGUMENT, nx_tensor_print(freed, NULL), "nx_tensor_print");

  nx_string_free(NULL); /* a no-op */
  nx_tensor_free(t);
}

/* Reading values inside a plan's step is refused when the step is captured (a replay runs no host
 * code), printing included. */
static nx_status printing_step(nx_tensor* outputs, size_t noutputs, const nx_tensor* inputs, size_t ninputs,
                               void* user) {
  (void)noutputs;
  (void)ninputs;
  char* s = NULL;
  nx_status st = nx_tensor_to_string(inputs[0], NULL, &s);
  if (st != NX_OK) return st;
  ++*(int*)user;
  nx_string_free(s);
  return nx_mul_scalar(outputs, inputs[0], 2.0, NULL);
}

static void test_refused_inside_a_captured_step(void** state) {
  (void)state;
  const int64_t s2[] = {2};
  const float a[] = {1.0f, 2.0f};
  nx_tensor x = f32_tensor(a, s2, 1), y = NULL;
  int printed = 0;
  nx_plan plan = NULL;
  NX_OK_(nx_plan_create(&plan, printing_step, &printed, 1, NULL));
  NX_OK_(nx_plan_run(plan, &y, 1, &x, 1, NULL)); /* eager: prints */
  nx_tensor_free(y);
  y = NULL;
  assert_int_equal(printed, 1);
  EXPECT_ERR(NX_ERR_STATE, nx_plan_run(plan, &y, 1, &x, 1, NULL), "nx_tensor_to_string");
  nx_plan_free(plan);
  nx_tensor_free(x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      NX_TEST(test_floating_notations),
      NX_TEST(test_dtypes),
      NX_TEST(test_empty_tensors),
      NX_TEST(test_layout),
      NX_TEST(test_summarized),
      NX_TEST(test_options),
      NX_TEST(test_autograd_suffixes),
      NX_TEST(test_print_to_stdout),
      NX_TEST(test_errors),
      NX_TEST(test_refused_inside_a_captured_step),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
