"""NDArray: a flat buffer plus shape, strides (in elements) and offset.

Views (slicing, permute, broadcast_to, reshape when the strides allow) build a
new NDArray over the same :class:`Storage` and allocate nothing.  The metadata
arithmetic lives in :mod:`mini.ndarray.strides` (the exercises of chapter 03);
the arithmetic on data is delegated to the backend's primitive kernels.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from mini.backends import get_backend
from mini.ndarray import strides as S
from mini.ndarray._numpy_fallbacks import row_major as _compact_strides_cached
from mini.ndarray.dtypes import as_dtype, result_dtype, bool_, _BY_NUMPY

_new_ndarray = object.__new__
_new_storage = object.__new__
_row_major = _compact_strides_cached   # row-major strides of a tuple shape (S.row_major_strides)
_ROW_MAJOR: dict = {}                   # shape -> row-major strides, for the shapes seen


class Storage:
    """The buffer a family of views shares, and its version counter.

    Every in-place write through any view bumps ``version``; autograd compares it
    with the version it saw when it saved a tensor for backward.
    """
    __slots__ = ("data", "device", "version", "__weakref__")

    def __init__(self, data: np.ndarray, device):
        self.data = data
        self.device = device
        self.version = 0

    @property
    def nbytes(self) -> int:
        return self.data.nbytes


class NDArray:
    # size: the number of elements (kept, not recomputed: every kernel asks).  _flat: the
    # whole flat buffer when this array is exactly that buffer in row-major order (a fresh
    # result, or a reshape of one), else None: kernels then hand numpy the flat buffer
    # directly, with no view to build.  _np: the numpy view of this array, made once.
    __slots__ = ("storage", "shape", "strides", "offset", "dtype", "size", "_flat", "_np")

    def __init__(self, storage: Storage, shape, strides, offset: int = 0, check: bool = True):
        self.storage = storage
        self.shape = tuple(shape)
        self.strides = tuple(strides)
        self.offset = int(offset)
        self.dtype = as_dtype(storage.data.dtype)
        self.size = math.prod(self.shape)
        self._np = None
        self._flat = None
        if check:
            self._check_bounds()
        data = storage.data
        if self.offset == 0 and self.size == data.size and data.ndim == 1 \
                and S.is_compact(self.shape, self.strides):
            self._flat = data

    # --- construction ----------------------------------------------------------------
    @staticmethod
    def make(buf: np.ndarray, shape, device, dtype=None) -> "NDArray":
        """Wrap a fresh compact buffer (trusted: no bounds check needed).

        The hot path of every op: the fields are set directly, nothing is validated (``buf``
        holds exactly the elements of ``shape``), and the numpy view of the new array is
        made later, only if a kernel asks for it."""
        if shape.__class__ is not tuple:
            shape = tuple(shape)
        st = _new_storage(Storage)
        st.data, st.device, st.version = buf, device, 0
        a = _new_ndarray(NDArray)
        a.storage = st
        a.shape = shape
        strides = _ROW_MAJOR.get(shape)
        if strides is None:
            if len(_ROW_MAJOR) > 4096:
                _ROW_MAJOR.clear()
            strides = _ROW_MAJOR[shape] = _row_major(shape)
        a.strides = strides
        a.offset = 0
        if dtype is None:  # (callers that know the mini dtype of buf pass it)
            dtype = _BY_NUMPY.get(buf.dtype)
            if dtype is None:
                dtype = as_dtype(buf.dtype)
        a.dtype = dtype
        a.size = buf.size
        a._flat = buf if buf.ndim == 1 else None
        a._np = None
        return a

    @staticmethod
    def from_numpy(array, device=None, dtype=None) -> "NDArray":
        device = get_backend(device)
        array = np.asarray(array)
        d = as_dtype(dtype if dtype is not None else array.dtype)
        return NDArray.make(device.from_numpy(array, d.np), array.shape, device)

    @staticmethod
    def empty(shape, dtype, device=None) -> "NDArray":
        device = get_backend(device)
        shape = tuple(int(s) for s in shape)
        if any(s < 0 for s in shape):
            raise ValueError(f"negative dimension in shape {shape}")
        return NDArray.make(device.empty(math.prod(shape), as_dtype(dtype).np), shape, device)

    def _check_bounds(self):
        if len(self.shape) != len(self.strides):
            raise ValueError(f"shape {self.shape} and strides {self.strides} have different lengths")
        if any(not isinstance(d, numbers.Integral) or d < 0 for d in self.shape):
            raise ValueError(f"invalid shape {self.shape}")
        if 0 in self.shape:
            return
        lo = hi = self.offset
        for d, s in zip(self.shape, self.strides):
            if s > 0:
                hi += (d - 1) * s
            else:
                lo += (d - 1) * s
        if lo < 0 or hi >= self.storage.data.size:
            raise IndexError(
                f"view with shape {self.shape}, strides {self.strides} and offset {self.offset} "
                f"would reach buffer positions {lo}..{hi}, outside the buffer of "
                f"{self.storage.data.size} elements")

    # --- metadata ----------------------------------------------------------------------
    @property
    def device(self):
        return self.storage.device

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def is_compact(self) -> bool:
        return S.is_compact(self.shape, self.strides)

    def __repr__(self):
        return (f"NDArray(shape={self.shape}, strides={self.strides}, offset={self.offset}, "
                f"dtype={self.dtype.name}, device={self.device.name})\n{self.numpy()}")

    # --- numpy interop -----------------------------------------------------------------
    def to_numpy_view(self) -> np.ndarray:
        """A numpy view of this array over the same memory (no copy)."""
        v = self._np
        if v is None:
            data = self.storage.data
            if self._flat is not None:
                v = data.reshape(self.shape)
            elif self.size == 0:
                v = np.empty(self.shape, dtype=data.dtype)
            else:
                item = data.itemsize
                v = np.lib.stride_tricks.as_strided(
                    data[self.offset:], self.shape, tuple(s * item for s in self.strides))
            self._np = v
        return v

    def numpy(self) -> np.ndarray:
        """A compact numpy copy."""
        return np.array(self.to_numpy_view(), copy=True)

    def item(self):
        if self.size != 1:
            raise ValueError(f"only one element arrays can be converted to Python scalars, "
                             f"got shape {self.shape}")
        return self.to_numpy_view().reshape(-1)[0].item()

    # --- views -------------------------------------------------------------------------
    def _view(self, shape, strides, offset=None) -> "NDArray":
        return NDArray(self.storage, shape, strides, self.offset if offset is None else offset)

    def __getitem__(self, key) -> "NDArray":
        if _is_basic_index(key):
            shape, strides, offset = S.slice_view(self.shape, self.strides, self.offset, key)
            return self._view(shape, strides, offset)
        key = _to_numpy_index(key)
        buf, shape = self.device.gather(self, key)
        return NDArray.make(buf, shape, self.device)

    def permute(self, axes) -> "NDArray":
        shape, strides = S.permute(self.shape, self.strides, tuple(axes))
        return self._view(shape, strides)

    def transpose(self, dim0: int = -2, dim1: int = -1) -> "NDArray":
        axes = list(range(self.ndim))
        if self.ndim < 2:
            return self
        axes[dim0], axes[dim1] = axes[dim1], axes[dim0]
        return self.permute(axes)

    def broadcast_to(self, shape) -> "NDArray":
        shape = tuple(int(s) for s in shape)
        if shape == self.shape:
            return self
        return self._view(shape, S.broadcast_to(self.shape, self.strides, shape))

    def reshape(self, shape) -> "NDArray":
        """A view when the strides allow it, otherwise a compact copy reshaped."""
        shape = S.infer_shape((shape,) if isinstance(shape, numbers.Integral) else shape,
                              self.size, self.shape)
        if shape == self.shape:
            return self
        strides = S.reshape_strides(self.shape, self.strides, shape)
        if strides is None:
            return self.compact().reshape(shape)
        return self._view(shape, strides)

    def view(self, shape) -> "NDArray":
        """Like reshape, but raises instead of copying."""
        shape = S.infer_shape((shape,) if isinstance(shape, numbers.Integral) else shape,
                              self.size, self.shape)
        strides = S.reshape_strides(self.shape, self.strides, shape)
        if strides is None:
            raise RuntimeError(
                f"view size is not compatible with input tensor's size and stride: shape "
                f"{self.shape} with strides {self.strides} cannot be viewed as {shape}; "
                f"use .reshape(...) instead (it copies when it has to)")
        return self._view(shape, strides)

    def compact(self) -> "NDArray":
        """This array if it is already compact (row-major, offset-free use), else a copy."""
        if self.is_compact() and (self.size == 0 or self.offset + self.size <= self.storage.data.size):
            return self
        return NDArray.make(self.device.compact(self), self.shape, self.device)

    def copy(self) -> "NDArray":
        """A new compact buffer with this array's elements."""
        if self.is_compact():  # a contiguous run: one block copy, no index arithmetic
            buf = self.device.empty(self.size, self.dtype.np)
            buf[...] = self.storage.data[self.offset:self.offset + self.size]
            return NDArray.make(buf, self.shape, self.device)
        return NDArray.make(self.device.compact(self), self.shape, self.device)

    # --- writes ------------------------------------------------------------------------
    def __setitem__(self, key, value) -> None:
        if not _is_basic_index(key):
            view = self.to_numpy_view()
            view[_to_numpy_index(key)] = value.to_numpy_view() if isinstance(value, NDArray) else value
        else:
            dst = self[key]
            _check_writable(dst)
            if isinstance(value, NDArray):
                value = value.broadcast_to(dst.shape) if value.shape != dst.shape else value
            self.device.setitem(dst, value)
        self.storage.version += 1

    def fill(self, value) -> "NDArray":
        _check_writable(self)
        self.device.setitem(self, value)
        self.storage.version += 1
        return self

    def copy_from(self, src: "NDArray") -> "NDArray":
        _check_writable(self)
        if src.shape != self.shape:
            src = src.broadcast_to(self.shape)
        self.device.setitem(self, src)
        self.storage.version += 1
        return self

    # --- arithmetic (the primitive kernels, with broadcasting) -------------------------
    def ewise(self, op: str, other) -> "NDArray":
        if other.__class__ is NDArray:
            a, b = self, other
            dev = a.storage.device
            if dev is not b.storage.device:
                _same_device(a, b, op)
            dt = a.dtype
            if a.shape == b.shape and dt is b.dtype and dt.is_floating_point \
                    and op not in _COMPARISONS:
                # the common case: same shape and float dtype, nothing to broadcast or cast
                return _make(dev.ewise(op, a, b, dt.np), a.shape, dev, dt)
            if a.shape != b.shape:
                shape = _broadcast_or_raise(op, a.shape, b.shape)
                a, b = a.broadcast_to(shape), b.broadcast_to(shape)
            if op in _COMPARISONS:
                out_dtype = bool_
            elif a.dtype is b.dtype and a.dtype.is_floating_point:
                out_dtype = a.dtype  # the common case: nothing to promote or cast
            else:
                out_dtype = result_dtype(a.dtype, b.dtype)
                if op == "div" and not out_dtype.is_floating_point:
                    from mini.ndarray.dtypes import get_default_dtype
                    out_dtype = get_default_dtype()  # true division of integers gives floats
                a, b = a.astype(out_dtype), b.astype(out_dtype)
            return NDArray.make(self.device.ewise(op, a, b, out_dtype.np), a.shape, self.device)
        return self.scalar(op, other)

    def scalar(self, op: str, s, reverse: bool = False) -> "NDArray":
        out_dtype = self.dtype
        if out_dtype.is_floating_point and op not in _COMPARISONS:  # the common case
            dev = self.storage.device
            return _make(dev.scalar(op, self, s, out_dtype.np, reverse), self.shape, dev, out_dtype)
        if op in _COMPARISONS:
            out_dtype = bool_
        elif not self.dtype.is_floating_point and (isinstance(s, float) or op == "div"):
            from mini.ndarray.dtypes import get_default_dtype
            out_dtype = get_default_dtype()
        a = self if out_dtype == self.dtype or op in _COMPARISONS else self.astype(out_dtype)
        return NDArray.make(self.device.scalar(op, a, s, out_dtype.np, reverse), self.shape, self.device)

    def unary(self, op: str) -> "NDArray":
        a = self
        if not self.dtype.is_floating_point and op in _FLOAT_RESULT:
            from mini.ndarray.dtypes import get_default_dtype
            a = self.astype(get_default_dtype())  # exp of an int64 tensor is float32, as in torch
        dev = self.storage.device
        return NDArray.make(dev.unary(op, a), a.shape, dev)

    def astype(self, d) -> "NDArray":
        d = as_dtype(d)
        if d == self.dtype:
            return self
        return NDArray.make(self.device.astype(self, d.np), self.shape, self.device)

    def where(self, a: "NDArray", b: "NDArray") -> "NDArray":
        shape = S.broadcast_shapes(self.shape, a.shape, b.shape)
        out_dtype = result_dtype(a.dtype, b.dtype)
        buf = self.device.where(self.broadcast_to(shape), a.broadcast_to(shape),
                                b.broadcast_to(shape), out_dtype.np)
        return NDArray.make(buf, shape, self.device)

    def reduce(self, op: str, axis=None, keepdims: bool = False) -> "NDArray":
        axes = normalize_axes(axis, self.ndim)
        if op in ("argmax", "argmin") and axis is not None and len(axes) != 1:
            raise ValueError(f"{op} takes a single axis, got {axis}")
        if op in ("max", "min", "argmax", "argmin") and self.size == 0:
            raise ValueError(f"{op}(): cannot reduce an empty array of shape {self.shape}")
        if op in ("argmax", "argmin") and axis is None:
            out_shape = (1,) * self.ndim if keepdims else ()
            axes = ()
        else:
            out_shape = tuple(1 if i in axes else d for i, d in enumerate(self.shape)) if keepdims \
                else tuple(d for i, d in enumerate(self.shape) if i not in axes)
        buf = self.device.reduce(op, self, axes if axes else None if op in ("argmax", "argmin") else axes,
                                 keepdims, out_shape)
        return NDArray.make(buf, out_shape, self.device)

    def matmul(self, other: "NDArray") -> "NDArray":
        _same_device(self, other, "matmul")
        a, b = self, other
        if a.ndim == 0 or b.ndim == 0:
            raise ValueError("matmul: both arguments need at least one dimension, got shapes "
                             f"{a.shape} and {b.shape}")
        a_shape = (1,) + a.shape if a.ndim == 1 else a.shape
        b_shape = b.shape + (1,) if b.ndim == 1 else b.shape
        if a_shape[-1] != b_shape[-2]:
            raise ValueError(f"matmul: shapes {a.shape} and {b.shape} cannot be multiplied "
                             f"({a_shape[-2]}x{a_shape[-1]} and {b_shape[-2]}x{b_shape[-1]})")
        batch = _broadcast_or_raise("matmul", a_shape[:-2], b_shape[:-2])
        a = a.reshape(a_shape).broadcast_to(batch + a_shape[-2:])
        b = b.reshape(b_shape).broadcast_to(batch + b_shape[-2:])
        out_shape = batch + (a_shape[-2], b_shape[-1])
        out = NDArray.make(self.device.matmul(a, b, out_shape), out_shape, self.device)
        if self.ndim == 1:
            out = out.reshape(out_shape[:-2] + out_shape[-1:])
        if other.ndim == 1:
            out = out.reshape(out.shape[:-1])
        return out

    def to(self, device) -> "NDArray":
        device = get_backend(device)
        if device == self.device:
            return self
        src = self.compact()
        to_host = getattr(src.device, "to_host", None)   # a device that counts what leaves it
        host = to_host(src) if to_host is not None else src.to_numpy_view()
        return NDArray.make(device.from_numpy(host, self.dtype.np), self.shape, device)


_make = NDArray.make
_COMPARISONS = {"eq", "ne", "lt", "le", "gt", "ge"}
_FLOAT_RESULT = {"exp", "log", "sqrt", "sin", "cos", "tanh", "sigmoid", "gelu", "erf"}


def _check_writable(dst: "NDArray") -> None:
    if any(s == 0 and d > 1 for d, s in zip(dst.shape, dst.strides)):
        raise RuntimeError(
            f"unsupported operation: more than one element of the written-to array refers to a "
            f"single memory location (shape {dst.shape}, strides {dst.strides}: a broadcast "
            f"view). Please clone() the tensor before performing the operation.")


def normalize_axes(axis, ndim: int) -> tuple:
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, numbers.Integral):
        axis = (axis,)
    out = []
    for a in axis:
        a = int(a)
        if not -max(ndim, 1) <= a < max(ndim, 1):
            raise IndexError(f"dimension {a} is out of range for an array with {ndim} dimensions")
        out.append(a % max(ndim, 1) if ndim else 0)
    if len(set(out)) != len(out):
        raise ValueError(f"dimension listed twice in {tuple(axis)}")
    return tuple(sorted(out)) if ndim else ()


def _broadcast_or_raise(op, s1, s2):
    try:
        return S.broadcast_shapes(s1, s2)
    except ValueError:
        raise ValueError(f"{op}: shapes {tuple(s1)} and {tuple(s2)} cannot be broadcast together") from None


def _same_device(a, b, op):
    if a.storage.device is not b.storage.device and a.device != b.device:
        raise RuntimeError(f"{op}: expected all arrays on the same device, got {a.device.name} "
                           f"and {b.device.name}")


def _is_basic_index(key) -> bool:
    items = key if isinstance(key, tuple) else (key,)
    for k in items:
        if k is None or k is Ellipsis or isinstance(k, slice):
            continue
        if isinstance(k, (numbers.Integral, np.integer)) and not isinstance(k, (bool, np.bool_)):
            continue
        return False
    return True


def _to_numpy_index(key):
    def conv(k):
        if isinstance(k, NDArray):
            return k.to_numpy_view()
        if hasattr(k, "_data") and isinstance(getattr(k, "_data"), NDArray):  # a Tensor
            return k._data.to_numpy_view()
        if isinstance(k, list):
            return np.asarray(k)
        return k
    if isinstance(key, tuple):
        return tuple(conv(k) for k in key)
    return conv(key)
