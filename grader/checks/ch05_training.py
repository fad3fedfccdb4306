"""Hidden checks of chapter 05 (training): one check per exercise slot, plus two quizzes.

The oracles are numpy formulas written here (float64).  Each check receives a handle on the
student's function (:class:`grader.checks.student.Student`): it sends tensors as
:class:`~grader.worker.codec.TensorSpec` and gets back :class:`~grader.worker.codec.
TensorRecord` s (values, dtype, requires_grad, grad) -- plain data -- together with the
inputs after the call (in-place updates), which input the result *is*, and the gradients
after a backward the check asks for.

Parameter discovery and the checkpoint exercises run as scenarios
(:mod:`grader.worker.scenarios.ch05`): small models, and a complete little training job
saved, restored and resumed next to the student's code; the expected observations come from
the same scenario run with mini's reference in the trusted process.
"""
from __future__ import annotations

import math

import numpy as np

from grader.checks import CheckFailed, check, part
from grader.checks.helpers import (call, call_text, describe, expect_choice, expect_float,
                                   expect_int, fail, raised_as_failure, rng)
from grader.worker.codec import ExceptionRecord, TensorRecord, TensorSpec

CANARY = "mini-grader-canary: hidden checks of chapter 05 (never in feedback)"

# Points, the one source: `mini-course build` prices the notebook's test cells and its
# "What you build" table from this dict (100 in all for the chapter).
POINTS = {
    "05.parameters": 8,
    "05.kaiming_init": 6,
    "05.batchnorm_forward": 12,
    "05.batchnorm_backward": 10,
    "05.layernorm": 8,
    "05.dropout": 8,
    "05.cross_entropy": 8,
    "05.adamw_step": 12,
    "05.warmup_cosine": 8,
    "05.save_checkpoint": 8,
    "05.load_checkpoint": 8,
    "05.quiz_adam_traffic": 2,
    "05.quiz_eval_mode": 2,
}


# =========================================================================== helpers

#: The mini modules that own this chapter's slots (importing them declares the slots).
SLOT_OWNERS = ("mini.nn.discovery", "mini.nn.he_init", "mini.nn.modules.normalization",
               "mini.nn.modules.dropout", "mini.nn.losses", "mini.optim.adam",
               "mini.optim.lr_scheduler", "mini.utils.train_state")


def import_slot_owners() -> None:
    import importlib
    for name in SLOT_OWNERS:
        importlib.import_module(name)


def _t(a, requires_grad: bool = False) -> TensorSpec:
    """A float64 (or the array's dtype) tensor for the student's function."""
    return TensorSpec(np.array(a, copy=True), requires_grad=requires_grad)


def _tensor_np(value, what: str, shape=None) -> np.ndarray:
    """The values of a mini Tensor the student returned (a record), as a numpy array."""
    if type(value) is not TensorRecord:
        if type(value) is np.ndarray:
            fail(f"{what} should be a mini Tensor, got a numpy array: build the result from "
                 f"tensor operations")
        fail(f"{what} should be a mini Tensor, got {describe(value)}")
    a = value.data
    if shape is not None and a.shape != tuple(shape):
        fail(f"{what} should have shape {tuple(shape)}, got shape {a.shape}")
    return a


def _run(fn, *args, what: str, **kwargs):
    """``fn.run(...)``; an exception becomes a failure naming ``what``."""
    out = fn.run(*args, **kwargs)
    if out.raised is not None:
        from grader.checks.student import StudentRaised
        raise raised_as_failure(StudentRaised(out.raised), what)
    out.result()
    return out


def _grad(record, what: str) -> np.ndarray | None:
    if type(record) is not TensorRecord:
        fail(f"{what}: not a tensor after the call")
    return record.grad


def _close(got: np.ndarray, want: np.ndarray, what: str, hint: str = "", rtol=1e-7, atol=1e-9):
    if got.shape != want.shape:
        fail(f"{what} should have shape {want.shape}, got shape {got.shape}")
    if not np.all(np.isfinite(got)) and np.all(np.isfinite(want)):
        fail(f"{what} contains inf or nan where the right answer is finite"
             + (f"; {hint}" if hint else ""))
    if not np.allclose(got, want, rtol=rtol, atol=atol):
        err = np.abs(got - want)
        i = np.unravel_index(int(np.argmax(err)), err.shape) if err.size else ()
        msg = (f"{what}: values differ; largest difference {float(err.max()):.3g} at index "
               f"{tuple(int(k) for k in i)}: expected {float(want[i]):.6g}, got {float(got[i]):.6g}")
        fail(msg + (f"; {hint}" if hint else ""))


def _near(got: np.ndarray, cand: np.ndarray) -> bool:
    return got.shape == cand.shape and bool(np.allclose(got, cand, rtol=1e-6, atol=1e-9))


# =========================================================================== 05.parameters

@check("05.parameters", points=POINTS["05.parameters"])
def check_parameters(fn):
    prefixes = ["", "model"]
    got_runs = fn.scenario("named_parameters", prefixes=prefixes)
    want_runs = fn.expected("named_parameters", prefixes=prefixes)
    if type(got_runs) is not list or len(got_runs) != len(want_runs):
        fail(f"named_parameters: the grader's scenario did not complete ({describe(got_runs)})")
    for got, want in zip(got_runs, want_runs):
        model = want.get("type", "module")
        what = call_text("named_parameters", f"<{model}>", want["prefix"])
        if type(got) is not dict or got.get("kind") not in ("list", "tuple"):
            value = got.get("value") if type(got) is dict else got
            fail(f"{what} should return a list of (name, parameter) pairs, got {describe(value)}")
        pairs = []
        for i, item in enumerate(got["items"]):
            if type(item) is not list or item[0] != "pair":
                fail(f"{what}[{i}] should be a (str, Parameter) pair, got "
                     f"{describe(item[1] if type(item) is list and len(item) > 1 else item)}")
            pairs.append((item[1], item[2]))
        names = [n for n, _ in pairs]
        want_pairs = [(x[1], x[2]) for x in want["items"]]
        want_names = [n for n, _ in want_pairs]
        if names == want_names:
            for (n, label), (_, wlabel) in zip(pairs, want_pairs):
                if label != wlabel:
                    fail(f"{what}: the entry named {n!r} is not that module's parameter object "
                         f"(return the Parameter itself, not a copy)")
            continue
        labels = [label for _, label in pairs]
        if len(set(labels)) < len(labels):
            fail(f"{what}: a parameter appears more than once ({len(labels)} entries, "
                 f"{len(set(labels))} distinct); a shared parameter (or a module reached twice) "
                 f"must be listed only the first time it is met")
        if set(names) < set(want_names):
            missing = [n for n in want_names if n not in names]
            fail(f"{what}: missing {missing[:4]}; recurse into every child module in "
                 f"_modules (and its children), not only the module's own parameters")
        if sorted(names) == sorted(want_names):
            fail(f"{what}: right names in the wrong order: {names}; expected {want_names} "
                 f"(own parameters first, then each child in registration order)")
        missing = [n for n in want_names if n not in names]
        extra = [n for n in names if n not in want_names]
        fail(f"{what}: expected names {want_names}, got {names}"
             + (f"; missing {missing[:4]}" if missing else "")
             + (f"; unexpected {extra[:4]} (join names with '.', skip None entries)"
                if extra else ""))


# =========================================================================== 05.kaiming_init

@check("05.kaiming_init", points=POINTS["05.kaiming_init"])
def check_kaiming(fn):
    cases = [((512, 256), "fan_in", 256), ((64, 32, 3, 3), "fan_in", 288),
             ((48, 96, 3, 3), "fan_out", 432), ((200, 300), "fan_out", 200)]
    for shape, mode, fan in cases:
        empty = TensorSpec(np.zeros(shape, np.float32))
        what = call_text("kaiming_normal_", f"<empty tensor of shape {shape}>", mode=mode)
        out = _run(fn, empty, mode=mode, _seed=11, _observe=True, what=what)
        if out.is_arg != 0:
            fail(f"{what} should fill the tensor it was given in place and return that same "
                 f"tensor, got {describe(out.value)}")
        filled = out.args_after[0]
        a = _tensor_np(filled, what, shape).astype(np.float64)
        std, mean = float(a.std()), float(a.mean())
        want = math.sqrt(2.0 / fan)
        if abs(mean) > 5 * want / math.sqrt(a.size) + 1e-12:
            fail(f"{what}: the values should have mean 0, got mean {mean:.4g}")
        if abs(std / want - 1) > 0.03:
            hints = []
            if len(shape) > 2 and abs(std / math.sqrt(2.0 / shape[1 if mode == 'fan_in' else 0]) - 1) < 0.03:
                hints.append("fan includes the kernel's receptive field: fan_in = in_channels·kh·kw")
            if abs(std / math.sqrt(1.0 / fan) - 1) < 0.03:
                hints.append("He init uses variance 2/fan (a ReLU zeroes half of its inputs), "
                             "not 1/fan")
            other = shape[0 if mode == "fan_in" else 1] * int(np.prod(shape[2:]))
            if abs(std / math.sqrt(2.0 / other) - 1) < 0.03:
                hints.append("fan_in counts the inputs of one output unit (shape[1]·kernel), "
                             "fan_out shape[0]·kernel: you used the other one")
            if abs(std / (2.0 / fan) - 1) < 0.03:
                hints.append("2/fan is the variance; the standard deviation is its square root")
            fail(f"{what}: standard deviation {std:.4g}, expected sqrt(2/{fan}) = {want:.4g}"
                 + (f"; {'; '.join(hints)}" if hints else ""))
        again = _run(fn, empty, mode=mode, _seed=11, _observe=True, what=what)
        if not np.array_equal(_tensor_np(again.args_after[0], what), a.astype(np.float32)):
            fail(f"{what}: two calls after the same mini.manual_seed gave different weights; "
                 f"draw from mini's generator (mini.randn) so runs are reproducible")
        if filled.grad_fn is not None:
            fail(f"{what}: the fill was recorded in the autograd graph; write under mini.no_grad()")


# =========================================================================== batch norm

def _bn_np(x, rm, rv, w, b, training, momentum, eps):
    if training:
        m = x.shape[0]
        mean, var = x.mean(0), x.var(0)
        rm2 = (1 - momentum) * rm + momentum * mean
        rv2 = (1 - momentum) * rv + momentum * var * m / (m - 1)
    else:
        mean, var, rm2, rv2 = rm, rv, rm, rv
    inv = 1 / np.sqrt(var + eps)
    xh = (x - mean) * inv
    return xh * w + b, xh, inv, rm2, rv2


#: Points of 05.batchnorm_forward's parts (12 in all): one mistake costs its part only.
BN_FORWARD_PARTS = {"training: y, x_hat and inv_std": 5, "running statistics": 4, "eval mode": 3}


def _bn_cases():
    gen = rng()
    for _ in range(6):
        m, c = int(gen.integers(2, 9)), int(gen.integers(1, 6))
        x = gen.normal(gen.normal(0, 3), gen.uniform(0.5, 4), size=(m, c))
        rm, rv = gen.normal(size=c), gen.uniform(0.5, 3, size=c)
        w, b = gen.normal(size=c), gen.normal(size=c)
        momentum, eps = float(gen.choice([0.1, 0.3, 0.05])), float(gen.choice([1e-5, 1e-3]))
        yield x, rm, rv, w, b, momentum, eps


def _bn_call(fn, case, training):
    """The student's batchnorm_forward on one case: (what, y, x_hat, inv_std, new running
    mean, new running var) as numpy."""
    x, rm, rv, w, b, momentum, eps = case
    m, c = x.shape
    what = call_text("batchnorm_forward", f"<x {x.shape}>", "<running_mean>", "<running_var>",
                     "<weight>", "<bias>", training=training, momentum=momentum, eps=eps)
    out = _run(fn, _t(x), _t(rm), _t(rv), _t(w), _t(b), training, momentum, eps,
               _observe=True, what=what)
    got = out.value
    if type(got) is not tuple or len(got) != 3:
        fail(f"{what} should return the tuple (y, x_hat, inv_std), got {describe(got)}")
    return (what, _tensor_np(got[0], f"{what}[0] (y)", (m, c)),
            _tensor_np(got[1], f"{what}[1] (x_hat)", (m, c)),
            _tensor_np(got[2], f"{what}[2] (inv_std)", (c,)),
            _tensor_np(out.args_after[1], f"{what}: running_mean"),
            _tensor_np(out.args_after[2], f"{what}: running_var"))


@check("05.batchnorm_forward", points=POINTS["05.batchnorm_forward"])
def check_batchnorm_forward(fn):
    cases = list(_bn_cases())
    trained: dict[int, tuple] = {}   # each case's training-mode call, made once for both parts

    def training_call(i):
        if i not in trained:
            trained[i] = _bn_call(fn, cases[i], True)
        return trained[i]

    with part("training: y, x_hat and inv_std", BN_FORWARD_PARTS["training: y, x_hat and inv_std"]):
        for i, (x, rm, rv, w, b, momentum, eps) in enumerate(cases):
            what, y, xh, inv, _, _ = training_call(i)
            ey, exh, einv, _, _ = _bn_np(x, rm, rv, w, b, True, momentum, eps)
            _close(y, ey, f"{what}: y", "normalise with the batch mean and the biased batch "
                   "variance (divide by M), then scale by weight and shift by bias")
            _close(xh, exh, f"{what}: x_hat")
            _close(inv, einv, f"{what}: inv_std", "inv_std is the reciprocal of the standard "
                   "deviation, with eps added to the variance")
    with part("running statistics", BN_FORWARD_PARTS["running statistics"]):
        for i, (x, rm, rv, w, b, momentum, eps) in enumerate(cases):
            what, _, _, _, new_rm, new_rv = training_call(i)
            _, _, _, erm, erv = _bn_np(x, rm, rv, w, b, True, momentum, eps)
            if _near(new_rm, rm) and _near(new_rv, rv):
                fail(f"{what}: the running statistics did not change; update running_mean "
                     f"and running_var in place")
            if _near(new_rm, momentum * rm + (1 - momentum) * x.mean(0)):
                fail(f"{what}: running_mean weights the old value by momentum; momentum is "
                     f"the weight of the NEW batch statistic (PyTorch's convention)")
            _close(new_rm, erm, f"{what}: running_mean after the update")
            biased = (1 - momentum) * rv + momentum * x.var(0)
            if _near(new_rv, biased) and not _near(biased, erv):
                fail(f"{what}: running_var was updated with the biased batch variance; the "
                     f"running estimate uses the unbiased one")
            _close(new_rv, erv, f"{what}: running_var after the update",
                   "the running variance averages the unbiased batch variance")
    with part("eval mode", BN_FORWARD_PARTS["eval mode"]):
        for case in cases:
            x, rm, rv, w, b, momentum, eps = case
            what, y, xh, inv, new_rm, new_rv = _bn_call(fn, case, False)
            ey, exh, einv, _, _ = _bn_np(x, rm, rv, w, b, False, momentum, eps)
            batch_y = _bn_np(x, rm, rv, w, b, True, momentum, eps)[0]
            if _near(y, batch_y) and not _near(y, ey):
                fail(f"{what}: at eval (training=False) batch norm must normalise with the "
                     f"running statistics, not with the statistics of the batch: a "
                     f"prediction must not depend on the other samples in its batch")
            if not (_near(new_rm, rm) and _near(new_rv, rv)):
                fail(f"{what}: at eval the running statistics must not change")
            _close(y, ey, f"{what}: y")
            _close(xh, exh, f"{what}: x_hat")
            _close(inv, einv, f"{what}: inv_std")


def _bn_back_np(g, xh, inv, w):
    m = g.shape[0]
    gw, gb = (g * xh).sum(0), g.sum(0)
    gg = g * w
    gx = inv / m * (m * gg - gg.sum(0) - xh * (gg * xh).sum(0))
    return gx, gw, gb


@check("05.batchnorm_backward", points=POINTS["05.batchnorm_backward"])
def check_batchnorm_backward(fn):
    gen = rng()
    for trial in range(8):
        m, c = int(gen.integers(2, 10)), int(gen.integers(1, 6))
        x = gen.normal(gen.normal(0, 2), gen.uniform(0.5, 3), size=(m, c))
        inv = 1 / np.sqrt(x.var(0) + 1e-5)
        xh = (x - x.mean(0)) * inv
        g, w = gen.normal(size=(m, c)), gen.normal(size=c)
        what = call_text("batchnorm_backward", f"<grad_out {g.shape}>", f"<x_hat {xh.shape}>",
                         "<inv_std>", "<weight>")
        got = call(fn, _t(g), _t(xh), _t(inv), _t(w), name="batchnorm_backward")
        if type(got) is not tuple or len(got) != 3:
            fail(f"{what} should return (grad_x, grad_weight, grad_bias), got {describe(got)}")
        gx = _tensor_np(got[0], f"{what}[0] (grad_x)", (m, c))
        gw = _tensor_np(got[1], f"{what}[1] (grad_weight)", (c,))
        gb = _tensor_np(got[2], f"{what}[2] (grad_bias)", (c,))
        egx, egw, egb = _bn_back_np(g, xh, inv, w)
        _close(gb, egb, f"{what}: grad_bias", "grad_bias is grad_out summed over the rows")
        _close(gw, egw, f"{what}: grad_weight", "grad_weight = sum over rows of grad_out·x_hat")
        if _near(gx, g * w * inv):
            fail(f"{what}: grad_x = grad_out·weight·inv_std treats the batch mean and variance as "
                 f"constants, but they depend on every row of x: add the paths through the "
                 f"batch mean and through the batch variance (the chapter's hint has the result)")
        if _near(gx, inv / m * (m * g * w - (g * w).sum(0))):
            fail(f"{what}: grad_x has the path through the batch mean but not the one through "
                 f"the batch variance: x_hat also changes when x_j moves the variance")
        if _near(gx, inv / m * (m * g * w - xh * (g * w * xh).sum(0))):
            fail(f"{what}: grad_x has the path through the batch variance but not the one "
                 f"through the batch mean: every x_j moves the mean by 1/M")
        _close(gx, egx, f"{what}: grad_x",
               "grad_x = inv_std/M · (M·g - sum(g) - x_hat·sum(g·x_hat)) with g = grad_out·weight")


# =========================================================================== 05.layernorm

@check("05.layernorm", points=POINTS["05.layernorm"])
def check_layernorm(fn):
    gen = rng()
    cases = [((4, 6), (6,)), ((3, 5, 4), (4,)), ((2, 3, 4, 5), (4, 5)), ((5, 2), (2,))]
    for shape, norm in cases:
        x = gen.normal(gen.normal(0, 3), gen.uniform(0.5, 3), size=shape)
        w, b = gen.normal(size=norm), gen.normal(size=norm)
        eps = 1e-5
        axes = tuple(range(len(shape) - len(norm), len(shape)))
        mean, var = x.mean(axes, keepdims=True), x.var(axes, keepdims=True)
        xh = (x - mean) / np.sqrt(var + eps)
        want = xh * w + b
        g = gen.normal(size=shape)
        what = call_text("layernorm", f"<x {shape}>", norm, "<weight>", "<bias>", eps)
        run = _run(fn, _t(x, True), norm, _t(w, True), _t(b, True), eps, _backward=_t(g),
                   _observe=True, what=what)
        out = run.value
        got = _tensor_np(out, what, shape)
        if not _near(got, want):
            first = tuple(range(len(norm)))
            mb, vb = x.mean(0, keepdims=True), x.var(0, keepdims=True)
            if _near(got, (x - mb) / np.sqrt(vb + eps) * w + b) or \
                    _near(got, (x - x.mean(first, keepdims=True)) /
                          np.sqrt(x.var(first, keepdims=True) + eps) * w + b):
                fail(f"{what}: you normalised over the wrong axes; layer norm normalises each "
                     f"sample over its LAST len(normalized_shape) dimensions (batch norm is the "
                     f"one that averages over the batch)")
            if _near(got, (x - mean) / np.sqrt(x.var(axes, keepdims=True, ddof=1) + eps) * w + b):
                fail(f"{what}: use the biased variance (divide by the number of elements), as "
                     f"PyTorch does")
            _close(got, want, f"{what}: output")
        if not out.requires_grad:
            fail(f"{what}: the result does not require grad; build it from differentiable tensor "
                 f"operations on x, weight and bias (no .numpy(), no mini.no_grad())")
        if run.backward_raised is not None:
            fail(f"{what}: backward through your result failed: {run.backward_raised.text()}")
        k = int(np.prod(norm))
        gg = g * w
        egx = (k * gg - gg.sum(axes, keepdims=True) - xh * (gg * xh).sum(axes, keepdims=True)) \
            / (k * np.sqrt(var + eps))
        lead = tuple(range(len(shape) - len(norm)))
        gx, gw, gb = (_grad(run.args_after[i], what) for i in (0, 2, 3))
        if gx is None or gw is None or gb is None:
            fail(f"{what}: after backward, x, weight and bias should all have gradients")
        _close(gx, egx, f"{what}: gradient of x")
        _close(gw, (g * xh).sum(lead), f"{what}: gradient of weight")
        _close(gb, g.sum(lead), f"{what}: gradient of bias")
    out = call(fn, _t(gen.normal(size=(3, 4))), (4,), None, None, 1e-5, name="layernorm")
    got = _tensor_np(out, "layernorm(x, (4,), None, None, 1e-05)", (3, 4))
    if not np.allclose(got.mean(-1), 0, atol=1e-7):
        fail("layernorm with weight=None and bias=None should still normalise (skip the affine "
             "part when they are None)")


# =========================================================================== 05.dropout

@check("05.dropout", points=POINTS["05.dropout"])
def check_dropout(fn):
    gen = rng()
    for p in (0.25, 0.5, 0.8):
        n = 100_000
        what = call_text("dropout", f"<ones({n}) float64>", p, training=True)
        out = _run(fn, _t(np.ones(n)), p, training=True, _seed=int(gen.integers(1 << 30)),
                   what=what).value
        y = _tensor_np(out, what, (n,))
        zeros = float((y == 0).mean())
        if abs(zeros - p) > 0.01:
            if abs(zeros - (1 - p)) < 0.01:
                fail(f"{what}: {zeros:.1%} of the elements were zeroed; p is the probability to "
                     f"DROP an element (keep with probability 1 - p)")
            fail(f"{what}: {zeros:.1%} of the elements were zeroed, expected about {p:.0%}")
        kept = y[y != 0]
        if np.allclose(kept, 1.0):
            fail(f"{what}: the kept elements were not rescaled; inverted dropout multiplies them "
                 f"by 1/(1-p) in training so that the expected value of each element stays the "
                 f"same (and eval can be the identity)")
        if not np.allclose(kept, 1 / (1 - p), rtol=1e-12):
            fail(f"{what}: kept elements should equal x/(1-p) = {1 / (1 - p):.6g}, got values "
                 f"such as {float(kept[0]):.6g}")
        xs = gen.normal(size=(4, 5))
        seed = int(gen.integers(1 << 30))
        a = _tensor_np(_run(fn, _t(xs), p, training=True, _seed=seed, what=what).value, what)
        b = _tensor_np(_run(fn, _t(xs), p, training=True, _seed=seed, what=what).value, what)
        if not np.array_equal(a, b):
            fail(f"{what}: the same mini.manual_seed gave two different masks; draw the mask "
                 f"with mini.rand so runs are reproducible (and a checkpoint can restore them)")
    x = gen.normal(size=(3, 7))
    for p in (0.0, 0.3, 0.9):
        what = call_text("dropout", "<x (3, 7)>", p, training=False)
        got = _tensor_np(call(fn, _t(x), p, training=False, name="dropout"), what, (3, 7))
        if not np.array_equal(got, x):
            if np.allclose(got, x / (1 - p)) or np.allclose(got, x * (1 - p)):
                fail(f"{what}: at eval dropout is the identity; inverted dropout already scaled "
                     f"during training, so nothing is scaled at inference")
            fail(f"{what}: at eval dropout must return x unchanged")
    what = call_text("dropout", "<x (3, 7)>", 0.0, training=True)
    if not np.array_equal(_tensor_np(call(fn, _t(x), 0.0, training=True, name="dropout"), what), x):
        fail(f"{what}: with p=0 nothing is dropped and nothing is scaled")
    what = call_text("dropout", "<x (3, 7)>", 1.0, training=True)
    got = _tensor_np(call(fn, _t(x), 1.0, training=True, name="dropout"), what, (3, 7))
    if np.any(got != 0):
        fail(f"{what}: with p=1 every element is dropped: the result is all zeros (and no "
             f"division by zero)")
    what = call_text("dropout", "<x (50,) requires_grad>", 0.4, training=True)
    run = _run(fn, _t(gen.normal(size=(50,)), True), 0.4, training=True, _backward="sum",
               _observe=True, what=what)
    y = _tensor_np(run.value, what, (50,))
    if not run.value.requires_grad:
        fail(f"{what}: the result does not require grad; multiply x by the mask with tensor "
             f"operations so that gradients flow")
    if run.backward_raised is not None:
        fail(f"{what}: backward through your result failed: {run.backward_raised.text()}")
    mask = (y != 0) / 0.6
    gx = _grad(run.args_after[0], what)
    if gx is None:
        fail(f"{what}: after backward, x has no gradient")
    _close(gx, mask, f"{what}: gradient of x", "the gradient is the mask times 1/(1-p)")


# =========================================================================== 05.cross_entropy

def _finite_on(fn, logits, target) -> bool | None:
    """Whether the student's loss is finite on one small probe (None: it raised)."""
    out = fn.run(_t(np.array(logits, dtype=np.float64)), _t(np.array(target, dtype=np.int64)))
    if out.raised is not None or type(out.value) is not TensorRecord:
        return None
    return bool(np.all(np.isfinite(np.asarray(out.value.data, dtype=np.float64))))


def _non_finite_loss(fn, what: str, got: float) -> str:
    """Name the cause of an inf/nan loss from two probes: one where only exp can overflow
    (logits 1000 and 999, no tiny probability), one where only a probability can underflow
    (logits 0 and -3000, the target the tiny one, nothing large)."""
    overflow = _finite_on(fn, [[1000.0, 999.0]], [0]) is False
    underflow = _finite_on(fn, [[0.0, -3000.0]], [1]) is False
    causes = []
    if overflow:
        causes.append("exp overflowed on logits near 1000 (exp(1000) is inf in float64): shift "
                      "each row by its maximum before exp")
    if underflow:
        causes.append("the target's probability underflowed to 0 before its log (log 0 = -inf) "
                      "when its logit is far below the others: compute log-probabilities from the "
                      "shifted logits directly, never as the log of a softmax")
    if not causes:
        causes.append("a step of the computation left the finite range; compare each "
                      "intermediate with the stable form logsumexp(z) - z[target]")
    return f"{what} returned {got}: " + "; and ".join(causes)


@check("05.cross_entropy", points=POINTS["05.cross_entropy"])
def check_cross_entropy(fn):
    gen = rng()
    for scale in (1.0, 10.0, 1000.0, 1e4):
        n, c = int(gen.integers(2, 9)), int(gen.integers(2, 8))
        z = gen.normal(size=(n, c)) * scale
        y = gen.integers(0, c, size=n)
        if scale >= 1000:
            z[0, 0] = -scale * 3          # very negative too: exp underflows to 0 naively,
            y[0] = 0                      # and it is the target: log(softmax) gives log(0)
        m = z.max(1, keepdims=True)
        lse = (m + np.log(np.exp(z - m).sum(1, keepdims=True)))[:, 0]
        want = float((lse - z[np.arange(n), y]).mean())
        p = np.exp(z - lse[:, None])
        onehot = np.eye(c)[y]
        what = call_text("cross_entropy", f"<logits {z.shape} of size ~{scale:g}>",
                         f"<target {y.shape}>")
        run = _run(fn, _t(z, True), _t(y.astype(np.int64)), _backward="default", _observe=True,
                   what=what)
        out = run.value
        got = float(_tensor_np(out, what, ()))
        if not math.isfinite(got):
            fail(_non_finite_loss(fn, what, got))
        if abs(got - want) > 1e-7 * max(1.0, abs(want)):
            if abs(got - want * n) <= 1e-7 * max(1.0, abs(want * n)):
                fail(f"{what}: got {got:.6g}, the sum over the batch; return the mean "
                     f"({want:.6g})")
            if abs(got + want) <= 1e-7 * max(1.0, abs(want)):
                fail(f"{what}: got {got:.6g}, the sign is flipped: the loss is -log p(target)")
            fail(f"{what}: expected {want:.6g}, got {got:.6g}")
        if not out.requires_grad:
            fail(f"{what}: the loss does not require grad; compute it with differentiable "
                 f"tensor operations on the logits")
        if run.backward_raised is not None:
            fail(f"{what}: backward through your loss failed: {run.backward_raised.text()}")
        gz = _grad(run.args_after[0], what)
        if gz is None:
            fail(f"{what}: after backward the logits have no gradient")
        _close(gz, (p - onehot) / n, f"{what}: gradient of the logits",
               "the gradient is (softmax(z) - onehot(target)) / N", atol=1e-9)


# =========================================================================== 05.adamw_step

def _adamw_np(p, g, m, v, t, lr, b1, b2, eps, wd):
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    p = p * (1 - lr * wd)
    p = p - lr / (1 - b1 ** t) * m / (np.sqrt(v) / math.sqrt(1 - b2 ** t) + eps)
    return p, m, v


#: Points of 05.adamw_step's parts (12 in all).
ADAMW_PARTS = {"moment estimates": 4, "bias-corrected step": 4, "decoupled weight decay": 4}


def _adamw_trajectories(fn, decay: bool):
    """Six steps of four random problems through the student's adamw_step, the state carried
    in the student's own tensors: yields (what, inputs, expected, got) per step, where
    inputs = (p, g, m, v, step, lr, b1, b2, eps, wd) before the step."""
    gen = rng()
    for trial in range(4):
        shape = (int(gen.integers(1, 5)), int(gen.integers(1, 5)))
        lr = float(gen.choice([1e-3, 1e-2, 0.1]))
        b1, b2 = float(gen.choice([0.9, 0.8])), float(gen.choice([0.999, 0.99]))
        eps = 1e-2 if trial == 1 else float(gen.choice([1e-8, 1e-6]))   # 1e-2: where eps goes shows
        wd = float(gen.choice([0.01, 0.3])) if decay else 0.0
        p = gen.normal(size=shape)
        m, v = np.zeros(shape), np.zeros(shape)
        for step in range(1, 7):
            g = gen.normal(size=shape) * gen.uniform(0.01, 10)
            if decay and trial == 0 and step == 1:
                g = np.zeros(shape)          # decay alone: nothing else moves the weight
            what = call_text("adamw_step", "<param>", "<grad>", "<exp_avg>", "<exp_avg_sq>",
                             step, lr, b1, b2, eps, wd)
            run = _run(fn, _t(p), _t(g), _t(m), _t(v), step, lr, b1, b2, eps, wd,
                       _observe=True, what=what)
            got = [_tensor_np(run.args_after[i], what) for i in range(4)]
            yield what, (p, g, m, v, step, lr, b1, b2, eps, wd), \
                _adamw_np(p, g, m, v, step, lr, b1, b2, eps, wd), got
            p, m, v = got[0], got[2], got[3]     # the student's state is the truth from here


def _steps_until_failure(steps):
    """The steps a trajectory got through, and the failure that ended it (None if none): one
    run serves several parts, and each part still meets the failure where the run did."""
    done = []
    try:
        for step in steps:
            done.append(step)
    except CheckFailed as e:
        return done, e
    return done, None


@check("05.adamw_step", points=POINTS["05.adamw_step"])
def check_adamw_step(fn):
    plain, plain_failure = _steps_until_failure(_adamw_trajectories(fn, decay=False))
    with part("moment estimates", ADAMW_PARTS["moment estimates"]):
        for what, (_, g, *_rest), (_, m, v), got in plain:
            if not np.array_equal(got[1], g):
                fail(f"{what}: the call changed grad in place; grad belongs to the caller "
                     f"(autograd and gradient clipping read it after the step): compute with "
                     f"new tensors, and update only param, exp_avg and exp_avg_sq")
            _close(got[2], m, f"{what}: exp_avg (updated in place)",
                   "exp_avg is an exponential moving average of the gradient with decay beta1")
            _close(got[3], v, f"{what}: exp_avg_sq (updated in place)",
                   "exp_avg_sq is an exponential moving average of the squared gradient with "
                   "decay beta2")
        if plain_failure is not None:
            raise plain_failure
    with part("bias-corrected step", ADAMW_PARTS["bias-corrected step"]):
        for what, (before, _, _, _, step, lr, b1, b2, eps, _), (p, _, _), got in plain:
            if _near(got[0], p):
                continue
            if _near(got[0], before):
                fail(f"{what}: the parameter did not change; update param in place")
            # the candidates use the student's moments, so a moment mistake is not blamed twice
            gm, gv = got[2], got[3]
            if _near(got[0], before - lr / (1 - b1 ** step) * gm / np.sqrt(gv / (1 - b2 ** step) + eps)):
                fail(f"{what}: eps went inside the square root; Adam adds it to the denominator "
                     f"after the square root of the corrected second moment")
            if _near(got[0], before - lr * gm / (np.sqrt(gv) + eps)):
                fail(f"{what}: no bias correction: m and v start at zero, so divide them by "
                     f"(1 - beta1**step) and (1 - beta2**step); without it the first steps are "
                     f"far too small")
            _close(got[0], p, f"{what}: param",
                   "param <- param - lr/(1-beta1^t) · m / (sqrt(v)/sqrt(1-beta2^t) + eps)")
        if plain_failure is not None:
            raise plain_failure
    with part("decoupled weight decay", ADAMW_PARTS["decoupled weight decay"]):
        for what, (before, g, m0, v0, step, lr, b1, b2, eps, wd), (p, m, v), got \
                in _adamw_trajectories(fn, decay=True):
            if _near(got[0], p) and _near(got[2], m) and _near(got[3], v):
                continue
            gl = g + wd * before           # L2: the decay folded into the gradient
            m_l2 = b1 * m0 + (1 - b1) * gl
            v_l2 = b2 * v0 + (1 - b2) * gl * gl
            p_l2 = before - lr / (1 - b1 ** step) * m_l2 / (np.sqrt(v_l2) / math.sqrt(1 - b2 ** step) + eps)
            if _near(got[2], m_l2) or _near(got[0], p_l2):
                fail(f"{what}: the weight decay went into the gradient (L2, as in Adam), so "
                     f"it is rescaled by the adaptive denominator; AdamW decouples it: the "
                     f"parameter itself shrinks by lr·weight_decay, apart from the Adam update")
            if not np.any(g) and _near(got[0], before):
                fail(f"{what}: with a zero gradient the parameter did not shrink: decoupled "
                     f"weight decay acts on the parameter even where the gradient is zero")
            _close(got[0], p, f"{what}: param",
                   "param <- param·(1 - lr·wd) - lr/(1-beta1^t) · m / (sqrt(v)/sqrt(1-beta2^t) + eps)")


# =========================================================================== 05.warmup_cosine

def _wc(step, base, warm, total, floor):
    if step < warm:
        return base * (step + 1) / warm
    span = max(1, total - warm)
    prog = min(1.0, (step - warm) / span)
    return floor + (base - floor) * (1 + math.cos(math.pi * prog)) / 2


@check("05.warmup_cosine", points=POINTS["05.warmup_cosine"])
def check_warmup_cosine(fn):
    gen = rng()
    configs = [(0.1, 5, 20, 0.0), (3e-4, 10, 100, 1e-5), (1.0, 0, 10, 0.1)]
    for _ in range(3):
        warm = int(gen.integers(1, 20))
        configs.append((float(gen.uniform(1e-4, 1)), warm, warm + int(gen.integers(1, 80)),
                        float(gen.choice([0.0, 1e-4]))))
    for base, warm, total, floor in configs:
        steps = sorted({0, 1, max(0, warm - 1), warm, warm + 1, (warm + total) // 2, total - 1,
                        total, total + 5, *gen.integers(0, total + 3, size=5).tolist()})
        for s in steps:
            s = int(s)
            what = call_text("warmup_cosine", s, base, warm, total, floor)
            got = expect_float(call(fn, s, base, warm, total, floor, name="warmup_cosine"), what)
            want = _wc(s, base, warm, total, floor)
            if abs(got - want) <= 1e-9 * max(1.0, abs(want)):
                continue
            if s < warm and warm and abs(got - base * s / warm) < 1e-12 * max(1, base):
                fail(f"{what}: expected {want:.6g}, got {got:.6g}: off by one step; step counts "
                     f"from 0, and the first step should already use base_lr/warmup_steps (lr 0 "
                     f"wastes a step), reaching base_lr at step warmup_steps - 1")
            if s >= warm and abs(got - _wc(s - 1, base, warm, total, floor)) < 1e-12 * max(1, base) \
                    or s >= warm and abs(got - _wc(s + 1, base, warm, total, floor)) < 1e-12 * max(1, base):
                fail(f"{what}: expected {want:.6g}, got {got:.6g}: the cosine phase is off by one "
                     f"step; it starts at base_lr exactly at step == warmup_steps")
            if s > total and abs(got - floor) > 1e-12:
                fail(f"{what}: after total_steps the rate stays at min_lr = {floor:g}, got {got:.6g}")
            fail(f"{what}: expected {want:.6g}, got {got:.6g}")


# =========================================================================== checkpoints

_STOP, _END = 6, 12
_JOB = "<path>", "<model>", "<optimizer>", "<scheduler>", "<loader>"


def _same_losses(a, b) -> bool:
    """The same run twice (same code, same order): equal up to the last bits."""
    return (type(a) is list and len(a) == len(b) and
            all(type(x) is float and math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)
                for x, y in zip(a, b)))


@check("05.save_checkpoint", points=POINTS["05.save_checkpoint"])
def check_save_checkpoint(fn):
    ref = fn.expected("checkpoint_reference", stop=_STOP, end=_END)
    what = call_text("save_checkpoint", *_JOB, step=_STOP)
    obs = fn.scenario("checkpoint_save", stop=_STOP, end=_END)
    if obs.get("result") is not None:
        fail(f"{what} should return None, got {describe(obs['result'])}")
    if not obs.get("exists"):
        fail(f"{what}: no file at path afterwards (publish the temporary file with "
             f"os.replace(tmp, path))")
    if "load_error" in obs:
        err = obs["load_error"]
        fail(f"{what}: the file could not be read with serialization.load: "
             f"{err.text() if type(err) is ExceptionRecord else describe(err)}; write it with "
             f"serialization.save(state, f)")
    if obs.get("kind") != "dict":
        fail(f"{what}: the file should hold a dict, got {describe(obs.get('kind'))}")
    keys = obs["keys"]
    missing = [k for k in ("step", "model", "optimizer", "scheduler", "loader", "rng")
               if k not in keys]
    if "optimizer" in missing:
        fail(f"{what}: the checkpoint has no optimizer state (keys {keys}): without the "
             f"optimizer's moments and step count the resumed run diverges")
    if "rng" in missing:
        fail(f"{what}: the checkpoint has no random-number state (keys {keys}): the "
             f"resumed run would draw different dropout masks and diverge; save "
             f"mini.get_rng_state()")
    if missing:
        fail(f"{what}: the checkpoint lacks {missing} (keys {keys})")
    if type(obs["step"]) is not int or obs["step"] != _STOP:
        fail(f"{what}: state['step'] should be the int {_STOP}, got {describe(obs['step'])}")
    if obs["rng"] != ref["rng_at_stop"]:
        fail(f"{what}: state['rng'] is not mini's random state at the time of the save; "
             f"save mini.get_rng_state()")
    if "restore_error" in obs:
        err = obs["restore_error"]
        fail(f"{what}: restoring the checkpoint's state dicts failed: "
             f"{err.text() if type(err) is ExceptionRecord else describe(err)}")
    rest, want = obs.get("rest"), ref["losses"][_STOP:]
    if not _same_losses(rest, want):
        fail(f"{what}: resuming from your checkpoint does not reproduce the uninterrupted run "
             f"(losses {describe(rest)[:60]} vs {want[:3]}); save each object's "
             f"state_dict() and the RNG state at the moment of the save")
    if obs.get("leftovers"):
        fail(f"{what}: files were left next to the checkpoint: {obs['leftovers']}; the temporary "
             f"file must become the checkpoint (os.replace), not stay behind")
    if obs.get("intact_after_failure") is not True:
        fail(f"{what}: a save that failed half-way (the disk filled up while pickling) "
             f"destroyed the previous checkpoint: the save is not atomic; write to a "
             f"temporary file in the same directory, fsync it, then os.replace it onto "
             f"the path")
    if obs.get("leftovers_after_failure"):
        fail(f"{what}: a failed save left its temporary file behind "
             f"({obs['leftovers_after_failure']}); remove it when the save fails")
    calls = obs.get("calls") or []
    if "replace" not in calls and "rename" not in calls:
        fail(f"{what}: the checkpoint was not published with os.replace (atomic rename)")
    if any(c.endswith(":other-dir") for c in calls):
        fail(f"{what}: the temporary file was written in another directory than the "
             f"checkpoint: a rename is atomic only within one file system, so make the "
             f"temporary file next to the checkpoint")
    if "fsync" not in calls or (calls_kinds := [c for c in calls if c.startswith("fsync:")]) \
            and "fsync:file" not in calls_kinds:
        fail(f"{what}: the data was never fsync'ed: after a power cut the renamed file "
             f"could be empty; make the file's bytes durable before publishing it")
    if calls_kinds and "fsync:dir" not in calls_kinds:
        fail(f"{what}: the rename was not made durable: the new directory entry lives in the "
             f"directory, which was never fsync'ed, so after a power cut the old checkpoint "
             f"(or none) can come back")


@check("05.load_checkpoint", points=POINTS["05.load_checkpoint"])
def check_load_checkpoint(fn):
    ref = fn.expected("checkpoint_reference", stop=_STOP, end=_END)
    want = fn.expected("checkpoint_load", stop=_STOP, end=_END)
    what = call_text("load_checkpoint", *_JOB)
    obs = fn.scenario("checkpoint_load", stop=_STOP, end=_END)
    step = expect_int(obs.get("step"), f"{what} (the step)", allow_numpy=True)
    if step != _STOP:
        fail(f"{what} should return the saved step {_STOP}, got {step}")
    weights = obs.get("weights") or []
    if len(weights) != len(want["weights"]) or not all(
            type(a) is np.ndarray and np.array_equal(a, b) for a, b in zip(weights, want["weights"])):
        fail(f"{what}: the model's parameters and buffers were not restored "
             f"(model.load_state_dict(state['model']))")
    if obs.get("optimizer_state") is not True:
        fail(f"{what}: the optimizer state was not restored: without its momentum buffers the "
             f"resumed run diverges; call optimizer.load_state_dict(state['optimizer'])")
    if obs.get("rng") != want["rng"]:
        fail(f"{what}: mini's random state was not restored (mini.set_rng_state): the "
             f"resumed run draws different dropout masks and diverges")
    if obs.get("scheduler_epoch") != want["scheduler_epoch"]:
        fail(f"{what}: the scheduler was not restored: it is at step {obs.get('scheduler_epoch')}, "
             f"the saved one at {want['scheduler_epoch']}")
    if obs.get("loader") != want["loader"]:
        fail(f"{what}: the data loader's position was not restored "
             f"(loader.load_state_dict(state['loader'])): the resumed run would see other "
             f"batches")
    rest = obs.get("rest")
    if not _same_losses(rest, ref["losses"][_STOP:]):
        fail(f"{what}: the resumed run does not reproduce the uninterrupted run "
             f"(losses {describe(rest)[:60]} vs {ref['losses'][_STOP:_STOP + 3]})")


# =========================================================================== quizzes

@check("05.quiz_adam_traffic", points=POINTS["05.quiz_adam_traffic"])
def check_quiz_adam_traffic(fn):
    what = "your answer (bytes Adam moves per step for the 101,770-parameter MLP, float32)"
    got = expect_int(call(fn, name="answer"), what, allow_numpy=True)
    want = 28 * 101_770
    if got == want:
        return
    hints = {
        16 * 101_770: "16 B/param is what training holds (weight, grad, m, v); per step Adam "
                      "reads weight, grad, m, v (16 B) and writes weight, m, v (12 B)",
        12 * 101_770: "that counts only the writes; the step also reads weight, grad, m and v",
        4 * 101_770: "that is one float32 per parameter; Adam touches four arrays",
    }
    fail(f"{what}: not {got:,}; {hints.get(got, 'count the float32 arrays Adam reads and writes per parameter')}")


@check("05.quiz_eval_mode", points=POINTS["05.quiz_eval_mode"])
def check_quiz_eval_mode(fn):
    expect_choice(fn, "your answer to the question about model.eval()", "C", {
        "A": "eval() does not turn off autograd: that is mini.no_grad()",
        "B": "eval() changes layers that behave differently in training (dropout, batch norm); "
             "the weights stay trainable",
        "D": "dropout at eval is the identity: no mask and no scaling",
    })
