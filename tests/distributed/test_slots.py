"""The chapter 06 exercises that work on plain data (no MPI needed): shard bounds, bucket
assignment, launching buckets in order, the sampler's indices, the ring's traffic checker."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from mini.distributed.ring import ring_schedule, ring_traffic_problems, shard_bounds
from mini.nn.parallel.distributed import assign_buckets, mark_grad_ready
from mini.utils.data.distributed import distributed_sampler_indices, epoch_order


@given(st.integers(0, 200), st.integers(1, 9))
def test_shard_bounds_split_like_array_split(n, p):
    bounds = [shard_bounds(n, p, r) for r in range(p)]
    pieces = np.array_split(np.arange(n), p)
    assert [(int(a[0]), int(a[-1]) + 1) if a.size else None for a in pieces] == \
        [b if b[0] < b[1] else None for b in bounds]
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    sizes = [b - a for a, b in bounds]
    assert sizes == sorted(sizes, reverse=True) and max(sizes) - min(sizes) <= 1
    assert all(isinstance(x, int) for b in bounds for x in b)


def test_assign_buckets_examples():
    assert assign_buckets([], 10) == []
    assert assign_buckets([4, 4, 4, 4], 8) == [[3, 2], [1, 0]]
    assert assign_buckets([4, 4, 4], 8) == [[2, 1], [0]]
    assert assign_buckets([100, 1, 1], 8) == [[2, 1, 0]]        # the big one closes the bucket
    assert assign_buckets([1, 1, 100], 8) == [[2], [1, 0]]
    assert assign_buckets([5] * 3, 1) == [[2], [1], [0]]


@given(st.lists(st.integers(1, 64), max_size=30), st.integers(1, 200))
def test_assign_buckets_properties(sizes, cap):
    buckets = assign_buckets(sizes, cap)
    flat = [i for b in buckets for i in b]
    assert flat == list(reversed(range(len(sizes))))           # every index once, backwards
    for b in buckets[:-1]:                                      # closed buckets reached the cap
        assert sum(sizes[i] for i in b) >= cap
        assert sum(sizes[i] for i in b[:-1]) < cap              # ... with their last parameter
    assert all(buckets)


def _simulate(buckets, order):
    """Mark parameters ready in ``order``; returns the launches after each mark."""
    n = sum(len(b) for b in buckets)
    bucket_of = [0] * n
    for k, b in enumerate(buckets):
        for i in b:
            bucket_of[i] = k
    state = {"bucket_of": bucket_of, "pending": [len(b) for b in buckets], "next_bucket": 0}
    launched, history = [], []
    for i in order:
        mark_grad_ready(state, i, launched.append)
        history.append(list(launched))
    return launched, history, bucket_of


def test_mark_grad_ready_waits_for_full_buckets_and_keeps_order():
    buckets = [[5, 4], [3, 2], [1, 0]]
    launched, history, _ = _simulate(buckets, [5, 4, 3, 2, 1, 0])
    assert history == [[], [0], [0], [0, 1], [0, 1], [0, 1, 2]]
    # bucket 1 complete before bucket 0: it waits, then both go, in order
    launched, history, _ = _simulate(buckets, [3, 2, 5, 1, 4, 0])
    assert history == [[], [], [], [], [0, 1], [0, 1, 2]]


@given(st.lists(st.integers(1, 4), min_size=1, max_size=6).flatmap(
    lambda lens: st.tuples(st.just(lens), st.permutations(range(sum(lens))))))
def test_mark_grad_ready_properties(case):
    lens, order = case
    n, buckets, i = sum(lens), [], 0
    for k in lens:
        buckets.append(list(range(n - 1 - i, n - 1 - i - k, -1)))
        i += k
    launched, history, bucket_of = _simulate(buckets, order)
    assert launched == list(range(len(buckets)))                # each once, in order
    ready = set()
    for i, after in zip(order, history, strict=True):
        ready.add(i)
        for b in after:                                         # never before it is full
            assert set(buckets[b]) <= ready


@pytest.mark.parametrize("n", range(0, 11))
@pytest.mark.parametrize("p", [1, 2, 3, 4])
@pytest.mark.parametrize("drop_last", [False, True])
def test_sampler_indices(n, p, drop_last):
    order = epoch_order(n, True, seed=5, epoch=2)
    parts = [distributed_sampler_indices(order, p, r, drop_last) for r in range(p)]
    per = n // p if drop_last else math.ceil(n / p)
    assert [len(x) for x in parts] == [per] * p
    padded = (order * (per * p // max(n, 1) + 1))[:per * p] if n else []
    assert [i for k in range(per) for i in (parts[r][k] for r in range(p))] == padded


def test_sampler_indices_against_torch():
    pytest.importorskip("torch")
    from torch.utils.data import DistributedSampler as TorchSampler
    for n in range(0, 13):
        for p in range(1, 5):
            for drop_last in (False, True):
                for r in range(p):
                    want = list(TorchSampler(range(n), num_replicas=p, rank=r, shuffle=False,
                                             drop_last=drop_last))
                    assert distributed_sampler_indices(list(range(n)), p, r, drop_last) == want


def _ring_records(n, p, r, itemsize=4, shuffle_sizes=False):
    base, extra = divmod(n, p)
    size = [base + (c < extra) for c in range(p)]
    recs = []
    for sent, got in ring_schedule(n, p, r):
        recs.append({"op": "isend", "peer": (r + 1) % p, "count": size[sent],
                     "nbytes": size[sent] * itemsize})
        recs.append({"op": "recv", "peer": (r - 1) % p, "count": size[got],
                     "nbytes": size[got] * itemsize})
    return recs


def test_ring_traffic_checker_accepts_the_schedule_and_names_mistakes():
    assert ring_traffic_problems(_ring_records(10, 4, 1), 10, 4, 1, 4) == []
    assert ring_traffic_problems([], 10, 1, 0, 4) == []
    backwards = [dict(e, peer=(1 - 1) % 4 if e["op"] == "isend" else e["peer"])
                 for e in _ring_records(10, 4, 1)]
    assert "sends only to the next rank, 2" in ring_traffic_problems(backwards, 10, 4, 1, 4)[0]
    swapped = _ring_records(10, 4, 1)
    swapped[2], swapped[4] = swapped[4], swapped[2]      # chunks 0 and 3 (3 and 2 elements) swapped
    assert any("ring schedule" in m for m in ring_traffic_problems(swapped, 10, 4, 1, 4))
    extra = _ring_records(10, 4, 1) + [{"op": "all_reduce", "peer": None, "count": 10,
                                        "nbytes": 40}]
    assert "all_reduce" in ring_traffic_problems(extra, 10, 4, 1, 4)[0]
    half = _ring_records(10, 4, 1)[:6]
    assert "2(p-1) = 6" in ring_traffic_problems(half, 10, 4, 1, 4)[0]
