"""Build course/05_training/training.ipynb (the nbgrader source notebook of chapter 05).

    python course/build_ch05_training.py          # write the notebook
    python course/build_ch05_training.py --check  # exit 1 if the file is out of date

The exercise cells are generated from mini's references (the ``@exercise("05.…")``
functions in the files of ``REFERENCES``): the decorator becomes ``@implement(...)``, the
signature, docstring and solution region are copied verbatim, so the instructor notebook
cannot drift from mini.  Everything else (prose, demos, visible checks) is written here.
The notebook is written without outputs.
"""
from __future__ import annotations

import sys
from pathlib import Path

import nbformat

from grader.checks.ch05_training import POINTS   # the checks' points: one source for both
from grader.notebook_build import Cells, exercise_sources, finish_notebook, write_or_check

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
NOTEBOOK = HERE / "05_training" / "training.ipynb"
REFERENCES = [ROOT / "mini" / p for p in (
    "nn/discovery.py", "nn/he_init.py", "nn/modules/normalization.py", "nn/modules/dropout.py",
    "nn/losses.py", "optim/adam.py", "optim/lr_scheduler.py", "utils/train_state.py")]

# The cell factories, with this chapter's grade-id prefix and points.
CELLS = Cells("05", POINTS)
md, demo, free, solution, test = CELLS.markdown, CELLS.demo, CELLS.free, CELLS.solution, CELLS.test

# Quiz answers, kept apart from the cell template.
_ANSWERS = {"05.quiz_adam_traffic": "28 * 101_770", "05.quiz_eval_mode": '"C"'}


def quiz_solution(slot: str, name: str, doc: str):
    return solution(slot, f'def {name}():\n    """{doc}"""\n    ### BEGIN SOLUTION\n'
                          f"    return {_ANSWERS[slot]}\n    ### END SOLUTION")


# --------------------------------------------------------------------------- the chapter

SETUP = r'''
import math
import os
import tempfile
import time
from contextlib import contextmanager

import numpy as np
import matplotlib.pyplot as plt

import mini
from mini import nn, serialization
from mini.exercises import implement
from mini.autograd.gradcheck import gradcheck
# chapter 05's parts of mini (each file holds one or more of your exercises)
from mini.nn.modules.conv import Conv2d, MaxPool2d
from mini.nn.modules.normalization import BatchNorm1d, BatchNorm2d, LayerNorm, batch_norm
from mini.nn.modules.dropout import Dropout
from mini.nn import discovery, he_init, losses
from mini.optim.adam import Adam, AdamW
from mini.optim import lr_scheduler
from mini.utils import train_state
from mini.utils.data import DataLoader, TensorDataset
from mini.utils.data.datasets import digits_split
from mini.napkin import training as napkin_training

try:  # small matrices gain nothing from BLAS threads, and lose a lot on a busy machine
    from threadpoolctl import threadpool_limits
    threadpool_limits(1)
except ImportError:
    pass

INTERACTIVE = not os.environ.get("NBGRADER_EXECUTION") and not os.environ.get("MINI_NO_WIDGETS")


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


def t(a, requires_grad=False):
    """A float64 mini tensor from anything numpy accepts (for small exact checks)."""
    return mini.tensor(np.asarray(a, dtype=np.float64), requires_grad=requires_grad)


def expect_close(got, want, what, hint="", tol=1e-6):
    """A visible check: compare a tensor (or number) with the expected numpy values."""
    g = got.detach().numpy() if isinstance(got, mini.Tensor) else np.asarray(got)
    w = np.asarray(want)
    if g.shape != w.shape:
        raise AssertionError(f"{what}: expected shape {w.shape}, got {g.shape}")
    if not np.allclose(g, w, rtol=tol, atol=tol):
        err = float(np.max(np.abs(g - w)))
        raise AssertionError(f"{what}: expected\n{w}\ngot\n{g}\n(largest difference {err:.3g})"
                             + (f"\n  Likely mistake: {hint}" if hint else ""))


def fmt_bytes(n):
    return f"{n:,.0f} B ({n / 2**20:.2f} MiB)"
'''


def build() -> nbformat.NotebookNode:
    ex = exercise_sources(REFERENCES)
    cells = []
    add = cells.append

    # ------------------------------------------------------------------ opening
    add(md(r"""
# Chapter 05 — Training: from a forward pass to a run you can stop and resume

Chapters 02 and 03 gave mini tensors, views and autograd. This chapter turns those into a
training framework. You write the parts that decide whether a network learns at all, and
the part that lets a long run survive a crash. At the end, a small convolutional network
learns handwritten digits to over 97% test accuracy on **your** code, in seconds on a laptop.

**What you build**

| # | slot | your function | what it does | points |
|---|------|---------------|--------------|-------:|
| 1 | `05.parameters` | `named_parameters(module)` | find every parameter of a model | 8 |
| 2 | `05.kaiming_init` | `kaiming_normal_(w)` | He initialisation | 6 |
| 3 | `05.batchnorm_forward` | `batchnorm_forward(...)` | batch norm, with running statistics | 12 |
| 4 | `05.batchnorm_backward` | `batchnorm_backward(...)` | its gradient, by hand | 10 |
| 5 | `05.layernorm` | `layernorm(...)` | layer norm | 8 |
| 6 | `05.dropout` | `dropout(x, p, training)` | inverted dropout | 8 |
| 7 | `05.cross_entropy` | `cross_entropy(logits, target)` | a loss that survives logits of 1000 | 8 |
| 8 | `05.adamw_step` | `adamw_step(...)` | one AdamW update | 12 |
| 9 | `05.warmup_cosine` | `warmup_cosine(step, ...)` | the learning-rate schedule | 8 |
| 10 | `05.save_checkpoint` | `save_checkpoint(...)` | publish the complete training state atomically | 8 |
| 11 | `05.load_checkpoint` | `load_checkpoint(...)` | resume it | 8 |
| | | two self-check questions | | 4 |

**Why a framework engineer cares.** Most failed training runs are not bugs in the model.
They come from a bad initial scale, a normalisation layer left in the wrong mode, a loss that
turns into `nan` on one unlucky batch, weight decay that silently does something else, or a
run that crashed at hour 30 and restarted from hour 0. Each of those is a few lines of
framework code, and you write them here.

**What you need.** mini's `Tensor`, autograd (`backward`) and views from the earlier
chapters. If you skipped one, the catch-up reference covers it and everything here works.

**Time.** 3–4 hours.

**How the exercises work.** Each exercise cell starts with `@implement("05.…")`. Running it
registers your function in mini, and from then on mini's layers call your code. The test cell
after it runs a few visible checks; hidden tests run more when the notebook is graded. Demos
that need an exercise you have not done yet print a note instead of failing.
"""))
    add(demo("setup", SETUP))

    # ------------------------------------------------------------------ 1. modules
    add(md(r"""
## 1. Where do a model's parameters come from?

An optimizer needs the list of every trainable tensor in the model. Nobody writes that list
by hand. When `__init__` runs `self.fc = nn.Linear(4, 3)`, `Module.__setattr__` sees that the
value is a `Module` and files it in `self._modules["fc"]`. A `Parameter` goes into
`self._parameters`, and a plain tensor registered with `register_buffer` (such as batch
norm's running mean) goes into `self._buffers`. Buffers are saved in the `state_dict`, but
they are not parameters: the optimizer never touches them.

Finding the parameters is therefore a walk over a tree of modules. Three details matter:

- **names** are dotted paths, such as `blocks.0.fc.weight`. They become the keys of
  `state_dict()`, so they have to be stable;
- **order** is registration order: a module's own parameters first, then each child in turn;
- **sharing**: the same `Parameter` can sit in two layers (tied embeddings), and the same
  module can be reached twice. The optimizer must see it once, or it would update it twice per step.
"""))
    name, src = ex["05.parameters"]
    add(solution("05.parameters", src))
    add(test("05.parameters", name, r'''
lin = nn.Linear(3, 2)
got = named_parameters(lin)
assert [n for n, _ in got] == ["weight", "bias"], f"named_parameters(Linear) gave {[n for n, _ in got]}"
assert got[0][1] is lin.weight, "return the Parameter objects themselves"
net = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1, bias=False))
names = [n for n, _ in named_parameters(net)]
assert names == ["0.weight", "0.bias", "2.weight"], f"got {names}: recurse into children, skip None"
shared = nn.Sequential(net[0], net[0])
assert [n for n, _ in named_parameters(shared)] == ["0.weight", "0.bias"], \
    "a module (or parameter) reached twice is listed once"
print("named_parameters: visible checks passed")
'''))
    add(demo("demo_state_dict", r'''
with needs_exercises():
    model = nn.Sequential(nn.Linear(4, 8), BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
    mine = named_parameters(model)
    print(f"{len(mine)} parameters, {sum(p.numel() for _, p in mine)} numbers:")
    for n, p in mine:
        print(f"  {n:<12} {tuple(p.shape)}")
    print("state_dict keys (parameters AND buffers):", list(model.state_dict()))
'''))

    # ------------------------------------------------------------------ 2. init
    add(md(r"""
## 2. Initialisation: keep the signal alive

Take a layer `y = W x` with `n` inputs, weights of variance `σ²` and inputs of second
moment `q`. Each output sums `n` products, so its variance is about `n · σ² · q`. A ReLU
then zeroes the negative half, which halves the second moment. Over `L` layers the scale of
the signal gets multiplied by `(n σ² / 2)^L`. With `σ² = 2 / n` that factor is exactly 1.
This is **He (Kaiming) initialisation**.

For any other `σ²` the factor is not 1, and after 20 layers it is enormous or tiny. The
forward signal explodes or vanishes, and so do the gradients, which travel back through the
same weights.

`fan_in` is the number of inputs that feed one output unit. For a `Linear(in, out)` weight
of shape `[out, in]` it is `in`. For a `Conv2d` weight `[out_channels, in_channels, kh, kw]`
it is `in_channels · kh · kw`: every input channel under the kernel's window.
`fan_out = out_channels · kh · kw` preserves the scale of the *gradients* instead.
"""))
    name, src = ex["05.kaiming_init"]
    add(solution("05.kaiming_init", src))
    add(test("05.kaiming_init", name, r'''
mini.manual_seed(0)
w = mini.empty(256, 64, 3, 3)
out = kaiming_normal_(w)
assert out is w, "fill the given tensor in place and return it"
std = float(w.numpy().std())
assert abs(std / math.sqrt(2 / (64 * 9)) - 1) < 0.03, \
    f"std {std:.4f}, expected sqrt(2/576) = {math.sqrt(2 / 576):.4f}: fan_in = in_channels·kh·kw"
std = float(kaiming_normal_(mini.empty(300, 200), mode="fan_out").numpy().std())
assert abs(std / math.sqrt(2 / 300) - 1) < 0.03, f"fan_out of a [300, 200] weight is 300 (std {std:.4f})"
print("kaiming_normal_: visible checks passed")
'''))
    add(md(r"""
**Telemetry: bad init against He init.** Below, two copies of a 12-layer ReLU network
(64 units per layer) see the same batch of digits. One starts with weights of std 0.05 (a
"small random numbers" guess), the other with your He initialisation. For each layer we log
the std of its output, the norm of its weight gradient, and the fraction of **dead ReLUs**:
units that output 0 for every sample in the batch, so they pass no gradient back.
"""))
    add(demo("demo_init", r'''
DEPTH, WIDTH = 12, 64
x_digits, y_digits = (tt.numpy() for tt in digits_split(as_image=False)[0].tensors)


def deep_mlp(init):
    mini.manual_seed(1)
    layers = []
    for i in range(DEPTH):
        lin = nn.Linear(64 if i == 0 else WIDTH, WIDTH)
        init(lin.weight)
        with mini.no_grad():
            lin.bias.zero_()
        layers += [lin, nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(WIDTH, 10))


def layer_stats(model, x, y):
    """Per hidden layer: output std, dead-ReLU fraction, and weight-gradient norm."""
    outs = []
    hooks = [m.register_forward_hook(lambda mod, inp, out: outs.append(out.detach().numpy()))
             for m in model if isinstance(m, nn.ReLU)]
    loss = losses.cross_entropy(model(x), y)
    model.zero_grad()
    loss.backward()
    for h in hooks:
        h.remove()
    grads = [float(np.linalg.norm(m.weight.grad.numpy())) for m in model if isinstance(m, nn.Linear)]
    return ([float(o.std()) for o in outs], [float((o.max(axis=0) == 0).mean()) for o in outs],
            grads[:DEPTH], float(loss.item()))


with needs_exercises():
    xb, yb = mini.tensor(x_digits[:256]), mini.tensor(y_digits[:256])
    small = layer_stats(deep_mlp(lambda w: nn.init.normal_(w, 0.0, 0.05)), xb, yb)
    he = layer_stats(deep_mlp(he_init.kaiming_normal_), xb, yb)
    print(f"{'layer':>5} | {'std (0.05)':>11} {'std (He)':>9} | {'dead (0.05)':>11} {'dead (He)':>9} "
          f"| {'|grad W| (0.05)':>15} {'|grad W| (He)':>13}")
    for i in range(DEPTH):
        print(f"{i:>5} | {small[0][i]:>11.2e} {he[0][i]:>9.3f} | {small[1][i]:>11.0%} {he[1][i]:>9.0%} "
              f"| {small[2][i]:>15.2e} {he[2][i]:>13.3f}")
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.2))
    ax[0].semilogy(small[0], "o-", label="std 0.05")
    ax[0].semilogy(he[0], "o-", label="He")
    ax[0].set(title="activation std per layer", xlabel="layer")
    ax[1].semilogy(small[2], "o-", label="std 0.05")
    ax[1].semilogy(he[2], "o-", label="He")
    ax[1].set(title="weight-gradient norm per layer", xlabel="layer")
    ax[0].legend()
    plt.tight_layout()
    plt.show()
'''))
    add(md(r"""
With std 0.05 every layer multiplies the scale by about `√(64 · 0.05² / 2) ≈ 0.28`. After 12
layers the activations are about 10⁻⁷ of the input, and every weight gradient is about 10⁻⁷
as well: the network cannot learn. With He init the std stays near its starting value and
every layer gets a usable gradient.

The dead-unit columns are identical. With zero biases, whether a unit fires depends only on
the sign of `w·x`, and scaling the weights does not change a sign. A bad scale starves the
signal; it does not kill units. Units die later, when large updates push a unit's bias so
far negative that no input switches it on again. That is why the training loop at the end of
the chapter logs the dead fraction.
"""))

    # ------------------------------------------------------------------ 3. batch norm
    add(md(r"""
## 3. Batch normalisation, forward and backward

Batch norm standardises each **channel** with the mean and variance of the current batch, then
applies a learned scale and shift:

```
x_hat = (x - mean_batch) / sqrt(var_batch + eps)        y = x_hat · weight + bias
```

Two facts make it a framework problem rather than a formula:

- **Train and eval differ.** In training, a sample's output depends on the other samples in
  its batch. At inference that would be wrong: a prediction must not change with its
  neighbours, and a batch may hold a single sample. So batch norm keeps **running averages**
  of the batch statistics (`running ← (1 − momentum) · running + momentum · batch`) and uses
  them at eval. PyTorch's running variance is the *unbiased* estimate, `var · M / (M − 1)`.
  The normalisation itself uses the biased one.
- **The backward is not elementwise.** The mean and variance depend on every row, so every
  input receives gradient through them. We write the backward by hand as a `Function`
  (`mini.nn.modules.normalization.BatchNormFunction`), which calls your two functions.
  Autograd could derive it, but the hand-written one saves memory and time, and this is
  how frameworks do it.

Your functions work on 2-D inputs `[M, C]`, one channel per column. `BatchNorm2d` moves the
channels of an NCHW tensor last and flattens everything else into rows, so `M = N·H·W`.
"""))
    name, src = ex["05.batchnorm_forward"]
    add(solution("05.batchnorm_forward", src))
    add(test("05.batchnorm_forward", name, r'''
x = np.array([[1.0, 10.0], [3.0, 10.0], [5.0, 16.0], [7.0, 12.0]])
rm, rv = t([0.0, 0.0]), t([1.0, 1.0])
y, x_hat, inv_std = batchnorm_forward(t(x), rm, rv, t([1.0, 2.0]), t([0.0, 1.0]), True, 0.1, 1e-5)
ref_hat = (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5)
expect_close(x_hat, ref_hat, "x_hat (training)", "use the batch mean and the biased batch variance")
expect_close(y, ref_hat * [1.0, 2.0] + [0.0, 1.0], "y (training)")
expect_close(rm, 0.1 * x.mean(0), "running_mean after one step", "update it in place with momentum")
expect_close(rv, 0.9 + 0.1 * x.var(0, ddof=1), "running_var after one step",
             "the running variance is the unbiased one: var · M/(M-1)")
y_eval, _, _ = batchnorm_forward(t(x), rm, rv, t([1.0, 1.0]), t([0.0, 0.0]), False, 0.1, 1e-5)
expect_close(y_eval, (x - rm.numpy()) / np.sqrt(rv.numpy() + 1e-5), "y at eval",
             "at eval use the running statistics, not the batch's")
print("batchnorm_forward: visible checks passed")
'''))
    add(md(r"""
**The backward.** With `g = grad_out · weight` (the gradient reaching `x_hat`), and sums over
the `M` rows:

```
grad_bias   = Σ grad_out                 grad_weight = Σ grad_out · x_hat
grad_x      = inv_std / M · (M·g − Σ g − x_hat · Σ(g · x_hat))
```

The two subtracted terms are the gradient that flows through the batch mean and through the
batch variance. Leave them out and you get `g · inv_std`, the backward of a layer whose
statistics were constants, which is right only at eval.
"""))
    name, src = ex["05.batchnorm_backward"]
    add(solution("05.batchnorm_backward", src))
    add(test("05.batchnorm_backward", name, r'''
rng_ = np.random.default_rng(0)
x = t(rng_.normal(size=(5, 3)), requires_grad=True)
w = t(rng_.normal(size=3), requires_grad=True)
b = t(rng_.normal(size=3), requires_grad=True)
# gradcheck compares your backward (through BatchNormFunction) with finite differences
assert gradcheck(lambda x, w, b: batch_norm(x, None, None, w, b, training=True), (x, w, b)), \
    "gradcheck failed"
print("batchnorm_backward: gradcheck passed")
'''))

    # ------------------------------------------------------------------ 4. layer norm
    add(md(r"""
## 4. Layer normalisation, and why small batches need it

Layer norm standardises each **sample** over its own features: the last
`len(normalized_shape)` dimensions. There are no batch statistics and no running state, so
training and eval compute the same thing, and a batch of one is fine. That is why
Transformers and RNNs use it, and why it is the safe choice when the batch is small.
Write it with differentiable tensor operations (`mean`, `sqrt`, arithmetic): autograd
derives the backward for you.
"""))
    name, src = ex["05.layernorm"]
    add(solution("05.layernorm", src))
    add(test("05.layernorm", name, r'''
x = np.array([[1.0, 2.0, 3.0, 6.0], [0.0, 0.0, 4.0, 4.0]])
y = layernorm(t(x), (4,), t(np.ones(4)), t(np.zeros(4)), 1e-5)
ref = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5)
expect_close(y, ref, "layernorm of a [2, 4] input", "normalise each ROW (sample) over its last dimension")
xg = t(np.random.default_rng(1).normal(size=(3, 4)), requires_grad=True)
wg = t(np.random.default_rng(2).normal(size=4), requires_grad=True)
assert gradcheck(lambda x, w: layernorm(x, (4,), w, None, 1e-5), (xg, wg)), "gradcheck failed"
print("layernorm: visible checks passed")
'''))
    add(md(r"""
**BatchNorm against LayerNorm with small batches.** One sample, five different batches it
could be part of. Batch norm's training-mode output for that sample changes with its
companions, and the smaller the batch, the more it changes. Layer norm gives the same output
whatever the batch.
"""))
    add(demo("demo_bn_vs_ln", r'''
with needs_exercises():
    data = mini.tensor(x_digits[:512])
    probe = data[:1]
    bn, ln = BatchNorm1d(64, affine=False), LayerNorm(64, elementwise_affine=False)
    print(f"{'batch size':>10} | {'BN: spread of the probe output':>31} | {'LN: spread':>10}")
    for bs in (2, 4, 8, 32, 128):
        outs_bn, outs_ln = [], []
        for k in range(5):
            rows = np.random.default_rng(k).choice(np.arange(1, 512), bs - 1, replace=False)
            batch = mini.cat([probe, data[mini.tensor(rows)]])
            outs_bn.append(bn(batch)[0].detach().numpy())
            outs_ln.append(ln(batch)[0].detach().numpy())
        spread = lambda outs: float(np.std(np.stack(outs), axis=0).mean())
        print(f"{bs:>10} | {spread(outs_bn):>31.3f} | {spread(outs_ln):>10.3f}")
'''))
    add(md(r"""
At batch size 2 the probe's normalised features move by about one standard deviation
depending on which other image shares its batch: noise that the network has to learn through.
From about 32 samples per batch the batch statistics settle, which is the usual rule of thumb:
batch norm for CNNs at batch ≥ 32, layer norm otherwise.
"""))

    # ------------------------------------------------------------------ 5. dropout
    add(md(r"""
## 5. Dropout: scale in training, not at inference

Dropout zeroes each activation with probability `p` during training. The expected value of
an element drops to `(1 − p) · x`, and the next layer would see a different scale at eval,
when nothing is dropped. **Inverted dropout**, which is what PyTorch and every modern
framework do, multiplies the survivors by `1 / (1 − p)` *during training*. The expected value
stays `x`, and eval is then simply the identity.

(You may read that dropout "multiplies by 1/(1−p) at inference". That describes neither the
original form, which multiplied by `1 − p` at inference, nor the inverted one. Scaling at
inference *on top of* inverted dropout inflates every activation.)

Draw the mask with `mini.rand`, so that `mini.manual_seed` reproduces it. A checkpoint
saves mini's random state for exactly this reason.
"""))
    name, src = ex["05.dropout"]
    add(solution("05.dropout", src))
    add(test("05.dropout", name, r'''
mini.manual_seed(0)
y = dropout(mini.ones(100_000), 0.2, training=True).numpy()
assert abs((y == 0).mean() - 0.2) < 0.01, f"{(y == 0).mean():.1%} zeroed, expected about 20%"
assert np.allclose(y[y != 0], 1 / 0.8), "scale the kept elements by 1/(1-p)"
assert abs(y.mean() - 1) < 0.01, f"the mean should stay 1, got {y.mean():.3f}"
xs = mini.arange(5.0)
assert np.array_equal(dropout(xs, 0.2, training=False).numpy(), xs.numpy()), "eval is the identity"
print("dropout: visible checks passed")
'''))

    # ------------------------------------------------------------------ 6. cross entropy
    add(md(r"""
## 6. Cross-entropy that survives large logits

For logits `z` (one row per sample) and target class `y`:
`loss = logsumexp(z) − z[y]`, averaged over the batch. Computed literally, `exp(1000)`
overflows to `inf`, and the loss becomes `inf − inf = nan`. One bad batch is enough to
destroy a run. Subtract the row maximum `m` first:
`logsumexp(z) = m + log Σ exp(z − m)`. Every exponent is then `≤ 0`, and the largest term is
exactly 1. The maximum is a constant shift, so no gradient needs to flow through it
(`.detach()`). The gradient of the mean loss is `(softmax(z) − onehot(y)) / N`.
"""))
    name, src = ex["05.cross_entropy"]
    add(solution("05.cross_entropy", src))
    add(test("05.cross_entropy", name, r'''
z = t([[1000.0, 0.0, -1000.0], [2.0, 1.0, 0.5]], requires_grad=True)
target = mini.tensor([0, 2])
loss = cross_entropy(z, target)
zz = z.detach().numpy()
m = zz.max(1, keepdims=True)
lse = (m + np.log(np.exp(zz - m).sum(1, keepdims=True)))[:, 0]
expect_close(loss, (lse - zz[[0, 1], [0, 2]]).mean(), "cross_entropy with a logit of 1000",
             "subtract each row's maximum before exp")
loss.backward()
p = np.exp(zz - lse[:, None])
expect_close(z.grad, (p - np.eye(3)[[0, 2]]) / 2, "gradient of the logits")
print("cross_entropy: visible checks passed")
'''))

    # ------------------------------------------------------------------ 7. AdamW
    add(md(r"""
## 7. AdamW, and why weight decay is not L2 under Adam

Adam keeps two running averages per parameter. `m` averages the gradient and `v` averages its
square. Both start at zero, so in the first steps they are biased towards zero. Dividing by
`1 − β₁ᵗ` and `1 − β₂ᵗ` (the **bias correction**) removes that bias. The update is
`lr · m̂ / (√v̂ + eps)`: each parameter's step is scaled by its own gradient history.

**Weight decay.** Plain SGD with an L2 penalty `½·λ·‖w‖²` in the loss is the same as
shrinking `w` by `lr·λ` every step. Under Adam the two differ. The L2 gradient `λ·w` joins
`m` and `v` and is divided by `√v̂`. Weights with large gradients are then hardly decayed,
and weights with tiny gradients are decayed a lot. **AdamW** *decouples* the decay: it applies
`w ← w · (1 − lr·λ)` directly and leaves the gradient alone. `torch.optim.Adam(weight_decay=)`
is the L2 form and `torch.optim.AdamW` the decoupled one. mini follows the same split, and both
call your `adamw_step` (Adam with `weight_decay=0`, after adding `λ·w` to the gradient).
"""))
    name, src = ex["05.adamw_step"]
    add(solution("05.adamw_step", src))
    add(test("05.adamw_step", name, r'''
p, g = t([1.0, -2.0]), t([0.3, -5.0])
m, v = t([0.0, 0.0]), t([0.0, 0.0])
adamw_step(p, g, m, v, 1, 0.1, 0.9, 0.999, 1e-12, 0.0)
expect_close(m, [0.03, -0.5], "exp_avg after step 1")
expect_close(v, [0.001 * 0.09, 0.001 * 25], "exp_avg_sq after step 1")
expect_close(p, [0.9, -1.9], "param after step 1",
             "with bias correction the first step moves every parameter by lr·sign(grad)")
p2 = t([2.0])
adamw_step(p2, t([0.0]), t([0.0]), t([0.0]), 1, 0.1, 0.9, 0.999, 1e-8, 0.5)
expect_close(p2, [2.0 * (1 - 0.1 * 0.5)], "decoupled decay with a zero gradient",
             "param *= 1 - lr·weight_decay, independently of the gradient")
print("adamw_step: visible checks passed")
'''))
    add(demo("demo_l2_vs_decay", r'''
with needs_exercises():
    def run(opt_cls, steps=200):
        w = nn.Parameter(mini.tensor([1.0, 1.0]))
        opt = opt_cls([w], lr=0.01, weight_decay=0.1)
        for _ in range(steps):
            w.grad = mini.tensor([10.0, 0.001]) * mini.tensor(np.random.default_rng(_).normal(size=2))
            opt.step()
        return w.detach().numpy()
    l2, decoupled = run(Adam), run(AdamW)
    print("two weights, same start (1.0), gradients of size 10 and 0.001, weight_decay=0.1, 200 steps")
    print(f"  Adam + L2 : {l2}   <- the small-gradient weight is decayed far more")
    print(f"  AdamW     : {decoupled}   <- both shrink by the same factor (1 - lr·wd)^200 = {(1 - 0.001) ** 200:.3f},")
    print("               plus their own Adam steps")
'''))
    add(md(r"""
**Napkin: what an optimizer step moves.** For each parameter, an AdamW step reads the
weight, the gradient, `m` and `v`, and writes the weight, `m` and `v`. In float32 that is
7 × 4 = 28 bytes. The MLP of the course's running example (784 → 128 → 10) has
784·128 + 128 + 128·10 + 10 = 101,770 parameters. On a GPU with 3 TB/s, moving those bytes
takes about a microsecond. The kernel launches that do it take longer than that.

*Self-check:* how many bytes does one AdamW step move for that MLP? Return the number
(an int).
"""))
    add(quiz_solution("05.quiz_adam_traffic", "answer_adam_traffic",
                      "Bytes read and written by one AdamW step, 101,770 float32 parameters."))
    add(test("05.quiz_adam_traffic", "answer_adam_traffic", r'''
got = answer_adam_traffic()
assert isinstance(got, int), f"answer_adam_traffic() should return an int, got {got!r}"
print(f"answer recorded: {got:,} bytes")
'''))
    add(md(r"""
**Training memory.** While training, memory holds four things: the weights `W`, one gradient
per weight `G`, the optimizer state (Adam: `m` and `v`, 2 × `W`), and the **activations**
that autograd saved for backward. In float32 the first three come to 16 bytes per parameter.
Activations grow with the batch. Below, the model's prediction (`mini.napkin.training`) is
compared with what mini actually holds after one step of the 784-128-10 MLP at batch 32. The
activation bytes are measured by walking the graph before `backward()` and adding up the
buffers each node saved.

**Your estimate first.** Before running the next cell, write down how many bytes you expect
the whole thing to take (weights + gradients + Adam state + saved activations), and put the
number in `MY_ESTIMATE_BYTES`.
"""))
    add(free(r'''
MY_ESTIMATE_BYTES = None   # e.g. 2_000_000
'''))
    add(demo("demo_memory", r'''
def saved_bytes(loss, params):
    """Distinct buffers kept alive by the graph of ``loss`` for backward, not counting the
    parameters' own buffers (a saved weight is not an extra copy)."""
    own = {id(p._data.storage) for p in params}
    seen, stack, storages = set(), [loss.grad_fn], {}
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        for tt in (node._saved or ()):
            if hasattr(tt, "_data") and id(tt._data.storage) not in own:
                storages[id(tt._data.storage)] = tt._data.storage.nbytes
        stack.extend(fn for fn, _ in node.next_functions)
    return sum(storages.values())


with needs_exercises():
    BATCH = 32
    mini.manual_seed(0)
    x, y = mini.randn(BATCH, 784), mini.randint(0, 10, (BATCH,))
    mlp = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = AdamW(mlp.parameters(), lr=1e-3)
    loss = losses.cross_entropy(mlp(x), y)
    act = saved_bytes(loss, list(mlp.parameters()))
    loss.backward()
    opt.step()
    n_params = sum(p.numel() for p in mlp.parameters())
    measured = {
        "weights": sum(p.nbytes for p in mlp.parameters()),
        "gradients": sum(p.grad.nbytes for p in mlp.parameters()),
        "Adam m, v": sum(s.nbytes for st in opt.state.values() for s in st.values()
                         if isinstance(s, mini.Tensor)),
        "activations": act,
    }
    model_bytes = napkin_training.training_memory(
        n_params, optimizer="adamw", batch=BATCH,
        saved_per_sample=napkin_training.mlp_saved_per_sample([784, 128, 10]))
    predicted = {"weights": model_bytes["weights"], "gradients": model_bytes["gradients"],
                 "Adam m, v": model_bytes["optimizer"], "activations": model_bytes["activations"]}
    print(f"{n_params:,} parameters")
    print(f"{'':<12} {'predicted':>14} {'measured':>14}  ratio")
    for k in measured:
        print(f"{k:<12} {predicted[k]:>14,} {measured[k]:>14,}  {measured[k] / predicted[k]:.2f}")
    total_p, total_m = sum(predicted.values()), sum(measured.values())
    print(f"{'total':<12} {total_p:>14,} {total_m:>14,}  {total_m / total_p:.2f}")
    if MY_ESTIMATE_BYTES:
        print(f"your estimate {MY_ESTIMATE_BYTES:,} B is {MY_ESTIMATE_BYTES / total_m:.2f}x the "
              f"measured total")
    else:
        print("(set MY_ESTIMATE_BYTES above to compare your own estimate)")
    fig, ax = plt.subplots(figsize=(6, 2.2))
    left = 0
    for k, v in measured.items():
        ax.barh(["measured"], [v], left=left, label=k)
        left += v
    ax.set(xlabel="bytes")
    ax.legend(ncol=4, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.45))
    plt.tight_layout()
    plt.show()
'''))
    add(md(r"""
Weights, gradients and Adam's state match the 16 bytes per parameter exactly. The saved
activations match the napkin to about 1%. They are the input `x` (kept by the first matrix
product for the weight gradient), the hidden layer before the ReLU (kept by the ReLU) and
after it (kept by the second product), and a few `[32, 10]` tensors of the loss. The
weights that the products also keep are not counted twice, since they are the parameters'
own buffers. At batch 32 the activations are a small part of the total. They grow linearly with the batch, while the other three terms do not. For large
models at large batch, activations dominate training memory, and chapter 06 is about
that case.

**Anatomy of one step.** The profiler counts the operations one training step runs, and the
time spent in them. For this small MLP almost all of that time is dispatch (Python, graph
bookkeeping), not arithmetic.
"""))
    add(demo("demo_profile", r'''
from mini.utils import profiler

with needs_exercises():
    def one_step():
        loss = losses.cross_entropy(mlp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    one_step()
    with profiler.profile() as prof:
        one_step()
    flops = 2 * BATCH * (784 * 128 + 128 * 10) * 3        # forward GEMMs, and about 2x for backward
    print(f"{prof.num_ops} recorded operations, {prof.wall_seconds * 1e3:.2f} ms for the step")
    print(f"about {flops / 1e6:.1f} MFLOP of matrix products: "
          f"{flops / prof.wall_seconds / 1e9:.2f} GFLOP/s achieved")
    print(prof.table().splitlines()[0])
    print("\n".join(prof.table().splitlines()[1:6]))
'''))

    # ------------------------------------------------------------------ 8. schedule
    add(md(r"""
## 8. Warmup, then cosine

At the start of training Adam's `v` estimates are poor and the weights are far from any good
region, so a large learning rate can throw the run off. A **linear warmup** raises the rate
over the first steps. A **cosine decay** then lowers it smoothly towards `min_lr` by the last
step. The convention that trips people up is the step count. The schedule is indexed by
`step = 0, 1, 2, …`, the number of optimizer steps already taken. The first step should
already learn (`base_lr / warmup_steps`, not 0), and the rate reaches `base_lr` on the last
warmup step. Your function gives the rate at one step. `lr_scheduler.WarmupCosineLR` calls it
each time you call `scheduler.step()`, after `optimizer.step()`.
"""))
    name, src = ex["05.warmup_cosine"]
    add(solution("05.warmup_cosine", src))
    add(test("05.warmup_cosine", name, r'''
expect_close(warmup_cosine(0, 0.1, 5, 20), 0.02, "lr at step 0", "the first step uses base_lr/warmup, not 0")
expect_close(warmup_cosine(4, 0.1, 5, 20), 0.1, "lr at the last warmup step")
expect_close(warmup_cosine(5, 0.1, 5, 20), 0.1, "lr when the cosine starts")
expect_close(warmup_cosine(12.5, 0.1, 5, 20), 0.05, "lr half-way through the cosine")
expect_close(warmup_cosine(20, 0.1, 5, 20, 0.001), 0.001, "lr at the end")
print("warmup_cosine: visible checks passed")
'''))
    add(demo("demo_schedule", r'''
with needs_exercises():
    w = nn.Parameter(mini.zeros(1))
    opt_s = AdamW([w], lr=3e-3)
    sched = lr_scheduler.WarmupCosineLR(opt_s, warmup_steps=10, total_steps=100, min_lr=1e-5)
    lrs = []
    for _ in range(110):
        lrs.append(opt_s.param_groups[0]["lr"])
        opt_s.step()
        sched.step()
    plt.figure(figsize=(6, 2.5))
    plt.plot(lrs)
    plt.xlabel("step")
    plt.ylabel("learning rate")
    plt.title("warmup 10 steps, cosine to step 100")
    plt.show()
'''))

    # ------------------------------------------------------------------ 9. checkpoints
    add(md(r"""
## 9. Checkpoints you can trust

A resumed run should take **the same next step** as the run that never stopped. For that the
checkpoint needs the complete training state, not only the weights:

| state | where | if it is missing |
|---|---|---|
| parameters and buffers | `model.state_dict()` | BN's running statistics reset |
| optimizer state | `optimizer.state_dict()` | Adam's `m`, `v` and step restart from 0: a jolt |
| schedule position | `scheduler.state_dict()` | warmup starts again |
| random state | `mini.get_rng_state()` | different dropout masks from then on |
| data order and position | `loader.state_dict()` | batches repeat or are skipped |
| step counter | an int | logs and schedules disagree |

It must also be **published atomically**. A job killed half-way through writing must leave
the previous checkpoint intact, never a torn file. The standard recipe: write to a temporary
file *in the same directory*, `flush` and `os.fsync` it, `os.replace` it onto the final name
(a rename within one file system is atomic), then fsync the directory so the rename itself
survives a power cut. `serialization.save(obj, f)` writes a checkpoint to an open binary file
(it is `mini.save`), and `serialization.load(path)` reads one. Loading refuses files that are
not mini checkpoints and reports a truncated file as truncated.
"""))
    add(md(r"""
**Data order is state too.** mini's `DataLoader` draws the order of epoch `e` from a
generator seeded with `(seed, e)`, so the order of any epoch is a pure function of the seed.
Its `state_dict()` holds the seed, the epoch and the number of batches already handed out,
which is enough to resume in the middle of an epoch. With `num_workers=2`, two worker
processes build batches ahead of time (`prefetch_factor` batches each). The main process
still hands them out in order, so the batches are the same as without workers.
"""))
    add(demo("demo_loader", r'''
ds = TensorDataset(mini.tensor(x_digits[:96]), mini.tensor(y_digits[:96]))
plain = DataLoader(ds, batch_size=16, shuffle=True, generator=7)
workers = DataLoader(ds, batch_size=16, shuffle=True, generator=7, num_workers=2, prefetch_factor=2)
labels = lambda loader: [b[1].numpy().tolist() for b in loader]
print("same batches with 2 workers:", labels(plain) == labels(workers))
it = iter(plain)
next(it), next(it)
state = plain.state_dict()
print("loader state after 2 batches of epoch", state["epoch"], ":", state)
again = DataLoader(ds, batch_size=16, shuffle=True, generator=123)
again.load_state_dict(state)
print("resumed mid-epoch, next batch identical:",
      next(iter(again))[1].numpy().tolist() == next(it)[1].numpy().tolist())
'''))
    name, src = ex["05.save_checkpoint"]
    add(solution("05.save_checkpoint", src))
    add(test("05.save_checkpoint", name, r'''
with tempfile.TemporaryDirectory() as d:
    mini.manual_seed(0)
    m_ = nn.Linear(3, 2)
    o_ = AdamW(m_.parameters())
    m_(mini.randn(4, 3)).sum().backward()
    o_.step()
    path = os.path.join(d, "ckpt.pt")
    save_checkpoint(path, m_, o_, step=5)
    state = serialization.load(path)
    for key in ("step", "model", "optimizer", "scheduler", "loader", "rng"):
        assert key in state, f"the checkpoint has no {key!r} entry (keys: {sorted(state)})"
    assert state["step"] == 5 and state["rng"] == mini.get_rng_state()
    assert os.listdir(d) == ["ckpt.pt"], f"files left behind: {os.listdir(d)}"
print("save_checkpoint: visible checks passed")
'''))
    name, src = ex["05.load_checkpoint"]
    add(solution("05.load_checkpoint", src))
    add(test("05.load_checkpoint", name, r'''
with tempfile.TemporaryDirectory() as d:
    mini.manual_seed(0)
    m1 = nn.Linear(3, 2)
    o1 = AdamW(m1.parameters())
    m1(mini.randn(4, 3)).sum().backward()
    o1.step()
    rng_saved = mini.get_rng_state()
    serialization.save({"step": 9, "model": m1.state_dict(), "optimizer": o1.state_dict(),
                        "scheduler": None, "loader": None, "rng": rng_saved}, os.path.join(d, "c.pt"))
    mini.manual_seed(123)
    m2 = nn.Linear(3, 2)
    o2 = AdamW(m2.parameters())
    assert load_checkpoint(os.path.join(d, "c.pt"), m2, o2) == 9, "return the saved step"
    assert np.array_equal(m2.weight.detach().numpy(), m1.weight.detach().numpy()), "restore the model"
    assert len(o2.state) == 2, "restore the optimizer state"
    assert mini.get_rng_state() == rng_saved, "restore mini's random state"
print("load_checkpoint: visible checks passed")
'''))
    add(md(r"""
**Proof by experiment.** Train for 12 steps straight. Then train for 6, save, scramble
everything (new objects, new random seed), load, and train 6 more. The losses match to the
last bit. Then the same thing with a checkpoint that leaves out the optimizer state.
"""))
    add(demo("demo_resume", r'''
def small_job(seed):
    mini.manual_seed(seed)
    model = nn.Sequential(nn.Linear(64, 32), BatchNorm1d(32), nn.ReLU(), Dropout(0.2), nn.Linear(32, 10))
    opt = AdamW(model.parameters(), lr=3e-3)
    sched = lr_scheduler.WarmupCosineLR(opt, 3, 12)
    ds = TensorDataset(mini.tensor(x_digits[:200]), mini.tensor(y_digits[:200]))
    return model, opt, sched, DataLoader(ds, batch_size=32, shuffle=True)


def forever(loader):
    while True:
        yield from loader


def train_steps(job, n):
    model, opt, sched, loader = job
    it, out = forever(loader), []
    for _ in range(n):
        xb, yb = next(it)
        loss = losses.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        out.append(loss.item())
    return out


with needs_exercises():
    straight = train_steps(small_job(0), 12)
    with tempfile.TemporaryDirectory() as d:
        job = small_job(0)
        first = train_steps(job, 6)
        save_checkpoint(os.path.join(d, "ckpt.pt"), *job, step=6)
        mini.manual_seed(999)
        fresh = small_job(5)
        step = load_checkpoint(os.path.join(d, "ckpt.pt"), *fresh)
        resumed = first + train_steps(fresh, 12 - step)
        # a checkpoint without the optimizer state, for comparison
        job = small_job(0)
        train_steps(job, 6)
        weights_only = {k: v.detach().clone() for k, v in job[0].state_dict().items()}
        rng_state, sched_state, loader_state = mini.get_rng_state(), job[2].state_dict(), job[3].state_dict()
        partial = small_job(5)
        partial[0].load_state_dict(weights_only)
        partial[2].load_state_dict(sched_state)
        partial[3].load_state_dict(loader_state)
        mini.set_rng_state(rng_state)
        no_opt = first + train_steps(partial, 6)
    print(f"{'step':>4} {'never stopped':>14} {'resumed':>14} {'no optimizer state':>19}")
    for i in range(12):
        print(f"{i:>4} {straight[i]:>14.8f} {resumed[i]:>14.8f} {no_opt[i]:>19.8f}")
    print("bit-identical resume:", straight == resumed)
'''))
    add(md(r"""
The crash-safety half is tested in mini's test suite
(`tests/utils/test_checkpoint.py`). It starts a process that saves checkpoints in a loop,
kills it with `SIGKILL` while a temporary file is being written, and checks that the
checkpoint on disk still loads. You can watch the failure case here. A save that fails
half-way (simulated by an object that cannot be pickled) must leave the old file untouched.
"""))
    add(demo("demo_atomic", r'''
class DiskFull:
    def __reduce__(self):
        raise OSError("No space left on device (simulated)")


class BrokenLoader:
    def state_dict(self):
        return {"position": DiskFull()}


with needs_exercises(), tempfile.TemporaryDirectory() as d:
    job = small_job(0)
    path = os.path.join(d, "ckpt.pt")
    save_checkpoint(path, *job, step=1)
    before = open(path, "rb").read()
    try:
        save_checkpoint(path, job[0], job[1], job[2], BrokenLoader(), step=2)
    except OSError as e:
        print("the save failed:", e)
    print("previous checkpoint intact:", open(path, "rb").read() == before,
          "| files in the directory:", os.listdir(d))
    import pickle
    with open(os.path.join(d, "other.pkl"), "wb") as f:
        pickle.dump({"weights": [1, 2, 3]}, f)
    try:
        serialization.load(os.path.join(d, "other.pkl"))
    except ValueError as e:
        print("loading a plain pickle:", e)
'''))

    # ------------------------------------------------------------------ 10. self-check
    add(md(r"""
## 10. Self-check: what does `model.eval()` do?

- **A.** It turns off gradient tracking, like `mini.no_grad()`.
- **B.** It freezes the weights so the optimizer cannot change them.
- **C.** It switches layers whose behaviour differs between training and inference (dropout
  becomes the identity, batch norm uses its running statistics); autograd still records.
- **D.** It makes dropout scale activations by `1/(1 − p)`.

Make `answer_eval_mode` return your letter as a string, e.g. `"A"`.
"""))
    add(quiz_solution("05.quiz_eval_mode", "answer_eval_mode", 'Return "A", "B", "C" or "D".'))
    add(test("05.quiz_eval_mode", "answer_eval_mode", r'''
got = answer_eval_mode()
assert isinstance(got, str) and got.strip().upper() in ("A", "B", "C", "D"), \
    f"answer_eval_mode() should return one of 'A', 'B', 'C', 'D', got {got!r}"
print("answer recorded")
'''))

    # ------------------------------------------------------------------ 11. payoff
    add(md(r"""
## 11. Payoff: a CNN on digits, on your code

Everything below runs on what you wrote. Your parameter discovery feeds the optimizer, your
He init sets the weights, your batch norm (forward and backward), dropout and cross-entropy
run in every step, your AdamW step updates the weights, your schedule sets the learning rate,
and your checkpoint code saves the run after each epoch. The convolutions use mini's im2col:
each 3×3 window of the image becomes a row of a matrix, and the convolution becomes one
matrix product. Chapter 04 looks at that step more closely.

The data is scikit-learn's 1,797 handwritten digits (8×8 pixels), 80% for training. The
default of 4 epochs takes a few seconds. `EPOCHS` is the size knob.
"""))
    add(demo("payoff", r'''
EPOCHS = 4
BATCH_SIZE = 32


class DigitsCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            Conv2d(1, 16, 3, padding=1), BatchNorm2d(16), nn.ReLU(), MaxPool2d(2),    # 16 x 4 x 4
            Conv2d(16, 32, 3, padding=1), BatchNorm2d(32), nn.ReLU(), MaxPool2d(2),   # 32 x 2 x 2
        )
        self.head = nn.Sequential(nn.Flatten(), Dropout(0.1), nn.Linear(32 * 2 * 2, 10))

    def forward(self, x):
        return self.head(self.features(x))


class LivePlot:
    """Loss and accuracy curves, redrawn in place; plain prints when there is no frontend."""

    def __init__(self):
        self.handle, self.steps, self.losses, self.accs = None, [], [], []

    def record(self, step, loss):
        self.steps.append(step)
        self.losses.append(loss)

    def update(self, step, loss, acc=None):
        """Redraw (once per epoch: drawing a figure costs more than a training step)."""
        if acc is not None:
            self.accs.append((step, acc))
        if not INTERACTIVE:
            if acc is not None:
                print(f"step {step:4d}  loss {loss:.4f}  test accuracy {acc:.2%}")
            return
        from IPython.display import display
        fig, ax = plt.subplots(1, 2, figsize=(9, 2.8))
        ax[0].plot(self.steps, self.losses)
        ax[0].set(title="training loss", xlabel="step", yscale="log")
        if self.accs:
            ax[1].plot(*zip(*self.accs), "o-")
        ax[1].set(title="test accuracy", xlabel="step", ylim=(0.8, 1.0))
        plt.tight_layout()
        if self.handle is None:
            self.handle = display(fig, display_id=True)
        else:
            self.handle.update(fig)
        plt.close(fig)


def evaluate(model, data):
    model.eval()
    with mini.no_grad():
        xs, ys = data.tensors
        acc = float((model(xs).argmax(dim=1).numpy() == ys.numpy()).mean())
    model.train()
    return acc


def train_digits(epochs=EPOCHS, checkpoint_dir=None):
    from tqdm.auto import tqdm
    mini.manual_seed(0)
    train_set, test_set = digits_split(test_fraction=0.2, seed=0)
    model = DigitsCNN()
    for _, p in named_parameters(model):
        if p.ndim == 4:                   # He init for the convolutions, which feed ReLUs; the
            he_init.kaiming_normal_(p)    # last Linear feeds the loss and keeps its small default
    params = [p for _, p in named_parameters(model)]
    loader = DataLoader(train_set, batch_size=BATCH_SIZE, shuffle=True)
    opt = AdamW(params, lr=1e-2, weight_decay=1e-4)
    sched = lr_scheduler.WarmupCosineLR(opt, warmup_steps=20, total_steps=epochs * len(loader))
    relus = [m for m in model.modules() if isinstance(m, nn.ReLU)]
    dead = {i: [] for i in range(len(relus))}
    for i, r in enumerate(relus):
        r.register_forward_hook(lambda mod, inp, out, i=i: dead[i].append(
            float((out.detach().numpy().max(axis=0) == 0).mean())))
    telemetry = {n: ([], []) for n, p in named_parameters(model) if p.ndim >= 2}
    plot, step, start = LivePlot(), 0, time.perf_counter()
    bar = tqdm(total=epochs * len(loader), desc="training", disable=not INTERACTIVE)
    for epoch in range(epochs):
        for xb, yb in loader:
            loss = losses.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            if step % 5 == 0:
                for n, p in named_parameters(model):
                    if n in telemetry:
                        telemetry[n][0].append(float(np.linalg.norm(p.detach().numpy())))
                        telemetry[n][1].append(float(np.linalg.norm(p.grad.numpy())))
            opt.step()
            sched.step()
            step += 1
            bar.update(1)
            bar.set_postfix(loss=f"{loss.item():.3f}")
            plot.record(step, loss.item())
        acc = evaluate(model, test_set)
        plot.update(step, loss.item(), acc)
        if checkpoint_dir is not None:
            save_checkpoint(os.path.join(checkpoint_dir, "digits.pt"), model, opt, sched, loader, step=step)
    bar.close()
    return model, acc, time.perf_counter() - start, telemetry, dead


with needs_exercises(), tempfile.TemporaryDirectory() as ckpt_dir:
    cnn, accuracy, seconds, telemetry, dead = train_digits(EPOCHS, ckpt_dir)
    print(f"test accuracy {accuracy:.2%} after {EPOCHS} epochs, {seconds:.1f} s "
          f"({sum(p.numel() for _, p in named_parameters(cnn)):,} parameters)")
    print("last checkpoint:", os.listdir(ckpt_dir))
    fig, ax = plt.subplots(1, 3, figsize=(12, 3))
    for n, (wn, gn) in telemetry.items():
        ax[0].plot(wn, label=n)
        ax[1].semilogy(gn, label=n)
    for i, series in dead.items():
        ax[2].plot(series, label=f"ReLU {i}")
    ax[0].set(title="weight norm per layer", xlabel="step / 5")
    ax[1].set(title="gradient norm per layer", xlabel="step / 5")
    ax[2].set(title="dead-ReLU fraction", xlabel="forward pass")
    ax[0].legend(fontsize=7)
    ax[2].legend(fontsize=7)
    plt.tight_layout()
    plt.show()
'''))
    add(md(r"""
## Recap

mini can now train, and every piece that decides whether training works is yours:

- `named_parameters` finds the parameters through the module tree, each exactly once;
- He init keeps the signal at a constant scale through any depth;
- batch norm (with running statistics, and a hand-written backward) and layer norm, and
  when to use which;
- inverted dropout: scaled in training, the identity at eval;
- a cross-entropy that stays finite for any logits;
- AdamW with bias correction and decoupled weight decay, and a warmup-cosine schedule;
- checkpoints with the complete training state, published atomically, that resume
  bit for bit.

The napkin numbers to keep: training holds 16 bytes per parameter before activations
(weights, gradients, Adam's two moments), an Adam step moves 28 bytes per parameter, and
activations grow with the batch. Chapter 06 splits all of them across machines.
"""))

    return finish_notebook(cells, "ch05")


def main(argv: list[str]) -> int:
    return write_or_check(build(), NOTEBOOK, argv, script=__file__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
