"""Typical wrong implementations of the chapter 06 exercises (scaling).

Each one is a plausible student answer; the checks of :mod:`grader.checks.ch06_scaling` must
fail it with a message that names the mistake.  The distributed ones run on real MPI ranks
(the ranks import this module to find them), so each is a module-level function.
"""
from __future__ import annotations

import contextlib
import math

from grader.mistakes import Mistake


# --------------------------------------------------------------------- 06.shard_bounds

def shard_bounds_larger_last(numel, world_size, rank):
    """The extra elements go to the last ranks instead of the first."""
    base, extra = divmod(numel, world_size)
    small = world_size - extra                 # ranks with ``base`` elements come first
    start = rank * base + max(0, rank - small)
    return start, start + base + (1 if rank >= small else 0)


def shard_bounds_ceil(numel, world_size, rank):
    """Chunks of ceil(N/p): the last rank gets what is left, maybe much less (or nothing)."""
    size = -(-numel // world_size)
    start = min(numel, rank * size)
    return start, min(numel, start + size)


# --------------------------------------------------------------------- 06.ring_allreduce

def _ring_setup(tensor):
    import mini.distributed as dist
    from mini.distributed.ring import shard_bounds
    p, r = dist.get_world_size(), dist.get_rank()
    flat = tensor.view(-1)
    n = flat.numel()
    return p, r, flat, [shard_bounds(n, p, c) for c in range(p)]


def ring_gather_wrong_chunks(tensor, group=None):
    """The all-gather phase reuses the reduce-scatter's schedule: each rank starts by
    sending a chunk it has not finished summing."""
    import mini
    import mini.distributed as dist
    p, r, flat, bounds = _ring_setup(tensor)
    if p == 1:
        return
    nxt, prv = (r + 1) % p, (r - 1) % p
    with mini.no_grad():
        for s in range(p - 1):
            a, b = bounds[(r - s) % p]
            c, d = bounds[(r - s - 1) % p]
            buf = mini.empty(d - c, dtype=tensor.dtype)
            work = dist.isend(flat[a:b], nxt)
            dist.recv(buf, prv)
            work.wait()
            flat[c:d].add_(buf)
        for s in range(p - 1):
            a, b = bounds[(r - s) % p]                # should be (r + 1 - s) % p
            c, d = bounds[(r - s - 1) % p]            # should be (r - s) % p
            work = dist.isend(flat[a:b], nxt)
            dist.recv(flat[c:d], prv)
            work.wait()


def ring_reduce_then_broadcast(tensor, group=None):
    """Everything to rank 0, which sums and sends the result back: the right sum, the
    traffic of a star (rank 0 moves p - 1 whole arrays each way)."""
    import mini
    import mini.distributed as dist
    p, r = dist.get_world_size(), dist.get_rank()
    with mini.no_grad():
        if r == 0:
            buf = mini.empty(*tensor.shape, dtype=tensor.dtype)
            for src in range(1, p):
                dist.recv(buf, src)
                tensor.add_(buf)
            for dst in range(1, p):
                dist.send(tensor, dst)
        else:
            dist.send(tensor, 0)
            dist.recv(tensor, 0)


def ring_builtin_all_reduce(tensor, group=None):
    """MPI's all-reduce does the work."""
    import mini.distributed as dist
    dist.all_reduce(tensor)


def ring_blocking_sends(tensor, group=None):
    """The right schedule with blocking sends: every rank waits for its send before it
    receives; fine while messages are small, a deadlock once they are not."""
    import mini
    import mini.distributed as dist
    p, r, flat, bounds = _ring_setup(tensor)
    if p == 1:
        return
    nxt, prv = (r + 1) % p, (r - 1) % p
    with mini.no_grad():
        for s in range(p - 1):
            a, b = bounds[(r - s) % p]
            c, d = bounds[(r - s - 1) % p]
            buf = mini.empty(d - c, dtype=tensor.dtype)
            dist.send(flat[a:b], nxt)
            dist.recv(buf, prv)
            flat[c:d].add_(buf)
        for s in range(p - 1):
            a, b = bounds[(r + 1 - s) % p]
            c, d = bounds[(r - s) % p]
            dist.send(flat[a:b], nxt)
            dist.recv(flat[c:d], prv)


# --------------------------------------------------------------------- 06.assign_buckets

def buckets_forward(sizes, bucket_cap_bytes):
    """Fills buckets from the first parameter: the first bucket is complete only at the very
    end of backward."""
    buckets, current, total = [], [], 0
    for i in range(len(sizes)):
        current.append(i)
        total += sizes[i]
        if total >= bucket_cap_bytes:
            buckets.append(current)
            current, total = [], 0
    if current:
        buckets.append(current)
    return buckets


def buckets_never_over_cap(sizes, bucket_cap_bytes):
    """Closes a bucket before adding a parameter that would take it over the cap."""
    buckets, current, total = [], [], 0
    for i in reversed(range(len(sizes))):
        if current and total + sizes[i] > bucket_cap_bytes:
            buckets.append(current)
            current, total = [], 0
        current.append(i)
        total += sizes[i]
    if current:
        buckets.append(current)
    return buckets


# --------------------------------------------------------------------- 06.mark_grad_ready

def ready_launch_at_first_gradient(state, index, launch):
    """Launches a bucket when its first gradient arrives: the others are not final yet."""
    bucket = state["bucket_of"][index]
    first = state["pending"][bucket] == sum(1 for b in state["bucket_of"] if b == bucket)
    state["pending"][bucket] -= 1
    if first and bucket == state["next_bucket"]:
        launch(bucket)
        state["next_bucket"] += 1


def ready_out_of_order(state, index, launch):
    """Launches each bucket as soon as it is complete, without waiting for earlier ones."""
    bucket = state["bucket_of"][index]
    state["pending"][bucket] -= 1
    if state["pending"][bucket] == 0:
        launch(bucket)
        state["next_bucket"] = max(state["next_bucket"], bucket + 1)


def ready_launch_at_end(state, index, launch):
    """Waits until every gradient is ready, then launches all buckets: correct averages, no
    overlap with backward."""
    bucket = state["bucket_of"][index]
    state["pending"][bucket] -= 1
    if all(k == 0 for k in state["pending"]):
        for b in range(state["next_bucket"], len(state["pending"])):
            launch(b)
        state["next_bucket"] = len(state["pending"])


# --------------------------------------------------------------------- 06.allreduce_hook

def hook_divide_by_two(state, bucket):
    """Averages for the two ranks the author tested on."""
    import mini
    from mini.distributed import all_reduce
    buf = bucket.buffer()
    with mini.no_grad():
        buf.div_(2)
    return all_reduce(buf, async_op=True)


def hook_waits(state, bucket):
    """Waits for its all-reduce: right values, and backward stands still meanwhile."""
    import mini
    from mini.distributed import all_reduce, get_world_size
    buf = bucket.buffer()
    with mini.no_grad():
        buf.div_(get_world_size())
    work = all_reduce(buf, async_op=True)
    work.wait()
    return work


# --------------------------------------------------------------------- 06.accumulation_step

def accumulate_without_no_sync(model, optimizer, loss_fn, micro_batches):
    """Right gradients, but DDP all-reduces after every micro-batch."""
    if len(micro_batches) == 0:
        raise ValueError("no micro-batches")
    m = len(micro_batches)
    optimizer.zero_grad()
    total = 0.0
    for x, y in micro_batches:
        loss = loss_fn(model(x), y)
        (loss / m).backward()
        total += float(loss.item())
    optimizer.step()
    return total / m


def accumulate_unscaled(model, optimizer, loss_fn, micro_batches):
    """Forgets that m backwards add up: the gradient is m times too large."""
    if len(micro_batches) == 0:
        raise ValueError("no micro-batches")
    m = len(micro_batches)
    optimizer.zero_grad()
    total = 0.0
    for k, (x, y) in enumerate(micro_batches):
        with contextlib.nullcontext() if k == m - 1 else model.no_sync():
            loss = loss_fn(model(x), y)
            loss.backward()
        total += float(loss.item())
    optimizer.step()
    return total / m


# --------------------------------------------------------------------- 06.distributed_sampler_indices

def sampler_same_on_every_rank(order, num_replicas, rank, drop_last=False):
    """Forgets the rank: every rank trains on the same samples."""
    per = len(order) // num_replicas if drop_last else math.ceil(len(order) / num_replicas)
    padded = list(order)
    while len(padded) < per:
        padded += list(order)
    return [int(i) for i in padded[:per]]


def sampler_blocks(order, num_replicas, rank, drop_last=False):
    """Contiguous blocks instead of every num_replicas-th position."""
    n = len(order)
    per = n // num_replicas if drop_last else math.ceil(n / num_replicas)
    padded = list(order)
    while len(padded) < per * num_replicas:
        padded += list(order[:per * num_replicas - len(padded)])
    return [int(i) for i in padded[rank * per:(rank + 1) * per]]


# --------------------------------------------------------------------- 06.zero_step

_FULL: dict = {}


def zero_unsharded(flat_param, flat_grad, shard_param, shard_optimizer, group=None):
    """Every rank steps the whole vector with its own AdamW, kept between steps: the same
    weights as plain AdamW, and the whole optimizer state on every rank."""
    import mini
    from mini.nn.parameter import Parameter
    key = id(shard_optimizer)
    if key not in _FULL:
        full = Parameter(flat_param.detach().clone())
        _FULL[key] = (full, type(shard_optimizer)([full], **shard_optimizer.defaults))
    full, opt = _FULL[key]
    with mini.no_grad():
        full.copy_(flat_param)
        full.grad = flat_grad.clone()
        opt.step()
        flat_param.copy_(full)


def zero_slices_off_by_one(flat_param, flat_grad, shard_param, shard_optimizer, group=None):
    """Takes ``stop`` as the last element's index: every shard's last element is never sent."""
    import mini
    from mini.distributed import broadcast, get_rank, get_world_size
    from mini.distributed.ring import shard_bounds
    p, r = get_world_size(), get_rank()
    n = flat_param.numel()
    start, stop = shard_bounds(n, p, r)
    with mini.no_grad():
        shard_param.copy_(flat_param[start:stop])
        shard_param.grad = flat_grad[start:stop].clone()
        shard_optimizer.step()
        flat_param[start:stop].copy_(shard_param)
        for q in range(p):
            a, b = shard_bounds(n, p, q)
            broadcast(flat_param[a:max(a, b - 1)], src=q)


# --------------------------------------------------------------------- checkpointing

def ckpt_forward_records(ctx, function, args, preserve_rng_state):
    """Runs the segment with grad mode on: it saves its activations after all."""
    import mini
    ctx.function, ctx.inputs = function, args
    ctx.rng_state = mini.get_rng_state() if preserve_rng_state else None
    return function(*args)


def ckpt_forward_rng_after(ctx, function, args, preserve_rng_state):
    """Saves the random state after the segment ran: the recomputation draws new masks."""
    import mini
    ctx.function, ctx.inputs = function, args
    with mini.no_grad():
        out = function(*args)
    ctx.rng_state = mini.get_rng_state() if preserve_rng_state else None
    return out


def ckpt_forward_drops_rng(ctx, function, args, preserve_rng_state):
    """Keeps no random state: dropout differs on recompute."""
    import mini
    ctx.function, ctx.inputs, ctx.rng_state = function, args, None
    with mini.no_grad():
        return function(*args)


def _detached(inputs):
    import mini
    out = []
    for a in inputs:
        if isinstance(a, mini.Tensor):
            d = a.detach()
            d.requires_grad_(a.requires_grad)
            out.append(d)
        else:
            out.append(a)
    return out


def ckpt_backward_ignores_rng(ctx, grad_output):
    """Recomputes with whatever random state there is now: a different dropout mask."""
    import mini
    from mini.autograd.engine import backward
    detached = _detached(ctx.inputs)
    with mini.enable_grad():
        backward(ctx.function(*detached), grad_output)
    return tuple(d.grad if isinstance(d, mini.Tensor) and d.requires_grad else None
                 for d in detached)


def ckpt_backward_keeps_rng(ctx, grad_output):
    """Sets the saved state for the recomputation and leaves it there: the program's later
    random numbers repeat the segment's."""
    import mini
    from mini.autograd.engine import backward
    detached = _detached(ctx.inputs)
    if ctx.rng_state is not None:
        mini.set_rng_state(ctx.rng_state)
    with mini.enable_grad():
        backward(ctx.function(*detached), grad_output)
    return tuple(d.grad if isinstance(d, mini.Tensor) and d.requires_grad else None
                 for d in detached)


def ckpt_backward_no_detach(ctx, grad_output):
    """Recomputes on the original inputs: backward runs into their history as well."""
    import mini
    from mini.autograd.engine import backward
    current = mini.get_rng_state()
    if ctx.rng_state is not None:
        mini.set_rng_state(ctx.rng_state)
    try:
        with mini.enable_grad():
            backward(ctx.function(*ctx.inputs), grad_output)
    finally:
        mini.set_rng_state(current)
    return tuple(a.grad if isinstance(a, mini.Tensor) and a.requires_grad else None
                 for a in ctx.inputs)


MISTAKES = [
    Mistake("06.shard_bounds", "larger pieces on the last ranks", shard_bounds_larger_last,
            expect_message="the first numel % world_size ranks get the larger pieces"),
    Mistake("06.shard_bounds", "ceil-sized chunks", shard_bounds_ceil,
            expect_message="may differ by at most one"),
    Mistake("06.ring_allreduce", "all-gather sends the chunks in the wrong order",
            ring_gather_wrong_chunks, expect_message="wrong values in chunk"),
    Mistake("06.ring_allreduce", "reduce to rank 0, then broadcast", ring_reduce_then_broadcast,
            expect_message="in a ring it sends only to the next rank"),
    Mistake("06.ring_allreduce", "a built-in collective", ring_builtin_all_reduce,
            expect_message="a built-in collective does the work"),
    Mistake("06.ring_allreduce", "blocking sends deadlock on large messages", ring_blocking_sends,
            expect_message="(deadlock)"),
    Mistake("06.assign_buckets", "buckets from the first parameter", buckets_forward,
            expect_message="start from the last parameter"),
    Mistake("06.assign_buckets", "a bucket never goes over the cap", buckets_never_over_cap,
            expect_message="closes when its total reaches the cap"),
    Mistake("06.mark_grad_ready", "a bucket reduced before its gradients are final",
            ready_launch_at_first_gradient, expect_message="reduced before its gradients are final"),
    Mistake("06.mark_grad_ready", "buckets launched out of order", ready_out_of_order,
            expect_message="in bucket order"),
    Mistake("06.mark_grad_ready", "everything launched after backward", ready_launch_at_end,
            expect_message="overlaps the rest of backward"),
    Mistake("06.allreduce_hook", "averaging by the wrong world size", hook_divide_by_two,
            expect_message="the world has 3 ranks"),
    Mistake("06.allreduce_hook", "the hook waits for its all-reduce", hook_waits,
            expect_message="waited for its all-reduce"),
    Mistake("06.accumulation_step", "DDP communicates after every micro-batch",
            accumulate_without_no_sync, expect_message="inside model.no_sync()"),
    Mistake("06.accumulation_step", "micro-batch losses not scaled", accumulate_unscaled,
            expect_message="the mean loss over all micro-batches"),
    Mistake("06.distributed_sampler_indices", "every rank gets the same samples",
            sampler_same_on_every_rank, expect_message="the ranks overlap"),
    Mistake("06.distributed_sampler_indices", "contiguous blocks", sampler_blocks,
            expect_message="split differently"),
    Mistake("06.zero_step", "an unsharded optimizer", zero_unsharded,
            expect_message="the optimizer state is not sharded"),
    Mistake("06.zero_step", "shard boundaries off by one", zero_slices_off_by_one,
            expect_message="off by one"),
    Mistake("06.checkpoint_forward", "the segment records a graph", ckpt_forward_records,
            expect_message="grad mode on"),
    Mistake("06.checkpoint_forward", "random state saved after the segment",
            ckpt_forward_rng_after, expect_message="the random state after the forward"),
    Mistake("06.checkpoint_forward", "no random state kept", ckpt_forward_drops_rng,
            expect_message="draws a different mask"),
    Mistake("06.checkpoint_backward", "recomputation ignores the saved random state",
            ckpt_backward_ignores_rng, expect_message="the same dropout mask"),
    Mistake("06.checkpoint_backward", "random state not put back", ckpt_backward_keeps_rng,
            expect_message="set it back when you are done"),
    Mistake("06.checkpoint_backward", "recomputes on the original inputs", ckpt_backward_no_detach,
            expect_message="detached copies"),
]
