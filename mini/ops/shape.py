"""Shape operations.  Most are views: they change shape/strides/offset and share the
buffer, and their gradient is the inverse rearrangement of the output gradient."""
from __future__ import annotations

import numpy as np

from mini.autograd.function import Function
from mini.autograd.tensor import Tensor
from mini.ndarray import NDArray
from mini.ndarray.ndarray import normalize_axes, _is_basic_index
from mini.ndarray.strides import infer_shape
from mini.exercises import exercise
from mini.ops._util import sum_to, cast_like


def _view_of(a: Tensor, nd: NDArray) -> Tensor:
    out = Tensor._wrap(nd)
    if nd.storage is a._data.storage:
        out._base = a._base if a._base is not None else a
    return out


class Alias(Function):
    """The same data under a new tensor object (used by forward-mode ``make_dual``)."""
    _builtin = True

    @staticmethod
    def forward(ctx, a):
        return _view_of(a, a._data)

    @staticmethod
    def backward(ctx, g):
        return g

    @staticmethod
    def jvp(ctx, t):
        return t


@exercise("02.reshape_vjp")
def reshape_vjp(grad, input_shape):
    """VJP of ``out = a.reshape(shape)``: the same numbers in the input's shape."""
    ### BEGIN SOLUTION
    return grad.reshape(input_shape)
    ### END SOLUTION


@exercise("02.permute_vjp")
def permute_vjp(grad, axes):
    """VJP of ``out = a.permute(axes)`` (output axis i is input axis axes[i]): put the
    gradient's axes back in the input's order (the inverse permutation)."""
    ### BEGIN SOLUTION
    inverse = [0] * len(axes)
    for i, ax in enumerate(axes):
        inverse[ax] = i
    return grad.permute(tuple(inverse))
    ### END SOLUTION


class Reshape(Function):
    _builtin = True

    @staticmethod
    def forward(ctx, a, shape, strict=False):
        ctx.in_shape = a.shape
        ctx.shape = shape
        return _view_of(a, a._data.view(shape) if strict else a._data.reshape(shape))

    @staticmethod
    def backward(ctx, g):
        return reshape_vjp(g, ctx.in_shape), None, None

    @staticmethod
    def jvp(ctx, t, *_):
        return t.reshape(ctx.shape)


class Permute(Function):
    _builtin = True

    @staticmethod
    def forward(ctx, a, axes):
        ctx.axes = tuple(ax % max(a.ndim, 1) for ax in axes)
        return _view_of(a, a._data.permute(axes))

    @staticmethod
    def backward(ctx, g):
        return permute_vjp(g, ctx.axes), None

    @staticmethod
    def jvp(ctx, t, _):
        return t.permute(ctx.axes)


class Expand(Function):
    """broadcast_to / expand: stride 0 on the repeated axes; gradient = sum over them."""
    _builtin = True

    @staticmethod
    def forward(ctx, a, shape):
        ctx.in_shape, ctx.shape = a.shape, shape
        return _view_of(a, a._data.broadcast_to(shape))

    @staticmethod
    def backward(ctx, g):
        return sum_to(g, ctx.in_shape), None

    @staticmethod
    def jvp(ctx, t, _):
        return t.expand(ctx.shape)


class GetItem(Function):
    _builtin = True

    @staticmethod
    def forward(ctx, a, key):
        ctx.in_shape, ctx.key = a.shape, key
        nd = a._data[key]
        return _view_of(a, nd) if _is_basic_index(key) else Tensor._wrap(nd)

    @staticmethod
    def backward(ctx, g):
        return IndexScatterAdd.apply(g, ctx.in_shape, ctx.key), None

    @staticmethod
    def jvp(ctx, t, _):
        return t[ctx.key]


class IndexScatterAdd(Function):
    """zeros(shape) with ``g`` added at ``key`` (repeated indices accumulate): the VJP of getitem."""
    _builtin = True

    @staticmethod
    def forward(ctx, g, shape, key):
        ctx.key = key
        out = NDArray.empty(shape, g.dtype, g.device).fill(0)
        np.add.at(out.to_numpy_view(), _np_key(key), g._data.to_numpy_view())
        return Tensor._wrap(out)

    @staticmethod
    def backward(ctx, gg):
        return gg[ctx.key], None, None


def _np_key(key):
    from mini.ndarray.ndarray import _to_numpy_index
    return _to_numpy_index(key)


class Cat(Function):
    _builtin = True

    @staticmethod
    def forward(ctx, dim, *tensors):
        first = tensors[0]
        (dim,) = normalize_axes(dim, first.ndim)
        for i, t in enumerate(tensors):
            if t.ndim != first.ndim or any(
                    d != e for k, (d, e) in enumerate(zip(t.shape, first.shape)) if k != dim):
                raise ValueError(f"cat: tensor {i} has shape {tuple(t.shape)}, which does not "
                                 f"match {tuple(first.shape)} outside dimension {dim}")
            if t.device != first.device:
                raise RuntimeError(f"cat: tensor {i} is on {t.device.name}, tensor 0 on "
                                   f"{first.device.name}")
        from mini.ndarray.dtypes import result_dtype
        dtype = first.dtype
        for t in tensors[1:]:
            dtype = result_dtype(dtype, t.dtype)
        sizes = [t.shape[dim] for t in tensors]
        shape = list(first.shape)
        shape[dim] = sum(sizes)
        out = NDArray.empty(shape, dtype, first.device)
        start = 0
        for t, n in zip(tensors, sizes):
            index = (slice(None),) * dim + (slice(start, start + n),)
            out[index] = t._data
            start += n
        out.storage.version = 0
        ctx.dim, ctx.sizes = dim, sizes
        return Tensor._wrap(out)

    @staticmethod
    def backward(ctx, g):
        grads, start = [], 0
        for n in ctx.sizes:
            grads.append(g[(slice(None),) * ctx.dim + (slice(start, start + n),)])
            start += n
        return (None, *grads)

    @staticmethod
    def jvp(ctx, _, *tangents):
        args = ctx._fw_args[1:]
        ts = [t if t is not None else a.detach() * 0.0 for a, t in zip(args, tangents)]
        return cat(ts, ctx.dim)


class SetItem(Function):
    """Out-of-place ``a[key] = value``: the recorded form of an in-place write."""
    _builtin = True

    @staticmethod
    def forward(ctx, a, key, value):
        ctx.key = key
        out = a._data.copy()
        out[key] = value._data.astype(a.dtype) if isinstance(value, Tensor) else value
        out.storage.version = 0
        return Tensor._wrap(out)

    @staticmethod
    def backward(ctx, g):
        ga = SetItem.apply(g, ctx.key, 0.0) if ctx.needs_input_grad[0] else None
        value_meta = ctx._arg_meta[2]
        gv = None
        if value_meta is not None and ctx.needs_input_grad[2]:
            gv = cast_like(sum_to(g[ctx.key], value_meta[0]), value_meta[1])
        return ga, None, gv


class Copy(Function):
    """``dst.copy_(src)``: the result is src (broadcast and cast); dst's old value is gone."""
    _builtin = True

    @staticmethod
    def forward(ctx, dst, src):
        data = src._data.astype(dst.dtype).broadcast_to(dst.shape).copy()
        return Tensor._wrap(data)

    @staticmethod
    def backward(ctx, g):
        shape, dtype = ctx._arg_meta[1]
        return None, cast_like(sum_to(g, shape), dtype)


class Contiguous(Function):
    _builtin = True

    @staticmethod
    def forward(ctx, a):
        nd = a._data.compact()
        return _view_of(a, nd) if nd is a._data else Tensor._wrap(nd)

    @staticmethod
    def backward(ctx, g):
        return g

    @staticmethod
    def jvp(ctx, t):
        return t.contiguous()


class Clone(Function):
    _builtin = True

    @staticmethod
    def forward(ctx, a):
        return Tensor._wrap(a._data.copy())

    @staticmethod
    def backward(ctx, g):
        return g

    @staticmethod
    def jvp(ctx, t):
        return t.clone()


# --- public functions ----------------------------------------------------------------------
def _shape_arg(shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    return tuple(int(s) for s in shape)


def reshape(a, *shape):
    shape = infer_shape(_shape_arg(shape), a.numel(), a.shape)
    if shape == tuple(a.shape):
        return a
    return Reshape.apply(a, shape, False)


def view(a, *shape):
    shape = infer_shape(_shape_arg(shape), a.numel(), a.shape)
    return Reshape.apply(a, shape, True)


def permute(a, *axes):
    return Permute.apply(a, _shape_arg(axes))


def transpose(a, dim0=-2, dim1=-1):
    if a.ndim < 2:
        return a
    axes = list(range(a.ndim))
    d0, d1 = normalize_axes(dim0, a.ndim)[0], normalize_axes(dim1, a.ndim)[0]
    axes[d0], axes[d1] = axes[d1], axes[d0]
    return Permute.apply(a, tuple(axes))


def t(a):
    if a.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {a.ndim}D")
    return transpose(a, 0, 1) if a.ndim == 2 else a


def broadcast_to(a, *shape):
    shape = _shape_arg(shape)
    if shape == tuple(a.shape):
        return a
    return Expand.apply(a, shape)


def expand(a, *shape):
    shape = list(_shape_arg(shape))
    lead = len(shape) - a.ndim
    for i in range(lead, len(shape)):  # -1 keeps the existing size
        if shape[i] == -1:
            shape[i] = a.shape[i - lead]
    return broadcast_to(a, tuple(shape))


def expand_as(a, other):
    return broadcast_to(a, tuple(other.shape))


def getitem(a, key):
    if isinstance(key, Tensor) and key.dtype.name == "bool":
        key = key._data.to_numpy_view()
    return GetItem.apply(a, key)


def squeeze(a, dim=None):
    if dim is None:
        shape = tuple(d for d in a.shape if d != 1)
    else:
        dims = normalize_axes(dim, a.ndim)
        shape = tuple(d for i, d in enumerate(a.shape) if not (i in dims and d == 1))
    return reshape(a, shape)


def unsqueeze(a, dim):
    ndim = a.ndim + 1
    if not -ndim <= dim < ndim:
        raise IndexError(f"unsqueeze: dimension {dim} is out of range for a result with {ndim} dims")
    dim = dim % ndim
    shape = tuple(a.shape[:dim]) + (1,) + tuple(a.shape[dim:])
    return Reshape.apply(a, shape, True)


def flatten(a, start_dim=0, end_dim=-1):
    if a.ndim == 0:
        return reshape(a, (1,))
    s = normalize_axes(start_dim, a.ndim)[0]
    e = normalize_axes(end_dim, a.ndim)[0]
    if s > e:
        raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
    n = 1
    for d in a.shape[s:e + 1]:
        n *= d
    return reshape(a, tuple(a.shape[:s]) + (n,) + tuple(a.shape[e + 1:]))


def cat(tensors, dim=0):
    tensors = list(tensors)
    if not tensors:
        raise ValueError("cat: expected a non-empty list of tensors")
    return Cat.apply(dim, *tensors)


def stack(tensors, dim=0):
    tensors = list(tensors)
    if not tensors:
        raise ValueError("stack: expected a non-empty list of tensors")
    shapes = {tuple(t.shape) for t in tensors}
    if len(shapes) > 1:
        raise ValueError(f"stack expects each tensor to be equal size, got shapes {sorted(shapes)}")
    return cat([unsqueeze(t, dim) for t in tensors], dim)


def contiguous(a):
    if a.is_contiguous():
        return a
    return Contiguous.apply(a)


def clone(a):
    return Clone.apply(a)
