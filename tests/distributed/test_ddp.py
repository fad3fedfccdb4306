"""DistributedDataParallel, ZeRO-1 and the sampler on real MPI ranks (the p-rank jobs of
dist_harness.world): what p ranks with batch B/p compute equals one process with batch B."""
from __future__ import annotations

import math

import numpy as np
import pytest

from dist_harness import world

WORLDS = [1, 2, 3, 4]

# Data parallel vs one process: float32 gradients of a 12-sample batch summed in another
# order (per rank, then across ranks) differ by a few ulp (~1e-7 relative) per step; 4 SGD
# steps of lr 0.1 on weights of size ~0.5 keep the difference far below 1e-6.
ATOL, RTOL = 1e-6, 1e-5


def _assert_same_across_ranks(ranks, key, sub="params"):
    first = ranks[0][key][sub]
    for r, values in enumerate(ranks):
        for a, b in zip(first, values[key][sub], strict=True):
            np.testing.assert_array_equal(a, b, err_msg=f"rank {r} differs from rank 0")


@pytest.mark.parametrize("p", WORLDS)
def test_ddp_p_ranks_with_batch_b_over_p_equal_one_process_with_batch_b(p):
    ranks = world(p)
    _assert_same_across_ranks(ranks, "ddp")   # parameters broadcast, then identical steps
    d = ranks[0]["ddp"]
    for got, want in zip(d["params"], d["reference"], strict=True):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("p", WORLDS)
def test_ddp_buckets_for_a_given_cap(p):
    d = world(p)[0]["ddp"]
    # parameter bytes: 320 64 1024 64 192 12; cap 0.0005 MiB = 524 bytes, walked backwards:
    # 12+192+64+1024 = 1292 >= 524 closes [5, 4, 3, 2]; 64 + 320 = 384 is the last bucket
    assert d["sizes"] == [320, 64, 1024, 64, 192, 12]
    assert d["buckets"] == [[5, 4, 3, 2], [1, 0]]


@pytest.mark.parametrize("p", WORLDS)
def test_ddp_all_reduce_starts_before_backward_ends(p):
    """From the event log (issue order, not clocks): in every step the first bucket's
    all-reduce is issued before the last gradient hook fires, and is not waited for until
    every hook has fired; buckets go in order."""
    for r, values in enumerate(world(p)):
        for step, log in enumerate(values["ddp"]["logs"]):
            hooks = [e for e in log if e["op"] == "grad_ready"]
            reduces = [e for e in log if e["op"] == "all_reduce"]
            assert [e["info"]["param"] for e in hooks] == [5, 4, 3, 2, 1, 0]
            assert [e["origin"] for e in reduces] == ["ddp bucket 0", "ddp bucket 1"]
            first, last_hook = reduces[0], hooks[-1]
            assert first["seq"] < last_hook["seq"], (r, step)
            assert first["end_seq"] > last_hook["seq"], (r, step)
            assert first["nbytes"] == 1292 and reduces[1]["nbytes"] == 384


@pytest.mark.parametrize("p", WORLDS)
def test_ddp_with_the_ring_as_communication_hook(p):
    ranks = world(p)
    _assert_same_across_ranks(ranks, "ddp_ring_hook")
    for got, want in zip(ranks[0]["ddp_ring_hook"]["params"], ranks[0]["ddp"]["params"], strict=True):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("p", WORLDS)
def test_ddp_over_checkpointed_layers_is_bit_identical(p):
    """Recomputing activations is the same computation: the same gradients, bit for bit."""
    d = world(p)[0]
    for got, want in zip(d["ddp_checkpointed"]["params"], d["ddp"]["params"], strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("p", [2, 3])
def test_no_sync_accumulates_and_averages_once_per_step(p):
    ranks = world(p)
    _assert_same_across_ranks(ranks, "ddp_no_sync")
    d = ranks[0]["ddp_no_sync"]
    assert d["reduces"] == [d["buckets"]] * 2          # one all-reduce per bucket per step
    for got, want in zip(d["params"], d["reference"], strict=True):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("p", [1, 2, 4])
def test_unused_parameters(p):
    for r, values in enumerate(world(p)):
        u = values["ddp_unused"]
        for name, want in u["want"].items():
            got = u["got"][name]
            if want is None:                 # used by no rank: no gradient anywhere
                assert got is None, (r, name)
            else:
                np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=name)
        assert u["want"]["c.weight"] is None and (p == 1 or u["want"]["b.weight"] is not None)
        assert u["strict_error"] is not None and "find_unused_parameters=True" in u["strict_error"]
        assert "c.weight" in u["strict_error"]


@pytest.mark.parametrize("p", WORLDS)
def test_zero1_weights_equal_adamw_and_state_is_sharded(p):
    ranks = world(p)
    for name in ("mlp", "tiny"):
        shards = []
        for r, values in enumerate(ranks):
            z = values["zero"][name]
            # the same elementwise AdamW arithmetic on the same numbers: bit for bit
            for got, want in zip(z["params"], z["reference"], strict=True):
                np.testing.assert_array_equal(got, want, err_msg=f"{name}, rank {r}")
            psi = z["numel"]
            bound = math.ceil(psi / p) * 8          # Adam: two float32 moments per element
            assert z["state_bytes"] <= bound, (name, r, z["state_bytes"], bound)
            # an optimizer that keeps the whole state on every rank fails that bound
            assert z["plain_state_bytes"] == 8 * psi
            if p > 1 and psi >= p:
                assert z["plain_state_bytes"] > bound
            shards.append(tuple(z["shard"]))
        assert shards[0][0] == 0 and shards[-1][1] == psi
        assert all(a[1] == b[0] for a, b in zip(shards, shards[1:]))


@pytest.mark.parametrize("p", [2, 3, 4])
def test_distributed_sampler_partitions_each_epoch(p):
    ranks = world(p)
    for n, drop_last, epoch in ranks[0]["sampler"]:
        parts = [values["sampler"][(n, drop_last, epoch)] for values in ranks]
        per = n // p if drop_last else math.ceil(n / p)
        assert all(len(part) == per for part in parts)
        flat = [i for part in parts for i in part]
        if drop_last or n % p == 0:
            assert len(set(flat)) == len(flat) == per * p     # no sample on two ranks
        else:
            assert set(flat) == set(range(n))                  # all covered; padding repeats
        assert set(flat) <= set(range(n))
    e0 = [values["sampler"][(13, False, 0)] for values in ranks]
    e1 = [values["sampler"][(13, False, 1)] for values in ranks]
    assert e0 != e1                                            # set_epoch reshuffles


@pytest.mark.parametrize("p", [2, 3])
def test_pingpong_times_are_shared_by_every_rank(p):
    ranks = world(p)
    times = ranks[0]["pingpong"]
    assert len(times) == 4 and all(np.isfinite(t) and t > 0 for t in times)
    assert all(values["pingpong"] == times for values in ranks)
