"""Run a function (or a script) on p MPI ranks from Python: a notebook cell, a test, a grader.

    from mini.distributed import launch

    def work():
        import mini, mini.distributed as dist
        t = mini.ones(4) * (dist.get_rank() + 1)
        dist.ring_allreduce(t)
        return t.tolist()

    result = launch.run(work, nprocs=4)     # mpiexec -n 4 ..., then wait
    result.values                           # what each rank returned, rank 0 first
    result.check()                          # raises LaunchError naming the failed rank

Each call is one ``mpiexec`` job: ranks start fresh (about a second), run ``fn(*args,
**kwargs)`` inside ``init_process_group``/``destroy_process_group``, and pickle back what
they return.  ``fn`` may be defined in the notebook: it travels by value (cloudpickle), and
so do the exercise implementations registered in this process with
``@mini.exercises.implement``, so the ranks run the student's code.  A path to a ``.py``
file runs that script on every rank instead (it calls ``init_process_group`` itself).

Failures end the job and name the rank: an exception on one rank stops all of them (see
:mod:`mini.distributed.watchdog`); a rank killed by a signal is reported with its number;
past ``timeout`` seconds every rank prints its stack (SIGUSR2) and the job is killed.

For a notebook this is the recommended loop (measured on a loaded 2-core machine, 2026-12):
a cell costs 2-3 s on 2 ranks and 4-5 s on 4 (fresh processes importing mini and MPI),
but every run starts from a clean world, so a deadlock or a crash in a student's ring ends
that cell with the failing rank named and leaves nothing behind.  ipyparallel's MPI engines
(``ipyparallel.Cluster(engines="mpi", n=2)``, version 9.2.0) answer a cell in 15-50 ms once
started (12 s), but engines keep state between cells: functions defined in the notebook must
be pushed to them, and after one failed collective the ranks' MPI communicators are out of
step (mini then refuses further operations), so the cluster must be restarted (about 15 s).

Ranks share the machine's cores, so each rank gets ``cpu_count // nprocs`` threads (at least
one) for OpenMP and BLAS, whatever this process uses, unless ``env`` names
``OMP_NUM_THREADS`` / ``OPENBLAS_NUM_THREADS``: 4 ranks × 2 threads on 2 cores is slower
than 4 × 1, and on a loaded machine an OpenMP team whose threads outnumber the free cores
waits at every barrier for a descheduled thread (measured: a backward pass 20× slower).  Values come back pickled: this is for code you trust (your own ranks).
"""
from __future__ import annotations

import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

__all__ = ["run", "LaunchResult", "LaunchError", "find_mpiexec"]


_NOT_IMPLEMENTED = re.compile(r"ExerciseNotImplemented: (?:exercise )?(\d\d\.\w+) (?:is not "
                              r"implemented yet|is part of mini)")


class LaunchError(RuntimeError):
    """A launched job failed; the message names the rank(s) and what happened."""


@dataclass
class LaunchResult:
    nprocs: int
    returncode: int | None
    values: list                         # per rank: the return value (None if none came back)
    errors: dict = field(default_factory=dict)   # rank -> the error text it reported
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    summary: str = ""                    # one line: what went wrong ("" when ok)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.errors

    def check(self) -> "LaunchResult":
        """Return self if every rank succeeded, else raise :class:`LaunchError` with the
        summary and the job's stderr.  When the ranks stopped because an exercise is not
        implemented yet, raise that :class:`~mini.exercises.ExerciseNotImplemented` instead
        (a notebook's ``needs_exercises`` then names the exercise to write)."""
        if not self.ok:
            slot = self.missing_exercise()
            if slot is not None:
                from mini.exercises import ExerciseNotImplemented
                raise ExerciseNotImplemented(slot, "a rank reached it")
            raise LaunchError(f"{self.summary}\n--- stderr of the job ---\n{self.stderr[-20000:]}")
        return self

    def missing_exercise(self) -> str | None:
        """The exercise whose stub stopped the job (``"06.ring_allreduce"``), if that is
        why it failed."""
        for text in [self.summary] + [self.errors[r] for r in sorted(self.errors)]:
            m = _NOT_IMPLEMENTED.search(text or "")
            if m:
                return m.group(1)
        return None


def find_mpiexec() -> str:
    """``mpiexec`` next to this Python (the mpich wheel puts it there), else on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.path.exists(here):
        return here
    found = shutil.which("mpiexec")
    if found:
        return found
    raise LaunchError("no mpiexec found next to this Python or on PATH; install MPI with "
                      "`pip install mpich==5.0.2 mpi4py==4.1.2` (or use the course environment)")


_FLAVOUR: dict[str, str] = {}


def _flavour(mpiexec: str) -> str:
    if mpiexec not in _FLAVOUR:
        try:
            out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True,
                                 timeout=20).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        _FLAVOUR[mpiexec] = ("hydra" if "HYDRA" in out.upper() else
                             "openmpi" if "open mpi" in out.lower() or "open-rte" in out.lower()
                             else "other")
    return _FLAVOUR[mpiexec]


def _command(mpiexec: str, nprocs: int, argv: list[str]) -> list[str]:
    cmd = [mpiexec]
    flavour = _flavour(mpiexec)
    if flavour == "hydra":
        # let the surviving ranks report a rank that exited with an error (watchdog.py)
        cmd.append("-disable-auto-cleanup")
    elif flavour == "openmpi":
        cmd.append("--oversubscribe")
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
    return cmd + ["-n", str(nprocs)] + argv


def run(target, nprocs: int, args: tuple = (), kwargs: dict | None = None, *,
        timeout: float = 120.0, op_timeout: float | None = None, env: dict | None = None,
        stream: bool = False, ship_exercises: bool = True, mpiexec: str | None = None,
        cwd: str | None = None) -> LaunchResult:
    """Run ``target`` on ``nprocs`` ranks and wait (at most ``timeout`` seconds).

    ``target`` is a function (called with ``args``/``kwargs`` on every rank, inside an
    initialised process group whose operations time out after ``op_timeout`` seconds), or
    the path of a ``.py`` script (``args`` are its command-line arguments).  ``stream=True``
    prints the ranks' output as it arrives (a notebook shows training live).  Never raises
    for a failed job: look at ``result.ok`` / ``result.summary``, or call ``result.check()``.
    """
    if not isinstance(nprocs, int) or nprocs < 1:
        raise ValueError(f"nprocs must be a positive int, got {nprocs!r}")
    mpiexec = mpiexec or find_mpiexec()
    rundir = tempfile.mkdtemp(prefix="mini-launch-")
    try:
        if isinstance(target, (str, os.PathLike)) and os.fspath(target).endswith(".py"):
            argv = [sys.executable, "-u", os.fspath(target)] + [str(a) for a in args]
        else:
            _write_task(rundir, target, args, kwargs or {}, op_timeout, ship_exercises)
            argv = [sys.executable, "-u", "-m", "mini.distributed.launch", "--worker", rundir]
        full_env = dict(os.environ)
        threads = str(max(1, (os.cpu_count() or 1) // nprocs))
        full_env["OMP_NUM_THREADS"] = full_env["OPENBLAS_NUM_THREADS"] = threads
        paths = [p for p in sys.path if p and os.path.isdir(p)]
        old = full_env.get("PYTHONPATH")
        full_env["PYTHONPATH"] = os.pathsep.join(paths + ([old] if old else []))
        full_env["MINI_DIST_RUNDIR"] = rundir
        if op_timeout is not None:
            full_env["MINI_DIST_TIMEOUT"] = str(op_timeout)
        if env:
            full_env.update({k: str(v) for k, v in env.items()})
        supervisor = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_supervise.py")
        argv = [sys.executable, supervisor, rundir] + argv
        return _run_job(_command(mpiexec, nprocs, argv), nprocs, rundir, full_env, timeout,
                        stream, cwd)
    finally:
        shutil.rmtree(rundir, ignore_errors=True)


def _write_task(rundir, fn, args, kwargs, op_timeout, ship_exercises) -> None:
    import cloudpickle
    impls = {}
    if ship_exercises:
        from mini import exercises
        impls = {slot: getattr(f, "student_function", f)
                 for slot, f in exercises._ACTIVE.items()}
    with open(os.path.join(rundir, "task.pkl"), "wb") as f:
        cloudpickle.dump({"fn": fn, "args": tuple(args), "kwargs": dict(kwargs),
                          "op_timeout": op_timeout, "exercises": impls}, f)


def _pump(stream_in, chunks: list, echo) -> None:
    for line in iter(stream_in.readline, ""):
        chunks.append(line)
        if echo is not None:
            echo.write(line)
            echo.flush()
    stream_in.close()


def _die_with_parent() -> None:
    """In the child, before exec: on Linux, get SIGKILL when the process that started the
    job dies (a restarted notebook kernel, a killed test run), so no job is left behind."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass


def _run_job(cmd, nprocs, rundir, env, timeout, stream, cwd) -> LaunchResult:
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=cwd, start_new_session=True, errors="replace",
                            preexec_fn=_die_with_parent)
    out, err = [], []
    threads = [threading.Thread(target=_pump, args=(proc.stdout, out, sys.stdout if stream else None),
                                daemon=True),
               threading.Thread(target=_pump, args=(proc.stderr, err, sys.stderr if stream else None),
                                daemon=True)]
    for t in threads:
        t.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _dump_and_kill(proc, rundir, nprocs)
    except BaseException:            # KeyboardInterrupt in the notebook: stop the job
        _kill(proc)
        raise
    for t in threads:
        t.join(timeout=5)
    result = LaunchResult(nprocs=nprocs, returncode=proc.returncode, values=[None] * nprocs,
                          stdout="".join(out), stderr="".join(err), timed_out=timed_out,
                          seconds=time.perf_counter() - start)
    for r in range(nprocs):
        path = os.path.join(rundir, f"result{r}.pkl")
        if os.path.exists(path):
            with open(path, "rb") as f:
                kind, payload = pickle.load(f)
            if kind == "value":
                result.values[r] = payload
            else:
                result.errors[r] = payload
    result.summary = _summarize(result, rundir, timeout)
    return result


def _rank_pids(rundir, nprocs) -> dict[int, int]:
    pids = {}
    for r in range(nprocs):
        try:
            with open(os.path.join(rundir, f"rank{r}.pid")) as f:
                pids[r] = int(f.read().strip())
        except (OSError, ValueError):
            pass
    return pids


def _dump_and_kill(proc, rundir, nprocs) -> None:
    for pid in _rank_pids(rundir, nprocs).values():
        try:
            os.kill(pid, signal.SIGUSR2)   # faulthandler: every thread's stack to stderr
        except (ProcessLookupError, PermissionError):
            pass
    time.sleep(1.0)
    _kill(proc)
    for pid in _rank_pids(rundir, nprocs).values():
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _kill(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def _endings(rundir, nprocs) -> dict[int, tuple[str, int, int]]:
    """rank -> ("exit" or "signal", number, pid), as _supervise.py recorded it."""
    out = {}
    for r in range(nprocs):
        try:
            with open(os.path.join(rundir, f"exit{r}")) as f:
                kind, number, pid = f.read().split()
            out[r] = (kind, int(number), int(pid))
        except (OSError, ValueError):
            pass
    return out


def _summarize(result: LaunchResult, rundir: str, timeout: float) -> str:
    if result.ok:
        return ""
    if result.timed_out:
        return (f"the job of {result.nprocs} ranks did not finish within {timeout:g} s and was "
                f"killed; the stack of every rank is in the stderr below (faulthandler)")
    roots = {r: e for r, e in result.errors.items() if "PeerFailure" not in e}
    if roots:   # a root cause first: an error that is not "another rank failed"
        r, text = sorted(roots.items())[0]
        return f"rank {r} failed: {text.strip().splitlines()[-1]}"
    endings = _endings(rundir, result.nprocs)
    killed = {r: e for r, e in endings.items() if e[0] == "signal"}
    if killed:
        r, (_, sig, pid) = sorted(killed.items())[0]
        try:
            name = f" ({signal.Signals(sig).name})"
        except ValueError:
            name = ""
        return f"rank {r} (pid {pid}) was killed by signal {sig}{name}"
    if result.errors:
        r, text = sorted(result.errors.items())[0]
        return f"rank {r} stopped: {text.strip().splitlines()[-1]}"
    failures = re.findall(r"\[rank (\d+)\] .*?(\w+(?:Error|Failure|Exception)\b.*)", result.stderr)
    if failures:
        roots = [f for f in failures if not f[1].startswith("PeerFailure")]
        r, text = (roots or failures)[0]
        return f"rank {r} failed: {text}"
    return f"the job exited with status {result.returncode} (see its stderr)"


# --------------------------------------------------------------------------- in each rank

def _worker(rundir: str) -> None:
    import traceback
    with open(os.path.join(rundir, "task.pkl"), "rb") as f:
        task = pickle.load(f)
    import mini.distributed as dist
    from mini import exercises
    for slot, fn in task["exercises"].items():
        exercises.implement(slot)(fn)
    dist.init_process_group(backend="mpi", timeout=task["op_timeout"])
    rank = dist.get_rank()
    out = os.path.join(rundir, f"result{rank}.pkl")
    try:
        value = task["fn"](*task["args"], **task["kwargs"])
    except BaseException:
        with open(out, "wb") as f:
            pickle.dump(("error", traceback.format_exc()), f)
        raise
    try:
        payload = pickle.dumps(("value", value))
    except Exception as e:  # noqa: BLE001 -- say what could not come back
        payload = pickle.dumps(("error", f"rank {rank} returned a value that cannot be "
                                         f"pickled: {type(e).__name__}: {e}"))
    with open(out, "wb") as f:
        f.write(payload)
    dist.destroy_process_group()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        _worker(sys.argv[2])
    else:
        sys.exit("usage: python -m mini.distributed.launch --worker RUNDIR (started by "
                 "mini.distributed.launch.run)")
