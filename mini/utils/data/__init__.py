"""Datasets and loaders (``mini.utils.data``, as ``torch.utils.data``).

``Dataset`` (map-style: ``len`` and ``ds[i]``), ``TensorDataset``, ``random_split``,
``DataLoader`` (batching, seeded shuffling that a checkpoint can resume mid-epoch,
``drop_last``, ``collate_fn``, worker processes with prefetch), ``DistributedSampler`` (each
rank's share of an epoch) and, in
:mod:`mini.utils.data.datasets`, the embedded digits and an MNIST IDX reader.
"""
from mini.utils.data.dataset import Dataset, TensorDataset, Subset, random_split
from mini.utils.data.dataloader import DataLoader, default_collate
from mini.utils.data.distributed import DistributedSampler

__all__ = ["Dataset", "TensorDataset", "Subset", "random_split", "DataLoader", "default_collate",
           "DistributedSampler"]
