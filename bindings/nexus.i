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
#include "nexus.h"
%}

/* nexus.h defines NX_API as a visibility attribute, which SWIG need not see. */
#define __attribute__(x)
%include <stdint.i>

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

/* The version macros become module constants; DLPack's implementation macros do not. */
%ignore DLPACK_DLPACK_H_;
%ignore DLPACK_VERSION;
%ignore DLPACK_ABI_VERSION;

#if defined(SWIGPYTHON)
%include "python/nexus_python.i"
#elif defined(SWIGJAVA)
%include "java/nexus_java.i"
#endif

%include "nexus.h"
