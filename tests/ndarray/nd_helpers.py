"""Hypothesis strategies and numpy oracles shared by the tests of mini.ndarray.

numpy is the oracle: a numpy view's metadata (``strides // itemsize`` and the distance of
its data pointer from the base's) is exactly what mini's pure stride functions must compute.
"""
from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from mini.ndarray import NDArray

MAX_SIDE = 5


def dims(allow_zero: bool = True):
    """One axis length: mostly 1..MAX_SIDE, sometimes 0."""
    if allow_zero:
        return st.one_of(st.integers(1, MAX_SIDE), st.just(0), st.just(1))
    return st.integers(1, MAX_SIDE)


def shapes(min_rank: int = 0, max_rank: int = 4, allow_zero: bool = True):
    return st.lists(dims(allow_zero), min_size=min_rank, max_size=max_rank).map(tuple)


@st.composite
def slices(draw, dim: int):
    """A slice for an axis of length ``dim``: bounds may be negative or beyond the axis,
    steps may be negative; any part may be None."""
    bound = st.one_of(st.none(), st.integers(-2 * dim - 2, 2 * dim + 2))
    step = st.one_of(st.none(), st.integers(-3, 3).filter(lambda s: s != 0))
    return slice(draw(bound), draw(bound), draw(step))


@st.composite
def basic_indices(draw, shape, allow_ellipsis: bool = True, allow_none: bool = True):
    """A valid basic index for ``shape``: ints (negative too), slices, None, one Ellipsis;
    may name fewer axes than the array has.  Returns a tuple or, sometimes, a bare item."""
    n_named = draw(st.integers(0, len(shape)))
    use_ellipsis = allow_ellipsis and draw(st.booleans())
    if use_ellipsis:
        # the ellipsis stands for a run of axes somewhere in the middle
        ell_at = draw(st.integers(0, n_named))
        skipped = len(shape) - n_named
        named_axes = list(range(ell_at)) + list(range(ell_at + skipped, len(shape)))
    else:
        named_axes = list(range(n_named))
    items = []
    for ax in named_axes:
        d = shape[ax]
        if d > 0 and draw(st.booleans()):
            i = draw(st.integers(-d, d - 1))
            items.append(draw(st.sampled_from([int, np.int64]))(i))
        else:
            items.append(draw(slices(d)))
    if use_ellipsis:
        items.insert(ell_at, Ellipsis)
    if allow_none:
        for _ in range(draw(st.integers(0, 2))):
            items.insert(draw(st.integers(0, len(items))), None)
    if len(items) == 1 and draw(st.booleans()):
        return items[0]
    return tuple(items)


@st.composite
def permutations(draw, ndim: int, allow_negative: bool = True):
    perm = draw(st.permutations(list(range(ndim))))
    if allow_negative:
        perm = [p - ndim if draw(st.booleans()) else p for p in perm]
    return tuple(perm)


@st.composite
def broadcast_targets(draw, shape):
    """A shape that ``shape`` broadcasts to: new leading axes, and 1s that grow."""
    lead = draw(st.lists(dims(), min_size=0, max_size=2))
    out = [draw(st.sampled_from([0, 1, 2, 3])) if d == 1 else d for d in shape]
    return tuple(lead) + tuple(out)


def _prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while n > 1:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out


@st.composite
def reshape_targets(draw, size: int, allow_minus_one: bool = True):
    """A shape with ``size`` elements (length-1 axes sprinkled in), maybe with one -1."""
    if size == 0:
        others = draw(st.lists(st.integers(0, 4), min_size=0, max_size=3))
        target = others + [0]
        target = list(draw(st.permutations(target)))
        return tuple(target)  # -1 is ambiguous with a 0 in the shape
    factors = _prime_factors(size)
    n_axes = draw(st.integers(1 if factors else 0, max(len(factors), 1) + 1))
    target = [1] * n_axes
    for f in factors:
        target[draw(st.integers(0, n_axes - 1))] *= f
    for _ in range(draw(st.integers(0, 2))):
        target.insert(draw(st.integers(0, len(target))), 1)
    if allow_minus_one and target and draw(st.booleans()):
        target[draw(st.integers(0, len(target) - 1))] = -1
    return tuple(target)


def base_pair(shape, dtype=np.float64):
    """A numpy array with distinct values and the NDArray holding the same data."""
    a = np.arange(math.prod(shape), dtype=dtype).reshape(shape)
    return a, NDArray.from_numpy(a)


def np_offset(view: np.ndarray, base: np.ndarray) -> int:
    """Elements between the base's first element and the view's first element."""
    delta = view.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    assert delta % base.itemsize == 0
    return delta // base.itemsize


def np_strides(a: np.ndarray) -> tuple:
    return tuple(s // a.itemsize for s in a.strides)


def assert_same_values(nd: NDArray, expected: np.ndarray):
    """Values, shape and dtype, read through two independent paths of mini:
    the numpy view over the buffer, and the ``compact`` exercise kernel."""
    got = nd.numpy()
    assert got.shape == expected.shape, (got.shape, expected.shape)
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    np.testing.assert_array_equal(got, expected)
    from mini.ndarray.strides import compact
    flat = compact(nd.storage.data, nd.shape, nd.strides, nd.offset)
    np.testing.assert_array_equal(np.asarray(flat).reshape(expected.shape), expected)


def positions(shape, strides, offset):
    """Every buffer position a view reaches, by brute force (the oracle for bounds checks)."""
    import itertools
    return [offset + sum(i * s for i, s in zip(idx, strides))
            for idx in itertools.product(*(range(d) for d in shape))]


@st.composite
def strided_views(draw, max_rank: int = 4, allow_zero: bool = True):
    """(root, view): ``root`` a compact numpy array with distinct values, ``view`` a numpy
    view of it reached by up to three random slices/permutations, so its strides may be
    negative, non-compact or permuted and its offset non-zero."""
    shape = draw(shapes(0, max_rank, allow_zero))
    root = np.arange(math.prod(shape), dtype=np.float64).reshape(shape)
    view = root
    for _ in range(draw(st.integers(0, 3))):
        if draw(st.booleans()):
            view = np_index(view, draw(basic_indices(view.shape, allow_none=False)))
        else:
            view = view.transpose(draw(permutations(view.ndim, allow_negative=False)))
    return root, view


def meta(view: np.ndarray, root: np.ndarray):
    """(shape, strides, offset) of a numpy view, in mini's units (elements)."""
    return view.shape, np_strides(view), np_offset(view, root)


def nd_view_of(root_nd: NDArray, view: np.ndarray, root: np.ndarray) -> NDArray:
    """The NDArray over ``root_nd``'s storage with the same metadata as the numpy ``view``."""
    shape, strides, offset = meta(view, root)
    return NDArray(root_nd.storage, shape, strides, offset)


def np_index(a: np.ndarray, key) -> np.ndarray:
    """``a[key]`` as a numpy *view* even when every axis gets an int (numpy would return a
    scalar copy then; an added Ellipsis makes it a 0-d view)."""
    out = a[key]
    if not isinstance(out, np.ndarray):
        out = a[(key if isinstance(key, tuple) else (key,)) + (Ellipsis,)]
    return out
