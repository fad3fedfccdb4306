"""Shape, strides and offset: the arithmetic of a strided array.

An array is a flat buffer plus ``shape``, ``strides`` and ``offset``.  Element
``(i0, i1, ...)`` lives at ``buffer[offset + i0*strides[0] + i1*strides[1] + ...]``.
Strides count elements, not bytes (as ``torch.Tensor.stride()`` does).

Every function here is pure: it takes and returns plain Python ints and tuples
(and, for :func:`compact`, numpy arrays), so a view changes metadata only.
These are the exercises of chapter 03; each reference sits in a solution region.
"""
from __future__ import annotations

import numpy as np

from mini.exercises import exercise
from mini.ndarray import _numpy_fallbacks as _fallback

Shape = tuple[int, ...]
Strides = tuple[int, ...]


@exercise("03.compact_strides", fallback=_fallback.compact_strides)
def compact_strides(shape: Shape) -> Strides:
    """Row-major (C-order) strides, in elements, for an array of ``shape``.

    The last axis has stride 1; each axis before it steps over one whole row of
    the axes after it.  ``compact_strides((2, 3)) == (3, 1)``; ``compact_strides(()) == ()``.
    Size-0 dimensions are treated as size 1 so strides stay positive (PyTorch does the same).
    """
    ### BEGIN SOLUTION
    strides = []
    step = 1
    for dim in reversed(shape):
        strides.append(step)
        step *= max(dim, 1)
    return tuple(reversed(strides))
    ### END SOLUTION


@exercise("03.offset", fallback=_fallback.element_offset)
def element_offset(index: tuple[int, ...], strides: Strides, offset: int) -> int:
    """Position in the flat buffer of the element at ``index`` (non-negative ints).

    ``offset + sum(i * s for i, s in zip(index, strides))``.  Raises ``ValueError`` when
    ``index`` and ``strides`` have different lengths.
    """
    ### BEGIN SOLUTION
    if len(index) != len(strides):
        raise ValueError(f"index {tuple(index)} has {len(index)} entries but the array "
                         f"has {len(strides)} dimensions")
    position = offset
    for i, s in zip(index, strides):
        position += i * s
    return position
    ### END SOLUTION


@exercise("03.slice_view", fallback=_fallback.slice_view)
def slice_view(shape: Shape, strides: Strides, offset: int, key) -> tuple[Shape, Strides, int]:
    """Metadata of ``a[key]`` for basic indexing; no data moves.

    ``key`` is an int, a slice, ``None``, ``Ellipsis`` or a tuple of those.
    An int picks one position and drops its axis (negative ints count from the
    end); a slice keeps the axis with length ``len(range(start, stop, step))`` and
    stride ``stride * step``; ``None`` inserts an axis of length 1 (its stride is 0);
    ``...`` stands for as many full slices as needed.  Axes not named are kept whole.
    Returns ``(new_shape, new_strides, new_offset)``.

    Raises ``IndexError`` for an int out of range, too many indices, or more than
    one ellipsis, and ``ValueError`` for a slice step of 0.
    """
    ### BEGIN SOLUTION
    if not isinstance(key, tuple):
        key = (key,)
    n_ellipsis = sum(1 for k in key if k is Ellipsis)
    if n_ellipsis > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    n_axes_used = sum(1 for k in key if k is not None and k is not Ellipsis)
    if n_axes_used > len(shape):
        raise IndexError(f"too many indices for array: array is {len(shape)}-dimensional, "
                         f"but {n_axes_used} were indexed")
    if n_ellipsis == 0:
        key = key + (Ellipsis,)
    # Expand the ellipsis into full slices for the axes nobody named.
    expanded = []
    for k in key:
        if k is Ellipsis:
            expanded.extend([slice(None)] * (len(shape) - n_axes_used))
        else:
            expanded.append(k)

    new_shape, new_strides = [], []
    axis = 0
    for k in expanded:
        if k is None:
            new_shape.append(1)
            new_strides.append(0)
            continue
        dim, stride = shape[axis], strides[axis]
        if isinstance(k, slice):
            if k.step == 0:
                raise ValueError("slice step cannot be zero")
            start, stop, step = k.indices(dim)
            new_shape.append(len(range(start, stop, step)))
            new_strides.append(stride * step)
            if len(range(start, stop, step)) > 0:
                offset += start * stride
        else:
            i = int(k)
            if not -dim <= i < dim:
                raise IndexError(f"index {i} is out of bounds for axis {axis} with size {dim}")
            if i < 0:
                i += dim
            offset += i * stride
        axis += 1
    return tuple(new_shape), tuple(new_strides), offset
    ### END SOLUTION


@exercise("03.permute", fallback=_fallback.permute)
def permute(shape: Shape, strides: Strides, axes: tuple[int, ...]) -> tuple[Shape, Strides]:
    """Reorder the axes: new axis ``i`` is old axis ``axes[i]``.

    ``axes`` must be a permutation of ``range(len(shape))`` (negative entries count
    from the end); anything else raises ``ValueError`` naming ``axes`` and the rank.
    """
    ### BEGIN SOLUTION
    ndim = len(shape)
    normalized = [a + ndim if a < 0 else a for a in axes]
    if sorted(normalized) != list(range(ndim)):
        raise ValueError(f"permute: axes {tuple(axes)} are not a permutation of the "
                         f"{ndim} dimensions of an array of shape {tuple(shape)}")
    return tuple(shape[a] for a in normalized), tuple(strides[a] for a in normalized)
    ### END SOLUTION


@exercise("03.broadcast_to", fallback=_fallback.broadcast_to)
def broadcast_to(shape: Shape, strides: Strides, new_shape: Shape) -> Strides:
    """Strides that make an array of ``shape`` look like ``new_shape`` without copying.

    Align the shapes at the right; new leading axes, and axes of length 1 that grow,
    get stride 0 (every index reads the same element).  Axes must otherwise match;
    raises ``ValueError`` naming both shapes when they cannot be broadcast.
    """
    ### BEGIN SOLUTION
    if len(new_shape) < len(shape):
        raise ValueError(f"cannot broadcast shape {tuple(shape)} to {tuple(new_shape)}: "
                         f"the target has fewer dimensions")
    lead = len(new_shape) - len(shape)
    out = [0] * lead
    for dim, stride, target in zip(shape, strides, new_shape[lead:]):
        if dim == target:
            out.append(stride)
        elif dim == 1:
            out.append(0)
        else:
            raise ValueError(f"cannot broadcast shape {tuple(shape)} to {tuple(new_shape)}: "
                             f"dimension of size {dim} does not match {target}")
    return tuple(out)
    ### END SOLUTION


@exercise("03.reshape", fallback=_fallback.reshape_strides)
def reshape_strides(shape: Shape, strides: Strides, new_shape: Shape) -> Strides | None:
    """Strides that show an array of ``shape``/``strides`` as ``new_shape`` without
    copying, or ``None`` when no such strides exist (the caller then copies).

    ``new_shape`` has no ``-1`` and the same number of elements.  The data may be
    reinterpreted as long as each group of old axes that merges into, or splits
    from, new axes is contiguous in memory: within a group, ``stride[i] ==
    stride[i+1] * shape[i+1]``.  Axes of length 1 never constrain anything.
    """
    ### BEGIN SOLUTION
    size = 1
    for d in shape:
        size *= d
    if size == 0 or size == 1:
        return compact_strides(new_shape)
    # Work on the axes that matter: length-1 axes can take any stride.
    old = [(d, s) for d, s in zip(shape, strides) if d != 1]
    new_strides = [0] * len(new_shape)
    oi, ni = 0, 0
    while oi < len(old) and ni < len(new_shape):
        if new_shape[ni] == 1:
            new_strides[ni] = 0
            ni += 1
            continue
        # Grow a group of old axes and a group of new axes until their sizes agree.
        o_start, n_start = oi, ni
        o_size, n_size = old[oi][0], new_shape[ni]
        oi += 1
        ni += 1
        while o_size != n_size:
            if o_size < n_size:
                o_size *= old[oi][0]
                oi += 1
            else:
                n_size *= new_shape[ni]
                ni += 1
        # The old group must be one contiguous run of memory.
        for k in range(o_start, oi - 1):
            if old[k][1] != old[k + 1][1] * old[k + 1][0]:
                return None
        # Lay the new group out inside that run, innermost first.
        step = old[oi - 1][1]
        for k in range(ni - 1, n_start - 1, -1):
            new_strides[k] = step
            step *= new_shape[k]
    for k in range(ni, len(new_shape)):  # trailing length-1 axes
        new_strides[k] = 0
    return tuple(new_strides)
    ### END SOLUTION


@exercise("03.compact", fallback=_fallback.compact)
def compact(buffer: np.ndarray, shape: Shape, strides: Strides, offset: int) -> np.ndarray:
    """Copy the elements of a strided view into a new flat, row-major buffer.

    ``buffer`` is the 1-D numpy array that owns the data.  Returns a new 1-D array
    of the same dtype whose element ``k`` is the ``k``-th element of the view in
    row-major order.  Vectorize: build the buffer positions of every element with
    numpy index arithmetic (no Python loop over elements), then gather them.
    """
    ### BEGIN SOLUTION
    positions = np.full((1,) * len(shape), offset, dtype=np.int64)
    for axis, (dim, stride) in enumerate(zip(shape, strides)):
        along = np.arange(dim, dtype=np.int64) * stride
        positions = positions + along.reshape((1,) * axis + (dim,) + (1,) * (len(shape) - axis - 1))
    return buffer[positions.reshape(-1)]
    ### END SOLUTION


def row_major_strides(shape: Shape) -> Strides:
    """Row-major strides for mini's own fresh buffers: trusted and cached, so that creating
    an array never depends on a student's (possibly unfinished) ``compact_strides``."""
    return _fallback.row_major(tuple(shape))


def is_compact(shape: Shape, strides: Strides) -> bool:
    """True when the layout is row-major contiguous (length-1 axes may have any stride)."""
    if 0 in shape:
        return True  # nothing to lay out
    expected = 1
    for dim, stride in zip(reversed(shape), reversed(strides)):
        if dim != 1 and stride != expected:
            return False
        expected *= dim
    return True


def infer_shape(new_shape, size: int, old_shape: Shape) -> Shape:
    """Resolve one ``-1`` in a reshape target and check the element count."""
    new_shape = tuple(int(d) for d in new_shape)
    unknown = [i for i, d in enumerate(new_shape) if d == -1]
    if len(unknown) > 1:
        raise ValueError(f"reshape: only one dimension can be -1, got {new_shape}")
    if any(d < -1 for d in new_shape):
        raise ValueError(f"reshape: invalid shape {new_shape}")
    known = 1
    for d in new_shape:
        if d != -1:
            known *= d
    if unknown:
        if known == 0 or size % known:
            raise ValueError(f"shape {new_shape} is invalid for input of size {size} "
                             f"(shape {tuple(old_shape)})")
        i = unknown[0]
        new_shape = new_shape[:i] + (size // known,) + new_shape[i + 1:]
    elif known != size:
        raise ValueError(f"shape {new_shape} is invalid for input of size {size} "
                         f"(shape {tuple(old_shape)})")
    return new_shape


def broadcast_shapes(*shapes: Shape) -> Shape:
    """The shape that all ``shapes`` broadcast to (numpy's rules), or ``ValueError``."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(ndim):
        dims = {s[axis - ndim + len(s)] for s in shapes if axis - ndim + len(s) >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise ValueError("shapes " + " and ".join(str(tuple(s)) for s in shapes)
                             + " cannot be broadcast together")
        out.append(dims.pop() if dims else 1)
    return tuple(out)
