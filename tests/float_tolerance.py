"""How far apart two correct floating-point computations of the same values may be.

Two paths that compute the same sums in a different order (a fused kernel against the
composed ops, mini's C++ kernels against numpy, one BLAS kernel against another: OpenBLAS
picks Haswell, SkylakeX, Zen or Prescott code by CPU, and each blocks its sums its own way)
round differently, so their results differ in the last bits.  Tests compare such results
with a tolerance, never bit for bit.

The tolerance follows from the dtype and the reduction length K (the number of terms summed
into one output element).  Each addition rounds with a relative error of at most eps/2
(``np.finfo(dtype).eps``); for terms of mixed sign these errors are independent and add
like a random walk, so the error of a K-term sum grows like ``sqrt(K) * eps`` times the
magnitude of the terms (the worst case, ``K * eps``, needs every rounding to go the same
way).  ``scale`` is that magnitude: by default the largest ``|want|``; pass a better one
(for example ``(|a| @ |b|).max()``) where the sum cancels.  ``safety`` covers both paths'
errors and the tail of the distribution over many output elements.

Bit-identical comparisons stay only where the computation is literally the same: the
same operations in the same order (a resumed run against one that never stopped, a second
call with the same inputs and thread count, elementwise operations that IEEE 754 rounds
exactly once).
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["rounding_atol", "assert_close_to_rounding"]


def rounding_atol(dtype, k: int, scale: float = 1.0, safety: float = 4.0) -> float:
    """Absolute tolerance for two K-term sums in ``dtype`` computed in different orders:
    ``safety * eps(dtype) * sqrt(K) * scale``."""
    eps = float(np.finfo(np.dtype(dtype)).eps)
    return safety * eps * math.sqrt(max(int(k), 1)) * float(scale)


def assert_close_to_rounding(got, want, dtype, k: int, scale: float | None = None,
                             safety: float = 4.0, err_msg: str = "") -> None:
    """Assert ``got`` equals ``want`` up to the rounding of K-term sums in ``dtype``
    (see :func:`rounding_atol`); ``scale`` defaults to ``max(1, max|want|)``.  NaNs and
    infinities must sit at the same places."""
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    if scale is None:
        finite = np.abs(want[np.isfinite(want)])
        scale = max(1.0, float(finite.max())) if finite.size else 1.0
    atol = rounding_atol(dtype, k, scale, safety)
    np.testing.assert_allclose(
        got, want, rtol=0, atol=atol,
        err_msg=f"{err_msg} (tolerance {atol:.3g}: {safety:g}·eps({np.dtype(dtype).name})"
                f"·sqrt(K={k})·scale {scale:.3g})".strip())
