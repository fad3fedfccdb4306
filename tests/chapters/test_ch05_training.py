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

def test_cnn_on_digits_reaches_97_percent_in_well_under_a_minute():
    from mini.nn import he_init, losses
    from mini.nn.modules.conv import Conv2d, MaxPool2d
    from mini.nn.modules.dropout import Dropout
    from mini.nn.modules.normalization import BatchNorm2d
    from mini.optim import lr_scheduler
    from mini.optim.adam import AdamW
    from mini.utils.data import DataLoader
    from mini.utils.data.datasets import digits_split
    try:
        from threadpoolctl import threadpool_limits
        limits = threadpool_limits(1)
    except ImportError:  # pragma: no cover
        limits = None
    try:
        mini.manual_seed(0)
        train, test = digits_split(0.2, seed=0)
        model = nn.Sequential(Conv2d(1, 16, 3, padding=1), BatchNorm2d(16), nn.ReLU(),
                              MaxPool2d(2), Conv2d(16, 32, 3, padding=1), BatchNorm2d(32),
                              nn.ReLU(), MaxPool2d(2), nn.Flatten(), Dropout(0.1),
                              nn.Linear(128, 10))
        for p in model.parameters():
            if p.ndim == 4:
                he_init.kaiming_normal_(p)
        loader = DataLoader(train, batch_size=32, shuffle=True)
        epochs = 3
        opt = AdamW(model.parameters(), lr=1e-2, weight_decay=1e-4)
        sched = lr_scheduler.WarmupCosineLR(opt, 20, epochs * len(loader))
        # CPU seconds on one thread (the limits above), not wall time: the work training
        # costs, which a loaded machine does not inflate
        start = time.process_time()
        for _ in range(epochs):
            for x, y in loader:
                loss = losses.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                sched.step()
        seconds = time.process_time() - start
        model.eval()
        with mini.no_grad():
            xs, ys = test.tensors
            acc = float((model(xs).argmax(dim=1).numpy() == ys.numpy()).mean())
    finally:
        if limits is not None:
            limits.restore_original_limits()
    assert acc >= 0.97, f"test accuracy {acc:.2%}"
    assert seconds < 60, f"training took {seconds:.1f} CPU seconds"


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


def test_training_memory_model_matches_what_mini_holds():
    from mini.napkin.training import adam_step_bytes, mlp_saved_per_sample, training_memory
    from mini.nn.losses import cross_entropy
    mlp = _seed_mlp()
    n = sum(p.numel() for p in mlp.parameters())
    model = training_memory(n, optimizer="adamw", batch=32,
                            saved_per_sample=mlp_saved_per_sample([784, 128, 10]))
    assert model["weights"] + model["gradients"] + model["optimizer"] == 16 * n
    assert adam_step_bytes(n) == 2_849_560
    loss = cross_entropy(mlp(mini.randn(32, 784)), mini.randint(0, 10, (32,)))
    own = {id(p._data.storage) for p in mlp.parameters()}
    seen, stack, saved = set(), [loss.grad_fn], {}
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        for t in (node._saved or ()):
            if hasattr(t, "_data") and id(t._data.storage) not in own:
                saved[id(t._data.storage)] = t._data.storage.nbytes
        stack.extend(fn for fn, _ in node.next_functions)
    measured = sum(saved.values())
    assert abs(measured / model["activations"] - 1) < 0.05, (measured, model["activations"])
