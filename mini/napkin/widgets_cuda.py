"""Napkin widgets of chapter 04's CUDA part: predict, then see the model and the emulator's
counts for your own kernels side by side.

- :func:`napkin_matmul_reads`: floats read from global memory by your naive and tiled
  matrix products (model ``2·N³`` and ``2·N³/T``);
- :func:`napkin_sectors`: 32-byte sectors per warp-wide access when a warp walks a row and
  when it walks a column (model :func:`mini.napkin.cuda.sectors_per_request`), measured on
  the naive transpose mini hands out and on your tiled one;
- :func:`napkin_transfer`: the bytes your ``cuda_add`` copied between host and device
  (counted by the emulator) over PCIe, NVLink, and as HBM traffic.

Each takes ``estimate=``: a number, or your napkin function from the notebook (it is
called with the widget's sizes).  Without a widget frontend (autograding, ``MINI_NO_WIDGETS``)
the report is printed.  The measurements always run on mini's emulator (it counts; a GPU
does not), and need the exercise they measure: until then the report says which one.
"""
from __future__ import annotations

import numpy as np

from mini.napkin import cuda as model
from mini.napkin.widgets import _parse_estimate, _show_figure, estimate_widget, widgets_enabled

__all__ = ["napkin_matmul_reads", "napkin_sectors", "napkin_transfer", "pipeline_figure",
           "measure_matmul_reads", "measure_sectors", "measure_add_transfers"]


def _emulated():
    """Build and run on the emulator, even where a GPU is present (only it counts)."""
    from mini.backends.cuda import build
    return build.emulated()


def _not_done(e) -> str:
    slot = getattr(e, "slot_id", None)
    return f"finish exercise {slot} to measure your kernel" if slot else f"no measurement: {e}"


def _counters(slot: str, *args) -> tuple[dict | None, str]:
    """Run the active implementation of ``slot`` under the emulator's checks: (counters of
    all its launches, "") or (None, why not)."""
    from mini import exercises
    from mini.backends.cuda import emulator
    try:
        fn = exercises.active(slot)
        with _emulated(), emulator.check() as run:
            fn(*args)
    except NotImplementedError as e:
        return None, _not_done(e)
    except Exception as e:  # noqa: BLE001 - a broken kernel: the widget says so
        return None, f"your {slot} raised {type(e).__name__}: {e}"
    if not run.launches:
        return None, "no kernel launch was recorded"
    note = "" if run.ok else " (the sanitizer reported problems: print the run of your checks)"
    return run.counters(), note


def _estimate_value(estimate, *args, pick=None):
    """A number from ``estimate``: a number, text such as "2e6", or a function called with
    ``args`` (``pick`` chooses from what it returns)."""
    if callable(estimate):
        try:
            value = estimate(*args)
        except NotImplementedError:
            return None
        return float(pick(value) if pick else value)
    return _parse_estimate(estimate)


def _ratio(a, b) -> str:
    return "—" if a is None or not b else f"{a / b:.2f}"


def _num(x) -> str:
    return "—" if x is None else f"{x:,.0f}"


# --------------------------------------------------------------------------- matmul reads

def measure_matmul_reads(n: int = 32) -> dict:
    """Global loads of your naive and tiled matmuls on n x n float32 matrices."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    out = {}
    for name, slot in (("naive", "04.cuda_matmul_naive"), ("tiled", "04.cuda_matmul_tiled")):
        c, why = _counters(slot, a, b)
        out[name] = (c["global_loads"] if c else None, why)
    return out


def _matmul_report(estimate, n, tile, measured) -> str:
    naive_m = model.matmul_global_reads(n, n, n)
    tiled_m = model.matmul_global_reads(n, n, n, tile)
    est = _estimate_value(estimate, n, tile, pick=lambda v: v[1])
    est_naive = _estimate_value(estimate, n, tile, pick=lambda v: v[0]) if callable(estimate) else None
    lines = [f"Floats read from global memory for C = A @ B, N = {n}, tile T = {tile}:", "",
             f"{'kernel':<8}{'your estimate':>15}{'model':>12}{'emulator':>12}{'emulator/model':>16}"]
    for name, m, e in (("naive", naive_m, est_naive), ("tiled", tiled_m, est)):
        got, why = measured[name]
        lines.append(f"{name:<8}{_num(e):>15}{m:>12,}{_num(got):>12}{_ratio(got, m):>16}"
                     + (f"   ({why})" if why and got is None else ""))
    lines.append("")
    if est is None:
        lines.append("Your estimate: none yet (for the tiled kernel). Commit to a number, then compare.")
    else:
        lines.append(f"Your estimate / model (tiled): {_ratio(est, tiled_m)}")
    got_n, got_t = measured["naive"][0], measured["tiled"][0]
    if got_n is not None and got_t is not None and got_t:
        lines.append(f"Tiling cut the reads by {got_n / got_t:.1f}x (the model: T = {tile}).")
        if abs(got_t - tiled_m) > 0.01 * tiled_m:
            lines.append("Why they differ: your tiles are not T = 16 wide, or your kernel loads "
                         "tile elements more than once (or past the edges).  With other sizes "
                         "the model counts only the in-bounds elements of the last tiles.")
        else:
            lines.append("Why they agree: the emulator counts every load a thread makes; each "
                         "element of a tile is loaded once per block and then read T times "
                         "from shared memory, which is not global traffic.")
    return "\n".join(lines)


def napkin_matmul_reads(estimate=None, n: int = 32, tile: int = 16):
    """How many floats do the naive and the tiled matmul read from global memory?  The
    model next to the emulator's count of your kernels' loads.  ``estimate``: your number
    for the tiled kernel, or your ``matmul_global_reads(n, tile)``."""
    measured = measure_matmul_reads(n)
    return estimate_widget(
        f"<b>How many floats does the tiled kernel read from global memory</b> for "
        f"{n} x {n} matrices and {tile} x {tile} tiles? (The naive one: 2·N³.)",
        lambda est: _matmul_report(est, n, tile, measured),
        estimate=estimate, placeholder="floats, e.g. 8192", enabled=widgets_enabled())


# --------------------------------------------------------------------------- sectors

def measure_sectors(rows: int = 64, cols: int = 96) -> dict:
    """Sectors per warp-wide load and store request of the naive transpose (mini's, hands
    out) and of your tiled one."""
    from mini.backends.cuda import emulator, kernels
    from mini.backends.cuda.kernels import DeviceSession
    from mini.utils.cpp_extension import load_inline
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    out = {}
    with _emulated():
        ext = load_inline("transpose_naive", "", cuda_sources=kernels.source("transpose_naive"),
                          functions=["launch_transpose_naive"])
        with emulator.check() as run, DeviceSession() as dev:
            X, Y = dev.to_device(x), dev.empty((cols, rows))
            dev.check(ext.launch_transpose_naive(X, Y, rows, cols))
    c = run.counters()
    out["naive"] = (c["sectors_per_load_request"], c["sectors_per_store_request"], "")
    c, why = _counters("04.cuda_transpose_tiled", x)
    out["tiled"] = ((c["sectors_per_load_request"], c["sectors_per_store_request"], why) if c
                    else (None, None, why))
    return out


def _sectors_report(estimate, rows, measured) -> str:
    row_m, col_m = model.sectors_per_request(1), model.sectors_per_request(rows)
    est = _estimate_value(estimate, rows)
    n_load, n_store, _ = measured["naive"]
    t_load, t_store, why = measured["tiled"]
    f = lambda v: "—" if v is None else f"{v:.1f}"   # noqa: E731
    lines = [f"Sectors of 32 bytes per warp-wide request (32 threads, float32); a column walk "
             f"steps {rows} floats:", "",
             f"{'access':<42}{'model':>7}{'emulator':>10}",
             f"{'naive transpose: loads walk a row':<42}{row_m:>7}{f(n_load):>10}",
             f"{'naive transpose: stores walk a column':<42}{col_m:>7}{f(n_store):>10}",
             f"{'your tiled transpose: loads':<42}{row_m:>7}{f(t_load):>10}",
             f"{'your tiled transpose: stores':<42}{row_m:>7}{f(t_store):>10}"
             + (f"   ({why})" if t_load is None else ""), ""]
    if est is None:
        lines.append("Your estimate (a column walk): none yet. Commit to a number, then compare.")
    else:
        lines.append(f"Your estimate for a column walk: {est:g} sectors (estimate / model = {_ratio(est, col_m)})")
    lines.append(f"A column walk fetches {col_m * 32} bytes for 128 useful ones, {col_m / row_m:.0f}x the "
                 f"traffic of a row walk: the naive transpose moves {(col_m + row_m) / (2 * row_m):.1f}x the "
                 f"bytes of a copy.  Through a shared tile both directions walk rows.")
    return "\n".join(lines)


def napkin_sectors(estimate=None, rows: int = 64, cols: int = 96):
    """How many 32-byte sectors does a warp touch when its 32 threads write 32 floats down a
    column of the transpose of a ``rows`` x ``cols`` matrix (``rows`` floats apart)?
    ``estimate``: a number, or your ``sectors_per_request(stride)`` (called with that stride)."""
    measured = measure_sectors(rows, cols)
    return estimate_widget(
        f"<b>How many 32-byte sectors</b> does one warp-wide request touch when 32 threads write "
        f"32 floats down a column of the transposed {cols} x {rows} matrix, {rows} floats apart? "
        f"(Along a row: 4.)",
        lambda est: _sectors_report(est, rows, measured),
        estimate=estimate, placeholder="sectors, e.g. 8", enabled=widgets_enabled())


# --------------------------------------------------------------------------- transfers

def measure_add_transfers(n: int = 1 << 20) -> dict:
    """Bytes your ``cuda_add`` copies host -> device and device -> host for n floats, and
    the bytes its kernel reads and writes in device memory (emulator counts)."""
    from mini import exercises
    from mini.backends.cuda import emulator
    a = np.ones(n, np.float32)
    try:
        fn = exercises.active("04.cuda_add")
        with _emulated():
            fn(a[:4], a[:4])                      # builds it (a build is not a transfer)
            emulator.reset_transfer_stats()
            with emulator.check(races=False, initcheck=False) as run:
                fn(a, a)
            stats = emulator.transfer_stats()
    except NotImplementedError as e:
        return {"error": _not_done(e)}
    c = run.counters()
    return {"h2d": stats.get("h2d_bytes", 0), "d2h": stats.get("d2h_bytes", 0),
            "kernel": c["global_load_bytes"] + c["global_store_bytes"], "error": ""}


def _transfer_report(estimate, n, measured) -> str:
    lines = [f"Your cuda_add on {n:,} floats ({n * 4 / 1e6:.1f} MB per array):", ""]
    if measured.get("error"):
        lines.append(f"(no measurement: {measured['error']})")
        moved = 3 * n * 4
        kernel = 3 * n * 4
    else:
        moved = measured["h2d"] + measured["d2h"]
        kernel = measured["kernel"]
        lines.append(f"copied host -> device {measured['h2d']:,} B, device -> host "
                     f"{measured['d2h']:,} B (counted by the emulator); the kernel reads and "
                     f"writes {kernel:,} B of device memory")
    pcie = model.transfer_time(moved, model.LINKS["PCIe Gen5 x16"])
    lines += ["", f"{'path':<40}{'bandwidth':>14}{'time':>12}"]
    for name, bw in model.LINKS.items():
        what = "the copies" if name != "HBM3" else "the kernel's traffic"
        t = model.transfer_time(moved if name != "HBM3" else kernel, bw)
        lines.append(f"{name + ' (' + what + ')':<40}{bw / 1e9:>9,.0f} GB/s{t * 1e6:>9.1f} us")
    est = _estimate_value(estimate, moved, 64.0)
    if callable(estimate) and est is not None:
        est *= 1e6                                  # the napkin function answers in seconds
    lines.append("")
    if est is None:
        lines.append("Your estimate (PCIe, microseconds): none yet. Commit to a number, then compare.")
    else:
        lines.append(f"Your estimate over PCIe: {est:.1f} us (estimate / model = {_ratio(est, pcie * 1e6)})")
    hbm = model.transfer_time(kernel, model.LINKS["HBM3"])
    lines.append(f"The copies cost {pcie / hbm:.0f}x the kernel itself: an add on data that "
                 f"crosses PCIe for it is transfer-bound.  Keep tensors on the device between "
                 f"kernels; copy once, compute many times.")
    return "\n".join(lines)


def napkin_transfer(estimate=None, n: int = 1 << 20):
    """How long do your ``cuda_add``'s copies take over PCIe 5?  ``estimate``: microseconds,
    or your ``transfer_time(nbytes, gbs)`` (seconds)."""
    measured = measure_add_transfers(n)
    return estimate_widget(
        f"<b>How long do the copies of your cuda_add on {n:,} floats take over PCIe Gen5 x16</b> "
        f"(64 GB/s), in microseconds?",
        lambda est: _transfer_report(est, n, measured),
        estimate=estimate, placeholder="microseconds, e.g. 100", enabled=widgets_enabled())


# --------------------------------------------------------------------------- overlap

def pipeline_figure(t_copy: float, t_compute: float, batches: int):
    """Two timelines of ``batches`` batches: copies and kernels one after the other, and on
    two streams (the copy of batch i + 1 during the kernel of batch i)."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 2.6))
    rows = {"serial: copy": 3, "serial: kernel": 2, "streams: copy": 1, "streams: kernel": 0}
    t = 0.0
    for i in range(batches):
        ax.barh(rows["serial: copy"], t_copy, left=t, color="#4c72b0", edgecolor="white")
        t += t_copy
        ax.barh(rows["serial: kernel"], t_compute, left=t, color="#dd8452", edgecolor="white")
        t += t_compute
    serial = t
    copy_end = 0.0
    kernel_end = 0.0
    for i in range(batches):
        start = copy_end
        copy_end = start + t_copy
        ax.barh(rows["streams: copy"], t_copy, left=start, color="#4c72b0", edgecolor="white")
        k_start = max(copy_end, kernel_end)
        kernel_end = k_start + t_compute
        ax.barh(rows["streams: kernel"], t_compute, left=k_start, color="#dd8452", edgecolor="white")
    ax.set_yticks(list(rows.values()), list(rows.keys()))
    ax.set_xlabel("time")
    ax.set_title(f"{batches} batches: serial {serial:g}, overlapped {kernel_end:g} "
                 f"(model {model.pipeline_time(t_copy, t_compute, batches):g})")
    fig.tight_layout()
    return fig


def show_pipeline(t_copy: float, t_compute: float, batches: int) -> None:
    """Draw :func:`pipeline_figure` (in a notebook; elsewhere it is closed unseen)."""
    _show_figure(pipeline_figure(t_copy, t_compute, batches))
