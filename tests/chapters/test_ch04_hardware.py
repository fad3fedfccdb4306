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

from helpers import run_cells

KERNEL_SLOTS = ["04.omp_add", "04.omp_sum", "04.tiled_matmul", "04.fused_add_relu"]
CONV_SLOTS = ["04.im2col_view", "04.im2col", "04.col2im", "04.conv2d_forward",
              "04.conv2d_backward", "04.conv_input_grad_flipped"]
QUIZZES = ["04.quiz_gemm_cost", "04.quiz_chain_traffic"]


def test_the_checks_are_the_chapters_slots():
    """(Builder up to date, its points the checks' and summing to 100: ``test_invariants.py``.)"""
    from grader.checks import checks_for_chapter
    assert set(checks_for_chapter(4)) == set(KERNEL_SLOTS + CONV_SLOTS + QUIZZES)


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
    import nbformat
    from grader.checks import evaluate
    from grader.checks.student import Student
    from grader.course import default_mini_src
    from grader.grading import answer_cells
    from grader.sandbox import Sandbox, SandboxUnavailable
    from grader.solutions import strip_package
    from grader.workerproc import WorkerBackend
    from helpers import notebook_of
    try:
        box = Sandbox.detect()
    except SandboxUnavailable as e:
        pytest.skip(f"no sandbox on this machine (install bubblewrap to run this test): {e}")
    strip_package(default_mini_src(), tmp_path / "mini", 4)
    nb = nbformat.read(str(notebook_of("04_hardware")), as_version=4)
    cells = [c for c in answer_cells(nb, nb) if c["grade_id"] in ("04_setup", "04_omp_add_code")]
    assert len(cells) == 2
    with WorkerBackend(box, mini_dir=tmp_path / "mini", cells=cells, check_timeout=240) as be:
        be.begin_check()
        verdict = evaluate("04.omp_add", Student(be, "04.omp_add", "omp_add"))
    assert verdict.passed, verdict.message
