"""``mini-course check``: run a learner's notebook and report, per exercise, the visible
tests and (where the repository has them) the hidden tests, with what to fix.

The notebook runs in a fresh kernel with nbclient, from its own folder (so the chapter's
``mini/`` copy in a workspace folder is the one imported, as in JupyterLab).  The hidden
tests are graded exactly as at autograde (:func:`grader.grading.grade_notebook`: the
notebook's setup and answer cells run in a separate worker process, and the checks compare
what comes back), except that nothing is sandboxed: it is the learner's own code on the
learner's machine.  The instructor's copy of the notebook (course/) says which checks exist.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import nbformat

__all__ = ["ExerciseResult", "check_notebook", "format_table", "score"]


@dataclass
class ExerciseResult:
    grade_id: str
    slots: list[str]
    points: float     # what the cell is worth
    visible: str      # "passed", "failed", "not run"
    hidden: str       # "passed", "failed", "partial", "-" (no hidden tests known)
    message: str
    earned: float = 0.0

    @property
    def passed(self) -> bool:
        return self.visible == "passed" and self.hidden in ("passed", "-")


def _test_cells(nb) -> dict[str, object]:
    out = {}
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            out[meta["grade_id"]] = cell
    return out


def _error_text(cell) -> str:
    for o in cell.get("outputs", []):
        if o.get("output_type") == "error":
            ename, ev = str(o.get("ename", "Error")), str(o.get("evalue", "")).strip()
            if ename == "NotImplementedError" and not ev:
                return "not implemented yet: write your answer in its cell and run it"
            return f"{ename}: {ev}" if ev else ename
    return ""


def check_notebook(nb_path: str | Path, instructor_nb: str | Path | None = None,
                   timeout: int = 120) -> list[ExerciseResult]:
    """Execute ``nb_path`` and grade it; one :class:`ExerciseResult` per graded test cell.
    Raises ``RuntimeError`` when the notebook cannot run at all (no kernel)."""
    from nbclient import NotebookClient

    from grader.grading import grade_notebook, hidden_tests
    from grader.preprocessors import remove_hidden
    from grader.sandbox import Sandbox

    nb_path = Path(nb_path).resolve()
    submitted = nbformat.read(str(nb_path), as_version=4)
    ref = nbformat.read(str(instructor_nb), as_version=4) if instructor_nb else submitted
    run = nbformat.read(str(nb_path), as_version=4)
    for cell in run.cells:  # the hidden tests are graded below, not in the kernel
        if cell.cell_type == "code":
            cell.source = remove_hidden(cell.source)
    client = NotebookClient(run, timeout=timeout, allow_errors=True, kernel_name="python3",
                            resources={"metadata": {"path": str(nb_path.parent)}})
    client.execute()
    mini_dir = nb_path.parent / "mini"
    grade = None
    if hidden_tests(ref):
        grade = grade_notebook(submitted, ref, sandbox=Sandbox.none(),
                               mini_dir=mini_dir if (mini_dir / "__init__.py").exists() else None,
                               check_timeout=float(timeout))
    mine = _test_cells(run)
    results = []
    for test_gid, rcell in _test_cells(ref).items():
        points = float(rcell.metadata["nbgrader"].get("points", 0) or 0)
        verdict = grade.cells.get(test_gid) if grade is not None else None
        slots = [v.slot_id for v in verdict.verdicts] if verdict is not None else []
        cell = mine.get(test_gid)
        if cell is None:
            results.append(ExerciseResult(test_gid, slots, points, "not run", "-",
                                          "this test cell is missing from your notebook"))
            continue
        err = _error_text(cell)
        visible = "failed" if err else "passed"
        message, hidden, earned = err, "-", (0.0 if err else points)
        if verdict is not None:
            earned = verdict.points
            hidden = "passed" if verdict.passed else ("partial" if verdict.points > 0 else "failed")
            if not verdict.passed and not message:
                message = verdict.message
        results.append(ExerciseResult(test_gid, slots, points, visible, hidden, message, earned))
    return results


def score(results: list[ExerciseResult]) -> tuple[float, float]:
    """``(points earned, points possible)`` of a checked notebook."""
    earned = sum(r.earned if r.hidden != "-" else (r.points if r.passed else 0.0) for r in results)
    return earned, sum(r.points for r in results)


def format_table(results: list[ExerciseResult], width: int = 100) -> str:
    rows = [("exercise", "points", "visible", "hidden", "what to fix")]
    for r in results:
        label = ", ".join(r.slots) or r.grade_id
        msg = r.message.replace("\n", " ")
        if len(msg) > width:
            msg = msg[: width - 3] + "..."
        rows.append((label, f"{r.points:g}", r.visible, r.hidden, msg if not r.passed else ""))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = []
    for row in rows:
        lines.append("  ".join(row[i].ljust(widths[i]) for i in range(4)) + "  " + row[4])
    earned, total = score(results)
    lines.append(f"total: {earned:g} / {total:g} points")
    # The table cuts messages short; a wrong answer (not a missing one) deserves the whole text.
    wrong = [r for r in results if not r.passed and "not implemented" not in r.message]
    for r in wrong:
        lines.append("")
        lines.append(f"{', '.join(r.slots) or r.grade_id}:")
        lines.extend("    " + part for part in r.message.splitlines())
    return "\n".join(line.rstrip() for line in lines)
