"""SGD with momentum, dampening, Nesterov momentum and L2 weight decay: PyTorch's rule."""
from __future__ import annotations

from mini.autograd import grad_mode
from mini.optim.optimizer import Optimizer


class SGD(Optimizer):
    r"""Stochastic gradient descent, step for step the same as ``torch.optim.SGD``.

    For each parameter ``p`` with gradient ``g``::

        g = g + weight_decay * p                     (if weight_decay != 0)
        b = g                                        (first step: the buffer starts at g)
        b = momentum * b + (1 - dampening) * g       (later steps)
        g = g + momentum * b   if nesterov  else  b  (if momentum != 0)
        p = p - lr * g

    The update runs under ``no_grad`` and writes into ``p`` in place (so the version
    counter of ``p`` moves).  ``optimizer.state[p]["momentum_buffer"]`` holds ``b``.
    """

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0, dampening: float = 0,
                 weight_decay: float = 0, nesterov: bool = False, *, maximize: bool = False,
                 foreach=None, differentiable: bool = False, fused=None):
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        if differentiable or fused:
            raise NotImplementedError("mini's SGD has no differentiable or fused variant")
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening,
                        weight_decay=weight_decay, nesterov=nesterov, maximize=maximize,
                        foreach=foreach, differentiable=differentiable, fused=fused)
        super().__init__(params, defaults)

    def step(self, closure=None):
        """Update every parameter that has a gradient; ``closure`` (optional) recomputes
        and returns the loss, which ``step`` returns."""
        loss = None
        if closure is not None:
            with grad_mode.enable_grad():
                loss = closure()
        with grad_mode.no_grad():
            for group in self.param_groups:
                lr, momentum = group["lr"], group["momentum"]
                dampening, weight_decay = group["dampening"], group["weight_decay"]
                nesterov, maximize = group["nesterov"], group["maximize"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    sgd_update(p, p.grad, self.state[p] if momentum != 0 else None, lr=lr,
                               momentum=momentum, dampening=dampening,
                               weight_decay=weight_decay, nesterov=nesterov,
                               maximize=maximize)
        return loss


def sgd_update(p, grad, state, *, lr, momentum, dampening, weight_decay, nesterov, maximize):
    """One SGD step for one parameter, in place (call under ``no_grad``)."""
    g = -grad if maximize else grad
    if weight_decay != 0:
        g = g + weight_decay * p
    if momentum != 0:
        buf = state.get("momentum_buffer")
        if buf is None:
            buf = g.detach().clone()
            state["momentum_buffer"] = buf
        else:
            buf.mul_(momentum).add_(g, alpha=1 - dampening)
        g = g + momentum * buf if nesterov else buf
    p.add_(g, alpha=-lr)
