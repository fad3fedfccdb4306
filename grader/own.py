"""The learner's own mini: their answers from earlier workspace notebooks, checked, loaded
into later chapters, and exported as a package (``mini-course export DIR``).

Answers are read as text by grade id, exactly as the grader reads a submission
(:func:`grader.grading.answer_cells`), and checked the way the grader checks one: the
worker (:mod:`grader.workerproc`, here without a sandbox: it is the learner's own code on
their own machine) runs the notebook's setup and answer cells, then each exercise's visible
test cell (the text of the course's notebook, hidden region left out), and the trusted side
runs the hidden checks on what the worker reports (:func:`grader.grading.grade_notebook`).
A slot passes when its answer cell, its visible checks and its hidden check all pass.

Verdicts are cached in ``WORKSPACE/.mini-own/checks.json`` by a hash of everything they
depend on (the notebook's answer cells, the course's setup and test cells, the chapter's
checks), so a chapter's setup cell checks an earlier chapter once, not every time it runs.

- :func:`learner_verdicts` (also ``python -m grader.own verdicts WS --before 05``, what a
  setup cell runs in a separate process over the installed mini): ``{slot: verdict}``;
- :func:`load_earlier_chapters`: in the learner's kernel, register the passing answers;
- :func:`export`: the learner's mini as a package with mini's tests (``mini-course export``).
"""
from __future__ import annotations

import ast
import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from grader.checks import solution_grade_id, test_grade_id
from grader.course import (CHAPTER_RE, CourseError, default_course_src, default_mini_src,
                           repo_root)
from grader.grading import answer_cells, grade_notebook, split_hidden

__all__ = ["learner_verdicts", "load_earlier_chapters", "export", "chapter_notebooks",
           "learner_cells", "NOT_WRITTEN", "main"]

CACHE = Path(".mini-own") / "checks.json"
NOT_WRITTEN = "not written yet"
_CACHE_VERSION = 1


def _read(path: Path):
    import nbformat
    return nbformat.read(str(path), as_version=4)


def _mini_slots() -> set[str]:
    from mini.exercises import slots
    return set(slots())


def chapter_notebooks(ws: Path, course_src: Path | None = None,
                      before: int | None = None) -> list[tuple[str, Path, Path]]:
    """``(chapter, the learner's notebook, the course's notebook)`` for each notebook of the
    workspace ``ws`` that the course has (chapters before ``before`` only, when given)."""
    course_src = Path(course_src or default_course_src())
    out = []
    for folder in sorted(p for p in Path(ws).iterdir() if p.is_dir() and CHAPTER_RE.match(p.name)):
        if before is not None and int(folder.name[:2]) >= before:
            continue
        for nb in sorted(folder.glob("*.ipynb")):
            ref = course_src / folder.name / nb.name
            if ref.exists():
                out.append((folder.name, nb, ref))
    return out


def learner_cells(submitted, source) -> tuple[list[dict], dict[str, str]]:
    """(the cells the worker runs: setup and answer cells as the grader reads them, each
    mini exercise's answer followed by its visible test cell; ``{slot: answer text}``)."""
    slots = _mini_slots()
    by_answer = {solution_grade_id(s): s for s in slots}
    tests = {}
    for cell in source.cells:
        gid = str(cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") or "")
        tests[gid] = cell.source
    cells, answers = [], {}
    for cell in answer_cells(submitted, source):
        cells.append(cell)
        slot = by_answer.get(cell["grade_id"])
        if slot is None:
            continue
        answers[slot] = cell["source"]
        visible = "\n".join(split_hidden(tests.get(test_grade_id(slot), ""))[0])
        cells.append({"grade_id": test_grade_id(slot), "source": visible})
    return cells, answers


def _first_line(text: str, limit: int = 160) -> str:
    """``text`` on one line, cut at ``limit`` characters."""
    line = " ".join(l.strip() for l in str(text).splitlines() if l.strip())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _hidden_reason(message: str) -> str:
    """The first thing a failed check says (after a "k of n points" headline)."""
    lines = [l.strip().lstrip("- ").strip() for l in message.splitlines() if l.strip()]
    if len(lines) > 1 and lines[0].endswith("points"):
        lines = lines[1:]
    text = lines[0] if lines else message
    return text.partition(": ")[2] if text[:2].isdigit() and ": " in text[:40] else text


def _verdicts_of(submitted, source, cells, answers, expected, mini_dir, timeout) -> dict:
    from grader.sandbox import Sandbox
    grade = grade_notebook(submitted, source, sandbox=Sandbox.none(), mini_dir=mini_dir,
                           cells=cells, check_timeout=timeout, slots=set(expected))
    raised = {r.get("grade_id"): r.get("raised") for r in grade.load_report}
    hidden = {v.slot_id: v for cv in grade.cells.values() for v in cv.verdicts}
    out = {}
    for slot in expected:
        if slot not in answers:
            out[slot] = {"passed": False, "why": "no answer cell for it in your notebook"}
            continue
        err = raised.get(solution_grade_id(slot)) or raised.get(test_grade_id(slot))
        verdict = hidden.get(slot)
        if err is not None and getattr(err, "not_implemented", False):
            why = NOT_WRITTEN
        elif raised.get(solution_grade_id(slot)) is not None:
            why = f"your cell raises {_first_line(err.text())}"
        elif err is not None:
            why = f"its visible check fails: {_first_line(err.text())}"
        elif verdict is not None and verdict.passed is not True:
            why = f"its hidden check fails: {_first_line(_hidden_reason(verdict.message))}"
        else:
            out[slot] = {"passed": True, "why": "passes its visible and hidden checks"}
            continue
        out[slot] = {"passed": False, "why": why}
    return out


def _check_notebook(submitted, source, chapter: str, mini_dir: Path,
                    timeout: float) -> dict[str, dict]:
    """``{slot: {"passed", "why"}}`` for the mini exercises of one notebook.

    First every answer is loaded at once, as at grading.  A slot that fails while other
    answers fail too is checked again with those answers left out (their slots on mini's
    reference, as a later chapter would run them): a wrong VJP must not fail the learner's
    correct backward loop, whose check runs a graph through that VJP."""
    cells, answers = learner_cells(submitted, source)
    expected = sorted(s for s in _mini_slots() if s[:2] == chapter[:2]
                      and any(str(c.get("metadata", {}).get("nbgrader", {}).get("grade_id")) ==
                              solution_grade_id(s) for c in source.cells))
    out = _verdicts_of(submitted, source, cells, answers, expected, mini_dir, timeout)
    failing = [s for s in expected if not out[s]["passed"] and s in answers
               and out[s]["why"] != NOT_WRITTEN]
    if len(failing) > 1:
        for slot in failing:
            others = {g for s in failing if s != slot for g in (solution_grade_id(s), test_grade_id(s))}
            again = _verdicts_of(submitted, source, [c for c in cells if c["grade_id"] not in others],
                                 answers, [slot], mini_dir, timeout)[slot]
            if again["passed"]:
                again["why"] = ("passes its checks while the other failing answers run mini's "
                                "reference")
            out[slot] = again
    return out


def _cache_key(cells: list[dict], chapter: str) -> str:
    h = hashlib.sha256(f"v{_CACHE_VERSION}".encode())
    for c in cells:
        h.update(json.dumps([c["grade_id"], c["source"]]).encode())
    checks = Path(__file__).resolve().parent / "checks"
    for p in sorted(checks.glob(f"ch{chapter[:2]}_*.py")) + [checks / "__init__.py",
                                                              Path(__file__).resolve()]:
        h.update(p.read_bytes())
    return h.hexdigest()


def learner_verdicts(ws: Path, *, before: int | None = None, course_src: Path | None = None,
                     mini_dir: Path | None = None, timeout: float = 60.0,
                     log=None) -> dict[str, dict]:
    """``{slot: {"passed", "why", "notebook"}}`` for every mini exercise of the workspace's
    notebooks (chapters before ``before``), cached in ``ws/.mini-own/checks.json``."""
    ws = Path(ws).resolve()
    mini_dir = Path(mini_dir or default_mini_src())
    cache_file = ws / CACHE
    try:
        cache = json.loads(cache_file.read_text())
    except (OSError, ValueError):
        cache = {}
    out: dict[str, dict] = {}
    for chapter, nb_path, ref_path in chapter_notebooks(ws, course_src, before):
        submitted, source = _read(nb_path), _read(ref_path)
        rel = str(nb_path.relative_to(ws))
        key = _cache_key(learner_cells(submitted, source)[0], chapter)
        entry = cache.get(rel)
        if not (isinstance(entry, dict) and entry.get("key") == key):
            if log:
                log(f"checking your answers in {rel} (once; cached until you change them)")
            entry = {"key": key, "slots": _check_notebook(submitted, source, chapter,
                                                          mini_dir, timeout)}
            cache[rel] = entry
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(cache, indent=1, sort_keys=True))
            os.replace(tmp, cache_file)
        for slot, v in entry["slots"].items():
            out[slot] = dict(v, notebook=rel)
    return out


# --------------------------------------------------------------------------- the kernel side

def _verdicts_in_a_process(ws: Path, before: int) -> dict[str, dict]:
    """:func:`learner_verdicts` in a separate process over the installed (instructor's)
    mini: the checks compare with mini's references, and the kernel asking keeps its own
    mini untouched."""
    with tempfile.TemporaryDirectory(prefix="mini-own-") as cwd:   # not a folder with a mini/
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)
        proc = subprocess.run([sys.executable, "-m", "grader.own", "verdicts", str(ws),
                               "--before", str(before)], cwd=cwd, env=env,
                              capture_output=True, text=True)
    for line in proc.stderr.splitlines():
        if line.startswith("checking "):
            print(line)
    if proc.returncode != 0:
        raise RuntimeError(f"checking your earlier answers failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


def load_earlier_chapters(ws: Path, chapter: str) -> tuple[dict[str, str], dict[str, str]]:
    """Register, in this kernel, the learner's answers from the workspace notebooks of the
    chapters before ``chapter`` that pass their checks.  Returns ``({slot: notebook},
    {slot: why it runs the reference})``."""
    from grader.worker.execute import run_cells
    from mini import exercises as ex
    from mini import yours

    ws = Path(ws).resolve()
    before = int(chapter)
    verdicts = _verdicts_in_a_process(ws, before)
    loaded: dict[str, str] = {}
    why = {s: v["why"] for s, v in verdicts.items() if not v["passed"]}
    for _, nb_path, ref_path in chapter_notebooks(ws, None, before):
        rel = str(nb_path.relative_to(ws))
        passing = {s for s, v in verdicts.items() if v["passed"] and v["notebook"] == rel}
        if not passing:
            continue
        keep = {solution_grade_id(s): s for s in passing}
        cells = [c for c in answer_cells(_read(nb_path), _read(ref_path))
                 if c["grade_id"] in keep or c["grade_id"].endswith("setup")]
        before_active = dict(ex._ACTIVE)
        namespace = {"__name__": "__your_mini__"}
        yours.LOADING[0] = True   # (the earlier setup cell's own use_your_code does nothing)
        try:
            with contextlib.redirect_stdout(io.StringIO()), \
                    contextlib.redirect_stderr(io.StringIO()):
                report = run_cells(cells, namespace)
        finally:
            yours.LOADING[0] = False
        failed = {r["grade_id"]: r["raised"] for r in report if r["raised"] is not None}
        for slot in list(ex._ACTIVE):   # only the passing answers stay registered
            if slot in passing and solution_grade_id(slot) not in failed:
                if ex._ACTIVE[slot] is not before_active.get(slot):
                    loaded[slot] = rel
                continue
            if slot in before_active:
                ex._ACTIVE[slot] = before_active[slot]
            else:
                del ex._ACTIVE[slot]
        for slot in passing - set(loaded):
            err = failed.get(solution_grade_id(slot))
            why[slot] = (f"your cell raised {type(err).__name__}: {err} here" if err is not None
                         else "your cell did not register it (@implement)")
    return loaded, why


# --------------------------------------------------------------------------- export

def _implement_slot(dec: ast.expr) -> str | None:
    if isinstance(dec, ast.Call) and dec.args and isinstance(dec.args[0], ast.Constant):
        f = dec.func
        name = f.id if isinstance(f, ast.Name) else getattr(f, "attr", None)
        if name == "implement" and isinstance(dec.args[0].value, str):
            return dec.args[0].value
    return None


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(getattr(node, "value", None), ast.Constant) \
        and isinstance(node.value.value, str)


def _param_names(fn: ast.FunctionDef) -> list[str]:
    a = fn.args
    return [x.arg for x in a.posonlyargs + a.args] + [f"*{a.vararg.arg}" if a.vararg else ""] + \
        [x.arg for x in a.kwonlyargs] + [f"**{a.kwarg.arg}" if a.kwarg else ""]


def _call_args(reference: ast.FunctionDef, learner: ast.FunctionDef) -> str:
    """The reference's parameters passed on to the learner's function: positionally as far
    as it takes them, keyword-only ones where it has them."""
    r, m = reference.args, learner.args
    positional = [x.arg for x in r.posonlyargs + r.args]
    if not m.vararg:
        positional = positional[:len(m.posonlyargs + m.args)]
    parts = list(positional)
    if r.vararg and m.vararg:
        parts.append(f"*{r.vararg.arg}")
    theirs = {x.arg for x in m.kwonlyargs}
    parts += [f"{x.arg}={x.arg}" for x in r.kwonlyargs if x.arg in theirs or m.kwarg]
    if r.kwarg and m.kwarg:
        parts.append(f"**{r.kwarg.arg}")
    return ", ".join(parts)


def learner_body(cell: str, slot: str, reference: ast.FunctionDef) -> str:
    """The code that replaces the reference's body for ``slot``: the learner's function
    body (after its docstring), preceded by whatever else their cell defines (helpers,
    imports: they become local to the function).  When their parameters are not the
    reference's, their whole function goes in and is called with the reference's."""
    tree = ast.parse(cell)
    lines = cell.splitlines()
    fn = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
               and any(_implement_slot(d) == slot for d in n.decorator_list)), None)
    if fn is None:
        raise ValueError(f"the answer cell of {slot} has no function decorated "
                         f"@implement({slot!r})")
    extra = []
    for node in tree.body:
        if node is fn:
            continue
        if isinstance(node, ast.ImportFrom) and node.module == "mini.exercises" and \
                all(a.name == "implement" for a in node.names):
            continue
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        extra.append("\n".join(lines[first - 1:node.end_lineno]))
    if _param_names(fn) == _param_names(reference):
        doc = _is_docstring(fn.body[0])
        if doc and len(fn.body) == 1:
            body = "pass"
        else:   # after the docstring (comments right below it included)
            start = fn.body[0].end_lineno + 1 if doc else fn.body[0].lineno
            body = textwrap.dedent("\n".join(lines[start - 1:fn.end_lineno]))
    else:
        first = min([fn.lineno] + [d.lineno for d in fn.decorator_list])
        own = [l for l in lines[first - 1:fn.end_lineno] if not l.lstrip().startswith("@implement")]
        body = textwrap.dedent("\n".join(own)) + f"\n\nreturn {fn.name}({_call_args(reference, fn)})"
    parts = [textwrap.dedent(e) for e in extra] + [body.strip("\n")]
    markers = ("### BEGIN SOLUTION", "### END SOLUTION")   # (a copied reference has them)
    return "\n".join(l for l in "\n".join(parts).splitlines() if l.strip() not in markers)


def _replace_regions(path: Path, bodies: dict[str, tuple[str, str]], notes: dict[str, str]) -> None:
    """Rewrite the solution regions of ``path``: a learner's body where ``bodies`` has one
    (``{slot: (code, where from)}``), a note on the others (``notes``)."""
    from grader.solutions import scan_source
    source = path.read_text()
    regions = scan_source(source, path)
    if not regions:
        return
    tree = ast.parse(source)
    defs = {n.lineno: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    lines = source.splitlines(keepends=True)
    for r in sorted(regions, key=lambda r: r.begin, reverse=True):
        if r.slot_id in bodies:
            fn = max((n for n in defs.values() if n.lineno <= r.begin + 1 <= n.end_lineno),
                     key=lambda n: n.lineno)
            code, where = bodies[r.slot_id]
            try:
                text = learner_body(code, r.slot_id, fn)
            except (SyntaxError, ValueError) as e:
                lines[r.begin + 1:r.begin + 1] = [f"{r.indent}# (your answer in {where} could "
                                                  f"not be carried over: {e}; mini's reference)\n"]
                continue
            new = [f"{r.indent}# yours: {where}\n"]
            new += [(r.indent + l if l.strip() else "") + "\n" for l in text.splitlines()]
            lines[r.begin + 1:r.end] = new
        else:
            lines[r.begin + 1:r.begin + 1] = [f"{r.indent}# mini's reference ({notes.get(r.slot_id, 'not yours')})\n"]
    path.write_text("".join(lines))


def export(dest: str | Path, ws: str | Path | None = None, *, course_src: Path | None = None,
           mini_src: Path | None = None, log=print) -> Path:
    """Write the learner's mini to ``dest`` (see ``mini-course export``): the package with
    every slot the learner wrote running their code, ``README.md`` saying what is whose,
    and mini's test suite (``pytest`` in ``dest``)."""
    ws = Path(ws or os.environ.get("MINI_WORKSPACE") or repo_root() / "workspace").resolve()
    if not ws.is_dir():
        raise CourseError(f"no workspace at {ws}: create one with `mini-course workspace`")
    dest = Path(dest).resolve()
    if dest.exists() and any(dest.iterdir()):
        raise CourseError(f"{dest} exists and is not empty: export into a new folder")
    mini_src = Path(mini_src or default_mini_src())
    verdicts = learner_verdicts(ws, course_src=course_src, log=log)
    answers: dict[str, tuple[str, str]] = {}
    for _, nb_path, ref_path in chapter_notebooks(ws, course_src):
        rel = str(nb_path.relative_to(ws))
        for slot, text in learner_cells(_read(nb_path), _read(ref_path))[1].items():
            v = verdicts.get(slot)
            if v is not None and v["why"] != NOT_WRITTEN:
                answers[slot] = (text, f"{rel}, cell {solution_grade_id(slot)}")
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copytree(mini_src, dest / "mini", ignore=shutil.ignore_patterns(
        "__pycache__", "*.pyc", "_release.py", "_yours.py"))
    notes = {s: ("yours fails its checks: " + v["why"]) if not v["passed"] else v["why"]
             for s, v in verdicts.items()}
    for p in sorted((dest / "mini").rglob("*.py")):
        if "### BEGIN SOLUTION" in p.read_text():
            _replace_regions(p, answers, {s: notes.get(s, "you have not written it")
                                          for s in _all_slots()})
    (dest / "mini" / "_yours.py").write_text(
        '"""Written by `mini-course export`: the slots whose body is the learner\'s code\n'
        '(no fast path stands in for them: mini runs, and its tests test, this code)."""\n'
        f"SLOTS = {tuple(sorted(answers))!r}\n")
    _copy_tests(dest)
    _write_readme(dest, ws, answers, verdicts)
    log(f"exported your mini to {dest}: {len(answers)} slots are yours; run `pytest` there")
    return dest


def _all_slots() -> list[str]:
    return sorted(_mini_slots())


#: mini's own tests (the course's and the grader's stay in the repository).
_TEST_DIRS = ("ndarray", "autograd", "ops", "nn", "optim", "utils", "backends", "napkin",
              "distributed")


def _copy_tests(dest: Path) -> None:
    tests = repo_root() / "tests"
    (dest / "tests").mkdir()
    for name in ("conftest.py", "float_tolerance.py", "__init__.py"):
        if (tests / name).exists():
            shutil.copy2(tests / name, dest / "tests" / name)
    def course_tooling(folder, names):   # tests of the course's tooling stay behind
        return [n for n in names if n in ("__pycache__",) or n.endswith(".pyc") or (
            n.endswith(".py") and re.search(r"^\s*(from|import) grader\b",
                                            (Path(folder) / n).read_text(), re.M))]

    for d in _TEST_DIRS:
        if (tests / d).is_dir():
            shutil.copytree(tests / d, dest / "tests" / d, ignore=course_tooling)
    import tomllib
    pytest_cfg = tomllib.loads((repo_root() / "pyproject.toml").read_text()) \
        .get("tool", {}).get("pytest", {}).get("ini_options", {})
    markers = pytest_cfg.get("markers", [])
    (dest / "pyproject.toml").write_text(
        "# Your mini, exported by `mini-course export`.\n"
        "[tool.pytest.ini_options]\n"
        'pythonpath = ["."]          # this folder\'s mini, not an installed one\n'
        'testpaths = ["tests"]\n'
        f"markers = {json.dumps(markers)}\n")
    (dest / "conftest.py").write_text(
        '"""The tests run against this folder\'s mini (yours), never an installed one."""\n'
        "from pathlib import Path\n\nimport mini\n\n"
        "_HERE = Path(__file__).resolve().parent\n"
        "if Path(mini.__file__).resolve().parent != _HERE / 'mini':\n"
        "    raise ImportError(f'the tests imported {mini.__file__}, not {_HERE / \"mini\"}')\n")


def _write_readme(dest: Path, ws: Path, answers: dict, verdicts: dict) -> None:
    rows = []
    for slot in _all_slots():
        v = verdicts.get(slot)
        if slot in answers:
            whose = "yours" if v["passed"] else "yours (fails its checks)"
            detail = answers[slot][1] + ("" if v["passed"] else f"; {v['why']}")
        else:
            whose = "mini's reference"
            detail = v["why"] if v else "not in your workspace"
        rows.append(f"| `{slot}` | {whose} | {detail} |")
    n_pass = sum(1 for s in answers if verdicts[s]["passed"])
    (dest / "README.md").write_text(
        "# Your mini\n\n"
        "The deep-learning framework you built in the mini course, exported from your "
        f"workspace `{ws}` by `mini-course export`.\n\n"
        f"{len(answers)} of mini's {len(rows)} exercise slots run your code "
        f"({n_pass} of them pass their course checks); the others run mini's reference "
        "(marked `# mini's reference` in the source). Where a body is yours, it starts with "
        "a `# yours:` line naming the notebook cell it came from.\n\n"
        "Run mini's own test suite against your code:\n\n"
        "```\npip install pytest hypothesis numpy\npytest          # in this folder\n```\n\n"
        "A test that fails points at a part of mini that does not do what the test expects; "
        "the table says whose code that part runs.\n\n"
        "| slot | whose | where from / why |\n|---|---|---|\n" + "\n".join(rows) + "\n")


# --------------------------------------------------------------------------- command line

def main(argv: list[str] | None = None) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="python -m grader.own")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("verdicts", help="JSON {slot: verdict} of a workspace's answers")
    s.add_argument("workspace")
    s.add_argument("--before", type=int, default=None)
    a = p.parse_args(argv)
    out = learner_verdicts(Path(a.workspace), before=a.before,
                           log=lambda m: print(m, file=sys.stderr, flush=True))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
