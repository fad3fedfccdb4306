"""Running test jobs on MPI ranks: timeouts, stack dumps, one job per world size.

Every multi-rank job goes through :func:`run_ranks`, which gives it two limits: each
blocking operation inside times out after ``OP_TIMEOUT`` seconds (the ranks then print
where each one waits and stop), and the whole job is killed after ``JOB_TIMEOUT`` seconds
after every rank has dumped its stack (SIGUSR2).  No test uses a fixed port: ``mpiexec``
connects the ranks.
"""
from __future__ import annotations

import fcntl
import os
import pickle
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("mpi4py", reason="mini.distributed needs mpi4py (pip install mpi4py mpich)")

from mini.distributed import launch  # noqa: E402

OP_TIMEOUT = 30.0
JOB_TIMEOUT = 150.0


def run_ranks(fn, nprocs: int, *args, timeout: float = JOB_TIMEOUT,
              op_timeout: float = OP_TIMEOUT, **kwargs) -> list:
    """What ``fn(*args, **kwargs)`` returned on each rank; fails the test with the job's
    summary and stderr if any rank failed or the job timed out."""
    result = launch.run(fn, nprocs, args=args, kwargs=kwargs, timeout=timeout,
                        op_timeout=op_timeout)
    if not result.ok:
        pytest.fail(f"{getattr(fn, '__name__', fn)} on {nprocs} ranks: {result.summary}\n"
                    f"{result.stderr[-12000:]}", pytrace=False)
    return result.values


def run_failing(fn, nprocs: int, *args, timeout: float = JOB_TIMEOUT,
                op_timeout: float = OP_TIMEOUT, **kwargs) -> launch.LaunchResult:
    return launch.run(fn, nprocs, args=args, kwargs=kwargs, timeout=timeout,
                      op_timeout=op_timeout)


_MEMO: dict = {}
#: Where the results of world() are shared between pytest-xdist workers (set by conftest.py
#: to a folder of pytest's own temporary directory, which pytest cleans up).
CACHE_DIR: list = [None]


def world(p: int) -> list:
    """:func:`dist_scenarios.world_checks` on ``p`` ranks, run once per test session even
    when pytest-xdist spreads the tests over several workers (a file lock per world size)."""
    if p in _MEMO:
        return _MEMO[p]
    import dist_scenarios
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"solo-{os.getpid()}"
    folder = Path(CACHE_DIR[0] or tempfile.gettempdir()) / f"mini-dist-worlds-{run_id}"
    folder.mkdir(parents=True, exist_ok=True)
    cached = folder / f"world{p}.pkl"
    with open(folder / f"world{p}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if cached.exists():
            with open(cached, "rb") as f:
                values = pickle.load(f)
        else:
            values = run_ranks(dist_scenarios.world_checks, p)
            with open(cached, "wb") as f:
                pickle.dump(values, f)
    _MEMO[p] = values
    return values
