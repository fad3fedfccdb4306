"""Compile C++ written in a notebook cell into a Python module: ``load_inline``.

In the spirit of ``torch.utils.cpp_extension.load_inline``::

    from mini.utils.cpp_extension import load_inline

    src = r'''
    double dot(py::array_t<double> a, py::array_t<double> b) {
        const double* x = a.data(); const double* y = b.data();
        double s = 0;
        #pragma omp parallel for reduction(+:s)
        for (int64_t i = 0; i < a.size(); ++i) s += x[i] * y[i];
        return s;
    }
    '''
    ext = load_inline("dot_ext", src, functions=["dot"])
    ext.dot(np.ones(10), np.ones(10))   # 10.0

What it does:

- puts a short preamble in front of your source (``pybind11/pybind11.h``,
  ``pybind11/numpy.h``, ``<cstdint>``, ``<omp.h>`` when OpenMP is there, and
  ``namespace py = pybind11;``) and, after it, the ``PYBIND11_MODULE`` block that binds
  every name in ``functions`` (a list of names, or a dict name -> docstring);
- compiles with ``-O3 -std=c++17 -shared -fPIC`` and pybind11's headers, plus the first
  OpenMP flags that work with the compiler, tried in the same order as ``setup.py``:
  ``-fopenmp`` (gcc, LLVM clang), then ``-Xpreprocessor -fopenmp -lomp`` (Apple clang with
  Homebrew's or conda's libomp).  Without any, it builds serially and says so once:
  ``#pragma omp`` lines are then ignored and everything runs on one thread;
- caches the result under a hash of the sources, the functions, the flags, the compiler
  and the Python version, in ``$MINI_EXTENSIONS_DIR`` or ``~/.cache/mini_extensions``: a
  second call with the same source (in this process or a later one) does not compile;
- on a compile error raises :class:`CompileError`, whose message lists the compiler's
  errors with line numbers of *your* source string (line 1 is its first line) and quotes
  the offending line.

CUDA: ``load_inline(name, cpp_sources, cuda_sources=..., functions=[...])`` compiles CUDA
C++ (kernels, ``<<<grid, block>>>`` launches and the host code around them) with nvcc where
an NVIDIA GPU and driver are present, and otherwise with the C++ compiler against mini's
CUDA emulator, which checks every kernel for races, out-of-bounds and uninitialised
accesses and counts its memory traffic (see ``mini/backends/cuda`` and ``mini.cuda``).
Compiler errors name lines of ``cpp_sources`` (file ``<cell>``) or ``cuda_sources``
(file ``<cuda>``).

Modules are not registered in ``sys.modules``; keep the returned object.  Compiled modules
cannot be pickled: code that must travel to another process (the grader's sandbox) should
carry the source string and call ``load_inline`` again there (a cache hit).
"""
from __future__ import annotations

import contextlib
import ctypes
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Iterable, Mapping, Sequence

try:                     # POSIX: advisory file locks
    import fcntl
except ImportError:      # Windows
    fcntl = None
try:                     # Windows: byte-range locks
    import msvcrt
except ImportError:      # POSIX
    msvcrt = None

__all__ = ["load_inline", "CompileError", "CompileIssue", "cache_dir", "openmp_available",
           "openmp_flags", "compiler", "set_num_threads", "get_max_threads", "DEFAULT_CFLAGS",
           "CELL_FILE", "NO_OPENMP_WARNING"]

#: Flags every build gets (OpenMP's are added when the compiler supports them).
DEFAULT_CFLAGS = ("-O3", "-std=c++17", "-shared", "-fPIC", "-fvisibility=hidden")
#: The file name compiler messages use for the student's source.
CELL_FILE = "<cell>"
NO_OPENMP_WARNING = ("the C++ compiler has no OpenMP support: extensions are built without "
                     "it, `#pragma omp` is ignored and kernels run on one thread")
#: What to do about it on macOS, where Apple's clang has no OpenMP runtime of its own.
MACOS_OPENMP_HINT = ("on macOS: `brew install libomp` (or, with conda, `conda install "
                     "llvm-openmp`), then restart the kernel")
_VERSION = "1"  # bump to invalidate every cached build

_lock = threading.Lock()
_MODULES: dict[str, object] = {}        # build hash -> loaded module (this process)
_COMPILER_ID: dict[str, str] = {}       # compiler -> its --version line
_OPENMP: dict[str, tuple | None] = {}   # compiler -> (compile, link) OpenMP flags, or None
_WARNED = [False]


# --------------------------------------------------------------------------- errors

class CompileIssue:
    """One compiler diagnostic mapped to the student's source."""

    __slots__ = ("line", "column", "kind", "message", "source_line", "in_cell", "file")

    def __init__(self, line, column, kind, message, source_line, in_cell, file=CELL_FILE):
        self.line, self.column, self.kind = line, column, kind
        self.message, self.source_line, self.in_cell = message, source_line, in_cell
        self.file = file

    def __repr__(self) -> str:
        return f"CompileIssue(line={self.line}, {self.kind}: {self.message!r})"


class CompileError(RuntimeError):
    """The C++ did not compile.  ``issues`` holds the diagnostics (line numbers relative to
    the ``cpp_sources`` string), ``log`` the compiler's full output, ``command`` the command."""

    def __init__(self, name: str, issues: list[CompileIssue], log: str, command: list[str]):
        self.name, self.issues, self.log, self.command = name, issues, log, command
        super().__init__(_format_error(name, issues, log))

    @property
    def lines(self) -> list[int]:
        """Line numbers (in your source) that have an error."""
        return [i.line for i in self.issues if i.kind == "error" and i.in_cell]


_DIAG = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+):(?:(?P<col>\d+):)?\s*"
                   r"(?P<kind>fatal error|error|warning|note):\s*(?P<msg>.*)$")
# nvcc's front end: file(line): error: message   (also "error #20-D: ...")
_NVCC_DIAG = re.compile(r'^"?(?P<file>[^(\n"]+)"?\((?P<line>\d+)\):\s*'
                        r"(?P<kind>fatal error|error|warning|remark)(?: #[\w-]+)?:\s*(?P<msg>.*)$")

def _parse_log(log: str, src_lines: list[str], functions: Sequence[str],
               sources: Mapping[str, list[str]] | None = None) -> list[CompileIssue]:
    """Diagnostics of ``log`` mapped to the student's sources: ``sources`` maps a file
    label (``<cell>``, ``<cuda>``) to its lines; by default ``src_lines`` is ``<cell>``."""
    sources = dict(sources) if sources else {CELL_FILE: src_lines}
    issues = []
    for raw in log.splitlines():
        m = _DIAG.match(raw.strip()) or _NVCC_DIAG.match(raw.strip())
        if not m:
            continue
        kind = "error" if m["kind"] == "fatal error" else m["kind"]
        line = int(m["line"])
        col = int(m.groupdict().get("col") or 0)
        label = next((lab for lab in sources if m["file"].endswith(lab)), None)
        in_cell = label is not None
        msg = m["msg"]
        if in_cell:
            lines_of = sources[label]
            text = lines_of[line - 1] if 1 <= line <= len(lines_of) else ""
        else:
            text = ""
            if m["file"].endswith("<bindings>") and kind == "error":
                missing = [f for f in functions if f"'{f}'" in msg or f"‘{f}’" in msg]
                if missing:
                    msg = (f"functions= names {missing[0]!r}, but your source defines no "
                           f"function of that name ({msg})")
        issues.append(CompileIssue(line, col, kind, msg, text, in_cell,
                                   label or os.path.basename(m["file"])))
    return issues


def _format_error(name: str, issues: list[CompileIssue], log: str) -> str:
    errors = [i for i in issues if i.kind == "error"]
    head = f"could not compile C++ extension {name!r}"
    if not errors:
        tail = "\n".join(log.strip().splitlines()[-30:])
        return f"{head}; compiler output:\n{tail}"
    out = [f"{head}: {len(errors)} error{'s' if len(errors) != 1 else ''} "
           f"(line numbers count from the first line of your source)"]
    several = len({i.file for i in errors if i.in_cell}) > 1 or any(
        i.in_cell and i.file != CELL_FILE for i in errors)
    for i in errors[:10]:
        if i.in_cell:
            where = f"{i.file} line {i.line}" if several else f"line {i.line}"
            out.append(f"  {where}, column {i.column}: {i.message}" if i.column else f"  {where}: {i.message}")
            if i.source_line:
                out.append(f"    {i.line:>4} | {i.source_line.rstrip()}")
                if i.column:
                    # caret under the column (tabs kept so the caret lines up)
                    lead = "".join(c if c == "\t" else " " for c in i.source_line[:i.column - 1])
                    out.append(f"         | {lead}^")
        else:
            where = "generated bindings" if i.file == "<bindings>" else f"{i.file}:{i.line}"
            out.append(f"  ({where}) {i.message}")
    if len(errors) > 10:
        out.append(f"  ... and {len(errors) - 10} more errors (see .log)")
    return "\n".join(out)


# --------------------------------------------------------------------------- toolchain

def compiler() -> str:
    """The C++ compiler: ``$CXX``, else the first of c++, g++, clang++ on PATH."""
    env = os.environ.get("CXX")
    if env:
        return env
    for cand in ("c++", "g++", "clang++"):
        if shutil.which(cand):
            return cand
    raise RuntimeError("no C++ compiler found (set $CXX, or install g++ or clang++)")


def _compiler_id(cxx: str) -> str:
    if cxx not in _COMPILER_ID:
        try:
            out = subprocess.run(shlex.split(cxx) + ["--version"], capture_output=True,
                                 text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError) as e:
            raise RuntimeError(f"cannot run the C++ compiler {cxx!r}: {e}") from None
        _COMPILER_ID[cxx] = (out.splitlines() or [cxx])[0]
    return _COMPILER_ID[cxx]


def _libomp_prefixes(platform: str) -> list[str]:
    """Where a libomp that Apple's clang can use may live (Homebrew's is keg-only: not on
    the default search paths)."""
    if platform != "darwin":
        return []
    found = []
    for prefix in (os.environ.get("CONDA_PREFIX"), "/opt/homebrew/opt/libomp",
                   "/usr/local/opt/libomp"):
        if prefix and os.path.isfile(os.path.join(prefix, "include", "omp.h")):
            found.append(prefix)
    return found


def _openmp_candidates(platform: str | None = None) -> list[tuple[list[str], list[str]]]:
    """(compile flags, link flags) to try, in order: ``setup.py``'s (``-fopenmp`` for gcc and
    LLVM clang, ``-Xpreprocessor -fopenmp`` + ``-lomp`` for Apple clang), then on macOS the
    latter with a libomp that is not on the default paths (Homebrew, conda)."""
    platform = platform or sys.platform
    candidates = [(["-fopenmp"], ["-fopenmp"]),
                  (["-Xpreprocessor", "-fopenmp"], ["-lomp"])]
    for prefix in _libomp_prefixes(platform):
        lib = os.path.join(prefix, "lib")
        candidates.append((["-Xpreprocessor", "-fopenmp", f"-I{os.path.join(prefix, 'include')}"],
                           [f"-L{lib}", "-lomp", f"-Wl,-rpath,{lib}"]))
    return candidates


_OMP_PROBE = r"""
#include <omp.h>
extern "C" int probe() {
    int n = 0;
    #pragma omp parallel reduction(+ : n)
    n += 1;
    return n + omp_get_max_threads();
}
"""


def _openmp_flags_work(cxx: str, cflags: list[str], ldflags: list[str]) -> bool:
    """Whether ``cxx`` with these flags builds a shared library that uses OpenMP, and the
    library loads (a libomp found at link time but not at load time fails here)."""
    with tempfile.TemporaryDirectory() as tmp:
        src, lib = Path(tmp) / "probe.cpp", Path(tmp) / "probe.so"
        src.write_text(_OMP_PROBE)
        try:
            r = subprocess.run(shlex.split(cxx) + cflags + ["-shared", "-fPIC", str(src), "-o",
                                                            str(lib)] + ldflags,
                               capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.SubprocessError):
            return False
        if r.returncode != 0:
            return False
        try:
            ctypes.CDLL(str(lib))
        except OSError:
            return False
        return True


def openmp_flags(cxx: str | None = None) -> tuple[list[str], list[str]] | None:
    """The (compile, link) flags that give ``cxx`` OpenMP, or None when none work: the
    first of :func:`_openmp_candidates` that builds and loads a probe library.

    Flags that work are remembered in the cache directory for this compiler and these
    candidates, so a new process (the grader's sandbox, a restarted kernel) does not
    compile the probe again; "none work" is not remembered, so OpenMP installed later
    is found by the next process."""
    cxx = cxx or compiler()
    if cxx not in _OPENMP:
        candidates = _openmp_candidates()
        key = "\0".join([_VERSION, cxx, _compiler_id(cxx), repr(candidates)])
        record = cache_dir() / f".openmp-{hashlib.sha256(key.encode()).hexdigest()[:20]}.json"
        try:
            flags = json.loads(record.read_text())["flags"]
            if not (isinstance(flags, list) and len(flags) == 2):
                raise ValueError(f"{record}: not a pair of flag lists")
        except (OSError, ValueError, KeyError, TypeError):
            flags = next(([list(c), list(l)] for c, l in candidates
                          if _openmp_flags_work(cxx, c, l)), None)
            if flags is not None:
                try:                  # atomic; a read-only cache only costs a new probe
                    tmp = record.with_name(f"{record.name}.{os.getpid()}.tmp")
                    tmp.write_text(json.dumps({"compiler": cxx, "flags": flags}))
                    os.replace(tmp, record)
                except OSError:
                    pass
        _OPENMP[cxx] = None if flags is None else (list(flags[0]), list(flags[1]))
    flags = _OPENMP[cxx]
    return None if flags is None else (list(flags[0]), list(flags[1]))


def openmp_available(cxx: str | None = None) -> bool:
    """Whether ``cxx`` can build extensions with OpenMP (see :func:`openmp_flags`)."""
    return openmp_flags(cxx) is not None


def cache_dir() -> Path:
    """Where built extensions live: ``$MINI_EXTENSIONS_DIR`` or ``~/.cache/mini_extensions``."""
    env = os.environ.get("MINI_EXTENSIONS_DIR")
    path = Path(env) if env else Path.home() / ".cache" / "mini_extensions"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _includes() -> list[str]:
    import pybind11
    inc = [pybind11.get_include(), sysconfig.get_paths()["include"]]
    plat = sysconfig.get_paths().get("platinclude")
    if plat and plat not in inc:
        inc.append(plat)
    return [f"-I{p}" for p in inc]


# --------------------------------------------------------------------------- source

_PREAMBLE = """\
#include <pybind11/pybind11.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>
#include <cstdint>
#include <cstddef>
#include <cmath>
#include <vector>
#include <algorithm>
#ifdef _OPENMP
#include <omp.h>
#endif
namespace py = pybind11;
"""


# The preamble of a module built with ``pybind11=False``: a plain CPython extension (the
# source defines its functions with the C API and ``PyMODINIT_FUNC MINI_MODULE_INIT(void)``,
# naming itself ``MINI_MODULE_NAME``).  Without pybind11's headers it compiles in a fraction
# of a second instead of several: what a JIT compiler's generated kernels need.
_C_API_PREAMBLE = """\
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <cstdint>
#include <cstddef>
#include <cmath>
#include <algorithm>
#ifdef _OPENMP
#include <omp.h>
#endif
#define MINI_CAT2(a, b) a##b
#define MINI_CAT(a, b) MINI_CAT2(a, b)
#define MINI_STR2(a) #a
#define MINI_STR(a) MINI_STR2(a)
#define MINI_MODULE_INIT MINI_CAT(PyInit_, MINI_MODULE)
#define MINI_MODULE_NAME MINI_STR(MINI_MODULE)
"""


def _normalize_functions(functions) -> dict[str, str]:
    if functions is None:
        return {}
    if isinstance(functions, str):
        functions = [functions]
    if isinstance(functions, Mapping):
        items = [(str(k), str(v)) for k, v in functions.items()]
    else:
        items = [(str(f), "") for f in functions]
    for name, _ in items:
        if not re.fullmatch(r"[A-Za-z_]\w*", name):
            raise ValueError(f"functions: {name!r} is not a C++ identifier")
    return dict(items)


def _bindings(name: str, functions: dict[str, str]) -> str:
    defs = "\n".join(f"    m.def({json_str(f)}, &{f}, {json_str(doc)});" for f, doc in functions.items())
    return f"PYBIND11_MODULE({name}, m) {{\n{defs}\n}}\n"


def _full_source(name: str, student: str, functions: dict[str, str], pybind11: bool = True) -> str:
    if not pybind11:
        return _C_API_PREAMBLE + f'#line 1 "{CELL_FILE}"\n' + student + "\n"
    return (_PREAMBLE + f'#line 1 "{CELL_FILE}"\n' + student + "\n"
            + '#line 1 "<bindings>"\n' + _bindings(name, functions))


def json_str(s: str) -> str:
    """A C++ string literal for ``s``."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


# --------------------------------------------------------------------------- build

def load_inline(name: str, cpp_sources: str | Sequence[str], cuda_sources: str | Sequence[str] | None = None,
                functions=None, extra_cflags: Iterable[str] | None = None,
                extra_ldflags: Iterable[str] | None = None, verbose: bool = False,
                build_directory: str | os.PathLike | None = None, *,
                extra_cuda_cflags: Iterable[str] | None = None, sanitize: bool = True,
                pybind11: bool = True):
    """Compile ``cpp_sources`` (a string or a list of strings, joined by newlines) into a
    module named ``name`` whose functions are ``functions``, and return the module.

    With ``cuda_sources`` (CUDA C++: kernels, launches and host code) the module is built
    by nvcc where a GPU can run it and otherwise for mini's CUDA emulator; then
    ``sanitize`` (default True) builds the emulated kernels with every memory access
    checked (races, bounds, uninitialised reads) and counted.  ``extra_cuda_cflags`` go to
    the compiler of ``cuda_sources`` only.

    ``pybind11=False`` builds a plain CPython extension instead (no pybind11 headers: it
    compiles about 20x faster): the source includes nothing itself (``Python.h``, ``<cmath>``
    and ``<cstdint>`` come first), defines its functions with the C API and its module with
    ``PyMODINIT_FUNC MINI_MODULE_INIT(void)``, the module named ``MINI_MODULE_NAME``;
    ``functions`` must then be empty (mini.jit's generated kernels are built this way).

    A second call with the same source, functions and flags returns the cached build
    without compiling.  Raises :class:`CompileError` (line numbers relative to your source)
    when the compiler fails, ``ValueError`` for a bad ``name`` or function name.
    """
    if not re.fullmatch(r"[A-Za-z_]\w*", str(name)):
        raise ValueError(f"load_inline: name must be a Python identifier, got {name!r}")
    if not isinstance(cpp_sources, str):
        cpp_sources = "\n".join(cpp_sources)
    if cuda_sources is not None and not isinstance(cuda_sources, str):
        cuda_sources = "\n".join(cuda_sources)
    funcs = _normalize_functions(functions)
    if not pybind11 and (funcs or cuda_sources is not None):
        raise ValueError("load_inline(pybind11=False) builds a plain CPython extension: the "
                         "source defines its own module, so functions= and cuda_sources= "
                         "must be left out")
    cflags = [str(f) for f in (extra_cflags or [])]
    ldflags = [str(f) for f in (extra_ldflags or [])]
    cuda_cflags = [str(f) for f in (extra_cuda_cflags or [])]
    cxx = compiler()
    plan = None
    if cuda_sources is not None:
        from mini.backends.cuda.build import plan_cuda_build   # lazy: only CUDA builds need it
        plan = plan_cuda_build(name, cpp_sources, cuda_sources, _bindings("{module}", funcs),
                               cflags, cuda_cflags, ldflags, sanitize=bool(sanitize),
                               functions=list(funcs))

    # (the OpenMP flags are part of the key: a build made before libomp was installed is
    # not reused once OpenMP works)
    key = "\0".join([_VERSION, name, cpp_sources, repr(sorted(funcs.items())), repr(cflags),
                     repr(ldflags), cxx, _compiler_id(cxx), repr(openmp_flags(cxx)), sys.version,
                     "" if pybind11 else "capi",
                     sysconfig.get_config_var("EXT_SUFFIX") or ""]
                    + ([cuda_sources, repr(cuda_cflags), plan.key] if plan else []))
    digest = hashlib.sha256(key.encode()).hexdigest()[:20]
    with _lock:
        mod = _MODULES.get(digest)
    if mod is not None:
        return mod

    root = Path(build_directory) if build_directory is not None else cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    folder = root / f"{name}_{digest}"
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    # The module's own name carries the hash: CPython keeps one extension module per name
    # and process, so a changed source under the same ``name`` needs a new module name.
    modname = f"{name}_{digest}"
    target = folder / f"{modname}{suffix}"

    if not target.exists():
        folder.mkdir(parents=True, exist_ok=True)
        # one build at a time per source (xdist workers, several kernels)
        with _exclusive_lock(root / f".{name}_{digest}.lock"):
            if not target.exists():
                if plan is not None:
                    _build_plan(modname, plan, funcs, folder, target, verbose)
                else:
                    _build(modname, cpp_sources, funcs, cflags, ldflags, cxx, folder, target,
                           verbose, pybind11)
    elif verbose:
        print(f"load_inline: using cached build {target}")

    if plan is not None and plan.runtime is not None:
        from mini.backends.cuda import emulator   # the runtime is loaded before the module
        emulator.library()
    if plan is not None and plan.binding == "plain":
        from mini.backends.cuda import plain   # functions of plain numbers, bound with ctypes
        mod = plain.load_module(modname, target, plan.signatures, funcs)
    else:
        spec = importlib.util.spec_from_file_location(modname, target)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    if plan is not None:
        from mini.backends.cuda.emulator import wrap_module
        mod = wrap_module(mod, plan, target)
    with _lock:
        _MODULES[digest] = mod
    return mod


@contextlib.contextmanager
def _exclusive_lock(path: Path):
    """Hold an exclusive lock on the file ``path`` across processes: ``fcntl.flock`` on
    POSIX, ``msvcrt.locking`` on Windows.  Where neither exists nothing is locked: two
    builds of one source may then run at once, which wastes time but is safe (each writes
    its own temporary file and ``os.replace`` publishes it whole)."""
    with open(path, "a+b") as f:
        if fcntl is not None:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)
        elif msvcrt is not None:
            f.seek(0)
            while True:              # LK_LOCK gives up after 10 s; a build can take longer
                try:
                    msvcrt.locking(f.fileno(), msvcrt.LK_LOCK, 1)
                    break
                except OSError:
                    continue
            try:
                yield
            finally:
                f.seek(0)
                msvcrt.locking(f.fileno(), msvcrt.LK_UNLCK, 1)
        else:
            yield


def _warn_serial_once(cxx: str) -> None:
    """Say once per process that extensions build without OpenMP, what was tried and (on
    macOS) how to get it: a racy ``#pragma omp`` loop then runs serially and passes."""
    if _WARNED[0]:
        return
    _WARNED[0] = True
    tried = "; ".join(" ".join(c + l) for c, l in _openmp_candidates())
    hint = f"; {MACOS_OPENMP_HINT}" if sys.platform == "darwin" else ""
    warnings.warn(f"{NO_OPENMP_WARNING} (compiler {cxx!r}; tried: {tried}){hint}",
                  RuntimeWarning, stacklevel=4)  # the caller of load_inline


def _build_plan(name, plan, funcs, folder: Path, target: Path, verbose):
    """Run a CUDA build plan (mini.backends.cuda.build): compile, then link."""
    src = folder / f"{name}{plan.suffix}"
    src.write_text(plan.source.replace("PYBIND11_MODULE({module}", f"PYBIND11_MODULE({name}"))
    obj = folder / f".{name}.{os.getpid()}.o"
    tmp_out = folder / f".{name}.{os.getpid()}.tmp{target.suffix}"
    log = ""
    for template in plan.commands:
        cmd = [c.replace("{src}", str(src)).replace("{obj}", str(obj)).replace("{out}", str(tmp_out))
               for c in template]
        if verbose:
            print("load_inline:", " ".join(shlex.quote(c) for c in cmd))
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=folder)
        log += (r.stdout or "") + (r.stderr or "")
        if r.returncode != 0:
            (folder / "build.log").write_text(log)
            tmp_out.unlink(missing_ok=True)
            obj.unlink(missing_ok=True)
            issues = _parse_log(log, plan.sources.get(CELL_FILE, []), list(funcs), plan.sources)
            raise CompileError(name.rsplit("_", 1)[0], issues, log, cmd)
    (folder / "build.log").write_text(log)
    obj.unlink(missing_ok=True)
    if verbose and log.strip():
        print(log)
    os.replace(tmp_out, target)


def _build(name, student, funcs, cflags, ldflags, cxx, folder: Path, target: Path, verbose,
           pybind11: bool = True):
    src = folder / f"{name}.cpp"
    src.write_text(_full_source(name, student, funcs, pybind11))
    if not pybind11:
        cflags = [f"-DMINI_MODULE={name}"] + list(cflags)
    omp = openmp_flags(cxx)
    if omp is None:
        _warn_serial_once(cxx)
    omp_cflags, omp_ldflags = omp or ([], [])
    tmp_out = folder / f".{name}.{os.getpid()}.tmp{target.suffix}"
    cmd = (shlex.split(cxx) + list(DEFAULT_CFLAGS) + omp_cflags
           + _includes() + cflags + [str(src), "-o", str(tmp_out)] + ldflags
           + omp_ldflags
           # macOS: Python's symbols are resolved when the interpreter loads the module
           + (["-undefined", "dynamic_lookup"] if sys.platform == "darwin" else []))
    if verbose:
        print("load_inline:", " ".join(shlex.quote(c) for c in cmd))
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=folder)
    log = (r.stdout or "") + (r.stderr or "")
    (folder / "build.log").write_text(log)
    if r.returncode != 0:
        tmp_out.unlink(missing_ok=True)
        issues = _parse_log(log, student.splitlines(), list(funcs))
        raise CompileError(name.rsplit("_", 1)[0], issues, log, cmd)
    if verbose and log.strip():
        print(log)
    os.replace(tmp_out, target)  # atomic: a reader sees the whole module or none


# --------------------------------------------------------------------------- OpenMP threads

_OMP_SRC = r"""
int max_threads() {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}
void set_threads(int n) {
#ifdef _OPENMP
    omp_set_num_threads(n);
#endif
}
int threads_in_parallel_region() {
    int n = 1;
#ifdef _OPENMP
    #pragma omp parallel
    {
        #pragma omp single
        n = omp_get_num_threads();
    }
#endif
    return n;
}
"""


def _omp_module():
    return load_inline("mini_omp_threads", _OMP_SRC,
                       functions=["max_threads", "set_threads", "threads_in_parallel_region"])


def get_max_threads() -> int:
    """Threads an OpenMP parallel region in an extension starts (``omp_get_max_threads``)."""
    return int(_omp_module().max_threads())


def set_num_threads(n: int) -> None:
    """``omp_set_num_threads(n)`` for every extension of this process (they share one
    OpenMP runtime, libgomp, so this also reaches modules built earlier)."""
    if int(n) < 1:
        raise ValueError(f"set_num_threads: need at least one thread, got {n}")
    _omp_module().set_threads(int(n))
