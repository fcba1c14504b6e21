/* nexus.i - the SWIG 4 interface of NexusGrad, for Python and Java.
 *
 * It wraps include/nexus.h itself (%include "nexus.h" below): there is no hand-written list of
 * functions. What makes the C conventions natural in each language is done by typemaps that
 * match the header's parameter patterns (out-handles, counted arrays, status returns...):
 *   - bindings/python/nexus_python.i  (module nexusgrad._nexus)
 *   - bindings/java/nexus_java.i      (package org.nexusgrad, class Nexus)
 * The handle structs are declared to SWIG as empty structs with a destructor that calls the
 * matching nx_<type>_free, so a handle returned to the host language is freed by its garbage
 * collector (Python) or by close()/the cleaner (Java) exactly once. The nx_<type>_free
 * functions themselves are not exposed: a second, explicit free would race the collector.
 */
%module _nexus

%{
#include <stdint.h>
#include <stdlib.h>
#include "nexus.h"

/* Tensor arrays that share one count parameter (nx_adam_step_multi's params, grads and exp_avgs
 * share exp_avg_sqs's n; nx_jvp's inputs share tangents' ninputs): each is converted into an
 * array that carries its own length in the slot before the first element, so that the group's
 * check typemap can compare every length with the count (the host language's typemaps fill it). */
static nx_tensor* nx_counted_new(size_t n) {
  void** block = (void**)malloc(sizeof(void*) * (n + 1));
  if (!block) return NULL;
  block[0] = (void*)(uintptr_t)n;
  return (nx_tensor*)(block + 1);
}
static size_t nx_counted_len(const nx_tensor* arr) { return (size_t)(uintptr_t)((void* const*)arr)[-1]; }
static void nx_counted_free(const nx_tensor* arr) {
  if (arr) free((void*)((void* const*)arr - 1));
}
%}

/* nexus.h defines NX_API as a visibility attribute, which SWIG need not see. */
#define __attribute__(x)
%include <stdint.i>

/* Language-specific typemaps and names (before the declarations they apply to). */
#if defined(SWIGPYTHON)
%include "python/nexus_python.i"
#elif defined(SWIGJAVA)
%include "java/nexus_java.i"
#endif

/* ---------------------------------------------------------------- handles */
%define NX_HANDLE(STRUCT, FREE)
%nodefaultctor STRUCT;
%nodefaultdtor STRUCT;
struct STRUCT {};
%extend STRUCT {
  ~STRUCT() { FREE($self); }
}
%ignore FREE;
%enddef

NX_HANDLE(nx_tensor_s, nx_tensor_free)
NX_HANDLE(nx_stream_s, nx_stream_free)
NX_HANDLE(nx_event_s, nx_event_free)
NX_HANDLE(nx_safetensors_s, nx_safetensors_free)
NX_HANDLE(nx_graph_s, nx_graph_free)
NX_HANDLE(nx_module_s, nx_module_free)
NX_HANDLE(nx_optimizer_s, nx_optimizer_free)
NX_HANDLE(nx_tokenizer_s, nx_tokenizer_free)
NX_HANDLE(nx_text_loader_s, nx_text_loader_free)
NX_HANDLE(nx_comm_s, nx_comm_free)
NX_HANDLE(nx_ddp_s, nx_ddp_free)
NX_HANDLE(nx_grad_scaler_s, nx_grad_scaler_free)
NX_HANDLE(nx_plan_s, nx_plan_free)
NX_HANDLE(nx_profile_s, nx_profile_free)
/* Arrays of handles written by the engine are converted by the typemaps, which free them. */
%ignore nx_tensor_array_free;
/* Likewise strings (char** out: nx_tensor_to_string): the typemaps copy and free them. */
%ignore nx_string_free;

/* ---------------------------------------------------------------- versioned structs */
/* Structs whose first field is struct_size get a constructor that zero-fills them and sets it. */
%define NX_SIZED_STRUCT(STRUCT)
%extend STRUCT {
  STRUCT() {
    STRUCT* s = (STRUCT*)calloc(1, sizeof(STRUCT));
    if (s) s->struct_size = (uint32_t)sizeof(STRUCT);
    return s;
  }
}
%enddef
NX_SIZED_STRUCT(nx_cuda_memory_stats)
NX_SIZED_STRUCT(nx_attention_config)
NX_SIZED_STRUCT(nx_transformer_config)
NX_SIZED_STRUCT(nx_sample_config)
NX_SIZED_STRUCT(nx_plan_stats)
NX_SIZED_STRUCT(nx_profile_event)
NX_SIZED_STRUCT(nx_profile_memory_sample)
/* Options structs (rule 4 of nexus.h) get a constructor that fills them with their
 * NX_*_OPTIONS_DEFAULT macro, struct_size included: a host language only sets the fields it
 * changes, and passes None/null where NULL (the defaults) will do. */
%define NX_OPTIONS_STRUCT(STRUCT, DEFAULTS)
%extend STRUCT {
  STRUCT() {
    static const STRUCT defaults = DEFAULTS;
    STRUCT* s = (STRUCT*)malloc(sizeof(STRUCT));
    if (s) *s = defaults;
    return s;
  }
}
%enddef
NX_OPTIONS_STRUCT(nx_backward_options, NX_BACKWARD_OPTIONS_DEFAULT)
NX_OPTIONS_STRUCT(nx_graph_dump_options, NX_GRAPH_DUMP_OPTIONS_DEFAULT)
NX_OPTIONS_STRUCT(nx_sgd_options, NX_SGD_OPTIONS_DEFAULT)
NX_OPTIONS_STRUCT(nx_adam_options, NX_ADAM_OPTIONS_DEFAULT)
NX_OPTIONS_STRUCT(nx_grad_scaler_options, NX_GRAD_SCALER_OPTIONS_DEFAULT)
NX_OPTIONS_STRUCT(nx_plan_options, NX_PLAN_OPTIONS_DEFAULT)
NX_OPTIONS_STRUCT(nx_print_options, NX_PRINT_OPTIONS_DEFAULT)
NX_OPTIONS_STRUCT(nx_profiler_options, NX_PROFILER_OPTIONS_DEFAULT)
/* nx_device(type, index) */
%extend nx_device {
  nx_device(nx_device_type type, int32_t index) {
    nx_device* d = (nx_device*)calloc(1, sizeof(nx_device));
    if (d) {
      d->type = type;
      d->index = index;
    }
    return d;
  }
}

%include "nexus.h"

#ifdef SWIGPYTHON
/* nx_grad_scaler_step with stepped = NULL, for GradScaler.step(report=False), which works inside
 * nexusgrad.compile (the stepped flag is refused there). Python plumbing, not part of nexus.h. */
%{
static nx_status nx_py_grad_scaler_step_on_device(nx_grad_scaler scaler, nx_optimizer opt, nx_stream stream) {
  return nx_grad_scaler_step(NULL, scaler, opt, stream);
}
%}
nx_status nx_py_grad_scaler_step_on_device(nx_grad_scaler scaler, nx_optimizer opt, nx_stream stream);
#endif
