"""Replay: run a recorded graph again, kernel after kernel, with none of eager's per-op work.

:func:`replay` (exercise ``01.replay``) walks the nodes in order and calls each node's
kernel (see :mod:`mini.jit.lowering`) on numpy arrays.  A guard node checks that the value
the program branched on is still the one the trace saw; if not, it raises
:class:`GuardFailed` and the caller traces the function again.

While ``01.replay`` runs mini's own reference, a fast path stands in for it: the same walk,
written out once as straight-line Python source (one line per node, as torch.fx's code
generation does) and compiled, so that not even the loop over the nodes is left.
"""
from __future__ import annotations

from mini.exercises import exercise, fast_path
from mini.jit.graph import Graph, Ref, map_refs

__all__ = ["replay", "GuardFailed", "generate_source", "compile_replay"]


class GuardFailed(Exception):
    """A replay reached a guard whose value differs from the trace's: node ``index`` saw
    ``got`` where the trace saw ``expected``."""

    def __init__(self, index: int, expected, got):
        super().__init__(f"guard at node {index}: the trace saw {expected!r}, this call gives "
                         f"{got!r}")
        self.index, self.expected, self.got = index, expected, got


@exercise("01.replay")
def replay(graph, env):
    """Run ``graph`` again on new values and return the values of its outputs.

    ``env`` maps the Ref of every input and captured tensor to its value (a numpy array).
    Run ``graph.nodes`` in order: node ``i`` computes ``node.kernel(*args, **kwargs)``,
    where ``args`` and ``kwargs`` are ``node.args`` and ``node.kwargs`` with every Ref
    replaced by its value (at any depth of lists, tuples and dicts:
    ``mini.jit.graph.map_refs(obj, fn)`` does that walk); that result is the value of
    ``Ref("node", i)``.

    A guard node (``node.is_guard``) returns a Python value; if ``node.holds(value)`` is
    False, raise ``GuardFailed(i, node.value, value)`` at once: the program would have
    taken another path, so no later node may run.

    Return the list of the values of ``graph.outputs``, in order.  Leave ``env`` as it was,
    and return new arrays on every call (each call's outputs belong to its caller: a later
    call must never write into them).
    """
    ### BEGIN SOLUTION
    values = dict(env)
    for i, node in enumerate(graph.nodes):
        args = map_refs(node.args, values.__getitem__)
        kwargs = map_refs(node.kwargs, values.__getitem__)
        out = node.kernel(*args, **kwargs)
        if node.is_guard and not node.holds(out):
            raise GuardFailed(i, node.value, out)
        values[Ref("node", i)] = out
    return [values[r] for r in graph.outputs]
    ### END SOLUTION


# --------------------------------------------------------------------------- the fast path

@fast_path("01.replay")
def _compiled_replay(graph, env):
    """The reference's walk, unrolled into Python source once per graph."""
    return compile_replay(graph)(env)


def compile_replay(graph: Graph):
    """``replay(env)`` for this graph: :func:`generate_source`'s code, compiled (once per
    graph: it is kept on the graph as ``graph.replay_function``)."""
    run = getattr(graph, "replay_function", None)
    if run is None:
        source, ns = generate_source(graph)
        code = compile(source, f"<mini.jit replay of {len(graph.nodes)} nodes>", "exec")
        exec(code, ns)
        run = graph.replay_function = ns["replay"]
        run.source = source
    return run


def generate_source(graph: Graph) -> tuple[str, dict]:
    """Python source of a function ``replay(env)`` that does what :func:`replay` does for
    this graph, one line per node, and the namespace its names refer to."""
    ns: dict = {"GuardFailed": GuardFailed}
    lines = ["def replay(env):"]
    loaded: set = set()

    def name_of(ref: Ref) -> str:
        if ref.kind == "node":
            return f"v{ref.index}"
        var = f"{'x' if ref.kind == 'input' else 'c'}{ref.index}"
        if var not in loaded:
            loaded.add(var)
            ns[f"R_{var}"] = ref
            lines.append(f"    {var} = env[R_{var}]")
        return var

    def src(obj) -> str:
        if isinstance(obj, Ref):
            return name_of(obj)
        if type(obj) is tuple:
            return "(" + "".join(src(o) + ", " for o in obj) + ")"
        if type(obj) is list:
            return "[" + ", ".join(src(o) for o in obj) + "]"
        if type(obj) is dict and all(type(k) is str for k in obj):
            return "{" + ", ".join(f"{k!r}: {src(v)}" for k, v in obj.items()) + "}"
        if obj is None or type(obj) in (bool, int) or (type(obj) is float and obj == obj
                                                       and obj not in (float("inf"), -float("inf"))):
            return repr(obj)
        key = f"C{len(ns)}"
        ns[key] = obj
        return key

    pending = [0, 0]          # allocations pasted since the last count: (count, bytes)

    def count_allocations():
        if pending[0]:
            lines.append(f"    _count({pending[0]}, {pending[1]})")
            pending[0] = pending[1] = 0

    ns["_count"] = _count_allocations
    for i, node in enumerate(graph.nodes):
        inline = getattr(node.kernel, "inline", None)
        if inline is not None and not node.kwargs:
            template, names, constants = inline
            fields = {f"a{k}": src(a) for k, a in enumerate(node.args)}
            for key, obj in names.items():
                ns[f"{key}_{i}"] = obj
                fields[key] = f"{key}_{i}"
            lines.append("    " + template.format(out=f"v{i}", **fields, **constants))
            pending[0] += 1
            pending[1] += node.kernel.allocates
        else:
            ns[f"k{i}"] = node.kernel
            call = ", ".join([src(a) for a in node.args]
                             + [f"{k}={src(v)}" for k, v in node.kwargs.items()])
            lines.append(f"    v{i} = k{i}({call})")
        if node.is_guard:
            count_allocations()
            ns[f"n{i}"] = node
            lines.append(f"    if not n{i}.holds(v{i}):")
            lines.append(f"        raise GuardFailed({i}, n{i}.value, v{i})")
    count_allocations()
    lines.append("    return [" + ", ".join(src(r) for r in graph.outputs) + "]")
    return "\n".join(lines) + "\n", ns


def _count_allocations(count: int, nbytes: int) -> None:
    """What ``count`` pasted kernels would have told mini's allocation counter."""
    from mini.ndarray.memory import _ACTIVE, _TOTAL
    _TOTAL.count += count
    _TOTAL.bytes += nbytes
    for stats in _ACTIVE:
        stats.count += count
        stats.bytes += nbytes
