"""bf16 and f16 matmul and flash attention on the CPU: the kernels take the half tensors themselves
(widened to f32 as they are packed or loaded, summed in f32, each output rounded once), checked
against PyTorch computing in f64 from the same rounded inputs.

Tolerance of a half result r against the exact (f64) value x: half an ulp of the half dtype at
max(|r|, |x|) (the one rounding) plus the error of the f32 sums, bounded by the usual
gamma_n = n * 2^-24 times the same sum taken over absolute values (n the number of terms, plus a
few ulp of slack for the f32 exp and log of the softmax). A result rounded after every block of k
instead of once exceeds it."""
import numpy as np
import pytest
import torch

import nexusgrad as ng

HALF = {"bfloat16": (ng.bfloat16, torch.bfloat16, 7), "float16": (ng.float16, torch.float16, 10)}
F32_UNIT = 2.0 ** -24


def levels():
    """The SIMD levels this processor runs (each has its own compiled kernels)."""
    have = []
    current = ng.cpu_simd_level()
    for level in ("scalar", "avx2", "avx512"):
        try:
            ng.set_cpu_simd_level(level)
            have.append(level)
        except ng.NotSupportedError:
            pass
    ng.set_cpu_simd_level(current)
    return have


@pytest.fixture(params=levels())
def simd_level(request):
    current = ng.cpu_simd_level()
    ng.set_cpu_simd_level(request.param)
    yield request.param
    ng.set_cpu_simd_level(current)


def rounded(gen, shape, tdt, scale=1.0):
    """Random normal values rounded to the half dtype: the inputs both sides start from."""
    return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale).to(tdt)


def to_ng(t, dt, grad=False):
    x = ng.tensor(t.float().numpy(), dtype=dt)  # exact: t holds half values
    return x.requires_grad_() if grad else x


def as_f64(x):
    return torch.from_numpy(np.asarray(x.float(), dtype=np.float64))


def half_ulp(x, mantissa_bits):
    """Half an ulp of the half dtype at |x| (f16's subnormal spacing 2^-24 below 2^-14)."""
    smallest = 2.0 ** -24 if mantissa_bits == 10 else 2.0 ** -133
    e = torch.floor(torch.log2(x.abs().clamp_min(1e-300)))
    return torch.clamp(2.0 ** (e - mantissa_bits), min=smallest) / 2


def check_rounded_once(out, exact, abs_sum, terms, mantissa_bits, what, slack=0, mostly_exact=True):
    """out (half, as f64) against the exact value: one rounding plus the f32 sums' error bound.
    mostly_exact: nearly every element is also the exact value correctly rounded (the f32 error
    seldom crosses a rounding boundary; not so for sums that cancel, as dQ's and dK's)."""
    assert out.shape == exact.shape, what
    tol = half_ulp(torch.maximum(out.abs(), exact.abs()), mantissa_bits) + (terms + slack) * F32_UNIT * abs_sum
    bad = (out - exact).abs() > tol
    assert not bad.any(), f"{what}: {int(bad.sum())} of {bad.numel()} outside, worst " \
        f"{float(((out - exact).abs() / tol).max()):.3g} x tolerance"
    if mostly_exact:
        tdt = torch.bfloat16 if mantissa_bits == 7 else torch.float16
        assert (out == exact.to(tdt).double()).double().mean() >= 0.95, what


# ---------------------------------------------------------------- matmul
# (a shape, b shape, transpose a, transpose b): the tiny path (m n k <= 32^3), k over one KC block
# (256), more rows than one f32 block of C (480), more columns than NC (3072), batched, broadcast
# batch (stride 0 and the [..., m, k] @ [k, n] fold), transposed operands
MATMUL_CASES = [
    ((5, 7), (7, 3), False, False),
    ((31, 33), (33, 30), False, False),
    ((64, 300), (300, 70), False, False),
    ((500, 520), (520, 40), False, False),
    ((8, 40), (40, 3100), False, False),
    ((3, 20, 300), (3, 300, 17), False, False),
    ((4, 33, 70), (1, 70, 50), False, False),
    ((2, 1, 16, 40), (3, 40, 24), False, False),
    ((4, 33, 270), (270, 50), False, False),
    ((130, 90), (300, 130), True, True),
    ((6, 300, 20), (6, 300, 40), True, False),
]


@pytest.mark.parametrize("half", list(HALF))
@pytest.mark.parametrize("case", MATMUL_CASES, ids=lambda c: f"{c[0]}@{c[1]}{'T' if c[2] else ''}{'T' if c[3] else ''}")
def test_matmul_matches_f64_rounded_once(case, half, simd_level):
    (sa, sb, ta, tb), (dt, tdt, bits) = case, HALF[half]
    gen = torch.Generator().manual_seed(7)
    a, b = rounded(gen, sa, tdt), rounded(gen, sb, tdt)
    x, y = to_ng(a, dt), to_ng(b, dt)
    if ta:  # stored transposed: the kernel reads a with column stride != 1
        a, x = a.transpose(-1, -2), ng.transpose(x, -1, -2)
    if tb:
        b, y = b.transpose(-1, -2), ng.transpose(y, -1, -2)
    out = ng.matmul(x, y)
    assert out.dtype is dt
    exact = a.double() @ b.double()
    abs_sum = a.double().abs() @ b.double().abs()
    check_rounded_once(as_f64(out), exact, abs_sum, a.shape[-1], bits, f"{half} {sa} @ {sb}")


@pytest.mark.parametrize("shapes", [((20, 300), (300, 30)), ((3, 40, 270), (270, 24)), ((2, 5, 6), (2, 6, 7))])
def test_matmul_bf16_gradients(shapes, simd_level):
    """d(out . w)/da = w b^T and /db = a^T w, each a bf16 matmul of bf16 operands (w exactly the
    output's gradient), against the same products in f64 rounded once."""
    gen = torch.Generator().manual_seed(11)
    a, b = rounded(gen, shapes[0], torch.bfloat16), rounded(gen, shapes[1], torch.bfloat16)
    x, y = to_ng(a, ng.bfloat16, grad=True), to_ng(b, ng.bfloat16, grad=True)
    out = ng.matmul(x, y)
    w = rounded(gen, tuple(out.shape), torch.bfloat16)
    ng.backward(out, to_ng(w, ng.bfloat16))
    assert x.grad.dtype is ng.bfloat16 and y.grad.dtype is ng.bfloat16
    wd, ad, bd = w.double(), a.double(), b.double()
    exact_a = wd @ bd.transpose(-1, -2)
    check_rounded_once(as_f64(x.grad), exact_a, wd.abs() @ bd.abs().transpose(-1, -2), wd.shape[-1], 7, "grad a")
    # b's gradient sums a^T w over the rows folded or batched into b's shape
    at = ad.reshape(-1, ad.shape[-1]) if len(shapes[1]) == 2 else ad
    wt = wd.reshape(-1, wd.shape[-1]) if len(shapes[1]) == 2 else wd
    exact_b = at.transpose(-1, -2) @ wt
    abs_b = at.abs().transpose(-1, -2) @ wt.abs()
    check_rounded_once(as_f64(y.grad), exact_b, abs_b, at.shape[-2], 7, "grad b")


def kernel_events(prof):
    return [e for e in prof.events() if e["kind"] == "kernel"]


def test_cpu_bf16_matmul_is_one_kernel_without_casts():
    gen = torch.Generator().manual_seed(3)
    x = to_ng(rounded(gen, (64, 96), torch.bfloat16), ng.bfloat16)
    y = to_ng(rounded(gen, (96, 48), torch.bfloat16), ng.bfloat16)
    with ng.profiler.profile() as prof:
        out = ng.matmul(x, y)
    assert out.dtype is ng.bfloat16
    kernels = kernel_events(prof)
    assert [e["name"] for e in kernels] == ["matmul"], kernels
    assert kernels[0]["shapes"] == "bf16[1,64,48] bf16[1,64,96] bf16[1,96,48]"


def test_cpu_bf16_attention_runs_without_casts():
    gen = torch.Generator().manual_seed(4)
    q, k, v = (to_ng(rounded(gen, (1, 2, 40, 16), torch.bfloat16), ng.bfloat16, grad=True) for _ in range(3))
    with ng.profiler.profile() as prof:
        out = ng.flash_attention(q, k, v, causal=True)
        ng.backward(out, ng.ones_like(out))
    names = [e["name"] for e in kernel_events(prof)]
    assert "attention_forward" in names and "attention_backward" in names, names
    assert not [n for n in names if n.startswith("copy")], names
    assert q.grad.dtype is ng.bfloat16


# ---------------------------------------------------------------- flash attention
def attention_reference(q, k, v, out, dout, causal, scale):
    """Forward and q/k/v gradients in f64, and the same sums over absolute values (for the f32
    error bound). The backward takes the saved half output for delta = rowsum(dO * O), as the
    kernels do (and FlashAttention)."""
    group = q.shape[1] // k.shape[1]
    q, dout, out = q.double(), dout.double(), out.double()
    k, v = k.double().repeat_interleave(group, 1), v.double().repeat_interleave(group, 1)
    tq, tk = q.shape[2], k.shape[2]
    s = q @ k.transpose(-1, -2) * scale
    if causal:  # query i sits at key position tk - tq + i
        s = s.masked_fill(torch.ones(tq, tk, dtype=torch.bool).triu(tk - tq + 1), float("-inf"))
    p = torch.softmax(s, -1)
    fwd, fwd_abs = p @ v, p @ v.abs()
    dp = dout @ v.transpose(-1, -2)
    delta = (dout * out).sum(-1, keepdim=True)
    ds = p * (dp - delta) * scale
    ds_abs = p * ((dout.abs() @ v.abs().transpose(-1, -2)) + (dout * out).abs().sum(-1, keepdim=True)) * scale

    def fold(x):  # sum the heads of a group into their kv head
        return x.reshape(x.shape[0], -1, group, *x.shape[2:]).sum(2)

    grads = (ds @ k, fold(ds.transpose(-1, -2) @ q), fold(p.transpose(-1, -2) @ dout))
    grads_abs = (ds_abs @ k.abs(), fold(ds_abs.transpose(-1, -2) @ q.abs()),
                 fold(p.transpose(-1, -2) @ dout.abs()))
    return fwd, fwd_abs, grads, grads_abs


# (batch, heads, kv heads, tq, tk, head dim): one tile, several query and key tiles with ragged
# ends, grouped-query, fewer queries than keys (a prefill after a KV cache)
ATTENTION_CASES = [(1, 2, 2, 8, 8, 16), (2, 4, 2, 70, 70, 32), (1, 6, 2, 33, 130, 24), (1, 2, 1, 40, 100, 64)]


@pytest.mark.parametrize("half", list(HALF))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", ATTENTION_CASES, ids=lambda s: "x".join(map(str, s)))
def test_flash_attention_matches_f64(shape, causal, half, simd_level):
    (b, h, hkv, tq, tk, d), (dt, tdt, bits) = shape, HALF[half]
    gen = torch.Generator().manual_seed(5)
    q, k, v = rounded(gen, (b, h, tq, d), tdt), rounded(gen, (b, hkv, tk, d), tdt), rounded(gen, (b, hkv, tk, d), tdt)
    dout = rounded(gen, (b, h, tq, d), tdt)
    x, y, z = to_ng(q, dt, True), to_ng(k, dt, True), to_ng(v, dt, True)
    scale = d ** -0.5
    out = ng.flash_attention(x, y, z, causal=causal)
    assert out.dtype is dt
    ng.backward(out, to_ng(dout, dt))
    out64 = as_f64(out)
    fwd, fwd_abs, grads, grads_abs = attention_reference(q, k, v, out64, dout, causal, scale)
    # terms: the keys of a row (softmax sum and P V) and the head dimension (the scores)
    terms, slack = tk + d, 16
    check_rounded_once(out64, fwd, fwd_abs, terms, bits, f"{half} out", slack)
    for name, grad, exact, abs_sum in zip("qkv", (x.grad, y.grad, z.grad), grads, grads_abs):
        assert grad.dtype is dt
        # dK, dV also sum over the queries of every head of the group
        n = terms + (tq * (h // hkv) if name != "q" else 0)
        check_rounded_once(as_f64(grad), exact, abs_sum, n, bits, f"{half} d{name}", slack, mostly_exact=name == "v")
