"""Typical wrong answers to chapter 04's CUDA exercises (cuda.ipynb), as exercise functions.

Each is mini's reference of the slot with the kernel of one entry of the CUDA catalogue
(``grader/mistakes/cuda_kernels``: the wrong kernels, and how the emulator catches each)
in place of the right one, built by :func:`~grader.mistakes.cuda_kernels.slot_variant`.
The checks of :mod:`grader.checks.ch04_cuda` must fail every one with a message that names
the mistake (``expect_message``).
"""
from __future__ import annotations

from grader.mistakes import Mistake
from grader.mistakes.cuda_kernels import CUDA_MISTAKES, mistake_source, slot_variant

#: catalogue id -> what the check's message must say
EXPECT = {
    "add_no_bounds_check": "missing bounds check",
    "add_wrong_stride": "blockDim.x * gridDim.x",
    "add_uncoalesced": "uncoalesced layout",
    "add_no_grid_stride": "grid-stride loop",
    "matmul_naive_row_col_swap": "row/column swap",
    "matmul_tiled_no_second_barrier": "missing barrier before reusing a tile",
    "matmul_tiled_no_first_barrier": "missing barrier after loading a tile",
    "matmul_tiled_no_edge_padding": "missing bounds check",
    "matmul_tiled_drops_partial_k_tile": "partial tile along K",
    "block_sum_barrier_in_branch": "barrier inside a divergent branch",
    "block_sum_early_return": "return before a barrier",
    "block_sum_tile_too_small": "shared tile too small",
    "block_sum_uninitialized_shared": "uninitialised shared read",
    "block_sum_output_race": "write-write race on an output",
    "block_sum_atomic_after_plain_write": "atomic mixed with a plain write",
    "block_sum_shuffle_partial_mask": "shuffle with a partial mask",
    "transpose_tiled_no_padding": "bank conflicts",
    "transpose_tiled_uncoalesced": "uncoalesced layout",
}


def _mistakes() -> list[Mistake]:
    from mini.backends.cuda import kernels
    out = []
    for m in CUDA_MISTAKES:
        fn = slot_variant(m.exercise, mistake_source(m), name=f"{m.id}")
        out.append(Mistake(kernels.SLOTS[m.exercise], m.name, fn, EXPECT[m.id]))
    return out


MISTAKES = _mistakes()
