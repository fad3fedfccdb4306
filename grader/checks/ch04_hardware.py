"""Hidden checks of chapter 04 (hardware on the CPU): C++/OpenMP kernels, im2col
convolution, and two napkin-math questions.

Oracles are numpy only (never mini's dispatching functions, which may run student code):
``np.add``/``np.maximum``/``@`` in float64 for the kernels; for convolution a private
sliding-window oracle, and for col2im the exact adjoint of im2col built by ``np.bincount``
over the padded-pixel index of every im2col entry.

The kernels are C++ that the student's Python function compiles with ``load_inline``
(cached by source hash, in a build cache the submission's kernel and worker share).  Sizes
include non-multiples of any tile and arrays large enough that OpenMP starts its threads; the
reduction is run with more threads than cores and compared with the exact integer sum, so
a data race shows up as a wrong total on every run (the scenario ``omp_sum_race`` of
:mod:`grader.worker.scenarios.ch04` draws the array next to the student's code from a seed
this check chooses, and runs it under several OpenMP team sizes).

Each check receives a handle on the student's function (:class:`grader.checks.student.
Student`): arrays travel with their layout (a transposed or unaligned view arrives as one),
and results come back as plain numpy arrays, with which inputs they share memory.
"""
from __future__ import annotations

import os

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from grader.checks import check
from grader.checks.helpers import (call, call_text, describe, expect_array, expect_float,
                                   expect_int, expect_raises, expect_tuple_of_ints, fail,
                                   raised_as_failure, rng)

CANARY = "mini-grader-canary: hidden checks of chapter 04 (never in feedback)"

# Points, the one source: `mini-course build` prices the notebook's test cells and its
# "What you build" table from this dict (100 in all for the chapter).
POINTS = {
    "04.omp_add": 8,
    "04.omp_sum": 12,
    "04.tiled_matmul": 12,
    "04.fused_add_relu": 8,
    "04.im2col_view": 10,
    "04.im2col": 10,
    "04.col2im": 10,
    "04.conv2d_forward": 8,
    "04.conv2d_backward": 8,
    "04.conv_input_grad_flipped": 6,
    "04.quiz_gemm_cost": 4,
    "04.quiz_chain_traffic": 4,
}

BIG = (1 << 20) + 13   # large enough for every `if (n > ...)` OpenMP threshold, odd size


# =========================================================================== helpers

def _call_raw(fn, *args, name):
    """helpers.call; the arrays keep their layout on the way (a view arrives as a view)."""
    return call(fn, *args, name=name)


def _call_observed(fn, *args, name):
    """Call ``fn`` and return (result, the arguments as they are after the call)."""
    from grader.checks.student import StudentRaised
    out = fn.run(*args, _observe=True)
    if out.raised is not None:
        raise raised_as_failure(StudentRaised(out.raised), call_text(name, *args)) from None
    return out.result(), out.args_after


def _f32(gen, shape, lo=-1.0, hi=1.0):
    return gen.uniform(lo, hi, size=shape).astype(np.float32)


def _noncompact_cases(gen):
    """(label, a, b): views a kernel must not read as flat buffers."""
    base_a, base_b = _f32(gen, (61, 47)), _f32(gen, (61, 47))
    flat_a, flat_b = _f32(gen, (3001,)), _f32(gen, (3001,))
    return [
        ("a transposed view (a.T)", base_a.T, _f32(gen, (47, 61))),
        ("every other row (a[::2])", base_a[::2], base_b[::2]),
        ("a view starting one element in (a[1:]), compact but not 64-byte aligned",
         flat_a[1:], flat_b[1:]),
        ("a reversed view (a[::-1])", flat_a[::-1], flat_b),
    ]


def _binary_elementwise(fn, name, oracle, gen, hint_extra=""):
    sizes = [(1,), (7,), (1000,), (33, 65), (BIG,), (4, 257, 3)]
    for shape in sizes:
        a, b = _f32(gen, shape), _f32(gen, shape)
        what = f"{name}(a, b) with float32 a, b of shape {shape}"
        got, after = _call_observed(fn, a, b, name=name)
        got = expect_array(got, what, shape=shape, dtype=np.float32)
        want = oracle(a, b)
        if not np.array_equal(got, want):
            bad = np.argwhere(got != want)
            i = tuple(int(v) for v in bad[0])
            fail(f"{what}: {len(bad)} of {want.size} elements are wrong; first at {i}: expected "
                 f"{float(want[i]):.6g}, got {float(got[i]):.6g}"
                 + (" (only in the big array: is the OpenMP loop's range or index wrong?)"
                    if want.size >= BIG else "") + hint_extra)
        if not all(type(x) is np.ndarray and np.array_equal(x, y) for x, y in zip(after, (a, b))):
            fail(f"{what}: your function changed its inputs; write the result to a new array")
    for label, a, b in _noncompact_cases(gen):
        what = f"{name}(a, b) with {label}, shape {a.shape}"
        want = oracle(np.array(a), np.array(b))
        got = expect_array(_call_raw(fn, a, b, name=name), what, shape=a.shape, dtype=np.float32)
        if not np.array_equal(got, want):
            fail(f"{what}: the result is wrong. The input is not compact: a C++ loop over "
                 f"ptr[i] reads the flat buffer behind the view, not the view's elements. "
                 f"Pass compact arrays to the kernel (np.ascontiguousarray)")
    a = _f32(gen, (5,))
    expect_raises(TypeError, fn, a.astype(np.float64), a.astype(np.float64), name=name,
                  hint="check the dtype before calling the kernel: a float64 buffer read as "
                       "float32 is garbage")
    expect_raises(ValueError, fn, _f32(gen, (4, 3)), _f32(gen, (3, 4)), name=name,
                  hint="arrays with different shapes (4, 3) and (3, 4) must be refused, even "
                       "though they have the same number of elements")


# =========================================================================== kernels

@check("04.omp_add", points=POINTS["04.omp_add"])
def check_omp_add(fn):
    _binary_elementwise(fn, "omp_add", lambda a, b: a + b, rng())


@check("04.fused_add_relu", points=POINTS["04.fused_add_relu"])
def check_fused_add_relu(fn):
    _binary_elementwise(fn, "fused_add_relu", lambda a, b: np.maximum(a + b, np.float32(0)), rng(),
                        hint_extra="; the result is max(a + b, 0) elementwise: add first, then "
                                   "clamp the sum at 0 (not max(a, 0) + max(b, 0))")


@check("04.omp_sum", points=POINTS["04.omp_sum"])
def check_omp_sum(fn):
    gen = rng()
    # the race test: many threads, a big array of integers, an exact answer, several times
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 2)
    n = (1 << 22) + int(gen.integers(0, 1000))
    seed = int(gen.integers(0, 2**31))
    teams = [max(8, 2 * cores), 3, 16, 2 * cores + 1]
    # A race loses updates only when threads overlap in time, which depends on the
    # scheduler: run it many times, with several team sizes, and fail on any wrong total.
    runs = fn.scenario("omp_sum_race", n=n, seed=seed, teams=teams, per_team=10)
    want = float(int(np.random.default_rng(seed).integers(0, 1024, n).sum()))  # < 2^53: exact
    if type(runs) is not list or len(runs) != 40:
        fail(f"omp_sum(x) for {n} integers: the grader's scenario did not complete "
             f"(got {describe(runs)})")
    for trial, got in enumerate(runs):
        if type(got) is not float:
            if type(got).__name__ == "ExceptionRecord":
                fail(f"omp_sum(x) for {n} integers raised {got.text()}")
            got = expect_float(got, f"omp_sum(x) for {n} integers")
        if got != want:
            later = [v for v in runs[trial + 1:trial + 4] if type(v) is float]
            if len(later) == 3 and all(v == got for v in later):
                fail(f"omp_sum(x) for {n} integer values (exact sum {want:.0f}): got {got:.0f} "
                     f"on 4 runs. Either the loop's range or index is off (every element "
                     f"0 <= i < x.size() exactly once), or several threads add to one shared "
                     f"total, a data race (it can lose the same updates on every run): give "
                     f"the loop a reduction clause, `reduction(+ : total)`")
            fail(f"omp_sum(x) for {n} integer values (exact sum {want:.0f}): got {got:.0f}, "
                 f"off by {want - got:.0f} (on run {trial + 1} of 40). A total that changes "
                 f"from run to run or comes out short is a data race: the threads add to one "
                 f"shared variable at once and overwrite each other's updates. Give the loop "
                 f"a reduction clause, `#pragma omp parallel for reduction(+ : total)`, so "
                 f"each thread sums privately and OpenMP combines the partial sums")
    # small cases: empty, one element, odd sizes, non-compact views
    cases = [np.zeros(0), np.array([2.5]), gen.integers(0, 100, 1001).astype(np.float64),
             gen.standard_normal((30, 17)).T, gen.standard_normal(5000)[::3]]
    for x in cases:
        what = f"omp_sum(x) for x of shape {x.shape}" + ("" if x.flags.c_contiguous else
                                                          " (a non-compact view)")
        want = float(np.sum(x, dtype=np.float64))
        got = expect_float(_call_raw(fn, x, name="omp_sum"), what)
        if not np.isclose(got, want, rtol=1e-9, atol=1e-9):
            extra = (": if the total changes from run to run, it is a data race: use "
                     "`reduction(+ : total)`" if x.flags.c_contiguous else
                     ": the input is not compact; compact it before the kernel reads it as a "
                     "flat buffer (np.ascontiguousarray)")
            fail(f"{what}: expected {want!r}, got {got!r}{extra}")
    expect_raises(TypeError, fn, np.ones(4, np.float32), name="omp_sum",
                  hint="the kernel reads doubles: refuse other dtypes with TypeError")


def _matmul_case(fn, a, b, label=""):
    m, k = a.shape
    n = b.shape[1]
    what = f"tiled_matmul(a, b) with a {a.shape}{label} and b {b.shape}"
    want = np.asarray(a, np.float64) @ np.asarray(b, np.float64)
    got = expect_array(_call_raw(fn, a, b, name="tiled_matmul"), what, shape=(m, n),
                       dtype=np.float32)
    tol = 1e-4 * max(1.0, np.sqrt(k)) * 4
    err = np.abs(got - want)
    if err.size and not np.all(err <= tol + 1e-4 * np.abs(want)):
        bad = np.argwhere(err > tol + 1e-4 * np.abs(want))
        rows = sorted({int(r) for r in bad[:, 0]})
        cols = sorted({int(c) for c in bad[:, 1]})
        return (what, len(bad), rows, cols)
    return None


@check("04.tiled_matmul", points=POINTS["04.tiled_matmul"])
def check_tiled_matmul(fn):
    gen = rng()
    # whole tiles first (any tile that divides 128), then edges
    for m, k, n in [(128, 128, 128), (256, 128, 64)]:
        r = _matmul_case(fn, _f32(gen, (m, k)), _f32(gen, (k, n)))
        if r:
            fail(f"{r[0]}: {r[1]} of {m * n} entries are wrong (sizes are multiples of the "
                 f"tile here, so the tile loops themselves are off: check the index of A, B "
                 f"and C, and that C starts at zero)")
    edge_sizes = [(1, 1, 1), (5, 3, 2), (37, 53, 29), (65, 129, 63), (130, 67, 99),
                  (200, 301, 150)]
    edge_sizes += [tuple(int(v) for v in gen.integers(1, 150, 3)) for _ in range(3)]
    for m, k, n in edge_sizes:
        r = _matmul_case(fn, _f32(gen, (m, k)), _f32(gen, (k, n)))
        if r:
            what, count, rows, cols = r
            fail(f"{what}: {count} of {m * n} entries are wrong (rows {rows[0]}..{rows[-1]}, "
                 f"columns {cols[0]}..{cols[-1]}), although whole tiles come out right: the "
                 f"tile edges are wrong when a size is not a multiple of the tile. End each "
                 f"tile at min(start + TILE, size) for all three loops (i, k and j)")
    a = _f32(gen, (70, 40))
    r = _matmul_case(fn, np.asfortranarray(a), _f32(gen, (40, 33)),
                     " (column-major, not compact)")
    if r:
        fail(f"{r[0]}: the result is wrong for a non-compact input: compact the inputs before "
             f"the kernel indexes them as row-major (np.ascontiguousarray)")
    got = expect_array(call(fn, _f32(gen, (3, 0)), _f32(gen, (0, 4)), name="tiled_matmul"),
                       "tiled_matmul(a, b) with a (3, 0) and b (0, 4)", shape=(3, 4),
                       dtype=np.float32)
    if np.any(got != 0):
        fail("tiled_matmul of a (3, 0) and b (0, 4) matrix should be all zeros (an empty sum)")
    expect_raises(ValueError, fn, _f32(gen, (3, 4)), _f32(gen, (5, 2)), name="tiled_matmul",
                  hint="inner sizes 4 and 5 differ: refuse with ValueError, never read past B")
    expect_raises(TypeError, fn, np.ones((2, 2)), np.ones((2, 2)), name="tiled_matmul",
                  hint="float64 inputs must be refused with TypeError (the kernel reads floats)")


# =========================================================================== im2col oracles

def _geometry(x_shape, k, s, p):
    n, c, h, w = x_shape
    ho = (h + 2 * p[0] - k[0]) // s[0] + 1
    wo = (w + 2 * p[1] - k[1]) // s[1] + 1
    return n, c, h, w, ho, wo


def _pad(x, p, where="both"):
    ph, pw = p
    if where == "both":
        spec = ((0, 0), (0, 0), (ph, ph), (pw, pw))
    elif where == "after":
        spec = ((0, 0), (0, 0), (0, 2 * ph), (0, 2 * pw))
    else:
        spec = ((0, 0), (0, 0), (2 * ph, 0), (2 * pw, 0))
    return np.pad(x, spec)


def _windows(xp, k, s):
    """[N, Ho, Wo, C, kh, kw] of a padded input (numpy's own sliding windows)."""
    v = sliding_window_view(xp, k, axis=(2, 3))[:, :, ::s[0], ::s[1]]
    return v.transpose(0, 2, 3, 1, 4, 5)


def _im2col(x, k, s, p, where="both"):
    v = _windows(_pad(x, p, where), k, s)
    n, ho, wo, c, kh, kw = v.shape
    return np.ascontiguousarray(v).reshape(n * ho * wo, c * kh * kw)


def _col2im(cols, x_shape, k, s, p):
    n, c, h, w, ho, wo = _geometry(x_shape, k, s, p)
    hp, wp = h + 2 * p[0], w + 2 * p[1]
    idx = np.arange(n * c * hp * wp, dtype=np.float64).reshape(n, c, hp, wp)
    where = _im2col(idx, k, s, (0, 0)).astype(np.int64)   # padded-pixel index of each entry
    total = np.bincount(where.ravel(), weights=np.asarray(cols, np.float64).ravel(),
                        minlength=n * c * hp * wp).reshape(n, c, hp, wp)
    return total[:, :, p[0]:p[0] + h, p[1]:p[1] + w]


def _conv(x, wgt, bias, s, p):
    n, c, h, w, ho, wo = _geometry(x.shape, wgt.shape[2:], s, p)
    v = _windows(_pad(x, p), wgt.shape[2:], s)                 # [N, Ho, Wo, C, kh, kw]
    out = np.einsum("nhwcij,ocij->nohw", v, wgt)
    if bias is not None:
        out = out + bias[None, :, None, None]
    return out


def _random_geometry(gen, overlap=None):
    for _ in range(100):
        kh, kw = int(gen.integers(1, 5)), int(gen.integers(1, 5))
        sh, sw = int(gen.integers(1, 4)), int(gen.integers(1, 4))
        ph, pw = int(gen.integers(0, min(kh, 3))), int(gen.integers(0, min(kw, 3)))
        n, c = int(gen.integers(1, 4)), int(gen.integers(1, 4))
        h, w = int(gen.integers(max(1, kh - 2 * ph), 10)), int(gen.integers(max(1, kw - 2 * pw), 10))
        if overlap is True and not (sh < kh or sw < kw):
            continue
        if overlap is False and (sh < kh or sw < kw):
            continue
        if (h + 2 * ph - kh) // sh + 1 >= 1 and (w + 2 * pw - kw) // sw + 1 >= 1:
            return (n, c, h, w), (kh, kw), (sh, sw), (ph, pw)
    return (2, 2, 7, 6), (3, 3), (2, 2), (1, 1)


FIXED = [((2, 3, 5, 5), (3, 3), (1, 1), (0, 0)), ((1, 2, 7, 6), (3, 3), (2, 2), (0, 0)),
         ((2, 1, 6, 7), (3, 2), (1, 2), (1, 1)), ((1, 3, 8, 8), (2, 2), (2, 2), (0, 0)),
         ((2, 2, 9, 7), (3, 3), (2, 3), (1, 2)), ((1, 1, 4, 4), (4, 4), (1, 1), (0, 0)),
         ((1, 2, 5, 5), (1, 1), (3, 3), (2, 2))]


def _geoms(gen, k=20, overlap=None):
    return ([g for g in FIXED if overlap is None or ((g[2][0] < g[1][0] or g[2][1] < g[1][1]) == overlap)]
            + [_random_geometry(gen, overlap) for _ in range(k)])


def _size_hint(x_shape, k, s, p, got_shape=None):
    n, c, h, w, ho, wo = _geometry(x_shape, k, s, p)
    return (f"Ho = (H + 2*ph - kh) // sh + 1 = ({h} + 2*{p[0]} - {k[0]}) // {s[0]} + 1 = {ho} and "
            f"Wo = ({w} + 2*{p[1]} - {k[1]}) // {s[1]} + 1 = {wo}: an off-by-one in the output "
            f"size with stride or padding?")


@check("04.im2col_view", points=POINTS["04.im2col_view"])
def check_im2col_view(fn):
    gen = rng()
    for x_shape, k, s, p in _geoms(gen):
        xp = _pad(gen.standard_normal(x_shape).astype(np.float32), p)
        if gen.random() < 0.4:   # a padded array seen through a non-compact layout
            xp = np.ascontiguousarray(xp.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)
        n, c, h, w, ho, wo = _geometry(x_shape, k, s, p)
        shape = (n, ho, wo, c, k[0], k[1])
        what = f"im2col_view(xp, kernel_size={k}, stride={s}) for xp of shape {xp.shape}"
        out = fn.run(xp, k, s)
        if out.raised is not None:
            from grader.checks.student import StudentRaised
            raise raised_as_failure(StudentRaised(out.raised), what)
        got = out.result()
        if type(got) is not np.ndarray:
            fail(f"{what} should return a numpy array (a view), got {describe(got)}")
        if got.shape != shape:
            hp, wp = xp.shape[2], xp.shape[3]
            fail(f"{what}: expected shape {shape}, got {got.shape}; Ho = (Hp - kh) // sh + 1 = "
                 f"({hp} - {k[0]}) // {s[0]} + 1 = {shape[1]} and Wo = ({wp} - {k[1]}) // {s[1]} "
                 f"+ 1 = {shape[2]}: an off-by-one in the output size with stride?")
        if 0 not in out.shares:
            fail(f"{what}: the result does not share memory with xp: it is a copy. Build it "
                 f"with np.lib.stride_tricks.as_strided and xp's own strides (a view costs "
                 f"no memory; the copy comes later, in im2col)")
        want = _windows(xp, k, s)
        if not np.array_equal(np.array(got), want):
            bad = np.argwhere(np.array(got) != want)[0]
            fail(f"{what}: wrong element at index {tuple(int(v) for v in bad)}; "
                 f"v[n, i, j, c, p, q] must be xp[n, c, i*sh + p, j*sw + q]: the Ho and Wo axes "
                 f"step by stride*xp.strides[2 or 3] bytes, the kh and kw axes by one pixel, and "
                 f"use xp.strides (they may not be the compact ones)")


@check("04.im2col", points=POINTS["04.im2col"])
def check_im2col(fn):
    gen = rng()
    for x_shape, k, s, p in _geoms(gen):
        dtype = np.float64 if gen.random() < 0.5 else np.float32
        x = gen.standard_normal(x_shape).astype(dtype)
        n, c, h, w, ho, wo = _geometry(x_shape, k, s, p)
        shape = (n * ho * wo, c * k[0] * k[1])
        what = call_text("im2col_matrix", x, k, s, p)
        got = expect_array(call(fn, x, k, s, p, name="im2col_matrix"), what, dtype=dtype)
        if got.shape != shape:
            fail(f"{what}: expected shape {shape}, got {got.shape}; " + _size_hint(x_shape, k, s, p, got.shape))
        want = _im2col(x, k, s, p)
        if not np.array_equal(got, want):
            for side in ("after", "before"):
                if np.array_equal(got, _im2col(x, k, s, p, side)):
                    fail(f"{what}: the values match an input padded with {2 * p[0]} rows and "
                         f"{2 * p[1]} columns only {side} the image: padding applied on the wrong "
                         f"side. Pad ph rows at the top AND ph at the bottom (pw left and right)")
            bad = np.argwhere(got != want)[0]
            fail(f"{what}: wrong element at row {int(bad[0])}, column {int(bad[1])}; rows are "
                 f"output pixels in (n, i, j) order, columns (c, p, q) like weight.reshape(Cout, -1)")


@check("04.col2im", points=POINTS["04.col2im"])
def check_col2im(fn):
    gen = rng()
    for overlap in (False, True):
        for x_shape, k, s, p in _geoms(gen, 12, overlap=overlap):
            n, c, h, w, ho, wo = _geometry(x_shape, k, s, p)
            cols = gen.standard_normal((n * ho * wo, c * k[0] * k[1]))
            what = call_text("col2im_matrix", cols, x_shape, k, s, p)
            got = expect_array(call(fn, cols, x_shape, k, s, p, name="col2im_matrix"), what,
                               shape=x_shape, dtype=np.float64)
            want = _col2im(cols, x_shape, k, s, p)
            if not np.allclose(got, want, rtol=1e-10, atol=1e-10):
                if overlap:
                    fail(f"{what}: wrong values where receptive fields overlap (stride {s} < "
                         f"kernel {k}), right where they do not: a pixel that appears in several "
                         f"rows must receive the SUM of all its entries; accumulate (+=) into "
                         f"the output instead of overwriting it (=)")
                fail(f"{what}: wrong values (largest difference "
                     f"{float(np.max(np.abs(got - want))):.3g}); col2im adds entry (row (n, i, j), "
                     f"column (c, p, q)) onto padded pixel (n, c, i*sh + p, j*sw + q), then "
                     f"crops the padding ph, pw from EACH side")


@check("04.conv2d_forward", points=POINTS["04.conv2d_forward"])
def check_conv2d_forward(fn):
    gen = rng()
    for i, (x_shape, k, s, p) in enumerate(_geoms(gen, 10)):
        cout = int(gen.integers(1, 5))
        x = gen.standard_normal(x_shape)
        wgt = gen.standard_normal((cout, x_shape[1], k[0], k[1]))
        bias = None if i % 3 == 0 else gen.standard_normal(cout)
        n, c, h, w, ho, wo = _geometry(x_shape, k, s, p)
        what = call_text("conv2d_forward", x, wgt, bias, s, p)
        got = expect_array(call(fn, x, wgt, bias, s, p, name="conv2d_forward"), what,
                           dtype=np.float64)
        if got.shape != (n, cout, ho, wo):
            fail(f"{what}: expected shape {(n, cout, ho, wo)} (NCHW), got {got.shape}")
        want = _conv(x, wgt, bias, s, p)
        if not np.allclose(got, want, rtol=1e-9, atol=1e-9):
            if bias is not None and np.allclose(got, _conv(x, wgt, None, s, p)):
                fail(f"{what}: the bias is missing: add bias[o] to every pixel of channel o")
            fail(f"{what}: wrong values; the GEMM gives [N*Ho*Wo, Cout] in (n, i, j) row order: "
                 f"reshape to [N, Ho, Wo, Cout] and move Cout to axis 1 (a wrong order of "
                 f"reshape/transpose scrambles the layout)")


@check("04.conv2d_backward", points=POINTS["04.conv2d_backward"])
def check_conv2d_backward(fn):
    gen = rng()
    for x_shape, k, s, p in _geoms(gen, 10):
        cout = int(gen.integers(1, 5))
        if cout == x_shape[1] * k[0] * k[1]:
            cout += 1   # keep W's two matrix shapes distinguishable
        x = gen.standard_normal(x_shape)
        wgt = gen.standard_normal((cout, x_shape[1], k[0], k[1]))
        n, c, h, w, ho, wo = _geometry(x_shape, k, s, p)
        g = gen.standard_normal((n, cout, ho, wo))
        what = call_text("conv2d_backward", x, wgt, g, s, p)
        res = call(fn, x, wgt, g, s, p, name="conv2d_backward")
        if type(res) is not tuple or len(res) != 3:
            fail(f"{what} should return a tuple (grad_x, grad_weight, grad_bias), got {describe(res)}")
        gx = expect_array(res[0], f"{what}[0] (grad_x)", shape=x.shape, dtype=np.float64)
        gw = expect_array(res[1], f"{what}[1] (grad_weight)", shape=wgt.shape, dtype=np.float64)
        gb = expect_array(res[2], f"{what}[2] (grad_bias)", shape=(cout,), dtype=np.float64)
        g2 = g.transpose(0, 2, 3, 1).reshape(-1, cout)
        cols = _im2col(x, k, s, p)
        want_w = (g2.T @ cols).reshape(wgt.shape)
        if not np.allclose(gw, want_w, rtol=1e-9, atol=1e-9):
            if np.allclose(gw, (cols.T @ g2).reshape(wgt.shape)):
                fail(f"{what}: grad_weight is cols^T @ g reshaped, which is [C*kh*kw, Cout] read "
                     f"in the wrong order: the wrong transpose in the weight gradient. The "
                     f"gradient of W as [Cout, C*kh*kw] is g^T @ cols (or transpose the product "
                     f"before the reshape)")
            fail(f"{what}: grad_weight is wrong: dW[o, :] = sum over output pixels of "
                 f"g[pixel, o] * cols[pixel, :], i.e. g^T @ cols, with g as [N*Ho*Wo, Cout]")
        if not np.allclose(gb, g.sum(axis=(0, 2, 3)), rtol=1e-9, atol=1e-9):
            fail(f"{what}: grad_bias is wrong: sum grad_out over N, Ho and Wo (every pixel of "
                 f"channel o used bias[o])")
        want_x = _col2im(g2 @ wgt.reshape(cout, -1), x.shape, k, s, p)
        if not np.allclose(gx, want_x, rtol=1e-9, atol=1e-9):
            fail(f"{what}: grad_x is wrong: the gradient of cols is g @ W (W as [Cout, C*kh*kw]); "
                 f"col2im turns it into the input's gradient, summing overlapping entries")


@check("04.conv_input_grad_flipped", points=POINTS["04.conv_input_grad_flipped"])
def check_conv_input_grad_flipped(fn):
    gen = rng()
    cases = [((2, 3, 5, 5), (4, 3, 3), (0, 0)), ((1, 2, 6, 7), (3, 3, 2), (1, 0)),
             ((2, 2, 4, 4), (2, 3, 3), (2, 2)), ((1, 1, 5, 4), (1, 2, 3), (1, 2))]
    for _ in range(12):
        kh, kw = int(gen.integers(1, 5)), int(gen.integers(1, 5))
        ph, pw = int(gen.integers(0, kh)), int(gen.integers(0, kw))
        c, cout = int(gen.integers(1, 4)), int(gen.integers(1, 5))
        h = int(gen.integers(max(1, kh - 2 * ph), 9))
        w = int(gen.integers(max(1, kw - 2 * pw), 9))
        cases.append(((int(gen.integers(1, 3)), c, h, w), (cout, kh, kw), (ph, pw)))
    for x_shape, (cout, kh, kw), p in cases:
        wgt = gen.standard_normal((cout, x_shape[1], kh, kw))
        n, c, h, w, ho, wo = _geometry(x_shape, (kh, kw), (1, 1), p)
        g = gen.standard_normal((n, cout, ho, wo))
        what = call_text("input_grad_by_flipped_kernel", g, wgt, p)
        got = expect_array(call(fn, g, wgt, p, name="input_grad_by_flipped_kernel"), what,
                           dtype=np.float64)
        if got.shape != x_shape:
            fail(f"{what}: expected grad_x of shape {x_shape}, got {got.shape}. The 'full' "
                 f"convolution pads grad_out by kh - 1 - ph = {kh - 1 - p[0]} rows and "
                 f"kw - 1 - pw = {kw - 1 - p[1]} columns on each side (not by the forward "
                 f"padding), and the flipped kernel maps Cout = {cout} channels to C = {c}: "
                 f"its shape is [C, Cout, kh, kw]")
        cols_grad = g.transpose(0, 2, 3, 1).reshape(-1, cout) @ wgt.reshape(cout, -1)
        want = _col2im(cols_grad, x_shape, (kh, kw), (1, 1), p)
        if np.allclose(got, want, rtol=1e-9, atol=1e-9):
            continue
        full = (kh - 1 - p[0], kw - 1 - p[1])
        unflipped = _conv(g, np.ascontiguousarray(wgt.transpose(1, 0, 2, 3)), None, (1, 1), full)
        if (kh > 1 or kw > 1) and np.allclose(got, unflipped, rtol=1e-9, atol=1e-9):
            fail(f"{what}: this is the convolution with the kernel NOT flipped; the input "
                 f"gradient meets the kernel taps in reverse order: use w[:, :, ::-1, ::-1]")
        for axis, name in ((2, "rows (kh)"), (3, "columns (kw)")):
            half = np.flip(wgt, axis=5 - axis).transpose(1, 0, 2, 3)  # flipped in the other axis only
            if wgt.shape[axis] > 1 and np.allclose(got, _conv(g, np.ascontiguousarray(half), None, (1, 1), full),
                                                   rtol=1e-9, atol=1e-9):
                fail(f"{what}: the kernel is flipped along one spatial axis only; flip BOTH, "
                     f"the {name} too: w[:, :, ::-1, ::-1]")
        fail(f"{what}: wrong values (largest difference {float(np.max(np.abs(got - want))):.3g}); "
             f"convolve grad_out with w[:, :, ::-1, ::-1].transpose(1, 0, 2, 3) (shape "
             f"[C, Cout, kh, kw]), stride 1, padding (kh - 1 - ph, kw - 1 - pw)")


# =========================================================================== napkin questions

@check("04.quiz_gemm_cost", points=POINTS["04.quiz_gemm_cost"])
def check_quiz_gemm_cost(fn):
    gen = rng()
    cases = [(32, 784, 128), (1, 1, 1), (1024, 1024, 1024)] + [
        tuple(int(v) for v in gen.integers(1, 3000, 3)) for _ in range(10)]
    for m, k, n in cases:
        what = call_text("gemm_cost", m, k, n)
        got = expect_tuple_of_ints(call(fn, m, k, n, name="gemm_cost"), what, length=2,
                                   allow_numpy=True)
        flops, nbytes = 2 * m * k * n, (m * k + k * n + m * n) * 4
        if got[0] != flops:
            hint = ("count a multiply AND an add per term: 2*M*K*N" if got[0] == m * k * n
                    else "a [M, K] @ [K, N] product does 2*M*K*N FLOPs")
            fail(f"{what}: FLOPs should be {flops}, got {got[0]}; {hint}")
        if got[1] != nbytes:
            hint = ("that counts elements: float32 takes 4 bytes each" if got[1] * 4 == nbytes
                    else "read A and B once, write C once: (M*K + K*N + M*N) * 4 bytes")
            fail(f"{what}: bytes should be {nbytes}, got {got[1]}; {hint}")


@check("04.quiz_chain_traffic", points=POINTS["04.quiz_chain_traffic"])
def check_quiz_chain_traffic(fn):
    gen = rng()
    cases = [(1000, 2, 4, False), (1000, 2, 4, True), (1 << 20, 3, 4, False), (10, 1, 2, False)]
    cases += [(int(gen.integers(1, 10**7)), int(gen.integers(1, 8)), int(gen.choice([2, 4, 8])),
               bool(gen.random() < 0.5)) for _ in range(10)]
    for n, k, b, fused in cases:
        what = call_text("chain_traffic", n, k, b, fused)
        got = expect_int(call(fn, n, k, b, fused, name="chain_traffic"), what, allow_numpy=True)
        want = 2 * (1 if fused else k) * n * b
        if got != want:
            hint = ("fused, the chain reads its input once and writes its output once: 2*N*b"
                    if fused else "unfused, each of the k ops reads N elements and writes N: 2*k*N*b")
            fail(f"{what}: expected {want} bytes, got {got}; {hint}")
