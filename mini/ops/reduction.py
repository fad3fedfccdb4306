"""Reductions: sum, mean, max/min (values and indices), argmax, logsumexp, var.

The gradient of a reduction is the output gradient broadcast back over the reduced
axes (scaled by 1/n for a mean, routed to the winning element for a max)."""
from __future__ import annotations

from collections import namedtuple

from mini.autograd.function import Function
from mini.autograd.tensor import Tensor
from mini.exercises import exercise
from mini.ndarray.ndarray import normalize_axes

_values_indices = namedtuple("max", ["values", "indices"])


def _keepdim_shape(shape, axes):
    return tuple(1 if i in axes else d for i, d in enumerate(shape))


def _expand_back(g: Tensor, in_shape, axes, keepdim: bool) -> Tensor:
    """Broadcast a reduced gradient back to the input's shape (a view, no copy)."""
    if not keepdim:
        g = g.reshape(_keepdim_shape(in_shape, axes))
    return g.expand(in_shape)


@exercise("02.sum_vjp")
def sum_vjp(grad, input_shape, axes, keepdim):
    """VJP of ``out = a.sum(axes, keepdim)``: every input element contributed once to its
    sum, so its gradient is the gradient of that sum.  Return ``grad`` broadcast back to
    ``input_shape`` (``axes`` is a sorted tuple of non-negative axes)."""
    ### BEGIN SOLUTION
    if not keepdim:  # put the reduced axes back as length-1 axes, then broadcast
        grad = grad.reshape(tuple(1 if i in axes else d for i, d in enumerate(input_shape)))
    return grad.expand(input_shape)
    ### END SOLUTION


@exercise("02.mean_vjp")
def mean_vjp(grad, input_shape, axes, keepdim):
    """VJP of ``out = a.mean(axes, keepdim)``: like sum, scaled by 1/(number of elements
    averaged).  An axis of length 0 averages nothing: the gradient is then an empty tensor
    of the input's shape (no error)."""
    ### BEGIN SOLUTION
    n = 1
    for ax in axes:
        n *= input_shape[ax]
    return sum_vjp(grad, input_shape, axes, keepdim) / n
    ### END SOLUTION


class Sum(Function):
    _builtin = True

    @staticmethod
    def forward(ctx, a, axis=None, keepdim=False):
        ctx.axes = normalize_axes(axis, a.ndim)
        ctx.keepdim = keepdim
        ctx.in_shape = a.shape
        data = a._data if a.dtype.is_floating_point or a.dtype.name == "int64" \
            else a._data.astype("int64")
        return Tensor._wrap(data.reduce("sum", ctx.axes, keepdim))

    @staticmethod
    def backward(ctx, g):
        return sum_vjp(g, ctx.in_shape, ctx.axes, ctx.keepdim), None, None

    @staticmethod
    def jvp(ctx, t, *_):
        return t.sum(axis=ctx.axes, keepdim=ctx.keepdim)


class Mean(Function):
    _builtin = True

    @staticmethod
    def forward(ctx, a, axis=None, keepdim=False):
        if not a.dtype.is_floating_point:
            raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be "
                               f"floating point, got {a.dtype.name}")
        ctx.axes = normalize_axes(axis, a.ndim)
        ctx.keepdim = keepdim
        ctx.in_shape = a.shape
        n = 1
        for i in ctx.axes:
            n *= a.shape[i]
        ctx.n = n
        # n == 0 (an empty reduction) gives nan, as in numpy and PyTorch
        return Tensor._wrap(a._data.reduce("sum", ctx.axes, keepdim).scalar("div", n if n else float("nan")))

    @staticmethod
    def backward(ctx, g):
        return mean_vjp(g, ctx.in_shape, ctx.axes, ctx.keepdim), None, None

    @staticmethod
    def jvp(ctx, t, *_):
        return t.mean(axis=ctx.axes, keepdim=ctx.keepdim)


class MaxAlong(Function):
    """Max over one axis; the gradient goes to the element whose index is returned."""
    _builtin = True

    @staticmethod
    def forward(ctx, a, axis, keepdim=False, op="max"):
        (ax,) = normalize_axes(axis, a.ndim)
        idx = a._data.reduce("arg" + op, ax, True)
        ctx.indices_keep = idx
        ctx.ax, ctx.keepdim, ctx.in_shape = ax, keepdim, a.shape
        vals = Tensor._wrap(a._data.reduce(op, (ax,), keepdim))
        ctx.indices = Tensor._wrap(idx if keepdim else idx.reshape(vals.shape))
        return vals

    @staticmethod
    def backward(ctx, g):
        return _scatter_along(g, ctx.indices_keep, ctx.ax, ctx.in_shape, ctx.keepdim), None, None, None

    @staticmethod
    def jvp(ctx, t, *_):
        picked = gather_along(t, Tensor._wrap(ctx.indices_keep), ctx.ax)
        return picked if ctx.keepdim else picked.squeeze(ctx.ax)


class MaxAll(Function):
    """Max over several axes; ties share the gradient evenly (PyTorch's amax rule)."""
    _builtin = True

    @staticmethod
    def forward(ctx, a, axis=None, keepdim=False, op="max"):
        ctx.axes = normalize_axes(axis, a.ndim)
        ctx.keepdim, ctx.in_shape = keepdim, a.shape
        out = Tensor._wrap(a._data.reduce(op, ctx.axes, keepdim))
        ctx.save_for_backward(a, out)
        return out

    @staticmethod
    def backward(ctx, g):
        a, out = ctx.saved_tensors
        out_b = _expand_back(out, ctx.in_shape, ctx.axes, ctx.keepdim)
        mask = (a == out_b).to(dtype=g.dtype)
        count = mask.sum(axis=ctx.axes, keepdim=True)
        g_b = _expand_back(g, ctx.in_shape, ctx.axes, ctx.keepdim)
        return g_b * mask / count, None, None, None

    @staticmethod
    def jvp(ctx, t, *_):
        a, out = ctx.saved_tensors
        out_b = _expand_back(out, ctx.in_shape, ctx.axes, ctx.keepdim)
        mask = (a == out_b).to(dtype=t.dtype)
        return (t * mask).sum(axis=ctx.axes, keepdim=ctx.keepdim) / mask.sum(
            axis=ctx.axes, keepdim=ctx.keepdim)


def _scatter_along(g, idx_keep, ax, in_shape, keepdim):
    """A tensor of ``in_shape`` with ``g`` at the positions ``idx_keep`` along ``ax``."""
    from mini.ops.creation import arange
    if not keepdim:
        g = g.unsqueeze(ax)
    positions = arange(in_shape[ax], device=g.device).reshape(
        tuple(in_shape[ax] if i == ax else 1 for i in range(len(in_shape))))
    mask = (positions == Tensor._wrap(idx_keep)).to(dtype=g.dtype)
    return mask * g


def gather_along(t, idx, ax):
    """Pick ``t``'s elements at ``idx`` (keepdim-shaped indices) along axis ``ax``."""
    from mini.ops.creation import arange
    positions = arange(t.shape[ax], device=t.device).reshape(
        tuple(t.shape[ax] if i == ax else 1 for i in range(t.ndim)))
    mask = (positions == idx).to(dtype=t.dtype)
    return (t * mask).sum(axis=ax, keepdim=True)


def sum(a, dim=None, keepdim=False, axis=None, dtype=None):
    if axis is not None:
        dim = axis
    if dtype is not None:
        a = a.to(dtype=dtype)
    return Sum.apply(a, _dims(dim), keepdim)


def mean(a, dim=None, keepdim=False, axis=None):
    if axis is not None:
        dim = axis
    return Mean.apply(a, _dims(dim), keepdim)


def _reduce_max(a, dim, keepdim, op):
    if dim is None:
        return MaxAll.apply(a, None, False, op)
    if isinstance(dim, int):
        vals = MaxAlong.apply(a, dim, keepdim, op)
        node = vals.grad_fn
        indices = node.indices if node is not None else Tensor._wrap(
            a._data.reduce("arg" + op, dim, keepdim))
        return _values_indices(vals, indices)
    return MaxAll.apply(a, tuple(dim), keepdim, op)


def max(a, dim=None, keepdim=False):
    """``max(a)``: the largest element; ``max(a, dim)``: (values, indices) along ``dim``;
    ``max(a, b)`` for a tensor ``b``: the elementwise maximum."""
    if isinstance(dim, Tensor):
        from mini.ops.elementwise import maximum
        return maximum(a, dim)
    return _reduce_max(a, dim, keepdim, "max")


def min(a, dim=None, keepdim=False):
    if isinstance(dim, Tensor):
        from mini.ops.elementwise import minimum
        return minimum(a, dim)
    return _reduce_max(a, dim, keepdim, "min")


def amax(a, dim=None, keepdim=False):
    return MaxAll.apply(a, _dims(dim), keepdim, "max")


def amin(a, dim=None, keepdim=False):
    return MaxAll.apply(a, _dims(dim), keepdim, "min")


def argmax(a, dim=None, keepdim=False):
    return Tensor._wrap(a._data.reduce("argmax", dim, keepdim))


def argmin(a, dim=None, keepdim=False):
    return Tensor._wrap(a._data.reduce("argmin", dim, keepdim))


def logsumexp(a, dim, keepdim=False):
    """log(sum(exp(a))) computed stably: subtract the max first, so exp never overflows."""
    if a.numel() == 0:  # log of an empty sum is log(0) = -inf
        return (a.exp().sum(dim, keepdim=keepdim)).log()
    m = amax(a, dim, keepdim=True).detach()
    # A row of -inf (or a +inf) would give inf - inf = nan: shift such rows by 0 instead.
    from mini.ops.elementwise import where, isfinite
    m = where(isfinite(m), m, 0.0)
    out = (a - m).exp().sum(dim, keepdim=True).log() + m
    return out if keepdim else out.squeeze(_dims(dim))


def var(a, dim=None, keepdim=False, unbiased=True, correction=None):
    if correction is None:
        correction = 1 if unbiased else 0
    axes = normalize_axes(_dims(dim), a.ndim)
    n = 1
    for i in axes:
        n *= a.shape[i]
    mu = a.mean(axes, keepdim=True)
    return ((a - mu) ** 2).sum(axes, keepdim=keepdim) / (n - correction)


def std(a, dim=None, keepdim=False, unbiased=True, correction=None):
    return var(a, dim, keepdim, unbiased, correction).sqrt()


def _dims(dim):
    if dim is None or isinstance(dim, int):
        return dim
    return tuple(dim)

