"""``mini.save`` / ``mini.load``: pickle, with every Tensor stored as a numpy array.

A file starts with a fixed header (``MAGIC``), then one pickle.  Tensors (and Parameters)
are written as ``(numpy array, is_parameter, requires_grad, location)`` and rebuilt on load,
so a checkpoint holds plain arrays and does not depend on mini's internal classes (backends,
strided buffers).  A tensor that appears twice (shared weights) is stored once and comes
back shared.

Devices, as in PyTorch: ``location`` is the name of the device the tensor was saved from
(``"numpy"``, ``"cpu"``, ...), and ``load`` puts it back there unless ``map_location`` says
otherwise (a device name or object for every tensor, a dict from saved locations to new
ones, or a callable ``f(tensor, location)``).  Files written before locations were
recorded load onto the default device.

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

_REBUILD = ("mini.serialization", "_rebuild_tensor")

MAGIC = b"\x93MINI-CKPT\x00\x01\n"


class NotACheckpointError(ValueError):
    """The file is not a mini checkpoint, or it is truncated or corrupt."""


def _rebuild_tensor(array, is_parameter, requires_grad, location=None):
    """What pickle calls for each saved tensor (when the file is read without
    :func:`load`'s unpickler: no mapping, back to the saved location)."""
    return _restore(array, is_parameter, requires_grad, location, None)


def _restore(array, is_parameter, requires_grad, location, map_location):
    from mini.autograd.tensor import Tensor
    from mini.backends import get_backend
    from mini.ndarray import NDArray
    array = np.asarray(array, order="C")
    if _is_map_function(map_location):
        # torch's callable: f(storage, location) gets the data on the host (here: the
        # default device) and returns where it should live, or None for the saved location
        t = map_location(Tensor._wrap(NDArray.from_numpy(array)), _location_name(location))
        if t is not None and not isinstance(t, Tensor):
            raise _MapLocationError(
                f"mini.load: map_location returned {type(t).__name__} for a tensor saved on "
                f"{_location_name(location)!r}; return a mini Tensor (e.g. tensor.to('numpy')) "
                f"or None to keep the saved device")
        target = location
    else:
        t, target = None, _mapped_device(location, map_location)
    if t is None:
        try:
            device = get_backend(target)
        except Exception as e:  # noqa: BLE001 - unavailable device: say what to do
            raise RuntimeError(f"mini.load: a tensor in this checkpoint was saved on device "
                               f"{target!r}, which is not available here ({e}); load it onto "
                               f"another device with map_location, e.g. "
                               f"mini.load(f, map_location='numpy')") from e
        t = Tensor._wrap(NDArray.from_numpy(array, device=device))
    if is_parameter:
        from mini.nn.parameter import Parameter
        return Parameter(t, requires_grad=bool(requires_grad))
    if requires_grad:
        t.requires_grad_(True)
    return t


def _location_name(location) -> str:
    if location is None:  # a file from before locations were saved
        from mini.backends import get_default_device
        return get_default_device().name
    return location


def _mapped_device(location, map_location):
    """The device name (or object) a tensor saved at ``location`` is loaded onto."""
    if map_location is None:
        return location                          # None: the default device
    if isinstance(map_location, dict):
        if location is None:
            return None
        # the saved name itself first, then the same device type ("cuda:0" for "cuda")
        for same in (lambda k: k == location, lambda k: k.split(":")[0] == location.split(":")[0]):
            for key, value in map_location.items():
                if same(str(key)):
                    return value
        return location
    return map_location


class _MapLocationError(TypeError):
    """A map_location that cannot be used (not a corrupt file)."""


def _is_device(x) -> bool:
    return isinstance(x, str) or hasattr(x, "kernels_name")


def _is_map_function(map_location) -> bool:
    return callable(map_location) and not _is_device(map_location) \
        and not isinstance(map_location, dict)


def _check_map_location(map_location) -> None:
    if map_location is None or _is_device(map_location) or _is_map_function(map_location):
        return
    if isinstance(map_location, dict):
        for k, v in map_location.items():
            if not (_is_device(k) and _is_device(v)):
                raise _MapLocationError(f"mini.load: a map_location dict maps saved device names "
                                        f"to device names, got {k!r}: {v!r}")
        return
    raise _MapLocationError(f"mini.load: map_location must be a device name, a device, a dict "
                            f"or a callable, got {type(map_location).__name__}")


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj):
        from mini.autograd.tensor import Tensor
        if isinstance(obj, Tensor):
            from mini.nn.parameter import Parameter
            array = obj.detach().numpy().copy()
            location = getattr(obj.device, "name", str(obj.device))
            return _rebuild_tensor, (array, isinstance(obj, Parameter), bool(obj.requires_grad),
                                     location)
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


class _Unpickler(pickle.Unpickler):
    """Rebuilds tensors where ``map_location`` puts them; with ``weights_only`` it rebuilds
    nothing but the names of ``_SAFE``."""

    def __init__(self, f, map_location, weights_only: bool):
        super().__init__(f)
        self.map_location, self.weights_only = map_location, weights_only

    def find_class(self, module, name):
        if (module, name) == _REBUILD:
            ml = self.map_location
            return lambda array, is_param, requires_grad, location=None: _restore(
                array, is_param, requires_grad, location, ml)
        if not self.weights_only or (module, name) in _SAFE or (module, None) in _SAFE:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(
            f"mini.load(weights_only=True) refuses to rebuild {module}.{name}: a checkpoint "
            f"holds tensors, numbers, strings and containers; pass weights_only=False only "
            f"for a file you trust")


def save(obj, f, pickle_module=None, pickle_protocol: int = 4,
         _use_new_zipfile_serialization: bool = True) -> None:
    """Write ``obj`` (state dicts, tensors, numbers, containers) to the path or binary file
    ``f``.  Each tensor remembers its device (see :func:`load`).  mini always writes its
    own format with the standard ``pickle``: ``pickle_module`` must be None (or ``pickle``)."""
    if pickle_module is not None and pickle_module is not pickle:
        raise NotImplementedError(f"mini.save writes with the standard pickle module; "
                                  f"pickle_module={getattr(pickle_module, '__name__', pickle_module)!r}"
                                  f" is not supported")
    if isinstance(f, (str, os.PathLike)):
        with open(f, "wb") as fh:
            save(obj, fh, pickle_protocol=pickle_protocol)
        return
    f.write(MAGIC)
    _Pickler(f, protocol=pickle_protocol).dump(obj)


def _name(f) -> str:
    if isinstance(f, (str, os.PathLike)):
        return os.fspath(f)
    return getattr(f, "name", "the file")


def load(f, map_location=None, pickle_module=None, *, weights_only: bool = True,
         mmap=None, **pickle_load_args):
    """Read what :func:`save` wrote.  Raises :class:`NotACheckpointError` (a ValueError)
    for a file that is not a mini checkpoint or is truncated.

    ``map_location`` decides where tensors go, as in ``torch.load``:

    - None: back to the device each tensor was saved from (an error that names
      ``map_location`` if that device is not available here);
    - a device name or device (``"numpy"``, ``mini.device("cpu")``): every tensor there;
    - a dict ``{saved location: new location}``: tensors saved elsewhere stay put;
    - a callable ``f(tensor, location)``: ``tensor`` is the data on the default device and
      ``location`` the saved device's name; return the tensor to use, or None to keep the
      saved device.
    """
    if pickle_module is not None and pickle_module is not pickle:
        raise NotImplementedError(f"mini.load reads with the standard pickle module; "
                                  f"pickle_module={getattr(pickle_module, '__name__', pickle_module)!r}"
                                  f" is not supported")
    if mmap:
        raise NotImplementedError("mini.load(mmap=True) is not supported: mini checkpoints "
                                  "are read into memory")
    if pickle_load_args:
        raise NotImplementedError(f"mini.load does not take pickle arguments "
                                  f"{sorted(pickle_load_args)}")
    if weights_only is None:  # torch's "use the default"
        weights_only = True
    if isinstance(f, (str, os.PathLike)):
        with open(f, "rb") as fh:
            return load(fh, map_location, weights_only=weights_only)
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
    _check_map_location(map_location)
    unpickler = _Unpickler(f, map_location, bool(weights_only))
    try:
        return unpickler.load()
    except (EOFError, pickle.UnpicklingError, ValueError, struct.error, IndexError,
            TypeError) as e:
        if isinstance(e, _MapLocationError) or (
                isinstance(e, pickle.UnpicklingError) and "refuses to rebuild" in str(e)):
            raise
        raise NotACheckpointError(f"{name} is a truncated or corrupt mini checkpoint "
                                  f"({type(e).__name__}: {e}); a save was probably interrupted "
                                  f"-- publish checkpoints atomically") from e

