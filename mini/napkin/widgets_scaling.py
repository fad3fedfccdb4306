"""Napkin widgets and pictures of chapter 06 (scaling).

Each widget follows the course's pattern: the student commits to an estimate, then sees the
model of :mod:`mini.napkin.scaling` next to a measurement on this machine (of the student's
own code), with the ratio and a sentence on why they differ.  The measurements that need
several ranks are taken by the notebook (one ``mpiexec`` job each, with
:func:`mini.distributed.launch.run`) and handed in, so a widget never starts processes and
never blocks.  Without a widget frontend (autograde, nbclient, ``MINI_NO_WIDGETS=1``) each
prints its report.

- :func:`napkin_checkpoint`: what fraction of the peak activation memory is left with √N
  checkpoint segments, and what it costs in recomputed forward operations;
- :func:`napkin_ring`: how long a ring all-reduce takes, from α and β, against the
  student's ring and MPI's own;
- :func:`napkin_zero_memory`: bytes per rank under plain data parallelism and ZeRO-1.

Pictures: :func:`plot_pingpong`, :func:`plot_allreduce`, :func:`plot_bucket_timelines`,
:func:`plot_pipeline`, :func:`plot_checkpoint_memory`.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from mini.napkin import scaling
from mini.napkin.widgets import _parse_estimate, estimate_widget, widgets_enabled

__all__ = ["napkin_checkpoint", "checkpoint_report", "napkin_ring", "ring_report",
           "napkin_zero_memory", "zero_memory_report", "plot_pingpong", "plot_allreduce",
           "plot_bucket_timelines", "plot_pipeline", "plot_checkpoint_memory",
           "measure_checkpointing", "checkpoint_model", "extra_forward"]


def _fmt_bytes(n: float) -> str:
    n = float(n)
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:,.2f} {unit}"
    return f"{n:,.0f} B"


def _fmt_seconds(t: float) -> str:
    t = float(t)
    if t >= 1:
        return f"{t:.3g} s"
    if t >= 1e-3:
        return f"{t * 1e3:.3g} ms"
    return f"{t * 1e6:.3g} µs"


# --------------------------------------------------------------------------- checkpointing

def checkpoint_model(n_layers: int, width: int = 16, seed: int = 0):
    """``n_layers`` blocks of ``Linear(width, width)`` + ``Tanh`` (mini.nn.Sequential)."""
    import mini
    from mini import nn
    mini.manual_seed(seed)
    layers = []
    for _ in range(int(n_layers)):
        layers += [nn.Linear(width, width), nn.Tanh()]
    return nn.Sequential(*layers)


def measure_checkpointing(n_layers: int, segments: int | None, width: int = 16,
                          batch: int = 2048) -> dict:
    """Peak bytes allocated by one forward and backward of :func:`checkpoint_model` on a
    ``batch × width`` input (tracemalloc; :func:`mini.napkin.scaling.measure_activation_memory`)
    and the operations run, without checkpointing (``segments=None``) or with
    ``checkpoint_sequential`` in ``segments`` segments.  Narrow and tall on purpose: one
    block's activation (``batch · width · 4`` bytes) outweighs its weights by far, so the
    peak measures activations."""
    import mini
    from mini.utils.checkpoint import checkpoint_sequential
    model = checkpoint_model(n_layers, width)
    x = mini.tensor(np.random.default_rng(0).standard_normal((batch, width)).astype(np.float32))

    def step():
        out = checkpoint_sequential(model, segments, x, use_reentrant=False) if segments \
            else model(x)
        out.pow(2).mean().backward()

    got = scaling.measure_activation_memory(step)
    got["activation_bytes"] = batch * width * 4
    return got


#: The forward operations of one block of :func:`checkpoint_model` (Linear: a permute of the
#: weight, a matrix product, the bias; then Tanh).
BLOCK_OPS = ("Permute", "MatMul", "Add", "Tanh")


def extra_forward(plain: dict, ckpt: dict) -> float:
    """Extra forward work of checkpointing, from the operations counted by the profiler: the
    blocks' forward operations with checkpointing over those without, minus one (the loss
    and the gradient accumulation's own operations are left out)."""
    count = [sum(m["forward_ops"].get(name, 0) for name in BLOCK_OPS) for m in (plain, ckpt)]
    return count[1] / max(count[0], 1) - 1


def checkpoint_report(estimate, n_layers: int, segments: int, plain: dict, ckpt: dict) -> str:
    """The text of :func:`napkin_checkpoint`."""
    model = scaling.checkpoint_cost(n_layers, segments)
    act = plain["activation_bytes"]
    model_ratio = model["peak_activations"] / n_layers
    ratio = ckpt["peak_bytes"] / plain["peak_bytes"]
    extra = extra_forward(plain, ckpt)
    lines = [f"{n_layers} blocks (Linear + Tanh), one activation = {_fmt_bytes(act)}, "
             f"{segments} checkpoint segments", "",
             f"{'':<36}{'model':>14}{'measured':>14}",
             f"{'peak, no checkpointing':<36}{_fmt_bytes(n_layers * act):>14}"
             f"{_fmt_bytes(plain['peak_bytes']):>14}",
             f"{'peak, checkpointed':<36}{_fmt_bytes(model['peak_activations'] * act):>14}"
             f"{_fmt_bytes(ckpt['peak_bytes']):>14}",
             f"{'fraction of the peak left':<36}{model_ratio:>14.2f}{ratio:>14.2f}",
             f"{'extra forward work':<36}{model['extra_forward']:>14.2f}{extra:>14.2f}", ""]
    est = _parse_estimate(estimate)
    if est is None:
        lines.append("your estimate: none yet (the fraction of the peak that is left, e.g. 0.5)")
    else:
        lines.append(f"your estimate: {est:.2f}  (estimate / measured = {est / ratio:.2f})")
    lines.append("")
    lines.append("Why they differ: the model counts activations only, in units of one block's "
                 "output; the measurement also sees the input, the loss, the gradients "
                 "flowing back (one or two activations' worth at any time) and the weights' "
                 "gradients, which do not shrink with checkpointing. The extra work is the "
                 "forward of every checkpointed segment, run a second time in backward; the "
                 "last segment runs once.")
    return "\n".join(lines)


def plot_checkpoint_memory(rows: Sequence[dict]):
    """Peak bytes against the number of blocks, with and without √N checkpointing.
    ``rows``: ``{"n", "plain", "ckpt", "segments"}`` with measurements of
    :func:`measure_checkpointing`.  Returns the figure."""
    import matplotlib.pyplot as plt
    n = [r["n"] for r in rows]
    act = rows[0]["plain"]["activation_bytes"]
    fig, ax = plt.subplots(figsize=(6.2, 3.4))
    ax.plot(n, [r["plain"]["peak_bytes"] / 1e6 for r in rows], "o-", label="measured, no checkpointing")
    ax.plot(n, [r["ckpt"]["peak_bytes"] / 1e6 for r in rows], "o-", label="measured, √N segments")
    grid = np.linspace(min(n), max(n), 50)
    ax.plot(grid, grid * act / 1e6, ":", color="gray", label="N activations")
    ax.plot(grid, 2 * np.sqrt(grid) * act / 1e6, "--", color="gray", label="2√N activations")
    ax.set(xlabel="blocks N", ylabel="peak bytes (MB)",
           title="activation checkpointing: O(N) → O(√N)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def napkin_checkpoint(estimate=None, n_layers: int = 16, segments: int | None = None,
                      measured: tuple | None = None):
    """Predict the fraction of peak memory left when ``n_layers`` blocks are checkpointed
    in ``segments`` segments (default √N), then compare with the napkin model and with a
    measurement of mini (your checkpoint exercises).  Never blocks."""
    segments = segments or max(1, int(round(n_layers ** 0.5)))
    plain, ckpt = measured if measured is not None else (
        measure_checkpointing(n_layers, None), measure_checkpointing(n_layers, segments))
    return estimate_widget(
        f"<b>How much of the peak memory is left with {segments} checkpoint segments?</b><br>"
        f"{n_layers} blocks of Linear + Tanh (a fraction, e.g. 0.5)",
        lambda est: checkpoint_report(est, n_layers, segments, plain, ckpt),
        estimate=estimate, placeholder="a fraction, e.g. 0.5", enabled=widgets_enabled())


# --------------------------------------------------------------------------- communication

def plot_pingpong(sizes: Sequence[int], seconds: Sequence[float], alpha: float, beta: float):
    """One-way message time against size, measured (ping-pong) and the fitted α + n/β."""
    import matplotlib.pyplot as plt
    sizes = np.asarray(sizes, dtype=np.float64)
    fig, ax = plt.subplots(figsize=(6.2, 3.4))
    ax.loglog(sizes, np.asarray(seconds) * 1e6, "o", label="measured (half a round trip)")
    grid = np.geomspace(sizes.min(), sizes.max(), 60)
    ax.loglog(grid, (alpha + grid / beta) * 1e6, "-",
              label=f"α + n/β: α = {alpha * 1e6:.3g} µs, β = {beta / 1e9:.3g} GB/s")
    ax.set(xlabel="message size (bytes)", ylabel="one-way time (µs)",
           title="this machine's MPI: latency α, bandwidth β")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_allreduce(bench: dict, alpha: float, beta: float):
    """All-reduce time against size: the ring (yours), MPI_Allreduce, the ring's α-β model."""
    import matplotlib.pyplot as plt
    sizes = np.asarray(bench["sizes"], dtype=np.float64)
    p = bench["p"]
    fig, ax = plt.subplots(figsize=(6.2, 3.4))
    ax.loglog(sizes, np.asarray(bench["ring"]) * 1e3, "o-", label="your ring (send/recv)")
    ax.loglog(sizes, np.asarray(bench["mpi"]) * 1e3, "s-", label="MPI_Allreduce")
    grid = np.geomspace(sizes.min(), sizes.max(), 60)
    ax.loglog(grid, [scaling.ring_allreduce_time(n, p, alpha, beta) * 1e3 for n in grid], "--",
              color="gray", label="model 2(p-1)α + 2(p-1)/p · N/β")
    ax.set(xlabel="array size N (bytes)", ylabel="time (ms)",
           title=f"all-reduce on {p} ranks")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def ring_report(estimate, bench: dict, alpha: float, beta: float, nbytes: int) -> str:
    """The text of :func:`napkin_ring` for the largest size of ``bench``."""
    sizes = list(bench["sizes"])
    k = sizes.index(nbytes) if nbytes in sizes else len(sizes) - 1
    n, p = sizes[k], bench["p"]
    model = scaling.ring_allreduce_time(n, p, alpha, beta)
    ring, mpi = bench["ring"][k], bench["mpi"][k]
    latency = 2 * (p - 1) * alpha
    lines = [f"all-reduce of {_fmt_bytes(n)} (float32) on {p} ranks; α = "
             f"{alpha * 1e6:.3g} µs, β = {beta / 1e9:.3g} GB/s (ping-pong fit)", "",
             f"model 2(p-1)·α + 2(p-1)/p·N/β = {_fmt_seconds(latency)} + "
             f"{_fmt_seconds(model - latency)} = {_fmt_seconds(model)}",
             f"your ring, measured:     {_fmt_seconds(ring)}  (measured / model = "
             f"{ring / model:.2f})",
             f"MPI_Allreduce, measured: {_fmt_seconds(mpi)}  (your ring / MPI = {ring / mpi:.2f} "
             f"of its time, {mpi / ring:.2f}× its speed)"]
    est = _parse_estimate(estimate)
    if est is None:
        lines.append("your estimate: none yet (seconds, e.g. 0.01)")
    else:
        lines.append(f"your estimate: {_fmt_seconds(est)}  (estimate / measured = "
                     f"{est / ring:.2f})")
    lines += ["", "Why they differ: on one machine a \"message\" is a copy through shared "
                  "memory, so β is a memory bandwidth. The model counts the copies only; the "
                  "ring also adds every chunk it receives into its own (another pass over the "
                  "data) and allocates its receive buffer, and ranks that share a few cores "
                  "wait for each other to be scheduled. MPI_Allreduce picks its algorithm by "
                  "size: for small arrays one with fewer steps than 2(p-1), which is why it "
                  "wins where α dominates; for large ones a ring-like one, close to yours."]
    return "\n".join(lines)


def napkin_ring(estimate=None, bench: dict | None = None, alpha: float = 0.0,
                beta: float = 1.0, nbytes: int | None = None):
    """Predict the time of a ring all-reduce from α and β, then compare with the model and
    with your ring and MPI_Allreduce measured on this machine (``bench``: what
    :func:`mini.napkin.scaling.measure_allreduce` returned).  Never blocks."""
    if bench is None:
        raise ValueError("napkin_ring needs the measurement: bench = launch.run("
                         "scaling.measure_allreduce, 2).check().values[0]")
    nbytes = nbytes or bench["sizes"][-1]
    return estimate_widget(
        f"<b>How long does a ring all-reduce of {_fmt_bytes(nbytes)} take on "
        f"{bench['p']} ranks?</b><br>α = {alpha * 1e6:.3g} µs, β = {beta / 1e9:.3g} GB/s",
        lambda est: ring_report(est, bench, alpha, beta, nbytes),
        figure=lambda est: plot_allreduce(bench, alpha, beta),
        estimate=estimate, placeholder="seconds, e.g. 0.02", enabled=widgets_enabled())


# --------------------------------------------------------------------------- DDP timelines

def plot_bucket_timelines(timelines: dict, title: str = ""):
    """One row per bucket cap: when each bucket is ready (its last gradient), and when its
    all-reduce runs in the α-β model; the end of backward is the dashed line.
    ``timelines``: ``{label: bucket_timeline(...)}``.  Returns the figure."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7.2, 0.9 + 0.75 * len(timelines)))
    labels = list(timelines)
    end = 0.0
    for row, label in enumerate(labels):
        tl = timelines[label]
        y = len(labels) - 1 - row
        for (a, b), ready in zip(tl["spans"], tl["ready"]):
            ax.barh(y, (b - a) * 1e3, left=a * 1e3, height=0.5, color="#dd8452",
                    edgecolor="white")
            ax.plot([ready * 1e3], [y + 0.32], "v", color="#4c72b0", markersize=5)
        ax.barh(y, tl["backward_end"] * 1e3, left=0, height=0.12, color="#55a868")
        end = max(end, tl["spans"][-1][1] if tl["spans"] else 0.0, tl["backward_end"])
        ax.text(end * 1e3 * 1.01, y, f"exposed {_fmt_seconds(tl['exposed'])}", va="center",
                fontsize=7)
    ax.axvline(max(t["backward_end"] for t in timelines.values()) * 1e3, ls="--", color="gray")
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(list(reversed(labels)), fontsize=8)
    ax.set_xlabel("time since backward started (ms): green backward, orange all-reduces "
                  "(model), ▼ bucket ready", fontsize=8)
    ax.set_xlim(0, end * 1e3 * 1.25)
    ax.set_title(title or "bucket size vs overlap", fontsize=9)
    fig.tight_layout()
    return fig


def plot_pipeline(p: int, m: int):
    """GPipe's forward schedule for ``p`` stages and ``m`` micro-batches: busy slots numbered
    by micro-batch, idle slots (the bubble) grey.  Returns the figure."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle
    grid = scaling.pipeline_schedule(p, m)
    slots = len(grid[0])
    fig, ax = plt.subplots(figsize=(min(0.45 * slots + 1.5, 10), 0.45 * p + 0.9))
    cmap = plt.get_cmap("viridis")
    for stage, row in enumerate(grid):
        y = p - 1 - stage
        for slot, mb in enumerate(row):
            color = "#dddddd" if mb is None else cmap(0.15 + 0.7 * mb / max(m - 1, 1))
            ax.add_patch(Rectangle((slot, y), 0.95, 0.85, facecolor=color))
            if mb is not None:
                ax.text(slot + 0.47, y + 0.42, str(mb), ha="center", va="center", fontsize=7,
                        color="white")
    ax.set_xlim(0, slots)
    ax.set_ylim(0, p)
    ax.set_yticks([p - 1 - s + 0.42 for s in range(p)])
    ax.set_yticklabels([f"stage {s}" for s in range(p)], fontsize=8)
    ax.set_xticks([])
    ax.set_title(f"{p} stages, {m} micro-batches: idle {scaling.pipeline_bubble_fraction(p, m):.0%}"
                 f" = (p-1)/(m+p-1)", fontsize=9)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- ZeRO memory

def zero_memory_report(estimate, psi: int, p: int, plain: dict, zero: dict) -> str:
    """The text of :func:`napkin_zero_memory`: model and measurement, per rank."""
    m_plain = scaling.ddp_memory_per_rank(psi)
    m_zero = scaling.zero_memory_per_rank(psi, p, stage=1)
    lines = [f"Ψ = {psi:,} float32 parameters, AdamW, {p} ranks; bytes on one rank", "",
             f"{'':<14}{'DDP model':>14}{'measured':>14}{'ZeRO-1 model':>15}{'measured':>14}"]
    for key in ("weights", "gradients", "optimizer"):
        lines.append(f"{key:<14}{_fmt_bytes(m_plain[key]):>14}{_fmt_bytes(plain[key]):>14}"
                     f"{_fmt_bytes(m_zero[key]):>15}{_fmt_bytes(zero[key]):>14}")
    tp = sum(plain[k] for k in ("weights", "gradients", "optimizer"))
    tz = sum(zero[k] for k in ("weights", "gradients", "optimizer"))
    lines.append(f"{'total':<14}{_fmt_bytes(m_plain['total']):>14}{_fmt_bytes(tp):>14}"
                 f"{_fmt_bytes(m_zero['total']):>15}{_fmt_bytes(tz):>14}")
    est = _parse_estimate(estimate)
    lines.append("")
    if est is None:
        lines.append("your estimate: none yet (bytes per rank under ZeRO-1)")
    else:
        lines.append(f"your estimate: {_fmt_bytes(est)}  (estimate / measured = {est / tz:.2f})")
    lines += ["", f"ZeRO-1 saves {_fmt_bytes(tp - tz)} per rank ({1 - tz / tp:.0%}). Why model "
                  f"and measurement agree to within a shard's rounding: the state is exactly "
                  f"two float32 moments per element of this rank's shard, ⌈Ψ/p⌉ or ⌊Ψ/p⌋ "
                  f"elements. What ZeRO-1 does not touch: every rank still holds all weights "
                  f"and gradients, 8Ψ bytes (stages 2 and 3 shard those too)."]
    return "\n".join(lines)


def napkin_zero_memory(estimate=None, psi: int = 0, p: int = 2, plain: dict | None = None,
                       zero: dict | None = None):
    """Predict the bytes one rank holds under ZeRO-1 for Ψ float32 parameters and AdamW,
    then compare with the model and with the ranks' own count (``plain`` and ``zero``:
    what :func:`mini.napkin.scaling.measure_training_memory` returned on rank 0)."""
    if plain is None or zero is None:
        raise ValueError("napkin_zero_memory needs the measurements plain= and zero= "
                         "(scaling.measure_training_memory on the ranks)")
    return estimate_widget(
        f"<b>Bytes per rank with ZeRO-1?</b><br>Ψ = {psi:,} float32 parameters, AdamW, "
        f"{p} ranks",
        lambda est: zero_memory_report(est, psi, p, plain, zero),
        estimate=estimate, placeholder="bytes, e.g. 3e6 or 3 MB", enabled=widgets_enabled())
