/* libFuzzer: the C API as a hostile host drives it. The input is a program: each instruction
 * byte picks a call (creation, views, elementwise and in-place ops, reductions, matmul, indexing,
 * norms, losses, attention, casts, backward and autograd.grad, host reads, printing, graph dumps,
 * frees), the following bytes its arguments: handles from a pool of eight slots
 * (live, NULL, freed or stale ones among them), random shapes, dtypes, axes and scalars. Any
 * status is fine; a crash, a sanitizer report, a NULL handle with NX_OK, a non-NULL one with an
 * error, or a leaked handle at the end is a finding. CPU only. */
#include "fuzz_util.h"

enum { kSlots = 8 };

typedef struct {
  nx_tensor slot[kSlots];
  nx_tensor stale[kSlots]; /* freed handles, kept to be passed again */
  FuzzIn in;
} Machine;

static const nx_dtype kDtypes[] = {NX_F32, NX_F64, NX_F16, NX_BF16, NX_I32, NX_I64, NX_BOOL};

static nx_dtype dtype_of(Machine* m) {
  const uint8_t b = fuzz_u8(&m->in);
  return b < 250 ? kDtypes[b % 7] : (nx_dtype)(b - 200); /* now and then an invalid one */
}
/* Any handle: one that views 2^40 elements (an expanded one) included. For the calls that only
 * make views, copy (failing at once for want of memory) or print the corners. */
static nx_tensor view_handle_of(Machine* m) {
  const uint8_t b = fuzz_u8(&m->in);
  if (b < 200) return m->slot[b % kSlots];
  if (b < 230) return m->stale[b % kSlots];
  if (b < 250) return NULL;
  return (nx_tensor)(uintptr_t)fuzz_u64(&m->in); /* a forged handle */
}
/* For the calls that compute: a view of more than 2^22 elements is replaced by NULL. A sum over,
 * or a matmul with an inner dimension of, 2^40 elements of an expanded view is legitimate work
 * that would take hours, a timeout that tests nothing. */
static nx_tensor handle_of(Machine* m) {
  nx_tensor t = view_handle_of(m);
  int64_t n = 0;
  for (int k = 0; k < kSlots; ++k)
    if (t && t == m->slot[k] && nx_tensor_numel(t, &n) == NX_OK && n > (INT64_C(1) << 22)) return NULL;
  return t;
}
static int64_t axis_of(Machine* m) {
  const uint8_t b = fuzz_u8(&m->in);
  return b < 240 ? (int64_t)(b % 9) - 4 : (int64_t)fuzz_u64(&m->in);
}
static size_t shape_of(Machine* m, int64_t* shape) {
  const uint8_t r = fuzz_u8(&m->in);
  const size_t rank = r < 250 ? r % 5 : 5;
  for (size_t d = 0; d < rank; ++d) {
    const uint8_t b = fuzz_u8(&m->in);
    /* small sizes, now and then a negative one or one no allocation can serve (2^62, 2^63 - 1):
     * sizes a machine could allocate would only test the machine */
    static const int64_t kHuge[] = {-1, -5, INT64_C(1) << 62, INT64_MAX, INT64_MIN, INT64_C(1) << 40};
    shape[d] = b < 245 ? b % 6 : kHuge[b % 6];
  }
  return rank;
}
static double scalar_of(Machine* m) {
  const uint8_t b = fuzz_u8(&m->in);
  static const double kSpecial[] = {0.0, 1.0, -1.0, 0.5, 1e-5, 1e30, -1e30, 65504.0};
  if (b < 8) return kSpecial[b];
  if (b < 16) return b == 8 ? __builtin_nan("") : (b == 9 ? __builtin_inf() : -__builtin_inf());
  return (double)(int8_t)b / 16.0;
}

/* Stores a result in a slot (freeing what was there, keeping it as a stale handle), checking the
 * out-handle contract. */
static void result(Machine* m, nx_status st, nx_tensor out) {
  if ((st == NX_OK) != (out != NULL)) {
    fprintf(stderr, "fuzz: status %d with out %p\n", (int)st, (void*)out);
    abort();
  }
  if (!out) return;
  const size_t k = fuzz_u8(&m->in) % kSlots;
  if (m->slot[k]) {
    nx_tensor_free(m->slot[k]);
    m->stale[k] = m->slot[k];
  }
  m->slot[k] = out;
}

static void step(Machine* m) {
  const nx_device cpu = {NX_CPU, 0};
  int64_t shape[8], shape2[8];
  nx_tensor out = NULL;
  nx_status st = NX_OK;
  const uint8_t op = fuzz_u8(&m->in);
  switch (op % 45) {
    case 0: {
      const size_t r = shape_of(m, shape);
      st = nx_tensor_randn(&out, shape, r, dtype_of(m), cpu, NULL);
      break;
    }
    case 1: {
      const size_t r = shape_of(m, shape);
      st = nx_tensor_full(&out, shape, r, scalar_of(m), dtype_of(m), cpu, NULL);
      break;
    }
    case 2: {
      const size_t r = shape_of(m, shape);
      int64_t vals[64];
      for (int i = 0; i < 64; ++i) vals[i] = (int64_t)(fuzz_u8(&m->in) % 8) - 1;
      int64_t n = 1;
      for (size_t d = 0; d < r; ++d) n = shape[d] >= 0 && shape[d] < 64 ? n * shape[d] : 999;
      if (n > 64) return;
      st = nx_tensor_from_data(&out, vals, shape, r, NX_I64, cpu, NULL);
      break;
    }
    case 3: st = nx_add(&out, handle_of(m), handle_of(m), NULL); break;
    case 4: st = nx_matmul(&out, handle_of(m), handle_of(m), NULL); break;
    case 5: st = nx_exp(&out, handle_of(m), NULL); break;
    case 6: {
      int64_t axes[4] = {axis_of(m), axis_of(m), axis_of(m), axis_of(m)};
      st = nx_sum(&out, handle_of(m), axes, fuzz_u8(&m->in) % 5, fuzz_u8(&m->in) & 1, NULL);
      break;
    }
    case 7: {
      int64_t axes[2] = {axis_of(m), axis_of(m)};
      st = nx_mean(&out, handle_of(m), axes, fuzz_u8(&m->in) % 3, fuzz_u8(&m->in) & 1, NULL);
      break;
    }
    case 8: {
      const size_t r = shape_of(m, shape);
      st = nx_reshape(&out, view_handle_of(m), shape, r, NULL);
      break;
    }
    case 9: st = nx_transpose(&out, view_handle_of(m), axis_of(m), axis_of(m), NULL); break;
    case 10: {
      const int64_t a = axis_of(m), s = (int64_t)(fuzz_u8(&m->in) % 7) - 2, e = (int64_t)(fuzz_u8(&m->in) % 9) - 2;
      st = nx_slice(&out, view_handle_of(m), a, s, e, (int64_t)(fuzz_u8(&m->in) % 4) - 1, NULL);
      break;
    }
    case 11: {
      const size_t r = shape_of(m, shape);
      st = nx_expand(&out, view_handle_of(m), shape, r, NULL);
      break;
    }
    case 12: {
      nx_tensor xs[3] = {handle_of(m), handle_of(m), handle_of(m)};
      st = nx_cat(&out, xs, fuzz_u8(&m->in) % 4, axis_of(m), NULL);
      break;
    }
    case 13: st = nx_softmax(&out, handle_of(m), axis_of(m), NULL); break;
    case 14: st = nx_index_select(&out, handle_of(m), handle_of(m), axis_of(m), NULL); break;
    case 15: st = nx_gather(&out, handle_of(m), handle_of(m), axis_of(m), NULL); break;
    case 16: st = nx_embedding(&out, handle_of(m), handle_of(m), NULL); break;
    case 17: st = nx_cross_entropy(&out, handle_of(m), handle_of(m), (int64_t)(fuzz_u8(&m->in) % 4) - 2,
                                   scalar_of(m), (nx_reduction)(fuzz_u8(&m->in) % 4), NULL);
      break;
    case 18: st = nx_layer_norm(&out, handle_of(m), handle_of(m), handle_of(m), scalar_of(m), NULL); break;
    case 19: st = nx_cast(&out, handle_of(m), dtype_of(m), NULL); break;
    case 20: st = nx_where(&out, handle_of(m), handle_of(m), handle_of(m), NULL); break;
    case 21: { /* backward from a slot, after asking for gradients */
      nx_tensor t = handle_of(m);
      nx_tensor_set_requires_grad(t, fuzz_u8(&m->in) & 1);
      nx_backward(handle_of(m), handle_of(m), NULL, NULL);
      return;
    }
    case 22: { /* free a slot (its handle becomes stale) */
      const size_t k = fuzz_u8(&m->in) % kSlots;
      if (m->slot[k]) {
        nx_tensor_free(m->slot[k]);
        m->stale[k] = m->slot[k];
        m->slot[k] = NULL;
      }
      return;
    }
    case 23: st = nx_squeeze(&out, view_handle_of(m), axis_of(m), NULL); break;
    case 24: st = nx_unsqueeze(&out, view_handle_of(m), axis_of(m), NULL); break;
    case 25: st = nx_flatten(&out, view_handle_of(m), axis_of(m), axis_of(m), NULL); break;
    case 26: st = nx_contiguous(&out, view_handle_of(m), NULL); break;
    case 27: st = nx_pow(&out, handle_of(m), handle_of(m), NULL); break;
    case 28: st = nx_eq(&out, handle_of(m), handle_of(m), NULL); break;
    case 29: st = nx_clamp(&out, handle_of(m), scalar_of(m), scalar_of(m), NULL); break;
    case 30: st = nx_gelu(&out, handle_of(m), fuzz_u8(&m->in) & 1, NULL); break;
    case 31: { /* in place: may refuse (leaf requiring grad, dtype, broadcast into the target) */
      nx_tensor t = handle_of(m);
      if (fuzz_u8(&m->in) & 1) nx_add_(t, handle_of(m), NULL);
      else nx_mul_scalar_(t, scalar_of(m), NULL);
      return;
    }
    case 32: {
      int64_t axes[2] = {axis_of(m), axis_of(m)};
      st = nx_max(&out, handle_of(m), axes, fuzz_u8(&m->in) % 3, fuzz_u8(&m->in) & 1, NULL);
      break;
    }
    case 33: st = nx_argmax(&out, handle_of(m), axis_of(m), fuzz_u8(&m->in) & 1, NULL); break;
    case 34: st = nx_log_softmax(&out, handle_of(m), axis_of(m), NULL); break;
    case 35: st = nx_rms_norm(&out, handle_of(m), handle_of(m), scalar_of(m), NULL); break;
    case 36: st = nx_mse_loss(&out, handle_of(m), handle_of(m), (nx_reduction)(fuzz_u8(&m->in) % 4), NULL); break;
    case 37: {
      const uint8_t f = fuzz_u8(&m->in);
      st = nx_flash_attention(&out, handle_of(m), handle_of(m), handle_of(m), f & 1, f & 2, scalar_of(m), NULL);
      break;
    }
    case 38: { /* host reads: a value, or the bytes into a buffer of a fuzzed size */
      nx_tensor t = handle_of(m);
      double v;
      char buf[256];
      if (fuzz_u8(&m->in) & 1) nx_tensor_item(t, &v, NULL);
      else nx_tensor_copy_to_host(t, buf, fuzz_u8(&m->in), NULL);
      return;
    }
    case 39: { /* printing with fuzzed options */
      nx_print_options o = NX_PRINT_OPTIONS_DEFAULT;
      o.precision = (int32_t)(fuzz_u8(&m->in) % 70) - 2;
      o.threshold = (int64_t)(fuzz_u8(&m->in) % 40) - 1;
      o.edge_items = (int64_t)(fuzz_u8(&m->in) % 5) - 1;
      o.line_width = (int32_t)(fuzz_u8(&m->in) % 100) - 1;
      o.sci_mode = (nx_print_sci_mode)(fuzz_u8(&m->in) % 4);
      char* text = NULL;
      const nx_status ps = nx_tensor_to_string(view_handle_of(m), &o, &text);
      if ((ps == NX_OK) != (text != NULL)) abort();
      nx_string_free(text);
      return;
    }
    case 40: { /* the graph of a slot, dumped with values */
      nx_graph g = NULL;
      if (nx_graph_create(&g, view_handle_of(m)) == NX_OK) {
        const nx_graph_dump_options o = {sizeof o, true, true};
        const char* dot = NULL;
        nx_graph_dump(g, &o, &dot);
        size_t bytes;
        nx_graph_node_saved_bytes(g, fuzz_u8(&m->in) % 4, &bytes);
        nx_graph_free(g);
      }
      return;
    }
    case 41: { /* torch.autograd.grad of a slot with respect to two others */
      nx_tensor inputs[2] = {handle_of(m), handle_of(m)}, grads[2] = {NULL, NULL};
      if (nx_autograd_grad(grads, handle_of(m), handle_of(m), inputs, 2, NULL, NULL) == NX_OK) {
        if (grads[0]) result(m, NX_OK, grads[0]);  /* NULL where an input does not reach the root */
        if (grads[1]) nx_tensor_free(grads[1]);
      }
      return;
    }
    case 42: st = nx_clone(&out, view_handle_of(m), NULL); break;
    case 43: { /* the profiler: started or stopped, ranges with fuzzed names, a stopped profile read */
      const uint8_t what = fuzz_u8(&m->in);
      if (what % 4 == 0) {
        nx_profiler_options o = NX_PROFILER_OPTIONS_DEFAULT;
        o.struct_size = what & 16 ? 3u : (uint32_t)sizeof o;
        o.memory = what & 32, o.shapes = what & 64;
        nx_profiler_start(&o);
      } else if (what % 4 == 1) {
        char name[8];
        for (int i = 0; i < 7; ++i) name[i] = (char)fuzz_u8(&m->in);
        name[7] = 0;
        nx_profiler_range_push(name);
      } else if (what % 4 == 2) {
        nx_profiler_range_pop();
      } else {
        nx_profile p = NULL;
        if (nx_profiler_stop(&p) == NX_OK) {
          char* table = NULL;
          nx_profile_summary(p, (nx_profile_sort)(fuzz_u8(&m->in) % 6 - 1), (int64_t)fuzz_u8(&m->in) - 2, &table);
          nx_string_free(table);
          nx_profile_event e = {sizeof e};
          nx_profile_get_event(p, (int64_t)fuzz_u8(&m->in) - 2, &e);
          nx_profile_memory_sample s = {sizeof s};
          nx_profile_get_memory_sample(p, (int64_t)fuzz_u8(&m->in) - 2, &s);
          nx_profile_free(p);
        }
      }
      return;
    }
    default: {
      const size_t r = shape_of(m, shape2);
      st = nx_permute(&out, view_handle_of(m), shape2, r, NULL);
      break;
    }
  }
  result(m, st, out);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int64_t before[NX_HANDLE_PROFILE + 1];
  fuzz_count_handles(before);
  Machine m;
  memset(&m, 0, sizeof m);
  m.in.p = data;
  m.in.n = size;
  for (int i = 0; i < 64 && m.in.n > 0; ++i) step(&m);
  for (int k = 0; k < kSlots; ++k) nx_tensor_free(m.slot[k]);
  nx_profile p = NULL;
  if (nx_profiler_stop(&p) == NX_OK) nx_profile_free(p); /* the next input starts without one */
  fuzz_check_handles(before);
  return 0;
}
