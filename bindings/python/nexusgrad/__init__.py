"""NexusGrad for Python: tensors, autodiff and the ops of the NexusGrad engine.

    import nexusgrad as ng
    x = ng.Tensor.randn([2, 4], device='cpu')
    w = ng.Tensor.randn([4, 3], requires_grad=True, device='cpu')
    loss = ng.sum(ng.matmul(x, w))
    ng.backward(loss)
    print(w.grad)

Layers: ``nexusgrad._nexus`` is the SWIG wrapper of nexus.h (one function per C function, status
codes turned into exceptions, out-parameters returned); this package adds :class:`Tensor` and
PyTorch-style functions on top, and :func:`compile` for whole training steps. Errors are
:class:`Error` subclasses that also derive from the matching built-in exception (ShapeError is a
ValueError, DTypeError a TypeError...).
"""
from __future__ import annotations

from . import _nexus
from ._nexus import (Error, InvalidArgumentError, ShapeError, DTypeError, DeviceError, OutOfMemoryError,
                     CudaError, FileError, NotSupportedError, StateError, InternalError)

if _nexus.nx_abi_version() != _nexus.NX_ABI_VERSION:  # the wrapper and the library must agree
    raise ImportError(f"nexusgrad: libnexus has ABI version {_nexus.nx_abi_version()} but the bindings were "
                      f"built for {_nexus.NX_ABI_VERSION}; rebuild the bindings")

Error.message = property(lambda self: str(self.args[0]) if self.args else "",  # type: ignore[attr-defined]
                         doc="The engine's message (nx_last_error_message() at the time of the failure).")

from ._dtypes import (DType, float32, float64, float16, bfloat16, int32, int64, bool_,  # noqa: E402
                      int8, float8_e4m3fn, float8_e5m2)
from .tensor import (Tensor, device, tensor, as_tensor, from_numpy, from_dlpack, no_grad, enable_grad,  # noqa: E402
                     inference_mode, autocast, set_grad_enabled, is_grad_enabled, set_printoptions, manual_seed,
                     zeros, ones, full, rand, randn, arange, zeros_like, ones_like, full_like, rand_like, randn_like,
                     empty)
from .functional import *  # noqa: E402,F401,F403
from .functional import __all__ as _functional_all  # noqa: E402
from .functional import save, load  # noqa: E402
from . import nn  # noqa: E402
from . import amp  # noqa: E402
from . import optim  # noqa: E402
from . import data  # noqa: E402
from .compiler import compile, CompiledStep  # noqa: E402
from . import profiler  # noqa: E402

# PyTorch's dtype aliases (nexusgrad.bool, nexusgrad.float...), as attributes of the package.
globals().update({"bool": bool_, "float": float32, "double": float64, "half": float16, "long": int64,
                  "int": int32})

__version__ = _nexus.nx_version_string()

__all__ = ["Error", "InvalidArgumentError", "ShapeError", "DTypeError", "DeviceError", "OutOfMemoryError",
           "CudaError", "FileError", "NotSupportedError", "StateError", "InternalError",
           "DType", "float32", "float64", "float16", "bfloat16", "int32", "int64", "bool_",
           "int8", "float8_e4m3fn", "float8_e5m2",
           "Tensor", "device", "tensor", "as_tensor", "from_numpy", "from_dlpack", "no_grad", "enable_grad",
           "inference_mode", "autocast", "set_grad_enabled", "is_grad_enabled", "set_printoptions", "manual_seed",
           "zeros", "ones", "full", "rand", "randn", "arange", "zeros_like", "ones_like", "full_like", "rand_like",
           "randn_like", "empty",
           "save", "load", "nn", "amp", "optim", "data", "compile", "CompiledStep", *_functional_all]
