"""Shared pytest configuration for the whole test tree.

Hypothesis profiles (choose with ``HYPOTHESIS_PROFILE=<name>``; ``ci`` is the default):

- ``ci``: moderate example counts, no deadline (shared CI runners have noisy timing).
- ``dev``: fewer examples, for a fast edit-test loop.
- ``thorough``: many examples, for hunting bugs before a release.

Optional parts: a test that needs something the machine may lack (PyTorch, bubblewrap,
nvcc, MPI, a C++ compiler with OpenMP) skips without it, and the end of the run says in one
line per part how many tests that skipped and how to get it.  ``MINI_TEST_TORCH=1`` (set by
CI) promises PyTorch: the run then stops at once if ``import torch`` fails, instead of
skipping the differential tests.
"""
from __future__ import annotations

import os
import re
from collections import Counter

import pytest
from hypothesis import HealthCheck, settings

_COMMON = dict(
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("ci", max_examples=40, **_COMMON)
settings.register_profile("dev", max_examples=10, **_COMMON)
settings.register_profile("thorough", max_examples=1000, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def _restore_mini_global_state():
    """Tests must not leak mini's global state (default dtype and device, grad mode,
    registered student implementations, fast-path switches, the op observer) into each
    other, whatever order xdist runs them in: snapshot it before each test and put it back
    afterwards."""
    import sys
    saved = None
    if "mini.exercises" in sys.modules and "mini.autograd.grad_mode" in sys.modules:
        saved = _snapshot()
    yield
    if saved is None and "mini.exercises" in sys.modules and "mini.autograd.grad_mode" in sys.modules:
        saved = _DEFAULTS
    if saved is not None:
        _restore(saved)


_DEFAULTS = ("float32", True, {}, "cpu", True, set(), None)


def _snapshot():
    from mini.ndarray import dtypes
    from mini.autograd import function, grad_mode
    from mini import backends, exercises
    return (dtypes._DEFAULT_FLOAT[0].name, grad_mode._ENABLED[0], dict(exercises._ACTIVE),
            backends._DEFAULT[0], exercises._FAST_ON[0], set(exercises._FAST_OFF),
            function._op_observer)


def _restore(saved):
    from mini.ndarray import dtypes
    from mini.autograd import function, grad_mode
    from mini import backends, exercises
    default_dtype, enabled, active, device, fast_on, fast_off, observer = saved
    dtypes._DEFAULT_FLOAT[0] = dtypes.as_dtype(default_dtype)
    grad_mode._ENABLED[0] = enabled
    exercises._ACTIVE.clear()
    exercises._ACTIVE.update(active)
    backends._DEFAULT[0] = device
    exercises._FAST_ON[0] = fast_on
    exercises._FAST_OFF.clear()
    exercises._FAST_OFF.update(fast_off)
    function.set_op_observer(observer)


# --------------------------------------------------------------------------- optional parts

def pytest_configure(config):
    config.addinivalue_line(
        "markers", "blas_sensitive: compares results whose sums BLAS orders; "
                   "tests/test_blas_kernels.py re-runs these under a second OpenBLAS kernel")
    if os.environ.get("MINI_TEST_TORCH", "") == "1":
        try:
            import torch  # noqa: F401
        except Exception as e:  # ImportError, or a broken install (OSError from a .so)
            raise pytest.UsageError(
                f"MINI_TEST_TORCH=1 promises PyTorch for the differential tests, but "
                f"`import torch` failed ({type(e).__name__}: {e}). Install it with "
                f"`make test MINI_TEST_TORCH=1` (or `.venv/bin/pip install -e '.[torch]'`), "
                f"or unset MINI_TEST_TORCH to skip those tests.") from None


#: (what is missing, how to get it, a pattern its skip reasons match), first match wins
OPTIONAL_PARTS = [
    ("torch not installed", "pip install -e '.[torch]', or MINI_TEST_TORCH=1 make test",
     r"\btorch\b|pytorch"),
    ("bubblewrap (bwrap) not available", "sudo apt install bubblewrap", r"bwrap|bubblewrap"),
    ("no CUDA toolkit (nvcc) or GPU", "install the CUDA toolkit; tests run on a GPU machine",
     r"nvcc|\bcuda\b|\bgpu\b"),
    ("no MPI", "pip install mpi4py mpich", r"\bmpi|mpiexec"),
    ("no C++ compiler or OpenMP", "install g++ (or clang++ with libomp)",
     r"compiler|openmp|g\+\+|clang"),
]


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr or "")


def skipped_by_optional_part(reasons) -> list[str]:
    """One line per optional part that skipped tests: ``skipped N tests: <what> (<how>)``,
    then one for the other reasons, given the skip reasons of a run."""
    counts: Counter = Counter()
    for reason in reasons:
        for what, how, pattern in OPTIONAL_PARTS:
            if re.search(pattern, reason, re.IGNORECASE):
                counts[(what, how)] += 1
                break
        else:
            counts[None] += 1
    lines = [f"skipped {n} test{'s' if n != 1 else ''}: {key[0]} ({key[1]})"
             for key, n in counts.items() if key is not None]
    if counts[None]:
        n = counts[None]
        lines.append(f"skipped {n} test{'s' if n != 1 else ''} for other reasons (listed above)")
    return lines


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter):
    # a wrapper around the terminal reporter's own: these lines come after its short test
    # summary, just above the final counts
    result = yield
    reasons = [_skip_reason(r) for r in terminalreporter.stats.get("skipped", [])]
    lines = skipped_by_optional_part(reasons)
    if lines:
        terminalreporter.section("skipped for a missing optional part", sep="-")
        for line in lines:
            terminalreporter.write_line(line)
    return result
