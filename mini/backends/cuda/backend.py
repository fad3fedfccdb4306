"""The cuda device: NDArray's primitive kernels as CUDA kernels.

Buffers are *managed* memory (``cudaMallocManaged``): one address that both the host
and the kernels may use, wrapped as a flat numpy array like every other backend's
buffer.  So the layers above NDArray work unchanged, and a primitive without a CUDA
kernel falls back to numpy on the same memory (on a GPU, the driver moves the pages).

CUDA kernels (``kernels/backend.cu``, and the references of chapter 04's exercises) do, for
float32: compact (strided views, broadcasts), elementwise binary/scalar/unary operations,
sum/max/min reductions over any axes, matmul (2-D and batched), im2col.  Other dtypes
and operations (where, indexing, casts, argmax, ...) run on the host.

mini runs on your code: four primitives are chapter 04's exercise slots, called with
``slot.on(device)`` so that the one fast-path mechanism of :mod:`mini.exercises` decides,

- ``a + b``: ``04.cuda_add``;  ``a @ b`` (each 2-D product): ``04.cuda_matmul_tiled``;
- the sum of a whole array: ``04.cuda_block_sum_shuffle``;
- a strided view made compact: ``03.compact``, whose cuda fast path sends a transposed
  matrix to ``04.cuda_transpose_tiled``.

A student's registered kernel runs for them (its numpy result is copied into device
memory); while a slot runs mini's own reference, mini's kernel runs on the device buffers
directly (a fast path, ``mini/ops/fast_paths.py``); and while it is a release stub not yet
written, the host does the work.  A release of mini before chapter 04's solutions ships
``backend.cu`` without the kernels that would give those answers away: the operations
they did then run on the host.

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
from mini.exercises import ExerciseNotImplemented
from mini.ndarray.memory import record_allocation

__all__ = ["CudaBackend", "EmulatedDeviceWarning"]

_F32 = np.dtype(np.float32)
_INSTANCES: "weakref.WeakSet[CudaBackend]" = weakref.WeakSet()   # for owner_of
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
        # the references of the exercises whose kernels the device uses directly, when this
        # copy of mini has them (not in a release before chapter 04's solutions)
        names = tuple(n for n in ("matmul_tiled", "transpose_tiled") if kernels.available(n))
        self.ext = kernels.load(names, backend=True, sanitize=sanitize, name="mini_cuda_device")
        self._lock = threading.Lock()
        self._stats = {"h2d_bytes": 0, "d2h_bytes": 0, "h2d_count": 0, "d2h_count": 0}
        self._raws: dict = {}       # address -> weak reference to the ctypes array of a buffer
        _INSTANCES.add(self)

    # --- buffers ---------------------------------------------------------------------
    def empty(self, size: int, np_dtype) -> np.ndarray:
        np_dtype = np.dtype(np_dtype)
        nbytes = int(size) * np_dtype.itemsize
        ptr = self.ext.managed_malloc(nbytes)
        raw = (ctypes.c_char * max(nbytes, 1)).from_address(ptr)
        weakref.finalize(raw, _free, self.ext, ptr, self._raws)   # freed with the last view of it
        self._raws[ptr] = weakref.ref(raw)
        record_allocation(nbytes)
        return np.frombuffer(raw, dtype=np_dtype, count=int(size))

    def owns(self, array) -> bool:
        """True when ``array`` is a view of one of this device's buffers."""
        root = _root(array)
        if not isinstance(root, ctypes.Array):
            return False
        ref = self._raws.get(ctypes.addressof(root))
        return ref is not None and ref() is root

    def device_buffer(self, result, size: int, np_dtype, slot: str) -> np.ndarray:
        """The flat device buffer of ``size`` elements holding ``result``, what slot
        ``slot`` returned: one of this device's buffers as it is, a host array (a student's
        kernel copied its answer back) copied into a new one.  Raises TypeError naming the
        slot when ``result`` is not a numpy array of that many ``np_dtype`` elements."""
        np_dtype = np.dtype(np_dtype)
        if not isinstance(result, np.ndarray) or result.size != size or result.dtype != np_dtype:
            raise TypeError(
                f"{slot} must return a numpy array of {size} {np_dtype} elements; got "
                f"{type(result).__name__} {getattr(result, 'shape', '')} {getattr(result, 'dtype', '')}".rstrip())
        if self.owns(result) and result.flags.c_contiguous \
                and result.__array_interface__["data"][0] == ctypes.addressof(_root(result)):
            return result.reshape(-1)          # a whole buffer of this device (a fast path's)
        out = self.empty(size, np_dtype)
        out[...] = result.reshape(-1)
        return out

    def to_device(self, array) -> np.ndarray:
        """``array`` (a float32 numpy array) as a flat buffer of this device: itself when it
        already is one, else a copy (a fast path's inputs must be device memory)."""
        if self.owns(array) and array.flags.c_contiguous:
            return array.reshape(-1)
        out = self.empty(array.size, array.dtype)
        out[...] = np.asarray(array).reshape(-1)
        return out

    def has_kernel(self, launcher: str) -> bool:
        """Whether this build of the device has ``launcher`` (a release may ship without some)."""
        return hasattr(self.ext, launcher)

    def run_slot(self, slot: str, *args):
        """Exercise ``slot`` for this device (see the module docstring): its result, or
        None while the slot is a release stub nobody has written yet (the caller then does
        the work on the host)."""
        from mini.backends.cuda import exercises
        try:
            return getattr(exercises, _SLOT_FUNCTIONS[slot]).on(self)(*args)
        except ExerciseNotImplemented as e:
            if e.slot_id != slot:
                raise
            return None

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
        view's own memory, or a copy made by :meth:`compact`), or None for other dtypes."""
        data = a.storage.data
        if data.dtype != _F32:
            return None
        if a.is_compact():
            return data[a.offset:a.offset + a.size]
        return self.compact(a)

    # --- kernels -----------------------------------------------------------------------
    def compact(self, a) -> np.ndarray:
        from mini.ndarray.strides import compact
        # the 03.compact slot: a student's, or its cuda fast path (mini/ops/fast_paths.py)
        result = compact.on(self)(a.storage.data, a.shape, a.strides, a.offset)
        return self.device_buffer(result, a.size, a.storage.data.dtype, "03.compact")

    def compact_kernel(self, buffer, shape, strides, offset) -> np.ndarray | NotImplemented:
        """The compact kernel on a float32 device buffer (the fast path of 03.compact)."""
        if buffer.dtype != _F32 or not self.has_kernel("launch_compact"):
            return NotImplemented
        size = math.prod(shape)
        out = self.empty(size, _F32)
        if size:
            self._check(self.ext.launch_compact(self._ptr(self.to_device(buffer)), self._ptr(out), size,
                                                int(offset), list(shape), list(strides)), "compact")
        return out

    def ewise(self, op, a, b, out_np_dtype):
        if op in _BINARY and np.dtype(out_np_dtype) == _F32:
            fa, fb = self._flat32(a), self._flat32(b)
            if fa is not None and fb is not None:
                if op == "add" and a.size:
                    got = self.run_slot("04.cuda_add", fa, fb)
                    if got is not None:
                        return self.device_buffer(got, a.size, _F32, "04.cuda_add")
                elif self.has_kernel("launch_ewise"):
                    return self.ewise_kernel(op, fa, fb)
        return super().ewise(op, a, b, out_np_dtype)

    def ewise_kernel(self, op, fa, fb) -> np.ndarray:
        out = self.empty(fa.size, _F32)
        self._check(self.ext.launch_ewise(_BINARY[op], self._ptr(fa), self._ptr(fb), self._ptr(out), fa.size), op)
        return out

    def scalar(self, op, a, s, out_np_dtype, reverse=False):
        if op in _BINARY and np.dtype(out_np_dtype) == _F32 and not isinstance(s, complex) \
                and self.has_kernel("launch_scalar"):
            fa = self._flat32(a)
            if fa is not None:
                out = self.empty(a.size, _F32)
                self._check(self.ext.launch_scalar(_BINARY[op], self._ptr(fa), float(s), self._ptr(out),
                                                   a.size, int(bool(reverse))), op)
                return out
        return super().scalar(op, a, s, out_np_dtype, reverse)

    def unary(self, op, a):
        if op in _UNARY and self.has_kernel("launch_unary"):
            fa = self._flat32(a)
            if fa is not None:
                out = self.empty(a.size, _F32)
                self._check(self.ext.launch_unary(_UNARY[op], self._ptr(fa), self._ptr(out), a.size), op)
                return out
        return super().unary(op, a)

    def reduce(self, op, a, axes, keepdims, out_shape):
        if op in _REDUCE and a.storage.data.dtype == _F32 and a.size and axes:
            axes = tuple(axes)
            if op == "sum" and len(axes) == a.ndim:          # the whole array: 04's block sum
                got = self.run_slot("04.cuda_block_sum_shuffle", self._flat32(a))
                if got is not None:
                    if type(got) is not float and not isinstance(got, np.floating):
                        raise TypeError(f"04.cuda_block_sum_shuffle must return a float, got "
                                        f"{type(got).__name__}")
                    out = self.empty(1, _F32)
                    out[0] = got
                    return out
            if self.has_kernel("launch_row_reduce"):
                kept = tuple(d for d in range(a.ndim) if d not in axes)
                rows = math.prod(a.shape[d] for d in kept)
                return self.row_reduce_kernel(op, self._flat32(a.permute(kept + axes)), rows)
        return super().reduce(op, a, axes, keepdims, out_shape)

    def row_reduce_kernel(self, op, flat, rows) -> np.ndarray:
        """``op`` over each of ``rows`` rows of the compact float32 buffer ``flat``."""
        out = self.empty(rows, _F32)
        if rows:
            self._check(self.ext.launch_row_reduce(_REDUCE[op], self._ptr(flat), self._ptr(out), rows,
                                                   flat.size // rows), op)
        return out

    def matmul(self, a, b, out_shape):
        if a.storage.data.dtype == _F32 and b.storage.data.dtype == _F32:
            m, k = a.shape[-2:]
            n = b.shape[-1]
            batch = math.prod(out_shape[:-2])
            size = math.prod(out_shape)
            if not (m and n and k):
                out = self.empty(size, _F32)
                out[...] = 0.0
                return out
            fa, fb = self._flat32(a), self._flat32(b)
            out = None
            for i in range(batch):     # each 2-D product: 04's tiled matmul
                got = self.run_slot("04.cuda_matmul_tiled", fa[i * m * k:(i + 1) * m * k].reshape(m, k),
                                    fb[i * k * n:(i + 1) * k * n].reshape(k, n))
                if got is None:         # not written yet: the host multiplies
                    return super().matmul(a, b, out_shape)
                got = self.device_buffer(got, m * n, _F32, "04.cuda_matmul_tiled")
                if batch == 1:
                    return got
                if out is None:
                    out = self.empty(size, _F32)
                out[i * m * n:(i + 1) * m * n] = got
            return out
        return super().matmul(a, b, out_shape)

    def matmul_kernel(self, a, b) -> np.ndarray | NotImplemented:
        """The device's tiled matmul of two compact float32 matrices (the fast path of
        04.cuda_matmul_tiled): a [m, n] view of a new device buffer."""
        if not self.has_kernel("launch_matmul") or a.dtype != _F32 or b.dtype != _F32:
            return NotImplemented
        (m, k), n = a.shape, b.shape[1]
        out = self.empty(m * n, _F32)
        if m and n:
            if k == 0:
                out[...] = 0.0
            else:
                self._check(self.ext.launch_matmul(self._ptr(self.to_device(a)), self._ptr(self.to_device(b)),
                                                   self._ptr(out), m, n, k), "matmul")
        return out.reshape(m, n)

    def transpose_kernel(self, x) -> np.ndarray | NotImplemented:
        """``x.T`` of a float32 matrix by the tiled transpose (the fast path of
        04.cuda_transpose_tiled): a [cols, rows] view of a new device buffer."""
        if not self.has_kernel("launch_transpose_tiled") or x.dtype != _F32:
            return NotImplemented
        rows, cols = x.shape
        out = self.empty(rows * cols, _F32)
        if rows and cols:
            self._check(self.ext.launch_transpose_tiled(self._ptr(self.to_device(x)), self._ptr(out), rows, cols),
                        "transpose")
        return out.reshape(cols, rows)

    def sum_kernel(self, x) -> float | NotImplemented:
        """The sum of a float32 device buffer by the row-reduce kernel (the fast path of
        04.cuda_block_sum_shuffle)."""
        if not self.has_kernel("launch_row_reduce") or x.dtype != _F32:
            return NotImplemented
        flat = self.to_device(x)
        if flat.size == 0:
            return 0.0
        return float(self.row_reduce_kernel("sum", flat, 1)[0])

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


def owner_of(*arrays) -> "CudaBackend":
    """The cuda device whose buffers the first of ``arrays`` that is one lies in (a fast
    path gets numpy views, not the device), else mini's cuda device."""
    for a in arrays:
        if isinstance(a, np.ndarray):
            for be in list(_INSTANCES):
                if be.owns(a):
                    return be
    from mini.backends import get_backend
    return get_backend("cuda")


_SLOT_FUNCTIONS = {"04.cuda_add": "cuda_add", "04.cuda_matmul_tiled": "cuda_matmul_tiled",
                   "04.cuda_block_sum_shuffle": "cuda_block_sum_shuffle",
                   "04.cuda_transpose_tiled": "cuda_transpose_tiled"}


def _root(array):
    while isinstance(array, np.ndarray):
        array = array.base
    return array


def _free(ext, ptr, raws):
    raws.pop(ptr, None)
    try:
        ext.device_free(ptr)
    except Exception:   # at interpreter exit the runtime may already be gone
        pass
