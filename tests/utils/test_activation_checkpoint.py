"""Activation checkpointing (mini.utils.checkpoint): same gradients bit for bit, the same
random numbers, O(√N) peak activation memory for about one extra forward (counted, not
timed)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import mini
import mini.nn as nn
from mini import exercises
from mini.autograd import graph
from mini.napkin.scaling import checkpoint_cost, measure_activation_memory
from mini.utils.checkpoint import checkpoint, checkpoint_sequential


def _model(n_layers, width, dropout=0.1, seed=0):
    mini.manual_seed(seed)
    layers = []
    for _ in range(n_layers):
        layers += [nn.Linear(width, width), nn.Tanh()]
        if dropout:
            layers.append(nn.Dropout(dropout))
    return nn.Sequential(*layers)


def _run(n_layers, segments=None, width=8, batch=4, dropout=0.1, reentrant=False):
    """Forward, backward; returns the gradients, the input's gradient and the next random
    number drawn after backward (the stream must continue as without checkpointing)."""
    model = _model(n_layers, width, dropout)
    x = mini.tensor(np.random.default_rng(0).standard_normal((batch, width)).astype(np.float32),
                    requires_grad=True)
    mini.manual_seed(123)
    out = checkpoint_sequential(model, segments, x, use_reentrant=reentrant) if segments \
        else model(x)
    out.pow(2).mean().backward()
    after = mini.rand(3).numpy().copy()
    return [p.grad.numpy().copy() for p in model.parameters()], x.grad.numpy().copy(), after


@pytest.mark.parametrize("segments", [1, 2, 3, 5])
@pytest.mark.parametrize("reentrant", [False, True])
def test_gradients_are_bit_identical_with_dropout(segments, reentrant):
    g0, x0, after0 = _run(6)
    g1, x1, after1 = _run(6, segments, reentrant=reentrant)
    for a, b in zip(g0, g1, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(x0, x1)
    np.testing.assert_array_equal(after0, after1)     # the random stream goes on unchanged


def test_dropping_the_rng_state_changes_the_gradients():
    """The check above can fail: a backward that recomputes with fresh random numbers draws
    other dropout masks (a catalogued mistake of the chapter)."""
    reference = exercises.reference("06.checkpoint_backward")

    @exercises.implement("06.checkpoint_backward")
    def forgetful(ctx, grad_output):
        ctx.rng_state = None
        return reference(ctx, grad_output)

    try:
        g0, _, _ = _run(6)
        g1, _, _ = _run(6, 3)
    finally:
        exercises.unregister("06.checkpoint_backward")
    assert any(not np.array_equal(a, b) for a, b in zip(g0, g1, strict=True))


def test_checkpoint_of_one_function_matches_plain_autograd():
    mini.manual_seed(0)
    w = mini.randn(5, 5, requires_grad=True)
    x = mini.randn(3, 5, requires_grad=True)

    def block(t):
        return (t @ w).tanh() @ w

    block(x).sum().backward()
    gw, gx = w.grad.numpy().copy(), x.grad.numpy().copy()
    w.grad = x.grad = None
    y = checkpoint(block, x, use_reentrant=False)
    assert y.grad_fn.name() == "CheckpointBackward"
    assert graph.saved_tensor_bytes(y) == x.nbytes    # only the input is kept
    y.sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), gw)
    np.testing.assert_array_equal(x.grad.numpy(), gx)


def test_parameters_get_gradients_when_the_input_does_not_require_grad():
    mini.manual_seed(0)
    layer = nn.Linear(4, 4)
    x = mini.randn(2, 4)                       # data: no grad
    checkpoint(layer, x, use_reentrant=False).sum().backward()
    assert layer.weight.grad is not None and layer.bias.grad is not None


def test_in_place_change_of_an_input_is_caught():
    x = mini.randn(3, requires_grad=True)
    h = x * 2
    y = checkpoint(lambda t: t.exp(), h, use_reentrant=False)
    with mini.no_grad():
        h.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_clear_errors():
    with pytest.raises(TypeError, match="one Tensor"):
        checkpoint(lambda t: (t, t), mini.randn(2, requires_grad=True))
    with pytest.raises(ValueError, match="cannot cut 3 layers into 4 segments"):
        checkpoint_sequential(_model(1, 2), 4, mini.randn(1, 2))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        checkpoint(lambda t: t * 2, mini.randn(2))
    assert any("None of the inputs have requires_grad=True" in str(w.message) for w in caught)


def _measure(n_layers, segments, width=16, batch=2048):
    # narrow and tall: one activation (128 KiB) is 128 weights' worth, so activations, not
    # parameters or their gradients, are what the peak measures
    model = _model(n_layers, width, dropout=0.0)
    x = mini.tensor(np.random.default_rng(0).standard_normal((batch, width)).astype(np.float32))

    def step():
        out = checkpoint_sequential(model, segments, x, use_reentrant=False) if segments \
            else model(x)
        out.pow(2).mean().backward()

    return measure_activation_memory(step)


def test_recompute_costs_about_one_extra_forward_counted_in_ops():
    """16 blocks (Linear + Tanh) in 4 segments: the first 3 segments, 12 blocks, run twice:
    every forward operation of those blocks is counted twice by the profiler."""
    n, s = 16, 4
    plain, ckpt = _measure(n, None), _measure(n, s)
    cost = checkpoint_cost(n, s)
    assert cost["recomputed_layers"] == 12 and cost["extra_forward"] == 0.75
    for name in ("Permute", "MatMul", "Add", "Tanh"):         # the ops of the blocks
        once = plain["forward_ops"][name]
        assert once == n
        assert ckpt["forward_ops"][name] == once + cost["recomputed_layers"], name


def test_peak_activation_memory_goes_from_linear_to_square_root():
    """Peak bytes (tracemalloc) for N = 16 and 64 blocks: 4× the blocks is about 4× the
    memory without checkpointing and about 2× (= √4) with √N segments.  The differences
    between the two sizes cancel what does not grow with N (input, output, loss), and match
    the napkin model in units of one activation."""
    act = 2048 * 16 * 4                               # one activation: 128 KiB
    plain16, plain64 = _measure(16, None), _measure(64, None)
    ckpt16, ckpt64 = _measure(16, 4), _measure(64, 8)
    growth_plain = plain64["peak_bytes"] / plain16["peak_bytes"]
    growth_ckpt = ckpt64["peak_bytes"] / ckpt16["peak_bytes"]
    assert 3.0 < growth_plain < 4.2, growth_plain
    assert 1.4 < growth_ckpt < 2.3, growth_ckpt
    assert ckpt64["peak_bytes"] < plain64["peak_bytes"] / 2.5
    # every block keeps one activation (Tanh's output is the next Linear's saved input)
    plain_units = (plain64["peak_bytes"] - plain16["peak_bytes"]) / act
    assert abs(plain_units - (64 - 16)) < 4, plain_units
    model = checkpoint_cost(64, 8)["peak_activations"] - checkpoint_cost(16, 4)["peak_activations"]
    ckpt_units = (ckpt64["peak_bytes"] - ckpt16["peak_bytes"]) / act
    assert model == 8 and abs(ckpt_units - model) < 3, ckpt_units
