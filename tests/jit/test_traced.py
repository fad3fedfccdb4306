"""mini.jit.trace end to end: replays equal eager, and the classic JIT footguns (tinygrad's
list: frozen Python constants, frozen branches, output-buffer reuse, values read with
.item() baked in, side effects that run only during capture) never give a silent mismatch:
each either traces again, runs eagerly with a warning, or replays what eager would do."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import mini
from mini import jit, nn
from mini.jit import TracerWarning


def t(values, device=None, dtype="float32"):
    return mini.tensor(np.asarray(values, dtype=dtype), device=device)


def same(a, b):
    """Bit-identical tensors: the replay runs the kernels eager ran, so exact equality is
    the right test here (no reordering of any computation)."""
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a.numpy(), b.numpy())


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("error", TracerWarning)    # a test that expects one catches it
        yield


# --------------------------------------------------------------------------- basics

def test_static_graph_example_of_the_seed():
    """x * 2 + 1 recorded once, run on x = [1.0]: [3.0] (the seed's define-then-run)."""
    g = jit.capture_graph(lambda x: x * 2 + 1, t([5.0]))
    assert [n.op for n in g.nodes] == ["Mul", "Add"]
    out = jit.run_graph(g, t([1.0]))
    assert out.tolist() == [3.0]
    assert "%0 = Mul(x0, 2)" in str(g) and "return %1" in str(g)


def test_same_guards_compile_once():
    f = jit.trace(lambda x, y: (x * y + 1.0).tanh())
    x, y = mini.randn(5, 3), mini.randn(5, 3)
    for _ in range(10):
        assert same(f(x, y), (x * y + 1.0).tanh())
    assert (f.stats.traces, f.stats.replays) == (1, 9)
    assert len(f.graphs()) == 1


@pytest.mark.parametrize("device", ["cpu", "numpy"])
def test_replay_is_bit_identical_to_eager_on_a_100_op_graph(device):
    from mini.jit.examples import chain100 as chain
    f = jit.trace(chain)
    for n in (3, 17, 40_000):            # tiny (numpy ufunc), small, large (pooled buffers)
        x, y = mini.randn(n, device=device), mini.randn(n, device=device)
        f(x, y)
        assert len(f.graphs()[-1].nodes) == 100
        for _ in range(2):
            x, y = mini.randn(n, device=device), mini.randn(n, device=device)
            assert same(f(x, y), chain(x, y))


def test_shape_dtype_and_stride_changes_trace_again():
    f = jit.trace(lambda x: (x * 3.0).exp().sum(dim=0))
    a = mini.randn(4, 3)
    for x in (a, mini.randn(5, 3), a.double(), a.T.contiguous(), a.T, a[::2]):
        assert np.allclose(f(x).numpy(), (x * 3.0).exp().sum(dim=0).numpy(), rtol=1e-6)
    # 4x3, 5x3, float64, 3x4 contiguous, 3x4 transposed (strides differ), 2x3 strided
    assert f.stats.traces == 6
    f(mini.randn(4, 3).T)
    assert f.stats.traces == 6 and f.stats.replays == 1


def test_python_scalar_arguments_are_guards():
    f = jit.trace(lambda x, s: x * s)
    x = mini.randn(3)
    assert same(f(x, 2.0), x * 2.0) and same(f(x, 3.0), x * 3.0)
    assert same(f(x, 2), x * 2)           # an int is another key than the float 2.0
    assert f.stats.traces == 3
    assert same(f(x, 2.0), x * 2.0) and f.stats.replays == 1


# --------------------------------------------------------------------------- the footguns

SCALE = 2.0


def scaled(x):
    return x * SCALE


def test_frozen_global_constant_is_guarded():
    global SCALE
    f = jit.trace(scaled)
    x = mini.randn(4)
    try:
        assert same(f(x), x * 2.0)
        SCALE = 5.0
        assert same(f(x), x * 5.0), "a changed global must not replay the graph of the old one"
    finally:
        SCALE = 2.0
    assert f.stats.traces == 2


def test_frozen_closure_constant_is_guarded():
    def make(k):
        def f(x):
            return x + k
        return f
    fn = make(1.0)
    traced = jit.trace(fn)
    x = mini.randn(3)
    traced(x)
    fn.__closure__[0].cell_contents = 7.0          # the closure's variable changes
    assert same(traced(x), x + 7.0)
    assert traced.stats.traces == 2


def test_module_attributes_and_training_flag_are_guarded():
    class Scale(nn.Module):
        def __init__(self):
            super().__init__()
            self.factor = 3.0

        def forward(self, x):
            return x * self.factor if self.training else x

    m = Scale()
    f = jit.trace(m)
    x = mini.randn(4)
    assert same(f(x), x * 3.0)
    m.factor = 4.0
    assert same(f(x), x * 4.0)
    m.eval()
    assert same(f(x), x)
    assert f.stats.traces == 3


def test_frozen_branch_on_a_tensor_value_is_guarded():
    """The seed's trace hazard: `if x.sum() > 0` keeps applying x * 2 to negative inputs
    in a plain trace. Here the branch's value is a guard."""
    def cond(x):
        if x.sum() > 0:
            return x * 2
        return x * 3
    f = jit.trace(cond)
    pos, neg = t([1.0]), t([-1.0])
    assert f(pos).tolist() == [2.0]
    assert f(neg).tolist() == [-3.0], "the branch of the first trace must not be replayed"
    assert f(t([4.0])).tolist() == [8.0] and f(t([-2.0])).tolist() == [-6.0]
    assert f.stats.traces == 2 and f.stats.replays == 2 and f.stats.guard_failures >= 1


def test_values_read_with_item_are_guards_and_a_value_that_always_changes_gives_up():
    def normalise(x):
        return x / x.abs().max().item()
    f = jit.trace(normalise, cache_size_limit=3)
    for k in range(1, 4):
        x = t([1.0, -k])
        assert same(f(x), normalise(x))
    x = t([1.0, -3.0])
    assert same(f(x), normalise(x)) and f.stats.replays == 1
    with pytest.warns(TracerWarning, match="cache_size_limit=3"):
        out = f(t([1.0, -9.0]))
    assert out.tolist() == pytest.approx([1 / 9, -1.0])
    assert f.stats.eager_calls == 1
    f(t([1.0, -11.0]))
    assert f.stats.eager_calls == 2 and f.stats.traces == 3


def test_outputs_are_new_buffers_on_every_call():
    """tinygrad's JIT returned the same output buffer every call; a replay here must not."""
    f = jit.trace(lambda x: x * 2.0 + 1.0)
    x = mini.randn(6)
    f(x)
    a = f(x)
    keep = a.numpy().copy()
    b = f(mini.randn(6))
    assert not np.shares_memory(a.numpy(), b.numpy())
    assert np.array_equal(a.numpy(), keep), "a later call overwrote an earlier call's output"
    a.add_(100.0)                          # the caller owns its output
    assert same(f(x), x * 2.0 + 1.0)


def test_a_tensor_kept_in_an_attribute_runs_eagerly_with_a_warning():
    class Holder:
        pass
    holder = Holder()
    holder.last = None

    def f(x):
        h = x * 2.0
        holder.last = h                  # an attribute it reads changes, and h escapes
        return h + 1.0

    traced = jit.trace(f)
    with pytest.warns(TracerWarning, match="changes Python state it reads|somewhere other than"):
        traced(mini.ones(2))
        traced(mini.ones(2) * 3)
    assert holder.last.tolist() == [6.0, 6.0] and traced.stats.replays == 0


def test_a_small_container_or_config_object_is_guarded():
    config = {"scale": 2.0}

    class Settings:
        pass
    settings = Settings()
    settings.shift = 1.0

    def f(x):
        return x * config["scale"] + settings.shift

    traced = jit.trace(f)
    x = mini.ones(2)
    assert traced(x).tolist() == [3.0, 3.0]
    config["scale"] = 5.0
    assert traced(x).tolist() == [6.0, 6.0]
    settings.shift = -1.0
    assert traced(x).tolist() == [4.0, 4.0]
    assert traced.stats.traces == 3


def test_python_side_effect_on_a_global_runs_eagerly_with_a_warning():
    calls = {"n": 0}
    counter = [0]

    def f(x):
        counter[0] += 1        # a Python side effect through a mutable object: not seen
        return x + 1.0

    global STEP
    STEP = 0

    def g(x):
        global STEP
        STEP += 1
        return x * STEP

    traced = jit.trace(g)
    x = mini.ones(2)
    with pytest.warns(TracerWarning, match="changes Python state"):
        assert traced(x).tolist() == [1.0, 1.0]
    assert traced(x).tolist() == [2.0, 2.0] and traced(x).tolist() == [3.0, 3.0]
    assert STEP == 3 and traced.stats.replays == 0
    del calls, f


def test_a_tensor_that_escapes_through_a_list_runs_eagerly_with_a_warning():
    log = []

    def f(x):
        h = x * 2.0
        log.append(h)
        return h + 1.0

    traced = jit.trace(f)
    # the list changed (Python state the function reads) and the tensor in it escaped:
    # either is reason enough to run eagerly
    with pytest.warns(TracerWarning, match="changes Python state it reads|somewhere other than"):
        traced(mini.ones(2))
        traced(mini.ones(2) * 3)
    assert [v.tolist() for v in log] == [[2.0, 2.0], [6.0, 6.0]]
    assert traced.stats.replays == 0


def test_in_place_updates_of_captured_state_are_replayed():
    running = mini.zeros(3)

    def f(x):
        running.mul_(0.9).add_(x * 0.1)
        return x - running

    traced = jit.trace(f)
    eager_state = mini.zeros(3)

    def eager(x):
        eager_state.mul_(0.9).add_(x * 0.1)
        return x - eager_state

    for k in range(5):
        x = mini.randn(3)
        v0 = running._version
        assert same(traced(x), eager(x))
        assert running._version > v0, "a replayed in-place write bumps the version counter"
        assert np.array_equal(running.numpy(), eager_state.numpy())
    assert traced.stats.traces == 1 and traced.stats.replays == 4


def test_random_draws_are_drawn_again_on_every_replay():
    def noisy(x):
        return x + mini.rand(*x.shape)
    traced = jit.trace(noisy)
    x = mini.zeros(4)
    mini.manual_seed(3)
    got = [traced(x).numpy().copy() for _ in range(3)]
    mini.manual_seed(3)
    want = [noisy(x).numpy().copy() for _ in range(3)]
    assert all(np.array_equal(g, w) for g, w in zip(got, want))
    assert not np.array_equal(got[1], got[2])
    assert traced.stats.replays == 2


def test_a_guard_failure_after_an_in_place_write_puts_the_state_back():
    state = mini.zeros(1)

    def f(x):
        state.add_(x)
        if state.sum() > 0:
            return x * 2
        return x * 3

    traced = jit.trace(f)
    mirror = mini.zeros(1)

    def eager(x):
        mirror.add_(x)
        return x * 2 if mirror.sum() > 0 else x * 3

    for v in (1.0, 1.0, -5.0, -1.0, 10.0):
        x = t([v])
        assert same(traced(x), eager(x))
        assert np.array_equal(state.numpy(), mirror.numpy()), "an aborted replay left a write"


def test_random_state_is_put_back_when_a_guard_fails():
    def f(x):
        r = mini.rand(2)
        if x.sum() > 0:
            return r
        return -r
    traced = jit.trace(f)
    mini.manual_seed(0)
    got = [traced(t([v])).numpy().copy() for v in (1.0, -1.0, 1.0, -1.0)]
    mini.manual_seed(0)
    want = [f(t([v])).numpy().copy() for v in (1.0, -1.0, 1.0, -1.0)]
    assert all(np.array_equal(g, w) for g, w in zip(got, want))


# --------------------------------------------------------------------------- when not to replay

def test_autograd_runs_eagerly():
    w = mini.randn(3, requires_grad=True)
    f = jit.trace(lambda x: (x * w).sum())
    x = mini.randn(3)
    with pytest.warns(TracerWarning, match="require grad"):
        loss = f(x)
    loss.backward()
    assert np.allclose(w.grad.numpy(), x.numpy())
    loss = f(x)
    assert loss.requires_grad and f.stats.replays == 0
    with mini.no_grad():
        assert same(f(x), (x * w).sum()) and f(x) is not None
    assert f.stats.replays == 1


def test_inputs_that_require_grad_run_eagerly():
    f = jit.trace(lambda x: x * 2)
    x = mini.randn(3, requires_grad=True)
    y = f(x)
    assert y.requires_grad and f.stats.reasons == {"autograd": 1}


def test_under_the_profiler_a_traced_function_runs_eagerly_so_it_sees_every_op():
    from mini.utils import profiler
    f = jit.trace(lambda x: (x + 1.0).relu())
    f(mini.randn(3))
    with profiler.profile() as prof:
        f(mini.randn(3))
    assert prof.op_counts() == {"randn": 1, "Add": 1, "Relu": 1}
    assert f.stats.reasons == {"observer": 1}


def test_a_traced_function_inside_another_is_part_of_the_outer_graph():
    inner = jit.trace(lambda x: x * 2.0)
    outer = jit.trace(lambda x: inner(x) + 1.0)
    x = mini.randn(3)
    outer(x)
    assert [n.op for n in outer.graphs()[0].nodes] == ["Mul", "Add"]
    assert same(outer(x), x * 2.0 + 1.0)


def test_unguardable_arguments_are_refused_with_their_name():
    f = jit.trace(lambda x, a: x)
    with pytest.raises(TypeError, match=r"args\[1\] is a ndarray"):
        f(mini.ones(2), np.ones(2))


# --------------------------------------------------------------------------- models

def test_an_mlp_replays_to_eagers_values_and_retraces_for_a_new_batch_size():
    mini.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    f = jit.trace(model)
    with mini.no_grad():
        for batch in (5, 5, 7, 5):
            x = mini.randn(batch, 8)
            assert same(f(x), model(x))
    assert f.stats.traces == 2 and f.stats.replays == 2


def test_captured_weights_are_read_at_replay_time():
    mini.manual_seed(1)
    lin = nn.Linear(3, 2)
    f = jit.trace(lin)
    x = mini.randn(4, 3)
    with mini.no_grad():
        f(x)
        lin.weight.mul_(2.0)              # an optimizer step writes the weight in place
        assert same(f(x), lin(x))
        lin.weight.data = mini.randn(5, 3)   # a new tensor of another shape: trace again
        lin.bias.data = mini.randn(5)
        assert same(f(x), lin(x))
    assert f.stats.traces == 2
