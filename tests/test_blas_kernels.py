"""The numerically sensitive tests pass under a second BLAS kernel, not only this CPU's.

OpenBLAS picks its kernel by CPU (Haswell, SkylakeX, Zen, Prescott, ...), and kernels sum
matrix products in different orders; a test that compared two computation orders bit
for bit passed on one machine and failed on another (issue 17: 1.9e-6 apart under
Haswell, equal under SkylakeX).  This test re-runs the tests marked ``blas_sensitive`` in
a subprocess with ``OPENBLAS_CORETYPE`` set to another kernel that this CPU can run, so
that class of failure shows up on the machine that introduces it.

Cost: one subprocess running the marked tests (about 30 s on a quiet 2-core machine).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MARK = "blas_sensitive"

# Kernels to try, in order of preference, with the CPU flags each needs.  Haswell is the
# common AVX2 kernel (most laptops and desktops; OpenBLAS runs it for Zen too); Prescott
# asks for the generic one any x86-64 runs; SkylakeX is the AVX-512 one.
KERNELS = [("Haswell", {"avx2", "fma"}), ("Prescott", set()),
           ("SkylakeX", {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"})]


def _cpu_flags() -> set[str] | None:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    m = re.search(r"^flags\s*:\s*(.*)$", text, re.MULTILINE)
    return set(m.group(1).split()) if m else None


def _openblas_kernel(env: dict) -> str | None:
    """The kernel numpy's OpenBLAS runs in a fresh process with ``env`` (None: numpy's
    BLAS is not an OpenBLAS that picks its kernel at run time)."""
    code = ("import numpy, threadpoolctl\n"
            "a = [i.get('architecture') for i in threadpoolctl.threadpool_info()\n"
            "     if i.get('internal_api') == 'openblas']\n"
            "print(a[0] if a and a[0] else '')")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip() or None


def _marked_files() -> list[str]:
    """The test files that use the mark (the -m filter then picks the marked tests)."""
    here = Path(__file__).resolve()
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")
                  if p.resolve() != here and f"mark.{MARK}" in p.read_text())


def test_marked_tests_are_found():
    files = _marked_files()
    assert "tests/backends/test_training_fast_paths.py" in files
    assert len(files) >= 3


def test_numerically_sensitive_tests_pass_under_another_blas_kernel():
    if os.environ.get("MINI_BLAS_KERNEL_RERUN"):
        pytest.skip("already inside the re-run")
    native = _openblas_kernel(dict(os.environ))
    if native is None:
        pytest.skip("numpy's BLAS is not OpenBLAS with run-time kernels (Accelerate on "
                    "macOS, for example): OPENBLAS_CORETYPE changes nothing here")
    flags = _cpu_flags()
    if flags is None:
        pytest.skip("no /proc/cpuinfo: cannot tell which OpenBLAS kernels this CPU runs")
    other = [name for name, needs in KERNELS if name.lower() != native.lower() and needs <= flags]
    if not other:
        pytest.skip(f"this CPU runs no OpenBLAS kernel other than {native}")
    kernel = other[0]
    env = {**os.environ, "OPENBLAS_CORETYPE": kernel, "OPENBLAS_NUM_THREADS": "1",
           "MINI_BLAS_KERNEL_RERUN": kernel}
    # (OpenBLAS may map the name to a kernel of its build: Prescott runs "Katmai", the
    # generic SSE code, in numpy's wheels; Zen runs Haswell's)
    got = _openblas_kernel(env)
    assert got and got.lower() != native.lower(), f"OPENBLAS_CORETYPE={kernel} still runs {native}"
    cmd = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
           "-m", MARK, *_marked_files()]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-40:])
    assert r.returncode == 0, (f"the {MARK} tests fail under OpenBLAS's {got} kernel "
                               f"(this CPU's is {native}): compare with a tolerance "
                               f"(tests/float_tolerance.py), not bit for bit\n{tail}")
    assert re.search(r"\d+ passed", tail), tail
