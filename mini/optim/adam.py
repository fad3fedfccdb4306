"""Adam and AdamW, step for step the same as ``torch.optim.Adam``/``AdamW``.

Both keep two running averages per parameter: ``exp_avg`` (m, of the gradient) and
``exp_avg_sq`` (v, of its square).  Both start at zero, so early on they are biased towards
zero; dividing by ``1 - beta^t`` removes that bias.  The update is ``lr · m̂ / (sqrt(v̂) + eps)``.

Weight decay is where they differ:

- ``Adam(weight_decay=wd)`` is L2 regularisation: ``wd · p`` is added to the gradient, so it
  goes through m and v and is divided by ``sqrt(v̂)``.  Parameters with large gradients are
  barely decayed, parameters with small ones a lot.
- ``AdamW(weight_decay=wd)`` decouples it: ``p <- p · (1 - lr · wd)`` before the Adam update,
  the same relative shrink for every parameter whatever its gradient history.

Per parameter the state is two tensors of the parameter's size, so training with Adam in
float32 holds 16 bytes per parameter (weight, gradient, m, v) before activations.
"""
from __future__ import annotations

from mini.autograd import grad_mode
from mini.exercises import exercise
from mini.ops import creation as _C
from mini.optim.optimizer import Optimizer

__all__ = ["adamw_step", "Adam", "AdamW"]


@exercise("05.adamw_step")
def adamw_step(param, grad, exp_avg, exp_avg_sq, step, lr, beta1, beta2, eps, weight_decay):
    """One AdamW update of one parameter, in place (called under ``no_grad``).

    ``param``, ``grad``, ``exp_avg``, ``exp_avg_sq`` are tensors of one shape; ``step`` is
    the number of this update (1 for the first).  Update the two moment estimates
    ``exp_avg`` and ``exp_avg_sq`` in place, apply weight decay the *decoupled* way (to the
    parameter, not through the gradient), then take Adam's bias-corrected step, with ``eps``
    added to the denominator after the square root.  ``param`` changes in place; ``grad``
    does not.  Returns None.  (The chapter's text builds the update; its hint has it whole.)
    """
    ### BEGIN SOLUTION
    exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
    exp_avg_sq.mul_(beta2).add_(grad * grad, alpha=1 - beta2)
    if weight_decay != 0:
        param.mul_(1 - lr * weight_decay)
    bias_correction1 = 1 - beta1 ** step
    bias_correction2 = 1 - beta2 ** step
    denom = exp_avg_sq.sqrt() / (bias_correction2 ** 0.5) + eps
    param.sub_(exp_avg / denom, alpha=lr / bias_correction1)
    ### END SOLUTION


class Adam(Optimizer):
    """Adam; ``weight_decay`` is L2 (added to the gradient), as in ``torch.optim.Adam``."""

    _decoupled = False

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False, *, maximize: bool = False,
                 foreach=None, capturable: bool = False, differentiable: bool = False,
                 fused=None):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if amsgrad or capturable or differentiable or fused:
            raise NotImplementedError("mini's Adam has no amsgrad, capturable, differentiable "
                                      "or fused variant")
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        amsgrad=amsgrad, maximize=maximize, foreach=foreach,
                        capturable=capturable, differentiable=differentiable, fused=fused)
        super().__init__(params, defaults)

    def step(self, closure=None):
        loss = None
        if closure is not None:
            with grad_mode.enable_grad():
                loss = closure()
        with grad_mode.no_grad():
            for group in self.param_groups:
                beta1, beta2 = group["betas"]
                lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    g = -p.grad if group["maximize"] else p.grad
                    state = self.state[p]
                    if not state:
                        state["step"] = 0
                        state["exp_avg"] = _C.zeros_like(p)
                        state["exp_avg_sq"] = _C.zeros_like(p)
                    state["step"] += 1
                    decay = wd
                    if not self._decoupled:
                        if wd != 0:
                            g = g + p * wd            # L2: the decay rides on the gradient
                        decay = 0.0
                    adamw_step(p, g, state["exp_avg"], state["exp_avg_sq"], state["step"],
                               lr, beta1, beta2, eps, decay)
        return loss


class AdamW(Adam):
    """Adam with decoupled weight decay (default 0.01), as in ``torch.optim.AdamW``."""

    _decoupled = True

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, **kwargs):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, **kwargs)
