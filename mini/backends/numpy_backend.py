"""The numpy backend: the portable reference for every NDArray primitive.

Buffers are flat numpy arrays.  Kernels read strided inputs through numpy views
(no copy) and write into freshly allocated, counted, compact outputs.
"""
from __future__ import annotations

import math
import sys

import numpy as np

from mini.backends.device import device
from mini.ndarray.memory import _TOTAL, _ACTIVE as _TRACKERS

ALIGNMENT = 64  # bytes: one cache line
_np_empty = np.empty


# Large buffers are recycled.  A fresh multi-megabyte numpy array is fresh memory from the
# OS: every page faults (and is zeroed) on first touch, which costs more than the kernel
# that fills it (a LeNet conv step: ~3000 faults, a third of its time).  So the raw blocks
# of large buffers stay in a small pool and are handed out again once nothing refers to
# them any more (every view of a buffer keeps its raw block alive, so a block whose only
# reference is the pool's is free).  Buffers stay uninitialised, as np.empty's are, and
# every allocation is still counted by record_allocation.
# The "nothing refers to it" test reads the block's reference count, which is exact only
# on CPython with the GIL before 3.14 (3.14's interpreter may hold borrowed references the
# count does not show; free-threaded builds count differently).  Elsewhere: no pool.
POOL_ENABLED = (sys.implementation.name == "cpython" and sys.version_info < (3, 14)
                and getattr(sys, "_is_gil_enabled", lambda: True)())
POOL_MIN_BYTES = 1 << 17        # smaller buffers come from malloc's heap anyway
POOL_MAX_BYTES = 64 << 20       # larger blocks are never kept
POOL_MAX_TOTAL = 256 << 20      # at most this much kept by the pool, in use or free
POOL_MAX_BLOCKS = 32
_pool: list = []


def _pooled_raw(nbytes: int) -> np.ndarray:
    pool = _pool
    best = None
    for i in range(len(pool)):
        raw = pool[i]
        # refs: the pool list, the local `raw` and getrefcount's argument (no enumerate:
        # its cached result tuple would hold one more)
        if nbytes <= raw.size <= nbytes + (nbytes >> 2) and sys.getrefcount(raw) <= 3:
            if best is None or raw.size < pool[best].size:
                best = i
    raw = None
    if best is not None:
        return pool[best]
    raw = np.empty(nbytes, dtype=np.uint8)
    if nbytes <= POOL_MAX_BYTES:
        pool.append(raw)
        total = sum(r.size for r in pool)
        while len(pool) > POOL_MAX_BLOCKS or total > POOL_MAX_TOTAL:
            # forget the oldest block (it lives on, unpooled, while views of it exist)
            total -= pool.pop(0).size
    return raw


def _count_allocation(nbytes: int) -> None:
    """``mini.ndarray.memory.record_allocation``, inlined for the kernels of every op."""
    _TOTAL.count += 1
    _TOTAL.bytes += nbytes
    if _TRACKERS:
        _count_trackers(nbytes)


def _count_trackers(nbytes: int) -> None:
    for stats in _TRACKERS:
        stats.count += 1
        stats.bytes += nbytes


def aligned_empty(size: int, np_dtype) -> np.ndarray:
    """A flat, uninitialised buffer whose first element sits on a 64-byte boundary."""
    if not isinstance(np_dtype, np.dtype):
        np_dtype = np.dtype(np_dtype)
    nbytes = size * np_dtype.itemsize
    _count_allocation(nbytes)
    if nbytes <= ALIGNMENT:  # fits in one cache line: alignment buys nothing
        return _np_empty(size, np_dtype)
    if POOL_ENABLED and nbytes >= POOL_MIN_BYTES:
        raw = _pooled_raw(nbytes + ALIGNMENT)
    else:
        raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    start = (-raw.__array_interface__["data"][0]) % ALIGNMENT
    return raw[start:start + nbytes].view(np_dtype)


def _erf(x: np.ndarray) -> np.ndarray:
    try:
        from scipy.special import erf
    except ImportError:  # pragma: no cover - scipy comes with scikit-learn
        return np.vectorize(math.erf, otypes=[x.dtype])(x)
    return erf(x)


def _sigmoid(x, out):
    # Stable for large |x|: never exponentiate a large positive number.
    e = np.exp(-np.abs(x))
    return np.divide(np.where(x >= 0, 1.0, e), 1.0 + e, out=out)


def _gelu(x, out):
    return np.multiply(0.5 * x, 1.0 + _erf(x / math.sqrt(2.0)), out=out)


BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
    "pow": np.power, "maximum": np.maximum, "minimum": np.minimum,
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal,
}
COMPARISONS = {"eq", "ne", "lt", "le", "gt", "ge"}
UNARY = {
    "neg": np.negative, "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "sin": np.sin,
    "cos": np.cos, "tanh": np.tanh, "abs": np.abs, "sign": np.sign,
    "relu": lambda x, out: np.maximum(x, 0, out=out),
    "sigmoid": _sigmoid, "gelu": _gelu,
    "erf": lambda x, out: np.copyto(out, _erf(x)) or out,
    "isfinite": np.isfinite, "isnan": np.isnan, "logical_not": np.logical_not,
}
BOOL_RESULT = {"isfinite", "isnan", "logical_not"}


def _scalar_operand(s, x: np.ndarray, op: str):
    """The Python number ``s`` as numpy should see it next to the array ``x``: computed in
    ``x``'s dtype.  A Python float or int next to a float array already is (numpy treats
    it as a "weak" scalar, so float32 stays float32): no conversion needed."""
    if (s.__class__ is float or s.__class__ is int) and x.dtype.kind == "f" \
            and op not in COMPARISONS:
        return s
    return np.asarray(s, dtype=x.dtype if op not in COMPARISONS else None)


def _blas_operand(x: np.ndarray) -> np.ndarray:
    """``x``, or a compact copy when numpy could not hand it to BLAS: a matrix with a zero
    stride (a broadcast, e.g. the gradient of ``sum()``) or with no unit stride makes
    np.matmul fall back to a loop that is 10-100x slower than the copy."""
    if x.ndim >= 2 and x.size > 1 and x.dtype.kind == "f":
        s0, s1 = x.strides[-2], x.strides[-1]
        item = x.itemsize
        if (s0 == 0 and x.shape[-2] > 1) or (s1 == 0 and x.shape[-1] > 1) \
                or (s0 != item and s1 != item):
            return np.ascontiguousarray(x)
    return x


class NumpyBackend(device):
    """Primitive kernels on flat numpy buffers.  Subclasses replace kernels, not callers."""

    name = "numpy"
    kernels_name = "numpy"

    # Buffers are ordinary host memory: numpy may allocate small outputs itself (see
    # ewise).  A device whose buffers are its own allocations (cuda) says False.
    host_buffers = True

    # --- buffers -------------------------------------------------------------
    empty = staticmethod(aligned_empty)   # (size, np_dtype) -> a flat, aligned, counted buffer

    def from_numpy(self, array: np.ndarray, np_dtype) -> np.ndarray:
        array = np.asarray(array)
        buf = self.empty(array.size, np_dtype)
        buf[...] = array.reshape(-1)
        return buf

    # --- kernels: every input is an NDArray view, every output a new compact buffer ----
    def compact(self, a) -> np.ndarray:
        from mini.ndarray.strides import compact
        # the 03.compact slot: a student's, or the reference, or on device="cpu" its native
        # fast path (mini/ops/fast_paths.py)
        result = compact.on(self)(a.storage.data, a.shape, a.strides, a.offset)
        if not isinstance(result, np.ndarray) or result.shape != (a.size,) \
                or result.dtype != a.storage.data.dtype:
            raise TypeError(
                f"03.compact must return a 1-D numpy array of {a.size} {a.storage.data.dtype} "
                f"elements; got {type(result).__name__} "
                f"{getattr(result, 'shape', '')} {getattr(result, 'dtype', '')}".rstrip())
        out = self.empty(a.size, result.dtype)  # aligned and counted, like every buffer
        out[...] = result
        return out

    # Elementwise ops.  Operands that are whole flat buffers (a fresh result, the common
    # case) go to the flat kernels below (``ewise_flat``, ``scalar_flat``, ``unary_flat``:
    # what a subclass replaces with native code); any other view goes to numpy through its
    # numpy view, strides included, no copy.  Outputs that fit in one cache line are
    # allocated by numpy's ufunc itself (host buffers only): alignment buys nothing there,
    # and a kernel call costs more than the loop (counted all the same).
    def ewise(self, op: str, a, b, out_np_dtype) -> np.ndarray:
        fa, fb = a._flat, b._flat
        if fa is None or fb is None:
            out = self.empty(a.size, out_np_dtype)
            BINARY[op](a.to_numpy_view(), b.to_numpy_view(), out=out.reshape(a.shape))
            return out
        if a.size * out_np_dtype.itemsize <= ALIGNMENT and self.host_buffers:
            out = BINARY[op](fa, fb)
            _TOTAL.count += 1           # _count_allocation(out.nbytes), inlined
            _TOTAL.bytes += out.nbytes
            if _TRACKERS:
                _count_trackers(out.nbytes)
            return out
        out = self.empty(a.size, out_np_dtype)
        self.ewise_flat(op, fa, fb, out)
        return out

    def scalar(self, op: str, a, s, out_np_dtype, reverse: bool = False) -> np.ndarray:
        x = a._flat
        if x is None:
            out = self.empty(a.size, out_np_dtype)
            x, o = a.to_numpy_view(), out.reshape(a.shape)
            s = _scalar_operand(s, x, op)
            BINARY[op](s, x, out=o) if reverse else BINARY[op](x, s, out=o)
            return out
        out = self.empty(a.size, out_np_dtype)
        self.scalar_flat(op, x, s, out, reverse)
        return out

    def unary(self, op: str, a) -> np.ndarray:
        out = self.empty(a.size, np.bool_ if op in BOOL_RESULT else a.dtype.np)
        x = a._flat
        if x is None:
            UNARY[op](a.to_numpy_view(), out=out.reshape(a.shape))
        else:
            self.unary_flat(op, x, out)
        return out

    # the flat kernels: compact 1-D buffers in, a compact 1-D output buffer to write
    def ewise_flat(self, op: str, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        BINARY[op](a, b, out=out)

    def scalar_flat(self, op: str, a: np.ndarray, s, out: np.ndarray, reverse: bool) -> None:
        s = _scalar_operand(s, a, op)
        BINARY[op](s, a, out=out) if reverse else BINARY[op](a, s, out=out)

    def unary_flat(self, op: str, a: np.ndarray, out: np.ndarray) -> None:
        UNARY[op](a, out=out)

    def where(self, cond, a, b, out_np_dtype) -> np.ndarray:
        out = self.empty(cond.size, out_np_dtype)
        np.copyto(out.reshape(cond.shape),
                  np.where(cond.to_numpy_view(), a.to_numpy_view(), b.to_numpy_view()))
        return out

    def reduce(self, op: str, a, axes: tuple, keepdims: bool, out_shape) -> np.ndarray:
        x = a.to_numpy_view()
        size = math.prod(out_shape)
        if op in ("argmax", "argmin"):
            out = self.empty(size, np.int64)
            fn = np.argmax if op == "argmax" else np.argmin
            axis = axes[0] if axes else None
            np.copyto(out.reshape(out_shape), fn(x, axis=axis, keepdims=keepdims))
            return out
        out = self.empty(size, x.dtype)
        fn = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod,
              "any": np.any, "all": np.all}[op]
        if op in ("any", "all"):
            out = self.empty(size, np.bool_)
        fn(x, axis=axes, keepdims=keepdims, out=out.reshape(out_shape))
        return out

    def matmul(self, a, b, out_shape) -> np.ndarray:
        out = self.empty(math.prod(out_shape), np.result_type(a.dtype.np, b.dtype.np))
        np.matmul(_blas_operand(a.to_numpy_view()), _blas_operand(b.to_numpy_view()),
                  out=out.reshape(out_shape))
        return out

    def setitem(self, dst, src) -> None:
        """Write ``src`` (an NDArray of dst's shape, or a Python scalar) through the view ``dst``."""
        view = dst.to_numpy_view()
        if hasattr(src, "to_numpy_view"):
            np.copyto(view, src.to_numpy_view(), casting="unsafe")
        else:
            view[...] = src

    def astype(self, a, np_dtype) -> np.ndarray:
        out = self.empty(a.size, np_dtype)
        np.copyto(out.reshape(a.shape), a.to_numpy_view(), casting="unsafe")
        return out

    def gather(self, a, key) -> np.ndarray:
        """Advanced indexing (integer arrays, boolean masks): always a copy."""
        result = a.to_numpy_view()[key]
        out = self.empty(result.size, result.dtype)
        out[...] = result.reshape(-1)
        return out, result.shape
