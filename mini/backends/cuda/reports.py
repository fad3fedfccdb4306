"""How the emulator's sanitizer reports look to a person: text, HTML, and what to look at.

A report (see :mod:`mini.backends.cuda.emulator`) says what happened, in which kernel, to
which element, and which threads did it at which line.  Here it becomes a short block that
quotes those lines of the student's source, numbered as in their cell, and ends with what
such a report usually means::

    1. data race on shared memory As[0] in kernel matmul_tiled (read after write, 4320 times)
         thread (0, 0) of block (0, 0) writes it at line 19
            19 |     As[ty][tx] = (row < M && a_col < K) ? A[row * K + a_col] : 0.0f;
         thread (1, 0) of block (0, 0) reads it at line 22
            22 |     for (int k = 0; k < TILE; ++k) acc += As[ty][k] * Bs[k][tx];
         with no __syncthreads() between them.
       What it usually means: ...

:func:`text` and :func:`html` render a whole :class:`~mini.backends.cuda.emulator.KernelCheck`
(its ``__str__`` and ``_repr_html_``); :func:`show` displays reports in a notebook (HTML with
a text fallback) or prints them.  Everything here only reads plain report dicts: the grader
uses :func:`hint` and :func:`excerpt` on reports that came back from a sandbox.
"""
from __future__ import annotations

import html as _html

__all__ = ["hint", "title", "excerpt", "report_text", "text", "html", "show", "group", "ORDER",
           "in_notebook"]

#: Kinds from the most to the least telling: a launch that did not run first, then what
#: breaks results for sure, then what only may.
ORDER = ("launch_error", "out_of_bounds", "invalid_address", "assert", "barrier_divergence",
         "shuffle_mask", "race", "uninitialized_read", "api_error", "host_access",
         "schedule_dependent")


def _plural(n: int, word: str) -> str:
    if n == 1:
        return f"1 {word}"
    return f"{n} {word}{'es' if word.endswith(('s', 'sh', 'ch')) else 's'}"


def _cfg(v) -> str:
    """A grid or block size: ``(16, 16)``, or ``64`` for a 1-D one."""
    v = tuple(v)
    while len(v) > 1 and v[-1] == 1:
        v = v[:-1]
    return str(v[0]) if len(v) == 1 else "(" + ", ".join(str(x) for x in v) + ")"


def _index(v, dims) -> str:
    """A thread or block index, with as many components as ``dims`` has."""
    v = tuple(v)
    n = len(v)
    if dims is not None:
        d = tuple(dims)
        while n > 1 and d[n - 1] == 1 and v[n - 1] == 0:
            n -= 1
    else:
        while n > 1 and v[n - 1] == 0:
            n -= 1
    v = v[:n]
    return str(v[0]) if n == 1 else "(" + ", ".join(str(x) for x in v) + ")"


def _dims(v) -> str:
    if v is None:
        return "?"
    v = tuple(v)
    while len(v) > 1 and v[-1] == 0:
        v = v[:-1]
    return str(v[0]) if len(v) == 1 else "(" + ", ".join(str(x) for x in v) + ")"


def _element(rep) -> str:
    name = rep.get("allocation") or "memory"
    index = rep.get("index")
    return f"{name}[{index}]" if index is not None and index >= 0 else name


def hint(rep: dict) -> str:
    """What a report of this kind usually means, and where to look (one paragraph)."""
    kind = rep.get("kind", "")
    threads = [t for t in rep.get("threads") or [] if t]
    if kind == "race":
        accesses = {t.get("access") for t in threads}
        blocks = {tuple(t["block"]) for t in threads if t.get("block") is not None}
        if "atomic" in accesses:
            return ("An atomic update and a plain read or write of the same element race: atomics "
                    "are only atomic with respect to other atomics.  Do the plain access before "
                    "the launch (cudaMemset) or separate the two with __syncthreads().")
        if len(blocks) > 1:
            return ("Two blocks touched the same element of global memory.  Blocks run in any "
                    "order and never wait for each other, so each output element must belong to "
                    "exactly one thread of the grid (index with the block's own number), or be "
                    "combined with atomicAdd.")
        return ("Two threads of one block touched the same element between the same two "
                "barriers, one of them writing, so the result depends on which runs first.  "
                "Usually a __syncthreads() is missing: between writing shared memory and "
                "reading it, or between reading it and overwriting it (in a loop, at the end of "
                "the body).  Or two threads compute the same output index.")
    if kind == "out_of_bounds":
        if rep.get("space") == "shared":
            return ("An index past the end of a __shared__ array: it needs one element for every "
                    "thread (or index) that uses it; compare its size with blockDim.")
        return ("A thread read or wrote past the end of an array: the grid has more threads "
                "than elements, so threads without an element must not touch memory.  Guard the "
                "access with the size (if (i < n)), or loop while i < n.")
    if kind == "uninitialized_read":
        return ("Memory read before anything wrote it: cudaMalloc and __shared__ memory start "
                "with garbage.  Every element a thread reads must be written first; a thread "
                "without data still writes its slot (0 for a sum), before the barrier.")
    if kind == "barrier_divergence":
        return ("Every thread of a block must reach each __syncthreads(): not only the threads "
                "that take an if, and none may return before it.  Guard the work, not the "
                "barrier: put __syncthreads() outside the if.")
    if kind == "shuffle_mask":
        return ("The mask of a __shfl_*_sync names the lanes that take part, and every lane "
                "that executes the call must be in it (0xffffffff for a whole warp); a lane may "
                "only read lanes that are in the mask.")
    if kind == "invalid_address":
        return ("A pointer that is not device memory at all: a host array passed to a kernel, "
                "a freed buffer, or an index so far off that it left every allocation.")
    if kind == "launch_error":
        return ("The kernel did not run.  A block has at most 1024 threads and a grid at least "
                "one block; dynamic shared memory has a limit too.  cudaGetLastError() after "
                "the launch returns this error.")
    if kind == "schedule_dependent":
        return ("The result changed with the order in which threads ran: a race the checks "
                "above explain, or a value read before another thread wrote it.")
    if kind == "api_error":
        return "A CUDA runtime call was used wrongly: see its message (direction, sizes, frees)."
    if kind == "host_access":
        return ("Host code read or wrote device memory directly; copy it with cudaMemcpy "
                "(or use cudaMallocManaged memory).")
    if kind == "assert":
        return "An assert() in the kernel failed for the thread shown."
    return ""


def title(rep: dict) -> str:
    """The first line of a report: what, where, how often."""
    kind = rep.get("kind", "")
    kernel = f" in kernel {rep['kernel']}" if rep.get("kernel") else ""
    extra = []
    if rep.get("what") and kind == "race":
        extra.append(rep["what"].replace("-", " "))
    if rep.get("count", 1) > 1:
        extra.append(f"{rep['count']} times")
    tail = f" ({', '.join(extra)})" if extra else ""
    space = rep.get("space") or "global"
    if kind == "race":
        return f"data race on {space} memory {_element(rep)}{kernel}{tail}"
    if kind == "out_of_bounds":
        return f"out-of-bounds {rep.get('what', 'access')} of {space} memory {_element(rep)}{kernel}{tail}"
    if kind == "uninitialized_read":
        return f"read of uninitialised {space} memory {_element(rep)}{kernel}{tail}"
    if kind == "barrier_divergence":
        return f"barrier divergence{kernel}{tail}"
    if kind == "shuffle_mask":
        return f"bad warp mask{kernel}{tail}"
    return f"{kind.replace('_', ' ')}{kernel}{tail}"


_VERB = {"read": "reads", "write": "writes", "atomic": "updates (atomically)", "exit": "has returned",
         "__syncthreads": "waits at __syncthreads()", "shuffle": "shuffles",
         "warp operation": "executes the warp operation"}


def _who(t, launch=None) -> str:
    if t.get("thread") is None:
        return "host code"
    block = launch.get("block") if launch else None
    grid = launch.get("grid") if launch else None
    return f"thread {_index(t['thread'], block)} of block {_index(t['block'], grid)}"


def _shown_threads(rep) -> list[dict]:
    """The threads of a report worth a line: those with an access or a source line (a lane
    that is only named, or host code, is said in the report's detail)."""
    return [t for t in rep.get("threads") or []
            if t and t.get("thread") is not None and (t.get("line") or t.get("access"))]


def _key(rep):
    """Reports that are one problem: same kind and kernel, same lines."""
    lines = tuple(sorted({t.get("line") or 0 for t in rep.get("threads") or [] if t}))
    return (rep.get("kind"), rep.get("kernel"), rep.get("space"), lines)


def group(reports) -> list[tuple[dict, list[dict]]]:
    """The reports, most telling kinds first, as (first report, the others like it)."""
    rank = {k: i for i, k in enumerate(ORDER)}
    groups: dict = {}
    for rep in reports:
        groups.setdefault(_key(rep), []).append(rep)
    out = [(g[0], g[1:]) for g in groups.values()]
    return sorted(out, key=lambda g: rank.get(g[0].get("kind"), len(ORDER)))


def _source_lines(t) -> list[str] | None:
    from mini.backends.cuda import emulator
    return emulator.source_lines(t.get("module", ""), t.get("file", ""))


def excerpt(t: dict, lines: list[str] | None = None, context: int = 0, mark: str = "") -> list[str]:
    """Numbered source lines around the line of thread record ``t`` (``lines``: the file's
    lines; default: the source the emulator knows for its module)."""
    line = t.get("line") or 0
    if not line:
        return []
    if lines is None:
        lines = _source_lines(t)
    if not lines or line > len(lines):
        src = (t.get("source") or "").strip()
        return [f"{line:>6} | {src}"] if src else []
    out = []
    for n in range(max(1, line - context), min(len(lines), line + context) + 1):
        prefix = mark if n == line and mark else " " * len(mark)
        out.append(f"{prefix}{n:>6} | {lines[n - 1].rstrip()}")
    return out


def report_text(rep: dict, number: int | None = None, with_hint: bool = True, launch=None,
                alike: list | None = None, sources: dict | None = None) -> str:
    """One report as a block of text: title, the threads with their source lines, a hint.
    ``alike``: more reports of the same problem (named in one line); ``sources``: module ->
    source lines (default: what this process's emulator knows)."""
    head = (f"{number}. " if number is not None else "") + title(rep)
    pad = " " * (len(str(number)) + 2 if number is not None else 0)
    out = [head]
    threads = _shown_threads(rep)
    kind = rep.get("kind", "")
    for t in threads:
        verb = _VERB.get(t.get("access", ""), t.get("access") or "is involved")
        if kind in ("race", "out_of_bounds", "uninitialized_read") and t.get("access") in ("read", "write", "atomic"):
            obj = " it" if kind == "race" else f" {_element(rep)}"
        else:
            obj = ""
        where = f" at line {t['line']}" if t.get("line") else ""
        out.append(f"{pad}  {_who(t, launch)} {verb}{obj}{where}")
        lines = sources.get(t.get("module", "")) if sources is not None else None
        if sources is not None and not lines:
            lines = []      # only the quoted line: another process's modules are not known here
        out += [f"{pad}  {x}" for x in excerpt(t, lines)]
    if kind == "race" and len(threads) == 2:
        same_block = threads[0].get("block") == threads[1].get("block")
        out.append(f"{pad}  with no __syncthreads() between them." if same_block
                   else f"{pad}  (blocks are never ordered: no barrier can separate them).")
    detail = rep.get("detail") or ""
    if kind != "race" and detail:
        out.append(f"{pad}  {detail}")
    if alike:
        names = sorted({_element(r) for r in alike if r.get("allocation")} - {_element(rep)})
        more = f": {', '.join(names[:6])}" + (", ..." if len(names) > 6 else "") if names else ""
        out.append(f"{pad}  (and {_plural(len(alike), 'more report')} like it{more})")
    if with_hint and hint(rep):
        out.append(f"{pad}  What it usually means: {hint(rep)}")
    return "\n".join(out)


def _launch_label(l) -> str:
    return f"{l['kernel']}<<<{_cfg(l['grid'])}, {_cfg(l['block'])}>>>"


def text(run, limit: int = 5) -> str:
    """A :class:`KernelCheck` as text: a headline, each problem (the first ``limit`` in
    full, the others in one line), the launches that failed."""
    reports = run.reports
    launches = {l["launch"]: l for l in run.launches}
    failed = [l for l in run.launches if l["error"] != "cudaSuccess"]
    if not run.launches and not reports:
        return "no kernel launches were recorded"
    kernels = list(dict.fromkeys(_launch_label(l) for l in run.launches))
    shown = ", ".join(kernels[:3]) + (f" and {len(kernels) - 3} more" if len(kernels) > 3 else "")
    if not reports and not failed:
        return f"mini's CUDA sanitizer: no problems in {_plural(len(run.launches), 'launch')} ({shown})"
    groups = group(reports)
    out = [f"mini's CUDA sanitizer found {_plural(len(groups), 'problem')} in "
           f"{_plural(len(run.launches), 'launch')} ({shown}):", ""]
    hinted = set()
    for i, (rep, alike) in enumerate(groups[:limit], 1):
        out += [report_text(rep, i, with_hint=rep.get("kind") not in hinted,
                            launch=launches.get(rep.get("launch")), alike=alike), ""]
        hinted.add(rep.get("kind"))
    for rep, _ in groups[limit:]:
        out.append("- " + title(rep))
    for l in failed:
        if not any(r.get("launch") == l["launch"] and r["kind"] == "launch_error" for r in reports):
            out.append(f"launch {l['launch']} ({_launch_label(l)}, line {l['line']}) ended with {l['error']}")
    dropped = sum(l.get("dropped_reports", 0) for l in run.launches)
    if dropped:
        out.append(f"({dropped} more occurrences were not kept)")
    return "\n".join(out).rstrip()


def html(run, limit: int = 5) -> str:
    """A :class:`KernelCheck` as HTML (what a notebook shows)."""
    esc = _html.escape
    reports = run.reports
    launches = {l["launch"]: l for l in run.launches}
    failed = [l for l in run.launches if l["error"] != "cudaSuccess"]
    if not reports and not failed:
        return (f"<div style='border-left:4px solid #2e7d32;padding:4px 10px'>"
                f"{esc(text(run, limit))}</div>")
    groups = group(reports)
    parts = [f"<div style='border-left:4px solid #c62828;padding:4px 10px;margin:4px 0'>"
             f"<b>{esc(text(run, limit).splitlines()[0])}</b>"]
    hinted = set()
    for i, (rep, alike) in enumerate(groups[:limit], 1):
        launch = launches.get(rep.get("launch"))
        parts.append(f"<p style='margin:8px 0 2px 0'><b>{i}. {esc(title(rep))}</b></p>")
        rows = []
        threads = _shown_threads(rep)
        for t in threads:
            verb = _VERB.get(t.get("access", ""), t.get("access") or "is involved")
            where = f" at line {t['line']}" if t.get("line") else ""
            rows.append(f"<div>{esc(_who(t, launch))} <b>{esc(verb)}</b>{esc(where)}</div>")
            lines = excerpt(t)
            if lines:
                rows.append("<pre style='margin:2px 0 4px 16px;background:#fff3e0;padding:2px 6px'>"
                            + esc("\n".join(lines)) + "</pre>")
        if rep.get("kind") == "race" and len(threads) == 2:
            same = threads[0].get("block") == threads[1].get("block")
            rows.append("<div>with no <code>__syncthreads()</code> between them.</div>" if same
                        else "<div>(blocks are never ordered: no barrier can separate them)</div>")
        elif rep.get("detail"):
            rows.append(f"<div>{esc(rep['detail'])}</div>")
        if alike:
            rows.append(f"<div style='color:#555'>(and {_plural(len(alike), 'more report')} like it)</div>")
        if hint(rep) and rep.get("kind") not in hinted:
            rows.append(f"<div style='color:#555;margin-top:2px'><i>What it usually means:</i> "
                        f"{esc(hint(rep))}</div>")
            hinted.add(rep.get("kind"))
        parts.append("<div style='margin-left:12px'>" + "".join(rows) + "</div>")
    rest = groups[limit:]
    if rest:
        parts.append("<ul>" + "".join(f"<li>{esc(title(r))}</li>" for r, _ in rest) + "</ul>")
    parts.append("</div>")
    return "".join(parts)


class _View:
    """What :func:`show` displays: HTML in a notebook, the text elsewhere."""

    def __init__(self, run, limit):
        self.run, self.limit = run, limit

    def _repr_html_(self):
        return html(self.run, self.limit)

    def __repr__(self):
        return text(self.run, self.limit)


def show(run, limit: int = 5) -> None:
    """Display a :class:`KernelCheck` (or anything with ``launches`` and ``reports``): as
    HTML in a notebook, as text elsewhere."""
    try:
        from IPython import get_ipython
        from IPython.display import display
        if get_ipython() is not None:
            display(_View(run, limit))
            return
    except ImportError:
        pass
    print(text(run, limit))


def in_notebook() -> bool:
    """True inside a Jupyter kernel (where :func:`show` draws HTML)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None
