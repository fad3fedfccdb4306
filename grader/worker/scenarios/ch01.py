"""Scenarios of chapter 01 (framework design): the tracer, replay and fusion exercises run on
scripted functions next to the student's code.

Graphs handed to ``replay``, ``find_chains`` and ``kernel_body`` are recorded here by a
small recorder of the grader's own (:func:`_record`), not by the ``01.record_op`` slot, so
each exercise is checked on its own whatever the student's other answers do.  Observations
are plain data: graphs as lists of nodes (a Ref as ``("ref", kind, index)``), arrays,
booleans, exceptions.  Inputs come from the seeds the trusted check sends.
"""
from __future__ import annotations

import numpy as np


def _mini():
    import mini
    return mini


# --------------------------------------------------------------------------- recording

def _record(fn, inputs):
    """The graph of ``fn(*inputs)`` recorded with the grader's recorder, lowered, and the
    eager result."""
    import functools

    from mini.autograd import function as F
    from mini.jit.graph import Graph
    from mini.jit.lowering import lower
    graph = Graph()
    for t in inputs:
        graph.add_input(t)
    observe = functools.partial(_grader_record_op, graph)

    previous = F.set_op_observer(observe)
    try:
        result = fn(*inputs)
    finally:
        F.set_op_observer(previous)
    outs = result if isinstance(result, tuple) else (result,)
    graph.finish([graph.ref_of(t) or graph.capture(t) for t in outs])
    lower(graph)
    return graph, outs


def _encode(obj):
    """Plain data for a node argument: Refs as tuples, dtypes and other objects as text."""
    from mini.jit.graph import Ref
    if isinstance(obj, Ref):
        return ("ref", obj.kind, obj.index)
    if type(obj) in (list, tuple):
        return type(obj)(_encode(x) for x in obj)
    if type(obj) is dict:
        return {str(k): _encode(v) for k, v in obj.items()}
    if obj is None or type(obj) in (bool, int, float, str, slice) or obj is Ellipsis:
        return obj
    return f"<{type(obj).__name__}: {obj!r}>"[:120]


def _graph_summary(graph) -> dict:
    nodes = []
    for n in graph.nodes:
        meta = None if n.meta is None else [list(n.meta.shape), n.meta.dtype]
        value = n.value if n.is_guard and type(n.value) in (bool, int, float) else None
        nodes.append([n.op, _encode(n.args), _encode(n.kwargs), meta, n.is_guard, value])
    return {"nodes": nodes, "captured": len(graph.captured), "inputs": len(graph.inputs),
            "outputs": [_encode(r) for r in graph.outputs]}


# --------------------------------------------------------------------------- scripts

def _data(seed: int, *shape, dtype="float32"):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _t(a):
    return _mini().tensor(np.array(a, copy=True))


# --------------------------------------------------------------------------- 01.record_op

def record_scripts(impl, *, seed: int) -> dict:
    """Trace scripted functions with ``mini.jit`` (so ``impl``, registered in the slot,
    records every op); per script the recorded graph, what the traced run returned and
    the state it left."""
    mini = _mini()
    from mini.jit.tracer import capture
    out = {}
    x, y = _t(_data(seed, 3, 4)), _t(_data(seed + 1, 3, 4))
    w = _t(_data(seed + 2, 3, 4))
    m, idx = _t(_data(seed + 3, 4, 5)), mini.tensor([3, 0, 3])
    state = mini.zeros(3, 4)

    def arith(x, y):
        return (x * 2.0 + y).relu() - 0.5

    def captured(x):
        return (x * w + w).sum(dim=1, keepdim=True)

    def nested(m, i):
        return m[:, i] * 2.0

    def keywords(x):
        state.add_(x, alpha=0.5)
        return x - state

    def branch(x):
        if x.sum() > 0:
            return x * 2.0
        return x * 3.0

    def item(x):
        return x / x.abs().max().item()

    def draws(x):
        return x + mini.rand(*x.shape)

    scripts = {"arith": (arith, (x, y)), "captured": (captured, (x,)), "nested": (nested, (m, idx)),
               "keywords": (keywords, (x,)), "branch_pos": (branch, (x.abs(),)),
               "branch_neg": (branch, (-x.abs(),)), "item": (item, (y,)), "draws": (draws, (x,))}
    for name, (fn, args) in scripts.items():
        mini.manual_seed(seed)
        try:
            graph, result, _ = capture(fn, args, {})
        except NotImplementedError:
            raise
        except Exception as e:  # noqa: BLE001 - recorded: the trusted side reports it
            out[name] = {"raised": e}
            continue
        results = result if isinstance(result, tuple) else (result,)
        out[name] = {"graph": _graph_summary(graph),
                     "result": [np.array(r.numpy(), copy=True) if isinstance(r, mini.Tensor)
                                else r for r in results]}
    out["state_after"] = np.array(state.numpy(), copy=True)
    return out


# --------------------------------------------------------------------------- 01.guard_key

def guard_keys(impl, *, seed: int) -> dict:
    """``impl(args, kwargs)`` on pairs of calls: for each pair whether the two keys are
    equal and hashable, in the order of :data:`GUARD_PAIRS`; for each refused call the
    exception it raised (or "no error")."""
    mini = _mini()
    a = _data(seed, 3, 4)
    x, x2 = mini.tensor(a), mini.tensor(_data(seed + 1, 3, 4))
    pairs = {
        "same layout, other values": ((x, 2.0), {}, (x2, 2.0), {}),
        "another shape": ((x, 2.0), {}, (mini.tensor(_data(seed, 4, 3)), 2.0), {}),
        "another dtype": ((x, 2.0), {}, (x.double(), 2.0), {}),
        "other strides": ((x2.T.contiguous().T, 2.0), {}, (mini.tensor(_data(seed, 3, 4)), 2.0), {}),
        "another device": ((x,), {}, (mini.tensor(a, device="numpy"),), {}),
        "requires_grad": ((x,), {}, (mini.tensor(a, requires_grad=True),), {}),
        "another number": ((x, 2.0), {}, (x, 3.0), {}),
        "int and float": ((x, 2), {}, (x, 2.0), {}),
        "int and bool": ((x, 1), {}, (x, True), {}),
        "None and None": ((x, None), {}, (x2, None), {}),
        "two strings": ((x, "mean"), {}, (x, "sum"), {}),
        "list and tuple": (([x, x],), {}, ((x, x),), {}),
        "nested, same": (([x, (2.0, "a")],), {}, ([x2, (2.0, "a")],), {}),
        "nested, other number": (([x, (2.0, "a")],), {}, ([x, (2.5, "a")],), {}),
        "one more argument": ((x,), {}, (x, None), {}),
        "keyword, same": ((x,), {"k": 1}, (x2,), {"k": 1}),
        "keyword, other name": ((x,), {"k": 1}, (x,), {"j": 1}),
        "keywords in another order": ((x,), {"a": 1, "b": 2.0}, (x2,), {"b": 2.0, "a": 1}),
        "dict argument": (({"w": x, "s": 1.0},), {}, ({"w": x2, "s": 1.0},), {}),
        "0-d tensors": ((mini.tensor(1.0),), {}, (mini.tensor(5.0),), {}),
        "empty and 0-d": ((mini.zeros(0),), {}, (mini.tensor(1.0),), {}),
    }
    out = {"pairs": {}, "refused": {}}
    for name, (a1, k1, a2, k2) in pairs.items():
        try:
            key1, key2 = impl(a1, k1), impl(a2, k2)
        except NotImplementedError:
            raise
        except Exception as e:  # noqa: BLE001
            out["pairs"][name] = {"raised": e}
            continue
        try:
            hash(key1), hash(key2)
            hashable = True
        except Exception:  # noqa: BLE001
            hashable = False
        again = impl(a1, k1)
        out["pairs"][name] = {"equal": bool(key1 == key2), "hashable": hashable,
                              "stable": bool(again == key1)}
    refused = {"numpy array": ((x, a), {}), "an object": ((x, object()), {}),
               "numpy array in a keyword": ((x,), {"scale": a}),
               "array inside a list": (([x, a],), {})}
    for name, (args, kwargs) in refused.items():
        try:
            impl(args, kwargs)
            out["refused"][name] = "no error"
        except NotImplementedError:
            raise
        except Exception as e:  # noqa: BLE001
            out["refused"][name] = {"type": type(e).__name__, "names_it": _names_argument(e)}
    return out


def _names_argument(e) -> bool:
    text = str(e)
    return "args[" in text or "kwargs[" in text or "argument" in text


# --------------------------------------------------------------------------- 01.replay

def _replay_graphs(seed: int) -> dict:
    """name -> (graph, function, input arrays) for the replay scenario."""
    mini = _mini()
    x, y = _t(_data(seed, 6)), _t(_data(seed + 1, 6))
    m, idx = _t(_data(seed + 2, 3, 5)), mini.tensor([4, 1])
    w = _t(_data(seed + 3, 6))

    def chain(x, y):
        return ((x * 1.5 + y).tanh() - x) * 0.5

    def two_outputs(x, y):
        h = x * y
        return h.exp(), (h + 1.0).relu()

    def nested(m, i):
        return m[:, i].sum(dim=1) * 2.0

    def captured(x):
        return (x - w) * w

    def branch(x):
        if x.sum() > 0:
            return x * 2.0
        return x * 3.0

    graphs = {}
    for name, fn, args in (("chain", chain, (x, y)), ("two_outputs", two_outputs, (x, y)),
                           ("nested", nested, (m, idx)), ("captured", captured, (x,)),
                           ("branch", branch, (x.abs(),))):
        graph, _ = _record(fn, args)
        graphs[name] = (graph, fn, args)
    return graphs


def replays(impl, *, seed: int) -> dict:
    """``impl(graph, env)`` on graphs recorded by the grader, with new input values: the
    outputs, whether a second call's outputs share memory with the first's, whether env was
    left as it was, and what a failing guard raised."""
    mini = _mini()
    from mini.jit.graph import Ref
    from mini.jit.lowering import as_array
    out = {}
    for name, (graph, fn, args) in _replay_graphs(seed).items():
        tensors = []
        for k, a in enumerate(args):            # new values of the same layout
            if not a.dtype.is_floating_point:
                tensors.append(a)
                continue
            values = _data(seed + 20 + k, *a.shape)
            tensors.append(mini.tensor(-np.abs(values) if name == "branch" else values))
        env = {Ref("input", i): as_array(t) for i, t in enumerate(tensors)}
        for i, c in enumerate(graph.captured):
            env[Ref("captured", i)] = as_array(c)
        before = {k: np.array(v, copy=True) for k, v in env.items()}
        keys = set(env)
        try:
            first = impl(graph, env)
        except NotImplementedError:
            raise
        except Exception as e:  # noqa: BLE001
            record = {"raised": e}
            for attr in ("index", "expected", "got"):
                v = getattr(e, attr, "missing")
                record[attr] = v if type(v) in (bool, int, float, str, type(None)) else repr(v)[:60]
            out[name] = record
            continue
        if not isinstance(first, list):
            out[name] = {"not_a_list": type(first).__name__}
            continue
        values = [np.array(v, copy=True) if isinstance(v, np.ndarray) else v for v in first]
        second = impl(graph, env)
        shared = any(isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
                     and np.shares_memory(a, b) for a, b in zip(first, second)
                     if not any(a is v for v in env.values()))
        unchanged = set(env) == keys and all(np.array_equal(env[k], before[k]) for k in keys)
        for v in second:                          # write into the second call's outputs...
            if isinstance(v, np.ndarray) and v.flags.writeable:
                v[...] = 0
        third = impl(graph, env)                  # ...and the third call must not see it
        out[name] = {"values": [np.asarray(v).reshape(-1) if isinstance(v, np.ndarray) else v
                                for v in values],
                     "shared": bool(shared), "env_unchanged": bool(unchanged),
                     "third_equal": all(np.array_equal(np.asarray(a).reshape(-1), np.asarray(b).reshape(-1))
                                        for a, b in zip(values, third))}
    return out


# --------------------------------------------------------------------------- 01.find_chains

def _chain_scripts(seed: int) -> dict:
    mini = _mini()
    from mini.jit.examples import gelu8
    x = _t(_data(seed, 16))
    y = _t(_data(seed + 1, 16))
    x2 = _t(_data(seed + 2, 4, 5))
    b = _t(_data(seed + 3, 5))
    i = mini.tensor(np.arange(16))
    xd = mini.tensor(_data(seed + 4, 16, dtype="float64"))
    return {
        "gelu": (gelu8, (x,)),
        "two inputs": (lambda x, y: ((x + y) * x - 0.25).relu(), (x, y)),
        "reduction": (lambda x: ((x * 2.0).exp().sum(dim=1, keepdim=True) * 3.0).relu(), (x2,)),
        "broadcast": (lambda x, b: ((x * 2.0 + b).tanh() * 0.5).exp(), (x2, b)),
        "read twice": (lambda x: (lambda h: h.exp() + h * 3.0)(x * 2.0), (x,)),
        "returned": (lambda x: (lambda h: (h, (h.relu() + 1.0).sqrt()))(x * 2.0 - 1.0), (x,)),
        "apart": (lambda x, y: (lambda a, b: (a + b).relu() * 2.0)(x * 2.0, y + 1.0), (x, y)),
        "integers": (lambda i: (i * 2 + 1) * 3, (i,)),
        "float64": (lambda x: (x.abs() * 3.0 + 1.0).sqrt() - 1.0, (xd,)),
        "guard": (lambda x: (lambda h: h.exp() if h.sum() > 0 else -h)(x * 2.0), (x.abs(),)),
        "reversed": (lambda x: (2.0 - x).abs() / 3.0, (x,)),
        "single": (lambda x: x.sum() * 2.0, (x,)),
    }


def chains(impl, *, seed: int) -> dict:
    """``impl(graph)`` on graphs recorded by the grader: what it returned per script (as
    plain lists), and each graph's op names (for the messages)."""
    out = {}
    for name, (fn, args) in _chain_scripts(seed).items():
        graph, _ = _record(fn, args)
        ops = [n.op for n in graph.nodes]
        try:
            got = impl(graph)
        except NotImplementedError:
            raise
        except Exception as e:  # noqa: BLE001
            out[name] = {"ops": ops, "raised": e}
            continue
        out[name] = {"ops": ops, "chains": _plain_chains(got)}
    return out


def _plain_chains(got):
    if type(got) not in (list, tuple):
        return {"not_a_list": type(got).__name__}
    result = []
    for c in got:
        if type(c) not in (list, tuple) or not all(type(i) is int for i in c):
            return {"bad_chain": repr(c)[:80]}
        result.append(list(c))
    return result


# --------------------------------------------------------------------------- 01.kernel_body

def _kernel_cases(seed: int) -> dict:
    """name -> (function, inputs, index of the chain's first node, "exact" or "close")."""
    mini = _mini()
    from mini.jit.examples import gelu8
    x, y = _t(_data(seed, 4099)), _t(_data(seed + 1, 4099))
    xd = mini.tensor(_data(seed + 2, 257, dtype="float64"))
    return {
        "two inputs": (lambda x, y: ((x + y) * x - 0.25).relu(), (x, y), 0, "exact"),
        "float constants": (lambda x: ((x * 0.1 + 0.3) * 1.7 - 0.2) / 7.0, (x,), 0, "exact"),
        "gelu": (gelu8, (x,), 0, "close"),
        "reversed": (lambda x, y: mini.maximum(2.0 - x, y) / 3.0, (x, y), 0, "exact"),
        "float64": (lambda x: (x.abs() * 3.1 + 1.0).sqrt() - 1.0, (xd,), 1, "close"),
        "intermediate input": (lambda x: (lambda h: (h * 2.0 + h).relu())(x.exp()), (x,), 1,
                               "close"),
    }


def kernels(impl, *, seed: int) -> dict:
    """For each case: ``impl(graph, chain)``'s inputs and body, the compiled kernel's result,
    the result with ``out`` being the buffer of the first input, and the eager result; or
    the error.  The graph is recorded here; the chain is its nodes from the case's first."""
    from mini.jit.fusion import CTYPES, kernel_source, load_kernel
    from mini.jit.graph import Ref, map_refs
    from mini.jit.lowering import as_array
    from mini.utils.cpp_extension import CompileError
    out = {}
    for name, (fn, args, first, _) in _kernel_cases(seed).items():
        graph, results = _record(fn, args)
        chain = list(range(first, len(graph.nodes)))
        record: dict = {"chain": chain, "ops": [graph.nodes[i].op for i in chain],
                        "eager": np.array(results[0].numpy(), copy=True).reshape(-1)}
        values = {Ref("input", i): as_array(t) for i, t in enumerate(args)}
        for i in range(first):                 # the values before the chain, by their kernels
            node = graph.nodes[i]
            values[Ref("node", i)] = node.kernel(*map_refs(node.args, values.__getitem__))
        try:
            got = impl(graph, chain)
        except NotImplementedError:
            raise
        except Exception as e:  # noqa: BLE001
            record["raised"] = e
            out[name] = record
            continue
        if type(got) is not tuple or len(got) != 2 or type(got[0]) is not str \
                or type(got[1]) not in (list, tuple):
            record["bad_result"] = repr(got)[:120]
            out[name] = record
            continue
        body, inputs = got
        record["body"] = body[:2000]
        record["inputs"] = [_encode(r) for r in inputs]
        if not all(isinstance(r, Ref) and r in values for r in inputs):
            out[name] = record                 # the trusted side says which input is wrong
            continue
        arrays = [np.ascontiguousarray(values[r]) for r in inputs]
        ctype = CTYPES[graph.nodes[chain[-1]].meta.dtype]
        try:
            module = load_kernel(kernel_source(body, len(inputs), ctype), "grader_ch01_kernel")
        except CompileError as e:
            record["compile_error"] = str(e)[:1500]
            out[name] = record
            continue
        n = int(np.prod(graph.nodes[chain[-1]].meta.shape))
        result = np.full(n, np.nan, dtype=np.dtype(graph.nodes[chain[-1]].meta.dtype))
        module.kernel(*arrays, result)
        record["out"] = result
        if arrays:
            donated = [a.copy() for a in arrays]
            module.kernel(*donated, donated[0])
            record["aliased"] = donated[0]
        record["bytes"] = (len(inputs) + 1) * result.nbytes
        out[name] = record
    return out


# --------------------------------------------------------------------------- 01.time_per_call

def stopwatch(impl, *, cases: list) -> list:
    """``impl(fn, calls=, repeats=, warmup=, clock=)`` with a scripted function and clock:
    each call of ``fn`` costs the next of ``costs`` (the last one repeats) and each read of
    the clock costs ``read_cost``.  Per case: the value returned, the calls of fn and the
    reads of the clock, or the exception."""
    out = []
    for case in cases:
        costs, read_cost = list(case["costs"]), float(case["read_cost"])
        state = {"now": 0.0, "calls": 0, "reads": 0}

        def fn():
            state["now"] += costs[min(state["calls"], len(costs) - 1)]
            state["calls"] += 1

        def clock():
            t = state["now"]
            state["now"] += read_cost
            state["reads"] += 1
            return t

        try:
            value = impl(fn, calls=case["calls"], repeats=case["repeats"], warmup=case["warmup"],
                         clock=clock)
        except NotImplementedError:
            raise
        except Exception as e:  # noqa: BLE001
            out.append({"raised": e, "calls": state["calls"]})
            continue
        out.append({"value": value if type(value) in (float, int) else repr(value)[:80],
                    "is_float": type(value) is float or isinstance(value, np.floating),
                    "calls": state["calls"], "reads": state["reads"]})
    return out


SCENARIOS = {"record_scripts": record_scripts, "guard_keys": guard_keys, "replays": replays,
             "chains": chains, "kernels": kernels, "stopwatch": stopwatch}


# --------------------------------------------------------------------------- footguns

_SCALE = [2.0]   # a module-level value a traced function reads (the "frozen constant")


def _grader_record_op(graph, name, op, args, kwargs, run):
    from mini.autograd.tensor import Tensor

    def ref(v):
        if isinstance(v, Tensor):
            known = graph.ref_of(v)
            return known if known is not None else graph.capture(v)
        if type(v) in (list, tuple):
            return type(v)(ref(x) for x in v)
        if type(v) is dict:
            return {k: ref(x) for k, x in v.items()}
        return v
    rargs, rkwargs = ref(tuple(args)), ref(dict(kwargs))
    out = run()
    graph.add_node(name, op, rargs, rkwargs, out)
    return out


def _grader_guard_key(args, kwargs):
    from mini.autograd.tensor import Tensor

    def key(v):
        if isinstance(v, Tensor):
            d = v._data
            return ("t", d.shape, d.dtype.name, d.strides, d.storage.device.name, v.requires_grad)
        if v is None or type(v) in (bool, int, float, str):
            return (type(v).__name__, v)
        if type(v) in (list, tuple):
            return (type(v).__name__, tuple(key(x) for x in v))
        if type(v) is dict:
            return ("dict", tuple((k, key(x)) for k, x in sorted(v.items())))
        raise TypeError(f"cannot guard a {type(v).__name__}")
    return tuple(key(a) for a in args), tuple((k, key(v)) for k, v in sorted(kwargs.items()))


def _grader_replay(graph, env):
    from mini.jit.graph import Ref, map_refs
    from mini.jit.replay import GuardFailed
    values = dict(env)
    for i, node in enumerate(graph.nodes):
        out = node.kernel(*map_refs(node.args, values.__getitem__),
                          **map_refs(node.kwargs, values.__getitem__))
        if node.is_guard and not node.holds(out):
            raise GuardFailed(i, node.value, out)
        values[Ref("node", i)] = out
    return [values[r] for r in graph.outputs]


_TRACER_SLOTS = {"01.record_op": _grader_record_op, "01.guard_key": _grader_guard_key,
                 "01.replay": _grader_replay}


def _scaled(x):
    return x * _SCALE[0]


def footguns(impl, *, slot: str, seed: int) -> dict:
    """tinygrad's list of JIT footguns, run through ``mini.jit.trace`` with ``impl`` in
    ``slot`` and the grader's own versions in the tracer's other two slots: per case, whether
    every call returned what eager mode returns, and the traced function's counts."""
    import warnings
    import mini
    from mini import exercises
    from mini.jit import trace
    others = {s: f for s, f in _TRACER_SLOTS.items() if s != slot}
    before = {s: exercises._ACTIVE.get(s) for s in others}
    for s, f in others.items():
        exercises.implement(s)(f)
    rng = np.random.default_rng(seed)

    def data(*shape):
        return mini.tensor(rng.standard_normal(shape).astype(np.float32))

    def same(a, b):
        return a.shape == b.shape and np.array_equal(a.numpy(), b.numpy())

    out = {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            x = data(3, 4)

            f = trace(_scaled)                                  # a module-level constant
            ok = same(f(x), x * _SCALE[0])
            _SCALE[0] = 5.0
            try:
                ok = ok and same(f(x), x * 5.0)
            finally:
                _SCALE[0] = 2.0
            out["a constant the function reads changes"] = (ok, f.stats.traces, f.stats.replays)

            f = trace(lambda x, s: (x * s).relu())              # a Python argument
            ok = all(same(f(x, s), (x * s).relu()) for s in (2.0, 3.0, 2.0, 2))
            out["a Python argument changes"] = (ok, f.stats.traces, f.stats.replays)

            f = trace(lambda x: (x * 2.0).sum(dim=0))           # shapes and layouts
            ys = [x, data(5, 4), x.T, x.T.contiguous(), data(3, 4)]
            ok = all(same(f(y), (y * 2.0).sum(dim=0)) for y in ys)
            out["a new shape or layout"] = (ok, f.stats.traces, f.stats.replays)

            def branch(x):
                return x * 2.0 if x.sum() > 0 else x * 3.0
            f = trace(branch)
            ys = [x.abs(), -x.abs(), x.abs() + 1.0, -x.abs() - 1.0]
            ok = all(same(f(y), branch(y)) for y in ys)
            out["a branch goes the other way"] = (ok, f.stats.traces, f.stats.replays)

            def normalise(x):
                return x / x.abs().max().item()
            f = trace(normalise)
            ys = [x, x * 2.0, x]
            ok = all(same(f(y), normalise(y)) for y in ys)
            out["a value read with .item()"] = (ok, f.stats.traces, f.stats.replays)

            f = trace(lambda x: x * 3.0 + 1.0)                  # outputs kept across calls
            kept = [f(x) for _ in range(3)]
            copies = [k.numpy().copy() for k in kept]
            f(data(3, 4))
            ok = all(np.array_equal(k.numpy(), c) for k, c in zip(kept, copies)) and \
                not np.shares_memory(kept[1].numpy(), kept[2].numpy())
            out["an output kept across calls"] = (ok, f.stats.traces, f.stats.replays)

            state, mirror = mini.zeros(4), mini.zeros(4)

            def update(x):
                state.mul_(0.5).add_(x)
                return x - state
            f = trace(update)
            ok = True
            for _ in range(4):
                y = data(4)
                got = f(y)
                mirror.mul_(0.5).add_(y)
                ok = ok and same(got, y - mirror) and np.array_equal(state.numpy(), mirror.numpy())
            out["state updated in place"] = (ok, f.stats.traces, f.stats.replays)

            f = trace(lambda x: x + mini.rand(*x.shape))        # random draws
            mini.manual_seed(seed % 1000)
            got = [f(x).numpy().copy() for _ in range(3)]
            mini.manual_seed(seed % 1000)
            want = [(x + mini.rand(*x.shape)).numpy().copy() for _ in range(3)]
            ok = all(np.array_equal(a, b) for a, b in zip(got, want))
            out["random draws"] = (ok, f.stats.traces, f.stats.replays)

            f = trace(lambda x, y: (x * y + 1.0).tanh())        # nothing changes
            y = data(3, 4)
            ok = all(same(f(x, y), (x * y + 1.0).tanh()) for _ in range(5))
            out["same guards, five calls"] = (ok, f.stats.traces, f.stats.replays)
    finally:
        for s, f in before.items():
            if f is None:
                exercises._ACTIVE.pop(s, None)
            else:
                exercises._ACTIVE[s] = f
    return out


SCENARIOS["footguns"] = footguns
