"""The suite's own promises (tests/conftest.py): MINI_TEST_TORCH=1 means the differential
tests run, and tests skipped for a missing optional part are counted in one line per part
at the end of the run.  Each case runs pytest in a subprocess in which ``import torch``
fails, as on a machine without PyTorch."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# pytest in a child process where `import torch` raises ImportError
_WITHOUT_TORCH = ("import sys; sys.modules['torch'] = None; import pytest; "
                  "sys.exit(pytest.main(sys.argv[1:]))")
_TORCH_TESTS = ["tests/optim/test_optim_sgd.py", "-k", "torch"]


def _pytest_without_torch(*args: str, **env: str) -> subprocess.CompletedProcess:
    child_env = {k: v for k, v in os.environ.items() if k != "MINI_TEST_TORCH"}
    child_env.update(env)
    return subprocess.run([sys.executable, "-c", _WITHOUT_TORCH, "-q", "-n", "0",
                           "-p", "no:cacheprovider", *args], cwd=ROOT, env=child_env,
                          capture_output=True, text=True, timeout=600)


def test_missing_torch_is_one_line_at_the_end():
    r = _pytest_without_torch(*_TORCH_TESTS)
    assert r.returncode == 0, r.stdout[-3000:]
    lines = r.stdout.strip().splitlines()
    summary = [line for line in lines if line.startswith("skipped ")]
    assert len(summary) == 1, lines[-15:]
    assert summary[0].startswith("skipped ") and "tests: torch not installed" in summary[0]
    assert "pip install -e '.[torch]'" in summary[0]
    assert lines.index(summary[0]) >= len(lines) - 3        # just above the final counts


def test_mini_test_torch_stops_the_run_when_torch_cannot_be_imported():
    r = _pytest_without_torch(*_TORCH_TESTS, MINI_TEST_TORCH="1")
    out = r.stdout + r.stderr
    assert r.returncode == 4, out[-3000:]                   # a usage error, before any test
    assert "MINI_TEST_TORCH=1 promises PyTorch" in out and "import torch" in out
    assert "passed" not in out and "skipped" not in out


def test_each_optional_part_gets_its_own_line():
    import importlib.util
    spec = importlib.util.spec_from_file_location("suite_conftest", ROOT / "tests" / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    reasons = (["could not import 'torch': No module named 'torch'"] * 3
               + ["bwrap is not installed", "needs nvcc (the CUDA toolkit)",
                  "could not import 'mpi4py': No module named 'mpi4py'",
                  "compiler without OpenMP", "needs os.fork"])
    lines = conftest.skipped_by_optional_part(reasons)
    assert lines[0].startswith("skipped 3 tests: torch not installed")
    assert [line.split(":")[1].split("(")[0].strip() for line in lines[1:5]] == [
        "bubblewrap", "no CUDA toolkit", "no MPI", "no C++ compiler or OpenMP"]
    assert lines[1].startswith("skipped 1 test: ")          # singular
    assert lines[-1] == "skipped 1 test for other reasons (listed above)"
