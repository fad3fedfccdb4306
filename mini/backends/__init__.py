"""Backends own the buffers and run the primitive kernels of NDArray.

``numpy`` is the portable reference; ``cpu`` runs C++/OpenMP kernels built with the
package (see ``mini/backends/cpu``); ``cuda`` runs CUDA kernels, on a GPU or on mini's
CUDA emulator (see ``mini/backends/cuda``).  Both keep data in flat, 64-byte aligned numpy
buffers, so moving between them is a plain copy.
"""
from __future__ import annotations

from mini.backends.numpy_backend import NumpyBackend

_BACKENDS: dict = {}
_DEFAULT = ["numpy"]


def get_backend(name=None):
    """The backend object for a device name ("numpy", "cpu") or a backend itself."""
    if name is None:
        name = _DEFAULT[0]
    if not isinstance(name, str):
        if hasattr(name, "kernels_name"):
            return name
        name = str(name)
    name = name.split(":")[0]
    backend = _BACKENDS.get(name)
    if backend is None:
        if name == "numpy":
            backend = NumpyBackend()
        elif name == "cpu":
            from mini.backends.cpu import CpuBackend
            backend = CpuBackend()
        elif name == "cuda":
            # CUDA kernels: on an NVIDIA GPU, or else on mini's CPU emulator (says so once)
            from mini.backends.cuda.backend import CudaBackend
            backend = CudaBackend()
        else:
            raise RuntimeError(f"unknown device {name!r}; mini has 'numpy', 'cpu' and 'cuda'")
        _BACKENDS[name] = backend
    return backend


def set_default_device(name: str) -> None:
    get_backend(name)  # validate
    _DEFAULT[0] = str(name).split(":")[0]


def get_default_device():
    return get_backend(None)
