/* Misuse by value (issue 17, items 8 and 9), as a table. Every row is one call with an absurd
 * argument: a size whose product or sum overflows int64 (shapes, views, splits, concatenations,
 * DLPack strides, generation lengths, layer sizes), or a value that must be refused (NaN and
 * out-of-range probabilities, norms of no features, optimizer hyperparameters, sampling settings,
 * in-place writes that cannot be stored, writes into expanded views). For each row the table
 * checks the documented status, that the message names the function (and the value involved),
 * that *out is NULL after the failure, and that no live handle of any type was left behind.
 * Tests after the table check what must keep working: integer tensor arithmetic wraps like
 * PyTorch's (INT32_MAX + 1 == INT32_MIN) without undefined behaviour (this file runs under UBSan
 * in the sanitizer build), a huge slice step gives the right elements, allowed in-place writes
 * and fills still work, and a failed nx_gpt_generate leaves the model's training flag alone. */
#include <unistd.h>

#include "nx_test.h"

#define P31 ((int64_t)1 << 31)
#define P32 ((int64_t)1 << 32)
#define P40 ((int64_t)1 << 40)
#define P61 ((int64_t)1 << 61)
#define P62 ((int64_t)1 << 62)

/* ---------------------------------------------------------------- fixtures shared by the rows */
static struct {
  nx_tensor x23;       /* f32 [2, 3] = 0..5 */
  nx_tensor x4;        /* f32 [4] */
  nx_tensor x43;       /* f32 [4, 3] */
  nx_tensor i32_4;     /* i32 [4] */
  nx_tensor i64_4;     /* i64 [4] */
  nx_tensor b4;        /* bool [4] */
  nx_tensor one11;     /* f32 [1, 1] */
  nx_tensor huge_view; /* f32 [1] expanded to [2^62]: stride 0, no memory behind the count */
  nx_tensor expanded;  /* f32 [1, 3] expanded to [4, 3]: writes would hit one row four times */
  nx_tensor logits;    /* f32 [2, 3] */
  nx_tensor target;    /* i64 [2] */
  nx_tensor idx2;      /* i64 [2] = {0, 1} */
  nx_tensor img;       /* f32 [1, 1, 4, 4] */
  nx_tensor img3;      /* f32 [1, 4, 4]: a 3-d input for 2-d pooling */
  nx_tensor empty_huge; /* f32 [2^40, 2^40, 0]: empty, its other dimensions' product overflows */
  nx_module linear;    /* 2 -> 3 with bias */
  nx_tensor* params;   /* its parameters */
  size_t nparams;
  nx_module gpt_rope, gpt_alibi, gpt_pos; /* context 8 each */
  nx_module conv_pad;  /* padding 2^62: the padded size overflows */
  nx_module max_pool;  /* kernel 2 */
  char no_bias_file[128]; /* a Linear 2 -> 3 without bias, saved */
} F;

static nx_tensor tensor_f32(const int64_t* shape, size_t ndim, double start) {
  int64_t n = numel_of(shape, ndim);
  double* v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; ++i) v[i] = start + (double)i;
  nx_tensor t = make_from_f64(v, shape, ndim, NX_F32);
  free(v);
  return t;
}

static nx_module make_gpt(bool rope, bool alibi) {
  nx_transformer_config c;
  memset(&c, 0, sizeof c);
  c.struct_size = sizeof c;
  c.vocab = 16, c.context = 8, c.dim = 8, c.layers = 1, c.heads = 2;
  c.rope = rope, c.alibi = alibi;
  nx_module m = NULL;
  NX_OK_(nx_gpt_create(&m, &c, NX_F32, CPU, NULL));
  return m;
}

static int fixtures_setup(void** state) {
  (void)state;
  nx_random_set_seed(17);
  const int64_t s23[2] = {2, 3}, s4[1] = {4}, s43[2] = {4, 3}, s13[2] = {1, 3}, s11[2] = {1, 1}, s1[1] = {1};
  const int64_t s_img[4] = {1, 1, 4, 4}, s_img3[3] = {1, 4, 4}, s_huge[1] = {P62};
  F.x23 = tensor_f32(s23, 2, 0);
  F.x4 = tensor_f32(s4, 1, 1);
  F.x43 = tensor_f32(s43, 2, 0);
  const int32_t i32v[4] = {1, 2, 3, 4};
  const int64_t i64v[4] = {1, 2, 3, 4}, tgt[2] = {0, 2}, idx[2] = {0, 1};
  const bool bv[4] = {true, false, true, false};
  F.i32_4 = make_tensor(i32v, s4, 1, NX_I32);
  F.i64_4 = make_tensor(i64v, s4, 1, NX_I64);
  F.b4 = make_tensor(bv, s4, 1, NX_BOOL);
  F.one11 = tensor_f32(s11, 2, 1);
  nx_tensor one1 = tensor_f32(s1, 1, 1), row = tensor_f32(s13, 2, 0);
  NX_OK_(nx_expand(&F.huge_view, one1, s_huge, 1, NULL));
  NX_OK_(nx_expand(&F.expanded, row, s43, 2, NULL));
  nx_tensor_free(one1);
  nx_tensor_free(row);
  F.logits = tensor_f32(s23, 2, 0);
  const int64_t s2[1] = {2};
  F.target = make_tensor(tgt, s2, 1, NX_I64);
  F.idx2 = make_tensor(idx, s2, 1, NX_I64);
  F.img = tensor_f32(s_img, 4, 0);
  F.img3 = tensor_f32(s_img3, 3, 0);
  const int64_t s_empty_huge[3] = {P40, P40, 0};
  NX_OK_(nx_tensor_zeros(&F.empty_huge, s_empty_huge, 3, NX_F32, CPU, NULL));
  NX_OK_(nx_linear_create(&F.linear, 2, 3, true, NX_F32, CPU, NULL));
  NX_OK_(nx_module_parameters(F.linear, &F.params, &F.nparams));
  F.gpt_rope = make_gpt(true, false);
  F.gpt_alibi = make_gpt(false, true);
  F.gpt_pos = make_gpt(false, false);
  NX_OK_(nx_conv2d_create(&F.conv_pad, 1, 1, 2, 1, P62, false, NX_F32, CPU, NULL));
  NX_OK_(nx_max_pool2d_create(&F.max_pool, 2, 2));
  nx_module no_bias = NULL;
  NX_OK_(nx_linear_create(&no_bias, 2, 3, false, NX_F32, CPU, NULL));
  snprintf(F.no_bias_file, sizeof F.no_bias_file, "misuse_values_%d.safetensors", (int)getpid());
  NX_OK_(nx_module_save(no_bias, F.no_bias_file));
  nx_module_free(no_bias);
  return 0;
}

static int fixtures_teardown(void** state) {
  (void)state;
  nx_tensor* ts[] = {&F.x23, &F.x4, &F.x43, &F.i32_4, &F.i64_4, &F.b4, &F.one11, &F.huge_view, &F.expanded,
                     &F.logits, &F.target, &F.idx2, &F.img, &F.img3, &F.empty_huge};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; ++i) nx_tensor_free(*ts[i]);
  nx_tensor_array_free(F.params, F.nparams);
  nx_module* ms[] = {&F.linear, &F.gpt_rope, &F.gpt_alibi, &F.gpt_pos, &F.conv_pad, &F.max_pool};
  for (size_t i = 0; i < sizeof ms / sizeof ms[0]; ++i) nx_module_free(*ms[i]);
  unlink(F.no_bias_file);
  return 0;
}

/* ---------------------------------------------------------------- the table */
typedef struct misuse_row misuse_row;
/* Makes the row's call; a call that makes a handle writes it through out. */
typedef nx_status (*misuse_call)(const misuse_row* row, void** out);
struct misuse_row {
  const char* what;
  misuse_call call;
  double v;                /* a value the call takes from its row (a probability, a size...) */
  int64_t n;               /* another (a size, an index into a table of shapes) */
  nx_status want;          /* the documented status */
  nx_handle_type out_type; /* the type of the handle written to *out; 0: the call writes none */
  const char* api;         /* the function the message must name */
  const char* needle;      /* text the message must also contain (NULL: none) */
};

#define OUT_T ((nx_tensor*)out)
#define OUT_M ((nx_module*)out)
#define OUT_O ((nx_optimizer*)out)

/* ---- creation with shapes whose element or byte count does not fit */
static const int64_t k_bad_shapes[][3] = {
    {P40, P40, 1},       /* 0: 2^80 elements */
    {INT64_MAX, 2, 1},   /* 1 */
    {P62, 4, 1},         /* 2 */
    {3, P62, 1},         /* 3 */
    {P32, P32, 1},       /* 4: exactly 2^64 */
    {P62, 1, 1},         /* 5: 2^62 elements fit; their bytes (f64: 2^65) do not */
    {P61, 2, 4},         /* 6: 2^64 */
};
static const size_t k_bad_ndim[] = {2, 2, 2, 2, 2, 1, 3};
static const float k_data[4] = {0};
static nx_status c_zeros(const misuse_row* r, void** out) {
  return nx_tensor_zeros(OUT_T, k_bad_shapes[r->n], k_bad_ndim[r->n], (nx_dtype)(int)r->v, CPU, NULL);
}
static nx_status c_ones(const misuse_row* r, void** out) {
  return nx_tensor_ones(OUT_T, k_bad_shapes[r->n], k_bad_ndim[r->n], (nx_dtype)(int)r->v, CPU, NULL);
}
static nx_status c_full(const misuse_row* r, void** out) {
  return nx_tensor_full(OUT_T, k_bad_shapes[r->n], k_bad_ndim[r->n], 1.0, (nx_dtype)(int)r->v, CPU, NULL);
}
static nx_status c_randn(const misuse_row* r, void** out) {
  return nx_tensor_randn(OUT_T, k_bad_shapes[r->n], k_bad_ndim[r->n], (nx_dtype)(int)r->v, CPU, NULL);
}
static nx_status c_rand(const misuse_row* r, void** out) {
  return nx_tensor_rand(OUT_T, k_bad_shapes[r->n], k_bad_ndim[r->n], (nx_dtype)(int)r->v, CPU, NULL);
}
static nx_status c_from_data(const misuse_row* r, void** out) {
  return nx_tensor_from_data(OUT_T, k_data, k_bad_shapes[r->n], k_bad_ndim[r->n], (nx_dtype)(int)r->v, CPU, NULL);
}
/* a fill value the dtype cannot hold (dtype in n) */
static nx_status c_full_value(const misuse_row* r, void** out) {
  const int64_t s2[1] = {2};
  return nx_tensor_full(OUT_T, s2, 1, r->v, (nx_dtype)r->n, CPU, NULL);
}
static const double k_arange[][3] = {
    {-1e308, 1e308, 1e-300}, /* 0: the count is inf (end - start overflows a double) */
    {0, 1e19, 1},            /* 1: 10^19 >= 2^63 */
    {0, 1e300, 1e-10},       /* 2 */
    {0, INFINITY, 1},        /* 3: not finite */
    {0, 1, 0},               /* 4: step 0 */
    {0, 1, NAN},             /* 5 */
};
static nx_status c_arange(const misuse_row* r, void** out) {
  const double* a = k_arange[r->n];
  return nx_tensor_arange(OUT_T, a[0], a[1], a[2], NX_F32, CPU, NULL);
}

/* ---- views and shape ops */
static const int64_t k_reshape[][3] = {
    {P40, P40, -1},      /* 0: the known part overflows */
    {INT64_MAX, -1, 1},  /* 1 */
    {-1, -1, 1},         /* 2 */
    {-2, 3, 1},          /* 3 */
    {0, -1, 1},          /* 4: nothing to infer from */
    {P32, P32, 1},       /* 5 */
    {3, P62, 0},         /* 6: 0 elements, not 6 */
    {INT64_MIN, -1, 1},  /* 7 */
};
static const size_t k_reshape_ndim[] = {3, 2, 2, 2, 2, 2, 3, 2};
static nx_status c_reshape(const misuse_row* r, void** out) {
  return nx_reshape(OUT_T, F.x23, k_reshape[r->n], k_reshape_ndim[r->n], NULL);
}
static nx_status c_view(const misuse_row* r, void** out) {
  return nx_view(OUT_T, F.x23, k_reshape[r->n], k_reshape_ndim[r->n], NULL);
}
static const int64_t k_expand[][4] = {
    {P40, P40},             /* 0: the case */
    {INT64_MAX, 2},         /* 1 */
    {P62, P62},             /* 2 */
    {-2, 1},                /* 3: a negative size for an existing dimension of size 1 */
    {3, -5, 1, 1},          /* 4: a negative new leading dimension */
    {P32, P32, 1, 1},       /* 5: leading dimensions overflow */
    {2, P62, P62, 1},       /* 6 */
};
static const size_t k_expand_ndim[] = {2, 2, 2, 2, 4, 4, 4};
static nx_status c_expand(const misuse_row* r, void** out) {
  return nx_expand(OUT_T, F.one11, k_expand[r->n], k_expand_ndim[r->n], NULL);
}
/* nx_slice(x23, axis n, 0, 3, step v) */
static nx_status c_slice_step(const misuse_row* r, void** out) {
  return nx_slice(OUT_T, F.x23, r->n, 0, 3, (int64_t)r->v, NULL);
}
static nx_status c_slice_min_step(const misuse_row* r, void** out) {
  (void)r;
  return nx_slice(OUT_T, F.x23, 1, 0, 3, INT64_MIN, NULL);
}
static nx_status c_slice_scalar(const misuse_row* r, void** out) {
  (void)r;
  nx_tensor s = NULL;
  NX_OK_(nx_sum(&s, F.x4, NULL, 0, false, NULL));
  nx_status st = nx_slice(OUT_T, s, 0, 0, 1, INT64_MAX, NULL);
  nx_tensor_free(s);
  return st;
}
/* nx_split of x4 (size 4) along axis 0 */
static const int64_t k_split[][3] = {
    {INT64_MAX, INT64_MAX, 6}, /* 0: the sum wraps to exactly 4 */
    {INT64_MAX, 1, 0},         /* 1 */
    {-1, 5, 0},                /* 2 */
    {2, 1, 0},                 /* 3: sums to 3 */
    {INT64_MIN, 4, 0},         /* 4 */
    {P62, P62, P62},           /* 5: 3 * 2^62 overflows */
};
static nx_status c_split(const misuse_row* r, void** out) {
  nx_tensor outs[3] = {SENTINEL, SENTINEL, SENTINEL};
  nx_status st = nx_split(outs, F.x4, r->n < 0 ? NULL : k_split[r->n], 3, 0, NULL);
  *out = NULL;
  for (int i = 0; i < 3; ++i) {
    if (st == NX_OK) nx_tensor_free(outs[i]);
    else if (outs[i]) *out = outs[i]; /* reported as a non-NULL out */
  }
  return st;
}
/* n tensors of [2^62] elements (stride-0 views), concatenated or stacked */
static nx_status c_cat_huge(const misuse_row* r, void** out) {
  nx_tensor xs[4] = {F.huge_view, F.huge_view, F.huge_view, F.huge_view};
  return nx_cat(OUT_T, xs, (size_t)r->n, 0, NULL);
}
static nx_status c_stack_huge(const misuse_row* r, void** out) {
  nx_tensor xs[4] = {F.huge_view, F.huge_view, F.huge_view, F.huge_view};
  return nx_stack(OUT_T, xs, (size_t)r->n, 0, NULL);
}
static nx_status c_cat_none(const misuse_row* r, void** out) {
  (void)r;
  nx_tensor xs[1] = {F.x4};
  return nx_cat(OUT_T, xs, 0, 0, NULL);
}
/* a count of SIZE_MAX with an array that ends (for the library) at its NULL second element: the
 * bad count is found there, not turned into an allocation of SIZE_MAX handles */
static nx_status c_count_max(const misuse_row* r, void** out) {
  nx_tensor xs[2] = {F.x4, NULL};
  switch (r->n) {
    case 0: return nx_cat(OUT_T, xs, SIZE_MAX, 0, NULL);
    case 1: return nx_stack(OUT_T, xs, SIZE_MAX, 0, NULL);
    case 2: return nx_adam_step_multi(xs, xs, xs, xs, SIZE_MAX, 1, NULL, NULL);
    case 3: {
      nx_tensor ps[2] = {F.params[0], NULL};
      return nx_sgd_create((nx_optimizer*)out, ps, SIZE_MAX, NULL);
    }
    default: {
      nx_tensor ps[2] = {F.params[0], NULL};
      return nx_clip_grad_norm(NULL, ps, SIZE_MAX, 1.0, NULL);
    }
  }
}
static nx_status c_transpose(const misuse_row* r, void** out) {
  return nx_transpose(OUT_T, F.x23, r->n, 0, NULL);
}
static nx_status c_unsqueeze(const misuse_row* r, void** out) {
  return nx_unsqueeze(OUT_T, F.x23, r->n, NULL);
}
static nx_status c_flatten(const misuse_row* r, void** out) {
  return nx_flatten(OUT_T, F.x23, r->n, 0, NULL);
}

/* ---- reductions: a huge axis count (n selects the reduction) */
static const int64_t k_axes[2] = {0, 1};
static nx_status c_reduce_naxes(const misuse_row* r, void** out) {
  const size_t naxes = r->v < 0 ? SIZE_MAX : (size_t)r->v;
  switch (r->n) {
    case 0: return nx_sum(OUT_T, F.x23, k_axes, naxes, false, NULL);
    case 1: return nx_mean(OUT_T, F.x23, k_axes, naxes, false, NULL);
    case 2: return nx_max(OUT_T, F.x23, k_axes, naxes, false, NULL);
    case 3: return nx_min(OUT_T, F.x23, k_axes, naxes, false, NULL);
    default: return nx_var(OUT_T, F.x23, k_axes, naxes, 1, false, NULL);
  }
}
/* reductions of [2^40, 2^40, 0] whose result would have 2^80 elements (v: 0 sum, 1 max) */
static nx_status c_reduce_empty_huge(const misuse_row* r, void** out) {
  const int64_t axes[1] = {r->n};
  return r->v == 0 ? nx_sum(OUT_T, F.empty_huge, axes, 1, false, NULL) : nx_max(OUT_T, F.empty_huge, axes, 1, false, NULL);
}
static nx_status c_flatten_empty_huge(const misuse_row* r, void** out) {
  (void)r;
  return nx_flatten(OUT_T, F.empty_huge, 0, 1, NULL);
}
static nx_status c_sum_axis(const misuse_row* r, void** out) {
  const int64_t axes[1] = {r->n};
  return nx_sum(OUT_T, F.x23, axes, 1, false, NULL);
}

/* ---- indexing */
static nx_status c_one_hot(const misuse_row* r, void** out) {
  return nx_one_hot(OUT_T, F.i64_4, r->n, NX_F32, NULL);
}
static nx_status c_embedding_index(const misuse_row* r, void** out) {
  const int64_t s1[1] = {1}, v[1] = {r->n};
  nx_tensor idx = make_tensor(v, s1, 1, NX_I64);
  nx_status st = nx_embedding(OUT_T, F.x23, idx, NULL);
  nx_tensor_free(idx);
  return st;
}
static nx_status c_index_select(const misuse_row* r, void** out) {
  const int64_t s1[1] = {1}, v[1] = {r->n};
  nx_tensor idx = make_tensor(v, s1, 1, NX_I64);
  nx_status st = nx_index_select(OUT_T, F.x23, idx, 1, NULL);
  nx_tensor_free(idx);
  return st;
}

/* ---- DLPack imports whose description does not fit (the struct stays the caller's) */
typedef struct {
  int32_t ndim;
  int64_t shape[2], strides[2];
  int has_strides;
  uint8_t bits;
  uint64_t byte_offset;
} dl_spec;
static const dl_spec k_dl[] = {
    {2, {2, 2}, {INT64_MAX, 1}, 1, 32, 0}, /* 0: (2-1) * MAX + (2-1) * 1 overflows */
    {1, {3, 0}, {P62, 0}, 1, 32, 0},       /* 1: 2 * 2^62 */
    {1, {2, 0}, {P62, 0}, 1, 64, 0},       /* 2: 2^62 + 1 elements of 8 bytes */
    {2, {2, 3}, {P61, P61}, 1, 32, 0},     /* 3: 3 * 2^61 elements of 4 bytes */
    {1, {4, 0}, {1, 0}, 1, 32, UINT64_MAX}, /* 4: byte_offset wraps the address space */
    {2, {P40, P40}, {0, 0}, 0, 32, 0},     /* 5: 2^80 elements, compact */
    {-1, {0, 0}, {0, 0}, 0, 32, 0},        /* 6 */
    {2000, {0, 0}, {0, 0}, 0, 32, 0},      /* 7 */
    {1, {-3, 0}, {0, 0}, 0, 32, 0},        /* 8 */
    {1, {2, 0}, {-1, 0}, 1, 32, 0},        /* 9: negative strides */
    {2, {P32, P32}, {1, 1}, 1, 32, 0},     /* 10: 2^64 elements, strided */
};
static float g_dl_data[16];
static int g_dl_deleted;
static void dl_deleter(nx_dl_managed_tensor* self) { (void)self; ++g_dl_deleted; }
static void dl_deleter_v(nx_dl_managed_tensor_versioned* self) { (void)self; ++g_dl_deleted; }
static void dl_fill(nx_dl_tensor* t, const dl_spec* s, int64_t* shape, int64_t* strides) {
  memcpy(shape, s->shape, sizeof s->shape);
  memcpy(strides, s->strides, sizeof s->strides);
  t->data = g_dl_data;
  t->device.device_type = NX_CPU;
  t->device.device_id = 0;
  t->ndim = s->ndim;
  t->dtype.code = NX_DL_FLOAT;
  t->dtype.bits = s->bits;
  t->dtype.lanes = 1;
  t->shape = shape;
  t->strides = s->has_strides ? strides : NULL;
  t->byte_offset = s->byte_offset;
}
static nx_status c_dlpack(const misuse_row* r, void** out) {
  int64_t shape[2], strides[2];
  nx_dl_managed_tensor m;
  memset(&m, 0, sizeof m);
  dl_fill(&m.dl_tensor, &k_dl[r->n], shape, strides);
  m.deleter = dl_deleter;
  const int deleted = g_dl_deleted;
  nx_status st = nx_tensor_from_dlpack(OUT_T, &m);
  if (st != NX_OK && g_dl_deleted != deleted) {
    print_error("a failed import called the deleter (the struct stays the caller's)\n");
    return NX_ERR_INTERNAL;
  }
  return st;
}
static nx_status c_dlpack_versioned(const misuse_row* r, void** out) {
  int64_t shape[2], strides[2];
  nx_dl_managed_tensor_versioned m;
  memset(&m, 0, sizeof m);
  m.version.major = NX_DL_MAJOR_VERSION;
  m.version.minor = NX_DL_MINOR_VERSION;
  dl_fill(&m.dl_tensor, &k_dl[r->n], shape, strides);
  m.deleter = dl_deleter_v;
  const int deleted = g_dl_deleted;
  nx_status st = nx_tensor_from_dlpack_versioned(OUT_T, &m);
  if (st != NX_OK && g_dl_deleted != deleted) {
    print_error("a failed import called the deleter (the struct stays the caller's)\n");
    return NX_ERR_INTERNAL;
  }
  return st;
}

/* ---- generation (model in n: 0 rope, 1 alibi, 2 learned positions) */
static nx_module gpt_of(int64_t n) { return n == 0 ? F.gpt_rope : n == 1 ? F.gpt_alibi : F.gpt_pos; }
static const int64_t k_prompt[3] = {1, 2, 3};
static nx_sample_config greedy(void) {
  nx_sample_config c = {sizeof(nx_sample_config), 0.0, 0, 1.0, 0};
  return c;
}
/* new_tokens = v (a double holding the count; INT64_MAX spelled as -1) */
static nx_status c_generate_count(const misuse_row* r, void** out) {
  nx_sample_config c = greedy();
  const int64_t count = r->v == -1 ? INT64_MAX : r->v == -2 ? -1 : (int64_t)r->v;
  return nx_gpt_generate(OUT_T, gpt_of(r->n), k_prompt, 3, count, &c, NULL);
}
static nx_status c_generate_temperature(const misuse_row* r, void** out) {
  nx_sample_config c = greedy();
  c.temperature = r->v;
  return nx_gpt_generate(OUT_T, gpt_of(r->n), k_prompt, 3, 2, &c, NULL);
}
static nx_status c_generate_top_p(const misuse_row* r, void** out) {
  nx_sample_config c = greedy();
  c.temperature = 1.0;
  c.top_p = r->v;
  return nx_gpt_generate(OUT_T, gpt_of(r->n), k_prompt, 3, 2, &c, NULL);
}
static nx_status c_generate_top_k(const misuse_row* r, void** out) {
  nx_sample_config c = greedy();
  c.temperature = 1.0;
  c.top_k = (int64_t)r->v;
  return nx_gpt_generate(OUT_T, gpt_of(r->n), k_prompt, 3, 2, &c, NULL);
}
static nx_status c_generate_long_prompt(const misuse_row* r, void** out) {
  nx_sample_config c = greedy();
  int64_t prompt[12] = {0};
  return nx_gpt_generate(OUT_T, gpt_of(r->n), prompt, 12, 1, &c, NULL);
}

/* ---- layers */
static nx_status c_dropout(const misuse_row* r, void** out) { return nx_dropout_create(OUT_M, r->v); }
static nx_transformer_config small_config(void) {
  nx_transformer_config c;
  memset(&c, 0, sizeof c);
  c.struct_size = sizeof c;
  c.vocab = 16, c.context = 8, c.dim = 8, c.layers = 1, c.heads = 2;
  return c;
}
static nx_status c_gpt_dropout(const misuse_row* r, void** out) {
  nx_transformer_config c = small_config();
  c.dropout = r->v;
  return r->n ? nx_transformer_block_create(OUT_M, &c, NX_F32, CPU, NULL) : nx_gpt_create(OUT_M, &c, NX_F32, CPU, NULL);
}
static nx_status c_layer_norm_dim(const misuse_row* r, void** out) {
  return nx_layer_norm_create(OUT_M, r->n, 1e-5, NX_F32, CPU, NULL);
}
static nx_status c_layer_norm_eps(const misuse_row* r, void** out) {
  return nx_layer_norm_create(OUT_M, 4, r->v, NX_F32, CPU, NULL);
}
static nx_status c_rms_norm_dim(const misuse_row* r, void** out) {
  return nx_rms_norm_create(OUT_M, r->n, 1e-5, NX_F32, CPU, NULL);
}
static nx_status c_rms_norm_eps(const misuse_row* r, void** out) {
  return nx_rms_norm_create(OUT_M, 4, r->v, NX_F32, CPU, NULL);
}
/* sizes (n, n) for n = 2^40: the weight's count overflows; n <= 0 is refused as such */
static nx_status c_linear_sizes(const misuse_row* r, void** out) {
  return nx_linear_create(OUT_M, r->n, r->v < 0 ? r->n : 3, true, NX_F32, CPU, NULL);
}
static nx_status c_embedding_sizes(const misuse_row* r, void** out) {
  return nx_embedding_create(OUT_M, r->n, r->v < 0 ? r->n : 3, NX_F32, CPU, NULL);
}
static nx_status c_swiglu_sizes(const misuse_row* r, void** out) {
  return nx_swiglu_create(OUT_M, r->n, r->n, NX_F32, CPU, NULL);
}
/* conv2d: in channels n, kernel v (stride 1, padding 0) */
static nx_status c_conv_sizes(const misuse_row* r, void** out) {
  return nx_conv2d_create(OUT_M, r->n, 1, (int64_t)r->v, 1, 0, false, NX_F32, CPU, NULL);
}
static nx_status c_conv_stride_padding(const misuse_row* r, void** out) {
  return nx_conv2d_create(OUT_M, 1, 1, 2, r->n, (int64_t)r->v, false, NX_F32, CPU, NULL);
}
static nx_status c_pool_create(const misuse_row* r, void** out) {
  return nx_max_pool2d_create(OUT_M, r->n, (int64_t)r->v);
}
static nx_status c_attention_heads(const misuse_row* r, void** out) {
  nx_attention_config c = {sizeof(nx_attention_config), 8, r->n, 0, true, false, false};
  return nx_attention_create(OUT_M, &c, NX_F32, CPU, NULL);
}
static nx_status c_conv_forward_padding(const misuse_row* r, void** out) {
  (void)r;
  return nx_module_forward(OUT_T, F.conv_pad, F.img, NULL);
}
static nx_status c_pool_forward_3d(const misuse_row* r, void** out) {
  (void)r;
  return nx_module_forward(OUT_T, F.max_pool, F.img3, NULL);
}
/* a module file without the tensor a parameter needs (n 0), or no file at all (n 1) */
static nx_status c_module_load(const misuse_row* r, void** out) {
  (void)out;
  return nx_module_load(F.linear, r->n ? "no/such/dir/misuse.safetensors" : F.no_bias_file);
}

/* ---- optimizers (n selects the field set to v) */
static nx_status c_sgd(const misuse_row* r, void** out) {
  nx_sgd_options o = NX_SGD_OPTIONS_DEFAULT;
  switch (r->n) {
    case 0: o.momentum = r->v; break;
    case 1: o.weight_decay = r->v; break;
    case 2: o.lr = r->v; break;
    default: o.nesterov = true, o.momentum = r->v; break;
  }
  return nx_sgd_create(OUT_O, F.params, F.nparams, &o);
}
static nx_adam_options adam_with(const misuse_row* r) {
  nx_adam_options o = NX_ADAM_OPTIONS_DEFAULT;
  switch (r->n) {
    case 0: o.beta1 = r->v; break;
    case 1: o.beta2 = r->v; break;
    case 2: o.eps = r->v; break;
    case 3: o.weight_decay = r->v; break;
    default: o.lr = r->v; break;
  }
  return o;
}
static nx_status c_adam(const misuse_row* r, void** out) {
  nx_adam_options o = adam_with(r);
  return nx_adam_create(OUT_O, F.params, F.nparams, &o);
}
static nx_status c_adam_step_multi(const misuse_row* r, void** out) {
  (void)out;
  nx_adam_options o = adam_with(r);
  const int64_t s4[1] = {4};
  nx_tensor p = tensor_f32(s4, 1, 0), g = tensor_f32(s4, 1, 0), m = tensor_f32(s4, 1, 0), v = tensor_f32(s4, 1, 0);
  nx_status st = nx_adam_step_multi(&p, &g, &m, &v, 1, 1, &o, NULL);
  nx_tensor_free(p), nx_tensor_free(g), nx_tensor_free(m), nx_tensor_free(v);
  return st;
}
static nx_status c_set_lr(const misuse_row* r, void** out) {
  (void)out;
  nx_optimizer opt = NULL;
  NX_OK_(nx_sgd_create(&opt, F.params, F.nparams, NULL));
  nx_status st = nx_optimizer_set_lr(opt, r->v);
  nx_optimizer_free(opt);
  return st;
}
static nx_status c_clip(const misuse_row* r, void** out) {
  (void)out;
  return nx_clip_grad_norm(NULL, F.params, F.nparams, r->v, NULL);
}

/* ---- losses and norms */
static nx_status c_label_smoothing(const misuse_row* r, void** out) {
  return nx_cross_entropy(OUT_T, F.logits, F.target, -100, r->v, NX_REDUCTION_MEAN, NULL);
}
static nx_status c_layer_norm_op_eps(const misuse_row* r, void** out) {
  return r->n ? nx_rms_norm(OUT_T, F.x23, NULL, r->v, NULL) : nx_layer_norm(OUT_T, F.x23, NULL, NULL, r->v, NULL);
}
static nx_status c_clamp(const misuse_row* r, void** out) {
  return nx_clamp(OUT_T, F.x23, r->v, (double)r->n, NULL);
}

/* ---- in-place writes */
static nx_tensor tensor_by_code(int64_t code) {
  switch (code) {
    case 0: return F.x4;
    case 1: return F.i32_4;
    case 2: return F.i64_4;
    case 3: return F.b4;
    default: return F.expanded;
  }
}
/* target n / 10, operand n % 10 (codes of tensor_by_code); v: 0 add_, 1 mul_ */
static nx_status c_binary_inplace(const misuse_row* r, void** out) {
  (void)out;
  nx_tensor dst = tensor_by_code(r->n / 10), b = tensor_by_code(r->n % 10);
  if (dst == F.expanded) b = F.x43; /* shapes that fit: only the layout is wrong */
  return r->v == 0 ? nx_add_(dst, b, NULL) : nx_mul_(dst, b, NULL);
}
static nx_status c_mul_scalar_inplace(const misuse_row* r, void** out) {
  (void)out;
  return nx_mul_scalar_(tensor_by_code(r->n), r->v, NULL);
}
static nx_status c_copy_into_expanded(const misuse_row* r, void** out) {
  (void)out;
  (void)r;
  return nx_copy_(F.expanded, F.x43, NULL);
}

#define ROW(what, call, v, n, want, out_type, api, needle) \
  { what, call, v, n, want, out_type, api, needle }
#define TENSOR NX_HANDLE_TENSOR
#define MODULE NX_HANDLE_MODULE
#define OPTIM NX_HANDLE_OPTIMIZER
#define NONE ((nx_handle_type)0)
#define E_ARG NX_ERR_INVALID_ARGUMENT
#define E_SHAPE NX_ERR_SHAPE
#define E_DTYPE NX_ERR_DTYPE
#define E_OOM NX_ERR_OUT_OF_MEMORY

static const misuse_row k_rows[] = {
    /* ---------------- item 8: sizes whose products or sums overflow */
    ROW("zeros [2^40, 2^40]", c_zeros, NX_F32, 0, E_SHAPE, TENSOR, "nx_tensor_zeros", "1099511627776"),
    ROW("zeros [MAX, 2]", c_zeros, NX_F32, 1, E_SHAPE, TENSOR, "nx_tensor_zeros", "9223372036854775807"),
    ROW("zeros [2^62, 4]", c_zeros, NX_F32, 2, E_SHAPE, TENSOR, "nx_tensor_zeros", "int64"),
    ROW("zeros [3, 2^62]", c_zeros, NX_F32, 3, E_SHAPE, TENSOR, "nx_tensor_zeros", "int64"),
    ROW("zeros [2^32, 2^32]", c_zeros, NX_I64, 4, E_SHAPE, TENSOR, "nx_tensor_zeros", "4294967296"),
    ROW("zeros [2^62] f64: bytes", c_zeros, NX_F64, 5, E_OOM, TENSOR, "nx_tensor_zeros", "f64"),
    ROW("zeros [2^61, 2, 4]", c_zeros, NX_BOOL, 6, E_SHAPE, TENSOR, "nx_tensor_zeros", "int64"),
    ROW("ones [2^40, 2^40]", c_ones, NX_F32, 0, E_SHAPE, TENSOR, "nx_tensor_ones", "1099511627776"),
    ROW("ones [MAX, 2]", c_ones, NX_I32, 1, E_SHAPE, TENSOR, "nx_tensor_ones", "int64"),
    ROW("ones [2^62] i64: bytes", c_ones, NX_I64, 5, E_OOM, TENSOR, "nx_tensor_ones", "i64"),
    ROW("full [2^40, 2^40]", c_full, NX_F32, 0, E_SHAPE, TENSOR, "nx_tensor_full", "1099511627776"),
    ROW("full [2^32, 2^32]", c_full, NX_I32, 4, E_SHAPE, TENSOR, "nx_tensor_full", "int64"),
    ROW("full [2^62] f64: bytes", c_full, NX_F64, 5, E_OOM, TENSOR, "nx_tensor_full", NULL),
    ROW("randn [2^40, 2^40]", c_randn, NX_F32, 0, E_SHAPE, TENSOR, "nx_tensor_randn", "1099511627776"),
    ROW("randn [3, 2^62]", c_randn, NX_F64, 3, E_SHAPE, TENSOR, "nx_tensor_randn", "int64"),
    ROW("rand [MAX, 2]", c_rand, NX_F32, 1, E_SHAPE, TENSOR, "nx_tensor_rand", "int64"),
    ROW("rand [2^61, 2, 4]", c_rand, NX_F16, 6, E_SHAPE, TENSOR, "nx_tensor_rand", "int64"),
    ROW("from_data [2^40, 2^40]", c_from_data, NX_F32, 0, E_SHAPE, TENSOR, "nx_tensor_from_data", "1099511627776"),
    ROW("from_data [2^62, 4]", c_from_data, NX_F32, 2, E_SHAPE, TENSOR, "nx_tensor_from_data", "int64"),
    ROW("from_data [2^62] f64: bytes", c_from_data, NX_F64, 5, E_OOM, TENSOR, "nx_tensor_from_data", NULL),
    ROW("arange count inf", c_arange, 0, 0, E_SHAPE, TENSOR, "nx_tensor_arange", "int64"),
    ROW("arange count 1e19", c_arange, 0, 1, E_SHAPE, TENSOR, "nx_tensor_arange", "int64"),
    ROW("arange count 1e310", c_arange, 0, 2, E_SHAPE, TENSOR, "nx_tensor_arange", "int64"),
    ROW("arange end inf", c_arange, 0, 3, E_ARG, TENSOR, "nx_tensor_arange", "finite"),
    ROW("arange step 0", c_arange, 0, 4, E_ARG, TENSOR, "nx_tensor_arange", "step"),
    ROW("arange step NaN", c_arange, 0, 5, E_ARG, TENSOR, "nx_tensor_arange", "nan"),
    ROW("reshape [2^40, 2^40, -1]", c_reshape, 0, 0, E_SHAPE, TENSOR, "nx_reshape", "1099511627776"),
    ROW("reshape [MAX, -1]", c_reshape, 0, 1, E_SHAPE, TENSOR, "nx_reshape", "9223372036854775807"),
    ROW("reshape [-1, -1]", c_reshape, 0, 2, E_SHAPE, TENSOR, "nx_reshape", "-1"),
    ROW("reshape [-2, 3]", c_reshape, 0, 3, E_SHAPE, TENSOR, "nx_reshape", "-2"),
    ROW("reshape [0, -1]", c_reshape, 0, 4, E_SHAPE, TENSOR, "nx_reshape", "[0,-1]"),
    ROW("reshape [2^32, 2^32]", c_reshape, 0, 5, E_SHAPE, TENSOR, "nx_reshape", "4294967296"),
    ROW("reshape [3, 2^62, 0]", c_reshape, 0, 6, E_SHAPE, TENSOR, "nx_reshape", "0 elements"),
    ROW("reshape [MIN, -1]", c_reshape, 0, 7, E_SHAPE, TENSOR, "nx_reshape", "-9223372036854775808"),
    ROW("view [2^40, 2^40, -1]", c_view, 0, 0, E_SHAPE, TENSOR, "nx_view", "1099511627776"),
    ROW("view [MAX, -1]", c_view, 0, 1, E_SHAPE, TENSOR, "nx_view", "9223372036854775807"),
    ROW("view [2^32, 2^32]", c_view, 0, 5, E_SHAPE, TENSOR, "nx_view", "4294967296"),
    ROW("view [0, -1]", c_view, 0, 4, E_SHAPE, TENSOR, "nx_view", NULL),
    ROW("expand [1,1] to [2^40, 2^40]", c_expand, 0, 0, E_SHAPE, TENSOR, "nx_expand", "1099511627776"),
    ROW("expand to [MAX, 2]", c_expand, 0, 1, E_SHAPE, TENSOR, "nx_expand", "int64"),
    ROW("expand to [2^62, 2^62]", c_expand, 0, 2, E_SHAPE, TENSOR, "nx_expand", "int64"),
    ROW("expand a size-1 dim to -2", c_expand, 0, 3, E_SHAPE, TENSOR, "nx_expand", "-2"),
    ROW("expand a new dim to -5", c_expand, 0, 4, E_SHAPE, TENSOR, "nx_expand", "-5"),
    ROW("expand [2^32, 2^32, 1, 1]", c_expand, 0, 5, E_SHAPE, TENSOR, "nx_expand", "int64"),
    ROW("expand [2, 2^62, 2^62, 1]", c_expand, 0, 6, E_SHAPE, TENSOR, "nx_expand", "int64"),
    ROW("slice step 0", c_slice_step, 0, 1, E_ARG, TENSOR, "nx_slice", "step"),
    ROW("slice step -1", c_slice_step, -1, 1, E_ARG, TENSOR, "nx_slice", "-1"),
    ROW("slice step MIN", c_slice_min_step, 0, 0, E_ARG, TENSOR, "nx_slice", "-9223372036854775808"),
    ROW("slice axis 2 of rank 2", c_slice_step, 1, 2, E_SHAPE, TENSOR, "nx_slice", "axis 2"),
    ROW("slice axis MIN", c_slice_step, 1, INT64_MIN, E_SHAPE, TENSOR, "nx_slice", "-9223372036854775808"),
    ROW("slice a scalar, step MAX", c_slice_scalar, 0, 0, E_SHAPE, TENSOR, "nx_slice", "scalar"),
    ROW("split MAX + MAX + 6 (wraps to 4)", c_split, 0, 0, E_SHAPE, TENSOR, "nx_split", "overflows"),
    ROW("split MAX + 1", c_split, 0, 1, E_SHAPE, TENSOR, "nx_split", "overflows"),
    ROW("split a negative size", c_split, 0, 2, E_SHAPE, TENSOR, "nx_split", "-1"),
    ROW("split summing to 3 of 4", c_split, 0, 3, E_SHAPE, TENSOR, "nx_split", "sum to 3"),
    ROW("split MIN", c_split, 0, 4, E_SHAPE, TENSOR, "nx_split", "-9223372036854775808"),
    ROW("split 3 * 2^62", c_split, 0, 5, E_SHAPE, TENSOR, "nx_split", "overflows"),
    ROW("split sizes NULL", c_split, 0, -1, E_ARG, TENSOR, "nx_split", "NULL"),
    ROW("cat 2 x [2^62]", c_cat_huge, 0, 2, E_SHAPE, TENSOR, "nx_cat", "overflows"),
    ROW("cat 4 x [2^62]", c_cat_huge, 0, 4, E_SHAPE, TENSOR, "nx_cat", "overflows"),
    ROW("stack 2 x [2^62]", c_stack_huge, 0, 2, E_SHAPE, TENSOR, "nx_stack", "int64"),
    ROW("stack 4 x [2^62]", c_stack_huge, 0, 4, E_SHAPE, TENSOR, "nx_stack", "int64"),
    ROW("cat of no tensor", c_cat_none, 0, 0, E_ARG, TENSOR, "nx_cat", "at least one"),
    ROW("cat of SIZE_MAX tensors", c_count_max, 0, 0, E_ARG, TENSOR, "nx_cat", "NULL"),
    ROW("stack of SIZE_MAX tensors", c_count_max, 0, 1, E_ARG, TENSOR, "nx_stack", "NULL"),
    ROW("adam_step_multi of SIZE_MAX tensors", c_count_max, 0, 2, E_ARG, NONE, "nx_adam_step_multi", "NULL"),
    ROW("sgd of SIZE_MAX parameters", c_count_max, 0, 3, E_ARG, OPTIM, "nx_sgd_create", "NULL"),
    ROW("clip_grad_norm of SIZE_MAX parameters", c_count_max, 0, 4, E_ARG, NONE, "nx_clip_grad_norm", "NULL"),
    ROW("transpose axis MAX", c_transpose, 0, INT64_MAX, E_SHAPE, TENSOR, "nx_transpose", "9223372036854775807"),
    ROW("transpose axis MIN", c_transpose, 0, INT64_MIN, E_SHAPE, TENSOR, "nx_transpose", "-9223372036854775808"),
    ROW("unsqueeze axis MAX", c_unsqueeze, 0, INT64_MAX, E_SHAPE, TENSOR, "nx_unsqueeze", "9223372036854775807"),
    ROW("flatten start MIN", c_flatten, 0, INT64_MIN, E_SHAPE, TENSOR, "nx_flatten", NULL),
    ROW("sum naxes SIZE_MAX", c_reduce_naxes, -1, 0, E_SHAPE, TENSOR, "nx_sum", "naxes"),
    ROW("sum naxes 1025", c_reduce_naxes, 1025, 0, E_SHAPE, TENSOR, "nx_sum", "1025"),
    ROW("mean naxes SIZE_MAX", c_reduce_naxes, -1, 1, E_SHAPE, TENSOR, "nx_mean", "naxes"),
    ROW("max naxes SIZE_MAX", c_reduce_naxes, -1, 2, E_SHAPE, TENSOR, "nx_max", "naxes"),
    ROW("min naxes SIZE_MAX", c_reduce_naxes, -1, 3, E_SHAPE, TENSOR, "nx_min", "naxes"),
    ROW("var naxes SIZE_MAX", c_reduce_naxes, -1, 4, E_SHAPE, TENSOR, "nx_var", "naxes"),
    ROW("sum of [2^40, 2^40, 0] over axis 2", c_reduce_empty_huge, 0, 2, E_SHAPE, TENSOR, "nx_sum", "int64"),
    ROW("max of [2^40, 2^40, 0] over axis 2", c_reduce_empty_huge, 1, 2, E_SHAPE, TENSOR, "nx_max", "empty axis"),
    ROW("flatten [2^40, 2^40] of [2^40, 2^40, 0]", c_flatten_empty_huge, 0, 0, E_SHAPE, TENSOR, "nx_flatten",
        "int64"),
    ROW("sum axis MIN", c_sum_axis, 0, INT64_MIN, E_SHAPE, TENSOR, "nx_sum", "-9223372036854775808"),
    ROW("one_hot 4 x 2^62 classes", c_one_hot, 0, P62, E_SHAPE, TENSOR, "nx_one_hot", "overflows"),
    ROW("one_hot MAX classes", c_one_hot, 0, INT64_MAX, E_SHAPE, TENSOR, "nx_one_hot", "overflows"),
    ROW("one_hot 0 classes", c_one_hot, 0, 0, E_ARG, TENSOR, "nx_one_hot", "num_classes"),
    ROW("one_hot MIN classes", c_one_hot, 0, INT64_MIN, E_ARG, TENSOR, "nx_one_hot", "-9223372036854775808"),
    ROW("embedding index MAX", c_embedding_index, 0, INT64_MAX, E_ARG, TENSOR, "nx_embedding", "9223372036854775807"),
    ROW("embedding index MIN", c_embedding_index, 0, INT64_MIN, E_ARG, TENSOR, "nx_embedding", "-9223372036854775808"),
    ROW("index_select index MAX", c_index_select, 0, INT64_MAX, E_ARG, TENSOR, "nx_index_select", "out of range"),
    ROW("dlpack strides [MAX, 1]", c_dlpack, 0, 0, E_SHAPE, TENSOR, "nx_tensor_from_dlpack", "overflows"),
    ROW("dlpack [3] stride 2^62", c_dlpack, 0, 1, E_SHAPE, TENSOR, "nx_tensor_from_dlpack", "overflows"),
    ROW("dlpack [2] f64 stride 2^62: bytes", c_dlpack, 0, 2, E_SHAPE, TENSOR, "nx_tensor_from_dlpack", "bytes"),
    ROW("dlpack [2, 3] strides 2^61: bytes", c_dlpack, 0, 3, E_SHAPE, TENSOR, "nx_tensor_from_dlpack", "bytes"),
    ROW("dlpack byte_offset 2^64-1", c_dlpack, 0, 4, E_ARG, TENSOR, "nx_tensor_from_dlpack", "byte_offset"),
    ROW("dlpack [2^40, 2^40] compact", c_dlpack, 0, 5, E_SHAPE, TENSOR, "nx_tensor_from_dlpack", "int64"),
    ROW("dlpack ndim -1", c_dlpack, 0, 6, E_SHAPE, TENSOR, "nx_tensor_from_dlpack", "-1"),
    ROW("dlpack ndim 2000", c_dlpack, 0, 7, E_SHAPE, TENSOR, "nx_tensor_from_dlpack", "2000"),
    ROW("dlpack shape [-3]", c_dlpack, 0, 8, E_SHAPE, TENSOR, "nx_tensor_from_dlpack", "-3"),
    ROW("dlpack stride -1", c_dlpack, 0, 9, NX_ERR_NOT_IMPLEMENTED, TENSOR, "nx_tensor_from_dlpack", "negative"),
    ROW("dlpack [2^32, 2^32] strided", c_dlpack, 0, 10, E_SHAPE, TENSOR, "nx_tensor_from_dlpack", "int64"),
    ROW("dlpack v1 strides [MAX, 1]", c_dlpack_versioned, 0, 0, E_SHAPE, TENSOR, "nx_tensor_from_dlpack_versioned",
        "overflows"),
    ROW("dlpack v1 [2] f64 stride 2^62", c_dlpack_versioned, 0, 2, E_SHAPE, TENSOR,
        "nx_tensor_from_dlpack_versioned", "bytes"),
    ROW("dlpack v1 byte_offset 2^64-1", c_dlpack_versioned, 0, 4, E_ARG, TENSOR, "nx_tensor_from_dlpack_versioned",
        "byte_offset"),
    ROW("generate MAX new tokens (rope)", c_generate_count, -1, 0, E_SHAPE, TENSOR, "nx_gpt_generate", "overflows"),
    ROW("generate MAX new tokens (learned)", c_generate_count, -1, 2, E_SHAPE, TENSOR, "nx_gpt_generate", "overflows"),
    ROW("generate 2^40 new tokens", c_generate_count, (double)P40, 0, E_SHAPE, TENSOR, "nx_gpt_generate", "context"),
    ROW("generate -1 new tokens", c_generate_count, -2, 0, E_ARG, TENSOR, "nx_gpt_generate", "new_tokens"),
    ROW("linear [2^40, 2^40]", c_linear_sizes, -1, P40, E_SHAPE, MODULE, "nx_linear_create", "1099511627776"),
    ROW("linear in 0", c_linear_sizes, 0, 0, E_ARG, MODULE, "nx_linear_create", "positive"),
    ROW("embedding [2^40, 2^40]", c_embedding_sizes, -1, P40, E_SHAPE, MODULE, "nx_embedding_create", "1099511627776"),
    ROW("embedding num -1", c_embedding_sizes, 0, -1, E_ARG, MODULE, "nx_embedding_create", "positive"),
    ROW("swiglu [2^40, 2^40]", c_swiglu_sizes, 0, P40, E_SHAPE, MODULE, "nx_swiglu_create", "1099511627776"),
    ROW("conv2d fan-in 2^31 * 2^31 * 2^31", c_conv_sizes, (double)P31, P31, E_SHAPE, MODULE, "nx_conv2d_create",
        "fan-in"),
    ROW("conv2d kernel 0", c_conv_sizes, 0, 1, E_ARG, MODULE, "nx_conv2d_create", "kernel"),
    ROW("conv2d stride 0", c_conv_stride_padding, 0, 0, E_ARG, MODULE, "nx_conv2d_create", "stride"),
    ROW("conv2d padding -1", c_conv_stride_padding, -1, 1, E_ARG, MODULE, "nx_conv2d_create", "padding"),
    ROW("conv2d forward, padding 2^62", c_conv_forward_padding, 0, 0, E_SHAPE, TENSOR, "nx_module_forward",
        "overflows"),
    ROW("max_pool2d kernel 0", c_pool_create, 1, 0, E_ARG, MODULE, "nx_max_pool2d_create", "kernel"),
    ROW("max_pool2d stride -1", c_pool_create, -1, 2, E_ARG, MODULE, "nx_max_pool2d_create", "stride"),
    ROW("max_pool2d forward 3-d", c_pool_forward_3d, 0, 0, E_SHAPE, TENSOR, "nx_module_forward", "[1,4,4]"),
    ROW("attention heads 0", c_attention_heads, 0, 0, E_ARG, MODULE, "nx_attention_create", "heads"),
    ROW("attention heads 3 of dim 8", c_attention_heads, 0, 3, E_ARG, MODULE, "nx_attention_create", "heads 3"),

    /* ---------------- item 9: values that must be refused */
    ROW("dropout p NaN", c_dropout, NAN, 0, E_ARG, MODULE, "nx_dropout_create", "nan"),
    ROW("dropout p 1.5", c_dropout, 1.5, 0, E_ARG, MODULE, "nx_dropout_create", "1.5"),
    ROW("dropout p 1", c_dropout, 1.0, 0, E_ARG, MODULE, "nx_dropout_create", "[0, 1)"),
    ROW("dropout p -0.1", c_dropout, -0.1, 0, E_ARG, MODULE, "nx_dropout_create", "-0.1"),
    ROW("dropout p inf", c_dropout, INFINITY, 0, E_ARG, MODULE, "nx_dropout_create", "inf"),
    ROW("dropout p -inf", c_dropout, -INFINITY, 0, E_ARG, MODULE, "nx_dropout_create", "-inf"),
    ROW("gpt dropout NaN", c_gpt_dropout, NAN, 0, E_ARG, MODULE, "nx_gpt_create", "nan"),
    ROW("gpt dropout 1.5", c_gpt_dropout, 1.5, 0, E_ARG, MODULE, "nx_gpt_create", "1.5"),
    ROW("block dropout NaN", c_gpt_dropout, NAN, 1, E_ARG, MODULE, "nx_transformer_block_create", "nan"),
    ROW("block dropout -1", c_gpt_dropout, -1, 1, E_ARG, MODULE, "nx_transformer_block_create", "-1"),
    ROW("layer_norm dim 0", c_layer_norm_dim, 0, 0, E_ARG, MODULE, "nx_layer_norm_create", "dim"),
    ROW("layer_norm dim -4", c_layer_norm_dim, 0, -4, E_ARG, MODULE, "nx_layer_norm_create", "-4"),
    ROW("layer_norm eps NaN", c_layer_norm_eps, NAN, 0, E_ARG, MODULE, "nx_layer_norm_create", "eps"),
    ROW("layer_norm eps -1", c_layer_norm_eps, -1, 0, E_ARG, MODULE, "nx_layer_norm_create", "-1"),
    ROW("layer_norm eps inf", c_layer_norm_eps, INFINITY, 0, E_ARG, MODULE, "nx_layer_norm_create", "inf"),
    ROW("rms_norm dim 0", c_rms_norm_dim, 0, 0, E_ARG, MODULE, "nx_rms_norm_create", "dim"),
    ROW("rms_norm dim MIN", c_rms_norm_dim, 0, INT64_MIN, E_ARG, MODULE, "nx_rms_norm_create", "-9223372036854775808"),
    ROW("rms_norm eps NaN", c_rms_norm_eps, NAN, 0, E_ARG, MODULE, "nx_rms_norm_create", "eps"),
    ROW("layer_norm op eps NaN", c_layer_norm_op_eps, NAN, 0, E_ARG, TENSOR, "nx_layer_norm", "eps"),
    ROW("layer_norm op eps -1", c_layer_norm_op_eps, -1, 0, E_ARG, TENSOR, "nx_layer_norm", "eps"),
    ROW("rms_norm op eps NaN", c_layer_norm_op_eps, NAN, 1, E_ARG, TENSOR, "nx_rms_norm", "eps"),
    ROW("sgd momentum -0.5", c_sgd, -0.5, 0, E_ARG, OPTIM, "nx_sgd_create", "momentum"),
    ROW("sgd momentum NaN", c_sgd, NAN, 0, E_ARG, OPTIM, "nx_sgd_create", "nan"),
    ROW("sgd momentum -inf", c_sgd, -INFINITY, 0, E_ARG, OPTIM, "nx_sgd_create", "momentum"),
    ROW("sgd weight_decay -1", c_sgd, -1, 1, E_ARG, OPTIM, "nx_sgd_create", "weight_decay"),
    ROW("sgd weight_decay NaN", c_sgd, NAN, 1, E_ARG, OPTIM, "nx_sgd_create", "weight_decay"),
    ROW("sgd lr NaN", c_sgd, NAN, 2, E_ARG, OPTIM, "nx_sgd_create", "learning rate"),
    ROW("sgd lr -1", c_sgd, -1, 2, E_ARG, OPTIM, "nx_sgd_create", "learning rate"),
    ROW("sgd nesterov, momentum 0", c_sgd, 0, 3, E_ARG, OPTIM, "nx_sgd_create", "Nesterov"),
    ROW("sgd nesterov, momentum NaN", c_sgd, NAN, 3, E_ARG, OPTIM, "nx_sgd_create", "momentum"),
    ROW("adam beta1 NaN", c_adam, NAN, 0, E_ARG, OPTIM, "nx_adam_create", "betas"),
    ROW("adam beta2 NaN", c_adam, NAN, 1, E_ARG, OPTIM, "nx_adam_create", "betas"),
    ROW("adam beta1 1", c_adam, 1.0, 0, E_ARG, OPTIM, "nx_adam_create", "betas"),
    ROW("adam beta2 -0.1", c_adam, -0.1, 1, E_ARG, OPTIM, "nx_adam_create", "-0.1"),
    ROW("adam beta1 inf", c_adam, INFINITY, 0, E_ARG, OPTIM, "nx_adam_create", "inf"),
    ROW("adam eps -1e-8", c_adam, -1e-8, 2, E_ARG, OPTIM, "nx_adam_create", "eps"),
    ROW("adam eps NaN", c_adam, NAN, 2, E_ARG, OPTIM, "nx_adam_create", "eps"),
    ROW("adam weight_decay NaN", c_adam, NAN, 3, E_ARG, OPTIM, "nx_adam_create", "weight_decay"),
    ROW("adam weight_decay -1", c_adam, -1, 3, E_ARG, OPTIM, "nx_adam_create", "weight_decay"),
    ROW("adam lr NaN", c_adam, NAN, 4, E_ARG, OPTIM, "nx_adam_create", "learning rate"),
    ROW("adam_step_multi beta1 NaN", c_adam_step_multi, NAN, 0, E_ARG, NONE, "nx_adam_step_multi", "betas"),
    ROW("adam_step_multi eps -1", c_adam_step_multi, -1, 2, E_ARG, NONE, "nx_adam_step_multi", "eps"),
    ROW("adam_step_multi weight_decay NaN", c_adam_step_multi, NAN, 3, E_ARG, NONE, "nx_adam_step_multi",
        "weight_decay"),
    ROW("set_lr NaN", c_set_lr, NAN, 0, E_ARG, NONE, "nx_optimizer_set_lr", "nan"),
    ROW("set_lr -1", c_set_lr, -1, 0, E_ARG, NONE, "nx_optimizer_set_lr", "-1"),
    ROW("clip_grad_norm max_norm NaN", c_clip, NAN, 0, E_ARG, NONE, "nx_clip_grad_norm", "max_norm"),
    ROW("clip_grad_norm max_norm -1", c_clip, -1, 0, E_ARG, NONE, "nx_clip_grad_norm", "max_norm"),
    ROW("label smoothing NaN", c_label_smoothing, NAN, 0, E_ARG, TENSOR, "nx_cross_entropy", "label_smoothing"),
    ROW("label smoothing -0.1", c_label_smoothing, -0.1, 0, E_ARG, TENSOR, "nx_cross_entropy", "-0.1"),
    ROW("label smoothing 1.5", c_label_smoothing, 1.5, 0, E_ARG, TENSOR, "nx_cross_entropy", "1.5"),
    ROW("label smoothing inf", c_label_smoothing, INFINITY, 0, E_ARG, TENSOR, "nx_cross_entropy", "inf"),
    ROW("clamp lo NaN", c_clamp, NAN, 1, E_ARG, TENSOR, "nx_clamp", "nan"),
    ROW("clamp lo > hi", c_clamp, 2, 1, E_ARG, TENSOR, "nx_clamp", "lo=2"),
    ROW("temperature NaN (rope)", c_generate_temperature, NAN, 0, E_ARG, TENSOR, "nx_gpt_generate", "temperature"),
    ROW("temperature NaN (learned)", c_generate_temperature, NAN, 2, E_ARG, TENSOR, "nx_gpt_generate", "nan"),
    ROW("temperature -1", c_generate_temperature, -1, 0, E_ARG, TENSOR, "nx_gpt_generate", "temperature"),
    ROW("temperature inf", c_generate_temperature, INFINITY, 0, E_ARG, TENSOR, "nx_gpt_generate", "inf"),
    ROW("top_p NaN", c_generate_top_p, NAN, 0, E_ARG, TENSOR, "nx_gpt_generate", "top_p"),
    ROW("top_p 1.5", c_generate_top_p, 1.5, 1, E_ARG, TENSOR, "nx_gpt_generate", "1.5"),
    ROW("top_p -0.5", c_generate_top_p, -0.5, 2, E_ARG, TENSOR, "nx_gpt_generate", "top_p"),
    ROW("top_k -1", c_generate_top_k, -1, 0, E_ARG, TENSOR, "nx_gpt_generate", "top_k"),
    ROW("rope gpt past its context", c_generate_count, 10, 0, E_SHAPE, TENSOR, "nx_gpt_generate", "context of 8"),
    ROW("alibi gpt past its context", c_generate_count, 10, 1, E_SHAPE, TENSOR, "nx_gpt_generate", "context of 8"),
    ROW("learned-position gpt past its context", c_generate_count, 10, 2, E_SHAPE, TENSOR, "nx_gpt_generate",
        "context"),
    ROW("rope gpt, prompt longer than the context", c_generate_long_prompt, 0, 0, E_SHAPE, TENSOR, "nx_gpt_generate",
        "context"),
    ROW("f32 add_ into i32", c_binary_inplace, 0, 10, E_DTYPE, NONE, "nx_add_", "f32"),
    ROW("f32 add_ into i64", c_binary_inplace, 0, 20, E_DTYPE, NONE, "nx_add_", "i64"),
    ROW("f32 mul_ into i32", c_binary_inplace, 1, 10, E_DTYPE, NONE, "nx_mul_", "i32"),
    ROW("i32 add_ into bool", c_binary_inplace, 0, 31, E_DTYPE, NONE, "nx_add_", "bool"),
    ROW("f32 mul_ into bool", c_binary_inplace, 1, 30, E_DTYPE, NONE, "nx_mul_", "bool"),
    ROW("i32 mul_scalar_ 1.5", c_mul_scalar_inplace, 1.5, 1, E_DTYPE, NONE, "nx_mul_scalar_", "i32"),
    ROW("i64 mul_scalar_ NaN", c_mul_scalar_inplace, NAN, 2, E_DTYPE, NONE, "nx_mul_scalar_", "i64"),
    ROW("bool mul_scalar_ 3", c_mul_scalar_inplace, 3, 3, E_DTYPE, NONE, "nx_mul_scalar_", "bool"),
    ROW("add_ into an expanded view", c_binary_inplace, 0, 40, E_ARG, NONE, "nx_add_", "stride 0"),
    ROW("mul_ into an expanded view", c_binary_inplace, 1, 40, E_ARG, NONE, "nx_mul_", "stride 0"),
    ROW("mul_scalar_ into an expanded view", c_mul_scalar_inplace, 2, 4, E_ARG, NONE, "nx_mul_scalar_", "stride 0"),
    ROW("copy_ into an expanded view", c_copy_into_expanded, 0, 0, E_ARG, NONE, "nx_copy_", "stride 0"),
    ROW("full i32 1e20", c_full_value, 1e20, NX_I32, E_ARG, TENSOR, "nx_tensor_full", "i32"),
    ROW("full i32 -3e9", c_full_value, -3e9, NX_I32, E_ARG, TENSOR, "nx_tensor_full", "overflow"),
    ROW("full i32 NaN", c_full_value, NAN, NX_I32, E_ARG, TENSOR, "nx_tensor_full", "nan"),
    ROW("full i64 2^63", c_full_value, 9223372036854775808.0, NX_I64, E_ARG, TENSOR, "nx_tensor_full", "i64"),
    ROW("full i64 -inf", c_full_value, -INFINITY, NX_I64, E_ARG, TENSOR, "nx_tensor_full", "-inf"),
    ROW("full f16 1e6", c_full_value, 1e6, NX_F16, E_ARG, TENSOR, "nx_tensor_full", "f16"),
    ROW("full bf16 1e39", c_full_value, 1e39, NX_BF16, E_ARG, TENSOR, "nx_tensor_full", "bf16"),
    ROW("full f32 -1e39", c_full_value, -1e39, NX_F32, E_ARG, TENSOR, "nx_tensor_full", "f32"),
    ROW("module file without a parameter's tensor", c_module_load, 0, 0, NX_ERR_IO, NONE, "nx_module_load",
        "has no tensor \"bias\""),
    ROW("module file missing", c_module_load, 0, 1, NX_ERR_IO, NONE, "nx_module_load", "no/such/dir"),
};
#define NROWS (sizeof k_rows / sizeof k_rows[0])

static void free_handle_of(nx_handle_type type, void* h) {
  switch (type) {
    case NX_HANDLE_TENSOR: nx_tensor_free((nx_tensor)h); break;
    case NX_HANDLE_MODULE: nx_module_free((nx_module)h); break;
    case NX_HANDLE_OPTIMIZER: nx_optimizer_free((nx_optimizer)h); break;
    default: break;
  }
}

#define NTYPES 12
static void live_counts(int64_t* counts) {
  for (int t = 1; t <= NTYPES; ++t) counts[t - 1] = nx_live_handle_count((nx_handle_type)t);
}

/* One row: its status, its message, *out NULL, no live handle gained. Returns 1 when it holds. */
static int run_row(const misuse_row* r) {
  int64_t before[NTYPES], after[NTYPES];
  live_counts(before);
  nx_clear_error();
  void* out = SENTINEL;
  nx_status st = r->call(r, &out);
  const char* msg = nx_last_error_message();
  int ok = 1;
  if (st != r->want) {
    print_error("row \"%s\": %s returned %s, expected %s (message: \"%s\")\n", r->what, r->api, nx_status_string(st),
                nx_status_string(r->want), msg);
    ok = 0;
  } else if (!strstr(msg, r->api) || (r->needle && !strstr(msg, r->needle))) {
    print_error("row \"%s\": message \"%s\" does not name %s%s%s\n", r->what, msg, r->api, r->needle ? " and " : "",
                r->needle ? r->needle : "");
    ok = 0;
  }
  if (r->out_type && out != NULL) {
    if (st != NX_OK) print_error("row \"%s\": %s failed but left *out non-NULL (%p)\n", r->what, r->api, out);
    else free_handle_of(r->out_type, out); /* a wrong NX_OK: reported above, its handle freed */
    ok = 0;
  }
  live_counts(after);
  for (int t = 0; t < NTYPES; ++t)
    if (after[t] != before[t]) {
      print_error("row \"%s\": live handles of type %d went from %lld to %lld\n", r->what, t + 1,
                  (long long)before[t], (long long)after[t]);
      ok = 0;
    }
  return ok;
}

static void test_misuse_table(void** state) {
  (void)state;
  size_t failed = 0;
  for (size_t i = 0; i < NROWS; ++i) failed += !run_row(&k_rows[i]);
  printf("misuse-by-value table: %zu rows, %zu failed\n", (size_t)NROWS, failed);
  assert_int_equal(failed, 0);
}

/* ---------------------------------------------------------------- what keeps working */
/* Integer tensor arithmetic wraps modulo 2^bits, as PyTorch's does, computed without signed
 * overflow (the sanitizer build aborts on undefined behaviour). */
static nx_tensor i32_scalar(int32_t v) {
  const int64_t s1[1] = {1};
  return make_tensor(&v, s1, 1, NX_I32);
}
static nx_tensor i64_scalar(int64_t v) {
  const int64_t s1[1] = {1};
  return make_tensor(&v, s1, 1, NX_I64);
}
static int32_t i32_of(nx_tensor t) {
  int32_t v = 0;
  assert_int_equal(tensor_dtype(t), NX_I32);
  NX_OK_(nx_tensor_copy_to_host(t, &v, sizeof v, NULL));
  return v;
}
static int64_t i64_of(nx_tensor t) {
  int64_t v = 0;
  assert_int_equal(tensor_dtype(t), NX_I64);
  NX_OK_(nx_tensor_copy_to_host(t, &v, sizeof v, NULL));
  return v;
}
typedef nx_status (*binary_fn)(nx_tensor*, nx_tensor, nx_tensor, nx_stream);
static int32_t i32_binary(binary_fn f, int32_t a, int32_t b) {
  nx_tensor x = i32_scalar(a), y = i32_scalar(b), r = NULL;
  NX_OK_(f(&r, x, y, NULL));
  int32_t v = i32_of(r);
  nx_tensor_free(x), nx_tensor_free(y), nx_tensor_free(r);
  return v;
}
static int64_t i64_binary(binary_fn f, int64_t a, int64_t b) {
  nx_tensor x = i64_scalar(a), y = i64_scalar(b), r = NULL;
  NX_OK_(f(&r, x, y, NULL));
  int64_t v = i64_of(r);
  nx_tensor_free(x), nx_tensor_free(y), nx_tensor_free(r);
  return v;
}
typedef nx_status (*unary_fn)(nx_tensor*, nx_tensor, nx_stream);
static int32_t i32_unary(unary_fn f, int32_t a) {
  nx_tensor x = i32_scalar(a), r = NULL;
  NX_OK_(f(&r, x, NULL));
  int32_t v = i32_of(r);
  nx_tensor_free(x), nx_tensor_free(r);
  return v;
}
static int64_t i64_unary(unary_fn f, int64_t a) {
  nx_tensor x = i64_scalar(a), r = NULL;
  NX_OK_(f(&r, x, NULL));
  int64_t v = i64_of(r);
  nx_tensor_free(x), nx_tensor_free(r);
  return v;
}
typedef nx_status (*scalar_fn)(nx_tensor*, nx_tensor, double, nx_stream);
static int32_t i32_with_scalar(scalar_fn f, int32_t a, double s) {
  nx_tensor x = i32_scalar(a), r = NULL;
  NX_OK_(f(&r, x, s, NULL));
  int32_t v = i32_of(r);
  nx_tensor_free(x), nx_tensor_free(r);
  return v;
}
static int64_t i64_with_scalar(scalar_fn f, int64_t a, double s) {
  nx_tensor x = i64_scalar(a), r = NULL;
  NX_OK_(f(&r, x, s, NULL));
  int64_t v = i64_of(r);
  nx_tensor_free(x), nx_tensor_free(r);
  return v;
}
static nx_status square_of(nx_tensor* out, nx_tensor x, nx_stream s) { return nx_mul(out, x, x, s); }

static void test_integer_arithmetic_wraps(void** state) {
  (void)state;
  /* i32 */
  assert_int_equal(i32_binary(nx_add, INT32_MAX, 1), INT32_MIN);
  assert_int_equal(i32_binary(nx_add, INT32_MIN, -1), INT32_MAX);
  assert_int_equal(i32_binary(nx_sub, INT32_MIN, 1), INT32_MAX);
  assert_int_equal(i32_binary(nx_sub, 0, INT32_MIN), INT32_MIN);
  assert_int_equal(i32_binary(nx_mul, INT32_MAX, 2), -2);
  assert_int_equal(i32_binary(nx_mul, INT32_MIN, -1), INT32_MIN);
  assert_int_equal(i32_binary(nx_mul, 65536, 65536), 0);
  assert_int_equal(i32_unary(nx_neg, INT32_MIN), INT32_MIN);
  assert_int_equal(i32_unary(nx_abs, INT32_MIN), INT32_MIN);
  assert_int_equal(i32_unary(square_of, INT32_MIN), 0);
  assert_int_equal(i32_with_scalar(nx_add_scalar, INT32_MAX, 1), INT32_MIN);
  assert_int_equal(i32_with_scalar(nx_mul_scalar, INT32_MAX, 2), -2);
  assert_int_equal(i32_with_scalar(nx_mul_scalar, INT32_MIN, -1), INT32_MIN);
  /* a scalar past the dtype's range wraps to it (2^32 + 1 is 1 in i32), past int64 saturates */
  assert_int_equal(i32_with_scalar(nx_add_scalar, 5, 4294967297.0), 6);
  assert_int_equal(i64_with_scalar(nx_add_scalar, 0, 1e30), INT64_MAX);
  /* i64 */
  assert_true(i64_binary(nx_add, INT64_MAX, 1) == INT64_MIN);
  assert_true(i64_binary(nx_sub, INT64_MIN, 1) == INT64_MAX);
  assert_true(i64_binary(nx_mul, INT64_MAX, 2) == -2);
  assert_true(i64_binary(nx_mul, INT64_MIN, -1) == INT64_MIN);
  assert_true(i64_binary(nx_mul, (int64_t)1 << 32, (int64_t)1 << 32) == 0);
  assert_true(i64_unary(nx_neg, INT64_MIN) == INT64_MIN);
  assert_true(i64_unary(nx_abs, INT64_MIN) == INT64_MIN);
  assert_true(i64_with_scalar(nx_add_scalar, INT64_MAX, 1) == INT64_MIN);
  assert_true(i64_with_scalar(nx_mul_scalar, INT64_MIN, -1) == INT64_MIN);
  /* broadcast and strided operands take the same kernels */
  const int32_t big[4] = {INT32_MAX, INT32_MAX - 1, INT32_MIN, 7};
  const int64_t s4[1] = {4}, s22[2] = {2, 2};
  nx_tensor v = make_tensor(big, s4, 1, NX_I32), one = i32_scalar(1), r = NULL;
  NX_OK_(nx_add(&r, v, one, NULL));
  int32_t got[4];
  NX_OK_(nx_tensor_copy_to_host(r, got, sizeof got, NULL));
  assert_int_equal(got[0], INT32_MIN);
  assert_int_equal(got[1], INT32_MAX);
  assert_int_equal(got[2], INT32_MIN + 1);
  assert_int_equal(got[3], 8);
  nx_tensor_free(r);
  nx_tensor m = NULL, mt = NULL;
  NX_OK_(nx_reshape(&m, v, s22, 2, NULL));
  NX_OK_(nx_transpose(&mt, m, 0, 1, NULL));
  NX_OK_(nx_add(&r, mt, mt, NULL)); /* [[MAX, MIN], [MAX-1, 7]] * 2 */
  NX_OK_(nx_tensor_copy_to_host(r, got, sizeof got, NULL));
  assert_int_equal(got[0], -2);
  assert_int_equal(got[1], 0);
  assert_int_equal(got[2], -4);
  assert_int_equal(got[3], 14);
  nx_tensor_free(r), nx_tensor_free(m), nx_tensor_free(mt);
  /* in place: x += 1 on INT32_MAX */
  nx_tensor w = i32_scalar(INT32_MAX);
  NX_OK_(nx_add_(w, one, NULL));
  assert_int_equal(i32_of(w), INT32_MIN);
  NX_OK_(nx_mul_scalar_(w, -1, NULL));
  assert_int_equal(i32_of(w), INT32_MIN);
  nx_tensor_free(w);
  /* an i64 sum wraps (the accumulator is int64) */
  const int64_t two[2] = {INT64_MAX, 1}, s2[1] = {2};
  nx_tensor t = make_tensor(two, s2, 1, NX_I64), sum = NULL;
  NX_OK_(nx_sum(&sum, t, NULL, 0, false, NULL));
  assert_true(i64_of(sum) == INT64_MIN);
  nx_tensor_free(sum), nx_tensor_free(t);
  nx_tensor_free(v), nx_tensor_free(one);
}

/* A huge step is a valid Python slice: it takes the first element and nothing overflows,
 * backward included. */
static void test_slice_with_huge_step(void** state) {
  (void)state;
  const int64_t s23[2] = {2, 3};
  nx_tensor x = t_requiring_grad(tensor_f32(s23, 2, 0)), s = NULL;
  NX_OK_(nx_slice(&s, x, 1, 0, 3, INT64_MAX, NULL));
  assert_shape(s, 2, 1);
  const double want[2] = {0, 3};
  assert_tensor_close(s, want, 2, 0, 0);
  nx_tensor total = t_sum_all(s);
  NX_OK_(nx_backward(total, NULL, NULL, NULL));
  nx_tensor g = t_grad(x);
  const double gw[6] = {1, 0, 0, 1, 0, 0};
  assert_tensor_close(g, gw, 6, 0, 0);
  nx_tensor_free(g), nx_tensor_free(total), nx_tensor_free(s);
  /* start and end anywhere, step MAX: clamped like Python's */
  NX_OK_(nx_slice(&s, x, 1, INT64_MIN, INT64_MAX, INT64_MAX, NULL));
  assert_shape(s, 2, 1);
  nx_tensor_free(s);
  NX_OK_(nx_slice(&s, x, 1, 2, INT64_MAX, P62, NULL));
  const double last[2] = {2, 5};
  assert_tensor_close(s, last, 2, 0, 0);
  nx_tensor_free(s);
  NX_OK_(nx_slice(&s, x, 0, INT64_MAX, INT64_MAX, INT64_MAX, NULL)); /* empty */
  assert_shape(s, 0, 3);
  nx_tensor_free(s);
  /* a slice of the slice: strides stay exact */
  nx_tensor s2 = NULL;
  NX_OK_(nx_slice(&s, x, 1, 0, 3, 2, NULL));
  NX_OK_(nx_slice(&s2, s, 1, 1, 2, INT64_MAX, NULL));
  const double odd[2] = {2, 5};
  assert_tensor_close(s2, odd, 2, 0, 0);
  nx_tensor_free(s2), nx_tensor_free(s);
  /* a valid split still works */
  nx_tensor parts[2];
  const int64_t sizes[2] = {1, 2};
  NX_OK_(nx_split(parts, x, sizes, 2, 1, NULL));
  assert_shape(parts[0], 2, 1);
  assert_shape(parts[1], 2, 2);
  nx_tensor_free(parts[0]), nx_tensor_free(parts[1]);
  nx_tensor_free(x);
}

/* What PyTorch allows in place still works: i64 into i32 (wrapping), an integer or a whole
 * scalar into a float or integer target, copy_ truncating a float into an integer tensor; and a
 * refused write leaves the target as it was. */
static void test_in_place_rules(void** state) {
  (void)state;
  const int32_t iv[2] = {INT32_MAX, 5};
  const int64_t lv[2] = {1, (int64_t)1 << 33}, s2[1] = {2};
  const double fv[2] = {1.5, -2.75};
  nx_tensor i = make_tensor(iv, s2, 1, NX_I32), l = make_tensor(lv, s2, 1, NX_I64), f = make_from_f64(fv, s2, 1, NX_F32);
  NX_OK_(nx_add_(i, l, NULL)); /* {MAX + 1, 5 + 2^33} wrap to {MIN, 5} */
  int32_t got[2];
  NX_OK_(nx_tensor_copy_to_host(i, got, sizeof got, NULL));
  assert_int_equal(got[0], INT32_MIN);
  assert_int_equal(got[1], 5);
  NX_OK_(nx_mul_scalar_(i, 3, NULL));
  NX_OK_(nx_tensor_copy_to_host(i, got, sizeof got, NULL));
  assert_int_equal(got[0], INT32_MIN); /* MIN * 3 wraps to MIN */
  assert_int_equal(got[1], 15);
  EXPECT_ERR(NX_ERR_DTYPE, nx_add_(i, f, NULL), "nx_add_", "f32", "i32");
  EXPECT_ERR(NX_ERR_DTYPE, nx_mul_scalar_(i, 0.5, NULL), "nx_mul_scalar_");
  NX_OK_(nx_tensor_copy_to_host(i, got, sizeof got, NULL));
  assert_int_equal(got[1], 15); /* unchanged */
  NX_OK_(nx_add_(f, l, NULL)); /* an integer operand into a float target */
  const double fw[2] = {2.5, (double)((int64_t)1 << 33) - 2.75};
  assert_tensor_close(f, fw, 2, 1e-6, 0);
  NX_OK_(nx_copy_(i, f, NULL)); /* copy_ converts, truncating toward zero */
  NX_OK_(nx_tensor_copy_to_host(i, got, sizeof got, NULL));
  assert_int_equal(got[0], 2);
  /* into a contiguous copy of an expanded view is fine */
  nx_tensor c = NULL;
  NX_OK_(nx_contiguous(&c, F.expanded, NULL));
  NX_OK_(nx_add_(c, F.x43, NULL));
  nx_tensor_free(c);
  /* the refused write into the expanded view left it alone */
  double e[12];
  read_f64(F.expanded, e, 12);
  for (int k = 0; k < 12; ++k) assert_true(e[k] == (double)(k % 3));
  nx_tensor_free(i), nx_tensor_free(l), nx_tensor_free(f);
}

/* Fill values the dtype holds are accepted (fractions truncate, the extremes fit). */
static void test_fill_values_in_range(void** state) {
  (void)state;
  const int64_t s1[1] = {1};
  nx_tensor t = NULL;
  NX_OK_(nx_tensor_full(&t, s1, 1, 2147483647.0, NX_I32, CPU, NULL));
  assert_int_equal(i32_of(t), INT32_MAX);
  nx_tensor_free(t);
  NX_OK_(nx_tensor_full(&t, s1, 1, -2147483648.9, NX_I32, CPU, NULL));
  assert_int_equal(i32_of(t), INT32_MIN);
  nx_tensor_free(t);
  NX_OK_(nx_tensor_full(&t, s1, 1, -9223372036854775808.0, NX_I64, CPU, NULL));
  assert_true(i64_of(t) == INT64_MIN);
  nx_tensor_free(t);
  NX_OK_(nx_tensor_full(&t, s1, 1, INFINITY, NX_F16, CPU, NULL));
  assert_true(isinf(scalar_of(t)));
  nx_tensor_free(t);
  NX_OK_(nx_tensor_full(&t, s1, 1, NAN, NX_BF16, CPU, NULL));
  assert_true(isnan(scalar_of(t)));
  nx_tensor_free(t);
  NX_OK_(nx_tensor_full(&t, s1, 1, 65504.0, NX_F16, CPU, NULL));
  assert_true(scalar_of(t) == 65504.0);
  nx_tensor_free(t);
  NX_OK_(nx_tensor_full(&t, s1, 1, 1e300, NX_BOOL, CPU, NULL));
  assert_true(scalar_of(t) == 1.0);
  nx_tensor_free(t);
}

/* A DLPack tensor whose extent fits is still imported (a size-1 dimension's stride is not used). */
static void test_dlpack_extent_in_range(void** state) {
  (void)state;
  int64_t shape[2] = {1, 4}, strides[2] = {INT64_MAX, 1};
  nx_dl_managed_tensor m;
  memset(&m, 0, sizeof m);
  for (int k = 0; k < 4; ++k) g_dl_data[k] = (float)k;
  m.dl_tensor.data = g_dl_data;
  m.dl_tensor.device.device_type = NX_CPU;
  m.dl_tensor.ndim = 2;
  m.dl_tensor.dtype.code = NX_DL_FLOAT;
  m.dl_tensor.dtype.bits = 32;
  m.dl_tensor.dtype.lanes = 1;
  m.dl_tensor.shape = shape;
  m.dl_tensor.strides = strides;
  m.deleter = dl_deleter;
  const int deleted = g_dl_deleted;
  nx_tensor t = NULL;
  NX_OK_(nx_tensor_from_dlpack(&t, &m));
  const double want[4] = {0, 1, 2, 3};
  assert_tensor_close(t, want, 4, 0, 0);
  nx_tensor_free(t);
  assert_int_equal(g_dl_deleted, deleted + 1);
}

/* Empty tensors may have dimensions whose product overflows ([2^40, 2^40, 0] is a valid empty
 * tensor): the ops that accept them compute no such product (UBSan would report it). */
static void test_empty_tensors_with_huge_dimensions(void** state) {
  (void)state;
  const int64_t axes01[2] = {0, 1}, axes0[1] = {0};
  nx_tensor r = NULL;
  NX_OK_(nx_sum(&r, F.empty_huge, axes01, 2, false, NULL));
  assert_shape(r, 0);
  nx_tensor_free(r);
  NX_OK_(nx_mean(&r, F.empty_huge, axes01, 2, true, NULL));
  assert_shape(r, 1, 1, 0);
  nx_tensor_free(r);
  NX_OK_(nx_sum(&r, F.empty_huge, NULL, 0, false, NULL)); /* the sum of nothing */
  assert_true(scalar_of(r) == 0.0);
  nx_tensor_free(r);
  NX_OK_(nx_mean(&r, F.empty_huge, NULL, 0, false, NULL)); /* the mean of nothing, as torch's */
  assert_true(isnan(scalar_of(r)));
  nx_tensor_free(r);
  NX_OK_(nx_var(&r, F.empty_huge, axes01, 2, 1, false, NULL));
  assert_shape(r, 0);
  nx_tensor_free(r);
  NX_OK_(nx_flatten(&r, F.empty_huge, 1, 2, NULL));
  assert_shape(r, P40, 0);
  nx_tensor_free(r);
  const int64_t idx_shape[1] = {0};
  nx_tensor idx = NULL;
  NX_OK_(nx_tensor_zeros(&idx, idx_shape, 1, NX_I64, CPU, NULL));
  NX_OK_(nx_index_select(&r, F.empty_huge, idx, 2, NULL));
  assert_shape(r, P40, P40, 0);
  nx_tensor_free(r);
  nx_tensor_free(idx);
  /* matmul of [0, 2^40, 1] and [0, 1, 2^40]: a [0, 2^40, 2^40] result, nothing multiplied */
  const int64_t sa[3] = {0, P40, 1}, sb[3] = {0, 1, P40};
  nx_tensor a = NULL, b = NULL;
  NX_OK_(nx_tensor_zeros(&a, sa, 3, NX_F32, CPU, NULL));
  NX_OK_(nx_tensor_zeros(&b, sb, 3, NX_F32, CPU, NULL));
  NX_OK_(nx_matmul(&r, a, b, NULL));
  assert_shape(r, 0, P40, P40);
  nx_tensor_free(r), nx_tensor_free(a), nx_tensor_free(b);
  /* max over a non-empty axis of it: a [2^40, 0] result */
  NX_OK_(nx_max(&r, F.empty_huge, axes0, 1, false, NULL));
  assert_shape(r, P40, 0);
  nx_tensor_free(r);
}

/* The schedules are pure functions of any int64 arguments: no overflow inside (UBSan checks). */
static void test_schedules_with_extreme_steps(void** state) {
  (void)state;
  assert_true(isfinite(nx_lr_cosine_warmup(1.0, 0, INT64_MIN, 10, 0.0)));
  assert_true(isfinite(nx_lr_cosine_warmup(1.0, INT64_MAX - 1, INT64_MIN, INT64_MAX, 0.0)));
  assert_true(nx_lr_cosine_warmup(1.0, INT64_MAX, 0, INT64_MAX, 0.25) == 0.25);
  assert_true(isfinite(nx_lr_step(1.0, INT64_MIN, INT64_MAX, 0.5)));
  assert_true(nx_lr_step(1.0, INT64_MAX, 0, 0.5) == 1.0);
}

/* A failed nx_gpt_generate leaves the model's training flag as it was: refused arguments, and a
 * failure in the middle of generating (NaN logits from NaN weights cannot be sampled). */
static void test_generate_failure_keeps_training_flag(void** state) {
  (void)state;
  nx_module gpt = make_gpt(true, false);
  bool training = false;
  NX_OK_(nx_module_get_training(gpt, &training));
  assert_true(training);
  nx_sample_config c = greedy();
  nx_tensor out = SENTINEL;
  EXPECT_ERR(NX_ERR_SHAPE, nx_gpt_generate(&out, gpt, k_prompt, 3, 100, &c, NULL), "context");
  assert_null(out);
  NX_OK_(nx_module_get_training(gpt, &training));
  assert_true(training);
  /* NaN weights: the first sampled position fails, after the model was put in eval mode */
  nx_tensor w = NULL;
  NX_OK_(nx_module_parameter(gpt, 0, NULL, &w));
  NX_OK_(nx_autograd_set_enabled(false));
  NX_OK_(nx_mul_scalar_(w, NAN, NULL));
  NX_OK_(nx_autograd_set_enabled(true));
  for (int greedy_mode = 0; greedy_mode < 2; ++greedy_mode) {
    c.temperature = greedy_mode ? 0.0 : 0.8;
    out = SENTINEL;
    EXPECT_ERR(NX_ERR_STATE, nx_gpt_generate(&out, gpt, k_prompt, 3, 2, &c, NULL), "nx_gpt_generate", "nan");
    assert_null(out);
    NX_OK_(nx_module_get_training(gpt, &training));
    assert_true(training);
  }
  /* and a model in eval mode stays in eval mode */
  NX_OK_(nx_module_set_training(gpt, false));
  out = SENTINEL;
  EXPECT_ERR(NX_ERR_STATE, nx_gpt_generate(&out, gpt, k_prompt, 3, 2, &c, NULL), "nan");
  NX_OK_(nx_module_get_training(gpt, &training));
  assert_false(training);
  nx_tensor_free(w);
  nx_module_free(gpt);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      NX_TEST(test_misuse_table),
      NX_TEST(test_integer_arithmetic_wraps),
      NX_TEST(test_slice_with_huge_step),
      NX_TEST(test_in_place_rules),
      NX_TEST(test_fill_values_in_range),
      NX_TEST(test_dlpack_extent_in_range),
      NX_TEST(test_empty_tensors_with_huge_dimensions),
      NX_TEST(test_schedules_with_extreme_steps),
      NX_TEST(test_generate_failure_keeps_training_flag),
  };
  return cmocka_run_group_tests(tests, fixtures_setup, fixtures_teardown);
}
