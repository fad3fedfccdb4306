"""The handle a check receives: the student's implementation, reachable only through plain
data.

``student(*args, **kwargs)`` sends the arguments (chosen by the check) through the codec of
:mod:`grader.worker.codec`, has the implementation called where it lives, and returns what
came back decoded into plain values and records (:class:`~grader.worker.codec.TensorRecord`,
:class:`~grader.worker.codec.OpaqueRecord`...): never an object the student's code made.  If
the student's code raised, :class:`StudentRaised` carries an
:class:`~grader.worker.codec.ExceptionRecord`.  ``student.run(...)`` returns the whole
:class:`Outcome` (inputs after the call, identity, shared memory, gradients after a backward);
``student.scenario(name, **params)`` runs a scenario of :mod:`grader.worker.scenarios` and
``student.expected(name, **params)`` runs the same scenario with mini's reference in the
trusted process.

Backends: :class:`InProcess` (a live function in this process, still through a codec round
trip: the mistake catalogue, the references, a learner's own kernel) and
:class:`grader.workerproc.WorkerBackend` (the sandboxed worker, at autograde).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from grader.worker import codec
from grader.worker.codec import ExceptionRecord, OpaqueRecord, TensorRecord, TensorSpec, SizeSpec

__all__ = ["Student", "Outcome", "StudentRaised", "WorkerLost", "InProcess", "Backend",
           "TensorSpec", "SizeSpec", "TensorRecord", "ExceptionRecord", "OpaqueRecord"]


class StudentRaised(Exception):
    """The student's code raised ``record`` (an :class:`ExceptionRecord`)."""

    def __init__(self, record: ExceptionRecord, during: str = ""):
        super().__init__(record.text())
        self.record = record
        self.during = during


class WorkerLost(Exception):
    """The process running the student's code stopped answering: ``reason`` is
    ``"timeout"``, ``"memory"``, ``"died"`` or ``"protocol"``; the message says what to do."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


class StudentMissing(Exception):
    """The notebook defines nothing under the name the hidden test names."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


@dataclass
class Outcome:
    """What one call of the student's implementation did (decoded, plain)."""
    value: Any = None
    raised: ExceptionRecord | None = None
    is_arg: int | None = None            # the result *is* args[is_arg]
    shares: list = field(default_factory=list)   # array args the result shares memory with
    args_after: list | None = None
    kwargs_after: dict | None = None
    backward_raised: ExceptionRecord | None = None
    not_callable: Any = None             # the object under test, when it is not callable
    missing: str | None = None           # no such name in the notebook

    def result(self):
        """The value, or raise what the call raised."""
        if self.missing is not None:
            raise StudentMissing(self.missing)
        if self.not_callable is not None:
            from grader.checks import CheckFailed
            from grader.checks.helpers import describe
            raise CheckFailed(f"expected your function, got {describe(self.not_callable)}")
        if self.raised is not None:
            raise StudentRaised(self.raised)
        return self.value


def _outcome(d: dict) -> Outcome:
    if type(d) is not dict:
        raise codec.CodecError("an outcome must be a dict")
    raised = d.get("raised")
    back = d.get("backward_raised")
    for r in (raised, back):
        if r is not None and type(r) is not ExceptionRecord:
            raise codec.CodecError("'raised' must be an exception record")
    shares = d.get("shares") or []
    if type(shares) is not list or not all(type(i) is int for i in shares):
        raise codec.CodecError("bad 'shares'")
    is_arg = d.get("is_arg")
    if is_arg is not None and type(is_arg) is not int:
        raise codec.CodecError("bad 'is_arg'")
    args_after = d.get("args_after")
    if args_after is not None and type(args_after) is not list:
        raise codec.CodecError("bad 'args_after'")
    kwargs_after = d.get("kwargs_after")
    if kwargs_after is not None and type(kwargs_after) is not dict:
        raise codec.CodecError("bad 'kwargs_after'")
    missing = d.get("missing")
    if missing is not None and type(missing) is not str:
        raise codec.CodecError("bad 'missing'")
    nc = d.get("not_callable")
    return Outcome(d.get("value"), raised, is_arg, shares, args_after, kwargs_after, back,
                   nc if "not_callable" in d else None, missing)


class Backend:
    """Where the implementation under test runs (see the module docstring)."""

    def call(self, slot: str, name: str | None, args: list, kwargs: dict, *, seed: int,
             backward: Any, observe_args: bool) -> Outcome:  # pragma: no cover - interface
        raise NotImplementedError

    def scenario(self, module: str, scenario: str, slot: str, name: str | None, params: dict,
                 seed: int) -> Outcome:  # pragma: no cover - interface
        raise NotImplementedError


class InProcess(Backend):
    """A live implementation in this process.  Inputs and results still make a codec round
    trip, so checks see exactly what they see from the sandboxed worker."""

    def __init__(self, impl: Any):
        self.impl = impl

    def _roundtrip_in(self, value):
        header, buffers = codec.encode(value)
        return codec.decode(header, buffers, "worker")

    @staticmethod
    def _roundtrip_out(value) -> dict:
        header, buffers = codec.encode(value)
        return codec.decode(header, buffers, "trusted")

    def call(self, slot, name, args, kwargs, *, seed=0, backward=None, observe_args=False):
        from grader.worker.execute import run_call
        args = self._roundtrip_in(list(args))
        kwargs = self._roundtrip_in(dict(kwargs))
        if backward is not None and not isinstance(backward, str):
            backward = self._roundtrip_in(backward)
        out = run_call(self.impl, args, kwargs, seed=seed, backward=backward,
                       observe_args=observe_args)
        return _outcome(self._roundtrip_out(out))

    def scenario(self, module, scenario, slot, name, params, seed=0):
        from grader.worker.execute import run_scenario
        from grader.worker.scenarios import get_scenario
        fn = get_scenario(module, scenario)
        out = run_scenario(fn, self.impl, self._roundtrip_in(dict(params)), slot=slot, seed=seed)
        return _outcome(self._roundtrip_out(out))


class Student:
    """The implementation of one slot, as a check sees it (see the module docstring).

    ``name`` is what the notebook binds it to (the second argument of the hidden test's
    ``run_check``); ``module`` names the chapter's scenario module (``"ch02"``)."""

    def __init__(self, backend: Backend, slot: str, name: str | None = None,
                 reference: Backend | None = None):
        self.backend = backend
        self.slot = slot
        self.name = name
        self._reference = reference

    @property
    def module(self) -> str:
        return f"ch{self.slot[:2]}"

    def __call__(self, *args, **kwargs):
        return self.run(*args, **kwargs).result()

    def run(self, *args, _seed: int = 0, _backward: Any = None, _observe: bool = False,
            **kwargs) -> Outcome:
        """Call the implementation; the whole :class:`Outcome`.  ``_seed`` seeds the random
        generators first (mini.manual_seed and friends), ``_backward`` (``"sum"``,
        ``"default"`` or a :class:`TensorSpec` gradient) runs backward on the result, and
        ``_observe`` reports the arguments after the call (in-place updates, ``.grad``)."""
        return self.backend.call(self.slot, self.name, list(args), dict(kwargs), seed=_seed,
                                 backward=_backward, observe_args=_observe)

    def scenario(self, scenario: str, _seed: int = 0, **params):
        """Observations of scenario ``scenario`` run on the implementation; raises
        :class:`StudentRaised` if the scenario (the student's code in it) raised."""
        return self.backend.scenario(self.module, scenario, self.slot, self.name, params,
                                     _seed).result()

    def expected(self, scenario: str, _seed: int = 0, **params):
        """The same scenario run with mini's reference for the slot, in this (trusted)
        process."""
        ref = self._reference
        if ref is None:
            ref = reference_backend(self.slot)
        return ref.scenario(self.module, scenario, self.slot, None, params, _seed).result()

    def __repr__(self) -> str:  # never the student's repr
        return f"<the implementation of {self.slot}>"


def reference_backend(slot: str) -> Backend:
    """mini's reference of ``slot`` in this process (the instructor's mini must be the one
    imported here: the trusted grader process, never a student copy)."""
    from mini.exercises import reference
    return InProcess(reference(slot))
