"""Fixtures shared by the tests of mini's backends."""
from __future__ import annotations

import warnings

import pytest

from mini.backends.cpu import build_info


@pytest.fixture(scope="module")
def cpu():
    """The compiled kernels of the cpu backend (``mini.backends._cpu``); a test that needs
    them fails, with the build error, when they are not built."""
    module = build_info.load_extension()
    if module is None:
        pytest.fail(build_info.import_error())
    return module


@pytest.fixture(scope="module")
def ext(cpu):
    return cpu


@pytest.fixture(scope="module")
def cuda():
    """mini's cuda device (on the emulator where there is no GPU; its warning silenced)."""
    import mini
    from mini.backends.cuda import backend
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", backend.EmulatedDeviceWarning)
        return mini.device("cuda")
