"""mini-course on the fixture chapter: init, release, import, autograde, feedback, grades,
check, workspace -- with nbgrader for real."""
from __future__ import annotations

import csv
import json
import re
import shutil
import zipfile
from pathlib import Path

import nbformat
import pytest

from grader import course
from grader.cli import main
from grader.course import CourseError, find_leaks, student_id_from_filename
from grader.solutions import notebook_regions, reference_regions
from grader_helpers import FIXTURE_CHAPTER, FIXTURE_COURSE

quiet = lambda *a, **k: None  # noqa: E731
FIXTURE_NB = FIXTURE_COURSE / FIXTURE_CHAPTER / "fixture.ipynb"


def copy_course(graded, tmp_path) -> Path:
    dst = tmp_path / "course-copy"
    shutil.copytree(graded.course_dir, dst)
    return dst


# --------------------------------------------------------------------------- pure functions

@pytest.mark.parametrize("name, notebooks, expected", [
    ("alice_fixture.ipynb", ["fixture"], ("alice", "fixture")),
    ("alice-fixture.ipynb", ["fixture"], ("alice", "fixture")),
    ("alice.ipynb", ["fixture"], ("alice", "fixture")),
    ("bob_smith_fixture.ipynb", ["fixture"], ("bob_smith", "fixture")),
    ("s123_part_b.ipynb", ["part_a", "part_b"], ("s123", "part_b")),
    ("a.b@uni.edu_fixture.ipynb", ["fixture"], ("a.b@uni.edu", "fixture")),
    ("some/dir/carol_fixture.ipynb", ["fixture"], ("carol", "fixture")),
])
def test_student_id_rule(name, notebooks, expected):
    assert student_id_from_filename(name, notebooks) == expected


@pytest.mark.parametrize("name, notebooks", [
    ("bob smith_fixture.ipynb", ["fixture"]),
    (".hidden_fixture.ipynb", ["fixture"]),
    ("..ipynb", ["fixture"]),
    ("x*y_fixture.ipynb", ["fixture"]),
    ("alice.ipynb", ["part_a", "part_b"]),
    ("alice_fixture.py", ["fixture"]),
    ("a" * 70 + "_fixture.ipynb", ["fixture"]),
])
def test_student_id_rule_rejects(name, notebooks):
    with pytest.raises(ValueError):
        student_id_from_filename(name, notebooks)


def test_resolve_chapter():
    chapters = ["02_autodiff", "03_strides"]
    assert course.resolve_chapter("03", chapters) == "03_strides"
    assert course.resolve_chapter("3", chapters) == "03_strides"
    assert course.resolve_chapter(3, chapters) == "03_strides"
    assert course.resolve_chapter("03_strides", chapters) == "03_strides"
    with pytest.raises(CourseError, match="unknown chapter"):
        course.resolve_chapter("7", chapters)


# --------------------------------------------------------------------------- init / release

@pytest.mark.nbgrader
def test_init_layout(graded_fixture):
    d = graded_fixture.course_dir
    for sub in ("source", "release", "submitted", "autograded", "feedback"):
        assert (d / sub).is_dir()
    assert (d / "gradebook.db").exists()
    cfg = (d / "nbgrader_config.py").read_text()
    assert "grader.preprocessors.SandboxedExecute" in cfg and "TrustedVerdicts" in cfg
    assert "ScrubHiddenTests" in cfg
    assert "c.Execute.timeout = 8" in cfg
    secret = d / ".mini-grader" / "secret"
    assert len(secret.read_text().strip()) == 64 and (secret.stat().st_mode & 0o077) == 0
    src = d / "source" / FIXTURE_CHAPTER
    assert (src / "fixture.ipynb").exists()
    assert (src / "mini" / "_release.py").read_text().endswith("CHAPTER = 3\n")
    assert 'raise ExerciseNotImplemented("03.compact_strides")' in \
        (src / "mini" / "ndarray" / "strides.py").read_text()


@pytest.mark.nbgrader
def test_init_refuses_a_non_empty_dir_and_force_loses_nothing(graded_fixture, tmp_path):
    d = copy_course(graded_fixture, tmp_path)
    with pytest.raises(CourseError, match="not empty"):
        course.init_course(d, course_src=FIXTURE_COURSE, log=quiet)
    assert main(["init", str(d), "--course-src", str(FIXTURE_COURSE)]) == 2
    marker = d / "source" / FIXTURE_CHAPTER / "instructor-notes.md"
    marker.write_text("mine")
    submitted = sorted(p.name for p in (d / "submitted").iterdir())
    course.init_course(d, course_src=FIXTURE_COURSE, force=True, cell_timeout=99, log=quiet)
    assert "c.Execute.timeout = 99" in (d / "nbgrader_config.py").read_text()
    backups = list((d / ".mini-grader" / "backup").rglob("instructor-notes.md"))
    assert backups and backups[0].read_text() == "mine"
    assert list((d / ".mini-grader" / "backup").rglob("nbgrader_config.py"))
    assert sorted(p.name for p in (d / "submitted").iterdir()) == submitted
    # release --refresh re-copies the chapter from course/, keeping the edited one.
    edited = d / "source" / FIXTURE_CHAPTER / "instructor-notes.md"
    edited.write_text("edited again")
    course.release("03", d, refresh=True, log=quiet)
    assert not edited.exists()
    assert any(p.read_text() == "edited again"
               for p in (d / ".mini-grader" / "backup").rglob("instructor-notes.md"))


def _secret_lines(chapter: int) -> set[str]:
    """Lines of the solution regions of chapters >= ``chapter`` (mini and the notebook)."""
    out = set()
    for slot, (_, text) in reference_regions(course.default_mini_src()).items():
        if int(slot[:2]) >= chapter:
            out.update(l.strip() for l in text.splitlines())
    for slot, text in notebook_regions(FIXTURE_NB).items():
        out.update(l.strip() for l in text.splitlines())
    return {l for l in out if len(l) >= 10}


@pytest.mark.nbgrader
def test_release_contains_no_solution_and_no_hidden_test(graded_fixture):
    rel = graded_fixture.release_dir
    assert (rel / "fixture.ipynb").exists() and (rel / "mini" / "__init__.py").exists()
    # Lines that also occur outside every solution region of mini may ship (e.g. a
    # `return tuple(out)` in a trusted helper); everything else of a region must not.
    mini_outside = set()
    for p in course.default_mini_src().rglob("*.py"):
        inside = False
        for line in p.read_text().splitlines():
            s = line.strip()
            inside = (inside or s == "### BEGIN SOLUTION") and s != "### END SOLUTION"
            if not inside:
                mini_outside.add(s)
    secret = _secret_lines(3) - mini_outside
    assert len(secret) > 20
    hits = []
    for p in rel.rglob("*"):
        if p.is_file() and p.suffix in (".py", ".ipynb", ".txt", ".md", ".json"):
            text = p.read_text()
            lines = {l.strip() for l in text.splitlines()}
            if p.suffix == ".ipynb":
                nb = nbformat.reads(text, as_version=4)
                lines = {l.strip() for c in nb.cells for l in c.source.splitlines()}
            for needle in ("BEGIN HIDDEN TESTS", "run_check", "BEGIN SOLUTION"):
                if needle == "run_check" and p == rel / "mini" / "notebook.py":
                    continue  # the students' run_check, which defers to the grader
                if needle in text and not (needle == "BEGIN SOLUTION" and p.suffix == ".py"):
                    hits.append((p.name, needle))
            hits += [(p.name, l) for l in lines & secret]
    assert not hits, hits
    nb = nbformat.read(str(rel / "fixture.ipynb"), as_version=4)
    assert sum("raise NotImplementedError()" in c.source for c in nb.cells) == 2
    assert find_leaks(rel, 3, course.default_mini_src(),
                      graded_fixture.course_dir / "source" / FIXTURE_CHAPTER) == []


@pytest.mark.nbgrader
def test_find_leaks_catches_a_planted_leak(graded_fixture, tmp_path):
    rel = tmp_path / "rel"
    shutil.copytree(graded_fixture.release_dir, rel)
    (rel / "notes.py").write_text("    step *= max(dim, 1)\n")
    nb = nbformat.read(str(rel / "fixture.ipynb"), as_version=4)
    nb.cells[-1].source += "\n# run_check(\"03.offset\", element_offset)"
    nbformat.write(nb, str(rel / "fixture.ipynb"))
    leaks = find_leaks(rel, 3, course.default_mini_src())
    assert ("notes.py", 1, "step *= max(dim, 1)") in leaks
    assert any(p == "fixture.ipynb" and "run_check" in t for p, _, t in leaks)


# --------------------------------------------------------------------------- import

@pytest.mark.nbgrader
def test_import_zip_rules_and_no_silent_overwrite(graded_fixture, tmp_path):
    d = copy_course(graded_fixture, tmp_path)
    good = FIXTURE_NB.read_bytes()
    zpath = tmp_path / "lms.zip"
    with zipfile.ZipFile(zpath, "w") as z:
        z.writestr("submissions/alice_fixture.ipynb", good)
        z.writestr("submissions/../../escape_fixture.ipynb", good)
        z.writestr("submissions/bad name_fixture.ipynb", good)
        z.writestr("submissions/broken_fixture.ipynb", b"{not json")
        z.writestr("submissions/readme.txt", b"hello")
        z.writestr("__MACOSX/submissions/._alice_fixture.ipynb", b"junk")
    report = course.import_submissions("3", zpath, d, log=quiet)
    assert sorted(report.imported) == [f"alice/{FIXTURE_CHAPTER}/fixture.ipynb",
                                       f"broken/{FIXTURE_CHAPTER}/fixture.ipynb",
                                       f"escape/{FIXTURE_CHAPTER}/fixture.ipynb"]
    assert len(report.rejected) == 2            # the bad name and the .txt
    assert len(report.invalid) == 1             # kept: graded 0 as an invalid notebook
    assert not (tmp_path / "escape_fixture.ipynb").exists()
    rejected = json.loads((d / ".mini-grader" / "status" / f"{FIXTURE_CHAPTER}-rejected.json").read_text())
    assert any("bad name" in k for k in rejected)
    dest = d / "submitted" / "alice" / FIXTURE_CHAPTER
    assert (dest / "fixture.ipynb").read_bytes() == good and (dest / "timestamp.txt").exists()

    again = course.import_submissions(FIXTURE_CHAPTER, zpath, d, log=quiet)
    assert f"alice/{FIXTURE_CHAPTER}/fixture.ipynb" in again.unchanged
    newer = tmp_path / "newer"
    newer.mkdir()
    (newer / "alice_fixture.ipynb").write_bytes(good.replace(b"Fixture chapter", b"Fixture chapter v2"))
    third = course.import_submissions("03", newer, d, log=quiet)
    assert len(third.replaced) == 1 and "previous version kept" in third.replaced[0]
    archived = list((d / ".mini-grader" / "archive" / "alice").rglob("fixture.ipynb"))
    assert len(archived) == 1 and archived[0].read_bytes() == good
    assert b"v2" in (dest / "fixture.ipynb").read_bytes()


# --------------------------------------------------------------------------- autograde

@pytest.mark.nbgrader
def test_autograde_scores(graded_fixture):
    s = graded_fixture.scores
    cs, off = "03_compact_strides", "03_offset"
    assert graded_fixture.total("solution") == (16.0, 16.0)
    assert graded_fixture.total("blank") == (0.0, 16.0)
    # An infinite loop costs the affected test only; the kernel is restarted for the rest.
    assert s["looper"][cs] == (0.0, 8.0) and s["looper"][off] == (8.0, 8.0)
    # A kernel killed by os._exit costs the affected test only.
    assert s["killer"][cs] == (8.0, 8.0) and s["killer"][off] == (0.0, 8.0)
    # Exhausting memory costs the affected test only.
    assert s["hog"][cs] == (8.0, 8.0) and s["hog"][off] == (0.0, 8.0)
    # Visible tests pass, hidden checks catch the size-0 mistake.
    assert s["wrong"][cs] == (0.0, 8.0) and s["wrong"][off] == (8.0, 8.0)
    # Replacing run_check in the kernel does nothing (grader is not even importable there);
    # the hidden checks run in the worker and find compact_strides wrong.
    assert s["cheater"][cs] == (0.0, 8.0) and s["cheater"][off] == (8.0, 8.0)
    assert graded_fixture.statuses["solution"] == "ok"
    assert graded_fixture.statuses["looper"] == "timeout"
    assert graded_fixture.statuses["killer"] == "crashed"


@pytest.mark.nbgrader
def test_autograded_notebooks_record_why(graded_fixture):
    def outputs(student, grade_id):
        nb = nbformat.read(str(graded_fixture.autograded(student)[0]), as_version=4)
        cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
        return [(o.output_type, o.get("ename"), o.get("text", "") + o.get("evalue", ""))
                for o in cell.outputs]

    def text(student, grade_id):
        return "\n".join(t for _, _, t in outputs(student, grade_id))

    assert "DeadKernelError" in text("killer", "03_offset")
    assert "stopped" in text("killer", "03_offset") and "os._exit" in text("killer", "03_offset")
    assert "MemoryError" in text("hog", "03_offset")
    assert "CellTimeoutError" in text("looper", "03_compact_strides")
    assert "did not finish within 5 s" in text("looper", "03_compact_strides")
    wrong = outputs("wrong", "03_compact_strides")
    assert wrong[-1][1] == "HiddenTestFailed" and "compact_strides((" in wrong[-1][2]
    assert "hidden tests passed" in text("wrong", "03_offset")
    # Only the hidden-test verdict decides the score: one error at most, always last.
    for student in ("solution", "wrong", "killer", "looper", "hog", "blank"):
        for gid in ("03_compact_strides", "03_offset"):
            kinds = [k for k, _, _ in outputs(student, gid)]
            assert kinds.count("error") <= 1 and ("error" not in kinds or kinds[-1] == "error")


@pytest.mark.nbgrader
def test_edited_locked_test_cells_are_restored(graded_fixture, tmp_path):
    d = copy_course(graded_fixture, tmp_path)
    nb = nbformat.read(str(FIXTURE_NB), as_version=4)
    for cell in nb.cells:
        cell.source = cell.source.replace("step *= max(dim, 1)", "step *= dim")
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "03_compact_strides":
            cell.source = "pass"                     # the student deleted the tests
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    nbformat.write(nb, str(inbox / "tamper_fixture.ipynb"))
    course.import_submissions(FIXTURE_CHAPTER, inbox, d, log=quiet)
    results = course.autograde(FIXTURE_CHAPTER, d, student="tamper", log=quiet)
    assert (results["tamper"].score, results["tamper"].max_score) == (8.0, 16.0)


# --------------------------------------------------------------------------- feedback

def _feedback_html(course_dir: Path, student: str) -> str:
    return (course_dir / "feedback" / student / FIXTURE_CHAPTER / "fixture.html").read_text()


@pytest.mark.nbgrader
def test_feedback_hides_hidden_tests_but_keeps_the_verdict(graded_fixture, tmp_path):
    d = copy_course(graded_fixture, tmp_path)
    hidden_line = 'run_check'
    # nbgrader's default feedback leaks the hidden test: source and traceback ...
    defaults = ["nbgrader.preprocessors.GetGrades", "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor"]
    course.run_nbgrader(d, "generate_feedback", FIXTURE_CHAPTER, "wrong",
                        config={"GenerateFeedback.preprocessors": defaults})
    assert hidden_line in _feedback_html(d, "wrong")
    # ... ours removes the hidden source (the kernel never ran it, so no traceback shows it)
    # and keeps pass/fail and the check's message.
    course.feedback(FIXTURE_CHAPTER, d, log=quiet)
    for student in ("solution", "wrong", "killer", "looper", "blank"):  # (the cheater wrote run_check)
        html = _feedback_html(d, student)
        for needle in ("run_check", "HIDDEN TESTS", "grader.hidden"):
            assert needle not in html, (student, needle)
    html = _feedback_html(d, "wrong")
    assert "HiddenTestFailed" in html and "compact_strides((" in html
    assert "hidden tests passed" in html            # the offset cell passed
    # Only the notebooks' own pages: nothing else of the submission folder is copied.
    assert sorted(p.name for p in (d / "feedback" / "wrong" / FIXTURE_CHAPTER).iterdir()) == ["fixture.html"]


# --------------------------------------------------------------------------- grades

@pytest.mark.nbgrader
def test_grades_table_and_csv(graded_fixture, tmp_path, capsys):
    out = tmp_path / "grades.csv"
    assert main(["grades", "--csv", str(out), "--course-dir", str(graded_fixture.course_dir)]) == 0
    rows = list(csv.DictReader(out.open()))
    got = {(r["student"], r["grade_id"]): float(r["score"]) for r in rows}
    assert got[("solution", "03_compact_strides")] == 8.0
    assert got[("killer", "03_offset")] == 0.0
    status = {r["student"]: r["status"] for r in rows}
    assert status["solution"] == "ok" and status["looper"] == "timeout" and status["killer"] == "crashed"
    assert {r["chapter"] for r in rows} == {FIXTURE_CHAPTER}
    text = capsys.readouterr().out
    assert "solution  03_fixture  total 16 / 16" in text


# --------------------------------------------------------------------------- check

def _fill(nb_path: Path, code: str) -> None:
    """Replace the first stub of a released notebook with ``code``."""
    nb = nbformat.read(str(nb_path), as_version=4)
    for cell in nb.cells:
        if "raise NotImplementedError()" in cell.source:
            cell.source = cell.source.replace("    # YOUR CODE HERE\n    raise NotImplementedError()", code)
            break
    nbformat.write(nb, str(nb_path))


@pytest.mark.nbgrader
def test_check_reports_visible_and_hidden_results(graded_fixture, tmp_path, capsys, monkeypatch):
    from grader.selfcheck import check_notebook, format_table

    ws = tmp_path / "ws"
    shutil.copytree(graded_fixture.release_dir, ws)
    nb_path = ws / "fixture.ipynb"
    _fill(nb_path, "    out, step = [], 1\n    for d in reversed(shape):\n"
                   "        out.append(step)\n        step *= d\n    return tuple(reversed(out))")
    results = {r.grade_id: r for r in check_notebook(nb_path, FIXTURE_NB, timeout=30)}
    cs, off = results["03_compact_strides"], results["03_offset"]
    assert (cs.visible, cs.hidden) == ("passed", "failed") and "compact_strides((" in cs.message
    assert cs.slots == ["03.compact_strides"] and cs.points == 8
    assert off.visible == "failed" and "not implemented" in off.message
    table = format_table(list(results.values()))
    assert "total: 0 / 16 points" in table
    # The command: the instructor's notebook passes everything (exit 0) ...
    monkeypatch.setenv("MINI_COURSE_SRC", str(FIXTURE_COURSE))
    assert main(["check", "03", str(FIXTURE_NB), "--timeout", "30"]) == 0
    out = capsys.readouterr().out
    assert "total: 16 / 16 points" in out
    # ... and the learner's workspace notebook, found by chapter, does not (exit 1).
    monkeypatch.setenv("MINI_WORKSPACE", str(tmp_path))
    ws.rename(tmp_path / FIXTURE_CHAPTER)
    assert main(["check", "03", "--timeout", "30"]) == 1
    out = capsys.readouterr().out
    assert f"checking {tmp_path / FIXTURE_CHAPTER / 'fixture.ipynb'}" in out
    assert "total: 0 / 16 points" in out


# --------------------------------------------------------------------------- workspace

@pytest.mark.nbgrader
def test_workspace_never_overwrites_and_grows(tmp_path):
    src = tmp_path / "course"
    shutil.copytree(FIXTURE_COURSE, src)
    ws = tmp_path / "workspace"
    assert course.workspace(ws, course_src=src, log=quiet) == ws.resolve()
    nb = ws / FIXTURE_CHAPTER / "fixture.ipynb"
    assert nb.exists() and (ws / FIXTURE_CHAPTER / "mini" / "_release.py").exists()
    text = nb.read_text()
    assert "run_check" not in text and "step *= max(dim, 1)" not in text
    assert (ws / ".gitignore").read_text().strip().endswith("*")
    # the marker that lets a later chapter's setup load this one's answers (mini.yours)
    assert '"workspace": ".."' in (ws / FIXTURE_CHAPTER / ".mini-workspace.json").read_text()
    nb.write_text(text.replace("YOUR CODE HERE", "MY OWN WORK"))
    (ws / FIXTURE_CHAPTER / "mini" / "_release.py").write_text("CHAPTER = 99\n")
    # A chapter added later appears on the next run; existing work is untouched.
    shutil.copytree(src / FIXTURE_CHAPTER, src / "04_more")
    (src / "04_more" / "fixture.ipynb").rename(src / "04_more" / "more.ipynb")
    lines = []
    assert course.workspace(ws, course_src=src, log=lines.append) == ws.resolve()
    assert lines == [f"created {ws.resolve() / '04_more'}"]
    assert "MY OWN WORK" in nb.read_text()
    assert (ws / FIXTURE_CHAPTER / "mini" / "_release.py").read_text() == "CHAPTER = 99\n"
    assert (ws / "04_more" / "more.ipynb").exists()
    assert (ws / "04_more" / "mini" / "_release.py").read_text().endswith("CHAPTER = 4\n")
    before = {p: p.stat().st_mtime_ns for p in ws.rglob("*") if p.is_file()}
    course.workspace(ws, course_src=src, log=quiet)    # nothing to do: nothing touched
    assert before == {p: p.stat().st_mtime_ns for p in ws.rglob("*") if p.is_file()}


# --------------------------------------------------------------------------- release audit

@pytest.mark.nbgrader
def test_release_refuses_a_student_mini_that_hands_out_answers(graded_fixture, tmp_path):
    """The released chapter's slots are stubs and their numpy stand-ins too; a mini in which
    some accessor still answers (here: a leftover __wrapped__) makes the release fail."""
    d = copy_course(graded_fixture, tmp_path)
    rel_mini = d / "release" / FIXTURE_CHAPTER / "mini"
    shipped = (rel_mini / "ndarray" / "_numpy_fallbacks.py").read_text()
    assert 'raise ExerciseNotImplemented("03.compact")' in shipped        # stand-ins stubbed
    assert "def row_major" in shipped                                     # mini's own helper kept
    assert "fallback=" not in (rel_mini / "ndarray" / "strides.py").read_text()
    strides = d / "source" / FIXTURE_CHAPTER / "mini" / "ndarray" / "strides.py"
    strides.write_text(strides.read_text() + "\ncompact_strides.__wrapped__ = _fallback.row_major\n")
    with pytest.raises(CourseError, match=r"03\.compact_strides: wrapped earns 8 of 8"):
        course.release("03", d, log=quiet)


# --------------------------------------------------------------------------- batch

@pytest.mark.nbgrader
def test_an_interrupted_run_resumes_and_the_gradebook_is_backed_up(graded_fixture, tmp_path):
    d = copy_course(graded_fixture, tmp_path)
    before = {(r["student"], r["grade_id"]): r["score"] for r in course.grades(d)}
    merged = []

    def interrupt_after_one(line):
        if "[" in line and "/" in line:
            merged.append(line.split(":")[0])
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        course.autograde(FIXTURE_CHAPTER, d, jobs=1, restart=True, log=interrupt_after_one)
    assert len(merged) == 1
    backups = sorted((d / ".mini-grader" / "backup").glob("gradebook-*.db"))
    assert backups
    import sqlite3
    con = sqlite3.connect(str(backups[-1]))
    try:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert con.execute("SELECT count(*) FROM grade").fetchone()[0] > 0
    finally:
        con.close()
    # A file rejected at import is a row of the summary and of the grades, with its status.
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "no name here!.ipynb").write_bytes(FIXTURE_NB.read_bytes())
    course.import_submissions(FIXTURE_CHAPTER, inbox, d, log=quiet)
    lines = []
    results = course.autograde(FIXTURE_CHAPTER, d, jobs=2, log=lines.append)
    row = next(l for l in lines if "[rejected at import]" in l)
    assert row.startswith("no name here!.ipynb: - [rejected at import]") and "not a safe student id" in row
    assert "1 files rejected at import" in lines[-1]
    rejected_rows = [r for r in course.grades(d) if r["status"] == "rejected at import"]
    assert [(r["student"], r["notebook"]) for r in rejected_rows] == [("no name here!.ipynb",) * 2]
    assert any("resuming an interrupted run: 1 of" in l for l in lines)
    assert results[merged[0]].resumed
    assert sum(not r.resumed for r in results.values()) == len(results) - 1
    after = {(r["student"], r["grade_id"]): r["score"] for r in course.grades(d)
             if r["status"] != "rejected at import"}
    assert after == before                      # the same grades, whichever run made them


@pytest.mark.nbgrader
def test_grading_again_gives_the_same_grades(graded_fixture, tmp_path):
    d = copy_course(graded_fixture, tmp_path)
    first = course.grades(d)
    course.autograde(FIXTURE_CHAPTER, d, student="wrong", restart=True, log=quiet)
    course.autograde(FIXTURE_CHAPTER, d, student="solution", restart=True, log=quiet)
    assert course.grades(d) == first
