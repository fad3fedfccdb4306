"""The chapter sources (``course/sources/NN_topic/*.md``) and ``mini-course build``.

- every chapter notebook has a source, and the source rules hold (no reference, point value
  or hidden test typed by hand);
- the build turns each kind of source cell into the nbgrader cell it stands for, and says
  which rule a broken source breaks;
- the conversion from the old builders kept what students see (``conversion_baseline.json``,
  modulo the differences listed in ``INTENDED``);
- no source reaches what is copied into a course or a release;
- the notebooks' code passes ruff's error checks.

The committed notebooks equal a fresh build: ``test_invariants.py``.
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from helpers import COURSE, SOURCES, chapters_with_notebooks, source_paths

from grader.notebook_build import (SourceError, build_notebook, chapter_sources, hidden_tests,
                                   notebook_for)

CHAPTERS = chapters_with_notebooks()
BASELINE = Path(__file__).with_name("conversion_baseline.json")

# Cells whose text differs on purpose from the notebooks recorded in BASELINE ({notebook:
# {cell id: why}}).  Ids and nbgrader metadata never differ; every other cell's text is the
# same to the letter.  Empty since the last --record.
INTENDED: dict[str, dict[str, str]] = {}


def _digest(nb) -> list[str]:
    """One line per cell: id, type, and short hashes of its metadata and its text."""
    def h(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()[:16]
    return [f"{c.id} {c.cell_type} {h(json.dumps(c.metadata, sort_keys=True))} {h(c.source)}"
            for c in nb.cells]


def record_baseline() -> None:
    """Write BASELINE from the committed notebooks (after a change you made on purpose;
    then empty INTENDED)."""
    out = {str(p.relative_to(COURSE)): _digest(nbformat.read(str(p), as_version=4))
           for chapter in CHAPTERS for p in sorted((COURSE / chapter).glob("*.ipynb"))}
    BASELINE.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {BASELINE}")


def _built(chapter: str) -> list[tuple[Path, nbformat.NotebookNode]]:
    return [(notebook_for(src, COURSE), build_notebook(src.read_text(), chapter, name=src.name))
            for src in source_paths(chapter)]


# --------------------------------------------------------------------------- the sources

def test_every_chapter_notebook_has_a_source_and_every_source_a_chapter():
    sources = chapter_sources(COURSE)
    assert sorted(sources) == CHAPTERS
    for chapter, paths in sources.items():
        built = sorted(notebook_for(p, COURSE).name for p in paths)
        assert built == sorted(p.name for p in (COURSE / chapter).glob("*.ipynb")), chapter


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_sources_type_no_reference_no_points_and_no_hidden_test(chapter):
    """An author writes prose, demos and visible checks; the build brings the rest."""
    from grader.solutions import reference_regions
    from grader.course import default_mini_src
    def runs(text):  # every 3 consecutive non-blank lines, stripped
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        return {tuple(lines[i:i + 3]) for i in range(len(lines) - 2)}

    references = set().union(*(runs(text) for _, text in reference_regions(default_mini_src()).values()))
    for src in source_paths(chapter):
        text = src.read_text()
        assert "run_check" not in text and "BEGIN HIDDEN TESTS" not in text, src.name
        assert not re.search(r"\(\d+(\.\d+)? points?\)", text), \
            f"{src.name} types a point value: write {{{{points NN.slot}}}}"
        typed = runs(text) & references
        assert not typed, f"{src.name} repeats lines of mini's references: {sorted(typed)[:2]}"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_test_cells_end_with_the_one_hidden_test_of_their_slot(chapter):
    for _, nb in _built(chapter):
        names = {}
        for cell in nb.cells:
            meta = cell.metadata.get("nbgrader", {})
            if meta.get("solution"):
                names[meta["grade_id"][:-len("_code")]] = re.search(
                    r"^(?:def|class) (\w+)", cell.source, re.M).group(1)
            if meta.get("grade"):
                gid = meta["grade_id"]
                slot = gid[:2] + "." + gid[3:]
                assert cell.source.endswith(hidden_tests(slot, names[gid])), gid


# --------------------------------------------------------------------------- the conversion

# The chapters that the old builders wrote (chapter 01 was written as a source from the start).
CONVERTED = sorted({rel.split("/")[0] for rel in json.loads(BASELINE.read_text())})


@pytest.mark.parametrize("chapter", CONVERTED)
def test_the_conversion_kept_what_students_see(chapter):
    """Against the notebooks the old builders wrote: same cells, ids and nbgrader metadata,
    the same text in every cell but the few of INTENDED (which must differ)."""
    baseline = json.loads(BASELINE.read_text())
    for path, nb in _built(chapter):
        rel = str(path.relative_to(COURSE))
        old = [line.split() for line in baseline[rel]]
        new = [line.split() for line in _digest(nb)]
        assert [o[:3] for o in old] == [n[:3] for n in new], f"{rel}: cells, ids or metadata changed"
        changed = {n[0] for o, n in zip(old, new) if o[3] != n[3]}
        intended = set(INTENDED.get(rel, {}))
        assert changed - intended == set(), f"{rel}: unintended changes in {sorted(changed - intended)}"
        assert intended - changed == set(), f"{rel}: INTENDED lists unchanged {sorted(intended - changed)}"


def test_intended_setup_changes_are_what_they_say():
    """The setup cells import the helpers and define none of them; the 04 checks are renamed."""
    import mini.notebook as helpers
    shared = set(helpers.__all__)
    for chapter in CHAPTERS:
        for _, nb in _built(chapter):
            setup = next(c for c in nb.cells   # 04_setup, or 04_cuda_setup in a second notebook
                         if re.fullmatch(rf"{chapter[:2]}(_\w+)?_setup",
                                         c.metadata.get("nbgrader", {}).get("grade_id", "")))
            assert "from mini.notebook import" in setup.source
            defined = set(re.findall(r"^def (\w+)", setup.source, re.M))
            assert not defined & shared, f"{chapter} setup defines {defined & shared}"
            assert "contextmanager" not in setup.source
    hardware = "\n".join(c.source for path, nb in _built("04_hardware") if path.name == "hardware.ipynb"
                          for c in nb.cells)
    assert "expect_close(" not in hardware and hardware.count("expect_array_close(") == 11


# --------------------------------------------------------------------------- releases

@pytest.mark.parametrize("chapter", CHAPTERS)
def test_sources_never_reach_a_course_or_release(chapter, tmp_path):
    """What init/release/workspace copy from course/ is the chapter folder (minus
    CHAPTER_IGNORE) plus the student mini: no source, no directive line of one."""
    from grader import course
    dest = tmp_path / chapter
    course._copy_chapter(COURSE, chapter, dest, course.default_mini_src())
    names = {p.name for p in source_paths(chapter)}
    directives = re.compile(r'^```python (exercise|solution|test|demo)="', re.M)
    for p in dest.rglob("*"):
        if p.is_file():
            assert p.name not in names, f"the source {p.name} was copied"
            if p.suffix in (".md", ".py", ".txt", ".ipynb", ".json"):
                assert not directives.search(p.read_text()), f"{p} holds a source's cell"
    assert SOURCES.parent == COURSE and not course.CHAPTER_RE.match(SOURCES.name)


# --------------------------------------------------------------------------- lint

@pytest.mark.parametrize("chapter", CHAPTERS)
def test_code_cells_pass_ruff(chapter, tmp_path):
    """All code cells of the built notebook, in order, as one module: no undefined name,
    no syntax error, no unused variable (unused imports are the setup cell's offer)."""
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (it is pinned in pyproject.toml)")
    for path, nb in _built(chapter):
        code = "\n\n".join(f"# cell {c.id}\n{c.source}" for c in nb.cells if c.cell_type == "code")
        target = tmp_path / f"{path.stem}.py"
        target.write_text(code + "\n")
        r = subprocess.run([ruff, "check", "--isolated", "--select", "F,E9", "--ignore", "F401",
                            "--output-format", "concise", str(target)],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr


# --------------------------------------------------------------------------- the build

POINTS = {"03.one": 6, "03.two": 2, "03.quiz": 1, "03.class": 1}


def _fake_reference(slot):
    if slot == "03.one":
        return "one", '@implement("03.one")\ndef one(x):\n    """Doc."""\n    ### BEGIN SOLUTION\n' \
                      "    return x\n    ### END SOLUTION"
    if slot == "03.two":
        return "two", '@implement("03.two")\ndef two():\n    ### BEGIN SOLUTION\n' \
                      "    return 2\n    ### END SOLUTION"
    return None


GOOD = '''# A chapter

<!-- exercise table: the build adds the # and points columns -->
| slot | your function | what it is |
|------|---------------|------------|
| `03.one` … `03.two` | `one`, `two` | two functions |
| `03.class` | `class C` | a class |
| | a question | |

```python demo="setup"
from mini.exercises import implement
```

## Exercise 1 ({{points 03.one}}), then {{ points 03.quiz }}

```python exercise="03.one"
```

```python test="03.one"
assert one(1) == 1
```

```python exercise="03.two"
import math  # above the reference
```

```python test="03.two"
```

```python solution="03.quiz"
def answer():
    ### BEGIN SOLUTION
    return "B"
    ### END SOLUTION
```

```python test="03.quiz"
print(answer())
```

```python solution="03.class"
class C:
    ### BEGIN SOLUTION
    pass
    ### END SOLUTION
```

```python test="03.class"
```

```python
my_estimate = None
```
'''


def _build(text, points=POINTS):
    return build_notebook(text, "03_strides", points=points, reference=_fake_reference, name="t.md")


def test_build_turns_each_source_cell_into_its_nbgrader_cell():
    nb = _build(GOOD)
    cells = nb.cells
    assert [c.id for c in cells] == [f"ch03-{i:02d}" for i in range(len(cells))]
    meta = [c.metadata.get("nbgrader", {}) for c in cells]
    assert cells[0].source.splitlines()[2:7] == [
        "| # | slot | your function | what it is | points |",
        "|---|------|---------------|------------|-------:|",
        "| 1–2 | `03.one` … `03.two` | `one`, `two` | two functions | 8 |",
        "| 3 | `03.class` | `class C` | a class | 1 |",
        "| | | a question | | 1 |"]
    assert "<!--" not in cells[0].source
    assert cells[2].source == "## Exercise 1 (6 points), then 1 point"
    assert meta[1] == {"schema_version": 3, "grade": False, "solution": False, "locked": True,
                       "task": False, "grade_id": "03_setup"}
    assert cells[3].source == _fake_reference("03.one")[1]
    assert meta[3]["solution"] and meta[3]["grade_id"] == "03_one_code" and not meta[3]["locked"]
    assert cells[4].source == "assert one(1) == 1\n\n" + hidden_tests("03.one", "one")
    assert meta[4]["grade"] and meta[4]["locked"] and meta[4]["points"] == 6
    assert meta[4]["grade_id"] == "03_one"
    assert cells[5].source == "import math  # above the reference\n\n" + _fake_reference("03.two")[1]
    assert cells[6].source == hidden_tests("03.two", "two")
    assert cells[8].source == 'print(answer())\n\n' + hidden_tests("03.quiz", "answer")
    assert cells[10].source == hidden_tests("03.class", "C")
    assert cells[11].source == "my_estimate = None" and "nbgrader" not in cells[11].metadata
    nbformat.validate(nb)


@pytest.mark.parametrize("edit, message", [
    (lambda s: s.replace('demo="setup"', 'locked="setup"'), "at most one of"),
    (lambda s: s.replace('demo="setup"', 'demo="setup" test="03.one"'), "at most one of"),
    (lambda s: s.replace('demo="setup"', 'demo="Setup cell"'), "lower_case"),
    (lambda s: s.replace('solution="03.quiz"', 'exercise="03.quiz"'), "mini has no reference for 03.quiz"),
    (lambda s: s.replace('```python exercise="03.two"\nimport math  # above the reference\n```',
                         '```python solution="03.two"\ndef two():\n    ### BEGIN SOLUTION\n'
                         '    return 2\n    ### END SOLUTION\n```'),
     "mini holds the reference of 03.two"),
    (lambda s: s.replace('```python test="03.two"\n```\n', ''), "missing for ['03.two']"),
    (lambda s: s.replace('```python test="03.class"\n```\n', '```python test="03.class"\n```\n'
                         '```python test="03.class"\n```\n'), "already has a test cell"),
    (lambda s: s.replace('exercise="03.one"', 'exercise="03.nine"'), "03.nine has no check"),
    (lambda s: s.replace('exercise="03.one"', 'exercise="04.one"'), "not a slot of chapter 03"),
    (lambda s: s.replace('### BEGIN SOLUTION\n    pass', 'pass'), "### BEGIN SOLUTION"),
    (lambda s: s.replace('{{points 03.one}}', '{{points 03.six}}'), "names no graded slot"),
    (lambda s: s.replace('| | a question | |\n', ''), "leaves out ['03.quiz']"),
    (lambda s: s.replace('`03.class`', '`03.klass`'), "03.klass, which has no exercise"),
    (lambda s: s.replace('`03.one` … `03.two`', '`03.one`'), "leaves out the exercises ['03.two']"),
    (lambda s: s.replace('`03.one` … `03.two`', '`03.two` … `03.one`'), "not in notebook order"),
    (lambda s: s.replace('| `03.class` |', '| 03.class |'), "names a slot"),
])
def test_a_broken_source_gets_an_error_that_names_the_rule(edit, message):
    broken = edit(GOOD)
    assert broken != GOOD
    with pytest.raises(SourceError, match=re.escape(message)) as info:
        _build(broken)
    assert str(info.value).startswith("t.md")


def test_a_chapter_without_checks_is_an_error():
    with pytest.raises(SourceError, match=r"needs grader/checks/ch09_nothing\.py with a POINTS"):
        build_notebook(GOOD, "09_nothing", name="t.md")


def test_test_cell_before_its_exercise_is_an_error():
    text = GOOD.replace('```python test="03.one"\nassert one(1) == 1\n```\n', '')
    text = text.replace("```python demo=\"setup\"", '```python test="03.one"\n```\n\n```python demo="setup"')
    with pytest.raises(SourceError, match="comes after its"):
        _build(text)


def test_build_command_writes_checks_and_names_what_is_out_of_date(tmp_path, capsys):
    from grader.cli import main
    course = tmp_path / "course"
    for chapter in ("03_strides", "04_hardware"):
        shutil.copytree(COURSE / chapter, course / chapter)
        shutil.copytree(SOURCES / chapter, course / "sources" / chapter)
    assert main(["build", "--check", "--course-src", str(course)]) == 0
    src = course / "sources" / "03_strides" / "strides.md"
    src.write_text(src.read_text().replace("## 1. Flat memory", "## 1. Flat memory, edited"))
    capsys.readouterr()
    assert main(["build", "--check", "--course-src", str(course)]) == 1
    out = capsys.readouterr()
    assert "out of date: course/03_strides/strides.ipynb" in out.out
    assert "hardware" not in out.out and "mini-course build" in out.err
    assert main(["build", "3", "--course-src", str(course)]) == 0
    assert "wrote course/03_strides/strides.ipynb" in capsys.readouterr().out
    nb = nbformat.read(str(course / "03_strides" / "strides.ipynb"), as_version=4)
    assert any(c.source.startswith("## 1. Flat memory, edited") for c in nb.cells)
    assert main(["build", "--check", "--course-src", str(course)]) == 0
    src.write_text(src.read_text().replace('test="03.offset"', 'test="03.ofset"'))
    assert main(["build", "03", "--course-src", str(course)]) == 2
    assert "03.ofset has no check" in capsys.readouterr().err


if __name__ == "__main__":  # python tests/chapters/test_sources.py --record
    if sys.argv[1:] == ["--record"]:
        record_baseline()
    else:
        print(__doc__)
