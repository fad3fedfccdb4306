"""Napkin widget of chapter 02: how many bytes does an MLP's graph keep for backward?

The student commits to a number; the widget shows the model's count
(:func:`mini.napkin.autodiff.mlp_saved_bytes`, from shapes alone), the bytes mini's graph
actually holds (:func:`mini.autograd.graph.saved_tensor_bytes` on a real forward pass), the
ratio, and a plot of both against the batch size.

Never blocks: without a widget frontend (nbgrader autograde, nbclient, a plain Python
process, ``MINI_NO_WIDGETS=1``) it prints the same report as text.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from mini.napkin.autodiff import activation_crossover_batch, mlp_saved_breakdown
from mini.napkin.widgets import _parse_estimate, estimate_widget, widgets_enabled

__all__ = ["build_mlp", "saved_bytes", "measure_saved_bytes", "saved_bytes_report", "plot_saved_vs_batch",
           "napkin_saved_bytes", "DEFAULT_LAYERS", "DEFAULT_BATCHES"]

DEFAULT_LAYERS = (784, 128, 10)
DEFAULT_BATCHES = (1, 4, 16, 64, 256)


# --- the measurement ------------------------------------------------------------------------

def build_mlp(layer_sizes: Sequence[int] = DEFAULT_LAYERS, seed: int = 0, dtype: str = "float32"):
    """``Linear -> ReLU -> ... -> Linear`` as a callable ``model(x)``: mini.nn's layers
    (``x @ W.T + b``), with weights that require grad."""
    import mini
    from mini import nn
    mini.manual_seed(seed)
    sizes = [int(n) for n in layer_sizes]
    layers = []
    for i, (m, n) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(m, n, dtype=dtype))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def _walk_saved_bytes(tensor) -> int:
    """The same count as ``graph.saved_tensor_bytes``, by a walk that needs no exercise."""
    seen_nodes, buffers = set(), {}
    stack = [tensor.grad_fn] if tensor.grad_fn is not None else []
    while stack:
        node = stack.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        if not node._released and node._saved:
            for t in node._saved:
                if hasattr(t, "_data"):
                    buffers[id(t._data.storage)] = t._data.storage.nbytes
        stack.extend(child for child, _ in node.next_functions if child is not None)
    return sum(buffers.values())


def saved_bytes(tensor) -> int:
    """Bytes of the distinct buffers the graph behind ``tensor`` keeps for backward:
    ``graph.saved_tensor_bytes``, or the same count by a direct walk while that function
    cannot run yet (it orders the graph with exercise 02.toposort)."""
    from mini.autograd import graph
    try:
        return graph.saved_tensor_bytes(tensor)
    except NotImplementedError:
        return _walk_saved_bytes(tensor)


def measure_saved_bytes(layer_sizes: Sequence[int] = DEFAULT_LAYERS, batch: int = 32,
                        dtype: str = "float32", model=None) -> tuple[int, str]:
    """Run one forward pass of the MLP on a random batch and return ``(bytes, how)``: the
    bytes of the distinct buffers its graph saves for backward, and how they were counted."""
    import mini
    from mini.autograd import graph
    model = model if model is not None else build_mlp(layer_sizes, dtype=dtype)
    x = mini.randn(int(batch), int(layer_sizes[0]), dtype=dtype)
    out = model(x)
    try:
        return graph.saved_tensor_bytes(out), "mini.autograd.graph.saved_tensor_bytes"
    except NotImplementedError as e:
        slot = getattr(e, "slot_id", "02.toposort")
        return _walk_saved_bytes(out), (f"a direct walk of the graph (graph.saved_tensor_bytes "
                                        f"needs exercise {slot})")


# --- the report -----------------------------------------------------------------------------

def _fmt_bytes(n) -> str:
    n = int(n)
    if n >= 1_000_000:
        return f"{n:,} B ({n / 1e6:.2f} MB)"
    if n >= 1_000:
        return f"{n:,} B ({n / 1e3:.1f} kB)"
    return f"{n:,} B"


def _dtype_bytes(dtype: str) -> int:
    return np.dtype(str(dtype).replace("mini.", "")).itemsize


def _arch(layer_sizes) -> str:
    sizes = [int(n) for n in layer_sizes]
    parts = []
    for i, (m, n) in enumerate(zip(sizes[:-1], sizes[1:])):
        parts.append(f"Linear({m}, {n})")
        if i < len(sizes) - 2:
            parts.append("ReLU")
    return " -> ".join(parts)


def saved_bytes_report(estimate=None, layer_sizes: Sequence[int] = DEFAULT_LAYERS,
                       batch: int = 32, dtype: str = "float32", measured=None) -> str:
    """The text a student sees: the model's count by kind, the measurement, the ratios."""
    b = _dtype_bytes(dtype)
    parts = mlp_saved_breakdown(layer_sizes, batch, b)
    model = parts["total"]
    got, how = measured if measured is not None else measure_saved_bytes(layer_sizes, batch, dtype)
    sizes = [int(n) for n in layer_sizes]
    hidden = sizes[1:-1]
    lines = [f"model: {_arch(sizes)}, batch {batch}, {dtype} ({b} bytes per number)", ""]
    rows = [("input x, saved by the first matmul", f"{batch} x {sizes[0]} x {b}", parts["input"])]
    if hidden:
        expr = " + ".join(str(h) for h in hidden)
        rows.append(("hidden activations (ReLU in and out)",
                     f"2 x {batch} x ({expr}) x {b}" if len(hidden) > 1 else f"2 x {batch} x {expr} x {b}",
                     parts["activations"]))
    wexpr = " + ".join(f"{m}x{n}" for m, n in zip(sizes[:-1], sizes[1:]))
    rows.append(("weights, held by the matmuls", f"({wexpr}) x {b}", parts["weights"]))
    width = max(len(e) for _, e, _ in rows)
    for label, expr, value in rows:
        lines.append(f"  {label:<38}{expr:<{width}} = {value:>12,} B")
    lines.append("")
    lines.append(f"model:    {_fmt_bytes(model)}")
    lines.append(f"measured: {_fmt_bytes(got)}  (measured / model = "
                 f"{got / model:.2f}; counted by {how})")
    est = _parse_estimate(estimate)
    if est is None:
        lines.append("your estimate: none yet. Commit to a number first, then compare: "
                     "napkin_saved_bytes(estimate=...)")
    else:
        lines.append(f"your estimate: {_fmt_bytes(est)}  (estimate / model = {est / model:.2f})")
    lines.append("")
    cross = activation_crossover_batch(sizes)
    if got == model:
        why = ("Model and measurement agree to the byte: backward needs exactly these buffers "
               "and nothing else is kept. ")
    else:
        why = (f"The measurement differs from the model by {got - model:+,} B: something in "
               f"the graph saves a buffer the model does not count (or saves less). ")
    why += (f"The weights would live anyway; what backward adds is the activations, which "
            f"grow linearly with the batch. Here they outweigh the weights from a batch of "
            f"about {cross:.0f} on.")
    lines.append("Why: " + why)
    return "\n".join(lines)


def plot_saved_vs_batch(layer_sizes: Sequence[int] = DEFAULT_LAYERS,
                        batches: Sequence[int] = DEFAULT_BATCHES, dtype: str = "float32",
                        estimate=None, estimate_batch: int | None = None):
    """Saved bytes against batch size: the model's line (split into weights and
    activations) and mini's measurement at each batch.  Returns the figure."""
    import matplotlib.pyplot as plt
    b = _dtype_bytes(dtype)
    batches = [int(v) for v in batches]
    model = build_mlp(layer_sizes, dtype=dtype)
    measured = [measure_saved_bytes(layer_sizes, n, dtype, model=model)[0] for n in batches]
    grid = np.unique(np.geomspace(min(batches), max(batches), 60).astype(int))
    parts = [mlp_saved_breakdown(layer_sizes, int(n), b) for n in grid]
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    ax.plot(grid, [p["total"] / 1e6 for p in parts], label="model: total", color="#4c72b0")
    ax.plot(grid, [(p["input"] + p["activations"]) / 1e6 for p in parts], "--",
            label="model: activations (input included)", color="#55a868")
    ax.plot(grid, [p["weights"] / 1e6 for p in parts], ":", label="model: weights",
            color="#8172b2")
    ax.plot(batches, [m / 1e6 for m in measured], "o", label="measured (mini's graph)",
            color="#dd8452")
    est = _parse_estimate(estimate)
    if est is not None and estimate_batch is not None:
        ax.plot([estimate_batch], [est / 1e6], "x", markersize=10, color="black",
                label="your estimate")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("batch size")
    ax.set_ylabel("saved for backward (MB)")
    ax.set_title(f"{_arch(layer_sizes)}: what the graph keeps", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


# --- the widget -----------------------------------------------------------------------------

def napkin_saved_bytes(estimate=None, layer_sizes: Sequence[int] = DEFAULT_LAYERS,
                       batch: int = 32, dtype: str = "float32", plot: bool = True,
                       batches: Sequence[int] = DEFAULT_BATCHES):
    """Predict how many bytes the graph of one forward pass of an MLP keeps for backward,
    then compare with the model and with mini's own count.

    ``estimate``: your number of bytes (int, float, or text such as ``"2e6"`` or ``"2 MB"``);
    with a widget frontend you can also type it into the box.  Never blocks.
    """
    measured = measure_saved_bytes(layer_sizes, batch, dtype)

    return estimate_widget(
        f"<b>How many bytes does the graph keep for backward?</b><br>"
        f"<code>{_arch(layer_sizes)}</code>, batch {batch}, {dtype}",
        lambda est: saved_bytes_report(est, layer_sizes, batch, dtype, measured),
        figure=(lambda est: plot_saved_vs_batch(layer_sizes, batches, dtype, est, batch)) if plot else None,
        estimate=estimate, placeholder="your estimate in bytes, e.g. 5e5 or 0.5 MB",
        enabled=widgets_enabled())
