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


# The fast path: mini's own dropout (no student implementation registered) as one Function
# (mask and scale applied on the numpy buffers) instead of five dispatched ops.  It draws
# the mask with the same ``mini.rand`` call, so results and the random stream are
# bit-identical to the slot's.

from mini.autograd import forward_ad as _fw
from mini.autograd.function import Function as _Function
from mini.ndarray import NDArray as _NDArray
from mini.utils import profiler as _profiler

FUSED_DROPOUT = True


class FusedDropoutFunction(_Function):
    @staticmethod
    def forward(ctx, x, keep, scale):
        a = x._data.to_numpy_view()
        out = a * keep
        out *= a.dtype.type(scale)
        ctx.saved = (keep, scale)
        return Tensor._wrap(_NDArray.from_numpy(out, x._data.storage.device))

    @staticmethod
    def backward(ctx, g):
        keep, scale = ctx.saved
        gn = g._data.to_numpy_view()
        if g.requires_grad:  # create_graph: stay differentiable
            return g * mini.tensor(keep * keep.dtype.type(scale), device=g.device), None, None
        out = gn * gn.dtype.type(scale)
        out *= keep
        return Tensor._wrap(_NDArray.from_numpy(out, g._data.storage.device)), None, None


def _fused_dropout(x, p=0.5, training=True):
    if not FUSED_DROPOUT or _profiler._ACTIVE or _fw._LEVEL[0] or not isinstance(x, Tensor):
        return NotImplemented
    if not (0.0 < p < 1.0) or not training or x._data.storage.data.dtype.kind != "f":
        return NotImplemented
    r = mini.rand(*x.shape, dtype=x.dtype)
    keep = (r._data.to_numpy_view() >= p).astype(x._data.storage.data.dtype)
    return FusedDropoutFunction.apply(x, keep, 1.0 / (1.0 - p))


dropout.set_fast_path(_fused_dropout)
