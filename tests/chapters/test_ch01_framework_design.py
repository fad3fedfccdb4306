"""Chapter 01 (framework design): the seed facts computed through mini, the notebook's own
demos (the JIT footguns, the static graph, the frozen branch), the dispatch widget, and the
chapter's consistency with mini and the grader.

The grading invariants shared by every chapter (reference scores full marks, blank notebook
scores zero and runs, every catalogued mistake is caught) live in ``test_invariants.py``.
"""
from __future__ import annotations

import numpy as np
import pytest

import mini
from mini.napkin import compile as napkin
from mini.napkin.roofline import op_overhead_share

from helpers import (assert_signatures_and_docstrings_equal_references,
                     assert_solution_regions_equal_references, displayed_widget_bundle,
                     notebook_of, run_cells)

CHAPTER = "01_framework_design"
SLOTS = ["01.time_per_call", "01.fit_dispatch", "01.dispatch_law", "01.record_op",
         "01.guard_key", "01.replay", "01.find_chains", "01.kernel_body", "01.break_even",
         "01.crossover"]


# --------------------------------------------------------------------------- seed facts

def test_dispatch_share_of_one_op_is_94_and_13_percent():
    """15 us of overhead around a 1 us kernel: 94 %; around a 100 us kernel: 13 % (fact 14)."""
    assert round(op_overhead_share(1e-6) * 100) == 94
    assert round(op_overhead_share(100e-6) * 100) == 13
    assert napkin.dispatch_law(1, 15e-6, 1e-6)["share"] == pytest.approx(op_overhead_share(1e-6))


def test_dispatch_law_of_the_small_mlp_and_the_gpt3_layer():
    """R = 34.6, 97 % dispatch, at most 35.6x (fact 15); a GPT-3 layer R = 0.0018; the share
    is R / (1 + R) (fact 29)."""
    S = napkin.SEED
    law = napkin.dispatch_law(S["mlp_ops"], S["t_python"] + S["t_launch"], S["mlp_hardware"])
    assert round(law["ratio"], 1) == 34.6 and round(law["speedup"], 1) == 35.6
    assert round(law["share"] * 100) == 97
    assert law["share"] == pytest.approx(law["ratio"] / (1 + law["ratio"]))
    gpt3 = napkin.dispatch_law(12, S["t_python"] + S["t_launch"], S["gpt3_hardware"])
    assert round(gpt3["ratio"], 4) == 0.0018


def test_compile_break_even_and_prototyping():
    """30 s / (1/1450 - 1/2150) = 133,607 ~ 134,000 images, +48.3 % throughput (fact 16);
    prototyping 10,000 images through 10 changes: 6.9 s vs 304.7 s, 44.2x (fact 17)."""
    S = napkin.SEED
    n = napkin.break_even(S["t_compile"], 1 / S["resnet_eager"], 1 / S["resnet_compiled"])
    assert round(n) == 133_607 and round(n, -3) == 134_000
    assert round(napkin.throughput_gain(1450, 2150) * 100, 1) == 48.3
    p = napkin.prototyping_seconds(10_000, 10, 1450, 2150, 30)
    assert (round(p["eager"], 1), round(p["compiled"], 1), round(p["ratio"], 1)) == (6.9, 304.7, 44.2)
    assert napkin.compilation_benefit(n, 1 / 1450, 1 / 2150, 30) == pytest.approx(1.0)


def test_the_static_graph_example_runs_to_3(capsys):
    """x * 2 + 1 defined once, run with x = [1.0]: [3.0] (fact 8), from the notebook's cell."""
    run_cells(CHAPTER, "setup", "01.record_op", "01.replay", "static_graph")
    assert "run with x = [1.0]: [3.0]" in capsys.readouterr().out


def test_a_trace_without_guards_keeps_multiplying_negative_inputs_by_2(capsys):
    """The seed's hazard (fact 34), from the notebook's cell: the unguarded replay returns
    x * 2 for x = -1, eager returns x * 3."""
    run_cells(CHAPTER, "setup", "01.record_op", "01.replay", "frozen_branch")
    out = capsys.readouterr().out
    assert "eager  conditional([-1.0]) = [-3.0]" in out
    assert "replay conditional([-1.0]) = [-2.0]" in out


# --------------------------------------------------------------------------- the notebook

def test_every_footgun_of_the_notebook_agrees_with_eager():
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")         # (the escaping tensor's TracerWarning)
        ns = run_cells(CHAPTER, "setup", "01.record_op", "01.guard_key", "01.replay",
                       "frozen_branch", "footguns")
        warnings.simplefilter("ignore")
        results = ns["footguns"]()
    assert len(results) == 6
    bad = [case for case, (ok, _) in results.items() if not ok]
    assert not bad, f"these footguns gave other values than eager mode: {bad}"


def test_solution_cells_are_minis_references():
    nb = notebook_of(CHAPTER)
    assert_solution_regions_equal_references(nb, SLOTS)
    assert_signatures_and_docstrings_equal_references(nb, SLOTS)


def test_every_check_has_a_mistake_or_a_reason():
    """At least 10 catalogued mistakes, each in a slot the chapter grades."""
    from grader.checks import checks_for_chapter
    from grader.mistakes import mistakes_for_chapter
    mistakes = mistakes_for_chapter(1)
    assert len(mistakes) >= 10
    assert {m.slot_id for m in mistakes} <= set(checks_for_chapter(1))
    assert {m.slot_id for m in mistakes} == set(SLOTS)


def test_points_add_up_to_100():
    from grader.checks.ch01_framework_design import POINTS
    assert sum(POINTS.values()) == 100
    assert {s for s in POINTS if not s.split(".")[1].startswith("quiz")} == set(SLOTS)


# --------------------------------------------------------------------------- the widget

def _fake_step(batch=32):
    from mini.napkin.widgets_compile import StepMeasurement, mlp_forward_costs
    c = mlp_forward_costs(batch)
    return StepMeasurement(batch, n_ops=7, t_dispatch=2e-6, measured=250e-6, flops=c["flops"],
                           bytes=c["bytes"])


def test_dispatch_report_shows_the_law_term_by_term_and_the_ratio():
    from mini.napkin.widgets_compile import dispatch_report, mlp_forward_costs
    c = mlp_forward_costs(32)
    # 784->128->10 at batch 32: two GEMMs, two bias adds, one ReLU
    assert c["flops"] == 2 * 32 * 784 * 128 + 32 * 128 + 32 * 128 + 2 * 32 * 128 * 10 + 32 * 10
    text = dispatch_report(100, _fake_step(), peak_flops=50e9, bandwidth=10e9)
    assert "7 ops x 2.00 us =      14.0 us" in text
    assert "measured:" in text and "your estimate:     100.0 us" in text
    t_c, t_m = c["flops"] / 50e9, c["bytes"] / 10e9
    law = napkin.dispatch_law(7, 2e-6, t_c, t_m)
    assert f"{law['step'] * 1e6:9.1f} us per step" in text
    assert "Why:" in text


def test_dispatch_widget_prints_without_a_frontend(capsys, monkeypatch):
    monkeypatch.setenv("MINI_NO_WIDGETS", "1")
    from mini.napkin import widgets_compile as W
    W.napkin_dispatch(estimate=50, peak_flops=50e9, bandwidth=10e9, batch=4, sizes=(16, 8, 4),
                      plot=False)
    out = capsys.readouterr().out
    assert "MLP 16 -> 8 -> 4, forward, batch 4" in out and "measured:" in out


def test_dispatch_widget_with_a_frontend(monkeypatch):
    from mini.napkin import widgets_compile as W
    bundle = displayed_widget_bundle(monkeypatch, W, "napkin_dispatch", estimate=None,
                                     peak_flops=50e9, bandwidth=10e9, batch=4, sizes=(16, 8, 4),
                                     plot=False)
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert "Commit to a number" in bundle["text/plain"]


def test_the_step_plot_draws_model_and_measurement():
    import matplotlib
    matplotlib.use("Agg")
    from mini.napkin.widgets_compile import plot_step_vs_batch
    fig = plot_step_vs_batch(50e9, 10e9, sizes=(16, 8, 4), batches=(1, 8), t_dispatch=2e-6)
    (ax,) = fig.axes
    assert len(ax.lines) == 3 and ax.get_xscale() == "log"


def test_a_widget_measurement_that_meets_an_unfinished_exercise_says_which(monkeypatch):
    from mini.exercises import ExerciseNotImplemented
    from mini.napkin import compile as C
    from mini.napkin.widgets_compile import measure_step

    def stub(*args, **kwargs):
        raise ExerciseNotImplemented("01.time_per_call")
    monkeypatch.setattr(C, "time_per_call", stub)
    m = measure_step(2, sizes=(4, 3, 2), t_dispatch=1e-6)
    assert m.error == "finish exercise 01.time_per_call to measure the step"


_ = np, mini
