"""Data parallelism across processes (``torch.nn.parallel``): ``DistributedDataParallel``."""
from mini.nn.parallel.distributed import DistributedDataParallel, GradBucket

__all__ = ["DistributedDataParallel", "GradBucket"]
