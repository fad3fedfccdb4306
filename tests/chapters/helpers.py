"""The one helper every chapter's end-to-end test uses (no copy per chapter).

- :func:`grade_chapter` builds a temporary nbgrader course directory, releases a chapter,
  submits (a) the instructor's solution notebooks and (b) the released blank notebooks
  (plus any extra submissions you pass), autogrades them for real with nbgrader (through
  ``mini-course``'s own code) and returns the scores per student and grade id.
- :func:`execute_notebook` runs a notebook top to bottom in a fresh kernel from its own
  folder and returns the errors per cell; :func:`run_notebook_cpu_seconds` runs one and
  returns the CPU time its kernel used.
- :func:`source_paths`: a chapter's sources (``course/sources/NN_topic/*.md``).
- :func:`run_cells`: run some cells of a chapter's notebook (the setup, a demo, a solution)
  in one namespace, so that a test uses the notebook's own code instead of a copy of it.
- :func:`displayed_widget_bundle`: the mime bundle of a napkin widget shown as if a widget
  frontend were there.
- :func:`assert_solution_regions_equal_references` and
  :func:`assert_signatures_and_docstrings_equal_references`: a notebook's exercise cells
  against mini's references, for the slots a chapter test names.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import nbformat

REPO = Path(__file__).resolve().parents[2]
COURSE = REPO / "course"
SOURCES = COURSE / "sources"

__all__ = ["REPO", "COURSE", "chapters_with_notebooks", "GradedChapter", "grade_chapter",
           "graded_once", "CellError", "execute_notebook", "run_notebook_cpu_seconds",
           "test_cells", "quiet",
           "SOURCES", "source_paths", "notebook_of", "run_cells", "displayed_widget_bundle",
           "assert_solution_regions_equal_references",
           "assert_signatures_and_docstrings_equal_references"]


def quiet(*_args, **_kwargs) -> None:
    """A ``log`` callback that prints nothing."""


def chapters_with_notebooks(course_src: Path = COURSE) -> list[str]:
    from grader.course import list_chapters
    return list_chapters(course_src)


@dataclass
class GradedChapter:
    course_dir: Path
    chapter: str
    release_dir: Path
    # {student: {grade_id: (score, max_score)}}
    scores: dict[str, dict[str, tuple[float, float]]] = field(default_factory=dict)
    statuses: dict[str, str] = field(default_factory=dict)   # {student: grading status}

    def total(self, student: str) -> tuple[float, float]:
        cells = self.scores.get(student, {})
        return (sum(s for s, _ in cells.values()), sum(m for _, m in cells.values()))

    def autograded(self, student: str) -> list[Path]:
        return sorted((self.course_dir / "autograded" / student / self.chapter).glob("*.ipynb"))


def grade_chapter(tmp: Path, chapter: str, *, course_src: Path = COURSE,
                  extra: dict[str, Callable[[nbformat.NotebookNode], None]] | None = None,
                  cell_timeout: int = 300, check_timeout: float = 120,
                  jobs: int = 2, mini_src: Path | None = None, **init_kwargs) -> GradedChapter:
    """Init a course in ``tmp``, release ``chapter`` (any spelling), submit ``solution``
    (the source notebooks) and ``blank`` (the released ones), plus one student per entry of
    ``extra``: ``{student: edit}`` where ``edit(nb)`` modifies a copy of the source notebook
    in place; autograde everything (in sandboxes, ``jobs`` at a time) and return the scores
    and each submission's status (``GradedChapter.results``).

    The time limits are generous: on a loaded machine a setup cell that compiles C++ can
    take over a minute, and an honest solution must never lose points to the clock (the
    limits themselves are tested in tests/grader)."""
    from grader import course

    course_dir = tmp / "course"
    course.init_course(course_dir, course_src=course_src, cell_timeout=cell_timeout,
                       check_timeout=check_timeout, mini_src=mini_src, log=quiet, **init_kwargs)
    chapter = course._chapter_in_course(course_dir, chapter)
    release_dir = course.release(chapter, course_dir, log=quiet)
    inbox = tmp / "inbox"
    inbox.mkdir()
    for nb_path in sorted((course_dir / "source" / chapter).glob("*.ipynb")):
        stem = nb_path.stem
        shutil.copy(nb_path, inbox / f"solution_{stem}.ipynb")
        shutil.copy(release_dir / nb_path.name, inbox / f"blank_{stem}.ipynb")
        for student, edit in (extra or {}).items():
            nb = nbformat.read(str(nb_path), as_version=4)
            edit(nb)
            nbformat.write(nb, str(inbox / f"{student}_{stem}.ipynb"))
    report = course.import_submissions(chapter, inbox, course_dir, log=quiet)
    assert not report.rejected, report.rejected
    results = course.autograde(chapter, course_dir, jobs=jobs, log=quiet)
    graded = GradedChapter(course_dir, chapter, release_dir,
                           statuses={s: r.status for s, r in results.items()})
    for row in course.grades(course_dir):
        if row["chapter"] == chapter:
            graded.scores.setdefault(row["student"], {})[row["grade_id"]] = (
                row["score"], row["max_score"])
    return graded


def graded_once(key: str, tmp_path_factory, **kwargs) -> GradedChapter:
    """:func:`grade_chapter` done once per test session, even with pytest-xdist: the first
    worker that needs ``key`` grades it under a file lock in the session's shared temp
    folder, the others wait and read the result.  ``kwargs`` go to :func:`grade_chapter`
    (``chapter`` is required)."""
    import fcntl
    import json

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # shared by all workers of this session
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in key)
    lock_path, done = root / f"graded-{safe}.lock", root / f"graded-{safe}.json"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if done.exists():
                data = json.loads(done.read_text())
                return GradedChapter(Path(data["course_dir"]), data["chapter"],
                                     Path(data["release_dir"]),
                                     {s: {g: tuple(v) for g, v in cells.items()}
                                      for s, cells in data["scores"].items()},
                                     data.get("statuses", {}))
            work = root / f"graded-{safe}"
            if work.exists():
                shutil.rmtree(work)
            work.mkdir()
            chapter = kwargs.pop("chapter")
            graded = grade_chapter(work, chapter, **kwargs)
            done.write_text(json.dumps({"course_dir": str(graded.course_dir),
                                        "chapter": graded.chapter,
                                        "release_dir": str(graded.release_dir),
                                        "scores": graded.scores,
                                        "statuses": graded.statuses}))
            return graded
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@dataclass
class CellError:
    index: int
    grade_id: str | None
    is_test: bool       # an autograded test cell (grade, not solution)
    ename: str
    evalue: str


def test_cells(nb) -> dict[str, nbformat.NotebookNode]:
    """``{grade_id: cell}`` of the autograded test cells of a notebook."""
    out = {}
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            out[meta["grade_id"]] = cell
    return out


test_cells.__test__ = False  # not a pytest test


def execute_notebook(path: str | Path, timeout: int = 120) -> list[CellError]:
    """Run the notebook in a fresh kernel from its own folder (so a ``mini/`` copy next to
    it is the one imported) and return one :class:`CellError` per cell that failed."""
    from nbclient import NotebookClient

    path = Path(path)
    nb = nbformat.read(str(path), as_version=4)
    NotebookClient(nb, timeout=timeout, allow_errors=True, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    errors = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        meta = cell.get("metadata", {}).get("nbgrader", {})
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error":
                errors.append(CellError(i, meta.get("grade_id"),
                                        bool(meta.get("grade") and not meta.get("solution")),
                                        o.get("ename", ""), o.get("evalue", "")))
                break
    return errors


_CPU_PROBE = ("import resource as _r\n_u = _r.getrusage(_r.RUSAGE_SELF)\n"
              "print('kernel cpu seconds:', _u.ru_utime + _u.ru_stime)")


def run_notebook_cpu_seconds(nb, folder: str | Path, timeout: int = 60) -> float:
    """Run ``nb`` (in place: its outputs are filled in) in a fresh kernel from ``folder``,
    each cell within ``timeout`` seconds, and return the CPU seconds the kernel used.

    A notebook's cost is its kernel's CPU time, not wall time: on a loaded machine a
    notebook waits for the cores without doing more work, so "it runs quickly" is an
    assertion about CPU seconds (read by a last cell added for the run, then removed)."""
    from nbclient import NotebookClient

    probe = nbformat.v4.new_code_cell(_CPU_PROBE)
    nb.cells.append(probe)
    try:
        NotebookClient(nb, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(folder)}}).execute()
    finally:
        nb.cells.remove(probe)
    text = "".join(o.get("text", "") for o in probe.outputs)
    return float(text.split("kernel cpu seconds:")[1])


# --------------------------------------------------------------------------- sources and notebooks

def source_paths(chapter: str) -> list[Path]:
    """``course/sources/<chapter>/*.md``: the sources of ``chapter`` (``"04_hardware"``)."""
    return sorted((SOURCES / chapter).glob("*.md"))


def notebook_of(chapter: str, name: str | None = None) -> Path:
    """The notebook ``course/<chapter>/<name>.ipynb``; ``name`` may be left out when the
    chapter has one notebook."""
    if name is not None:
        return COURSE / chapter / f"{name}.ipynb"
    paths = sorted((COURSE / chapter).glob("*.ipynb"))
    if len(paths) != 1:
        raise ValueError(f"{chapter} has notebooks {[p.name for p in paths]}: name the one you mean")
    return paths[0]


def run_cells(chapter: str, *names: str, ns: dict | None = None) -> dict:
    """Run cells of ``chapter``'s notebooks, in the order given, in one namespace named
    ``__main__`` (as in a kernel), and return it.  A name is a demo's (``"setup"``,
    ``"payoff"``) or a slot (``"02.multiply_add"``: its exercise or solution cell, which
    registers the reference into mini; the conftest fixture unregisters it after the test).
    ``ns``, when given, is the namespace to run in (a previous call's, or the names a free
    cell the student fills would define).

    The notebook's own code, not a copy of it: tests of what a demo shows run the demo.
    Thread limits a cell sets for BLAS (the setup of 05) end with the call."""
    from threadpoolctl import threadpool_limits

    from grader.checks import solution_grade_id

    by_id = {}
    for path in sorted((COURSE / chapter).glob("*.ipynb")):    # grade ids are unique chapter-wide
        for cell in nbformat.read(str(path), as_version=4).cells:
            gid = cell.metadata.get("nbgrader", {}).get("grade_id")
            if gid is None:
                continue
            if gid in by_id:
                raise ValueError(f"{chapter}: two cells with grade id {gid!r}")
            by_id[gid] = cell
    ns = {} if ns is None else ns
    ns.setdefault("__name__", "__main__")
    ns.setdefault("__builtins__", __builtins__)
    with threadpool_limits(limits=None):
        for name in names:
            gid = solution_grade_id(name) if "." in name else f"{chapter[:2]}_{name}"
            if gid not in by_id:
                raise KeyError(f"{chapter} has no cell {name!r} (grade id {gid})")
            exec(compile(by_id[gid].source, f"<{chapter} {name}>", "exec"), ns)
    return ns


def assert_solution_regions_equal_references(notebook: Path, slots: list[str]) -> None:
    """The notebook's solution regions are exactly ``slots``, each equal to mini's reference."""
    from grader.solutions import normalize, notebook_regions, reference_regions
    nb = notebook_regions(notebook)
    refs = reference_regions(REPO / "mini")
    assert sorted(nb) == sorted(slots)
    for slot in slots:
        assert normalize(nb[slot]) == normalize(refs[slot][1]), slot


def assert_signatures_and_docstrings_equal_references(notebook: Path, slots: list[str]) -> None:
    """Each slot's ``@implement`` cell has the signature and docstring of mini's reference."""
    import ast
    import inspect
    from mini.exercises import reference
    by_name = {}
    for cell in nbformat.read(str(notebook), as_version=4).cells:
        if cell.cell_type == "code" and "@implement(" in cell.source:
            fn = next(n for n in ast.parse(cell.source).body if isinstance(n, ast.FunctionDef))
            by_name[fn.name] = fn
    for slot in slots:
        ref = ast.parse(inspect.getsource(reference(slot))).body[0]
        mine = by_name[ref.name]
        assert ast.dump(mine.args) == ast.dump(ref.args), slot
        assert ast.get_docstring(mine) == ast.get_docstring(ref), slot



def displayed_widget_bundle(monkeypatch, module, widget: str, **kwargs) -> dict:
    """Call ``module.<widget>(**kwargs)`` (a napkin widget of ``mini.napkin``) as if a
    widget frontend were there and return the mime bundle of the one object it displayed."""
    import pytest
    pytest.importorskip("ipywidgets")
    shown = []
    monkeypatch.setattr(module, "widgets_enabled", lambda: True)
    monkeypatch.setattr("IPython.display.display", lambda obj, *a, **k: shown.append(obj))
    getattr(module, widget)(**kwargs)
    (ui,) = shown
    return ui._repr_mimebundle_()


def graded_in_sandbox(tmp_path: Path, chapter: str, notebook: str, grade_ids, slot: str,
                      name: str, replace: tuple[str, str] | None = None):
    """The verdict of ``slot``'s check on the cells ``grade_ids`` of ``notebook`` (setup
    and answer cells, as text) run in the sandboxed worker with the chapter's student copy
    of mini, as autograding runs them.  ``replace``: (old, new) text to change in the last
    cell first (a wrong answer).  Skips where there is no sandbox."""
    import pytest
    from grader.checks import evaluate
    from grader.checks.student import Student
    from grader.course import default_mini_src
    from grader.grading import answer_cells
    from grader.sandbox import Sandbox, SandboxUnavailable
    from grader.solutions import strip_package
    from grader.workerproc import WorkerBackend
    try:
        box = Sandbox.detect()
    except SandboxUnavailable as e:
        pytest.skip(f"no sandbox on this machine (install bubblewrap to run this test): {e}")
    if not (tmp_path / "mini").exists():
        strip_package(default_mini_src(), tmp_path / "mini", int(chapter[:2]))
    nb = nbformat.read(str(notebook_of(chapter, notebook)), as_version=4)
    cells = [dict(c) for c in answer_cells(nb, nb) if c["grade_id"] in grade_ids]
    assert len(cells) == len(grade_ids), [c["grade_id"] for c in cells]
    if replace is not None:
        assert replace[0] in cells[-1]["source"], replace[0]
        cells[-1]["source"] = cells[-1]["source"].replace(*replace)
    with WorkerBackend(box, mini_dir=tmp_path / "mini", cells=cells, check_timeout=240,
                       cache_dir=tmp_path / "cache") as be:
        be.begin_check()
        return evaluate(slot, Student(be, slot, name))
