"""Allocation counter: how many buffers mini allocated, and how many bytes.

Every backend allocation goes through :func:`record_allocation`, so a test or a
notebook can measure that a view allocated nothing and a ``compact()`` copied::

    with mini.ndarray.track_allocations() as stats:
        y = x.T.reshape(-1)
    stats.bytes, stats.count
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(slots=True)
class AllocationStats:
    count: int = 0
    bytes: int = 0

    def __repr__(self):
        return f"AllocationStats(count={self.count}, bytes={self.bytes:,})"


_TOTAL = AllocationStats()
_ACTIVE: list[AllocationStats] = []


def record_allocation(nbytes: int) -> None:
    _TOTAL.count += 1
    _TOTAL.bytes += nbytes
    for stats in _ACTIVE:
        stats.count += 1
        stats.bytes += nbytes


def allocation_stats() -> AllocationStats:
    """Totals since the process started (a copy)."""
    return AllocationStats(_TOTAL.count, _TOTAL.bytes)


@contextmanager
def track_allocations():
    """Count the buffers allocated inside the ``with`` block."""
    stats = AllocationStats()
    _ACTIVE.append(stats)
    try:
        yield stats
    finally:
        _ACTIVE.remove(stats)
