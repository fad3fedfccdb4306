"""mini.nn.functional against torch.nn.functional, in float64: every function of a
PyTorch-style CNN/MLP script, called with the same arguments on both frameworks, gives the
same values, the same gradients (for a random upstream gradient) and, for the smooth ones,
the same second derivatives.

Each case is one expression ``fn(F, lib, *tensors)`` run with ``F = mini.nn.functional,
lib = mini`` and with ``F = torch.nn.functional, lib = torch``: mini speaks PyTorch's API,
so the very same call runs on both.  Skipped when torch is not installed."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mini  # noqa: E402
import mini.nn.functional as MF  # noqa: E402

TF = torch.nn.functional
pytestmark = pytest.mark.torch

# float64 on inputs of a few dozen elements: the two frameworks differ only in the order of
# short sums (round-off ~1e-15 relative per operation), so 1e-9 leaves a wide margin while
# any wrong formula is off by far more.
TOL = dict(rtol=1e-9, atol=1e-11)


def _away(rng, shape, lo=0.1, hi=2.0):
    """Values at least ``lo`` away from 0 (the kink of relu, abs, leaky_relu, ...)."""
    return rng.choice([-1.0, 1.0], shape) * rng.uniform(lo, hi, shape)


@dataclass
class Case:
    id: str
    fn: Callable                       # fn(F, lib, *tensors)
    inputs: list                       # numpy arrays; floating ones require grad
    second_order: bool = False         # also compare a second derivative
    constant: tuple = ()               # positions of inputs that take no gradient
    marks: list = field(default_factory=list)


def _cases():
    r = np.random.default_rng(0)
    img = r.standard_normal((2, 4, 7, 6))
    w3 = r.standard_normal((6, 4, 3, 3))
    b6 = r.standard_normal(6)
    cases = [
        Case("linear", lambda F, L, x, w, b: F.linear(x, w, b),
             [r.standard_normal((5, 4)), r.standard_normal((3, 4)), r.standard_normal(3)], True),
        Case("linear_nobias_3d", lambda F, L, x, w: F.linear(x, w),
             [r.standard_normal((2, 5, 4)), r.standard_normal((3, 4))]),
        # --- conv2d: every argument mini supports
        Case("conv2d", lambda F, L, x, w, b: F.conv2d(x, w, b), [img, w3, b6], True),
        Case("conv2d_stride2_pad1", lambda F, L, x, w, b: F.conv2d(x, w, b, stride=2, padding=1),
             [img, w3, b6]),
        Case("conv2d_pairs", lambda F, L, x, w: F.conv2d(x, w, None, (2, 1), (0, 2)), [img, w3]),
        Case("conv2d_same_odd", lambda F, L, x, w, b: F.conv2d(x, w, b, padding="same"),
             [img, w3, b6]),
        Case("conv2d_same_even_kernel", lambda F, L, x, w: F.conv2d(x, w, padding="same"),
             [img, r.standard_normal((3, 4, 2, 4))]),
        Case("conv2d_valid", lambda F, L, x, w: F.conv2d(x, w, padding="valid"), [img, w3]),
        Case("conv2d_dilation", lambda F, L, x, w, b: F.conv2d(x, w, b, dilation=2, padding=1),
             [img, w3, b6], True),
        Case("conv2d_dilation_pair_same", lambda F, L, x, w: F.conv2d(x, w, dilation=(1, 2),
                                                                         padding="same"),
             [img, w3]),
        Case("conv2d_groups", lambda F, L, x, w, b: F.conv2d(x, w, b, padding=1, groups=2),
             [img, r.standard_normal((6, 2, 3, 3)), b6], True),
        Case("conv2d_depthwise", lambda F, L, x, w: F.conv2d(x, w, stride=2, groups=4),
             [img, r.standard_normal((8, 1, 2, 2))]),
        Case("conv2d_unbatched", lambda F, L, x, w, b: F.conv2d(x, w, b, padding=1),
             [img[0], w3, b6]),
        # --- pooling
        Case("max_pool2d", lambda F, L, x: F.max_pool2d(x, 2), [img]),
        Case("max_pool2d_k3_s2_p1", lambda F, L, x: F.max_pool2d(x, 3, 2, 1), [img]),
        Case("max_pool2d_ceil", lambda F, L, x: F.max_pool2d(x, 2, ceil_mode=True), [img]),
        Case("max_pool2d_ceil_pad", lambda F, L, x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True),
             [img]),
        Case("max_pool2d_dilation", lambda F, L, x: F.max_pool2d(x, 2, 1, dilation=2), [img]),
        Case("max_pool2d_indices", lambda F, L, x: F.max_pool2d(x, 3, 2, 1, return_indices=True),
             [img]),
        Case("max_pool2d_indices_dilation_ceil",
             lambda F, L, x: F.max_pool2d(x, 2, 2, 1, dilation=2, ceil_mode=True,
                                          return_indices=True), [img]),
        Case("max_pool2d_unbatched", lambda F, L, x: F.max_pool2d(x, (2, 3)), [img[0]]),
        Case("avg_pool2d", lambda F, L, x: F.avg_pool2d(x, 2), [img]),
        Case("avg_pool2d_of_square", lambda F, L, x: F.avg_pool2d(x * x, 3, 2, 1), [img], True),
        Case("avg_pool2d_pad_include", lambda F, L, x: F.avg_pool2d(x, 3, 2, 1), [img]),
        Case("avg_pool2d_pad_exclude",
             lambda F, L, x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False), [img]),
        Case("avg_pool2d_ceil",
             lambda F, L, x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True), [img]),
        Case("avg_pool2d_ceil_exclude",
             lambda F, L, x: F.avg_pool2d(x, 2, 2, 1, ceil_mode=True, count_include_pad=False),
             [img]),
        Case("avg_pool2d_divisor", lambda F, L, x: F.avg_pool2d(x, 2, divisor_override=3), [img]),
        Case("avg_pool2d_unbatched", lambda F, L, x: F.avg_pool2d(x, (2, 3), 1), [img[0]]),
        Case("adaptive_avg_pool2d_1", lambda F, L, x: F.adaptive_avg_pool2d(x, 1), [img]),
        Case("adaptive_avg_pool2d_uneven", lambda F, L, x: F.adaptive_avg_pool2d(x, (3, 4)),
             [img]),
        Case("adaptive_avg_pool2d_none", lambda F, L, x: F.adaptive_avg_pool2d(x, (None, 3)),
             [img]),
        # --- pad
        Case("pad_constant", lambda F, L, x: F.pad(x, (1, 2)), [img]),
        Case("pad_constant_of_square", lambda F, L, x: F.pad(x * x, (1, 2, -1, 1), value=2.0),
             [img], True),
        Case("pad_constant_value_2d", lambda F, L, x: F.pad(x, (1, 1, 2, 0), value=0.5), [img]),
        Case("pad_negative_crops", lambda F, L, x: F.pad(x, (-1, 2, 0, -2)), [img]),
        Case("pad_three_dims", lambda F, L, x: F.pad(x, (1, 0, 0, 1, 2, 1)), [img]),
        Case("pad_reflect", lambda F, L, x: F.pad(x, (2, 1, 1, 3), mode="reflect"), [img]),
        Case("pad_reflect_of_square", lambda F, L, x: F.pad(x * x, (2, 1, 1, 3), mode="reflect"),
             [img], True),
        Case("pad_replicate", lambda F, L, x: F.pad(x, (2, 1, 1, 3), mode="replicate"), [img]),
        Case("pad_circular", lambda F, L, x: F.pad(x, (2, 1, 1, 3), mode="circular"), [img]),
        # --- normalisation
        Case("batch_norm_train_4d",
             lambda F, L, x, w, b: F.batch_norm(x, L.zeros(4, dtype=L.float64),
                                                L.ones(4, dtype=L.float64), w, b, training=True),
             [img, r.standard_normal(4), r.standard_normal(4)], True),
        Case("batch_norm_eval_4d",
             lambda F, L, x, w, b: F.batch_norm(x, L.tensor([0.1, -0.2, 0.3, 0.0],
                                                            dtype=L.float64),
                                                L.tensor([1.5, 0.5, 2.0, 1.0], dtype=L.float64),
                                                w, b),
             [img, r.standard_normal(4), r.standard_normal(4)], True),
        Case("batch_norm_train_2d_no_affine",
             lambda F, L, x: F.batch_norm(x, None, None, training=True, eps=1e-3),
             [r.standard_normal((6, 3))], True),
        Case("layer_norm", lambda F, L, x, w, b: F.layer_norm(x, (6,), w, b),
             [img, r.standard_normal(6), r.standard_normal(6)], True),
        Case("layer_norm_two_dims", lambda F, L, x: F.layer_norm(x, [7, 6], eps=1e-3), [img]),
        Case("normalize", lambda F, L, x: F.normalize(x, dim=1), [r.standard_normal((4, 5))]),
        Case("normalize_p1", lambda F, L, x: F.normalize(x, p=1.0, dim=0),
             [_away(r, (4, 5))]),
        # --- activations (inputs away from their kinks)
        Case("relu", lambda F, L, x: F.relu(x), [_away(r, (3, 5))]),
        Case("leaky_relu", lambda F, L, x: F.leaky_relu(x, 0.2), [_away(r, (3, 5))]),
        Case("elu", lambda F, L, x: F.elu(x, alpha=0.7), [_away(r, (3, 5), hi=30.0)], True),
        Case("gelu", lambda F, L, x: F.gelu(x), [r.standard_normal((3, 5))], True),
        Case("gelu_tanh", lambda F, L, x: F.gelu(x, approximate="tanh"),
             [r.standard_normal((3, 5))], True),
        Case("silu", lambda F, L, x: F.silu(x), [r.standard_normal((3, 5))], True),
        Case("sigmoid", lambda F, L, x: F.sigmoid(x), [r.standard_normal((3, 5))], True),
        Case("tanh", lambda F, L, x: F.tanh(x), [r.standard_normal((3, 5))], True),
        Case("softplus", lambda F, L, x: F.softplus(x), [r.standard_normal((3, 5)) * 10], True),
        Case("softplus_beta_threshold", lambda F, L, x: F.softplus(x, beta=2.0, threshold=3.0),
             [_away(r, (4, 6), 0.05, 3.0) + np.where(r.random((4, 6)) < 0.5, 0.0, 1.0)]),
        Case("hardtanh", lambda F, L, x: F.hardtanh(x, -0.5, 0.8),
             [np.array([-2.0, -0.7, -0.3, 0.0, 0.5, 0.9, 3.0])]),
        Case("relu6", lambda F, L, x: F.relu6(x), [np.array([-2.0, -0.1, 0.3, 5.9, 6.2, 9.0])]),
        Case("logsigmoid", lambda F, L, x: F.logsigmoid(x), [r.standard_normal((3, 5)) * 20],
             True),
        Case("softmax", lambda F, L, x: F.softmax(x, dim=1), [r.standard_normal((3, 5))], True),
        Case("softmax_dim0", lambda F, L, x: F.softmax(x, 0), [r.standard_normal((3, 5))]),
        Case("log_softmax", lambda F, L, x: F.log_softmax(x, dim=-1), [img], True),
        # --- losses
        Case("mse_loss", lambda F, L, x, y: F.mse_loss(x, y),
             [r.standard_normal((4, 3)), r.standard_normal((4, 3))], True),
        Case("mse_loss_sum_weight", lambda F, L, x, y, w: F.mse_loss(x, y, reduction="sum",
                                                                     weight=w),
             [r.standard_normal((4, 3)), r.standard_normal((4, 3)), r.uniform(0.5, 2, (4, 3))]),
        Case("l1_loss_none", lambda F, L, x: F.l1_loss(x, L.zeros(4, 3, dtype=L.float64),
                                                       reduction="none"),
             [_away(r, (4, 3))]),
        Case("smooth_l1_loss", lambda F, L, x: F.smooth_l1_loss(
            x, L.zeros(4, 3, dtype=L.float64), beta=0.5), [_away(r, (4, 3), 0.05, 1.5)]),
        Case("huber_loss", lambda F, L, x: F.huber_loss(x, L.zeros(4, 3, dtype=L.float64),
                                                        delta=0.7),
             [_away(r, (4, 3), 0.05, 1.5)]),
        Case("binary_cross_entropy", lambda F, L, p, t: F.binary_cross_entropy(p, t),
             [r.uniform(0.05, 0.95, (5, 2)), r.uniform(0, 1, (5, 2))], True),
        Case("binary_cross_entropy_weight_sum",
             lambda F, L, p, t, w: F.binary_cross_entropy(p, t, weight=w, reduction="sum"),
             [r.uniform(0.05, 0.95, (5, 2)), r.uniform(0, 1, (5, 2)), r.uniform(0.5, 2, (2,))],
             constant=(2,)),
        Case("bce_with_logits", lambda F, L, x, t: F.binary_cross_entropy_with_logits(x, t),
             [r.standard_normal((5, 2)) * 30, r.uniform(0, 1, (5, 2))], True),
        Case("bce_with_logits_pos_weight",
             lambda F, L, x, t, pw: F.binary_cross_entropy_with_logits(
                 x, t, pos_weight=pw, reduction="none"),
             [r.standard_normal((5, 3)) * 3, r.uniform(0, 1, (5, 3)), r.uniform(0.5, 3, (3,))],
             constant=(2,)),
    ]
    y4 = r.integers(0, 4, size=6)
    logits = r.standard_normal((6, 4)) * 3
    for kw in [dict(), dict(reduction="sum"), dict(reduction="none"), dict(ignore_index=1),
               dict(label_smoothing=0.1), dict(label_smoothing=0.2, ignore_index=0,
                                               reduction="sum"),
               dict(weight=[0.2, 1.0, 3.0, 0.5], ignore_index=2)]:
        name = "cross_entropy_" + ("_".join(f"{k}" for k in kw) or "default")

        def ce(F, L, x, kw=kw):
            kw = dict(kw)
            if "weight" in kw:
                kw["weight"] = L.tensor(kw["weight"], dtype=L.float64)
            return F.cross_entropy(x, L.tensor(y4), **kw)
        cases.append(Case(name, ce, [logits], second_order=not kw))
    spatial_y = r.integers(0, 3, size=(2, 4, 5))
    cases += [
        Case("cross_entropy_spatial_ignore",
             lambda F, L, x: F.cross_entropy(x, L.tensor(np.where(spatial_y == 2, -100,
                                                                  spatial_y))),
             [r.standard_normal((2, 3, 4, 5))]),
        Case("cross_entropy_unbatched", lambda F, L, x: F.cross_entropy(x, L.tensor(2)),
             [r.standard_normal(5)]),
        Case("cross_entropy_probabilities",
             lambda F, L, x, p: F.cross_entropy(x, p, label_smoothing=0.1),
             [r.standard_normal((6, 3)), r.dirichlet(np.ones(3), size=6)]),
        Case("nll_loss_weight_sum",
             lambda F, L, x: F.nll_loss(F.log_softmax(x, 1), L.tensor(y4),
                                        weight=L.tensor([1.0, 2.0, 0.5, 1.5], dtype=L.float64),
                                        reduction="sum"),
             [logits]),
        Case("embedding", lambda F, L, w: F.embedding(L.tensor([[0, 2, 4], [4, 1, 0]]), w),
             [r.standard_normal((5, 3))]),
        Case("embedding_padding_idx",
             lambda F, L, w: F.embedding(L.tensor([[0, 2, 4], [4, 1, 0]]), w, padding_idx=4),
             [r.standard_normal((5, 3))]),
        Case("dropout_eval_is_identity", lambda F, L, x: F.dropout(x, 0.3, training=False),
             [r.standard_normal((3, 4))]),
        Case("dropout_p0_is_identity", lambda F, L, x: F.dropout(x, 0.0), [r.standard_normal((3, 4))]),
        Case("dropout_p1_is_zero", lambda F, L, x: F.dropout(x, 1.0), [r.standard_normal((3, 4))]),
        # in place on a recorded tensor: the result and the gradient through it
        Case("leaky_relu_inplace", lambda F, L, x: F.leaky_relu(x * 1.0, 0.1, inplace=True),
             [_away(r, (3, 4))]),
        Case("relu_inplace", lambda F, L, x: F.relu(x * 2.0, inplace=True), [_away(r, (3, 4))]),
        Case("silu_inplace_then_op", lambda F, L, x: F.silu(x + 0.0, inplace=True) * 3.0,
             [r.standard_normal((3, 4))]),
    ]
    return cases


CASES = _cases()


def _run(lib, F, case):
    ins = [lib.tensor(a, dtype=lib.float64, requires_grad=i not in case.constant)
           for i, a in enumerate(case.inputs)]
    out = case.fn(F, lib, *ins)
    return ins, out


def _np(t):
    return t.detach().numpy()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_values_and_gradients_match_torch(case):
    m_in, m_out = _run(mini, MF, case)
    t_in, t_out = _run(torch, TF, case)
    if isinstance(t_out, tuple):  # max_pool2d(return_indices=True): values and indices
        np.testing.assert_array_equal(_np(m_out[1]), _np(t_out[1]))
        assert m_out[1].dtype == mini.int64
        m_out, t_out = m_out[0], t_out[0]
    assert tuple(m_out.shape) == tuple(t_out.shape)
    np.testing.assert_allclose(_np(m_out), _np(t_out), **TOL)
    upstream = np.random.default_rng(1).standard_normal(tuple(t_out.shape))
    m_out.backward(mini.tensor(upstream, dtype=mini.float64))
    t_out.backward(torch.tensor(upstream))
    for i, (m, t) in enumerate(zip(m_in, t_in)):
        if t.grad is None:
            assert m.grad is None or not np.any(_np(m.grad)), f"input {i}: torch has no gradient"
            continue
        assert m.grad is not None, f"input {i} got no gradient"
        np.testing.assert_allclose(_np(m.grad), _np(t.grad), err_msg=f"gradient of input {i}",
                                   **TOL)


SECOND = [c for c in CASES if c.second_order]


@pytest.mark.parametrize("case", SECOND, ids=[c.id for c in SECOND])
def test_second_derivatives_match_torch(case):
    """d/dx of sum(g²) where g = d(sum(out · v))/d(inputs), taken with create_graph."""
    def second(lib, F):
        ins, out = _run(lib, F, case)
        v = np.random.default_rng(2).standard_normal(tuple(out.shape))
        weights = lib.tensor(v, dtype=lib.float64)
        grads = lib.autograd.grad((out * weights).sum(), ins, create_graph=True,
                                  allow_unused=True)
        total = sum((g * g).sum() for g in grads if g is not None)
        total.backward()
        return [None if x.grad is None else _np(x.grad) for x in ins]

    mine, theirs = second(mini, MF), second(torch, TF)
    for i, (m, t) in enumerate(zip(mine, theirs)):
        if t is None or not np.any(t):
            assert m is None or not np.any(m), f"input {i}: torch's second derivative is 0"
            continue
        assert m is not None, f"input {i}: no second derivative"
        np.testing.assert_allclose(m, t, err_msg=f"second derivative, input {i}", rtol=1e-8,
                                   atol=1e-10)


def test_batch_norm_updates_the_running_statistics_like_torch():
    x = np.random.default_rng(3).standard_normal((5, 3, 2, 2))
    stats = {}
    for lib, F in ((mini, MF), (torch, TF)):
        rm, rv = lib.zeros(3, dtype=lib.float64), lib.ones(3, dtype=lib.float64)
        F.batch_norm(lib.tensor(x), rm, rv, training=True, momentum=0.3)
        stats[lib.__name__] = (_np(rm), _np(rv))
    for a, b in zip(stats["mini"], stats["torch"]):
        np.testing.assert_allclose(a, b, **TOL)


def test_max_pool_indices_unbatched_and_one_hot_match_torch():
    x = np.random.default_rng(4).standard_normal((3, 5, 5))
    vm, im = MF.max_pool2d(mini.tensor(x), 2, 1, return_indices=True)
    vt, it = TF.max_pool2d(torch.tensor(x), 2, 1, return_indices=True)
    np.testing.assert_array_equal(_np(im), _np(it))
    np.testing.assert_allclose(_np(vm), _np(vt), **TOL)
    t = np.array([[0, 3], [2, 1]])
    np.testing.assert_array_equal(_np(MF.one_hot(mini.tensor(t))), _np(TF.one_hot(torch.tensor(t))))
    np.testing.assert_array_equal(_np(MF.one_hot(mini.tensor(t), 6)),
                                  _np(TF.one_hot(torch.tensor(t), 6)))


def test_module_forms_match_torch_for_the_same_weights():
    """nn layers built on F (conv with groups/dilation/padding modes, pooling, embedding)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 4, 6, 6))
    pairs = [
        (mini.nn.Conv2d(4, 6, 3, padding=1, padding_mode="reflect", groups=2, dtype=mini.float64),
         torch.nn.Conv2d(4, 6, 3, padding=1, padding_mode="reflect", groups=2, dtype=torch.float64)),
        (mini.nn.Conv2d(4, 2, 3, padding="same", dilation=2, padding_mode="circular",
                        dtype=mini.float64),
         torch.nn.Conv2d(4, 2, 3, padding="same", dilation=2, padding_mode="circular",
                         dtype=torch.float64)),
        (mini.nn.Conv2d(4, 3, 2, stride=2, bias=False, padding_mode="replicate", padding=1,
                        dtype=mini.float64),
         torch.nn.Conv2d(4, 3, 2, stride=2, bias=False, padding_mode="replicate", padding=1,
                         dtype=torch.float64)),
    ]
    for m, t in pairs:
        m.load_state_dict({k: mini.tensor(v.detach().numpy()) for k, v in t.state_dict().items()})
        np.testing.assert_allclose(_np(m(mini.tensor(x))), _np(t(torch.tensor(x))), **TOL)
    for m, t in [(mini.nn.AvgPool2d(3, 2, 1, count_include_pad=False),
                  torch.nn.AvgPool2d(3, 2, 1, count_include_pad=False)),
                 (mini.nn.AdaptiveAvgPool2d((4, 5)), torch.nn.AdaptiveAvgPool2d((4, 5))),
                 (mini.nn.MaxPool2d(3, 2, 1, ceil_mode=True), torch.nn.MaxPool2d(3, 2, 1, ceil_mode=True))]:
        np.testing.assert_allclose(_np(m(mini.tensor(x))), _np(t(torch.tensor(x))), **TOL)
    emb_t = torch.nn.Embedding(7, 3, padding_idx=2, dtype=torch.float64)
    emb_m = mini.nn.Embedding.from_pretrained(mini.tensor(emb_t.weight.detach().numpy()),
                                              freeze=False, padding_idx=2)
    idx = np.array([[2, 0, 6], [1, 2, 2]])
    om, ot = emb_m(mini.tensor(idx)), emb_t(torch.tensor(idx))
    np.testing.assert_allclose(_np(om), _np(ot), **TOL)
    (om * om).sum().backward()
    (ot * ot).sum().backward()
    np.testing.assert_allclose(_np(emb_m.weight.grad), _np(emb_t.weight.grad), **TOL)
    assert not np.any(_np(mini.nn.Embedding(5, 2, padding_idx=1).weight)[1])
