"""Scenarios of chapter 06 (scaling): the distributed exercises on real MPI ranks, and the
checkpointing exercises in one process.

A multi-rank scenario starts one ``mpiexec`` job with :func:`mini.distributed.launch.run`
from the worker (inside the sandbox; MPI needs no network there, and no fixed port: mpiexec
connects the ranks).  The implementation under test is registered in its slot while the
scenario runs, and ``launch.run`` ships every registered implementation to the ranks, so
the ranks run the student's code.  One job covers several world sizes
(:func:`mini.distributed.sub_world`): starting processes is what costs on a laptop.

Every job has two limits: each blocking operation gives up after ``op_timeout`` seconds
(every rank then prints where it waits), and the job is killed after ``timeout`` seconds
(after a stack dump of every rank).  A job that fails is reported as data -- its summary,
the last lines of each rank's error, and the last case each rank started -- and the
trusted check words the message.

The ranks run the functions of this module (``_..._ranks``), imported by name, and return
plain data: numbers, lists, dicts and numpy arrays.
"""
from __future__ import annotations

import numpy as np

#: Printed by a rank before each case, so a failed job still says where it was.
PROGRESS = "@@ch06-case"


# --------------------------------------------------------------------------- jobs

def _progress(stdout: str) -> dict:
    """rank -> the label of the last case it started (mpiexec may join the ranks' lines)."""
    import re
    last = {}
    for rank, label in re.findall(re.escape(PROGRESS) + r" (\d+) ([^@\n]*)", stdout):
        last[int(rank)] = label.strip()
    return last


def _job(fn, nprocs: int, *args, op_timeout: float = 20.0, timeout: float = 120.0) -> dict:
    """Run ``fn(*args)`` on ``nprocs`` ranks; what came back, as plain data."""
    from mini.distributed import launch
    res = launch.run(fn, int(nprocs), args=args, timeout=float(timeout),
                     op_timeout=float(op_timeout))
    return {"ok": bool(res.ok), "values": list(res.values) if res.ok else None,
            "summary": str(res.summary), "timed_out": bool(res.timed_out),
            "errors": {int(r): str(t)[-3000:] for r, t in res.errors.items()},
            "progress": _progress(res.stdout), "stderr": str(res.stderr)[-6000:],
            "seconds": float(res.seconds)}


def _case(label: str) -> None:
    import mini.distributed as dist
    print(f"{PROGRESS} {dist.get_rank()} {label}", flush=True)


def _records(log) -> list:
    keep = ("op", "peer", "count", "nbytes", "dtype", "seq", "end_seq", "origin")
    out = []
    for e in log.to_records():
        rec = {k: e[k] for k in keep}
        info = e.get("info") or {}
        rec["param"] = info.get("param")
        rec["bucket"] = info.get("bucket")
        out.append(rec)
    return out


def rank_values(seed: int, rank: int, n: int, kind: str, dtype: str) -> np.ndarray:
    """What rank ``rank`` all-reduces in a case (the trusted side makes the same numbers).
    ``kind="int"``: small integers, so every sum is exact in any order."""
    gen = np.random.default_rng([int(seed), int(rank)])
    if kind == "int":
        return gen.integers(-50, 51, int(n)).astype(dtype)
    return gen.standard_normal(int(n)).astype(dtype)


def _slot_call(slot: str, *args):
    """What the registered implementation of ``slot`` returns (a string if it raised)."""
    from mini.exercises import active
    try:
        return active(slot)(*args)
    except BaseException as e:  # noqa: BLE001 - recorded as data
        return f"{type(e).__name__}: {e}"[:300]


# --------------------------------------------------------------------------- 06.ring_allreduce

def _ring_ranks(cases: list, worlds: list) -> dict:
    import mini
    import mini.distributed as dist
    out = {}
    for p in worlds:
        with dist.sub_world(p) as inside:
            if not inside:
                continue
            r = dist.get_rank()
            rows = []
            for case in cases:
                n, shape = int(case["n"]), tuple(case["shape"])
                _case(f"n={n} p={p} {case['dtype']} shape={shape}")
                x = rank_values(case["seed"], r, n, case["kind"], case["dtype"]).reshape(shape)
                t = mini.tensor(x)
                with dist.record_communication() as log:
                    returned = dist.ring_allreduce(t)
                after = t.numpy()
                rows.append({
                    "result": np.array(after, copy=True),
                    "returned": None if returned is None else type(returned).__name__,
                    "records": _records(log),
                    "chunks": [_slot_call("06.shard_bounds", n, p, c) for c in range(p)],
                })
            out[p] = rows
    return out


def ring(impl, *, cases: list, worlds: list, op_timeout: float = 20.0) -> dict:
    """``impl`` (ring_allreduce) on every rank: ``cases`` on worlds of each size in
    ``worlds``, one job of ``max(worlds)`` ranks.  For large messages the check uses a
    short ``op_timeout``: a ring that deadlocks there is caught in seconds."""
    return _job(_ring_ranks, max(worlds), cases, list(worlds), op_timeout=op_timeout,
                timeout=60.0 + 3 * op_timeout)


# --------------------------------------------------------------------------- 06.mark_grad_ready

def mark_ready(impl, *, buckets: list, orders: list) -> list:
    """``impl(state, i, launch)`` for each parameter in each order of ``orders`` (the order
    in which backward finishes the gradients): after each call, the buckets launched so far
    (or the exception it raised), and the state at the end."""
    n = sum(len(b) for b in buckets)
    bucket_of = [0] * n
    for k, members in enumerate(buckets):
        for i in members:
            bucket_of[i] = k
    runs = []
    for order in orders:
        state = {"bucket_of": list(bucket_of), "pending": [len(b) for b in buckets],
                 "next_bucket": 0}
        launched: list = []
        history = []
        error = None
        for i in order:
            try:
                returned = impl(state, int(i), launched.append)
            except NotImplementedError:
                raise
            except Exception as e:  # noqa: BLE001 - recorded
                error = e
                break
            history.append({"launched": [b if type(b) is int else repr(b)[:50] for b in launched],
                            "returned": None if returned is None else type(returned).__name__})
        runs.append({"history": history, "error": error,
                     "next_bucket": state.get("next_bucket"),
                     "pending": list(state["pending"]) if type(state.get("pending")) is list
                     else None})
    return runs


# --------------------------------------------------------------------------- DDP: the model

def ddp_model(seed: int, dims: list):
    """A float64 MLP (Linear, Tanh, ..., Linear) with seeded weights."""
    import mini
    import mini.nn as nn
    mini.manual_seed(int(seed))
    layers = []
    for k, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        layers.append(nn.Linear(int(a), int(b), dtype=mini.float64))
        if k < len(dims) - 2:
            layers.append(nn.Tanh())
    return nn.Sequential(*layers)


def ddp_data(seed: int, steps: int, batch: int, dims: list) -> tuple:
    gen = np.random.default_rng(int(seed))
    x = gen.standard_normal((steps, batch, dims[0]))
    y = gen.standard_normal((steps, batch, dims[-1]))
    return x, y


def _mse(out, y):
    return ((out - y) ** 2).mean()


def _params(model) -> list:
    return [np.array(q.detach().numpy(), copy=True) for q in model.parameters()]


def ddp_single(impl, *, seed: int, dims: list, steps: int, batch: int, lr: float) -> list:
    """One process, the whole batch, plain SGD: what DDP on p ranks must reproduce.  (Runs
    in the trusted process; ``impl`` is not used.)"""
    import mini
    model = ddp_model(seed, dims)
    opt = mini.optim.SGD(model.parameters(), lr=float(lr))
    x, y = ddp_data(seed + 1, steps, batch, dims)
    for s in range(steps):
        opt.zero_grad()
        _mse(model(mini.tensor(x[s])), mini.tensor(y[s])).backward()
        opt.step()
    return _params(model)


# --------------------------------------------------------------------------- 06.allreduce_hook

def _hook_ranks(spec: dict) -> dict:
    import mini
    import mini.distributed as dist
    from mini.nn.parallel import DistributedDataParallel as DDP
    from mini.exercises import ExerciseNotImplemented
    from mini.nn.parallel.distributed import GradBucket, allreduce_hook
    out = {"direct": {}, "ddp": None}
    for p in spec["worlds"]:
        with dist.sub_world(p) as inside:
            if not inside:
                continue
            r = dist.get_rank()
            rows = []
            for case in spec["direct"]:
                _case(f"hook p={p} n={case['n']} {case['dtype']}")
                buf = mini.tensor(rank_values(case["seed"], r, case["n"], "float", case["dtype"]))
                bucket = GradBucket(0, buf, [], p)
                with dist.record_communication() as log:
                    work = allreduce_hook(None, bucket)
                    at_return = _records(log)
                    waited = False
                    if work is not None and callable(getattr(work, "wait", None)):
                        work.wait()
                        waited = True
                rows.append({"returned": None if work is None else type(work).__name__,
                             "waited": waited, "at_return": at_return,
                             "records": _records(log),
                             "result": np.array(bucket.buffer().numpy(), copy=True)})
            out["direct"][p] = rows
    d = spec["ddp"]
    _case(f"DDP p={dist.get_world_size()}")
    r, p = dist.get_rank(), dist.get_world_size()
    model = ddp_model(d["seed"] + 100 * r, d["dims"])     # DDP broadcasts rank 0's weights
    if r == 0:
        model = ddp_model(d["seed"], d["dims"])
    x, y = ddp_data(d["seed"] + 1, d["steps"], d["batch"], d["dims"])
    per = d["batch"] // p
    logs = []
    try:
        ddp = DDP(model, bucket_cap_mb=d["cap_mb"])
        opt = mini.optim.SGD(ddp.parameters(), lr=float(d["lr"]))
        for s in range(d["steps"]):
            opt.zero_grad()
            with dist.record_communication() as log:
                _mse(ddp(mini.tensor(x[s, r * per:(r + 1) * per])),
                     mini.tensor(y[s, r * per:(r + 1) * per])).backward()
            logs.append(_records(log))
            opt.step()
    except ExerciseNotImplemented as e:
        # another DDP exercise is a stub: every rank stops at the same point, before any
        # bucket is launched, so the job can go on and report the hook's own results
        out["ddp"] = {"missing": e.slot_id}
        return out
    out["ddp"] = {"params": _params(model), "logs": logs, "buckets": ddp.bucket_assignment}
    return out


def hook(impl, *, direct: list, worlds: list, ddp: dict) -> dict:
    """``impl`` (allreduce_hook) called on buckets of known values on worlds of each size in
    ``worlds``, then DDP training with it on all ranks: one job of ``max(worlds)`` ranks."""
    spec = {"direct": direct, "worlds": list(worlds), "ddp": ddp}
    return _job(_hook_ranks, max(worlds), spec)


# --------------------------------------------------------------------------- 06.accumulation_step

def _accumulate_ranks(spec: dict) -> dict:
    import mini
    import mini.distributed as dist
    from mini.distributed.accumulation import accumulation_step
    from mini.nn.parallel import DistributedDataParallel as DDP
    out = {}
    for p, m in spec["worlds"]:
        with dist.sub_world(p) as inside:
            if not inside:
                continue
            r = dist.get_rank()
            _case(f"accumulation p={p} micro-batches={m}")
            model = ddp_model(spec["seed"], spec["dims"])
            ddp = DDP(model, bucket_cap_mb=spec["cap_mb"])
            opt = mini.optim.SGD(ddp.parameters(), lr=float(spec["lr"]))
            x, y = ddp_data(spec["seed"] + 1, spec["steps"], spec["batch"], spec["dims"])
            per = spec["batch"] // p
            size = per // m
            losses, reduces = [], []
            for s in range(spec["steps"]):
                xs, ys = x[s, r * per:(r + 1) * per], y[s, r * per:(r + 1) * per]
                micro = [(mini.tensor(xs[k * size:(k + 1) * size]),
                          mini.tensor(ys[k * size:(k + 1) * size])) for k in range(m)]
                with dist.record_communication() as log:
                    loss = accumulation_step(ddp, opt, _mse, micro)
                reduces.append(sum(1 for e in log.to_records() if e["op"] == "all_reduce"
                                   and str(e["origin"] or "").startswith("ddp bucket")))
                losses.append(float(loss) if isinstance(loss, (int, float, np.floating))
                              else repr(type(loss).__name__))
            try:
                accumulation_step(ddp, opt, _mse, [])
                empty = None
            except Exception as e:  # noqa: BLE001 - recorded
                empty = type(e).__name__
            out[p] = {"params": _params(model), "losses": losses, "reduces": reduces,
                      "buckets": len(ddp.bucket_assignment), "empty": empty}
    return out


def accumulate(impl, *, spec: dict) -> dict:
    """``impl`` (accumulation_step) under DDP on worlds of each ``(p, m)`` of
    ``spec["worlds"]``: m micro-batches per rank; one job."""
    return _job(_accumulate_ranks, max(p for p, _ in spec["worlds"]), spec)


def accumulate_single(impl, *, spec: dict) -> dict:
    """The trusted side's answer: parameters after the steps on one process with the whole
    batch, and each rank's mean micro-batch loss at every step, per world of
    ``spec["worlds"]``.  (``impl`` is not used.)"""
    import mini
    model = ddp_model(spec["seed"], spec["dims"])
    opt = mini.optim.SGD(model.parameters(), lr=float(spec["lr"]))
    x, y = ddp_data(spec["seed"] + 1, spec["steps"], spec["batch"], spec["dims"])
    losses = {p: [[0.0] * spec["steps"] for _ in range(p)] for p, _ in spec["worlds"]}
    for s in range(spec["steps"]):
        with mini.no_grad():
            for p, m in spec["worlds"]:
                per = spec["batch"] // p
                size = per // m
                for r in range(p):
                    parts = [float(_mse(model(mini.tensor(x[s, r * per + k * size:
                                                             r * per + (k + 1) * size])),
                                        mini.tensor(y[s, r * per + k * size:
                                                      r * per + (k + 1) * size])).item())
                             for k in range(m)]
                    losses[p][r][s] = sum(parts) / m
        opt.zero_grad()
        _mse(model(mini.tensor(x[s])), mini.tensor(y[s])).backward()
        opt.step()
    return {"params": _params(model), "losses": losses}


# --------------------------------------------------------------------------- 06.zero_step

def zero_params(numels: list, seed: int):
    """Parameters of the given sizes (float32, seeded)."""
    import mini
    from mini.nn.parameter import Parameter
    gen = np.random.default_rng(int(seed))
    return [Parameter(mini.tensor(gen.standard_normal(int(k)).astype(np.float32)))
            for k in numels]


def zero_grads(numels: list, seed: int, step: int) -> list:
    gen = np.random.default_rng([int(seed), int(step)])
    return [gen.standard_normal(int(k)).astype(np.float32) for k in numels]


def _zero_ranks(spec: dict) -> dict:
    import gc
    import tracemalloc

    import mini
    import mini.distributed as dist
    from mini.backends import numpy_backend
    from mini.distributed.optim import ZeroRedundancyOptimizer
    out = {}
    for p in spec["worlds"]:
        with dist.sub_world(p) as inside:
            if not inside:
                continue
            rows = []
            for case in spec["cases"]:
                _case(f"ZeRO p={p} numels={case['numels']}")
                params = zero_params(case["numels"], case["seed"])
                measure = bool(case.get("measure"))
                pool = numpy_backend.POOL_ENABLED
                if measure:   # recycled buffers would hide what is kept
                    numpy_backend.POOL_ENABLED = False
                    gc.collect()
                    tracemalloc.start()
                try:
                    zero = ZeroRedundancyOptimizer(params, optimizer_class=mini.optim.AdamW,
                                                   lr=float(spec["lr"]),
                                                   weight_decay=float(spec["weight_decay"]))
                    if measure:
                        gc.collect()
                        base = tracemalloc.get_traced_memory()[0]
                    logs = []
                    for s in range(spec["steps"]):
                        for q, g in zip(params, zero_grads(case["numels"], case["seed"], s)):
                            q.grad = mini.tensor(g)
                        with dist.record_communication() as log:
                            zero.step()
                        logs.append([(e["op"], e["peer"], e["count"]) for e in _records(log)])
                    for q in params:
                        q.grad = None
                    kept = None
                    if measure:
                        gc.collect()
                        kept = int(tracemalloc.get_traced_memory()[0] - base)
                finally:
                    if measure:
                        tracemalloc.stop()
                        numpy_backend.POOL_ENABLED = pool
                state = [int(v.numel()) for s in zero.optim.state.values() for v in s.values()
                         if isinstance(v, mini.Tensor)]
                rows.append({"params": [np.array(q.detach().numpy(), copy=True) for q in params],
                             "logs": logs, "kept_bytes": kept, "state_numels": state,
                             "chunks": [_slot_call("06.shard_bounds", int(sum(case["numels"])),
                                                   p, c) for c in range(p)]})
            out[p] = rows
    return out


def zero(impl, *, spec: dict) -> dict:
    """``impl`` (zero_step) through ``ZeroRedundancyOptimizer`` (AdamW) on worlds of each
    size in ``spec["worlds"]``; one job."""
    return _job(_zero_ranks, max(spec["worlds"]), spec)


def adamw_plain(impl, *, spec: dict) -> list:
    """The trusted side's answer: plain AdamW on every case's parameters, one process.
    (``impl`` is not used.)"""
    import mini
    out = []
    for case in spec["cases"]:
        params = zero_params(case["numels"], case["seed"])
        opt = mini.optim.AdamW(params, lr=float(spec["lr"]),
                               weight_decay=float(spec["weight_decay"]))
        for s in range(spec["steps"]):
            for q, g in zip(params, zero_grads(case["numels"], case["seed"], s)):
                q.grad = mini.tensor(g)
            opt.step()
        out.append([np.array(q.detach().numpy(), copy=True) for q in params])
    return out


# --------------------------------------------------------------------------- checkpointing

class _Ctx:
    """What a graph node offers the forward of a checkpointed segment: attributes."""


def _segment(width: int, seed: int, p_drop: float):
    """A segment of two layers with dropout between them, and a function that records
    whether grad mode was on when it ran."""
    import mini
    import mini.nn as nn
    mini.manual_seed(int(seed))
    lin1 = nn.Linear(width, width, dtype=mini.float64)
    lin2 = nn.Linear(width, width, dtype=mini.float64)
    drop = nn.Dropout(float(p_drop))
    seen = []

    def run(x, scale=1.0):
        seen.append(mini.is_grad_enabled())
        return lin2(drop(lin1(x).tanh())) * scale

    run.parameters = lambda: list(lin1.parameters()) + list(lin2.parameters())
    return run, seen


def _rng_equal(a, b) -> bool:
    """Two snapshots of mini's random state (plain dicts) describe the same point."""
    return type(a) is dict and type(b) is dict and repr(a) == repr(b)


def checkpoint_forward(impl, *, width: int, batch: int, seed: int, p_drop: float,
                       preserve: list) -> list:
    """``impl(ctx, run, (x, scale), preserve_rng_state)``: what it returned, whether ``run``
    ran with grad mode off, what it stored on ``ctx``."""
    import mini
    out = []
    for keep in preserve:
        run, seen = _segment(width, seed, p_drop)
        x = mini.tensor(np.random.default_rng(seed).standard_normal((batch, width)),
                        requires_grad=True)
        args = (x, 2.0)
        mini.manual_seed(int(seed) + 1)
        before = mini.get_rng_state()
        ctx = _Ctx()
        got = impl(ctx, run, args, bool(keep))
        after = mini.get_rng_state()
        # the same forward, recording: what the checkpointed forward must equal
        mini.set_rng_state(before)
        want = run(*args)
        out.append({
            "returned": None if got is None else type(got).__name__,
            "values": np.array(got.detach().numpy(), copy=True)
            if isinstance(got, mini.Tensor) else None,
            "want": np.array(want.detach().numpy(), copy=True),
            "recorded": bool(isinstance(got, mini.Tensor) and got.grad_fn is not None),
            "grad_mode": list(seen[:1]),
            "function_kept": getattr(ctx, "function", None) is run,
            "inputs_kept": getattr(ctx, "inputs", None) is args,
            "inputs_type": type(getattr(ctx, "inputs", None)).__name__,
            "rng_state_kind": type(getattr(ctx, "rng_state", "missing")).__name__,
            "rng_is_before": _rng_equal(getattr(ctx, "rng_state", "missing"), before),
            "rng_is_after": _rng_equal(getattr(ctx, "rng_state", "missing"), after),
            "has_rng_state": hasattr(ctx, "rng_state"),
        })
    return out


def checkpoint_backward(impl, *, width: int, batch: int, seed: int, p_drop: float) -> dict:
    """``impl(ctx, grad_output)`` on a context stored as the forward stores it (mini's
    random state before the forward), against backward through the same computation
    recorded normally: input and parameter gradients, whether the random state is put back,
    and what it returns for an input that needs no gradient."""
    import mini
    from mini.autograd.engine import backward
    gen = np.random.default_rng(seed)
    xv = gen.standard_normal((batch, width))
    gv = gen.standard_normal((batch, width))
    obs = {}

    # the truth: the same segment recorded normally, same random numbers
    run, _ = _segment(width, seed, p_drop)
    x = mini.tensor(xv, requires_grad=True)
    mini.manual_seed(int(seed) + 1)
    backward(run(x, 2.0), mini.tensor(gv))
    obs["want_input"] = np.array(x.grad.numpy(), copy=True)
    obs["want_params"] = [np.array(q.grad.numpy(), copy=True) for q in run.parameters()]

    # the checkpointed backward, after something else used the random stream
    run, seen = _segment(width, seed, p_drop)
    x = mini.tensor(xv, requires_grad=True)
    mini.manual_seed(int(seed) + 1)
    ctx = _Ctx()
    ctx.function, ctx.inputs, ctx.rng_state = run, (x, 2.0), mini.get_rng_state()
    mini.rand(7)                       # forward went on drawing numbers after the segment
    ahead = mini.get_rng_state()
    got = impl(ctx, mini.tensor(gv))
    obs["rng_after_is_restored"] = _rng_equal(mini.get_rng_state(), ahead)
    obs["returned"] = type(got).__name__
    obs["length"] = len(got) if isinstance(got, (tuple, list)) else None
    first = got[0] if isinstance(got, (tuple, list)) and got else None
    obs["input_grad"] = np.array(first.numpy(), copy=True) if isinstance(first, mini.Tensor) \
        else (None if first is None else type(first).__name__)
    obs["second"] = None if not (isinstance(got, (tuple, list)) and len(got) > 1) else (
        type(got[1]).__name__ if got[1] is not None else "None")
    obs["params"] = [None if q.grad is None else np.array(q.grad.numpy(), copy=True)
                     for q in run.parameters()]
    obs["original_input_grad"] = None if x.grad is None else np.array(x.grad.numpy(), copy=True)
    obs["grad_mode"] = list(seen[:1])

    # an input that needs no gradient: None for it, parameters still get theirs
    run, _ = _segment(width, seed, p_drop)
    x = mini.tensor(xv)
    mini.manual_seed(int(seed) + 1)
    ctx = _Ctx()
    ctx.function, ctx.inputs, ctx.rng_state = run, (x, 2.0), None
    got = impl(ctx, mini.tensor(gv))
    first = got[0] if isinstance(got, (tuple, list)) and got else "missing"
    obs["no_grad_input"] = "None" if first is None else type(first).__name__
    obs["no_grad_params"] = sum(q.grad is not None for q in run.parameters())
    return obs


SCENARIOS = {"ring": ring, "mark_ready": mark_ready, "hook": hook, "ddp_single": ddp_single,
             "accumulate": accumulate, "accumulate_single": accumulate_single, "zero": zero,
             "adamw_plain": adamw_plain, "checkpoint_forward": checkpoint_forward,
             "checkpoint_backward": checkpoint_backward}
