"""im2col, conv2d and max pooling: layout, against PyTorch, gradcheck."""
from __future__ import annotations

import numpy as np
import pytest

import mini
from mini.autograd.gradcheck import gradcheck
from mini.nn.modules.conv import Conv2d, MaxPool2d
from mini.ops.conv import col2im, conv2d, im2col, max_pool2d

# tests/test_blas_kernels.py re-runs these under a second OpenBLAS kernel
pytestmark = pytest.mark.blas_sensitive


def _t(a, grad=False):
    return mini.tensor(np.asarray(a), requires_grad=grad)


def _conv_loops(x, w, b, stride, pad):
    n, c, h, wd = x.shape
    co, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    ho, wo = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, co, ho, wo))
    for i in range(ho):
        for j in range(wo):
            patch = xp[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw]
            out[:, :, i, j] = np.einsum("nckl,ockl->no", patch, w) + b
    return out


def test_im2col_layout_rows_are_receptive_fields():
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float64).reshape(2, 3, 4, 5)
    cols = im2col(_t(x), 3, stride=1, padding=1).numpy()
    assert cols.shape == (2 * 4 * 5, 3 * 9)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    # row (n=1, ho=2, wo=3) is the 3x3 window at (2, 3) of the padded input, channels first
    np.testing.assert_array_equal(cols[1 * 20 + 2 * 5 + 3], xp[1, :, 2:5, 3:6].reshape(-1))


@pytest.mark.parametrize("stride,pad", [(1, 0), (1, 1), (2, 1), (2, 0), (3, 2)])
def test_conv2d_matches_loops(stride, pad):
    rng = np.random.default_rng(0)
    x, w, b = rng.normal(size=(2, 3, 7, 6)), rng.normal(size=(4, 3, 3, 2)), rng.normal(size=4)
    got = conv2d(_t(x), _t(w), _t(b), stride=stride, padding=pad).numpy()
    np.testing.assert_allclose(got, _conv_loops(x, w, b, stride, pad), rtol=1e-10, atol=1e-10)


def test_conv2d_and_im2col_gradcheck():
    rng = np.random.default_rng(1)
    x, w, b = _t(rng.normal(size=(1, 2, 4, 4)), True), _t(rng.normal(size=(2, 2, 3, 3)), True), \
        _t(rng.normal(size=2), True)
    assert gradcheck(lambda x, w, b: conv2d(x, w, b, stride=2, padding=1), (x, w, b))
    assert gradcheck(lambda x: im2col(x, 2, 1, 0), (x,))
    cols = _t(rng.normal(size=(9, 8)), True)
    assert gradcheck(lambda c: col2im(c, (1, 2, 4, 4), 2, 1, 0), (cols,))


def test_conv2d_double_backward_through_im2col():
    rng = np.random.default_rng(2)
    x = _t(rng.normal(size=(1, 1, 3, 3)), True)
    w = _t(rng.normal(size=(1, 1, 2, 2)), True)
    y = (conv2d(x, w) ** 2).sum()
    (gx,) = mini.autograd.grad(y, (x,), create_graph=True)
    gx.sum().backward()
    assert w.grad is not None and w.grad.shape == (1, 1, 2, 2)


def test_conv_errors_name_shapes():
    with pytest.raises(ValueError, match="3 channels"):
        conv2d(mini.zeros(1, 3, 5, 5), mini.zeros(2, 4, 3, 3))
    with pytest.raises(ValueError, match="larger than the padded input"):
        im2col(mini.zeros(1, 1, 2, 2), 3)


def test_max_pool_values_and_gradient():
    x = np.array([[[[1, 2, 5, 0], [3, 4, 1, 1], [0, 0, 2, 9], [7, 0, 3, 1]]]], dtype=np.float64)
    xt = _t(x, True)
    y = max_pool2d(xt, 2)
    np.testing.assert_array_equal(y.detach().numpy(), [[[[4, 5], [7, 9]]]])
    y.sum().backward()
    want = np.zeros_like(x)
    for i, j in [(1, 1), (0, 2), (3, 0), (2, 3)]:
        want[0, 0, i, j] = 1
    np.testing.assert_array_equal(xt.grad.numpy(), want)


def test_conv_module_shapes_and_parameters():
    m = Conv2d(3, 8, 3, stride=1, padding=1)
    assert [n for n, _ in m.named_parameters()] == ["weight", "bias"]
    assert tuple(m.weight.shape) == (8, 3, 3, 3)
    bound = 1 / np.sqrt(27)
    assert np.abs(m.weight.detach().numpy()).max() <= bound + 1e-6
    out = MaxPool2d(2)(m(mini.randn(2, 3, 8, 8)))
    assert tuple(out.shape) == (2, 8, 4, 4)


@pytest.mark.parametrize("stride,pad", [(1, 1), (2, 0)])
def test_conv_and_pool_match_torch(stride, pad):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 3, 9, 8)).astype(np.float32)
    w = rng.normal(size=(5, 3, 3, 3)).astype(np.float32)
    b = rng.normal(size=5).astype(np.float32)
    xm, wm, bm = _t(x, True), _t(w, True), _t(b, True)
    xt, wt, bt = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    ym = max_pool2d(conv2d(xm, wm, bm, stride=stride, padding=pad), 2)
    yt = torch.nn.functional.max_pool2d(
        torch.nn.functional.conv2d(xt, wt, bt, stride=stride, padding=pad), 2)
    np.testing.assert_allclose(ym.detach().numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-5)
    g = rng.normal(size=tuple(yt.shape)).astype(np.float32)
    ym.backward(_t(g))
    yt.backward(torch.tensor(g))
    for a, bb in [(xm, xt), (wm, wt), (bm, bt)]:
        np.testing.assert_allclose(a.grad.numpy(), bb.grad.numpy(), rtol=1e-4, atol=1e-4)
