"""The codec between the trusted grader and the worker: exact kinds, layouts kept,
schema and size caps enforced, records (never live objects) on the trusted side."""
from __future__ import annotations

import json
import math
import struct

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from grader.worker import codec
from grader.worker.codec import (Caps, CodecError, ExceptionRecord, OpaqueRecord, SizeSpec,
                                 TensorRecord, TensorSpec, pack, unpack)


def roundtrip(value, side="trusted", caps=codec.DEFAULT_CAPS):
    return unpack(pack({"v": value}, caps), side, caps)["v"]


def same(a, b) -> bool:
    """Equal with the same types all the way down (tuple is not list, np.int64 is not int)."""
    if type(a) is not type(b):
        return False
    if type(a) in (list, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if type(a) is dict:
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if type(a) is np.ndarray:
        return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")
    if type(a) is float and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, np.generic):
        return a.dtype == b.dtype and (a == b or (a != a and b != b))
    return a == b


@pytest.mark.parametrize("value", [
    None, True, False, 0, -7, 2**80, 1.5, float("inf"), float("-inf"), "text", "",
    (), (1, 2), [1, 2], [(1,), [2]], {"a": 1, "b": (2, None)}, {1: "x", (2, 3): "y"},
    slice(1, None, -2), slice(None), Ellipsis, (Ellipsis, None, slice(0, 3)),
    np.int64(3), np.int32(3), np.float32(0.25), np.bool_(True), np.float64(2.5),
    np.dtype("float32"), np.dtype("<i8"), complex(1, -2), b"\x00\x01",
])
def test_plain_values_keep_their_exact_type(value):
    assert same(roundtrip(value), value)


def test_nan_survives():
    assert math.isnan(roundtrip(float("nan")))
    a = np.array([np.nan, 1.0, np.inf])
    assert same(roundtrip(a), a)


@given(st.integers(1, 4), st.integers(0, 5), st.sampled_from(["float32", "int64", "float64", "bool", "uint8"]),
       st.booleans(), st.booleans())
@settings(max_examples=40, deadline=None)
def test_array_layouts_are_recreated_on_the_worker_side(rows, cols, dtype, transpose, reverse):
    base = (np.arange(rows * cols * 3) % 7).astype(dtype).reshape(rows, cols * 3)
    view = base[:, ::3]
    if transpose:
        view = view.T
    if reverse:
        view = view[::-1]
    got = roundtrip(view, "worker")
    assert got.dtype == view.dtype and got.shape == view.shape and np.array_equal(got, view)
    if view.size:
        assert got.strides == view.strides       # the same layout, not a compact copy
        assert got.flags.c_contiguous == view.flags.c_contiguous
    trusted = roundtrip(view, "trusted")
    assert np.array_equal(trusted, view) and trusted.flags.c_contiguous


def test_broadcast_unaligned_and_readonly_views():
    b = np.broadcast_to(np.arange(3.0), (4, 3))
    got = roundtrip(b, "worker")
    assert got.strides == (0, 8) and np.array_equal(got, b) and not got.flags.writeable
    flat = np.arange(100, dtype=np.float32)
    for view in (flat[1:], flat[3:50:2]):
        got = roundtrip(view, "worker")
        align = view.__array_interface__["data"][0] % 64
        assert got.__array_interface__["data"][0] % 64 == align
        assert np.array_equal(got, view) and got.flags.writeable
    assert roundtrip(np.zeros((0, 3), np.int32)).shape == (0, 3)


def test_tensors_become_records_on_the_trusted_side_and_tensors_on_the_worker_side():
    import mini
    spec = TensorSpec(np.arange(6.0).reshape(2, 3), requires_grad=True)
    t = roundtrip(spec, "worker")
    assert type(t) is mini.Tensor and t.requires_grad and t.shape == (2, 3)
    (t * 2).sum().backward()
    out = t * 3
    rec = roundtrip((t, out), "trusted")
    assert type(rec[0]) is TensorRecord and rec[0].is_leaf and rec[0].requires_grad
    assert np.array_equal(rec[0].grad, np.full((2, 3), 2.0))
    assert rec[1].grad_fn is not None and not rec[1].is_leaf
    assert np.array_equal(rec[1].data, np.arange(6.0).reshape(2, 3) * 3)
    assert rec[0].id != rec[1].id
    same_twice = roundtrip((t, t))
    assert same_twice[0].id == same_twice[1].id
    size = roundtrip(SizeSpec((2, 3)), "worker")
    assert type(size).__name__ == "Size" and tuple(size) == (2, 3)


def test_exceptions_and_unknown_objects_become_records():
    class Sneaky(ValueError):
        def __str__(self):
            raise RuntimeError("no message for you")

    class Anything:
        def __eq__(self, other):
            return True

        def __repr__(self):
            return "x" * 10_000

    rec = roundtrip(Sneaky("boom"))
    assert type(rec) is ExceptionRecord and rec.type_name == "Sneaky"
    assert rec.is_a("ValueError") and rec.is_a("Exception") and not rec.is_a("KeyError")
    assert rec.message == ""                     # the broken __str__ cost only the message
    from mini.exercises import ExerciseNotImplemented
    stub = roundtrip(ExerciseNotImplemented("03.offset"))
    assert stub.not_implemented and stub.slot_id == "03.offset"
    assert roundtrip(NotImplementedError()).not_implemented
    assert not roundtrip(NotImplementedError("on purpose")).not_implemented
    obj = roundtrip(Anything())
    assert type(obj) is OpaqueRecord and obj.type_name == "Anything" and len(obj.repr) <= 300
    assert obj != Anything.__new__(Anything) or True   # a record, compared as a dataclass


def test_strings_are_capped_on_encode():
    caps = Caps(max_str=50)
    assert len(roundtrip("y" * 1000, caps=caps)) == 50


def _frame(header: dict, buffers=()) -> bytes:
    text = json.dumps(header).encode()
    out = struct.pack("<Q", len(text)) + text + struct.pack("<I", len(buffers))
    for b in buffers:
        out += struct.pack("<Q", len(b)) + b
    return out


@pytest.mark.parametrize("header, buffers, fragment", [
    ({"$": "pickle", "v": "gASVAAAA"}, (), "unknown tag"),
    ({"$": "ndarray", "dtype": "|O", "shape": [1], "strides": [8], "offset": 0, "b": 0}, (b"\0" * 8,), "not allowed"),
    ({"$": "ndarray", "dtype": "<f8", "shape": [4], "strides": [8], "offset": 0, "b": 0}, (b"\0" * 8,), "outside"),
    ({"$": "ndarray", "dtype": "<f8", "shape": [2], "strides": [-8], "offset": 0, "b": 0}, (b"\0" * 16,), "outside"),
    ({"$": "ndarray", "dtype": "<f8", "shape": [1], "strides": [8], "offset": 0, "b": 3}, (b"\0" * 8,), "buffer"),
    ({"$": "npscalar", "dtype": "|V8", "b": 0}, (b"\0" * 8,), "not allowed"),
    ({"$": "dict", "v": [[[1, 2], 3]]}, (), "dict key"),
    ({"$": "float", "v": "1e9999"}, (), "float"),
    ({"$": "tensor", "data": 5, "requires_grad": False}, (), "wrong type"),
])
def test_malformed_frames_are_refused(header, buffers, fragment):
    with pytest.raises(CodecError, match=fragment):
        unpack(_frame(header, buffers), "trusted")


def test_caps_refuse_oversized_and_deep_messages():
    with pytest.raises(CodecError):
        unpack(pack({"v": np.zeros(1000)}), "trusted", Caps(max_bytes=100))
    deep = []
    for _ in range(100):
        deep = [deep]
    with pytest.raises(CodecError):
        pack({"v": deep})
    header = {"v": 1}
    raw = _frame(header)
    with pytest.raises(CodecError, match="header"):
        unpack(raw, "trusted", Caps(max_header=2))
    bad_json = struct.pack("<Q", 3) + b"{x]" + struct.pack("<I", 0)
    with pytest.raises(CodecError, match="JSON"):
        unpack(bad_json, "trusted")
    nan_literal = struct.pack("<Q", 3) + b"NaN" + struct.pack("<I", 0)
    with pytest.raises(CodecError):
        unpack(nan_literal, "trusted")
    with pytest.raises(EOFError):
        unpack(b"\x05\x00", "trusted")


def test_the_worker_side_refuses_records_as_inputs():
    for value in (ValueError("x"), object()):
        with pytest.raises(CodecError):
            roundtrip(value, "worker")
