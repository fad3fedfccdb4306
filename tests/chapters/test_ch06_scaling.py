"""Chapter 06 (scaling): the napkin widgets, the measurements that run on the ranks, and what
the hidden checks say when a job hangs or relies on an exercise that is not done.

The grading invariants shared by every chapter (the solution scores 100 under a real,
sandboxed autograde with MPI ranks, the blank scores 0, every catalogued mistake is caught,
mini's references pass) live in ``test_invariants.py``; the napkin models against the seed
numbers in ``tests/napkin/test_scaling.py``; mini.distributed itself in ``tests/distributed``.
"""
from __future__ import annotations

import math

import pytest

import ch06_ranks
from helpers import displayed_widget_bundle, run_cells

pytest.importorskip("mpi4py", reason="chapter 06 runs MPI ranks (pip install mpi4py mpich)")

from mini.distributed import launch  # noqa: E402
from mini.napkin import scaling  # noqa: E402
from mini.napkin import widgets_scaling as W  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def _owners():
    from grader.checks.ch06_scaling import import_slot_owners
    import_slot_owners()


# --------------------------------------------------------------------------- on the ranks

@pytest.fixture(scope="module")
def measured():
    return launch.run(ch06_ranks.measurements, 2, timeout=120, op_timeout=30).check().values


def test_training_memory_is_16_bytes_per_parameter_or_zero_1s_share(measured):
    psi = sum(ch06_ranks.PSI)
    for r, m in enumerate(measured):
        assert (m["plain"]["weights"], m["plain"]["gradients"], m["plain"]["optimizer"]) == \
            (4 * psi, 4 * psi, 8 * psi)
        shard = [617, 616][r]
        assert (m["zero"]["weights"], m["zero"]["gradients"], m["zero"]["optimizer"]) == \
            (4 * psi, 4 * psi, 8 * shard)
        model = scaling.zero_memory_per_rank(psi, 2, stage=1)
        assert abs(m["zero"]["optimizer"] - model["optimizer"]) <= 8       # ⌈Ψ/p⌉ vs Ψ/p


def test_a_straggler_sets_every_ranks_step(measured):
    """Rank 1 computes 4 × longer.  Proved by order, not by durations: on one clock (the
    ranks share a machine), every rank's all-reduce of step k ends after rank 1 finished
    computing step k."""
    slow = measured[1]["steps"]
    assert min(slow["compute"]) >= 0.04                     # it slept 4 × 10 ms
    for m in measured:
        s = m["steps"]
        assert all(end >= done for end, done in zip(s["reduced"], slow["computed"], strict=True))


def test_allreduce_benchmark_reports_both_algorithms_on_every_rank(measured):
    a, b = measured[0]["allreduce"], measured[1]["allreduce"]
    assert a == b                         # each trial's time is the slowest rank's, on every rank
    assert a["p"] == 2 and a["sizes"] == [1 << 10, 1 << 16]
    assert all(t > 0 for t in a["ring"] + a["mpi"])


# --------------------------------------------------------------------------- widgets

BENCH = {"p": 2, "sizes": [1 << 10, 1 << 24], "ring": [2e-4, 9e-3], "mpi": [3e-5, 1e-2]}


def test_ring_widget_puts_model_and_measurements_side_by_side(monkeypatch, capsys):
    monkeypatch.setenv("MINI_NO_WIDGETS", "1")
    W.napkin_ring(estimate=0.02, bench=BENCH, alpha=20e-6, beta=2e9)
    text = capsys.readouterr().out
    model = scaling.ring_allreduce_time(1 << 24, 2, 20e-6, 2e9)
    assert f"= {model * 1e3:.3g} ms" in text
    assert "your ring / MPI = 0.90" in text and "1.11× its speed" in text
    assert f"estimate / measured = {0.02 / 9e-3:.2f}" in text
    bundle = displayed_widget_bundle(monkeypatch, W, "napkin_ring", estimate=None, bench=BENCH,
                                     alpha=20e-6, beta=2e9)
    assert "MPI_Allreduce, measured" in bundle["text/plain"]
    with pytest.raises(ValueError, match="needs the measurement"):
        W.napkin_ring(estimate=1.0)


def test_zero_memory_widget(monkeypatch, capsys):
    monkeypatch.setenv("MINI_NO_WIDGETS", "1")
    psi = 1_000_000
    plain = {"weights": 4 * psi, "gradients": 4 * psi, "optimizer": 8 * psi}
    zero = {"weights": 4 * psi, "gradients": 4 * psi, "optimizer": 4 * psi}
    W.napkin_zero_memory(estimate="12 MB", psi=psi, p=2, plain=plain, zero=zero)
    text = capsys.readouterr().out
    assert "16.00 MB" in text and "12.00 MB" in text           # 16Ψ and 4Ψ + 4Ψ + 8Ψ/2
    assert "estimate / measured = 1.00" in text and "saves 4.00 MB per rank (25%)" in text


def test_checkpoint_widget_measures_square_root_memory(monkeypatch, capsys):
    """N = 16 blocks in 4 segments: the napkin model keeps 7 of 16 activations; the
    measurement (tracemalloc, mini's references) keeps well under the plain peak and runs
    12 of the 16 blocks' forwards twice (0.75 extra forward, counted in operations)."""
    monkeypatch.setenv("MINI_NO_WIDGETS", "1")
    plain = W.measure_checkpointing(16, None)
    ckpt = W.measure_checkpointing(16, 4)
    W.napkin_checkpoint(estimate=0.5, n_layers=16, segments=4, measured=(plain, ckpt))
    text = capsys.readouterr().out
    assert "fraction of the peak left" in text and f"{7 / 16:14.2f}" in text
    assert ckpt["peak_bytes"] < 0.75 * plain["peak_bytes"]
    for name in W.BLOCK_OPS:                          # counted, not timed: exactly 16 + 12
        assert (plain["forward_ops"][name], ckpt["forward_ops"][name]) == (16, 28), name
    assert W.extra_forward(plain, ckpt) == 0.75 and f"{0.75:14.2f}" in text


def test_pictures_draw():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figs = [W.plot_pipeline(4, 8), W.plot_allreduce(BENCH, 20e-6, 2e9),
            W.plot_pingpong([8, 1 << 20], [1e-5, 5e-4], 1e-5, 2e9)]
    records = [{"op": "grad_ready", "start": 1.0 + k * 1e-3, "info": {"param": 1 - k}}
               for k in (0, 1)]
    tl = scaling.bucket_timeline(records, [400, 400], 400, 2, 1e-5, 1e9, start=1.0)
    figs.append(W.plot_bucket_timelines({"tiny": tl}))
    assert all(len(f.axes) == 1 for f in figs)
    plt.close("all")


# --------------------------------------------------------------------------- the checks

def test_a_hung_ring_is_stopped_with_every_ranks_stack_and_a_clear_message():
    from grader.checks import CheckFailed
    from grader.checks.ch06_scaling import _job_values
    from grader.worker.execute import registered
    from grader.worker.scenarios import ch06
    case = {"n": 10, "dtype": "float32", "kind": "int", "shape": [10], "seed": 0}
    with registered("06.ring_allreduce", ch06_ranks.ring_that_never_sends):
        job = ch06.ring(ch06_ranks.ring_that_never_sends, cases=[case], worlds=[2], op_timeout=2.0)
    assert not job["ok"] and not job["timed_out"]
    assert "stack dump requested by rank" in job["stderr"]       # every rank said where it was
    assert "ring_that_never_sends" in job["stderr"]
    with pytest.raises(CheckFailed) as info:
        _job_values(job, "06.ring_allreduce", "ring_allreduce", 2)
    msg = info.value.message
    assert "a rank waited too long in recv with rank" in msg and "(deadlock)" in msg
    assert "was in case n=10 p=2" in msg


def test_the_hook_check_names_the_earlier_exercise_it_relies_on():
    """DDP runs the student's buckets code too: with 06.mark_grad_ready a stub, the hook's
    own parts earn their points and the DDP part names the missing exercise."""
    from grader.checks import run_in_process
    from mini import exercises
    from mini.nn.parallel.distributed import allreduce_hook

    def stub(state, index, launch):
        raise NotImplementedError()

    exercises.implement("06.mark_grad_ready")(stub)
    try:
        verdict = run_in_process("06.allreduce_hook", allreduce_hook.reference)
    finally:
        exercises.unregister("06.mark_grad_ready")
    assert verdict.points == 7 and not verdict.passed
    assert "this runs your exercise 06.mark_grad_ready, which is not implemented yet" in \
        verdict.message


def test_a_stub_earns_nothing_and_is_named():
    from grader.checks import run_in_process

    def ring_allreduce(tensor, group=None):
        raise NotImplementedError()

    verdict = run_in_process("06.ring_allreduce", ring_allreduce)
    assert verdict.points == 0 and "06.ring_allreduce: not implemented yet" in verdict.message


# --------------------------------------------------------------------------- the notebook

def test_pipeline_demo_prints_the_bubble(capsys):
    import matplotlib
    matplotlib.use("Agg")
    run_cells("06_scaling", "setup", "pipeline")
    out = capsys.readouterr().out
    for m in (1, 4, 8, 32):
        assert f"{m:2d} micro-batches: idle {scaling.pipeline_bubble_fraction(4, m):.0%}" in out
    assert math.isclose(scaling.pipeline_bubble_fraction(4, 8), 3 / 11)
