"""The performance kernels of the cpu backend, checked against numpy oracles:

- ``matmul_strided``: a matrix product of strided views (transposed, offset, broadcast),
  including the split-reduction path for small outputs with a long reduction;
- ``im2col`` / ``col2im``: the conv layout maps, against the chapter 04 reference slots;

and the Python fast paths that use them (the cpu backend's matmul, the conv ops, the fused
AdamW step), including that a student's registered implementation is never bypassed.
Every error path raises a clear Python error before any memory is touched.
"""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

import mini
from mini import exercises
from mini.ops import conv as conv_ops

DTYPES = [np.float32, np.float64]


def _view(buf, offset, shape, strides):
    """The numpy view a (buffer, offset, strides-in-elements) triple describes."""
    item = buf.itemsize
    return np.lib.stride_tricks.as_strided(buf[offset:], shape, tuple(s * item for s in strides),
                                           writeable=False)


def _layout(kind, rows, cols):
    """(strides, elements needed) of a rows x cols view laid out as ``kind``."""
    if kind == "c":          # row-major
        return (cols, 1), rows * cols
    if kind == "t":          # a transposed row-major array
        return (1, rows), rows * cols
    if kind == "pad":        # row-major with padded rows
        return (cols + 3, 1), rows * (cols + 3)
    if kind == "bcast_row":  # one row broadcast over all rows
        return (0, 1), cols
    raise ValueError(kind)


def _tol(dtype, k):
    return (2e-5 if dtype == np.float32 else 1e-12) * max(1.0, np.sqrt(k))


SHAPES = [
    (1, 1, 1), (2, 3, 4), (7, 13, 5), (1, 300, 9), (9, 300, 1),   # tiny and matrix-vector
    (33, 70, 65), (130, 257, 70),                                    # ragged tiles
    (150, 6400, 16), (25, 5000, 6), (5, 2000, 3), (64, 4000, 64),   # split-reduction path
    (3000, 25, 6), (3000, 16, 150),                                  # tall and thin
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("la,lb", [("c", "c"), ("t", "c"), ("c", "t"), ("t", "t"),
                                   ("pad", "bcast_row"), ("bcast_row", "pad")])
def test_matmul_strided_matches_numpy(cpu, dtype, m, k, n, la, lb):
    rng = np.random.default_rng(m * 1000 + k + n)
    (ars, acs), na = _layout(la, m, k)
    (brs, bcs), nb = _layout(lb, k, n)
    a_off, b_off = 5, 3
    abuf = rng.standard_normal(na + a_off + 2).astype(dtype)
    bbuf = rng.standard_normal(nb + b_off + 1).astype(dtype)
    out = np.full(m * n, np.nan, dtype)
    cpu.matmul_strided(abuf, a_off, ars, acs, bbuf, b_off, brs, bcs, out, m, k, n)
    want = _view(abuf, a_off, (m, k), (ars, acs)).astype(np.float64) @ \
        _view(bbuf, b_off, (k, n), (brs, bcs)).astype(np.float64)
    np.testing.assert_allclose(out.reshape(m, n), want, rtol=_tol(dtype, k), atol=_tol(dtype, k))


@pytest.mark.parametrize("isa_index", [0, -1])
def test_matmul_strided_every_instruction_set(cpu, isa_index):
    isa = cpu.supported_isas()[isa_index]
    try:
        cpu.set_matmul_isa(isa)
        for m, k, n in [(150, 3000, 16), (40, 33, 10), (200, 50, 40)]:
            for dtype in DTYPES:
                rng = np.random.default_rng(1)
                a = rng.standard_normal(m * k).astype(dtype)
                b = rng.standard_normal(k * n).astype(dtype)
                out = np.empty(m * n, dtype)
                cpu.matmul_strided(a, 0, 1, m, b, 0, n, 1, out, m, k, n)  # a read transposed
                want = a.reshape(k, m).T.astype(np.float64) @ b.reshape(k, n)
                np.testing.assert_allclose(out.reshape(m, n), want, rtol=_tol(dtype, k),
                                           atol=_tol(dtype, k))
    finally:
        cpu.set_matmul_isa("auto")


@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul_strided_degenerate(cpu, dtype):
    out = np.full(6, np.nan, dtype)
    cpu.matmul_strided(np.empty(0, dtype), 0, 0, 1, np.empty(0, dtype), 0, 3, 1, out, 2, 0, 3)
    np.testing.assert_array_equal(out, 0)                      # k = 0: zeros
    cpu.matmul_strided(np.empty(0, dtype), 0, 4, 1, np.ones(12, dtype), 0, 3, 1,
                       np.empty(0, dtype), 0, 4, 3)             # m = 0
    cpu.matmul_strided(np.ones(8, dtype), 0, 4, 1, np.empty(0, dtype), 0, 0, 1,
                       np.empty(0, dtype), 2, 4, 0)             # n = 0


def test_matmul_strided_errors(cpu):
    f = np.float32
    a, b, out = np.ones(12, f), np.ones(20, f), np.empty(15, f)
    K = "mini.backends._cpu.matmul_strided"
    with pytest.raises(ValueError, match=K + r": 'a' as a 3 x 4 view .* reaches elements 1..12 but "
                                          r"the buffer has 12 elements"):
        cpu.matmul_strided(a, 1, 4, 1, b, 0, 5, 1, out, 3, 4, 5)
    with pytest.raises(ValueError, match=r"'b' as a 4 x 5 view .* reaches elements -4..15"):
        cpu.matmul_strided(a, 0, 4, 1, b, 0, 5, -1, out, 3, 4, 5)
    with pytest.raises(ValueError, match=r"'a' offset must be >= 0, got -1"):
        cpu.matmul_strided(a, -1, 4, 1, b, 0, 5, 1, out, 3, 4, 5)
    with pytest.raises(ValueError, match=r"'out' has 15 elements but m x n = 3 x 6"):
        cpu.matmul_strided(a, 0, 4, 1, b, 0, 5, 1, out, 3, 4, 6)
    with pytest.raises(ValueError, match=r"m, k, n must be >= 0"):
        cpu.matmul_strided(a, 0, 4, 1, b, 0, 5, 1, out, -3, 4, 5)
    with pytest.raises(ValueError, match=r"overflows a 64-bit index"):
        cpu.matmul_strided(a, 0, 2**62, 1, b, 0, 5, 1, out, 3, 4, 5)
    with pytest.raises(TypeError, match=r"dtypes differ"):
        cpu.matmul_strided(a, 0, 4, 1, b.astype(np.float64), 0, 5, 1, out, 3, 4, 5)
    with pytest.raises(TypeError, match=r"dtype int64"):
        cpu.matmul_strided(np.ones(12, np.int64), 0, 4, 1, b, 0, 5, 1, out, 3, 4, 5)
    with pytest.raises(ValueError, match=r"not C-contiguous"):
        cpu.matmul_strided(np.ones(24, f)[::2], 0, 4, 1, b, 0, 5, 1, out, 3, 4, 5)
    with pytest.raises(ValueError, match=r"'out' overlaps 'a'"):
        cpu.matmul_strided(a, 0, 4, 1, b, 0, 5, 1, a[:12].view(), 3, 4, 4)
    ro = np.empty(15, f)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match=r"read-only"):
        cpu.matmul_strided(a, 0, 4, 1, b, 0, 5, 1, ro, 3, 4, 5)


# ---------------------------------------------------------------------------------------
# im2col / col2im against the chapter 04 references

GEOMETRIES = [
    # (N, C, H, W), (kh, kw), (sh, sw), (ph, pw)
    ((1, 1, 5, 5), (3, 3), (1, 1), (0, 0)),
    ((2, 3, 7, 6), (3, 2), (2, 1), (1, 0)),
    ((5, 2, 9, 11), (2, 3), (1, 2), (0, 2)),
    ((4, 1, 3, 3), (5, 5), (3, 2), (2, 1)),
    ((6, 3, 8, 5), (1, 1), (1, 1), (0, 0)),
    ((3, 2, 4, 4), (3, 3), (2, 2), (3, 3)),     # padding wider than the kernel reach
    ((64, 6, 14, 14), (5, 5), (1, 1), (0, 0)),  # LeNet sized: the parallel paths
    ((64, 1, 28, 28), (5, 5), (1, 1), (2, 2)),
]


def _ref_im2col(x, k, s, p):
    return exercises.reference("04.im2col")(x, k, s, p)


def _ref_col2im(cols, shape, k, s, p):
    return exercises.reference("04.col2im")(cols, shape, k, s, p)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,k,s,p", GEOMETRIES)
def test_im2col_matches_reference(cpu, dtype, shape, k, s, p):
    x = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    want = _ref_im2col(x, k, s, p)
    out = np.full(want.size, np.nan, dtype)
    cpu.im2col(x.reshape(-1), list(shape), list(k), list(s), list(p), out)
    np.testing.assert_array_equal(out.reshape(want.shape), want)  # a copy: exact


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,k,s,p", GEOMETRIES)
def test_col2im_matches_reference(cpu, dtype, shape, k, s, p):
    n, c, h, w = shape
    ho, wo = (h + 2 * p[0] - k[0]) // s[0] + 1, (w + 2 * p[1] - k[1]) // s[1] + 1
    cols = np.random.default_rng(1).standard_normal((n * ho * wo, c * k[0] * k[1])).astype(dtype)
    want = _ref_col2im(cols, shape, k, s, p)
    out = np.full(n * c * h * w, np.nan, dtype)
    cpu.col2im(cols.reshape(-1), list(shape), list(k), list(s), list(p), out)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out.reshape(shape), want, rtol=tol, atol=tol)


def test_im2col_col2im_errors(cpu):
    f = np.float32
    x = np.ones(2 * 3 * 5 * 5, f)
    cols = np.ones(2 * 9 * 27, f)          # N*Ho*Wo = 2*3*3 rows of C*kh*kw = 27
    good = ([2, 3, 5, 5], [3, 3], [1, 1], [0, 0])
    cpu.im2col(x, *good, np.empty(cols.size, f))
    cpu.col2im(cols, *good, np.empty(x.size, f))
    for name, fn, src, n_out in [("im2col", cpu.im2col, x, cols.size), ("col2im", cpu.col2im, cols, x.size)]:
        K = "mini.backends._cpu." + name
        with pytest.raises(ValueError, match=K + r": x_shape must be \(N, C, H, W\)"):
            fn(src, [2, 3, 5], [3, 3], [1, 1], [0, 0], np.empty(n_out, f))
        with pytest.raises(ValueError, match=r"kernel_size, stride and padding must be pairs"):
            fn(src, good[0], [3], [1, 1], [0, 0], np.empty(n_out, f))
        with pytest.raises(ValueError, match=r"invalid kernel_size \[3, 3\], stride \[0, 1\]"):
            fn(src, good[0], [3, 3], [0, 1], [0, 0], np.empty(n_out, f))
        with pytest.raises(ValueError, match=r"invalid kernel_size .* padding \[-1, 0\]"):
            fn(src, good[0], [3, 3], [1, 1], [-1, 0], np.empty(n_out, f))
        with pytest.raises(ValueError, match=r"negative dimension"):
            fn(src, [2, -3, 5, 5], [3, 3], [1, 1], [0, 0], np.empty(n_out, f))
        with pytest.raises(ValueError, match=r"kernel \[7, 3\] is larger than the padded input \(5, 5\)"):
            fn(src, good[0], [7, 3], [1, 1], [0, 0], np.empty(n_out, f))
        with pytest.raises(ValueError, match=r"'out' has 7 elements"):
            fn(src, *good, np.empty(7, f))
        with pytest.raises(ValueError, match=r"has 10 elements but"):
            fn(src[:10].copy(), *good, np.empty(n_out, f))
        with pytest.raises(TypeError, match=r"dtypes differ"):
            fn(src, *good, np.empty(n_out, np.float64))
        with pytest.raises(ValueError, match=r"overflows a 64-bit index"):
            fn(src, [2**40, 2**40, 5, 5], [3, 3], [1, 1], [0, 0], np.empty(n_out, f))
        with pytest.raises(ValueError, match=r"overlaps"):
            big = np.ones(x.size + cols.size, f)
            fn(big[:src.size], *good, big[:n_out])


# ---------------------------------------------------------------------------------------
# the Python fast paths


@pytest.mark.parametrize("la", ["c", "t"])
@pytest.mark.parametrize("lb", ["c", "t"])
def test_cpu_backend_matmul_of_transposed_views(la, lb):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((37, 300)).astype(np.float32)
    b = rng.standard_normal((300, 9)).astype(np.float32)
    ta = mini.tensor(a if la == "c" else np.ascontiguousarray(a.T), device="cpu")
    tb = mini.tensor(b if lb == "c" else np.ascontiguousarray(b.T), device="cpu")
    ta = ta if la == "c" else ta.transpose(0, 1)
    tb = tb if lb == "c" else tb.transpose(0, 1)
    with mini.ndarray.track_allocations() as stats:
        out = ta @ tb
    assert stats.count == 1  # the output only: no compact copy of a transposed operand
    np.testing.assert_allclose(out.numpy(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_numpy_backend_matmul_of_broadcast_operand():
    g = mini.ones(1, 16).expand(500, 16)  # a zero-stride view, as the gradient of sum()
    w = mini.tensor(np.random.default_rng(0).standard_normal((16, 7)).astype(np.float32))
    np.testing.assert_allclose((g @ w).numpy(), np.ones((500, 16)) @ w.numpy(), rtol=1e-5)


@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_conv_uses_the_native_kernels_only_for_the_reference(device, monkeypatch):
    rng = np.random.default_rng(0)
    x = mini.tensor(rng.standard_normal((3, 2, 7, 6)).astype(np.float32), device=device,
                    requires_grad=True)
    w = mini.tensor(rng.standard_normal((4, 2, 3, 3)).astype(np.float32), device=device,
                    requires_grad=True)

    def run():
        x.grad = w.grad = None
        out = conv_ops.conv2d(x, w, None, stride=(2, 1), padding=1)
        (out * out).sum().backward()
        return out.detach().numpy(), x.grad.numpy(), w.grad.numpy()

    native = run()
    with exercises.fast_paths(False, "04.conv2d_forward", "04.conv2d_backward", "04.im2col",
                              "04.col2im"):
        slots = run()
    for got, want in zip(native, slots):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)

    # A student's implementation is what runs, whenever one is registered.
    calls = []
    for slot in ("04.im2col", "04.col2im", "04.im2col_view"):
        ref = exercises.reference(slot)

        def student(*args, _ref=ref, _slot=slot):
            calls.append(_slot)
            return _ref(*args)
        exercises.implement(slot)(student)
        try:
            calls.clear()
            run()
            assert calls, f"{slot} registered but not called"
        finally:
            exercises.unregister(slot)


def test_runs_reference_sees_students_and_stubs(monkeypatch):
    assert exercises.runs_reference("05.adamw_step")
    exercises.implement("05.adamw_step")(exercises.reference("05.adamw_step"))
    try:
        assert not exercises.runs_reference("05.adamw_step")
    finally:
        exercises.unregister("05.adamw_step")
    monkeypatch.setitem(exercises._IS_SOLUTION, "05.adamw_step", False)  # a release stub
    assert not exercises.runs_reference("05.adamw_step")


@pytest.mark.parametrize("device", ["numpy", "cpu"])
@pytest.mark.parametrize("cls,kw", [("AdamW", dict(weight_decay=1e-2)), ("Adam", dict(weight_decay=1e-2)),
                                    ("AdamW", dict(weight_decay=0.0, maximize=True))])
def test_fused_adamw_is_bit_identical_to_the_slot(device, cls, kw, monkeypatch):
    from mini.optim import adam

    def train(fused):
        monkeypatch.setitem(exercises._IS_SOLUTION, "05.adamw_step", fused)
        rng = np.random.default_rng(1)
        ps = [mini.tensor(rng.standard_normal(s).astype(np.float32), device=device,
                          requires_grad=True) for s in [(3, 4), (5,), (2, 3, 3)]]
        opt = getattr(adam, cls)(ps, lr=1e-2, **kw)
        for _ in range(4):
            for p in ps:
                p.grad = mini.tensor(rng.standard_normal(p.shape).astype(np.float32), device=device)
            opt.step()
        state = [(s["exp_avg"].numpy(), s["exp_avg_sq"].numpy()) for s in opt.state.values()]
        return [p.detach().numpy() for p in ps], [p._data.storage.version for p in ps], state

    fused, slot = train(True), train(False)
    for f, s in zip(fused[0], slot[0]):
        np.testing.assert_array_equal(f, s)
    assert fused[1] == slot[1]
    for (fm, fv), (sm, sv) in zip(fused[2], slot[2]):
        np.testing.assert_array_equal(fm, sm)
        np.testing.assert_array_equal(fv, sv)


def test_adamw_runs_a_registered_student_step():
    from mini.optim.adam import AdamW
    calls = []
    ref = exercises.reference("05.adamw_step")

    @exercises.implement("05.adamw_step")
    def student(*args):
        calls.append(1)
        return ref(*args)
    try:
        p = mini.tensor([1.0, 2.0], requires_grad=True)
        p.grad = mini.tensor([0.5, -0.5])
        AdamW([p], lr=0.1).step()
        assert calls == [1]
    finally:
        exercises.unregister("05.adamw_step")


def test_large_buffers_are_recycled_only_when_free():
    from mini.backends import numpy_backend as nb
    from mini.ndarray.memory import allocation_stats
    n = (nb.POOL_MIN_BYTES // 4) + 1000
    before = allocation_stats().count
    a = nb.aligned_empty(n, np.float32)
    a[...] = 1.0
    view = a[10:20]                     # a view alone keeps the block in use
    addr = a.__array_interface__["data"][0]
    del a
    b = nb.aligned_empty(n, np.float32)
    assert not np.shares_memory(b, view)
    b[...] = 2.0
    np.testing.assert_array_equal(view, 1.0)
    del view
    c = nb.aligned_empty(n, np.float32)  # the first block is free now: handed out again
    assert c.__array_interface__["data"][0] == addr
    assert c.__array_interface__["data"][0] % nb.ALIGNMENT == 0
    assert not np.shares_memory(b, c)
    assert allocation_stats().count - before == 3  # every allocation is still counted
    huge = nb.aligned_empty((nb.POOL_MAX_BYTES // 8) + 1, np.float64)  # too large to keep
    assert all(raw is not huge.base for raw in nb._pool)


@pytest.mark.parametrize("profiled", [False, True])
def test_numpy_device_conv_never_uses_the_native_kernels(monkeypatch, profiled):
    # device="numpy" is the portable reference: its conv runs the numpy slots only, and so
    # do the composed ops the profiler sees.
    from mini.ops import fast_paths
    from mini.utils import profiler

    def refuse(name):
        raise AssertionError(f"a native kernel ({name}) ran for device='numpy'")
    monkeypatch.setattr(fast_paths, "_cpu_kernel", refuse)
    x = mini.randn(2, 1, 5, 5, device="numpy", requires_grad=True)
    w = mini.randn(3, 1, 3, 3, device="numpy", requires_grad=True)
    with profiler.profile() if profiled else contextlib.nullcontext():
        conv_ops.conv2d(x, w, None, stride=1, padding=1).sum().backward()
        x.contiguous()
        x.transpose(2, 3).contiguous()
    assert x.grad is not None and w.grad is not None
