"""Dtypes (float32 default, float64 preserved, int64 labels, promotion) and the factories."""
from __future__ import annotations

import numpy as np
import pytest

import mini


def test_default_dtype_is_float32():
    assert mini.get_default_dtype() == mini.float32
    assert mini.tensor([1.0, 2.0]).dtype == mini.float32
    assert mini.tensor(1.5).dtype == mini.float32
    assert mini.zeros(2).dtype == mini.float32
    assert mini.ones(2, 3).dtype == mini.float32
    assert mini.empty(2).dtype == mini.float32
    assert mini.rand(2).dtype == mini.float32
    assert mini.randn(2).dtype == mini.float32
    assert mini.full((2,), 1.5).dtype == mini.float32
    assert mini.arange(0, 1, 0.25).dtype == mini.float32


def test_float64_is_preserved():
    x = mini.tensor(np.array([1.0, 2.0]))           # a numpy float64 array keeps its dtype
    assert x.dtype == mini.float64
    y = mini.tensor([1.0, 2.0], dtype=mini.float64)
    for out in (x * 2, x + y, x.exp(), x.sum(), x.mean(), x @ y, x.reshape(2, 1), x[0],
                mini.cat([x, y]), x.max(), mini.logsumexp(x, dim=0), x.T, -x, x ** 2, 1.0 / x):
        assert out.dtype == mini.float64
    z = mini.zeros(3, dtype=mini.float64, requires_grad=True)
    (z * 2).sum().backward()
    assert z.grad.dtype == mini.float64


def test_int64_labels():
    labels = mini.tensor([0, 2, 1])
    assert labels.dtype == mini.int64
    assert mini.arange(5).dtype == mini.int64
    assert mini.full((2,), 3).dtype == mini.int64
    assert mini.tensor([[1, 2], [3, 4]]).argmax(dim=1).dtype == mini.int64
    assert mini.randn(3, 4).max(dim=1).indices.dtype == mini.int64
    assert labels.sum().dtype == mini.int64
    x = mini.randn(4, 3)
    np.testing.assert_array_equal(x[labels].numpy(), x.numpy()[[0, 2, 1]])
    assert (labels == 2).dtype == mini.bool_


def test_promotion_float32_float64_gives_float64():
    a = mini.ones(2, dtype=mini.float32)
    b = mini.ones(2, dtype=mini.float64)
    assert (a + b).dtype == mini.float64
    assert (b * a).dtype == mini.float64
    assert (a @ b).dtype == mini.float64
    assert mini.cat([a, b]).dtype == mini.float64
    assert mini.maximum(a, b).dtype == mini.float64


def test_promotion_gradients_come_back_in_each_inputs_dtype():
    a = mini.ones(2, dtype=mini.float32, requires_grad=True)
    b = mini.ones(2, dtype=mini.float64, requires_grad=True)
    (a * b).sum().backward()
    assert a.grad.dtype == mini.float32 and b.grad.dtype == mini.float64


def test_python_scalars_do_not_promote_tensors():
    a = mini.ones(2)
    assert (a * 2.5).dtype == mini.float32
    assert (2 + a).dtype == mini.float32
    assert (a / 3).dtype == mini.float32
    i = mini.tensor([1, 2])
    assert (i * 2).dtype == mini.int64
    assert (i * 2.5).dtype == mini.float32
    assert (i / 2).dtype == mini.float32


def test_set_default_dtype():
    mini.set_default_dtype(mini.float64)
    try:
        assert mini.zeros(1).dtype == mini.float64
        assert mini.tensor([1.0]).dtype == mini.float64
        assert mini.randn(2).dtype == mini.float64
    finally:
        mini.set_default_dtype(mini.float32)
    with pytest.raises(TypeError):
        mini.set_default_dtype(mini.int64)


def test_casts():
    x = mini.tensor([1.7, -2.2])
    assert x.double().dtype == mini.float64
    assert x.long().dtype == mini.int64
    np.testing.assert_array_equal(x.long().numpy(), [1, -2])
    assert x.to(mini.float64).dtype == mini.float64
    assert x.to(dtype=mini.float64).float().dtype == mini.float32


# --- factories --------------------------------------------------------------------------------

def test_zeros_ones_full_empty_shapes_and_values():
    np.testing.assert_array_equal(mini.zeros(2, 3).numpy(), np.zeros((2, 3)))
    np.testing.assert_array_equal(mini.zeros((2, 3)).numpy(), np.zeros((2, 3)))
    np.testing.assert_array_equal(mini.ones([4]).numpy(), np.ones(4))
    np.testing.assert_array_equal(mini.full((2, 2), 7.5).numpy(), np.full((2, 2), 7.5))
    assert tuple(mini.empty(3, 0, 2).shape) == (3, 0, 2)
    assert tuple(mini.zeros(()).shape) == ()
    assert mini.zeros(()).item() == 0.0
    assert tuple(mini.zeros(2, 3).shape) == (2, 3) and mini.zeros(2, 3).shape == (2, 3)


def test_like_factories():
    x = mini.randn(2, 3, dtype=mini.float64)
    for f, v in [(mini.zeros_like, 0.0), (mini.ones_like, 1.0)]:
        y = f(x)
        assert y.shape == x.shape and y.dtype == mini.float64
        np.testing.assert_array_equal(y.numpy(), np.full((2, 3), v))
    y = mini.full_like(x, 3.0)
    np.testing.assert_array_equal(y.numpy(), np.full((2, 3), 3.0))
    assert mini.empty_like(x).shape == x.shape
    assert mini.zeros_like(x, dtype=mini.float32).dtype == mini.float32


def test_arange_matches_numpy():
    np.testing.assert_array_equal(mini.arange(5).numpy(), np.arange(5))
    np.testing.assert_array_equal(mini.arange(2, 10, 3).numpy(), np.arange(2, 10, 3))
    np.testing.assert_array_equal(mini.arange(5, 0, -2).numpy(), np.arange(5, 0, -2))
    np.testing.assert_allclose(mini.arange(0, 1, 0.25).numpy(), [0, 0.25, 0.5, 0.75])
    assert mini.arange(3, dtype=mini.float64).dtype == mini.float64
    with pytest.raises(ValueError):
        mini.arange(0, 3, 0)


def test_randn_and_rand_reproducible_with_manual_seed():
    mini.manual_seed(123)
    a = mini.randn(4, 5)
    b = mini.rand(3)
    mini.manual_seed(123)
    a2 = mini.randn(4, 5)
    b2 = mini.rand(3)
    np.testing.assert_array_equal(a.numpy(), a2.numpy())
    np.testing.assert_array_equal(b.numpy(), b2.numpy())
    mini.manual_seed(124)
    assert not np.array_equal(mini.randn(4, 5).numpy(), a.numpy())
    assert ((b.numpy() >= 0) & (b.numpy() < 1)).all()


def test_randn_statistics():
    mini.manual_seed(0)
    x = mini.randn(200_00).numpy()
    assert abs(x.mean()) < 0.05 and abs(x.std() - 1) < 0.05


def test_factories_with_requires_grad():
    w = mini.zeros(2, 2, requires_grad=True)
    assert w.requires_grad and w.is_leaf
    (w * 3).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), np.full((2, 2), 3.0))
    r = mini.randn(3, requires_grad=True)
    assert r.requires_grad


def test_tensor_copies_its_data():
    src = np.array([1.0, 2.0])
    t = mini.tensor(src)
    src[0] = 100.0
    assert t[0].item() == 1.0
    u = mini.tensor(t)
    t.add_(1.0)
    assert u[0].item() == 1.0


def test_bad_data_and_shapes():
    with pytest.raises((TypeError, ValueError)):
        mini.tensor([[1.0, 2.0], [3.0]])
    with pytest.raises(ValueError):
        mini.zeros(-1, 2)


def test_repr_looks_like_torch():
    assert repr(mini.tensor([1.0, 2.0])).startswith("tensor(")
    assert "requires_grad=True" in repr(mini.tensor([1.0], requires_grad=True))
    assert "grad_fn=<MulBackward0>" in repr(mini.tensor([1.0], requires_grad=True) * 2)


def test_numpy_array_with_tensor_never_becomes_an_object_array():
    # numpy must not broadcast a Tensor elementwise into an object array: mini hands the
    # operation to the Tensor (torch raises TypeError instead; either is fine, silence is not)
    arr = np.array([2.0, 3.0], dtype=np.float32)
    try:
        out = arr * mini.tensor([1.0, 2.0])
    except TypeError:
        return
    assert isinstance(out, mini.Tensor)
    np.testing.assert_allclose(out.numpy(), [2.0, 6.0])
