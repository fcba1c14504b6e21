"""str(tensor) / repr(tensor) come from the engine (nx_tensor_to_string) and lay tensors out exactly as
torch 1.13's str() does, for random tensors of every dtype, shape and print option.

Two names differ by design: dtypes print without "torch." (dtype=float64) and grad_fn shows
NexusGrad's node names (MulBackward, not MulBackward0). Where neither appears, ours must equal
str(torch_tensor) itself; otherwise the expected text is built by torch's own _tensor_str and
_add_suffixes with our names, so that the wrapping of suffixes follows the shorter names."""
import math
import random

import numpy as np
import pytest
import torch
from torch import _tensor_str as TS

import nexusgrad as ng
from nexusgrad import _nexus as C

TORCH_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.bool]


def to_ng(tt, device="cpu"):
    """A nexusgrad copy of the torch tensor tt (same dtype and values)."""
    tt = tt.detach()
    if tt.dtype == torch.bfloat16:  # no NumPy bfloat16: through float32, exact
        return ng.tensor(tt.float().numpy(), device=device).to(dtype=ng.bfloat16)
    return ng.tensor(tt.numpy(), device=device)


def expected(tt, grad_fn=None, device="cpu"):
    """torch's layout of tt with nexusgrad's names (dtype without "torch.", our grad_fn node)."""
    with torch.no_grad():
        body = TS._tensor_str(tt, 7) if tt.numel() else "[]"
    suffixes = []
    if device != "cpu":
        suffixes.append(f"device='{device}'")
    if tt.numel() == 0:
        if tt.dim() != 1:
            suffixes.append("size=" + str(tuple(tt.shape)))
        if tt.dtype != torch.float32:
            suffixes.append("dtype=" + str(tt.dtype)[len("torch."):])
    elif tt.dtype not in (torch.float32, torch.int64, torch.bool):
        suffixes.append("dtype=" + str(tt.dtype)[len("torch."):])
    if grad_fn is not None:
        suffixes.append(f"grad_fn=<{grad_fn}>")
    elif tt.requires_grad:
        suffixes.append("requires_grad=True")
    return TS._add_suffixes("tensor(" + body, suffixes, 7, False)


def check(tt, t=None, device="cpu"):
    t = to_ng(tt, device) if t is None else t
    want = expected(tt, device=device)
    if "dtype=" not in want and device == "cpu":
        assert want == str(tt)  # the helper is torch's own str()
    got = str(t)
    assert got == want, f"\n--- torch\n{want}\n--- nexusgrad\n{got}"
    assert repr(t) == got


class printoptions:
    """The same print options in torch and nexusgrad for a with-block."""

    def __init__(self, **opts):
        self.opts = opts

    def __enter__(self):
        torch.set_printoptions(**self.opts)
        ng.set_printoptions(**self.opts)

    def __exit__(self, *exc):
        torch.set_printoptions(profile="default", sci_mode=None)
        ng.set_printoptions(profile="default", sci_mode=None)


def random_tensor(rng, shape, dtype):
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    if dtype in (torch.int32, torch.int64):
        hi = rng.choice([2, 10, 1000, 2**31 - 1])
        t = torch.randint(-hi, hi, shape, dtype=torch.int64)
        if dtype == torch.int64 and rng.random() < 0.3:
            t = t * 2**32
        return t.to(dtype)
    x = torch.randn(shape, dtype=torch.float64)
    kind = rng.choice(["plain", "big", "tiny", "integral", "zeros", "wide", "special", "eighths"])
    if kind == "big":
        x = x * 10 ** rng.uniform(3, 12)
    elif kind == "tiny":
        x = x * 10 ** rng.uniform(-12, -3)
    elif kind == "integral":
        x = torch.round(x * rng.choice([1, 10, 1000, 1e5, 1e9]))
    elif kind == "zeros":
        x = torch.zeros(shape, dtype=torch.float64)
    elif kind == "wide":
        x = x * torch.exp(torch.randn(shape, dtype=torch.float64) * 5)
    elif kind == "eighths":
        x = torch.round(x * 8) / 8
    elif kind == "special":
        flat = x.reshape(-1)
        for i in range(flat.numel()):
            r = rng.random()
            flat[i] = (math.nan if r < 0.1 else math.inf if r < 0.2 else -math.inf if r < 0.3 else
                       0.0 if r < 0.4 else -0.0 if r < 0.45 else flat[i].item())
        x = flat.reshape(shape)
    return x.to(dtype)


SHAPES = [(), (1,), (5,), (7,), (40,), (3, 4), (2, 3, 4), (1, 1, 1, 1), (0,), (0, 3), (2, 0, 3), (6, 7),
          (1001,), (40, 40), (3, 500), (2, 3, 200), (4, 8, 8, 2), (7, 1, 9)]


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_random_tensors_match_torch(shape, dtype):
    rng = random.Random(SHAPES.index(shape) * 16 + TORCH_DTYPES.index(dtype))
    torch.manual_seed(rng.randrange(1 << 30))
    for _ in range(4):
        check(random_tensor(rng, shape, dtype))


def test_random_print_options_match_torch():
    rng = random.Random(7)
    torch.manual_seed(7)
    for _ in range(300):
        shape = tuple(rng.randint(1, 12) for _ in range(rng.randint(0, 3)))
        dtype = rng.choice(TORCH_DTYPES)
        opts = dict(precision=rng.choice([0, 1, 2, 4, 8, 17]), threshold=rng.choice([0, 5, 20, 100, 1000, math.inf]),
                    edgeitems=rng.randint(1, 4), linewidth=rng.choice([1, 10, 30, 80, 120]),
                    sci_mode=rng.choice([None, True, False]))
        with printoptions(**opts):
            check(random_tensor(rng, shape, dtype))
    with printoptions(profile="short"):
        check(torch.randn(30, 30))
    with printoptions(profile="full"):
        check(torch.arange(1200))


def test_fixed_cases():
    check(torch.tensor([[0.1234567, -1.5], [2.0, 0.0]]))
    check(torch.tensor([1.0, 2.0, -3.0]))                    # integral: "1."
    check(torch.tensor([1e-5, 1.0, 123.25]))                 # scientific
    check(torch.tensor([1.0, 1e9]))
    check(torch.tensor([math.nan, math.inf, -math.inf, 1.5, 0.0]))
    check(torch.tensor([-0.0, 1.0]))
    check(torch.tensor(3.5))
    check(torch.tensor(7))
    check(torch.tensor(True))
    check(torch.tensor([2**62, -2**62]))                     # exact int64, no trip through double
    check(torch.arange(2000.0))                              # summarized
    check(torch.arange(10000.0).reshape(100, 100) / 7)
    check(torch.zeros(0, 3))
    check(torch.zeros(0, dtype=torch.int64))
    check(torch.zeros(2, 0, dtype=torch.bool))


def test_views():
    base = torch.randn(5, 6, 7)
    t = to_ng(base)
    check(base.permute(2, 0, 1), t.permute(2, 0, 1))
    check(base[1:4, ::2, 3], t[1:4, ::2, 3])
    big = torch.arange(3000.0).reshape(30, 100)
    tb = to_ng(big)
    check(big.t(), tb.T)                                     # a transposed view, summarized
    check(big[::3, 5:], tb[::3, 5:])
    # a stride-0 view of 2^40 elements: only the corners shown are read
    huge = ng.zeros(1).expand(1, 2**40)
    assert str(huge) == str(torch.zeros(1).expand(1, 2**40)) == "tensor([[0., 0., 0.,  ..., 0., 0., 0.]])"


def test_autograd_suffixes():
    x = ng.tensor([1.0, 2.0], requires_grad=True)
    tx = torch.tensor([1.0, 2.0], requires_grad=True)
    assert str(x) == str(tx) == "tensor([1., 2.], requires_grad=True)"
    y = x * x
    assert y.grad_fn == "MulBackward"
    assert str(y) == expected((tx * tx).detach(), grad_fn="MulBackward") == "tensor([1., 4.], grad_fn=<MulBackward>)"
    z = ng.tensor([[1.0, 2.0]], dtype=ng.float64, requires_grad=True).sum()
    assert str(z) == "tensor(3., dtype=float64, grad_fn=<SumBackward>)"
    with printoptions(linewidth=30):
        assert str(y) == expected((tx * tx).detach(), grad_fn="MulBackward") == \
            "tensor([1., 4.],\n       grad_fn=<MulBackward>)"


def test_gpu_tensors_print_their_device():
    if not ng.cuda.is_available():
        pytest.skip("no GPU")
    tt = torch.randn(3, 4)
    check(tt, device="cuda:0")
    check(torch.randn(50, 50, dtype=torch.float64), device="cuda:0")


def test_low_level_function():
    h = C.nx_tensor_from_data(np.array([1.5, 2.0], dtype=np.float32), [2], C.NX_F32, "cpu", None)
    assert C.nx_tensor_to_string(h, None) == "tensor([1.5000, 2.0000])"
    o = C.nx_print_options()
    assert (o.precision, o.threshold, o.edge_items, o.line_width, o.sci_mode) == (4, 1000, 3, 80, C.NX_PRINT_SCI_AUTO)
    o.precision = 1
    assert C.nx_tensor_to_string(h, o) == "tensor([1.5, 2.0])"
    o.precision = -1
    with pytest.raises(ng.InvalidArgumentError, match="nx_tensor_to_string: options->precision is -1"):
        C.nx_tensor_to_string(h, o)
    assert not hasattr(C, "nx_string_free")  # the typemap copies and frees the string


def test_set_printoptions_checks_values():
    x = ng.tensor([1.23456])
    with pytest.raises(ng.InvalidArgumentError, match="options->precision is -1"):
        ng.set_printoptions(precision=-1)
    with pytest.raises(ng.InvalidArgumentError, match="options->edge_items is 0"):
        ng.set_printoptions(edgeitems=0)
    with pytest.raises(ValueError):
        ng.set_printoptions(profile="long")
    assert str(x) == "tensor([1.2346])"  # unchanged by the refused calls
    with printoptions(precision=2):
        assert str(x) == "tensor([1.23])"
    assert str(x) == "tensor([1.2346])"


def test_repr_never_raises():
    seen = []

    def step(x):
        seen.append(repr(x))
        return x * 2

    f = ng.compile(step)
    x = ng.tensor([1.0, 2.0])
    f(x)  # eager
    # captured: reading values is refused; repr says so, and the plan refuses the step
    with pytest.raises(ng.StateError, match="nx_tensor_to_string reads a tensor's values"):
        f(x)
    assert seen[0] == "tensor([1., 2.])"
    assert seen[1].startswith("tensor(<unprintable: ") and "nx_tensor_to_string" in seen[1]
