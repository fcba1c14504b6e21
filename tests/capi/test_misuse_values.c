/* Misuse by value (issue 17, items 8 and 9), as a table. Every row is one call with an absurd
 * argument: a size whose product or sum overflows int64 (shapes, views, splits, concatenations,
 * DLPack strides, generation lengths, layer sizes), or a value that must be refused (NaN and
 * out-of-range probabilities, norms of no features, optimizer hyperparameters, sampling settings,
 * in-place writes that cannot be stored, writes into expanded views). For each row the table
 * checks the documented status, that the message names the function (and the value involved),
 * that *out is NULL after the failure, and that no live handle of any type was left behind.
 * The rows after those cover every handle family (tensors, ops, autodiff, graphs, streams and
 * events, SafeTensors, modules, optimizers, the grad scaler, tokenizers, text loaders, DLPack,
 * comm/DDP without NCCL, autocast) with NULL, freed and wrong-type handles, NULL outs, bad
 * dtype/device/enum values, bad hyperparameters and mismatched shapes.
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

static void handles_setup(void);
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
  handles_setup();
  return 0;
}

static void handles_teardown(void);
static int fixtures_teardown(void** state) {
  (void)state;
  handles_teardown();
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
/* The index of a CUDA device that does not exist: one past the last (cuda:0 without CUDA), so the
 * rows that want NX_ERR_DEVICE for it hold on machines with and without GPUs. */
static int32_t absent_cuda(void) { return (int32_t)nx_cuda_device_count(); }

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
    {P40, P40},             /* 0: the issue's case */
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

/* ---- handles: NULL, freed, of another type (issue 17's misuse table over every handle type) */
static struct {
  nx_tensor dead_tensor;
  nx_module dead_module;
  nx_optimizer opt, dead_opt;
  nx_grad_scaler scaler, dead_scaler;
  nx_tokenizer tok, dead_tok;
  nx_text_loader loader, dead_loader;
  nx_safetensors st, dead_st;
  nx_graph dead_graph;
  nx_tensor tokens; /* i64 [64] */
} G;

static void handles_setup(void) {
  const int64_t s4[1] = {4}, s64[1] = {64};
  G.dead_tensor = tensor_f32(s4, 1, 0);
  nx_tensor_free(G.dead_tensor);
  NX_OK_(nx_linear_create(&G.dead_module, 2, 3, true, NX_F32, CPU, NULL));
  nx_module_free(G.dead_module);
  NX_OK_(nx_sgd_create(&G.opt, F.params, F.nparams, NULL));
  NX_OK_(nx_sgd_create(&G.dead_opt, F.params, F.nparams, NULL));
  nx_optimizer_free(G.dead_opt);
  NX_OK_(nx_grad_scaler_create(&G.scaler, NULL));
  NX_OK_(nx_grad_scaler_create(&G.dead_scaler, NULL));
  nx_grad_scaler_free(G.dead_scaler);
  NX_OK_(nx_tokenizer_bytes_create(&G.tok));
  NX_OK_(nx_tokenizer_bytes_create(&G.dead_tok));
  nx_tokenizer_free(G.dead_tok);
  int64_t tv[64];
  for (int i = 0; i < 64; ++i) tv[i] = i % 16;
  G.tokens = make_tensor(tv, s64, 1, NX_I64);
  NX_OK_(nx_text_loader_create(&G.loader, G.tokens, 2, 4, 1));
  NX_OK_(nx_text_loader_create(&G.dead_loader, G.tokens, 2, 4, 1));
  nx_text_loader_free(G.dead_loader);
  NX_OK_(nx_safetensors_open(&G.st, F.no_bias_file));
  NX_OK_(nx_safetensors_open(&G.dead_st, F.no_bias_file));
  nx_safetensors_free(G.dead_st);
  nx_tensor w = NULL, y = NULL;
  NX_OK_(nx_mul(&w, F.params[0], F.params[0], NULL));
  NX_OK_(nx_sum(&y, w, NULL, 0, false, NULL));
  NX_OK_(nx_graph_create(&G.dead_graph, y));
  nx_graph_free(G.dead_graph);
  nx_tensor_free(w), nx_tensor_free(y);
}
static void handles_teardown(void) {
  nx_optimizer_free(G.opt);
  nx_grad_scaler_free(G.scaler);
  nx_tokenizer_free(G.tok);
  nx_text_loader_free(G.loader);
  nx_safetensors_free(G.st);
  nx_tensor_free(G.tokens);
}

/* v selects the bad handle: 0 NULL, 1 freed, 2 a live handle of another type */
#define BAD(type, dead, other) ((r)->v == 0 ? (type)NULL : (r)->v == 1 ? (type)(dead) : (type)(void*)(other))
#define BAD_T BAD(nx_tensor, G.dead_tensor, F.linear)
#define BAD_M BAD(nx_module, G.dead_module, F.x4)
#define BAD_O BAD(nx_optimizer, G.dead_opt, F.linear)
#define BAD_GS BAD(nx_grad_scaler, G.dead_scaler, G.opt)
#define BAD_TOK BAD(nx_tokenizer, G.dead_tok, G.scaler)
#define BAD_TL BAD(nx_text_loader, G.dead_loader, G.tok)
#define BAD_ST BAD(nx_safetensors, G.dead_st, G.loader)
#define BAD_G BAD(nx_graph, G.dead_graph, F.x4)

/* tensor queries and autodiff accessors on a bad tensor (n selects the function) */
static nx_status c_tensor_bad(const misuse_row* r, void** out) {
  nx_tensor t = BAD_T;
  size_t nd;
  int64_t buf[8], i64;
  nx_dtype dt;
  nx_device dev;
  bool b;
  double d;
  void* p;
  switch (r->n) {
    case 0: return nx_tensor_ndim(t, &nd);
    case 1: return nx_tensor_shape(t, buf, 8);
    case 2: return nx_tensor_strides(t, buf, 8);
    case 3: return nx_tensor_numel(t, &i64);
    case 4: return nx_tensor_dtype(t, &dt);
    case 5: return nx_tensor_device(t, &dev);
    case 6: return nx_tensor_is_contiguous(t, &b);
    case 7: return nx_tensor_item(t, &d, NULL);
    case 8: return nx_tensor_data_ptr(t, &p);
    case 9: return nx_tensor_retain(OUT_T, t);
    case 10: return nx_tensor_copy_to_host(t, buf, 16, NULL);
    case 11: return nx_tensor_grad(OUT_T, t);
    case 12: return nx_tensor_zero_grad(t);
    case 13: return nx_tensor_detach(OUT_T, t);
    case 14: return nx_tensor_set_requires_grad(t, true);
    case 15: return nx_tensor_get_requires_grad(t, &b);
    case 16: return nx_tensor_is_leaf(t, &b);
    case 17: return nx_tensor_to(OUT_T, t, CPU, NULL);
    case 18: return nx_add(OUT_T, F.x4, t, NULL);
    case 19: return nx_matmul(OUT_T, t, F.x43, NULL);
    case 20: return nx_sum(OUT_T, t, NULL, 0, false, NULL);
    case 21: return nx_softmax(OUT_T, t, 0, NULL);
    case 22: return nx_reshape(OUT_T, t, buf, 0, NULL);
    case 23: return nx_relu(OUT_T, t, NULL);
    case 24: return nx_where(OUT_T, t, F.x4, F.x4, NULL);
    case 25: return nx_index_select(OUT_T, F.x23, t, 0, NULL);
    case 26: return nx_mse_loss(OUT_T, t, F.x4, NX_REDUCTION_MEAN, NULL);
    case 27: return nx_backward(t, NULL, NULL, NULL);
    case 28: return nx_graph_create((nx_graph*)out, t);
    case 29: return nx_module_forward(OUT_T, F.linear, t, NULL);
    case 30: return nx_add_(t, F.x4, NULL);
    default: {
      nx_dl_managed_tensor* m = SENTINEL;
      nx_status st = nx_tensor_to_dlpack(&m, t);
      if (m != NULL) return NX_ERR_INTERNAL; /* *out not NULL */
      return st;
    }
  }
}
/* a good tensor, a NULL place to write to (n selects the function) */
static nx_status c_tensor_null_out(const misuse_row* r, void** out) {
  (void)out;
  nx_tensor t = F.x4;
  switch (r->n) {
    case 0: return nx_tensor_ndim(t, NULL);
    case 1: return nx_tensor_shape(t, NULL, 8);
    case 2: return nx_tensor_numel(t, NULL);
    case 3: return nx_tensor_dtype(t, NULL);
    case 4: return nx_tensor_device(t, NULL);
    case 5: return nx_tensor_item(F.one11, NULL, NULL);
    case 6: return nx_tensor_retain(NULL, t);
    case 7: return nx_add(NULL, t, t, NULL);
    case 8: return nx_tensor_zeros(NULL, NULL, 0, NX_F32, CPU, NULL);
    case 9: return nx_tensor_to_dlpack(NULL, t);
    case 10: return nx_tensor_get_requires_grad(t, NULL);
    default: return nx_tensor_copy_to_host(t, NULL, 16, NULL);
  }
}
/* wrong shapes, axes, dtypes and enums for ops on good tensors */
static nx_status c_ops_bad_value(const misuse_row* r, void** out) {
  int64_t buf[2];
  const int64_t perm[2] = {0, 0};
  switch (r->n) {
    case 0: return nx_add(OUT_T, F.x23, F.x4, NULL);                     /* [2,3] + [4] */
    case 1: return nx_matmul(OUT_T, F.x23, F.x23, NULL);                 /* [2,3] @ [2,3] */
    case 2: return nx_matmul(OUT_T, F.i32_4, F.x4, NULL);                /* i32 @ f32 */
    case 3: return nx_where(OUT_T, F.x4, F.x4, F.x4, NULL);              /* cond f32 */
    case 4: return nx_softmax(OUT_T, F.x23, 2, NULL);
    case 5: return nx_argmax(OUT_T, F.x23, -3, false, NULL);
    case 6: return nx_squeeze(OUT_T, F.x23, 1, NULL);                    /* size 3 */
    case 7: return nx_permute(OUT_T, F.x23, perm, 2, NULL);              /* repeated axis */
    case 8: return nx_cast(OUT_T, F.x4, (nx_dtype)99, NULL);
    case 9: return nx_tensor_shape(F.x23, buf, 1);                       /* capacity < ndim */
    case 10: return nx_log_softmax(OUT_T, F.x23, INT64_MIN, NULL);
    case 11: return nx_one_hot(OUT_T, F.i64_4, 5, (nx_dtype)-1, NULL);
    case 12: return nx_linear(OUT_T, F.x23, F.x43, NULL, NULL);          /* weight [4,3]: fits; not in the table */
    case 13: return nx_gather(OUT_T, F.x23, F.i64_4, 0, NULL);           /* rank 1 index for rank 2 */
    case 14: return nx_tensor_copy_to_host(F.x4, buf, 3, NULL);          /* nbytes != 16 */
    case 15: return nx_tensor_item(F.x4, (double*)buf, NULL);            /* 4 elements */
    case 16: return nx_cross_entropy(OUT_T, F.logits, F.target, -100, 0, (nx_reduction)7, NULL);
    case 17: return nx_mse_loss(OUT_T, F.x23, F.x4, NX_REDUCTION_MEAN, NULL);
    case 18: return nx_bce_with_logits(OUT_T, F.x23, F.x43, NX_REDUCTION_SUM, NULL);
    case 19: return nx_nll_loss(OUT_T, F.logits, F.x4, -100, NX_REDUCTION_MEAN, NULL); /* float target */
    case 20: return nx_cross_entropy(OUT_T, F.x4, F.target, -100, 0, NX_REDUCTION_MEAN, NULL); /* 1-d logits */
    case 21: {
      const int64_t s2[1] = {2}, bad[2] = {0, 7};
      nx_tensor tg = make_tensor(bad, s2, 1, NX_I64);
      nx_status st = nx_softmax_cross_entropy(OUT_T, F.logits, tg, -100, NX_REDUCTION_MEAN, NULL);
      nx_tensor_free(tg);
      return st;
    }
    case 22: return nx_mse_loss(OUT_T, F.x4, F.x4, (nx_reduction)-1, NULL);
    case 23: return nx_tensor_to(OUT_T, F.x4, (nx_device){NX_CUDA, absent_cuda()}, NULL);
    case 24: return nx_tensor_to(OUT_T, F.x4, (nx_device){(nx_device_type)42, 0}, NULL);
    case 25: {
      nx_tensor xs[2] = {F.x4, F.x23};
      return nx_cat(OUT_T, xs, 2, 0, NULL); /* ranks differ */
    }
    case 26: {
      nx_tensor xs[2] = {F.x4, F.x43};
      return nx_stack(OUT_T, xs, 2, 0, NULL);
    }
    default: return nx_tensor_set_requires_grad(F.i64_4, true); /* integer tensors have no grad */
  }
}

/* ---- autodiff, graph */
static nx_status c_autograd(const misuse_row* r, void** out) {
  nx_tensor w = F.params[0], y = NULL, grads[2] = {SENTINEL, SENTINEL};
  NX_OK_(nx_mul(&y, w, w, NULL)); /* [3, 2]: 6 elements */
  nx_status st;
  switch (r->n) {
    case 0: st = nx_backward(y, NULL, NULL, NULL); break;                       /* 6 elements, grad NULL */
    case 1: st = nx_backward(y, F.x4, NULL, NULL); break;                       /* grad of another shape */
    case 2: st = nx_autograd_grad(NULL, y, F.x23, &w, 1, NULL, NULL); break;
    case 3: st = nx_autograd_grad(grads, y, F.x23, NULL, 1, NULL, NULL); break;
    case 4: { nx_tensor in[1] = {G.dead_tensor}; st = nx_autograd_grad(grads, y, F.x23, in, 1, NULL, NULL); break; }
    case 5: st = nx_jvp(NULL, y, &w, &w, 1, NULL); break;
    case 6: st = nx_jvp(OUT_T, y, &w, NULL, 1, NULL); break;
    case 7: { nx_tensor tg[1] = {F.x4}; st = nx_jvp(OUT_T, y, &w, tg, 1, NULL); break; } /* tangent shape */
    case 8: st = nx_checkpoint(grads, 1, &w, 1, NULL, NULL, NULL); break;      /* fn NULL */
    case 9: st = nx_graph_create(NULL, y); break;
    case 10: { /* a count of SIZE_MAX with an array whose end is its NULL second entry */
      nx_tensor in[2] = {w, NULL};
      st = nx_autograd_grad(grads, y, F.x23, in, SIZE_MAX, NULL, NULL);
      if (st != NX_OK && grads[1] != NULL) st = NX_ERR_INTERNAL; /* the entry of the NULL input nulled too */
      break;
    }
    default: st = NX_OK; break;
  }
  nx_tensor_free(y);
  if (r->n == 2 || r->n == 3 || r->n == 4 || r->n == 8 || r->n == 10)
    if (st != NX_OK && grads[0] != SENTINEL && grads[0] != NULL) return NX_ERR_INTERNAL;
  return st;
}
static nx_status c_graph_bad(const misuse_row* r, void** out) {
  (void)out;
  nx_graph g = BAD_G;
  size_t n;
  const char* s;
  switch (r->n) {
    case 0: return nx_graph_node_count(g, &n);
    case 1: return nx_graph_node_name(g, 0, &s);
    case 2: return nx_graph_saved_bytes(g, &n);
    default: return nx_graph_to_dot(g, &s);
  }
}
static nx_status c_graph_value(const misuse_row* r, void** out) {
  (void)out;
  nx_tensor w = NULL, y = NULL;
  NX_OK_(nx_mul(&w, F.params[0], F.params[0], NULL));
  NX_OK_(nx_sum(&y, w, NULL, 0, false, NULL));
  nx_graph g = NULL;
  NX_OK_(nx_graph_create(&g, y));
  const char* s;
  nx_status st;
  switch (r->n) {
    case 0: st = nx_graph_node_name(g, 999, &s); break;
    case 1: st = nx_graph_node_name(g, SIZE_MAX, &s); break;
    case 2: st = nx_graph_node_count(g, NULL); break;
    case 3: st = nx_graph_to_dot(g, NULL); break;
    default: st = nx_graph_saved_bytes(g, NULL); break;
  }
  nx_graph_free(g);
  nx_tensor_free(w), nx_tensor_free(y);
  return st;
}

/* ---- streams and events (a CPU-only build: CUDA devices are unavailable) */
static nx_status c_stream_event(const misuse_row* r, void** out) {
  nx_device dev;
  const nx_device cuda = {NX_CUDA, absent_cuda()}, bad = {(nx_device_type)99, 0};
  switch (r->n) {
    case 0: return nx_stream_create(NULL, CPU);
    case 1: return nx_stream_create((nx_stream*)out, cuda);
    case 2: return nx_stream_create((nx_stream*)out, bad);
    case 3: return nx_stream_device((nx_stream)(void*)G.tok, &dev); /* not in the table: NULL is the default stream */
    case 4: return nx_stream_device((nx_stream)(void*)F.x4, &dev);
    case 5: return nx_stream_synchronize((nx_stream)(void*)F.linear);
    case 6: return nx_event_create(NULL, CPU);
    case 7: return nx_event_create((nx_event*)out, cuda);
    case 8: return nx_event_create((nx_event*)out, bad);
    case 9: return nx_event_record(NULL, NULL);
    case 10: return nx_event_wait(NULL, NULL);
    case 11: return nx_event_synchronize(NULL);
    case 12: return nx_event_synchronize((nx_event)(void*)F.x4);
    default: return nx_add(OUT_T, F.x4, F.x4, (nx_stream)(void*)F.linear); /* a module as the stream */
  }
}

/* ---- SafeTensors */
static nx_status c_safetensors(const misuse_row* r, void** out) {
  size_t n;
  const char* s;
  const char* names[2] = {"a", "b"};
  nx_tensor ts[2] = {F.x4, NULL};
  switch (r->n) {
    case 0: return nx_safetensors_open(NULL, F.no_bias_file);
    case 1: return nx_safetensors_open((nx_safetensors*)out, NULL);
    case 2: return nx_safetensors_open((nx_safetensors*)out, "no/such/dir/x.safetensors");
    case 3: return nx_safetensors_count(G.st, NULL);
    case 4: return nx_safetensors_name(G.st, 99, &s);
    case 5: return nx_safetensors_get(OUT_T, G.st, "no_such_tensor", CPU, NULL);
    case 6: return nx_safetensors_get(OUT_T, G.st, NULL, CPU, NULL);
    case 7: return nx_safetensors_metadata(G.st, NULL, &s);
    case 8: return nx_safetensors_save(NULL, names, ts, 1);
    case 9: return nx_safetensors_save("misuse_never_written.safetensors", NULL, ts, 1);
    case 10: return nx_safetensors_save("misuse_never_written.safetensors", names, ts, 2); /* a NULL tensor */
    case 11: return nx_safetensors_save("no/such/dir/x.safetensors", names, ts, 1);
    case 12: return nx_safetensors_get(OUT_T, G.st, "weight", (nx_device){NX_CUDA, absent_cuda()}, NULL);
    default: (void)n; return nx_safetensors_name(G.st, 0, NULL);
  }
}
static nx_status c_safetensors_bad(const misuse_row* r, void** out) {
  nx_safetensors st = BAD_ST;
  size_t n;
  const char* s;
  switch (r->n) {
    case 0: return nx_safetensors_count(st, &n);
    case 1: return nx_safetensors_name(st, 0, &s);
    case 2: return nx_safetensors_get(OUT_T, st, "weight", CPU, NULL);
    default: return nx_safetensors_metadata(st, "k", &s);
  }
}

/* ---- modules */
static nx_status c_module_bad(const misuse_row* r, void** out) {
  nx_module m = BAD_M;
  const char* s;
  size_t n;
  bool b;
  switch (r->n) {
    case 0: return nx_module_forward(OUT_T, m, F.x23, NULL);
    case 1: return nx_module_kind(m, &s);
    case 2: return nx_module_parameter_count(m, &n);
    case 3: return nx_module_parameter(m, 0, &s, OUT_T);
    case 4: return nx_module_set_training(m, false);
    case 5: return nx_module_get_training(m, &b);
    case 6: return nx_module_save(m, "misuse_never_written.safetensors");
    case 7: return nx_module_load(m, F.no_bias_file);
    case 8: return nx_module_to(m, CPU, NULL);
    case 9: return nx_residual_create(OUT_M, m);
    default: {
      nx_tensor* ps = SENTINEL;
      nx_status st = nx_module_parameters(m, &ps, &n);
      return ps != NULL && st != NX_OK ? NX_ERR_INTERNAL : st;
    }
  }
}
static nx_status c_module_value(const misuse_row* r, void** out) {
  const char* s;
  nx_module layers[2] = {F.linear, NULL};
  switch (r->n) {
    case 0: return nx_module_forward(OUT_T, F.linear, F.x23, NULL);  /* in_features 2, input [2,3] */
    case 1: return nx_module_kind(F.linear, NULL);
    case 2: return nx_module_parameter_count(F.linear, NULL);
    case 3: return nx_module_parameter(F.linear, 99, &s, OUT_T);
    case 4: return nx_module_to(F.linear, (nx_device){NX_CUDA, absent_cuda()}, NULL);
    case 5: return nx_module_get_training(F.linear, NULL);
    case 6: return nx_module_save(F.linear, NULL);
    case 7: return nx_module_load(F.linear, NULL);
    case 8: return nx_activation_create(OUT_M, "no_such_activation");
    case 9: return nx_activation_create(OUT_M, NULL);
    case 10: return nx_sequential_create(OUT_M, NULL, 2);
    case 11: return nx_sequential_create(OUT_M, layers, 2);
    case 12: return nx_linear_create(OUT_M, 2, 3, true, (nx_dtype)99, CPU, NULL);
    case 13: return nx_linear_create(OUT_M, 2, 3, true, NX_I32, CPU, NULL);
    case 14: return nx_linear_create(OUT_M, 2, 3, true, NX_F32, (nx_device){NX_CUDA, absent_cuda()}, NULL);
    case 15: return nx_embedding_create(OUT_M, 4, 2, NX_F32, (nx_device){(nx_device_type)-5, 0}, NULL);
    case 16: return nx_avg_pool2d_create(OUT_M, 0, 1);
    case 17: return nx_flatten_create(NULL);
    case 18: return nx_attention_create(OUT_M, NULL, NX_F32, CPU, NULL);
    case 19: return nx_gpt_create(OUT_M, NULL, NX_F32, CPU, NULL);
    default: return nx_module_forward(NULL, F.linear, F.x4, NULL);
  }
}

/* ---- optimizers */
static nx_status c_optim_bad(const misuse_row* r, void** out) {
  (void)out;
  nx_optimizer o = BAD_O;
  double d;
  switch (r->n) {
    case 0: return nx_optimizer_step(o, NULL);
    case 1: return nx_optimizer_zero_grad(o);
    case 2: return nx_optimizer_set_lr(o, 0.1);
    case 3: return nx_optimizer_get_lr(o, &d);
    case 4: return nx_optimizer_save(o, "misuse_never_written.safetensors");
    default: return nx_optimizer_load(o, F.no_bias_file);
  }
}
static nx_status c_optim_value(const misuse_row* r, void** out) {
  nx_tensor ps[2] = {F.params[0], G.dead_tensor};
  switch (r->n) {
    case 0: return nx_optimizer_get_lr(G.opt, NULL);
    case 1: return nx_optimizer_load(G.opt, "no/such/dir/opt.safetensors");
    case 2: return nx_optimizer_save(G.opt, NULL);
    case 3: return nx_sgd_create(OUT_O, NULL, 2, NULL);
    case 4: return nx_adam_create(OUT_O, NULL, 2, NULL);
    case 5: return nx_sgd_create(OUT_O, ps, 2, NULL);   /* a freed parameter */
    case 6: return nx_adam_create(OUT_O, ps, 2, NULL);
    case 7: return nx_sgd_create(NULL, F.params, F.nparams, NULL);
    default: return nx_optimizer_set_lr(G.opt, -INFINITY);
  }
}

/* ---- grad scaler */
static nx_status c_scaler_options(const misuse_row* r, void** out) {
  nx_grad_scaler_options o = NX_GRAD_SCALER_OPTIONS_DEFAULT;
  switch (r->n) {
    case 0: o.init_scale = r->v; break;
    case 1: o.growth_factor = r->v; break;
    case 2: o.backoff_factor = r->v; break;
    default: o.growth_interval = (int64_t)r->v; break;
  }
  return nx_grad_scaler_create((nx_grad_scaler*)out, &o);
}
static nx_status c_scaler_bad(const misuse_row* r, void** out) {
  nx_grad_scaler s = BAD_GS;
  double d;
  switch (r->n) {
    case 0: return nx_grad_scaler_scale(OUT_T, s, F.one11, NULL);
    case 1: return nx_grad_scaler_unscale(s, G.opt, NULL);
    case 2: return nx_grad_scaler_step(NULL, s, G.opt, NULL);
    case 3: return nx_grad_scaler_update(s);
    default: return nx_grad_scaler_get_scale(s, &d);
  }
}
static nx_status c_scaler_value(const misuse_row* r, void** out) {
  bool stepped;
  nx_grad_scaler s = NULL;
  nx_optimizer o = NULL;
  const int64_t s1[1] = {1};
  NX_OK_(nx_grad_scaler_create(&s, NULL));
  NX_OK_(nx_sgd_create(&o, F.params, F.nparams, NULL));
  nx_optimizer_zero_grad(o);
  nx_status st;
  switch (r->n) {
    case 0: st = nx_grad_scaler_create(NULL, NULL); break;
    case 1: st = nx_grad_scaler_scale(OUT_T, s, NULL, NULL); break;
    case 2: {
      const int64_t v[1] = {3};
      nx_tensor loss = make_tensor(v, s1, 1, NX_I64);
      st = nx_grad_scaler_scale(OUT_T, s, loss, NULL);
      nx_tensor_free(loss);
      break;
    }
    case 3: st = nx_grad_scaler_unscale(s, NULL, NULL); break;
    case 4: st = nx_grad_scaler_step(&stepped, s, o, NULL); break; /* no gradient */
    case 5: st = nx_grad_scaler_update(s); break;                  /* nothing unscaled */
    case 6: st = nx_grad_scaler_get_scale(s, NULL); break;
    case 7: st = nx_grad_scaler_unscale(s, G.dead_opt, NULL); break;
    default: st = nx_grad_scaler_step(&stepped, s, (nx_optimizer)(void*)F.linear, NULL); break;
  }
  nx_optimizer_free(o);
  nx_grad_scaler_free(s);
  return st;
}

/* ---- tokenizer and text loader */
static nx_status c_tokenizer_bad(const misuse_row* r, void** out) {
  nx_tokenizer t = BAD_TOK;
  int64_t i64;
  const int64_t ids[2] = {65, 66};
  char buf[8];
  size_t len;
  switch (r->n) {
    case 0: return nx_tokenizer_vocab_size(t, &i64);
    case 1: return nx_tokenizer_encode(OUT_T, t, "ab", 2);
    case 2: return nx_tokenizer_decode(t, ids, 2, buf, sizeof buf, &len);
    default: return nx_tokenizer_save(t, "misuse_never_written.tok");
  }
}
static nx_status c_tokenizer_value(const misuse_row* r, void** out) {
  char buf[8];
  size_t len;
  const int64_t ids[3] = {65, 66, 67}, bad_hi[1] = {256}, bad_neg[1] = {-1};
  nx_tokenizer* o = (nx_tokenizer*)out;
  switch (r->n) {
    case 0: return nx_tokenizer_bytes_create(NULL);
    case 1: return nx_tokenizer_bpe_train(o, NULL, 5, 300);
    case 2: return nx_tokenizer_bpe_train(o, "abcabc", 6, 100);
    case 3: return nx_tokenizer_bpe_train(o, "abcabc", 6, -1);
    case 4: return nx_tokenizer_load(o, "no/such/dir/x.tok");
    case 5: return nx_tokenizer_load(o, NULL);
    case 6: return nx_tokenizer_vocab_size(G.tok, NULL);
    case 7: return nx_tokenizer_encode(OUT_T, G.tok, NULL, 3);
    case 8: return nx_tokenizer_decode(G.tok, ids, 3, buf, 2, &len);      /* buffer too small */
    case 9: return nx_tokenizer_decode(G.tok, bad_hi, 1, buf, sizeof buf, &len);
    case 10: return nx_tokenizer_decode(G.tok, bad_neg, 1, buf, sizeof buf, &len);
    case 11: return nx_tokenizer_decode(G.tok, NULL, 2, buf, sizeof buf, &len);
    case 12: return nx_tokenizer_save(G.tok, NULL);
    default: return nx_tokenizer_bpe_train(o, "abcabc", 6, 255);
  }
}
static nx_status c_loader_bad(const misuse_row* r, void** out) {
  (void)out;
  nx_text_loader l = BAD_TL;
  nx_tensor in = SENTINEL, tg = SENTINEL;
  int64_t i64;
  switch (r->n) {
    case 0: {
      nx_status st = nx_text_loader_next(&in, &tg, l, CPU, NULL);
      return st != NX_OK && (in != NULL || tg != NULL) ? NX_ERR_INTERNAL : st;
    }
    case 1: return nx_text_loader_batches_per_epoch(l, &i64);
    default: return nx_text_loader_shard(l, 0, 1);
  }
}
static nx_status c_loader_value(const misuse_row* r, void** out) {
  nx_text_loader* o = (nx_text_loader*)out;
  nx_tensor in = SENTINEL, tg = SENTINEL;
  switch (r->n) {
    case 0: return nx_text_loader_create(o, NULL, 2, 4, 1);
    case 1: return nx_text_loader_create(o, F.i64_4, 1, 4, 1);      /* 4 tokens, seq 4 */
    case 2: return nx_text_loader_create(o, G.tokens, 0, 4, 1);
    case 3: return nx_text_loader_create(o, G.tokens, 2, -1, 1);
    case 4: return nx_text_loader_create(o, G.tokens, 2, 64, 1);    /* no window of 65 tokens */
    case 5: return nx_text_loader_create(o, F.x23, 1, 2, 1);        /* 2-d */
    case 6: return nx_text_loader_create(o, G.tokens, P62, P62, 1);
    case 7: return nx_text_loader_create(NULL, G.tokens, 2, 4, 1);
    case 8: return nx_text_loader_next(NULL, &tg, G.loader, CPU, NULL);
    case 9: {
      nx_status st = nx_text_loader_next(&in, &tg, G.loader, (nx_device){NX_CUDA, absent_cuda()}, NULL);
      return st != NX_OK && (in != NULL || tg != NULL) ? NX_ERR_INTERNAL : st;
    }
    case 10: return nx_text_loader_batches_per_epoch(G.loader, NULL);
    case 11: return nx_text_loader_shard(G.loader, 2, 2);
    case 12: return nx_text_loader_shard(G.loader, -1, 2);
    default: return nx_text_loader_shard(G.loader, 0, 0);
  }
}

/* ---- DLPack: well-formed sizes, descriptions NexusGrad refuses */
static nx_status c_dlpack_desc(const misuse_row* r, void** out) {
  int64_t shape[1] = {4};
  nx_dl_managed_tensor_versioned m;
  memset(&m, 0, sizeof m);
  m.version.major = NX_DL_MAJOR_VERSION;
  m.version.minor = NX_DL_MINOR_VERSION;
  m.deleter = dl_deleter_v;
  nx_dl_tensor* t = &m.dl_tensor;
  t->data = g_dl_data;
  t->device.device_type = NX_CPU;
  t->ndim = 1;
  t->dtype.code = NX_DL_FLOAT, t->dtype.bits = 32, t->dtype.lanes = 1;
  t->shape = shape;
  switch (r->n) {
    case 0: t->dtype.lanes = 4; break;
    case 1: t->dtype.code = NX_DL_COMPLEX, t->dtype.bits = 64; break;
    case 2: t->dtype.bits = 24; break;
    case 3: t->dtype.code = NX_DL_UINT, t->dtype.bits = 8; break;
    case 4: t->device.device_type = NX_CUDA, t->device.device_id = absent_cuda(); break;
    case 5: t->device.device_type = 13; break;
    case 6: m.version.major = NX_DL_MAJOR_VERSION + 1; break;
    case 7: m.flags = NX_DL_FLAG_READ_ONLY; break;
    case 8: t->shape = NULL; break;
    case 9: t->data = NULL; break;
    case 10: t->dtype.code = NX_DL_OPAQUE_HANDLE; break;
    default: return nx_tensor_from_dlpack_versioned(OUT_T, NULL);
  }
  const int deleted = g_dl_deleted;
  nx_status st = nx_tensor_from_dlpack_versioned(OUT_T, &m);
  if (st != NX_OK && g_dl_deleted != deleted) return NX_ERR_INTERNAL;
  return st;
}
static nx_status c_dlpack_export_bad(const misuse_row* r, void** out) {
  (void)out;
  nx_dl_managed_tensor_versioned* m = SENTINEL;
  nx_status st = nx_tensor_to_dlpack_versioned(&m, BAD_T);
  return st != NX_OK && m != NULL ? NX_ERR_INTERNAL : st;
}

/* ---- communication and DDP (no NCCL or GPU here) */
static nx_status c_comm(const misuse_row* r, void** out) {
  nx_comm_id id;
  memset(&id, 0, sizeof id);
  char buf[8];
  size_t len, n;
  int32_t i32;
  nx_tensor ps[1] = {F.params[0]};
  switch (r->n) {
    case 0: return nx_comm_id_create(&id);
    case 1: return nx_comm_create((nx_comm*)out, &id, 0, 1, (nx_device){NX_CUDA, 0});
    case 2: return nx_comm_create_mpi((nx_comm*)out);
    case 3: return nx_comm_id_to_hex(&id, buf, sizeof buf, &len);
    case 4: return nx_comm_id_from_hex(&id, "zz");
    case 5: return nx_comm_id_from_hex(&id, NULL);
    case 6: return nx_comm_id_load(&id, "no/such/dir/comm.id", 0.0);
    case 7: return nx_comm_rank(NULL, &i32);
    case 8: return nx_comm_size((nx_comm)(void*)F.x4, &i32);
    case 9: return nx_comm_all_reduce(F.x4, NULL, NX_REDUCE_SUM, NULL);
    case 10: return nx_comm_all_gather(OUT_T, F.x4, NULL, NULL);
    case 11: return nx_ddp_create((nx_ddp*)out, ps, 1, NULL, 0, NULL);
    case 12: return nx_ddp_finish(NULL, NULL);
    case 13: return nx_ddp_bucket_count((nx_ddp)(void*)F.linear, &n);
    case 14: return nx_comm_id_to_hex(NULL, buf, sizeof buf, &len);
    default: return nx_comm_id_save(&id, NULL);
  }
}

/* ---- autocast (a successful push is popped again so the rows leave no scope open) */
static nx_status c_autocast(const misuse_row* r, void** out) {
  (void)out;
  nx_status st;
  switch (r->n) {
    case 0: st = nx_autocast_push(NX_CPU, NX_I32, true); break;
    case 1: st = nx_autocast_push((nx_device_type)99, NX_BF16, true); break;
    case 2: st = nx_autocast_push(NX_CPU, (nx_dtype)99, true); break;
    case 3: return nx_autocast_pop();
    case 4: return nx_autocast_get_dtype(NX_CPU, NULL);
    case 5: { nx_dtype d; return nx_autocast_get_dtype((nx_device_type)0, &d); }
    default: st = nx_autocast_push(NX_CPU, NX_F64, true); break;
  }
  if (st == NX_OK) nx_autocast_pop();
  return st;
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
#define GRAPH NX_HANDLE_GRAPH
#define STREAM NX_HANDLE_STREAM
#define EVENT NX_HANDLE_EVENT
#define SAFET NX_HANDLE_SAFETENSORS
#define SCALER NX_HANDLE_GRAD_SCALER
#define TOKENIZER NX_HANDLE_TOKENIZER
#define LOADER NX_HANDLE_TEXT_LOADER
#define COMM NX_HANDLE_COMM
#define DDP NX_HANDLE_DDP

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

    /* ---------------- handles (NULL, freed, of another type), NULL outs, bad enums, every family */
    ROW("nx_tensor_ndim: NULL tensor", c_tensor_bad, 0, 0, E_ARG, NONE, "nx_tensor_ndim", NULL),
    ROW("nx_tensor_ndim: freed tensor", c_tensor_bad, 1, 0, E_ARG, NONE, "nx_tensor_ndim", NULL),
    ROW("nx_tensor_ndim: module as tensor", c_tensor_bad, 2, 0, E_ARG, NONE, "nx_tensor_ndim", NULL),
    ROW("nx_tensor_shape: NULL tensor", c_tensor_bad, 0, 1, E_ARG, NONE, "nx_tensor_shape", NULL),
    ROW("nx_tensor_shape: freed tensor", c_tensor_bad, 1, 1, E_ARG, NONE, "nx_tensor_shape", NULL),
    ROW("nx_tensor_shape: module as tensor", c_tensor_bad, 2, 1, E_ARG, NONE, "nx_tensor_shape", NULL),
    ROW("nx_tensor_strides: NULL tensor", c_tensor_bad, 0, 2, E_ARG, NONE, "nx_tensor_strides", NULL),
    ROW("nx_tensor_strides: freed tensor", c_tensor_bad, 1, 2, E_ARG, NONE, "nx_tensor_strides", NULL),
    ROW("nx_tensor_numel: NULL tensor", c_tensor_bad, 0, 3, E_ARG, NONE, "nx_tensor_numel", NULL),
    ROW("nx_tensor_numel: freed tensor", c_tensor_bad, 1, 3, E_ARG, NONE, "nx_tensor_numel", NULL),
    ROW("nx_tensor_numel: module as tensor", c_tensor_bad, 2, 3, E_ARG, NONE, "nx_tensor_numel", NULL),
    ROW("nx_tensor_dtype: NULL tensor", c_tensor_bad, 0, 4, E_ARG, NONE, "nx_tensor_dtype", NULL),
    ROW("nx_tensor_dtype: freed tensor", c_tensor_bad, 1, 4, E_ARG, NONE, "nx_tensor_dtype", NULL),
    ROW("nx_tensor_dtype: module as tensor", c_tensor_bad, 2, 4, E_ARG, NONE, "nx_tensor_dtype", NULL),
    ROW("nx_tensor_device: freed tensor", c_tensor_bad, 1, 5, E_ARG, NONE, "nx_tensor_device", NULL),
    ROW("nx_tensor_device: module as tensor", c_tensor_bad, 2, 5, E_ARG, NONE, "nx_tensor_device", NULL),
    ROW("nx_tensor_is_contiguous: NULL tensor", c_tensor_bad, 0, 6, E_ARG, NONE, "nx_tensor_is_contiguous", NULL),
    ROW("nx_tensor_is_contiguous: freed tensor", c_tensor_bad, 1, 6, E_ARG, NONE, "nx_tensor_is_contiguous", NULL),
    ROW("nx_tensor_item: NULL tensor", c_tensor_bad, 0, 7, E_ARG, NONE, "nx_tensor_item", NULL),
    ROW("nx_tensor_item: freed tensor", c_tensor_bad, 1, 7, E_ARG, NONE, "nx_tensor_item", NULL),
    ROW("nx_tensor_item: module as tensor", c_tensor_bad, 2, 7, E_ARG, NONE, "nx_tensor_item", NULL),
    ROW("nx_tensor_data_ptr: NULL tensor", c_tensor_bad, 0, 8, E_ARG, NONE, "nx_tensor_data_ptr", NULL),
    ROW("nx_tensor_data_ptr: freed tensor", c_tensor_bad, 1, 8, E_ARG, NONE, "nx_tensor_data_ptr", NULL),
    ROW("nx_tensor_retain: NULL tensor", c_tensor_bad, 0, 9, E_ARG, TENSOR, "nx_tensor_retain", NULL),
    ROW("nx_tensor_retain: freed tensor", c_tensor_bad, 1, 9, E_ARG, TENSOR, "nx_tensor_retain", NULL),
    ROW("nx_tensor_retain: module as tensor", c_tensor_bad, 2, 9, E_ARG, TENSOR, "nx_tensor_retain", NULL),
    ROW("nx_tensor_copy_to_host: NULL tensor", c_tensor_bad, 0, 10, E_ARG, NONE, "nx_tensor_copy_to_host", NULL),
    ROW("nx_tensor_copy_to_host: freed tensor", c_tensor_bad, 1, 10, E_ARG, NONE, "nx_tensor_copy_to_host", NULL),
    ROW("nx_tensor_grad: NULL tensor", c_tensor_bad, 0, 11, E_ARG, TENSOR, "nx_tensor_grad", NULL),
    ROW("nx_tensor_grad: freed tensor", c_tensor_bad, 1, 11, E_ARG, TENSOR, "nx_tensor_grad", NULL),
    ROW("nx_tensor_grad: module as tensor", c_tensor_bad, 2, 11, E_ARG, TENSOR, "nx_tensor_grad", NULL),
    ROW("nx_tensor_zero_grad: NULL tensor", c_tensor_bad, 0, 12, E_ARG, NONE, "nx_tensor_zero_grad", NULL),
    ROW("nx_tensor_zero_grad: freed tensor", c_tensor_bad, 1, 12, E_ARG, NONE, "nx_tensor_zero_grad", NULL),
    ROW("nx_tensor_detach: freed tensor", c_tensor_bad, 1, 13, E_ARG, TENSOR, "nx_tensor_detach", NULL),
    ROW("nx_tensor_detach: module as tensor", c_tensor_bad, 2, 13, E_ARG, TENSOR, "nx_tensor_detach", NULL),
    ROW("nx_tensor_set_requires_grad: NULL tensor", c_tensor_bad, 0, 14, E_ARG, NONE, "nx_tensor_set_requires_grad", NULL),
    ROW("nx_tensor_set_requires_grad: freed tensor", c_tensor_bad, 1, 14, E_ARG, NONE, "nx_tensor_set_requires_grad", NULL),
    ROW("nx_tensor_set_requires_grad: module as tensor", c_tensor_bad, 2, 14, E_ARG, NONE, "nx_tensor_set_requires_grad", NULL),
    ROW("nx_tensor_get_requires_grad: freed tensor", c_tensor_bad, 1, 15, E_ARG, NONE, "nx_tensor_get_requires_grad", NULL),
    ROW("nx_tensor_get_requires_grad: module as tensor", c_tensor_bad, 2, 15, E_ARG, NONE, "nx_tensor_get_requires_grad", NULL),
    ROW("nx_tensor_is_leaf: NULL tensor", c_tensor_bad, 0, 16, E_ARG, NONE, "nx_tensor_is_leaf", NULL),
    ROW("nx_tensor_is_leaf: freed tensor", c_tensor_bad, 1, 16, E_ARG, NONE, "nx_tensor_is_leaf", NULL),
    ROW("nx_tensor_to: NULL tensor", c_tensor_bad, 0, 17, E_ARG, TENSOR, "nx_tensor_to", NULL),
    ROW("nx_tensor_to: freed tensor", c_tensor_bad, 1, 17, E_ARG, TENSOR, "nx_tensor_to", NULL),
    ROW("nx_tensor_to: module as tensor", c_tensor_bad, 2, 17, E_ARG, TENSOR, "nx_tensor_to", NULL),
    ROW("nx_add: NULL tensor", c_tensor_bad, 0, 18, E_ARG, TENSOR, "nx_add", NULL),
    ROW("nx_add: freed tensor", c_tensor_bad, 1, 18, E_ARG, TENSOR, "nx_add", NULL),
    ROW("nx_add: module as tensor", c_tensor_bad, 2, 18, E_ARG, TENSOR, "nx_add", NULL),
    ROW("nx_matmul: NULL tensor", c_tensor_bad, 0, 19, E_ARG, TENSOR, "nx_matmul", NULL),
    ROW("nx_matmul: freed tensor", c_tensor_bad, 1, 19, E_ARG, TENSOR, "nx_matmul", NULL),
    ROW("nx_matmul: module as tensor", c_tensor_bad, 2, 19, E_ARG, TENSOR, "nx_matmul", NULL),
    ROW("nx_sum: NULL tensor", c_tensor_bad, 0, 20, E_ARG, TENSOR, "nx_sum", NULL),
    ROW("nx_sum: freed tensor", c_tensor_bad, 1, 20, E_ARG, TENSOR, "nx_sum", NULL),
    ROW("nx_sum: module as tensor", c_tensor_bad, 2, 20, E_ARG, TENSOR, "nx_sum", NULL),
    ROW("nx_softmax: freed tensor", c_tensor_bad, 1, 21, E_ARG, TENSOR, "nx_softmax", NULL),
    ROW("nx_softmax: module as tensor", c_tensor_bad, 2, 21, E_ARG, TENSOR, "nx_softmax", NULL),
    ROW("nx_reshape: NULL tensor", c_tensor_bad, 0, 22, E_ARG, TENSOR, "nx_reshape", NULL),
    ROW("nx_reshape: freed tensor", c_tensor_bad, 1, 22, E_ARG, TENSOR, "nx_reshape", NULL),
    ROW("nx_relu: freed tensor", c_tensor_bad, 1, 23, E_ARG, TENSOR, "nx_relu", NULL),
    ROW("nx_relu: module as tensor", c_tensor_bad, 2, 23, E_ARG, TENSOR, "nx_relu", NULL),
    ROW("nx_where: NULL tensor", c_tensor_bad, 0, 24, E_ARG, TENSOR, "nx_where", NULL),
    ROW("nx_where: freed tensor", c_tensor_bad, 1, 24, E_ARG, TENSOR, "nx_where", NULL),
    ROW("nx_index_select: freed tensor", c_tensor_bad, 1, 25, E_ARG, TENSOR, "nx_index_select", NULL),
    ROW("nx_index_select: module as tensor", c_tensor_bad, 2, 25, E_ARG, TENSOR, "nx_index_select", NULL),
    ROW("nx_mse_loss: NULL tensor", c_tensor_bad, 0, 26, E_ARG, TENSOR, "nx_mse_loss", NULL),
    ROW("nx_mse_loss: freed tensor", c_tensor_bad, 1, 26, E_ARG, TENSOR, "nx_mse_loss", NULL),
    ROW("nx_backward: NULL tensor", c_tensor_bad, 0, 27, E_ARG, NONE, "nx_backward", NULL),
    ROW("nx_backward: freed tensor", c_tensor_bad, 1, 27, E_ARG, NONE, "nx_backward", NULL),
    ROW("nx_backward: module as tensor", c_tensor_bad, 2, 27, E_ARG, NONE, "nx_backward", NULL),
    ROW("nx_graph_create: NULL tensor", c_tensor_bad, 0, 28, E_ARG, GRAPH, "nx_graph_create", NULL),
    ROW("nx_graph_create: freed tensor", c_tensor_bad, 1, 28, E_ARG, GRAPH, "nx_graph_create", NULL),
    ROW("nx_graph_create: module as tensor", c_tensor_bad, 2, 28, E_ARG, GRAPH, "nx_graph_create", NULL),
    ROW("nx_module_forward: freed tensor", c_tensor_bad, 1, 29, E_ARG, TENSOR, "nx_module_forward", NULL),
    ROW("nx_module_forward: module as tensor", c_tensor_bad, 2, 29, E_ARG, TENSOR, "nx_module_forward", NULL),
    ROW("nx_add_: NULL tensor", c_tensor_bad, 0, 30, E_ARG, NONE, "nx_add_", NULL),
    ROW("nx_add_: freed tensor", c_tensor_bad, 1, 30, E_ARG, NONE, "nx_add_", NULL),
    ROW("nx_tensor_to_dlpack: NULL tensor", c_tensor_bad, 0, 31, E_ARG, NONE, "nx_tensor_to_dlpack", NULL),
    ROW("nx_tensor_to_dlpack: freed tensor", c_tensor_bad, 1, 31, E_ARG, NONE, "nx_tensor_to_dlpack", NULL),
    ROW("nx_tensor_to_dlpack: module as tensor", c_tensor_bad, 2, 31, E_ARG, NONE, "nx_tensor_to_dlpack", NULL),
    ROW("nx_tensor_ndim: NULL out", c_tensor_null_out, 0, 0, E_ARG, NONE, "nx_tensor_ndim", NULL),
    ROW("nx_tensor_shape: NULL out", c_tensor_null_out, 0, 1, E_ARG, NONE, "nx_tensor_shape", NULL),
    ROW("nx_tensor_numel: NULL out", c_tensor_null_out, 0, 2, E_ARG, NONE, "nx_tensor_numel", NULL),
    ROW("nx_tensor_dtype: NULL out", c_tensor_null_out, 0, 3, E_ARG, NONE, "nx_tensor_dtype", NULL),
    ROW("nx_tensor_device: NULL out", c_tensor_null_out, 0, 4, E_ARG, NONE, "nx_tensor_device", NULL),
    ROW("nx_tensor_item: NULL out", c_tensor_null_out, 0, 5, E_ARG, NONE, "nx_tensor_item", NULL),
    ROW("nx_tensor_retain: NULL out", c_tensor_null_out, 0, 6, E_ARG, NONE, "nx_tensor_retain", NULL),
    ROW("nx_add: NULL out", c_tensor_null_out, 0, 7, E_ARG, NONE, "nx_add", NULL),
    ROW("nx_tensor_zeros: NULL out", c_tensor_null_out, 0, 8, E_ARG, NONE, "nx_tensor_zeros", NULL),
    ROW("nx_tensor_to_dlpack: NULL out", c_tensor_null_out, 0, 9, E_ARG, NONE, "nx_tensor_to_dlpack", NULL),
    ROW("nx_tensor_get_requires_grad: NULL out", c_tensor_null_out, 0, 10, E_ARG, NONE, "nx_tensor_get_requires_grad", NULL),
    ROW("nx_tensor_copy_to_host: NULL out", c_tensor_null_out, 0, 11, E_ARG, NONE, "nx_tensor_copy_to_host", NULL),
    ROW("add [2,3] + [4]", c_ops_bad_value, 0, 0, E_SHAPE, TENSOR, "nx_add", NULL),
    ROW("matmul [2,3] @ [2,3]", c_ops_bad_value, 0, 1, E_SHAPE, TENSOR, "nx_matmul", NULL),
    ROW("matmul i32 @ f32", c_ops_bad_value, 0, 2, E_DTYPE, TENSOR, "nx_matmul", NULL),
    ROW("where cond f32", c_ops_bad_value, 0, 3, E_DTYPE, TENSOR, "nx_where", NULL),
    ROW("softmax axis 2 of rank 2", c_ops_bad_value, 0, 4, E_SHAPE, TENSOR, "nx_softmax", NULL),
    ROW("argmax axis -3 of rank 2", c_ops_bad_value, 0, 5, E_SHAPE, TENSOR, "nx_argmax", NULL),
    ROW("squeeze an axis of size 3", c_ops_bad_value, 0, 6, E_SHAPE, TENSOR, "nx_squeeze", NULL),
    ROW("permute a repeated axis", c_ops_bad_value, 0, 7, E_SHAPE, TENSOR, "nx_permute", NULL),
    ROW("cast to dtype 99", c_ops_bad_value, 0, 8, E_DTYPE, TENSOR, "nx_cast", NULL),
    ROW("tensor_shape capacity 1 < ndim 2", c_ops_bad_value, 0, 9, E_SHAPE, NONE, "nx_tensor_shape", NULL),
    ROW("log_softmax axis MIN", c_ops_bad_value, 0, 10, E_SHAPE, TENSOR, "nx_log_softmax", NULL),
    ROW("one_hot dtype -1", c_ops_bad_value, 0, 11, E_DTYPE, TENSOR, "nx_one_hot", NULL),
    ROW("gather index of rank 1 for rank 2", c_ops_bad_value, 0, 13, E_SHAPE, TENSOR, "nx_gather", NULL),
    ROW("copy_to_host 3 bytes of 16", c_ops_bad_value, 0, 14, E_ARG, NONE, "nx_tensor_copy_to_host", NULL),
    ROW("item of 4 elements", c_ops_bad_value, 0, 15, E_SHAPE, NONE, "nx_tensor_item", NULL),
    ROW("cross_entropy reduction 7", c_ops_bad_value, 0, 16, E_ARG, TENSOR, "nx_cross_entropy", NULL),
    ROW("mse_loss [2,3] vs [4]", c_ops_bad_value, 0, 17, E_SHAPE, TENSOR, "nx_mse_loss", NULL),
    ROW("bce_with_logits [2,3] vs [4,3]", c_ops_bad_value, 0, 18, E_SHAPE, TENSOR, "nx_bce_with_logits", NULL),
    ROW("nll_loss f32 target", c_ops_bad_value, 0, 19, E_DTYPE, TENSOR, "nx_nll_loss", NULL),
    ROW("cross_entropy 1-d logits", c_ops_bad_value, 0, 20, E_SHAPE, TENSOR, "nx_cross_entropy", NULL),
    ROW("softmax_cross_entropy target 7 of 3 classes", c_ops_bad_value, 0, 21, E_ARG, TENSOR, "nx_softmax_cross_entropy", NULL),
    ROW("mse_loss reduction -1", c_ops_bad_value, 0, 22, E_ARG, TENSOR, "nx_mse_loss", NULL),
    ROW("tensor_to a CUDA device not there", c_ops_bad_value, 0, 23, NX_ERR_DEVICE, TENSOR, "nx_tensor_to", NULL),
    ROW("tensor_to device type 42", c_ops_bad_value, 0, 24, NX_ERR_DEVICE, TENSOR, "nx_tensor_to", NULL),
    ROW("cat [4] with [2,3]", c_ops_bad_value, 0, 25, E_SHAPE, TENSOR, "nx_cat", NULL),
    ROW("stack [4] with [4,3]", c_ops_bad_value, 0, 26, E_SHAPE, TENSOR, "nx_stack", NULL),
    ROW("requires_grad on i64", c_ops_bad_value, 0, 27, E_DTYPE, NONE, "nx_tensor_set_requires_grad", NULL),
    ROW("backward of 6 elements, grad NULL", c_autograd, 0, 0, E_SHAPE, NONE, "nx_backward", NULL),
    ROW("backward grad [4] for [3,2]", c_autograd, 0, 1, E_SHAPE, NONE, "nx_backward", NULL),
    ROW("autograd_grad grads NULL", c_autograd, 0, 2, E_ARG, NONE, "nx_autograd_grad", NULL),
    ROW("autograd_grad inputs NULL", c_autograd, 0, 3, E_ARG, NONE, "nx_autograd_grad", NULL),
    ROW("autograd_grad a freed input", c_autograd, 0, 4, E_ARG, NONE, "nx_autograd_grad", NULL),
    ROW("jvp out NULL", c_autograd, 0, 5, E_ARG, NONE, "nx_jvp", NULL),
    ROW("jvp tangents NULL", c_autograd, 0, 6, E_ARG, TENSOR, "nx_jvp", NULL),
    ROW("jvp tangent [4] for [3,2]", c_autograd, 0, 7, E_SHAPE, TENSOR, "nx_jvp", NULL),
    ROW("checkpoint fn NULL", c_autograd, 0, 8, E_ARG, NONE, "nx_checkpoint", NULL),
    ROW("graph_create out NULL", c_autograd, 0, 9, E_ARG, NONE, "nx_graph_create", NULL),
    ROW("autograd_grad SIZE_MAX inputs ending in NULL", c_autograd, 0, 10, E_ARG, NONE, "nx_autograd_grad", NULL),
    ROW("nx_graph_node_count: NULL graph", c_graph_bad, 0, 0, E_ARG, NONE, "nx_graph_node_count", NULL),
    ROW("nx_graph_node_count: freed graph", c_graph_bad, 1, 0, E_ARG, NONE, "nx_graph_node_count", NULL),
    ROW("nx_graph_node_count: tensor as graph", c_graph_bad, 2, 0, E_ARG, NONE, "nx_graph_node_count", NULL),
    ROW("nx_graph_node_name: NULL graph", c_graph_bad, 0, 1, E_ARG, NONE, "nx_graph_node_name", NULL),
    ROW("nx_graph_node_name: freed graph", c_graph_bad, 1, 1, E_ARG, NONE, "nx_graph_node_name", NULL),
    ROW("nx_graph_node_name: tensor as graph", c_graph_bad, 2, 1, E_ARG, NONE, "nx_graph_node_name", NULL),
    ROW("nx_graph_saved_bytes: NULL graph", c_graph_bad, 0, 2, E_ARG, NONE, "nx_graph_saved_bytes", NULL),
    ROW("nx_graph_saved_bytes: freed graph", c_graph_bad, 1, 2, E_ARG, NONE, "nx_graph_saved_bytes", NULL),
    ROW("nx_graph_saved_bytes: tensor as graph", c_graph_bad, 2, 2, E_ARG, NONE, "nx_graph_saved_bytes", NULL),
    ROW("nx_graph_to_dot: NULL graph", c_graph_bad, 0, 3, E_ARG, NONE, "nx_graph_to_dot", NULL),
    ROW("nx_graph_to_dot: freed graph", c_graph_bad, 1, 3, E_ARG, NONE, "nx_graph_to_dot", NULL),
    ROW("nx_graph_to_dot: tensor as graph", c_graph_bad, 2, 3, E_ARG, NONE, "nx_graph_to_dot", NULL),
    ROW("graph_node_name 999", c_graph_value, 0, 0, E_ARG, NONE, "nx_graph_node_name", NULL),
    ROW("graph_node_name SIZE_MAX", c_graph_value, 0, 1, E_ARG, NONE, "nx_graph_node_name", NULL),
    ROW("graph_node_count out NULL", c_graph_value, 0, 2, E_ARG, NONE, "nx_graph_node_count", NULL),
    ROW("graph_to_dot out NULL", c_graph_value, 0, 3, E_ARG, NONE, "nx_graph_to_dot", NULL),
    ROW("graph_saved_bytes out NULL", c_graph_value, 0, 4, E_ARG, NONE, "nx_graph_saved_bytes", NULL),
    ROW("stream_create out NULL", c_stream_event, 0, 0, E_ARG, NONE, "nx_stream_create", NULL),
    ROW("stream_create on a CUDA device not there", c_stream_event, 0, 1, NX_ERR_DEVICE, STREAM, "nx_stream_create", NULL),
    ROW("stream_create device type 99", c_stream_event, 0, 2, NX_ERR_DEVICE, STREAM, "nx_stream_create", NULL),
    ROW("stream_device of a tokenizer", c_stream_event, 0, 3, E_ARG, NONE, "nx_stream_device", NULL),
    ROW("stream_device of a tensor", c_stream_event, 0, 4, E_ARG, NONE, "nx_stream_device", NULL),
    ROW("stream_synchronize of a module", c_stream_event, 0, 5, E_ARG, NONE, "nx_stream_synchronize", NULL),
    ROW("event_create out NULL", c_stream_event, 0, 6, E_ARG, NONE, "nx_event_create", NULL),
    ROW("event_create on a CUDA device not there", c_stream_event, 0, 7, NX_ERR_DEVICE, EVENT, "nx_event_create", NULL),
    ROW("event_create device type 99", c_stream_event, 0, 8, NX_ERR_DEVICE, EVENT, "nx_event_create", NULL),
    ROW("event_record NULL", c_stream_event, 0, 9, E_ARG, NONE, "nx_event_record", NULL),
    ROW("event_wait NULL", c_stream_event, 0, 10, E_ARG, NONE, "nx_event_wait", NULL),
    ROW("event_synchronize NULL", c_stream_event, 0, 11, E_ARG, NONE, "nx_event_synchronize", NULL),
    ROW("event_synchronize of a tensor", c_stream_event, 0, 12, E_ARG, NONE, "nx_event_synchronize", NULL),
    ROW("add on a module as the stream", c_stream_event, 0, 13, E_ARG, TENSOR, "nx_add", NULL),
    ROW("safetensors_open out NULL", c_safetensors, 0, 0, E_ARG, NONE, "nx_safetensors_open", NULL),
    ROW("safetensors_open path NULL", c_safetensors, 0, 1, E_ARG, SAFET, "nx_safetensors_open", NULL),
    ROW("safetensors_open missing file", c_safetensors, 0, 2, NX_ERR_IO, SAFET, "nx_safetensors_open", NULL),
    ROW("safetensors_count out NULL", c_safetensors, 0, 3, E_ARG, NONE, "nx_safetensors_count", NULL),
    ROW("safetensors_name 99 of 1", c_safetensors, 0, 4, E_ARG, NONE, "nx_safetensors_name", NULL),
    ROW("safetensors_get no such name", c_safetensors, 0, 5, E_ARG, TENSOR, "nx_safetensors_get", NULL),
    ROW("safetensors_get name NULL", c_safetensors, 0, 6, E_ARG, TENSOR, "nx_safetensors_get", NULL),
    ROW("safetensors_metadata key NULL", c_safetensors, 0, 7, E_ARG, NONE, "nx_safetensors_metadata", NULL),
    ROW("safetensors_save path NULL", c_safetensors, 0, 8, E_ARG, NONE, "nx_safetensors_save", NULL),
    ROW("safetensors_save names NULL", c_safetensors, 0, 9, E_ARG, NONE, "nx_safetensors_save", NULL),
    ROW("safetensors_save a NULL tensor", c_safetensors, 0, 10, E_ARG, NONE, "nx_safetensors_save", NULL),
    ROW("safetensors_save into a missing dir", c_safetensors, 0, 11, NX_ERR_IO, NONE, "nx_safetensors_save", NULL),
    ROW("safetensors_get onto a CUDA device not there", c_safetensors, 0, 12, NX_ERR_DEVICE, TENSOR, "nx_safetensors_get", NULL),
    ROW("safetensors_name out NULL", c_safetensors, 0, 13, E_ARG, NONE, "nx_safetensors_name", NULL),
    ROW("nx_safetensors_count: NULL file", c_safetensors_bad, 0, 0, E_ARG, NONE, "nx_safetensors_count", NULL),
    ROW("nx_safetensors_count: freed file", c_safetensors_bad, 1, 0, E_ARG, NONE, "nx_safetensors_count", NULL),
    ROW("nx_safetensors_count: loader as file", c_safetensors_bad, 2, 0, E_ARG, NONE, "nx_safetensors_count", NULL),
    ROW("nx_safetensors_name: NULL file", c_safetensors_bad, 0, 1, E_ARG, NONE, "nx_safetensors_name", NULL),
    ROW("nx_safetensors_name: freed file", c_safetensors_bad, 1, 1, E_ARG, NONE, "nx_safetensors_name", NULL),
    ROW("nx_safetensors_name: loader as file", c_safetensors_bad, 2, 1, E_ARG, NONE, "nx_safetensors_name", NULL),
    ROW("nx_safetensors_get: NULL file", c_safetensors_bad, 0, 2, E_ARG, TENSOR, "nx_safetensors_get", NULL),
    ROW("nx_safetensors_get: freed file", c_safetensors_bad, 1, 2, E_ARG, TENSOR, "nx_safetensors_get", NULL),
    ROW("nx_safetensors_get: loader as file", c_safetensors_bad, 2, 2, E_ARG, TENSOR, "nx_safetensors_get", NULL),
    ROW("nx_safetensors_metadata: NULL file", c_safetensors_bad, 0, 3, E_ARG, NONE, "nx_safetensors_metadata", NULL),
    ROW("nx_safetensors_metadata: freed file", c_safetensors_bad, 1, 3, E_ARG, NONE, "nx_safetensors_metadata", NULL),
    ROW("nx_safetensors_metadata: loader as file", c_safetensors_bad, 2, 3, E_ARG, NONE, "nx_safetensors_metadata", NULL),
    ROW("nx_module_forward: NULL module", c_module_bad, 0, 0, E_ARG, TENSOR, "nx_module_forward", NULL),
    ROW("nx_module_forward: freed module", c_module_bad, 1, 0, E_ARG, TENSOR, "nx_module_forward", NULL),
    ROW("nx_module_forward: tensor as module", c_module_bad, 2, 0, E_ARG, TENSOR, "nx_module_forward", NULL),
    ROW("nx_module_kind: freed module", c_module_bad, 1, 1, E_ARG, NONE, "nx_module_kind", NULL),
    ROW("nx_module_kind: tensor as module", c_module_bad, 2, 1, E_ARG, NONE, "nx_module_kind", NULL),
    ROW("nx_module_parameter_count: freed module", c_module_bad, 1, 2, E_ARG, NONE, "nx_module_parameter_count", NULL),
    ROW("nx_module_parameter_count: tensor as module", c_module_bad, 2, 2, E_ARG, NONE, "nx_module_parameter_count", NULL),
    ROW("nx_module_parameter: NULL module", c_module_bad, 0, 3, E_ARG, TENSOR, "nx_module_parameter", NULL),
    ROW("nx_module_parameter: freed module", c_module_bad, 1, 3, E_ARG, TENSOR, "nx_module_parameter", NULL),
    ROW("nx_module_parameter: tensor as module", c_module_bad, 2, 3, E_ARG, TENSOR, "nx_module_parameter", NULL),
    ROW("nx_module_set_training: freed module", c_module_bad, 1, 4, E_ARG, NONE, "nx_module_set_training", NULL),
    ROW("nx_module_set_training: tensor as module", c_module_bad, 2, 4, E_ARG, NONE, "nx_module_set_training", NULL),
    ROW("nx_module_get_training: freed module", c_module_bad, 1, 5, E_ARG, NONE, "nx_module_get_training", NULL),
    ROW("nx_module_get_training: tensor as module", c_module_bad, 2, 5, E_ARG, NONE, "nx_module_get_training", NULL),
    ROW("nx_module_save: freed module", c_module_bad, 1, 6, E_ARG, NONE, "nx_module_save", NULL),
    ROW("nx_module_save: tensor as module", c_module_bad, 2, 6, E_ARG, NONE, "nx_module_save", NULL),
    ROW("nx_module_load: freed module", c_module_bad, 1, 7, E_ARG, NONE, "nx_module_load", NULL),
    ROW("nx_module_load: tensor as module", c_module_bad, 2, 7, E_ARG, NONE, "nx_module_load", NULL),
    ROW("nx_module_to: NULL module", c_module_bad, 0, 8, E_ARG, NONE, "nx_module_to", NULL),
    ROW("nx_module_to: freed module", c_module_bad, 1, 8, E_ARG, NONE, "nx_module_to", NULL),
    ROW("nx_module_to: tensor as module", c_module_bad, 2, 8, E_ARG, NONE, "nx_module_to", NULL),
    ROW("nx_residual_create: freed module", c_module_bad, 1, 9, E_ARG, MODULE, "nx_residual_create", NULL),
    ROW("nx_residual_create: tensor as module", c_module_bad, 2, 9, E_ARG, MODULE, "nx_residual_create", NULL),
    ROW("nx_module_parameters: NULL module", c_module_bad, 0, 10, E_ARG, NONE, "nx_module_parameters", NULL),
    ROW("nx_module_parameters: freed module", c_module_bad, 1, 10, E_ARG, NONE, "nx_module_parameters", NULL),
    ROW("nx_module_parameters: tensor as module", c_module_bad, 2, 10, E_ARG, NONE, "nx_module_parameters", NULL),
    ROW("forward linear(2) on [2,3]", c_module_value, 0, 0, E_SHAPE, TENSOR, "nx_module_forward", NULL),
    ROW("module_kind out NULL", c_module_value, 0, 1, E_ARG, NONE, "nx_module_kind", NULL),
    ROW("module_parameter_count out NULL", c_module_value, 0, 2, E_ARG, NONE, "nx_module_parameter_count", NULL),
    ROW("module_parameter 99 of 2", c_module_value, 0, 3, E_ARG, TENSOR, "nx_module_parameter", NULL),
    ROW("module_to a CUDA device not there", c_module_value, 0, 4, NX_ERR_DEVICE, NONE, "nx_module_to", NULL),
    ROW("module_get_training out NULL", c_module_value, 0, 5, E_ARG, NONE, "nx_module_get_training", NULL),
    ROW("module_save path NULL", c_module_value, 0, 6, E_ARG, NONE, "nx_module_save", NULL),
    ROW("module_load path NULL", c_module_value, 0, 7, E_ARG, NONE, "nx_module_load", NULL),
    ROW("activation unknown name", c_module_value, 0, 8, E_ARG, MODULE, "nx_activation_create", NULL),
    ROW("activation name NULL", c_module_value, 0, 9, E_ARG, MODULE, "nx_activation_create", NULL),
    ROW("sequential layers NULL", c_module_value, 0, 10, E_ARG, MODULE, "nx_sequential_create", NULL),
    ROW("sequential with a NULL layer", c_module_value, 0, 11, E_ARG, MODULE, "nx_sequential_create", NULL),
    ROW("linear dtype 99", c_module_value, 0, 12, E_DTYPE, MODULE, "nx_linear_create", NULL),
    ROW("linear i32", c_module_value, 0, 13, E_DTYPE, MODULE, "nx_linear_create", NULL),
    ROW("linear on a CUDA device not there", c_module_value, 0, 14, NX_ERR_DEVICE, MODULE, "nx_linear_create", NULL),
    ROW("embedding device type -5", c_module_value, 0, 15, NX_ERR_DEVICE, MODULE, "nx_embedding_create", NULL),
    ROW("avg_pool2d kernel 0", c_module_value, 0, 16, E_ARG, MODULE, "nx_avg_pool2d_create", NULL),
    ROW("flatten_create out NULL", c_module_value, 0, 17, E_ARG, NONE, "nx_flatten_create", NULL),
    ROW("attention config NULL", c_module_value, 0, 18, E_ARG, MODULE, "nx_attention_create", NULL),
    ROW("gpt config NULL", c_module_value, 0, 19, E_ARG, MODULE, "nx_gpt_create", NULL),
    ROW("module_forward out NULL", c_module_value, 0, 20, E_ARG, NONE, "nx_module_forward", NULL),
    ROW("nx_optimizer_step: NULL optimizer", c_optim_bad, 0, 0, E_ARG, NONE, "nx_optimizer_step", NULL),
    ROW("nx_optimizer_step: freed optimizer", c_optim_bad, 1, 0, E_ARG, NONE, "nx_optimizer_step", NULL),
    ROW("nx_optimizer_step: module as optimizer", c_optim_bad, 2, 0, E_ARG, NONE, "nx_optimizer_step", NULL),
    ROW("nx_optimizer_zero_grad: NULL optimizer", c_optim_bad, 0, 1, E_ARG, NONE, "nx_optimizer_zero_grad", NULL),
    ROW("nx_optimizer_zero_grad: freed optimizer", c_optim_bad, 1, 1, E_ARG, NONE, "nx_optimizer_zero_grad", NULL),
    ROW("nx_optimizer_zero_grad: module as optimizer", c_optim_bad, 2, 1, E_ARG, NONE, "nx_optimizer_zero_grad", NULL),
    ROW("nx_optimizer_set_lr: NULL optimizer", c_optim_bad, 0, 2, E_ARG, NONE, "nx_optimizer_set_lr", NULL),
    ROW("nx_optimizer_set_lr: freed optimizer", c_optim_bad, 1, 2, E_ARG, NONE, "nx_optimizer_set_lr", NULL),
    ROW("nx_optimizer_set_lr: module as optimizer", c_optim_bad, 2, 2, E_ARG, NONE, "nx_optimizer_set_lr", NULL),
    ROW("nx_optimizer_get_lr: NULL optimizer", c_optim_bad, 0, 3, E_ARG, NONE, "nx_optimizer_get_lr", NULL),
    ROW("nx_optimizer_get_lr: freed optimizer", c_optim_bad, 1, 3, E_ARG, NONE, "nx_optimizer_get_lr", NULL),
    ROW("nx_optimizer_get_lr: module as optimizer", c_optim_bad, 2, 3, E_ARG, NONE, "nx_optimizer_get_lr", NULL),
    ROW("nx_optimizer_save: NULL optimizer", c_optim_bad, 0, 4, E_ARG, NONE, "nx_optimizer_save", NULL),
    ROW("nx_optimizer_save: freed optimizer", c_optim_bad, 1, 4, E_ARG, NONE, "nx_optimizer_save", NULL),
    ROW("nx_optimizer_save: module as optimizer", c_optim_bad, 2, 4, E_ARG, NONE, "nx_optimizer_save", NULL),
    ROW("nx_optimizer_load: NULL optimizer", c_optim_bad, 0, 5, E_ARG, NONE, "nx_optimizer_load", NULL),
    ROW("nx_optimizer_load: freed optimizer", c_optim_bad, 1, 5, E_ARG, NONE, "nx_optimizer_load", NULL),
    ROW("nx_optimizer_load: module as optimizer", c_optim_bad, 2, 5, E_ARG, NONE, "nx_optimizer_load", NULL),
    ROW("optimizer_get_lr out NULL", c_optim_value, 0, 0, E_ARG, NONE, "nx_optimizer_get_lr", NULL),
    ROW("optimizer_load missing file", c_optim_value, 0, 1, NX_ERR_IO, NONE, "nx_optimizer_load", NULL),
    ROW("optimizer_save path NULL", c_optim_value, 0, 2, E_ARG, NONE, "nx_optimizer_save", NULL),
    ROW("sgd params NULL", c_optim_value, 0, 3, E_ARG, OPTIM, "nx_sgd_create", NULL),
    ROW("adam params NULL", c_optim_value, 0, 4, E_ARG, OPTIM, "nx_adam_create", NULL),
    ROW("sgd a freed parameter", c_optim_value, 0, 5, E_ARG, OPTIM, "nx_sgd_create", NULL),
    ROW("adam a freed parameter", c_optim_value, 0, 6, E_ARG, OPTIM, "nx_adam_create", NULL),
    ROW("set_lr -inf", c_optim_value, 0, 8, E_ARG, NONE, "nx_optimizer_set_lr", NULL),
    ROW("sgd out NULL", c_optim_value, 0, 7, E_ARG, NONE, "nx_sgd_create", NULL),
    ROW("grad_scaler init_scale 0", c_scaler_options, 0, 0, E_ARG, SCALER, "nx_grad_scaler_create", NULL),
    ROW("grad_scaler init_scale NaN", c_scaler_options, NAN, 0, E_ARG, SCALER, "nx_grad_scaler_create", NULL),
    ROW("grad_scaler init_scale -1", c_scaler_options, -1, 0, E_ARG, SCALER, "nx_grad_scaler_create", NULL),
    ROW("grad_scaler init_scale 1e39 (inf in f32)", c_scaler_options, 1e+39, 0, E_ARG, SCALER, "nx_grad_scaler_create", NULL),
    ROW("grad_scaler init_scale inf", c_scaler_options, INFINITY, 0, E_ARG, SCALER, "nx_grad_scaler_create", NULL),
    ROW("grad_scaler growth_factor 1", c_scaler_options, 1, 1, E_ARG, SCALER, "nx_grad_scaler_create", NULL),
    ROW("grad_scaler growth_factor NaN", c_scaler_options, NAN, 1, E_ARG, SCALER, "nx_grad_scaler_create", NULL),
    ROW("grad_scaler growth_factor 0.5", c_scaler_options, 0.5, 1, E_ARG, SCALER, "nx_grad_scaler_create", NULL),
    ROW("grad_scaler backoff_factor 1", c_scaler_options, 1, 2, E_ARG, SCALER, "nx_grad_scaler_create", NULL),
    ROW("grad_scaler backoff_factor 0", c_scaler_options, 0, 2, E_ARG, SCALER, "nx_grad_scaler_create", NULL),
    ROW("grad_scaler backoff_factor NaN", c_scaler_options, NAN, 2, E_ARG, SCALER, "nx_grad_scaler_create", NULL),
    ROW("grad_scaler backoff_factor -0.5", c_scaler_options, -0.5, 2, E_ARG, SCALER, "nx_grad_scaler_create", NULL),
    ROW("grad_scaler growth_interval 0", c_scaler_options, 0, 3, E_ARG, SCALER, "nx_grad_scaler_create", NULL),
    ROW("grad_scaler growth_interval -5", c_scaler_options, -5, 3, E_ARG, SCALER, "nx_grad_scaler_create", NULL),
    ROW("nx_grad_scaler_scale: NULL scaler", c_scaler_bad, 0, 0, E_ARG, TENSOR, "nx_grad_scaler_scale", NULL),
    ROW("nx_grad_scaler_scale: freed scaler", c_scaler_bad, 1, 0, E_ARG, TENSOR, "nx_grad_scaler_scale", NULL),
    ROW("nx_grad_scaler_scale: optimizer as scaler", c_scaler_bad, 2, 0, E_ARG, TENSOR, "nx_grad_scaler_scale", NULL),
    ROW("nx_grad_scaler_unscale: NULL scaler", c_scaler_bad, 0, 1, E_ARG, NONE, "nx_grad_scaler_unscale", NULL),
    ROW("nx_grad_scaler_unscale: freed scaler", c_scaler_bad, 1, 1, E_ARG, NONE, "nx_grad_scaler_unscale", NULL),
    ROW("nx_grad_scaler_unscale: optimizer as scaler", c_scaler_bad, 2, 1, E_ARG, NONE, "nx_grad_scaler_unscale", NULL),
    ROW("nx_grad_scaler_step: NULL scaler", c_scaler_bad, 0, 2, E_ARG, NONE, "nx_grad_scaler_step", NULL),
    ROW("nx_grad_scaler_step: freed scaler", c_scaler_bad, 1, 2, E_ARG, NONE, "nx_grad_scaler_step", NULL),
    ROW("nx_grad_scaler_step: optimizer as scaler", c_scaler_bad, 2, 2, E_ARG, NONE, "nx_grad_scaler_step", NULL),
    ROW("nx_grad_scaler_update: NULL scaler", c_scaler_bad, 0, 3, E_ARG, NONE, "nx_grad_scaler_update", NULL),
    ROW("nx_grad_scaler_update: freed scaler", c_scaler_bad, 1, 3, E_ARG, NONE, "nx_grad_scaler_update", NULL),
    ROW("nx_grad_scaler_update: optimizer as scaler", c_scaler_bad, 2, 3, E_ARG, NONE, "nx_grad_scaler_update", NULL),
    ROW("nx_grad_scaler_get_scale: NULL scaler", c_scaler_bad, 0, 4, E_ARG, NONE, "nx_grad_scaler_get_scale", NULL),
    ROW("nx_grad_scaler_get_scale: freed scaler", c_scaler_bad, 1, 4, E_ARG, NONE, "nx_grad_scaler_get_scale", NULL),
    ROW("nx_grad_scaler_get_scale: optimizer as scaler", c_scaler_bad, 2, 4, E_ARG, NONE, "nx_grad_scaler_get_scale", NULL),
    ROW("grad_scaler_create out NULL", c_scaler_value, 0, 0, E_ARG, NONE, "nx_grad_scaler_create", NULL),
    ROW("grad_scaler_scale loss NULL", c_scaler_value, 0, 1, E_ARG, TENSOR, "nx_grad_scaler_scale", NULL),
    ROW("grad_scaler_scale an i64 loss", c_scaler_value, 0, 2, E_DTYPE, TENSOR, "nx_grad_scaler_scale", NULL),
    ROW("grad_scaler_unscale optimizer NULL", c_scaler_value, 0, 3, E_ARG, NONE, "nx_grad_scaler_unscale", NULL),
    ROW("grad_scaler_step without gradients", c_scaler_value, 0, 4, NX_ERR_STATE, NONE, "nx_grad_scaler_step", NULL),
    ROW("grad_scaler_update before unscale", c_scaler_value, 0, 5, NX_ERR_STATE, NONE, "nx_grad_scaler_update", NULL),
    ROW("grad_scaler_get_scale out NULL", c_scaler_value, 0, 6, E_ARG, NONE, "nx_grad_scaler_get_scale", NULL),
    ROW("grad_scaler_unscale a freed optimizer", c_scaler_value, 0, 7, E_ARG, NONE, "nx_grad_scaler_unscale", NULL),
    ROW("grad_scaler_step a module as optimizer", c_scaler_value, 0, 8, E_ARG, NONE, "nx_grad_scaler_step", NULL),
    ROW("nx_tokenizer_vocab_size: NULL tokenizer", c_tokenizer_bad, 0, 0, E_ARG, NONE, "nx_tokenizer_vocab_size", NULL),
    ROW("nx_tokenizer_vocab_size: freed tokenizer", c_tokenizer_bad, 1, 0, E_ARG, NONE, "nx_tokenizer_vocab_size", NULL),
    ROW("nx_tokenizer_vocab_size: scaler as tokenizer", c_tokenizer_bad, 2, 0, E_ARG, NONE, "nx_tokenizer_vocab_size", NULL),
    ROW("nx_tokenizer_encode: NULL tokenizer", c_tokenizer_bad, 0, 1, E_ARG, TENSOR, "nx_tokenizer_encode", NULL),
    ROW("nx_tokenizer_encode: freed tokenizer", c_tokenizer_bad, 1, 1, E_ARG, TENSOR, "nx_tokenizer_encode", NULL),
    ROW("nx_tokenizer_encode: scaler as tokenizer", c_tokenizer_bad, 2, 1, E_ARG, TENSOR, "nx_tokenizer_encode", NULL),
    ROW("nx_tokenizer_decode: NULL tokenizer", c_tokenizer_bad, 0, 2, E_ARG, NONE, "nx_tokenizer_decode", NULL),
    ROW("nx_tokenizer_decode: freed tokenizer", c_tokenizer_bad, 1, 2, E_ARG, NONE, "nx_tokenizer_decode", NULL),
    ROW("nx_tokenizer_decode: scaler as tokenizer", c_tokenizer_bad, 2, 2, E_ARG, NONE, "nx_tokenizer_decode", NULL),
    ROW("nx_tokenizer_save: NULL tokenizer", c_tokenizer_bad, 0, 3, E_ARG, NONE, "nx_tokenizer_save", NULL),
    ROW("nx_tokenizer_save: freed tokenizer", c_tokenizer_bad, 1, 3, E_ARG, NONE, "nx_tokenizer_save", NULL),
    ROW("nx_tokenizer_save: scaler as tokenizer", c_tokenizer_bad, 2, 3, E_ARG, NONE, "nx_tokenizer_save", NULL),
    ROW("tokenizer_bytes_create out NULL", c_tokenizer_value, 0, 0, E_ARG, NONE, "nx_tokenizer_bytes_create", NULL),
    ROW("bpe_train text NULL", c_tokenizer_value, 0, 1, E_ARG, TOKENIZER, "nx_tokenizer_bpe_train", NULL),
    ROW("bpe_train vocab 100 < 256", c_tokenizer_value, 0, 2, E_ARG, TOKENIZER, "nx_tokenizer_bpe_train", NULL),
    ROW("bpe_train vocab 255 < 256", c_tokenizer_value, 0, 13, E_ARG, TOKENIZER, "nx_tokenizer_bpe_train", NULL),
    ROW("bpe_train vocab -1", c_tokenizer_value, 0, 3, E_ARG, TOKENIZER, "nx_tokenizer_bpe_train", NULL),
    ROW("tokenizer_load missing file", c_tokenizer_value, 0, 4, NX_ERR_IO, TOKENIZER, "nx_tokenizer_load", NULL),
    ROW("tokenizer_load path NULL", c_tokenizer_value, 0, 5, E_ARG, TOKENIZER, "nx_tokenizer_load", NULL),
    ROW("tokenizer_vocab_size out NULL", c_tokenizer_value, 0, 6, E_ARG, NONE, "nx_tokenizer_vocab_size", NULL),
    ROW("tokenizer_encode text NULL", c_tokenizer_value, 0, 7, E_ARG, TENSOR, "nx_tokenizer_encode", NULL),
    ROW("tokenizer_decode into 2 bytes", c_tokenizer_value, 0, 8, E_ARG, NONE, "nx_tokenizer_decode", NULL),
    ROW("tokenizer_decode id 256", c_tokenizer_value, 0, 9, E_ARG, NONE, "nx_tokenizer_decode", NULL),
    ROW("tokenizer_decode id -1", c_tokenizer_value, 0, 10, E_ARG, NONE, "nx_tokenizer_decode", NULL),
    ROW("tokenizer_decode ids NULL", c_tokenizer_value, 0, 11, E_ARG, NONE, "nx_tokenizer_decode", NULL),
    ROW("tokenizer_save path NULL", c_tokenizer_value, 0, 12, E_ARG, NONE, "nx_tokenizer_save", NULL),
    ROW("nx_text_loader_next: NULL loader", c_loader_bad, 0, 0, E_ARG, NONE, "nx_text_loader_next", NULL),
    ROW("nx_text_loader_next: freed loader", c_loader_bad, 1, 0, E_ARG, NONE, "nx_text_loader_next", NULL),
    ROW("nx_text_loader_next: tokenizer as loader", c_loader_bad, 2, 0, E_ARG, NONE, "nx_text_loader_next", NULL),
    ROW("nx_text_loader_batches_per_epoch: NULL loader", c_loader_bad, 0, 1, E_ARG, NONE, "nx_text_loader_batches_per_epoch", NULL),
    ROW("nx_text_loader_batches_per_epoch: freed loader", c_loader_bad, 1, 1, E_ARG, NONE, "nx_text_loader_batches_per_epoch", NULL),
    ROW("nx_text_loader_batches_per_epoch: tokenizer as loader", c_loader_bad, 2, 1, E_ARG, NONE, "nx_text_loader_batches_per_epoch", NULL),
    ROW("nx_text_loader_shard: NULL loader", c_loader_bad, 0, 2, E_ARG, NONE, "nx_text_loader_shard", NULL),
    ROW("nx_text_loader_shard: freed loader", c_loader_bad, 1, 2, E_ARG, NONE, "nx_text_loader_shard", NULL),
    ROW("nx_text_loader_shard: tokenizer as loader", c_loader_bad, 2, 2, E_ARG, NONE, "nx_text_loader_shard", NULL),
    ROW("text_loader tokens NULL", c_loader_value, 0, 0, E_ARG, LOADER, "nx_text_loader_create", NULL),
    ROW("text_loader 4 tokens, seq 4", c_loader_value, 0, 1, E_ARG, LOADER, "nx_text_loader_create", NULL),
    ROW("text_loader batch 0", c_loader_value, 0, 2, E_ARG, LOADER, "nx_text_loader_create", NULL),
    ROW("text_loader seq -1", c_loader_value, 0, 3, E_ARG, LOADER, "nx_text_loader_create", NULL),
    ROW("text_loader seq 64 of 64 tokens", c_loader_value, 0, 4, E_ARG, LOADER, "nx_text_loader_create", NULL),
    ROW("text_loader 2-d tokens", c_loader_value, 0, 5, E_SHAPE, LOADER, "nx_text_loader_create", NULL),
    ROW("text_loader batch, seq 2^62", c_loader_value, 0, 6, E_ARG, LOADER, "nx_text_loader_create", NULL),
    ROW("text_loader out NULL", c_loader_value, 0, 7, E_ARG, NONE, "nx_text_loader_create", NULL),
    ROW("text_loader_next inputs NULL", c_loader_value, 0, 8, E_ARG, NONE, "nx_text_loader_next", NULL),
    ROW("text_loader_next onto a CUDA device not there", c_loader_value, 0, 9, NX_ERR_DEVICE, NONE, "nx_text_loader_next", NULL),
    ROW("batches_per_epoch out NULL", c_loader_value, 0, 10, E_ARG, NONE, "nx_text_loader_batches_per_epoch", NULL),
    ROW("text_loader_shard rank 2 of 2", c_loader_value, 0, 11, E_ARG, NONE, "nx_text_loader_shard", NULL),
    ROW("text_loader_shard rank -1", c_loader_value, 0, 12, E_ARG, NONE, "nx_text_loader_shard", NULL),
    ROW("text_loader_shard world 0", c_loader_value, 0, 13, E_ARG, NONE, "nx_text_loader_shard", NULL),
    ROW("dlpack lanes 4", c_dlpack_desc, 0, 0, E_DTYPE, TENSOR, "nx_tensor_from_dlpack_versioned", NULL),
    ROW("dlpack complex64", c_dlpack_desc, 0, 1, E_DTYPE, TENSOR, "nx_tensor_from_dlpack_versioned", NULL),
    ROW("dlpack float24", c_dlpack_desc, 0, 2, E_DTYPE, TENSOR, "nx_tensor_from_dlpack_versioned", NULL),
    ROW("dlpack uint8", c_dlpack_desc, 0, 3, E_DTYPE, TENSOR, "nx_tensor_from_dlpack_versioned", NULL),
    ROW("dlpack kDLCUDA device not there", c_dlpack_desc, 0, 4, NX_ERR_DEVICE, TENSOR, "nx_tensor_from_dlpack_versioned", NULL),
    ROW("dlpack device type 13", c_dlpack_desc, 0, 5, NX_ERR_DEVICE, TENSOR, "nx_tensor_from_dlpack_versioned", NULL),
    ROW("dlpack major version 2", c_dlpack_desc, 0, 6, NX_ERR_NOT_IMPLEMENTED, TENSOR, "nx_tensor_from_dlpack_versioned", NULL),
    ROW("dlpack read-only", c_dlpack_desc, 0, 7, NX_ERR_NOT_IMPLEMENTED, TENSOR, "nx_tensor_from_dlpack_versioned", NULL),
    ROW("dlpack shape NULL", c_dlpack_desc, 0, 8, E_ARG, TENSOR, "nx_tensor_from_dlpack_versioned", NULL),
    ROW("dlpack data NULL", c_dlpack_desc, 0, 9, E_ARG, TENSOR, "nx_tensor_from_dlpack_versioned", NULL),
    ROW("dlpack opaque handle", c_dlpack_desc, 0, 10, E_DTYPE, TENSOR, "nx_tensor_from_dlpack_versioned", NULL),
    ROW("dlpack managed NULL", c_dlpack_desc, 0, 11, E_ARG, TENSOR, "nx_tensor_from_dlpack_versioned", NULL),
    ROW("to_dlpack_versioned NULL tensor", c_dlpack_export_bad, 0, 0, E_ARG, NONE, "nx_tensor_to_dlpack_versioned", NULL),
    ROW("to_dlpack_versioned freed tensor", c_dlpack_export_bad, 1, 0, E_ARG, NONE, "nx_tensor_to_dlpack_versioned", NULL),
    ROW("to_dlpack_versioned module as tensor", c_dlpack_export_bad, 2, 0, E_ARG, NONE, "nx_tensor_to_dlpack_versioned", NULL),
    ROW("comm_id_create without NCCL", c_comm, 0, 0, NX_ERR_DEVICE, NONE, "nx_comm_id_create", NULL),
    ROW("comm_create without NCCL", c_comm, 0, 1, NX_ERR_DEVICE, COMM, "nx_comm_create", NULL),
    ROW("comm_create_mpi without MPI", c_comm, 0, 2, NX_ERR_NOT_IMPLEMENTED, COMM, "nx_comm_create_mpi", NULL),
    ROW("comm_id_to_hex into 8 bytes", c_comm, 0, 3, E_ARG, NONE, "nx_comm_id_to_hex", NULL),
    ROW("comm_id_from_hex \"zz\"", c_comm, 0, 4, E_ARG, NONE, "nx_comm_id_from_hex", NULL),
    ROW("comm_id_from_hex NULL", c_comm, 0, 5, E_ARG, NONE, "nx_comm_id_from_hex", NULL),
    ROW("comm_id_load missing file", c_comm, 0, 6, NX_ERR_IO, NONE, "nx_comm_id_load", NULL),
    ROW("comm_rank NULL", c_comm, 0, 7, E_ARG, NONE, "nx_comm_rank", NULL),
    ROW("comm_size of a tensor", c_comm, 0, 8, E_ARG, NONE, "nx_comm_size", NULL),
    ROW("all_reduce comm NULL", c_comm, 0, 9, E_ARG, NONE, "nx_comm_all_reduce", NULL),
    ROW("all_gather comm NULL", c_comm, 0, 10, E_ARG, TENSOR, "nx_comm_all_gather", NULL),
    ROW("ddp_create comm NULL", c_comm, 0, 11, E_ARG, DDP, "nx_ddp_create", NULL),
    ROW("ddp_finish NULL", c_comm, 0, 12, E_ARG, NONE, "nx_ddp_finish", NULL),
    ROW("ddp_bucket_count of a module", c_comm, 0, 13, E_ARG, NONE, "nx_ddp_bucket_count", NULL),
    ROW("comm_id_to_hex id NULL", c_comm, 0, 14, E_ARG, NONE, "nx_comm_id_to_hex", NULL),
    ROW("comm_id_save path NULL", c_comm, 0, 15, E_ARG, NONE, "nx_comm_id_save", NULL),
    ROW("autocast_push i32", c_autocast, 0, 0, E_DTYPE, NONE, "nx_autocast_push", NULL),
    ROW("autocast_push device type 99", c_autocast, 0, 1, NX_ERR_DEVICE, NONE, "nx_autocast_push", NULL),
    ROW("autocast_push dtype 99", c_autocast, 0, 2, E_DTYPE, NONE, "nx_autocast_push", NULL),
    ROW("autocast_pop with none open", c_autocast, 0, 3, NX_ERR_STATE, NONE, "nx_autocast_pop", NULL),
    ROW("autocast_get_dtype out NULL", c_autocast, 0, 4, E_ARG, NONE, "nx_autocast_get_dtype", NULL),
    ROW("autocast_get_dtype device type 0", c_autocast, 0, 5, NX_ERR_DEVICE, NONE, "nx_autocast_get_dtype", NULL),
    ROW("autocast_push f64", c_autocast, 0, 6, E_DTYPE, NONE, "nx_autocast_push", NULL),

};
#define NROWS (sizeof k_rows / sizeof k_rows[0])

static void free_handle_of(nx_handle_type type, void* h) {
  switch (type) {
    case NX_HANDLE_TENSOR: nx_tensor_free((nx_tensor)h); break;
    case NX_HANDLE_MODULE: nx_module_free((nx_module)h); break;
    case NX_HANDLE_OPTIMIZER: nx_optimizer_free((nx_optimizer)h); break;
    case NX_HANDLE_STREAM: nx_stream_free((nx_stream)h); break;
    case NX_HANDLE_EVENT: nx_event_free((nx_event)h); break;
    case NX_HANDLE_TOKENIZER: nx_tokenizer_free((nx_tokenizer)h); break;
    case NX_HANDLE_TEXT_LOADER: nx_text_loader_free((nx_text_loader)h); break;
    case NX_HANDLE_SAFETENSORS: nx_safetensors_free((nx_safetensors)h); break;
    case NX_HANDLE_GRAPH: nx_graph_free((nx_graph)h); break;
    case NX_HANDLE_COMM: nx_comm_free((nx_comm)h); break;
    case NX_HANDLE_DDP: nx_ddp_free((nx_ddp)h); break;
    case NX_HANDLE_GRAD_SCALER: nx_grad_scaler_free((nx_grad_scaler)h); break;
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

/* Whether this build and machine can make communicators (NCCL and a GPU): there the rows that
 * want NX_ERR_DEVICE from nx_comm_id_create / nx_comm_create do not apply (the Dist tests cover
 * communicators). */
static bool communicators_available(void) {
  nx_comm_id id;
  return nx_comm_id_create(&id) == NX_OK;
}

static void test_misuse_table(void** state) {
  (void)state;
  size_t failed = 0, skipped = 0;
  const bool comm = communicators_available();
  for (size_t i = 0; i < NROWS; ++i) {
    if (comm && k_rows[i].call == c_comm && k_rows[i].want == NX_ERR_DEVICE) {
      ++skipped;
      continue;
    }
    failed += !run_row(&k_rows[i]);
  }
  printf("misuse-by-value table: %zu rows, %zu failed, %zu skipped (communicators available)\n", (size_t)NROWS,
         failed, skipped);
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
