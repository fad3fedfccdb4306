"""mini.nn.functional without PyTorch: values against numpy loops written from the
definitions, gradients by finite differences, the exercise slots each function runs on
("one home per concept"), and clear errors for what mini does not implement."""
from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest

import mini
import mini.nn.functional as F
from mini import exercises, nn
from mini.autograd import gradcheck
from mini.nn.modules import normalization as bn_mod


def _t(a, requires_grad=False):
    return mini.tensor(np.asarray(a, dtype=np.float64), dtype=mini.float64,
                       requires_grad=requires_grad)


def _np(t):
    return t.detach().numpy()


# float64 on small inputs: the loops below and mini sum in different orders, ~1e-15 apart
TOL = dict(rtol=1e-10, atol=1e-12)


# --- numpy oracles, written from the definitions -----------------------------------------------
def conv2d_loops(x, w, b, stride, padding, dilation, groups):
    n, c, h, wd = x.shape
    cout, cg, kh, kw = w.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    ho = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    wo = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, cout, ho, wo))
    per = cout // groups
    for o in range(cout):
        g = o // per
        for i in range(ho):
            for j in range(wo):
                patch = xp[:, g * cg:(g + 1) * cg, i * sh:i * sh + dh * (kh - 1) + 1:dh,
                           j * sw:j * sw + dw * (kw - 1) + 1:dw]
                out[:, o, i, j] = (patch * w[o]).sum(axis=(1, 2, 3)) + (0 if b is None else b[o])
    return out


def pool_loops(x, k, s, p, d, ceil_mode, reduce, count_include_pad=True):
    """Max or mean pooling by loops over output positions (PyTorch's window rules)."""
    n, c, h, w = x.shape

    def size(n_in):
        span = n_in + 2 * p - d * (k - 1) - 1
        out = (span + (s - 1 if ceil_mode else 0)) // s + 1
        if ceil_mode and (out - 1) * s >= n_in + p:
            out -= 1
        return out
    ho, wo = size(h), size(w)
    out = np.zeros((n, c, ho, wo))
    idx = np.zeros((n, c, ho, wo), dtype=np.int64)
    for i in range(ho):
        for j in range(wo):
            rows = [i * s - p + a * d for a in range(k)]
            cols = [j * s - p + b * d for b in range(k)]
            if reduce == "max":
                best = np.full((n, c), -np.inf)
                for r in rows:
                    for q in cols:
                        if 0 <= r < h and 0 <= q < w:
                            v = x[:, :, r, q]
                            better = v > best
                            best = np.where(better, v, best)
                            idx[:, :, i, j] = np.where(better, r * w + q, idx[:, :, i, j])
                out[:, :, i, j] = best
            else:
                r_end, q_end = min(i * s - p + k, h + p), min(j * s - p + k, w + p)
                total = np.zeros((n, c))
                for r in range(max(i * s - p, 0), min(r_end, h)):
                    for q in range(max(j * s - p, 0), min(q_end, w)):
                        total += x[:, :, r, q]
                if count_include_pad:
                    count = (r_end - (i * s - p)) * (q_end - (j * s - p))
                else:
                    count = ((min(r_end, h) - max(i * s - p, 0))
                             * (min(q_end, w) - max(j * s - p, 0)))
                out[:, :, i, j] = total / count
    return out, idx


RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 4, 7, 6))


@pytest.mark.parametrize("stride,padding,dilation,groups", [
    ((1, 1), (0, 0), (1, 1), 1), ((2, 1), (1, 2), (1, 1), 1), ((1, 1), (1, 1), (2, 2), 1),
    ((1, 2), (2, 0), (2, 1), 2), ((2, 2), (1, 1), (1, 1), 4)])
def test_conv2d_against_loops_and_its_gradient(stride, padding, dilation, groups):
    w = RNG.standard_normal((4, 4 // groups, 3, 2))
    b = RNG.standard_normal(4)
    got = F.conv2d(_t(X), _t(w), _t(b), stride, padding, dilation, groups)
    want = conv2d_loops(X, w, b, stride, padding, dilation, groups)
    np.testing.assert_allclose(_np(got), want, **TOL)
    xs, ws, bs = _t(X[:1, :, :5, :4], True), _t(w, True), _t(b, True)
    assert gradcheck(lambda x, w_, b_: F.conv2d(x, w_, b_, stride, padding, dilation, groups),
                     (xs, ws, bs))


def test_conv2d_padding_same_keeps_the_size_and_valid_is_zero():
    w = RNG.standard_normal((3, 4, 4, 3))   # even kernel height: the extra row goes below
    got = F.conv2d(_t(X), _t(w), padding="same")
    assert tuple(got.shape) == (2, 3, 7, 6)
    xp = np.pad(X, ((0, 0), (0, 0), (1, 2), (1, 1)))
    np.testing.assert_allclose(_np(got), conv2d_loops(xp, w, None, (1, 1), (0, 0), (1, 1), 1),
                               **TOL)
    np.testing.assert_allclose(_np(F.conv2d(_t(X), _t(w), padding="valid")),
                               conv2d_loops(X, w, None, (1, 1), (0, 0), (1, 1), 1), **TOL)
    one = F.conv2d(_t(X[0]), _t(w), padding=1)                    # unbatched [C, H, W]
    np.testing.assert_allclose(_np(one), _np(F.conv2d(_t(X[:1]), _t(w), padding=1))[0], **TOL)


@pytest.mark.parametrize("k,s,p,d,ceil", [(2, 2, 0, 1, False), (3, 2, 1, 1, False),
                                          (3, 2, 1, 1, True), (2, 2, 0, 1, True),
                                          (2, 1, 1, 2, False), (2, 3, 1, 2, True)])
def test_max_pool2d_against_loops_with_indices(k, s, p, d, ceil):
    got, idx = F.max_pool2d(_t(X), k, s, p, d, ceil_mode=ceil, return_indices=True)
    want, want_idx = pool_loops(X, k, s, p, d, ceil, "max")
    np.testing.assert_array_equal(_np(got), want)
    np.testing.assert_array_equal(_np(idx), want_idx)
    x = _t(X, True)
    F.max_pool2d(x, k, s, p, d, ceil_mode=ceil).sum().backward()
    # each input pixel's gradient counts the windows whose maximum it is
    counts = np.zeros(X.size)
    base = (np.arange(2 * 4) * 7 * 6).reshape(2, 4, 1, 1)
    np.add.at(counts, (want_idx + base).reshape(-1), 1.0)
    np.testing.assert_array_equal(_np(x.grad).reshape(-1), counts)


@pytest.mark.parametrize("k,s,p,ceil,include", [(2, 2, 0, False, True), (3, 2, 1, False, True),
                                                (3, 2, 1, False, False), (3, 2, 1, True, True),
                                                (2, 2, 1, True, False), (3, 1, 0, False, True)])
def test_avg_pool2d_against_loops_and_gradcheck(k, s, p, ceil, include):
    got = F.avg_pool2d(_t(X), k, s, p, ceil_mode=ceil, count_include_pad=include)
    want, _ = pool_loops(X, k, s, p, 1, ceil, "mean", include)
    np.testing.assert_allclose(_np(got), want, **TOL)
    x = _t(X[:1, :2], True)
    assert gradcheck(lambda t: F.avg_pool2d(t, k, s, p, ceil_mode=ceil,
                                            count_include_pad=include), (x,))
    np.testing.assert_allclose(_np(F.avg_pool2d(_t(X), 2, divisor_override=3)),
                               pool_loops(X, 2, 2, 0, 1, False, "mean")[0] * 4 / 3, **TOL)


def test_adaptive_avg_pool2d_cells_follow_pytorchs_bounds():
    got = F.adaptive_avg_pool2d(_t(X), (3, 4))       # 7 x 6 into 3 x 4: overlapping cells
    for i in range(3):
        for j in range(4):
            r0, r1 = i * 7 // 3, -(-(i + 1) * 7 // 3)
            c0, c1 = j * 6 // 4, -(-(j + 1) * 6 // 4)
            np.testing.assert_allclose(_np(got)[:, :, i, j], X[:, :, r0:r1, c0:c1].mean(axis=(2, 3)),
                                       **TOL)
    np.testing.assert_allclose(_np(F.adaptive_avg_pool2d(_t(X), 1))[..., 0, 0],
                               X.mean(axis=(2, 3)), **TOL)
    assert tuple(F.adaptive_avg_pool2d(_t(X), (None, 2)).shape) == (2, 4, 7, 2)


@pytest.mark.parametrize("mode,np_mode", [("constant", "constant"), ("reflect", "reflect"),
                                          ("replicate", "edge"), ("circular", "wrap")])
def test_pad_modes_against_numpy(mode, np_mode):
    pads = (2, 1, 1, 3)                                   # (left, right, top, bottom)
    got = F.pad(_t(X), pads, mode=mode)
    want = np.pad(X, ((0, 0), (0, 0), (1, 3), (2, 1)), mode=np_mode)
    np.testing.assert_array_equal(_np(got), want)
    x = _t(X[:1, :1, :4, :4], True)
    assert gradcheck(lambda t: F.pad(t * t, (1, 2, 2, 1), mode=mode), (x,))


def test_pad_constant_value_and_negative_padding():
    got = F.pad(_t(X), (1, -2, -1, 0), value=7.5)
    want = np.pad(X[:, :, 1:, :-2], ((0, 0), (0, 0), (0, 0), (1, 0)), constant_values=7.5)
    np.testing.assert_array_equal(_np(got), want)
    assert tuple(F.pad(_t(X), (0, 0, 0, 0, 1, 1)).shape) == (2, 6, 7, 6)


def test_embedding_picks_rows_and_padding_row_gets_no_gradient():
    w = _t(RNG.standard_normal((5, 3)), True)
    idx = mini.tensor([[0, 4, 2], [4, 4, 1]])
    out = F.embedding(idx, w, padding_idx=-1)             # -1 means row 4
    np.testing.assert_array_equal(_np(out), _np(w)[np.array([[0, 4, 2], [4, 4, 1]])])
    out.sum().backward()
    np.testing.assert_array_equal(_np(w.grad)[:, 0], [1, 1, 1, 0, 0])


def test_activations_against_numpy_formulas():
    x = np.concatenate([RNG.standard_normal(20) * 3, [-40.0, -25.0, 25.0, 40.0]])
    sig = 1 / (1 + np.exp(-x))
    softplus = np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0)
    checks = {
        "leaky_relu": (F.leaky_relu(_t(x), 0.2), np.where(x > 0, x, 0.2 * x)),
        "elu": (F.elu(_t(x), 0.7), np.where(x > 0, x, 0.7 * np.expm1(np.minimum(x, 0)))),
        "silu": (F.silu(_t(x)), x * sig),
        "softplus": (F.softplus(_t(x)), np.where(x > 20, x, softplus)),
        "logsigmoid": (F.logsigmoid(_t(x)), -np.log1p(np.exp(-np.abs(x))) + np.minimum(x, 0)),
        "hardtanh": (F.hardtanh(_t(x), -0.5, 2.0), np.clip(x, -0.5, 2.0)),
        "relu6": (F.relu6(_t(x)), np.clip(x, 0, 6)),
        "gelu_tanh": (F.gelu(_t(x), approximate="tanh"),
                      0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))),
    }
    for name, (got, want) in checks.items():
        assert np.all(np.isfinite(_np(got))), name
        np.testing.assert_allclose(_np(got), want, rtol=1e-12, atol=1e-14, err_msg=name)
    smooth = _t(RNG.standard_normal((2, 3)), True)
    for fn in (F.silu, F.elu, F.softplus, F.logsigmoid, lambda t: F.gelu(t, approximate="tanh")):
        assert gradcheck(fn, (smooth,))


def test_in_place_activations_write_into_their_input_and_stay_differentiable():
    x = _t([-1.0, 2.0, -3.0], True)
    h = x * 1.0
    out = F.leaky_relu(h, 0.5, inplace=True)
    assert out is h
    np.testing.assert_array_equal(_np(h), [-0.5, 2.0, -1.5])
    (out * out).sum().backward()
    np.testing.assert_allclose(_np(x.grad), [2 * -0.5 * 0.5, 2 * 2.0, 2 * -1.5 * 0.5])
    with pytest.raises(RuntimeError, match="leaf Variable"):
        F.relu(x, inplace=True)
    plain = mini.tensor([-1.0, 3.0])
    assert F.elu(plain, inplace=True) is plain and _np(plain)[1] == 3.0


def test_losses_against_numpy_formulas():
    p = RNG.uniform(0.02, 0.98, (6, 2))
    t = RNG.uniform(0, 1, (6, 2))
    x = RNG.standard_normal((6, 2)) * 40          # logits far out: the stable form matters
    bce = -(t * np.log(p) + (1 - t) * np.log1p(-p))
    np.testing.assert_allclose(F.binary_cross_entropy(_t(p), _t(t)).item(), bce.mean(), **TOL)
    pw = np.array([2.0, 0.5])
    logsig, log1m = -np.logaddexp(0, -x), -np.logaddexp(0, x)
    want = -(pw * t * logsig + (1 - t) * log1m)
    got = F.binary_cross_entropy_with_logits(_t(x), _t(t), pos_weight=_t(pw), reduction="none")
    np.testing.assert_allclose(_np(got), want, rtol=1e-10, atol=1e-10)
    assert F.binary_cross_entropy(_t([0.0, 1.0]), _t([1.0, 0.0])).item() == 100.0  # clamped log
    d = RNG.standard_normal(8)
    hub = np.where(np.abs(d) < 0.7, 0.5 * d ** 2, 0.7 * (np.abs(d) - 0.35))
    np.testing.assert_allclose(F.huber_loss(_t(d), _t(np.zeros(8)), delta=0.7).item(), hub.mean(),
                               **TOL)
    np.testing.assert_allclose(F.smooth_l1_loss(_t(d), _t(np.zeros(8)), beta=0.7).item(),
                               (hub / 0.7).mean(), **TOL)
    # PyTorch's deprecated flags still pick the reduction
    assert F.mse_loss(_t(d), _t(np.zeros(8)), size_average=False).item() == pytest.approx(
        (d ** 2).sum())
    assert tuple(F.l1_loss(_t(d), _t(np.zeros(8)), reduce=False).shape) == (8,)


def test_cross_entropy_ignore_index_everywhere_and_spatial_against_numpy():
    z = RNG.standard_normal((2, 3, 2, 2))
    y = np.array([[[0, 2], [-100, 1]], [[1, 1], [2, -100]]])
    logp = z - z.max(1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(1, keepdims=True))
    keep = y != -100
    picked = np.take_along_axis(logp, np.where(keep, y, 0)[:, None], 1)[:, 0]
    want = -(picked[keep]).mean()
    assert F.cross_entropy(_t(z), mini.tensor(y)).item() == pytest.approx(want, rel=1e-12)
    assert F.cross_entropy(_t(z), mini.tensor(y), reduction="sum").item() == pytest.approx(
        want * keep.sum(), rel=1e-12)
    all_ignored = mini.tensor(np.full((2, 2, 2), -100))
    assert math.isnan(F.cross_entropy(_t(z), all_ignored).item())
    assert F.cross_entropy(_t(z), all_ignored, reduction="sum").item() == 0.0


# --- double backward through batch norm ------------------------------------------------------
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_gradient_is_differentiable(fused, training):
    # fused: mini's fast path for batch norm (mini/ops/fast_paths.py); else the slots' path
    with contextlib.nullcontext() if fused else exercises.fast_paths(False, "batch_norm"):
        _check_batch_norm_double_backward(training)


def _check_batch_norm_double_backward(training):
    rng = np.random.default_rng(1)
    v = _t(rng.standard_normal((3, 2, 2, 2)))
    rm, rv = _t([0.2, -0.1]), _t([1.5, 0.7])

    def gradient(x, w, b):
        y = F.batch_norm(x, rm.clone(), rv.clone(), w, b, training=training)
        gx, gw = mini.autograd.grad((y * v).sum(), (x, w), create_graph=True)
        return gx, gw

    x = _t(rng.standard_normal((3, 2, 2, 2)), True)
    w, b = _t([0.8, -1.3], True), _t([0.1, 0.4], True)
    gx, gw = gradient(x, w, b)
    assert gx.requires_grad and gw.requires_grad
    assert gradcheck(lambda *a: gradient(*a)[0], (x, w, b))
    assert gradcheck(lambda *a: gradient(*a)[1], (x, w, b))


def test_batch_norm_double_backward_runs_a_students_backward_slot():
    calls = []
    ref = exercises.reference("05.batchnorm_backward")
    exercises.implement("05.batchnorm_backward")(
        lambda *a: calls.append(1) or ref(*a))
    x = _t(RNG.standard_normal((4, 3)), True)
    y = F.batch_norm(x, None, None, training=True)
    (gx,) = mini.autograd.grad((y * y * y).sum(), x, create_graph=True)
    gx.sum().backward()
    assert calls and x.grad is not None


# --- one home per concept: each function runs the chapter's slot ----------------------------
def _spy(slot, calls):
    ref = exercises.reference(slot)

    def student(*args, **kwargs):
        calls.append(slot)
        return ref(*args, **kwargs)
    exercises.implement(slot)(student)


@pytest.mark.parametrize("slot,run", [
    ("05.cross_entropy", lambda: F.cross_entropy(mini.randn(4, 3), mini.tensor([0, 2, 1, 0]))),
    ("05.cross_entropy", lambda: F.cross_entropy(mini.randn(2, 3, 4), mini.tensor(
        [[0, 1, -100, 2], [1, 1, 0, 2]]), label_smoothing=0.1, reduction="sum")),
    ("05.cross_entropy", lambda: nn.CrossEntropyLoss()(mini.randn(4, 3), mini.tensor([0, 2, 1, 0]))),
    ("05.dropout", lambda: F.dropout(mini.randn(5), 0.3)),
    ("05.dropout", lambda: nn.Dropout(0.3)(mini.randn(5) * 1.0)),
    ("05.batchnorm_forward", lambda: F.batch_norm(mini.randn(4, 3), None, None, training=True)),
    ("05.layernorm", lambda: F.layer_norm(mini.randn(2, 5), 5)),
    ("05.kaiming_init", lambda: nn.init.kaiming_normal_(mini.empty(4, 3))),
    ("05.kaiming_init", lambda: nn.init.kaiming_normal_(mini.empty(4, 3), mode="fan_out",
                                                        nonlinearity="tanh")),
    ("05.parameters", lambda: list(nn.Sequential(nn.Linear(2, 2)).parameters())),
    ("05.parameters", lambda: mini.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1)),
    ("04.conv2d_forward", lambda: F.conv2d(mini.randn(1, 2, 5, 5), mini.randn(4, 1, 3, 3),
                                           groups=2, dilation=2)),
    ("04.conv2d_forward", lambda: nn.Conv2d(2, 3, 3, padding_mode="reflect", padding=1)(
        mini.randn(1, 2, 4, 4))),
    ("04.im2col", lambda: F.avg_pool2d(mini.randn(1, 2, 4, 4, device="numpy"), 2)),
])
def test_functional_and_module_forms_run_the_chapter_slot(slot, run):
    calls = []
    _spy(slot, calls)
    run()
    assert calls, f"{slot} was not called"


def test_kaiming_normal_scales_the_slots_draw_for_other_gains():
    mini.manual_seed(3)
    he = _np(nn.init.kaiming_normal_(mini.empty(300, 200, dtype=mini.float64)))
    mini.manual_seed(3)
    tanh = _np(nn.init.kaiming_normal_(mini.empty(300, 200, dtype=mini.float64),
                                       nonlinearity="tanh"))
    np.testing.assert_allclose(tanh, he * (5 / 3) / math.sqrt(2), rtol=1e-12)  # same draws
    assert abs(he.std() / math.sqrt(2 / 200) - 1) < 0.02


def test_named_parameters_options_beyond_the_slot():
    a = nn.Linear(2, 2)
    net = nn.Sequential(a, a)                          # one module twice
    assert [n for n, _ in net.named_parameters()] == ["0.weight", "0.bias"]
    assert [n for n, _ in net.named_parameters(remove_duplicate=False)] == [
        "0.weight", "0.bias", "1.weight", "1.bias"]
    assert list(net.named_parameters(recurse=False)) == []
    assert [n for n, _ in a.named_parameters(prefix="fc")] == ["fc.weight", "fc.bias"]


# --- what mini does not implement is an error that names the argument ------------------------
@pytest.mark.parametrize("call,match", [
    (lambda: F.embedding(mini.tensor([0]), mini.randn(2, 2), max_norm=1.0), "max_norm=1.0"),
    (lambda: F.embedding(mini.tensor([0]), mini.randn(2, 2), sparse=True), "sparse=True"),
    (lambda: F.embedding(mini.tensor([0]), mini.randn(2, 2), scale_grad_by_freq=True),
     "scale_grad_by_freq=True"),
    (lambda: F.pad(mini.randn(2, 3), (1, 1), mode="symmetric"), "mode='symmetric'"),
    (lambda: F.normalize(mini.randn(2, 3), out=mini.randn(2, 3)), "out="),
])
def test_unsupported_arguments_raise_not_implemented(call, match):
    with pytest.raises(NotImplementedError, match=match):
        call()


@pytest.mark.parametrize("call,match", [
    (lambda: F.conv2d(mini.randn(1, 3, 5, 5), mini.randn(4, 3, 3, 3), stride=2, padding="same"),
     "strided"),
    (lambda: F.conv2d(mini.randn(1, 3, 5, 5), mini.randn(4, 2, 3, 3), groups=2),
     r"groups=2"),
    (lambda: F.conv2d(mini.randn(3, 5, 5, 5, 5), mini.randn(4, 3, 3, 3)), "4-D"),
    (lambda: F.max_pool2d(mini.randn(1, 1, 5, 5), 3, padding=2), "at most half"),
    (lambda: F.avg_pool2d(mini.randn(1, 1, 5, 5), 2, divisor_override=0), "divisor_override"),
    (lambda: F.pad(mini.randn(2, 3), (3, 0), mode="reflect"), "smaller than"),
    (lambda: F.pad(mini.randn(2, 3), (1, 1, 1)), "divisible by 2"),
    (lambda: F.batch_norm(mini.randn(4, 3), None, None), "training=False"),
    (lambda: F.dropout(mini.randn(3), 1.5), "between 0 and 1"),
    (lambda: F.mse_loss(mini.randn(3), mini.randn(4)), r"target size \(4,\)"),
    (lambda: F.binary_cross_entropy(mini.tensor([1.5]), mini.tensor([1.0])), "between 0 and 1"),
])
def test_bad_arguments_get_clear_errors(call, match):
    with pytest.raises((ValueError, TypeError, RuntimeError), match=match):
        call()


def test_dropout_functional_and_in_place():
    mini.manual_seed(0)
    x = mini.ones(10000, dtype=mini.float64)
    y = _np(F.dropout(x, 0.25))
    kept = y != 0
    assert abs(kept.mean() - 0.75) < 0.02 and np.allclose(y[kept], 1 / 0.75)
    mini.manual_seed(5)
    ref = _np(F.dropout(mini.ones(50, dtype=mini.float64), 0.5))
    mini.manual_seed(5)
    h = mini.ones(50, dtype=mini.float64)
    assert F.dropout(h, 0.5, inplace=True) is h
    np.testing.assert_array_equal(_np(h), ref)   # the same draw, written into h
    leaf = _t(np.ones(6), True)
    inner = leaf * 2.0
    F.dropout(inner, 0.5, inplace=True).sum().backward()
    np.testing.assert_array_equal(_np(leaf.grad), (_np(inner) != 0) * 2.0 / 0.5)


def test_the_stand_ins_used_before_chapter_05_is_released_agree_with_the_slots():
    """A student copy of mini for chapters 02-04 has chapter 05's slots stubbed; these
    fallbacks keep model.parameters(), F.cross_entropy and init.kaiming_normal_ working."""
    from mini.nn import discovery, he_init, losses
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Sequential(nn.Linear(4, 2)))
    net.tied = net[0]
    ref = discovery.named_parameters.reference(net, "m")
    got = discovery.named_parameters.fallback(net, "m")
    assert [n for n, _ in got] == [n for n, _ in ref] and all(
        a is b for (_, a), (_, b) in zip(got, ref))
    z, y = _t(RNG.standard_normal((5, 4)) * 100), mini.tensor([0, 3, 1, 1, 2])
    assert losses.cross_entropy.fallback(z, y).item() == pytest.approx(
        losses.cross_entropy.reference(z, y).item(), rel=1e-12)
    w = he_init.kaiming_normal_.fallback(mini.empty(400, 50, 3, 3), mode="fan_out")
    assert abs(_np(w).std() / math.sqrt(2 / (400 * 9)) - 1) < 0.02
