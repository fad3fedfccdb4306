"""Napkin math of chapter 01: what a framework costs per op, and when compiling pays.

- :func:`time_per_call` (exercise ``01.time_per_call``): a stopwatch that benchmarks the
  way benchmarks must be taken (warm-up, repeated rounds, the fastest round);
- :func:`fit_dispatch` (exercise ``01.fit_dispatch``): from a sweep of sizes, the fixed
  cost of one op (its dispatch time t_d), the cost per element, and the size where the two
  are equal (above it, arithmetic dominates);
- :func:`dispatch_law` (exercise ``01.dispatch_law``): the dispatch overhead law,
  R = N·t_d / (T_c + T_m), with the share of a step spent dispatching and the most that
  removing dispatch could gain;
- :func:`break_even` (exercise ``01.break_even``): N* = T_compile / (T_eager − T_compiled),
  the number of calls after which compiling has paid for itself;
- :func:`measured_crossover` (exercise ``01.crossover``): where the measured cumulative-time
  curves of the eager and the compiled version cross.

The seed's numbers, each a plain formula here: 15 µs of overhead around a 1 µs kernel is 94 %
dispatch and around a 100 µs kernel 13 % (:func:`mini.napkin.roofline.op_overhead_share`); a
6-op MLP at 15 µs/op on 2.6 µs of hardware time has R = 34.6; a 30 s compile that lifts
ResNet-50 from 1450 to 2150 images/s breaks even after 133,607 ≈ 134,000 images; prototyping
10,000 images through 10 recompiles takes 304.7 s against 6.9 s eagerly (44.2×).
"""
from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np

from mini.exercises import exercise

__all__ = ["time_per_call", "fit_dispatch", "dispatch_law", "break_even", "measured_crossover",
           "compilation_benefit", "prototyping_seconds", "throughput_gain", "SEED"]

#: The seed's scenarios (chapter 001 of the source material), used by the notebook and tests.
SEED = {
    "t_python": 10e-6, "t_launch": 5e-6,                    # per-op overhead: 10 + 5 us
    "mlp_ops": 6, "mlp_hardware": 2.6e-6,                   # small MLP: 6 ops, 2.6 us of work
    "gpt3_overhead": 180e-6, "gpt3_hardware": 100e-3,       # one GPT-3 layer: 12 kernels x 15 us
    "resnet_eager": 1450.0, "resnet_compiled": 2150.0,      # images/s, hypothetical (table 4)
    "t_compile": 30.0,                                      # s, per compile
    "prototype_images": 10_000, "prototype_recompiles": 10,
}


@exercise("01.time_per_call")
def time_per_call(fn, calls=1000, repeats=5, warmup=1, clock=time.perf_counter):
    """Seconds that one call of ``fn()`` takes, measured as a benchmark should be.

    - First call ``fn()`` ``warmup`` times without timing them: first calls pay for
      things later calls do not (caches, compilation, memory the process has not touched).
    - Then time ``repeats`` rounds: read ``clock()``, call ``fn()`` ``calls`` times, read
      ``clock()`` again (two reads per round: reading a clock costs time too).
    - Return the fastest round's time divided by ``calls``, a float.  Other programs on the
      machine can only make a round slower, never faster.

    Raise ``ValueError`` naming the argument when ``calls`` < 1, ``repeats`` < 1 or
    ``warmup`` < 0.
    """
    ### BEGIN SOLUTION
    for name, value, lowest in (("calls", calls, 1), ("repeats", repeats, 1), ("warmup", warmup, 0)):
        if value < lowest:
            raise ValueError(f"time_per_call: {name} must be at least {lowest}, got {value}")
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(repeats):
        start = clock()
        for _ in range(calls):
            fn()
        best = min(best, clock() - start)
    return best / calls
    ### END SOLUTION


@exercise("01.fit_dispatch")
def fit_dispatch(sizes, seconds):
    """Fit ``t(n) = t_dispatch + n · t_element`` to the measured seconds of one op on ``n``
    elements, for each ``n`` in ``sizes``.

    The fit minimises the *relative* error, the sum of ((t(n) − measured) / measured)²:
    the times span orders of magnitude, and an ordinary least-squares fit would let the
    largest sizes decide everything, leaving the small sizes (the ones that carry
    t_dispatch) no say.

    Returns ``(t_dispatch, t_element, crossover)`` as floats, where ``crossover`` is the
    size at which the arithmetic of one op takes as long as its dispatch.

    Raise ``ValueError`` when the lengths differ, when there are fewer than 2 distinct
    sizes, when a time is not positive, or when the fit gives a ``t_dispatch`` or a
    ``t_element`` that is not positive (no crossover to report).
    """
    ### BEGIN SOLUTION
    n = np.asarray(sizes, dtype=np.float64)
    t = np.asarray(seconds, dtype=np.float64)
    if n.shape != t.shape or n.ndim != 1:
        raise ValueError(f"fit_dispatch: sizes and seconds must be two sequences of the same "
                         f"length, got {n.shape} and {t.shape}")
    if len(np.unique(n)) < 2:
        raise ValueError("fit_dispatch: need at least 2 distinct sizes to fit a line")
    if np.any(t <= 0):
        raise ValueError("fit_dispatch: every time must be positive")
    design = np.stack([1.0 / t, n / t], axis=1)      # (t_d + n·t_e) / t ≈ 1
    (t_d, t_e), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    if t_d <= 0 or t_e <= 0:
        raise ValueError(f"fit_dispatch: the fit gives t_dispatch = {t_d:.3g} s and "
                         f"t_element = {t_e:.3g} s; both must be positive: measure smaller "
                         f"and larger sizes")
    return float(t_d), float(t_e), float(t_d / t_e)
    ### END SOLUTION


@exercise("01.dispatch_law")
def dispatch_law(n_ops, t_dispatch, t_compute, t_memory=0.0):
    """The dispatch overhead law for one step of ``n_ops`` operations, each costing
    ``t_dispatch`` seconds of framework overhead (Python, checks, the launch), on hardware
    that needs ``t_compute`` seconds of arithmetic and ``t_memory`` seconds of memory
    traffic for the step's work (added up: no overlap).

    Returns a dict of floats:

    - ``"ratio"``: R, the host's dispatch time over the hardware's time (above 1, the step
      is overhead-bound);
    - ``"share"``: the fraction of the step's time spent dispatching;
    - ``"speedup"``: how much faster the step would be with no dispatch at all;
    - ``"step"``: the step's predicted seconds, dispatch and work one after the other.

    Raise ``ValueError`` when ``n_ops`` or a time is negative, or when the hardware time
    ``t_compute + t_memory`` is not positive.
    """
    ### BEGIN SOLUTION
    if n_ops < 0 or t_dispatch < 0 or t_compute < 0 or t_memory < 0:
        raise ValueError("dispatch_law: the op count and the times must not be negative")
    hardware = float(t_compute) + float(t_memory)
    if hardware <= 0:
        raise ValueError("dispatch_law: the hardware time t_compute + t_memory must be positive")
    host = n_ops * float(t_dispatch)
    ratio = host / hardware
    return {"ratio": ratio, "share": ratio / (1.0 + ratio), "speedup": 1.0 + ratio,
            "step": host + hardware}
    ### END SOLUTION


@exercise("01.break_even")
def break_even(t_compile, t_eager, t_compiled, recompiles=0):
    """How many calls it takes for compiling to pay for itself: the number of calls N after
    which the compiled version, its compile time included (one compile, plus one for each of
    ``recompiles``), has cost exactly as much time as running eagerly.  ``t_eager`` and
    ``t_compiled`` are the seconds of one call of each version, ``t_compile`` the seconds of
    one compile.  Returns a float (calls need not be whole).

    Raise ``ValueError`` when a time or ``recompiles`` is negative, and when ``t_compiled``
    is not below ``t_eager`` (then compiling never pays off: the message says so).
    """
    ### BEGIN SOLUTION
    if t_compile < 0 or t_eager < 0 or t_compiled < 0 or recompiles < 0:
        raise ValueError("break_even: times and recompiles must not be negative")
    saved = float(t_eager) - float(t_compiled)
    if saved <= 0:
        raise ValueError(f"break_even: the compiled call ({t_compiled:.3g} s) is not faster "
                         f"than the eager one ({t_eager:.3g} s): compiling never pays off")
    return float(t_compile) * (1 + recompiles) / saved
    ### END SOLUTION


@exercise("01.crossover")
def measured_crossover(eager_seconds, compiled_seconds, t_compile):
    """The measured break-even.  ``eager_seconds[k]`` and ``compiled_seconds[k]`` are the
    measured times of call ``k + 1`` of the eager and of the compiled version, and
    ``t_compile`` the seconds the compiled version spent compiling before its first call.

    Return the smallest number of calls ``n`` (an int, counting from 1) after which the
    compiled version's total time (``t_compile`` plus its first ``n`` calls) is at most the
    eager version's total time (its first ``n`` calls); ``None`` when that does not happen
    within the measurements.

    Raise ``ValueError`` when the two sequences have different lengths.
    """
    ### BEGIN SOLUTION
    eager = np.asarray(eager_seconds, dtype=np.float64)
    compiled = np.asarray(compiled_seconds, dtype=np.float64)
    if eager.shape != compiled.shape:
        raise ValueError(f"measured_crossover: {eager.size} eager times but "
                         f"{compiled.size} compiled times")
    ahead = np.flatnonzero(t_compile + np.cumsum(compiled) <= np.cumsum(eager))
    return int(ahead[0]) + 1 if ahead.size else None
    ### END SOLUTION


# --------------------------------------------------------------------------- plain formulas

def compilation_benefit(n_production: float, t_eager: float, t_compiled: float,
                        t_compile: float, n_dev: int = 0) -> float:
    """The seed's compilation benefit, B = N_prod·(T_e − T_c) / (T_compile·(1 + N_dev)):
    compile when B > 1."""
    return n_production * (t_eager - t_compiled) / (t_compile * (1 + n_dev))


def prototyping_seconds(n_images: int, recompiles: int, throughput_eager: float,
                        throughput_compiled: float, t_compile: float) -> dict:
    """Time to push ``n_images`` through a model that changes ``recompiles`` times: eagerly
    (no compiles) and compiled (a compile per change): ``{"eager", "compiled", "ratio"}``."""
    eager = n_images / throughput_eager
    compiled = recompiles * t_compile + n_images / throughput_compiled
    return {"eager": eager, "compiled": compiled, "ratio": compiled / eager}


def throughput_gain(throughput_eager: float, throughput_compiled: float) -> float:
    """Relative throughput gain of the compiled version (0.483 for 1450 -> 2150 img/s)."""
    return throughput_compiled / throughput_eager - 1.0
