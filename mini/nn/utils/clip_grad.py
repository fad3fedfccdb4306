"""Gradient clipping, as in ``torch.nn.utils``."""
from __future__ import annotations

import math

import numpy as np

from mini.autograd import grad_mode
from mini.autograd.tensor import Tensor
from mini.ops import creation as _C

__all__ = ["clip_grad_norm_", "clip_grad_value_"]


def _grads(parameters):
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    return [p.grad for p in parameters if p.grad is not None]


def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False, foreach=None) -> Tensor:
    """Scale all gradients together so that their joint ``norm_type``-norm is at most
    ``max_norm``; returns the norm before clipping (a 0-d tensor).  The scale is
    ``max_norm / (norm + 1e-6)``, applied only when it is below 1."""
    grads = _grads(parameters)
    if not grads:
        return _C.tensor(0.0)
    norm_type = float(norm_type)
    arrays = [g.detach().numpy().astype(np.float64) for g in grads]
    if math.isinf(norm_type):
        total = max(float(np.abs(a).max()) if a.size else 0.0 for a in arrays)
    else:
        total = float(sum(float((np.abs(a) ** norm_type).sum()) for a in arrays)) ** (1.0 / norm_type)
    if error_if_nonfinite and not math.isfinite(total):
        raise RuntimeError(f"The total norm of order {norm_type} for gradients from "
                           f"`parameters` is non-finite, so it cannot be clipped. To disable "
                           f"this error and scale the gradients by the non-finite norm anyway, "
                           f"set `error_if_nonfinite=False`")
    coef = float(max_norm) / (total + 1e-6)
    if coef < 1.0:
        with grad_mode.no_grad():
            for g in grads:
                g.mul_(coef)
    return _C.tensor(total, dtype=grads[0].dtype)


def clip_grad_value_(parameters, clip_value: float, foreach=None) -> None:
    """Clamp every gradient element into ``[-clip_value, clip_value]``."""
    with grad_mode.no_grad():
        for g in _grads(parameters):
            g.clamp_(-float(clip_value), float(clip_value))
