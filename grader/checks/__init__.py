"""The check registry: one check per exercise slot, and the in-process runner.

A check is a plain function that receives the student's function, calls it on fresh
random inputs, and raises :class:`CheckFailed` with a message that says what was expected,
what came back and the likely mistake::

    from grader.checks import check, CheckFailed
    from grader.checks.helpers import call, expect_tuple_of_ints, expect_equal

    @check("03.compact_strides", points=10)
    def check_compact_strides(compact_strides):
        for shape in [(2, 3), (), (4, 0, 5)]:
            got = expect_tuple_of_ints(call(compact_strides, shape), f"compact_strides({shape})")
            expect_equal(got, reference_answer(shape), f"compact_strides({shape})",
                         hint="the last axis has stride 1")

Rules for checks (the student's code is untrusted):

- never compare objects the student returned: convert them first with the strict helpers
  of :mod:`grader.checks.helpers` (``expect_int``, ``expect_tuple_of_ints``,
  ``expect_array``, ...), which accept exact builtin / numpy types only, so an object with
  an always-true ``__eq__`` fails;
- compute expected values with trusted code (numpy, or a private copy of the rule), never
  by calling mini's dispatching functions, which may run student code;
- call the student's function through :func:`grader.checks.helpers.call` so an exception
  it raises becomes a message naming the call.

Checks for chapter NN live in ``grader/checks/chNN_topic.py`` (e.g. ``ch03_strides.py``)
and are found by :func:`discover`.  :func:`run_in_process` runs one check and turns
everything the student's code can throw (including ``SystemExit`` and
``KeyboardInterrupt``) into a :class:`Verdict`; the sandbox (:mod:`grader.sandbox`)
calls it in a fresh subprocess.

Grade ids: nbgrader only allows ``[A-Za-z0-9_-]`` in a grade id, so the notebook cells of
slot ``03.compact_strides`` use :func:`test_grade_id` (``"03_compact_strides"``, the
autograded test cell that carries the points) and :func:`solution_grade_id`
(``"03_compact_strides_code"``, the solution cell).  The tooling itself finds slots from
``@implement("...")`` and ``run_check("...")`` in the cell source, not from grade ids.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Callable

__all__ = [
    "CheckFailed", "Check", "Verdict", "check", "all_checks", "get_check", "checks_for_chapter",
    "discover", "run_in_process", "chapter_of", "test_grade_id", "solution_grade_id",
]


class CheckFailed(Exception):
    """Raised by a check when the student's function is wrong; the message is shown to the
    student as is (say what was expected, what came back, and the likely mistake)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.message


@dataclass(frozen=True)
class Check:
    slot_id: str
    points: float
    fn: Callable[[Callable], None]
    module: str

    @property
    def chapter(self) -> int:
        return chapter_of(self.slot_id)


@dataclass
class Verdict:
    """Result of one check on one student function.

    ``points`` is the score earned: the check's points when it passed, else 0.
    ``max_points`` is what the check is worth.
    """
    slot_id: str
    passed: bool
    message: str
    points: float
    max_points: float = 0.0

    def to_dict(self) -> dict:
        return {"slot_id": self.slot_id, "passed": bool(self.passed), "message": str(self.message),
                "points": float(self.points), "max_points": float(self.max_points)}

    @classmethod
    def from_dict(cls, d: dict) -> "Verdict":
        return cls(slot_id=str(d["slot_id"]), passed=d["passed"] is True, message=str(d["message"]),
                   points=float(d["points"]), max_points=float(d.get("max_points", 0.0)))


_CHECKS: dict[str, Check] = {}
_DISCOVERED = False
_DISCOVERED_CHAPTERS: set[int] = set()


def chapter_of(slot_id: str) -> int:
    """``"03.compact_strides"`` -> 3."""
    chapter, sep, name = slot_id.partition(".")
    if not (sep and len(chapter) == 2 and chapter.isdigit() and name):
        raise ValueError(f"exercise ids look like '03.compact_strides', got {slot_id!r}")
    return int(chapter)


def test_grade_id(slot_id: str) -> str:
    """nbgrader grade id of the autograded test cell of ``slot_id`` (dots are not allowed)."""
    chapter_of(slot_id)
    return slot_id.replace(".", "_")


test_grade_id.__test__ = False  # not a pytest test when imported into a test module


def solution_grade_id(slot_id: str) -> str:
    """nbgrader grade id of the solution cell of ``slot_id``."""
    return test_grade_id(slot_id) + "_code"


def check(slot_id: str, points: float):
    """Register the decorated ``fn(student_fn) -> None`` as the check of ``slot_id``,
    worth ``points`` (the same points as the notebook's test cell for that slot)."""
    chapter_of(slot_id)
    if not points > 0:
        raise ValueError(f"check {slot_id}: points must be positive, got {points!r}")

    def decorate(fn: Callable[[Callable], None]) -> Callable[[Callable], None]:
        old = _CHECKS.get(slot_id)
        if old is not None and (old.module, old.fn.__qualname__) != (fn.__module__, fn.__qualname__):
            raise ValueError(f"exercise {slot_id} already has a check: "
                             f"{old.module}.{old.fn.__qualname__}")
        _CHECKS[slot_id] = Check(slot_id, float(points), fn, fn.__module__)
        return fn

    return decorate


def discover(chapter: int | None = None) -> None:
    """Import every ``grader/checks/chNN_*.py`` module, or only chapter ``chapter``'s
    (idempotent)."""
    global _DISCOVERED
    if _DISCOVERED or (chapter is not None and chapter in _DISCOVERED_CHAPTERS):
        return
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        name = info.name
        if name.startswith("ch") and name[2:4].isdigit():
            if chapter is None or int(name[2:4]) == chapter:
                importlib.import_module(f"{__name__}.{name}")
    if chapter is None:
        _DISCOVERED = True
    else:
        _DISCOVERED_CHAPTERS.add(chapter)


def all_checks() -> dict[str, Check]:
    """Every registered check, by slot id, sorted."""
    discover()
    return dict(sorted(_CHECKS.items()))


def checks_for_chapter(chapter: int) -> dict[str, Check]:
    return {k: v for k, v in all_checks().items() if v.chapter == int(chapter)}


def get_check(slot_id: str) -> Check:
    """The check of ``slot_id``; ``KeyError`` naming the known slots when there is none."""
    if slot_id in _CHECKS:
        return _CHECKS[slot_id]
    discover(chapter_of(slot_id))  # the sandbox imports only the chapter it needs
    if slot_id not in _CHECKS:
        discover()
    try:
        return _CHECKS[slot_id]
    except KeyError:
        known = ", ".join(sorted(_CHECKS)) or "none"
        raise KeyError(f"no grader check for exercise {slot_id!r}; known: {known}") from None


def run_in_process(slot_id: str, student_fn: Callable) -> Verdict:
    """Run the check of ``slot_id`` on ``student_fn`` in this process and return a
    :class:`Verdict`.  Never raises because of the student's code: every exception
    (including ``SystemExit``, ``KeyboardInterrupt`` and ``ExerciseNotImplemented``) becomes
    a failed verdict with a message saying what happened and what to do.

    This runs the student's code in the caller's process, with no timeout and no memory
    limit: use :func:`grader.sandbox.run_sandboxed` (or :func:`grader.hidden.run_check`)
    for untrusted code.  Raises ``KeyError`` only when no check exists for ``slot_id``.
    """
    from grader.checks.helpers import describe_exception  # local: helpers imports this module

    chk = get_check(slot_id)
    max_points = chk.points

    def failed(message: str) -> Verdict:
        return Verdict(slot_id, False, message, 0.0, max_points)

    if not callable(student_fn):
        from grader.checks.helpers import describe
        return failed(f"{slot_id}: expected your function, got {describe(student_fn)}")
    try:
        chk.fn(student_fn)
    except CheckFailed as e:
        try:
            msg = str(e.message) if type(e.message) is str else "check failed"
        except BaseException:  # pragma: no cover - defensive
            msg = "check failed"
        return failed(msg)
    except NotImplementedError as e:
        other = _other_slot(e, slot_id)
        if other:
            return failed(f"{slot_id}: your code relies on exercise {other}, which is not "
                          f"available here: {describe_exception(e)}")
        if _is_not_implemented(e):
            return failed(f"{slot_id}: not implemented yet: write the function in its cell "
                          f"(replace `raise NotImplementedError()`) and run the cell again")
        return failed(f"{slot_id}: your code raised {describe_exception(e)}")
    except SystemExit as e:
        return failed(f"{slot_id}: your code called sys.exit()/exit() ({describe_exception(e)}); "
                      f"a function should return its result, never exit the program")
    except KeyboardInterrupt:
        return failed(f"{slot_id}: your code raised KeyboardInterrupt (interrupted)")
    except RecursionError:
        return failed(f"{slot_id}: your code recursed too deeply (RecursionError): "
                      f"is a recursive call missing its base case?")
    except MemoryError:
        return failed(f"{slot_id}: your code ran out of memory (MemoryError)")
    except BaseException as e:  # anything else the student's code raised
        return failed(f"{slot_id}: your code raised {describe_exception(e)}")
    return Verdict(slot_id, True, "passed", max_points, max_points)


def _eni_class():
    try:
        from mini.exercises import ExerciseNotImplemented
        return ExerciseNotImplemented
    except Exception:  # pragma: no cover - mini missing
        return None


def _other_slot(e: BaseException, slot_id: str) -> str:
    """The slot id of an ``ExerciseNotImplemented`` raised for another exercise, else ''."""
    eni = _eni_class()
    if eni is not None and isinstance(e, eni):
        other = getattr(e, "slot_id", slot_id)
        if type(other) is str and other != slot_id:
            return other
    return ""


def _is_not_implemented(e: BaseException) -> bool:
    """True for the template's bare ``raise NotImplementedError()`` and for mini's
    ``ExerciseNotImplemented`` stubs."""
    eni = _eni_class()
    if eni is not None and isinstance(e, eni):
        return True
    return type(e) is NotImplementedError and not e.args
