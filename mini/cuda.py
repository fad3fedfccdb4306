"""mini.cuda: the cuda device, with PyTorch's ``torch.cuda`` names.

mini's ``cuda`` device runs CUDA kernels (``mini/backends/cuda/kernels``).  Where an
NVIDIA GPU, its driver and nvcc are present they run on the GPU; everywhere else they
run on mini's CUDA emulator, on the CPU::

    import mini
    mini.cuda.is_available()        # a real GPU?  (False on a laptop, as in PyTorch)
    mini.cuda.is_emulated()         # does device "cuda" run on the emulator instead?
    x = mini.randn(1024, 1024).to("cuda")     # works either way; the emulator says so once
    y = (x @ x).relu().sum(dim=1).cpu()
    mini.cuda.transfer_stats()      # {'h2d_bytes': 4194304, 'd2h_bytes': 4096, ...}

Set ``MINI_CUDA_EMULATE=1`` to use the emulator even where a GPU is present (to grade, or
to compare results).  Unlike PyTorch, ``.numpy()`` works on a cuda tensor (its memory is
managed memory, visible to the host); ``.cpu()`` is the copy that counts as a transfer.

``mini.cuda.emulator`` is the emulator's sanitizer and counters for your own CUDA code
(see :mod:`mini.backends.cuda.emulator`), ``load_inline`` (from ``mini.utils.cpp_extension``)
builds that code, and ``mini.cuda.DeviceSession`` moves numpy arrays to device memory and
back (``cudaMalloc`` and ``cudaMemcpy``) for the launchers you write.
"""
from __future__ import annotations

import importlib

__all__ = ["is_available", "is_emulated", "device_count", "current_device", "get_device_name",
           "synchronize", "transfer_stats", "reset_transfer_stats", "memory_allocated", "emulator",
           "DeviceSession"]


def is_available() -> bool:
    """True when CUDA code runs on a real NVIDIA GPU here (nvcc and a driver with a GPU).
    Device "cuda" works without one too: see :func:`is_emulated`."""
    from mini.backends.cuda import build
    return build.gpu_available()


def is_emulated() -> bool:
    """True when device "cuda" (and ``load_inline(..., cuda_sources=...)``) runs on mini's
    CPU emulator: no usable GPU, or ``MINI_CUDA_EMULATE=1``."""
    from mini.backends.cuda import build
    return build.use_emulator()


def device_count() -> int:
    """The number of real GPUs (0 without one, as in PyTorch; the emulator is not counted)."""
    from mini.backends.cuda import build
    return build._driver_devices()[0] if build.nvcc_path() else 0


def current_device() -> int:
    return 0


def get_device_name(device=None) -> str:
    """The GPU's name, or the emulator's."""
    if is_emulated():
        return "mini CUDA emulator (CPU)"
    import ctypes
    lib = ctypes.CDLL("libcuda.so.1")
    name = ctypes.create_string_buffer(256)
    dev = ctypes.c_int(0)
    lib.cuDeviceGet(ctypes.byref(dev), int(device or 0))
    lib.cuDeviceGetName(name, 256, dev)
    return name.value.decode()


def _backend():
    from mini.backends import get_backend
    return get_backend("cuda")


def synchronize(device=None) -> None:
    """Wait for the device (its kernels already wait before returning; this also raises
    a pending CUDA error)."""
    err = _backend().ext.synchronize()
    if err != "cudaSuccess":
        raise RuntimeError(f"cuda device error: {err}")


def transfer_stats() -> dict:
    """Copies between host and the cuda device since the last reset: ``h2d_bytes``,
    ``d2h_bytes``, ``h2d_count``, ``d2h_count`` (a tensor moved to the device, created
    there from host data, or moved back with ``.cpu()``/``.to(...)``)."""
    return _backend().transfer_stats()


def reset_transfer_stats() -> None:
    _backend().reset_transfer_stats()


def memory_allocated(device=None) -> int:
    """Bytes of device memory in use by live allocations (the emulator's count; on a GPU,
    the allocations of mini's cuda device are not tracked and this raises)."""
    if not is_emulated():
        raise NotImplementedError("memory_allocated is tracked by the emulator only")
    _backend()
    from mini.backends.cuda import emulator as _emulator
    return int(_emulator.transfer_stats()["allocated_bytes"])


def __getattr__(name):
    if name == "emulator":
        return importlib.import_module("mini.backends.cuda.emulator")
    if name == "DeviceSession":
        return importlib.import_module("mini.backends.cuda.kernels").DeviceSession
    raise AttributeError(f"module 'mini.cuda' has no attribute {name!r}")
