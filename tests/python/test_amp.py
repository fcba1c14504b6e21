"""nexusgrad.amp.GradScaler (nx_grad_scaler) against torch.cuda.amp.GradScaler's semantics.

torch 1.13's GradScaler disables itself without CUDA (its unscale and update kernels,
_amp_foreach_non_finite_check_and_unscale_ and _amp_update_scale_, have no CPU version), so the
reference is RefScaler: the same algorithm written in plain torch arithmetic, from
torch/cuda/amp/grad_scaler.py and the update kernel (the scale a float32 scalar, its inverse
computed in float64 and rounded to float32, a skipped step when any gradient is not finite,
scale * backoff_factor and the tracker reset on a skip, scale * growth_factor when the tracker
reaches growth_interval, unless that overflows float32)."""
import math

import numpy as np
import pytest
import torch

import nexusgrad as ng
from nexusgrad import nn
from nexusgrad.amp import GradScaler

RNG = np.random.default_rng(11)


class RefScaler:
    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
        self.scale_ = torch.tensor(init_scale, dtype=torch.float32)
        self.growth_factor, self.backoff_factor, self.growth_interval = growth_factor, backoff_factor, growth_interval
        self.tracker = 0
        self.found_inf = False

    def scale(self, loss):
        return loss * self.scale_

    def unscale_(self, params):
        inv = self.scale_.double().reciprocal().float()
        with torch.no_grad():
            for p in params:
                if p.grad is not None:
                    self.found_inf |= not bool(torch.isfinite(p.grad).all())
                    p.grad.mul_(inv)

    def step(self, opt, params):
        self.unscale_(params)
        if not self.found_inf:
            opt.step()
        return not self.found_inf

    def update(self):
        s = float(self.scale_)
        if self.found_inf:
            self.scale_ = torch.tensor(s * self.backoff_factor, dtype=torch.float32)
            self.tracker = 0
        else:
            self.tracker += 1
            if self.tracker == self.growth_interval:
                grown = torch.tensor(s * self.growth_factor, dtype=torch.float32)
                if torch.isfinite(grown):
                    self.scale_ = grown
                self.tracker = 0
        self.found_inf = False

    def get_scale(self):
        return float(self.scale_)


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(a.cpu().numpy(), b.detach().numpy(), rtol=tol, atol=tol)


def leaves(device, *arrays):
    return [ng.tensor(a, device=device, requires_grad=True) for a in arrays]


def mse(x, w, b, y):
    """nexusgrad and torch spell this the same way."""
    d = x @ w + b - y
    return (d * d).mean() if isinstance(d, torch.Tensor) else ng.mean(d * d)


def data(bad=False):
    x = RNG.standard_normal((8, 4)).astype(np.float32)
    if bad:
        x[3, 1] = np.inf
    return x, RNG.standard_normal((8, 3)).astype(np.float32)


def test_defaults_match_torch():
    s = GradScaler()
    # torch's documented defaults, read from its signature by name (torch 2.x forwards
    # torch.cuda.amp.GradScaler to torch.amp.GradScaler, whose first parameter is the device)
    import inspect
    cls = torch.amp.GradScaler if hasattr(getattr(torch, "amp", None), "GradScaler") else torch.cuda.amp.GradScaler
    params = inspect.signature(cls).parameters
    t = [params[k].default for k in ("init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled")]
    assert (s.get_scale(), s.get_growth_factor(), s.get_backoff_factor(), s.get_growth_interval(), s.is_enabled()) \
        == tuple(t)
    assert ng.amp.autocast is ng.autocast


def test_scaled_loss_gives_scale_times_the_gradients(device):
    w0, b0 = RNG.standard_normal((4, 3)).astype(np.float32), RNG.standard_normal(3).astype(np.float32)
    x, y = data()
    w, b = leaves(device, w0, b0)
    tw, tb = torch.tensor(w0, requires_grad=True), torch.tensor(b0, requires_grad=True)
    mse(torch.tensor(x), tw, tb, torch.tensor(y)).backward()
    scaler = GradScaler(init_scale=1024.0)
    loss = mse(ng.tensor(x, device=device), w, b, ng.tensor(y, device=device))
    scaled = scaler.scale(loss)
    assert scaled.item() == pytest.approx(1024 * loss.item(), rel=1e-6)
    ng.backward(scaled)
    close(w.grad, 1024 * tw.grad, 1e-4)
    close(b.grad, 1024 * tb.grad, 1e-4)
    opt = nn.SGD([w, b], lr=0.1)
    scaler.unscale_(opt)
    close(w.grad, tw.grad)
    close(b.grad, tb.grad)


def test_inf_gradient_skips_the_step_and_halves_the_scale(device):
    w0, b0 = RNG.standard_normal((4, 3)).astype(np.float32), RNG.standard_normal(3).astype(np.float32)
    w, b = leaves(device, w0, b0)
    opt = nn.SGD([w, b], lr=0.1, momentum=0.9)
    scaler = GradScaler(init_scale=256.0)
    x, y = data(bad=True)
    ng.backward(scaler.scale(mse(ng.tensor(x, device=device), w, b, ng.tensor(y, device=device))))
    assert not np.isfinite(w.grad.cpu().numpy()).all()
    assert scaler.step(opt) is False
    np.testing.assert_array_equal(w.cpu().numpy(), w0)
    np.testing.assert_array_equal(b.cpu().numpy(), b0)
    scaler.update()
    assert scaler.get_scale() == 128.0


def test_growth_after_growth_interval_clean_steps(device):
    w, b = leaves(device, np.zeros((4, 3), np.float32), np.zeros(3, np.float32))
    opt = nn.SGD([w, b], lr=0.01)
    scaler, ref = GradScaler(init_scale=8.0, growth_interval=3), RefScaler(init_scale=8.0, growth_interval=3)
    pattern = [False, False, False, False, True, False, False, False, False, False, False, True, True, False]
    scales = []
    for bad in pattern:
        opt.zero_grad()
        x, y = data(bad)
        ng.backward(scaler.scale(mse(ng.tensor(x, device=device), w, b, ng.tensor(y, device=device))))
        assert scaler.step(opt) is (not bad)
        scaler.update()
        ref.found_inf = bad
        ref.update()
        scales.append(scaler.get_scale())
        assert scales[-1] == ref.get_scale()
    assert scales == [8, 8, 16, 16, 8, 8, 8, 16, 16, 16, 32, 16, 8, 8]


def test_state_errors():
    w, b = leaves("cpu", np.ones((4, 3), np.float32), np.ones(3, np.float32))
    opt = nn.SGD([w, b], lr=0.1)
    scaler = GradScaler()
    with pytest.raises(ng.StateError, match="no parameter of the optimizer has a gradient"):
        scaler.step(opt)
    scaler = GradScaler()
    with pytest.raises(ng.StateError, match="nx_grad_scaler_update: no gradients were unscaled"):
        scaler.update()
    x, y = data()
    ng.backward(scaler.scale(mse(ng.tensor(x), w, b, ng.tensor(y))))
    scaler.unscale_(opt)
    with pytest.raises(ng.StateError, match="already unscaled") as e:
        scaler.unscale_(opt)
    assert isinstance(e.value, RuntimeError)  # what torch raises
    scaler.step(opt)
    with pytest.raises(ng.StateError, match="after this optimizer's step"):
        scaler.unscale_(opt)
    with pytest.raises(ng.StateError, match="already stepped"):
        scaler.step(opt)
    scaler.update()
    with pytest.raises(TypeError):
        scaler.step(object())
    with pytest.raises(TypeError):
        scaler.scale(1.0)


@pytest.mark.parametrize("field,value", [("init_scale", 0.0), ("init_scale", -2.0), ("init_scale", math.inf),
                                         ("growth_factor", 1.0), ("growth_factor", 0.9), ("backoff_factor", 1.0),
                                         ("backoff_factor", 0.0), ("growth_interval", 0)])
def test_option_validation(field, value):
    with pytest.raises(ng.InvalidArgumentError, match=f"nx_grad_scaler_create: {field} must") as e:
        GradScaler(**{field: value})
    assert isinstance(e.value, ValueError)
    assert f"got {value:g}" in str(e.value) or f"got {int(value)}" in str(e.value)


def test_disabled_only_steps():
    w, b = leaves("cpu", np.ones((4, 3), np.float32), np.ones(3, np.float32))
    opt = nn.SGD([w, b], lr=0.1)
    scaler = GradScaler(enabled=False)
    assert not scaler.is_enabled() and scaler.get_scale() == 1.0
    x, y = data()
    loss = mse(ng.tensor(x), w, b, ng.tensor(y))
    assert scaler.scale(loss).item() == loss.item()
    ng.backward(scaler.scale(loss))
    scaler.unscale_(opt)
    scaler.unscale_(opt)
    assert scaler.step(opt) is True
    scaler.update()
    assert scaler.get_scale() == 1.0


def test_scale_takes_lists_and_tuples():
    scaler = GradScaler(init_scale=4.0)
    a, b = ng.tensor([1.0, 2.0]), ng.tensor([3.0])
    out = scaler.scale([a, (b, a)])
    assert isinstance(out, list) and isinstance(out[1], tuple)
    assert out[0].tolist() == [4.0, 8.0] and out[1][0].tolist() == [12.0]


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_training_matches_torch_reference(device, kind):
    """Ten iterations (two with an Inf input, so two skipped steps and two back-offs, and growth
    every 3 clean steps), every other one with unscale_ and clipping before step as in torch's
    recipe: which steps ran, the scale after every update and the parameters after every step
    match RefScaler driving torch.optim."""
    w0, b0 = RNG.standard_normal((4, 3)).astype(np.float32), RNG.standard_normal(3).astype(np.float32)
    w, b = leaves(device, w0, b0)
    tw, tb = torch.tensor(w0, requires_grad=True), torch.tensor(b0, requires_grad=True)
    if kind == "sgd":
        opt, topt = nn.SGD([w, b], lr=0.05, momentum=0.9), torch.optim.SGD([tw, tb], lr=0.05, momentum=0.9)
    else:
        opt, topt = nn.Adam([w, b], lr=0.01), torch.optim.Adam([tw, tb], lr=0.01)
    scaler = GradScaler(init_scale=2.0 ** 14, growth_interval=3)
    ref = RefScaler(init_scale=2.0 ** 14, growth_interval=3)
    bad_iterations = (3, 6)
    for it in range(10):
        bad = it in bad_iterations
        x, y = data(bad)
        opt.zero_grad()
        topt.zero_grad()
        ng.backward(scaler.scale(mse(ng.tensor(x, device=device), w, b, ng.tensor(y, device=device))))
        ref.scale(mse(torch.tensor(x), tw, tb, torch.tensor(y))).backward()
        if it % 2:
            scaler.unscale_(opt)
            ref.unscale_([tw, tb])
            if not bad:
                n = nn.clip_grad_norm_([w, b], 1.0)
                assert n == pytest.approx(float(torch.nn.utils.clip_grad_norm_([tw, tb], 1.0)), rel=1e-5)
            stepped = scaler.step(opt)
            if not ref.found_inf:
                topt.step()
            tstepped = not ref.found_inf
        else:
            stepped, tstepped = scaler.step(opt), ref.step(topt, [tw, tb])
        assert stepped == tstepped == (not bad)
        scaler.update()
        ref.update()
        assert scaler.get_scale() == ref.get_scale()
        close(w, tw)
        close(b, tb)
    assert scaler.get_scale() == 2.0 ** 14  # +1 at 2, -1 at 3, -1 at 6, +1 at 9
