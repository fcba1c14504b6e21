"""Autocast (nx_autocast_push / pop, nexusgrad.autocast): the dtype policy op by op, and a bf16
training step of a small MLP against a PyTorch reference written with explicit casts. Debian's
torch 1.13 CPU autocast keeps some ops in bf16 that PyTorch's CUDA policy (ours) runs in f32, so
the reference spells the casts out instead of using torch.autocast."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import nexusgrad as ng

RNG = np.random.default_rng(11)
# The CUDA cases run where a GPU is (scripts/gpu_run.sh runs this file on the H200).
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(ng._nexus.nx_cuda_device_count() == 0,
                                                                 reason="no CUDA device"))]


def randn(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def test_policy_low_precision_ops_and_range_ops():
    a, b = ng.tensor(randn(4, 8)), ng.tensor(randn(8, 3))
    with ng.autocast("cpu", dtype=ng.bfloat16):
        y = ng.matmul(a, b)
        assert y.dtype == ng.bfloat16
        assert ng.softmax(y, 1).dtype == ng.float32  # range: f32
        assert ng.sum(y).dtype == ng.float32
        assert (y + a[:, :3]).dtype == ng.float32  # other ops promote as usual
        d = ng.tensor(randn(4, 8, dtype=np.float64))
        assert ng.matmul(d, d.T).dtype == ng.float64  # f64 is never cast
        with ng.autocast("cpu", enabled=False):
            assert ng.matmul(a, b).dtype == ng.float32
        with ng.autocast("cuda", dtype=ng.float16):  # another device type: the CPU scope still rules
            assert ng.matmul(a, b).dtype == ng.bfloat16
    assert ng.matmul(a, b).dtype == ng.float32
    assert ng._nexus.nx_autocast_get_dtype(ng._nexus.NX_CPU) == ng._nexus.NX_F32


def test_cpu_default_is_bfloat16_and_decorator():
    @ng.autocast("cpu")
    def f(x, w):
        return ng.linear(x, w)

    assert f(ng.tensor(randn(2, 5)), ng.tensor(randn(3, 5))).dtype == ng.bfloat16


def test_errors():
    with pytest.raises(ng.StateError, match="nx_autocast_pop: no autocast scope"):
        ng._nexus.nx_autocast_pop()
    with pytest.raises(ng.DTypeError, match="nx_autocast_push: autocast runs in f16 or bf16, got f32"):
        ng._nexus.nx_autocast_push(ng._nexus.NX_CPU, ng._nexus.NX_F32, True)
    with pytest.raises(ValueError):
        ng.autocast("tpu")


def mlp_params():
    return {"w1": randn(32, 16) * 0.3, "b1": randn(32) * 0.1, "w2": randn(10, 32) * 0.3, "b2": randn(10) * 0.1}


@pytest.mark.parametrize("device", DEVICES)
def test_bf16_training_step_matches_explicit_casts(device):
    """Loss and f32 master-weight gradients of linear -> gelu -> linear -> cross entropy, two
    micro-batches accumulating, against torch with the same casts written out. Tolerance: bf16
    rounds to 8 significant bits, so 2e-2 relative on the loss and 3e-2 of each gradient's scale."""
    p = mlp_params()
    ours = {k: ng.tensor(v, device=device, requires_grad=True) for k, v in p.items()}
    ref = {k: torch.tensor(v, requires_grad=True) for k, v in p.items()}
    losses = []
    for _ in range(2):  # gradient accumulation over micro-batches
        x, y = randn(8, 16), RNG.integers(0, 10, 8)
        with ng.autocast(device, dtype=ng.bfloat16):
            h = ng.gelu(ng.linear(ng.tensor(x, device=device), ours["w1"], ours["b1"]))
            assert h.dtype == ng.bfloat16
            loss = ng.cross_entropy(ng.linear(h, ours["w2"], ours["b2"]), ng.tensor(y, device=device))
            assert loss.dtype == ng.float32
        ng.backward(loss)
        bf = {k: v.bfloat16() for k, v in ref.items()}
        th = F.gelu(F.linear(torch.tensor(x).bfloat16(), bf["w1"], bf["b1"]))
        tloss = F.cross_entropy(F.linear(th, bf["w2"], bf["b2"]).float(), torch.tensor(y))
        tloss.backward()
        losses.append((loss.item(), tloss.item()))
    for got, want in losses:
        assert abs(got - want) <= 2e-2 * abs(want)
    for k in p:
        g = ours[k].grad
        assert g.dtype == ng.float32  # gradients come back in the leaf's dtype
        want = ref[k].grad.numpy()
        np.testing.assert_allclose(g.to(device="cpu").numpy(), want, atol=3e-2 * np.abs(want).max(), rtol=0)


def test_modules_run_unchanged_under_autocast():
    lin = ng.nn.Linear(6, 4)
    with ng.autocast("cpu"):
        out = lin(ng.tensor(randn(3, 6)))
        assert out.dtype == ng.bfloat16
        loss = ng.sum(out)
    ng.backward(loss)
    params = dict(lin.named_parameters())
    assert sorted(params) == ["bias", "weight"]
    for p in params.values():
        assert p.dtype == ng.float32 and p.grad.dtype == ng.float32


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rope,alibi,swiglu", [(True, False, True), (False, True, False)])
def test_gpt_trains_under_autocast_with_f32_master_weights(rope, alibi, swiglu, device):
    """nx_gpt_create's model, unchanged, under CPU bf16 autocast: f32 logits-to-loss path, every
    gradient f32 and finite, and the autocast loss within bf16 rounding of the f32 loss."""
    ng.manual_seed(5)
    gpt = ng.nn.GPT(vocab=64, context=16, dim=32, layers=2, heads=4, rope=rope, alibi=alibi, swiglu=swiglu,
                    device=device)
    tokens = ng.tensor(RNG.integers(0, 64, (2, 16)), device=device)
    targets = ng.tensor(RNG.integers(0, 64, 32), device=device)
    with ng.no_grad():
        full = ng.cross_entropy(ng.reshape(gpt(tokens), [32, 64]), targets).item()
    with ng.autocast(device, dtype=ng.bfloat16):
        logits = gpt(tokens)
        assert logits.dtype == ng.bfloat16
        loss = ng.cross_entropy(ng.reshape(logits, [32, 64]), targets)
    assert loss.dtype == ng.float32
    assert abs(loss.item() - full) <= 2e-2 * abs(full)
    ng.backward(loss)
    for name, p in gpt.named_parameters():
        g = p.grad
        assert p.dtype == ng.float32 and g is not None and g.dtype == ng.float32, name
        assert np.isfinite(g.to(device="cpu").numpy()).all(), name
