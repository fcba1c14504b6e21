"""The low-level module covers nexus.h, releases the GIL around compute, and the runtime, SafeTensors
and quick start work from Python."""
import os
import re
import runpy
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import nexusgrad as ng
from nexusgrad import _nexus as C

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEADER = os.path.join(ROOT, "include", "nexus.h")

# Not exposed on purpose: the collector frees handles (a second, explicit free would race it), and
# arrays of handles written by the engine are converted and freed by the typemaps.
NOT_WRAPPED = re.compile(r"^nx_\w+_free$")


def header_text():
    with open(HEADER) as f:
        return f.read()


def test_every_function_of_nexus_h_is_wrapped():
    names = re.findall(r"NX_API\s+[\w\s\*]+?\b(nx_\w+)\s*\(", header_text())
    assert len(names) > 150
    missing = [n for n in names if not NOT_WRAPPED.match(n) and not hasattr(C, n)]
    assert not missing, f"functions of nexus.h missing from nexusgrad._nexus: {missing}"
    assert not any(hasattr(C, n) for n in names if NOT_WRAPPED.match(n))


def test_every_handle_type_has_a_destructor():
    handles = re.findall(r"typedef struct (nx_\w+_s)\s*\*\s*nx_\w+;", header_text())
    assert "nx_tensor_s" in handles
    for h in handles:
        assert hasattr(C, h), f"{h} is not wrapped as an owned type"


def test_out_handles_are_owned():
    h = C.nx_tensor_zeros([2], C.NX_F32, "cpu", None)
    assert type(h).__name__ == "nx_tensor_s" and h.thisown
    assert C.nx_tensor_shape(h) == (2,)
    n0 = C.nx_live_handle_count(C.NX_HANDLE_TENSOR)
    del h
    assert C.nx_live_handle_count(C.NX_HANDLE_TENSOR) == n0 - 1


def test_low_level_conventions():
    h = C.nx_tensor_from_data(np.arange(6, dtype=np.float32), (2, 3), C.NX_F32, ("cpu"), None)
    assert C.nx_tensor_dtype(h) == C.NX_F32 and C.nx_tensor_device(h) == "cpu"
    assert C.nx_tensor_strides(h) == (3, 1) and C.nx_tensor_numel(h) == 6 and C.nx_tensor_ndim(h) == 2
    out = np.empty((2, 3), dtype=np.float32)
    C.nx_tensor_copy_to_host(h, out, None)
    np.testing.assert_array_equal(out, np.arange(6).reshape(2, 3))
    parts = C.nx_split(h, [1, 2], 1, None)
    assert [C.nx_tensor_shape(p) for p in parts] == [(2, 1), (2, 2)]
    s = C.nx_sum(h, None, False, None)  # None: all axes
    assert C.nx_tensor_item(s, None) == 15.0
    s1 = C.nx_sum(h, 1, True, None)  # one int: one axis
    assert C.nx_tensor_shape(s1) == (2, 1)
    assert C.nx_tensor_device(C.nx_tensor_zeros([1], C.NX_F32, (C.NX_CPU, 0), None)) == "cpu"
    assert C.nx_tensor_device(C.nx_tensor_zeros([1], C.NX_F32, C.nx_device(C.NX_CPU, 0), None)) == "cpu"
    assert C.nx_dtype_name(C.NX_BF16) == "bf16" and C.nx_dtype_size(C.NX_F64) == 8
    assert ng.version() == "%d.%d.%d" % (C.NX_VERSION_MAJOR, C.NX_VERSION_MINOR, C.NX_VERSION_PATCH)
    assert ng.abi_version() == C.NX_ABI_VERSION


def test_runtime_settings():
    n = ng.get_num_threads()
    ng.set_num_threads(1)
    assert ng.get_num_threads() == 1
    ng.set_num_threads(0)
    assert ng.get_num_threads() >= 1
    ng.set_num_threads(n)
    level = ng.cpu_simd_level()
    assert level in ("avx512", "avx2", "scalar")
    ng.set_cpu_simd_level("scalar")
    assert ng.cpu_simd_level() == "scalar"
    ng.set_cpu_simd_level(level)
    assert ng.live_tensor_count() >= 0
    assert isinstance(ng.cuda.is_available(), bool) and ng.cuda.device_count() >= 0
    ng.cuda.synchronize()
    ng.cuda.set_tf32(False)
    assert ng.cuda.tf32_enabled() is False


def test_settings_through_set_and_get():
    """Rule 3 of nexus.h: nx_<scope>_set_<name>(value) and nx_<scope>_get_<name>() (the value is
    returned in Python)."""
    n = C.nx_cpu_get_num_threads()
    assert isinstance(n, int) and n >= 1
    C.nx_cpu_set_num_threads(1)
    assert C.nx_cpu_get_num_threads() == 1
    C.nx_cpu_set_num_threads(n)
    assert C.nx_cpu_get_simd_level() in ("avx512", "avx2", "scalar")
    for value in (True, False):
        C.nx_runtime_set_deterministic(value)
        assert C.nx_runtime_get_deterministic() is value
        C.nx_autograd_set_enabled(value)
        assert C.nx_autograd_get_enabled() is value
    C.nx_autograd_set_enabled(True)
    assert C.nx_cuda_get_tf32() is False
    C.nx_random_set_seed(5)
    a = C.nx_tensor_randn([3], C.NX_F32, "cpu", None)
    C.nx_random_set_seed(5)
    b = C.nx_tensor_randn([3], C.NX_F32, "cpu", None)
    assert C.nx_tensor_item(C.nx_sum(C.nx_eq(a, b, None), None, False, None), None) == 3
    assert C.nx_live_handle_count(C.NX_HANDLE_TENSOR) >= 2 and C.nx_live_handle_count(999) == -1


def test_options_structs_come_filled_with_their_defaults():
    """Rule 4: the options structs' constructors set struct_size and the NX_*_OPTIONS_DEFAULT values,
    so Python never sets struct_size; None passes NULL (the defaults)."""
    sizes = {}
    for name in ("nx_backward_options", "nx_sgd_options", "nx_adam_options"):
        o = getattr(C, name)()
        assert o.struct_size >= 8, name
        sizes[name] = o.struct_size
    assert sizes["nx_backward_options"] < sizes["nx_sgd_options"] < sizes["nx_adam_options"]
    b = C.nx_backward_options()
    assert (b.retain_graph, b.create_graph, b.check_finite) == (False, False, False)
    s = C.nx_sgd_options()
    assert (s.lr, s.momentum, s.nesterov, s.weight_decay) == (1e-3, 0.0, False, 0.0)
    a = C.nx_adam_options()
    assert (a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, a.decoupled_weight_decay) == \
        (1e-3, 0.9, 0.999, 1e-8, 0.0, False)

    # NULL options are the defaults; a struct_size the library does not know is refused
    p = C.nx_tensor_full([2], 1.0, C.NX_F32, "cpu", None)
    g = C.nx_tensor_full([2], 0.5, C.NX_F32, "cpu", None)
    m = C.nx_tensor_zeros([2], C.NX_F32, "cpu", None)
    v = C.nx_tensor_zeros([2], C.NX_F32, "cpu", None)
    C.nx_adam_step_multi([p], [g], [m], [v], 1, None, None)
    assert abs(C.nx_tensor_item(C.nx_sum(p, None, False, None), None) - 2 * (1 - 1e-3)) < 1e-6
    a.lr = 0.5
    C.nx_adam_step_multi([p], [g], [m], [v], 2, a, None)
    assert abs(C.nx_tensor_item(C.nx_sum(p, None, False, None), None) - 2 * (1 - 1e-3 - 0.5)) < 1e-5
    a.struct_size = 4
    with pytest.raises(ng.InvalidArgumentError, match="options->struct_size is 4"):
        C.nx_adam_step_multi([p], [g], [m], [v], 3, a, None)
    with pytest.raises(TypeError):
        C.nx_adam_step_multi([p], [g], [m], [v], 3, C.nx_sgd_options(), None)


def test_arrays_that_share_one_count_must_have_one_length():
    """nx_adam_step_multi's four arrays (and nx_jvp's two) share one count in C: the bindings take one
    list each and refuse lists of different lengths before the call."""
    p = C.nx_tensor_ones([2], C.NX_F32, "cpu", None)
    with pytest.raises(ng.InvalidArgumentError, match=r"nx_adam_step_multi: .* got 1, 2, 1 and 1"):
        C.nx_adam_step_multi([p], [p, p], [p], [p], 1, None, None)
    with pytest.raises(ng.InvalidArgumentError, match=r"nx_adam_step_multi: .* got 1, 1, 1 and 0"):
        C.nx_adam_step_multi([p], [p], [p], [], 1, None, None)
    C.nx_adam_step_multi([], [], [], [], 1, None, None)  # nothing to do
    with pytest.raises(TypeError, match=r"grads\[0\] must be a tensor"):
        C.nx_adam_step_multi([p], ["x"], [p], [p], 1, None, None)
    x = C.nx_tensor_ones([2], C.NX_F64, "cpu", None)
    C.nx_tensor_set_requires_grad(x, True)
    y = C.nx_mul(x, x, None)
    with pytest.raises(ng.InvalidArgumentError, match="1 inputs but 2 tangents"):
        C.nx_jvp(y, [x], [x, x], None)
    assert C.nx_tensor_item(C.nx_sum(C.nx_jvp(y, [x], [x], None), None, False, None), None) == 4.0


@pytest.mark.skipif(not ng.cuda.is_available(), reason="no CUDA device")
def test_cuda_memory_stats():
    x = ng.randn(1024, 1024, device="cuda")
    stats = ng.cuda.memory_stats(0)
    assert stats["allocated_bytes"] >= 4 << 20 and stats["reserved_bytes"] >= stats["allocated_bytes"]
    ng.cuda.reset_peak_memory_stats(0)
    del x
    ng.cuda.empty_cache(0)


def test_gil_is_released_around_compute():
    a = ng.randn(1536, 1536)
    ng.matmul(a, a)  # warm up
    state = {"started": False, "done": False}

    def work():
        state["started"] = True
        for _ in range(3):
            ng.matmul(a, a)
        state["done"] = True

    th = threading.Thread(target=work)
    th.start()
    while not state["started"]:
        pass
    spins = 0
    t0 = time.perf_counter()
    while not state["done"]:
        spins += 1
    elapsed = time.perf_counter() - t0
    th.join()
    # While the worker is inside nx_matmul the main thread keeps running Python code.
    assert spins > 10_000, f"only {spins} iterations in {elapsed:.3f}s: the GIL was held"


def test_threads_compute_concurrently_and_keep_their_errors():
    errors = []

    def work(i):
        try:
            x = ng.randn(64, 64)
            for _ in range(50):
                x = ng.tanh(x @ x)
            try:
                ng.matmul(ng.randn(2, 3), ng.randn(4, 5))
            except ng.ShapeError as e:
                assert "nx_matmul" in e.message
        except Exception as e:  # pragma: no cover
            errors.append(e)

    ths = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    assert not errors


def test_safetensors_round_trip(tmp_path, device):
    path = str(tmp_path / "m.safetensors")
    tensors = {"w": ng.randn(3, 4, device=device), "b": ng.arange(5, device=device),
               "h": ng.ones(2, dtype=ng.float16, device=device)}
    ng.save_safetensors(path, tensors)
    back = ng.load_safetensors(path, device=device)
    assert sorted(back) == ["b", "h", "w"]
    for k in tensors:
        assert back[k].dtype is tensors[k].dtype and back[k].device == device
        np.testing.assert_array_equal(back[k].cpu().numpy(), tensors[k].cpu().numpy())
    f = ng.SafeTensorsFile(path)
    assert len(f) == 3 and list(f) == f.keys() and f["b"].tolist() == [0, 1, 2, 3, 4]
    assert f.metadata("nothing") is None
    with pytest.raises(ng.InvalidArgumentError):
        f.get("missing")


QUICK_START = """
import nexusgrad as cg; x = cg.Tensor.randn([2, 4], device='{dev}'); w = cg.Tensor.randn([4, 3], requires_grad=True, device='{dev}'); y = cg.matmul(x, w); loss = cg.sum(y); cg.backward(loss); print(w.grad)
"""


def test_quick_start_as_written(device):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [os.path.dirname(os.path.dirname(ng.__file__)),
                                                    env.get("PYTHONPATH", "")] if p)
    r = subprocess.run([sys.executable, "-c", QUICK_START.format(dev=device)], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("tensor([[") and r.stdout.count("\n") == 4
    if device != "cpu":
        assert f"device='{device}'" in r.stdout


def test_example_script_runs(capsys, monkeypatch, device):
    monkeypatch.setattr(sys, "argv", ["quickstart.py", device])
    runpy.run_path(os.path.join(ROOT, "examples", "python", "quickstart.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "loss" in out and "ShapeError" in out


def test_comm_id_and_errors_from_python():
    """nx_comm_id round-trips through hex; bad ranks and missing GPUs raise the matching classes."""
    cid = C.nx_comm_id()
    C.nx_comm_id_from_hex(cid, "0f" * C.NX_COMM_ID_BYTES)
    assert C.nx_comm_id_to_hex(cid) == b"0f" * C.NX_COMM_ID_BYTES
    with pytest.raises(ng.InvalidArgumentError, match="rank 3 is outside"):
        C.nx_comm_create(cid, 3, 2, "cuda:0")
    with pytest.raises(ng.InvalidArgumentError, match="comm is NULL"):
        C.nx_comm_rank(None)
    if C.nx_cuda_device_count() == 0:
        with pytest.raises(ng.DeviceError):
            C.nx_comm_id_create(C.nx_comm_id())
