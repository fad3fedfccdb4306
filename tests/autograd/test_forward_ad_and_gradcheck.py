"""Forward mode (dual numbers) and the gradcheck tool itself."""
from __future__ import annotations

import math

import numpy as np
import pytest

import mini
from mini.autograd import Function, GradcheckError, forward_ad, gradcheck


# --- forward mode ---------------------------------------------------------------------------

def test_forward_mode_seed_fact_x2_sin_x():
    x0 = 2.0
    with forward_ad.dual_level():
        x = forward_ad.make_dual(mini.tensor(x0, dtype=mini.float64), mini.tensor(1.0, dtype=mini.float64))
        y = x ** 2 * x.sin()
        value, tangent = forward_ad.unpack_dual(y)
    assert round(value.item(), 3) == 3.637
    assert round(tangent.item(), 3) == 1.973
    assert tangent.item() == pytest.approx(2 * x0 * math.sin(x0) + x0 ** 2 * math.cos(x0), rel=1e-12)


def test_forward_mode_matches_reverse_mode_directional_derivative():
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((3, 4))
    v = rng.standard_normal((3, 4))
    w = mini.tensor(rng.standard_normal((4, 2)), dtype=mini.float64)

    def f(x):
        return ((x @ w).tanh() * 2.0 + x.sum(1, keepdim=True).exp()).sum()

    with forward_ad.dual_level():
        x = forward_ad.make_dual(mini.tensor(xv), mini.tensor(v))
        _, jvp = forward_ad.unpack_dual(f(x))
    xr = mini.tensor(xv, requires_grad=True)
    f(xr).backward()
    expected = float((xr.grad.numpy() * v).sum())
    assert jvp.item() == pytest.approx(expected, rel=1e-10)


def test_tangent_is_gone_after_the_dual_level():
    with forward_ad.dual_level():
        x = forward_ad.make_dual(mini.tensor([1.0, 2.0]), mini.tensor([1.0, 0.0]))
        y = x * 3
        assert forward_ad.unpack_dual(y).tangent is not None
    assert forward_ad.unpack_dual(x).tangent is None
    assert forward_ad.unpack_dual(y).tangent is None


def test_make_dual_outside_level_and_shape_mismatch_raise():
    with pytest.raises(RuntimeError):
        forward_ad.make_dual(mini.tensor([1.0]), mini.tensor([1.0]))
    with forward_ad.dual_level():
        with pytest.raises(ValueError):
            forward_ad.make_dual(mini.tensor([1.0, 2.0]), mini.tensor([1.0]))


def test_unpack_dual_of_plain_tensor_has_no_tangent():
    with forward_ad.dual_level():
        p, t = forward_ad.unpack_dual(mini.tensor([1.0]))
    assert t is None
    np.testing.assert_array_equal(p.numpy(), [1.0])


# --- gradcheck --------------------------------------------------------------------------------

class WrongSquare(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x            # should be 2x


class RightSquare(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 2 * x


def _x():
    return mini.tensor([0.3, -1.2, 2.0], dtype=mini.float64, requires_grad=True)


def test_gradcheck_passes_a_correct_backward():
    assert gradcheck(RightSquare.apply, (_x(),))


def test_gradcheck_detects_a_wrong_backward():
    with pytest.raises(GradcheckError):
        gradcheck(WrongSquare.apply, (_x(),))
    assert gradcheck(WrongSquare.apply, (_x(),), raise_exception=False) is False


def test_gradcheck_refuses_float32():
    x = mini.tensor([1.0, 2.0], dtype=mini.float32, requires_grad=True)
    with pytest.raises(ValueError, match="float64"):
        gradcheck(lambda t: t * t, (x,))


def test_gradcheck_needs_an_input_that_requires_grad():
    with pytest.raises(ValueError):
        gradcheck(lambda t: t * t, (mini.tensor([1.0], dtype=mini.float64),))


def test_gradcheck_leaves_inputs_unchanged():
    x = _x()
    before = x.detach().numpy().copy()
    gradcheck(lambda t: (t * t).sum(), (x,))
    np.testing.assert_array_equal(x.detach().numpy(), before)


def test_gradcheck_of_a_function_that_differentiates_inside():
    # torch.autograd.gradcheck(f) works when f itself calls autograd.grad(create_graph=True)
    # (that is how gradgradcheck is built): fn must run with grad mode as the caller has it
    x = mini.tensor([1.0, 2.0], dtype=mini.float64, requires_grad=True)

    def f(t):
        (g,) = mini.autograd.grad((t ** 3).sum(), t, create_graph=True)
        return g

    assert gradcheck(f, (x,))


def test_central_difference_exercise_slot():
    from mini.autograd.gradcheck import central_difference
    x = np.array([0.3, -1.2, 2.0])
    before = x.copy()

    def f(v):
        return np.array([np.sin(v[0]) * v[1], np.exp(v[2]), v.sum() ** 2, 1.0])

    jac = central_difference(f, x)
    expected = np.array([
        [np.cos(0.3) * -1.2, 0.0, 2 * x.sum(), 0.0],
        [np.sin(0.3), 0.0, 2 * x.sum(), 0.0],
        [0.0, np.exp(2.0), 2 * x.sum(), 0.0],
    ])
    assert jac.shape == (3, 4) and jac.dtype == np.float64
    np.testing.assert_allclose(jac, expected, atol=1e-8)
    np.testing.assert_array_equal(x, before)
    # central, not one-sided: for f(v) = v**2 the central difference is exact up to rounding
    sq = central_difference(lambda v: v ** 2, np.array([1.0]), eps=1e-3)
    assert abs(sq[0, 0] - 2.0) < 1e-9
