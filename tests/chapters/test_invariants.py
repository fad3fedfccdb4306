"""Grading invariants, for every chapter of course/ that has a notebook:

- the instructor's solution scores full marks (100) under a real nbgrader autograde;
- the released blank notebook runs top to bottom with errors only in graded test cells,
  and scores 0;
- every entry of the chapter's mistake catalogue fails its check with the catalogued
  message (in process, fast);
- mini's reference of every slot of the chapter passes its check (in process);
- the notebook's solution regions are mini's references, and each hidden-test cell is worth
  the points of its check;
- the notebook is what its source (``course/sources/NN_topic/*.md``) builds to with
  ``mini-course build``, without outputs (more on the sources: ``test_sources.py``);
- the notebook's nbgrader metadata matches the chapter's checks.
"""
from __future__ import annotations

import pytest

import nbformat

from helpers import COURSE, chapters_with_notebooks, execute_notebook, graded_once, test_cells

CHAPTERS = chapters_with_notebooks()


def _graded(chapter, tmp_path_factory):
    return graded_once(f"chapter-{chapter}", tmp_path_factory, chapter=chapter)


def _number(chapter: str) -> int:
    return int(chapter[:2])


@pytest.mark.nbgrader
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_solution_scores_full_marks(chapter, tmp_path_factory):
    graded = _graded(chapter, tmp_path_factory)
    lost = {gid: s for gid, s in graded.scores["solution"].items() if s[0] != s[1]}
    assert not lost, f"the instructor solution lost points: {lost}"
    assert graded.total("solution") == (100.0, 100.0), graded.total("solution")


@pytest.mark.nbgrader
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_blank_scores_zero(chapter, tmp_path_factory):
    graded = _graded(chapter, tmp_path_factory)
    earned = {gid: s for gid, s in graded.scores["blank"].items() if s[0] != 0}
    assert not earned, f"the blank notebook earned points: {earned}"


@pytest.mark.nbgrader
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_blank_runs_with_errors_only_in_test_cells(chapter, tmp_path_factory):
    graded = _graded(chapter, tmp_path_factory)
    for nb in sorted(graded.release_dir.glob("*.ipynb")):
        errors = execute_notebook(nb)
        bad = [e for e in errors if not e.is_test]
        assert not bad, f"{nb.name}: cells that are not test cells failed: {bad}"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_mistake_catalogue_is_caught(chapter):
    from grader.checks import run_in_process
    from grader.mistakes import mistakes_for_chapter

    for m in mistakes_for_chapter(_number(chapter)):
        v = run_in_process(m.slot_id, m.fn)
        assert not v.passed, f"{m.slot_id}: mistake {m.name!r} passed its check"
        assert m.expect_message in v.message, (
            f"{m.slot_id}: mistake {m.name!r}: message {v.message!r} lacks {m.expect_message!r}")


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_references_pass_their_checks(chapter):
    from grader.checks import checks_for_chapter, run_in_process
    from mini.exercises import slots

    owned = slots()
    for slot_id in checks_for_chapter(_number(chapter)):
        if slot_id in owned:
            v = run_in_process(slot_id, owned[slot_id].reference)
            assert v.passed, f"mini's reference of {slot_id} fails its check: {v.message}"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_notebook_solutions_are_minis_references(chapter):
    from grader.course import default_mini_src
    from grader.solutions import normalize, notebook_regions, reference_regions

    refs = reference_regions(default_mini_src())
    for nb in sorted((COURSE / chapter).glob("*.ipynb")):
        for slot, text in notebook_regions(nb).items():
            assert slot in refs, f"{nb.name}: @implement({slot!r}) has no reference in mini"
            assert normalize(text) == normalize(refs[slot][1]), (
                f"{nb.name}: the solution of {slot} differs from mini's reference; "
                f"run `mini-course sync-solutions`")


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_hidden_test_cells_carry_their_checks_points(chapter):
    from grader.checks import all_checks
    from grader.course import hidden_slots_by_cell

    checks = all_checks()
    total = 0.0
    for nb_path in sorted((COURSE / chapter).glob("*.ipynb")):
        nb = nbformat.read(str(nb_path), as_version=4)
        cells = test_cells(nb)
        total += sum(float(c.metadata["nbgrader"].get("points", 0) or 0) for c in cells.values())
        for gid, slot_ids in hidden_slots_by_cell(nb_path).items():
            for slot in slot_ids:
                assert slot in checks, f"{nb_path.name}: {gid} calls run_check({slot!r}), which has no check"
            points = float(cells[gid].metadata["nbgrader"].get("points", 0))
            want = sum(checks[s].points for s in slot_ids)
            assert points == want, f"{nb_path.name}: cell {gid} is worth {points}, its checks {want}"
    assert total == 100, f"{chapter}: the test cells are worth {total} points, not 100"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_notebook_is_built_from_its_source(chapter, capsys):
    from grader.cli import main
    assert main(["build", chapter, "--check"]) == 0, capsys.readouterr()


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_notebook_has_no_outputs(chapter):
    for nb_path in sorted((COURSE / chapter).glob("*.ipynb")):
        for cell in nbformat.read(str(nb_path), as_version=4).cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_points_are_the_checks_points(chapter):
    """The build prices test cells from POINTS; the grader from the registered checks."""
    import importlib
    from grader.checks import checks_for_chapter
    points = importlib.import_module(f"grader.checks.ch{chapter}").POINTS
    assert points == {s: c.points for s, c in checks_for_chapter(_number(chapter)).items()}
    assert sum(points.values()) == 100


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_notebook_grading_metadata_matches_the_checks(chapter):
    from grader.checks import checks_for_chapter, solution_grade_id, test_grade_id
    checks = checks_for_chapter(_number(chapter))
    total, where = 0, {}         # a chapter may span several notebooks: 100 points in all
    for nb_path in sorted((COURSE / chapter).glob("*.ipynb")):
        graded, solutions, ids = {}, set(), []
        for cell in nbformat.read(str(nb_path), as_version=4).cells:
            meta = cell.metadata.get("nbgrader")
            if not meta:
                continue
            assert meta["schema_version"] == 3
            ids.append(meta["grade_id"])
            if meta["grade"]:
                assert meta["locked"] and not meta["solution"]
                graded[meta["grade_id"]] = (meta["points"], cell.source)
            if meta["solution"]:
                assert not meta["grade"] and not meta["locked"]
                solutions.add(meta["grade_id"])
        assert len(ids) == len(set(ids)), "grade ids must be unique"
        total += sum(points for points, _ in graded.values())
        for slot, chk in checks.items():
            if test_grade_id(slot) not in graded:
                continue
            assert slot not in where, f"{slot} is graded in {where[slot]} and {nb_path.name}"
            where[slot] = nb_path.name
            points, source = graded[test_grade_id(slot)]
            assert points == chk.points, slot
            assert f'run_check("{slot}",' in source
            assert "### BEGIN HIDDEN TESTS" in source and "### END HIDDEN TESTS" in source
            assert solution_grade_id(slot) in solutions
    assert total == 100
    assert set(where) == set(checks), f"slots graded in no notebook: {set(checks) - set(where)}"


@pytest.mark.nbgrader
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_release_leaks_no_solution_and_no_hidden_test(chapter, tmp_path_factory):
    from grader.course import default_mini_src, find_leaks

    graded = _graded(chapter, tmp_path_factory)
    source = graded.course_dir / "source" / graded.chapter
    leaks = find_leaks(graded.release_dir, _number(chapter), default_mini_src(), source)
    assert not leaks, leaks[:10]
    assert not list(graded.release_dir.rglob("*.md")), "a chapter source reached the release"
