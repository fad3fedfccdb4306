"""Reverse-mode semantics of mini.autograd: values from the course's seed facts, the recorded
graph, accumulation, freed graphs, version counters, grad mode, hooks, higher order."""
from __future__ import annotations

import gc
import math
import weakref

import numpy as np
import pytest

import mini
from mini.autograd import Function, graph


def close(t, expected, tol=1e-6):
    got = np.asarray(t.detach().numpy() if hasattr(t, "detach") else t, dtype=np.float64)
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol)


# --- seed facts ---------------------------------------------------------------------------

def test_y_equals_2x_plus_1():
    x = mini.tensor(3.0, requires_grad=True)
    y = 2 * x
    z = y + 1
    z.backward()
    close(x.grad, 2.0)
    assert x.grad.shape == x.shape


def test_toy_network_gradients():
    x = mini.tensor(1.0, requires_grad=True)
    w1 = mini.tensor(2.0, requires_grad=True)
    w2 = mini.tensor(3.0, requires_grad=True)
    h = w1 * x
    y = w2 * h
    y.backward()
    close(w2.grad, 2.0)
    close(w1.grad, 3.0)
    close(x.grad, 6.0)


def test_square_of_3x_and_its_grad_fn_chain():
    x = mini.tensor(2.0, requires_grad=True)
    z = (3 * x) ** 2
    z.backward()
    close(x.grad, 36.0)
    assert z.grad_fn.name() == "PowBackward0"
    (mul_node, _), = [e for e in z.grad_fn.next_functions if e[0] is not None]
    assert mul_node.name() == "MulBackward0"
    (acc, _), = [e for e in mul_node.next_functions if e[0] is not None]
    assert acc.name() == "AccumulateGrad"
    assert acc.variable is x
    assert x.grad_fn is None and x.is_leaf and not z.is_leaf


def test_relu_vjp():
    x = mini.tensor([-1.0, 2.0, 3.0], requires_grad=True)
    y = mini.relu(x)
    y.backward(mini.full((3,), 0.5))
    close(x.grad, [0.0, 0.5, 0.5])


def test_broadcast_gradient_is_summed_over_broadcast_dims():
    b = mini.tensor([0.5, -0.3], requires_grad=True)
    x = mini.zeros(3, 2)
    y = x + b
    y.backward(mini.tensor([[1.0, 2.0], [0.5, 1.5], [0.3, 0.7]]))
    close(b.grad, [1.8, 4.2])
    assert tuple(b.grad.shape) == (2,)


class MultiplyAdd(Function):
    @staticmethod
    def forward(ctx, x, y, z):
        ctx.save_for_backward(x, y)
        return x * y + z

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        return grad * y, grad * x, grad


def test_custom_function_with_save_for_backward():
    x = mini.tensor(2.0, requires_grad=True)
    y = mini.tensor(3.0, requires_grad=True)
    z = mini.tensor(1.0, requires_grad=True)
    out = MultiplyAdd.apply(x, y, z)
    close(out, 7.0)
    assert out.grad_fn.name() == "MultiplyAddBackward"
    out.backward()
    close(x.grad, 3.0)
    close(y.grad, 2.0)
    close(z.grad, 1.0)


def test_custom_function_forward_runs_without_recording():
    seen = {}

    class Probe(Function):
        @staticmethod
        def forward(ctx, x):
            seen["enabled"] = mini.is_grad_enabled()
            y = x * 2
            seen["inner_requires_grad"] = y.requires_grad
            return y

        @staticmethod
        def backward(ctx, g):
            return g * 2

    x = mini.tensor([1.0, 2.0], requires_grad=True)
    out = Probe.apply(x)
    assert seen == {"enabled": False, "inner_requires_grad": False}
    assert out.requires_grad and out.grad_fn is not None
    out.sum().backward()
    close(x.grad, [2.0, 2.0])


# --- accumulation --------------------------------------------------------------------------

def test_grad_accumulates_across_backward_calls():
    x = mini.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    close(x.grad, [2.0, 4.0])
    y.backward()
    close(x.grad, [4.0, 8.0])


def test_tensor_used_by_several_ops_gets_the_sum():
    x = mini.tensor(3.0, requires_grad=True)
    y = x * x + x.exp() + x  # three uses, x*x counts twice
    y.backward()
    close(x.grad, 2 * 3.0 + math.exp(3.0) + 1.0, tol=1e-5)


def _counting_identity(calls: list):
    """An identity Function whose backward appends to ``calls``."""
    class Count(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1.0

        @staticmethod
        def backward(ctx, g):
            calls.append(1)
            return g
    return Count


def test_diamond_graph_runs_each_node_once():
    calls = []
    x = mini.tensor(2.0, requires_grad=True)
    h = _counting_identity(calls).apply(x)
    y = h * 3 + h * 4
    y.backward()
    assert len(calls) == 1, "a node with two consumers must run once, after both"
    close(x.grad, 7.0)


def test_grad_is_not_aliased_to_the_seed_gradient():
    x = mini.tensor([1.0, 2.0], requires_grad=True)
    seed = mini.tensor([1.0, 1.0])
    (x + 0).backward(seed)
    seed.mul_(100.0)
    close(x.grad, [1.0, 1.0])


# --- freed graphs, errors ------------------------------------------------------------------

def test_second_backward_through_freed_graph_raises():
    x = mini.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="second time"):
        y.backward()


def test_backward_on_non_scalar_without_gradient_raises():
    x = mini.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    with pytest.raises(RuntimeError, match="scalar"):
        y.backward()


def test_backward_gradient_of_wrong_shape_raises():
    x = mini.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError):
        (x * 2).backward(mini.ones(3))


def test_backward_on_tensor_without_grad_raises():
    with pytest.raises(RuntimeError):
        mini.tensor(1.0).backward()


def test_saved_tensors_released_after_backward():
    x = mini.randn(100, 100, requires_grad=True)
    w = mini.randn(100, 100, requires_grad=True)
    y = ((x @ w).tanh() * x).sum()
    assert graph.saved_tensor_bytes(y) > 0
    y.backward()
    assert graph.saved_tensor_bytes(y) == 0


def test_saved_tensors_kept_with_retain_graph():
    x = mini.randn(10, requires_grad=True)
    y = x.exp().sum()
    before = graph.saved_tensor_bytes(y)
    assert before > 0
    y.backward(retain_graph=True)
    assert graph.saved_tensor_bytes(y) == before


def test_saved_buffers_are_freed_for_real():
    x = mini.randn(50, requires_grad=True)
    h = x.exp()                       # saves its output
    ref = weakref.ref(h._data.storage)
    y = (h * 2).sum()
    del h
    gc.collect()
    assert ref() is not None, "the graph keeps the saved output alive before backward"
    y.backward()
    gc.collect()
    assert ref() is None, "after backward the saved output's buffer must be released"


# --- in-place writes and version counters ------------------------------------------------

def test_version_counter_increments_on_every_in_place_write():
    t = mini.zeros(4)
    assert t._version == 0
    t.add_(1.0)
    assert t._version == 1
    t[0] = 5.0
    assert t._version == 2
    t.copy_(mini.ones(4))
    assert t._version == 3
    t.mul_(2.0)
    t.fill_(3.0)
    t.zero_()
    assert t._version == 6
    v = t[1:]
    v.add_(1.0)
    assert t._version == 7 and v._version == 7, "views share the version counter"
    close(t, [0.0, 1.0, 1.0, 1.0])


@pytest.mark.parametrize("write", ["add_", "setitem", "copy_", "mul_", "fill_", "zero_"])
def test_in_place_write_to_saved_tensor_then_backward_raises(write):
    x = mini.tensor([1.0, 2.0, 3.0], requires_grad=True)
    c = mini.tensor([4.0, 5.0, 6.0])
    y = (x * c).sum()                  # Mul saves c for x's gradient
    if write == "add_":
        c.add_(1.0)
    elif write == "setitem":
        c[0] = 10.0
    elif write == "copy_":
        c.copy_(mini.zeros(3))
    elif write == "mul_":
        c.mul_(2.0)
    elif write == "fill_":
        c.fill_(1.0)
    else:
        c.zero_()
    with pytest.raises(RuntimeError, match="version"):
        y.backward()


def test_in_place_write_to_a_tensor_that_was_not_saved_does_not_raise():
    x = mini.tensor([1.0, 2.0, 3.0], requires_grad=True)
    c = mini.tensor([4.0, 5.0, 6.0])
    y = (x * c).sum()                  # x's gradient needs c, c needs no gradient: x not saved
    z = (x + c).sum()                  # add saves nothing
    with mini.no_grad():
        x.add_(1.0)
    c2 = c.clone()
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), c2.numpy())
    x.grad = None
    c.mul_(2.0)
    z.backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 1.0, 1.0])


def test_in_place_write_to_saved_output_raises():
    x = mini.tensor([1.0, 2.0], requires_grad=True)
    y = x.exp()                        # exp saves its output
    y.add_(1.0)
    with pytest.raises(RuntimeError, match="version"):
        y.sum().backward()


def test_in_place_write_through_a_view_of_a_saved_tensor_raises():
    x = mini.tensor([1.0, 2.0, 3.0], requires_grad=True)
    c = mini.tensor([4.0, 5.0, 6.0])
    y = (x * c).sum()
    c[1:][0] = 0.0
    with pytest.raises(RuntimeError, match="version"):
        y.backward()


def test_in_place_on_leaf_requiring_grad_raises_but_works_under_no_grad():
    w = mini.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError):
        w.add_(1.0)
    with mini.no_grad():
        w.add_(1.0)
    close(w, [2.0, 3.0])
    assert w.requires_grad and w.is_leaf


def test_recorded_in_place_ops_on_non_leaves_have_correct_gradients():
    x = mini.tensor([1.0, 2.0, 3.0], requires_grad=True)
    a = x * 2
    a.add_(1.0)                        # a = 2x + 1
    a[0] = 0.0                         # first element no longer depends on x
    a.sum().backward()
    close(x.grad, [0.0, 2.0, 2.0])


def test_in_place_mul_by_tensor_that_requires_grad():
    # torch: a = x*1; a.mul_(w); a.sum().backward() works (the old value of a is kept)
    x = mini.tensor([1.0, 2.0, 3.0], requires_grad=True)
    w = mini.tensor([4.0, 5.0, 6.0], requires_grad=True)
    a = x * 1
    a.mul_(w)
    a.sum().backward()
    close(w.grad, [1.0, 2.0, 3.0])
    close(x.grad, [4.0, 5.0, 6.0])


def test_setitem_of_tensor_value_routes_gradient_to_the_value():
    x = mini.zeros(4, requires_grad=True)
    v = mini.tensor([7.0, 8.0], requires_grad=True)
    a = x * 1
    a[1:3] = v
    (a * mini.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
    close(v.grad, [2.0, 3.0])
    close(x.grad, [1.0, 0.0, 0.0, 4.0])


def test_setitem_into_a_plain_buffer_records_the_value():
    w = mini.tensor(2.0, requires_grad=True)
    out = mini.zeros(3)
    out[0] = w
    out[2] = w * 3
    assert out.requires_grad and out.grad_fn is not None
    out.sum().backward()
    close(w.grad, 4.0)


# --- grad mode, detach ---------------------------------------------------------------------

def test_no_grad_records_nothing():
    x = mini.tensor([1.0, 2.0], requires_grad=True)
    with mini.no_grad():
        y = x * 2 + 1
        assert not mini.is_grad_enabled()
    assert mini.is_grad_enabled()
    assert y.grad_fn is None and not y.requires_grad
    z = x * 2
    assert z.requires_grad


def test_no_grad_as_decorator_and_enable_grad_inside():
    @mini.no_grad()
    def f(x):
        with mini.enable_grad():
            inner = x * 2
        return x * 2, inner

    x = mini.tensor(1.0, requires_grad=True)
    outer, inner = f(x)
    assert outer.grad_fn is None and inner.grad_fn is not None
    with mini.set_grad_enabled(False):
        assert (x * 3).grad_fn is None
    assert mini.is_grad_enabled()


def test_detach_shares_data_but_not_history():
    x = mini.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    d = y.detach()
    assert d.grad_fn is None and not d.requires_grad
    assert d._data.storage is y._data.storage
    z = (d * x).sum()
    z.backward()
    close(x.grad, [3.0, 6.0])   # d is a constant


def test_requires_grad_only_for_floating_point():
    with pytest.raises(RuntimeError):
        mini.tensor([1, 2], requires_grad=True)


# --- hooks, retain_grad ---------------------------------------------------------------------

def test_hook_modifies_gradient_and_handle_removes_it():
    x = mini.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    handle = y.register_hook(lambda g: g * 10)
    y.sum().backward()
    close(x.grad, [20.0, 20.0])
    handle.remove()
    x.grad = None
    y2 = x * 2
    y2.sum().backward()
    close(x.grad, [2.0, 2.0])


def test_hook_on_leaf_sees_and_replaces_gradient():
    seen = []
    x = mini.tensor([1.0, 2.0], requires_grad=True)
    h = x.register_hook(lambda g: seen.append(g.detach().numpy().copy()) or g + 1)
    (x * 3).sum().backward()
    np.testing.assert_allclose(seen[0], [3.0, 3.0])
    close(x.grad, [4.0, 4.0])
    h.remove()
    x.grad = None
    (x * 3).sum().backward()
    close(x.grad, [3.0, 3.0])
    assert len(seen) == 1


def test_hook_returning_none_keeps_gradient():
    x = mini.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: None)
    y.sum().backward()
    close(x.grad, [2.0, 2.0])


def test_retain_grad_keeps_gradient_of_non_leaf():
    x = mini.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    z = y * y
    y.retain_grad()
    assert y.retains_grad
    z.sum().backward()
    close(y.grad, [4.0, 8.0])
    close(x.grad, [8.0, 16.0])
    w = x * 2
    (w * w).sum().backward()
    assert w.grad is None, "non-leaf .grad stays None without retain_grad"


def test_retain_grad_sees_the_gradient_after_tensor_hooks_whatever_the_order():
    # PyTorch (>= 2.0): the retains_grad hook always runs after the tensor's other hooks
    for retain_first in (True, False):
        x = mini.tensor([1.0, 2.0], requires_grad=True)
        y = x * 2
        if retain_first:
            y.retain_grad()
        y.register_hook(lambda g: g * 10)
        if not retain_first:
            y.retain_grad()
        y.sum().backward()
        close(y.grad, [10.0, 10.0])
        close(x.grad, [20.0, 20.0])


def test_dot_grad_owns_its_memory_even_when_the_gradient_is_a_broadcast():
    # sum's backward broadcasts the upstream gradient (a stride-0 view); what lands in .grad
    # must be an ordinary tensor (torch: contiguous), or an in-place update such as gradient
    # clipping or zeroing one entry would write through every aliased element
    cases = []
    x = mini.randn(3, requires_grad=True)
    x.sum().backward()
    cases.append(("leaf .grad", x))
    x2 = mini.randn(3, requires_grad=True)
    x2.sum().backward(create_graph=True)
    cases.append(("leaf .grad with create_graph", x2))
    x3 = mini.randn(3, requires_grad=True)
    y = x3 * 2
    y.retain_grad()
    y.sum().backward()
    cases.append(("retain_grad .grad", y))
    aliased = []
    for what, t in cases:
        with mini.no_grad():
            t.grad[0] = 5.0
        if t.grad[1].item() == 5.0:
            aliased.append(what)
    assert not aliased, f"writing grad[0] changed grad[1] for: {aliased}"


# --- long chains, higher order -------------------------------------------------------------

def test_ten_thousand_op_chain_backward_has_no_recursion_error():
    x = mini.tensor(1.0, requires_grad=True)
    y = x
    for _ in range(10_000):
        y = y * 1.0001
    y.backward()
    close(x.grad, 1.0001 ** 10_000, tol=1e-3)


def test_second_derivative_of_cube_via_create_graph():
    x = mini.tensor(2.0, requires_grad=True)
    y = x ** 3
    (g,) = mini.autograd.grad(y, x, create_graph=True)
    close(g, 12.0)
    assert g.requires_grad
    (g2,) = mini.autograd.grad(g, x)
    close(g2, 12.0)


def test_third_derivative_of_sin():
    x = mini.tensor(0.7, dtype=mini.float64, requires_grad=True)
    y = x.sin()
    (g1,) = mini.autograd.grad(y, x, create_graph=True)
    (g2,) = mini.autograd.grad(g1, x, create_graph=True)
    (g3,) = mini.autograd.grad(g2, x)
    close(g1, math.cos(0.7), 1e-12)
    close(g2, -math.sin(0.7), 1e-12)
    close(g3, -math.cos(0.7), 1e-12)


def test_backward_with_create_graph_then_differentiate_grad():
    x = mini.tensor([1.0, 2.0], dtype=mini.float64, requires_grad=True)
    (x ** 3).sum().backward(create_graph=True)
    gx = x.grad                         # 3x^2, with history
    assert gx.requires_grad
    (h,) = mini.autograd.grad(gx.sum(), x)
    close(h, [6.0, 12.0], 1e-12)


def test_autograd_grad_does_not_touch_dot_grad():
    x = mini.tensor([1.0, 2.0], requires_grad=True)
    w = mini.tensor([3.0, 4.0], requires_grad=True)
    y = (x * w).sum()
    gx, gw = mini.autograd.grad(y, [x, w])
    close(gx, [3.0, 4.0])
    close(gw, [1.0, 2.0])
    assert x.grad is None and w.grad is None


def test_autograd_grad_unused_input():
    x = mini.tensor(1.0, requires_grad=True)
    u = mini.tensor(1.0, requires_grad=True)
    y = x * 2
    with pytest.raises(RuntimeError):
        mini.autograd.grad(y, [x, u], retain_graph=True)
    gx, gu = mini.autograd.grad(y, [x, u], allow_unused=True)
    close(gx, 2.0)
    assert gu is None


def test_autograd_grad_with_respect_to_intermediate():
    x = mini.tensor(3.0, requires_grad=True)
    h = x * 2
    y = h * h
    (gh,) = mini.autograd.grad(y, h)
    close(gh, 12.0)


class _CountedEdges(tuple):
    """A node's ``next_functions`` that counts how often the engine walks over them."""
    walks = 0

    def __iter__(self):
        type(self).walks += 1
        return super().__iter__()


def _count_edge_walks_of_grad(n_ops: int) -> int:
    x = mini.tensor([1.0], dtype=mini.float64, requires_grad=True)
    y = x
    for _ in range(n_ops):
        y = y * 1.001
    out = y.sum()
    stack, seen = [out.grad_fn], set()
    while stack:                       # instrument every node of the graph
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        node.next_functions = _CountedEdges(node.next_functions)
        stack.extend(child for child, _ in node.next_functions)
    _CountedEdges.walks = 0
    (g,) = mini.autograd.grad(out, x)
    close(g, [1.001 ** n_ops], 1e-9)
    return _CountedEdges.walks


def test_autograd_grad_walks_a_chain_in_linear_time():
    # A search from every node for the inputs is quadratic along a chain (it took 0.17 /
    # 0.66 / 2.55 s for 1k / 2k / 4k ops): count the walks over edges, not the time.
    short, long = _count_edge_walks_of_grad(500), _count_edge_walks_of_grad(1000)
    assert long <= 2.1 * short, (short, long)
    assert long <= 8 * 1000, f"{long} edge walks for a chain of 1000 ops"


def test_autograd_grad_skips_the_backward_of_branches_that_do_not_reach_the_inputs():
    calls = []
    traced = _counting_identity(calls)
    x = mini.tensor(2.0, requires_grad=True)
    z = mini.tensor(3.0, requires_grad=True)
    side = z
    for _ in range(5):
        side = traced.apply(side)
    (gx,) = mini.autograd.grad(x * x + side, x)
    close(gx, 4.0)
    assert calls == [], "the branch through z was differentiated although only x was asked for"


def test_backward_inputs_argument_restricts_accumulation():
    x = mini.tensor(1.0, requires_grad=True)
    w = mini.tensor(2.0, requires_grad=True)
    (x * w).backward(inputs=[w])
    close(w.grad, 1.0)
    assert x.grad is None


# --- custom Function contract errors ------------------------------------------------------

def test_custom_function_errors_are_clear():
    class TooFew(Function):
        @staticmethod
        def forward(ctx, x, y):
            return x * y

        @staticmethod
        def backward(ctx, g):
            return g

    class WrongShape(Function):
        @staticmethod
        def forward(ctx, x):
            return x.sum()

        @staticmethod
        def backward(ctx, g):
            return g.reshape(1)         # x has shape (3,)

    class NotATensor(Function):
        @staticmethod
        def forward(ctx, x):
            return 3.0

        @staticmethod
        def backward(ctx, g):
            return g

    x = mini.tensor([1.0, 2.0, 3.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="number of gradients"):
        TooFew.apply(x, x).sum().backward()
    with pytest.raises(RuntimeError, match="shape"):
        WrongShape.apply(x).backward()
    with pytest.raises(TypeError):
        NotATensor.apply(x)


def test_custom_function_with_non_tensor_arguments():
    class Scale(Function):
        @staticmethod
        def forward(ctx, x, factor):
            ctx.factor = factor
            return x * factor

        @staticmethod
        def backward(ctx, g):
            return g * ctx.factor, None

    x = mini.tensor([1.0, 2.0], requires_grad=True)
    Scale.apply(x, 4.0).sum().backward()
    close(x.grad, [4.0, 4.0])
    assert len(Scale.apply(x, 2.0).grad_fn.next_functions) == 1
