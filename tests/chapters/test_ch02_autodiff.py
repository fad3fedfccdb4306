"""Chapter 02 (automatic differentiation): the seed facts through mini, the napkin model of
saved-tensor memory against mini's own count, the payoff network's gradients, and the
notebook's consistency with mini and the grader.

The grading invariants shared by every chapter (reference scores full marks, blank notebook
scores zero, every catalogued mistake is caught) live in ``test_invariants.py``.
"""
from __future__ import annotations

import math
import time
from pathlib import Path

import nbformat
import numpy as np
import pytest

import mini
from helpers import (assert_signatures_and_docstrings_equal_references,
                     assert_solution_regions_equal_references, displayed_widget_bundle, run_cells,
                     run_notebook_cpu_seconds)
from mini.autograd import Function, forward_ad, graph
from mini.napkin.autodiff import (activation_crossover_batch, gradient_passes, jacobian_bytes,
                                  mlp_saved_breakdown, mlp_saved_bytes)

ROOT = Path(__file__).resolve().parents[2]
CHAPTER = ROOT / "course" / "02_autodiff"
NOTEBOOK = CHAPTER / "autodiff.ipynb"
SLOTS = ["02.add_vjp", "02.mul_vjp", "02.div_vjp", "02.pow_vjp", "02.exp_vjp", "02.log_vjp",
         "02.relu_vjp", "02.unbroadcast", "02.sum_vjp", "02.mean_vjp", "02.reshape_vjp",
         "02.permute_vjp", "02.matmul_vjp", "02.toposort", "02.seed_gradient",
         "02.accumulate_grad", "02.backward", "02.mul_jvp", "02.central_difference"]
OTHERS = ["02.multiply_add", "02.quiz_accumulate", "02.quiz_inplace", "02.quiz_eval"]


def val(t):
    return np.asarray(t.detach().numpy(), dtype=np.float64)


def notebook_multiply_add():
    """The notebook's solution of exercise 18 (a Function), from its cell."""
    return run_cells("02_autodiff", "setup", "02.multiply_add")["MultiplyAdd"]


# --------------------------------------------------------------------------- seed facts

def test_z_equals_3x_squared_graph_and_gradient():
    x = mini.tensor(2.0, requires_grad=True)
    z = (3 * x) ** 2
    names = [n.name() for n in graph.nodes(z)]
    assert names == ["PowBackward0", "MulBackward0", "AccumulateGrad"]
    z.backward()
    assert x.grad.item() == 36.0


def test_y_equals_2x_z_equals_y_plus_1():
    x = mini.tensor(7.0, requires_grad=True)
    y = 2 * x
    z = y + 1
    z.backward()
    assert x.grad.item() == 2.0


def test_toy_network():
    x, w1, w2 = (mini.tensor(v, requires_grad=True) for v in (1.0, 2.0, 3.0))
    (w2 * (w1 * x)).backward()
    assert (w2.grad.item(), w1.grad.item(), x.grad.item()) == (2.0, 3.0, 6.0)


def test_relu_vjp_fact():
    from mini.ops.elementwise import relu_vjp
    got = relu_vjp(mini.tensor([0.5, 0.5, 0.5]), mini.tensor([-1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(val(got), [0.0, 0.5, 0.5])


def test_broadcast_gradient_fact():
    from mini.ops._util import sum_to
    up = mini.tensor([[1.0, 2.0], [0.5, 1.5], [0.3, 0.7]])
    np.testing.assert_allclose(val(sum_to(up, (2,))), [1.8, 4.2])
    # and through mini: b broadcast over three rows
    b = mini.tensor([0.5, -0.3], requires_grad=True)
    (mini.zeros(3, 2) + b).backward(up)
    np.testing.assert_allclose(val(b.grad), [1.8, 4.2], rtol=1e-6)


def test_multiply_add_fact():
    MultiplyAdd = notebook_multiply_add()
    x, y, z = (mini.tensor(v, requires_grad=True) for v in (2.0, 3.0, 1.0))
    out = MultiplyAdd.apply(x, y, z)
    assert out.item() == 7.0 and out.grad_fn.name() == "MultiplyAddBackward"
    out.backward()
    assert (x.grad.item(), y.grad.item(), z.grad.item()) == (3.0, 2.0, 1.0)


def test_forward_mode_fact():
    with forward_ad.dual_level():
        x = forward_ad.make_dual(mini.tensor(2.0), mini.tensor(1.0))
        value, tangent = forward_ad.unpack_dual(x ** 2 * x.sin())
    assert round(value.item(), 3) == 3.637 and round(tangent.item(), 3) == 1.973
    x = mini.tensor(2.0, requires_grad=True)
    (x ** 2 * x.sin()).backward()
    assert round(x.grad.item(), 4) == 1.9726
    assert round(2 * 2 * math.sin(2), 4) == 3.6372 and round(4 * math.cos(2), 4) == -1.6646


def test_in_place_write_to_a_saved_tensor_raises():
    x = mini.tensor([0.0, 1.0], requires_grad=True)
    y = x.exp()
    y.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    x = mini.tensor([0.5, -1.0], requires_grad=True)  # the self-check question: answer B
    y = x.sigmoid()
    y.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_cubic_higher_order_and_accumulation_quiz():
    x = mini.tensor(2.0, requires_grad=True)
    (d1,) = mini.autograd.grad(x ** 3, x, create_graph=True)
    (d2,) = mini.autograd.grad(d1, x, create_graph=True)
    (d3,) = mini.autograd.grad(d2, x)
    assert (d1.item(), d2.item(), d3.item()) == (12.0, 12.0, 6.0)
    w = mini.tensor(1.0, requires_grad=True)
    for _ in range(3):
        ((w * 0.5) ** 2).backward()
    assert w.grad.item() == 1.5  # the answer to quiz_accumulate


def test_eval_keeps_recording_no_grad_does_not():
    from mini.napkin.widgets_autodiff import build_mlp, saved_bytes
    model = build_mlp((20, 16, 4))
    x = mini.randn(8, 20)
    train = saved_bytes(model(x))
    model.eval()
    assert saved_bytes(model(x)) == train > 0
    with mini.no_grad():
        assert saved_bytes(model(x)) == 0  # the answer to quiz_eval: C


# --------------------------------------------------------------------------- the napkin model

def test_napkin_numbers():
    assert jacobian_bytes(10**5, 10**5) == 40_000_000_000
    assert gradient_passes(1000, 1, "forward") == 1000 and gradient_passes(1000, 1, "reverse") == 1
    assert mlp_saved_bytes((784, 128, 10), 1) == 410_688
    parts = mlp_saved_breakdown((784, 128, 10), 32)
    assert parts == {"input": 100_352, "activations": 32_768, "weights": 406_528, "total": 539_648}
    assert 97 < activation_crossover_batch((784, 128, 10)) < 98
    with pytest.raises(ValueError):
        mlp_saved_bytes((784,), 1)


@pytest.mark.parametrize("sizes", [(784, 128, 10), (20, 30, 40, 5), (64, 32, 10), (3, 2)])
@pytest.mark.parametrize("batch", [1, 7, 64])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_widget_model_equals_mini_measurement(sizes, batch, dtype):
    from mini.napkin.widgets_autodiff import measure_saved_bytes
    got, how = measure_saved_bytes(sizes, batch, dtype)
    assert how == "mini.autograd.graph.saved_tensor_bytes"
    assert got == mlp_saved_bytes(sizes, batch, np.dtype(dtype).itemsize)


def test_saved_bytes_fall_back_without_toposort():
    from mini.exercises import implement
    from mini.napkin.widgets_autodiff import measure_saved_bytes

    @implement("02.toposort")
    def topological_order(roots):
        raise NotImplementedError()

    got, how = measure_saved_bytes((10, 8, 3), 4)
    assert got == mlp_saved_bytes((10, 8, 3), 4) and "02.toposort" in how


def test_widget_prints_without_a_frontend(capsys, monkeypatch):
    from mini.napkin.widgets_autodiff import napkin_saved_bytes
    monkeypatch.setenv("MINI_NO_WIDGETS", "1")
    napkin_saved_bytes(plot=False)
    out = capsys.readouterr().out
    assert "model:    539,648 B" in out and "measured / model = 1.00" in out
    assert "your estimate: none yet" in out
    napkin_saved_bytes(estimate="1.079296 MB", plot=False)
    assert "estimate / model = 2.00" in capsys.readouterr().out


def test_widget_object_has_a_text_fallback(monkeypatch):
    import mini.napkin.widgets_autodiff as W
    bundle = displayed_widget_bundle(monkeypatch, W, "napkin_saved_bytes", estimate=None, plot=False)
    assert "539,648" in bundle["text/plain"]
    assert "application/vnd.jupyter.widget-view+json" in bundle


def test_plot_against_batch_size():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from mini.napkin.widgets_autodiff import plot_saved_vs_batch
    fig = plot_saved_vs_batch((30, 20, 5), batches=(1, 8, 64), estimate=5000, estimate_batch=8)
    assert fig.axes and len(fig.axes[0].lines) == 5
    plt.close(fig)


# --------------------------------------------------------------------------- the payoff

@pytest.fixture
def payoff(capsys):
    """The namespace of the notebook's payoff after its gradient cell ran (mini's references
    standing in for the student's engine), and what that cell printed."""
    ns = run_cells("02_autodiff", "setup", "demo_payoff_gradients")
    return ns, capsys.readouterr().out


def test_the_payoffs_numpy_backward_is_right(payoff):
    """The cell's hand-written numpy backward against central differences of the same
    loss in float64 (step 1e-6: truncation about 1e-12 times the third derivative,
    rounding about 1e-16 / 1e-6 = 1e-10; 1e-7 leaves room for both)."""
    ns, _ = payoff
    model = ns["make_model"]()
    x, y = ns["X_train"][:16], ns["y_train"][:16]
    grads = ns["numpy_gradients"](model, x, y)
    W1, b1, W2, b2 = (val(p) for p in model.parameters())

    def loss(W1):
        h = np.maximum(x.astype(np.float64) @ W1.T + b1, 0)
        logits = h @ W2.T + b2
        logits = logits - logits.max(axis=1, keepdims=True)
        return np.mean(np.log(np.exp(logits).sum(axis=1)) - logits[np.arange(len(y)), y])

    rng = np.random.default_rng(0)
    for _ in range(8):
        i, j = rng.integers(0, W1.shape[0]), rng.integers(0, W1.shape[1])
        up, down = W1.copy(), W1.copy()
        up[i, j] += 1e-6
        down[i, j] -= 1e-6
        assert abs((loss(up) - loss(down)) / 2e-6 - grads[0][i, j]) < 1e-7


@pytest.mark.blas_sensitive
def test_payoff_gradients_match_numpy_and_the_reference(payoff):
    from mini.exercises import implement, reference
    ns, printed = payoff
    assert "largest difference from mini's reference engine: 0.0e+00" in printed
    model = ns["make_model"]()
    x, y = ns["X_train"][:128], ns["y_train"][:128]
    ref = ns["engine_gradients"](model, x, y)
    for g1, g2 in zip(ref, ns["numpy_gradients"](model, x, y)):
        np.testing.assert_allclose(g1, g2, atol=1e-6)  # float32 engine vs float64 numpy
    # the student's engine, simulated by registering copies of the references
    for slot in SLOTS:
        implement(slot)(reference(slot))
    for g1, g2 in zip(ns["engine_gradients"](model, x, y), ref):
        np.testing.assert_array_equal(g1, g2)           # the same code: bit for bit


def test_payoff_trains(payoff):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ns, _ = payoff
    run_cells("02_autodiff", "demo_payoff_training", ns=ns)
    plt.close("all")
    assert np.mean(ns["predictions"] == ns["y_test"]) > 0.8


# --------------------------------------------------------------------------- the grader

def test_reference_passes_every_check_repeatedly():
    """The checks draw fresh random cases on every run: the reference must never fail."""
    from grader.checks import run_in_process
    from mini.exercises import reference
    for slot in SLOTS:
        for _ in range(5):
            verdict = run_in_process(slot, reference(slot))
            assert verdict.passed, f"{slot}: {verdict.message}"
    for fn, slot in [(notebook_multiply_add(), "02.multiply_add"), (lambda: 1.5, "02.quiz_accumulate"),
                     (lambda: "b", "02.quiz_inplace"), (lambda: " C ", "02.quiz_eval")]:
        verdict = run_in_process(slot, fn)
        assert verdict.passed, f"{slot}: {verdict.message}"


@pytest.mark.parametrize("slot", SLOTS + ["02.quiz_eval"])
def test_blank_stub_scores_nothing(slot):
    from grader.checks import run_in_process

    def stub(*args, **kwargs):
        raise NotImplementedError()

    verdict = run_in_process(slot, stub)
    assert not verdict.passed and "not implemented yet" in verdict.message


def test_blank_function_class_scores_nothing():
    from grader.checks import run_in_process

    class Blank(Function):
        @staticmethod
        def forward(ctx, x, y, z):
            raise NotImplementedError()

        @staticmethod
        def backward(ctx, grad):
            raise NotImplementedError()

    verdict = run_in_process("02.multiply_add", Blank)
    assert not verdict.passed and "not implemented yet" in verdict.message


def test_checks_refuse_lookalike_results():
    """A VJP that returns numpy arrays, or objects that claim equality, earns nothing."""
    from grader.checks import run_in_process

    class Liar:
        def __eq__(self, other):
            return True

    verdict = run_in_process("02.mul_vjp", lambda g, a, b: (Liar(), Liar()))
    assert not verdict.passed and "should be a mini Tensor" in verdict.message
    verdict = run_in_process("02.add_vjp", lambda g, a, b: (g.numpy(), g.numpy()))
    assert not verdict.passed and "numpy array" in verdict.message
    verdict = run_in_process("02.quiz_eval", lambda: Liar())
    assert not verdict.passed


def test_mistake_messages_name_the_mistake():
    from grader.checks import run_in_process
    from grader.mistakes.ch02_autodiff import MISTAKES
    assert len(MISTAKES) >= 10
    for m in MISTAKES:
        verdict = run_in_process(m.slot_id, m.fn)
        assert not verdict.passed and m.expect_message in verdict.message, (m.name, verdict.message)


def test_toposort_check_survives_a_deep_chain_quickly():
    from grader.checks import run_in_process
    from mini.exercises import reference
    # CPU seconds of this process (the check is single-threaded Python): the work, which a
    # loaded machine does not inflate as it does wall time
    start = time.process_time()
    assert run_in_process("02.toposort", reference("02.toposort")).passed
    assert time.process_time() - start < 10


# --------------------------------------------------------------------------- the notebook

def test_notebook_solution_regions_equal_the_references():
    assert_solution_regions_equal_references(NOTEBOOK, SLOTS)


def test_notebook_signatures_and_docstrings_equal_the_references():
    assert_signatures_and_docstrings_equal_references(NOTEBOOK, SLOTS)


def test_the_checks_are_the_chapters_slots():
    """(The notebook's nbgrader metadata against these checks: ``test_invariants.py``.)"""
    from grader.checks import checks_for_chapter
    assert sorted(checks_for_chapter(2)) == sorted(SLOTS + OTHERS)


@pytest.mark.slow
def test_instructor_notebook_runs_quickly_and_shows_the_seed_facts():
    pytest.importorskip("nbclient")
    nb = nbformat.read(str(NOTEBOOK), as_version=4)
    cpu = run_notebook_cpu_seconds(nb, CHAPTER, timeout=60)
    assert cpu < 90, f"the solution notebook's kernel used {cpu:.0f} CPU seconds"
    text = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            text.append(out.get("text", "") or out.get("data", {}).get("text/plain", ""))
    text = "\n".join(text)
    assert "PowBackward0 -> MulBackward0 -> AccumulateGrad" in text
    assert "dz/dx = tensor(36.)" in text
    assert "your gradient of b: [1.8 4.2]" in text
    assert "forward mode: f(2) = 3.637, f'(2) = 1.973" in text
    assert "3.6372 + (-1.6646)" in text
    assert "measured / model = 1.00" in text
    assert "modified by an inplace operation" in text
    assert "first derivative 12, second 12, third 6" in text
    assert "largest difference from mini's reference engine: 0.0e+00" in text
    assert "hidden tests passed" in text and "finish exercise" not in text
