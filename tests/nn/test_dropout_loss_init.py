"""Dropout, the stable cross-entropy, He init and parameter discovery (chapter 05 slots)."""
from __future__ import annotations

import numpy as np
import pytest

import mini
from mini import nn
from mini.autograd.gradcheck import gradcheck
from mini.nn.discovery import named_parameters
from mini.nn.he_init import kaiming_normal_
from mini.nn.losses import cross_entropy
from mini.nn.modules.conv import Conv2d
from mini.nn.modules.dropout import Dropout, dropout
from mini.nn.modules.normalization import BatchNorm1d


def _t(a, grad=False):
    return mini.tensor(np.asarray(a), requires_grad=grad)


def test_dropout_is_inverted_keeps_mean_and_is_identity_at_eval():
    mini.manual_seed(0)
    x = mini.ones(200_000)
    y = dropout(x, 0.3, training=True).numpy()
    assert abs((y == 0).mean() - 0.3) < 0.01
    np.testing.assert_allclose(np.unique(y), [0.0, 1 / 0.7], rtol=1e-6)
    assert abs(y.mean() - 1.0) < 0.01
    d = Dropout(0.3)
    d.eval()
    xs = _t(np.arange(5, dtype=np.float32))
    np.testing.assert_array_equal(d(xs).numpy(), xs.numpy())
    np.testing.assert_array_equal(dropout(xs, 0.0).numpy(), xs.numpy())
    assert not dropout(xs, 1.0).numpy().any()
    with pytest.raises(ValueError):
        dropout(xs, 1.5)


def test_dropout_reproducible_and_differentiable():
    mini.manual_seed(3)
    a = dropout(mini.ones(50), 0.5).numpy()
    mini.manual_seed(3)
    x = mini.ones(50, requires_grad=True)
    y = dropout(x, 0.5)
    np.testing.assert_array_equal(a, y.detach().numpy())
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), a)  # d/dx (x·mask/(1-p)) = mask/(1-p)


def test_cross_entropy_is_stable_and_matches_formula():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(6, 5)) * 1000
    y = rng.integers(0, 5, size=6)
    m = z.max(1, keepdims=True)
    lse = (m + np.log(np.exp(z - m).sum(1, keepdims=True)))[:, 0]
    want = (lse - z[np.arange(6), y]).mean()
    got = cross_entropy(_t(z), _t(y)).item()
    assert np.isfinite(got)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    zt = _t(rng.normal(size=(4, 3)), True)
    yt = _t(np.array([0, 2, 1, 2]))
    assert gradcheck(lambda z: cross_entropy(z, yt), (zt,))
    with pytest.raises(IndexError):
        cross_entropy(_t(z), _t(np.array([0, 1, 2, 3, 4, 5])))
    with pytest.raises(ValueError):
        cross_entropy(_t(z), _t(np.array([0, 1])))


def test_cross_entropy_matches_torch_including_weights_and_smoothing():
    torch = pytest.importorskip("torch")
    import mini.nn.functional as F
    rng = np.random.default_rng(1)
    z = (rng.normal(size=(8, 5)) * 30).astype(np.float32)
    y = rng.integers(0, 5, size=8)
    w = rng.uniform(0.5, 2, size=5).astype(np.float32)
    zm, zt = _t(z, True), torch.tensor(z, requires_grad=True)
    lm = cross_entropy(zm, _t(y))
    lt = torch.nn.functional.cross_entropy(zt, torch.tensor(y))
    lm.backward()
    lt.backward()
    np.testing.assert_allclose(lm.item(), lt.item(), rtol=1e-5)
    np.testing.assert_allclose(zm.grad.numpy(), zt.grad.numpy(), rtol=1e-5, atol=1e-6)
    for kw in [dict(weight=w), dict(label_smoothing=0.1), dict(weight=w, label_smoothing=0.2)]:
        ours = F.cross_entropy(_t(z), _t(y), **{k: (_t(v) if k == "weight" else v)
                                               for k, v in kw.items()}).item()
        theirs = torch.nn.functional.cross_entropy(
            torch.tensor(z), torch.tensor(y),
            **{k: (torch.tensor(v) if k == "weight" else v) for k, v in kw.items()}).item()
        np.testing.assert_allclose(ours, theirs, rtol=1e-5)


@pytest.mark.parametrize("shape,mode,fan", [((512, 256), "fan_in", 256), ((64, 32, 3, 3), "fan_in", 288),
                                            ((64, 32, 3, 3), "fan_out", 576)])
def test_kaiming_normal_std(shape, mode, fan):
    mini.manual_seed(0)
    w = kaiming_normal_(mini.empty(*shape), mode=mode)
    a = w.numpy()
    assert abs(a.std() / np.sqrt(2 / fan) - 1) < 0.03
    assert abs(a.mean()) < 0.01
    with pytest.raises(ValueError):
        kaiming_normal_(mini.empty(5))


def test_parameter_discovery_matches_module_named_parameters():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = Conv2d(2, 3, 3, bias=False)
            self.bn = BatchNorm1d(3)
            self.scale = nn.Parameter(mini.ones(1))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(mini.zeros(2))
            self.blocks = nn.Sequential(Block(), Block())
            self.head = nn.Linear(3, 2)
            self.tied = self.head           # the same module twice
            self.extra = nn.Linear(3, 2)
            self.extra.weight = self.head.weight   # a shared parameter

    net = Net()
    got = named_parameters(net)
    want = list(net.named_parameters())
    assert [n for n, _ in got] == [n for n, _ in want]
    assert all(a is b for (_, a), (_, b) in zip(got, want))
    assert "blocks.0.conv.bias" not in dict(got)
    assert "extra.weight" not in dict(got) and "extra.bias" in dict(got)
    assert named_parameters(net, "model")[0][0] == "model.w"
