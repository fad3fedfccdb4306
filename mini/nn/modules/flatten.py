"""Flatten: merge a range of dimensions into one."""
from __future__ import annotations

from mini.autograd.tensor import Tensor
from mini.nn.module import Module


class Flatten(Module):
    """Flatten dims ``start_dim..end_dim`` (by default everything but the batch dimension)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def forward(self, input: Tensor) -> Tensor:
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"
