"""Shared pytest configuration for the whole test tree.

Hypothesis profiles (choose with ``HYPOTHESIS_PROFILE=<name>``; ``ci`` is the default):

- ``ci``: moderate example counts, no deadline (shared CI runners have noisy timing).
- ``dev``: fewer examples, for a fast edit-test loop.
- ``thorough``: many examples, for hunting bugs before a release.
"""
from __future__ import annotations

import os

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
