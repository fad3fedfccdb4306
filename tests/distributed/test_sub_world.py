"""``mini.distributed.sub_world``: one job of p ranks runs a block as worlds of fewer ranks
(what the chapter 06 grader uses to cover 1 to 4 ranks with one mpiexec start); and what
``launch`` adds for notebooks: the missing exercise named, threads per rank."""
from __future__ import annotations

import os

import numpy as np

from dist_harness import run_failing, run_ranks


def _worlds():
    import mini
    import mini.distributed as dist
    out = []
    for p in (4, 3, 2, 1):
        with dist.sub_world(p) as inside:
            if inside:
                t = mini.tensor(np.full(5, float(dist.get_rank() + 1), dtype=np.float32))
                dist.all_reduce(t)
                ring = mini.tensor(np.arange(7, dtype=np.float32) * (dist.get_rank() + 1))
                dist.ring_allreduce(ring)
                out.append((p, dist.get_rank(), dist.get_world_size(), float(t.numpy()[0]),
                            ring.numpy().tolist()))
            else:
                out.append((p, "outside", dist.get_world_size()))
    errors = []
    for bad in (0, 5, 2.0, True):
        try:
            with dist.sub_world(bad):
                pass
        except ValueError as e:
            errors.append(str(e))
    return {"rows": out, "world_after": dist.get_world_size(), "errors": errors,
            "threads": os.environ.get("OMP_NUM_THREADS")}


def test_sub_world_runs_each_world_size_in_one_job():
    ranks = run_ranks(_worlds, 4)
    for r, got in enumerate(ranks):
        assert got["world_after"] == 4
        for row in got["rows"]:
            p = row[0]
            if r < p:
                _, rank, world, total, ring = row
                assert (rank, world) == (r, p)
                assert total == sum(range(1, p + 1))                    # MPI's all-reduce
                assert ring == (np.arange(7) * sum(range(1, p + 1))).tolist()   # the ring
            else:
                assert row[1:] == ("outside", 4)                       # the job's world
        assert len(got["errors"]) == 4 and all("sub_world: size" in e for e in got["errors"])
        # 4 ranks share this machine's cores: each gets cpu_count // 4 threads (at least 1)
        assert got["threads"] == str(max(1, (os.cpu_count() or 1) // 4))


def _fails_inside(bad_rank):
    import mini
    import mini.distributed as dist
    with dist.sub_world(2) as inside:
        if inside:
            if dist.get_rank() == bad_rank:
                raise ValueError(f"deliberate failure on rank {bad_rank}")
            dist.all_reduce(mini.ones(3))
    dist.all_reduce(mini.ones(3))


def test_a_failure_inside_a_sub_world_stops_every_rank_and_names_the_rank():
    res = run_failing(_fails_inside, 3, 1, op_timeout=20)
    assert not res.ok and not res.timed_out
    assert res.summary.startswith("rank 1 failed: ValueError: deliberate failure on rank 1")


def _needs_an_exercise():
    from mini.exercises import ExerciseNotImplemented
    raise ExerciseNotImplemented("06.ring_allreduce")


def test_check_raises_the_missing_exercise():
    import pytest

    from mini.exercises import ExerciseNotImplemented
    res = run_failing(_needs_an_exercise, 2)
    assert res.missing_exercise() == "06.ring_allreduce"
    with pytest.raises(ExerciseNotImplemented) as info:
        res.check()
    assert info.value.slot_id == "06.ring_allreduce"
    assert "a rank reached it" in str(info.value)
