"""The nexusgrad Python layer against PyTorch on random inputs: forward values and gradients
(float64, so that the comparison is tight), plus float32 forward values. Cases here exercise what
the Python layer adds: PyTorch's keyword names and defaults, Python numbers as operands, the
hand-written wrappers, operators, methods and indexing. A plain positional call of a wrapper
generated from src/ops/ops.yaml is not repeated here: the op harness (tests/harness) checks every
registry op against torch and checks that each generated wrapper returns exactly the C result."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import nexusgrad as ng

RNG = np.random.default_rng(0)


def rnd(*shape, lo=-2.0, hi=2.0):
    return RNG.uniform(lo, hi, size=shape)


def pos(*shape):
    return RNG.uniform(0.2, 2.0, size=shape)


def ints(*shape, hi=4):
    return RNG.integers(0, hi, size=shape).astype(np.int64)


class Case:
    """One comparison: args are NumPy arrays (floating ones get requires_grad) or plain values."""

    def __init__(self, name, ng_fn, torch_fn, args, grad=True, kwargs=None, ng_kwargs=None, torch_kwargs=None,
                 atol=1e-9, rtol=1e-7):
        self.name, self.ng_fn, self.torch_fn, self.args = name, ng_fn, torch_fn, args
        self.grad = grad
        self.ng_kwargs = dict(kwargs or {}, **(ng_kwargs or {}))
        self.torch_kwargs = dict(kwargs or {}, **(torch_kwargs or {}))
        self.atol, self.rtol = atol, rtol

    def __repr__(self):
        return self.name


def unary(name, tfn=None, data=rnd, grad=True, **kw):
    return Case(name, getattr(ng, name), tfn or getattr(torch, name), [data(3, 4)], grad=grad, **kw)


def binary(name, tfn=None, a=rnd, b=rnd, grad=True, **kw):
    return Case(name, getattr(ng, name), tfn or getattr(torch, name), [a(3, 4), b(4)], grad=grad, **kw)


def ce_target():
    t = ints(5, hi=3)
    t[1] = -100
    return t


CASES = [
    # binary elementwise (broadcast [3,4] with [4])
    binary("pow", torch.pow, a=pos),
    Case("add_scalar_left", ng.add, torch.add, [2.5, rnd(3, 4)], grad=False),
    Case("sub_scalar", ng.sub, torch.sub, [rnd(3, 4), 1.5]),
    Case("mul_scalar", ng.mul, torch.mul, [rnd(3, 4), -3.0]),
    Case("div_scalar", ng.div, torch.div, [rnd(3, 4), 4.0]),
    Case("pow_scalar", ng.pow, torch.pow, [pos(3, 4), 2.5]),
    Case("pow_scalar_base", ng.pow, torch.pow, [2.0, rnd(3, 4)], grad=False),
    # comparisons (forward only; some ties)
    Case("where", lambda c, a, b: ng.where(c, a, b), torch.where, [rnd(3, 4) > 0, rnd(3, 4), rnd(4)]),
    # unary
    unary("square"),
    Case("leaky_relu", ng.leaky_relu, TF.leaky_relu, [rnd(3, 4)], kwargs={"negative_slope": 0.2}),
    Case("gelu", ng.gelu, TF.gelu, [rnd(3, 4)]),
    Case("gelu_tanh", ng.gelu, TF.gelu, [rnd(3, 4)], kwargs={"approximate": "tanh"}),
    Case("clamp", ng.clamp, torch.clamp, [rnd(3, 4)], kwargs={"min": -0.5, "max": 0.7}),
    Case("clamp_min_only", ng.clamp, torch.clamp, [rnd(3, 4)], kwargs={"min": -0.5}),
    # fused
    Case("bias_gelu", ng.bias_gelu, lambda x, b: TF.gelu(x + b), [rnd(3, 4), rnd(4)]),
    Case("bias_gelu_tanh", lambda x, b: ng.bias_gelu(x, b, approximate="tanh"),
         lambda x, b: TF.gelu(x + b, approximate="tanh"), [rnd(3, 4), rnd(4)]),
    # reductions
    Case("sum_dim", ng.sum, torch.sum, [rnd(3, 4, 5)], kwargs={"dim": 1}),
    Case("sum_dims_keepdim", ng.sum, torch.sum, [rnd(3, 4, 5)], kwargs={"dim": (0, 2), "keepdim": True}),
    Case("mean_dim", ng.mean, torch.mean, [rnd(3, 4)], kwargs={"dim": -1, "keepdim": True}),
    Case("amax", ng.amax, torch.amax, [rnd(3, 4)], kwargs={"dim": 1}),
    Case("amin", ng.amin, torch.amin, [rnd(3, 4)], kwargs={"dim": 0}),
    Case("max_all", ng.max, torch.max, [rnd(3, 4)]),
    Case("min_all", ng.min, torch.min, [rnd(3, 4)]),
    Case("max_dim", lambda x: ng.max(x, 1), lambda x: torch.max(x, 1), [rnd(3, 4)]),
    Case("min_dim", lambda x: ng.min(x, 0, True), lambda x: torch.min(x, 0, True), [rnd(3, 4)]),
    Case("var", ng.var, torch.var, [rnd(3, 4)]),
    Case("var_dim_c0", ng.var, torch.var, [rnd(3, 4)], kwargs={"dim": 1, "correction": 0},
         torch_kwargs={}, ng_kwargs={}),
    Case("std", ng.std, torch.std, [rnd(3, 4)], kwargs={"dim": 0}),
    Case("argmax", ng.argmax, torch.argmax, [rnd(3, 4)], kwargs={"dim": 1}, grad=False),
    Case("argmax_flat", ng.argmax, torch.argmax, [rnd(3, 4)], grad=False),
    Case("argmin", ng.argmin, torch.argmin, [rnd(3, 4)], kwargs={"dim": 0, "keepdim": True}, grad=False),
    # linear algebra, softmax
    Case("softmax", ng.softmax, torch.softmax, [rnd(3, 4)], kwargs={"dim": -1}),
    Case("log_softmax", ng.log_softmax, torch.log_softmax, [rnd(3, 4)], kwargs={"dim": 0}),
    # shape
    Case("reshape", lambda x: ng.reshape(x, [4, -1]), lambda x: torch.reshape(x, [4, -1]), [rnd(2, 3, 2)]),
    Case("view", lambda x: ng.view(x, 6, 2), lambda x: x.view(6, 2), [rnd(2, 3, 2)]),
    Case("transpose", ng.transpose, torch.transpose, [rnd(2, 3, 4)], kwargs={"dim0": 0, "dim1": 2}),
    Case("permute", lambda x: ng.permute(x, 2, 0, 1), lambda x: x.permute(2, 0, 1), [rnd(2, 3, 4)]),
    Case("narrow", ng.narrow, torch.narrow, [rnd(5, 4)], kwargs={"dim": 0, "start": 1, "length": 3}),
    Case("slice_step", lambda x: ng.slice(x, 1, 1, None, 2), lambda x: x[:, 1::2], [rnd(3, 6)]),
    Case("expand", lambda x: ng.expand(x, 3, -1, 4), lambda x: x.expand(3, -1, 4), [rnd(1, 2, 1)]),
    Case("squeeze", ng.squeeze, torch.squeeze, [rnd(3, 1, 4)], kwargs={"dim": 1}),
    Case("squeeze_all", ng.squeeze, torch.squeeze, [rnd(1, 3, 1, 4)]),
    Case("unsqueeze", ng.unsqueeze, torch.unsqueeze, [rnd(3, 4)], kwargs={"dim": -1}),
    Case("flatten", ng.flatten, torch.flatten, [rnd(2, 3, 4)], kwargs={"start_dim": 1}),
    Case("contiguous", lambda x: ng.contiguous(ng.transpose(x, 0, 1)), lambda x: x.t().contiguous(), [rnd(3, 4)]),
    Case("cast_f32", lambda x: ng.cast(x, ng.float32), lambda x: x.to(torch.float32), [rnd(3, 4)],
         atol=1e-6, rtol=1e-6),
    Case("cat", lambda a, b: ng.cat([a, b], 1), lambda a, b: torch.cat([a, b], 1), [rnd(3, 2), rnd(3, 4)]),
    Case("stack", lambda a, b: ng.stack([a, b], -1), lambda a, b: torch.stack([a, b], -1), [rnd(3, 2), rnd(3, 2)]),
    Case("split_int", lambda x: ng.split(x, 2, 1), lambda x: torch.split(x, 2, 1), [rnd(3, 5)]),
    Case("split_list", lambda x: ng.split(x, [1, 3], 0), lambda x: torch.split(x, [1, 3], 0), [rnd(4, 2)]),
    Case("chunk", lambda x: ng.chunk(x, 3, 0), lambda x: torch.chunk(x, 3, 0), [rnd(7, 2)]),
    # indexing
    Case("embedding", ng.embedding, TF.embedding, [ints(2, 3, hi=6), rnd(6, 4)]),
    Case("one_hot", lambda t: ng.one_hot(t, 5), lambda t: TF.one_hot(t, 5), [ints(3, 2, hi=5)], grad=False),
    # losses
    Case("cross_entropy", ng.cross_entropy, TF.cross_entropy, [rnd(5, 3), ce_target()]),
    Case("cross_entropy_smooth_sum", ng.cross_entropy, TF.cross_entropy, [rnd(5, 3), ints(5, hi=3)],
         kwargs={"label_smoothing": 0.1, "reduction": "sum"}),
    Case("cross_entropy_none", ng.cross_entropy, TF.cross_entropy, [rnd(5, 3), ints(5, hi=3)],
         kwargs={"reduction": "none"}),
    Case("nll_loss", ng.nll_loss, TF.nll_loss, [rnd(5, 3), ce_target()]),
    Case("mse_loss_sum", ng.mse_loss, TF.mse_loss, [rnd(3, 4), rnd(3, 4)], kwargs={"reduction": "sum"}),
    Case("bce_with_logits", ng.binary_cross_entropy_with_logits, TF.binary_cross_entropy_with_logits,
         [rnd(3, 4), RNG.uniform(0, 1, (3, 4))]),
    # operators and methods
    Case("op_add", lambda a, b: a + b, lambda a, b: a + b, [rnd(3, 4), rnd(3, 1)]),
    Case("op_sub_scalar", lambda a: 3 - a - 1, lambda a: 3 - a - 1, [rnd(3, 4)]),
    Case("op_mul_div", lambda a, b: a * b / (b * b + 1), lambda a, b: a * b / (b * b + 1), [rnd(3, 4), rnd(4)]),
    Case("op_rdiv", lambda a: 2 / a, lambda a: 2 / a, [pos(3, 4)]),
    Case("op_matmul", lambda a, b: a @ b, lambda a, b: a @ b, [rnd(3, 4), rnd(4, 2)]),
    Case("op_pow_neg", lambda a: -(a ** 2) + a ** 3, lambda a: -(a ** 2) + a ** 3, [rnd(3, 4)]),
    Case("op_rpow", lambda a: 1.5 ** a, lambda a: 1.5 ** a, [rnd(3, 4)]),
    Case("op_compare", lambda a, b: (a < b, a >= 0.5, a == a, a != b, a <= b, a > 0),
         lambda a, b: (a < b, a >= 0.5, a == a, a != b, a <= b, a > 0), [rnd(3, 4), rnd(3, 4)], grad=False),
    Case("op_getitem", lambda x: x[1, 1:3] * x[..., 0:1].sum() + x[None, -1, ::2].sum(),
         lambda x: x[1, 1:3] * x[..., 0:1].sum() + x[None, -1, ::2].sum(), [rnd(4, 5)]),
    Case("op_getitem_tensor", lambda x: x[[2, 0, 2]], lambda x: x[[2, 0, 2]], [rnd(4, 3)]),
    Case("op_getitem_tensor2d", lambda x, i: x[:, i], lambda x, i: x[:, i], [rnd(3, 5), ints(2, 2, hi=5)]),
    Case("methods", lambda x: x.exp().sum(1).mean() + x.t().relu().max() + x.abs().sqrt().var(),
         lambda x: x.exp().sum(1).mean() + x.t().relu().max() + x.abs().sqrt().var(), [rnd(3, 4)]),
    Case("method_reshape_T", lambda x: (x.reshape(4, 3).T @ x.T).softmax(-1), lambda x: (x.reshape(4, 3).T @ x.T).softmax(-1),
         [rnd(3, 4)]),
]


def to_ng(v, device, dtype, grad):
    if isinstance(v, np.ndarray):
        if v.dtype == np.float64:
            t = ng.tensor(v, dtype=dtype, device=device)
            if grad:
                t.requires_grad_()
            return t
        return ng.tensor(v, device=device)
    return v


def to_torch(v, dtype, grad):
    if isinstance(v, np.ndarray):
        t = torch.tensor(v)
        if v.dtype == np.float64:
            t = t.to(dtype)
            if grad:
                t.requires_grad_()
        return t
    return v


def flat_outputs(out):
    if isinstance(out, (tuple, list)):
        return [o for x in out for o in flat_outputs(x)]
    return [out]


def as_np(t):
    a = t.to("cpu").numpy() if isinstance(t, ng.Tensor) else t.detach().cpu().float().numpy() \
        if t.dtype == torch.bfloat16 else t.detach().cpu().numpy()
    return a.astype(np.float64)


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_forward_and_grad_f64(case, device):
    xs = [to_ng(a, device, ng.float64, case.grad) for a in case.args]
    ts = [to_torch(a, torch.float64, case.grad) for a in case.args]
    out = flat_outputs(case.ng_fn(*xs, **case.ng_kwargs))
    ref = flat_outputs(case.torch_fn(*ts, **case.torch_kwargs))
    assert len(out) == len(ref)
    for o, r in zip(out, ref):
        assert tuple(o.shape) == tuple(r.shape), case.name
        assert o.device == device
        np.testing.assert_allclose(as_np(o), as_np(r), rtol=case.rtol, atol=case.atol, err_msg=case.name)
    if not case.grad:
        return
    # backward from a random weighting of every floating output
    loss_ng, loss_t = None, None
    for o, r in zip(out, ref):
        if not r.dtype.is_floating_point:
            continue
        w = RNG.uniform(-1, 1, size=tuple(r.shape))
        term_ng = ng.sum(o * ng.tensor(w, device=device))
        term_t = torch.sum(r * torch.tensor(w))
        loss_ng = term_ng if loss_ng is None else loss_ng + term_ng
        loss_t = term_t if loss_t is None else loss_t + term_t
    ng.backward(loss_ng)
    loss_t.backward()
    for x, t in zip(xs, ts):
        if isinstance(t, torch.Tensor) and t.requires_grad:
            g = x.grad
            if t.grad is None:
                assert g is None or np.allclose(as_np(g), 0)
                continue
            assert g is not None, f"{case.name}: no gradient"
            assert g.device == device
            np.testing.assert_allclose(as_np(g), as_np(t.grad), rtol=1e-6, atol=1e-8, err_msg=f"{case.name} grad")


@pytest.mark.parametrize("case", [c for c in CASES if not c.name.startswith("cast")], ids=repr)
def test_forward_f32(case, device):
    xs = [to_ng(a, device, ng.float32, False) for a in case.args]
    ts = [to_torch(a, torch.float32, False) for a in case.args]
    out = flat_outputs(case.ng_fn(*xs, **case.ng_kwargs))
    ref = flat_outputs(case.torch_fn(*ts, **case.torch_kwargs))
    for o, r in zip(out, ref):
        assert str(o.dtype).split(".")[-1] == str(r.dtype).split(".")[-1], case.name
        np.testing.assert_allclose(as_np(o), as_np(r), rtol=2e-5, atol=2e-5, err_msg=case.name)


def test_every_public_function_is_exercised():
    """Each op-like name exported by nexusgrad.functional appears in CASES or in another test."""
    names = [c.name for c in CASES] + [getattr(c.ng_fn, "__name__", "") for c in CASES]
    covered = {n for n in ng.functional.__all__ if any(m == n or m.startswith(n + "_") for m in names)}
    covered |= {"subtract", "multiply", "divide", "true_divide", "negative", "clip", "concat", "concatenate",
                "swapaxes", "mm", "bmm", "bce_with_logits", "to", "detach", "add_", "mul_", "copy_",
                # tested in test_autograd / test_io / test_runtime
                "backward", "grad", "jvp", "checkpoint", "backward_checked", "Graph", "save_safetensors",
                "load_safetensors", "SafeTensorsFile", "set_num_threads", "get_num_threads", "cpu_simd_level",
                "set_cpu_simd_level", "live_tensor_count", "version", "abi_version", "cuda", "scaled_dot_product_attention",
                "flash_attention", "clip_grad_norm_",
                # tested in test_kv_cache_8bit against torch
                "quantize_8bit", "kv_cache_append_8bit", "attention_decode_8bit", "flash_attention_fp8"}
    # Wrappers generated from src/ops/ops.yaml: their ops are checked against torch by the op harness
    # (tests/harness), which covers every op of the registry.
    covered |= set(ng._ops_gen.__all__)
    missing = [n for n in ng.functional.__all__ if n not in covered]
    assert not missing, f"not compared against PyTorch: {missing}"


# ---------------------------------------------------------------- dtypes and promotion
@pytest.mark.parametrize("dt", ["float32", "float64", "float16", "bfloat16", "int32", "int64", "bool"])
def test_dtype_round_trip(dt, device):
    base = np.array([[0, 1, 2], [3, 0, 5]])
    t = ng.tensor(base, dtype=dt, device=device)
    assert t.dtype is getattr(ng, dt if dt != "bool" else "bool_")
    tt = torch.tensor(base).to(getattr(torch, dt))
    np.testing.assert_array_equal(as_np(t), tt.float().numpy() if dt == "bfloat16" else tt.numpy())


def test_scalar_promotion_like_torch():
    i = ng.tensor([1, 2, 3])
    assert (i + 1).dtype is ng.int64
    assert (i * 2.5).dtype is ng.float32
    assert (ng.tensor([1, 2], dtype="int32") + 1).dtype is ng.int32
    assert (ng.tensor([True, False]) + 1).dtype is ng.int64
    assert (ng.tensor([1.0], dtype=ng.float16) * 3).dtype is ng.float16
    assert (ng.tensor([1.0], dtype=ng.float64) + 1).dtype is ng.float64
    assert (i / 2).dtype is ng.float32
    np.testing.assert_allclose((i / 2).numpy(), [0.5, 1.0, 1.5])


def test_in_place_ops_match_torch(device):
    a = rnd(3, 4)
    x, t = ng.tensor(a, device=device), torch.tensor(a, dtype=torch.float32)
    x += 1.5
    t += 1.5
    x *= ng.tensor(a[0], device=device)
    t *= torch.tensor(a[0], dtype=torch.float32)
    x -= 0.25
    t -= 0.25
    x /= 2
    t /= 2
    ng.add_(x, 1)
    t.add_(1)
    ng.mul_(x, 3)
    t.mul_(3)
    x[1:, ::2] = -7
    t[1:, ::2] = -7
    x[0] = ng.tensor([1.0, 2, 3, 4], device=device)
    t[0] = torch.tensor([1.0, 2, 3, 4])
    np.testing.assert_allclose(as_np(x), t.numpy(), rtol=1e-6)
    ng.copy_(x, 0.5)
    assert np.all(as_np(x) == 0.5)
    x.zero_()
    assert np.all(as_np(x) == 0)


def test_creation_functions(device):
    assert ng.zeros(2, 3, device=device).shape == (2, 3)
    assert ng.ones([4], dtype=ng.int32, device=device).tolist() == [1, 1, 1, 1]
    assert ng.full((2,), 7, device=device).dtype is ng.int64
    assert ng.full((2,), 7.5, device=device).tolist() == [7.5, 7.5]
    np.testing.assert_array_equal(ng.arange(5, device=device).numpy(), torch.arange(5).numpy())
    np.testing.assert_allclose(ng.arange(0.0, 1.0, 0.25, device=device).numpy(), torch.arange(0.0, 1.0, 0.25).numpy())
    r = ng.rand(1000, device=device).numpy()
    assert 0 <= r.min() and r.max() < 1 and abs(r.mean() - 0.5) < 0.05
    n = ng.randn(4000, dtype=ng.float64, device=device).numpy()
    assert abs(n.mean()) < 0.1 and abs(n.std() - 1) < 0.1
    ng.manual_seed(7)
    a = ng.randn(5, device=device).numpy()
    ng.manual_seed(7)
    b = ng.Tensor.randn([5], device=device).numpy()
    np.testing.assert_array_equal(a, b)
    w = ng.Tensor.randn([4, 3], requires_grad=True, device=device)
    assert w.requires_grad and w.is_leaf
    like = ng.zeros_like(w)
    assert like.shape == (4, 3) and not like.requires_grad and like.device == device
    assert ng.ones_like(w).sum().item() == 12
    assert ng.full_like(w, 2).sum().item() == 24
    assert ng.rand_like(w).shape == ng.randn_like(w).shape == (4, 3)
    assert ng.empty(2, device=device).shape == (2,)


def test_tensor_properties_and_conversions(device):
    x = ng.Tensor(np.arange(6.0).reshape(2, 3), device=device)
    assert x.shape == (2, 3) and x.size() == (2, 3) and x.size(1) == 3 and x.ndim == 2 and x.dim() == 2
    assert x.numel() == 6 and x.dtype is ng.float64 and x.device == device and x.is_floating_point()
    assert x.stride() == (3, 1) and x.is_contiguous() and not x.T.is_contiguous()
    assert x.element_size() == 8
    assert x.to(ng.float32).dtype is ng.float32 and x.float().dtype is ng.float32
    assert x.long().dtype is ng.int64 and x.int().dtype is ng.int32 and x.half().dtype is ng.float16
    assert x.bfloat16().dtype is ng.bfloat16 and x.bool().dtype is ng.bool and x.double() is x
    assert x.to(device) is x and x.cpu().device == "cpu"
    assert x.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert x[1, 2].item() == 5.0 and isinstance(ng.tensor([3])[0].item(), int)
    assert float(x[0, 1]) == 1.0 and int(x[1, 1]) == 4 and bool(x[0, 1])
    assert len(x) == 2 and [r.tolist() for r in x] == [[0, 1, 2], [3, 4, 5]]
    assert "tensor(" in repr(x) and "float64" in repr(x)
    y = ng.tensor([1.0, 2.0], requires_grad=True, device=device) * 2
    assert "grad_fn=<MulScalarBackward>" in repr(y) or "grad_fn=<" in repr(y)
    assert y.grad_fn is not None and not y.is_leaf
    with pytest.raises(ValueError):
        bool(x)
    with pytest.raises(IndexError):
        x[2]
    with pytest.raises(IndexError):
        x[0, 0, 0]
    i = ng.tensor([2])[0]
    assert [10, 20, 30][i] == 30
    assert ng.to(x, ng.int64).dtype is ng.int64 and not ng.detach(x).requires_grad
    assert ng.tensor(x).tolist() == x.tolist()  # copy
    assert ng.as_tensor(x) is x


def test_aliases_match(device):
    a, b = ng.randn(3, 4, device=device), ng.rand(3, 4, device=device) + 0.5
    for alias, fn in [(ng.subtract, ng.sub), (ng.multiply, ng.mul), (ng.divide, ng.div), (ng.true_divide, ng.div)]:
        np.testing.assert_array_equal(alias(a, b).numpy(), fn(a, b).numpy())
    np.testing.assert_array_equal(ng.negative(a).numpy(), (-a).numpy())
    np.testing.assert_array_equal(ng.clip(a, -0.1, 0.1).numpy(), ng.clamp(a, -0.1, 0.1).numpy())
    np.testing.assert_array_equal(ng.concat([a, b]).numpy(), ng.concatenate([a, b], 0).numpy())
    np.testing.assert_array_equal(ng.swapaxes(a, 0, 1).numpy(), a.T.numpy())
    np.testing.assert_array_equal(ng.mm(a, b.T).numpy(), ng.bmm(a, b.T).numpy())
    y = ng.rand(3, 4, device=device)
    np.testing.assert_array_equal(ng.bce_with_logits(a, y).numpy(), ng.binary_cross_entropy_with_logits(a, y).numpy())


def test_no_grad_and_grad_mode(device):
    w = ng.randn(3, requires_grad=True, device=device)
    with ng.no_grad():
        assert not ng.is_grad_enabled()
        y = w * 2
        with ng.enable_grad():
            z = w * 2
            assert ng.is_grad_enabled()
        assert not ng.is_grad_enabled()
    assert ng.is_grad_enabled()
    assert not y.requires_grad and z.requires_grad

    @ng.no_grad()
    def f(t):
        return t * 3

    assert not f(w).requires_grad
    ng.set_grad_enabled(False)
    assert not (w + 1).requires_grad
    ng.set_grad_enabled(True)
    with ng.set_grad_enabled(False):
        assert not ng.is_grad_enabled()
    assert ng.is_grad_enabled()
    # optimizer-style update of a leaf under no_grad
    with ng.no_grad():
        w -= 0.1
    assert w.requires_grad and w.is_leaf


def test_math_sanity():
    x = ng.tensor([0.0, math.pi / 2])
    np.testing.assert_allclose(ng.sin(x).numpy(), [0, 1], atol=1e-6)
