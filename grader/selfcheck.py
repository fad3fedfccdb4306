"""``mini-course check``: run a learner's notebook and report, per exercise, the visible
tests and (where the repository has them) the hidden tests, with what to fix.

The notebook runs in a fresh kernel with nbclient, from its own folder (so the chapter's
``mini/`` copy in a workspace folder is the one imported, as in JupyterLab).  Then, in the
same kernel, the hidden-test code of the instructor's copy of the notebook (course/) runs
cell by cell, exactly what autograde would run, each failure caught and reported.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import nbformat

from grader.preprocessors import hidden_lines

__all__ = ["ExerciseResult", "check_notebook", "format_table"]

_MARK = "@@mini-course-check@@"


@dataclass
class ExerciseResult:
    grade_id: str
    slots: list[str]
    points: float
    visible: str      # "passed", "failed", "not run"
    hidden: str       # "passed", "failed", "-" (no hidden tests known)
    message: str

    @property
    def passed(self) -> bool:
        return self.visible == "passed" and self.hidden in ("passed", "-")


def _hidden_source(cell) -> str:
    out, inside = [], False
    for line in cell.source.split("\n"):
        if "BEGIN HIDDEN TESTS" in line:
            inside = True
        elif "END HIDDEN TESTS" in line:
            inside = False
        elif inside:
            out.append(line)
    import textwrap
    return textwrap.dedent("\n".join(out))


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
    """Execute ``nb_path`` and return one :class:`ExerciseResult` per graded test cell.
    Raises ``RuntimeError`` when the notebook cannot run at all (no kernel)."""
    from nbclient import NotebookClient
    from grader.course import RUN_CHECK_RE

    nb_path = Path(nb_path).resolve()
    nb = nbformat.read(str(nb_path), as_version=4)
    ref = nbformat.read(str(instructor_nb), as_version=4) if instructor_nb else nb
    ref_tests = _test_cells(ref)
    hidden = {gid: _hidden_source(c) for gid, c in ref_tests.items() if hidden_lines(c.source)}
    # The instructor copy's hidden tests run after the notebook, in the same kernel.
    probe = (
        "def __mini_course_check(__hidden):\n"
        "    import json as _j\n"
        "    _res = {}\n"
        "    for _gid, _src in __hidden.items():\n"
        "        try:\n"
        "            exec(compile(_src, '<hidden tests of ' + _gid + '>', 'exec'), globals())\n"
        "            _res[_gid] = ['passed', '']\n"
        "        except BaseException as _e:\n"
        "            try:\n"
        "                _m = str(_e)\n"
        "            except BaseException:\n"
        "                _m = ''\n"
        "            _res[_gid] = ['failed', type(_e).__name__ + (': ' + _m if _m else '')]\n"
        f"    print({_MARK!r} + _j.dumps(_res))\n"
        f"__mini_course_check(__import__('json').loads({json.dumps(hidden)!r}))\n"
    )
    nb.cells.append(nbformat.v4.new_code_cell(probe))
    client = NotebookClient(nb, timeout=timeout, allow_errors=True, kernel_name="python3",
                            resources={"metadata": {"path": str(nb_path.parent)}})
    client.execute()
    probe_cell = nb.cells.pop()
    verdicts: dict[str, list[str]] = {}
    for o in probe_cell.get("outputs", []):
        if o.get("output_type") == "stream":
            for line in o.get("text", "").splitlines():
                if line.startswith(_MARK):
                    verdicts = json.loads(line[len(_MARK):])
    mine = _test_cells(nb)
    results = []
    for gid, rcell in ref_tests.items():
        slots = [m.group(2) for line in hidden_lines(rcell.source) for m in RUN_CHECK_RE.finditer(line)]
        points = float(rcell.metadata["nbgrader"].get("points", 0) or 0)
        cell = mine.get(gid)
        if cell is None:
            results.append(ExerciseResult(gid, slots, points, "not run", "-",
                                          "this test cell is missing from your notebook"))
            continue
        err = _error_text(cell)
        visible = "failed" if err else "passed"
        message = err
        if gid in hidden:
            state, msg = verdicts.get(gid, ["failed", "the hidden tests did not run"])
            h = state
            if state == "failed" and not message:
                message = msg
        else:
            h = "-"
        results.append(ExerciseResult(gid, slots, points, visible, h, message))
    return results


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
    earned = sum(r.points for r in results if r.passed)
    total = sum(r.points for r in results)
    lines.append(f"total: {earned:g} / {total:g} points")
    # The table cuts messages short; a wrong answer (not a missing one) deserves the whole text.
    wrong = [r for r in results if not r.passed and "not implemented" not in r.message]
    for r in wrong:
        lines.append("")
        lines.append(f"{', '.join(r.slots) or r.grade_id}:")
        lines.extend("    " + part for part in r.message.splitlines())
    return "\n".join(line.rstrip() for line in lines)
