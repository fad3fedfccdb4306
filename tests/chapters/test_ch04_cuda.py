"""Chapter 04, CUDA part (cuda.ipynb): the seed's transfer facts through mini's napkin models,
the notebook's demos and widgets (run as they are), the catalogue of CUDA mistakes against the
issue's list, nvcc accepting the notebook's CUDA, and a kernel written in a cell graded in the
sandbox.

The invariants every chapter shares (reference scores 100 across both notebooks, the blank
scores 0 and runs, each catalogued mistake caught with its message): ``test_invariants.py``.
"""
from __future__ import annotations

import re
import subprocess

import pytest

from mini.napkin import cuda as napkin

from helpers import SOURCES, displayed_widget_bundle, graded_in_sandbox, run_cells

CUDA_SLOTS = ["04.cuda_add", "04.cuda_matmul_naive", "04.cuda_matmul_tiled",
              "04.cuda_block_sum_shared", "04.cuda_block_sum_shuffle", "04.cuda_transpose_tiled"]
QUIZZES = ["04.quiz_occupancy", "04.quiz_matmul_reads", "04.quiz_sectors",
           "04.quiz_transfer_time", "04.quiz_overlap"]


def test_the_cuda_notebook_grades_its_slots_worth_45_points():
    from grader.checks.ch04_hardware import POINTS
    from grader.notebook_build import source_slots
    slots = source_slots((SOURCES / "04_hardware" / "cuda.md").read_text())
    assert slots == set(CUDA_SLOTS + QUIZZES)
    assert sum(POINTS[s] for s in slots) == 45 and sum(POINTS.values()) == 100


def test_seed_transfer_and_overlap_facts():
    mb4 = 4e6                                  # a 1000 x 1000 float32 tensor
    times = {name: napkin.transfer_time(mb4, bw) * 1e6 for name, bw in napkin.LINKS.items()}
    assert round(times["PCIe Gen5 x16"], 1) == 62.5
    assert round(times["NVLink 4.0"], 1) == 8.9
    assert round(times["HBM3"], 1) == 1.2
    assert round(napkin.LINKS["HBM3"] / napkin.LINKS["PCIe Gen5 x16"], 1) == 52.3
    assert round(napkin.transfer_time(1e9, napkin.LINKS["PCIe Gen5 x16"]) * 1e3, 1) == 15.6
    # overlap costs the longer stage, not the sum: the steady-state step is max(copy, compute)
    for t_copy, t_compute in [(3.0, 2.0), (1.0, 5.0), (2.0, 2.0)]:
        step = napkin.pipeline_time(t_copy, t_compute, 11) - napkin.pipeline_time(t_copy, t_compute, 10)
        assert step == pytest.approx(max(t_copy, t_compute))
        assert napkin.pipeline_time(t_copy, t_compute, 10, overlap=False) == pytest.approx(10 * (t_copy + t_compute))
    assert napkin.H100.hbm_bandwidth / napkin.H100.fp32_flops == pytest.approx(0.05)


def test_napkin_models_against_brute_force():
    # sectors: count them from the addresses
    for stride in range(0, 40):
        addresses = [4 * stride * lane for lane in range(32)]
        assert napkin.sectors_per_request(stride) == len({a // 32 for a in addresses})
    assert [napkin.sectors_per_request(s) for s in (1, 2, 4, 8, 1000)] == [4, 8, 16, 32, 32]
    # tiled reads: every block loads the in-bounds elements of its tiles once
    for m, n, k, t in [(64, 64, 64, 16), (37, 45, 20, 16), (5, 3, 100, 8)]:
        blocks_x, blocks_y = -(-n // t), -(-m // t)
        a_loads = sum(min(t, m - by * t) * k for by in range(blocks_y)) * blocks_x
        b_loads = sum(min(t, n - bx * t) * k for bx in range(blocks_x)) * blocks_y
        assert napkin.matmul_global_reads(m, n, k, t) == a_loads + b_loads
    assert napkin.matmul_global_reads(64, 64, 64) == 2 * 64 ** 3
    # occupancy: the text's example, and the limits one at a time
    assert napkin.blocks_per_sm(256, 64, 48 * 1024) == 4
    assert napkin.blocks_per_sm(32, 16) == 32 and napkin.blocks_per_sm(1024, 16) == 2
    assert napkin.blocks_per_sm(256, 255) == 1 and napkin.occupancy(256, 64, 48 * 1024) == 0.5
    with pytest.raises(ValueError, match="1 to 1024"):
        napkin.blocks_per_sm(2048)


def test_the_reference_kernels_match_the_napkin_counts():
    """The emulator's counts of mini's reference kernels are the models' (what the
    widgets show for a correct kernel)."""
    from mini.napkin.widgets_cuda import measure_matmul_reads, measure_sectors
    reads = measure_matmul_reads(32)
    assert reads["naive"][0] == napkin.matmul_global_reads(32, 32, 32)
    assert reads["tiled"][0] == napkin.matmul_global_reads(32, 32, 32, 16)
    sectors = measure_sectors(64, 96)
    assert sectors["naive"][:2] == (4.0, 32.0) and sectors["tiled"][:2] == (4.0, 4.0)


def test_widgets_report_model_measurement_and_estimate(capsys, monkeypatch):
    from mini.napkin import widgets_cuda
    monkeypatch.setenv("MINI_NO_WIDGETS", "1")
    widgets_cuda.napkin_matmul_reads(estimate=lambda n, t: (2 * n ** 3, 2 * n ** 3 // t), n=32)
    out = capsys.readouterr().out
    assert re.search(r"tiled\s+4,096\s+4,096\s+4,096\s+1\.00", out), out
    assert "cut the reads by 16.0x" in out
    widgets_cuda.napkin_transfer(estimate=100, n=1 << 16)
    out = capsys.readouterr().out
    assert "copied host -> device 524,288 B, device -> host 262,144 B" in out
    assert "Your estimate over PCIe: 100.0 us" in out and "estimate / model = 8.14" in out
    widgets_cuda.napkin_sectors()
    assert "none yet" in capsys.readouterr().out


def test_widgets_say_which_exercise_is_missing(capsys, monkeypatch):
    from mini import exercises
    from mini.napkin import widgets_cuda

    def not_yet(*args, **kwargs):
        raise NotImplementedError()
    monkeypatch.setenv("MINI_NO_WIDGETS", "1")
    exercises.implement("04.cuda_matmul_tiled")(not_yet)
    exercises.implement("04.cuda_add")(not_yet)
    widgets_cuda.napkin_matmul_reads(estimate=not_yet)
    widgets_cuda.napkin_transfer()
    out = capsys.readouterr().out
    assert "finish exercise 04.cuda_matmul_tiled" in out and "finish exercise 04.cuda_add" in out


def test_a_widget_with_a_frontend_has_the_report_as_text(monkeypatch):
    from mini.napkin import widgets_cuda
    bundle = displayed_widget_bundle(monkeypatch, widgets_cuda, "napkin_sectors", estimate=32)
    assert "estimate / model = 1.00" in bundle["text/plain"]


def test_the_sanitizer_demos_show_reports_with_the_students_lines(capsys):
    ns = run_cells("04_hardware", "cuda_setup", "cuda_scale", "cuda_sanitizer", "cuda_race")
    out = capsys.readouterr().out
    assert "right: True" in out
    assert "out-of-bounds read of global memory x[1000] in kernel scale_kernel" in out
    assert "y[i] = alpha * x[i];" in out                     # the line, quoted
    assert "data race on shared memory buf[" in out and "buf[t] = x[base + t];" in out
    assert not ns["run"].ok


def test_the_payoff_runs_minis_cuda_device_on_the_students_kernels(capsys):
    run_cells("04_hardware", "cuda_setup", "04.cuda_add", "04.cuda_matmul_tiled",
              "04.cuda_block_sum_shuffle", "04.cuda_transpose_tiled", "cuda_payoff")
    out = capsys.readouterr().out
    assert "gradients agree: True" in out and "the sanitizer on them: clean" in out
    mine = re.search(r"your kernels in this step: (\{.*\})", out).group(1)
    for kernel in ("add_kernel", "matmul_tiled", "block_sum_shuffle", "transpose_tiled"):
        assert kernel in mine


def test_the_catalogue_covers_the_issues_list():
    from grader.mistakes import mistakes_for_chapter
    cuda = [m for m in mistakes_for_chapter(4) if m.slot_id in CUDA_SLOTS]
    assert len(cuda) >= 10
    names = " | ".join(m.name for m in cuda)
    for needle in ("missing bounds check", "missing barrier before reusing a tile",
                   "barrier inside a divergent branch", "row/column swap", "uncoalesced layout",
                   "shared tile too small", "shuffle with a partial mask", "uninitialised shared read",
                   "write-write race on an output", "atomic mixed with a plain write"):
        assert needle in names, needle


def _notebook_cuda_sources() -> list[str]:
    text = (SOURCES / "04_hardware" / "cuda.md").read_text()
    return [s for s in re.findall(r'r"""(.*?)"""', text, re.S) if "__global__" in s]


def test_nvcc_compiles_the_notebooks_cuda(tmp_path):
    """Every CUDA source in the notebook's demos compiles with NVIDIA's compiler (so no
    demo relies on something only the emulator accepts); the exercises' references are
    compiled by tests/backends/test_cuda_build.py."""
    from mini.backends.cuda import build
    nvcc = build.nvcc_path()
    if nvcc is None:
        pytest.skip("nvcc is not installed here")
    sources = _notebook_cuda_sources()
    assert len(sources) >= 3
    for i, src in enumerate(sources):
        path = tmp_path / f"demo{i}.cu"
        path.write_text("#include <cstdint>\n" + src)
        r = subprocess.run([nvcc, "-arch=sm_90", "-std=c++17", "-c", str(path), "-o", str(tmp_path / f"d{i}.o")],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-3000:]


@pytest.mark.slow
def test_a_cuda_kernel_written_in_a_cell_is_graded_in_the_sandbox(tmp_path):
    """The notebook's setup and cuda_add cells run in the sandboxed worker with the
    chapter's student copy of mini: the kernel compiles there against the prebuilt emulator
    runtime and passes; a wrong kernel in the same cell fails with the mistake named and its
    line quoted."""
    cells = ("04_cuda_setup", "04_cuda_add_code")
    verdict = graded_in_sandbox(tmp_path, "04_hardware", "cuda", cells, "04.cuda_add", "cuda_add")
    assert verdict.passed, verdict.message
    # the runtime came prebuilt: nothing built it into the submission's cache
    assert not list((tmp_path / "cache").glob("mini_cuda_runtime_*/*.so"))
    loop = "for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {"
    verdict = graded_in_sandbox(tmp_path, "04_hardware", "cuda", cells, "04.cuda_add", "cuda_add",
                                replace=(loop, loop.replace("i < n; ", "; ")))
    assert not verdict.passed
    assert "missing bounds check" in verdict.message and "out[i] = a[i] + b[i];" in verdict.message
