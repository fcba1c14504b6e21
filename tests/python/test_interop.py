"""NumPy and DLPack round trips share memory: a write on one side is seen on the other, and the
memory lives exactly as long as someone uses it."""
import ctypes
import gc
import weakref

import numpy as np
import pytest
import torch

import nexusgrad as ng
from nexusgrad import _nexus as C

NP_DTYPES = [np.float32, np.float64, np.float16, np.int32, np.int64, np.bool_]


# ---------------------------------------------------------------- NumPy
@pytest.mark.parametrize("dt", NP_DTYPES)
def test_numpy_view_of_tensor_shares_memory(dt):
    t = ng.tensor(np.arange(6).reshape(2, 3).astype(dt))
    a = np.asarray(t)
    assert a.dtype == dt and a.shape == (2, 3)
    assert a.__array_interface__["data"][0] == t.data_ptr()
    a[1, 2] = 0
    assert t[1, 2].item() == 0
    ng.copy_(t[0], ng.tensor(np.ones(3, dtype=dt)))  # engine write, seen by NumPy
    assert np.all(a[0] == 1)
    b = t.numpy()
    assert np.shares_memory(a, b)


def test_numpy_view_of_strided_tensor():
    t = ng.arange(24.0).reshape(4, 6)
    v = t[1:, ::2].T  # non-contiguous view
    a = np.asarray(v)
    np.testing.assert_array_equal(a, np.arange(24.0).reshape(4, 6)[1:, ::2].T)
    a[0, 0] = -1
    assert t[1, 0].item() == -1


def test_numpy_array_keeps_tensor_alive():
    t = ng.arange(5.0)
    before = ng.live_tensor_count()
    a = np.asarray(t)
    ref = weakref.ref(t)
    del t
    gc.collect()
    assert ref() is not None  # the array's base is the Tensor
    assert a.sum() == 10
    del a
    gc.collect()
    assert ref() is None and ng.live_tensor_count() == before - 1


@pytest.mark.parametrize("dt", NP_DTYPES)
def test_from_numpy_shares_memory(dt):
    a = np.arange(6).reshape(2, 3).astype(dt)
    t = ng.from_numpy(a)
    assert t.dtype.name == np.dtype(dt).name.replace("bool", "bool") and t.shape == (2, 3)
    assert t.data_ptr() == a.ctypes.data
    a[0, 1] = 0
    assert t[0, 1].item() == 0
    t[1] = 1
    assert np.all(a[1] == 1)


def test_from_numpy_strided_and_lifetime():
    base = np.arange(12.0).reshape(3, 4)
    t = ng.Tensor.from_numpy(base[:, 1::2])
    assert t.shape == (3, 2) and t.stride() == (4, 2)
    ref = weakref.ref(base) if hasattr(base, "__weakref__") else None
    del base
    gc.collect()
    np.testing.assert_array_equal(t.numpy(), np.arange(12.0).reshape(3, 4)[:, 1::2])
    u = t * 2  # the engine computes on the shared memory
    assert u.sum().item() == 2 * (1 + 3 + 5 + 7 + 9 + 11)
    del t, u, ref


def test_from_numpy_read_only_copies_and_buffers():
    a = np.arange(3.0)
    a.flags.writeable = False
    t = ng.from_numpy(a)
    assert t.data_ptr() != a.ctypes.data  # documented: read-only arrays are copied
    ba = bytearray(np.arange(4, dtype=np.float32).tobytes())
    # any writable buffer can be shared at the low level
    tb = ng.from_dlpack(C.nx_py_buffer_to_dlpack(memoryview(ba).cast("f")))
    tb[0] = 9
    assert np.frombuffer(ba, dtype=np.float32)[0] == 9


def test_tensor_copies_data():
    a = np.arange(4.0)
    t = ng.tensor(a)
    a[0] = 100
    assert t[0].item() == 0


def test_array_protocol_copies_for_bfloat16():
    t = ng.tensor([1.5, 2.0], dtype=ng.bfloat16)
    with pytest.raises(AttributeError):
        t.__array_interface__
    np.testing.assert_array_equal(np.asarray(t), np.array([1.5, 2.0], dtype=np.float32))


# ---------------------------------------------------------------- DLPack with PyTorch
@pytest.mark.parametrize("dt", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
                                torch.int64])
def test_torch_from_nexus_shares_memory(dt, device):
    t = ng.arange(6.0, device=device).reshape(2, 3).to(str(dt).split(".")[1])
    x = torch.from_dlpack(t)
    assert x.dtype == dt and tuple(x.shape) == (2, 3)
    assert str(x.device) == ("cpu" if device == "cpu" else device)
    x[0, 0] = 42
    if device != "cpu":
        torch.cuda.synchronize()
    assert t[0, 0].item() == 42
    ng.copy_(t[1], 7)
    if device != "cpu":
        ng.cuda.synchronize()
    assert x[1, 2].item() == 7


def test_nexus_from_torch_shares_memory(device):
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    if device != "cpu":
        x = x.to(device)
    t = ng.from_dlpack(x)
    assert t.shape == (3, 4) and t.dtype is ng.float32 and t.device == device
    x[2, 3] = -5
    if device != "cpu":
        torch.cuda.synchronize()
    assert t[2, 3].item() == -5
    t[0] = 3.0
    if device != "cpu":
        ng.cuda.synchronize()
    assert x[0].tolist() == [3.0] * 4
    # strided torch views come through as strided tensors
    v = ng.from_dlpack(x.t()[1:])
    np.testing.assert_array_equal(v.cpu().numpy(), x.t()[1:].cpu().numpy())


def test_torch_memory_outlives_torch_tensor():
    x = torch.arange(1000, dtype=torch.float64)
    t = ng.from_dlpack(x)
    del x
    gc.collect()
    assert t.sum().item() == sum(range(1000))


def test_nexus_memory_outlives_nexus_tensor():
    before = ng.live_tensor_count()
    t = ng.arange(100.0)
    x = torch.from_dlpack(t)
    del t
    gc.collect()
    assert ng.live_tensor_count() == before  # the handle is gone, the storage is not
    assert x.sum().item() == sum(range(100))


def test_round_trip_through_torch_is_the_same_memory():
    t = ng.randn(4, 5)
    back = ng.from_dlpack(torch.from_dlpack(t))
    assert back.data_ptr() == t.data_ptr()
    back[0, 0] = 123
    assert t[0, 0].item() == 123


def test_torch_requires_grad_tensor_needs_detach():
    x = torch.ones(3, requires_grad=True)
    with pytest.raises((RuntimeError, BufferError)):  # torch 1.x: RuntimeError, 2.x: BufferError
        ng.from_dlpack(x)
    assert ng.from_dlpack(x.detach()).sum().item() == 3


def test_dlpack_with_numpy():
    a = np.arange(6, dtype=np.int64)
    t = ng.from_dlpack(a)
    t[0] = 100
    assert a[0] == 100
    b = np.from_dlpack(ng.arange(4.0))
    np.testing.assert_array_equal(b, [0, 1, 2, 3])


def test_dlpack_device_and_capsule_protocol():
    t = ng.ones(3)
    assert t.__dlpack_device__() == (1, 0)
    cap = t.__dlpack__()
    assert "dltensor" in repr(cap)
    u = ng.from_dlpack(cap)
    assert "used_dltensor" in repr(cap)
    with pytest.raises(ValueError):
        ng.from_dlpack(cap)  # a capsule is consumed once
    assert u.sum().item() == 3
    unused = t.__dlpack__()
    del unused  # never consumed: its destructor calls the deleter (the storage reference is dropped)
    c2 = t.__dlpack__(copy=True)
    v = ng.from_dlpack(c2)
    v[0] = 5
    assert t[0].item() == 1


def test_dlpack_versioned_capsule_round_trip():
    """DLPack 1.x: __dlpack__(max_version >= (1, 0)) gives a "dltensor_versioned" capsule, which
    from_dlpack consumes (renaming it "used_dltensor_versioned"); older consumers get "dltensor"."""
    t = ng.arange(6.0).reshape(2, 3)
    assert C.nx_py_capsule_name(t.__dlpack__()) == "dltensor"
    assert C.nx_py_capsule_name(t.__dlpack__(max_version=(0, 8))) == "dltensor"
    cap = t.__dlpack__(max_version=(1, 3))
    assert C.nx_py_capsule_name(cap) == "dltensor_versioned"
    u = ng.from_dlpack(cap)
    assert C.nx_py_capsule_name(cap) == "used_dltensor_versioned"
    with pytest.raises(ValueError, match="dltensor_versioned"):
        C.nx_tensor_from_dlpack_versioned(cap)  # consumed once
    with pytest.raises(ValueError, match="'dltensor'"):
        C.nx_tensor_from_dlpack(t.__dlpack__(max_version=(1, 0)))  # each import takes its own capsule
    u[0, 1] = 7  # shared memory, both ways
    assert t[0, 1].item() == 7 and u.tolist() == t.tolist()
    v = ng.from_dlpack(t[:, 1:])  # a producer that speaks DLPack 1.0 (ours): versioned, a view
    assert v.tolist() == [[7.0, 2.0], [4.0, 5.0]]
    w = ng.from_dlpack(t.__dlpack__(max_version=(1, 0), copy=True))
    w[0, 0] = -1
    assert t[0, 0].item() == 0
    with pytest.raises(BufferError):
        t.__dlpack__(max_version=(1, 0), dl_device=(2, 0))
    before = ng.live_tensor_count()
    unused = t.__dlpack__(max_version=(1, 0))
    del unused  # never consumed: its destructor calls the deleter
    gc.collect()
    assert ng.live_tensor_count() == before


# ---------------------------------------------------------------- a hand-made DLManagedTensor
class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    pass


VERSIONED_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensorVersioned))
DLManagedTensorVersioned._fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                                     ("deleter", VERSIONED_DELETER), ("flags", ctypes.c_uint64),
                                     ("dl_tensor", DLTensor)]
READ_ONLY, IS_COPIED = 1, 2


def make_capsule(buf, shape, strides, code=2, bits=64, device_type=1, version=None, flags=0):
    """A "dltensor" capsule of a hand-made DLManagedTensor, or with version=(major, minor) a
    "dltensor_versioned" one of a DLManagedTensorVersioned with these flags."""
    calls = []
    keep = {}

    @(VERSIONED_DELETER if version else DELETER)
    def deleter(p):
        calls.append(1)

    n = len(shape)
    sh = (ctypes.c_int64 * n)(*shape)
    st = (ctypes.c_int64 * n)(*strides) if strides is not None else None
    m = DLManagedTensorVersioned(DLPackVersion(*version), flags=flags) if version else DLManagedTensor()
    m.dl_tensor.data = buf.ctypes.data
    m.dl_tensor.device = DLDevice(device_type, 0)
    m.dl_tensor.ndim = n
    m.dl_tensor.dtype = DLDataType(code, bits, 1)
    m.dl_tensor.shape = sh
    m.dl_tensor.strides = st if st is not None else None
    m.dl_tensor.byte_offset = 0
    m.deleter = deleter
    keep.update(m=m, sh=sh, st=st, deleter=deleter, buf=buf)
    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    cap = new(ctypes.addressof(m), b"dltensor_versioned" if version else b"dltensor", None)
    return cap, calls, keep


def test_layout_of_the_hand_made_structs():
    """The ctypes structs above follow DLPack's header (dlpack.h): what the tests below hand over."""
    assert ctypes.sizeof(DLTensor) == 48 and ctypes.sizeof(DLManagedTensor) == 64
    assert ctypes.sizeof(DLManagedTensorVersioned) == 80 and DLManagedTensorVersioned.dl_tensor.offset == 32


def test_from_dlpack_calls_the_producers_deleter_once():
    buf = np.arange(6.0)
    cap, calls, keep = make_capsule(buf, [2, 3], [3, 1])
    t = ng.from_dlpack(cap)
    v = t[1]  # a view keeps the memory too
    del t
    gc.collect()
    assert calls == []
    assert v.tolist() == [3.0, 4.0, 5.0]
    del v
    gc.collect()
    assert calls == [1]


def test_from_dlpack_failure_leaves_the_capsule_to_its_owner():
    buf = np.arange(6.0)
    cap, calls, keep = make_capsule(buf, [3], [-1])  # negative strides
    with pytest.raises(ng.NotSupportedError) as ei:
        ng.from_dlpack(cap)
    assert "nx_tensor_from_dlpack" in ei.value.message
    assert calls == [] and "used_dltensor" not in repr(cap)
    cap2, calls2, keep2 = make_capsule(buf, [3], None, code=1, bits=8)  # uint8: no such dtype
    with pytest.raises(ng.DTypeError):
        ng.from_dlpack(cap2)
    cap3, calls3, keep3 = make_capsule(buf, [3], None, device_type=4)  # OpenCL
    with pytest.raises(ng.DeviceError):
        ng.from_dlpack(cap3)
    assert calls2 == [] and calls3 == []


def test_from_dlpack_versioned_owns_the_struct_and_refuses_what_it_cannot_write():
    buf = np.arange(6.0)
    cap, calls, keep = make_capsule(buf, [2, 3], None, version=(1, 1), flags=IS_COPIED)
    t = ng.from_dlpack(cap)
    assert "used_dltensor_versioned" in repr(cap) and t.tolist() == [[0, 1, 2], [3, 4, 5]]
    t[0, 0] = 9
    assert buf[0] == 9  # no copy
    del t
    gc.collect()
    assert calls == [1]
    ro, ro_calls, ro_keep = make_capsule(buf, [6], None, version=(1, 0), flags=READ_ONLY)
    with pytest.raises(ng.NotSupportedError, match="read-only") as ei:
        ng.from_dlpack(ro)
    assert "nx_tensor_from_dlpack_versioned" in ei.value.message
    v2, v2_calls, v2_keep = make_capsule(buf, [6], None, version=(2, 0))
    with pytest.raises(ng.NotSupportedError, match="major version 2.0"):
        ng.from_dlpack(v2)
    # refused: the capsules are still their owners' (not renamed, the deleters not called)
    assert ro_calls == [] and v2_calls == [] and "used" not in repr(ro) and "used" not in repr(v2)
