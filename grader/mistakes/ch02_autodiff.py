"""Typical wrong implementations of the chapter 02 exercises (automatic differentiation).

Each entry is a plausible student answer; the chapter's checks must fail it with a message
that contains ``expect_message`` (the words that name the mistake).
"""
from __future__ import annotations

from collections import deque

import numpy as np

from grader.mistakes import Mistake


# --------------------------------------------------------------------------- engine

def _loop(order, grads, run_node, retain_graph, *, add="new", release="after",
          lookup="pop"):
    """The backward loop with one step done as students get it wrong: ``add`` "new" (a new
    sum), "assign" (overwrite) or "inplace" (+=); ``release`` "after", "never", "always"
    (even with retain_graph) or "before" (before running the node); ``lookup`` "pop"
    (skips a missing node) or "index" (grads.pop(id(node)) with no default)."""
    for node in order:
        grad = grads.pop(id(node)) if lookup == "index" else grads.pop(id(node), None)
        if grad is None:
            continue
        if release == "before" and not retain_graph:
            node.release()
        outs = run_node(node, grad)
        if (release == "after" and not retain_graph) or release == "always":
            node.release()
        for (child, _), g in zip(node.next_functions, outs):
            if child is None or g is None:
                continue
            key = id(child)
            if key not in grads or add == "assign":
                grads[key] = g
            elif add == "inplace":
                grads[key] += g
            else:
                grads[key] = grads[key] + g


def _propagate_overwrite(order, grads, run_node, retain_graph):
    """Assigns the gradient of each edge: a tensor used twice keeps only the last one."""
    _loop(order, grads, run_node, retain_graph, add="assign")


def _propagate_inplace(order, grads, run_node, retain_graph):
    """Accumulates with +=, which writes into a gradient object another edge also holds."""
    _loop(order, grads, run_node, retain_graph, add="inplace")


def _propagate_no_release(order, grads, run_node, retain_graph):
    """Right gradients, but the saved tensors of every node stay alive."""
    _loop(order, grads, run_node, retain_graph, release="never")


def _propagate_ignores_retain(order, grads, run_node, retain_graph):
    """Releases every node, even when the caller asked to keep the graph."""
    _loop(order, grads, run_node, retain_graph, release="always")


def _toposort_recursive(roots):
    """Textbook recursive DFS: right order, but one Python frame per node."""
    order, seen = [], set()

    def visit(node):
        if node is None or id(node) in seen:
            return
        seen.add(id(node))
        for child, _ in node.next_functions:
            visit(child)
        order.append(node)

    for r in roots:
        visit(r)
    return order[::-1]


def _toposort_bfs(roots):
    """Breadth-first listing: a node reached early by a short path comes before the long
    path's nodes that still send it gradients."""
    order, seen = [], set()
    queue = deque(r for r in roots if r is not None)
    for r in queue:
        seen.add(id(r))
    while queue:
        node = queue.popleft()
        order.append(node)
        for child, _ in node.next_functions:
            if child is not None and id(child) not in seen:
                seen.add(id(child))
                queue.append(child)
    return order


def _post_order(root, seen: set, skip_none: bool = True) -> list:
    """The iterative depth-first post-order below ``root`` (not yet in ``seen``), the
    skeleton most students' answers share; ``skip_none=False`` follows None edges too."""
    seen.add(id(root))
    post, stack = [], [(root, iter(root.next_functions))]
    while stack:
        node, children = stack[-1]
        for child, _ in children:
            if (child is not None or not skip_none) and id(child) not in seen:
                seen.add(id(child))
                stack.append((child, iter(child.next_functions)))
                break
        else:
            stack.pop()
            post.append(node)
    return post


def _toposort_not_reversed(roots):
    """Iterative post-order, but returned leaves first."""
    order, seen = [], set()
    for root in roots:
        if root is not None and id(root) not in seen:
            order += _post_order(root, seen)
    return order


def _seed_zeros(output, gradient):
    from mini.ops.creation import zeros_like
    if gradient is None:
        if output.numel() != 1:
            raise RuntimeError("grad can be implicitly created only for scalar outputs")
        return zeros_like(output)
    return gradient


def _seed_any_shape(output, gradient):
    """No error for a non-scalar output: backward of a vector silently sums it."""
    from mini.ops.creation import ones_like
    return ones_like(output) if gradient is None else gradient


def _accumulate_overwrite(leaf, grad):
    leaf.grad = grad


# --------------------------------------------------------------------------- VJPs

def _mul_vjp_swapped(grad, a, b):
    return grad * a, grad * b


def _div_vjp_sign(grad, a, b):
    return grad / b, grad * a / (b * b)


def _pow_vjp_no_factor(grad, a, exponent):
    return grad * a ** (exponent - 1)


def _exp_vjp_twice(grad, out):
    return grad * out.exp()


def _relu_vjp_ge(grad, a):
    return grad * (a >= 0).to(dtype=grad.dtype)


def _sum_to_not_summed(grad, shape):
    return grad


def _sum_to_trailing(grad, shape):
    """Sums the trailing axes: forgets that broadcasting aligns shapes at the right."""
    shape = tuple(shape)
    extra = grad.ndim - len(shape)
    out = grad.sum(axis=tuple(range(len(shape), grad.ndim))) if extra > 0 else grad
    return out


def _sum_to_leading_only(grad, shape):
    """Sums the new leading axes, but not the axes that had length 1."""
    extra = grad.ndim - len(tuple(shape))
    return grad.sum(axis=tuple(range(extra))) if extra > 0 else grad


def _sum_vjp_not_broadcast(grad, input_shape, axes, keepdim):
    return grad


def _sum_vjp_wrong_axis(grad, input_shape, axes, keepdim):
    """expand without putting the reduced axes back first: numpy aligns at the right."""
    return grad.expand(input_shape)


def _mean_vjp_unscaled(grad, input_shape, axes, keepdim):
    from mini.ops.reduction import _keepdim_shape
    if not keepdim:
        grad = grad.reshape(_keepdim_shape(input_shape, axes))
    return grad.expand(input_shape)


def _permute_vjp_same(grad, axes):
    return grad.permute(tuple(axes))


def _matmul_vjp_no_transpose(grad, a, b):
    """Transposes the wrong operand: grad @ b needs bᵀ, aᵀ @ grad needs aᵀ."""
    return grad @ b, a @ grad


def _matmul_vjp_dot_T(grad, a, b):
    """.T reverses every axis: right for matrices, wrong for a batch."""
    return grad @ b.T, a.T @ grad


# --------------------------------------------------------------------------- forward mode, gradcheck

def _mul_jvp_tangents_only(a, b, tangent_a, tangent_b):
    if tangent_a is None:
        return a * tangent_b
    if tangent_b is None:
        return tangent_a * b
    return tangent_a * tangent_b


def _mul_jvp_one_term(a, b, tangent_a, tangent_b):
    if tangent_a is None:
        return a * tangent_b
    return tangent_a * b


def _central_difference_one_sided(f, x, eps=1e-6):
    x = np.array(x, dtype=np.float64)
    fx = np.asarray(f(x), dtype=np.float64)
    rows = []
    for j in range(x.size):
        step = np.zeros_like(x)
        step[j] = eps
        rows.append((np.asarray(f(x + step), dtype=np.float64) - fx) / eps)
    return np.array(rows, dtype=np.float64).reshape(x.size, fx.size)


def _central_difference_float32(f, x, eps=1e-6):
    x = np.array(x, dtype=np.float32)
    rows = []
    for j in range(x.size):
        step = np.zeros_like(x)
        step[j] = eps
        rows.append((np.asarray(f(x + step)) - np.asarray(f(x - step))) / (2 * eps))
    return np.array(rows, dtype=np.float64).reshape(x.size, -1)


# --------------------------------------------------------------------------- custom Function

def _multiply_add_attributes():
    from mini.autograd import Function

    class MultiplyAdd(Function):
        """Keeps x and y as ctx attributes: no version check, never freed."""

        @staticmethod
        def forward(ctx, x, y, z):
            ctx.x, ctx.y = x, y
            return x * y + z

        @staticmethod
        def backward(ctx, grad):
            return grad * ctx.y, grad * ctx.x, grad

    return MultiplyAdd


def _multiply_add_with(backward):
    """A MultiplyAdd whose forward is right (saves x and y) and whose backward is
    ``backward(grad, x, y)``."""
    from mini.autograd import Function

    class MultiplyAdd(Function):
        @staticmethod
        def forward(ctx, x, y, z):
            ctx.save_for_backward(x, y)
            return x * y + z

        @staticmethod
        def backward(ctx, grad):
            x, y = ctx.saved_tensors
            return backward(grad, x, y)

    return MultiplyAdd


def _multiply_add_swapped():
    """The gradients of x and y swapped."""
    return _multiply_add_with(lambda grad, x, y: (grad * x, grad * y, grad))


# --------------------------------------------------------------------------- edge inputs, layouts, side effects

def _relu_vjp_inplace(grad, a):
    """Masks the incoming gradient in place: right values, but grad is shared (add's rule
    hands one tensor to both inputs), so another input's gradient changes too."""
    return grad.mul_((a > 0).to(dtype=grad.dtype))


def _mean_vjp_reciprocal(grad, input_shape, axes, keepdim):
    """1.0 / n as a Python number: ZeroDivisionError when an axis has length 0."""
    n = 1
    for ax in axes:
        n *= input_shape[ax]
    scale = 1.0 / n
    if not keepdim:
        grad = grad.reshape(tuple(1 if i in axes else d for i, d in enumerate(input_shape)))
    return grad.expand(input_shape) * scale


def _reshape_vjp_view(grad, input_shape):
    """.view needs a contiguous gradient; a transposed one makes it raise."""
    return grad.view(tuple(input_shape))


def _pow_vjp_over_a(grad, a, exponent):
    """exponent * a**exponent / a: the same away from 0, nan at a = 0."""
    return grad * exponent * a ** exponent / a


def _sum_to_where_longer(grad, shape):
    """Sums the axes where grad is longer than the target: misses a 1 broadcast to 0."""
    shape = tuple(shape)
    lead = grad.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape)
                                      if grad.shape[lead + i] > d)
    out = grad.sum(axis=axes, keepdim=True) if axes else grad
    return out.reshape(tuple(out.shape)[lead:]) if lead else out


def _toposort_per_root(roots):
    """Reverse post-order per root, concatenated: wrong when one root feeds another."""
    order, seen = [], set()
    for root in roots:
        if root is not None and id(root) not in seen:
            order += _post_order(root, seen)[::-1]
    return order


def _toposort_roots_unmarked(roots):
    """Marks the children it visits but not the roots: a root listed twice appears twice."""
    order, seen = [], set()
    for root in roots:
        if root is not None:
            order += _post_order(root, seen)
            seen.discard(id(root))
    return order[::-1]


def _seed(output, gradient, *, scalar=lambda t: t.numel() == 1,
          same=lambda g, t: tuple(g.shape) == tuple(t.shape), ones=None):
    """seed_gradient with one test or constructor done as students get it wrong."""
    from mini.ops.creation import ones_like
    if gradient is None:
        if not scalar(output):
            raise RuntimeError("grad can be implicitly created only for scalar outputs")
        return (ones or ones_like)(output)
    if not same(gradient, output):
        raise RuntimeError("gradient and output differ in shape")
    return gradient


def _seed_same_numel(output, gradient):
    """Compares the number of elements instead of the shape."""
    return _seed(output, gradient, same=lambda g, t: g.numel() == t.numel())


def _seed_default_dtype(output, gradient):
    """mini.ones(shape): the default dtype, not the output's."""
    import mini
    return _seed(output, gradient, ones=lambda t: mini.ones(tuple(t.shape)))


def _accumulate_inplace(leaf, grad):
    """Keeps the first gradient object and adds the next ones into it with +=."""
    if leaf.grad is None:
        leaf.grad = grad
    else:
        leaf.grad += grad


def _propagate_release_first(order, grads, run_node, retain_graph):
    """Frees the node's saved tensors before running it."""
    _loop(order, grads, run_node, retain_graph, release="before")


def _propagate_index(order, grads, run_node, retain_graph):
    """grads.pop(id(node)) without a default: KeyError at a node no gradient reached."""
    _loop(order, grads, run_node, retain_graph, lookup="index")


def _mul_jvp_no_none(a, b, tangent_a, tangent_b):
    """The product rule, but a None tangent is used as if it were a tensor."""
    return tangent_a * b + a * tangent_b


def _central_difference_inplace(f, x, eps=1e-6):
    """Perturbs the caller's x in place and puts it back by adding and subtracting eps,
    which leaves rounding errors in x."""
    rows = []
    for j in range(x.size):
        x[j] += eps
        plus = np.asarray(f(x.copy()), dtype=np.float64)
        x[j] -= 2 * eps
        minus = np.asarray(f(x.copy()), dtype=np.float64)
        x[j] += eps
        rows.append((plus - minus) / (2 * eps))
    return np.array(rows, dtype=np.float64).reshape(x.size, -1)


def _central_difference_input_dtype(f, x, eps=1e-6):
    """Steps in x's own dtype: a float32 x is perturbed (and f called) in float32."""
    x = np.asarray(x)
    rows = []
    for j in range(x.size):
        step = np.zeros_like(x)
        step[j] = eps
        rows.append((np.asarray(f(x + step)) - np.asarray(f(x - step))) / (2 * eps))
    return np.array(rows, dtype=np.float64).reshape(x.size, -1)


def _multiply_add_two_grads():
    """Returns gradients for x and y only (z forgotten)."""
    return _multiply_add_with(lambda grad, x, y: (grad * y, grad * x))


def _toposort_none_children(roots):
    """Does not skip the None edges of inputs that need no gradient."""
    order, seen = [], set()
    for root in roots:
        if id(root) not in seen:
            order += _post_order(root, seen, skip_none=False)
    return order[::-1]


def _seed_ndim(output, gradient):
    """Calls only 0-d outputs scalars: a (1,) output without a gradient raises."""
    return _seed(output, gradient, scalar=lambda t: t.ndim == 0)


def _accumulate_truthiness(leaf, grad):
    """`if leaf.grad:` instead of a test against None."""
    leaf.grad = leaf.grad + grad if leaf.grad else grad


def _sum_vjp_first_axis(grad, input_shape, axes, keepdim):
    """Puts back only the first reduced axis."""
    if not keepdim:
        grad = grad.unsqueeze(axes[0])
    return grad.expand(input_shape)


def _mean_vjp_first_axis_n(grad, input_shape, axes, keepdim):
    """n is the length of the first reduced axis only."""
    if not keepdim:
        grad = grad.reshape(tuple(1 if i in axes else d for i, d in enumerate(input_shape)))
    return grad.expand(input_shape) / input_shape[axes[0]]


def _permute_vjp_reversed(grad, axes):
    """Reverses the permutation's list: its inverse only for swaps of two axes."""
    return grad.permute(tuple(reversed(tuple(axes))))


def _central_difference_flat(f, x, eps=1e-6):
    """Rows of shape (m,) stacked, but a single output (m = 1) comes back as shape (n,)."""
    x = np.array(x, dtype=np.float64)
    rows = []
    for j in range(x.size):
        step = np.zeros_like(x)
        step[j] = eps
        rows.append((np.asarray(f(x + step)) - np.asarray(f(x - step))) / (2 * eps))
    return np.squeeze(np.array(rows, dtype=np.float64))


def _multiply_add_no_grad():
    """Returns the local derivatives without multiplying by the incoming gradient."""
    return _multiply_add_with(lambda grad, x, y: (y * 1.0, x * 1.0, grad * 0.0 + 1.0))


MISTAKES = [
    Mistake("02.backward", "gradient overwritten instead of accumulated for a reused tensor",
            _propagate_overwrite, expect_message="overwritten instead of accumulated"),
    Mistake("02.backward", "in-place += into a gradient that another edge shares",
            _propagate_inplace, expect_message="in place"),
    Mistake("02.backward", "saved tensors never released", _propagate_no_release,
            expect_message="saved tensors never released"),
    Mistake("02.backward", "releases the graph even with retain_graph=True",
            _propagate_ignores_retain, expect_message="retain_graph=True"),
    Mistake("02.toposort", "recursive depth-first search (RecursionError on a 10,000-op chain)",
            _toposort_recursive, expect_message="RecursionError"),
    Mistake("02.toposort", "breadth-first order", _toposort_bfs,
            expect_message="wrong topological order"),
    Mistake("02.toposort", "post-order returned leaves first", _toposort_not_reversed,
            expect_message="the order is reversed"),
    Mistake("02.seed_gradient", "seed of zeros", _seed_zeros, expect_message="seed of zeros"),
    Mistake("02.seed_gradient", "no error for a non-scalar output without a gradient",
            _seed_any_shape, expect_message="only a scalar"),
    Mistake("02.accumulate_grad", ".grad overwritten across backward calls", _accumulate_overwrite,
            expect_message="gradients accumulate"),
    Mistake("02.unbroadcast", "broadcast gradient not summed", _sum_to_not_summed,
            expect_message="did you sum over the broadcast axis?"),
    Mistake("02.unbroadcast", "summed over the trailing instead of the leading axes",
            _sum_to_trailing, expect_message="wrong axes"),
    Mistake("02.unbroadcast", "size-1 axes not summed", _sum_to_leading_only,
            expect_message="length 1"),
    Mistake("02.matmul_vjp", "matmul gradient transposed wrongly", _matmul_vjp_no_transpose,
            expect_message="transpose"),
    Mistake("02.matmul_vjp", ".T on batched operands", _matmul_vjp_dot_T,
            expect_message="reverses EVERY axis"),
    Mistake("02.sum_vjp", "sum gradient not broadcast back", _sum_vjp_not_broadcast,
            expect_message="broadcast grad back"),
    Mistake("02.sum_vjp", "sum gradient broadcast along the wrong axis", _sum_vjp_wrong_axis,
            expect_message="wrong axis"),
    Mistake("02.mean_vjp", "mean gradient not scaled by 1/n", _mean_vjp_unscaled,
            expect_message="scale by 1/n"),
    Mistake("02.relu_vjp", "relu gradient passes at 0 (a >= 0)", _relu_vjp_ge,
            expect_message="at a == 0 the gradient must be 0"),
    Mistake("02.mul_vjp", "each gradient multiplied by its own factor", _mul_vjp_swapped,
            expect_message="OTHER factor"),
    Mistake("02.div_vjp", "sign of b's gradient", _div_vjp_sign, expect_message="sign of grad_b"),
    Mistake("02.pow_vjp", "exponent factor dropped", _pow_vjp_no_factor,
            expect_message="dropped the factor p"),
    Mistake("02.exp_vjp", "exp applied to the saved output again", _exp_vjp_twice,
            expect_message="already exp(a)"),
    Mistake("02.permute_vjp", "same permutation instead of its inverse", _permute_vjp_same,
            expect_message="INVERSE permutation"),
    Mistake("02.mul_jvp", "product rule: tangent times tangent", _mul_jvp_tangents_only,
            expect_message="product rule"),
    Mistake("02.mul_jvp", "product rule: one term missing", _mul_jvp_one_term,
            expect_message="two terms"),
    Mistake("02.central_difference", "one-sided differences", _central_difference_one_sided,
            expect_message="one-sided difference"),
    Mistake("02.central_difference", "differences in float32", _central_difference_float32,
            expect_message="float32"),
    Mistake("02.multiply_add", "inputs kept as ctx attributes instead of save_for_backward",
            _multiply_add_attributes(), expect_message="ctx.save_for_backward"),
    Mistake("02.multiply_add", "gradients of x and y swapped", _multiply_add_swapped(),
            expect_message="the other factor"),
    # edge inputs, layouts, side effects, errors (issue 18)
    Mistake("02.relu_vjp", "masks the incoming gradient in place", _relu_vjp_inplace,
            expect_message="changed its input grad in place"),
    Mistake("02.mean_vjp", "1.0 / n fails for an axis of length 0", _mean_vjp_reciprocal,
            expect_message="averages no elements"),
    Mistake("02.reshape_vjp", ".view on a non-contiguous gradient", _reshape_vjp_view,
            expect_message="not contiguous"),
    Mistake("02.pow_vjp", "exponent * out / a: nan at a = 0", _pow_vjp_over_a,
            expect_message="divides by a"),
    Mistake("02.unbroadcast", "sums where grad is longer (misses 1 broadcast to 0)",
            _sum_to_where_longer, expect_message="where the TARGET has length 1"),
    Mistake("02.toposort", "reverse post-order per root, concatenated", _toposort_per_root,
            expect_message="wrong topological order"),
    Mistake("02.toposort", "roots not marked as visited", _toposort_roots_unmarked,
            expect_message="appears twice"),
    Mistake("02.seed_gradient", "compares numel instead of the shape", _seed_same_numel,
            expect_message="must raise RuntimeError"),
    Mistake("02.seed_gradient", "seed in the default dtype", _seed_default_dtype,
            expect_message="the dtype of the output"),
    Mistake("02.accumulate_grad", "adds into the first gradient tensor with +=",
            _accumulate_inplace, expect_message="changed in place"),
    Mistake("02.backward", "releases a node before running it", _propagate_release_first,
            expect_message="released before run_node ran it"),
    Mistake("02.backward", "looks up a node's gradient without a default", _propagate_index,
            expect_message="has no entry in grads"),
    Mistake("02.mul_jvp", "a None tangent used as a tensor", _mul_jvp_no_none,
            expect_message="a None tangent stands for zero"),
    Mistake("02.central_difference", "perturbs the caller's x in place",
            _central_difference_inplace, expect_message="changed x in place"),
    Mistake("02.central_difference", "steps in x's own dtype (float32 stays float32)",
            _central_difference_input_dtype, expect_message="keep x ± eps in float64"),
    Mistake("02.toposort", "None edges not skipped", _toposort_none_children,
            expect_message="skip it"),
    Mistake("02.seed_gradient", "only a 0-d output counts as a scalar", _seed_ndim,
            expect_message="counts as a scalar"),
    Mistake("02.accumulate_grad", "if leaf.grad: instead of a None test", _accumulate_truthiness,
            expect_message="test for None explicitly"),
    Mistake("02.sum_vjp", "puts back only the first reduced axis", _sum_vjp_first_axis,
            expect_message="put them back as size-1 axes"),
    Mistake("02.mean_vjp", "n is the first reduced axis's length", _mean_vjp_first_axis_n,
            expect_message="ALL the reduced axes"),
    Mistake("02.permute_vjp", "the permutation's list reversed", _permute_vjp_reversed,
            expect_message="INVERSE permutation"),
    Mistake("02.central_difference", "a single output squeezed to shape (n,)",
            _central_difference_flat, expect_message="2-D (n, m) array"),
    Mistake("02.multiply_add", "local derivatives not multiplied by grad", _multiply_add_no_grad(),
            expect_message="multiply the incoming gradient"),
    Mistake("02.multiply_add", "backward forgets z's gradient", _multiply_add_two_grads(),
            expect_message="incorrect number of gradients"),
]
