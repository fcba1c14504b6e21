/* Python typemaps for nexus.i (module nexusgrad._nexus, the low-level layer).
 *
 * Conventions of the generated functions:
 *   - every nx_status is checked: a failure raises nexusgrad.Error (a subclass per status, which
 *     also derives from the matching built-in) carrying nx_last_error_message(); on success the
 *     status is not returned;
 *   - out-parameters (nx_tensor* out, size_t* out...) are not passed but returned; handles come
 *     back as owned objects freed by the garbage collector exactly once (None for a NULL handle);
 *   - counted arrays (const int64_t* shape, size_t ndim) take one Python sequence of ints (or one
 *     int, or None for an empty array); tensor arrays take a sequence of handles; arrays that
 *     share one count (nx_adam_step_multi's four) take one sequence each, of equal lengths;
 *   - options structs (const nx_adam_options* options...): nx_adam_options() and the like are
 *     filled with the NX_*_OPTIONS_DEFAULT values, struct_size included; None passes NULL (the
 *     defaults);
 *   - nx_device takes "cpu", "cuda", "cuda:N", a (type, index) tuple or an nx_device;
 *     nx_device* out returns "cpu" or "cuda:N";
 *   - data in and out goes through the buffer protocol (bytes, bytearray, numpy arrays...);
 *   - the GIL is released around every call that computes, copies or synchronizes.
 */

%begin %{
#define PY_SSIZE_T_CLEAN
%}

%{
#include <string.h>
#include <stdlib.h>

/* ---------- exceptions: nexusgrad.Error and one subclass per status */
#define NX_PY_NSTATUS 16
static PyObject* nx_py_error_classes[NX_PY_NSTATUS];

static PyObject* nx_py_public_names; /* the module's __all__ (-builtin), so `import *` sees the classes */
static PyObject* nx_py_new_error_class(PyObject* dict, const char* name, PyObject* bases, const char* doc) {
  char qual[96];
  PyObject* cls;
  snprintf(qual, sizeof qual, "nexusgrad.%s", name);
  cls = PyErr_NewExceptionWithDoc(qual, doc, bases, NULL);
  if (cls && PyDict_SetItemString(dict, name, cls) < 0) {
    Py_DECREF(cls);
    return NULL;
  }
  if (cls && nx_py_public_names) {
    PyObject* s = PyUnicode_FromString(name);
    if (!s || PyList_Append(nx_py_public_names, s) < 0) {
      Py_XDECREF(s);
      Py_DECREF(cls);
      return NULL;
    }
    Py_DECREF(s);
  }
  return cls; /* the reference is kept in nx_py_error_classes for the process lifetime */
}

static int nx_py_init_errors(PyObject* dict) {
  static const struct {
    nx_status status;
    const char* name;
    PyObject** builtin;
    const char* doc;
  } table[] = {
    {NX_ERR_INVALID_ARGUMENT, "InvalidArgumentError", &PyExc_ValueError,
     "NX_ERR_INVALID_ARGUMENT: a NULL or freed handle, or a bad value."},
    {NX_ERR_SHAPE, "ShapeError", &PyExc_ValueError, "NX_ERR_SHAPE: shapes that do not fit together, or a bad axis."},
    {NX_ERR_DTYPE, "DTypeError", &PyExc_TypeError, "NX_ERR_DTYPE: an unsupported or mismatched dtype."},
    {NX_ERR_DEVICE, "DeviceError", &PyExc_RuntimeError, "NX_ERR_DEVICE: a device mismatch or an unavailable device."},
    {NX_ERR_OUT_OF_MEMORY, "OutOfMemoryError", &PyExc_MemoryError, "NX_ERR_OUT_OF_MEMORY: host or device memory exhausted."},
    {NX_ERR_CUDA, "CudaError", &PyExc_RuntimeError, "NX_ERR_CUDA: an error reported by the CUDA runtime or a CUDA library."},
    {NX_ERR_IO, "FileError", &PyExc_OSError, "NX_ERR_IO: a file could not be read or is malformed."},
    {NX_ERR_NOT_IMPLEMENTED, "NotSupportedError", &PyExc_NotImplementedError,
     "NX_ERR_NOT_IMPLEMENTED: the operation is not supported for these arguments."},
    {NX_ERR_STATE, "StateError", &PyExc_RuntimeError,
     "NX_ERR_STATE: an object in the wrong state (graph freed, tensor modified in place...)."},
    {NX_ERR_INTERNAL, "InternalError", &PyExc_RuntimeError, "NX_ERR_INTERNAL: a bug in NexusGrad; please report it."},
  };
  size_t i;
  PyObject* base = nx_py_new_error_class(dict, "Error", PyExc_Exception,
      "Base class of every NexusGrad error. Attributes: status (int, an NX_ERR_* value), "
      "status_name (e.g. 'NX_ERR_SHAPE') and message (the engine's nx_last_error_message()).");
  if (base && (PyObject_SetAttrString(base, "status", Py_None) < 0 ||
               PyObject_SetAttrString(base, "status_name", Py_None) < 0)) return -1;
  if (!base) return -1;
  for (i = 0; i < NX_PY_NSTATUS; ++i) {
    Py_INCREF(base);
    nx_py_error_classes[i] = base;
  }
  for (i = 0; i < sizeof table / sizeof table[0]; ++i) {
    PyObject* bases = PyTuple_Pack(2, base, *table[i].builtin);
    PyObject* cls;
    if (!bases) return -1;
    cls = nx_py_new_error_class(dict, table[i].name, bases, table[i].doc);
    Py_DECREF(bases);
    if (!cls) return -1;
    {
      PyObject* code = PyLong_FromLong((long)table[i].status);
      PyObject* name = PyUnicode_FromString(nx_status_string(table[i].status));
      int bad = !code || !name || PyObject_SetAttrString(cls, "status", code) < 0 ||
                PyObject_SetAttrString(cls, "status_name", name) < 0;
      Py_XDECREF(code);
      Py_XDECREF(name);
      if (bad) return -1;
    }
    Py_DECREF(nx_py_error_classes[table[i].status]);
    nx_py_error_classes[table[i].status] = cls;
  }
  return 0;
}

/* Raises the exception for status with the engine's thread-local message. */
static void nx_py_raise(nx_status status) {
  const char* msg = nx_last_error_message();
  PyObject* cls = ((unsigned)status < NX_PY_NSTATUS && nx_py_error_classes[status]) ? nx_py_error_classes[status]
                                                                                  : PyExc_RuntimeError;
  PyObject* text = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace");
  PyObject* exc;
  if (!text) return;
  exc = PyObject_CallFunctionObjArgs(cls, text, NULL);
  if (exc) {
    PyObject* code = PyLong_FromLong((long)status);
    PyObject* name = PyUnicode_FromString(nx_status_string(status));
    if (code && name) {
      PyObject_SetAttrString(exc, "status", code);
      PyObject_SetAttrString(exc, "status_name", name);
    }
    Py_XDECREF(code);
    Py_XDECREF(name);
    PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
  }
  Py_DECREF(text);
}

/* ---------- counted int64 arrays from Python */
typedef struct {
  int64_t* data;
  size_t n;
  int64_t small[8];
} nx_py_dims;

static int nx_py_dims_from(nx_py_dims* d, PyObject* obj, const char* what) {
  Py_ssize_t i, n;
  PyObject* seq;
  d->data = d->small;
  d->n = 0;
  if (obj == Py_None) return 0;
  if (PyLong_Check(obj) || (!PySequence_Check(obj) && PyIndex_Check(obj))) {
    d->small[0] = PyLong_AsLongLong(obj);
    if (d->small[0] == -1 && PyErr_Occurred()) return -1;
    d->n = 1;
    return 0;
  }
  seq = PySequence_Fast(obj, "");
  if (!seq) {
    PyErr_Format(PyExc_TypeError, "%s must be a sequence of ints, an int or None, not %.100s", what,
                 Py_TYPE(obj)->tp_name);
    return -1;
  }
  n = PySequence_Fast_GET_SIZE(seq);
  if (n > 8) {
    d->data = (int64_t*)malloc(sizeof(int64_t) * (size_t)n);
    if (!d->data) {
      d->data = d->small;
      Py_DECREF(seq);
      PyErr_NoMemory();
      return -1;
    }
  }
  for (i = 0; i < n; ++i) {
    PyObject* item = PySequence_Fast_GET_ITEM(seq, i);
    long long v = PyLong_AsLongLong(item);
    if (v == -1 && PyErr_Occurred()) {
      PyErr_Format(PyExc_TypeError, "%s[%zd] must be an int, not %.100s", what, i, Py_TYPE(item)->tp_name);
      Py_DECREF(seq);
      return -1;
    }
    d->data[i] = (int64_t)v;
  }
  d->n = (size_t)n;
  Py_DECREF(seq);
  return 0;
}
static void nx_py_dims_free(nx_py_dims* d) {
  if (d->data && d->data != d->small) free(d->data);
  d->data = NULL;
}

/* ---------- devices */
static int nx_py_device_from(nx_device* out, PyObject* obj, swig_type_info* device_type) {
  if (PyUnicode_Check(obj)) {
    const char* s = PyUnicode_AsUTF8(obj);
    const char* rest = NULL;
    if (!s) return -1;
    if (strncmp(s, "cpu", 3) == 0) {
      out->type = NX_CPU;
      rest = s + 3;
    } else if (strncmp(s, "cuda", 4) == 0) {
      out->type = NX_CUDA;
      rest = s + 4;
    }
    if (rest) {
      out->index = 0;
      if (*rest == 0) return 0;
      if (*rest == ':' && rest[1]) {
        char* end = NULL;
        long v = strtol(rest + 1, &end, 10);
        if (*end == 0 && v >= 0 && v <= 0x7fffffff) {
          out->index = (int32_t)v;
          return 0;
        }
      }
    }
    PyErr_Format(PyExc_ValueError, "invalid device '%s' (expected 'cpu', 'cuda' or 'cuda:N')", s);
    return -1;
  }
  if (PyTuple_Check(obj) && PyTuple_GET_SIZE(obj) == 2) {
    long t = PyLong_AsLong(PyTuple_GET_ITEM(obj, 0));
    long i = PyLong_AsLong(PyTuple_GET_ITEM(obj, 1));
    if (PyErr_Occurred()) return -1;
    out->type = (nx_device_type)t;
    out->index = (int32_t)i;
    return 0;
  }
  {
    void* p = NULL;
    if (SWIG_IsOK(SWIG_ConvertPtr(obj, &p, device_type, 0)) && p) {
      *out = *(nx_device*)p;
      return 0;
    }
  }
  PyErr_Format(PyExc_TypeError, "device must be 'cpu', 'cuda', 'cuda:N', a (type, index) tuple or an nx_device, not %.100s",
               Py_TYPE(obj)->tp_name);
  return -1;
}
static PyObject* nx_py_device_to(nx_device d) {
  if (d.type == NX_CPU) return PyUnicode_FromString("cpu");
  if (d.type == NX_CUDA) return PyUnicode_FromFormat("cuda:%d", (int)d.index);
  return PyUnicode_FromFormat("device(%d):%d", (int)d.type, (int)d.index);
}

/* ---------- handle arrays */
typedef struct {
  void** data;
  size_t n;
  void* small[8];
} nx_py_handles;

static int nx_py_handles_from(nx_py_handles* h, PyObject* obj, swig_type_info* ty, const char* what) {
  Py_ssize_t i, n;
  PyObject* seq = PySequence_Fast(obj, "");
  h->data = h->small;
  h->n = 0;
  if (!seq) {
    PyErr_Format(PyExc_TypeError, "%s must be a sequence of tensors, not %.100s", what, Py_TYPE(obj)->tp_name);
    return -1;
  }
  n = PySequence_Fast_GET_SIZE(seq);
  if (n > 8) {
    h->data = (void**)calloc((size_t)n, sizeof(void*));
    if (!h->data) {
      h->data = h->small;
      Py_DECREF(seq);
      PyErr_NoMemory();
      return -1;
    }
  }
  for (i = 0; i < n; ++i) {
    PyObject* item = PySequence_Fast_GET_ITEM(seq, i);
    void* p = NULL;
    if (item != Py_None && !SWIG_IsOK(SWIG_ConvertPtr(item, &p, ty, 0))) {
      PyObject* inner = PyObject_GetAttrString(item, "_h"); /* a nexusgrad.Tensor */
      if (!inner || !SWIG_IsOK(SWIG_ConvertPtr(inner, &p, ty, 0))) {
        Py_XDECREF(inner);
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s[%zd] must be a tensor, not %.100s", what, i, Py_TYPE(item)->tp_name);
        Py_DECREF(seq);
        if (h->data != h->small) free(h->data);
        h->data = h->small;
        return -1;
      }
      Py_DECREF(inner);
    }
    h->data[i] = p;
  }
  h->n = (size_t)n;
  Py_DECREF(seq);
  return 0;
}
static void nx_py_handles_free(nx_py_handles* h) {
  if (h->data && h->data != h->small) free(h->data);
  h->data = NULL;
}

/* A counted array (nx_counted_new, bindings/nexus.i) of the handles of a sequence; NULL with an
 * exception set on failure. */
static nx_tensor* nx_py_counted_from(PyObject* obj, swig_type_info* ty, const char* what) {
  nx_py_handles hs;
  nx_tensor* out;
  if (nx_py_handles_from(&hs, obj, ty, what) < 0) return NULL;
  out = nx_counted_new(hs.n);
  if (!out) PyErr_NoMemory();
  else if (hs.n) memcpy(out, hs.data, sizeof(nx_tensor) * hs.n);
  nx_py_handles_free(&hs);
  return out;
}

/* A list of owned handle objects from an array of handles written by the engine; on failure
 * frees the handles not yet given to Python. */
static PyObject* nx_py_handle_list(nx_tensor* hs, size_t n, swig_type_info* ty) {
  size_t i;
  PyObject* list = PyList_New((Py_ssize_t)n);
  for (i = 0; i < n; ++i) {
    PyObject* o;
    if (!list) {
      nx_tensor_free(hs[i]);
      continue;
    }
    if (hs[i]) {
      o = SWIG_Python_NewPointerObj(NULL, (void*)hs[i], ty, SWIG_POINTER_OWN);
      if (!o) {
        nx_tensor_free(hs[i]);
        Py_CLEAR(list);
        continue;
      }
    } else {
      Py_INCREF(Py_None);
      o = Py_None;
    }
    PyList_SET_ITEM(list, (Py_ssize_t)i, o);
  }
  return list;
}

/* (a, b) of owned handles; frees both on failure. */
static PyObject* nx_py_handle_pair(nx_tensor a, nx_tensor b, swig_type_info* ty) {
  nx_tensor hs[2];
  PyObject *list, *tup;
  hs[0] = a;
  hs[1] = b;
  list = nx_py_handle_list(hs, 2, ty);
  if (!list) return NULL;
  tup = PyList_AsTuple(list);
  Py_DECREF(list);
  return tup;
}

/* ---------- DLPack capsules: "dltensor" holds an nx_dl_managed_tensor (DLManagedTensor),
 * "dltensor_versioned" an nx_dl_managed_tensor_versioned (DLManagedTensorVersioned). Called when
 * the capsule dies: if no consumer renamed it ("used_dltensor"...), it still owns its struct. */
#define NX_PY_DLPACK_DESTRUCTOR(FN, TYPE, NAME)                   \
  static void FN(PyObject* capsule) {                             \
    if (PyCapsule_IsValid(capsule, NAME)) {                       \
      TYPE* m = (TYPE*)PyCapsule_GetPointer(capsule, NAME);       \
      if (m && m->deleter) m->deleter(m);                         \
    } else {                                                      \
      PyErr_Clear();                                              \
    }                                                             \
  }
NX_PY_DLPACK_DESTRUCTOR(nx_py_dltensor_destructor, nx_dl_managed_tensor, "dltensor")
NX_PY_DLPACK_DESTRUCTOR(nx_py_dltensor_versioned_destructor, nx_dl_managed_tensor_versioned, "dltensor_versioned")

/* ---------- a Python callable as nx_checkpoint_fn / nx_plan_fn (one signature): the callable
 * (user_data) gets a list of owned tensor handles and returns a sequence of noutputs handles. A
 * Python exception it raises stays set and fails the C call, whose typemap then raises it as is.
 * what names the function in the errors of this conversion. */
static swig_type_info* nx_py_tensor_type(void);

static nx_status nx_py_call_tensor_fn(const char* what, nx_tensor* outputs, size_t noutputs,
                                      const nx_tensor* inputs, size_t ninputs, void* user_data) {
  PyGILState_STATE gil = PyGILState_Ensure();
  nx_status status = NX_ERR_INVALID_ARGUMENT;
  PyObject *args = NULL, *res = NULL, *seq = NULL;
  size_t i;
  swig_type_info* ty = nx_py_tensor_type();
  for (i = 0; i < noutputs; ++i) outputs[i] = NULL;
  if (PyErr_Occurred()) goto done; /* an earlier call failed: do not run Python code over it */
  args = PyList_New((Py_ssize_t)ninputs);
  if (!args) goto done;
  for (i = 0; i < ninputs; ++i) {
    nx_tensor h = NULL;
    PyObject* o;
    if (nx_tensor_retain(&h, inputs[i]) != NX_OK) { /* the callable may keep what it gets */
      nx_py_raise(NX_ERR_INVALID_ARGUMENT);
      goto done;
    }
    o = SWIG_Python_NewPointerObj(NULL, (void*)h, ty, SWIG_POINTER_OWN);
    if (!o) {
      nx_tensor_free(h);
      goto done;
    }
    PyList_SET_ITEM(args, (Py_ssize_t)i, o);
  }
  res = PyObject_CallFunctionObjArgs((PyObject*)user_data, args, NULL);
  if (!res) goto done;
  seq = PySequence_Fast(res, "");
  if (!seq) {
    PyErr_Format(PyExc_TypeError, "%s must return a sequence of tensor handles, not %.100s", what,
                 Py_TYPE(res)->tp_name);
    goto done;
  }
  if ((size_t)PySequence_Fast_GET_SIZE(seq) != noutputs) {
    PyErr_Format(PyExc_ValueError, "%s returned %zd tensors, expected %zu", what, PySequence_Fast_GET_SIZE(seq),
                 noutputs);
    goto done;
  }
  for (i = 0; i < noutputs; ++i) {
    void* p = NULL;
    PyObject* item = PySequence_Fast_GET_ITEM(seq, (Py_ssize_t)i);
    if (!SWIG_IsOK(SWIG_ConvertPtr(item, &p, ty, 0)) || !p) {
      PyErr_Format(PyExc_TypeError, "%s returned a %.100s, expected a tensor handle", what, Py_TYPE(item)->tp_name);
      goto done;
    }
    /* the engine owns what fn writes: give it its own handle */
    if (nx_tensor_retain(&outputs[i], (nx_tensor)p) != NX_OK) {
      nx_py_raise(NX_ERR_INVALID_ARGUMENT);
      goto done;
    }
  }
  status = NX_OK;
done:
  if (status != NX_OK)
    for (i = 0; i < noutputs; ++i) {
      nx_tensor_free(outputs[i]);
      outputs[i] = NULL;
    }
  Py_XDECREF(seq);
  Py_XDECREF(res);
  Py_XDECREF(args);
  PyGILState_Release(gil);
  return status;
}

static nx_status nx_py_checkpoint_trampoline(nx_tensor* outputs, size_t noutputs, const nx_tensor* inputs,
                                             size_t ninputs, void* user_data) {
  return nx_py_call_tensor_fn("the checkpoint function", outputs, noutputs, inputs, ninputs, user_data);
}
static nx_status nx_py_plan_trampoline(nx_tensor* outputs, size_t noutputs, const nx_tensor* inputs, size_t ninputs,
                                       void* user_data) {
  return nx_py_call_tensor_fn("the step function", outputs, noutputs, inputs, ninputs, user_data);
}
%}

%{
static swig_type_info* nx_py_tensor_type(void) { return SWIGTYPE_p_nx_tensor_s; }
%}

%init %{
#ifdef SWIGPYTHON_BUILTIN
  nx_py_public_names = public_interface;
#endif
  if (nx_py_init_errors(d) < 0) return NULL;
%}

/* ---------------------------------------------------------------- GIL */
/* Released around every C call, except those that only read a field or are trivially short. */
%exception {
  Py_BEGIN_ALLOW_THREADS
  $action
  Py_END_ALLOW_THREADS
}
%define NX_PY_KEEP_GIL(NAME)
%noexception NAME;
%enddef
NX_PY_KEEP_GIL(nx_version_string)
NX_PY_KEEP_GIL(nx_abi_version)
NX_PY_KEEP_GIL(nx_status_string)
NX_PY_KEEP_GIL(nx_last_error_message)
NX_PY_KEEP_GIL(nx_clear_error)
NX_PY_KEEP_GIL(nx_dtype_size)
NX_PY_KEEP_GIL(nx_dtype_name)
NX_PY_KEEP_GIL(nx_cpu_get_num_threads)
NX_PY_KEEP_GIL(nx_cpu_get_simd_level)
NX_PY_KEEP_GIL(nx_random_set_seed)
NX_PY_KEEP_GIL(nx_runtime_set_deterministic)
NX_PY_KEEP_GIL(nx_runtime_get_deterministic)
NX_PY_KEEP_GIL(nx_runtime_get_host_syncs)
NX_PY_KEEP_GIL(nx_live_handle_count)
NX_PY_KEEP_GIL(nx_tensor_ndim)
NX_PY_KEEP_GIL(nx_tensor_shape)
NX_PY_KEEP_GIL(nx_tensor_strides)
NX_PY_KEEP_GIL(nx_tensor_numel)
NX_PY_KEEP_GIL(nx_tensor_dtype)
NX_PY_KEEP_GIL(nx_tensor_device)
NX_PY_KEEP_GIL(nx_tensor_is_contiguous)
NX_PY_KEEP_GIL(nx_tensor_data_ptr)
NX_PY_KEEP_GIL(nx_tensor_retain)
NX_PY_KEEP_GIL(nx_tensor_set_requires_grad)
NX_PY_KEEP_GIL(nx_tensor_get_requires_grad)
NX_PY_KEEP_GIL(nx_tensor_is_leaf)
NX_PY_KEEP_GIL(nx_tensor_grad)
NX_PY_KEEP_GIL(nx_tensor_zero_grad)
NX_PY_KEEP_GIL(nx_tensor_detach)
NX_PY_KEEP_GIL(nx_autograd_set_enabled)
NX_PY_KEEP_GIL(nx_autograd_get_enabled)
NX_PY_KEEP_GIL(nx_cuda_set_tf32)
NX_PY_KEEP_GIL(nx_cuda_get_tf32)
NX_PY_KEEP_GIL(nx_module_get_training)
NX_PY_KEEP_GIL(nx_cuda_device_count)
NX_PY_KEEP_GIL(nx_grad_scaler_create)
NX_PY_KEEP_GIL(nx_grad_scaler_get_scale)
/* Destructors run from the collector (maybe at interpreter shutdown): keep the GIL. */
%noexception nx_tensor_s::~nx_tensor_s;
%noexception nx_stream_s::~nx_stream_s;
%noexception nx_event_s::~nx_event_s;
%noexception nx_safetensors_s::~nx_safetensors_s;
%noexception nx_graph_s::~nx_graph_s;
%noexception nx_grad_scaler_s::~nx_grad_scaler_s;
%noexception nx_plan_s::~nx_plan_s;

/* ---------------------------------------------------------------- status */
%typemap(out) nx_status {
  if ($1 != NX_OK) {
    /* an exception raised by Python code that the call ran (a checkpoint or step function) wins */
    if (!PyErr_Occurred()) nx_py_raise($1);
    SWIG_fail;
  }
  $result = SWIG_Py_Void();
}
/* nx_status as a value (nx_status_string's argument) stays an int. */
%typemap(in) nx_status {
  long v = PyLong_AsLong($input);
  if (v == -1 && PyErr_Occurred()) SWIG_fail;
  $1 = (nx_status)v;
}

/* ---------------------------------------------------------------- scalars */
/* Accept anything with __index__ / __float__ (NumPy scalars included), fast. */
%typemap(in) int64_t {
  $1 = (int64_t)PyLong_AsLongLong($input);
  if ($1 == -1 && PyErr_Occurred()) SWIG_fail;
}
%typemap(in) double {
  $1 = PyFloat_AsDouble($input);
  if ($1 == -1.0 && PyErr_Occurred()) SWIG_fail;
}
%typemap(in) bool {
  int v = PyObject_IsTrue($input);
  if (v < 0) SWIG_fail;
  $1 = v ? true : false;
}
%typemap(in) nx_dtype {
  long v = PyLong_AsLong($input);
  if (v == -1 && PyErr_Occurred()) SWIG_fail;
  $1 = (nx_dtype)v;
}
%typemap(in) nx_reduction {
  long v = PyLong_AsLong($input);
  if (v == -1 && PyErr_Occurred()) SWIG_fail;
  $1 = (nx_reduction)v;
}

/* ---------------------------------------------------------------- out-parameters */
%define NX_PY_OUT_HANDLE(TYPE, STRUCT, FREE)
%typemap(in, numinputs=0) TYPE* out (TYPE tmp = NULL) { $1 = &tmp; }
%typemap(argout) TYPE* out {
  PyObject* o;
  if (tmp$argnum) {
    o = SWIG_NewPointerObj((void*)tmp$argnum, $descriptor(STRUCT*), SWIG_POINTER_OWN);
    if (!o) {
      FREE(tmp$argnum);
      SWIG_fail;
    }
  } else {
    o = SWIG_Py_Void();
  }
  $result = SWIG_Python_AppendOutput($result, o);
}
%enddef
NX_PY_OUT_HANDLE(nx_tensor, nx_tensor_s, nx_tensor_free)
NX_PY_OUT_HANDLE(nx_stream, nx_stream_s, nx_stream_free)
NX_PY_OUT_HANDLE(nx_event, nx_event_s, nx_event_free)
NX_PY_OUT_HANDLE(nx_safetensors, nx_safetensors_s, nx_safetensors_free)
NX_PY_OUT_HANDLE(nx_graph, nx_graph_s, nx_graph_free)
NX_PY_OUT_HANDLE(nx_module, nx_module_s, nx_module_free)
NX_PY_OUT_HANDLE(nx_optimizer, nx_optimizer_s, nx_optimizer_free)
NX_PY_OUT_HANDLE(nx_tokenizer, nx_tokenizer_s, nx_tokenizer_free)
NX_PY_OUT_HANDLE(nx_text_loader, nx_text_loader_s, nx_text_loader_free)
NX_PY_OUT_HANDLE(nx_comm, nx_comm_s, nx_comm_free)
NX_PY_OUT_HANDLE(nx_ddp, nx_ddp_s, nx_ddp_free)
NX_PY_OUT_HANDLE(nx_grad_scaler, nx_grad_scaler_s, nx_grad_scaler_free)
NX_PY_OUT_HANDLE(nx_plan, nx_plan_s, nx_plan_free)
NX_PY_OUT_HANDLE(nx_profile, nx_profile_s, nx_profile_free)

%define NX_PY_OUT_VALUE(TYPE, INIT, CONVERT)
%typemap(in, numinputs=0) TYPE* out (TYPE tmp = INIT) { $1 = ($1_ltype)&tmp; }
%typemap(argout) TYPE* out {
  PyObject* o = CONVERT;
  if (!o) SWIG_fail;
  $result = SWIG_Python_AppendOutput($result, o);
}
%enddef
NX_PY_OUT_VALUE(size_t, 0, PyLong_FromSize_t(tmp$argnum))
NX_PY_OUT_VALUE(int64_t, 0, PyLong_FromLongLong((long long)tmp$argnum))
NX_PY_OUT_VALUE(uint64_t, 0, PyLong_FromUnsignedLongLong((unsigned long long)tmp$argnum))
NX_PY_OUT_VALUE(int32_t, 0, PyLong_FromLong((long)tmp$argnum))
NX_PY_OUT_VALUE(bool, false, PyBool_FromLong(tmp$argnum))
NX_PY_OUT_VALUE(double, 0.0, PyFloat_FromDouble(tmp$argnum))
NX_PY_OUT_VALUE(nx_dtype, NX_F32, PyLong_FromLong((long)tmp$argnum))
NX_PY_OUT_VALUE(void*, NULL, PyLong_FromVoidPtr(tmp$argnum))
NX_PY_OUT_VALUE(const char*, NULL, (tmp$argnum ? PyUnicode_DecodeUTF8(tmp$argnum, (Py_ssize_t)strlen(tmp$argnum), "replace") : SWIG_Py_Void()))
/* Strings the engine allocates for the caller (nx_tensor_to_string): copied to str, then freed
 * with nx_string_free (freearg runs on success and on failure; a failed call wrote NULL). The
 * empty freearg keeps `const char** out` (static or owned strings) from matching char**'s: SWIG
 * would strip the const and free them. */
%typemap(freearg) const char** out ""
%typemap(in, numinputs=0) char** out (char* tmp = NULL) { $1 = &tmp; }
%typemap(argout) char** out {
  PyObject* o = tmp$argnum ? PyUnicode_DecodeUTF8(tmp$argnum, (Py_ssize_t)strlen(tmp$argnum), "replace") : SWIG_Py_Void();
  if (!o) SWIG_fail;
  $result = SWIG_Python_AppendOutput($result, o);
}
%typemap(freearg) char** out { nx_string_free(tmp$argnum); }

/* nx_text_loader_next(loader, device, stream) -> (inputs, targets): its two out-handles come first in C;
 * nx_module_parameter's name, nx_clip_grad_norm's norm */
%typemap(in, numinputs=0) (nx_tensor* inputs, nx_tensor* targets) (nx_tensor tin = NULL, nx_tensor ttg = NULL) {
  $1 = &tin;
  $2 = &ttg;
}
%typemap(argout) (nx_tensor* inputs, nx_tensor* targets) {
  PyObject* pair = nx_py_handle_pair(tin$argnum, ttg$argnum, $descriptor(nx_tensor_s*));
  if (!pair) SWIG_fail;
  $result = SWIG_Python_AppendOutput($result, pair);
}
%apply const char** out { const char** name };
%apply double* out { double* total_norm };
/* nx_grad_scaler_step(scaler, opt, stream) -> whether it stepped */
%apply bool* out { bool* stepped };
/* nx_add_rms_norm / nx_add_layer_norm return (out, sum_out); nx_quantize_8bit (out, scale) */
%apply nx_tensor* out { nx_tensor* sum_out };
%apply nx_tensor* out { nx_tensor* scale };

%typemap(in, numinputs=0) nx_device* out (nx_device tmp) {
  tmp.type = NX_CPU;
  tmp.index = 0;
  $1 = &tmp;
}
%typemap(argout) nx_device* out {
  PyObject* o = nx_py_device_to(tmp$argnum);
  if (!o) SWIG_fail;
  $result = SWIG_Python_AppendOutput($result, o);
}

%typemap(in, numinputs=0) nx_cuda_memory_stats* out (nx_cuda_memory_stats tmp) {
  memset(&tmp, 0, sizeof tmp);
  tmp.struct_size = (uint32_t)sizeof tmp;
  $1 = &tmp;
}
%typemap(argout) nx_cuda_memory_stats* out {
  PyObject* o = Py_BuildValue("{s:K,s:K,s:K,s:K}", "allocated_bytes", (unsigned long long)tmp$argnum.allocated_bytes,
                              "reserved_bytes", (unsigned long long)tmp$argnum.reserved_bytes,
                              "peak_allocated_bytes", (unsigned long long)tmp$argnum.peak_allocated_bytes,
                              "num_device_allocs", (unsigned long long)tmp$argnum.num_device_allocs);
  if (!o) SWIG_fail;
  $result = SWIG_Python_AppendOutput($result, o);
}

/* nx_profile_get_event(profile, i) -> dict of the event's fields (strings copied) */
%typemap(in, numinputs=0) nx_profile_event* out (nx_profile_event tmp) {
  memset(&tmp, 0, sizeof tmp);
  tmp.struct_size = sizeof tmp;
  $1 = &tmp;
}
%typemap(argout) nx_profile_event* out {
  PyObject* o = Py_BuildValue("{s:s,s:s,s:i,s:N,s:i,s:i,s:L,s:d,s:d,s:d,s:d,s:L}",
                              "name", tmp$argnum.name ? tmp$argnum.name : "",
                              "shapes", tmp$argnum.shapes ? tmp$argnum.shapes : "",
                              "kind", (int)tmp$argnum.kind,
                              "device", nx_py_device_to(tmp$argnum.device),
                              "thread", (int)tmp$argnum.thread, "depth", (int)tmp$argnum.depth,
                              "parent", (long long)tmp$argnum.parent,
                              "start_us", tmp$argnum.start_us, "duration_us", tmp$argnum.duration_us,
                              "device_start_us", tmp$argnum.device_start_us,
                              "device_duration_us", tmp$argnum.device_duration_us,
                              "bytes_allocated", (long long)tmp$argnum.bytes_allocated);
  if (!o) SWIG_fail;
  $result = SWIG_Python_AppendOutput($result, o);
}
/* nx_profile_get_memory_sample(profile, i) -> dict */
%typemap(in, numinputs=0) nx_profile_memory_sample* out (nx_profile_memory_sample tmp) {
  memset(&tmp, 0, sizeof tmp);
  tmp.struct_size = sizeof tmp;
  $1 = &tmp;
}
%typemap(argout) nx_profile_memory_sample* out {
  PyObject* o = Py_BuildValue("{s:d,s:N,s:L,s:L,s:L,s:L}", "time_us", tmp$argnum.time_us,
                              "device", nx_py_device_to(tmp$argnum.device), "delta", (long long)tmp$argnum.delta,
                              "allocated", (long long)tmp$argnum.allocated, "reserved", (long long)tmp$argnum.reserved,
                              "event", (long long)tmp$argnum.event);
  if (!o) SWIG_fail;
  $result = SWIG_Python_AppendOutput($result, o);
}

/* nx_plan_get_stats(plan) -> dict of the nx_plan_stats fields */
%typemap(in, numinputs=0) nx_plan_stats* out (nx_plan_stats tmp) {
  memset(&tmp, 0, sizeof tmp);
  tmp.struct_size = sizeof tmp;
  $1 = &tmp;
}
%typemap(argout) nx_plan_stats* out {
  PyObject* o = Py_BuildValue("{s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:O,s:L,s:L,s:L,s:L}",
                              "eager_runs", (long long)tmp$argnum.eager_runs,
                              "captures", (long long)tmp$argnum.captures,
                              "recaptures", (long long)tmp$argnum.recaptures,
                              "replays", (long long)tmp$argnum.replays,
                              "ops", (long long)tmp$argnum.ops,
                              "ops_eliminated", (long long)tmp$argnum.ops_eliminated,
                              "uploads", (long long)tmp$argnum.uploads,
                              "arena_bytes", (long long)tmp$argnum.arena_bytes,
                              "eager_peak_bytes", (long long)tmp$argnum.eager_peak_bytes,
                              "kept_bytes", (long long)tmp$argnum.kept_bytes,
                              "cuda_graph", tmp$argnum.cuda_graph ? Py_True : Py_False,
                              "fused_ops", (long long)tmp$argnum.fused_ops,
                              "fused_groups", (long long)tmp$argnum.fused_groups,
                              "held_bytes", (long long)tmp$argnum.held_bytes,
                              "evictions", (long long)tmp$argnum.evictions);
  if (!o) SWIG_fail;
  $result = SWIG_Python_AppendOutput($result, o);
}

/* nx_tensor_shape / nx_tensor_strides: the rank is asked first, a tuple comes back. */
%typemap(in, numinputs=1) (nx_tensor t, int64_t* out, size_t capacity) (void* argp = NULL, int64_t small[8], int64_t* buf = NULL, size_t nd = 0) {
  nx_status st;
  if (!SWIG_IsOK(SWIG_ConvertPtr($input, &argp, $descriptor(nx_tensor_s*), 0))) {
    SWIG_exception_fail(SWIG_TypeError, "in method '$symname', argument t must be a tensor handle");
  }
  $1 = (nx_tensor)argp;
  st = nx_tensor_ndim($1, &nd);
  if (st != NX_OK) {
    nx_py_raise(st);
    SWIG_fail;
  }
  buf = nd <= 8 ? small : (int64_t*)malloc(nd * sizeof(int64_t));
  if (!buf) {
    PyErr_NoMemory();
    SWIG_fail;
  }
  $2 = buf;
  $3 = nd;
}
%typemap(argout) (nx_tensor t, int64_t* out, size_t capacity) {
  PyObject* tup = PyTuple_New((Py_ssize_t)nd$argnum);
  size_t i;
  if (!tup) SWIG_fail;
  for (i = 0; i < nd$argnum; ++i) {
    PyObject* v = PyLong_FromLongLong((long long)buf$argnum[i]);
    if (!v) {
      Py_DECREF(tup);
      SWIG_fail;
    }
    PyTuple_SET_ITEM(tup, (Py_ssize_t)i, v);
  }
  $result = SWIG_Python_AppendOutput($result, tup);
}
%typemap(freearg) (nx_tensor t, int64_t* out, size_t capacity) {
  if (buf$argnum && buf$argnum != small$argnum) free(buf$argnum);
}

/* ---------------------------------------------------------------- devices */
%typemap(in) nx_device {
  if (nx_py_device_from(&$1, $input, $descriptor(nx_device*)) < 0) SWIG_fail;
}

/* ---------------------------------------------------------------- counted int64 arrays */
%typemap(in) (const int64_t* shape, size_t ndim) (nx_py_dims nxdims, int nx_have_dims = 0) {
  nx_have_dims = 1;
  if (nx_py_dims_from(&nxdims, $input, "$1_name") < 0) SWIG_fail;
  $1 = nxdims.n ? nxdims.data : NULL;
  $2 = nxdims.n;
}
%typemap(freearg) (const int64_t* shape, size_t ndim) { if (nx_have_dims$argnum) nx_py_dims_free(&nxdims$argnum); }
%apply (const int64_t* shape, size_t ndim) {
  (const int64_t* dims, size_t ndim),
  (const int64_t* axes, size_t naxes),
  (const int64_t* ids, size_t n),
  (const int64_t* prompt, size_t n)
};

/* ---------------------------------------------------------------- tensor arrays */
%typemap(in) (const nx_tensor* xs, size_t n) (nx_py_handles hs, int have_hs = 0) {
  have_hs = 1;
  if (nx_py_handles_from(&hs, $input, $descriptor(nx_tensor_s*), "$1_name") < 0) SWIG_fail;
  $1 = ($1_ltype)hs.data;
  $2 = hs.n;
}
%typemap(freearg) (const nx_tensor* xs, size_t n) { if (have_hs$argnum) nx_py_handles_free(&hs$argnum); }

%apply (const nx_tensor* xs, size_t n) {
  (const nx_tensor* inputs, size_t ninputs),
  (const nx_tensor* tangents, size_t ninputs),
  (const nx_tensor* tensors, size_t n),
  (const nx_tensor* params, size_t n),
  (const nx_tensor* exp_avg_sqs, size_t n)
};

/* Tensor arrays that share the count of a later array (nx_jvp's inputs, nx_adam_step_multi's
 * params, grads and exp_avgs): each takes its own sequence, converted to a counted array
 * (bindings/nexus.i), so that the group's check typemap can compare every length with the count
 * that the last array sets. */
%define NX_PY_SHARED_COUNT_ARRAY(PARAM)
%typemap(in) PARAM {
  $1 = ($1_ltype)nx_py_counted_from($input, $descriptor(nx_tensor_s*), "$1_name");
  if (!$1) SWIG_fail;
}
%typemap(freearg) PARAM { nx_counted_free($1); }
%enddef
NX_PY_SHARED_COUNT_ARRAY(const nx_tensor* inputs)
NX_PY_SHARED_COUNT_ARRAY(const nx_tensor* params)
NX_PY_SHARED_COUNT_ARRAY(const nx_tensor* grads)
NX_PY_SHARED_COUNT_ARRAY(const nx_tensor* exp_avgs)
/* nx_jvp(output, inputs, tangents, stream): two sequences of equal length */
%typemap(check) (const nx_tensor* inputs, const nx_tensor* tangents, size_t ninputs) {
  if (nx_counted_len($1) != $3) {
    PyErr_Format(nx_py_error_classes[NX_ERR_INVALID_ARGUMENT], "$symname: %zu inputs but %zu tangents",
                 nx_counted_len($1), (size_t)$3);
    SWIG_fail;
  }
}
/* nx_adam_step_multi(params, grads, exp_avgs, exp_avg_sqs, step, options, stream): four sequences
 * of equal length (the C call has one count for the four arrays). */
%typemap(check) (const nx_tensor* params, const nx_tensor* grads, const nx_tensor* exp_avgs,
                 const nx_tensor* exp_avg_sqs, size_t n) {
  if (nx_counted_len($1) != $5 || nx_counted_len($2) != $5 || nx_counted_len($3) != $5) {
    PyErr_Format(nx_py_error_classes[NX_ERR_INVALID_ARGUMENT],
                 "$symname: params, grads, exp_avgs and exp_avg_sqs must have one length; got %zu, %zu, %zu "
                 "and %zu", nx_counted_len($1), nx_counted_len($2), nx_counted_len($3), (size_t)$5);
    SWIG_fail;
  }
}
%typemap(in) (const nx_module* layers, size_t n) (nx_py_handles hs, int have_hs = 0) {
  have_hs = 1;
  if (nx_py_handles_from(&hs, $input, $descriptor(nx_module_s*), "$1_name") < 0) SWIG_fail;
  $1 = ($1_ltype)hs.data;
  $2 = hs.n;
}
%typemap(freearg) (const nx_module* layers, size_t n) { if (have_hs$argnum) nx_py_handles_free(&hs$argnum); }

/* nx_module_parameters(m) -> list of handles (each retained, then the engine's array is freed) */
%typemap(in, numinputs=0) (nx_tensor** out, size_t* n) (nx_tensor* arr = NULL, size_t cnt = 0) {
  $1 = &arr;
  $2 = &cnt;
}
%typemap(argout) (nx_tensor** out, size_t* n) {
  size_t i;
  nx_tensor* mine = (nx_tensor*)calloc(cnt$argnum ? cnt$argnum : 1, sizeof(nx_tensor));
  PyObject* list = NULL;
  if (mine) {
    for (i = 0; i < cnt$argnum; ++i)
      if (nx_tensor_retain(&mine[i], arr$argnum[i]) != NX_OK) mine[i] = NULL;
    list = nx_py_handle_list(mine, cnt$argnum, $descriptor(nx_tensor_s*));
    free(mine);
  } else {
    PyErr_NoMemory();
  }
  nx_tensor_array_free(arr$argnum, cnt$argnum);
  arr$argnum = NULL;
  if (!list) SWIG_fail;
  $result = SWIG_Python_AppendOutput($result, list);
}
%typemap(freearg) (nx_tensor** out, size_t* n) {
  if (arr$argnum) nx_tensor_array_free(arr$argnum, cnt$argnum);
}

/* text in: str (UTF-8) or any bytes-like object */
%typemap(in) (const char* text, size_t len) (Py_buffer tview, int have_tview = 0) {
  if (PyUnicode_Check($input)) {
    Py_ssize_t sz = 0;
    $1 = (char*)PyUnicode_AsUTF8AndSize($input, &sz);
    if (!$1) SWIG_fail;
    $2 = (size_t)sz;
  } else {
    if (PyObject_GetBuffer($input, &tview, PyBUF_SIMPLE) < 0) SWIG_fail;
    have_tview = 1;
    $1 = (char*)tview.buf;
    $2 = (size_t)tview.len;
  }
}
%typemap(freearg) (const char* text, size_t len) {
  if (have_tview$argnum) PyBuffer_Release(&tview$argnum);
}

/* nx_tokenizer_decode(tok, ids) -> bytes (the buffer grows to the size the engine asks for) */
%typemap(in, numinputs=0) (char* buf, size_t capacity, size_t* len) (size_t outlen = 0) {
  $2 = 4096;
  $1 = (char*)malloc($2);
  if (!$1) {
    PyErr_NoMemory();
    SWIG_fail;
  }
  $3 = &outlen;
}
%typemap(argout) (char* buf, size_t capacity, size_t* len) {
  PyObject* b = PyBytes_FromStringAndSize($1, (Py_ssize_t)outlen$argnum);
  if (!b) SWIG_fail;
  $result = SWIG_Python_AppendOutput($result, b);
}
%typemap(freearg) (char* buf, size_t capacity, size_t* len) { free($1); }
%exception nx_tokenizer_decode {
  Py_BEGIN_ALLOW_THREADS
  $action
  if (result == NX_ERR_INVALID_ARGUMENT && *arg6 > arg5) { /* too small: retry with the size asked */
    char* bigger = (char*)realloc(arg4, *arg6);
    if (bigger) {
      arg4 = bigger;
      arg5 = *arg6;
      $action
    }
  }
  Py_END_ALLOW_THREADS
}

/* Arrays of out-handles (nx_split's outs, nx_autograd_grad's grads): not passed; allocated once the
 * count is known (check), returned as a list of owned handles (None for NULL entries). */
%typemap(in, numinputs=0) nx_tensor* outs, nx_tensor* grads { $1 = NULL; }
%typemap(freearg) nx_tensor* outs, nx_tensor* grads { free($1); }

/* nx_split(x, sizes, axis, stream) -> list */
%apply (const int64_t* shape, size_t ndim) { (const int64_t* sizes, size_t nsizes) };
%typemap(check) (nx_tensor* outs, nx_tensor x, const int64_t* sizes, size_t nsizes) {
  $1 = (nx_tensor*)calloc($4 ? $4 : 1, sizeof(nx_tensor));
  if (!$1) {
    PyErr_NoMemory();
    SWIG_fail;
  }
}
%typemap(argout) (nx_tensor* outs, nx_tensor x, const int64_t* sizes, size_t nsizes) {
  PyObject* list = nx_py_handle_list($1, $4, $descriptor(nx_tensor_s*));
  if (!list) SWIG_fail;
  $result = SWIG_Python_AppendOutput($result, list);
}

/* nx_autograd_grad(root, grad, inputs, options, stream) -> list */
%typemap(check) (nx_tensor* grads, nx_tensor root, nx_tensor grad, const nx_tensor* inputs, size_t ninputs) {
  $1 = (nx_tensor*)calloc($5 ? $5 : 1, sizeof(nx_tensor));
  if (!$1) {
    PyErr_NoMemory();
    SWIG_fail;
  }
}
%typemap(argout) (nx_tensor* grads, nx_tensor root, nx_tensor grad, const nx_tensor* inputs, size_t ninputs) {
  PyObject* list = nx_py_handle_list($1, $5, $descriptor(nx_tensor_s*));
  if (!list) SWIG_fail;
  $result = SWIG_Python_AppendOutput($result, list);
}

/* nx_checkpoint(noutputs, inputs, fn, stream) -> list. fn(list of handles) returns a sequence
 * of noutputs handles. The C API has no destructor for user_data and calls fn again inside
 * backward, whenever that happens: the callable is therefore kept alive for the life of the
 * process (one reference per nx_checkpoint call). */
%typemap(in) (nx_tensor* outputs, size_t noutputs) (size_t nout = 0) {
  long long v = PyLong_AsLongLong($input);
  if (v == -1 && PyErr_Occurred()) SWIG_fail;
  if (v < 0 || v > 4096) {
    PyErr_Format(PyExc_ValueError, "noutputs must be in 0..4096, got %lld", v);
    SWIG_fail;
  }
  nout = (size_t)v;
  $1 = (nx_tensor*)calloc(nout ? nout : 1, sizeof(nx_tensor));
  if (!$1) {
    PyErr_NoMemory();
    SWIG_fail;
  }
  $2 = nout;
}
%typemap(argout) (nx_tensor* outputs, size_t noutputs) {
  PyObject* list = nx_py_handle_list($1, $2, $descriptor(nx_tensor_s*));
  if (!list) SWIG_fail;
  $result = SWIG_Python_AppendOutput($result, list);
}
%typemap(freearg) (nx_tensor* outputs, size_t noutputs) { free($1); }
%typemap(in) (nx_checkpoint_fn fn, void* user_data) {
  if (!PyCallable_Check($input)) {
    SWIG_exception_fail(SWIG_TypeError, "in method '$symname', fn must be callable");
  }
  $1 = nx_py_checkpoint_trampoline;
  $2 = (void*)$input;
}
%typemap(check) (nx_checkpoint_fn fn, void* user_data) {
  Py_INCREF((PyObject*)$2); /* kept: see above */
}

/* nx_plan_create(fn, noutputs, options) -> plan; nx_plan_run(plan, noutputs, inputs, stream) -> list
 * (the nx_checkpoint conventions above). The plan calls fn again whenever it captures a step, so
 * the plan handle keeps a reference to the callable (attribute _nx_step_fn of the handle object),
 * dropped with the handle; an exception that fn raises propagates out of nx_plan_run. SWIG's
 * handle objects take no part in the cycle collector: a callable that refers back to its plan
 * handle keeps both alive (nexusgrad.compile's callable refers to its owner weakly). */
%typemap(in) (nx_plan_fn fn, void* user_data) {
  if (!PyCallable_Check($input)) {
    SWIG_exception_fail(SWIG_TypeError, "in method '$symname', fn must be callable");
  }
  $1 = nx_py_plan_trampoline;
  $2 = (void*)$input; /* borrowed until the argout below stores it on the new handle */
}
%typemap(argout) (nx_plan_fn fn, void* user_data) {
  /* $result is the plan handle (the out-parameter comes first); it owns the reference */
  if (PyObject_SetAttrString($result, "_nx_step_fn", (PyObject*)$2) < 0) {
    Py_DECREF($result); /* frees the plan */
    SWIG_fail;
  }
}

/* nx_safetensors_save(path, names, tensors): a sequence of str and one of tensors */
%typemap(in) const char* const* names (PyObject* nameseq = NULL, Py_ssize_t nnames = 0) {
  Py_ssize_t i;
  nameseq = PySequence_Fast($input, "names must be a sequence of str");
  if (!nameseq) SWIG_fail;
  nnames = PySequence_Fast_GET_SIZE(nameseq);
  $1 = ($1_ltype)calloc(nnames ? (size_t)nnames : 1, sizeof(char*));
  if (!$1) {
    PyErr_NoMemory();
    SWIG_fail;
  }
  for (i = 0; i < nnames; ++i) {
    $1[i] = (char*)PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(nameseq, i)); /* valid while nameseq lives */
    if (!$1[i]) SWIG_fail;
  }
}
%typemap(freearg) const char* const* names {
  free((void*)$1);
  Py_XDECREF(nameseq$argnum);
}
%typemap(check) (const char* const* names, const nx_tensor* tensors, size_t n) {
  if ((size_t)nnames$argnum != $3) {
    PyErr_Format(PyExc_ValueError, "$symname: %zd names but %zu tensors", nnames$argnum, (size_t)$3);
    SWIG_fail;
  }
}

/* ---------------------------------------------------------------- host buffers */
/* nx_tensor_from_data(data, shape, dtype, device, stream); data is any C-contiguous buffer of
 * exactly prod(shape) * nx_dtype_size(dtype) bytes (checked: the engine reads that many). */
%typemap(in) const void* data (Py_buffer view, int have_view = 0) {
  if (PyObject_GetBuffer($input, &view, PyBUF_C_CONTIGUOUS) < 0) SWIG_fail;
  have_view = 1;
  $1 = view.buf;
}
%typemap(freearg) const void* data {
  if (have_view$argnum) PyBuffer_Release(&view$argnum);
}
%typemap(check) (const void* data, const int64_t* shape, size_t ndim, nx_dtype dtype) {
  size_t need = nx_dtype_size($4), i;
  int overflow = 0;
  for (i = 0; i < $3; ++i) {
    if ($2[i] < 0) {
      overflow = 1; /* the engine reports the negative dimension */
      break;
    }
    if ($2[i] != 0 && need > ((size_t)-1) / (size_t)$2[i]) {
      overflow = 1;
      break;
    }
    need *= (size_t)$2[i];
  }
  if (need && !overflow && (size_t)view$argnum.len != need) {
    PyErr_Format(PyExc_ValueError, "$symname: the buffer has %zd bytes but shape and dtype need %zu",
                 view$argnum.len, need);
    SWIG_fail;
  }
  if (overflow) $1 = NULL; /* let the engine name the problem without reading the buffer */
}

/* nx_tensor_copy_to_host: (t, dst, stream); dst is a writable C-contiguous buffer whose size the
 * engine checks against the tensor. */
%typemap(in) (void* dst, size_t nbytes) (Py_buffer view, int have_view = 0) {
  if (PyObject_GetBuffer($input, &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) SWIG_fail;
  have_view = 1;
  $1 = view.buf;
  $2 = (size_t)view.len;
}
%typemap(freearg) (void* dst, size_t nbytes) {
  if (have_view$argnum) PyBuffer_Release(&view$argnum);
}

/* ---------------------------------------------------------------- DLPack */
/* nx_tensor_to_dlpack(t) -> PyCapsule "dltensor", nx_tensor_to_dlpack_versioned(t) -> PyCapsule
 * "dltensor_versioned" (deleted by its destructor unless consumed); nx_tensor_from_dlpack(capsule)
 * and nx_tensor_from_dlpack_versioned(capsule) take a capsule of that name not yet consumed and
 * rename it "used_dltensor" / "used_dltensor_versioned" once they own its struct. */
%define NX_PY_DLPACK(TYPE, NAME, DESTRUCTOR)
%typemap(in, numinputs=0) TYPE** out (TYPE* tmp = NULL) { $1 = &tmp; }
%typemap(argout) TYPE** out {
  PyObject* cap = PyCapsule_New((void*)tmp$argnum, NAME, DESTRUCTOR);
  if (!cap) {
    if (tmp$argnum && tmp$argnum->deleter) tmp$argnum->deleter(tmp$argnum);
    SWIG_fail;
  }
  $result = SWIG_Python_AppendOutput($result, cap);
}
%typemap(in) TYPE* managed {
  if (!PyCapsule_IsValid($input, NAME)) {
    SWIG_exception_fail(SWIG_ValueError, "in method '$symname', expected a DLPack capsule named '" NAME
                        "' (not yet consumed)");
  }
  $1 = (TYPE*)PyCapsule_GetPointer($input, NAME);
  if (!$1) SWIG_fail;
}
%typemap(argout) TYPE* managed {
  if (PyCapsule_SetName($input, "used_" NAME) < 0) SWIG_fail;
}
%enddef
NX_PY_DLPACK(nx_dl_managed_tensor, "dltensor", nx_py_dltensor_destructor)
NX_PY_DLPACK(nx_dl_managed_tensor_versioned, "dltensor_versioned", nx_py_dltensor_versioned_destructor)

/* nx_py_buffer_to_dlpack(obj): a "dltensor" capsule sharing the memory of a writable buffer
 * (NumPy array, bytearray, array.array...) without copying; the buffer is released (and obj may
 * die) when the consumer calls the deleter. Used by Tensor.from_numpy. Not part of nexus.h. */
%{
typedef struct {
  Py_buffer view;
  nx_dl_managed_tensor managed;
  int64_t dims[1]; /* shape then strides, 2 * ndim entries */
} nx_py_buffer_ctx;

static void nx_py_buffer_deleter(nx_dl_managed_tensor* self) {
  nx_py_buffer_ctx* ctx = (nx_py_buffer_ctx*)self->manager_ctx;
  if (Py_IsInitialized()) {
    PyGILState_STATE gil = PyGILState_Ensure();
    PyBuffer_Release(&ctx->view);
    PyGILState_Release(gil);
  }
  free(ctx);
}

static PyObject* nx_py_buffer_to_dlpack(PyObject* obj) {
  Py_buffer view;
  const char* f;
  nx_dl_data_type dt = {0, 0, 1};
  nx_py_buffer_ctx* ctx;
  int i, nd;
  PyObject* cap;
  if (PyObject_GetBuffer(obj, &view, PyBUF_RECORDS) < 0) {
    /* A read-only buffer is reported as BufferError (the caller then copies); anything else as is. */
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    if (PyObject_GetBuffer(obj, &view, PyBUF_RECORDS_RO) == 0) {
      PyBuffer_Release(&view);
      Py_XDECREF(et);
      Py_XDECREF(ev);
      Py_XDECREF(tb);
      PyErr_SetString(PyExc_BufferError, "the buffer is read-only and cannot be shared");
    } else {
      PyErr_Clear();
      PyErr_Restore(et, ev, tb);
    }
    return NULL;
  }
  f = view.format ? view.format : "B";
  if (*f == '@' || *f == '=' || *f == '<' || (*f == '|')) ++f;
  if (f[0] && !f[1]) {
    switch (f[0]) {
      case 'f': if (view.itemsize == 4) dt.code = NX_DL_FLOAT, dt.bits = 32; break;
      case 'd': if (view.itemsize == 8) dt.code = NX_DL_FLOAT, dt.bits = 64; break;
      case 'e': if (view.itemsize == 2) dt.code = NX_DL_FLOAT, dt.bits = 16; break;
      case 'i': case 'l': case 'q':
        if (view.itemsize == 4 || view.itemsize == 8) dt.code = NX_DL_INT, dt.bits = (uint8_t)(8 * view.itemsize);
        break;
      case '?': if (view.itemsize == 1) dt.code = NX_DL_BOOL, dt.bits = 8; break;
      default: break;
    }
  }
  if (!dt.bits) {
    PyErr_Format(nx_py_error_classes[NX_ERR_DTYPE], "buffer format '%s' (itemsize %zd) has no NexusGrad dtype "
                 "(supported: float16/32/64, int32/64, bool)", view.format ? view.format : "B", view.itemsize);
    PyBuffer_Release(&view);
    return NULL;
  }
  if (((uintptr_t)view.buf) % (uintptr_t)view.itemsize) {
    PyErr_SetString(nx_py_error_classes[NX_ERR_INVALID_ARGUMENT], "the buffer is not aligned to its item size");
    PyBuffer_Release(&view);
    return NULL;
  }
  nd = view.ndim;
  ctx = (nx_py_buffer_ctx*)calloc(1, sizeof(nx_py_buffer_ctx) + sizeof(int64_t) * (size_t)(2 * nd));
  if (!ctx) {
    PyBuffer_Release(&view);
    return PyErr_NoMemory();
  }
  for (i = 0; i < nd; ++i) {
    Py_ssize_t st = view.strides ? view.strides[i] : 0;
    ctx->dims[i] = (int64_t)view.shape[i];
    if (view.strides && (st < 0 || st % view.itemsize)) {
      PyErr_SetString(nx_py_error_classes[NX_ERR_NOT_IMPLEMENTED],
                      "buffers with negative strides or strides that are not a multiple of the item size "
                      "cannot be shared (copy the array first)");
      PyBuffer_Release(&view);
      free(ctx);
      return NULL;
    }
    ctx->dims[nd + i] = (int64_t)(st / view.itemsize);
  }
  ctx->view = view;
  ctx->managed.dl_tensor.data = view.buf;
  ctx->managed.dl_tensor.device.device_type = NX_CPU;
  ctx->managed.dl_tensor.device.device_id = 0;
  ctx->managed.dl_tensor.ndim = nd;
  ctx->managed.dl_tensor.dtype = dt;
  ctx->managed.dl_tensor.shape = nd ? ctx->dims : NULL;
  ctx->managed.dl_tensor.strides = (nd && view.strides) ? ctx->dims + nd : NULL;
  ctx->managed.dl_tensor.byte_offset = 0;
  ctx->managed.manager_ctx = ctx;
  ctx->managed.deleter = nx_py_buffer_deleter;
  cap = PyCapsule_New(&ctx->managed, "dltensor", nx_py_dltensor_destructor);
  if (!cap) nx_py_buffer_deleter(&ctx->managed);
  return cap;
}
%}
%noexception nx_py_buffer_to_dlpack;
PyObject* nx_py_buffer_to_dlpack(PyObject* obj);

/* nx_py_capsule_name(obj): the name of a PyCapsule ("dltensor", "used_dltensor_versioned"...),
 * or None for anything else; nexusgrad.from_dlpack picks the import function by it. */
%{
static PyObject* nx_py_capsule_name(PyObject* obj) {
  const char* name;
  if (!PyCapsule_CheckExact(obj)) Py_RETURN_NONE;
  name = PyCapsule_GetName(obj);
  if (!name) {
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
  }
  return PyUnicode_FromString(name);
}
%}
%noexception nx_py_capsule_name;
PyObject* nx_py_capsule_name(PyObject* obj);

/* The DLPack structs are C plumbing; Python sees capsules. */
%ignore nx_dl_device;
%ignore nx_dl_data_type;
%ignore nx_dl_tensor;
%ignore nx_dl_managed_tensor_s;
%ignore nx_dl_managed_tensor;
%ignore nx_dl_version;
%ignore nx_dl_managed_tensor_versioned_s;
%ignore nx_dl_managed_tensor_versioned;
