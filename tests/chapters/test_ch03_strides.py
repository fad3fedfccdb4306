"""Chapter 03 (strides): the seed facts through mini, the napkin model against mini's
allocation counter, and the notebook's consistency with mini and the grader.

The grading invariants shared by every chapter (reference scores full marks, blank notebook
scores zero, every catalogued mistake is caught) live in ``test_invariants.py``.
"""
from __future__ import annotations

from pathlib import Path

import nbformat
import numpy as np
import pytest

import mini
from helpers import (assert_signatures_and_docstrings_equal_references, run_notebook_cpu_seconds,
                     assert_solution_regions_equal_references, displayed_widget_bundle)
from mini.ndarray import track_allocations
from mini.napkin import DEFAULT_CHAIN, chain_bytes, chain_costs, nbytes

ROOT = Path(__file__).resolve().parents[2]
CHAPTER = ROOT / "course" / "03_strides"
NOTEBOOK = CHAPTER / "strides.ipynb"
SLOTS = ["03.compact_strides", "03.offset", "03.slice_view", "03.permute", "03.broadcast_to",
         "03.reshape", "03.compact"]
QUIZZES = ["03.quiz_copy_bytes", "03.quiz_views"]


# --------------------------------------------------------------------------- seed facts

def test_bytes_of_a_1024_square_float32_matrix():
    assert nbytes((1024, 1024), itemsize=4) == 4_194_304
    with track_allocations() as stats:
        x = mini.zeros(1024, 1024)
    assert x.dtype == mini.float32
    assert stats.bytes == 4_194_304 and stats.count == 1


def test_row_major_strides_and_transpose_without_copy():
    x = mini.zeros(2, 3)
    assert x.stride() == (3, 1)
    assert np.asfortranarray(np.zeros((2, 3), np.float32)).strides == (4, 8)  # column-major (1, 2)
    with track_allocations() as stats:
        y = x.T
    assert y.stride() == (1, 3) and tuple(y.shape) == (3, 2)
    assert stats.bytes == 0
    assert not y.is_contiguous()


def test_offset_formula_and_slice_view_of_3x4():
    A = mini.arange(12.0).reshape(3, 4)
    with track_allocations() as stats:
        v = A[0:2, 1:3]
    assert stats.bytes == 0
    assert tuple(v.shape) == (2, 2) and v.stride() == (4, 1) and v.storage_offset() == 1
    # offset = i*s0 + j*s1 (+ offset): element [1, 1] of the view is A[1, 2] = 6
    assert v[1, 1].item() == 6.0 == 1 + 1 * 4 + 1 * 1


def test_reshape_of_a_transpose_copies():
    A = mini.arange(12.0).reshape(3, 4)
    assert A.T.stride() == (1, 4)
    with track_allocations() as stats:
        flat = A.T.reshape(-1)
    assert stats.bytes == 12 * 4 and stats.count == 1
    np.testing.assert_array_equal(flat.numpy(), np.arange(12.0).reshape(3, 4).T.reshape(-1))
    with track_allocations() as stats:
        A.reshape(-1)
    assert stats.bytes == 0
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        A.T.view(-1)


def test_broadcast_is_stride_zero():
    b = mini.tensor([1.0, 2.0, 3.0])
    with track_allocations() as stats:
        B = b.expand(4, 3)
    assert B.stride() == (0, 1) and stats.bytes == 0


# --------------------------------------------------------------------------- the napkin model

CHAINS = [
    ((1000, 1000), DEFAULT_CHAIN),
    ((3, 4), [("T",), ("reshape", (-1,))]),
    ((3, 4), [("reshape", (-1,)), ("reshape", (2, 6)), ("contiguous",)]),
    ((64, 3, 32, 32), [("permute", (0, 2, 3, 1)), ("reshape", (-1, 3)), ("contiguous",)]),
    ((4, 6), [("getitem", (slice(None), slice(None, None, 2))), ("reshape", (2, 2, 3)),
              ("reshape", (12,))]),
    ((5,), [("getitem", (None,)), ("expand", (4, 5)), ("contiguous",), ("T",)]),
    ((2, 3), [("getitem", (1, -1)), ("expand", (3,)), ("reshape", (3, 1))]),
    ((8, 3, 16, 16), [("permute", (0, 2, 3, 1)), ("getitem", (slice(None), slice(4, 12),
                                                              slice(4, 12))),
                      ("getitem", (Ellipsis, slice(None, None, -1), slice(None))),
                      ("reshape", (-1, 3))]),
]


def test_chain_model_of_the_widget_default():
    costs = chain_costs((1000, 1000), DEFAULT_CHAIN, itemsize=4)
    assert [c.is_view for c in costs] == [True, True, False, True]
    assert chain_bytes((1000, 1000)) == 2_000_000
    assert chain_bytes((1000, 1000), [("T",), ("reshape", (-1,))]) == 4_000_000  # the quiz


@pytest.mark.parametrize("shape,steps", CHAINS)
def test_chain_model_matches_the_allocation_counter(shape, steps):
    from mini.napkin.widgets import measure_chain
    model = chain_costs(shape, steps, itemsize=4)
    meas = measure_chain(shape, steps, "float32")
    assert meas.error is None
    assert meas.values_match is True
    assert [c.bytes for c in model] == meas.bytes


def test_widget_prints_without_a_frontend(capsys, monkeypatch):
    from mini.napkin.widgets import napkin_chain
    monkeypatch.setenv("MINI_NO_WIDGETS", "1")
    napkin_chain(plot=False)
    out = capsys.readouterr().out
    assert "2,000,000" in out and "your estimate: none yet" in out
    napkin_chain(estimate="4 MB", plot=False)
    out = capsys.readouterr().out
    assert "estimate / model = 2.00" in out
    assert "x itself, 4,000,000 B, existed before the chain and is not counted" in out
    assert "A multiple of the model" in out


@pytest.mark.parametrize("estimate, why", [
    (2_000_000, "That is the model's count"),
    (6_000_000, "That is the model plus x itself (4,000,000 B)"),   # counted the initial x
    (0, "You counted every step as a view"),
    (1_000_000, "Below the model"),
    (2_500_000, "Above the model"),
])
def test_widget_explains_what_the_estimate_counted(capsys, monkeypatch, estimate, why):
    from mini.napkin.widgets import napkin_chain
    monkeypatch.setenv("MINI_NO_WIDGETS", "1")
    napkin_chain(estimate=estimate, plot=False)
    assert why in capsys.readouterr().out


def test_widget_reports_an_unfinished_exercise(capsys, monkeypatch):
    from mini.exercises import implement
    from mini.napkin.widgets import napkin_chain
    monkeypatch.setenv("MINI_NO_WIDGETS", "1")

    @implement("03.permute")
    def permute(shape, strides, axes):
        raise NotImplementedError()

    napkin_chain(plot=False)
    out = capsys.readouterr().out
    assert "finish exercise 03.permute" in out and "model:    2,000,000" in out


def test_widget_blames_a_reshape_that_never_copies(capsys, monkeypatch):
    from grader.mistakes.ch03_strides import reshape_always_compact
    from mini.exercises import implement
    from mini.napkin.widgets import napkin_chain
    monkeypatch.setenv("MINI_NO_WIDGETS", "1")
    implement("03.reshape")(reshape_always_compact)
    napkin_chain(plot=False)
    out = capsys.readouterr().out
    assert "measured: 0 B" in out and "values match numpy: NO" in out
    assert "made a view where the elements are not evenly spaced" in out


def test_widget_object_has_a_text_fallback(monkeypatch):
    import mini.napkin.widgets as W
    bundle = displayed_widget_bundle(monkeypatch, W, "napkin_chain", estimate=None, plot=False)
    assert "2,000,000" in bundle["text/plain"]
    assert "application/vnd.jupyter.widget-view+json" in bundle


def test_show_views_draws_a_figure():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from mini.napkin.widgets import show_views
    A = mini.arange(12.0).reshape(3, 4)
    fig = show_views({"A": A, "A.T": A.T, "b": (12, (4, 3), (0, 1), 4)})
    assert fig.axes
    plt.close(fig)


# --------------------------------------------------------------------------- the notebook

def test_chapter_folder_holds_only_what_students_get():
    """nbgrader ships every file of the chapter folder: no build script, no answers."""
    assert sorted(p.name for p in CHAPTER.iterdir() if p.name != "__pycache__") == ["strides.ipynb"]


def test_notebook_solution_regions_equal_the_references():
    assert_solution_regions_equal_references(NOTEBOOK, SLOTS)


def test_notebook_signatures_and_docstrings_equal_the_references():
    assert_signatures_and_docstrings_equal_references(NOTEBOOK, SLOTS)


def test_the_checks_are_the_chapters_slots():
    """(The notebook's nbgrader metadata against these checks: ``test_invariants.py``.)"""
    from grader.checks import checks_for_chapter
    assert sorted(checks_for_chapter(3)) == sorted(SLOTS + QUIZZES)


def test_reference_passes_every_check_repeatedly():
    """The checks draw fresh random cases on every run: the reference must never fail."""
    from grader.checks import run_in_process
    from mini.exercises import reference
    for slot in SLOTS:
        for _ in range(20):
            verdict = run_in_process(slot, reference(slot))
            assert verdict.passed, f"{slot}: {verdict.message}"


def test_reshape_failing_through_a_wrong_compact_strides_says_to_fix_exercise_1_first():
    """A reshape_strides that builds on compact_strides (as the exercise suggests) fails when
    compact_strides is wrong: the message names exercise 1 as the cause, with its wrong value."""
    from grader.checks import run_in_process
    from grader.mistakes.ch03_strides import strides_include_own_axis
    from grader.worker.execute import registered
    from mini.exercises import reference
    from mini.ndarray.strides import compact_strides

    def reshape_on_compact_strides(shape, strides, new_shape):
        if mini.ndarray.strides.is_compact(shape, strides):
            return compact_strides(new_shape)      # the slot: whatever exercise 1 runs
        return reference("03.reshape")(shape, strides, new_shape)

    with registered("03.compact_strides", strides_include_own_axis):
        wrong = run_in_process("03.reshape", reshape_on_compact_strides)
    assert not wrong.passed
    assert ("first fix exercise 1 (03.compact_strides): your compact_strides((12,)) returns "
            "(12,), expected (1,)") in wrong.message, wrong.message
    # With a right compact_strides the same reshape passes, and no wrong blame is possible.
    assert run_in_process("03.reshape", reshape_on_compact_strides).passed
    own = run_in_process("03.reshape", lambda shape, strides, new_shape: compact_strides(new_shape))
    assert not own.passed and "03.compact_strides" not in own.message


def test_feedback_on_catalogued_mistakes_never_shows_a_line_of_the_answer():
    """A failure names the concept; no line of the reference's solution (nor the code
    fragments earlier hints handed out) appears in any message."""
    import inspect
    from grader.checks import run_in_process
    from grader.mistakes import mistakes_for_chapter
    from mini.exercises import reference

    given_away = ["max(dim, 1)", "new_shape[i] = shape[axes[i]]", "with .reshape(-1)",
                  "sum(index[k] * strides[k])", "stride[i] == stride[i+1] * shape[i+1]"]
    for m in mistakes_for_chapter(3):
        message = run_in_process(m.slot_id, m.fn).message
        lines = []
        if m.slot_id in SLOTS:
            source = inspect.getsource(reference(m.slot_id))
            body = source.split("### BEGIN SOLUTION")[1].split("### END SOLUTION")[0]
            lines = [ln.strip() for ln in body.splitlines() if len(ln.strip()) > 14]
        for text in lines + given_away:
            assert text not in message, f"{m.slot_id} / {m.name}: the message shows {text!r}"


def test_exercises_of_12_points_or_more_give_partial_credit_by_named_parts():
    from grader.checks import get_check, run_in_process
    from grader.mistakes.ch03_strides import (broadcast_one_to_zero_raises,
                                              compact_list_of_elements, slice_ignores_step,
                                              reshape_copy_unless_contiguous)
    for slot, wrong in [("03.slice_view", slice_ignores_step),
                        ("03.broadcast_to", broadcast_one_to_zero_raises),
                        ("03.reshape", reshape_copy_unless_contiguous),
                        ("03.compact", compact_list_of_elements)]:
        assert get_check(slot).points >= 12
        v = run_in_process(slot, wrong)
        failed = [p for p in v.parts if p.earned < p.max_points]
        assert 0 < v.points < v.max_points and failed, (slot, v.points)
        assert sum(p.max_points for p in v.parts) == v.max_points
        # The feedback names each failed part and what is left.
        assert f"{v.points:g} of {v.max_points:g} points" in v.message
        assert all(f"- {p.name}: " in v.message for p in failed)


@pytest.mark.slow
def test_instructor_notebook_runs_quickly_and_shows_the_seed_facts():
    pytest.importorskip("nbclient")
    nb = nbformat.read(str(NOTEBOOK), as_version=4)
    cpu = run_notebook_cpu_seconds(nb, CHAPTER, timeout=60)
    assert cpu < 60, f"the solution notebook's kernel used {cpu:.0f} CPU seconds"
    text = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            text.append(out.get("text", "") or out.get("data", {}).get("text/plain", ""))
    text = "\n".join(text)
    assert "4,194,304 bytes" in text
    assert "A[0:2, 1:3]  shape (2, 2), strides (4, 1), offset 1" in text
    assert "x.T: shape (3, 2), strides (1, 3), offset 0" in text
    assert "bytes allocated by the three views: 0" in text
    assert "A.T.reshape(-1): " in text and "| bytes: 48 (a copy)" in text
    # The self-check questions tell right or wrong in the notebook itself.
    assert text.count("Right. ") == 2 and "Not right" not in text
    assert "measured / model = 1.00" in text
    assert "hidden tests passed" in text and "finish exercise" not in text
