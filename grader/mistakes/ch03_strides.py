"""Typical wrong implementations of the chapter 03 exercises (strides).

Each one is a plausible student answer that passes a casual test or two; the checks of
:mod:`grader.checks.ch03_strides` must fail it with a message that names the mistake.
"""
from __future__ import annotations

import numpy as np

from grader.mistakes import Mistake


# --------------------------------------------------------------------- 03.compact_strides

def strides_column_major(shape):
    """Walks the axes from the first: the first axis gets stride 1 (Fortran order)."""
    strides, step = [], 1
    for dim in shape:
        strides.append(step)
        step *= max(dim, 1)
    return tuple(strides)


def strides_in_bytes(shape):
    """Multiplies by the item size (float32): numpy's byte strides, not mini's element strides."""
    strides, step = [], 4
    for dim in reversed(shape):
        strides.append(step)
        step *= max(dim, 1)
    return tuple(reversed(strides))


def strides_zero_length_axis(shape):
    """Multiplies by the raw length, so a size-0 axis zeroes the strides before it."""
    strides, step = [], 1
    for dim in reversed(shape):
        strides.append(step)
        step *= dim
    return tuple(reversed(strides))


def strides_include_own_axis(shape):
    """Multiplies before appending: each stride includes its own axis's length."""
    strides, step = [], 1
    for dim in reversed(shape):
        step *= max(dim, 1)
        strides.append(step)
    return tuple(reversed(strides))


# --------------------------------------------------------------------- 03.offset

def offset_forgets_base(index, strides, offset):
    """Sums index * stride but forgets where the view starts."""
    if len(index) != len(strides):
        raise ValueError("index and strides have different lengths")
    return sum(i * s for i, s in zip(index, strides))


def offset_no_length_check(index, strides, offset):
    """Right formula, but zip silently ignores a length mismatch."""
    return offset + sum(i * s for i, s in zip(index, strides))


# --------------------------------------------------------------------- 03.slice_view

def _slice_view(shape, strides, offset, key, *, use_step=True, length="range", wrap=True,
                check_range=True, bounds=None):
    """The reference's rule, with switches for the mistakes below; ``bounds(k, dim)``
    replaces ``slice.indices`` when given."""
    if not isinstance(key, tuple):
        key = (key,)
    if sum(1 for k in key if k is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis")
    used = sum(1 for k in key if k is not None and k is not Ellipsis)
    if used > len(shape):
        raise IndexError("too many indices")
    if Ellipsis not in key:
        key = key + (Ellipsis,)
    expanded = []
    for k in key:
        if k is Ellipsis:
            expanded.extend([slice(None)] * (len(shape) - used))
        else:
            expanded.append(k)
    new_shape, new_strides, axis = [], [], 0
    for k in expanded:
        if k is None:
            new_shape.append(1)
            new_strides.append(0)
            continue
        dim, stride = shape[axis], strides[axis]
        if isinstance(k, slice):
            if k.step == 0:
                raise ValueError("slice step cannot be zero")
            start, stop, step = k.indices(dim) if bounds is None else bounds(k, dim)
            n = len(range(start, stop, step)) if length == "range" else max(stop - start, 0)
            new_shape.append(n)
            new_strides.append(stride * step if use_step else stride)
            if n > 0:
                offset += start * stride
        else:
            i = int(k)
            if check_range and not -dim <= i < dim:
                raise IndexError(f"index {i} is out of bounds for axis {axis} with size {dim}")
            if wrap and i < 0:
                i += dim
            offset += i * stride
        axis += 1
    return tuple(new_shape), tuple(new_strides), offset


def slice_ignores_step(shape, strides, offset, key):
    """Keeps the old stride for a slice with a step."""
    return _slice_view(shape, strides, offset, key, use_step=False)


def slice_length_stop_minus_start(shape, strides, offset, key):
    """Computes the length of a slice as stop - start, whatever the step."""
    return _slice_view(shape, strides, offset, key, length="stop-start")


def slice_negative_index_not_wrapped(shape, strides, offset, key):
    """Uses a negative int index as is (a position before the start of the axis)."""
    return _slice_view(shape, strides, offset, key, wrap=False)


def slice_no_bounds_check(shape, strides, offset, key):
    """Never raises IndexError for an int out of range (reads someone else's memory)."""
    return _slice_view(shape, strides, offset, key, check_range=False)


# --------------------------------------------------------------------- 03.permute

def permute_strides_only(shape, strides, axes):
    """Reorders the strides and forgets the shape."""
    ndim = len(shape)
    axes = [a + ndim if a < 0 else a for a in axes]
    if sorted(axes) != list(range(ndim)):
        raise ValueError("not a permutation")
    return tuple(shape), tuple(strides[a] for a in axes)


def permute_inverse(shape, strides, axes):
    """Scatters instead of gathering: new_shape[axes[i]] = shape[i]."""
    ndim = len(shape)
    axes = [a + ndim if a < 0 else a for a in axes]
    if sorted(axes) != list(range(ndim)):
        raise ValueError("not a permutation")
    new_shape, new_strides = [0] * ndim, [0] * ndim
    for i, a in enumerate(axes):
        new_shape[a] = shape[i]
        new_strides[a] = strides[i]
    return tuple(new_shape), tuple(new_strides)


# --------------------------------------------------------------------- 03.broadcast_to

def broadcast_stride_one(shape, strides, new_shape):
    """Gives broadcast axes stride 1 instead of 0 (walks memory instead of repeating)."""
    if len(new_shape) < len(shape):
        raise ValueError("target has fewer dimensions")
    lead = len(new_shape) - len(shape)
    out = [1] * lead
    for dim, stride, target in zip(shape, strides, new_shape[lead:]):
        if dim == target:
            out.append(stride)
        elif dim == 1:
            out.append(1)
        else:
            raise ValueError(f"cannot broadcast {shape} to {new_shape}")
    return tuple(out)


def broadcast_left_aligned(shape, strides, new_shape):
    """Pairs the axes from the left and pads new axes at the end."""
    if len(new_shape) < len(shape):
        raise ValueError("target has fewer dimensions")
    out = []
    for i, target in enumerate(new_shape):
        if i >= len(shape):
            out.append(0)
        elif shape[i] == target:
            out.append(strides[i])
        elif shape[i] == 1:
            out.append(0)
        else:
            raise ValueError(f"cannot broadcast {shape} to {new_shape}")
    return tuple(out)


# --------------------------------------------------------------------- 03.reshape

def _compact(shape):
    out, step = [], 1
    for d in reversed(shape):
        out.append(step)
        step *= max(d, 1)
    return tuple(reversed(out))


def _is_row_major(shape, strides):
    expected = 1
    for d, s in zip(reversed(shape), reversed(strides)):
        if d != 1 and s != expected:
            return False
        expected *= d
    return True


def reshape_always_compact(shape, strides, new_shape):
    """Returns compact strides whatever the layout: never copies, reads wrong elements."""
    return _compact(new_shape)


def reshape_copy_unless_contiguous(shape, strides, new_shape):
    """Returns None whenever the input is not row-major contiguous: correct values, but
    copies views that did not need copying (x.T.reshape(2, 2, 3), x[:, ::2].reshape(...))."""
    if _is_row_major(shape, strides) or 0 in shape:
        return _compact(new_shape)
    return None


# --------------------------------------------------------------------- 03.compact

def _positions(shape, strides, offset):
    pos = np.full((1,) * len(shape), offset, dtype=np.int64)
    for axis, (d, s) in enumerate(zip(shape, strides)):
        along = np.arange(d, dtype=np.int64) * s
        pos = pos + along.reshape((1,) * axis + (d,) + (1,) * (len(shape) - axis - 1))
    return pos.reshape(-1)


def compact_ignores_offset(buffer, shape, strides, offset):
    """Gathers from position 0: fine for arrays that start the buffer, wrong for slices."""
    return buffer[_positions(shape, strides, 0)]


def compact_buffer_order(buffer, shape, strides, offset):
    """Gathers the right elements in memory order (sorted positions), not in view order."""
    return buffer[np.sort(_positions(shape, strides, offset))]


def compact_contiguous_run(buffer, shape, strides, offset):
    """Copies numel consecutive elements from the offset, ignoring the strides."""
    n = int(np.prod(shape))
    return buffer[offset:offset + n].copy()


def compact_returns_view(buffer, shape, strides, offset):
    """Returns a numpy view of the buffer instead of a copy."""
    view = np.lib.stride_tricks.as_strided(buffer[offset:], shape,
                                           tuple(s * buffer.itemsize for s in strides))
    if view.flags.c_contiguous:
        return view.reshape(-1)
    return view.copy().reshape(-1)


# --------------------------------------------------------------------- quizzes

def quiz_bytes_zero():
    """Believes every reshape of a view is a view."""
    return 0


def quiz_bytes_elements():
    """Counts elements instead of bytes."""
    return 1_000_000


def quiz_views_copy():
    """Believes a transpose copies."""
    return "A"


# --------------------------------------------------------------------- new in the quality pass
# (drawn from edge inputs, layouts, errors and side effects; see grader/checks/inventory/ch03.md)

def strides_not_reversed(shape):
    """Builds the strides from the last axis and forgets to reverse the list."""
    strides, step = [], 1
    for dim in reversed(shape):
        strides.append(step)
        step *= max(dim, 1)
    return tuple(strides)


def offset_numpy_dot(index, strides, offset):
    """np.dot does the sum: a numpy integer (a float 0.0 for a 0-d index), not a Python int."""
    if len(index) != len(strides):
        raise ValueError("index and strides have different lengths")
    return offset + np.dot(index, strides)


def offset_strides_reversed(index, strides, offset):
    """Pairs the first index with the last stride."""
    if len(index) != len(strides):
        raise ValueError("index and strides have different lengths")
    return offset + sum(i * s for i, s in zip(index, reversed(strides)))


def _positive_defaults(k, dim):
    """start, stop, step with the defaults of a positive step written by hand."""
    step = 1 if k.step is None else k.step
    if step == 0:
        raise ValueError("slice step cannot be zero")
    start, stop, _ = slice(k.start, k.stop, step).indices(dim)
    if k.start is None:
        start = 0
    if k.stop is None:
        stop = dim
    return start, stop, step


def slice_positive_step_defaults(shape, strides, offset, key):
    """Fills an omitted start with 0 and an omitted stop with the length, whatever the step
    (so a[::-1] comes out empty)."""
    return _slice_view(shape, strides, offset, key, bounds=_positive_defaults)


def slice_none_counts_as_index(shape, strides, offset, key):
    """Counts None among the indices, so a[None, 1, None] of a 2-d array is 'too many'."""
    items = key if isinstance(key, tuple) else (key,)
    if sum(1 for k in items if k is not Ellipsis) > len(shape):
        raise IndexError("too many indices")
    return _slice_view(shape, strides, offset, key)


def slice_unnamed_axes_dropped(shape, strides, offset, key):
    """Walks only the key's items: the axes the key does not name disappear."""
    if not isinstance(key, tuple):
        key = (key,)
    if Ellipsis in key:
        return _slice_view(shape, strides, offset, key)
    named = sum(1 for k in key if k is not None)
    if named > len(shape):
        raise IndexError("too many indices")
    full_shape, full_strides, off = _slice_view(shape, strides, offset, key)
    # the result of the named axes only: drop the trailing axes nobody named
    kept = sum(1 for k in key if k is None or isinstance(k, slice))
    return full_shape[:kept], full_strides[:kept], off


def permute_rejects_negative_axes(shape, strides, axes):
    """Validates before normalizing: (-1, -2) is refused as 'not a permutation'."""
    if sorted(axes) != list(range(len(shape))):
        raise ValueError(f"axes {axes} are not a permutation")
    return tuple(shape[a] for a in axes), tuple(strides[a] for a in axes)


def permute_checks_only_length(shape, strides, axes):
    """Checks the number of axes only: (0, 0) passes and duplicates axis 0."""
    ndim = len(shape)
    if len(axes) != ndim or any(not -ndim <= a < ndim for a in axes):
        raise ValueError(f"axes {axes} do not fit a {ndim}-d array")
    axes = [a % ndim for a in axes]
    return tuple(shape[a] for a in axes), tuple(strides[a] for a in axes)


def broadcast_one_to_zero_raises(shape, strides, new_shape):
    """Lets a length-1 axis grow only to a positive length."""
    if len(new_shape) < len(shape):
        raise ValueError("target has fewer dimensions")
    lead = len(new_shape) - len(shape)
    out = [0] * lead
    for dim, stride, target in zip(shape, strides, new_shape[lead:]):
        if dim == target:
            out.append(stride)
        elif dim == 1 and target >= 1:
            out.append(0)
        else:
            raise ValueError(f"cannot broadcast {shape} to {new_shape}")
    return tuple(out)


def broadcast_zip_from_the_right(shape, strides, new_shape):
    """Pairs the axes from the right with zip over reversed tuples: right alignment, but
    zip silently stops at the shorter shape, so a target with fewer axes is accepted."""
    out = []
    for dim, stride, target in zip(reversed(shape), reversed(strides), reversed(new_shape)):
        if dim == target:
            out.append(stride)
        elif dim == 1:
            out.append(0)
        else:
            raise ValueError(f"cannot broadcast {shape} to {new_shape}")
    out += [0] * (len(new_shape) - len(out))
    return tuple(reversed(out))


def broadcast_error_names_no_shape(shape, strides, new_shape):
    """Right strides, but its ValueError says only 'cannot broadcast'."""
    from mini.exercises import reference
    try:
        return reference("03.broadcast_to")(shape, strides, new_shape)
    except ValueError:
        raise ValueError("cannot broadcast") from None


def permute_error_names_nothing(shape, strides, axes):
    """Right result, but its ValueError says only 'invalid axes'."""
    ndim = len(shape)
    normalized = [a + ndim if a < 0 else a for a in axes]
    if sorted(normalized) != list(range(ndim)):
        raise ValueError("invalid axes")
    return tuple(shape[a] for a in normalized), tuple(strides[a] for a in normalized)


def _reshape_groups(shape, strides, new_shape, *, drop_ones=True, inner_stride="inner",
                    small_arrays=True):
    """The reference's grouping rule, with switches for the mistakes below."""
    size = 1
    for d in shape:
        size *= d
    if small_arrays and size in (0, 1):
        return _compact(new_shape)
    old = [(d, s) for d, s in zip(shape, strides) if d != 1 or not drop_ones]
    new_strides = [0] * len(new_shape)
    oi, ni = 0, 0
    while oi < len(old) and ni < len(new_shape):
        if new_shape[ni] == 1:
            ni += 1
            continue
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
        for k in range(o_start, oi - 1):
            if old[k][1] != old[k + 1][1] * old[k + 1][0]:
                return None
        step = old[oi - 1][1] if inner_stride == "inner" else old[o_start][1]
        for k in range(ni - 1, n_start - 1, -1):
            new_strides[k] = step
            step *= new_shape[k]
    return tuple(new_strides)


def reshape_outer_stride(shape, strides, new_shape):
    """Lays a merged group out from its OUTERMOST old stride: merging (3, 4) into (12,)
    gives stride 4."""
    return _reshape_groups(shape, strides, new_shape, inner_stride="outer")


def reshape_length_one_axes_count(shape, strides, new_shape):
    """Keeps length-1 axes in the groups, so their (meaningless) strides can refuse a view."""
    return _reshape_groups(shape, strides, new_shape, drop_ones=False)


def reshape_no_empty_case(shape, strides, new_shape):
    """No special case for arrays of 0 elements: the grouping runs off the end of the shapes."""
    return _reshape_groups(shape, strides, new_shape, small_arrays=False)


def compact_in_place(buffer, shape, strides, offset):
    """Compacts in place, moving the view's elements to the front of the buffer (as a C
    programmer might), then returns a copy: every other view of the buffer is now wrong."""
    pos = _positions(shape, strides, offset)
    n = pos.size
    buffer[:n] = buffer[pos]
    return buffer[:n].copy()


def compact_list_of_elements(buffer, shape, strides, offset):
    """Gathers element by element into a list and converts it with np.array: an empty view
    comes back as float64, whatever the buffer's dtype."""
    return np.array([buffer[p] for p in _positions(shape, strides, offset).tolist()])


def compact_keeps_view_shape(buffer, shape, strides, offset):
    """Gathers with positions in the view's shape and forgets to flatten the result."""
    return buffer[_positions(shape, strides, offset).reshape(shape)]


def quiz_bytes_float64():
    """Takes 8 bytes per float32."""
    return 8_000_000



MISTAKES = [
    Mistake("03.compact_strides", "column-major strides", strides_column_major,
            expect_message="column-major"),
    Mistake("03.compact_strides", "strides in bytes", strides_in_bytes,
            expect_message="strides in bytes"),
    Mistake("03.compact_strides", "size-0 axis zeroes the strides", strides_zero_length_axis,
            expect_message="size-0 axis"),
    Mistake("03.compact_strides", "stride includes its own axis", strides_include_own_axis,
            expect_message="includes its own axis"),
    Mistake("03.offset", "forgets the view's offset", offset_forgets_base,
            expect_message="forgot the starting offset"),
    Mistake("03.offset", "no check of the index length", offset_no_length_check,
            expect_message="should raise ValueError"),
    Mistake("03.slice_view", "slice ignores its step", slice_ignores_step,
            expect_message="stride * step"),
    Mistake("03.slice_view", "slice length is stop - start", slice_length_stop_minus_start,
            expect_message="not stop - start"),
    Mistake("03.slice_view", "negative index not wrapped", slice_negative_index_not_wrapped,
            expect_message="negative int index counts from the end"),
    Mistake("03.slice_view", "int index out of range accepted", slice_no_bounds_check,
            expect_message="should raise IndexError"),
    Mistake("03.permute", "strides permuted, shape not", permute_strides_only,
            expect_message="permuted the strides but not the shape"),
    Mistake("03.permute", "inverse permutation", permute_inverse,
            expect_message="inverse permutation"),
    Mistake("03.broadcast_to", "broadcast axis gets stride 1", broadcast_stride_one,
            expect_message="must have stride 0"),
    Mistake("03.broadcast_to", "shapes aligned on the left", broadcast_left_aligned,
            expect_message="at the RIGHT"),
    Mistake("03.reshape", "always compact strides, never None", reshape_always_compact,
            expect_message="should return None"),
    Mistake("03.reshape", "copies every non-contiguous input", reshape_copy_unless_contiguous,
            expect_message="a view is possible"),
    Mistake("03.compact", "ignores the offset", compact_ignores_offset,
            expect_message="ignored the offset"),
    Mistake("03.compact", "buffer (memory) order", compact_buffer_order,
            expect_message="buffer (memory) order"),
    Mistake("03.compact", "copies a contiguous run", compact_contiguous_run,
            expect_message="contiguous run of the buffer"),
    Mistake("03.compact", "returns a view, not a copy", compact_returns_view,
            expect_message="shares memory with the buffer"),
    Mistake("03.quiz_copy_bytes", "a reshape of a view is free", quiz_bytes_zero,
            expect_message="cannot be a view"),
    Mistake("03.quiz_copy_bytes", "elements, not bytes", quiz_bytes_elements,
            expect_message="number of elements"),
    Mistake("03.quiz_views", "a transpose copies", quiz_views_copy,
            expect_message="allocates no buffer"),
    Mistake("03.compact_strides", "strides not reversed at the end", strides_not_reversed,
            expect_message="reverse order"),
    Mistake("03.offset", "np.dot returns a numpy number", offset_numpy_dot,
            expect_message="should be a Python int"),
    Mistake("03.offset", "index paired with the strides reversed", offset_strides_reversed,
            expect_message="strides reversed"),
    Mistake("03.slice_view", "slice defaults written for positive steps",
            slice_positive_step_defaults, expect_message="with a negative step, an omitted start"),
    Mistake("03.slice_view", "None counted as an index", slice_none_counts_as_index,
            expect_message="uses up no axis"),
    Mistake("03.slice_view", "axes the key does not name are dropped", slice_unnamed_axes_dropped,
            expect_message="does not name are kept whole"),
    Mistake("03.permute", "negative axes refused", permute_rejects_negative_axes,
            expect_message="negative entry counts from the end"),
    Mistake("03.permute", "only the number of axes is checked", permute_checks_only_length,
            expect_message="listed twice"),
    Mistake("03.broadcast_to", "length 1 cannot broadcast to 0", broadcast_one_to_zero_raises,
            expect_message="0 included"),
    Mistake("03.broadcast_to", "zip from the right accepts fewer dimensions",
            broadcast_zip_from_the_right, expect_message="fewer dimensions"),
    Mistake("03.broadcast_to", "error message without the shapes", broadcast_error_names_no_shape,
            expect_message="should name both shapes"),
    Mistake("03.permute", "error message without the axes", permute_error_names_nothing,
            expect_message="should name the axes it was given"),
    Mistake("03.reshape", "group laid out from its outer stride", reshape_outer_stride,
            expect_message="read the wrong elements"),
    Mistake("03.reshape", "length-1 axes constrain the view", reshape_length_one_axes_count,
            expect_message="a view is possible"),
    Mistake("03.reshape", "no special case for empty arrays", reshape_no_empty_case,
            expect_message="length-0 and length-1 axes"),
    Mistake("03.compact", "compacts in place inside the buffer", compact_in_place,
            expect_message="changed its input buffer"),
    Mistake("03.compact", "np.array of a list: float64 when empty", compact_list_of_elements,
            expect_message="buffer's dtype"),
    Mistake("03.compact", "result keeps the view's shape", compact_keeps_view_shape,
            expect_message="flat 1-D"),
    Mistake("03.quiz_copy_bytes", "8 bytes per float32", quiz_bytes_float64,
            expect_message="4 bytes"),
]
