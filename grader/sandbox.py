"""One launcher for every piece of student code: a bubblewrap sandbox on Linux.

Everything a student wrote -- the autograde kernel, the hidden-check worker, anything they
start -- is run through :meth:`Sandbox.launch`::

    box = Sandbox.detect()                      # bubblewrap, or SandboxUnavailable
    proc = box.launch([box.python, "-I", "-c", "print(1)"], scratch=tmp,
                      readonly={student_mini: "mini"}, limits=Limits(memory=2 * 2**30))
    proc.wait(timeout=60)
    proc.kill()                                 # ends every process it started

What the sandbox shows (bubblewrap, ``--unshare-all``):

- read only: the interpreter's base installation, the virtual environment (at
  ``/opt/venv``, so no path inside names the repository or the course), ``/usr``, ``/lib*``,
  ``/bin``, and the paths the caller names (the released student copy of ``mini`` for the
  chapter, the worker package); an editable install of this project and any installed copy of
  ``mini`` or ``grader`` in the environment are hidden, so neither the instructor's ``mini`` nor
  the grader's checks can be imported;
- writable: the scratch folder, at ``/grading`` (the working directory), and ``/tmp``
  (memory, counted in the sandbox's limit); the rest of the file tree is read-only;
- nothing else: no ``/etc``, no home, no course folder, no network, its own PID namespace
  (``/proc`` shows only the sandbox), a new session (no controlling terminal), no
  capabilities, no nested user namespaces, user ``nobody``, and a fresh environment
  (``--clearenv``: only the variables :func:`base_env` and the caller set).

Limits: memory and process count for the sandbox as a whole through a cgroup when one is
writable (cgroup v1 ``memory`` + ``pids`` controllers, or cgroup v2); otherwise
``RLIMIT_AS`` per process (and ``RLIMIT_NPROC``, which does not bind a root grader), and
:attr:`Sandbox.limits_note` says so.  Wall-clock budgets are the caller's
(:meth:`SandboxProcess.wait` with a timeout, then :meth:`SandboxProcess.kill`).

Killing: ``bwrap --die-with-parent`` plus an explicit ``SIGKILL`` of the namespace's init
end every process inside, double-forked ``setsid`` ones included (when a PID namespace's init
dies, the kernel kills the rest); with a cgroup every process left in it is killed as well.
If the grading process itself dies, ``--die-with-parent`` takes the sandbox with it.

Where bubblewrap is missing or cannot create namespaces, :meth:`Sandbox.detect` raises
:class:`SandboxUnavailable` naming what was found (Docker or Podman are detected but not
used: see ``grader/README.md``); ``Sandbox.none()`` runs the same commands unconfined (a new
session, the limits above, nothing hidden) for ``mini-course check`` and for an instructor
who passes ``--no-sandbox``.
"""
from __future__ import annotations

import functools
import json
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Limits", "Sandbox", "SandboxProcess", "SandboxUnavailable", "parse_memory",
           "base_env", "INSIDE_SCRATCH", "INSIDE_VENV", "find_containers"]

INSIDE_SCRATCH = "/grading"
INSIDE_VENV = "/opt/venv"
_CGROUP_PREFIX = "mini-grader"


class SandboxUnavailable(RuntimeError):
    """No way to confine student code on this machine; the message says what to do."""


def parse_memory(text: str | int | None) -> int | None:
    """``"4G"``, ``"512M"``, ``"1073741824"`` -> bytes; ``"0"``/``"none"``/None -> None."""
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


@dataclass(frozen=True)
class Limits:
    """Limits of one sandbox as a whole: ``memory`` in bytes, ``procs`` processes and
    threads, ``wall`` seconds (the caller's budget; :meth:`SandboxProcess.wait` uses it)."""
    memory: int | None = 4 * 2**30
    procs: int | None = 512
    wall: float | None = None


def base_env(home: str = "/tmp") -> dict[str, str]:
    """The environment of every sandboxed process, before the caller's additions: nothing
    from the grader's environment (no grading variables, no paths naming the course)."""
    threads = str(max(1, min(4, os.cpu_count() or 1)))
    return {
        "PATH": f"{INSIDE_VENV}/bin:/usr/local/bin:/usr/bin:/bin",
        "HOME": home, "TMPDIR": "/tmp", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
        "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1",
        "MPLBACKEND": "Agg", "MPLCONFIGDIR": "/tmp/.matplotlib",
        "IPYTHONDIR": "/tmp/.ipython", "JUPYTER_RUNTIME_DIR": "/tmp/.jupyter",
        "JUPYTER_PLATFORM_DIRS": "1", "MINI_NO_WIDGETS": "1",
        "OMP_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
    }


# --------------------------------------------------------------------------- cgroups

class _Cgroup:
    """A memory + pids cgroup for one sandbox (v1: two controllers; v2: one directory)."""

    def __init__(self, dirs: list[Path], version: int):
        self.dirs = dirs
        self.version = version

    @classmethod
    def create(cls, limits: Limits) -> "_Cgroup | None":
        """A fresh cgroup with ``limits``, or None where no cgroup is writable."""
        root = Path("/sys/fs/cgroup")
        name = f"{_CGROUP_PREFIX}-{os.getpid()}-{secrets.token_hex(4)}"
        made: list[Path] = []
        try:
            if (root / "memory").is_dir() and (root / "pids").is_dir():   # v1
                for ctl in ("memory", "pids"):
                    parent = root / ctl / _CGROUP_PREFIX
                    parent.mkdir(exist_ok=True)
                    (parent / name).mkdir()
                    made.append(parent / name)
                if limits.memory:
                    (made[0] / "memory.limit_in_bytes").write_text(str(int(limits.memory)))
                    try:  # no swap beyond the limit, where swap accounting exists
                        (made[0] / "memory.memsw.limit_in_bytes").write_text(str(int(limits.memory)))
                    except OSError:
                        pass
                if limits.procs:
                    (made[1] / "pids.max").write_text(str(int(limits.procs)))
                return cls(made, 1)
            if (root / "cgroup.controllers").exists():                      # v2
                mine = Path("/sys/fs/cgroup" + _own_v2_cgroup())
                parent = (mine.parent if mine != root else root) / _CGROUP_PREFIX
                parent.mkdir(exist_ok=True)
                try:
                    (parent / "cgroup.subtree_control").write_text("+memory +pids")
                except OSError:
                    pass
                (parent / name).mkdir()
                made.append(parent / name)
                if limits.memory:
                    (made[0] / "memory.max").write_text(str(int(limits.memory)))
                    try:
                        (made[0] / "memory.swap.max").write_text("0")
                    except OSError:
                        pass
                if limits.procs:
                    (made[0] / "pids.max").write_text(str(int(limits.procs)))
                return cls(made, 2)
        except OSError:
            cls(made, 1).remove()
        return None

    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    def pids(self) -> set[int]:
        out: set[int] = set()
        for d in self.dirs:
            try:
                out.update(int(x) for x in (d / "cgroup.procs").read_text().split())
            except (OSError, ValueError):
                pass
        return out

    def oom_killed(self) -> bool:
        try:
            if self.version == 1:
                text = (self.dirs[0] / "memory.oom_control").read_text()
                for line in text.splitlines():
                    if line.startswith("oom_kill "):
                        return int(line.split()[1]) > 0
                return int((self.dirs[0] / "memory.failcnt").read_text()) > 0
            text = (self.dirs[0] / "memory.events").read_text()
            for line in text.splitlines():
                key, _, value = line.partition(" ")
                if key in ("oom_kill", "oom_group_kill") and int(value) > 0:
                    return True
        except (OSError, ValueError, IndexError):
            pass
        return False

    def kill_all(self) -> None:
        for _ in range(100):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.01)

    def remove(self) -> None:
        for d in self.dirs:
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


def _own_v2_cgroup() -> str:
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                return line[3:].strip()
    except OSError:
        pass
    return "/"


@functools.lru_cache(maxsize=None)
def _cgroups_writable() -> bool:
    cg = _Cgroup.create(Limits(memory=2**30, procs=64))
    if cg is None:
        return False
    cg.remove()
    return True


# --------------------------------------------------------------------------- the process

class SandboxProcess:
    """A process started by :meth:`Sandbox.launch`; :meth:`kill` ends everything it
    started.  ``popen`` is the underlying :class:`subprocess.Popen` (its pipes too)."""

    def __init__(self, popen: subprocess.Popen, cgroup: _Cgroup | None, init_pid: int | None,
                 limits: Limits, confined: bool):
        self.popen = popen
        self.cgroup = cgroup
        self.init_pid = init_pid
        self.limits = limits
        self.confined = confined
        self.started = time.monotonic()
        self._closed = False
        self._oom = False

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    def poll(self) -> int | None:
        return self.popen.poll()

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the launched command; ``None`` if it is still running after ``timeout``
        seconds (default: what is left of ``limits.wall``, else forever)."""
        if timeout is None and self.limits.wall is not None:
            timeout = max(0.0, self.limits.wall - (time.monotonic() - self.started))
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def memory_exceeded(self) -> bool:
        """True when the sandbox hit its memory limit (the kernel killed something in it);
        still answers after :meth:`kill`."""
        if not self._closed and self.cgroup is not None and self.cgroup.oom_killed():
            self._oom = True
        return self._oom

    def kill(self) -> None:
        """SIGKILL everything the launch started (idempotent); releases the cgroup."""
        if self._closed:
            return
        for pid in (self.init_pid, self.popen.pid):
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        if not self.confined:
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError, OSError):
                pass
        if self.cgroup is not None:
            self.memory_exceeded()
            self.cgroup.kill_all()
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass
        if self.cgroup is not None:
            self.memory_exceeded()
            self.cgroup.kill_all()
            self.cgroup.remove()
        self._closed = True

    close = kill

    def __enter__(self) -> "SandboxProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.kill()


# --------------------------------------------------------------------------- the sandbox

@dataclass
class Sandbox:
    """How student code is confined on this machine (see the module docstring).

    ``kind`` is ``"bwrap"`` or ``"none"``.  ``python`` is the interpreter's path as the
    launched commands see it; :meth:`scratch_path` the scratch folder's."""
    kind: str
    bwrap: str | None = None
    venv: Path = field(default_factory=lambda: Path(sys.prefix))
    base_prefix: Path = field(default_factory=lambda: Path(sys.base_prefix))
    use_cgroups: bool = True

    # ------------------------------------------------------------------ construction
    @classmethod
    def detect(cls, *, allow_none: bool = False) -> "Sandbox":
        """bubblewrap if it works here; else ``Sandbox.none()`` when ``allow_none``; else
        :class:`SandboxUnavailable` saying what was found and what to do."""
        bw = shutil.which("bwrap")
        problem = ""
        if bw:
            problem = _probe_bwrap(bw)
            if not problem:
                return cls("bwrap", bwrap=bw)
        if allow_none:
            return cls.none()
        found = find_containers()
        lines = []
        if bw:
            lines.append(f"bubblewrap ({bw}) is installed but cannot create a sandbox here: "
                         f"{problem}")
        else:
            lines.append("bubblewrap (bwrap) is not installed: on Debian/Ubuntu `sudo apt-get "
                         "install bubblewrap`, on Fedora `sudo dnf install bubblewrap`, on Arch "
                         "`sudo pacman -S bubblewrap`")
        if found:
            lines.append(f"found {', '.join(found)}: mini-course does not run student code in "
                         f"containers itself; run mini-course inside a Linux container or VM "
                         f"that has bubblewrap (see grader/README.md, 'Grading on macOS or "
                         f"Windows')")
        lines.append("or grade without a sandbox with --no-sandbox: student code then runs "
                     "with your rights and can read and change everything you can")
        raise SandboxUnavailable("\n".join(lines))

    @classmethod
    def none(cls) -> "Sandbox":
        """No confinement: same commands, limits, fresh environment and session."""
        return cls("none")

    @property
    def confined(self) -> bool:
        return self.kind == "bwrap"

    @property
    def python(self) -> str:
        """The interpreter as launched commands see it."""
        if self.confined:
            return f"{INSIDE_VENV}/bin/python"
        return str(Path(sys.prefix) / "bin" / "python") if sys.prefix != sys.base_prefix \
            else sys.executable

    def scratch_path(self, scratch: Path) -> str:
        return INSIDE_SCRATCH if self.confined else str(Path(scratch).resolve())

    @property
    def limits_note(self) -> str:
        """How the limits are enforced here, in words."""
        if self.use_cgroups and _cgroups_writable():
            return "memory and process limits apply to each sandbox as a whole (cgroup)"
        return ("no writable cgroup: the memory limit applies to each process (RLIMIT_AS), "
                "so several processes together may use more; the process limit "
                "(RLIMIT_NPROC) does not bind when grading as root")

    # ------------------------------------------------------------------ launching
    def launch(self, argv: list[str], *, scratch: Path,
               readonly: dict[str | Path, str] | None = None,
               writable: dict[str | Path, str] | None = None,
               cwd: str | None = None, env: dict[str, str] | None = None,
               limits: Limits = Limits(),
               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
               pass_fds: tuple[int, ...] = ()) -> SandboxProcess:
        """Start ``argv`` confined.  ``scratch`` (a host folder) is the one writable place,
        ``/grading`` inside; ``readonly`` maps host paths to paths inside (relative ones are
        under the scratch folder); ``writable`` likewise for a few more writable folders (a
        build cache shared by one submission's sandboxes; :meth:`inside` names them for
        ``env``).  ``env`` is added to :func:`base_env`; ``cwd`` defaults to the scratch
        folder.  Without bubblewrap (``kind == "none"``) the read-only entries under the
        scratch folder become symlinks and the writable ones are used where they are."""
        scratch = Path(scratch).resolve()
        scratch.mkdir(parents=True, exist_ok=True)
        full_env = base_env()
        full_env.update(env or {})
        cgroup = _Cgroup.create(limits) if self.use_cgroups else None
        prefix: list[str] = []
        if cgroup is not None:
            writes = " && ".join(f"echo $$ > {f}" for f in cgroup.procs_files())
            prefix = ["/bin/sh", "-c", f'{writes} && exec "$@"', "sh"]
        elif limits.memory or limits.procs:
            prefix = [sys.executable, "-I", "-c", _RLIMIT_WRAPPER,
                      str(limits.memory or 0), str(limits.procs or 0)]
        if self.confined:
            info_r, info_w = os.pipe()
            try:
                cmd = self._bwrap_argv(argv, scratch, readonly or {}, writable or {}, cwd,
                                       full_env, info_w)
                popen = subprocess.Popen(prefix + cmd, stdin=stdin, stdout=stdout, stderr=stderr,
                                         pass_fds=tuple(pass_fds) + (info_w,), close_fds=True,
                                         env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                                         cwd="/")
            except BaseException:
                os.close(info_r)
                if cgroup is not None:
                    cgroup.remove()
                raise
            finally:
                os.close(info_w)
            init_pid = _read_info(info_r, popen)
            return SandboxProcess(popen, cgroup, init_pid, limits, True)
        for host, inside in (readonly or {}).items():
            target = Path(inside) if Path(inside).is_absolute() else scratch / inside
            if not target.exists() and not target.is_symlink():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.symlink_to(Path(host).resolve())
        run_env = dict(full_env)
        run_env["PATH"] = f"{Path(self.python).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"
        run_env["HOME"] = str(scratch)
        for key in ("MPLCONFIGDIR", "IPYTHONDIR", "JUPYTER_RUNTIME_DIR", "TMPDIR"):
            run_env[key] = str(scratch / ".tmp" / key.lower())
        popen = subprocess.Popen(prefix + list(argv), stdin=stdin, stdout=stdout, stderr=stderr,
                                 pass_fds=tuple(pass_fds), close_fds=True, env=run_env,
                                 cwd=cwd or str(scratch), start_new_session=True)
        return SandboxProcess(popen, cgroup, None, limits, False)

    def inside(self, host: str | Path, inside: str) -> str:
        """The path a launched command uses for a ``writable`` (or ``readonly``) entry."""
        return inside if self.confined else str(Path(host).resolve())

    def _bwrap_argv(self, argv, scratch: Path, readonly: dict, writable: dict, cwd, env,
                    info_fd: int) -> list[str]:
        venv, base = Path(self.venv).resolve(), Path(self.base_prefix).resolve()
        cmd = [self.bwrap or "bwrap", "--unshare-all", "--unshare-user", "--disable-userns",
               "--die-with-parent", "--new-session", "--uid", "65534", "--gid", "65534",
               "--hostname", "sandbox", "--info-fd", str(info_fd), "--clearenv",
               "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
        # System directories: read-only, as they are (merged-/usr symlinks stay symlinks).
        for d in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
            p = Path(d)
            if p.is_symlink():
                cmd += ["--symlink", os.readlink(d), d]
            elif p.is_dir():
                cmd += ["--ro-bind", d, d]
        for f in ("/etc/ld.so.cache", "/etc/alternatives"):
            if Path(f).exists():
                cmd += ["--ro-bind", f, f]
        if base != venv:
            cmd += ["--ro-bind", str(base), str(base)]
        cmd += ["--ro-bind", str(venv), INSIDE_VENV]
        for hidden in _hidden_in_venv(venv):
            rel = hidden.relative_to(venv)
            if hidden.is_dir():
                cmd += ["--tmpfs", f"{INSIDE_VENV}/{rel}"]
            else:
                cmd += ["--ro-bind", "/dev/null", f"{INSIDE_VENV}/{rel}"]
        cmd += ["--bind", str(scratch), INSIDE_SCRATCH]
        for host, inside in readonly.items():
            inside = inside if str(inside).startswith("/") else f"{INSIDE_SCRATCH}/{inside}"
            cmd += ["--ro-bind", str(Path(host).resolve()), str(inside)]
        for host, inside in writable.items():
            inside = inside if str(inside).startswith("/") else f"{INSIDE_SCRATCH}/{inside}"
            cmd += ["--bind", str(Path(host).resolve()), str(inside)]
        cmd += ["--remount-ro", "/", "--chdir", cwd or INSIDE_SCRATCH]
        for key, value in env.items():
            cmd += ["--setenv", key, value]
        return cmd + ["--"] + list(argv)


_RLIMIT_WRAPPER = (
    "import os, resource, sys\n"
    "mem, procs = int(sys.argv[1]), int(sys.argv[2])\n"
    "if mem: resource.setrlimit(resource.RLIMIT_AS, (mem, mem))\n"
    "if procs:\n"
    "    try: resource.setrlimit(resource.RLIMIT_NPROC, (procs, procs))\n"
    "    except (ValueError, OSError): pass\n"
    "os.execvp(sys.argv[3], sys.argv[3:])\n")


def _read_info(fd: int, popen: subprocess.Popen, timeout: float = 30.0) -> int | None:
    """The host pid of the sandbox's init, from bwrap's ``--info-fd`` JSON."""
    data = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                chunk = os.read(fd, 4096)
                if not chunk:
                    break
                data += chunk
                try:
                    return int(json.loads(data.decode())["child-pid"])
                except (ValueError, KeyError):
                    continue
            elif popen.poll() is not None:
                break
    finally:
        os.close(fd)
    return None


def _hidden_in_venv(venv: Path) -> list[Path]:
    """What the sandbox must not see in the environment: an editable install of this project
    (its ``.pth``/finder point at the repository) and installed copies of ``mini``/``grader``
    (the instructor's full ``mini`` holds every reference solution)."""
    here = Path(__file__).resolve().parent.parent  # the folder holding grader/ and mini/
    out = []
    for site in venv.glob("lib*/python*/site-packages"):
        for p in site.iterdir():
            name = p.name
            if name in ("mini", "grader") and p.is_dir():
                out.append(p)
            elif p.suffix == ".pth" or (name.startswith("__editable__") and p.suffix == ".py"):
                try:
                    text = p.read_text(errors="replace")
                except OSError:
                    continue
                if str(here) in text or "mini_course" in name or "mini-course" in name:
                    out.append(p)
    return out


@functools.lru_cache(maxsize=None)
def _probe_bwrap(bwrap: str) -> str:
    """'' when bubblewrap can build our sandbox here, else why not."""
    box = Sandbox("bwrap", bwrap=bwrap, use_cgroups=False)
    import tempfile
    with tempfile.TemporaryDirectory(prefix="mini-probe-") as tmp:
        try:
            proc = box.launch(["/bin/sh", "-c", "exit 0"], scratch=Path(tmp),
                              stderr=subprocess.PIPE, limits=Limits(memory=None, procs=None))
        except OSError as e:
            return f"{type(e).__name__}: {e}"
        try:
            rc = proc.wait(timeout=30)
            err = proc.popen.stderr.read().decode(errors="replace").strip() if proc.popen.stderr else ""
        finally:
            proc.kill()
    if rc == 0:
        return ""
    hint = ""
    if "ermission" in err or "not permitted" in err or "userns" in err:
        hint = (" (user namespaces may be disabled: `sysctl kernel.unprivileged_userns_clone=1`, "
                "or on Ubuntu 24.04+ an AppArmor profile for bwrap)")
    return (err.splitlines()[-1] if err else f"exit status {rc}") + hint


def find_containers() -> list[str]:
    """Docker or Podman engines that answer (detected, not used: see the module docstring)."""
    out = []
    for tool in ("docker", "podman"):
        path = shutil.which(tool)
        if not path:
            continue
        try:
            ok = subprocess.run([path, "info"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, timeout=10).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        out.append(f"{tool} ({path}{'' if ok else ', engine not running'})")
    return out
