"""NDArray views against numpy: same values, no allocation, shared storage, writes reach the base.

Every random chain of views is applied to a numpy array and to an NDArray holding the same
data; after each step the values must agree, ``track_allocations`` must count nothing and
the view must share the base's Storage.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from contextlib import contextmanager

from mini import exercises
from mini.ndarray import NDArray, Storage, track_allocations
from mini.ndarray import _numpy_fallbacks as F
from nd_helpers import (assert_same_values, base_pair, basic_indices, broadcast_targets,
                        np_index, permutations, positions, reshape_targets, shapes)


_SLOTS = {"03.compact_strides": F.compact_strides, "03.offset": F.element_offset,
          "03.slice_view": F.slice_view, "03.permute": F.permute, "03.broadcast_to": F.broadcast_to,
          "03.reshape": F.reshape_strides, "03.compact": F.compact}


@contextmanager
def chapter03(impl: str):
    """Run NDArray on mini's references, or on the numpy stand-ins that serve the chapter-03
    slots in a student copy released before chapter 03 (they must behave the same)."""
    if impl == "reference":
        yield
        return
    saved = dict(exercises._ACTIVE)
    try:
        for slot, fn in _SLOTS.items():
            exercises._ACTIVE[slot] = fn
        yield
    finally:
        exercises._ACTIVE.clear()
        exercises._ACTIVE.update(saved)


impls = pytest.mark.parametrize("impl", ["reference", "numpy_fallback"])


def _apply_view(data, a_np, a_nd, writable_only=False):
    """Draw one view operation and apply it to both arrays."""
    choices = ["slice", "permute", "transpose"] + ([] if writable_only else ["broadcast"])
    op = data.draw(st.sampled_from(choices))
    if op == "slice":
        key = data.draw(basic_indices(a_np.shape))
        return np_index(a_np, key), a_nd[key], f"[{key}]"
    if op == "permute":
        axes = data.draw(permutations(a_np.ndim))
        return a_np.transpose(axes), a_nd.permute(axes), f".permute({axes})"
    if op == "transpose":
        if a_np.ndim < 2:
            return a_np, a_nd.transpose(), ".transpose()"
        d0 = data.draw(st.integers(-a_np.ndim, a_np.ndim - 1))
        d1 = data.draw(st.integers(-a_np.ndim, a_np.ndim - 1))
        return np.swapaxes(a_np, d0, d1), a_nd.transpose(d0, d1), f".transpose({d0}, {d1})"
    target = data.draw(broadcast_targets(a_np.shape))
    return np.broadcast_to(a_np, target), a_nd.broadcast_to(target), f".broadcast_to({target})"


@impls
@given(shapes(0, 4), st.data())
def test_random_view_chains_match_numpy_and_allocate_nothing(impl, shape, data):
    with chapter03(impl):
        a_np, base = base_pair(shape)
        v_np, v_nd = a_np, base
        trail = "a"
        for _ in range(data.draw(st.integers(1, 4))):
            with track_allocations() as stats:
                v_np, v_nd, step = _apply_view(data, v_np, v_nd)
            trail += step
            assert stats.count == 0 and stats.bytes == 0, f"{trail} allocated {stats}"
            assert v_nd.storage is base.storage, f"{trail} does not share the base's storage"
            assert v_nd.shape == v_np.shape, trail
            assert_same_values(v_nd, v_np)


@impls
@given(shapes(0, 4), st.data())
def test_reshape_is_a_view_exactly_when_numpy_does_not_copy(impl, shape, data):
    with chapter03(impl):
        a_np, base = base_pair(shape)
        v_np, v_nd = a_np, base
        for _ in range(data.draw(st.integers(0, 2))):
            v_np, v_nd, _ = _apply_view(data, v_np, v_nd, writable_only=True)
        target = data.draw(reshape_targets(v_np.size))
        expected = v_np.reshape(target)
        with track_allocations() as stats:
            r = v_nd.reshape(target)
        assert r.shape == expected.shape
        assert_same_values(r, expected)
        is_view = r.storage is v_nd.storage
        if v_np.size == 0:
            assert is_view and stats.count == 0
            return
        numpy_copied = not np.shares_memory(expected, a_np)
        assert is_view == (not numpy_copied), (v_nd.shape, v_nd.strides, target)
        if is_view:
            assert stats.count == 0
        else:
            assert stats.count == 1 and stats.bytes == v_np.size * 8, stats
            assert r.is_compact()
        # view() agrees with reshape: the same view, or a RuntimeError instead of a copy
        if is_view:
            w = v_nd.view(target)
            assert w.storage is v_nd.storage and w.shape == r.shape
            assert_same_values(w, expected)
        else:
            with pytest.raises(RuntimeError):
                v_nd.view(target)


@impls
@given(shapes(1, 4, allow_zero=False), st.data())
def test_writes_through_views_reach_the_base(impl, shape, data):
    with chapter03(impl):
        a_np, base = base_pair(shape)
        v_np, v_nd = a_np, base
        for _ in range(data.draw(st.integers(1, 3))):
            v_np, v_nd, _ = _apply_view(data, v_np, v_nd, writable_only=True)
        if data.draw(st.booleans()):
            target = data.draw(reshape_targets(v_np.size))
            r_np = v_np.reshape(target)
            if np.shares_memory(r_np, a_np) or v_np.size <= 1:
                v_np, v_nd = r_np, v_nd.reshape(target)
        version = base.storage.version
        how = data.draw(st.sampled_from(["setitem_array", "setitem_scalar", "fill", "copy_from"]))
        values = -1.0 - np.arange(v_np.size, dtype=np.float64).reshape(v_np.shape)
        if how == "setitem_array":
            v_nd[...] = NDArray.from_numpy(values)
            v_np[...] = values
        elif how == "setitem_scalar":
            v_nd[...] = -7.5
            v_np[...] = -7.5
        elif how == "fill":
            v_nd.fill(3.25)
            v_np[...] = 3.25
        else:
            v_nd.copy_from(NDArray.from_numpy(values))
            v_np[...] = values
        assert base.storage.version > version, f"{how} did not bump the version counter"
        assert_same_values(base, a_np)
        assert_same_values(v_nd, v_np)


@given(shapes(1, 3, allow_zero=False), st.data())
def test_setitem_with_basic_key_and_broadcast_value(shape, data):
    a_np, base = base_pair(shape)
    key = data.draw(basic_indices(shape))
    dst = np_index(a_np, key)
    value_shape = data.draw(st.sampled_from([dst.shape[i:] for i in range(dst.ndim + 1)]))
    value_shape = tuple(1 if data.draw(st.booleans()) else d for d in value_shape)
    value = np.full(value_shape, -2.0) - np.arange(math.prod(value_shape)).reshape(value_shape)
    a_np[key] = value
    base[key] = NDArray.from_numpy(value)
    assert_same_values(base, a_np)


def test_overlapping_setitem_matches_numpy():
    a_np, a = base_pair((6,))
    a[1:] = a[:-1]
    a_np[1:] = a_np[:-1].copy()
    assert_same_values(a, a_np)
    b_np, b = base_pair((6,))
    b[::-1] = b[:]
    b_np[::-1] = b_np.copy()
    assert_same_values(b, b_np)


# --- seed facts ---------------------------------------------------------------------------

def test_seed_2x3_strides_and_transpose_without_copy():
    a = NDArray.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert a.strides == (3, 1) and a.offset == 0
    with track_allocations() as stats:
        t = a.transpose()
        p = a.permute((1, 0))
    assert stats.count == 0
    assert t.shape == (3, 2) and t.strides == (1, 3)
    assert p.shape == (3, 2) and p.strides == (1, 3)
    assert t.storage is a.storage
    np.testing.assert_array_equal(t.numpy(), np.arange(6).reshape(2, 3).T)


def test_seed_slice_of_3x4():
    a = NDArray.from_numpy(np.arange(12.0).reshape(3, 4))
    with track_allocations() as stats:
        v = a[0:2, 1:3]
    assert stats.count == 0
    assert v.shape == (2, 2) and v.strides == (4, 1) and v.offset == 1
    np.testing.assert_array_equal(v.numpy(), [[1, 2], [5, 6]])


def test_seed_flattening_a_transpose_copies_once():
    a = NDArray.from_numpy(np.arange(12.0).reshape(3, 4))
    with track_allocations() as stats:
        flat = a.permute((1, 0)).reshape((-1,))
    assert stats.count == 1 and stats.bytes == 12 * 8
    assert flat.storage is not a.storage
    np.testing.assert_array_equal(flat.numpy(), np.arange(12.0).reshape(3, 4).T.reshape(-1))
    with pytest.raises(RuntimeError):
        a.permute((1, 0)).view((-1,))


def test_seed_nbytes_of_1024x1024_float32():
    with track_allocations() as stats:
        a = NDArray.empty((1024, 1024), "float32")
    assert a.nbytes == 4_194_304
    assert stats.count == 1 and stats.bytes == 4_194_304


def test_compact_returns_self_when_compact_and_copies_once_otherwise():
    a = NDArray.from_numpy(np.arange(24.0).reshape(2, 3, 4))
    with track_allocations() as stats:
        assert a.compact() is a
        assert a[1].compact() is a[1] or a[1].compact().storage is a.storage
    assert stats.count == 0
    with track_allocations() as stats:
        c = a.permute((2, 0, 1)).compact()
    assert stats.count == 1 and stats.bytes == 24 * 8
    assert c.is_compact() and c.offset == 0 and c.storage is not a.storage
    np.testing.assert_array_equal(c.numpy(), np.arange(24.0).reshape(2, 3, 4).transpose(2, 0, 1))


def test_buffers_from_compact_are_64_byte_aligned_like_every_backend_buffer():
    # mini/backends/__init__.py: "Both keep data in flat, 64-byte aligned numpy buffers"
    a = NDArray.from_numpy(np.arange(24.0).reshape(2, 3, 4))
    assert a.storage.data.ctypes.data % 64 == 0
    for _ in range(8):
        c = a.permute((2, 0, 1)).compact()
        assert c.storage.data.ctypes.data % 64 == 0, "compact() returned an unaligned buffer"


# --- errors ---------------------------------------------------------------------------------

def test_index_errors():
    a = NDArray.from_numpy(np.arange(12.0).reshape(3, 4))
    with pytest.raises(IndexError):
        a[3]
    with pytest.raises(IndexError):
        a[-4]
    with pytest.raises(IndexError):
        a[0, 4]
    with pytest.raises(IndexError):
        a[0, 0, 0]
    with pytest.raises(ValueError):
        a[::0]
    with pytest.raises(ValueError):
        a[:, 1:3:0]


def test_bad_broadcast_names_both_shapes():
    a = NDArray.from_numpy(np.zeros((2, 3)))
    with pytest.raises(ValueError) as info:
        a.broadcast_to((4, 3))
    assert "(2, 3)" in str(info.value) and "(4, 3)" in str(info.value)
    with pytest.raises(ValueError) as info:
        a.ewise("add", NDArray.from_numpy(np.zeros((4,))))
    assert "(2, 3)" in str(info.value) and "(4,)" in str(info.value)


def test_view_that_needs_a_copy_raises_runtime_error():
    a = NDArray.from_numpy(np.zeros((3, 4)))
    with pytest.raises(RuntimeError):
        a[:, :2].view((6,))
    with pytest.raises(RuntimeError):
        a.permute((1, 0)).view((12,))
    assert a[1:].view((8,)).storage is a.storage


@pytest.mark.parametrize("shape,strides,offset", [
    ((3, 4), (4, 1), 1),      # one past the end
    ((3, 4), (5, 1), 0),
    ((2,), (-1,), 0),         # walks before the start
    ((13,), (1,), 0),
    ((), (), 12),
    ((2, 2), (0, 12), 0),
])
def test_views_that_leave_the_buffer_raise_index_error(shape, strides, offset):
    storage = NDArray.from_numpy(np.zeros(12)).storage
    with pytest.raises(IndexError):
        NDArray(storage, shape, strides, offset)


@given(shapes(0, 3, allow_zero=True),
       st.lists(st.integers(-6, 6), min_size=3, max_size=3),
       st.integers(-2, 14))
def test_bounds_check_agrees_with_brute_force(shape, strides, offset):
    strides = tuple(strides[:len(shape)])
    storage = NDArray.from_numpy(np.arange(12.0)).storage
    pos = positions(shape, strides, offset)
    inside = all(0 <= p < 12 for p in pos)
    if inside:
        v = NDArray(storage, shape, strides, offset)
        np.testing.assert_array_equal(v.numpy().reshape(-1), np.array(pos, dtype=np.float64))
    else:
        with pytest.raises(IndexError):
            NDArray(storage, shape, strides, offset)


# --- advanced indexing (always a copy) ---------------------------------------------------

@given(shapes(1, 3, allow_zero=False), st.data())
def test_integer_array_and_mask_indexing_match_numpy(shape, data):
    a_np, a = base_pair(shape)
    kind = data.draw(st.sampled_from(["ints", "list", "mask", "mixed"]))
    if kind in ("ints", "list"):
        idx = data.draw(st.lists(st.integers(-shape[0], shape[0] - 1), min_size=0, max_size=6))
        key = np.array(idx, dtype=np.int64) if kind == "ints" else idx
        if kind == "list" and not idx:
            key = np.array([], dtype=np.int64)
    elif kind == "mask":
        key = np.array(data.draw(st.lists(st.booleans(), min_size=shape[0], max_size=shape[0])))
    else:
        if len(shape) < 2:
            return
        key = (slice(None, None, -1), np.array(data.draw(
            st.lists(st.integers(0, shape[1] - 1), min_size=1, max_size=4))))
    expected = a_np[key]
    with track_allocations() as stats:
        got = a[key if not isinstance(key, np.ndarray) else NDArray.from_numpy(key)]
    assert stats.count >= 1
    assert got.storage is not a.storage
    assert_same_values(got, expected)


# --- arithmetic kernels read strided inputs correctly ------------------------------------

@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@given(shapes(1, 3, allow_zero=True), st.data())
def test_ewise_on_strided_views_matches_numpy(shape, data):
    a_np, a = base_pair(shape)
    v_np, v = a_np, a
    for _ in range(data.draw(st.integers(0, 2))):
        v_np, v, _ = _apply_view(data, v_np, v)
    other_shape = data.draw(st.sampled_from([v_np.shape[i:] for i in range(v_np.ndim + 1)]))
    o_np = np.linspace(-2, 2, math.prod(other_shape)).reshape(other_shape) + 0.5
    o = NDArray.from_numpy(o_np)
    for op, fn in [("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                   ("div", np.true_divide), ("maximum", np.maximum)]:
        assert_same_values(v.ewise(op, o), fn(v_np, o_np))
        assert_same_values(o.ewise(op, v), fn(o_np, v_np))
    assert_same_values(v.ewise("lt", o), v_np < o_np)
    assert_same_values(v.scalar("sub", 2.0, reverse=True), 2.0 - v_np)
    assert_same_values(v.unary("neg"), -v_np)


@given(shapes(1, 4, allow_zero=False), st.data())
def test_reduce_matches_numpy(shape, data):
    a_np, a = base_pair(shape)
    a_np = np.sin(a_np)
    a = NDArray.from_numpy(a_np).permute(tuple(reversed(range(len(shape)))))
    a_np = a_np.transpose()
    axes = data.draw(st.one_of(st.none(), st.lists(st.integers(0, len(shape) - 1), unique=True)
                               .map(tuple)))
    keepdims = data.draw(st.booleans())
    for op, fn in [("sum", np.sum), ("max", np.max)]:
        got = a.reduce(op, axes, keepdims)
        expected = fn(a_np, axis=axes, keepdims=keepdims)
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12)
        assert got.shape == np.shape(expected)
    axis = data.draw(st.integers(0, len(shape) - 1))
    assert_same_values(a.reduce("argmax", axis, keepdims), np.argmax(a_np, axis=axis, keepdims=keepdims))


@given(st.data())
def test_matmul_broadcasting_matches_numpy(data):
    n, k, m = (data.draw(st.integers(1, 4)) for _ in range(3))
    batch_a = data.draw(st.sampled_from([(), (1,), (2,), (3, 1)]))
    batch_b = data.draw(st.sampled_from([(), (1,), (2,), (1, 2)]))
    a_shape = data.draw(st.sampled_from([(k,), batch_a + (n, k)]))
    b_shape = data.draw(st.sampled_from([(k,), batch_b + (k, m)]))
    rng = np.random.default_rng(0)
    a_np, b_np = rng.standard_normal(a_shape), rng.standard_normal(b_shape)
    try:
        expected = a_np @ b_np
    except ValueError:
        with pytest.raises(ValueError):
            NDArray.from_numpy(a_np).matmul(NDArray.from_numpy(b_np))
        return
    got = NDArray.from_numpy(a_np).matmul(NDArray.from_numpy(b_np))
    assert got.shape == expected.shape
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12, atol=1e-12)


def test_storage_version_counts_writes_through_any_view():
    a = NDArray.from_numpy(np.zeros((3, 4)))
    v = a[1:, ::2]
    assert a.storage.version == 0
    v[0, 0] = 1.0
    v.fill(2.0)
    a[[0, 2]] = 5.0          # advanced-index write
    a.copy_from(NDArray.from_numpy(np.ones(4)))
    assert a.storage.version == 4 and v.storage.version == 4
    assert isinstance(a.storage, Storage)


def test_dtypes_preserved_and_promoted():
    f32 = NDArray.from_numpy(np.ones(3, dtype=np.float32))
    f64 = NDArray.from_numpy(np.ones(3, dtype=np.float64))
    i64 = NDArray.from_numpy(np.arange(3))
    assert f32.dtype == "float32" and f64.dtype == "float64" and i64.dtype == "int64"
    assert f32.ewise("add", f64).dtype == "float64"
    assert i64.ewise("add", i64).dtype == "int64"
    assert f32.scalar("mul", 2.5).dtype == "float32"
    assert f32.permute((0,)).dtype == "float32"
    assert f32.numpy().dtype == np.float32
