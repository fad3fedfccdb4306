"""Fusion: chains of elementwise ops become one generated C++ kernel.  The fused kernel
computes what eager computes (bit for bit for +, -, *, /, max: the same IEEE operations in
the same order, no contraction into FMAs), reads its inputs once and writes once, and is
never formed across a reduction, a broadcast or a value needed elsewhere."""
from __future__ import annotations

import numpy as np
import pytest

import mini
from mini import jit
from mini.jit import fusion
from mini.jit.examples import gelu8
from mini.jit.graph import Ref
from mini.ndarray import track_allocations


def test_gelu_is_one_chain_and_one_kernel():
    x = mini.randn(1000)
    g = jit.capture_graph(gelu8, x)
    assert fusion.find_chains(g) == [list(range(8))]
    fused = jit.capture_graph(gelu8, x, fuse=True)
    assert [n.op for n in fused.nodes] == ["Fused(Mul,Mul,Add,Mul,Tanh,Mul,Add,Mul)"]
    kernel = fused.nodes[0].kernel
    assert kernel.n_inputs == 1, "x is read by three ops but is one input of the kernel"
    got = jit.run_graph(fused, x).numpy()
    # tanh from the C library vs numpy's vectorised tanh: a few float32 ulps apart
    np.testing.assert_allclose(got, gelu8(x).numpy(), rtol=2e-6, atol=2e-7)


def test_exactly_rounded_chains_are_bit_identical_to_eager():
    def chain(x, y):
        z = x
        for _ in range(25):
            z = (z * 1.001 + y) - x * 0.5
            z = mini.maximum(z, y) / 1.5
        return z
    f = mini.compile(chain)
    for n in (7, 100_000):
        x, y = mini.randn(n), mini.randn(n)
        f(x, y)
        x, y = mini.randn(n), mini.randn(n)
        assert np.array_equal(f(x, y).numpy(), chain(x, y).numpy())
    # the 25 products x * 0.5 are side inputs of the chain (a chain is linear), computed
    # before it; the 125 nodes of the chain itself are one kernel
    ops = [n.op for n in f.graphs()[0].nodes]
    assert ops[:25] == ["Mul"] * 25 and len(ops) == 26 and ops[25].count(",") == 124


def test_traffic_of_a_k_op_chain_falls_from_2kN4_to_2N4():
    n, k = 10_000, 6

    def chain(x):
        for _ in range(k // 2):
            x = (x * 1.5).tanh()
        return x
    x = mini.randn(n)
    plain = jit.capture_graph(chain, x)
    fused = jit.capture_graph(chain, x, fuse=True)
    assert jit.traffic(plain)["total"] == 2 * k * n * 4
    assert jit.traffic(fused)["total"] == 2 * n * 4
    # and the allocation counter sees the writes: k buffers unfused, one fused
    env = {Ref("input", 0): x.numpy()}
    for graph, buffers in ((plain, k), (fused, 1)):
        with track_allocations() as stats:
            jit.replay(graph, env)
        assert stats.bytes == buffers * n * 4


def test_no_chain_across_a_reduction_a_broadcast_or_a_shared_value():
    def f(x, b):
        y = (x * 2.0).exp()            # 0, 1: a chain
        s = y.sum(dim=1, keepdim=True)  # 2: a reduction ends it
        z = (y / s).relu()             # 3 broadcasts s: not fusible; 4 relu alone
        w = z * 3.0                    # 5: z is read twice (here and below)
        return w + z                   # 6
    x, b = mini.randn(4, 5), mini.randn(5)
    g = jit.capture_graph(f, x, b)
    assert [n.op for n in g.nodes] == ["Mul", "Exp", "Sum", "Div", "Relu", "Mul", "Add"]
    assert fusion.find_chains(g) == [[0, 1], [5, 6]]
    fused = jit.capture_graph(f, x, b, fuse=True)
    np.testing.assert_allclose(jit.run_graph(fused, x, b).numpy(), f(x, b).numpy(), rtol=1e-6)


def test_a_value_returned_by_the_function_is_not_fused_away():
    def f(x):
        h = x * 2.0
        return h, h.relu() + 1.0
    g = jit.capture_graph(f, mini.randn(3))
    assert fusion.find_chains(g) == [[1, 2]]


def test_invalid_chains_are_refused_before_anything_is_compiled():
    x = mini.randn(4, 3)
    g = jit.capture_graph(lambda x: (x * 2.0).sum(dim=0) + 1.0, x)
    with pytest.raises(fusion.FusionError, match="not an elementwise op"):
        fusion._validate(g, [[0, 1]])
    g = jit.capture_graph(lambda x: (x * 2.0, (x * 2.0).exp()), x)
    g2 = jit.capture_graph(lambda x: (lambda h: (h, h.exp()))(x * 2.0), x)
    with pytest.raises(fusion.FusionError, match="needed outside the chain"):
        fusion._validate(g2, [[0, 1]])
    del g


def test_a_fused_kernel_may_write_over_an_input_that_dies_with_it():
    def f(x):
        h = x.exp()                    # 0: alone (read by two nodes)
        a = h * 2.0                    # 1 } a chain whose input h is read by nothing after
        b = a + h                      # 2 }
        return b.relu() - 1.0          # 3, 4: a chain whose input is b
    x = mini.randn(50)
    g = jit.capture_graph(f, x)
    assert fusion.find_chains(g) == [[1, 2, 3, 4]]
    fused = jit.capture_graph(f, x, fuse=True)
    kernel = fused.nodes[1].kernel
    assert kernel.donate == 0, "h dies at the kernel: its buffer can take the result"
    np.testing.assert_allclose(jit.run_graph(fused, x).numpy(), f(x).numpy(), rtol=1e-6)


def test_the_generated_source_reads_inputs_once_and_writes_out_once():
    g = jit.capture_graph(lambda x, y: ((x + y) * x - 0.25).relu(), mini.randn(8), mini.randn(8))
    body, inputs = fusion.kernel_body(g, [0, 1, 2, 3])
    assert inputs == [Ref("input", 0), Ref("input", 1)]
    assert body.count("in0[i]") == 1 and body.count("in1[i]") == 1
    assert body.count("out[i]") == 1 and body.strip().splitlines()[-1].startswith("out[i]")
    assert "static_cast<float>(0.25)" in body


def test_float64_chains_compile_as_double():
    x = mini.randn(20, dtype="float64")
    f = mini.compile(lambda x: (x.abs() * 3.0 + 1.0).sqrt())
    f(x)
    assert "double" in f.graphs()[0].nodes[0].kernel.source
    assert np.array_equal(f(x).numpy(), (x.abs() * 3.0 + 1.0).sqrt().numpy())


def test_compiled_functions_compile_once_per_guard_set():
    f = mini.compile(gelu8)
    for _ in range(4):
        f(mini.randn(64))
    f(mini.randn(65))
    assert f.stats.traces == 2 and f.stats.replays == 3
