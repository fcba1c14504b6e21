"""Compiled steps (nx_plan_* of nexus.h): nexusgrad.compile(step) traces a training step once and
replays it without Python, dispatch, autodiff or allocation.

    def train_step(x, y):
        loss = ng.cross_entropy(model(x), y)
        opt.zero_grad()
        ng.backward(loss)
        opt.step()
        return loss

    step = ng.compile(train_step)
    for x, y in batches:
        loss = step(x, y)          # call 1: eager, call 2: traced and compiled, then replayed
    print(step.stats(), step.table())

The results equal the eager step's bit for bit (on a GPU in deterministic mode).
"""
from __future__ import annotations

import operator
import weakref
from typing import Any, Callable, Dict

from . import _nexus as _C
from ._opargs import _S
from .functional import _handle_function
from .tensor import Tensor, _options, _wrap

__all__ = ["compile", "CompiledStep"]


class CompiledStep:
    """A step function compiled by :func:`compile`: call it on the step's input tensors.

    The Python function runs only when the engine runs it: the first call of each input signature
    (shapes, dtypes, device) runs it eagerly, the second traces it, later calls replay the trace
    without calling it (and again when the engine captures a stale step: see nexus.h). Keep Python
    side effects out of it, and pass what changes from step to step as input tensors: values read
    from Python inside it (a tensor made from a list...) are frozen into the plan, and reading a
    tensor on the host inside it (``.item()``, ``.numpy()``...) or seeding the random generator is
    refused with StateError on the traced call. Random draws (dropout) inside it are replayed as
    the eager step would draw them: each replay advances the generator. Loss scaling works inside
    it with ``scaler.step(opt, report=False)`` and ``scaler.update()`` in the function: the
    optimizer's step is skipped on the device when a gradient is Inf/NaN, and the scale is
    updated after each replay.
    """

    __slots__ = ("_function", "_num_outputs", "_plan", "__weakref__")

    def __init__(self, function: Callable[..., Any], num_outputs: int = 1, max_plans: int = 4,
                 cuda_graph: bool = True, fuse: bool = True, max_bytes: int = 0) -> None:
        if not callable(function):
            raise TypeError(f"compile: function must be callable, not {type(function).__name__}")
        self._function = function
        self._num_outputs = operator.index(num_outputs)
        # The plan handle keeps its callable alive (nx_plan_create's typemap); that callable refers
        # to this object weakly, so that a function referring back to the step (a method of an
        # object that stores its compiled step) leaves a cycle the collector can free.
        owner = weakref.ref(self)

        def step_function(*inputs: Tensor) -> Any:
            me = owner()
            if me is None:  # the plan runs only from __call__, which holds the step alive
                raise _C.StateError("compile: the compiled step was freed")
            return me._function(*inputs)

        options = _options(_C.nx_plan_options, max_plans=operator.index(max_plans), cuda_graph=bool(cuda_graph),
                           fuse=bool(fuse), max_bytes=operator.index(max_bytes))
        self._plan = _C.nx_plan_create(_handle_function(step_function, "compile"), self._num_outputs, options)

    def __call__(self, *inputs: Tensor) -> Any:
        """Runs the step on inputs (Tensors, all on one device): its output Tensor, or a tuple of
        num_outputs Tensors. An exception that the function raises propagates as is."""
        hs = _C.nx_plan_run(self._plan, self._num_outputs, list(inputs), _S)
        outs = tuple(_wrap(h) for h in hs)
        return outs[0] if self._num_outputs == 1 else outs

    def stats(self) -> Dict[str, Any]:
        """Counters (eager_runs, captures, recaptures, replays) and, of the step compiled last, ops,
        ops_eliminated, uploads, arena_bytes, eager_peak_bytes, kept_bytes, cuda_graph, fused_ops
        (elementwise ops folded into fused kernels) and fused_groups (those kernels); and of all its
        compiled steps, held_bytes (the memory they hold) and evictions (steps dropped by max_plans
        or max_bytes)."""
        return _C.nx_plan_get_stats(self._plan)

    def table(self) -> str:
        """The step compiled last as a table: op, the C call that launched it, the buffers it writes
        and reads (arena offset or kept buffer, dtype, shape); on the CPU, once the replay has
        calibrated, each op's measured time (us) and the times summed by op."""
        return _C.nx_plan_to_string(self._plan, _C.NX_PLAN_TABLE)

    def dot(self) -> str:
        """The step compiled last as Graphviz DOT (an edge from the op that last wrote a buffer to each
        op reading it)."""
        return _C.nx_plan_to_string(self._plan, _C.NX_PLAN_DOT)

    def __repr__(self) -> str:
        name = getattr(self._function, "__qualname__", type(self._function).__name__)
        return f"CompiledStep({name}, num_outputs={self._num_outputs})"


def compile(fn: Callable[..., Any], num_outputs: int = 1, max_plans: int = 4, cuda_graph: bool = True,
            fuse: bool = True, max_bytes: int = 0) -> CompiledStep:
    """Compiles a step function (nx_plan_create): fn(*input_tensors) runs a whole step through
    NexusGrad (forward, loss, zero_grad, backward, optimizer step...) and returns num_outputs
    Tensors (one Tensor or a sequence). step = compile(fn); step(x, y) returns what fn returns, from
    the third call of an input signature on by replaying the compiled trace (see CompiledStep).
    max_plans: input signatures kept compiled (least recently used dropped); max_bytes: the memory
    the compiled steps may hold together (0: no bound; the newest step is always kept); cuda_graph: replay a
    GPU step as one CUDA graph; fuse: fold chains of elementwise ops into one kernel each.
    step.stats(), step.table() and step.dot() describe the plan."""
    return CompiledStep(fn, num_outputs, max_plans, cuda_graph, fuse, max_bytes)
