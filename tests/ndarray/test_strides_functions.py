"""The pure stride functions of chapter 03 (``mini/ndarray/strides.py``), against numpy.

numpy is the oracle for metadata: a numpy view's ``strides // itemsize`` and the distance
of its data pointer from its base are exactly what ``slice_view``/``permute``/
``broadcast_to``/``reshape_strides`` must return.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from mini.ndarray import strides as S
from mini.ndarray import _numpy_fallbacks as F
from nd_helpers import (basic_indices, np_index, broadcast_targets, meta, np_offset, np_strides,
                        permutations, reshape_targets, shapes, strided_views)


class _Impl:
    """One implementation of the chapter-03 functions: mini's reference (what NDArray calls
    through the exercise slots) or the numpy stand-ins used before chapter 03 is released.
    Both must satisfy the same contract."""

    def __init__(self, name, module):
        self.name = name
        for fn in ("compact_strides", "element_offset", "slice_view", "permute", "broadcast_to",
                   "reshape_strides", "compact"):
            setattr(self, fn, getattr(module, fn))


IMPLS = [_Impl("reference", S), _Impl("numpy_fallback", F)]
impls = pytest.mark.parametrize("impl", IMPLS, ids=[i.name for i in IMPLS])


# --- compact_strides -------------------------------------------------------------------

@impls
def test_compact_strides_seed_facts(impl):
    assert impl.compact_strides((2, 3)) == (3, 1)
    assert impl.compact_strides(()) == ()
    assert impl.compact_strides((5,)) == (1,)
    assert impl.compact_strides((2, 3, 4)) == (12, 4, 1)


@impls
@given(shapes(0, 5, allow_zero=False))
def test_compact_strides_match_numpy(impl, shape):
    a = np.empty(shape, dtype=np.float32)
    assert impl.compact_strides(shape) == np_strides(a)
    assert impl.compact_strides(shape) == S.row_major_strides(shape)


@impls
@given(shapes(1, 5, allow_zero=True))
def test_compact_strides_treat_zero_length_axes_as_one(impl, shape):
    got = impl.compact_strides(shape)
    assert got == impl.compact_strides(tuple(max(d, 1) for d in shape))
    assert all(s > 0 for s in got)
    assert isinstance(got, tuple) and all(type(s) is int for s in got)


# --- element_offset -------------------------------------------------------------------

@impls
@given(strided_views(), st.data())
def test_element_offset_finds_the_element_numpy_finds(impl, views, data):
    root, view = views
    if view.size == 0:
        return
    idx = tuple(data.draw(st.integers(0, d - 1)) for d in view.shape)
    shape, strides, offset = meta(view, root)
    pos = impl.element_offset(idx, strides, offset)
    assert root.reshape(-1)[pos] == view[idx]


@impls
def test_element_offset_formula_and_errors(impl):
    assert impl.element_offset((1, 2), (4, 1), 1) == 7
    assert impl.element_offset((), (), 5) == 5
    assert impl.element_offset((2, 1), (-4, 1), 8) == 1
    with pytest.raises(ValueError):
        impl.element_offset((1,), (4, 1), 0)


# --- slice_view -------------------------------------------------------------------------

@impls
def test_slice_view_seed_fact(impl):
    # 3x4 A[0:2, 1:3] -> strides (4, 1), offset 1
    assert impl.slice_view((3, 4), (4, 1), 0, (slice(0, 2), slice(1, 3))) == ((2, 2), (4, 1), 1)


@impls
@given(strided_views(), st.data())
def test_slice_view_matches_numpy_view_metadata(impl, views, data):
    root, view = views
    key = data.draw(basic_indices(view.shape))
    expected = np_index(view, key)
    shape, strides, offset = meta(view, root)
    got_shape, got_strides, got_offset = impl.slice_view(shape, strides, offset, key)
    assert tuple(got_shape) == expected.shape
    if expected.size > 0:  # an empty view's strides and offset are never used
        assert tuple(got_strides) == np_strides(expected)
        assert got_offset == np_offset(expected, root)
        # and the metadata reads the right elements
        got = np.lib.stride_tricks.as_strided(
            root.reshape(-1)[got_offset:], got_shape,
            tuple(s * root.itemsize for s in got_strides)) if all(
                s >= 0 for s in got_strides) else None
        if got is not None:
            np.testing.assert_array_equal(got, expected)


@impls
@given(shapes(1, 4, allow_zero=True), st.data())
def test_slice_view_int_out_of_range_raises_index_error_like_numpy(impl, shape, data):
    axis = data.draw(st.integers(0, len(shape) - 1))
    d = shape[axis]
    bad = data.draw(st.one_of(st.integers(d, d + 5), st.integers(-d - 5, -d - 1)))
    key = (slice(None),) * axis + (bad,)
    with pytest.raises(IndexError):
        np.empty(shape)[key]
    with pytest.raises(IndexError):
        impl.slice_view(shape, impl.compact_strides(shape), 0, key)


@impls
@pytest.mark.parametrize("key", [slice(None, None, 0), (0, slice(1, 2, 0)), (Ellipsis, slice(0, 3, 0))])
def test_slice_view_step_zero_raises_value_error(impl, key):
    with pytest.raises(ValueError):
        np.empty((3, 4))[key]
    with pytest.raises(ValueError):
        impl.slice_view((3, 4), (4, 1), 0, key)


@impls
@pytest.mark.parametrize("key", [(0, 0, 0), (Ellipsis, 0, Ellipsis), (slice(None), 0, 1, None)])
def test_slice_view_bad_keys_raise_index_error(impl, key):
    with pytest.raises(IndexError):
        np.empty((3, 4))[key]
    with pytest.raises(IndexError):
        impl.slice_view((3, 4), (4, 1), 0, key)


@impls
def test_slice_view_none_and_ellipsis(impl):
    assert impl.slice_view((3, 4), (4, 1), 0, None) == ((1, 3, 4), (0, 4, 1), 0)
    assert impl.slice_view((3, 4), (4, 1), 0, (Ellipsis, None)) == ((3, 4, 1), (4, 1, 0), 0)
    assert impl.slice_view((3, 4), (4, 1), 0, (Ellipsis, -1)) == ((3,), (4,), 3)
    assert impl.slice_view((3, 4), (4, 1), 0, Ellipsis) == ((3, 4), (4, 1), 0)
    assert impl.slice_view((), (), 7, ()) == ((), (), 7)
    assert impl.slice_view((), (), 7, None) == ((1,), (0,), 7)
    # negative step: start from the last element
    assert impl.slice_view((5,), (1,), 0, slice(None, None, -2)) == ((3,), (-2,), 4)
    # bounds beyond the axis are clipped, like Python's
    assert impl.slice_view((5,), (1,), 0, slice(-100, 100)) == ((5,), (1,), 0)


# --- permute --------------------------------------------------------------------------

@impls
@given(strided_views(), st.data())
def test_permute_matches_numpy_transpose(impl, views, data):
    root, view = views
    axes = data.draw(permutations(view.ndim))
    expected = view.transpose(axes)
    shape, strides, _ = meta(view, root)
    got_shape, got_strides = impl.permute(shape, strides, axes)
    assert tuple(got_shape) == expected.shape
    if expected.size:
        assert tuple(got_strides) == np_strides(expected)


@impls
def test_permute_seed_fact_transpose_of_2x3(impl):
    assert impl.permute((2, 3), (3, 1), (1, 0)) == ((3, 2), (1, 3))


@impls
@pytest.mark.parametrize("axes", [(0,), (0, 0), (0, 2), (1, 0, 2), (-3, 0), (0, 1, -1)])
def test_permute_rejects_non_permutations(impl, axes):
    with pytest.raises(ValueError) as info:
        impl.permute((2, 3), (3, 1), axes)
    assert str(tuple(axes)) in str(info.value)
    assert "2" in str(info.value)


# --- broadcast_to ---------------------------------------------------------------------

@impls
@given(strided_views(max_rank=3), st.data())
def test_broadcast_to_matches_numpy(impl, views, data):
    root, view = views
    target = data.draw(broadcast_targets(view.shape))
    expected = np.broadcast_to(view, target)
    shape, strides, offset = meta(view, root)
    got = impl.broadcast_to(shape, strides, target)
    assert len(got) == len(target)
    if expected.size:
        # a length-1 axis's stride is never used (numpy sets it to 0 there)
        assert [s for s, d in zip(got, target) if d > 1] == \
            [s for s, d in zip(np_strides(expected), target) if d > 1]
        reads = np.lib.stride_tricks.as_strided(
            root.reshape(-1)[offset:], target, tuple(s * 8 for s in got)) if all(
                s >= 0 for s in got) else None
        if reads is not None:
            np.testing.assert_array_equal(reads, expected)


@impls
@given(shapes(0, 3), shapes(0, 3))
def test_broadcast_to_raises_naming_both_shapes_when_numpy_does(impl, shape, target):
    try:
        np.broadcast_to(np.empty(shape), target)
        numpy_ok = True
    except ValueError:
        numpy_ok = False
    if numpy_ok:
        impl.broadcast_to(shape, impl.compact_strides(shape), target)
        return
    with pytest.raises(ValueError) as info:
        impl.broadcast_to(shape, impl.compact_strides(shape), target)
    assert str(tuple(shape)) in str(info.value) and str(tuple(target)) in str(info.value)


@impls
def test_broadcast_to_seed_fact(impl):
    # a row vector (3,) seen as (2, 3): the new axis gets stride 0
    assert impl.broadcast_to((3,), (1,), (2, 3)) == (0, 1)
    assert impl.broadcast_to((3, 1), (1, 1), (3, 4)) == (1, 0)


@given(shapes(0, 3), shapes(0, 3), shapes(0, 3))
def test_broadcast_shapes_matches_numpy(a, b, c):
    try:
        expected = np.broadcast_shapes(a, b, c)
    except ValueError:
        with pytest.raises(ValueError):
            S.broadcast_shapes(a, b, c)
        return
    assert S.broadcast_shapes(a, b, c) == expected


# --- reshape_strides --------------------------------------------------------------------

@impls
def test_reshape_strides_seed_facts(impl):
    assert impl.reshape_strides((2, 3), (3, 1), (6,)) == (1,)
    assert impl.reshape_strides((2, 3), (3, 1), (3, 2)) == (2, 1)
    # A.T of a 2x3 (shape (3, 2), strides (1, 3)) cannot be flattened without a copy
    assert impl.reshape_strides((3, 2), (1, 3), (6,)) is None
    # but splitting a transposed axis can
    assert impl.reshape_strides((6, 2), (1, 6), (2, 3, 2)) == (3, 1, 6)


@impls
@given(strided_views(), st.data())
def test_reshape_strides_none_exactly_when_numpy_copies(impl, views, data):
    root, view = views
    target = S.infer_shape(data.draw(reshape_targets(view.size)), view.size, view.shape)
    shape, strides, offset = meta(view, root)
    got = impl.reshape_strides(shape, strides, target)
    expected = view.reshape(target)
    if view.size <= 1:
        assert got is not None, "0 or 1 elements can always be reshaped without a copy"
        return
    numpy_copies = not np.shares_memory(expected, root)
    assert (got is None) == numpy_copies, (shape, strides, target, got)
    if got is not None:
        assert len(got) == len(target)
        # the strides must read exactly numpy's values: check through element_offset
        flat = root.reshape(-1)
        for idx in np.ndindex(*target):
            assert flat[impl.element_offset(idx, got, offset)] == expected[idx]


@impls
def test_reshape_strides_length_one_axes_never_block(impl):
    # (3, 1, 4) where the length-1 axis has a nonsense stride
    assert impl.reshape_strides((3, 1, 4), (4, 999, 1), (12,)) == (1,)
    got = impl.reshape_strides((12,), (1,), (1, 3, 1, 4, 1))
    assert got is not None and [s for d, s in zip((1, 3, 1, 4, 1), got) if d != 1] == [4, 1]


# --- infer_shape ------------------------------------------------------------------------

@given(shapes(0, 4), st.data())
def test_infer_shape_resolves_minus_one_like_numpy(shape, data):
    size = math.prod(shape)
    target = data.draw(reshape_targets(size))
    assert S.infer_shape(target, size, shape) == np.empty(shape).reshape(target).shape


@pytest.mark.parametrize("target", [(5,), (-1, -1), (-2, 6), (0, -1), (7, -1)])
def test_infer_shape_errors(target):
    with pytest.raises(ValueError) as info:
        S.infer_shape(target, 12, (3, 4))
    assert "(" in str(info.value)


# --- compact ------------------------------------------------------------------------------

@impls
@given(strided_views())
def test_compact_equals_ascontiguousarray(impl, views):
    root, view = views
    shape, strides, offset = meta(view, root)
    buffer = root.reshape(-1)
    out = impl.compact(buffer, shape, strides, offset)
    expected = np.ascontiguousarray(view).reshape(-1)
    assert isinstance(out, np.ndarray) and out.ndim == 1
    assert out.dtype == buffer.dtype
    np.testing.assert_array_equal(out, expected)
    if impl.name == "reference":  # the numpy stand-in may return a view: the backend copies anyway
        assert not np.shares_memory(out, buffer)


@impls
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.bool_])
def test_compact_keeps_dtype(impl, dtype):
    buffer = (np.arange(12) % 3).astype(dtype)
    out = impl.compact(buffer, (4, 3), (1, 4), 0)  # transpose of a 3x4
    assert out.dtype == dtype
    np.testing.assert_array_equal(out, buffer.reshape(3, 4).T.reshape(-1))


@impls
def test_compact_rank_zero_and_broadcast(impl):
    buffer = np.arange(6.0)
    np.testing.assert_array_equal(impl.compact(buffer, (), (), 4), [4.0])
    np.testing.assert_array_equal(impl.compact(buffer, (2, 3), (0, 1), 3), [3, 4, 5, 3, 4, 5])


@impls
@given(shapes(0, 4))
def test_is_compact_matches_numpy_c_contiguity(impl, shape):
    a = np.empty(shape)
    assert S.is_compact(shape, impl.compact_strides(shape))
    if a.ndim >= 2 and a.shape[0] > 1 and a.shape[-1] > 1 and a.size:
        t = a.T
        assert S.is_compact(t.shape, np_strides(t)) == t.flags.c_contiguous


def test_is_compact_empty_arrays_are_compact_whatever_their_strides():
    # numpy calls every empty array C-contiguous; is_compact has a `dim == 0` rule for this,
    # but it must not depend on where the zero-length axis sits
    assert S.is_compact((0, 2), (0, 0))
    assert S.is_compact((2, 0), (0, 0))
    assert S.is_compact((2, 0, 2), (0, 0, 0))
    assert S.is_compact((3, 0), (1, 3))
