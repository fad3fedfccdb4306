"""Exercise slots: how a student's function becomes part of mini.

Every exercise of the course is a named slot such as ``"03.compact_strides"``.
mini holds one reference implementation per slot; the function in mini that
owns the slot is decorated with :func:`exercise`.  A student's notebook cell
decorates its own function with :func:`implement`, which registers it, and from
then on every caller inside mini runs the student's version.

The reference body sits between ``### BEGIN SOLUTION`` and ``### END SOLUTION``
markers.  The release tool (``mini-course release``) replaces that region with
a stub for the chapters a student has not done yet, so the stub raises
:class:`ExerciseNotImplemented` naming the exercise and its notebook.
"""
from __future__ import annotations

import functools
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

__all__ = [
    "ExerciseNotImplemented", "exercise", "implement", "unregister", "reset",
    "active", "reference", "runs_reference", "implemented", "slots", "SlotInfo",
    "fast_path", "has_fast_path", "fast_paths", "fast_paths_active", "FastPath",
]

# Chapter number -> the notebook a student works in (used in messages).
CHAPTER_NOTEBOOKS = {
    "01": "01_framework_design/framework_design.ipynb",
    "02": "02_autodiff/autodiff.ipynb",
    "03": "03_strides/strides.ipynb",
    "04": "04_hardware/hardware.ipynb",
    "05": "05_training/training.ipynb",
    "06": "06_scaling/scaling.ipynb",
}
# Slots whose chapter spans several notebooks: prefix -> the notebook.
SLOT_NOTEBOOKS = {
    "04.cuda_": "04_hardware/cuda.ipynb",
}


def notebook_of(slot_id: str) -> str:
    """The notebook in which the student writes ``slot_id``."""
    for prefix, notebook in SLOT_NOTEBOOKS.items():
        if slot_id.startswith(prefix):
            return notebook
    chapter = slot_id.split(".")[0]
    return CHAPTER_NOTEBOOKS.get(chapter, f"chapter {chapter}")


class ExerciseNotImplemented(NotImplementedError):
    """Raised when mini reaches a slot whose exercise has not been done yet.

    ``future=True`` marks the stub of a chapter after the one released: that part of
    mini arrives with its chapter (slots with a ``fallback`` use it meanwhile).
    """

    def __init__(self, slot_id: str, detail: str = "", future: bool = False):
        self.slot_id = slot_id
        self.future = future
        chapter = slot_id.split(".")[0]
        where = notebook_of(slot_id)
        if future:
            msg = (f"{slot_id} is part of mini that you build in chapter {chapter} "
                   f"({where}); it is not available before that chapter is released")
        else:
            msg = (f"exercise {slot_id} is not implemented yet: write it in {where} "
                   f"(the cell that starts with @implement(\"{slot_id}\")) and run that cell")
        if detail:
            msg += f"; {detail}"
        super().__init__(msg)


@dataclass
class SlotInfo:
    slot_id: str
    reference: Callable
    module: str
    qualname: str


_SLOTS: dict[str, SlotInfo] = {}
_ACTIVE: dict[str, Callable] = {}
#: [calls of registered student functions so far, how many are running now]: what
#: mini.utils.profiler reads to tell the ops that ran the learner's code from the others.
LEARNER_CODE = [0, 0]


def exercise(slot_id: str, fallback: Callable | None = None):
    """Mark the decorated function as the reference implementation of ``slot_id``.

    The returned function dispatches to a registered student implementation when there
    is one; otherwise to a fast path registered for the slot, where one applies (see
    :func:`fast_path`); otherwise to the reference.  ``fallback`` is an opaque stand-in
    (typically numpy doing the work) used while the reference is a stub of a chapter that
    has not been released yet, so that earlier chapters still run.

    Slots whose arguments are numpy arrays (no device to see) are called as
    ``slot.on(device)(...)`` by an op that knows the device of its tensors, so that a fast
    path for that device (a native kernel of the cpu backend) can stand in.
    """
    _check_id(slot_id)

    def decorate(fn: Callable) -> Callable:
        if slot_id in _SLOTS and _SLOTS[slot_id].qualname != fn.__qualname__:
            raise ValueError(f"exercise slot {slot_id} is already owned by "
                             f"{_SLOTS[slot_id].module}.{_SLOTS[slot_id].qualname}")
        _SLOTS[slot_id] = SlotInfo(slot_id, fn, fn.__module__, fn.__qualname__)
        stub = _is_stub(fn)
        active = _ACTIVE  # local alias: one dict lookup on the hot path
        fast = _FAST_PATHS.setdefault(slot_id, [])  # filled by @fast_path(slot_id)

        def run(device, args, kwargs):  # device: None, or the one .on() names
            impl = active.get(slot_id)
            if impl is not None:
                return impl(*args, **kwargs)
            if fast:
                out = _try_fast_paths(fast, device, args, kwargs)
                if out is not NotImplemented:
                    return out
            try:
                return fn(*args, **kwargs)
            except ExerciseNotImplemented as e:
                if e.future and fallback is not None and e.slot_id == slot_id:
                    return fallback(*args, **kwargs)
                raise

        @functools.wraps(fn)
        def dispatch(*args, **kwargs):
            return run(None, args, kwargs)

        def on(device):
            """This slot, for numpy arrays that belong to tensors on ``device``."""
            return lambda *args, **kwargs: run(device, args, kwargs)

        dispatch.slot_id = slot_id
        dispatch.reference = None if stub else fn  # a release stub hands out nothing
        dispatch.fallback = fallback
        dispatch.on = on
        if stub:
            import inspect
            dispatch.__signature__ = inspect.signature(fn)
            del dispatch.__wrapped__
        return dispatch

    return decorate


def implement(slot_id: str):
    """Register the decorated student function into ``slot_id`` and return it unchanged
    in behaviour (a plain ``raise NotImplementedError()`` left from the template is
    reported as :class:`ExerciseNotImplemented` naming the exercise)."""
    if slot_id not in _SLOTS:
        _import_owner_modules()
    if slot_id not in _SLOTS:
        known = ", ".join(sorted(_SLOTS)) or "none"
        raise KeyError(f"unknown exercise slot {slot_id!r}; known slots: {known}")

    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def student(*args, **kwargs):
            LEARNER_CODE[0] += 1    # the profiler counts the ops that ran the learner's code
            LEARNER_CODE[1] += 1
            try:
                return fn(*args, **kwargs)
            except ExerciseNotImplemented:
                raise
            except NotImplementedError as e:
                if e.args:  # the student raised it on purpose with a message
                    raise
                raise ExerciseNotImplemented(slot_id) from None
            finally:
                LEARNER_CODE[1] -= 1

        student.slot_id = slot_id
        student.student_function = fn
        _ACTIVE[slot_id] = student
        return student

    return decorate


def unregister(slot_id: str) -> None:
    """Go back to the reference for ``slot_id``."""
    _ACTIVE.pop(slot_id, None)


def reset() -> None:
    """Go back to the references for every slot."""
    _ACTIVE.clear()


def active(slot_id: str) -> Callable:
    """The function mini currently runs for ``slot_id`` (student's or reference)."""
    if slot_id not in _SLOTS:
        _import_owner_modules()
    return _ACTIVE.get(slot_id) or _SLOTS[slot_id].reference


_IS_SOLUTION: dict[str, bool] = {}


def runs_reference(slot_id: str) -> bool:
    """True when ``slot_id`` runs mini's own reference solution: no student implementation
    is registered and the reference is not a release stub.  Only then may mini replace the
    slot by an equivalent fast path (a fused or native kernel) without bypassing the
    student's code or doing an exercise that has not been done yet."""
    if slot_id in _ACTIVE:
        return False
    ok = _IS_SOLUTION.get(slot_id)
    if ok is None:
        if slot_id not in _SLOTS:
            _import_owner_modules()
        code = getattr(_SLOTS[slot_id].reference, "__code__", None)
        ok = code is not None and not _is_stub(_SLOTS[slot_id].reference) \
            and slot_id not in _learners_slots()
        _IS_SOLUTION[slot_id] = ok
    return ok


def _learners_slots() -> frozenset:
    """The slots whose body in this copy of mini is a learner's code (a package written by
    ``mini-course export`` lists them in ``mini/_yours.py``): no fast path stands in for
    them, so mini runs, and its tests test, the learner's code."""
    try:
        from mini import _yours
    except ImportError:
        return frozenset()
    return frozenset(_yours.SLOTS)


def _is_stub(fn: Callable) -> bool:
    """True for a reference replaced by ``raise ExerciseNotImplemented(...)`` in a release."""
    code = getattr(fn, "__code__", None)
    return code is not None and "ExerciseNotImplemented" in code.co_names


def implemented(slot_id: str) -> bool:
    """True when reaching ``slot_id`` runs code rather than a release stub: a student
    implementation is registered, or the reference is mini's solution."""
    return slot_id in _ACTIVE or runs_reference(slot_id)


def reference(slot_id: str) -> Callable:
    """mini's reference implementation of ``slot_id``.  In a student copy where the slot is a
    stub there is none: ``ExerciseNotImplemented``."""
    if slot_id not in _SLOTS:
        _import_owner_modules()
    fn = _SLOTS[slot_id].reference
    if _is_stub(fn):
        raise ExerciseNotImplemented(slot_id, "this copy of mini has no reference for it")
    return fn


def slots() -> dict[str, SlotInfo]:
    _import_owner_modules()
    return dict(_SLOTS)


# ---------------------------------------------------------------------------------------
# Fast paths
#
# A fast path is an equivalent implementation that mini may run in place of a slot's
# reference: a native kernel of the cpu backend, or several dispatched ops fused into one
# Function that works on the buffers.  Every fast path is registered with @fast_path and
# every decision to run one is taken here, by one rule:
#
#   * it stands in for a slot only while that slot runs mini's own reference: no student
#     implementation is registered and the reference is not a release stub; the same holds
#     for every other slot its result depends on (``also``).  A student's code is never
#     bypassed, and an exercise not done yet is never done for the student;
#   * only while fast paths are active: no op observer is watching (the profiler, a graph
#     tracer: they see the ops the program wrote; inside an op they observe, which they do
#     not look into, its implementation may use fast paths), no forward-mode AD level is
#     open (fused Functions have no jvp), and they are not switched off (``fast_paths(False)``);
#   * one registered for a device (``device="cpu"``: a native kernel) runs only for tensors
#     on that device; ``device="numpy"`` is the portable reference and has none;
#   * it returns NotImplemented for inputs it does not handle, and the reference runs.
#
# The ops that own a slot just call it; ops that are built on slots without being one
# (``conv2d``, ``batch_norm``) are marked with @has_fast_path and work the same way.
# The fast paths themselves live in mini/ops/fast_paths.py.

@dataclass
class FastPath:
    target: str                 # the slot id or has_fast_path name it stands in for
    fn: Callable
    device: str | None          # None: any device
    slots: tuple                # every slot that must run mini's reference


_FAST_PATHS: dict[str, list[FastPath]] = {}
_DECLARED_POINTS: dict[str, tuple] = {}    # has_fast_path name -> the slots it is built on
_FAST_ON = [True]
_FAST_OFF: set = set()                     # targets switched off by fast_paths(False, ...)
_HOOKS: list = []                          # (mini.autograd.function, mini.autograd.forward_ad)


def fast_path(target: str, *, device: str | None = None, also: tuple = ()):
    """Register the decorated function as a fast path for ``target``: a slot id (the fast
    path takes the slot's arguments) or the name of a function marked @has_fast_path.
    ``device``: run only for tensors on that device.  ``also``: other slots the reference's
    result depends on (a registered student version of any of them turns this path off)."""
    def decorate(fn: Callable) -> Callable:
        slots = tuple(also)
        if "." in target:  # a slot id: the slot itself must run its reference
            _check_id(target)
            slots = (target,) + slots
        _FAST_PATHS.setdefault(target, []).append(FastPath(target, fn, device, slots))
        return fn
    return decorate


def has_fast_path(name: str, *, slots: tuple = ()):
    """Mark the decorated function (an op built on ``slots`` that is not a slot itself) as
    one that a registered fast path may replace, under the same rule as a slot's (and, like
    a slot, ``fn.on(device)(...)`` for numpy arguments)."""
    def decorate(fn: Callable) -> Callable:
        built_on = _DECLARED_POINTS[name] = tuple(slots)
        fast = _FAST_PATHS.setdefault(name, [])

        def run(device, args, kwargs):
            if fast:
                out = _try_fast_paths(fast, device, args, kwargs, built_on)
                if out is not NotImplemented:
                    return out
            return fn(*args, **kwargs)

        @functools.wraps(fn)
        def dispatch(*args, **kwargs):
            return run(None, args, kwargs)

        dispatch.reference = fn
        dispatch.on = lambda device: lambda *args, **kwargs: run(device, args, kwargs)
        return dispatch
    return decorate


def fast_paths_active() -> bool:
    """True while fast paths may run at all: switched on, no op observer installed, no
    forward-mode AD level open."""
    if not _FAST_ON[0]:
        return False
    if not _HOOKS:
        from mini.autograd import forward_ad, function
        _HOOKS.extend((function, forward_ad))
    return _HOOKS[0]._op_observer is None and not _HOOKS[1]._LEVEL[0]


@contextmanager
def fast_paths(enabled: bool, *targets: str):
    """Switch fast paths off (or on again) inside a ``with`` block: all of them, or only
    those for ``targets`` (slot ids or @has_fast_path names).  For tests and benchmarks
    that compare a fast path with the reference it replaces."""
    saved = (_FAST_ON[0], set(_FAST_OFF))
    if targets:
        unknown = [t for t in targets if t not in _FAST_PATHS or not _FAST_PATHS[t]]
        if unknown:
            raise KeyError(f"no fast path is registered for {unknown}; registered: "
                           f"{sorted(t for t, paths in _FAST_PATHS.items() if paths)}")
        (_FAST_OFF.difference_update if enabled else _FAST_OFF.update)(targets)
    else:
        _FAST_ON[0] = enabled
    try:
        yield
    finally:
        _FAST_ON[0] = saved[0]
        _FAST_OFF.clear()
        _FAST_OFF.update(saved[1])


def registered_fast_paths() -> dict[str, list[FastPath]]:
    """Every registered fast path, by the slot or function it stands in for."""
    _import_owner_modules()
    return {t: list(paths) for t, paths in _FAST_PATHS.items() if paths}


def fast_path_points() -> dict[str, tuple]:
    """The functions marked @has_fast_path and the slots each is built on."""
    _import_owner_modules()
    return dict(_DECLARED_POINTS)


def _try_fast_paths(paths: list, device, args, kwargs, built_on: tuple = ()):
    """The one decision (see above): run the first fast path that may stand in, or return
    NotImplemented.  ``built_on``: the slots of a @has_fast_path function."""
    if not fast_paths_active():
        return NotImplemented
    for s in built_on:
        if not runs_reference(s):
            return NotImplemented
    for path in paths:
        if path.target in _FAST_OFF:
            return NotImplemented
        if path.device is not None:
            d = device if device is not None else _device_of(args)
            if d is None or d.name != path.device:
                continue
        for s in path.slots:
            if not runs_reference(s):
                break
        else:
            out = path.fn(*args, **kwargs)
            if out is not NotImplemented:
                return out
    return NotImplemented


def _device_of(args):
    """The device of the first tensor among ``args`` (None if there is none)."""
    for a in args:
        data = getattr(a, "_data", None)
        if data is not None and hasattr(data, "storage"):
            return data.storage.device
    return None


def _check_id(slot_id: str) -> None:
    chapter, _, name = slot_id.partition(".")
    if not (len(chapter) == 2 and chapter.isdigit() and name):
        raise ValueError(f"exercise ids look like '03.compact_strides', got {slot_id!r}")


# Modules that own slots but are not imported by ``import mini`` (they load lazily).
_LAZY_OWNERS = ("mini.ops.conv", "mini.ops.fast_paths", "mini.backends.cpu.exercises",
                "mini.backends.cuda.exercises",
                "mini.nn.discovery",
                "mini.nn.he_init", "mini.nn.modules.normalization", "mini.nn.modules.dropout",
                "mini.nn.losses", "mini.optim.adam", "mini.optim.lr_scheduler",
                "mini.utils.train_state", "mini.distributed.ring",
                "mini.nn.parallel.distributed", "mini.distributed.optim.zero_redundancy_optimizer",
                "mini.utils.data.distributed", "mini.utils.checkpoint",
                "mini.distributed.accumulation",
                "mini.napkin.compile", "mini.jit.tracer", "mini.jit.replay", "mini.jit.fusion")


def _import_owner_modules() -> None:
    # Slots are declared where they are used; importing mini declares most of them.
    import importlib

    import mini  # noqa: F401
    for name in _LAZY_OWNERS:
        importlib.import_module(name)
