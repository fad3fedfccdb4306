"""Hidden checks of chapter 02 (automatic differentiation): one check per exercise slot, the
custom ``Function`` (``MultiplyAdd``), and the three self-check questions.

Oracles are trusted code only: numpy formulas for every vector-Jacobian product, the
graphs' edges from the same scenario run with mini's reference in this process for the
topological order, expectations computed here from the fake graphs' specification for
``02.backward``, and central differences computed here for ``02.central_difference``.

Each check receives a handle on the student's function (:class:`grader.checks.student.
Student`): tensors go out as :class:`~grader.worker.codec.TensorSpec` and come back as
:class:`~grader.worker.codec.TensorRecord` (plain values and dtype).  The engine's
exercises run as scenarios of :mod:`grader.worker.scenarios.ch02` next to the student's
code: graphs recorded by mini, the backward loop on fake nodes that record what it does, a
custom Function's node.  Where a check also runs the student's function inside mini's own
backward (which then uses the student's other chapter-02 answers too), that is a separate
named part of the points.
"""
from __future__ import annotations

import math

import numpy as np

from grader.checks import check, part
from grader.checks.helpers import (call, describe, expect_choice, expect_float, fail,
                                   raised_as_failure, rng)
from grader.checks.student import StudentRaised
from grader.worker.codec import ExceptionRecord, SizeSpec, TensorRecord, TensorSpec

CANARY = "mini-grader-canary: hidden checks of chapter 02 (never in feedback)"

# Points, the one source: `mini-course build` prices the notebook's test cells and its
# "What you build" table from this dict (100 in all for the chapter).
POINTS = {
    "02.add_vjp": 2,
    "02.mul_vjp": 4,
    "02.div_vjp": 5,
    "02.pow_vjp": 4,
    "02.exp_vjp": 2,
    "02.log_vjp": 3,
    "02.relu_vjp": 4,
    "02.unbroadcast": 8,
    "02.sum_vjp": 4,
    "02.mean_vjp": 4,
    "02.reshape_vjp": 2,
    "02.permute_vjp": 4,
    "02.matmul_vjp": 7,
    "02.toposort": 10,
    "02.seed_gradient": 4,
    "02.accumulate_grad": 3,
    "02.backward": 10,
    "02.multiply_add": 5,
    "02.mul_jvp": 4,
    "02.central_difference": 5,
    "02.quiz_accumulate": 2,
    "02.quiz_inplace": 2,
    "02.quiz_eval": 2,
}

TRIALS = 12  # random cases per check, on top of the fixed ones


# =========================================================================== tensors in and out

def _call(fn, *args, label: str, hint: str = ""):
    """Call the student's ``fn(*args)``; an exception it raises becomes a failure naming
    ``label`` (the call described in words) followed by ``hint``.  A stub passes through,
    so the runner can say the exercise is not done yet."""
    try:
        return fn(*args)
    except StudentRaised as e:
        if e.record.is_a("RecursionError"):
            fail(f"{label} raised RecursionError (maximum recursion depth exceeded): a recursive "
                 f"function makes one nested Python call per step and hits the recursion limit "
                 f"(about 1,000); use a loop with an explicit stack instead")
        failure = raised_as_failure(e, label, hint)
        if type(failure).__name__ == "CheckFailed" and hint:
            fail(f"{label} raised {e.record.text()}{hint}")
        raise failure from None


def _expect_raises(exc_type, fn, *args, label: str, hint: str = ""):
    """Require the student's ``fn(*args)`` to raise ``exc_type``."""
    try:
        result = fn(*args)
    except StudentRaised as e:
        rec = e.record
        if rec.not_implemented:  # (a RuntimeError subclass: an unfinished exercise, not the error)
            raise raised_as_failure(e, label) from None
        if rec.is_a(exc_type.__name__):
            return
        if not rec.is_a("Exception"):
            raise
        fail(f"{label} should raise {exc_type.__name__}, but raised {rec.text()}; {hint}")
    got = "a Tensor" if type(result) is TensorRecord else describe(result)
    fail(f"{label} should raise {exc_type.__name__}, but returned {got}; {hint}")


def _tensor(array, requires_grad: bool = False) -> TensorSpec:
    """A tensor for the student's function, holding a copy of ``array`` (its dtype kept)."""
    return TensorSpec(np.array(array, copy=True), requires_grad=requires_grad)


def _read(value, what: str, *, shape=None, dtype=None, hint_shape: str = "") -> np.ndarray:
    """The values of a mini Tensor the student returned (a record), as a numpy array; shape
    and dtype are checked when given (``hint_shape`` is appended to a shape mismatch)."""
    if type(value) is not TensorRecord:
        if type(value) is np.ndarray:
            fail(f"{what} should be a mini Tensor, got a numpy array ({describe(value)}): "
                 f"compute it with Tensor operations (grad * b, grad.sum(...), ...)")
        if value is None:
            fail(f"{what} should be a mini Tensor, got None: did you forget to return it?")
        fail(f"{what} should be a mini Tensor, got {describe(value)}")
    arr = value.data
    if shape is not None and arr.shape != tuple(shape):
        msg = f"{what} has shape {arr.shape}, expected {tuple(shape)}"
        fail(f"{msg}; {hint_shape}" if hint_shape else msg)
    if dtype is not None and arr.dtype != np.dtype(dtype):
        fail(f"{what} has dtype {arr.dtype}, expected {np.dtype(dtype)} (the dtype of the "
             f"incoming gradient): keep the computation in the gradient's dtype")
    return np.array(arr, copy=True)


def _pair(value, what: str, n: int = 2) -> tuple:
    """A tuple (or list) of exactly ``n`` items, as a tuple."""
    if type(value) not in (tuple, list):
        got = "one Tensor" if type(value) is TensorRecord else describe(value)
        fail(f"{what} should return a tuple of {n} gradients (grad_a, grad_b), got {got}: "
             f"return one gradient per input")
    items = tuple(list.__iter__(value) if type(value) is list else tuple.__iter__(value))
    if len(items) != n:
        fail(f"{what} should return {n} gradients, one per input, got {len(items)}")
    return items


def _tol(dtype) -> dict:
    return dict(rtol=1e-4, atol=1e-5) if np.dtype(dtype) == np.float32 else dict(rtol=1e-9, atol=1e-12)


def _close(a: np.ndarray, b: np.ndarray, dtype) -> bool:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.allclose(a, b, equal_nan=True, **_tol(dtype)))


def _compare(got: np.ndarray, expected: np.ndarray, what: str, dtype, wrong=(), hint: str = ""):
    """Fail unless ``got`` is close to ``expected``; when it matches one of the ``wrong``
    candidates ``[(array, explanation)]`` the explanation is the message's hint."""
    expected = np.asarray(expected, dtype=np.float64)
    if got.shape != expected.shape:
        for cand, why in wrong:
            if np.shape(cand) == got.shape and _close(got, cand, dtype):
                fail(f"{what} has shape {got.shape}, expected {expected.shape}; {why}")
        fail(f"{what} has shape {got.shape}, expected {expected.shape}" + (f"; {hint}" if hint else ""))
    if _close(got, expected, dtype):
        return
    for cand, why in wrong:
        if np.shape(cand) == got.shape and _close(got, cand, dtype):
            fail(f"{what}: expected {_show(expected)}, got {_show(got)}; {why}")
    err = np.abs(got.astype(np.float64) - expected)
    where = np.unravel_index(int(np.nanargmax(err)), err.shape) if err.size else ()
    where = tuple(int(i) for i in where)
    msg = (f"{what}: values differ; largest difference {float(np.nanmax(err)):.3g} at index "
           f"{where}: expected {float(expected[where]):.6g}, got {float(got[where]):.6g}")
    fail(f"{msg}; {hint}" if hint else msg)


def _show(a: np.ndarray) -> str:
    with np.printoptions(precision=4, threshold=12, edgeitems=2, suppress=True):
        text = np.array2string(np.asarray(a), separator=", ")
    return text if len(text) < 120 else text[:117] + "..."


def _shape_text(shape) -> str:
    return str(tuple(int(d) for d in shape))


def _desc(*arrays_or_numbers) -> str:
    parts = []
    for v in arrays_or_numbers:
        if isinstance(v, np.ndarray):
            parts.append(f"shape {_shape_text(v.shape)} {v.dtype}")
        else:
            parts.append(repr(v))
    return ", ".join(parts)


def _randn(gen, shape, dtype=np.float64, low=None):
    a = gen.standard_normal(shape)
    if low is not None:  # keep away from a singular point: |a| >= low
        a = np.where(np.abs(a) < low, np.sign(a + 1e-12) * low, a)
    return a.astype(dtype)


def _same_shape_cases(gen, k=TRIALS):
    shapes = [(3,), (2, 3), (4, 1, 2), ()]
    shapes += [tuple(int(d) for d in gen.integers(1, 5, size=int(gen.integers(1, 4))))
               for _ in range(k)]
    return shapes


# =========================================================================== elementwise VJPs

@check("02.add_vjp", points=POINTS["02.add_vjp"])
def check_add_vjp(fn):
    gen = rng()
    for i, shape in enumerate(_same_shape_cases(gen, 6)):
        dtype = np.float32 if i % 2 else np.float64
        g = _randn(gen, shape, dtype)
        what = f"add_vjp(grad, None, None) with grad of {_desc(g)}"
        got = _pair(_call(fn, _tensor(g), None, None, label=what), what)
        for k, name in enumerate(("grad_a", "grad_b")):
            arr = _read(got[k], f"{what}: {name}", shape=g.shape, dtype=dtype)
            _compare(arr, g, f"{what}: {name}", dtype,
                     wrong=[(-g, "out = a + b changes by exactly as much as a or b does: both "
                                 "local derivatives are +1, so both gradients are grad itself"),
                            (np.zeros_like(g), "both gradients are grad itself, not zero")],
                     hint="d(a + b)/da = d(a + b)/db = 1, so both gradients equal grad")


def _binary_cases(gen, low=None, positive_b=False):
    """(grad, a, b) triples: same shapes, broadcast shapes, a number on either side."""
    cases = []
    for i in range(TRIALS):
        dtype = np.float32 if i % 3 == 2 else np.float64
        shape = tuple(int(d) for d in gen.integers(1, 5, size=int(gen.integers(1, 4))))
        kind = i % 4
        if kind == 0:
            a_shape, b_shape = shape, shape
        elif kind == 1:
            a_shape, b_shape = shape, shape[1:] or (1,)
        elif kind == 2:
            a_shape, b_shape = (1,) + shape[1:], shape
        else:
            a_shape, b_shape = shape, None  # b is a number
        out_shape = np.broadcast_shapes(a_shape, b_shape or ())
        g = _randn(gen, out_shape, dtype)
        a = _randn(gen, a_shape, dtype)
        if b_shape is None:
            b = float(np.round(gen.uniform(0.5, 3.0), 3)) * (1 if positive_b or gen.random() < 0.5 else -1)
        else:
            b = _randn(gen, b_shape, dtype, low=low)
            if positive_b:
                b = np.abs(b)
        cases.append((g, a, b, dtype))
    # a number on the left
    dtype = np.float64
    g = _randn(gen, (2, 3), dtype)
    cases.append((g, 2.5, _randn(gen, (2, 3), dtype, low=low), dtype))
    return cases


def _arg(x):
    return _tensor(x) if isinstance(x, np.ndarray) else x


def _bcast(x, shape):
    return np.broadcast_to(np.asarray(x, dtype=np.float64), shape)


@check("02.mul_vjp", points=POINTS["02.mul_vjp"])
def check_mul_vjp(fn):
    gen = rng()
    for g, a, b, dtype in _binary_cases(gen):
        what = f"mul_vjp(grad, a, b) with {_desc(g, a, b)}"
        got = _pair(_call(fn, _tensor(g), _arg(a), _arg(b), label=what), what)
        g64 = g.astype(np.float64)
        a64, b64 = _bcast(a, g.shape), _bcast(b, g.shape)
        exp_a, exp_b = g64 * b64, g64 * a64
        ga = _read(got[0], f"{what}: grad_a", shape=g.shape, dtype=dtype,
                   hint_shape="return gradients shaped like out (grad's shape); the caller sums "
                              "them back to each input's shape")
        _compare(ga, exp_a, f"{what}: grad_a", dtype,
                 wrong=[(g64 * a64, "grad_a is grad times the OTHER factor: d(a*b)/da = b, so "
                                    "grad_a = grad * b (you used a)"),
                        (g64, "d(a*b)/da = b: multiply grad by b")])
        gb = _read(got[1], f"{what}: grad_b", shape=g.shape, dtype=dtype,
                   hint_shape="return gradients shaped like out (grad's shape)")
        _compare(gb, exp_b, f"{what}: grad_b", dtype,
                 wrong=[(g64 * b64, "grad_b is grad times the OTHER factor: d(a*b)/db = a, so "
                                    "grad_b = grad * a (you used b)"),
                        (g64, "d(a*b)/db = a: multiply grad by a")])


@check("02.div_vjp", points=POINTS["02.div_vjp"])
def check_div_vjp(fn):
    gen = rng()
    for g, a, b, dtype in _binary_cases(gen, low=0.5):
        what = f"div_vjp(grad, a, b) with {_desc(g, a, b)}"
        got = _pair(_call(fn, _tensor(g), _arg(a), _arg(b), label=what), what)
        g64 = g.astype(np.float64)
        a64, b64 = _bcast(a, g.shape), _bcast(b, g.shape)
        exp_a, exp_b = g64 / b64, -g64 * a64 / (b64 * b64)
        ga = _read(got[0], f"{what}: grad_a", shape=g.shape, dtype=dtype)
        _compare(ga, exp_a, f"{what}: grad_a", dtype,
                 wrong=[(g64 * b64, "d(a/b)/da = 1/b: divide grad by b, don't multiply"),
                        (-g64 / b64, "d(a/b)/da = +1/b: the minus sign belongs to grad_b only")])
        gb = _read(got[1], f"{what}: grad_b", shape=g.shape, dtype=dtype)
        _compare(gb, exp_b, f"{what}: grad_b", dtype,
                 wrong=[(g64 * a64 / (b64 * b64), "the sign of grad_b is wrong: d(a/b)/db = "
                                                  "-a/b², so grad_b = -grad * a / b²"),
                        (-g64 / (b64 * b64), "d(a/b)/db = -a/b²: you dropped the factor a"),
                        (-g64 * a64 / b64, "d(a/b)/db = -a/b²: b must be squared")])


@check("02.pow_vjp", points=POINTS["02.pow_vjp"])
def check_pow_vjp(fn):
    gen = rng()
    exponents = [2, 3, 2.0, 0.5, -1.0, 1, 1.5, -2]
    for i, p in enumerate(exponents + [float(np.round(gen.uniform(-2, 3), 2)) for _ in range(4)]):
        dtype = np.float32 if i % 3 == 1 else np.float64
        shape = tuple(int(d) for d in gen.integers(1, 5, size=int(gen.integers(1, 3))))
        a = np.abs(_randn(gen, shape, np.float64, low=0.4)).astype(dtype)  # a > 0: any exponent works
        g = _randn(gen, shape, dtype)
        what = f"pow_vjp(grad, a, exponent={p!r}) with {_desc(g, a)}"
        got = _call(fn, _tensor(g), _tensor(a), p, label=what)
        arr = _read(got, f"{what}: grad_a", shape=shape, dtype=dtype)
        a64, g64 = a.astype(np.float64), g.astype(np.float64)
        expected = g64 * p * a64 ** (p - 1)
        _compare(arr, expected, what, dtype,
                 wrong=[(g64 * a64 ** (p - 1), "d(a**p)/da = p * a**(p-1): you dropped the factor p"),
                        (g64 * p * a64 ** p, "d(a**p)/da = p * a**(p-1): lower the exponent by one"),
                        (g64 * (p - 1) * a64 ** (p - 1), "d(a**p)/da = p * a**(p-1): the factor is p, "
                                                         "not p - 1"),
                        (p * a64 ** (p - 1), "multiply the local derivative by grad (the chain rule)")])


@check("02.exp_vjp", points=POINTS["02.exp_vjp"])
def check_exp_vjp(fn):
    gen = rng()
    for i, shape in enumerate(_same_shape_cases(gen, 6)):
        dtype = np.float32 if i % 2 else np.float64
        a = (0.5 * gen.standard_normal(shape)).astype(dtype)
        out = np.exp(a).astype(dtype)
        g = _randn(gen, shape, dtype)
        what = f"exp_vjp(grad, out) with out = exp(a) of {_desc(out)}"
        arr = _read(_call(fn, _tensor(g), _tensor(out), label=what), f"{what}: grad_a",
                    shape=out.shape, dtype=dtype)
        g64, o64 = g.astype(np.float64), out.astype(np.float64)
        _compare(arr, g64 * o64, what, dtype,
                 wrong=[(g64 * np.exp(o64), "the second argument is already exp(a): the "
                                            "gradient is grad * out, don't take exp again"),
                        (o64, "multiply by grad (the chain rule)"),
                        (g64, "d exp(a)/da = exp(a) = out: multiply grad by out")])


@check("02.log_vjp", points=POINTS["02.log_vjp"])
def check_log_vjp(fn):
    gen = rng()
    for i, shape in enumerate(_same_shape_cases(gen, 6)):
        dtype = np.float32 if i % 2 else np.float64
        a = np.abs(_randn(gen, shape, np.float64, low=0.3)).astype(dtype)
        g = _randn(gen, shape, dtype)
        what = f"log_vjp(grad, a) with {_desc(a)}"
        arr = _read(_call(fn, _tensor(g), _tensor(a), label=what), f"{what}: grad_a",
                    shape=a.shape, dtype=dtype)
        g64, a64 = g.astype(np.float64), a.astype(np.float64)
        _compare(arr, g64 / a64, what, dtype,
                 wrong=[(g64 * a64, "d log(a)/da = 1/a: divide grad by a"),
                        (g64 * np.log(a64), "d log(a)/da = 1/a, not log(a)"),
                        (-g64 / (a64 * a64), "that is the second derivative; d log(a)/da = 1/a"),
                        (1 / a64, "multiply 1/a by grad (the chain rule)")])


@check("02.relu_vjp", points=POINTS["02.relu_vjp"])
def check_relu_vjp(fn):
    gen = rng()
    # the chapter's example first
    cases = [(np.full(3, 0.5), np.array([-1.0, 2.0, 3.0]), np.float64)]
    zeros = np.array([-2.0, 0.0, 1.5, 0.0, -0.0, 3.0])
    cases.append((_randn(gen, zeros.shape), zeros, np.float64))
    for i, shape in enumerate(_same_shape_cases(gen, 8)):
        dtype = np.float32 if i % 2 else np.float64
        a = _randn(gen, shape, dtype)
        if a.size:
            a.reshape(-1)[gen.random(a.size) < 0.3] = 0.0  # exact zeros: the kink
        cases.append((_randn(gen, shape, dtype), a, dtype))
    for g, a, dtype in cases:
        g, a = g.astype(dtype), a.astype(dtype)
        what = f"relu_vjp(grad, a) with a = {_show(a)}" if a.size <= 6 else \
            f"relu_vjp(grad, a) with {_desc(a)}"
        arr = _read(_call(fn, _tensor(g), _tensor(a), label=what), f"{what}: grad_a",
                    shape=a.shape, dtype=dtype)
        g64, a64 = g.astype(np.float64), a.astype(np.float64)
        _compare(arr, g64 * (a64 > 0), what, dtype,
                 wrong=[(g64 * (a64 >= 0), "at a == 0 the gradient must be 0: mini (like PyTorch) "
                                           "lets the gradient pass only where a > 0, not a >= 0"),
                        ((a64 > 0).astype(np.float64), "multiply the mask by grad (the chain rule)"),
                        (g64 * np.maximum(a64, 0), "the local derivative is the mask (a > 0), "
                                                   "not relu(a) itself")])


# =========================================================================== unbroadcast

def _sum_to_oracle(g: np.ndarray, shape) -> np.ndarray:
    shape = tuple(shape)
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape)
                                      if d == 1 and g.shape[lead + i] != 1)
    return g.sum(axis=axes, keepdims=True).reshape(shape) if axes else g.reshape(shape)


def _unbroadcast_wrong(g: np.ndarray, shape) -> list:
    """Typical wrong answers for sum_to(g, shape), with the explanation of each."""
    shape = tuple(shape)
    lead = g.ndim - len(shape)
    ones = tuple(lead + i for i, d in enumerate(shape) if d == 1 and g.shape[lead + i] != 1)
    if lead == 0 and ones:
        out = [(g, f"the target has length 1 on axes {ones}, where grad is longer: broadcasting "
                   f"stretched those size-1 axes, so sum over them too and keep them with length "
                   f"1 (did you sum over the broadcast axis?)")]
    else:
        out = [(g, "the gradient was not summed: every broadcast copy of an input element sends "
                   "it a gradient, so sum over the broadcast axes (did you sum over the broadcast "
                   "axis?)")]
    if lead > 0:
        only_lead = g.sum(axis=tuple(range(lead)))
        if only_lead.shape != shape:
            out.append((only_lead, "you summed the new leading axes but not the axes where the "
                                   "input had length 1: sum those too, keeping them as size 1"))
        trailing = g.sum(axis=tuple(range(g.ndim - lead, g.ndim)))
        out.append((trailing, "summed over the wrong axes: broadcasting lines shapes up at the "
                              "RIGHT, so the new axes are the leading ones"))
    if ones:
        squeezed = g.sum(axis=tuple(range(lead)) + ones)
        if squeezed.shape != shape:
            out.append((squeezed, "summed over the right axes but dropped the size-1 axes: keep "
                                  "them (keepdim=True) or reshape to the target shape"))
    out.append((np.broadcast_to(g.sum(), shape) if shape else g.sum(),
                "you summed over every axis; only the broadcast axes need a sum"))
    return out


@check("02.unbroadcast", points=POINTS["02.unbroadcast"])
def check_unbroadcast(fn):
    gen = rng()
    cases = [
        (np.array([[1.0, 2.0], [0.5, 1.5], [0.3, 0.7]]), (2,)),   # the chapter's example: [1.8, 4.2]
        (np.ones((3, 2)), (2,)),
        (np.arange(6.0).reshape(2, 3), (2, 3)),                    # nothing to undo
        (np.arange(12.0).reshape(3, 4), (3, 1)),
        (np.arange(12.0).reshape(3, 4), (1, 4)),
        (np.arange(24.0).reshape(2, 3, 4), (3, 1)),
        (np.arange(6.0).reshape(2, 3), ()),                        # a scalar was broadcast
        (np.arange(9.0).reshape(3, 3), (3,)),                      # square: wrong axes give the right shape
        (np.arange(8.0).reshape(2, 2, 2), (2, 1)),
    ]
    for i in range(TRIALS):
        ndim = int(gen.integers(1, 4))
        target = [int(d) for d in gen.integers(1, 4, size=ndim)]
        big = [d if gen.random() < 0.5 else (d if d != 1 else int(gen.integers(2, 4))) for d in target]
        for k in range(ndim):
            if gen.random() < 0.3:
                target[k] = 1
        lead = [int(d) for d in gen.integers(2, 4, size=int(gen.integers(0, 3)))]
        g_shape = tuple(lead + big)
        target = tuple(t if t == b else 1 for t, b in zip(target, big))
        cases.append((_randn(gen, g_shape), target))
    for i, (g, shape) in enumerate(cases):
        dtype = np.float32 if i % 4 == 3 else np.float64
        g = g.astype(dtype)
        what = f"sum_to(grad of shape {_shape_text(g.shape)}, {_shape_text(shape)})"
        got = _call(fn, _tensor(g), shape, label=what)
        expected = _sum_to_oracle(g.astype(np.float64), shape)
        arr = _read(got, what, dtype=dtype)
        _compare(arr, expected, what, dtype, wrong=_unbroadcast_wrong(g.astype(np.float64), shape),
                 hint="sum over the new leading axes and over the axes where the target has "
                      "length 1, then reshape to the target shape")


# =========================================================================== reductions and shapes

def _keep_shape(shape, axes):
    return tuple(1 if i in axes else d for i, d in enumerate(shape))


def _reduction_cases(gen):
    cases = [((2, 3), (1,), False), ((2, 3), (0,), False), ((3, 3), (1,), False),
             ((3, 3), (0,), False), ((2, 3, 4), (0, 2), False), ((2, 3, 4), (1,), True),
             ((4, 4), (0, 1), False), ((2, 3), (0, 1), True), ((5,), (0,), False)]
    for _ in range(TRIALS):
        ndim = int(gen.integers(1, 4))
        shape = tuple(int(d) for d in gen.integers(1, 5, size=ndim))
        axes = tuple(sorted(int(a) for a in gen.choice(ndim, size=int(gen.integers(1, ndim + 1)),
                                                       replace=False)))
        cases.append((shape, axes, bool(gen.random() < 0.4)))
    return cases


def _reduction_call(fn, name, gen, shape, axes, keepdim, dtype):
    out_shape = _keep_shape(shape, axes) if keepdim else tuple(d for i, d in enumerate(shape)
                                                               if i not in axes)
    g = _randn(gen, out_shape, dtype)
    what = (f"{name}(grad of shape {_shape_text(out_shape)}, input_shape={_shape_text(shape)}, "
            f"axes={axes}, keepdim={keepdim})")
    hint = "" if keepdim else (" (with keepdim=False the reduced axes are gone from grad: put "
                               "them back as size-1 axes with reshape before expanding, else "
                               "grad is broadcast along the wrong axis)")
    got = _call(fn, _tensor(g), SizeSpec(shape), axes, keepdim, label=what, hint=hint)
    return g, what, got


def _reduction_wrong(g64, shape, axes, keepdim, n):
    kept = g64.reshape(_keep_shape(shape, axes))
    right = np.broadcast_to(kept, shape)
    out = [(g64, "the gradient must have the input's shape: broadcast grad back over the "
                 "reduced axes (grad.reshape(...).expand(input_shape))")]
    if not keepdim and g64.ndim >= 1:
        try:
            wrong_axis = np.broadcast_to(g64, shape)
            if not np.allclose(wrong_axis, right):
                out.append((wrong_axis, "grad was broadcast along the wrong axis: with "
                                        "keepdim=False, first put the reduced axes back as "
                                        "size-1 axes (reshape), then expand"))
        except ValueError:
            pass
    return out, right


@check("02.sum_vjp", points=POINTS["02.sum_vjp"])
def check_sum_vjp(fn):
    gen = rng()
    for i, (shape, axes, keepdim) in enumerate(_reduction_cases(gen)):
        dtype = np.float32 if i % 3 == 2 else np.float64
        g, what, got = _reduction_call(fn, "sum_vjp", gen, shape, axes, keepdim, dtype)
        n = math.prod(shape[a] for a in axes)
        wrong, right = _reduction_wrong(g.astype(np.float64), shape, axes, keepdim, n)
        wrong.append((right / n, "that is the gradient of mean; sum passes grad unchanged to "
                                 "every element it added up"))
        arr = _read(got, what, dtype=dtype)
        _compare(arr, right, what, dtype, wrong=wrong)


@check("02.mean_vjp", points=POINTS["02.mean_vjp"])
def check_mean_vjp(fn):
    gen = rng()
    cases = [c for c in _reduction_cases(gen) if math.prod(c[0][a] for a in c[1]) > 1]
    for i, (shape, axes, keepdim) in enumerate(cases):
        dtype = np.float32 if i % 3 == 2 else np.float64
        g, what, got = _reduction_call(fn, "mean_vjp", gen, shape, axes, keepdim, dtype)
        n = math.prod(shape[a] for a in axes)
        wrong, right = _reduction_wrong(g.astype(np.float64), shape, axes, keepdim, n)
        wrong = [(w / n, why) for w, why in wrong] + wrong[:1]
        wrong.append((right, "scale by 1/n: each element contributed 1/n of the mean"))
        total = math.prod(shape)
        if total != n:
            wrong.append((right * n / total, f"n is the number of elements averaged ({n}, the "
                                             f"product of the reduced axes' lengths), not the "
                                             f"input's numel ({total})"))
        arr = _read(got, what, dtype=dtype)
        _compare(arr, right / n, what, dtype, wrong=wrong)


@check("02.reshape_vjp", points=POINTS["02.reshape_vjp"])
def check_reshape_vjp(fn):
    gen = rng()
    cases = [((2, 3), (6,)), ((6,), (3, 2)), ((2, 3, 4), (4, 6)), ((1, 5), (5,)), ((), (1,))]
    for _ in range(6):
        shape = tuple(int(d) for d in gen.integers(1, 5, size=int(gen.integers(1, 4))))
        cases.append((shape, (math.prod(shape),)))
    for in_shape, out_shape in cases:
        g = _randn(gen, out_shape)
        what = f"reshape_vjp(grad of shape {_shape_text(out_shape)}, input_shape={_shape_text(in_shape)})"
        arr = _read(_call(fn, _tensor(g), SizeSpec(in_shape), label=what), what,
                    shape=in_shape, dtype=np.float64,
                    hint_shape="the gradient of an input has that input's shape: reshape grad "
                               "back to input_shape")
        _compare(arr, g.reshape(in_shape), what, np.float64)


def _inverse(axes):
    inv = [0] * len(axes)
    for i, a in enumerate(axes):
        inv[a] = i
    return tuple(inv)


@check("02.permute_vjp", points=POINTS["02.permute_vjp"])
def check_permute_vjp(fn):
    gen = rng()
    perms = [(1, 0), (1, 2, 0), (2, 0, 1), (0, 2, 1), (3, 1, 0, 2), (0,)]
    for _ in range(6):
        nd = int(gen.integers(2, 5))
        perms.append(tuple(int(a) for a in gen.permutation(nd)))
    for k, axes in enumerate(perms):
        # distinct lengths make a wrong permutation visible in the shape; equal lengths in the values
        in_shape = tuple(range(2, 2 + len(axes))) if k % 2 == 0 else (3,) * len(axes)
        x = _randn(gen, in_shape)
        g = _randn(gen, np.transpose(x, axes).shape)
        what = (f"permute_vjp(grad of shape {_shape_text(g.shape)}, axes={axes}) for an input "
                f"of shape {_shape_text(in_shape)}")
        arr = _read(_call(fn, _tensor(g), axes, label=what), what, dtype=np.float64)
        expected = np.transpose(g, _inverse(axes))
        wrong = [(np.transpose(g, axes), "you applied the same permutation again; the gradient "
                                         "needs the INVERSE permutation (inverse[axes[i]] = i)")]
        if len(axes) > 1:
            wrong.append((np.transpose(g, tuple(reversed(range(len(axes))))),
                          "reversing every axis (.T) is the inverse only for 2-D; invert the "
                          "permutation instead"))
        _compare(arr, expected, what, np.float64, wrong=wrong)


def _T(x):
    return np.swapaxes(x, -1, -2)


def _mm(x, y):
    """x @ y, or None where the shapes don't fit (a candidate wrong answer that can't happen)."""
    try:
        return np.matmul(x, y)
    except ValueError:
        return None


@check("02.matmul_vjp", points=POINTS["02.matmul_vjp"])
def check_matmul_vjp(fn):
    gen = rng()
    shapes = [((3, 3), (3, 3)),            # square first: wrong transposes still give right shapes
              ((4, 4), (4, 4)),
              ((2, 3), (3, 4)),
              ((5, 2), (2, 3)),
              ((2, 3, 3), (2, 3, 3)),      # batched, square matrices
              ((2, 3, 4), (2, 4, 5)),      # batched
              ((2, 3, 4), (4, 2)),         # batch broadcast: the caller sums grad_b over it
              ((3, 2, 2), (3, 2, 2))]
    for i in range(4):
        m, k, n = (int(v) for v in gen.integers(1, 6, size=3))
        batch = tuple(int(v) for v in gen.integers(1, 4, size=int(gen.integers(0, 2))))
        shapes.append((batch + (m, k), batch + (k, n)))
    for i, (a_shape, b_shape) in enumerate(shapes):
        dtype = np.float32 if i % 4 == 3 else np.float64
        a, b = _randn(gen, a_shape, dtype), _randn(gen, b_shape, dtype)
        g = _randn(gen, np.matmul(a, b).shape, dtype)
        what = f"matmul_vjp(grad, a, b) with a of shape {_shape_text(a_shape)}, b of shape {_shape_text(b_shape)}"
        hint = (" (for batched operands transpose only the last two axes, transpose(-1, -2): "
                ".T reverses EVERY axis, the batch axes too)") if len(a_shape) > 2 else ""
        got = _pair(_call(fn, _tensor(g), _tensor(a), _tensor(b), label=what, hint=hint), what)
        g64, a64, b64 = (v.astype(np.float64) for v in (g, a, b))
        exp_a, exp_b = g64 @ _T(b64), _T(a64) @ g64
        wrong_a = [(_mm(g64, b64), "grad_a = grad @ bᵀ: transpose b (the last two axes)"),
                   (_mm(_T(b64), g64), "grad_a = grad @ bᵀ: the order of the factors matters"),
                   (_mm(b64, _T(g64)), "grad_a = grad @ bᵀ, not its transpose"),
                   (_T(exp_a), "grad_a is transposed: it must have a's shape, grad_a = grad @ bᵀ"),
                   (exp_b, "the two gradients are swapped: return (grad_a, grad_b) in that order")]
        wrong_b = [(_mm(a64, g64), "grad_b = aᵀ @ grad: transpose a (the last two axes)"),
                   (_mm(g64, _T(a64)), "grad_b = aᵀ @ grad: the order of the factors matters"),
                   (_T(exp_b), "grad_b is transposed: it must have b's shape, grad_b = aᵀ @ grad")]
        if len(a_shape) > 2:
            why = ".T reverses EVERY axis, the batch axes too: use transpose(-1, -2)"
            wrong_a.append((_mm(g64, np.transpose(b64)), why))
            wrong_b.append((_mm(np.transpose(a64), g64), why))
        wrong_a = [(w, why) for w, why in wrong_a if w is not None]
        wrong_b = [(w, why) for w, why in wrong_b if w is not None]
        ga = _read(got[0], f"{what}: grad_a", dtype=dtype)
        _compare(ga, exp_a, f"{what}: grad_a", dtype, wrong=wrong_a,
                 hint="for C = A @ B, dA = dC @ Bᵀ (a's shape)")
        gb = _read(got[1], f"{what}: grad_b", dtype=dtype)
        expected_b = exp_b
        if gb.shape != exp_b.shape:
            summed = _sum_to_oracle(exp_b, b64.shape)
            if gb.shape == summed.shape and _close(gb, summed, dtype):
                continue  # the student already summed the broadcast batch axis: also correct
        _compare(gb, expected_b, f"{what}: grad_b", dtype, wrong=wrong_b,
                 hint="for C = A @ B, dB = Aᵀ @ dC (b's shape)")


# =========================================================================== the engine

def _check_order(got: dict, names: list, edges: list, what: str) -> None:
    """``got``: the scenario's record of the student's order (labels of the nodes);
    ``names`` and ``edges``: the graph, from the reference run in this process."""
    if "raised" in got:
        rec = got["raised"]
        if type(rec) is ExceptionRecord and rec.not_implemented:
            raise raised_as_failure(StudentRaised(rec), what)
        if got.get("recursion"):
            fail(f"{what} raised RecursionError: a recursive depth-first search makes one nested "
                 f"Python call per node and hits the recursion limit (about 1,000); keep your own "
                 f"stack (a list) of nodes to visit instead of recursing")
        fail(f"{what} raised {rec.text() if type(rec) is ExceptionRecord else describe(rec)}")
    if got.get("kind") != "list":
        fail(f"{what} should return a list of nodes, got {describe(got.get('value'))}")
    order = got["order"]
    pos = {}
    for i, label in enumerate(order):
        if type(label) is not int or not 0 <= label < len(names):
            thing = got.get("strangers", {}).get(str(i), "something else")
            fail(f"{what}: item {i} of the result is {thing}, which is not a node of the "
                 f"graph: return the Node objects themselves (root, its next_functions, ...)")
        if label in pos:
            fail(f"{what}: node {names[label]} appears twice (positions {pos[label]} and {i}); "
                 f"mark nodes as visited so each is listed once, however many paths lead to it")
        pos[label] = i
    missing = [names[k] for k in range(len(names)) if k not in pos]
    if missing:
        fail(f"{what}: {len(missing)} of the {len(names)} reachable nodes are missing "
             f"({', '.join(sorted(set(missing)))}); follow next_functions all the way down to "
             f"the leaves' AccumulateGrad nodes")
    bad = [(p, c) for p, c in edges if pos[p] > pos[c]]
    if bad:
        if len(bad) == len(edges):
            fail(f"{what}: the order is reversed: every node comes after the nodes it sends "
                 f"gradients to (leaves first). The backward pass starts at the output: reverse "
                 f"your post-order so the roots come first")
        p, c = bad[0]
        fail(f"{what}: wrong topological order: {names[c]} (position {pos[c]}) is listed "
             f"before {names[p]} (position {pos[p]}), which sends it a gradient, so "
             f"{names[c]} would run before its gradient is complete. A node must come after "
             f"every node that feeds it: use the reverse post-order of a depth-first search "
             f"(a breadth-first or pre-order listing is not enough)")


@check("02.toposort", points=POINTS["02.toposort"])
def check_toposort(fn):
    seed = int(rng().integers(0, 2**31))
    got_graphs = fn.scenario("toposort_graphs", seed=seed)
    want_graphs = fn.expected("toposort_graphs", seed=seed)
    if type(got_graphs) is not list or len(got_graphs) != len(want_graphs):
        fail("topological_order: the grader's graphs could not be built next to your code")
    for got, want in zip(got_graphs, want_graphs):
        _check_order(got, want["names"], want["edges"], f"topological_order on {want['desc']}")
    # deep: a chain of 10,000 operations
    got = fn.scenario("toposort_chain", length=10_000)
    want = fn.expected("toposort_chain", length=10_000)
    _check_order(got, want["names"], want["edges"], "topological_order on a chain of 10,000 additions")


@check("02.seed_gradient", points=POINTS["02.seed_gradient"])
def check_seed_gradient(fn):
    gen = rng()
    for shape, dtype in [((), np.float32), ((), np.float64), ((1,), np.float32), ((1, 1), np.float64)]:
        out = _tensor(np.full(shape, gen.uniform(-3, 3)).astype(dtype), requires_grad=True)
        what = f"seed_gradient(output of shape {_shape_text(shape)} {np.dtype(dtype)}, None)"
        got = _call(fn, out, None, label=what)
        if type(got) in (int, float):
            fail(f"{what} should return a mini Tensor shaped like the output, got the number "
                 f"{got!r}: use mini.ones_like(output)")
        got = _read(got, what, shape=shape, dtype=dtype,
                    hint_shape="the seed has the output's shape (mini.ones_like(output))")
        if not np.array_equal(got, np.ones(shape)):
            if np.all(got == 0):
                fail(f"{what}: expected a seed of ones, got zeros: the backward pass starts "
                     f"from d out / d out = 1 (a seed of zeros makes every gradient zero)")
            fail(f"{what}: expected {_show(np.ones(shape, dtype))}, got {_show(got)}: the seed of "
                 f"a scalar output is d out / d out = 1")
    for shape in [(2, 3), (3,)]:
        out = _tensor(_randn(gen, shape), requires_grad=True)
        _expect_raises(RuntimeError, fn, out, None,
                       label=f"seed_gradient(output of shape {_shape_text(shape)}, None)",
                       hint=f"an output of shape {shape} has no implicit gradient: only a scalar "
                           f"(one-element) output may omit it; raise RuntimeError for a non-scalar")
    for shape in [(2, 3), (), (4,)]:
        out = _tensor(_randn(gen, shape), requires_grad=True)
        g = _randn(gen, shape)
        what = f"seed_gradient(output of shape {_shape_text(shape)}, gradient of the same shape)"
        got = _read(_call(fn, out, _tensor(g), label=what), what, shape=shape,
                    dtype=np.float64)
        _compare(got, g, what, np.float64,
                 wrong=[(np.ones(shape), "when the caller passes a gradient, that gradient is the "
                                         "seed: return it instead of ones")])
    out = _tensor(_randn(gen, (2, 3)), requires_grad=True)
    _expect_raises(RuntimeError, fn, out, _tensor(_randn(gen, (3, 2))),
                   label="seed_gradient(output of shape (2, 3), gradient of shape (3, 2))",
                   hint="a gradient of shape (3, 2) for an output of shape (2, 3) must raise "
                       "RuntimeError naming both shapes")


def _scenario(fn, name: str, what: str, **params):
    """``fn.scenario(name, ...)``; what the student's code raised becomes a failure naming
    ``what`` (a stub: not implemented)."""
    try:
        return fn.scenario(name, **params)
    except StudentRaised as e:
        raise raised_as_failure(e, what) from None


@check("02.accumulate_grad", points=POINTS["02.accumulate_grad"])
def check_accumulate_grad(fn):
    gen = rng()
    with part("direct calls", 2):
        for shape, dtype in [((3,), np.float64), ((2, 2), np.float32), ((), np.float64)]:
            grads = [_randn(gen, shape, dtype) for _ in range(3)]
            what = (f"accumulate_grad(leaf, grad) called 3 times on a leaf of shape "
                    f"{_shape_text(shape)}")
            obs = _scenario(fn, "accumulate_calls", what, leaf=_randn(gen, shape, dtype), grads=grads)
            total = np.zeros(shape)
            for k, (g, after) in enumerate(zip(grads, obs["after"])):
                total = total + g
                step = (f"after {k + 1} call{'s' if k else ''} of accumulate_grad(leaf, grad) on "
                        f"a leaf of shape {_shape_text(shape)}")
                arr = _read(after, f"{step}: leaf.grad", shape=shape, dtype=dtype)
                wrong = [(g, "gradients accumulate: add into leaf.grad instead of replacing it "
                             "(that is why optimizers call zero_grad() before each backward)")] if k else []
                _compare(arr, total, f"{step}: leaf.grad", dtype, wrong=wrong)
    with part("inside mini's backward", 1):
        x0 = _randn(gen, (3,))
        what = "two backward passes of (x*x).sum() through mini with your accumulate_grad"
        obs = _scenario(fn, "accumulate_in_mini", what, x0=x0)
        arr = _read(obs["grad"], "x.grad after two backward passes of (x*x).sum()", shape=(3,),
                    dtype=np.float64)
        _compare(arr, 4 * x0, "x.grad after two backward passes of (x*x).sum() (2·2x)", np.float64,
                 wrong=[(2 * x0, "gradients accumulate across backward calls: the second pass "
                                 "must add to the first, not overwrite it")])


# --- 02.backward: the loop, watched on fake nodes -------------------------------------------

_BACKWARD_CASES = [
    ("a chain out -> h -> x",
     {"out": [("h", 3.0)], "h": [("x", 2.0)], "x": []},
     ["out", "h", "x"], {"out": 1.0}),
    ("a tensor used by two operations (out = h*h' where both use x)",
     {"out": [("a", 2.0), ("b", 3.0)], "a": [("x", 1.0)], "b": [("x", 1.0)], "x": []},
     ["out", "a", "b", "x"], {"out": 1.0}),
    ("an add node handing ONE gradient object to two inputs, one of which also gets a second gradient",
     {"out": [("b", 1.0), ("leaf", 1.0), ("c", 1.0)], "c": [("b", 5.0)], "b": [("x", 2.0)],
      "leaf": [], "x": []},
     ["out", "c", "b", "leaf", "x"], {"out": [1.0, 2.0]}),
    ("edges with no child (None) and edges with no gradient (None)",
     {"out": [(None, 4.0), ("a", 2.0), ("dead", None)], "a": [("x", 3.0), (None, None)],
      "dead": [("x", 7.0)], "x": []},
     ["out", "a", "dead", "x"], {"out": 1.0}),
    ("two seeded outputs sharing a subgraph",
     {"r1": [("s", 2.0)], "r2": [("s", -1.0), ("x", 4.0)], "s": [("x", 0.5)], "x": []},
     ["r1", "r2", "s", "x"], {"r1": [1.0, 1.0], "r2": [0.5, 2.0]}),
]


def _expected_run(spec, order, seeds, keep: str = "sum", stop_at: str | None = None):
    """Trusted propagation over the fake graph: [(label, gradient)] in the order nodes run.
    ``keep="last"`` / ``"first"`` model a loop that overwrites instead of adding; with
    ``stop_at`` only what that node receives."""
    grads = {label: np.atleast_1d(np.array(g, dtype=np.float64)) for label, g in seeds.items()}
    runs = []
    for label in order:
        g = grads.pop(label, None)
        if g is None:
            continue
        if stop_at == label:
            return [(label, g)]
        runs.append((label, g))
        for child, k in spec[label]:
            if child is None or k is None:
                continue
            if keep == "sum":
                grads[child] = grads[child] + k * g if child in grads else k * g
            elif keep == "last" or child not in grads:
                grads[child] = k * g
    return runs if stop_at is None else []


def _check_fake(fn, desc, spec, order, seeds, retain_graph) -> None:
    what = f"propagate(order, grads, run_node, retain_graph={retain_graph}) on {desc}"
    obs = _scenario(fn, "propagate_fake", what, spec=spec, order=order, seeds=seeds,
                    retain_graph=retain_graph, same_object="out" if "leaf" in spec else None)
    if obs["problems"]:
        fail(f"{what}: {obs['problems'][0]}")
    if obs["raised"] is not None:
        rec = obs["raised"]
        fail(f"{what} raised {rec.text() if type(rec) is ExceptionRecord else describe(rec)}")
    calls = [(c[0], c[1], c[2]) for c in obs["calls"]]
    expected = _expected_run(spec, order, seeds)
    got_labels = [label for label, _, _ in calls]
    exp_labels = [label for label, _ in expected]
    if "dead" in got_labels and "dead" not in exp_labels:
        fail(f"{what}: run_node was called for node 'dead', which received no gradient (its "
             f"only parent returned None for it): skip a node that has no entry in grads")
    seen = set()
    for label in got_labels:
        if label in seen:
            fail(f"{what}: node {label!r} was run twice; run each node once, with the SUM of the "
                 f"gradients that reached it (accumulate into grads, then run it when its turn "
                 f"in `order` comes)")
        seen.add(label)
    if set(got_labels) != set(exp_labels):
        missing = [label for label in exp_labels if label not in seen]
        fail(f"{what}: nodes {missing} were never run although gradients reached them: after "
             f"running a node, add each returned gradient into grads under id(child), and walk "
             f"the whole `order`")
    if got_labels != exp_labels:
        fail(f"{what}: nodes ran in the order {got_labels}, expected {exp_labels}: follow `order`")
    for (label, g, released_before), (_, exp) in zip(calls, expected):
        if type(g) is not np.ndarray or g.shape != exp.shape or not np.allclose(g, exp):
            hint = ("when a tensor feeds several operations, ADD the gradients that reach it "
                    "(grads[key] = grads[key] + g): assigning overwrites the earlier one")
            if label == "leaf":
                hint = ("did you add in place (+=) into a gradient object? add's rule hands the "
                        "SAME tensor to both of its inputs, so an in-place sum also changes the "
                        "other input's gradient: write grads[key] = grads[key] + g")
            else:
                one_path = [g1 for keep in ("last", "first")
                            for _, g1 in _expected_run(spec, order, seeds, keep, stop_at=label)]
                if type(g) is np.ndarray and any(g.shape == p.shape and np.allclose(g, p)
                                                 for p in one_path):
                    hint = ("gradient overwritten instead of accumulated: this node is reached "
                            "along several paths and received only one of them; add each new "
                            "gradient to what grads already holds for the node")
            fail(f"{what}: node {label!r} received the gradient {_show(np.asarray(g))}, expected "
                 f"{_show(exp)}; {hint}")
        if released_before:
            fail(f"{what}: node {label!r} was released before run_node ran it: its backward "
                 f"still needs its saved tensors; call node.release() after run_node(node, grad)")
    released = obs["released"]
    for label in order:
        if label not in seen:
            continue
        n = released.get(label, 0)
        if retain_graph and n:
            fail(f"{what}: node {label!r} was released although retain_graph=True: keep the saved "
                 f"tensors so that backward can run through the graph again")
        if not retain_graph and n != 1:
            if n == 0:
                fail(f"{what}: node {label!r} was never released: saved tensors never released "
                     f"keep the whole graph's activations in memory; call node.release() after "
                     f"running each node unless retain_graph")
            fail(f"{what}: node {label!r} was released {n} times; once is enough")


@check("02.backward", points=POINTS["02.backward"])
def check_backward(fn):
    with part("the backward loop", 7):
        for desc, spec, order_labels, seeds in _BACKWARD_CASES:
            for retain in (False, True):
                _check_fake(fn, desc, spec, order_labels, seeds, retain)
    with part("inside mini's backward", 3):
        gen = rng()
        x0, w0 = _randn(gen, (4, 3)), _randn(gen, (3, 2))
        what = "backward through mini with your propagate"
        obs = _scenario(fn, "backward_in_mini", what, x0=x0, w0=w0)
        for key, label in (("toy", "the toy network y = w2*(w1*x) at (x, w1, w2) = (1, 2, 3)"),
                           ("reused", "loss = (h*h).sum() + h.sum() + (2*h).sum() with h = x @ w")):
            if f"{key}_raised" in obs:
                rec = obs[f"{key}_raised"]
                fail(f"{label}: backward through mini with your propagate raised "
                     f"{rec.text() if type(rec) is ExceptionRecord else describe(rec)}")
        dh = 2 * (x0 @ w0) + 1 + 2
        cases = [("toy", ["x", "w1", "w2"], [6.0, 3.0, 2.0],
                  "the toy network y = w2*(w1*x) at (x, w1, w2) = (1, 2, 3)"),
                 ("reused", ["x", "w"], [dh @ w0.T, x0.T @ dh],
                  "loss = (h*h).sum() + h.sum() + (2*h).sum() with h = x @ w")]
        for key, names, wants, label in cases:
            for name, got, exp in zip(names, obs[key], wants):
                arr = _read(got, f"{label}: {name}.grad", shape=np.shape(exp), dtype=np.float64)
                _compare(arr, exp, f"{label}: {name}.grad", np.float64,
                         hint="gradients arriving at a node along several paths must be added")
        if "retain_raised" in obs:
            rec = obs["retain_raised"]
            fail(f"backward(retain_graph=True) then backward() through mini with your propagate "
                 f"raised {rec.text() if type(rec) is ExceptionRecord else describe(rec)}: with "
                 f"retain_graph=True do not release nodes")
        before, kept, after = obs["bytes"]
        if kept != before:
            fail(f"after backward(retain_graph=True) the graph holds {kept} bytes of saved tensors, "
                 f"expected {before}: with retain_graph=True nothing is released")
        if after != 0:
            fail(f"after backward() the graph still holds {after} bytes of saved tensors: saved "
                 f"tensors never released; call node.release() after running each node")
        arr = _read(obs["twice"], "x.grad after two backward passes", shape=x0.shape,
                    dtype=np.float64)
        _compare(arr, 2 * (np.exp(x0) * (1 + x0)), "x.grad after two backward passes of "
                 "(x.exp() * x).sum()", np.float64)


# =========================================================================== custom Function

@check("02.multiply_add", points=POINTS["02.multiply_add"])
def check_multiply_add(cls):
    gen = rng()
    cases = [[2.0, 3.0, 1.0, 1.0]]                                # the chapter's example
    for shape in [(3,), (2, 4)]:
        cases.append([_randn(gen, shape) for _ in range(4)])
    version = [_randn(gen, (3,)) for _ in range(3)]
    obs = _scenario(cls, "multiply_add", "MultiplyAdd", cases=cases, version=version)
    if "not_a_function" in obs:
        fail(f"MultiplyAdd should be a class derived from mini.autograd.Function, got "
             f"{describe(obs['not_a_function'])}")
    for i, (rec, (xs, ys, zs, gs)) in enumerate(zip(obs["cases"], cases)):
        xs, ys, zs, gs = (np.asarray(v, dtype=np.float64) for v in (xs, ys, zs, gs))
        shape = xs.shape
        label = "MultiplyAdd.apply(2, 3, 1)" if i == 0 else f"MultiplyAdd.apply on tensors of shape {shape}"
        if "apply_raised" in rec:
            err = rec["apply_raised"]
            fail(f"MultiplyAdd.apply(x, y, z) raised "
                 f"{err.text() if type(err) is ExceptionRecord else describe(err)}")
        val = _read(rec["out"], label if i else "MultiplyAdd.apply(2, 3, 1)", shape=shape,
                    dtype=np.float64)
        if i == 0 and float(val) != 7.0:
            fail(f"MultiplyAdd.apply(2, 3, 1): expected 2*3 + 1 = 7, got {float(val):g}")
        _compare(val, xs * ys + zs, label, np.float64)
        if not rec["has_grad_fn"]:
            fail("MultiplyAdd.apply(x, y, z) on inputs that require grad returned a tensor without "
                 "grad_fn: return a new tensor computed in forward (x * y + z)")
        if not rec["saved_count"]:
            fail("MultiplyAdd's forward saved nothing with ctx.save_for_backward: save x and y with "
                 "ctx.save_for_backward(x, y) (not as ctx attributes), so that mini can check their "
                 "version and free them after backward")
        if not all(rec["saved_xy"]):
            fail("MultiplyAdd's forward must save both x and y with ctx.save_for_backward(x, y): "
                 "backward needs y for x's gradient and x for y's")
        if "backward_raised" in rec:
            err = rec["backward_raised"]
            fail(f"backward through MultiplyAdd raised "
                 f"{err.text() if type(err) is ExceptionRecord else describe(err)}")
        grads = rec["grads"]
        if type(grads) is not list or len(grads) != 3 or any(g is None for g in grads):
            fail(f"after {label}, backward must return one gradient per input of forward "
                 f"(x, y, z), got {describe(grads)}")
        got = [_read(g, f"{n}'s gradient", shape=shape, dtype=np.float64)
               for n, g in zip("xyz", grads)]
        if i == 0:
            got0 = [float(g) for g in got]
            if got0 != [3.0, 2.0, 1.0]:
                hint = ""
                if got0 == [2.0, 3.0, 1.0]:
                    hint = ": x's gradient is grad * y and y's is grad * x (the other factor)"
                fail(f"MultiplyAdd(2, 3, 1): expected gradients (x, y, z) = (3, 2, 1), got "
                     f"({got0[0]:g}, {got0[1]:g}, {got0[2]:g}){hint}")
            continue
        for name, g, exp in (("x", got[0], gs * ys), ("y", got[1], gs * xs), ("z", got[2], gs)):
            _compare(g, exp, f"MultiplyAdd on shape {shape} with upstream gradient g: {name}.grad",
                     np.float64, hint="multiply the incoming gradient by each local derivative")
    version_seen = obs["version"]
    if type(version_seen) is ExceptionRecord:
        if version_seen.is_a("RuntimeError") and not version_seen.not_implemented:
            return
        if version_seen.not_implemented:
            raise raised_as_failure(StudentRaised(version_seen), "MultiplyAdd")
        fail(f"backward through MultiplyAdd after an in-place write to a saved input raised "
             f"{version_seen.text()} instead of RuntimeError")
    fail("an in-place write to x after MultiplyAdd's forward went unnoticed: read x and y "
         "back with `x, y = ctx.saved_tensors` in backward (that is where mini checks their "
         "version counters), not from ctx attributes")


# =========================================================================== forward mode

@check("02.mul_jvp", points=POINTS["02.mul_jvp"])
def check_mul_jvp(fn):
    gen = rng()
    cases = [(2.0, 5.0, 1.0, 0.0)]
    for i in range(TRIALS):
        shape = tuple(int(d) for d in gen.integers(1, 5, size=int(gen.integers(0, 3))))
        cases.append(tuple(_randn(gen, shape) for _ in range(4)))
    for i, (a, b, ta, tb) in enumerate(cases):
        a, b, ta, tb = (np.asarray(v, dtype=np.float64) for v in (a, b, ta, tb))
        kind = i % 4 if i else 0
        use_ta, use_tb = {0: (True, True), 1: (True, True), 2: (True, False), 3: (False, True)}[kind]
        b_number = (i % 5 == 4)
        b_arg = float(b.reshape(-1)[0]) if b_number else _tensor(b)
        b_val = np.full(a.shape, float(b.reshape(-1)[0])) if b_number else b
        if b_number:
            use_tb = False
            use_ta = True
        args = (_tensor(a), b_arg, _tensor(ta) if use_ta else None, _tensor(tb) if use_tb else None)
        what = (f"mul_jvp(a, b, tangent_a, tangent_b) with a of shape {_shape_text(a.shape)}"
                f"{', b a number' if b_number else ''}"
                f"{'' if use_ta else ', tangent_a=None'}{'' if use_tb else ', tangent_b=None'}")
        got = _call(fn, *args, label=what)
        ta_v = ta if use_ta else np.zeros_like(a)
        tb_v = tb if use_tb else np.zeros_like(a)
        expected = ta_v * b_val + a * tb_v
        arr = _read(got, what, dtype=np.float64)
        wrong = [(ta_v * tb_v, "the product rule: d(a*b) = da*b + a*db, not da*db"),
                 (ta_v * b_val, "the product rule has two terms: tangent_a * b + a * tangent_b "
                                "(the second is missing)"),
                 (a * tb_v, "the product rule has two terms: tangent_a * b + a * tangent_b "
                            "(the first is missing)"),
                 (ta_v * a + b_val * tb_v, "each tangent is multiplied by the OTHER factor: "
                                           "tangent_a * b + a * tangent_b")]
        _compare(arr, expected, what, np.float64, wrong=wrong,
                 hint="the product rule: tangent_a * b + a * tangent_b (a None tangent is zero)")


# =========================================================================== gradcheck

def _test_functions():
    """(description, name of the scenario's function, f, analytic Jacobian (n, m))."""
    from grader.worker.scenarios.ch02 import TEST_FUNCTIONS as F

    def j1(x):
        n = x.size
        J = np.zeros((n, 2))
        J[:, 0] = np.cos(x) * x + np.sin(x)
        J[0, 1] += x[1] if n > 1 else 1.0
        if n > 1:
            J[1, 1] += x[0]
        J[-1, 1] += 0.5 * np.exp(0.5 * x[-1])
        return J

    def j2(x):
        return np.diag(2.0 * np.exp(2.0 * x) + 3 * x ** 2)

    def j3(x):
        return (3.0 * np.sqrt(np.sum(x ** 2)) * x).reshape(-1, 1)

    return [("f(x) = [sum(sin(x)·x), x0·x1 + exp(x[-1]/2)]", "sum_sin", F["sum_sin"], j1),
            ("f(x) = exp(2x) + x³ (elementwise)", "exp_cube", F["exp_cube"], j2),
            ("f(x) = [|x|³]", "norm_cubed", F["norm_cubed"], j3)]


@check("02.central_difference", points=POINTS["02.central_difference"])
def check_central_difference(fn):
    gen = rng()
    cases, meta = [], []
    for desc, name, f, jac in _test_functions():
        for n in (1, 3, 5):
            if name == "sum_sin" and n == 1:
                continue
            x = gen.uniform(0.3, 1.2, size=n)
            for eps in (1e-3, 1e-6):
                cases.append([name, x, eps])
                meta.append((desc, f, jac, n, x, eps))
    obs = _scenario(fn, "central_difference", "central_difference(f, x, eps)", cases=cases)
    for rec, (desc, f, jac, n, x, eps) in zip(obs, meta):
        what = f"central_difference(f, x, eps={eps:g}) for {desc} at x of shape ({n},)"
        if "raised" in rec:
            err = rec["raised"]
            fail(f"{what} raised {err.text() if type(err) is ExceptionRecord else describe(err)}")
        seen, got = rec["seen"], rec["got"]
        if seen["type"] is not None:
            fail(f"{what}: f was called with {seen['type']}; pass a 1-D float64 numpy "
                 f"array of shape ({n},)")
        if seen["dtype"] is not None:
            fail(f"{what}: f received a {seen['dtype']} array: gradcheck in float32 "
                 f"(or any low precision) is swamped by rounding (about 1e-7·|f|/eps); "
                 f"keep x ± eps in float64")
        if seen["shape"] is not None:
            fail(f"{what}: f received an array of shape {tuple(seen['shape'])}; pass x ± eps·e_j "
                 f"with x's shape ({n},)")
        m = f(x).size
        if type(got) is not np.ndarray:
            fail(f"{what} should return a numpy array of shape ({n}, {m}), got {describe(got)}")
        if got.shape != (n, m):
            hint = ""
            if got.shape == (m, n):
                hint = ": row j holds the derivatives with respect to x[j] (shape (n, m)), not the transpose"
            fail(f"{what} has shape {got.shape}, expected ({n}, {m}){hint}")
        if got.dtype != np.float64:
            fail(f"{what} has dtype {got.dtype}, expected float64: gradcheck in float32 "
                 f"cannot resolve the differences")
        central = np.zeros((n, m))
        forward = np.zeros((n, m))
        backward = np.zeros((n, m))
        fx = f(x)
        for j in range(n):
            e = np.zeros(n)
            e[j] = eps
            central[j] = (f(x + e) - f(x - e)) / (2 * eps)
            forward[j] = (f(x + e) - fx) / eps
            backward[j] = (fx - f(x - e)) / eps
        if eps == 1e-3:
            if np.allclose(got, central, rtol=1e-7, atol=1e-9):
                continue
            for cand, why in ((forward, "your numbers match a one-sided difference "
                                        "(f(x + eps) - f(x)) / eps, whose error shrinks "
                                        "only like eps; use the central difference "
                                        "(f(x + eps) - f(x - eps)) / (2·eps)"),
                              (backward, "your numbers match a one-sided difference "
                                         "(f(x) - f(x - eps)) / eps; use the central "
                                         "difference (f(x + eps) - f(x - eps)) / (2·eps)"),
                              (central * 2, "divide by 2·eps: the two points are 2·eps apart"),
                              (central.T.reshape(n, m) if n == m else None,
                               "row j must hold the derivatives with respect to x[j]")):
                if cand is not None and np.allclose(got, cand, rtol=1e-6, atol=1e-9):
                    fail(f"{what}: {why}")
            _compare(got, central, what, np.float64,
                     hint="row j is (f(x + eps·e_j) - f(x - eps·e_j)) / (2·eps)")
        elif not np.allclose(got, jac(x), rtol=1e-5, atol=1e-6):
            _compare(got, jac(x), f"{what} (compared with the exact Jacobian)",
                     np.float64, hint="row j is (f(x + eps·e_j) - f(x - eps·e_j)) / (2·eps)")


# =========================================================================== self-check questions

@check("02.quiz_accumulate", points=POINTS["02.quiz_accumulate"])
def check_quiz_accumulate(fn):
    what = "your answer (w.grad after three backward passes without zero_grad)"
    got = expect_float(call(fn, name="answer"), what)
    if math.isclose(got, 1.5, rel_tol=1e-9):
        return
    hints = {0.5: "each backward ADDS its gradient into w.grad; nothing resets it between calls",
             0.0: "backward never zeroes .grad; only zero_grad() (or w.grad = None) does",
             4.5: "each pass contributes d loss / dw = 0.5 once"}
    fail(f"{what}: not {got:g}; {hints.get(got, 'add up what each backward call contributes')}")


@check("02.quiz_inplace", points=POINTS["02.quiz_inplace"])
def check_quiz_inplace(fn):
    expect_choice(fn, "your answer to the question about y.mul_(2)", "B", {
        "A": "mini never computes a silently wrong gradient here: the version counter of y's "
             "buffer moved after sigmoid saved it, and backward checks it",
        "C": "mul_ itself is recorded, but sigmoid's backward needs the ORIGINAL y, which mul_ "
             "overwrote: that is what the version counter catches",
        "D": "x is a leaf, but nothing writes into x; the write goes into y, which sigmoid saved",
    })


@check("02.quiz_eval", points=POINTS["02.quiz_eval"])
def check_quiz_eval(fn):
    expect_choice(fn, "your answer to the question about eval() and no_grad()", "C", {
        "A": "eval() only flips the modules' training flag (dropout, batch norm); operations "
             "still record a graph and save tensors",
        "B": "no_grad() does not touch the modules' training flag; it stops graph recording",
        "D": "they are not the same: one changes how layers compute, the other whether a graph "
             "is recorded",
    })
