"""SGD: the update rule by hand and against torch.optim.SGD, param groups, state_dict
round trips, and a small MLP that learns."""
from __future__ import annotations

import copy

import numpy as np
import pytest

import mini
import mini.nn.functional as F
from mini import nn, optim


def test_plain_sgd_step_by_hand():
    p = nn.Parameter(mini.tensor([1.0, -2.0]))
    opt = optim.SGD([p], lr=0.1)
    p.grad = mini.tensor([0.5, 1.0])
    v = p._version
    opt.step()
    np.testing.assert_allclose(p.detach().numpy(), [0.95, -2.1], rtol=1e-6)
    assert p._version > v  # updated in place
    assert p.grad_fn is None and p.is_leaf and p.requires_grad
    assert len(opt.state) == 0  # no momentum, no state


def test_momentum_buffer_starts_at_first_gradient():
    p = nn.Parameter(mini.tensor([0.0]))
    opt = optim.SGD([p], lr=1.0, momentum=0.9, dampening=0.5)
    p.grad = mini.tensor([2.0])
    opt.step()  # buf = g = 2 (no dampening on the first step)
    assert opt.state[p]["momentum_buffer"].item() == pytest.approx(2.0)
    assert p.item() == pytest.approx(-2.0)
    p.grad = mini.tensor([2.0])
    opt.step()  # buf = 0.9*2 + 0.5*2 = 2.8
    assert opt.state[p]["momentum_buffer"].item() == pytest.approx(2.8)
    assert p.item() == pytest.approx(-4.8)


def test_update_records_no_graph_and_skips_params_without_grad():
    a = nn.Parameter(mini.ones(2))
    b = nn.Parameter(mini.ones(2))
    opt = optim.SGD([a, b], lr=0.5, momentum=0.9, weight_decay=0.1)
    (a * 3).sum().backward()
    opt.step()
    assert a.grad_fn is None and b.grad_fn is None
    np.testing.assert_allclose(b.detach().numpy(), [1, 1])
    assert b not in opt.state and "momentum_buffer" in opt.state[a]


def test_zero_grad():
    p = nn.Parameter(mini.ones(3))
    opt = optim.SGD([p], lr=0.1)
    p.sum().backward()
    opt.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(p.grad.numpy(), [0, 0, 0])
    opt.zero_grad()
    assert p.grad is None


def test_closure_returns_loss():
    p = nn.Parameter(mini.tensor([3.0]))
    opt = optim.SGD([p], lr=0.1)

    def closure():
        opt.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        return loss
    with mini.no_grad():  # step enables grad for the closure, as in PyTorch
        loss = opt.step(closure)
    assert loss.item() == pytest.approx(9.0)
    assert p.item() == pytest.approx(3.0 - 0.1 * 6.0)


def test_param_groups_have_their_own_options():
    a, b = nn.Parameter(mini.ones(1)), nn.Parameter(mini.ones(1))
    opt = optim.SGD([{"params": [a]}, {"params": [b], "lr": 1.0}], lr=0.1, momentum=0.5)
    assert opt.param_groups[0]["lr"] == 0.1 and opt.param_groups[1]["lr"] == 1.0
    assert opt.param_groups[1]["momentum"] == 0.5
    a.grad, b.grad = mini.ones(1), mini.ones(1)
    opt.step()
    assert a.item() == pytest.approx(0.9) and b.item() == pytest.approx(0.0)
    opt.param_groups[0]["lr"] = 0.0  # schedulers change lr like this
    opt.step()
    assert a.item() == pytest.approx(0.9)
    c = nn.Parameter(mini.ones(1))
    opt.add_param_group({"params": c, "lr": 2.0})
    assert opt.param_groups[2]["momentum"] == 0.5 and opt.param_groups[2]["params"] == [c]


def test_constructor_errors():
    p = nn.Parameter(mini.ones(1))
    with pytest.raises(ValueError, match="Invalid learning rate"):
        optim.SGD([p], lr=-1)
    with pytest.raises(ValueError, match="Invalid momentum"):
        optim.SGD([p], lr=0.1, momentum=-0.5)
    with pytest.raises(ValueError, match="Nesterov momentum requires"):
        optim.SGD([p], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.SGD([], lr=0.1)
    with pytest.raises(TypeError, match="iterable of Tensors"):
        optim.SGD(p, lr=0.1)
    with pytest.raises(ValueError, match="more than one parameter group"):
        optim.SGD([{"params": [p]}, {"params": [p]}], lr=0.1)
    with pytest.raises(ValueError, match="non-leaf"):
        optim.SGD([p * 2], lr=0.1)
    assert optim.SGD(nn.Linear(2, 2).parameters()).defaults["lr"] == 1e-3


SGD_CONFIGS = [
    dict(lr=0.1),
    dict(lr=0.05, momentum=0.9),
    dict(lr=0.05, momentum=0.9, dampening=0.3),
    dict(lr=0.05, momentum=0.9, nesterov=True),
    dict(lr=0.05, weight_decay=0.01),
    dict(lr=0.02, momentum=0.8, weight_decay=0.05, nesterov=True),
    dict(lr=0.02, momentum=0.5, weight_decay=0.1, dampening=0.1, maximize=True),
]


@pytest.mark.parametrize("cfg", SGD_CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_sgd_matches_torch(cfg):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    init = [rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32)]
    mp = [nn.Parameter(mini.tensor(a)) for a in init]
    tp = [torch.nn.Parameter(torch.tensor(a)) for a in init]
    mopt = optim.SGD(mp, **cfg)
    topt = torch.optim.SGD(tp, **cfg)
    for _ in range(8):
        mopt.zero_grad()
        topt.zero_grad()
        (sum(((p * p * p) / 3 + p).sum() for p in mp)).backward()
        (sum(((p * p * p) / 3 + p).sum() for p in tp)).backward()
        mopt.step()
        topt.step()
        for a, b in zip(mp, tp):
            np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-5)
    if cfg.get("momentum"):
        for a, b in zip(mp, tp):
            np.testing.assert_allclose(mopt.state[a]["momentum_buffer"].numpy(),
                                       topt.state[b]["momentum_buffer"].numpy(), rtol=1e-5, atol=1e-5)
    # same state_dict layout as PyTorch
    ms, ts = mopt.state_dict(), topt.state_dict()
    assert ms["param_groups"] == ts["param_groups"]
    assert list(ms["state"]) == list(ts["state"])
    for k in ts["state"]:
        assert list(ms["state"][k]) == list(ts["state"][k])


def test_mlp_training_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    X = rng.standard_normal((16, 3)).astype(np.float32)
    Y = rng.integers(0, 3, size=16)
    m = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 3))
    t = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    m.load_state_dict({k: mini.tensor(v.detach().numpy()) for k, v in t.state_dict().items()})
    mo = optim.SGD(m.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3)
    to = torch.optim.SGD(t.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3)
    for _ in range(10):
        mo.zero_grad()
        to.zero_grad()
        lm = F.cross_entropy(m(mini.tensor(X)), mini.tensor(Y))
        lt = torch.nn.functional.cross_entropy(t(torch.tensor(X)), torch.tensor(Y))
        assert lm.item() == pytest.approx(lt.item(), rel=1e-4, abs=1e-5)
        lm.backward()
        lt.backward()
        mo.step()
        to.step()
    for (k, a), (_, b) in zip(m.state_dict().items(), t.state_dict().items()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-5, err_msg=k)


# --- state_dict --------------------------------------------------------------------------------------
def _train_steps(model, opt, X, Y, n):
    losses = []
    for _ in range(n):
        opt.zero_grad()
        loss = F.mse_loss(model(X), Y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_state_dict_round_trip_continues_identically():
    mini.manual_seed(0)
    X, Y = mini.randn(12, 4), mini.randn(12, 2)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2))
    opt = optim.SGD([{"params": model[0].parameters()},
                     {"params": model[2].parameters(), "lr": 0.02}],
                    lr=0.05, momentum=0.9, nesterov=True)
    _train_steps(model, opt, X, Y, 3)

    # checkpoint: model and optimizer state into fresh objects
    model_sd = copy.deepcopy(model.state_dict())
    opt_sd = copy.deepcopy(opt.state_dict())
    assert sorted(opt_sd["state"]) == [0, 1, 2, 3]
    assert opt_sd["param_groups"][1]["params"] == [2, 3]
    assert opt_sd["param_groups"][1]["lr"] == 0.02

    model2 = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2))
    opt2 = optim.SGD([{"params": model2[0].parameters()},
                      {"params": model2[2].parameters()}], lr=0.5)
    model2.load_state_dict(model_sd)
    opt2.load_state_dict(opt_sd)
    assert opt2.param_groups[1]["lr"] == 0.02 and opt2.param_groups[0]["nesterov"]
    assert opt2.param_groups[0]["params"][0] is model2[0].weight
    buf1 = opt.state[model[0].weight]["momentum_buffer"]
    buf2 = opt2.state[model2[0].weight]["momentum_buffer"]
    assert buf2 is not buf1
    np.testing.assert_array_equal(buf1.numpy(), buf2.numpy())

    l1 = _train_steps(model, opt, X, Y, 4)
    l2 = _train_steps(model2, opt2, X, Y, 4)
    assert l1 == l2
    for (k, a), (_, b) in zip(model.state_dict().items(), model2.state_dict().items()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=k)


def test_load_state_dict_errors():
    a = nn.Parameter(mini.ones(2))
    b = nn.Parameter(mini.ones(2))
    sd = optim.SGD([a, b], lr=0.1).state_dict()
    with pytest.raises(ValueError, match="doesn't match the size"):
        optim.SGD([a], lr=0.1).load_state_dict(sd)
    with pytest.raises(ValueError, match="different number of parameter groups"):
        optim.SGD([{"params": [a]}, {"params": [b]}], lr=0.1).load_state_dict(sd)


def test_optimizer_repr():
    opt = optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1, momentum=0.9)
    text = repr(opt)
    assert text.startswith("SGD (\nParameter Group 0\n") and "    momentum: 0.9" in text


# --- learning ----------------------------------------------------------------------------------------
def test_mlp_learns_xor():
    mini.manual_seed(0)
    X = mini.tensor([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    y = mini.tensor([0, 1, 1, 0])
    model = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(300):
        opt.zero_grad()
        loss = F.cross_entropy(model(X), y)
        loss.backward()
        opt.step()
    assert loss.item() < 0.05
    assert model(X).argmax(dim=1).tolist() == [0, 1, 1, 0]


def test_mlp_separates_blobs():
    rng = np.random.default_rng(0)
    pts = np.concatenate([rng.normal(-2, 0.7, (50, 2)), rng.normal(2, 0.7, (50, 2))])
    labels = np.array([0] * 50 + [1] * 50)
    X, y = mini.tensor(pts.astype(np.float32)), mini.tensor(labels)
    mini.manual_seed(1)
    model = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 2))
    opt = optim.SGD(model.parameters(), lr=0.2, momentum=0.9, weight_decay=1e-4)
    first = None
    for _ in range(60):
        opt.zero_grad()
        loss = F.cross_entropy(model(X), y)
        first = loss.item() if first is None else first
        loss.backward()
        opt.step()
    assert loss.item() < 0.1 < first
    assert (model(X).argmax(dim=1).numpy() == labels).mean() >= 0.98
