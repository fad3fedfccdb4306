"""What every chapter's notebook builder (``course/build_chNN_topic.py``) shares: the cell
factories with their nbgrader metadata, the exercise cells taken from mini's references,
the stable cell ids, and the write / ``--check`` entry point.

A builder keeps only its chapter's content::

    from grader.checks.ch03_strides import POINTS
    from grader.notebook_build import Cells, exercise_sources, finish_notebook, write_or_check

    cells = Cells("03", POINTS)
    nb = finish_notebook([cells.markdown("# Strides"), cells.demo("setup", SETUP), ...], "ch03")
    sys.exit(write_or_check(nb, NOTEBOOK, sys.argv[1:], script=__file__))

The points of a graded cell are the ones its check registers (the ``POINTS`` dict of
``grader/checks/chNN_topic.py``), so the notebook and the grader cannot disagree.

This module needs only :mod:`nbformat` (no running Jupyter, no kernel).
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterable, Mapping

import nbformat

from grader.checks import solution_grade_id, test_grade_id

__all__ = ["nbgrader_metadata", "markdown_cell", "free_cell", "demo_cell", "solution_cell",
           "test_cell", "Cells", "exercise_sources", "finish_notebook", "render",
           "write_or_check"]

ROOT = Path(__file__).resolve().parents[1]

NOTEBOOK_METADATA = {
    "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
    "language_info": {"name": "python"},
}


# --------------------------------------------------------------------------- cell factories

def nbgrader_metadata(**kw) -> dict:
    """A cell's ``metadata`` with the nbgrader (schema 3) flags, all off unless given."""
    base = {"schema_version": 3, "grade": False, "solution": False, "locked": False, "task": False}
    base.update(kw)
    return {"nbgrader": base}


def markdown_cell(text: str):
    return nbformat.v4.new_markdown_cell(text.strip("\n"))


def free_cell(source: str):
    """A code cell the student may edit freely (not graded)."""
    return nbformat.v4.new_code_cell(source.strip("\n"))


def demo_cell(grade_id: str, source: str):
    """A locked code cell (read-only for students: setup and demos); ``grade_id`` is the
    complete id (e.g. ``"03_setup"``)."""
    return nbformat.v4.new_code_cell(source.strip("\n"),
                                     metadata=nbgrader_metadata(locked=True, grade_id=grade_id))


def solution_cell(slot: str, source: str):
    """The student's cell of ``slot`` (its solution region is blanked at release)."""
    return nbformat.v4.new_code_cell(
        source.strip("\n"), metadata=nbgrader_metadata(solution=True, grade_id=solution_grade_id(slot)))


def test_cell(slot: str, fn_name: str, visible: str, points: int | float):
    """The autograded cell of ``slot``: the ``visible`` checks, then the hidden test that
    runs the slot's check on the student's ``fn_name``; worth ``points``."""
    source = (visible.strip("\n") + "\n\n### BEGIN HIDDEN TESTS\n"
              f'from grader.hidden import run_check; run_check("{slot}", {fn_name})\n'
              "### END HIDDEN TESTS")
    return nbformat.v4.new_code_cell(source, metadata=nbgrader_metadata(
        grade=True, locked=True, grade_id=test_grade_id(slot), points=points))


test_cell.__test__ = False  # not a pytest test


class Cells:
    """The cell factories of one chapter: ``chapter`` (``"03"``) prefixes the demo cells'
    grade ids and ``points`` (``{slot: points}``, the checks' ``POINTS``) prices the test
    cells."""

    __test__ = False  # not a pytest test class

    def __init__(self, chapter: str, points: Mapping[str, int | float]):
        self.chapter = chapter
        self.points = points

    @staticmethod
    def markdown(text: str):
        return markdown_cell(text)

    @staticmethod
    def free(source: str):
        return free_cell(source)

    def demo(self, grade_id: str, source: str):
        return demo_cell(f"{self.chapter}_{grade_id}", source)

    @staticmethod
    def solution(slot: str, source: str):
        return solution_cell(slot, source)

    def test(self, slot: str, fn_name: str, visible: str):
        return test_cell(slot, fn_name, visible, self.points[slot])


# --------------------------------------------------------------------------- exercise cells

def _exercise_slot(decorator) -> str | None:
    """The slot of an ``@exercise("NN.name", ...)`` decorator, else None."""
    if (isinstance(decorator, ast.Call) and getattr(decorator.func, "id", None) == "exercise"
            and decorator.args and isinstance(decorator.args[0], ast.Constant)):
        return decorator.args[0].value
    return None


def exercise_sources(references: Path | Iterable[Path],
                     slots: Iterable[str] | None = None) -> dict[str, tuple[str, str]]:
    """``{slot: (function name, cell source)}`` for the ``@exercise`` functions of the
    reference module(s): each function from its ``def`` line to its ``### END SOLUTION``
    line, decorated with ``@implement(slot)`` instead of ``@exercise(...)``.

    With ``slots``, only those slots are kept, and a slot that no reference defines is an
    error (``SystemExit``)."""
    paths = [references] if isinstance(references, (str, Path)) else list(references)
    wanted = None if slots is None else set(slots)
    out = {}
    for path in paths:
        source = Path(path).read_text()
        lines = source.splitlines()
        for node in ast.parse(source).body:
            if not isinstance(node, ast.FunctionDef):
                continue
            for dec in node.decorator_list:
                slot = _exercise_slot(dec)
                if slot is None or (wanted is not None and slot not in wanted):
                    continue
                start = node.lineno - 1  # the def line (decorators are replaced)
                end = next(i for i in range(node.lineno, len(lines))
                           if lines[i].strip() == "### END SOLUTION")
                out[slot] = (node.name, "\n".join([f'@implement("{slot}")'] + lines[start:end + 1]))
    if wanted is not None:
        missing = sorted(wanted - set(out))
        if missing:
            raise SystemExit(f"no reference found in mini for {missing}")
    return out


# --------------------------------------------------------------------------- the notebook

def finish_notebook(cells: list, id_prefix: str) -> nbformat.NotebookNode:
    """The notebook of ``cells``, each with a stable id ``{id_prefix}-NN`` (so rebuilding
    gives the same file), with the Python 3 kernel's metadata and no outputs."""
    for i, cell in enumerate(cells):
        cell["id"] = f"{id_prefix}-{i:02d}"
    nb = nbformat.v4.new_notebook()
    nb.cells = cells
    nb.metadata = {key: dict(value) for key, value in NOTEBOOK_METADATA.items()}
    return nb


def render(nb) -> str:
    """The file's text, ending with a newline."""
    text = nbformat.writes(nb)
    return text if text.endswith("\n") else text + "\n"


def write_or_check(nb, path: Path, argv: list[str], script: str | Path | None = None) -> int:
    """A builder's ``main``: validate ``nb`` and write it to ``path``; with ``--check`` in
    ``argv``, write nothing and return 1 when the file differs (``script`` names the builder
    in the message)."""
    nbformat.validate(nb)
    text = render(nb)
    path = Path(path)
    if "--check" in argv:
        current = path.read_text() if path.exists() else ""
        if current != text:
            print(f"{path} is out of date: run python {_shown(script)}")
            return 1
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(f"wrote {path} ({len(nb.cells)} cells)")
    return 0


def _shown(script) -> str:
    if script is None:
        return "its builder"
    script = Path(script).resolve()
    try:
        return str(script.relative_to(ROOT))
    except ValueError:
        return str(script)
