"""nexusgrad.compile (nx_plan_*): a training step traced once and replayed gives the eager losses and
parameters bit for bit; what the plan counts, prints and refuses; the step function's lifetime and
exceptions through the low-level nx_plan_create."""
import gc
import re

import numpy as np
import pytest

import nexusgrad as ng
from nexusgrad import _nexus as C
from nexusgrad import nn
from nexusgrad.tensor import _wrap

STEPS = 20


@pytest.fixture(autouse=True)
def deterministic():
    prev = C.nx_runtime_get_deterministic()
    C.nx_runtime_set_deterministic(True)
    yield
    C.nx_runtime_set_deterministic(prev)


def make_model(seed=7):
    """The same initial weights for every call (the engine initializes from the seeded generator)."""
    ng.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    return model, nn.AdamW(model, lr=1e-2)


def make_step(model, opt, read_loss=False, with_logits=False):
    def train_step(x, y):
        logits = model(x)
        loss = ng.cross_entropy(logits, y)
        opt.zero_grad()
        ng.backward(loss)
        opt.step()
        if read_loss:
            loss.item()  # a host read: refused when the step is traced
        return (loss, logits) if with_logits else loss

    return train_step


def batch(i, n=16):
    rng = np.random.default_rng(100 + i)
    x = rng.standard_normal((n, 8)).astype(np.float32)
    y = rng.integers(0, 4, size=n).astype(np.int64)
    return ng.tensor(x), ng.tensor(y)


def train(step, opt, steps=STEPS):
    losses = []
    for i in range(steps):
        opt.lr = nn.lr_cosine_warmup(1e-2, i, 3, steps, 1e-3)  # Adam's lr may change every step
        loss = step(*batch(i))
        losses.append(loss.item())
    return losses


def param_bytes(model):
    return [p.numpy().tobytes() for p in model.parameters()]


def test_compiled_training_equals_eager_bit_for_bit():
    model, opt = make_model()
    eager = train(make_step(model, opt), opt)

    cmodel, copt = make_model()
    assert param_bytes(cmodel) != param_bytes(model)  # the eager run trained its own copy
    step = ng.compile(make_step(cmodel, copt))
    compiled = train(step, copt)

    assert compiled == eager  # floats compared exactly
    assert eager[-1] < eager[0]
    assert param_bytes(cmodel) == param_bytes(model)
    s = step.stats()
    assert (s["eager_runs"], s["captures"], s["recaptures"], s["replays"]) == (1, 1, 0, STEPS - 2)
    assert s["ops"] > 0 and s["arena_bytes"] >= 0 and s["cuda_graph"] is False
    assert set(s) == {"eager_runs", "captures", "recaptures", "replays", "ops", "ops_eliminated", "uploads",
                      "arena_bytes", "eager_peak_bytes", "kept_bytes", "cuda_graph", "fused_ops", "fused_groups",
                      "held_bytes", "evictions"}


def test_a_loss_scaled_step_compiles_and_replays_like_eager():
    """GradScaler inside ng.compile (step(report=False)), with AdamW and with SGD (momentum): a
    third input multiplies the loss by 1e38 on chosen steps, whose gradients overflow, so those
    steps are skipped on the device and the scale backs off, and it grows after every 2 clean
    ones; eager and compiled agree on losses, scales and weights bit for bit."""
    overflow = {3, 6, 7}

    def scaled_step(model, opt, scaler):
        def train_step(x, y, boost):
            loss = ng.cross_entropy(model(x), y)
            opt.zero_grad()
            ng.backward(scaler.scale(loss * boost))
            scaler.step(opt, report=False)
            scaler.update()
            return loss
        return train_step

    def run(compiled, sgd):
        model, opt = make_model()
        if sgd:  # SGD's update is ops: it skips through where() on the device flag
            opt = nn.SGD(model, lr=1e-2, momentum=0.9)
        scaler = ng.amp.GradScaler(growth_interval=2)
        step = scaled_step(model, opt, scaler)
        if compiled:
            step = ng.compile(step)
        losses, scales = [], []
        for i in range(12):
            boost = ng.tensor(np.array(1e38 if i in overflow else 1.0, dtype=np.float32))
            losses.append(step(*batch(i), boost).item())
            scales.append(scaler.get_scale())
        return losses, scales, param_bytes(model), step

    for sgd in (False, True):
        eager_losses, eager_scales, eager_params, _ = run(False, sgd)
        losses, scales, params, step = run(True, sgd)
        assert losses == eager_losses and scales == eager_scales and params == eager_params
        assert step.stats()["replays"] == 10
        backed_off = {i for i, (a, b) in enumerate(zip([65536.0] + scales, scales)) if b < a}
        assert backed_off == overflow


def test_table_and_dot_describe_the_compiled_step():
    model, opt = make_model()
    step = ng.compile(make_step(model, opt))
    x, y = batch(0)
    for _ in range(3):
        step(x, y)
    table = step.table()
    assert isinstance(table, str) and "matmul" in table
    # the arena's fullest call: what is alive there fits the arena, and the largest buffers listed
    # are part of it
    m = re.search(r"arena peak: (\d+) bytes in (\d+) buffers at call (\d+)", table)
    assert m, table[:400]
    peak, count, at = (int(v) for v in m.groups())
    assert 0 < peak <= step.stats()["arena_bytes"] and count > 0
    listed = re.findall(r"^  (\d+)  calls (\d+)\.\.(\d+)  ", table, re.M)
    assert 0 < len(listed) <= min(count, 12)
    assert sum(int(b) for b, _, _ in listed) <= peak
    assert all(int(first) <= at <= int(last) for _, first, last in listed)
    assert [int(b) for b, _, _ in listed] == sorted((int(b) for b, _, _ in listed), reverse=True)
    dot = step.dot()
    assert dot.lstrip().startswith("digraph") and "matmul" in dot
    assert repr(step).startswith("CompiledStep(") and "train_step" in repr(step)


def xent_backward_buffers(step):
    """(written, logits) labels of the cross-entropy backward's row in the plan's table."""
    row = next(line for line in step.table().splitlines() if " xent_backward " in line)
    m = re.search(r"w:(\S+) \S+, (\S+) ", row)
    assert m, row
    return m.groups()


def test_the_loss_gradient_is_written_over_the_logits_when_they_die_there():
    model, opt = make_model()
    step = ng.compile(make_step(model, opt))
    for i in range(3):
        step(*batch(i))
    written, logits = xent_backward_buffers(step)
    assert written.startswith("arena@") and written == logits
    # returned as an output, the logits outlive the step: the gradient gets its own memory
    model, opt = make_model()
    step = ng.compile(make_step(model, opt, with_logits=True), num_outputs=2)
    for i in range(3):
        step(*batch(i))
    written, logits = xent_backward_buffers(step)
    assert written.startswith("arena@") and written != logits


def test_several_outputs_come_back_as_a_tuple():
    model, opt = make_model()
    eager_step = make_step(model, opt, with_logits=True)
    eager = [eager_step(*batch(i)) for i in range(4)]

    cmodel, copt = make_model()
    step = ng.compile(make_step(cmodel, copt, with_logits=True), num_outputs=2)
    for i in range(4):
        out = step(*batch(i))
        assert isinstance(out, tuple) and len(out) == 2
        loss, logits = out
        assert loss.item() == eager[i][0].item()
        assert logits.shape == (16, 4) and logits.numpy().tobytes() == eager[i][1].numpy().tobytes()


def test_a_host_read_inside_the_step_is_refused_on_the_traced_call():
    model, opt = make_model()
    step = ng.compile(make_step(model, opt, read_loss=True))
    x, y = batch(0)
    step(x, y)  # the first call runs eagerly: reading the loss is fine
    with pytest.raises(ng.StateError, match="nx_tensor_item"):
        step(x, y)


def test_a_new_input_shape_compiles_a_second_plan():
    model, opt = make_model()
    step = ng.compile(make_step(model, opt))
    for _ in range(3):
        step(*batch(0, n=16))
    assert step.stats()["captures"] == 1
    for _ in range(3):
        step(*batch(1, n=8))
    s = step.stats()
    assert (s["eager_runs"], s["captures"], s["replays"]) == (2, 2, 2)
    step(*batch(2, n=16))  # the first signature is still compiled
    assert step.stats()["replays"] == 3 and step.stats()["captures"] == 2


def test_the_function_runs_only_when_the_engine_runs_it_and_its_errors_propagate():
    calls = []

    def square(x):
        calls.append(1)
        return x * x

    step = ng.compile(square, max_plans=1, cuda_graph=False)
    x = ng.tensor(np.arange(4, dtype=np.float32))
    for _ in range(5):
        np.testing.assert_array_equal(step(x).numpy(), np.arange(4, dtype=np.float32) ** 2)
    assert len(calls) == 2  # eager, then traced; replays do not call it
    x2 = ng.tensor(np.arange(6, dtype=np.float32))
    step(x2)
    step(x2)
    assert len(calls) == 4
    del step

    def bad(x):
        raise ZeroDivisionError("boom")

    with pytest.raises(ZeroDivisionError, match="boom"):
        ng.compile(bad)(x)
    with pytest.raises(TypeError, match="compile: the function must return Tensors, got int"):
        ng.compile(lambda x: 3)(x)
    with pytest.raises(ValueError, match="the step function returned 2 tensors, expected 1"):
        C.nx_plan_run(C.nx_plan_create(lambda hs: [hs[0], hs[0]], 1, None), 1, [x._h], None)
    with pytest.raises(TypeError, match="fn must be callable"):
        C.nx_plan_create(3, 1, None)
    with pytest.raises(TypeError, match="callable"):
        ng.compile(3)
    with pytest.raises(ng.InvalidArgumentError, match="noutputs"):
        ng.compile(square, num_outputs=0)
    with pytest.raises(ng.InvalidArgumentError, match="max_plans"):
        ng.compile(square, max_plans=0)


def test_the_plan_cache_keeps_within_its_byte_bound():
    def step_fn(x):
        return x * x + 1.0

    xs = [ng.tensor(np.ones(n, dtype=np.float32)) for n in (1000, 2000, 3000)]
    unbounded = ng.compile(step_fn, cuda_graph=False)
    held = [0]
    for x in xs:
        unbounded(x)  # eager
        unbounded(x)  # traced and compiled
        held.append(unbounded.stats()["held_bytes"])
    sizes = [b - a for a, b in zip(held, held[1:])]  # what each compiled step holds
    for size, x in zip(sizes, xs):
        assert size >= 2 * 4 * x.numel()  # at least its own input and output buffers
    assert unbounded.stats()["evictions"] == 0

    bound = sizes[1] + sizes[2]  # room for the last two steps only
    step = ng.compile(step_fn, cuda_graph=False, max_bytes=bound)
    for x in xs:
        step(x)
        step(x)
    s = step.stats()
    assert s["evictions"] == 1 and s["held_bytes"] == bound
    np.testing.assert_array_equal(step(xs[2]).numpy(), np.full(3000, 2.0, dtype=np.float32))
    assert step.stats()["replays"] == 1  # the newest steps stayed compiled
    step(xs[0])  # dropped: compiled again, which drops the least recently used (xs[1])
    s = step.stats()
    assert (s["captures"], s["evictions"], s["replays"]) == (4, 2, 1)
    assert s["held_bytes"] <= bound

    alone = ng.compile(step_fn, cuda_graph=False, max_bytes=1)  # the newest step is kept anyway
    for _ in range(3):
        np.testing.assert_array_equal(alone(xs[0]).numpy(), np.full(1000, 2.0, dtype=np.float32))
    assert alone.stats()["replays"] == 1 and alone.stats()["held_bytes"] == sizes[0]
    with pytest.raises(ng.InvalidArgumentError, match="max_bytes must be >= 0, got -1"):
        ng.compile(step_fn, max_bytes=-1)


def test_the_plan_handle_keeps_its_callable_alive():
    n0 = C.nx_live_handle_count(C.NX_HANDLE_PLAN)
    plan = C.nx_plan_create(lambda hs: [C.nx_add(hs[0], hs[0], None)], 1, C.nx_plan_options())
    assert type(plan).__name__ == "nx_plan_s" and C.nx_live_handle_count(C.NX_HANDLE_PLAN) == n0 + 1
    gc.collect()  # the lambda is referenced by the handle only
    x = ng.tensor([1.0, 2.0])
    for _ in range(3):
        (out,) = C.nx_plan_run(plan, 1, [x._h], None)
        assert _wrap(out).tolist() == [2.0, 4.0]
    assert C.nx_plan_get_stats(plan)["replays"] == 1
    del plan
    assert C.nx_live_handle_count(C.NX_HANDLE_PLAN) == n0


def test_a_step_that_refers_to_its_owner_is_collected():
    class Trainer:
        def __init__(self):
            self.model, self.opt = make_model()
            self.step = ng.compile(self.train_step)  # self -> step -> bound method -> self

        def train_step(self, x, y):
            return make_step(self.model, self.opt)(x, y)

    n0 = C.nx_live_handle_count(C.NX_HANDLE_PLAN)
    t = Trainer()
    for i in range(3):
        t.step(*batch(i))
    assert C.nx_live_handle_count(C.NX_HANDLE_PLAN) == n0 + 1
    del t
    gc.collect()
    assert C.nx_live_handle_count(C.NX_HANDLE_PLAN) == n0
