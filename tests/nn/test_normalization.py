"""BatchNorm1d/2d and LayerNorm: against PyTorch (when installed), gradcheck, semantics."""
from __future__ import annotations

import numpy as np
import pytest

import mini
from mini.autograd.gradcheck import gradcheck
from mini.nn.modules.normalization import (BatchNorm1d, BatchNorm2d, LayerNorm, batch_norm,
                                           layer_norm)


def _t(a, grad=False):
    return mini.tensor(np.asarray(a), requires_grad=grad)


def test_batchnorm_train_normalises_per_channel_and_updates_running_stats():
    rng = np.random.default_rng(0)
    x = rng.normal(3.0, 2.0, size=(16, 4)).astype(np.float32)
    bn = BatchNorm1d(4, momentum=0.1)
    y = bn(_t(x)).detach().numpy()
    np.testing.assert_allclose(y.mean(0), 0, atol=1e-5)
    np.testing.assert_allclose(y.var(0), 1, atol=1e-3)
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * x.mean(0), rtol=1e-5)
    # unbiased variance in the running estimate
    np.testing.assert_allclose(bn.running_var.numpy(), 0.9 + 0.1 * x.var(0, ddof=1), rtol=1e-5)
    assert int(bn.num_batches_tracked.item()) == 1


def test_batchnorm_eval_uses_running_stats_and_does_not_update():
    rng = np.random.default_rng(1)
    bn = BatchNorm2d(3)
    for _ in range(5):
        bn(_t(rng.normal(1.0, 3.0, size=(8, 3, 4, 4)).astype(np.float32)))
    bn.eval()
    rm, rv = bn.running_mean.numpy().copy(), bn.running_var.numpy().copy()
    x = rng.normal(size=(2, 3, 4, 4)).astype(np.float32)
    y = bn(_t(x)).detach().numpy()
    want = (x - rm[None, :, None, None]) / np.sqrt(rv[None, :, None, None] + 1e-5)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(bn.running_mean.numpy(), rm)
    # one sample at eval is fine; at training it is an error
    bn(_t(x[:1]))
    bn.train()
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        BatchNorm1d(3)(_t(np.ones((1, 3), np.float32)))


def test_batchnorm_state_dict_keys_like_pytorch():
    assert list(BatchNorm2d(3).state_dict()) == ["weight", "bias", "running_mean", "running_var",
                                                "num_batches_tracked"]
    assert [n for n, _ in BatchNorm2d(3).named_parameters()] == ["weight", "bias"]


def test_batchnorm_gradcheck_train_and_eval():
    rng = np.random.default_rng(2)
    x = _t(rng.normal(size=(5, 3)), True)
    w = _t(rng.normal(size=3), True)
    b = _t(rng.normal(size=3), True)
    assert gradcheck(lambda x, w, b: batch_norm(x, None, None, w, b, training=True), (x, w, b))
    x4 = _t(rng.normal(size=(2, 3, 2, 2)), True)
    assert gradcheck(lambda x, w, b: batch_norm(x, None, None, w, b, training=True), (x4, w, b))
    rm, rv = _t(rng.normal(size=3)), _t(rng.uniform(0.5, 2, size=3))
    assert gradcheck(lambda x, w, b: batch_norm(x, rm, rv, w, b, training=False), (x, w, b))


def test_layernorm_semantics_and_gradcheck():
    rng = np.random.default_rng(3)
    x = rng.normal(2.0, 3.0, size=(4, 5, 6))
    y = layer_norm(_t(x), (6,)).numpy()
    np.testing.assert_allclose(y.mean(-1), 0, atol=1e-6)
    np.testing.assert_allclose(y.var(-1), 1, atol=1e-4)
    y2 = layer_norm(_t(x), (5, 6)).numpy()
    np.testing.assert_allclose(y2.mean((-2, -1)), 0, atol=1e-6)
    with pytest.raises(ValueError, match="normalized_shape"):
        layer_norm(_t(x), (5,))
    xt = _t(rng.normal(size=(3, 4)), True)
    w, b = _t(rng.normal(size=4), True), _t(rng.normal(size=4), True)
    assert gradcheck(lambda x, w, b: layer_norm(x, (4,), w, b), (xt, w, b))
    ln = LayerNorm(4)
    assert [n for n, _ in ln.named_parameters()] == ["weight", "bias"]
    # no running state, so train and eval agree
    a = ln(_t(x[0, :, :4].astype(np.float32))).detach().numpy()
    ln.eval()
    np.testing.assert_array_equal(a, ln(_t(x[0, :, :4].astype(np.float32))).detach().numpy())


# --------------------------------------------------------------------------- vs PyTorch

@pytest.mark.parametrize("dims,momentum,affine", [((8, 4), 0.1, True), ((6, 3, 5), 0.3, False),
                                                  ((4, 2, 3, 3), None, True)])
def test_batchnorm_matches_torch(dims, momentum, affine):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    cls, tcls = ((BatchNorm2d, torch.nn.BatchNorm2d) if len(dims) == 4
                 else (BatchNorm1d, torch.nn.BatchNorm1d))
    c = dims[1]
    ours = cls(c, momentum=momentum, affine=affine)
    theirs = tcls(c, momentum=momentum, affine=affine)
    if affine:
        w, b = rng.normal(size=c).astype(np.float32), rng.normal(size=c).astype(np.float32)
        ours.weight.data = _t(w)
        ours.bias.data = _t(b)
        with torch.no_grad():
            theirs.weight.copy_(torch.tensor(w))
            theirs.bias.copy_(torch.tensor(b))
    for step in range(3):
        x = rng.normal(1.0, 2.0, size=dims).astype(np.float32)
        g = rng.normal(size=dims).astype(np.float32)
        xm, xt = _t(x, True), torch.tensor(x, requires_grad=True)
        ym, yt = ours(xm), theirs(xt)
        np.testing.assert_allclose(ym.detach().numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-5)
        ym.backward(_t(g))
        yt.backward(torch.tensor(g))
        np.testing.assert_allclose(xm.grad.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-5)
        if affine:
            np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.numpy(),
                                       rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(ours.bias.grad.numpy(), theirs.bias.grad.numpy(),
                                       rtol=1e-5, atol=1e-5)
            ours.zero_grad()
            theirs.zero_grad()
    np.testing.assert_allclose(ours.running_mean.numpy(), theirs.running_mean.numpy(), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(ours.running_var.numpy(), theirs.running_var.numpy(), rtol=1e-5,
                               atol=1e-6)
    ours.eval()
    theirs.eval()
    x = rng.normal(size=dims).astype(np.float32)
    np.testing.assert_allclose(ours(_t(x)).detach().numpy(),
                               theirs(torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape,norm", [((4, 6), (6,)), ((2, 3, 4, 5), (4, 5))])
def test_layernorm_matches_torch(shape, norm):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    ours, theirs = LayerNorm(norm), torch.nn.LayerNorm(norm)
    w, b = rng.normal(size=norm).astype(np.float32), rng.normal(size=norm).astype(np.float32)
    ours.weight.data, ours.bias.data = _t(w), _t(b)
    with torch.no_grad():
        theirs.weight.copy_(torch.tensor(w))
        theirs.bias.copy_(torch.tensor(b))
    x = rng.normal(3, 2, size=shape).astype(np.float32)
    g = rng.normal(size=shape).astype(np.float32)
    xm, xt = _t(x, True), torch.tensor(x, requires_grad=True)
    ym, yt = ours(xm), theirs(xt)
    np.testing.assert_allclose(ym.detach().numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-5)
    ym.backward(_t(g))
    yt.backward(torch.tensor(g))
    np.testing.assert_allclose(xm.grad.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.numpy(), rtol=1e-5,
                               atol=1e-5)
