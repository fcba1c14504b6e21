"""Argument conversions shared by the generated op wrappers (_ops_gen.py) and functional.py."""
from __future__ import annotations

from typing import Any, Tuple

from . import _nexus as _C
from ._dtypes import int64
from .tensor import Tensor, _as_tensor

_S = None  # the default stream of the inputs' device (the Python layer does not expose streams)


def _t(x: Any, like: Any = None) -> Tensor:
    return x if type(x) is Tensor else _as_tensor(x, like if type(like) is Tensor else None)


def _pair(a: Any, b: Any) -> Tuple[Any, Any]:
    """Handles of two operands, either of which may be a Python scalar."""
    if type(a) is Tensor:
        return a._h, _t(b, a)._h
    if type(b) is Tensor:
        return _t(a, b)._h, b._h
    ta = _t(a)
    return ta._h, _t(b, ta)._h


def _axes(dim: Any) -> Any:
    return None if dim is None else ([dim] if isinstance(dim, int) else list(dim))


def _reduction(reduction: str) -> int:
    try:
        return {"mean": _C.NX_REDUCTION_MEAN, "sum": _C.NX_REDUCTION_SUM, "none": _C.NX_REDUCTION_NONE}[reduction]
    except KeyError:
        raise _C.InvalidArgumentError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}") from None


def _as_tensor_index(index: Any, like: Tensor) -> Tensor:
    from .tensor import tensor as make

    return make(index, dtype=int64, device=like.device)


def _index(index: Any, like: Any) -> Tensor:
    """An integer index tensor: a Tensor as it is, a Python sequence as int64 on like's device."""
    return index if type(index) is Tensor else _as_tensor_index(index, _t(like))
