"""mini.save/mini.load and the complete, atomically published training state."""
from __future__ import annotations

import glob
import io
import os
import pickle
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import mini
from mini import nn, serialization
from mini.nn.losses import cross_entropy
from mini.nn.modules.dropout import Dropout
from mini.nn.modules.normalization import BatchNorm1d
from mini.optim.adam import AdamW
from mini.optim.lr_scheduler import WarmupCosineLR
from mini.utils.data import DataLoader, TensorDataset
from mini.utils.train_state import load_checkpoint, save_checkpoint


# --------------------------------------------------------------------------- save / load

def test_save_load_roundtrip_keeps_types_values_and_sharing(tmp_path):
    lin = nn.Linear(3, 2)
    obj = {"sd": lin.state_dict(), "p": lin.weight, "again": lin.weight, "n": 3, "s": "x",
           "t": mini.arange(4), "rng": mini.get_rng_state(), "nested": [(1.5, None)]}
    path = tmp_path / "a.pt"
    serialization.save(obj, path)
    back = serialization.load(path)
    assert back["p"] is back["again"] and isinstance(back["p"], nn.Parameter)
    np.testing.assert_array_equal(back["sd"]["weight"].numpy(), lin.weight.detach().numpy())
    assert back["t"].dtype == mini.int64 and back["n"] == 3 and back["nested"] == [(1.5, None)]
    fresh = nn.Linear(3, 2)
    fresh.load_state_dict(back["sd"])
    np.testing.assert_array_equal(fresh.bias.detach().numpy(), lin.bias.detach().numpy())


def test_load_refuses_what_is_not_a_mini_checkpoint(tmp_path):
    p = tmp_path / "plain.pkl"
    p.write_bytes(pickle.dumps({"a": 1}))
    with pytest.raises(serialization.NotACheckpointError, match="not a mini checkpoint.*plain pickle"):
        serialization.load(p)
    (tmp_path / "empty").write_bytes(b"")
    with pytest.raises(ValueError, match="empty"):
        serialization.load(tmp_path / "empty")
    (tmp_path / "zip").write_bytes(b"PK\x03\x04" + b"\0" * 20)
    with pytest.raises(ValueError, match="PyTorch"):
        serialization.load(tmp_path / "zip")
    good = io.BytesIO()
    serialization.save({"w": mini.randn(100)}, good)
    (tmp_path / "cut").write_bytes(good.getvalue()[:-50])
    with pytest.raises(ValueError, match="truncated"):
        serialization.load(tmp_path / "cut")


class _Evil:
    def __reduce__(self):
        return (os.getcwd, ())


def test_weights_only_load_runs_no_code_from_the_file():
    buf = io.BytesIO()
    serialization.save({"x": _Evil()}, buf)
    buf.seek(0)
    with pytest.raises(pickle.UnpicklingError, match="refuses to rebuild posix.getcwd"):
        serialization.load(buf)
    buf.seek(0)
    assert serialization.load(buf, weights_only=False)["x"] == os.getcwd()


# --------------------------------------------------------------------------- training state

def _data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 1).astype(np.int64)
    return TensorDataset(mini.tensor(x), mini.tensor(y))


def _make(seed):
    mini.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 16), BatchNorm1d(16), nn.ReLU(), Dropout(0.3),
                          nn.Linear(16, 3))
    opt = AdamW(model.parameters(), lr=0.02, weight_decay=0.1)
    sched = WarmupCosineLR(opt, 3, 20, min_lr=1e-4)
    loader = DataLoader(_data(), batch_size=8, shuffle=True)
    return model, opt, sched, loader


def _forever(loader):
    while True:
        yield from loader


def _train(model, opt, sched, loader, start, stop):
    losses, batches = [], _forever(loader)
    for _ in range(start, stop):
        x, y = next(batches)
        loss = cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    return losses


def _params(model):
    return [p.detach().numpy().copy() for p in model.parameters()] + \
           [b.numpy().copy() for b in model.buffers()]


def _save_without_optimizer(path, model, optimizer, scheduler=None, loader=None, step=0):
    serialization.save({"step": step, "model": model.state_dict(), "optimizer": None,
                        "scheduler": scheduler.state_dict(), "loader": loader.state_dict(),
                        "rng": mini.get_rng_state()}, path)


def _load_without_optimizer(path, model, optimizer, scheduler=None, loader=None):
    s = serialization.load(path)
    model.load_state_dict(s["model"])
    scheduler.load_state_dict(s["scheduler"])
    loader.load_state_dict(s["loader"])
    mini.set_rng_state(s["rng"])
    return s["step"]


def test_resume_is_bit_identical_to_the_run_that_never_stopped(tmp_path):
    ref = _make(0)
    ref_losses = _train(*ref, 0, 13)             # crosses two epoch boundaries (5 batches each)

    first = _make(0)
    part1 = _train(*first, 0, 7)
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, *first, step=7)
    assert sorted(serialization.load(path)) == sorted(["step", "model", "optimizer", "scheduler",
                                                      "loader", "rng"])
    mini.manual_seed(12345)                      # the restarted process has other random state
    again = _make(777)                           # and other initial weights and data seed
    step = load_checkpoint(path, *again)
    assert step == 7
    part2 = _train(*again, step, 13)
    assert part1 + part2 == ref_losses
    for a, b in zip(_params(ref[0]), _params(again[0])):
        np.testing.assert_array_equal(a, b)

    # leaving out the optimizer state (Adam's moments) makes the resumed run diverge
    third = _make(0)
    _train(*third, 0, 7)
    _save_without_optimizer(tmp_path / "partial.pt", *third, step=7)
    broken = _make(777)
    _load_without_optimizer(tmp_path / "partial.pt", *broken)
    assert _train(*broken, 7, 13) != ref_losses[7:]


class _Unpicklable:
    def __reduce__(self):
        raise RuntimeError("disk full (simulated)")


def test_failed_save_leaves_previous_checkpoint_and_no_temp_file(tmp_path):
    model, opt, sched, loader = _make(0)
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, model, opt, sched, loader, step=1)
    before = path.read_bytes()

    class BadLoader:
        def state_dict(self):
            return {"oops": _Unpicklable()}

    with pytest.raises(RuntimeError, match="disk full"):
        save_checkpoint(path, model, opt, sched, BadLoader(), step=2)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["ckpt.pt"]


_WRITER = textwrap.dedent("""
    import io, os, sys, time
    import mini
    from mini import nn, serialization
    from mini.optim.adam import AdamW
    from mini.utils.train_state import save_checkpoint
    model = nn.Linear(300, 300)
    opt = AdamW(model.parameters())
    model(mini.randn(2, 300)).sum().backward()
    opt.step()
    for step in (1, 2, 3):                  # three complete, published checkpoints
        save_checkpoint(sys.argv[1], model, opt, step=step)
    real_save = serialization.save

    def save_half_then_wait(obj, f):        # the fourth save stops halfway through its file
        buf = io.BytesIO()
        real_save(obj, buf)
        data = buf.getvalue()
        f.write(data[:len(data) // 2])
        f.flush()
        os.fsync(f.fileno())
        print("mid-save", flush=True)       # the test kills this process now
        time.sleep(600)
    serialization.save = save_half_then_wait
    save_checkpoint(sys.argv[1], model, opt, step=4)
""")


def test_process_killed_mid_save_leaves_previous_checkpoint_loadable(tmp_path):
    # The writer tells when it is halfway through writing its fourth checkpoint (an event,
    # not a guess at timing): SIGKILL then must leave the third one intact at `path`.
    path = tmp_path / "ckpt.pt"
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()           # blocks until the writer is mid-save
        partial = glob.glob(str(tmp_path / ".ckpt.pt.*.tmp"))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert line.strip() == "mid-save", proc.stderr.read()
    assert len(partial) == 1 and os.path.getsize(partial[0]) > 0   # caught mid-write
    state = serialization.load(path)            # the last complete checkpoint, never torn
    assert state["step"] == 3
    assert tuple(state["model"]["weight"].shape) == (300, 300)
    with pytest.raises(serialization.NotACheckpointError):
        serialization.load(partial[0])          # what was cut off is not mistaken for one
