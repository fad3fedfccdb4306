"""The profiler: which operations a piece of code ran, how long each took, and what it
allocated.

    with mini.utils.profiler.profile() as prof:
        loss = model(x).sum()
        loss.backward()
    print(prof.table())
    prof.op_counts()        # {"MatMul": 2, "MatMulBackward0": 2, ...}
    prof.dispatch_seconds() # time spent around kernels (Python, graph recording)

Forward operations are recorded through the op observer of ``Function.apply``
(``mini.autograd.function.set_op_observer``), backward nodes when the engine runs them.
Each event keeps wall time and the bytes allocated inside it, so the dispatch-overhead law
of chapter 01 (time per op versus arithmetic) can be measured.
"""
from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field

from mini.exercises import LEARNER_CODE
from mini.ndarray.memory import _TOTAL

_ACTIVE: list = []


@dataclass
class OpStats:
    name: str
    count: int = 0
    seconds: float = 0.0
    bytes_allocated: int = 0


@dataclass
class Profile:
    events: list = field(default_factory=list)   # (name, phase, seconds, bytes, yours)
    wall_seconds: float = 0.0

    def record(self, name: str, phase: str, seconds: float, nbytes: int,
               yours: bool = False) -> None:
        self.events.append((name, phase, seconds, nbytes, yours))

    def learner_ops(self) -> int:
        """How many of the recorded ops ran a learner's code: an exercise registered with
        ``@implement`` ran inside the op, or the op was called from inside one."""
        return sum(1 for e in self.events if e[4])

    def stats(self) -> dict[str, OpStats]:
        out: dict[str, OpStats] = {}
        for name, _, sec, nbytes, _ in self.events:
            s = out.setdefault(name, OpStats(name))
            s.count += 1
            s.seconds += sec
            s.bytes_allocated += nbytes
        return out

    def op_counts(self, phase: str | None = None) -> dict[str, int]:
        counts: dict[str, int] = defaultdict(int)
        for name, ph, *_ in self.events:
            if phase is None or ph == phase:
                counts[name] += 1
        return dict(counts)

    @property
    def num_ops(self) -> int:
        return len(self.events)

    def op_seconds(self) -> float:
        """Total time inside recorded operations (kernels plus their dispatch)."""
        return sum(e[2] for e in self.events)

    def table(self, sort_by: str = "seconds") -> str:
        rows = sorted(self.stats().values(), key=lambda s: getattr(s, sort_by), reverse=True)
        lines = [f"{'op':<24}{'calls':>7}{'total ms':>11}{'us/call':>10}{'MB alloc':>10}"]
        for s in rows:
            lines.append(f"{s.name:<24}{s.count:>7}{s.seconds * 1e3:>11.3f}"
                         f"{s.seconds / s.count * 1e6:>10.1f}{s.bytes_allocated / 1e6:>10.3f}")
        lines.append(f"{len(self.events)} ops, {self.op_seconds() * 1e3:.3f} ms in ops, "
                     f"{self.wall_seconds * 1e3:.3f} ms wall")
        if self.learner_ops():
            lines.append(f"{self.learner_ops()} of the {len(self.events)} ops ran your code")
        return "\n".join(lines)


@contextmanager
def profile():
    """Record every operation run inside the block."""
    from mini.autograd import function
    prof = Profile()
    _ACTIVE.append(prof)
    # forward ops reach the profiler through the op observer of Function.apply (one hook
    # for every tool that watches ops); an observer installed before keeps seeing them
    previous = function.set_op_observer(None)
    function.set_op_observer(_observer(previous))
    start = time.perf_counter()
    try:
        yield prof
    finally:
        prof.wall_seconds = time.perf_counter() - start
        function.set_op_observer(previous)
        _ACTIVE.remove(prof)


def _observer(previous):
    def observe(name, op, args, kwargs, run):
        with record(name, "forward"):
            if previous is not None:
                return previous(name, op, args, kwargs, run)
            return run()
    return observe


_DEPTH = [0]


@contextmanager
def record(name: str, phase: str):
    """Time one operation for every active profiler (called by mini's dispatch).

    Only the outermost operation is recorded: the ops a backward rule runs are part of
    its node's cost, not separate events.  An op is the learner's when their code called it
    or ran inside it (``mini.exercises.LEARNER_CODE``)."""
    if _DEPTH[0]:
        yield
        return
    _DEPTH[0] += 1
    calls_before, inside = LEARNER_CODE[0], LEARNER_CODE[1] > 0
    bytes_before = _TOTAL.bytes
    start = time.perf_counter()
    try:
        yield
    finally:
        elapsed = time.perf_counter() - start
        _DEPTH[0] -= 1
        nbytes = _TOTAL.bytes - bytes_before
        yours = inside or LEARNER_CODE[0] != calls_before
        for prof in _ACTIVE:
            prof.record(name, phase, elapsed, nbytes, yours)
