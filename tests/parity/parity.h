/* Shared declarations of the PyTorch parity test (test_parity.c runs the cases, parity_ops_*.c
 * map each op name of the fixtures to calls of the public C API). */
#ifndef NEXUS_PARITY_H
#define NEXUS_PARITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nexus.h"

#define PARITY_MAX_IO 8 /* inputs or outputs of one case */

/* One fixture case: its id ("c012") and its metadata ("op=sum;dt=f32;axes=0,2;keepdim=1;..."). */
typedef struct {
  const char* id;
  const char* meta;
  size_t nin, nout;
} parity_case;

/* Runs the op on the (already transposed where the case says) inputs x[0..nin) and writes
 * nout new handles to out (owned by the caller; the function frees its own temporaries). */
typedef nx_status (*parity_fn)(const parity_case* c, const nx_tensor* x, nx_tensor* out);

typedef struct {
  const char* name;
  parity_fn fn;
  bool composite; /* a model built from several ops (counted apart from the ops) */
} parity_op;

/* The op tables, each ending with {NULL}. */
extern const parity_op parity_math_ops[];   /* elementwise, reductions, matmul, softmax */
extern const parity_op parity_tensor_ops[]; /* views/shape, indexing, losses, composites */

/* Metadata accessors. A missing or malformed key sets parity_meta_error (checked by the runner
 * after the op, so a fixture/test mismatch fails the case instead of passing by accident). */
extern bool parity_meta_error;
bool meta_has(const parity_case* c, const char* key);
int64_t meta_int(const parity_case* c, const char* key);
double meta_real(const parity_case* c, const char* key);
/* Comma-separated integers ("" is an empty list); returns the count (at most cap). */
size_t meta_ints(const parity_case* c, const char* key, int64_t* out, size_t cap);
/* "f32", "f64", "i32", "i64", "bool" to a dtype. */
nx_dtype meta_dtype(const parity_case* c, const char* key);

/* Evaluates calls in order while they succeed: `nx_status st = NX_OK; TRY(st, nx_add(...));` */
#define TRY(st, call)       \
  do {                      \
    if ((st) == NX_OK) (st) = (call); \
  } while (0)

/* Frees n handles (NULL entries allowed). */
void free_all(nx_tensor* ts, size_t n);

#endif /* NEXUS_PARITY_H */
