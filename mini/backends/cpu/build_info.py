"""Loading the compiled kernels of the cpu backend, ``mini.backends._cpu``.

The extension is built by the package install (``pip install -e .``, which ``make``
runs).  ``load_extension()`` imports it once per process and returns the module, or
``None`` when it is not built (``import_error()`` then says why).  A build without
OpenMP works but runs every kernel on one thread; the first load says so, once.
"""
from __future__ import annotations

import importlib
import threading
import warnings

EXTENSION = "mini.backends._cpu"
NO_OPENMP_WARNING = "mini's cpu backend was built without OpenMP; kernels run on one thread"

_lock = threading.Lock()
_loaded = False
_module = None
_error: str | None = None


def load_extension():
    """The compiled ``mini.backends._cpu`` module, or None if it cannot be imported.

    The result (module or failure) is cached: the import is tried once per process, and
    the no-OpenMP warning (RuntimeWarning) is issued at most once.
    """
    global _loaded, _module, _error
    if _loaded:
        return _module
    with _lock:
        if _loaded:
            return _module
        try:
            module = importlib.import_module(EXTENSION)
        except ImportError as exc:
            _module, _error = None, (
                f"{EXTENSION} could not be imported ({exc}). Build it with `make` or "
                "`pip install -e .` from the repository root (needs a C++ compiler)."
            )
        else:
            _module, _error = module, None
            if not module.openmp_enabled():
                warnings.warn(NO_OPENMP_WARNING, RuntimeWarning, stacklevel=2)
        _loaded = True
        return _module


def import_error() -> str | None:
    """Why ``load_extension()`` returned None (the ImportError text), else None."""
    load_extension()
    return _error


def describe() -> dict:
    """What was built: for tests, benchmarks and bug reports."""
    module = load_extension()
    if module is None:
        return {"built": False, "error": _error}
    return {
        "built": True,
        "openmp": module.openmp_enabled(),
        "max_threads": module.max_threads(),
        "compiler": module.compiler(),
        "matmul_isa": module.matmul_isa(),
        "parallel_threshold": module.PARALLEL_THRESHOLD,
    }


def _reset_for_tests() -> None:
    """Forget the cached load (tests only)."""
    global _loaded, _module, _error
    with _lock:
        _loaded, _module, _error = False, None, None
