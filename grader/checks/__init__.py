"""The check registry: one check per exercise slot, and the runner that turns a check into
a :class:`Verdict`.

A check receives a handle on the student's implementation (:class:`grader.checks.student.
Student`), calls it on inputs it chooses, compares what comes back -- plain data, decoded by
the trusted side: never an object the student's code made -- with trusted expectations, and
raises :class:`CheckFailed` with a message that says what was expected, what came back and
the likely mistake::

    from grader.checks import check, part
    from grader.checks.helpers import call, expect_tuple_of_ints, expect_equal, rng

    @check("03.compact_strides", points=8)
    def check_compact_strides(student):
        for shape in [(2, 3), (), (4, 0, 5)]:
            got = expect_tuple_of_ints(call(student, shape, name="compact_strides"), ...)
            expect_equal(got, numpy_answer(shape), ..., hint="the last axis has stride 1")

The same check runs against any backend of the handle: the sandboxed worker at autograde
(:mod:`grader.workerproc`), or a live function in this process (:func:`run_in_process`: the
mistake catalogue, mini's references, a learner's own kernel) -- both through the codec.

Rules for checks:

- inputs come from :func:`grader.checks.helpers.rng`, seeded by the course's secret and the
  slot (:func:`seed_for`): the same submission always gets the same inputs, which a student
  cannot know in advance;
- expected values come from trusted code: numpy oracles, or the same scenario run with mini's
  reference in this process (``student.expected(...)``);
- convert results with the strict helpers of :mod:`grader.checks.helpers` (exact types,
  shapes and dtypes);
- call the student through :func:`grader.checks.helpers.call` so an exception becomes a
  message naming the call.

Partial credit: a check may split its points into named parts::

    with part("negative steps", 6):
        ...                       # a CheckFailed in here costs these 6 points only

A failure outside every part ends the check: the parts already passed keep their points,
the rest of the check's points (and parts never reached) are lost.  ``Verdict.parts`` lists
``(name, earned, max, message)`` and ``Verdict.points`` is the total.

Checks for chapter NN live in ``grader/checks/chNN_topic.py`` and are found by
:func:`discover`.  Grade ids: nbgrader only allows ``[A-Za-z0-9_-]`` in a grade id, so the
notebook cells of slot ``03.compact_strides`` use :func:`test_grade_id`
(``"03_compact_strides"``, the autograded test cell that carries the points) and
:func:`solution_grade_id` (``"03_compact_strides_code"``, the solution cell).  The tooling
finds slots from ``@implement("...")`` and ``run_check("...")`` in the cell source.
"""
from __future__ import annotations

import contextlib
import contextvars
import hashlib
import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = [
    "CheckFailed", "NotDone", "Check", "Verdict", "Part", "check", "legacy_check", "part",
    "all_checks", "get_check", "checks_for_chapter", "discover", "evaluate", "run_in_process",
    "seed_for", "chapter_of", "test_grade_id", "solution_grade_id", "DEFAULT_SECRET",
]

#: The seed secret outside a course (self-checks, tests): fixed, so results are reproducible.
DEFAULT_SECRET = "mini-course-default-seed"


class CheckFailed(Exception):
    """Raised by a check when the student's function is wrong; the message is shown to the
    student as is (say what was expected, what came back, and the likely mistake)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.message


class NotDone(Exception):
    """The implementation under test is a stub (the template's ``raise NotImplementedError()``
    or a mini stub): ``slot_id`` is the exercise it stands for."""

    def __init__(self, slot_id: str | None, message: str = ""):
        super().__init__(message or f"{slot_id} is not implemented")
        self.slot_id = slot_id
        self.message = message


@dataclass(frozen=True)
class Check:
    slot_id: str
    points: float
    fn: Callable[[Any], None]
    module: str
    legacy: bool = False   # receives a live function (not yet on the plain-data protocol)

    @property
    def chapter(self) -> int:
        return chapter_of(self.slot_id)


@dataclass(frozen=True)
class Part:
    """A named share of a check's points: ``earned`` of ``max_points``, and why not all."""
    name: str
    earned: float
    max_points: float
    message: str = ""


@dataclass
class Verdict:
    """Result of one check on one implementation.

    ``points`` is the score earned (the sum over ``parts`` plus the points outside them);
    ``max_points`` is what the check is worth; ``passed`` means full marks.  ``status`` says
    how the student's code ended: ``"ok"``, or ``"timeout"``, ``"memory"``, ``"crashed"``
    when the process running it had to be stopped or died."""
    slot_id: str
    passed: bool
    message: str
    points: float
    max_points: float = 0.0
    parts: list[Part] = field(default_factory=list)
    status: str = "ok"

    def to_dict(self) -> dict:
        return {"slot_id": self.slot_id, "passed": bool(self.passed), "message": str(self.message),
                "points": float(self.points), "max_points": float(self.max_points),
                "parts": [[p.name, float(p.earned), float(p.max_points), p.message]
                          for p in self.parts],
                "status": self.status}

    @classmethod
    def from_dict(cls, d: dict) -> "Verdict":
        return cls(slot_id=str(d["slot_id"]), passed=d["passed"] is True, message=str(d["message"]),
                   points=float(d["points"]), max_points=float(d.get("max_points", 0.0)),
                   parts=[Part(str(n), float(e), float(m), str(msg))
                          for n, e, m, msg in d.get("parts", [])],
                   status=str(d.get("status", "ok")))


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


def check(slot_id: str, points: float, *, legacy: bool = False):
    """Register the decorated ``fn(student) -> None`` as the check of ``slot_id``, worth
    ``points`` (the same points as the notebook's test cell for that slot)."""
    chapter_of(slot_id)
    if not points > 0:
        raise ValueError(f"check {slot_id}: points must be positive, got {points!r}")

    def decorate(fn: Callable[[Any], None]) -> Callable[[Any], None]:
        old = _CHECKS.get(slot_id)
        if old is not None and (old.module, old.fn.__qualname__) != (fn.__module__, fn.__qualname__):
            raise ValueError(f"exercise {slot_id} already has a check: "
                             f"{old.module}.{old.fn.__qualname__}")
        _CHECKS[slot_id] = Check(slot_id, float(points), fn, fn.__module__, legacy)
        return fn

    return decorate


def legacy_check(slot_id: str, points: float):
    """A check not yet on the plain-data protocol: it receives the live function and runs
    only in process (never at a sandboxed autograde)."""
    return check(slot_id, points, legacy=True)


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




# --------------------------------------------------------------------------- seeds and parts

def seed_for(slot_id: str, secret: str | None = None) -> int:
    """The seed of ``slot_id``'s inputs: a hash of the course's secret and the slot, so a
    submission always meets the same inputs, and nobody without the secret knows them."""
    text = f"{secret or DEFAULT_SECRET}\0{slot_id}".encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "little")


class _Run:
    """What the running check has declared: its seed, the generators handed out, its parts."""

    def __init__(self, slot_id: str, seed: int, points: float):
        self.slot_id = slot_id
        self.seed = seed
        self.points = points
        self.generators = 0
        self.parts: list[Part] = []


_RUN: contextvars.ContextVar[_Run | None] = contextvars.ContextVar("mini_check_run", default=None)


def current_run() -> _Run | None:
    return _RUN.get()


@contextlib.contextmanager
def part(name: str, points: float):
    """A named share of the running check's points (see the module docstring).  A
    :class:`CheckFailed` inside costs these points and is recorded; the check goes on."""
    run = _RUN.get()
    if run is None:  # outside a runner (a check called directly): no partial credit
        yield
        return
    if not points > 0 or sum(p.max_points for p in run.parts) + points > run.points + 1e-9:
        raise ValueError(f"{run.slot_id}: part {name!r} ({points} points) exceeds the check's "
                         f"{run.points} points")
    try:
        yield
    except CheckFailed as e:
        run.parts.append(Part(name, 0.0, float(points), _message_of(e)))
        return
    run.parts.append(Part(name, float(points), float(points), ""))


def _message_of(e: CheckFailed) -> str:
    try:
        return str(e.message) if type(e.message) is str else "check failed"
    except BaseException:  # pragma: no cover - defensive
        return "check failed"


# --------------------------------------------------------------------------- the runner

def evaluate(slot_id: str, student, *, seed: int | None = None) -> Verdict:
    """Run the check of ``slot_id`` on ``student`` (a :class:`grader.checks.student.Student`)
    and return the :class:`Verdict`.  Never raises because of the student's code: what it
    raised, a stub, a missing name, a worker that timed out or died all become a failed
    verdict with a message that says what happened and what to do.  Raises ``KeyError`` only
    when no check exists for ``slot_id``."""
    from grader.checks.student import StudentMissing, StudentRaised, WorkerLost

    chk = get_check(slot_id)
    if chk.legacy:
        raise ValueError(f"the check of {slot_id} is not on the plain-data protocol yet; it runs "
                         f"only in process (run_in_process)")
    run = _Run(slot_id, seed_for(slot_id) if seed is None else int(seed), chk.points)
    token = _RUN.set(run)
    failure, status = None, "ok"
    try:
        chk.fn(student)
    except CheckFailed as e:
        failure = _message_of(e)
    except NotDone as e:
        failure = _not_done_message(slot_id, e.slot_id, e.message)
        run.parts = []  # nothing earned by a stub, wherever it was reached
    except StudentRaised as e:
        failure = _raised_message(slot_id, e.record)
        if e.record.not_implemented:
            run.parts = []
    except StudentMissing as e:
        failure = (f"{slot_id}: your notebook defines no {e.name!r} (the hidden test checks the "
                   f"function of that name): keep the name the exercise gives it")
    except WorkerLost as e:
        failure, status = f"{slot_id}: {e.message}", e.reason
    finally:
        _RUN.reset(token)
    earned_parts = sum(p.earned for p in run.parts)
    in_parts = sum(p.max_points for p in run.parts)
    rest = chk.points - in_parts
    points = earned_parts + (rest if failure is None else 0.0)
    points = round(points, 6)
    failed = [p for p in run.parts if p.earned < p.max_points]
    if failure is None and not failed:
        return Verdict(slot_id, True, "passed", chk.points, chk.points, list(run.parts), status)
    messages = [f"{p.name}: {p.message}" for p in failed]
    if failure is not None:
        messages.append(failure)
    if run.parts and points > 0:
        head = f"{slot_id}: {points:g} of {chk.points:g} points"
        text = head + "".join(f"\n- {m}" for m in messages)
    else:
        text = "\n".join(messages)
    return Verdict(slot_id, False, text, points, chk.points, list(run.parts), status)


def _not_done_message(slot_id: str, other: str | None, detail: str = "") -> str:
    if other and other != slot_id:
        extra = f": {detail}" if detail else ""
        return (f"{slot_id}: your code relies on exercise {other}, which is not available "
                f"here{extra}")
    return (f"{slot_id}: not implemented yet: write the function in its cell (replace "
            f"`raise NotImplementedError()`) and run the cell again")


def _raised_message(slot_id: str, record) -> str:
    """Words for an exception that escaped the student's code up to the runner."""
    if record.not_implemented:
        return _not_done_message(slot_id, record.slot_id, record.text())
    if record.is_a("SystemExit"):
        return (f"{slot_id}: your code called sys.exit()/exit() ({record.text()}); a function "
                f"should return its result, never exit the program")
    if record.is_a("KeyboardInterrupt"):
        return f"{slot_id}: your code raised KeyboardInterrupt (interrupted)"
    if record.is_a("RecursionError"):
        return (f"{slot_id}: your code recursed too deeply (RecursionError): is a recursive "
                f"call missing its base case?")
    if record.is_a("MemoryError"):
        return f"{slot_id}: your code ran out of memory (MemoryError)"
    return f"{slot_id}: your code raised {record.text()}"


def run_in_process(slot_id: str, impl: Any, *, seed: int | None = None) -> Verdict:
    """Run the check of ``slot_id`` on the live ``impl`` (a function or class) in this
    process, through the codec (:class:`grader.checks.student.InProcess`).  For trusted or
    self-graded code only: there is no timeout, no memory limit and no sandbox."""
    chk = get_check(slot_id)
    if chk.legacy:
        return _run_legacy(chk, impl)
    from grader.checks.student import InProcess, Student
    if not callable(impl):
        from grader.checks.helpers import describe
        return Verdict(slot_id, False, f"{slot_id}: expected your function, got {describe(impl)}",
                       0.0, chk.points)
    return evaluate(slot_id, Student(InProcess(impl), slot_id), seed=seed)


def _run_legacy(chk: Check, student_fn: Callable) -> Verdict:
    """A check that still receives the live function (see :func:`legacy_check`)."""
    from grader.checks.helpers import describe, describe_exception
    slot_id, max_points = chk.slot_id, chk.points

    def failed(message: str) -> Verdict:
        return Verdict(slot_id, False, message, 0.0, max_points)

    if not callable(student_fn):
        return failed(f"{slot_id}: expected your function, got {describe(student_fn)}")
    try:
        chk.fn(student_fn)
    except CheckFailed as e:
        return failed(_message_of(e))
    except NotImplementedError as e:
        other = getattr(e, "slot_id", None)
        if type(other) is str and other != slot_id:
            return failed(_not_done_message(slot_id, other, describe_exception(e)))
        if type(e).__name__ == "ExerciseNotImplemented" or (type(e) is NotImplementedError
                                                            and not e.args):
            return failed(_not_done_message(slot_id, None))
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
    except BaseException as e:  # noqa: BLE001 - anything else the student's code raised
        return failed(f"{slot_id}: your code raised {describe_exception(e)}")
    return Verdict(slot_id, True, "passed", max_points, max_points)
