"""Strict helpers for checks: call the student's implementation, convert what came back
into plain values of exact type, and compare.

What a check receives from the student is already plain data decoded by the trusted side
(:mod:`grader.worker.codec`): builtin values, numpy arrays and scalars, and records for
tensors, exceptions and any other object.  Every ``expect_*`` function still accepts only
exact types (``type(x) is int``, ``type(x) is tuple``, ``type(x) is np.ndarray``), so a
record of an object the student made (one whose ``__eq__`` always returns True, an ``int``
subclass) fails with a message naming what came back.  The same helpers work on live values
(nothing here calls a method of a value: not ``__eq__``, ``__repr__``, ``__str__``,
``__len__``).

Typical check::

    got = expect_tuple_of_ints(call(fn, shape, name="compact_strides"), f"compact_strides({shape})")
    expect_equal(got, expected, f"compact_strides({shape})", hint="did you start from the last axis?")
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from grader.checks import CheckFailed, NotDone, current_run
from grader.worker.codec import (ExceptionRecord, OpaqueRecord, SizeSpec, TensorRecord,
                                 TensorSpec)

__all__ = [
    "CheckFailed", "fail", "rng", "describe", "describe_exception", "call", "call_text",
    "expect_int", "expect_float", "expect_bool", "expect_none", "expect_tuple_of_ints",
    "expect_array", "expect_equal", "expect_array_equal", "expect_allclose", "expect_raises",
    "random_shape",
]

_PLAIN_SCALARS = (int, float, bool, str, bytes, type(None), complex)


def fail(message: str) -> None:
    """Raise :class:`CheckFailed` with ``message``."""
    raise CheckFailed(message)


def expect_choice(fn: Callable, what: str, correct: str, hints: dict[str, str],
                  choices: tuple[str, ...] = ("A", "B", "C", "D")) -> None:
    """Check a multiple-choice self-check: ``fn()`` must return one letter as a ``str``
    (case and surrounding spaces ignored).  A wrong letter fails with ``hints[letter]``."""
    got = call(fn, name="answer")
    if type(got) is not str:
        fail(f"{what} should be one letter as a string, such as 'A', got {describe(got)}")
    letter = str.upper(str.strip(got))
    if letter not in choices:
        fail(f"{what} should be one of {', '.join(repr(c) for c in choices)}, got {describe(got)}")
    if letter != correct:
        fail(f"{what}: {letter} is not right; {hints[letter]}")


def rng(seed: int | None = None) -> np.random.Generator:
    """A random generator for the running check's inputs: seeded by the course's secret and
    the slot (:func:`grader.checks.seed_for`), a different stream on each call within one
    check.  So a submission always meets the same inputs (and gets the same score), and no
    student knows them in advance.  Outside a runner: fresh entropy unless ``seed``."""
    run = current_run()
    if seed is None and run is not None:
        run.generators += 1
        return np.random.default_rng([run.seed, run.generators])
    return np.random.default_rng(seed)


def random_shape(gen: np.random.Generator, ndim: tuple[int, int] = (0, 4),
                 dim: tuple[int, int] = (1, 5)) -> tuple[int, ...]:
    """A random shape with ``ndim[0] <= len <= ndim[1]`` and each size in ``[dim[0], dim[1]]``,
    as a tuple of Python ints."""
    n = int(gen.integers(ndim[0], ndim[1] + 1))
    return tuple(int(d) for d in gen.integers(dim[0], dim[1] + 1, size=n))


# --------------------------------------------------------------------------- describing values

def _is_plain(value: Any, depth: int = 0) -> bool:
    """True for values built only from exact builtin scalars, tuples, lists and dicts,
    numpy arrays of exact type with a non-object dtype, and numpy scalars."""
    if depth > 20:
        return False
    t = type(value)
    if t in _PLAIN_SCALARS or t is slice or value is Ellipsis:
        return True
    if t in (tuple, list):
        return all(_is_plain(v, depth + 1) for v in value)
    if t is dict:
        return all(_is_plain(k, depth + 1) and _is_plain(v, depth + 1) for k, v in value.items())
    if t is np.ndarray:
        return value.dtype.kind != "O"
    if isinstance(value, np.generic) and t.__module__ == "numpy":
        return value.dtype.kind != "O"
    if t is np.dtype or (isinstance(value, np.dtype) and t.__module__.startswith("numpy")):
        return True
    return False


def _type_name(value: Any) -> str:
    t = type(value)
    try:
        mod = type.__getattribute__(t, "__module__")
        qual = type.__getattribute__(t, "__qualname__")
        if type(mod) is not str or type(qual) is not str:
            raise TypeError
    except BaseException:
        return "an object of an unknown type"
    if "<locals>." in qual:
        qual = qual.rsplit("<locals>.", 1)[1]
    if mod in ("builtins", "__main__"):
        return qual
    return f"{mod}.{qual}"


def describe(value: Any, limit: int = 160) -> str:
    """A short, safe description of ``value`` for messages: the repr of plain values (cut to
    ``limit`` characters), the shape and dtype of arrays, only the type name otherwise."""
    t = type(value)
    if t is TensorRecord:
        return f"a mini Tensor of shape {value.shape} and dtype {value.dtype}"
    if t is OpaqueRecord:
        return f"an object of type {value.text()}"
    if t is ExceptionRecord:
        return f"the exception {value.text()}"
    if t is TensorSpec:
        return f"<tensor of shape {tuple(np.shape(value.data))} {np.asarray(value.data).dtype}>"
    if t is SizeSpec:
        return f"Size({tuple(value.dims)!r})"
    if t is np.ndarray:
        if value.dtype.kind == "O":
            return f"a numpy array of Python objects with shape {value.shape}"
        with np.printoptions(threshold=20, edgeitems=3, precision=4):
            text = np.array2string(value, separator=", ")
        if len(text) > limit:
            text = text[: limit - 3] + "..."
        return f"array of shape {value.shape}, dtype {value.dtype}: {text}"
    if _is_plain(value):
        text = repr(value)
        if isinstance(value, np.generic):
            text = f"{text} (a numpy {value.dtype} scalar)"
        if len(text) > limit:
            text = text[: limit - 3] + "..."
        return text
    if isinstance(value, (int, float, tuple, list, str)):
        base = next(b.__name__ for b in (bool, int, float, tuple, list, str) if isinstance(value, b))
        return f"an object of type {_type_name(value)} (a subclass of {base})"
    return f"an object of type {_type_name(value)}"


def describe_exception(e: BaseException, limit: int = 300) -> str:
    """``"ValueError: <message>"`` without calling an overridden ``__str__``; arguments that
    are not plain values are shown by type only."""
    name = _type_name(e)
    try:
        args = BaseException.__getattribute__(e, "args")
        if type(args) is not tuple:
            args = ()
    except BaseException:
        args = ()
    parts = []
    for a in args:
        if type(a) is str:
            parts.append(a)
        else:
            parts.append(describe(a, limit=80))
    text = ", ".join(parts)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f"{name}: {text}" if text else name


# --------------------------------------------------------------------------- calling

def call_text(name: str, *args: Any, **kwargs: Any) -> str:
    """``"name(arg1, arg2, k=v)"`` with the (trusted, plain) arguments described."""
    parts = [describe(a, limit=60) for a in args]
    parts += [f"{k}={describe(v, limit=60)}" for k, v in kwargs.items()]
    return f"{name}({', '.join(parts)})"


def call(fn: Callable, *args: Any, name: str | None = None, **kwargs: Any) -> Any:
    """Call the student's ``fn(*args, **kwargs)`` (a :class:`~grader.checks.student.Student`
    handle, or a live function in a legacy check).  An ``Exception`` it raises becomes
    :class:`CheckFailed` naming the call and the exception; a stub (the template's
    ``raise NotImplementedError()``, mini's ``ExerciseNotImplemented``) becomes
    :class:`~grader.checks.NotDone`, and ``BaseException``s such as ``SystemExit`` pass
    through to the runner, which reports them."""
    label = call_text(name or _fn_name(fn), *args, **kwargs)
    if _is_handle(fn):
        from grader.checks.student import StudentRaised
        try:
            return fn(*args, **kwargs)
        except StudentRaised as e:
            raise raised_as_failure(e, label) from None
    args = tuple(_fresh(a) for a in args)
    kwargs = {k: _fresh(v) for k, v in kwargs.items()}
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise
    except CheckFailed as e:  # the student cannot pass by raising our exception type
        raise CheckFailed(f"{label} raised {describe_exception(e)}") from None
    except Exception as e:
        hint = ""
        if isinstance(e, RecursionError):
            hint = " (is a recursive call missing its base case?)"
        elif isinstance(e, MemoryError):
            hint = " (your code ran out of memory)"
        raise CheckFailed(f"{label} raised {describe_exception(e)}{hint}") from None


def raised_as_failure(e, label: str, hint: str = "") -> BaseException:
    """What a check raises for ``e`` (a :class:`~grader.checks.student.StudentRaised`) that
    came out of ``label``: :class:`CheckFailed` naming the call for an ordinary exception,
    :class:`~grader.checks.NotDone` for a stub, ``e`` itself for ``SystemExit`` and friends."""
    rec = e.record
    if rec.not_implemented:
        return NotDone(rec.slot_id, rec.text())
    if not rec.is_a("Exception"):
        return e
    if rec.is_a("RecursionError"):
        hint = hint or " (is a recursive call missing its base case?)"
    elif rec.is_a("MemoryError"):
        hint = hint or " (your code ran out of memory)"
    return CheckFailed(f"{label} raised {rec.text()}{hint}")


def _is_handle(fn: Any) -> bool:
    from grader.checks.student import Student
    return type(fn) is Student


def _fn_name(fn: Callable) -> str:
    if _is_handle(fn):
        return fn.name or fn.slot
    try:
        name = object.__getattribute__(fn, "__name__")
        return name if type(name) is str else "your function"
    except BaseException:
        return "your function"


def _fresh(a: Any) -> Any:
    if type(a) is np.ndarray:
        return a.copy()
    if type(a) is list:
        return [_fresh(x) for x in a]
    return a


# --------------------------------------------------------------------------- converting

def expect_int(value: Any, what: str, *, allow_numpy: bool = False) -> int:
    """``value`` as a Python int; ``bool`` and ``int`` subclasses are refused, numpy integer
    scalars too unless ``allow_numpy``."""
    if type(value) is int:
        return int.__int__(value)
    if isinstance(value, np.integer) and type(value).__module__ == "numpy":
        if allow_numpy:
            return int(value)
        fail(f"{what} should be a Python int, got {describe(value)}: convert it with int(...)")
    if type(value) is bool:
        fail(f"{what} should be an int, got the bool {value!r}")
    fail(f"{what} should be a Python int, got {describe(value)}")


def expect_float(value: Any, what: str) -> float:
    """``value`` as a Python float (Python ints and numpy floating scalars are accepted)."""
    if type(value) in (float, int):
        return float(value)
    if isinstance(value, (np.floating, np.integer)) and type(value).__module__ == "numpy":
        return float(value)
    fail(f"{what} should be a number, got {describe(value)}")


def expect_bool(value: Any, what: str) -> bool:
    if type(value) is bool:
        return value
    if type(value) is np.bool_:
        return bool(value)
    fail(f"{what} should be True or False, got {describe(value)}")


def expect_none(value: Any, what: str, hint: str = "") -> None:
    if value is not None:
        fail(_with_hint(f"{what} should return None, got {describe(value)}", hint))


def expect_tuple_of_ints(value: Any, what: str, length: int | None = None, *,
                         allow_numpy: bool = False) -> tuple[int, ...]:
    """``value`` as a tuple of Python ints (exactly a ``tuple``; a list is refused with a
    hint to convert), optionally of a given ``length``."""
    if type(value) is not tuple:
        if type(value) is list:
            fail(f"{what} should be a tuple, got the list {describe(value)}: return tuple(...)")
        if type(value) is np.ndarray:
            fail(f"{what} should be a tuple of ints, got {describe(value)}: "
                 f"return tuple(int(x) for x in ...)")
        fail(f"{what} should be a tuple of ints, got {describe(value)}")
    items = tuple.__iter__(value)
    out = tuple(expect_int(v, f"{what}[{i}]", allow_numpy=allow_numpy) for i, v in enumerate(items))
    if length is not None and len(out) != length:
        fail(f"{what} should have {length} entries, got {len(out)}: {out}")
    return out


def expect_array(value: Any, what: str, shape: tuple[int, ...] | None = None,
                 dtype: Any = None) -> np.ndarray:
    """``value`` as a fresh copy of a numpy array of exact type ``np.ndarray`` (no
    subclasses, no object dtype unless asked), with the given ``shape`` and ``dtype``."""
    if type(value) is not np.ndarray:
        fail(f"{what} should be a numpy array, got {describe(value)}")
    if shape is not None and value.shape != tuple(shape):
        fail(f"{what} should have shape {tuple(shape)}, got shape {value.shape}")
    if dtype is not None:
        want = np.dtype(dtype)
        if value.dtype != want:
            fail(f"{what} should have dtype {want}, got dtype {value.dtype}")
    elif value.dtype.kind == "O":
        fail(f"{what} should be a numeric array, got an array of Python objects")
    return np.array(value, copy=True)


# --------------------------------------------------------------------------- comparing

def _with_hint(msg: str, hint: str) -> str:
    return f"{msg}; {hint}" if hint else msg


def expect_equal(got: Any, expected: Any, what: str, hint: str = "") -> None:
    """Compare plain values (already converted by an ``expect_*`` helper)."""
    if not _is_plain(got):
        fail(f"{what}: got {describe(got)}, which is not a plain value (the check converts "
             f"results before comparing them)")
    if type(got) is np.ndarray or type(expected) is np.ndarray:
        return expect_array_equal(got, expected, what, hint)
    if type(got) is not type(expected) or got != expected:
        fail(_with_hint(f"{what}: expected {describe(expected)}, got {describe(got)}", hint))


def expect_array_equal(got: Any, expected: np.ndarray, what: str, hint: str = "") -> None:
    """Exact comparison of arrays: same type, shape, dtype and elements (NaNs equal)."""
    expected = np.asarray(expected)
    got = expect_array(got, what, shape=expected.shape, dtype=expected.dtype)
    equal_nan = expected.dtype.kind in "fc"
    if not np.array_equal(got, expected, equal_nan=equal_nan):
        bad = np.argwhere(~_eq_mask(got, expected))
        where = tuple(int(i) for i in bad[0]) if bad.size else ()
        fail(_with_hint(f"{what}: {int(len(bad))} of {expected.size} elements differ; first at "
                        f"index {where}: expected {describe(expected[where] if where else expected)}, "
                        f"got {describe(got[where] if where else got)}", hint))


def _eq_mask(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if b.dtype.kind in "fc":
        return (a == b) | (np.isnan(a) & np.isnan(b))
    return np.asarray(a == b)


def expect_allclose(got: Any, expected: np.ndarray, what: str, *, rtol: float = 1e-5,
                    atol: float = 1e-8, dtype: Any = None, hint: str = "") -> None:
    """Approximate comparison of float arrays of exact type, shape and dtype (``dtype``
    defaults to the expected array's)."""
    expected = np.asarray(expected)
    got = expect_array(got, what, shape=expected.shape,
                       dtype=expected.dtype if dtype is None else dtype)
    if not np.allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True):
        err = np.abs(got.astype(np.float64) - expected.astype(np.float64))
        where = np.unravel_index(int(np.nanargmax(err)), err.shape) if err.size else ()
        where = tuple(int(i) for i in where)
        fail(_with_hint(f"{what}: values differ; largest difference {float(np.nanmax(err)):.3g} at "
                        f"index {where}: expected {float(expected[where]):.6g}, "
                        f"got {float(got[where]):.6g}", hint))


def expect_raises(exc_types: type | tuple[type, ...], fn: Callable, *args: Any,
                  name: str | None = None, hint: str = "", **kwargs: Any) -> Any:
    """Call the student's ``fn`` and require an exception of one of ``exc_types`` (matched
    by the names of its builtin and mini base classes).  Returns the exception, or its
    :class:`~grader.worker.codec.ExceptionRecord` for a handle (do not call its methods)."""
    if not isinstance(exc_types, tuple):
        exc_types = (exc_types,)
    label = call_text(name or _fn_name(fn), *args, **kwargs)
    wanted = " or ".join(t.__name__ for t in exc_types)
    if _is_handle(fn):
        from grader.checks.student import StudentRaised
        try:
            result = fn(*args, **kwargs)
        except StudentRaised as e:
            rec = e.record
            if rec.is_a(*(t.__name__ for t in exc_types)) and not rec.not_implemented:
                return rec
            if rec.not_implemented or not rec.is_a("Exception"):
                raise raised_as_failure(e, label) from None
            fail(_with_hint(f"{label} should raise {wanted}, but raised {rec.text()}", hint))
        fail(_with_hint(f"{label} should raise {wanted}, but returned {describe(result)}", hint))
    args = tuple(_fresh(a) for a in args)
    try:
        result = fn(*args, **kwargs)
    except exc_types as e:
        if type(e) is CheckFailed:
            fail(f"{label} should raise {wanted}, got {describe_exception(e)}")
        return e
    except NotImplementedError as e:
        if NotImplementedError in exc_types:  # pragma: no cover - unusual
            return e
        raise
    except Exception as e:
        fail(_with_hint(f"{label} should raise {wanted}, but raised {describe_exception(e)}", hint))
    fail(_with_hint(f"{label} should raise {wanted}, but returned {describe(result)}", hint))
