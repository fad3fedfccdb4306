"""The cuda backend: CUDA C++ kernels, on an NVIDIA GPU or on mini's CPU emulator.

- ``build``: compiling CUDA sources (nvcc, or the host compiler against the emulator);
- ``rewrite``: the two source rewrites the emulator needs (``<<<...>>>``, ``__shared__``);
- ``emulator``: the emulator's options, reports and counters, from Python;
- ``emulator/``: the emulator itself (``mini_cuda_emulator.h`` and its runtime);
- ``backend``: the ``cuda`` device behind NDArray, whose kernels are in ``kernels/``.
"""
