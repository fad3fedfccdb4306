"""Backends own the buffers and run the primitive kernels of NDArray.

Three devices, one buffer format (flat numpy arrays, so moving between them is a plain copy):

- ``cpu``, the default, as in PyTorch: C++/OpenMP kernels built with the package (see
  ``mini/backends/cpu``).  A script that names no device runs here.
- ``numpy``: the portable reference, every kernel written with numpy.  The chapters that
  teach how a backend works select it by name (``device="numpy"``,
  ``mini.set_default_device("numpy")``).
- ``cuda``: CUDA kernels, on a GPU or on mini's CUDA emulator (see ``mini/backends/cuda``).

When the C++ kernels could not be built (no compiler at install time), the name ``cpu``
falls back to the numpy backend and mini says so once, with a RuntimeWarning: everything
runs, only slower.  ``mini.device("cpu")`` then *is* the numpy backend (its ``.type`` says
``numpy``), so what you see is what runs.
"""
from __future__ import annotations

import warnings

from mini.backends.device import device
from mini.backends.numpy_backend import NumpyBackend

__all__ = ["device", "get_backend", "set_default_device", "get_default_device"]

DEFAULT_DEVICE = "cpu"
_BACKENDS: dict = {}        # device name (as asked for) -> backend object
_DEFAULT = [DEFAULT_DEVICE]  # the name set_default_device chose
_warned = []


def get_backend(name=None):
    """The backend object for a device name ("cpu", "numpy", "cpu:0"), a device object (passed
    through), or None (the default device)."""
    if name is None:
        name = _DEFAULT[0]
    elif not isinstance(name, str):
        if isinstance(name, device):
            return name
        name = str(name)
    backend = _BACKENDS.get(name)
    if backend is None:
        kind, _, index = name.partition(":")
        if index and index != "0":
            raise RuntimeError(f"device {name!r}: mini has one {kind} device ({kind!r} or "
                               f"'{kind}:0')")
        backend = _BACKENDS.get(kind)
        if backend is None:
            backend = _BACKENDS[kind] = _make_backend(kind)
        _BACKENDS[name] = backend
    return backend


def _make_backend(kind: str):
    if kind == "numpy":
        return NumpyBackend()
    if kind == "cpu":
        from mini.backends.cpu import CpuBackend
        from mini.backends.cpu.build_info import import_error, load_extension
        if load_extension() is not None:
            return CpuBackend()
        if not _warned:
            _warned.append(True)
            warnings.warn(f"mini's C++ kernels are not built, so device 'cpu' runs on the numpy "
                          f"reference backend (correct, slower). {import_error()}",
                          RuntimeWarning, stacklevel=4)
        return get_backend("numpy")
    if kind == "cuda":
        # CUDA kernels: on an NVIDIA GPU, or else on mini's CPU emulator (says so once)
        from mini.backends.cuda.backend import CudaBackend
        return CudaBackend()
    raise RuntimeError(f"unknown device {kind!r}; mini has 'cpu' (the default), 'numpy' and "
                       f"'cuda'")


def set_default_device(name) -> None:
    """The device of tensors created without ``device=`` (``torch.set_default_device``);
    None goes back to mini's default, ``cpu``."""
    if name is None:
        name = DEFAULT_DEVICE
    get_backend(name)  # validate (and say once if "cpu" falls back to numpy)
    _DEFAULT[0] = name if isinstance(name, str) else str(name)


def get_default_device():
    """The device object of tensors created without ``device=`` (``torch.get_default_device``)."""
    return get_backend(None)
