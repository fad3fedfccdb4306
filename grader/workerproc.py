"""The trusted side of the hidden-check worker: start it in the sandbox, load a notebook's
answers into it, and send it requests with deadlines.

:class:`WorkerProcess` is one worker: ``python -I`` inside :class:`grader.sandbox.Sandbox`
with the worker package (``grader/worker`` only) and the chapter's student ``mini``
read-only, talking :mod:`grader.worker.codec` frames over its stdin/stdout.  A request
that misses its deadline kills the worker (everything it started), as does a frame that is
not one; either way :class:`grader.checks.student.WorkerLost` says why.

:class:`WorkerBackend` is the :class:`grader.checks.student.Backend` of a submission: it
(re)starts the worker on demand -- a worker that died or was killed is replaced, with the
notebook's answers loaded again, before the next check -- and gives each check a time
budget (:meth:`WorkerBackend.begin_check`).
"""
from __future__ import annotations

import functools
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from grader.checks.student import Backend, Outcome, WorkerLost, _outcome
from grader.sandbox import INSIDE_SCRATCH, Limits, Sandbox
from grader.worker import codec

__all__ = ["WorkerProcess", "WorkerBackend", "WORKER_PACKAGE"]

WORKER_PACKAGE = Path(__file__).resolve().parent / "worker"
_INSIDE_WORKER_ROOT = "/opt/mini-grader"


class _DeadlineReader:
    """``read(n)`` on a pipe that gives up at a deadline (``TimeoutError``)."""

    def __init__(self, fd: int):
        self.fd = fd
        self.deadline: float | None = None

    def read(self, n: int) -> bytes:
        while True:
            left = None if self.deadline is None else self.deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                return os.read(self.fd, min(n, 1 << 20))


def _write_by(fd: int, data: bytes, deadline: float | None) -> None:
    """Write all of ``data`` to the pipe ``fd`` before ``deadline`` (``TimeoutError``):
    a worker that stops reading cannot block the grader."""
    os.set_blocking(fd, False)
    view = memoryview(data)
    while view:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise TimeoutError
        _, ready, _ = select.select([], [fd], [], left)
        if not ready:
            continue
        try:
            n = os.write(fd, view[: 1 << 16])
        except BlockingIOError:
            continue
        view = view[n:]


class WorkerProcess:
    """One sandboxed worker (see the module docstring).  ``mini_dir`` is the student copy of
    mini it imports (``None``: whatever ``import mini`` finds, only for a trusted reference
    worker outside a sandbox)."""

    def __init__(self, sandbox: Sandbox, *, mini_dir: Path | None, limits: Limits = Limits(),
                 startup_timeout: float = 120.0, extra_readonly: dict | None = None,
                 cache_dir: Path | None = None):
        self.sandbox = sandbox
        self.mini_dir = Path(mini_dir).resolve() if mini_dir else None
        self.limits = limits
        self.startup_timeout = startup_timeout
        self.extra_readonly = dict(extra_readonly or {})
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.proc = None
        self.scratch: Path | None = None
        self._reader: _DeadlineReader | None = None
        self.load_report: list[dict] = []
        self.memory_events = 0   # workers that hit the memory limit (even if they survived)

    # ------------------------------------------------------------------ lifecycle
    def start(self, cells: list[dict] | None = None, timeout: float | None = None) -> list[dict]:
        """Start the worker and run ``cells`` in it; returns the load report
        (``[{"grade_id", "raised"}]``)."""
        self.close()
        self.scratch = Path(tempfile.mkdtemp(prefix="mini-worker-"))
        box = self.sandbox
        readonly: dict = dict(self.extra_readonly)
        if box.confined:
            worker_root = _INSIDE_WORKER_ROOT
            readonly[WORKER_PACKAGE] = f"{_INSIDE_WORKER_ROOT}/grader/worker"
        else:
            worker_root = str(self.scratch / ".worker")
            readonly[WORKER_PACKAGE] = f"{worker_root}/grader/worker"
        if self.mini_dir is not None:
            readonly[self.mini_dir] = "mini"
        inside = box.scratch_path(self.scratch)
        path = [worker_root] + ([inside] if self.mini_dir is not None else [])
        boot = (f"import sys; sys.path[:0] = {path!r}; "
                f"from grader.worker.main import main; main()")
        writable, env = cache_binds(box, self.cache_dir)
        runtime_ro, runtime_env = cuda_runtime_binds(box)
        readonly.update(runtime_ro)
        env.update(runtime_env)
        self.proc = box.launch([box.python, "-I", "-c", boot], scratch=self.scratch,
                               readonly=readonly, writable=writable, env=env, limits=self.limits,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL)
        self._reader = _DeadlineReader(self.proc.popen.stdout.fileno())
        deadline = time.monotonic() + (timeout or self.startup_timeout)
        self.request({"op": "hello"}, deadline=deadline)
        reply = self.request({"op": "load", "cells": list(cells or [])}, deadline=deadline)
        self.load_report = list(reply.get("cells") or [])
        return self.load_report

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def close(self) -> None:
        if self.proc is not None:
            try:
                self.proc.popen.stdin.close()
            except OSError:
                pass
            self.proc.kill()
            self.memory_events += int(self.proc.memory_exceeded())
            for stream in (self.proc.popen.stdout,):
                try:
                    stream.close()
                except OSError:
                    pass
            self.proc = None
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None

    # ------------------------------------------------------------------ requests
    def request(self, msg: dict, *, deadline: float | None = None) -> dict:
        """Send ``msg``; the decoded reply.  :class:`WorkerLost` (and the worker killed) when
        it does not answer by ``deadline`` (a ``time.monotonic()`` value), dies, or answers
        with something that is not a frame."""
        if self.proc is None:
            raise WorkerLost("died", "the process running your code is not running")
        try:
            _write_by(self.proc.popen.stdin.fileno(), codec.pack(msg), deadline)
        except TimeoutError:
            self.close()
            raise WorkerLost("timeout", "your code did not finish in the time the grader allows "
                                        "and was stopped (it stopped reading the grader's "
                                        "requests)") from None
        except (BrokenPipeError, OSError):
            raise self._lost() from None
        self._reader.deadline = deadline
        try:
            reply = codec.read_frame(self._reader, "trusted")
        except TimeoutError:
            self.close()
            raise WorkerLost("timeout", "your code did not finish in the time the grader allows "
                                        "and was stopped: is there an infinite loop, or a loop "
                                        "over every element that should be vectorized?") from None
        except EOFError:
            raise self._lost() from None
        except (codec.CodecError, ValueError, OverflowError) as e:
            self.close()
            raise WorkerLost("protocol", f"the grader could not read the answer of your code "
                                         f"({e}); does your code write to the grader's channel "
                                         f"(standard output at the file-descriptor level)?") from None
        if type(reply) is not dict:
            self.close()
            raise WorkerLost("protocol", "the grader received something that is not an answer")
        if reply.get("ok") is not True:
            err = reply.get("error")
            raise WorkerLost("protocol", f"the grader's worker failed: {err if type(err) is str else '?'}")
        return reply

    def _lost(self) -> WorkerLost:
        proc = self.proc
        rc = proc.wait(timeout=5) if proc is not None else None
        memory = proc is not None and proc.memory_exceeded()
        self.close()
        if memory:
            limit = self.limits.memory
            return WorkerLost("memory", f"your code used more memory than the grader allows "
                                        f"({limit / 2**30:.3g} GiB for everything it runs) and "
                                        f"was stopped" if limit else
                                        "your code ran out of memory and was stopped")
        how = f"exit code {rc}" if rc is not None and rc >= 0 else (
            f"signal {-rc}" if rc is not None else "no exit code")
        return WorkerLost("died", f"the process running your code stopped ({how}) before it "
                                  f"answered: a function must return its result; do not call "
                                  f"sys.exit(), os._exit() or kill the process")


def cache_binds(box: Sandbox, cache_dir: Path | None) -> tuple[dict, dict]:
    """(writable binds, environment) sharing ``cache_dir`` as the C++ build cache of a
    submission's sandboxes (its kernel compiles a kernel once, its worker reuses it)."""
    if cache_dir is None:
        return {}, {}
    Path(cache_dir).mkdir(parents=True, exist_ok=True)
    return {cache_dir: "/cache"}, {"MINI_EXTENSIONS_DIR": box.inside(cache_dir, "/cache")}


def cuda_runtime_binds(box: Sandbox) -> tuple[dict, dict]:
    """(read-only binds, environment) that hand a sandbox the CUDA emulator's runtime
    library prebuilt by this (trusted) process, so that student CUDA code (chapter 04) links
    against it instead of building it in every sandbox (``MINI_CUDA_RUNTIME_DIR``).  Empty
    where the runtime cannot be built here: the sandbox then builds its own into its cache."""
    runtime = _cuda_runtime()
    if runtime is None:
        return {}, {}
    inside = ".mini-cuda-runtime"            # under the scratch folder
    where = f"{INSIDE_SCRATCH}/{inside}" if box.confined else str(runtime.parent)
    return {runtime.parent: inside}, {"MINI_CUDA_RUNTIME_DIR": where}


@functools.lru_cache(maxsize=1)
def _cuda_runtime():
    """The emulator's runtime library built for this machine (built on first use, ~15 s,
    then cached on disk), or None where it cannot be built (asked once per process)."""
    if os.name != "posix":
        return None
    try:
        from mini.backends.cuda import build
        return build.runtime_library()
    except Exception:  # noqa: BLE001 - no compiler here: each sandbox tries on its own
        return None


class WorkerBackend(Backend):
    """The sandboxed worker of one submission, restarted on demand (see the module
    docstring).  ``cells`` are the notebook's setup and answer cells."""

    def __init__(self, sandbox: Sandbox, *, mini_dir: Path | None, cells: list[dict],
                 limits: Limits = Limits(), check_timeout: float = 60.0,
                 cache_dir: Path | None = None):
        self.worker = WorkerProcess(sandbox, mini_dir=mini_dir, limits=limits, cache_dir=cache_dir)
        # the CUDA emulator's runtime, found or built now (seconds; minutes on a loaded
        # machine the first time), so that no check's time budget pays for it
        _cuda_runtime()
        self.cells = list(cells)
        self.check_timeout = float(check_timeout)
        self.deadline: float | None = None
        self.starts = 0
        self.statuses: list[str] = []   # why each worker ended early ("timeout", "memory"...)

    def begin_check(self, budget: float | None = None) -> None:
        """Give the next check ``budget`` seconds (default ``check_timeout``), restarts
        included."""
        self.deadline = time.monotonic() + float(budget or self.check_timeout)

    def _ensure(self) -> None:
        if self.worker.alive:
            return
        self.starts += 1
        try:
            self.worker.start(self.cells, timeout=self._left())
        except WorkerLost as e:
            self.statuses.append(e.reason)
            if e.reason == "timeout":
                raise WorkerLost("timeout", "your notebook's answer cells did not finish loading "
                                            "in the time the grader allows: does a cell run a "
                                            "long loop or wait for input?") from None
            raise

    def _left(self) -> float:
        if self.deadline is None:
            return self.check_timeout
        return max(0.5, self.deadline - time.monotonic())

    def _request(self, msg: dict) -> dict:
        self._ensure()
        deadline = self.deadline if self.deadline is not None else time.monotonic() + self.check_timeout
        try:
            return self.worker.request(msg, deadline=deadline)
        except WorkerLost as e:
            self.statuses.append(e.reason)
            self.worker.close()
            if e.reason == "timeout":
                raise WorkerLost("timeout", f"your code did not finish within {self.check_timeout:g} s "
                                            f"and was stopped: is there an infinite loop, or a loop "
                                            f"over every element that should be vectorized?") from None
            raise

    def call(self, slot, name, args, kwargs, *, seed=0, backward=None, observe_args=False) -> Outcome:
        reply = self._request({"op": "call", "slot": slot, "name": name, "args": list(args),
                               "kwargs": dict(kwargs), "seed": int(seed), "backward": backward,
                               "observe_args": bool(observe_args)})
        return self._checked(reply)

    def scenario(self, module, scenario, slot, name, params, seed=0) -> Outcome:
        reply = self._request({"op": "scenario", "module": module, "scenario": scenario,
                               "slot": slot, "name": name, "params": dict(params),
                               "seed": int(seed)})
        return self._checked(reply)

    def bind(self, slot: str, accessor: str) -> bool:
        """For the release audit: test what mini exposes as ``accessor`` for ``slot``."""
        return self._request({"op": "bind", "slot": slot, "accessor": accessor}).get("found") is True

    def _checked(self, reply: dict) -> Outcome:
        try:
            return _outcome(reply.get("outcome"))
        except codec.CodecError as e:
            self.worker.close()
            raise WorkerLost("protocol", f"the grader received a malformed answer ({e})") from None

    def close(self) -> None:
        self.worker.close()

    def __enter__(self) -> "WorkerBackend":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

