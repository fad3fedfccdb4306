"""The training-memory and optimizer-traffic models of chapter 05, as plain functions.

Training memory (float32, per the seed chapter): ``M = W + G + Opt + Act``.

- ``W`` weights and ``G`` gradients: 4 bytes per parameter each;
- ``Opt`` optimizer state: SGD without momentum 0, with momentum 4, Adam/AdamW 8 bytes per
  parameter (the two moments);
- ``Act`` activations saved for backward: ``batch × values saved per sample × 4`` bytes.

So Adam training holds 16 bytes per parameter before activations, and one Adam step moves 28
bytes per parameter (reads weight, gradient, m, v; writes weight, m, v).

    >>> training_memory(101_770, batch=32, saved_per_sample=784 + 2 * 128 + 3 * 10)["total"]
    1765280
    >>> adam_step_bytes(101_770)
    2849560
"""
from __future__ import annotations

__all__ = ["OPTIMIZER_STATE_BYTES", "training_memory", "adam_step_bytes", "mlp_saved_per_sample"]

#: Optimizer state in bytes per float32 parameter.
OPTIMIZER_STATE_BYTES = {"sgd": 0, "sgd_momentum": 4, "adam": 8, "adamw": 8}


def training_memory(n_params: int, *, optimizer: str = "adam", batch: int = 1,
                    saved_per_sample: int = 0, itemsize: int = 4) -> dict[str, int]:
    """Bytes held while training: ``{"weights", "gradients", "optimizer", "activations",
    "total"}``."""
    key = optimizer.lower()
    if key not in OPTIMIZER_STATE_BYTES:
        raise ValueError(f"unknown optimizer {optimizer!r}; one of {sorted(OPTIMIZER_STATE_BYTES)}")
    scale = itemsize / 4
    out = {"weights": n_params * itemsize, "gradients": n_params * itemsize,
           "optimizer": int(n_params * OPTIMIZER_STATE_BYTES[key] * scale),
           "activations": batch * saved_per_sample * itemsize}
    out["total"] = sum(out.values())
    return out


def adam_step_bytes(n_params: int, itemsize: int = 4) -> int:
    """Bytes one Adam(W) step reads and writes: 7 arrays of the parameters' size."""
    return 7 * itemsize * n_params


def mlp_saved_per_sample(sizes) -> int:
    """Values per sample that a Linear/ReLU MLP with cross-entropy saves for backward: the
    input of each Linear, each hidden pre-activation (for ReLU), and three of the logits'
    size for the loss (shifted logits, exp, one-hot mask)."""
    sizes = list(sizes)
    hidden = sizes[1:-1]
    return sizes[0] + 2 * sum(hidden) + 3 * sizes[-1]
