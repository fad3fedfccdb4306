"""Compiling CUDA C++: with nvcc where a GPU can run it, else against mini's emulator.

``mini.utils.cpp_extension.load_inline(..., cuda_sources=...)`` asks this module for a
*build plan*: the translation unit to compile and the commands that compile it.

- **nvcc** (a working ``nvcc`` and an NVIDIA driver with at least one GPU): the source is
  compiled as it is, for the GPU of this machine.
- **emulator** (everywhere else, or when ``MINI_CUDA_EMULATE=1``): the source is rewritten
  (:mod:`mini.backends.cuda.rewrite`), compiled by the host C++ compiler against
  ``emulator/mini_cuda_emulator.h`` and linked to the emulator's runtime library, which
  is built once per machine and cached like every extension.  With ``sanitize=True``
  (the default) the kernels are compiled with ``-fsanitize=thread`` so that every load
  and store reaches the emulator's checks (see the header).

Everything is cached by a hash of the sources, the flags and the toolchain.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import fcntl
import functools
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from mini.utils import cpp_extension as _cpp

__all__ = ["EMULATOR_DIR", "gpu_available", "gpu_reason", "nvcc_path", "use_emulator", "emulated",
           "runtime_library", "BuildPlan", "plan_cuda_build", "CUDA_FILE", "EMULATE_ENV", "RUNTIME_DIR_ENV"]

EMULATOR_DIR = Path(__file__).resolve().parent / "emulator"
RUNTIME_SOURCES = ("runtime/runtime.h", "runtime/memory.cpp", "runtime/scheduler.cpp",
                   "runtime/checks.cpp", "runtime/api.cpp", "runtime/fiber.cpp",
                   "mini_cuda_emulator.h")
#: The file name compiler messages and reports use for ``cuda_sources``.
CUDA_FILE = "<cuda>"
#: Set to 1 to use the emulator even where a GPU is present.
EMULATE_ENV = "MINI_CUDA_EMULATE"
_RUNTIME_VERSION = "1"


# --------------------------------------------------------------------------- detection

def nvcc_path() -> str | None:
    """``nvcc`` from ``$CUDA_HOME``/``$CUDA_PATH``, PATH, or /usr/local/cuda; None if absent."""
    for env in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(env)
        if root and (Path(root) / "bin" / "nvcc").is_file():
            return str(Path(root) / "bin" / "nvcc")
    found = shutil.which("nvcc")
    if found:
        return found
    default = Path("/usr/local/cuda/bin/nvcc")
    return str(default) if default.is_file() else None


@functools.lru_cache(maxsize=1)
def _driver_devices() -> tuple[int, str]:
    """(number of GPUs the NVIDIA driver sees, why none) through the driver API."""
    names = ["libcuda.so.1", "libcuda.so", ctypes.util.find_library("cuda") or ""]
    if sys.platform == "win32":
        names = ["nvcuda.dll"]
    lib = None
    for name in names:
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    if lib is None:
        return 0, "no NVIDIA driver (libcuda) is installed"
    if lib.cuInit(0) != 0:
        return 0, "the NVIDIA driver did not initialise (cuInit failed)"
    count = ctypes.c_int(0)
    if lib.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
        return 0, "the NVIDIA driver sees no GPU"
    return count.value, ""


def gpu_available() -> bool:
    """True when CUDA code can run on a real GPU here: nvcc and a driver with a GPU."""
    return nvcc_path() is not None and _driver_devices()[0] > 0


def gpu_reason() -> str:
    """Why :func:`gpu_available` is False ("" when it is True)."""
    if nvcc_path() is None:
        return "nvcc (the CUDA compiler) is not installed"
    return _driver_devices()[1]


@contextlib.contextmanager
def emulated(on: bool = True):
    """Inside the block, CUDA sources are built for the emulator (``on``), or for nvcc where
    a GPU can run them (``on=False``): ``MINI_CUDA_EMULATE`` set, and restored after."""
    old = os.environ.get(EMULATE_ENV)
    os.environ[EMULATE_ENV] = "1" if on else "0"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(EMULATE_ENV, None)
        else:
            os.environ[EMULATE_ENV] = old


def use_emulator() -> bool:
    """Whether CUDA sources are built for the emulator (no GPU, or ``MINI_CUDA_EMULATE=1``)."""
    if os.environ.get(EMULATE_ENV, "") not in ("", "0"):
        return True
    return not gpu_available()


# --------------------------------------------------------------------------- the runtime

def _runtime_hash(cxx: str) -> str:
    h = hashlib.sha256()
    for rel in RUNTIME_SOURCES:
        h.update(rel.encode())
        h.update((EMULATOR_DIR / rel).read_bytes())
    h.update("\0".join([_RUNTIME_VERSION, cxx, _cpp._compiler_id(cxx), sys.platform]).encode())
    return h.hexdigest()[:16]


#: A folder holding a prebuilt runtime (read-only is fine), searched before the cache:
#: a grading sandbox can then skip building it (``runtime_library()`` prints nothing and
#: returns the path to copy there).
RUNTIME_DIR_ENV = "MINI_CUDA_RUNTIME_DIR"


@functools.lru_cache(maxsize=None)
def _runtime_library(cxx: str) -> Path:
    digest = _runtime_hash(cxx)
    # the hash is in the file name (the soname): a module never binds to another build of
    # the runtime that this process loaded earlier
    name = f"libmini_cuda_emulator_{digest}" + (".dylib" if sys.platform == "darwin" else ".so")
    prebuilt = os.environ.get(RUNTIME_DIR_ENV)
    if prebuilt and (Path(prebuilt) / name).is_file():
        return Path(prebuilt) / name
    folder = _cpp.cache_dir() / f"mini_cuda_runtime_{digest}"
    lib = folder / name
    if lib.exists():
        return lib
    if sys.platform == "win32":
        raise RuntimeError("mini's CUDA emulator needs a POSIX system (Linux or macOS); on Windows use WSL")
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".mini_cuda_runtime_{digest}.lock", "w") as lockf:
        fcntl.flock(lockf, fcntl.LOCK_EX)
        try:
            if not lib.exists():
                tmp = folder / f".{lib.name}.{os.getpid()}.tmp"
                sources = [str(EMULATOR_DIR / s) for s in RUNTIME_SOURCES if s.endswith(".cpp")]
                cmd = (shlex.split(cxx) + ["-O2", "-g", "-std=c++17", "-fPIC", "-shared"] + sources
                       + ["-o", str(tmp)]
                       + (["-Wl,-install_name,@rpath/" + lib.name] if sys.platform == "darwin"
                          else [f"-Wl,-soname,{lib.name}"]))
                r = subprocess.run(cmd, capture_output=True, text=True)
                (folder / "build.log").write_text((r.stdout or "") + (r.stderr or ""))
                if r.returncode != 0:
                    tmp.unlink(missing_ok=True)
                    raise RuntimeError("could not build mini's CUDA emulator runtime:\n"
                                       + "\n".join(((r.stderr or "") + (r.stdout or "")).splitlines()[-30:]))
                os.replace(tmp, lib)
        finally:
            fcntl.flock(lockf, fcntl.LOCK_UN)
    return lib


def runtime_library() -> Path:
    """The emulator's runtime library, built on first use (about 10 s) and cached."""
    return _runtime_library(_cpp.compiler())


# --------------------------------------------------------------------------- build plans

@dataclass
class BuildPlan:
    """What to compile (``source``) and how (``commands``, run in order in the build
    folder; ``{src}``, ``{obj}`` and ``{out}`` are replaced by paths)."""
    mode: str                         # "emulator" or "nvcc"
    source: str
    suffix: str                       # of the source file: ".cpp" or ".cu"
    commands: list[list[str]]
    key: str                          # what else the cache key depends on
    sources: dict[str, list[str]] = field(default_factory=dict)   # file label -> lines
    runtime: Path | None = None
    # "pybind11", or "plain": every function takes and returns plain numbers and is bound
    # with ctypes (mini.backends.cuda.plain), no pybind11 to compile
    binding: str = "pybind11"
    signatures: dict = field(default_factory=dict)


_PYBIND11 = """\
#include <pybind11/pybind11.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>
"""
_PREAMBLE = """\
#include <cstdint>
#include <cstddef>
#include <cmath>
#include <vector>
#include <algorithm>
#include <string>
#include <stdexcept>
"""


def _tsan_flags(cxx: str) -> list[str]:
    if "clang" in _cpp._compiler_id(cxx).lower():
        return ["-fsanitize=thread", "-mllvm", "-tsan-instrument-func-entry-exit=false"]
    return ["-fsanitize=thread", "--param", "tsan-instrument-func-entry-exit=0"]


def plan_cuda_build(name: str, cpp_sources: str, cuda_sources: str, bindings: str,
                    cflags: list[str], cuda_cflags: list[str], ldflags: list[str],
                    sanitize: bool = True, emulate: bool | None = None,
                    functions=None) -> BuildPlan:
    """The plan for a module whose ``cuda_sources`` hold kernels (and host code) and whose
    ``cpp_sources`` hold more host code or declarations; ``bindings`` is the
    ``PYBIND11_MODULE`` block.  When every one of ``functions`` takes and returns plain
    numbers (and nothing uses pybind11), the module is bound with ctypes instead
    (:mod:`mini.backends.cuda.plain`): no pybind11 headers, a build about ten times faster."""
    from mini.backends.cuda import plain
    from mini.backends.cuda.rewrite import rewrite_cuda, RewriteError

    emulate = use_emulator() if emulate is None else emulate
    labels = {_cpp.CELL_FILE: cpp_sources.splitlines(), CUDA_FILE: cuda_sources.splitlines()}
    signatures = plain.plain_signatures([cpp_sources, cuda_sources], list(functions or []))
    if signatures:
        binding, preamble, bindings = "plain", _PREAMBLE, plain.thunks(signatures)
    else:
        binding, preamble, signatures = "pybind11", _PYBIND11 + _PREAMBLE + "namespace py = pybind11;\n", {}
    if emulate:
        cxx = _cpp.compiler()
        runtime = runtime_library()
        try:
            kernels = rewrite_cuda(cuda_sources)
        except RewriteError as e:
            issue = _cpp.CompileIssue(e.line, 0, "error", str(e).split(": ", 1)[-1],
                                      labels[CUDA_FILE][e.line - 1] if 0 < e.line <= len(labels[CUDA_FILE]) else "",
                                      True, CUDA_FILE)
            raise _cpp.CompileError(name, [issue], str(e), []) from None
        source = (preamble + '#include "mini_cuda_emulator.h"\n'
                  + f'#line 1 "{_cpp.CELL_FILE}"\n' + cpp_sources + "\n"
                  + f'#line 1 "{CUDA_FILE}"\n' + kernels + "\n"
                  + '#line 1 "<bindings>"\n' + bindings)
        includes = [f"-I{EMULATOR_DIR}", f"-I{EMULATOR_DIR / 'include'}"] + (
            _cpp._includes() if binding == "pybind11" else [])
        compile_flags = (["-std=c++17", "-fPIC", "-fvisibility=hidden", "-g1"]
                         + (["-O1", "-DMINI_CUDA_CHECKS"] + _tsan_flags(cxx) if sanitize else ["-O2"]))
        compile_cmd = (shlex.split(cxx) + compile_flags + includes + cflags + cuda_cflags
                       + ["-c", "{src}", "-o", "{obj}"])
        link_cmd = (shlex.split(cxx) + ["-shared", "{obj}", "-o", "{out}", str(runtime),
                                        f"-Wl,-rpath,{runtime.parent}"] + ldflags
                    + (["-undefined", "dynamic_lookup"] if sys.platform == "darwin" else []))
        key = "\0".join(["emulator", str(sanitize), str(runtime), cxx, _cpp._compiler_id(cxx), binding])
        return BuildPlan("emulator", source, ".cpp", [compile_cmd, link_cmd], key, labels, runtime,
                         binding, signatures)

    nvcc = nvcc_path()
    source = (preamble + f'#line 1 "{_cpp.CELL_FILE}"\n' + cpp_sources + "\n"
              + f'#line 1 "{CUDA_FILE}"\n' + cuda_sources + "\n"
              + '#line 1 "<bindings>"\n' + bindings)
    cmd = ([nvcc, "-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC,-fvisibility=hidden",
            "-arch=native"] + (_cpp._includes() if binding == "pybind11" else []) + cflags + cuda_cflags
           + ["{src}", "-o", "{out}", "-lcudart"] + ldflags)
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    key = "\0".join(["nvcc", nvcc, version[-1] if version else "", binding])
    return BuildPlan("nvcc", source, ".cu", [cmd], key, labels, None, binding, signatures)
