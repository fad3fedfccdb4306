"""A traced function: trace on the first call, replay afterwards, trace again when a guard
says the recorded graph no longer applies.

Every call computes a key (:func:`~mini.jit.tracer.guard_key` of the arguments, plus the
Python constants the function reads, plus whether autograd is recording) and looks for the
graphs recorded under it.  A graph is replayed if its captured tensors still have the shape
and dtype they had; a replay that meets a failing guard (the program branched the other
way, or read another value with ``.item()``) puts back what it changed and the next graph
is tried; when none applies, the function is traced again.  A function whose graphs keep
failing (more than ``cache_size_limit`` traces under one key) is run eagerly from then on,
with a warning: it would compile forever.

Some calls are never replayed, and run eagerly instead (each says why once, as a
:class:`~mini.jit.tracer.TracerWarning`):

- autograd is recording (grad mode on and an input or a captured tensor requires grad): a
  replay computes values, not the graph backward needs;
- the function changed Python state it reads (a global counter, a module attribute) or let a
  tensor it made escape other than through its return value: replaying would skip that;
- an input lives on a device whose buffers are not host memory (``cuda``);
- an op observer is installed (the profiler, or a trace of an enclosing function: it must
  see every op), or a forward-mode AD level is open.
"""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field

import numpy as np

from mini.autograd import function as _function
from mini.autograd import forward_ad as _fw
from mini.autograd import grad_mode
from mini.autograd.tensor import Tensor
from mini.jit.graph import Graph, Ref, map_refs, meta_of
from mini.jit.lowering import as_array, as_tensor, lower
from mini.jit.replay import GuardFailed, replay
from mini.jit.tracer import (capture, flatten_tensors, guard_key, map_outputs, python_constants,
                             warn_once)

__all__ = ["TracedFunction", "Entry", "TraceStats"]

_RANDOM_OPS = frozenset({"rand", "randn", "randint", "randperm", "uniform_", "normal_",
                         "dropout", "rand_like", "randn_like"})


@dataclass
class TraceStats:
    """What a traced function did: ``traces`` (recordings, each one compile), ``replays``,
    ``guard_failures`` (replays stopped by a guard), ``eager_calls`` (calls run eagerly,
    for a reason in ``reasons``), ``compile_seconds`` (time spent tracing, lowering and
    fusing, including the eager run of each traced call)."""
    traces: int = 0
    replays: int = 0
    guard_failures: int = 0
    eager_calls: int = 0
    compile_seconds: float = 0.0
    reasons: dict = field(default_factory=dict)

    def eager(self, reason: str) -> None:
        self.eager_calls += 1
        self.reasons[reason] = self.reasons.get(reason, 0) + 1


class Entry:
    """One recorded graph and how to run it."""

    def __init__(self, graph: Graph, structure, mutated: list, random: bool):
        self.graph = graph
        self.structure = structure     # the returned value, Ref("output", k) for each tensor
        self.mutated = mutated         # Refs of inputs and captured tensors written in place
        self.random = random           # draws from mini's generator
        self.eager_reason: str | None = None

    @property
    def graph(self) -> Graph:
        return self._graph

    @graph.setter
    def graph(self, graph: Graph) -> None:
        self._graph = graph
        self._guarded = bool(graph.guards)
        self._input_refs = [Ref("input", i) for i in range(len(graph.inputs))]
        self._captured_refs = [Ref("captured", i) for i in range(len(graph.captured))]

    def captured_unchanged(self) -> bool:
        g = self.graph
        return all(meta_of(t)[:2] == m[:2] for t, m in zip(g.captured, g.captured_meta))

    def run(self, inputs: list):
        """Replay on the input tensors; returns the outputs as the function returned them.
        Raises GuardFailed after putting back every buffer it wrote and the generator."""
        from mini import random as mini_random
        g = self.graph
        env = dict(zip(self._input_refs, map(as_array, inputs)))
        if self._captured_refs:
            env.update(zip(self._captured_refs, map(as_array, g.captured)))
        undo = None
        if self._guarded and (self.mutated or self.random):
            undo = ([(env[r], env[r].copy()) for r in self.mutated],
                    mini_random.get_rng_state() if self.random else None)
        try:
            values = replay(g, env)
        except GuardFailed:
            if undo is not None:
                for array, saved in undo[0]:
                    np.copyto(array, saved)
                if undo[1] is not None:
                    mini_random.set_rng_state(undo[1])
            raise
        for r in self.mutated:         # in-place writes count for autograd's version checks
            owner = inputs[r.index] if r.kind == "input" else g.captured[r.index]
            owner._data.storage.version += 1
        return self._assemble(values, inputs)

    def _assemble(self, values: list, inputs: list):
        g = self.graph
        made: dict = {}

        def make(slot: Ref):
            ref = g.outputs[slot.index]
            owner = _written(g, ref)
            if owner.kind == "input":
                return inputs[owner.index]
            if owner.kind == "captured":
                return g.captured[owner.index]
            if ref not in made:        # one tensor per value, as eager returns one object
                meta = g.nodes[ref.index].meta
                made[ref] = as_tensor(values[slot.index], meta.device, meta.shape)
            return made[ref]
        return map_refs(self.structure, make)


def _written(graph: Graph, ref: Ref) -> Ref:
    """The tensor an in-place node wrote to (its result is that tensor itself)."""
    while ref.kind == "node" and graph.nodes[ref.index].inplace:
        first = graph.nodes[ref.index].args[0]
        if not isinstance(first, Ref):
            break
        ref = first
    return ref


class TracedFunction:
    """What :func:`mini.jit.trace` and :func:`mini.compile` return (see the module
    docstring).  ``stats`` counts traces, replays and guard failures; ``graphs()`` lists
    the recorded graphs."""

    def __init__(self, fn, fuse: bool = False, cache_size_limit: int = 8):
        if not callable(fn):
            raise TypeError(f"mini.jit.trace expects a function or a module, got "
                            f"{type(fn).__name__}")
        self.fn = fn
        self.fuse = bool(fuse)
        self.cache_size_limit = int(cache_size_limit)
        self.stats = TraceStats()
        self._cache: dict = {}             # key -> list of Entry (most recently useful first)
        self._given_up: set = set()        # keys that trace too often: run eagerly
        self._warned: set = set()
        functools.update_wrapper(self, fn, updated=())

    def graphs(self) -> list[Graph]:
        return [e.graph for entries in self._cache.values() for e in entries]

    def reset(self) -> None:
        """Forget every recorded graph (the next call traces again)."""
        self._cache.clear()
        self._given_up.clear()

    def __call__(self, *args, **kwargs):
        reason = self._eager_reason(args, kwargs)
        if reason is not None:
            return self._eager(reason, args, kwargs)
        key = (guard_key(args, kwargs), python_constants(self.fn), grad_mode.is_grad_enabled())
        if key in self._given_up:
            return self._eager("recompiles", args, kwargs)
        inputs = flatten_tensors((args, kwargs))
        entries = self._cache.setdefault(key, [])
        for k, entry in enumerate(entries):
            if entry.eager_reason is not None:
                return self._eager(entry.eager_reason, args, kwargs)
            if not entry.captured_unchanged():
                continue
            try:
                out = entry.run(inputs)
            except GuardFailed:
                self.stats.guard_failures += 1
                continue
            self.stats.replays += 1
            if k:
                entries.insert(0, entries.pop(k))
            return out
        if len(entries) >= self.cache_size_limit:
            self._given_up.add(key)
            warn_once(self._warned, "limit",
                      f"mini.jit: {self._name()} was traced {len(entries)} times for one set "
                      f"of guards (its branches or .item() values keep changing); it runs "
                      f"eagerly from now on (cache_size_limit={self.cache_size_limit})")
            return self._eager("recompiles", args, kwargs)
        return self._trace(key, args, kwargs, entries)

    # --- tracing -------------------------------------------------------------------------
    def _trace(self, key, args, kwargs, entries: list):
        start = time.perf_counter()
        before = python_constants(self.fn)
        graph, result, escaped = capture(self.fn, args, kwargs)
        self.stats.traces += 1
        entry = Entry(graph, None, _mutated(graph), any(n.op in _RANDOM_OPS for n in graph.nodes))
        after = python_constants(self.fn)
        if after != before:
            changed = sorted(name for (name, v) in set(after) ^ set(before))
            entry.eager_reason = "python side effect"
            warn_once(self._warned, "python", f"mini.jit: {self._name()} changes Python state it "
                      f"reads ({', '.join(changed[:3])}): a replay would not; it runs eagerly")
        elif escaped:
            entry.eager_reason = "escaped tensor"
            warn_once(self._warned, "escape", f"mini.jit: {self._name()} keeps {escaped[0]} "
                      f"somewhere other than its return value (a list, an attribute, a global): "
                      f"a replay would not update it; it runs eagerly. Return it instead.")
        elif any(t.requires_grad for t in flatten_tensors(result)):
            entry.eager_reason = "autograd"
            warn_once(self._warned, "grad", f"mini.jit: {self._name()} computes tensors that "
                      f"require grad: a replay records no autograd graph, so it runs eagerly "
                      f"(call it under mini.no_grad() to replay it)")
        else:
            entry.structure = _structure(result, graph)
            lower(graph)
            if self.fuse:
                from mini.jit.fusion import fuse
                entry.graph = fuse(graph)
        entries.insert(0, entry)
        self.stats.compile_seconds += time.perf_counter() - start
        return result

    def _eager_reason(self, args, kwargs) -> str | None:
        if _function._op_observer is not None:
            return "observer"
        if _fw._LEVEL[0]:
            return "forward AD"
        grad_on = grad_mode.is_grad_enabled()
        for t in flatten_tensors((args, kwargs)):
            if not t._data.storage.device.host_buffers:
                return "device"
            if grad_on and t.requires_grad:
                return "autograd"
        return None

    def _eager(self, reason: str, args, kwargs):
        self.stats.eager(reason)
        return self.fn(*args, **kwargs)

    def _name(self) -> str:
        return getattr(self.fn, "__qualname__", None) or type(self.fn).__name__

    def __repr__(self):
        s = self.stats
        return (f"<traced {self._name()}: {s.traces} traces, {s.replays} replays, "
                f"{s.guard_failures} guard failures, {s.eager_calls} eager calls>")


def _mutated(graph: Graph) -> list:
    out = []
    for node in graph.nodes:
        if node.inplace and node.args and isinstance(node.args[0], Ref):
            target = _written(graph, node.args[0])
            if target.kind in ("input", "captured") and target not in out:
                out.append(target)
    return out


def _structure(result, graph: Graph):
    """The returned value with the k-th tensor replaced by ``Ref("output", k)`` (the k-th of
    ``graph.outputs``, whatever graph fusion makes of it)."""
    count = iter(range(len(graph.outputs)))
    return map_outputs(result, lambda t: Ref("output", next(count)))


_ = Tensor  # (the names above are the public API of this module)
