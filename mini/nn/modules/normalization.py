"""BatchNorm1d/2d and LayerNorm.

BatchNorm normalises each *channel* with statistics of the current batch while training,
and keeps exponential moving averages of them (``running_mean``, ``running_var``) that
replace the batch statistics at eval, so that a prediction does not depend on which other
samples share its batch.  The running variance is the *unbiased* one (divides by n - 1),
as in PyTorch; the normalisation itself uses the biased batch variance.

LayerNorm normalises each *sample* over its last dimensions (``normalized_shape``) and has
no running state: train and eval compute the same thing, and batch size does not matter.

The BatchNorm forward and backward are exercises of chapter 05 (``05.batchnorm_forward``,
``05.batchnorm_backward``) tied together by :class:`BatchNormFunction`, a Function with an
explicit backward; LayerNorm (``05.layernorm``) is written with differentiable tensor
operations, so autograd derives its backward.
"""
from __future__ import annotations

import numbers

from mini.autograd import grad_mode
from mini.autograd.function import Function
from mini.autograd.tensor import Tensor
from mini.exercises import exercise, has_fast_path
from mini.nn import init
from mini.nn.module import Module
from mini.nn.parameter import Parameter
from mini.ops import creation as _C

__all__ = ["batchnorm_forward", "batchnorm_backward", "layernorm", "batch_norm", "layer_norm",
           "BatchNormFunction", "BatchNorm1d", "BatchNorm2d", "LayerNorm"]


@exercise("05.batchnorm_forward")
def batchnorm_forward(x, running_mean, running_var, weight, bias, training, momentum, eps):
    """Batch normalisation of ``x`` [M, C] over its rows, one channel per column.

    Training (``training=True``): normalise with the batch mean and the *biased* batch
    variance, and update the running statistics in place::

        running_mean <- (1 - momentum) * running_mean + momentum * mean
        running_var  <- (1 - momentum) * running_var  + momentum * var * M / (M - 1)

    Eval: normalise with ``running_mean``/``running_var`` and change nothing.
    ``running_mean``/``running_var`` may be None (no running statistics: always use the
    batch's).  Returns ``(y, x_hat, inv_std)``: ``y = x_hat * weight + bias`` [M, C],
    ``x_hat = (x - mean) * inv_std`` [M, C] and ``inv_std = 1 / sqrt(var + eps)`` [C].
    Runs under ``no_grad`` (the backward is :func:`batchnorm_backward`).
    """
    ### BEGIN SOLUTION
    use_batch = training or running_mean is None
    if use_batch:
        m = x.shape[0]
        if m < 2 and training:
            raise ValueError(f"Expected more than 1 value per channel when training, got input "
                             f"of shape {tuple(x.shape)}")
        mean = x.mean(dim=0)
        var = ((x - mean) * (x - mean)).mean(dim=0)
        if training and running_mean is not None:
            running_mean.mul_(1 - momentum).add_(mean * momentum)
            running_var.mul_(1 - momentum).add_(var * (momentum * m / (m - 1)))
    else:
        mean, var = running_mean, running_var
    inv_std = 1.0 / (var + eps).sqrt()
    x_hat = (x - mean) * inv_std
    return x_hat * weight + bias, x_hat, inv_std
    ### END SOLUTION


@exercise("05.batchnorm_backward")
def batchnorm_backward(grad_out, x_hat, inv_std, weight):
    """Gradients of training-mode batch normalisation, from what the forward saved.

    ``grad_out`` and ``x_hat`` are [M, C], ``inv_std`` and ``weight`` are [C].  Returns
    ``(grad_x, grad_weight, grad_bias)``, each with the shape of what it is the gradient of.
    The batch mean and variance depend on every row, so ``grad_x`` is not just
    ``grad_out * weight * inv_std``: it also carries what flows through the two statistics.
    Derive it (the chapter's text says how to start; its hint has the result).
    """
    ### BEGIN SOLUTION
    m = grad_out.shape[0]
    grad_weight = (grad_out * x_hat).sum(dim=0)
    grad_bias = grad_out.sum(dim=0)
    g = grad_out * weight
    grad_x = (g * m - g.sum(dim=0) - x_hat * (g * x_hat).sum(dim=0)) * (inv_std / m)
    return grad_x, grad_weight, grad_bias
    ### END SOLUTION


class BatchNormFunction(Function):
    """Batch normalisation of [M, C] with an explicit backward (the two exercises)."""

    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, training, momentum, eps):
        y, x_hat, inv_std = batchnorm_forward(x, running_mean, running_var, weight, bias,
                                              training, momentum, eps)
        ctx.batch_stats = bool(training or running_mean is None)
        ctx.x_hat, ctx.inv_std, ctx.weight = x_hat, inv_std, weight
        _keep_for_double_backward(ctx, x, weight, bias, running_mean, running_var, eps)
        return y

    @staticmethod
    def backward(ctx, g):
        need = ctx.needs_input_grad
        if grad_mode.is_grad_enabled():  # create_graph: gradients that have a graph
            gx, gw, gb = _batch_norm_grads_with_graph(ctx, g)
        else:
            gx, gw, gb = _batch_norm_grads(ctx.batch_stats, g, ctx.x_hat, ctx.inv_std, ctx.weight)
        return (gx if need[0] else None, gw if need[1] else None, gb if need[2] else None,
                None, None, None, None, None)


def _batch_norm_grads(batch_stats, g, x_hat, inv_std, weight):
    """Gradients for input, weight and bias of [M, C] batch norm, from the saved x_hat and
    inv_std: the ``05.batchnorm_backward`` slot with batch statistics; in eval the map is
    affine per channel (mean and variance are constants)."""
    if batch_stats:
        return batchnorm_backward(g, x_hat, inv_std, weight)
    return g * (weight * inv_std), (g * x_hat).sum(dim=0), g.sum(dim=0)


def _keep_for_double_backward(ctx, x, weight, bias, running_mean, running_var, eps) -> None:
    # A gradient taken with create_graph must depend on x: x_hat and inv_std were computed
    # without a graph, so the backward recomputes them from x.  (saved_* attributes are
    # freed with the node's saved tensors.)
    ctx.saved_bn_inputs = (x, x._version, weight, bias, running_mean, running_var, eps)


def _batch_norm_grads_with_graph(ctx, g):
    """The backward under ``create_graph``: x_hat and inv_std recomputed with a graph by
    the ``05.batchnorm_forward`` slot (batch or running statistics, as in the forward; it
    updates nothing here), then the same gradient formulas, recorded, so the gradients can
    be differentiated again (a second derivative through batch norm)."""
    inputs = getattr(ctx, "saved_bn_inputs", None)
    if inputs is None:
        raise RuntimeError("Trying to backward through batch norm a second time: its saved "
                           "tensors were freed; use retain_graph=True")
    x, version, weight, bias, running_mean, running_var, eps = inputs
    if x._version != version:
        raise RuntimeError("one of the variables needed for gradient computation has been "
                           "modified by an inplace operation: the input of batch norm")
    x2 = x if x.ndim == 2 else _channels_last(x)
    stats = (None, None) if ctx.batch_stats else (running_mean, running_var)
    _, x_hat, inv_std = batchnorm_forward(x2, *stats, weight, bias, False, 0.0, eps)
    g2 = g if g.ndim == 2 else _channels_last(g)
    gx, gw, gb = _batch_norm_grads(ctx.batch_stats, g2, x_hat, inv_std, weight)
    if x.ndim != 2:
        gx = _channels_first(gx, tuple(x.shape))
    return gx, gw, gb


def _channels_last(t):
    """[N, C, *] as [M, C]: channels last, every other dimension in the rows."""
    perm = (0,) + tuple(range(2, t.ndim)) + (1,)
    return t.permute(*perm).reshape(-1, t.shape[1])


def _channels_first(t2, shape):
    """The inverse of :func:`_channels_last` for an [N, C, *] ``shape``."""
    moved = (shape[0],) + tuple(shape[2:]) + (shape[1],)
    inv = [0, len(shape) - 1] + list(range(1, len(shape) - 1))
    return t2.reshape(*moved).permute(*inv)


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """``F.batch_norm``: normalise ``input`` [N, C, *] per channel (dimension 1)."""
    if input.ndim < 2:
        raise ValueError(f"batch_norm expects at least 2 dimensions [N, C, ...], got shape "
                         f"{tuple(input.shape)}")
    c = input.shape[1]
    if weight is None:
        weight = _C.ones(c, dtype=input.dtype, device=input.device)
    if bias is None:
        bias = _C.zeros(c, dtype=input.dtype, device=input.device)
    return _batch_norm(input, running_mean, running_var, weight, bias, bool(training), momentum,
                       eps)


@has_fast_path("batch_norm", slots=("05.batchnorm_forward", "05.batchnorm_backward"))
def _batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps):
    """batch_norm on the two slots (BatchNormFunction); while they run mini's reference, a
    fused fast path replaces this (mini/ops/fast_paths.py)."""
    # channels last, everything else in rows: [M, C]
    x2 = input if input.ndim == 2 else _channels_last(input)
    y2 = BatchNormFunction.apply(x2, weight, bias, running_mean, running_var, training,
                                 momentum, eps)
    return y2 if input.ndim == 2 else _channels_first(y2, tuple(input.shape))


class _BatchNorm(Module):
    _expected_dims: tuple = ()

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True, device=None, dtype=None):
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        if affine:
            self.weight = Parameter(_C.ones(num_features, dtype=dtype))
            self.bias = Parameter(_C.zeros(num_features, dtype=dtype))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", _C.zeros(num_features, dtype=dtype))
            self.register_buffer("running_var", _C.ones(num_features, dtype=dtype))
            self.register_buffer("num_batches_tracked", _C.zeros((), dtype="int64"))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            init.zeros_(self.running_mean)
            init.ones_(self.running_var)
            with grad_mode.no_grad():
                self.num_batches_tracked.zero_()

    def reset_parameters(self) -> None:
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            init.zeros_(self.bias)

    def forward(self, input: Tensor) -> Tensor:
        if input.ndim not in self._expected_dims:
            raise ValueError(f"{type(self).__name__}: expected a {' or '.join(map(str, self._expected_dims))}"
                             f"-D input, got shape {tuple(input.shape)}")
        if input.shape[1] != self.num_features:
            raise ValueError(f"{type(self).__name__}({self.num_features}): input has "
                             f"{input.shape[1]} channels (shape {tuple(input.shape)})")
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            with grad_mode.no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                momentum = 1.0 / float(self.num_batches_tracked.item())
        return batch_norm(input, self.running_mean, self.running_var, self.weight, self.bias,
                          self.training or not self.track_running_stats, momentum, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Batch normalisation of [N, C] or [N, C, L] inputs, per channel C."""
    _expected_dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalisation of NCHW inputs, per channel C (statistics over N, H and W)."""
    _expected_dims = (4,)


@exercise("05.layernorm")
def layernorm(x, normalized_shape, weight, bias, eps):
    """Layer normalisation: normalise each sample of ``x`` over its *last*
    ``len(normalized_shape)`` dimensions (which must equal ``normalized_shape``), with the
    biased variance, then scale by ``weight`` and shift by ``bias`` (both shaped
    ``normalized_shape``, or None).  Use differentiable tensor operations: autograd derives
    the backward.  Returns a tensor shaped like ``x``."""
    ### BEGIN SOLUTION
    k = len(normalized_shape)
    if tuple(x.shape[x.ndim - k:]) != tuple(normalized_shape):
        raise ValueError(f"layer_norm: normalized_shape {tuple(normalized_shape)} does not match "
                         f"the last dimensions of the input, shape {tuple(x.shape)}")
    dims = tuple(range(x.ndim - k, x.ndim))
    mean = x.mean(dim=dims, keepdim=True)
    centered = x - mean
    var = (centered * centered).mean(dim=dims, keepdim=True)
    y = centered / (var + eps).sqrt()
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y
    ### END SOLUTION


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """``F.layer_norm``."""
    if isinstance(normalized_shape, numbers.Integral):
        normalized_shape = (int(normalized_shape),)
    return layernorm(input, tuple(normalized_shape), weight, bias, eps)


class LayerNorm(Module):
    """Normalise each sample over its last dimensions ``normalized_shape``."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True, device=None, dtype=None):
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (int(normalized_shape),)
        self.normalized_shape = tuple(int(s) for s in normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(_C.ones(*self.normalized_shape, dtype=dtype))
            if bias:
                self.bias = Parameter(_C.zeros(*self.normalized_shape, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, input: Tensor) -> Tensor:
        return layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")
