"""What the chapter notebooks share: the helpers of their visible checks and demos.

A chapter's setup cell imports what it uses::

    from mini.notebook import expect, expect_raises, needs_exercises

Everything here ships with the student copy of mini, so it holds no solution of any
exercise: only the plumbing around them (running a demo that needs an unfinished exercise,
saying what a visible check expected and what came back).

- :func:`needs_exercises`: a demo that reaches an unfinished exercise prints which one
  instead of failing, so a notebook always runs top to bottom.
- :func:`expect` (exact values: ints, tuples), :func:`expect_close` (mini tensors),
  :func:`expect_array_close` (numpy arrays), :func:`expect_pair`, :func:`expect_raises`:
  visible checks that say what was expected, what came back and the likely mistake.
- :func:`self_check`: tell right or wrong on a self-check question, with a short why
  (verdicts keyed by :func:`answer_digest` of each foreseen answer); :func:`check_answer`:
  the same with only the right answer's digest (:func:`answer_key`) and plain-text
  explanations of the foreseen wrong ones.
- :func:`values`: a mini tensor's numbers as a float64 numpy array.
- :data:`INTERACTIVE`: whether live widgets, plots and progress bars are worth drawing.
- :func:`run_check`: the hidden tests of an exercise where the grader is installed.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
from contextlib import contextmanager
from typing import Callable

import numpy as np

from mini.autograd.tensor import Tensor
from mini.utils.cpp_extension import CompileError

__all__ = ["needs_exercises", "values", "expect", "expect_close", "expect_array_close",
           "expect_pair", "expect_raises", "INTERACTIVE", "run_check", "answer_digest",
           "self_check", "answered", "check_answer", "answer_key"]

# Live widgets, redrawn plots and progress bars only help a person watching: not while
# nbgrader autogrades (NBGRADER_EXECUTION) nor where the course turns them off.
INTERACTIVE = not os.environ.get("NBGRADER_EXECUTION") and not os.environ.get("MINI_NO_WIDGETS")


@contextmanager
def needs_exercises():
    """Run a demo.  If it reaches an exercise you have not finished (or C++ that does not
    compile yet), print a note instead of failing, so the notebook runs top to bottom."""
    try:
        yield
    except NotImplementedError as e:
        slot = getattr(e, "slot_id", None)
        print(f"-> finish exercise {slot} to run this demo" if slot
              else f"-> this demo needs an exercise you have not finished yet ({e})")
    except CompileError as e:
        print(f"-> your C++ does not compile yet:\n{e}")


def values(t) -> np.ndarray:
    """The numbers in a mini tensor, as a float64 numpy array."""
    return np.array(t.detach().numpy(), dtype=np.float64)


def _likely(hint: str) -> str:
    return f"\n  Likely mistake: {hint}" if hint else ""


def _plain(value) -> bool:
    """True for Python ints, None, and tuples of those (what the stride functions return)."""
    if isinstance(value, tuple):
        return all(_plain(v) for v in value)
    return value is None or type(value) is int


def expect(got, expected, call: str, hint: str, wrong: dict | None = None) -> None:
    """A visible check of an exact result (ints, tuples of ints, None): say what was
    expected, what came back, and the likely mistake.  ``hint`` names the concept (it must
    hold whatever wrong value came back); ``wrong`` maps values that known mistakes return to
    the mistake, shown instead of ``hint`` when ``got`` is one of them."""
    if type(got) is type(expected) and got == expected:
        if not _plain(got):
            raise AssertionError(f"{call} returned {got!r}: use plain Python ints "
                                 f"(convert numpy integers with int(...))")
        return
    for value, why in (wrong or {}).items():
        if type(got) is type(value) and got == value:
            hint = why
            break
    if isinstance(got, np.integer) and type(expected) is int and int(got) == expected:
        hint = "the value is right, but return a plain Python int, not a numpy integer"
    if isinstance(got, list) and tuple(got) == expected:
        hint = "return a tuple, not a list: tuple(...)"
    raise AssertionError(f"{call} should be {expected!r}, got {got!r}.{_likely(hint)}")


def expect_close(got, expected, call: str, hint: str = "", tol: float = 1e-6) -> None:
    """A visible check on a mini tensor: type, shape, and values within ``tol`` (relative
    and absolute).  Where ``expected`` is a plain number, a plain number may come back too
    (a learning rate, a loss as a float)."""
    number = isinstance(expected, (int, float)) and isinstance(got, (int, float))
    if not (isinstance(got, Tensor) or number):
        raise AssertionError(f"{call} should return a mini Tensor, got "
                             f"{type(got).__name__}.{_likely(hint)}")
    g = values(got) if isinstance(got, Tensor) else np.asarray(got, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    if g.shape != e.shape:
        raise AssertionError(f"{call} should have shape {e.shape}, got shape {g.shape}."
                             f"{_likely(hint)}")
    if not np.allclose(g, e, rtol=tol, atol=tol):
        raise AssertionError(f"{call} should be\n{e}\ngot\n{g}\n(largest difference "
                             f"{np.max(np.abs(g - e)):.3g}){_likely(hint)}")


def expect_array_close(got, want, call: str, hint: str, rtol: float = 1e-5,
                       atol: float = 1e-6) -> None:
    """A visible check on a numpy result: type, shape, dtype, values."""
    assert type(got) is np.ndarray, f"{call} should return a numpy array, got {type(got).__name__}"
    want = np.asarray(want)
    assert got.shape == want.shape, f"{call}: expected shape {want.shape}, got {got.shape}. {hint}"
    assert got.dtype == want.dtype, f"{call}: expected dtype {want.dtype}, got {got.dtype}. {hint}"
    assert np.allclose(got, want, rtol=rtol, atol=atol), (
        f"{call}: values differ (largest difference {np.max(np.abs(got - want)):.3g})."
        f"{_likely(hint)}")


def expect_pair(result, call: str):
    """A VJP of a two-input operation returns (grad_a, grad_b): check that, return it."""
    if not (isinstance(result, tuple) and len(result) == 2):
        raise AssertionError(f"{call} should return a tuple (grad_a, grad_b), got {result!r}")
    return result


def expect_raises(error: type[BaseException], fn: Callable, *args, hint: str) -> None:
    """A visible check that ``fn(*args)`` raises ``error``.  An unfinished exercise
    (NotImplementedError) is passed on, never taken for the error looked for."""
    try:
        result = fn(*args)
    except NotImplementedError:
        if error is not NotImplementedError:
            raise                   # an unfinished exercise is not the error looked for
        return
    except error:
        return
    shown = repr(args)
    call = f"{fn.__name__}{shown}" if len(shown) <= 80 else fn.__name__
    raise AssertionError(f"{call} should raise {error.__name__}, but returned {result!r}."
                         f"{_likely(hint)}")


def answer_digest(answer) -> str:
    """A short fingerprint of a self-check answer (a letter, case and spaces ignored, or a
    whole number), so a notebook can tell right from wrong without printing the answer."""
    import hashlib
    if isinstance(answer, str):
        text = answer.strip().upper()
    elif isinstance(answer, (int, np.integer)) and not isinstance(answer, bool):
        text = str(int(answer))
    else:
        text = repr(answer)
    return hashlib.sha256(f"mini-self-check:{text}".encode()).hexdigest()[:12]


def answered(fn: Callable, slot_id: str):
    """``fn()``, the answer to a self-check question; if the answer cell is still the
    template's bare ``raise NotImplementedError()``, say which question to answer and where
    (Run All stops there with that message)."""
    try:
        return fn()
    except NotImplementedError as e:
        if e.args:
            raise
        err = NotImplementedError(
            f"self-check {slot_id} is not answered yet: make {fn.__name__}() in the cell above "
            f"return your answer (replace `raise NotImplementedError()`) and run that cell")
        err.slot_id = slot_id
        raise err from None


def self_check(answer, verdicts: dict[str, tuple[bool, str]], otherwise: str) -> bool:
    """Say whether a self-check answer is right, with a short why.  ``verdicts`` maps
    :func:`answer_digest` of the answers the author foresaw to ``(right, why)``;
    ``otherwise`` is the why for any other answer.  Prints, returns whether it is right, and
    never raises: a wrong answer must not stop Run All."""
    right, why = verdicts.get(answer_digest(answer), (False, otherwise))
    print(("Right. " if right else f"Not right ({answer!r}). ") + why)
    return right


def run_check(slot_id: str, fn: Callable) -> None:
    """Run the hidden tests of exercise ``slot_id`` on ``fn`` where the grader is installed
    (an instructor's machine, a clone of the course repository); elsewhere say in one line
    that they run when the instructor grades the notebook."""
    if importlib.util.find_spec("grader") is None:
        print(f"{slot_id}: the hidden tests of this exercise run when the instructor grades "
              f"the notebook")
        return
    from grader.hidden import run_check as grade
    grade(slot_id, fn)


def _normalized_answer(answer) -> str | None:
    """A self-check answer as text: a letter in upper case, a number in 6 significant
    digits; None for anything else."""
    if isinstance(answer, str):
        return answer.strip().upper()
    if isinstance(answer, (int, float, np.integer, np.floating)) and not isinstance(answer, bool):
        return f"{float(answer):.6g}"
    return None


def answer_key(question: str, answer) -> str:
    """The digest of ``answer`` to self-check ``question`` that :func:`check_answer` compares
    with (so the cell that checks an answer does not show it)."""
    text = _normalized_answer(answer)
    return hashlib.sha256(f"{question}:{text}".encode()).hexdigest()[:16]


def check_answer(question: str, answer, *, key: str, explain: dict[str, str]) -> bool:
    """Say whether ``answer`` to self-check ``question`` is right, and why.

    ``key`` is :func:`answer_key` of the right answer; ``explain`` maps answers (letters, or
    numbers written as :func:`answer_key` normalizes them) to a sentence shown when that
    answer is given, ``"right"`` to the sentence shown for the right answer and ``"other"``
    to the one for any other wrong answer.  Prints the verdict and returns it; the graded
    answer is whatever the function returns when the notebook is submitted."""
    text = _normalized_answer(answer)
    if text is None:
        raise AssertionError(f"{question}: your answer should be a letter (a string such as "
                             f"'A') or a number, got {type(answer).__name__}")
    if answer_key(question, answer) == key:
        print(f"{question}: {text} is right. {explain.get('right', '')}".rstrip())
        return True
    why = explain.get(text, explain.get("other", "think it through once more"))
    print(f"{question}: {text} is not right. {why}")
    return False
