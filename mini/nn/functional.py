"""Stateless neural-network functions (``mini.nn.functional``, imported as ``F``), with
PyTorch's names, signatures and semantics, so that a script written against
``torch.nn.functional`` runs on mini.

One home per concept: where a chapter has an exercise for the rule, the function here
calls that exercise's slot, so a student's implementation runs inside every model --
``conv2d`` the chapter 04 convolution slots (through :func:`mini.ops.conv.conv2d`),
``dropout``, ``batch_norm``, ``layer_norm`` and ``cross_entropy`` the chapter 05 slots.
The rest is composed of differentiable Tensor operations, so autograd gives each function
its backward (and its second derivative) for free.

Arguments of PyTorch's that mini does not implement raise ``NotImplementedError`` naming
the argument, never silently change the result.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from mini.autograd.tensor import Tensor
from mini.ops import conv as _conv
from mini.ops import creation as _C
from mini.ops import elementwise as _E
from mini.ops import inplace as _inplace
from mini.ops import shape as _S

__all__ = [
    # layers
    "linear", "conv2d", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "pad", "embedding",
    "dropout", "batch_norm", "layer_norm", "normalize",
    # activations
    "relu", "relu_", "leaky_relu", "elu", "gelu", "silu", "sigmoid", "tanh", "softplus",
    "hardtanh", "relu6", "logsigmoid", "softmax", "log_softmax",
    # losses
    "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "nll_loss", "cross_entropy",
    "binary_cross_entropy", "binary_cross_entropy_with_logits",
    "one_hot",
]


def _not_supported(fn: str, arg: str, value, what: str = "") -> NotImplementedError:
    return NotImplementedError(f"{fn}: {arg}={value!r} is not supported by mini"
                               + (f" ({what})" if what else ""))


def _batched(fn: str, input: Tensor, dims: int = 4):
    """``(input as a batch, undo)``: PyTorch's functions also take one unbatched sample
    (one dimension fewer), which runs as a batch of one."""
    if input.ndim == dims - 1:
        return input.unsqueeze(0), lambda t: t.squeeze(0)
    if input.ndim != dims:
        raise ValueError(f"{fn}: expected a {dims - 1}-D (unbatched) or {dims}-D input, got "
                         f"shape {tuple(input.shape)}")
    return input, lambda t: t


# --- layers ----------------------------------------------------------------------------------
def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``input @ weight.T + bias``, with ``weight`` of shape [out_features, in_features]."""
    if input.shape[-1] != weight.shape[-1]:
        raise ValueError(f"linear: input has {input.shape[-1]} features (shape "
                         f"{tuple(input.shape)}) but weight has shape {tuple(weight.shape)} "
                         f"(expects [out_features, {input.shape[-1]}])")
    out = input.matmul(weight.transpose(-2, -1) if weight.ndim == 2 else weight)
    if bias is not None:
        out = out + bias
    return out


def _dilate(weight: Tensor, dilation: tuple) -> Tensor:
    """The kernel with ``dilation - 1`` zeros between its taps: a convolution with it is
    the dilated convolution (composed of cat/reshape/slicing, so it stays differentiable)."""
    for axis, d in ((2, dilation[0]), (3, dilation[1])):
        if d == 1:
            continue
        k = weight.shape[axis]
        shape = list(weight.shape)
        zeros_shape = shape[:axis + 1] + [d - 1] + shape[axis + 1:]
        gaps = _C.zeros(*zeros_shape, dtype=weight.dtype, device=weight.device)
        spread = _S.cat([weight.unsqueeze(axis + 1), gaps], dim=axis + 1)   # [.., k, d, ..]
        shape[axis] = k * d
        spread = spread.reshape(*shape)
        key = (slice(None),) * axis + (slice(0, (k - 1) * d + 1),)
        weight = spread[key]
    return weight


def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
           dilation=1, groups: int = 1) -> Tensor:
    """2-D cross-correlation of ``input`` [N, C, H, W] (or [C, H, W]) with ``weight``
    [Cout, C / groups, kh, kw]: [N, Cout, Ho, Wo].

    Runs on the chapter 04 slots (``04.conv2d_forward`` / ``04.conv2d_backward``, through
    :func:`mini.ops.conv.conv2d`).  ``padding`` is an int, a pair, ``'valid'`` (0) or
    ``'same'`` (stride 1 only; an odd total padding puts the extra row/column at the bottom/
    right, as PyTorch does).  ``dilation`` spreads the kernel's taps (the kernel is dilated
    with zeros); ``groups`` splits the channels into independent convolutions.
    """
    x, undo = _batched("conv2d", input)
    if weight.ndim != 4:
        raise ValueError(f"conv2d expects a 4-D weight [Cout, C / groups, kh, kw], got "
                         f"{tuple(weight.shape)}")
    if not isinstance(groups, numbers.Integral) or groups < 1:
        raise ValueError(f"conv2d: groups must be a positive integer, got {groups!r}")
    c, cout = x.shape[1], weight.shape[0]
    if c % groups or cout % groups or weight.shape[1] * groups != c:
        raise ValueError(f"conv2d: input has {c} channels (shape {tuple(x.shape)}) and weight "
                         f"{tuple(weight.shape)} with groups={groups}: expected weight.shape[1] "
                         f"* groups == {c} and {cout} output channels divisible by {groups}")
    stride = _conv._pair(stride, "stride")
    dilation = _conv._pair(dilation, "dilation")
    if min(stride) < 1 or min(dilation) < 1:
        raise ValueError(f"conv2d: stride {stride} and dilation {dilation} must be positive")
    if dilation != (1, 1):
        weight = _dilate(weight, dilation)
    if isinstance(padding, str):
        if padding == "valid":
            padding = (0, 0)
        elif padding == "same":
            if stride != (1, 1):
                raise ValueError("conv2d: padding='same' is not supported for strided "
                                 "convolutions")
            total = (weight.shape[2] - 1, weight.shape[3] - 1)
            if total[0] % 2 or total[1] % 2:   # uneven: the extra one goes bottom/right
                x = pad(x, (total[1] // 2, total[1] - total[1] // 2,
                            total[0] // 2, total[0] - total[0] // 2))
                padding = (0, 0)
            else:
                padding = (total[0] // 2, total[1] // 2)
        else:
            raise ValueError(f"conv2d: padding must be an int, a pair, 'valid' or 'same', got "
                             f"{padding!r}")
    padding = _conv._pair(padding, "padding")
    if groups == 1:
        return undo(_conv.conv2d(x, weight, bias, stride, padding))
    cin, cg = c // groups, cout // groups
    outs = []
    for g in range(groups):
        xg = x[:, g * cin:(g + 1) * cin]
        wg = weight[g * cg:(g + 1) * cg]
        bg = None if bias is None else bias[g * cg:(g + 1) * cg]
        outs.append(_conv.conv2d(xg, wg, bg, stride, padding))
    return undo(_S.cat(outs, dim=1))


def max_pool2d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1,
               ceil_mode: bool = False, return_indices: bool = False):
    """Maximum over each window of ``input`` [N, C, H, W] (or [C, H, W]); ``stride``
    defaults to ``kernel_size``, padding counts as -inf.  ``return_indices=True`` also
    returns the flat index (``h * W + w``) of each maximum in its input plane."""
    x, undo = _batched("max_pool2d", input)
    out = _conv.max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode, return_indices)
    if return_indices:
        return undo(out[0]), undo(out[1])
    return undo(out)


def _window_counts(size: int, kernel: int, stride: int, padding: int, out: int):
    """Per output position along one axis: how many input positions its window covers,
    counting the zero padding (what ``count_include_pad`` divides by; a ceil_mode window
    running past the padding is cut there) and not counting it."""
    start = np.arange(out) * stride - padding
    end = np.minimum(start + kernel, size + padding)
    with_pad = end - start
    real = np.minimum(end, size) - np.maximum(start, 0)
    return with_pad, real


def avg_pool2d(input: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: int | None = None) -> Tensor:
    """Mean over each window of ``input`` [N, C, H, W] (or [C, H, W]), padding with zeros.

    The windows are laid out by im2col (the ``04.im2col`` slot) and summed; each sum is
    divided by the window size, or by the pixels that are not padding
    (``count_include_pad=False``), or by ``divisor_override``.
    """
    x, undo = _batched("avg_pool2d", input)
    kernel, stride, pads, _, extra, (ho, wo) = _conv.pool_geometry(
        "avg_pool2d", tuple(x.shape), kernel_size, stride, padding, 1, ceil_mode)
    n, c, h, w = x.shape
    if divisor_override is not None and (not isinstance(divisor_override, numbers.Integral)
                                         or divisor_override <= 0):
        raise ValueError(f"avg_pool2d: divisor_override must be a positive integer, got "
                         f"{divisor_override!r}")
    planes = x.reshape(n * c, 1, h, w)
    if any(extra):
        planes = pad(planes, (pads[1], pads[1] + extra[1], pads[0], pads[0] + extra[0]))
        cols = _conv.im2col(planes, kernel, stride, 0)
    else:
        cols = _conv.im2col(planes, kernel, stride, pads)         # [N·C·Ho·Wo, kh·kw]
    sums = cols.sum(dim=1).reshape(n, c, ho, wo)
    if divisor_override is not None:
        return undo(sums / float(divisor_override))
    hp, hr = _window_counts(h, kernel[0], stride[0], pads[0], ho)
    wp, wr = _window_counts(w, kernel[1], stride[1], pads[1], wo)
    counts = np.outer(hp, wp) if count_include_pad else np.outer(hr, wr)
    return undo(sums / Tensor(counts.astype(np.float64), dtype=x.dtype, device=x.device))


def adaptive_avg_pool2d(input: Tensor, output_size) -> Tensor:
    """Mean pooling to a fixed ``output_size`` (an int, a pair; None keeps that input size):
    output cell ``i`` averages input rows ``floor(i·H/Ho)`` up to ``ceil((i+1)·H/Ho)``."""
    x, undo = _batched("adaptive_avg_pool2d", input)
    n, c, h, w = x.shape
    if isinstance(output_size, (tuple, list)):
        if len(output_size) != 2:
            raise ValueError(f"adaptive_avg_pool2d: output_size must be an int or a pair, got "
                             f"{output_size!r}")
        ho, wo = (h if output_size[0] is None else int(output_size[0]),
                  w if output_size[1] is None else int(output_size[1]))
    else:
        ho = wo = int(output_size)
    if ho < 1 or wo < 1:
        raise ValueError(f"adaptive_avg_pool2d: output_size must be positive, got {(ho, wo)}")
    if h % ho == 0 and w % wo == 0:   # equal windows that tile the input: one avg_pool
        return undo(avg_pool2d(x, (h // ho, w // wo)))
    rows = [(i * h // ho, -(-(i + 1) * h // ho)) for i in range(ho)]
    cols = [(j * w // wo, -(-(j + 1) * w // wo)) for j in range(wo)]
    cells = [x[:, :, r0:r1, c0:c1].mean(dim=(2, 3)) for r0, r1 in rows for c0, c1 in cols]
    return undo(_S.stack(cells, dim=2).reshape(n, c, ho, wo))


_PAD_MODES = ("constant", "reflect", "replicate", "circular")


def pad(input: Tensor, pad, mode: str = "constant", value: float | None = None) -> Tensor:
    """Pad the last ``len(pad) // 2`` dimensions: ``pad = (left, right)`` for the last one,
    then ``(top, bottom)`` for the one before, and so on.

    ``mode``: ``'constant'`` (``value``, default 0; a negative amount crops),
    ``'reflect'`` (mirror without repeating the edge), ``'replicate'`` (repeat the edge),
    ``'circular'`` (wrap around).  Composed of slicing and ``cat``, so it is differentiable
    (twice, too).
    """
    pad = tuple(int(p) for p in pad)
    if len(pad) % 2:
        raise ValueError(f"pad: padding length must be divisible by 2, got {pad}")
    if len(pad) // 2 > input.ndim:
        raise ValueError(f"pad: padding length {len(pad)} is too large for an input with "
                         f"{input.ndim} dimensions (at most {2 * input.ndim})")
    if mode not in _PAD_MODES:
        raise _not_supported("pad", "mode", mode, f"mini has {', '.join(_PAD_MODES)}")
    if mode != "constant" and value not in (None, 0, 0.0):
        raise ValueError(f"pad: padding mode {mode!r} doesn't take in value argument")
    fill = 0.0 if value is None else value
    out = input
    for i in range(len(pad) // 2):
        dim = input.ndim - 1 - i
        out = _pad_dim(out, dim, pad[2 * i], pad[2 * i + 1], mode, fill)
    return out


def _pad_dim(t: Tensor, dim: int, left: int, right: int, mode: str, fill) -> Tensor:
    size = t.shape[dim]

    def take(start, stop, step=1):
        return t[(slice(None),) * dim + (slice(start, stop, step),)]

    if mode == "constant":
        if left < 0 or right < 0:  # negative padding crops
            t = take(max(-left, 0), size - max(-right, 0))
            left, right = max(left, 0), max(right, 0)
            size = t.shape[dim]
            if size < 0:
                raise ValueError("pad: negative padding crops away the whole dimension")
        pieces = []
        for amount in (left, right):
            shape = list(t.shape)
            shape[dim] = amount
            pieces.append(_C.full(tuple(shape), fill, dtype=t.dtype, device=t.device)
                          if amount else None)
        parts = [p for p in (pieces[0], t, pieces[1]) if p is not None]
        return _S.cat(parts, dim=dim) if len(parts) > 1 else t
    if left < 0 or right < 0:
        raise ValueError(f"pad: mode {mode!r} needs non-negative padding, got {(left, right)}")
    if mode == "reflect":
        if left >= size or right >= size:
            raise ValueError(f"pad: padding {(left, right)} should be smaller than the "
                             f"dimension it pads ({size}) in reflect mode")
        before = take(left, 0, -1) if left else None                  # x[left], ..., x[1]
        after = take(size - 2, size - 2 - right, -1) if right else None   # x[-2], x[-3], ...
    elif mode == "replicate":
        if size == 0:
            raise ValueError("pad: replicate mode cannot pad an empty dimension")
        edge_shape = list(t.shape)
        before = after = None
        if left:
            edge_shape[dim] = left
            before = take(0, 1).expand(*edge_shape)
        if right:
            edge_shape[dim] = right
            after = take(size - 1, size).expand(*edge_shape)
    else:  # circular
        if left > size or right > size:
            raise ValueError(f"pad: padding {(left, right)} should be at most the dimension it "
                             f"pads ({size}) in circular mode")
        before = take(size - left, size) if left else None
        after = take(0, right) if right else None
    parts = [p for p in (before, t, after) if p is not None]
    return _S.cat(parts, dim=dim) if len(parts) > 1 else t


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None,
              max_norm: float | None = None, norm_type: float = 2.0,
              scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    """Rows of ``weight`` [num_embeddings, dim] picked by the integer ``input``: shape
    ``input.shape + (dim,)``.  The row at ``padding_idx`` gets no gradient."""
    if max_norm is not None:
        raise _not_supported("embedding", "max_norm", max_norm,
                             "it renormalises rows of weight in place")
    if scale_grad_by_freq:
        raise _not_supported("embedding", "scale_grad_by_freq", scale_grad_by_freq)
    if sparse:
        raise _not_supported("embedding", "sparse", sparse, "mini's gradients are dense")
    if input.dtype.is_floating_point or input.dtype == "bool":
        raise TypeError(f"embedding: input must hold indices (int64), got dtype {input.dtype}")
    if weight.ndim != 2:
        raise ValueError(f"embedding: weight must be 2-D [num_embeddings, embedding_dim], got "
                         f"shape {tuple(weight.shape)}")
    num = weight.shape[0]
    if input.numel():
        idx = input.detach().numpy()
        if idx.min() < 0 or idx.max() >= num:
            bad = int(idx[(idx < 0) | (idx >= num)].flat[0])
            raise IndexError(f"embedding: index {bad} is out of range for {num} embeddings")
    out = weight[input]
    if padding_idx is not None:
        if not -num <= padding_idx < num:
            raise ValueError(f"embedding: padding_idx {padding_idx} must be within "
                             f"[-{num}, {num})")
        padding_idx %= num
        at_pad = _E.eq(input, padding_idx).unsqueeze(-1)
        out = _E.where(at_pad, out.detach(), out)
    return out


def dropout(input: Tensor, p: float = 0.5, training: bool = True,
            inplace: bool = False) -> Tensor:
    """Inverted dropout: in training, zero each element with probability ``p`` and scale
    the rest by ``1 / (1 - p)``; the identity otherwise.  The ``05.dropout`` slot."""
    from mini.nn.modules.dropout import dropout as _dropout_slot
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if inplace:
        return _inplace.apply_(input, lambda x: _dropout_slot(x, p, training))
    return _dropout_slot(input, p, training)


def batch_norm(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None,
               weight: Tensor | None = None, bias: Tensor | None = None,
               training: bool = False, momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalise ``input`` [N, C, *] per channel (dimension 1): with the batch's statistics
    (updating ``running_mean``/``running_var`` in place) when ``training``, with the
    running ones otherwise.  The ``05.batchnorm_forward`` / ``05.batchnorm_backward`` slots."""
    from mini.nn.modules.normalization import batch_norm as _batch_norm
    if not training and (running_mean is None or running_var is None):
        raise RuntimeError("batch_norm: running_mean and running_var must be given when "
                           "training=False (evaluation normalises with them)")
    return _batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)


def layer_norm(input: Tensor, normalized_shape, weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalise each sample over its last ``len(normalized_shape)`` dimensions.  The
    ``05.layernorm`` slot."""
    from mini.nn.modules.normalization import layer_norm as _layer_norm
    return _layer_norm(input, normalized_shape, weight, bias, eps)


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12,
              out=None) -> Tensor:
    """``input / max(||input||_p along dim, eps)``."""
    if out is not None:
        raise _not_supported("normalize", "out", "<tensor>", "it returns a new tensor")
    if p == 2:
        norm = (input * input).sum(dim=dim, keepdim=True).sqrt()
    elif p == 1:
        norm = input.abs().sum(dim=dim, keepdim=True)
    else:
        norm = (input.abs() ** p).sum(dim=dim, keepdim=True) ** (1.0 / p)
    return input / norm.clamp(min=eps)


# --- activations -----------------------------------------------------------------------------
def _maybe_inplace(input: Tensor, inplace: bool, fn) -> Tensor:
    return _inplace.apply_(input, fn) if inplace else fn(input)


def relu(input: Tensor, inplace: bool = False) -> Tensor:
    if inplace:
        return input.clamp_(min=0)
    return _E.relu(input)


def relu_(input: Tensor) -> Tensor:
    return relu(input, inplace=True)


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    """``x`` where ``x > 0``, ``negative_slope · x`` elsewhere."""
    return _maybe_inplace(input, inplace,
                          lambda x: _E.where(_E.gt(x, 0.0), x, x * negative_slope))


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """``x`` where ``x > 0``, ``alpha · (exp(x) - 1)`` elsewhere."""
    def fn(x):
        # exp of the negative part only: exp(x) of a large positive x would overflow
        return _E.where(_E.gt(x, 0.0), x, (x.clamp(max=0.0).exp() - 1.0) * alpha)
    return _maybe_inplace(input, inplace, fn)


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    """``x·Φ(x)`` (``approximate='none'``) or its tanh approximation (``'tanh'``)."""
    if approximate == "none":
        return _E.gelu(input)
    if approximate == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (input + 0.044715 * input * input * input)
        return 0.5 * input * (1.0 + inner.tanh())
    raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def silu(input: Tensor, inplace: bool = False) -> Tensor:
    """``x · sigmoid(x)`` (swish)."""
    return _maybe_inplace(input, inplace, lambda x: x * _E.sigmoid(x))


def sigmoid(input: Tensor) -> Tensor:
    return _E.sigmoid(input)


def tanh(input: Tensor) -> Tensor:
    return _E.tanh(input)


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """``log(1 + exp(beta·x)) / beta``, and ``x`` itself where ``beta·x > threshold``."""
    bx = input * beta
    # log(1 + exp(z)) = max(z, 0) + log(1 + exp(-|z|)): no overflow for large z
    soft = (bx.clamp(min=0.0) + ((-bx.abs()).exp() + 1.0).log()) / beta
    return _E.where(_E.gt(bx, threshold), input, soft)


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0,
             inplace: bool = False) -> Tensor:
    if min_val > max_val:
        raise ValueError(f"hardtanh: min_val {min_val} cannot be greater than max_val {max_val}")
    if inplace:
        return input.clamp_(min=min_val, max=max_val)
    return input.clamp(min=min_val, max=max_val)


def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    return hardtanh(input, 0.0, 6.0, inplace)


def logsigmoid(input: Tensor) -> Tensor:
    """``log(sigmoid(x)) = -softplus(-x)``, computed without overflow."""
    return -softplus(-input)


def _softmax_dim(ndim: int) -> int:
    # PyTorch's legacy choice when dim is not given
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Tensor:
    """``exp(x) / exp(x).sum(dim)``, computed as ``exp(x - max)`` so large logits stay finite."""
    if dim is None:
        dim = _softmax_dim(input.ndim)
    if dtype is not None:
        input = input.to(dtype=dtype)
    # The max is a constant shift (softmax does not change under it): no gradient through it.
    shifted = input - input.detach().amax(dim=dim, keepdim=True)
    e = shifted.exp()
    return e / e.sum(dim=dim, keepdim=True)


def log_softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3,
                dtype=None) -> Tensor:
    """``x - logsumexp(x, dim)``, computed as ``(x - max) - log(sum(exp(x - max)))``."""
    if dim is None:
        dim = _softmax_dim(input.ndim)
    if dtype is not None:
        input = input.to(dtype=dtype)
    shifted = input - input.detach().amax(dim=dim, keepdim=True)
    return shifted - shifted.exp().sum(dim=dim, keepdim=True).log()


# --- losses ----------------------------------------------------------------------------------
_REDUCTIONS = ("mean", "sum", "none")


def _reduction(size_average, reduce, reduction: str) -> str:
    """The reduction, from PyTorch's deprecated ``size_average``/``reduce`` flags when one
    is given (they win over ``reduction``, as in PyTorch)."""
    if size_average is not None or reduce is not None:
        size_average = True if size_average is None else size_average
        reduce = True if reduce is None else reduce
        reduction = "none" if not reduce else ("mean" if size_average else "sum")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction!r} is not a valid value for reduction; use one of "
                         f"{', '.join(repr(r) for r in _REDUCTIONS)}")
    return reduction


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


def _check_same_shape(fn: str, input: Tensor, target: Tensor) -> None:
    if tuple(input.shape) != tuple(target.shape):
        raise ValueError(f"{fn}: target size {tuple(target.shape)} must be the same as input "
                         f"size {tuple(input.shape)}")


def _weighted(loss: Tensor, weight: Tensor | None) -> Tensor:
    return loss if weight is None else loss * weight


def mse_loss(input: Tensor, target: Tensor, size_average=None, reduce=None,
             reduction: str = "mean", weight: Tensor | None = None) -> Tensor:
    """Mean (or sum, or per-element) of ``weight · (input - target)²``."""
    reduction = _reduction(size_average, reduce, reduction)
    _check_same_shape("mse_loss", input, target)
    diff = input - target
    return _reduce(_weighted(diff * diff, weight), reduction)


def l1_loss(input: Tensor, target: Tensor, size_average=None, reduce=None,
            reduction: str = "mean", weight: Tensor | None = None) -> Tensor:
    """Mean (or sum, or per-element) of ``weight · |input - target|``."""
    reduction = _reduction(size_average, reduce, reduction)
    _check_same_shape("l1_loss", input, target)
    return _reduce(_weighted((input - target).abs(), weight), reduction)


def _huber(diff: Tensor, delta: float) -> Tensor:
    a = diff.abs()
    return _E.where(_E.lt(a, delta), 0.5 * diff * diff, delta * (a - 0.5 * delta))


def smooth_l1_loss(input: Tensor, target: Tensor, size_average=None, reduce=None,
                   reduction: str = "mean", beta: float = 1.0) -> Tensor:
    """``0.5·d²/beta`` where ``|d| < beta``, ``|d| - 0.5·beta`` elsewhere (``d = input -
    target``): the Huber loss divided by ``beta``."""
    reduction = _reduction(size_average, reduce, reduction)
    _check_same_shape("smooth_l1_loss", input, target)
    if beta < 0:
        raise ValueError(f"smooth_l1_loss does not support negative values for beta, got {beta}")
    diff = input - target
    if beta == 0:
        return _reduce(diff.abs(), reduction)
    return _reduce(_huber(diff, beta) / beta, reduction)


def huber_loss(input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0,
               weight: Tensor | None = None) -> Tensor:
    """``0.5·d²`` where ``|d| < delta``, ``delta·(|d| - 0.5·delta)`` elsewhere."""
    reduction = _reduction(None, None, reduction)
    _check_same_shape("huber_loss", input, target)
    return _reduce(_weighted(_huber(input - target, delta), weight), reduction)


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """int64 ``[..., num_classes]`` with a 1 at each index of ``tensor``."""
    if tensor.dtype.is_floating_point or tensor.dtype == "bool":
        raise TypeError(f"one_hot is only applicable to index tensors (int64), got {tensor.dtype}")
    if num_classes < 0:
        num_classes = int(tensor.max().item()) + 1 if tensor.numel() else 0
    if tensor.numel() and (int(tensor.min().item()) < 0 or int(tensor.max().item()) >= num_classes):
        raise RuntimeError(f"one_hot: class values must be in [0, {num_classes}), got "
                           f"{int(tensor.min().item())}..{int(tensor.max().item())}")
    classes = Tensor(list(range(num_classes)), dtype="int64", device=tensor.device)
    return _E.eq(tensor.unsqueeze(-1), classes).to(dtype="int64")


def _class_mask(target: Tensor, num_classes: int, class_dim: int, ndim: int, dtype) -> Tensor:
    """A float mask shaped like the input, 1 where the class index equals ``target``."""
    shape = [1] * ndim
    shape[class_dim] = num_classes
    classes = Tensor(list(range(num_classes)), dtype="int64", device=target.device).reshape(shape)
    return _E.eq(target.unsqueeze(class_dim), classes).to(dtype=dtype)


def _check_target(input: Tensor, target: Tensor, fn: str):
    if target.dtype.is_floating_point or target.dtype == "bool":
        raise TypeError(f"{fn}: target must hold class indices (int64), got dtype {target.dtype}")
    if input.ndim < 1:
        raise ValueError(f"{fn}: input must have at least one dimension, got a scalar")
    expected = tuple(input.shape[:1]) + tuple(input.shape[2:]) if input.ndim >= 2 else ()
    if tuple(target.shape) != expected:
        raise ValueError(f"{fn}: expected target of shape {expected} for input of shape "
                         f"{tuple(input.shape)} (classes along dim {1 if input.ndim >= 2 else 0}), "
                         f"got target of shape {tuple(target.shape)}")
    return input.shape[1] if input.ndim >= 2 else input.shape[0]


def _check_class_range(target: Tensor, num_classes: int, ignore_index: int, fn: str) -> np.ndarray:
    """The target as numpy, after checking every entry is a class or ``ignore_index``."""
    t = target.detach().numpy()
    bad = t[(t != ignore_index) & ((t < 0) | (t >= num_classes))]
    if bad.size:
        raise IndexError(f"{fn}: target {int(bad.flat[0])} is out of bounds for "
                         f"{num_classes} classes (valid: 0..{num_classes - 1})")
    return t


def _class_weight(weight: Tensor | None, num_classes: int, class_dim: int, ndim: int, fn: str):
    if weight is None:
        return None
    if tuple(weight.shape) != (num_classes,):
        raise ValueError(f"{fn}: weight must have shape ({num_classes},), one entry per class, "
                         f"got {tuple(weight.shape)}")
    wshape = [1] * ndim
    wshape[class_dim] = num_classes
    return weight.detach().reshape(wshape)


def nll_loss(input: Tensor, target: Tensor, weight: Tensor | None = None, size_average=None,
             ignore_index: int = -100, reduce=None, reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of the ``target`` class, given log-probabilities ``input``
    of shape [N, C] (or [C], or [N, C, d1, ...] with target [N, d1, ...]).  ``weight``
    weighs each class; the mean divides by the summed weights of the targets."""
    reduction = _reduction(size_average, reduce, reduction)
    num_classes = _check_target(input, target, "nll_loss")
    _check_class_range(target, num_classes, ignore_index, "nll_loss")
    class_dim = 1 if input.ndim >= 2 else 0
    mask = _class_mask(target, num_classes, class_dim, input.ndim, input.dtype)
    if 0 <= ignore_index < num_classes:  # an ignored target contributes nothing
        mask = mask * _E.ne(target, ignore_index).to(dtype=input.dtype).unsqueeze(class_dim)
    w = _class_weight(weight, num_classes, class_dim, input.ndim, "nll_loss")
    if w is not None:
        mask = mask * w
    # mask is 0 in every class for an ignored target, and the target's class weight
    # (or 1) at the target class otherwise.  `where` selects the target entries without
    # multiplying the others by 0 (a log-probability of -inf elsewhere must not become nan).
    picked = -(_E.where(_E.gt(mask, 0.0), input, 0.0) * mask).sum(dim=class_dim)
    if reduction == "mean":
        return picked.sum() / mask.sum()
    return _reduce(picked, reduction)


def _as_rows(input: Tensor, target: Tensor):
    """Logits as [M, C] and class indices as [M]: the layout of the ``05.cross_entropy``
    slot (classes of an [N, C, d1, ...] input moved last, one row per position)."""
    if input.ndim == 1:
        return input.unsqueeze(0), target.unsqueeze(0)
    if input.ndim == 2:
        return input, target
    c = input.shape[1]
    perm = (0,) + tuple(range(2, input.ndim)) + (1,)
    return input.permute(*perm).reshape(-1, c), target.reshape(-1)


def cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None,
                  size_average=None, ignore_index: int = -100, reduce=None,
                  reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """Cross-entropy of logits ``input`` [N, C] (or [C], or [N, C, d1, ...]) against class
    indices ``target`` [N] (int64), or against class probabilities shaped like ``input``.

    The mean (or sum) over class indices is the ``05.cross_entropy`` slot, on the rows
    whose target is not ``ignore_index``; ``label_smoothing`` adds PyTorch's smoothing term.
    Class ``weight``s, ``reduction='none'`` and probability targets need per-sample terms
    the slot does not return: those compose ``log_softmax`` with ``nll_loss`` (PyTorch's
    definition of cross-entropy).
    """
    from mini.nn.losses import cross_entropy as _cross_entropy_slot
    reduction = _reduction(size_average, reduce, reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be between 0.0 and 1.0, got {label_smoothing}")
    if input.ndim < 1:
        raise ValueError("cross_entropy: input must have at least one dimension, got a scalar")
    class_dim = 1 if input.ndim >= 2 else 0
    num_classes = input.shape[class_dim]
    if target.dtype.is_floating_point:
        return _cross_entropy_probabilities(input, target, weight, reduction, label_smoothing)
    _check_target(input, target, "cross_entropy")
    if weight is None and reduction != "none":
        t = _check_class_range(target, num_classes, ignore_index, "cross_entropy")
        rows, labels = _as_rows(input, target)
        kept = np.flatnonzero(t.reshape(-1) != ignore_index)
        if kept.size < labels.shape[0]:
            keep = Tensor(kept, dtype="int64", device=input.device)
            rows, labels = rows[keep], labels[keep]
        if kept.size == 0:  # nothing to average: PyTorch gives nan (mean) or 0 (sum)
            zero = (input * 0.0).sum()
            return zero + float("nan") if reduction == "mean" else zero
        loss = _cross_entropy_slot(rows, labels)
        if label_smoothing > 0:
            uniform = -log_softmax(rows, 1).mean(dim=1).mean()   # -mean_c log p_c
            loss = (1.0 - label_smoothing) * loss + label_smoothing * uniform
        return loss * float(kept.size) if reduction == "sum" else loss
    logp = log_softmax(input, class_dim)
    nll = nll_loss(logp, target, weight, ignore_index=ignore_index, reduction=reduction)
    if label_smoothing == 0.0:
        return nll
    # Smoothing term, as PyTorch defines it: -sum_c w_c logp_c / C, zero on ignored targets.
    w = _class_weight(weight, num_classes, class_dim, input.ndim, "cross_entropy")
    keep = _E.ne(target, ignore_index).to(dtype=input.dtype)
    smooth = -(logp if w is None else logp * w).sum(dim=class_dim) * keep
    if reduction == "mean":  # (here weight is given: without one, the slot's branch ran)
        mask = _class_mask(target, num_classes, class_dim, input.ndim, input.dtype)
        smooth = smooth.sum() / (mask * w * keep.unsqueeze(class_dim)).sum()
    elif reduction == "sum":
        smooth = smooth.sum()
    return (1 - label_smoothing) * nll + smooth * (label_smoothing / num_classes)


def _cross_entropy_probabilities(input, target, weight, reduction, label_smoothing):
    class_dim = 1 if input.ndim >= 2 else 0
    num_classes = input.shape[class_dim]
    if tuple(target.shape) != tuple(input.shape):
        idx_shape = tuple(input.shape[:1]) + tuple(input.shape[2:]) if input.ndim >= 2 else ()
        if tuple(target.shape) == idx_shape:
            raise TypeError(f"cross_entropy: target has the shape of class indices "
                            f"{idx_shape} but dtype {target.dtype}; class indices must be "
                            f"int64 (use target.long())")
        raise ValueError(f"cross_entropy: target of probabilities must have the input's shape "
                         f"{tuple(input.shape)}, got {tuple(target.shape)}")
    logp = log_softmax(input, class_dim)
    if label_smoothing > 0:
        target = target * (1 - label_smoothing) + label_smoothing / num_classes
    w = _class_weight(weight, num_classes, class_dim, input.ndim, "cross_entropy")
    terms = logp * target if w is None else logp * target * w
    loss = -terms.sum(dim=class_dim)
    if reduction == "mean":
        return loss.sum() / (input.numel() // num_classes)
    return _reduce(loss, reduction)


def binary_cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None,
                         size_average=None, reduce=None, reduction: str = "mean") -> Tensor:
    """``-(t·log(p) + (1 - t)·log(1 - p))`` for probabilities ``input`` in [0, 1]; each log
    is clamped at -100 (as in PyTorch) so that p = 0 or 1 gives a finite loss."""
    reduction = _reduction(size_average, reduce, reduction)
    _check_same_shape("binary_cross_entropy", input, target)
    if input.numel():
        p = input.detach().numpy()
        if np.any((p < 0) | (p > 1)):
            raise ValueError("binary_cross_entropy: all elements of input should be between 0 "
                             "and 1 (pass logits to binary_cross_entropy_with_logits)")
    log_p = input.log().clamp(min=-100.0)
    log_q = (1.0 - input).log().clamp(min=-100.0)
    loss = -(target * log_p + (1.0 - target) * log_q)
    return _reduce(_weighted(loss, weight), reduction)


def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, weight: Tensor | None = None,
                                     size_average=None, reduce=None, reduction: str = "mean",
                                     pos_weight: Tensor | None = None) -> Tensor:
    """Binary cross-entropy of ``sigmoid(input)``, computed from the logits without
    overflow: ``(1 - t)·x + (1 + (pos_weight - 1)·t)·log(1 + exp(-x))``, with
    ``log(1 + exp(-x)) = max(-x, 0) + log(1 + exp(-|x|))``."""
    reduction = _reduction(size_average, reduce, reduction)
    _check_same_shape("binary_cross_entropy_with_logits", input, target)
    log_one_plus_exp_neg = (-input).clamp(min=0.0) + ((-input.abs()).exp() + 1.0).log()
    if pos_weight is None:
        loss = (1.0 - target) * input + log_one_plus_exp_neg
    else:
        loss = (1.0 - target) * input + (1.0 + (pos_weight - 1.0) * target) * log_one_plus_exp_neg
    return _reduce(_weighted(loss, weight), reduction)
