"""Dropout, the inverted kind (what PyTorch and every modern framework do).

In training each element is zeroed with probability ``p`` and the survivors are multiplied
by ``1 / (1 - p)``, so the expected value of every element is unchanged.  At eval dropout is
the identity: no mask, no scaling.  (Scaling by ``1 / (1 - p)`` *at inference*, as one
sometimes reads, would be wrong twice: inverted dropout already scaled in training.)
"""
from __future__ import annotations

import mini
from mini.autograd.tensor import Tensor
from mini.exercises import exercise
from mini.nn.module import Module

__all__ = ["dropout", "Dropout"]


@exercise("05.dropout")
def dropout(x, p=0.5, training=True):
    """Inverted dropout of the tensor ``x``.

    ``training=False`` or ``p == 0``: return ``x`` unchanged.  ``p == 1``: all zeros.
    Otherwise keep each element with probability ``1 - p`` (draw the mask with
    ``mini.rand``, so ``mini.manual_seed`` makes it reproducible) and scale the kept ones by
    ``1 / (1 - p)``.  Differentiable in ``x``.  ``p`` outside [0, 1] raises ValueError.
    """
    ### BEGIN SOLUTION
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    keep = (mini.rand(*x.shape, dtype=x.dtype, device=x.device) >= p).to(dtype=x.dtype)
    return x * keep * (1.0 / (1.0 - p))
    ### END SOLUTION


class Dropout(Module):
    """Inverted dropout with probability ``p``; the identity in eval mode (``F.dropout``:
    the ``05.dropout`` slot)."""

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        if self.inplace:
            from mini.nn import functional as F
            return F.dropout(input, self.p, self.training, inplace=True)
        return dropout(input, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"
