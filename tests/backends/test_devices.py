"""Devices as a PyTorch user expects them: ``cpu`` (mini's C++ kernels) is the default,
``numpy`` the portable reference selected by name, and ``cpu`` falls back to numpy (said
once) when the kernels are not built.  ``mini.device``, ``Tensor.device``, ``.cpu()``,
``.to()``, ``set_default_device`` behave as torch's do."""
from __future__ import annotations

import copy
import pickle
import warnings

import numpy as np
import pytest

import mini
from mini import backends
from mini.backends.cpu import build_info

try:
    import torch
except ImportError:  # the differential checks below skip
    torch = None


def test_a_script_that_names_no_device_runs_on_the_cpu_kernels(monkeypatch):
    x = mini.ones(1000)
    assert x.device == "cpu" and x.device.type == "cpu" and x.is_cpu
    assert mini.get_default_device() is mini.device("cpu")
    calls = []
    ext = x.device.ext

    class Spy:
        def __getattr__(self, name):
            calls.append(name)
            return getattr(ext, name)
    monkeypatch.setattr(x.device, "ext", Spy())
    np.testing.assert_array_equal((x + x).numpy(), 2.0)
    assert calls == ["ewise"]


def test_device_objects_print_and_compare_like_torch_devices():
    d = mini.device("cpu")
    assert isinstance(d, mini.device) and isinstance(mini.ones(1).device, mini.device)
    assert (repr(d), str(d), d.type, d.index) == ("device(type='cpu')", "cpu", "cpu", None)
    assert mini.device("cpu:0") is d and mini.device("cpu", 0) is d and mini.device(type="cpu") is d
    assert mini.device("numpy") != d and hash(mini.device("cpu")) == hash(d)
    assert copy.deepcopy(d) is d and pickle.loads(pickle.dumps(d)) is d
    if torch is not None:
        td = torch.device("cpu")
        assert (repr(td), str(td), td.type, td.index) == (repr(d), str(d), d.type, d.index)


@pytest.mark.parametrize("name,message", [("cpu:1", "mini has one cpu device"),
                                          ("tpu", "unknown device 'tpu'")])
def test_unknown_devices_are_named_in_the_error(name, message):
    with pytest.raises(RuntimeError, match=message):
        mini.device(name)
    with pytest.raises(RuntimeError, match=message):
        mini.zeros(2, device=name)


def test_set_default_device_and_back():
    mini.set_default_device("numpy")
    assert mini.zeros(2).device == "numpy" and mini.get_default_device() is mini.device("numpy")
    assert mini.tensor([1.0]).device.type == "numpy" and mini.randn(2).device == "numpy"
    mini.set_default_device(mini.device("cpu"))
    assert mini.zeros(2).device == "cpu"
    mini.set_default_device("numpy")
    mini.set_default_device(None)      # as torch.set_default_device(None): the default again
    assert mini.zeros(2).device == "cpu"
    with pytest.raises(RuntimeError, match="unknown device"):
        mini.set_default_device("gpu")
    assert mini.zeros(2).device == "cpu"


def test_cpu_and_to_return_the_tensor_itself_when_nothing_changes():
    t = mini.randn(3, requires_grad=True)
    assert t.cpu() is t and t.to("cpu") is t and t.to(mini.device("cpu")) is t
    assert t.to(mini.float32) is t and t.to(t) is t and t.to("cpu", mini.float32) is t
    c = t.to("cpu", copy=True)
    assert c is not t and not np.shares_memory(c.detach().numpy(), t.detach().numpy())
    if torch is not None:  # the same identities in torch
        tt = torch.randn(3, requires_grad=True)
        assert tt.cpu() is tt and tt.to("cpu") is tt and tt.to(tt) is tt
        assert tt.to("cpu", copy=True) is not tt


def test_moving_between_devices_is_a_differentiable_copy():
    x = mini.tensor([1.0, -2.0, 3.0], device="numpy", requires_grad=True)
    y = x.cpu()
    assert y.device == "cpu" and x.device == "numpy" and not x.is_cpu
    (y * y).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, -4.0, 6.0])
    assert x.grad.device == "numpy"          # the gradient comes back to x's device
    z = y.to(x)                               # another tensor's device (and dtype)
    assert z.device == "numpy" and z.dtype == x.dtype
    w = x.to("cpu", mini.float64)
    assert (w.device.type, w.dtype) == ("cpu", mini.float64)
    with pytest.raises(TypeError, match="unexpected keyword arguments \\['layout'\\]"):
        x.to("cpu", layout=None)


def test_mixing_devices_in_one_op_is_an_error_naming_both():
    a, b = mini.ones(2, device="cpu"), mini.ones(2, device="numpy")
    with pytest.raises(RuntimeError, match="same device, got cpu and numpy"):
        a + b


def test_modules_built_on_the_default_device_train_there():
    from mini import nn
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.ReLU(), nn.Linear(3, 2))
    assert all(p.device == "cpu" for p in model.parameters())
    out = model(mini.randn(5, 4))
    nn.functional.cross_entropy(out, mini.tensor([0, 1, 0, 1, 1])).backward()
    assert all(p.grad is not None and p.grad.device == "cpu" for p in model.parameters())
    model.to("numpy")
    assert all(p.device == "numpy" for p in model.parameters())
    assert model(mini.randn(5, 4, device="numpy")).device == "numpy"


def test_without_the_kernels_cpu_falls_back_to_numpy_and_says_so_once(monkeypatch):
    monkeypatch.setattr(backends, "_BACKENDS", {})
    monkeypatch.setattr(backends, "_warned", [])
    monkeypatch.setattr(build_info, "load_extension", lambda: None)
    monkeypatch.setattr(build_info, "import_error", lambda: "(no compiler, for this test)")
    with pytest.warns(RuntimeWarning, match="C\\+\\+ kernels are not built, so device 'cpu' runs "
                                            "on the numpy reference backend") as caught:
        x = mini.ones(3)
        y = mini.ones(3, device="cpu").cpu()
    assert len(caught) == 1
    assert x.device is mini.device("numpy") and y.device.type == "numpy"
    with warnings.catch_warnings():
        warnings.simplefilter("error")       # said once: no second warning
        np.testing.assert_array_equal((x + y).numpy(), 2.0)
        assert mini.device("cpu").type == "numpy"
