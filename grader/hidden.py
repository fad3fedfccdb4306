"""The kernel side of hidden tests.

A notebook's autograder test cell for exercise ``03.compact_strides`` ends with::

    ### BEGIN HIDDEN TESTS
    from grader.hidden import run_check; run_check("03.compact_strides", compact_strides)
    ### END HIDDEN TESTS

:func:`run_check` sends the student's function to a fresh subprocess
(:func:`grader.sandbox.run_sandboxed`) that imports the pristine grader and the instructor's
mini, runs the check with a timeout and a memory limit, and reports the verdict through a
file the student's code cannot forge by printing.  On failure it raises ``AssertionError``
with the check's message, so nbgrader scores the cell 0 and the student reads what to fix.

During ``mini-course autograde`` the environment variable ``MINI_GRADER_SUBMISSION_DIR``
names a per-submission folder; ``run_check`` also saves the pickled function there as
``<slot_id>.pkl`` and the autograde command re-runs each check from its own process after
the notebook ran, so a kernel that skips or fakes ``run_check`` earns nothing.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from grader.checks import chapter_of
from grader.sandbox import run_sandboxed

__all__ = ["run_check", "SUBMISSION_DIR_ENV"]

SUBMISSION_DIR_ENV = "MINI_GRADER_SUBMISSION_DIR"


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


def run_check(slot_id: str, student_fn: Callable, *, timeout: float | None = None,
              memory_limit: int | str | None = "default") -> None:
    """Run the hidden check of ``slot_id`` on ``student_fn`` in a sandboxed subprocess.

    Prints a line when it passed; raises ``AssertionError`` with the check's message when
    it did not.  ``timeout`` (seconds, default 60 or
    ``MINI_GRADER_TIMEOUT``) and ``memory_limit`` (bytes or ``"4G"``, default 4 GiB or
    ``MINI_GRADER_MEMORY``) bound the subprocess.
    """
    chapter_of(slot_id)
    save_to = None
    sub_dir = os.environ.get(SUBMISSION_DIR_ENV)
    if sub_dir:
        save_to = Path(sub_dir) / f"{slot_id}.pkl"
    verdict = run_sandboxed(slot_id, student_fn, timeout=timeout, memory_limit=memory_limit,
                            save_payload_to=save_to)
    if verdict.passed is not True:
        raise _AssertionError(verdict.message)
    print(f"{slot_id}: hidden tests passed")
