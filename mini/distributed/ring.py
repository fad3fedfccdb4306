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

__all__ = ["shard_bounds", "ring_allreduce"]


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
