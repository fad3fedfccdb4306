"""benchmarks/bench_dispatch.py runs and reports every case (no timing is asserted: the
numbers depend on the machine and its load; the benchmark prints ratios)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_dispatch.py"


def _load():
    spec = importlib.util.spec_from_file_location("bench_dispatch", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_dispatch_measures_every_case_and_prints_ratios(capsys):
    from mini.utils import cpp_extension
    bench = _load()
    threads = cpp_extension.get_max_threads()
    best = bench.measure(size=4, rounds=1, number=5)
    for device in ("numpy", "cpu"):
        for mode in ("autograd", "no autograd"):
            assert best[f"mini {device} {mode}"] > 0
    assert bench.main(["--rounds", "1", "--number", "5"]) == 0
    out = capsys.readouterr().out
    assert "mini cpu autograd" in out and "numpy" in out
    if "torch autograd" in best:
        assert "ratio mini cpu   / torch, autograd" in out
    # torch and mini's extensions share one OpenMP runtime: the benchmark gives it back as it found it
    assert cpp_extension.get_max_threads() == threads
