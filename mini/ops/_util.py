"""Helpers shared by the operations: undoing broadcasting, casting gradients, summing tangents."""
from __future__ import annotations

from mini.autograd.tensor import Tensor
from mini.exercises import exercise


def nd(x):
    """The NDArray of a tensor, or the number itself."""
    return x._data if isinstance(x, Tensor) else x


@exercise("02.unbroadcast")
def sum_to(grad: Tensor, shape) -> Tensor:
    """Sum ``grad`` down to ``shape``, undoing a broadcast from ``shape`` to ``grad.shape``.

    Broadcasting copied the input along new leading axes and along axes of length 1 (to
    any length, 0 included), so each input element received the gradient of every copy:
    sum over those axes.
    ``sum_to(ones(3, 2), (2,))`` is ``[3., 3.]``; ``sum_to(g, g.shape)`` is ``g``.
    """
    ### BEGIN SOLUTION
    shape = tuple(shape)
    if tuple(grad.shape) == shape:
        return grad
    lead = grad.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, d in enumerate(shape) if d == 1 and grad.shape[lead + i] != 1)
    out = grad.sum(axis=axes, keepdim=True) if axes else grad
    return out.reshape(shape)
    ### END SOLUTION


def cast_like(grad, dtype):
    """Gradients have the dtype of their input (float32 input, float64 output: cast back)."""
    if grad is None or grad.dtype == dtype:
        return grad
    return grad.to(dtype=dtype)


def tangent_sum(shape, *terms):
    """Sum the non-None tangent terms, broadcast to ``shape`` (None if all are None)."""
    out = None
    for t in terms:
        if t is None:
            continue
        out = t if out is None else out + t
    if out is None:
        return None
    if tuple(out.shape) != tuple(shape):
        out = out.expand(shape).contiguous()
    return out
