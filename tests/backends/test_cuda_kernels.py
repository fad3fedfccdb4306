"""The reference CUDA kernels of chapter 04 on the emulator: they agree with numpy, the
sanitizer finds nothing in them under several schedules, and the emulator's counters
match the napkin formulas the chapter teaches:

- naive matmul reads 2·M·N·K floats from global memory, the tiled one 2·M·N·K/T;
- a warp reading 32 neighbouring floats touches 4 sectors of 32 bytes; walking a
  column (32 floats ``rows`` apart) touches 32;
- the padded shared tile of the transpose has no bank conflicts.
"""
from __future__ import annotations

import numpy as np
import pytest

from grader.mistakes.cuda_kernels import SCENARIOS, launcher, load_module, run
from mini.backends.cuda import kernels
from mini.backends.cuda.emulator import check
from cuda_helpers import emulated, requires_posix

pytestmark = requires_posix


@pytest.fixture(scope="module")
def mod():
    with emulated():
        return load_module()       # the references and the catalogue: one build


def _close(got, want, reduction_length):
    # float32 sums of `reduction_length` terms in another order than numpy's
    tol = 1e-6 * max(1, reduction_length) * max(1.0, float(np.abs(want).max(initial=0)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=tol)


@pytest.mark.parametrize("n", [1, 37, 1000])
@pytest.mark.parametrize("blocks,threads", [(1, 32), (2, 64), (64, 64)])
def test_add_covers_any_size_with_any_grid(mod, n, blocks, threads):
    rng = np.random.default_rng(n)
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    with check(schedules=3) as r, kernels.DeviceSession(mod) as s:
        A, B, O = s.to_device(a), s.to_device(b), s.empty(n)
        assert launcher(mod, "add")(A, B, O, n, blocks, threads) == 0
        np.testing.assert_array_equal(s.to_host(O), a + b)       # one addition: exact
    assert r.ok, r


@pytest.mark.parametrize("exercise", ["block_sum_shared", "block_sum_shuffle"])
@pytest.mark.parametrize("n,blocks", [(1, 1), (37, 2), (1000, 8), (5000, 3)])
def test_block_sums(mod, exercise, n, blocks):
    outcome, r = run(exercise, mod, seed=n, n=n, blocks=blocks)
    _close(outcome.got, outcome.expected, n)
    assert r.ok, r


@pytest.mark.parametrize("exercise", ["matmul_naive", "matmul_tiled"])
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (37, 19, 41), (17, 33, 16), (64, 48, 80)])
def test_matmuls_agree_with_numpy_for_sizes_that_are_not_tile_multiples(mod, exercise, m, n, k):
    outcome, r = run(exercise, mod, seed=m * n * k, m=m, n=n, kk=k)
    _close(outcome.got, outcome.expected, k)
    assert r.ok, r


@pytest.mark.parametrize("exercise", ["transpose_naive", "transpose_tiled"])
@pytest.mark.parametrize("rows,cols", [(1, 1), (37, 70), (64, 96), (33, 1)])
def test_transposes(mod, exercise, rows, cols):
    outcome, r = run(exercise, mod, rows=rows, cols=cols)
    np.testing.assert_array_equal(outcome.got, outcome.expected)
    assert r.ok, r


@pytest.mark.parametrize("m,n,k", [(64, 64, 64), (32, 48, 96)])
def test_tiling_divides_global_reads_by_the_tile_width(mod, m, n, k):
    naive, rn = run("matmul_naive", mod, m=m, n=n, kk=k, schedules=1)
    tiled, rt = run("matmul_tiled", mod, m=m, n=n, kk=k, schedules=1)
    cn, ct = rn.counters("matmul_naive"), rt.counters("matmul_tiled")
    assert cn["global_loads"] == 2 * m * n * k
    assert ct["global_loads"] == 2 * m * n * k // 16
    assert cn["global_stores"] == ct["global_stores"] == m * n
    assert cn["global_load_bytes"] == 4 * cn["global_loads"]
    # every element of a tile is read from shared memory TILE times per step
    assert ct["shared_loads"] == 2 * m * n * k and ct["shared_stores"] == 2 * m * n * k // 16


def test_row_walk_is_coalesced_and_column_walk_is_not(mod):
    rows, cols = 64, 96
    _, rn = run("transpose_naive", mod, rows=rows, cols=cols, schedules=1)
    _, rt = run("transpose_tiled", mod, rows=rows, cols=cols, schedules=1)
    cn, ct = rn.counters("transpose_naive"), rt.counters("transpose_tiled")
    # warps of 32 threads along a row: 32 floats x 4 bytes = 128 bytes = 4 sectors
    assert cn["sectors_per_load_request"] == 4.0
    # the naive kernel writes down a column: each lane's float is in its own sector
    assert cn["sectors_per_store_request"] == 32.0
    assert cn["global_load_requests"] == cn["global_store_requests"] == rows * cols // 32
    # through the tile both directions walk rows
    assert ct["sectors_per_load_request"] == ct["sectors_per_store_request"] == 4.0
    assert ct["shared_bank_conflicts"] == 0
    assert ct["global_loads"] == ct["global_stores"] == rows * cols


def test_reductions_count_what_they_read(mod):
    n, blocks = 4096, 4
    _, r = run("block_sum_shuffle", mod, n=n, blocks=blocks, schedules=1)
    c = r.counters("block_sum_shuffle")
    assert c["global_loads"] == n + blocks               # the data, then the partial sums
    assert c["global_stores"] == blocks + 1
    assert c["sectors_per_load_request"] <= 4.0
    # 5 shuffle steps per warp-wide sum, twice in the first warp of a block
    warps = blocks * 256 // 32 + 256 // 32
    assert c["warp_ops"] == 5 * (warps + blocks + 1)


def test_every_exercise_has_a_scenario_and_a_reference(mod):
    assert set(SCENARIOS) == set(kernels.EXERCISES)
    for exercise in kernels.EXERCISES:
        assert callable(launcher(mod, exercise))
