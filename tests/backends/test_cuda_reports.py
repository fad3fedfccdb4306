"""What a person sees of the sanitizer's reports: each problem once, the lines of their
source, what it usually means; HTML in a notebook, text elsewhere; ``assert_clean``."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from mini.backends.cuda import emulator, kernels, reports
from mini.backends.cuda.emulator import check
from cuda_helpers import load_emulated, requires_posix

pytestmark = requires_posix

SRC = r"""
__global__ void no_guard(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = 2 * x[i];
}
__global__ void no_barrier(const float* x, float* y) {
    __shared__ float buf[64];
    int t = threadIdx.x;
    buf[t] = x[t];
    y[t] = buf[63 - t];
}
int launch_no_guard(std::uintptr_t x, std::uintptr_t y, int n) {
    no_guard<<<(n + 31) / 32, 32>>>((const float*)x, (float*)y, n);
    return (int)cudaGetLastError();
}
int launch_no_barrier(std::uintptr_t x, std::uintptr_t y) {
    no_barrier<<<1, 64>>>((const float*)x, (float*)y);
    return (int)cudaGetLastError();
}
"""


@pytest.fixture(scope="module")
def ext():
    return load_emulated("report_demo", SRC, ["launch_no_guard", "launch_no_barrier"])


def _run(ext, which):
    x = np.arange(64, dtype=np.float32)
    with check() as run, kernels.DeviceSession() as dev:
        X, Y = (dev.to_device(x[:50]), dev.empty(50)) if which == "guard" else (dev.to_device(x), dev.empty(64))
        if which == "guard":
            ext.launch_no_guard(X, Y, 50)
        else:
            ext.launch_no_barrier(X, Y)
    return run


def test_one_problem_is_shown_once_with_its_lines_and_a_hint(ext):
    run = _run(ext, "guard")
    assert len(run.reports) >= 2                       # x[50] read and y[...] write, same line
    text = str(run)
    assert text.startswith("mini's CUDA sanitizer found 1 problem in 1 launch (no_guard<<<2, 32>>>)")
    assert "out-of-bounds read of global memory x[50] in kernel no_guard (14 times)" in text
    assert "thread 18 of block 1 reads x[50] at line 4" in text
    assert "     4 |     y[i] = 2 * x[i];" in text
    assert "(and 1 more report like it: y[50])" in text
    assert text.count("What it usually means") == 1 and "if (i < n)" in text


def test_a_race_names_both_threads_and_lines(ext):
    run = _run(ext, "barrier")
    text = str(run)
    assert "data race on shared memory buf[" in text and "with no __syncthreads() between them" in text
    assert "buf[t] = x[t];" in text and "y[t] = buf[63 - t];" in text
    html = run._repr_html_()
    assert "<pre" in html and "buf[t] = x[t];" in html and "__syncthreads()" in html


def test_assert_clean_raises_with_the_report(ext):
    run = _run(ext, "guard")
    with pytest.raises(emulator.CudaSanitizerError, match="my call: mini's CUDA sanitizer found 1 problem"):
        run.assert_clean("my call")
    with check() as ok, kernels.DeviceSession() as dev:
        dev.to_device(np.ones(3, np.float32))
    ok.assert_clean("nothing launched")


def test_outside_check_a_warning_carries_the_text(ext):
    x = np.arange(50, dtype=np.float32)
    with kernels.DeviceSession() as dev:
        X, Y = dev.to_device(x), dev.empty(50)
        with pytest.warns(emulator.CudaSanitizerWarning, match="y\\[i\\] = 2 \\* x\\[i\\];"):
            ext.launch_no_guard(X, Y, 50)


def test_in_a_notebook_every_report_is_displayed(ext, monkeypatch):
    """A warning shows once per place in the code; a display shows every time."""
    shown = []
    monkeypatch.setattr(reports, "in_notebook", lambda: True)
    monkeypatch.setattr(reports, "show", lambda run, limit=5: shown.append(str(run)))
    x = np.arange(50, dtype=np.float32)
    with kernels.DeviceSession() as dev, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        X, Y = dev.to_device(x), dev.empty(50)
        ext.launch_no_guard(X, Y, 50)
        ext.launch_no_guard(X, Y, 50)
    assert len(shown) == 2 and "out-of-bounds read" in shown[1]


def test_hints_cover_every_kind():
    for kind in emulator.KINDS:
        assert reports.hint({"kind": kind, "threads": []}), kind
    two_blocks = {"kind": "race", "threads": [{"block": (0, 0, 0), "access": "write"},
                                              {"block": (1, 0, 0), "access": "write"}]}
    assert "Blocks run in any order" in reports.hint(two_blocks)
    atomic = {"kind": "race", "threads": [{"block": (0, 0, 0), "access": "write"},
                                          {"block": (0, 0, 0), "access": "atomic"}]}
    assert "atomics" in reports.hint(atomic)
