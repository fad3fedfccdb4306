"""Run a check on a student's function in a fresh, limited subprocess.

The kernel serializes the student's function with cloudpickle (functions and classes
defined in the notebook are pickled by value, with the globals they use; modules that
sit in the notebook's folder, other than ``mini`` and ``grader``, are pickled by value
too) and starts ``python -I`` (isolated: no current directory, no ``PYTHONPATH`` on
``sys.path``) in a new temporary directory.  So the subprocess imports the pristine
``grader`` and the instructor's installed ``mini`` -- never the ``mini/`` copy in the
notebook's folder, never anything the student patched in the kernel -- and only then
unpickles and checks the student's function.

Limits: a wall-clock timeout (default 60 s, ``MINI_GRADER_TIMEOUT``) after which the whole
process group is killed, and an address-space limit (``resource.RLIMIT_AS``, default
4 GiB, ``MINI_GRADER_MEMORY``, e.g. ``"2G"``; not enforced where ``resource`` is missing).

Channel: the subprocess reads a JSON request on stdin (verdict path, random nonce) and
writes the verdict with the nonce to that file (atomically); stdout and stderr are ignored,
so printing a fake verdict does nothing, and a process that exits early (``sys.exit``,
``os._exit``) or crashes leaves no verdict and fails.

Limits of the defence: the student's function runs inside the subprocess, so a function
written to attack the grader from the inside (walking interpreter frames to find the
nonce) is not excluded; ``mini-course autograde`` re-runs every hidden check from its own
process after the notebook ran (see :mod:`grader.course`), so lies told by the kernel do
not count.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from grader.checks import Verdict

__all__ = ["run_sandboxed", "run_payload", "serialize", "DEFAULT_TIMEOUT", "DEFAULT_MEMORY",
           "parse_memory"]

DEFAULT_TIMEOUT = 60.0
DEFAULT_MEMORY = 4 * 2**30

_PRISTINE = ("mini", "grader")


def parse_memory(text: str | int | None) -> int | None:
    """``"4G"``, ``"512M"``, ``"1073741824"`` -> bytes; ``"0"``/``"none"`` -> None (no limit)."""
    if text is None:
        return None
    if isinstance(text, int):
        return text if text > 0 else None
    t = str(text).strip().upper()
    if t in ("", "0", "NONE", "OFF"):
        return None
    mult = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    if t[-1] == "B":
        t = t[:-1]
    if t and t[-1] in mult:
        return int(float(t[:-1]) * mult[t[-1]])
    return int(float(t))


def _default_timeout() -> float:
    try:
        return float(os.environ.get("MINI_GRADER_TIMEOUT", DEFAULT_TIMEOUT))
    except ValueError:
        return DEFAULT_TIMEOUT


def _default_memory() -> int | None:
    try:
        return parse_memory(os.environ.get("MINI_GRADER_MEMORY", DEFAULT_MEMORY))
    except ValueError:
        return DEFAULT_MEMORY


# --------------------------------------------------------------------------- parent side

def serialize(student_fn: Callable, local_dir: str | os.PathLike | None = None) -> bytes:
    """cloudpickle ``student_fn``; modules imported from ``local_dir`` (default: the current
    directory, i.e. the notebook's folder), except the ``mini``/``grader`` copies there, are
    pickled by value so that the fresh subprocess does not need them."""
    import cloudpickle

    local = Path(local_dir or os.getcwd()).resolve()
    registered = []
    for name, module in list(sys.modules.items()):
        if module is None or name.split(".")[0] in _PRISTINE or name == "__main__":
            continue
        file = getattr(module, "__file__", None)
        if not isinstance(file, str):
            continue
        try:
            path = Path(file).resolve()
        except (OSError, RuntimeError):
            continue
        if local in path.parents and "site-packages" not in path.parts:
            try:
                cloudpickle.register_pickle_by_value(module)
                registered.append(module)
            except (ValueError, TypeError):
                pass
    try:
        return cloudpickle.dumps(student_fn)
    finally:
        for module in registered:
            try:
                cloudpickle.unregister_pickle_by_value(module)
            except (ValueError, TypeError):  # pragma: no cover
                pass


def run_sandboxed(slot_id: str, student_fn: Callable, *, timeout: float | None = None,
                  memory_limit: int | None | str = "default",
                  save_payload_to: str | os.PathLike | None = None) -> Verdict:
    """Check ``student_fn`` against the check of ``slot_id`` in a fresh subprocess and
    return the :class:`Verdict`.  Never raises because of the student's code.

    ``save_payload_to``: also write the pickled function to this file (used by
    ``mini-course autograde`` to re-run the check from outside the kernel).
    """
    try:
        payload = serialize(student_fn)
    except BaseException as e:  # noqa: BLE001 - anything from pickling the student's objects
        from grader.checks.helpers import describe_exception
        return Verdict(slot_id, False,
                       f"{slot_id}: the grader could not copy your function to its own process "
                       f"({describe_exception(e)}); define everything your function uses in the "
                       f"notebook and import only installed packages", 0.0)
    if save_payload_to is not None:
        _atomic_write(Path(save_payload_to), payload)
    return run_payload(slot_id, payload, timeout=timeout, memory_limit=memory_limit)


def run_payload(slot_id: str, payload: bytes, *, timeout: float | None = None,
                memory_limit: int | None | str = "default",
                python: str | None = None) -> Verdict:
    """Run the check of ``slot_id`` on a pickled function in a fresh ``python -I``."""
    timeout = _default_timeout() if timeout is None else float(timeout)
    if memory_limit == "default":
        memory_limit = _default_memory()
    elif isinstance(memory_limit, str):
        memory_limit = parse_memory(memory_limit)
    tmp = Path(tempfile.mkdtemp(prefix="mini-check-"))
    try:
        payload_path = tmp / "payload.pkl"
        payload_path.write_bytes(payload)
        verdict_path = tmp / "verdict.json"
        nonce = secrets.token_hex(16)
        request = {
            "slot_id": slot_id, "nonce": nonce, "payload_path": str(payload_path),
            "verdict_path": str(verdict_path), "memory_limit": memory_limit,
        }
        # -I: sys.path is the interpreter's own (stdlib, site-packages); the grader's root is
        # appended last only so that a grader run from a checkout without install is found.
        root = str(Path(__file__).resolve().parent.parent)
        cmd = [python or sys.executable, "-I", "-c",
               f"import sys; sys.path.append({root!r}); "
               f"import grader.sandbox as s; s._child_main()"]
        debug = os.environ.get("MINI_GRADER_DEBUG") == "1"
        env = _child_env()
        start = time.monotonic()
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE,
                                stdout=None if debug else subprocess.DEVNULL,
                                stderr=None if debug else subprocess.DEVNULL,
                                cwd=str(tmp), env=env, start_new_session=True, close_fds=True)
        timed_out = False
        try:
            proc.stdin.write(json.dumps(request).encode())
            proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            _kill_group(proc)
        elapsed = time.monotonic() - start
        verdict = _read_verdict(verdict_path, nonce, slot_id)
        if verdict is not None and not timed_out:
            return verdict
        if timed_out:
            return Verdict(slot_id, False,
                           f"{slot_id}: your code did not finish within {timeout:g} s and was "
                           f"stopped: is there an infinite loop, or a loop over every element "
                           f"that should be vectorized?", 0.0)
        return Verdict(slot_id, False, _death_message(slot_id, proc.returncode, elapsed,
                                                      memory_limit), 0.0)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "MINI_GRADER_SUBMISSION"))}
    # Keep the numeric libraries from starting a thread per core inside the memory limit.
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(var, "1")
    return env


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError, AttributeError):
        pass
    try:
        proc.kill()
    except OSError:
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover
        pass


def _read_verdict(path: Path, nonce: str, slot_id: str) -> Verdict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("nonce") != nonce:
        return None
    try:
        verdict = Verdict.from_dict(data["verdict"])
    except (KeyError, TypeError, ValueError):
        return None
    if verdict.slot_id != slot_id:
        return None
    return verdict


def _death_message(slot_id: str, returncode: int | None, elapsed: float,
                   memory_limit: int | None) -> str:
    if returncode is not None and returncode < 0:
        try:
            sig = signal.Signals(-returncode).name
        except ValueError:
            sig = f"signal {-returncode}"
        why = f"was killed by {sig}"
        if sig in ("SIGKILL", "SIGSEGV", "SIGABRT", "SIGBUS") and memory_limit:
            why += (f" (it may have run out of memory: the limit is "
                    f"{memory_limit / 2**30:.3g} GiB, or crashed)")
    else:
        why = f"stopped with exit code {returncode} before the check finished"
    return (f"{slot_id}: the grader's process running your code {why}, so the check could not "
            f"finish; a function must return its result: do not call sys.exit(), os._exit() "
            f"or kill the process")


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


# --------------------------------------------------------------------------- child side

def _child_main() -> None:  # pragma: no cover - runs in the subprocess (covered by tests)
    """Entry point of ``python -I -c 'import grader.sandbox as s; s._child_main()'``."""
    # Bind everything the verdict needs before any student code runs.
    _dumps, _replace, _open, _exit, _getpid = json.dumps, os.replace, open, os._exit, os.getpid
    request = json.loads(sys.stdin.buffer.read().decode())
    nonce = request["nonce"]
    verdict_path = request["verdict_path"]
    slot_id = request["slot_id"]

    def write(verdict: Verdict) -> None:
        text = _dumps({"nonce": nonce, "verdict": verdict.to_dict()})
        tmp = f"{verdict_path}.tmp{_getpid()}"
        with _open(tmp, "w") as f:
            f.write(text)
        _replace(tmp, verdict_path)

    try:
        sys.stdin.close()
        os.close(0)
    except OSError:
        pass
    limit = request.get("memory_limit")
    if limit:
        try:
            import resource
            resource.setrlimit(resource.RLIMIT_AS, (int(limit), int(limit)))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        except (ImportError, ValueError, OSError):
            pass

    from grader.checks import get_check, run_in_process
    from grader.checks.helpers import describe_exception
    try:
        chk = get_check(slot_id)
    except KeyError as e:
        write(Verdict(slot_id, False, f"grader error: {e.args[0]}", 0.0))
        _exit(0)
    # Import mini before the student's code can do anything about it.
    try:
        import mini  # noqa: F401
        import numpy  # noqa: F401
    except Exception:
        pass
    payload_path = request["payload_path"]
    try:
        import cloudpickle
        with _open(payload_path, "rb") as f:
            data = f.read()
        os.unlink(payload_path)
        student_fn = cloudpickle.loads(data)
    except BaseException as e:  # noqa: BLE001
        write(Verdict(slot_id, False,
                      f"{slot_id}: the grader could not load your function in a fresh Python "
                      f"({describe_exception(e)}); define everything your function uses in the "
                      f"notebook and import only installed packages", 0.0, chk.points))
        _exit(0)
    verdict = run_in_process(slot_id, student_fn)
    write(verdict)
    _exit(0)
