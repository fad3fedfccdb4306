"""Map-style datasets."""
from __future__ import annotations

import numpy as np

from mini.autograd.tensor import Tensor

__all__ = ["Dataset", "TensorDataset", "Subset", "random_split"]


class Dataset:
    """A map-style dataset: ``len(ds)`` samples, ``ds[i]`` is one sample."""

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} must implement __getitem__")

    def __len__(self):
        raise NotImplementedError(f"{type(self).__name__} must implement __len__")


class TensorDataset(Dataset):
    """Samples are rows: ``ds[i] == tuple(t[i] for t in tensors)``.  All tensors must have
    the same first dimension."""

    def __init__(self, *tensors: Tensor):
        if not tensors:
            raise ValueError("TensorDataset needs at least one tensor")
        n = tensors[0].shape[0]
        for i, t in enumerate(tensors):
            if t.shape[0] != n:
                raise ValueError(f"Size mismatch between tensors: tensor 0 has {n} rows, "
                                 f"tensor {i} has {t.shape[0]} (shape {tuple(t.shape)})")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __getitems__(self, indices):
        """A whole batch at once, already collated: one gather per tensor instead of one
        small tensor per sample (what the DataLoader uses when collate_fn is the default)."""
        idx = np.asarray(indices, dtype=np.int64)
        return _Batched(tuple(_gather(t, idx) for t in self.tensors))

    def __len__(self):
        return self.tensors[0].shape[0]


def _gather(t: Tensor, idx: np.ndarray) -> np.ndarray:
    return t.detach().numpy()[idx]


class _Batched(tuple):
    """Marks samples that ``__getitems__`` already stacked into arrays."""


class Subset(Dataset):
    def __init__(self, dataset, indices):
        self.dataset, self.indices = dataset, list(indices)

    def __getitem__(self, i):
        return self.dataset[self.indices[i]]

    def __len__(self):
        return len(self.indices)


def random_split(dataset, lengths, generator=None):
    """Split into non-overlapping subsets of the given lengths (or fractions summing to 1).
    ``generator`` is a seed (int) or a numpy Generator; default: mini's global stream."""
    n = len(dataset)
    if all(0 <= f <= 1 for f in lengths) and abs(sum(lengths) - 1) < 1e-9 and sum(lengths) != n:
        sizes = [int(np.floor(n * f)) for f in lengths]
        for i in range(n - sum(sizes)):
            sizes[i % len(sizes)] += 1
        lengths = sizes
    if sum(lengths) != n:
        raise ValueError(f"Sum of input lengths ({sum(lengths)}) does not equal the length of "
                         f"the input dataset ({n})")
    if generator is None:
        from mini import random as _random
        gen = _random.generator()
    elif isinstance(generator, np.random.Generator):
        gen = generator
    else:
        gen = np.random.default_rng(int(generator))
    perm = gen.permutation(n).tolist()
    out, start = [], 0
    for k in lengths:
        out.append(Subset(dataset, perm[start:start + k]))
        start += k
    return out
