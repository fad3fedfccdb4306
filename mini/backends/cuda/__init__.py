"""The cuda backend: CUDA C++ kernels, on an NVIDIA GPU or on mini's CPU emulator.

- ``build``: compiling CUDA sources (nvcc, or the host compiler against the emulator);
- ``plain``: binding modules whose functions take and return plain numbers with ctypes
  (no pybind11 to compile);
- ``rewrite``: the two source rewrites the emulator needs (``<<<...>>>``, ``__shared__``);
- ``emulator``: the emulator's options, reports and counters, from Python; ``reports``:
  how its reports look to a person (text, HTML, what they usually mean);
- ``emulator/``: the emulator itself (``mini_cuda_emulator.h`` and its runtime);
- ``exercises``: chapter 04's CUDA exercise slots, whose references hold the kernels;
- ``backend``: the ``cuda`` device behind NDArray, whose kernels are in ``kernels/`` and
  in the exercise slots.
"""
