"""Every fast path of mini, in one file.

A fast path is an equivalent implementation that stands in for an exercise slot (or for an
op built on slots) while that slot runs mini's own reference: a native kernel of the cpu
backend, or several dispatched ops fused into one Function that works on the buffers.
:mod:`mini.exercises` holds the registry and takes every decision (see "Fast paths"
there): a registered student implementation or a release stub is never replaced, nothing
is replaced while an op observer (the profiler, a tracer) or forward-mode AD is active, and
a path for one device runs only on tensors of that device.  A fast path returns
NotImplemented for inputs it does not handle, and the reference runs.

This is also the one place above the backends that reaches into buffers and version
counters for speed, so that nn and optim never do: they call slots.

Each fast path says what it computes and how it relates to the reference: bit-identical
where it runs the same float operations in the same order, equal to float rounding where
it reduces in another order (tests/backends/test_training_fast_paths.py checks both).
"""
from __future__ import annotations

import numpy as np

import mini
from mini import exercises
from mini.autograd import grad_mode
from mini.autograd.function import Function
from mini.autograd.tensor import Tensor
from mini.exercises import fast_path
from mini.ndarray import NDArray

__all__ = ["FusedBatchNormFunction", "FusedCrossEntropyFunction", "FusedDropoutFunction"]


def _wrap(a: np.ndarray, device) -> Tensor:
    return Tensor._wrap(NDArray.from_numpy(a, device))


def _float(t) -> bool:
    return isinstance(t, Tensor) and t._data.storage.data.dtype.kind == "f"


# ---------------------------------------------------------------------------------------
# 02.relu_vjp: one kernel instead of a comparison, a cast and a product, when no graph of
# the gradient is being built.  The reference's float operations: bit-identical.

@fast_path("02.relu_vjp")
def relu_vjp_on_buffers(grad, a):
    if grad_mode.is_grad_enabled() or not (_float(grad) and _float(a)):
        return NotImplemented   # create_graph needs the differentiable ops
    gd, ad = grad._data, a._data
    if gd.shape != ad.shape or gd.storage.device is not ad.storage.device:
        return NotImplemented
    gn = gd.to_numpy_view()
    return _wrap(gn * (ad.to_numpy_view() > 0).astype(gn.dtype), gd.storage.device)


# ---------------------------------------------------------------------------------------
# 05.dropout: mask and scale on the buffers in one Function instead of five ops.  The
# mask comes from the same mini.rand call, so values and the random stream are
# bit-identical to the slot's.

class FusedDropoutFunction(Function):
    @staticmethod
    def forward(ctx, x, keep, scale):
        a = x._data.to_numpy_view()
        out = a * keep
        out *= a.dtype.type(scale)
        ctx.saved = (keep, scale)
        return _wrap(out, x._data.storage.device)

    @staticmethod
    def backward(ctx, g):
        keep, scale = ctx.saved
        if g.requires_grad:  # create_graph: stay differentiable
            return g * mini.tensor(keep * keep.dtype.type(scale), device=g.device), None, None
        gn = g._data.to_numpy_view()
        out = gn * gn.dtype.type(scale)
        out *= keep
        return _wrap(out, g._data.storage.device), None, None


@fast_path("05.dropout")
def dropout_fused(x, p=0.5, training=True):
    if not _float(x) or not training or not 0.0 < p < 1.0:
        return NotImplemented   # the identity, all zeros and bad p: the slot's cases
    r = mini.rand(*x.shape, dtype=x.dtype, device=x.device)
    keep = (r._data.to_numpy_view() >= p).astype(x._data.storage.data.dtype)
    return FusedDropoutFunction.apply(x, keep, 1.0 / (1.0 - p))


# ---------------------------------------------------------------------------------------
# 05.cross_entropy: the same stable formula as one Function instead of ~15 ops; the loss
# agrees with the slot to float rounding (numpy sums the batch in its own order).

class FusedCrossEntropyFunction(Function):
    @staticmethod
    def forward(ctx, logits, target, t):
        z = logits._data.to_numpy_view()
        n = z.shape[0]
        f = z.dtype.type
        shifted = z - z.max(axis=1, keepdims=True)
        e = np.exp(shifted)
        s = e.sum(axis=1, keepdims=True)
        log_probs = shifted - np.log(s)
        picked = log_probs[np.arange(n), t]
        loss = np.asarray(-picked.sum(dtype=z.dtype) / f(n), dtype=z.dtype)
        ctx.saved = (e, s, t, n, logits)
        return _wrap(loss, logits._data.storage.device)

    @staticmethod
    def backward(ctx, g):
        e, s, t, n, logits = ctx.saved
        if grad_mode.is_grad_enabled():
            # create_graph: a differentiable gradient, written with tensor ops on the logits
            z = logits - logits.detach().amax(dim=1, keepdim=True)
            p = z.exp()
            p = p / p.sum(dim=1, keepdim=True)
            c = logits.shape[1]
            onehot = mini.eq(mini.tensor(t, device=logits.device).unsqueeze(1),
                             mini.arange(c, device=logits.device).reshape(1, c)).to(dtype=logits.dtype)
            return (p - onehot) * (g / n), None, None
        gn = g._data.to_numpy_view()
        f = e.dtype.type
        grad = e / s
        grad[np.arange(n), t] -= f(1)
        grad *= (gn / f(n)).astype(e.dtype)
        return _wrap(grad, g._data.storage.device), None, None


@fast_path("05.cross_entropy")
def cross_entropy_fused(logits, target):
    if not _float(logits) or not isinstance(target, Tensor) or logits.ndim != 2 \
            or tuple(target.shape) != (logits.shape[0],) or logits.shape[0] == 0 \
            or target._data.storage.data.dtype.kind not in "iu":
        return NotImplemented
    t = target._data.to_numpy_view()
    if t.min() < 0 or t.max() >= logits.shape[1]:
        return NotImplemented  # the slot raises the error
    return FusedCrossEntropyFunction.apply(logits, target, np.array(t, dtype=np.int64))


# ---------------------------------------------------------------------------------------
# 05.adamw_step: the update on the buffers, the same float operations in the same order
# and dtype (bit-identical) and the same version-counter bumps as the slot's in-place
# ops, without ~13 dispatched ops per parameter.

@fast_path("05.adamw_step")
def adamw_step_on_buffers(param, grad, exp_avg, exp_avg_sq, step, lr, beta1, beta2, eps,
                          weight_decay):
    tensors = (param, grad, exp_avg, exp_avg_sq)
    if not all(isinstance(t, Tensor) for t in tensors):
        return NotImplemented
    arrays = [t._data for t in tensors]
    dt, dev, shape = arrays[0].storage.data.dtype, arrays[0].storage.device, arrays[0].shape
    if dt.kind != "f":
        return NotImplemented
    for a in arrays:
        if a.storage.data.dtype != dt or a.shape != shape or a.storage.device is not dev \
                or not a.is_compact():
            return NotImplemented
    if len({id(a.storage) for a in (arrays[0], arrays[2], arrays[3])}) != 3:
        return NotImplemented    # aliased state: the in-place ops' order matters
    p, g, m, v = (a.to_numpy_view() for a in arrays)
    f = dt.type
    np.multiply(m, f(beta1), out=m)                  # exp_avg.mul_(beta1)
    m += g * f(1 - beta1)                            # .add_(grad, alpha=1 - beta1)
    np.multiply(v, f(beta2), out=v)                  # exp_avg_sq.mul_(beta2)
    gg = g * g
    gg *= f(1 - beta2)
    v += gg                                          # .add_(grad * grad, alpha=1 - beta2)
    if weight_decay != 0:
        np.multiply(p, f(1 - lr * weight_decay), out=p)
    bias_correction1 = 1 - beta1 ** step
    bias_correction2 = 1 - beta2 ** step
    denom = np.sqrt(v)
    denom /= f(bias_correction2 ** 0.5)
    denom += f(eps)
    upd = m / denom
    upd *= f(lr / bias_correction1)
    p -= upd
    arrays[2].storage.version += 2
    arrays[3].storage.version += 2
    arrays[0].storage.version += 2 if weight_decay != 0 else 1
    return None


# ---------------------------------------------------------------------------------------
# batch_norm (built on 05.batchnorm_forward / 05.batchnorm_backward): [N, C, *] normalised
# over every dimension but 1 directly on the buffers, in one Function.  The slots' path
# moves channels last into an [M, C] copy and back; the formulas are the slots', the
# reductions numpy's over (0, 2, ...): results agree to float rounding.

class FusedBatchNormFunction(Function):
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, training, momentum, eps):
        a = x._data.to_numpy_view()
        f = a.dtype.type
        c = a.shape[1]
        axes = (0,) + tuple(range(2, a.ndim))
        bshape = (1, c) + (1,) * (a.ndim - 2)
        m = a.size // c if c else 0
        batch_stats = bool(training or running_mean is None)
        if batch_stats:
            if m < 2 and training:
                raise ValueError(f"Expected more than 1 value per channel when training, got "
                                 f"input of shape {(m, c)}")
            mean = a.mean(axis=axes)
            xc = a - mean.reshape(bshape)
            var = (xc * xc).mean(axis=axes)
            if training and running_mean is not None:
                # the slot's update, with the running statistics' own in-place ops (they
                # bump the version counters)
                dev = x._data.storage.device
                running_mean.mul_(1 - momentum).add_(_wrap(mean * f(momentum), dev))
                running_var.mul_(1 - momentum).add_(_wrap(var * f(momentum * m / (m - 1)), dev))
        else:
            mean = running_mean._data.to_numpy_view()
            var = running_var._data.to_numpy_view()
            xc = a - mean.reshape(bshape)
        inv_std = f(1.0) / np.sqrt(var + f(eps))
        x_hat = xc
        x_hat *= inv_std.reshape(bshape)
        w = weight._data.to_numpy_view()
        y = x_hat * w.reshape(bshape)
        y += bias._data.to_numpy_view().reshape(bshape)
        ctx.fused = (batch_stats, x_hat, inv_std, w, axes, bshape, m)
        ctx.batch_stats = batch_stats
        _slots_module()._keep_for_double_backward(ctx, x, weight, bias, running_mean,
                                                  running_var, eps)
        return _wrap(y, x._data.storage.device)

    @staticmethod
    def backward(ctx, g):
        need = ctx.needs_input_grad
        if grad_mode.is_grad_enabled():
            # create_graph: gradients that have a graph, recomputed on the slots as the
            # slots' path does (a second derivative through batch norm)
            gx, gw, gb = _slots_module()._batch_norm_grads_with_graph(ctx, g)
            return (gx if need[0] else None, gw if need[1] else None, gb if need[2] else None,
                    None, None, None, None, None)
        batch_stats, x_hat, inv_std, w, axes, bshape, m = ctx.fused
        gn = g._data.to_numpy_view()
        gw = (gn * x_hat).sum(axis=axes) if need[1] else None
        gb = gn.sum(axis=axes) if need[2] else None
        gx = None
        if need[0]:
            if batch_stats:
                gg = gn * w.reshape(bshape)
                f = gg.dtype.type
                gx = gg * f(m)
                gx -= gg.sum(axis=axes).reshape(bshape)
                gx -= x_hat * (gg * x_hat).sum(axis=axes).reshape(bshape)
                gx *= (inv_std / f(m)).reshape(bshape)
            else:
                gx = gn * (w * inv_std).reshape(bshape)
        dev = g._data.storage.device
        return (None if gx is None else _wrap(gx, dev), None if gw is None else _wrap(gw, dev),
                None if gb is None else _wrap(gb, dev), None, None, None, None, None)


def _slots_module():
    """mini.nn.modules.normalization, where the batch-norm slots and their create_graph
    helpers live (imported when first needed: this layer does not import nn at load time)."""
    from mini.nn.modules import normalization
    return normalization


@fast_path("batch_norm")
def batch_norm_fused(input, running_mean, running_var, weight, bias, training, momentum, eps):
    if not _float(input):
        return NotImplemented
    d = input._data
    dt, dev = d.storage.data.dtype, d.storage.device
    for t in (weight, bias, running_mean, running_var):
        if t is None:
            continue
        if not isinstance(t, Tensor):
            return NotImplemented
        td = t._data
        if td.storage.data.dtype != dt or td.storage.device is not dev or td.shape != (d.shape[1],):
            return NotImplemented
    if weight is None or bias is None:
        return NotImplemented
    return FusedBatchNormFunction.apply(input, weight, bias, running_mean, running_var,
                                        bool(training), momentum, eps)


# ---------------------------------------------------------------------------------------
# conv2d: one Function (Conv2dFunction, whose forward and backward are the 04.conv2d_forward
# and 04.conv2d_backward slots) instead of ~8 dispatched ops and their ~10 backward ops.
# It runs the students' slots when they are registered, so it needs no reference; it only
# needs both slots to be done (not release stubs), else the composed ops run on im2col.

@fast_path("conv2d")
def conv2d_as_one_function(input, weight, bias, kernel_size, stride, padding):
    from mini.ops.conv import Conv2dFunction
    if not (exercises.implemented("04.conv2d_forward")
            and exercises.implemented("04.conv2d_backward")):
        return NotImplemented
    dt, dev = input._data.storage.data.dtype, input._data.storage.device
    if dt.kind != "f":
        return NotImplemented
    for t in (weight, bias):
        if t is not None and (not isinstance(t, Tensor) or t._data.storage.data.dtype != dt
                              or t._data.storage.device is not dev):
            return NotImplemented
    return Conv2dFunction.apply(input, weight, bias, kernel_size, stride, padding)


# ---------------------------------------------------------------------------------------
# Native kernels of the cpu backend (device="cpu" only; numpy arrays in and out, like the
# slots and functions they replace).  The conv kernels build each image's columns a few rows
# at a time in cache instead of the whole im2col matrix (benchmarks/bench_cpu_kernels.py);
# they sum in another order than im2col + matmul: equal to float rounding.  Max pooling
# finds the same maxima and positions as numpy's argmax; its gradient is the same except
# where overlapping windows add several gradients onto one pixel (another order).

def _cpu_kernel(name: str):
    """The cpu backend, if its extension has the kernel ``name`` (an extension built
    before a kernel existed lacks it: the reference runs), else None."""
    from mini.backends import get_backend
    be = get_backend("cpu")
    ext = getattr(be, "ext", None)
    return be if ext is not None and hasattr(ext, name) else None


def _float_arrays(*arrays) -> bool:
    dt = arrays[0].dtype
    return dt in (np.float32, np.float64) and all(a.dtype == dt for a in arrays)


@fast_path("04.conv2d_forward", device="cpu", also=("04.im2col", "04.im2col_view"))
def conv2d_forward_native(x, weight, bias, stride, padding):
    be = _cpu_kernel("conv2d_forward")
    if be is None or not _float_arrays(x, weight, *(() if bias is None else (bias,))):
        return NotImplemented
    n, c, h, w = x.shape
    cout, _, kh, kw = weight.shape
    ho = (h + 2 * padding[0] - kh) // stride[0] + 1
    wo = (w + 2 * padding[1] - kw) // stride[1] + 1
    x, weight = np.ascontiguousarray(x), np.ascontiguousarray(weight)
    bias = None if bias is None else np.ascontiguousarray(bias)
    return be.conv2d_forward(x, weight, bias, stride, padding).reshape(n, cout, ho, wo)


@fast_path("04.conv2d_backward", device="cpu", also=("04.im2col", "04.im2col_view", "04.col2im"))
def conv2d_backward_native(x, weight, grad_out, stride, padding):
    be = _cpu_kernel("conv2d_backward")
    if be is None or not _float_arrays(x, weight, grad_out):
        return NotImplemented
    x, weight = np.ascontiguousarray(x), np.ascontiguousarray(weight)
    gx, gw, gb = be.conv2d_backward(x, weight, np.ascontiguousarray(grad_out), stride, padding)
    return gx.reshape(x.shape), gw.reshape(weight.shape), gb


@fast_path("04.im2col", device="cpu", also=("04.im2col_view",))
def im2col_native(x, kernel_size, stride, padding):
    be = _cpu_kernel("im2col")
    if be is None or not _float_arrays(x):
        return NotImplemented
    x = np.ascontiguousarray(x)
    n, c, h, w = x.shape
    kh, kw = kernel_size
    ho = (h + 2 * padding[0] - kh) // stride[0] + 1
    wo = (w + 2 * padding[1] - kw) // stride[1] + 1
    out = np.empty(n * ho * wo * c * kh * kw, x.dtype)  # a numpy result, as the slot's
    be.ext.im2col(x.reshape(-1), list(x.shape), list(kernel_size), list(stride), list(padding), out)
    return out.reshape(n * ho * wo, c * kh * kw)


# ---------------------------------------------------------------------------------------
# Kernels of the cuda device (device="cuda" only): numpy views of the device's managed
# buffers in, device buffers out (mini/backends/cuda/backend.py).  Chapter 04's CUDA slots
# are the device's add, matmul, whole-array sum and transpose; while they run mini's
# reference these stand in with the device's own kernels, without the copies to and from
# fresh device memory that the slots' Python wrappers make.  The same float operations in
# the same order as the reference kernels (the tiled matmul and the transpose are the
# references' kernels): bit-identical; the sum reduces in another order (row-reduce's
# warps): equal to float rounding.

def _cuda(*arrays):
    """The cuda device whose buffers ``arrays`` are views of."""
    from mini.backends.cuda.backend import owner_of
    return owner_of(*arrays)


@fast_path("04.im2col", device="cuda", also=("04.im2col_view",))
def im2col_cuda(x, kernel_size, stride, padding):
    """The cuda device's im2col kernel (float32), on the device's own buffer: ``x`` is the
    numpy view of a compact cuda tensor's memory."""
    be = _cuda(x)
    if x.dtype != np.float32 or not x.flags.c_contiguous or not hasattr(be, "im2col"):
        return NotImplemented
    n, c, h, w = x.shape
    kh, kw = kernel_size
    ho = (h + 2 * padding[0] - kh) // stride[0] + 1
    wo = (w + 2 * padding[1] - kw) // stride[1] + 1
    cols = be.im2col(NDArray.make(x.reshape(-1), x.shape, be), kernel_size, stride, padding)
    return cols.reshape(n * ho * wo, c * kh * kw)


@fast_path("03.compact", device="cuda")
def compact_cuda(buffer, shape, strides, offset):
    """A strided view of a float32 device buffer made compact by the device's compact
    kernel; a transposed matrix by chapter 04's transpose (the student's, once written)."""
    be = _cuda(buffer)
    if buffer.dtype != np.float32 or buffer.ndim != 1:
        return NotImplemented
    shape, strides = tuple(shape), tuple(strides)
    if len(shape) == 2 and shape[0] > 1 and shape[1] > 1 and strides == (1, shape[0]):
        matrix = buffer[offset:offset + shape[0] * shape[1]].reshape(shape[1], shape[0])
        got = be.run_slot("04.cuda_transpose_tiled", matrix)
        if got is not None:
            return be.device_buffer(got, matrix.size, np.float32, "04.cuda_transpose_tiled")
    return be.compact_kernel(buffer, shape, strides, offset)


@fast_path("04.cuda_add", device="cuda")
def add_cuda(a, b, blocks=None, threads=256):
    be = _cuda(a, b)
    if blocks is not None or threads != 256 or a.dtype != np.float32 or b.dtype != np.float32 \
            or a.shape != b.shape or not be.has_kernel("launch_ewise"):
        return NotImplemented       # a launch configuration of its own: the reference
    return be.ewise_kernel("add", be.to_device(a), be.to_device(b)).reshape(a.shape)


@fast_path("04.cuda_matmul_tiled", device="cuda")
def matmul_tiled_cuda(a, b):
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        return NotImplemented
    return _cuda(a, b).matmul_kernel(a, b)


@fast_path("04.cuda_block_sum_shuffle", device="cuda")
def block_sum_shuffle_cuda(x, blocks=None):
    if blocks is not None:
        return NotImplemented
    return _cuda(x).sum_kernel(x)


@fast_path("04.cuda_transpose_tiled", device="cuda")
def transpose_tiled_cuda(x):
    if x.ndim != 2:
        return NotImplemented
    return _cuda(x).transpose_kernel(x)


@fast_path("04.col2im", device="cpu")
def col2im_native(cols, x_shape, kernel_size, stride, padding):
    be = _cpu_kernel("col2im")
    if be is None or not _float_arrays(cols):
        return NotImplemented
    out = np.empty(int(np.prod(x_shape)), cols.dtype)
    be.ext.col2im(np.ascontiguousarray(cols).reshape(-1), list(x_shape), list(kernel_size),
                  list(stride), list(padding), out)
    return out.reshape(x_shape)


@fast_path("03.compact", device="cpu")
def compact_native(buffer, shape, strides, offset):
    be = _cpu_kernel("compact")
    if be is None or buffer.dtype not in (np.float32, np.float64) or buffer.ndim != 1 \
            or not buffer.flags.c_contiguous:
        return NotImplemented
    out = np.empty(int(np.prod(shape)), buffer.dtype)
    if out.size:
        be.ext.compact(buffer, list(shape), list(strides), offset, out)
    return out


@fast_path("max_pool2d", device="cpu")
def max_pool2d_native(a, kernel_size, stride, padding, dilation, extra, out):
    be = _cpu_kernel("max_pool2d_forward")
    if be is None or not _float_arrays(a):
        return NotImplemented
    n, c, h, w = a.shape
    ho, wo = out
    values = np.empty(n * c * ho * wo, a.dtype)   # numpy results, as the reference's
    arg = np.empty(n * c * ho * wo, np.int64)
    # the extra rows/columns of ceil_mode are taps past the input: -inf, as padding is
    be.ext.max_pool2d_forward(np.ascontiguousarray(a).reshape(-1), [n, c, h, w], list(kernel_size),
                              list(stride), list(padding), list(dilation), [ho, wo], values, arg)
    return values.reshape(n, c, ho, wo), arg.reshape(n, c, ho, wo)


@fast_path("max_pool2d_backward", device="cpu")
def max_pool2d_grad_native(gn, arg, x_shape, kernel_size, stride, padding, dilation, extra, out):
    be = _cpu_kernel("max_pool2d_backward")
    if be is None or not _float_arrays(gn) or arg.dtype != np.int64:
        return NotImplemented
    grad = np.empty(int(np.prod(x_shape)), gn.dtype)
    be.ext.max_pool2d_backward(np.ascontiguousarray(gn).reshape(-1),
                               np.ascontiguousarray(arg).reshape(-1), list(x_shape),
                               list(kernel_size), list(stride), list(padding), list(dilation),
                               list(out), grad)
    return grad.reshape(x_shape)
