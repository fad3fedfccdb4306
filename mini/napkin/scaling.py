"""The cost models of chapter 06 (scaling) as plain functions, and the measurements that
check them on the machine at hand.

Communication, in the α-β model: a message of n bytes takes ``α + n/β`` seconds (α the
latency per message, β the bandwidth).  A ring all-reduce of N bytes over p ranks sends
2(p - 1) messages of N/p bytes from every rank, one after the other::

    T_ring = 2 (p - 1) α + 2 (p - 1)/p · N/β

so for large N its time barely depends on p.  α and β of an MPI on one machine come from a
ping-pong sweep (:func:`measure_pingpong`, :func:`fit_alpha_beta`).

Memory per rank for Ψ parameters (bytes):

- plain data parallelism, float32 Adam: weights 4Ψ + gradients 4Ψ + Adam's two moments 8Ψ
  = 16Ψ (the seed's "16 B/param");
- ZeRO-1 (optimizer state sharded over p ranks), float32: 4Ψ + 4Ψ + 8Ψ/p;
- ZeRO paper's mixed-precision form (fp16 weights and gradients, K = 12 bytes of fp32 master
  weights, momentum and variance): stage 1 (2 + 2)Ψ + KΨ/p, stage 2 2Ψ + (2 + K)Ψ/p,
  stage 3 (2 + 2 + K)Ψ/p.  Ψ = 7.5e9, p = 64: 120 GB without ZeRO, 31.4, 16.6, 1.9 GB.

Also: the pipeline bubble (p - 1)/(m + p - 1) for p stages and m micro-batches; activation
checkpointing's memory and recompute; stragglers (a synchronous step takes as long as its
slowest rank); the seed's rule that a step whose compute is under 3× its gradient-sync time
is communication-bound.

    >>> ring_allreduce_time(16 * 2**20, 2, alpha=0.0, beta=1e9) * 1e3   # ms
    16.777216
    >>> round(pipeline_bubble_fraction(4, 8), 4)
    0.2727
"""
from __future__ import annotations

import math
import time
from typing import Sequence

import numpy as np

__all__ = ["ring_allreduce_time", "ring_message_sizes", "ring_sent_elements",
           "ring_sent_bytes_per_rank", "fit_alpha_beta", "measure_pingpong",
           "ddp_memory_per_rank", "zero_memory_per_rank", "pipeline_bubble_fraction",
           "checkpoint_cost", "step_time_with_stragglers", "scaling_efficiency",
           "is_communication_bound", "overlap_timeline", "measure_activation_memory",
           "measure_allreduce", "bucket_timeline", "pipeline_schedule", "timed_steps",
           "measure_training_memory"]


# --------------------------------------------------------------------------- communication

def ring_allreduce_time(nbytes: float, p: int, alpha: float, beta: float) -> float:
    """Seconds for a ring all-reduce of ``nbytes`` over ``p`` ranks:
    ``2 (p - 1) α + 2 (p - 1)/p · nbytes/β`` (0 for one rank)."""
    if p < 1:
        raise ValueError(f"p must be at least 1, got {p}")
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * nbytes / beta


def ring_message_sizes(n: int, p: int) -> list[int]:
    """Elements in each of the p chunks of an array of ``n`` (the split of
    ``mini.distributed.shard_bounds``: ceil(n/p) for the first n % p chunks, floor after)."""
    base, extra = divmod(n, p)
    return [base + (1 if c < extra else 0) for c in range(p)]


def ring_sent_elements(n: int, p: int, rank: int) -> int:
    """Elements rank ``rank`` sends in a ring all-reduce: every chunk but ``(rank + 1) % p``
    in the reduce-scatter, every chunk but ``(rank + 2) % p`` in the all-gather.  Exactly
    ``2 (p - 1)/p · n`` when p divides n."""
    if p == 1:
        return 0
    sizes = ring_message_sizes(n, p)
    return 2 * n - sizes[(rank + 1) % p] - sizes[(rank + 2) % p]


def ring_sent_bytes_per_rank(n: int, p: int, itemsize: int = 4) -> float:
    """The model's bytes per rank: ``2 (p - 1)/p · n · itemsize``."""
    return 2 * (p - 1) / p * n * itemsize


def fit_alpha_beta(sizes: Sequence[float], seconds: Sequence[float]) -> tuple[float, float]:
    """Least-squares fit of ``t = α + n/β`` to one-way message times; returns ``(α, β)``
    (seconds, bytes per second).

    The fit minimises the *relative* error of each point: the times of a sweep span four
    orders of magnitude, and a plain fit in seconds lets the jitter of the largest messages
    decide α (measured on a busy laptop: α = 140 µs from a sweep whose 8-byte message took
    17 µs).  Weighted by 1/t, every size counts alike and α follows the small messages."""
    n = np.asarray(sizes, dtype=np.float64)
    t = np.asarray(seconds, dtype=np.float64)
    if n.shape != t.shape or n.size < 2:
        raise ValueError(f"need at least two (size, time) pairs of equal length, got "
                         f"{n.size} sizes and {t.size} times")
    if not np.all(t > 0):
        raise ValueError(f"message times must be positive seconds, got {t.tolist()}")
    A = np.stack([np.ones_like(n), n], axis=1)
    (alpha, inv_beta), *_ = np.linalg.lstsq(A / t[:, None], np.ones_like(t), rcond=None)
    if inv_beta <= 0:
        raise ValueError("the times do not grow with the message size; measure larger "
                         "messages")
    return max(float(alpha), 0.0), float(1.0 / inv_beta)


def measure_pingpong(sizes: Sequence[int] = (8, 1 << 10, 1 << 14, 1 << 17, 1 << 20, 1 << 22),
                     repeats: int = 10) -> list[float]:
    """One-way time of a message of each size (bytes) between ranks 0 and 1, half the best
    round trip of ``repeats``: call it on every rank of a job of at least 2 ranks (ranks
    other than 0 and 1 just wait).  Returns the times on every rank."""
    from mini import distributed as dist
    rank, world = dist.get_rank(), dist.get_world_size()
    if world < 2:
        raise RuntimeError("a ping-pong needs two ranks: launch with mpiexec -n 2")
    times = np.zeros(len(sizes))
    for i, size in enumerate(sizes):
        buf = np.zeros(max(int(size), 0), dtype=np.uint8)
        best = math.inf
        dist.barrier()
        for _ in range(repeats):
            if rank == 0:
                start = time.perf_counter()
                dist.send(buf, 1)
                dist.recv(buf, 1)
                best = min(best, time.perf_counter() - start)
            elif rank == 1:
                dist.recv(buf, 0)
                dist.send(buf, 0)
        times[i] = best / 2 if rank == 0 else 0.0
    dist.broadcast(times, src=0)
    return times.tolist()


# --------------------------------------------------------------------------- memory

def ddp_memory_per_rank(psi: int, itemsize: int = 4, optimizer_state_bytes: int = 8) -> dict:
    """Bytes per rank under plain data parallelism: every rank holds everything."""
    out = {"weights": itemsize * psi, "gradients": itemsize * psi,
           "optimizer": optimizer_state_bytes * psi}
    out["total"] = sum(out.values())
    return out


def zero_memory_per_rank(psi: int, p: int, stage: int = 1, mixed_precision: bool = False,
                         k: int = 12) -> dict:
    """Bytes per rank with ZeRO ``stage`` (0 = none, 1 = optimizer state, 2 = + gradients,
    3 = + weights sharded over ``p`` ranks).

    float32 (``mixed_precision=False``): weights 4Ψ, gradients 4Ψ, Adam state 8Ψ.
    ``mixed_precision=True`` is the ZeRO paper's accounting: fp16 weights 2Ψ, fp16 gradients
    2Ψ, and ``k`` bytes per parameter of fp32 optimizer state (master weights, momentum,
    variance: K = 12)."""
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"ZeRO stages are 0, 1, 2, 3; got {stage}")
    if p < 1:
        raise ValueError(f"p must be at least 1, got {p}")
    w, g, s = (2, 2, k) if mixed_precision else (4, 4, 8)
    out = {"weights": w * psi / (p if stage >= 3 else 1),
           "gradients": g * psi / (p if stage >= 2 else 1),
           "optimizer": s * psi / (p if stage >= 1 else 1)}
    out["total"] = sum(out.values())
    return out


# --------------------------------------------------------------------------- compute

def pipeline_bubble_fraction(p: int, m: int) -> float:
    """Idle fraction of a pipeline of ``p`` stages running ``m`` micro-batches (GPipe):
    ``(p - 1)/(m + p - 1)``."""
    if p < 1 or m < 1:
        raise ValueError(f"need p >= 1 stages and m >= 1 micro-batches, got p={p}, m={m}")
    return (p - 1) / (m + p - 1)


def checkpoint_cost(n_layers: int, segments: int) -> dict:
    """Activation checkpointing of ``n_layers`` equal layers with ``checkpoint_sequential``
    (``segments`` segments of ``n_layers // segments`` layers, the last takes the rest and is
    not checkpointed), in units of one layer's activations and one layer's forward:

    - ``peak_activations``: the segment inputs kept plus the larger of the last segment and
      one recomputed segment (no checkpointing: ``n_layers``);
    - ``recomputed_layers``: layers run twice; ``extra_forward``: that over ``n_layers``.

    With ``segments`` ≈ √n the peak is about 2√n for less than one extra forward."""
    if not 1 <= segments <= n_layers:
        raise ValueError(f"segments must be between 1 and n_layers ({n_layers}), got {segments}")
    size = n_layers // segments
    last = n_layers - size * (segments - 1)
    recomputed = size * (segments - 1)
    peak = n_layers if segments == 1 else (segments - 1) + max(last, size)
    return {"peak_activations": peak, "recomputed_layers": recomputed,
            "extra_forward": recomputed / n_layers}


def step_time_with_stragglers(rank_seconds: Sequence[float]) -> float:
    """A synchronous data-parallel step waits for its slowest rank."""
    return float(max(rank_seconds))


def scaling_efficiency(t1: float, tp: float, p: int) -> float:
    """Speed-up over one rank divided by the number of ranks: ``t1 / (p · tp)``."""
    return t1 / (p * tp)


def is_communication_bound(compute_seconds: float, sync_seconds: float,
                           factor: float = 3.0) -> bool:
    """The seed's rule of thumb: a step whose compute is under ``factor`` (3) × its gradient
    synchronisation is communication-bound (use bigger batches, accumulation, compression)."""
    return compute_seconds < factor * sync_seconds


def overlap_timeline(ready_seconds: Sequence[float], bucket_bytes: Sequence[float], p: int,
                     alpha: float, beta: float) -> list[tuple[float, float]]:
    """When each bucket's all-reduce runs if bucket b is ready at ``ready_seconds[b]`` (from
    the start of backward) and all-reduces go one at a time in bucket order: it starts at
    ``max(ready, end of the previous one)`` and lasts ``ring_allreduce_time``.  Returns
    ``[(start, end), ...]``; the last end minus the end of backward is the communication
    that overlap could not hide."""
    if len(ready_seconds) != len(bucket_bytes):
        raise ValueError(f"{len(ready_seconds)} ready times for {len(bucket_bytes)} buckets")
    out, free = [], 0.0
    for ready, nbytes in zip(ready_seconds, bucket_bytes):
        start = max(float(ready), free)
        free = start + ring_allreduce_time(nbytes, p, alpha, beta)
        out.append((start, free))
    return out


# --------------------------------------------------------------------------- measurement

def measure_activation_memory(step) -> dict:
    """Run ``step()`` (a forward and backward) and measure what it allocates:
    ``{"peak_bytes": ..., "ops": {"forward": n, "backward": m}, "forward_ops": {name: n}}``.

    The peak is tracemalloc's, over the run, above what was allocated before; mini's pool of
    large buffers is switched off meanwhile (a recycled buffer would not show up as an
    allocation).  Operation counts come from mini's profiler, recomputed forwards included."""
    import tracemalloc

    from mini.backends import numpy_backend
    from mini.utils import profiler
    pool, numpy_backend.POOL_ENABLED = numpy_backend.POOL_ENABLED, False
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        with profiler.profile() as prof:
            step()
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        if started:
            tracemalloc.stop()
        numpy_backend.POOL_ENABLED = pool
    counts = {ph: sum(prof.op_counts(ph).values()) for ph in ("forward", "backward")}
    return {"peak_bytes": int(peak), "ops": counts, "forward_ops": prof.op_counts("forward")}


# --------------------------------------------------------------------------- on the ranks
#
# The functions below run on every rank of a job (``mini.distributed.launch.run(fn, p,
# args=...)``) and return plain data, the same on every rank unless said otherwise.

def _slowest(seconds: float) -> float:
    """The largest of every rank's ``seconds``: a collective step ends with its last rank."""
    from mini import distributed as dist
    t = np.array([seconds], dtype=np.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t[0])


def measure_allreduce(sizes: Sequence[int] = (1 << 10, 1 << 14, 1 << 17, 1 << 20, 1 << 22,
                                               1 << 24), repeats: int = 5) -> dict:
    """Seconds to all-reduce float32 arrays of each size in bytes, with the ring of exercise
    06.ring_allreduce (``mini.distributed.ring_allreduce``: your implementation once it is
    registered) and with MPI's own ``MPI_Allreduce`` (``mini.distributed.all_reduce``),
    alternating, best of ``repeats`` each; a trial lasts until the slowest rank is done.
    Call it on every rank.  Returns ``{"p", "sizes", "ring", "mpi"}``."""
    from mini import distributed as dist
    from mini.autograd.tensor import Tensor
    p = dist.get_world_size()
    out = {"p": p, "sizes": [int(n) for n in sizes], "ring": [], "mpi": []}
    for size in sizes:
        n = max(int(size) // 4, 1)
        data = np.random.default_rng(dist.get_rank()).standard_normal(n).astype(np.float32)
        best = {"ring": math.inf, "mpi": math.inf}
        for _ in range(int(repeats)):
            for name, op in (("ring", dist.ring_allreduce), ("mpi", dist.all_reduce)):
                t = Tensor(data.copy())
                dist.barrier()
                start = time.perf_counter()
                op(t)
                best[name] = min(best[name], _slowest(time.perf_counter() - start))
        out["ring"].append(best["ring"])
        out["mpi"].append(best["mpi"])
    return out


def timed_steps(compute_seconds: float, slow_rank: int | None = None, slowdown: float = 1.0,
                steps: int = 5, nbytes: int = 1 << 16) -> dict:
    """Synchronous data-parallel steps with a simulated compute phase (a sleep of
    ``compute_seconds``; ``slowdown`` times that on ``slow_rank``), each ending with an
    all-reduce of ``nbytes``.  Returns this rank's ``compute`` and ``step`` seconds per
    step: every rank's step lasts as long as the slowest rank's compute.  ``computed`` and
    ``reduced`` are the ``time.perf_counter()`` moments each step's compute and all-reduce
    ended (one clock for every process of a machine): no rank's all-reduce of step k ends
    before the slowest rank has computed step k."""
    from mini import distributed as dist
    from mini.autograd.tensor import Tensor
    rank = dist.get_rank()
    grad = Tensor(np.ones(max(int(nbytes) // 4, 1), dtype=np.float32))
    compute, step, computed, reduced = [], [], [], []
    dist.barrier()
    for _ in range(int(steps)):
        start = time.perf_counter()
        time.sleep(compute_seconds * (slowdown if rank == slow_rank else 1.0))
        mid = time.perf_counter()
        dist.all_reduce(grad)
        end = time.perf_counter()
        compute.append(mid - start)
        step.append(end - start)
        computed.append(mid)
        reduced.append(end)
    return {"rank": rank, "compute": compute, "step": step, "computed": computed,
            "reduced": reduced}


def measure_training_memory(numels: Sequence[int], zero: bool, lr: float = 1e-3) -> dict:
    """Bytes this rank holds after one AdamW step on float32 parameters of the given sizes:
    ``weights``, ``gradients`` and ``optimizer`` state (tensors counted by their bytes),
    with plain AdamW (every rank holds all of it) or with
    :class:`~mini.distributed.optim.ZeroRedundancyOptimizer` (``zero=True``: exercise
    06.zero_step).  Call it on every rank."""
    from mini import distributed as dist
    from mini.autograd.tensor import Tensor
    from mini.nn.parameter import Parameter
    from mini.optim import AdamW
    gen = np.random.default_rng(0)
    params = [Parameter(Tensor(gen.standard_normal(int(k)).astype(np.float32))) for k in numels]
    if zero:
        from mini.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(params, optimizer_class=AdamW, lr=lr)
        state = opt.optim.state
    else:
        opt = AdamW(params, lr=lr)
        state = opt.state
    for q in params:
        q.grad = Tensor(np.ones(q.numel(), dtype=np.float32))
    opt.step()
    return {"rank": dist.get_rank(), "p": dist.get_world_size(),
            "weights": sum(q.nbytes for q in params),
            "gradients": sum(q.grad.nbytes for q in params),
            "optimizer": sum(v.nbytes for s in state.values() for v in s.values()
                             if isinstance(v, Tensor))}


# --------------------------------------------------------------------------- pictures' data

def bucket_timeline(records: Sequence[dict], sizes: Sequence[int], cap_bytes: int, p: int,
                    alpha: float, beta: float, start: float) -> dict:
    """The α-β timeline of DDP's buckets for a cap, drawn from one backward's event log.

    ``records``: :meth:`CommLog.to_records` of a backward under DDP (its ``grad_ready``
    markers say when each parameter's gradient was final, ``info["param"]``); ``sizes``:
    each parameter's bytes; ``start``: ``time.perf_counter()`` when backward began.  The
    buckets for ``cap_bytes`` come from exercise 06.assign_buckets.  Returns the seconds
    (from ``start``) at which each bucket is ready, its all-reduce's ``(start, end)`` in the
    model (:func:`overlap_timeline`), the end of backward, and the communication left after
    it (``exposed``); ``serial`` is the same all-reduced after backward in one piece."""
    from mini.nn.parallel.distributed import assign_buckets
    ready = {}
    for e in records:
        if e.get("op") == "grad_ready" and (e.get("info") or {}).get("param") is not None:
            ready[int(e["info"]["param"])] = float(e["start"]) - start
    if len(ready) != len(sizes):
        raise ValueError(f"the log has grad_ready markers for {len(ready)} parameters, "
                         f"expected {len(sizes)}: record one whole backward under DDP")
    buckets = assign_buckets([int(s) for s in sizes], int(cap_bytes))
    bucket_ready = [max(ready[i] for i in b) for b in buckets]
    bucket_bytes = [sum(int(sizes[i]) for i in b) for b in buckets]
    spans = overlap_timeline(bucket_ready, bucket_bytes, p, alpha, beta)
    end_backward = max(ready.values())
    total = sum(int(s) for s in sizes)
    return {"buckets": buckets, "ready": bucket_ready, "bytes": bucket_bytes, "spans": spans,
            "backward_end": end_backward, "param_ready": [ready[i] for i in range(len(sizes))],
            "exposed": max(0.0, spans[-1][1] - end_backward) if spans else 0.0,
            "serial": ring_allreduce_time(total, p, alpha, beta)}


def pipeline_schedule(p: int, m: int) -> list[list[int | None]]:
    """GPipe's forward schedule: ``grid[stage][slot]`` is the micro-batch stage ``stage``
    works on in time slot ``slot`` (None: idle, the bubble).  ``m + p - 1`` slots; each
    stage is busy in ``m`` of them, so the idle fraction is
    :func:`pipeline_bubble_fraction`."""
    pipeline_bubble_fraction(p, m)          # validates p and m
    return [[slot - stage if 0 <= slot - stage < m else None for slot in range(m + p - 1)]
            for stage in range(p)]
