"""A PyTorch user's script runs on mini by changing the import.

``scripts/digits_pytorch.py`` is written against ``torch``, ``torch.nn`` and
``torch.nn.functional`` only.  It is run from its one source text twice: as it is (on
PyTorch) and with its three import lines replaced by ``import mini as torch`` and friends
(on mini).  On mini alone it must train (the loss falls, the digits are recognised); next
to PyTorch, in float64 and with the same initial weights copied across, every step's loss,
the trained weights and the evaluation must agree within 1e-7 relative: the same
computation in another order differs by ~1e-13 after these few steps, and any difference
in semantics (a default, a reduction, an update rule) by far more."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import mini
from mini.utils.data.datasets import load_digits

SCRIPT = Path(__file__).parent / "scripts" / "digits_pytorch.py"
TORCH_IMPORTS = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
MINI_IMPORTS = "import mini as torch\nimport mini.nn as nn\nimport mini.nn.functional as F\n"


def _script(framework: str) -> dict:
    """The script's namespace, run on ``framework`` ("torch" or "mini")."""
    source = SCRIPT.read_text()
    assert source.count(TORCH_IMPORTS) == 1, "the script must import torch in exactly one place"
    imported = [a.name for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Import)
                for a in node.names] + [node.module for node in ast.walk(ast.parse(source))
                                        if isinstance(node, ast.ImportFrom)]
    assert all(m.split(".")[0] == "torch" for m in imported), f"plain PyTorch only: {imported}"
    if framework == "mini":
        source = source.replace(TORCH_IMPORTS, MINI_IMPORTS)
    namespace = {"__name__": f"digits_pytorch_on_{framework}"}
    exec(compile(source, str(SCRIPT), "exec"), namespace)
    return namespace


def _digits(n_train=512, n_test=256, dtype=np.float32):
    x, y = load_digits(as_image=True)
    order = np.random.default_rng(0).permutation(len(y))
    x, y = x[order].astype(dtype), y[order]
    return (x[:n_train], y[:n_train]), (x[n_train:n_train + n_test], y[n_train:n_train + n_test])


@pytest.mark.parametrize("model,optimizer,lr", [("DigitsCNN", "sgd", 0.2),
                                                ("DigitsMLP", "adamw", 0.02)])
def test_the_script_trains_on_mini(model, optimizer, lr):
    (xtr, ytr), (xte, yte) = _digits()
    s = _script("mini")
    mini.manual_seed(0)
    net = s[model](dropout=0.1)
    chance_loss, _ = s["evaluate"](net, xte, yte)
    losses = s["train"](net, xtr, ytr, epochs=4, lr=lr, optimizer=optimizer)
    assert len(losses) == 4 * 8
    # (measured: the mean of the last 4 losses is 0.26x / 0.11x that of the first 4, the test
    # loss 0.19x / 0.15x the untrained one, accuracy 0.91 / 0.90)
    assert np.mean(losses[-4:]) < 0.5 * np.mean(losses[:4]), losses
    loss, accuracy = s["evaluate"](net, xte, yte)
    assert loss < 0.5 * chance_loss and accuracy > 0.8, (loss, accuracy)
    assert not net.training


@pytest.mark.torch
@pytest.mark.parametrize("model,optimizer,lr", [("DigitsCNN", "sgd", 0.2),
                                                ("DigitsMLP", "adamw", 0.02)])
def test_the_script_matches_pytorch_step_by_step(model, optimizer, lr):
    torch = pytest.importorskip("torch")
    (xtr, ytr), (xte, yte) = _digits(n_train=256, n_test=128, dtype=np.float64)
    on_torch, on_mini = _script("torch"), _script("mini")
    saved_dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    mini.set_default_dtype(mini.float64)     # (the test fixture restores mini's default)
    try:
        torch.manual_seed(0)
        t_net = on_torch[model](dropout=0.0)  # dropout masks come from different generators
        m_net = on_mini[model](dropout=0.0)
        state = {k: mini.tensor(v.detach().numpy()) for k, v in t_net.state_dict().items()}
        m_net.load_state_dict(state)
        t_losses = on_torch["train"](t_net, xtr, ytr, epochs=2, lr=lr, optimizer=optimizer)
        m_losses = on_mini["train"](m_net, xtr, ytr, epochs=2, lr=lr, optimizer=optimizer)
        t_eval = on_torch["evaluate"](t_net, xte, yte)
        m_eval = on_mini["evaluate"](m_net, xte, yte)
    finally:
        torch.set_default_dtype(saved_dtype)
    np.testing.assert_allclose(m_losses, t_losses, rtol=1e-7)
    assert m_losses[-1] < m_losses[0]
    t_state = t_net.state_dict()
    for name, value in m_net.state_dict().items():
        np.testing.assert_allclose(value.numpy(), t_state[name].numpy(), rtol=1e-7, atol=1e-9,
                                   err_msg=name)
    assert m_eval[0] == pytest.approx(t_eval[0], rel=1e-7)
    assert m_eval[1] == t_eval[1]
