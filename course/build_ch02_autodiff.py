"""Build course/02_autodiff/autodiff.ipynb (the nbgrader source notebook of chapter 02).

    python course/build_ch02_autodiff.py          # write the notebook
    python course/build_ch02_autodiff.py --check  # exit 1 if the file is out of date

The exercise cells are generated from mini's references (``mini/autograd/engine.py``,
``mini/autograd/gradcheck.py``, ``mini/ops/*.py``): the decorator becomes
``@implement(...)``, and the signature, docstring and solution region are copied verbatim,
so the instructor notebook cannot drift from mini.  Everything else (prose, demos, visible
checks, the custom Function and the self-check questions) is written here.  The notebook is
written without outputs.
"""
from __future__ import annotations

import sys
from pathlib import Path

import nbformat

from grader.checks.ch02_autodiff import POINTS   # the checks' points: one source for both
from grader.notebook_build import Cells, exercise_sources, finish_notebook, write_or_check

HERE = Path(__file__).resolve().parent          # course/
ROOT = HERE.parent
NOTEBOOK = HERE / "02_autodiff" / "autodiff.ipynb"
MINI = ROOT / "mini"

# Where each slot's reference lives.
REFERENCES = {
    "02.add_vjp": "ops/elementwise.py",
    "02.mul_vjp": "ops/elementwise.py",
    "02.div_vjp": "ops/elementwise.py",
    "02.pow_vjp": "ops/elementwise.py",
    "02.exp_vjp": "ops/elementwise.py",
    "02.log_vjp": "ops/elementwise.py",
    "02.relu_vjp": "ops/elementwise.py",
    "02.unbroadcast": "ops/_util.py",
    "02.sum_vjp": "ops/reduction.py",
    "02.mean_vjp": "ops/reduction.py",
    "02.reshape_vjp": "ops/shape.py",
    "02.permute_vjp": "ops/shape.py",
    "02.matmul_vjp": "ops/linalg.py",
    "02.toposort": "autograd/engine.py",
    "02.seed_gradient": "autograd/engine.py",
    "02.accumulate_grad": "autograd/engine.py",
    "02.backward": "autograd/engine.py",
    "02.mul_jvp": "ops/elementwise.py",
    "02.central_difference": "autograd/gradcheck.py",
}

# The cell factories, with this chapter's grade-id prefix and points.
CELLS = Cells("02", POINTS)
md, demo, free, solution, test = CELLS.markdown, CELLS.demo, CELLS.free, CELLS.solution, CELLS.test


# --------------------------------------------------------------------------- the chapter

SETUP = r'''
import math
import time
from contextlib import contextmanager

import numpy as np
import matplotlib.pyplot as plt

import mini
from mini.exercises import implement
from mini.autograd import Function, forward_ad, graph, gradcheck, GradcheckError
from mini.autograd.function import Node     # the type name in topological_order's signature
from mini.autograd.tensor import Tensor     # the type name in sum_to's signature
from mini.napkin.autodiff import jacobian_bytes, gradient_passes, mlp_saved_bytes
from mini.napkin.widgets_autodiff import napkin_saved_bytes


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


def values(t):
    """The numbers in a mini tensor, as a float64 numpy array."""
    return np.array(t.detach().numpy(), dtype=np.float64)


def expect_close(got, expected, call, hint, tol=1e-6):
    """A visible check on a tensor: say what was expected, what came back, and the likely mistake."""
    if not isinstance(got, Tensor):
        raise AssertionError(f"{call} should return a mini Tensor, got {type(got).__name__}.\n"
                             f"  Likely mistake: {hint}")
    g, e = values(got), np.asarray(expected, dtype=np.float64)
    if g.shape != e.shape:
        raise AssertionError(f"{call} should have shape {e.shape}, got shape {g.shape}.\n"
                             f"  Likely mistake: {hint}")
    if not np.allclose(g, e, rtol=tol, atol=tol):
        raise AssertionError(f"{call} should be\n{e}\ngot\n{g}\n  Likely mistake: {hint}")


def expect_pair(result, call):
    """A VJP of a two-input operation returns (grad_a, grad_b)."""
    if not (isinstance(result, tuple) and len(result) == 2):
        raise AssertionError(f"{call} should return a tuple (grad_a, grad_b), got {result!r}")
    return result


def expect_raises(error, fn, *args, hint):
    """A visible check that ``fn(*args)`` raises ``error``."""
    try:
        result = fn(*args)
    except NotImplementedError:
        raise                       # an unfinished exercise is not the error we are looking for
    except error:
        return
    raise AssertionError(f"{fn.__name__} should raise {error.__name__}, but returned {result!r}.\n"
                         f"  Likely mistake: {hint}")


def probe_vjp(f, inputs, g, i, eps=1e-6):
    """A finite-difference probe: d/d inputs[i] of sum(g * f(*inputs)), element by element,
    in float64.  (Numpy in, numpy out; no autograd involved.)"""
    xs = [np.array(x, dtype=np.float64) for x in inputs]
    out = np.zeros_like(xs[i])
    for k in np.ndindex(xs[i].shape):
        old = xs[i][k]
        xs[i][k] = old + eps
        up = np.sum(g * f(*xs))
        xs[i][k] = old - eps
        down = np.sum(g * f(*xs))
        xs[i][k] = old
        out[k] = (up - down) / (2 * eps)
    return out


def node_names(tensor):
    """The grad_fn chain behind a tensor, following the first edge of each node."""
    names, node = [], tensor.grad_fn
    while node is not None:
        names.append(node.name())
        node = node.next_functions[0][0] if node.next_functions else None
    return names
'''


def build() -> nbformat.NotebookNode:
    ex = exercise_sources(sorted({MINI / rel for rel in REFERENCES.values()}), slots=REFERENCES)
    cells = []
    add = cells.append

    def exercise(slot: str, prefix: str = ""):
        name, src = ex[slot]
        add(solution(slot, (prefix.strip("\n") + "\n\n" + src) if prefix else src))
        return name

    # ------------------------------------------------------------------ opening
    add(md(r"""
# Chapter 02 — Automatic differentiation: the engine behind `backward()`

`loss.backward()` is one line. Behind it, the framework has recorded every operation of the
forward pass as a graph. It walks that graph backwards, multiplies by each operation's
local derivative, adds up what arrives along different paths, and leaves a gradient in every
weight's `.grad`. In this chapter you write that machinery for mini. At the end a small neural
network trains on **your** engine, and its gradients match an independent computation.

**What you build**

| # | slot | your function | what it does | points |
|---|------|---------------|--------------|-------:|
| 1–7 | `02.add_vjp` … `02.relu_vjp` | `add_vjp`, `mul_vjp`, `div_vjp`, `pow_vjp`, `exp_vjp`, `log_vjp`, `relu_vjp` | the backward rule of each elementwise operation | 24 |
| 8 | `02.unbroadcast` | `sum_to(grad, shape)` | the gradient of a broadcast input | 8 |
| 9–13 | `02.sum_vjp` … `02.matmul_vjp` | `sum_vjp`, `mean_vjp`, `reshape_vjp`, `permute_vjp`, `matmul_vjp` | reductions, shapes, matrix product | 21 |
| 14 | `02.toposort` | `topological_order(roots)` | the order in which backward visits the graph | 10 |
| 15 | `02.seed_gradient` | `seed_gradient(output, gradient)` | where backward starts | 4 |
| 16 | `02.accumulate_grad` | `accumulate_grad(leaf, grad)` | what reaches a weight's `.grad` | 3 |
| 17 | `02.backward` | `propagate(order, grads, run_node, retain_graph)` | the backward loop itself | 10 |
| 18 | `02.multiply_add` | `class MultiplyAdd(Function)` | your own differentiable operation | 5 |
| 19 | `02.mul_jvp` | `mul_jvp(a, b, tangent_a, tangent_b)` | forward mode: the product rule | 4 |
| 20 | `02.central_difference` | `central_difference(f, x, eps)` | the numerical Jacobian behind `gradcheck` | 5 |
| | | three self-check questions | | 6 |

**Why a framework engineer cares.** Every training step is a forward pass and a backward
pass, and the backward pass is where most of a step's memory goes: to run it, the graph keeps
the activations of the forward pass alive. Knowing what the graph holds tells you why training
needs far more memory than inference, why `no_grad()` matters, and why an in-place write can
break a gradient. Knowing how the backward pass runs lets you write an operation the framework
lacks, and check it, instead of trusting it.

**What you need.** Python, numpy, and the chain rule from calculus. mini's tensors and
operations are given (the strided arrays behind them are chapter 03's subject; mini's catch-up
reference covers them). Chapter 01 is not needed in depth.

**Time.** 3–4 hours.

**How the exercises work.** Each exercise cell starts with `@implement("02.…")`. Running the
cell registers your function in mini, and from then on mini's own `backward()` calls your
code. The test cell after it runs a few visible checks. Hidden tests run more cases when the
notebook is graded. Until you have built the engine (part 5), `backward()` cannot run: demos
that need an exercise you have not finished print a note instead of failing, so you can
always run the notebook top to bottom.
"""))
    add(demo("setup", SETUP))

    # ------------------------------------------------------------------ 1. the graph
    add(md(r"""
## 1. The graph that a forward pass records

mini records a graph *while* it computes, one node per operation (PyTorch does the same;
this style is called define-by-run). The rules fit in a few lines:

- A tensor you create yourself is a **leaf**. If you create it with `requires_grad=True`,
  you are asking for its gradient.
- An operation whose inputs include a tensor that requires grad creates a **node** and stores
  it in the result's `grad_fn`. The result requires grad too: the flag propagates forward.
- A node's `next_functions` holds one edge per tensor input, pointing to where that input's
  gradient must go next: the input's own `grad_fn`, or for a leaf that requires grad its
  **`AccumulateGrad`** node (the node that writes into `.grad`), or `None` for an input that
  needs no gradient.
- Inside `with mini.no_grad():` nothing is recorded.

Node names follow PyTorch: the node of `**` is `PowBackward0`. Here is $z = (3x)^2$ at $x = 2$:
"""))
    add(demo("demo_graph", r'''
x = mini.tensor(2.0, requires_grad=True)
y = 3 * x
z = y ** 2
print("z =", z)
print("chain of nodes from z:", " -> ".join(node_names(z)))
print(f"x.is_leaf = {x.is_leaf}, x.grad_fn = {x.grad_fn};  z.is_leaf = {z.is_leaf}")
print("z.grad_fn.next_functions =", z.grad_fn.next_functions)
'''))
    add(md(r"""
The chain reads `PowBackward0 → MulBackward0 → AccumulateGrad`: the square, then the
multiplication by 3, then `x`'s `.grad`. The backward pass walks exactly this chain and
multiplies the local derivatives: $\frac{dz}{dx} = 2y \cdot 3 = 2 \cdot 6 \cdot 3 = 36$.
Once your engine exists (part 5), `z.backward()` will compute that 36.

Which tensors get a node? Only results of operations on something that requires grad:
"""))
    add(demo("demo_requires_grad", r'''
a = mini.tensor([1.0, 2.0])                      # a constant: requires_grad=False
w = mini.tensor([0.5, -1.0], requires_grad=True)  # a weight

b = a * 2        # no input requires grad: nothing recorded
c = a * w        # w requires grad: recorded
print(f"b: requires_grad={b.requires_grad}, grad_fn={b.grad_fn}")
print(f"c: requires_grad={c.requires_grad}, grad_fn={c.grad_fn.name()}, next_functions -> "
      f"{[None if n is None else n.name() for n, _ in c.grad_fn.next_functions]}")

with mini.no_grad():
    d = a * w    # the same operation, not recorded
print(f"d (under no_grad): requires_grad={d.requires_grad}, grad_fn={d.grad_fn}")

# y = 2x, z = y + 1: two nodes, one leaf
x = mini.tensor(5.0, requires_grad=True)
z = 2 * x + 1
print("z = 2x + 1:", " -> ".join(node_names(z)))
'''))
    add(md(r"""
`c`'s multiplication has two edges: `None` for the constant `a` (no gradient wanted) and
`AccumulateGrad` for `w`. For $z = 2x + 1$ the chain is `AddBackward0 → MulBackward0 →
AccumulateGrad`, and the local derivatives multiply to $dz/dx = 1 \cdot 2 = 2$.

Under `no_grad()` the same product records nothing. That is how inference and optimizer
updates avoid paying for a graph; part 9 measures what it saves.

`graph.describe(t)` prints every node behind a tensor, one per line, with where its edges
point. It walks the graph in the order you will compute in part 5, so it needs your
`topological_order`; until then it prints a note.
"""))
    add(demo("demo_describe", r'''
with needs_exercises():
    x = mini.tensor(5.0, requires_grad=True)
    print(graph.describe(2 * x + 1))
'''))

    # ------------------------------------------------------------------ 2. VJPs
    add(md(r"""
## 2. Vector–Jacobian products: one backward rule per operation

Think of an operation as a function $f$ from inputs to an output $out$, with a scalar loss
$L$ at the end of the computation. The backward pass arrives at $f$'s node holding
$g = \partial L / \partial out$, which has the shape of $out$. The node must turn it into
$\partial L / \partial x$ for each input $x$. By the chain rule that is

$$\frac{\partial L}{\partial x} = J^\top g, \qquad J = \frac{\partial\, out}{\partial x}
\text{ (the Jacobian)}.$$

The product $J^\top g$ is a **vector–Jacobian product** (VJP). Backward never builds $J$ itself.
For an elementwise operation on $n$ numbers, $J$ is an $n \times n$ matrix with only its
diagonal non-zero. For a layer with $10^5$ inputs and $10^5$ outputs a dense $J$ in float32
would take:
"""))
    add(demo("demo_jacobian", r'''
print(f"dense Jacobian, 1e5 x 1e5 float32: {jacobian_bytes(10**5, 10**5) / 1e9:.0f} GB")
print(f"the gradient vector it acts on:    {10**5 * 4 / 1e3:.0f} kB")
'''))
    add(md(r"""
So each operation gets a small function that computes $J^\top g$ directly from $g$ and what
the forward pass saved. For an elementwise operation the diagonal means: **multiply $g$ by the
local derivative, element by element**. In mini each operation's forward and its VJP sit next
to each other (`mini/ops/elementwise.py`); your functions replace the VJPs.

A VJP receives and returns mini tensors, so you can write it with tensor operations
(`grad * b`, `a ** 2`, `(a > 0)`, …). Return the gradients with the **shape of the output**;
when an input was broadcast, the caller sums the gradient back to the input's shape (that is
exercise 8). Inputs may also be plain Python numbers, as in `x * 3`: tensor operations accept
them, so the same code works.

### Exercises 1–2 — `add_vjp` (2 points) and `mul_vjp` (4 points)

For $out = a + b$ both local derivatives are 1. mini passes `None` for `a` and `b`, because
the rule does not need them. For $out = a \cdot b$, the derivative with respect to one factor
is the other factor.
"""))
    name = exercise("02.add_vjp")
    add(test("02.add_vjp", name, r'''
g = mini.tensor([1.0, -2.0, 0.5])
ga, gb = expect_pair(add_vjp(g, None, None), "add_vjp(g, None, None)")
expect_close(ga, [1.0, -2.0, 0.5], "add_vjp(g, None, None)[0]",
             "a + b changes one for one with a: grad_a is grad itself")
expect_close(gb, [1.0, -2.0, 0.5], "add_vjp(g, None, None)[1]", "grad_b is grad itself too")
print("visible checks passed")
'''))
    name = exercise("02.mul_vjp")
    add(test("02.mul_vjp", name, r'''
g, a, b = mini.tensor([1.0, 2.0]), mini.tensor([3.0, 4.0]), mini.tensor([5.0, 6.0])
ga, gb = expect_pair(mul_vjp(g, a, b), "mul_vjp(g, a, b)")
expect_close(ga, [5.0, 12.0], "mul_vjp(g, a, b)[0]", "d(a*b)/da = b: grad_a = grad * b")
expect_close(gb, [3.0, 8.0], "mul_vjp(g, a, b)[1]", "d(a*b)/db = a: grad_b = grad * a")
ga, gb = expect_pair(mul_vjp(g, a, 10.0), "mul_vjp(g, a, 10.0)")
expect_close(ga, [10.0, 20.0], "mul_vjp(g, a, 10.0)[0]", "b may be a Python number: grad * b still works")
print("visible checks passed")
'''))
    add(md(r"""
### Exercises 3–4 — `div_vjp` (5 points) and `pow_vjp` (4 points)

For $out = a / b$: $\partial out/\partial a = 1/b$ and $\partial out/\partial b = -a/b^2$.
For $out = a^p$ with a number $p$: $\partial out / \partial a = p\,a^{p-1}$ (the exponent
itself gets no gradient here). Both are the chain rule times one local derivative.
"""))
    name = exercise("02.div_vjp")
    add(test("02.div_vjp", name, r'''
g, a, b = mini.tensor([1.0, 1.0]), mini.tensor([1.0, 2.0]), mini.tensor([4.0, 8.0])
ga, gb = expect_pair(div_vjp(g, a, b), "div_vjp(g, a, b)")
expect_close(ga, [0.25, 0.125], "div_vjp(g, a, b)[0]", "d(a/b)/da = 1/b")
expect_close(gb, [-1 / 16, -2 / 64], "div_vjp(g, a, b)[1]", "d(a/b)/db = -a/b**2 (mind the sign)")
print("visible checks passed")
'''))
    name = exercise("02.pow_vjp")
    add(test("02.pow_vjp", name, r'''
a, g = mini.tensor([1.0, 2.0, 3.0]), mini.tensor([1.0, 1.0, 1.0])
expect_close(pow_vjp(g, a, 2), [2.0, 4.0, 6.0], "pow_vjp(g, a, 2)", "d(a**2)/da = 2a")
expect_close(pow_vjp(g, a, 3), [3.0, 12.0, 27.0], "pow_vjp(g, a, 3)", "d(a**3)/da = 3a**2")
expect_close(pow_vjp(mini.tensor([0.5]), mini.tensor([4.0]), 0.5), [0.125],
             "pow_vjp(0.5, 4.0, 0.5)", "d sqrt(a)/da = 0.5 / sqrt(a) = 0.25, times grad 0.5")
print("visible checks passed")
'''))
    add(md(r"""
### Exercises 5–7 — `exp_vjp` (2 points), `log_vjp` (3 points), `relu_vjp` (4 points)

The derivative of $e^a$ is $e^a$ itself, which is the output. So mini's `exp` saves its
*output* for backward, and `exp_vjp` receives `out`, not `a`. For $\log a$ the derivative is
$1/a$.

ReLU is $\max(a, 0)$: the gradient passes where $a > 0$ and is blocked where $a < 0$. At
exactly $a = 0$ the function has a kink and no derivative; mini, like PyTorch, uses **0**
there. Example: $a = [-1, 2, 3]$ with upstream gradient $0.5$ gives $[0, 0.5, 0.5]$. A
comparison such as `a > 0` gives a boolean tensor; `.to(dtype=grad.dtype)` turns it into
0s and 1s of the gradient's dtype.
"""))
    name = exercise("02.exp_vjp")
    add(test("02.exp_vjp", name, r'''
out = mini.tensor([1.0, math.e])                     # exp([0, 1])
expect_close(exp_vjp(mini.tensor([1.0, 2.0]), out), [1.0, 2 * math.e], "exp_vjp([1, 2], exp([0, 1]))",
             "out is already exp(a): grad * out")
print("visible checks passed")
'''))
    name = exercise("02.log_vjp")
    add(test("02.log_vjp", name, r'''
expect_close(log_vjp(mini.tensor([1.0, 1.0]), mini.tensor([0.5, 2.0])), [2.0, 0.5],
             "log_vjp([1, 1], [0.5, 2])", "d log(a)/da = 1/a")
print("visible checks passed")
'''))
    name = exercise("02.relu_vjp")
    add(test("02.relu_vjp", name, r'''
g = mini.tensor([0.5, 0.5, 0.5])
expect_close(relu_vjp(g, mini.tensor([-1.0, 2.0, 3.0])), [0.0, 0.5, 0.5],
             "relu_vjp(0.5, [-1, 2, 3])", "the gradient passes where a > 0 and is 0 elsewhere")
expect_close(relu_vjp(mini.tensor([1.0]), mini.tensor([0.0])), [0.0], "relu_vjp(1, [0])",
             "at a == 0 the gradient is 0 (a > 0, not a >= 0)")
print("visible checks passed")
'''))
    add(md(r"""
**Measure: your rules against finite differences.** A VJP can be checked without any
autograd. Nudge one input element by $\pm\varepsilon$, recompute $\sum g \cdot f$ with numpy,
and divide the change by $2\varepsilon$. The setup cell's `probe_vjp` does exactly that, in
float64. Below, each of your rules is compared with the probe on random inputs. Errors near
$10^{-9}$ or below mean the rule is right; an error near 1 means a wrong rule. Part 8 explains
why this probe is accurate.
"""))
    add(demo("demo_probe_vjps", r'''
rng = np.random.default_rng(0)
a, b, g = rng.uniform(0.5, 2.0, 5), rng.uniform(0.5, 2.0, 5), rng.standard_normal(5)
A, B, G = (mini.tensor(v) for v in (a, b, g))        # float64 tensors
rules = [
    ("add: grad_a", lambda: add_vjp(G, None, None)[0], lambda x, y: x + y, 0),
    ("mul: grad_b", lambda: mul_vjp(G, A, B)[1], lambda x, y: x * y, 1),
    ("div: grad_a", lambda: div_vjp(G, A, B)[0], lambda x, y: x / y, 0),
    ("div: grad_b", lambda: div_vjp(G, A, B)[1], lambda x, y: x / y, 1),
    ("pow 2.5",     lambda: pow_vjp(G, A, 2.5),  lambda x, y: x ** 2.5, 0),
    ("exp",         lambda: exp_vjp(G, A.exp()), lambda x, y: np.exp(x), 0),
    ("log",         lambda: log_vjp(G, A),       lambda x, y: np.log(x), 0),
    ("relu",        lambda: relu_vjp(G, A - 1.2), lambda x, y: np.maximum(x - 1.2, 0), 0),
]
for label, mine, f, i in rules:
    with needs_exercises():
        err = np.max(np.abs(values(mine()) - probe_vjp(f, [a, b], g, i)))
        print(f"{label:12s} largest difference from the probe: {err:.1e}")
'''))

    # ------------------------------------------------------------------ 3. broadcasting
    add(md(r"""
## 3. Broadcasting: a reused input collects a sum

Adding a bias $b$ of shape `(2,)` to a `(3, 2)` matrix uses $b$ once per row: broadcasting
reads the same two numbers three times. In backward, each use sends $b$ a gradient, and uses
**add up**. So the gradient of $b$ is the upstream gradient **summed over the broadcast axis**.

With $b = [0.5, -0.3]$ and upstream gradient
$\begin{bmatrix}1 & 2\\ 0.5 & 1.5\\ 0.3 & 0.7\end{bmatrix}$, the gradient of $b$ is the column
sums, $[1 + 0.5 + 0.3,\; 2 + 1.5 + 0.7] = [1.8, 4.2]$ (the values of $b$ do not matter).

The rule for undoing a broadcast from `shape` to `grad.shape`:

1. Shapes line up at the **right**. The leading axes that `shape` lacks were added by
   broadcasting: sum them away.
2. An axis where `shape` has length 1 but `grad` is longer was stretched: sum over it and
   keep it with length 1 (`keepdim=True`).
3. If nothing was broadcast, return `grad` as it is.

### Exercise 8 — `sum_to` (8 points)
"""))
    name = exercise("02.unbroadcast")
    add(test("02.unbroadcast", name, r'''
up = mini.tensor([[1.0, 2.0], [0.5, 1.5], [0.3, 0.7]])
expect_close(sum_to(up, (2,)), [1.8, 4.2], "sum_to(upstream of shape (3, 2), (2,))",
             "did you sum over the broadcast axis? b was used once per row")
expect_close(sum_to(up, (3, 1)), [[3.0], [2.0], [1.0]], "sum_to(upstream, (3, 1))",
             "an axis of length 1 that was stretched is summed, and keeps length 1")
expect_close(sum_to(up, ()), 6.0, "sum_to(upstream, ())", "a broadcast scalar collects every element")
expect_close(sum_to(up, (3, 2)), values(up), "sum_to(upstream, (3, 2))", "nothing to undo: return grad")
print("visible checks passed")
'''))
    add(md(r"""
mini's binary operations call your `sum_to` on every gradient before handing it to an
input. Here is the bias example checked against the finite-difference probe:
"""))
    add(demo("demo_broadcast_probe", r'''
with needs_exercises():
    X = np.zeros((3, 2))
    bias = np.array([0.5, -0.3])
    upstream = np.array([[1.0, 2.0], [0.5, 1.5], [0.3, 0.7]])
    mine = values(sum_to(add_vjp(mini.tensor(upstream), None, None)[1], (2,)))
    print("your gradient of b:", mine)
    print("probe:             ", probe_vjp(lambda x, b: x + b, [X, bias], upstream, 1))
'''))

    # ------------------------------------------------------------------ 4. reductions, shapes, matmul
    add(md(r"""
## 4. Reductions, shape operations and the matrix product

**Sum.** Every input element contributes once to the sum it belongs to, so each gets that
sum's gradient: the VJP *broadcasts* `grad` back to the input's shape. With `keepdim=False`
the reduced axes are gone from `grad`, so first put them back as axes of length 1
(`reshape`), then `expand` to the input's shape. Expanding a `(2,)` gradient straight to
`(3, 2)` would line it up with the wrong axis. The given helper `_keepdim_shape(shape, axes)`
returns `shape` with the `axes` set to 1.

**Mean.** The same, scaled by $1/n$, where $n$ is the number of elements averaged (the product
of the reduced axes' lengths).

### Exercises 9–10 — `sum_vjp` (4 points) and `mean_vjp` (4 points)
"""))
    name = exercise("02.sum_vjp", prefix="from mini.ops.reduction import _keepdim_shape  "
                                         "# shape with the reduced axes set to 1")
    add(test("02.sum_vjp", name, r'''
g = mini.tensor([1.0, 2.0])
expect_close(sum_vjp(g, (2, 3), (1,), False), [[1, 1, 1], [2, 2, 2]], "sum_vjp([1, 2], (2, 3), axes=(1,))",
             "broadcast grad back: row i of the input summed into grad[i]")
expect_close(sum_vjp(mini.tensor([1.0, 2.0, 3.0]), (2, 3), (0,), False), [[1, 2, 3], [1, 2, 3]],
             "sum_vjp([1, 2, 3], (2, 3), axes=(0,))", "column j summed into grad[j]")
expect_close(sum_vjp(mini.tensor([[1.0], [2.0]]), (2, 3), (1,), True), [[1, 1, 1], [2, 2, 2]],
             "sum_vjp(grad of shape (2, 1), (2, 3), axes=(1,), keepdim=True)", "keepdim: grad already has the axis")
expect_close(sum_vjp(mini.tensor(5.0), (2, 2), (0, 1), False), [[5, 5], [5, 5]],
             "sum_vjp(5, (2, 2), axes=(0, 1))", "a full sum sends its gradient to every element")
print("visible checks passed")
'''))
    name = exercise("02.mean_vjp")
    add(test("02.mean_vjp", name, r'''
expect_close(mean_vjp(mini.tensor([3.0, 6.0]), (2, 3), (1,), False), [[1, 1, 1], [2, 2, 2]],
             "mean_vjp([3, 6], (2, 3), axes=(1,))", "like sum, divided by n = 3 elements per mean")
expect_close(mean_vjp(mini.tensor(8.0), (2, 4), (0, 1), False), np.full((2, 4), 1.0),
             "mean_vjp(8, (2, 4), axes=(0, 1))", "n is the number of elements averaged: 8")
print("visible checks passed")
'''))
    add(md(r"""
**Reshape and permute** move numbers around without changing them, so their VJPs move the
gradient back. Reshape: the same numbers in the input's shape. Permute: output axis $i$ is
input axis `axes[i]`, so the gradient needs the **inverse** permutation, the one that puts
each axis back where it came from. For `axes = (1, 2, 0)` the inverse is `(2, 0, 1)`; applying
`(1, 2, 0)` again would be wrong for any 3-D array.

### Exercises 11–12 — `reshape_vjp` (2 points) and `permute_vjp` (4 points)
"""))
    name = exercise("02.reshape_vjp")
    add(test("02.reshape_vjp", name, r'''
expect_close(reshape_vjp(mini.tensor([1.0, 2, 3, 4, 5, 6]), (2, 3)), [[1, 2, 3], [4, 5, 6]],
             "reshape_vjp(grad of shape (6,), (2, 3))", "reshape grad back to the input's shape")
print("visible checks passed")
'''))
    name = exercise("02.permute_vjp")
    add(test("02.permute_vjp", name, r'''
x = np.arange(24.0).reshape(2, 3, 4)
g = np.transpose(x, (1, 2, 0))            # a gradient shaped like x.permute(1, 2, 0): (3, 4, 2)
expect_close(permute_vjp(mini.tensor(g), (1, 2, 0)), x, "permute_vjp(grad of shape (3, 4, 2), (1, 2, 0))",
             "use the inverse permutation: here (2, 0, 1)")
expect_close(permute_vjp(mini.tensor(x[0]).T, (1, 0)), x[0], "permute_vjp(grad, (1, 0))",
             "a 2-D transpose is its own inverse")
print("visible checks passed")
'''))
    add(md(r"""
**The matrix product.** For $C = A B$ with $A$ of shape $(m, k)$ and $B$ of shape $(k, n)$,
the element $C_{ij} = \sum_p A_{ip} B_{pj}$ depends on $A_{ip}$ with weight $B_{pj}$. Collect
the gradient over every $j$ it reaches:

$$\frac{\partial L}{\partial A_{ip}} = \sum_j \frac{\partial L}{\partial C_{ij}} B_{pj}
\quad\Longrightarrow\quad dA = dC\, B^\top, \qquad\text{and likewise}\qquad dB = A^\top dC.$$

The shapes confirm it: $(m, n)(n, k) = (m, k)$ is $A$'s shape, $(k, m)(m, n) = (k, n)$ is
$B$'s. With a batch of matrices (leading axes), transpose only the **last two** axes:
`x.transpose(-1, -2)`. `.T` reverses every axis, the batch axes too.

### Exercise 13 — `matmul_vjp` (7 points)
"""))
    name = exercise("02.matmul_vjp")
    add(test("02.matmul_vjp", name, r'''
rng = np.random.default_rng(1)
a, b = rng.standard_normal((2, 3)), rng.standard_normal((3, 4))
g = rng.standard_normal((2, 4))
ga, gb = expect_pair(matmul_vjp(mini.tensor(g), mini.tensor(a), mini.tensor(b)), "matmul_vjp(g, a, b)")
expect_close(ga, g @ b.T, "matmul_vjp(g, a, b)[0] for a (2, 3), b (3, 4)", "dA = dC @ B^T, shape (2, 3)")
expect_close(gb, a.T @ g, "matmul_vjp(g, a, b)[1] for a (2, 3), b (3, 4)", "dB = A^T @ dC, shape (3, 4)")
a3, b3 = rng.standard_normal((5, 2, 3)), rng.standard_normal((5, 3, 4))
g3 = rng.standard_normal((5, 2, 4))
ga, gb = expect_pair(matmul_vjp(mini.tensor(g3), mini.tensor(a3), mini.tensor(b3)), "matmul_vjp on a batch")
expect_close(ga, g3 @ np.swapaxes(b3, -1, -2), "matmul_vjp(g, a, b)[0] for a batch of 5",
             "transpose only the last two axes: transpose(-1, -2), not .T")
print("visible checks passed")
'''))
    add(demo("demo_probe_matmul", r'''
with needs_exercises():
    rng = np.random.default_rng(2)
    a, b, g = rng.standard_normal((3, 4)), rng.standard_normal((4, 2)), rng.standard_normal((3, 2))
    ga, gb = matmul_vjp(mini.tensor(g), mini.tensor(a), mini.tensor(b))
    for label, mine, i in [("dA", ga, 0), ("dB", gb, 1)]:
        err = np.max(np.abs(values(mine) - probe_vjp(lambda x, y: x @ y, [a, b], g, i)))
        print(f"matmul {label}: largest difference from the probe {err:.1e}")
'''))

    # ------------------------------------------------------------------ 5. the engine
    add(md(r"""
## 5. The engine: order, seed, accumulate, propagate

You now have a rule for each operation. The engine decides **when** each rule runs and
**what** it receives. `y.backward()` does four things:

1. **Order.** A node may run only when its incoming gradient is complete, that is, after
   every node that sends it a gradient has run. Listing the nodes so that each comes before
   all the nodes it sends gradients to is a *topological order* of the graph.
2. **Seed.** The walk starts at `y` with $\partial y / \partial y = 1$.
3. **Propagate.** For each node in order: take its gradient, run its VJP, and **add** each
   result to what its child has received so far. A tensor used by two operations gets two
   contributions, and they sum. Then free the node's saved tensors: they are not needed
   again.
4. **Accumulate.** At a leaf, `AccumulateGrad` adds the gradient into `.grad`.

### Exercise 14 — `topological_order` (10 points)

A depth-first search gives the order. Visit a node, then visit each of its children (skip
`None` and nodes already visited). When all of a node's children are finished, append the
node to a list: that is the *post-order*, and in it every node comes after all its children.
**Reverse** it, and every node comes before the nodes it sends gradients to.

Two traps. First, a breadth-first listing is not enough: in `out = y + h(h(h(y)))` it reaches
`y` directly from `out`, before the chain of `h` nodes that also feeds `y`. Second, the
obvious recursive version makes one nested Python call per node, and Python stops at about
1,000 nested calls. A network with a long chain of operations (an RNN unrolled over many
steps, say) would crash. Keep your own stack instead: a list of `(node, iterator over its
children)` pairs works well.
"""))
    name = exercise("02.toposort")
    add(test("02.toposort", name, r'''
x = mini.tensor(2.0, requires_grad=True)
z = (3 * x) ** 2
names = [n.name() for n in topological_order([z.grad_fn])]
assert names == ["PowBackward0", "MulBackward0", "AccumulateGrad"], \
    f"topological_order for z = (3x)**2 should list Pow, Mul, AccumulateGrad, got {names}"

x = mini.tensor([1.0, 2.0], requires_grad=True)
a = x * 2
d = a.exp() + a * 3                      # a feeds two operations
order = topological_order([d.grad_fn])
pos = {id(n): i for i, n in enumerate(order)}
assert len(order) == 5 and len(pos) == 5, f"expected 5 distinct nodes, got {[n.name() for n in order]}"
for node in order:
    for child, _ in node.next_functions:
        if child is not None:
            assert pos[id(node)] < pos[id(child)], (
                f"{child.name()} is listed before {node.name()}, which sends it a gradient: "
                f"reverse the post-order of a depth-first search")

h = x
for _ in range(10_000):
    h = h + 1.0
order = topological_order([h.grad_fn])
assert len(order) == 10_001 and order[0] is h.grad_fn and order[-1].name() == "AccumulateGrad", \
    "a chain of 10,000 additions has 10,001 nodes, the root first and x's AccumulateGrad last"
print("visible checks passed")
'''))
    add(demo("demo_toposort_time", r'''
with needs_exercises():
    for n in (2_000, 4_000, 8_000):
        x = mini.tensor(1.0, requires_grad=True)
        h = x
        for _ in range(n):
            h = h * 1.0
        took = math.inf
        for _ in range(3):                       # best of three: less noise from the machine
            start = time.perf_counter()
            order = topological_order([h.grad_fn])
            took = min(took, time.perf_counter() - start)
        print(f"{n:>6,} operations: {len(order):>6,} nodes ordered in {took * 1e3:6.1f} ms "
              f"({took / len(order) * 1e6:.2f} µs per node)")
'''))
    add(md(r"""
The time per node stays about the same as the graph grows: the walk visits each node and
each edge once, so it costs time linear in the size of the graph.

### Exercise 15 — `seed_gradient` (4 points)

`y.backward()` without an argument only makes sense for a scalar `y`. The seed is then 1,
with `y`'s shape and dtype (`mini.ones_like(y)`). For a non-scalar `y` the caller must pass
the gradient: `y.backward(g)` starts the walk from $\partial L / \partial y = g$, and it is the
same as calling `(y * g).sum().backward()`. Raise `RuntimeError` when a non-scalar output
comes without a gradient, or with one of the wrong shape.
"""))
    name = exercise("02.seed_gradient")
    add(test("02.seed_gradient", name, r'''
y = mini.tensor(3.0, requires_grad=True)
expect_close(seed_gradient(y, None), 1.0, "seed_gradient(scalar, None)", "the seed is d y / d y = 1")
assert seed_gradient(y, None).dtype == y.dtype, "the seed has the output's dtype"
v = mini.tensor([1.0, 2.0], requires_grad=True)
expect_raises(RuntimeError, seed_gradient, v, None,
              hint="a non-scalar output needs an explicit gradient: raise RuntimeError")
expect_close(seed_gradient(v, mini.tensor([0.5, -1.0])), [0.5, -1.0], "seed_gradient(v, g)",
             "a gradient passed by the caller is the seed")
expect_raises(RuntimeError, seed_gradient, v, mini.tensor([1.0, 2.0, 3.0]),
              hint="a gradient of shape (3,) for an output of shape (2,) is an error")
print("visible checks passed")
'''))
    add(md(r"""
### Exercise 16 — `accumulate_grad` (3 points)

When the walk reaches a leaf, its `AccumulateGrad` node hands the gradient to your function.
The first gradient becomes `.grad`. Every later one is **added**, within one backward pass and
across calls, until somebody resets `.grad`. The end of this part shows why that is the
right choice.
"""))
    name = exercise("02.accumulate_grad")
    add(test("02.accumulate_grad", name, r'''
w = mini.tensor([1.0, 2.0], requires_grad=True)
accumulate_grad(w, mini.tensor([0.5, 0.5]))
expect_close(w.grad, [0.5, 0.5], "w.grad after one call", "the first gradient becomes .grad")
accumulate_grad(w, mini.tensor([1.0, -1.0]))
expect_close(w.grad, [1.5, -0.5], "w.grad after two calls", "later gradients are added, not assigned")
print("visible checks passed")
'''))
    add(md(r"""
### Exercise 17 — `propagate`: the backward loop (10 points)

mini prepares everything else. `order` is your topological order. `grads` is a dict that maps
`id(node)` to the gradient flowing into that node; the seeds are already in it. `run_node(node,
grad)` runs the node's VJP (and its hooks, part 12) and returns one gradient, or `None`, per
edge in `node.next_functions`. Your loop:

- walks `order`; takes the node's gradient out of `grads` (`pop`); skips the node if no
  gradient reached it;
- calls `run_node`;
- frees the node's saved tensors with `node.release()`, unless `retain_graph`;
- for each edge `(child, _)` with a gradient `g`: **adds** `g` into `grads[id(child)]` (or
  stores it if there is nothing yet). Write `grads[k] = grads[k] + g`, not `grads[k] += g`: the
  rule of `add` hands the *same* tensor object to both of its inputs, and an in-place sum
  would change the other input's gradient as well.
"""))
    name = exercise("02.backward")
    add(test("02.backward", name, r'''
x, w1, w2 = (mini.tensor(v, requires_grad=True) for v in (1.0, 2.0, 3.0))
y = w2 * (w1 * x)                        # the toy network: h = w1*x, y = w2*h
y.backward()
for t, want, label in [(w2, 2.0, "d_w2 = h = w1*x"), (w1, 3.0, "d_w1 = w2*x"), (x, 6.0, "d_x = w2*w1")]:
    expect_close(t.grad, want, f"{label.split(' ')[0]} of the toy network (x, w1, w2) = (1, 2, 3)", label)

x = mini.tensor(3.0, requires_grad=True)
(x * x + x).backward()                   # x feeds three edges: 2x + 1
expect_close(x.grad, 7.0, "x.grad of x*x + x at x = 3",
             "gradients that reach a node along several paths must be added")

x = mini.tensor(2.0, requires_grad=True)
y = 2 * x
z = y + 1
z.backward()
expect_close(x.grad, 2.0, "x.grad of z = 2x + 1", "the chain of Add and Mul nodes")

z = (3 * x) ** 2
before = graph.saved_tensor_bytes(z)
z.backward()
expect_close(x.grad, 2.0 + 36.0, "x.grad after also running (3x)**2 backward",
             "36 for (3x)**2 at x = 2, added to the 2 already in x.grad")
assert before > 0 and graph.saved_tensor_bytes(z) == 0, \
    "after backward the graph should hold no saved tensors: call node.release() after each node"
print("visible checks passed")
'''))
    add(md(r"""
Your engine runs. The first graphs of the chapter now give the numbers worked out by hand in
part 1: 36 for $z = (3x)^2$ at $x = 2$, and 2 for $z = 2x + 1$.
"""))
    add(demo("demo_first_backward", r'''
with needs_exercises():
    x = mini.tensor(2.0, requires_grad=True)
    z = (3 * x) ** 2
    print(graph.describe(z))
    z.backward()
    print("dz/dx =", x.grad)

    x = mini.tensor(2.0, requires_grad=True)
    y = 2 * x
    z = y + 1
    z.backward()
    print("and for y = 2x, z = y + 1: dz/dx =", x.grad)
'''))
    add(md(r"""
**Measure: what backward frees.** The graph keeps tensors for backward: `x` for the product,
`exp(x)` for its own derivative. `graph.saved_tensor_bytes(y)` counts the bytes of the buffers
the graph keeps alive. Your loop releases each node after it runs, so after `backward()` the
count drops to 0, and a second `backward()` through the same graph fails. With
`retain_graph=True` the buffers stay, and you may run backward again.
"""))
    add(demo("demo_release", r'''
with needs_exercises():
    x = mini.randn(1000, requires_grad=True)     # 1,000 float32 numbers: 4,000 bytes
    # the product saves x and exp(x), and exp saves exp(x): two distinct buffers, 8,000 bytes
    y = (x.exp() * x).sum()
    print(f"saved before backward:                  {graph.saved_tensor_bytes(y):>6,} bytes")
    y.backward(retain_graph=True)
    print(f"after backward(retain_graph=True):      {graph.saved_tensor_bytes(y):>6,} bytes")
    y.backward()
    print(f"after a second, plain backward():       {graph.saved_tensor_bytes(y):>6,} bytes")
    try:
        y.backward()
    except NotImplementedError:
        raise
    except RuntimeError as e:
        print("a third backward() raises RuntimeError:", str(e)[:75], "...")
'''))
    add(md(r"""
**Why `.grad` accumulates.** Your `accumulate_grad` adds; it never assigns. That is what makes
a tensor used in two places correct (its two gradients must sum), and it has a consequence
across calls: two `backward()` calls add two gradients into the same `.grad`. That is useful
when a batch is too big for memory: run backward on several small pieces and let the
gradients add up before one optimizer step (gradient accumulation). It is also why every
training loop calls `optimizer.zero_grad()` (or sets `.grad = None`) before each backward:
without it, each step would use the sum of all gradients so far.
"""))
    add(demo("demo_accumulate", r'''
with needs_exercises():
    w = mini.tensor(1.0, requires_grad=True)
    for step in range(3):
        loss = (w * 0.5) ** 2                  # d loss / dw = w / 2 = 0.5 at w = 1
        loss.backward()
        print(f"after backward call {step + 1}: w.grad = {w.grad.item():.2f}")
    w.grad = None                              # what zero_grad() does for each parameter
    ((w * 0.5) ** 2).backward()
    print(f"after resetting and one more call: w.grad = {w.grad.item():.2f}")
'''))
    add(md(r"""
### Self-check: accumulation (2 points)

A weight `w` has `w.grad = None`. You build a fresh graph and call `loss.backward()` three
times in a row, each time with $\partial\,loss/\partial w = 0.5$, and never call
`zero_grad()`. What is `w.grad` afterwards? Make `quiz_accumulate` return the number.
"""))
    add(solution("02.quiz_accumulate", r'''
def quiz_accumulate():
    """Return w.grad after the three backward calls (a number)."""
    ### BEGIN SOLUTION
    return 1.5
    ### END SOLUTION
'''))
    add(test("02.quiz_accumulate", "quiz_accumulate", r'''
got = quiz_accumulate()
assert isinstance(got, (int, float)) and not isinstance(got, bool), \
    f"quiz_accumulate() should return a number, got {got!r}"
print("answer recorded")
'''))

    # ------------------------------------------------------------------ 6. custom Function
    add(md(r"""
## 6. Your own differentiable operation

Every operation in mini is a `Function` with two static methods: `forward(ctx, *inputs)`
computes the result, and `backward(ctx, grad)` returns one gradient per input of `forward`.
The `ctx` object is the node of the graph; what `forward` stores on it is there in `backward`.
Tensors that `backward` needs go through **`ctx.save_for_backward(...)`** and come back as
**`ctx.saved_tensors`**, not as plain attributes. That way mini can count them (part 9), free
them after backward (your `node.release()`), and notice when one was overwritten in place
(part 10). `forward` runs with recording switched off, so inside it you compute with ordinary
tensor operations.

### Exercise 18 — `MultiplyAdd` (5 points)

Write the operation $out = x \cdot y + z$ as one node. Its local derivatives are $y$, $x$ and
1, so `MultiplyAdd.apply(2, 3, 1)` gives 7, and backward from it gives gradients 3, 2 and 1.
This exercise is graded by a check on your class, so keep the name.
"""))
    add(solution("02.multiply_add", r'''
class MultiplyAdd(Function):
    """out = x * y + z, as one node of the graph."""

    @staticmethod
    def forward(ctx, x, y, z):
        ### BEGIN SOLUTION
        ctx.save_for_backward(x, y)
        return x * y + z
        ### END SOLUTION

    @staticmethod
    def backward(ctx, grad):
        ### BEGIN SOLUTION
        x, y = ctx.saved_tensors
        return grad * y, grad * x, grad
        ### END SOLUTION
'''))
    add(test("02.multiply_add", "MultiplyAdd", r'''
x, y, z = (mini.tensor(v, requires_grad=True) for v in (2.0, 3.0, 1.0))
out = MultiplyAdd.apply(x, y, z)
expect_close(out, 7.0, "MultiplyAdd.apply(2, 3, 1)", "forward returns x * y + z")
assert out.grad_fn is not None and out.grad_fn.name() == "MultiplyAddBackward", \
    "the result's grad_fn should be MultiplyAdd's node"
out.backward()
for t, want, label in [(x, 3.0, "x.grad"), (y, 2.0, "y.grad"), (z, 1.0, "z.grad")]:
    expect_close(t.grad, want, f"{label} of MultiplyAdd(2, 3, 1)",
                 "d out/dx = y, d out/dy = x, d out/dz = 1, each times grad")
print("visible checks passed")
'''))

    # ------------------------------------------------------------------ 7. forward mode
    add(md(r"""
## 7. Forward mode: dual numbers and what they cost

Reverse mode is not the only way. **Forward mode** carries a derivative *along with* each
value, in the same pass. Each number becomes a pair (value, tangent), a *dual number*
$a + \dot a\,\varepsilon$ with $\varepsilon^2 = 0$. The tangent $\dot a$ says how fast $a$
changes when the input moves in a chosen direction. Every operation updates both parts.
For a product, expanding $(a + \dot a \varepsilon)(b + \dot b \varepsilon)$ and dropping
$\varepsilon^2$ gives

$$\dot{out} = \dot a\, b + a\, \dot b \qquad\text{(the product rule)}.$$

In mini each `Function` may have a `jvp(ctx, *tangents)` rule (Jacobian–vector product), and
`mini.autograd.forward_ad` runs them. A `None` tangent means zero.

### Exercise 19 — `mul_jvp` (4 points)
"""))
    name = exercise("02.mul_jvp")
    add(test("02.mul_jvp", name, r'''
a, b = mini.tensor([2.0, 3.0]), mini.tensor([5.0, 7.0])
ta, tb = mini.tensor([1.0, 0.0]), mini.tensor([0.0, 1.0])
expect_close(mul_jvp(a, b, ta, tb), [5.0, 3.0], "mul_jvp(a, b, ta, tb)",
             "the product rule: ta * b + a * tb")
expect_close(mul_jvp(a, b, ta, None), [5.0, 0.0], "mul_jvp(a, b, ta, None)", "a None tangent is zero")
expect_close(mul_jvp(a, b, None, tb), [0.0, 3.0], "mul_jvp(a, b, None, tb)", "a None tangent is zero")
print("visible checks passed")
'''))
    add(md(r"""
Try it on $f(x) = x^2 \sin x$ at $x = 2$. One forward pass with tangent 1 gives both
$f(2) = 3.637$ and $f'(2) = 1.973$. Reverse mode gives the same derivative. Its two branches
are $2x \sin x = 3.6372$ (through $x^2$) and $x^2 \cos x = -1.6646$ (through $\sin x$), and
their sum is $1.9726$.
"""))
    add(demo("demo_forward_mode", r'''
with needs_exercises():
    with forward_ad.dual_level():
        x = forward_ad.make_dual(mini.tensor(2.0), mini.tensor(1.0))
        f = x ** 2 * x.sin()
        value, tangent = forward_ad.unpack_dual(f)
    print(f"forward mode: f(2) = {value.item():.3f}, f'(2) = {tangent.item():.3f}")
    x = mini.tensor(2.0, requires_grad=True)
    (x ** 2 * x.sin()).backward()
    print(f"reverse mode: f'(2) = {x.grad.item():.4f} = {2 * 2 * math.sin(2):.4f} "
          f"+ ({2 ** 2 * math.cos(2):.4f})")
'''))
    add(md(r"""
**Measure: n forward passes against one reverse pass.** One forward pass gives the derivative
in *one* direction: one column of the Jacobian. A loss with $n$ inputs needs $n$ passes, one
per input, to get its whole gradient. One reverse pass gives the whole gradient of a scalar,
because it computes one *row* of the Jacobian, and a scalar loss has only one row. Below, the
gradient of $f(x) = \sum_i x_i^2 \sin x_i$ is computed both ways for growing $n$ and timed.
A network with $10^7$ weights and one loss is the extreme case: $10^7$ forward passes, or one
backward pass.
"""))
    add(demo("demo_modes_cost", r'''
def f(x):
    return (x ** 2 * x.sin()).sum()

def gradient_forward_mode(x0):
    n, cols = x0.numel(), []
    with forward_ad.dual_level():
        for j in range(n):                      # one pass per input direction e_j
            e = np.zeros(n)
            e[j] = 1.0
            x = forward_ad.make_dual(x0, mini.tensor(e))
            cols.append(forward_ad.unpack_dual(f(x)).tangent.item())
    return np.array(cols)

def gradient_reverse_mode(x0):
    x = x0.detach().requires_grad_()
    f(x).backward()
    return values(x.grad)

def best_time(fn, *args, repeat=3):
    """The fastest of a few runs: less noise from whatever else the machine is doing."""
    best = math.inf
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn(*args)
        best = min(best, time.perf_counter() - start)
    return best, result

sizes, t_fwd, t_rev = [1, 4, 16, 64, 256], [], []
with needs_exercises():
    for n in sizes:
        x0 = mini.tensor(np.linspace(0.1, 3.0, n))
        t, g_fwd = best_time(gradient_forward_mode, x0, repeat=2 if n > 64 else 3)
        t_fwd.append(t)
        t, g_rev = best_time(gradient_reverse_mode, x0)
        t_rev.append(t)
        assert np.allclose(g_fwd, g_rev), "forward and reverse mode disagree"
        print(f"n = {n:3d}: forward mode {gradient_passes(n, 1, 'forward'):3d} passes, "
              f"{t_fwd[-1] * 1e3:7.2f} ms | reverse mode {gradient_passes(n, 1, 'reverse')} pass, "
              f"{t_rev[-1] * 1e3:5.2f} ms")
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    ax.loglog(sizes, np.array(t_fwd) * 1e3, "o-", label="forward mode: n passes")
    ax.loglog(sizes, np.array(t_rev) * 1e3, "s-", label="reverse mode: 1 pass")
    ax.set_xlabel("number of inputs n"); ax.set_ylabel("time for the full gradient (ms)")
    ax.set_title("Gradient of a scalar function of n inputs", fontsize=9); ax.legend(fontsize=8)
    fig.tight_layout(); plt.show()
'''))
    add(md(r"""
Forward mode's time grows in proportion to $n$; reverse mode's barely moves. (Reverse mode
pays elsewhere: it has to keep the forward pass's tensors until backward, which is part 9.)
Forward mode wins in the opposite case, few inputs and many outputs, and it needs no saved
tensors at all.
"""))

    # ------------------------------------------------------------------ 8. gradcheck
    add(md(r"""
## 8. Checking gradients with finite differences

Any backward rule, yours or mini's, can be checked against the definition of the derivative.
Nudge input $j$ by $\varepsilon$ and watch the output change:

- one-sided: $\dfrac{f(x + \varepsilon e_j) - f(x)}{\varepsilon}$, error about
  $\tfrac{\varepsilon}{2} |f''|$: it shrinks only **in proportion to** $\varepsilon$;
- central: $\dfrac{f(x + \varepsilon e_j) - f(x - \varepsilon e_j)}{2\varepsilon}$: the
  $f''$ terms cancel, and the error is about $\tfrac{\varepsilon^2}{6} |f'''|$.

A smaller $\varepsilon$ is not always better. $f$ is computed with rounding error about
$u\,|f|$, where $u$ is the unit roundoff ($6 \times 10^{-8}$ in float32,
$1.1 \times 10^{-16}$ in float64). Dividing by $\varepsilon$ magnifies that error to
$u|f|/\varepsilon$. The best $\varepsilon$ balances the two errors. In float32, $u$ is $5 \times
10^{8}$ times larger than in float64, so at a small $\varepsilon$ rounding swamps the result,
and a slightly wrong gradient can no longer be told from a right one. That is why `gradcheck`
insists on **float64 and central differences**.

### Exercise 20 — `central_difference` (5 points)

Return the numerical Jacobian of `f` at `x`, in float64, with **row $j$** holding the
derivatives of all outputs with respect to `x[j]`.
"""))
    name = exercise("02.central_difference")
    add(test("02.central_difference", name, r'''
J = central_difference(lambda v: np.array([v[0] ** 2, v[0] * v[1]]), np.array([3.0, 2.0]))
assert isinstance(J, np.ndarray) and J.shape == (2, 2) and J.dtype == np.float64, \
    f"expected a float64 array of shape (2, 2), got {type(J).__name__} {getattr(J, 'shape', '')}"
assert np.allclose(J, [[6.0, 2.0], [0.0, 3.0]], atol=1e-6), \
    f"expected rows [d/dx0, d/dx1] = [[6, 2], [0, 3]], got\n{J}\n  Likely mistake: row j is the derivative w.r.t. x[j]"
J = central_difference(lambda v: np.exp(v), np.array([0.0]), 1e-3)
assert abs(J[0, 0] - (np.exp(1e-3) - np.exp(-1e-3)) / 2e-3) < 1e-12, \
    f"with eps=1e-3 the central difference of exp at 0 is {(np.exp(1e-3) - np.exp(-1e-3)) / 2e-3!r}, got {J[0, 0]!r}"
print("visible checks passed")
'''))
    add(md(r"""
**Measure: the error against $\varepsilon$.** The derivative of $\sin$ at $x = 1$ is known
exactly, $\cos 1$. The plot shows how far each method lands from it as $\varepsilon$ shrinks.
On a log-log plot the truncation error is a straight line (slope 1 for one-sided, slope 2 for
central) until rounding takes over and the error grows again as $1/\varepsilon$.
"""))
    add(demo("demo_eps_plot", r'''
x0, exact = 1.0, math.cos(1.0)
eps = np.logspace(-13, -1, 49)
one_sided = np.abs((np.sin(x0 + eps) - np.sin(x0)) / eps - exact)
f32 = np.float32
central32 = np.abs([(np.sin(f32(x0) + f32(e)) - np.sin(f32(x0) - f32(e))) / (f32(2) * f32(e)) - exact
                    for e in eps])
with needs_exercises():
    central64 = np.abs([central_difference(np.sin, np.array([x0]), e)[0, 0] - exact for e in eps])
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.loglog(eps, one_sided, label="one-sided, float64")
    ax.loglog(eps, central64, label="central, float64 (your central_difference)")
    ax.loglog(eps, np.maximum(central32, 1e-18), label="central, float32")
    ax.set_xlabel("eps"); ax.set_ylabel("|error| of d sin/dx at x = 1"); ax.legend(fontsize=8)
    ax.set_title("Truncation error falls with eps, rounding error grows as 1/eps", fontsize=9)
    fig.tight_layout(); plt.show()
    at = int(np.argmin(np.abs(eps - 1e-6)))
    for name, err in [("one-sided float64", one_sided), ("central float64", central64),
                      ("central float32", central32)]:
        k = int(np.argmin(err))
        print(f"{name:18s} error at eps = 1e-6: {err[at]:.1e};  best: {err[k]:.1e} at eps = {eps[k]:.0e}")
'''))
    add(md(r"""
Read the numbers at $\varepsilon = 10^{-6}$, `gradcheck`'s default. The central difference in
float64 is off by about $3 \times 10^{-11}$, the one-sided one by about $4 \times 10^{-7}$, and
the central difference in float32 by about $4 \times 10^{-3}$: that is rounding, of order
$u|f|/\varepsilon$. Float32 does better at an $\varepsilon$ tuned to this one function (near
$10^{-2}$), but a gradient check needs one $\varepsilon$ that works for every input of every
function, and a gradient that is wrong by a few percent must not pass.

`mini.autograd.gradcheck(fn, inputs)` builds the numerical Jacobian with your
`central_difference` and compares it with the one your engine computes (one backward pass
per output element). It catches a wrong backward rule at once. Below it passes your
`MultiplyAdd`, fails a `Function` with a plausible-looking bug, and refuses float32 inputs.
"""))
    add(demo("demo_gradcheck", r'''
class Cube(Function):
    """x ** 3 with a wrong backward: the factor 3 is missing."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x * x
    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x * x

rng = np.random.default_rng(3)
inputs = [mini.tensor(rng.standard_normal(4), requires_grad=True) for _ in range(3)]  # float64
with needs_exercises():
    print("MultiplyAdd passes gradcheck:", gradcheck(MultiplyAdd.apply, inputs))
    try:
        gradcheck(Cube.apply, [inputs[0]])
    except GradcheckError as e:
        print("Cube fails gradcheck:", str(e).splitlines()[0])
    try:
        gradcheck(Cube.apply, [mini.tensor([1.0, 2.0], dtype=mini.float32, requires_grad=True)])
    except ValueError as e:
        print("float32 inputs are refused:", e)
'''))

    # ------------------------------------------------------------------ 9. memory
    add(md(r"""
## 9. What the graph costs: saved tensors

Reverse mode needs, at backward time, values from the forward pass: the product rule needs
both factors, ReLU needs to know where its input was positive. So the graph keeps those
tensors alive from the forward pass until backward has used them. That is the main reason
training needs much more memory than inference.

For an MLP `Linear → ReLU → … → Linear`, mini's graph keeps, per buffer:

- each `Linear` computes `x @ W.T + b`: the matmul saves its input `x` (for $W$'s gradient)
  and `W` (for $x$'s gradient); the bias addition saves nothing;
- each hidden `ReLU` saves its input, and the next matmul saves the ReLU's output: two buffers
  of batch × width numbers.

The weights live anyway, so the part that backward *adds* is the activations, and they grow in
proportion to the batch. **Predict first:** how many bytes does the graph of one forward pass
of `Linear(784, 128) → ReLU → Linear(128, 10)` hold for a batch of 32 in float32 (4 bytes per
number)? Count every buffer the graph references, the weights included. Type your number into the widget's box, or set `my_estimate` and run the cell. You
then see the model's count term by term, mini's measurement
(`mini.autograd.graph.saved_tensor_bytes`), their ratio, and a plot against the batch size.
"""))
    add(free(r'''
my_estimate = None   # your estimate in bytes, e.g. 250_000
napkin_saved_bytes(estimate=my_estimate, layer_sizes=(784, 128, 10), batch=32)
'''))
    add(md(r"""
Below a batch of about 100 the weights dominate the count; above it, the activations. For
real networks the activations win by far: a ResNet-50 at batch 64 keeps several gigabytes of
activations against 100 MB of weights. Chapter 05 measures that, and trades memory for
recomputation (checkpointing).

**`no_grad()` versus `eval()`.** Inference code often runs under `with mini.no_grad():`, and
models have an `.eval()` method too. They are different switches:
"""))
    add(demo("demo_no_grad_eval", r'''
from mini import nn
from mini.napkin.widgets_autodiff import saved_bytes   # graph.saved_tensor_bytes, or a direct count

mini.manual_seed(0)
model = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
x = mini.randn(32, 784)

model.train()
out = model(x)
print(f"model.train():            training={model.training}, saved {saved_bytes(out):>8,} bytes, "
      f"out.requires_grad={out.requires_grad}")
model.eval()
out = model(x)
print(f"model.eval():             training={model.training}, saved {saved_bytes(out):>8,} bytes, "
      f"out.requires_grad={out.requires_grad}")
with mini.no_grad():
    out = model(x)
print(f"model.eval() + no_grad(): training={model.training}, saved {saved_bytes(out):>8,} bytes, "
      f"out.requires_grad={out.requires_grad}")
'''))
    add(md(r"""
`eval()` flips a flag that layers read: dropout stops dropping, batch norm uses its running
statistics (chapter 05 builds both). This MLP has no such layer, so `eval()` changes nothing
here, and in particular not the recording: the graph and its saved tensors are the same as in
training. Only `no_grad()` removes them.

### Self-check: `eval()` and `no_grad()` (2 points)

Which statement is true?

- **A.** `model.eval()` stops the recording of the graph; `no_grad()` switches dropout and
  batch norm to their inference behaviour.
- **B.** `no_grad()` switches dropout and batch norm to inference behaviour and stops
  recording; `eval()` only saves memory.
- **C.** `model.eval()` switches layers such as dropout and batch norm to their inference
  behaviour, but operations still record a graph and keep saved tensors; `no_grad()` stops the
  recording (no saved tensors) but leaves the layers' behaviour alone. Inference usually wants
  both.
- **D.** They are two names for the same switch.

Make `quiz_eval` return your letter as a string, e.g. `"A"`.
"""))
    add(solution("02.quiz_eval", r'''
def quiz_eval():
    """Return "A", "B", "C" or "D"."""
    ### BEGIN SOLUTION
    return "C"
    ### END SOLUTION
'''))
    add(test("02.quiz_eval", "quiz_eval", r'''
got = quiz_eval()
assert isinstance(got, str) and got.strip().upper() in ("A", "B", "C", "D"), \
    f"quiz_eval() should return one of 'A', 'B', 'C', 'D', got {got!r}"
print("answer recorded")
'''))

    # ------------------------------------------------------------------ 10. in-place
    add(md(r"""
## 10. In-place writes and the version counter

A saved tensor is not a copy: the graph keeps a reference to the same buffer. If you then
overwrite that buffer in place, backward would compute with the new values and return a wrong
gradient, silently. To catch this, every buffer carries a **version counter** that each
in-place write increments. `save_for_backward` notes the version it saw, and `saved_tensors`
compares it in backward. A mismatch raises an error instead of returning a wrong answer.

`exp` saves its output. Here the output is then modified in place:
"""))
    add(demo("demo_version_counter", r'''
x = mini.tensor([0.0, 1.0], requires_grad=True)
y = x.exp()                       # ExpBackward0 saves y (at version 0)
print("version of y's buffer before:", y._version)
y.add_(1.0)                       # in place: y's buffer now holds exp(x) + 1
print("version of y's buffer after: ", y._version)
with needs_exercises():
    try:
        y.sum().backward()
    except NotImplementedError:
        raise                     # (an unfinished exercise: let needs_exercises report it)
    except RuntimeError as e:
        print("RuntimeError:", e)

print("without the check, d y/dx would have been computed from exp(x) + 1 =",
      np.round(np.exp([0.0, 1.0]) + 1, 4), "instead of exp(x) =", np.round(np.exp([0.0, 1.0]), 4))

x = mini.tensor([0.0, 1.0], requires_grad=True)
y = x.exp()
z = y.clone()                     # the fix: modify a copy, not the saved tensor
z.add_(1.0)
with needs_exercises():
    (y.sum() + z.sum()).backward()
    print("with clone(): x.grad =", x.grad, "(2·exp(x): one from y, one through z)")
'''))
    add(md(r"""
### Self-check: an in-place write (2 points)

```python
x = mini.tensor([0.5, -1.0], requires_grad=True)
y = x.sigmoid()
y.mul_(2)
y.sum().backward()
```

mini's `sigmoid` saves its output, since $\sigma'(x) = \sigma(x)(1 - \sigma(x))$. What happens?

- **A.** Backward runs and `x.grad` is silently wrong, because sigmoid's backward sees the
  doubled values.
- **B.** `RuntimeError`: sigmoid saved `y` for backward, `mul_` overwrote that buffer and moved
  its version counter, and backward refuses to use it.
- **C.** Backward runs and `x.grad` is right, because `mul_` is recorded in the graph like
  `y * 2`.
- **D.** `RuntimeError` because `x` is a leaf that requires grad and an in-place operation
  touched it.

Make `quiz_inplace` return your letter as a string.
"""))
    add(solution("02.quiz_inplace", r'''
def quiz_inplace():
    """Return "A", "B", "C" or "D"."""
    ### BEGIN SOLUTION
    return "B"
    ### END SOLUTION
'''))
    add(test("02.quiz_inplace", "quiz_inplace", r'''
got = quiz_inplace()
assert isinstance(got, str) and got.strip().upper() in ("A", "B", "C", "D"), \
    f"quiz_inplace() should return one of 'A', 'B', 'C', 'D', got {got!r}"
print("answer recorded")
'''))

    # ------------------------------------------------------------------ 11. higher order
    add(md(r"""
## 11. Gradients of gradients

Your VJPs are written with tensor operations. So when backward runs with recording switched
on (`create_graph=True`), the backward pass itself records a graph, and its result can be
differentiated again. `mini.autograd.grad(outputs, inputs)` returns gradients without touching
`.grad`. For $f(x) = x^3$ at $x = 2$: $f' = 3x^2 = 12$, $f'' = 6x = 12$, $f''' = 6$.
Second derivatives appear in practice in gradient penalties, meta-learning, and
Hessian-vector products for optimization research.
"""))
    add(demo("demo_higher_order", r'''
with needs_exercises():
    x = mini.tensor(2.0, requires_grad=True)
    f = x ** 3
    (d1,) = mini.autograd.grad(f, x, create_graph=True)
    (d2,) = mini.autograd.grad(d1, x, create_graph=True)
    (d3,) = mini.autograd.grad(d2, x)
    print(f"at x = 2: first derivative {d1.item():g}, second {d2.item():g}, third {d3.item():g}")
    print("the first derivative has a graph of its own:")
    print(graph.describe(d1))
'''))

    # ------------------------------------------------------------------ 12. hooks
    add(md(r"""
## 12. Hooks: watching and changing gradients in flight

`t.register_hook(fn)` asks the engine to call `fn(grad)` when the gradient of `t` has been
computed, inside the backward pass (it runs in `run_node`, before the node's VJP). A hook can
look at the gradient (to log its norm, or find where it explodes) or return a replacement
(to clip it, or to zero part of it). `register_hook` returns a handle, and `handle.remove()`
takes the hook out again.
"""))
    add(demo("demo_hooks", r'''
with needs_exercises():
    w = mini.tensor([1.0, -2.0, 3.0], requires_grad=True)
    h = w * 3
    seen = []
    h.register_hook(lambda g: seen.append(values(g)))         # inspect
    handle = w.register_hook(lambda g: g.clamp(-5.0, 5.0))    # modify: clip each element to [-5, 5]
    (h * h).sum().backward()
    print("gradient arriving at h:", seen[0])
    print("w.grad, clipped:       ", values(w.grad), " unclipped would be", 18 * np.array([1.0, -2.0, 3.0]))
    handle.remove()
    w.grad = None
    (w * 3 * (w * 3)).sum().backward()
    print("after handle.remove(): ", values(w.grad))
'''))

    # ------------------------------------------------------------------ 13. payoff
    add(md(r"""
## 13. Payoff: a network trains on your engine

The backward passes below run on the code you wrote: your topological order, seed, loop and
accumulation, and your VJPs for the matrix product, addition, ReLU, exp, log, the sum, the
transpose and the broadcast bias. (The few rules you did not write, such as subtraction, are
mini's.) The task is scikit-learn's handwritten digits (8×8 images, 10 classes). The
model is a two-layer MLP built from mini's `nn` layers, trained with SGD.

First, are its gradients right? The cell computes them with your engine, then again by hand
in numpy, the backward pass written out for this one network. With mini's chapter-02
reference available (an instructor's copy, or after the deadline), it also runs the reference
engine and compares.
"""))
    add(demo("demo_payoff_gradients", r'''
from sklearn.datasets import load_digits
from mini import nn
import mini.nn.functional as F

digits = load_digits()
X_all = (digits.data / 16.0).astype(np.float32)   # 1,797 images, 64 pixels each, in [0, 1]
y_all = digits.target
X_train, y_train, X_test, y_test = X_all[:1500], y_all[:1500], X_all[1500:], y_all[1500:]

def make_model():
    mini.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))

def engine_gradients(model, x, y):
    for p in model.parameters():
        p.grad = None
    F.cross_entropy(model(mini.tensor(x)), mini.tensor(y)).backward()
    return [values(p.grad) for p in model.parameters()]

def numpy_gradients(model, x, y):
    """The backward pass of this network, written out by hand."""
    W1, b1, W2, b2 = (values(p) for p in model.parameters())
    x = x.astype(np.float64)
    h = x @ W1.T + b1
    a = np.maximum(h, 0)
    logits = a @ W2.T + b2
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    d_logits = p.copy()
    d_logits[np.arange(len(y)), y] -= 1
    d_logits /= len(y)                                  # the mean over the batch
    d_a = d_logits @ W2
    d_h = d_a * (h > 0)
    return [d_h.T @ x, d_h.sum(0), d_logits.T @ a, d_logits.sum(0)]

CHAPTER_02 = ["02.add_vjp", "02.mul_vjp", "02.div_vjp", "02.pow_vjp", "02.exp_vjp", "02.log_vjp",
              "02.relu_vjp", "02.unbroadcast", "02.sum_vjp", "02.mean_vjp", "02.reshape_vjp",
              "02.permute_vjp", "02.matmul_vjp", "02.toposort", "02.seed_gradient",
              "02.accumulate_grad", "02.backward", "02.mul_jvp", "02.central_difference"]

def reference_gradients(model, x, y):
    """Run mini's own chapter-02 engine, then put your functions back."""
    from mini import exercises
    yours = {slot: exercises.active(slot) for slot in CHAPTER_02}
    for slot in CHAPTER_02:
        exercises.unregister(slot)                      # back to mini's reference
    try:
        return engine_gradients(model, x, y)
    except NotImplementedError:
        return None                                     # the reference ships after the deadline
    finally:
        for slot, fn in yours.items():
            if hasattr(fn, "student_function"):         # one of yours: register it again
                implement(slot)(fn.student_function)

with needs_exercises():
    model = make_model()
    batch_x, batch_y = X_train[:128], y_train[:128]
    yours = engine_gradients(model, batch_x, batch_y)
    by_hand = numpy_gradients(model, batch_x, batch_y)
    names = [n for n, _ in model.named_parameters()]
    for name, g1, g2 in zip(names, yours, by_hand):
        print(f"{name:9s} shape {str(g1.shape):9s} largest difference from numpy: {np.max(np.abs(g1 - g2)):.1e}")
    ref = reference_gradients(model, batch_x, batch_y)
    if ref is None:
        print("mini's chapter-02 reference is not in this copy of mini; numpy is the check.")
    else:
        print("largest difference from mini's reference engine:",
              f"{max(np.max(np.abs(g1 - g2)) for g1, g2 in zip(yours, ref)):.1e}")
'''))
    add(md(r"""
Differences of $10^{-8}$ or so are float32 rounding (the numpy version computes in float64):
the gradients agree. Now train: 200 steps
of SGD with momentum on random batches of 128 images. Each step is a forward pass, your
backward pass, and an update.
"""))
    add(demo("demo_payoff_training", r'''
with needs_exercises():
    model = make_model()
    opt = mini.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    rng = np.random.default_rng(0)
    losses, start = [], time.perf_counter()
    for step in range(200):
        idx = rng.integers(0, len(X_train), 128)
        loss = F.cross_entropy(model(mini.tensor(X_train[idx])), mini.tensor(y_train[idx]))
        opt.zero_grad()
        loss.backward()            # your engine
        opt.step()
        losses.append(loss.item())
        if step % 50 == 0:
            print(f"step {step:3d}: loss {loss.item():.3f}")
    took = time.perf_counter() - start
    with mini.no_grad():
        predictions = values(model(mini.tensor(X_test))).argmax(axis=1)
    print(f"200 steps in {took:.1f} s; test accuracy {np.mean(predictions == y_test):.1%} "
          f"on {len(y_test)} digits the model never saw (chance: 10%)")
    fig, ax = plt.subplots(figsize=(5.5, 3))
    ax.plot(losses); ax.set_yscale("log")
    ax.set_xlabel("step"); ax.set_ylabel("cross-entropy loss"); ax.set_title("Training on your engine", fontsize=9)
    fig.tight_layout(); plt.show()
'''))
    add(md(r"""
## Recap

Here is what now runs on your code in mini:

- **VJPs** for add, mul, div, pow, exp, log, ReLU, sum, mean, reshape, permute and matmul:
  each turns $\partial L/\partial\,out$ into $\partial L/\partial\,input$ without ever building a
  Jacobian (a dense one for a $10^5 \times 10^5$ layer would take 40 GB).
- **`sum_to`**: a broadcast input receives one gradient per use, summed over the broadcast axes.
- **The engine**: a depth-first topological order that survives a 10,000-operation chain, a seed
  of 1, a loop that *adds* gradients arriving along several paths and frees each node's saved
  tensors, and `.grad` that accumulates across calls (hence `zero_grad()`).
- **`Function` with `ctx.save_for_backward`**: how to add an operation that mini lacks.
- **Forward mode** by the product rule: $n$ passes for $n$ inputs, against one reverse pass.
- **`central_difference`** in float64, the basis of `gradcheck`.

And the costs that come with them: a graph keeps the activations of the forward pass until
backward has used them, in proportion to the batch. `no_grad()` keeps nothing; `eval()` only
changes how layers compute. An in-place write to a saved tensor is caught by a version counter
rather than turned into a wrong gradient. Chapter 03 looks under the tensors themselves, at
the strided arrays that make reshape, transpose and broadcasting free.
"""))

    return finish_notebook(cells, "ch02")


def main(argv: list[str]) -> int:
    return write_or_check(build(), NOTEBOOK, argv, script=__file__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
