"""Plain data between the trusted grader and the sandboxed worker: tagged JSON plus raw
array buffers, never pickle.

A message is one frame::

    u64 header length | header (UTF-8 JSON) | u32 number of buffers | (u64 length | bytes)*

Values keep the distinctions checks care about.  JSON carries ``None``, ``bool``, ``int``,
finite ``float``, ``str`` and ``list``; every other kind is an object with a ``"$"`` tag:

=============  ==============================================================================
``tuple``      ``{"$": "tuple", "v": [...]}``  (a list stays a JSON array)
``dict``       ``{"$": "dict", "v": [[key, value], ...]}``  (keys: str, int, bool, None, tuple)
``float``      ``{"$": "float", "v": "nan" | "inf" | "-inf"}``  (finite floats are plain)
``complex``    ``{"$": "complex", "re": ..., "im": ...}``
``bytes``      ``{"$": "bytes", "b": k}``  (buffer k)
``slice``      ``{"$": "slice", "start": ..., "stop": ..., "step": ...}``
``ellipsis``   ``{"$": "ellipsis"}``
``npscalar``   ``{"$": "npscalar", "dtype": "<i8", "b": k}``  (np.int64(3) is not 3)
``ndarray``    ``{"$": "ndarray", "dtype": "<f4", "shape": [...], "strides": [...], "offset":
               bytes, "align": address % 64, "writeable": bool, "b": k}``: buffer k is the
               memory span of the array, so a non-contiguous, reversed, broadcast or unaligned
               view is re-created with the same layout on the other side
``dtype``      ``{"$": "dtype", "str": "<f4"}``
``tensor``     ``{"$": "tensor", "data": ndarray, "dtype": "float32", "requires_grad": bool,
               "grad": ndarray | None, "is_leaf": bool, "grad_fn": name | None, "id": k}``
``size``       ``{"$": "size", "v": [ints]}``  (mini.Size)
``exception``  ``{"$": "exception", "type": "ValueError", "module": "builtins", "bases": [...],
               "message": "...", "slot_id": ..., "future": ...}``  (``bases``: the names of the
               builtin and mini classes it derives from)
``opaque``     ``{"$": "opaque", "type": "Foo", "module": "...", "repr": "<capped>", "id": k}``
=============  ==============================================================================

Decoding is schema-checked and size-capped (:class:`Caps`); array dtypes come from an
allow-list (numbers and bools: no object, no structured dtype).  The ``side`` argument of
:func:`decode` says what tensors become: on the **worker** side live ``mini`` tensors (the
check's inputs); on the **trusted** side plain records (:class:`TensorRecord`,
:class:`ExceptionRecord`, :class:`OpaqueRecord`) -- the trusted grader never holds an object
the student's code made.  ``id`` fields number the objects of one message, so "the function
returned the tensor it was given" or "the same parameter twice" stay visible.

This module imports only numpy (and ``mini`` lazily, on the worker side): it runs inside the
sandbox.
"""
from __future__ import annotations

import ctypes
import io
import json
import math
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Caps", "CodecError", "TensorSpec", "TensorRecord", "ExceptionRecord", "OpaqueRecord",
           "SizeSpec", "encode", "decode", "write_frame", "read_frame", "pack", "unpack",
           "ALLOWED_DTYPES", "describe_record", "exception_record"]

ALLOWED_DTYPES = frozenset(np.dtype(t).str for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, np.float32, np.float64, np.complex64, np.complex128))


class CodecError(ValueError):
    """A frame that does not follow the schema or exceeds the caps."""


@dataclass(frozen=True)
class Caps:
    max_bytes: int = 256 * 2**20     # all buffers of one message together
    max_header: int = 16 * 2**20     # the JSON header
    max_str: int = 20_000            # characters per string (longer ones are cut on encode)
    max_items: int = 1_000_000       # list/tuple/dict entries in one message
    max_depth: int = 40
    max_buffers: int = 100_000


DEFAULT_CAPS = Caps()


# --------------------------------------------------------------------------- records

@dataclass(frozen=True)
class TensorSpec:
    """A tensor for the worker to create (trusted side, an input of a call)."""
    data: np.ndarray
    requires_grad: bool = False
    dtype: str | None = None          # mini dtype name; default: data's dtype


@dataclass(frozen=True)
class SizeSpec:
    """A ``mini.Size`` for the worker to create."""
    dims: tuple


@dataclass(frozen=True)
class TensorRecord:
    """What a mini Tensor was, as plain data (trusted side)."""
    data: np.ndarray
    dtype: str
    requires_grad: bool
    grad: np.ndarray | None
    is_leaf: bool
    grad_fn: str | None
    id: int = -1

    @property
    def shape(self) -> tuple:
        return tuple(int(d) for d in self.data.shape)


@dataclass(frozen=True)
class ExceptionRecord:
    """An exception the student's code raised, as plain data."""
    type_name: str
    module: str
    bases: tuple[str, ...]
    message: str
    slot_id: str | None = None
    future: bool = False

    def is_a(self, *names: str) -> bool:
        """True when the exception derives from a class of one of these names (builtin
        names like ``"ValueError"``, or mini's ``"ExerciseNotImplemented"``)."""
        return any(n in self.bases for n in names)

    @property
    def not_implemented(self) -> bool:
        """The template's bare ``raise NotImplementedError()`` or a mini stub."""
        return self.is_a("ExerciseNotImplemented") or (
            self.type_name == "NotImplementedError" and self.module == "builtins"
            and not self.message)

    def text(self) -> str:
        name = self.type_name if self.module in ("builtins", "__main__", "") else \
            f"{self.module}.{self.type_name}"
        return f"{name}: {self.message}" if self.message else name


@dataclass(frozen=True)
class OpaqueRecord:
    """Any other object: its type and a capped repr (for messages only)."""
    type_name: str
    module: str
    repr: str
    id: int = -1
    bases: tuple[str, ...] = field(default_factory=tuple)

    def text(self) -> str:
        if self.module in ("builtins", "__main__", ""):
            return self.type_name
        return f"{self.module}.{self.type_name}"


def describe_record(value: Any) -> str:
    """Words for a decoded record in a message."""
    if isinstance(value, TensorRecord):
        return f"a mini Tensor of shape {value.shape} and dtype {value.dtype}"
    if isinstance(value, OpaqueRecord):
        return f"an object of type {value.text()}"
    if isinstance(value, ExceptionRecord):
        return f"the exception {value.text()}"
    return repr(value)


# --------------------------------------------------------------------------- encoding

_BUILTIN_BASES = None


def _class_names(cls) -> tuple[str, ...]:
    """Names of the builtin and mini classes in ``cls``'s MRO (safe: no student code runs)."""
    out = []
    try:
        mro = type.__getattribute__(cls, "__mro__")
    except Exception:  # noqa: BLE001
        return ()
    for k in mro:
        try:
            mod = type.__getattribute__(k, "__module__")
            name = type.__getattribute__(k, "__qualname__")
        except Exception:  # noqa: BLE001
            continue
        if type(mod) is str and type(name) is str and (mod == "builtins" or mod.startswith("mini.")
                                                       or mod == "mini"):
            out.append(name)
    return tuple(out)


def _type_of(obj) -> tuple[str, str]:
    t = type(obj)
    try:
        mod = type.__getattribute__(t, "__module__")
        name = type.__getattribute__(t, "__qualname__")
    except Exception:  # noqa: BLE001
        return "?", "unknown"
    mod = mod if type(mod) is str else "?"
    name = name if type(name) is str else "unknown"
    if "<locals>." in name:
        name = name.rsplit("<locals>.", 1)[1]
    return mod, name


def _cap(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 3)] + "..."


def _safe_str(fn, obj, limit: int) -> str:
    try:
        text = fn(obj)
        if type(text) is not str:
            return ""
        return _cap(text, limit)
    except BaseException:  # noqa: BLE001 - whatever the student's __str__ does
        return ""


def exception_record(e: BaseException, caps: Caps = DEFAULT_CAPS) -> dict:
    """The ``exception`` tag of ``e`` (worker side)."""
    mod, name = _type_of(e)
    msg = _safe_str(str, e, min(caps.max_str, 2000))
    slot = None
    future = False
    try:
        s = getattr(e, "slot_id", None)
        slot = s if type(s) is str and len(s) < 100 else None
        future = getattr(e, "future", False) is True
    except BaseException:  # noqa: BLE001
        pass
    return {"$": "exception", "type": name, "module": mod, "bases": list(_class_names(type(e))),
            "message": msg, "slot_id": slot, "future": future}


class _Encoder:
    def __init__(self, caps: Caps):
        self.caps = caps
        self.buffers: list[bytes] = []
        self.ids: dict[int, int] = {}
        self.keep: list = []     # objects whose id() we memoized stay alive meanwhile
        self.items = 0

    def ident(self, obj) -> int:
        key = id(obj)
        if key not in self.ids:
            self.ids[key] = len(self.ids)
            self.keep.append(obj)
        return self.ids[key]

    def buffer(self, data: bytes) -> int:
        self.buffers.append(bytes(data))
        return len(self.buffers) - 1

    def count(self, n: int) -> None:
        self.items += n
        if self.items > self.caps.max_items:
            raise CodecError(f"more than {self.caps.max_items} items in one message")

    def enc(self, v, depth: int = 0):
        if depth > self.caps.max_depth:
            raise CodecError(f"values nested more than {self.caps.max_depth} deep")
        t = type(v)
        if v is None or t is bool:
            return v
        if t is int:
            if v.bit_length() > 13_000:  # about 4,000 decimal digits
                raise CodecError("an int with more than 4000 digits")
            return v
        if t is float:
            if math.isfinite(v):
                return v
            return {"$": "float", "v": "nan" if v != v else ("inf" if v > 0 else "-inf")}
        if t is str:
            return _cap(v, self.caps.max_str)
        if t is list or t is tuple:
            self.count(len(v))
            items = [self.enc(x, depth + 1) for x in v]
            return items if t is list else {"$": "tuple", "v": items}
        if t is dict:
            self.count(len(v))
            return {"$": "dict", "v": [[self.enc(k, depth + 1), self.enc(x, depth + 1)]
                                       for k, x in v.items()]}
        if t is complex:
            return {"$": "complex", "re": self.enc(v.real), "im": self.enc(v.imag)}
        if t is bytes or t is bytearray:
            return {"$": "bytes", "b": self.buffer(v)}
        if t is slice:
            return {"$": "slice", "start": self.enc(v.start, depth + 1),
                    "stop": self.enc(v.stop, depth + 1), "step": self.enc(v.step, depth + 1)}
        if v is Ellipsis:
            return {"$": "ellipsis"}
        if t is np.ndarray:
            return self.array(v)
        if isinstance(v, np.generic) and t.__module__ == "numpy":
            if v.dtype.str not in ALLOWED_DTYPES:
                return self.opaque(v)
            return {"$": "npscalar", "dtype": v.dtype.str, "b": self.buffer(np.asarray(v).tobytes())}
        if isinstance(v, np.dtype) and t.__module__.startswith("numpy"):
            return {"$": "dtype", "str": v.str}
        if t is TensorSpec:
            d = {"$": "tensor", "data": self.array(np.asarray(v.data)), "requires_grad": bool(v.requires_grad),
                 "dtype": v.dtype, "grad": None, "is_leaf": True, "grad_fn": None, "id": -1}
            return d
        if t is SizeSpec:
            return {"$": "size", "v": [int(d) for d in v.dims]}
        if isinstance(v, BaseException):
            return exception_record(v, self.caps)
        mod = t.__module__ if type(getattr(t, "__module__", None)) is str else ""
        if mod.startswith("mini"):
            tensor = _mini_tensor_class()
            if tensor is not None and t is tensor:
                return self.tensor(v, depth)
            size = _mini_size_class()
            if size is not None and t is size:
                return {"$": "size", "v": [self.enc(int(d)) for d in tuple.__iter__(v)]}
        return self.opaque(v)

    def array(self, a: np.ndarray) -> dict:
        if a.dtype.str not in ALLOWED_DTYPES:
            raise CodecError(f"arrays of dtype {a.dtype} cannot be sent")
        if a.size == 0:
            seg, offset, strides = b"", 0, [0] * a.ndim
        else:
            lo, hi = _byte_bounds(a)
            offset = a.__array_interface__["data"][0] - lo
            seg = ctypes.string_at(lo, hi - lo)  # the memory span of the view, as it is
            strides = [int(s) for s in a.strides]
        if len(seg) > self.caps.max_bytes:
            raise CodecError(f"an array of {len(seg)} bytes exceeds the limit of {self.caps.max_bytes}")
        align = 0
        if a.size:
            align = (a.__array_interface__["data"][0] - offset) % 64
        return {"$": "ndarray", "dtype": a.dtype.str, "shape": [int(d) for d in a.shape],
                "strides": strides, "offset": int(offset), "align": int(align),
                "writeable": bool(a.flags.writeable), "b": self.buffer(seg)}

    def tensor(self, t, depth) -> dict:
        try:
            data = t._data.numpy()
        except Exception as e:  # noqa: BLE001
            return {"$": "opaque", "type": "Tensor", "module": "mini.autograd.tensor",
                    "repr": f"<a tensor whose values could not be read: {type(e).__name__}>",
                    "id": self.ident(t), "bases": []}
        grad = None
        try:
            g = t.grad
            if g is not None and type(g) is type(t):
                grad = self.array(np.array(g._data.numpy(), copy=True, order="C"))
        except Exception:  # noqa: BLE001
            grad = None
        fn = None
        try:
            node = t.grad_fn
            if node is not None:
                fn = _cap(str(type(node).__name__), 200)
        except Exception:  # noqa: BLE001
            fn = None
        try:
            dtype = str(t.dtype.name) if hasattr(t.dtype, "name") else str(t.dtype)
        except Exception:  # noqa: BLE001
            dtype = str(data.dtype)
        return {"$": "tensor", "data": self.array(np.array(data, copy=True, order="C")),
                "dtype": _cap(dtype, 50),
                "requires_grad": bool(getattr(t, "requires_grad", False) is True), "grad": grad,
                "is_leaf": fn is None, "grad_fn": fn, "id": self.ident(t)}

    def opaque(self, v) -> dict:
        mod, name = _type_of(v)
        return {"$": "opaque", "type": _cap(name, 200), "module": _cap(mod, 200),
                "repr": _safe_str(repr, v, 300), "id": self.ident(v),
                "bases": list(_class_names(type(v)))}


def _byte_bounds(a: np.ndarray) -> tuple[int, int]:
    """First and one-past-last byte address an array touches."""
    start = a.__array_interface__["data"][0]
    lo = hi = start
    for d, s in zip(a.shape, a.strides):
        if s < 0:
            lo += (d - 1) * s
        else:
            hi += (d - 1) * s
    return lo, hi + a.itemsize


def _mini_tensor_class():
    try:
        from mini.autograd.tensor import Tensor
        return Tensor
    except Exception:  # noqa: BLE001
        return None


def _mini_size_class():
    try:
        from mini.autograd.tensor import Size
        return Size
    except Exception:  # noqa: BLE001
        return None


def encode(value: Any, caps: Caps = DEFAULT_CAPS) -> tuple[Any, list[bytes]]:
    """``value`` -> (JSON-able header, buffers)."""
    e = _Encoder(caps)
    return e.enc(value), e.buffers


# --------------------------------------------------------------------------- decoding

class _Decoder:
    def __init__(self, buffers: list[bytes], side: str, caps: Caps):
        if side not in ("worker", "trusted"):
            raise ValueError(side)
        self.buffers = buffers
        self.side = side
        self.caps = caps
        self.items = 0

    def fail(self, msg: str):
        raise CodecError(msg)

    def count(self, n: int) -> None:
        self.items += n
        if self.items > self.caps.max_items:
            self.fail(f"more than {self.caps.max_items} items")

    def buf(self, k) -> bytes:
        if type(k) is not int or not 0 <= k < len(self.buffers):
            self.fail(f"bad buffer reference {k!r}")
        return self.buffers[k]

    def dec(self, v, depth: int = 0):
        if depth > self.caps.max_depth:
            self.fail("nested too deep")
        t = type(v)
        if v is None or t in (bool, int):
            return v
        if t is float:
            if not math.isfinite(v):
                self.fail("a non-finite float outside its tag")
            return v
        if t is str:
            if len(v) > self.caps.max_str:
                self.fail(f"a string longer than {self.caps.max_str} characters")
            return v
        if t is list:
            self.count(len(v))
            return [self.dec(x, depth + 1) for x in v]
        if t is not dict:
            self.fail(f"unexpected JSON value of type {t.__name__}")
        tag = v.get("$")
        handler = _TAGS.get(tag) if type(tag) is str else None
        if handler is None:
            self.fail(f"unknown tag {tag!r}")
        return handler(self, v, depth)

    def field(self, v: dict, key: str, kind):
        if key not in v:
            self.fail(f"{v.get('$')}: missing {key!r}")
        x = v[key]
        if kind is not None and type(x) not in (kind if isinstance(kind, tuple) else (kind,)):
            self.fail(f"{v.get('$')}: {key!r} has the wrong type")
        return x

    def array(self, v: dict, copy: bool | None = None) -> np.ndarray:
        if type(v) is not dict or v.get("$") != "ndarray":
            self.fail("expected an ndarray")
        dt = self.field(v, "dtype", str)
        if dt not in ALLOWED_DTYPES:
            self.fail(f"dtype {dt!r} is not allowed")
        dtype = np.dtype(dt)
        shape = self.field(v, "shape", list)
        strides = self.field(v, "strides", list)
        offset = self.field(v, "offset", int)
        if len(shape) > 32 or len(strides) != len(shape) or \
                not all(type(d) is int and d >= 0 for d in shape) or \
                not all(type(s) is int for s in strides):
            self.fail("bad array shape or strides")
        seg = self.buf(self.field(v, "b", int))
        n = 1
        for d in shape:
            n *= d
        if n * dtype.itemsize > self.caps.max_bytes:
            self.fail("array too large")
        if n == 0:
            return np.zeros(shape, dtype)
        lo = offset + sum((d - 1) * s for d, s in zip(shape, strides) if s < 0)
        hi = offset + sum((d - 1) * s for d, s in zip(shape, strides) if s > 0) + dtype.itemsize
        if lo < 0 or hi > len(seg) or offset < 0:
            self.fail("array strides point outside its buffer")
        if self.side == "trusted" or copy:
            out = _strided(np.frombuffer(seg, dtype=np.uint8), dtype, shape, strides, offset)
            return np.array(out, copy=True, order="C")
        # worker: re-create the same layout in fresh, writable, 64-byte-aligned memory
        align = v.get("align", 0)
        align = align if type(align) is int and 0 <= align < 64 else 0
        store = np.empty(len(seg) + 128, dtype=np.uint8)
        start = (-store.__array_interface__["data"][0]) % 64 + align
        store[start:start + len(seg)] = np.frombuffer(seg, dtype=np.uint8)
        out = _strided(store[start:start + len(seg)], dtype, shape, strides, offset)
        if v.get("writeable") is False:
            out.flags.writeable = False
        return out


def _strided(flat: np.ndarray, dtype, shape, strides, offset) -> np.ndarray:
    """A view of the bytes ``flat`` as ``dtype`` with byte ``strides`` from ``offset``."""
    base = flat[offset:]
    first = np.lib.stride_tricks.as_strided(base, shape=(dtype.itemsize,), strides=(1,))
    typed = first.view(dtype)  # one element at the start address, typed
    return np.lib.stride_tricks.as_strided(typed, shape=tuple(shape), strides=tuple(strides),
                                           writeable=True)


def _d_tuple(d: _Decoder, v, depth):
    items = d.field(v, "v", list)
    d.count(len(items))
    return tuple(d.dec(x, depth + 1) for x in items)


def _d_dict(d: _Decoder, v, depth):
    items = d.field(v, "v", list)
    d.count(len(items))
    out = {}
    for kv in items:
        if type(kv) is not list or len(kv) != 2:
            d.fail("bad dict entry")
        k = d.dec(kv[0], depth + 1)
        if not _hashable_plain(k):
            d.fail("a dict key that is not a str, int, bool, None or tuple")
        out[k] = d.dec(kv[1], depth + 1)
    return out


def _hashable_plain(k) -> bool:
    if k is None or type(k) in (str, int, bool, float):
        return True
    return type(k) is tuple and all(_hashable_plain(x) for x in k)


def _d_float(d: _Decoder, v, depth):
    s = d.field(v, "v", str)
    if s not in ("nan", "inf", "-inf"):
        d.fail("bad float tag")
    return float(s)


def _d_complex(d: _Decoder, v, depth):
    re_, im = d.dec(v.get("re"), depth + 1), d.dec(v.get("im"), depth + 1)
    if type(re_) not in (int, float) or type(im) not in (int, float):
        d.fail("bad complex")
    return complex(re_, im)


def _d_bytes(d: _Decoder, v, depth):
    return bytes(d.buf(d.field(v, "b", int)))


def _d_slice(d: _Decoder, v, depth):
    parts = [d.dec(v.get(k), depth + 1) for k in ("start", "stop", "step")]
    return slice(*parts)


def _d_ellipsis(d: _Decoder, v, depth):
    return Ellipsis


def _d_npscalar(d: _Decoder, v, depth):
    dt = d.field(v, "dtype", str)
    if dt not in ALLOWED_DTYPES:
        d.fail(f"dtype {dt!r} is not allowed")
    raw = d.buf(d.field(v, "b", int))
    dtype = np.dtype(dt)
    if len(raw) != dtype.itemsize:
        d.fail("bad numpy scalar")
    return np.frombuffer(raw, dtype=dtype)[0]


def _d_ndarray(d: _Decoder, v, depth):
    return d.array(v)


def _d_dtype(d: _Decoder, v, depth):
    s = d.field(v, "str", str)
    if s not in ALLOWED_DTYPES:
        d.fail(f"dtype {s!r} is not allowed")
    return np.dtype(s)


def _d_tensor(d: _Decoder, v, depth):
    data = d.array(d.field(v, "data", dict), copy=True)
    rg = d.field(v, "requires_grad", bool)
    dtype = v.get("dtype")
    if dtype is not None and (type(dtype) is not str or len(dtype) > 50):
        d.fail("bad tensor dtype")
    if d.side == "worker":
        from mini.autograd.tensor import Tensor
        t = Tensor(data, dtype=dtype) if dtype else Tensor(data)
        if rg:
            t.requires_grad_(True)
        return t
    grad = v.get("grad")
    grad = None if grad is None else d.array(grad)
    fn = v.get("grad_fn")
    if fn is not None and (type(fn) is not str or len(fn) > 200):
        d.fail("bad grad_fn")
    ident = v.get("id", -1)
    return TensorRecord(data=data, dtype=dtype or str(data.dtype), requires_grad=rg, grad=grad,
                        is_leaf=v.get("is_leaf") is True, grad_fn=fn,
                        id=ident if type(ident) is int else -1)


def _d_size(d: _Decoder, v, depth):
    dims = d.field(v, "v", list)
    if not all(type(x) is int for x in dims) or len(dims) > 64:
        d.fail("bad size")
    if d.side == "worker":
        from mini.autograd.tensor import Size
        return Size(dims)
    return tuple(dims)


def _strs(d: _Decoder, xs, limit=64) -> tuple[str, ...]:
    if type(xs) is not list or len(xs) > limit or not all(type(x) is str and len(x) < 300 for x in xs):
        d.fail("bad list of names")
    return tuple(xs)


def _d_exception(d: _Decoder, v, depth):
    if d.side == "worker":
        d.fail("exceptions are not inputs")
    name = d.field(v, "type", str)
    mod = d.field(v, "module", str)
    msg = d.field(v, "message", str)
    if len(name) > 300 or len(mod) > 300 or len(msg) > d.caps.max_str:
        d.fail("exception fields too long")
    slot = v.get("slot_id")
    if slot is not None and (type(slot) is not str or len(slot) > 100):
        d.fail("bad slot id")
    return ExceptionRecord(name, mod, _strs(d, v.get("bases", [])), msg, slot,
                           v.get("future") is True)


def _d_opaque(d: _Decoder, v, depth):
    if d.side == "worker":
        d.fail("opaque objects are not inputs")
    name = d.field(v, "type", str)
    mod = d.field(v, "module", str)
    rep = d.field(v, "repr", str)
    if len(name) > 300 or len(mod) > 300 or len(rep) > d.caps.max_str:
        d.fail("opaque fields too long")
    ident = v.get("id", -1)
    return OpaqueRecord(name, mod, rep, ident if type(ident) is int else -1,
                        _strs(d, v.get("bases", [])))


_TAGS = {"tuple": _d_tuple, "dict": _d_dict, "float": _d_float, "complex": _d_complex,
         "bytes": _d_bytes, "slice": _d_slice, "ellipsis": _d_ellipsis, "npscalar": _d_npscalar,
         "ndarray": _d_ndarray, "dtype": _d_dtype, "tensor": _d_tensor, "size": _d_size,
         "exception": _d_exception, "opaque": _d_opaque}


def decode(header: Any, buffers: list[bytes], side: str, caps: Caps = DEFAULT_CAPS) -> Any:
    """The value of an encoded header; ``side`` is ``"worker"`` or ``"trusted"``."""
    try:
        return _Decoder(buffers, side, caps).dec(header)
    except RecursionError:
        raise CodecError("nested too deep") from None


# --------------------------------------------------------------------------- frames

def _reject_constant(name):
    raise CodecError(f"JSON constant {name} is not allowed")


def pack(message: dict, caps: Caps = DEFAULT_CAPS) -> bytes:
    """One frame holding ``message`` (a dict whose values are encoded with :func:`encode`)."""
    header, buffers = encode(message, caps)
    text = json.dumps(header, allow_nan=False, separators=(",", ":")).encode()
    out = io.BytesIO()
    out.write(struct.pack("<Q", len(text)))
    out.write(text)
    out.write(struct.pack("<I", len(buffers)))
    for b in buffers:
        out.write(struct.pack("<Q", len(b)))
        out.write(b)
    return out.getvalue()


def write_frame(stream, message: dict, caps: Caps = DEFAULT_CAPS) -> None:
    stream.write(pack(message, caps))
    stream.flush()


def _read_exact(stream, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = stream.read(n - got)
        if not chunk:
            raise EOFError("the other side closed the channel")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_frame(stream, side: str, caps: Caps = DEFAULT_CAPS) -> Any:
    """Read one frame from ``stream`` (a binary file) and decode it for ``side``.
    ``EOFError`` when the stream ends before a frame; :class:`CodecError` for a bad one."""
    (n,) = struct.unpack("<Q", _read_exact(stream, 8))
    if n > caps.max_header:
        raise CodecError(f"a header of {n} bytes exceeds the limit of {caps.max_header}")
    try:
        header = json.loads(_read_exact(stream, n).decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise CodecError(f"the header is not valid JSON ({type(e).__name__})") from None
    (k,) = struct.unpack("<I", _read_exact(stream, 4))
    if k > caps.max_buffers:
        raise CodecError("too many buffers")
    buffers, total = [], 0
    for _ in range(k):
        (m,) = struct.unpack("<Q", _read_exact(stream, 8))
        total += m
        if total > caps.max_bytes:
            raise CodecError(f"buffers larger than the limit of {caps.max_bytes} bytes")
        buffers.append(_read_exact(stream, m))
    return decode(header, buffers, side, caps)


def unpack(data: bytes, side: str, caps: Caps = DEFAULT_CAPS) -> Any:
    """:func:`read_frame` on bytes."""
    return read_frame(io.BytesIO(data), side, caps)
