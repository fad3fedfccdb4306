"""The cpu backend's fused conv kernels (``conv2d_forward`` / ``conv2d_backward`` in
kernels.cpp), which build each image's columns a few rows at a time in cache instead of
the whole im2col matrix.

Checked against a float64 numpy oracle (an einsum over the padded input, independent of
the chapter 04 slots), with hypothesis over geometries, for determinism across runs,
for every error path, and for how ``mini.conv2d`` routes between the kernels and the
chapter 04 slots (a student's ``04.conv2d_forward`` / ``04.conv2d_backward`` always runs).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import mini
from mini import exercises
from mini.backends import get_backend
from mini.ops import conv as conv_ops


def _windows(x, kh, kw, sh, sw, ph, pw):
    """[N, C, Ho, Wo, kh, kw] receptive fields of x (float64, padded), by index arithmetic."""
    n, c, h, w = x.shape
    xp = np.zeros((n, c, h + 2 * ph, w + 2 * pw))
    xp[:, :, ph:ph + h, pw:pw + w] = x
    ho, wo = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    i = (np.arange(ho) * sh)[:, None] + np.arange(kh)[None, :]          # [Ho, kh]
    j = (np.arange(wo) * sw)[:, None] + np.arange(kw)[None, :]          # [Wo, kw]
    return xp[:, :, i[:, None, :, None], j[None, :, None, :]]           # [N, C, Ho, Wo, kh, kw]


def oracle(x, w, b, g, stride, padding):
    """Forward output and (grad_x, grad_w, grad_b) in float64."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    kh, kw = w.shape[2:]
    win = _windows(x, kh, kw, *stride, *padding)
    out = np.einsum("ncijpq,ocpq->noij", win, w)
    if b is not None:
        out += b.astype(np.float64)[None, :, None, None]
    if g is None:
        return out, None
    g = g.astype(np.float64)
    gw = np.einsum("ncijpq,noij->ocpq", win, g)
    gb = g.sum(axis=(0, 2, 3))
    gwin = np.einsum("noij,ocpq->ncijpq", g, w)                           # d out / d windows
    n, c, h, wd = x.shape
    ph, pw = padding
    gxp = np.zeros((n, c, h + 2 * ph, wd + 2 * pw))
    ho, wo = out.shape[2:]
    for p in range(kh):
        for q in range(kw):
            gxp[:, :, p:p + stride[0] * ho:stride[0], q:q + stride[1] * wo:stride[1]] += gwin[..., p, q]
    return out, (gxp[:, :, ph:ph + h, pw:pw + wd], gw, gb)


def _close(got, want, dtype):
    tol = 2e-5 if dtype == np.float32 else 1e-11
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=0, atol=tol * scale)


def _run_kernels(x, w, b, g, stride, padding, need=(True, True, True)):
    be = get_backend("cpu")
    out = be.conv2d_forward(x, w, b, stride, padding)
    grads = be.conv2d_backward(x, w, g, stride, padding, *need)
    return out, grads


GEOMETRIES = [
    # (N, C, H, W), (Cout, kh, kw), stride, padding
    ((1, 1, 5, 5), (1, 3, 3), (1, 1), (0, 0)),
    ((2, 3, 7, 6), (4, 3, 2), (2, 1), (1, 0)),
    ((5, 2, 9, 11), (7, 2, 3), (1, 2), (0, 2)),
    ((4, 1, 3, 3), (2, 5, 5), (3, 2), (2, 1)),
    ((6, 3, 8, 5), (13, 1, 1), (1, 1), (0, 0)),
    ((3, 2, 4, 4), (5, 3, 3), (2, 2), (3, 3)),      # padding wider than the kernel's reach
    ((64, 1, 28, 28), (6, 5, 5), (1, 1), (2, 2)),   # LeNet: the parallel paths
    ((64, 6, 14, 14), (16, 5, 5), (1, 1), (0, 0)),
    ((2, 40, 40, 40), (24, 3, 3), (1, 1), (1, 1)),  # several row blocks per image
    ((1, 3, 33, 17), (50, 4, 4), (3, 3), (1, 2)),   # one image: Cout over one AVX-512 tile
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("xs,ws,stride,padding", GEOMETRIES)
def test_kernels_match_the_oracle(ext, dtype, bias, xs, ws, stride, padding):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(xs).astype(dtype)
    w = rng.standard_normal((ws[0], xs[1], ws[1], ws[2])).astype(dtype)
    b = rng.standard_normal(ws[0]).astype(dtype) if bias else None
    want, _ = oracle(x, w, b, None, stride, padding)
    g = rng.standard_normal(want.shape).astype(dtype)
    want, (wgx, wgw, wgb) = oracle(x, w, b, g, stride, padding)
    out, (gx, gw, gb) = _run_kernels(x, w, b, g, stride, padding)
    _close(out.reshape(want.shape), want, dtype)
    _close(gx.reshape(x.shape), wgx, dtype)
    _close(gw.reshape(w.shape), wgw, dtype)
    _close(gb, wgb, dtype)
    assert out.dtype == gx.dtype == gw.dtype == gb.dtype == dtype


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 3), c=st.integers(1, 4), cout=st.integers(1, 9), h=st.integers(1, 9),
       w=st.integers(1, 9), kh=st.integers(1, 4), kw=st.integers(1, 4), sh=st.integers(1, 3),
       sw=st.integers(1, 3), ph=st.integers(0, 3), pw=st.integers(0, 3),
       need=st.tuples(st.booleans(), st.booleans(), st.booleans()), f64=st.booleans())
def test_kernels_match_the_oracle_on_random_geometries(n, c, cout, h, w, kh, kw, sh, sw, ph, pw,
                                                       need, f64):
    if h + 2 * ph < kh or w + 2 * pw < kw:
        return
    dtype = np.float64 if f64 else np.float32
    rng = np.random.default_rng(n * 1000 + c * 100 + h * 10 + w)
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    wt = rng.standard_normal((cout, c, kh, kw)).astype(dtype)
    b = rng.standard_normal(cout).astype(dtype)
    out0, _ = oracle(x, wt, b, None, (sh, sw), (ph, pw))
    g = rng.standard_normal(out0.shape).astype(dtype)
    want, wgrads = oracle(x, wt, b, g, (sh, sw), (ph, pw))
    out, grads = _run_kernels(x, wt, b, g, (sh, sw), (ph, pw), need)
    _close(out.reshape(want.shape), want, dtype)
    for got, exp, asked in zip(grads, wgrads, need):
        if asked:
            _close(got.reshape(exp.shape), exp, dtype)
        else:
            assert got is None


def test_kernels_are_deterministic_across_runs():
    # weight-gradient partial sums are added in thread order: the same bits every run
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 6, 14, 14)).astype(np.float32)
    w = rng.standard_normal((16, 6, 5, 5)).astype(np.float32)
    g = rng.standard_normal((64, 16, 10, 10)).astype(np.float32)
    first = _run_kernels(x, w, None, g, (1, 1), (0, 0))
    for _ in range(3):
        again = _run_kernels(x, w, None, g, (1, 1), (0, 0))
        np.testing.assert_array_equal(again[0], first[0])
        for a, b in zip(again[1], first[1]):
            np.testing.assert_array_equal(a, b)


def test_empty_channels_and_batches(ext):
    f = np.float32
    b = np.array([1.5, -2.0], f)
    out = np.full(2 * 2 * 3 * 3, np.nan, f)
    ext.conv2d_forward(np.empty(0, f), [2, 0, 3, 3], np.empty(0, f), [2, 0, 1, 1], b, [1, 1], [0, 0], out)
    np.testing.assert_array_equal(out.reshape(2, 2, 3, 3), np.broadcast_to(b[None, :, None, None], (2, 2, 3, 3)))
    g = np.ones(2 * 2 * 3 * 3, f)
    gw, gb = np.full(0, np.nan, f), np.full(2, np.nan, f)
    ext.conv2d_backward(np.empty(0, f), [2, 0, 3, 3], np.empty(0, f), [2, 0, 1, 1], g, [1, 1], [0, 0],
                        np.empty(0, f), gw, gb)
    np.testing.assert_array_equal(gb, [18.0, 18.0])
    ext.conv2d_forward(np.empty(0, f), [0, 1, 3, 3], np.ones(2, f), [2, 1, 1, 1], None, [1, 1], [0, 0],
                       np.empty(0, f))


def test_kernel_errors_name_the_problem(ext):
    f = np.float32
    x = np.ones(2 * 3 * 5 * 5, f)
    w = np.ones(4 * 3 * 3 * 3, f)
    out = np.empty(2 * 4 * 3 * 3, f)
    good = dict(x_shape=[2, 3, 5, 5], weight_shape=[4, 3, 3, 3], stride=[1, 1], padding=[0, 0])

    def fwd(**kw):
        args = dict(x=x, weight=w, bias=None, out=out, **good)
        args.update(kw)
        ext.conv2d_forward(**args)

    def bwd(**kw):
        args = dict(x=x, weight=w, grad_out=out, grad_x=None, grad_weight=np.empty(w.size, f),
                    grad_bias=None, **good)
        args.update(kw)
        ext.conv2d_backward(**args)

    fwd()
    bwd()
    K = "mini.backends._cpu.conv2d_forward"
    with pytest.raises(ValueError, match=K + r": x has 3 channels .* expects 2"):
        fwd(weight_shape=[4, 2, 3, 3])
    with pytest.raises(ValueError, match=r"weight_shape must be \(Cout, C, kh, kw\)"):
        fwd(weight_shape=[4, 3, 3])
    with pytest.raises(ValueError, match=r"'weight' has 108 elements but weight_shape \[5, 3, 3, 3\]"):
        fwd(weight_shape=[5, 3, 3, 3])
    with pytest.raises(ValueError, match=r"'x' has 150 elements but x_shape \[2, 3, 5, 6\]"):
        fwd(x_shape=[2, 3, 5, 6])
    with pytest.raises(ValueError, match=r"'out' has 72 elements but the output \[N, Cout, Ho, Wo\]"):
        fwd(padding=[1, 1])
    with pytest.raises(ValueError, match=r"'bias' has 3 elements but Cout is 4"):
        fwd(bias=np.ones(3, f))
    with pytest.raises(TypeError, match=r"dtypes differ"):
        fwd(weight=w.astype(np.float64))
    with pytest.raises(TypeError, match=r"dtypes differ"):
        fwd(bias=np.ones(4, np.float64))
    with pytest.raises(ValueError, match=r"kernel \[3, 3\] is larger than the padded input \(2, 2\)"):
        fwd(x_shape=[2, 3, 2, 2], x=np.ones(24, f))
    with pytest.raises(ValueError, match=r"invalid kernel_size .* stride \[0, 1\]"):
        fwd(stride=[0, 1])
    with pytest.raises(ValueError, match=r"overlaps"):
        fwd(out=x[:out.size])
    with pytest.raises((TypeError, ValueError), match=r"contiguous"):
        fwd(x=np.ones(2 * x.size, f)[::2])
    with pytest.raises(ValueError, match=r"overflows a 64-bit index"):
        fwd(x_shape=[2**40, 3, 2**40, 5])
    K = "mini.backends._cpu.conv2d_backward"
    with pytest.raises(ValueError, match=K + r": 'grad_out' has 7 elements"):
        bwd(grad_out=np.ones(7, f))
    with pytest.raises(ValueError, match=r"'grad_x' has 3 elements, expected 150"):
        bwd(grad_x=np.empty(3, f))
    with pytest.raises(ValueError, match=r"'grad_bias' has 3 elements, expected 4"):
        bwd(grad_bias=np.empty(3, f))
    with pytest.raises(ValueError, match=r"overlaps"):
        bwd(grad_weight=w)
    both = np.empty(w.size + 4, f)
    with pytest.raises(ValueError, match=r"must not overlap"):
        bwd(grad_weight=both[:w.size], grad_bias=both[w.size - 2:w.size + 2])
    with pytest.raises((TypeError, ValueError), match=r"output .grad_weight. is read-only"):
        ro = np.empty(w.size, f)
        ro.flags.writeable = False
        bwd(grad_weight=ro)


# ---------------------------------------------------------------------------------------
# mini.conv2d: the kernels stand in for the chapter 04 slots only while those run mini's
# reference; a student's conv2d_forward / conv2d_backward always runs.

def _conv_step(device, rng_seed=0, bias=True):
    rng = np.random.default_rng(rng_seed)
    x = mini.tensor(rng.standard_normal((3, 2, 7, 6)).astype(np.float32), device=device, requires_grad=True)
    w = mini.tensor(rng.standard_normal((4, 2, 3, 3)).astype(np.float32), device=device, requires_grad=True)
    b = mini.tensor(rng.standard_normal(4).astype(np.float32), device=device, requires_grad=True) if bias else None
    y = conv_ops.conv2d(x, w, b, stride=(2, 1), padding=1)
    (y * y).sum().backward()
    return [y.detach().numpy().copy(), x.grad.numpy().copy(), w.grad.numpy().copy()] + \
        ([b.grad.numpy().copy()] if bias else [])


def _counting(slot, calls, transform=None):
    ref = exercises.reference(slot)

    def student(*args):
        calls.append(slot)
        out = ref(*args)
        return transform(out) if transform else out
    exercises.implement(slot)(student)


@pytest.mark.parametrize("device", ["numpy", "cpu"])
@pytest.mark.parametrize("slot", ["04.conv2d_forward", "04.conv2d_backward"])
def test_a_students_conv_slot_runs_inside_mini_conv2d(device, slot, monkeypatch):
    want = _conv_step(device)
    native_calls = []
    be = get_backend("cpu")
    for name in ("conv2d_forward", "conv2d_backward"):
        orig = getattr(type(be), name)
        monkeypatch.setattr(type(be), name, lambda self, *a, _o=orig, _n=name, **k: (native_calls.append(_n),
                                                                                      _o(self, *a, **k))[1])
    calls = []
    _counting(slot, calls)
    try:
        got = _conv_step(device)
    finally:
        exercises.unregister(slot)
    assert calls == [slot]
    # the C++ kernel of the student's slot never runs: the student's code does (the other
    # slot, still mini's reference, may run on its kernel)
    assert slot.split(".")[1] not in native_calls
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    native_calls.clear()
    _conv_step(device)  # the student's function unregistered: the kernels are back on cpu
    assert native_calls == (["conv2d_forward", "conv2d_backward"] if device == "cpu" else [])


@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_a_students_conv_with_the_wrong_shape_gets_a_clear_error(device):
    _counting("04.conv2d_forward", [], transform=lambda out: out.transpose(0, 2, 3, 1))
    try:
        with pytest.raises(ValueError, match=r"exercise 04.conv2d_forward returned the output of shape "
                                             r"\(3, 4, 6, 4\); expected \(3, 4, 4, 6\)"):
            _conv_step(device)
    finally:
        exercises.unregister("04.conv2d_forward")
    _counting("04.conv2d_backward", [], transform=lambda grads: grads[:2])
    try:
        with pytest.raises(TypeError, match=r"04.conv2d_backward must return a tuple \(grad_x, grad_weight, "
                                            r"grad_bias\)"):
            _conv_step(device)
    finally:
        exercises.unregister("04.conv2d_backward")
    _counting("04.conv2d_backward", [], transform=lambda g: (g[0], g[1].ravel(), g[2]))
    try:
        with pytest.raises(ValueError, match=r"04.conv2d_backward returned grad_weight of shape \(72,\)"):
            _conv_step(device)
    finally:
        exercises.unregister("04.conv2d_backward")


def test_conv_input_changed_in_place_before_backward_is_reported():
    x = mini.randn(2, 2, 5, 5, device="cpu", requires_grad=True)
    w = mini.randn(3, 2, 3, 3, device="cpu", requires_grad=True)
    h = x * 1.0
    y = conv_ops.conv2d(h, w, None, padding=1)
    with mini.no_grad():
        h.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_conv_graph_keeps_only_its_input_and_weight(device):
    x = mini.randn(4, 3, 10, 10, device=device, requires_grad=True)
    w = mini.randn(8, 3, 3, 3, device=device, requires_grad=True)
    y = conv_ops.conv2d(x, w, None)
    # no column matrix is kept: backward rebuilds what it needs from x
    assert mini.autograd.graph.saved_tensor_bytes(y) == (x.numel() + w.numel()) * 4


def test_conv_kernels_match_pytorch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 3, 13, 11)).astype(np.float32)
    w = rng.standard_normal((5, 3, 4, 3)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    tx, tw, tb = (mini.tensor(a, device="cpu", requires_grad=True) for a in (x, w, b))
    y = conv_ops.conv2d(tx, tw, tb, stride=(2, 1), padding=(1, 2))
    gy = rng.standard_normal(tuple(y.shape)).astype(np.float32)
    (y * mini.tensor(gy, device="cpu")).sum().backward()
    px, pw, pb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    py_ = torch.nn.functional.conv2d(px, pw, pb, stride=(2, 1), padding=(1, 2))
    py_.backward(torch.tensor(gy))
    for got, want in [(y.detach().numpy(), py_.detach().numpy()), (tx.grad.numpy(), px.grad.numpy()),
                      (tw.grad.numpy(), pw.grad.numpy()), (tb.grad.numpy(), pb.grad.numpy())]:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("xs,ws", [((0, 2, 5, 5), (3, 2, 3, 3)), ((2, 0, 5, 5), (3, 0, 3, 3))])
def test_empty_batches_and_channels_through_mini_conv2d(xs, ws):
    rng = np.random.default_rng(0)
    runs = []
    for device in ("numpy", "cpu"):
        x = mini.tensor(np.zeros(xs, np.float32), device=device, requires_grad=True)
        w = mini.tensor(np.zeros(ws, np.float32), device=device, requires_grad=True)
        b = mini.tensor(rng.standard_normal(ws[0]).astype(np.float32), device=device, requires_grad=True)
        y = conv_ops.conv2d(x, w, b, padding=1)
        (y * 2.0).sum().backward()
        runs.append([y.detach().numpy(), x.grad.numpy(), w.grad.numpy(), b.grad.numpy()])
        rng = np.random.default_rng(0)
    for got, want in zip(runs[1], runs[0]):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
