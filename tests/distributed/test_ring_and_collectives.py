"""The ring all-reduce and the collectives on real MPI ranks, p = 1..4 (one job per p)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from dist_harness import world  # noqa: F401  (skips the module without mpi4py)
from mini.distributed.ring import ring_schedule, ring_traffic_problems

WORLDS = [1, 2, 3, 4]


@pytest.mark.parametrize("p", WORLDS)
def test_ring_sums_exactly_and_identically_on_every_rank(p):
    ranks = world(p)
    for i, case in enumerate(ranks[0]["ring"]):
        for r in range(p):
            c = ranks[r]["ring"][i]
            assert c["equal"], f"p={p} rank {r}: ring sum of n={c['n']} {c['dtype']} is wrong"
            assert c["digest"] == case["digest"], f"p={p}: ranks 0 and {r} differ for n={c['n']}"
    assert any(c["n"] < p for c in ranks[0]["ring"]) or p == 1
    assert any(c["n"] % p for c in ranks[0]["ring"]) or p == 1


@pytest.mark.parametrize("p", WORLDS)
def test_ring_traffic_is_a_ring(p):
    for r, values in enumerate(world(p)):
        for c in values["ring"]:
            n, itemsize, records = c["n"], c["itemsize"], c["records"]
            assert ring_traffic_problems(records, n, p, r, itemsize) == [], (p, r, n)
            sends = [e for e in records if e["op"] in ("send", "isend")]
            recvs = [e for e in records if e["op"] in ("recv", "irecv")]
            # spelled out, independently of the checker above:
            assert {e["peer"] for e in sends} <= {(r + 1) % p}
            assert {e["peer"] for e in recvs} <= {(r - 1) % p}
            assert len(sends) == len(recvs) == 2 * (p - 1)
            assert {e["count"] for e in sends} <= {math.ceil(n / p), n // p}
            sent = sum(e["nbytes"] for e in sends)
            if n % p == 0:
                assert sent == 2 * (p - 1) * n // p * itemsize
            else:
                assert abs(sent - 2 * (p - 1) / p * n * itemsize) <= 2 * itemsize
            assert not [e for e in records if e["op"] not in ("send", "isend", "recv", "irecv")]
            # the schedule: reduce-scatter sends chunk (r - s) % p, all-gather (r + 1 - s) % p
            assert [s for s, _ in ring_schedule(n, p, r)][:p - 1] == \
                [(r - s) % p for s in range(p - 1)]


@pytest.mark.parametrize("p", [2, 3, 4])
def test_traffic_check_rejects_what_is_not_a_ring(p):
    for r, values in enumerate(world(p)):
        w = values["wrong_ring"]
        n = w["n"]
        want = sum(np.arange(n, dtype=np.float32) + q for q in range(p))
        # both get the right answer ...
        np.testing.assert_array_equal(w["star_result"], want)
        np.testing.assert_array_equal(w["builtin_result"], want)
        # ... and neither passes for a ring
        star = ring_traffic_problems(w["star"], n, p, r, 4)
        assert star, f"reduce-then-broadcast passed as a ring on rank {r}"
        builtin = ring_traffic_problems(w["builtin"], n, p, r, 4)
        assert any("all_reduce" in m for m in builtin)


@pytest.mark.parametrize("p", WORLDS)
def test_collectives_match_numpy(p):
    ranks = world(p)
    base = [np.array([r + 1.0, 2.0 - r, 0.5 * r]) for r in range(p)]
    oracle = {"SUM": sum(base), "PRODUCT": np.prod(base, axis=0), "MIN": np.min(base, axis=0),
              "MAX": np.max(base, axis=0), "AVG": sum(base) / p}
    for r, values in enumerate(ranks):
        c = values["collectives"]
        for op, want in oracle.items():
            # a sum of p <= 4 float64 numbers: MPI may add in any order; a few ulp
            np.testing.assert_allclose(c["all_reduce"][op], want, rtol=1e-14, atol=1e-14)
        assert c["async_returns_work"]
        for src in range(p):
            np.testing.assert_array_equal(c["broadcast"][src], np.full(3, float(src)))
        for q in range(p):
            np.testing.assert_array_equal(c["all_gather"][q], np.full((2, 2), float(q)))
        np.testing.assert_array_equal(c["all_gather_into_tensor"],
                                      np.array([[q, -q] for q in range(p)], float).reshape(-1))
        np.testing.assert_array_equal(c["reduce_scatter"],
                                      np.full(3, float(sum(10 * q + r for q in range(p)))))
        np.testing.assert_array_equal(c["irecv_from_previous"], np.full(5, float((r - 1) % p)))
        if r == 0:
            assert c["any_source"] == [(q, float(q)) for q in range(1, p)]
        assert c["all_gather_object"] == [{"rank": q, "text": "x" * q} for q in range(p)]
        assert c["broadcast_object_list"] == [{"a": 0}]
        assert c["version_bumped"]


@pytest.mark.parametrize("p", [1, 3])
def test_bad_arguments_get_errors_that_say_what_to_do(p):
    errors = world(p)[0]["collectives"]["errors"]
    assert "dst=" in errors["dst_out_of_range"] and f"world of {p}" in errors["dst_out_of_range"]
    assert "contiguous" in errors["non_contiguous"]
    assert "mini.Tensor" in errors["not_a_tensor"] and "list" in errors["not_a_tensor"]
    assert "AVG" in errors["avg_of_ints"] and "floating-point" in errors["avg_of_ints"]
    assert "twice" in errors["second_init"]
