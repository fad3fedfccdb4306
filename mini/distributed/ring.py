"""The ring all-reduce, built from point-to-point messages: exercises ``06.shard_bounds``
and ``06.ring_allreduce``.

p ranks stand in a ring; each sends only to the next one, ``(rank + 1) % p``, and receives
only from the previous one.  The array of N elements is cut into p chunks (chunk c is
``shard_bounds(N, p, c)``).  Two phases of p - 1 steps each:

1. **Reduce-scatter.**  At step s rank r sends chunk ``(r - s) % p`` and receives chunk
   ``(r - s - 1) % p``, which it adds into its own copy.  Each chunk travels once round the
   ring collecting every rank's contribution; after p - 1 steps rank r holds the complete
   sum of chunk ``(r + 1) % p``.
2. **All-gather.**  At step s rank r sends chunk ``(r + 1 - s) % p`` (complete) and receives
   chunk ``(r - s) % p``, which replaces its own.  After p - 1 steps every rank has every sum.

Each rank sends 2 (p - 1) messages of about N/p elements: 2 (p - 1)/p · N elements in all,
almost independent of p, which is why the ring is bandwidth-optimal.  In the α-β model
(α seconds per message, β bytes per second) that is ``2 (p - 1) α + 2 (p - 1)/p · N b / β``
(:func:`mini.napkin.scaling.ring_allreduce_time`).
"""
from __future__ import annotations

from mini.autograd import grad_mode
from mini.distributed import collectives as dist
from mini.distributed.process_group import get_rank, get_world_size
from mini.exercises import exercise

__all__ = ["shard_bounds", "ring_allreduce", "ring_schedule", "ring_traffic_problems"]


@exercise("06.shard_bounds")
def shard_bounds(numel: int, world_size: int, rank: int) -> tuple[int, int]:
    """The part ``[start, stop)`` of a flat array of ``numel`` elements that ``rank`` owns
    when the array is split among ``world_size`` ranks.

    The pieces are contiguous, in rank order, cover the array exactly once, and their sizes
    differ by at most one, the larger pieces first: the first ``numel % world_size`` ranks
    get ``ceil(numel / world_size)`` elements, the others ``floor(numel / world_size)`` (as
    ``numpy.array_split`` splits).  When ``numel < world_size`` the last pieces are empty
    (``start == stop``).  Returns a tuple of two ints.

    The ring's chunks, ZeRO's optimizer-state shards and a distributed checkpoint's pieces
    all use this split.
    """
    ### BEGIN SOLUTION
    base, extra = divmod(numel, world_size)
    start = rank * base + min(rank, extra)
    stop = start + base + (1 if rank < extra else 0)
    return start, stop
    ### END SOLUTION


@exercise("06.ring_allreduce")
def ring_allreduce(tensor, group=None) -> None:
    """Replace ``tensor`` (contiguous, any shape) on every rank by its sum over all ranks,
    with the ring algorithm, using only point-to-point operations of
    ``mini.distributed`` (``isend``, ``irecv``, ``send``, ``recv``): no collective.

    With p ranks and this rank r, chunk c is the slice ``shard_bounds(N, p, c)`` of the
    flattened tensor (N elements).  Send only to ``(r + 1) % p``, receive only from
    ``(r - 1) % p``.

    - Reduce-scatter, steps s = 0 .. p-2: send chunk ``(r - s) % p``, receive chunk
      ``(r - s - 1) % p`` and add it into your copy of that chunk.
    - All-gather, steps s = 0 .. p-2: send chunk ``(r + 1 - s) % p``, receive chunk
      ``(r - s) % p`` into your copy (replacing it).

    Start each send with ``isend``, receive, then ``wait()`` for the send: if every rank
    first waits for its own send to finish, large messages deadlock.  Work under
    ``mini.no_grad()``.  With one rank there is nothing to do.  Returns None.
    """
    ### BEGIN SOLUTION
    p = get_world_size(group)
    r = get_rank(group)
    if p == 1:
        return
    flat = tensor.view(-1)
    n = flat.numel()
    bounds = [shard_bounds(n, p, c) for c in range(p)]
    nxt, prv = (r + 1) % p, (r - 1) % p
    with grad_mode.no_grad():
        from mini.ops.creation import empty
        incoming = empty(bounds[0][1] - bounds[0][0], dtype=tensor.dtype)
        for s in range(p - 1):                       # reduce-scatter
            a, b = bounds[(r - s) % p]
            c, d = bounds[(r - s - 1) % p]
            received = incoming[:d - c]
            work = dist.isend(flat[a:b], nxt, group)
            dist.recv(received, prv, group)
            work.wait()
            flat[c:d].add_(received)
        for s in range(p - 1):                       # all-gather
            a, b = bounds[(r + 1 - s) % p]
            c, d = bounds[(r - s) % p]
            work = dist.isend(flat[a:b], nxt, group)
            dist.recv(flat[c:d], prv, group)
            work.wait()
    ### END SOLUTION


def ring_schedule(n: int, p: int, rank: int) -> list[tuple[int, int]]:
    """The chunks rank ``rank`` sends and receives, in order, as ``(sent_chunk,
    received_chunk)`` per step: p - 1 reduce-scatter steps, then p - 1 all-gather steps."""
    rs = [((rank - s) % p, (rank - s - 1) % p) for s in range(p - 1)]
    ag = [((rank + 1 - s) % p, (rank - s) % p) for s in range(p - 1)]
    return rs + ag


def ring_traffic_problems(records, n: int, p: int, rank: int, itemsize: int) -> list[str]:
    """What is wrong with the communication a rank recorded while all-reducing ``n``
    elements as a ring (empty list: nothing).  ``records`` are
    :meth:`CommLog.to_records() <mini.distributed.events.CommLog.to_records>` dicts.

    Checked: no collective operation did the work; sends go only to ``(rank + 1) % p`` and
    receives come only from ``(rank - 1) % p``; 2 (p - 1) of each, of the sizes of the
    chunks of :func:`ring_schedule` in that order (``ceil(n/p)`` or ``floor(n/p)``
    elements); bytes sent ``2 n - |chunk (rank+1)%p| - |chunk (rank+2)%p|`` elements, which
    is ``2 (p - 1)/p · n`` when p divides n.  A reduce to one rank followed by a broadcast
    gets the right sum and fails these."""
    from mini.distributed.events import COLLECTIVE_OPS
    base, extra = divmod(n, p)
    size = [base + (1 if c < extra else 0) for c in range(p)]
    problems = []
    used = sorted({r["op"] for r in records if r["op"] in COLLECTIVE_OPS})
    if used:
        problems.append(f"it calls {', '.join(used)}: a built-in collective does the work; "
                        f"build the all-reduce from send and recv only")
    sends = [r for r in records if r["op"] in ("send", "isend")]
    recvs = [r for r in records if r["op"] in ("recv", "irecv")]
    nxt, prv = (rank + 1) % p, (rank - 1) % p
    wrong_dst = sorted({r["peer"] for r in sends if r["peer"] != nxt}, key=str)
    if wrong_dst:
        problems.append(f"rank {rank} sends to rank(s) {wrong_dst}; in a ring it sends only "
                        f"to the next rank, {nxt}")
    wrong_src = sorted({r["peer"] for r in recvs if r["peer"] != prv}, key=str)
    if wrong_src:
        problems.append(f"rank {rank} receives from {wrong_src}; in a ring it receives only "
                        f"from the previous rank, {prv} (name the source)")
    want = 2 * (p - 1)
    if len(sends) != want or len(recvs) != want:
        problems.append(f"rank {rank} sent {len(sends)} and received {len(recvs)} messages; "
                        f"a ring over {p} ranks sends and receives 2(p-1) = {want} each")
    else:
        schedule = ring_schedule(n, p, rank)
        sent = [r["count"] for r in sends]
        got = [r["count"] for r in recvs]
        if sent != [size[s] for s, _ in schedule] or got != [size[c] for _, c in schedule]:
            problems.append(f"rank {rank}'s messages have {sent} (sent) and {got} (received) "
                            f"elements; the chunks of the ring schedule have "
                            f"{[size[s] for s, _ in schedule]} and "
                            f"{[size[c] for _, c in schedule]}: chunk c is "
                            f"shard_bounds(n, p, c), step s sends chunk (rank - s) % p, then "
                            f"(rank + 1 - s) % p")
    if not problems:
        expect = (2 * n - size[(rank + 1) % p] - size[(rank + 2) % p]) * itemsize if p > 1 else 0
        total = sum(r["nbytes"] for r in sends)
        if total != expect:
            problems.append(f"rank {rank} sent {total} bytes; the ring sends {expect}")
    return problems
