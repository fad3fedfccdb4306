"""The cuda device behind NDArray: every primitive agrees with numpy, autograd and
training run on it, transfers are counted exactly, and (built with the emulator's
checks) its own kernels have no races, out-of-bounds or uninitialised accesses."""
from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
from hypothesis import given, strategies as st

import mini
from mini.backends.cuda import backend as cuda_backend, build
from mini.ndarray import NDArray
from cuda_helpers import requires_posix

pytestmark = requires_posix


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def on(cuda, a):
    return mini.tensor(a, device=cuda)


def _close(got, want, n=1):
    # float32, reductions of n terms in a different order than numpy's
    np.testing.assert_allclose(got, want, rtol=2e-6 * max(n, 1) ** 0.5 + 1e-6, atol=1e-6 * max(n, 1))


def test_is_available_follows_pytorch_and_emulation_is_explicit(cuda):
    assert mini.cuda.is_available() == build.gpu_available()
    assert mini.cuda.is_emulated() == (not build.gpu_available() or os.environ.get(build.EMULATE_ENV) == "1")
    if not mini.cuda.is_available():
        assert mini.cuda.device_count() == 0
    assert cuda.name == "cuda" and str(cuda) == "cuda"


def test_the_emulated_device_says_so_once(cuda):
    if not build.use_emulator():
        pytest.skip("a GPU runs the device here")
    cuda_backend._WARNED[0] = False
    with pytest.warns(cuda_backend.EmulatedDeviceWarning, match="emulator"):
        cuda_backend.CudaBackend()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cuda_backend.CudaBackend()


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "maximum", "minimum", "pow"])
def test_binary_ops_with_broadcasting_and_views(cuda, op):
    a, b = rand(5, 7, seed=1), rand(7, seed=2)
    if op == "pow":
        a = np.abs(a) + 0.5
    fn = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
          "maximum": np.maximum, "minimum": np.minimum, "pow": np.power}[op]
    ta, tb = on(cuda, a), on(cuda, b)
    got = NDArray.ewise(ta._data, op, tb._data)                   # broadcast operand
    _close(got.numpy(), fn(a, b))
    got_t = NDArray.ewise(ta._data.transpose(), op, ta._data.transpose())    # strided views
    _close(got_t.numpy(), fn(a.T, a.T))
    assert got.device.name == "cuda"


@pytest.mark.parametrize("op,s,reverse", [("add", 2.5, False), ("sub", 2.0, True), ("div", 3.0, False),
                                          ("div", 3.0, True), ("mul", -1.5, False), ("maximum", 0.0, False)])
def test_scalar_ops(cuda, op, s, reverse):
    a = rand(4, 9, seed=3)
    fn = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "maximum": np.maximum}[op]
    got = on(cuda, a)._data.scalar(op, s, reverse=reverse).numpy()
    _close(got, fn(np.float32(s), a) if reverse else fn(a, np.float32(s)))


@pytest.mark.parametrize("op", ["neg", "exp", "log", "sqrt", "sin", "cos", "tanh", "abs", "relu", "sigmoid"])
def test_unary_ops(cuda, op):
    a = rand(3, 11, seed=4) * 4
    if op in ("log", "sqrt"):
        a = np.abs(a) + 0.1
    ref = {"neg": np.negative, "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "sin": np.sin, "cos": np.cos,
           "tanh": np.tanh, "abs": np.abs, "relu": lambda x: np.maximum(x, 0),
           "sigmoid": lambda x: 1 / (1 + np.exp(-x))}[op]
    got = on(cuda, a)._data.unary(op).numpy()
    np.testing.assert_allclose(got, ref(a.astype(np.float64)), rtol=2e-6, atol=2e-7)


@pytest.mark.parametrize("n", [1, 37, 1000])
def test_sizes_1_37_1000(cuda, n):
    a, b = rand(n, seed=n), rand(n, seed=n + 1)
    ta, tb = on(cuda, a), on(cuda, b)
    _close((ta * tb + 1).numpy(), a * b + 1)
    _close(ta.sum().numpy(), a.sum(dtype=np.float64), n)
    assert ta.max().item() == a.max()
    m = min(n, 130)    # matmul of n x n for n = 1000 takes seconds on the emulator
    x, y = rand(m, m, seed=5), rand(m, m, seed=6)
    _close((on(cuda, x) @ on(cuda, y)).numpy(), x.astype(np.float64) @ y, m)


@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=4),
       data=st.data(), op=st.sampled_from(["sum", "max", "min"]), keepdims=st.booleans())
def test_reductions_over_any_axes(cuda, shape, data, op, keepdims):
    a = rand(*shape, seed=len(shape))
    axes = data.draw(st.lists(st.integers(0, len(shape) - 1), unique=True, min_size=1, max_size=len(shape)))
    got = on(cuda, a)._data.reduce(op, tuple(axes), keepdims=keepdims).numpy()
    want = getattr(np, op)(a, axis=tuple(axes), keepdims=keepdims)
    _close(got, want, int(np.prod([shape[i] for i in axes])))


def test_reductions_propagate_nan_as_numpy_does(cuda):
    a = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, 6.0]], np.float32)
    t = on(cuda, a)
    np.testing.assert_array_equal(t.max(dim=1).values.numpy(), np.max(a, axis=1))
    np.testing.assert_array_equal(t.min(dim=1).values.numpy(), np.min(a, axis=1))
    np.testing.assert_array_equal(t.sum(dim=1).numpy(), np.sum(a, axis=1))


@pytest.mark.parametrize("sa,sb", [((37, 41), (41, 19)), ((3, 17, 33), (33, 5)), ((2, 1, 4, 6), (3, 6, 7)),
                                   ((1, 1), (1, 1)), ((5,), (5, 3)), ((4, 5), (5,))])
def test_matmul_batched_and_broadcast(cuda, sa, sb):
    a, b = rand(*sa, seed=7), rand(*sb, seed=8)
    got = (on(cuda, a) @ on(cuda, b)).numpy()
    _close(got, np.matmul(a.astype(np.float64), b), sa[-1])


def test_matmul_of_transposed_views(cuda):
    a, b = rand(20, 30, seed=9), rand(40, 20, seed=10)
    got = (on(cuda, a).T @ on(cuda, b).T).numpy()
    _close(got, a.T.astype(np.float64) @ b.T, 20)


@pytest.mark.parametrize("k,s,p", [((3, 3), (1, 1), (1, 1)), ((2, 3), (2, 1), (0, 2)), ((1, 1), (1, 1), (0, 0))])
def test_im2col_kernel(cuda, k, s, p):
    from mini.ops.conv import _im2col_np
    x = rand(2, 3, 7, 6, seed=11)
    buf = cuda.im2col(on(cuda, x)._data, k, s, p)
    want = _im2col_np(x, k, s, p)
    np.testing.assert_array_equal(buf.reshape(want.shape), want)
    t = mini.ops.conv.im2col(on(cuda, x), k, s, p)        # the op routes to the kernel
    assert t.device.name == "cuda"
    np.testing.assert_array_equal(t.numpy(), want)


def test_host_fallbacks_for_other_dtypes_and_ops(cuda):
    a = np.arange(12).reshape(3, 4)
    t = mini.tensor(a, device=cuda)
    np.testing.assert_array_equal((t + t).numpy(), a + a)                # int64: host
    f = on(cuda, rand(3, 4, seed=12))
    np.testing.assert_array_equal(f.argmax(dim=1).numpy(), f.numpy().argmax(axis=1))
    np.testing.assert_array_equal(mini.where(f > 0, f, f * 0).numpy(), np.where(f.numpy() > 0, f.numpy(), 0))
    np.testing.assert_array_equal(f[[0, 2]].numpy(), f.numpy()[[0, 2]])
    assert (f.double() * 2).dtype == mini.float64


def test_training_step_on_cuda_matches_numpy(cuda):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((16, 8)).astype(np.float32), rng.integers(0, 3, 16)
    results = []
    for device in ("numpy", "cuda"):
        mini.manual_seed(0)
        model = mini.nn.Sequential(mini.nn.Linear(8, 12), mini.nn.ReLU(), mini.nn.Linear(12, 3)).to(device)
        opt = mini.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            loss = mini.nn.functional.cross_entropy(model(mini.tensor(x, device=device)),
                                                    mini.tensor(y, device=device))
            opt.zero_grad()
            loss.backward()
            opt.step()
        assert loss.device.name == device
        results.append((loss.item(), [p.detach().cpu().numpy() for p in model.parameters()]))
    (l0, p0), (l1, p1) = results
    assert abs(l0 - l1) < 1e-5
    for a, b in zip(p0, p1):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_transfers_are_counted_in_bytes(cuda):
    mini.cuda.reset_transfer_stats()
    x = mini.randn(1024, 1024)                     # 4 MiB of float32 on the host
    xc = x.to("cuda")
    y = xc.sum(dim=1).cpu()
    stats = mini.cuda.transfer_stats()
    assert stats == {"h2d_bytes": 4 * 1024 * 1024, "d2h_bytes": 4 * 1024, "h2d_count": 1, "d2h_count": 1}
    assert y.device.name != "cuda" and xc.device.name == "cuda"
    assert xc.cuda() is xc and y.cpu() is y
    # a differentiable copy: the gradient goes back to the host
    w = mini.tensor(rand(3, seed=13), requires_grad=True)
    (w.cuda() * 2).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), np.full(3, 2, np.float32))


def test_the_device_kernels_pass_the_sanitizer(monkeypatch):
    """Built with the emulator's checks, the device's own kernels (compact, elementwise,
    reductions, matmul, im2col) run clean under two schedules."""
    if not build.use_emulator():
        pytest.skip("the sanitizer is the emulator's")
    from mini.backends.cuda import emulator
    monkeypatch.setenv("MINI_CUDA_SANITIZE_DEVICE", "1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cuda_backend.EmulatedDeviceWarning)
        dev = cuda_backend.CudaBackend()
    a, b = rand(33, 40, seed=14), rand(40, 17, seed=15)
    with emulator.check(schedules=2) as run:
        ta, tb = mini.tensor(a, device=dev), mini.tensor(b, device=dev)
        out = (ta @ tb).relu() + 1.0
        s = ta.T.sum(dim=0, keepdim=True) * ta[:, 1:3].max()
        cols = dev.im2col(mini.tensor(rand(1, 2, 5, 5, seed=16), device=dev)._data, (3, 3), (1, 1), (1, 1))
        mini.cuda.emulator.collect()
    assert run.ok, run
    assert len(run.launches) >= 6 and all(l["checked"] for l in run.launches)
    _close(out.numpy(), np.maximum(a.astype(np.float64) @ b, 0) + 1, 40)
    _close(s.numpy(), a.T.sum(axis=0, keepdims=True) * a[:, 1:3].max(), 40)
    assert cols.size == 25 * 18
