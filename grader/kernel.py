"""A Jupyter kernel inside the sandbox, for nbclient (and so for nbgrader's Execute).

:class:`SandboxKernelManager` is a ``jupyter_client`` kernel manager whose kernel runs in
:class:`grader.sandbox.Sandbox`: the connection uses the IPC transport (Unix sockets in a
folder of the scratch directory, so the sandbox needs no network), the kernel is started as
``python -m ipykernel_launcher -f /grading/.kernel/kernel.json`` through
:meth:`Sandbox.launch`, and killing the kernel kills everything it started.  The client's
copy of the connection file stays outside the sandbox.  Interrupts are delivered to the
kernel process inside the sandbox's PID namespace (the kernel runs in a new session, so a
process-group signal from outside would not reach it).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning.local_provisioner import LocalProvisioner

from grader.sandbox import Limits, Sandbox, SandboxProcess

__all__ = ["SandboxKernelManager", "SandboxProvisioner"]


class SandboxProvisioner(LocalProvisioner):
    """Launches the kernel with :meth:`Sandbox.launch` (see the module docstring)."""

    sandbox_process: SandboxProcess | None = None

    async def launch_kernel(self, cmd: list[str], **kwargs: Any):
        km: SandboxKernelManager = self.parent
        box: Sandbox = km.sandbox
        scratch = Path(km.scratch)
        kdir = scratch / ".kernel"
        kdir.mkdir(parents=True, exist_ok=True)
        info = dict(self.connection_info)
        inside_dir = f"{box.scratch_path(scratch)}/.kernel"
        info["ip"] = f"{inside_dir}/k"
        for key in ("key", "signature_scheme", "transport"):
            if isinstance(info.get(key), bytes):
                info[key] = info[key].decode()
        (kdir / "kernel.json").write_text(json.dumps(info))
        extra = _extra_arguments(cmd, km.connection_file)
        argv = [box.python, "-m", "ipykernel_launcher", "-f", f"{inside_dir}/kernel.json"] + extra
        from grader.workerproc import cache_binds, cuda_runtime_binds
        writable, env = cache_binds(box, km.cache_dir)
        readonly, runtime_env = cuda_runtime_binds(box)
        env.update(runtime_env)
        env.update(km.kernel_env)
        self.sandbox_process = box.launch(argv, scratch=scratch, readonly={**km.readonly, **readonly},
                                          writable=writable, env=env, limits=km.limits,
                                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL)
        self.process = self.sandbox_process.popen
        self.pid = self.process.pid
        self.pgid = None
        self.cwd = str(scratch)
        km.launches += 1
        return self.connection_info

    async def send_signal(self, signum: int) -> None:
        proc = self.sandbox_process
        if proc is None:
            return
        if signum == signal.SIGKILL:
            proc.kill()
            return
        for pid in _kernel_pids(proc):
            try:
                os.kill(pid, signum)
            except (ProcessLookupError, PermissionError):
                pass

    async def kill(self, restart: bool = False) -> None:
        if self.sandbox_process is not None:
            self.sandbox_process.kill()

    async def terminate(self, restart: bool = False) -> None:
        await self.kill(restart)

    async def cleanup(self, restart: bool = False) -> None:
        if self.sandbox_process is not None:
            self.sandbox_process.kill()
            self.parent.memory_events += int(self.sandbox_process.memory_exceeded())
            self.sandbox_process = None
        await super().cleanup(restart)


def _extra_arguments(cmd: list[str], connection_file: str) -> list[str]:
    """The arguments after the connection file in the kernel spec's formatted command."""
    for i, arg in enumerate(cmd):
        if arg == connection_file:
            return [a for a in cmd[i + 1:] if a.startswith("--")]
    return [a for a in cmd if a.startswith("--")]


def _kernel_pids(proc: SandboxProcess) -> list[int]:
    """Host pids of the processes directly under the sandbox's init (the kernel), or the
    launched process itself outside a sandbox."""
    if not proc.confined:
        return [proc.pid]
    init = proc.init_pid
    if not init:
        return []
    try:
        text = Path(f"/proc/{init}/task/{init}/children").read_text()
        return [int(p) for p in text.split()]
    except (OSError, ValueError):
        pass
    out = []
    for d in Path("/proc").iterdir():  # no /children file: scan parents
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == init:
                    out.append(int(d.name))
            except (OSError, ValueError, IndexError):
                continue
    return out


class SandboxKernelManager(AsyncKernelManager):
    """An ``AsyncKernelManager`` whose kernel runs in the sandbox (module docstring).

    ``scratch`` is the sandbox's writable folder (the kernel's working directory),
    ``readonly`` maps host paths to paths inside (the student ``mini``), ``kernel_env`` adds
    to :func:`grader.sandbox.base_env`."""

    def __init__(self, *, sandbox: Sandbox, scratch: Path, readonly: dict | None = None,
                 kernel_env: dict | None = None, limits: Limits = Limits(),
                 cache_dir: Path | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.cache_dir = cache_dir
        self.sandbox = sandbox
        self.scratch = Path(scratch)
        self.readonly = dict(readonly or {})
        self.kernel_env = dict(kernel_env or {})
        self.limits = limits
        self.launches = 0
        self.memory_events = 0
        self.transport = "ipc"
        (self.scratch / ".kernel").mkdir(parents=True, exist_ok=True)
        self.ip = str(self.scratch / ".kernel" / "k")
        self._conn_dir = tempfile.mkdtemp(prefix="mini-kernel-")
        self.connection_file = os.path.join(self._conn_dir, "connection.json")

    async def _async_pre_start_kernel(self, **kw: Any):
        import uuid
        self.kernel_id = self.kernel_id or kw.pop("kernel_id", str(uuid.uuid4()))
        if self.provisioner is None:
            self.provisioner = SandboxProvisioner(kernel_id=self.kernel_id or "sandbox",
                                                  kernel_spec=self.kernel_spec, parent=self)
        kw.pop("env", None)   # the sandbox's environment is built from scratch
        kw.pop("cwd", None)
        return await super()._async_pre_start_kernel(**kw)

    def memory_exceeded(self) -> bool:
        prov = self.provisioner
        proc = getattr(prov, "sandbox_process", None)
        return self.memory_events > 0 or (proc is not None and proc.memory_exceeded())

    def cleanup_connection_dir(self) -> None:
        import shutil
        shutil.rmtree(self._conn_dir, ignore_errors=True)
