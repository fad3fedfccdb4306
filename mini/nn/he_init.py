"""He (Kaiming) initialisation written out: exercise ``05.kaiming_init``.

A ReLU layer zeroes half of its inputs, which halves the second moment of what flows on.
Drawing weights with variance ``2 / fan_in`` (``fan_in`` = inputs feeding one output unit:
``in_features`` for Linear, ``in_channels · kh · kw`` for Conv2d) doubles it back, so the
scale of activations stays put however deep the network is.

``mini.nn.init.kaiming_normal_`` (PyTorch's signature: ``a``, ``mode``, ``nonlinearity``)
calls this slot and rescales its draws by ``gain / sqrt(2)`` for a nonlinearity other than
ReLU (PyTorch's default ``a=0, nonlinearity='leaky_relu'`` has gain sqrt(2): no rescaling).
Before chapter 05 is released, ``mini.nn.init``'s own formula stands in.
"""
from __future__ import annotations

import mini
from mini.exercises import exercise

__all__ = ["kaiming_normal_"]


def _init_formula(tensor, mode="fan_in"):
    # the stand-in while chapter 05 is unreleased: mini.nn.init's fan and normal_
    import math

    from mini.nn import init
    return init.normal_(tensor, 0.0, math.sqrt(2.0 / init._calculate_correct_fan(tensor, mode)))


@exercise("05.kaiming_init", fallback=_init_formula)
def kaiming_normal_(tensor, mode="fan_in"):
    """Fill ``tensor`` (a weight of shape [out, in, *kernel], at least 2-D) in place with
    draws from N(0, 2 / fan) and return it.  ``fan_in = shape[1] · prod(shape[2:])``,
    ``fan_out = shape[0] · prod(shape[2:])``; ``mode`` picks one.  Draw with
    ``mini.randn`` and write without recording a graph (``mini.no_grad()``).
    Fewer than 2 dimensions or an unknown mode raise ValueError."""
    ### BEGIN SOLUTION
    if tensor.ndim < 2:
        raise ValueError(f"kaiming init needs a weight with at least 2 dimensions, got shape "
                         f"{tuple(tensor.shape)}")
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"mode must be 'fan_in' or 'fan_out', got {mode!r}")
    receptive = 1
    for s in tensor.shape[2:]:
        receptive *= s
    fan = (tensor.shape[1] if mode == "fan_in" else tensor.shape[0]) * receptive
    std = (2.0 / fan) ** 0.5
    with mini.no_grad():
        tensor.copy_(mini.randn(*tensor.shape, dtype=tensor.dtype) * std)
    return tensor
    ### END SOLUTION
