"""Scenarios of chapter 02 (automatic differentiation): the engine's exercises on recorded
graphs, the backward loop on fake nodes, a custom Function, and finite differences.

Observations are labels, numbers and arrays; the trusted check knows the graphs (it runs the
same scenario with mini's reference, or computes from the scenario's parameters).
"""
from __future__ import annotations

import numpy as np


def _mini():
    import mini
    return mini


def _describe(obj) -> str:
    t = type(obj)
    return f"an object of type {getattr(t, '__qualname__', '?')}"


# --------------------------------------------------------------------------- 02.toposort

def _walk(roots):
    """Nodes reachable from ``roots`` numbered in a fixed order, and the edges between them
    as numbers (parent, child)."""
    labels: dict[int, int] = {}
    nodes, edges = [], []
    stack = [r for r in roots if r is not None]
    for r in stack:
        if id(r) not in labels:
            labels[id(r)] = len(nodes)
            nodes.append(r)
    while stack:
        n = stack.pop()
        for child, _ in n.next_functions:
            if child is None:
                continue
            if id(child) not in labels:
                labels[id(child)] = len(nodes)
                nodes.append(child)
                stack.append(child)
            edges.append([labels[id(n)], labels[id(child)]])
    return labels, nodes, edges


def _graphs(seed: int):
    """(description, roots) of graphs recorded by mini (random parts from ``seed``)."""
    mini = _mini()
    gen = np.random.default_rng(seed)
    out = []
    x = mini.tensor(2.0, requires_grad=True)
    out.append(("z = (3*x)**2", [((3 * x) ** 2).grad_fn]))
    x = mini.tensor([1.0, 2.0], requires_grad=True)
    a = x * 2
    d = a.exp() + a * 3
    out.append(("a diamond (a = x*2; d = a.exp() + a*3)", [d.grad_fn]))
    y = x * 2
    h = y
    for _ in range(4):
        h = h * 1.5
    out.append(("a skip connection (y = x*2; h = y*1.5*1.5*1.5*1.5; out = y + h)", [(y + h).grad_fn]))
    w = mini.tensor(gen.standard_normal((3, 2)), requires_grad=True)
    inp = mini.tensor(gen.standard_normal((4, 3)))  # needs no grad: a None edge
    b = mini.tensor(gen.standard_normal(2), requires_grad=True)
    hid = (inp @ w + b).relu()
    out.append(("a small layer (relu(inp @ w + b) used twice)", [(hid * hid + hid).sum().grad_fn]))
    for _ in range(3):
        pool = [mini.tensor(gen.standard_normal(3), requires_grad=True) for _ in range(3)]
        pool.append(mini.tensor(gen.standard_normal(3)))
        for _ in range(int(gen.integers(8, 20))):
            i, j = (int(v) for v in gen.integers(0, len(pool), size=2))
            op = int(gen.integers(0, 4))
            if op == 0:
                t = pool[i] + pool[j]
            elif op == 1:
                t = pool[i] * pool[j]
            elif op == 2:
                t = pool[i].sin()
            else:
                t = pool[i] - pool[j] * 0.5
            pool.append(t)
        res = pool[-1] + pool[-2] + pool[len(pool) // 2]
        if res.grad_fn is not None:
            out.append(("a random graph", [res.sum().grad_fn]))
    x = mini.tensor([1.0, -1.0], requires_grad=True)
    s = (x * x).exp()
    r1, r2 = (s + 1).sum(), (s * x).sum()
    out.append(("two outputs sharing a subgraph (roots [r1.grad_fn, r2.grad_fn])", [r1.grad_fn, r2.grad_fn]))
    x = mini.tensor(1.0, requires_grad=True)
    out.append(("a leaf alone (roots [x's AccumulateGrad])", [x._accumulate_node()]))
    return out


def _order_of(impl, roots, labels) -> dict:
    """``impl(roots)`` as labels: the result's kind, a label per item (-1 and a description
    for an object that is not a node of the graph), or what it raised."""
    try:
        got = impl(list(roots))
    except NotImplementedError:
        raise
    except RecursionError as e:
        return {"raised": e, "recursion": True}
    except Exception as e:  # noqa: BLE001
        return {"raised": e}
    if type(got) not in (list, tuple):
        return {"kind": "other", "value": got}
    order, strangers = [], {}
    for i, n in enumerate(got):
        label = labels.get(id(n), -1)
        order.append(label)
        if label < 0 and len(strangers) < 3:
            strangers[str(i)] = _describe(n)
    return {"kind": "list", "order": order, "strangers": strangers}


def toposort_graphs(impl, *, seed: int) -> list:
    """Every graph of :func:`_graphs`: its nodes' names, its edges and ``impl``'s order."""
    out = []
    for desc, roots in _graphs(seed):
        labels, nodes, edges = _walk(roots)
        rec = {"desc": desc, "names": [n.name() for n in nodes], "edges": edges}
        rec.update(_order_of(impl, roots, labels))
        out.append(rec)
    return out


def toposort_chain(impl, *, length: int) -> dict:
    """A chain of ``length`` additions (deeper than Python's recursion limit)."""
    mini = _mini()
    x = mini.tensor(1.0, requires_grad=True)
    h = x
    for _ in range(int(length)):
        h = h + 1.0
    labels, nodes, edges = _walk([h.grad_fn])
    rec = {"names": [n.name() for n in nodes], "edges": edges}
    rec.update(_order_of(impl, [h.grad_fn], labels))
    return rec


# --------------------------------------------------------------------------- 02.backward

class FakeNode:
    """A graph node for watching the student's backward loop: run_node records every call."""

    def __init__(self, label: str):
        self.label = label
        self.next_functions = ()
        self.coeffs = ()          # per edge: the local derivative, or None (no gradient)
        self.same_object = False  # hand one array object to every edge (like add's rule)
        self.released = 0

    def release(self):
        self.released += 1

    def name(self):
        return self.label

    def __repr__(self):
        return f"<node {self.label}>"


def propagate_fake(impl, *, spec: dict, order: list, seeds: dict, retain_graph: bool,
                   same_object: str | None = None) -> dict:
    """``impl(order, grads, run_node, retain_graph)`` on fake nodes: each run_node call
    (label, gradient, released before?), what was wrong with a call, and how often each node
    was released.  ``spec``: ``{label: [(child label or None, coefficient or None), ...]}``."""
    nodes = {label: FakeNode(label) for label in spec}
    for label, edges in spec.items():
        n = nodes[label]
        n.next_functions = tuple(((nodes[c] if c is not None else None), 0) for c, _ in edges)
        n.coeffs = tuple(k for _, k in edges)
    if same_object:
        nodes[same_object].same_object = True
    grads = {id(nodes[label]): np.atleast_1d(np.array(g, dtype=np.float64))
             for label, g in seeds.items()}
    calls, problems = [], []

    def run_node(node, grad):
        if type(node) is not FakeNode:
            problems.append(f"run_node was called with {_describe(node)} instead of a node "
                            f"from `order`")
            return ()
        if grad is None:
            problems.append(f"run_node({node.label!r}, None) was called: a node that received "
                            f"no gradient has no entry in grads; skip it")
            return (None,) * len(node.next_functions)
        if type(grad) is not np.ndarray:
            problems.append(f"run_node({node.label!r}, ...) received {_describe(grad)} as the "
                            f"gradient: pass the gradient you took out of grads")
            return (None,) * len(node.next_functions)
        calls.append([node.label, np.array(grad, copy=True), node.released])
        if node.same_object:
            shared = grad * 1.0
            return tuple(None if k is None else shared for k in node.coeffs)
        return tuple(None if k is None else k * grad for k in node.coeffs)

    raised = None
    try:
        impl([nodes[label] for label in order], grads, run_node, retain_graph)
    except NotImplementedError:
        raise
    except Exception as e:  # noqa: BLE001
        raised = e
    return {"calls": calls, "problems": problems[:3], "raised": raised,
            "released": {label: n.released for label, n in nodes.items()}}


def backward_in_mini(impl, *, x0: np.ndarray, w0: np.ndarray) -> dict:
    """mini's backward with ``impl`` in the slot: two small networks (the leaves' gradients),
    then backward(retain_graph=True) and backward() (saved bytes before, between, after)."""
    mini = _mini()
    from mini.autograd import graph
    out: dict = {}
    try:
        x, w1, w2 = (mini.tensor(v, requires_grad=True, dtype="float64") for v in (1.0, 2.0, 3.0))
        (w2 * (w1 * x)).backward()
        out["toy"] = [t.grad for t in (x, w1, w2)]
    except NotImplementedError:
        raise
    except Exception as e:  # noqa: BLE001
        out["toy_raised"] = e
    try:
        x = mini.tensor(x0, requires_grad=True)
        w = mini.tensor(w0, requires_grad=True)
        h = x @ w
        ((h * h).sum() + h.sum() + (h * 2.0).sum()).backward()
        out["reused"] = [x.grad, w.grad]
    except NotImplementedError:
        raise
    except Exception as e:  # noqa: BLE001
        out["reused_raised"] = e
    try:
        x = mini.tensor(x0, requires_grad=True)
        y = (x.exp() * x).sum()
        before = graph.saved_tensor_bytes(y)
        y.backward(retain_graph=True)
        kept = graph.saved_tensor_bytes(y)
        y.backward()
        out["bytes"] = [before, kept, graph.saved_tensor_bytes(y)]
        out["twice"] = x.grad
    except NotImplementedError:
        raise
    except Exception as e:  # noqa: BLE001
        out["retain_raised"] = e
    return out


# --------------------------------------------------------------------------- 02.accumulate_grad

def accumulate_calls(impl, *, leaf: np.ndarray, grads: list) -> dict:
    """``impl(leaf, grad)`` for each grad on one leaf: ``leaf.grad`` after each call."""
    mini = _mini()
    t = mini.tensor(np.array(leaf, copy=True), requires_grad=True)
    after = []
    for g in grads:
        impl(t, mini.tensor(np.array(g, copy=True)))
        after.append(t.grad)
    return {"after": after}


def accumulate_in_mini(impl, *, x0: np.ndarray) -> dict:
    """Two backward passes of (x*x).sum() through mini with ``impl`` in the slot."""
    mini = _mini()
    x = mini.tensor(np.array(x0, copy=True), requires_grad=True)
    (x * x).sum().backward()
    (x * x).sum().backward()
    return {"grad": x.grad}


# --------------------------------------------------------------------------- 02.multiply_add

def _saved_has(node, *tensors) -> list:
    saved = getattr(node, "_saved", None) or ()
    storages = {id(t._data.storage) for t in saved if hasattr(t, "_data")}
    return [id(t._data.storage) in storages for t in tensors]


def multiply_add(cls, *, cases: list, version: list) -> dict:
    """The Function class ``cls`` on the chapter's example and on ``cases`` ``[x, y, z, g]``:
    outputs, what forward saved, the gradients its node's backward returns; then whether an
    in-place write to a saved input is noticed (what backward raised)."""
    mini = _mini()
    from mini.autograd.function import Function
    if not (isinstance(cls, type) and issubclass(cls, Function)):
        return {"not_a_function": cls}
    obs: dict = {"cases": []}
    for i, (xv, yv, zv, gv) in enumerate(cases):
        x, y, z = (mini.tensor(np.array(v, dtype=np.float64), requires_grad=True) for v in (xv, yv, zv))
        rec: dict = {}
        try:
            out = cls.apply(x, y, z)
        except NotImplementedError:
            raise
        except Exception as e:  # noqa: BLE001
            rec["apply_raised"] = e
            obs["cases"].append(rec)
            continue
        rec["out"] = out
        node = getattr(out, "grad_fn", None)
        rec["has_grad_fn"] = node is not None
        if node is not None:
            rec["saved_count"] = len(getattr(node, "_saved", None) or ())
            rec["saved_xy"] = _saved_has(node, x, y)
            try:
                grads = node.apply_backward(mini.tensor(np.array(gv, dtype=np.float64)))
                rec["grads"] = list(grads) if isinstance(grads, tuple) else grads
            except NotImplementedError:
                raise
            except Exception as e:  # noqa: BLE001
                rec["backward_raised"] = e
        obs["cases"].append(rec)
    xv, yv, zv = version
    x, y, z = (mini.tensor(np.array(v, dtype=np.float64), requires_grad=True) for v in (xv, yv, zv))
    a = x * 1.0  # a non-leaf copy that can be modified in place
    try:
        out = cls.apply(a, y, z)
        with mini.no_grad():
            a.add_(1.0)
        node = out.grad_fn
        node.apply_backward(mini.ones_like(out))
        obs["version"] = "unnoticed"
    except NotImplementedError:
        raise
    except Exception as e:  # noqa: BLE001
        obs["version"] = e
    return obs


# --------------------------------------------------------------------------- 02.central_difference

def f_sum_sin(x):
    return np.array([np.sum(np.sin(x) * x), np.prod(x[:2]) + np.exp(0.5 * x[-1])])


def f_exp_cube(x):
    return np.exp(2.0 * x) + x ** 3


def f_norm_cubed(x):
    return np.array([np.sum(x ** 2) ** 1.5])


#: The functions differentiated by the check (the check holds their exact Jacobians).
TEST_FUNCTIONS = {"sum_sin": f_sum_sin, "exp_cube": f_exp_cube, "norm_cubed": f_norm_cubed}


def central_difference(impl, *, cases: list) -> list:
    """``impl(f, x, eps)`` for each case ``[function name, x, eps]``: the result and what
    ``f`` was called with (a non-array, a dtype other than float64, a wrong shape)."""
    out = []
    for name, x, eps in cases:
        f = TEST_FUNCTIONS[name]
        x = np.array(x, dtype=np.float64)
        n = x.size
        seen = {"type": None, "dtype": None, "shape": None}

        def f_watch(v, f=f, seen=seen, n=n):
            if type(v) is not np.ndarray:
                seen["type"] = seen["type"] or _describe(v)
                v = np.asarray(v, dtype=np.float64)
            if v.dtype != np.float64:
                seen["dtype"] = seen["dtype"] or str(v.dtype)
            if v.shape != (n,):
                seen["shape"] = seen["shape"] or list(v.shape)
            return f(np.asarray(v, dtype=np.float64).reshape(-1)[:n])

        try:
            got = impl(f_watch, x.copy(), eps)
        except NotImplementedError:
            raise
        except Exception as e:  # noqa: BLE001 - reported with the call that raised
            out.append({"raised": e, "seen": seen})
            continue
        out.append({"got": got, "seen": seen})
    return out


SCENARIOS = {"toposort_graphs": toposort_graphs, "toposort_chain": toposort_chain,
             "propagate_fake": propagate_fake, "backward_in_mini": backward_in_mini,
             "accumulate_calls": accumulate_calls, "accumulate_in_mini": accumulate_in_mini,
             "multiply_add": multiply_add, "central_difference": central_difference}
