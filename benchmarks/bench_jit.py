"""mini.jit side by side with eager mode and numpy, in one run: replay, fusion, break-even.

    python benchmarks/bench_jit.py [--n-gelu 10000000] [--rounds 7]

1. **Replay.**  A 100-op graph of elementwise ops (mul, add, relu, sub on 16 floats) run
   eagerly (with and without autograd) and replayed by ``mini.jit.trace``; also on
   ``device="numpy"``.  Printed: microseconds per call and the speedups; the replayed
   outputs are compared with eager's bit for bit (the replay runs the same kernels).
2. **Fusion.**  GELU (tanh approximation) as 8 mini ops, compiled by ``mini.compile`` into
   one generated C++ kernel, against numpy's one-line expression
   ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x*x*x)))`` and against mini's eager 8
   ops, on ``--n-gelu`` float32 numbers.  numpy's expression is written so that it stays
   in float32 (the constants are Python floats: ``np.sqrt(2 / np.pi)`` is a float64 scalar,
   which would make numpy compute in float64) and cubes with two multiplies (``x ** 3``
   calls a general power function, seconds on 10^7 numbers with some libms): the baseline
   is numpy at its best, not a straw man.  Printed: the times and ratios, and the bytes the
   graph's kernels move (2·k·N·4 unfused, 2·N·4 fused) next to mini's allocation counter.
3. **Break-even.**  A fresh compile of a fused arithmetic chain (its C++ really built),
   N* = T_compile / (T_eager − T_compiled) predicted from the mean of 50 eager and 50
   compiled calls, and the crossover of the measured cumulative-time curves, on two clocks:
   CPU time (this thread's, plus the compiler's, a child process) and wall time.  On a
   quiet machine the two agree; on a loaded one only the CPU clock still measures the work
   (wall time adds the waits for a core, which come in bursts longer than 50 calls).

Each timing is the best of ``--rounds`` rounds, the cases interleaved round by round (a
burst of load on a shared machine hits all of them alike); the clock is the thread's CPU
time where the work is single-threaded, wall time where it is not (the fused kernel uses
OpenMP).  Nothing here asserts a time: the ratios are printed.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
import timeit

import numpy as np

from mini.jit.examples import chain100, gelu8


def arith8(x):
    """An 8-op chain of exactly-rounded arithmetic (the break-even workload)."""
    y = x * 1.5 + 0.25
    y = (y * x - 0.5).relu()
    y = y * y + x
    return (y - 1.0) / 3.0


def _best(cases: dict, rounds: int, number: int, timer=time.perf_counter) -> dict:
    for fn in cases.values():
        fn()
    best = {name: float("inf") for name in cases}
    for _ in range(rounds):
        for name, fn in cases.items():
            best[name] = min(best[name], timeit.timeit(fn, number=number, timer=timer) / number)
    return best


def replay(rounds: int = 7, number: int = 200) -> dict:
    """Seconds per call of the 100-op graph: eager, eager with autograd, replayed; and
    whether the replay is bit-identical to eager."""
    import mini
    from mini import jit
    out = {}
    for device in ("cpu", "numpy"):
        x, y = mini.randn(16, device=device), mini.randn(16, device=device)
        xg = x.detach().requires_grad_(True)
        traced = jit.trace(chain100)
        traced(x, y)
        best = _best({"eager": lambda: chain100(x, y), "eager autograd": lambda: chain100(xg, y),
                      "replay": lambda: traced(x, y)}, rounds, number, time.thread_time)
        best["bit_identical"] = bool(np.array_equal(traced(x, y).numpy(), chain100(x, y).numpy()))
        best["nodes"] = len(traced.graphs()[0].nodes)
        out[device] = best
    return out


def fusion(n: int = 10_000_000, rounds: int = 5) -> dict:
    """Seconds of GELU on n float32 numbers: numpy's expression, mini eager, mini.compile;
    and the traffic and allocations of the unfused and the fused graph."""
    import mini
    from mini import jit
    from mini.jit.graph import Ref
    from mini.ndarray import track_allocations
    x = mini.randn(n)
    xn = x.numpy()
    compiled = mini.compile(gelu8)
    compiled(x)

    c = float(np.sqrt(2 / np.pi))

    def numpy_gelu():
        return 0.5 * xn * (1 + np.tanh(c * (xn + 0.044715 * xn * xn * xn)))
    best = _best({"numpy expression": numpy_gelu, "mini eager": lambda: gelu8(x),
                  "mini.compile": lambda: compiled(x)}, rounds, 1)
    assert numpy_gelu().dtype == np.float32
    ok = np.allclose(compiled(x).numpy(), numpy_gelu(), rtol=1e-5, atol=1e-6)
    plain = jit.capture_graph(gelu8, x[:1000])
    fused = jit.capture_graph(gelu8, x[:1000], fuse=True)
    env = {Ref("input", 0): xn[:1000]}
    alloc = {}
    for name, graph in (("unfused", plain), ("fused", fused)):
        with track_allocations() as stats:
            jit.replay(graph, env)
        alloc[name] = stats.bytes
    return {"seconds": best, "same_values": bool(ok),
            "traffic": {"unfused": jit.traffic(plain)["total"], "fused": jit.traffic(fused)["total"]},
            "allocated": alloc, "n_traffic": 1000}


class _CpuClock:
    """CPU seconds of this thread plus those of finished child processes (the compiler)."""

    def __call__(self) -> float:
        t = os.times()
        return time.thread_time() + t.children_user + t.children_system


def break_even(n: int = 30_000, max_calls: int = 20_000, clock: str = "cpu") -> dict:
    """A fresh compile of ``arith8``'s fused kernel; predicted and measured break-even on
    ``clock`` ("cpu" or "wall").  The prediction uses the mean of 50 calls of each version
    (the cumulative curves add up typical calls, not the fastest ones); ``n`` stays below
    the sizes at which mini's kernels start OpenMP threads, so each call runs on this thread
    and its CPU time is its work."""
    import mini
    from mini import jit
    from mini.jit import fusion as fu
    from mini.jit.graph import Ref
    from mini.napkin.compile import break_even as predict, measured_crossover
    now = _CpuClock() if clock == "cpu" else time.perf_counter
    x = mini.randn(n)
    graph = jit.capture_graph(arith8, x)
    with tempfile.TemporaryDirectory() as fresh:
        start = now()
        fused = fu.fuse(graph, build_directory=fresh, fresh=True)
        t_compile = now() - start
    env = {Ref("input", 0): x.numpy()}
    times = {"eager": 0.0, "compiled": 0.0}
    for k in range(55):                       # 5 warm-up calls, then the mean of 50
        for name, fn in (("eager", lambda: arith8(x)), ("compiled", lambda: jit.replay(fused, env))):
            t0 = now()
            fn()
            if k >= 5:
                times[name] += (now() - t0) / 50
    result = {"clock": clock, "t_compile": t_compile, "t_eager": times["eager"],
              "t_compiled": times["compiled"], "predicted": None, "measured": None, "calls": 0}
    try:
        predicted = predict(t_compile, times["eager"], times["compiled"])
    except ValueError:                        # the compiled call is not faster here
        return result
    calls = int(min(2.5 * predicted, max_calls))
    eager, compiled = [], []
    for _ in range(calls):
        t0 = now()
        arith8(x)
        eager.append(now() - t0)
        t0 = now()
        jit.replay(fused, env)
        compiled.append(now() - t0)
    result.update(predicted=predicted, measured=measured_crossover(eager, compiled, t_compile),
                  calls=calls)
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-gelu", type=int, default=10_000_000, help="elements for the GELU race")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--number", type=int, default=200, help="calls per round of the replay case")
    ap.add_argument("--n-break-even", type=int, default=30_000)
    args = ap.parse_args(argv)

    print("1. replay of a 100-op graph (16 floats per tensor)")
    for device, r in replay(args.rounds, args.number).items():
        print(f"   {device:5s}: eager {r['eager'] * 1e6:7.1f} us, eager with autograd "
              f"{r['eager autograd'] * 1e6:7.1f} us, replay {r['replay'] * 1e6:6.1f} us -> "
              f"{r['eager'] / r['replay']:4.1f}x ({r['eager autograd'] / r['replay']:4.1f}x with "
              f"autograd); {r['nodes']} nodes, bit-identical: {r['bit_identical']}")
    f = fusion(args.n_gelu, max(1, args.rounds // 2))
    s = f["seconds"]
    print(f"2. GELU on {args.n_gelu:,} float32 numbers (8 ops, one fused kernel)")
    print(f"   numpy expression {s['numpy expression'] * 1e3:7.1f} ms, mini eager "
          f"{s['mini eager'] * 1e3:7.1f} ms, mini.compile {s['mini.compile'] * 1e3:7.1f} ms")
    print(f"   fused / numpy expression: {s['numpy expression'] / s['mini.compile']:.1f}x faster; "
          f"fused / mini eager: {s['mini eager'] / s['mini.compile']:.1f}x faster; same values: "
          f"{f['same_values']}")
    n = f["n_traffic"]
    print(f"   traffic for N = {n}: unfused {f['traffic']['unfused']:,} B (2·k·N·4 = "
          f"{2 * 8 * n * 4:,}), fused {f['traffic']['fused']:,} B (2·N·4 = {2 * n * 4:,}); "
          f"allocated {f['allocated']['unfused']:,} B -> {f['allocated']['fused']:,} B")
    print(f"3. break-even of a fresh compile ({args.n_break_even:,} numbers, 8 ops)")
    for clock in ("cpu", "wall"):
        b = break_even(args.n_break_even, clock=clock)
        if b["predicted"] is None:
            print(f"   {clock:4s} clock: T_eager {b['t_eager'] * 1e3:.3f} ms, T_compiled "
                  f"{b['t_compiled'] * 1e3:.3f} ms: the compiled call is not faster at this "
                  f"size, compiling never pays off")
            continue
        ratio = f"{b['measured'] / b['predicted']:.2f}x the prediction" if b["measured"] else "not reached"
        print(f"   {clock:4s} clock: T_compile {b['t_compile'] * 1e3:.0f} ms, T_eager "
              f"{b['t_eager'] * 1e3:.3f} ms, T_compiled {b['t_compiled'] * 1e3:.3f} ms: predicted "
              f"N* = {b['predicted']:.0f} calls, measured crossover {b['measured']} calls ({ratio})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
