"""Hidden checks of chapter 04, CUDA part (cuda.ipynb): kernels written by the student,
graded on mini's CUDA emulator, and five napkin questions.  Points: ``ch04_hardware.POINTS``.

Each kernel check calls the student's function through the scenario ``cuda_run``
(:mod:`grader.worker.scenarios.ch04_cuda`): in the sandboxed worker the function compiles
its CUDA for the emulator and runs under every check and two thread schedules; back come
plain data -- the result, the sanitizer's reports, each launch's counters, the source lines
the reports quote.  Here, in the trusted process:

- the result is compared with numpy (exactly where the kernel does the very same float
  operations: an add, a transpose; for sums of n terms within the bound of any summation
  order, ``(n - 1)·2^-24·sum|terms|``);
- any report fails the check with a message that names the mistake from what the report
  says: the kind, the memory, the threads and, for a race on shared memory, whether a
  ``__syncthreads()`` stands between the two lines in the student's source (then the race
  goes around the loop: the barrier before reusing a tile is missing) or not (the barrier
  after loading it is);
- counters hold the kernel to what the exercise is about: coalesced accesses (sectors per
  warp-wide request), tiling (global loads of the matmul), shared memory without bank
  conflicts, a tree with barriers, warp shuffles.

Sizes come from the issue: 1, 37 and 1000-like (the emulator runs every thread as a fiber, so
matrices stay below ~70 x 130), with sizes that are not multiples of a tile, grids smaller
than the data, and non-compact inputs.
"""
from __future__ import annotations

import re

import numpy as np

from grader.checks import check
from grader.checks.ch04_hardware import POINTS
from grader.checks.helpers import (call, call_text, describe, expect_array, expect_float,
                                   expect_int, expect_raises, expect_tuple_of_ints, fail, rng)

__all__ = ["diagnose_reports", "POINTS"]

# an index past the end is the cause of the invalid address that often follows it
_KINDS_ORDER = ("launch_error", "out_of_bounds", "invalid_address", "assert", "barrier_divergence",
                "shuffle_mask", "race", "uninitialized_read", "api_error", "host_access",
                "schedule_dependent")
_U32 = 2.0 ** -24          # unit roundoff of float32


# =========================================================================== running a kernel

def _f32(gen, shape):
    return gen.standard_normal(shape).astype(np.float32)


def _label(name: str, *args, **kwargs) -> str:
    """``cuda_add(float32 [1000], float32 [1000], blocks=2)``: the call, arrays by dtype and
    shape (their values would only hide what matters)."""
    def one(a):
        if type(a) is np.ndarray:
            view = "" if a.flags.c_contiguous else " view"
            return f"{a.dtype} [{', '.join(str(d) for d in a.shape)}]{view}"
        return describe(a, limit=40)
    parts = [one(a) for a in args] + [f"{k}={one(v)}" for k, v in kwargs.items()]
    return f"{name}({', '.join(parts)})"


def _run(student, name: str, *args, schedules: int = 2, **kwargs) -> dict:
    """The observations of ``name(*args, **kwargs)`` on the emulator (scenario
    ``cuda_run``), checked for their shape; an exception of the student's becomes the
    failure (a compile error quotes its lines)."""
    label = _label(name, *args, **kwargs)
    obs = student.scenario("cuda_run", args=list(args), kwargs=dict(kwargs), schedules=schedules)
    if type(obs) is not dict or not {"value", "raised", "reports", "launches", "sources"} <= set(obs):
        fail(f"{label}: the grader's scenario did not complete (got {describe(obs)})")
    raised = obs["raised"]
    if raised is not None:
        if type(raised).__name__ != "ExceptionRecord":
            fail(f"{label}: the grader's scenario did not complete")
        what = raised.text()
        if raised.is_a("CompileError") or "could not compile" in what:
            fail(f"{label}: your CUDA does not compile:\n{raised.message}")
        _expect_clean(obs, label, name)       # a kernel that failed says why first
        fail(f"{label} raised {what}")
    obs["label"] = label
    return obs


def _reports(obs) -> list[dict]:
    reps = [r for r in obs["reports"] if type(r) is dict and type(r.get("kind")) is str]
    rank = {k: i for i, k in enumerate(_KINDS_ORDER)}
    return sorted(reps, key=lambda r: rank.get(r["kind"], len(_KINDS_ORDER)))


def _threads(rep) -> list[dict]:
    return [t for t in rep.get("threads") or [] if type(t) is dict and t.get("thread") is not None]


def _barrier_lines(obs, rep) -> list[int]:
    """Lines of the kernel source that call __syncthreads (from the module the report names)."""
    for t in _threads(rep):
        lines = obs["sources"].get(t.get("module"))
        if isinstance(lines, list):
            return [i + 1 for i, text in enumerate(lines)
                    if isinstance(text, str) and re.search(r"__syncthreads\s*\(", text.split("//")[0])]
    return []


#: What each exercise adds to a report's general advice.
_EXERCISE_HINTS = {
    ("out_of_bounds", "global", "add"): "threads past the end of the data must do nothing: loop "
                                        "(or test) while i < n",
    ("out_of_bounds", "global", "matmul"): "a tile that hangs over the edge of A or B must not "
                                           "read past it: load 0 where row >= M or col >= K "
                                           "(and likewise for B), and write C only inside it",
    ("out_of_bounds", "global", "transpose"): "the last tiles are partial: test row < rows and "
                                              "col < cols before every read and write",
    ("race", "blocks", "add"): "a grid-stride loop steps by the whole grid, blockDim.x * "
                               "gridDim.x, so that no two threads visit the same element",
    ("race", "blocks", "block_sum"): "each block writes its own partial sum: "
                                     "partial[blockIdx.x], not one shared element",
    ("uninitialized_read", "host", "add"): "with fewer threads than elements each thread must "
                                           "handle several: a grid-stride loop (i += blockDim.x "
                                           "* gridDim.x)",
}


def _family(exercise: str) -> str:
    return ("block_sum" if exercise.startswith("cuda_block_sum") else
            "matmul" if "matmul" in exercise else "transpose" if "transpose" in exercise else "add")


def diagnose_reports(obs: dict, exercise: str) -> tuple[str, str] | None:
    """(the mistake's name, what to do) for the most telling report of ``obs`` (a
    ``cuda_run`` observation), or None when there is no report."""
    reps = _reports(obs)
    if not reps:
        return None
    rep = reps[0]
    kind, space = rep["kind"], rep.get("space") or ""
    fam = _family(exercise)
    threads = _threads(rep)
    elem = (f"{rep.get('allocation')}[{rep.get('index')}]" if rep.get("allocation")
            and rep.get("index") is not None else rep.get("allocation") or "an element")
    if kind == "launch_error":
        return "the kernel did not launch", rep.get("detail") or ""
    if kind == "invalid_address":
        return ("an access outside device memory",
                "a kernel may only use device memory (cudaMalloc'd pointers) and indices inside it")
    if kind == "barrier_divergence":
        barrier = next((t.get("line") for t in threads if t.get("access") == "__syncthreads"), 0)
        lines = next((obs["sources"].get(t.get("module")) for t in threads
                      if isinstance(obs["sources"].get(t.get("module")), list)), None) or []
        kernel_start = max((i for i, text in enumerate(lines[:barrier])
                            if isinstance(text, str) and "__global__" in text), default=0)
        if barrier and any(isinstance(text, str) and re.search(r"\breturn\b", text.split("//")[0])
                           for text in lines[kernel_start:barrier - 1]):
            return ("return before a barrier",
                    "threads that return early never reach the __syncthreads() the others wait "
                    "at: every thread of the block must reach each barrier, so guard the work "
                    "with an if instead of returning")
        return ("barrier inside a divergent branch",
                "every thread of the block must reach each __syncthreads(): not inside an if "
                "that only some threads enter, and with no return before it (guard the work, "
                "not the barrier)")
    if kind == "shuffle_mask":
        return ("shuffle with a partial mask",
                "every lane that executes __shfl_down_sync must be in its mask, and may read only "
                "lanes in it: 0xffffffff when the whole warp takes part")
    if kind == "out_of_bounds":
        if space == "shared":
            return ("shared tile too small",
                    f"a thread indexes {elem}, past the end of the __shared__ array: it needs "
                    f"one element for every thread (or index) that uses it")
        extra = _EXERCISE_HINTS.get(("out_of_bounds", "global", fam), "")
        return ("missing bounds check",
                f"a thread touches {elem}, past the end of the array" + (f": {extra}" if extra else ""))
    if kind == "race":
        accesses = [t.get("access") for t in threads]
        blocks = {tuple(t["block"]) for t in threads if t.get("block") is not None}
        if "atomic" in accesses:
            return ("atomic mixed with a plain write",
                    f"{elem} gets a plain write and atomicAdd from different threads with no "
                    f"barrier between: initialise it before the launch (cudaMemset), or put "
                    f"__syncthreads() between the plain write and the atomics")
        if len(blocks) > 1:
            extra = _EXERCISE_HINTS.get(("race", "blocks", fam), "")
            name = ("write-write race on an output" if set(accesses) == {"write"}
                    else "race between blocks")
            return (name, f"two blocks touch {elem}; blocks run in any order and never wait for "
                          f"each other, so each output element must belong to one thread"
                    + (f": {extra}" if extra else ""))
        writes = [t for t in threads if t.get("access") == "write"]
        others = [t for t in threads if t is not (writes[0] if writes else None)]
        if space == "shared" and writes and others and writes[0].get("line") and others[0].get("line"):
            w, r = writes[0]["line"], others[0]["line"]
            lo, hi = min(w, r), max(w, r)
            between = [b for b in _barrier_lines(obs, rep) if lo < b < hi]
            if between:
                return ("missing barrier before reusing a tile",
                        f"line {w} overwrites {rep.get('allocation')} for the next step while "
                        f"other threads still read the current one at line {r}: the barrier "
                        f"at line {between[0]} separates loading from using, and a second "
                        f"__syncthreads() is needed after the use (at the end of the loop body)")
            return ("missing barrier after loading a tile",
                    f"threads read {rep.get('allocation')} at line {r} that other threads write "
                    f"at line {w}, with no __syncthreads() between the two lines: wait until the "
                    f"whole tile is written before anyone reads it")
        if set(accesses) == {"write"}:
            return ("write-write race on an output",
                    f"two threads write {elem}: each output element must be written by one thread")
        return ("data race", f"two threads touch {elem} between the same two barriers, one writing")
    if kind == "uninitialized_read":
        if not threads:          # host code copying out memory the kernel never wrote
            extra = _EXERCISE_HINTS.get(("uninitialized_read", "host", fam), "")
            return ("output not fully written",
                    f"{rep.get('detail', '')}" + (f"; {extra}" if extra else ""))
        if space == "shared":
            return ("uninitialised shared read",
                    f"a thread reads {elem}, which no thread of its block wrote: every slot the "
                    f"tree reads must be written first, 0 by threads that have no element")
        return ("read of uninitialised memory", f"a thread reads {elem}, which nothing wrote")
    if kind == "schedule_dependent":
        return ("the result depends on the order threads run in",
                "a race: look for threads that read what others write without a barrier between")
    return kind.replace("_", " "), rep.get("detail") or ""


def _report_block(obs, rep) -> str:
    """The report as the student would see it in the notebook, with their source lines."""
    from mini.backends.cuda import reports
    srcs = {k: v for k, v in obs["sources"].items() if isinstance(v, list)}
    launches = {l.get("launch"): l for l in obs["launches"] if type(l) is dict}
    return reports.report_text(rep, with_hint=False, launch=launches.get(rep.get("launch")),
                               sources=srcs)


def _expect_clean(obs, label: str, exercise: str) -> None:
    """Fail, naming the mistake, when the sanitizer reported anything or a launch failed."""
    found = diagnose_reports(obs, exercise)
    if found is not None:
        name, advice = found
        first = _reports(obs)[0]
        more = len(obs["reports"]) - 1
        fail(f"{label}: mini's CUDA sanitizer found a problem in your kernel: {name}. {advice}.\n"
             f"{_report_block(obs, first)}"
             + (f"\n({more} more report{'s' if more != 1 else ''}: run your function inside "
                f"`with mini.cuda.emulator.check() as run:` and print(run) to see them all)"
                if more > 0 else ""))
    for launch in obs["launches"]:
        if type(launch) is dict and launch.get("error") not in (None, "cudaSuccess"):
            fail(f"{label}: the launch of {launch.get('kernel')} (line {launch.get('line')}) "
                 f"ended with {launch.get('error')}")


def _counters(obs, kernel_prefix: str | None = None) -> dict:
    """Counters summed over the launches (of kernels whose name starts with the prefix)."""
    total: dict[str, float] = {}
    for l in obs["launches"]:
        if type(l) is not dict or type(l.get("counters")) is not dict:
            continue
        if kernel_prefix and not str(l.get("kernel", "")).startswith(kernel_prefix):
            continue
        for k, v in l["counters"].items():
            if type(v) in (int, float):
                total[k] = total.get(k, 0) + v
    div = lambda a, b: a / b if b else 0.0   # noqa: E731
    total["sectors_per_load_request"] = div(total.get("global_load_sectors", 0),
                                            total.get("global_load_requests", 0))
    total["sectors_per_store_request"] = div(total.get("global_store_sectors", 0),
                                             total.get("global_store_requests", 0))
    return total


def _value(obs, shape, what: str) -> np.ndarray:
    return expect_array(obs["value"], what, shape=shape, dtype=np.float32)


def _first_wrong(got, want, tol=None):
    bad = np.argwhere(got != want) if tol is None else np.argwhere(~(np.abs(got - want) <= tol))
    return bad


# =========================================================================== 04.cuda_add

@check("04.cuda_add", points=POINTS["04.cuda_add"])
def check_cuda_add(student):
    gen = rng()
    cases = [((1,), {}), ((37,), {}), ((1000,), {}), ((1000,), {"blocks": 2, "threads": 64}),
             ((4099,), {"blocks": 3, "threads": 32}), ((33, 65), {}), ((0,), {}),
             ((300,), {"blocks": 64, "threads": 128})]
    for shape, kw in cases:
        a, b = _f32(gen, shape), _f32(gen, shape)
        obs = _run(student, "cuda_add", a, b, **kw)
        label = obs["label"]
        _expect_clean(obs, label, "cuda_add")
        got = _value(obs, shape, label)
        want = a + b                              # one float32 addition: exact
        bad = _first_wrong(got, want)
        if len(bad):
            i = tuple(int(v) for v in bad[0])
            flat = int(np.ravel_multi_index(i, shape)) if shape else 0
            hint = ""
            if "blocks" in kw and flat >= kw["blocks"] * kw["threads"]:
                hint = (f"; the grid has {kw['blocks']} x {kw['threads']} = "
                        f"{kw['blocks'] * kw['threads']} threads for {a.size} elements: each "
                        f"thread must handle several (a grid-stride loop)")
            fail(f"{label}: {len(bad)} of {a.size} elements are wrong; first at {i}: expected "
                 f"{float(want[i]):.6g}, got {float(got[i]):.6g}{hint}")
        if kw.get("blocks") == 2:
            c = _counters(obs)
            if c["sectors_per_load_request"] > 8:
                fail(f"{label}: uncoalesced layout: the warps' loads touch "
                     f"{c['sectors_per_load_request']:.1f} sectors of 32 bytes per request "
                     f"(4 when the 32 threads of a warp read 32 neighbouring floats).  Neighbouring "
                     f"threads should take neighbouring elements: thread t takes element t, then "
                     f"t + (threads in the grid), ..., not a chunk of its own")
    # non-compact inputs arrive as views
    base = _f32(gen, (40, 24))
    a, b = base.T, _f32(gen, (24, 40))
    obs = _run(student, "cuda_add", a, b)
    _expect_clean(obs, obs["label"], "cuda_add")
    got = _value(obs, (24, 40), obs["label"] + " with a transposed view a")
    if not np.array_equal(got, a + b):
        fail(f"{obs['label']} with a transposed view a: the result is wrong; a kernel reads a flat "
             f"buffer, so compact the inputs first (np.ascontiguousarray; DeviceSession.to_device "
             f"does it)")
    a = _f32(gen, (5,))
    expect_raises(TypeError, student, a.astype(np.float64), a.astype(np.float64), name="cuda_add",
                  hint="the kernel reads float32: refuse other dtypes with TypeError")
    expect_raises(ValueError, student, _f32(gen, (4, 3)), _f32(gen, (3, 4)), name="cuda_add",
                  hint="arrays of different shapes (4, 3) and (3, 4) must be refused")
    expect_raises(ValueError, student, a, a, None, 2048, name="cuda_add",
                  hint="a block has at most 1024 threads: refuse threads=2048 with ValueError")
    expect_raises(ValueError, student, a, a, 0, 32, name="cuda_add",
                  hint="a grid needs at least one block: refuse blocks=0 with ValueError")


# =========================================================================== matmuls

_MATMUL_SHAPES = [(1, 1, 1), (37, 37, 37), (37, 20, 45), (17, 16, 33), (5, 0, 3)]


def _matmul_oracle(a, b):
    want = a.astype(np.float64) @ b.astype(np.float64)
    # any order of k float32 multiply-adds: within k·u·(|a| @ |b|) of the exact product
    tol = 2 * max(a.shape[1], 1) * _U32 * (np.abs(a).astype(np.float64) @ np.abs(b)) + 1e-30
    return want, tol


def _diagnose_matmul(got, a, b) -> str:
    if a.shape[0] == a.shape[1] and np.allclose(got, a.T @ b, rtol=1e-4, atol=1e-4):
        return ("; the result is A^T @ B: row/column swap (A is row-major: A[row][k] is "
                "A[row * K + k])")
    if got.shape[0] == got.shape[1] and np.allclose(got, (a @ b).T, rtol=1e-4, atol=1e-4):
        return "; the result is (A @ B)^T: row/column swap in C (C[row][col] is C[row * N + col])"
    if b.shape[0] == b.shape[1] and np.allclose(got, a @ b.T, rtol=1e-4, atol=1e-4):
        return "; the result is A @ B^T: row/column swap in B (B[k][col] is B[k * N + col])"
    return ""


def _check_matmul(student, name: str, gen) -> dict:
    counts = {}
    for m, k, n in _MATMUL_SHAPES + [(33, 48, 70)]:
        a, b = _f32(gen, (m, k)), _f32(gen, (k, n))
        obs = _run(student, name, a, b)
        label = obs["label"]
        _expect_clean(obs, label, name)
        got = _value(obs, (m, n), label)
        want, tol = _matmul_oracle(a, b)
        bad = _first_wrong(got.astype(np.float64), want, tol)
        if len(bad):
            i = tuple(int(v) for v in bad[0])
            rows = sorted({int(r) for r in bad[:, 0]})
            edge = ""
            whole = k // 16 * 16
            if k % 16 and np.allclose(got, a[:, :whole] @ b[:whole], rtol=1e-4, atol=1e-4):
                edge = ("; the result leaves out the last partial tile along K (the terms "
                        f"k >= {whole}): loop over (K + TILE - 1) / TILE tiles and load 0 past "
                        "the edge")
            elif m > 16 and m % 16 and rows[0] >= m // 16 * 16:
                edge = ("; only rows of the last, partial tile are wrong: sizes that are not "
                        "multiples of the tile need the partial tiles too")
            fail(f"{label}: {len(bad)} of {got.size} elements are wrong; first at {i}: expected "
                 f"{float(want[i]):.6g}, got {float(got[i]):.6g}"
                 + (_diagnose_matmul(got, a, b) or edge))
        counts[(m, k, n)] = _counters(obs)
    a = _f32(gen, (3, 4))
    expect_raises(TypeError, student, a.astype(np.float64), a.T.astype(np.float64), name=name,
                  hint="the kernel reads float32: refuse other dtypes with TypeError")
    expect_raises(ValueError, student, a, _f32(gen, (3, 4)), name=name,
                  hint="[3, 4] @ [3, 4]: the inner sizes differ, refuse with ValueError")
    expect_raises(ValueError, student, _f32(gen, (2, 3, 4)), _f32(gen, (4, 2)), name=name,
                  hint="only 2-D matrices: refuse a 3-D input with ValueError")
    return counts


@check("04.cuda_matmul_naive", points=POINTS["04.cuda_matmul_naive"])
def check_cuda_matmul_naive(student):
    _check_matmul(student, "cuda_matmul_naive", rng())


@check("04.cuda_matmul_tiled", points=POINTS["04.cuda_matmul_tiled"])
def check_cuda_matmul_tiled(student):
    counts = _check_matmul(student, "cuda_matmul_tiled", rng())
    from mini.napkin.cuda import matmul_global_reads
    m, k, n = 33, 48, 70
    loads = counts[(m, k, n)].get("global_loads", 0)
    naive = matmul_global_reads(m, n, k)
    if loads > matmul_global_reads(m, n, k, tile=8):
        fail(f"cuda_matmul_tiled on [{m}, {k}] @ [{k}, {n}]: your kernel read {int(loads)} floats "
             f"from global memory; reading each row of A and column of B per output takes "
             f"2*M*N*K = {naive}, tiles of T x T in shared memory take about 2*M*N*K/T.  Stage "
             f"tiles of A and B in __shared__ memory (T >= 8) and let every thread of the block "
             f"use them")


# =========================================================================== block sums

def _check_block_sum(student, name: str, gen) -> dict:
    obs_all = {}
    cases = [(0, None), (1, None), (37, 2), (1000, None), (1000, 3), (5000, 1), (4099, 8)]
    for n, blocks in cases:
        x = _f32(gen, (n,))
        kw = {} if blocks is None else {"blocks": blocks}
        obs = _run(student, name, x, **kw)
        label = obs["label"]
        _expect_clean(obs, label, name)
        got = obs["value"]
        if type(got) is not float:
            got = expect_float(got, label)
        want = float(np.sum(x, dtype=np.float64))
        tol = max(n - 1, 1) * _U32 * float(np.abs(x).sum(dtype=np.float64)) + 1e-30
        if not abs(got - want) <= tol:
            hint = ""
            if blocks and n > blocks * 256 and abs(got - float(np.sum(x[:blocks * 256], dtype=np.float64))) <= tol:
                hint = ("; that is the sum of the first blocks x 256 elements only: with fewer "
                        "threads than elements each thread first adds up several (a grid-stride loop)")
            elif blocks and blocks > 1:
                hint = "; with several blocks, the block sums must all be added (a second launch over partial[])"
            fail(f"{label}: expected {want:.7g}, got {got:.7g}{hint}")
        obs_all[(n, blocks)] = obs
    x = _f32(gen, (30, 17)).T
    obs = _run(student, name, x)
    got = obs["value"]
    want = float(np.sum(x, dtype=np.float64))
    if type(got) is not float or not abs(got - want) <= 510 * _U32 * float(np.abs(x).sum()) + 1e-30:
        fail(f"{obs['label']} with a transposed view x: expected {want:.7g}, got {describe(got)}")
    expect_raises(TypeError, student, np.ones(4), name=name,
                  hint="the kernel reads float32: refuse other dtypes with TypeError")
    expect_raises(ValueError, student, np.ones(4, np.float32), 0, name=name,
                  hint="blocks=0: a grid needs at least one block, refuse with ValueError")
    return obs_all


@check("04.cuda_block_sum_shared", points=POINTS["04.cuda_block_sum_shared"])
def check_cuda_block_sum_shared(student):
    runs = _check_block_sum(student, "cuda_block_sum_shared", rng())
    c = _counters(runs[(1000, 3)])
    if not c.get("shared_stores") or not c.get("barriers"):
        fail("cuda_block_sum_shared: your kernel adds without a tree in shared memory "
             f"({int(c.get('shared_stores', 0))} shared stores, {int(c.get('barriers', 0))} "
             f"barriers): each block should leave its threads' values in a __shared__ array and "
             f"halve the active threads step by step, with __syncthreads() between the steps")


@check("04.cuda_block_sum_shuffle", points=POINTS["04.cuda_block_sum_shuffle"])
def check_cuda_block_sum_shuffle(student):
    runs = _check_block_sum(student, "cuda_block_sum_shuffle", rng())
    c = _counters(runs[(1000, 3)])
    if not c.get("warp_ops"):
        fail("cuda_block_sum_shuffle: your kernel uses no warp shuffle: each warp should add its "
             "32 values with __shfl_down_sync (five steps: offsets 16, 8, 4, 2, 1)")


# =========================================================================== transpose

@check("04.cuda_transpose_tiled", points=POINTS["04.cuda_transpose_tiled"])
def check_cuda_transpose_tiled(student):
    gen = rng()
    counters = None
    for rows, cols in [(1, 1), (37, 70), (64, 96), (33, 1), (5, 0), (70, 45)]:
        x = _f32(gen, (rows, cols))
        obs = _run(student, "cuda_transpose_tiled", x)
        label = obs["label"]
        _expect_clean(obs, label, "cuda_transpose_tiled")
        got = _value(obs, (cols, rows), label)
        if not np.array_equal(got, x.T):
            hint = ""
            if got.size and np.array_equal(got.reshape(rows, cols), x):
                hint = "; that is the input in its own order, not transposed"
            bad = np.argwhere(got != x.T)
            fail(f"{label}: {len(bad)} of {got.size} elements are wrong; first at "
                 f"{tuple(int(v) for v in bad[0])}{hint}")
        if (rows, cols) == (64, 96):
            counters = _counters(obs)
    c = counters
    for way, key in (("reads", "sectors_per_load_request"), ("writes", "sectors_per_store_request")):
        if c[key] > 8:
            fail(f"cuda_transpose_tiled on a 64 x 96 matrix: uncoalesced layout: your kernel's "
                 f"global {way} touch {c[key]:.1f} sectors of 32 bytes per warp-wide request "
                 f"(32 when a warp walks down a column, 4 along a row).  Read a tile along rows "
                 f"into shared memory, then write its columns as rows of the output")
    if c.get("shared_bank_conflicts", 0) > 0:
        fail(f"cuda_transpose_tiled on a 64 x 96 matrix: bank conflicts in the shared tile "
             f"({int(c['shared_bank_conflicts'])}): reading a column of a 32-float-wide tile "
             f"hits one bank 32 times; pad each row of the tile to 33 floats")
    expect_raises(TypeError, student, np.ones((2, 2)), name="cuda_transpose_tiled",
                  hint="the kernel reads float32: refuse other dtypes with TypeError")
    expect_raises(ValueError, student, np.ones((2, 2, 2), np.float32), name="cuda_transpose_tiled",
                  hint="only 2-D matrices: refuse a 3-D array with ValueError")


# =========================================================================== napkin questions

@check("04.quiz_occupancy", points=POINTS["04.quiz_occupancy"])
def check_quiz_occupancy(student):
    from mini.napkin.cuda import blocks_per_sm
    gen = rng()
    cases = [(256, 32, 0), (256, 64, 48 * 1024), (1024, 32, 0), (128, 255, 0), (64, 16, 0),
             (512, 40, 100 * 1024), (32, 32, 0)]
    cases += [(int(gen.choice([32, 64, 96, 128, 256, 384, 512, 1024])), int(gen.integers(16, 129)),
               int(gen.choice([0, 4096, 16384, 49152, 65536]))) for _ in range(8)]
    for threads, regs, shared in cases:
        what = call_text("blocks_per_sm", threads, regs, shared)
        got = expect_int(call(student, threads, regs, shared, name="blocks_per_sm"), what,
                         allow_numpy=True)
        want = blocks_per_sm(threads, regs, shared)
        if got != want:
            limits = {"threads": 2048 // threads, "blocks": 32,
                      "registers": 65536 // (regs * threads),
                      "shared memory": (228 * 1024) // shared if shared else None}
            binding = min((v, k) for k, v in limits.items() if v is not None)[1]
            fail(f"{what}: expected {want} blocks per SM, got {got}; here the {binding} limit "
                 f"binds (an SM holds 2048 threads, 32 blocks, 65536 registers, 228 KB of "
                 f"shared memory: take the smallest quotient, rounded down)")


@check("04.quiz_matmul_reads", points=POINTS["04.quiz_matmul_reads"])
def check_quiz_matmul_reads(student):
    gen = rng()
    cases = [(64, 16), (32, 32), (1024, 16), (16, 16)] + [
        (int(gen.choice([8, 16, 32])) * int(gen.integers(1, 40)), int(gen.choice([8, 16, 32])))
        for _ in range(8)]
    for n, tile in cases:
        if n % tile:
            n = n // tile * tile + tile
        what = call_text("matmul_global_reads", n, tile)
        got = expect_tuple_of_ints(call(student, n, tile, name="matmul_global_reads"), what,
                                   length=2, allow_numpy=True)
        naive, tiled = 2 * n ** 3, 2 * n ** 3 // tile
        if got[0] != naive:
            fail(f"{what}: the naive kernel reads {naive} floats, you said {got[0]}: each of the "
                 f"N*N outputs reads a row of A and a column of B, 2*N floats")
        if got[1] != tiled:
            fail(f"{what}: the tiled kernel reads {tiled} floats, you said {got[1]}: every "
                 f"element loaded into a tile is used by T threads, so the reads drop by T")


@check("04.quiz_sectors", points=POINTS["04.quiz_sectors"])
def check_quiz_sectors(student):
    from mini.napkin.cuda import sectors_per_request
    gen = rng()
    for stride in [1, 2, 3, 4, 8, 9, 32, 1000, 0] + [int(v) for v in gen.integers(1, 64, 6)]:
        what = call_text("sectors_per_request", stride)
        got = expect_int(call(student, stride, name="sectors_per_request"), what, allow_numpy=True)
        want = sectors_per_request(stride)
        if got != want:
            hint = ("all 32 lanes read the same float: one sector" if stride == 0 else
                    "32 lanes read 32 floats 4*stride bytes apart; a sector is 32 bytes, so "
                    "neighbours share a sector while 4*stride < 32, and from stride 8 on every "
                    "lane needs its own")
            fail(f"{what}: expected {want} sectors, got {got}; {hint}")


@check("04.quiz_transfer_time", points=POINTS["04.quiz_transfer_time"])
def check_quiz_transfer_time(student):
    gen = rng()
    cases = [(4e6, 64.0), (4e6, 450.0), (4e6, 3350.0), (1e9, 64.0)] + [
        (float(gen.integers(1, 10**9)), float(gen.choice([16.0, 64.0, 450.0, 900.0, 3350.0])))
        for _ in range(6)]
    for nbytes, gbs in cases:
        what = call_text("transfer_time", nbytes, gbs)
        got = expect_float(call(student, nbytes, gbs, name="transfer_time"), what)
        want = nbytes / (gbs * 1e9)
        if not abs(got - want) <= 1e-9 * want:
            hint = ""
            if abs(got - want * 1e6) <= 1e-6 * want * 1e6:
                hint = ": that is microseconds; return seconds"
            elif abs(got - nbytes / gbs) <= 1e-9 * nbytes / gbs:
                hint = ": the bandwidth is in GB/s, 1e9 bytes per second"
            fail(f"{what}: expected {want:.6g} s, got {got!r}{hint}")


@check("04.quiz_overlap", points=POINTS["04.quiz_overlap"])
def check_quiz_overlap(student):
    from mini.napkin.cuda import pipeline_time
    gen = rng()
    cases = [(3.0, 2.0, 4), (2.0, 3.0, 4), (1.0, 1.0, 10), (5.0, 1.0, 1), (0.5, 4.0, 0)] + [
        (float(gen.uniform(0.1, 5)), float(gen.uniform(0.1, 5)), int(gen.integers(1, 50)))
        for _ in range(6)]
    for t_copy, t_compute, batches in cases:
        what = call_text("overlapped_time", t_copy, t_compute, batches)
        got = expect_float(call(student, t_copy, t_compute, batches, name="overlapped_time"), what)
        want = pipeline_time(t_copy, t_compute, batches)
        if not abs(got - want) <= 1e-9 * max(want, 1.0):
            serial = pipeline_time(t_copy, t_compute, batches, overlap=False)
            hint = ("that is the serial time, every batch paying both stages" if abs(got - serial) < 1e-9
                    else "the first copy and the last kernel are alone; every other step costs "
                         "the longer of the two stages")
            fail(f"{what}: expected {want:.6g}, got {got!r}; {hint}")
