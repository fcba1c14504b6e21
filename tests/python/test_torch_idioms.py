"""The PyTorch idioms of a training script, one test per row of docs/python_idioms.md (test_<row>).

Each test runs the torch line and the nexusgrad line on the same inputs and compares them
(torch 1.13 is the oracle), or asserts the documented difference exactly.
"""
import copy
import os
import pickle
import re
from collections import OrderedDict

import numpy as np
import pytest
import torch

import nexusgrad as ng
import nexusgrad.nn.functional as F
from nexusgrad import nn
from nexusgrad.data import DataLoader, Dataset, TensorDataset
from nexusgrad.optim import lr_scheduler

RNG = np.random.default_rng(19)


def arr(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def host(t):
    if isinstance(t, torch.Tensor):
        return t.detach().float().numpy() if t.dtype == torch.bfloat16 else t.detach().numpy()
    if isinstance(t, ng.Tensor):
        return t.detach().cpu().numpy()
    return np.asarray(t)


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(host(a), host(b), rtol=tol, atol=tol)


def dtype_name(d):
    return str(d).split(".")[-1]


class NgNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 3)
        self.scale = nn.Parameter(ng.ones(3))

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x))) * self.scale


class TorchNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 8)
        self.fc2 = torch.nn.Linear(8, 3)
        self.scale = torch.nn.Parameter(torch.ones(3))

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x))) * self.scale


def twin_nets():
    """An NgNet holding a TorchNet's initial weights."""
    tnet = TorchNet()
    net = NgNet()
    net.load_state_dict(tnet.state_dict())
    return net, tnet


# ---------------------------------------------------------------- grad mode
def test_no_grad():
    x = arr(3)
    w, tw = ng.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    with ng.no_grad():
        y = w * 2
    with torch.no_grad():
        ty = tw * 2
    assert y.requires_grad is ty.requires_grad is False

    @ng.no_grad()
    def triple(a):
        return a * 3

    @torch.no_grad()
    def ttriple(a):
        return a * 3

    assert triple(w).requires_grad is ttriple(tw).requires_grad is False
    with pytest.raises(ZeroDivisionError):
        with ng.no_grad():
            1 / 0
    assert ng.is_grad_enabled() and (w * 2).requires_grad  # restored, also after an exception


def test_enable_grad_set_grad_enabled():
    def trace(lib):
        states = []
        with lib.no_grad():
            with lib.enable_grad():
                states.append(lib.is_grad_enabled())
            states.append(lib.is_grad_enabled())
        with lib.set_grad_enabled(False):
            states.append(lib.is_grad_enabled())
        states.append(lib.is_grad_enabled())
        lib.set_grad_enabled(False)
        states.append(lib.is_grad_enabled())
        lib.set_grad_enabled(True)
        with lib.inference_mode():
            states.append(lib.is_grad_enabled())

        @lib.enable_grad()
        def inner():
            return lib.is_grad_enabled()

        with lib.no_grad():
            states.append(inner())
        return states

    assert trace(ng) == trace(torch) == [True, False, False, True, False, False, True]


# ---------------------------------------------------------------- tensor to Python
def test_item():
    for data in ([2.5], 7, True, [[-3.25]], 2 ** 60 + 1):
        a, b = ng.tensor(data).item(), torch.tensor(data).item()
        assert a == b and type(a) is type(b), data
    for lib in (ng, torch):
        with pytest.raises(ValueError):
            lib.ones(2).item()


def test_tolist():
    x = arr(2, 3)
    for data in (x, np.arange(6).reshape(3, 2), np.float32(1.5), np.array([True, False])):
        assert ng.tensor(data).tolist() == torch.tensor(data).tolist()


def test_numpy():
    x = arr(2, 3)
    t, tt = ng.tensor(x), torch.tensor(x)
    t.numpy()[0, 0] = 42.0
    tt.numpy()[0, 0] = 42.0
    assert t[0, 0].item() == tt[0, 0].item() == 42.0  # a CPU view in both
    w = ng.tensor(x, requires_grad=True)
    np.testing.assert_array_equal(w.detach().cpu().numpy(), torch.tensor(x, requires_grad=True).detach().cpu().numpy())
    # different: torch refuses numpy() on a tensor that requires grad; nexusgrad gives the view
    with pytest.raises(RuntimeError):
        torch.tensor(x, requires_grad=True).numpy()
    np.testing.assert_array_equal(w.numpy(), x)
    # bfloat16 has no NumPy type: a float32 copy
    assert ng.tensor(x).bfloat16().numpy().dtype == np.float32


# ---------------------------------------------------------------- devices and dtypes
def test_to_device():
    x, tx = ng.randn(2, 3), torch.randn(2, 3)
    assert x.to("cpu") is x and x.cpu() is x and x.to(ng.device("cpu")) is x and x.to(torch.device("cpu")) is x
    assert tx.to("cpu") is tx and tx.cpu() is tx
    other, tother = ng.zeros(1, dtype=ng.float64), torch.zeros(1, dtype=torch.float64)
    assert dtype_name(x.to(other).dtype) == dtype_name(tx.to(tother).dtype) == "float64"
    if ng.cuda.is_available():
        g = x.cuda()
        assert g.device == "cuda:0" and g.device.type == "cuda" and g.device.index == 0
        close(g.to("cpu"), x)
        assert x.to("cuda").device == x.to(ng.device("cuda", 0)).device == "cuda:0"
    else:
        with pytest.raises(ng.DeviceError):
            x.cuda()


def test_to_dtype():
    x = arr(7) * 10
    t, tt = ng.tensor(x), torch.tensor(x)
    for method in ("float", "double", "half", "bfloat16", "long", "int", "bool"):
        a, b = getattr(t, method)(), getattr(tt, method)()
        assert dtype_name(a.dtype) == dtype_name(b.dtype), method
        np.testing.assert_array_equal(host(a), host(b), err_msg=method)
    for target in (ng.float64, torch.float64, "float64"):
        assert t.to(target).dtype == ng.float64
    close(t.to(ng.float16), tt.to(torch.float16), 0)


def test_8bit_storage_dtypes():
    """int8 and the two FP8 formats hold data (nexus.h): casts round to nearest even and
    saturate (tests/capi/test_dtypes_8bit.c has the exhaustive oracle); ops refuse them."""
    from nexusgrad._dtypes import to_dtype
    assert to_dtype("f8e4m3") is ng.float8_e4m3fn and to_dtype("float8_e5m2") is ng.float8_e5m2
    assert to_dtype(np.int8) is ng.int8 and ng.int8.itemsize == 1 and not ng.float8_e4m3fn.is_floating_point
    x = ng.tensor(np.array([0.3, -1.0, 500.0, 1.0625], dtype=np.float32))
    q = x.to(ng.float8_e4m3fn)
    assert q.dtype == ng.float8_e4m3fn
    np.testing.assert_array_equal(host(q.to(ng.float32)), np.array([0.3125, -1.0, 448.0, 1.0], dtype=np.float32))
    np.testing.assert_array_equal(host(x.to(ng.int8)), np.array([0, -1, -12, 1], dtype=np.int8))  # 500 wraps to -12
    with pytest.raises(ng.DTypeError, match="cast it to a floating dtype"):
        q + q


def test_attributes():
    x = arr(2, 3, 4)
    t, tt = ng.tensor(x), torch.tensor(x)
    assert t.shape == tt.shape == (2, 3, 4) and t.size() == tt.size()
    assert t.size(-1) == tt.size(-1) == 4 and t.size(0) == tt.size(0)
    assert t.dim() == tt.dim() == t.ndim == tt.ndim == 3 and t.numel() == tt.numel() == 24 and len(t) == len(tt)
    assert dtype_name(t.dtype) == dtype_name(tt.dtype) and t.is_floating_point() == tt.is_floating_point()
    assert t.device.type == tt.device.type == "cpu" and t.device.index is tt.device.index is None
    assert t.device == "cpu" and str(t.device) == str(tt.device)  # a str too
    assert type(t.shape) is tuple  # different: torch.Size is a tuple subclass


def test_detach():
    x = arr(3)
    for lib in (ng, torch):
        w = lib.tensor(x, requires_grad=True)
        d = w.detach()
        assert not d.requires_grad and d.is_leaf
        d[0] = 5.0  # same storage
        assert w[0].item() == 5.0


def test_requires_grad_():
    x = arr(3)
    for lib in (ng, torch):
        t = lib.tensor(x)
        assert not t.requires_grad and t.requires_grad_() is t and t.requires_grad and t.is_leaf
        y = t * 2
        assert y.requires_grad and not y.is_leaf
        t.requires_grad = False
        assert not (t * 2).requires_grad
        assert lib.tensor(x, requires_grad=True).requires_grad
    # integer tensors cannot require grad: torch raises RuntimeError, nexusgrad DTypeError (a TypeError)
    with pytest.raises(RuntimeError):
        torch.tensor([1, 2]).requires_grad_()
    with pytest.raises(ng.DTypeError):
        ng.tensor([1, 2]).requires_grad_()


# ---------------------------------------------------------------- autograd
def test_backward_scalar():
    x, w0 = arr(5, 4), arr(4, 3)
    w, tw = ng.tensor(w0, requires_grad=True), torch.tensor(w0, requires_grad=True)
    loss = ((ng.tensor(x) @ w).tanh() ** 2).mean()
    tloss = ((torch.tensor(x) @ tw).tanh() ** 2).mean()
    loss.backward()
    tloss.backward()
    close(loss, tloss)
    close(w.grad, tw.grad)


def test_backward_gradient():
    x, g = arr(6), arr(6)
    w, tw = ng.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    y, ty = w * 3 + w ** 2, tw * 3 + tw ** 2
    y.backward(gradient=ng.tensor(g), retain_graph=True)
    ty.backward(gradient=torch.tensor(g), retain_graph=True)
    close(w.grad, tw.grad)
    y.backward(ng.tensor(g))  # a second backward through the retained graph accumulates
    ty.backward(torch.tensor(g))
    close(w.grad, tw.grad)


def test_grad_attribute():
    x = arr(3)
    w, tw = ng.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    assert w.grad is None and tw.grad is None
    for _ in range(2):  # gradients accumulate
        (w * w).sum().backward()
        (tw * tw).sum().backward()
        close(w.grad, tw.grad)
    w.grad = None
    tw.grad = None
    assert w.grad is None and tw.grad is None
    # different: torch lets a tensor be assigned to .grad; the C API has no setter
    with pytest.raises(TypeError):
        w.grad = ng.zeros(3)


def test_zero_grad():
    x = arr(5, 4)
    net, tnet = twin_nets()
    opt, topt = nn.SGD(net.parameters(), lr=0.1), torch.optim.SGD(tnet.parameters(), lr=0.1)
    net(ng.tensor(x)).sum().backward()
    tnet(torch.tensor(x)).sum().backward()
    net.zero_grad(set_to_none=False)
    tnet.zero_grad(set_to_none=False)
    for p, tp in zip(net.parameters(), tnet.parameters()):
        np.testing.assert_array_equal(host(p.grad), host(tp.grad))
        assert not np.any(host(p.grad))
    net(ng.tensor(x)).sum().backward()
    opt.zero_grad()
    topt.zero_grad()
    # different default: nexusgrad drops the gradients (set_to_none=True, torch 2's default);
    # torch 1.13 fills them with zeros
    assert all(p.grad is None for p in net.parameters())
    assert all(tp.grad is not None and not tp.grad.any() for tp in tnet.parameters())
    net(ng.tensor(x)).sum().backward()
    opt.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not np.any(host(p.grad)) for p in net.parameters())


# ---------------------------------------------------------------- in-place
def test_inplace_ops():
    x, y = arr(2, 3), arr(2, 3)
    cases = [("add_", (y,), {}), ("add_", (y,), {"alpha": 2.0}), ("add_", (arr(3),), {}), ("sub_", (y,), {}),
             ("sub_", (0.5,), {"alpha": 3}), ("mul_", (y,), {}), ("mul_", (1.5,), {}), ("div_", (y,), {}),
             ("div_", (4.0,), {}), ("clamp_", (), {"min": -0.5, "max": 0.5}), ("clamp_", (), {"min": 0.0}),
             ("fill_", (2.5,), {}), ("zero_", (), {}), ("copy_", (y,), {})]
    for name, args, kwargs in cases:
        a, ta = ng.tensor(x), torch.tensor(x)
        r = getattr(a, name)(*[ng.tensor(v) if isinstance(v, np.ndarray) else v for v in args], **kwargs)
        tr = getattr(ta, name)(*[torch.tensor(v) if isinstance(v, np.ndarray) else v for v in args], **kwargs)
        assert r is a and tr is ta
        close(a, ta, 1e-6)
    # on a leaf that requires grad both refuse (RuntimeError); under no_grad both allow
    w, tw = ng.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    with pytest.raises(RuntimeError):
        tw.add_(1.0)
    with pytest.raises(ng.StateError):
        w.add_(1.0)
    with ng.no_grad():
        w.add_(1.0)
    with torch.no_grad():
        tw.add_(1.0)
    close(w, tw)
    # different: torch records in-place ops on non-leaves; autodiff here does not, and refuses them
    (tw * 2).add_(1.0)
    with pytest.raises(ng.StateError):
        (w * 2).add_(1.0)


def test_inplace_operators():
    x, y = arr(2, 3), arr(2, 3)
    a, ta = ng.tensor(x), torch.tensor(x)
    ida, idta = id(a), id(ta)
    for lib, t in ((ng, a), (torch, ta)):
        t += lib.tensor(y)
        t -= 1.0
        t *= 2.0
        t /= 3.0
        t *= lib.tensor(y)
        t /= lib.tensor(y) + 5
    assert id(a) == ida and id(ta) == idta
    close(a, ta, 1e-6)
    # integer tensors cannot hold a true quotient: torch RuntimeError, nexusgrad DTypeError (TypeError)
    ti, ni = torch.tensor([1, 2]), ng.tensor([1, 2])
    with pytest.raises(RuntimeError):
        ti /= 2
    with pytest.raises(ng.DTypeError):
        ni /= 2


def test_manual_sgd_update():
    x, y = arr(4), arr(4)
    w, tw = ng.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    for _ in range(3):
        loss = ((w * ng.tensor(y)).sum() - 1) ** 2
        tloss = ((tw * torch.tensor(y)).sum() - 1) ** 2
        loss.backward()
        tloss.backward()
        with ng.no_grad():
            w -= 0.1 * w.grad
        with torch.no_grad():
            tw -= 0.1 * tw.grad
        w.grad = None
        tw.grad = None
    close(w, tw)
    assert w.requires_grad and w.is_leaf


def test_data_attribute():
    x, y = arr(3), arr(3)
    w, tw = ng.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    assert not w.data.requires_grad and not tw.data.requires_grad
    w.data.mul_(0.5)  # no no_grad needed: .data is outside the graph
    tw.data.mul_(0.5)
    close(w, tw)
    w.data = ng.tensor(y)
    tw.data = torch.tensor(y)
    close(w, tw)
    assert w.requires_grad and w.is_leaf
    # different: torch rebinds t.data to another shape; nexusgrad copies in place, same shape only
    tw.data = torch.zeros(5)
    assert tw.shape == (5,)
    with pytest.raises(ng.ShapeError):
        w.data = ng.zeros(5)


# ---------------------------------------------------------------- indexing
def test_basic_indexing():
    x = arr(4, 5)
    t, tt = ng.tensor(x), torch.tensor(x)
    for index in (0, -1, (slice(None), slice(1, 3)), (slice(1, None), slice(None, None, 2)), (Ellipsis, None), None,
                  (2, 3), (Ellipsis, -1), (slice(None), 1)):
        close(t[index], tt[index], 0)
        assert t[index].shape == tt[index].shape
    t[:, 1:3].fill_(0.0)  # views write through
    tt[:, 1:3].fill_(0.0)
    t[0] = 5.0
    tt[0] = 5.0
    col = arr(4)
    t[:, 0] = ng.tensor(col)
    tt[:, 0] = torch.tensor(col)
    close(t, tt, 0)
    # negative steps: refused by both (torch ValueError, nexusgrad NotSupportedError)
    with pytest.raises(ValueError):
        tt[::-1]
    with pytest.raises(ng.NotSupportedError):
        t[::-1]


def test_integer_indexing():
    x = arr(4, 5)
    t, tt = ng.tensor(x), torch.tensor(x)
    close(t[ng.tensor([2, 0, 2])], tt[torch.tensor([2, 0, 2])], 0)
    close(t[[0, 3]], tt[[0, 3]], 0)
    close(t[:, [1, 4]], tt[:, [1, 4]], 0)
    close(t[ng.tensor([[0, 1], [3, 2]])], tt[torch.tensor([[0, 1], [3, 2]])], 0)
    # missing: assignment through index tensors (the C API has no scatter)
    tt[[0, 2]] = 1.0
    with pytest.raises(ng.NotSupportedError):
        t[[0, 2]] = 1.0


def test_mask_indexing():
    x = arr(3, 4)
    t, tt = ng.tensor(x), torch.tensor(x)
    close(t[t > 0], tt[tt > 0], 0)
    rows = np.array([True, False, True])
    close(t[ng.tensor(rows)], tt[torch.tensor(rows)], 0)
    assert t[t > 100].shape == tt[tt > 100].shape == (0,)
    w, tw = ng.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    (w[w > 0] ** 2).sum().backward()
    (tw[tw > 0] ** 2).sum().backward()
    close(w.grad, tw.grad)
    t[t < 0] = 0.0
    tt[tt < 0] = 0.0
    t[ng.tensor(rows)] = 1.5
    tt[torch.tensor(rows)] = 1.5
    close(t, tt, 0)
    for lib, a in ((ng, t), (torch, tt)):  # a mask of the wrong shape: IndexError in both
        with pytest.raises(IndexError):
            a[lib.tensor([True, False])]
    # missing: one value per selected element (the C API has no scatter)
    tt[tt > 1] = torch.arange(float((tt > 1).sum()))
    with pytest.raises(ng.NotSupportedError):
        t[t > 1] = ng.arange(float(ng.sum(t > 1).item()))


# ---------------------------------------------------------------- arithmetic, creation, shapes
def test_operators_broadcasting():
    a, b = arr(3, 1), arr(1, 4)
    t, u, tt, tu = ng.tensor(a), ng.tensor(b), torch.tensor(a), torch.tensor(b)
    pairs = [(t + u, tt + tu), (t - u, tt - tu), (t * u, tt * tu), (t / u, tt / tu), (abs(t) ** u, abs(tt) ** tu),
             (2 + t, 2 + tt), (t - 1.5, tt - 1.5), (3 * t, 3 * tt), (t / 2, tt / 2), (1 / u, 1 / tu),
             (t ** 2, tt ** 2), (2 ** t, 2 ** tt), (-t, -tt), (abs(t), abs(tt)), (t > 0, tt > 0), (t == t, tt == tt),
             (t <= u, tt <= tu)]
    for ours, theirs in pairs:
        assert dtype_name(ours.dtype) == dtype_name(theirs.dtype)
        close(ours, theirs, 1e-6)
    m1, m2 = arr(2, 3, 4), arr(4, 5)
    close(ng.tensor(m1) @ ng.tensor(m2), torch.tensor(m1) @ torch.tensor(m2))
    i, ti = ng.tensor([1, 2]), torch.tensor([1, 2])
    for ours, theirs in ((i + 0.5, ti + 0.5), (i * 2, ti * 2), (i / i, ti / ti), (i - 1, ti - 1)):
        assert dtype_name(ours.dtype) == dtype_name(theirs.dtype)
        close(ours, theirs, 0)


def test_creation():
    for data in ([1, 2], [1.0, 2.5], [True, False], np.arange(3.0), np.arange(3, dtype=np.int32), 3.5):
        ours, theirs = ng.tensor(data), torch.tensor(data)
        assert dtype_name(ours.dtype) == dtype_name(theirs.dtype) and ours.tolist() == theirs.tolist()
    x = arr(2, 3)
    t, tt = ng.from_numpy(x), torch.from_numpy(x)
    x[0, 0] = 9.0  # both share the array's memory
    assert t[0, 0].item() == tt[0, 0].item() == 9.0
    for name, args in (("zeros", (2, 3)), ("zeros", ((2, 3),)), ("ones", (4,)), ("full", ((2, 2), 7)),
                       ("full", ((2,), 1.5)), ("arange", (5,)), ("arange", (0, 1, 0.25)), ("arange", (1, 10, 3))):
        ours, theirs = getattr(ng, name)(*args), getattr(torch, name)(*args)
        assert dtype_name(ours.dtype) == dtype_name(theirs.dtype), (name, args)
        np.testing.assert_array_equal(host(ours), host(theirs))
    for name in ("zeros_like", "ones_like"):
        ours, theirs = getattr(ng, name)(ng.tensor(x)), getattr(torch, name)(torch.tensor(x))
        np.testing.assert_array_equal(host(ours), host(theirs))
    r = ng.randn(2, 3, requires_grad=True)
    assert r.shape == (2, 3) and r.dtype == ng.float32 and r.requires_grad and ng.rand(4).shape == (4,)


def test_manual_seed():
    def draw(lib, seed):
        lib.manual_seed(seed)
        return host(lib.randn(8)), host(lib.rand(3))

    for lib in (ng, torch):
        a, b, c = draw(lib, 7), draw(lib, 7), draw(lib, 8)
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
        assert not np.array_equal(a[0], c[0])
    # different: the same seed gives other numbers (another generator: counter-based, thread-independent)
    assert not np.allclose(draw(ng, 7)[0], draw(torch, 7)[0])
    ng.manual_seed(3)  # and layers are initialized reproducibly from it
    w1 = host(nn.Linear(3, 2).weight)
    ng.manual_seed(3)
    np.testing.assert_array_equal(w1, host(nn.Linear(3, 2).weight))


def test_shape_ops():
    x = arr(2, 3, 4)
    t, tt = ng.tensor(x), torch.tensor(x)
    cases = [lambda a: a.reshape(6, 4), lambda a: a.reshape((6, 4)), lambda a: a.reshape(-1), lambda a: a.view(3, 8),
             lambda a: a.view(-1, 4), lambda a: a.permute(2, 0, 1), lambda a: a.transpose(0, 2),
             lambda a: a.permute(2, 0, 1).contiguous(), lambda a: a.flatten(), lambda a: a.flatten(1),
             lambda a: a.unsqueeze(1), lambda a: a[:, :1, :1].squeeze(), lambda a: a[:, :1].squeeze(1),
             lambda a: a[0].T, lambda a: a[0].t(), lambda a: a.view_as(a.reshape(4, 6)), lambda a: a.expand(3, 2, 3, 4)]
    for i, f in enumerate(cases):
        ours, theirs = f(t), f(tt)
        assert ours.shape == theirs.shape, i
        close(ours, theirs, 0)
    assert t.permute(2, 0, 1).is_contiguous() == tt.permute(2, 0, 1).is_contiguous() is False
    # view of a non-contiguous tensor: torch RuntimeError, nexusgrad ShapeError (a ValueError)
    with pytest.raises(RuntimeError):
        tt.transpose(0, 2).view(24)
    with pytest.raises(ng.ShapeError):
        t.transpose(0, 2).view(24)


def test_cat_stack():
    a, b = arr(2, 3), arr(2, 3)
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    na, nb = ng.tensor(a, requires_grad=True), ng.tensor(b, requires_grad=True)
    for dim in (0, 1, -1):
        close(ng.cat([na, nb], dim=dim), torch.cat([ta, tb], dim=dim), 0)
        close(ng.stack([na, nb], dim=dim), torch.stack([ta, tb], dim=dim), 0)
    w = arr(4, 3)
    (ng.cat([na, nb]) * ng.tensor(w)).sum().backward()
    (torch.cat([ta, tb]) * torch.tensor(w)).sum().backward()
    close(na.grad, ta.grad, 0)
    close(nb.grad, tb.grad, 0)


def test_functional():
    import torch.nn.functional as TF

    x, target = arr(6, 5), np.array([0, 4, 2, 2, 1, 3])
    logits, tlogits = ng.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    y, ty = ng.tensor(target), torch.tensor(target)
    close(F.relu(logits), TF.relu(tlogits))
    close(F.softmax(logits, dim=1), TF.softmax(tlogits, dim=1))
    close(F.log_softmax(logits, dim=-1), TF.log_softmax(tlogits, dim=-1))
    close(F.gelu(logits), TF.gelu(tlogits))
    close(F.silu(logits), TF.silu(tlogits))
    close(F.mse_loss(logits, ng.tensor(x[::-1].copy())), TF.mse_loss(tlogits, torch.tensor(x[::-1].copy())))
    w, b = arr(3, 5), arr(3)
    close(F.linear(logits, ng.tensor(w), ng.tensor(b)), TF.linear(tlogits, torch.tensor(w), torch.tensor(b)))
    close(F.one_hot(y, 5), TF.one_hot(ty, 5), 0)
    ignored = target.copy()
    ignored[1] = -100
    for kwargs, tgt in (({}, target), ({"label_smoothing": 0.1}, target), ({"reduction": "sum"}, target),
                        ({}, ignored)):
        close(F.cross_entropy(logits, ng.tensor(tgt), **kwargs), TF.cross_entropy(tlogits, torch.tensor(tgt), **kwargs))
    F.cross_entropy(logits, y).backward()
    TF.cross_entropy(tlogits, ty).backward()
    close(logits.grad, tlogits.grad)
    assert nn.functional is ng.functional


# ---------------------------------------------------------------- modules
def test_module_subclass():
    net, tnet = twin_nets()
    x = arr(5, 4)
    out, tout = net(ng.tensor(x)), tnet(torch.tensor(x))
    close(out, tout)
    (out ** 2).sum().backward()
    (tout ** 2).sum().backward()
    grads = {n: p.grad for n, p in net.named_parameters()}
    for n, tp in tnet.named_parameters():
        close(grads[n], tp.grad, 1e-4)
    assert isinstance(net.scale, nn.Parameter) and isinstance(net.fc1, nn.Linear)
    net.constant = ng.ones(2)  # a plain tensor attribute is not registered, as in torch
    tnet.constant = torch.ones(2)
    assert "constant" not in net.state_dict() and "constant" not in tnet.state_dict()

    class Forgot(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(2, 2)

    class TForgot(torch.nn.Module):
        def __init__(self):
            self.fc = torch.nn.Linear(2, 2)

    for cls in (Forgot, TForgot):  # assigning before super().__init__(): AttributeError in both
        with pytest.raises(AttributeError):
            cls()
    with pytest.raises(NotImplementedError):  # no forward
        nn.Module()(ng.ones(1))


def test_parameters():
    net, tnet = twin_nets()
    assert [n for n, _ in net.named_parameters()] == [n for n, _ in tnet.named_parameters()] == \
        ["scale", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    params = net.parameters()
    assert isinstance(params, list) and len(params) == 5  # different: torch gives an iterator
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in params)
    assert sum(p.numel() for p in params) == sum(p.numel() for p in tnet.parameters())
    assert next(iter(net.parameters())).shape == next(tnet.parameters()).shape
    assert [n for n, _ in net.named_parameters(recurse=False)] == [n for n, _ in tnet.named_parameters(recurse=False)]
    assert [n for n, _ in net.named_modules()] == [n for n, _ in tnet.named_modules()] == ["", "fc1", "fc2"]
    assert [n for n, _ in net.named_children()] == [n for n, _ in tnet.named_children()]
    assert net.fc1.weight.shape == tuple(tnet.fc1.weight.shape) == (8, 4)


def test_train_eval():
    class Drop(nn.Module):
        def __init__(self):
            super().__init__()
            self.drop = nn.Dropout(0.5)
            self.seq = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.3))

        def forward(self, x):
            return self.drop(x)

    class TDrop(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.drop = torch.nn.Dropout(0.5)
            self.seq = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.3))

    m, tm = Drop(), TDrop()
    for mode in ("eval", "train", "eval"):
        assert getattr(m, mode)() is m and getattr(tm, mode)() is tm
        flags = [m.training, m.drop.training, m.seq.training, m.seq[1].training]
        assert flags == [tm.training, tm.drop.training, tm.seq.training, tm.seq[1].training] == [mode == "train"] * 4
    x = np.abs(arr(200)) + 0.1
    close(m(ng.tensor(x)), x, 0)  # evaluation: identity
    m.train()
    y = host(m(ng.tensor(x)))
    kept = y != 0  # training: zeros, and the kept values scaled by 1 / (1 - p), as torch
    np.testing.assert_allclose(y[kept], x[kept] * 2, rtol=1e-6)
    assert 0 < kept.sum() < 200


def test_state_dict():
    net, tnet = twin_nets()
    sd, tsd = net.state_dict(), tnet.state_dict()
    assert isinstance(sd, OrderedDict) and list(sd) == list(tsd)
    assert not any(v.requires_grad for v in sd.values())
    sd["fc1.bias"].fill_(0.25)  # the values share the parameters' memory
    tsd["fc1.bias"].fill_(0.25)
    close(net.fc1.bias, tnet.fc1.bias, 0)
    other = NgNet()
    result = other.load_state_dict(net.state_dict())
    assert result.missing_keys == [] and result.unexpected_keys == []
    x = ng.tensor(arr(3, 4))
    close(other(x), net(x), 0)

    def messages(mutate):
        ours, theirs = dict(net.state_dict()), dict(tnet.state_dict())
        mutate(ours, ng)
        mutate(theirs, torch)
        with pytest.raises(RuntimeError) as e:
            NgNet().load_state_dict(ours)
        with pytest.raises(RuntimeError) as te:
            TorchNet().load_state_dict(theirs)
        torch_msg = re.sub(r"torch\.Size\((\[[^\]]*\])\)", r"\1", str(te.value)).replace("TorchNet", "NgNet")
        return str(e.value), torch_msg

    def drop_key(d, lib):
        del d["fc2.bias"]

    def add_key(d, lib):
        d["extra.weight"] = lib.zeros(2)

    def wrong_shape(d, lib):
        d["fc1.weight"] = lib.zeros(4, 8)

    def all_three(d, lib):
        drop_key(d, lib)
        add_key(d, lib)
        wrong_shape(d, lib)

    for mutate in (drop_key, add_key, wrong_shape, all_three):
        ours, theirs = messages(mutate)
        assert ours == theirs, mutate.__name__
    assert isinstance(pytest.raises(ng.StateError, NgNet().load_state_dict, {}).value, ng.Error)
    # strict=False reports the same keys as torch
    partial, tpartial = dict(net.state_dict()), dict(tnet.state_dict())
    for d, lib in ((partial, ng), (tpartial, torch)):
        drop_key(d, lib)
        add_key(d, lib)
    res, tres = NgNet().load_state_dict(partial, strict=False), TorchNet().load_state_dict(tpartial, strict=False)
    assert res.missing_keys == tres.missing_keys and res.unexpected_keys == tres.unexpected_keys
    # different: nothing is copied when loading fails (all or nothing)
    target = NgNet()
    before = host(target.scale).copy()
    bad = dict(net.state_dict())
    wrong_shape(bad, ng)
    bad["scale"] = ng.full((3,), 9.0)
    with pytest.raises(ng.StateError):
        target.load_state_dict(bad)
    np.testing.assert_array_equal(host(target.scale), before)

    class WithBuffers(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("count", ng.zeros(1))
            self.register_buffer("scratch", ng.zeros(2), persistent=False)

    class TWithBuffers(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("count", torch.zeros(1))
            self.register_buffer("scratch", torch.zeros(2), persistent=False)

    assert list(WithBuffers().state_dict()) == list(TWithBuffers().state_dict()) == ["count"]
    assert len(WithBuffers().buffers()) == len(list(TWithBuffers().buffers())) == 2


def test_save_load(tmp_path):
    net, _ = twin_nets()
    path = tmp_path / "model.safetensors"
    ng.save(net.state_dict(), path)
    loaded = ng.load(path)
    assert sorted(loaded) == sorted(net.state_dict())
    other = NgNet()
    other.load_state_dict(loaded)
    x = ng.tensor(arr(2, 4))
    close(other(x), net(x), 0)
    net.save(tmp_path / "m2.safetensors")  # the method form, as before
    third = NgNet().load(tmp_path / "m2.safetensors")
    close(third(x), net(x), 0)
    # different: only a dict of str -> Tensor (SafeTensors: no pickle, no code run at load)
    with pytest.raises(TypeError):
        ng.save({"model": net.state_dict(), "epoch": 3}, tmp_path / "ckpt.safetensors")
    ckpt = pickle.loads(pickle.dumps({"model": net.state_dict(), "epoch": 3}))  # Tensors pickle
    assert ckpt["epoch"] == 3 and list(ckpt["model"]) == list(net.state_dict())
    close(ckpt["model"]["fc1.weight"], net.fc1.weight, 0)


# ---------------------------------------------------------------- optimization
def test_optimizer():
    x, y = arr(8, 4), arr(8, 3)
    makers = [(lambda p: ng.optim.SGD(p, lr=0.1, momentum=0.9), lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)),
              (lambda p: ng.optim.SGD(p, 0.05, 0.9, 0, 0.01, True),
               lambda p: torch.optim.SGD(p, 0.05, 0.9, 0, 0.01, True)),
              (lambda p: ng.optim.Adam(p, lr=0.01), lambda p: torch.optim.Adam(p, lr=0.01)),
              (lambda p: ng.optim.AdamW(p, lr=0.01, weight_decay=0.1),
               lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1))]
    for make, tmake in makers:
        net, tnet = twin_nets()
        opt, topt = make(net.parameters()), tmake(tnet.parameters())
        assert isinstance(opt, ng.optim.Optimizer)
        for _ in range(5):
            for o, model, lib, fn in ((opt, net, ng, F.mse_loss), (topt, tnet, torch, torch.nn.functional.mse_loss)):
                o.zero_grad()
                fn(model(lib.tensor(x)), lib.tensor(y)).backward()
                o.step()
        for (n, p), (_, tp) in zip(net.named_parameters(), tnet.named_parameters()):
            close(p, tp, 1e-5)
        for o in (opt, topt):
            for group in o.param_groups:
                group["lr"] *= 0.5
        assert opt.param_groups[0]["lr"] == topt.param_groups[0]["lr"] == opt.lr
    # missing: dampening, and per-parameter option groups
    with pytest.raises(ng.NotSupportedError):
        ng.optim.SGD(NgNet().parameters(), lr=0.1, momentum=0.9, dampening=0.1)
    with pytest.raises(TypeError):
        ng.optim.SGD([{"params": NgNet().parameters(), "lr": 0.1}], lr=0.1)


def test_lr_scheduler():
    cases = [(lambda o: lr_scheduler.StepLR(o, step_size=3, gamma=0.5),
              lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5)),
             (lambda o: lr_scheduler.CosineAnnealingLR(o, T_max=10, eta_min=0.01),
              lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=10, eta_min=0.01)),
             (lambda o: lr_scheduler.LambdaLR(o, lambda e: 0.9 ** e),
              lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda e: 0.9 ** e))]
    for make, tmake in cases:
        w, tw = ng.zeros(2, requires_grad=True), torch.zeros(2, requires_grad=True)
        opt, topt = ng.optim.SGD([w], lr=0.2), torch.optim.SGD([tw], lr=0.2)
        sched, tsched = make(opt), tmake(topt)
        lrs, tlrs = [opt.lr], [topt.param_groups[0]["lr"]]
        for _ in range(10):
            topt.step()
            sched.step()
            tsched.step()
            lrs.append(opt.lr)
            tlrs.append(topt.param_groups[0]["lr"])
        np.testing.assert_allclose(lrs, tlrs, rtol=1e-9, atol=1e-12)
        assert sched.get_last_lr() == pytest.approx(tsched.get_last_lr(), rel=1e-9)
    # different: after T_max, torch's cosine rises again; here it stays at eta_min
    opt = ng.optim.SGD([ng.zeros(1, requires_grad=True)], lr=0.2)
    sched = lr_scheduler.CosineAnnealingLR(opt, T_max=4, eta_min=0.01)
    for _ in range(6):
        sched.step()
    assert opt.lr == pytest.approx(0.01)


def test_clip_grad_norm():
    net, tnet = twin_nets()
    x = arr(5, 4)
    (net(ng.tensor(x)) ** 2).sum().backward()
    (tnet(torch.tensor(x)) ** 2).sum().backward()
    norm = nn.clip_grad_norm_(net.parameters(), 0.5)
    tnorm = torch.nn.utils.clip_grad_norm_(tnet.parameters(), 0.5)
    assert isinstance(norm, float) and isinstance(tnorm, torch.Tensor)  # different: a float, not a tensor
    assert norm == pytest.approx(tnorm.item(), rel=1e-5)
    for p, tp in zip(net.parameters(), tnet.parameters()):
        close(p.grad, tp.grad, 1e-5)


# ---------------------------------------------------------------- data
def test_dataloader():
    X, y = arr(10, 3), np.arange(10)
    for drop_last in (False, True):
        loader = DataLoader(TensorDataset(X, y), batch_size=4, drop_last=drop_last)
        tloader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.from_numpy(X), torch.from_numpy(y)),
                                              batch_size=4, drop_last=drop_last)
        batches, tbatches = list(loader), list(tloader)
        assert len(loader) == len(tloader) == len(batches) == len(tbatches)
        for (xb, yb), (txb, tyb) in zip(batches, tbatches):
            assert dtype_name(xb.dtype) == dtype_name(txb.dtype) and dtype_name(yb.dtype) == dtype_name(tyb.dtype)
            close(xb, txb, 0)
            close(yb, tyb, 0)
    ds = TensorDataset(X, y)
    assert len(ds) == 10 and ds[3][1].item() == 3 and ds[3][0].shape == (3,)

    def epoch(loader):
        return np.concatenate([host(yb) for _, yb in loader])

    shuffled = DataLoader(ds, batch_size=3, shuffle=True, generator=0)
    first, second = epoch(shuffled), epoch(shuffled)
    assert sorted(first) == sorted(second) == list(range(10))  # every sample once per epoch
    assert not np.array_equal(first, second)  # reshuffled every epoch
    np.testing.assert_array_equal(epoch(DataLoader(ds, batch_size=3, shuffle=True, generator=0)), first)
    orders = []
    for _ in range(2):  # without a generator: reproducible under manual_seed
        ng.manual_seed(5)
        orders.append(epoch(DataLoader(ds, batch_size=4, shuffle=True)))
    np.testing.assert_array_equal(*orders)
    for xb, yb in DataLoader(ds, batch_size=4, shuffle=True, generator=1):  # rows stay paired
        np.testing.assert_array_equal(host(xb), X[host(yb)])

    class Squares(Dataset):  # a map-style dataset batched through default_collate, as in torch
        def __len__(self):
            return 7

        def __getitem__(self, i):
            return np.array([i, i * i], dtype=np.float32), i, {"half": i / 2}

    got, want = list(DataLoader(Squares(), batch_size=3)), list(torch.utils.data.DataLoader(Squares(), batch_size=3))
    assert len(got) == len(want) == 3
    for (xb, ib, db), (txb, tib, tdb) in zip(got, want):
        for ours, theirs in ((xb, txb), (ib, tib), (db["half"], tdb["half"])):
            assert dtype_name(ours.dtype) == dtype_name(theirs.dtype)
            close(ours, theirs, 0)
    on_tensors = DataLoader(TensorDataset(ng.tensor(X), ng.tensor(y)), batch_size=4)
    for (xb, yb), (txb, tyb) in zip(on_tensors, DataLoader(ds, batch_size=4)):
        close(xb, txb, 0)
        close(yb, tyb, 0)
    for lib_loader, lib_ds in ((DataLoader, ds), (torch.utils.data.DataLoader, torch.utils.data.TensorDataset(
            torch.from_numpy(X)))):
        with pytest.raises(ValueError):
            lib_loader(lib_ds, batch_size=0)


# ---------------------------------------------------------------- mixed precision, devices, copies
def test_allow_tf32():
    was = ng.cuda.tf32_enabled()
    assert was is False  # off by default, as torch's matmul flag
    try:
        ng.cuda.set_tf32(True)
        assert ng.cuda.tf32_enabled() is True
        ng.cuda.set_tf32(False)
        assert ng.cuda.tf32_enabled() is False
    finally:
        ng.cuda.set_tf32(was)
    a, b = arr(4, 8), arr(8, 3)  # the CPU ignores the switch: f32 stays f32
    ng.cuda.set_tf32(True)
    try:
        close(ng.tensor(a) @ ng.tensor(b), torch.tensor(a) @ torch.tensor(b), 1e-5)
    finally:
        ng.cuda.set_tf32(was)


def test_autocast():
    a, b = arr(4, 8), arr(8, 3)
    with ng.autocast("cpu", dtype=ng.bfloat16):
        out = ng.tensor(a) @ ng.tensor(b)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        tout = torch.tensor(a) @ torch.tensor(b)
    assert dtype_name(out.dtype) == dtype_name(tout.dtype) == "bfloat16"
    close(out, tout, 2e-2)
    assert (ng.tensor(a) @ ng.tensor(b)).dtype == ng.float32

    @ng.autocast("cpu", dtype=ng.bfloat16)
    def mm(p, q):
        return p @ q

    assert mm(ng.tensor(a), ng.tensor(b)).dtype == ng.bfloat16


def test_module_to_device():
    net = NgNet()
    scale = net.scale
    assert net.to("cpu") is net and net.cpu() is net and net.scale is scale
    with pytest.raises(ng.NotSupportedError):  # missing: the C API moves modules between devices only
        net.to(ng.float64)
    if ng.cuda.is_available():
        assert net.cuda() is net and net.scale is scale and scale.device == "cuda:0"
        assert all(p.device == "cuda:0" for p in net.parameters())
        out = net(ng.randn(2, 4, device="cuda"))
        assert out.device == "cuda:0"
        net.to("cpu")
        assert all(p.device == "cpu" for p in net.parameters())


def test_layer_classes():
    lin, tlin = nn.Linear(4, 3), torch.nn.Linear(4, 3)
    assert isinstance(lin, nn.Linear) and isinstance(lin, nn.Module) and isinstance(lin.weight, nn.Parameter)
    assert lin.weight.shape == tuple(tlin.weight.shape) and lin.bias.shape == tuple(tlin.bias.shape)
    lin.load_state_dict(tlin.state_dict())
    x = arr(2, 4)
    close(lin(ng.tensor(x)), tlin(torch.tensor(x)))
    with ng.no_grad():
        lin.weight.fill_(0.5)  # the attribute is the parameter itself
    with torch.no_grad():
        tlin.weight.fill_(0.5)
    close(lin(ng.tensor(x)), tlin(torch.tensor(x)))

    class Doubled(nn.Linear):  # subclassing a layer of the engine
        def forward(self, x):
            return super().forward(x) * 2

    d = Doubled(4, 3)
    d.load_state_dict(lin.state_dict())
    close(d(ng.tensor(x)), tlin(torch.tensor(x)) * 2)
    assert [n for n, _ in d.named_parameters()] == ["weight", "bias"]
    square, tsquare = Doubled(4, 4), torch.nn.Linear(4, 4)
    square.load_state_dict(tsquare.state_dict())
    res = nn.Residual(square)  # a Python forward inside: the residual runs from Python
    assert [n for n, _ in res.named_parameters()] == ["inner.weight", "inner.bias"]
    close(res(ng.tensor(x)), torch.tensor(x) + tsquare(torch.tensor(x)) * 2)
    # weight tying by assignment is refused on engine layers (the engine owns their parameters)
    with pytest.raises(KeyError):
        square.weight = nn.Parameter(ng.zeros(4, 4))


def test_sequential_modulelist():
    seq = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    tseq = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    assert [n for n, _ in seq.named_parameters()] == [n for n, _ in tseq.named_parameters()]
    seq.load_state_dict(tseq.state_dict())
    x = arr(3, 4)
    close(seq(ng.tensor(x)), tseq(torch.tensor(x)))
    assert len(seq) == len(tseq) == 3 and isinstance(seq[0], nn.Linear) and len(seq[1:]) == 2
    nested, tnested = nn.Sequential(NgNet(), nn.ReLU()), torch.nn.Sequential(TorchNet(), torch.nn.ReLU())
    assert list(nested.state_dict()) == list(tnested.state_dict())
    nested.load_state_dict(tnested.state_dict())
    close(nested(ng.tensor(x)), tnested(torch.tensor(x)))
    named = nn.Sequential(OrderedDict(fc=nn.Linear(4, 2)))
    tnamed = torch.nn.Sequential(OrderedDict(fc=torch.nn.Linear(4, 2)))
    assert list(named.state_dict()) == list(tnamed.state_dict()) == ["fc.weight", "fc.bias"]

    class Stack(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    class TStack(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(2)])

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    s, ts = Stack(), TStack()
    assert list(s.state_dict()) == list(ts.state_dict()) and len(s.layers) == 2
    s.load_state_dict(ts.state_dict())
    close(s(ng.tensor(x)), ts(torch.tensor(x)))


def test_deepcopy_module():
    class Affine(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(ng.randn(3))

        def forward(self, x):
            return x * self.w

    m = Affine()
    c = copy.deepcopy(m)
    assert c.w is not m.w and isinstance(c.w, nn.Parameter) and c.w.requires_grad
    close(c.w, m.w, 0)
    with ng.no_grad():
        c.w.fill_(0.0)
    assert np.any(host(m.w))  # independent storage
    # missing: engine layers cannot be copied (no nx_module_clone)
    with pytest.raises(ng.NotSupportedError):
        copy.deepcopy(NgNet())


def test_eval_accuracy():
    net, tnet = twin_nets()
    x, y = arr(16, 4), RNG.integers(0, 3, 16)
    net.eval()
    tnet.eval()
    with ng.no_grad():
        pred = net(ng.tensor(x)).argmax(dim=1)
        correct = (pred == ng.tensor(y)).sum().item()
        accuracy = (pred == ng.tensor(y)).float().mean().item()
    with torch.no_grad():
        tpred = tnet(torch.tensor(x)).argmax(dim=1)
        tcorrect = (tpred == torch.tensor(y)).sum().item()
        taccuracy = (tpred == torch.tensor(y)).float().mean().item()
    assert correct == tcorrect and type(correct) is type(tcorrect)
    assert accuracy == pytest.approx(taccuracy)


def test_doc_rows():
    """docs/python_idioms.md has one table row per test of this file, with the test's name."""
    doc = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "python_idioms.md")
    with open(doc, encoding="utf-8") as f:
        rows = re.findall(r"^\| `([a-z0-9_]+)` \|", f.read(), flags=re.M)
    tests = [name[5:] for name in globals() if name.startswith("test_") and name != "test_doc_rows"]
    assert len(rows) == len(set(rows)) and sorted(rows) == sorted(tests)
