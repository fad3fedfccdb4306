"""Chapter 04 exercise slots: C++/OpenMP kernels that a student writes in notebook cells.

Each slot is a plain Python function, numpy arrays in and out, whose body holds the C++
source of its kernel as a string and builds it with
:func:`mini.utils.cpp_extension.load_inline` (cached by a hash of the source, so only the
first call compiles).  Keeping the source inside the function keeps the whole answer in
its cell: the grader's sandboxed worker runs the notebook's answer cells as text, and the
same source hits the same cache there.

Slots (float32 unless said otherwise; inputs may be views with any strides):

- ``04.omp_add(a, b)``        -> a + b, one OpenMP elementwise kernel;
- ``04.omp_sum(x)``           -> the sum of a float64 array as a Python float, an OpenMP
  reduction;
- ``04.tiled_matmul(a, b)``   -> a @ b, cache-blocked (tiled) and OpenMP-parallel;
- ``04.fused_add_relu(a, b)`` -> max(a + b, 0) in one pass over memory.

The wrapper's job (inside each solution) is the contract every kernel of mini's cpu
backend keeps: check dtype and shapes and raise a clear error, hand the kernel compact
buffers only (a C++ loop over ``ptr[i]`` reads a flat block; a transposed or sliced view
is not one), allocate the output.
"""
from __future__ import annotations

import numpy as np

from mini.exercises import exercise
from mini.utils.cpp_extension import load_inline

__all__ = ["omp_add", "omp_sum", "tiled_matmul", "fused_add_relu"]


@exercise("04.omp_add")
def omp_add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a + b`` computed by a C++ kernel with an OpenMP parallel loop.

    a, b: float32 numpy arrays of the same shape (any strides: views are fine).
    Returns a new C-contiguous float32 array of that shape.
    Raises TypeError when a dtype is not float32, ValueError when the shapes differ.
    """
    ### BEGIN SOLUTION
    source = r"""
    void add(py::array_t<float> a, py::array_t<float> b, py::array_t<float> out) {
        const float* pa = a.data();
        const float* pb = b.data();
        float* po = out.mutable_data();
        const int64_t n = out.size();
        #pragma omp parallel for schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; ++i) po[i] = pa[i] + pb[i];
    }
    """
    if a.dtype != np.float32 or b.dtype != np.float32:
        raise TypeError(f"omp_add needs float32 arrays, got {a.dtype} and {b.dtype}")
    if a.shape != b.shape:
        raise ValueError(f"omp_add: shapes differ: {a.shape} and {b.shape}")
    ext = load_inline("omp_add", source, functions=["add"])
    a = np.ascontiguousarray(a)   # the kernel reads a flat buffer: compact views first
    b = np.ascontiguousarray(b)
    out = np.empty(a.shape, np.float32)
    ext.add(a, b, out)
    return out
    ### END SOLUTION


@exercise("04.omp_sum")
def omp_sum(x: np.ndarray) -> float:
    """The sum of all elements of a float64 array, by an OpenMP parallel reduction.

    x: float64 numpy array of any shape and strides (an empty array sums to 0.0).
    Returns a Python float.  Raises TypeError when the dtype is not float64.
    """
    ### BEGIN SOLUTION
    source = r"""
    double sum(py::array_t<double> x) {
        const double* p = x.data();
        const int64_t n = x.size();
        double total = 0.0;
        #pragma omp parallel for reduction(+ : total) schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; ++i) total += p[i];
        return total;
    }
    """
    if x.dtype != np.float64:
        raise TypeError(f"omp_sum needs a float64 array, got {x.dtype}")
    ext = load_inline("omp_sum", source, functions=["sum"])
    return float(ext.sum(np.ascontiguousarray(x)))
    ### END SOLUTION


@exercise("04.tiled_matmul")
def tiled_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` for float32 matrices [M, K] @ [K, N] -> [M, N], by a cache-blocked
    (tiled) C++ kernel whose outer loop over row tiles runs in parallel with OpenMP.

    Any M, K, N >= 0 (not only multiples of the tile).  Raises TypeError for a dtype other
    than float32, ValueError when an input is not 2-D or the inner sizes differ.
    """
    ### BEGIN SOLUTION
    source = r"""
    constexpr int64_t TILE = 64;
    void matmul(py::array_t<float> a, py::array_t<float> b, py::array_t<float> c,
                int64_t M, int64_t K, int64_t N) {
        const float* A = a.data();
        const float* B = b.data();
        float* C = c.mutable_data();           // zero on entry
        #pragma omp parallel for schedule(static)
        for (int64_t i0 = 0; i0 < M; i0 += TILE) {
            const int64_t i1 = std::min(i0 + TILE, M);
            for (int64_t k0 = 0; k0 < K; k0 += TILE) {
                const int64_t k1 = std::min(k0 + TILE, K);
                for (int64_t j0 = 0; j0 < N; j0 += TILE) {
                    const int64_t j1 = std::min(j0 + TILE, N);
                    for (int64_t i = i0; i < i1; ++i) {
                        float* crow = C + i * N;
                        for (int64_t k = k0; k < k1; ++k) {
                            const float aik = A[i * K + k];
                            const float* brow = B + k * N;
                            for (int64_t j = j0; j < j1; ++j) crow[j] += aik * brow[j];
                        }
                    }
                }
            }
        }
    }
    """
    if a.dtype != np.float32 or b.dtype != np.float32:
        raise TypeError(f"tiled_matmul needs float32 matrices, got {a.dtype} and {b.dtype}")
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"tiled_matmul needs [M, K] @ [K, N], got {a.shape} @ {b.shape}")
    ext = load_inline("tiled_matmul", source, functions=["matmul"])
    m, k = a.shape
    n = b.shape[1]
    c = np.zeros((m, n), np.float32)
    if m and n and k:
        ext.matmul(np.ascontiguousarray(a), np.ascontiguousarray(b), c, m, k, n)
    return c
    ### END SOLUTION


@exercise("04.fused_add_relu")
def fused_add_relu(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``max(a + b, 0)`` in ONE C++/OpenMP loop: each element is read once from a and b
    and written once, with no temporary array for ``a + b``.

    a, b: float32 arrays of the same shape (any strides).  Returns a new C-contiguous
    float32 array.  Raises TypeError for another dtype, ValueError when the shapes differ.
    """
    ### BEGIN SOLUTION
    source = r"""
    void add_relu(py::array_t<float> a, py::array_t<float> b, py::array_t<float> out) {
        const float* pa = a.data();
        const float* pb = b.data();
        float* po = out.mutable_data();
        const int64_t n = out.size();
        #pragma omp parallel for schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; ++i) {
            const float s = pa[i] + pb[i];
            po[i] = s > 0.0f ? s : 0.0f;
        }
    }
    """
    if a.dtype != np.float32 or b.dtype != np.float32:
        raise TypeError(f"fused_add_relu needs float32 arrays, got {a.dtype} and {b.dtype}")
    if a.shape != b.shape:
        raise ValueError(f"fused_add_relu: shapes differ: {a.shape} and {b.shape}")
    ext = load_inline("fused_add_relu", source, functions=["add_relu"])
    out = np.empty(a.shape, np.float32)
    ext.add_relu(np.ascontiguousarray(a), np.ascontiguousarray(b), out)
    return out
    ### END SOLUTION
