"""Napkin-math widgets and pictures for the notebooks.

Every widget follows one pattern: the student commits to an estimate, then sees the
model's value next to a measurement of mini on this machine (running the student's
own code), with the ratio and a sentence on why they differ.

Widgets never block.  Without a widget frontend (nbgrader autograde, nbclient, a plain
Python process) they print the same content as text.  Set ``MINI_NO_WIDGETS=1`` to force
the printed form.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from mini.napkin import DEFAULT_CHAIN, StepCost, chain_costs, describe_step

__all__ = ["ChainMeasurement", "measure_chain", "chain_report", "napkin_chain",
           "estimate_widget", "show_views", "widgets_enabled"]

_NAMES = "xyzwvutsrqponmlkjihgfedcba"


# --- measurement ----------------------------------------------------------------------------

@dataclass
class ChainMeasurement:
    """What mini actually allocated for each step (``None`` where it could not run)."""
    bytes: list = field(default_factory=list)      # per step, bytes allocated
    strides: list = field(default_factory=list)    # per step, strides mini chose
    values_match: bool | None = None               # final values equal numpy's
    error: str | None = None                       # why the measurement stopped

    @property
    def total(self) -> int | None:
        return None if self.error else sum(self.bytes)


def _apply_mini(a, step):
    kind = step[0]
    if kind == "T":
        return a.permute(tuple(reversed(range(a.ndim))))
    if kind == "permute":
        return a.permute(tuple(int(x) for x in step[1]))
    if kind == "getitem":
        return a[step[1]]
    if kind == "expand":
        return a.broadcast_to(tuple(int(d) for d in step[1]))
    if kind == "reshape":
        return a.reshape(tuple(int(d) for d in step[1]))
    if kind == "contiguous":
        return a.compact()
    raise ValueError(f"unknown step {step!r}")


def _apply_numpy(a: np.ndarray, step) -> np.ndarray:
    kind = step[0]
    if kind == "T":
        return a.T
    if kind == "permute":
        return a.transpose(tuple(int(x) for x in step[1]))
    if kind == "getitem":
        return a[step[1]]
    if kind == "expand":
        return np.broadcast_to(a, tuple(int(d) for d in step[1]))
    if kind == "reshape":
        return a.reshape(tuple(int(d) for d in step[1]))
    if kind == "contiguous":
        return np.ascontiguousarray(a)
    raise ValueError(f"unknown step {step!r}")


def measure_chain(shape: Sequence[int] = (1000, 1000), steps: Sequence[tuple] = DEFAULT_CHAIN,
                  dtype: str = "float32", device=None) -> ChainMeasurement:
    """Run the chain on mini's NDArray (whatever implementation is registered in the
    chapter 03 slots) and count the bytes each step allocates."""
    from mini.ndarray import NDArray, track_allocations

    result = ChainMeasurement()
    ref = np.arange(int(np.prod(shape)), dtype=dtype).reshape(tuple(shape))
    try:
        a = NDArray.from_numpy(ref, device=device)
        for step in steps:
            with track_allocations() as stats:
                a = _apply_mini(a, step)
            result.bytes.append(stats.bytes)
            result.strides.append(tuple(a.strides))
            ref = _apply_numpy(ref, step)
        got = a.numpy()
        result.values_match = bool(got.shape == ref.shape and np.array_equal(got, ref))
    except NotImplementedError as e:  # an exercise not done yet
        slot = getattr(e, "slot_id", None)
        result.error = (f"finish exercise {slot} to measure this chain" if slot
                        else f"an exercise is not finished yet ({e})")
    except Exception as e:  # a student's bug: report it, never crash the notebook
        result.error = f"mini raised {type(e).__name__}: {e}"
    return result


# --- the report -------------------------------------------------------------------------------

def _chain_code(shape, steps, dtype) -> list[str]:
    dims = "×".join(str(int(d)) for d in shape)
    lines = [f"x = a {dims} {dtype} array"]
    for i, step in enumerate(steps):
        lines.append(f"{_NAMES[i + 1]} = {_NAMES[i]}{describe_step(step)}")
    return lines


def _fmt_bytes(n) -> str:
    if n is None:
        return "—"
    n = int(n)
    if n >= 1_000_000:
        return f"{n:,} B ({n / 1e6:.2f} MB)"
    return f"{n:,} B"


def _parse_estimate(value) -> float | None:
    if value is None:
        return None
    if isinstance(value, (int, float, np.integer, np.floating)):
        return float(value)
    text = str(value).strip().replace(",", "").replace("_", "").replace(" ", "")
    if not text:
        return None
    for suffix, mult in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3), ("kB", 1e3), ("B", 1)):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * mult
    return float(text)


def _why(model: list[StepCost], meas: ChainMeasurement, names: list[str]) -> str:
    if meas.error:
        return f"No measurement yet: {meas.error}."
    for i, (m, got) in enumerate(zip(model, meas.bytes)):
        if got != m.bytes:
            step = f"{names[i + 1]} = {names[i]}{m.label}"
            if got > m.bytes:
                return (f"At `{step}` your mini allocated {got:,} B where the model expects "
                        f"{m.bytes:,} B: it copied although new strides could express the "
                        f"result as a view (look at 03.reshape, or at what 03.compact returns).")
            return (f"At `{step}` your mini allocated {got:,} B where the model expects "
                    f"{m.bytes:,} B: it made a view where the elements are not evenly spaced "
                    f"in memory, so no strides can describe them (look at 03.reshape).")
    if meas.values_match is False:
        return ("The byte counts agree with the model but the final values differ from "
                "numpy's: some strides or offsets are wrong (rerun the checks above).")
    copies = [f"`{names[i + 1]} = {names[i]}{m.label}`" for i, m in enumerate(model) if not m.is_view]
    if not copies:
        return ("Every step was a view: only shape, strides and offset changed, so no data "
                "moved and nothing was allocated.")
    return ("Only " + ", ".join(copies) + " allocated: a view just rewrites shape, strides and "
            "offset, but there the elements were no longer one evenly spaced run of memory, so "
            "they had to be gathered into a new buffer (numel × itemsize bytes).")


def _estimate_why(est: float, model: list[StepCost], initial: int, names: list[str]) -> str:
    """One sentence on what the student's estimate most likely counted."""
    total = sum(m.bytes for m in model)

    def near(a, b):
        return abs(a - b) <= 0.02 * max(abs(b), 1)
    if near(est, total):
        return "That is the model's count: you told the views from the copies."
    if near(est, total + initial):
        return (f"That is the model plus {names[0]} itself ({initial:,} B): the chain counts only "
                f"what its steps allocate.")
    if total and est == 0:
        return "You counted every step as a view, but some step here has to copy."
    if total and any(near(est, total * k) for k in (2, 3, 4)):
        return ("A multiple of the model: did you count a copy for a step that is a view "
                "(a transpose, a slice, a reshape whose strides exist)?")
    if est > total:
        return ("Above the model: some step you counted as a copy is a view (only shape, "
                "strides and offset change).")
    return ("Below the model: some step you counted as a view has to copy (its elements are "
            "no longer one evenly spaced run of memory).")


def chain_report(estimate=None, shape=(1000, 1000), steps=DEFAULT_CHAIN, dtype="float32",
                 model=None, measurement=None) -> str:
    """The text a student sees: the chain, per-step model vs measured bytes, totals, ratios."""
    itemsize = np.dtype(dtype).itemsize
    model = model if model is not None else chain_costs(shape, steps, itemsize)
    meas = measurement if measurement is not None else measure_chain(shape, steps, dtype)
    names = list(_NAMES[: len(steps) + 1])
    code = _chain_code(shape, steps, dtype)
    total_model = sum(m.bytes for m in model)
    est = _parse_estimate(estimate)

    lines = ["Chain:", *("    " + c for c in code), ""]
    labels = [f"{names[i + 1]} = {names[i]}{m.label}" for i, m in enumerate(model)]
    w_step = max([len("step")] + [len(s) for s in labels]) + 2
    w_shape = max([len("shape")] + [len(str(m.shape)) for m in model]) + 2
    header = f"{'step':<{w_step}}{'shape':<{w_shape}}{'view?':<8}{'model':>14}{'measured':>14}"
    lines += [header, "-" * len(header)]
    for i, m in enumerate(model):
        got = meas.bytes[i] if i < len(meas.bytes) else None
        lines.append(f"{labels[i]:<{w_step}}{str(m.shape):<{w_shape}}"
                     f"{'view' if m.is_view else 'copy':<8}{m.bytes:>14,}"
                     f"{'—' if got is None else format(got, ','):>14}")
    lines.append("")
    initial = int(np.prod(shape)) * itemsize
    lines.append(f"(counted: what the steps allocate; {names[0]} itself, {initial:,} B, existed "
                 f"before the chain and is not counted)")
    lines.append(f"model:    {_fmt_bytes(total_model)}")
    if meas.error:
        lines.append(f"measured: — ({meas.error})")
    else:
        ratio = "—" if total_model == 0 else f"{meas.total / total_model:.2f}"
        match = {True: "yes", False: "NO", None: "—"}[meas.values_match]
        lines.append(f"measured: {_fmt_bytes(meas.total)} on your mini "
                     f"(measured / model = {ratio}; values match numpy: {match})")
    if est is None:
        lines.append("your estimate: none yet. Commit to a number first, then compare: "
                     "napkin_chain(estimate=...)")
    else:
        ratio = "—" if total_model == 0 else f"{est / total_model:.2f}"
        lines.append(f"your estimate: {_fmt_bytes(est)} (estimate / model = {ratio})")
        lines.append("  " + _estimate_why(est, model, initial, names))
    lines.append("")
    lines.append("Why: " + _why(model, meas, names))
    return "\n".join(lines)


def _bar_chart(model: list[StepCost], meas: ChainMeasurement, names: list[str]):
    import matplotlib.pyplot as plt

    labels = [f"{names[i + 1]} = {names[i]}{m.label}" for i, m in enumerate(model)]
    x = np.arange(len(model))
    fig, ax = plt.subplots(figsize=(7, 2.8))
    ax.bar(x - 0.2, [m.bytes / 1e6 for m in model], width=0.4, label="model", color="#4c72b0")
    if not meas.error:
        ax.bar(x + 0.2, [b / 1e6 for b in meas.bytes], width=0.4, label="measured (your mini)",
               color="#dd8452")
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_ylabel("MB allocated")
    ax.set_title("Bytes allocated per step: views are free, copies cost numel × itemsize")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _show_figure(fig) -> None:
    import matplotlib.pyplot as plt
    try:
        from IPython.display import display
        from IPython import get_ipython
        if get_ipython() is not None:
            display(fig)
    except ImportError:  # pragma: no cover - IPython comes with Jupyter
        pass
    plt.close(fig)


# --- the widget -----------------------------------------------------------------------------

def widgets_enabled() -> bool:
    """True when an interactive widget can be shown: inside a Jupyter kernel, with
    ipywidgets installed, and not under autograding or ``MINI_NO_WIDGETS``."""
    if os.environ.get("NBGRADER_EXECUTION") or os.environ.get("MINI_NO_WIDGETS"):
        return False
    try:
        from IPython import get_ipython
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None


def napkin_chain(estimate=None, shape=(1000, 1000), steps=DEFAULT_CHAIN, dtype="float32",
                 plot: bool = True):
    """Predict the bytes a chain of view / reshape / contiguous steps allocates, then
    compare with the model and with mini's allocation counter on your implementation.

    ``estimate``: your number of bytes (int, float, or text such as ``"2e6"`` or ``"2 MB"``).
    With a widget frontend you can also type it into the box.  Never blocks.
    """
    shape = tuple(int(d) for d in shape)
    steps = tuple(steps)
    itemsize = np.dtype(dtype).itemsize
    model = chain_costs(shape, steps, itemsize)
    meas = measure_chain(shape, steps, dtype)
    names = list(_NAMES[: len(steps) + 1])

    code = "<br>".join(f"<code>{c}</code>" for c in _chain_code(shape, steps, dtype))
    return estimate_widget(
        f"<b>How many bytes does this chain allocate?</b><br>{code}",
        lambda est: chain_report(est, shape, steps, dtype, model, meas),
        figure=(lambda est: _bar_chart(model, meas, names)) if plot else None,
        estimate=estimate, placeholder="your estimate in bytes, e.g. 1e6 or 3 MB",
        enabled=widgets_enabled())


def estimate_widget(question_html: str, report, figure=None, estimate=None,
                    placeholder: str = "your estimate in bytes", enabled: bool | None = None):
    """The plumbing every napkin widget shares: a question, an estimate box and a Compare
    button that shows ``report(estimate)`` (and ``figure(estimate)``, a matplotlib figure,
    when given) below them.

    Without a widget frontend (``enabled`` false; by default :func:`widgets_enabled`) it
    prints the report and shows the figure instead.  The widget's plain-text form is the
    report for the ``estimate`` given, so a frontend without widgets shows the same text.
    ``report`` and ``figure`` receive the raw ``estimate`` when called for it, otherwise the
    number read from the box.  Never blocks; returns None.
    """
    if enabled is None:
        enabled = widgets_enabled()
    if not enabled:
        print(report(estimate))
        if figure is not None:
            _show_figure(figure(estimate))
        return None

    import ipywidgets as W
    from IPython.display import display

    intro = W.HTML(question_html)
    box = W.Text(value="" if estimate is None else str(estimate), placeholder=placeholder,
                 description="estimate:", layout=W.Layout(width="360px"))
    button = W.Button(description="Compare", button_style="primary")
    out = W.Output()

    def show(_=None):
        out.clear_output()
        with out:
            try:
                est = _parse_estimate(box.value)
            except ValueError:
                print(f"could not read {box.value!r} as a number of bytes")
                return
            if est is None:
                print("Type your estimate first, then press Compare.")
                return
            print(report(est))
            if figure is not None:
                _show_figure(figure(est))

    button.on_click(show)
    ui = _TextFallbackBox([intro, W.HBox([box, button]), out], fallback_text=report(estimate))
    if estimate is not None:
        show()
    display(ui)
    return None


def _make_fallback_box():
    import ipywidgets as W

    class TextFallbackBox(W.VBox):
        """A VBox whose plain-text form is the printed report, so a frontend without
        widgets (nbclient, nbconvert, a terminal) shows the same content as text."""

        def __init__(self, children, fallback_text: str = "", **kwargs):
            super().__init__(children, **kwargs)
            self._fallback_text = fallback_text

        def _repr_mimebundle_(self, **kwargs):
            bundle = super()._repr_mimebundle_(**kwargs)
            if isinstance(bundle, dict):
                bundle["text/plain"] = self._fallback_text
            return bundle

    return TextFallbackBox


class _LazyBox:
    _cls = None

    def __call__(self, *args, **kwargs):
        if _LazyBox._cls is None:
            _LazyBox._cls = _make_fallback_box()
        return _LazyBox._cls(*args, **kwargs)


_TextFallbackBox = _LazyBox()


# --- pictures -------------------------------------------------------------------------------

def _layout_of(view):
    """(buffer_size, shape, strides, offset) of an NDArray, a mini Tensor or a tuple."""
    if hasattr(view, "_data") and hasattr(view._data, "storage"):  # a mini Tensor
        view = view._data
    if hasattr(view, "storage") and hasattr(view, "strides"):      # an NDArray
        return view.storage.data.size, tuple(view.shape), tuple(view.strides), int(view.offset)
    buffer_size, shape, strides, offset = view
    return int(buffer_size), tuple(shape), tuple(strides), int(offset)


def show_views(views: dict, title: str | None = None, max_cells: int = 48):
    """Draw the flat buffer once per view and mark the elements each view reads.

    ``views`` maps a label to an NDArray, a mini Tensor, or a tuple
    ``(buffer_size, shape, strides, offset)``.  Each touched cell shows the order in
    which the view visits it (row-major order of the view); a cell visited several
    times (stride 0) shows how many times.  Returns the matplotlib figure.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    rows = []
    for label, v in views.items():
        size, shape, strides, offset = _layout_of(v)
        n = int(np.prod(shape)) if shape else 1
        visits = {}
        if n:
            positions = np.lib.stride_tricks.as_strided(
                np.arange(size, dtype=np.int64)[offset:], shape,
                tuple(s * 8 for s in strides)).reshape(-1)
            for k, p in enumerate(positions.tolist()):
                visits.setdefault(p, []).append(k)
        rows.append((label, size, shape, strides, offset, visits))

    width = min(max(r[1] for r in rows), max_cells)
    fig, ax = plt.subplots(figsize=(max(6, 0.32 * width + 2.5), 0.62 * len(rows) + 0.9))
    cmap = plt.get_cmap("viridis")
    for r, (label, size, shape, strides, offset, visits) in enumerate(rows):
        y = len(rows) - 1 - r
        n_visits = sum(len(v) for v in visits.values()) or 1
        for p in range(min(size, width)):
            ks = visits.get(p)
            color = "#e8e8e8" if ks is None else cmap(0.15 + 0.7 * ks[0] / max(n_visits - 1, 1))
            ax.add_patch(Rectangle((p, y), 0.95, 0.8, facecolor=color, edgecolor="white"))
            if ks is not None:
                text = str(ks[0]) if len(ks) == 1 else f"×{len(ks)}"
                ax.text(p + 0.47, y + 0.4, text, ha="center", va="center", fontsize=7,
                        color="white")
        ax.text(-0.5, y + 0.4, f"{label}\nshape {shape} strides {strides} offset {offset}",
                ha="right", va="center", fontsize=8)
    for p in range(width):
        ax.text(p + 0.47, len(rows) + 0.05, str(p), ha="center", va="bottom", fontsize=6,
                color="#666666")
    ax.set_xlim(-0.2, width + 0.2)
    ax.set_ylim(-0.2, len(rows) + 0.5)
    ax.axis("off")
    ax.set_title(title or "flat buffer (positions on top); coloured: read by the view, "
                 "number: reading order", fontsize=9, loc="right")
    fig.tight_layout()
    return fig
