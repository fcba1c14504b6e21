"""Element types and devices of nexusgrad (mirrors nx_dtype and nx_device)."""
from __future__ import annotations

from typing import Any, Optional, Union

from . import _nexus as _C

__all__ = ["DType", "float32", "float64", "float16", "bfloat16", "int32", "int64", "bool_", "int8", "float8_e4m3fn",
           "float8_e5m2",
           "DTypeLike", "DeviceLike", "to_dtype", "to_device"]


class DType:
    """An element type (``nexusgrad.float32``...), the Python face of ``nx_dtype``."""

    __slots__ = ("value", "name", "itemsize", "is_floating_point", "typestr", "torch_name")

    def __init__(self, value: int, name: str, typestr: Optional[str], torch_name: str) -> None:
        self.value = value
        self.name = name
        self.itemsize = int(_C.nx_dtype_size(value))
        self.is_floating_point = value in (_C.NX_F32, _C.NX_F64, _C.NX_F16, _C.NX_BF16)
        self.typestr = typestr  # NumPy __array_interface__ type string (None: no NumPy type)
        self.torch_name = torch_name

    def __repr__(self) -> str:
        return f"nexusgrad.{self.name}"

    def __reduce__(self) -> Any:
        return (to_dtype, (self.name,))


float32 = DType(_C.NX_F32, "float32", "<f4", "float32")
float64 = DType(_C.NX_F64, "float64", "<f8", "float64")
float16 = DType(_C.NX_F16, "float16", "<f2", "float16")
bfloat16 = DType(_C.NX_BF16, "bfloat16", None, "bfloat16")
int32 = DType(_C.NX_I32, "int32", "<i4", "int32")
int64 = DType(_C.NX_I64, "int64", "<i8", "int64")
bool_ = DType(_C.NX_BOOL, "bool", "|b1", "bool")
# 8-bit storage dtypes (nexus.h): made, copied, cast and saved; ops refuse them (cast first)
int8 = DType(_C.NX_I8, "int8", "|i1", "int8")
float8_e4m3fn = DType(_C.NX_F8E4M3, "float8_e4m3fn", None, "float8_e4m3fn")
float8_e5m2 = DType(_C.NX_F8E5M2, "float8_e5m2", None, "float8_e5m2")

BY_VALUE = [None] * 10
for _d in (float32, float64, float16, bfloat16, int32, int64, bool_, int8, float8_e4m3fn, float8_e5m2):
    BY_VALUE[_d.value] = _d

_BY_NAME = {
    "float32": float32, "float": float32, "f32": float32,
    "float64": float64, "double": float64, "f64": float64,
    "float16": float16, "half": float16, "f16": float16,
    "bfloat16": bfloat16, "bf16": bfloat16,
    "int32": int32, "int": int32, "i32": int32,
    "int64": int64, "long": int64, "i64": int64,
    "bool": bool_,
    "int8": int8, "i8": int8,
    "float8_e4m3fn": float8_e4m3fn, "f8e4m3": float8_e4m3fn,
    "float8_e5m2": float8_e5m2, "f8e5m2": float8_e5m2,
}

DTypeLike = Union[DType, str, Any]  # also NumPy dtypes/types and torch dtypes


def to_dtype(d: DTypeLike) -> DType:
    """Converts a DType, a name ('float32', 'f32', 'float'...), a NumPy dtype or type, or a torch
    dtype to a DType. Raises nexusgrad.DTypeError (a TypeError) for anything else."""
    if type(d) is DType:
        return d
    if isinstance(d, str):
        key = d[6:] if d.startswith("torch.") else d
        if key in _BY_NAME:
            return _BY_NAME[key]
    elif d is float:
        return float32
    elif d is int:
        return int64
    elif d is bool:
        return bool_
    else:
        mod = type(d).__module__
        if mod == "torch":  # torch.float32 -> "torch.float32"
            return to_dtype(str(d))
        try:
            import numpy as np

            nd = np.dtype(d)
            if nd.name in _BY_NAME:
                return _BY_NAME[nd.name]
        except Exception:
            pass
    raise _C.DTypeError(f"unsupported dtype {d!r} (expected one of float32, float64, float16, bfloat16, "
                        "int32, int64, bool, int8, float8_e4m3fn, float8_e5m2)")


DeviceLike = Union[str, tuple, None]


def to_device(device: DeviceLike) -> str:
    """Normalizes 'cpu', 'cuda', 'cuda:N', a (type, index) tuple or a torch.device to 'cpu' or 'cuda:N'."""
    if device is None:
        return "cpu"
    if isinstance(device, str):
        if device == "cpu" or device == "cpu:0":
            return "cpu"
        if device == "cuda":
            return "cuda:0"
        if device.startswith("cuda:") and device[5:].isdigit():
            return device
        raise _C.DeviceError(f"invalid device {device!r} (expected 'cpu', 'cuda' or 'cuda:N')")
    if isinstance(device, tuple) and len(device) == 2:
        if device[0] == _C.NX_CPU:
            return "cpu"
        if device[0] == _C.NX_CUDA:
            return f"cuda:{int(device[1])}"
    if type(device).__module__ == "torch":  # torch.device
        return to_device(device.type if device.index is None else f"{device.type}:{device.index}")
    raise _C.DeviceError(f"invalid device {device!r} (expected 'cpu', 'cuda' or 'cuda:N')")
