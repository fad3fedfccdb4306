"""Optimizers for distributed training (``torch.distributed.optim``):
``ZeroRedundancyOptimizer`` (ZeRO stage 1, optimizer state sharded over the ranks)."""
from mini.distributed.optim.zero_redundancy_optimizer import ZeroRedundancyOptimizer, zero_step

__all__ = ["ZeroRedundancyOptimizer", "zero_step"]
