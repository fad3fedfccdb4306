"""Stand-ins for the chapter-03 exercises that let numpy do the work.

When a chapter before 03 is released, the student's copy of mini has the strides
exercises stubbed out; these opaque stand-ins keep views working meanwhile without
showing the exercise's answer.  They build a numpy view over a one-byte dummy buffer
(itemsize 1, so numpy's byte strides are our element strides) and read back what numpy
computed.  The dummy view's memory is never read.

The release of chapter 03 itself replaces every stand-in registered as a ``fallback=`` of
a chapter-03 slot by a stub (``grader.solutions.strip_package``): the chapter's own release
must not ship a working answer.  :func:`row_major` is not a stand-in: mini lays out its own
fresh arrays with it, in every release.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np


def _fake(shape, strides):
    return np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), shape=shape, strides=strides)


def _address(a) -> int:
    return a.__array_interface__["data"][0]


@lru_cache(maxsize=4096)
def row_major(shape):
    """Row-major strides of mini's own fresh buffers (cached; ``shape`` a tuple)."""
    if not shape:
        return ()
    sizes = [max(int(d), 1) for d in shape[1:]] + [1]  # a 0-length axis strides like length 1
    return tuple(int(s) for s in np.cumprod(sizes[::-1])[::-1])


def compact_strides(shape):
    return row_major(tuple(shape))


def element_offset(index, strides, offset):
    if len(index) != len(strides):
        raise ValueError(f"index {tuple(index)} has {len(index)} entries but the array has "
                         f"{len(strides)} dimensions")
    return int(offset + np.dot(np.asarray(index, dtype=np.int64), np.asarray(strides, dtype=np.int64)))


def slice_view(shape, strides, offset, key):
    base = _fake(shape, strides)
    key = key if isinstance(key, tuple) else (key,)
    if not any(k is Ellipsis for k in key):
        key = key + (Ellipsis,)  # so numpy returns a 0-d view, never a scalar copy
    view = base[key]
    return tuple(view.shape), tuple(int(s) for s in view.strides), offset + _address(view) - _address(base)


def permute(shape, strides, axes):
    try:
        view = np.transpose(_fake(shape, strides), axes)
    except (ValueError, np.exceptions.AxisError):
        raise ValueError(f"permute: axes {tuple(axes)} are not a permutation of the "
                         f"{len(shape)} dimensions of an array of shape {tuple(shape)}") from None
    return tuple(view.shape), tuple(int(s) for s in view.strides)


def broadcast_to(shape, strides, new_shape):
    try:
        view = np.broadcast_to(_fake(shape, strides), new_shape)
    except ValueError:
        raise ValueError(f"cannot broadcast shape {tuple(shape)} to {tuple(new_shape)}") from None
    return tuple(int(s) for s in view.strides)


def reshape_strides(shape, strides, new_shape):
    try:
        view = _fake(shape, strides).reshape(new_shape, copy=False)
    except ValueError:
        return None
    return tuple(int(s) for s in view.strides)


def compact(buffer, shape, strides, offset):
    item = buffer.itemsize
    view = np.lib.stride_tricks.as_strided(buffer[offset:], shape, tuple(s * item for s in strides))
    return np.ascontiguousarray(view).reshape(-1)
