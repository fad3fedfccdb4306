"""The non-slot fast paths of a training step (chapter 05 model): fused BatchNorm,
cross-entropy, dropout and conv2d, and the leaf-gradient copy.

Each one must (1) agree with the path it replaces — bit-identical where the same float
operations run in the same order, otherwise within the rounding of float32 sums of the
reduction length K (tests/float_tolerance.py: another order of the same sums, including
another BLAS kernel's, moves the last bits) — and (2) never stand in for a student's
registered implementation: with one registered, the student's function is what runs.
"""
from __future__ import annotations

import numpy as np
import pytest

import mini
from mini import exercises
from mini.nn import losses
from mini.nn.modules import dropout as dropout_mod
from mini.nn.modules import normalization as bn_mod
from mini.ops import conv as conv_ops
from mini.ops import fast_paths

from float_tolerance import assert_close_to_rounding

# tests/test_blas_kernels.py re-runs these under a second OpenBLAS kernel
pytestmark = pytest.mark.blas_sensitive

DEVICES = ["numpy", "cpu"]


def _close(got, want, k):
    """float32 results of K-term sums that the two paths add in different orders."""
    assert_close_to_rounding(got, want, np.float32, k)


def _student(slot, calls):
    ref = exercises.reference(slot)

    def student(*args, **kwargs):
        calls.append(slot)
        return ref(*args, **kwargs)
    exercises.implement(slot)(student)


# ---------------------------------------------------------------------------------------
# BatchNorm

def _bn_run(device, shape, training, seed=0):
    rng = np.random.default_rng(seed)
    x = mini.tensor(rng.standard_normal(shape).astype(np.float32) * 2 + 1, device=device,
                    requires_grad=True)
    bn = (bn_mod.BatchNorm2d if len(shape) == 4 else bn_mod.BatchNorm1d)(shape[1])
    bn.to(device)
    with mini.no_grad():
        bn.weight.copy_(mini.tensor(rng.standard_normal(shape[1]).astype(np.float32)))
        bn.bias.copy_(mini.tensor(rng.standard_normal(shape[1]).astype(np.float32)))
    bn.train(training)
    bn(x)
    y = bn(x)  # the second call sees updated running statistics
    gy = mini.tensor(rng.standard_normal(shape).astype(np.float32), device=device)
    (y * gy).sum().backward()
    out = [y.detach().numpy(), x.grad.numpy(), bn.weight.grad.numpy(), bn.bias.grad.numpy(),
           bn.running_mean.numpy(), bn.running_var.numpy()]
    versions = (bn.running_mean._data.storage.version, bn.running_var._data.storage.version)
    return [a.copy() for a in out], versions


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("shape", [(4, 3, 5, 5), (6, 3), (2, 3, 4)])
def test_fused_batchnorm_matches_the_slots(device, training, shape, monkeypatch):
    fused, fv = _bn_run(device, shape, training)
    with exercises.fast_paths(False, "batch_norm"):
        slot, sv = _bn_run(device, shape, training)
    assert fv == sv  # the same in-place updates of the running statistics
    k = int(np.prod(shape)) // shape[1]  # each channel's statistics sum N·H·W values
    for got, want in zip(fused, slot):
        _close(got, want, k)


def test_fused_batchnorm_is_used_and_keeps_its_errors():
    x = mini.randn(4, 3, 2, 2, requires_grad=True)
    bn = bn_mod.BatchNorm2d(3)
    assert isinstance(bn(x).grad_fn, fast_paths.FusedBatchNormFunction._node_cls)
    with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
        bn_mod.BatchNorm1d(3)(mini.randn(1, 3))


@pytest.mark.parametrize("slot", ["05.batchnorm_forward", "05.batchnorm_backward"])
def test_batchnorm_runs_a_registered_student_slot(slot):
    calls = []
    _student(slot, calls)
    try:
        x = mini.randn(4, 3, 2, 2, requires_grad=True)
        bn_mod.BatchNorm2d(3)(x).sum().backward()
        assert calls, f"{slot} registered but not called"
    finally:
        exercises.unregister(slot)


def test_batchnorm_stub_is_never_replaced(monkeypatch):
    monkeypatch.setitem(exercises._IS_SOLUTION, "05.batchnorm_forward", False)
    x = mini.randn(4, 3, 2, 2, requires_grad=True)
    assert not isinstance(bn_mod.BatchNorm2d(3)(x).grad_fn,
                          fast_paths.FusedBatchNormFunction._node_cls)


# ---------------------------------------------------------------------------------------
# cross-entropy

def _ce_run(device, scale=3.0):
    rng = np.random.default_rng(0)
    z = mini.tensor((rng.standard_normal((16, 7)) * scale).astype(np.float32), device=device,
                    requires_grad=True)
    y = mini.tensor(rng.integers(0, 7, 16), device=device)
    loss = losses.cross_entropy(z, y)
    loss.backward()
    return loss.item(), z.grad.numpy().copy(), loss


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("scale", [3.0, 1000.0])
def test_fused_cross_entropy_matches_the_slot(device, scale, monkeypatch):
    fl, fg, floss = _ce_run(device, scale)
    assert type(floss.grad_fn).__name__.startswith("FusedCrossEntropy")
    with exercises.fast_paths(False, "05.cross_entropy"):
        sl, sg, _ = _ce_run(device, scale)
    assert np.isfinite(fl)
    k = 16 + 7  # a log-sum-exp over 7 classes, then the mean over 16 rows
    _close(fl, sl, k)
    _close(fg, sg, k)


def test_fused_cross_entropy_double_backward_matches_the_slot(monkeypatch):
    def run():
        rng = np.random.default_rng(1)
        z = mini.tensor(rng.standard_normal((5, 4)).astype(np.float32), requires_grad=True)
        y = mini.tensor(rng.integers(0, 4, 5))
        g, = mini.autograd.grad(losses.cross_entropy(z, y), z, create_graph=True)
        (g * g).sum().backward()
        return g.detach().numpy().copy(), z.grad.numpy().copy()
    fused = run()
    with exercises.fast_paths(False, "05.cross_entropy"):
        slot = run()
    for got, want in zip(fused, slot):
        _close(got, want, 5 + 4)  # softmax over 4 classes, mean over 5 rows


def test_cross_entropy_errors_and_student_slot():
    z = mini.randn(3, 4, requires_grad=True)
    with pytest.raises(IndexError):
        losses.cross_entropy(z, mini.tensor([0, 4, 1]))
    with pytest.raises(ValueError):
        losses.cross_entropy(z, mini.tensor([0, 1]))
    calls = []
    _student("05.cross_entropy", calls)
    try:
        losses.cross_entropy(z, mini.tensor([0, 3, 1])).backward()
        assert calls == ["05.cross_entropy"]
    finally:
        exercises.unregister("05.cross_entropy")


# ---------------------------------------------------------------------------------------
# dropout

@pytest.mark.parametrize("device", DEVICES)
def test_fused_dropout_is_bit_identical_to_the_slot(device, monkeypatch):
    def run(device):
        mini.manual_seed(7)
        x = mini.tensor(np.random.default_rng(0).standard_normal((8, 9)).astype(np.float32),
                        device=device, requires_grad=True)
        y = dropout_mod.dropout(x, 0.3, True)
        (y * y).sum().backward()
        return y.detach().numpy().copy(), x.grad.numpy().copy(), mini.rand(3).numpy().copy()
    fused = run(device)
    with exercises.fast_paths(False, "05.dropout"):
        slot = run(device)
    # Bit-identical: the same random draws and the same elementwise products (each rounded
    # once, by IEEE 754); nothing is summed.
    for got, want in zip(fused, slot):
        np.testing.assert_array_equal(got, want)


def test_dropout_runs_a_registered_student_slot():
    calls = []
    _student("05.dropout", calls)
    try:
        dropout_mod.Dropout(0.5)(mini.randn(4, 4, requires_grad=True)).sum().backward()
        assert calls == ["05.dropout"]
    finally:
        exercises.unregister("05.dropout")


# ---------------------------------------------------------------------------------------
# conv2d as one Function

# reduction lengths of _conv_run's outputs (x: 3x2x6x5, w: 4x2x3x3, stride (2, 1),
# padding 1, so the output is 3x4x3x5): y sums C·kh·kw = 18 products, x.grad Cout·kh·kw = 36,
# w.grad and b.grad N·Ho·Wo = 45
_CONV_K = {"y": 18, "x.grad": 36, "w.grad": 45, "b.grad": 45}


def _conv_run(device, bias, create_graph):
    rng = np.random.default_rng(0)
    x = mini.tensor(rng.standard_normal((3, 2, 6, 5)).astype(np.float32), device=device,
                    requires_grad=True)
    w = mini.tensor(rng.standard_normal((4, 2, 3, 3)).astype(np.float32), device=device,
                    requires_grad=True)
    b = mini.tensor(rng.standard_normal(4).astype(np.float32), device=device,
                    requires_grad=True) if bias else None
    y = conv_ops.conv2d(x, w, b, stride=(2, 1), padding=1)
    gy = mini.tensor(rng.standard_normal(tuple(y.shape)).astype(np.float32), device=device)
    if create_graph:
        gx, gw = mini.autograd.grad((y * y * gy).sum(), (x, w), create_graph=True)
        ((gx * gx).sum() + (gw * gw).sum()).backward()
    else:
        (y * gy).sum().backward()
    out = [y.detach().numpy(), x.grad.numpy(), w.grad.numpy()]
    if bias and not create_graph:
        out.append(b.grad.numpy())
    return [a.copy() for a in out], y


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bias", [True, False])
def test_fused_conv2d_matches_the_composed_ops(device, bias, monkeypatch):
    # Equal up to float32 rounding, not bit for bit: on numpy the fused Function's matrix
    # products have other shapes than the composed ops' (so BLAS blocks the sums
    # differently: 1.9e-6 apart in w.grad under OpenBLAS's Haswell kernel, 0 under
    # SkylakeX); on cpu the C++ conv kernels sum in another order than im2col + matmul.
    fused, y = _conv_run(device, bias, False)
    assert type(y.grad_fn).__name__.startswith("Conv2dFunction")
    with exercises.fast_paths(False, "conv2d"):
        slot, y = _conv_run(device, bias, False)
    assert not type(y.grad_fn).__name__.startswith("Conv2dFunction")
    for (name, k), got, want in zip(_CONV_K.items(), fused, slot):
        assert_close_to_rounding(got, want, np.float32, k, err_msg=name)


@pytest.mark.parametrize("device", DEVICES)
def test_fused_conv2d_double_backward(device, monkeypatch):
    fused, _ = _conv_run(device, True, True)
    with exercises.fast_paths(False, "conv2d"):
        slot, _ = _conv_run(device, True, True)
    # two convolutions in a chain (the gradient of a gradient): their lengths add
    for (name, k), got, want in zip(_CONV_K.items(), fused, slot):
        assert_close_to_rounding(got, want, np.float32, k + 45, err_msg=name)


@pytest.mark.parametrize("device", DEVICES)
def test_fused_conv2d_runs_registered_im2col_col2im(device):
    calls = []
    for slot in ("04.im2col", "04.col2im"):
        _student(slot, calls)
    try:
        x = mini.randn(2, 2, 5, 5, device=device, requires_grad=True)
        w = mini.randn(3, 2, 3, 3, device=device, requires_grad=True)
        conv_ops.conv2d(x, w, None, padding=1).sum().backward()
        assert "04.im2col" in calls and "04.col2im" in calls
    finally:
        for slot in ("04.im2col", "04.col2im"):
            exercises.unregister(slot)


# ---------------------------------------------------------------------------------------
# leaf gradients: a private copy, as before

def test_leaf_gradient_is_a_private_copy():
    x = mini.randn(3, requires_grad=True)
    seed = mini.ones(3)
    (x * 1.0).backward(seed)
    assert not np.shares_memory(x.grad.numpy(), seed.numpy())
    np.testing.assert_array_equal(x.grad.numpy(), 1.0)
    assert x.grad.grad_fn is None and not x.grad.requires_grad


def test_fused_conv2d_sees_an_inplace_change_of_the_weight():
    x = mini.randn(2, 2, 5, 5, requires_grad=True)
    w = mini.randn(3, 2, 3, 3, requires_grad=True)
    y = conv_ops.conv2d(x, w, None, padding=1)
    with mini.no_grad():
        w.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


@pytest.mark.parametrize("shape,k,s,p", [((2, 3, 8, 8), 2, 2, 0), ((2, 3, 9, 8), 2, 2, 0),
                                         ((1, 2, 6, 6), 3, 3, 0), ((1, 2, 6, 6), 2, 2, 1),
                                         ((1, 2, 7, 7), 3, 2, 0)])
def test_max_pool_backward_tiled_windows_match_the_general_rule(shape, k, s, p):
    # numpy's gradient (mini's reference of max_pool2d_grad) against the general rule, one
    # strided add per window offset, written here: the same values, nothing is summed
    # differently when windows tile the input
    rng = np.random.default_rng(0)
    a = rng.standard_normal(shape).astype(np.float32)
    a[0, 0, :2, :2] = 1.0  # a tie: the first maximum of the window takes the gradient
    kern, st, pad, dil, extra, out = conv_ops.pool_geometry("t", shape, k, s, p)
    _, arg = conv_ops.max_pool2d_windows.reference(a, kern, st, pad, dil, extra, out)
    gn = rng.standard_normal(arg.shape).astype(np.float32)
    got = conv_ops.max_pool2d_grad.reference(gn, arg, shape, kern, st, pad, dil, extra, out)
    (kh, kw), (sh, sw), (ph, pw), (ho, wo) = kern, st, pad, out
    n, c, h, w = shape
    want = np.zeros((n, c, h + 2 * ph + extra[0], w + 2 * pw + extra[1]), np.float32)
    for i in range(kh):
        for j in range(kw):
            want[:, :, i:i + sh * ho:sh, j:j + sw * wo:sw] += np.where(arg == i * kw + j, gn, 0)
    np.testing.assert_array_equal(got, want[:, :, ph:ph + h, pw:pw + w])


# ---------------------------------------------------------------------------------------
# relu's backward (02.relu_vjp) without a graph

@pytest.mark.parametrize("device", DEVICES)
def test_fast_relu_vjp_is_bit_identical_to_the_slot(device, monkeypatch):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((6, 7)).astype(np.float32)
    a[0, :3] = 0.0
    g = rng.standard_normal((6, 7)).astype(np.float32)

    def run():
        x = mini.tensor(a, device=device, requires_grad=True)
        x.relu().backward(mini.tensor(g, device=device))
        return x.grad.numpy().copy()
    fast = run()
    monkeypatch.setitem(exercises._IS_SOLUTION, "02.relu_vjp", False)  # as a stub: no fast path
    np.testing.assert_array_equal(fast, run())
    monkeypatch.delitem(exercises._IS_SOLUTION, "02.relu_vjp")
    calls = []
    _student("02.relu_vjp", calls)
    try:
        run()
        assert calls == ["02.relu_vjp"]
    finally:
        exercises.unregister("02.relu_vjp")


def test_relu_double_backward_still_differentiable():
    x = mini.tensor([-1.0, 2.0, 3.0], requires_grad=True)
    y = (x.relu() * x).sum()
    g, = mini.autograd.grad(y, x, create_graph=True)
    g.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 2.0, 2.0])
