"""benchmarks/bench_jit.py runs every part and prints its ratios (no timing is asserted: the
numbers depend on the machine and its load); the replay it times is bit-identical to eager."""
from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_jit.py"


def _load():
    spec = importlib.util.spec_from_file_location("bench_jit", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_jit_runs_every_part_and_prints_ratios(capsys):
    bench = _load()
    replay = bench.replay(rounds=1, number=3)
    for device in ("cpu", "numpy"):
        assert replay[device]["bit_identical"] and replay[device]["nodes"] == 100
    fusion = bench.fusion(n=20_000, rounds=1)
    assert fusion["same_values"]
    assert fusion["traffic"] == {"unfused": 72_000, "fused": 8_000}     # 2·k·N·4 -> 2·N·4
    assert fusion["allocated"] == {"unfused": 32_000, "fused": 4_000}   # 8 buffers -> 1
    assert bench.main(["--n-gelu", "20000", "--rounds", "1", "--number", "3",
                       "--n-break-even", "2000"]) == 0
    out = capsys.readouterr().out
    assert "bit-identical: True" in out and "fused / numpy expression" in out
    assert out.count("predicted N* =") == 2          # both clocks
    assert "cpu  clock:" in out and "wall clock:" in out
