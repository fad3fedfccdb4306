"""Tensor-level views: slicing, permute/transpose, expand, view/reshape, squeeze/unsqueeze
on mini.Tensor behave like numpy, allocate nothing when they are views, share storage (and
the version counter) with their base, and let writes through the view reach the base."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

import mini
from mini.ndarray import track_allocations

SIDE = st.integers(1, 4)


@st.composite
def basic_keys(draw, shape):
    """Ints (negative too), slices (any bounds, negative steps), None, and an Ellipsis that
    stands either for the trailing axes (after the named ones) or the leading ones."""
    k = draw(st.integers(0, len(shape)))
    ellipsis_first = draw(st.booleans())
    named = shape[len(shape) - k:] if ellipsis_first else shape[:k]
    items = []
    for d in named:
        if draw(st.integers(0, 4)) == 0:
            items.append(None)
        if d > 0 and draw(st.booleans()):
            items.append(draw(st.integers(-d, d - 1)))
        else:
            b = st.one_of(st.none(), st.integers(-2 * d - 1, 2 * d + 1))
            items.append(slice(draw(b), draw(b), draw(st.one_of(st.none(), st.sampled_from([-2, -1, 1, 2, 3])))))
    if ellipsis_first:
        items.insert(0, Ellipsis)
    elif draw(st.booleans()):
        items.append(Ellipsis)
    return tuple(items)


def _np_view(a, key):
    out = a[key]
    return out if isinstance(out, np.ndarray) else a[key + (Ellipsis,)]


@given(st.lists(SIDE, min_size=0, max_size=4).map(tuple), st.data())
def test_tensor_view_chains_match_numpy_and_allocate_nothing(shape, data):
    base_np = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
    base = mini.tensor(base_np)
    t, a = base, base_np
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["getitem", "permute", "transpose", "expand", "unsqueeze",
                                        "squeeze", "T"]))
        with track_allocations() as stats:
            if op == "getitem":
                key = data.draw(basic_keys(a.shape))
                t, a = t[key], _np_view(a, key)
            elif op == "permute":
                axes = tuple(data.draw(st.permutations(range(a.ndim))))
                t, a = t.permute(*axes) if axes else t.permute(axes), a.transpose(axes)
            elif op == "transpose":
                if a.ndim < 2:
                    continue
                d0, d1 = data.draw(st.integers(-a.ndim, a.ndim - 1)), data.draw(st.integers(-a.ndim, a.ndim - 1))
                t, a = t.transpose(d0, d1), np.swapaxes(a, d0, d1)
            elif op == "expand":
                target = tuple(data.draw(st.integers(1, 3)) if d == 1 else d for d in a.shape)
                lead = tuple(data.draw(st.lists(SIDE, max_size=1)))
                t, a = t.expand(*(lead + target)), np.broadcast_to(a, lead + target)
            elif op == "unsqueeze":
                d = data.draw(st.integers(-a.ndim - 1, a.ndim))
                t, a = t.unsqueeze(d), np.expand_dims(a, d)
            elif op == "squeeze":
                t, a = t.squeeze(), a.squeeze()
            else:
                if a.ndim != 2:
                    continue
                t, a = t.T, a.T
        assert stats.count == 0, f"{op} allocated"
        assert t._data.storage is base._data.storage
        assert tuple(t.shape) == a.shape
        np.testing.assert_array_equal(np.asarray(t.numpy()), a)
        # stride()/storage_offset() describe the same elements (an oracle independent of mini)
        np.testing.assert_array_equal(_np_reconstruct(base_np, t), a)


@given(st.lists(SIDE, min_size=1, max_size=4).map(tuple), st.data())
def test_tensor_reshape_is_a_view_exactly_when_numpy_does_not_copy(shape, data):
    base_np = np.arange(math.prod(shape), dtype=np.float64).reshape(shape)
    base = mini.tensor(base_np)
    axes = tuple(data.draw(st.permutations(range(len(shape)))))
    t, a = base.permute(axes), base_np.transpose(axes)
    step = data.draw(st.sampled_from([None, 1, 2, -1]))
    if step is not None:
        t, a = t[..., ::step], a[..., ::step]
        assert a.base is not None
    n = a.size
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    d0 = data.draw(st.sampled_from(divisors))
    target = data.draw(st.sampled_from([(d0, -1), (-1,), (n // d0, 1, d0), (-1, d0)]))
    expected = a.reshape(target)
    with track_allocations() as stats:
        r = t.reshape(*target)
    np.testing.assert_array_equal(np.asarray(r.numpy()), expected)
    is_view = r._data.storage is base._data.storage
    assert is_view == np.shares_memory(expected, base_np) or n <= 1
    assert (stats.count == 0) == is_view
    if is_view:
        v = t.view(*target)
        assert v._data.storage is base._data.storage
    else:
        with pytest.raises(RuntimeError):
            t.view(*target)


def _np_reconstruct(base_np, t):
    """The numpy view of ``base_np`` with ``t``'s strides and offset (an independent oracle)."""
    item = base_np.itemsize
    flat = base_np.reshape(-1)
    return np.lib.stride_tricks.as_strided(flat[t.storage_offset():], tuple(t.shape),
                                           tuple(s * item for s in t.stride()))


def test_seed_facts_at_tensor_level():
    a = mini.arange(6).reshape(2, 3)
    assert a.stride() == (3, 1) and a.is_contiguous()
    with track_allocations() as stats:
        t = a.T
    assert stats.count == 0 and t.stride() == (1, 3) and not t.is_contiguous()
    assert t._data.storage is a._data.storage
    A = mini.arange(12.0).reshape(3, 4)
    v = A[0:2, 1:3]
    assert v.stride() == (4, 1) and v.storage_offset() == 1
    with track_allocations() as stats:
        flat = A.T.reshape(-1)
    assert stats.count == 1 and stats.bytes == 12 * 4
    np.testing.assert_array_equal(flat.numpy(), np.arange(12.0).reshape(3, 4).T.reshape(-1))
    assert mini.empty(1024, 1024).nbytes == 4_194_304


def test_contiguous_copies_only_when_needed():
    a = mini.randn(3, 4)
    with track_allocations() as stats:
        assert a.contiguous() is a
    assert stats.count == 0
    with track_allocations() as stats:
        c = a.T.contiguous()
    assert stats.count == 1 and c.is_contiguous()
    np.testing.assert_array_equal(c.numpy(), a.numpy().T)
    with track_allocations() as stats:
        k = a.clone()
    assert stats.count == 1 and k._data.storage is not a._data.storage


def test_writes_through_tensor_views_reach_the_base():
    base = mini.zeros(3, 4)
    ref = np.zeros((3, 4), dtype=np.float32)
    v = base[1:, ::-2]
    v[0] = 5.0
    ref[1:, ::-2][0] = 5.0
    v.add_(1.0)
    ref[1:, ::-2] += 1.0
    base.T[0].fill_(-1.0)
    ref.T[0] = -1.0
    base.view(12)[-1] = 9.0
    ref.reshape(12)[-1] = 9.0
    base.unsqueeze(0)[0, 2, 1:3].mul_(3.0)
    ref[2, 1:3] *= 3.0
    np.testing.assert_array_equal(base.numpy(), ref)
    assert base._version == v._version == 5


def test_setitem_advanced_and_broadcast_values():
    a = mini.zeros(3, 4)
    ref = np.zeros((3, 4), dtype=np.float32)
    a[mini.tensor([0, 2])] = mini.tensor([1.0, 2.0, 3.0, 4.0])
    ref[[0, 2]] = [1.0, 2.0, 3.0, 4.0]
    a[a > 2.5] = -1.0
    ref[ref > 2.5] = -1.0
    a[:, 1] = mini.tensor([7.0, 8.0, 9.0])
    ref[:, 1] = [7.0, 8.0, 9.0]
    a[..., -1:] = 0.5
    ref[..., -1:] = 0.5
    np.testing.assert_array_equal(a.numpy(), ref)


def test_numpy_of_a_view_shares_memory():
    a = mini.zeros(2, 3)
    a.T.numpy()[0, 1] = 4.0        # numpy() is a view, as torch's is
    assert a[1, 0].item() == 4.0


# --- errors ---------------------------------------------------------------------------------

def test_tensor_level_errors():
    a = mini.zeros(2, 3)
    with pytest.raises(ValueError) as info:
        a + mini.zeros(4)
    assert "(2, 3)" in str(info.value) and "(4,)" in str(info.value)
    with pytest.raises(ValueError) as info:
        a @ mini.zeros(2, 3)
    assert "(2, 3)" in str(info.value)
    with pytest.raises(ValueError):
        a.expand(4, 3)
    with pytest.raises(RuntimeError):
        a.T.view(6)
    with pytest.raises(ValueError):
        a.reshape(4, -1)
    with pytest.raises(IndexError):
        a[2]
    with pytest.raises(IndexError):
        a[0, -4]
    with pytest.raises(ValueError):
        a[::0]
    with pytest.raises((ValueError, RuntimeError)):
        mini.cat([a, mini.zeros(2, 4)], dim=0)
    with pytest.raises((ValueError, RuntimeError)):
        mini.stack([a, mini.zeros(3, 2)])
    with pytest.raises((ValueError, RuntimeError)):
        a.permute(0, 0)
    with pytest.raises(IndexError):
        a.sum(dim=2)


def test_in_place_write_into_an_expanded_tensor_raises():
    # torch: "unsupported operation: more than one element of the written-to tensor refers
    # to a single memory location" — never a silent, aliased write
    e = mini.zeros(1).expand(3)
    with pytest.raises(RuntimeError):
        e.add_(mini.tensor([1.0, 2.0, 3.0]))
