"""The Tensor class of nexusgrad: a Python object that owns one ``nx_tensor`` handle.

The handle is freed (``nx_tensor_free``) exactly once, when the Tensor and every NumPy array or
DLPack consumer that shares its memory are gone. Every engine error raises a subclass of
:class:`nexusgrad.Error` carrying the engine's message.
"""
from __future__ import annotations

import operator
from typing import Any, Iterator, List, Optional, Sequence, Tuple, Union

from . import _nexus as _C
from ._dtypes import (DType, DTypeLike, DeviceLike, BY_VALUE, bool_, float32, float64, int64, bfloat16,
                      to_dtype, to_device)

__all__ = ["Tensor", "device", "tensor", "as_tensor", "from_numpy", "from_dlpack", "no_grad", "enable_grad",
           "inference_mode", "autocast", "set_grad_enabled", "is_grad_enabled", "set_printoptions", "manual_seed",
           "zeros", "ones", "full", "rand", "randn", "arange", "zeros_like", "ones_like", "full_like", "rand_like",
           "randn_like", "empty"]

_new = object.__new__
_INT64_MAX = (1 << 63) - 1
ShapeLike = Union[int, Sequence[int]]
Scalar = Union[int, float, bool]


def _wrap(h: Any) -> "Tensor":
    t = _new(Tensor)
    t._h = h
    return t


def _shape_arg(size: Tuple[Any, ...]) -> List[int]:
    """randn(2, 3), randn([2, 3]) and randn((2, 3)) all mean shape [2, 3]."""
    if len(size) == 1 and not isinstance(size[0], int) and hasattr(size[0], "__len__"):
        return [operator.index(s) for s in size[0]]
    return [operator.index(s) for s in size]


class device(str):
    """A device, as ``torch.device``: ``device("cuda", 0)``, ``device("cuda:1")``, ``device("cpu")``.

    It is also the plain string "cpu" or "cuda:N" (``t.device == "cpu"`` holds and every function
    taking a device accepts it), with torch.device's ``.type`` and ``.index``. "cuda" is normalized
    to "cuda:0", so its index is 0 where torch's is None."""

    __slots__ = ()

    def __new__(cls, type_or_name: Any = "cpu", index: Optional[int] = None) -> "device":
        name = type_or_name if index is None else f"{type_or_name}:{operator.index(index)}"
        return str.__new__(cls, to_device(name))

    @property
    def type(self) -> str:
        """'cpu' or 'cuda'."""
        return "cpu" if self == "cpu" else "cuda"

    @property
    def index(self) -> Optional[int]:
        """The CUDA device number, or None on the CPU."""
        return None if self == "cpu" else int(self[5:])

    def __repr__(self) -> str:
        return "device(type='cpu')" if self == "cpu" else f"device(type='cuda', index={self.index})"


class Tensor:
    """An n-dimensional array on the CPU or a CUDA device, with reverse-mode autodiff.

    Construct with :func:`nexusgrad.tensor` (copies data), :meth:`Tensor.from_numpy` (shares a
    NumPy array's memory), the factories (:meth:`Tensor.randn`, :meth:`Tensor.zeros`...), or
    ``Tensor(data, dtype=None, device='cpu', requires_grad=False)`` (same as ``tensor``).
    """

    # _param: set (True) by nexusgrad.nn.Parameter on the tensors it marks; unset on every other
    # tensor, so _wrap stays one allocation.
    __slots__ = ("_h", "_param", "__weakref__")
    __array_priority__ = 1000  # NumPy defers binary operators to Tensor
    __hash__ = object.__hash__  # identity, as in PyTorch (== is elementwise)

    def __init__(self, data: Any, dtype: Optional[DTypeLike] = None, device: DeviceLike = "cpu",
                 requires_grad: bool = False) -> None:
        self._h = tensor(data, dtype=dtype, device=device, requires_grad=requires_grad)._h

    # ------------------------------------------------------------ factories
    @staticmethod
    def randn(*size: Any, dtype: Optional[DTypeLike] = None, device: DeviceLike = "cpu",
              requires_grad: bool = False) -> "Tensor":
        """Standard normal samples (reproducible under :func:`manual_seed`)."""
        return randn(*size, dtype=dtype, device=device, requires_grad=requires_grad)

    @staticmethod
    def rand(*size: Any, dtype: Optional[DTypeLike] = None, device: DeviceLike = "cpu",
             requires_grad: bool = False) -> "Tensor":
        """Uniform samples in [0, 1)."""
        return rand(*size, dtype=dtype, device=device, requires_grad=requires_grad)

    @staticmethod
    def zeros(*size: Any, dtype: Optional[DTypeLike] = None, device: DeviceLike = "cpu",
              requires_grad: bool = False) -> "Tensor":
        """A tensor filled with 0."""
        return zeros(*size, dtype=dtype, device=device, requires_grad=requires_grad)

    @staticmethod
    def ones(*size: Any, dtype: Optional[DTypeLike] = None, device: DeviceLike = "cpu",
             requires_grad: bool = False) -> "Tensor":
        """A tensor filled with 1."""
        return ones(*size, dtype=dtype, device=device, requires_grad=requires_grad)

    @staticmethod
    def full(size: ShapeLike, fill_value: Scalar, dtype: Optional[DTypeLike] = None, device: DeviceLike = "cpu",
             requires_grad: bool = False) -> "Tensor":
        """A tensor filled with fill_value."""
        return full(size, fill_value, dtype=dtype, device=device, requires_grad=requires_grad)

    @staticmethod
    def arange(start: Scalar, end: Optional[Scalar] = None, step: Scalar = 1, dtype: Optional[DTypeLike] = None,
               device: DeviceLike = "cpu", requires_grad: bool = False) -> "Tensor":
        """start, start+step, ... < end (like torch.arange; int64 when all arguments are ints)."""
        return arange(start, end, step, dtype=dtype, device=device, requires_grad=requires_grad)

    @staticmethod
    def from_numpy(array: Any, device: DeviceLike = "cpu") -> "Tensor":
        """See :func:`nexusgrad.from_numpy` (shares memory on the CPU)."""
        return from_numpy(array, device=device)

    @staticmethod
    def from_dlpack(obj: Any) -> "Tensor":
        """See :func:`nexusgrad.from_dlpack`."""
        return from_dlpack(obj)

    # ------------------------------------------------------------ properties
    @property
    def shape(self) -> Tuple[int, ...]:
        """The dimensions, as a tuple of ints."""
        return _C.nx_tensor_shape(self._h)

    def size(self, dim: Optional[int] = None) -> Union[Tuple[int, ...], int]:
        """The shape, or the size of one dimension."""
        s = _C.nx_tensor_shape(self._h)
        return s if dim is None else s[dim]

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return _C.nx_tensor_ndim(self._h)

    def dim(self) -> int:
        """The number of dimensions."""
        return _C.nx_tensor_ndim(self._h)

    def numel(self) -> int:
        """The number of elements."""
        return _C.nx_tensor_numel(self._h)

    def stride(self, dim: Optional[int] = None) -> Union[Tuple[int, ...], int]:
        """Strides in elements."""
        s = _C.nx_tensor_strides(self._h)
        return s if dim is None else s[dim]

    def is_contiguous(self) -> bool:
        """Whether the elements are laid out row-major without gaps."""
        return _C.nx_tensor_is_contiguous(self._h)

    @property
    def dtype(self) -> DType:
        """The element type."""
        return BY_VALUE[_C.nx_tensor_dtype(self._h)]

    @property
    def device(self) -> device:
        """'cpu' or 'cuda:N', as a :class:`nexusgrad.device` (a str with .type and .index)."""
        return str.__new__(device, _C.nx_tensor_device(self._h))

    @property
    def is_cuda(self) -> bool:
        return _C.nx_tensor_device(self._h) != "cpu"

    def is_floating_point(self) -> bool:
        return BY_VALUE[_C.nx_tensor_dtype(self._h)].is_floating_point

    def element_size(self) -> int:
        return BY_VALUE[_C.nx_tensor_dtype(self._h)].itemsize

    def data_ptr(self) -> int:
        """Address of the first element (CPU tensors only)."""
        return _C.nx_tensor_data_ptr(self._h)

    # ------------------------------------------------------------ autograd
    @property
    def requires_grad(self) -> bool:
        """Whether gradients flow to this tensor (settable on floating-point leaves)."""
        return _C.nx_tensor_get_requires_grad(self._h)

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        _C.nx_tensor_set_requires_grad(self._h, bool(value))

    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        """Sets requires_grad in place and returns self."""
        _C.nx_tensor_set_requires_grad(self._h, bool(requires_grad))
        return self

    @property
    def is_leaf(self) -> bool:
        """True for tensors not produced by a recorded op."""
        return _C.nx_tensor_is_leaf(self._h)

    @property
    def grad(self) -> Optional["Tensor"]:
        """The gradient accumulated by backward, or None (a property, as torch's ``Tensor.grad``)."""
        h = _C.nx_tensor_grad(self._h)
        return None if h is None else _wrap(h)

    @grad.setter
    def grad(self, value: None) -> None:
        """``t.grad = None`` drops the gradient (torch's ``zero_grad(set_to_none=True)``); assigning a
        tensor is not supported."""
        if value is not None:
            raise TypeError("Tensor.grad can only be set to None (which drops the gradient)")
        _C.nx_tensor_zero_grad(self._h)

    def zero_grad(self) -> None:
        """Drops the accumulated gradient."""
        _C.nx_tensor_zero_grad(self._h)

    def backward(self, gradient: Optional["Tensor"] = None, retain_graph: bool = False,
                 create_graph: bool = False) -> None:
        """Backpropagates into the .grad of every leaf that requires grad (see nexusgrad.backward)."""
        g = None if gradient is None else _as_tensor(gradient, self)._h
        _C.nx_backward(self._h, g, _backward_options(retain_graph, create_graph), None)

    def detach(self) -> "Tensor":
        """A view of the same data outside the graph."""
        return _wrap(_C.nx_tensor_detach(self._h))

    @property
    def data(self) -> "Tensor":
        """A view of the same data outside the graph (as torch's ``t.data``): in-place writes to it
        change this tensor without autodiff seeing them, even on a parameter."""
        return _wrap(_C.nx_tensor_detach(self._h))

    @data.setter
    def data(self, value: Any) -> None:
        """``t.data = src`` copies src's values into t (same shape; cast to t's dtype), outside the
        graph. torch instead rebinds t to src's storage, which may change shape, dtype and device;
        the engine cannot rebind a tensor that other handles (an optimizer's) share."""
        src = _as_tensor(value, self)
        if _C.nx_tensor_shape(src._h) != _C.nx_tensor_shape(self._h):
            raise _C.ShapeError(f"Tensor.data: cannot assign a tensor of shape {src.shape} to one of shape "
                                f"{self.shape} (the engine copies in place; make a new tensor instead)")
        _C.nx_copy_(_C.nx_tensor_detach(self._h), _C.nx_tensor_detach(src._h), None)

    @property
    def grad_fn(self) -> Optional[str]:
        """Name of the graph node that produced this tensor ('MatmulBackward'...), or None."""
        if _C.nx_tensor_is_leaf(self._h):
            return None
        g = _C.nx_graph_create(self._h)
        return _C.nx_graph_node_name(g, 0) if _C.nx_graph_node_count(g) else None

    # ------------------------------------------------------------ conversion
    def to(self, *args: Any, dtype: Optional[DTypeLike] = None, device: DeviceLike = None) -> "Tensor":
        """t.to('cuda'), t.to(nexusgrad.float64), t.to('cpu', nexusgrad.float16). Returns self when
        nothing changes; otherwise a copy (recorded by autodiff)."""
        for a in args:
            if isinstance(a, tuple) or type(a).__name__ == "device" or \
                    (isinstance(a, str) and (a.startswith("cpu") or a.startswith("cuda"))):
                device = a
            elif type(a) is Tensor:  # t.to(other): other's dtype and device
                dtype, device = a.dtype, a.device
            else:
                dtype = a
        h = self._h
        if dtype is not None:
            d = to_dtype(dtype)
            if d.value != _C.nx_tensor_dtype(h):
                h = _C.nx_cast(h, d.value, None)
        if device is not None:
            dev = to_device(device)
            if dev != _C.nx_tensor_device(h):
                h = _C.nx_tensor_to(h, dev, None)
        return self if h is self._h else _wrap(h)

    def cpu(self) -> "Tensor":
        return self.to("cpu")

    def cuda(self, device: int = 0) -> "Tensor":
        return self.to(f"cuda:{device}")

    def float(self) -> "Tensor":
        return self.to(dtype=float32)

    def double(self) -> "Tensor":
        return self.to(dtype=float64)

    def half(self) -> "Tensor":
        return self.to(dtype="float16")

    def bfloat16(self) -> "Tensor":
        return self.to(dtype=bfloat16)

    def int(self) -> "Tensor":
        return self.to(dtype="int32")

    def long(self) -> "Tensor":
        return self.to(dtype=int64)

    def bool(self) -> "Tensor":
        return self.to(dtype=bool_)

    def type(self, dtype: DTypeLike) -> "Tensor":
        return self.to(dtype=dtype)

    def item(self) -> Union[float, int, bool]:
        """The value of a one-element tensor as a Python float (int/bool for those dtypes)."""
        v = _C.nx_tensor_item(self._h, None)
        d = _C.nx_tensor_dtype(self._h)
        if d == _C.NX_BOOL:
            return bool(v)
        if d == _C.NX_I32 or d == _C.NX_I64:
            if d == _C.NX_I64 and abs(v) >= 2 ** 53:  # item() goes through a double
                import numpy as np

                return int(self.numpy().reshape(-1)[0])
            return int(v)
        return v

    def numpy(self) -> Any:
        """A NumPy array: a view sharing memory for CPU tensors (writes are seen both ways), a host
        copy for CUDA tensors. bfloat16 (no NumPy type) comes back as a float32 copy."""
        import numpy as np

        if self.device == "cpu" and self.dtype is not bfloat16:
            return np.asarray(self)
        return _host_copy(self)

    def tolist(self) -> Any:
        """Nested Python lists (a scalar for 0-d tensors)."""
        return _host_copy(self).tolist()

    @property
    def __array_interface__(self) -> dict:
        """NumPy's array interface, for zero-copy views of CPU tensors: np.asarray(t) shares memory
        and keeps t alive. Not available (AttributeError) for CUDA or bfloat16 tensors, for which
        __array__ makes a copy."""
        h = self._h
        d = BY_VALUE[_C.nx_tensor_dtype(h)]
        if d.typestr is None or _C.nx_tensor_device(h) != "cpu":
            raise AttributeError("__array_interface__ is only available for CPU tensors with a NumPy dtype")
        es = d.itemsize
        return {
            "version": 3,
            "shape": _C.nx_tensor_shape(h),
            "typestr": d.typestr,
            "data": (_C.nx_tensor_data_ptr(h), False),
            "strides": tuple(s * es for s in _C.nx_tensor_strides(h)),
        }

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        import numpy as np

        a = _host_copy(self)
        return a if dtype is None else a.astype(dtype)

    # ------------------------------------------------------------ DLPack
    def __dlpack__(self, *, stream: Any = None, max_version: Optional[Tuple[int, int]] = None,
                   dl_device: Optional[Tuple[int, int]] = None, copy: Optional[bool] = None) -> Any:
        """A DLPack capsule sharing this tensor's memory (CUDA work is finished first): a
        "dltensor_versioned" capsule (DLManagedTensorVersioned) when the consumer's max_version is
        (1, 0) or later, else a legacy "dltensor" one. copy=True exports a copy; dl_device must be
        the tensor's own device (BufferError otherwise: move it with .to() first)."""
        if dl_device is not None and (int(dl_device[0]), int(dl_device[1])) != self.__dlpack_device__():
            raise BufferError(f"__dlpack__: the tensor is on DLPack device {self.__dlpack_device__()}, not "
                              f"{tuple(dl_device)}")
        h = _C.nx_clone(self._h, None) if copy else self._h
        if max_version is not None and tuple(max_version) >= (1, 0):
            return _C.nx_tensor_to_dlpack_versioned(h)
        return _C.nx_tensor_to_dlpack(h)

    def __dlpack_device__(self) -> Tuple[int, int]:
        dev = _C.nx_tensor_device(self._h)
        return (1, 0) if dev == "cpu" else (2, int(dev[5:]))

    # ------------------------------------------------------------ Python protocol
    def __repr__(self) -> str:
        """PyTorch's str(tensor) layout, written by the engine (nx_tensor_to_string) with the
        options of :func:`set_printoptions`. Never raises: a tensor that cannot be read now (inside
        a captured step, say) gives ``tensor(<unprintable: reason>)``."""
        try:
            text = _C.nx_tensor_to_string(self._h, _print_options)
            return "Parameter containing:\n" + text if getattr(self, "_param", False) else text
        except Exception as e:  # never let repr raise
            return f"tensor(<unprintable: {e}>)"

    __str__ = __repr__

    def __len__(self) -> int:
        s = _C.nx_tensor_shape(self._h)
        if not s:
            raise TypeError("len() of a 0-d tensor")
        return s[0]

    def __iter__(self) -> Iterator["Tensor"]:
        n = len(self)
        for i in range(n):
            yield self[i]

    def __bool__(self) -> bool:
        if _C.nx_tensor_numel(self._h) != 1:
            raise ValueError("the truth value of a tensor with more than one element is ambiguous")
        return bool(_C.nx_tensor_item(self._h, None))

    def __float__(self) -> float:
        return float(_C.nx_tensor_item(self._h, None))

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if self.dtype.is_floating_point or self.numel() != 1:
            raise TypeError("only one-element integer tensors can be converted to an index")
        return int(self.item())

    def __copy__(self) -> "Tensor":
        return _wrap(_C.nx_clone(self._h, None))

    def __deepcopy__(self, memo: Any) -> "Tensor":
        t = _wrap(_C.nx_clone(_C.nx_tensor_detach(self._h), None))
        if self.requires_grad and self.is_leaf:
            t.requires_grad_(True)
        if getattr(self, "_param", False):
            t._param = True
        return t

    def __reduce__(self) -> Any:
        return (tensor, (_host_copy(self), self.dtype, self.device, self.requires_grad))

    # ------------------------------------------------------------ operators
    def __add__(self, other: Any) -> "Tensor":
        if type(other) is Tensor:
            return _wrap(_C.nx_add(self._h, other._h, None))
        if _is_scalar(other) and _C.nx_tensor_dtype(self._h) in _FLOATING:
            return _wrap(_C.nx_add_scalar(self._h, other, None))
        return _wrap(_C.nx_add(self._h, _as_tensor(other, self)._h, None))

    __radd__ = __add__

    def __sub__(self, other: Any) -> "Tensor":
        if type(other) is Tensor:
            return _wrap(_C.nx_sub(self._h, other._h, None))
        if _is_scalar(other) and _C.nx_tensor_dtype(self._h) in _FLOATING:
            return _wrap(_C.nx_add_scalar(self._h, -other, None))
        return _wrap(_C.nx_sub(self._h, _as_tensor(other, self)._h, None))

    def __rsub__(self, other: Any) -> "Tensor":
        return _wrap(_C.nx_sub(_as_tensor(other, self)._h, self._h, None))

    def __mul__(self, other: Any) -> "Tensor":
        if type(other) is Tensor:
            return _wrap(_C.nx_mul(self._h, other._h, None))
        if _is_scalar(other) and _C.nx_tensor_dtype(self._h) in _FLOATING:
            return _wrap(_C.nx_mul_scalar(self._h, other, None))
        return _wrap(_C.nx_mul(self._h, _as_tensor(other, self)._h, None))

    __rmul__ = __mul__

    def __truediv__(self, other: Any) -> "Tensor":
        o = other if type(other) is Tensor else _as_tensor(other, self)
        return _wrap(_C.nx_div(self._h, o._h, None))

    def __rtruediv__(self, other: Any) -> "Tensor":
        return _wrap(_C.nx_div(_as_tensor(other, self)._h, self._h, None))

    def __matmul__(self, other: "Tensor") -> "Tensor":
        return _wrap(_C.nx_matmul(self._h, _as_tensor(other, self)._h, None))

    def __rmatmul__(self, other: Any) -> "Tensor":
        return _wrap(_C.nx_matmul(_as_tensor(other, self)._h, self._h, None))

    def __pow__(self, other: Any) -> "Tensor":
        if type(other) is Tensor:
            return _wrap(_C.nx_pow(self._h, other._h, None))
        if _is_scalar(other) and _C.nx_tensor_dtype(self._h) in _FLOATING:
            return _wrap(_C.nx_pow_scalar(self._h, other, None))
        return _wrap(_C.nx_pow(self._h, _as_tensor(other, self)._h, None))

    def __rpow__(self, other: Any) -> "Tensor":
        return _wrap(_C.nx_pow(_as_tensor(other, self)._h, self._h, None))

    def __neg__(self) -> "Tensor":
        return _wrap(_C.nx_neg(self._h, None))

    def __pos__(self) -> "Tensor":
        return self

    def __abs__(self) -> "Tensor":
        return _wrap(_C.nx_abs(self._h, None))

    def __eq__(self, other: Any) -> "Tensor":  # type: ignore[override]
        return _wrap(_C.nx_eq(self._h, _as_tensor(other, self)._h, None))

    def __ne__(self, other: Any) -> "Tensor":  # type: ignore[override]
        return _wrap(_C.nx_ne(self._h, _as_tensor(other, self)._h, None))

    def __lt__(self, other: Any) -> "Tensor":
        return _wrap(_C.nx_lt(self._h, _as_tensor(other, self)._h, None))

    def __le__(self, other: Any) -> "Tensor":
        return _wrap(_C.nx_le(self._h, _as_tensor(other, self)._h, None))

    def __gt__(self, other: Any) -> "Tensor":
        return _wrap(_C.nx_gt(self._h, _as_tensor(other, self)._h, None))

    def __ge__(self, other: Any) -> "Tensor":
        return _wrap(_C.nx_ge(self._h, _as_tensor(other, self)._h, None))

    # In-place operators modify this tensor's storage (nx_add_ / nx_mul_ / nx_copy_), as PyTorch.
    def __iadd__(self, other: Any) -> "Tensor":
        _C.nx_add_(self._h, _as_tensor(other, self)._h, None)
        return self

    def __isub__(self, other: Any) -> "Tensor":
        o = _as_tensor(other, self)
        _C.nx_add_(self._h, _C.nx_neg(o._h, None), None)
        return self

    def __imul__(self, other: Any) -> "Tensor":
        if _is_scalar(other):
            _C.nx_mul_scalar_(self._h, other, None)
        else:
            _C.nx_mul_(self._h, _as_tensor(other, self)._h, None)
        return self

    def __itruediv__(self, other: Any) -> "Tensor":
        if _C.nx_tensor_dtype(self._h) not in _FLOATING:  # true division gives floats, as in torch
            raise _C.DTypeError(f"in-place division of a {self.dtype} tensor: the float quotient cannot be "
                                "stored in it (divide out of place, or cast first)")
        _C.nx_copy_(self._h, _C.nx_div(self._h, _as_tensor(other, self)._h, None), None)
        return self

    # ------------------------------------------------------------ indexing
    def __getitem__(self, index: Any) -> "Tensor":
        """Basic indexing (ints, slices with step > 0, None, ...) gives views (nx_slice, nx_squeeze,
        nx_unsqueeze); integer tensors or lists select along an axis (nx_index_select, a copy); a
        bool tensor mask (alone) selects the elements where it is true, flattened over its axes
        (a copy; the mask is read on the host, as torch synchronizes too)."""
        if type(index) is Tensor and _C.nx_tensor_dtype(index._h) == _C.NX_BOOL:
            return _masked_select(self, index)
        return _wrap(_index(self, index, for_write=False))

    def __setitem__(self, index: Any, value: Any) -> None:
        """Writes value (broadcast, cast) into the view self[index] (nx_copy_). Basic indexing, or a
        bool tensor mask with a one-element value (``x[x < 0] = 0``)."""
        if type(index) is Tensor and _C.nx_tensor_dtype(index._h) == _C.NX_BOOL:
            _masked_fill_(self, index, value)
            return
        view = _index(self, index, for_write=True)
        if type(value) is Tensor:
            src = value._h
        else:
            src = _as_tensor(value, _wrap(view))._h
        _C.nx_copy_(view, src, None)

    @property
    def T(self) -> "Tensor":
        """The transpose of a 2-d tensor (reversed axes in general)."""
        n = _C.nx_tensor_ndim(self._h)
        return _wrap(_C.nx_permute(self._h, list(range(n - 1, -1, -1)), None))

    @property
    def mT(self) -> "Tensor":
        """The last two axes swapped."""
        return _wrap(_C.nx_transpose(self._h, -2, -1, None))


_FLOATING = frozenset((_C.NX_F32, _C.NX_F64, _C.NX_F16, _C.NX_BF16))


def _is_scalar(v: Any) -> bool:
    return type(v) is float or type(v) is int


def _scalar_dtype(value: Any, like: Optional[Tensor]) -> DType:
    """PyTorch's rule for a Python scalar next to a tensor: it does not widen the tensor's
    category (float tensor + 2 stays float16/32/64; int tensor + 2.5 gives float32)."""
    if like is None:
        if isinstance(value, bool):
            return bool_
        return int64 if isinstance(value, int) else float32
    d = BY_VALUE[_C.nx_tensor_dtype(like._h)]
    if isinstance(value, bool):
        return d
    if isinstance(value, int):
        return int64 if d is bool_ else d
    return d if d.is_floating_point else float32


def _as_tensor(value: Any, like: Optional[Tensor] = None) -> Tensor:
    """value as a Tensor on like's device: a Tensor is returned as is, a Python scalar becomes a
    0-d tensor of the dtype PyTorch would use, anything else goes through nexusgrad.tensor."""
    if type(value) is Tensor:
        return value
    if isinstance(value, Tensor):
        return value
    dev = "cpu" if like is None else _C.nx_tensor_device(like._h)
    if isinstance(value, (int, float, bool)):
        d = _scalar_dtype(value, like)
        return _wrap(_C.nx_tensor_full([], float(value), d.value, dev, None))
    if hasattr(value, "__dlpack__") and type(value).__module__.startswith("torch"):
        return from_dlpack(value)
    return tensor(value, device=dev)


def _host_copy(t: Tensor) -> Any:
    """A NumPy copy of t's elements (bfloat16 widened to float32)."""
    import numpy as np

    h = t._h
    d = BY_VALUE[_C.nx_tensor_dtype(h)]
    shape = _C.nx_tensor_shape(h)
    if d is bfloat16:
        raw = np.empty(shape, dtype=np.uint16)
        _C.nx_tensor_copy_to_host(h, raw, None)
        return (raw.astype(np.uint32) << 16).view(np.float32)
    out = np.empty(shape, dtype=np.dtype(d.typestr))
    _C.nx_tensor_copy_to_host(h, out, None)
    return out


# ---------------------------------------------------------------- indexing helpers
def _mask_leading(t: Tensor, mask: Tensor) -> Tuple[int, ...]:
    """The mask's shape, which must be the leading part of t's (torch's rule for t[mask])."""
    lead = _C.nx_tensor_shape(mask._h)
    if _C.nx_tensor_shape(t._h)[:len(lead)] != lead:
        raise IndexError(f"the shape of the mask {list(lead)} does not match the leading dimensions of the "
                         f"indexed tensor's shape {list(t.shape)}")
    return lead


def _masked_select(t: Tensor, mask: Tensor) -> Tensor:
    """t[mask]: the rows of t (flattened over the mask's axes) where mask is true."""
    import numpy as np

    lead = _mask_leading(t, mask)
    rest = list(_C.nx_tensor_shape(t._h)[len(lead):])
    rows = np.flatnonzero(_host_copy(mask)).astype(np.int64)
    flat = _C.nx_reshape(t._h, [-1] + rest, None)
    index = _C.nx_tensor_from_data(rows, [rows.size], _C.NX_I64, _C.nx_tensor_device(t._h), None)
    return _wrap(_C.nx_index_select(flat, index, 0, None))


def _masked_fill_(t: Tensor, mask: Tensor, value: Any) -> None:
    """t[mask] = value for a one-element value (the C API has no scatter to place one value per
    selected element)."""
    lead = _mask_leading(t, mask)
    v = _as_tensor(value, t)
    if _C.nx_tensor_numel(v._h) != 1:
        raise _C.NotSupportedError("t[mask] = value needs a one-element value (a scalar); for one value per "
                                   "selected element use t.copy_(nexusgrad.where(mask, values, t))")
    trailing = [1] * (_C.nx_tensor_ndim(t._h) - len(lead))
    cond = _C.nx_reshape(mask._h, list(lead) + trailing, None)
    v0 = _C.nx_reshape(v._h, [], None)
    _C.nx_copy_(t._h, _C.nx_where(cond, v0, t._h, None), None)


def _index(t: Tensor, index: Any, for_write: bool) -> Any:
    h = t._h
    items = index if isinstance(index, tuple) else (index,)
    ndim = _C.nx_tensor_ndim(h)
    consumed = 0
    for it in items:
        if it is None or it is Ellipsis:
            continue
        if type(it) is Tensor and it.dtype is bool_:
            consumed += it.ndim
        elif type(it) is Tensor:
            consumed += 1
        else:
            consumed += 1
    if consumed > ndim:
        raise IndexError(f"too many indices for a tensor of rank {ndim}: {index!r}")
    if sum(1 for it in items if it is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    axis = 0
    for it in items:
        if it is None:
            h = _C.nx_unsqueeze(h, axis, None)
            axis += 1
        elif it is Ellipsis:
            axis += ndim - consumed
        elif isinstance(it, slice):
            step = 1 if it.step is None else operator.index(it.step)
            if step <= 0:
                raise _C.NotSupportedError(f"slice step must be positive, got {step}")
            start = 0 if it.start is None else operator.index(it.start)
            stop = _INT64_MAX if it.stop is None else operator.index(it.stop)
            h = _C.nx_slice(h, axis, start, stop, step, None)
            axis += 1
        elif isinstance(it, (int,)) or (hasattr(it, "__index__") and not isinstance(it, (Tensor, list))
                                       and not hasattr(it, "__len__")):
            i = operator.index(it)
            size = _C.nx_tensor_shape(h)[axis]
            if i < -size or i >= size:
                raise IndexError(f"index {i} is out of bounds for axis {axis} with size {size}")
            if i < 0:
                i += size
            h = _C.nx_squeeze(_C.nx_slice(h, axis, i, i + 1, 1, None), axis, None)
        else:
            if for_write:
                raise _C.NotSupportedError("assignment through tensor or list indices is not supported; "
                                           "use ints, slices, None and ...")
            idx = it if type(it) is Tensor else tensor(it, dtype=int64, device=_C.nx_tensor_device(h))
            if idx.dtype is bool_:
                raise _C.NotSupportedError("boolean mask indexing is not supported (use nexusgrad.where)")
            ish = idx.shape
            if len(ish) == 1:
                h = _C.nx_index_select(h, idx._h, axis, None)
                axis += 1
            else:
                flat = _C.nx_reshape(idx._h, [-1], None)
                sel = _C.nx_index_select(h, flat, axis, None)
                shp = list(_C.nx_tensor_shape(h))
                h = _C.nx_reshape(sel, shp[:axis] + list(ish) + shp[axis + 1:], None)
                axis += len(ish)
    return h


# ---------------------------------------------------------------- options structs, grad mode
def _options(struct: Any, **fields: Any) -> Any:
    """An options struct of nexus.h (_C.nx_adam_options...): its constructor fills in the
    NX_*_OPTIONS_DEFAULT values (struct_size included), then the given fields are set."""
    o = struct()
    for name, value in fields.items():
        setattr(o, name, value)
    return o


def _backward_options(retain_graph: bool = False, create_graph: bool = False, check_finite: bool = False) -> Any:
    """nx_backward_options for these flags; None (NULL: the defaults, all off) when none is set."""
    if not (retain_graph or create_graph or check_finite):
        return None
    return _options(_C.nx_backward_options, retain_graph=bool(retain_graph), create_graph=bool(create_graph),
                    check_finite=bool(check_finite))


class _GradMode:
    __slots__ = ("_mode", "_prev")

    def __init__(self, mode: bool) -> None:
        self._mode = mode
        self._prev: List[bool] = []

    def __enter__(self) -> None:
        self._prev.append(_C.nx_autograd_get_enabled())
        _C.nx_autograd_set_enabled(self._mode)

    def __exit__(self, *exc: Any) -> None:
        _C.nx_autograd_set_enabled(self._prev.pop())

    def __call__(self, fn: Any) -> Any:
        import functools

        mode = self._mode

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with _GradMode(mode):
                return fn(*args, **kwargs)

        return wrapper


class autocast:
    """Mixed precision like ``torch.autocast``: ``with nexusgrad.autocast("cuda", dtype=nexusgrad.bfloat16):``.

    Inside, on tensors of ``device_type`` ("cpu" or "cuda"), matmul, linear and attention run in
    ``dtype`` (default: float16 on CUDA, bfloat16 on the CPU, as in PyTorch) and softmax,
    log_softmax, the norms, the losses and sum run in float32; the casts are recorded, so each
    gradient comes back in its leaf's dtype. ``enabled=False`` turns autocast off inside an outer
    scope. Per thread (nx_autocast_push / nx_autocast_pop); also usable as a decorator."""

    __slots__ = ("_device_type", "_dtype", "_enabled")

    def __init__(self, device_type: str, dtype: Any = None, enabled: bool = True) -> None:
        from ._dtypes import to_dtype, float16, bfloat16
        types = {"cpu": _C.NX_CPU, "cuda": _C.NX_CUDA}
        if device_type not in types:
            raise ValueError(f"autocast: device_type must be 'cpu' or 'cuda', got {device_type!r}")
        self._device_type = types[device_type]
        default = float16 if device_type == "cuda" else bfloat16
        self._dtype = to_dtype(dtype) if dtype is not None else default
        self._enabled = bool(enabled)

    def __enter__(self) -> None:
        _C.nx_autocast_push(self._device_type, self._dtype.value, self._enabled)

    def __exit__(self, *exc: Any) -> None:
        _C.nx_autocast_pop()

    def __call__(self, fn: Any) -> Any:
        import functools

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self:
                return fn(*args, **kwargs)

        return wrapper


class no_grad(_GradMode):
    """Context manager (and decorator) that disables graph recording on this thread."""

    def __init__(self) -> None:
        super().__init__(False)


class enable_grad(_GradMode):
    """Context manager (and decorator) that enables graph recording on this thread."""

    def __init__(self) -> None:
        super().__init__(True)


class inference_mode(_GradMode):
    """torch.inference_mode: here the same as no_grad (tensors made inside are ordinary tensors)."""

    def __init__(self, mode: bool = True) -> None:
        super().__init__(not mode)


class set_grad_enabled(_GradMode):
    """set_grad_enabled(False) as a context manager, or a plain call that sets the mode."""

    def __init__(self, mode: bool) -> None:
        super().__init__(bool(mode))
        self._prev.append(_C.nx_autograd_get_enabled())
        _C.nx_autograd_set_enabled(bool(mode))

    def __enter__(self) -> None:
        pass


# nx_print_options used by Tensor.__repr__ (process-wide, like torch's PRINT_OPTS)
_print_options = _C.nx_print_options()
_SCI_MODES = {None: _C.NX_PRINT_SCI_AUTO, False: _C.NX_PRINT_SCI_NEVER, True: _C.NX_PRINT_SCI_ALWAYS}


def set_printoptions(precision: Optional[int] = None, threshold: Optional[float] = None,
                     edgeitems: Optional[int] = None, linewidth: Optional[int] = None,
                     profile: Optional[str] = None, sci_mode: Optional[bool] = None) -> None:
    """Options of ``repr(tensor)``, as ``torch.set_printoptions``: precision (digits after the
    point, default 4), threshold (summarize above this many elements, 1000; ``math.inf``: never),
    edgeitems (entries kept at each end of a summarized dimension, 3), linewidth (80), profile
    ('default', 'short' or 'full'), sci_mode (None: chosen from the values, or True / False). As in
    torch, sci_mode is reset to None unless given. Values nx_print_options refuses raise
    InvalidArgumentError and change nothing."""
    global _print_options
    o = _C.nx_print_options()
    for name in ("precision", "threshold", "edge_items", "line_width", "sci_mode"):
        setattr(o, name, getattr(_print_options, name))
    profiles = {"default": (4, 1000, 3, 80), "short": (2, 1000, 2, 80), "full": (4, _INT64_MAX, 3, 80)}
    if profile is not None:
        if profile not in profiles:
            raise ValueError(f"set_printoptions: profile must be one of {sorted(profiles)}, got {profile!r}")
        o.precision, o.threshold, o.edge_items, o.line_width = profiles[profile]
    if precision is not None:
        o.precision = operator.index(precision)
    if threshold is not None:
        o.threshold = _INT64_MAX if threshold >= _INT64_MAX else int(threshold)
    if edgeitems is not None:
        o.edge_items = operator.index(edgeitems)
    if linewidth is not None:
        o.line_width = operator.index(linewidth)
    if sci_mode not in _SCI_MODES:
        raise ValueError(f"set_printoptions: sci_mode must be None, True or False, got {sci_mode!r}")
    o.sci_mode = _SCI_MODES[sci_mode]
    _C.nx_tensor_to_string(_C.nx_tensor_zeros([], _C.NX_F32, "cpu", None), o)  # the engine checks the values
    _print_options = o


def is_grad_enabled() -> bool:
    """Whether ops record the graph on this thread."""
    return _C.nx_autograd_get_enabled()


def manual_seed(seed: int) -> None:
    """Seeds the counter-based generator used by rand/randn (results do not depend on threads)."""
    _C.nx_random_set_seed(int(seed) & 0xFFFFFFFFFFFFFFFF)


# ---------------------------------------------------------------- creation
def _finish(h: Any, requires_grad: bool) -> Tensor:
    t = _wrap(h)
    if requires_grad:
        _C.nx_tensor_set_requires_grad(h, True)
    return t


def _dt(dtype: Optional[DTypeLike], default: DType = float32) -> int:
    return default.value if dtype is None else to_dtype(dtype).value


def randn(*size: Any, dtype: Optional[DTypeLike] = None, device: DeviceLike = "cpu",
          requires_grad: bool = False) -> Tensor:
    """Standard normal samples of the given shape (float32 by default)."""
    return _finish(_C.nx_tensor_randn(_shape_arg(size), _dt(dtype), to_device(device), None), requires_grad)


def rand(*size: Any, dtype: Optional[DTypeLike] = None, device: DeviceLike = "cpu",
         requires_grad: bool = False) -> Tensor:
    """Uniform samples in [0, 1) of the given shape (float32 by default)."""
    return _finish(_C.nx_tensor_rand(_shape_arg(size), _dt(dtype), to_device(device), None), requires_grad)


def zeros(*size: Any, dtype: Optional[DTypeLike] = None, device: DeviceLike = "cpu",
          requires_grad: bool = False) -> Tensor:
    """Zeros of the given shape (float32 by default)."""
    return _finish(_C.nx_tensor_zeros(_shape_arg(size), _dt(dtype), to_device(device), None), requires_grad)


def empty(*size: Any, dtype: Optional[DTypeLike] = None, device: DeviceLike = "cpu",
          requires_grad: bool = False) -> Tensor:
    """Same as zeros (the C API has no uninitialized creation)."""
    return zeros(*size, dtype=dtype, device=device, requires_grad=requires_grad)


def ones(*size: Any, dtype: Optional[DTypeLike] = None, device: DeviceLike = "cpu",
         requires_grad: bool = False) -> Tensor:
    """Ones of the given shape (float32 by default)."""
    return _finish(_C.nx_tensor_ones(_shape_arg(size), _dt(dtype), to_device(device), None), requires_grad)


def full(size: ShapeLike, fill_value: Scalar, dtype: Optional[DTypeLike] = None, device: DeviceLike = "cpu",
         requires_grad: bool = False) -> Tensor:
    """fill_value everywhere; the dtype defaults to int64 / bool / float32 after fill_value's type."""
    if dtype is None:
        dtype = _scalar_dtype(fill_value, None)
    return _finish(_C.nx_tensor_full(_shape_arg((size,)), float(fill_value), _dt(dtype), to_device(device), None),
                   requires_grad)


def arange(start: Scalar, end: Optional[Scalar] = None, step: Scalar = 1, dtype: Optional[DTypeLike] = None,
           device: DeviceLike = "cpu", requires_grad: bool = False) -> Tensor:
    """start, start+step, ... < end; arange(n) counts 0..n-1. int64 when every argument is an int."""
    if end is None:
        start, end = 0, start
    if dtype is None:
        dtype = int64 if all(isinstance(v, int) for v in (start, end, step)) else float32
    return _finish(_C.nx_tensor_arange(float(start), float(end), float(step), _dt(dtype), to_device(device), None),
                   requires_grad)


def zeros_like(t: Tensor, dtype: Optional[DTypeLike] = None, device: DeviceLike = None,
               requires_grad: bool = False) -> Tensor:
    return zeros(t.shape, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad)


def ones_like(t: Tensor, dtype: Optional[DTypeLike] = None, device: DeviceLike = None,
              requires_grad: bool = False) -> Tensor:
    return ones(t.shape, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad)


def full_like(t: Tensor, fill_value: Scalar, dtype: Optional[DTypeLike] = None, device: DeviceLike = None,
              requires_grad: bool = False) -> Tensor:
    return full(t.shape, fill_value, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad)


def rand_like(t: Tensor, dtype: Optional[DTypeLike] = None, device: DeviceLike = None,
              requires_grad: bool = False) -> Tensor:
    return rand(t.shape, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad)


def randn_like(t: Tensor, dtype: Optional[DTypeLike] = None, device: DeviceLike = None,
               requires_grad: bool = False) -> Tensor:
    return randn(t.shape, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad)


def tensor(data: Any, dtype: Optional[DTypeLike] = None, device: DeviceLike = "cpu",
           requires_grad: bool = False) -> Tensor:
    """A new tensor holding a COPY of data: nested lists, Python scalars, NumPy arrays, other Tensors
    or anything NumPy converts. The dtype is inferred like PyTorch (floats -> float32, ints -> int64,
    bools -> bool; NumPy arrays keep theirs, float64 included) unless given."""
    import numpy as np

    if isinstance(data, Tensor):
        h = _C.nx_clone(_C.nx_tensor_detach(data._h), None)
        t = _wrap(h).to(dtype=dtype, device=device)
        return _finish(t._h, requires_grad)
    if hasattr(data, "__dlpack__") and not isinstance(data, np.ndarray):
        if getattr(data, "requires_grad", False):  # torch refuses to export those; a copy is wanted anyway
            data = data.detach()
        src = from_dlpack(data)
        h = _C.nx_clone(src._h, None)
        return _finish(_wrap(h).to(dtype=dtype, device=device)._h, requires_grad)
    from_python = not isinstance(data, np.ndarray)
    arr = np.asarray(data)
    k = arr.dtype.kind
    if dtype is not None:
        d = to_dtype(dtype)
    elif k == "b":
        d = bool_
    elif k in "iu":
        # Python ints -> int64 (PyTorch's default); NumPy keeps int32/int64, other widths -> int64
        d = to_dtype("int32") if (not from_python and arr.dtype == np.int32) else int64
    elif k == "f":
        # Python floats -> float32 (PyTorch's default); NumPy keeps float16/32/64
        d = to_dtype(arr.dtype.name) if (not from_python and arr.dtype.itemsize in (2, 4, 8)) else float32
    else:
        raise _C.DTypeError(f"cannot make a tensor from data of NumPy dtype {arr.dtype}")
    if d is bfloat16:
        f32 = np.asarray(arr, dtype=np.float32, order="C")
        h = _C.nx_tensor_from_data(f32, list(f32.shape), float32.value, "cpu", None)
        h = _C.nx_cast(h, bfloat16.value, None)
        dev = to_device(device)
        if dev != "cpu":
            h = _C.nx_tensor_to(h, dev, None)
        return _finish(h, requires_grad)
    arr = np.asarray(arr, dtype=np.dtype(d.typestr), order="C")
    h = _C.nx_tensor_from_data(arr, list(arr.shape), d.value, to_device(device), None)
    return _finish(h, requires_grad)


def as_tensor(data: Any, dtype: Optional[DTypeLike] = None, device: DeviceLike = None) -> Tensor:
    """data itself when it is already a Tensor of that dtype and device, else nexusgrad.tensor(data)."""
    if isinstance(data, Tensor):
        return data.to(dtype=dtype, device=device)
    return tensor(data, dtype=dtype, device=device or "cpu")


def from_numpy(array: Any, device: DeviceLike = "cpu") -> Tensor:
    """A tensor that SHARES the memory of a NumPy array (or any writable buffer): writes through either
    side are seen by the other, and the array stays alive while the tensor (or a view of it) does.
    Strided arrays are shared as views. Read-only arrays, and any device other than the CPU, get a
    copy instead. Supported dtypes: float16/32/64, int32/64, bool (others raise DTypeError)."""
    dev = to_device(device)
    try:
        cap = _C.nx_py_buffer_to_dlpack(array)
    except BufferError:  # read-only: share nothing, copy
        import numpy as np

        arr = np.asarray(array)
        return tensor(arr, dtype=to_dtype(arr.dtype), device=dev)
    t = _wrap(_C.nx_tensor_from_dlpack(cap))
    return t if dev == "cpu" else t.to(dev)


def from_dlpack(obj: Any) -> Tensor:
    """A tensor sharing the memory of obj (torch.Tensor, NumPy array, CuPy array, JAX array... or a
    'dltensor' or 'dltensor_versioned' capsule) through DLPack: no copy, writes are seen on both
    sides. The producer's memory stays alive until the last tensor or view using it is freed. The
    capsule is renamed 'used_dltensor' / 'used_dltensor_versioned' once consumed. Read-only
    tensors (a versioned capsule flagged read-only) raise NotSupportedError: copy them first."""
    if hasattr(obj, "__dlpack__"):
        kind, _ = obj.__dlpack_device__()
        # CUDA: the engine enqueues on the legacy default stream (1)
        kwargs = {"stream": 1} if int(kind) == 2 else {}
        try:
            cap = obj.__dlpack__(max_version=(1, 0), **kwargs)
        except TypeError:  # a producer older than DLPack 1.0's protocol (torch 1.13, NumPy < 2.1)
            cap = obj.__dlpack__(**kwargs)
    else:
        cap = obj
    name = _C.nx_py_capsule_name(cap)
    if name is not None and name.endswith("dltensor_versioned"):
        return _wrap(_C.nx_tensor_from_dlpack_versioned(cap))
    return _wrap(_C.nx_tensor_from_dlpack(cap))
