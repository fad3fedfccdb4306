"""Learning-rate schedules, with PyTorch's interface and step counting.

A scheduler owns a counter ``last_epoch`` (the number of ``scheduler.step()`` calls so
far; it is 0 right after construction) and, on every ``step()``, writes the learning rate
for the new count into each parameter group.  Call ``optimizer.step()`` first and
``scheduler.step()` after it, once per step (or per epoch, by your choice of unit).

Every schedule here is computed in closed form from ``last_epoch`` (no accumulated product
of factors), so resuming from ``state_dict()`` gives exactly the learning rate the
uninterrupted run had.
"""
from __future__ import annotations

import math
from bisect import bisect_right

from mini.exercises import exercise

__all__ = ["LRScheduler", "LambdaLR", "StepLR", "MultiStepLR", "ExponentialLR", "LinearLR",
           "CosineAnnealingLR", "SequentialLR", "WarmupCosineLR", "warmup_cosine"]


class LRScheduler:
    def __init__(self, optimizer, last_epoch: int = -1):
        from mini.optim.optimizer import Optimizer
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(f"param 'initial_lr' is not specified in param_groups[{i}] "
                                   f"when resuming an optimizer")
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._initial_step()

    def _initial_step(self) -> None:
        self.step()

    def lr_at(self, base_lr: float, epoch: int, group_index: int) -> float:
        """The learning rate of a group with ``base_lr`` after ``epoch`` steps."""
        raise NotImplementedError

    def get_lr(self) -> list[float]:
        return [self.lr_at(b, self.last_epoch, i) for i, b in enumerate(self.base_lrs)]

    def get_last_lr(self) -> list[float]:
        return list(self._last_lr)

    def step(self, epoch: int | None = None) -> None:
        self.last_epoch = self.last_epoch + 1 if epoch is None else int(epoch)
        lrs = self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, lrs):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self) -> dict:
        """Everything but the optimizer (and functions, which cannot be saved)."""
        return {k: v for k, v in self.__dict__.items()
                if k not in ("optimizer", "lr_lambdas") and not callable(v)}

    def load_state_dict(self, state_dict: dict) -> None:
        self.__dict__.update(state_dict)


class LambdaLR(LRScheduler):
    """``lr = base_lr * lr_lambda(epoch)`` (one function, or one per group)."""

    def __init__(self, optimizer, lr_lambda, last_epoch: int = -1):
        n = len(optimizer.param_groups)
        if isinstance(lr_lambda, (list, tuple)):
            if len(lr_lambda) != n:
                raise ValueError(f"Expected {n} lr_lambdas, but got {len(lr_lambda)}")
            self.lr_lambdas = list(lr_lambda)
        else:
            self.lr_lambdas = [lr_lambda] * n
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, epoch, i):
        return base_lr * self.lr_lambdas[i](epoch)


class StepLR(LRScheduler):
    """``lr = base_lr * gamma ** (epoch // step_size)``."""

    def __init__(self, optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        self.step_size, self.gamma = int(step_size), gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, epoch, i):
        return base_lr * self.gamma ** (epoch // self.step_size)


class MultiStepLR(LRScheduler):
    """``lr = base_lr * gamma ** (number of milestones <= epoch)``."""

    def __init__(self, optimizer, milestones, gamma: float = 0.1, last_epoch: int = -1):
        self.milestones, self.gamma = sorted(milestones), gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, epoch, i):
        return base_lr * self.gamma ** bisect_right(self.milestones, epoch)


class ExponentialLR(LRScheduler):
    def __init__(self, optimizer, gamma: float, last_epoch: int = -1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, epoch, i):
        return base_lr * self.gamma ** epoch


class LinearLR(LRScheduler):
    """Factor goes linearly from ``start_factor`` to ``end_factor`` over ``total_iters``
    steps, then stays (a linear warmup with the defaults' shape)."""

    def __init__(self, optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
                 total_iters: int = 5, last_epoch: int = -1):
        if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1:
            raise ValueError("start_factor must be in (0, 1] and end_factor in [0, 1]")
        self.start_factor, self.end_factor = start_factor, end_factor
        self.total_iters = int(total_iters)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, epoch, i):
        t = min(epoch, self.total_iters)
        return base_lr * (self.start_factor + (self.end_factor - self.start_factor) * t
                          / self.total_iters)


class CosineAnnealingLR(LRScheduler):
    """``lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2``."""

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):
        self.T_max, self.eta_min = int(T_max), eta_min
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, epoch, i):
        return self.eta_min + (base_lr - self.eta_min) * (1 + math.cos(math.pi * epoch / self.T_max)) / 2


class SequentialLR(LRScheduler):
    """Run ``schedulers[0]`` until ``milestones[0]``, then ``schedulers[1]`` (restarted at
    its step 0), and so on, as ``torch.optim.lr_scheduler.SequentialLR`` does."""

    def __init__(self, optimizer, schedulers, milestones, last_epoch: int = -1):
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(f"Sequential Schedulers expects number of schedulers provided to be "
                             f"one more than the number of milestone points, but got "
                             f"{len(schedulers)} schedulers and {len(milestones)} milestones")
        for s in schedulers:
            if s.optimizer is not optimizer:
                raise ValueError("SequentialLR: every scheduler must drive the same optimizer")
        self.optimizer = optimizer
        self._schedulers = list(schedulers)
        self._milestones = list(milestones)
        self.last_epoch = last_epoch + 1
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"]
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        for s in self._schedulers:
            s.last_epoch -= 1
        self._schedulers[0]._initial_step()
        self._last_lr = self._schedulers[0].get_last_lr()

    def step(self, epoch=None) -> None:
        self.last_epoch += 1
        idx = bisect_right(self._milestones, self.last_epoch)
        s = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            s.step(0)
        else:
            s.step()
        self._last_lr = s.get_last_lr()

    def state_dict(self) -> dict:
        state = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_schedulers")}
        state["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        state = dict(state_dict)
        inner = state.pop("_schedulers")
        self.__dict__.update(state)
        for s, sd in zip(self._schedulers, inner):
            s.load_state_dict(sd)


@exercise("05.warmup_cosine")
def warmup_cosine(step, base_lr, warmup_steps, total_steps, min_lr=0.0):
    """The learning rate for step ``step`` (0 for the first optimizer step).

    Linear warmup over ``warmup_steps`` steps that *starts above zero* (step 0 already has a
    positive rate) and reaches ``base_lr`` on the last warmup step.  Then half a cosine
    period from ``base_lr`` (at ``step == warmup_steps``) down to ``min_lr`` (at ``step ==
    total_steps``), and ``min_lr`` after.  Returns a Python float.  ``warmup_steps == 0``
    means no warmup; ``total_steps == warmup_steps`` means no decay phase.
    """
    ### BEGIN SOLUTION
    if step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    span = max(1, total_steps - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / span)
    return min_lr + (base_lr - min_lr) * (1 + math.cos(math.pi * progress)) / 2
    ### END SOLUTION


class WarmupCosineLR(LRScheduler):
    """Linear warmup then cosine decay (see :func:`warmup_cosine`), one step per
    ``scheduler.step()``.  ``min_lr`` is absolute; groups with another base lr scale it."""

    def __init__(self, optimizer, warmup_steps: int, total_steps: int, min_lr: float = 0.0,
                 last_epoch: int = -1):
        if warmup_steps < 0 or total_steps < warmup_steps:
            raise ValueError(f"need 0 <= warmup_steps <= total_steps, got {warmup_steps} and "
                             f"{total_steps}")
        self.warmup_steps, self.total_steps, self.min_lr = int(warmup_steps), int(total_steps), min_lr
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, epoch, i):
        return float(warmup_cosine(epoch, base_lr, self.warmup_steps, self.total_steps,
                                   self.min_lr))
