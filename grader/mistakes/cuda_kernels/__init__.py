"""The catalogue of typical CUDA mistakes: wrong kernels for the chapter 04 exercises.

Each ``.cu`` file here is a plausible wrong answer to one exercise of chapter 04's CUDA part
(same kernel name and signature as the reference in its slot, so the exercise's host launcher
runs it).  :data:`CUDA_MISTAKES` says, for each, how it is caught:

- a sanitizer report of a given ``kind`` (race, out_of_bounds, uninitialized_read,
  barrier_divergence, shuffle_mask) whose quoted source line contains ``line_has``;
- ``wrong_result``: the output differs from numpy's (``diagnose`` names the mistake);
- a counter: ``uncoalesced`` (sectors per global request far above the reference's) or
  ``bank_conflicts`` (shared-memory bank conflicts where the reference has none).

:func:`run` runs an exercise's scenario (inputs from a seeded generator, the launcher,
the numpy answer) for the reference or a mistake; the tests in
``tests/backends/test_cuda_catalogue.py`` prove every entry is caught, and the chapter's
checks grade with the same scenarios.  These files sit in ``grader``, not in ``mini``:
they would show students how close to an answer each mistake is.

:func:`slot_variant` turns a mistake into a wrong *exercise function*: mini's reference of
the slot with the kernel part of its CUDA source replaced.  The chapter's catalogue
(``grader/mistakes/ch04_cuda.py``) grades those with the hidden checks.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import types

import numpy as np

__all__ = ["CudaMistake", "CUDA_MISTAKES", "MISTAKE_DIR", "mistake_source", "SCENARIOS", "run",
           "Outcome", "diagnose", "load_module", "launcher", "slot_variant"]

MISTAKE_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class CudaMistake:
    id: str            # the .cu file name without extension
    exercise: str      # the kernel file it replaces (mini/backends/cuda/kernels/<exercise>.cu)
    name: str          # the mistake, as a grader names it
    detect: str        # a report kind, or wrong_result / uncoalesced / bank_conflicts
    line_has: str      # a substring of the source line the report points at ("" if none)
    hint: str          # what to tell the student
    diagnosis: str = ""  # wrong_result: a substring of what diagnose() says


CUDA_MISTAKES = [
    CudaMistake("add_no_bounds_check", "add", "missing bounds check", "out_of_bounds",
                "out[i] = a[i] + b[i]",
                "threads past the end of the data read and write out of bounds: check i < n"),
    CudaMistake("add_wrong_stride", "add", "grid-stride loop steps by the block, not the grid",
                "race", "out[i] = a[i] + b[i]",
                "blocks write the same elements: the stride of a grid-stride loop is "
                "blockDim.x * gridDim.x"),
    CudaMistake("add_uncoalesced", "add", "uncoalesced layout (a chunk per thread)", "uncoalesced",
                "", "neighbouring threads should touch neighbouring elements (thread i takes "
                    "element i, then i + stride): the warp then reads 4 sectors, not 32"),
    CudaMistake("add_no_grid_stride", "add", "no grid-stride loop", "uninitialized_read", "",
                "with fewer threads than elements each thread must handle several: loop with "
                "i += blockDim.x * gridDim.x"),
    CudaMistake("matmul_naive_row_col_swap", "matmul_naive", "row/column swap", "wrong_result", "",
                "the result is A^T @ B: A[row][k] is A[row * K + k] in a row-major array",
                "swapped"),
    CudaMistake("matmul_tiled_no_edge_padding", "matmul_tiled", "missing bounds check on the tile loads",
                "out_of_bounds", "As[ty][tx] = A[row * K + t * TILE + tx]",
                "a tile that hangs over the edge of A or B must be padded with zeros, not read"),
    CudaMistake("matmul_tiled_drops_partial_k_tile", "matmul_tiled", "last partial tile along K left out",
                "wrong_result", "",
                "loop over (K + TILE - 1) / TILE tiles; the last one is partial", "partial tile"),
    CudaMistake("matmul_tiled_no_second_barrier", "matmul_tiled",
                "missing barrier before reusing a tile", "race", "As[ty][tx]",
                "a thread overwrites the tile while others still read it: __syncthreads() "
                "after the multiplication, before the next tile is loaded"),
    CudaMistake("matmul_tiled_no_first_barrier", "matmul_tiled",
                "missing barrier after loading a tile", "race", "acc += As[ty][k] * Bs[k][tx]",
                "threads read tile elements others have not loaded yet: __syncthreads() "
                "between loading the tiles and using them"),
    CudaMistake("block_sum_barrier_in_branch", "block_sum_shared", "barrier inside a divergent branch",
                "barrier_divergence", "__syncthreads()",
                "__syncthreads() inside `if (tid < s)` is not reached by every thread: move it "
                "after the if"),
    CudaMistake("block_sum_early_return", "block_sum_shared", "return before a barrier",
                "barrier_divergence", "__syncthreads()",
                "threads that return early never reach the barrier: guard the work, not the "
                "barrier"),
    CudaMistake("block_sum_tile_too_small", "block_sum_shared", "shared tile too small",
                "out_of_bounds", "buf[tid] = v",
                "the __shared__ array needs one slot per thread of the block"),
    CudaMistake("block_sum_uninitialized_shared", "block_sum_shared", "uninitialised shared read",
                "uninitialized_read", "buf[tid] += buf[tid + s]",
                "threads without an element must still write their slot (0 for a sum)"),
    CudaMistake("block_sum_output_race", "block_sum_shared", "write-write race on an output",
                "race", "partial[0] = buf[0]",
                "every block writes the same output element: write partial[blockIdx.x]"),
    CudaMistake("block_sum_atomic_after_plain_write", "block_sum_shared",
                "atomic mixed with a plain write", "race", "",
                "a plain store and atomicAdd on the same address race: initialise before the "
                "launch (cudaMemset) or separate them with __syncthreads()"),
    CudaMistake("block_sum_shuffle_partial_mask", "block_sum_shuffle", "shuffle with a partial mask",
                "shuffle_mask", "__shfl_down_sync",
                "every lane that executes __shfl_down_sync must be in its mask: 0xffffffff for "
                "a full warp"),
    CudaMistake("transpose_tiled_no_padding", "transpose_tiled", "bank conflicts in a shared tile",
                "bank_conflicts", "",
                "a column of a 32-float-wide tile lies in one bank: pad each row to 33 floats"),
    CudaMistake("transpose_tiled_uncoalesced", "transpose_tiled", "uncoalesced layout (writes down a column)",
                "uncoalesced", "",
                "read a tile along rows into shared memory and write its columns as rows"),
]


def mistake_source(m: CudaMistake | str) -> str:
    mid = m.id if isinstance(m, CudaMistake) else m
    return (MISTAKE_DIR / f"{mid}.cu").read_text()


def load_module(variants=None, sanitize: bool = True):
    """One module with the reference of every exercise and every catalogued mistake
    (or the ``variants`` given: (tag, exercise, kernel source or None)).  A variant's
    launcher is ``launch_<exercise>__<tag>``; the references' tag is ``ref``."""
    from mini.backends.cuda import kernels
    if variants is None:
        variants = [("ref", ex, None) for ex in SCENARIOS]
        variants += [(m.id, m.exercise, mistake_source(m)) for m in CUDA_MISTAKES]
    return kernels.load_variants(variants, sanitize=sanitize, name="cuda_catalogue")


def launcher(module, exercise: str, tag: str = "ref"):
    return getattr(module, f"launch_{exercise}__{tag}")


# --------------------------------------------------------------------- scenarios

@dataclass
class Outcome:
    got: np.ndarray
    expected: np.ndarray
    inputs: tuple
    error: str          # the launcher's CUDA error name ("cudaSuccess")


def _add(launch, k, s, rng, n=1000, threads=64, small_grid=2):
    # twice: a grid that covers the data (threads past the end must do nothing), and a
    # grid smaller than the data (the grid-stride loop must do the rest)
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    A, B, O1, O2 = s.to_device(a), s.to_device(b), s.empty(n), s.empty(n)
    code = launch(A, B, O1, n, (n + threads - 1) // threads, threads)
    code = code or launch(A, B, O2, n, small_grid, threads)
    got = np.concatenate([s.to_host(O1), s.to_host(O2)])
    return Outcome(got, np.concatenate([a + b, a + b]), (a, b), k.error_name(code))


def _matmul(launch, k, s, rng, m=37, n=37, kk=37):
    a = rng.standard_normal((m, kk)).astype(np.float32)
    b = rng.standard_normal((kk, n)).astype(np.float32)
    A, B, C = s.to_device(a), s.to_device(b), s.empty((m, n))
    code = launch(A, B, C, m, n, kk)
    return Outcome(s.to_host(C), a @ b, (a, b), k.error_name(code))


def _block_sum(launch, k, s, rng, n=1000, blocks=8):
    x = rng.standard_normal(n).astype(np.float32)
    X, P, T = s.to_device(x), s.empty(blocks), s.empty(1)
    code = launch(X, P, T, n, blocks)
    return Outcome(s.to_host(T), np.array([x.sum(dtype=np.float64)], np.float32), (x,), k.error_name(code))


def _transpose(launch, k, s, rng, rows=70, cols=96):
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    X, Y = s.to_device(x), s.empty((cols, rows))
    code = launch(X, Y, rows, cols)
    return Outcome(s.to_host(Y), np.ascontiguousarray(x.T), (x,), k.error_name(code))


#: exercise -> scenario(launcher, module, session, rng, **sizes) -> Outcome
SCENARIOS = {
    "add": _add,
    "matmul_naive": _matmul,
    "matmul_tiled": _matmul,
    "block_sum_shared": _block_sum,
    "block_sum_shuffle": _block_sum,
    "transpose_naive": _transpose,
    "transpose_tiled": _transpose,
}


def run(exercise: str, module, tag: str = "ref", seed: int = 0, schedules=3, **sizes):
    """Run ``exercise``'s scenario with the variant ``tag`` of ``module`` (see
    :func:`load_module`) under the emulator's checks.  Returns (Outcome, KernelCheck)."""
    from mini.backends.cuda import emulator, kernels
    rng = np.random.default_rng(seed)
    with emulator.check(schedules=schedules) as run_, kernels.DeviceSession(module) as s:
        outcome = SCENARIOS[exercise](launcher(module, exercise, tag), module, s, rng, **sizes)
    return outcome, run_


def diagnose(exercise: str, outcome: Outcome) -> str:
    """A message naming what is wrong with a result that differs from numpy's ("" if
    nothing can be said with confidence)."""
    got, want = outcome.got, outcome.expected
    if got.shape != want.shape:
        return f"the output has shape {got.shape}, expected {want.shape}"
    if exercise.startswith("matmul"):
        a, b = outcome.inputs
        if a.shape[0] == a.shape[1] and np.allclose(got, a.T @ b, rtol=1e-4, atol=1e-4):
            return "the result is A^T @ B: rows and columns of A are swapped (A[row][k] is A[row * K + k])"
        if np.allclose(got, (a @ b).T, rtol=1e-4, atol=1e-4):
            return "the result is (A @ B)^T: rows and columns of C are swapped"
    if exercise.startswith("matmul"):
        a, b = outcome.inputs
        k = a.shape[1]
        whole = k // 16 * 16
        if k % 16 and np.allclose(got, a[:, :whole] @ b[:whole], rtol=1e-4, atol=1e-4):
            return "the last partial tile along K is left out: loop over (K + TILE - 1) / TILE tiles"
    if exercise.startswith("transpose") and np.array_equal(got.reshape(want.T.shape), want.T):
        return "the output is the input, not its transpose"
    if np.isnan(got).any() and not np.isnan(want).any():
        return "the output has NaN where the answer has none: uninitialised memory was read"
    return ""


# --------------------------------------------------------------------- wrong slot functions

def slot_variant(exercise: str, kernel_source: str, name: str | None = None):
    """mini's reference function of ``exercise``'s slot (``kernels.SLOTS``) with the kernel
    part of its CUDA source replaced by ``kernel_source`` (the launcher and the Python around
    it unchanged): the function a student with that kernel would have written."""
    from mini.backends.cuda import kernels
    from mini.exercises import reference
    ref = reference(kernels.SLOTS[exercise])
    code = ref.__code__
    old = [c for c in code.co_consts if isinstance(c, str) and kernels.MARKER in c]
    if len(old) != 1:
        raise ValueError(f"the reference of {kernels.SLOTS[exercise]} holds no CUDA source")
    kernel = kernels.split(kernel_source)[0] if kernels.MARKER in kernel_source else kernel_source
    new = kernel.rstrip() + "\n\n" + kernels.split(old[0])[1]
    consts = tuple(new if c is old[0] else c for c in code.co_consts)
    fn = types.FunctionType(code.replace(co_consts=consts), ref.__globals__, name or ref.__name__,
                            ref.__defaults__, ref.__closure__)
    fn.__kwdefaults__ = ref.__kwdefaults__
    fn.__doc__ = f"{ref.__name__} with the kernel of a catalogued mistake"
    return fn
