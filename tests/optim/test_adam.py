"""Adam, AdamW, the schedulers and clip_grad_norm_: against PyTorch and by their rules."""
from __future__ import annotations

import math

import numpy as np
import pytest

import mini
from mini import nn
from mini.nn.utils import clip_grad_norm_
from mini.optim import SGD
from mini.optim import lr_scheduler as S
from mini.optim.adam import Adam, AdamW, adamw_step


def _pair(torch, shapes, dtype, seed=0):
    rng = np.random.default_rng(seed)
    init = [rng.normal(size=s).astype(dtype) for s in shapes]
    ours = [nn.Parameter(mini.tensor(a)) for a in init]
    theirs = [torch.nn.Parameter(torch.tensor(a)) for a in init]
    return ours, theirs


@pytest.mark.parametrize("cls_name,kw,dtype", [
    ("Adam", dict(lr=1e-2), np.float32),
    ("Adam", dict(lr=1e-2, weight_decay=0.1, betas=(0.8, 0.99)), np.float64),
    ("AdamW", dict(lr=1e-2), np.float32),
    ("AdamW", dict(lr=3e-2, weight_decay=0.5, eps=1e-6), np.float64),
    ("AdamW", dict(lr=1e-2, weight_decay=0.1, maximize=True), np.float32),
])
def test_adam_matches_torch(cls_name, kw, dtype):
    torch = pytest.importorskip("torch")
    shapes = [(4, 3), (3,), (2, 2, 2)]
    ours, theirs = _pair(torch, shapes, dtype)
    opt_m = {"Adam": Adam, "AdamW": AdamW}[cls_name](ours, **kw)
    opt_t = getattr(torch.optim, cls_name)(theirs, **kw)
    rng = np.random.default_rng(1)
    for _ in range(12):
        for pm, pt in zip(ours, theirs):
            g = rng.normal(size=tuple(pm.shape)).astype(dtype)
            pm.grad = mini.tensor(g)
            pt.grad = torch.tensor(g)
        opt_m.step()
        opt_t.step()
    for pm, pt in zip(ours, theirs):
        np.testing.assert_allclose(pm.detach().numpy(), pt.detach().numpy(), rtol=1e-5, atol=1e-6)
        sm, st = opt_m.state[pm], opt_t.state[pt]
        np.testing.assert_allclose(sm["exp_avg_sq"].numpy(), st["exp_avg_sq"].numpy(), rtol=1e-5,
                                   atol=1e-7)
        assert sm["step"] == int(st["step"])


def test_l2_is_not_weight_decay_under_adam():
    """Same gradients, same decay coefficient: Adam's L2 goes through the adaptive
    denominator, AdamW's decay does not, so the weights end up different."""
    a = nn.Parameter(mini.tensor([1.0, 1.0]))
    b = nn.Parameter(mini.tensor([1.0, 1.0]))
    oa, ob = Adam([a], lr=0.1, weight_decay=0.1), AdamW([b], lr=0.1, weight_decay=0.1)
    for _ in range(20):
        for p in (a, b):
            p.grad = mini.tensor([100.0, 0.001])   # one large and one tiny gradient
        oa.step()
        ob.step()
    assert not np.allclose(a.detach().numpy(), b.detach().numpy(), atol=1e-3)
    # AdamW: the decay is the same relative shrink for both coordinates
    shrink = (1 - 0.1 * 0.1) ** 20
    moved = b.detach().numpy() - shrink  # Adam part, equal for both coordinates' signs
    assert moved[0] < 0 and moved[1] < 0


def test_adamw_step_first_step_is_lr_times_sign():
    p, g = mini.tensor([1.0, -2.0]), mini.tensor([0.3, -5.0])
    m, v = mini.zeros(2), mini.zeros(2)
    adamw_step(p, g, m, v, 1, 0.1, 0.9, 0.999, 1e-12, 0.0)
    np.testing.assert_allclose(p.numpy(), [0.9, -1.9], rtol=1e-6)  # bias correction at work


def test_optimizer_state_dict_roundtrip_continues_identically():
    rng = np.random.default_rng(0)
    init = rng.normal(size=(3, 2)).astype(np.float32)
    grads = [rng.normal(size=(3, 2)).astype(np.float32) for _ in range(6)]
    p1 = nn.Parameter(mini.tensor(init))
    o1 = AdamW([p1], lr=0.01)
    for g in grads[:3]:
        p1.grad = mini.tensor(g)
        o1.step()
    p2 = nn.Parameter(mini.tensor(p1.detach().numpy()))
    o2 = AdamW([p2], lr=0.5)
    o2.load_state_dict(o1.state_dict())
    assert o2.param_groups[0]["lr"] == 0.01
    for g in grads[3:]:
        for p, o in ((p1, o1), (p2, o2)):
            p.grad = mini.tensor(g)
            o.step()
    np.testing.assert_array_equal(p1.detach().numpy(), p2.detach().numpy())


# --------------------------------------------------------------------------- schedulers

def _lrs(sched, opt, n):
    out = []
    for _ in range(n):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def _torch_opt(torch, lr=0.1):
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)


def _mini_opt(lr=0.1):
    return SGD([nn.Parameter(mini.zeros(1))], lr=lr)


@pytest.mark.parametrize("name", ["step", "cosine", "linear", "sequential", "multistep", "exp"])
def test_schedulers_match_torch(name):
    torch = pytest.importorskip("torch")
    T = torch.optim.lr_scheduler

    def build(lib, opt):
        if name == "step":
            return lib.StepLR(opt, step_size=3, gamma=0.5)
        if name == "cosine":
            return lib.CosineAnnealingLR(opt, T_max=10, eta_min=0.01)
        if name == "linear":
            return lib.LinearLR(opt, start_factor=0.25, total_iters=4)
        if name == "multistep":
            return lib.MultiStepLR(opt, milestones=[2, 5], gamma=0.3)
        if name == "exp":
            return lib.ExponentialLR(opt, gamma=0.9)
        warm = lib.LinearLR(opt, start_factor=0.2, total_iters=3)
        cos = lib.CosineAnnealingLR(opt, T_max=8, eta_min=0.001)
        return lib.SequentialLR(opt, [warm, cos], milestones=[4])

    om, ot = _mini_opt(), _torch_opt(torch)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sm, st = build(S, om), build(T, ot)
        got, want = _lrs(sm, om, 12), _lrs(st, ot, 12)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-9)


def test_warmup_cosine_matches_torch_sequential_linear_cosine():
    torch = pytest.importorskip("torch")
    T = torch.optim.lr_scheduler
    warmup, total, base, floor = 5, 20, 0.1, 0.001
    ot = _torch_opt(torch, base)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        st = T.SequentialLR(ot, [T.LinearLR(ot, start_factor=1 / warmup, total_iters=warmup - 1),
                                 T.CosineAnnealingLR(ot, T_max=total - warmup, eta_min=floor)],
                            milestones=[warmup])
        want = _lrs(st, ot, total + 1)
    om = _mini_opt(base)
    got = _lrs(S.WarmupCosineLR(om, warmup, total, min_lr=floor), om, total + 1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-9)
    assert got[0] == pytest.approx(base / warmup)          # the first step already learns
    assert got[warmup - 1] == pytest.approx(base)
    assert got[total] == pytest.approx(floor)
    assert S.warmup_cosine(100, base, warmup, total, floor) == pytest.approx(floor)
    assert S.warmup_cosine(3, base, 0, 10) == pytest.approx(base * (1 + math.cos(math.pi * 0.3)) / 2)


def test_scheduler_state_dict_resumes_exactly():
    o1 = _mini_opt(0.1)
    s1 = S.WarmupCosineLR(o1, 3, 10)
    _lrs(s1, o1, 4)
    o2 = _mini_opt(0.1)
    s2 = S.WarmupCosineLR(o2, 3, 10)
    s2.load_state_dict(s1.state_dict())
    o2.load_state_dict(o1.state_dict())
    assert _lrs(s1, o1, 6) == _lrs(s2, o2, 6)
    seq_o = _mini_opt()
    seq = S.SequentialLR(seq_o, [S.LinearLR(seq_o, 0.5, total_iters=2),
                                 S.StepLR(seq_o, 2)], milestones=[3])
    state = seq.state_dict()
    assert isinstance(state["_schedulers"], list) and "optimizer" not in state


def test_clip_grad_norm_matches_torch():
    torch = pytest.importorskip("torch")
    ours, theirs = _pair(torch, [(3, 4), (5,)], np.float32)
    rng = np.random.default_rng(2)
    for pm, pt in zip(ours, theirs):
        g = rng.normal(size=tuple(pm.shape)).astype(np.float32) * 3
        pm.grad, pt.grad = mini.tensor(g), torch.tensor(g)
    for max_norm, norm_type in [(100.0, 2.0), (1.0, 2.0), (0.5, float("inf"))]:
        nm = clip_grad_norm_(ours, max_norm, norm_type).item()
        nt = torch.nn.utils.clip_grad_norm_(theirs, max_norm, norm_type).item()
        assert nm == pytest.approx(nt, rel=1e-5)
        for pm, pt in zip(ours, theirs):
            np.testing.assert_allclose(pm.grad.numpy(), pt.grad.numpy(), rtol=1e-5, atol=1e-7)
