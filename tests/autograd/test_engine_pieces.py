"""The engine's pieces (the chapter-02 exercise slots) tested on their own, on hand-built
graphs of Nodes: topological order, the seed gradient, propagation, accumulation."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

import mini
from mini.autograd import Node
from mini.autograd import engine


class FakeNode(Node):
    def __init__(self, label, children=()):
        super().__init__()
        self.label = label
        self.next_functions = tuple((c, 0) for c in children)
        self.released = False

    def release(self):
        self.released = True


@st.composite
def dags(draw):
    """A random DAG: node i may send gradients to nodes with larger index only."""
    n = draw(st.integers(1, 12))
    nodes = [None] * n
    for i in reversed(range(n)):
        children = draw(st.lists(st.integers(i + 1, n - 1), max_size=3)) if i < n - 1 else []
        with_none = draw(st.booleans())
        kids = [nodes[c] for c in children] + ([None] if with_none else [])
        nodes[i] = FakeNode(i, kids)
    roots = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=3))
    return nodes, [nodes[r] for r in roots]


def _reachable(roots):
    seen, stack = {}, [r for r in roots if r is not None]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen[id(n)] = n
        stack.extend(c for c, _ in n.next_functions if c is not None)
    return seen


@pytest.mark.parametrize("order_fn", [engine.topological_order, engine._graphlib_order],
                         ids=["reference", "graphlib_fallback"])
@given(dags())
def test_topological_order_lists_every_reachable_node_once_before_its_children(order_fn, dag):
    nodes, roots = dag
    order = order_fn(roots)
    reachable = _reachable(roots)
    assert len(order) == len(reachable) == len({id(n) for n in order})
    assert {id(n) for n in order} == set(reachable)
    position = {id(n): i for i, n in enumerate(order)}
    for n in order:
        for child, _ in n.next_functions:
            if child is not None:
                assert position[id(n)] < position[id(child)], "a node must come before its children"


def test_topological_order_of_a_long_chain_is_iterative():
    node = FakeNode(0)
    for i in range(1, 20_000):
        node = FakeNode(i, [node])
    order = engine.topological_order([node])
    assert len(order) == 20_000 and order[0] is node


def test_topological_order_skips_none_roots():
    a = FakeNode("a")
    assert engine.topological_order([None, a, a]) == [a]


def test_seed_gradient():
    y = mini.tensor(3.0, dtype=mini.float64, requires_grad=True) * 2
    g = engine.seed_gradient(y, None)
    assert g.dtype == mini.float64 and tuple(g.shape) == () and g.item() == 1.0
    v = mini.tensor([1.0, 2.0], requires_grad=True) * 2
    with pytest.raises(RuntimeError):
        engine.seed_gradient(v, None)
    with pytest.raises(RuntimeError):
        engine.seed_gradient(v, mini.ones(3))
    given_g = mini.tensor([0.5, 0.25])
    np.testing.assert_array_equal(engine.seed_gradient(v, given_g).numpy(), [0.5, 0.25])
    one = mini.tensor([[4.0]], requires_grad=True) * 1
    assert tuple(engine.seed_gradient(one, None).shape) == (1, 1)


def test_propagate_sums_gradients_and_releases_nodes():
    #   top -> (left, right) -> bottom ; gradients: each edge multiplies by a label factor
    bottom = FakeNode("bottom")
    left, right = FakeNode("left", [bottom]), FakeNode("right", [bottom])
    top = FakeNode("top", [left, right])
    isolated = FakeNode("isolated")
    factors = {"top": (2.0, 3.0), "left": (5.0,), "right": (7.0,), "bottom": (), "isolated": ()}
    ran = []

    def run_node(node, g):
        ran.append((node.label, g))
        return tuple(g * f for f in factors[node.label])

    order = engine.topological_order([top]) + [isolated]
    grads = {id(top): 1.0}
    engine.propagate(order, grads, run_node, retain_graph=False)
    assert dict(ran) == {"top": 1.0, "left": 2.0, "right": 3.0, "bottom": 2 * 5 + 3 * 7}
    assert [label for label, _ in ran].index("bottom") == 3
    assert "isolated" not in dict(ran), "a node no gradient reached is skipped"
    assert top.released and left.released and right.released
    for n in (top, left, right, bottom):
        n.released = False
    engine.propagate(engine.topological_order([top]), {id(top): 1.0}, run_node, retain_graph=True)
    assert not any(n.released for n in (top, left, right, bottom))


def test_propagate_ignores_none_gradients_and_none_children():
    child = FakeNode("child")
    top = FakeNode("top", [None, child])
    ran = []

    def run_node(node, g):
        ran.append(node.label)
        return (1.0, None) if node.label == "top" else ()

    engine.propagate(engine.topological_order([top]), {id(top): 1.0}, run_node, True)
    assert ran == ["top"]


def test_accumulate_grad():
    leaf = mini.tensor([1.0, 2.0], requires_grad=True)
    engine.accumulate_grad(leaf, mini.tensor([1.0, 1.0]))
    np.testing.assert_array_equal(leaf.grad.numpy(), [1.0, 1.0])
    engine.accumulate_grad(leaf, mini.tensor([0.5, 2.0]))
    np.testing.assert_array_equal(leaf.grad.numpy(), [1.5, 3.0])


def test_a_student_topological_order_is_used_by_backward():
    calls = []

    @mini.exercises.implement("02.toposort")
    def student(roots):
        calls.append(1)
        return engine.topological_order.reference(roots)

    x = mini.tensor(2.0, requires_grad=True)
    (x * x).backward()
    assert calls and x.grad.item() == 4.0
    mini.exercises.unregister("02.toposort")
