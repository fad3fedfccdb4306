"""mini/notebook.py: the helpers every chapter's setup cell imports, shipped to students.

Each visible-check helper passes what is right and fails what is wrong with a message that
says what was expected and what came back; ``needs_exercises`` turns an unfinished exercise
into a note; ``run_check`` defers to the grader where there is one; and the module holds no
solution and passes the release leak check, which still catches hidden tests elsewhere.
"""
from __future__ import annotations

import importlib.util
import shutil

import nbformat
import numpy as np
import pytest

import mini
from mini import notebook
from mini.exercises import ExerciseNotImplemented
from mini.notebook import (expect, expect_array_close, expect_close, expect_pair, expect_raises,
                           needs_exercises, run_check, values)


# --------------------------------------------------------------------------- needs_exercises

def test_needs_exercises_names_the_unfinished_exercise(capsys):
    with needs_exercises():
        raise ExerciseNotImplemented("03.offset")
    assert capsys.readouterr().out == "-> finish exercise 03.offset to run this demo\n"
    with needs_exercises():
        raise NotImplementedError("a stub")
    assert "not finished yet (a stub)" in capsys.readouterr().out


def test_needs_exercises_reports_cpp_that_does_not_compile(capsys):
    from mini.utils.cpp_extension import CompileError
    with needs_exercises():
        raise CompileError("kernel", [], "kernel.cpp:3:5: error: expected ';'", ["g++"])
    out = capsys.readouterr().out
    assert out.startswith("-> your C++ does not compile yet:\n") and "expected ';'" in out


def test_needs_exercises_lets_real_errors_through():
    with pytest.raises(ValueError, match="a real bug"):
        with needs_exercises():
            raise ValueError("a real bug")


# --------------------------------------------------------------------------- visible checks

def test_expect_wants_plain_ints_in_a_tuple():
    expect((3, 1), (3, 1), "compact_strides((2, 3))", "hint")
    with pytest.raises(AssertionError, match=r"should be \(3, 1\), got \(1, 2\)\.\n  Likely mistake: column"):
        expect((1, 2), (3, 1), "compact_strides((2, 3))", "column-major")
    with pytest.raises(AssertionError, match=r"return a tuple, not a list"):
        expect([3, 1], (3, 1), "compact_strides((2, 3))", "hint")
    with pytest.raises(AssertionError, match=r"use plain Python ints"):
        expect((np.int64(3), 1), (3, 1), "compact_strides((2, 3))", "hint")


def test_expect_names_a_known_wrong_value_and_otherwise_only_the_concept():
    wrong = {(1, 2): "column-major", (6, 3): "includes its own axis"}
    expect((3, 1), (3, 1), "f()", "concept", wrong=wrong)
    for got, shown in [((1, 2), "column-major"), ((6, 3), "includes its own axis"),
                       ((9, 9), "concept")]:
        with pytest.raises(AssertionError) as e:
            expect(got, (3, 1), "f()", "concept", wrong=wrong)
        text = str(e.value)
        assert f"should be (3, 1), got {got!r}" in text and f"Likely mistake: {shown}" in text
        assert all(w not in text for w in wrong.values() if w != shown)
    with pytest.raises(AssertionError, match="Likely mistake: none found"):
        expect(1, None, "g()", "x", wrong={1: "none found"})   # None as the expected value
    with pytest.raises(AssertionError, match="not a numpy integer"):
        expect(np.int64(5), 5, "element_offset(...)", "the formula")   # right value, wrong type


def test_self_check_tells_right_or_wrong_without_printing_the_answer(capsys):
    from mini.notebook import answer_digest, self_check
    assert answer_digest(" b ") == answer_digest("B") != answer_digest("C")
    assert answer_digest(np.int64(4)) == answer_digest(4) != answer_digest(True)
    verdicts = {answer_digest("B"): (True, "shares the buffer"),
                answer_digest("A"): (False, "no new buffer")}
    assert self_check("b", verdicts, otherwise="one letter") is True
    assert capsys.readouterr().out == "Right. shares the buffer\n"
    assert self_check("A", verdicts, otherwise="one letter") is False
    assert capsys.readouterr().out == "Not right ('A'). no new buffer\n"
    assert self_check("Z", verdicts, otherwise="one letter") is False
    assert "one letter" in capsys.readouterr().out


def test_answered_names_the_unanswered_self_check():
    from mini.notebook import answered

    def answer_views():
        raise NotImplementedError()

    with pytest.raises(NotImplementedError, match=r"self-check 03.quiz_views is not answered yet: "
                                                  r"make answer_views\(\) in the cell above") as e:
        answered(answer_views, "03.quiz_views")
    assert e.value.slot_id == "03.quiz_views"
    assert answered(lambda: "B", "03.quiz_views") == "B"

    def on_purpose():
        raise NotImplementedError("my own message")
    with pytest.raises(NotImplementedError, match="my own message"):
        answered(on_purpose, "03.quiz_views")


def test_expect_close_on_tensors():
    expect_close(mini.tensor([1.0, 2.0]), [1.0, 2.0 + 1e-8], "f(x)", "hint")
    expect_close(0.1, 0.1 + 1e-9, "lr at step 0")                 # a number where one is expected
    with pytest.raises(AssertionError, match="should return a mini Tensor, got ndarray"):
        expect_close(np.array([1.0, 2.0]), [1.0, 2.0], "f(x)", "hint")
    with pytest.raises(AssertionError, match=r"should have shape \(2,\), got shape \(1, 2\)"):
        expect_close(mini.tensor([[1.0, 2.0]]), [1.0, 2.0], "f(x)", "hint")
    with pytest.raises(AssertionError, match=r"largest difference 0\.5\)\n  Likely mistake: sum"):
        expect_close(mini.tensor([1.0, 2.5]), [1.0, 2.0], "f(x)", "sum over the broadcast axis")
    with pytest.raises(AssertionError) as info:
        expect_close(mini.tensor([1.0, 2.5]), [1.0, 2.0], "f(x)")
    assert "Likely mistake" not in str(info.value)                # no hint: none made up


def test_expect_array_close_checks_type_dtype_and_values():
    a = np.arange(4, dtype=np.float32)
    expect_array_close(a.copy(), a, "omp_add(a, b)", "hint")
    with pytest.raises(AssertionError, match="should return a numpy array, got Tensor"):
        expect_array_close(mini.tensor(a), a, "omp_add(a, b)", "hint")
    with pytest.raises(AssertionError, match="expected dtype float32, got float64"):
        expect_array_close(a.astype(np.float64), a, "omp_add(a, b)", "hint")
    with pytest.raises(AssertionError, match=r"values differ \(largest difference 1\)"):
        expect_array_close(a + np.float32([0, 0, 0, 1]), a, "omp_add(a, b)", "the last element")


def test_expect_pair_and_values():
    g = mini.tensor([1.0, 2.0])
    assert expect_pair((g, g), "add_vjp(g, None, None)") == (g, g)
    with pytest.raises(AssertionError, match=r"should return a tuple \(grad_a, grad_b\)"):
        expect_pair(g, "add_vjp(g, None, None)")
    v = values(mini.tensor([1.5], requires_grad=True) * 2)
    assert v.dtype == np.float64 and v.tolist() == [3.0]


def test_expect_raises():
    def element_offset(index, strides, offset):
        if len(index) != len(strides):
            raise ValueError("lengths differ")
        return offset

    expect_raises(ValueError, element_offset, (1, 2), (3,), 0, hint="h")
    with pytest.raises(AssertionError, match=r"element_offset\(\(1, 2\), \(3, 1\), 0\) should raise "
                                             r"ValueError, but returned 0\.\n  Likely mistake: check"):
        expect_raises(ValueError, element_offset, (1, 2), (3, 1), 0, hint="check the lengths")

    def unfinished(*args):
        raise ExerciseNotImplemented("02.seed_gradient")

    # NotImplementedError is a RuntimeError: an unfinished exercise must not pass for one
    with pytest.raises(ExerciseNotImplemented):
        expect_raises(RuntimeError, unfinished, None, hint="h")


# --------------------------------------------------------------------------- run_check

def test_run_check_defers_to_the_grader(monkeypatch):
    calls = []
    monkeypatch.setattr("grader.hidden.run_check", lambda slot, fn: calls.append((slot, fn)))
    run_check("03.offset", len)
    assert calls == [("03.offset", len)]


def test_run_check_without_the_grader_says_when_the_hidden_tests_run(monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "grader" else real(name, *a))
    run_check("03.offset", len)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("03.offset: the hidden tests")
    assert "when the instructor grades" in out


# --------------------------------------------------------------------------- what ships

def test_the_module_holds_no_solution_and_ships_unchanged(tmp_path):
    from grader.course import default_mini_src
    from grader.solutions import strip_package
    text = (default_mini_src() / "notebook.py").read_text()
    assert "BEGIN SOLUTION" not in text and "@exercise" not in text
    strip_package(default_mini_src(), tmp_path / "mini", 2)
    assert (tmp_path / "mini" / "notebook.py").read_text() == text


def test_find_leaks_allows_the_module_and_still_flags_hidden_tests(tmp_path):
    """The student's mini defines run_check (allowed); a hidden-test call in a notebook or in
    any other file of a release is a leak."""
    from grader.course import default_mini_src, find_leaks
    from grader.solutions import strip_package
    rel = tmp_path / "release"
    strip_package(default_mini_src(), rel / "mini", 3)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("from mini.notebook import expect, needs_exercises")]
    nbformat.write(nb, str(rel / "strides.ipynb"))
    assert "def run_check(" in (rel / "mini" / "notebook.py").read_text()
    assert find_leaks(rel, 3, default_mini_src()) == []

    call = 'from grader.hidden import run_check; run_check("03.offset", element_offset)'
    nb.cells.append(nbformat.v4.new_code_cell(f"expect(1, 1, 'x', 'y')\n{call}"))
    nbformat.write(nb, str(rel / "strides.ipynb"))
    (rel / "helpers.py").write_text('import numpy\nrun_check("03.offset", f)\n')
    leaks = find_leaks(rel, 3, default_mini_src())
    assert ("strides.ipynb", 3, call) in leaks
    assert ("helpers.py", 2, 'run_check("03.offset", f)') in leaks
    shutil.rmtree(rel / "mini")
    assert len(find_leaks(rel, 3, default_mini_src())) == 2


def test_interactive_follows_the_environment(monkeypatch):
    import importlib
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    try:
        assert importlib.reload(notebook).INTERACTIVE is False
        monkeypatch.delenv("NBGRADER_EXECUTION")
        monkeypatch.delenv("MINI_NO_WIDGETS", raising=False)
        assert importlib.reload(notebook).INTERACTIVE is True
    finally:
        monkeypatch.undo()
        importlib.reload(notebook)
