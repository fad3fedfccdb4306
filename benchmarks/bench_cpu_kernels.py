"""Chapter 04 benchmarks: mini's cpu backend against numpy and PyTorch, measured side by side
in one run and printed as ratios (no absolute goals are asserted anywhere; timings depend on
the machine and its load).

    python benchmarks/bench_cpu_kernels.py            # full sizes
    python benchmarks/bench_cpu_kernels.py --quick    # smaller sizes, a few seconds

Goals from the chapter's issue:
  matmul n=1024, cpu backend vs numpy (BLAS) ....... speed ratio >= 0.5
  elementwise add vs measured copy bandwidth ........ >= 0.8
  conv2d forward+backward, LeNet-sized batch ........ <= 2x PyTorch CPU's time (when installed)
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import mini
from mini.napkin import measure
from mini.ops.conv import conv2d as mini_conv2d


def _row(name, value, goal, ok):
    mark = "ok " if ok else "MISS"
    print(f"  {name:<58} {value:>8.2f}   goal {goal:<8} {mark}")


def bench_matmul(n: int) -> float:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    ta, tb = mini.tensor(a, device="cpu"), mini.tensor(b, device="cpu")
    t_np = measure.best_time(lambda: a @ b, repeats=5)
    t_mini = measure.best_time(lambda: ta @ tb, repeats=5)
    return t_np / t_mini


def bench_add(n: int) -> tuple[float, float, float]:
    a = np.random.rand(n).astype(np.float32)
    b = np.random.rand(n).astype(np.float32)
    ta, tb = mini.tensor(a, device="cpu"), mini.tensor(b, device="cpu")
    bw = measure.copy_bandwidth(n * 4, repeats=5)
    t_mini = measure.best_time(lambda: ta + tb, repeats=5)
    t_np = measure.best_time(lambda: a + b, repeats=5)
    eff = 3 * n * 4 / t_mini
    # the kernel alone, into a preallocated output (as STREAM's copy writes into one)
    from mini.backends.cpu.build_info import load_extension
    ext = load_extension()
    out = np.empty_like(a)
    t_kernel = measure.best_time(lambda: ext.ewise("add", a, b, out), repeats=5)
    return eff / bw, (3 * n * 4 / t_np) / bw, bw, (3 * n * 4 / t_kernel) / bw


def bench_conv(batch: int, device: str) -> tuple[float, float | None]:
    """LeNet's two convolutions (1->6 5x5 pad 2, relu, 6->16 5x5), forward + backward.
    Returns (mini seconds, torch seconds or None)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, 1, 28, 28)).astype(np.float32)
    w1 = (rng.standard_normal((6, 1, 5, 5)) * 0.2).astype(np.float32)
    w2 = (rng.standard_normal((16, 6, 5, 5)) * 0.1).astype(np.float32)
    tx = mini.tensor(x, device=device, requires_grad=True)
    tw1 = mini.tensor(w1, device=device, requires_grad=True)
    tw2 = mini.tensor(w2, device=device, requires_grad=True)

    def step_mini():
        h = mini_conv2d(tx, tw1, None, padding=2).relu()
        mini_conv2d(h, tw2, None).sum().backward()

    t_mini = measure.best_time(step_mini, repeats=5)
    try:
        import torch
    except ImportError:
        return t_mini, None
    px = torch.tensor(x, requires_grad=True)
    pw1, pw2 = torch.tensor(w1, requires_grad=True), torch.tensor(w2, requires_grad=True)

    def step_torch():
        h = torch.nn.functional.conv2d(px, pw1, padding=2).relu()
        torch.nn.functional.conv2d(h, pw2).sum().backward()

    t_torch = measure.best_time(step_torch, repeats=5)
    return t_mini, t_torch


def bench_student_slots(n_add: int, n_mm: int) -> dict:
    """The chapter's reference kernels (what a student writes) against numpy."""
    from mini.backends.cpu import exercises as E
    a = np.random.rand(n_add).astype(np.float32)
    b = np.random.rand(n_add).astype(np.float32)
    out = {}
    E.omp_add(a[:4], b[:4])
    out["omp_add vs numpy add (speed)"] = (measure.best_time(lambda: a + b) /
                                           measure.best_time(lambda: E.omp_add(a, b)))
    out["fused_add_relu vs numpy relu(a + b) (speed)"] = (
        measure.best_time(lambda: np.maximum(a + b, 0)) /
        measure.best_time(lambda: E.fused_add_relu(a, b)))
    m = np.random.rand(n_mm, n_mm).astype(np.float32)
    E.tiled_matmul(m[:2, :2], m[:2, :2])
    out[f"tiled_matmul n={n_mm} vs numpy (speed)"] = (measure.best_time(lambda: m @ m, repeats=3) /
                                                      measure.best_time(lambda: E.tiled_matmul(m, m), repeats=3))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smaller sizes")
    args = p.parse_args(argv)
    n_mm = 256 if args.quick else 1024
    n_add = 1 << (22 if args.quick else 25)
    batch = 16 if args.quick else 64

    from mini.backends.cpu.build_info import describe
    info = describe()
    print(f"mini cpu backend: {info}")
    print("ratios (measured side by side in this run):")
    r = bench_matmul(n_mm)
    _row(f"matmul n={n_mm}: cpu backend speed / numpy speed", r, ">= 0.5", r >= 0.5)
    r_add, r_np, bw, r_kernel = bench_add(n_add)
    _row(f"add {n_add} floats, kernel into preallocated out / copy bw", r_kernel, ">= 0.8",
         r_kernel >= 0.8)
    _row(f"add {n_add} floats, mini tensor a + b (allocates) / copy bw", r_add, ">= 0.8", r_add >= 0.8)
    print(f"  {'(numpy add / copy bandwidth: ' + format(r_np, '.2f') + '; copy ' + format(bw / 1e9, '.1f') + ' GB/s)'}")
    for device in ("cpu", "numpy"):
        t_mini, t_torch = bench_conv(batch, device)
        if t_torch is None:
            print(f"  conv2d fwd+bwd batch {batch} on {device}: {t_mini * 1e3:.1f} ms (PyTorch not installed)")
        elif device == "cpu":  # the goal is the cpu backend's
            _row(f"conv2d fwd+bwd LeNet batch {batch}, device={device}: mini / torch time",
                 t_mini / t_torch, "<= 2", t_mini / t_torch <= 2)
            print(f"  {'(mini ' + format(t_mini * 1e3, '.1f') + ' ms, PyTorch ' + format(t_torch * 1e3, '.1f') + ' ms)'}")
        else:  # numpy is the portable reference: measured for comparison, no goal
            print(f"  {'conv2d fwd+bwd LeNet batch ' + str(batch) + ', device=numpy: mini / torch time':<58}"
                  f" {t_mini / t_torch:>8.2f}   (the portable reference backend)")
    print("chapter 04 reference kernels (the student's exercises):")
    for name, v in bench_student_slots(n_add, 512 if not args.quick else 256).items():
        print(f"  {name:<58} {v:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
