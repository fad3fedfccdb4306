"""mini.nn.functional: values and gradients against numpy formulas, stability for large
logits, clear errors; and (where PyTorch is installed) against torch.nn.functional."""
from __future__ import annotations

import numpy as np
import pytest

import mini
import mini.nn.functional as F


def _np_log_softmax(x, axis):
    m = x.max(axis=axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


def test_softmax_and_log_softmax_against_numpy():
    x = np.random.default_rng(0).standard_normal((4, 5))
    t = mini.tensor(x)
    for dim in (0, 1, -1):
        ls = _np_log_softmax(x, dim)
        np.testing.assert_allclose(F.log_softmax(t, dim).numpy(), ls, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(F.softmax(t, dim).numpy(), np.exp(ls), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(F.softmax(t, 1).numpy().sum(1), np.ones(4), rtol=1e-6)


def test_softmax_gradient_rows_sum_to_zero():
    x = mini.randn(3, 4, dtype=mini.float64, requires_grad=True)
    assert mini.autograd.gradcheck(lambda x: F.softmax(x, 1), (x,))
    assert mini.autograd.gradcheck(lambda x: F.log_softmax(x, 0), (x,))


def test_large_logits_stay_finite():
    logits = mini.tensor([[1000.0, 0.0, -1000.0], [1000.0, 1000.0, 1000.0]], requires_grad=True)
    target = mini.tensor([1, 2])
    p = F.softmax(logits, 1)
    assert np.isfinite(p.detach().numpy()).all()
    np.testing.assert_allclose(p.detach().numpy()[1], [1 / 3] * 3, rtol=1e-6)
    loss = F.cross_entropy(logits, target)
    loss.backward()
    # row 0: -log p(class 1) = 1000; row 1: log 3
    assert loss.item() == pytest.approx((1000.0 + np.log(3)) / 2, rel=1e-6)
    assert np.isfinite(logits.grad.numpy()).all()


def test_cross_entropy_against_numpy_and_gradient():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 4))
    y = rng.integers(0, 4, size=6)
    logits = mini.tensor(x, requires_grad=True)
    loss = F.cross_entropy(logits, mini.tensor(y))
    ls = _np_log_softmax(x, 1)
    assert loss.item() == pytest.approx(-ls[np.arange(6), y].mean(), rel=1e-6)
    loss.backward()
    expected = np.exp(ls)
    expected[np.arange(6), y] -= 1
    np.testing.assert_allclose(logits.grad.numpy(), expected / 6, rtol=1e-5, atol=1e-7)
    assert F.nll_loss(mini.tensor(ls), mini.tensor(y)).item() == pytest.approx(loss.item())


def test_cross_entropy_reductions_and_ignore_index():
    x = mini.randn(5, 3)
    y = mini.tensor([0, 2, -100, 1, 2])
    per = F.cross_entropy(x, y, reduction="none")
    assert tuple(per.shape) == (5,) and per[2].item() == 0.0
    keep = [0, 1, 3, 4]
    assert F.cross_entropy(x, y).item() == pytest.approx(per.numpy()[keep].mean(), rel=1e-6)
    assert F.cross_entropy(x, y, reduction="sum").item() == pytest.approx(per.numpy().sum(),
                                                                         rel=1e-6)
    with pytest.raises(ValueError, match="reduction"):
        F.cross_entropy(x, y, reduction="avg")


def test_loss_errors_are_clear():
    x = mini.randn(4, 3)
    with pytest.raises(TypeError, match="int64"):
        F.cross_entropy(x, mini.tensor([0.0, 1.0, 2.0, 1.0]).reshape(4))
    with pytest.raises(ValueError, match=r"expected target of shape \(4,\)"):
        F.cross_entropy(x, mini.tensor([0, 1]))
    with pytest.raises(IndexError, match="target 3 is out of bounds for 3 classes"):
        F.cross_entropy(x, mini.tensor([0, 1, 3, 0]))


def test_mse_loss():
    a = mini.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = mini.tensor([1.0, 0.0, 0.0])
    loss = F.mse_loss(a, b)
    assert loss.item() == pytest.approx(13 / 3)
    loss.backward()
    np.testing.assert_allclose(a.grad.numpy(), [0, 4 / 3, 2.0], rtol=1e-6)
    assert F.mse_loss(a, b, reduction="sum").item() == pytest.approx(13)
    np.testing.assert_allclose(F.mse_loss(a, b, reduction="none").detach().numpy(), [0, 4, 9])


def test_loss_modules_wrap_functions():
    from mini import nn
    x, y = mini.randn(4, 3), mini.tensor([0, 1, 2, 0])
    assert nn.CrossEntropyLoss()(x, y).item() == pytest.approx(F.cross_entropy(x, y).item())
    assert nn.NLLLoss(reduction="sum")(F.log_softmax(x, 1), y).item() == pytest.approx(
        F.cross_entropy(x, y, reduction="sum").item(), rel=1e-6)
    assert nn.MSELoss()(x, x * 0).item() == pytest.approx(float((x * x).mean()))


# --- differential tests against PyTorch -----------------------------------------------------------
def _both(torch, array, requires_grad=True):
    return (mini.tensor(array, requires_grad=requires_grad),
            torch.tensor(array, requires_grad=requires_grad))


LOSS_CASES = [
    dict(),
    dict(reduction="sum"),
    dict(reduction="none"),
    dict(ignore_index=1),
    dict(weight=[0.2, 1.0, 3.0, 0.5]),
    dict(weight=[0.2, 1.0, 3.0, 0.5], ignore_index=2, reduction="mean"),
    dict(label_smoothing=0.1),
    dict(label_smoothing=0.2, weight=[0.2, 1.0, 3.0, 0.5], ignore_index=0),
    dict(label_smoothing=0.2, reduction="sum"),
    dict(label_smoothing=0.3, reduction="none", ignore_index=3),
]


@pytest.mark.parametrize("kwargs", LOSS_CASES, ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()) or "default")
def test_cross_entropy_matches_torch(kwargs):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((7, 4)) * 3).astype(np.float32)
    y = rng.integers(0, 4, size=7)
    mx, tx = _both(torch, x)
    kw_m, kw_t = dict(kwargs), dict(kwargs)
    if "weight" in kwargs:
        kw_m["weight"] = mini.tensor(kwargs["weight"])
        kw_t["weight"] = torch.tensor(kwargs["weight"])
    lm = F.cross_entropy(mx, mini.tensor(y), **kw_m)
    lt = torch.nn.functional.cross_entropy(tx, torch.tensor(y), **kw_t)
    np.testing.assert_allclose(lm.detach().numpy(), lt.detach().numpy(), rtol=1e-5, atol=1e-6)
    lm.sum().backward()
    lt.sum().backward()
    np.testing.assert_allclose(mx.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)
    # nll_loss on the same log-probabilities
    if not kwargs.get("label_smoothing"):
        lp = _np_log_softmax(x.astype(np.float64), 1)
        nm = F.nll_loss(mini.tensor(lp), mini.tensor(y), **kw_m)
        kw_t2 = dict(kw_t)
        if "weight" in kw_t2:
            kw_t2["weight"] = kw_t2["weight"].double()
        nt = torch.nn.functional.nll_loss(torch.tensor(lp), torch.tensor(y), **kw_t2)
        np.testing.assert_allclose(nm.numpy(), nt.numpy(), rtol=1e-10)


def test_cross_entropy_spatial_probabilities_and_unbatched_match_torch():
    torch = pytest.importorskip("torch")
    TF = torch.nn.functional
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    y = rng.integers(0, 3, size=(2, 4, 5))
    mx, tx = _both(torch, x)
    lm = F.cross_entropy(mx, mini.tensor(y), label_smoothing=0.05)
    lt = TF.cross_entropy(tx, torch.tensor(y), label_smoothing=0.05)
    assert lm.item() == pytest.approx(lt.item(), rel=1e-5)
    lm.backward()
    lt.backward()
    np.testing.assert_allclose(mx.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-7)
    probs = rng.dirichlet(np.ones(3), size=6).astype(np.float32)
    x2 = rng.standard_normal((6, 3)).astype(np.float32)
    for kw in (dict(), dict(label_smoothing=0.1), dict(reduction="sum")):
        a = F.cross_entropy(mini.tensor(x2), mini.tensor(probs), **kw).item()
        b = TF.cross_entropy(torch.tensor(x2), torch.tensor(probs), **kw).item()
        assert a == pytest.approx(b, rel=1e-5), kw
    v = rng.standard_normal(5).astype(np.float32)
    a = F.cross_entropy(mini.tensor(v), mini.tensor(3)).item()
    b = TF.cross_entropy(torch.tensor(v), torch.tensor(3)).item()
    assert a == pytest.approx(b, rel=1e-5)


def test_large_logits_match_torch():
    torch = pytest.importorskip("torch")
    x = np.array([[1000.0, -1000.0, 0.0, 999.0], [-1000.0, -1000.0, -999.0, -1000.0]],
                 dtype=np.float32)
    y = np.array([3, 0])
    mx, tx = _both(torch, x)
    lm = F.cross_entropy(mx, mini.tensor(y))
    lt = torch.nn.functional.cross_entropy(tx, torch.tensor(y))
    assert lm.item() == pytest.approx(lt.item(), rel=1e-5)
    lm.backward()
    lt.backward()
    np.testing.assert_allclose(mx.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)
    for dim in (0, 1):
        np.testing.assert_allclose(F.log_softmax(mini.tensor(x), dim).numpy(),
                                   torch.log_softmax(torch.tensor(x), dim).numpy(), rtol=1e-5)
        np.testing.assert_allclose(F.softmax(mini.tensor(x), dim).numpy(),
                                   torch.softmax(torch.tensor(x), dim).numpy(), atol=1e-7)


@pytest.mark.parametrize("name", ["relu", "sigmoid", "tanh", "gelu", "gelu_tanh", "softmax",
                                  "log_softmax", "mse_loss", "mse_none", "l1_loss"])
def test_functions_match_torch(name):
    torch = pytest.importorskip("torch")
    TF = torch.nn.functional
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((3, 5)) * 2).astype(np.float32)
    t = rng.standard_normal((3, 5)).astype(np.float32)
    fns = {
        "relu": (F.relu, TF.relu),
        "sigmoid": (F.sigmoid, torch.sigmoid),
        "tanh": (F.tanh, torch.tanh),
        "gelu": (F.gelu, TF.gelu),
        "gelu_tanh": (lambda a: F.gelu(a, approximate="tanh"),
                      lambda a: TF.gelu(a, approximate="tanh")),
        "softmax": (lambda a: F.softmax(a, dim=0), lambda a: TF.softmax(a, dim=0)),
        "log_softmax": (lambda a: F.log_softmax(a, dim=1), lambda a: TF.log_softmax(a, dim=1)),
        "mse_loss": (lambda a: F.mse_loss(a, mini.tensor(t)),
                     lambda a: TF.mse_loss(a, torch.tensor(t))),
        "mse_none": (lambda a: F.mse_loss(a, mini.tensor(t), reduction="none"),
                     lambda a: TF.mse_loss(a, torch.tensor(t), reduction="none")),
        "l1_loss": (lambda a: F.l1_loss(a, mini.tensor(t)),
                    lambda a: TF.l1_loss(a, torch.tensor(t))),
    }
    fm, ft = fns[name]
    mx, tx = _both(torch, x)
    ym, yt = fm(mx), ft(tx)
    np.testing.assert_allclose(ym.detach().numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-6)
    w = rng.standard_normal(tuple(yt.shape)).astype(np.float32)
    (ym * mini.tensor(w)).sum().backward()
    (yt * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(mx.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_linear_module_matches_torch_with_same_weights():
    torch = pytest.importorskip("torch")
    from mini import nn
    tl = torch.nn.Linear(6, 4)
    ml = nn.Linear(6, 4)
    ml.load_state_dict({k: mini.tensor(v.detach().numpy()) for k, v in tl.state_dict().items()})
    x = np.random.default_rng(5).standard_normal((3, 6)).astype(np.float32)
    mx, tx = _both(torch, x)
    ym, yt = ml(mx), tl(tx)
    np.testing.assert_allclose(ym.detach().numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-6)
    ym.sum().backward()
    yt.sum().backward()
    np.testing.assert_allclose(ml.weight.grad.numpy(), tl.weight.grad.numpy(), rtol=1e-5)
    np.testing.assert_allclose(ml.bias.grad.numpy(), tl.bias.grad.numpy(), rtol=1e-5)
    np.testing.assert_allclose(mx.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_one_hot_matches_torch():
    torch = pytest.importorskip("torch")
    idx = np.array([[0, 2], [1, 3]])
    np.testing.assert_array_equal(F.one_hot(mini.tensor(idx)).numpy(),
                                  torch.nn.functional.one_hot(torch.tensor(idx)).numpy())
    assert tuple(F.one_hot(mini.tensor([1]), num_classes=5).shape) == (1, 5)
    with pytest.raises(TypeError, match="index tensors"):
        F.one_hot(mini.tensor([1.0]))


def test_nll_loss_ignores_minus_inf_in_other_classes():
    torch = pytest.importorskip("torch")
    y = np.array([1, 0])
    with np.errstate(all="ignore"):
        lp = np.log(np.array([[0.0, 0.5, 0.5], [0.25, 0.75, 0.0]]))  # -inf where p == 0
        m = mini.tensor(lp, requires_grad=True)
        t = torch.tensor(lp, requires_grad=True)
        lm = F.nll_loss(m, mini.tensor(y))
        lt = torch.nn.functional.nll_loss(t, torch.tensor(y))
        lm.backward()
        lt.backward()
    assert np.isfinite(lm.item()) and lm.item() == pytest.approx(lt.item())
    np.testing.assert_array_equal(m.grad.numpy(), t.grad.numpy())
