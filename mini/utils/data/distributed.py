"""DistributedSampler: each rank's share of the dataset, as ``torch.utils.data.DistributedSampler``.
Exercise ``06.distributed_sampler_indices``.

Data parallelism needs *partitioned* data: in one epoch the ranks together see every sample
(at most a few twice, never one rank the same sample twice), and no two ranks hold the same
position.  Every rank computes the same global order (a permutation seeded by
``seed + epoch``, so ``set_epoch`` reshuffles identically on all ranks), pads it to a
multiple of ``num_replicas`` by repeating its beginning (or, with ``drop_last``, cuts the
tail), and takes every ``num_replicas``-th index starting at its rank.

    sampler = DistributedSampler(ds, shuffle=True, seed=0)     # rank and world from the group
    loader = DataLoader(ds, batch_size=32, sampler=sampler)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader: ...
"""
from __future__ import annotations

import math

import numpy as np

from mini.exercises import exercise

__all__ = ["DistributedSampler", "distributed_sampler_indices"]


@exercise("06.distributed_sampler_indices")
def distributed_sampler_indices(order: list, num_replicas: int, rank: int,
                                drop_last: bool = False) -> list:
    """The sample indices of ``rank`` for one epoch, given the epoch's global ``order`` (a
    list of dataset indices, the same on every rank).

    Every rank gets the same number of indices.  Without ``drop_last``: that number is
    ``ceil(len(order) / num_replicas)``; pad ``order`` to ``num_replicas`` times that length
    by appending its own beginning (repeated as often as needed when the padding is longer
    than ``order``).  With ``drop_last``: the number is ``len(order) // num_replicas``; cut
    ``order`` to ``num_replicas`` times that length.  Then rank r takes the positions r,
    r + num_replicas, r + 2·num_replicas, ... of the padded (or cut) order.  Returns a list
    of ints.
    """
    ### BEGIN SOLUTION
    n = len(order)
    if drop_last:
        per_rank = n // num_replicas
        indices = list(order[:per_rank * num_replicas])
    else:
        per_rank = math.ceil(n / num_replicas)
        total = per_rank * num_replicas
        indices = list(order)
        while len(indices) < total:
            indices += list(order[:total - len(indices)])
    return [int(i) for i in indices[rank::num_replicas]]
    ### END SOLUTION


def epoch_order(n: int, shuffle: bool, seed: int, epoch: int) -> list:
    """The global order of epoch ``epoch``: ``0..n-1``, or a permutation drawn from a
    generator seeded with ``seed + epoch`` (the same on every rank)."""
    if not shuffle:
        return list(range(n))
    return np.random.default_rng(int(seed) + int(epoch)).permutation(n).tolist()


class DistributedSampler:
    """Indices of this rank's share of ``dataset``; ``num_replicas`` and ``rank`` default to
    the initialised process group's world size and rank."""

    def __init__(self, dataset, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False):
        if num_replicas is None or rank is None:
            from mini import distributed as dist
            if not dist.is_initialized():
                raise RuntimeError("DistributedSampler needs num_replicas and rank, or an "
                                   "initialised process group "
                                   "(mini.distributed.init_process_group())")
            num_replicas = dist.get_world_size() if num_replicas is None else num_replicas
            rank = dist.get_rank() if rank is None else rank
        if not isinstance(num_replicas, int) or num_replicas < 1:
            raise ValueError(f"num_replicas must be a positive int, got {num_replicas!r}")
        if not isinstance(rank, int) or not 0 <= rank < num_replicas:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval "
                             f"[0, {num_replicas - 1}]")
        self.dataset = dataset
        self.num_replicas, self.rank = num_replicas, rank
        self.shuffle, self.seed, self.drop_last = bool(shuffle), int(seed), bool(drop_last)
        self.epoch = 0
        n = len(dataset)
        self.num_samples = n // num_replicas if drop_last else math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas

    def __iter__(self):
        order = epoch_order(len(self.dataset), self.shuffle, self.seed, self.epoch)
        indices = distributed_sampler_indices(order, self.num_replicas, self.rank,
                                              self.drop_last)
        if len(indices) != self.num_samples:
            raise RuntimeError(f"distributed_sampler_indices gave rank {self.rank} "
                               f"{len(indices)} indices; every rank needs {self.num_samples}")
        return iter(indices)

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Use the order of ``epoch`` (call it at the start of every epoch, on every rank)."""
        self.epoch = int(epoch)
