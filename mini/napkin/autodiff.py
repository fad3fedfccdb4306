"""Napkin math of chapter 02 (automatic differentiation): what reverse mode keeps in memory
for the backward pass, and what each mode of differentiation costs.

Saved tensors of an MLP, as mini records ``Linear -> ReLU -> ... -> Linear`` (no activation
after the last layer), counted per distinct buffer:

- each ``Linear`` is ``x @ W.T + b``: the matmul saves its input ``x`` (for W's gradient)
  and ``W`` (for x's gradient); the bias add saves nothing;
- each hidden ``ReLU`` saves its input (the pre-activation, to know where it was > 0), and
  the next matmul saves the ReLU's output, a second buffer of the same size.

So, with layer sizes ``n0, n1, ..., nL``, batch ``B`` and ``b`` bytes per element::

    saved = b * (B*n0  +  2*B*(n1 + ... + n_{L-1})  +  sum_i n_{i-1}*n_i)
               input      hidden activations          weights

    >>> mlp_saved_bytes((784, 128, 10), batch=1)
    410688

The weights are counted because the graph holds them, although they live anyway; the
activations are what backward adds, and they grow linearly with the batch.
"""
from __future__ import annotations

from typing import Sequence

__all__ = ["mlp_saved_breakdown", "mlp_saved_bytes", "activation_crossover_batch",
           "jacobian_bytes", "gradient_passes"]


def _sizes(layer_sizes: Sequence[int]) -> tuple:
    sizes = tuple(int(n) for n in layer_sizes)
    if len(sizes) < 2 or any(n <= 0 for n in sizes):
        raise ValueError(f"layer_sizes needs at least an input and an output size, all positive; "
                         f"got {tuple(layer_sizes)}")
    return sizes


def mlp_saved_breakdown(layer_sizes: Sequence[int], batch: int, dtype_bytes: int = 4) -> dict:
    """The model's count, by kind: ``{"input", "activations", "weights", "total"}`` in bytes.

    ``layer_sizes`` = (inputs, hidden..., outputs) of ``Linear -> ReLU -> ... -> Linear``.
    """
    sizes = _sizes(layer_sizes)
    batch, b = int(batch), int(dtype_bytes)
    if batch <= 0:
        raise ValueError(f"batch must be positive, got {batch}")
    inp = batch * sizes[0] * b
    acts = 2 * batch * sum(sizes[1:-1]) * b
    weights = sum(m * n for m, n in zip(sizes[:-1], sizes[1:])) * b
    return {"input": inp, "activations": acts, "weights": weights,
            "total": inp + acts + weights}


def mlp_saved_bytes(layer_sizes: Sequence[int], batch: int, dtype_bytes: int = 4) -> int:
    """Bytes of the buffers an MLP's graph keeps for backward (see the module docstring)."""
    return mlp_saved_breakdown(layer_sizes, batch, dtype_bytes)["total"]


def activation_crossover_batch(layer_sizes: Sequence[int]) -> float:
    """The batch size at which the saved activations (input included) weigh as much as the
    weights: below it the graph mostly holds weights, above it mostly activations."""
    sizes = _sizes(layer_sizes)
    per_sample = sizes[0] + 2 * sum(sizes[1:-1])
    weights = sum(m * n for m, n in zip(sizes[:-1], sizes[1:]))
    return weights / per_sample


def jacobian_bytes(n_inputs: int, n_outputs: int, dtype_bytes: int = 4) -> int:
    """Bytes of a dense Jacobian (n_outputs x n_inputs): why backward multiplies by it instead
    of building it.  ``jacobian_bytes(10**5, 10**5) == 40_000_000_000`` (40 GB)."""
    return int(n_inputs) * int(n_outputs) * int(dtype_bytes)


def gradient_passes(n_inputs: int, n_outputs: int, mode: str) -> int:
    """Passes needed for the full Jacobian: forward mode gives one column (a JVP) per pass,
    so ``n_inputs`` passes; reverse mode one row (a VJP) per pass, so ``n_outputs``."""
    if mode == "forward":
        return int(n_inputs)
    if mode == "reverse":
        return int(n_outputs)
    raise ValueError(f"mode must be 'forward' or 'reverse', got {mode!r}")
