"""Hidden checks of chapter 01 (framework design): the stopwatch and the napkin math of
dispatch and compilation, the tracer (recording, guards, replay) and the fuser (chains,
generated kernels), and five self-check questions.

The measurement exercises are checked on plain numbers and formulas, never on wall time:
the stopwatch runs on a scripted clock (scenario ``stopwatch``), the fits and the laws on
numbers drawn by the check, against numpy oracles written here.  The tracer and fuser
exercises run as scenarios (:mod:`grader.worker.scenarios.ch01`) on scripted functions next
to the student's code; their observations (graphs, outputs, guard failures, generated
kernels' results) are compared with the same scenario run on mini's reference in the
trusted process.  Graphs handed to ``replay``, ``find_chains`` and ``kernel_body`` are
recorded by the grader's own recorder, so each exercise is checked on its own.
"""
from __future__ import annotations

import math

import numpy as np

from grader.checks import check, part
from grader.checks.helpers import (call, call_text, describe, expect_choice, expect_float,
                                   expect_raises, fail, raised_as_failure, rng)
from grader.worker.codec import ExceptionRecord

CANARY = "mini-grader-canary: hidden checks of chapter 01 (never in feedback)"

# Points, the one source: `mini-course build` prices the notebook's test cells and its
# "What you build" table from this dict (100 in all for the chapter).
POINTS = {
    "01.time_per_call": 8,
    "01.fit_dispatch": 8,
    "01.dispatch_law": 6,
    "01.record_op": 12,
    "01.guard_key": 10,
    "01.replay": 12,
    "01.find_chains": 12,
    "01.kernel_body": 12,
    "01.break_even": 6,
    "01.crossover": 4,
    "01.quiz_numpy_gap": 2,
    "01.quiz_recompile": 2,
    "01.quiz_trace_branch": 2,
    "01.quiz_modules": 2,
    "01.quiz_selection": 2,
}

#: The mini modules that own this chapter's slots (importing them declares the slots).
SLOT_OWNERS = ("mini.jit", "mini.jit.fusion", "mini.napkin.compile")


def import_slot_owners() -> None:
    import importlib
    for name in SLOT_OWNERS:
        importlib.import_module(name)


def _scenario(fn, name: str, **params):
    """The student's observations of scenario ``name``; an exception raised by the student's
    code becomes a failure naming the exercise (a stub: "not implemented")."""
    from grader.checks.student import StudentRaised
    try:
        return fn.scenario(name, **params)
    except StudentRaised as e:
        raise raised_as_failure(e, f"the grader's {name.replace('_', ' ')} scenario") from None


def _raised(record, what: str) -> None:
    """Fail with the exception the student's code raised inside a scenario."""
    if type(record) is ExceptionRecord:
        if record.not_implemented:
            from grader.checks import NotDone
            raise NotDone(record.slot_id, record.text())
        fail(f"{what} raised {record.text()}")
    fail(f"{what} failed")


def _close(a: float, b: float, rtol: float = 1e-9) -> bool:
    return abs(a - b) <= rtol * max(abs(a), abs(b), 1e-300)


# =========================================================================== 01.time_per_call

def _stopwatch_oracle(case: dict, warmup: int | None = None, keep=min):
    """What a correct stopwatch returns on the scripted machine of scenario ``stopwatch``
    (``warmup`` and ``keep`` replaced to model typical mistakes)."""
    costs, rc = case["costs"], case["read_cost"]
    warm = case["warmup"] if warmup is None else warmup
    now, k = 0.0, 0
    for _ in range(warm):
        now += costs[min(k, len(costs) - 1)]
        k += 1
    rounds = []
    for _ in range(case["repeats"]):
        start = now
        now += rc
        for _ in range(case["calls"]):
            now += costs[min(k, len(costs) - 1)]
            k += 1
        end = now
        now += rc
        rounds.append(end - start)
    return keep(rounds) / case["calls"], k


def _mean(xs):
    return sum(xs) / len(xs)


@check("01.time_per_call", points=POINTS["01.time_per_call"])
def check_time_per_call(fn):
    gen = rng()
    cases = []
    for _ in range(6):
        calls, repeats, warmup = int(gen.integers(3, 9)), int(gen.integers(2, 6)), int(gen.integers(1, 4))
        n = warmup + calls * repeats + 3
        costs = [float(c) for c in gen.uniform(0.5, 2.0, n)]
        for i in range(warmup):
            costs[i] = float(gen.uniform(20, 60))       # first calls: cold caches, a compile
        cases.append({"costs": costs, "read_cost": 1e-3, "calls": calls, "repeats": repeats,
                      "warmup": warmup})
    costs = [float(gen.uniform(20, 60))] + [1.0] * 20
    cases.append({"costs": costs, "read_cost": 1e-3, "calls": 4, "repeats": 2, "warmup": 0})
    bad = [{"costs": [1.0], "read_cost": 0.0, "calls": c, "repeats": r, "warmup": w}
           for c, r, w in ((0, 3, 1), (3, 0, 1), (3, 3, -1))]
    got = _scenario(fn, "stopwatch", cases=cases + bad)
    if type(got) is not list or len(got) != len(cases) + len(bad):
        fail("time_per_call: the grader's scripted clock scenario did not complete")
    for case, g in zip(cases, got):
        what = (f"time_per_call(fn, calls={case['calls']}, repeats={case['repeats']}, "
                f"warmup={case['warmup']}, clock=<scripted clock>)")
        if "raised" in g:
            _raised(g["raised"], what)
        want, n_calls = _stopwatch_oracle(case)
        value = g["value"]
        if type(value) not in (float, int) or not g["is_float"]:
            fail(f"{what} should return a float (seconds per call), got {describe(value)}")
        if _close(float(value), want, 1e-9):
            if g["calls"] != n_calls:
                fail(f"{what} called fn {g['calls']} times; warm-up plus repeats x calls is "
                     f"{n_calls}")
            continue
        hints = []
        if case["warmup"] and _close(float(value), _stopwatch_oracle(case, warmup=0)[0], 1e-9):
            hints.append("the slow first call(s) landed inside a timed round: call fn `warmup` "
                         "times before timing (timing without warm-up)")
        if _close(float(value), _stopwatch_oracle(case, keep=_mean)[0], 1e-9):
            hints.append("that is the mean of the rounds; keep the fastest round (interference "
                         "only adds time)")
        if g["reads"] > 2 * case["repeats"]:
            hints.append(f"the clock was read {g['reads']} times: read it once before and once "
                         f"after each round ({2 * case['repeats']} reads), not around every call")
        if _close(float(value), want * case["calls"], 1e-9):
            hints.append("that is the time of a whole round: divide by the calls per round")
        if _close(float(value), want / case["repeats"], 1e-9):
            hints.append("divide the fastest round by the calls in one round, not by all calls")
        fail(f"{what} returned {float(value):.6g} s; the scripted machine takes {want:.6g} s per "
             f"call in its fastest round" + (f": {'; '.join(hints)}" if hints else ""))
    for case, g in zip(bad, got[len(cases):]):
        what = (f"time_per_call(fn, calls={case['calls']}, repeats={case['repeats']}, "
                f"warmup={case['warmup']})")
        if "raised" not in g:
            fail(f"{what} should raise ValueError naming the bad argument, but returned "
                 f"{describe(g.get('value'))}")
        rec = g["raised"]
        if type(rec) is ExceptionRecord and rec.not_implemented:
            _raised(rec, what)
        if type(rec) is not ExceptionRecord or not rec.is_a("ValueError"):
            fail(f"{what} should raise ValueError, got {describe(rec)}")


# =========================================================================== 01.fit_dispatch

def _fit_oracle(n, t):
    n, t = np.asarray(n, float), np.asarray(t, float)
    a = np.stack([1 / t, n / t], axis=1)
    (td, te), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    return float(td), float(te), float(td / te)


def _sweep(gen, noise: float):
    sizes = np.unique(np.concatenate([np.geomspace(1, 10 ** gen.integers(5, 8), int(gen.integers(7, 12))),
                                      gen.integers(1, 10 ** 5, 3)]).astype(np.int64))
    td, te = gen.uniform(0.5e-6, 10e-6), gen.uniform(0.2e-9, 5e-9)
    t = (td + sizes * te) * np.exp(gen.normal(0, noise, sizes.size))
    return sizes, t, td, te


@check("01.fit_dispatch", points=POINTS["01.fit_dispatch"])
def check_fit_dispatch(fn):
    gen = rng()
    for trial in range(8):
        sizes, t, td, te = _sweep(gen, 0.0 if trial == 0 else float(gen.uniform(0.03, 0.12)))
        what = call_text("fit_dispatch", sizes, t)
        got = call(fn, sizes, t, name="fit_dispatch")
        if type(got) is not tuple or len(got) != 3:
            fail(f"{what} should return the tuple (t_dispatch, t_element, crossover), got "
                 f"{describe(got)}")
        vals = [expect_float(v, f"{what}[{i}]") for i, v in enumerate(got)]
        want = _fit_oracle(sizes, t)
        if all(_close(a, b, 1e-6) for a, b in zip(vals, want)):
            continue
        if _close(vals[0], want[0], 1e-6) and _close(vals[1], want[1], 1e-6):
            fail(f"{what}: t_dispatch and t_element are right but the crossover is {vals[2]:.6g}, "
                 f"expected {want[2]:.6g}: the crossover is the size at which one op's arithmetic "
                 f"takes as long as its dispatch")
        slope, icept = np.polyfit(sizes.astype(float), t, 1)
        hint = ""
        if _close(vals[0], float(icept), 1e-4) or _close(vals[1], float(slope), 1e-4):
            hint = ("; that is an ordinary least-squares fit, where the largest sizes decide "
                    "everything: minimise the relative error instead")
        fail(f"{what} returned t_dispatch = {vals[0]:.6g} s, t_element = {vals[1]:.6g} s; "
             f"expected {want[0]:.6g} s and {want[1]:.6g} s{hint}")
    sizes, t, _, _ = _sweep(gen, 0.0)
    expect_raises(ValueError, fn, sizes, t[:-1], name="fit_dispatch",
                  hint="sizes and seconds of different lengths")
    expect_raises(ValueError, fn, np.array([100, 100, 100]), np.array([1e-6, 2e-6, 3e-6]),
                  name="fit_dispatch", hint="a single distinct size cannot give a line")
    expect_raises(ValueError, fn, np.array([1, 10, 100]), np.array([1e-6, 0.0, 3e-6]),
                  name="fit_dispatch", hint="a time of 0 s is not a measurement")
    expect_raises(ValueError, fn, np.array([1, 1000, 100000]), np.array([5e-6, 3e-6, 1e-6]),
                  name="fit_dispatch",
                  hint="times that fall with the size give a negative t_element: no crossover")


# =========================================================================== 01.dispatch_law

def _law(n, td, tc, tm):
    hw = tc + tm
    r = n * td / hw
    return {"ratio": r, "share": r / (1 + r), "speedup": 1 + r, "step": n * td + hw}


@check("01.dispatch_law", points=POINTS["01.dispatch_law"])
def check_dispatch_law(fn):
    gen = rng()
    cases = [(6, 15e-6, 2.6e-6, 0.0), (12, 15e-6, 0.1, 0.0), (1, 15e-6, 1e-6, 0.0),
             (1, 15e-6, 100e-6, 0.0)]
    cases += [(int(gen.integers(1, 400)), float(gen.uniform(1e-6, 30e-6)),
               float(gen.uniform(0, 1e-3)), float(gen.uniform(1e-6, 1e-3))) for _ in range(6)]
    for n, td, tc, tm in cases:
        what = call_text("dispatch_law", n, td, tc, tm)
        got = call(fn, n, td, tc, tm, name="dispatch_law")
        if type(got) is not dict:
            fail(f"{what} should return a dict with keys ratio, share, speedup and step, got "
                 f"{describe(got)}")
        want = _law(n, td, tc, tm)
        missing = [k for k in want if k not in got]
        if missing:
            fail(f"{what}: the dict has no {missing}")
        for key, hint in (
                ("ratio", "R is the host's dispatch time (N·t_d) over the hardware's time"),
                ("share", "the share is the fraction of the whole step spent dispatching, "
                          "dispatch over dispatch plus work (not R itself)"),
                ("speedup", "the speedup is the step's time with dispatch over its time "
                            "without: how much faster it gets if dispatch disappears"),
                ("step", "the step runs its dispatch and its work one after the other")):
            value = expect_float(got[key], f"{what}['{key}']")
            if not _close(value, want[key], 1e-9):
                fail(f"{what}['{key}'] is {value:.6g}, expected {want[key]:.6g}: {hint}")
    expect_raises(ValueError, fn, 6, 15e-6, 0.0, 0.0, name="dispatch_law",
                  hint="no hardware time: the ratio is undefined")
    expect_raises(ValueError, fn, -1, 15e-6, 1e-6, name="dispatch_law",
                  hint="a negative number of ops")


# =========================================================================== the footguns

_FOOTGUN_HINTS = {
    "a constant the function reads changes": "a value the trace baked in changed",
    "a Python argument changes": "a Python number passed as an argument is baked into the "
                                 "graph: its value and type must be part of the key",
    "a new shape or layout": "a graph recorded for one shape, dtype or layout must not run "
                             "for another",
    "a branch goes the other way": "the branch's value is a guard: record it, and check it "
                                   "when the graph runs again",
    "a value read with .item()": "a value read into Python is a guard too",
    "an output kept across calls": "each call's outputs are new arrays: a later call must "
                                   "not write into an earlier call's outputs",
    "state updated in place": "an in-place update is an op of the graph: each call runs it once",
    "random draws": "a random draw is an op of the graph: each call draws again, once",
    "same guards, five calls": "calls with the same guards must replay one graph (compile "
                               "once), not trace again",
}


def _footguns(fn, slot: str, label: str) -> None:
    """tinygrad's JIT footguns through mini.jit.trace, with the student's ``slot`` and the
    grader's versions of the other two tracer slots: every call must agree with eager mode,
    and trace as often as mini's reference does."""
    seed = int(rng().integers(0, 2**31))
    got = _scenario(fn, "footguns", slot=slot, seed=seed)
    want = fn.expected("footguns", slot=slot, seed=seed)
    if type(got) is not dict or set(got) != set(want):
        fail(f"{label}: the grader's footgun scenario did not complete")
    for case, (ok, traces, replays) in want.items():
        g_ok, g_traces, g_replays = got[case]
        if not g_ok:
            fail(f"{label}: with your {slot[3:]}, mini.jit.trace returned other values than "
                 f"eager mode when {case}: {_FOOTGUN_HINTS[case]} (a silent mismatch)")
        if (g_traces, g_replays) != (traces, replays):
            fail(f"{label}: with your {slot[3:]}, when {case} mini.jit.trace traced "
                 f"{g_traces} times and replayed {g_replays} times; the reference traces "
                 f"{traces} times and replays {replays} times: {_FOOTGUN_HINTS[case]}")


# =========================================================================== 01.record_op

_SCRIPTS_CODE = {
    "arith": "(x * 2.0 + y).relu() - 0.5",
    "captured": "(x * w + w).sum(dim=1, keepdim=True), with w from a closure",
    "nested": "m[:, i] * 2.0, with i an index tensor",
    "keywords": "state.add_(x, alpha=0.5); return x - state",
    "branch_pos": "x * 2.0 if x.sum() > 0 else x * 3.0 (positive x)",
    "branch_neg": "x * 2.0 if x.sum() > 0 else x * 3.0 (negative x)",
    "item": "x / x.abs().max().item()",
    "draws": "x + mini.rand(*x.shape)",
}


def _ops(summary) -> list:
    return [n[0] for n in summary["nodes"]]


def _result_equal(a, b) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if type(x) is np.ndarray and type(y) is np.ndarray:
            if x.shape != y.shape or not np.array_equal(x, y, equal_nan=True):
                return False
        elif x != y:
            return False
    return True


@check("01.record_op", points=POINTS["01.record_op"])
def check_record_op(fn):
    seed = int(rng().integers(0, 2**31))
    got = _scenario(fn, "record_scripts", seed=seed)
    want = fn.expected("record_scripts", seed=seed)
    if type(got) is not dict or set(got) != set(want):
        fail("record_op: the grader's tracing scenario did not complete")

    def script(name):
        what = f"tracing `{_SCRIPTS_CODE[name]}` with your record_op"
        g, w = got[name], want[name]
        if "raised" in g:
            _raised(g["raised"], what)
        return what, g, w

    with part("ops recorded in order, results returned", 3):
        for name in ("arith", "captured", "nested"):
            what, g, w = script(name)
            if _ops(g["graph"]) != _ops(w["graph"]):
                fail(f"{what} recorded the ops {_ops(g['graph'])}, expected {_ops(w['graph'])} "
                     f"(one node per op, in the order they ran)")
            if not _result_equal(g["result"], w["result"]):
                fail(f"{what}: the traced function computed other values than eager mode: "
                     f"record_op must return exactly what run() returned")
    with part("tensors as Refs, constants as they are", 3):
        for name in ("arith", "captured", "nested", "keywords"):
            what, g, w = script(name)
            gg, ww = g["graph"], w["graph"]
            if gg["captured"] > ww["captured"]:
                fail(f"{what} captured {gg['captured']} tensors, expected {ww['captured']}: a "
                     f"tensor the graph already knows (an input, an earlier result) is not "
                     f"captured again (graph.ref_of first), or an intermediate would be baked "
                     f"in as a constant")
            for gn, wn in zip(gg["nodes"], ww["nodes"]):
                if gn[1] != wn[1]:
                    hint = ""
                    if any(type(a) in (tuple, list) for a in wn[1]):
                        hint = ": tensors inside tuples and lists become Refs too"
                    fail(f"{what}: node {wn[0]} recorded the arguments {describe(gn[1])}, "
                         f"expected {describe(wn[1])}{hint}")
                if gn[2] != wn[2]:
                    fail(f"{what}: node {wn[0]} recorded the keyword arguments "
                         f"{describe(gn[2])}, expected {describe(wn[2])}")
            if gg["captured"] != ww["captured"] or gg["outputs"] != ww["outputs"]:
                fail(f"{what}: {gg['captured']} captured tensors and outputs {gg['outputs']}, "
                     f"expected {ww['captured']} and {ww['outputs']}")
    with part("every op recorded once, guards included", 4):
        for name in ("branch_pos", "branch_neg", "item"):
            what, g, w = script(name)
            if "item" in _ops(w["graph"]) and "item" not in _ops(g["graph"]):
                fail(f"{what} recorded {_ops(g['graph'])}: the branch's value was not recorded, "
                     f"so a replay would follow the traced branch for every input (a trace "
                     f"that ignores a branch): record ops that return a Python value too, as "
                     f"guards")
            if [n[5] for n in g["graph"]["nodes"]] != [n[5] for n in w["graph"]["nodes"]] \
                    or _ops(g["graph"]) != _ops(w["graph"]):
                fail(f"{what} recorded {_ops(g['graph'])} with guard values "
                     f"{[n[5] for n in g['graph']['nodes'] if n[4]]}, expected "
                     f"{_ops(w['graph'])} and {[n[5] for n in w['graph']['nodes'] if n[4]]}")
        what, g, w = script("keywords")
        if not np.array_equal(got["state_after"], want["state_after"]):
            fail(f"{what}: the in-place update ran a different number of times than in eager "
                 f"mode: call run() exactly once")
        what, g, w = script("draws")
        if not _result_equal(g["result"], w["result"]):
            fail(f"{what}: the random draw differs from eager mode's: call run() exactly once "
                 f"(a second call draws new numbers)")
    with part("tinygrad's JIT footguns", 2):
        _footguns(fn, "01.record_op", "record_op")


# =========================================================================== 01.guard_key

_MUST_DIFFER = {
    "another shape": "the shape",
    "another dtype": "the dtype",
    "other strides": "the strides (a transposed layout makes other kernels run)",
    "another device": "the device",
    "requires_grad": "requires_grad",
    "empty and 0-d": "the shape",
    "another number": "the value of a Python number (it is baked into the graph as a "
                      "constant: constants not guarded)",
    "int and float": "the type of a Python number (2 and 2.0 give other dtypes)",
    "int and bool": "the type of a Python value (1 and True compare equal but are not the same)",
    "two strings": "the value of a string",
    "list and tuple": "the kind of container (a list or a tuple)",
    "nested, other number": "a number inside a list",
    "one more argument": "the number of arguments",
    "keyword, other name": "the name of a keyword argument",
}
_MUST_MATCH = {
    "same layout, other values": "tensor values (the graph works for any values)",
    "None and None": "tensor values (None is None)",
    "nested, same": "tensor values inside a list",
    "keyword, same": "tensor values",
    "keywords in another order": "the order of keyword arguments (f(x, a=1, b=2) is "
                                 "f(x, b=2, a=1))",
    "dict argument": "tensor values inside a dict",
    "0-d tensors": "tensor values",
}
_GUARD_PARTS = {
    "tensor layout": (3, ["same layout, other values", "another shape", "another dtype",
                          "other strides", "another device", "requires_grad", "0-d tensors",
                          "empty and 0-d"]),
    "Python values and their types": (3, ["another number", "int and float", "int and bool",
                                          "None and None", "two strings"]),
    "structure, keywords and refusals": (2, ["list and tuple", "nested, same",
                                             "nested, other number", "one more argument",
                                             "keyword, same", "keyword, other name",
                                             "keywords in another order", "dict argument"]),
}


@check("01.guard_key", points=POINTS["01.guard_key"])
def check_guard_key(fn):
    seed = int(rng().integers(0, 2**31))
    got = _scenario(fn, "guard_keys", seed=seed)
    if type(got) is not dict or "pairs" not in got:
        fail("guard_key: the grader's scenario did not complete")
    for label, (points, names) in _GUARD_PARTS.items():
        with part(label, points):
            for name in names:
                g = got["pairs"].get(name)
                if g is None:
                    fail(f"guard_key: no observation for the case {name!r}")
                if "raised" in g:
                    _raised(g["raised"], f"guard_key on two calls whose arguments differ in {name}")
                if not g["hashable"]:
                    fail("guard_key returned a key that cannot be hashed: a cache key must be "
                         "usable in a dict (tuples, not lists)")
                if not g["stable"]:
                    fail("guard_key gave two different keys for the very same call: build the "
                         "key from the arguments' layout and values only")
                if name in _MUST_DIFFER and g["equal"]:
                    fail(f"guard_key gave the same key to two calls that differ in "
                         f"{_MUST_DIFFER[name]}: a replay would run a graph recorded for the "
                         f"other call")
                if name in _MUST_MATCH and not g["equal"]:
                    fail(f"guard_key gave different keys to two calls that differ only in "
                         f"{_MUST_MATCH[name]}: every such call would trace again")
            if label == "structure, keywords and refusals":
                for case, r in got["refused"].items():
                    if r == "no error":
                        fail(f"guard_key should raise TypeError for an argument that is a "
                             f"{case}: the trace cannot guard it; it returned a key")
                    if type(r) is not dict or r.get("type") != "TypeError":
                        fail(f"guard_key should raise TypeError for a {case}, got "
                             f"{describe(r)}")
                    if not r.get("names_it"):
                        fail(f"guard_key's TypeError for a {case} should name the argument "
                             f"(args[1], kwargs['scale'])")
    with part("tinygrad's JIT footguns", 2):
        _footguns(fn, "01.guard_key", "guard_key")


# =========================================================================== 01.replay

_REPLAY_CODE = {
    "chain": "((x * 1.5 + y).tanh() - x) * 0.5",
    "two_outputs": "h = x * y; return h.exp(), (h + 1.0).relu()",
    "nested": "m[:, i].sum(dim=1) * 2.0 (a tensor inside the index tuple)",
    "captured": "(x - w) * w, with w captured",
    "branch": "x * 2.0 if x.sum() > 0 else x * 3.0, traced on a positive x, run on a negative one",
}


@check("01.replay", points=POINTS["01.replay"])
def check_replay(fn):
    seed = int(rng().integers(0, 2**31))
    got = _scenario(fn, "replays", seed=seed)
    want = fn.expected("replays", seed=seed)
    if type(got) is not dict or set(got) != set(want):
        fail("replay: the grader's scenario did not complete")

    def values_of(name):
        what = f"replay of the graph of `{_REPLAY_CODE[name]}`"
        g, w = got[name], want[name]
        if "raised" in g:
            _raised(g["raised"], what)
        if "not_a_list" in g:
            fail(f"{what} should return a list of the outputs' values, got a {g['not_a_list']}")
        if len(g["values"]) != len(w["values"]):
            fail(f"{what} returned {len(g['values'])} values, the graph has "
                 f"{len(w['values'])} outputs")
        for k, (a, b) in enumerate(zip(g["values"], w["values"])):
            if type(a) is not np.ndarray or a.shape != b.shape or \
                    not np.array_equal(a, b, equal_nan=True):
                fail(f"{what}: output {k} is {describe(a)}, expected {describe(b)}: each node "
                     f"runs node.kernel on the values of its arguments")
        return what, g

    with part("runs every node on the values of its arguments", 3):
        for name in ("chain", "two_outputs", "captured"):
            values_of(name)
    with part("Refs inside tuples and lists", 2):
        values_of("nested")
    with part("guards", 3):
        g = got["branch"]
        what = f"replay of the graph of `{_REPLAY_CODE['branch']}`"
        if "raised" not in g:
            fail(f"{what} returned values: the guard recorded True and now sees False, so "
                 f"replay must raise GuardFailed before running later nodes (a replay that "
                 f"ignores its guards runs the stale branch)")
        rec = g["raised"]
        if type(rec) is ExceptionRecord and rec.not_implemented:
            _raised(rec, what)
        if type(rec) is not ExceptionRecord or rec.type_name != "GuardFailed":
            fail(f"{what} should raise GuardFailed, got {describe(rec)}")
        if (g.get("index"), g.get("expected"), g.get("got")) != (2, True, False):
            fail(f"{what}: GuardFailed should carry the guard's node index (2), the value the "
                 f"trace saw (True) and the one this call gives (False); got index "
                 f"{g.get('index')!r}, expected {g.get('expected')!r}, got {g.get('got')!r}")
    with part("new outputs on every call, env untouched", 2):
        for name in ("chain", "two_outputs", "nested", "captured"):
            what, g = values_of(name)
            if g["shared"]:
                fail(f"{what}: two calls returned outputs that share memory: each call's "
                     f"outputs belong to its caller, a later call must not reuse their buffers "
                     f"(a replay that aliases its output buffer across calls)")
            if not g["third_equal"]:
                fail(f"{what}: writing into the outputs of one call changed a later call's "
                     f"results: keep no buffer of an output between calls")
            if not g["env_unchanged"]:
                fail(f"{what} changed env (its keys or its arrays): work on a copy of the dict")
    with part("tinygrad's JIT footguns", 2):
        _footguns(fn, "01.replay", "replay")


# =========================================================================== 01.find_chains

_CHAIN_PARTS = {
    "chains of elementwise ops": (4, ["gelu", "two inputs", "apart", "reversed", "float64"]),
    "stops where one kernel cannot go on": (4, ["reduction", "broadcast", "integers", "guard",
                                                "single"]),
    "keeps values that are needed elsewhere": (4, ["read twice", "returned"]),
}
_CHAIN_HINTS = {
    "reduction": "a reduction (Sum) is never part of a chain: fusion across a reduction "
                 "would compute element i from many elements",
    "broadcast": "an op whose tensor arguments have another shape (a broadcast) cannot be "
                 "read with the chain's one index i",
    "integers": "chains are float32 or float64 only",
    "guard": "a guard (item, gt) is not elementwise arithmetic, and a value read by two "
             "nodes must be stored",
    "single": "a chain needs at least 2 nodes",
    "read twice": "the result x * 2.0 is read by two nodes: it must be stored, so no chain "
                  "may swallow it; a chain only continues into the one node that reads the "
                  "previous result",
    "returned": "a value the function returns is needed outside the chain: a chain cannot "
                "continue past it",
    "apart": "chain members need not be neighbours in graph.nodes: follow the one node that "
             "reads each result",
}


@check("01.find_chains", points=POINTS["01.find_chains"])
def check_find_chains(fn):
    seed = int(rng().integers(0, 2**31))
    got = _scenario(fn, "chains", seed=seed)
    want = fn.expected("chains", seed=seed)
    if type(got) is not dict or set(got) != set(want):
        fail("find_chains: the grader's scenario did not complete")
    for label, (points, names) in _CHAIN_PARTS.items():
        with part(label, points):
            for name in names:
                g, w = got[name], want[name]
                what = f"find_chains on a graph with the ops {w['ops']}"
                if "raised" in g:
                    _raised(g["raised"], what)
                chains = g["chains"]
                if type(chains) is dict:
                    fail(f"{what} should return a list of chains (lists of node indices), got "
                         f"{describe(chains)}")
                if chains == w["chains"]:
                    continue
                ops = w["ops"]
                swallowed = sorted({ops[i] for c in chains for i in c
                                    if 0 <= i < len(ops)} & {"Sum", "Mean", "MatMul", "item", "gt"})
                hint = _CHAIN_HINTS.get(name, "")
                if swallowed:
                    hint = (f"the chain contains {swallowed}: fusion across a reduction or a "
                            f"guard; {hint}")
                fail(f"{what} returned {chains}, expected {w['chains']}"
                     + (f": {hint}" if hint else ""))


# =========================================================================== 01.kernel_body

@check("01.kernel_body", points=POINTS["01.kernel_body"])
def check_kernel_body(fn):
    seed = int(rng().integers(0, 2**31))
    got = _scenario(fn, "kernels", seed=seed)
    want = fn.expected("kernels", seed=seed)
    if type(got) is not dict or set(got) != set(want):
        fail("kernel_body: the grader's scenario did not complete")
    exact = {"two inputs", "float constants", "reversed"}

    def case(name):
        g, w = got[name], want[name]
        what = f"kernel_body for the chain {w['ops']}"
        if "raised" in g:
            _raised(g["raised"], what)
        if "bad_result" in g:
            fail(f"{what} should return (body, inputs): a str and a list of Refs, got "
                 f"{g['bad_result']}")
        return what, g, w

    with part("inputs: each once, in the order first read", 4):
        for name in want:
            what, g, w = case(name)
            if g["inputs"] != w["inputs"]:
                hint = ""
                if len(g["inputs"]) > len(set(map(repr, g["inputs"]))):
                    hint = (": a value the chain reads several times is one input, loaded "
                            "once (each extra input is another N numbers read from memory)")
                elif any(r in w["inputs"] for r in g["inputs"]) and len(g["inputs"]) == len(w["inputs"]):
                    hint = ": list them in the order the chain first reads them"
                elif any(type(r) is tuple and r[:2] == ("ref", "node") for r in g["inputs"]):
                    hint = (": a node of the chain is computed inside the kernel, not an input; "
                            "inputs are values from outside the chain")
                fail(f"{what} listed the inputs {g['inputs']}, expected {w['inputs']}{hint}")
    with part("the kernel computes what eager computes", 4):
        for name in want:
            what, g, w = case(name)
            if "compile_error" in g:
                fail(f"{what}: the generated kernel does not compile:\n{g['compile_error']}")
            if "out" not in g:
                fail(f"{what}: the kernel could not run (check the inputs)")
            a, b = g["out"], w["out"]
            same = np.array_equal(a, b) if name in exact else np.allclose(a, b, rtol=1e-6, atol=1e-6)
            if not same:
                hint = ""
                if name == "float constants" and np.allclose(a, b, rtol=1e-5):
                    hint = (": the values differ in the last bits: write constants in the chain's "
                            "dtype (static_cast<float>(0.1)), as eager rounds 0.1 to float32 "
                            "before multiplying")
                elif np.isnan(a).any():
                    hint = ": some elements were never written: store out[i] for every i"
                fail(f"{what}: the kernel's results differ from eager mode's{hint}")
    with part("out may be the buffer of an input", 4):
        for name in want:
            what, g, w = case(name)
            if "aliased" not in g:
                continue
            if not np.array_equal(g["aliased"], g["out"], equal_nan=True):
                fail(f"{what}: with out being the buffer of its first input the kernel computes "
                     f"other values: it writes out before it has read every input, or reads "
                     f"out back (a fused kernel that reads its own output); keep values in "
                     f"variables and store out[i] once, at the end")


# =========================================================================== 01.break_even

@check("01.break_even", points=POINTS["01.break_even"])
def check_break_even(fn):
    gen = rng()
    cases = [(30.0, 1 / 1450, 1 / 2150, 0)]
    for _ in range(6):
        te = float(gen.uniform(1e-4, 1.0))
        cases.append((float(gen.uniform(0.1, 60)), te, te * float(gen.uniform(0.1, 0.9)),
                      int(gen.integers(0, 5))))
    for t_compile, te, tc, rec in cases:
        what = call_text("break_even", t_compile, te, tc, recompiles=rec)
        got = expect_float(call(fn, t_compile, te, tc, recompiles=rec, name="break_even"), what)
        want = t_compile * (1 + rec) / (te - tc)
        if _close(got, want, 1e-9):
            continue
        hint = ""
        if rec and _close(got, t_compile / (te - tc), 1e-9):
            hint = "; each recompile costs another compile"
        elif _close(got, t_compile * (1 + rec) / te, 1e-9):
            hint = "; a compiled call still costs T_c: compiling saves T_e − T_c per call"
        elif _close(got, te / (te - tc), 1e-9) or _close(got, 0.0, 1e-9):
            hint = "; the compile time is left out of the break-even"
        fail(f"{what} returned {got:.6g}, expected {want:.6g} calls{hint}")
    expect_raises(ValueError, fn, 30.0, 1.0, 1.5, name="break_even",
                  hint="a compiled call slower than eager never pays off")
    expect_raises(ValueError, fn, 30.0, 1.0, 1.0, name="break_even",
                  hint="a compiled call as slow as eager never pays off")
    expect_raises(ValueError, fn, -1.0, 1.0, 0.5, name="break_even", hint="a negative time")


# =========================================================================== 01.crossover

def _crossover_oracle(e, c, t):
    ahead = np.flatnonzero(t + np.cumsum(c) <= np.cumsum(e))
    return int(ahead[0]) + 1 if ahead.size else None


@check("01.crossover", points=POINTS["01.crossover"])
def check_crossover(fn):
    gen = rng()
    cases = []
    for _ in range(5):
        n = int(gen.integers(50, 400))
        te, tc = float(gen.uniform(1e-3, 5e-3)), float(gen.uniform(1e-4, 9e-4))
        e = te * np.exp(gen.normal(0, 0.2, n))
        c = tc * np.exp(gen.normal(0, 0.2, n))
        cases.append((e, c, float((te - tc) * gen.uniform(5, n))))
    cases += [([1.0, 1.0, 1.0, 1.0], [0.5, 0.5, 0.5, 0.5], 1.0), ([2.0], [1.0], 0.0),
              ([1.0] * 3, [0.9] * 3, 5.0)]
    for e, c, t in cases:
        e, c = np.asarray(e, float), np.asarray(c, float)
        what = call_text("measured_crossover", e, c, t)
        got = call(fn, e, c, t, name="measured_crossover")
        want = _crossover_oracle(e, c, t)
        if want is None:
            if got is not None:
                fail(f"{what} returned {describe(got)}: the compiled total never catches up "
                     f"within these calls, so the answer is None")
            continue
        if type(got) is not int:
            fail(f"{what} should return an int (a number of calls), got {describe(got)}")
        if got == want:
            continue
        hints = []
        if got == want - 1:
            hints.append("count the calls from 1 (after n calls, not at index n)")
        if got == _crossover_oracle(e, c, 0.0):
            hints.append("if the compile time is left out, the compiled version's total starts "
                         "at 0 instead of t_compile")
        if got == want + 1:
            hints.append("the compiled total may equal the eager total (at most)")
        fail(f"{what} returned {got}, expected {want}" + (f": {'; or '.join(hints)}" if hints else ""))
    expect_raises(ValueError, fn, np.ones(3), np.ones(4), 1.0, name="measured_crossover",
                  hint="3 eager times and 4 compiled times")


# =========================================================================== quizzes

@check("01.quiz_numpy_gap", points=POINTS["01.quiz_numpy_gap"])
def check_quiz_numpy_gap(fn):
    expect_choice(fn, "answer_numpy_gap()", "C", {
        "A": "BLAS and LAPACK ran matrix products on one core decades before NumPy",
        "B": "the n-dimensional array is exactly what NumPy gave Python",
        "D": "calling compiled C and Fortran from Python is how NumPy works",
    })


@check("01.quiz_recompile", points=POINTS["01.quiz_recompile"])
def check_quiz_recompile(fn):
    expect_choice(fn, "answer_recompile()", "A", {
        "B": "compare what 10 steps save with what one compile costs",
        "C": "each compile costs time that must be paid back by the steps after it",
        "D": "the break-even rule does not depend on the device, only on the times",
    })


@check("01.quiz_trace_branch", points=POINTS["01.quiz_trace_branch"])
def check_quiz_trace_branch(fn):
    expect_choice(fn, "answer_trace_branch()", "C", {
        "A": "a trace records the ops of one run: the branch not taken never ran",
        "B": "bool(t) and t.item() work during a trace: they are what makes the branch",
        "D": "nothing removes the branch: it is frozen at the value it had during the trace",
    })


@check("01.quiz_modules", points=POINTS["01.quiz_modules"])
def check_quiz_modules(fn):
    expect_choice(fn, "answer_modules()", "D", {
        "A": "frameworks do not read your source code to find parameters",
        "B": "the garbage collector knows nothing about which model a tensor belongs to",
        "C": "layers do not list their parameters in class attributes: assignment registers them",
    })


@check("01.quiz_selection", points=POINTS["01.quiz_selection"])
def check_quiz_selection(fn):
    expect_choice(fn, "answer_selection()", "A", {
        "B": "a model that cannot reach its target device is not deployable, however fast it was to write",
        "C": "a community does not add an export path the framework lacks",
        "D": "desktop GPU speed says nothing about running on the embedded device",
    })


_ = math
