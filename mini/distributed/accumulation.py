"""Gradient accumulation under DistributedDataParallel: exercise ``06.accumulation_step``.

A batch that does not fit in memory is cut into m micro-batches.  Each one runs forward and
backward on its own, and the gradients add up in ``.grad`` (autograd accumulates); the
optimizer steps once, after the last.  Two things make that equal to one step on the whole
batch:

- the scale: ``.grad`` after m backwards holds the *sum* of m micro-batch gradients, and
  the loss of the whole batch is the *mean* over its samples;
- the communication: DDP averages the gradients over the ranks in every backward.  Doing it
  m times per step moves m times the bytes for the same result, so the first m - 1
  backwards run inside ``model.no_sync()`` and only the last one communicates, averaging
  everything that has accumulated.

With p ranks, each rank holding B/p samples cut into m micro-batches, the step equals one
step of a single process on the whole batch B (:mod:`mini.distributed.ring` explains what
the averaging costs).
"""
from __future__ import annotations

import contextlib

from mini.exercises import exercise

__all__ = ["accumulation_step"]


@exercise("06.accumulation_step")
def accumulation_step(model, optimizer, loss_fn, micro_batches) -> float:
    """One optimizer step of data-parallel training, accumulated over micro-batches.

    ``model`` is a ``DistributedDataParallel``; ``micro_batches`` is a list of m >= 1 pairs
    ``(x, y)``, this rank's part of the step's batch cut into m parts of equal size;
    ``loss_fn(model(x), y)`` returns a micro-batch's mean loss (a scalar tensor).

    Zero the gradients, run forward and backward on every micro-batch, then take one
    ``optimizer.step()``.  When the step is taken, every parameter's ``.grad`` must be the
    gradient of the mean loss over all micro-batches, averaged over the ranks: the same
    step as one process on the whole batch.  DDP may communicate in the backward of the
    last micro-batch only (``model.no_sync()`` turns its averaging off).

    Returns the mean of the micro-batches' losses as a Python float.  Raises ``ValueError``
    when ``micro_batches`` is empty.
    """
    ### BEGIN SOLUTION
    if len(micro_batches) == 0:
        raise ValueError("accumulation_step needs at least one micro-batch, got an empty list")
    m = len(micro_batches)
    optimizer.zero_grad()
    total = 0.0
    for k, (x, y) in enumerate(micro_batches):
        last = k == m - 1
        with contextlib.nullcontext() if last else model.no_sync():
            loss = loss_fn(model(x), y)
            (loss / m).backward()
        total += float(loss.item())
    optimizer.step()
    return total / m
    ### END SOLUTION
