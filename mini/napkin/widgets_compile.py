"""Napkin widget of chapter 01: how long does one forward step of a small MLP take in mini?

The student commits to a number of microseconds.  The widget shows the dispatch law's
prediction, N·t_d + T_c + T_m, built from the op count of the step (mini's profiler), the
per-op dispatch time t_d (a 1-element add timed with ``01.time_per_call``) and the step's
FLOPs and bytes at this machine's GEMM rate and memory bandwidth; next to it the measured
step (``01.time_per_call`` again), the ratio, the dispatch share (``01.dispatch_law``) and a
plot of both against the batch size, where the step goes from overhead-bound to
work-bound.

Never blocks: without a widget frontend it prints the same report as text.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from mini.napkin.widgets import _parse_estimate, estimate_widget, widgets_enabled

__all__ = ["mlp_forward_costs", "StepMeasurement", "measure_step", "dispatch_report",
           "plot_step_vs_batch", "napkin_dispatch", "DEFAULT_SIZES", "DEFAULT_BATCHES"]

DEFAULT_SIZES = (784, 128, 10)
DEFAULT_BATCHES = (1, 4, 16, 64, 256, 1024)


def mlp_forward_costs(batch: int, sizes: Sequence[int] = DEFAULT_SIZES, itemsize: int = 4) -> dict:
    """FLOPs and bytes of the forward pass of ``Linear -> ReLU -> ... -> Linear`` on a
    batch (float32): each GEMM ``2·B·m·n`` FLOPs and ``(B·m + m·n + B·n)·4`` bytes, each bias
    add and ReLU one FLOP per element, reading and writing each element once."""
    sizes = [int(s) for s in sizes]
    flops = nbytes = 0
    for i, (m, n) in enumerate(zip(sizes[:-1], sizes[1:])):
        flops += 2 * batch * m * n + batch * n
        nbytes += (batch * m + m * n + batch * n) * itemsize + (2 * batch * n + n) * itemsize
        if i < len(sizes) - 2:
            flops += batch * n
            nbytes += 2 * batch * n * itemsize
    return {"flops": flops, "bytes": nbytes}


@dataclass
class StepMeasurement:
    batch: int
    n_ops: int = 0
    t_dispatch: float = float("nan")      # seconds per op (1-element add)
    measured: float = float("nan")        # seconds per step
    flops: int = 0
    bytes: int = 0
    error: str | None = None


def _model(sizes, seed: int = 0):
    import mini
    from mini import nn
    mini.manual_seed(seed)
    layers = []
    for i, (m, n) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(m, n))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def dispatch_time_per_op(repeats: int = 5, calls: int = 2000) -> float:
    """t_d: seconds per call of ``x + y`` on 1-element float32 tensors, timed with
    ``01.time_per_call`` (no autograd: nothing to record)."""
    import mini
    from mini.napkin.compile import time_per_call
    x, y = mini.ones(1), mini.ones(1)
    return time_per_call(lambda: x + y, calls=calls, repeats=repeats, warmup=100)


def measure_step(batch: int, sizes: Sequence[int] = DEFAULT_SIZES, t_dispatch: float | None = None,
                 budget: float = 0.25) -> StepMeasurement:
    """Count the ops of one forward step (mini's profiler) and time it (``01.time_per_call``,
    no autograd)."""
    import mini
    from mini.napkin.compile import time_per_call
    from mini.utils import profiler
    sizes = [int(s) for s in sizes]
    costs = mlp_forward_costs(batch, sizes)
    result = StepMeasurement(batch, flops=costs["flops"], bytes=costs["bytes"])
    try:
        model = _model(sizes)
        x = mini.randn(batch, sizes[0])
        with mini.no_grad():
            with profiler.profile() as prof:
                model(x)
            result.n_ops = prof.num_ops
            result.t_dispatch = dispatch_time_per_op() if t_dispatch is None else t_dispatch
            probe = time_per_call(lambda: model(x), calls=1, repeats=1, warmup=1)
            calls = int(max(1, min(200, budget / 3 / max(probe, 1e-7))))
            result.measured = time_per_call(lambda: model(x), calls=calls, repeats=3, warmup=1)
    except NotImplementedError as e:
        slot = getattr(e, "slot_id", None)
        result.error = f"finish exercise {slot} to measure the step" if slot else str(e)
    except Exception as e:  # a student's bug: report it, never crash the notebook
        result.error = f"mini raised {type(e).__name__}: {e}"
    return result


def _law(m: StepMeasurement, peak_flops: float, bandwidth: float):
    from mini.napkin.compile import dispatch_law
    return dispatch_law(m.n_ops, m.t_dispatch, m.flops / peak_flops, m.bytes / bandwidth)


def dispatch_report(estimate, m: StepMeasurement, peak_flops: float, bandwidth: float,
                    sizes: Sequence[int] = DEFAULT_SIZES) -> str:
    """The text a student sees: the model term by term, the measurement, the ratios."""
    arch = " -> ".join(str(s) for s in sizes)
    lines = [f"MLP {arch}, forward, batch {m.batch}, float32, no autograd"]
    if m.error:
        return "\n".join(lines + [f"No measurement yet: {m.error}."])
    try:
        law = _law(m, peak_flops, bandwidth)
    except NotImplementedError as e:
        return "\n".join(lines + [f"No model yet: finish exercise "
                                  f"{getattr(e, 'slot_id', '01.dispatch_law')}."])
    t_c, t_m = m.flops / peak_flops, m.bytes / bandwidth
    us = 1e6
    lines += [
        f"  dispatch  N·t_d = {m.n_ops} ops x {m.t_dispatch * us:.2f} us = "
        f"{m.n_ops * m.t_dispatch * us:9.1f} us",
        f"  compute   T_c   = {m.flops:,} FLOP / {peak_flops / 1e9:.0f} GFLOP/s = {t_c * us:9.1f} us",
        f"  memory    T_m   = {m.bytes:,} B / {bandwidth / 1e9:.1f} GB/s = {t_m * us:9.1f} us",
        f"model:    {law['step'] * us:9.1f} us per step  (R = {law['ratio']:.2f}: "
        f"{law['share']:.0%} of the step is dispatch)",
        f"measured: {m.measured * us:9.1f} us per step  (measured / model = "
        f"{m.measured / law['step']:.2f})",
    ]
    est = _parse_estimate(estimate)
    if est is None:
        lines.append("your estimate: none yet. Commit to a number of microseconds first: "
                     "napkin_dispatch(estimate=...)")
    else:
        lines.append(f"your estimate: {est:9.1f} us  (estimate / measured = "
                     f"{est / (m.measured * us):.2f})")
    ratio = m.measured / law["step"]
    if law["ratio"] > 1:
        why = ("The step is overhead-bound: removing mini's dispatch would make it up to "
               f"{law['speedup']:.1f}x faster, and a faster machine would change nothing. ")
    else:
        why = "The step is work-bound: the arithmetic and the memory traffic dominate. "
    if ratio > 1.3:
        why += ("It runs slower than the model: a matrix product or a broadcasting add "
                "dispatches more work than a 1-element add (shape checks, a transposed view), "
                "and small matrix products stay far below the GEMM rate measured on 512x512.")
    elif ratio < 0.7:
        why += ("It runs faster than the model: the operands fit in the caches, which deliver "
                "more than the copy bandwidth measured on arrays larger than the caches.")
    else:
        why += "Model and measurement agree within 30%: the law holds here."
    lines.append("Why: " + why)
    return "\n".join(lines)


def plot_step_vs_batch(peak_flops: float, bandwidth: float, sizes: Sequence[int] = DEFAULT_SIZES,
                       batches: Sequence[int] = DEFAULT_BATCHES, t_dispatch: float | None = None,
                       estimate=None, estimate_batch: int | None = None):
    """Measured step time and the law's prediction against the batch size (log-log), with
    the dispatch floor N·t_d.  Returns the figure."""
    import matplotlib.pyplot as plt
    t_d = dispatch_time_per_op() if t_dispatch is None else t_dispatch
    runs = [measure_step(b, sizes, t_d) for b in batches]
    ok = [r for r in runs if r.error is None]
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    if ok:
        model = [_law(r, peak_flops, bandwidth)["step"] * 1e6 for r in ok]
        ax.loglog([r.batch for r in ok], [r.measured * 1e6 for r in ok], "o-", color="#dd8452",
                  label="measured")
        ax.loglog([r.batch for r in ok], model, "s--", color="#4c72b0",
                  label="model: N·t_d + T_c + T_m")
        ax.axhline(ok[0].n_ops * t_d * 1e6, color="grey", ls=":",
                   label=f"dispatch alone: {ok[0].n_ops} ops x {t_d * 1e6:.1f} us")
    est = _parse_estimate(estimate)
    if est is not None and estimate_batch is not None:
        ax.plot([estimate_batch], [est], "x", color="black", markersize=10, label="your estimate")
    ax.set_xlabel("batch size")
    ax.set_ylabel("us per forward step")
    ax.set_title("Where the step stops being overhead-bound", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def napkin_dispatch(estimate=None, peak_flops: float | None = None, bandwidth: float | None = None,
                    batch: int = 32, sizes: Sequence[int] = DEFAULT_SIZES,
                    batches: Sequence[int] = DEFAULT_BATCHES, plot: bool = True):
    """Predict the time of one forward step of an MLP in mini (microseconds), then compare
    with the dispatch law and with a measurement.  ``peak_flops`` and ``bandwidth`` are this
    machine's (measured here when not given).  Never blocks."""
    if peak_flops is None or bandwidth is None:
        from mini.napkin.measure import copy_bandwidth, gemm_rate
        peak_flops = peak_flops or gemm_rate(256)
        bandwidth = bandwidth or copy_bandwidth(32 * 2**20)
    m = measure_step(batch, sizes)
    return estimate_widget(
        f"<b>How many microseconds does one forward step take in mini?</b><br>"
        f"<code>MLP {' -> '.join(str(s) for s in sizes)}</code>, batch {batch}, float32",
        lambda est: dispatch_report(est, m, peak_flops, bandwidth, sizes),
        figure=(lambda est: plot_step_vs_batch(peak_flops, bandwidth, sizes, batches,
                                               m.t_dispatch if m.error is None else None,
                                               est, batch)) if plot else None,
        estimate=estimate, placeholder="your estimate in microseconds, e.g. 50",
        enabled=widgets_enabled())


_ = np
