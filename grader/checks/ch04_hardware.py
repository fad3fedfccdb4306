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

from grader.checks import check, part
from grader.checks.helpers import (call, call_text, describe, expect_array, expect_float,
                                   expect_int, expect_raises, expect_tuple_of_ints, fail,
                                   raised_as_failure, rng)

CANARY = "mini-grader-canary: hidden checks of chapter 04 (never in feedback)"

# Points, the one source: `mini-course build` prices the notebook's test cells and its
# "What you build" table from this dict (100 in all for the chapter).
# The chapter is two notebooks: hardware.ipynb (the CPU, 55 points) and cuda.ipynb (CUDA,
# 45 points; its checks are in ch04_cuda.py).  The CPU part keeps its relative weights.
POINTS = {
    "04.omp_add": 4,
    "04.omp_sum": 7,
    "04.tiled_matmul": 7,
    "04.fused_add_relu": 4,
    "04.im2col_view": 6,
    "04.im2col": 6,
    "04.col2im": 6,
    "04.conv2d_forward": 4,
    "04.conv2d_backward": 4,
    "04.conv_input_grad_flipped": 3,
    "04.quiz_gemm_cost": 2,
    "04.quiz_chain_traffic": 2,
    # cuda.ipynb
    "04.cuda_add": 6,
    "04.cuda_matmul_naive": 4,
    "04.cuda_matmul_tiled": 7,
    "04.cuda_block_sum_shared": 5,
    "04.cuda_block_sum_shuffle": 5,
    "04.cuda_transpose_tiled": 5,
    "04.quiz_occupancy": 3,
    "04.quiz_matmul_reads": 3,
    "04.quiz_sectors": 3,
    "04.quiz_transfer_time": 2,
    "04.quiz_overlap": 2,
}

BIG = (1 << 20) + 13   # large enough for every `if (n > ...)` OpenMP threshold, odd size


# =========================================================================== helpers

def _share(slot: str, fraction: float) -> float:
    """A part's points: a fraction of the slot's points (POINTS stays the one source)."""
    return POINTS[slot] * fraction


def _call(fn, *args, name, hint=""):
    """helpers.call, with the exercise's ``hint`` added when the student's code raises (the
    failing call is named either way).  The arrays keep their layout on the way."""
    from grader.checks.student import StudentRaised
    try:
        return fn(*args)
    except StudentRaised as e:
        raise raised_as_failure(e, call_text(name, *args), f"; {hint}" if hint else "") from None


def _call_observed(fn, *args, name, hint=""):
    """Call ``fn`` and return (result, the arguments as they are after the call)."""
    from grader.checks.student import StudentRaised
    out = fn.run(*args, _observe=True)
    if out.raised is not None:
        raise raised_as_failure(StudentRaised(out.raised), call_text(name, *args),
                                f"; {hint}" if hint else "") from None
    return out.result(), out.args_after


def _expect_inputs_unchanged(after, before, what, names):
    """Fail when the call changed one of its array arguments (``after`` is what the
    student's process saw after the call, ``before`` the trusted originals)."""
    if after is None:
        return
    for arg_name, x, y in zip(names, after, before):
        if type(y) is not np.ndarray:
            continue
        if type(x) is not np.ndarray or x.shape != y.shape or not np.array_equal(x, y, equal_nan=True):
            where = ""
            if type(x) is np.ndarray and x.shape == y.shape:
                i = tuple(int(v) for v in np.argwhere(~((x == y) | (np.isnan(x) & np.isnan(y))))[0])
                where = f" (first at {i}: it was {y[i].item()!r}, it is {x[i].item()!r} after the call)"
            fail(f"{what}: your function changed its input {arg_name}{where}. A kernel must "
                 f"leave its inputs as they were: write the result to a new output array")


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
        ("a transposed b (b.T)", _f32(gen, (47, 61)), base_b.T),
    ]


def _first_wrong(got, want):
    bad = np.argwhere(got != want)
    i = tuple(int(v) for v in bad[0])
    return len(bad), i


def _binary_elementwise(fn, name, oracle, gen, variants=()):
    """The check of an elementwise float32 kernel ``name(a, b)``, in three parts: values on
    compact inputs of many sizes (with the inputs left unchanged), values on views that are
    not compact, and the errors the docstring names.  ``variants`` are ``(label, wrong
    oracle, hint)`` of known mistakes: a result equal to one of them gets its hint."""
    slot = fn.slot
    hint = ("a C++ error shows the line of your source; otherwise: check the dtypes and "
            "shapes, then hand the kernel compact arrays and a new float32 output of a's shape")

    def compare(got, a, b, what, big=False):
        want = oracle(a, b)
        if np.array_equal(got, want):
            return
        for _label, wrong, hint in variants:
            if np.array_equal(got, wrong(a, b)):
                fail(f"{what}: wrong values; {hint}")
        count, i = _first_wrong(got, want)
        fail(f"{what}: {count} of {want.size} elements are wrong; first at {i}: expected "
             f"{float(want[i]):.6g}, got {float(got[i]):.6g}"
             + (" (only in the big array: does the OpenMP loop cover every index "
                "0 <= i < n exactly once?)" if big else ""))

    with part("values on compact arrays, inputs unchanged", _share(slot, 0.5)):
        for shape in [(1,), (7,), (1000,), (33, 65), (0,), (3, 0), (BIG,), (4, 257, 3)]:
            a, b = _f32(gen, shape), _f32(gen, shape)
            what = f"{name}(a, b) with float32 a, b of shape {shape}"
            if a.size >= BIG:   # not sent back: the small arrays show a changed input
                got = _call(fn, a, b, name=name, hint=hint)
            else:
                got, after = _call_observed(fn, a, b, name=name, hint=hint)
                _expect_inputs_unchanged(after, (a, b), what, ("a", "b"))
            got = expect_array(got, what, shape=shape, dtype=np.float32)
            compare(got, a, b, what, big=a.size >= BIG)
    with part("views that are not compact", _share(slot, 0.3)):
        for label, a, b in _noncompact_cases(gen):
            what = f"{name}(a, b) with {label}, shape {a.shape}"
            got, after = _call_observed(fn, a, b, name=name, hint=hint)
            _expect_inputs_unchanged(after, (a, b), what, ("a", "b"))
            got = expect_array(got, what, shape=a.shape, dtype=np.float32)
            want = oracle(np.array(a), np.array(b))
            if not np.array_equal(got, want):
                fail(f"{what}: the result is wrong. The input is not compact: a C++ loop over "
                     f"ptr[i] reads the flat buffer behind the view, not the view's elements; "
                     f"hand the kernel compact arrays")
    with part("errors", _share(slot, 0.2)):
        a = _f32(gen, (5,))
        dtype_hint = ("the contract is float32 only: check both dtypes and raise TypeError "
                      "(pybind11 would otherwise convert silently, a hidden copy)")
        for x, y in [(a.astype(np.float64), a.astype(np.float64)), (a, a.astype(np.float64)),
                     (a.astype(np.int32), a)]:
            expect_raises(TypeError, fn, x, y, name=name, hint=dtype_hint)
        expect_raises(ValueError, fn, _f32(gen, (4, 3)), _f32(gen, (3, 4)), name=name,
                      hint="arrays with different shapes (4, 3) and (3, 4) must be refused, even "
                           "though they have the same number of elements")
        expect_raises(ValueError, fn, _f32(gen, (6,)), _f32(gen, (5,)), name=name,
                      hint="arrays of different sizes must be refused before the kernel reads "
                           "past the end of the shorter one")


# =========================================================================== kernels

@check("04.omp_add", points=POINTS["04.omp_add"])
def check_omp_add(fn):
    _binary_elementwise(fn, "omp_add", lambda a, b: a + b, rng(), variants=[
        ("b ignored", lambda a, b: a.copy(), "the result equals a: b is never added"),
        ("a doubled", lambda a, b: a + a, "the result is a + a: the kernel reads a twice"),
    ])


@check("04.fused_add_relu", points=POINTS["04.fused_add_relu"])
def check_fused_add_relu(fn):
    zero = np.float32(0)
    _binary_elementwise(fn, "fused_add_relu", lambda a, b: np.maximum(a + b, zero), rng(), variants=[
        ("relu of each input", lambda a, b: np.maximum(a, zero) + np.maximum(b, zero),
         "the result is relu(a) + relu(b): each input is clamped instead of the sum. The "
         "function is relu(a + b), i.e. max(a + b, 0): add first, then clamp"),
        ("no relu", lambda a, b: a + b,
         "the result is a + b, never clamped: negative sums must become 0"),
        ("relu of a only", lambda a, b: np.maximum(a, zero) + b,
         "the result is relu(a) + b: the clamp goes on the sum, after the add"),
    ])


def _race_diagnosis(runs, want, x_first, x_last, n):
    """The message for a wrong total in the race scenario, chosen by what came back."""
    floats = [v for v in runs if type(v) is float]
    wrong = [v for v in floats if v != want]
    got = wrong[0]
    head = (f"omp_sum(x) for {n} integer values in [0, 1024) (exact sum {want:.0f}): got "
            f"{got:.0f}")
    if got == want - x_first or got == want - x_last:
        which = "first" if got == want - x_first else "last"
        fail(f"{head}, exactly the sum without the {which} element: an off-by-one in the "
             f"loop's range (every index 0 <= i < n must be summed once)")
    if len(set(floats)) == 1 and got == 2 * want:
        fail(f"{head}, twice the sum: every element is added twice")
    if all(float(np.float32(v)) == v for v in wrong) and abs(got - want) <= 1e-3 * want:
        fail(f"{head}, off by {want - got:.0f}: a precision problem, not a race. The total "
             f"is a float32 value: the accumulator is a float, whose 24-bit significand "
             f"cannot hold a total of about {want:.1e} exactly (each addition rounds to a "
             f"multiple of {2.0 ** (np.floor(np.log2(want)) - 23):.0f}). Accumulate in double, "
             f"like the input")
    changing = len(set(floats)) > 1
    fail(f"{head}, off by {want - got:.0f} "
         + ("(and the totals differ from run to run)" if changing else "(on every run)")
         + ". Totals that come out short, or change from run to run, are a data race: the "
           "threads add into one shared variable at once and overwrite each other's "
           "updates. Each thread needs a private partial total, combined once at the end: "
           "that is what OpenMP's reduction clause is for")


@check("04.omp_sum", points=POINTS["04.omp_sum"])
def check_omp_sum(fn):
    gen = rng()
    # the race test: many threads, a big array of integers, an exact answer, several times
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 2)
    n = (1 << 22) + int(gen.integers(0, 1000))
    seed = int(gen.integers(0, 2**31))
    teams = [max(8, 2 * cores), 3, 16, 2 * cores + 1]
    with part("the exact total under many threads", _share("04.omp_sum", 0.5)):
        # A race loses updates only when threads overlap in time, which depends on the
        # scheduler: run it many times, with several team sizes, and fail on any wrong total.
        runs = fn.scenario("omp_sum_race", n=n, seed=seed, teams=teams, per_team=10)
        x = np.random.default_rng(seed).integers(0, 1024, n)
        want = float(int(x.sum()))  # < 2^53: every partial sum is exact in double
        if type(runs) is not list or len(runs) != 40:
            fail(f"omp_sum(x) for {n} integers: the grader's scenario did not complete "
                 f"(got {describe(runs)})")
        for got in runs:
            if type(got) is not float:
                if type(got).__name__ == "ExceptionRecord":
                    fail(f"omp_sum(x) for {n} integers raised {got.text()}")
                expect_float(got, f"omp_sum(x) for {n} integers")
        if any(v != want for v in runs):
            _race_diagnosis(runs, want, float(x[0]), float(x[-1]), n)
    with part("small, empty and non-compact inputs", _share("04.omp_sum", 0.3)):
        cases = [np.zeros(0), np.array([2.5]), np.array([[0.25, -1.5], [3.75, 0.5]]),
                 gen.integers(0, 100, 1001).astype(np.float64),
                 gen.standard_normal((30, 17)).T, gen.standard_normal(5000)[::3],
                 gen.standard_normal(4000)[::-1]]
        for x in cases:
            what = f"omp_sum(x) for x of shape {x.shape}" + ("" if x.flags.c_contiguous else
                                                              " (a non-compact view)")
            got, after = _call_observed(fn, x, name="omp_sum",
                                        hint="an empty or non-compact float64 array is valid "
                                             "input: compact it, and an empty sum is 0.0")
            _expect_inputs_unchanged(after, (x,), what, ("x",))
            got = expect_float(got, what)
            # the same numbers summed in another order: a few ulps of the sum of |x|
            want = float(np.sum(x, dtype=np.float64))
            tol = 64 * np.finfo(np.float64).eps * float(np.sum(np.abs(x))) + 1e-300
            if abs(got - want) <= tol:
                continue
            flat = np.ascontiguousarray(x).ravel()
            for which, rest in (("first", flat[1:]), ("last", flat[:-1])):
                if x.size > 1 and abs(got - float(np.sum(rest))) <= tol:
                    fail(f"{what}: expected {want!r}, got {got!r}, the sum without the {which} "
                         f"element: an off-by-one in the loop's range (every index "
                         f"0 <= i < n must be summed once)")
            if x.size == 1 and got == 0.0:
                fail(f"{what}: expected {want!r}, got 0.0: the one element was never added "
                     f"(an off-by-one in the loop's range?)")
            if got == int(got) and want != int(want) and abs(got - want) < x.size:
                fail(f"{what}: expected {want!r}, got {got!r}, a whole number: the fractions "
                     f"are cut off: the accumulator (or the element read) is an integer type; "
                     f"sum doubles into a double")
            if got == float(np.float32(got)) and \
                    abs(got - want) <= 1e-5 * max(1.0, float(np.sum(np.abs(x)))):
                fail(f"{what}: expected {want!r}, got {got!r}: a float32 result, off in the "
                     f"7th digit: the accumulator is a float, not a double")
            if not x.flags.c_contiguous:
                fail(f"{what}: expected {want!r}, got {got!r}: the input is not compact; "
                     f"compact it before the kernel reads it as a flat buffer")
            fail(f"{what}: expected {want!r}, got {got!r}")
    with part("errors", _share("04.omp_sum", 0.2)):
        for bad in (np.ones(4, np.float32), np.ones(4, np.int64)):
            expect_raises(TypeError, fn, bad, name="omp_sum",
                          hint=f"the kernel sums doubles: refuse a {bad.dtype} array with "
                               f"TypeError instead of converting it silently")


def _matmul_case(fn, a, b, label=""):
    m, k = a.shape
    n = b.shape[1]
    what = f"tiled_matmul(a, b) with a {a.shape}{label} and b {b.shape}"
    want = np.asarray(a, np.float64) @ np.asarray(b, np.float64)
    got, after = _call_observed(fn, a, b, name="tiled_matmul",
                                hint="valid input: float32 [M, K] and [K, N], any strides, any "
                                     "size including 0")
    _expect_inputs_unchanged(after, (a, b), what, ("a", "b"))
    got = expect_array(got, what, shape=(m, n), dtype=np.float32)
    # float32 products summed over k terms in some order: the error grows like sqrt(k)
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
    slot = "04.tiled_matmul"
    with part("whole tiles", _share(slot, 0.35)):
        # sizes that any tile dividing 128 divides: the tile loops themselves
        for m, k, n in [(128, 128, 128), (256, 128, 64), (64, 192, 128)]:
            r = _matmul_case(fn, _f32(gen, (m, k)), _f32(gen, (k, n)))
            if r:
                fail(f"{r[0]}: {r[1]} of {m * n} entries are wrong (sizes are multiples of the "
                     f"tile here, so the tile loops themselves are off: check how A, B and C "
                     f"are indexed (each with its own row length) and that C starts at zero)")
    with part("sizes that are not multiples of the tile", _share(slot, 0.35)):
        edge_sizes = [(1, 1, 1), (5, 3, 2), (37, 53, 29), (65, 129, 63), (130, 67, 99),
                      (200, 301, 150)]
        edge_sizes += [tuple(int(v) for v in gen.integers(1, 150, 3)) for _ in range(3)]
        for m, k, n in edge_sizes:
            r = _matmul_case(fn, _f32(gen, (m, k)), _f32(gen, (k, n)))
            if r:
                what, count, rows, cols = r
                fail(f"{what}: {count} of {m * n} entries are wrong (rows {rows[0]}..{rows[-1]}, "
                     f"columns {cols[0]}..{cols[-1]}), although whole tiles come out right "
                     f"when every size is a multiple of the tile: the tile edges are wrong. "
                     f"The last tile of each of the three loops (i, k and j) is partial")
    with part("views, empty matrices", _share(slot, 0.15)):
        a = _f32(gen, (70, 40))
        for label, x, y in [(" (column-major, not compact)", np.asfortranarray(a), _f32(gen, (40, 33))),
                            (" and b a transposed view", a, _f32(gen, (33, 40)).T),
                            (" with its rows reversed (a negative stride)", a[::-1], _f32(gen, (40, 33)))]:
            r = _matmul_case(fn, x, y, label)
            if r:
                fail(f"{r[0]}: the result is wrong for an input that is not compact: the "
                     f"kernel indexes a flat row-major buffer, so hand it compact arrays")
        for (m, k), (k2, n) in [((3, 0), (0, 4)), ((0, 5), (5, 3)), ((4, 5), (5, 0))]:
            what = f"tiled_matmul(a, b) with a {(m, k)} and b {(k2, n)}"
            got = expect_array(_call(fn, _f32(gen, (m, k)), _f32(gen, (k2, n)), name="tiled_matmul"),
                               what, shape=(m, n), dtype=np.float32)
            if np.any(got != 0):
                fail(f"{what} should be all zeros (an empty sum), got nonzero entries: the "
                     f"output must start at zero")
    with part("errors", _share(slot, 0.15)):
        expect_raises(ValueError, fn, _f32(gen, (3, 4)), _f32(gen, (5, 2)), name="tiled_matmul",
                      hint="inner sizes 4 and 5 differ: refuse with ValueError, never read past B")
        expect_raises(ValueError, fn, _f32(gen, (4,)), _f32(gen, (4, 2)), name="tiled_matmul",
                      hint="a 1-D input is not a matrix: refuse it with ValueError")
        expect_raises(TypeError, fn, np.ones((2, 2)), np.ones((2, 2)), name="tiled_matmul",
                      hint="float64 inputs must be refused with TypeError: the kernel reads "
                           "floats, and pybind11 would convert silently (a hidden copy)")
        expect_raises(TypeError, fn, np.ones((2, 2), np.float32), np.ones((2, 2)), name="tiled_matmul",
                      hint="check the dtype of b too: refuse float64 with TypeError")

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


def _col2im_padded(cols, x_shape, k, s, p):
    """The adjoint of im2col before the crop: every entry added onto its padded pixel."""
    n, c, h, w, ho, wo = _geometry(x_shape, k, s, p)
    hp, wp = h + 2 * p[0], w + 2 * p[1]
    idx = np.arange(n * c * hp * wp, dtype=np.float64).reshape(n, c, hp, wp)
    where = _im2col(idx, k, s, (0, 0)).astype(np.int64)   # padded-pixel index of each entry
    return np.bincount(where.ravel(), weights=np.asarray(cols, np.float64).ravel(),
                       minlength=n * c * hp * wp).reshape(n, c, hp, wp)


def _col2im(cols, x_shape, k, s, p):
    h, w = x_shape[2], x_shape[3]
    return _col2im_padded(cols, x_shape, k, s, p)[:, :, p[0]:p[0] + h, p[1]:p[1] + w]


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
    for i, (x_shape, k, s, p) in enumerate(_geoms(gen)):
        dtype = (np.float32, np.float64, np.int32)[i % 3]
        xp = _pad(gen.standard_normal(x_shape) * 10, p).astype(dtype)
        layout = ""
        if i % 4 == 1:   # a padded array seen through a non-compact layout
            xp = np.ascontiguousarray(xp.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)
            layout = ", column-major in its last two axes"
        elif i % 4 == 3:  # negative strides: the view must use xp's strides as they are
            xp = np.ascontiguousarray(xp[:, :, ::-1, ::-1])[:, :, ::-1, ::-1]
            layout = ", flipped (negative strides)"
        n, c, h, w, ho, wo = _geometry(x_shape, k, s, p)
        shape = (n, ho, wo, c, k[0], k[1])
        what = (f"im2col_view(xp, kernel_size={k}, stride={s}) for {xp.dtype} xp of shape "
                f"{xp.shape}{layout}")
        out = fn.run(xp, k, s)
        if out.raised is not None:
            from grader.checks.student import StudentRaised
            raise raised_as_failure(StudentRaised(out.raised), what,
                                    "; the view needs only xp.shape, xp.strides and the sizes")
        got = out.result()
        if type(got) is not np.ndarray:
            fail(f"{what} should return a numpy array (a view), got {describe(got)}")
        if got.dtype != xp.dtype:
            fail(f"{what}: expected dtype {xp.dtype} (the view's elements are xp's), got "
                 f"{got.dtype}")
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
        if i < 3 and fn.scenario("view_writeable", xp=xp, kernel_size=k, stride=s) is not False:
            fail(f"{what}: the view is writeable. Its windows overlap, so one write would "
                 f"change several of its elements (and xp): the docstring promises a "
                 f"read-only view; as_strided makes one when asked")


@check("04.im2col", points=POINTS["04.im2col"])
def check_im2col(fn):
    gen = rng()
    for x_shape, k, s, p in _geoms(gen):
        dtype = np.float64 if gen.random() < 0.5 else np.float32
        x = gen.standard_normal(x_shape).astype(dtype)
        if gen.random() < 0.3:   # the same values through a non-compact layout
            x = np.asfortranarray(x)
        n, c, h, w, ho, wo = _geometry(x_shape, k, s, p)
        shape = (n * ho * wo, c * k[0] * k[1])
        what = call_text("im2col_matrix", x, k, s, p)
        got = _call(fn, x, k, s, p, name="im2col_matrix",
                    hint="pad, take the 6-D view of exercise 04.im2col_view, then copy it "
                         "into the matrix")
        if type(got) is np.ndarray and got.dtype != dtype and got.shape == shape and \
                np.array_equal(got, _im2col(x, k, s, p)):
            fail(f"{what}: the right values, but dtype {got.dtype} for a {np.dtype(dtype)} "
                 f"input: the result keeps x's dtype (a padded buffer made without a dtype "
                 f"is float64)")
        got = expect_array(got, what, dtype=dtype)
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
            dtype = np.float32 if gen.random() < 0.4 else np.float64
            cols = gen.standard_normal((n * ho * wo, c * k[0] * k[1])).astype(dtype)
            what = call_text("col2im_matrix", cols, x_shape, k, s, p)
            got = _call(fn, cols, x_shape, k, s, p, name="col2im_matrix",
                        hint="cols has one row per output pixel (n, i, j) and one column per "
                             "(c, p, q): view it as [N, Ho, Wo, C, kh, kw]")
            want = _col2im(cols, x_shape, k, s, p)
            if type(got) is np.ndarray and got.shape == x_shape and got.dtype != dtype:
                fail(f"{what}: dtype {got.dtype} for {np.dtype(dtype)} cols: the result keeps "
                     f"cols' dtype (a buffer made without a dtype is float64)")
            got = expect_array(got, what, shape=x_shape, dtype=dtype)
            # float32 entries summed in another order: up to kh*kw terms per pixel
            tol = 1e-10 if dtype == np.float64 else 1e-5
            if not np.allclose(got, want, rtol=tol, atol=tol):
                if (p[0] or p[1]) and _crop_one_side(cols, x_shape, k, s, p, got, tol):
                    fail(f"{what}: the values are those of the padded image cropped at the "
                         f"top-left only: the padding was added on both sides, so drop ph "
                         f"rows and pw columns from EACH side")
                if overlap:
                    fail(f"{what}: wrong values where receptive fields overlap (stride {s} < "
                         f"kernel {k}), right where they do not: a pixel that appears in several "
                         f"rows must receive the SUM of all its entries; accumulate (+=) into "
                         f"the output instead of overwriting it (=)")
                fail(f"{what}: wrong values (largest difference "
                     f"{float(np.max(np.abs(got - want))):.3g}); col2im adds entry (row (n, i, j), "
                     f"column (c, p, q)) onto padded pixel (n, c, i*sh + p, j*sw + q), then "
                     f"drops the padding")


def _crop_one_side(cols, x_shape, k, s, p, got, tol):
    """True when ``got`` is the accumulated padded image cropped at its start only."""
    h, w = x_shape[2], x_shape[3]
    total = _col2im_padded(cols, x_shape, k, s, p)
    for crop in (total[:, :, :h, :w], total[:, :, 2 * p[0]:, 2 * p[1]:]):
        if crop.shape == got.shape and np.allclose(got, crop, rtol=tol, atol=tol):
            return True
    return False


def _fix_first(fn, slot, args, want, uses):
    """A message naming the earlier exercise ``slot`` when what mini runs for it (the
    student's function, in the notebook) gets ``args`` wrong; '' when it gets them right."""
    from grader.checks.student import StudentRaised
    try:
        got = fn.scenario("earlier_exercise", slot=slot, args=list(args))
    except StudentRaised as e:
        if e.record.not_implemented:
            return (f"exercise {slot} ({uses}, which this exercise uses) is not done yet: "
                    f"finish it first")
        return (f"first fix exercise {slot}: your {uses}, which this exercise uses, raised "
                f"{e.record.text()} on the same input")
    if type(got) is np.ndarray and got.shape == want.shape and \
            np.allclose(got, want, rtol=1e-9, atol=1e-9):
        return ""
    return (f"first fix exercise {slot}: your {uses}, which this exercise uses, gives a wrong "
            f"result on the same input (its hidden test says more)")


def _largest_difference(got, want):
    d = np.abs(got - want)
    i = tuple(int(v) for v in np.unravel_index(int(np.argmax(d)), d.shape))
    return f"largest difference at {i}: expected {float(want[i]):.6g}, got {float(got[i]):.6g}"


@check("04.conv2d_forward", points=POINTS["04.conv2d_forward"])
def check_conv2d_forward(fn):
    gen = rng()
    for i, (x_shape, k, s, p) in enumerate(_geoms(gen, 10)):
        cout = int(gen.integers(2, 6))
        dtype = np.float32 if i % 4 == 2 else np.float64
        x = gen.standard_normal(x_shape).astype(dtype)
        wgt = gen.standard_normal((cout, x_shape[1], k[0], k[1])).astype(dtype)
        bias = None if i % 3 == 0 else gen.standard_normal(cout).astype(dtype)
        n, c, h, w, ho, wo = _geometry(x_shape, k, s, p)
        what = call_text("conv2d_forward", x, wgt, bias, s, p)
        got = _call(fn, x, wgt, bias, s, p, name="conv2d_forward",
                    hint="follow the shapes: cols [N*Ho*Wo, C*kh*kw], the weight as a "
                         "[Cout, C*kh*kw] matrix, the product [N*Ho*Wo, Cout]")
        got = expect_array(got, what, dtype=dtype)
        if got.shape != (n, cout, ho, wo):
            fail(f"{what}: expected shape {(n, cout, ho, wo)} (NCHW), got {got.shape}; "
                 + _size_hint(x_shape, k, s, p))
        x64, w64 = x.astype(np.float64), wgt.astype(np.float64)
        b64 = None if bias is None else bias.astype(np.float64)
        want = _conv(x64, w64, b64, s, p)
        # float32: products summed over C*kh*kw terms in another order
        tol = 1e-9 if dtype == np.float64 else 1e-4 * max(1.0, np.sqrt(c * k[0] * k[1]))
        if np.allclose(got, want, rtol=tol, atol=tol):
            continue
        earlier = _fix_first(fn, "04.im2col", (x, k, s, p), _im2col(x, k, s, p), "im2col_matrix")
        if earlier:
            fail(f"{what}: wrong values; {earlier}")
        if bias is not None and np.allclose(got, _conv(x64, w64, None, s, p), rtol=tol, atol=tol):
            fail(f"{what}: the bias is missing: add bias[o] to every pixel of channel o")
        cols = _im2col(x64, k, s, p)
        gemm_swapped = cols @ w64.reshape(-1, cout)        # [C*kh*kw, Cout] read as if it were W^T
        gemm = cols @ w64.reshape(cout, -1).T
        if b64 is not None:
            gemm_swapped, gemm = gemm_swapped + b64, gemm + b64
        for variant, hint in [
            (gemm_swapped.reshape(n, ho, wo, cout).transpose(0, 3, 1, 2),
             "the output layout is right, but the weight matrix is read in the wrong order: "
             "the weight reshaped to [C*kh*kw, Cout] is not its transpose. One row per filter "
             "([Cout, C*kh*kw]) is the matrix; the product needs its transpose"),
            (gemm.reshape(n, cout, ho, wo),
             "the GEMM is right, but its [N*Ho*Wo, Cout] result is reshaped straight to NCHW: "
             "its rows are pixels in (n, i, j) order, so it is [N, Ho, Wo, Cout] first; then "
             "move Cout to axis 1 (a wrong order of reshape/transpose scrambles the layout)"),
            (gemm.reshape(n, ho, wo, cout).transpose(0, 3, 2, 1),
             "the GEMM is right, but Ho and Wo come out swapped: the output transpose puts the "
             "axes in the wrong order (a wrong order of reshape/transpose scrambles the layout)"),
        ]:
            if variant.shape == got.shape and np.allclose(got, variant, rtol=tol, atol=tol):
                fail(f"{what}: wrong values; {hint}")
        fail(f"{what}: wrong values ({_largest_difference(got, want)})")


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
        if gen.random() < 0.3:  # a gradient that arrives as a non-compact view
            g = np.ascontiguousarray(g.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)
        what = call_text("conv2d_backward", x, wgt, g, s, p)
        res = _call(fn, x, wgt, g, s, p, name="conv2d_backward",
                    hint="follow the shapes: grad_out as [N*Ho*Wo, Cout] (pixels in (n, i, j) "
                         "order), cols [N*Ho*Wo, C*kh*kw], the weight as [Cout, C*kh*kw]")
        if type(res) is not tuple or len(res) != 3:
            fail(f"{what} should return a tuple (grad_x, grad_weight, grad_bias), got {describe(res)}")
        gx = expect_array(res[0], f"{what}[0] (grad_x)", shape=x.shape, dtype=np.float64)
        gw = expect_array(res[1], f"{what}[1] (grad_weight)", shape=wgt.shape, dtype=np.float64)
        gb = expect_array(res[2], f"{what}[2] (grad_bias)", shape=(cout,), dtype=np.float64)
        g2 = g.transpose(0, 2, 3, 1).reshape(-1, cout)
        cols = _im2col(x, k, s, p)
        want_w = (g2.T @ cols).reshape(wgt.shape)
        if not np.allclose(gw, want_w, rtol=1e-9, atol=1e-9):
            earlier = _fix_first(fn, "04.im2col", (x, k, s, p), cols, "im2col_matrix")
            if earlier:
                fail(f"{what}: grad_weight is wrong; {earlier}")
            if np.allclose(gw, (cols.T @ g2).reshape(wgt.shape)):
                fail(f"{what}: grad_weight is cols^T @ g reshaped, which is [C*kh*kw, Cout] read "
                     f"in the wrong order: the wrong transpose in the weight gradient. The "
                     f"weight is a [Cout, C*kh*kw] matrix: its gradient has that shape before "
                     f"the reshape")
            fail(f"{what}: grad_weight is wrong ({_largest_difference(gw, want_w)}); each "
                 f"filter's gradient sums, over the output pixels, that pixel's gradient times "
                 f"its row of cols")
        if not np.allclose(gb, g.sum(axis=(0, 2, 3)), rtol=1e-9, atol=1e-9):
            fail(f"{what}: grad_bias is wrong ({_largest_difference(gb, g.sum(axis=(0, 2, 3)))}): "
                 f"bias[o] was added to every pixel of channel o, in every image")
        grad_cols = g2 @ wgt.reshape(cout, -1)
        want_x = _col2im(grad_cols, x.shape, k, s, p)
        if not np.allclose(gx, want_x, rtol=1e-9, atol=1e-9):
            earlier = _fix_first(fn, "04.col2im", (grad_cols, x.shape, k, s, p), want_x,
                                 "col2im_matrix")
            if earlier:
                fail(f"{what}: grad_x is wrong; {earlier}")
            fail(f"{what}: grad_x is wrong ({_largest_difference(gx, want_x)}): the gradient of "
                 f"cols has cols' shape; col2im turns it into the input's gradient, summing "
                 f"overlapping entries")


@check("04.conv_input_grad_flipped", points=POINTS["04.conv_input_grad_flipped"])
def check_conv_input_grad_flipped(fn):
    gen = rng()
    cases = [((2, 3, 5, 5), (4, 3, 3), (0, 0)), ((1, 2, 6, 7), (3, 3, 2), (1, 0)),
             ((2, 2, 4, 4), (2, 3, 3), (2, 2)), ((1, 1, 5, 4), (1, 2, 3), (1, 2)),
             ((1, 2, 3, 3), (2, 1, 1), (0, 0))]
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
        got = expect_array(_call(fn, g, wgt, p, name="input_grad_by_flipped_kernel",
                                 hint="the flipped kernel maps Cout channels back to C: its "
                                      "shape is [C, Cout, kh, kw]"), what, dtype=np.float64)
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
        flipped = np.ascontiguousarray(wgt[:, :, ::-1, ::-1].transpose(1, 0, 2, 3))
        earlier = _fix_first(fn, "04.conv2d_forward", (g, flipped, None, (1, 1), full),
                             _conv(g, flipped, None, (1, 1), full), "conv2d_forward")
        if earlier:
            fail(f"{what}: wrong values; {earlier}")
        unflipped = _conv(g, np.ascontiguousarray(wgt.transpose(1, 0, 2, 3)), None, (1, 1), full)
        if (kh > 1 or kw > 1) and np.allclose(got, unflipped, rtol=1e-9, atol=1e-9):
            fail(f"{what}: this is the convolution with the kernel NOT flipped; the input "
                 f"gradient meets the kernel taps in reverse order, so the kernel must be "
                 f"flipped in both spatial axes")
        for axis, name in ((2, "rows (kh)"), (3, "columns (kw)")):
            half = np.flip(wgt, axis=5 - axis).transpose(1, 0, 2, 3)  # flipped in the other axis only
            if wgt.shape[axis] > 1 and np.allclose(got, _conv(g, np.ascontiguousarray(half), None, (1, 1), full),
                                                   rtol=1e-9, atol=1e-9):
                fail(f"{what}: the kernel is flipped along one spatial axis only; flip BOTH, "
                     f"the {name} too")
        if cout > 1 and c > 1 and np.allclose(got, _conv(g, np.ascontiguousarray(
                wgt[:, :, ::-1, ::-1].reshape(c, cout, kh, kw)), None, (1, 1), full), rtol=1e-9, atol=1e-9):
            fail(f"{what}: the kernel is flipped, but its channel axes are reshaped instead of "
                 f"swapped: [Cout, C, kh, kw] reshaped to [C, Cout, kh, kw] mixes the filters")
        fail(f"{what}: wrong values ({_largest_difference(got, want)})")


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
            if got[0] == m * k * n:
                hint = ("that counts the terms of the sums; each term is a multiply AND an "
                        "add, and both are FLOPs")
            elif got[0] in (2 * m * n, 2 * m * k, 2 * k * n):
                hint = "every output entry is a sum over the shared dimension: count all its terms"
            else:
                hint = ""
            fail(f"{what}: FLOPs should be {flops}, got {got[0]}" + (f"; {hint}" if hint else ""))
        if got[1] != nbytes:
            if got[1] * 4 == nbytes:
                hint = "that counts elements: each float32 takes 4 bytes"
            elif got[1] == (m * k + k * n) * 4:
                hint = "that counts the reads only: the output is written to memory too"
            elif got[1] == 2 * m * k * n * 4 or got[1] == m * k * n * 4:
                hint = ("that counts a load per term; at best each input is read once, as "
                        "the minimum traffic of the product")
            else:
                hint = ""
            fail(f"{what}: bytes should be {nbytes}, got {got[1]}" + (f"; {hint}" if hint else ""))


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
            if fused and got == 2 * k * n * b:
                hint = ("the fused flag is ignored: fused, the chain is one kernel that never "
                        "writes its intermediate results")
            elif got * b == want or (got == want // b):
                hint = "that counts elements: multiply by the item size in bytes"
            elif got * 2 == want:
                hint = "every op (or the fused kernel) reads its input AND writes its output"
            else:
                hint = ""
            fail(f"{what}: expected {want} bytes, got {got}" + (f"; {hint}" if hint else ""))
