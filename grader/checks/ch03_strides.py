"""Hidden checks of chapter 03 (strides): one check per exercise slot, plus the two quizzes.

Each check receives a handle on the student's function (:class:`grader.checks.student.
Student`): arguments go out and results come back as plain data (tuples, ints, slices,
numpy arrays), so every comparison below is on values this process decoded itself.
``03.slice_view`` and ``03.reshape`` give partial credit by named parts.

numpy is the oracle.  Every metadata question (strides, offset, shape of a view) is asked
of a real numpy view over ``base = np.arange(n)`` (int64): a view's strides in elements are
``view.strides // 8`` and its offset is the distance of its data pointer from ``base``'s.
Since ``base[p] == p``, the values of a view are also the buffer positions it reads, which
makes "the elements this layout reads" easy to compare.

Messages follow one pattern: the call, what was expected, what came back, and -- when the
answer matches a known wrong rule -- the likely mistake.
"""
from __future__ import annotations

import math

import numpy as np

from grader.checks import check, part
from grader.checks.helpers import (CheckFailed, call, call_text, describe, expect_array,
                                   expect_choice, expect_int, expect_raises, expect_tuple_of_ints,
                                   fail, raised_as_failure, rng)

CANARY = "mini-grader-canary: hidden checks of chapter 03 (never in feedback)"

# Points, the one source: `mini-course build` prices the notebook's test cells and its
# "What you build" table from this dict (100 in all for the chapter).
POINTS = {
    "03.compact_strides": 8,
    "03.offset": 8,
    "03.slice_view": 22,
    "03.permute": 8,
    "03.broadcast_to": 12,
    "03.reshape": 22,
    "03.compact": 12,
    "03.quiz_copy_bytes": 4,
    "03.quiz_views": 4,
}

TRIALS = 60  # random cases per check, on top of the fixed ones


# =========================================================================== numpy oracles

def _meta(view: np.ndarray, base: np.ndarray):
    """(shape, strides in elements, offset in elements) of a numpy view of ``base``."""
    item = base.itemsize
    offset = (view.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // item
    return (tuple(int(d) for d in view.shape), tuple(int(s) // item for s in view.strides),
            int(offset))


def _c_strides(shape):
    """Row-major strides in elements, size-0 axes counted as 1 (private rule, not mini's)."""
    out, step = [], 1
    for d in reversed(shape):
        out.append(step)
        step *= max(d, 1)
    return tuple(reversed(out))


def _f_strides(shape):
    out, step = [], 1
    for d in shape:
        out.append(step)
        step *= max(d, 1)
    return tuple(out)


def _random_view(gen, rank=(1, 4), side=(1, 6), zero=False, broadcast=False, negative=True,
                 transpose=True):
    """``(base, view)``: a random strided view (slices with steps, maybe reversed, maybe
    transposed, maybe broadcast) of ``base = np.arange(n)``."""
    ndim = int(gen.integers(rank[0], rank[1] + 1))
    big = [int(gen.integers(side[0], side[1] + 1)) for _ in range(ndim)]
    if zero and ndim and gen.random() < 0.5:
        big[int(gen.integers(ndim))] = 0
    n = math.prod(big)
    base = np.arange(max(n, 1), dtype=np.int64)
    v = base[:n].reshape(big)
    key = []
    for d in big:
        if d == 0 or gen.random() < 0.45:
            key.append(slice(None))
            continue
        step = int(gen.integers(1, 3))
        if negative and gen.random() < 0.3:  # a reversed run: start above stop
            start = int(gen.integers(0, d))
            stop = int(gen.integers(-1, start))
            key.append(slice(start, None if stop < 0 else stop, -step))
        else:
            start = int(gen.integers(0, d))
            key.append(slice(start, int(gen.integers(start + 1, d + 1)), step))
    v = v[tuple(key) + (Ellipsis,)]  # with the ellipsis a 0-d result stays a view
    if transpose and v.ndim > 1 and gen.random() < 0.5:
        v = v.transpose(tuple(int(a) for a in gen.permutation(v.ndim)))
    if broadcast and gen.random() < 0.5:
        at = int(gen.integers(0, v.ndim + 1))
        idx = (slice(None),) * at + (None,)
        v = v[idx]
        shape = list(v.shape)
        shape[at] = int(gen.integers(2, 4))
        v = np.broadcast_to(v, shape)
    return base, v


def _positions(shape, strides, offset):
    """Buffer positions a layout reads, in row-major order of the view (int64 array)."""
    pos = np.full((1,) * len(shape), offset, dtype=np.int64)
    for axis, (d, s) in enumerate(zip(shape, strides)):
        along = np.arange(d, dtype=np.int64) * s
        pos = pos + along.reshape((1,) * axis + (d,) + (1,) * (len(shape) - axis - 1))
    return pos.reshape(shape)


def _same_layout(got, expected) -> bool:
    """Equal as layouts: same shape; for a non-empty view the same offset and the same
    strides on every axis longer than 1 (the stride of a length-1 axis is never used)."""
    gshape, gstrides, goff = got
    eshape, estrides, eoff = expected
    if gshape != eshape or len(gstrides) != len(estrides):
        return False
    if 0 in eshape:
        return True
    if goff != eoff:
        return False
    return all(g == e for g, e, d in zip(gstrides, estrides, eshape) if d > 1)


def _call(fn, *args, name: str, hint: str = ""):
    """helpers.call, with a hint appended when the student's code raised."""
    try:
        return call(fn, *args, name=name)
    except CheckFailed as e:
        raise CheckFailed(f"{e.message}; {hint}" if hint else e.message) from None


def _layout_result(value, what: str):
    """Validate ``(shape, strides, offset)`` as returned by slice_view."""
    if type(value) is not tuple or len(value) != 3:
        fail(f"{what} should return a tuple (new_shape, new_strides, new_offset), "
             f"got {describe(value)}")
    shape = expect_tuple_of_ints(value[0], f"{what}[0] (the shape)")
    strides = expect_tuple_of_ints(value[1], f"{what}[1] (the strides)")
    offset = expect_int(value[2], f"{what}[2] (the offset)")
    if len(shape) != len(strides):
        fail(f"{what} returned shape {shape} and strides {strides} of different lengths; "
             f"every axis needs one stride")
    return shape, strides, offset


# =========================================================================== 03.compact_strides

def _diagnose_compact_strides(shape, got, expected) -> str:
    if len(got) != len(shape):
        return (f"the result needs one stride per axis ({len(shape)} for shape {shape}), "
                f"got {len(got)}")
    if shape and got == _f_strides(shape) and got != expected:
        return ("these are column-major (Fortran-order) strides, where the FIRST axis has "
                "stride 1; mini is row-major: the LAST axis has stride 1 and each axis before "
                "it steps over the product of the lengths after it")
    for k in (2, 4, 8):
        if expected and got == tuple(k * s for s in expected):
            return (f"these are {k}x the expected strides: strides in bytes (itemsize {k})? "
                    f"mini counts strides in elements, not bytes")
    if shape and got == tuple(reversed(expected)) and got != expected:
        return "the strides are in reverse order: the first entry belongs to axis 0"
    if 0 in shape:
        naive, step = [], 1
        for d in reversed(shape):
            naive.append(step)
            step *= d
        if got == tuple(reversed(naive)):
            return ("with a size-0 axis, multiplying by its length makes the strides of the axes "
                    "before it 0; count a size-0 axis as length 1 (max(dim, 1)) so strides stay "
                    "positive")
    incl = []
    step = 1
    for d in reversed(shape):
        step *= max(d, 1)
        incl.append(step)
    if shape and got == tuple(reversed(incl)):
        return ("each stride includes its own axis's length; the stride of an axis is the "
                "product of the lengths of the axes AFTER it (the last axis has stride 1)")
    return "the stride of axis i is the product of the lengths of axes i+1, i+2, ..."


@check("03.compact_strides", points=POINTS["03.compact_strides"])
def check_compact_strides(fn):
    gen = rng()
    fixed = [(2, 3), (1024, 1024), (), (5,), (2, 3, 4), (3, 1, 2), (1, 1), (4, 0, 5), (0,),
             (2, 0)]
    shapes = fixed + [tuple(int(d) for d in gen.integers(0 if gen.random() < 0.2 else 1, 7,
                                                         size=int(gen.integers(0, 6))))
                      for _ in range(TRIALS)]
    for shape in shapes:
        what = call_text("compact_strides", shape)
        got = expect_tuple_of_ints(_call(fn, shape, name="compact_strides"), what)
        if 0 in shape:
            expected = _c_strides(shape)
        else:
            expected = tuple(s // 8 for s in np.empty(shape, np.int64).strides)
        if got != expected:
            fail(f"{what}: expected {expected}, got {got}; "
                 f"{_diagnose_compact_strides(shape, got, expected)}")


# =========================================================================== 03.offset

@check("03.offset", points=POINTS["03.offset"])
def check_offset(fn):
    gen = rng()
    cases = [((1, 2), (3, 1), 0, 5),        # 2x3 row-major, element [1, 2]
             ((1, 1), (4, 1), 1, 6),        # A[0:2, 1:3] of a 3x4 A: element [1, 1] is A[1, 2]
             ((2, 0), (1, 3), 0, 2),        # the transpose of a 2x3 array
             ((), (), 7, 7)]                # a 0-d view: just the offset
    for _ in range(TRIALS):
        base, v = _random_view(gen, rank=(0, 4))
        if v.size == 0:
            continue
        shape, strides, offset = _meta(v, base)
        index = tuple(int(gen.integers(0, d)) for d in shape)
        cases.append((index, strides, offset, int(v[index])))
    for index, strides, offset, expected in cases:
        what = call_text("element_offset", index, strides, offset)
        got = expect_int(_call(fn, index, strides, offset, name="element_offset"), what)
        if got == expected:
            continue
        hint = "the position is offset + sum(index[k] * strides[k])"
        plain = sum(i * s for i, s in zip(index, strides))
        if offset and got == plain:
            hint = ("you forgot the starting offset: a view need not start at position 0 of "
                    "the buffer, so add offset to sum(index[k] * strides[k])")
        elif len(index) > 1 and got == offset + sum(i * s for i, s in zip(index, reversed(strides))):
            hint = "index k pairs with strides[k]; you paired the index with the strides reversed"
        elif any(s < 0 for s in strides) and got == offset + sum(i * abs(s) for i, s in
                                                                 zip(index, strides)):
            hint = "a negative stride (a reversed view) must stay negative in the sum"
        fail(f"{what}: expected {expected}, got {got}; {hint}")
    expect_raises(ValueError, fn, (1, 2), (3,), 0, name="element_offset",
                  hint="an index with more entries than the array has dimensions must raise "
                       "ValueError")
    expect_raises(ValueError, fn, (1,), (3, 1), 0, name="element_offset",
                  hint="an index with fewer entries than the array has dimensions must raise "
                       "ValueError (zip silently drops the extra strides)")


# =========================================================================== 03.slice_view

def _fmt_key(key) -> str:
    items = key if isinstance(key, tuple) else (key,)

    def one(k):
        if k is None:
            return "None"
        if k is Ellipsis:
            return "..."
        if isinstance(k, slice):
            s = ("" if k.start is None else str(k.start)) + ":" + ("" if k.stop is None else str(k.stop))
            return s + ("" if k.step is None else f":{k.step}")
        return str(k)
    text = ", ".join(one(k) for k in items)
    return f"a[{text}]"


def _slice_variant(shape, strides, offset, key, *, ignore_step=False, stop_minus_start=False,
                   no_wrap=False, no_base_offset=False):
    """A wrong rule, to name the mistake when a student's answer matches it.  Returns a
    layout or None when the rule does not apply to this key."""
    items = key if isinstance(key, tuple) else (key,)
    if any(k is Ellipsis for k in items):
        return None
    if sum(1 for k in items if k is not None) > len(shape):
        return None
    items = items + (slice(None),) * (len(shape) - sum(1 for k in items if k is not None))
    out_shape, out_strides = [], []
    pos = 0 if no_base_offset else offset
    axis = 0
    for k in items:
        if k is None:
            out_shape.append(1)
            out_strides.append(0)
            continue
        d, s = shape[axis], strides[axis]
        if isinstance(k, slice):
            start, stop, step = k.indices(d)
            n = len(range(start, stop, step))
            if stop_minus_start:
                n = max(stop - start, 0)
            out_shape.append(n)
            out_strides.append(s if ignore_step else s * step)
            if n > 0:
                pos += start * s
        else:
            i = k if no_wrap else (k + d if k < 0 else k)
            pos += i * s
        axis += 1
    return tuple(out_shape), tuple(out_strides), pos


def _diagnose_slice(shape, strides, offset, key, got, expected) -> str:
    items = key if isinstance(key, tuple) else (key,)
    has_step = any(isinstance(k, slice) and k.step not in (None, 1) for k in items)
    has_neg_int = any(type(k) is int and k < 0 for k in items)
    rules = [
        (has_neg_int, dict(no_wrap=True),
         "a negative int index counts from the end of the axis: add the axis length "
         "(i + dim) before multiplying by the stride"),
        (has_step, dict(ignore_step=True),
         "the stride of a sliced axis must be stride * step: with a step of 2 the view skips "
         "every other element"),
        (has_step, dict(stop_minus_start=True),
         "the length of a slice with a step is len(range(start, stop, step)), not stop - start "
         "(use slice.indices(dim) to get start, stop, step)"),
        (offset != 0, dict(no_base_offset=True),
         "you started from position 0: start from the view's own offset and add "
         "start * stride for each axis"),
    ]
    for applies, flags, message in rules:
        if applies:
            wrong = _slice_variant(shape, strides, offset, key, **flags)
            if wrong is not None and _same_layout(got, wrong):
                return message
    n_none = sum(1 for k in items if k is None)
    if n_none and len(got[0]) == len(expected[0]) - n_none:
        return "None inserts a new axis of length 1 (with stride 0) at its place in the key"
    if Ellipsis in items:
        return ("... stands for as many full slices (:) as needed so that the key names every "
                "axis; the items after it belong to the LAST axes")
    return ("an int drops its axis and adds i * stride to the offset; a slice keeps the axis "
            "with length len(range(start, stop, step)) and stride stride * step")


def _check_one_slice(fn, base, v, key):
    shape, strides, offset = _meta(v, base)
    items = key if isinstance(key, tuple) else (key,)
    if not any(k is Ellipsis for k in items):
        items = items + (Ellipsis,)  # numpy then returns a 0-d view instead of a scalar
    expected = _meta(v[items], base)
    what = call_text("slice_view", shape, strides, offset, key)
    got = _layout_result(_call(fn, shape, strides, offset, key, name="slice_view"), what)
    if not _same_layout(got, expected):
        fail(f"{what} (that is {_fmt_key(key)} for an array a with shape {shape}, strides "
             f"{strides}, offset {offset}): expected (shape, strides, offset) = {expected}, got "
             f"{got}; {_diagnose_slice(shape, strides, offset, key, got, expected)}")


def _random_key(gen, shape):
    """A valid basic index for ``shape``."""
    n_named = int(gen.integers(0, len(shape) + 1))
    use_ell = gen.random() < 0.3
    if use_ell:
        at = int(gen.integers(0, n_named + 1))
        skipped = len(shape) - n_named
        axes = list(range(at)) + list(range(at + skipped, len(shape)))
    else:
        axes = list(range(n_named))
    items = []
    for ax in axes:
        d = shape[ax]
        if d > 0 and gen.random() < 0.35:
            items.append(int(gen.integers(-d, d)))
        else:
            def bound():
                return None if gen.random() < 0.3 else int(gen.integers(-2 * d - 2, 2 * d + 3))
            step = None if gen.random() < 0.3 else int(gen.choice([-3, -2, -1, 1, 2, 3]))
            items.append(slice(bound(), bound(), step))
    if use_ell:
        items.insert(at, Ellipsis)
    for _ in range(int(gen.integers(0, 3)) if gen.random() < 0.3 else 0):
        items.insert(int(gen.integers(0, len(items) + 1)), None)
    if len(items) == 1 and gen.random() < 0.5:
        return items[0]
    return tuple(items)


def _slice_kind(key) -> str:
    """Which part of 03.slice_view a key exercises."""
    items = key if isinstance(key, tuple) else (key,)
    steps = [k.step for k in items if isinstance(k, slice) and k.step is not None]
    if any(st < 0 for st in steps):
        return "negative steps"
    if any(st != 1 for st in steps):
        return "steps"
    if any(k is None or k is Ellipsis for k in items):
        return "None and ..."
    return "ints and slices"


# Points of 03.slice_view's parts (22 in all).
SLICE_PARTS = {"ints and slices": 6, "steps": 4, "negative steps": 4, "None and ...": 4,
               "bad keys": 4}


@check("03.slice_view", points=POINTS["03.slice_view"])
def check_slice_view(fn):
    gen = rng()
    # The seed fact: a 3x4 array A, A[0:2, 1:3] -> shape (2, 2), strides (4, 1), offset 1.
    base = np.arange(12, dtype=np.int64)
    A = base.reshape(3, 4)
    cases = [
        (base, A, (slice(0, 2), slice(1, 3))),
        (base, A, 1), (base, A, -1), (base, A, (2, -1)), (base, A, (-3, 0)),   # ints, negative ints
        (base, A, slice(None, None, 2)), (base, A, (slice(None), slice(1, None, 2))),   # steps
        (base, A, (slice(None, None, -1),)), (base, A, (slice(None), slice(3, 0, -2))),  # negative steps
        (base, A, (slice(0, 3, 2), slice(0, 4, 3))),                 # stop - start != length
        (base, A, None), (base, A, (slice(None), None)), (base, A, (None, 1, None)),     # new axes
        (base, A, Ellipsis), (base, A, (Ellipsis, 2)), (base, A, (1, Ellipsis)),
        (base, A, (None, Ellipsis, None)),
        (base, A, slice(5, 10)), (base, A, (slice(2, 1), slice(None))),    # empty results
        (base, A, slice(-100, 100)),                                 # bounds beyond the axis
        (base, A[1:, ::2], (slice(None), 1)),                        # a view with an offset
        (base, A[::-1, 1:], (-1, slice(None, None, -1))),            # a reversed view
        (base, base[5:6].reshape(()), ()),                           # a 0-d array, empty key
        (base, base[3:4].reshape(()), None),
    ]
    for _ in range(TRIALS * 2):
        b, v = _random_view(gen, rank=(0, 4), zero=gen.random() < 0.1)
        cases.append((b, v, _random_key(gen, v.shape)))
    for kind in ("ints and slices", "steps", "negative steps", "None and ..."):
        with part(kind, SLICE_PARTS[kind]):
            for b, v, key in cases:
                if _slice_kind(key) == kind:
                    _check_one_slice(fn, b, v, key)

    with part("bad keys", SLICE_PARTS["bad keys"]):
        shape, strides, offset = (3, 4), (4, 1), 0
        for key, hint in [
            ((3,), "an int index must be in range: -dim <= i < dim, so 3 is out of range for an "
                   "axis of length 3 and must raise IndexError (not wrap around or clamp)"),
            ((-4,), "a negative int index below -dim is out of range and must raise IndexError"),
            ((0, 4), "index 4 is out of range for an axis of length 4: raise IndexError"),
            ((0, 0, 0), "too many indices (3 for a 2-d array) must raise IndexError"),
            ((Ellipsis, 0, Ellipsis), "more than one ellipsis must raise IndexError"),
        ]:
            expect_raises(IndexError, fn, shape, strides, offset, key, name="slice_view", hint=hint)
        expect_raises(ValueError, fn, shape, strides, offset, (slice(None, None, 0),),
                      name="slice_view", hint="a slice step of 0 must raise ValueError")


# =========================================================================== 03.permute

@check("03.permute", points=POINTS["03.permute"])
def check_permute(fn):
    gen = rng()
    cases = [(np.arange(6, dtype=np.int64), (2, 3), (1, 0)),
             (np.arange(12, dtype=np.int64), (3, 4), (-1, -2)),
             (np.arange(24, dtype=np.int64), (2, 3, 4), (1, 2, 0)),
             (np.arange(24, dtype=np.int64), (2, 3, 4), (2, 0, 1)),
             (np.arange(1, dtype=np.int64), (), ())]
    views = [(b, b.reshape(s), axes) for b, s, axes in cases]
    for _ in range(TRIALS):
        b, v = _random_view(gen, rank=(0, 5), side=(1, 4))
        perm = tuple(int(a) for a in gen.permutation(v.ndim))
        perm = tuple(a - v.ndim if gen.random() < 0.25 else a for a in perm)
        views.append((b, v, perm))
    for base, v, axes in views:
        shape, strides, _ = _meta(v, base)
        what = call_text("permute", shape, strides, axes)
        got = _call(fn, shape, strides, axes, name="permute")
        if type(got) is not tuple or len(got) != 2:
            fail(f"{what} should return a tuple (new_shape, new_strides), got {describe(got)}")
        gshape = expect_tuple_of_ints(got[0], f"{what}[0] (the shape)")
        gstrides = expect_tuple_of_ints(got[1], f"{what}[1] (the strides)")
        eshape, estrides, _ = _meta(v.transpose(axes), base)
        if (gshape, gstrides) == (eshape, estrides):
            continue
        inv = tuple(int(i) for i in np.argsort([a % max(len(shape), 1) for a in axes]))
        ishape, istrides, _ = _meta(v.transpose(inv), base) if inv else ((), (), 0)
        if gstrides == estrides and gshape == shape and shape != eshape:
            hint = ("you permuted the strides but not the shape: both must be reordered the "
                    "same way")
        elif gshape == eshape and gstrides == strides and strides != estrides:
            hint = ("you permuted the shape but not the strides: both must be reordered the "
                    "same way, otherwise the view reads the wrong elements")
        elif (gshape, gstrides) == (ishape, istrides):
            hint = ("you applied the inverse permutation: new axis i is old axis axes[i], "
                    "so new_shape[i] = shape[axes[i]] (not new_shape[axes[i]] = shape[i])")
        else:
            hint = "new axis i is old axis axes[i]: new_shape[i] = shape[axes[i]], likewise strides"
        fail(f"{what}: expected ({eshape}, {estrides}), got ({gshape}, {gstrides}); {hint}")
    for shape, strides, axes, hint in [
        ((2, 3), (3, 1), (0, 0), "an axis listed twice is not a permutation: raise ValueError"),
        ((2, 3), (3, 1), (0,), "too few axes for a 2-d array: raise ValueError"),
        ((2, 3), (3, 1), (0, 1, 2), "too many axes for a 2-d array: raise ValueError"),
        ((2, 3), (3, 1), (0, 2), "axis 2 does not exist in a 2-d array: raise ValueError"),
    ]:
        expect_raises(ValueError, fn, shape, strides, axes, name="permute", hint=hint)


# =========================================================================== 03.broadcast_to

def _broadcast_left(shape, strides, new_shape):
    """The wrong rule that aligns shapes on the left; None if it would raise."""
    out = []
    for i, target in enumerate(new_shape):
        if i < len(shape):
            if shape[i] == target:
                out.append(strides[i])
            elif shape[i] == 1:
                out.append(0)
            else:
                return None
        else:
            out.append(0)
    return tuple(out)


@check("03.broadcast_to", points=POINTS["03.broadcast_to"])
def check_broadcast_to(fn):
    gen = rng()
    b12 = np.arange(12, dtype=np.int64)
    cases = [
        (b12, b12[:3], (4, 3)),                        # a row repeated 4 times: strides (0, 1)
        (b12, b12[:3].reshape(3, 1), (3, 4)),          # a column repeated: strides (1, 0)
        (b12, b12[5:6].reshape(()), (2, 3)),           # a 0-d array broadcast: strides (0, 0)
        (b12, b12[5:6].reshape(()), ()),
        (b12, b12[:3], (3, 3)),                        # square: left alignment gives a wrong answer
        (b12, b12.reshape(3, 4)[:, 1:2], (2, 3, 5)),   # a view with an offset
        (b12, b12[:1].reshape(1, 1), (4, 0)),          # to an empty shape
        (b12, b12.reshape(3, 4)[::-1, ::2], (2, 3, 2)),
    ]
    for _ in range(TRIALS):
        base, v = _random_view(gen, rank=(0, 3), side=(1, 4))
        shape = list(v.shape)
        target = [d if d != 1 or gen.random() < 0.4 else int(gen.integers(1, 5)) for d in shape]
        lead = [int(gen.integers(1, 4)) for _ in range(int(gen.integers(0, 3)))]
        cases.append((base, v, tuple(lead + target)))
    for base, v, new_shape in cases:
        shape, strides, offset = _meta(v, base)
        what = call_text("broadcast_to", shape, strides, new_shape)
        got = expect_tuple_of_ints(_call(fn, shape, strides, new_shape, name="broadcast_to",
                                         hint="align the two shapes at the RIGHT: the last axes "
                                              "pair up, new axes are added in front"), what)
        _, expected, _ = _meta(np.broadcast_to(v, new_shape), base)
        if _same_layout((new_shape, got, 0), (new_shape, expected, 0)):
            continue
        hint = ("new leading axes and axes of length 1 that grow get stride 0; the other axes "
                "keep their strides")
        left = _broadcast_left(shape, strides, new_shape)
        if len(got) != len(new_shape):
            hint = f"the result needs one stride per axis of new_shape ({len(new_shape)})"
        elif left is not None and got == left and left != expected:
            hint = ("you aligned the shapes on the left; broadcasting aligns them at the RIGHT "
                    "(the last axes pair up) and adds new axes in front")
        elif any(e == 0 and g != 0 and d > 1 for g, e, d in zip(got, expected, new_shape)):
            hint = ("an axis that is broadcast (new, or grown from length 1) must have stride 0, "
                    "so that every index along it reads the same element; stride 1 walks "
                    "through memory instead")
        fail(f"{what}: expected strides {expected}, got {got}; {hint}")
    for shape, strides, new_shape, hint in [
        ((3,), (1,), (4,), "length 3 cannot become 4 (only length-1 axes grow): raise ValueError"),
        ((2, 3), (3, 1), (3,), "the target has fewer dimensions than the array: raise ValueError"),
        ((3,), (1,), (3, 2), "aligned at the right, 3 meets 2: the shapes are incompatible, "
                             "raise ValueError (left alignment would accept this)"),
        ((2, 1), (1, 1), (3, 4), "2 cannot become 3: raise ValueError"),
    ]:
        expect_raises(ValueError, fn, shape, strides, new_shape, name="broadcast_to", hint=hint)


# =========================================================================== 03.reshape

def _factor_shape(gen, size):
    """A random shape with ``size`` elements (with some 1s thrown in)."""
    if size == 0:
        dims = [int(gen.integers(1, 4)) for _ in range(int(gen.integers(0, 3)))]
        dims.insert(int(gen.integers(0, len(dims) + 1)), 0)
        return tuple(dims)
    dims, rest = [], size
    while rest > 1:
        divisors = [d for d in range(2, rest + 1) if rest % d == 0]
        d = int(gen.choice(divisors))
        dims.append(d)
        rest //= d
    gen.shuffle(dims)
    for _ in range(int(gen.integers(0, 3)) if gen.random() < 0.4 else 0):
        dims.insert(int(gen.integers(0, len(dims) + 1)), 1)
    return tuple(int(d) for d in dims)


def _reshape_case(fn, base, v, new_shape):
    shape, strides, offset = _meta(v, base)
    what = call_text("reshape_strides", shape, strides, new_shape)
    got = _call(fn, shape, strides, new_shape, name="reshape_strides")
    try:
        expected_view = v.reshape(new_shape, copy=False)
    except ValueError:
        expected_view = None
    if expected_view is None:
        if got is not None:
            gs = expect_tuple_of_ints(got, what)
            fail(f"{what} should return None, got strides {gs}: the elements of this array are "
                 f"not one evenly spaced run in the order of new_shape, so no strides can show "
                 f"it as {new_shape} and reshape has to copy; returning strides anyway makes "
                 f"reshape read the wrong elements (did you return compact row-major strides "
                 f"without checking that each merged group of axes is contiguous, "
                 f"stride[i] == stride[i+1] * shape[i+1]?)")
        return
    if got is None:
        _, es, _ = _meta(expected_view, base)
        fail(f"{what} returned None, but a view is possible (for example strides {es}); "
             f"reshape should copy only when no strides exist: merging or splitting axes is "
             f"fine as long as each merged group is contiguous in memory, and length-1 axes "
             f"never matter")
    gs = expect_tuple_of_ints(got, what)
    if len(gs) != len(new_shape):
        fail(f"{what} should return {len(new_shape)} strides (one per axis of {new_shape}), "
             f"got {gs}")
    if v.size == 0:
        return
    if any(abs(s) > 2 ** 40 for s in gs):
        fail(f"{what} returned strides {gs}, far larger than any position in the buffer "
             f"({base.size} elements)")
    pos = _positions(new_shape, gs, offset)
    want = np.array(expected_view, copy=True)
    if pos.min() < 0 or pos.max() >= base.size or not np.array_equal(pos, want):
        _, es, _ = _meta(expected_view, base)
        hint = ""
        if gs == _c_strides(new_shape) and not v.flags.c_contiguous:
            hint = ("; these are compact row-major strides, right only for contiguous input: "
                    "here the input is not contiguous (a slice, transpose or broadcast), so "
                    "build the new strides from the old ones (inside a merged group, the "
                    "innermost new axis takes the innermost old stride)")
        fail(f"{what}: strides {gs} read the wrong elements of the buffer (buffer positions "
             f"{pos.reshape(-1)[:8].tolist()}... instead of {want.reshape(-1)[:8].tolist()}...); "
             f"one correct answer is {es}{hint}")


# Points of 03.reshape's parts (22 in all).
RESHAPE_PARTS = {"contiguous arrays": 8, "views of non-contiguous arrays": 8,
                 "None when a copy is needed": 6}


def _reshape_kind(v, new_shape) -> str:
    if v.size == 0 or v.flags.c_contiguous:
        return "contiguous arrays"
    try:
        v.reshape(new_shape, copy=False)
    except ValueError:
        return "None when a copy is needed"
    return "views of non-contiguous arrays"


@check("03.reshape", points=POINTS["03.reshape"])
def check_reshape(fn):
    gen = rng()
    b = np.arange(48, dtype=np.int64)
    A = b[:12].reshape(3, 4)
    fixed = [
        (A, (12,)),                    # a contiguous array flattens as a view
        (A.T, (12,)),                  # reshape(-1) of A.T must copy: None
        (A, (2, 6)), (A, (2, 2, 3)), (A, (4, 3)), (A, (12, 1)), (A, (1, 3, 1, 4)),
        (A.T, (2, 2, 3)),              # splitting the first axis of a transpose: a view
        (A.T, (4, 3, 1)),
        (A.T, (3, 4)),                 # needs a copy
        (A[:, ::2], (6,)),             # a strided slice cannot be flattened: None
        (A[:, ::2], (3, 2, 1)),
        (b.reshape(4, 12)[:, ::2], (2, 2, 6)),   # non-contiguous, yet splitting axis 0 is a view
        (b.reshape(4, 12)[:, ::2], (4, 2, 3)),   # ... and so is splitting axis 1
        (b.reshape(4, 12)[:, ::2], (8, 3)),      # but merging across the gap is not
        (b.reshape(4, 12)[1:3, 2:8], (12,)),     # an inner block: None
        (b.reshape(4, 12)[1:3, 2:8], (2, 2, 3)),
        (b[::-1], (6, 8)),                       # negative strides
        (b.reshape(6, 8)[::-1], (48,)),
        (np.broadcast_to(b[:3], (4, 3)), (2, 2, 3)),   # broadcast: stride 0 axes
        (np.broadcast_to(b[:3], (4, 3)), (12,)),
        (b[:12].reshape(3, 1, 4).transpose(1, 0, 2), (3, 4)),   # a moved length-1 axis
        (b[7:8].reshape(()), (1, 1)), (b[7:8].reshape(1, 1), ()),  # one element
        (b[:0].reshape(0, 3), (3, 0)), (b[:0].reshape(3, 0), (0,)),  # empty
    ]
    cases = [(b, v, new_shape) for v, new_shape in fixed]
    for _ in range(TRIALS * 2):
        base, v = _random_view(gen, rank=(0, 4), side=(1, 5), broadcast=True,
                               zero=gen.random() < 0.05)
        cases.append((base, v, _factor_shape(gen, v.size)))
    for kind, points in RESHAPE_PARTS.items():
        with part(kind, points):
            for base, v, new_shape in cases:
                if _reshape_kind(v, new_shape) == kind:
                    _reshape_case(fn, base, v, new_shape)


# =========================================================================== 03.compact

def _compact_case(fn, buffer, v_np, shape, strides, offset):
    what = call_text("compact", buffer, shape, strides, offset)
    n = math.prod(shape)
    out = fn.run(buffer, shape, strides, offset)
    if out.raised is not None:
        from grader.checks.student import StudentRaised
        raise raised_as_failure(StudentRaised(out.raised), what)
    got = out.result()
    if type(got) is np.ndarray and n > 0 and 0 in out.shares:
        fail(f"{what} returned an array that shares memory with the buffer; compact must "
             f"copy the elements into a NEW buffer (a view would change when the original "
             f"is written to)")
    if type(got) is np.ndarray and got.ndim != 1:
        fail(f"{what} should return a flat 1-D array of {n} elements, got shape {got.shape}: "
             f"reshape it with .reshape(-1)")
    got = expect_array(got, what, shape=(n,), dtype=buffer.dtype)
    want = np.ascontiguousarray(v_np).reshape(-1)
    if np.array_equal(got, want):
        return
    hints = []
    pos = _positions(shape, strides, offset).reshape(-1) if n else None
    if offset and n and _in_bounds(shape, strides, 0, buffer):
        if np.array_equal(got, buffer[_positions(shape, strides, 0).reshape(-1)]):
            hints.append("you ignored the offset: the view's first element is buffer[offset], "
                         "not buffer[0]")
    if n and np.array_equal(got, buffer[offset:offset + n]):
        hints.append("you copied a contiguous run of the buffer from offset; the view's "
                     "elements are spread out according to the strides (and may repeat or go "
                     "backwards)")
    if n and np.array_equal(got, buffer[np.sort(pos)]):
        hints.append("the elements came out in buffer (memory) order; compact must produce "
                     "them in the view's row-major order, which differs for a transposed or "
                     "reversed view")
    if n and np.array_equal(got, np.asarray(v_np).reshape(-1, order="F")):
        hints.append("the elements came out in column-major order (first index fastest); "
                     "compact produces row-major order (last index fastest)")
    hint = "; ".join(hints) or ("element k of the result is the k-th element of the view in "
                                "row-major order (last index fastest)")
    shown = min(n, 8)
    fail(f"{what}: expected {want[:shown].tolist()}{'...' if n > shown else ''}, "
         f"got {got[:shown].tolist()}{'...' if n > shown else ''}; {hint}")


def _in_bounds(shape, strides, offset, buffer) -> bool:
    if 0 in shape:
        return True
    pos = _positions(shape, strides, offset)
    return bool(pos.min() >= 0 and pos.max() < buffer.size)


@check("03.compact", points=POINTS["03.compact"])
def check_compact(fn):
    gen = rng()
    cases = []
    # The seed: A is 3x4 over arange(12); A.T (strides (1, 4)) compacts to 0, 4, 8, 1, 5, ...
    base = np.arange(12, dtype=np.float32)
    A = base.reshape(3, 4)
    cases += [(base, A.T), (base, A[0:2, 1:3]), (base, A[1:, 1:]), (base, A[::-1, ::-2]),
              (base, np.broadcast_to(A[1], (2, 4))), (base, A[2, 3:4].reshape(())),
              (base, A[:0]), (base, A)]
    for dtype in (np.float64, np.int64, np.float32, np.int32):
        for _ in range(TRIALS // 4):
            b, v = _random_view(gen, rank=(0, 4), broadcast=True, zero=gen.random() < 0.1)
            data = (gen.standard_normal(b.size) * 100).astype(dtype)
            shape, strides, offset = _meta(v, b)
            view = np.lib.stride_tricks.as_strided(data[offset:] if data.size else data,
                                                   shape, tuple(s * data.itemsize for s in strides))
            cases.append((data, view))
    big = np.arange(200 * 300, dtype=np.float32)
    cases.append((big, big.reshape(200, 300).T[::3]))
    for buffer, view in cases:
        # The oracle: numpy's own view of ``buffer``.
        item = buffer.itemsize
        offset = (view.__array_interface__["data"][0] - buffer.__array_interface__["data"][0]) // item \
            if view.size else 0
        shape = tuple(int(d) for d in view.shape)
        strides = tuple(int(s) // item for s in view.strides)
        _compact_case(fn, buffer.copy(), view, shape, strides, int(offset))


# =========================================================================== quizzes

@check("03.quiz_copy_bytes", points=POINTS["03.quiz_copy_bytes"])
def check_quiz_copy_bytes(fn):
    what = "your answer (bytes allocated by x.T.reshape(-1) for a 1000x1000 float32 x)"
    got = expect_int(call(fn, name="answer"), what, allow_numpy=True)
    expected = 1000 * 1000 * 4
    if got == expected:
        return
    hints = {
        0: "x.T is a view, but its elements are not one evenly spaced run in row-major order, "
           "so reshape(-1) cannot be a view: it copies all of them",
        1000 * 1000: "that is the number of elements; each float32 takes 4 bytes",
        1024 * 1024 * 4: "that is a 1024x1024 array; here x is 1000x1000",
        1000 * 1000 * 8: "float32 takes 4 bytes per element, not 8",
        2 * expected: "only reshape(-1) allocates: x.T is a view and costs nothing",
    }
    fail(f"{what}: not {got:,}; {hints.get(got, 'count the bytes of every step that copies')}")


@check("03.quiz_views", points=POINTS["03.quiz_views"])
def check_quiz_views(fn):
    expect_choice(fn, "your answer to the question about views", "B", {
        "A": "a view allocates no buffer of its own: only shape, strides and offset are new",
        "C": "nothing is copied later either: a view keeps reading and writing the same buffer",
        "D": "reshape is a view only when the strides allow it; for a transpose they do not",
    })
