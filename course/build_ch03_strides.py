"""Build course/03_strides/strides.ipynb (the nbgrader source notebook of chapter 03).

    python course/build_ch03_strides.py          # write the notebook
    python course/build_ch03_strides.py --check  # exit 1 if the file is out of date

This script lives outside the chapter folder on purpose: nbgrader copies everything in
``course/03_strides/`` into the student release, and this file holds the self-check answers
and the hidden-test cells.

The exercise cells are generated from mini's references in ``mini/ndarray/strides.py``:
the decorator becomes ``@implement(...)``, the signature, docstring and solution region are
copied verbatim, so the instructor notebook cannot drift from mini.  Everything else
(prose, demos, visible checks) is written here.  The notebook is written without outputs.
"""
from __future__ import annotations

import sys
from pathlib import Path

import nbformat

from grader.checks.ch03_strides import POINTS   # the checks' points: one source for both
from grader.notebook_build import Cells, exercise_sources, finish_notebook, write_or_check

HERE = Path(__file__).resolve().parent          # course/
ROOT = HERE.parent
NOTEBOOK = HERE / "03_strides" / "strides.ipynb"
REFERENCE = ROOT / "mini" / "ndarray" / "strides.py"

# The cell factories, with this chapter's grade-id prefix and points.
CELLS = Cells("03", POINTS)
md, demo, free, solution, test = CELLS.markdown, CELLS.demo, CELLS.free, CELLS.solution, CELLS.test


# --------------------------------------------------------------------------- the chapter

SETUP = r'''
import numpy as np
import matplotlib.pyplot as plt
from contextlib import contextmanager

import mini
from mini.exercises import implement
from mini.ndarray import track_allocations
from mini.ndarray.strides import Shape, Strides  # the type names in the signatures: tuples of ints
from mini.napkin import nbytes
from mini.napkin.widgets import napkin_chain, show_views


@contextmanager
def needs_exercises():
    """Run a demo.  If it reaches an exercise you have not finished, print which one
    instead of failing, so the notebook always runs top to bottom."""
    try:
        yield
    except NotImplementedError as e:
        slot = getattr(e, "slot_id", None)
        print(f"-> finish exercise {slot} to run this demo" if slot
              else f"-> this demo needs an exercise you have not finished yet ({e})")


def _plain(value):
    """True for Python ints, None, and tuples of those (what the stride functions return)."""
    if isinstance(value, tuple):
        return all(_plain(v) for v in value)
    return value is None or type(value) is int


def expect(got, expected, call, hint):
    """A visible check: say what was expected, what came back, and the likely mistake."""
    if type(got) is type(expected) and got == expected:
        if not _plain(got):
            raise AssertionError(f"{call} returned {got!r}: use plain Python ints "
                                 f"(convert numpy integers with int(...))")
        return
    if isinstance(got, list) and tuple(got) == expected:
        hint = "return a tuple, not a list: tuple(...)"
    raise AssertionError(f"{call} should be {expected!r}, got {got!r}.\n"
                         f"  Likely mistake: {hint}")


def expect_raises(error, fn, *args, hint):
    """A visible check that ``fn(*args)`` raises ``error``."""
    try:
        result = fn(*args)
    except error:
        return
    raise AssertionError(f"{fn.__name__}{args} should raise {error.__name__}, "
                         f"but returned {result!r}.\n  Likely mistake: {hint}")


def layout(t):
    """Shape, strides and offset of a mini tensor, in one line."""
    return f"shape {tuple(t.shape)}, strides {t.stride()}, offset {t.storage_offset()}"
'''


def build() -> nbformat.NotebookNode:
    ex = exercise_sources(REFERENCE)
    cells = []
    add = cells.append

    # ------------------------------------------------------------------ opening
    add(md(r"""
# Chapter 03 — Strides: how an array lives in memory

Every tensor in a framework is two things: a flat block of memory, and a small recipe that
says how to read that block as a grid of numbers. This chapter is about the recipe. You will
write the seven functions that mini uses for it. When you are done, slicing, transposing,
broadcasting, reshaping and `.contiguous()` in mini all run on your code.

**What you build**

| # | slot | your function | what it computes | points |
|---|------|---------------|------------------|-------:|
| 1 | `03.compact_strides` | `compact_strides(shape)` | the strides of a fresh row-major array | 8 |
| 2 | `03.offset` | `element_offset(index, strides, offset)` | where one element sits in the buffer | 8 |
| 3 | `03.slice_view` | `slice_view(shape, strides, offset, key)` | the layout of `a[key]` | 22 |
| 4 | `03.permute` | `permute(shape, strides, axes)` | transpose and permute | 8 |
| 5 | `03.broadcast_to` | `broadcast_to(shape, strides, new_shape)` | broadcasting with stride 0 | 12 |
| 6 | `03.reshape` | `reshape_strides(shape, strides, new_shape)` | reshape without copying, or `None` | 22 |
| 7 | `03.compact` | `compact(buffer, shape, strides, offset)` | copy a view into a fresh buffer | 12 |
| | | two self-check questions | | 8 |

**Why a framework engineer cares.** The recipe decides what is free and what costs memory.
`x.T`, `x[:, ::2]` and `x.expand(1000, 3)` allocate nothing. `x.T.reshape(-1)` has to copy
every element. A 1024×1024 float32 matrix takes 4,194,304 bytes, so one careless copy in a
training step costs 4 MiB of memory and the time to move it. Kernels care too: most of them
want their inputs laid out in one way. Knowing when `.contiguous()` does nothing and when it
copies everything is part of daily work on a framework. PyTorch's error
*"view size is not compatible with input tensor's size and stride"* comes straight from this
chapter.

**What you need.** Python and basic numpy (arrays, `.shape`, slicing). Nothing from chapter 02
is needed in depth. If you skipped it, mini's `Tensor` and autograd come from the catch-up
reference, so everything here works.

**Time.** 2–3 hours.

**How the exercises work.** Each exercise cell starts with `@implement("03.…")`. Running the
cell registers your function in mini, and from then on mini's own views call your code. The
test cell after it runs a few visible checks. Hidden tests run more cases when the notebook is
graded. Some demos need an exercise you have not finished yet; they print a note instead of
failing, so you can always run the notebook top to bottom.
"""))
    add(demo("setup", SETUP))

    # ------------------------------------------------------------------ 1. flat memory
    add(md(r"""
## 1. Flat memory

Memory is one long row of bytes, each with a numeric address. A `float32` number takes 4 of
them. Whatever its dimensions, an array keeps its numbers in one contiguous run of bytes:
its **buffer**. Rows, columns and channels exist only in how we read that run.

The first napkin formula of the chapter follows: a compact array takes

$$\text{bytes} = \text{number of elements} \times \text{bytes per element}.$$

A `[1024, 1024]` float32 matrix has 1,048,576 elements × 4 bytes = **4,194,304 bytes** (4 MiB).
mini counts every buffer it allocates, so you can check a formula like this one against
the machine. `track_allocations()` reports how many buffers were created inside a `with`
block, and how many bytes they hold.
"""))
    add(demo("demo_flat_memory", r'''
x = mini.zeros(1024, 1024)           # float32 by default
print(f"{x.numel():,} elements x {x.element_size()} bytes = {x.numel() * x.element_size():,} bytes")
print(f"napkin formula:            {nbytes((1024, 1024), itemsize=4):,} bytes")

with track_allocations() as stats:
    y = mini.zeros(1024, 1024)
print("measured by mini:         ", stats)
'''))

    # ------------------------------------------------------------------ 2. shape strides offset
    add(md(r"""
## 2. Shape, strides and offset

Three pieces of metadata turn a flat buffer into an n-dimensional array:

- **shape**: the length of each axis, e.g. `(2, 3)`;
- **strides**: for each axis, how many elements to skip in the buffer to move one step along
  that axis;
- **offset**: the buffer position of element `[0, 0, …]`.

mini counts strides in **elements**, as PyTorch's `.stride()` does. numpy counts them in
**bytes** (`a.strides`); divide by the item size to compare.

**Row-major or column-major.** For the 2×3 matrix `[[a, b, c], [d, e, f]]` there are two
common ways to lay the six numbers out:

```
row-major (C order)          column-major (Fortran order)
buffer:  a b c d e f         buffer:  a d b e c f
strides: (3, 1)              strides: (1, 2)
```

In row-major order the **last** axis is the contiguous one. The next element of a row is 1
position further on, and the next row starts 3 positions further on (one whole row). In
column-major order, which BLAS, LAPACK and MATLAB use, the **first** axis is contiguous.
mini, numpy and PyTorch create row-major arrays by default. For row-major order the general
rule is:

$$\text{stride}_i = \prod_{k > i} \text{shape}_k \qquad (\text{the last axis has stride } 1).$$
"""))
    add(demo("demo_orders", r'''
a = np.arange(6, dtype=np.float32).reshape(2, 3)      # row-major
f = np.asfortranarray(a)                             # the same values, column-major
for name, arr in [("row-major   ", a), ("column-major", f)]:
    in_elements = tuple(s // arr.itemsize for s in arr.strides)
    print(f"{name}: numpy strides {arr.strides} bytes = {in_elements} elements;",
          "buffer order:", arr.ravel(order="K"))
'''))
    add(md(r"""
### Exercise 1 — `compact_strides` (8 points)

Return the row-major strides, in elements, of a fresh array of the given shape, as a tuple of
Python ints. Start at the last axis, whose stride is 1, and work towards the first. Two edge
cases: a 0-d array (shape `()`) has no strides, so return `()`. An axis of length 0 counts as
length 1, so every stride stays positive (a convention; an empty array reads nothing anyway).
"""))
    name, src = ex["03.compact_strides"]
    add(solution("03.compact_strides", src))
    add(test("03.compact_strides", name, r'''
expect(compact_strides((2, 3)), (3, 1), "compact_strides((2, 3))",
       "(1, 2) is column-major; in row-major order the LAST axis has stride 1")
expect(compact_strides((1024, 1024)), (1024, 1), "compact_strides((1024, 1024))",
       "moving one row down skips a whole row of 1024 elements")
expect(compact_strides((2, 3, 4)), (12, 4, 1), "compact_strides((2, 3, 4))",
       "the stride of axis i is the product of the lengths of the axes AFTER i")
expect(compact_strides(()), (), "compact_strides(())", "a 0-d array has no axes, so no strides")
print("visible checks passed")
'''))
    add(md(r"""
mini gives every fresh tensor exactly these strides. (It uses a trusted copy of this rule
for that, so creating a tensor never depends on an unfinished exercise.) Compare:
"""))
    add(demo("demo_fresh_strides", r'''
with needs_exercises():
    for shape in [(2, 3), (4, 5, 6), (7,)]:
        t = mini.zeros(*shape)
        print(f"mini.zeros{shape}.stride() = {t.stride()}    compact_strides({shape}) = {compact_strides(shape)}")
'''))

    # ------------------------------------------------------------------ 3. index -> offset
    add(md(r"""
## 3. From an index to a buffer position

With the strides in hand, finding an element is one multiply-add per axis:

$$\text{position}(i_0, i_1, \dots) = \text{offset} + i_0 s_0 + i_1 s_1 + \cdots$$

In the 2×3 row-major matrix (strides `(3, 1)`, offset 0), element `[1, 2]` sits at
0 + 1·3 + 2·1 = **5**. Now read the same buffer with shape `(3, 2)` and strides `(1, 3)`:
element `[2, 1]` sits at 2·1 + 1·3 = 5 as well. That second layout is the **transpose**. It
reads the same memory and only walks it in a different order. Section 5 comes back to it.

### Exercise 2 — `element_offset` (8 points)

Return the buffer position of the element at `index`, a tuple of non-negative ints with one
entry per axis. If `index` and `strides` have different lengths, raise `ValueError`, because
`zip` would silently drop the extra entries.
"""))
    name, src = ex["03.offset"]
    add(solution("03.offset", src))
    add(test("03.offset", name, r'''
expect(element_offset((1, 2), (3, 1), 0), 5, "element_offset((1, 2), (3, 1), 0)",
       "position = offset + index[0]*strides[0] + index[1]*strides[1]")
expect(element_offset((2, 1), (1, 3), 0), 5, "element_offset((2, 1), (1, 3), 0)",
       "the transpose reads the same element: 2*1 + 1*3")
expect(element_offset((1, 1), (4, 1), 1), 6, "element_offset((1, 1), (4, 1), 1)",
       "add the offset: a view need not start at buffer position 0")
expect(element_offset((), (), 7), 7, "element_offset((), (), 7)",
       "a 0-d array has one element, at the offset")
expect_raises(ValueError, element_offset, (1, 2), (3,), 0,
              hint="check that index and strides have the same length")
print("visible checks passed")
'''))
    add(md(r"""
Your function against numpy: we take a 3×4 buffer `0, 1, …, 11` and read it through the
transposed layout (shape `(4, 3)`, strides `(1, 4)`). Since each value equals its own
position, the result shows exactly which positions your formula picks.
"""))
    add(demo("demo_offset", r'''
with needs_exercises():
    buffer = np.arange(12, dtype=np.float32)
    mine = np.array([[buffer[element_offset((i, j), (1, 4), 0)] for j in range(3)] for i in range(4)])
    print(mine)
    print("equals numpy's transpose:", np.array_equal(mine, buffer.reshape(3, 4).T))
'''))

    # ------------------------------------------------------------------ 4. slicing
    add(md(r"""
## 4. Views: new metadata, no new memory

A **view** is a new (shape, strides, offset) over the *same* buffer. Making one copies no
data and allocates nothing, whatever the size of the array. Basic indexing, `a[key]`, always
gives a view. Here is what each kind of key item does to its axis:

| key item | the axis… | stride | offset grows by |
|---|---|---|---|
| int `i` | disappears (negative `i` counts from the end: use `i + length`; out of range → `IndexError`) | — | `i · stride` |
| slice `start:stop:step` | stays, with length `len(range(start, stop, step))` | `stride · step` | `start · stride` (if the result is not empty) |
| `None` | a new axis of length 1 is inserted | 0 (never used) | 0 |
| `...` | stands for as many full slices `:` as needed | | |

Axes that the key does not name are kept whole. Python does the bookkeeping of slice bounds
for you: `slice(start, stop, step).indices(length)` fills in defaults, resolves negative
bounds and clamps them to the axis, and `len(range(start, stop, step))` counts the elements.

**Worked example.** `A` is 3×4, row-major: strides `(4, 1)`, offset 0. Then `A[0:2, 1:3]`
keeps rows 0–1 (length 2, stride 4) and columns 1–2 (length 2, stride 1), starting at
0·4 + 1·1 = 1. Its layout is shape `(2, 2)`, strides `(4, 1)`, offset **1**. Two more:
`A[:, ::2]` has strides `(4, 2)`, and `A[::-1]` has strides `(-4, 1)` with offset 8 (it
starts at the last row and walks backwards).

### Exercise 3 — `slice_view` (22 points)

The biggest exercise of the chapter. Handle the key items one at a time, walking the axes
from left to right. It helps to first expand `...` (or add one at the end when there is
none) so that the key names every axis. Raise `IndexError` for an int out of range, for too
many indices, or for two ellipses. Raise `ValueError` for a step of 0.
"""))
    name, src = ex["03.slice_view"]
    add(solution("03.slice_view", src))
    add(test("03.slice_view", name, r'''
A = ((3, 4), (4, 1), 0)   # a 3x4 row-major array: shape, strides, offset
expect(slice_view(*A, (slice(0, 2), slice(1, 3))), ((2, 2), (4, 1), 1), "slice_view(*A, A[0:2, 1:3])",
       "rows 0-1 and columns 1-2: the offset is 0*4 + 1*1 = 1, the strides do not change")
expect(slice_view(*A, (slice(None), slice(None, None, 2))), ((3, 2), (4, 2), 0),
       "slice_view(*A, A[:, ::2])", "a step multiplies the stride; the length is len(range(0, 4, 2))")
expect(slice_view(*A, slice(None, None, -1)), ((3, 4), (-4, 1), 8), "slice_view(*A, A[::-1])",
       "a negative step starts at the last row (offset 2*4) and walks backwards (stride -4)")
expect(slice_view(*A, (1, -1)), ((), (), 7), "slice_view(*A, A[1, -1])",
       "an int drops its axis; -1 is the last column, 1*4 + 3*1 = 7")
expect(slice_view(*A, (None, Ellipsis, 0)), ((1, 3), (0, 4), 0), "slice_view(*A, A[None, ..., 0])",
       "None inserts an axis of length 1 (stride 0); ... keeps the rows; 0 picks the first column")
expect_raises(IndexError, slice_view, *A, (3,), hint="row 3 does not exist in a 3-row array")
print("visible checks passed")
'''))
    add(md(r"""
Now mini's own indexing runs on your `slice_view`. Below are three views of one 3×4 tensor,
the bytes they allocated together, and a picture of which buffer cells each view reads. The number in a cell is the order in which the view visits it.
"""))
    add(demo("demo_slices", r'''
with needs_exercises():
    A = mini.tensor(np.arange(12, dtype=np.float32).reshape(3, 4))   # buffer 0, 1, ..., 11
    views = {"A": A}
    with track_allocations() as stats:
        views["A[0:2, 1:3]"] = A[0:2, 1:3]
        views["A[:, ::2]"] = A[:, ::2]
        views["A[::-1, 1]"] = A[::-1, 1]
    for label, v in views.items():
        print(f"{label:12s} {layout(v)}")
    print("bytes allocated by the three views:", stats.bytes)
    show_views(views)
    plt.show()
'''))

    # ------------------------------------------------------------------ 5. permute
    add(md(r"""
## 5. Transpose and permute: reorder the strides

Transposing moves no data: it swaps the roles of the axes. The 2×3 row-major matrix has
strides `(3, 1)`, and its transpose is a 3×2 view with strides **`(1, 3)`** over the same
buffer. Section 3 checked this by hand. In general, `permute(axes)` builds new axis `i` from
old axis `axes[i]`:

```
new_shape[i]   = shape[axes[i]]
new_strides[i] = strides[axes[i]]
```

The offset does not change. PyTorch's `x.T` reverses all axes, and `x.transpose(0, 1)` swaps
two of them; both are special cases of `permute`.

### Exercise 4 — `permute` (8 points)

Negative entries in `axes` count from the end. Raise `ValueError`, naming `axes` and the
rank, unless `axes` is a permutation of `0 … ndim-1`.
"""))
    name, src = ex["03.permute"]
    add(solution("03.permute", src))
    add(test("03.permute", name, r'''
expect(permute((2, 3), (3, 1), (1, 0)), ((3, 2), (1, 3)), "permute((2, 3), (3, 1), (1, 0))",
       "the transpose of a 2x3 row-major array has shape (3, 2) and strides (1, 3)")
expect(permute((2, 3, 4), (12, 4, 1), (2, 0, 1)), ((4, 2, 3), (1, 12, 4)),
       "permute((2, 3, 4), (12, 4, 1), (2, 0, 1))",
       "new axis i is old axis axes[i]; did you apply the inverse permutation?")
expect(permute((2, 3), (3, 1), (-1, -2)), ((3, 2), (1, 3)), "permute((2, 3), (3, 1), (-1, -2))",
       "-1 is the last axis")
expect_raises(ValueError, permute, (2, 3), (3, 1), (0, 0), hint="(0, 0) lists axis 0 twice")
print("visible checks passed")
'''))
    add(md(r"""
On mini: transpose a 2×3 tensor, look at its layout, and write through the view. The write
shows up in the original, because there is only one buffer.
"""))
    add(demo("demo_transpose", r'''
with needs_exercises():
    x = mini.tensor([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
    with track_allocations() as stats:
        y = x.T
    print("x:  ", layout(x))
    print("x.T:", layout(y), "| contiguous:", y.is_contiguous(), "| bytes allocated:", stats.bytes)
    y[2, 1] = -1.0                       # element [2, 1] of the transpose ...
    print("x after y[2, 1] = -1:\n", x)  # ... is element [1, 2] of x
    show_views({"x": x, "x.T": y})
    plt.show()
'''))
    add(md(r"""
### Self-check: what is a view? (4 points)

`x` is a contiguous 2×3 float32 tensor and `y = x.T`. Which statement is true?

- **A.** `y` owns a new buffer that holds the six values in transposed order.
- **B.** `y` shares `x`'s buffer and only its shape, strides and offset are new, so
  `y[2, 1] = 0` changes `x[1, 2]`.
- **C.** `y` shares the buffer only until something writes to `y`; then mini copies it
  (copy-on-write).
- **D.** Because `y` is a view, `y.reshape(-1)` is a view as well.

Make `answer_views` return your letter as a string, e.g. `"A"`.
"""))
    add(solution("03.quiz_views", r'''
def answer_views():
    """Return "A", "B", "C" or "D"."""
    ### BEGIN SOLUTION
    return "B"
    ### END SOLUTION
'''))
    add(test("03.quiz_views", "answer_views", r'''
got = answer_views()
assert isinstance(got, str) and got.strip().upper() in ("A", "B", "C", "D"), \
    f"answer_views() should return one of 'A', 'B', 'C', 'D', got {got!r}"
print("answer recorded")
'''))

    # ------------------------------------------------------------------ 6. broadcast
    add(md(r"""
## 6. Broadcasting: stride 0 repeats an element

Adding a bias `b` of shape `(3,)` to a `(4, 3)` matrix uses `b` as if it were four stacked
copies of itself. No copy is made. Along the new axis the stride is **0**: stepping along it
does not move in memory, so every row reads the same three numbers.

The rules, in the order you apply them:

1. Align the two shapes **at the right**: the last axes pair up, and the missing leading
   axes of the smaller shape are new.
2. A new leading axis gets stride 0.
3. An axis of length 1 that grows to length n gets stride 0.
4. An axis whose length already matches keeps its stride.
5. Anything else cannot be broadcast: raise `ValueError` naming both shapes.

Examples: `b` with shape `(3,)` and strides `(1,)` viewed as `(4, 3)` gets strides `(0, 1)`.
A column with shape `(4, 1)` and strides `(1, 1)` viewed as `(4, 3)` gets `(1, 0)`. A 0-d scalar
viewed as any shape gets all zeros.

### Exercise 5 — `broadcast_to` (12 points)

Return only the new strides; the caller already knows the new shape, and the offset does not
change.
"""))
    name, src = ex["03.broadcast_to"]
    add(solution("03.broadcast_to", src))
    add(test("03.broadcast_to", name, r'''
expect(broadcast_to((3,), (1,), (4, 3)), (0, 1), "broadcast_to((3,), (1,), (4, 3))",
       "the new leading axis must have stride 0, so all four rows read the same elements")
expect(broadcast_to((4, 1), (1, 1), (4, 3)), (1, 0), "broadcast_to((4, 1), (1, 1), (4, 3))",
       "the length-1 axis that grows gets stride 0; the matching axis keeps its stride")
expect(broadcast_to((), (), (2, 3)), (0, 0), "broadcast_to((), (), (2, 3))",
       "a 0-d scalar broadcasts to any shape with all strides 0")
expect(broadcast_to((3,), (1,), (3, 3)), (0, 1), "broadcast_to((3,), (1,), (3, 3))",
       "align the shapes at the RIGHT: the existing axis is the LAST one")
expect_raises(ValueError, broadcast_to, (3,), (1,), (4,), hint="length 3 cannot become 4")
print("visible checks passed")
'''))
    add(md(r"""
On mini: a row of 3 numbers seen as 1,000 rows costs nothing. An elementwise operation with a
broadcast operand allocates its output and nothing else. In the picture, a cell marked ×4 is
read four times, once per row.
"""))
    add(demo("demo_broadcast", r'''
with needs_exercises():
    b = mini.tensor([10.0, 20.0, 30.0])
    with track_allocations() as stats:
        B = b.expand(1000, 3)
    print("b.expand(1000, 3):", layout(B), "| bytes allocated:", stats.bytes,
          f"(a real 1000x3 copy would be {nbytes((1000, 3)):,})")
    M = mini.ones(1000, 3)
    with track_allocations() as stats:
        out = M + b                     # b is broadcast with stride 0 inside the kernel
    print("M + b allocated", stats, "= only the output")
    show_views({"b": b, "b.expand(4, 3)": b.expand(4, 3)})
    plt.show()
'''))

    # ------------------------------------------------------------------ 7. reshape
    add(md(r"""
## 7. Reshape: a view when the strides allow it, a copy otherwise

`reshape` keeps the elements in row-major order and gives them a new shape. For a contiguous
array this is always possible without copying: the new shape gets compact strides over the
same buffer. For a view it may be impossible. Take `A.T`, the transpose of the 3×4 array:
shape `(4, 3)`, strides `(1, 4)`. In row-major order it reads the positions

```
0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11
```

Flattening it to shape `(12,)` would need a single stride `s` with positions `0, s, 2s, …`.
No such `s` exists, so **`A.T.reshape(-1)` must copy**.

**The rule.** Match the old axes and the new axes in groups whose element counts agree, from
left to right. For example, (4, 3) → (2, 2, 3) pairs old `4` with new `2, 2`, and old `3`
with new `3`. Axes of length 1 never matter; skip them. A group is fine when its old axes are
*contiguous with each other*:

$$\text{stride}[k] = \text{stride}[k+1] \cdot \text{shape}[k+1] \quad \text{for consecutive old axes } k, k+1 \text{ in the group}.$$

If a group fails, return `None`. Otherwise lay out the new axes of the group from the
inside: the innermost new axis gets the stride of the innermost old axis, and each new axis
further out multiplies by the length of the one inside it.

Worked examples on `A.T` (strides `(1, 4)`):
- → `(12,)`: one group {4, 3}; is `1 == 4 · 3`? No → `None` (copy).
- → `(2, 2, 3)`: groups {4} → {2, 2} and {3} → {3}. A single old axis is always fine.
  Splitting it gives strides `(2, 1)`, and the 3 keeps stride 4, so the answer is
  `(2, 1, 4)`: a view.

mini's `reshape` calls your function and copies (with `compact`, exercise 7) only when it
returns `None`. `view` raises an error instead of copying, as in PyTorch.

### Exercise 6 — `reshape_strides` (22 points)

`new_shape` contains no `-1` (mini resolves it before calling you), and it has as many
elements as `shape`. Arrays with 0 or 1 elements can always be viewed; give them compact
strides. Your `compact_strides` from exercise 1 is handy here.
"""))
    name, src = ex["03.reshape"]
    add(solution("03.reshape", src))
    add(test("03.reshape", name, r'''
expect(reshape_strides((3, 4), (4, 1), (12,)), (1,), "reshape_strides((3, 4), (4, 1), (12,))",
       "a contiguous array flattens as a view with stride 1")
expect(reshape_strides((3, 4), (4, 1), (2, 6)), (6, 1), "reshape_strides((3, 4), (4, 1), (2, 6))",
       "a contiguous array takes the compact strides of the new shape")
expect(reshape_strides((4, 3), (1, 4), (12,)), None, "reshape_strides((4, 3), (1, 4), (12,))",
       "A.T reads positions 0, 4, 8, 1, ...: no single stride does that, so return None (copy)")
expect(reshape_strides((4, 3), (1, 4), (2, 2, 3)), (2, 1, 4), "reshape_strides((4, 3), (1, 4), (2, 2, 3))",
       "splitting the first axis of A.T is a view: do not give up on every non-contiguous input")
expect(reshape_strides((4, 3), (6, 2), (2, 2, 3)), (12, 6, 2), "reshape_strides((4, 3), (6, 2), (2, 2, 3))",
       "a[:, ::2] of a 4x6 array: build the new strides from the old ones, not compact strides")
print("visible checks passed")
'''))
    add(md(r"""
On mini: the same three reshapes. `view` refuses to copy; `reshape` copies when your function
says `None`. The copy itself is `compact`, exercise 7, so the last line needs that one too.
"""))
    add(demo("demo_reshape", r'''
with needs_exercises():
    A = mini.tensor(np.arange(12, dtype=np.float32).reshape(3, 4))   # buffer 0, 1, ..., 11
    for label, make in [("A.view(2, 6)", lambda: A.view(2, 6)),
                        ("A.T.view(2, 2, 3)", lambda: A.T.view(2, 2, 3)),
                        ("A.T.view(-1)", lambda: A.T.view(-1))]:
        with track_allocations() as stats:
            try:
                r = make()
            except NotImplementedError:      # an unfinished exercise: let needs_exercises report it
                raise
            except RuntimeError as e:        # what view() raises when only a copy would do
                print(f"{label:18s} -> RuntimeError: {e}")
                continue
        print(f"{label:18s} {layout(r):46s} bytes allocated: {stats.bytes}")
    with track_allocations() as stats:
        r = A.T.reshape(-1)
    print(f"{'A.T.reshape(-1)':18s} {layout(r):46s} bytes allocated: {stats.bytes} (a copy)")
'''))

    # ------------------------------------------------------------------ 8. compact
    add(md(r"""
## 8. Contiguity and `compact()`

An array is **contiguous** (row-major compact) when its strides are the compact strides of its
shape, ignoring axes of length 1. Kernels written in C++ or CUDA usually assume this layout:
they walk the buffer with one pointer. `x.contiguous()` returns `x` itself when it is already
contiguous and a compact copy otherwise. The copy is `compact`: visit the elements of the view
in row-major order and write them into a new flat buffer.

A Python loop over the elements is correct but slow (about a microsecond per element). Let
numpy do the loop instead:

1. For each axis, `np.arange(length) * stride` gives that axis's contribution to the buffer
   position.
2. Reshape each contribution so it lies along its own axis (length 1 on the others), and add
   them all to the offset. numpy broadcasting turns the sum into an array of the view's shape
   that holds every element's buffer position.
3. Gather `buffer[positions.reshape(-1)]`: one new array.

### Exercise 7 — `compact` (12 points)

Return a new 1-D numpy array of the buffer's dtype, never a view of `buffer`.
"""))
    name, src = ex["03.compact"]
    add(solution("03.compact", src))
    add(test("03.compact", name, r'''
buffer = np.arange(12, dtype=np.float32)
got = compact(buffer, (4, 3), (1, 4), 0)
assert isinstance(got, np.ndarray) and got.shape == (12,) and got.dtype == np.float32, \
    f"compact should return a 1-D float32 numpy array of 12 elements, got {type(got).__name__} " \
    f"{getattr(got, 'shape', '')} {getattr(got, 'dtype', '')}"
assert got.tolist() == [0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11], \
    f"compact of A.T should read 0, 4, 8, 1, ... (row-major order of the VIEW), got {got.tolist()}"
got = compact(buffer, (2, 2), (4, 1), 1)
assert got.tolist() == [1, 2, 5, 6], \
    f"compact of A[0:2, 1:3] should be [1, 2, 5, 6], got {got.tolist()}: did you start at the offset?"
got = compact(buffer, (2, 3), (0, 1), 4)
assert got.tolist() == [4, 5, 6, 4, 5, 6], \
    f"a broadcast view (stride 0) repeats its row: expected [4, 5, 6, 4, 5, 6], got {got.tolist()}"
assert not np.shares_memory(compact(buffer, (12,), (1,), 0), buffer), \
    "compact must copy into a new buffer, not return a view of the old one"
print("visible checks passed")
'''))
    add(md(r"""
On mini: `.contiguous()` of a transposed tensor copies once. Calling it again on the result
costs nothing.
"""))
    add(demo("demo_contiguous", r'''
with needs_exercises():
    A = mini.tensor(np.arange(12, dtype=np.float32).reshape(3, 4))   # buffer 0, 1, ..., 11
    y = A.T
    with track_allocations() as first:
        z = y.contiguous()
    with track_allocations() as second:
        z2 = z.contiguous()
    print("A.T:             ", layout(y), "| contiguous:", y.is_contiguous())
    print("A.T.contiguous():", layout(z), "| contiguous:", z.is_contiguous(), "| bytes:", first.bytes)
    print("again:            same tensor:", z2 is z, "| bytes:", second.bytes)
    print("values match numpy:", np.array_equal(z.numpy(), np.arange(12.0).reshape(3, 4).T))
'''))
    add(md(r"""
### Self-check: the price of a reshape (4 points)

`x` is a contiguous 1000×1000 float32 tensor. How many bytes does `x.T.reshape(-1)` allocate?
Make `answer_copy_bytes` return your number as an int.
"""))
    add(solution("03.quiz_copy_bytes", r'''
def answer_copy_bytes():
    """Return the number of bytes x.T.reshape(-1) allocates (an int)."""
    ### BEGIN SOLUTION
    return 4_000_000
    ### END SOLUTION
'''))
    add(test("03.quiz_copy_bytes", "answer_copy_bytes", r'''
got = answer_copy_bytes()
assert isinstance(got, int), f"answer_copy_bytes() should return an int, got {got!r}"
print("answer recorded")
'''))

    # ------------------------------------------------------------------ 9. napkin widget
    add(md(r"""
## 9. Napkin math: what does a chain of views cost?

The model of this chapter fits in one line. **A step that is a view costs 0 bytes. A step that
copies costs (number of elements) × (bytes per element).** Predict the bytes this chain
allocates before you run anything:

```python
x = mini.zeros(1000, 1000)   # float32
y = x.T
z = y[::2]
w = z.reshape(-1)
v = w.contiguous()
```

Write your estimate in the cell below (or type it into the box if widgets are shown), then
run it. You see the model's answer, step by step, next to mini's allocation counter measured
on **your** implementation, with the ratio and a sentence on why they agree or not.
"""))
    add(free(r'''
my_estimate = None   # your estimate in bytes, e.g. 1_234_567
napkin_chain(estimate=my_estimate)
'''))
    add(md(r"""
Try your own chains. Steps are tuples: `("T",)`, `("permute", axes)`, `("getitem", key)`,
`("expand", shape)`, `("reshape", shape)`, `("contiguous",)`. Here is a batch of 64 RGB
images stored NCHW, turned into one row per pixel: predict first.
"""))
    add(free(r'''
napkin_chain(estimate=None, shape=(64, 3, 32, 32),
             steps=[("permute", (0, 2, 3, 1)), ("reshape", (-1, 3)), ("contiguous",)])
'''))

    # ------------------------------------------------------------------ 10. ops on views
    add(md(r"""
## 10. Computing on strided inputs

Views would be of little use if every operation first had to copy them. mini's kernels read
their inputs *through* the strides, so an elementwise operation or a reduction on a
transposed, sliced or broadcast input allocates only its output. Below, `A.T * 2 + b` on a
512×256 matrix allocates two outputs of 524,288 bytes each. Calling `.contiguous()` first
would add a third buffer of the same size.
"""))
    add(demo("demo_ops_on_views", r'''
with needs_exercises():
    rng = np.random.default_rng(0)
    A_np = rng.standard_normal((512, 256)).astype(np.float32)
    b_np = rng.standard_normal(512).astype(np.float32)
    A, b = mini.tensor(A_np), mini.tensor(b_np)

    results = {}
    for label, fn in [("A.T * 2 + b", lambda: A.T * 2.0 + b),
                      ("A.T.contiguous() * 2 + b", lambda: A.T.contiguous() * 2.0 + b),
                      ("A.T.sum(1)", lambda: A.T.sum(1)),
                      ("A[::2, ::-1].sum(0)", lambda: A[::2, ::-1].sum(0))]:
        with track_allocations() as stats:
            out = fn()
        results[label] = stats.bytes
        print(f"{label:26s} -> {stats.count} buffers, {stats.bytes:>9,} bytes (output: {out.nbytes:,})")

    assert np.allclose((A.T * 2.0 + b).numpy(), A_np.T * 2 + b_np, atol=1e-5)
    assert np.allclose(A.T.sum(1).numpy(), A_np.T.sum(1), atol=1e-3)
    assert np.allclose(A[::2, ::-1].sum(0).numpy(), A_np[::2, ::-1].sum(0), atol=1e-3)
    print("all results match numpy")

    fig, ax = plt.subplots(figsize=(7, 2.4))
    bars = ax.barh(list(results), [v / 1e6 for v in results.values()], color="#4c72b0")
    ax.bar_label(bars, [f"{v:,} B" for v in results.values()], fontsize=8, padding=3)
    ax.set_xlabel("MB allocated")
    ax.set_title("Strided inputs are read in place: only outputs (and explicit copies) cost memory")
    ax.invert_yaxis()
    fig.tight_layout()
    plt.show()
'''))

    # ------------------------------------------------------------------ 11. payoff
    add(md(r"""
## 11. Payoff: mini on your code

A small image-preprocessing pipeline, run by mini on the functions you wrote. It takes a
batch of 8 RGB images stored NCHW (channels first), moves the channels last, crops the
centre, flips it left to right, flattens it to one row per pixel, and subtracts the mean
colour. Each step is checked against numpy. The allocation counter shows which steps were
free views and which ones had to copy.
"""))
    add(demo("payoff", r'''
with needs_exercises():
    rng = np.random.default_rng(3)
    x_np = rng.random((8, 3, 16, 16), dtype=np.float32)
    x = mini.tensor(x_np)

    steps = [
        ("nhwc = x.permute(0, 2, 3, 1)", lambda t: t.permute(0, 2, 3, 1), lambda a: a.transpose(0, 2, 3, 1)),
        ("crop = nhwc[:, 4:12, 4:12, :]", lambda t: t[:, 4:12, 4:12, :], lambda a: a[:, 4:12, 4:12, :]),
        ("flip = crop[:, :, ::-1]", lambda t: t[:, :, ::-1], lambda a: a[:, :, ::-1]),
        ("pixels = flip.reshape(-1, 3)", lambda t: t.reshape(-1, 3), lambda a: a.reshape(-1, 3)),
        ("mean = pixels.mean(0)", lambda t: t.mean(0), lambda a: a.mean(0)),
    ]
    t, a = x, x_np
    print(f"{'step':32s}{'shape':18s}{'strides':22s}{'bytes':>8s}  matches numpy")
    got, want, copied = {}, {}, []
    for label, f_mini, f_np in steps:
        with track_allocations() as stats:
            t = f_mini(t)
        a = f_np(a)
        name = label.split(" =")[0]
        got[name], want[name] = t, a
        if stats.bytes:
            copied.append(f"{name} ({stats.bytes:,} bytes)")
        ok = np.allclose(t.numpy(), a, atol=1e-5)
        print(f"{label:32s}{str(tuple(t.shape)):18s}{str(t.stride()):22s}{stats.bytes:>8,}  {ok}")

    with track_allocations() as stats:
        centred = got["pixels"] - got["mean"]   # the mean is broadcast over 512 rows, stride 0
    ok = np.allclose(centred.numpy(), want["pixels"] - want["mean"], atol=1e-5)
    copied.append(f"centred ({stats.bytes:,} bytes)")
    print(f"{'centred = pixels - mean':32s}{str(tuple(centred.shape)):18s}"
          f"{str(centred.stride()):22s}{stats.bytes:>8,}  {ok}")
    print()
    print("allocated:", ", ".join(copied))
    print("expected: permute, crop and flip are free views; the reshape of the flipped crop copies")
    print("512 pixels x 3 channels x 4 bytes = 6,144 bytes; mean and centred allocate only their outputs")
'''))
    add(md(r"""
## Recap

Here is what now runs on your code in mini:

- **`compact_strides`**: the layout of a fresh row-major array. The last axis has stride 1,
  and each axis before it steps over everything after it.
- **`element_offset`**: position = offset + Σ index·stride, the one formula behind every
  access.
- **`slice_view`**, **`permute`**, **`broadcast_to`**: views. Only shape, strides and offset
  change, so they cost 0 bytes at any size. Broadcasting is stride 0.
- **`reshape_strides`**: a view when each merged group of axes is contiguous, otherwise `None`.
  mini then copies, and `view()` refuses.
- **`compact`**: the one copy, gathering a view's elements in row-major order into a fresh
  buffer. `.contiguous()` calls it only when the layout is not compact already.

And the napkin rule that comes with them: a view is free, and a copy costs numel × itemsize
(for a 1024×1024 float32 matrix, 4,194,304 bytes). Before each `.contiguous()`,
`.reshape()` or `.T` in a hot loop, you can now tell which of the two it is. The next chapters
build on this layout: kernels that assume contiguous inputs, and im2col, which turns a
convolution into a matrix product by building a strided view of the image and then copying it.
"""))

    return finish_notebook(cells, "ch03")


def main(argv: list[str]) -> int:
    return write_or_check(build(), NOTEBOOK, argv, script=__file__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
