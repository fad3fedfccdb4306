"""Short, bounded measurements that put numbers from *this* machine into the napkin models.

- :func:`copy_bandwidth`  STREAM-style copy: bytes read + written per second;
- :func:`gemm_rate`       FLOP/s of a float32 matrix product (numpy's BLAS by default);
- :func:`fma_peak`        FLOP/s of the cores doing nothing but float32 fused multiply-adds
  on registers: the compute roof (no real kernel gets above it);
- :func:`dispatch_time`   seconds per operation of mini on tiny tensors (the t_d of the
  dispatch law);
- :func:`best_time`       the best of a few timed runs of any function;
- :func:`roofline_plot`   a roofline of this machine with ops placed on it.

Every measurement is bounded: a fixed number of repeats, sizes with small defaults, and a
time budget, so a notebook cell stays well under a second or two.
"""
from __future__ import annotations

import time
from typing import Callable, Iterable

import numpy as np

from mini.napkin.roofline import OpCost, attainable, ridge_point

__all__ = ["best_time", "copy_bandwidth", "gemm_rate", "fma_peak", "dispatch_time", "machine",
           "roofline_plot"]


def best_time(fn: Callable[[], object], repeats: int = 5, warmup: int = 1,
              budget: float = 2.0) -> float:
    """The shortest wall time (seconds) of ``fn()`` over at most ``repeats`` runs, stopping
    early when ``budget`` seconds have been spent (at least one timed run always happens)."""
    for _ in range(max(0, int(warmup))):
        fn()
    best = float("inf")
    spent = 0.0
    for i in range(max(1, int(repeats))):
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        best = min(best, dt)
        spent += dt
        if spent > budget and i >= 0:
            break
    return best


def copy_bandwidth(nbytes: int = 64 * 2**20, repeats: int = 5) -> float:
    """STREAM "copy" on float32 arrays of ``nbytes`` each (default 64 MiB, larger than the
    caches): returns bytes moved per second, counting the read and the write
    (``2·nbytes / t``), as STREAM does.  numpy's copy runs on one thread."""
    n = max(1, int(nbytes) // 4)
    src = np.ones(n, np.float32)
    dst = np.empty_like(src)
    t = best_time(lambda: np.copyto(dst, src), repeats=repeats)
    return 2.0 * n * 4 / t


def gemm_rate(n: int = 512, repeats: int = 5, matmul: Callable | None = None) -> float:
    """FLOP/s of an n x n float32 matrix product (``2·n³ / t``), by ``matmul(a, b)``
    (numpy's ``@`` by default: BLAS, all cores)."""
    n = int(n)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    f = matmul or np.matmul
    t = best_time(lambda: f(a, b), repeats=repeats)
    return 2.0 * n ** 3 / t


# Every OpenMP thread updates LANES independent float32 accumulators ``acc = acc * m + c``:
# one FMA each, 2 FLOPs.  Many independent chains hide the FMA latency (4 cycles, 2 units:
# 8 vectors in flight), the inner loop vectorizes into vector FMA instructions, and nothing
# touches memory.  -march=native lets the compiler use this CPU's widest vector FMAs;
# -ffp-contract=fast lets it fuse the multiply and the add (ISO C++ mode does not by default).
_FMA_LANES = 256
_FMA_SOURCE = r"""
static volatile float fma_sink;
double fma_loop(int64_t iterations) {
    int threads = 1;
    #pragma omp parallel
    {
        #pragma omp single
        threads = omp_get_num_threads();
        float acc[LANES];
        for (int j = 0; j < LANES; ++j) acc[j] = 1.0f + 1e-3f * j;
        const float m = 0.9999999f, c = 1e-7f;
        for (int64_t it = 0; it < iterations; ++it) {
            #pragma omp simd
            for (int j = 0; j < LANES; ++j) acc[j] = acc[j] * m + c;
        }
        float s = 0.0f;
        for (int j = 0; j < LANES; ++j) s += acc[j];
        fma_sink = s;   // the result is used: the loop cannot be optimized away
    }
    return 2.0 * LANES * (double)iterations * threads;   // FLOPs done
}
""".replace("LANES", str(_FMA_LANES))


def fma_peak(seconds: float = 0.2, repeats: int = 3) -> float:
    """FLOP/s of this machine's cores doing only float32 fused multiply-adds on data in
    registers, on every OpenMP thread: the compute roof of the roofline, which no kernel
    exceeds (a tuned BLAS GEMM gets close on large matrices).  Compiles a small C++ kernel
    once (``load_inline``); each timed run lasts about ``seconds``."""
    from mini.utils.cpp_extension import CompileError, load_inline

    try:
        ext = load_inline("fma_peak", _FMA_SOURCE, functions=["fma_loop"],
                          extra_cflags=["-march=native", "-ffp-contract=fast"])
    except CompileError:  # a compiler without -march=native: the baseline vector width
        ext = load_inline("fma_peak", _FMA_SOURCE, functions=["fma_loop"],
                          extra_cflags=["-ffp-contract=fast"])
    iterations = 1000
    while True:   # calibrate: a run long enough to time, short enough for a notebook cell
        t0 = time.perf_counter()
        ext.fma_loop(iterations)
        dt = time.perf_counter() - t0
        if dt > seconds / 4 or iterations > 1 << 34:
            break
        iterations *= 4
    iterations = max(1, int(iterations * seconds / max(dt, 1e-9)))
    flops = 2.0 * _FMA_LANES * iterations
    best = best_time(lambda: ext.fma_loop(iterations), repeats=repeats, warmup=0,
                     budget=4 * seconds)
    threads = ext.fma_loop(1) / (2.0 * _FMA_LANES)
    return flops * threads / best


def dispatch_time(device: str = "numpy", op: str = "add", calls: int = 2000,
                  repeats: int = 3) -> float:
    """Seconds per call of a mini operation on 1-element float32 tensors: almost all of it
    is dispatch (Python, the autograd record, the backend call), the arithmetic is one FLOP."""
    import mini

    x = mini.ones(1, device=device)
    y = mini.ones(1, device=device)
    fns = {"add": lambda: x + y, "mul": lambda: x * y, "relu": lambda: x.relu(),
           "matmul": lambda: x.reshape(1, 1) @ y.reshape(1, 1)}
    if op not in fns:
        raise ValueError(f"dispatch_time: op must be one of {sorted(fns)}, got {op!r}")
    f = fns[op]
    calls = max(1, int(calls))

    def loop():
        for _ in range(calls):
            f()
    return best_time(loop, repeats=repeats) / calls


def machine(bandwidth_bytes: int = 64 * 2**20, gemm_n: int = 512) -> dict:
    """This machine's copy bandwidth (B/s), float32 GEMM rate (FLOP/s) and ridge point."""
    bw = copy_bandwidth(bandwidth_bytes)
    peak = gemm_rate(gemm_n)
    return {"bandwidth": bw, "peak_flops": peak, "ridge": ridge_point(peak, bw)}


def roofline_plot(ops: Iterable[OpCost], peak_flops: float, bandwidth: float, ax=None,
                  measured: dict | None = None, title: str | None = None):
    """Draw the roofline ``min(peak, AI·bandwidth)`` and mark each op at its intensity (on
    the roof: the best it can do).  ``measured`` maps op names to measured FLOP/s, drawn as
    crosses under the roof.  Returns the matplotlib Axes."""
    import matplotlib.pyplot as plt

    ops = list(ops)
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 4))
    ridge = ridge_point(peak_flops, bandwidth)
    ais = [o.intensity for o in ops] + [ridge]
    lo, hi = min(ais) / 4, max(ais) * 4
    xs = np.logspace(np.log10(lo), np.log10(hi), 200)
    ax.loglog(xs, [attainable(x, peak_flops, bandwidth) / 1e9 for x in xs], "k-", lw=2,
              label="roofline of this machine")
    ax.axvline(ridge, color="grey", ls=":", lw=1)
    ax.text(ridge, peak_flops / 1e9 * 1.15, f"ridge {ridge:.1f} FLOP/B", ha="center", fontsize=8)
    seen = set()
    for o in ops:
        if o.name in seen:
            continue
        seen.add(o.name)
        y = attainable(o.intensity, peak_flops, bandwidth) / 1e9
        ax.plot([o.intensity], [y], "o")
        ax.annotate(o.name, (o.intensity, y), textcoords="offset points", xytext=(4, -10),
                    fontsize=8)
        if measured and o.name in measured:
            ax.plot([o.intensity], [measured[o.name] / 1e9], "x", color="C3")
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(title or "Roofline: where each op of the MLP step sits")
    ax.legend(loc="lower right", fontsize=8)
    return ax
