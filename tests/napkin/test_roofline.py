"""The seed's roofline, dispatch and fusion numbers, reproduced exactly by mini.napkin."""
from __future__ import annotations

import math

import pytest

from mini.napkin import measure, roofline as R


def test_first_layer_gemm_of_the_mlp():
    assert R.gemm_flops(32, 784, 128) == 6_422_528
    assert R.gemm_bytes(32, 784, 128) == 518_144
    assert round(R.gemm_intensity(32, 784, 128), 1) == 12.4


def test_mlp_table_matches_the_seed():
    table = {o.name: o for o in R.mlp_step_table()}
    assert table["x@W1"].flops == 6_422_528 and table["x@W1"].bytes == 518_144
    assert table["ReLU"].intensity == 0.125
    assert table["ReLU"].flops == 4096 and table["ReLU"].bytes == 32_768
    assert round(table["h@W2"].intensity, 1) == 3.6
    assert table["cross-entropy"].intensity == 0.375
    tot = R.table_totals(R.mlp_step_table())
    assert round(tot["flops"] / 1e6, 1) == 13.1
    assert round(tot["bytes"] / 1e6, 1) == 1.2
    assert round(tot["step_over_forward"], 3) == 2.013


def test_ridge_point_and_relu_distance():
    ridge = R.ridge_point(R.H100_PEAK_FLOPS, R.H100_BANDWIDTH)
    assert ridge == pytest.approx(20.0)
    assert ridge / 0.125 == pytest.approx(160.0)
    assert R.bound(0.125, R.H100_PEAK_FLOPS, R.H100_BANDWIDTH) == "memory"
    assert R.bound(25.0, R.H100_PEAK_FLOPS, R.H100_BANDWIDTH) == "compute"
    assert R.attainable(0.125, 100.0, 10.0) == 1.25
    assert R.attainable(1e3, 100.0, 10.0) == 100.0
    assert R.predicted_time(100, 10, 100.0, 10.0) == 1.0


def test_dispatch_law():
    assert round(R.op_overhead_share(1e-6), 2) == 0.94
    assert round(R.op_overhead_share(100e-6), 2) == 0.13
    r = R.dispatch_ratio(6, 15e-6, 2.6e-6)
    assert round(r, 1) == 34.6
    assert round(R.max_speedup(r), 1) == 35.6
    assert round(R.dispatch_share(r), 2) == 0.97
    assert round(R.dispatch_ratio(12, 15e-6, 100e-3), 4) == 0.0018
    assert R.dispatch_share(1.0) == 0.5
    with pytest.raises(ValueError):
        R.dispatch_ratio(1, 1e-6, 0.0)


def test_fusion_traffic():
    n, b = 1000, 4
    assert R.chain_bytes(n, 2, b) == 4 * n * b        # add + relu unfused
    assert R.chain_bytes(n, 2, b, fused=True) == 2 * n * b
    assert R.chain_bytes(n, 3, b) / R.chain_bytes(n, 3, b, fused=True) == 3
    assert R.add_relu_bytes(n, b) == 5 * n * b
    assert R.add_relu_bytes(n, b, fused=True) == 3 * n * b


def test_bad_inputs_raise():
    with pytest.raises(ValueError):
        R.intensity(1, 0)
    with pytest.raises(ValueError):
        R.ridge_point(1.0, 0.0)


def test_measurements_are_positive_and_bounded():
    bw = measure.copy_bandwidth(4 * 2**20, repeats=2)
    assert 1e8 < bw < 1e13
    rate = measure.gemm_rate(128, repeats=2)
    assert 1e7 < rate < 1e14
    td = measure.dispatch_time(calls=50, repeats=1)
    assert 0 < td < 1e-2
    with pytest.raises(ValueError):
        measure.dispatch_time(op="nope", calls=1)


def test_roofline_plot_places_every_op():
    import matplotlib
    matplotlib.use("Agg")
    table = R.mlp_step_table()
    ax = measure.roofline_plot(table, peak_flops=1e11, bandwidth=1e10,
                               measured={"x@W1": 5e10})
    names = {t.get_text() for t in ax.texts}
    assert {"x@W1", "ReLU", "h@W2", "cross-entropy"} <= names
    assert any(math.isclose(line.get_xdata()[0], 12.395, rel_tol=1e-3)
               for line in ax.get_lines() if len(line.get_xdata()) == 1)
