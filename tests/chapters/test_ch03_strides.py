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
    assert "A.T.reshape(-1)" in text and "bytes allocated: 48" in text
    assert "measured / model = 1.00" in text
    assert "hidden tests passed" in text and "finish exercise" not in text
