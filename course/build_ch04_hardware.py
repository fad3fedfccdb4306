"""Build course/04_hardware/hardware.ipynb (the nbgrader source notebook of chapter 04, part 1:
hardware on the CPU).

    python course/build_ch04_hardware.py          # write the notebook
    python course/build_ch04_hardware.py --check  # exit 1 if the file is out of date

It lives outside the chapter folder because nbgrader copies everything in
``course/04_hardware/`` into the student release, and this file holds the answers and the
hidden-test cells.  Exercise cells are generated from mini's references
(``mini/backends/cpu/exercises.py`` for the C++ kernels, ``mini/ops/conv.py`` for im2col):
``@exercise`` becomes ``@implement``, the signature, docstring and solution region are copied
verbatim.  The notebook is written without outputs.
"""
from __future__ import annotations

import sys
from pathlib import Path

import nbformat

from grader.checks.ch04_hardware import POINTS   # the checks' points: one source for both
from grader.notebook_build import Cells, exercise_sources, finish_notebook, write_or_check

HERE = Path(__file__).resolve().parent          # course/
ROOT = HERE.parent
NOTEBOOK = HERE / "04_hardware" / "hardware.ipynb"
REFERENCES = (ROOT / "mini" / "backends" / "cpu" / "exercises.py", ROOT / "mini" / "ops" / "conv.py")

# The cell factories, with this chapter's grade-id prefix and points.
CELLS = Cells("04", POINTS)
md, demo, free, solution, test = CELLS.markdown, CELLS.demo, CELLS.free, CELLS.solution, CELLS.test


SETUP = r'''
import time
from contextlib import contextmanager

import numpy as np
import matplotlib.pyplot as plt

import mini
from mini.exercises import implement
from mini.utils.cpp_extension import load_inline, CompileError, get_max_threads
from mini.utils import profiler
from mini.napkin import roofline, measure


@contextmanager
def needs_exercises():
    """Run a demo.  If it reaches an exercise you have not finished (or C++ that does not
    compile yet), print a note instead of failing, so the notebook runs top to bottom."""
    try:
        yield
    except NotImplementedError as e:
        slot = getattr(e, "slot_id", None)
        print(f"-> finish exercise {slot} to run this demo" if slot
              else f"-> this demo needs an exercise you have not finished yet ({e})")
    except CompileError as e:
        print(f"-> your C++ does not compile yet:\n{e}")


def expect_close(got, want, what, hint, rtol=1e-5, atol=1e-6):
    """A visible check on arrays: type, shape, dtype, values."""
    assert type(got) is np.ndarray, f"{what} should return a numpy array, got {type(got).__name__}"
    want = np.asarray(want)
    assert got.shape == want.shape, f"{what}: expected shape {want.shape}, got {got.shape}. {hint}"
    assert got.dtype == want.dtype, f"{what}: expected dtype {want.dtype}, got {got.dtype}. {hint}"
    assert np.allclose(got, want, rtol=rtol, atol=atol), (
        f"{what}: values differ (largest difference {np.max(np.abs(got - want)):.3g}).\n"
        f"  Likely mistake: {hint}")


def gbs(nbytes, seconds):
    return nbytes / seconds / 1e9

print(f"OpenMP threads available to your kernels: {get_max_threads()}")
'''


# The "What you build" table; points come from POINTS.
EXERCISES = [
    ("04.omp_add", "omp_add(a, b)", "an OpenMP elementwise kernel"),
    ("04.omp_sum", "omp_sum(x)", "a parallel reduction"),
    ("04.tiled_matmul", "tiled_matmul(a, b)", "a cache-blocked, parallel matrix product"),
    ("04.fused_add_relu", "fused_add_relu(a, b)", "a fused kernel, and its measured speedup"),
    ("04.im2col_view", "im2col_view(xp, k, s)", "receptive fields as a 6-D view, no copy"),
    ("04.im2col", "im2col_matrix(x, k, s, p)", "the im2col matrix (the copy)"),
    ("04.col2im", "col2im_matrix(cols, ...)", "its adjoint, which accumulates"),
    ("04.conv2d_forward", "conv2d_forward(x, w, b, s, p)", "convolution as one GEMM"),
    ("04.conv2d_backward", "conv2d_backward(x, w, g, s, p)", "its three gradients"),
    ("04.conv_input_grad_flipped", "input_grad_by_flipped_kernel(g, w, p)",
     "the input gradient as a convolution with the flipped kernel"),
]
QUIZ_SLOTS = ("04.quiz_gemm_cost", "04.quiz_chain_traffic")


def exercise_table() -> str:
    rows = ["| # | slot | your function | what it is | points |", "|---|------|---------------|------------|-------:|"]
    rows += [f"| {i} | `{slot}` | `{fn}` | {what} | {POINTS[slot]} |"
             for i, (slot, fn, what) in enumerate(EXERCISES, 1)]
    rows.append(f"| | | two napkin questions | FLOPs, bytes, fusion traffic | "
                f"{sum(POINTS[q] for q in QUIZ_SLOTS)} |")
    return "\n".join(rows)


INTRO = r"""
# Chapter 04 — Hardware on the CPU: kernels, caches and the roofline

So far mini's arithmetic has been numpy's. In this chapter you write the arithmetic yourself,
in C++ with OpenMP, compile it from a notebook cell, and plug it into mini. Then you build
convolution the way most CPU and GPU libraries do it: *im2col* turns it into one big matrix
product. Along the way you measure this machine, its memory bandwidth and its matrix rate,
and use them to predict how fast each kernel can possibly be.

**What you build**

{EXERCISE_TABLE}

**Why a framework engineer cares.** A framework is fast when its kernels are. Whether a kernel
is fast depends less on clever code than on two numbers of the machine: how many bytes per
second memory delivers, and how many FLOPs per second the cores can do. Elementwise ops are
limited by the first, big matrix products by the second. Knowing which limit applies tells
you what to optimize, and what is already as fast as it can be.

**What you need.** Python and numpy; chapter 03's strides (if you skipped it, mini's catch-up
reference covers it). No C++ experience beyond loops and pointers: every kernel here is a
loop over a flat array. A C++ compiler (g++ or clang++) must be installed; `make lab` checks.

**Time.** 3–4 hours.

**How the exercises work.** Each exercise cell starts with `@implement("04.…")`. For the C++
exercises, the function you write holds the C++ source as a string and compiles it with
`load_inline`, which caches the build: only the first call (per change of the source)
compiles, later calls cost microseconds. Demos that need an unfinished exercise print a note.
"""


def build() -> nbformat.NotebookNode:
    ex = exercise_sources(REFERENCES)
    cells = []
    add = cells.append

    def exercise_cell(slot):
        add(solution(slot, ex[slot][1]))

    add(md(INTRO.replace("{EXERCISE_TABLE}", exercise_table())))
    add(demo("setup", SETUP))

    # ------------------------------------------------------------------ 1. the machine
    add(md(r"""
## 1. Measure the machine

Two numbers describe a machine well enough for napkin math:

- **memory bandwidth** *B*: bytes per second between memory and the cores. We measure it as
  STREAM does: copy an array much larger than the caches, and count the bytes read plus the
  bytes written.
- **peak compute** *P*: floating-point operations (FLOPs) per second. We measure it with a
  large float32 matrix product from numpy's BLAS, the best-tuned code on the machine.

Their ratio *P / B*, in FLOP per byte, is the **ridge point**. An operation that does fewer
FLOPs per byte it moves than the ridge point cannot keep the cores busy: it is
*memory-bound*. On a datacenter GPU, 67 TFLOP/s over 3.35 TB/s gives a ridge point of 20.
Before running the next cell, guess this laptop-class machine's bandwidth in GB/s.
"""))
    add(demo("machine", r'''
my_bandwidth_guess_gbs = 10       # your guess, in GB/s

bw = measure.copy_bandwidth(64 * 2**20)       # two 64 MiB arrays: far larger than the caches
peak = measure.gemm_rate(512)
ridge = roofline.ridge_point(peak, bw)
print(f"copy bandwidth : {bw / 1e9:7.1f} GB/s   (your guess {my_bandwidth_guess_gbs} GB/s, "
      f"ratio {bw / 1e9 / my_bandwidth_guess_gbs:.2f})")
print(f"GEMM rate      : {peak / 1e9:7.1f} GFLOP/s (float32, 512 x 512, numpy's BLAS)")
print(f"ridge point    : {ridge:7.1f} FLOP/byte  (a 67 TFLOP/s, 3.35 TB/s GPU: "
      f"{roofline.ridge_point(roofline.H100_PEAK_FLOPS, roofline.H100_BANDWIDTH):.0f})")
'''))

    # ------------------------------------------------------------------ 2. roofline of the MLP
    add(md(r"""
## 2. FLOPs, bytes and the roofline of a small MLP

A matrix product [M, K] @ [K, N] does one multiply and one add for each of M·K·N terms:
**2·M·K·N FLOPs**. At best it reads each input once and writes the output once:
**(M·K + K·N + M·N)·4 bytes** in float32. Their ratio is its **arithmetic intensity** (AI).

Write `gemm_cost(m, k, n)` returning `(flops, bytes)` as two ints. For the first layer of a
784→128→10 MLP on a batch of 32 you should get 6,422,528 FLOPs and 518,144 bytes: AI 12.4.
"""))
    add(solution("04.quiz_gemm_cost", r'''
def gemm_cost(m, k, n):
    """(FLOPs, bytes) of a float32 [m, k] @ [k, n] product, as two Python ints."""
    ### BEGIN SOLUTION
    return 2 * m * k * n, (m * k + k * n + m * n) * 4
    ### END SOLUTION
'''))
    add(test("04.quiz_gemm_cost", "gemm_cost", r'''
got = gemm_cost(32, 784, 128)
assert got == (6_422_528, 518_144), f"gemm_cost(32, 784, 128) should be (6422528, 518144), got {got}"
print("gemm_cost: visible checks passed")
'''))
    add(md(r"""
`mini.napkin.roofline` has the whole training step of that MLP. Every op but the two big
products sits far below the ridge point: ReLU does one FLOP per 8 bytes (AI 0.125), 160 times
below a GPU's ridge point. The step totals about 13.1 MFLOP and 1.2 MB; at 100 GFLOP/s and
20 GB/s that is 0.13 ms of compute and 0.06 ms of memory, less than the time Python needs to
dispatch its dozens of ops. mini's profiler counts the same operations.
"""))
    add(demo("mlp_table", r'''
table = roofline.mlp_step_table()
print(f"{'op':<20}{'FLOPs':>12}{'bytes':>10}{'AI':>8}  bound here")
for op in table:
    print(f"{op.name:<20}{op.flops:>12,}{op.bytes:>10,}{op.intensity:>8.3f}  "
          f"{roofline.bound(op.intensity, peak, bw)}")
tot = roofline.table_totals(table)
print(f"total: {tot['flops'] / 1e6:.1f} MFLOP, {tot['bytes'] / 1e6:.1f} MB; "
      f"forward + backward = {tot['step_over_forward']:.3f} x forward")

W1 = mini.randn(784, 128, requires_grad=True)
W2 = mini.randn(128, 10, requires_grad=True)
xb, yb = mini.randn(32, 784), mini.randint(0, 10, (32,))
import mini.nn.functional as F
with profiler.profile() as prof:
    F.cross_entropy((xb @ W1).relu() @ W2, yb).backward()
counts = prof.op_counts()
print("mini's profiler: matrix products", counts.get("MatMul", 0), "forward +",
      counts.get("MatMulBackward0", 0), "backward nodes (3 products: no gradient for x);",
      "ReLU", counts.get("Relu", 0), "+", counts.get("ReluBackward0", 0), ";", prof.num_ops, "ops in all")
print(f"dispatch: {prof.num_ops} ops x {measure.dispatch_time(calls=300) * 1e6:.1f} us per op vs "
      f"{roofline.predicted_time(tot['flops'], tot['bytes'], peak, bw) * 1e6:.0f} us of work")
measure.roofline_plot(table, peak, bw, title="The MLP step on this machine's roofline")
plt.show()
'''))

    # ------------------------------------------------------------------ 3. OpenMP elementwise
    add(md(r"""
## 3. C++ from a cell, and an OpenMP elementwise kernel

`load_inline(name, source, functions=[...])` compiles C++ into a Python module. It puts
`#include <pybind11/numpy.h>`, `<omp.h>` and `namespace py = pybind11;` in front of your source
and generates the bindings for the names in `functions`. A numpy array arrives as
`py::array_t<float>`: `a.data()` is a `const float*` to its first element, `out.mutable_data()`
a `float*`, `a.size()` the number of elements.

One thing pybind11 does **not** do is follow strides: `a.data()[i]` is the i-th float of the
memory block, which is the i-th element of the array only when the array is compact (chapter
03). A transposed view handed to such a loop reads the wrong elements, silently. mini's cpu
backend keeps its buffers compact and 64-byte aligned (a cache line), and every kernel checks
its inputs. Your wrappers do the same: check dtypes and shapes, compact, then call.

`#pragma omp parallel for` splits a loop's iterations among the cores. Iterations must be
independent: each writes its own `out[i]`. A compile error shows your line:
"""))
    add(demo("compile_error", r'''
broken = r"""
float twice(float x) {
    return 2 * y;
}
"""
try:
    load_inline("twice_demo", broken, functions=["twice"])
except CompileError as e:
    print(e)
'''))
    exercise_cell("04.omp_add")
    add(test("04.omp_add", "omp_add", r'''
a = np.arange(12, dtype=np.float32).reshape(3, 4)
b = np.ones((3, 4), np.float32)
expect_close(omp_add(a, b), a + b, "omp_add(a, b)", "out[i] = a[i] + b[i] for every i < n")
expect_close(omp_add(a.T, b.T), a.T + b.T, "omp_add(a.T, b.T)",
             "a transposed view is not compact: np.ascontiguousarray before calling the kernel")
big = np.random.rand(1 << 20).astype(np.float32)
expect_close(omp_add(big, big), big + big, "omp_add on 2**20 elements", "the parallel loop must cover every i")
print("omp_add: visible checks passed")
'''))
    add(md(r"""
**Measure.** An add reads two arrays and writes one: 3·N·4 bytes. It does one FLOP per 12
bytes, far below the ridge point, so the best it can do is the memory bandwidth. Compare your
kernel, numpy and mini's cpu backend against the bandwidth you measured.
"""))
    add(demo("measure_add", r'''
n = 1 << 24                                   # 64 MiB per array
a, b = np.random.rand(n).astype(np.float32), np.random.rand(n).astype(np.float32)
nbytes = 3 * n * 4
ta, tb = mini.tensor(a, device="cpu"), mini.tensor(b, device="cpu")
rows = [("numpy a + b", lambda: a + b), ("mini cpu backend", lambda: ta + tb)]
with needs_exercises():
    omp_add(a[:10], b[:10])
    rows.insert(0, ("your omp_add", lambda: omp_add(a, b)))
for name, fn in rows:
    t = measure.best_time(fn, repeats=3)
    print(f"{name:<18} {t * 1e3:6.1f} ms  {gbs(nbytes, t):6.1f} GB/s  = {gbs(nbytes, t) / (bw / 1e9):.2f} x copy bandwidth")
'''))

    # ------------------------------------------------------------------ 4. reduction
    add(md(r"""
## 4. A parallel reduction, and a data race

A sum is not independent iterations: every iteration updates one `total`. With a plain
`#pragma omp parallel for`, two threads read `total`, each adds its number, and each writes
back: one of the two additions is lost. That is a **data race**; the result is wrong, and
wrong by a different amount on every run. The `reduction(+ : total)` clause gives each thread
a private total and adds the partial totals at the end.

Write `omp_sum` for float64 arrays. The grader runs it with more threads than cores on four
million integers whose exact sum it knows, forty times.
"""))
    exercise_cell("04.omp_sum")
    add(test("04.omp_sum", "omp_sum", r'''
x = np.arange(1, 101, dtype=np.float64)
got = omp_sum(x)
assert type(got) is float, f"omp_sum should return a Python float, got {type(got).__name__}"
assert got == 5050.0, f"omp_sum(1..100) should be 5050.0, got {got}"
big = np.ones(1 << 22)
assert all(omp_sum(big) == float(1 << 22) for _ in range(5)), (
    "omp_sum of 2**22 ones is not always 4194304: a data race? use reduction(+ : total)")
print("omp_sum: visible checks passed")
'''))

    # ------------------------------------------------------------------ 5. tiled matmul
    add(md(r"""
## 5. A tiled, parallel matrix product

The naive triple loop for C = A @ B streams all of B once per row of A. A 1024×1024 float32 B
is 4 MiB, larger than most L2 caches, so B comes from memory again and again. **Tiling** (cache
blocking) works on TILE×TILE blocks: a block of A, a block of B and a block of C fit in the
cache together, and each element loaded is used TILE times before it is evicted. Loop order
inside a tile matters too: with `i, k, j` the innermost loop walks rows of B and C
contiguously, which the compiler vectorizes.

Parallelize the loop over row tiles: each thread owns whole rows of C, so no two threads
write the same element. The sizes need not be multiples of the tile: the last tile of each
loop is partial, `min(start + TILE, size)`.
"""))
    exercise_cell("04.tiled_matmul")
    add(test("04.tiled_matmul", "tiled_matmul", r'''
rng = np.random.default_rng(0)
for m, k, n in [(2, 3, 4), (64, 64, 64), (70, 33, 129)]:
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    expect_close(tiled_matmul(a, b), a @ b, f"tiled_matmul on {(m, k)} @ {(k, n)}",
                 "sizes that are not multiples of the tile need a partial last tile", rtol=1e-4, atol=1e-4)
print("tiled_matmul: visible checks passed")
'''))
    add(demo("measure_matmul", r'''
n = 512
A = np.random.rand(n, n).astype(np.float32)
B = np.random.rand(n, n).astype(np.float32)
TA, TB = mini.tensor(A, device="cpu"), mini.tensor(B, device="cpu")
rows = [("numpy (BLAS)", lambda: A @ B), ("mini cpu backend", lambda: TA @ TB)]
with needs_exercises():
    tiled_matmul(A[:2, :2], B[:2, :2])
    rows.append(("your tiled_matmul", lambda: tiled_matmul(A, B)))
for name, fn in rows:
    t = measure.best_time(fn, repeats=3)
    print(f"{name:<18} {2 * n**3 / t / 1e9:7.1f} GFLOP/s  ({2 * n**3 / t / peak:.2f} x the measured peak)")
print(f"AI of this product: {roofline.gemm_intensity(n, n, n):.0f} FLOP/byte, ridge {ridge:.1f}: compute-bound")
'''))

    # ------------------------------------------------------------------ 6. fusion
    add(md(r"""
## 6. Fusion: fewer passes over memory

`relu(a + b)` in numpy is two passes: the add reads a and b and writes a temporary t, the relu
reads t and writes the result. Both are memory-bound, so time ≈ bytes / bandwidth. A *fused*
kernel computes `max(a[i] + b[i], 0)` in one loop and never writes t.

The simple model of the seed text counts each op of a chain of k one-input elementwise ops as
one read and one write of N elements of b bytes: **2·k·N·b unfused, 2·N·b fused**, so add then
relu moves 4·N·b unfused and 2·N·b fused. Write that model as `chain_traffic(n, k, itemsize,
fused)`. (With two inputs the exact count is 5·N·b against 3·N·b; the measurement below uses
it.)
"""))
    add(solution("04.quiz_chain_traffic", r'''
def chain_traffic(n, k, itemsize, fused):
    """Bytes a chain of k elementwise ops on n elements moves: 2*k*n*itemsize, or
    2*n*itemsize when fused into one kernel (an int)."""
    ### BEGIN SOLUTION
    return 2 * (1 if fused else k) * n * itemsize
    ### END SOLUTION
'''))
    add(test("04.quiz_chain_traffic", "chain_traffic", r'''
assert chain_traffic(1000, 2, 4, False) == 16000, "add then relu, unfused: 2 ops x (read + write) x 1000 x 4 bytes"
assert chain_traffic(1000, 2, 4, True) == 8000, "fused: read once, write once"
print("chain_traffic: visible checks passed")
'''))
    exercise_cell("04.fused_add_relu")
    add(test("04.fused_add_relu", "fused_add_relu", r'''
a = np.array([-2.0, -0.5, 0.5, 3.0], np.float32)
b = np.array([1.0, 1.0, -1.0, -1.0], np.float32)
expect_close(fused_add_relu(a, b), np.maximum(a + b, 0), "fused_add_relu(a, b)",
             "max(a[i] + b[i], 0): add first, then clamp")
print("fused_add_relu: visible checks passed")
'''))
    add(md(r"""
**Measure.** Before running the next cell, write down the speedup you expect from fusing on
arrays of 64 MiB (far larger than the caches), from the traffic alone.
"""))
    add(demo("measure_fusion", r'''
my_fusion_speedup_guess = 2.0     # your estimate: unfused time / fused time

n = 1 << 24
a = np.random.randn(n).astype(np.float32)
b = np.random.randn(n).astype(np.float32)
pred_unfused = roofline.add_relu_bytes(n, 4) / bw
pred_fused = roofline.add_relu_bytes(n, 4, fused=True) / bw
t_numpy = measure.best_time(lambda: np.maximum(a + b, 0), repeats=3)
print(f"numpy relu(a + b): {t_numpy * 1e3:6.1f} ms  (model: {pred_unfused * 1e3:.1f} ms for 5*N*4 bytes at copy bandwidth)")
with needs_exercises():
    fused_add_relu(a[:4], b[:4])
    t_fused = measure.best_time(lambda: fused_add_relu(a, b), repeats=3)
    print(f"your fused kernel: {t_fused * 1e3:6.1f} ms  (model: {pred_fused * 1e3:.1f} ms for 3*N*4 bytes)")
    print(f"speedup: your guess {my_fusion_speedup_guess:.2f} x, predicted from traffic "
          f"{pred_unfused / pred_fused:.2f} x, measured {t_numpy / t_fused:.2f} x")
    print("Measured above the traffic model? numpy runs on one thread, your kernel on all "
          "cores, and numpy also pays for allocating the temporary (first-touch page faults).")
'''))

    # ------------------------------------------------------------------ 7. im2col
    add(md(r"""
## 7. Convolution by im2col

A 2-D convolution slides a kh×kw×C window over the (padded) input and takes a dot product
with each of Cout filters. Written as loops it is six nested loops and runs slowly. *im2col*
rewrites it as **one** matrix product:

1. **a view** with six axes `[N, Ho, Wo, C, kh, kw]` over the padded input: element
   `[n, i, j, c, p, q]` is pixel `(i·sh + p, j·sw + q)` of channel c. Strides alone do it, no
   copy: the `Ho` axis steps `sh` rows, the `kh` axis one row (chapter 03's strides at work).
   The output size is `Ho = (H + 2·ph − kh) // sh + 1` (Wo likewise).
2. **the copy**: reshape that view to a matrix `[N·Ho·Wo, C·kh·kw]`, one row per output pixel.
   Its rows overlap in the input, so this is a real copy, up to kh·kw times the input.
3. **the GEMM**: `cols @ W.reshape(Cout, C·kh·kw).T` gives `[N·Ho·Wo, Cout]`; reshape to
   `[N, Ho, Wo, Cout]` and move Cout to axis 1 (NCHW).

Padding adds ph zero rows at the top **and** the bottom, pw columns at the left **and** right.
"""))
    exercise_cell("04.im2col_view")
    add(test("04.im2col_view", "im2col_view", r'''
xp = np.arange(2 * 3 * 6 * 5, dtype=np.float32).reshape(2, 3, 6, 5)
v = im2col_view(xp, (3, 2), (2, 1))
assert type(v) is np.ndarray and v.shape == (2, 2, 4, 3, 3, 2), (
    f"expected shape (2, 2, 4, 3, 3, 2) = [N, Ho, Wo, C, kh, kw], got {getattr(v, 'shape', v)}: "
    "Ho = (6 - 3) // 2 + 1 = 2, Wo = (5 - 2) // 1 + 1 = 4")
assert np.shares_memory(v, xp), "the result must be a view of xp (as_strided), not a copy"
assert v[1, 1, 2, 2, 1, 0] == xp[1, 2, 1 * 2 + 1, 2 * 1 + 0], "v[n, i, j, c, p, q] must be xp[n, c, i*sh + p, j*sw + q]"
print("im2col_view: visible checks passed")
'''))
    exercise_cell("04.im2col")
    add(test("04.im2col", "im2col_matrix", r'''
x = np.arange(1 * 2 * 4 * 4, dtype=np.float64).reshape(1, 2, 4, 4)
cols = im2col_matrix(x, (3, 3), (1, 1), (1, 1))
assert cols.shape == (16, 18), f"expected (16, 18) = [N*Ho*Wo, C*kh*kw], got {cols.shape}"
assert cols[0, 4] == x[0, 0, 0, 0] and cols[0, 0] == 0, (
    "with padding 1, the first window's centre is pixel (0, 0) and its corner is padding (0)")
print("im2col_matrix: visible checks passed")
'''))
    add(md(r"""
**When im2col hurts.** The matrix holds every input pixel once per window it falls in. Compare
the bytes of the input with the bytes of its im2col matrix:
"""))
    add(demo("im2col_memory", r'''
cases = {"LeNet conv1: 64x1x28x28, 5x5, pad 2": ((64, 1, 28, 28), (5, 5), (1, 1), (2, 2)),
         "ResNet 3x3: 32x64x56x56, pad 1": ((32, 64, 56, 56), (3, 3), (1, 1), (1, 1)),
         "strided 2x2, stride 2: 32x64x56x56": ((32, 64, 56, 56), (2, 2), (2, 2), (0, 0))}
for name, (shape, k, s, p) in cases.items():
    n, c, h, w = shape
    ho, wo = (h + 2 * p[0] - k[0]) // s[0] + 1, (w + 2 * p[1] - k[1]) // s[1] + 1
    x_bytes, col_bytes = n * c * h * w * 4, n * ho * wo * c * k[0] * k[1] * 4
    print(f"{name:<40} input {x_bytes / 2**20:7.1f} MiB  im2col {col_bytes / 2**20:8.1f} MiB  "
          f"({col_bytes / x_bytes:.0f} x)")
print("A 3x3 convolution multiplies the memory by 9, a 5x5 by 25: for large images libraries "
      "tile the im2col or use direct, FFT or Winograd convolutions instead.")
'''))
    exercise_cell("04.conv2d_forward")
    add(test("04.conv2d_forward", "conv2d_forward", r'''
rng = np.random.default_rng(1)
x = rng.standard_normal((2, 3, 7, 6))
w = rng.standard_normal((4, 3, 3, 3))
bias = rng.standard_normal(4)
# an independent oracle: every 3x3 window of the padded input (numpy's sliding view, every
# second one for stride 2) contracted with the kernel, no im2col matrix involved
windows = np.lib.stride_tricks.sliding_window_view(np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))),
                                                   (3, 3), axis=(2, 3))[:, :, ::2, ::2]
want = np.einsum("ncijpq,ocpq->noij", windows, w) + bias[None, :, None, None]
expect_close(conv2d_forward(x, w, bias, (2, 2), (1, 1)), want, "conv2d_forward(stride 2, padding 1)",
             "reshape the GEMM result to [N, Ho, Wo, Cout], then transpose to [N, Cout, Ho, Wo]")
print("conv2d_forward: visible checks passed")
'''))
    add(md(r"""
## 8. The backward pass: col2im

With `cols = im2col(x)` and `out = cols @ Wm.T` (Wm is W as `[Cout, C·kh·kw]`, g the output
gradient as `[N·Ho·Wo, Cout]`), the rules of chapter 02 give:

- `grad_Wm = g.T @ cols`, reshaped to W's shape; the bias gradient sums g over pixels;
- `grad_cols = g @ Wm`, and then **col2im** sends each entry back to the pixel it was copied
  from. A pixel that sits in several windows gets the **sum** of their entries: col2im
  accumulates. It is the adjoint (transpose) of im2col.

For stride 1, col2im of `g @ Wm` equals a *full* convolution of the zero-padded output
gradient with the kernel flipped in both spatial axes: the input gradient of a convolution
is a convolution with the flipped kernel: the exercise after this one.
"""))
    exercise_cell("04.col2im")
    add(test("04.col2im", "col2im_matrix", r'''
x_shape, k, s, p = (1, 1, 3, 3), (2, 2), (1, 1), (0, 0)
ones = np.ones((4, 4))
got = col2im_matrix(ones, x_shape, k, s, p)
want = np.array([[[[1, 2, 1], [2, 4, 2], [1, 2, 1]]]], dtype=np.float64)
expect_close(got, want, "col2im of all-ones for a 2x2 kernel on a 3x3 image",
             "each pixel receives the SUM over the windows that contain it (the centre is in all 4): accumulate with +=")
print("col2im_matrix: visible checks passed")
'''))
    exercise_cell("04.conv2d_backward")
    add(test("04.conv2d_backward", "conv2d_backward", r'''
rng = np.random.default_rng(2)
x = rng.standard_normal((2, 2, 6, 5))
w = rng.standard_normal((3, 2, 3, 3))
g = rng.standard_normal((2, 3, 6, 5))                 # stride 1, padding 1: Ho, Wo = H, W
gx, gw, gb = conv2d_backward(x, w, g, (1, 1), (1, 1))
# independent oracles: out[n, o, i, j] = sum over c, p, q of w[o, c, p, q] * xpad[n, c, i + p, j + q]
xpad = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
windows = np.lib.stride_tricks.sliding_window_view(xpad, (3, 3), axis=(2, 3))
want_gw = np.einsum("ncijpq,noij->ocpq", windows, g)
want_gxpad = np.zeros_like(xpad)
for p in range(3):
    for q in range(3):                                # pixel (i + p, j + q) fed out[i, j] through w[:, :, p, q]
        want_gxpad[:, :, p:p + 6, q:q + 5] += np.einsum("noij,oc->ncij", g, w[:, :, p, q])
expect_close(gw, want_gw, "grad_weight", "grad of W as [Cout, C*kh*kw] is g.T @ cols (mind the transpose)")
expect_close(gx, want_gxpad[:, :, 1:-1, 1:-1], "grad_x", "col2im(g @ W) with W as [Cout, C*kh*kw]")
expect_close(gb, g.sum(axis=(0, 2, 3)), "grad_bias", "sum over N, Ho, Wo")
print("conv2d_backward: visible checks passed")
'''))
    add(md(r"""
**The flipped kernel.** Look at one input pixel in the stride-1 case. It fed output `(i, j)`
through kernel tap `(p, q)` exactly when it sits at `(i + p, j + q)`: the outputs it touched
form a `kh × kw` window around it, and it met their taps in *reverse* order, the bottom-right
tap from the top-left output. So the input gradient is itself a convolution of the output
gradient:

- with the kernel **flipped** in both spatial axes, `w[:, :, ::-1, ::-1]`,
- whose two channel axes are **swapped** (it maps `Cout` channels back to `C`): shape
  `[C, Cout, kh, kw]`,
- over the output gradient padded by `kh - 1 - ph` and `kw - 1 - pw`: a *full* convolution,
  so that every output whose window touched a pixel is in that pixel's window.

This is why a GPU library needs only one fast convolution kernel for two of the three passes,
and the same identity is behind the "transposed convolution" of upsampling layers. Write it
with your `conv2d_forward`:
"""))
    exercise_cell("04.conv_input_grad_flipped")
    add(test("04.conv_input_grad_flipped", "input_grad_by_flipped_kernel", r'''
rng = np.random.default_rng(3)
x = rng.standard_normal((2, 2, 6, 5))
w = rng.standard_normal((3, 2, 3, 2))
g = rng.standard_normal((2, 3, 4, 6))                 # stride 1, padding (0, 1): Ho = 4, Wo = 6
# an independent oracle: pixel (i + p, j + q) of the padded input fed out[i, j] through w[:, :, p, q]
want_pad = np.zeros((2, 2, 6, 7))
for p in range(3):
    for q in range(2):
        want_pad[:, :, p:p + 4, q:q + 6] += np.einsum("noij,oc->ncij", g, w[:, :, p, q])
got = input_grad_by_flipped_kernel(g, w, (0, 1))
expect_close(got, want_pad[:, :, :, 1:-1], "input_grad_by_flipped_kernel(g, w, padding (0, 1))",
             "flip BOTH spatial axes (w[:, :, ::-1, ::-1]), swap the channel axes to [C, Cout, kh, kw], "
             "and pad by (kh - 1 - ph, kw - 1 - pw)")
print("input_grad_by_flipped_kernel: visible checks passed")
'''))
    add(demo("flipped_kernel", r'''
with needs_exercises():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 2, 6, 6)); w = rng.standard_normal((3, 2, 3, 3))
    g = rng.standard_normal((1, 3, 6, 6))                     # stride 1, padding 1: Ho = Wo = 6
    gx, _, _ = conv2d_backward(x, w, g, (1, 1), (1, 1))        # col2im of g @ W
    print("col2im route == flipped-kernel convolution:",
          np.allclose(gx, input_grad_by_flipped_kernel(g, w, (1, 1))))
'''))

    # ------------------------------------------------------------------ 9. payoff
    add(md(r"""
## 9. mini on your code

mini's `conv2d` (the one `mini.nn.Conv2d` uses) runs your `conv2d_forward` and
`conv2d_backward` through their slots, and they run your `im2col_matrix` and `col2im_matrix`:
from here on every convolution in mini is your code. Time a LeNet-sized convolution, forward
and backward, and see where the time goes. (Under the profiler mini composes the convolution
from its ops, im2col, matmul and col2im, so the table can count each of them.)

On `device="cpu"` (mini's default device, as in PyTorch), while the slots run mini's own
solutions, mini swaps in C++ kernels that never build the whole im2col matrix: they build
the columns of a few output rows of one image at a time, in cache, and multiply them there.
That keeps the 22 MB matrix of LeNet's second convolution out of memory;
`benchmarks/bench_cpu_kernels.py` compares them with PyTorch.
"""))
    add(demo("payoff", r'''
from mini.ops.conv import conv2d as mini_conv2d
with needs_exercises():
    x = mini.randn(64, 1, 28, 28, requires_grad=True)
    w1 = mini.randn(6, 1, 5, 5, requires_grad=True)
    w2 = mini.randn(16, 6, 5, 5, requires_grad=True)

    def step():
        h = mini_conv2d(x, w1, None, padding=2).relu()
        mini_conv2d(h, w2, None).sum().backward()

    step()
    with profiler.profile() as prof:
        t = measure.best_time(step, repeats=2, warmup=0)
    print(f"LeNet conv1 + conv2, batch 64, forward + backward: {t * 1e3:.1f} ms")
    print(prof.table().splitlines()[0])
    print("\n".join(prof.table().splitlines()[1:6]))
'''))
    add(md(r"""
**What you built.** OpenMP kernels compiled from a cell and cached by source hash; a
reduction without races; a tiled matrix product that handles every size; a fused kernel and a
traffic model that predicts its speedup; and convolution as im2col + GEMM, forward and
backward, which mini's convolution now runs on. The numbers you measured, bandwidth, GEMM
rate and their ratio, are the ones the GPU part of this chapter scales up by a thousand.
"""))
    return finish_notebook(cells, "ch04")


def main(argv: list[str]) -> int:
    return write_or_check(build(), NOTEBOOK, argv, script=__file__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
