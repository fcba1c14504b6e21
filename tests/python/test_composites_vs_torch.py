"""Chains of ops against PyTorch: what the op harness (tests/harness, one op at a time) does not
see. A two-layer MLP with cross-entropy and a projected causal attention block (the composite
cases of the retired parity fixtures), and chained views (reshape of a transpose, slice of a
permute, split then mul: the retired CUDA-vs-CPU table's chains), forward and every gradient,
f32 and f64, on every device present (`device` fixture)."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import nexusgrad as ng

TOL = {"float32": dict(rtol=1e-4, atol=1e-5), "float64": dict(rtol=1e-10, atol=1e-10)}


def pair(a, device, dtype, requires_grad=True):
    """The same values as a nexusgrad leaf on device and a torch f64/f32 leaf on the CPU."""
    t = torch.tensor(a, dtype=getattr(torch, dtype), requires_grad=requires_grad)
    n = ng.tensor(a, dtype=getattr(ng, dtype), device=device, requires_grad=requires_grad)
    return n, t


def check(ours, ref, dtype, what):
    np.testing.assert_allclose(np.asarray(ours.to("cpu")), ref.detach().numpy(), err_msg=what, **TOL[dtype])


def run(device, dtype, arrays, ng_fn, torch_fn, ints=()):
    ns, ts = [], []
    for i, a in enumerate(arrays):
        if i in ints:
            ns.append(ng.tensor(a, dtype=ng.int64, device=device))
            ts.append(torch.tensor(a, dtype=torch.int64))
        else:
            n, t = pair(a, device, dtype)
            ns.append(n)
            ts.append(t)
    out, ref = ng_fn(*ns), torch_fn(*ts)
    check(out, ref, dtype, "forward")
    g = np.random.default_rng(7).uniform(-1, 1, tuple(ref.shape))  # a random upstream gradient
    ng.backward(out, ng.tensor(g, dtype=getattr(ng, dtype), device=device))
    ref.backward(torch.tensor(g, dtype=ref.dtype))
    for k, (n, t) in enumerate(zip(ns, ts)):
        if k not in ints:
            check(n.grad, t.grad, dtype, f"gradient of input {k}")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_mlp_cross_entropy(device, dtype):
    rng = np.random.default_rng(1)
    n, d_in, hidden, classes = 8, 6, 10, 4
    arrays = [rng.normal(size=(n, d_in)), rng.normal(size=(hidden, d_in)) / math.sqrt(d_in),
              rng.normal(size=hidden) * 0.1, rng.normal(size=(classes, hidden)) / math.sqrt(hidden),
              rng.normal(size=classes) * 0.1, rng.integers(0, classes, n)]
    run(device, dtype, arrays,
        lambda x, w1, b1, w2, b2, t: ng.cross_entropy(ng.linear(ng.relu(ng.linear(x, w1, b1)), w2, b2), t),
        lambda x, w1, b1, w2, b2, t: F.cross_entropy(F.linear(torch.relu(F.linear(x, w1, b1)), w2, b2), t),
        ints=(5,))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_projected_causal_attention(device, dtype):
    rng = np.random.default_rng(2)
    b, T, d = 2, 5, 8
    mask = np.triu(np.full((T, T), -np.inf), 1)  # 0 on and below the diagonal
    arrays = [rng.normal(size=(b, T, d))] + [rng.normal(size=(d, d)) / math.sqrt(d) for _ in range(4)] + \
             [rng.normal(size=(b, T, d))]

    def block(lin, matmul, softmax, mse, tr, m):
        def f(x, wq, wk, wv, wo, target):
            q, k, v = lin(x, wq), lin(x, wk), lin(x, wv)
            scores = matmul(q, tr(k)) * (1.0 / math.sqrt(d)) + m
            return mse(lin(matmul(softmax(scores, -1), v), wo), target)
        return f

    ng_mask = ng.tensor(mask, dtype=getattr(ng, dtype), device=device)
    t_mask = torch.tensor(mask, dtype=getattr(torch, dtype))
    run(device, dtype, arrays,
        block(ng.linear, ng.matmul, ng.softmax, ng.mse_loss, lambda k: ng.transpose(k, -1, -2), ng_mask),
        block(F.linear, torch.matmul, torch.softmax, F.mse_loss, lambda k: k.transpose(-1, -2), t_mask))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_chained_views(device, dtype):
    rng = np.random.default_rng(3)
    a = rng.normal(size=(4, 6, 5))
    # reshape of a transpose (a copy), slice of a permute, then split and a product of the parts
    run(device, dtype, [a],
        lambda x: ng.mul(*ng.split(ng.slice(ng.permute(ng.reshape(ng.transpose(x, 0, 1), [6, 20]).view(6, 4, 5),
                                                        [2, 0, 1]), 1, 1, 6, 2), [1, 2], 1)),
        lambda x: torch.mul(*torch.split(x.transpose(0, 1).reshape(6, 20).view(6, 4, 5).permute(2, 0, 1)[:, 1:6:2],
                                         [1, 2], 1)))
