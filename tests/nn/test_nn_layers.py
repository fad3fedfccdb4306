"""Layers and containers: Linear against numpy (forward and backward), activations,
Flatten, Sequential / ModuleList / ModuleDict, and the initialisers."""
from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np
import pytest

import mini
from mini import nn
from mini.nn import init


# --- Linear --------------------------------------------------------------------------------------
def test_linear_shapes_and_default_init_bounds():
    mini.manual_seed(0)
    lin = nn.Linear(64, 32)
    assert tuple(lin.weight.shape) == (32, 64) and tuple(lin.bias.shape) == (32,)
    bound = 1 / math.sqrt(64)
    for p in (lin.weight, lin.bias):
        a = p.detach().numpy()
        assert a.min() >= -bound and a.max() <= bound
    # U(-b, b) has std b/sqrt(3)
    assert abs(lin.weight.detach().numpy().std() - bound / math.sqrt(3)) < 0.1 * bound
    assert nn.Linear(3, 2, bias=False).bias is None
    assert [n for n, _ in nn.Linear(3, 2, bias=False).named_parameters()] == ["weight"]


def test_linear_init_reproducible_with_manual_seed():
    mini.manual_seed(123)
    a = nn.Linear(5, 4)
    mini.manual_seed(123)
    b = nn.Linear(5, 4)
    np.testing.assert_array_equal(a.weight.detach().numpy(), b.weight.detach().numpy())
    np.testing.assert_array_equal(a.bias.detach().numpy(), b.bias.detach().numpy())
    c = nn.Linear(5, 4)
    assert not np.array_equal(a.weight.detach().numpy(), c.weight.detach().numpy())


@pytest.mark.parametrize("batch_shape", [(6,), (2, 3), ()])
def test_linear_forward_backward_against_numpy(batch_shape):
    mini.manual_seed(1)
    lin = nn.Linear(5, 3).double()
    x = mini.randn(*batch_shape, 5, dtype=mini.float64, requires_grad=True)
    y = lin(x)
    W = lin.weight.detach().numpy()
    b = lin.bias.detach().numpy()
    xn = x.detach().numpy()
    np.testing.assert_allclose(y.detach().numpy(), xn @ W.T + b, rtol=1e-12)
    g = np.random.default_rng(0).standard_normal(y.shape)
    y.backward(mini.tensor(g))
    np.testing.assert_allclose(x.grad.numpy(), g @ W, rtol=1e-12)
    g2, x2 = g.reshape(-1, 3), xn.reshape(-1, 5)
    np.testing.assert_allclose(lin.weight.grad.numpy(), g2.T @ x2, rtol=1e-12)
    np.testing.assert_allclose(lin.bias.grad.numpy(), g2.sum(0), rtol=1e-12)


def test_linear_gradcheck():
    lin = nn.Linear(3, 2).double()
    x = mini.randn(4, 3, dtype=mini.float64, requires_grad=True)
    assert mini.autograd.gradcheck(lambda x, w, b: nn.functional.linear(x, w, b),
                                   (x, lin.weight, lin.bias))


def test_linear_bad_input_names_both_shapes():
    with pytest.raises(ValueError, match=r"\(4, 7\).*\(2, 3\)"):
        nn.Linear(3, 2)(mini.randn(4, 7))


# --- activations, Flatten, Identity ------------------------------------------------------------------
def test_activations_against_numpy():
    x = mini.tensor([-3.0, -0.5, 0.0, 0.5, 3.0], dtype=mini.float64)
    xn = x.numpy()
    np.testing.assert_allclose(nn.ReLU()(x).numpy(), np.maximum(xn, 0))
    np.testing.assert_allclose(nn.Sigmoid()(x).numpy(), 1 / (1 + np.exp(-xn)), rtol=1e-12)
    np.testing.assert_allclose(nn.Tanh()(x).numpy(), np.tanh(xn), rtol=1e-12)
    from math import erf
    gelu = np.array([v * 0.5 * (1 + erf(v / math.sqrt(2))) for v in xn])
    np.testing.assert_allclose(nn.GELU()(x).numpy(), gelu, rtol=1e-7, atol=1e-12)
    tanh_gelu = 0.5 * xn * (1 + np.tanh(math.sqrt(2 / math.pi) * (xn + 0.044715 * xn ** 3)))
    np.testing.assert_allclose(nn.GELU("tanh")(x).numpy(), tanh_gelu, rtol=1e-12)
    assert nn.Identity(3, foo=1)(x) is x
    with pytest.raises(ValueError):
        nn.GELU("fast")


def test_relu_inplace():
    x = mini.tensor([-1.0, 2.0])
    y = nn.ReLU(inplace=True)(x)
    assert y is x
    np.testing.assert_array_equal(x.numpy(), [0.0, 2.0])


def test_flatten():
    x = mini.randn(2, 3, 4, 5)
    assert tuple(nn.Flatten()(x).shape) == (2, 60)
    assert tuple(nn.Flatten(0, 1)(x).shape) == (6, 4, 5)
    assert tuple(nn.Flatten(-2)(x).shape) == (2, 3, 20)


# --- containers --------------------------------------------------------------------------------------
def test_sequential_indexing_len_iteration_append():
    a, r, b = nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)
    seq = nn.Sequential(a, r, b)
    assert len(seq) == 3 and seq[0] is a and seq[-1] is b
    assert list(seq) == [a, r, b]
    sub = seq[1:]
    assert isinstance(sub, nn.Sequential) and list(sub) == [r, b]
    assert [k for k, _ in sub.named_children()] == ["1", "2"]
    x = mini.randn(4, 2)
    np.testing.assert_allclose(seq(x).detach().numpy(), b(r(a(x))).detach().numpy())
    seq.append(nn.Sigmoid())
    assert len(seq) == 4 and list(seq.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    with pytest.raises(IndexError):
        seq[4]
    del seq[0]
    assert [k for k, _ in seq.named_children()] == ["0", "1", "2"] and seq[0] is r
    seq.insert(0, a)
    assert seq[0] is a and len(seq) == 4
    seq[3] = nn.Tanh()
    assert isinstance(seq[3], nn.Tanh)
    named = nn.Sequential(OrderedDict([("fc", nn.Linear(2, 2)), ("act", nn.ReLU())]))
    assert list(named.state_dict()) == ["fc.weight", "fc.bias"]
    assert isinstance(named[1], nn.ReLU) and named.act is named[1]


def test_module_list():
    layers = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    assert len(layers) == 3 and len(list(layers.parameters())) == 6
    layers.append(nn.ReLU())
    layers.extend([nn.Tanh()])
    assert len(layers) == 5 and isinstance(layers[-1], nn.Tanh)
    assert isinstance(layers[1:3], nn.ModuleList) and len(layers[1:3]) == 2
    layers.insert(1, nn.Sigmoid())
    assert isinstance(layers[1], nn.Sigmoid) and len(layers) == 6
    del layers[1]
    assert [k for k, _ in layers.named_children()] == ["0", "1", "2", "3", "4"]
    assert isinstance(layers.pop(), nn.Tanh) and len(layers) == 4
    layers += [nn.GELU()]
    assert len(layers) == 5
    with pytest.raises(IndexError):
        layers[9]
    with pytest.raises(NotImplementedError):
        layers(mini.ones(1))


def test_module_dict():
    heads = nn.ModuleDict({"cls": nn.Linear(4, 3), "box": nn.Linear(4, 4)})
    assert list(heads) == ["cls", "box"] and "cls" in heads and len(heads) == 2
    assert list(heads.state_dict()) == ["cls.weight", "cls.bias", "box.weight", "box.bias"]
    heads["act"] = nn.ReLU()
    assert list(heads.keys()) == ["cls", "box", "act"]
    assert isinstance(heads.pop("act"), nn.ReLU)
    heads.update([("extra", nn.Identity())])
    assert [k for k, _ in heads.items()] == ["cls", "box", "extra"]
    assert isinstance(heads.extra, nn.Identity)


def test_containers_match_torch_keys():
    torch = pytest.importorskip("torch")
    t = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU(),
                            torch.nn.ModuleDict({"a": torch.nn.Linear(3, 3)}),
                            torch.nn.ModuleList([torch.nn.Linear(3, 1)]))
    m = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.ModuleDict({"a": nn.Linear(3, 3)}),
                      nn.ModuleList([nn.Linear(3, 1)]))
    assert list(m.state_dict()) == list(t.state_dict())
    assert [n for n, _ in m.named_modules()] == [n for n, _ in t.named_modules()]


# --- init ------------------------------------------------------------------------------------------
def test_calculate_gain_and_fans():
    assert init.calculate_gain("relu") == pytest.approx(math.sqrt(2))
    assert init.calculate_gain("tanh") == pytest.approx(5 / 3)
    assert init.calculate_gain("leaky_relu", math.sqrt(5)) == pytest.approx(math.sqrt(1 / 3))
    assert init.calculate_gain("conv2d") == 1 and init.calculate_gain("selu") == 0.75
    with pytest.raises(ValueError):
        init.calculate_gain("swish")
    assert init._calculate_fan_in_and_fan_out(mini.empty(8, 3, 5, 5)) == (75, 200)
    assert init._calculate_fan_in_and_fan_out(mini.empty(4, 6)) == (6, 4)
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        init._calculate_fan_in_and_fan_out(mini.empty(4))


def test_init_functions_in_place_and_statistics():
    mini.manual_seed(0)
    w = nn.Parameter(mini.empty(400, 300))
    v = w._version
    assert init.kaiming_normal_(w, nonlinearity="relu") is w
    assert w._version > v and w.grad_fn is None and w.requires_grad
    assert w.detach().numpy().std() == pytest.approx(math.sqrt(2 / 300), rel=0.02)
    init.kaiming_uniform_(w, mode="fan_out", nonlinearity="relu")
    assert np.abs(w.detach().numpy()).max() <= math.sqrt(6 / 400)
    assert w.detach().numpy().std() == pytest.approx(math.sqrt(2 / 400), rel=0.02)
    init.xavier_uniform_(w)
    bound = math.sqrt(6 / 700)
    assert np.abs(w.detach().numpy()).max() <= bound
    init.xavier_normal_(w, gain=2.0)
    assert w.detach().numpy().std() == pytest.approx(2 * math.sqrt(2 / 700), rel=0.02)
    init.normal_(w, mean=3.0, std=0.5)
    assert w.detach().numpy().mean() == pytest.approx(3.0, abs=0.01)
    init.uniform_(w, -2.0, -1.0)
    assert w.detach().numpy().min() >= -2.0 and w.detach().numpy().max() <= -1.0
    init.constant_(w, 0.25)
    assert np.all(w.detach().numpy() == 0.25)
    init.ones_(w)
    assert np.all(w.detach().numpy() == 1)
    init.zeros_(w)
    assert not w.detach().numpy().any()


def test_init_reproducible():
    mini.manual_seed(5)
    a = init.xavier_normal_(mini.empty(3, 4)).numpy().copy()
    mini.manual_seed(5)
    b = init.xavier_normal_(mini.empty(3, 4)).numpy()
    np.testing.assert_array_equal(a, b)
