"""torch.optim's spelling: ``nexusgrad.optim.SGD``, ``Adam``, ``AdamW`` (the optimizers of
:mod:`nexusgrad.nn`) and ``nexusgrad.optim.lr_scheduler`` (StepLR, CosineAnnealingLR, LambdaLR).

    opt = nexusgrad.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = nexusgrad.optim.lr_scheduler.StepLR(opt, step_size=30, gamma=0.1)
    for epoch in range(90):
        train(...)          # opt.step() inside
        sched.step()
"""
from __future__ import annotations

import sys
import types
from typing import Callable, List

from . import _nexus as _C
from .nn import SGD, Adam, AdamW, Optimizer

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "lr_scheduler"]


class LRScheduler:
    """Sets the optimizer's learning rate from the epoch count, as torch's schedulers: made at
    epoch 0 (the learning rate is set then), step() advances one epoch. One parameter group, so
    get_last_lr() is a list of one."""

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(self).__name__}: expected a nexusgrad optimizer, not {type(optimizer).__name__}")
        self.optimizer = optimizer
        self.base_lrs = [optimizer.lr]
        self.last_epoch = int(last_epoch)
        self.step()

    def lr_at(self, epoch: int) -> float:
        """The learning rate of epoch (the closed form)."""
        raise NotImplementedError

    def step(self) -> None:
        self.last_epoch += 1
        self.optimizer.lr = self.lr_at(self.last_epoch)

    def get_last_lr(self) -> List[float]:
        return [self.optimizer.lr]


class StepLR(LRScheduler):
    """base_lr * gamma ** (epoch // step_size) (nx_lr_step)."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1) -> None:
        self.step_size, self.gamma = int(step_size), float(gamma)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int) -> float:
        return _C.nx_lr_step(self.base_lrs[0], epoch, self.step_size, self.gamma)


class CosineAnnealingLR(LRScheduler):
    """eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2 for epoch <= T_max
    (nx_lr_cosine_warmup without warm-up). torch computes the same curve recursively (equal to
    rounding) and keeps oscillating after T_max; here the rate stays at the value
    nx_lr_cosine_warmup gives past the end, eta_min."""

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1) -> None:
        self.T_max, self.eta_min = int(T_max), float(eta_min)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int) -> float:
        return _C.nx_lr_cosine_warmup(self.base_lrs[0], epoch, 0, self.T_max, self.eta_min)


class LambdaLR(LRScheduler):
    """base_lr * lr_lambda(epoch)."""

    def __init__(self, optimizer: Optimizer, lr_lambda: Callable[[int], float], last_epoch: int = -1) -> None:
        self.lr_lambda = lr_lambda
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int) -> float:
        return self.base_lrs[0] * float(self.lr_lambda(epoch))


# nexusgrad.optim.lr_scheduler, importable by name as torch.optim.lr_scheduler is
lr_scheduler = types.ModuleType(__name__ + ".lr_scheduler",
                                "Learning-rate schedulers (torch.optim.lr_scheduler's names).")
for _cls in (LRScheduler, StepLR, CosineAnnealingLR, LambdaLR):
    setattr(lr_scheduler, _cls.__name__, _cls)
lr_scheduler.__all__ = ["LRScheduler", "StepLR", "CosineAnnealingLR", "LambdaLR"]  # type: ignore[attr-defined]
sys.modules[lr_scheduler.__name__] = lr_scheduler
del _cls
