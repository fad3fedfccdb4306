"""The cpu backend's max-pooling kernels (``max_pool2d_forward`` / ``max_pool2d_backward`` in
kernels.cpp), the fast path of mini's max pooling on device="cpu".

Checked against an independent float64 loop oracle (every window, padding as -inf, the first
maximum), against mini's numpy path (the same values and positions; the same gradients up
to the order overlapping windows add in), with hypothesis over geometries (padding,
dilation, ceil_mode, overlapping and tiled windows, ties, -inf and NaN), for every error
path, and for the routing: device="numpy" never runs the kernel.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import mini
from mini.ops import conv as conv_ops
from mini.ops import fast_paths


def _oracle(x, geom):
    """(values, positions, gradient of sum(values * g)) by plain loops, in float64."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw), _, (ho, wo) = geom
    n, c, h, w = x.shape
    vals = np.empty((n, c, ho, wo))
    pos = np.empty((n, c, ho, wo), np.int64)
    for b in range(n):
        for ch in range(c):
            for i in range(ho):
                for j in range(wo):
                    best, where = None, 0
                    for p in range(kh):
                        for q in range(kw):
                            y, z = i * sh - ph + p * dh, j * sw - pw + q * dw
                            v = x[b, ch, y, z] if 0 <= y < h and 0 <= z < w else -np.inf
                            if best is None or v > best or (np.isnan(v) and not np.isnan(best)):
                                best, where = v, p * kw + q
                    vals[b, ch, i, j], pos[b, ch, i, j] = best, where
    return vals, pos


def _grad_oracle(g, pos, shape, geom):
    (kh, kw), (sh, sw), (ph, pw), (dh, dw), _, (ho, wo) = geom
    out = np.zeros(shape)
    n, c, h, w = shape
    for b, ch, i, j in np.ndindex(g.shape):
        p, q = divmod(int(pos[b, ch, i, j]), kw)
        y, z = i * sh - ph + p * dh, j * sw - pw + q * dw
        if 0 <= y < h and 0 <= z < w:
            out[b, ch, y, z] += g[b, ch, i, j]
    return out


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 2), c=st.integers(1, 3), h=st.integers(1, 9), w=st.integers(1, 9),
       k=st.tuples(st.integers(1, 3), st.integers(1, 3)), s=st.tuples(st.integers(1, 3), st.integers(1, 3)),
       d=st.tuples(st.integers(1, 2), st.integers(1, 2)), pad=st.booleans(), ceil=st.booleans(),
       dtype=st.sampled_from([np.float32, np.float64]), special=st.sampled_from(["none", "ties", "inf", "nan"]),
       seed=st.integers(0, 2**16))
def test_max_pool_kernels_match_the_oracle_and_numpy(ext, n, c, h, w, k, s, d, pad, ceil, dtype, special, seed):
    p = ((d[0] * (k[0] - 1) + 1) // 2, (d[1] * (k[1] - 1) + 1) // 2) if pad else (0, 0)
    try:
        geom = conv_ops.pool_geometry("t", (n, c, h, w), k, s, p, d, ceil)
    except ValueError:
        return  # a window larger than the padded input: pool_geometry's error, not a kernel case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    if special == "ties":
        x = np.maximum(x, 0)           # what a ReLU hands the pool: many windows of zeros
    elif special == "inf":
        x[rng.random(x.shape) < 0.3] = -np.inf
    elif special == "nan":
        x[rng.random(x.shape) < 0.2] = np.nan
    vals, pos = fast_paths.max_pool2d_native(x, *geom)
    ref_vals, ref_pos = conv_ops.max_pool2d_windows.reference(x, *geom)
    want_vals, want_pos = _oracle(x.astype(np.float64), geom)
    np.testing.assert_array_equal(pos, want_pos)
    np.testing.assert_array_equal(pos, ref_pos)
    np.testing.assert_array_equal(vals, want_vals.astype(dtype))   # a copy of an input: exact
    np.testing.assert_array_equal(vals, ref_vals)
    g = rng.standard_normal(vals.shape).astype(dtype)
    gx = fast_paths.max_pool2d_grad_native(g, pos, (n, c, h, w), *geom)
    want = _grad_oracle(g.astype(np.float64), pos, (n, c, h, w), geom)
    # a pixel collects at most kh*kw gradients (overlapping windows): the sums agree with
    # the float64 ones to that many roundings
    tol = (1e-6 if dtype == np.float32 else 1e-14) * k[0] * k[1]
    np.testing.assert_allclose(gx, want, rtol=tol, atol=tol)
    ref = conv_ops.max_pool2d_grad.reference(g, ref_pos, (n, c, h, w), *geom)
    np.testing.assert_allclose(gx, ref, rtol=tol, atol=tol)


def test_max_pool_kernel_errors(ext):
    f = np.float32
    x, out, arg = np.ones(2 * 3 * 4 * 4, f), np.empty(2 * 3 * 2 * 2, f), np.empty(2 * 3 * 2 * 2, np.int64)
    good = ([2, 3, 4, 4], [2, 2], [2, 2], [0, 0], [1, 1], [2, 2])
    ext.max_pool2d_forward(x, *good, out, arg)
    K = "mini.backends._cpu.max_pool2d_forward"
    with pytest.raises(ValueError, match=K + r": x_shape must be \(N, C, H, W\)"):
        ext.max_pool2d_forward(x, [2, 3, 16], *good[1:], out, arg)
    with pytest.raises(ValueError, match=r"invalid kernel_size \[0, 2\]"):
        ext.max_pool2d_forward(x, good[0], [0, 2], *good[2:], out, arg)
    with pytest.raises(ValueError, match=r"'x' has 96 elements but x_shape \[2, 3, 5, 4\] has 120"):
        ext.max_pool2d_forward(x, [2, 3, 5, 4], *good[1:], out, arg)
    with pytest.raises(ValueError, match=r"'out' has 5 elements but N\*C\*Ho\*Wo = 24"):
        ext.max_pool2d_forward(x, *good, out[:5].copy(), arg)
    with pytest.raises(TypeError, match=r"'arg' has dtype int32; expected int64"):
        ext.max_pool2d_forward(x, *good, out, arg.astype(np.int32))
    with pytest.raises(TypeError, match=r"dtypes differ"):
        ext.max_pool2d_forward(x, *good, out.astype(np.float64), arg)
    with pytest.raises(ValueError, match=r"overlaps"):
        ext.max_pool2d_forward(x, *good, x[:24], arg)
    K = "mini.backends._cpu.max_pool2d_backward"
    gx = np.empty_like(x)
    ext.max_pool2d_backward(out, arg, *good, gx)
    bad = arg.copy()
    bad[3] = 4
    with pytest.raises(ValueError, match=K + r": 'arg' holds 4 at 3; window positions are 0..3"):
        ext.max_pool2d_backward(out, bad, *good, gx)
    with pytest.raises(ValueError, match=r"'grad_x' has 95 elements"):
        ext.max_pool2d_backward(out, arg, *good, gx[:95].copy())


@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_max_pool_runs_the_kernel_on_cpu_only(device, monkeypatch):
    calls = []
    real = fast_paths._cpu_kernel
    monkeypatch.setattr(fast_paths, "_cpu_kernel", lambda name: (calls.append(name), real(name))[1])
    x = mini.randn(2, 3, 6, 6, device=device, requires_grad=True)
    y = mini.nn.functional.max_pool2d(x, 2)
    (y * y).sum().backward()
    assert calls == (["max_pool2d_forward", "max_pool2d_backward"] if device == "cpu" else [])
    with mini.exercises.fast_paths(False, "max_pool2d", "max_pool2d_backward"):
        x2 = x.detach().requires_grad_()
        y2 = mini.nn.functional.max_pool2d(x2, 2)
        (y2 * y2).sum().backward()
    np.testing.assert_array_equal(y.detach().numpy(), y2.detach().numpy())
    np.testing.assert_array_equal(x.grad.numpy(), x2.grad.numpy())  # tiled: nothing summed
