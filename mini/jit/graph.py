"""The graph a trace records: what a function did with its tensors, as data.

A :class:`Graph` holds

- ``inputs``: one entry per tensor the traced function received (its shape, dtype,
  strides and device, as :class:`TensorMeta`);
- ``captured``: tensors the function used without receiving them (a model's weights, a
  tensor from a closure), kept *by reference*: a replay reads their current values;
- ``nodes``: one :class:`Node` per operation, in the order the program ran them;
- ``outputs``: what the function returned, as :class:`Ref`\\ s.

Values are named by a :class:`Ref`: ``Ref("input", 0)`` is the first input,
``Ref("captured", 2)`` the third captured tensor, ``Ref("node", 5)`` the value node 5 made.
A node's ``args`` are the op's arguments exactly as the program passed them, with a Ref
wherever there was a tensor (also inside lists and tuples: ``cat([a, b])``); everything else
(numbers, shapes, axes, dtypes) is a constant of the graph.

A node whose result is a Python value rather than a tensor (``x.item()``, ``bool(t)``) is a
*guard*: ``node.value`` is what the trace saw, and a replay that computes another value must
stop (the program would have taken another path).

``str(graph)`` prints it in the style of torch.fx::

    graph(x0: float32[4], x1: float32[4]):
      %0 = Mul(x0, 2.0)
      %1 = Add(%0, x1)
      %2 = Sum(%1, None, False)
      %3 = gt(%2, 0.0)
      guard item(%3) == True
      return %1
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

__all__ = ["Ref", "TensorMeta", "Node", "Graph", "map_refs", "refs_in", "meta_of",
           "INPLACE_OPS", "VIEW_OPS"]

#: Ops that write into their first argument (it is also their result).
INPLACE_OPS = frozenset({"add_", "sub_", "mul_", "div_", "pow_", "clamp_", "copy_", "fill_",
                         "zero_", "uniform_", "normal_", "setitem", "masked_fill_"})
#: Ops whose result shares its first argument's buffer (a view).
VIEW_OPS = frozenset({"Reshape", "Permute", "Expand", "GetItem", "Alias", "view", "detach"})


class Ref(NamedTuple):
    """A value of a graph: ``kind`` is "input", "captured" or "node"; ``index`` counts from 0
    within its kind."""
    kind: str
    index: int

    def __repr__(self) -> str:
        return {"input": "x", "captured": "c", "node": "%"}.get(self.kind, "?") + str(self.index)


class TensorMeta(NamedTuple):
    """What a guard compares about a tensor: shape, dtype name, strides (in elements) and
    device name."""
    shape: tuple
    dtype: str
    strides: tuple
    device: str

    def __repr__(self) -> str:
        return f"{self.dtype}[{', '.join(str(d) for d in self.shape)}]"


def meta_of(t) -> TensorMeta:
    """The :class:`TensorMeta` of a mini tensor."""
    d = t._data
    return TensorMeta(tuple(d.shape), d.dtype.name, tuple(d.strides), d.storage.device.name)


@dataclass(eq=False)
class Node:
    """One recorded operation.

    ``op`` is its name ("Add", "Relu", "gt", "item", "add_"), ``target`` what the program
    called (``Add.apply``, the public function), ``args``/``kwargs`` its arguments with Refs
    for tensors, ``meta`` the result's :class:`TensorMeta` (None when the result is a Python
    value: a guard), ``value`` that Python value, and ``kernel`` what a replay calls: a
    function of numpy arrays that does what the op did, set by :mod:`mini.jit.lowering`.
    """
    op: str
    target: Callable
    args: tuple
    kwargs: dict
    meta: TensorMeta | None = None
    value: Any = None
    kernel: Callable | None = field(default=None, repr=False)

    @property
    def is_guard(self) -> bool:
        """True when the op returned a Python value (``item``, ``bool``): a replay must see the
        same value again, or stop."""
        return self.meta is None

    @property
    def inplace(self) -> bool:
        return self.op in INPLACE_OPS

    def holds(self, value) -> bool:
        """For a guard: True when ``value`` is what the trace saw (the same type and value;
        arrays: the same shape, dtype and elements; NaN equals NaN)."""
        return _same(value, self.value)


def _same(a, b) -> bool:
    import numpy as np
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.shape == b.shape
                and a.dtype == b.dtype and bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")))
    if type(a) is not type(b):
        return False
    if type(a) in (list, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if type(a) is float and a != a:
        return b != b
    return a == b


def map_refs(obj, fn):
    """``obj`` with ``fn(ref)`` in place of every Ref, at any depth of tuples, lists and dicts
    (the containers keep their type)."""
    t = type(obj)
    if t is Ref:
        return fn(obj)
    if t is tuple:
        return tuple([o if type(o) in _ATOMS else map_refs(o, fn) for o in obj])
    if t is list:
        return [map_refs(o, fn) for o in obj]
    if t is dict:
        return {k: map_refs(v, fn) for k, v in obj.items()} if obj else {}
    if isinstance(obj, tuple):          # a named tuple
        return t(*[map_refs(o, fn) for o in obj])
    return obj


_ATOMS = frozenset({int, float, bool, str, type(None)})   # never hold a Ref


def refs_in(obj) -> list:
    """Every Ref inside ``obj`` (tuples, lists and dicts searched), in order."""
    found: list = []
    map_refs(obj, lambda r: found.append(r) or r)
    return found


class Graph:
    """A recorded trace (see the module docstring)."""

    def __init__(self):
        self.inputs: list[TensorMeta] = []
        self.captured: list = []          # the captured tensors themselves
        self.captured_meta: list[TensorMeta] = []
        self.nodes: list[Node] = []
        self.outputs: list[Ref] = []
        # id(tensor) -> (Ref, tensor): every tensor the graph knows while it is recorded
        # (the tensor is kept so that its id cannot be reused by another object meanwhile)
        self._known: dict[int, tuple] = {}

    # --- building (the tracer calls these) -------------------------------------------------
    def add_input(self, tensor) -> Ref:
        """Declare the next input of the traced function."""
        ref = Ref("input", len(self.inputs))
        self.inputs.append(meta_of(tensor))
        self._known[id(tensor)] = (ref, tensor)
        return ref

    def ref_of(self, tensor) -> Ref | None:
        """The Ref of a tensor this graph knows (an input, a node's result, a captured tensor),
        or None for a tensor it has not seen."""
        hit = self._known.get(id(tensor))
        return None if hit is None or hit[1] is not tensor else hit[0]

    def capture(self, tensor) -> Ref:
        """Take a tensor the graph has not seen as a captured value (by reference: a replay
        reads its value at that time).  Capturing a tensor the graph knows (an input, a
        node's result) would make it a constant: its Ref from :meth:`ref_of` is what to use."""
        ref = Ref("captured", len(self.captured))
        self.captured.append(tensor)
        self.captured_meta.append(meta_of(tensor))
        self._known[id(tensor)] = (ref, tensor)
        return ref

    def add_node(self, op: str, target: Callable, args: tuple, kwargs: dict, result) -> Ref:
        """Append a node for one op whose arguments (with Refs for tensors) are ``args`` and
        ``kwargs`` and whose result was ``result``: a tensor (from now on known as this
        node's value) or a Python value (the node is a guard that remembers it)."""
        from mini.autograd.tensor import Tensor
        ref = Ref("node", len(self.nodes))
        if isinstance(result, Tensor):
            node = Node(op, target, tuple(args), dict(kwargs), meta_of(result))
            self._known[id(result)] = (ref, result)
        else:
            node = Node(op, target, tuple(args), dict(kwargs), None, _frozen(result))
        self.nodes.append(node)
        return ref

    def finish(self, outputs) -> None:
        """Record the outputs and drop the references the recording kept."""
        self.outputs = list(outputs)
        self._known = {}

    # --- questions a compiler asks --------------------------------------------------------
    def users(self) -> dict:
        """Ref -> indices of the nodes that read it (in order); outputs are not nodes."""
        out: dict = {}
        for i, node in enumerate(self.nodes):
            for r in refs_in((node.args, node.kwargs)):
                out.setdefault(r, [])
                if not out[r] or out[r][-1] != i:
                    out[r].append(i)
        return out

    def meta(self, ref: Ref) -> TensorMeta | None:
        """The TensorMeta of a value (None for a guard's Python value)."""
        if ref.kind == "input":
            return self.inputs[ref.index]
        if ref.kind == "captured":
            return self.captured_meta[ref.index]
        return self.nodes[ref.index].meta

    @property
    def guards(self) -> list[int]:
        return [i for i, n in enumerate(self.nodes) if n.is_guard]

    def __len__(self) -> int:
        return len(self.nodes)

    def __str__(self) -> str:
        head = ", ".join(f"x{i}: {m!r}" for i, m in enumerate(self.inputs))
        lines = [f"graph({head}):"]
        for i, c in enumerate(self.captured_meta):
            lines.append(f"  c{i} = captured {c!r}")
        for i, node in enumerate(self.nodes):
            call = f"{node.op}({_fmt_args(node.args, node.kwargs)})"
            if node.is_guard:
                lines.append(f"  guard {call} == {_short(node.value)}")
            else:
                lines.append(f"  %{i} = {call}")
        outs = ", ".join(repr(o) for o in self.outputs)
        lines.append(f"  return {outs}")
        return "\n".join(lines)

    __repr__ = __str__


def _frozen(value):
    """What a guard keeps of a Python value: numpy arrays are copied (the program may change
    the one it got)."""
    import numpy as np
    if isinstance(value, np.ndarray):
        return value.copy()
    return value


def _short(v) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _fmt_args(args, kwargs) -> str:
    parts = [_fmt_value(a) for a in args]
    parts += [f"{k}={_fmt_value(v)}" for k, v in kwargs.items()]
    return ", ".join(parts)


def _fmt_value(v) -> str:
    if isinstance(v, Ref):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(_fmt_value(x) for x in v) + "]"
    if type(v) is tuple:
        return "(" + ", ".join(_fmt_value(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    return _short(v)
