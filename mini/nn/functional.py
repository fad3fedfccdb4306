"""Stateless neural-network functions (``mini.nn.functional``, imported as ``F``).

Everything here is composed of differentiable Tensor operations, so autograd gives each
function its backward for free.  Softmax, log-softmax and cross-entropy subtract the row
maximum first, which keeps them finite for logits in the thousands.
"""
from __future__ import annotations

import math

from mini.autograd.tensor import Tensor
from mini.ops import elementwise as _E

__all__ = ["linear", "relu", "sigmoid", "tanh", "gelu", "softmax", "log_softmax",
           "mse_loss", "l1_loss", "nll_loss", "cross_entropy", "one_hot"]


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


# --- activations -----------------------------------------------------------------------------
def relu(input: Tensor, inplace: bool = False) -> Tensor:
    if inplace:
        return input.clamp_(min=0)
    return _E.relu(input)


def sigmoid(input: Tensor) -> Tensor:
    return _E.sigmoid(input)


def tanh(input: Tensor) -> Tensor:
    return _E.tanh(input)


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    """``x·Φ(x)`` (``approximate='none'``) or its tanh approximation (``'tanh'``)."""
    if approximate == "none":
        return _E.gelu(input)
    if approximate == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (input + 0.044715 * input * input * input)
        return 0.5 * input * (1.0 + inner.tanh())
    raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def _softmax_dim(ndim: int) -> int:
    # PyTorch's legacy choice when dim is not given
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input: Tensor, dim: int | None = None, dtype=None) -> Tensor:
    """``exp(x) / exp(x).sum(dim)``, computed as ``exp(x - max)`` so large logits stay finite."""
    if dim is None:
        dim = _softmax_dim(input.ndim)
    if dtype is not None:
        input = input.to(dtype=dtype)
    # The max is a constant shift (softmax does not change under it): no gradient through it.
    shifted = input - input.detach().amax(dim=dim, keepdim=True)
    e = shifted.exp()
    return e / e.sum(dim=dim, keepdim=True)


def log_softmax(input: Tensor, dim: int | None = None, dtype=None) -> Tensor:
    """``x - logsumexp(x, dim)``, computed as ``(x - max) - log(sum(exp(x - max)))``."""
    if dim is None:
        dim = _softmax_dim(input.ndim)
    if dtype is not None:
        input = input.to(dtype=dtype)
    shifted = input - input.detach().amax(dim=dim, keepdim=True)
    return shifted - shifted.exp().sum(dim=dim, keepdim=True).log()


# --- losses ----------------------------------------------------------------------------------
_REDUCTIONS = ("mean", "sum", "none")


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"{reduction!r} is not a valid value for reduction; use one of "
                     f"{', '.join(repr(r) for r in _REDUCTIONS)}")


def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """Mean (or sum, or per-element) squared error."""
    if reduction not in _REDUCTIONS:
        _reduce(input, reduction)
    diff = input - target
    return _reduce(diff * diff, reduction)


def l1_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """Mean (or sum, or per-element) absolute error."""
    if reduction not in _REDUCTIONS:
        _reduce(input, reduction)
    return _reduce((input - target).abs(), reduction)


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """int64 ``[..., num_classes]`` with a 1 at each index of ``tensor``."""
    if tensor.dtype.is_floating_point or tensor.dtype == "bool":
        raise TypeError(f"one_hot is only applicable to index tensors (int64), got {tensor.dtype}")
    if num_classes < 0:
        num_classes = int(tensor.max().item()) + 1 if tensor.numel() else 0
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


def nll_loss(input: Tensor, target: Tensor, weight: Tensor | None = None,
             ignore_index: int = -100, reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of the ``target`` class, given log-probabilities ``input``
    of shape [N, C] (or [C], or [N, C, d1, ...] with target [N, d1, ...])."""
    if reduction not in _REDUCTIONS:
        _reduce(input, reduction)
    num_classes = _check_target(input, target, "nll_loss")
    _check_class_range(target, num_classes, ignore_index, "nll_loss")
    class_dim = 1 if input.ndim >= 2 else 0
    mask = _class_mask(target, num_classes, class_dim, input.ndim, input.dtype)
    if 0 <= ignore_index < num_classes:  # an ignored target contributes nothing
        mask = mask * _E.ne(target, ignore_index).to(dtype=input.dtype).unsqueeze(class_dim)
    if weight is not None:
        if tuple(weight.shape) != (num_classes,):
            raise ValueError(f"nll_loss: weight must have shape ({num_classes},), one entry per "
                             f"class, got {tuple(weight.shape)}")
        wshape = [1] * input.ndim
        wshape[class_dim] = num_classes
        mask = mask * weight.detach().reshape(wshape)
    # mask is 0 in every class for an ignored target, and the target's class weight
    # (or 1) at the target class otherwise.  `where` selects the target entries without
    # multiplying the others by 0 (a log-probability of -inf elsewhere must not become nan).
    picked = -(_E.where(_E.gt(mask, 0.0), input, 0.0) * mask).sum(dim=class_dim)
    if reduction == "mean":
        return picked.sum() / mask.sum()
    return _reduce(picked, reduction)


def _check_class_range(target: Tensor, num_classes: int, ignore_index: int, fn: str) -> None:
    if not target.numel():
        return
    t = target.detach().numpy()
    bad = t[(t != ignore_index) & ((t < 0) | (t >= num_classes))]
    if bad.size:
        raise IndexError(f"{fn}: target {int(bad.flat[0])} is out of bounds for "
                         f"{num_classes} classes (valid: 0..{num_classes - 1})")


def cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None,
                  ignore_index: int = -100, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Tensor:
    """``nll_loss(log_softmax(input, 1), target)``: logits [N, C] and class indices [N]
    (int64).  ``target`` may instead hold class probabilities shaped like ``input``."""
    if reduction not in _REDUCTIONS:
        _reduce(input, reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be between 0.0 and 1.0, got {label_smoothing}")
    class_dim = 1 if input.ndim >= 2 else 0
    logp = log_softmax(input, class_dim)
    num_classes = input.shape[class_dim]
    wshape = [1] * input.ndim
    wshape[class_dim] = num_classes
    w = None if weight is None else weight.detach().reshape(wshape)

    if target.dtype.is_floating_point:  # class probabilities
        if tuple(target.shape) != tuple(input.shape):
            idx_shape = tuple(input.shape[:1]) + tuple(input.shape[2:]) if input.ndim >= 2 else ()
            if tuple(target.shape) == idx_shape:
                raise TypeError(f"cross_entropy: target has the shape of class indices "
                                f"{idx_shape} but dtype {target.dtype}; class indices must be "
                                f"int64 (use target.long())")
            raise ValueError(f"cross_entropy: target of probabilities must have the input's shape "
                             f"{tuple(input.shape)}, got {tuple(target.shape)}")
        if label_smoothing > 0:
            target = target * (1 - label_smoothing) + label_smoothing / num_classes
        terms = logp * target if w is None else logp * target * w
        loss = -terms.sum(dim=class_dim)
        if reduction == "mean":
            n = input.numel() // num_classes
            return loss.sum() / n
        return _reduce(loss, reduction)

    nll = nll_loss(logp, target, weight, ignore_index, reduction)
    if label_smoothing == 0.0:
        return nll
    # Smoothing term, as PyTorch defines it: -sum_c w_c logp_c / C, zero on ignored targets.
    keep = _E.ne(target, ignore_index).to(dtype=input.dtype)
    smooth = -(logp if w is None else logp * w).sum(dim=class_dim) * keep
    if reduction == "mean":
        if weight is None:
            smooth = smooth.sum() / keep.sum()
        else:
            mask = _class_mask(target, num_classes, class_dim, input.ndim, input.dtype)
            smooth = smooth.sum() / (mask * w * keep.unsqueeze(class_dim)).sum()
    elif reduction == "sum":
        smooth = smooth.sum()
    return (1 - label_smoothing) * nll + smooth * (label_smoothing / num_classes)
