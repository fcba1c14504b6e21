/* Parity ops, part 2: views and shape ops, casts, indexing, losses, and the composite checks
 * (a two-layer MLP and a causal attention block), each through the public C API. */
#include "parity.h"

/* ---------------------------------------------------------------- views and shape ops */
static nx_status op_reshape(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  int64_t shape[PARITY_MAX_IO];
  size_t n = meta_ints(c, "shape", shape, PARITY_MAX_IO);
  return nx_reshape(&out[0], x[0], shape, n, NULL);
}
static nx_status op_view(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  int64_t shape[PARITY_MAX_IO];
  size_t n = meta_ints(c, "shape", shape, PARITY_MAX_IO);
  return nx_view(&out[0], x[0], shape, n, NULL);
}
static nx_status op_transpose(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  return nx_transpose(&out[0], x[0], meta_int(c, "d0"), meta_int(c, "d1"), NULL);
}
static nx_status op_permute(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  int64_t dims[PARITY_MAX_IO];
  size_t n = meta_ints(c, "dims", dims, PARITY_MAX_IO);
  return nx_permute(&out[0], x[0], dims, n, NULL);
}
static nx_status op_slice(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  return nx_slice(&out[0], x[0], meta_int(c, "axis"), meta_int(c, "start"), meta_int(c, "end"),
                  meta_int(c, "step"), NULL);
}
static nx_status op_expand(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  int64_t shape[PARITY_MAX_IO];
  size_t n = meta_ints(c, "shape", shape, PARITY_MAX_IO);
  return nx_expand(&out[0], x[0], shape, n, NULL);
}
static nx_status op_squeeze(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  return nx_squeeze(&out[0], x[0], meta_int(c, "axis"), NULL);
}
static nx_status op_unsqueeze(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  return nx_unsqueeze(&out[0], x[0], meta_int(c, "axis"), NULL);
}
static nx_status op_flatten(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  return nx_flatten(&out[0], x[0], meta_int(c, "start"), meta_int(c, "end"), NULL);
}
static nx_status op_contiguous(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  (void)c;
  return nx_contiguous(&out[0], x[0], NULL);
}
static nx_status op_clone(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  (void)c;
  return nx_clone(&out[0], x[0], NULL);
}
static nx_status op_cat(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  return nx_cat(&out[0], x, c->nin, meta_int(c, "axis"), NULL);
}
static nx_status op_stack(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  return nx_stack(&out[0], x, c->nin, meta_int(c, "axis"), NULL);
}
static nx_status op_split(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  int64_t sizes[PARITY_MAX_IO];
  size_t n = meta_ints(c, "sizes", sizes, PARITY_MAX_IO);
  if (n != c->nout) {
    parity_meta_error = true;
    return NX_ERR_INVALID_ARGUMENT;
  }
  return nx_split(out, x[0], sizes, n, meta_int(c, "axis"), NULL);
}
static nx_status op_cast(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  return nx_cast(&out[0], x[0], meta_dtype(c, "to"), NULL);
}

/* ---------------------------------------------------------------- indexing */
static nx_status op_index_select(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  return nx_index_select(&out[0], x[0], meta_int(c, "axis"), x[1], NULL);
}
static nx_status op_gather(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  return nx_gather(&out[0], x[0], meta_int(c, "axis"), x[1], NULL);
}
static nx_status op_embedding(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  (void)c;
  return nx_embedding(&out[0], x[0], x[1], NULL);
}
static nx_status op_one_hot(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  return nx_one_hot(&out[0], x[0], meta_int(c, "classes"), meta_dtype(c, "to"), NULL);
}

/* ---------------------------------------------------------------- losses */
static nx_reduction reduction(const parity_case* c) { return (nx_reduction)meta_int(c, "reduction"); }

static nx_status op_cross_entropy(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  return nx_cross_entropy(&out[0], x[0], x[1], meta_int(c, "ignore"), meta_real(c, "smoothing"),
                          reduction(c), NULL);
}
static nx_status op_nll_loss(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  return nx_nll_loss(&out[0], x[0], x[1], meta_int(c, "ignore"), reduction(c), NULL);
}
static nx_status op_mse_loss(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  return nx_mse_loss(&out[0], x[0], x[1], reduction(c), NULL);
}
static nx_status op_bce_with_logits(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  return nx_bce_with_logits(&out[0], x[0], x[1], reduction(c), NULL);
}

/* ---------------------------------------------------------------- fused kernels */
static nx_status op_rms_norm(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  return nx_rms_norm(&out[0], x[0], x[1], meta_real(c, "eps"), NULL);
}
static nx_status op_layer_norm(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  return nx_layer_norm(&out[0], x[0], x[1], x[2], meta_real(c, "eps"), NULL);
}
static nx_status op_add_rms_norm(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  return nx_add_rms_norm(&out[0], &out[1], x[0], x[1], x[2], meta_real(c, "eps"), NULL);
}
static nx_status op_add_layer_norm(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  return nx_add_layer_norm(&out[0], &out[1], x[0], x[1], x[2], x[3], meta_real(c, "eps"), NULL);
}
static nx_status op_softmax_cross_entropy(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  return nx_softmax_cross_entropy(&out[0], x[0], x[1], meta_int(c, "ignore"), reduction(c), NULL);
}
static nx_status op_swiglu(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  (void)c;
  return nx_swiglu(&out[0], x[0], x[1], NULL);
}
/* x = p, g, m, v of two tensors; out = the updated p, m, v of each (updated in place on clones). */
static nx_status op_adam_step_multi(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  nx_status st = NX_OK;
  const int state[6] = {0, 2, 3, 4, 6, 7}; /* p, m, v of each tensor */
  for (int i = 0; i < 6; ++i) TRY(st, nx_clone(&out[i], x[state[i]], NULL));
  if (st != NX_OK) return st;
  nx_tensor p[2] = {out[0], out[3]}, g[2] = {x[1], x[5]}, m[2] = {out[1], out[4]}, v[2] = {out[2], out[5]};
  return nx_adam_step_multi(p, 2, g, 2, m, 2, v, 2, meta_int(c, "step"), meta_real(c, "lr"), meta_real(c, "beta1"),
                            meta_real(c, "beta2"), meta_real(c, "eps"), meta_real(c, "wd"), meta_int(c, "decoupled") != 0,
                            NULL);
}

/* ---------------------------------------------------------------- composites */
/* x, w1, b1, w2, b2, target: cross_entropy(linear(relu(linear(x, w1, b1)), w2, b2), target). */
static nx_status op_mlp(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  (void)c;
  nx_tensor t[3] = {NULL, NULL, NULL};
  nx_status st = NX_OK;
  TRY(st, nx_linear(&t[0], x[0], x[1], x[2], NULL));
  TRY(st, nx_relu(&t[1], t[0], NULL));
  TRY(st, nx_linear(&t[2], t[1], x[3], x[4], NULL));
  TRY(st, nx_cross_entropy(&out[0], t[2], x[5], -100, 0.0, NX_REDUCTION_MEAN, NULL));
  free_all(t, 3);
  return st;
}

/* x [B,T,D], wq, wk, wv, wo [D,D], mask [T,T] (0 / -inf), target [B,T,D]:
 * mse_loss(linear(softmax(Q K^T * scale + mask) V, wo), target), Q = linear(x, wq)... */
static nx_status op_attention(const parity_case* c, const nx_tensor* x, nx_tensor* out) {
  enum { Q, K, V, KT, S, SS, SM, P, O, Y, N };
  nx_tensor t[N] = {NULL};
  nx_status st = NX_OK;
  TRY(st, nx_linear(&t[Q], x[0], x[1], NULL, NULL));
  TRY(st, nx_linear(&t[K], x[0], x[2], NULL, NULL));
  TRY(st, nx_linear(&t[V], x[0], x[3], NULL, NULL));
  TRY(st, nx_transpose(&t[KT], t[K], -1, -2, NULL));
  TRY(st, nx_matmul(&t[S], t[Q], t[KT], NULL));
  TRY(st, nx_mul_scalar(&t[SS], t[S], meta_real(c, "scale"), NULL));
  TRY(st, nx_add(&t[SM], t[SS], x[5], NULL));
  TRY(st, nx_softmax(&t[P], t[SM], -1, NULL));
  TRY(st, nx_matmul(&t[O], t[P], t[V], NULL));
  TRY(st, nx_linear(&t[Y], t[O], x[4], NULL, NULL));
  TRY(st, nx_mse_loss(&out[0], t[Y], x[6], NX_REDUCTION_MEAN, NULL));
  free_all(t, N);
  return st;
}

#define OP(NAME) {#NAME, op_##NAME, false}
const parity_op parity_tensor_ops[] = {
    OP(reshape), OP(view), OP(transpose), OP(permute), OP(slice), OP(expand), OP(squeeze),
    OP(unsqueeze), OP(flatten), OP(contiguous), OP(clone), OP(cat), OP(stack), OP(split), OP(cast),
    OP(index_select), OP(gather), OP(embedding), OP(one_hot),
    OP(cross_entropy), OP(nll_loss), OP(mse_loss), OP(bce_with_logits),
    OP(rms_norm), OP(layer_norm), OP(add_rms_norm), OP(add_layer_norm), OP(softmax_cross_entropy), OP(swiglu),
    OP(adam_step_multi),
    {"mlp", op_mlp, true}, {"attention", op_attention, true},
    {NULL, NULL, false},
};
