"""Forward mode for every differentiable op: the JVP (one forward pass with dual numbers)
must agree with the VJP (reverse mode) through the identity <J v, u> = <v, Jᵀ u>,
for random tangents v and random upstream gradients u."""
from __future__ import annotations

import numpy as np
import pytest

import mini
from mini.autograd import forward_ad
from ops_helpers import all_cases

CASES = all_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_jvp_agrees_with_vjp(case):
    arrays = case.arrays(seed=5)
    rng = np.random.default_rng(6)
    tangents = [rng.standard_normal(a.shape) for a in arrays]
    with forward_ad.dual_level():
        duals = [forward_ad.make_dual(mini.tensor(a, dtype=mini.float64),
                                      mini.tensor(v, dtype=mini.float64))
                 for a, v in zip(arrays, tangents)]
        out = case.fn(mini, *duals)
        primal, jv = forward_ad.unpack_dual(out)
    assert jv is not None, "no tangent came out"
    assert tuple(jv.shape) == tuple(out.shape)
    xs = [mini.tensor(a, dtype=mini.float64, requires_grad=True) for a in arrays]
    out_r = case.fn(mini, *xs)
    np.testing.assert_allclose(primal.numpy(), out_r.detach().numpy(), rtol=1e-12, atol=1e-12)
    u = rng.standard_normal(tuple(out_r.shape))
    out_r.backward(mini.tensor(u, dtype=mini.float64))
    lhs = float((jv.numpy() * u).sum())
    rhs = sum(float((x.grad.numpy() * v).sum()) for x, v in zip(xs, tangents))
    assert lhs == pytest.approx(rhs, rel=1e-9, abs=1e-9)
