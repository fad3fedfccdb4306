"""Hidden checks of chapter 06 (scaling): one check per exercise slot, plus three quizzes.

The distributed exercises are checked on real MPI ranks: the scenarios of
:mod:`grader.worker.scenarios.ch06` start ``mpiexec`` jobs next to the student's code (in
the sandbox at autograde) and report plain data -- each rank's results and its recorded
communication (:func:`mini.distributed.record_communication`) -- and the checks here
compare them with numpy oracles, with mini's traffic rules for a ring
(:func:`mini.distributed.ring.ring_traffic_problems`), or with single-process training run
by mini's reference in this (trusted) process.  The ring is proven by its traffic, not only
its result: a reduce to one rank followed by a broadcast gets the right sum and still fails.

Every job has a timeout per operation and one for the whole job, after which every rank
prints its stack; a failed job becomes a message that names the rank, the error and the
case it was working on.  No fixed ports: mpiexec connects the ranks.

Tolerances.  Integer-valued data is summed exactly in any order, so ring results are
compared exactly.  Training runs in float64: p ranks averaging gradients sum the same terms
in another order than one process, a relative difference of a few 1e-16 per step, so
parameters after 3 steps compare with ``rtol=1e-9``.  ZeRO-1 applies AdamW's elementwise
arithmetic to the same float32 numbers as plain AdamW; ``rtol=1e-6`` (a few ulp) allows a
fused kernel that vectorizes a shard differently from the whole vector.
"""
from __future__ import annotations

import math
import re

import numpy as np

from grader.checks import NotDone, check, part
from grader.checks.helpers import (call, call_text, describe, expect_float, expect_int,
                                   expect_tuple_of_ints, fail, rng)
from grader.checks.student import StudentRaised
from grader.worker.codec import ExceptionRecord

CANARY = "mini-grader-canary: hidden checks of chapter 06 (never in feedback)"

# Points, the one source: `mini-course build` prices the notebook's test cells and its
# "What you build" table from this dict (100 in all for the chapter).
POINTS = {
    "06.checkpoint_forward": 8,
    "06.checkpoint_backward": 10,
    "06.shard_bounds": 6,
    "06.ring_allreduce": 16,
    "06.assign_buckets": 6,
    "06.mark_grad_ready": 10,
    "06.allreduce_hook": 10,
    "06.accumulation_step": 8,
    "06.distributed_sampler_indices": 6,
    "06.zero_step": 14,
    "06.quiz_ring_time": 2,
    "06.quiz_zero_memory": 2,
    "06.quiz_bubble": 2,
}

#: The mini modules that own this chapter's slots (importing them declares the slots).
SLOT_OWNERS = ("mini.utils.checkpoint", "mini.distributed.ring", "mini.nn.parallel.distributed",
               "mini.distributed.accumulation", "mini.utils.data.distributed",
               "mini.distributed.optim.zero_redundancy_optimizer")


def import_slot_owners() -> None:
    import importlib
    for name in SLOT_OWNERS:
        importlib.import_module(name)


# =========================================================================== jobs on ranks

_NOT_DONE = re.compile(r"(?:exercise )?(\d\d\.[A-Za-z0-9_]+) (?:is not implemented yet|is part "
                       r"of mini that you build)")


_NOT_DONE_SLOT = re.compile(r"^\d\d\.[A-Za-z0-9_]+$")


def _scenario(fn, name: str, what: str, **params):
    """``fn.scenario(name, ...)``; what the student's code raised becomes a message."""
    try:
        return fn.scenario(name, **params)
    except StudentRaised as e:
        if e.record.not_implemented:
            raise NotDone(e.record.slot_id or fn.slot, e.record.text()) from None
        if not e.record.is_a("Exception"):
            raise
        fail(f"{what} raised {e.record.text()}")


def _job_values(job, slot: str, what: str, nprocs: int, in_part: bool = False,
                deadlock_hint: str = "") -> list:
    """The per-rank values of a job the scenario started, or a failure that says what went
    wrong: not implemented (this exercise or an earlier one), an error on a rank (which,
    doing what), a deadlock or a job that never finished."""
    if type(job) is not dict or type(job.get("ok")) is not bool:
        fail(f"{what}: the grader's job did not report back ({describe(job)})")
    errors = job.get("errors") if type(job.get("errors")) is dict else {}
    progress = job.get("progress") if type(job.get("progress")) is dict else {}
    summary = job.get("summary") if type(job.get("summary")) is str else ""
    if job["ok"]:
        values = job.get("values")
        if type(values) is not list or len(values) != nprocs:
            fail(f"{what}: the ranks did not return their observations ({describe(values)})")
        return values
    texts = [t for t in errors.values() if type(t) is str] + [summary]
    for text in texts:
        m = _NOT_DONE.search(text)
        if m:
            other = m.group(1)
            if other == slot and not in_part:
                raise NotDone(slot)
            if other != slot:
                if not in_part:
                    raise NotDone(other)
                fail(f"{what}: this runs your exercise {other}, which is not implemented yet: "
                     f"write it first")
            fail(f"{what}: not implemented yet")
    where = "; ".join(f"rank {r} was in case {label}" for r, label in sorted(progress.items())
                      if type(label) is str)
    where = f" ({where})" if where else ""
    if job.get("timed_out"):
        fail(f"{what}: the ranks did not finish and were stopped after the job's time limit"
             f"{where}; every rank printed its stack: does a loop never end, or does a rank "
             f"wait for a message that no rank sends?")
    if "did not complete within" in summary:
        op = re.search(r": (\w+)\((?:dst|src)=(\d+)", summary)
        head = (f"{what}: a rank waited too long in {op.group(1)} with rank {op.group(2)}"
                if op else f"{what}: a rank waited too long")
        fail(f"{head}{where} and the job was stopped (deadlock){deadlock_hint}")
    fail(f"{what}: {summary or 'the job failed'}{where}")


def _dict(value, what: str) -> dict:
    if type(value) is not dict:
        fail(f"{what}: the ranks' observations are malformed ({describe(value)})")
    return value


def _as_array(value, what: str) -> np.ndarray:
    if type(value) is not np.ndarray:
        fail(f"{what}: expected a numpy array of the result, got {describe(value)}")
    return value


def _sizes(n: int, p: int) -> list[int]:
    base, extra = divmod(n, p)
    return [base + (1 if c < extra else 0) for c in range(p)]


def _bounds(n: int, p: int) -> list[tuple[int, int]]:
    out, start = [], 0
    for size in _sizes(n, p):
        out.append((start, start + size))
        start += size
    return out


def _check_chunks(chunks, n: int, p: int, what: str) -> None:
    """The student's shard_bounds as the ranks saw it: name it if it is the cause."""
    if type(chunks) is not list:
        return
    got = [tuple(c) if type(c) is tuple else c for c in chunks]
    if got != _bounds(n, p):
        fail(f"{what}: your shard_bounds({n}, {p}, c) for c = 0..{p - 1} gives {got}, not the "
             f"split {_bounds(n, p)}: fix exercise 06.shard_bounds first (the ring, ZeRO and "
             f"the checkpoints cut arrays with it)")


# =========================================================================== 06.shard_bounds

@check("06.shard_bounds", points=POINTS["06.shard_bounds"])
def check_shard_bounds(fn):
    gen = rng()
    cases = [(10, 4), (12, 4), (3, 4), (0, 3), (7, 1), (1, 5), (1001, 3), (5, 5)]
    cases += [(int(gen.integers(0, 400)), int(gen.integers(1, 9))) for _ in range(12)]
    for n, p in cases:
        want = _bounds(n, p)
        got = []
        for r in range(p):
            what = call_text("shard_bounds", n, p, r)
            got.append(expect_tuple_of_ints(call(fn, n, p, r, name="shard_bounds"), what, 2,
                                            allow_numpy=False))
        if got == want:
            continue
        sizes = [b - a for a, b in got]
        if sorted(sizes) == sorted(_sizes(n, p)) and sizes != _sizes(n, p):
            fail(f"shard_bounds({n}, {p}, r) for r = 0..{p - 1} gives {got}: the pieces have "
                 f"the right sizes in the wrong order; the first numel % world_size ranks get "
                 f"the larger pieces (expected {want})")
        if got and (got[0][0] != 0 or any(a[1] != b[0] for a, b in zip(got, got[1:]))
                    or got[-1][1] != n):
            fail(f"shard_bounds({n}, {p}, r) for r = 0..{p - 1} gives {got}: the pieces must be "
                 f"contiguous and cover [0, {n}) exactly once, in rank order")
        if max(sizes) - min(sizes) > 1:
            fail(f"shard_bounds({n}, {p}, r) for r = 0..{p - 1} gives pieces of sizes {sizes}: "
                 f"sizes may differ by at most one (expected {want})")
        fail(f"shard_bounds({n}, {p}, r) for r = 0..{p - 1}: expected {want}, got {got}")


# =========================================================================== 06.ring_allreduce

def _ring_cases(gen) -> list[dict]:
    cases = []
    for n in (0, 1, 2, 3, 5, 7, 10, 64, int(gen.integers(900, 1100))):
        cases.append({"n": n, "dtype": "float32", "kind": "int", "shape": [n]})
    cases.append({"n": 15, "dtype": "float32", "kind": "int", "shape": [3, 5]})
    cases.append({"n": int(gen.integers(10, 40)), "dtype": "int64", "kind": "int", "shape": None})
    cases.append({"n": int(gen.integers(200, 300)), "dtype": "float64", "kind": "float",
                  "shape": None})
    for c in cases:
        c["seed"] = int(gen.integers(0, 2**31))
        if c["shape"] is None:
            c["shape"] = [c["n"]]
    return cases


def _ring_inputs(case: dict, p: int) -> list[np.ndarray]:
    from grader.worker.scenarios.ch06 import rank_values
    return [rank_values(case["seed"], r, case["n"], case["kind"], case["dtype"])
            .reshape(tuple(case["shape"])) for r in range(p)]


def _ring_sum_problem(case: dict, p: int, r: int, got, inputs: list, chunks) -> str | None:
    """None if ``got`` is the sum of ``inputs``; else what is wrong, diagnosed."""
    n, shape, dtype = case["n"], tuple(case["shape"]), np.dtype(case["dtype"])
    label = f"ring_allreduce on {p} rank(s), N={n} ({dtype}, shape {shape}), rank {r}"
    if type(got) is not np.ndarray:
        return f"{label}: the tensor's values could not be read ({describe(got)})"
    if got.shape != shape or got.dtype != dtype:
        return (f"{label}: the tensor now has shape {got.shape} and dtype {got.dtype}; it must "
                f"keep shape {shape} and dtype {dtype} (write the sum into it, in place)")
    want = np.sum(np.stack(inputs).astype(np.float64), axis=0).astype(dtype) \
        if case["kind"] == "float" else np.sum(np.stack(inputs), axis=0, dtype=dtype)
    # float data: p terms of size ~1 in float64; a few ulp per addition
    ok = np.allclose(got, want, rtol=1e-12, atol=1e-12) if case["kind"] == "float" \
        else np.array_equal(got, want)
    if ok:
        return None
    if p > 1 and np.array_equal(got, inputs[r]):
        return (f"{label}: the tensor still holds this rank's own values: write the result into "
                f"the tensor you were given (in place), not into a copy")
    if p == 1:
        return f"{label}: with one rank the tensor must stay as it is"
    flat_got, flat_want = got.reshape(-1), want.reshape(-1)
    bad = [c for c, (a, b) in enumerate(_bounds(n, p))
           if not np.allclose(flat_got[a:b], flat_want[a:b], rtol=1e-12, atol=1e-12)]
    _check_chunks(chunks, n, p, label)
    return (f"{label}: wrong values in chunk(s) {bad} of {p} (chunk c is shard_bounds(N, p, "
            f"c)); a chunk that is wrong on some ranks was sent or received in the wrong step "
            f"(check which chunk step s sends and receives in each phase), or added where it "
            f"should have been copied")


#: Seconds an operation of the large-message ring may wait: a legitimate exchange of 1 MB
#: takes milliseconds even on a loaded laptop; a deadlocked one never completes.
RING_LARGE_TIMEOUT = 4.0


@check("06.ring_allreduce", points=POINTS["06.ring_allreduce"])
def check_ring_allreduce(fn):
    from mini.distributed.events import COLLECTIVE_OPS
    from mini.distributed.ring import ring_traffic_problems
    gen = rng()
    cases = _ring_cases(gen)
    worlds = [4, 3, 2, 1]
    big = (1 << 18) + int(gen.integers(1, 999))
    large = [{"n": big, "dtype": "float32", "kind": "int", "shape": [big],
              "seed": int(gen.integers(0, 2**31))}]
    job = _scenario(fn, "ring", "ring_allreduce", cases=cases, worlds=worlds)
    ranks = _job_values(job, fn.slot, "ring_allreduce on 1 to 4 ranks", max(worlds))
    per_rank = [_dict(v, "ring_allreduce") for v in ranks]

    def rows(p, r):
        got = per_rank[r].get(p)
        if type(got) is not list or len(got) != len(cases):
            fail(f"ring_allreduce on {p} ranks: rank {r} did not report every case")
        return [_dict(x, "ring_allreduce") for x in got]

    # a built-in collective doing the work earns nothing
    for p in worlds:
        for r in range(p):
            for case, row in zip(cases, rows(p, r)):
                recs = row.get("records") if type(row.get("records")) is list else []
                used = sorted({e.get("op") for e in recs if type(e) is dict
                               and e.get("op") in COLLECTIVE_OPS})
                if used:
                    fail(f"ring_allreduce calls {', '.join(used)} (N={case['n']}, {p} ranks): a "
                         f"built-in collective does the work, and that earns nothing here; "
                         f"build the all-reduce from send and recv (isend/irecv) only")

    with part("the sum, identical on every rank, in place", 4):
        for p in worlds:
            for i, case in enumerate(cases):
                inputs = _ring_inputs(case, p)
                results = []
                for r in range(p):
                    row = rows(p, r)[i]
                    problem = _ring_sum_problem(case, p, r, row.get("result"), inputs,
                                                row.get("chunks"))
                    if problem:
                        fail(problem)
                    if row.get("returned") is not None:
                        fail(f"ring_allreduce should return None (it works in place), got a "
                             f"{row['returned']}")
                    results.append(row["result"])
                if any(x.tobytes() != results[0].tobytes() for x in results):
                    fail(f"ring_allreduce on {p} ranks, N={case['n']} ({case['dtype']}): the ranks "
                         f"hold different bits: every element of the sum must be computed once "
                         f"(by the rank that finishes its chunk) and copied to the others")

    with part("ring traffic: the next rank only, 2(p-1) chunk-sized messages", 8):
        for p in worlds:
            for i, case in enumerate(cases):
                itemsize = np.dtype(case["dtype"]).itemsize
                for r in range(p):
                    recs = [e for e in rows(p, r)[i].get("records") or [] if type(e) is dict]
                    problems = ring_traffic_problems(recs, case["n"], p, r, itemsize)
                    if problems:
                        fail(f"ring_allreduce on {p} ranks, N={case['n']}: {problems[0]}")

    with part("large messages, no deadlock", 4):
        hint = (": with messages this large (over MPI's eager limit) a send completes only when "
                "the receiver has posted its receive; if every rank first waits for its own "
                "send, none is receiving. Start the send with isend, receive, then wait for "
                "the send")
        job = _scenario(fn, "ring", "ring_allreduce", cases=large, worlds=[2],
                        op_timeout=RING_LARGE_TIMEOUT)
        values = _job_values(job, fn.slot, f"ring_allreduce of N={big} float32 elements on 2 "
                             f"ranks", 2, in_part=True, deadlock_hint=hint)
        case = large[0]
        inputs = _ring_inputs(case, 2)
        for r in range(2):
            got = _dict(values[r], "ring_allreduce").get(2)
            if type(got) is not list or len(got) != 1:
                fail("ring_allreduce on 2 ranks: a rank did not report the large case")
            row = _dict(got[0], "ring_allreduce")
            problem = _ring_sum_problem(case, 2, r, row.get("result"), inputs, row.get("chunks"))
            if problem:
                fail(problem)
            recs = [e for e in row.get("records") or [] if type(e) is dict]
            problems = ring_traffic_problems(recs, big, 2, r, 4)
            if problems:
                fail(f"ring_allreduce on 2 ranks, N={big}: {problems[0]}")


# =========================================================================== 06.assign_buckets

def _buckets(sizes: list[int], cap: int) -> list[list[int]]:
    out, current, total = [], [], 0
    for i in range(len(sizes) - 1, -1, -1):
        current.append(i)
        total += sizes[i]
        if total >= cap:
            out.append(current)
            current, total = [], 0
    if current:
        out.append(current)
    return out


def _as_buckets(value, what: str) -> list[list[int]]:
    if type(value) not in (list, tuple):
        fail(f"{what} should return a list of buckets (lists of parameter indices), got "
             f"{describe(value)}")
    out = []
    for k, b in enumerate(value):
        if type(b) not in (list, tuple):
            fail(f"{what}: bucket {k} should be a list of parameter indices, got {describe(b)}")
        out.append([expect_int(i, f"{what}: bucket {k}", allow_numpy=True) for i in b])
    return out


@check("06.assign_buckets", points=POINTS["06.assign_buckets"])
def check_assign_buckets(fn):
    gen = rng()
    cases = [([], 10), ([4, 4, 4, 4], 8), ([4, 4, 4], 8), ([100, 1, 1], 8), ([1, 1, 100], 8),
             ([5, 5, 5], 1), ([3, 3, 3, 3], 7)]
    for _ in range(10):
        k = int(gen.integers(1, 14))
        sizes = [int(v) for v in gen.integers(1, 60, k) * 4]
        cases.append((sizes, int(gen.integers(4, 200))))
    for sizes, cap in cases:
        what = call_text("assign_buckets", sizes, cap)
        got = _as_buckets(call(fn, list(sizes), cap, name="assign_buckets"), what)
        want = _buckets(sizes, cap)
        if got == want:
            continue
        flat = sorted(i for b in got for i in b)
        if flat != list(range(len(sizes))):
            fail(f"{what} gave {got}: every parameter index 0..{len(sizes) - 1} must be in "
                 f"exactly one bucket")
        if any(len(b) == 0 for b in got):
            fail(f"{what} gave {got}: a bucket is empty")
        forward = [list(reversed([len(sizes) - 1 - i for i in b]))
                   for b in _buckets(list(reversed(sizes)), cap)]
        if got == [[len(sizes) - 1 - i for i in b] for b in _buckets(list(reversed(sizes)), cap)] \
                or got == forward or (got and got[0] and got[0][0] == 0 and len(sizes) > 1):
            fail(f"{what} gave {got}, expected {want}: start from the last parameter: backward "
                 f"produces the gradients of the last layers first, so their bucket can be sent "
                 f"while earlier layers are still computing")
        strict = []
        current, total = [], 0
        for i in range(len(sizes) - 1, -1, -1):
            if current and total + sizes[i] > cap:
                strict.append(current)
                current, total = [], 0
            current.append(i)
            total += sizes[i]
        if current:
            strict.append(current)
        if got == strict:
            fail(f"{what} gave {got}, expected {want}: a bucket closes when its total reaches "
                 f"the cap (>=) with the parameter that reached it, not before adding a "
                 f"parameter that would go over it")
        fail(f"{what}: expected {want}, got {got}")


# =========================================================================== 06.mark_grad_ready

def _launch_history(buckets: list[list[int]], order: list[int]) -> list[list[int]]:
    n = sum(len(b) for b in buckets)
    bucket_of = [0] * n
    for k, b in enumerate(buckets):
        for i in b:
            bucket_of[i] = k
    pending = [len(b) for b in buckets]
    nxt, launched, out = 0, [], []
    for i in order:
        pending[bucket_of[i]] -= 1
        while nxt < len(buckets) and pending[nxt] == 0:
            launched.append(nxt)
            nxt += 1
        out.append(list(launched))
    return out


@check("06.mark_grad_ready", points=POINTS["06.mark_grad_ready"])
def check_mark_grad_ready(fn):
    gen = rng()
    n = int(gen.integers(7, 11))
    cuts = sorted(int(c) for c in gen.choice(np.arange(1, n), size=3, replace=False))
    idx = list(range(n - 1, -1, -1))
    buckets = [idx[a:b] for a, b in zip([0] + cuts, cuts + [n])]
    orders = [list(range(n - 1, -1, -1))]              # backward's usual order
    orders.append(buckets[1] + buckets[0] + [i for b in buckets[2:] for i in b])  # 1 before 0
    for _ in range(3):
        orders.append([int(i) for i in gen.permutation(n)])
    runs = _scenario(fn, "mark_ready", "mark_grad_ready", buckets=buckets, orders=orders)
    if type(runs) is not list or len(runs) != len(orders):
        fail(f"mark_grad_ready: the grader's scenario did not complete ({describe(runs)})")
    histories = []
    for order, run in zip(orders, runs):
        run = _dict(run, "mark_grad_ready")
        err = run.get("error")
        if type(err) is ExceptionRecord:
            fail(f"mark_grad_ready raised {err.text()} (buckets {buckets}, gradients ready in "
                 f"the order {order})")
        hist = run.get("history")
        if type(hist) is not list or len(hist) != len(order):
            fail("mark_grad_ready: the scenario's record is malformed")
        steps = []
        for h in hist:
            h = _dict(h, "mark_grad_ready")
            if h.get("returned") is not None:
                fail(f"mark_grad_ready should return None, got a {h['returned']}")
            launched = h.get("launched")
            if type(launched) is not list or any(type(b) is not int for b in launched):
                fail(f"mark_grad_ready: launch() was called with {describe(launched)}; call it "
                     f"with the bucket's index (an int)")
            steps.append(launched)
        histories.append(steps)

    def context(order, k):
        return (f"(buckets {buckets}; gradients ready in the order {order}; after parameter "
                f"{order[k]})")

    with part("never launches a bucket before all its gradients are ready", 4):
        for order, steps in zip(orders, histories):
            ready = set()
            for k, launched in enumerate(steps):
                ready.add(order[k])
                for b in launched:
                    if not 0 <= b < len(buckets):
                        fail(f"mark_grad_ready launched bucket {b}, which does not exist "
                             f"{context(order, k)}")
                    missing = [i for i in buckets[b] if i not in ready]
                    if missing:
                        fail(f"mark_grad_ready launched bucket {b} while the gradients of "
                             f"parameters {missing} were not ready {context(order, k)}: a bucket "
                             f"reduced before its gradients are final averages stale values")
    with part("launches the buckets in order, each once", 3):
        for order, steps in zip(orders, histories):
            for k, launched in enumerate(steps):
                if launched != list(range(len(launched))):
                    fail(f"mark_grad_ready launched the buckets in the order {launched} "
                         f"{context(order, k)}: every rank must start them in bucket order 0, "
                         f"1, 2, ... and each once, or the ranks' all-reduces do not match "
                         f"(MPI pairs collectives by the order they are issued)")
    with part("launches each bucket as soon as it and the earlier ones are ready", 3):
        for order, steps in zip(orders, histories):
            want = _launch_history(buckets, order)
            for k, (got, exp) in enumerate(zip(steps, want)):
                if len(got) < len(exp):
                    fail(f"mark_grad_ready had launched {got}, but buckets {exp[len(got):]} were "
                         f"ready to go {context(order, k)}: launch as soon as a bucket and all "
                         f"earlier ones are complete, so that its communication overlaps the "
                         f"rest of backward")
                if got != exp:
                    fail(f"mark_grad_ready had launched {got}, expected {exp} {context(order, k)}")


# =========================================================================== DDP runs

DDP_SPEC = {"dims": [6, 10, 10, 3], "steps": 3, "batch": 12, "lr": 0.1, "cap_mb": 0.0005}


def _params_close(got, want: list, what: str) -> str | None:
    if type(got) is not list or len(got) != len(want):
        return f"{what}: the parameters could not be read ({describe(got)})"
    for k, (g, w) in enumerate(zip(got, want)):
        if type(g) is not np.ndarray or g.shape != w.shape:
            return f"{what}: parameter {k} has the wrong shape"
        # float64; see the module docstring for the tolerance
        if not np.allclose(g, w, rtol=1e-9, atol=1e-12):
            return (f"{what}: parameter {k} differs from one process training on the whole "
                    f"batch (largest difference {float(np.max(np.abs(g - w))):.3g})")
    return None


def _overlap_problem(records: list) -> str | None:
    """From one backward's event log: did the first bucket's all-reduce start before the
    last gradient hook fired, and was it still in flight then?"""
    hooks = [e for e in records if type(e) is dict and e.get("op") == "grad_ready"]
    reduces = [e for e in records if type(e) is dict and e.get("op") == "all_reduce"
               and str(e.get("origin") or "").startswith("ddp bucket")]
    if not hooks or not reduces:
        return "the event log shows no gradient hooks or no bucket all-reduces"
    first, last_hook = reduces[0], hooks[-1]
    if not first["seq"] < last_hook["seq"]:
        return ("the first bucket's all-reduce was issued only after the last gradient hook "
                "fired: communication did not overlap backward (06.mark_grad_ready launches a "
                "bucket as soon as it is complete)")
    later = [h for h in hooks if h["seq"] > first["seq"]]
    if first.get("end_seq") is not None and later and first["end_seq"] < later[0]["seq"]:
        return ("the first bucket's all-reduce had already completed before the next gradient "
                "hook fired: the hook waited for it, so backward stood still during the "
                "communication")
    return None


# =========================================================================== 06.allreduce_hook

@check("06.allreduce_hook", points=POINTS["06.allreduce_hook"])
def check_allreduce_hook(fn):
    gen = rng()
    direct = [{"n": int(gen.integers(5, 40)), "dtype": "float64",
               "seed": int(gen.integers(0, 2**31))},
              {"n": int(gen.integers(40, 200)), "dtype": "float32",
               "seed": int(gen.integers(0, 2**31))}]
    worlds = [3, 2]
    ddp = dict(DDP_SPEC, seed=int(gen.integers(0, 2**20)))
    job = _scenario(fn, "hook", "allreduce_hook", direct=direct, worlds=worlds, ddp=ddp)
    values = [_dict(v, "allreduce_hook") for v in
              _job_values(job, fn.slot, "allreduce_hook on 3 ranks", max(worlds))]
    from grader.worker.scenarios.ch06 import rank_values

    def rows(p, r):
        got = _dict(values[r].get("direct"), "allreduce_hook").get(p)
        if type(got) is not list or len(got) != len(direct):
            fail(f"allreduce_hook on {p} ranks: rank {r} did not report every case")
        return [_dict(x, "allreduce_hook") for x in got]

    with part("the average over the ranks, in the bucket's buffer", 5):
        for p in worlds:
            for i, case in enumerate(direct):
                inputs = [rank_values(case["seed"], r, case["n"], "float", case["dtype"])
                          for r in range(p)]
                total = np.sum(np.stack(inputs).astype(np.float64), axis=0)
                want = total / p
                tol = dict(rtol=1e-5, atol=1e-6) if case["dtype"] == "float32" \
                    else dict(rtol=1e-12, atol=1e-12)
                for r in range(p):
                    got = rows(p, r)[i].get("result")
                    label = f"allreduce_hook on {p} ranks ({case['dtype']}, {case['n']} values), rank {r}"
                    if type(got) is not np.ndarray or got.shape != want.shape:
                        fail(f"{label}: the bucket's buffer could not be read ({describe(got)})")
                    if got.dtype != np.dtype(case["dtype"]):
                        fail(f"{label}: the buffer changed dtype to {got.dtype}")
                    if np.allclose(got, want, **tol):
                        continue
                    if np.allclose(got, total, **tol):
                        fail(f"{label}: the buffer holds the sum over the ranks, not the "
                             f"average: divide by the world size")
                    for k in range(1, 9):
                        if k != p and np.allclose(got, total / k, **tol):
                            fail(f"{label}: the buffer holds the sum divided by {k}, but the "
                                 f"world has {p} ranks: average by the world size "
                                 f"(mini.distributed.get_world_size())")
                    if np.allclose(got, inputs[r] / p, **tol):
                        fail(f"{label}: the buffer was divided but never summed over the ranks: "
                             f"the all-reduce must work on the buffer itself, in place")
                    if np.allclose(got, inputs[r], **tol):
                        fail(f"{label}: the buffer is unchanged: reduce bucket.buffer() in place")
                    fail(f"{label}: the buffer should hold the average over the ranks "
                         f"(largest difference {float(np.max(np.abs(got - want))):.3g})")
    with part("starts the all-reduce and returns without waiting", 2):
        for p in worlds:
            for row in rows(p, 0):
                if row.get("returned") is None:
                    fail("allreduce_hook returned None: return the Work of the non-blocking "
                         "all-reduce (async_op=True), so DDP can wait for it after backward")
                started = [e for e in row.get("at_return") or []
                           if type(e) is dict and e.get("op") == "all_reduce"]
                if len(started) != 1:
                    fail(f"allreduce_hook issued {len(started)} all_reduce operations on one "
                         f"bucket; start exactly one, on the whole buffer")
                if started[0].get("end_seq") is not None:
                    fail("allreduce_hook waited for its all-reduce before returning: DDP waits "
                         "for every bucket after backward; waiting in the hook stops backward "
                         "until the bytes have travelled (no overlap)")
    with part("DDP on 3 ranks trains like one process on the whole batch, overlapped", 3):
        want = fn.expected("ddp_single", **{k: ddp[k] for k in ("seed", "dims", "steps",
                                                                  "batch", "lr")})
        for r in range(max(worlds)):
            d = _dict(values[r].get("ddp"), "allreduce_hook (DDP)")
            missing = d.get("missing")
            if missing is not None:
                slot = missing if type(missing) is str and _NOT_DONE_SLOT.match(missing) else "?"
                if slot == fn.slot:
                    raise NotDone(slot)
                fail(f"DDP training: this runs your exercise {slot}, which is not implemented "
                     f"yet: write it first")
            problem = _params_close(d.get("params"), want, f"DDP training on 3 ranks (rank {r})")
            if problem:
                fail(problem + "; is each bucket averaged exactly once, over all ranks?")
            logs = d.get("logs")
            if type(logs) is not list or not logs:
                fail("DDP training: the event log is missing")
            problem = _overlap_problem(logs[0])
            if problem:
                fail(f"DDP training on 3 ranks (rank {r}): {problem}")


# =========================================================================== 06.accumulation_step

ACC_SPEC = {"dims": [5, 8, 2], "steps": 2, "batch": 12, "lr": 0.1, "cap_mb": 0.0002,
            "worlds": [[3, 2], [2, 3]]}


@check("06.accumulation_step", points=POINTS["06.accumulation_step"])
def check_accumulation_step(fn):
    gen = rng()
    spec = dict(ACC_SPEC, seed=int(gen.integers(0, 2**20)))
    job = _scenario(fn, "accumulate", "accumulation_step", spec=spec)
    values = [_dict(v, "accumulation_step") for v in
              _job_values(job, fn.slot, "accumulation_step on 3 ranks", 3)]
    want = _dict(fn.expected("accumulate_single", spec=spec), "accumulation_step")

    def result(p, r):
        return _dict(values[r].get(p), f"accumulation_step on {p} ranks")

    with part("the same step as one process on the whole batch", 4):
        for p, m in spec["worlds"]:
            got = [result(p, r).get("params") for r in range(p)]
            for r in range(p):
                problem = _params_close(got[r], want["params"],
                                        f"{m} micro-batches on each of {p} ranks (rank {r})")
                if not problem:
                    continue
                others = [q for q in range(p) if q != r
                          and _params_close(got[q], got[r], "") is None]
                if len(others) < p - 1:
                    fail(f"{problem}; the ranks ended with different weights: the gradients "
                         f"were never averaged over the ranks (the last micro-batch's backward "
                         f"must run outside no_sync)")
                fail(f"{problem}; the step must use the gradient of the mean loss over all "
                     f"micro-batches (the gradients of m backwards add up in .grad), and start "
                     f"from zeroed gradients")
    with part("communicates once per step", 3):
        for p, m in spec["worlds"]:
            res = result(p, 0)
            reduces, buckets = res.get("reduces"), res.get("buckets")
            if type(reduces) is not list or type(buckets) is not int:
                fail("accumulation_step: the event log is missing")
            for s, k in enumerate(reduces):
                if k == buckets:
                    continue
                if k == m * buckets:
                    fail(f"with {m} micro-batches on {p} ranks, DDP all-reduced its {buckets} "
                         f"bucket(s) after every micro-batch ({k} all-reduces in step {s}): run "
                         f"all but the last backward inside model.no_sync()")
                if k == 0:
                    fail(f"with {m} micro-batches on {p} ranks, DDP never communicated in step "
                         f"{s}: the last micro-batch's backward must run outside no_sync()")
                fail(f"with {m} micro-batches on {p} ranks, DDP issued {k} all-reduces in step "
                     f"{s}; one per bucket ({buckets}) in the last backward is right")
    with part("returns the mean loss; refuses an empty list", 1):
        for p, _ in spec["worlds"]:
            for r in range(p):
                losses = result(p, r).get("losses")
                exp = want["losses"][p][r]
                if type(losses) is not list or len(losses) != len(exp):
                    fail("accumulation_step: the losses could not be read")
                for s, (g, e) in enumerate(zip(losses, exp)):
                    if type(g) is not float:
                        fail(f"accumulation_step should return the mean loss as a Python float, "
                             f"got {describe(g)}")
                    if not math.isclose(g, e, rel_tol=1e-9, abs_tol=1e-12):
                        fail(f"accumulation_step returned {g:.6g} in step {s} on rank {r}, "
                             f"expected the mean of the micro-batches' losses {e:.6g}")
            empty = result(p, 0).get("empty")
            if empty != "ValueError":
                fail(f"accumulation_step(model, optimizer, loss_fn, []) should raise "
                     f"ValueError, {'raised ' + empty if empty else 'returned'}")


# =========================================================================== 06.distributed_sampler_indices

def _sampler(order: list, p: int, r: int, drop_last: bool) -> list:
    n = len(order)
    if drop_last:
        per = n // p
        padded = order[:per * p]
    else:
        per = -(-n // p)
        padded = list(order)
        while len(padded) < per * p:
            padded += order[:per * p - len(padded)]
    return padded[r::p]


@check("06.distributed_sampler_indices", points=POINTS["06.distributed_sampler_indices"])
def check_sampler(fn):
    gen = rng()
    cases = []
    for n in (0, 1, 2, 3, 5, 10, 12, 13, int(gen.integers(14, 60))):
        for p in (1, 2, 3, 4, 5):
            for drop_last in (False, True):
                cases.append(([int(i) for i in gen.permutation(n)], p, drop_last))
    for order, p, drop_last in cases:
        parts = []
        for r in range(p):
            what = call_text("distributed_sampler_indices", order, p, r, drop_last=drop_last)
            got = call(fn, list(order), p, r, drop_last=drop_last,
                       name="distributed_sampler_indices")
            if type(got) is not list:
                fail(f"{what} should return a list of ints, got {describe(got)}")
            parts.append([expect_int(i, what, allow_numpy=False) for i in got])
        want = [_sampler(order, p, r, drop_last) for r in range(p)]
        if parts == want:
            continue
        label = (f"distributed_sampler_indices(order of {len(order)}, num_replicas={p}, "
                 f"rank, drop_last={drop_last})")
        sizes = [len(x) for x in parts]
        per = len(want[0]) if want else 0
        if len(set(sizes)) > 1:
            fail(f"{label}: the ranks got {sizes} indices; every rank must get the same number "
                 f"({per}), or their DDP steps fall out of step")
        if sizes and sizes[0] != per:
            fail(f"{label}: each rank got {sizes[0]} indices, expected {per} "
                 f"({'len(order) // num_replicas' if drop_last else 'ceil(len(order) / num_replicas)'})")
        for a in range(p):
            for b in range(a + 1, p):
                shared = sorted(set(parts[a]) & set(parts[b]))
                if shared and not (set(want[a]) & set(want[b])):
                    fail(f"{label}: ranks {a} and {b} both got samples {shared[:5]}: the ranks "
                         f"overlap, so some samples count twice per epoch and others not at "
                         f"all; rank r takes positions r, r + num_replicas, ...")
        if sorted(i for x in parts for i in x) == sorted(i for x in want for i in x):
            fail(f"{label}: the right samples, split differently: rank r takes the positions r, "
                 f"r + num_replicas, r + 2·num_replicas, ... of the padded order (expected "
                 f"{want}, got {parts})")
        fail(f"{label}: expected {want}, got {parts}; pad by repeating the order's beginning "
             f"(without drop_last) or cut its tail (with drop_last)")


# =========================================================================== 06.zero_step

ZERO_SPEC = {"steps": 3, "lr": 0.05, "weight_decay": 0.1, "worlds": [3, 2]}
#: State bytes per element that ZeRO-1 keeps on a rank: Adam's two float32 moments (8 B) and
#: the shard's float32 gradient (4 B) kept until the next step.
ZERO_BYTES_PER_ELEMENT = 12
ZERO_SLACK = 64 * 1024


@check("06.zero_step", points=POINTS["06.zero_step"])
def check_zero_step(fn):
    gen = rng()
    cases = [{"numels": [int(gen.integers(30, 90)), int(gen.integers(5, 20)), 7]},
             {"numels": [2]},                                     # Ψ < p: empty shards
             {"numels": [int(gen.integers(60_000, 70_000)), int(gen.integers(60_000, 70_000)), 1],
              "measure": True}]
    for c in cases:
        c["seed"] = int(gen.integers(0, 2**31))
    spec = dict(ZERO_SPEC, cases=cases)
    job = _scenario(fn, "zero", "zero_step", spec=spec)
    values = [_dict(v, "zero_step") for v in
              _job_values(job, fn.slot, "zero_step on 3 ranks", max(spec["worlds"]))]
    want = fn.expected("adamw_plain", spec=spec)

    def rows(p, r):
        got = values[r].get(p)
        if type(got) is not list or len(got) != len(cases):
            fail(f"zero_step on {p} ranks: rank {r} did not report every case")
        return [_dict(x, "zero_step") for x in got]

    for p in spec["worlds"]:
        for i, case in enumerate(cases):
            _check_chunks(rows(p, 0)[i].get("chunks"), sum(case["numels"]), p,
                          f"zero_step on {p} ranks")

    with part("the weights equal plain AdamW's, on every rank", 6):
        for p in spec["worlds"]:
            for i, case in enumerate(cases):
                psi = sum(case["numels"])
                for r in range(p):
                    got = rows(p, r)[i].get("params")
                    if type(got) is not list or len(got) != len(want[i]):
                        fail(f"zero_step on {p} ranks: the parameters could not be read")
                    flat_got = np.concatenate([_as_array(g, "zero_step").reshape(-1) for g in got])
                    flat_want = np.concatenate([w.reshape(-1) for w in want[i]])
                    # float32, same elementwise arithmetic: a few ulp (module docstring)
                    bad = ~np.isclose(flat_got, flat_want, rtol=1e-6, atol=1e-7)
                    if not bad.any():
                        continue
                    where = np.flatnonzero(bad)
                    edges = {k for a, b in _bounds(psi, p) for k in (a - 1, a, b - 1, b)}
                    a, b = _bounds(psi, p)[r]
                    label = f"zero_step on {p} ranks, Ψ={psi}, rank {r}"
                    if min(_sizes(psi, p)) >= 3 and set(where.tolist()) <= edges:
                        fail(f"{label}: the weights differ from plain AdamW's only at shard "
                             f"boundaries (elements {where[:6].tolist()}): the slices are off "
                             f"by one; rank q owns exactly shard_bounds(Ψ, p, q)")
                    if not bad[a:b].any():
                        fail(f"{label}: this rank's own shard is right, but {int(bad.sum())} "
                             f"elements of the other shards are not: every rank q must "
                             f"broadcast its updated slice from rank q")
                    fail(f"{label}: {int(bad.sum())} of {psi} weights differ from plain AdamW's "
                         f"(first at element {int(where[0])}): copy this rank's slice in, set "
                         f"its gradient, step the shard's optimizer, copy the slice back")
    with part("every shard is broadcast from its owner", 4):
        for p in spec["worlds"]:
            for i, case in enumerate(cases):
                psi = sum(case["numels"])
                logs = rows(p, 0)[i].get("logs")
                if type(logs) is not list or not logs:
                    fail("zero_step: the event log is missing")
                for step in logs:
                    bcast = [tuple(e) for e in step if type(e) in (list, tuple) and len(e) == 3
                             and e[0] == "broadcast"]
                    want_b = [("broadcast", q, s) for q, s in enumerate(_sizes(psi, p))]
                    if bcast == want_b:
                        continue
                    got_sizes = [c for _, _, c in bcast]
                    if [q for _, q, _ in bcast] == list(range(p)) and sum(got_sizes) != psi:
                        fail(f"zero_step on {p} ranks, Ψ={psi}: the broadcast slices have "
                             f"{got_sizes} elements, the shards {_sizes(psi, p)}: the shard "
                             f"boundaries are off by one")
                    fail(f"zero_step on {p} ranks, Ψ={psi}: the step broadcast "
                         f"{[(q, c) for _, q, c in bcast]} (source rank, elements); every rank "
                         f"q must broadcast its shard, shard_bounds(Ψ, p, q), from rank q: "
                         f"expected {[(q, s) for _, q, s in want_b]}")
    with part("each rank keeps optimizer state for its shard only", 4):
        for p in spec["worlds"]:
            for i, case in enumerate(cases):
                psi = sum(case["numels"])
                for r in range(p):
                    row = rows(p, r)[i]
                    shard = _sizes(psi, p)[r]
                    numels = row.get("state_numels")
                    if type(numels) is list and any(type(k) is int and k > shard for k in numels):
                        fail(f"zero_step on {p} ranks, Ψ={psi}: rank {r}'s optimizer holds state "
                             f"tensors of {sorted(set(numels))} elements; its shard has {shard}")
                    if not case.get("measure"):
                        continue
                    kept = row.get("kept_bytes")
                    if type(kept) is not int:
                        fail("zero_step: the memory measurement is missing")
                    limit = math.ceil(psi / p) * ZERO_BYTES_PER_ELEMENT + ZERO_SLACK
                    if kept > limit:
                        fail(f"zero_step on {p} ranks, Ψ={psi}: rank {r} keeps {kept:,} bytes "
                             f"between steps, more than ⌈Ψ/p⌉ × {ZERO_BYTES_PER_ELEMENT} B + "
                             f"{ZERO_SLACK // 1024} KiB = {limit:,}: the optimizer state is not "
                             f"sharded (only shard_optimizer may hold state, for this rank's "
                             f"slice)")


# =========================================================================== checkpointing

CKPT = {"width": 6, "batch": 5, "p_drop": 0.5}


@check("06.checkpoint_forward", points=POINTS["06.checkpoint_forward"])
def check_checkpoint_forward(fn):
    seed = int(rng().integers(0, 2**20))
    runs = _scenario(fn, "checkpoint_forward", "checkpoint_forward", seed=seed,
                     preserve=[True, False], **CKPT)
    if type(runs) is not list or len(runs) != 2:
        fail(f"checkpoint_forward: the grader's scenario did not complete ({describe(runs)})")
    for keep, run in zip((True, False), runs):
        run = _dict(run, "checkpoint_forward")
        what = f"checkpoint_forward(ctx, segment, (x, 2.0), preserve_rng_state={keep})"
        if run.get("values") is None:
            fail(f"{what} should return the segment's output (a mini Tensor), got a "
                 f"{run.get('returned')}")
        if run.get("grad_mode") != [False]:
            fail(f"{what}: the segment ran with grad mode on, so it recorded a graph and saved "
                 f"its activations, which is what checkpointing avoids: run it under "
                 f"mini.no_grad()")
        if run.get("recorded"):
            fail(f"{what}: the output has a grad_fn: compute it without recording a graph")
        got, want = run.get("values"), run.get("want")
        if type(got) is not np.ndarray or type(want) is not np.ndarray or got.shape != want.shape:
            fail(f"{what}: the output has the wrong shape")
        if not np.array_equal(got, want):       # the same operations on the same numbers
            fail(f"{what}: the output differs from segment(x, 2.0) computed from the same "
                 f"random state (largest difference {float(np.max(np.abs(got - want))):.3g})")
        if not run.get("function_kept"):
            fail(f"{what}: ctx.function must be the segment function itself (backward runs it "
                 f"again)")
        if not run.get("inputs_kept"):
            fail(f"{what}: ctx.inputs must be the arguments tuple as given, got a "
                 f"{run.get('inputs_type')}")
        if keep:
            if run.get("rng_is_after") and not run.get("rng_is_before"):
                fail(f"{what}: ctx.rng_state is the random state after the forward; the "
                     f"recomputation must start from the state before it, or dropout draws a "
                     f"different mask in backward than in forward")
            if not run.get("rng_is_before"):
                fail(f"{what}: ctx.rng_state must be mini.get_rng_state() taken before the "
                     f"segment runs (got a {run.get('rng_state_kind')}); without it dropout "
                     f"draws a different mask when the segment is recomputed")
        elif run.get("rng_state_kind") != "NoneType":
            fail(f"{what}: with preserve_rng_state=False, ctx.rng_state must be None (got a "
                 f"{run.get('rng_state_kind')})")


@check("06.checkpoint_backward", points=POINTS["06.checkpoint_backward"])
def check_checkpoint_backward(fn):
    seed = int(rng().integers(0, 2**20))
    obs = _dict(_scenario(fn, "checkpoint_backward", "checkpoint_backward", seed=seed, **CKPT),
                "checkpoint_backward")
    what = "checkpoint_backward(ctx, grad_output)"
    if obs.get("returned") not in ("tuple", "list") or obs.get("length") != 2:
        fail(f"{what} should return a tuple with one entry per input of ctx.inputs (2 here: a "
             f"tensor and the number 2.0), got a {obs.get('returned')}"
             + (f" of length {obs.get('length')}" if obs.get("length") is not None else ""))
    with part("gradients equal backward without checkpointing, dropout included", 5):
        got, want = obs.get("input_grad"), obs.get("want_input")
        if type(got) is not np.ndarray:
            fail(f"{what}: the input's gradient should be a mini Tensor (the detached copy's "
                 f".grad), got {describe(got)}")
        params, want_params = obs.get("params"), obs.get("want_params") or []
        if obs.get("grad_mode") != [True]:
            fail(f"{what}: the recomputation ran with grad mode off, so there was no graph to "
                 f"backpropagate through: run it under mini.enable_grad()")
        if type(params) is not list or any(p is None for p in params):
            fail(f"{what}: the segment's parameters got no gradient: backpropagate through the "
                 f"recomputed output (mini.autograd.backward(output, grad_output))")
        # the same operations on the same numbers and the same dropout mask: equal results
        close = got.shape == want.shape and np.allclose(got, want, rtol=1e-12, atol=1e-12)
        close_p = all(type(g) is np.ndarray and g.shape == w.shape
                      and np.allclose(g, w, rtol=1e-12, atol=1e-12)
                      for g, w in zip(params, want_params))
        if not (close and close_p):
            fail(f"{what}: the gradients differ from backward through the same segment "
                 f"recorded normally: the recomputation must draw the same dropout mask as the "
                 f"forward did (set ctx.rng_state before running the segment again)")
        if obs.get("original_input_grad") is not None:
            fail(f"{what}: the original input tensor got a .grad during the recomputation: run "
                 f"the segment on detached copies of the inputs and return their gradients")
    with part("the random state is put back afterwards", 2):
        if not obs.get("rng_after_is_restored"):
            fail(f"{what}: after the recomputation mini's random state is not what it was "
                 f"before the call: remember it, and set it back when you are done, so the rest "
                 f"of the program draws the numbers it would have drawn")
    with part("None for inputs without gradients; parameters still get theirs", 3):
        if obs.get("second") != "None":
            fail(f"{what}: the entry for the non-tensor argument 2.0 should be None, got a "
                 f"{obs.get('second')}")
        if obs.get("no_grad_input") != "None":
            fail(f"{what}: for an input tensor that does not require grad, return None in its "
                 f"place, got a {obs.get('no_grad_input')}")
        if obs.get("no_grad_params") != 4:
            fail(f"{what}: when the input needs no gradient the segment's parameters still do "
                 f"({obs.get('no_grad_params')} of 4 got one)")


# =========================================================================== quizzes

def _number_answer(fn, what: str, want: float, rel: float, hints: list) -> None:
    got = expect_float(call(fn, name="answer"), what)
    if math.isclose(got, want, rel_tol=rel):
        return
    for value, hint in hints:
        if math.isclose(got, value, rel_tol=rel):
            fail(f"{what}: not {got:.4g}; {hint}")
    fail(f"{what}: not {got:.4g}")


@check("06.quiz_ring_time", points=POINTS["06.quiz_ring_time"])
def check_quiz_ring_time(fn):
    # 4 ranks, 100 MB, α = 5 µs, β = 10 GB/s
    alpha, beta, p, n = 5e-6, 10e9, 4, 100e6
    want = 2 * (p - 1) * alpha + 2 * (p - 1) / p * n / beta
    _number_answer(fn, "your answer (seconds for the ring all-reduce)", want, 0.01, [
        (2 * (p - 1) * alpha + 2 * (p - 1) * n / beta, "each message carries one chunk, N/p "
         "bytes, not the whole array"),
        ((p - 1) * alpha + (p - 1) / p * n / beta, "that is one phase; the ring runs a "
         "reduce-scatter and then an all-gather"),
        (n / beta, "the bandwidth term is 2(p-1)/p · N/β, almost twice N/β for 4 ranks"),
        (want * 1e3, "the answer is in seconds, not milliseconds"),
    ])


@check("06.quiz_zero_memory", points=POINTS["06.quiz_zero_memory"])
def check_quiz_zero_memory(fn):
    psi, p = 7.5e9, 64
    want = (2 + 2) * psi + 12 * psi / p
    _number_answer(fn, "your answer (bytes per rank, ZeRO-1, mixed precision)", want, 0.01, [
        (16 * psi, "that is plain data parallelism: ZeRO-1 divides the optimizer state by p"),
        ((2 + 2 + 12) * psi / p, "that is ZeRO-3: stage 1 shards only the optimizer state"),
        (2 * psi + 14 * psi / p, "that is ZeRO-2: stage 1 keeps every gradient"),
        (8 * psi + 8 * psi / p, "that is fp32 without master weights; the question uses fp16 "
                                "weights and gradients and 12 bytes of fp32 state"),
    ])


@check("06.quiz_bubble", points=POINTS["06.quiz_bubble"])
def check_quiz_bubble(fn):
    p, m = 4, 8
    want = (p - 1) / (m + p - 1)
    _number_answer(fn, "your answer (the idle fraction of the pipeline)", want, 0.01, [
        ((p - 1) / m, "divide by the whole schedule's length, m + p - 1 slots, not by m"),
        (1 / p, "the bubble shrinks as more micro-batches fill the pipeline"),
        ((p - 1) / (m + p - 1) * 100, "give a fraction, not a percentage"),
    ])
