"""Shared helpers of the CUDA tests: force the emulator, build modules once."""
from __future__ import annotations

import os

import pytest

from mini.backends.cuda import build


def emulated():
    """Build with the emulator even on a machine with a GPU (these tests are about it)."""
    return build.emulated()


def load_emulated(name, cuda_sources, functions, cpp_sources="", **kw):
    from mini.utils.cpp_extension import load_inline
    with emulated():
        return load_inline(name, cpp_sources, cuda_sources=cuda_sources, functions=functions, **kw)


def without_launch_ids(reports):
    """Reports with the fields that differ between identical runs (launch numbers,
    allocation numbers) removed, for comparing runs."""
    out = []
    for r in reports:
        r = dict(r)
        r.pop("launch", None)
        r["message"] = None
        r["detail"] = r["detail"].split(" (cudaMalloc #")[0]
        out.append(r)
    return out


requires_posix = pytest.mark.skipif(os.name != "posix", reason="mini's CUDA emulator needs Linux or macOS")
