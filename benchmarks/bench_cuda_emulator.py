"""Chapter 04 (CUDA): how fast mini's CUDA emulator grades a kernel, measured side by side
in one run.  The emulator runs on one CPU core whatever the machine has.

    python benchmarks/bench_cuda_emulator.py            # n = 128
    python benchmarks/bench_cuda_emulator.py --n 256

Goal from the chapter's issue:
  128x128 shared-memory tiled matmul, every check on, one schedule ...... < 2 s
Also printed: the same with three schedules (what grading uses), without checks, the
naive kernel, and each as a multiple of numpy's time for the same product (the price of
running every CUDA thread as a fiber and checking every access).
"""
from __future__ import annotations

import argparse
import os
import time
import warnings

import numpy as np

os.environ.setdefault("MINI_CUDA_EMULATE", "1")

from grader.mistakes.cuda_kernels import launcher, load_module  # noqa: E402
from mini.backends.cuda import emulator, kernels  # noqa: E402
from mini.napkin import measure  # noqa: E402


def timed(fn, repeats=3):
    """(best wall seconds, best CPU seconds of this process) of ``fn()``, whose return value
    is the wall time of the part to measure.  The CPU time covers the whole call (session,
    copies, check): on a loaded machine it is the fairer number, since the emulator runs
    on one core and wall time counts the time other processes held it."""
    best, best_cpu = float("inf"), float("inf")
    for _ in range(repeats):
        c = time.process_time()
        best = min(best, fn())
        best_cpu = min(best_cpu, time.process_time() - c)
    return best, best_cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=128)
    args = ap.parse_args()
    n = args.n
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)

    print("building (cached after the first run) ...", flush=True)
    checked = load_module([("ref", "matmul_tiled", None), ("naive", "matmul_naive", None)])
    unchecked = kernels.load_variants([("ref", "matmul_tiled", None)], sanitize=False, name="bench_unchecked")
    t_numpy = measure.best_time(lambda: a @ b, repeats=20)

    def run(module, exercise, tag, schedules, sanitize=True):
        with kernels.DeviceSession(module) as s:
            A, B, C = s.to_device(a), s.to_device(b), s.empty((n, n))
            go = launcher(module, exercise, tag)
            if sanitize:
                with emulator.check(schedules=schedules) as r:
                    t0 = time.perf_counter()
                    go(A, B, C, n, n, n)
                    elapsed = time.perf_counter() - t0
                assert r.ok, r
            else:
                t0 = time.perf_counter()
                go(A, B, C, n, n, n)
                elapsed = time.perf_counter() - t0
            np.testing.assert_allclose(s.to_host(C), a @ b, rtol=1e-4, atol=1e-3)
        return elapsed

    rows = [
        ("tiled, every check, 1 schedule", lambda: run(checked, "matmul_tiled", "ref", 1)),
        ("tiled, every check, 3 schedules", lambda: run(checked, "matmul_tiled", "ref", 3)),
        ("tiled, no checks", lambda: run(unchecked, "matmul_tiled", "ref", 1, sanitize=False)),
        ("naive, every check, 1 schedule", lambda: run(checked, "matmul_naive", "naive", 1)),
    ]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\n{n}x{n} float32 matmul on mini's CUDA emulator (numpy's product: {t_numpy * 1e3:.3f} ms; "
          f"load average {load:.1f} on {os.cpu_count()} cores)")
    print(f"  {'kernel':<36} {'seconds':>8} {'CPU s':>8} {'x numpy':>10}")
    results, cpu_of = {}, {}
    for name, fn in rows:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t, cpu = timed(fn, repeats=3 if n <= 128 else 1)
        results[name] = t
        cpu_of[name] = cpu
        print(f"  {name:<36} {t:>8.3f} {cpu:>8.3f} {t / t_numpy:>10.0f}")
    goal = results["tiled, every check, 1 schedule"]
    if n == 128:
        cpu = cpu_of["tiled, every check, 1 schedule"]
        print(f"\ngoal: tiled 128x128 with every check < 2 s on one core: {goal:.3f} s wall, "
              f"{cpu:.3f} s CPU {'ok' if min(goal, cpu) < 2 else 'MISS'}")
    print(f"checks cost {goal / results['tiled, no checks']:.1f}x the unchecked emulated kernel")


if __name__ == "__main__":
    main()
