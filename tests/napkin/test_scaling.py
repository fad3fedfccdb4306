"""The napkin models of chapter 06 against hand-computed numbers (seed digest §1 rows 12-13,
§5; the ZeRO paper's table)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from mini.napkin import scaling as S


def test_ring_time_and_bytes():
    # 16 MiB over 2 ranks at 1 GB/s and 10 µs per message: 2 messages of 8 MiB
    assert S.ring_allreduce_time(16 * 2**20, 2, 10e-6, 1e9) == pytest.approx(
        2 * 10e-6 + 16 * 2**20 / 1e9)
    assert S.ring_allreduce_time(123, 1, 1.0, 1.0) == 0
    # the bandwidth term tends to 2 N / beta as p grows: the ring is bandwidth-optimal
    assert S.ring_allreduce_time(1e9, 1024, 0, 1e9) == pytest.approx(2 * 1023 / 1024)
    assert S.ring_sent_bytes_per_rank(1000, 4, 4) == 2 * 3 / 4 * 1000 * 4


@given(st.integers(0, 500), st.integers(1, 8))
def test_ring_sent_elements_matches_the_schedule(n, p):
    sizes = S.ring_message_sizes(n, p)
    assert sum(sizes) == n and set(sizes) <= {n // p, math.ceil(n / p)}
    for r in range(p):
        sent = S.ring_sent_elements(n, p, r)
        if n % p == 0:
            assert sent == 2 * (p - 1) * n // p
        assert abs(sent - 2 * (p - 1) / p * n) <= 2


def test_fit_alpha_beta_recovers_a_synthetic_link():
    sizes = np.array([8, 1 << 10, 1 << 14, 1 << 18, 1 << 22], dtype=float)
    alpha, beta = 3e-6, 5e9
    times = alpha + sizes / beta
    a, b = S.fit_alpha_beta(sizes, times)
    assert a == pytest.approx(alpha, rel=1e-6) and b == pytest.approx(beta, rel=1e-6)
    with pytest.raises(ValueError, match="at least two"):
        S.fit_alpha_beta([1], [1.0])
    with pytest.raises(ValueError, match="do not grow"):
        S.fit_alpha_beta([1, 2, 3], [3.0, 2.0, 1.0])
    with pytest.raises(ValueError, match="positive"):
        S.fit_alpha_beta([1, 2], [1e-6, 0.0])


def test_fit_alpha_beta_takes_alpha_from_the_small_messages():
    """A busy machine delays a 16 MB message by 10 %: 0.9 ms, 45 times α.  A fit in plain
    seconds hands that jitter to α; the relative fit keeps α within 10 % of the truth."""
    sizes = np.array([8, 1 << 10, 1 << 14, 1 << 17, 1 << 20, 1 << 22, 1 << 24], dtype=float)
    alpha, beta = 20e-6, 2e9
    times = alpha + sizes / beta
    times[-1] *= 1.10
    a, b = S.fit_alpha_beta(sizes, times)
    assert a == pytest.approx(alpha, rel=0.1) and b == pytest.approx(beta, rel=0.1)
    (plain_alpha, _), *_ = np.linalg.lstsq(np.stack([np.ones_like(sizes), sizes], 1), times,
                                           rcond=None)
    assert abs(plain_alpha - alpha) > alpha          # what the relative weighting prevents


def test_memory_per_rank_fp32_adam_and_zero1():
    psi = 1_000_000
    ddp = S.ddp_memory_per_rank(psi)
    assert ddp == {"weights": 4 * psi, "gradients": 4 * psi, "optimizer": 8 * psi,
                   "total": 16 * psi}                  # the seed's 16 bytes per parameter
    z = S.zero_memory_per_rank(psi, 4, stage=1)
    assert z["total"] == 4 * psi + 4 * psi + 8 * psi / 4
    assert S.zero_memory_per_rank(psi, 1, stage=1)["total"] == ddp["total"]
    # ResNet-50 (seed row 13): 25.55 M parameters: 102.2 + 102.2 + 204.5 MB
    r50 = S.ddp_memory_per_rank(25_557_032)
    assert round(r50["weights"] / 1e6, 1) == 102.2 and round(r50["optimizer"] / 1e6, 1) == 204.5


def test_zero_paper_mixed_precision_numbers():
    psi, p = 7.5e9, 64                                  # the ZeRO paper's example, K = 12
    gb = [round(S.zero_memory_per_rank(psi, p, stage, mixed_precision=True)["total"] / 1e9, 1)
          for stage in (0, 1, 2, 3)]
    assert gb == [120.0, 31.4, 16.6, 1.9]
    with pytest.raises(ValueError, match="stages"):
        S.zero_memory_per_rank(psi, p, stage=4)


def test_pipeline_bubble_checkpoint_cost_stragglers():
    assert S.pipeline_bubble_fraction(4, 8) == pytest.approx(3 / 11)
    assert S.pipeline_bubble_fraction(1, 5) == 0
    c = S.checkpoint_cost(16, 4)
    assert c == {"peak_activations": 3 + 4, "recomputed_layers": 12, "extra_forward": 0.75}
    assert S.checkpoint_cost(16, 1)["peak_activations"] == 16
    best = min(range(1, 65), key=lambda s: S.checkpoint_cost(64, s)["peak_activations"])
    assert best == 8                                    # √64
    assert S.step_time_with_stragglers([1.0, 1.1, 2.5, 1.0]) == 2.5
    assert S.scaling_efficiency(t1=8.0, tp=2.5, p=4) == pytest.approx(0.8)
    assert S.is_communication_bound(compute_seconds=2.0, sync_seconds=1.0)
    assert not S.is_communication_bound(compute_seconds=3.5, sync_seconds=1.0)


def test_overlap_timeline():
    # two buckets of 1e6 bytes, 2 ranks, beta 1e9: 1 ms each; ready at 0.5 ms and 0.8 ms
    spans = S.overlap_timeline([0.5e-3, 0.8e-3], [1e6, 1e6], 2, 0.0, 1e9)
    assert spans == [pytest.approx((0.5e-3, 1.5e-3)), pytest.approx((1.5e-3, 2.5e-3))]


@pytest.mark.parametrize("p,m", [(1, 1), (2, 1), (4, 8), (3, 5)])
def test_pipeline_schedule_idles_the_bubble_fraction(p, m):
    grid = S.pipeline_schedule(p, m)
    assert len(grid) == p and all(len(row) == m + p - 1 for row in grid)
    for stage, row in enumerate(grid):
        assert [mb for mb in row if mb is not None] == list(range(m))   # each micro-batch once
        assert row.index(0) == stage                                     # in pipeline order
    idle = sum(mb is None for row in grid for mb in row) / (p * (m + p - 1))
    assert idle == pytest.approx(S.pipeline_bubble_fraction(p, m))


def test_bucket_timeline_from_a_recorded_backward():
    """Four parameters, their gradient hooks at 1, 2, 3 and 4 ms after backward began (last
    parameter first, as backward goes); 2 ranks, α = 0, β = 1 GB/s."""
    sizes = [4000, 4000, 4000, 4000]
    start = 100.0
    records = [{"op": "grad_ready", "start": start + (4 - i) * 1e-3, "info": {"param": i}}
               for i in (3, 2, 1, 0)]
    records.append({"op": "all_reduce", "start": start + 1e-3, "info": {}})   # ignored
    small = S.bucket_timeline(records, sizes, 8000, 2, 0.0, 1e9, start)
    assert small["buckets"] == [[3, 2], [1, 0]]
    assert small["ready"] == pytest.approx([2e-3, 4e-3])
    one = 8000 / 1e9                                       # 2(p-1)/p · N/β for p = 2
    assert small["spans"] == [pytest.approx((2e-3, 2e-3 + one)), pytest.approx((4e-3, 4e-3 + one))]
    assert small["exposed"] == pytest.approx(one) and small["backward_end"] == pytest.approx(4e-3)
    whole = S.bucket_timeline(records, sizes, 10**9, 2, 0.0, 1e9, start)
    assert whole["buckets"] == [[3, 2, 1, 0]]
    assert whole["exposed"] == pytest.approx(whole["serial"]) == pytest.approx(16000 / 1e9)
    with pytest.raises(ValueError, match="grad_ready markers for 3 parameters"):
        S.bucket_timeline(records[1:], sizes, 8000, 2, 0.0, 1e9, start)
