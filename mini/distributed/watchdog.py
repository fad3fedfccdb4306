"""Failure handling that MPI alone does not give: no rank hangs when another one fails.

With plain MPI, a rank that raises an uncaught exception leaves the others blocked for ever
in a receive or a collective that will never complete (the failing rank itself then hangs
in ``MPI_Finalize``), and a rank stuck in a loop gives no sign of where it is.  mini adds,
for every job of more than one rank:

- **An exception hook.**  An uncaught exception on rank j prints its traceback (each line
  prefixed ``[rank j]``), tells every other rank "rank j failed: <error>" on a separate
  communicator, waits (a few seconds at most) until the others have reported, and exits
  with status 1 instead of hanging in ``MPI_Finalize``.
- **A watchdog thread** on every rank.  It receives those reports; an operation of
  :mod:`mini.distributed` that is waiting then raises :class:`PeerFailure` naming the rank
  that failed and what this rank was waiting for.  A rank that is busy elsewhere (computing,
  not communicating) is stopped by its watchdog after a short grace, with its stack printed.
  The watchdog also notices a peer on the same machine that died without a word (killed by
  a signal, out of memory, ``os._exit``) and reports it the same way.
- **Timeouts.**  Every blocking operation waits at most the process group's ``timeout``;
  then it asks every rank to print the stack of its main thread (so a deadlock shows where
  each rank waits) and raises :class:`DistributedTimeoutError`.
- **SIGUSR2** dumps the stacks of all threads (``faulthandler``), for an outside harness.

What ``mpiexec`` does on top (measured with the MPICH 5.0.2 wheel): when a rank is killed
by a signal (SIGKILL, a segfault, the out-of-memory killer), ``mpiexec`` kills every other
rank within about a second, with or without ``-disable-auto-cleanup``, before they can say
anything, and prints only the dead process's PID ("BAD TERMINATION ... PID ... EXIT CODE:
9"); when a rank exits with an error status, plain ``mpiexec`` kills the others silently.
:mod:`mini.distributed.launch` runs each rank under a small supervisor process (which turns
a death by signal into an ordinary exit status) with ``-disable-auto-cleanup``: then every
surviving rank reports the dead rank by number before it exits.
"""
from __future__ import annotations

import faulthandler
import os
import signal
import socket
import sys
import threading
import time
import traceback

__all__ = ["DistributedError", "PeerFailure", "DistributedTimeoutError"]

_HERE = os.path.dirname(os.path.abspath(__file__))
_TAG = 77           # control messages, on the process group's control communicator
POLL_SECONDS = 0.02
#: How long a rank that failed waits for the others to report before it exits.
EXIT_GRACE_SECONDS = 5.0
#: How long a rank busy outside mini's operations gets, after a peer failed, before its
#: watchdog stops it.
BUSY_GRACE_SECONDS = 1.0


class DistributedError(RuntimeError):
    """A failure of the distributed job."""


class PeerFailure(DistributedError):
    """Another rank failed (raised an error, timed out or died); this one stops too."""

    def __init__(self, message: str, failed_rank: int):
        super().__init__(message)
        self.failed_rank = failed_rank


class DistributedTimeoutError(DistributedError, TimeoutError):
    """A blocking operation did not complete within the process group's timeout."""


def _prefix(text: str, rank: int) -> str:
    return "".join(f"[rank {rank}] {line}\n" for line in text.rstrip("\n").split("\n"))


def _err(text: str) -> None:
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 -- a closed stderr must not stop the shutdown
        pass


class Watchdog:
    """The failure bookkeeping of one process group (one per process at a time)."""

    def __init__(self, ctl_comm, rank: int, size: int, timeout: float):
        self.ctl = ctl_comm
        self.rank, self.size, self.timeout = rank, size, timeout
        info = ctl_comm.allgather((socket.gethostname(), os.getpid()))
        self.hosts = [h for h, _ in info]
        self.pids = [p for _, p in info]
        self.failures: dict[int, str] = {}      # rank -> what happened to it
        self.root_failures: set[int] = set()    # ranks whose failure is a root cause
        self.reported: set[int] = set()         # ranks that said they are stopping
        self.first_failure_at: float | None = None
        self.current_op: tuple[str, float] | None = None  # set while the main thread waits
        self.main_ident = threading.main_thread().ident
        self.exiting = False
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._sends: list = []
        self._thread = threading.Thread(target=self._run, name="mini.distributed watchdog",
                                        daemon=True)
        self._prev_excepthook = None

    # --- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        self._prev_excepthook = sys.excepthook
        sys.excepthook = self._excepthook
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=2)
        if sys.excepthook == self._excepthook:
            sys.excepthook = self._prev_excepthook or sys.__excepthook__

    # --- what the main thread calls ---------------------------------------------------------
    def check(self, waiting_for: str) -> None:
        """Raise :class:`PeerFailure` if another rank has failed (called by waits)."""
        if not self.failures:
            return
        with self._lock:
            roots = sorted(self.root_failures) or sorted(self.failures)
            j = roots[0]
            what = self.failures[j]
        raise PeerFailure(f"rank {j} failed ({what}); rank {self.rank} stops: it was waiting "
                          f"in {waiting_for}", j)

    def request_dumps(self, reason: str) -> None:
        """Ask every other rank to print the stack of its main thread."""
        for r in range(self.size):
            if r != self.rank:
                self._send(r, ("dump", self.rank, reason))

    def fail_and_exit(self, text: str, root: bool, code: int = 1) -> None:
        """Print ``text`` (this rank's error), tell the others, wait for their reports, exit."""
        if self.exiting:
            os._exit(code)
        self.exiting = True
        _err(_prefix(text, self.rank))
        summary = text.strip().split("\n")[-1][:500]
        for r in range(self.size):
            if r != self.rank:
                self._send(r, ("done", self.rank, root, summary))
        deadline = time.monotonic() + EXIT_GRACE_SECONDS
        while time.monotonic() < deadline:
            missing = [r for r in range(self.size)
                       if r != self.rank and r not in self.reported and not self._dead(r)]
            if not missing:
                break
            time.sleep(POLL_SECONDS)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(code)

    # --- the thread ------------------------------------------------------------------------
    def _send(self, dest: int, msg) -> None:
        try:
            self._sends.append(self.ctl.isend(msg, dest=dest, tag=_TAG))
        except Exception:  # noqa: BLE001 -- the peer may be gone; nothing to do about it
            pass

    def _run(self) -> None:
        from mpi4py import MPI
        status = MPI.Status()
        last_liveness = 0.0
        while not self._stop.is_set():
            try:
                while self.ctl.Iprobe(source=MPI.ANY_SOURCE, tag=_TAG, status=status):
                    msg = self.ctl.recv(source=status.Get_source(), tag=_TAG)
                    self._handle(msg)
                now = time.monotonic()
                if now - last_liveness > 0.1:
                    last_liveness = now
                    self._check_liveness()
                if self.failures and not self.exiting and self.current_op is None \
                        and now - self.first_failure_at > BUSY_GRACE_SECONDS:
                    self._stop_busy_main()
            except Exception:  # noqa: BLE001 -- never let the watchdog die silently
                if self._stop.is_set():
                    return
                _err(_prefix("mini.distributed watchdog error:\n" + traceback.format_exc(),
                             self.rank))
            self._stop.wait(POLL_SECONDS)

    def _record(self, rank: int, what: str, root: bool) -> None:
        with self._lock:
            if rank not in self.failures or root:
                self.failures[rank] = what
            if root:
                self.root_failures.add(rank)
            if self.first_failure_at is None:
                self.first_failure_at = time.monotonic()

    def _handle(self, msg) -> None:
        kind = msg[0]
        if kind == "done":
            _, rank, root, summary = msg
            self.reported.add(rank)
            self._record(rank, summary, root)
        elif kind == "dump":
            _, rank, reason = msg
            _err(_prefix(f"stack dump requested by rank {rank} ({reason}):\n"
                         + self.main_stack(), self.rank))

    def main_stack(self) -> str:
        frame = sys._current_frames().get(self.main_ident)
        op = self.current_op
        head = (f"main thread waiting in {op[0]} for {time.perf_counter() - op[1]:.1f} s\n"
                if op else "main thread running (not in a mini.distributed operation)\n")
        if frame is None:
            return head
        # the frames of mini.distributed's own waiting add nothing to "waiting in <op>"
        frames = [f for f in traceback.extract_stack(frame)
                  if os.path.dirname(f.filename) != _HERE]
        return head + "".join(traceback.format_list(frames))

    def _dead(self, rank: int) -> bool:
        if self.hosts[rank] != self.hosts[self.rank]:
            return False        # another machine: the operation timeouts cover it
        pid = self.pids[rank]
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            return state in ("Z", "X")
        except (OSError, IndexError):
            return False

    def _check_liveness(self) -> None:
        for r in range(self.size):
            if r != self.rank and r not in self.reported and r not in self.failures \
                    and self._dead(r):
                self._record(r, f"its process (pid {self.pids[r]} on {self.hosts[r]}) died "
                                f"without reporting an error: killed by a signal, out of "
                                f"memory, or os._exit", root=True)

    def _stop_busy_main(self) -> None:
        roots = sorted(self.root_failures) or sorted(self.failures)
        j = roots[0]
        text = (f"stopping: rank {j} failed ({self.failures[j]}) while this rank was busy "
                f"outside mini.distributed; its {self.main_stack()}")
        self.fail_and_exit(text, root=False)

    # --- sys.excepthook ----------------------------------------------------------------
    def _excepthook(self, etype, value, tb) -> None:
        text = "".join(traceback.format_exception(etype, value, tb))
        root = not isinstance(value, PeerFailure)
        self.fail_and_exit(text, root=root)


def install_signal_handlers() -> None:
    """SIGUSR2 prints every thread's stack to stderr (for a harness that timed out; it works
    even while the main thread is inside C code).  SIGUSR1 is what MPICH's
    ``mpiexec -disable-auto-cleanup`` sends the surviving ranks when one exits with an error;
    its default action would kill them before they can say which rank failed, so it is
    ignored: the watchdog finds out which rank died and reports it."""
    if threading.current_thread() is not threading.main_thread():
        return
    if hasattr(signal, "SIGUSR2"):
        try:
            faulthandler.register(signal.SIGUSR2, all_threads=True, chain=False)
        except (RuntimeError, ValueError, OSError):
            pass
    if hasattr(signal, "SIGUSR1"):
        try:
            signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        except (ValueError, OSError):
            pass
