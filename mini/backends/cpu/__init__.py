"""The cpu backend, mini's default device: C++/OpenMP kernels (``mini/backends/cpu/kernels.cpp``)
behind the same primitive interface as the numpy backend.

Buffers are the same flat, 64-byte aligned numpy arrays, so only kernels differ.  The
compiled kernels take compact float32/float64 operands; anything else (int64 and bool
arrays, strided operands of elementwise ops, outputs within one cache line, where the call
costs more than the loop) runs on the numpy reference kernels.  The kernels that stand in
for exercise slots (compact, im2col, col2im, conv2d) are fast paths, registered in
``mini/ops/fast_paths.py``: they run only while the slot runs mini's own reference.
"""
from __future__ import annotations

import math

import numpy as np

from mini.backends.numpy_backend import NumpyBackend
from mini.backends.cpu.build_info import load_extension, import_error

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_NATIVE_BINARY = frozenset({"add", "sub", "mul", "div", "maximum", "pow"})
_NATIVE_SCALAR = _NATIVE_BINARY | {"rsub", "rdiv"}
_REVERSED = {"sub": "rsub", "div": "rdiv", "add": "add", "mul": "mul", "maximum": "maximum"}
# exp, log, sin, cos and tanh stay on numpy's loops: they are vectorized (SIMD) and beat the
# scalar C++ loops 3-20x (measured on 4k-16k floats); these are as fast or faster natively.
_NATIVE_UNARY = frozenset({"neg", "abs", "relu", "sqrt", "sigmoid"})


class CpuBackend(NumpyBackend):
    name = "cpu"
    kernels_name = "cpu"

    def __init__(self):
        self.ext = load_extension()
        if self.ext is None:
            raise RuntimeError("device 'cpu' needs mini's compiled kernels: " + (import_error() or ""))

    @staticmethod
    def _flat(a) -> np.ndarray | None:
        """The contiguous float buffer behind a compact view, or None if a kernel can't take it."""
        flat = a._flat
        if flat is not None:
            return flat if flat.dtype in _FLOATS else None
        data = a.storage.data
        if data.dtype not in _FLOATS or not a.is_compact():
            return None
        return data[a.offset:a.offset + a.size]

    # the flat kernels (see NumpyBackend.ewise): native for float buffers and the ops the
    # extension has, numpy's for the rest
    def ewise_flat(self, op, a, b, out):
        if op in _NATIVE_BINARY and out.dtype in _FLOATS:
            self.ext.ewise(op, a, b, out)
        else:
            NumpyBackend.ewise_flat(self, op, a, b, out)

    def scalar_flat(self, op, a, s, out, reverse):
        native = _REVERSED.get(op) if reverse else op
        if native in _NATIVE_SCALAR and out.dtype in _FLOATS and a.dtype == out.dtype:
            self.ext.scalar(native, a, float(s), out)
        else:
            NumpyBackend.scalar_flat(self, op, a, s, out, reverse)

    def unary_flat(self, op, a, out):
        if op in _NATIVE_UNARY and out.dtype in _FLOATS and a.dtype == out.dtype:
            self.ext.unary(op, a, out)
        else:
            NumpyBackend.unary_flat(self, op, a, out)

    def reduce(self, op, a, axes, keepdims, out_shape):
        # Reduce over trailing axes of a compact array in one kernel call (a strided input
        # is read in place by numpy's reduction instead of being copied first).
        if op in ("sum", "max") and axes:
            nd = a.ndim
            fa = self._flat(a)
            if fa is not None and tuple(axes) == tuple(range(nd - len(axes), nd)):
                n = math.prod(a.shape[nd - len(axes):])
                size = math.prod(out_shape)
                if n and size:
                    out = self.empty(size, fa.dtype)
                    self.ext.reduce_last(op, fa, n, out)
                    return out
        return super().reduce(op, a, axes, keepdims, out_shape)

    def matmul(self, a, b, out_shape):
        # 2-D float operands go to the kernel as they are: buffer, offset and strides (in
        # elements), so transposed and other strided views are multiplied without a copy.
        if a.ndim == 2 and b.ndim == 2 and a.storage.data.dtype in _FLOATS \
                and a.storage.data.dtype == b.storage.data.dtype:
            m, k = a.shape
            n = b.shape[1]
            out = self.empty(m * n, a.storage.data.dtype)
            if m and n:
                self.ext.matmul_strided(a.storage.data, a.offset, a.strides[0], a.strides[1],
                                        b.storage.data, b.offset, b.strides[0], b.strides[1],
                                        out, m, k, n)
            return out
        return super().matmul(a, b, out_shape)

    def conv2d_forward(self, x: np.ndarray, weight: np.ndarray, bias, stride, padding) -> np.ndarray:
        """conv2d of C-contiguous float numpy arrays x [N, C, H, W] and weight [Cout, C, kh, kw]
        (bias [Cout] or None), without building the column matrix: returns the output
        [N, Cout, Ho, Wo] as a flat buffer."""
        n, c, h, w = x.shape
        cout, _, kh, kw = weight.shape
        ho = (h + 2 * padding[0] - kh) // stride[0] + 1
        wo = (w + 2 * padding[1] - kw) // stride[1] + 1
        out = self.empty(n * cout * ho * wo, x.dtype)
        self.ext.conv2d_forward(x.reshape(-1), list(x.shape), weight.reshape(-1), list(weight.shape),
                                None if bias is None else bias.reshape(-1), list(stride), list(padding), out)
        return out

    def conv2d_backward(self, x: np.ndarray, weight: np.ndarray, grad_out: np.ndarray, stride, padding,
                        need_x: bool = True, need_weight: bool = True, need_bias: bool = True):
        """The gradients (grad_x, grad_weight, grad_bias) of :meth:`conv2d_forward` as flat
        buffers, each None unless asked for; all operands C-contiguous float arrays of one dtype."""
        gx = self.empty(x.size, x.dtype) if need_x else None
        gw = self.empty(weight.size, x.dtype) if need_weight else None
        gb = self.empty(weight.shape[0], x.dtype) if need_bias else None
        self.ext.conv2d_backward(x.reshape(-1), list(x.shape), weight.reshape(-1), list(weight.shape),
                                 grad_out.reshape(-1), list(stride), list(padding), gx, gw, gb)
        return gx, gw, gb
