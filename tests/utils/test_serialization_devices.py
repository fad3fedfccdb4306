"""mini.save/mini.load and devices, as torch.save/torch.load: a tensor comes back on the
device it was saved from unless ``map_location`` (a device, a dict or a callable) says
otherwise; a device that is not available here is an error that names ``map_location``."""
from __future__ import annotations

import io
import pickle

import numpy as np
import pytest

import mini
from mini import nn, serialization


def _cpu_available() -> bool:
    try:
        mini.device("cpu")
        return True
    except Exception:  # noqa: BLE001 - the C++ extension is not built here
        return False


needs_cpu = pytest.mark.skipif(not _cpu_available(), reason="the cpu (C++) backend is not built")


def _roundtrip(obj, **load_kwargs):
    buf = io.BytesIO()
    serialization.save(obj, buf)
    buf.seek(0)
    return serialization.load(buf, **load_kwargs)


class _SavedOn:
    """Pickles like a tensor that mini.save wrote from device ``location``."""

    def __init__(self, array, location, parameter=False):
        self.array, self.location, self.parameter = array, location, parameter

    def __reduce__(self):
        return serialization._rebuild_tensor, (self.array, self.parameter, self.parameter,
                                               self.location)


def _file_with(obj) -> io.BytesIO:
    buf = io.BytesIO(serialization.MAGIC + pickle.dumps(obj, protocol=4))
    return buf


@needs_cpu
@pytest.mark.parametrize("saved_on", ["numpy", "cpu"])
def test_a_tensor_reloads_on_the_device_it_was_saved_from(saved_on):
    other = "cpu" if saved_on == "numpy" else "numpy"
    before = mini.get_default_device()
    t = mini.arange(6, dtype=mini.float64, device=saved_on).reshape(2, 3)
    p = nn.Parameter(mini.ones(3, device=saved_on))
    buf = io.BytesIO()
    serialization.save({"t": t, "p": p}, buf)
    try:
        mini.set_default_device(other)      # loading must not follow the default device
        buf.seek(0)
        back = serialization.load(buf)
    finally:
        mini.set_default_device(before.name)
    assert back["t"].device == saved_on and back["p"].device == saved_on
    assert isinstance(back["p"], nn.Parameter) and back["p"].requires_grad
    np.testing.assert_array_equal(back["t"].numpy(), t.numpy())
    assert back["t"].dtype == mini.float64


@needs_cpu
def test_map_location_as_a_name_a_device_a_dict_and_a_callable():
    obj = {"a": mini.ones(2, device="cpu"), "b": mini.zeros(2, device="numpy")}
    for ml in ("numpy", mini.device("numpy")):
        back = _roundtrip(obj, map_location=ml)
        assert back["a"].device == "numpy" and back["b"].device == "numpy"
    back = _roundtrip(obj, map_location={"cpu": "numpy"})
    assert back["a"].device == "numpy" and back["b"].device == "numpy"
    back = _roundtrip(obj, map_location={"numpy": "cpu"})
    assert back["a"].device == "cpu" and back["b"].device == "cpu"
    seen = []

    def to_numpy(tensor, location):
        seen.append(location)
        return tensor.to("numpy")

    back = _roundtrip(obj, map_location=to_numpy)
    assert sorted(seen) == ["cpu", "numpy"]
    assert back["a"].device == "numpy" and back["b"].device == "numpy"
    back = _roundtrip(obj, map_location=lambda tensor, location: None)  # None: keep the saved device
    assert back["a"].device == "cpu" and back["b"].device == "numpy"


def test_map_location_onto_the_portable_device_keeps_values_and_parameters():
    lin = nn.Linear(3, 2)
    back = _roundtrip(lin.state_dict(), map_location="numpy")
    assert all(v.device == "numpy" for v in back.values())
    np.testing.assert_array_equal(back["weight"].numpy(), lin.weight.detach().numpy())
    param = _roundtrip({"w": lin.weight}, map_location=lambda t, loc: t)["w"]
    assert isinstance(param, nn.Parameter) and param.requires_grad


def test_a_device_that_is_not_available_needs_map_location():
    a = np.arange(4.0)
    f = _file_with({"w": _SavedOn(a, "tpu", parameter=True)})
    with pytest.raises(RuntimeError, match="saved on device 'tpu'.*map_location"):
        serialization.load(f)
    for ml in ("numpy", {"tpu": "numpy"}, {"tpu:0": "numpy"},
               lambda t, loc: t.to("numpy") if loc == "tpu" else None):
        f.seek(0)
        w = serialization.load(f, map_location=ml)["w"]
        assert w.device == "numpy" and isinstance(w, nn.Parameter)
        np.testing.assert_array_equal(w.detach().numpy(), a)
    f.seek(0)
    with pytest.raises(RuntimeError, match="tpu"):   # a dict that does not cover it
        serialization.load(f, map_location={"cuda": "numpy"})


def test_files_without_locations_load_on_the_default_device():
    old = io.BytesIO(serialization.MAGIC + pickle.dumps(
        {"w": _OldStyle()}, protocol=4))
    w = serialization.load(old)["w"]
    assert w.device == mini.get_default_device()
    np.testing.assert_array_equal(w.numpy(), np.ones(3))


class _OldStyle:
    def __reduce__(self):  # what mini.save wrote before it recorded locations
        return serialization._rebuild_tensor, (np.ones(3), False, False)


def test_bad_map_location_and_unsupported_arguments_are_clear():
    buf = io.BytesIO()
    serialization.save({"w": mini.ones(2)}, buf)
    with pytest.raises(TypeError, match="map_location must be a device name"):
        buf.seek(0)
        serialization.load(buf, map_location=3)
    with pytest.raises(TypeError, match="return a mini Tensor"):
        buf.seek(0)
        serialization.load(buf, map_location=lambda t, loc: "numpy")
    with pytest.raises(NotImplementedError, match="mmap"):
        buf.seek(0)
        serialization.load(buf, mmap=True)
    with pytest.raises(NotImplementedError, match="encoding"):
        buf.seek(0)
        serialization.load(buf, encoding="latin1")
    with pytest.raises(NotImplementedError, match="pickle_module"):
        serialization.save({}, io.BytesIO(), pickle_module=object())
