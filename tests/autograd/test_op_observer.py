"""The op observer: one hook on the dispatch path of every op, for a graph tracer (chapter 01)
and the profiler.  It sees each op the program calls once (name, replayable op, inputs,
attributes, output), not the ops an op is built from; with it unset, nothing is recorded."""
from __future__ import annotations

import numpy as np
import pytest

import mini
from mini.autograd import function as F
from mini.utils import profiler


class Recorder:
    """A minimal tracer: records every op and its output."""

    def __init__(self):
        self.ops = []

    def __call__(self, name, op, args, kwargs, run):
        out = run()
        self.ops.append((name, op, args, kwargs, out))
        return out

    def __enter__(self):
        self.prev = F.set_op_observer(self)
        return self

    def __exit__(self, *exc):
        F.set_op_observer(self.prev)

    @property
    def names(self):
        return [name for name, *_ in self.ops]


def test_observer_sees_each_op_once_with_its_inputs_and_output():
    x = mini.tensor([1.0, -2.0, 3.0], requires_grad=True)
    with Recorder() as rec:
        y = (x * 2.0).relu().sum(dim=0, keepdim=True)
        mask = x > 0
    assert rec.names == ["Mul", "Relu", "Sum", "gt"]
    name, op, args, kwargs, out = rec.ops[0]
    assert args[0] is x and args[1] == 2.0 and out.grad_fn is not None  # recorded as usual
    assert rec.ops[2][2][1:] == (0, True)                                  # attributes
    assert rec.ops[2][4] is y and rec.ops[3][4] is mask


def test_recorded_ops_replay_to_the_same_values():
    rng = np.random.default_rng(0)
    a = mini.tensor(rng.standard_normal((3, 4)).astype(np.float32))
    b = mini.tensor(rng.standard_normal((4, 2)).astype(np.float32))
    with Recorder() as rec:
        out = ((a @ b).exp() - 1.0).tanh()
    env = {id(a): a, id(b): b}
    for name, op, args, kwargs, result in rec.ops:       # replay, op by op
        new_args = tuple(env.get(id(t), t) if isinstance(t, mini.Tensor) else t for t in args)
        env[id(result)] = op(*new_args, **kwargs)
    np.testing.assert_array_equal(env[id(out)].numpy(), out.numpy())


def test_nested_ops_are_not_observed_and_the_observer_comes_back():
    x = mini.randn(4, 3, requires_grad=True)
    with Recorder() as rec:
        loss = mini.nn.functional.mse_loss(x, mini.zeros(4, 3))
        assert F._op_observer is rec
    assert rec.names == ["zeros", "Sub", "Mul", "Mean"]
    assert F._op_observer is None


def test_inplace_and_random_ops_are_observed():
    w = mini.zeros(3)
    with Recorder() as rec:
        r = mini.rand(3)
        w.add_(r, alpha=0.5)
        w.mul_(2.0)
    assert rec.names == ["rand", "add_", "mul_"]
    np.testing.assert_allclose(w.numpy(), r.numpy(), rtol=1e-6)


def test_an_observer_can_refuse_an_op_with_a_clear_error():
    def forbid_random(name, op, args, kwargs, run):
        if name in ("rand", "randn"):
            raise RuntimeError(f"{name}: random draws cannot be traced")
        return run()
    prev = F.set_op_observer(forbid_random)
    try:
        with pytest.raises(RuntimeError, match="rand: random draws cannot be traced"):
            mini.rand(2)
        mini.ones(2) + 1.0
    finally:
        F.set_op_observer(prev)


def test_the_profiler_counts_through_the_observer_and_keeps_an_outer_one():
    x = mini.randn(8, 4, requires_grad=True)
    with Recorder() as rec:
        with profiler.profile() as prof:
            (x @ x.T).sum().backward()
        assert F._op_observer is rec       # the profiler put the tracer back
    counts = prof.op_counts()
    assert counts["MatMul"] == 1 and counts["MatMulBackward0"] == 1
    assert counts["Permute"] == 1 and counts["Sum"] == 1
    assert rec.names[:3] == ["Permute", "MatMul", "Sum"]  # the tracer saw them too


def test_without_an_observer_ops_call_nothing_extra(monkeypatch):
    calls = []
    monkeypatch.setattr(F, "observe_op", lambda *a, **k: calls.append(a))
    x = mini.randn(3, requires_grad=True)
    ((x * 2.0 > 0).float() * x).sum().backward()
    assert calls == []
