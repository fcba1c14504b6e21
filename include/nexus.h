/*
 * nexus.h - the one public header of NexusGrad, an embeddable deep-learning engine.
 *
 * The rules of the API (C API 1.0; every function below follows them, docs/c_api_1.0.md lists the
 * renames that made it so):
 *  1. Names: objects are nx_<noun>_<verb> (nx_tensor_free, nx_optimizer_step), ops nx_<op>,
 *     types lowercase nx_*, macros and enum values NX_*. Every enum value is written explicitly.
 *  2. Order: a call that makes handles or values writes them first (nx_tensor* out), then takes
 *     tensor inputs, then attributes, then nx_stream stream last. A query takes its object first,
 *     then the place it writes to (nx_tensor_ndim(t, &ndim)).
 *  3. Settings: one spelling, nx_<scope>_set_<name>(value) and nx_<scope>_get_<name>(&value),
 *     both returning nx_status (nx_cpu_set_num_threads / nx_cpu_get_num_threads). Read-only
 *     properties are nx_<noun>_<property>(object, &out). Infallible lookups (version, names of
 *     codes, sizes, counts of live handles or devices) return their value directly.
 *  4. Options that may grow travel in a struct whose first field is uint32_t struct_size (set it
 *     to sizeof the struct; the NX_*_DEFAULT macros do); the library reads only the fields that
 *     struct_size covers, so a program built against an older header keeps working. A NULL
 *     options pointer means the defaults.
 *  5. Append-only after 1.0: functions, enum values and struct fields are only ever added (fields
 *     at the end of a struct). Removing or changing any of them, or changing what a call does
 *     with the same arguments, bumps NX_ABI_VERSION and NX_VERSION_MAJOR; CI compares the
 *     library's ABI with abi/nexus.abi (abidiff) so that no such change lands silently.
 *
 * Conventions (apply to every function below unless its comment says otherwise):
 *  - Every fallible call returns nx_status; NX_OK (0) is success. On failure a thread-local
 *    message names the function, what was wrong and the values involved:
 *    nx_last_error_message(). No C++ exception, abort or exit ever crosses this boundary.
 *  - A NULL stream means the default stream of the inputs' device. CPU work is synchronous.
 *  - Ownership: every handle written to *out belongs to the caller, who releases it exactly
 *    once with the matching nx_<type>_free (freeing NULL is a no-op). On failure *out is set to
 *    NULL and nothing needs freeing. Handles are reference counted internally, so a tensor the
 *    autodiff graph still needs outlives the caller's free. Using a freed handle is detected
 *    and reported as NX_ERR_INVALID_ARGUMENT.
 *  - Counted arrays are (const int64_t* shape, size_t ndim). Negative axes count from the end.
 *  - Threads (tests/capi/test_threads.c checks these under ThreadSanitizer in CI):
 *    - Per thread: the last error, the grad mode, the autocast scopes, and a plan's run.
 *    - Process-wide: the random generator (draws from several threads are safe; which numbers
 *      each thread gets then depends on timing), the deterministic and TF32 settings, and the
 *      CPU thread count (nx_cpu_set_num_threads applies to the calls of every thread).
 *    - Handles of every type may be created, used and freed from any thread. A call that
 *      starts after its handle was freed fails with NX_ERR_INVALID_ARGUMENT; freeing a handle
 *      while another thread's call is still using it is the caller's error.
 *    - Any number of threads may read one tensor at once (as an input of ops, with grad mode
 *      off or with gradients that do not meet: two backward passes must not accumulate into
 *      one tensor's gradient at once). A tensor being written (an in-place op, a copy into it,
 *      an optimizer step on it) must not be used by another thread meanwhile.
 *    - One thread at a time, each: a module (a forward may fill caches, such as a KV cache),
 *      an optimizer, a gradient scaler, a tokenizer, a text loader, a graph, a SafeTensors
 *      file, a stream, a communicator and an nx_ddp. Different objects of these types may be
 *      used by different threads at once. A plan refuses a second thread (NX_ERR_STATE).
 */
#ifndef NEXUS_H
#define NEXUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#  if defined(NEXUS_BUILDING)
#    define NX_API __declspec(dllexport)
#  else
#    define NX_API __declspec(dllimport)
#  endif
#else
#  define NX_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- version */
#define NX_VERSION_MAJOR 1
#define NX_VERSION_MINOR 5
#define NX_VERSION_PATCH 0
/* MAJOR * 10000 + MINOR * 100 + PATCH, for #if comparisons. 1.0.0: C API 1.0; 1.1.0 appended
 * autocast (nx_autocast_*), the first addition under the append-only policy, and the gradient
 * scaler (nx_grad_scaler_*, NX_HANDLE_GRAD_SCALER). */
#define NX_VERSION (NX_VERSION_MAJOR * 10000 + NX_VERSION_MINOR * 100 + NX_VERSION_PATCH)
/* Bumped whenever a signature, struct layout or enum value changes incompatibly (rule 5); the
 * bindings compare it with nx_abi_version() when they load. 1: the 0.x API; 2: C API 1.0. */
#define NX_ABI_VERSION 2

/* "MAJOR.MINOR.PATCH"; static storage, never freed. */
NX_API const char* nx_version_string(void);
/* The NX_ABI_VERSION the library was built with. */
NX_API uint32_t nx_abi_version(void);

/* ---------------------------------------------------------------- status */
/* Codes are append-only. */
typedef enum {
  NX_OK = 0,
  NX_ERR_INVALID_ARGUMENT = 1, /* NULL pointer, freed handle, bad value */
  NX_ERR_SHAPE = 2,            /* shapes that do not fit together, bad axis */
  NX_ERR_DTYPE = 3,            /* unsupported or mismatched dtype */
  NX_ERR_DEVICE = 4,           /* device mismatch or unavailable device */
  NX_ERR_OUT_OF_MEMORY = 5,
  NX_ERR_CUDA = 6,             /* an error reported by the CUDA runtime or a CUDA library */
  NX_ERR_IO = 7,               /* file could not be read or is malformed */
  NX_ERR_NOT_IMPLEMENTED = 8,
  NX_ERR_STATE = 9,            /* object in the wrong state: graph freed, tensor modified in place... */
  NX_ERR_INTERNAL = 10
} nx_status;

/* A constant name such as "NX_ERR_SHAPE"; static storage. */
NX_API const char* nx_status_string(nx_status status);
/* The message of the last failed call on this thread ("" if none). Valid until the next failing
 * call on this thread; copy it to keep it. */
NX_API const char* nx_last_error_message(void);
/* Forgets the last error of this thread. */
NX_API void nx_clear_error(void);

/* ---------------------------------------------------------------- devices, dtypes */
typedef enum { NX_CPU = 1, NX_CUDA = 2 } nx_device_type; /* DLPack's device codes */
typedef struct {
  nx_device_type type;
  int32_t index;
} nx_device;

/* Values are part of the ABI (saved in files, passed by bindings): never renumbered.
 * NX_I8, NX_F8E4M3 (OCP FP8 E4M3, the "fn" variant: no infinities, largest 448) and NX_F8E5M2 (OCP
 * FP8 E5M2, largest 57344) are storage dtypes (C API 1.5): tensors of them are created, filled,
 * copied, viewed, moved between devices, cast with nx_cast from and to the other dtypes (on the
 * CPU; a CUDA tensor is cast on the CPU for now), printed, saved and loaded (SafeTensors, DLPack);
 * every op that computes refuses them with NX_ERR_DTYPE (cast to a floating dtype first). Casts
 * into FP8 round to nearest even and saturate at the largest finite value (E5M2 keeps infinities;
 * NaN stays NaN); into I8 they truncate toward zero and wrap modulo 2^8 as the other integer casts
 * do (docs/attention_8bit.md). */
typedef enum {
  NX_F32 = 0, NX_F64 = 1, NX_F16 = 2, NX_BF16 = 3, NX_I32 = 4, NX_I64 = 5, NX_BOOL = 6,
  NX_I8 = 7, NX_F8E4M3 = 8, NX_F8E5M2 = 9
} nx_dtype;

/* Size in bytes of one element of dtype (0 for an invalid dtype). */
NX_API size_t nx_dtype_size(nx_dtype dtype);
/* "f32", "bf16"...; static storage; "invalid" for an invalid dtype. */
NX_API const char* nx_dtype_name(nx_dtype dtype);
/* Number of CUDA devices usable by this process (0 without CUDA or a GPU). */
NX_API int32_t nx_cuda_device_count(void);

/* ---------------------------------------------------------------- handles */
/* Handles are opaque ids, not pointers: each names its type, a slot of one handle table and the
 * slot's generation, so a NULL, freed, stale or foreign handle of any type is refused with
 * NX_ERR_INVALID_ARGUMENT without memory being read, and a freed handle never reaches an object
 * created later. Freeing NULL, a freed or a foreign handle does nothing. */
typedef enum {
  NX_HANDLE_TENSOR = 1,
  NX_HANDLE_STREAM = 2,
  NX_HANDLE_EVENT = 3,
  NX_HANDLE_MODULE = 4,
  NX_HANDLE_OPTIMIZER = 5,
  NX_HANDLE_TOKENIZER = 6,
  NX_HANDLE_TEXT_LOADER = 7,
  NX_HANDLE_SAFETENSORS = 8,
  NX_HANDLE_GRAPH = 9,
  NX_HANDLE_COMM = 10,
  NX_HANDLE_DDP = 11,
  NX_HANDLE_GRAD_SCALER = 12, /* 1.1.0 */
  NX_HANDLE_PLAN = 13,        /* 1.3.0 */
  NX_HANDLE_PROFILE = 14      /* 1.5.0 */
} nx_handle_type;
typedef struct nx_tensor_s* nx_tensor;
typedef struct nx_stream_s* nx_stream;
typedef struct nx_safetensors_s* nx_safetensors;
typedef struct nx_event_s* nx_event;

/* ---------------------------------------------------------------- runtime */
/* Number of CPU threads used by kernels, for the calls of every thread of the process (<= 0
 * restores the default: all cores). */
NX_API nx_status nx_cpu_set_num_threads(int32_t n);
NX_API nx_status nx_cpu_get_num_threads(int32_t* out);
/* The SIMD level of the CPU kernels: "avx512", "avx2" or "scalar" (static storage). Chosen at
 * run time from the processor; set overrides it and fails with NX_ERR_NOT_IMPLEMENTED if the
 * processor lacks the level (for tests and benchmarks). */
NX_API nx_status nx_cpu_set_simd_level(const char* level);
NX_API nx_status nx_cpu_get_simd_level(const char** out);
/* Seeds the counter-based generator used by nx_tensor_rand/randn, dropout and initializers. */
NX_API nx_status nx_random_set_seed(uint64_t seed);
/* Deterministic mode (default off): kernels whose results depend on the order of atomic additions
 * (the CUDA flash-attention backward's dQ) use an order-fixed variant instead, so a run repeats
 * bit for bit, at some cost in speed. Process-wide. */
NX_API nx_status nx_runtime_set_deterministic(bool enabled);
NX_API nx_status nx_runtime_get_deterministic(bool* out);
/* Times the host has waited for a device since the process started (stream and event
 * synchronizes, device-to-host reads such as nx_tensor_item, the allocator emptying its cache):
 * read it before and after a training step to see that the step runs without a host round trip. */
NX_API nx_status nx_runtime_get_host_syncs(uint64_t* out);
/* Number of live handles of one type (created and not yet freed), for leak checks; -1 for a
 * value that is not an nx_handle_type. */
NX_API int64_t nx_live_handle_count(nx_handle_type type);

/* ---------------------------------------------------------------- streams */
/* Creates a stream on device. Free with nx_stream_free. */
NX_API nx_status nx_stream_create(nx_stream* out, nx_device device);
/* Blocks until all work enqueued on the stream has finished. NULL: every device's default stream. */
NX_API nx_status nx_stream_synchronize(nx_stream stream);
NX_API nx_status nx_stream_device(nx_stream stream, nx_device* out);
NX_API void nx_stream_free(nx_stream stream);

/* ---------------------------------------------------------------- CUDA devices, events, memory */
/* A copy of t on device (host <-> device, device <-> device), enqueued on stream (a stream of the
 * CUDA side). Autodiff records it: gradients flow back to t's device. */
NX_API nx_status nx_tensor_to(nx_tensor* out, nx_tensor t, nx_device device, nx_stream stream);
/* Events order work across streams: record on one stream, make another wait for it. */
NX_API nx_status nx_event_create(nx_event* out, nx_device device);
NX_API nx_status nx_event_record(nx_event event, nx_stream stream);
/* Work enqueued on stream after this call waits until the event has completed. */
NX_API nx_status nx_event_wait(nx_event event, nx_stream stream);
/* Blocks the host until the event has completed. */
NX_API nx_status nx_event_synchronize(nx_event event);
NX_API void nx_event_free(nx_event event);
/* Statistics of the caching device allocator. Set struct_size = sizeof(nx_cuda_memory_stats). */
typedef struct {
  uint32_t struct_size;
  uint64_t allocated_bytes;      /* held by live tensors */
  uint64_t reserved_bytes;       /* obtained from the driver (allocated + cached) */
  uint64_t peak_allocated_bytes; /* since start or nx_cuda_reset_peak_memory */
  uint64_t num_device_allocs;    /* cudaMalloc calls so far */
} nx_cuda_memory_stats;
NX_API nx_status nx_cuda_get_memory_stats(int32_t device, nx_cuda_memory_stats* out);
NX_API nx_status nx_cuda_reset_peak_memory(int32_t device);
/* Returns cached, unused device memory to the driver. */
NX_API nx_status nx_cuda_empty_cache(int32_t device);
/* TF32 tensor-core math for f32 on CUDA (faster, ~10-bit mantissa): matmul, and flash attention
 * at head_dim 64 and 128 (products rounded to TF32, softmax and sums in f32); off by default. Like
 * PyTorch's allow_tf32 for matmul and cuDNN together. */
NX_API nx_status nx_cuda_set_tf32(bool enabled);
NX_API nx_status nx_cuda_get_tf32(bool* out);

/* ---------------------------------------------------------------- creation */
/* New tensor holding a copy of nbytes = prod(shape) * nx_dtype_size(dtype) bytes at data
 * (row-major). ndim 0 makes a scalar (shape may then be NULL). Free with nx_tensor_free. */
NX_API nx_status nx_tensor_from_data(nx_tensor* out, const void* data, const int64_t* shape,
                                     size_t ndim, nx_dtype dtype, nx_device device,
                                     nx_stream stream);
NX_API nx_status nx_tensor_zeros(nx_tensor* out, const int64_t* shape, size_t ndim,
                                 nx_dtype dtype, nx_device device, nx_stream stream);
NX_API nx_status nx_tensor_ones(nx_tensor* out, const int64_t* shape, size_t ndim,
                                nx_dtype dtype, nx_device device, nx_stream stream);
/* Every element equal to value (converted to dtype; fractions truncate). A value the dtype cannot
 * hold (NaN or out of range for an integer dtype, finite beyond a half or f32 range) is refused
 * with NX_ERR_INVALID_ARGUMENT, as torch.full refuses it. */
NX_API nx_status nx_tensor_full(nx_tensor* out, const int64_t* shape, size_t ndim, double value,
                                nx_dtype dtype, nx_device device, nx_stream stream);
/* Standard normal samples. Reproducible for a given seed, independent of the thread count. */
NX_API nx_status nx_tensor_randn(nx_tensor* out, const int64_t* shape, size_t ndim,
                                 nx_dtype dtype, nx_device device, nx_stream stream);
/* Uniform samples in [0, 1). */
NX_API nx_status nx_tensor_rand(nx_tensor* out, const int64_t* shape, size_t ndim,
                                nx_dtype dtype, nx_device device, nx_stream stream);
/* 1-d tensor start, start+step, ... < end (like torch.arange). */
NX_API nx_status nx_tensor_arange(nx_tensor* out, double start, double end, double step,
                                  nx_dtype dtype, nx_device device, nx_stream stream);

/* ---------------------------------------------------------------- inspection */
/* Copies the tensor's elements in row-major order to dst; nbytes must equal
 * numel * nx_dtype_size(dtype) exactly. Works on any view (non-contiguous too). */
NX_API nx_status nx_tensor_copy_to_host(nx_tensor t, void* dst, size_t nbytes, nx_stream stream);
NX_API nx_status nx_tensor_ndim(nx_tensor t, size_t* out);
/* Writes ndim values; fails with NX_ERR_SHAPE when capacity < ndim. */
NX_API nx_status nx_tensor_shape(nx_tensor t, int64_t* out, size_t capacity);
/* Strides in elements; same contract as nx_tensor_shape. */
NX_API nx_status nx_tensor_strides(nx_tensor t, int64_t* out, size_t capacity);
NX_API nx_status nx_tensor_numel(nx_tensor t, int64_t* out);
NX_API nx_status nx_tensor_dtype(nx_tensor t, nx_dtype* out);
NX_API nx_status nx_tensor_device(nx_tensor t, nx_device* out);
NX_API nx_status nx_tensor_is_contiguous(nx_tensor t, bool* out);
/* The value of a one-element tensor, converted to double. */
NX_API nx_status nx_tensor_item(nx_tensor t, double* out, nx_stream stream);
/* Pointer to the first element of a CPU tensor, valid while any handle to the tensor (or a view
 * of it) lives. Writing through it is allowed and bypasses autodiff's version check. */
NX_API nx_status nx_tensor_data_ptr(nx_tensor t, void** out);
/* A new handle to the same tensor (same storage, same autodiff identity). */
NX_API nx_status nx_tensor_retain(nx_tensor* out, nx_tensor t);
/* Releases the caller's handle. NULL is a no-op. */
NX_API void nx_tensor_free(nx_tensor t);

/* ---------------------------------------------------------------- printing (1.4.0) */
/* Notation of floating values (PyTorch's sci_mode None, False, True). */
typedef enum {
  NX_PRINT_SCI_AUTO = 0,  /* scientific when the values ask for it (see nx_tensor_to_string) */
  NX_PRINT_SCI_NEVER = 1, /* always fixed-point */
  NX_PRINT_SCI_ALWAYS = 2 /* always scientific */
} nx_print_sci_mode;
/* Layout of nx_tensor_to_string and nx_tensor_print (rule 4; NULL: the defaults, which are
 * torch.set_printoptions' defaults). Values outside the ranges below: NX_ERR_INVALID_ARGUMENT. */
typedef struct {
  uint32_t struct_size;       /* sizeof(nx_print_options) */
  int32_t precision;          /* digits after the decimal point, 0 to 64 */
  int64_t threshold;          /* summarize when numel > threshold, >= 0 (INT64_MAX: never) */
  int64_t edge_items;         /* entries kept at each end of a summarized dimension, >= 1 */
  int32_t line_width;         /* characters per line before a row wraps, >= 1 */
  nx_print_sci_mode sci_mode;
} nx_print_options;
#define NX_PRINT_OPTIONS_DEFAULT {sizeof(nx_print_options), 4, 1000, 3, 80, NX_PRINT_SCI_AUTO}
/* The tensor as text, laid out as PyTorch's str(tensor) (torch 1.13):
 *   tensor([[ 0.1235, -1.5000],
 *           [ 2.0000,  0.0000]], dtype=float64, requires_grad=True)
 * Every entry of a tensor gets one width. Floating tensors whose nonzero finite values are all
 * integral print as "1."; scientific notation (sci_mode AUTO) is chosen when, among the nonzero
 * finite magnitudes, max / min > 1000 or max > 1e8, or, for non-integral values, min < 1e-4.
 * A tensor of more than threshold elements is summarized: each dimension longer than
 * 2 * edge_items shows its first and last edge_items entries around "...". Suffixes, in this
 * order: device='cuda:N' (non-CPU tensors); dtype=NAME (PyTorch's dtype names without "torch.":
 * float64, float16, bfloat16, int32; none for f32, i64 and bool), or for an empty tensor
 * size=(d0, d1, ...) (rank other than 1) and dtype=NAME for every dtype but f32, as in
 * tensor([], size=(0, 3)); grad_fn=<NODE> (NexusGrad's node names, MatmulBackward) or
 * requires_grad=True. Any device and view: what is shown (the summarized part only) is copied
 * to the host after the work enqueued on the device's default stream. Like nx_tensor_item, it
 * is refused inside a plan's step (NX_ERR_STATE).
 * Writes a NUL-terminated string allocated by the library to *out; it belongs to the caller,
 * who frees it with nx_string_free (not free(): the library may use another C runtime). */
NX_API nx_status nx_tensor_to_string(nx_tensor t, const nx_print_options* options, char** out);
/* nx_tensor_to_string's text and a newline written to the C library's stdout, which is then
 * flushed (Python's print(tensor)); NX_ERR_IO when the write fails. It takes no FILE*: nexus.h
 * includes no stdio, and a FILE* cannot cross between C runtimes (Windows DLLs); to write
 * elsewhere, use nx_tensor_to_string. */
NX_API nx_status nx_tensor_print(nx_tensor t, const nx_print_options* options);
/* Frees a string the library wrote to the caller (nx_tensor_to_string). NULL is a no-op. */
NX_API void nx_string_free(char* s);

/* Hyperparameters of Adam and AdamW (nx_adam_create, nx_adam_step_multi); rule 4. */
typedef struct {
  uint32_t struct_size; /* sizeof(nx_adam_options) */
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled_weight_decay; /* AdamW: p *= 1 - lr * weight_decay; Adam: g += weight_decay * p */
} nx_adam_options;
#define NX_ADAM_OPTIONS_DEFAULT {sizeof(nx_adam_options), 1e-3, 0.9, 0.999, 1e-8, 0.0, false}

/* BEGIN GENERATED OPS: scripts/opgen.py writes this part from src/ops/ops.yaml; edit that file. */

/* ---------------------------------------------------------------- views and shape ops */
/* Views share storage with their input; writes through one are seen by the other. */
/* Reshape: a view when strides allow, otherwise a copy. One dimension may be -1. */
NX_API nx_status nx_reshape(nx_tensor* out, nx_tensor x, const int64_t* shape, size_t ndim,
                            nx_stream stream);
/* Like reshape but fails with NX_ERR_SHAPE instead of copying. */
NX_API nx_status nx_view(nx_tensor* out, nx_tensor x, const int64_t* shape, size_t ndim,
                         nx_stream stream);
NX_API nx_status nx_transpose(nx_tensor* out, nx_tensor x, int64_t dim0, int64_t dim1,
                              nx_stream stream);
NX_API nx_status nx_permute(nx_tensor* out, nx_tensor x, const int64_t* dims, size_t ndim,
                            nx_stream stream);
/* Elements start, start+step, ... < end along axis (Python slice semantics, step > 0;
 * start/end are clamped, negative values count from the end). */
NX_API nx_status nx_slice(nx_tensor* out, nx_tensor x, int64_t axis, int64_t start, int64_t end,
                          int64_t step, nx_stream stream);
/* Broadcasts size-1 dimensions to shape (a view with stride 0); -1 keeps a dimension. */
NX_API nx_status nx_expand(nx_tensor* out, nx_tensor x, const int64_t* shape, size_t ndim,
                           nx_stream stream);
/* Removes axis (which must have size 1). */
NX_API nx_status nx_squeeze(nx_tensor* out, nx_tensor x, int64_t axis, nx_stream stream);
NX_API nx_status nx_unsqueeze(nx_tensor* out, nx_tensor x, int64_t axis, nx_stream stream);
/* Flattens dimensions start_axis..end_axis (inclusive) into one. */
NX_API nx_status nx_flatten(nx_tensor* out, nx_tensor x, int64_t start_axis, int64_t end_axis,
                            nx_stream stream);
/* A row-major copy (or a new handle to x itself when it is already contiguous). */
NX_API nx_status nx_contiguous(nx_tensor* out, nx_tensor x, nx_stream stream);
/* A new tensor with x's values in dtype. */
NX_API nx_status nx_cast(nx_tensor* out, nx_tensor x, nx_dtype dtype, nx_stream stream);
/* A copy with its own storage. */
NX_API nx_status nx_clone(nx_tensor* out, nx_tensor x, nx_stream stream);
/* Joins n tensors along axis (existing for cat, new for stack). */
NX_API nx_status nx_cat(nx_tensor* out, const nx_tensor* xs, size_t n, int64_t axis,
                        nx_stream stream);
NX_API nx_status nx_stack(nx_tensor* out, const nx_tensor* xs, size_t n, int64_t axis,
                          nx_stream stream);
/* Splits x along axis into nsizes views of the given sizes (which must sum to the axis size);
 * writes nsizes handles to outs, each owned by the caller. */
NX_API nx_status nx_split(nx_tensor* outs, nx_tensor x, const int64_t* sizes, size_t nsizes,
                          int64_t axis, nx_stream stream);

/* ---------------------------------------------------------------- elementwise */
/* Binary ops broadcast like NumPy/PyTorch and promote dtypes like PyTorch
 * (bool < i32 < i64 < f16/bf16 < f32 < f64; f16 with bf16 gives f32). Half types compute in f32.
 * Integer arithmetic wraps modulo 2^bits, as PyTorch's does (INT32_MAX + 1 == INT32_MIN). */
NX_API nx_status nx_add(nx_tensor* out, nx_tensor a, nx_tensor b, nx_stream stream);
NX_API nx_status nx_sub(nx_tensor* out, nx_tensor a, nx_tensor b, nx_stream stream);
NX_API nx_status nx_mul(nx_tensor* out, nx_tensor a, nx_tensor b, nx_stream stream);
/* True division; integer inputs give f32. */
NX_API nx_status nx_div(nx_tensor* out, nx_tensor a, nx_tensor b, nx_stream stream);
NX_API nx_status nx_pow(nx_tensor* out, nx_tensor a, nx_tensor b, nx_stream stream);
NX_API nx_status nx_maximum(nx_tensor* out, nx_tensor a, nx_tensor b, nx_stream stream);
NX_API nx_status nx_minimum(nx_tensor* out, nx_tensor a, nx_tensor b, nx_stream stream);
/* Comparisons give NX_BOOL tensors. */
NX_API nx_status nx_eq(nx_tensor* out, nx_tensor a, nx_tensor b, nx_stream stream);
NX_API nx_status nx_ne(nx_tensor* out, nx_tensor a, nx_tensor b, nx_stream stream);
NX_API nx_status nx_lt(nx_tensor* out, nx_tensor a, nx_tensor b, nx_stream stream);
NX_API nx_status nx_le(nx_tensor* out, nx_tensor a, nx_tensor b, nx_stream stream);
NX_API nx_status nx_gt(nx_tensor* out, nx_tensor a, nx_tensor b, nx_stream stream);
NX_API nx_status nx_ge(nx_tensor* out, nx_tensor a, nx_tensor b, nx_stream stream);
/* x * scalar + (0); x + scalar: scalar versions avoid creating a tensor. */
NX_API nx_status nx_add_scalar(nx_tensor* out, nx_tensor x, double value, nx_stream stream);
NX_API nx_status nx_mul_scalar(nx_tensor* out, nx_tensor x, double value, nx_stream stream);
NX_API nx_status nx_pow_scalar(nx_tensor* out, nx_tensor x, double exponent, nx_stream stream);
/* cond ? a : b with broadcasting; cond must be NX_BOOL. */
NX_API nx_status nx_where(nx_tensor* out, nx_tensor cond, nx_tensor a, nx_tensor b,
                          nx_stream stream);
/* Unary math. Integer inputs give f32 for the transcendental ones (like PyTorch). */
NX_API nx_status nx_neg(nx_tensor* out, nx_tensor x, nx_stream stream);
NX_API nx_status nx_abs(nx_tensor* out, nx_tensor x, nx_stream stream);
NX_API nx_status nx_exp(nx_tensor* out, nx_tensor x, nx_stream stream);
NX_API nx_status nx_log(nx_tensor* out, nx_tensor x, nx_stream stream);
NX_API nx_status nx_sqrt(nx_tensor* out, nx_tensor x, nx_stream stream);
NX_API nx_status nx_rsqrt(nx_tensor* out, nx_tensor x, nx_stream stream);
NX_API nx_status nx_sin(nx_tensor* out, nx_tensor x, nx_stream stream);
NX_API nx_status nx_cos(nx_tensor* out, nx_tensor x, nx_stream stream);
NX_API nx_status nx_tanh(nx_tensor* out, nx_tensor x, nx_stream stream);
NX_API nx_status nx_sinh(nx_tensor* out, nx_tensor x, nx_stream stream);
NX_API nx_status nx_cosh(nx_tensor* out, nx_tensor x, nx_stream stream);
NX_API nx_status nx_sigmoid(nx_tensor* out, nx_tensor x, nx_stream stream);
NX_API nx_status nx_relu(nx_tensor* out, nx_tensor x, nx_stream stream);
NX_API nx_status nx_leaky_relu(nx_tensor* out, nx_tensor x, double negative_slope,
                               nx_stream stream);
/* approximate_tanh false: x*Phi(x) (erf); true: the tanh approximation. */
NX_API nx_status nx_gelu(nx_tensor* out, nx_tensor x, bool approximate_tanh, nx_stream stream);
NX_API nx_status nx_silu(nx_tensor* out, nx_tensor x, nx_stream stream);
NX_API nx_status nx_softplus(nx_tensor* out, nx_tensor x, nx_stream stream);
NX_API nx_status nx_mish(nx_tensor* out, nx_tensor x, nx_stream stream);
/* Cone: 1 - |x - 1| (Noel and Oswal, arXiv 2405.04459). Its gradient is -sign(x - 1), taken as 0
 * at the kink x = 1 (torch's abs convention, sign(0) = 0). */
NX_API nx_status nx_cone(nx_tensor* out, nx_tensor x, nx_stream stream);
/* Parabolic-Cone: x (2 - x) = 1 - (x - 1)^2 (Noel and Oswal, arXiv 2405.04459). */
NX_API nx_status nx_parabolic_cone(nx_tensor* out, nx_tensor x, nx_stream stream);
/* Parameterized Cone (ParCon): 1 - |x - 1|^beta, beta finite and > 0 (else
 * NX_ERR_INVALID_ARGUMENT); beta = 1 is nx_cone, 2 nx_parabolic_cone. It is the member of Noel
 * and Oswal's cone family b - |x - c|^a (arXiv 2405.04459) with one exponent that keeps the
 * zeros at 0 and 2. The gradient -beta |x - 1|^(beta - 1) sign(x - 1) is 0 at x = 1 for beta >=
 * 1 and NaN for beta < 1, as torch differentiates 1 - (x - 1).abs().pow(beta).
 * nx_activation_create's "parcon" uses beta = 1.5, our choice (no published default found). */
NX_API nx_status nx_parcon(nx_tensor* out, nx_tensor x, double beta, nx_stream stream);
/* min(max(x, lo), hi); lo <= hi. */
NX_API nx_status nx_clamp(nx_tensor* out, nx_tensor x, double lo, double hi, nx_stream stream);
/* Fused elementwise ops (one kernel instead of two), with broadcasting and gradients:
 * relu(a + b); gelu(x + bias) (exact, or the tanh approximation); a * tanh(b). */
NX_API nx_status nx_add_relu(nx_tensor* out, nx_tensor a, nx_tensor b, nx_stream stream);
NX_API nx_status nx_bias_gelu(nx_tensor* out, nx_tensor x, nx_tensor bias, bool approximate_tanh,
                              nx_stream stream);
NX_API nx_status nx_mul_tanh(nx_tensor* out, nx_tensor a, nx_tensor b, nx_stream stream);
/* Activation gradients in one fused kernel (what the backward of nx_gelu, nx_bias_gelu, nx_silu
 * and nx_swiglu runs), with broadcasting and gradients of their own: grad * gelu'(x) (exact, or
 * the tanh approximation); grad * silu'(x). f16/bf16 compute in f32 registers. */
NX_API nx_status nx_gelu_backward(nx_tensor* out, nx_tensor grad, nx_tensor x,
                                  bool approximate_tanh, nx_stream stream);
NX_API nx_status nx_silu_backward(nx_tensor* out, nx_tensor grad, nx_tensor x, nx_stream stream);
/* In-place: modify x's storage and bump its version counter. Autodiff detects when a tensor it
 * saved for backward was changed this way and fails backward with NX_ERR_STATE. x must not be a
 * leaf that requires grad (NX_ERR_STATE). b broadcasts to x's shape. Refused as in PyTorch: a
 * result x's dtype cannot hold without changing kind (floating into integer or bool, integer
 * into bool; NX_ERR_DTYPE: nx_copy_ converts), and an x with a stride-0 dimension of size > 1,
 * an expanded view (NX_ERR_INVALID_ARGUMENT; nx_copy_ too). */
NX_API nx_status nx_add_(nx_tensor x, nx_tensor b, nx_stream stream);
NX_API nx_status nx_mul_(nx_tensor x, nx_tensor b, nx_stream stream);
NX_API nx_status nx_mul_scalar_(nx_tensor x, double value, nx_stream stream);
/* Copies src (broadcast, cast) into x. */
NX_API nx_status nx_copy_(nx_tensor x, nx_tensor src, nx_stream stream);

/* ---------------------------------------------------------------- reductions */
/* Reduce over naxes axes (naxes 0 = all axes, at most 1024); keepdim keeps them as size 1. */
NX_API nx_status nx_sum(nx_tensor* out, nx_tensor x, const int64_t* axes, size_t naxes,
                        bool keepdim, nx_stream stream);
NX_API nx_status nx_mean(nx_tensor* out, nx_tensor x, const int64_t* axes, size_t naxes,
                         bool keepdim, nx_stream stream);
NX_API nx_status nx_max(nx_tensor* out, nx_tensor x, const int64_t* axes, size_t naxes,
                        bool keepdim, nx_stream stream);
NX_API nx_status nx_min(nx_tensor* out, nx_tensor x, const int64_t* axes, size_t naxes,
                        bool keepdim, nx_stream stream);
/* Variance with `correction` subtracted from the count (1 = unbiased, like torch.var). */
NX_API nx_status nx_var(nx_tensor* out, nx_tensor x, const int64_t* axes, size_t naxes,
                        int64_t correction, bool keepdim, nx_stream stream);
/* Index (NX_I64) of the first maximum along axis. */
NX_API nx_status nx_argmax(nx_tensor* out, nx_tensor x, int64_t axis, bool keepdim,
                           nx_stream stream);

/* ---------------------------------------------------------------- linear algebra */
/* torch.matmul semantics: 1-d operands are promoted and the added dimension removed; leading
 * (batch) dimensions broadcast. Both operands must have the same floating dtype. */
NX_API nx_status nx_matmul(nx_tensor* out, nx_tensor a, nx_tensor b, nx_stream stream);
/* x @ weight^T + bias, weight [out_features, in_features]; bias may be NULL. */
NX_API nx_status nx_linear(nx_tensor* out, nx_tensor x, nx_tensor weight, nx_tensor bias,
                           nx_stream stream);

/* ---------------------------------------------------------------- softmax */
NX_API nx_status nx_softmax(nx_tensor* out, nx_tensor x, int64_t axis, nx_stream stream);
NX_API nx_status nx_log_softmax(nx_tensor* out, nx_tensor x, int64_t axis, nx_stream stream);

/* ---------------------------------------------------------------- attention */
/* softmax(q k^T * scale + bias) v without materializing the [Tq, Tk] scores (flash attention).
 * q [B, H, Tq, D], k and v [B, Hkv, Tk, D] with H a multiple of Hkv (grouped-query attention);
 * D <= 256; f32, f64, f16, bf16 (half types accumulate in f32). Query i sits at position
 * Tk - Tq + i, so Tq < Tk is a prefill after a KV cache. causal masks keys after the query;
 * alibi adds -slope_h * (query position - key position) with the standard ALiBi slopes; scale
 * <= 0 means 1/sqrt(D). Differentiable (once: no double backward through this op). */
NX_API nx_status nx_flash_attention(nx_tensor* out, nx_tensor q, nx_tensor k, nx_tensor v,
                                    bool causal, bool alibi, double scale, nx_stream stream);

/* ---------------------------------------------------------------- indexing */
/* Selects entries of x along axis at the integer (i32/i64) indices of the 1-d tensor index. */
NX_API nx_status nx_index_select(nx_tensor* out, nx_tensor x, nx_tensor index, int64_t axis,
                                 nx_stream stream);
/* torch.gather: out[i][j] = x[index[i][j]][j] for axis 0, and so on; index has x's rank. */
NX_API nx_status nx_gather(nx_tensor* out, nx_tensor x, nx_tensor index, int64_t axis,
                           nx_stream stream);
/* Rows of weight [num, dim] at the integer indices (any shape): result shape indices + [dim]. */
NX_API nx_status nx_embedding(nx_tensor* out, nx_tensor weight, nx_tensor indices,
                              nx_stream stream);
/* indices (any shape) to indices.shape + [num_classes] of dtype. */
NX_API nx_status nx_one_hot(nx_tensor* out, nx_tensor indices, int64_t num_classes, nx_dtype dtype,
                            nx_stream stream);

/* ---------------------------------------------------------------- losses */
typedef enum { NX_REDUCTION_MEAN = 0, NX_REDUCTION_SUM = 1, NX_REDUCTION_NONE = 2 } nx_reduction;
/* logits [N, C], target [N] integer class indices. Entries equal to ignore_index do not count
 * (the mean divides by the number of the others). label_smoothing in [0, 1]. */
NX_API nx_status nx_cross_entropy(nx_tensor* out, nx_tensor logits, nx_tensor target,
                                  int64_t ignore_index, double label_smoothing,
                                  nx_reduction reduction, nx_stream stream);
/* log_probs [N, C], target [N]. */
NX_API nx_status nx_nll_loss(nx_tensor* out, nx_tensor log_probs, nx_tensor target,
                             int64_t ignore_index, nx_reduction reduction, nx_stream stream);
NX_API nx_status nx_mse_loss(nx_tensor* out, nx_tensor input, nx_tensor target,
                             nx_reduction reduction, nx_stream stream);
NX_API nx_status nx_bce_with_logits(nx_tensor* out, nx_tensor logits, nx_tensor target,
                                    nx_reduction reduction, nx_stream stream);

/* ---------------------------------------------------------------- fused kernels */
/* One kernel per row forward and one backward, saving only per-row statistics; f32, f64, f16,
 * bf16 (half types accumulate in f32). Any layout (non-contiguous inputs are copied first).
 * Differentiable, also to second order (under create_graph the VJPs run as ordinary ops).
 * Bias + GELU is nx_bias_gelu above. */
/* RMSNorm over the last axis: x / sqrt(mean(x^2) + eps) * weight. weight [C] or NULL. */
NX_API nx_status nx_rms_norm(nx_tensor* out, nx_tensor x, nx_tensor weight, double eps,
                             nx_stream stream);
/* LayerNorm over the last axis (biased variance); weight, bias [C] or NULL. */
NX_API nx_status nx_layer_norm(nx_tensor* out, nx_tensor x, nx_tensor weight, nx_tensor bias,
                               double eps, nx_stream stream);
/* Residual add + norm in one pass: *sum_out = x + residual (what the next residual adds to) and
 * *out = rms_norm(*sum_out) / layer_norm(*sum_out). residual has x's shape. */
NX_API nx_status nx_add_rms_norm(nx_tensor* out, nx_tensor* sum_out, nx_tensor x,
                                 nx_tensor residual, nx_tensor weight, double eps,
                                 nx_stream stream);
NX_API nx_status nx_add_layer_norm(nx_tensor* out, nx_tensor* sum_out, nx_tensor x,
                                   nx_tensor residual, nx_tensor weight, nx_tensor bias, double eps,
                                   nx_stream stream);
/* Cross-entropy of logits [N, V] against integer targets [N] (i32/i64) without a [N, V]
 * probability tensor: the forward keeps the per-row log-sum-exp, the backward recomputes
 * softmax - onehot. Rows whose target is ignore_index do not count. A target outside [0, V)
 * is NX_ERR_INVALID_ARGUMENT on the CPU and gives a NaN loss on CUDA (no host sync). */
NX_API nx_status nx_softmax_cross_entropy(nx_tensor* out, nx_tensor logits, nx_tensor target,
                                          int64_t ignore_index, nx_reduction reduction,
                                          nx_stream stream);
/* SwiGLU's gate: silu(gate) * up, broadcasting. */
NX_API nx_status nx_swiglu(nx_tensor* out, nx_tensor gate, nx_tensor up, nx_stream stream);
/* One Adam step (AdamW when options->decoupled_weight_decay) in place over n tensors at once
 * (one kernel launch on CUDA): params[i] -= ..., exp_avgs[i] and exp_avg_sqs[i] updated,
 * grads[i] read; step >= 1 is the step number for the bias corrections; options NULL:
 * NX_ADAM_OPTIONS_DEFAULT. All 4n tensors contiguous, on one device, of one floating dtype,
 * each of its param's shape. Not recorded by autodiff (params may require grad).
 * torch.optim.Adam(W) semantics. */
NX_API nx_status nx_adam_step_multi(const nx_tensor* params, const nx_tensor* grads,
                                    const nx_tensor* exp_avgs,
                                    const nx_tensor* exp_avg_sqs, size_t n, int64_t step,
                                    const nx_adam_options* options, nx_stream stream);

/* END GENERATED OPS */

/* ---------------------------------------------------------------- 8-bit quantization, 8-bit KV cache */
/* Hand-written, outside the op registry: they take the 8-bit storage dtypes, which every
 * registry op refuses, and the op harness's oracle (torch 1.13) has no FP8; their oracle is
 * tests/capi/test_kv_cache_8bit.c (docs/attention_8bit.md). Inference only: an input that
 * requires grad while grad mode is on is refused (NX_ERR_NOT_IMPLEMENTED). The value a code c
 * with scale s represents is c * s (I8: c an integer in [-127, 127]). */
/* Quantizes x (f32, f64, f16, bf16) to dtype (NX_I8, NX_F8E4M3, NX_F8E5M2) with one absmax scale
 * per index of x's first keep_dims dimensions: *scale (f32) has shape x.shape[:keep_dims] ([1]
 * for keep_dims 0: one scale for the tensor), scale = max|x| / qmax over the other dimensions
 * (qmax 127, 448, 57344; 1 where that is 0), computed in f32; *out (x's shape, dtype) holds
 * x / scale rounded to nearest even: I8 clamped to [-127, 127] (NaN to 0), FP8 saturating. */
NX_API nx_status nx_quantize_8bit(nx_tensor* out, nx_tensor* scale, nx_tensor x, nx_dtype dtype,
                                  int64_t keep_dims, nx_stream stream);
/* The append of a generation step: writes x [B, Hkv, T, D] (floating) into rows
 * [pos[b], pos[b] + T) of sequence b of cache [B, Hkv, Tmax, D] (8-bit, contiguous) and of its
 * scales scale [B, Hkv, Tmax] (f32, contiguous), quantizing each row with its own absmax scale
 * (as nx_quantize_8bit with keep_dims 3), so a row already stored is never rescaled. pos is i32
 * [B] and read on the device; rows that would land outside [0, Tmax) are not written. */
NX_API nx_status nx_kv_cache_append_8bit(nx_tensor cache, nx_tensor scale, nx_tensor x, nx_tensor pos,
                                         nx_stream stream);
/* Attention of q [B, H, Tq, D] (f32, f16, bf16) against a cache held in 8 bits: k_cache and
 * v_cache [B, Hkv, Tmax, D] (NX_I8, NX_F8E4M3 or NX_F8E5M2, one dtype, contiguous) with f32
 * scales k_scale, v_scale [B, Hkv, Tmax] (one per cached row), and lengths (i32 [B], read on the
 * device and clamped to [0, Tmax]): the valid rows of each sequence, so sequences of different
 * lengths share one cache. Query i of sequence b sits at position lengths[b] - Tq + i; causal,
 * alibi and scale (<= 0: 1/sqrt(D)) as nx_flash_attention; H a multiple of Hkv. *out has q's
 * dtype and shape; a query with no visible key gives 0. D <= 256 (CUDA: 64, 128 or 256). */
NX_API nx_status nx_attention_decode_8bit(nx_tensor* out, nx_tensor q, nx_tensor k_cache,
                                          nx_tensor k_scale, nx_tensor v_cache, nx_tensor v_scale,
                                          nx_tensor lengths, bool causal, bool alibi, double scale,
                                          nx_stream stream);
/* Inference attention on FP8 inputs (1.5): softmax(q k^T * scale + bias) v for q [B, H, Tq, D]
 * and k, v [B, Hkv, Tk, D] in NX_F8E4M3 (contiguous), each worth codes * its f32 scale tensor,
 * whose shape is its granularity: q_scale [1], [B, H] or [B, H, Tq]; k_scale [1], [B, Hkv] or
 * [B, Hkv, Tk]; v_scale [1] or [B, Hkv] (a per-row v scale would lie along P V's reduction).
 * The probabilities are rounded to e4m3 as a single-pass FP8 P V product takes them: per row, keys
 * in tiles of 128 from key 0, with m_t the largest score up to and including tile t,
 * P_j = e4m3(448 exp(s_j - m_t)) / 448 for key j of tile t, and
 * out = sum_j P_j exp(m_t - m) v_j / sum_j P_j exp(m_t - m), m the row's largest score (the same
 * rounded P in both sums). causal, alibi, scale (<= 0: 1/sqrt(D)), query positions and
 * grouped-query heads as nx_flash_attention; a query with no visible key gives 0. *out is
 * out_dtype (NX_BF16, NX_F16 or NX_F32). D <= 256. Forward only. On Hopper (sm_90a builds), D = 128
 * with q and k scaled per tensor or per head runs on FP8 tensor cores, whose score sums carry
 * FP8 MMA accumulation's error, so a P at an e4m3 rounding boundary may round the other way; other
 * cases run a CUDA reference kernel (docs/attention_8bit.md). */
NX_API nx_status nx_flash_attention_fp8(nx_tensor* out, nx_tensor q, nx_tensor q_scale, nx_tensor k,
                                        nx_tensor k_scale, nx_tensor v, nx_tensor v_scale, bool causal,
                                        bool alibi, double scale, nx_dtype out_dtype, nx_stream stream);

/* ---------------------------------------------------------------- autodiff */
/* Marks a floating-point tensor as a leaf whose gradient backward accumulates. */
NX_API nx_status nx_tensor_set_requires_grad(nx_tensor t, bool requires_grad);
NX_API nx_status nx_tensor_get_requires_grad(nx_tensor t, bool* out);
/* True when t is a leaf: it was not produced by an op recorded in the graph (it has no grad_fn),
 * like PyTorch's is_leaf. Tensors made by creation functions, detach() and ops run without grad
 * are leaves; the output of a recorded op is not. */
NX_API nx_status nx_tensor_is_leaf(nx_tensor t, bool* out);
/* Options of nx_backward and nx_autograd_grad (rule 4; NULL: all false). */
typedef struct {
  uint32_t struct_size; /* sizeof(nx_backward_options) */
  bool retain_graph;    /* keep the saved tensors for another backward */
  bool create_graph;    /* record the backward itself, so gradients can be differentiated again
                           (implies retain_graph) */
  bool check_finite;    /* check every gradient for NaN/Inf; fail with NX_ERR_STATE naming the
                           first node whose output gradient is not finite */
} nx_backward_options;
#define NX_BACKWARD_OPTIONS_DEFAULT {sizeof(nx_backward_options), false, false, false}
/* Backpropagates from root into the .grad of every leaf that requires grad. grad NULL means
 * ones (root must then have one element). Unless options->retain_graph, frees the graph's saved
 * tensors as it goes. */
NX_API nx_status nx_backward(nx_tensor root, nx_tensor grad, const nx_backward_options* options,
                             nx_stream stream);
/* torch.autograd.grad: writes d root / d inputs[i] to grads[i] (NULL where inputs[i] does not
 * reach root) without touching any .grad. The grads are owned by the caller. */
NX_API nx_status nx_autograd_grad(nx_tensor* grads, nx_tensor root, nx_tensor grad,
                                  const nx_tensor* inputs, size_t ninputs,
                                  const nx_backward_options* options, nx_stream stream);
/* Forward-mode directional derivative: given outputs = f(inputs) already computed with grad
 * recording, writes J v for the tangents v (one per input, same shapes) to *out. Computed by
 * differentiating the VJP (the double-backward identity); the graph is retained. */
NX_API nx_status nx_jvp(nx_tensor* out, nx_tensor output, const nx_tensor* inputs,
                        const nx_tensor* tangents, size_t ninputs, nx_stream stream);
/* The accumulated gradient of t, or NULL written to *out when there is none. */
NX_API nx_status nx_tensor_grad(nx_tensor* out, nx_tensor t);
/* Drops t's accumulated gradient. */
NX_API nx_status nx_tensor_zero_grad(nx_tensor t);
/* A view of t's data outside the graph (no grad_fn, requires_grad false). */
NX_API nx_status nx_tensor_detach(nx_tensor* out, nx_tensor t);
/* Grad mode, thread-local, on by default: when off, ops record nothing (inference, optimizer
 * updates). */
NX_API nx_status nx_autograd_set_enabled(bool enabled);
NX_API nx_status nx_autograd_get_enabled(bool* out);

/* Autocast (mixed precision, torch.autocast's policy), per thread: push opens a scope for one
 * device type. Inside a scope for a tensor's device type, matmul, linear and flash attention
 * cast their f32/f16/bf16 operands to dtype (NX_F16 or NX_BF16), and softmax, log_softmax, the
 * norms (layer_norm, rms_norm and their add_ forms), the losses and sum cast them to f32; f64
 * and integer operands are left alone. Other ops take what they are given (a binary op of bf16
 * and f32 promotes to f32). The casts are recorded, so gradients come back in each leaf's own
 * dtype (f32 master weights get f32 gradients), and backward runs with autocast suspended.
 * A scope pushed with enabled = false turns autocast off for its device type until popped.
 * Scopes nest; each push is matched by one pop (NX_ERR_STATE when none is open). Modules
 * (nx_module_forward, nx_gpt_create's model) run under it unchanged. */
NX_API nx_status nx_autocast_push(nx_device_type device_type, nx_dtype dtype, bool enabled);
NX_API nx_status nx_autocast_pop(void);
/* The dtype autocast gives device_type's low-precision ops now (NX_F16 or NX_BF16), or NX_F32
 * when no enabled scope is in force for that device type. */
NX_API nx_status nx_autocast_get_dtype(nx_device_type device_type, nx_dtype* out);

/* Gradient checkpointing: fn computes outputs from inputs through the C API. It runs once now
 * without recording, and again inside backward to rebuild the segment's graph, so activations
 * inside the segment are not kept. fn must be deterministic and write noutputs handles (owned by
 * the checkpoint) and return NX_OK. outputs[i] are owned by the caller. */
typedef nx_status (*nx_checkpoint_fn)(nx_tensor* outputs, size_t noutputs,
                                      const nx_tensor* inputs, size_t ninputs, void* user_data);
NX_API nx_status nx_checkpoint(nx_tensor* outputs, size_t noutputs, const nx_tensor* inputs,
                               size_t ninputs, nx_checkpoint_fn fn, void* user_data,
                               nx_stream stream);

/* The graph that produced root, as an object. */
typedef struct nx_graph_s* nx_graph;
/* Snapshot of the nodes reachable from root's grad_fn, in topological order (root first). */
NX_API nx_status nx_graph_create(nx_graph* out, nx_tensor root);
NX_API nx_status nx_graph_node_count(nx_graph g, size_t* out);
/* Name of node i ("MatmulBackward"...), valid while g lives. */
NX_API nx_status nx_graph_node_name(nx_graph g, size_t i, const char** out);
/* Bytes held by tensors the nodes saved for backward. */
NX_API nx_status nx_graph_saved_bytes(nx_graph g, size_t* out);
/* Graphviz DOT text with op names, shapes and dtypes, valid while g lives. */
NX_API nx_status nx_graph_to_dot(nx_graph g, const char** out);
/* 1.4: bytes held by the tensors node i saved for backward (0 once a backward released them). */
NX_API nx_status nx_graph_node_saved_bytes(nx_graph g, size_t i, size_t* out);
typedef struct {
  uint32_t struct_size; /* sizeof(nx_graph_dump_options) */
  bool values;      /* per leaf, per saved tensor and for the output: min, max and mean of the finite
                       values and the counts of NaN and Inf (reads every value: for debugging) */
  bool saved_bytes; /* per op: bytes its saved tensors hold */
} nx_graph_dump_options;
#define NX_GRAPH_DUMP_OPTIONS_DEFAULT {sizeof(nx_graph_dump_options), false, false}
/* 1.4: the DOT text of nx_graph_to_dot, with parameter names on the leaves (nx_graph_name_parameters,
 * declared with the modules) and what options ask for (NULL: the defaults). Valid until the next
 * nx_graph_dump of g or nx_graph_free. */
NX_API nx_status nx_graph_dump(nx_graph g, const nx_graph_dump_options* options, const char** out);
NX_API void nx_graph_free(nx_graph g);

/* ---------------------------------------------------------------- SafeTensors I/O */
/* Reads and validates a .safetensors file (header bounds, offsets inside the file, no overlaps
 * or holes, shape times dtype size equal to byte length); malformed files give NX_ERR_IO.
 * The rules are the safetensors crate's (strict UTF-8 JSON, overflow-checked sizes), plus:
 * duplicate keys and names or metadata holding NUL (\u0000, unreachable from C) are refused.
 * The file is read whole at open, never mapped: truncating it later cannot fault (no SIGBUS);
 * a file cut while it is read gives NX_ERR_IO. Details: docs/hostile_files.md. */
NX_API nx_status nx_safetensors_open(nx_safetensors* out, const char* path);
NX_API nx_status nx_safetensors_count(nx_safetensors st, size_t* out);
/* Name of tensor i (in file order); valid while st lives. */
NX_API nx_status nx_safetensors_name(nx_safetensors st, size_t i, const char** out);
/* A copy of the named tensor on device; NX_ERR_INVALID_ARGUMENT if there is no such name. */
NX_API nx_status nx_safetensors_get(nx_tensor* out, nx_safetensors st, const char* name,
                                    nx_device device, nx_stream stream);
/* Value of a __metadata__ key, or NULL written when absent; valid while st lives. */
NX_API nx_status nx_safetensors_metadata(nx_safetensors st, const char* key, const char** out);
NX_API void nx_safetensors_free(nx_safetensors st);
/* Writes n named tensors to path (contiguous, little-endian, sorted by name as the format's
 * reference implementation does). Like every save (nx_module_save, nx_optimizer_save,
 * nx_tokenizer_save), atomic: the file is written beside path, fsynced and renamed over it, so a
 * kill or a crash leaves the old file or the new one, never a truncated one; on any failure
 * (a full disk included) NX_ERR_IO names path and the reason, and the old file is unchanged. */
NX_API nx_status nx_safetensors_save(const char* path, const char* const* names,
                                     const nx_tensor* tensors, size_t n);

/* ---------------------------------------------------------------- DLPack */
/* Zero-copy exchange with other array libraries (PyTorch, NumPy, JAX, CuPy...) through DLPack
 * (https://dmlc.github.io/dlpack/latest/). The nx_dl_* types have the layout of DLPack's own
 * structs under names of their own: nx_dl_device = DLDevice, nx_dl_data_type = DLDataType,
 * nx_dl_tensor = DLTensor, nx_dl_managed_tensor = DLManagedTensor (the legacy struct, capsule
 * "dltensor"), nx_dl_version = DLPackVersion and nx_dl_managed_tensor_versioned =
 * DLManagedTensorVersioned (DLPack 1.x, capsule "dltensor_versioned"). This header defines no
 * DLPack name or macro: dlpack.h may be included before or after it, and a pointer to one of
 * DLPack's structs is passed with a cast (tests/capi/test_dlpack*.c compare the sizes and
 * offsets with a real dlpack.h). */
/* DLDataTypeCode (the codes NexusGrad reads and writes are int, float, bfloat, bool and DLPack
 * 1.1's float8_e4m3fn and float8_e5m2). */
typedef enum {
  NX_DL_INT = 0,
  NX_DL_UINT = 1,
  NX_DL_FLOAT = 2,
  NX_DL_OPAQUE_HANDLE = 3,
  NX_DL_BFLOAT = 4,
  NX_DL_COMPLEX = 5,
  NX_DL_BOOL = 6,
  NX_DL_FLOAT8_E4M3FN = 10, /* DLPack 1.1 */
  NX_DL_FLOAT8_E5M2 = 12    /* DLPack 1.1 */
} nx_dl_data_type_code;
typedef struct {
  int32_t device_type; /* DLDeviceType: kDLCPU = 1 (NX_CPU), kDLCUDA = 2 (NX_CUDA)... */
  int32_t device_id;
} nx_dl_device;
typedef struct {
  uint8_t code; /* an nx_dl_data_type_code */
  uint8_t bits;
  uint16_t lanes;
} nx_dl_data_type;
typedef struct {
  void* data;
  nx_dl_device device;
  int32_t ndim;
  nx_dl_data_type dtype;
  int64_t* shape;
  int64_t* strides; /* in elements; NULL means compact row-major */
  uint64_t byte_offset;
} nx_dl_tensor;
/* The deleter frees the struct itself too; the consumer calls it exactly once. */
typedef struct nx_dl_managed_tensor_s {
  nx_dl_tensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(struct nx_dl_managed_tensor_s* self);
} nx_dl_managed_tensor;
typedef struct {
  uint32_t major; /* a consumer refuses another major version (the layout may differ) */
  uint32_t minor;
} nx_dl_version;
typedef struct nx_dl_managed_tensor_versioned_s {
  nx_dl_version version;
  void* manager_ctx;
  void (*deleter)(struct nx_dl_managed_tensor_versioned_s* self);
  uint64_t flags; /* NX_DL_FLAG_* bits */
  nx_dl_tensor dl_tensor;
} nx_dl_managed_tensor_versioned;
/* The DLPack version of nx_dl_managed_tensor_versioned: what export writes, and the only major
 * version import accepts. */
#define NX_DL_MAJOR_VERSION 1
#define NX_DL_MINOR_VERSION 0
/* Flags of nx_dl_managed_tensor_versioned (DLPACK_FLAG_BITMASK_READ_ONLY, _IS_COPIED). */
#define NX_DL_FLAG_READ_ONLY (1ULL << 0)
#define NX_DL_FLAG_IS_COPIED (1ULL << 1)

/* Exports t (CPU or CUDA, any view) as a DLManagedTensor that shares t's memory: writes through
 * either side are seen by the other. The struct keeps the memory alive until its deleter is
 * called, which the consumer does exactly once (after that, t's handles are unaffected). No
 * autodiff information travels. For CUDA tensors the data is ready on the default stream. */
NX_API nx_status nx_tensor_to_dlpack(nx_dl_managed_tensor** out, nx_tensor t);
/* The same as a DLManagedTensorVersioned: version {NX_DL_MAJOR_VERSION, NX_DL_MINOR_VERSION},
 * flags 0 (shared and writable; a caller that exports a copy of its own may set
 * NX_DL_FLAG_IS_COPIED before handing the struct on). */
NX_API nx_status nx_tensor_to_dlpack_versioned(nx_dl_managed_tensor_versioned** out, nx_tensor t);
/* Wraps the memory described by managed as a tensor without copying (kDLCPU or kDLCUDA; dtypes
 * float16/32/64, bfloat16, int32/64, bool; lanes 1; strides >= 0 or NULL; an element count or a
 * byte extent past int64 is NX_ERR_SHAPE, one that wraps the address space NX_ERR_INVALID_ARGUMENT).
 * On success the new
 * tensor (and every view of it) owns managed and calls managed->deleter once when the last of them
 * is freed. On failure managed is left untouched and still belongs to the caller. */
NX_API nx_status nx_tensor_from_dlpack(nx_tensor* out, nx_dl_managed_tensor* managed);
/* The same for a DLManagedTensorVersioned. It also fails with NX_ERR_NOT_IMPLEMENTED for a major
 * version other than NX_DL_MAJOR_VERSION (DLPack then wants the caller to call the deleter) and
 * for a tensor flagged NX_DL_FLAG_READ_ONLY (NexusGrad tensors are writable: copy it first). */
NX_API nx_status nx_tensor_from_dlpack_versioned(nx_tensor* out, nx_dl_managed_tensor_versioned* managed);


/* ---------------------------------------------------------------- layers (nx_module) */
/* A module owns named parameters (leaf tensors that require grad) and child modules. Every
 * constructor writes a module owned by the caller (free with nx_module_free); parameters are
 * initialized like PyTorch's defaults from the generator seeded by nx_random_set_seed. */
typedef struct nx_module_s* nx_module;
NX_API nx_status nx_linear_create(nx_module* out, int64_t in_features, int64_t out_features, bool bias,
                                  nx_dtype dtype, nx_device device, nx_stream stream);
NX_API nx_status nx_embedding_create(nx_module* out, int64_t num_embeddings, int64_t dim, nx_dtype dtype,
                                     nx_device device, nx_stream stream);
NX_API nx_status nx_layer_norm_create(nx_module* out, int64_t dim, double eps, nx_dtype dtype,
                                      nx_device device, nx_stream stream);
NX_API nx_status nx_rms_norm_create(nx_module* out, int64_t dim, double eps, nx_dtype dtype,
                                    nx_device device, nx_stream stream);
/* p in [0, 1) (NaN is refused); layer and RMS norms need dim > 0 and a finite eps >= 0. */
NX_API nx_status nx_dropout_create(nx_module* out, double p);
/* name: any unary op of the op registry without a parameter (relu, gelu, gelu_tanh, silu, softplus,
 * sigmoid, tanh, cone, parabolic_cone...), or leaky_relu (slope 0.01), parcon (nx_parcon with
 * beta 1.5), swish (silu), gcu (x cos x), gaussian (exp(-x^2)), softmax (last axis), identity. An
 * unknown name's message lists them all. */
NX_API nx_status nx_activation_create(nx_module* out, const char* name);
NX_API nx_status nx_flatten_create(nx_module* out);
NX_API nx_status nx_conv2d_create(nx_module* out, int64_t in_channels, int64_t out_channels, int64_t kernel,
                                  int64_t stride, int64_t padding, bool bias, nx_dtype dtype, nx_device device,
                                  nx_stream stream);
NX_API nx_status nx_max_pool2d_create(nx_module* out, int64_t kernel, int64_t stride);
NX_API nx_status nx_avg_pool2d_create(nx_module* out, int64_t kernel, int64_t stride);
/* Containers share (do not take over) the modules given: the caller still frees its handles. */
NX_API nx_status nx_sequential_create(nx_module* out, const nx_module* layers, size_t n);
NX_API nx_status nx_residual_create(nx_module* out, nx_module inner);
NX_API nx_status nx_swiglu_create(nx_module* out, int64_t dim, int64_t hidden, nx_dtype dtype, nx_device device,
                                  nx_stream stream);
typedef struct {
  uint32_t struct_size; /* sizeof(nx_attention_config) */
  int64_t dim, heads, kv_heads; /* kv_heads 0: same as heads (grouped-query when fewer) */
  bool causal, alibi, rope;
} nx_attention_config;
/* Multi-head self-attention on [batch, seq, dim]. */
NX_API nx_status nx_attention_create(nx_module* out, const nx_attention_config* config, nx_dtype dtype,
                                     nx_device device, nx_stream stream);
/* The activation of a transformer block's MLP (when not swiglu). */
typedef enum {
  NX_ACTIVATION_GELU = 0,      /* exact (erf) GELU */
  NX_ACTIVATION_GELU_TANH = 1, /* GPT-2's tanh approximation */
  NX_ACTIVATION_RELU = 2,
  NX_ACTIVATION_SILU = 3
} nx_activation;
typedef struct {
  uint32_t struct_size; /* sizeof(nx_transformer_config) */
  int64_t vocab, context, dim, layers, heads, kv_heads, ffn_hidden; /* ffn_hidden 0: 4 * dim */
  bool alibi, rope, swiglu, rms_norm, tie_embeddings;
  double dropout;
  /* 1.1 (appended, rule 4: a struct_size without it means NX_ACTIVATION_GELU) */
  nx_activation activation;
  /* 1.2 (appended; without it: 0). Gradient checkpointing of every n-th block (block i when
   * i % n == 0; 1: all, 0: none): in training mode with grad on, the block keeps only its input and
   * runs again inside backward (nx_checkpoint's mechanism), trading compute for activation memory.
   * int64_t, not bool: a field in the 1.1 struct's tail padding could not be told apart. */
  int64_t checkpoint_every;
} nx_transformer_config;
/* Pre-norm block: x + attn(norm(x)), then x + ffn(norm(x)); uses dim, heads, kv_heads, ffn_hidden,
 * alibi, rope, swiglu, rms_norm, dropout of config. */
NX_API nx_status nx_transformer_block_create(nx_module* out, const nx_transformer_config* config, nx_dtype dtype,
                                             nx_device device, nx_stream stream);
/* Decoder-only language model: [batch, seq] token ids -> [batch, seq, vocab] logits. */
NX_API nx_status nx_gpt_create(nx_module* out, const nx_transformer_config* config, nx_dtype dtype,
                               nx_device device, nx_stream stream);
NX_API nx_status nx_module_forward(nx_tensor* out, nx_module m, nx_tensor x, nx_stream stream);
/* "Linear", "GPT"...; static storage. */
NX_API nx_status nx_module_kind(nx_module m, const char** out);
NX_API nx_status nx_module_parameter_count(nx_module m, size_t* out);
/* Parameter i: its dotted name (valid while m lives) and a new handle to the tensor itself. */
NX_API nx_status nx_module_parameter(nx_module m, size_t i, const char** name, nx_tensor* out);
/* Moves every parameter to device (existing parameter handles keep the old tensors). */
NX_API nx_status nx_module_to(nx_module m, nx_device device, nx_stream stream);
/* Training mode (dropout active; the default) or evaluation mode, of m and its children. */
NX_API nx_status nx_module_set_training(nx_module m, bool training);
NX_API nx_status nx_module_get_training(nx_module m, bool* out);
/* State dict as SafeTensors (names = parameter names); save is atomic (see nx_safetensors_save).
 * Load checks every name, shape and dtype before it changes any parameter: all or nothing. */
NX_API nx_status nx_module_save(nx_module m, const char* path);
NX_API nx_status nx_module_load(nx_module m, const char* path);
NX_API void nx_module_free(nx_module m);
/* 1.4 (graph debugging, see nx_graph_dump): labels the leaves of g that are parameters of m with
 * their dotted names (those of nx_module_parameter) in later nx_graph_dump texts; call it once
 * per module. */
NX_API nx_status nx_graph_name_parameters(nx_graph g, nx_module m);

typedef struct {
  uint32_t struct_size; /* sizeof(nx_sample_config) */
  double temperature;   /* 0: greedy; finite, >= 0 */
  int64_t top_k;        /* 0: off; >= 0 */
  double top_p;         /* 1: off; in [0, 1] */
  uint64_t seed;
} nx_sample_config;
/* Generates new_tokens tokens after the prompt with a preallocated per-layer KV cache; writes
 * the prompt followed by the new tokens as a [1, n + new_tokens] NX_I64 CPU tensor. The model
 * reads n + new_tokens - 1 positions, at most its context (else NX_ERR_SHAPE, for every position
 * encoding); NaN logits are NX_ERR_STATE. Whatever happens, the training flag is left as it was. */
NX_API nx_status nx_gpt_generate(nx_tensor* out, nx_module gpt, const int64_t* prompt, size_t n,
                                 int64_t new_tokens, const nx_sample_config* config, nx_stream stream);

/* ---------------------------------------------------------------- optimizers */
typedef struct nx_optimizer_s* nx_optimizer;
/* The optimizers update the n tensors given (leaves that require grad), e.g. a module's
 * parameters; they keep their own references. torch.optim semantics; NULL options: PyTorch's
 * defaults (the NX_*_OPTIONS_DEFAULT macros). Refused like torch.optim's, NaN included: lr,
 * momentum, eps, weight_decay < 0, betas outside [0, 1) (NX_ERR_INVALID_ARGUMENT). */
typedef struct {
  uint32_t struct_size; /* sizeof(nx_sgd_options) */
  double lr, momentum;
  bool nesterov;
  double weight_decay;
} nx_sgd_options;
#define NX_SGD_OPTIONS_DEFAULT {sizeof(nx_sgd_options), 1e-3, 0.0, false, 0.0}
NX_API nx_status nx_sgd_create(nx_optimizer* out, const nx_tensor* params, size_t n,
                               const nx_sgd_options* options);
/* Adam, or AdamW when decoupled_weight_decay (nx_adam_options is declared before the ops). */
NX_API nx_status nx_adam_create(nx_optimizer* out, const nx_tensor* params, size_t n,
                                const nx_adam_options* options);
/* Every parameter of a module, in nx_module_parameter order, as an array the caller frees with
 * nx_tensor_array_free. */
NX_API nx_status nx_module_parameters(nx_module m, nx_tensor** out, size_t* n);
NX_API void nx_tensor_array_free(nx_tensor* tensors, size_t n);
NX_API nx_status nx_optimizer_step(nx_optimizer opt, nx_stream stream);
NX_API nx_status nx_optimizer_zero_grad(nx_optimizer opt);
NX_API nx_status nx_optimizer_set_lr(nx_optimizer opt, double lr);
NX_API nx_status nx_optimizer_get_lr(nx_optimizer opt, double* out);
/* Optimizer state (moments, step count) as SafeTensors; save is atomic (see nx_safetensors_save).
 * Load is all or nothing: it refuses moments that are not floating or not of their parameter's
 * shape, step counts that are not non-negative integers, and entries the optimizer lacks. */
NX_API nx_status nx_optimizer_save(nx_optimizer opt, const char* path);
NX_API nx_status nx_optimizer_load(nx_optimizer opt, const char* path);
NX_API void nx_optimizer_free(nx_optimizer opt);
/* Scales the gradients of params so that their global L2 norm is at most max_norm; writes the
 * norm before clipping to *total_norm (may be NULL). The norm and the scale are computed and
 * applied on the gradients' device: with total_norm NULL the call does not wait for the GPU. */
NX_API nx_status nx_clip_grad_norm(double* total_norm, const nx_tensor* params, size_t n, double max_norm,
                                   nx_stream stream);
/* Learning-rate schedules (pure functions of the step). */
NX_API double nx_lr_step(double base_lr, int64_t step, int64_t step_size, double gamma);
NX_API double nx_lr_cosine_warmup(double base_lr, int64_t step, int64_t warmup_steps, int64_t total_steps,
                                  double min_lr);
/* Dynamic loss scaling for f16 training, with torch.cuda.amp.GradScaler's semantics. Small f16
 * gradients flush to zero; scaling the loss by S before backward scales every gradient by S, the
 * scaler divides them by S again before the optimizer step and skips the step when a gradient is
 * Inf or NaN (S was too large), multiplying S by backoff_factor; after growth_interval steps in a
 * row without Inf/NaN it multiplies S by growth_factor. One iteration:
 *   nx_grad_scaler_scale(&scaled, scaler, loss, stream);  nx_backward(scaled, NULL, NULL, stream);
 *   nx_grad_scaler_unscale(scaler, opt, stream);  (optional: to clip or read the true gradients)
 *   nx_grad_scaler_step(&stepped, scaler, opt, stream);  nx_grad_scaler_update(scaler);
 * Several optimizers may share a scaler (each unscaled and stepped once per iteration, one update
 * at the end). The scale is kept in f32, as PyTorch keeps it.
 * Inside a captured step (nx_plan_create) the whole iteration, update included, belongs in the
 * step function: the scale is refilled before each replay, the optimizer (Adam, AdamW, SGD) skips
 * on the device when a gradient was Inf/NaN, and the update runs after each replay
 * (nx_grad_scaler_step then takes stepped = NULL). */
typedef struct nx_grad_scaler_s* nx_grad_scaler;
typedef struct {
  uint32_t struct_size;    /* sizeof(nx_grad_scaler_options) */
  double init_scale;       /* > 0 and finite in f32 */
  double growth_factor;    /* > 1 */
  double backoff_factor;   /* in (0, 1) */
  int64_t growth_interval; /* >= 1: clean steps in a row before the scale grows */
  bool enabled;            /* false: scale returns the loss, unscale and update do nothing, step
                              just steps, the scale reads 1 */
} nx_grad_scaler_options;
#define NX_GRAD_SCALER_OPTIONS_DEFAULT {sizeof(nx_grad_scaler_options), 65536.0, 2.0, 0.5, 2000, true}
NX_API nx_status nx_grad_scaler_create(nx_grad_scaler* out, const nx_grad_scaler_options* options);
/* loss times the scale, recorded, so that backward from it gives scaled gradients (when disabled,
 * a new handle to loss itself). loss is a floating-point tensor. */
NX_API nx_status nx_grad_scaler_scale(nx_tensor* out, nx_grad_scaler scaler, nx_tensor loss, nx_stream stream);
/* Divides the gradient of every parameter of opt by the scale (each gradient is replaced by its
 * unscaled copy: a handle to the gradient taken before keeps the scaled values) and notes whether
 * any was Inf or NaN, without a host synchronization. Optional (step unscales when it was not
 * done); at most once per optimizer between updates and not after its step: NX_ERR_STATE. */
NX_API nx_status nx_grad_scaler_unscale(nx_grad_scaler scaler, nx_optimizer opt, nx_stream stream);
/* Unscales opt's gradients unless nx_grad_scaler_unscale did, then runs opt's step unless a
 * gradient was Inf or NaN; writes whether it stepped to *stepped (may be NULL; must be NULL inside a
 * captured step: NX_ERR_STATE). One host synchronization per device of the gradients (none inside
 * a captured step). Once per optimizer between updates; NX_ERR_STATE
 * also when no parameter of opt has a gradient (nothing could be checked). */
NX_API nx_status nx_grad_scaler_step(bool* stepped, nx_grad_scaler scaler, nx_optimizer opt, nx_stream stream);
/* Ends the iteration: if a step since the last update found Inf/NaN, scale *= backoff_factor and
 * the count of clean steps restarts; else the count grows, and when it reaches growth_interval,
 * scale *= growth_factor (kept when that overflows f32) and the count restarts. NX_ERR_STATE when
 * no optimizer was unscaled since the last update. */
NX_API nx_status nx_grad_scaler_update(nx_grad_scaler scaler);
/* The current scale (1 when disabled). */
NX_API nx_status nx_grad_scaler_get_scale(nx_grad_scaler scaler, double* out);
NX_API void nx_grad_scaler_free(nx_grad_scaler scaler);

/* ---------------------------------------------------------------- text */
typedef struct nx_tokenizer_s* nx_tokenizer;
/* Byte-level tokenizer: 256 tokens, one per byte. */
NX_API nx_status nx_tokenizer_bytes_create(nx_tokenizer* out);
/* Byte-pair encoding learned from len bytes of text up to vocab_size tokens (>= 256); merges
 * that would pass nx_tokenizer_load's bounds are not learned, so every result loads. */
NX_API nx_status nx_tokenizer_bpe_train(nx_tokenizer* out, const char* text, size_t len, int64_t vocab_size);
/* Loads a file written by nx_tokenizer_save; anything else (junk in a number, extra lines, a
 * piece over 64 KiB, pieces over 64 MiB in all, over 2^20 merges) gives NX_ERR_IO. */
NX_API nx_status nx_tokenizer_load(nx_tokenizer* out, const char* path);
/* Atomic, as nx_safetensors_save. */
NX_API nx_status nx_tokenizer_save(nx_tokenizer tok, const char* path);
NX_API nx_status nx_tokenizer_vocab_size(nx_tokenizer tok, int64_t* out);
/* Encodes len bytes into a NX_I64 CPU tensor of token ids (1-d). */
NX_API nx_status nx_tokenizer_encode(nx_tensor* out, nx_tokenizer tok, const char* text, size_t len);
/* Decodes n ids into buf (capacity bytes, not NUL-terminated); *len receives the byte count.
 * With a too small buffer: NX_ERR_INVALID_ARGUMENT and *len holds the size needed. */
NX_API nx_status nx_tokenizer_decode(nx_tokenizer tok, const int64_t* ids, size_t n, char* buf, size_t capacity,
                                     size_t* len);
NX_API void nx_tokenizer_free(nx_tokenizer tok);
/* Shuffled (input, target) windows of a 1-d token tensor: target is input shifted by one. */
typedef struct nx_text_loader_s* nx_text_loader;
NX_API nx_status nx_text_loader_create(nx_text_loader* out, nx_tensor tokens, int64_t batch, int64_t seq,
                                       uint64_t seed);
/* Next [batch, seq] NX_I64 inputs and targets on device. */
NX_API nx_status nx_text_loader_next(nx_tensor* inputs, nx_tensor* targets, nx_text_loader loader,
                                     nx_device device, nx_stream stream);
NX_API nx_status nx_text_loader_batches_per_epoch(nx_text_loader loader, int64_t* out);
NX_API void nx_text_loader_free(nx_text_loader loader);

/* ---------------------------------------------------------------- communication (nx_comm) */
/* Collectives between ranks, one rank per CUDA device, through NCCL; ranks may be processes (one
 * per GPU, the usual setup) or threads. Every rank calls the same collectives in the same order.
 * Without a GPU, or in a build without NCCL, the functions that make a communicator or its id
 * fail with NX_ERR_DEVICE. NCCL_NVLS_ENABLE is set to 0 before NCCL starts unless already set. */
typedef struct nx_comm_s* nx_comm;
#define NX_COMM_ID_BYTES 128
/* The bootstrap id of one communicator (NCCL's unique id), made by one rank, given to all. */
typedef struct {
  uint8_t bytes[NX_COMM_ID_BYTES];
} nx_comm_id;
/* A fresh id. The calling process runs NCCL's bootstrap listener and must stay alive until every
 * rank has called nx_comm_create. */
NX_API nx_status nx_comm_id_create(nx_comm_id* out);
/* The id as 2 * NX_COMM_ID_BYTES lowercase hex digits and a NUL in buf (e.g. for an environment
 * variable); *len receives the digit count. A too small buffer gives NX_ERR_INVALID_ARGUMENT. */
NX_API nx_status nx_comm_id_to_hex(const nx_comm_id* id, char* buf, size_t capacity, size_t* len);
NX_API nx_status nx_comm_id_from_hex(nx_comm_id* out, const char* hex);
/* Writes the id to path atomically (a temporary file, then rename), for ranks that share a file
 * system; load waits up to timeout_s seconds for the file to appear (NX_ERR_IO after that). */
NX_API nx_status nx_comm_id_save(const nx_comm_id* id, const char* path);
NX_API nx_status nx_comm_id_load(nx_comm_id* out, const char* path, double timeout_s);
/* Joins communicator id as rank (0 <= rank < size) on a CUDA device; blocks until all size ranks
 * have joined. Free with nx_comm_free. */
NX_API nx_status nx_comm_create(nx_comm* out, const nx_comm_id* id, int32_t rank, int32_t size, nx_device device);
/* nx_comm_create from the environment a launcher sets: NEXUS_RANK, NEXUS_WORLD_SIZE, the id as
 * hex in NEXUS_COMM_ID or in the file named by NEXUS_COMM_ID_FILE (waited for up to 60 s), and
 * the device cuda:NEXUS_LOCAL_RANK (default: NEXUS_RANK). */
NX_API nx_status nx_comm_create_from_env(nx_comm* out);
/* nx_comm_create under MPI (MPI_Init already called; rank 0 broadcasts the id over
 * MPI_COMM_WORLD; device cuda:(rank % device count)). Only in builds configured with
 * -DNEXUS_MPI=ON; otherwise NX_ERR_NOT_IMPLEMENTED. */
NX_API nx_status nx_comm_create_mpi(nx_comm* out);
NX_API nx_status nx_comm_rank(nx_comm comm, int32_t* out);
NX_API nx_status nx_comm_size(nx_comm comm, int32_t* out);
NX_API nx_status nx_comm_device(nx_comm comm, nx_device* out);
NX_API void nx_comm_free(nx_comm comm);
typedef enum {
  NX_REDUCE_SUM = 0,
  NX_REDUCE_AVG = 1,
  NX_REDUCE_MAX = 2,
  NX_REDUCE_MIN = 3,
  NX_REDUCE_PROD = 4
} nx_reduce_op;
/* The collectives move data and are not recorded by autodiff. They are enqueued on stream (a
 * stream of the communicator's device; NULL: its default stream) and return before they finish.
 * In-place ones (all_reduce, broadcast) need a contiguous tensor on the communicator's device
 * and bump its version counter. bool tensors cannot be reduced (NX_ERR_DTYPE). */
NX_API nx_status nx_comm_all_reduce(nx_tensor t, nx_comm comm, nx_reduce_op op, nx_stream stream);
/* Overwrites t on every rank with root's t (same shape and dtype on every rank). */
NX_API nx_status nx_comm_broadcast(nx_tensor t, nx_comm comm, int32_t root, nx_stream stream);
/* x [n * size, ...] reduced over the ranks; rank r receives block r, [n, ...]. */
NX_API nx_status nx_comm_reduce_scatter(nx_tensor* out, nx_tensor x, nx_comm comm, nx_reduce_op op,
                                        nx_stream stream);
/* x [n, ...] from every rank, concatenated in rank order: [n * size, ...]. */
NX_API nx_status nx_comm_all_gather(nx_tensor* out, nx_tensor x, nx_comm comm, nx_stream stream);

/* Data-parallel training: each rank runs the same model on its shard of the batch and the
 * gradients are averaged over the ranks, overlapped with backward. Create it once the parameters
 * exist: it broadcasts them from rank 0 (enqueued on stream) and groups them into buckets of
 * about bucket_bytes (0: 25 MiB). During nx_backward each bucket is all-reduced on an internal
 * stream as soon as its gradients are final. After every backward call nx_ddp_finish(stream):
 * work enqueued on stream afterwards (clipping, the optimizer step) sees the averaged
 * gradients. A parameter without a gradient on some rank counts as zero. One backward per
 * finish (accumulate micro-batches with a larger batch instead). The parameters may belong to
 * one nx_ddp at a time; free it with nx_ddp_free (the communicator may be freed first). */
typedef struct nx_ddp_s* nx_ddp;
NX_API nx_status nx_ddp_create(nx_ddp* out, const nx_tensor* params, size_t n, nx_comm comm, size_t bucket_bytes,
                               nx_stream stream);
NX_API nx_status nx_ddp_finish(nx_ddp ddp, nx_stream stream);
NX_API nx_status nx_ddp_bucket_count(nx_ddp ddp, size_t* out);
NX_API void nx_ddp_free(nx_ddp ddp);
/* Shards a text loader for data parallelism: with the same tokens, batch, seq and seed on every
 * rank, rank r of world receives rows [r * batch, (r + 1) * batch) of the batch of batch * world
 * windows one loader would give, so world ranks together see exactly what one process with
 * world times the batch sees. */
NX_API nx_status nx_text_loader_shard(nx_text_loader loader, int32_t rank, int32_t world);

/* ---------------------------------------------------------------- compiled steps (1.3.0)
 * Trace -> compile -> replay (docs/compiler.md). A plan wraps a step function: fn computes
 * noutputs tensors (the loss...) from ninputs tensors (a batch) through the C API, including
 * nx_backward and nx_optimizer_step. nx_plan_run calls it with the plan's copies of the inputs:
 *  - a new input signature (shapes, dtypes, device) runs fn eagerly the first time, so that the
 *    state its steps update (gradients, optimizer moments) exists;
 *  - the second time fn runs once more while every kernel it launches is recorded; the record is
 *    compiled: dead kernels removed, every temporary placed in one arena by liveness, and on a
 *    GPU the whole step captured as one CUDA graph (options.cuda_graph);
 *  - later calls replay the record: the inputs are copied in, optimizer step counts advance, the
 *    random generator advances as the eager step would advance it, learning rates, bias
 *    corrections and where each random draw (dropout) starts are written to device memory, and
 *    the kernels run with no dispatch, autodiff or allocation. fn is not called. Results equal an
 *    eager step bit for bit with the same inputs, state and seed (in deterministic mode on a GPU).
 * Host data that fn reads (a tensor made from a C array inside fn) is frozen into the plan as a
 * constant: pass what changes as inputs. A step whose output depends on host code is refused with
 * NX_ERR_STATE naming the call: reading a value (nx_tensor_item, nx_tensor_copy_to_host,
 * nx_tensor_data_ptr) inside fn, nx_random_set_seed inside fn, collectives and nx_ddp, an index
 * computed inside fn. nx_checkpoint segments inside fn are captured like any other kernels.
 * A compiled step is captured again (nx_plan_stats.recaptures) when something it assumed
 * changed: a module's train/eval mode, a tensor's requires_grad, a parameter moved or its
 * gradient replaced, loaded optimizer state, the deterministic or TF32 setting, autocast or grad
 * mode, an SGD learning rate (Adam's may change every step). At most max_plans signatures stay
 * compiled (least recently used dropped). A plan is used by one thread at a time (another
 * thread's nx_plan_run fails with NX_ERR_STATE). It keeps the tensors and optimizers its
 * steps use alive until nx_plan_free. */
typedef struct nx_plan_s* nx_plan;
typedef nx_status (*nx_plan_fn)(nx_tensor* outputs, size_t noutputs, const nx_tensor* inputs, size_t ninputs,
                                void* user_data);
typedef struct {
  size_t struct_size; /* sizeof(nx_plan_options) */
  int64_t max_plans;  /* signatures kept compiled (>= 1) */
  bool cuda_graph;    /* replay a GPU plan as one CUDA graph (else as its kernel list) */
  bool fuse;          /* fold runs of elementwise ops into one kernel each (bit-identical) */
  /* 1.4 (appended; without it: 0). Bytes the compiled steps may hold together (their arenas,
   * their own input, gradient and output buffers, constants): after a capture, the least recently
   * used steps are dropped until the total fits; the step just compiled is always kept. 0: no
   * bound (max_plans still applies). */
  int64_t max_bytes;
} nx_plan_options;
#define NX_PLAN_OPTIONS_DEFAULT {sizeof(nx_plan_options), 4, true, true, 0}
NX_API nx_status nx_plan_create(nx_plan* out, nx_plan_fn fn, void* user_data, size_t noutputs,
                                const nx_plan_options* options /* NULL: defaults */);
/* Runs the step on inputs (all on one device) and writes noutputs new handles (owned by the
 * caller; on a replay, copies of the plan's outputs). Work is enqueued on stream. */
NX_API nx_status nx_plan_run(nx_plan plan, nx_tensor* outputs, size_t noutputs, const nx_tensor* inputs,
                             size_t ninputs, nx_stream stream);
typedef struct {
  size_t struct_size;
  int64_t eager_runs, captures, recaptures, replays;
  /* Of the step compiled last: kernels replayed, kernels found dead and removed, uploads of
   * constants; the arena holding every temporary, the step's allocations at their eager peak
   * (the arena's counterpart), and buffers alive after the step (gradients, outputs). */
  int64_t ops, ops_eliminated, uploads;
  int64_t arena_bytes, eager_peak_bytes, kept_bytes;
  bool cuda_graph;
  /* elementwise ops folded into fused kernels, and those kernels */
  int64_t fused_ops, fused_groups;
  /* 1.4 (appended; a 1.3 struct_size gets the fields above): bytes all the plan's compiled steps
   * hold now, and compiled steps dropped so far (by max_plans or max_bytes) */
  int64_t held_bytes, evictions;
} nx_plan_stats;
NX_API nx_status nx_plan_get_stats(nx_plan plan, nx_plan_stats* out);
typedef enum { NX_PLAN_TABLE = 0, NX_PLAN_DOT = 1 } nx_plan_format;
/* The step compiled last: a table (op, the C call that launched it, buffers: written or read,
 * arena offset or kept buffer, dtype and shape; on the CPU each op's measured time and the times
 * summed by op; before it, the arena's fullest op and its largest
 * buffers with the op that made each) or Graphviz DOT (ops as nodes, an edge from the
 * op that last wrote a buffer to each op reading it). Valid until the next call on plan. */
NX_API nx_status nx_plan_to_string(nx_plan plan, nx_plan_format format, const char** out);
NX_API void nx_plan_free(nx_plan plan);

/* ---------------------------------------------------------------- profiler (1.5.0) */
/* While a profiler runs, every C API call (an "api" event), every VJP that nx_backward runs
 * ("backward"), every kernel launched on a device ("kernel": the kernel, its op and the shapes
 * of its operands) and every user range ("region") is recorded from every thread, with its host
 * wall time, the bytes it allocated and, on CUDA, its device time from a pair of CUDA events. A
 * compiled plan's replay shows as its nx_plan_run call with the plan's kernels inside on the CPU,
 * or one "CUDA graph" kernel event (the replayed graph, timed as one) on a GPU.
 * With nvtx, every event is also an NVTX range, which Nsight Systems shows on its timeline;
 * NEXUS_NVTX=1 in the environment emits the NVTX ranges without recording anything (for a
 * program run under nsys whose code does not start the profiler).
 * When no profiler runs and NEXUS_NVTX is unset, the hooks cost one relaxed atomic load each
 * (bench/profiler_bench.c measures it against a GPT training step). */
typedef struct nx_profile_s* nx_profile;
typedef struct {
  uint32_t struct_size; /* sizeof(nx_profiler_options) */
  bool device_time;     /* time each CUDA kernel with CUDA events (resolved by nx_profiler_stop) */
  bool nvtx;            /* NVTX ranges around every event (CUDA builds; ignored otherwise) */
  bool memory;          /* a memory timeline: every allocation and release, with the bytes in use */
  bool shapes;          /* the operand shapes of every kernel event */
} nx_profiler_options;
#define NX_PROFILER_OPTIONS_DEFAULT {sizeof(nx_profiler_options), true, true, true, true}
/* Starts recording (options NULL: the defaults). One profiler per process: NX_ERR_STATE while
 * one runs. */
NX_API nx_status nx_profiler_start(const nx_profiler_options* options);
/* Stops recording and hands the profile to *out (free it with nx_profile_free); waits for the
 * device work it timed. NX_ERR_STATE when no profiler runs. Events still open (a range not
 * popped, a call of another thread in progress) end at the stop. */
NX_API nx_status nx_profiler_stop(nx_profile* out);
/* Whether a profiler records now. */
NX_API bool nx_profiler_enabled(void);
/* A user-named region around the calls that follow on this thread, until the matching pop
 * (an NVTX range too). name: a non-empty string, copied. Without a running profiler (and
 * without NEXUS_NVTX) both do nothing; a pop with no range open on this thread is NX_ERR_STATE. */
NX_API nx_status nx_profiler_range_push(const char* name);
NX_API nx_status nx_profiler_range_pop(void);

typedef enum {
  NX_PROFILE_REGION = 0,   /* nx_profiler_range_push */
  NX_PROFILE_API = 1,      /* a C API call */
  NX_PROFILE_BACKWARD = 2, /* one VJP of nx_backward (its node's name, MatmulBackward) */
  NX_PROFILE_KERNEL = 3    /* a kernel on a device (matmul, binary.add, CUDA graph) */
} nx_profile_event_kind;
/* One event; times in microseconds from nx_profiler_start. The strings belong to the profile. */
typedef struct {
  uint32_t struct_size; /* sizeof(nx_profile_event) */
  const char* name;
  const char* shapes;   /* kernels: "f32[8,64] f32[64,32]" (destination first); else "" */
  nx_profile_event_kind kind;
  nx_device device;     /* kernels: their device; other events: {NX_CPU, 0} */
  int32_t thread;       /* 0 for the first thread seen, 1 for the next... */
  int32_t depth;        /* events open around it on its thread */
  int64_t parent;       /* index of the enclosing event, -1 at the top */
  double start_us, duration_us;           /* host wall time */
  double device_start_us, device_duration_us; /* CUDA kernels timed on the device; else -1 */
  int64_t bytes_allocated; /* by the event and the events inside it */
} nx_profile_event;
NX_API nx_status nx_profile_event_count(nx_profile profile, int64_t* out);
/* Events in the order they began; index in [0, count). */
NX_API nx_status nx_profile_get_event(nx_profile profile, int64_t index, nx_profile_event* out);
/* The memory timeline (options.memory): one sample per allocation or release on a device. */
typedef struct {
  uint32_t struct_size; /* sizeof(nx_profile_memory_sample) */
  double time_us;
  nx_device device;
  int64_t delta;     /* bytes: positive allocated, negative released */
  int64_t allocated; /* bytes in use on the device after it (on the CPU: since the start) */
  int64_t reserved;  /* bytes the caching allocator holds from the driver (CPU: = allocated) */
  int64_t event;     /* the event it happened in, -1 outside any */
} nx_profile_memory_sample;
NX_API nx_status nx_profile_memory_count(nx_profile profile, int64_t* out);
NX_API nx_status nx_profile_get_memory_sample(nx_profile profile, int64_t index, nx_profile_memory_sample* out);
typedef enum {
  NX_PROFILE_SORT_TOTAL = 0,  /* host time including the events inside */
  NX_PROFILE_SORT_SELF = 1,   /* host time less the events inside */
  NX_PROFILE_SORT_DEVICE = 2, /* device time of the kernels inside */
  NX_PROFILE_SORT_CALLS = 3
} nx_profile_sort;
/* A table of the events grouped by kind and name (torch.profiler's key_averages().table()):
 * calls, total, self and average host time, device time, bytes allocated, sorted descending by
 * sort_by; row_limit rows at most (0: all), then the totals. A string for nx_string_free. */
NX_API nx_status nx_profile_summary(nx_profile profile, nx_profile_sort sort_by, int64_t row_limit, char** out);
/* Writes the profile as a Chrome trace (JSON; chrome://tracing, Perfetto): host events per
 * thread, CUDA kernels on a track per device, the memory timeline as counters. Atomic (a
 * temporary file renamed). */
NX_API nx_status nx_profile_save_chrome_trace(nx_profile profile, const char* path);
NX_API void nx_profile_free(nx_profile profile);

#ifdef __cplusplus
}
#endif

#endif /* NEXUS_H */
