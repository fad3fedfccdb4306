"""Per-op dispatch overhead: a size-4 float32 add in mini against PyTorch CPU, side by side.

    python benchmarks/bench_dispatch.py [--size 4] [--rounds 15] [--number 20000]

On four-element tensors the arithmetic is negligible, so the time per op is the framework's
dispatch: Python calls, dtype and shape checks, the output buffer, the graph node.  Each
case is timed in ``--rounds`` interleaved rounds of ``--number`` calls (every case runs in
every round, so a burst of load on a shared machine hits all of them alike) and the best
round counts.  The clock is the thread's CPU time, which a busy machine's other processes
do not inflate (time spent waiting for a core is not counted).  Printed: microseconds per op for each case and mini / PyTorch ratios,

- with autograd: both inputs require grad, so every op records a graph node;
- without autograd: the inputs do not require grad (nothing to record);

for mini's two devices, ``numpy`` (the portable reference backend) and ``cpu`` (the C++
backend, mini's default when it is built).  A bare numpy add is printed for scale.  Without
torch installed, only the absolute times are printed.
"""
from __future__ import annotations

import argparse
import time
import timeit

import numpy as np


def _cases(size: int) -> dict:
    import mini
    cases = {}
    x = np.linspace(0.5, 1.5, size).astype(np.float32)
    for device in ("numpy", "cpu"):
        a = mini.tensor(x, device=device, requires_grad=True)
        b = mini.tensor(x, device=device, requires_grad=True)
        c, d = a.detach(), b.detach()
        cases[f"mini {device} autograd"] = lambda a=a, b=b: a + b
        cases[f"mini {device} no autograd"] = lambda c=c, d=d: c + d
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        ta = torch.tensor(x, requires_grad=True)
        tb = torch.tensor(x, requires_grad=True)
        tc, td = ta.detach(), tb.detach()
        cases["torch autograd"] = lambda: ta + tb
        cases["torch no autograd"] = lambda: tc + td
    na, nb = x.copy(), x.copy()
    cases["numpy"] = lambda: na + nb
    return cases


def _torch_threads(n: int | None) -> int | None:
    """Set PyTorch's thread count to ``n`` (None: leave it); the previous count, or None
    without torch.  PyTorch and mini's extensions share one OpenMP runtime, so the count
    must come back after measuring (a caller in the same process would inherit it)."""
    try:
        import torch
    except ImportError:
        return None
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    return before


def measure(size: int = 4, rounds: int = 15, number: int = 20000) -> dict:
    """Best seconds per call of each case, measured in interleaved rounds (PyTorch on one
    thread, as mini's add runs; its previous thread count restored after)."""
    before = _torch_threads(1)
    try:
        cases = _cases(size)
        for fn in cases.values():  # warm up: first calls build caches
            for _ in range(100):
                fn()
        best = {name: float("inf") for name in cases}
        for _ in range(rounds):
            for name, fn in cases.items():
                t = timeit.timeit(fn, number=number, timer=time.thread_time) / number
                best[name] = min(best[name], t)
        return best
    finally:
        _torch_threads(before)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=4, help="elements per tensor")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--number", type=int, default=20000, help="calls per round")
    args = ap.parse_args(argv)
    best = measure(args.size, args.rounds, args.number)
    for name, sec in best.items():
        print(f"{name:26s} {sec * 1e6:7.2f} us/op")
    if "torch autograd" not in best:
        print("torch not installed: no ratios")
        return 0
    print()
    for device in ("numpy", "cpu"):
        for mode in ("autograd", "no autograd"):
            ratio = best[f"mini {device} {mode}"] / best[f"torch {mode}"]
            print(f"ratio mini {device:5s} / torch, {mode:11s}: {ratio:5.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
