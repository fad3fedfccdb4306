"""Scenarios of chapter 05 (training): parameter discovery on small models, and checkpoints
of a complete little training job.

The job has every kind of state -- parameters and a buffer, optimizer moments, a schedule,
random masks drawn from mini's generator, a shuffled loader -- built only from parts of mini
that are not chapter-05 exercises (SGD with momentum, StepLR, a running-mean layer and a
noise layer written here, the parameters found by a walk of its own), so a checkpoint
exercise is checked on its own, whatever the student's other chapter-05 answers do.
"""
from __future__ import annotations

import os
import tempfile

import numpy as np


def _mini():
    import mini
    return mini


# --------------------------------------------------------------------------- 05.parameters

def _models():
    mini = _mini()
    from mini import nn
    from mini.nn.modules.normalization import BatchNorm1d

    class Block(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.fc = nn.Linear(d, d, bias=False)
            self.norm = BatchNorm1d(d)
            self.gain = nn.Parameter(mini.ones(1))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = nn.Parameter(mini.ones(2))
            self.blocks = nn.Sequential(Block(3), nn.ReLU(), Block(3))
            self.head = nn.Linear(3, 2)
            self.same_head = self.head             # one module reached twice
            self.tied = nn.Linear(3, 2)
            self.tied.weight = self.head.weight    # one parameter shared by two layers
            self.empty = nn.Sequential()

    return [nn.Linear(4, 3), Net(), nn.Sequential(nn.Sequential(nn.Linear(2, 2)), nn.Linear(2, 1))]


def _registry(model) -> dict[int, int]:
    """Every parameter object reachable from ``model`` -> a number (first-seen order)."""
    out: dict[int, int] = {}
    stack, seen = [model], set()
    while stack:
        mod = stack.pop(0)
        if id(mod) in seen:
            continue
        seen.add(id(mod))
        for p in mod._parameters.values():
            if p is not None and id(p) not in out:
                out[id(p)] = len(out)
        stack.extend(c for c in mod._modules.values() if c is not None)
    return out


def named_parameters(impl, *, prefixes: list) -> list:
    """``impl(model, prefix)`` on three models: per call, the result's kind, its pairs as
    ``[name, parameter number]`` (the number says WHICH of the model's parameter objects;
    -1 for any other object), and anything that is not such a pair as itself."""
    out = []
    for m, model in enumerate(_models()):
        reg = _registry(model)
        for prefix in prefixes:
            got = impl(model, prefix)
            if type(got) not in (list, tuple):
                out.append({"model": m, "prefix": prefix, "kind": "other", "value": got})
                continue
            items = []
            for item in got:
                if type(item) is tuple and len(item) == 2 and type(item[0]) is str:
                    items.append(["pair", item[0], reg.get(id(item[1]), -1)])
                else:
                    items.append(["item", item])
            out.append({"model": m, "prefix": prefix, "kind": type(got).__name__,
                        "items": items, "type": type(model).__name__})
    return out


# --------------------------------------------------------------------------- checkpoints

def _parameters(model) -> list:
    """The model's parameters, each once, by a walk of its own (``model.parameters()`` runs
    the 05.parameters exercise, which this scenario must not depend on)."""
    out, seen, stack, mods = [], set(), [model], set()
    while stack:
        mod = stack.pop(0)
        if id(mod) in mods:
            continue
        mods.add(id(mod))
        for p in mod._parameters.values():
            if p is not None and id(p) not in seen:
                seen.add(id(p))
                out.append(p)
        stack.extend(c for c in mod._modules.values() if c is not None)
    return out


def _job(seed: int):
    mini = _mini()
    from mini import nn
    from mini.optim.lr_scheduler import StepLR
    from mini.optim.sgd import SGD
    from mini.utils.data import DataLoader, TensorDataset

    class RunningMean(nn.Module):
        """Subtracts a running mean kept in a buffer (state a checkpoint must keep)."""

        def __init__(self, d):
            super().__init__()
            self.register_buffer("running_mean", mini.zeros(d))

        def forward(self, x):
            if self.training:
                with mini.no_grad():
                    self.running_mean.mul_(0.9).add_(x.mean(dim=0) * 0.1)
            return x - self.running_mean

    class Noise(nn.Module):
        """Random masks from mini's generator (a resumed run must draw the same ones)."""

        def forward(self, x):
            if not self.training:
                return x
            keep = (mini.rand(*x.shape) >= 0.25).to(dtype=x.dtype)
            return x * keep * (1.0 / 0.75)

    data = np.random.default_rng(5)
    x = data.normal(size=(36, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0.5).astype(np.int64)
    targets = np.eye(3, dtype=np.float32)[y]
    mini.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 12), RunningMean(12), nn.ReLU(), Noise(), nn.Linear(12, 3))
    opt = SGD(_parameters(model), lr=0.05, momentum=0.9, weight_decay=0.01)
    sched = StepLR(opt, step_size=4, gamma=0.5)
    loader = DataLoader(TensorDataset(mini.tensor(x), mini.tensor(targets)), batch_size=8,
                        shuffle=True)
    return model, opt, sched, loader


def _forever(loader):
    while True:
        yield from loader


def _run(job, start: int, stop: int) -> list[float]:
    model, opt, sched, loader = job
    it = _forever(loader)
    out = []
    for _ in range(start, stop):
        x, t = next(it)
        diff = model(x) - t
        loss = (diff * diff).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        out.append(float(loss.item()))
    return out


def _weights(model) -> list:
    return [p._data.numpy().copy() for p in _parameters(model)] + \
        [b._data.numpy().copy() for b in model.buffers()]


def _ref_save(path, job, step):
    mini = _mini()
    from mini import serialization
    model, opt, sched, loader = job
    state = {"step": int(step), "model": model.state_dict(), "optimizer": opt.state_dict(),
             "scheduler": sched.state_dict(), "loader": loader.state_dict(),
             "rng": mini.get_rng_state()}
    serialization.save(state, path)


def _ref_load(path, job):
    mini = _mini()
    from mini import serialization
    model, opt, sched, loader = job
    s = serialization.load(path)
    model.load_state_dict(s["model"])
    opt.load_state_dict(s["optimizer"])
    sched.load_state_dict(s["scheduler"])
    loader.load_state_dict(s["loader"])
    mini.set_rng_state(s["rng"])
    return s["step"]


def checkpoint_reference(impl, *, stop: int, end: int) -> dict:
    """The uninterrupted run (losses) and mini's random state at step ``stop`` (no student
    code involved)."""
    mini = _mini()
    losses = _run(_job(0), 0, end)
    _run(_job(0), 0, stop)
    return {"losses": losses, "rng_at_stop": mini.get_rng_state()}


class _Unpicklable:
    def __reduce__(self):
        raise OSError("No space left on device (simulated)")


class _BrokenLoader:
    def state_dict(self):
        return {"seed": 1, "epoch": 0, "position": 0, "broken": _Unpicklable()}


def checkpoint_save(impl, *, stop: int, end: int) -> dict:
    """``impl`` (save_checkpoint) after ``stop`` steps; the file read back, a resumed run,
    the files left behind; then a save that fails half-way and one that succeeds, with the
    calls to os.replace/rename/fsync it made."""
    mini = _mini()
    from mini import serialization
    obs: dict = {}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "ckpt.pt")
        job = _job(0)
        _run(job, 0, stop)
        obs["result"] = impl(path, *job, step=stop)
        obs["exists"] = os.path.exists(path)
        if not obs["exists"]:
            return obs
        try:
            state = serialization.load(path)
        except Exception as e:  # noqa: BLE001
            obs["load_error"] = e
            return obs
        obs["kind"] = type(state).__name__
        if type(state) is not dict:
            return obs
        obs["keys"] = sorted(str(k) for k in state)
        obs["step"] = state.get("step")
        obs["rng"] = state.get("rng")
        again = _job(777)
        mini.manual_seed(4242)
        try:
            step = _ref_load(path, again)
            obs["rest"] = _run(again, step, end)
        except Exception as e:  # noqa: BLE001
            obs["restore_error"] = e
            return obs
        obs["leftovers"] = sorted(set(os.listdir(d)) - {"ckpt.pt"})
        with open(path, "rb") as f:
            before = f.read()
        calls: list[str] = []
        real = {name: getattr(os, name) for name in ("replace", "rename", "fsync")}

        def spy(name):
            def wrapper(*a, **k):
                calls.append(name)
                if name in ("replace", "rename") and a:   # where the temporary file lived
                    same = os.path.dirname(os.path.abspath(a[0])) == os.path.dirname(
                        os.path.abspath(path))
                    calls.append(f"{name}:{'same-dir' if same else 'other-dir'}")
                if name == "fsync" and a:                  # a file's data or a directory entry
                    try:
                        import stat
                        kind = "dir" if stat.S_ISDIR(os.fstat(a[0]).st_mode) else "file"
                    except (OSError, TypeError):
                        kind = "unknown"
                    calls.append(f"fsync:{kind}")
                return real[name](*a, **k)
            return wrapper

        for name in real:
            setattr(os, name, spy(name))
        try:
            try:
                impl(path, *job[:3], _BrokenLoader(), step=stop + 1)
            except (NotImplementedError, KeyboardInterrupt, SystemExit):
                raise
            except BaseException:  # noqa: BLE001 - the failure we provoked
                pass
            after = open(path, "rb").read() if os.path.exists(path) else b""
            obs["intact_after_failure"] = after == before
            obs["leftovers_after_failure"] = sorted(set(os.listdir(d)) - {"ckpt.pt"})
            calls.clear()
            impl(path, *job, step=stop)
            obs["calls"] = list(calls)
        finally:
            for name, f in real.items():
                setattr(os, name, f)
    return obs


def checkpoint_load(impl, *, stop: int, end: int) -> dict:
    """A checkpoint written by mini's own code after ``stop`` steps, restored by ``impl``
    (load_checkpoint) into a fresh job: what it returned, what it restored, and the run
    resumed from there."""
    mini = _mini()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "ckpt.pt")
        job = _job(0)
        _run(job, 0, stop)
        _ref_save(path, job, stop)
        again = _job(777)
        mini.manual_seed(4242)
        step = impl(path, *again)
        return {"step": step, "weights": _weights(again[0]),
                "optimizer_state": bool(again[1].state), "rng": mini.get_rng_state(),
                "scheduler_epoch": again[2].last_epoch, "loader": again[3].state_dict(),
                "rest": _run(again, int(step), end) if isinstance(step, (int, np.integer)) else None}


SCENARIOS = {"named_parameters": named_parameters, "checkpoint_reference": checkpoint_reference,
             "checkpoint_save": checkpoint_save, "checkpoint_load": checkpoint_load}
