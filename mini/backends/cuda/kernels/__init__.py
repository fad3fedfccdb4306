"""mini's CUDA kernels, as sources.

The kernels a student writes in chapter 04 live in the exercise slots of
:mod:`mini.backends.cuda.exercises` (the reference answers, as strings in the slot
functions: :func:`source` reads them from there, and a student copy of mini released before
chapter 04's solutions has none).  This folder holds the rest: the general kernels of the
cuda device (``backend.cu``), device-memory helpers for Python (``helpers.cu``) and the
naive transpose the chapter measures (``transpose_naive.cu``).

An exercise source holds the kernel, then a line ``// --- host launcher ---``, then
``launch_<name>(...)``: a host function that takes device pointers as integers and launches
the kernel with a fixed configuration.  Another kernel for the same exercise (a student's,
or one of the catalogue of mistakes in ``grader/mistakes/cuda_kernels``) replaces the part
before the marker.

``load(...)`` compiles a set of them into one module with ``load_inline``;
``DeviceSession`` moves numpy arrays in and out of device memory for a test::

    k = load(["matmul_tiled"])
    with DeviceSession(k) as s:
        A, B = s.to_device(a), s.to_device(b)
        C = s.empty((m, n))
        s.check(k.launch_matmul_tiled(A, B, C, m, n, kk))
        c = s.to_host(C)
"""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

import numpy as np

__all__ = ["KERNEL_DIR", "EXERCISES", "SLOTS", "MARKER", "source", "source_of", "available",
           "KernelNotAvailable", "split", "module_source", "load", "launcher_of", "HELPER_FUNCTIONS",
           "BACKEND_FUNCTIONS", "DeviceSession", "check_error", "load_variants", "variants_source",
           "defined_functions", "memory"]

KERNEL_DIR = Path(__file__).resolve().parent
MARKER = "// --- host launcher ---"
#: The kernels of chapter 04, in the order a module defines them.
EXERCISES = ("add", "matmul_naive", "matmul_tiled", "block_sum_shared", "block_sum_shuffle",
             "transpose_naive", "transpose_tiled")
#: The exercise slot whose reference holds each kernel (transpose_naive is a file here:
#: the chapter hands it out, to measure an uncoalesced kernel).
SLOTS = {"add": "04.cuda_add", "matmul_naive": "04.cuda_matmul_naive",
         "matmul_tiled": "04.cuda_matmul_tiled", "block_sum_shared": "04.cuda_block_sum_shared",
         "block_sum_shuffle": "04.cuda_block_sum_shuffle", "transpose_tiled": "04.cuda_transpose_tiled"}
HELPER_FUNCTIONS = ("device_malloc", "managed_malloc", "device_free", "copy_to_device", "copy_to_host",
                    "device_copy", "device_memset", "synchronize", "error_name")
BACKEND_FUNCTIONS = ("launch_ewise", "launch_scalar", "launch_unary", "launch_compact", "launch_im2col",
                     "launch_row_reduce", "launch_matmul")


class KernelNotAvailable(LookupError):
    """The reference of an exercise's kernel is not in this copy of mini (a student copy
    released before the chapter's solutions)."""


def source_of(fn) -> str | None:
    """The CUDA source an exercise function holds (the string constant of its body that
    contains the launcher marker), or None when it holds none (a release stub)."""
    code = getattr(fn, "__code__", None)
    found = [c for c in (code.co_consts if code is not None else ()) if isinstance(c, str) and MARKER in c]
    return textwrap.dedent(found[0]) if len(found) == 1 else None


def source(name: str) -> str:
    """The source of kernel ``name``: an exercise's reference (from its slot), or the file
    ``kernels/<name>.cu``.  Raises :class:`KernelNotAvailable` for an exercise whose
    reference this copy of mini does not have."""
    if name in SLOTS:
        from mini.exercises import ExerciseNotImplemented, reference
        try:
            text = source_of(reference(SLOTS[name]))
        except ExerciseNotImplemented:      # a student copy: the slot is a stub
            text = None
        if text is None:
            raise KernelNotAvailable(
                f"the reference kernel {name!r} ({SLOTS[name]}) is not in this copy of mini: it "
                f"arrives with chapter 04's solutions (write yours in 04_hardware/cuda.ipynb)")
        return text
    path = KERNEL_DIR / f"{name}.cu"
    if not path.is_file():
        known = sorted([p.stem for p in KERNEL_DIR.glob("*.cu")] + list(SLOTS))
        raise ValueError(f"no kernel {name!r}; there are: {', '.join(known)}")
    return path.read_text()


def available(name: str) -> bool:
    """Whether :func:`source` has kernel ``name`` in this copy of mini."""
    try:
        source(name)
    except KernelNotAvailable:
        return False
    return True


def defined_functions(text: str, candidates) -> list[str]:
    """The names of ``candidates`` that ``text`` defines as functions (a release may ship
    ``backend.cu`` without some of its parts: see its solution regions)."""
    return [f for f in candidates if re.search(rf"^\s*[\w:]+\s+{re.escape(f)}\s*\([^;]*?\)\s*\{{", text, re.M)]


def split(text: str) -> tuple[str, str]:
    """(kernel part, launcher part) of an exercise file."""
    if MARKER not in text:
        raise ValueError(f"the source has no {MARKER!r} line separating kernel and launcher")
    kernel, launcher = text.split(MARKER, 1)
    return kernel, MARKER + launcher


def launcher_of(name: str) -> str:
    return f"launch_{name}"


def module_source(names=EXERCISES, replace: dict[str, str] | None = None, backend: bool = False) -> str:
    """CUDA source for a module: the helpers, the files ``names`` (with the kernel part of
    ``replace[name]`` instead of the reference's, when given), and the backend kernels.
    Lines in compiler messages and reports count from the top of this text; a report
    also quotes its line (``source``)."""
    replace = replace or {}
    parts = [source("helpers")]
    for name in names:
        kernel, launcher = split(source(name))
        if name in replace:
            kernel = split(replace[name])[0] if MARKER in replace[name] else replace[name]
        parts.append(kernel.rstrip() + "\n\n" + launcher)
    if backend:
        text = source("backend")
        if re.search(r"\blaunch_matmul_tiled\s*\(", text) and "matmul_tiled" not in names:
            raise ValueError("the backend kernels need matmul_tiled")
        parts.append(text)
    return "\n".join(parts)


def load(names=EXERCISES, replace: dict[str, str] | None = None, backend: bool = False,
         sanitize: bool = True, name: str = "mini_cuda_kernels", emulate: bool | None = None):
    """Compile ``module_source(names, replace, backend)`` with ``load_inline``."""
    from mini.utils.cpp_extension import load_inline
    functions = list(HELPER_FUNCTIONS) + [launcher_of(n) for n in names]
    src = module_source(names, replace, backend)
    if backend:
        functions += defined_functions(source("backend"), BACKEND_FUNCTIONS)
    if emulate is not None:
        from mini.backends.cuda import build
        with build.emulated(emulate):
            return load_inline(name, "", cuda_sources=src, functions=functions, sanitize=sanitize)
    return load_inline(name, "", cuda_sources=src, functions=functions, sanitize=sanitize)


_DEFINE = re.compile(r"^\s*#\s*define\s+([A-Za-z_]\w*)", re.M)


def variants_source(variants, helpers: bool = True) -> tuple[str, list[str]]:
    """(source, launcher names) of a module holding several kernels for the same
    exercises: ``variants`` is a list of (tag, exercise, kernel source or None for the
    reference).  Each variant lives in its own namespace; its launcher is bound as
    ``launch_<exercise>__<tag>``."""
    parts = [source("helpers")] if helpers else []
    functions = []
    for tag, exercise, kernel in variants:
        if not re.fullmatch(r"[A-Za-z_]\w*", tag):
            raise ValueError(f"variant tag {tag!r} is not an identifier")
        ref_kernel, launcher = split(source(exercise))
        if kernel is not None and MARKER in kernel:
            kernel = split(kernel)[0]
        body = (ref_kernel if kernel is None else kernel).rstrip() + "\n\n" + launcher
        macros = sorted(set(_DEFINE.findall(body)))
        fn = launcher_of(exercise)
        parts.append(f"namespace {tag} {{\n{body}\n}}  // namespace {tag}\n"
                     + "".join(f"#undef {m}\n" for m in macros)
                     + _alias(tag, exercise))
        functions.append(f"{fn}__{tag}")
    return "\n".join(parts), functions


def load_variants(variants, sanitize: bool = True, name: str = "mini_cuda_variants"):
    """Compile :func:`variants_source` into one module: one build instead of one per
    variant."""
    from mini.utils.cpp_extension import load_inline
    src, launchers = variants_source(variants)
    return load_inline(name, "", cuda_sources=src, functions=list(HELPER_FUNCTIONS) + launchers,
                       sanitize=sanitize)


def _alias(tag: str, exercise: str) -> str:
    """A plain function ``launch_<exercise>__<tag>`` with the parameters of the
    exercise's launcher, calling the variant's launcher (pybind11 binds functions, not
    templates)."""
    fn = launcher_of(exercise)
    m = re.search(rf"\bint\s+{fn}\s*\(([^)]*)\)", split(source(exercise))[1])
    if not m:
        raise ValueError(f"cannot find int {fn}(...) in {exercise}.cu")
    params = [p.strip() for p in m.group(1).split(",") if p.strip()]
    names = [re.findall(r"[A-Za-z_]\w*", p)[-1] for p in params]
    return f"int {fn}__{tag}({', '.join(params)}) {{ return {tag}::{fn}({', '.join(names)}); }}\n"


def check_error(module, code: int) -> None:
    """Raise RuntimeError when a launcher returned a CUDA error code."""
    if code != 0:
        raise RuntimeError(f"kernel launch failed: {module.error_name(int(code))}")


def memory():
    """A module with only the device-memory helpers (``device_malloc``, ``copy_to_device``,
    ...): device pointers belong to the process, so every module's kernels can use them."""
    return load((), name="mini_cuda_memory", sanitize=False)


class DeviceSession:
    """Device buffers for a piece of work: copies numpy arrays in and out with
    ``cudaMalloc`` / ``cudaMemcpy`` and frees everything at the end of the ``with`` block::

        with DeviceSession() as dev:
            X = dev.to_device(x)               # an int: the device address of a copy of x
            Y = dev.empty((n, m))              # uninitialised device memory for float32
            dev.check(ext.launch_my_kernel(X, Y, n, m))
            y = dev.to_host(Y)                 # a new numpy array

    ``module``: a module built with the helpers of ``helpers.cu`` (default: mini's own)."""

    def __init__(self, module=None):
        self.module = module if module is not None else memory()
        self._pointers: list[int] = []
        self._shapes: dict[int, tuple] = {}

    def check(self, code: int) -> None:
        """Raise RuntimeError naming the CUDA error when ``code`` (a launcher's return
        value, from ``cudaGetLastError()``) is not ``cudaSuccess`` (0)."""
        check_error(self.module, code)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    def to_device(self, array) -> int:
        """A device copy of ``array`` as float32 (compact, row-major): its address."""
        a = np.ascontiguousarray(array, dtype=np.float32)
        p = self.module.device_malloc(a.nbytes)
        self._pointers.append(p)
        self._shapes[p] = a.shape
        self.module.copy_to_device(p, a)
        return p

    def empty(self, shape) -> int:
        """Uninitialised device memory for float32 values of ``shape``."""
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        p = self.module.device_malloc(4 * int(np.prod(shape)))
        self._pointers.append(p)
        self._shapes[p] = shape
        return p

    def to_host(self, pointer: int, shape=None) -> np.ndarray:
        """A new float32 numpy array holding the device memory at ``pointer`` (its shape:
        ``shape``, or the shape it was allocated with)."""
        out = np.empty(shape if shape is not None else self._shapes[pointer], np.float32)
        self.module.copy_to_host(out, pointer)
        return out

    def free(self):
        while self._pointers:
            self.module.device_free(self._pointers.pop())
