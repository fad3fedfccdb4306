"""Chapter notebooks from their sources (``mini-course build``).

Each chapter notebook is written as one Markdown document in jupytext's Markdown format,
``course/sources/NN_topic/<name>.md``, and built into the nbgrader source notebook
``course/NN_topic/<name>.ipynb``.  The sources live outside the chapter folders because
nbgrader copies a chapter folder whole into the student release, and a source holds the
self-check answers and the test cells.  ``course/AUTHORING.md`` is the author's guide.

In a source, prose is Markdown and every fenced ``python`` block is a code cell.  Its info
string says what kind of cell it is (jupytext reads ``key="value"`` there as cell metadata):

- ```` ```python ```` (nothing more): a free cell the student may edit (not graded);
- ```` ```python demo="NAME" ````: a locked cell (setup, demos), grade id ``NN_NAME``;
- ```` ```python exercise="NN.slot" ````: the student's exercise cell, filled from mini's
  reference of the slot (its ``def`` line to ``### END SOLUTION``, ``@exercise`` turned into
  ``@implement``); lines written in the source's block go above it;
- ```` ```python solution="NN.slot" ````: a solution cell written in the source, for a graded
  slot that has no reference in mini (a self-check question, a class to write);
- ```` ```python test="NN.slot" ````: the slot's autograded cell: the block's visible checks,
  then the hidden test generated from the slot id (:func:`hidden_tests`), worth the points
  of the slot's check.

In Markdown, ``{{points NN.slot}}`` becomes "8 points", and a table right after the line
``<!-- exercise table -->`` gets a ``#`` column and a ``points`` column (see
:func:`exercise_table`).  Points always come from the ``POINTS`` dict of
``grader/checks/chNN_topic.py``: an author never types them.

Cell ids are ``chNN-MM`` by position and grade ids are named, so a rebuild gives the same
file.  This module needs jupytext and nbformat; no Jupyter server, no kernel.
"""
from __future__ import annotations

import ast
import importlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping

import nbformat

from grader.checks import solution_grade_id, test_grade_id

__all__ = ["SOURCES", "SourceError", "hidden_tests", "nbgrader_metadata", "exercise_sources",
           "reference_cell", "exercise_table", "build_notebook", "chapter_sources",
           "notebook_for", "build_chapter", "render", "source_slots", "check_chapter_slots"]

SOURCES = "sources"          # course/sources/NN_topic/<name>.md
SOURCE_FORMAT = "md"         # jupytext's Markdown format
CELL_KINDS = ("demo", "exercise", "solution", "test")
# Cell metadata that jupytext writes about the text's layout (blank lines between cells)
JUPYTEXT_LAYOUT = ("lines_to_next_cell", "lines_to_end_of_cell_marker", "cell_marker",
                   "skipline", "noskipline")
NOTEBOOK_METADATA = {
    "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
    "language_info": {"name": "python"},
}
SLOT_RE = re.compile(r"^(\d\d)\.[A-Za-z0-9_]+$")
POINTS_RE = re.compile(r"\{\{\s*points\s+([^}\s]*)\s*\}\}")
TABLE_MARK_RE = re.compile(r"^<!--\s*exercise table\b.*-->\s*$")
TABLE_SLOT_RE = re.compile(r"^`(\d\d\.[A-Za-z0-9_]+)`(?:\s*…\s*`(\d\d\.[A-Za-z0-9_]+)`)?$")


class SourceError(ValueError):
    """A chapter source that cannot be built; the message names the file and the cell."""


def hidden_tests(slot: str, fn_name: str) -> str:
    """The hidden-test region of the test cell of ``slot``, which checks ``fn_name``.
    The one place that writes it."""
    return ("### BEGIN HIDDEN TESTS\n"
            f'from grader.hidden import run_check; run_check("{slot}", {fn_name})\n'
            "### END HIDDEN TESTS")


def nbgrader_metadata(**kw) -> dict:
    """A cell's ``metadata`` with the nbgrader (schema 3) flags, all off unless given."""
    base = {"schema_version": 3, "grade": False, "solution": False, "locked": False, "task": False}
    base.update(kw)
    return {"nbgrader": base}


# --------------------------------------------------------------------------- mini's references

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


def reference_cell(slot: str) -> tuple[str, str] | None:
    """``(function name, cell source)`` of mini's reference of ``slot``, or None when mini
    has no reference for it (the module that owns the slot is found through
    :func:`mini.exercises.slots`)."""
    from mini.exercises import slots
    info = slots().get(slot)
    if info is None:
        return None
    path = Path(importlib.import_module(info.module).__file__)
    return exercise_sources(path, [slot])[slot]


# --------------------------------------------------------------------------- one notebook

@dataclass
class _Cell:
    kind: str               # markdown, free, demo, exercise, solution, test
    source: str
    value: str = ""         # the demo name or the slot
    where: str = ""         # for messages: "cell 7 (```python test=...)"


def _parse(text: str, name: str) -> list[_Cell]:
    import jupytext
    nb = jupytext.reads(text, fmt=SOURCE_FORMAT)
    cells = []
    for i, cell in enumerate(nb.cells, 1):
        # jupytext's own layout notes (blank lines around a cell) are not the author's
        meta = {k: v for k, v in cell.metadata.items() if k not in JUPYTEXT_LAYOUT}
        first = cell.source.strip().splitlines()[0][:60] if cell.source.strip() else "(empty)"
        where = f"{name}: cell {i} ({first!r})"
        if cell.cell_type == "markdown":
            if meta:
                raise SourceError(f"{where}: Markdown cells take no metadata, got {meta}")
            cells.append(_Cell("markdown", cell.source, where=where))
            continue
        if cell.cell_type != "code":
            raise SourceError(f"{where}: only Markdown and python cells are allowed, "
                              f"got a {cell.cell_type} cell")
        kinds = [k for k in meta if k in CELL_KINDS]
        unknown = sorted(set(meta) - set(CELL_KINDS))
        if unknown or len(kinds) > 1:
            raise SourceError(f"{where}: a python block takes at most one of "
                              f"{', '.join(k + '=' for k in CELL_KINDS)}; got {meta}")
        if not kinds:
            cells.append(_Cell("free", cell.source, where=where))
            continue
        kind = kinds[0]
        value = meta[kind]
        if not isinstance(value, str) or not value:
            raise SourceError(f"{where}: {kind}= needs a name in quotes, got {value!r}")
        cells.append(_Cell(kind, cell.source, value, where))
    return cells


def _defined_name(source: str, where: str) -> str:
    """The first function or class a solution cell defines (the name its test checks)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise SourceError(f"{where}: not valid Python: {e}") from None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            return node.name
    raise SourceError(f"{where}: a solution cell defines the function or class its test checks")


def _points_text(points: float) -> str:
    return f"{points:g} point" + ("" if points == 1 else "s")


def exercise_table(rows: list[str], points: Mapping[str, float], order: list[str],
                   exercises: Iterable[str] = (), where: str = "") -> list[str]:
    """The "What you build" table: the author's Markdown table (header, separator, one row
    per exercise) with a ``#`` column put first and a ``points`` column put last.

    A row's first column names its slot (`` `03.offset` ``) or a run of slots in notebook
    order ``order`` (`` `02.add_vjp` … `02.relu_vjp` ``, numbered ``1–7``).  Every slot of
    ``exercises`` (those filled from mini) is named.  At most one row leaves the column
    empty: it stands for the graded slots no row names (the self-check questions) and gets
    their points, without a number."""
    def cells(line):
        return [c.strip() for c in line.strip().strip("|").split("|")]

    def row(values):
        return "|" + "|".join(f" {v} " if v else " " for v in values) + "|"

    if len(rows) < 3:
        raise SourceError(f"{where}: the exercise table needs a header, a separator and rows")
    out = [row(["#"] + cells(rows[0]) + ["points"]),
           "|---|" + "|".join(cells(rows[1])) + "|-------:|"]
    number, named, rest_row = 1, set(), None
    body = []
    for line in rows[2:]:
        first, *others = cells(line)
        if not first:
            if rest_row is not None:
                raise SourceError(f"{where}: only one row of the exercise table may leave "
                                  f"its slot empty")
            rest_row = len(body)
            body.append(others)
            continue
        m = TABLE_SLOT_RE.match(first)
        if not m:
            raise SourceError(f"{where}: the first column of the exercise table names a slot "
                              f"(`03.offset`) or a run (`02.add_vjp` … `02.relu_vjp`); "
                              f"got {first!r}")
        lo, hi = m.group(1), m.group(2) or m.group(1)
        for s in (lo, hi):
            if s not in order:
                raise SourceError(f"{where}: the exercise table names {s}, which has no "
                                  f"exercise or solution cell in this notebook")
        run = order[order.index(lo):order.index(hi) + 1]
        if not run:
            raise SourceError(f"{where}: {lo} … {hi} is not in notebook order")
        if named & set(run):
            raise SourceError(f"{where}: the exercise table names {sorted(named & set(run))} twice")
        named.update(run)
        label = str(number) if len(run) == 1 else f"{number}–{number + len(run) - 1}"
        number += len(run)
        body.append([label, first] + others + [f"{sum(points[s] for s in run):g}"])
    unnamed = [s for s in exercises if s not in named]
    if unnamed:
        raise SourceError(f"{where}: the exercise table leaves out the exercises {unnamed}")
    rest = [s for s in points if s not in named]
    if rest_row is None and rest:
        raise SourceError(f"{where}: the exercise table leaves out {rest}: name them, or add "
                          f"one row with an empty slot column for them")
    if rest_row is not None:
        if not rest:
            raise SourceError(f"{where}: the table's row with an empty slot stands for no slot")
        body[rest_row] = ["", ""] + body[rest_row] + [f"{sum(points[s] for s in rest):g}"]
    return out + [row(values) for values in body]


def _render_markdown(cell: _Cell, points: Mapping[str, float], order: list[str],
                     exercises: set[str], own: Mapping[str, float] | None = None) -> str:
    """``{{points}}`` may name any slot of the chapter; the exercise table lists this
    notebook's slots (``own``)."""
    def substitute(m):
        slot = m.group(1)
        if slot not in points:
            raise SourceError(f"{cell.where}: {{{{points {slot}}}}} names no graded slot of "
                              f"this chapter ({', '.join(points)})")
        return _points_text(points[slot])

    lines = POINTS_RE.sub(substitute, cell.source).split("\n")
    out, i = [], 0
    while i < len(lines):
        if TABLE_MARK_RE.match(lines[i]):
            j = i + 1
            while j < len(lines) and lines[j].lstrip().startswith("|"):
                j += 1
            out += exercise_table(lines[i + 1:j], points if own is None else own, order,
                                  exercises, cell.where)
            i = j
        else:
            out.append(lines[i])
            i += 1
    return "\n".join(out)


def build_notebook(text: str, chapter: str, *, points: Mapping[str, float] | None = None,
                   reference: Callable[[str], tuple[str, str] | None] = reference_cell,
                   name: str = "<source>") -> nbformat.NotebookNode:
    """The nbgrader source notebook of one chapter source ``text`` (jupytext Markdown).

    ``chapter`` is the chapter folder (``"03_strides"``); ``points`` default to the
    ``POINTS`` of ``grader/checks/chNN_topic.py`` and ``reference(slot)`` gives mini's
    reference cell (tests pass their own).  Raises :class:`SourceError` naming ``name``
    and the cell when the source breaks a rule of the module docstring."""
    number = chapter[:2]
    if points is None:
        try:
            points = importlib.import_module(f"grader.checks.ch{chapter}").POINTS
        except (ImportError, AttributeError):
            raise SourceError(f"{name}: chapter {chapter} needs grader/checks/ch{chapter}.py "
                              f"with a POINTS dict (the points of its graded slots)") from None
    cells = _parse(text, name)

    # First the code cells: they give each slot its function name and its place.
    fn_names: dict[str, str] = {}
    order: list[str] = []
    exercises: set[str] = set()     # the slots filled from mini
    tested: set[str] = set()
    demos: set[str] = set()
    code: dict[int, nbformat.NotebookNode] = {}
    for i, cell in enumerate(cells):
        body = cell.source.strip("\n")
        if cell.kind == "markdown":
            continue
        if cell.kind in ("exercise", "solution", "test"):
            slot = cell.value
            if not SLOT_RE.match(slot) or slot[:2] != number:
                raise SourceError(f"{cell.where}: {slot!r} is not a slot of chapter {number} "
                                  f"(slots look like '{number}.name')")
            if slot not in points:
                raise SourceError(f"{cell.where}: {slot} has no check in "
                                  f"grader/checks/ch{chapter}.py (POINTS: {', '.join(points)})")
        if cell.kind == "free":
            code[i] = nbformat.v4.new_code_cell(body)
        elif cell.kind == "demo":
            if not re.fullmatch(r"[a-z0-9_]+", cell.value) or cell.value in demos:
                raise SourceError(f"{cell.where}: demo names are unique lower_case words; "
                                  f"got {cell.value!r}")
            demos.add(cell.value)
            code[i] = nbformat.v4.new_code_cell(body, metadata=nbgrader_metadata(
                locked=True, grade_id=f"{number}_{cell.value}"))
        elif cell.kind in ("exercise", "solution"):
            slot = cell.value
            if slot in fn_names:
                raise SourceError(f"{cell.where}: {slot} already has its cell")
            ref = reference(slot)
            if cell.kind == "exercise":
                if ref is None:
                    raise SourceError(f"{cell.where}: mini has no reference for {slot}: mark "
                                      f"it with @exercise in mini, or write the cell as "
                                      f'solution="{slot}"')
                fn_names[slot], filled = ref
                exercises.add(slot)
                body = f"{body}\n\n{filled}" if body else filled
            else:
                if ref is not None:
                    raise SourceError(f"{cell.where}: mini holds the reference of {slot}: "
                                      f'write exercise="{slot}" and let the build fill it')
                if "### BEGIN SOLUTION" not in body or "### END SOLUTION" not in body:
                    raise SourceError(f"{cell.where}: a solution cell marks its answer with "
                                      f"### BEGIN SOLUTION / ### END SOLUTION")
                fn_names[slot] = _defined_name(body, cell.where)
            order.append(slot)
            code[i] = nbformat.v4.new_code_cell(body, metadata=nbgrader_metadata(
                solution=True, grade_id=solution_grade_id(slot)))
        else:  # test
            slot = cell.value
            if slot not in fn_names:
                raise SourceError(f"{cell.where}: the test of {slot} comes after its "
                                  f'exercise="{slot}" (or solution=) cell')
            if slot in tested:
                raise SourceError(f"{cell.where}: {slot} already has a test cell")
            tested.add(slot)
            source = (f"{body}\n\n" if body else "") + hidden_tests(slot, fn_names[slot])
            code[i] = nbformat.v4.new_code_cell(source, metadata=nbgrader_metadata(
                grade=True, locked=True, grade_id=test_grade_id(slot), points=points[slot]))
    # A chapter may span several notebooks: this one holds the slots its cells name, and
    # build_chapter checks that the chapter's notebooks hold every slot of POINTS once.
    own = {s: p for s, p in points.items() if s in fn_names or s in tested}
    missing = [s for s in own if s not in fn_names or s not in tested]
    if missing or not own:
        raise SourceError(f"{name}: every graded slot of chapter {number} needs an exercise "
                          f"(or solution) cell and a test cell; missing for "
                          f"{missing or list(points)}")

    out = []
    for i, cell in enumerate(cells):
        if cell.kind == "markdown":
            out.append(nbformat.v4.new_markdown_cell(
                _render_markdown(cell, points, order, exercises, own).strip("\n")))
        else:
            out.append(code[i])
    for i, cell in enumerate(out):
        cell["id"] = f"ch{number}-{i:02d}"
    nb = nbformat.v4.new_notebook()
    nb.cells = out
    nb.metadata = {key: dict(value) for key, value in NOTEBOOK_METADATA.items()}
    nbformat.validate(nb)
    return nb


def source_slots(text: str, name: str = "<source>") -> set[str]:
    """The graded slots a source's test cells name."""
    return {c.value for c in _parse(text, name) if c.kind == "test"}


def check_chapter_slots(chapter: str, sources: list[Path],
                        points: Mapping[str, float] | None = None) -> None:
    """Every slot of the chapter's ``POINTS`` is graded in exactly one of its notebooks."""
    if points is None:
        try:
            points = importlib.import_module(f"grader.checks.ch{chapter}").POINTS
        except (ImportError, AttributeError):
            return              # build_notebook says what is missing
    where: dict[str, list[str]] = {}
    for source in sources:
        for slot in source_slots(source.read_text(), source.name):
            where.setdefault(slot, []).append(source.name)
    twice = {s: w for s, w in where.items() if len(w) > 1}
    if twice:
        raise SourceError(f"chapter {chapter}: slots graded in two notebooks: {twice}")
    absent = [s for s in points if s not in where]
    if absent:
        raise SourceError(f"chapter {chapter}: no notebook has cells for {absent} (every slot of "
                          f"grader/checks/ch{chapter}.py's POINTS needs an exercise and a test cell)")


def render(nb) -> str:
    """The notebook file's text, ending with a newline."""
    text = nbformat.writes(nb)
    return text if text.endswith("\n") else text + "\n"


# --------------------------------------------------------------------------- chapters

def chapter_sources(course_src: Path) -> dict[str, list[Path]]:
    """``{chapter: [source, ...]}`` under ``course_src/sources/``."""
    root = Path(course_src) / SOURCES
    if not root.is_dir():
        return {}
    return {d.name: sorted(d.glob("*.md")) for d in sorted(root.iterdir())
            if d.is_dir() and re.match(r"^\d\d_[A-Za-z0-9_]+$", d.name) and any(d.glob("*.md"))}


def notebook_for(source: Path, course_src: Path) -> Path:
    """``course/sources/03_strides/strides.md`` -> ``course/03_strides/strides.ipynb``."""
    return Path(course_src) / source.parent.name / (source.stem + ".ipynb")


def build_chapter(chapter: str, course_src: Path, *, check: bool = False,
                  log=print) -> list[Path]:
    """Build every notebook of ``chapter`` from its sources.  Writes them, or with
    ``check`` writes nothing.  Returns the notebooks that differed from a fresh build."""
    differing = []
    sources = chapter_sources(course_src).get(chapter, [])
    check_chapter_slots(chapter, sources)
    for source in sources:
        rel = source.relative_to(Path(course_src).parent)
        text = render(build_notebook(source.read_text(), chapter, name=str(rel)))
        target = notebook_for(source, course_src)
        current = target.read_text() if target.exists() else None
        if current == text:
            continue
        differing.append(target)
        if not check:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            log(f"wrote {target.relative_to(Path(course_src).parent)}")
    return differing
