"""Small programs the JIT's tests, benchmark and grader share (the chapter's notebook writes
its own copies, for the student to read).

- :func:`gelu8`: GELU's tanh approximation as 8 elementwise mini ops, one fusible chain;
- :func:`chain100`: a 100-op graph of mul, add, relu and sub (exactly rounded: a fused or
  replayed run gives the same bits as eager).
"""
from __future__ import annotations

__all__ = ["gelu8", "chain100"]


def gelu8(x):
    """x · (0.5 + 0.5 · tanh(x · (c + d · x²))) with c = sqrt(2/π), d = 0.044715 · c."""
    u = x * x
    u = u * 0.035677408136300125
    u = u + 0.7978845608028654
    u = u * x
    t = u.tanh()
    t = t * 0.5
    t = t + 0.5
    return t * x


def chain100(x, y):
    """25 rounds of ``(z * 1.001 + y).relu() - x``: 100 ops."""
    z = x
    for _ in range(25):
        z = (z * 1.001 + y).relu() - x
    return z
