"""Napkin math: the course's cost models as plain functions, and measurements that check them.

Chapter 03 (strides) contributes the memory model of a chain of view / reshape / copy
operations: a step that can be expressed by new shape, strides and offset costs 0 bytes;
a step that has to gather elements into a fresh buffer costs ``numel * itemsize`` bytes.

    >>> chain_bytes((1000, 1000), [("T",), ("getitem", (slice(None, None, 2),)),
    ...                            ("reshape", (-1,)), ("contiguous",)], itemsize=4)
    2000000

Whether a step is a view is decided by numpy's own metadata arithmetic on a "ghost"
array (strides over a one-byte placeholder, never read), so the model is independent
of mini and of any student's implementation.  Widgets live in :mod:`mini.napkin.widgets`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["StepCost", "chain_costs", "chain_bytes", "describe_step", "nbytes",
           "DEFAULT_CHAIN", "STEP_KINDS"]

#: The operations a chain may contain, with what each argument means.
STEP_KINDS = {
    "T": "reverse the axes (x.T): always a view",
    "permute": "reorder the axes (x.permute(*axes)): always a view",
    "getitem": "basic indexing x[key] with ints, slices, None, ...: always a view",
    "expand": "broadcast to a larger shape (x.expand(*shape)): a view with stride 0",
    "reshape": "x.reshape(*shape): a view when the strides allow it, otherwise a copy",
    "contiguous": "x.contiguous(): the same array if already row-major, otherwise a copy",
}

#: The chain used by the chapter 03 widget: 1000x1000 float32, transposed, every other
#: row, flattened, made contiguous.
DEFAULT_CHAIN = (
    ("T",),
    ("getitem", (slice(None, None, 2),)),
    ("reshape", (-1,)),
    ("contiguous",),
)


@dataclass(frozen=True)
class StepCost:
    """One step of a chain as the model sees it."""
    label: str            # e.g. "x.T", "[::2]", ".reshape(-1)"
    shape: tuple          # shape after the step
    strides: tuple        # strides after the step, in elements
    is_view: bool         # True: metadata only; False: a new buffer
    bytes: int            # bytes allocated by this step (0 for a view)


def nbytes(shape: Sequence[int], itemsize: int = 4) -> int:
    """Bytes of a compact array: numel * itemsize.  ``nbytes((1024, 1024)) == 4_194_304``."""
    n = 1
    for d in shape:
        n *= int(d)
    return n * int(itemsize)


def _fmt_key_item(k) -> str:
    if k is None:
        return "None"
    if k is Ellipsis:
        return "..."
    if isinstance(k, slice):
        parts = ["" if k.start is None else str(k.start), "" if k.stop is None else str(k.stop)]
        text = ":".join(parts)
        if k.step is not None:
            text += f":{k.step}"
        return text
    return str(k)


def describe_step(step) -> str:
    """Python-like text for a step: ``.T``, ``[::2]``, ``.reshape(-1)``, ``.contiguous()``."""
    kind = step[0]
    if kind == "T":
        return ".T"
    if kind == "contiguous":
        return ".contiguous()"
    if kind == "getitem":
        key = step[1] if isinstance(step[1], tuple) else (step[1],)
        return "[" + ", ".join(_fmt_key_item(k) for k in key) + "]"
    if kind in ("reshape", "permute", "expand"):
        return f".{kind}(" + ", ".join(str(int(a)) for a in step[1]) + ")"
    raise ValueError(f"unknown step {step!r}; steps are one of {sorted(STEP_KINDS)}")


def _ghost(shape, strides_elems=None) -> np.ndarray:
    """An array with the given layout over a one-byte placeholder.  Only its metadata is
    ever used (numpy computes views and reshape decisions without reading memory)."""
    shape = tuple(int(d) for d in shape)
    if strides_elems is None:
        strides_elems, step = [0] * len(shape), 1
        for i in range(len(shape) - 1, -1, -1):
            strides_elems[i] = step
            step *= max(shape[i], 1)
    return np.lib.stride_tricks.as_strided(np.zeros(1, np.uint8), shape, tuple(strides_elems),
                                           writeable=False)


def chain_costs(shape: Sequence[int], steps: Sequence[tuple] = DEFAULT_CHAIN,
                itemsize: int = 4) -> list[StepCost]:
    """The model, step by step: what each operation of the chain allocates.

    ``shape`` is the starting (compact) array; ``steps`` are tuples such as ``("T",)``,
    ``("getitem", key)``, ``("reshape", shape)``, ``("permute", axes)``,
    ``("expand", shape)``, ``("contiguous",)``.  A view costs 0 bytes; a copy costs
    ``numel * itemsize`` of its result.
    """
    g = _ghost(shape)
    out = []
    for step in steps:
        kind = step[0]
        label = describe_step(step)
        is_view = True
        if kind == "T":
            g = g.T
        elif kind == "permute":
            g = g.transpose(tuple(int(a) for a in step[1]))
        elif kind == "getitem":
            key = step[1] if isinstance(step[1], tuple) else (step[1],)
            if not any(k is Ellipsis for k in key):
                key = key + (Ellipsis,)  # keeps a 0-d result an array view (no read)
            g = g[key]
        elif kind == "expand":
            g = np.broadcast_to(g, tuple(int(d) for d in step[1]))
        elif kind == "reshape":
            target = tuple(int(d) for d in step[1])
            try:
                g = g.reshape(target, copy=False)
            except ValueError:
                is_view = False
                g = _ghost(_resolve(target, g.size))
        elif kind == "contiguous":
            if not g.flags.c_contiguous:
                is_view = False
                g = _ghost(g.shape)
        else:
            raise ValueError(f"unknown step {step!r}; steps are one of {sorted(STEP_KINDS)}")
        cost = 0 if is_view else nbytes(g.shape, itemsize)
        out.append(StepCost(label, tuple(g.shape), tuple(int(s) for s in g.strides), is_view, cost))
    return out


def _resolve(target: tuple, size: int) -> tuple:
    if -1 in target:
        known = 1
        for d in target:
            if d != -1:
                known *= d
        target = tuple(size // known if d == -1 else d for d in target)
    return target


def chain_bytes(shape: Sequence[int], steps: Sequence[tuple] = DEFAULT_CHAIN,
                itemsize: int = 4) -> int:
    """Total bytes the chain allocates (the views are free; each copy costs its nbytes)."""
    return sum(s.bytes for s in chain_costs(shape, steps, itemsize))
