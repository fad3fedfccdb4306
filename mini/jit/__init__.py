"""mini.jit: define-then-run for mini.  Trace a function once, replay its graph after.

    @mini.jit.trace            # record on the first call, replay afterwards
    def step(x, w):
        return (x @ w).relu()

    fast = mini.compile(gelu)  # the same, plus fusion: one C++ kernel per elementwise chain

A traced function is called like the original.  The first call runs it eagerly while mini's
op observer records every op into a :class:`~mini.jit.graph.Graph`; later calls with the same
*guards* replay that graph: each node's kernel called on numpy arrays, with none of eager's
per-op checks, allocations of wrappers or autograd records.  The guards are what the trace
depended on: the shapes, dtypes, strides and devices of the tensor arguments and the values
of the Python arguments (:func:`~mini.jit.tracer.guard_key`), the Python numbers the function
reads from its closure, globals and module attributes, and the value of every tensor the
program read into Python (``x.item()``, ``if x.sum() > 0``).  A change traces again, so a
replay never returns what a stale graph would.  See :mod:`mini.jit.compiled` for the calls
that always run eagerly (autograd, side effects, other devices).

Pieces, in the order a call meets them: :mod:`~mini.jit.tracer` (the recording, exercises
``01.record_op`` and ``01.guard_key``), :mod:`~mini.jit.graph` (the graph),
:mod:`~mini.jit.lowering` (a kernel per node), :mod:`~mini.jit.fusion` (exercises
``01.find_chains`` and ``01.kernel_body``), :mod:`~mini.jit.replay` (exercise ``01.replay``),
:mod:`~mini.jit.compiled` (the cache).
"""
from __future__ import annotations

from mini.jit.graph import Graph, Node, Ref, TensorMeta, map_refs
from mini.jit.tracer import TraceError, TracerWarning, capture, guard_key, python_constants, record_op
from mini.jit.replay import GuardFailed, compile_replay, replay
from mini.jit.compiled import TracedFunction

__all__ = ["trace", "compile", "capture_graph", "Graph", "Node", "Ref", "TensorMeta",
           "TracedFunction", "GuardFailed", "TraceError", "TracerWarning", "guard_key",
           "record_op", "replay", "python_constants", "map_refs", "traffic"]


def trace(fn=None, *, cache_size_limit: int = 8):
    """``fn`` traced: recorded on its first call, replayed on later calls whose guards match
    (a decorator, with or without arguments).  Works on functions and on modules."""
    if fn is None:
        return lambda f: TracedFunction(f, fuse=False, cache_size_limit=cache_size_limit)
    return TracedFunction(fn, fuse=False, cache_size_limit=cache_size_limit)


def compile(fn=None, *, cache_size_limit: int = 8):  # noqa: A001  (mini.compile, as torch.compile)
    """:func:`trace`, plus fusion: each chain of elementwise ops in the recorded graph becomes
    one generated C++ kernel (built once per graph, cached on disk)."""
    if fn is None:
        return lambda f: TracedFunction(f, fuse=True, cache_size_limit=cache_size_limit)
    return TracedFunction(fn, fuse=True, cache_size_limit=cache_size_limit)


def capture_graph(fn, *example_args, fuse: bool = False, **example_kwargs) -> Graph:
    """Trace ``fn`` on example arguments and return its graph, lowered (and fused), ready
    to print or to replay with :func:`run_graph`."""
    from mini.jit.lowering import lower
    graph, _, _ = capture(fn, example_args, example_kwargs)
    lower(graph)
    if fuse:
        from mini.jit.fusion import fuse as fuse_graph
        graph = fuse_graph(graph)
    return graph


def run_graph(graph: Graph, *inputs):
    """Replay ``graph`` on input tensors (in the order the trace saw them); returns the
    output tensors (one, or a tuple)."""
    from mini.jit.lowering import as_array, as_tensor
    env = {Ref("input", i): as_array(t) for i, t in enumerate(inputs)}
    if len(inputs) != len(graph.inputs):
        raise TypeError(f"run_graph: the graph takes {len(graph.inputs)} tensors, got "
                        f"{len(inputs)}")
    for i, t in enumerate(graph.captured):
        env[Ref("captured", i)] = as_array(t)
    values = replay(graph, env)
    outs = tuple(as_tensor(v, graph.meta(r).device, graph.meta(r).shape)
                 if graph.meta(r) is not None else v for r, v in zip(graph.outputs, values))
    return outs[0] if len(outs) == 1 else outs


def traffic(graph: Graph) -> dict:
    """Bytes the kernels of ``graph`` read and write (see :func:`mini.jit.fusion.traffic`)."""
    from mini.jit.fusion import traffic as _traffic
    return _traffic(graph)


__all__ += ["run_graph", "compile_replay"]
