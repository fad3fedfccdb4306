"""Code that runs on every rank of a test job (via mini.distributed.launch) and returns plain
data (numbers, lists, numpy arrays) for the tests in this folder to check.

Many checks share one job (one ``mpiexec`` per world size): :func:`world_checks` runs them
all and returns a dict; start-up is what costs on a 2-core machine.
"""
from __future__ import annotations

import hashlib

import numpy as np

#: The ring is checked on these sizes (with p = 1..4 that includes N < p, N = p, N not
#: divisible by p, N = 0) plus one of 1 MiB, large enough for MPI's rendezvous protocol, where
#: two ranks that both wait for their send to finish before receiving would deadlock.
RING_SIZES = (0, 1, 2, 3, 5, 7, 10, 64, 1001, 1 << 18)


def _world():
    import mini.distributed as dist
    return dist.get_rank(), dist.get_world_size()


# --------------------------------------------------------------------------- ring

def ring_cases() -> list[dict]:
    import mini
    import mini.distributed as dist
    r, p = _world()
    out = []
    cases = [(n, np.float32, (n,)) for n in RING_SIZES]
    cases += [(n, np.float64, (n,)) for n in (3, 1001)] + [(n, np.int64, (n,)) for n in (5, 10)]
    cases += [(15, np.float32, (3, 5))]
    for n, dtype, shape in cases:
        # integer values: every sum is exact, so results compare exactly across ranks and
        # with the oracle whatever order the additions ran in
        base = np.arange(n, dtype=np.int64) % 1000
        x = (base * (r + 1) + r).astype(dtype).reshape(shape)
        t = mini.tensor(x)
        with dist.record_communication() as log:
            dist.ring_allreduce(t)
        expected = (base * sum(range(1, p + 1)) + sum(range(p))).astype(dtype).reshape(shape)
        result = t.numpy()
        out.append({"n": n, "dtype": np.dtype(dtype).name, "shape": shape,
                    "equal": bool(result.dtype == expected.dtype
                                  and np.array_equal(result, expected)),
                    "result": result.copy() if n <= 2000 else None,
                    "digest": hashlib.sha256(result.tobytes()).hexdigest(),
                    "itemsize": np.dtype(dtype).itemsize, "records": log.to_records()})
    return out


def wrong_ring_cases() -> dict:
    import mini
    import mini.distributed as dist
    r, p = _world()
    n = 10
    t = mini.tensor(np.arange(n, dtype=np.float32) + r)
    from grader.mistakes.ch06_scaling import ring_reduce_then_broadcast
    with dist.record_communication() as log:       # the right sum, the traffic of a star
        ring_reduce_then_broadcast(t)
    star = log.to_records()
    t2 = mini.tensor(np.arange(n, dtype=np.float32) + r)
    with dist.record_communication() as log:
        dist.all_reduce(t2)
    builtin = log.to_records()
    return {"n": n, "star": star, "star_result": t.numpy().copy(), "builtin": builtin,
            "builtin_result": t2.numpy().copy()}


# --------------------------------------------------------------------------- collectives

def collective_cases() -> dict:
    import mini
    import mini.distributed as dist
    from mini.distributed import ReduceOp
    r, p = _world()
    out = {}
    vals = {}
    for op in (ReduceOp.SUM, ReduceOp.PRODUCT, ReduceOp.MIN, ReduceOp.MAX, ReduceOp.AVG):
        t = mini.tensor(np.array([r + 1.0, 2.0 - r, 0.5 * r], dtype=np.float64))
        dist.all_reduce(t, op=op)
        vals[op.name] = t.numpy().copy()
    out["all_reduce"] = vals
    work = dist.all_reduce(mini.ones(4), async_op=True)
    out["async_returns_work"] = isinstance(work, dist.Work)
    work.wait()
    out["broadcast"] = []
    for src in range(p):
        t = mini.tensor(np.full(3, float(r)))
        dist.broadcast(t, src=src)
        out["broadcast"].append(t.numpy().copy())
    lst = [mini.zeros(2, 2) for _ in range(p)]
    dist.all_gather(lst, mini.full((2, 2), float(r)))
    out["all_gather"] = [t.numpy().copy() for t in lst]
    flat = mini.zeros(2 * p)
    dist.all_gather_into_tensor(flat, mini.tensor([float(r), float(-r)]))
    out["all_gather_into_tensor"] = flat.numpy().copy()
    inputs = [mini.tensor(np.full(3, 10.0 * r + q, dtype=np.float32)) for q in range(p)]
    res = mini.zeros(3)
    dist.reduce_scatter(res, inputs)
    out["reduce_scatter"] = res.numpy().copy()
    # point to point around the ring, non-blocking, and a receive from any source
    buf = mini.zeros(5)
    w_recv = dist.irecv(buf, src=(r - 1) % p)
    w_send = dist.isend(mini.full((5,), float(r)), dst=(r + 1) % p)
    w_send.wait()
    w_recv.wait()
    out["irecv_from_previous"] = buf.numpy().copy()
    if r == 0:
        senders = []
        for _ in range(p - 1):
            b = mini.zeros(1)
            senders.append((dist.recv(b), float(b.item())))
        out["any_source"] = sorted(senders)
    elif p > 1:
        dist.send(mini.tensor([float(r)]), 0)
    objs = [None] * p
    dist.all_gather_object(objs, {"rank": r, "text": "x" * r})
    out["all_gather_object"] = objs
    lst = [{"a": r}] if r == 0 else [None]
    dist.broadcast_object_list(lst, src=0)
    out["broadcast_object_list"] = lst
    # a receive into an integer tensor bumps the version counter (autograd sees the write)
    t = mini.zeros(3)
    v0 = t._version
    dist.broadcast(t, src=0)
    out["version_bumped"] = t._version > v0 or (r == 0)
    dist.barrier()
    errors = {}
    for name, call in {
        "dst_out_of_range": lambda: dist.send(mini.zeros(1), p),
        "non_contiguous": lambda: dist.all_reduce(mini.zeros(3, 4).T),
        "not_a_tensor": lambda: dist.all_reduce([1.0, 2.0]),
        "avg_of_ints": lambda: dist.all_reduce(mini.tensor([1, 2]), op=ReduceOp.AVG),
        "second_init": lambda: dist.init_process_group(),
    }.items():
        try:
            call()
            errors[name] = None
        except Exception as e:  # noqa: BLE001 -- the message is what is checked
            errors[name] = f"{type(e).__name__}: {e}"
    out["errors"] = errors
    return out


# --------------------------------------------------------------------------- DDP

STEPS, BATCH = 4, 12     # 12 divides into 1, 2, 3 and 4 ranks


def _mlp(seed: int):
    import mini
    import mini.nn as nn
    mini.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(),
                         nn.Linear(16, 3))


def _data(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((STEPS, BATCH, 5)).astype(np.float32)
    Y = rng.integers(0, 3, (STEPS, BATCH))
    return X, Y


def _params(model) -> list:
    return [q.detach().numpy().copy() for q in model.parameters()]


def _checkpointed_mlp(seed: int):
    """The same layers as :func:`_mlp`, run with ``checkpoint_sequential`` in 2 segments."""
    import mini.nn as nn
    from mini.utils.checkpoint import checkpoint_sequential

    class CheckpointedMLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = _mlp(seed)

        def forward(self, x):
            return checkpoint_sequential(self.layers, 2, x, use_reentrant=False)

    return CheckpointedMLP()


def ddp_training(cap_mb=0.0005, hook=None, checkpointed=False, record=False):
    """K steps of SGD on rank r's slice of each batch, under DDP; plus (locally) the same
    K steps on the whole batch without DDP, on one process: what DDP must reproduce."""
    import mini
    import mini.distributed as dist
    import mini.nn as nn
    from mini.nn.parallel import DistributedDataParallel as DDP
    r, p = _world()
    build = _checkpointed_mlp if checkpointed else _mlp
    net = build(seed=100 + r)          # every rank starts elsewhere: DDP broadcasts rank 0's
    if r == 0:
        net = build(seed=0)
    model = DDP(net, bucket_cap_mb=cap_mb)
    if hook is not None:
        model.register_comm_hook(None, hook)
    opt = mini.optim.SGD(model.parameters(), lr=0.1)
    X, Y = _data()
    per = BATCH // p
    logs = []
    for s in range(STEPS):
        opt.zero_grad()
        x, y = mini.tensor(X[s, r * per:(r + 1) * per]), mini.tensor(Y[s, r * per:(r + 1) * per])
        with dist.record_communication() as log:
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
        logs.append(log.to_records())
        opt.step()
    ref = _mlp(seed=0)
    ref_opt = mini.optim.SGD(ref.parameters(), lr=0.1)
    for s in range(STEPS):
        ref_opt.zero_grad()
        nn.functional.cross_entropy(ref(mini.tensor(X[s])), mini.tensor(Y[s])).backward()
        ref_opt.step()
    return {"params": _params(net), "reference": _params(ref),
            "buckets": model.bucket_assignment,
            "sizes": [q.numel() * q.element_size() for q in net.parameters()],
            "logs": logs if record else None}


def ddp_no_sync(micro=2):
    """Gradient accumulation: ``micro`` micro-batches per rank, all but the last under
    no_sync, each loss divided by ``micro``; equals one step on the whole batch."""
    import mini
    import mini.distributed as dist
    import mini.nn as nn
    from mini.nn.parallel import DistributedDataParallel as DDP
    r, p = _world()
    net = _mlp(seed=0)
    model = DDP(net, bucket_cap_mb=0.0005)
    opt = mini.optim.SGD(model.parameters(), lr=0.1)
    X, Y = _data(1)
    per = BATCH // p
    m = per // micro
    reduces = []
    for s in range(2):
        opt.zero_grad()
        xs, ys = X[s, r * per:(r + 1) * per], Y[s, r * per:(r + 1) * per]
        with dist.record_communication() as log:
            for k in range(micro):
                xb, yb = mini.tensor(xs[k * m:(k + 1) * m]), mini.tensor(ys[k * m:(k + 1) * m])
                if k < micro - 1:
                    with model.no_sync():
                        (nn.functional.cross_entropy(model(xb), yb) / micro).backward()
                else:
                    (nn.functional.cross_entropy(model(xb), yb) / micro).backward()
        reduces.append(len(log.select("all_reduce")))
        opt.step()
    ref = _mlp(seed=0)
    ref_opt = mini.optim.SGD(ref.parameters(), lr=0.1)
    for s in range(2):
        ref_opt.zero_grad()
        nn.functional.cross_entropy(ref(mini.tensor(X[s])), mini.tensor(Y[s])).backward()
        ref_opt.step()
    return {"params": _params(net), "reference": _params(ref), "reduces": reduces,
            "buckets": len(model.bucket_assignment)}


def ddp_unused_parameters():
    """Rank 0 skips branch b; the others use it; branch c is never used."""
    import mini
    import mini.nn as nn
    from mini.nn.parallel import DistributedDataParallel as DDP
    r, p = _world()

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.c = nn.Linear(4, 3), nn.Linear(4, 3), nn.Linear(4, 3)

        def forward(self, x, use_b):
            y = self.a(x)
            return y + self.b(x) if use_b else y

    def build():
        mini.manual_seed(0)
        return Net()

    net = build()
    model = DDP(net, find_unused_parameters=True)
    x = np.random.default_rng(2).standard_normal((p, 2, 4)).astype(np.float32)
    model(mini.tensor(x[r]), use_b=(r != 0)).pow(2).sum().backward()
    got = {n: (None if q.grad is None else q.grad.numpy().copy()) for n, q in net.named_parameters()}
    # the reference: every rank's loss in one process, averaged
    ref = build()
    total = None
    for q in range(p):
        loss = ref(mini.tensor(x[q]), use_b=(q != 0)).pow(2).sum()
        total = loss if total is None else total + loss
    (total / p).backward()
    want = {n: (None if q.grad is None else q.grad.numpy().copy()) for n, q in ref.named_parameters()}
    # without find_unused_parameters the buckets of c never fill: the next forward says so
    strict = DDP(build())
    message = None
    try:
        for _ in range(2):
            strict(mini.tensor(x[r]), use_b=True).pow(2).sum().backward()
    except RuntimeError as e:
        message = str(e)
    return {"got": got, "want": want, "strict_error": message}


# --------------------------------------------------------------------------- ZeRO

def zero_cases():
    import mini
    import mini.nn as nn
    from mini.distributed.optim import ZeroRedundancyOptimizer
    r, p = _world()
    results = {}
    for name, build in {
        "mlp": lambda: nn.Sequential(nn.Linear(7, 5), nn.Tanh(), nn.Linear(5, 3)),
        "tiny": lambda: nn.Linear(1, 1),          # Ψ = 2 < p for p = 3, 4: empty shards
    }.items():
        mini.manual_seed(0)
        net = build()
        mini.manual_seed(0)
        ref = build()
        zero = ZeroRedundancyOptimizer(net.parameters(), optimizer_class=mini.optim.AdamW,
                                       lr=0.05, weight_decay=0.1)
        plain = mini.optim.AdamW(ref.parameters(), lr=0.05, weight_decay=0.1)
        rng = np.random.default_rng(1)
        n_in = net[0].in_features if name == "mlp" else 1
        for _ in range(4):
            x = mini.tensor(rng.standard_normal((6, n_in)).astype(np.float32))
            for model, opt in ((net, zero), (ref, plain)):
                opt.zero_grad()
                model(x).pow(2).mean().backward()
                opt.step()
        plain_bytes = sum(v.nbytes for s in plain.state.values() for v in s.values()
                          if isinstance(v, mini.Tensor))
        results[name] = {"params": _params(net), "reference": _params(ref),
                         "state_bytes": zero.local_state_bytes(), "numel": zero.numel,
                         "plain_state_bytes": plain_bytes, "shard": (zero.start, zero.stop)}
    return results


def sampler_cases():
    from mini.utils.data import DistributedSampler
    r, p = _world()
    out = {}
    for n in (0, 1, 5, 12, 13):
        for drop_last in (False, True):
            for epoch in (0, 1):
                s = DistributedSampler(list(range(n)), shuffle=True, seed=3, drop_last=drop_last)
                s.set_epoch(epoch)
                out[(n, drop_last, epoch)] = list(s)
    return out


def world_checks() -> dict:
    """Everything that one job of p ranks checks, in one go."""
    return {"ring": ring_cases(), "wrong_ring": wrong_ring_cases(),
            "collectives": collective_cases(), "ddp": ddp_training(record=True),
            "ddp_ring_hook": ddp_ring_hook(), "ddp_checkpointed": ddp_training(checkpointed=True),
            "ddp_no_sync": ddp_no_sync(), "ddp_unused": ddp_unused_parameters(),
            "zero": zero_cases(), "sampler": sampler_cases(), "pingpong": pingpong()}


def pingpong():
    from mini.napkin.scaling import measure_pingpong
    _, p = _world()
    return measure_pingpong((8, 4096, 1 << 16, 1 << 20), repeats=3) if p > 1 else None


def ddp_ring_hook():
    from mini.nn.parallel.distributed import ring_allreduce_hook
    return ddp_training(hook=ring_allreduce_hook)


# --------------------------------------------------------------------------- failures

def raise_on(bad_rank: int):
    import mini
    import mini.distributed as dist
    r, _ = _world()
    if r == bad_rank:
        raise ValueError(f"deliberate failure on rank {r}")
    dist.all_reduce(mini.ones(3))


def die_on(bad_rank: int):
    import os
    import signal

    import mini
    import mini.distributed as dist
    r, _ = _world()
    if r == bad_rank:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.all_reduce(mini.ones(3))


def deadlock():
    """Every rank waits to receive first: nobody sends."""
    import mini
    import mini.distributed as dist
    r, p = _world()
    buf = mini.zeros(4)
    dist.recv(buf, src=(r - 1) % p)
    dist.send(buf, dst=(r + 1) % p)


def busy_rank(bad_rank: int, seconds: float = 600.0):
    """One rank computes for ever (never communicates); the others wait for it."""
    import time

    import mini
    import mini.distributed as dist
    r, _ = _world()
    if r == bad_rank:
        t = time.monotonic()
        while time.monotonic() - t < seconds:
            pass
    dist.all_reduce(mini.ones(3))


def sleep_forever_everywhere():
    import time
    time.sleep(600)


# --------------------------------------------------------------------------- checkpoints

def _ckpt_model():
    import mini
    import mini.nn as nn
    mini.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 9), nn.Tanh(), nn.Linear(9, 4))   # Ψ = 103


def _ckpt_step(model, opt, s: int) -> None:
    import mini
    rng = np.random.default_rng(s)
    opt.zero_grad()
    model(mini.tensor(rng.standard_normal((5, 6)).astype(np.float32))).pow(2).mean().backward()
    opt.step()


def _zero(model):
    import mini
    from mini.distributed.optim import ZeroRedundancyOptimizer
    return ZeroRedundancyOptimizer(model.parameters(), optimizer_class=mini.optim.AdamW, lr=0.05)


def _full_state(zero) -> dict:
    """The whole optimizer state, gathered from every rank's shard (for comparisons)."""
    import mini.distributed as dist
    sd = zero.state_dict()
    mine = {k: (v.offset, v.tensor.numpy().copy()) for k, v in sd["state"].items()
            if hasattr(v, "offset")}
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    full = {}
    for part in every:
        for k, (offset, arr) in part.items():
            full.setdefault(k, np.zeros(zero.numel, arr.dtype))[offset:offset + arr.size] = arr
    full["step"] = sd["state"].get("step")
    return full


def dcp_save(directory: str, steps: int):
    """Train ``steps`` steps, save, train one more: returns the state at the save and the
    parameters one step later."""
    import mini.distributed.checkpoint as dcp
    model = _ckpt_model()
    zero = _zero(model)
    for s in range(steps):
        _ckpt_step(model, zero, s)
    dcp.save({"model": model.state_dict(), "optim": zero.state_dict(), "step": steps,
              "note": "saved"}, directory)
    saved = {"params": _params(model), "optim": _full_state(zero)}
    _ckpt_step(model, zero, steps)
    return {"saved": saved, "next": _params(model)}


def dcp_load(directory: str):
    """Load into a fresh model and optimizer, train one step."""
    import mini.distributed.checkpoint as dcp
    model = _ckpt_model()
    zero = _zero(model)
    sd = {"model": model.state_dict(), "optim": zero.state_dict(), "step": None}
    dcp.load(sd, directory)
    model.load_state_dict(sd["model"])
    zero.load_state_dict(sd["optim"])
    loaded = {"params": _params(model), "optim": _full_state(zero), "step": sd["step"],
              "note": sd.get("note")}
    _ckpt_step(model, zero, sd["step"])
    return {"loaded": loaded, "next": _params(model)}


def plain_adamw_params(steps: int) -> list:
    """The parameters after ``steps`` steps of ordinary AdamW in one process (ZeRO-1 gives
    these bit for bit)."""
    import mini
    model = _ckpt_model()
    opt = mini.optim.AdamW(model.parameters(), lr=0.05)
    for s in range(steps):
        _ckpt_step(model, opt, s)
    return _params(model)


def dcp_save_killed(directory: str, victim: int, where: str):
    """Save after 2 steps, train a step, then save again while rank ``victim`` is killed
    (SIGKILL) half-way through writing its shard (``where="shard"``) or, on rank 0, after
    the new manifest is written but before it replaces the old one (``"manifest"``)."""
    import io
    import os
    import signal
    import tempfile

    import mini.distributed as dist
    import mini.distributed.checkpoint as dcp
    r = dist.get_rank()
    model = _ckpt_model()
    zero = _zero(model)
    for s in range(2):
        _ckpt_step(model, zero, s)
    dcp.save({"model": model.state_dict(), "optim": zero.state_dict(), "step": 2}, directory)
    _ckpt_step(model, zero, 2)
    publish = dcp.publish_atomically

    def dying(path, write):
        name = os.path.basename(path)
        if r == victim and where == "shard" and name.startswith("shard-"):
            def half(f):
                buf = io.BytesIO()
                write(buf)
                f.write(buf.getvalue()[:len(buf.getvalue()) // 2])
                f.flush()
                os.fsync(f.fileno())
                os.kill(os.getpid(), signal.SIGKILL)
            return publish(path, half)
        if r == victim and where == "manifest" and name == dcp.MANIFEST:
            fd, tmp = tempfile.mkstemp(prefix="." + name + ".", suffix=".tmp",
                                       dir=os.path.dirname(path))
            with os.fdopen(fd, "wb") as f:
                write(f)
            os.kill(os.getpid(), signal.SIGKILL)
        return publish(path, write)

    dcp.publish_atomically = dying
    dcp.save({"model": model.state_dict(), "optim": zero.state_dict(), "step": 3}, directory)
