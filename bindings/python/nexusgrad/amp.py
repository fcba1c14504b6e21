"""Mixed precision like ``torch.cuda.amp``: :class:`GradScaler` (nx_grad_scaler) and ``autocast``
(the same object as ``nexusgrad.autocast``).

    scaler = nexusgrad.amp.GradScaler()
    with nexusgrad.autocast("cuda"):
        loss = loss_fn(model(x), y)
    nexusgrad.backward(scaler.scale(loss))
    scaler.unscale_(opt)                 # optional: to clip or inspect the true gradients
    scaler.step(opt)
    scaler.update()
"""
from __future__ import annotations

from typing import Any, Optional

from . import _nexus as _C
from .nn import Optimizer
from .tensor import Tensor, _options, _wrap, autocast

__all__ = ["GradScaler", "autocast"]


class GradScaler:
    """Dynamic loss scaling for float16 training, with ``torch.cuda.amp.GradScaler``'s semantics.

    ``scale(loss)`` multiplies the loss by the scale so that small float16 gradients do not flush
    to zero; ``step(optimizer)`` divides the gradients by it again (unless ``unscale_`` already
    did) and runs ``optimizer.step()`` only if no gradient is Inf or NaN; ``update()`` then
    multiplies the scale by ``backoff_factor`` after a skipped step, or by ``growth_factor`` after
    ``growth_interval`` clean steps in a row. Calling ``unscale_`` twice for one optimizer, after
    its step, or ``step`` twice between updates raises :class:`nexusgrad.StateError` (a
    RuntimeError, as torch raises). With ``enabled=False`` it only steps, and the scale reads 1.

    Differences from torch: float16 gradients are unscaled rather than refused (torch expects
    float32 master weights), ``step`` returns whether it stepped, ``update`` takes no new scale,
    and there is no ``state_dict``.
    """

    __slots__ = ("_s", "_enabled", "_growth_factor", "_backoff_factor", "_growth_interval")

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True) -> None:
        o = _options(_C.nx_grad_scaler_options, init_scale=float(init_scale), growth_factor=float(growth_factor),
                     backoff_factor=float(backoff_factor), growth_interval=int(growth_interval),
                     enabled=bool(enabled))
        self._s = _C.nx_grad_scaler_create(o)
        self._enabled = bool(enabled)
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = int(growth_interval)

    def scale(self, outputs: Any) -> Any:
        """outputs (a Tensor, or a list or tuple of them, nested) times the scale, recorded by
        autodiff; unchanged when disabled."""
        if isinstance(outputs, Tensor):
            return _wrap(_C.nx_grad_scaler_scale(self._s, outputs._h, None))
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        raise TypeError(f"GradScaler.scale: outputs must be a Tensor or a list or tuple of Tensors, "
                        f"not {type(outputs).__name__}")

    def unscale_(self, optimizer: Optimizer) -> None:
        """Divides optimizer's gradients by the scale (each gradient is replaced: a tensor from
        ``p.grad`` taken before keeps the scaled values) and notes whether one is Inf/NaN."""
        _C.nx_grad_scaler_unscale(self._s, _handle(optimizer), None)

    def step(self, optimizer: Optimizer, report: bool = True) -> Optional[bool]:
        """Unscales (unless done), then ``optimizer.step()`` unless a gradient is Inf/NaN; returns
        whether it stepped. With ``report=False`` it returns None and reads nothing on the host:
        the form to use inside :func:`nexusgrad.compile`, where each replay decides on the device
        (Adam, AdamW and SGD skip there) and ``update()`` runs after each replay."""
        if not report:
            _C.nx_py_grad_scaler_step_on_device(self._s, _handle(optimizer), None)
            return None
        return _C.nx_grad_scaler_step(self._s, _handle(optimizer), None)

    def update(self) -> None:
        """Backs off (a step was skipped) or counts a clean step, growing the scale every
        growth_interval of them; ends the iteration."""
        _C.nx_grad_scaler_update(self._s)

    def get_scale(self) -> float:
        """The current scale (1.0 when disabled)."""
        return _C.nx_grad_scaler_get_scale(self._s)

    def is_enabled(self) -> bool:
        return self._enabled

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def get_growth_interval(self) -> int:
        return self._growth_interval


def _handle(optimizer: Any) -> Any:
    if not isinstance(optimizer, Optimizer):
        raise TypeError(f"GradScaler: expected a nexusgrad.nn optimizer, not {type(optimizer).__name__}")
    return optimizer._o
