"""gradcheck (central differences in float64) for every differentiable operation, including
broadcasting inputs, batched/broadcast matmul with 1-D operands, getitem with steps, negative
and integer-array indices, cat/stack, and reductions over axes with keepdim."""
from __future__ import annotations

import numpy as np
import pytest

import mini
from mini.autograd import gradcheck
from ops_helpers import all_cases

CASES = all_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_gradcheck(case):
    arrays = case.arrays(seed=1)
    inputs = tuple(mini.tensor(a, dtype=mini.float64, requires_grad=True) for a in arrays)

    def fn(*xs):
        return case.fn(mini, *xs)

    out = fn(*inputs)
    assert out.requires_grad and out.dtype == mini.float64
    assert gradcheck(fn, inputs)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_backward_gives_gradients_of_the_inputs_shape_and_dtype(case):
    for dtype in (mini.float32, mini.float64):
        arrays = case.arrays(seed=2)
        inputs = [mini.tensor(a, dtype=dtype, requires_grad=True) for a in arrays]
        out = case.fn(mini, *inputs)
        assert out.dtype == dtype
        out.backward(mini.ones_like(out))
        for x in inputs:
            assert x.grad is not None
            assert tuple(x.grad.shape) == tuple(x.shape)
            assert x.grad.dtype == dtype
            assert not x.grad.requires_grad and x.grad.grad_fn is None


def test_seed_fact_broadcast_bias_gradient():
    b = mini.tensor([0.5, -0.3], dtype=mini.float64, requires_grad=True)
    x = mini.zeros(3, 2, dtype=mini.float64)
    (x + b).backward(mini.tensor([[1, 2], [0.5, 1.5], [0.3, 0.7]], dtype=mini.float64))
    np.testing.assert_allclose(b.grad.numpy(), [1.8, 4.2], rtol=1e-12)


def test_repeated_integer_indices_accumulate():
    x = mini.tensor([1.0, 2.0, 3.0], requires_grad=True)
    x[mini.tensor([0, 2, 2, 2])].sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 0.0, 3.0])


def test_max_ties_share_the_gradient_for_full_reduction():
    x = mini.tensor([1.0, 3.0, 3.0], requires_grad=True)
    x.max().backward()
    np.testing.assert_allclose(x.grad.numpy(), [0.0, 0.5, 0.5])


def test_max_along_dim_sends_gradient_to_the_returned_index():
    x = mini.tensor([[1.0, 5.0, 2.0], [7.0, 0.0, 3.0]], requires_grad=True)
    values, indices = x.max(dim=1)
    np.testing.assert_array_equal(indices.numpy(), [1, 0])
    values.backward(mini.tensor([10.0, 20.0]))
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 10, 0], [20, 0, 0]])


def test_relu_gradient_at_zero_is_zero():
    x = mini.tensor([0.0], requires_grad=True)
    mini.relu(x).backward(mini.ones(1))
    assert x.grad.item() == 0.0


def test_second_order_gradcheck_through_composite():
    # gradients of gradients: gradcheck the function x -> d/dx sum(f(x))
    x = mini.tensor(np.linspace(-1, 1, 5), dtype=mini.float64, requires_grad=True)

    def df(t):
        # mini's gradcheck evaluates fn under no_grad for the finite differences (torch's
        # does not), so the inner autograd call needs grad mode switched back on
        with mini.enable_grad():
            y = (t.tanh() * t.exp() + t ** 3).sum()
            (g,) = mini.autograd.grad(y, t, create_graph=True)
        return g

    assert gradcheck(df, (x,))
