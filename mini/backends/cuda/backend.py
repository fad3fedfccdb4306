"""The cuda device: NDArray's primitive kernels as CUDA kernels.

Buffers are *managed* memory (``cudaMallocManaged``): one address that both the host
and the kernels may use, wrapped as a flat numpy array like every other backend's
buffer.  So the layers above NDArray work unchanged, and a primitive without a CUDA
kernel falls back to numpy on the same memory (on a GPU, the driver moves the pages).

CUDA kernels (``kernels/backend.cu``, ``kernels/matmul_tiled.cu``) do, for float32:
compact (strided views, broadcasts), elementwise binary/scalar/unary operations,
sum/max/min reductions over any axes, matmul (2-D and batched), im2col.  Other dtypes
and operations (where, indexing, casts, argmax, ...) run on the host.

Where no NVIDIA GPU is usable, the kernels run on mini's CUDA emulator: correct, slow
(every CUDA thread is a fiber on one CPU core), and it says so once.  The device's
kernels are built without the emulator's checks (fast); ``MINI_CUDA_SANITIZE_DEVICE=1``
builds them with the checks, to debug the kernels themselves.

Copies between the host and the device are counted (:meth:`CudaBackend.transfer_stats`,
``mini.cuda.transfer_stats()``): every host array that becomes a cuda array is a
host-to-device copy, every cuda array that leaves the device a device-to-host copy.
"""
from __future__ import annotations

import ctypes
import math
import os
import threading
import warnings
import weakref

import numpy as np

from mini.backends.numpy_backend import NumpyBackend
from mini.ndarray.memory import record_allocation

__all__ = ["CudaBackend", "EmulatedDeviceWarning"]

_F32 = np.dtype(np.float32)
_BINARY = {"add": 0, "sub": 1, "mul": 2, "div": 3, "maximum": 4, "minimum": 5, "pow": 6}
_UNARY = {"neg": 0, "exp": 1, "log": 2, "sqrt": 3, "sin": 4, "cos": 5, "tanh": 6, "abs": 7,
          "relu": 8, "sigmoid": 9}
_REDUCE = {"sum": 0, "max": 1, "min": 2}
_WARNED = [False]


class EmulatedDeviceWarning(UserWarning):
    """device='cuda' runs on mini's CPU emulator (there is no usable NVIDIA GPU)."""


class CudaBackend(NumpyBackend):
    name = "cuda"
    kernels_name = "cuda"
    host_buffers = False    # every buffer is a managed allocation (see empty)

    def __init__(self):
        from mini.backends.cuda import build, kernels
        self.emulated = build.use_emulator()
        sanitize = os.environ.get("MINI_CUDA_SANITIZE_DEVICE", "") not in ("", "0")
        if self.emulated and not _WARNED[0]:
            _WARNED[0] = True
            reason = build.gpu_reason() or "MINI_CUDA_EMULATE is set"
            warnings.warn(EmulatedDeviceWarning(
                f"device 'cuda' runs on mini's CUDA emulator ({reason}): results are correct, but "
                "every kernel runs on one CPU core, far slower than device='cpu'.  "
                "mini.cuda.is_available() is False and mini.cuda.is_emulated() is True."),
                stacklevel=4)
        self.ext = kernels.load(("matmul_tiled",), backend=True, sanitize=sanitize, name="mini_cuda_device")
        self._lock = threading.Lock()
        self._stats = {"h2d_bytes": 0, "d2h_bytes": 0, "h2d_count": 0, "d2h_count": 0}

    # --- buffers ---------------------------------------------------------------------
    def empty(self, size: int, np_dtype) -> np.ndarray:
        np_dtype = np.dtype(np_dtype)
        nbytes = int(size) * np_dtype.itemsize
        ptr = self.ext.managed_malloc(nbytes)
        raw = (ctypes.c_char * max(nbytes, 1)).from_address(ptr)
        weakref.finalize(raw, _free, self.ext, ptr)      # freed with the last view of it
        record_allocation(nbytes)
        return np.frombuffer(raw, dtype=np_dtype, count=int(size))

    def from_numpy(self, array: np.ndarray, np_dtype) -> np.ndarray:
        buf = super().from_numpy(array, np_dtype)
        self._count("h2d", buf.nbytes)
        return buf

    def to_host(self, a) -> np.ndarray:
        """The numpy view of the cuda array ``a`` for a copy to the host (counted)."""
        self._count("d2h", a.nbytes)
        return a.to_numpy_view()

    def _count(self, direction: str, nbytes: int) -> None:
        with self._lock:
            self._stats[f"{direction}_bytes"] += int(nbytes)
            self._stats[f"{direction}_count"] += 1

    def transfer_stats(self) -> dict:
        with self._lock:
            return dict(self._stats)

    def reset_transfer_stats(self) -> None:
        with self._lock:
            for k in self._stats:
                self._stats[k] = 0

    # --- helpers -----------------------------------------------------------------------
    def _check(self, code: int, what: str) -> None:
        if code != 0:
            raise RuntimeError(f"cuda device: the {what} kernel failed with {self.ext.error_name(int(code))}")

    @staticmethod
    def _ptr(buf: np.ndarray) -> int:
        return buf.__array_interface__["data"][0]

    def _flat32(self, a) -> np.ndarray | None:
        """A compact float32 buffer holding ``a``'s elements in row-major order (a compact
        view's own memory, or a copy made by the compact kernel), or None for other dtypes."""
        data = a.storage.data
        if data.dtype != _F32:
            return None
        if a.is_compact():
            return data[a.offset:a.offset + a.size]
        return self._compact32(a)

    def _compact32(self, a) -> np.ndarray:
        out = self.empty(a.size, _F32)
        if a.size:
            self._check(self.ext.launch_compact(self._ptr(a.storage.data), self._ptr(out), a.size, a.offset,
                                                list(a.shape), list(a.strides)), "compact")
        return out

    # --- kernels -----------------------------------------------------------------------
    def compact(self, a) -> np.ndarray:
        if a.storage.data.dtype != _F32:
            return super().compact(a)
        return self._compact32(a)

    def ewise(self, op, a, b, out_np_dtype):
        if op in _BINARY and np.dtype(out_np_dtype) == _F32:
            fa, fb = self._flat32(a), self._flat32(b)
            if fa is not None and fb is not None:
                out = self.empty(a.size, _F32)
                self._check(self.ext.launch_ewise(_BINARY[op], self._ptr(fa), self._ptr(fb), self._ptr(out),
                                                  a.size), op)
                return out
        return super().ewise(op, a, b, out_np_dtype)

    def scalar(self, op, a, s, out_np_dtype, reverse=False):
        if op in _BINARY and np.dtype(out_np_dtype) == _F32 and not isinstance(s, complex):
            fa = self._flat32(a)
            if fa is not None:
                out = self.empty(a.size, _F32)
                self._check(self.ext.launch_scalar(_BINARY[op], self._ptr(fa), float(s), self._ptr(out),
                                                   a.size, int(bool(reverse))), op)
                return out
        return super().scalar(op, a, s, out_np_dtype, reverse)

    def unary(self, op, a):
        if op in _UNARY:
            fa = self._flat32(a)
            if fa is not None:
                out = self.empty(a.size, _F32)
                self._check(self.ext.launch_unary(_UNARY[op], self._ptr(fa), self._ptr(out), a.size), op)
                return out
        return super().unary(op, a)

    def reduce(self, op, a, axes, keepdims, out_shape):
        if op in _REDUCE and a.storage.data.dtype == _F32 and a.size and axes:
            axes = tuple(axes)
            kept = tuple(d for d in range(a.ndim) if d not in axes)
            rows = math.prod(a.shape[d] for d in kept)
            cols = math.prod(a.shape[d] for d in axes)
            src = a.permute(kept + axes)                 # reduced axes last: one row each
            flat = self._flat32(src)
            out = self.empty(rows, _F32)
            if rows:
                self._check(self.ext.launch_row_reduce(_REDUCE[op], self._ptr(flat), self._ptr(out), rows, cols),
                            op)
            return out
        return super().reduce(op, a, axes, keepdims, out_shape)

    def matmul(self, a, b, out_shape):
        if a.storage.data.dtype == _F32 and b.storage.data.dtype == _F32:
            m, k = a.shape[-2:]
            n = b.shape[-1]
            batch = math.prod(out_shape[:-2])
            fa, fb = self._flat32(a), self._flat32(b)
            out = self.empty(math.prod(out_shape), _F32)
            if m and n:
                if k == 0:
                    out[...] = 0.0
                    return out
                pa, pb, pc = self._ptr(fa), self._ptr(fb), self._ptr(out)
                for i in range(batch):
                    self._check(self.ext.launch_matmul(pa + 4 * i * m * k, pb + 4 * i * k * n,
                                                       pc + 4 * i * m * n, m, n, k), "matmul")
            return out
        return super().matmul(a, b, out_shape)

    def im2col(self, x, kernel_size, stride, padding) -> np.ndarray | None:
        """The im2col matrix [N*Ho*Wo, C*kh*kw] of the NCHW array ``x`` as a flat buffer,
        or None when ``x`` is not float32 (the caller then uses its own path)."""
        fx = self._flat32(x)
        if fx is None:
            return None
        n, c, h, w = x.shape
        kh, kw = kernel_size
        ho = (h + 2 * padding[0] - kh) // stride[0] + 1
        wo = (w + 2 * padding[1] - kw) // stride[1] + 1
        out = self.empty(n * ho * wo * c * kh * kw, _F32)
        self._check(self.ext.launch_im2col(self._ptr(fx), self._ptr(out), n, c, h, w, kh, kw,
                                           stride[0], stride[1], padding[0], padding[1]), "im2col")
        return out


def _free(ext, ptr):
    try:
        ext.device_free(ptr)
    except Exception:   # at interpreter exit the runtime may already be gone
        pass
