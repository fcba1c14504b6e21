"""Engine failures raise the Error subclass of their status, which also derives from the matching
built-in exception, and carries the engine's message (nx_last_error_message())."""
import os

import numpy as np
import pytest

import nexusgrad as ng
from nexusgrad import _nexus as C

EXPECTED = {
    "InvalidArgumentError": ("NX_ERR_INVALID_ARGUMENT", ValueError),
    "ShapeError": ("NX_ERR_SHAPE", ValueError),
    "DTypeError": ("NX_ERR_DTYPE", TypeError),
    "DeviceError": ("NX_ERR_DEVICE", RuntimeError),
    "OutOfMemoryError": ("NX_ERR_OUT_OF_MEMORY", MemoryError),
    "CudaError": ("NX_ERR_CUDA", RuntimeError),
    "FileError": ("NX_ERR_IO", OSError),
    "NotSupportedError": ("NX_ERR_NOT_IMPLEMENTED", NotImplementedError),
    "StateError": ("NX_ERR_STATE", RuntimeError),
    "InternalError": ("NX_ERR_INTERNAL", RuntimeError),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_error_class_hierarchy(name):
    cls = getattr(ng, name)
    status_name, builtin = EXPECTED[name]
    assert issubclass(cls, ng.Error) and issubclass(cls, builtin)
    assert cls.status_name == status_name
    assert C.nx_status_string(cls.status) == status_name
    assert cls.__module__ == "nexusgrad"
    assert cls.__doc__


def test_every_failing_status_has_its_class():
    statuses = {getattr(C, n) for n in dir(C) if n.startswith("NX_ERR_")}
    classes = {getattr(ng, n).status for n in EXPECTED}
    assert statuses == classes


def check(exc_info, cls, *fragments):
    e = exc_info.value
    assert type(e) is cls
    assert e.status == cls.status and e.status_name == cls.status_name
    assert e.message == str(e) and e.message
    for f in fragments:
        assert f in e.message, e.message


def test_shape_error_message_is_the_engines():
    x = ng.randn(2, 4)
    with pytest.raises(ng.ShapeError) as ei:
        ng.matmul(x, x)
    check(ei, ng.ShapeError, "nx_matmul: inner dimensions differ: a is [2,4], b is [2,4]")
    with pytest.raises(ValueError):  # the built-in it derives from
        x @ x
    with pytest.raises(ng.ShapeError) as ei:
        x + ng.randn(3)
    check(ei, ng.ShapeError, "nx_add")
    with pytest.raises(ng.ShapeError):
        ng.softmax(x, 5)
    with pytest.raises(ng.ShapeError):
        x.view(3, 3)


def test_dtype_errors():
    with pytest.raises(ng.DTypeError) as ei:
        ng.randn(3, dtype=ng.int32)
    check(ei, ng.DTypeError, "nx_tensor_randn", "floating")
    with pytest.raises(TypeError):
        ng.matmul(ng.randn(2, 2), ng.randn(2, 2, dtype=ng.float64))
    with pytest.raises(ng.DTypeError):
        ng.tensor([1 + 2j])
    with pytest.raises(ng.DTypeError):
        ng.from_numpy(np.zeros(3, dtype=np.uint8))


def test_invalid_argument_errors():
    with pytest.raises(ng.InvalidArgumentError) as ei:
        ng.arange(0, 1, 0)
    check(ei, ng.InvalidArgumentError, "nx_tensor_arange", "step")
    h = ng.randn(2)._h
    with pytest.raises(ng.InvalidArgumentError) as ei:
        C.nx_add(None, h, None)  # a NULL handle, at the low level
    check(ei, ng.InvalidArgumentError, "nx_add", "NULL")
    with pytest.raises(ValueError):
        ng.cross_entropy(ng.randn(2, 3), ng.tensor([0, 1]), reduction="avg")


def test_device_errors():
    with pytest.raises(ng.DeviceError) as ei:
        ng.zeros(2, device="cuda:%d" % (ng.cuda.device_count() + 3))
    check(ei, ng.DeviceError, "nx_tensor_zeros")
    with pytest.raises(RuntimeError):
        C.nx_tensor_zeros([2], C.NX_F32, (9, 0), None)
    with pytest.raises(ng.DeviceError):
        ng.zeros(2, device="tpu")  # rejected by the Python layer with the same class


def test_out_of_memory_error():
    with pytest.raises(ng.OutOfMemoryError) as ei:
        ng.zeros(1 << 40, 1 << 20)
    assert ei.value.message
    with pytest.raises(MemoryError):
        ng.zeros(1 << 61, dtype=ng.float64)


def test_file_error(tmp_path):
    with pytest.raises(ng.FileError) as ei:
        ng.load_safetensors(str(tmp_path / "missing.safetensors"))
    check(ei, ng.FileError, "nx_safetensors_open")
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}      ")
    with pytest.raises(OSError):
        ng.SafeTensorsFile(str(bad))


def test_not_supported_error():
    have_avx512 = "avx512f" in open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else True
    if not have_avx512:
        with pytest.raises(ng.NotSupportedError) as ei:
            ng.set_cpu_simd_level("avx512")
        check(ei, ng.NotSupportedError, "nx_cpu_set_simd_level")
    with pytest.raises(NotImplementedError):
        ng.from_numpy(np.arange(6.0)[::-1])  # negative strides cannot be shared
    with pytest.raises(NotImplementedError):
        ng.arange(6.0)[::-1]


def test_state_errors():
    w = ng.randn(3, requires_grad=True)
    with pytest.raises(ng.StateError) as ei:
        w += 1  # in-place on a leaf that requires grad, with grad mode on
    check(ei, ng.StateError, "in-place")
    x = ng.randn(3, requires_grad=True)
    y = ng.exp(x * 1)
    loss = ng.sum(y)
    ng.backward(loss)
    with pytest.raises(ng.StateError) as ei:  # the graph was freed by the first backward
        ng.backward(loss)
    check(ei, ng.StateError, "already freed")
    a = ng.randn(3, requires_grad=True)
    b = a * 2
    c = ng.exp(b)
    with ng.no_grad():
        b += 1  # modifies a tensor saved by exp's node
    with pytest.raises(RuntimeError):
        ng.backward(ng.sum(c))
    with pytest.raises(ng.StateError):
        ng.backward(ng.sum(ng.randn(3)))  # nothing requires grad
    with pytest.raises(ng.StateError):
        (x * 2).requires_grad = False  # not a leaf


def test_errors_do_not_leave_state_behind():
    with pytest.raises(ng.ShapeError):
        ng.matmul(ng.randn(2, 3), ng.randn(2, 3))
    # a later success is unaffected and the error text belongs to the failed call only
    assert ng.matmul(ng.randn(2, 3), ng.randn(3, 2)).shape == (2, 2)
    with pytest.raises(ng.DTypeError) as ei:
        ng.rand(2, dtype=ng.int64)
    assert "matmul" not in ei.value.message


def test_python_level_argument_errors():
    x = ng.randn(3)
    with pytest.raises(TypeError):
        ng.reshape(x, "abc")
    with pytest.raises(TypeError):
        C.nx_add(x._h, "not a tensor", None)
    with pytest.raises(ValueError):
        C.nx_tensor_from_data(b"123", [2], C.NX_F32, "cpu", None)  # buffer smaller than shape needs
    with pytest.raises(ValueError):
        C.nx_tensor_zeros([2], C.NX_F32, "gpu", None)
    with pytest.raises(ValueError):
        C.nx_tensor_copy_to_host(x._h, bytearray(4), None)  # engine: buffer size mismatch
