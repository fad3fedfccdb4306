"""Chapter 04 (hardware on the CPU): the notebook's consistency with mini and the grader,
the seed's roofline facts through mini, and the kernel slots' trip through the sandbox.

The grading invariants shared by every chapter (reference scores full marks, blank notebook
scores zero and runs, every catalogued mistake is caught) live in ``test_invariants.py``.
"""
from __future__ import annotations

import numpy as np
import pytest

import mini
from mini import exercises
from mini.napkin import roofline

from helpers import graded_in_sandbox, run_cells

KERNEL_SLOTS = ["04.omp_add", "04.omp_sum", "04.tiled_matmul", "04.fused_add_relu"]
CONV_SLOTS = ["04.im2col_view", "04.im2col", "04.col2im", "04.conv2d_forward",
              "04.conv2d_backward", "04.conv_input_grad_flipped"]
QUIZZES = ["04.quiz_gemm_cost", "04.quiz_chain_traffic"]


def test_the_checks_are_the_chapters_slots():
    """(Builder up to date, its points the checks' and summing to 100: ``test_invariants.py``.)"""
    from grader.checks import checks_for_chapter
    from grader.notebook_build import source_slots
    from helpers import SOURCES
    cuda_part = source_slots((SOURCES / "04_hardware" / "cuda.md").read_text())   # test_ch04_cuda.py
    assert set(checks_for_chapter(4)) - cuda_part == set(KERNEL_SLOTS + CONV_SLOTS + QUIZZES)


def test_every_slot_is_owned_by_mini():
    slots = exercises.slots()
    for slot in KERNEL_SLOTS + CONV_SLOTS:
        assert slot in slots, slot


def test_at_least_eight_catalogued_mistakes_covering_the_issue():
    from grader.mistakes import mistakes_for_chapter
    ms = mistakes_for_chapter(4)
    assert len(ms) >= 8
    names = " ".join(m.name for m in ms)
    for needle in ("reduction clause", "tile edges", "off by one", "wrong side", "overwrites",
                   "non-compact", "wrong transpose", "not flipped"):
        assert needle in names, needle


def test_seed_roofline_facts():
    table = {o.name: o for o in roofline.mlp_step_table()}
    assert (table["x@W1"].flops, table["x@W1"].bytes) == (6_422_528, 518_144)
    assert round(table["x@W1"].intensity, 1) == 12.4 and table["ReLU"].intensity == 0.125
    tot = roofline.table_totals(list(table.values()))
    assert round(tot["flops"] / 1e6, 1) == 13.1 and round(tot["bytes"] / 1e6, 1) == 1.2
    assert roofline.ridge_point(67e12, 3.35e12) == pytest.approx(20.0)


def test_profiler_counts_the_gemms_of_the_table(capsys):
    """The notebook's table demo (its machine numbers given, not measured): mini's profiler
    counts the matrix products the napkin table lists."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ns = run_cells("04_hardware", "setup", "mlp_table", ns={"peak": 1e11, "bw": 2e10})
    plt.close("all")
    counts, table = ns["counts"], roofline.mlp_step_table()
    forward_gemms = sum(1 for o in table if o.mini_op == "MatMul" and o.phase == "forward")
    assert counts.get("MatMul") == forward_gemms == 2
    assert counts.get("MatMulBackward0") == 2          # 3 products in the table: no dx for x
    assert "matrix products 2 forward + 2 backward nodes" in capsys.readouterr().out


def test_minis_conv2d_runs_on_the_registered_im2col():
    from mini.ops import conv
    calls = []

    @exercises.implement("04.im2col")
    def spy(x, kernel_size, stride, padding):
        calls.append((x.shape, kernel_size, stride, padding))
        return conv.im2col_matrix.reference(x, kernel_size, stride, padding)

    try:
        x = mini.randn(2, 3, 6, 6)
        w = mini.randn(4, 3, 3, 3)
        out = conv.conv2d(x, w, None, stride=2, padding=1)
        assert tuple(out.shape) == (2, 4, 3, 3)
        assert calls == [((2, 3, 6, 6), (3, 3), (2, 2), (1, 1))]
    finally:
        exercises.unregister("04.im2col")


def test_im2col_view_is_free_and_matrix_copies():
    from mini.ops import conv
    x = np.random.rand(2, 3, 8, 8).astype(np.float32)
    v = conv.im2col_view(x, (3, 3), (1, 1))
    assert np.shares_memory(v, x) and v.shape == (2, 6, 6, 3, 3, 3)
    cols = conv.im2col_matrix(x, (3, 3), (1, 1), (0, 0))
    assert not np.shares_memory(cols, x)
    assert cols.nbytes / x.nbytes == pytest.approx(2 * 36 * 27 / (2 * 3 * 64))


def test_a_kernel_written_in_a_cell_is_graded_in_the_sandbox(tmp_path):
    """The notebook's setup and omp_add cells (C++ source inside the function), as text,
    run in the sandboxed worker with the chapter's student copy of mini; the kernel is
    compiled there and passes its check."""
    verdict = graded_in_sandbox(tmp_path, "04_hardware", "hardware", ("04_setup", "04_omp_add_code"),
                                "04.omp_add", "omp_add")
    assert verdict.passed, verdict.message


# ------------------------------------------------------------------ issue 18: checks that can fail

def _mutating(fn):
    """``fn`` that also changes its first argument in place (after computing the result)."""
    def wrong(x, *rest):
        out = fn(x, *rest)
        if x.size:
            x[(0,) * x.ndim] += 1
        return out
    return wrong


@pytest.mark.parametrize("slot", ["04.omp_add", "04.fused_add_relu", "04.omp_sum", "04.tiled_matmul"])
def test_the_input_mutation_check_fires(slot):
    """Issue 18: a kernel that changes its input is caught, with the input named (the
    check compares what the student's process saw after the call with trusted copies)."""
    from grader.checks import run_in_process
    ref = exercises.active(slot)
    v = run_in_process(slot, _mutating(ref))
    assert not v.passed and "changed its input" in v.message, v.message
    assert run_in_process(slot, ref).passed


def test_kernel_checks_give_partial_credit_by_parts():
    from grader.checks import run_in_process
    from grader.checks.ch04_hardware import POINTS
    ref = exercises.active("04.omp_add")

    def accepts_float64(a, b):   # right values, no dtype check
        return ref(a.astype(np.float32), b.astype(np.float32))

    v = run_in_process("04.omp_add", accepts_float64)
    assert 0 < v.points < POINTS["04.omp_add"]
    assert [p.name for p in v.parts if p.earned < p.max_points] == ["errors"]
    assert "errors:" in v.message and "TypeError" in v.message


def test_a_wrong_earlier_exercise_is_named_first():
    """conv2d_forward built on a wrong im2col_matrix: the feedback says to fix 04.im2col."""
    from grader.checks import run_in_process
    from mini.ops import conv

    @exercises.implement("04.im2col")
    def im2col_no_padding(x, kernel_size, stride, padding):
        return conv.im2col_matrix.reference(x, kernel_size, stride, (0, 0)) if not any(padding) \
            else conv.im2col_matrix.reference(x, kernel_size, stride, padding) * 2

    try:
        v = run_in_process("04.conv2d_forward", conv.conv2d_forward.reference)
        assert not v.passed and "first fix exercise 04.im2col" in v.message, v.message
    finally:
        exercises.unregister("04.im2col")


def test_write_allocate_traffic():
    n = 1000
    assert roofline.add_relu_bytes(n, 4) == 5 * n * 4
    assert roofline.add_relu_bytes(n, 4, fused=True) == 3 * n * 4
    assert roofline.add_relu_bytes(n, 4, write_allocate=True) == 7 * n * 4
    assert roofline.add_relu_bytes(n, 4, fused=True, write_allocate=True) == 4 * n * 4
    assert roofline.ridge_point(roofline.H100_TENSOR_FP16_FLOPS, roofline.H100_BANDWIDTH) == \
        pytest.approx(295.2, abs=0.1)


def test_fma_peak_counts_the_flops_it_does():
    from mini.napkin import measure
    from mini.utils.cpp_extension import get_max_threads
    peak = measure.fma_peak(seconds=0.02, repeats=1)
    assert np.isfinite(peak) and peak > 0
    # one iteration of the kernel: 2 FLOPs per lane on every thread
    from mini.utils.cpp_extension import load_inline
    ext = load_inline("fma_peak", measure._FMA_SOURCE, functions=["fma_loop"],
                      extra_cflags=["-march=native", "-ffp-contract=fast"])
    assert ext.fma_loop(3) == 2 * measure._FMA_LANES * 3 * get_max_threads()


def test_an_unanswered_question_stops_with_its_name():
    ns = run_cells("04_hardware", "setup")

    def gemm_cost(m, k, n):
        raise NotImplementedError()

    with pytest.raises(NotImplementedError, match=r"question 04.quiz_gemm_cost .*gemm_cost"):
        ns["answer"]("04.quiz_gemm_cost", gemm_cost, 1, 2, 3)


def test_the_matmul_demo_shows_the_naive_baseline(capsys):
    ns = run_cells("04_hardware", "setup", "04.tiled_matmul", ns={"peak": 1e11, "ridge": 5.0})
    run_cells("04_hardware", "measure_matmul", ns=ns)
    out = capsys.readouterr().out
    assert "naive triple loop" in out and "your tiled_matmul" in out and "x the naive loop" in out
    assert np.allclose(ns["naive_matmul"](ns["A"][:64, :48].copy(), ns["B"][:48, :32].copy()),
                       ns["A"][:64, :48] @ ns["B"][:48, :32], rtol=1e-4, atol=1e-3)
