"""Chapter 05 (training): the seed facts through mini, the chapter's headline claim (a CNN
on digits past 97% in well under a minute), and the notebook's consistency with mini and the
grader.

The grading invariants shared by every chapter (reference scores full marks, blank notebook
scores zero, every catalogued mistake is caught) live in ``test_invariants.py``; this file
adds what is specific to chapter 05.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

import mini
from mini import nn

from helpers import run_cells

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "course" / "05_training" / "training.ipynb"
SLOTS = ["05.parameters", "05.kaiming_init", "05.batchnorm_forward", "05.batchnorm_backward",
         "05.layernorm", "05.dropout", "05.cross_entropy", "05.adamw_step", "05.warmup_cosine",
         "05.save_checkpoint", "05.load_checkpoint"]


@pytest.fixture(scope="module", autouse=True)
def _owners():
    from grader.checks.ch05_training import import_slot_owners
    import_slot_owners()


# --------------------------------------------------------------------------- seed facts

def _seed_mlp():
    return nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))


def test_seed_mlp_has_101770_parameters_and_adam_moves_2_85_MB():
    from mini.optim.adam import AdamW
    mlp = _seed_mlp()
    n = sum(p.numel() for p in mlp.parameters())
    assert n == 101_770
    assert 28 * n == 2_849_560 and round(28 * n / 1e6, 2) == 2.85
    opt = AdamW(mlp.parameters())
    mlp(mini.randn(32, 784)).sum().backward()
    opt.step()
    state = sum(s.nbytes for st in opt.state.values() for s in st.values()
                if isinstance(s, mini.Tensor))
    weights = sum(p.nbytes for p in mlp.parameters())
    grads = sum(p.grad.nbytes for p in mlp.parameters())
    assert (weights, grads, state) == (4 * n, 4 * n, 8 * n)      # 16 B/param before activations


def test_custom_layer_parameters_vs_buffers():
    class CustomLayer(nn.Module):
        def __init__(self, d_in, d_out):
            super().__init__()
            self.weight = nn.Parameter(mini.randn(d_out, d_in))
            self.bias = nn.Parameter(mini.zeros(d_out))
            self.register_buffer("running_mean", mini.zeros(d_out))

    from mini.nn.discovery import named_parameters
    layer = CustomLayer(10, 20)
    got = named_parameters(layer)
    assert [(n, tuple(p.shape)) for n, p in got] == [("weight", (20, 10)), ("bias", (20,))]
    assert "running_mean" in layer.state_dict()
    assert "running_mean" not in dict(got)


def test_eval_reaches_every_submodule_but_autograd_stays_on():
    from mini.nn.modules.dropout import Dropout
    from mini.nn.modules.normalization import BatchNorm1d
    model = nn.Sequential(nn.Linear(4, 4), nn.Sequential(BatchNorm1d(4), Dropout(0.5)))
    model.eval()
    assert all(not m.training for m in model.modules())
    x = mini.randn(3, 4)
    y = model(x)
    assert y.requires_grad                     # eval() is not no_grad()
    np.testing.assert_array_equal(model(x).detach().numpy(), y.detach().numpy())  # no dropout


def test_inverted_dropout_keeps_the_mean_in_training_and_is_identity_at_eval():
    from mini.nn.modules.dropout import Dropout
    d = Dropout(0.4)
    mini.manual_seed(0)
    x = mini.ones(200_000) * 3.0
    assert abs(float(d(x).numpy().mean()) - 3.0) < 0.03
    d.eval()
    np.testing.assert_array_equal(d(x).numpy(), x.numpy())


def test_frozen_parameters_stay_listed_and_get_no_gradient():
    from mini.nn.discovery import named_parameters
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 2))
    model[0].requires_grad_(False)
    assert len(named_parameters(model)) == 4
    model(mini.randn(2, 3)).sum().backward()
    assert model[0].weight.grad is None and model[2].weight.grad is not None


# --------------------------------------------------------------------------- the headline claim

def test_cnn_on_digits_reaches_97_percent_in_well_under_a_minute(monkeypatch, capsys):
    """The notebook's payoff cell itself (mini's references standing in for the student's
    exercises), as autograding runs it: no live plot, no progress bar."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    monkeypatch.setattr("mini.notebook.INTERACTIVE", False)
    start = time.process_time()
    ns = run_cells("05_training", "setup", "05.parameters", "05.save_checkpoint", "payoff")
    # CPU seconds of this process, not the cell's clock: the work training costs, which a
    # loaded machine does not inflate
    cpu = time.process_time() - start
    plt.close("all")
    printed = capsys.readouterr().out
    assert ns["EPOCHS"] == 4 and "finish exercise" not in printed
    assert ns["accuracy"] >= 0.97, printed
    assert cpu < 60, f"training took {cpu:.1f} CPU seconds ({ns['seconds']:.1f} s on the clock)"
    assert printed.count("test accuracy") == ns["EPOCHS"] + 1   # one line per epoch, one summary
    assert "last checkpoint: ['digits.pt']" in printed


# --------------------------------------------------------------------------- notebook and grader

def test_every_slot_has_a_reference_a_check_and_a_notebook_cell():
    from grader.checks import checks_for_chapter
    from grader.solutions import notebook_regions
    from mini.exercises import slots
    owned = slots()
    checks = checks_for_chapter(5)
    cells = notebook_regions(NOTEBOOK)
    for slot in SLOTS:
        assert slot in owned and slot in checks and slot in cells, slot
    assert sum(c.points for c in checks.values()) == 100


def test_at_least_ten_catalogued_mistakes_covering_the_issue():
    from grader.mistakes import mistakes_for_chapter
    names = {m.name for m in mistakes_for_chapter(5)}
    assert len(names) >= 10
    for must in ("BN uses batch statistics at eval", "biased running variance",
                 "dropout not rescaled", "Adam without bias correction",
                 "AdamW decay folded into the gradient", "LayerNorm over the wrong axis",
                 "cross-entropy overflows on logits of 1000", "scheduler off by one step",
                 "checkpoint missing optimizer state", "checkpoint missing RNG state",
                 "non-atomic save"):
        assert must in names, must


def test_training_memory_model_matches_what_mini_holds(capsys):
    """The notebook's memory demo: weights, gradients and Adam's state are exactly 16 bytes
    per parameter, and the saved activations it measures by walking the graph are within
    5% of the napkin model (a few [32, 10] tensors of the loss are not in the model)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from mini.napkin.training import adam_step_bytes
    ns = run_cells("05_training", "setup", "demo_memory", ns={"MY_ESTIMATE_BYTES": None})
    plt.close("all")
    measured, predicted, n = ns["measured"], ns["predicted"], ns["n_params"]
    assert n == 101_770 and adam_step_bytes(n) == 2_849_560
    assert measured["weights"] + measured["gradients"] + measured["Adam m, v"] == 16 * n
    for part in ("weights", "gradients", "Adam m, v"):
        assert measured[part] == predicted[part], part
    assert abs(measured["activations"] / predicted["activations"] - 1) < 0.05, (measured, predicted)
    assert "set MY_ESTIMATE_BYTES above" in capsys.readouterr().out


def test_batchnorm_forward_gives_partial_credit_by_named_parts():
    """One mistake costs its part only, and the feedback names the part and the mistake."""
    from grader.checks import run_in_process
    from grader.checks.ch05_training import BN_FORWARD_PARTS
    from grader.mistakes import ch05_training as wrong

    cases = {wrong.bn_biased_running_var: "running statistics",
             wrong.bn_running_momentum_swapped: "running statistics",
             wrong.bn_batch_stats_at_eval: "eval mode"}
    for fn, lost in cases.items():
        v = run_in_process("05.batchnorm_forward", fn)
        assert v.points == 12 - BN_FORWARD_PARTS[lost], (fn.__name__, v.points, v.message)
        failed = [p.name for p in v.parts if p.earned < p.max_points]
        assert failed == [lost], (fn.__name__, failed)


def test_adamw_step_gives_partial_credit_by_named_parts():
    from grader.checks import run_in_process
    from grader.checks.ch05_training import ADAMW_PARTS
    from grader.mistakes import ch05_training as wrong

    cases = {wrong.adamw_no_bias_correction: {"bias-corrected step", "decoupled weight decay"},
             wrong.adamw_eps_inside_sqrt: {"bias-corrected step", "decoupled weight decay"},
             wrong.adamw_decay_in_gradient: {"decoupled weight decay"},
             wrong.adamw_scales_grad_in_place: {"moment estimates"}}
    for fn, lost in cases.items():
        v = run_in_process("05.adamw_step", fn)
        failed = {p.name for p in v.parts if p.earned < p.max_points}
        assert failed == lost, (fn.__name__, failed, v.message)
        assert v.points == 12 - sum(ADAMW_PARTS[k] for k in lost), (fn.__name__, v.points)
