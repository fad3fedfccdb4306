"""Datasets that need no network: scikit-learn's bundled digits, and a reader for MNIST
files in the IDX format that you already have on disk.

IDX format (big-endian): two zero bytes, a type byte (0x08 = uint8, 0x09 int8, 0x0B int16,
0x0C int32, 0x0D float32, 0x0E float64), the number of dimensions, then one uint32 per
dimension, then the data in row-major order.  MNIST images are ``[N, 28, 28]`` uint8
(magic 0x00000803), labels ``[N]`` uint8 (magic 0x00000801).  Files may be gzipped.
"""
from __future__ import annotations

import gzip
import os
import struct

import numpy as np

from mini.ndarray import NDArray
from mini.autograd.tensor import Tensor
from mini.utils.data.dataset import TensorDataset

__all__ = ["load_digits", "digits_split", "read_idx", "write_idx", "MNIST"]

_IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def _tensor(a: np.ndarray) -> Tensor:
    return Tensor._wrap(NDArray.from_numpy(np.asarray(a, order="C")))


def load_digits(as_image: bool = True, normalize: bool = True):
    """scikit-learn's 1,797 handwritten digits (8×8 pixels, values 0..16), bundled with
    scikit-learn, so nothing is downloaded.  Returns numpy arrays ``(X, y)``: X float32
    ``[1797, 1, 8, 8]`` (or ``[1797, 64]`` with ``as_image=False``) scaled to [0, 1] when
    ``normalize``, y int64 ``[1797]``."""
    try:
        from sklearn.datasets import load_digits as _sk_load
    except ImportError as e:  # pragma: no cover - sklearn is a dependency of the course
        raise ImportError("load_digits needs scikit-learn (pip install scikit-learn)") from e
    d = _sk_load()
    x = d.data.astype(np.float32)
    if normalize:
        x /= 16.0
    if as_image:
        x = x.reshape(-1, 1, 8, 8)
    return x, d.target.astype(np.int64)


def digits_split(test_fraction: float = 0.2, seed: int = 0, as_image: bool = True):
    """Digits split into train and test ``TensorDataset``s with a fixed permutation
    (stratification is not needed: the classes are balanced)."""
    x, y = load_digits(as_image=as_image)
    perm = np.random.default_rng(seed).permutation(len(y))
    n_test = int(round(len(y) * test_fraction))
    test, train = perm[:n_test], perm[n_test:]
    return (TensorDataset(_tensor(x[train]), _tensor(y[train])),
            TensorDataset(_tensor(x[test]), _tensor(y[test])))


def _open(path):
    path = os.fspath(path)
    with open(path, "rb") as f:
        head = f.read(2)
    return gzip.open(path, "rb") if head == b"\x1f\x8b" else open(path, "rb")


def read_idx(path) -> np.ndarray:
    """Read an IDX file (optionally gzipped) into a numpy array of its stored type."""
    with _open(path) as f:
        header = f.read(4)
        if len(header) != 4 or header[0] != 0 or header[1] != 0:
            raise ValueError(f"{os.fspath(path)} is not an IDX file (it must start with two zero "
                             f"bytes, a type byte and a dimension count)")
        kind, ndim = header[2], header[3]
        if kind not in _IDX_TYPES:
            raise ValueError(f"{os.fspath(path)}: unknown IDX data type 0x{kind:02x}")
        dims_raw = f.read(4 * ndim)
        if len(dims_raw) != 4 * ndim:
            raise ValueError(f"{os.fspath(path)}: truncated IDX header")
        dims = struct.unpack(f">{ndim}I", dims_raw)
        dtype = np.dtype(_IDX_TYPES[kind])
        count = int(np.prod(dims, dtype=np.int64)) if dims else 1
        data = f.read(count * dtype.itemsize)
        if len(data) != count * dtype.itemsize:
            raise ValueError(f"{os.fspath(path)}: expected {count * dtype.itemsize} bytes of data "
                             f"for shape {dims}, found {len(data)} (truncated file?)")
    return np.frombuffer(data, dtype=dtype).reshape(dims).astype(dtype.newbyteorder("="))


def write_idx(path, array: np.ndarray) -> None:
    """Write ``array`` as an IDX file (uint8, int8, int16, int32, float32 or float64)."""
    a = np.asarray(array)
    codes = {np.dtype(v).newbyteorder("="): k for k, v in _IDX_TYPES.items()}
    kind = codes.get(a.dtype.newbyteorder("="))
    if kind is None:
        raise ValueError(f"write_idx: dtype {a.dtype} has no IDX type code")
    with open(path, "wb") as f:
        f.write(bytes([0, 0, kind, a.ndim]))
        f.write(struct.pack(f">{a.ndim}I", *a.shape))
        f.write(a.astype(_IDX_TYPES[kind]).tobytes())


class MNIST(TensorDataset):
    """MNIST from IDX files in ``root`` (the standard names, gzipped or not); no download.

    Samples are ``(image [1, 28, 28] float32 in [0, 1], label int64)``."""

    FILES = {True: ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
             False: ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}

    def __init__(self, root, train: bool = True, download: bool = False):
        if download:
            raise RuntimeError("mini never downloads: put the MNIST IDX files in "
                               f"{os.fspath(root)} yourself")
        names = self.FILES[bool(train)]
        paths = []
        for name in names:
            for cand in (name, name + ".gz"):
                p = os.path.join(os.fspath(root), cand)
                if os.path.exists(p):
                    paths.append(p)
                    break
            else:
                raise FileNotFoundError(f"MNIST: {name}[.gz] not found in {os.fspath(root)}")
        images, labels = read_idx(paths[0]), read_idx(paths[1])
        if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
            raise ValueError(f"MNIST: images {images.shape} and labels {labels.shape} do not match")
        x = (images.astype(np.float32) / 255.0)[:, None]
        super().__init__(_tensor(x), _tensor(labels.astype(np.int64)))
