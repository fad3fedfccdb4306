"""Differential tests against PyTorch: for every op, forward values and gradients (for a
random upstream gradient) agree with torch's — float64 to ~1e-10, float32 to ~1e-5 relative.

Skipped when torch is not installed (CI installs it: ``pip install -e '.[torch]'``)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

torch = pytest.importorskip("torch")

import mini  # noqa: E402
from ops_helpers import BINARY, DOMAINS, NON_DIFFERENTIABLE, all_cases  # noqa: E402

pytestmark = pytest.mark.torch

TOL = {np.float64: dict(rtol=1e-10, atol=1e-10), np.float32: dict(rtol=1e-5, atol=1e-5)}
MINI_DTYPE = {np.float64: mini.float64, np.float32: mini.float32}
TORCH_DTYPE = {np.float64: torch.float64, np.float32: torch.float32}

CASES = [c for c in all_cases() if c.torch]


def _np(t):
    if isinstance(t, torch.Tensor):
        return t.detach().numpy(force=True)
    return np.asarray(t.detach().numpy())


def compare(mini_fn, torch_fn, arrays, dtype, differentiable=True, seed=0):
    """Run both frameworks on the same inputs; compare outputs, dtypes and gradients."""
    tol = TOL[dtype]
    m_in = [mini.tensor(a.astype(dtype), dtype=MINI_DTYPE[dtype], requires_grad=differentiable)
            for a in arrays]
    t_in = [torch.tensor(a.astype(dtype), dtype=TORCH_DTYPE[dtype], requires_grad=differentiable)
            for a in arrays]
    m_out = mini_fn(*m_in)
    t_out = torch_fn(*t_in)
    assert tuple(m_out.shape) == tuple(t_out.shape)
    assert str(m_out.dtype).split(".")[-1] == str(t_out.dtype).split(".")[-1], (m_out.dtype, t_out.dtype)
    np.testing.assert_allclose(_np(m_out), _np(t_out), **tol)
    if not differentiable:
        return
    rng = np.random.default_rng(seed)
    upstream = rng.standard_normal(tuple(t_out.shape)).astype(dtype)
    m_out.backward(mini.tensor(upstream, dtype=MINI_DTYPE[dtype]))
    t_out.backward(torch.tensor(upstream))
    for i, (m, t) in enumerate(zip(m_in, t_in)):
        assert m.grad is not None, f"input {i} got no gradient"
        assert m.grad.dtype == m.dtype
        np.testing.assert_allclose(_np(m.grad), _np(t.grad), err_msg=f"gradient of input {i}", **tol)


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_values_and_gradients_match_torch(case, dtype):
    compare(lambda *xs: case.fn(mini, *xs), lambda *xs: case.fn(torch, *xs),
            case.arrays(seed=3), dtype)


@pytest.mark.parametrize("case", NON_DIFFERENTIABLE, ids=[c.id for c in NON_DIFFERENTIABLE])
def test_non_differentiable_outputs_match_torch(case):
    arrays = case.arrays(seed=4)
    m = case.fn(mini, *[mini.tensor(a) for a in arrays])
    t = case.fn(torch, *[torch.tensor(a) for a in arrays])
    assert tuple(m.shape) == tuple(t.shape)
    assert str(m.dtype).split(".")[-1] == str(t.dtype).split(".")[-1], (m.dtype, t.dtype)
    np.testing.assert_array_equal(_np(m), _np(t))


@given(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=4),
       st.sampled_from(BINARY), st.sampled_from([np.float64, np.float32]), st.integers(0, 2**16))
def test_random_broadcast_binary_ops_match_torch(shapes, op, dtype, seed):
    name, fn, da, db = op
    (sa, sb), _ = shapes
    rng = np.random.default_rng(seed)
    arrays = [DOMAINS[da](rng, sa), DOMAINS[db](rng, sb)]
    compare(lambda a, b: fn(mini, a, b), lambda a, b: fn(torch, a, b), arrays, dtype, seed=seed)


@given(st.sampled_from([(), (1,), (3,), (2, 1), (1, 3, 1)]), st.sampled_from([(), (1,), (2,), (3, 1)]),
       st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.booleans(), st.booleans(),
       st.integers(0, 2**16))
def test_random_batched_matmul_matches_torch(ba, bb, n, k, m, a_vec, b_vec, seed):
    a_shape = (k,) if a_vec else ba + (n, k)
    b_shape = (k,) if b_vec else bb + (k, m)
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(a_shape), rng.standard_normal(b_shape)]
    try:
        np.matmul(*arrays)
    except ValueError:
        return
    compare(lambda a, b: a @ b, lambda a, b: a @ b, arrays, np.float64, seed=seed)


@given(st.lists(st.integers(1, 4), min_size=1, max_size=4), st.data())
def test_random_reductions_match_torch(shape, data):
    x = data.draw(st.integers(0, 2**16))
    arr = DOMAINS["distinct"](np.random.default_rng(x), tuple(shape))
    ndim = len(shape)
    dims = data.draw(st.lists(st.integers(-ndim, ndim - 1), min_size=1, max_size=ndim,
                              unique_by=lambda d: d % ndim).map(tuple))
    keepdim = data.draw(st.booleans())
    which = data.draw(st.sampled_from(["sum", "mean", "amax", "logsumexp"]))
    if which == "logsumexp":
        fn = lambda lib, t: lib.logsumexp(t, dim=dims, keepdim=keepdim)  # noqa: E731
    else:
        fn = lambda lib, t: getattr(t, which)(dim=dims, keepdim=keepdim)  # noqa: E731
    compare(lambda t: fn(mini, t), lambda t: fn(torch, t), [arr], np.float64)
    d = dims[0]
    compare(lambda t: t.max(dim=d, keepdim=keepdim).values, lambda t: t.max(dim=d, keepdim=keepdim).values,
            [arr], np.float64)
    mi = mini.tensor(arr).max(dim=d, keepdim=keepdim).indices
    ti = torch.tensor(arr).max(dim=d, keepdim=keepdim).indices
    np.testing.assert_array_equal(mi.numpy(), ti.numpy())
    np.testing.assert_array_equal(mini.tensor(arr).argmax(dim=d, keepdim=keepdim).numpy(),
                                  torch.tensor(arr).argmax(dim=d, keepdim=keepdim).numpy())


@given(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.data())
def test_random_getitem_matches_torch(shape, data):
    arr = np.random.default_rng(0).standard_normal(shape)
    key = []
    for d in shape[:data.draw(st.integers(1, len(shape)))]:
        if data.draw(st.booleans()):
            key.append(None)           # a new axis: does not consume one of the array's
        if data.draw(st.booleans()):
            key.append(data.draw(st.integers(-d, d - 1)))
        else:
            key.append(slice(data.draw(st.one_of(st.none(), st.integers(-d - 2, d + 2))),
                             data.draw(st.one_of(st.none(), st.integers(-d - 2, d + 2))),
                             data.draw(st.one_of(st.none(), st.integers(1, 3)))))
    key = tuple(key)
    compare(lambda t: t[key] * 1.0, lambda t: t[key] * 1.0, [arr], np.float64)


@given(st.lists(st.integers(1, 3), min_size=1, max_size=3), st.integers(2, 3), st.data())
def test_random_cat_and_stack_match_torch(shape, n, data):
    ndim = len(shape)
    dim = data.draw(st.integers(-ndim, ndim - 1))
    rng = np.random.default_rng(data.draw(st.integers(0, 100)))
    parts = []
    for _ in range(n):
        s = list(shape)
        s[dim] = data.draw(st.integers(1, 3))
        parts.append(rng.standard_normal(s))
    compare(lambda *ts: mini.cat(list(ts), dim=dim), lambda *ts: torch.cat(list(ts), dim=dim),
            parts, np.float64)
    same = [rng.standard_normal(shape) for _ in range(n)]
    sdim = data.draw(st.integers(-ndim - 1, ndim))
    compare(lambda *ts: mini.stack(list(ts), dim=sdim), lambda *ts: torch.stack(list(ts), dim=sdim),
            same, np.float64)


# --- in-place sequences -------------------------------------------------------------------

def _add_mul_setitem_scalar(lib, x, w):
    a = x * 1.0
    a.add_(w)
    a.mul_(2.0)
    a[0] = 0.0
    a.sub_(1.5)
    return a


def _setitem_tensor_value(lib, x, w):
    a = x * 1.0
    a[1:, 1] = w[1:, 0]
    return a


def _copy_from_expression(lib, x, w):
    b = lib.zeros_like(x)
    b.copy_(x.exp() * w)
    return b


def _copy_broadcast(lib, x, w):
    b = lib.zeros_like(x)
    b.copy_(w[0])
    return b * x


def _add_with_alpha(lib, x, w):
    a = x * 1.0
    a.add_(w, alpha=0.5)
    return a


def _add_broadcast_tensor(lib, x, w):
    a = x * 1.0
    a.add_(w[0])                       # w[0] (4,) broadcast over a (3, 4)
    a.sub_(w[1:2])
    return a


INPLACE_PROGRAMS = [_add_broadcast_tensor, _add_mul_setitem_scalar, _setitem_tensor_value, _copy_from_expression,
                    _copy_broadcast, _add_with_alpha]


@pytest.mark.parametrize("program", INPLACE_PROGRAMS, ids=[p.__name__ for p in INPLACE_PROGRAMS])
def test_in_place_programs_match_torch(program):
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal((3, 4)), rng.standard_normal((3, 4))]
    compare(lambda x, w: program(mini, x, w), lambda x, w: program(torch, x, w),
            arrays, np.float64)


def test_in_place_mul_with_tensor_that_requires_grad_matches_torch():
    rng = np.random.default_rng(6)
    arrays = [rng.standard_normal((2, 3)), rng.standard_normal((2, 3))]

    def prog(x, w):
        a = x * 1.0
        a.mul_(w)
        return a

    compare(prog, prog, arrays, np.float64)


def test_no_grad_in_place_update_matches_torch():
    rng = np.random.default_rng(7)
    w0 = rng.standard_normal(4)
    g = rng.standard_normal(4)
    wm = mini.tensor(w0, requires_grad=True)
    wt = torch.tensor(w0, requires_grad=True)
    with mini.no_grad():
        wm.sub_(mini.tensor(g) * 0.1)
        wm.mul_(0.9)
    with torch.no_grad():
        wt.sub_(torch.tensor(g) * 0.1)
        wt.mul_(0.9)
    np.testing.assert_allclose(wm.detach().numpy(), wt.detach().numpy(), rtol=1e-12)


# --- dtype promotion agrees with torch ------------------------------------------------------

PROMOTION = [("float32", "float64"), ("float64", "float32"), ("float32", "int64"),
             ("int64", "float32"), ("int64", "int64"), ("float64", "int64"), ("bool", "float32"),
             ("bool", "int64")]


@pytest.mark.parametrize("a,b", PROMOTION)
def test_tensor_tensor_promotion_matches_torch(a, b):
    m = mini.ones(2, dtype=a) + mini.ones(2, dtype=b)
    t = torch.ones(2, dtype=getattr(torch, a)) + torch.ones(2, dtype=getattr(torch, b))
    assert str(m.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
@pytest.mark.parametrize("scalar", [2, 2.5])
@pytest.mark.parametrize("op", ["add", "mul", "truediv", "sub"])
def test_tensor_scalar_promotion_matches_torch(dtype, scalar, op):
    m = getattr(mini.ones(2, dtype=dtype), f"__{op}__")(scalar)
    t = getattr(torch.ones(2, dtype=getattr(torch, dtype)), f"__{op}__")(scalar)
    assert str(m.dtype).split(".")[-1] == str(t.dtype).split(".")[-1], (dtype, scalar, op)
    np.testing.assert_allclose(m.numpy(), t.numpy())


# --- edge cases where PyTorch defines the answer ---------------------------------------------

def test_pow_gradient_of_exponent_at_zero_base_matches_torch():
    # torch masks log(0) where the base is 0 (and the exponent >= 0): the gradient is 0, not nan
    arrays = [np.array([0.0, 1.0, 2.0]), np.array([2.0, 2.0, 0.5])]
    compare(lambda a, b: a ** b, lambda a, b: a ** b, arrays, np.float64)


@pytest.mark.parametrize("expr", ["a / b", "a.exp()", "a.sqrt()", "a.sin()", "a.float().mean()",
                                  "a.sigmoid()", "a.log()"])
def test_float_ops_on_int64_tensors_match_torch(expr):
    m = eval(expr, {"a": mini.tensor([1, 2, 4]), "b": mini.tensor([2, 2, 3])})
    t = eval(expr, {"a": torch.tensor([1, 2, 4]), "b": torch.tensor([2, 2, 3])})
    assert str(m.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]
    np.testing.assert_allclose(m.numpy(), t.numpy(), rtol=1e-6)


@pytest.mark.parametrize("rows", [
    [[float("-inf"), float("-inf")], [0.0, float("-inf")]],   # a fully masked row
    [[float("inf"), 1.0], [2.0, 3.0]],
], ids=["all_minus_inf_row", "plus_inf"])
def test_logsumexp_with_infinities_matches_torch(rows):
    m = mini.logsumexp(mini.tensor(rows, dtype=mini.float64), dim=1)
    t = torch.logsumexp(torch.tensor(rows, dtype=torch.float64), dim=1)
    # the infinities exactly; a finite row (3 + log(1 + e^-1)) up to the rounding of two
    # libraries' exp and log (assert_allclose requires infinities at the same places)
    assert np.array_equal(np.isinf(m.numpy()), np.isinf(t.numpy()))
    np.testing.assert_allclose(m.numpy(), t.numpy(), rtol=8 * np.finfo(np.float64).eps, atol=0)


SECOND_ORDER = [c for c in CASES if not c.id.startswith(("getitem_bool", "comparisons"))]


@pytest.mark.parametrize("case", SECOND_ORDER, ids=[c.id for c in SECOND_ORDER])
def test_second_order_gradients_match_torch(case):
    """Hessian-vector products through create_graph=True agree with torch's."""
    arrays = case.arrays(seed=8)
    results = {}
    for lib in (mini, torch):
        xs = [lib.tensor(a, dtype=lib.float64, requires_grad=True) for a in arrays]
        out = case.fn(lib, *xs)
        u = lib.tensor(np.random.default_rng(10).standard_normal(tuple(out.shape)), dtype=lib.float64)
        grads = lib.autograd.grad((out * u).sum(), xs, create_graph=True, allow_unused=True)
        vs = [lib.tensor(np.random.default_rng(11 + i).standard_normal(a.shape), dtype=lib.float64)
              for i, a in enumerate(arrays)]
        total = None
        for g, v in zip(grads, vs):
            if g is not None and g.requires_grad:
                term = (g * v).sum()
                total = term if total is None else total + term
        if total is None:
            results[lib.__name__] = [np.zeros(a.shape) for a in arrays]
            continue
        hv = lib.autograd.grad(total, xs, allow_unused=True)
        results[lib.__name__] = [np.zeros(a.shape) if h is None else _np(h) for h, a in zip(hv, arrays)]
    for i, (m, t) in enumerate(zip(results["mini"], results["torch"])):
        np.testing.assert_allclose(m, t, rtol=1e-9, atol=1e-9, err_msg=f"input {i}")
