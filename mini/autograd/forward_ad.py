"""Forward-mode AD with dual numbers: ``mini.autograd.forward_ad``.

A dual tensor carries a primal value and a tangent (a direction).  Every
operation computes its output's tangent from its inputs' tangents with its
Jacobian-vector product (``Function.jvp``), in the same pass as the value::

    with forward_ad.dual_level():
        x = forward_ad.make_dual(primal, tangent)
        y = f(x)
        value, dydx_times_tangent = forward_ad.unpack_dual(y)

One forward pass gives one directional derivative; a gradient of n inputs needs
n passes, which is why training uses reverse mode.
"""
from __future__ import annotations

from collections import namedtuple
from contextlib import contextmanager

_LEVEL = [0]

UnpackedDualTensor = namedtuple("UnpackedDualTensor", ["primal", "tangent"])


@contextmanager
def dual_level():
    """Tangents exist only inside this block; on exit every dual tensor made in it loses its tangent."""
    _LEVEL[0] += 1
    made: list = []
    _MADE.append(made)
    try:
        yield _LEVEL[0]
    finally:
        for t in made:
            t._fw_tangent = None
        _MADE.pop()
        _LEVEL[0] -= 1


_MADE: list = []


def _track(t):
    if _MADE:
        _MADE[-1].append(t)


def make_dual(tensor, tangent):
    """A new tensor that shares ``tensor``'s data and carries ``tangent``."""
    if not _LEVEL[0]:
        raise RuntimeError("make_dual must be called inside `with forward_ad.dual_level():`")
    if tuple(tangent.shape) != tuple(tensor.shape):
        raise ValueError(f"make_dual: tangent has shape {tuple(tangent.shape)} but the primal "
                         f"has shape {tuple(tensor.shape)}")
    if not tensor.dtype.is_floating_point:
        raise TypeError(f"make_dual: forward-mode AD needs a floating-point tensor, got {tensor.dtype}")
    dual = tensor._alias()
    dual._fw_tangent = tangent.detach()
    _track(dual)
    return dual


def unpack_dual(tensor) -> UnpackedDualTensor:
    """``(primal, tangent)``; the tangent is None for a tensor with no tangent."""
    return UnpackedDualTensor(tensor._alias_no_tangent(), tensor._fw_tangent)


def propagate(function_cls, ctx, args, out) -> None:
    """Set ``out``'s tangent from the inputs' tangents with ``function_cls.jvp``."""
    from mini.autograd import grad_mode
    from mini.autograd.tensor import Tensor
    jvp = getattr(function_cls, "jvp", None)
    if jvp is None:
        raise NotImplementedError(
            f"forward-mode AD is not implemented for {function_cls.__name__}: give it a "
            f"`jvp(ctx, *tangents)` static method")
    tangents = tuple(a._fw_tangent if isinstance(a, Tensor) else None for a in args)
    # The rule itself runs on plain values: no graph, and no tangents of tangents.
    level, _LEVEL[0] = _LEVEL[0], 0
    try:
        with grad_mode.no_grad():
            t = jvp(ctx, *tangents)
    finally:
        _LEVEL[0] = level
    if t is not None:
        if tuple(t.shape) != tuple(out.shape):
            raise RuntimeError(f"{function_cls.__name__}.jvp returned a tangent of shape "
                               f"{tuple(t.shape)} for an output of shape {tuple(out.shape)}")
        out._fw_tangent = t
        _track(out)
