"""The dtypes mini knows: float32 (the default), float64, int64 (labels, indices), bool (masks)."""
from __future__ import annotations

import numpy as np


class dtype:
    """A mini dtype; compares equal to itself, its name and its numpy dtype."""
    __slots__ = ("name", "np", "itemsize", "is_floating_point")

    def __init__(self, name: str):
        self.name = name
        self.np = np.dtype(name)
        self.itemsize = self.np.itemsize
        self.is_floating_point = self.np.kind == "f"

    def __repr__(self):
        return f"mini.{self.name}"

    def __eq__(self, other):
        if isinstance(other, dtype):
            return self.name == other.name
        try:
            return np.dtype(other) == self.np
        except TypeError:
            return False

    def __hash__(self):
        return hash(self.name)

    def __reduce__(self):
        return (as_dtype, (self.name,))


float32 = dtype("float32")
float64 = dtype("float64")
int64 = dtype("int64")
bool_ = dtype("bool")

_BY_NAME = {"float32": float32, "float64": float64, "int64": int64, "bool": bool_}
_DEFAULT_FLOAT = [float32]


_BY_NUMPY = {np.dtype(name): d for name, d in _BY_NAME.items()}


def as_dtype(d) -> dtype:
    """Accept a mini dtype, a numpy dtype, a Python type or a name; return the mini dtype."""
    if isinstance(d, dtype):
        return d
    if isinstance(d, np.dtype) and d in _BY_NUMPY:
        return _BY_NUMPY[d]
    if d is float:
        return _DEFAULT_FLOAT[0]
    if d is int:
        return int64
    if d is bool:
        return bool_
    name = np.dtype(d).name
    if name in _BY_NAME:
        return _BY_NAME[name]
    # Narrower ints/floats from numpy map onto the closest mini dtype.
    kind = np.dtype(d).kind
    if kind in "iu":
        return int64
    if kind == "f":
        return float64 if np.dtype(d).itemsize > 4 else float32
    raise TypeError(f"mini supports float32, float64, int64 and bool; got dtype {d!r}")


def get_default_dtype() -> dtype:
    return _DEFAULT_FLOAT[0]


def set_default_dtype(d) -> None:
    d = as_dtype(d)
    if not d.is_floating_point:
        raise TypeError(f"the default dtype must be a floating-point dtype, got {d}")
    _DEFAULT_FLOAT[0] = d


def result_dtype(a: dtype, b: dtype) -> dtype:
    """Type promotion of two tensors' dtypes, as PyTorch does it: a floating dtype wins over
    an integer or bool one (float32 + int64 is float32), else the wider of the two."""
    if a is b:
        return a
    if a.is_floating_point != b.is_floating_point:
        return a if a.is_floating_point else b
    return as_dtype(np.promote_types(a.np, b.np))
