"""No rank hangs: a rank that raises, dies, deadlocks or never arrives makes every rank stop
with an error that names it, within the operation timeout, with stack dumps of the ranks that
wait.  Each test is one short job; none may reach the job timeout (that would be a hang)."""
from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import dist_scenarios as S
from dist_harness import run_failing

OP = 4.0          # operation timeout of these jobs, seconds
JOB = 90.0        # a job still running after this is a hang: the test fails


def _check_ended_by_itself(res):
    assert not res.timed_out, f"the job hung:\n{res.stderr[-6000:]}"
    assert res.returncode not in (0, None)


def test_a_rank_that_raises_stops_every_rank_with_its_name():
    res = run_failing(S.raise_on, 3, 1, timeout=JOB, op_timeout=60.0)
    _check_ended_by_itself(res)
    assert res.summary == "rank 1 failed: ValueError: deliberate failure on rank 1"
    assert "[rank 1] ValueError: deliberate failure on rank 1" in res.stderr
    for r in (0, 2):      # the others did not wait for their 60 s timeout: they were told
        assert "PeerFailure: rank 1 failed (ValueError: deliberate failure on rank 1)" \
            in res.errors[r], res.errors.get(r)
        assert "all_reduce" in res.errors[r]


def test_a_rank_killed_by_a_signal_is_named_by_every_other_rank():
    res = run_failing(S.die_on, 3, 2, timeout=JOB, op_timeout=60.0)
    _check_ended_by_itself(res)
    assert re.fullmatch(r"rank 2 \(pid \d+\) was killed by signal 9 \(SIGKILL\)", res.summary)
    for r in (0, 1):
        assert "PeerFailure: rank 2 failed (its process" in res.errors[r], res.stderr[-3000:]
        assert "died without reporting an error" in res.errors[r]


def test_a_deadlock_times_out_with_every_rank_showing_where_it_waits():
    res = run_failing(S.deadlock, 2, timeout=JOB, op_timeout=OP)
    _check_ended_by_itself(res)
    assert "DistributedTimeoutError" in res.summary and f"within {OP:g} s" in res.summary
    for r in (0, 1):
        dump = re.search(rf"\[rank {r}\] stack dump requested by rank \d.*?(?=\n(?!\[rank {r}\]))",
                         res.stderr, re.S)
        assert dump, res.stderr[-4000:]
        assert f"waiting in recv(src={(r - 1) % 2}" in dump.group(0)
        assert "in deadlock" in dump.group(0)       # the line of the test's code that waits


def test_a_rank_busy_elsewhere_is_stopped_and_shows_its_stack():
    res = run_failing(S.busy_rank, 3, 1, timeout=JOB, op_timeout=OP)
    _check_ended_by_itself(res)
    assert "DistributedTimeoutError" in res.summary
    assert "[rank 1] main thread running (not in a mini.distributed operation)" in res.stderr
    assert re.search(r"\[rank 1\] stopping: rank [02] failed", res.stderr), res.stderr[-4000:]
    assert "in busy_rank" in res.stderr


def test_the_launcher_kills_a_job_past_its_timeout_and_shows_every_stack():
    res = run_failing(S.sleep_forever_everywhere, 2, timeout=10.0, op_timeout=OP)
    assert res.timed_out and "did not finish within 10 s" in res.summary
    # faulthandler (SIGUSR2) in each rank: two dumps naming the function they sleep in
    assert res.stderr.count("in sleep_forever_everywhere") >= 2, res.stderr[-4000:]


def test_a_world_of_one_rank_without_mpiexec():
    code = textwrap.dedent("""
        import numpy as np, mini, mini.nn as nn, mini.distributed as dist
        from mini.nn.parallel import DistributedDataParallel as DDP
        from mini.distributed.optim import ZeroRedundancyOptimizer
        dist.init_process_group(backend="mpi")
        assert (dist.get_rank(), dist.get_world_size(), dist.is_initialized()) == (0, 1, True)
        t = mini.tensor([1.0, 2.0, 3.0])
        dist.ring_allreduce(t); dist.all_reduce(t); dist.broadcast(t, 0); dist.barrier()
        assert t.tolist() == [1.0, 2.0, 3.0]
        model = DDP(nn.Linear(3, 2))
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=mini.optim.AdamW)
        model(mini.ones(4, 3)).sum().backward(); opt.step()
        dist.destroy_process_group()
        for bad in (dict(backend="gloo"), dict(world_size=2)):
            try:
                dist.init_process_group(**bad)
            except ValueError as e:
                print("refused:", e)
        try:
            dist.get_rank()
        except RuntimeError as e:
            print("uninitialised:", e)
        print("ok")
        """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("ok")
    assert "refused: mini.distributed has one backend, 'mpi'" in out.stdout
    assert "refused: world_size=2 but mpiexec started 1 rank(s)" in out.stdout
    assert "uninitialised: Default process group has not been initialized" in out.stdout


def _rundir_of(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            for item in f.read().split(b"\0"):
                if item.startswith(b"MINI_DIST_RUNDIR="):
                    return item.split(b"=", 1)[1].decode()
    except OSError:
        pass
    return None


def _processes_with(marker: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    if marker.encode() in f.read():
                        found.append(int(pid))
            except OSError:
                pass
    return found


def test_a_job_dies_with_the_process_that_launched_it():
    """A restarted notebook kernel (here: a killed Python) leaves no ranks behind."""
    if not sys.platform.startswith("linux"):
        return
    marker = f"MINI_TEST_JOB_{secrets.token_hex(6)}"
    here = os.path.dirname(os.path.abspath(__file__))
    code = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {here!r})
        import dist_scenarios as S
        from mini.distributed import launch
        launch.run(S.sleep_forever_everywhere, 2, timeout=600, env={{"{marker}": "1"}})
        """)
    parent = subprocess.Popen([sys.executable, "-c", code])
    rundir = None
    try:
        deadline = time.monotonic() + 60
        while len(_processes_with(marker + "=1")) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        ranks = _processes_with(marker + "=1")
        assert len(ranks) >= 2, "the job did not start"
        rundir = _rundir_of(ranks[0])
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    deadline = time.monotonic() + 30
    while _processes_with(marker + "=1") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_with(marker + "=1") == []
    if rundir and os.path.basename(rundir).startswith("mini-launch-"):
        shutil.rmtree(rundir, ignore_errors=True)     # its launcher died before cleaning up
