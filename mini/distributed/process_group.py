"""The process group: which rank this process is, how many there are, and how every
operation waits (with a timeout, and an eye on the other ranks).

``init_process_group(backend="mpi")`` joins the job that ``mpiexec`` started (or, without
``mpiexec``, makes a world of one rank).  It duplicates ``MPI.COMM_WORLD`` twice: one
communicator for the data of mini's operations, one for the control messages of the
:mod:`watchdog <mini.distributed.watchdog>`, so neither can take a message meant for the other
(or for anything else in the process that uses ``COMM_WORLD``).

Every operation is started as a non-blocking MPI request and completed by :func:`wait_all`,
which polls the request.  Polling, rather than a blocking MPI call, is what lets a waiting
rank notice that another rank failed, give up after the timeout, and yield the CPU on a
laptop where ranks outnumber cores (a blocking MPICH call spins at 100 %).
"""
from __future__ import annotations

import atexit
import contextlib
import datetime
import os
import time

from mini.distributed import events as _events
from mini.distributed import watchdog as _watchdog

__all__ = ["ProcessGroup", "Work", "init_process_group", "destroy_process_group",
           "is_initialized", "is_available", "is_mpi_available", "get_rank", "get_world_size",
           "get_backend", "default_group", "sub_world", "DEFAULT_TIMEOUT"]

#: How long a blocking operation waits before it reports a hang.  A course job moves
#: megabytes, not gigabytes: a minute is long, and a laptop battery is not drained by a
#: deadlock.  ``MINI_DIST_TIMEOUT`` (seconds) or ``init_process_group(timeout=...)``
#: change it.
DEFAULT_TIMEOUT = datetime.timedelta(seconds=60)

_INSTALL_HINT = ("mini.distributed runs on MPI through mpi4py; install it with "
                 "`pip install mpi4py==4.1.2 mpich==5.0.2` (the MPICH wheel brings mpiexec), "
                 "or use the course environment (make install)")


def is_mpi_available() -> bool:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return True


def is_available() -> bool:
    """True when mini.distributed can run (mpi4py is importable)."""
    return is_mpi_available()


class ProcessGroup:
    """A group of ranks (mini has one: the world) on MPI communicators."""

    def __init__(self, comm, ctl, timeout: float):
        self.comm = comm              # data of mini's operations
        self.ctl = ctl                # watchdog control messages and the exit barrier
        self._rank = comm.Get_rank()
        self._size = comm.Get_size()
        self.timeout = float(timeout)
        self.watchdog: _watchdog.Watchdog | None = None
        self.broken: str | None = None

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size

    def __repr__(self):
        return f"ProcessGroup(backend='mpi', rank={self._rank}, size={self._size}, " \
               f"timeout={self.timeout:g} s)"


_WORLD: list[ProcessGroup | None] = [None]
_ATEXIT = [False]


def _seconds(timeout) -> float:
    if timeout is None:
        env = os.environ.get("MINI_DIST_TIMEOUT")
        if env:
            try:
                return float(env)
            except ValueError:
                raise ValueError(f"MINI_DIST_TIMEOUT must be a number of seconds, got "
                                 f"{env!r}") from None
        return DEFAULT_TIMEOUT.total_seconds()
    if isinstance(timeout, datetime.timedelta):
        seconds = timeout.total_seconds()
    elif isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        seconds = float(timeout)
    else:
        raise TypeError(f"timeout must be a datetime.timedelta (or seconds), got "
                        f"{type(timeout).__name__}")
    if seconds <= 0:
        raise ValueError(f"timeout must be positive, got {seconds} s")
    return seconds


def init_process_group(backend: str | None = "mpi", init_method=None, timeout=None,
                       world_size: int = -1, rank: int = -1, store=None, group_name: str = "",
                       pg_options=None, device_id=None) -> None:
    """Join the distributed job, as ``torch.distributed.init_process_group``.

    Ranks are the processes ``mpiexec`` started (``mpiexec -n 4 python train.py``); a plain
    ``python train.py`` is a world of one rank.  ``backend`` is ``"mpi"`` (``None`` means
    the same).  ``world_size`` and ``rank``, when given, must agree with what MPI says (they
    cannot choose anything: ``mpiexec`` did).  ``timeout`` (a ``datetime.timedelta``)
    bounds every blocking operation; default :data:`DEFAULT_TIMEOUT` or
    ``MINI_DIST_TIMEOUT`` seconds.  ``init_method`` and ``store`` are not needed with MPI
    (``mpiexec`` connects the ranks) and must be left out.
    """
    if _WORLD[0] is not None:
        raise RuntimeError("trying to initialize the default process group twice; call "
                           "mini.distributed.destroy_process_group() first")
    if backend not in (None, "mpi", "MPI"):
        raise ValueError(f"mini.distributed has one backend, 'mpi' (MPI through mpi4py), got "
                         f"backend={backend!r}; ranks are started by mpiexec, on CPUs")
    if init_method is not None or store is not None:
        raise ValueError("init_method and store are not used with the MPI backend: mpiexec "
                         "starts the ranks and connects them; leave them out")
    seconds = _seconds(timeout)
    # before MPI starts: it keeps a SIGUSR1 disposition it finds at start-up (see there)
    _watchdog.install_signal_handlers()
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise ImportError(_INSTALL_HINT) from e
    world = MPI.COMM_WORLD
    if world_size not in (-1, None) and int(world_size) != world.Get_size():
        raise ValueError(f"world_size={world_size} but mpiexec started {world.Get_size()} "
                         f"rank(s); launch with `mpiexec -n {world_size} python ...` or drop "
                         f"the argument")
    if rank not in (-1, None) and int(rank) != world.Get_rank():
        raise ValueError(f"rank={rank} but MPI says this process is rank {world.Get_rank()}; "
                         f"mpiexec assigns ranks, drop the argument")
    pg = ProcessGroup(world.Dup(), world.Dup(), seconds)
    if pg.size() > 1:
        pg.watchdog = _watchdog.Watchdog(pg.ctl, pg.rank(), pg.size(), seconds)
        pg.watchdog.start()
    _WORLD[0] = pg
    rundir = os.environ.get("MINI_DIST_RUNDIR")
    if rundir:  # mini.distributed.launch finds the ranks' pids here (for stack dumps)
        with open(os.path.join(rundir, f"rank{pg.rank()}.pid"), "w") as f:
            f.write(str(os.getpid()))
    if not _ATEXIT[0]:
        _ATEXIT[0] = True
        atexit.register(_at_exit)   # runs before mpi4py's MPI_Finalize (registered earlier)


def _at_exit() -> None:
    pg = _WORLD[0]
    if pg is None:
        return
    try:
        destroy_process_group()
    except _watchdog.DistributedError as e:
        if pg.watchdog is not None:   # another rank failed while this one was finishing
            pg.watchdog.fail_and_exit(f"{type(e).__name__}: {e}", root=False)
        raise


def destroy_process_group(group=None) -> None:
    """Leave the job.  With more than one rank this waits until every rank has arrived here
    (no timeout: a rank may legitimately work longer; a rank that fails is still noticed),
    so that MPI's own shutdown cannot hang on a rank that is gone."""
    pg = _group(group, allow_broken=True)
    try:
        if pg.size() > 1 and pg.broken is None:
            req = pg.ctl.Ibarrier()
            wait_all([req], "the exit barrier (destroy_process_group)", pg, timeout=float("inf"))
    finally:
        if pg.watchdog is not None:
            pg.watchdog.stop()
        _WORLD[0] = None


@contextlib.contextmanager
def sub_world(size: int):
    """Run a block as if the job had only its first ``size`` ranks.

    Inside ``with sub_world(size) as inside:`` the default process group of ranks
    ``0 .. size-1`` is a world of ``size`` ranks (same rank numbers); ``inside`` is False on
    the other ranks, which should skip the block.  Every rank of the job must enter and
    leave it (both are meeting points), so one job of 4 ranks can try the same code on
    worlds of 4, 3, 2 and 1 rank one after another: what a test or a grader does to cover
    several world sizes with one ``mpiexec`` start (the expensive part on a laptop).

    A rank that fails inside is still reported to every rank of the job (the job's
    watchdog), and operations inside keep the job's timeout.
    """
    from mpi4py import MPI
    parent = _group(None)
    if not isinstance(size, int) or isinstance(size, bool) or not 1 <= size <= parent.size():
        raise ValueError(f"sub_world: size must be an int from 1 to the world size "
                         f"({parent.size()}), got {size!r}")
    inside = parent.rank() < size
    wait_all([parent.comm.Ibarrier()], f"entering sub_world({size})", parent)
    comm = parent.comm.Split(0 if inside else MPI.UNDEFINED, parent.rank())
    sub = None
    if inside:
        sub = ProcessGroup(comm, parent.ctl, parent.timeout)
        sub.watchdog = parent.watchdog
        _WORLD[0] = sub
    failed = True
    try:
        yield inside
        failed = False
    finally:
        _WORLD[0] = parent
        if sub is not None:
            if sub.broken is not None:
                parent.broken = sub.broken
            comm.Free()
    if not failed:   # leave together (after an error the watchdog ends the job instead)
        wait_all([parent.comm.Ibarrier()], f"leaving sub_world({size})", parent)


def is_initialized() -> bool:
    return _WORLD[0] is not None


def default_group() -> ProcessGroup:
    return _group(None)


def _group(group, allow_broken: bool = False) -> ProcessGroup:
    pg = _WORLD[0]
    if pg is None:
        raise RuntimeError("Default process group has not been initialized, please make sure "
                           "to call mini.distributed.init_process_group()")
    if group is not None and group is not pg:
        raise ValueError("mini.distributed has one process group, the world: pass group=None")
    if pg.broken is not None and not allow_broken:
        # an operation that failed may still be pending in MPI: a later collective could be
        # matched with it on another rank and silently compute garbage
        raise _watchdog.DistributedError(
            f"the process group is unusable after an earlier failure ({pg.broken}); start "
            f"the job again (with ipyparallel: restart the engines)")
    return pg


def get_rank(group=None) -> int:
    return _group(group, allow_broken=True).rank()


def get_world_size(group=None) -> int:
    return _group(group, allow_broken=True).size()


def get_backend(group=None) -> str:
    _group(group)
    return "mpi"


# --------------------------------------------------------------------------- waiting

#: Test a request this many times in a row before sleeping (latency of small messages).
SPIN_TESTS = 200
#: The longest sleep between two tests of a request.
MAX_SLEEP = 1e-3


def wait_all(requests, what: str, pg: ProcessGroup, timeout: float | None = None,
             statuses=None) -> None:
    """Wait until every MPI request in ``requests`` has completed (``statuses``: a list of
    ``MPI.Status``, one per request, to fill in).

    Raises :class:`~mini.distributed.watchdog.PeerFailure` when another rank failed, and
    :class:`~mini.distributed.watchdog.DistributedTimeoutError` (after every rank printed its
    stack) when ``timeout`` (default: the group's) runs out.
    """
    from mpi4py import MPI
    if MPI.Request.Testall(requests, statuses):
        return
    wd = pg.watchdog
    start = time.perf_counter()
    limit = pg.timeout if timeout is None else timeout
    deadline = start + limit
    if wd is not None:
        wd.current_op = (what, start)
    try:
        spins, sleep = 0, 2e-5
        while not MPI.Request.Testall(requests, statuses):
            if wd is not None:
                wd.check(what)
            if spins < SPIN_TESTS:
                spins += 1
                continue
            now = time.perf_counter()
            if now > deadline:
                _timed_out(what, limit, pg)
            time.sleep(sleep)
            sleep = min(sleep * 2, MAX_SLEEP)
    except BaseException as e:   # a failure, a timeout, Ctrl-C: the request is abandoned
        pg.broken = f"{type(e).__name__}: {e}"
        raise
    finally:
        if wd is not None:
            wd.current_op = None


def _timed_out(what: str, limit: float, pg: ProcessGroup) -> None:
    rank = pg.rank()
    if pg.watchdog is not None:
        pg.watchdog.request_dumps(f"rank {rank} timed out in {what}")
        time.sleep(0.2)   # let the other ranks print before this one's error follows
    raise _watchdog.DistributedTimeoutError(
        f"rank {rank}: {what} did not complete within {limit:g} s.  Every rank has printed "
        f"where its main thread waits: look for a rank that never reaches the matching "
        f"operation (a send without a receive, a collective called by only some ranks, or "
        f"two ranks that both wait to receive first).  The limit is init_process_group's "
        f"timeout (MINI_DIST_TIMEOUT).")


class Work:
    """A non-blocking operation in flight (``torch.distributed.Work``): ``wait()`` completes
    it (and finishes what it writes, e.g. the average of ``ReduceOp.AVG``)."""

    def __init__(self, requests, what: str, pg: ProcessGroup, event=None, finish=None,
                 result=None):
        self._requests = list(requests)
        self._what = what
        self._pg = pg
        self._event = event
        self._finish = finish
        self._result = result
        self._done = False

    def is_completed(self) -> bool:
        if self._done:
            return True
        from mpi4py import MPI
        if MPI.Request.Testall(self._requests):
            self._complete()
        return self._done

    def wait(self, timeout=None) -> bool:
        if not self._done:
            wait_all(self._requests, self._what, self._pg,
                     None if timeout is None else _seconds(timeout))
            self._complete()
        return True

    def _complete(self) -> None:
        if self._done:
            return
        self._done = True
        if self._finish is not None:
            self._finish()
        _events.complete(self._event)

    def result(self):
        return self._result

    def __repr__(self):
        return f"<Work {self._what}: {'done' if self._done else 'in flight'}>"
