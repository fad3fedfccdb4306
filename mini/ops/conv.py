"""Convolution by im2col, and max pooling (NCHW, as in PyTorch).

A 2-D convolution is a matrix product once every receptive field is laid out as a row:

    im2col:  x [N, C, H, W]  ->  cols [N·Ho·Wo, C·kh·kw]      (one row per output pixel)
    conv:    cols @ W.reshape(Cout, C·kh·kw).T  ->  [N·Ho·Wo, Cout]  ->  [N, Cout, Ho, Wo]

``im2col`` first builds a *view* with six axes ``[N, C, Ho, Wo, kh, kw]`` over the padded
input, using strides only (no copy: the ``Ho``/``Wo`` axes step by ``stride`` pixels, the
``kh``/``kw`` axes by one pixel), then copies it into the row layout.  That copy is where the
memory goes: each input pixel appears in up to ``kh·kw`` rows.  Its backward, ``col2im``,
adds every row entry back onto the pixel it came from; the two are each other's adjoint, so
each is the other's backward and gradients of gradients work.
"""
from __future__ import annotations

import numpy as np

from mini.autograd import grad_mode
from mini.autograd.function import Function
from mini.exercises import exercise, has_fast_path
from mini.autograd.tensor import Tensor
from mini.ndarray import NDArray

__all__ = ["im2col", "col2im", "conv2d", "max_pool2d", "conv_output_size", "pool_output_size",
           "im2col_view", "im2col_matrix", "col2im_matrix", "conv2d_forward", "conv2d_backward",
           "input_grad_by_flipped_kernel"]


def _pair(v, name: str) -> tuple[int, int]:
    if isinstance(v, (tuple, list)):
        if len(v) != 2:
            raise ValueError(f"{name} must be an int or a pair of ints, got {v!r}")
        return int(v[0]), int(v[1])
    return int(v), int(v)


def conv_output_size(size: int, kernel: int, stride: int, padding: int) -> int:
    """``floor((size + 2·padding - kernel) / stride) + 1``."""
    return (size + 2 * padding - kernel) // stride + 1


def _np(t: Tensor) -> np.ndarray:
    return t._data.to_numpy_view()


def _wrap(a: np.ndarray, like: Tensor) -> Tensor:
    return Tensor._wrap(NDArray.from_numpy(np.asarray(a, order="C"), like._data.storage.device))


def _geometry(shape, kernel_size, stride, padding):
    if len(shape) != 4:
        raise ValueError(f"im2col expects an NCHW input with 4 dimensions, got shape {tuple(shape)}")
    n, c, h, w = shape
    kh, kw = _pair(kernel_size, "kernel_size")
    sh, sw = _pair(stride, "stride")
    ph, pw = _pair(padding, "padding")
    if kh < 1 or kw < 1 or sh < 1 or sw < 1 or ph < 0 or pw < 0:
        raise ValueError(f"invalid kernel_size {(kh, kw)}, stride {(sh, sw)} or padding {(ph, pw)}")
    ho, wo = conv_output_size(h, kh, sh, ph), conv_output_size(w, kw, sw, pw)
    if ho < 1 or wo < 1:
        raise ValueError(f"kernel {(kh, kw)} is larger than the padded input "
                         f"{(h + 2 * ph, w + 2 * pw)} (input shape {tuple(shape)}, padding {(ph, pw)})")
    return n, c, h, w, kh, kw, sh, sw, ph, pw, ho, wo


def _im2col_np(x: np.ndarray, kernel_size, stride, padding, device=None) -> np.ndarray:
    _geometry(x.shape, kernel_size, stride, padding)  # validates, with clear messages
    return im2col_matrix.on(device)(x, _pair(kernel_size, "kernel_size"), _pair(stride, "stride"),
                                    _pair(padding, "padding"))


def _col2im_np(cols: np.ndarray, x_shape, kernel_size, stride, padding, device=None) -> np.ndarray:
    _geometry(x_shape, kernel_size, stride, padding)
    return col2im_matrix.on(device)(cols, tuple(int(d) for d in x_shape),
                                    _pair(kernel_size, "kernel_size"), _pair(stride, "stride"),
                                    _pair(padding, "padding"))


# ----------------------------------------------------------------------------------------
# Chapter 04 exercise slots (numpy in, numpy out).  ``kernel_size``, ``stride`` and
# ``padding`` are pairs of ints here; the wrappers above normalize and validate them.

@exercise("04.im2col_view")
def im2col_view(xp: np.ndarray, kernel_size: tuple, stride: tuple) -> np.ndarray:
    """The receptive fields of an (already padded) NCHW array as a 6-D *view*, no copy.

    xp: numpy array [N, C, Hp, Wp] with any strides.  kernel_size = (kh, kw),
    stride = (sh, sw).  Returns a read-only view ``v`` of ``xp``'s memory with shape
    [N, Ho, Wo, C, kh, kw], Ho = (Hp - kh) // sh + 1 (Wo likewise), such that
    ``v[n, i, j, c, p, q] == xp[n, c, i*sh + p, j*sw + q]``.
    """
    ### BEGIN SOLUTION
    n, c, hp, wp = xp.shape
    kh, kw = kernel_size
    sh, sw = stride
    ho, wo = (hp - kh) // sh + 1, (wp - kw) // sw + 1
    s0, s1, s2, s3 = xp.strides
    return np.lib.stride_tricks.as_strided(
        xp, shape=(n, ho, wo, c, kh, kw), strides=(s0, s2 * sh, s3 * sw, s1, s2, s3),
        writeable=False)
    ### END SOLUTION


@exercise("04.im2col")
def im2col_matrix(x: np.ndarray, kernel_size: tuple, stride: tuple, padding: tuple) -> np.ndarray:
    """The im2col matrix of the NCHW array ``x``: one row per output pixel.

    x: [N, C, H, W]; kernel_size (kh, kw), stride (sh, sw), padding (ph, pw): ph zero rows
    are added at the top AND the bottom, pw zero columns at the left AND the right.
    Returns a new C-contiguous array [N*Ho*Wo, C*kh*kw] of x's dtype, rows in (n, i, j)
    order, columns in (c, p, q) order (the order of ``weight.reshape(Cout, -1)``).
    """
    ### BEGIN SOLUTION
    ph, pw = padding
    if ph or pw:
        x = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    view = im2col_view(x, kernel_size, stride)      # [N, Ho, Wo, C, kh, kw], no copy yet
    n, ho, wo, c, kh, kw = view.shape
    return np.ascontiguousarray(view).reshape(n * ho * wo, c * kh * kw)  # the copy
    ### END SOLUTION


@exercise("04.col2im")
def col2im_matrix(cols: np.ndarray, x_shape: tuple, kernel_size: tuple, stride: tuple,
                  padding: tuple) -> np.ndarray:
    """The adjoint of :func:`im2col_matrix`: add every entry of ``cols`` back onto the
    input pixel it was copied from.

    cols: [N*Ho*Wo, C*kh*kw]; x_shape = (N, C, H, W).  Returns a new array of shape
    x_shape and cols' dtype.  Pixels that sit in several receptive fields receive the SUM
    of their entries; entries that came from the zero padding are dropped.
    """
    ### BEGIN SOLUTION
    n, c, h, w = x_shape
    kh, kw = kernel_size
    sh, sw = stride
    ph, pw = padding
    ho, wo = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    g = cols.reshape(n, ho, wo, c, kh, kw)
    out = np.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=cols.dtype)
    for p in range(kh):          # kh*kw strided adds instead of one scatter per element
        for q in range(kw):
            out[:, :, p:p + sh * ho:sh, q:q + sw * wo:sw] += g[:, :, :, :, p, q].transpose(0, 3, 1, 2)
    return out[:, :, ph:ph + h, pw:pw + w].copy()
    ### END SOLUTION


@exercise("04.conv2d_forward")
def conv2d_forward(x: np.ndarray, weight: np.ndarray, bias, stride: tuple,
                   padding: tuple) -> np.ndarray:
    """Convolution (cross-correlation) as one matrix product, numpy in and out.

    x [N, C, H, W], weight [Cout, C, kh, kw], bias [Cout] or None, stride (sh, sw),
    padding (ph, pw).  Returns [N, Cout, Ho, Wo], C-contiguous, x's dtype.  Use
    :func:`im2col_matrix`: cols [N*Ho*Wo, C*kh*kw] @ weight as [C*kh*kw, Cout].
    """
    ### BEGIN SOLUTION
    n, c, h, w = x.shape
    cout, _, kh, kw = weight.shape
    ho = (h + 2 * padding[0] - kh) // stride[0] + 1
    wo = (w + 2 * padding[1] - kw) // stride[1] + 1
    cols = im2col_matrix(x, (kh, kw), stride, padding)
    out = cols @ weight.reshape(cout, -1).T                       # [N*Ho*Wo, Cout]
    if bias is not None:
        out = out + bias
    return np.ascontiguousarray(out.reshape(n, ho, wo, cout).transpose(0, 3, 1, 2))
    ### END SOLUTION


@exercise("04.conv2d_backward")
def conv2d_backward(x: np.ndarray, weight: np.ndarray, grad_out: np.ndarray, stride: tuple,
                    padding: tuple) -> tuple:
    """Gradients of :func:`conv2d_forward` given ``grad_out`` = dL/d(out) [N, Cout, Ho, Wo].

    Returns ``(grad_x, grad_weight, grad_bias)`` with the shapes of x [N, C, H, W],
    weight [Cout, C, kh, kw] and bias [Cout].  Use :func:`im2col_matrix` and
    :func:`col2im_matrix`.
    """
    ### BEGIN SOLUTION
    cout, c, kh, kw = weight.shape
    g = grad_out.transpose(0, 2, 3, 1).reshape(-1, cout)          # [N*Ho*Wo, Cout]
    cols = im2col_matrix(x, (kh, kw), stride, padding)            # [N*Ho*Wo, C*kh*kw]
    grad_w = (g.T @ cols).reshape(weight.shape)                   # [Cout, C*kh*kw]
    grad_b = g.sum(axis=0)
    grad_cols = g @ weight.reshape(cout, -1)                      # [N*Ho*Wo, C*kh*kw]
    grad_x = col2im_matrix(grad_cols, x.shape, (kh, kw), stride, padding)
    return grad_x, grad_w, grad_b
    ### END SOLUTION


@exercise("04.conv_input_grad_flipped")
def input_grad_by_flipped_kernel(grad_out: np.ndarray, weight: np.ndarray, padding: tuple) -> np.ndarray:
    """The input gradient of a stride-1 convolution, computed as a convolution: the output
    gradient convolved with the kernel flipped in both spatial axes.

    grad_out [N, Cout, Ho, Wo]; weight [Cout, C, kh, kw] of the forward convolution, which
    had stride 1 and padding (ph, pw) with ph < kh and pw < kw.  Returns grad_x
    [N, C, H, W] (H = Ho + kh - 1 - 2*ph), the same array as ``conv2d_backward``'s grad_x.
    Use :func:`conv2d_forward`.
    """
    ### BEGIN SOLUTION
    kh, kw = weight.shape[2:]
    ph, pw = padding
    # each input pixel collects from the outputs its window touched, with the kernel taps
    # met in reverse order: flip both spatial axes; the new conv maps Cout channels to C
    flipped = np.ascontiguousarray(weight[:, :, ::-1, ::-1].transpose(1, 0, 2, 3))
    # a "full" convolution: pad by kh - 1 (less the forward padding) so every output that
    # touched a pixel is in its window
    return conv2d_forward(grad_out, flipped, None, (1, 1), (kh - 1 - ph, kw - 1 - pw))
    ### END SOLUTION


class Im2Col(Function):
    @staticmethod
    def forward(ctx, x, kernel_size, stride, padding):
        ctx.geom = (tuple(x.shape), kernel_size, stride, padding)
        return _wrap(_im2col_np(_np(x), kernel_size, stride, padding, x.device), x)

    @staticmethod
    def backward(ctx, g):
        shape, k, s, p = ctx.geom
        return Col2Im.apply(g, shape, k, s, p), None, None, None


class Col2Im(Function):
    @staticmethod
    def forward(ctx, cols, x_shape, kernel_size, stride, padding):
        ctx.geom = (kernel_size, stride, padding)
        return _wrap(_col2im_np(_np(cols), x_shape, kernel_size, stride, padding, cols.device), cols)

    @staticmethod
    def backward(ctx, g):
        k, s, p = ctx.geom
        return Im2Col.apply(g, k, s, p), None, None, None, None


def im2col(x: Tensor, kernel_size, stride=1, padding=0) -> Tensor:
    """Lay out every ``kh × kw`` receptive field of the NCHW tensor ``x`` as a row:
    returns ``[N·Ho·Wo, C·kh·kw]`` (rows in (n, ho, wo) order, columns in (c, i, j) order).
    Differentiable; the backward is :func:`col2im`."""
    if not isinstance(x, Tensor):
        raise TypeError(f"im2col expects a Tensor, got {type(x).__name__}")
    return Im2Col.apply(x, kernel_size, stride, padding)


def col2im(cols: Tensor, x_shape, kernel_size, stride=1, padding=0) -> Tensor:
    """The adjoint of :func:`im2col`: add each row entry back onto its input pixel."""
    return Col2Im.apply(cols, tuple(x_shape), kernel_size, stride, padding)


def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
           dilation=1, groups=1) -> Tensor:
    """2-D cross-correlation (what deep learning calls convolution), NCHW.

    ``input`` [N, C, H, W], ``weight`` [Cout, C, kh, kw], ``bias`` [Cout] -> [N, Cout, Ho, Wo].
    """
    if _pair(dilation, "dilation") != (1, 1) or groups != 1:
        raise NotImplementedError("mini's conv2d supports dilation=1 and groups=1 only")
    if input.ndim != 4:
        raise ValueError(f"conv2d expects a 4-D NCHW input, got shape {tuple(input.shape)}")
    if weight.ndim != 4:
        raise ValueError(f"conv2d expects a 4-D weight [Cout, C, kh, kw], got {tuple(weight.shape)}")
    n, c, h, w = input.shape
    cout, cin, kh, kw = weight.shape
    if cin != c:
        raise ValueError(f"conv2d: input has {c} channels (shape {tuple(input.shape)}) but weight "
                         f"{tuple(weight.shape)} expects {cin}")
    return _conv2d(input, weight, bias, (kh, kw), _pair(stride, "stride"), _pair(padding, "padding"))


@has_fast_path("conv2d")
def _conv2d(input: Tensor, weight: Tensor, bias, kernel_size, stride, padding) -> Tensor:
    """conv2d composed of differentiable ops: im2col, a matrix product, a reshape.  This is
    what the profiler and forward-mode AD see; otherwise its fast path runs: one Function
    on the 04.conv2d_forward / 04.conv2d_backward slots (mini/ops/fast_paths.py)."""
    n, c, h, w = input.shape
    cout = weight.shape[0]
    (kh, kw), (sh, sw), (ph, pw) = kernel_size, stride, padding
    ho, wo = conv_output_size(h, kh, sh, ph), conv_output_size(w, kw, sw, pw)
    cols = im2col(input, (kh, kw), (sh, sw), (ph, pw))                 # [N·Ho·Wo, C·kh·kw]
    out = cols.matmul(weight.reshape(cout, c * kh * kw).transpose(0, 1))  # [N·Ho·Wo, Cout]
    if bias is not None:
        out = out + bias
    return out.reshape(n, ho, wo, cout).permute(0, 3, 1, 2)


def _c(t: Tensor) -> np.ndarray:
    return np.ascontiguousarray(_np(t))


def _expect_shape(slot: str, what: str, got, shape: tuple) -> np.ndarray:
    """A slot's result as an array of ``shape``, or a clear error naming the exercise."""
    if not isinstance(got, np.ndarray):
        raise TypeError(f"exercise {slot} returned {type(got).__name__} for {what}; expected a "
                        f"numpy array of shape {shape}")
    if got.shape != shape:
        raise ValueError(f"exercise {slot} returned {what} of shape {got.shape}; expected {shape}")
    return got


# conv2d as one Function: its forward and backward are the chapter 04 slots
# ``04.conv2d_forward`` / ``04.conv2d_backward`` (numpy in, numpy out), so a student's conv
# runs inside every model built on mini.  On device="cpu", while the slots run mini's own
# reference, their fast paths are the C++ kernels (mini/ops/fast_paths.py).  Under
# create_graph the backward is written with the differentiable Im2Col/Col2Im/matmul ops
# instead, so gradients of gradients work.


class Conv2dFunction(Function):
    @staticmethod
    def forward(ctx, x, weight, bias, kernel_size, stride, padding):
        n, c, h, w, kh, kw, sh, sw, ph, pw, ho, wo = _geometry(tuple(x.shape), kernel_size,
                                                               stride, padding)
        ctx.geom = ((kh, kw), (sh, sw), (ph, pw), bias is not None)
        ctx.save_for_backward(x, weight)
        xn, wn = _c(x), _c(weight)
        bn = None if bias is None else _c(bias)
        out = conv2d_forward.on(x.device)(xn, wn, bn, (sh, sw), (ph, pw))
        out = _expect_shape("04.conv2d_forward", "the output", out, (n, weight.shape[0], ho, wo))
        return _wrap(out.astype(xn.dtype, copy=False), x)

    @staticmethod
    def backward(ctx, g):
        x, weight = ctx.saved_tensors
        k, s, p, has_bias = ctx.geom
        need = (ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.needs_input_grad[2] and has_bias)
        cout = weight.shape[0]
        if grad_mode.is_grad_enabled():  # create_graph: differentiable ops
            gm = g.permute(0, 2, 3, 1).reshape(-1, cout)
            gx = gw = gb = None
            if need[1]:
                gw = gm.transpose(0, 1).matmul(Im2Col.apply(x, k, s, p)).reshape(*weight.shape)
            if need[2]:
                gb = gm.sum(dim=0)
            if need[0]:
                gx = Col2Im.apply(gm.matmul(weight.reshape(cout, -1)), tuple(x.shape), k, s, p)
            return gx, gw, gb, None, None, None
        xn, wn, gn = _c(x), _c(weight), _c(g)
        got = conv2d_backward.on(x.device)(xn, wn, gn, s, p)
        if not isinstance(got, tuple) or len(got) != 3:
            raise TypeError("exercise 04.conv2d_backward must return a tuple "
                            f"(grad_x, grad_weight, grad_bias), got {type(got).__name__}")
        names = ("grad_x", "grad_weight", "grad_bias")
        shapes = (xn.shape, wn.shape, (cout,))
        return tuple(_wrap(_expect_shape("04.conv2d_backward", names[i], got[i], shapes[i])
                           .astype(xn.dtype, copy=False), g) if need[i] else None
                     for i in range(3)) + (None, None, None)


class MaxPool2dFunction(Function):
    """Max pooling of NCHW; padding counts as -inf.  Keywords: ``dilation`` (pair),
    ``extra``: the -inf rows/columns ceil_mode adds at the bottom/right (pair), ``out``: the
    output size (pair), ``sink``: a list that receives the argmax within each window (for
    ``return_indices``), or None."""

    @staticmethod
    def forward(ctx, x, kernel_size, stride, padding, dilation=(1, 1), extra=(0, 0), out=None,
                sink=None):
        geom = (kernel_size, stride, padding, dilation, extra, out)
        values, arg = max_pool2d_windows.on(x.device)(_np(x), *geom)
        ctx.arg, ctx.x_shape, ctx.pool_geom = arg, tuple(x.shape), geom
        if sink is not None:
            sink.append(arg)
        return _wrap(values, x)

    @staticmethod
    def backward(ctx, g):
        gx = max_pool2d_grad.on(g.device)(_np(g), ctx.arg, ctx.x_shape, *ctx.pool_geom)
        return _wrap(gx, g), None, None, None


@has_fast_path("max_pool2d")
def max_pool2d_windows(a: np.ndarray, kernel_size, stride, padding, dilation, extra, out):
    """Max pooling of the numpy array ``a`` [N, C, H, W] (all geometry arguments pairs;
    ``extra``: the -inf rows/columns ceil_mode adds at the bottom/right; ``out``: (Ho, Wo)).
    Returns ``(values, arg)``, both [N, C, Ho, Wo]: each window's maximum and its position
    in the window, ``p * kw + q`` (the first maximum, as argmax finds it).  On device="cpu"
    a C++ kernel stands in (mini/ops/fast_paths.py)."""
    n, c, h, w = a.shape
    (kh, kw), (sh, sw), (ph, pw) = kernel_size, stride, padding
    (dh, dw), (eh, ew), (ho, wo) = dilation, extra, out
    if ph or pw or eh or ew:
        a = np.pad(a, ((0, 0), (0, 0), (ph, ph + eh), (pw, pw + ew)), constant_values=-np.inf)
    a = np.asarray(a, order="C")
    s0, s1, s2, s3 = a.strides
    win = np.lib.stride_tricks.as_strided(
        a, shape=(n, c, ho, wo, kh, kw), strides=(s0, s1, s2 * sh, s3 * sw, s2 * dh, s3 * dw),
        writeable=False).reshape(n, c, ho, wo, kh * kw)
    arg = win.argmax(axis=-1)
    return np.take_along_axis(win, arg[..., None], axis=-1)[..., 0], arg


@has_fast_path("max_pool2d_backward")
def max_pool2d_grad(gn: np.ndarray, arg: np.ndarray, x_shape, kernel_size, stride, padding,
                    dilation, extra, out) -> np.ndarray:
    """The gradient of :func:`max_pool2d_windows`: each output's gradient ``gn`` [N, C, Ho,
    Wo] goes to the input pixel at its window position ``arg``; returns [N, C, H, W]."""
    n, c, h, w = x_shape
    (kh, kw), (sh, sw), (ph, pw) = kernel_size, stride, padding
    (dh, dw), (eh, ew), (ho, wo) = dilation, extra, out
    if (sh, sw) == (kh, kw) and not (ph or pw or eh or ew) and (dh, dw) == (1, 1) \
            and h == ho * kh and w == wo * kw:
        # windows that tile the input exactly: each input pixel receives the gradient of
        # at most one window, placed at the window's argmax in one scatter (the values
        # are those of the general loop below: nothing is summed)
        grad = np.zeros((n, c, ho, wo, kh * kw), dtype=gn.dtype)
        np.put_along_axis(grad, arg[..., None], gn[..., None], axis=-1)
        grad = grad.reshape(n, c, ho, wo, kh, kw).transpose(0, 1, 2, 4, 3, 5)
        return grad.reshape(n, c, h, w)
    grad = np.zeros((n, c, h + 2 * ph + eh, w + 2 * pw + ew), dtype=gn.dtype)
    for i in range(kh):
        for j in range(kw):
            hit = arg == i * kw + j  # the gradient goes to the max of each window
            grad[:, :, i * dh:i * dh + sh * ho:sh, j * dw:j * dw + sw * wo:sw] += np.where(hit, gn, 0)
    return grad[:, :, ph:ph + h, pw:pw + w]


def pool_output_size(size: int, kernel: int, stride: int, padding: int, dilation: int = 1,
                     ceil_mode: bool = False) -> int:
    """PyTorch's pooling output size: ``floor`` (or ``ceil``) of
    ``(size + 2·padding - dilation·(kernel - 1) - 1) / stride`` plus 1; with ceil_mode the
    last window must still start inside the input or its left padding."""
    span = size + 2 * padding - dilation * (kernel - 1) - 1
    out = (span + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + padding:
        out -= 1
    return out


def pool_geometry(fn: str, shape, kernel_size, stride, padding, dilation=1, ceil_mode=False):
    """Validated ``(kernel, stride, padding, dilation, extra, out)`` pairs of a 2-D pooling
    of an NCHW ``shape``; ``extra`` is the padding ceil_mode adds at the bottom/right."""
    if len(shape) != 4:
        raise ValueError(f"{fn} expects a 4-D NCHW input, got shape {tuple(shape)}")
    kernel = _pair(kernel_size, "kernel_size")
    stride = kernel if stride is None or (isinstance(stride, (tuple, list)) and not stride) \
        else _pair(stride, "stride")
    padding, dilation = _pair(padding, "padding"), _pair(dilation, "dilation")
    if min(kernel) < 1 or min(stride) < 1 or min(dilation) < 1 or min(padding) < 0:
        raise ValueError(f"{fn}: invalid kernel_size {kernel}, stride {stride}, padding "
                         f"{padding} or dilation {dilation}")
    for k, p, d in zip(kernel, padding, dilation):
        if p > (d * (k - 1) + 1) // 2:
            raise ValueError(f"{fn}: pad should be at most half of effective kernel size, but got "
                             f"pad={p}, kernel_size={k} and dilation={d}")
    size = tuple(shape[2:])
    out = tuple(pool_output_size(size[i], kernel[i], stride[i], padding[i], dilation[i], ceil_mode)
                for i in range(2))
    if min(out) < 1:
        raise ValueError(f"{fn}: kernel {kernel} (dilation {dilation}) is larger than the padded "
                         f"input {tuple(s + 2 * p for s, p in zip(size, padding))} (input shape "
                         f"{tuple(shape)})")
    extra = tuple(max(0, (out[i] - 1) * stride[i] + dilation[i] * (kernel[i] - 1) + 1
                      - (size[i] + 2 * padding[i])) for i in range(2))
    return kernel, stride, padding, dilation, extra, out


def max_pool2d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """Maximum over each ``kernel_size`` window (NCHW); ``stride`` defaults to the kernel.
    Padding counts as -inf.  With ``return_indices`` also returns, for each output, the
    flat index ``h * W + w`` of its maximum in the input plane (int64), as PyTorch does."""
    geom = pool_geometry("max_pool2d", tuple(input.shape), kernel_size, stride, padding,
                         dilation, ceil_mode)
    (kh, kw), (sh, sw), (ph, pw), (dh, dw), extra, (ho, wo) = geom
    sink = [] if return_indices else None
    out = MaxPool2dFunction.apply(input, (kh, kw), (sh, sw), (ph, pw), dilation=(dh, dw),
                                  extra=extra, out=(ho, wo), sink=sink)
    if not return_indices:
        return out
    arg = sink[0]
    rows = np.arange(ho).reshape(ho, 1) * sh - ph + (arg // kw) * dh
    cols = np.arange(wo).reshape(1, wo) * sw - pw + (arg % kw) * dw
    index = (rows * input.shape[3] + cols).astype(np.int64)
    return out, Tensor._wrap(NDArray.from_numpy(index, input._data.storage.device))
