"""Making tensors: from data, filled with a value, ranges, and random draws.

Each is ``observed``: a tool installed as the op observer (a graph tracer) sees where
tensors come from, random draws included."""
from __future__ import annotations

import math

import numpy as np

from mini.autograd.function import observed
from mini.autograd.tensor import Tensor
from mini.ndarray import NDArray, as_dtype, get_default_dtype
from mini.ndarray.dtypes import int64
from mini.backends import get_backend
from mini import random as _random


@observed
def tensor(data, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A new tensor holding a copy of ``data`` (nested lists, numbers, numpy arrays, tensors)."""
    return Tensor(data, dtype=dtype, device=device, requires_grad=requires_grad)


@observed
def as_tensor(data, dtype=None, device=None) -> Tensor:
    if isinstance(data, Tensor) and dtype is None and device is None:
        return data
    return Tensor(data, dtype=dtype, device=device)


@observed
def from_numpy(array: np.ndarray) -> Tensor:
    return Tensor(np.asarray(array), dtype=as_dtype(np.asarray(array).dtype))


def _shape(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    size = tuple(int(s) for s in size)
    if any(s < 0 for s in size):
        raise ValueError(f"negative dimension in size {size}")
    return size


def _make(shape, dtype, device, requires_grad, fill=None) -> Tensor:
    d = as_dtype(dtype) if dtype is not None else get_default_dtype()
    nd = NDArray.empty(shape, d, device)
    if fill is not None:
        nd.to_numpy_view()[...] = fill
    return Tensor(nd, requires_grad=requires_grad) if requires_grad else Tensor._wrap(nd)


@observed
def empty(*size, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _make(_shape(size), dtype, device, requires_grad)


@observed
def zeros(*size, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _make(_shape(size), dtype, device, requires_grad, 0)


@observed
def ones(*size, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _make(_shape(size), dtype, device, requires_grad, 1)


@observed
def full(size, fill_value, dtype=None, device=None, requires_grad=False) -> Tensor:
    if dtype is None and isinstance(fill_value, bool):
        dtype = "bool"
    elif dtype is None and isinstance(fill_value, int):
        dtype = int64
    return _make(_shape((size,)), dtype, device, requires_grad, fill_value)


def _like(t, dtype, device):
    return (dtype if dtype is not None else t.dtype), (device if device is not None else t.device)


@observed
def zeros_like(t, dtype=None, device=None, requires_grad=False) -> Tensor:
    d, dev = _like(t, dtype, device)
    return _make(tuple(t.shape), d, dev, requires_grad, 0)


@observed
def ones_like(t, dtype=None, device=None, requires_grad=False) -> Tensor:
    d, dev = _like(t, dtype, device)
    return _make(tuple(t.shape), d, dev, requires_grad, 1)


@observed
def empty_like(t, dtype=None, device=None, requires_grad=False) -> Tensor:
    d, dev = _like(t, dtype, device)
    return _make(tuple(t.shape), d, dev, requires_grad)


@observed
def full_like(t, fill_value, dtype=None, device=None, requires_grad=False) -> Tensor:
    d, dev = _like(t, dtype, device)
    return _make(tuple(t.shape), d, dev, requires_grad, fill_value)


@observed
def arange(start, end=None, step=1, dtype=None, device=None, requires_grad=False) -> Tensor:
    if end is None:
        start, end = 0, start
    if step == 0:
        raise ValueError("arange: step must be nonzero")
    if dtype is None:
        is_int = all(isinstance(v, (int, np.integer)) for v in (start, end, step))
        dtype = int64 if is_int else get_default_dtype()
    values = np.arange(start, end, step)
    return Tensor(NDArray.from_numpy(values, device, dtype), requires_grad=requires_grad)


@observed
def linspace(start, end, steps, dtype=None, device=None, requires_grad=False) -> Tensor:
    values = np.linspace(start, end, int(steps))
    return Tensor(NDArray.from_numpy(values, device, dtype or get_default_dtype()),
                  requires_grad=requires_grad)


@observed
def eye(n, m=None, dtype=None, device=None, requires_grad=False) -> Tensor:
    return Tensor(NDArray.from_numpy(np.eye(n, m), device, dtype or get_default_dtype()),
                  requires_grad=requires_grad)


def _random_tensor(values, dtype, device, requires_grad) -> Tensor:
    return Tensor(NDArray.from_numpy(values, device, dtype or get_default_dtype()),
                  requires_grad=requires_grad)


@observed
def rand(*size, dtype=None, device=None, requires_grad=False) -> Tensor:
    """Uniform on [0, 1)."""
    return _random_tensor(_random.generator().random(_shape(size)), dtype, device, requires_grad)


@observed
def randn(*size, dtype=None, device=None, requires_grad=False) -> Tensor:
    """Standard normal."""
    return _random_tensor(_random.generator().standard_normal(_shape(size)), dtype, device,
                          requires_grad)


@observed
def randint(low, high=None, size=(), dtype=None, device=None) -> Tensor:
    if high is None:
        low, high = 0, low
    values = _random.generator().integers(low, high, size=_shape((size,)))
    return Tensor(NDArray.from_numpy(values, device, dtype or int64))


@observed
def randperm(n, dtype=None, device=None) -> Tensor:
    return Tensor(NDArray.from_numpy(_random.generator().permutation(int(n)), device, dtype or int64))


def numel(t) -> int:
    return math.prod(t.shape)

