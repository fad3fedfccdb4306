"""Typical wrong implementations of the chapter 01 exercises (framework design).

Each one is a plausible student answer; the checks of
:mod:`grader.checks.ch01_framework_design` must fail it with a message that names the
mistake.
"""
from __future__ import annotations

import time

import numpy as np

from grader.mistakes import Mistake


# --------------------------------------------------------------------- 01.time_per_call

def stopwatch_no_warmup(fn, calls=1000, repeats=5, warmup=1, clock=time.perf_counter):
    """Timing without warm-up: the first, slow calls land in the first round."""
    if calls < 1 or repeats < 1 or warmup < 0:
        raise ValueError("bad arguments")
    best = float("inf")
    for _ in range(repeats):
        start = clock()
        for _ in range(calls):
            fn()
        best = min(best, clock() - start)
    return best / calls


def stopwatch_mean(fn, calls=1000, repeats=5, warmup=1, clock=time.perf_counter):
    """Averages the rounds: every burst of load on the machine counts."""
    if calls < 1 or repeats < 1 or warmup < 0:
        raise ValueError("bad arguments")
    for _ in range(warmup):
        fn()
    total = 0.0
    for _ in range(repeats):
        start = clock()
        for _ in range(calls):
            fn()
        total += clock() - start
    return total / repeats / calls


def stopwatch_per_call(fn, calls=1000, repeats=5, warmup=1, clock=time.perf_counter):
    """Reads the clock around every call: the clock's own cost is counted each time."""
    if calls < 1 or repeats < 1 or warmup < 0:
        raise ValueError("bad arguments")
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(repeats):
        total = 0.0
        for _ in range(calls):
            start = clock()
            fn()
            total += clock() - start
        best = min(best, total)
    return best / calls


# --------------------------------------------------------------------- 01.fit_dispatch

def fit_unweighted(sizes, seconds):
    """Ordinary least squares: the largest sizes decide, t_dispatch comes out wrong."""
    n = np.asarray(sizes, float)
    t = np.asarray(seconds, float)
    if n.shape != t.shape or len(np.unique(n)) < 2 or np.any(t <= 0):
        raise ValueError("bad measurements")
    slope, icept = np.polyfit(n, t, 1)
    if slope <= 0 or icept <= 0:
        raise ValueError("no crossover")
    return float(icept), float(slope), float(icept / slope)


# --------------------------------------------------------------------- 01.dispatch_law

def law_share_is_ratio(n_ops, t_dispatch, t_compute, t_memory=0.0):
    """Reports R as the share of the step (R = 34.6 would be 3460 %)."""
    if n_ops < 0 or t_dispatch < 0 or t_compute < 0 or t_memory < 0 or t_compute + t_memory <= 0:
        raise ValueError("bad arguments")
    r = n_ops * t_dispatch / (t_compute + t_memory)
    return {"ratio": r, "share": r, "speedup": 1 + r, "step": n_ops * t_dispatch + t_compute + t_memory}


# --------------------------------------------------------------------- 01.record_op

def _as_ref(graph, v):
    from mini.autograd.tensor import Tensor
    if isinstance(v, Tensor):
        ref = graph.ref_of(v)
        return ref if ref is not None else graph.capture(v)
    if type(v) in (list, tuple):
        return type(v)(_as_ref(graph, x) for x in v)
    return v


def record_tensors_only(graph, name, op, args, kwargs, run):
    """A trace that ignores a branch: ops whose result is not a tensor are not recorded."""
    from mini.autograd.tensor import Tensor
    rargs, rkwargs = _as_ref(graph, tuple(args)), {k: _as_ref(graph, v) for k, v in kwargs.items()}
    result = run()
    if isinstance(result, Tensor):
        graph.add_node(name, op, rargs, rkwargs, result)
    return result


def record_capture_everything(graph, name, op, args, kwargs, run):
    """Captures every tensor argument, also inputs and earlier results: intermediates are
    baked in as constants."""
    from mini.autograd.tensor import Tensor

    def conv(v):
        if isinstance(v, Tensor):
            return graph.capture(v)
        if type(v) in (list, tuple):
            return type(v)(conv(x) for x in v)
        return v
    result = run()
    graph.add_node(name, op, conv(tuple(args)), {k: conv(v) for k, v in kwargs.items()}, result)
    return result


def record_flat_args(graph, name, op, args, kwargs, run):
    """Replaces only top-level tensors: a tensor inside a tuple (an index) stays a tensor."""
    from mini.autograd.tensor import Tensor

    def conv(v):
        if isinstance(v, Tensor):
            ref = graph.ref_of(v)
            return ref if ref is not None else graph.capture(v)
        return v
    rargs = tuple(conv(a) for a in args)
    result = run()
    graph.add_node(name, op, rargs, {k: conv(v) for k, v in kwargs.items()}, result)
    return result


def record_runs_twice(graph, name, op, args, kwargs, run):
    """Runs the op once to look at the result and once more to return it."""
    rargs = _as_ref(graph, tuple(args))
    graph.add_node(name, op, rargs, {k: _as_ref(graph, v) for k, v in kwargs.items()}, run())
    return run()


# --------------------------------------------------------------------- 01.guard_key

def _meta(t):
    return ("tensor", tuple(t.shape), t.dtype.name, tuple(t.stride()), str(t.device),
            bool(t.requires_grad))


def key_types_only(args, kwargs):
    """Constants not guarded: a Python number counts by its type, not its value."""
    from mini.autograd.tensor import Tensor

    def key(v, where):
        if isinstance(v, Tensor):
            return _meta(v)
        if v is None or type(v) in (bool, int, float, str):
            return (type(v).__name__,)
        if type(v) in (list, tuple):
            return (type(v).__name__, tuple(key(x, where) for x in v))
        if type(v) is dict:
            return ("dict", tuple((k, key(x, where)) for k, x in sorted(v.items())))
        raise TypeError(f"{where}: cannot guard a {type(v).__name__}")
    return (tuple(key(a, f"args[{i}]") for i, a in enumerate(args)),
            tuple((k, key(v, f"kwargs[{k!r}]")) for k, v in sorted(kwargs.items())))


def key_no_strides(args, kwargs):
    """Shape and dtype only: a transposed input replays a graph lowered for another layout."""
    from mini.autograd.tensor import Tensor

    def key(v, where):
        if isinstance(v, Tensor):
            return ("tensor", tuple(v.shape), v.dtype.name, str(v.device), bool(v.requires_grad))
        if v is None or type(v) in (bool, int, float, str):
            return (type(v).__name__, v)
        if type(v) in (list, tuple):
            return (type(v).__name__, tuple(key(x, where) for x in v))
        if type(v) is dict:
            return ("dict", tuple((k, key(x, where)) for k, x in sorted(v.items())))
        raise TypeError(f"{where}: cannot guard a {type(v).__name__}")
    return (tuple(key(a, f"args[{i}]") for i, a in enumerate(args)),
            tuple((k, key(v, f"kwargs[{k!r}]")) for k, v in sorted(kwargs.items())))


# --------------------------------------------------------------------- 01.replay

def _values(graph, env, check_guards: bool):
    from mini.jit.graph import Ref, map_refs
    from mini.jit.replay import GuardFailed
    values = dict(env)
    for i, node in enumerate(graph.nodes):
        out = node.kernel(*map_refs(node.args, values.__getitem__),
                          **map_refs(node.kwargs, values.__getitem__))
        if check_guards and node.is_guard and not node.holds(out):
            raise GuardFailed(i, node.value, out)
        values[Ref("node", i)] = out
    return values


def replay_ignores_guards(graph, env):
    """Runs every node and never looks at the guards: the traced branch runs for every input."""
    values = _values(graph, env, check_guards=False)
    return [values[r] for r in graph.outputs]


def replay_reuses_outputs(graph, env):
    """Keeps one buffer per output on the graph and copies each call's result into it: the
    caller's tensors from an earlier call change under them."""
    values = _values(graph, env, check_guards=True)
    buffers = graph.__dict__.setdefault("_output_buffers", {})
    out = []
    for r in graph.outputs:
        v = values[r]
        if r.kind == "node" and isinstance(v, np.ndarray):
            buf = buffers.get(r)
            if buf is None or buf.shape != v.shape:
                buf = buffers[r] = np.empty_like(v)
            np.copyto(buf, v)
            v = buf
        out.append(v)
    return out


# --------------------------------------------------------------------- 01.find_chains

def chains_across_reductions(graph):
    """Chains any run of ops whose results are read once, reductions included."""
    from mini.jit.graph import Ref
    users = graph.users()
    chains, taken = [], set()
    for i, node in enumerate(graph.nodes):
        if i in taken or node.meta is None or node.is_guard:
            continue
        chain = [i]
        while True:
            last = Ref("node", chain[-1])
            readers = users.get(last, [])
            if last in graph.outputs or len(readers) != 1 or readers[0] in taken \
                    or graph.nodes[readers[0]].meta is None:
                break
            chain.append(readers[0])
        if len(chain) >= 2:
            chains.append(chain)
            taken.update(chain)
    return chains


def chains_ignore_users(graph):
    """Chains consecutive elementwise nodes of one shape without asking who else needs each
    result: a value read twice, or returned, is fused away."""
    from mini.jit.fusion import ELEMENTWISE_OPS
    from mini.jit.graph import Ref
    chains, current = [], []
    for i, node in enumerate(graph.nodes):
        ok = (node.op in ELEMENTWISE_OPS and node.meta is not None
              and node.meta.dtype in ("float32", "float64")
              and all(graph.meta(a) is not None and graph.meta(a).shape == node.meta.shape
                      for a in node.args if isinstance(a, Ref)))
        if ok and current and Ref("node", current[-1]) in node.args:
            current.append(i)
            continue
        if len(current) >= 2:
            chains.append(current)
        current = [i] if ok else []
    if len(current) >= 2:
        chains.append(current)
    return chains


# --------------------------------------------------------------------- 01.kernel_body

def _body(graph, chain, *, scratch_out=False, double_constants=False, dedup=True):
    from mini.jit.fusion import CPP_OPS, CTYPES, cpp_number
    from mini.jit.graph import Ref
    ctype = CTYPES[graph.nodes[chain[0]].meta.dtype]
    inputs, names, lines = [], {}, []

    def operand(a):
        if not isinstance(a, Ref):
            return cpp_number(a) if double_constants else f"static_cast<{ctype}>({cpp_number(a)})"
        if a in names:
            return names[a]
        k = len(inputs)
        inputs.append(a)
        if dedup:
            names[a] = f"in{k}[i]"
        return f"in{k}[i]"

    for j, i in enumerate(chain):
        node = graph.nodes[i]
        expr = CPP_OPS[node.op].format(*[operand(a) for a in node.args])
        if scratch_out:
            lines.append(f"out[i] = {expr};")
            names[Ref("node", i)] = "out[i]"
        else:
            lines.append(f"const {ctype} v{i} = {expr};")
            names[Ref("node", i)] = f"v{i}"
    if not scratch_out:
        lines.append(f"out[i] = v{chain[-1]};")
    return "\n".join(lines), inputs


def kernel_reads_its_output(graph, chain):
    """Uses out[i] as the scratch variable of every node: correct alone, wrong when out is the
    buffer of an input (a fused kernel that reads its own output)."""
    return _body(graph, chain, scratch_out=True)


def kernel_double_constants(graph, chain):
    """Writes Python numbers as double literals: x * 0.1 is computed in double and rounded,
    not as eager's float32 product."""
    return _body(graph, chain, double_constants=True)


def kernel_input_per_use(graph, chain):
    """Lists a value once per use: GELU reads x from memory three times."""
    return _body(graph, chain, dedup=False)


# --------------------------------------------------------------------- 01.break_even

def break_even_no_recompiles(t_compile, t_eager, t_compiled, recompiles=0):
    """Counts the first compile only."""
    if t_compile < 0 or t_eager < 0 or t_compiled < 0 or recompiles < 0:
        raise ValueError("negative")
    if t_compiled >= t_eager:
        raise ValueError("never pays off")
    return t_compile / (t_eager - t_compiled)


def break_even_no_compiled_cost(t_compile, t_eager, t_compiled, recompiles=0):
    """How many eager calls fit in the compile time: forgets that a compiled call costs too."""
    if t_compile < 0 or t_eager < 0 or t_compiled < 0 or recompiles < 0:
        raise ValueError("negative")
    if t_compiled >= t_eager:
        raise ValueError("never pays off")
    return t_compile * (1 + recompiles) / t_eager


# --------------------------------------------------------------------- 01.crossover

def _ahead(eager_seconds, compiled_seconds, start):
    e, c = np.asarray(eager_seconds, float), np.asarray(compiled_seconds, float)
    if e.shape != c.shape:
        raise ValueError("lengths differ")
    return np.flatnonzero(start + np.cumsum(c) <= np.cumsum(e))


def crossover_without_compile_time(eager_seconds, compiled_seconds, t_compile):
    """Break-even with compile time left out: the compiled curve starts at 0."""
    ahead = _ahead(eager_seconds, compiled_seconds, 0.0)
    return int(ahead[0]) + 1 if ahead.size else None


def crossover_zero_based(eager_seconds, compiled_seconds, t_compile):
    """Returns the index of the call, not the number of calls."""
    ahead = _ahead(eager_seconds, compiled_seconds, t_compile)
    return int(ahead[0]) if ahead.size else None


MISTAKES = [
    Mistake("01.time_per_call", "timing without warm-up", stopwatch_no_warmup,
            expect_message="timing without warm-up"),
    Mistake("01.time_per_call", "the mean of the rounds", stopwatch_mean,
            expect_message="keep the fastest round"),
    Mistake("01.time_per_call", "the clock read around every call", stopwatch_per_call,
            expect_message="read it once before and once after each round"),
    Mistake("01.fit_dispatch", "an unweighted least-squares fit", fit_unweighted,
            expect_message="minimise the relative error"),
    Mistake("01.dispatch_law", "R reported as the share of the step", law_share_is_ratio,
            expect_message="fraction of the whole step spent dispatching"),
    Mistake("01.record_op", "a trace that ignores a branch", record_tensors_only,
            expect_message="a trace that ignores a branch"),
    Mistake("01.record_op", "intermediates captured as constants", record_capture_everything,
            expect_message="baked in as a constant"),
    Mistake("01.record_op", "tensors inside tuples left as tensors", record_flat_args,
            expect_message="tensors inside tuples and lists become Refs too"),
    Mistake("01.record_op", "run() called twice", record_runs_twice,
            expect_message="call run() exactly once"),
    Mistake("01.guard_key", "constants not guarded", key_types_only,
            expect_message="constants not guarded"),
    Mistake("01.guard_key", "strides left out of the key", key_no_strides,
            expect_message="the strides"),
    Mistake("01.replay", "a replay that ignores its guards", replay_ignores_guards,
            expect_message="must raise GuardFailed"),
    Mistake("01.replay", "a replay that aliases its output buffer across calls",
            replay_reuses_outputs, expect_message="aliases its output buffer across calls"),
    Mistake("01.find_chains", "fusion across a reduction", chains_across_reductions,
            expect_message="fusion across a reduction"),
    Mistake("01.find_chains", "values needed elsewhere fused away", chains_ignore_users,
            expect_message="read by two nodes"),
    Mistake("01.kernel_body", "a fused kernel that reads its own output", kernel_reads_its_output,
            expect_message="a fused kernel that reads its own output"),
    Mistake("01.kernel_body", "constants written as doubles", kernel_double_constants,
            expect_message="write constants in the chain's dtype"),
    Mistake("01.kernel_body", "one input per use", kernel_input_per_use,
            expect_message="one input, loaded once"),
    Mistake("01.break_even", "recompiles left out", break_even_no_recompiles,
            expect_message="each recompile costs another compile"),
    Mistake("01.break_even", "the compiled call's cost left out", break_even_no_compiled_cost,
            expect_message="a compiled call still costs"),
    Mistake("01.crossover", "break-even with compile time left out",
            crossover_without_compile_time, expect_message="if the compile time is left out"),
    Mistake("01.crossover", "a 0-based count", crossover_zero_based,
            expect_message="count the calls from 1"),
]
