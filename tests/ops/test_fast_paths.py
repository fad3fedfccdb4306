"""The one fast-path mechanism (mini.exercises: @fast_path, @has_fast_path, fast_paths()).

A fast path may stand in for a slot only while the slot runs mini's own reference: never for
a registered student implementation, never for a release stub, never while an op observer
or forward-mode AD is active, never on another device than its own, and never when it is
switched off.  These tests exercise the rule on a throw-away slot (so every branch is
reached with inputs chosen for it), then check the fast paths mini registers.
"""
from __future__ import annotations

import numpy as np
import pytest

import mini
from mini import exercises
from mini.autograd import forward_ad
from mini.autograd import function as F
from mini.utils import profiler

SLOT, OTHER, POINT = "98.scale", "98.helper", "test_point"


@pytest.fixture
def toy():
    """A slot ``98.scale(x, k) = x * k`` (built on ``98.helper``), a @has_fast_path function
    built on it, and fast paths for both that record their calls; removed afterwards."""
    calls = []

    @exercises.exercise(OTHER)
    def helper(v):
        ### BEGIN SOLUTION
        return v
        ### END SOLUTION

    @exercises.exercise(SLOT)
    def scale(x, k):
        ### BEGIN SOLUTION
        calls.append("reference")
        return helper(x) * k
        ### END SOLUTION

    @exercises.has_fast_path(POINT, slots=(SLOT,))
    def point(x):
        calls.append("point reference")
        return scale(x, 2.0)

    @exercises.fast_path(SLOT, also=(OTHER,))
    def scale_fast(x, k):
        if k < 0:
            return NotImplemented   # inputs it does not handle: the reference runs
        calls.append("fast")
        return x * k

    @exercises.fast_path(SLOT, device="cpu")
    def scale_native(x, k):  # reached only when scale_fast declines, and only on cpu
        calls.append("native")
        return x * k

    @exercises.fast_path(POINT)
    def point_fast(x):
        calls.append("point fast")
        return x * 2.0

    yield scale, point, calls
    for name in (SLOT, OTHER, POINT):
        exercises._SLOTS.pop(name, None)
        exercises._FAST_PATHS.pop(name, None)
        exercises._ACTIVE.pop(name, None)
        exercises._IS_SOLUTION.pop(name, None)
    exercises._DECLARED_POINTS.pop(POINT, None)


def _x(device="numpy"):
    return mini.tensor([1.0, 2.0], device=device)


def test_a_fast_path_runs_for_the_reference_and_declines_to_it(toy):
    scale, point, calls = toy
    np.testing.assert_array_equal(scale(_x(), 3.0).numpy(), [3.0, 6.0])
    assert calls == ["fast"]
    calls.clear()
    np.testing.assert_array_equal(scale(_x(), -1.0).numpy(), [-1.0, -2.0])
    assert calls == ["reference"]          # NotImplemented: the next path (not for numpy), then the reference
    calls.clear()
    scale(_x("cpu"), -1.0)
    assert calls == ["native"]              # on cpu the native path takes what the other declined


def test_a_student_implementation_is_never_replaced(toy):
    scale, point, calls = toy
    exercises.implement(SLOT)(lambda x, k: (calls.append("student"), x * k)[1])
    scale(_x(), 3.0)
    scale(_x("cpu"), -1.0)
    point(_x())
    assert calls == ["student", "student", "point reference", "student"]


def test_a_student_version_of_a_slot_the_reference_uses_turns_the_fast_path_off(toy):
    scale, point, calls = toy
    exercises.implement(OTHER)(lambda v: (calls.append("student helper"), v)[1])
    scale(_x(), 3.0)
    assert calls == ["reference", "student helper"]


def test_a_release_stub_is_never_replaced(toy, monkeypatch):
    scale, point, calls = toy
    monkeypatch.setitem(exercises._IS_SOLUTION, SLOT, False)   # what the release tool's stub is
    assert not exercises.runs_reference(SLOT) and not exercises.implemented(SLOT)
    scale(_x(), 3.0)
    point(_x())
    assert calls == ["reference", "point reference", "reference"]


@pytest.mark.parametrize("context", ["observer", "profiler", "forward_ad", "all_off", "target_off"])
def test_no_fast_path_while_watched_or_switched_off(toy, context):
    scale, point, calls = toy
    if context == "observer":
        cm = _observer(lambda name, op, args, kwargs, run: run())
    elif context == "profiler":
        cm = profiler.profile()
    elif context == "forward_ad":
        cm = forward_ad.dual_level()
    elif context == "all_off":
        cm = exercises.fast_paths(False)
    else:
        cm = exercises.fast_paths(False, SLOT)
    with cm:
        assert exercises.fast_paths_active() == (context == "target_off")
        scale(_x(), 3.0)
        scale(_x("cpu"), -1.0)
    assert calls == ["reference", "reference"]
    calls.clear()
    scale(_x(), 3.0)
    assert calls == ["fast"]                 # back on after the block


def test_a_device_fast_path_needs_its_device(toy):
    scale, point, calls = toy
    with exercises.fast_paths(False, POINT):  # (unrelated target: still on for SLOT)
        scale(np.ones(2), -1.0)                 # numpy arrays: no device, no native path
        scale.on(mini.device("cpu"))(np.ones(2), -1.0)   # the caller says which device
        scale.on(mini.device("numpy"))(np.ones(2), -1.0)
    assert calls == ["reference", "native", "reference"]


def test_has_fast_path_follows_the_slots_it_is_built_on(toy):
    scale, point, calls = toy
    point(_x())
    assert calls == ["point fast"]
    calls.clear()
    exercises.implement(SLOT)(lambda x, k: (calls.append("student"), x * k)[1])
    point(_x())
    assert calls == ["point reference", "student"]


def test_fast_paths_names_unknown_targets():
    with pytest.raises(KeyError, match="no fast path is registered for \\['05.no_such_slot'\\]"):
        with exercises.fast_paths(False, "05.no_such_slot"):
            pass


def test_every_registered_fast_path_stands_in_for_something_declared():
    slots = exercises.slots()
    points = exercises.fast_path_points()
    for target, paths in exercises.registered_fast_paths().items():
        assert target in slots or target in points, f"fast path for undeclared {target!r}"
        for path in paths:
            for s in path.slots:
                assert s in slots, f"{path.fn.__name__} depends on undeclared slot {s!r}"
    for name, built_on in points.items():
        assert all(s in slots for s in built_on), name


def test_minis_fast_paths_are_where_they_should_be():
    # the ones the training benchmark relies on, and the native kernels only on cpu
    paths = exercises.registered_fast_paths()
    for target in ("05.dropout", "05.cross_entropy", "05.adamw_step", "02.relu_vjp",
                   "batch_norm", "conv2d"):
        assert any(p.device is None for p in paths[target]), target
    for target in ("03.compact", "04.im2col", "04.col2im", "04.conv2d_forward",
                   "04.conv2d_backward", "max_pool2d", "max_pool2d_backward"):
        devices = [p.device for p in paths[target]]
        assert "cpu" in devices and None not in devices and "numpy" not in devices, target


# ---------------------------------------------------------------------------------------
# chapter 03's compact on mini's default device: the student's function runs

@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_contiguous_runs_a_registered_compact_on_every_device(device):
    calls = []
    ref = exercises.reference("03.compact")

    @exercises.implement("03.compact")
    def compact(buffer, shape, strides, offset):
        calls.append(tuple(shape))
        return ref(buffer, shape, strides, offset)

    x = mini.tensor(np.arange(12.0, dtype=np.float32).reshape(3, 4), device=device)
    y = x.T.contiguous()
    assert calls == [(4, 3)]
    np.testing.assert_array_equal(y.numpy(), np.arange(12.0).reshape(3, 4).T)


def test_contiguous_on_cpu_uses_the_native_kernel_for_the_reference(monkeypatch):
    from mini.ops import fast_paths
    seen = []
    real = fast_paths._cpu_kernel
    monkeypatch.setattr(fast_paths, "_cpu_kernel", lambda name: (seen.append(name), real(name))[1])
    x = mini.tensor(np.arange(12.0, dtype=np.float32).reshape(3, 4), device="cpu")
    np.testing.assert_array_equal(x.T.contiguous().numpy(), np.arange(12.0).reshape(3, 4).T)
    assert seen == ["compact"]


class _observer:
    def __init__(self, fn):
        self.fn = fn

    def __enter__(self):
        self.prev = F.set_op_observer(self.fn)

    def __exit__(self, *exc):
        F.set_op_observer(self.prev)
