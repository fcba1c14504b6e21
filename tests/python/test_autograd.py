"""Autodiff from Python: backward options, torch.autograd.grad-style gradients, forward-mode JVP,
gradient checkpointing through a Python callback, NaN checks, graph inspection."""
import gc

import numpy as np
import pytest
import torch

import nexusgrad as ng

RNG = np.random.default_rng(3)


def pair(*shape, grad=True):
    a = RNG.standard_normal(shape)
    return ng.tensor(a, requires_grad=grad), torch.tensor(a, requires_grad=grad)


def close(a, b, tol=1e-8):
    np.testing.assert_allclose(a.numpy() if isinstance(a, ng.Tensor) else a,
                               b.detach().numpy() if isinstance(b, torch.Tensor) else b, rtol=tol, atol=tol)


def test_quick_start_gradient_matches_torch():
    x, tx = pair(2, 4, grad=False)
    w, tw = pair(4, 3)
    loss = ng.sum(ng.matmul(x, w))
    ng.backward(loss)
    torch.sum(tx @ tw).backward()
    close(w.grad, tw.grad)
    assert x.grad is None


def test_gradients_accumulate_and_zero_grad():
    w, tw = pair(3)
    for _ in range(2):
        ng.backward(ng.sum(w * w))
        torch.sum(tw * tw).backward()
    close(w.grad, tw.grad)
    w.zero_grad()
    assert w.grad is None


def test_backward_with_gradient_and_retain_graph():
    x, tx = pair(3, 2)
    y, ty = ng.tanh(x) * 2, torch.tanh(tx) * 2
    g = RNG.standard_normal((3, 2))
    y.backward(ng.tensor(g), retain_graph=True)
    y.backward(ng.tensor(g))
    ty.backward(torch.tensor(g), retain_graph=True)
    ty.backward(torch.tensor(g))
    close(x.grad, tx.grad)
    with pytest.raises(ng.StateError):  # the second backward freed the graph
        y.backward(ng.tensor(g))


def test_double_backward_with_create_graph():
    x, tx = pair(4)
    (gx,) = ng.grad(ng.sum(x ** 3), x, create_graph=True)
    (tgx,) = torch.autograd.grad(torch.sum(tx ** 3), tx, create_graph=True)
    close(gx, tgx)
    ng.backward(ng.sum(gx * gx))
    torch.sum(tgx * tgx).backward()
    close(x.grad, tx.grad, 1e-7)


def test_grad_function_like_torch_autograd_grad():
    a, ta = pair(3, 3)
    b, tb = pair(3)
    unused, _ = pair(2)
    out, tout = ng.sum(ng.softmax(a @ b, 0) * b), torch.sum(torch.softmax(ta @ tb, 0) * tb)
    ga, gb = ng.grad(out, [a, b], retain_graph=True)
    tga, tgb = torch.autograd.grad(tout, [ta, tb])
    close(ga, tga)
    close(gb, tgb)
    assert a.grad is None  # grad() does not touch .grad
    with pytest.raises(ng.InvalidArgumentError):
        ng.grad(out, [a, unused], retain_graph=True)
    g, none = ng.grad(out, [a, unused], allow_unused=True)
    assert none is None and g is not None


def test_jvp_matches_torch():
    x, tx = pair(3)
    y, ty = pair(3)
    v1, v2 = RNG.standard_normal(3), RNG.standard_normal(3)
    out = ng.sum(ng.sin(x) * y * y)
    jv = ng.jvp(out, [x, y], [ng.tensor(v1), ng.tensor(v2)])
    _, tjv = torch.autograd.functional.jvp(lambda a, b: torch.sum(torch.sin(a) * b * b), (tx.detach(), ty.detach()),
                                           (torch.tensor(v1), torch.tensor(v2)))
    close(jv, tjv)
    jv1 = ng.jvp(ng.exp(x), x, ng.tensor(v1))
    close(jv1, np.exp(x.detach().numpy()) * v1)


def test_checkpoint_recomputes_and_matches():
    calls = []

    def block(a, b):
        calls.append(1)
        h = ng.relu(ng.matmul(a, b))
        return ng.tanh(h) * 2

    x, tx = pair(4, 5)
    w, tw = pair(5, 3)
    out = ng.checkpoint(block, x, w)
    assert len(calls) == 1
    ng.backward(ng.sum(out * out))
    assert len(calls) == 2  # run again inside backward
    tout = torch.tanh(torch.relu(tx @ tw)) * 2
    torch.sum(tout * tout).backward()
    close(out, tout)
    close(x.grad, tx.grad)
    close(w.grad, tw.grad)


def test_checkpoint_gives_gradients_to_tensors_the_segment_reaches_by_itself():
    # w is captured by the segment, not passed as an input (a module's weights, the usual case):
    # it gets its gradient under ng.backward, as without checkpointing, and none under ng.grad.
    # (the segment reads w through a dict emptied at the end: nx_checkpoint keeps the Python
    # function alive for the process, and a closure over w would keep w too)
    x, tx = pair(4, 5)
    w, tw = pair(5, 3)
    held = {"w": w}
    out = ng.checkpoint(lambda a: ng.tanh(ng.matmul(a, held["w"])), x)
    ng.backward(ng.sum(out * out))
    tout = torch.tanh(tx @ tw)
    torch.sum(tout * tout).backward()
    close(x.grad, tx.grad)
    close(w.grad, tw.grad)
    x2 = ng.tensor(x.detach().numpy(), requires_grad=True)
    held["w"] = ng.tensor(w.detach().numpy(), requires_grad=True)
    out2 = ng.checkpoint(lambda a: ng.tanh(ng.matmul(a, held["w"])), x2)
    (gx,) = ng.grad(ng.sum(out2 * out2), [x2])
    close(gx, tx.grad)
    assert held["w"].grad is None  # ng.grad accumulates nowhere
    held.clear()


@pytest.mark.parametrize("every", [1, 2])
def test_gpt_block_checkpointing_gives_the_same_gradients_with_dropout(every):
    # Recomputation replays the random stream, so dropout draws the same masks in backward.
    def run(checkpoint_every):
        ng.manual_seed(7)
        m = ng.nn.GPT(vocab=50, context=16, dim=32, layers=3, heads=4, dropout=0.2, tie_embeddings=True,
                      checkpoint_every=checkpoint_every)
        ids = ng.tensor(np.arange(2 * 16).reshape(2, 16) % 50, dtype=ng.int64)
        loss = ng.cross_entropy(ng.reshape(m(ids), 32, 50), ng.reshape(ids, 32))
        ng.backward(loss)
        return float(loss.item()), [(n, p.grad.numpy()) for n, p in m.named_parameters()]

    loss0, grads0 = run(0)
    loss1, grads1 = run(every)
    assert loss0 == loss1
    for (name, g0), (_, g1) in zip(grads0, grads1):
        np.testing.assert_allclose(g1, g0, rtol=1e-5, atol=1e-6, err_msg=name)


def test_checkpoint_with_several_outputs_and_errors():
    x, tx = pair(3)
    a, b = ng.checkpoint(lambda t: (t * 2, ng.exp(t)), x, num_outputs=2)
    ng.backward(ng.sum(a) + ng.sum(b))
    close(x.grad, 2 + np.exp(x.detach().numpy()))

    def bad(t):
        raise KeyError("inside the segment")

    with pytest.raises(KeyError, match="inside the segment"):
        ng.checkpoint(bad, x)
    with pytest.raises(ValueError):
        ng.checkpoint(lambda t: (t, t), x, num_outputs=1)
    with pytest.raises(TypeError):
        ng.checkpoint(lambda t: "not a tensor", x)
    y = ng.randn(2) * 1  # the engine still works after the failures
    assert y.shape == (2,)


def test_backward_checked_names_the_node():
    x = ng.tensor([0.0, 1.0], requires_grad=True)
    y = ng.sqrt(x)  # d sqrt / dx at 0 is inf
    with pytest.raises(ng.StateError) as ei:
        ng.backward_checked(ng.sum(y))
    assert "Sqrt" in ei.value.message or "non-finite" in ei.value.message
    z = ng.tensor([1.0, 4.0], requires_grad=True)
    ng.backward_checked(ng.sum(ng.sqrt(z)))
    close(z.grad, [0.5, 0.25])


def test_graph_inspection():
    x = ng.randn(2, 3, requires_grad=True)
    w = ng.randn(3, 4, requires_grad=True)
    loss = ng.sum(ng.relu(x @ w))
    g = ng.Graph(loss)
    assert len(g) >= 3 and g.nodes[0].startswith("Sum")
    assert "MatmulBackward" in g.nodes
    assert g.saved_bytes > 0
    dot = g.to_dot()
    assert dot.startswith("digraph") and "MatmulBackward" in dot
    assert loss.grad_fn == g.nodes[0]
    del g


def test_graph_dump_names_parameters_and_summarizes_values():
    lin = ng.nn.Linear(3, 2)
    x = ng.tensor(np.array([[1.0, -2.0, 0.5]], dtype=np.float32))
    scale = ng.tensor(np.array([np.nan, 4.0], dtype=np.float32), requires_grad=True)
    loss = ng.sum(lin(x) * scale)
    g = ng.Graph(loss)
    assert "weight" not in g.to_dot()
    dot = g.name_parameters(lin).to_dot(values=True, saved_bytes=True)
    w = list(lin.named_parameters())
    names = [n for n, _ in w]
    assert names == ["weight", "bias"] and all(f"{n}\\n" in dot for n in names)
    wv = dict(w)["weight"].numpy()
    assert f"min {wv.min():.4g} max {wv.max():.4g}" in dot
    assert "leaf\\n[2] f32\\nmin 4 max 4 mean 4\\nnan 1 inf 0" in dot
    per_node = [g.node_saved_bytes(i) for i in range(len(g))]
    assert sum(per_node) == g.saved_bytes and max(per_node) > 0
    assert all(f"saved {b} bytes" in dot for b in per_node)
    ng.backward(loss)
    assert [g.node_saved_bytes(i) for i in range(len(g))] == [0] * len(g)


def test_detach_and_requires_grad_flags():
    x = ng.randn(3, requires_grad=True)
    d = x.detach()
    assert not d.requires_grad and d.data_ptr() == x.data_ptr()
    y = x * 2
    assert y.requires_grad and not y.is_leaf
    with pytest.raises(ng.DTypeError):
        ng.tensor([1, 2]).requires_grad_()
    z = ng.tensor([1.0, 2.0])
    z.requires_grad = True
    assert z.requires_grad and z.is_leaf


def test_gil_is_released_during_backward():
    """A callback re-enters Python from inside backward (the GIL was released around the call)."""
    seen = []

    def seg(t):
        seen.append(ng.is_grad_enabled())
        return t * 3

    x = ng.randn(4, requires_grad=True)
    out = ng.checkpoint(seg, x)
    ng.backward(ng.sum(out))
    close(x.grad, np.full(4, 3.0))
    assert len(seen) == 2
    gc.collect()


def test_grad_is_a_property_as_in_torch():
    x = ng.ones(3, requires_grad=True)
    assert x.grad is None
    ng.sum(x * x).backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0, 2.0])
    x.grad = None  # torch's set_to_none
    assert x.grad is None
    with pytest.raises(TypeError, match="only be set to None"):
        x.grad = ng.ones(3)
