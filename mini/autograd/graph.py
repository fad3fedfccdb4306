"""Looking at a recorded graph: the nodes behind a tensor and the memory they hold."""
from __future__ import annotations

from mini.autograd.engine import topological_order


def nodes(tensor) -> list:
    """The nodes reachable from ``tensor.grad_fn``, outputs first."""
    return topological_order([tensor.grad_fn]) if tensor.grad_fn is not None else []


def saved_tensor_bytes(tensor) -> int:
    """Bytes of the distinct buffers that the graph behind ``tensor`` keeps for backward.

    A buffer saved by several nodes (a weight used twice) counts once.
    """
    seen = {}
    for node in nodes(tensor):
        if node._released or not node._saved:
            continue
        for t in node._saved:
            if hasattr(t, "_data"):
                seen[id(t._data.storage)] = t._data.storage.nbytes
    return sum(seen.values())


def describe(tensor) -> str:
    """One line per node: its name and the names of the nodes it sends gradients to."""
    lines = []
    for node in nodes(tensor):
        nxt = ", ".join(n.name() if n is not None else "None" for n, _ in node.next_functions)
        lines.append(f"{node.name()} -> [{nxt}]")
    return "\n".join(lines)
