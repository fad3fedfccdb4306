"""Scenarios of chapter 04, CUDA part: a student's kernel run on mini's CUDA emulator with
every check on.

The worker calls the student's exercise function (which compiles its CUDA with
``load_inline`` and launches it) inside ``mini.cuda.emulator.check``, and sends back plain
data only: the result or the exception, the sanitizer's reports, each launch's kernel,
configuration, error and counters, and the CUDA source lines the reports point at (so the
trusted check can quote them and see where the barriers are).  Grading always uses the
emulator, also on a machine with a GPU: the sanitizer and the counters are the emulator's.
"""
from __future__ import annotations

_LAUNCH_FIELDS = ("launch", "kernel", "grid", "block", "error", "line", "counters")
_REPORT_FIELDS = ("kind", "what", "space", "kernel", "launch", "allocation", "allocation_bytes",
                  "index", "count", "detail", "message", "line")
_THREAD_FIELDS = ("block", "thread", "access", "file", "line", "source", "module")


def _plain_report(r: dict) -> dict:
    out = {k: r.get(k) for k in _REPORT_FIELDS}
    out["threads"] = [None if t is None else {k: t.get(k) for k in _THREAD_FIELDS}
                      for t in r.get("threads") or []]
    return out


def cuda_run(impl, *, args: list, kwargs: dict | None = None, schedules: int = 2) -> dict:
    """``impl(*args, **kwargs)`` on the emulator under ``schedules`` thread orders: what it
    returned (``value``) or raised (``raised``), the reports, the launches, and the source
    lines of the modules the reports name (``sources``: module -> lines of ``<cuda>``)."""
    from mini.backends.cuda import build, emulator
    # the emulator builds the student's module (load_inline plans it at the call), also where
    # a GPU is present; the process's setting comes back after (a notebook's own kernel)
    with build.emulated(), emulator.check(schedules=int(schedules)) as run:
        try:
            value, raised = impl(*args, **(kwargs or {})), None
        except NotImplementedError:
            raise                                # a stub: "not implemented"
        except Exception as e:  # noqa: BLE001 - recorded, the trusted side says what it was
            value, raised = None, e
    reports = [_plain_report(r) for r in run.reports]
    modules = {t["module"] for r in reports for t in r["threads"] if t and t.get("module")}
    return {
        "value": value,
        "raised": raised,
        "reports": reports,
        "launches": [{k: l.get(k) for k in _LAUNCH_FIELDS} for l in run.launches],
        "sources": {m: list(emulator.source_lines(m) or []) for m in sorted(modules)},
    }


SCENARIOS = {"cuda_run": cuda_run}
