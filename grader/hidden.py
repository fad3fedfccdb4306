"""The kernel side of hidden tests, for instructors and self-learners in their own kernels.

A notebook's autograder test cell for exercise ``03.compact_strides`` ends with::

    ### BEGIN HIDDEN TESTS
    from grader.hidden import run_check; run_check("03.compact_strides", compact_strides)
    ### END HIDDEN TESTS

At ``mini-course autograde`` this line never runs (the hidden regions are left out of the
sandboxed kernel, and ``grader`` is not importable there): the trusted grader finds the
exercise by ``run_check("NN.x"`` in the hidden region and computes the verdict with the
sandboxed worker (:mod:`grader.grading`).

Here, in a kernel of your own (the instructor's notebooks in ``course/``, a self-learner's),
:func:`run_check` runs the check **in this process** (:func:`grader.checks.run_in_process`:
the same check, the same codec round trip, no pickle): there is nothing to protect from the
person who owns the kernel, and a check that loops is stopped with the kernel's interrupt
button (``mini-course check`` runs notebooks with a cell timeout).  When this kernel's
``mini`` is a student copy (a workspace), scenarios that need mini's reference run it in a
separate plain process on the installed ``mini``.  On failure it raises ``AssertionError``
with the check's message; on partial credit too, naming the points earned.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

__all__ = ["run_check"]


def _real_assertion_error() -> type:
    """The interpreter's AssertionError, even if ``builtins.AssertionError`` was rebound."""
    try:
        assert False  # noqa: B011 - the assert statement raises the real class
    except BaseException as e:  # noqa: BLE001
        return type(e)
    for cls in Exception.__subclasses__():  # running under python -O
        if cls.__name__ == "AssertionError" and cls.__module__ == "builtins":
            return cls
    return Exception  # pragma: no cover


_AssertionError = _real_assertion_error()


def _installed_mini() -> Path | None:
    """The instructor's (full) mini next to this grader, if there is one."""
    here = Path(__file__).resolve().parent.parent / "mini"
    if (here / "__init__.py").exists() and not (here / "_release.py").exists():
        return here
    return None


def _imported_mini_is_a_student_copy() -> bool:
    mini = sys.modules.get("mini")
    if mini is None:
        return False
    file = getattr(mini, "__file__", None) or ""
    return bool(file) and (Path(file).resolve().parent / "_release.py").exists()


def run_check(slot_id: str, student_fn: Callable, *, seed: int | None = None) -> None:
    """Run the hidden check of ``slot_id`` on ``student_fn`` in this process.

    Prints a line when it passed; raises ``AssertionError`` with the check's message when it
    did not (all or part of its points lost)."""
    from grader.checks import evaluate, get_check, run_in_process
    from grader.checks.student import InProcess, Student

    chk = get_check(slot_id)
    if chk.legacy or not _imported_mini_is_a_student_copy() or _installed_mini() is None:
        verdict = run_in_process(slot_id, student_fn, seed=seed)
    else:
        from grader.sandbox import Sandbox
        from grader.workerproc import WorkerBackend
        with WorkerBackend(Sandbox.none(), mini_dir=_installed_mini(), cells=[]) as ref:
            verdict = evaluate(slot_id, Student(InProcess(student_fn), slot_id, reference=ref),
                               seed=seed)
    if verdict.passed is not True:
        raise _AssertionError(verdict.message)
    print(f"{slot_id}: hidden tests passed")
