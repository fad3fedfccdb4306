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
from dataclasses import dataclass
from typing import Callable

__all__ = [
    "ExerciseNotImplemented", "exercise", "implement", "unregister", "reset",
    "active", "reference", "runs_reference", "slots", "SlotInfo",
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


class ExerciseNotImplemented(NotImplementedError):
    """Raised when mini reaches a slot whose exercise has not been done yet.

    ``future=True`` marks the stub of a chapter after the one released: that part of
    mini arrives with its chapter (slots with a ``fallback`` use it meanwhile).
    """

    def __init__(self, slot_id: str, detail: str = "", future: bool = False):
        self.slot_id = slot_id
        self.future = future
        chapter = slot_id.split(".")[0]
        where = CHAPTER_NOTEBOOKS.get(chapter, f"chapter {chapter}")
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


def exercise(slot_id: str, fallback: Callable | None = None):
    """Mark the decorated function as the reference implementation of ``slot_id``.

    The returned function dispatches to a registered student implementation
    when there is one, and to the reference otherwise.  ``fallback`` is an opaque
    stand-in (typically numpy doing the work) used while the reference is a stub
    of a chapter that has not been released yet, so that earlier chapters still run.
    """
    _check_id(slot_id)

    def decorate(fn: Callable) -> Callable:
        if slot_id in _SLOTS and _SLOTS[slot_id].qualname != fn.__qualname__:
            raise ValueError(f"exercise slot {slot_id} is already owned by "
                             f"{_SLOTS[slot_id].module}.{_SLOTS[slot_id].qualname}")
        _SLOTS[slot_id] = SlotInfo(slot_id, fn, fn.__module__, fn.__qualname__)
        stub = _is_stub(fn)
        active = _ACTIVE  # local alias: one dict lookup on the hot path
        fast = []         # at most one fast path, see set_fast_path below

        @functools.wraps(fn)
        def dispatch(*args, **kwargs):
            impl = active.get(slot_id)
            if impl is not None:
                return impl(*args, **kwargs)
            if fast and runs_reference(slot_id):
                out = fast[0](*args, **kwargs)
                if out is not NotImplemented:
                    return out
            try:
                return fn(*args, **kwargs)
            except ExerciseNotImplemented as e:
                if e.future and fallback is not None and e.slot_id == slot_id:
                    return fallback(*args, **kwargs)
                raise

        def set_fast_path(impl: Callable | None) -> None:
            # an equivalent fused implementation that stands in for the reference only
            # (never for a registered student implementation, never for a release stub);
            # it returns NotImplemented where it does not apply and the reference runs.
            fast.clear()
            if impl is not None:
                fast.append(impl)

        dispatch.slot_id = slot_id
        dispatch.reference = None if stub else fn  # a release stub hands out nothing
        dispatch.set_fast_path = set_fast_path
        dispatch.fallback = fallback
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
            try:
                return fn(*args, **kwargs)
            except ExerciseNotImplemented:
                raise
            except NotImplementedError as e:
                if e.args:  # the student raised it on purpose with a message
                    raise
                raise ExerciseNotImplemented(slot_id) from None

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
        ok = code is not None and not _is_stub(_SLOTS[slot_id].reference)
        _IS_SOLUTION[slot_id] = ok
    return ok


def _is_stub(fn: Callable) -> bool:
    """True for a reference replaced by ``raise ExerciseNotImplemented(...)`` in a release."""
    code = getattr(fn, "__code__", None)
    return code is not None and "ExerciseNotImplemented" in code.co_names


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


def _check_id(slot_id: str) -> None:
    chapter, _, name = slot_id.partition(".")
    if not (len(chapter) == 2 and chapter.isdigit() and name):
        raise ValueError(f"exercise ids look like '03.compact_strides', got {slot_id!r}")


# Modules that own slots but are not imported by ``import mini`` (they load lazily).
_LAZY_OWNERS = ("mini.ops.conv", "mini.backends.cpu.exercises", "mini.nn.discovery",
                "mini.nn.he_init", "mini.nn.modules.normalization", "mini.nn.modules.dropout",
                "mini.nn.losses", "mini.optim.adam", "mini.optim.lr_scheduler",
                "mini.utils.train_state")


def _import_owner_modules() -> None:
    # Slots are declared where they are used; importing mini declares most of them.
    import importlib

    import mini  # noqa: F401
    for name in _LAZY_OWNERS:
        importlib.import_module(name)
