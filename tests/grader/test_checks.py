"""The check registry, the strict helpers and the in-process runner."""
from __future__ import annotations

import numpy as np
import pytest

import grader.checks as checks
from grader.checks import (CheckFailed, Verdict, all_checks, chapter_of, check, get_check,
                           run_in_process, solution_grade_id, test_grade_id)
from grader.checks import helpers as H
from grader.mistakes import Mistake, all_mistakes


@pytest.fixture
def scratch_slot(monkeypatch):
    """Register a throwaway check for slot 99.double (removed afterwards)."""
    monkeypatch.setattr(checks, "_CHECKS", dict(checks._CHECKS))

    @check("99.double", points=5)
    def check_double(fn):
        for x in (0, 1, 7, -3):
            got = H.expect_int(H.call(fn, x, name="double"), f"double({x})")
            H.expect_equal(got, 2 * x, f"double({x})", hint="multiply by two")

    return "99.double"


def test_registry_discovers_chapter_modules():
    found = all_checks()
    assert "03.compact_strides" in found
    assert found["03.compact_strides"].chapter == 3
    assert get_check("03.offset").module == "grader.checks.ch03_strides"
    with pytest.raises(KeyError, match="no grader check"):
        get_check("42.nothing")


def test_a_fresh_grader_process_finds_minis_reference_of_every_slot():
    """The trusted grader computes expected values with ``mini.exercises.reference`` in a
    process that imported only ``mini`` and ``grader.checks`` (nothing imported, say,
    ``mini.jit`` for it): every slot declared in mini's source must be found from there,
    else the autograde of its chapter crashes on a KeyError."""
    import json
    import re
    import subprocess
    import sys
    from pathlib import Path

    import mini
    declared = set()
    for path in Path(mini.__file__).parent.rglob("*.py"):
        declared |= set(re.findall(r"""@exercise\(\s*["'](\d\d\.\w+)["']""", path.read_text()))
    code = ("import json, sys, grader.checks, mini.exercises as ex\n"
            "found = {}\n"
            "for slot in json.loads(sys.argv[1]):\n"
            "    try:\n"
            "        ex.reference(slot); found[slot] = True\n"
            "    except KeyError:\n"
            "        found[slot] = False\n"
            "print(json.dumps(found))")
    out = subprocess.run([sys.executable, "-c", code, json.dumps(sorted(declared))],
                         capture_output=True, text=True, check=True).stdout
    found = json.loads(out.splitlines()[-1])
    assert len(declared) > 40 and "01.record_op" in declared
    missing = sorted(s for s, ok in found.items() if not ok)
    assert not missing, f"mini.exercises.reference cannot find these slots in a fresh process: {missing}"


def test_ids_and_grade_ids():
    assert chapter_of("03.compact_strides") == 3
    for bad in ("3.x", "03", "ab.c", "03."):
        with pytest.raises(ValueError):
            chapter_of(bad)
    assert test_grade_id("03.compact_strides") == "03_compact_strides"
    assert solution_grade_id("03.compact_strides") == "03_compact_strides_code"


def test_duplicate_check_for_a_slot_is_refused(scratch_slot):
    with pytest.raises(ValueError, match="already has a check"):
        @check(scratch_slot, points=1)
        def another(fn):
            pass


def test_run_in_process_pass_and_fail(scratch_slot):
    v = run_in_process(scratch_slot, lambda x: 2 * x)
    assert v == Verdict(scratch_slot, True, "passed", 5.0, 5.0)
    v = run_in_process(scratch_slot, lambda x: x + x if x else 1)
    assert not v.passed and v.points == 0 and v.max_points == 5
    assert v.message == "double(0): expected 0, got 1; multiply by two"


@pytest.mark.parametrize("body, fragment", [
    ("raise NotImplementedError()", "not implemented yet"),
    ("raise SystemExit(3)", "sys.exit()"),
    ("raise KeyboardInterrupt", "KeyboardInterrupt"),
    ("raise ValueError('boom')", "double(0) raised ValueError: boom"),
    ("return f(x)", "RecursionError: maximum recursion depth exceeded (is a recursive"),
    ("raise GeneratorExit", "GeneratorExit"),
    ("raise NotImplementedError('later')", "NotImplementedError: later"),
])
def test_run_in_process_turns_every_exception_into_a_verdict(scratch_slot, body, fragment):
    ns = {}
    exec(f"def f(x):\n    {body}\n", ns)
    v = run_in_process(scratch_slot, ns["f"])
    assert not v.passed and fragment in v.message, v.message


def test_exercise_not_implemented_is_reported(scratch_slot):
    from mini.exercises import ExerciseNotImplemented

    def stub(x):
        raise ExerciseNotImplemented("99.double")

    def needs_other(x):
        raise ExerciseNotImplemented("03.compact_strides")

    assert "not implemented yet" in run_in_process(scratch_slot, stub).message
    assert "relies on exercise 03.compact_strides" in run_in_process(scratch_slot, needs_other).message


def test_student_raising_check_failed_does_not_pass(scratch_slot):
    def sly(x):
        raise CheckFailed("passed")
    v = run_in_process(scratch_slot, sly)
    assert not v.passed and "raised" in v.message


def test_not_callable(scratch_slot):
    v = run_in_process(scratch_slot, 42)
    assert not v.passed and "expected your function" in v.message


class AlwaysEqual:
    def __eq__(self, other):
        return True

    def __repr__(self):  # never called by the helpers
        raise RuntimeError("repr called")

    __hash__ = object.__hash__


class EvilInt(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


def test_strict_helpers_refuse_objects_the_student_made():
    with pytest.raises(CheckFailed, match="AlwaysEqual"):
        H.expect_tuple_of_ints(AlwaysEqual(), "x")
    with pytest.raises(CheckFailed, match="AlwaysEqual"):
        H.expect_int(AlwaysEqual(), "x")
    with pytest.raises(CheckFailed, match="subclass of int"):
        H.expect_int(EvilInt(3), "x")
    with pytest.raises(CheckFailed, match="x\\[1\\] should be a Python int"):
        H.expect_tuple_of_ints((1, EvilInt(2)), "x")
    with pytest.raises(CheckFailed, match="the bool True"):
        H.expect_int(True, "x")
    with pytest.raises(CheckFailed, match="convert it with int"):
        H.expect_int(np.int64(3), "x")
    assert H.expect_int(np.int64(3), "x", allow_numpy=True) == 3
    with pytest.raises(CheckFailed, match="return tuple"):
        H.expect_tuple_of_ints([1, 2], "x")
    with pytest.raises(CheckFailed, match="3 entries"):
        H.expect_tuple_of_ints((1, 2), "x", length=3)
    with pytest.raises(CheckFailed, match="not a plain value"):
        H.expect_equal(AlwaysEqual(), (3, 1), "x")
    assert H.expect_tuple_of_ints((3, 1), "x") == (3, 1)


def test_array_helpers():
    class Sub(np.ndarray):
        pass

    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    with pytest.raises(CheckFailed, match="numpy array"):
        H.expect_array(a.view(Sub), "a")
    with pytest.raises(CheckFailed, match="shape \\(3, 2\\)"):
        H.expect_array(a, "a", shape=(3, 2))
    with pytest.raises(CheckFailed, match="dtype float64"):
        H.expect_array(a, "a", dtype=np.float64)
    with pytest.raises(CheckFailed, match="Python objects"):
        H.expect_array(np.array([AlwaysEqual()], dtype=object), "a")
    got = H.expect_array(a, "a", shape=(2, 3), dtype=np.float32)
    assert got is not a and np.shares_memory(got, a) is False
    H.expect_array_equal(a, a.copy(), "a")
    with pytest.raises(CheckFailed, match="1 of 6 elements differ; first at index \\(1, 2\\)"):
        b = a.copy()
        b[1, 2] = -1
        H.expect_array_equal(b, a, "a")
    H.expect_allclose(a * (1 + 1e-7) + 1e-9, a, "a")
    with pytest.raises(CheckFailed, match="largest difference"):
        H.expect_allclose(a + 1, a, "a")


def test_call_and_expect_raises():
    def boom(x):
        raise IndexError("out of range")

    with pytest.raises(CheckFailed, match=r"f\(\(1, 2\)\) raised IndexError: out of range"):
        H.call(boom, (1, 2), name="f")
    with pytest.raises(NotImplementedError):
        H.call(lambda: (_ for _ in ()).throw(NotImplementedError()))
    e = H.expect_raises(ValueError, lambda: int("x"), name="parse")
    assert isinstance(e, ValueError)
    with pytest.raises(CheckFailed, match="should raise ValueError, but returned 3"):
        H.expect_raises(ValueError, lambda: 3, name="g")
    with pytest.raises(CheckFailed, match="should raise ValueError, but raised IndexError"):
        H.expect_raises(ValueError, boom, 1, name="g")
    arr = np.zeros(3)
    H.call(lambda a: a.fill(7), arr)  # the student gets a copy of our inputs
    assert not arr.any()


def test_describe_never_calls_student_methods():
    assert H.describe(AlwaysEqual()) == f"an object of type {__name__}.AlwaysEqual"
    assert H.describe((1, 2)) == "(1, 2)"
    assert "numpy int64 scalar" in H.describe(np.int64(2))

    class Loud(Exception):
        def __str__(self):
            raise RuntimeError("no")
    assert H.describe_exception(Loud("quiet")) == f"{__name__}.Loud: quiet"


def test_mistake_catalogue_format():
    mistakes = all_mistakes()
    assert mistakes and all(isinstance(m, Mistake) for m in mistakes)
    for m in mistakes:
        assert m.slot_id in all_checks(), m
        assert callable(m.fn) and m.expect_message and m.name


@pytest.mark.blas_sensitive
@pytest.mark.parametrize("chapter", [2, 3, 4, 5])
def test_every_reference_passes_its_check(chapter):
    """The hidden checks accept mini's references: a check that asked for bit equality
    where a valid computation may sum in another order (another BLAS kernel, another
    machine) would fail a correct student.  (The quizzes have no reference.)"""
    from grader.checks import checks_for_chapter
    from mini.exercises import reference
    failed = {}
    for slot in sorted(checks_for_chapter(chapter)):
        try:
            ref = reference(slot)
        except KeyError:        # a quiz: the answer is a number, no reference function
            continue
        verdict = run_in_process(slot, ref)
        if not verdict.passed:
            failed[slot] = verdict.message
    assert not failed, failed
