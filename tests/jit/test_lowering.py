"""Lowering: every node's kernel computes what eager computed, bit for bit (the kernel is the
one eager ends up calling), on both host devices, for the lowered ops and for the generic
fallback; the graph's own pieces (Refs, printing, Python constants) behave as documented."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import mini
from mini import jit
from mini.jit.graph import Ref, map_refs, refs_in
from mini.jit.lowering import as_array, as_tensor
from mini.jit.tracer import python_constants

DEVICES = ["cpu", "numpy"]


def replayed(fn, *tensors):
    """fn's graph, replayed on the tensors it was traced on, as numpy arrays."""
    g = jit.capture_graph(fn, *tensors)
    out = jit.run_graph(g, *tensors)
    outs = out if isinstance(out, tuple) else (out,)
    return g, [o.numpy() for o in outs]


def eager(fn, *tensors):
    out = fn(*tensors)
    return [o.numpy() for o in (out if isinstance(out, tuple) else (out,))]


def assert_same(got, want):
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        assert np.array_equal(g, w, equal_nan=True)     # the same kernels: the same bits


ELEMENTWISE = [
    lambda x, y: x + y, lambda x, y: x - y, lambda x, y: x * y, lambda x, y: x / y,
    lambda x, y: mini.maximum(x, y), lambda x, y: x * 0.1, lambda x, y: 0.3 - x,
    lambda x, y: 2.0 / x, lambda x, y: x + 3, lambda x, y: -x, lambda x, y: x.exp(),
    lambda x, y: x.abs().log(), lambda x, y: x.abs().sqrt(), lambda x, y: x.sin(),
    lambda x, y: x.cos(), lambda x, y: x.tanh(), lambda x, y: x.sigmoid(),
    lambda x, y: x.relu(), lambda x, y: x.abs(),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("k", range(len(ELEMENTWISE)))
@given(n=st.sampled_from([1, 3, 16, 17, 1000, 70_000]), seed=st.integers(0, 2**16),
       dtype=st.sampled_from(["float32", "float64"]))
@settings(max_examples=6, deadline=None)
def test_elementwise_kernels_are_eagers(device, k, n, seed, dtype):
    rng = np.random.default_rng(seed)
    x = mini.tensor(rng.standard_normal(n).astype(dtype), device=device)
    y = mini.tensor(rng.standard_normal(n).astype(dtype), device=device)
    g, got = replayed(ELEMENTWISE[k], x, y)
    assert not any(getattr(node.kernel, "generic", False) for node in g.nodes)
    assert_same(got, eager(ELEMENTWISE[k], x, y))


@pytest.mark.parametrize("device", DEVICES)
def test_strided_operands_and_views(device):
    rng = np.random.default_rng(1)
    a = mini.tensor(rng.standard_normal((6, 8)).astype("float32"), device=device)
    b = mini.tensor(rng.standard_normal((8,)).astype("float32"), device=device)
    fns = [lambda a, b: (a.T * 2.0).exp(),                     # a transposed input
           lambda a, b: a.T + a.T,                             # two strided operands
           lambda a, b: (a + b).relu(),                        # a broadcast bias
           lambda a, b: a.reshape(4, 12).T.reshape(-1) * 3.0,  # views, one that copies
           lambda a, b: a[1:5, ::2].relu() + 1.0,              # a sliced view
           lambda a, b: b.expand(6, 8) - a,                    # an expanded view
           lambda a, b: (a @ a.T).tanh(),                      # matmul of a transposed view
           lambda a, b: a[:, :4] @ a[:4, :]]                   # strided matmul operands
    for fn in fns:
        g, got = replayed(fn, a, b)
        assert not any(getattr(n.kernel, "generic", False) for n in g.nodes), \
            [n.op for n in g.nodes if getattr(n.kernel, "generic", False)]
        assert_same(got, eager(fn, a, b))


@pytest.mark.parametrize("device", DEVICES)
def test_ops_without_a_kernel_of_their_own_run_the_op_itself(device):
    rng = np.random.default_rng(2)
    a = mini.tensor(rng.standard_normal((4, 5)).astype("float32"), device=device)
    i = mini.tensor([3, 0, 3], device=device)
    fns = [lambda a, i: a.sum(dim=1, keepdim=True) / a.mean(),
           lambda a, i: mini.where(a > 0, a, a * 0.5),
           lambda a, i: mini.cat([a, a * 2.0], dim=0).max(),
           lambda a, i: a[:, i] + 1.0,
           lambda a, i: a.double().exp(),
           lambda a, i: (a ** 2.0).sum(dim=0)]
    for fn in fns:
        g, got = replayed(fn, a, i)
        assert any(getattr(n.kernel, "generic", False) for n in g.nodes)
        assert_same(got, eager(fn, a, i))


def test_an_in_place_write_to_an_intermediate_view_writes_through():
    def f(x):
        h = x * 2.0
        h[1:3].add_(10.0)
        return h.T
    x = mini.randn(4, 3)
    g, got = replayed(f, x)
    assert_same(got, eager(f, x))


def test_as_array_and_as_tensor_share_memory():
    a = mini.randn(3, 4)
    flat = as_array(a)
    assert flat.ndim == 1 and np.shares_memory(flat, a._data.storage.data)
    view = as_array(a.T)
    assert view.shape == (4, 3) and np.shares_memory(view, flat)
    t = as_tensor(view, "cpu")
    assert t.shape == (4, 3) and np.shares_memory(as_array(t), flat)
    np.testing.assert_array_equal(t.numpy(), a.numpy().T)
    back = as_tensor(flat, "numpy", (3, 4))
    assert back.device.name == "numpy" and np.shares_memory(as_array(back), flat)


def test_map_refs_keeps_containers_and_finds_every_ref():
    r0, r1 = Ref("input", 0), Ref("node", 3)
    obj = (r0, [1.0, (slice(None), r1)], {"k": r0}, None)
    assert refs_in(obj) == [r0, r1, r0]
    mapped = map_refs(obj, lambda r: r.index)
    assert mapped == (0, [1.0, (slice(None), 3)], {"k": 0}, None)
    assert type(mapped[1]) is list and type(mapped[1][1]) is tuple


def test_a_graph_prints_like_torch_fx():
    w = mini.ones(3)
    g = jit.capture_graph(lambda x: (x * w).sum() if x.sum() > 0 else x, mini.ones(3))
    text = str(g)
    assert text.splitlines()[0] == "graph(x0: float32[3]):"
    assert "c0 = captured float32[3]" in text and "guard item(%1) == True" in text
    assert text.splitlines()[-1] == "  return %4"


# --------------------------------------------------------------------------- constants

K = 3
NAME = "mean"


def reads_globals(x):
    return x * K if NAME == "mean" else x


def test_python_constants_of_globals_closures_and_modules():
    assert ("tests.jit.test_lowering.K", ("int", 3)) in python_constants(reads_globals) or \
        any(k.endswith(".K") and v == ("int", 3) for k, v in python_constants(reads_globals))

    def make(scale):
        return lambda x: x * scale
    consts = dict(python_constants(make(0.5)))
    assert any(k.endswith("scale") and v == ("float", 0.5) for k, v in consts.items())

    lin = mini.nn.Linear(2, 2)
    lin.alpha = 0.25
    consts = dict(python_constants(lin))
    assert consts["training"] == ("bool", True) and consts["alpha"] == ("float", 0.25)
    lin.eval()
    assert dict(python_constants(lin))["training"] == ("bool", False)


def test_python_constants_follow_called_functions():
    def outer(x):
        return reads_globals(x) + 1.0
    assert any(k.endswith(".K") for k, _ in python_constants(outer))
