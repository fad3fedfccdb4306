"""The C++ kernels of the cpu backend (mini.backends._cpu), checked against numpy.

Every kernel, both dtypes, odd sizes, sizes above the OpenMP threshold, and every error
path: a kernel must refuse bad input with a clear message, never read out of bounds.
"""
from __future__ import annotations

import math
import os
import sys
import types
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mini.backends.cpu import build_info

DTYPES = [np.float32, np.float64]
TOL = {np.float32: dict(rtol=2e-5, atol=1e-6), np.float64: dict(rtol=1e-12, atol=1e-13)}
# Odd sizes, and sizes above PARALLEL_THRESHOLD so the OpenMP paths run.
SIZES = [0, 1, 7, 65, 1000, 32768, 100_003]


def rng(seed=0):
    return np.random.default_rng(seed)


def rand(n, dtype, seed=0, low=-2.0, high=2.0):
    return rng(seed).uniform(low, high, n).astype(dtype)


def close(got, want, dtype):
    np.testing.assert_allclose(got, want, **TOL[dtype])


# ---------------------------------------------------------------------------------------
# build facts


def test_module_facts(cpu):
    assert isinstance(cpu.openmp_enabled(), bool)
    assert cpu.max_threads() >= 1
    assert cpu.PARALLEL_THRESHOLD == 32768
    assert cpu.matmul_isa() in cpu.supported_isas()
    assert "base" in cpu.supported_isas()
    info = build_info.describe()
    assert info["built"] and info["openmp"] == cpu.openmp_enabled()


def test_openmp_enabled_with_gcc(cpu):
    """gcc always has OpenMP: a gcc build without it means setup.py's detection broke."""
    if not (sys.platform.startswith("linux") and cpu.compiler().startswith("gcc")):
        pytest.skip(f"built by {cpu.compiler()!r} on {sys.platform}; OpenMP may be missing there")
    if os.environ.get("MINI_NO_OPENMP", "") not in ("", "0"):
        pytest.skip("MINI_NO_OPENMP is set")
    assert cpu.openmp_enabled() is True


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_kernels_work_in_a_forked_child(cpu):
    """GNU OpenMP hangs in a child forked after a parallel region; the kernels must not."""
    import multiprocessing

    big = np.ones(200_000, np.float32)
    out = np.empty_like(big)
    cpu.ewise("add", big, big, out)  # the parent starts its thread pool
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_kernels, args=(cpu.__name__, queue))
    child.start()
    child.join(timeout=60)
    if child.is_alive():
        child.kill()
        pytest.fail("a kernel hung in a forked child")
    assert child.exitcode == 0
    assert queue.get(timeout=5) == (1, True, True)


def _child_kernels(module_name, queue):
    import importlib

    cpu = importlib.import_module(module_name)
    big = np.ones(200_000, np.float32)
    out = np.empty_like(big)
    cpu.ewise("add", big, big, out)
    m = 300
    c = np.empty(m * m, np.float32)
    cpu.matmul(np.ones(m * m, np.float32), np.ones(m * m, np.float32), c, m, m, m)
    queue.put((cpu.max_threads(), bool((out == 2).all()), bool((c == m).all())))


def test_load_extension_is_cached(cpu):
    assert build_info.load_extension() is cpu
    assert build_info.import_error() is None


@pytest.fixture
def fresh_build_info(monkeypatch):
    build_info._reset_for_tests()
    yield monkeypatch
    monkeypatch.undo()
    build_info._reset_for_tests()


def test_warns_once_without_openmp(fresh_build_info):
    fake = types.SimpleNamespace(openmp_enabled=lambda: False)
    fresh_build_info.setattr(build_info, "importlib", types.SimpleNamespace(import_module=lambda name: fake))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert build_info.load_extension() is fake
        assert build_info.load_extension() is fake
    relevant = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(relevant) == 1
    assert str(relevant[0].message) == build_info.NO_OPENMP_WARNING


def test_no_warning_with_openmp(fresh_build_info):
    fake = types.SimpleNamespace(openmp_enabled=lambda: True)
    fresh_build_info.setattr(build_info, "importlib", types.SimpleNamespace(import_module=lambda name: fake))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert build_info.load_extension() is fake


def test_missing_extension_returns_none(fresh_build_info):
    def fail(name):
        raise ImportError(f"No module named {name!r}")

    fresh_build_info.setattr(build_info, "importlib", types.SimpleNamespace(import_module=fail))
    assert build_info.load_extension() is None
    assert "No module named" in build_info.import_error()
    assert build_info.describe()["built"] is False


# ---------------------------------------------------------------------------------------
# compact


def compact_reference(src, shape, strides, offset):
    if 0 in shape:
        return np.empty(0, src.dtype)
    idx = np.indices(shape).reshape(len(shape), -1) if shape else np.zeros((0, 1), dtype=np.int64)
    positions = offset + (np.asarray(strides, dtype=np.int64)[:, None] * idx).sum(axis=0)
    return src[positions]


COMPACT_CASES = [
    # (src size, shape, strides, offset)
    (12, [3, 4], [4, 1], 0),                 # already compact
    (12, [4, 3], [1, 4], 0),                 # transpose
    (12, [], [], 5),                         # 0-d
    (12, [1], [0], 11),
    (12, [0, 3], [3, 1], 0),                 # empty
    (12, [3, 0], [5, 1], 100),               # empty: offset never read
    (12, [12], [-1], 11),                    # reversed
    (12, [2, 3], [-6, -2], 11),              # both axes reversed, stepped
    (5, [4, 5], [0, 1], 0),                  # broadcast rows (stride 0)
    (1, [3, 7, 5], [0, 0, 0], 0),            # broadcast a scalar
    (60, [3, 4, 5], [20, 5, 1], 0),
    (60, [5, 4, 3], [1, 5, 20], 0),          # full permutation
    (60, [2, 2, 2], [20, 5, 2], 7),          # slice with offset and steps
    (120, [2, 3, 4, 5], [60, 1, 15, 3], 0),  # 4-D permuted
    (7, [1, 1, 7, 1], [9, 9, 1, 9], 0),      # size-1 dims with junk strides
    (400 * 300, [400, 300], [1, 400], 0),    # large transpose: OpenMP
    (400 * 300, [300, 400], [-400, -1], 400 * 300 - 1),  # large, negative strides
    (1000, [97, 1000], [0, 1], 0),           # large broadcast
    (50_001, [50_001], [1], 0),              # large 1-D copy
    (100_003, [33_334], [3], 1),             # large 1-D stepped
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("size,shape,strides,offset", COMPACT_CASES)
def test_compact(cpu, dtype, size, shape, strides, offset):
    src = np.arange(size, dtype=dtype)
    out = np.full(math.prod(shape), -1, dtype=dtype)
    cpu.compact(src, shape, strides, offset, out)
    np.testing.assert_array_equal(out, compact_reference(src, shape, strides, offset))


@st.composite
def strided_views(draw):
    ndim = draw(st.integers(0, 4))
    shape = [draw(st.integers(0, 6)) for _ in range(ndim)]
    strides = [draw(st.integers(-7, 7)) for _ in range(ndim)]
    lo = sum(min(0, (s - 1) * t) for s, t in zip(shape, strides) if s > 0)
    hi = sum(max(0, (s - 1) * t) for s, t in zip(shape, strides) if s > 0)
    offset = draw(st.integers(-lo, -lo + 5))
    size = offset + hi + 1 + draw(st.integers(0, 3))
    return size, shape, strides, offset


@settings(max_examples=150, deadline=None)
@given(view=strided_views(), dtype=st.sampled_from(DTYPES))
def test_compact_random_views(cpu, view, dtype):
    size, shape, strides, offset = view
    src = np.arange(size, dtype=dtype)
    out = np.empty(math.prod(shape), dtype=dtype)
    cpu.compact(src, shape, strides, offset, out)
    np.testing.assert_array_equal(out, compact_reference(src, shape, strides, offset))


@settings(max_examples=100, deadline=None)
@given(view=strided_views(), shift=st.integers(1, 3), low=st.booleans())
def test_compact_rejects_every_out_of_bounds_view(cpu, view, shift, low):
    size, shape, strides, offset = view
    if 0 in shape:
        return
    lo = offset + sum(min(0, (s - 1) * t) for s, t in zip(shape, strides))
    hi = offset + sum(max(0, (s - 1) * t) for s, t in zip(shape, strides))
    # Move the view just outside src: below 0, or past the end.
    offset = offset - lo - shift if low else offset + (size - hi) + shift - 1
    src = np.arange(size, dtype=np.float64)
    out = np.empty(math.prod(shape), dtype=np.float64)
    with pytest.raises(ValueError, match="compact: the view .* reaches elements"):
        cpu.compact(src, shape, strides, offset, out)


# ---------------------------------------------------------------------------------------
# ewise / scalar / unary / fill

EWISE = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "maximum": np.maximum, "minimum": np.minimum, "pow": np.power,
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal,
}


def ewise_inputs(op, n, dtype):
    a = rand(n, dtype, seed=1)
    b = rand(n, dtype, seed=2)
    if op == "pow":
        a = np.abs(a) + dtype(0.1)
    if op == "div":
        b = np.where(np.abs(b) < 0.1, dtype(0.5), b).astype(dtype)
    if op in ("eq", "ne", "lt", "le", "gt", "ge", "maximum", "minimum"):
        b[::3] = a[::3]  # ties
    return a, b


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("op", list(EWISE))
def test_ewise(cpu, op, n, dtype):
    a, b = ewise_inputs(op, n, dtype)
    out = np.empty(n, dtype)
    cpu.ewise(op, a, b, out)
    close(out, EWISE[op](a, b).astype(dtype), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_ewise_in_place(cpu, dtype):
    a, b = rand(100_003, dtype, 1), rand(100_003, dtype, 2)
    want = a * b
    cpu.ewise("mul", a, b, a)
    close(a, want, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_maximum_propagates_nan(cpu, dtype):
    a = np.array([1, np.nan, 3, np.nan], dtype)
    b = np.array([np.nan, 2, 1, np.nan], dtype)
    out = np.empty(4, dtype)
    cpu.ewise("maximum", a, b, out)
    np.testing.assert_array_equal(out, np.maximum(a, b))
    cpu.ewise("minimum", a, b, out)
    np.testing.assert_array_equal(out, np.minimum(a, b))


SCALAR = {
    "add": lambda a, s: a + s, "sub": lambda a, s: a - s, "rsub": lambda a, s: s - a,
    "mul": lambda a, s: a * s, "div": lambda a, s: a / s, "rdiv": lambda a, s: s / a,
    "maximum": np.maximum, "minimum": np.minimum, "pow": np.power,
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal,
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("op", list(SCALAR))
def test_scalar(cpu, op, n, dtype):
    a = rand(n, dtype, seed=3)
    s = 0.75
    if op in ("pow", "rdiv"):
        a = np.abs(a) + dtype(0.1)
    if op in ("eq", "ne", "le", "ge", "lt", "gt", "maximum", "minimum") and n:
        a[::4] = dtype(s)  # ties
    out = np.empty(n, dtype)
    cpu.scalar(op, a, s, out)
    close(out, np.asarray(SCALAR[op](a, dtype(s))).astype(dtype), dtype)


def _sigmoid(x):
    return np.where(x >= 0, 1 / (1 + np.exp(-np.abs(x))), np.exp(-np.abs(x)) / (1 + np.exp(-np.abs(x))))


UNARY = {
    "neg": np.negative, "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "sin": np.sin,
    "cos": np.cos, "tanh": np.tanh, "abs": np.abs, "relu": lambda x: np.maximum(x, 0),
    "sigmoid": _sigmoid, "sign": np.sign,
    "erf": lambda x: np.array([math.erf(v) for v in x.astype(np.float64)]),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("op", list(UNARY))
def test_unary(cpu, op, n, dtype):
    if op == "erf" and n > 1000:
        n = 1000  # the reference is a Python loop
    a = rand(n, dtype, seed=4, low=-5, high=5)
    if op in ("log", "sqrt"):
        a = np.abs(a) + dtype(1e-3)
    if n:
        a[0] = 0
    out = np.empty(n, dtype)
    cpu.unary(op, a, out)
    with np.errstate(all="ignore"):
        close(out, UNARY[op](a).astype(dtype), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_unary_edge_values(cpu, dtype):
    a = np.array([-1000, -80, -1, 0, 1, 80, 1000, np.inf, -np.inf, np.nan], dtype)
    out = np.empty_like(a)
    with np.errstate(all="ignore"):
        cpu.unary("sigmoid", a, out)
        np.testing.assert_allclose(out, _sigmoid(a.astype(np.float64)).astype(dtype), rtol=1e-6, atol=0)
        cpu.unary("relu", a, out)
        np.testing.assert_array_equal(out, np.maximum(a, 0))
        cpu.unary("sqrt", a, out)
        np.testing.assert_array_equal(out, np.sqrt(a))  # NaN for negatives, like numpy
        cpu.unary("log", a, out)
        # log(0) = -inf, NaN below 0 and for NaN, exactly; log(80) and log(1000) within an
        # ulp or two (the C library's log and numpy's SIMD log may round differently)
        want = np.log(a)
        special = ~np.isfinite(want) | (want == 0)
        np.testing.assert_array_equal(out[special], want[special])
        np.testing.assert_allclose(out[~special], want[~special], rtol=4 * np.finfo(dtype).eps, atol=0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_fill(cpu, n, dtype):
    out = np.zeros(n, dtype)
    cpu.fill(out, -2.5)
    np.testing.assert_array_equal(out, np.full(n, -2.5, dtype))


# ---------------------------------------------------------------------------------------
# reduce_last

REDUCE_SHAPES = [(1, 1), (3, 7), (7, 1), (1, 100_003), (1000, 65), (5, 40_000), (40_000, 3), (0, 5)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,n", REDUCE_SHAPES)
@pytest.mark.parametrize("op", ["sum", "max"])
def test_reduce_last(cpu, op, rows, n, dtype):
    a = rand(rows * n, dtype, seed=5)
    out = np.empty(rows, dtype)
    cpu.reduce_last(op, a, n, out)
    want = a.reshape(rows, n).astype(np.float64)
    want = want.sum(axis=1) if op == "sum" else want.max(axis=1, initial=-np.inf)
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, want.astype(dtype), rtol=rtol, atol=rtol * math.sqrt(max(n, 1)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_reduce_empty_rows(cpu, dtype):
    out = np.full(4, 7, dtype)
    cpu.reduce_last("sum", np.empty(0, dtype), 0, out)
    np.testing.assert_array_equal(out, np.zeros(4, dtype))
    with pytest.raises(ValueError, match="reduce_last: max over empty rows"):
        cpu.reduce_last("max", np.empty(0, dtype), 0, out)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [5, 100_003])
def test_reduce_max_special_values(cpu, n, dtype):
    a = rand(3 * n, dtype, seed=6).reshape(3, n)
    a[0, n // 2] = np.nan      # NaN wins
    a[1, -1] = np.inf          # inf without NaN is the max
    a[2, :] = -np.inf          # all -inf
    out = np.empty(3, dtype)
    cpu.reduce_last("max", a.ravel(), n, out)
    np.testing.assert_array_equal(out, a.max(axis=1))


# ---------------------------------------------------------------------------------------
# matmul

MATMUL_DIMS = [1, 7, 65, 130]


def matmul_check(cpu, m, k, n, dtype, seed=0):
    a = rand(m * k, dtype, seed=seed)
    b = rand(k * n, dtype, seed=seed + 1)
    out = np.full(m * n, np.nan, dtype)
    cpu.matmul(a, b, out, m, k, n)
    want = a.reshape(m, k).astype(np.float64) @ b.reshape(k, n).astype(np.float64)
    rtol = 1e-4 if dtype == np.float32 else 1e-11
    np.testing.assert_allclose(out.reshape(m, n), want, rtol=rtol, atol=rtol * math.sqrt(max(k, 1)) * 4)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", MATMUL_DIMS)
@pytest.mark.parametrize("k", MATMUL_DIMS)
@pytest.mark.parametrize("m", MATMUL_DIMS)
def test_matmul_small(cpu, m, k, n, dtype):
    matmul_check(cpu, m, k, n, dtype)


# Above the OpenMP threshold, several row/column tiles and several k slabs, ragged edges.
LARGE = [(300, 257, 513), (97, 600, 1031), (1, 3000, 2000), (2000, 300, 1), (513, 1, 129), (128, 128, 128)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,k,n", LARGE)
def test_matmul_large(cpu, m, k, n, dtype):
    matmul_check(cpu, m, k, n, dtype)


@pytest.fixture
def each_isa(cpu):
    yield cpu.supported_isas()
    cpu.set_matmul_isa("auto")


@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul_every_instruction_set(cpu, each_isa, dtype):
    """Each micro-kernel variant this CPU can run (avx512 / avx2 / base) is correct."""
    for isa in each_isa:
        cpu.set_matmul_isa(isa)
        assert cpu.matmul_isa() == isa
        for m, k, n in [(13, 300, 37), (130, 65, 257), (7, 7, 7), (200, 129, 600)]:
            matmul_check(cpu, m, k, n, dtype)


def test_set_matmul_isa_rejects_unknown(cpu, each_isa):
    with pytest.raises(ValueError, match="instruction set 'sse9'"):
        cpu.set_matmul_isa("sse9")


@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul_degenerate(cpu, dtype):
    out = np.full(6, np.nan, dtype)
    cpu.matmul(np.empty(0, dtype), np.empty(0, dtype), out, 2, 0, 3)  # k = 0: zeros
    np.testing.assert_array_equal(out, np.zeros(6, dtype))
    cpu.matmul(np.empty(0, dtype), np.ones(12, dtype), np.empty(0, dtype), 0, 4, 3)  # m = 0
    cpu.matmul(np.ones(8, dtype), np.empty(0, dtype), np.empty(0, dtype), 2, 4, 0)  # n = 0


# ---------------------------------------------------------------------------------------
# errors: every kernel refuses bad buffers by name

F32 = np.float32


def calls(good):
    """One valid call per kernel, built from a function that makes the buffers."""
    g = good
    return {
        "compact": lambda **kw: ("compact", (kw.get("a", g(12)), [3, 4], [4, 1], 0, kw.get("out", g(12)))),
        "ewise": lambda **kw: ("ewise", ("add", kw.get("a", g(12)), kw.get("b", g(12)), kw.get("out", g(12)))),
        "scalar": lambda **kw: ("scalar", ("add", kw.get("a", g(12)), 1.0, kw.get("out", g(12)))),
        "unary": lambda **kw: ("unary", ("exp", kw.get("a", g(12)), kw.get("out", g(12)))),
        "reduce_last": lambda **kw: ("reduce_last", ("sum", kw.get("a", g(12)), 4, kw.get("out", g(3)))),
        "matmul": lambda **kw: ("matmul", (kw.get("a", g(12)), kw.get("b", g(12)), kw.get("out", g(9)), 3, 4, 3)),
        "fill": lambda **kw: ("fill", (kw.get("out", g(12)), 1.0)),
    }


KERNELS = ["compact", "ewise", "scalar", "unary", "reduce_last", "matmul", "fill"]
INPUT_NAME = {"compact": "src"}


def run_call(cpu, spec):
    name, args = spec
    getattr(cpu, name)(*args)


@pytest.mark.parametrize("kernel", KERNELS)
def test_valid_calls_run(cpu, kernel):
    run_call(cpu, calls(lambda n: np.ones(n, F32))[kernel]())


@pytest.mark.parametrize("bad_dtype", [np.int64, np.float16, np.complex64, np.dtype(">f4")])
@pytest.mark.parametrize("kernel", KERNELS)
def test_wrong_dtype(cpu, kernel, bad_dtype):
    spec = calls(lambda n: np.ones(n, bad_dtype))[kernel]()
    with pytest.raises(TypeError, match=rf"mini\.backends\._cpu\.{kernel}: argument '\w+' has dtype"):
        run_call(cpu, spec)


@pytest.mark.parametrize("kernel", [k for k in KERNELS if k != "fill"])
def test_mixed_dtypes(cpu, kernel):
    spec = calls(lambda n: np.ones(n, F32))[kernel](out=np.ones(12 if kernel not in ("reduce_last", "matmul") else
                                                                  (3 if kernel == "reduce_last" else 9), np.float64))
    with pytest.raises(TypeError, match=rf"{kernel}: dtypes differ: .* is float32 but 'out' is float64"):
        run_call(cpu, spec)


@pytest.mark.parametrize("kernel,which", [(k, w) for k in KERNELS for w in ("a", "out") if (k, w) != ("fill", "a")])
def test_non_contiguous(cpu, kernel, which):
    size = {"reduce_last": 3, "matmul": 9}.get(kernel, 12) if which == "out" else 12
    strided = np.ones(2 * size, F32)[::2]
    spec = calls(lambda n: np.ones(n, F32))[kernel](**{which: strided})
    with pytest.raises(ValueError, match=rf"{kernel}: argument '\w+' is not C-contiguous"):
        run_call(cpu, spec)


@pytest.mark.parametrize("kernel", KERNELS)
def test_not_flat(cpu, kernel):
    size = {"reduce_last": 3, "matmul": 9}.get(kernel, 12)
    spec = calls(lambda n: np.ones(n, F32))[kernel](out=np.ones((size, 1), F32))
    with pytest.raises(ValueError, match=rf"{kernel}: argument 'out' must be a flat 1-D buffer, got shape \({size}, 1\)"):
        run_call(cpu, spec)


@pytest.mark.parametrize("kernel", KERNELS)
def test_read_only_output(cpu, kernel):
    size = {"reduce_last": 3, "matmul": 9}.get(kernel, 12)
    out = np.ones(size, F32)
    out.flags.writeable = False
    spec = calls(lambda n: np.ones(n, F32))[kernel](out=out)
    with pytest.raises(ValueError, match=rf"{kernel}: output 'out' is read-only"):
        run_call(cpu, spec)


@pytest.mark.parametrize("kernel", KERNELS)
def test_not_an_array(cpu, kernel):
    spec = calls(lambda n: np.ones(n, F32))[kernel](out=[1.0] * 12)
    with pytest.raises(TypeError, match=rf"{kernel}: argument 'out' must be a numpy.ndarray, got list"):
        run_call(cpu, spec)


@pytest.mark.parametrize("kernel", ["compact", "ewise", "scalar", "unary", "reduce_last", "matmul"])
def test_size_mismatch(cpu, kernel):
    spec = calls(lambda n: np.ones(n, F32))[kernel](out=np.ones(5, F32))
    with pytest.raises(ValueError, match=rf"{kernel}: .*\b5\b"):
        run_call(cpu, spec)


def test_ewise_input_size_mismatch(cpu):
    with pytest.raises(ValueError, match="ewise: sizes differ: 'a' has 12 elements but 'b' has 11"):
        cpu.ewise("add", np.ones(12, F32), np.ones(11, F32), np.ones(12, F32))


@pytest.mark.parametrize("kernel,op", [("ewise", "rsub"), ("scalar", "avg"), ("unary", "gelu2"), ("reduce_last", "mean")])
def test_unknown_op(cpu, kernel, op):
    name, args = calls(lambda n: np.ones(n, F32))[kernel]()
    with pytest.raises(ValueError, match=rf"{kernel}: unknown op '{op}'; expected one of"):
        getattr(cpu, name)(op, *args[1:])


@pytest.mark.parametrize(
    "size,shape,strides,offset",
    [
        (12, [3, 4], [4, 1], 1),        # one past the end
        (12, [3, 4], [5, 1], 0),        # strides too large
        (12, [12], [-1], 10),           # runs below 0
        (12, [2, 3], [3, 1], -1),       # negative offset
        (12, [], [], 12),               # 0-d, offset past the end
        (0, [1], [1], 0),               # empty src
        (12, [3, 2], [2**62, 1], 0),    # span overflows int64
    ],
)
def test_compact_out_of_bounds(cpu, size, shape, strides, offset):
    out = np.empty(math.prod(shape), F32)
    with pytest.raises(ValueError, match="compact: (the view .* reaches elements|.*overflows a 64-bit index)"):
        cpu.compact(np.ones(size, F32), shape, strides, offset, out)


def test_compact_shape_strides_mismatch(cpu):
    with pytest.raises(ValueError, match=r"compact: shape \[3, 4\] has 2 dimensions but strides \[1\] has 1"):
        cpu.compact(np.ones(12, F32), [3, 4], [1], 0, np.empty(12, F32))
    with pytest.raises(ValueError, match="compact: negative dimension"):
        cpu.compact(np.ones(12, F32), [-3, 4], [4, 1], 0, np.empty(12, F32))
    with pytest.raises(ValueError, match=r"compact: 'out' has 11 elements but shape \[3, 4\] has 12"):
        cpu.compact(np.ones(12, F32), [3, 4], [4, 1], 0, np.empty(11, F32))


def test_matmul_errors(cpu):
    a, b = np.ones(12, F32), np.ones(12, F32)
    with pytest.raises(ValueError, match=r"matmul: 'b' has 12 elements but k x n = 4 x 5 = 20"):
        cpu.matmul(a, b, np.empty(15, F32), 3, 4, 5)
    with pytest.raises(ValueError, match=r"matmul: 'out' has 10 elements but m x n = 3 x 3 = 9"):
        cpu.matmul(a, b, np.empty(10, F32), 3, 4, 3)
    with pytest.raises(ValueError, match="matmul: m, k, n must be >= 0"):
        cpu.matmul(a, b, np.empty(9, F32), -3, -4, 3)


def test_reduce_errors(cpu):
    with pytest.raises(ValueError, match=r"reduce_last: 'a' has 12 elements but out.size \* n = 3 \* 5 = 15"):
        cpu.reduce_last("sum", np.ones(12, F32), 5, np.empty(3, F32))
    with pytest.raises(ValueError, match="reduce_last: n must be >= 0"):
        cpu.reduce_last("sum", np.ones(12, F32), -4, np.empty(3, F32))


def test_overlapping_output_is_refused(cpu):
    buf = np.ones(40, F32)
    with pytest.raises(ValueError, match="compact: 'out' overlaps 'src'"):
        cpu.compact(buf, [4, 3], [1, 4], 0, buf[20:32])
    with pytest.raises(ValueError, match="compact: 'out' overlaps 'src'"):
        cpu.compact(buf[:12], [4, 3], [1, 4], 0, buf[6:18])
    with pytest.raises(ValueError, match="matmul: 'out' overlaps 'a'"):
        cpu.matmul(buf[:4], buf[4:8], buf[2:6], 2, 2, 2)
    with pytest.raises(ValueError, match="reduce_last: 'out' overlaps 'a'"):
        cpu.reduce_last("sum", buf[:12], 4, buf[:3])
    # Disjoint slices of one buffer are fine.
    cpu.compact(buf[:12], [4, 3], [1, 4], 0, buf[20:32])
