"""mini's CUDA emulator from Python: options, reports and counters.

Every kernel launch of an emulated module leaves a *launch record*: the kernel, its
grid and block, the error it ended with, counters of its memory traffic, and the
sanitizer's reports.  Python collects them after each call into a module built by
``load_inline(..., cuda_sources=...)``:

- inside ``with check() as run:`` they go to ``run`` (a :class:`KernelCheck`), silently::

      with mini.cuda.emulator.check(schedules=3) as run:
          ext.matmul(a, b)
      run.ok, run.reports, run.counters("matmul")
      print(run)                     # a readable summary

- outside, reports become a :class:`CudaSanitizerWarning`, and the records stay available
  through :func:`last_launches`.

A report is a dict: ``kind`` (race, out_of_bounds, uninitialized_read,
barrier_divergence, shuffle_mask, invalid_address, schedule_dependent, launch_error,
api_error, host_access, assert), ``what``, ``kernel``, ``line`` (in your source),
``threads`` (block, thread, access and line of each thread involved), ``allocation``,
``index``, ``count`` and ``message``, one readable paragraph.
"""
from __future__ import annotations

import collections
import contextlib
import ctypes
import functools
import json
import re
import shutil
import subprocess
import threading
import types
import warnings

from mini.backends.cuda import build

__all__ = ["check", "KernelCheck", "CudaSanitizerWarning", "set_options", "get_options",
           "last_launches", "last_launch", "transfer_stats", "reset_transfer_stats", "library",
           "collect", "KINDS", "COUNTERS", "source_lines", "CudaSanitizerError"]

#: Every kind of report, with a short description.
KINDS = {
    "race": "two threads touch the same bytes between the same barriers, one writes, not both atomic",
    "out_of_bounds": "an access outside an allocation or a __shared__ variable",
    "invalid_address": "an access to memory that is no device memory at all (the launch stops)",
    "uninitialized_read": "a read of memory nothing wrote",
    "barrier_divergence": "a __syncthreads() that not every thread of the block reaches",
    "shuffle_mask": "a warp operation whose mask and participating lanes disagree",
    "schedule_dependent": "a result that changes with the order threads run in",
    "launch_error": "a launch that could not run (configuration, resources)",
    "api_error": "a CUDA runtime call used wrongly (copy direction, sizes, frees)",
    "host_access": "host code touching device memory directly",
    "assert": "a failed assert() in a kernel",
}

#: The counters of a launch (a checked module's; unchecked launches count zeros).
COUNTERS = ("global_loads", "global_stores", "global_load_bytes", "global_store_bytes",
            "global_load_requests", "global_store_requests", "global_load_sectors",
            "global_store_sectors", "shared_loads", "shared_stores", "shared_load_requests",
            "shared_store_requests", "shared_wavefronts", "shared_bank_conflicts", "atomics",
            "barriers", "warp_ops", "threads", "blocks")

_OPTION_NAMES = ("races", "memcheck", "initcheck", "synccheck", "counters", "max_reports")
_lock = threading.RLock()
_LIB: list = []
_SOURCES: dict[str, dict[str, list[str]]] = {}   # module path -> file label -> lines
_ACTIVE: list["KernelCheck"] = []
_LAST: collections.deque = collections.deque(maxlen=100)


class CudaSanitizerWarning(UserWarning):
    """The emulator found a problem in a kernel launch (outside ``check()``)."""


class CudaSanitizerError(AssertionError):
    """Raised by :meth:`KernelCheck.assert_clean` when the sanitizer found a problem."""


# --------------------------------------------------------------------------- the library

def library() -> ctypes.CDLL:
    """The emulator's runtime library (built on first use), loaded once per process."""
    with _lock:
        if not _LIB:
            # RTLD_LOCAL: its cudaMalloc & co. must never stand in for a real libcudart
            # that another library (PyTorch on a GPU machine) loads into this process
            lib = ctypes.CDLL(str(build.runtime_library()), mode=ctypes.RTLD_LOCAL)
            lib.mini_cuda_take_json.restype = ctypes.c_char_p
            lib.mini_cuda_stats_json.restype = ctypes.c_char_p
            lib.mini_cuda_set_option.argtypes = [ctypes.c_char_p, ctypes.c_longlong]
            lib.mini_cuda_get_option.argtypes = [ctypes.c_char_p]
            lib.mini_cuda_get_option.restype = ctypes.c_longlong
            lib.mini_cuda_set_schedules.argtypes = [ctypes.POINTER(ctypes.c_int),
                                                    ctypes.POINTER(ctypes.c_ulonglong), ctypes.c_int]
            lib.mini_cuda_name_allocation.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
            lib.mini_cuda_count_transfer.argtypes = [ctypes.c_int, ctypes.c_ulonglong]
            _LIB.append(lib)
        return _LIB[0]


# --------------------------------------------------------------------------- options

def _schedule_list(schedules, seed: int = 0) -> list[tuple[int, int]]:
    """``1`` -> forward; ``2`` -> forward, reverse; ``n`` -> forward, reverse and n - 2
    seeded shuffles; or a list of "forward", "reverse", "shuffled:SEED"."""
    if isinstance(schedules, int):
        if schedules < 1:
            raise ValueError(f"schedules must be at least 1, got {schedules}")
        out = [(0, 0), (1, 0)][:schedules]
        out += [(2, seed + i) for i in range(schedules - 2)]
        return out
    out = []
    for s in schedules:
        if isinstance(s, tuple):
            name, value = s
        else:
            name, _, value = str(s).partition(":")
        name = name.strip().lower()
        if name == "forward":
            out.append((0, 0))
        elif name == "reverse":
            out.append((1, 0))
        elif name in ("shuffled", "shuffle"):
            out.append((2, int(value or seed)))
        else:
            raise ValueError(f"unknown schedule {s!r}: use 'forward', 'reverse' or 'shuffled:SEED'")
    if not out:
        raise ValueError("schedules is empty")
    return out


def get_options() -> dict:
    """The emulator's current options (see :func:`set_options`)."""
    lib = library()
    return {n: (int(lib.mini_cuda_get_option(n.encode())) if n == "max_reports"
                else bool(lib.mini_cuda_get_option(n.encode()))) for n in _OPTION_NAMES}


def set_options(races=None, memcheck=None, initcheck=None, synccheck=None, counters=None,
                max_reports=None, schedules=None, seed: int = 0) -> None:
    """Set what checked launches check: ``races``, ``memcheck`` (bounds and addresses),
    ``initcheck`` (uninitialised reads), ``synccheck`` (barriers and warp masks),
    ``counters``, ``max_reports`` (distinct reports kept per launch) and ``schedules``
    (see :func:`check`).  None leaves an option as it is."""
    lib = library()
    values = dict(races=races, memcheck=memcheck, initcheck=initcheck, synccheck=synccheck,
                  counters=counters, max_reports=max_reports)
    for name, value in values.items():
        if value is not None:
            lib.mini_cuda_set_option(name.encode(), int(value))
    if schedules is not None:
        sched = _schedule_list(schedules, seed)
        kinds = (ctypes.c_int * len(sched))(*[k for k, _ in sched])
        seeds = (ctypes.c_ulonglong * len(sched))(*[s for _, s in sched])
        lib.mini_cuda_set_schedules(kinds, seeds, len(sched))


# --------------------------------------------------------------------------- symbolization

@functools.lru_cache(maxsize=None)
def _symbolizer() -> list[str] | None:
    if shutil.which("addr2line"):
        return ["addr2line", "-a", "-f", "-i", "-C", "-e"]
    if shutil.which("llvm-addr2line"):
        return ["llvm-addr2line", "-a", "-f", "-i", "-C", "-e"]
    return None


_LINES: dict[tuple[str, int], tuple[str, int, str]] = {}


def _resolve_sites(sites: set[tuple[str, int]]) -> None:
    """Look up (module, offset) -> (file, line, function) for sites not seen before."""
    todo = collections.defaultdict(list)
    for module, offset in sites:
        if (module, offset) not in _LINES:
            todo[module].append(offset)
    tool = _symbolizer()
    for module, offsets in todo.items():
        results = {}
        if tool:
            # an offset is a return address: the instruction before it is the access
            args = [f"{max(o - 1, 0):#x}" for o in offsets]
            try:
                out = subprocess.run(tool + [module] + args, capture_output=True, text=True,
                                     timeout=60).stdout
            except (OSError, subprocess.SubprocessError):
                out = ""
            frames: list[list[tuple[str, str]]] = []
            lines = out.splitlines()
            i = 0
            while i < len(lines):
                if lines[i].startswith("0x"):
                    frames.append([])
                    i += 1
                    continue
                if frames and i + 1 < len(lines):
                    frames[-1].append((lines[i], lines[i + 1]))
                i += 2
            for o, fr in zip(offsets, frames):
                results[o] = _pick_frame(fr)
        for o in offsets:
            _LINES[(module, o)] = results.get(o, ("", 0, ""))


def _pick_frame(frames: list[tuple[str, str]]) -> tuple[str, int, str]:
    """The innermost frame in the student's sources (inlined helpers of the emulator's
    header point at the line that called them)."""
    parsed = []
    for func, loc in frames:
        m = re.match(r"(.*):(\d+)", loc.split(" (")[0])
        if m:
            parsed.append((m.group(1), int(m.group(2)), func))
    for file, line, func in parsed:
        if file.endswith(build.CUDA_FILE) or file.endswith("<cell>"):
            return (build.CUDA_FILE if file.endswith(build.CUDA_FILE) else "<cell>", line, func)
    return parsed[0] if parsed else ("", 0, "")


# --------------------------------------------------------------------------- reports

def _fmt_dim(v, dims) -> str:
    v = tuple(v)
    if dims is not None and tuple(dims)[1:] == (1, 1) and v[1:] == (0, 0):
        return str(v[0])
    return "(" + ", ".join(str(x) for x in v) + ")"


def _thread(t, launch) -> dict | None:
    if t is None:
        return None
    out = {"block": tuple(t["block"]) if "block" in t else None,
           "thread": tuple(t["thread"]) if "thread" in t else None,
           "access": t.get("access", ""), "file": "", "line": 0, "source": "", "function": "",
           "module": ""}
    site = t.get("site")
    if site:
        file, line, func = _LINES.get((site["module"], site["offset"]), ("", 0, ""))
        out.update(file=file, line=line, function=func, module=str(site["module"]))
        lines = _SOURCES.get(site["module"], {}).get(file)
        if lines and 0 < line <= len(lines):
            out["source"] = lines[line - 1].strip()
    return out


def source_lines(module: str, file: str = "") -> list[str] | None:
    """The lines of source ``file`` (``<cuda>`` by default, or ``<cell>``) of the module
    built at path ``module``, as ``load_inline`` received them (None if unknown)."""
    files = _SOURCES.get(str(module))
    if not files:
        return None
    return files.get(file or build.CUDA_FILE)


def _who(t, launch) -> str:
    if t is None or t["thread"] is None:
        return "host code"
    block = launch["block"] if launch else None
    grid = launch["grid"] if launch else None
    return f"thread {_fmt_dim(t['thread'], block)} of block {_fmt_dim(t['block'], grid)}"


def _at(t) -> str:
    if t is None or not t["line"]:
        return ""
    where = f"line {t['line']}" if t["file"] in (build.CUDA_FILE, "") else f"{t['file']} line {t['line']}"
    return f" at {where}" + (f" ({t['source']})" if t["source"] else "")


def _element(rep) -> str:
    name = rep["allocation"] or "memory"
    return f"{name}[{rep['index']}]" if rep["index"] is not None and rep["index"] >= 0 else name


def _message(rep, launch) -> str:
    kind, a, b = rep["kind"], rep["threads"][0], rep["threads"][1]
    kernel = f" in kernel {rep['kernel']}" if rep["kernel"] else ""
    times = f" ({rep['count']} times)" if rep["count"] > 1 else ""
    verb = {"read": "reads", "write": "writes", "atomic": "updates (atomically)"}
    if kind == "race":
        return (f"data race ({rep['what']}) on {rep['space']} memory {_element(rep)}{kernel}: "
                f"{_who(a, launch)} {verb.get(a['access'], a['access'])} it{_at(a)}, and "
                f"{_who(b, launch)} {verb.get(b['access'], b['access'])} it{_at(b)}, with no "
                f"__syncthreads() between them{times}; {rep['detail']}")
    if kind == "out_of_bounds":
        return (f"out-of-bounds {rep['what']} of {rep['space']} memory{kernel}: {_who(a, launch)} "
                f"{verb.get(rep['what'], rep['what'])} {_element(rep)}{_at(a)}{times}; {rep['detail']}")
    if kind == "uninitialized_read" and a is not None and a["thread"] is not None:
        return (f"read of uninitialised {rep['space']} memory{kernel}: {_who(a, launch)} reads "
                f"{_element(rep)}{_at(a)}{times}; {rep['detail']}")
    if kind in ("barrier_divergence", "shuffle_mask"):
        title = "barrier divergence" if kind == "barrier_divergence" else "bad warp mask"
        second = f"; compare {_who(b, launch)}{_at(b)}" if b is not None and b["thread"] is not None else ""
        return f"{title}{kernel}: {rep['detail']} (e.g. {_who(a, launch)}{_at(a)}{second}){times}"
    title = kind.replace("_", " ")
    return f"{title}{kernel}{_at(a)}: {rep['detail']}{times}"


def _convert_report(r, launch) -> dict:
    alloc = r.get("allocation") or {}
    rep = {
        "kind": r["kind"], "what": r["what"], "space": r["space"],
        "kernel": launch["kernel"] if launch else "", "launch": launch["launch"] if launch else 0,
        "launch_line": launch["line"] if launch else 0,
        "allocation": alloc.get("name", ""), "allocation_bytes": alloc.get("bytes", 0),
        "index": r["index"] if r["index"] >= 0 else None,
        "offset": r["offset"] if r["offset"] >= 0 else None,
        "access_bytes": r["access_bytes"],
        "threads": [_thread(r.get("first"), launch), _thread(r.get("second"), launch)],
        "count": r["count"], "detail": r["detail"],
    }
    lines = [t["line"] for t in rep["threads"] if t and t["line"]]
    rep["line"] = lines[0] if lines else 0
    rep["message"] = _message(rep, launch)
    return rep


def _sites_of(reports) -> set:
    out = set()
    for r in reports:
        for k in ("first", "second"):
            t = r.get(k)
            if t and t.get("site"):
                out.add((t["site"]["module"], t["site"]["offset"]))
    return out


def collect() -> None:
    """Move the runtime's pending launch records to the active :func:`check` (or, outside
    one, to :func:`last_launches`, warning about any report)."""
    if not _LIB:
        return
    with _lock:
        raw = json.loads(library().mini_cuda_take_json().decode("utf-8", "replace"))
        sites = _sites_of(r for l in raw["launches"] for r in l["reports"]) | _sites_of(raw["host_reports"])
        _resolve_sites(sites)
        launches = []
        for l in raw["launches"]:
            launch = {k: v for k, v in l.items() if k != "reports"}
            launch["grid"], launch["block"] = tuple(launch["grid"]), tuple(launch["block"])
            launch["reports"] = [_convert_report(r, launch) for r in l["reports"]]
            launches.append(launch)
        host = [_convert_report(r, None) for r in raw["host_reports"]]
        if _ACTIVE:
            _ACTIVE[-1]._add(launches, host)
            return
        _LAST.extend(launches)
    reports = [r for l in launches for r in l["reports"]] + host
    if reports:
        from mini.backends.cuda import reports as _reports
        found = KernelCheck()
        found._add([l for l in launches if l["reports"] or l["error"] != "cudaSuccess"], host)
        if _reports.in_notebook():
            # shown every time (a warning is shown once per place in the code), with the lines
            _reports.show(found)
            text = f"mini's CUDA emulator found {len(reports)} problem(s): see the report above"
        else:
            text = _reports.text(found)
        warnings.warn(CudaSanitizerWarning(
            text + "\n(run the call inside `with mini.cuda.emulator.check() as run:` to inspect "
                   "the reports: run.reports, run.counters())"), stacklevel=3)


def last_launches() -> list[dict]:
    """Launch records collected outside :func:`check` (the last 100)."""
    collect()
    return list(_LAST)


def last_launch() -> dict | None:
    """The most recent launch record collected outside :func:`check`."""
    collect()
    return _LAST[-1] if _LAST else None


class KernelCheck:
    """The launches (and reports) of the kernels run inside one :func:`check` block."""

    def __init__(self):
        self.launches: list[dict] = []
        self.host_reports: list[dict] = []

    def _add(self, launches, host):
        self.launches.extend(launches)
        self.host_reports.extend(host)

    @property
    def reports(self) -> list[dict]:
        """Every report, in the order they happened (launch by launch, then host code)."""
        return [r for l in self.launches for r in l["reports"]] + self.host_reports

    @property
    def ok(self) -> bool:
        """No report and no launch ended with an error."""
        return not self.reports and all(l["error"] == "cudaSuccess" for l in self.launches)

    def kinds(self) -> set[str]:
        return {r["kind"] for r in self.reports}

    def of_kind(self, kind: str) -> list[dict]:
        if kind not in KINDS:
            raise ValueError(f"unknown report kind {kind!r}; kinds: {', '.join(KINDS)}")
        return [r for r in self.reports if r["kind"] == kind]

    def kernel_launches(self, kernel: str | None = None) -> list[dict]:
        """The launches of ``kernel`` (its name as written before ``<<<``, template
        arguments optional), or all."""
        if kernel is None:
            return list(self.launches)
        return [l for l in self.launches if l["kernel"] == kernel or l["kernel"].split("<")[0].strip() == kernel]

    def counters(self, kernel: str | None = None) -> dict:
        """The counters summed over the launches of ``kernel`` (or all), plus ratios:
        ``sectors_per_load_request``, ``sectors_per_store_request``,
        ``bank_conflicts_per_shared_request``."""
        launches = self.kernel_launches(kernel)
        if kernel is not None and not launches:
            names = sorted({l["kernel"] for l in self.launches})
            raise KeyError(f"no launch of kernel {kernel!r} was recorded; launched: {names or 'none'}")
        total = {c: sum(l["counters"][c] for l in launches) for c in COUNTERS}
        div = lambda a, b: a / b if b else 0.0   # noqa: E731
        total["sectors_per_load_request"] = div(total["global_load_sectors"], total["global_load_requests"])
        total["sectors_per_store_request"] = div(total["global_store_sectors"], total["global_store_requests"])
        total["bank_conflicts_per_shared_request"] = div(
            total["shared_bank_conflicts"], total["shared_load_requests"] + total["shared_store_requests"])
        return total

    def summary(self) -> str:
        """Every launch and its reports, one line each (see ``str(run)`` for the reports
        with their source lines and what they usually mean)."""
        if not self.launches and not self.host_reports:
            return "no kernel launches were recorded"
        out = []
        for l in self.launches:
            g, b = l["grid"], l["block"]
            status = "" if l["error"] == "cudaSuccess" else f", ended with {l['error']}"
            out.append(f"launch {l['launch']}: {l['kernel']}<<<{_fmt_dim(g, None)}, {_fmt_dim(b, None)}>>> "
                       f"(line {l['line']}){status}: "
                       + (f"{len(l['reports'])} report(s)" if l["reports"] else "no reports"))
            for r in l["reports"]:
                out.append("  - " + r["message"])
            if l.get("dropped_reports"):
                out.append(f"  ... {l['dropped_reports']} more occurrences not kept")
        for r in self.host_reports:
            out.append("host: " + r["message"])
        return "\n".join(out)

    def __str__(self) -> str:
        from mini.backends.cuda import reports
        return reports.text(self)

    def _repr_html_(self) -> str:
        from mini.backends.cuda import reports
        return reports.html(self)

    def assert_clean(self, what: str = "") -> None:
        """Raise :class:`CudaSanitizerError` (an AssertionError) when a report was made or a
        launch failed, after showing the reports (in a notebook: with your source lines).
        ``what`` names the call in the message, e.g. ``"cuda_add with 2 blocks"``."""
        failed = [l for l in self.launches if l["error"] != "cudaSuccess"]
        if not self.reports and not failed:
            return
        from mini.backends.cuda import reports
        groups = reports.group(self.reports)
        if reports.in_notebook():
            self.show()
            detail = "see the report above"
        else:
            detail = str(self)
        first = reports.title(groups[0][0]) if groups else f"a launch ended with {failed[0]['error']}"
        raise CudaSanitizerError(f"{what + ': ' if what else ''}mini's CUDA sanitizer found "
                                 f"{len(groups) or len(failed)} problem(s), first {first}; {detail}")

    def show(self, limit: int = 5) -> None:
        """Display the reports: HTML with the source lines in a notebook, text elsewhere."""
        from mini.backends.cuda import reports
        reports.show(self, limit)

    def __repr__(self):
        return (f"KernelCheck({len(self.launches)} launch(es), {len(self.reports)} report(s), "
                f"ok={self.ok})")


@contextlib.contextmanager
def check(*, races: bool = True, memcheck: bool = True, initcheck: bool = True,
          synccheck: bool = True, counters: bool = True, schedules=1, seed: int = 0,
          max_reports: int = 100):
    """Run kernels under the sanitizer and keep what it finds::

        with check(schedules=3) as run:
            ext.my_kernel_wrapper(x)
        assert run.ok, run

    ``schedules``: how many thread orders each launch runs in (1: forward; 2: and reverse;
    n: and n - 2 seeded shuffles), or a list like ``["forward", "shuffled:7"]``.  More than
    one compares the results and reports any difference (a second line of evidence for
    races; the race checker itself does not depend on the order).  The options apply to
    launches inside the block and are restored after it.
    """
    collect()   # earlier launches do not belong to this block
    before = get_options()
    set_options(races=races, memcheck=memcheck, initcheck=initcheck, synccheck=synccheck,
                counters=counters, max_reports=max_reports, schedules=schedules, seed=seed)
    run = KernelCheck()
    with _lock:
        _ACTIVE.append(run)
    try:
        yield run
    finally:
        try:
            collect()
        finally:
            with _lock:
                _ACTIVE.remove(run)
            set_options(**before, schedules=1)


# --------------------------------------------------------------------------- transfers

def transfer_stats() -> dict:
    """Bytes and counts of host<->device copies since the last reset (cudaMemcpy and
    mini's cuda device), the number of launches, and the device memory in use."""
    return json.loads(library().mini_cuda_stats_json().decode())


def reset_transfer_stats() -> None:
    library().mini_cuda_reset_stats()


def count_transfer(kind: str, nbytes: int) -> None:
    """Count a copy that Python makes ("h2d", "d2h" or "d2d") in :func:`transfer_stats`."""
    code = {"h2d": 1, "d2h": 2, "d2d": 3}[kind]
    library().mini_cuda_count_transfer(code, int(nbytes))


# --------------------------------------------------------------------------- modules

class CudaModule(types.ModuleType):
    """A module built by ``load_inline(..., cuda_sources=...)`` for the emulator: its
    functions collect the emulator's reports after every call."""

    def __init__(self, module, plan):
        super().__init__(module.__name__, module.__doc__)
        self._module = module
        self._plan = plan
        self.__file__ = getattr(module, "__file__", None)
        for name in dir(module):
            if name.startswith("__"):
                continue
            value = getattr(module, name)
            if callable(value):
                value = _collecting(value)
            setattr(self, name, value)

    def __repr__(self):
        return f"<CUDA extension {self.__name__!r} on mini's emulator>"


def _collecting(fn):
    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        finally:
            collect()
    return call


def wrap_module(module, plan, path):
    """What ``load_inline`` returns for CUDA sources: the module itself under nvcc, a
    :class:`CudaModule` on the emulator."""
    with _lock:
        _SOURCES[str(path)] = plan.sources
        try:
            _SOURCES[str(path.resolve())] = plan.sources
        except OSError:
            pass
    if plan.mode != "emulator":
        return module
    return CudaModule(module, plan)
