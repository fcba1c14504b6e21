/* Java typemaps for nexus.i: package org.nexusgrad, functions as static methods of class Nexus
 * (nx_ prefix dropped: Nexus.matmul(a, b, null)), handles as AutoCloseable classes (Tensor,
 * Stream, Event, SafeTensors, Graph, Layer (nx_module), Optimizer, Tokenizer, TextLoader, Plan...).
 *
 *   - A failing nx_status throws org.nexusgrad.NexusException (unchecked) whose status() is the
 *     Status enum value and whose message is nx_last_error_message().
 *   - Out-parameters become the return value: a function whose `T* out` is its result returns T
 *     (Tensor, long, boolean, double, DType, Device, String...). Which functions have one is read
 *     from nexus.h by CMake (bindings/java/CMakeLists.txt writes nexus_java_returns.i), so the
 *     header stays the only list of functions.
 *   - Every handle returned is owned by the Java object: close() (try-with-resources) frees it
 *     once; a handle never closed is freed by the finalizer. Strings the engine allocates
 *     (nx_tensor_to_string; Tensor.toString() calls it) are copied and freed by the typemaps.
 *   - Counted arrays are long[] (shapes, axes) and Tensor[]; bytes in and out are byte[]. Arrays
 *     that share one count (nx_adam_step_multi's four, nx_jvp's two) are one Tensor[] each, of
 *     equal lengths (IllegalArgumentException otherwise).
 *   - Options structs (BackwardOptions, SgdOptions, AdamOptions, PrintOptions...) are classes
 *     whose constructor fills in the NX_*_OPTIONS_DEFAULT values, struct_size included; null
 *     passes NULL (defaults).
 * Not wrapped for Java: nx_checkpoint and nx_plan_create (C callbacks), nx_tensor_data_ptr (raw
 * address), and the DLPack functions (C structs for other C libraries). The other nx_plan_*
 * functions are wrapped like the rest (Plan, PlanStats, PlanFormat, Nexus.plan_run...), though
 * without nx_plan_create Java cannot make a plan yet.
 */

%{
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void nx_java_throw(JNIEnv* jenv, nx_status status) {
  jclass cls;
  jmethodID ctor;
  jstring msg;
  jobject ex;
  if ((*jenv)->ExceptionCheck(jenv)) return;
  cls = (*jenv)->FindClass(jenv, "org/nexusgrad/NexusException");
  if (!cls) return; /* NoClassDefFoundError is pending */
  ctor = (*jenv)->GetMethodID(jenv, cls, "<init>", "(ILjava/lang/String;)V");
  if (!ctor) return;
  msg = (*jenv)->NewStringUTF(jenv, nx_last_error_message());
  if (!msg) return;
  ex = (*jenv)->NewObject(jenv, cls, ctor, (jint)status, msg);
  if (ex) (*jenv)->Throw(jenv, (jthrowable)ex);
}

static void nx_java_throw_arg(JNIEnv* jenv, const char* what) {
  jclass cls = (*jenv)->FindClass(jenv, "java/lang/IllegalArgumentException");
  if (cls) (*jenv)->ThrowNew(jenv, cls, what);
}
%}

%pragma(java) jniclasscode = %{
  static {
    NativeLibrary.load();
  }
%}
%pragma(java) moduleclassmodifiers = "public final class"
%pragma(java) modulecode = %{
  private Nexus() {}

  /** The CPU device. */
  public static Device cpu() { return new Device(DeviceType.CPU, 0); }

  /** CUDA device i. */
  public static Device cuda(int i) { return new Device(DeviceType.CUDA, i); }

  /** A tensor holding a copy of data (row-major) with the given shape, float32. */
  public static Tensor tensor(float[] data, long[] shape, Device device) {
    java.nio.ByteBuffer b = java.nio.ByteBuffer.allocate(4 * data.length).order(java.nio.ByteOrder.LITTLE_ENDIAN);
    b.asFloatBuffer().put(data);
    return tensor_from_data(b.array(), shape, DType.F32, device, null);
  }

  /** A tensor holding a copy of data (row-major) with the given shape, float64. */
  public static Tensor tensor(double[] data, long[] shape, Device device) {
    java.nio.ByteBuffer b = java.nio.ByteBuffer.allocate(8 * data.length).order(java.nio.ByteOrder.LITTLE_ENDIAN);
    b.asDoubleBuffer().put(data);
    return tensor_from_data(b.array(), shape, DType.F64, device, null);
  }

  /** A tensor holding a copy of data (row-major) with the given shape, int64. */
  public static Tensor tensor(long[] data, long[] shape, Device device) {
    java.nio.ByteBuffer b = java.nio.ByteBuffer.allocate(8 * data.length).order(java.nio.ByteOrder.LITTLE_ENDIAN);
    b.asLongBuffer().put(data);
    return tensor_from_data(b.array(), shape, DType.I64, device, null);
  }

  /** The elements of t (any dtype, any device) converted to float32, row-major. */
  public static float[] toFloatArray(Tensor t) {
    try (Tensor f = cast(t, DType.F32, null)) {
      byte[] raw = new byte[(int) (4 * tensor_numel(f))];
      tensor_copy_to_host(f, raw, null);
      float[] out = new float[raw.length / 4];
      java.nio.ByteBuffer.wrap(raw).order(java.nio.ByteOrder.LITTLE_ENDIAN).asFloatBuffer().get(out);
      return out;
    }
  }

  /** The elements of t converted to float64, row-major. */
  public static double[] toDoubleArray(Tensor t) {
    try (Tensor f = cast(t, DType.F64, null)) {
      byte[] raw = new byte[(int) (8 * tensor_numel(f))];
      tensor_copy_to_host(f, raw, null);
      double[] out = new double[raw.length / 8];
      java.nio.ByteBuffer.wrap(raw).order(java.nio.ByteOrder.LITTLE_ENDIAN).asDoubleBuffer().get(out);
      return out;
    }
  }
%}

/* Proper Java enums (Status, DType, DeviceType, Reduction) with the header's values as literals. */
%include "enums.swg"
%javaconst(1);

/* ---------------------------------------------------------------- names */
%rename("%(strip:[nx_])s", %$isfunction) "";
%rename("%(strip:[NX_])s", %$isenumitem) "";
%rename(Tensor) nx_tensor_s;
%rename(Stream) nx_stream_s;
%rename(Event) nx_event_s;
%rename(SafeTensors) nx_safetensors_s;
%rename(Graph) nx_graph_s;
%rename(Layer) nx_module_s; /* java.lang.Module would clash */
%rename(Optimizer) nx_optimizer_s;
%rename(Tokenizer) nx_tokenizer_s;
%rename(TextLoader) nx_text_loader_s;
%rename(Comm) nx_comm_s;
%rename(DataParallel) nx_ddp_s;
%rename(GradScaler) nx_grad_scaler_s;
%rename(Plan) nx_plan_s;
%rename(Profile) nx_profile_s;
%rename(CommId) nx_comm_id;
%rename(Status) nx_status;
%rename(DType) nx_dtype;
%rename(DeviceType) nx_device_type;
%rename(Device) nx_device;
%rename(Reduction) nx_reduction;
%rename(CudaMemoryStats) nx_cuda_memory_stats;
%rename(AttentionConfig) nx_attention_config;
%rename(TransformerConfig) nx_transformer_config;
%rename(SampleConfig) nx_sample_config;
%rename(BackwardOptions) nx_backward_options;
%rename(SgdOptions) nx_sgd_options;
%rename(AdamOptions) nx_adam_options;
%rename(GradScalerOptions) nx_grad_scaler_options;
%rename(PlanOptions) nx_plan_options;
%rename(PlanStats) nx_plan_stats;
%rename(PlanFormat) nx_plan_format;
%rename(ProfilerOptions) nx_profiler_options;
%rename(ProfileSort) nx_profile_sort;
%rename(ProfileEventKind) nx_profile_event_kind;
%rename(PrintOptions) nx_print_options;
%rename(PrintSciMode) nx_print_sci_mode;
%rename(HandleType) nx_handle_type;
%rename(ReduceOp) nx_reduce_op;

/* Not for Java (see the top of this file). */
%ignore nx_checkpoint;
%ignore nx_checkpoint_fn;
%ignore nx_plan_create;
%ignore nx_plan_fn;
%ignore nx_tensor_data_ptr;
/* A profile's events and memory samples point into the profile: Java reads the profile through
 * nx_profile_summary, nx_profile_save_chrome_trace and the counts. */
%ignore nx_profile_get_event;
%ignore nx_profile_get_memory_sample;
%ignore nx_profile_event;
%ignore nx_profile_memory_sample;
%ignore nx_tensor_to_dlpack;
%ignore nx_tensor_to_dlpack_versioned;
%ignore nx_tensor_from_dlpack;
%ignore nx_tensor_from_dlpack_versioned;
%ignore nx_dl_data_type_code;
%ignore NX_DL_INT; %ignore NX_DL_UINT; %ignore NX_DL_FLOAT; %ignore NX_DL_OPAQUE_HANDLE; %ignore NX_DL_BFLOAT;
%ignore NX_DL_COMPLEX; %ignore NX_DL_BOOL;
%ignore nx_dl_device;
%ignore nx_dl_data_type;
%ignore nx_dl_tensor;
%ignore nx_dl_managed_tensor_s;
%ignore nx_dl_managed_tensor;
%ignore nx_dl_version;
%ignore nx_dl_managed_tensor_versioned_s;
%ignore nx_dl_managed_tensor_versioned;
%ignore NX_DL_MAJOR_VERSION; %ignore NX_DL_MINOR_VERSION; %ignore NX_DL_FLAG_READ_ONLY; %ignore NX_DL_FLAG_IS_COPIED;

/* ---------------------------------------------------------------- handles: AutoCloseable */
%define NX_JAVA_HANDLE(STRUCT, JNAME)
%typemap(javainterfaces) struct STRUCT "AutoCloseable"
%typemap(javacode) struct STRUCT %{
  /** Frees the handle now (idempotent); the object must not be used afterwards. */
  @Override
  public void close() {
    delete();
  }

  /** Whether close() has been called. */
  public boolean isClosed() {
    return swigCPtr == 0;
  }

  static long[] cPtrs(JNAME[] xs) {
    long[] p = new long[xs.length];
    for (int i = 0; i < xs.length; ++i) p[i] = getCPtr(xs[i]);
    return p;
  }
%}
%enddef
NX_JAVA_HANDLE(nx_tensor_s, Tensor)
NX_JAVA_HANDLE(nx_stream_s, Stream)
NX_JAVA_HANDLE(nx_event_s, Event)
NX_JAVA_HANDLE(nx_safetensors_s, SafeTensors)
NX_JAVA_HANDLE(nx_graph_s, Graph)
NX_JAVA_HANDLE(nx_module_s, Layer)
NX_JAVA_HANDLE(nx_optimizer_s, Optimizer)
NX_JAVA_HANDLE(nx_tokenizer_s, Tokenizer)
NX_JAVA_HANDLE(nx_text_loader_s, TextLoader)
NX_JAVA_HANDLE(nx_comm_s, Comm)
NX_JAVA_HANDLE(nx_ddp_s, DataParallel)
NX_JAVA_HANDLE(nx_grad_scaler_s, GradScaler)
NX_JAVA_HANDLE(nx_plan_s, Plan)
NX_JAVA_HANDLE(nx_profile_s, Profile)

/* Tensor conveniences (the C functions stay available as Nexus.tensor_*). */
%typemap(javacode) struct nx_tensor_s %{
  @Override
  public void close() {
    delete();
  }

  public boolean isClosed() {
    return swigCPtr == 0;
  }

  static long[] cPtrs(Tensor[] xs) {
    long[] p = new long[xs.length];
    for (int i = 0; i < xs.length; ++i) p[i] = getCPtr(xs[i]);
    return p;
  }

  static Tensor[] wrapAll(long[] ps) {
    Tensor[] out = new Tensor[ps.length];
    for (int i = 0; i < ps.length; ++i) out[i] = ps[i] == 0 ? null : new Tensor(ps[i], true);
    return out;
  }

  /** The dimensions. */
  public long[] shape() { return Nexus.tensor_shape(this); }
  public DType dtype() { return Nexus.tensor_dtype(this); }
  public long numel() { return Nexus.tensor_numel(this); }
  /** The value of a one-element tensor. */
  public double item() { return Nexus.tensor_item(this, null); }
  /** The accumulated gradient (owned by the caller: close it), or null. */
  public Tensor grad() { return Nexus.tensor_grad(this); }
  public void setRequiresGrad(boolean on) { Nexus.tensor_set_requires_grad(this, on); }
  public boolean requiresGrad() { return Nexus.tensor_get_requires_grad(this); }

  /** The tensor as PyTorch's str() lays it out (nx_tensor_to_string with the default options):
   *  "tensor([[1., 2.],\n        [3., 4.]])". Never throws: a failure gives "Tensor(<message>)". */
  @Override
  public String toString() {
    if (swigCPtr == 0) return "Tensor(closed)";
    try {
      return Nexus.tensor_to_string(this, null);
    } catch (NexusException e) {
      return "Tensor(<" + e.getMessage() + ">)";
    }
  }
%}

/* ---------------------------------------------------------------- status -> NexusException */
%typemap(jni) nx_status "jint"
%typemap(jtype) nx_status "int"
%typemap(jstype) nx_status "void"
%typemap(javaout) nx_status { $jnicall; }
%typemap(out) nx_status {
  if ($1 != NX_OK) {
    nx_java_throw(jenv, $1);
    return $null;
  }
  $result = 0;
}
/* nx_status as an argument (nx_status_string) is the Status enum. */
%typemap(jni) nx_status status "jint"
%typemap(jtype) nx_status status "int"
%typemap(jstype) nx_status status "Status"
%typemap(javain) nx_status status "$javainput.swigValue()"
%typemap(in) nx_status status { $1 = (nx_status)$input; }

/* ---------------------------------------------------------------- out-parameters -> result */
/* The per-function return types (NX_JAVA_RET_* below) are applied by the generated file. */
%define NX_JAVA_RET_HANDLE(FUNC, JNAME)
%typemap(jni) nx_status FUNC "jlong"
%typemap(jtype) nx_status FUNC "long"
%typemap(jstype) nx_status FUNC "JNAME"
%typemap(javaout) nx_status FUNC {
    long swigRet = $jnicall;
    return swigRet == 0 ? null : new JNAME(swigRet, true);
  }
%enddef
%define NX_JAVA_RET_PRIM(FUNC, JNITYPE, JTYPE)
%typemap(jni) nx_status FUNC "JNITYPE"
%typemap(jtype) nx_status FUNC "JTYPE"
%typemap(jstype) nx_status FUNC "JTYPE"
%typemap(javaout) nx_status FUNC { return $jnicall; }
%enddef
%define NX_JAVA_RET_LONG(FUNC) NX_JAVA_RET_PRIM(FUNC, jlong, long) %enddef
%define NX_JAVA_RET_INT(FUNC) NX_JAVA_RET_PRIM(FUNC, jint, int) %enddef
%define NX_JAVA_RET_BOOL(FUNC) NX_JAVA_RET_PRIM(FUNC, jboolean, boolean) %enddef
%define NX_JAVA_RET_DOUBLE(FUNC) NX_JAVA_RET_PRIM(FUNC, jdouble, double) %enddef
%define NX_JAVA_RET_STRING(FUNC) NX_JAVA_RET_PRIM(FUNC, jstring, String) %enddef
%define NX_JAVA_RET_LONGS(FUNC) NX_JAVA_RET_PRIM(FUNC, jlongArray, long[]) %enddef
%define NX_JAVA_RET_DTYPE(FUNC)
%typemap(jni) nx_status FUNC "jint"
%typemap(jtype) nx_status FUNC "int"
%typemap(jstype) nx_status FUNC "DType"
%typemap(javaout) nx_status FUNC { return DType.swigToEnum($jnicall); }
%enddef
%define NX_JAVA_RET_TENSORS(FUNC)
%typemap(jni) nx_status FUNC "jlongArray"
%typemap(jtype) nx_status FUNC "long[]"
%typemap(jstype) nx_status FUNC "Tensor[]"
%typemap(javaout) nx_status FUNC { return Tensor.wrapAll($jnicall); }
%enddef

%define NX_JAVA_OUT_HANDLE(TYPE)
%typemap(in, numinputs=0) TYPE* out (TYPE tmp = NULL) { $1 = &tmp; }
%typemap(argout) TYPE* out { jresult = (jlong)(intptr_t)tmp$argnum; }
%enddef
NX_JAVA_OUT_HANDLE(nx_tensor)
NX_JAVA_OUT_HANDLE(nx_stream)
NX_JAVA_OUT_HANDLE(nx_event)
NX_JAVA_OUT_HANDLE(nx_safetensors)
NX_JAVA_OUT_HANDLE(nx_graph)
NX_JAVA_OUT_HANDLE(nx_module)
NX_JAVA_OUT_HANDLE(nx_optimizer)
NX_JAVA_OUT_HANDLE(nx_tokenizer)
NX_JAVA_OUT_HANDLE(nx_text_loader)
NX_JAVA_OUT_HANDLE(nx_comm)
NX_JAVA_OUT_HANDLE(nx_ddp)
NX_JAVA_OUT_HANDLE(nx_grad_scaler)
NX_JAVA_OUT_HANDLE(nx_plan)
NX_JAVA_OUT_HANDLE(nx_profile)

%define NX_JAVA_OUT_VALUE(TYPE, INIT, JNITYPE)
%typemap(in, numinputs=0) TYPE* out (TYPE tmp = INIT) { $1 = ($1_ltype)&tmp; }
%typemap(argout) TYPE* out { jresult = (JNITYPE)tmp$argnum; }
%enddef
NX_JAVA_OUT_VALUE(size_t, 0, jlong)
NX_JAVA_OUT_VALUE(int64_t, 0, jlong)
NX_JAVA_OUT_VALUE(uint64_t, 0, jlong)
NX_JAVA_OUT_VALUE(int32_t, 0, jint)
NX_JAVA_OUT_VALUE(bool, false, jboolean)
NX_JAVA_OUT_VALUE(double, 0.0, jdouble)
NX_JAVA_OUT_VALUE(nx_dtype, NX_F32, jint)
%apply double* out { double* total_norm };
%apply bool* out { bool* stepped };

%typemap(in, numinputs=0) const char** out (const char* tmp = NULL) { $1 = ($1_ltype)&tmp; }
%typemap(argout) const char** out { jresult = tmp$argnum ? (*jenv)->NewStringUTF(jenv, tmp$argnum) : NULL; }
/* Strings the engine allocates for the caller (nx_tensor_to_string): copied to a String, then
 * freed with nx_string_free (nx_string_free itself is not wrapped). The empty freearg keeps
 * `const char** out` (static or owned strings) from matching char**'s: SWIG would strip the const
 * and free them. */
%typemap(freearg) const char** out ""
%typemap(in, numinputs=0) char** out (char* tmp = NULL) { $1 = &tmp; }
%typemap(argout) char** out { jresult = tmp$argnum ? (*jenv)->NewStringUTF(jenv, tmp$argnum) : NULL; }
%typemap(freearg) char** out { nx_string_free(tmp$argnum); }

/* Structs returned through out-parameters are copied to the heap and owned by the Java object. */
%define NX_JAVA_OUT_STRUCT(TYPE, INIT)
%typemap(in, numinputs=0) TYPE* out (TYPE tmp) {
  memset(&tmp, 0, sizeof tmp);
  INIT;
  $1 = &tmp;
}
%typemap(argout) TYPE* out {
  TYPE* copy = (TYPE*)malloc(sizeof(TYPE));
  if (copy) *copy = tmp$argnum;
  jresult = (jlong)(intptr_t)copy;
}
%enddef
NX_JAVA_OUT_STRUCT(nx_device, tmp.type = NX_CPU)
NX_JAVA_OUT_STRUCT(nx_cuda_memory_stats, tmp.struct_size = (uint32_t)sizeof tmp)
NX_JAVA_OUT_STRUCT(nx_plan_stats, tmp.struct_size = sizeof tmp)
NX_JAVA_RET_HANDLE(nx_plan_get_stats, PlanStats)

/* nx_tensor_shape / nx_tensor_strides -> long[] (the rank is asked first) */
%typemap(in, numinputs=1) (nx_tensor t, int64_t* out, size_t capacity) (int64_t small[8], int64_t* buf = NULL, size_t nd = 0) {
  nx_status st;
  $1 = *(nx_tensor*)&$input;
  st = nx_tensor_ndim($1, &nd);
  if (st != NX_OK) {
    nx_java_throw(jenv, st);
    return $null;
  }
  buf = nd <= 8 ? small : (int64_t*)malloc(nd * sizeof(int64_t));
  if (!buf) {
    nx_java_throw_arg(jenv, "out of memory");
    return $null;
  }
  $2 = buf;
  $3 = nd;
}
%typemap(jni) (nx_tensor t, int64_t* out, size_t capacity) "jlong"
%typemap(jtype) (nx_tensor t, int64_t* out, size_t capacity) "long"
%typemap(jstype) (nx_tensor t, int64_t* out, size_t capacity) "Tensor"
%typemap(javain) (nx_tensor t, int64_t* out, size_t capacity) "Tensor.getCPtr($javainput)"
%typemap(argout) (nx_tensor t, int64_t* out, size_t capacity) {
  jresult = (*jenv)->NewLongArray(jenv, (jsize)nd$argnum);
  if (jresult) (*jenv)->SetLongArrayRegion(jenv, jresult, 0, (jsize)nd$argnum, (const jlong*)buf$argnum);
}
%typemap(freearg) (nx_tensor t, int64_t* out, size_t capacity) {
  if (buf$argnum && buf$argnum != small$argnum) free(buf$argnum);
}

/* ---------------------------------------------------------------- counted arrays in */
%typemap(jni) (const int64_t* shape, size_t ndim) "jlongArray"
%typemap(jtype) (const int64_t* shape, size_t ndim) "long[]"
%typemap(jstype) (const int64_t* shape, size_t ndim) "long[]"
%typemap(javain) (const int64_t* shape, size_t ndim) "$javainput"
%typemap(in) (const int64_t* shape, size_t ndim) {
  $1 = NULL;
  $2 = 0;
  if ($input) {
    $2 = (size_t)(*jenv)->GetArrayLength(jenv, $input);
    $1 = ($1_ltype)(*jenv)->GetLongArrayElements(jenv, $input, 0);
    if (!$1) return $null;
  }
}
%typemap(freearg) (const int64_t* shape, size_t ndim) {
  if ($input && $1) (*jenv)->ReleaseLongArrayElements(jenv, $input, (jlong*)$1, JNI_ABORT);
}
%apply (const int64_t* shape, size_t ndim) {
  (const int64_t* dims, size_t ndim),
  (const int64_t* axes, size_t naxes),
  (const int64_t* sizes, size_t nsizes),
  (const int64_t* ids, size_t n),
  (const int64_t* prompt, size_t n)
};

%define NX_JAVA_HANDLE_ARRAY(PARAMS, JNAME)
%typemap(jni) PARAMS "jlongArray"
%typemap(jtype) PARAMS "long[]"
%typemap(jstype) PARAMS "JNAME[]"
%typemap(javain, post="      java.lang.ref.Reference.reachabilityFence($javainput);") PARAMS "JNAME.cPtrs($javainput)"
%typemap(in) PARAMS (jlong* elems = NULL) {
  $1 = NULL;
  $2 = 0;
  if ($input) {
    $2 = (size_t)(*jenv)->GetArrayLength(jenv, $input);
    elems = (*jenv)->GetLongArrayElements(jenv, $input, 0);
    if (!elems) return $null;
    $1 = ($1_ltype)elems; /* jlong and pointers are both 64-bit here (checked at compile time) */
  }
}
%typemap(freearg) PARAMS {
  if (elems$argnum) (*jenv)->ReleaseLongArrayElements(jenv, $input, elems$argnum, JNI_ABORT);
}
%enddef
NX_JAVA_HANDLE_ARRAY((const nx_tensor* xs, size_t n), Tensor)
NX_JAVA_HANDLE_ARRAY((const nx_tensor* inputs, size_t ninputs), Tensor)
NX_JAVA_HANDLE_ARRAY((const nx_tensor* tensors, size_t n), Tensor)
NX_JAVA_HANDLE_ARRAY((const nx_tensor* params, size_t n), Tensor)
NX_JAVA_HANDLE_ARRAY((const nx_module* layers, size_t n), Layer)
%{
typedef char nx_java_pointer_is_64_bit[sizeof(void*) == sizeof(jlong) ? 1 : -1];

/* A copy of a Tensor[]'s handles as a counted array (nx_counted_new, bindings/nexus.i); null
 * counts as empty. NULL with an exception pending on failure. */
static nx_tensor* nx_java_counted_from(JNIEnv* jenv, jlongArray arr) {
  jsize n = arr ? (*jenv)->GetArrayLength(jenv, arr) : 0;
  nx_tensor* out = nx_counted_new((size_t)n);
  if (!out) {
    nx_java_throw_arg(jenv, "out of memory");
    return NULL;
  }
  if (n) (*jenv)->GetLongArrayRegion(jenv, arr, 0, n, (jlong*)out);
  return out;
}
%}

/* Tensor arrays that share one count (nx_jvp's inputs and tangents, nx_adam_step_multi's params,
 * grads, exp_avgs and exp_avg_sqs): each is a Tensor[] of its own, copied to a counted array; the
 * last one sets the count, and the group's check typemap compares the lengths (the Java wrapper
 * returns at once on failure, without freearg: the check frees the arrays itself). */
%define NX_JAVA_SHARED_COUNT_ARRAY(PARAM)
%typemap(jni) PARAM "jlongArray"
%typemap(jtype) PARAM "long[]"
%typemap(jstype) PARAM "Tensor[]"
%typemap(javain, post="      java.lang.ref.Reference.reachabilityFence($javainput);") PARAM "Tensor.cPtrs($javainput)"
%typemap(freearg) PARAM { nx_counted_free($1); }
%enddef
NX_JAVA_SHARED_COUNT_ARRAY(const nx_tensor* inputs)
NX_JAVA_SHARED_COUNT_ARRAY(const nx_tensor* params)
NX_JAVA_SHARED_COUNT_ARRAY(const nx_tensor* grads)
NX_JAVA_SHARED_COUNT_ARRAY(const nx_tensor* exp_avgs)
NX_JAVA_SHARED_COUNT_ARRAY((const nx_tensor* tangents, size_t ninputs))
NX_JAVA_SHARED_COUNT_ARRAY((const nx_tensor* exp_avg_sqs, size_t n))
%typemap(in) const nx_tensor* inputs, const nx_tensor* params, const nx_tensor* grads, const nx_tensor* exp_avgs {
  $1 = ($1_ltype)nx_java_counted_from(jenv, $input);
  if (!$1) return $null;
}
%typemap(in) (const nx_tensor* tangents, size_t ninputs), (const nx_tensor* exp_avg_sqs, size_t n) {
  $1 = ($1_ltype)nx_java_counted_from(jenv, $input);
  if (!$1) return $null;
  $2 = nx_counted_len($1);
}
/* nx_jvp(output, inputs, tangents): two arrays of equal length */
%typemap(check) (const nx_tensor* inputs, const nx_tensor* tangents, size_t ninputs) {
  if (nx_counted_len($1) != $3) {
    nx_counted_free($1);
    nx_counted_free($2);
    nx_java_throw_arg(jenv, "jvp: inputs and tangents differ in length");
    return $null;
  }
}
/* nx_adam_step_multi(params, grads, exp_avgs, exp_avg_sqs, step, options, stream): four arrays of
 * equal length */
%typemap(check) (const nx_tensor* params, const nx_tensor* grads, const nx_tensor* exp_avgs,
                 const nx_tensor* exp_avg_sqs, size_t n) {
  if (nx_counted_len($1) != $5 || nx_counted_len($2) != $5 || nx_counted_len($3) != $5) {
    nx_counted_free($1);
    nx_counted_free($2);
    nx_counted_free($3);
    nx_counted_free($4);
    nx_java_throw_arg(jenv, "adam_step_multi: params, grads, exp_avgs and exp_avg_sqs differ in length");
    return $null;
  }
}

/* Arrays of out-handles: nx_split's outs, nx_autograd_grad's grads -> Tensor[] */
%typemap(in, numinputs=0) nx_tensor* outs, nx_tensor* grads { $1 = NULL; }
%typemap(freearg) nx_tensor* outs, nx_tensor* grads { free($1); }
%define NX_JAVA_OUT_ARRAY(PARAMS, COUNT)
%typemap(check) PARAMS {
  $1 = (nx_tensor*)calloc(COUNT ? COUNT : 1, sizeof(nx_tensor));
  if (!$1) {
    nx_java_throw_arg(jenv, "out of memory");
    return $null;
  }
}
%typemap(argout) PARAMS {
  jresult = (*jenv)->NewLongArray(jenv, (jsize)COUNT);
  if (jresult) {
    size_t i;
    for (i = 0; i < COUNT; ++i) {
      jlong p = (jlong)(intptr_t)$1[i];
      (*jenv)->SetLongArrayRegion(jenv, jresult, (jsize)i, 1, &p);
    }
  } else {
    size_t i;
    for (i = 0; i < COUNT; ++i) nx_tensor_free($1[i]);
  }
}
%enddef
NX_JAVA_OUT_ARRAY((nx_tensor* outs, nx_tensor x, const int64_t* sizes, size_t nsizes), $4)
NX_JAVA_OUT_ARRAY((nx_tensor* grads, nx_tensor root, nx_tensor grad, const nx_tensor* inputs, size_t ninputs), $5)
NX_JAVA_RET_TENSORS(nx_split)
NX_JAVA_RET_TENSORS(nx_autograd_grad)

/* nx_plan_run(plan, long noutputs, Tensor[] inputs, stream) -> Tensor[] */
%typemap(jni) (nx_tensor* outputs, size_t noutputs) "jlong"
%typemap(jtype) (nx_tensor* outputs, size_t noutputs) "long"
%typemap(jstype) (nx_tensor* outputs, size_t noutputs) "long"
%typemap(javain) (nx_tensor* outputs, size_t noutputs) "$javainput"
%typemap(in) (nx_tensor* outputs, size_t noutputs) {
  if ($input < 0 || $input > 4096) {
    nx_java_throw_arg(jenv, "noutputs must be in 0..4096");
    return $null;
  }
  $2 = (size_t)$input;
  $1 = (nx_tensor*)calloc($2 ? $2 : 1, sizeof(nx_tensor));
  if (!$1) {
    nx_java_throw_arg(jenv, "out of memory");
    return $null;
  }
}
%typemap(freearg) (nx_tensor* outputs, size_t noutputs) { free($1); }
%typemap(argout) (nx_tensor* outputs, size_t noutputs) {
  jresult = (*jenv)->NewLongArray(jenv, (jsize)$2);
  if (jresult) {
    (*jenv)->SetLongArrayRegion(jenv, jresult, 0, (jsize)$2, (const jlong*)$1);
  } else {
    size_t i;
    for (i = 0; i < $2; ++i) nx_tensor_free($1[i]);
  }
}
NX_JAVA_RET_TENSORS(nx_plan_run)

/* nx_module_parameters(m) -> Tensor[] (each retained; the engine's array is freed) */
%typemap(in, numinputs=0) (nx_tensor** out, size_t* n) (nx_tensor* arr = NULL, size_t cnt = 0) {
  $1 = &arr;
  $2 = &cnt;
}
%typemap(argout) (nx_tensor** out, size_t* n) {
  jresult = (*jenv)->NewLongArray(jenv, (jsize)cnt$argnum);
  if (jresult) {
    size_t i;
    for (i = 0; i < cnt$argnum; ++i) {
      nx_tensor mine = NULL;
      jlong p;
      if (nx_tensor_retain(&mine, arr$argnum[i]) != NX_OK) mine = NULL;
      p = (jlong)(intptr_t)mine;
      (*jenv)->SetLongArrayRegion(jenv, jresult, (jsize)i, 1, &p);
    }
  }
}
%typemap(freearg) (nx_tensor** out, size_t* n) {
  if (arr$argnum) nx_tensor_array_free(arr$argnum, cnt$argnum);
}
NX_JAVA_RET_TENSORS(nx_module_parameters)

/* nx_text_loader_next(loader, device, stream) -> {inputs, targets} (its out-handles come first in C) */
%typemap(in, numinputs=0) (nx_tensor* inputs, nx_tensor* targets) (nx_tensor tin = NULL, nx_tensor ttg = NULL) {
  $1 = &tin;
  $2 = &ttg;
}
%typemap(argout) (nx_tensor* inputs, nx_tensor* targets) {
  jresult = (*jenv)->NewLongArray(jenv, 2);
  if (jresult) {
    jlong p[2];
    p[0] = (jlong)(intptr_t)tin$argnum;
    p[1] = (jlong)(intptr_t)ttg$argnum;
    (*jenv)->SetLongArrayRegion(jenv, jresult, 0, 2, p);
  } else {
    nx_tensor_free(tin$argnum);
    nx_tensor_free(ttg$argnum);
  }
}
NX_JAVA_RET_TENSORS(nx_text_loader_next)

/* nx_add_rms_norm / nx_add_layer_norm(x, residual, ...) -> {out, sum_out} */
%apply (nx_tensor* inputs, nx_tensor* targets) { (nx_tensor* out, nx_tensor* sum_out) };
NX_JAVA_RET_TENSORS(nx_add_rms_norm)
NX_JAVA_RET_TENSORS(nx_add_layer_norm)

/* nx_module_parameter's name: a String[1] holder the call fills */
%typemap(jni) const char** name "jobjectArray"
%typemap(jtype) const char** name "String[]"
%typemap(jstype) const char** name "String[]"
%typemap(javain) const char** name "$javainput"
%typemap(in) const char** name (const char* tmp = NULL) {
  if (!$input || (*jenv)->GetArrayLength(jenv, $input) < 1) {
    nx_java_throw_arg(jenv, "name must be a String[1] holder");
    return $null;
  }
  $1 = ($1_ltype)&tmp;
}
%typemap(argout) const char** name {
  jstring s = tmp$argnum ? (*jenv)->NewStringUTF(jenv, tmp$argnum) : NULL;
  (*jenv)->SetObjectArrayElement(jenv, $input, 0, s);
}

/* ---------------------------------------------------------------- bytes */
/* nx_tensor_from_data(byte[] data, long[] shape, DType dtype, Device device, Stream stream):
 * data must hold exactly prod(shape) * dtype size bytes (little-endian). */
%typemap(jni) const void* data "jbyteArray"
%typemap(jtype) const void* data "byte[]"
%typemap(jstype) const void* data "byte[]"
%typemap(javain) const void* data "$javainput"
%typemap(in) const void* data (jbyte* bytes = NULL, jsize blen = 0) {
  if (!$input) {
    nx_java_throw_arg(jenv, "data is null");
    return $null;
  }
  blen = (*jenv)->GetArrayLength(jenv, $input);
  bytes = (*jenv)->GetByteArrayElements(jenv, $input, 0);
  if (!bytes) return $null;
  $1 = (void*)bytes;
}
%typemap(freearg) const void* data {
  if (bytes$argnum) (*jenv)->ReleaseByteArrayElements(jenv, $input, bytes$argnum, JNI_ABORT);
}
%typemap(check) (const void* data, const int64_t* shape, size_t ndim, nx_dtype dtype) {
  size_t need = nx_dtype_size($4), i;
  int ok = 1;
  for (i = 0; i < $3; ++i) {
    if ($2[i] < 0 || ($2[i] != 0 && need > ((size_t)-1) / (size_t)$2[i])) {
      ok = 0; /* the engine names the problem */
      break;
    }
    need *= (size_t)$2[i];
  }
  if (ok && need && (size_t)blen$argnum != need) {
    nx_java_throw_arg(jenv, "tensor_from_data: data.length does not match shape and dtype");
    return $null;
  }
  if (!ok) $1 = NULL;
}
/* nx_tensor_copy_to_host(t, byte[] dst, stream): dst.length must be numel * dtype size */
%typemap(jni) (void* dst, size_t nbytes) "jbyteArray"
%typemap(jtype) (void* dst, size_t nbytes) "byte[]"
%typemap(jstype) (void* dst, size_t nbytes) "byte[]"
%typemap(javain) (void* dst, size_t nbytes) "$javainput"
%typemap(in) (void* dst, size_t nbytes) (jbyte* bytes = NULL) {
  if (!$input) {
    nx_java_throw_arg(jenv, "dst is null");
    return $null;
  }
  bytes = (*jenv)->GetByteArrayElements(jenv, $input, 0);
  if (!bytes) return $null;
  $1 = (void*)bytes;
  $2 = (size_t)(*jenv)->GetArrayLength(jenv, $input);
}
%typemap(freearg) (void* dst, size_t nbytes) {
  if (bytes$argnum) (*jenv)->ReleaseByteArrayElements(jenv, $input, bytes$argnum, 0); /* copy back */
}

/* text in: String (UTF-8) */
%typemap(jni) (const char* text, size_t len) "jbyteArray"
%typemap(jtype) (const char* text, size_t len) "byte[]"
%typemap(jstype) (const char* text, size_t len) "String"
%typemap(javain) (const char* text, size_t len) "$javainput.getBytes(java.nio.charset.StandardCharsets.UTF_8)"
%typemap(in) (const char* text, size_t len) (jbyte* bytes = NULL) {
  $2 = (size_t)(*jenv)->GetArrayLength(jenv, $input);
  bytes = (*jenv)->GetByteArrayElements(jenv, $input, 0);
  if (!bytes) return $null;
  $1 = (char*)bytes;
}
%typemap(freearg) (const char* text, size_t len) {
  if (bytes$argnum) (*jenv)->ReleaseByteArrayElements(jenv, $input, bytes$argnum, JNI_ABORT);
}

/* nx_tokenizer_decode(tok, long[] ids) -> String (the buffer grows to the size the engine asks) */
%typemap(in, numinputs=0) (char* buf, size_t capacity, size_t* len) (size_t outlen = 0) {
  $2 = 4096;
  $1 = (char*)malloc($2);
  if (!$1) {
    nx_java_throw_arg(jenv, "out of memory");
    return $null;
  }
  $3 = &outlen;
}
%typemap(argout) (char* buf, size_t capacity, size_t* len) {
  jbyteArray b = (*jenv)->NewByteArray(jenv, (jsize)outlen$argnum);
  if (b) (*jenv)->SetByteArrayRegion(jenv, b, 0, (jsize)outlen$argnum, (const jbyte*)$1);
  jresult = b;
}
%typemap(freearg) (char* buf, size_t capacity, size_t* len) { free($1); }
%feature("action") nx_tokenizer_decode {
  result = (nx_status)nx_tokenizer_decode(arg1, (int64_t const*)arg2, arg3, arg4, arg5, arg6);
  if (result == NX_ERR_INVALID_ARGUMENT && *arg6 > arg5) {
    char* bigger = (char*)realloc(arg4, *arg6);
    if (bigger) {
      arg4 = bigger;
      arg5 = *arg6;
      result = (nx_status)nx_tokenizer_decode(arg1, (int64_t const*)arg2, arg3, arg4, arg5, arg6);
    }
  }
}
%typemap(jni) nx_status nx_tokenizer_decode "jbyteArray"
%typemap(jtype) nx_status nx_tokenizer_decode "byte[]"
%typemap(jstype) nx_status nx_tokenizer_decode "String"
%typemap(javaout) nx_status nx_tokenizer_decode {
    return new String($jnicall, java.nio.charset.StandardCharsets.UTF_8);
  }
/* nx_comm_id_to_hex(id) -> String, through the same buffer typemaps (the hex is ASCII) */
%typemap(jni) nx_status nx_comm_id_to_hex "jbyteArray"
%typemap(jtype) nx_status nx_comm_id_to_hex "byte[]"
%typemap(jstype) nx_status nx_comm_id_to_hex "String"
%typemap(javaout) nx_status nx_comm_id_to_hex {
    return new String($jnicall, java.nio.charset.StandardCharsets.US_ASCII);
  }

/* nx_safetensors_save(path, String[] names, Tensor[] tensors) */
%typemap(jni) const char* const* names "jobjectArray"
%typemap(jtype) const char* const* names "String[]"
%typemap(jstype) const char* const* names "String[]"
%typemap(javain) const char* const* names "$javainput"
%typemap(in) const char* const* names (jsize count = 0) {
  jsize i;
  count = $input ? (*jenv)->GetArrayLength(jenv, $input) : 0;
  $1 = ($1_ltype)calloc(count ? (size_t)count : 1, sizeof(char*));
  if (!$1) {
    nx_java_throw_arg(jenv, "out of memory");
    return $null;
  }
  for (i = 0; i < count; ++i) {
    jstring s = (jstring)(*jenv)->GetObjectArrayElement(jenv, $input, i);
    const char* c = s ? (*jenv)->GetStringUTFChars(jenv, s, 0) : NULL;
    if (!c) {
      nx_java_throw_arg(jenv, "names must not contain null");
      return $null;
    }
    $1[i] = strdup(c);
    (*jenv)->ReleaseStringUTFChars(jenv, s, c);
    (*jenv)->DeleteLocalRef(jenv, s);
  }
}
%typemap(freearg) const char* const* names {
  if ($1) {
    jsize i;
    for (i = 0; i < count$argnum; ++i) free((void*)$1[i]);
    free((void*)$1);
  }
}
%typemap(check) (const char* const* names, const nx_tensor* tensors, size_t n) {
  if ((size_t)count$argnum != $3) {
    nx_java_throw_arg(jenv, "safetensors_save: names and tensors differ in length");
    return $null;
  }
}

/* The per-function return types, generated from nexus.h by CMake. */
%include "nexus_java_returns.i"
