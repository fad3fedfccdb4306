"""Hidden-test verdicts for a submitted notebook, computed from plain data.

:func:`grade_notebook` is the trusted grader's half of a hidden test: it reads which
exercises the notebook's test cells check (``run_check("NN.x", name)`` in their hidden
regions -- found by that call, whatever the import line looks like), starts the worker
(:mod:`grader.workerproc`) in the sandbox with the notebook's setup and answer cells as text
and the chapter's student ``mini``, runs each check against it with inputs drawn from the
course's secret seed, and returns the points of every test cell.  Nothing the student wrote
is ever unpickled or imported in this process.

Which cells the worker runs: the setup cells (grade id ``NN_setup`` or ``setup``; their text from the
instructor's source notebook) and every answer cell (nbgrader ``solution: true``) in the
order of the submitted notebook.  Helpers an answer needs belong in its answer cell.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from grader.checks import Verdict, evaluate, get_check, seed_for
from grader.checks.student import Student, WorkerLost
from grader.sandbox import Limits, Sandbox

__all__ = ["HiddenTest", "CellVerdict", "NotebookGrade", "hidden_tests", "answer_cells",
           "grade_notebook", "RUN_CHECK_RE"]

#: ``run_check("03.compact_strides", compact_strides)``: the slot, and the name it checks.
RUN_CHECK_RE = re.compile(
    r"""run_check\(\s*(["'])(\d\d\.[A-Za-z0-9_]+)\1\s*(?:,\s*([A-Za-z_][A-Za-z0-9_]*))?""")
BEGIN_HIDDEN = "BEGIN HIDDEN TESTS"
END_HIDDEN = "END HIDDEN TESTS"


def split_hidden(source: str) -> tuple[list[str], list[str]]:
    """(the lines outside the hidden-test regions, the lines inside them), markers left out."""
    outside, inside, hidden = [], [], False
    for line in source.split("\n"):
        if BEGIN_HIDDEN in line:
            hidden = True
        elif END_HIDDEN in line:
            hidden = False
        else:
            (inside if hidden else outside).append(line)
    return outside, inside


def hidden_region_lines(source: str) -> list[str]:
    """The stripped, non-empty lines inside a cell's hidden-test regions."""
    return [line.strip() for line in split_hidden(source)[1] if line.strip()]


@dataclass(frozen=True)
class HiddenTest:
    """An autograded test cell and the exercises its hidden region checks."""
    grade_id: str
    points: float
    slots: tuple[tuple[str, str | None], ...]   # (slot, name the notebook binds it to)


def _meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


def hidden_tests(nb) -> list[HiddenTest]:
    """The test cells (grade, not solution) of ``nb`` whose hidden region calls
    ``run_check``; read them from the instructor's notebook, never from a submission."""
    out = []
    for cell in nb.cells:
        meta = _meta(cell)
        if cell.get("cell_type") != "code" or not meta.get("grade") or meta.get("solution"):
            continue
        slots = tuple((m.group(2), m.group(3)) for line in hidden_region_lines(cell.source)
                      for m in RUN_CHECK_RE.finditer(line))
        if slots:
            out.append(HiddenTest(str(meta["grade_id"]), float(meta.get("points") or 0), slots))
    return out


def _is_setup(grade_id: str) -> bool:
    return grade_id == "setup" or grade_id.endswith("_setup")


def answer_cells(submitted, source=None) -> list[dict]:
    """The cells the worker runs, in the submitted notebook's order: setup cells (their text
    from ``source``, the instructor's notebook, when given) and answer cells (the student's
    text).  A setup cell missing from the submission is run first."""
    setups = {}
    if source is not None:
        for cell in source.cells:
            gid = str(_meta(cell).get("grade_id") or "")
            if cell.get("cell_type") == "code" and _is_setup(gid):
                setups[gid] = cell.source
    out, seen = [], set()
    for cell in submitted.cells:
        if cell.get("cell_type") != "code":
            continue
        meta = _meta(cell)
        gid = str(meta.get("grade_id") or "")
        if _is_setup(gid) and not meta.get("solution"):
            if source is not None and gid not in setups:
                continue  # not a setup cell of the assignment: the student's own label
            out.append({"grade_id": gid, "source": setups.get(gid, cell.source)})
            seen.add(gid)
        elif meta.get("solution") is True:
            out.append({"grade_id": gid, "source": cell.source})
    missing = [{"grade_id": g, "source": s} for g, s in setups.items() if g not in seen]
    return missing + out


@dataclass
class CellVerdict:
    """The points of one test cell: the sum of its checks' verdicts."""
    grade_id: str
    points: float
    max_points: float
    verdicts: list[Verdict] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(v.passed for v in self.verdicts)

    @property
    def message(self) -> str:
        return "\n".join(v.message for v in self.verdicts if not v.passed)


@dataclass
class NotebookGrade:
    cells: dict[str, CellVerdict]
    statuses: list[str]            # why workers ended early: "timeout", "memory", "died"...
    load_report: list[dict]
    seconds: float

    @property
    def status(self) -> str:
        """``ok``, or the worst thing that happened to the student's code."""
        for s in ("memory", "timeout", "died", "protocol"):
            if s in self.statuses:
                return "crashed" if s in ("died", "protocol") else s
        return "ok"


def grade_notebook(submitted, source, *, sandbox: Sandbox, mini_dir: Path | None,
                   secret: str | None = None, check_timeout: float = 60.0,
                   limits: Limits = Limits(), notebook_budget: float | None = None,
                   cache_dir: Path | None = None, log=None,
                   cells: list[dict] | None = None, slots=None) -> NotebookGrade:
    """Verdicts of every hidden test of ``source`` (the instructor's notebook) for the
    answers in ``submitted`` (see the module docstring).  ``notebook_budget`` bounds the
    seconds spent on the whole notebook; checks after it is spent fail as timed out.
    ``cells``: what the worker runs, when not ``answer_cells(submitted, source)`` (the
    learner's own checks add the visible test cells, :mod:`grader.own`); ``slots``: run only
    the hidden tests that check one of these exercises."""
    from grader.workerproc import WorkerBackend

    start = time.monotonic()
    tests = hidden_tests(source)
    if slots is not None:
        tests = [t for t in tests if any(s in slots for s, _ in t.slots)]
    if cells is None:
        cells = answer_cells(submitted, source)
    backend = WorkerBackend(sandbox, mini_dir=mini_dir, cells=cells,
                            limits=limits, check_timeout=check_timeout, cache_dir=cache_dir)
    cells: dict[str, CellVerdict] = {}
    try:
        for test in tests:
            verdicts = []
            for slot, name in test.slots:
                chk = get_check(slot)
                left = None if notebook_budget is None else notebook_budget - (time.monotonic() - start)
                if left is not None and left <= 0:
                    verdicts.append(Verdict(slot, False, f"{slot}: not checked: the grader's time "
                                            f"for this notebook ({notebook_budget:g} s) ran out",
                                            0.0, chk.points, status="timeout"))
                    backend.statuses.append("timeout")
                    continue
                budget = check_timeout if left is None else min(check_timeout, left)
                backend.begin_check(budget)
                student = Student(backend, slot, name)
                try:
                    verdict = evaluate(slot, student, seed=seed_for(slot, secret))
                except WorkerLost as e:  # (evaluate turns these into verdicts; belt and braces)
                    verdict = Verdict(slot, False, f"{slot}: {e.message}", 0.0, chk.points,
                                      status=e.reason)
                verdicts.append(verdict)
                if log is not None:
                    log(f"{slot}: {verdict.points:g}/{verdict.max_points:g}")
            cells[test.grade_id] = CellVerdict(test.grade_id, sum(v.points for v in verdicts),
                                               sum(v.max_points for v in verdicts), verdicts)
    finally:
        report = backend.worker.load_report
        backend.close()
        if backend.worker.memory_events and "memory" not in backend.statuses:
            backend.statuses.append("memory")   # the limit was hit, even if the worker lived
    return NotebookGrade(cells, list(backend.statuses), report, time.monotonic() - start)
