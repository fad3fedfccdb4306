"""``mini.save`` / ``mini.load``: pickle, with every Tensor stored as a numpy array.

A file starts with a fixed header (``MAGIC``), then one pickle.  Tensors (and Parameters)
are written as ``(numpy array, is_parameter, requires_grad)`` and rebuilt on load, so a
checkpoint holds plain arrays and does not depend on mini's internal classes (backends,
strided buffers).  A tensor that appears twice (shared weights) is stored once and comes
back shared.

``load`` refuses a file without the header with an error that says what it is not, and
reports a truncated file as truncated.  By default (``weights_only=True``) it rebuilds only
containers, numbers, strings, numpy arrays and tensors, never arbitrary classes: loading a
checkpoint runs no code from the file.

Publishing a checkpoint atomically (so that a crash leaves the previous one intact) is the
job of :func:`mini.utils.train_state.save_checkpoint`; ``save`` just writes.
"""
from __future__ import annotations

import os
import pickle
import struct

import numpy as np

__all__ = ["save", "load", "MAGIC", "NotACheckpointError"]

MAGIC = b"\x93MINI-CKPT\x00\x01\n"


class NotACheckpointError(ValueError):
    """The file is not a mini checkpoint, or it is truncated or corrupt."""


def _rebuild_tensor(array, is_parameter, requires_grad):
    from mini.autograd.tensor import Tensor
    from mini.ndarray import NDArray
    t = Tensor._wrap(NDArray.from_numpy(np.asarray(array, order="C")))
    if is_parameter:
        from mini.nn.parameter import Parameter
        return Parameter(t, requires_grad=bool(requires_grad))
    if requires_grad:
        t.requires_grad_(True)
    return t


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj):
        from mini.autograd.tensor import Tensor
        if isinstance(obj, Tensor):
            from mini.nn.parameter import Parameter
            array = obj.detach().numpy().copy()
            return _rebuild_tensor, (array, isinstance(obj, Parameter), bool(obj.requires_grad))
        return NotImplemented


_SAFE = {
    ("builtins", n) for n in ("dict", "list", "tuple", "set", "frozenset", "int", "float",
                              "complex", "str", "bytes", "bytearray", "bool", "slice", "range")
} | {
    ("collections", "OrderedDict"), ("collections", "defaultdict"),
    ("mini.serialization", "_rebuild_tensor"),
    ("numpy", "ndarray"), ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
    ("numpy.dtypes", None),  # numpy's dtype classes (Float32DType, ...)
    ("_codecs", "encode"), ("copyreg", "_reconstructor"),
}


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) in _SAFE or (module, None) in _SAFE:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(
            f"mini.load(weights_only=True) refuses to rebuild {module}.{name}: a checkpoint "
            f"holds tensors, numbers, strings and containers; pass weights_only=False only "
            f"for a file you trust")


def save(obj, f, pickle_protocol: int = 4) -> None:
    """Write ``obj`` (state dicts, tensors, numbers, containers) to the path or binary file
    ``f``."""
    if isinstance(f, (str, os.PathLike)):
        with open(f, "wb") as fh:
            save(obj, fh, pickle_protocol)
        return
    f.write(MAGIC)
    _Pickler(f, protocol=pickle_protocol).dump(obj)


def _name(f) -> str:
    if isinstance(f, (str, os.PathLike)):
        return os.fspath(f)
    return getattr(f, "name", "the file")


def load(f, map_location=None, weights_only: bool = True):
    """Read what :func:`save` wrote.  Raises :class:`NotACheckpointError` (a ValueError)
    for a file that is not a mini checkpoint or is truncated."""
    if isinstance(f, (str, os.PathLike)):
        with open(f, "rb") as fh:
            return load(fh, map_location, weights_only)
    name = _name(f)
    head = f.read(len(MAGIC))
    if head != MAGIC:
        if not head:
            what = "it is empty"
        elif head[:2] == b"PK":
            what = "it looks like a zip archive (a PyTorch torch.save file?)"
        elif head[:1] == b"\x80":
            what = "it is a plain pickle, not written by mini.save"
        else:
            what = f"it starts with {head[:12]!r}"
        raise NotACheckpointError(f"{name} is not a mini checkpoint: {what}; mini checkpoints "
                                  f"start with the header {MAGIC!r} written by mini.save")
    unpickler = (_SafeUnpickler if weights_only else pickle.Unpickler)(f)
    try:
        return unpickler.load()
    except (EOFError, pickle.UnpicklingError, ValueError, struct.error, IndexError,
            TypeError) as e:
        if isinstance(e, pickle.UnpicklingError) and "refuses to rebuild" in str(e):
            raise
        raise NotACheckpointError(f"{name} is a truncated or corrupt mini checkpoint "
                                  f"({type(e).__name__}: {e}); a save was probably interrupted "
                                  f"-- publish checkpoints atomically") from e

