"""What crosses from a candidate's process to the judging one is plain data (repro/runners/plain.py): the suite's
own replies read back bit for bit; anything else is Forged, and nothing in it is ever called."""

from __future__ import annotations

import base64
import dataclasses
import json
import pickle
import struct

import numpy as np
import pytest

from repro.runners import plain
from repro.runners.campaign import run_group
from repro.runners.evidence import GROUPS, Fault
from repro.runners.inference import Edge, infer


def same(a, b, at: str = "reply") -> None:
    """``a`` and ``b`` are one value: the same types throughout, arrays and floats the same bits."""
    assert type(a) is type(b), (at, type(a), type(b))
    if isinstance(a, (np.ndarray, np.generic)):
        assert (a.dtype, np.shape(a), a.tobytes()) == (b.dtype, np.shape(b), b.tobytes()), at
    elif isinstance(a, float):
        assert struct.pack("<d", a) == struct.pack("<d", b), (at, a, b)
    elif dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            same(getattr(a, f.name), getattr(b, f.name), f"{at}.{f.name}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), at
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same(x, y, f"{at}[{i}]")
    elif isinstance(a, dict):
        assert list(a) == list(b), at
        for k in a:
            same(a[k], b[k], f"{at}[{k!r}]")
    else:
        assert a == b, (at, a, b)


def test_every_reply_of_the_fixed_kernel_reads_back_bit_for_bit(contract, host):
    """Each group's reply and the inference's, as a worker sends them, decode to the same types and bits."""
    entry = contract.controller("fixed")
    kernel = host.compile(contract.source("fixed"), contract.slots)
    for group in (*GROUPS, "inference"):
        reply = ("ok", infer(kernel, entry) if group == "inference" else run_group(kernel, entry, group))
        same(plain.loads(plain.dumps(reply)), reply, group)


def test_floats_and_arrays_keep_their_bits():
    """NaN payloads (float32 in an array, float64 as a Python float), signed zeros, infinities, subnormals and
    the shortest decimal that reads back: all bit for bit; a decoded array is writable, as an unpickled one was."""
    payload_nan = struct.unpack("<d", struct.pack("<Q", 0x7FF8_0000_0000_0123))[0]
    f32 = np.array([0x7FC0_0001, 0xFFBA_DBAD, 0x8000_0000, 0x0000_0001, 0x7F80_0000], np.uint32).view(np.float32)
    value = [payload_nan, -0.0, float("inf"), -float("inf"), 5e-324, 0.1, 1 / 3, 2**70, True, None, "λ",
             f32, f32.reshape(5, 1)[::2], np.zeros((0, 3), np.int64), np.float32(np.nan), np.int64(-7),
             np.array([True, False]), {1: (2, "x"), "k": []}, Edge(np.nextafter(3.0, 4.0), False)]
    back = plain.loads(plain.dumps(value))
    same(back, value)
    back[11][0] = 1.0


def forged(message) -> str:
    """The reason :func:`plain.loads` gives for ``message`` (a JSON tree, or bytes as they are)."""
    data = message if isinstance(message, bytes) else json.dumps(message).encode()
    with pytest.raises(plain.Forged) as err:
        plain.loads(data)
    return str(err.value)


def array(dtype: str, shape: list, data: bytes) -> dict:
    return {"$": "ndarray", "dtype": dtype, "shape": shape, "data": base64.b64encode(data).decode()}


def test_a_pickle_is_refused_unrun(tmp_path):
    """A pickle that would call a function is no JSON: refused, and the marker it would write stays absent."""
    marker = tmp_path / "called"
    hostile = f"cposix\nsystem\n(Vtouch {marker}\ntR.".encode()
    assert "not a JSON message" in forged(hostile)
    assert not marker.exists()
    assert "not a JSON message" in forged(pickle.dumps(("ok", [1.0]), protocol=pickle.HIGHEST_PROTOCOL))


def test_a_type_outside_the_registry_is_forged():
    """A class the replies never hold, though it is the suite's own dataclass (Fault), or one named to be called."""
    fault = json.loads(plain.dumps(Edge(3.0, True)).decode())
    fault["$"] = "Fault"
    assert "'Fault', no type of the suite's replies" in forged(fault)
    assert "no type" in forged({"$": "Popen", "fields": {"args": "touch x"}})
    assert "no type" in forged({"$": "__reduce__", "fields": {}})
    assert "an object with no type" in forged({"fields": {}})
    with pytest.raises(TypeError):  # nor does the worker's side write one
        plain.dumps(Fault("g", "", "crash", "SIGSEGV"))
    with pytest.raises(TypeError):
        plain.dumps(object())


def test_a_field_set_that_is_not_the_classes_is_forged():
    tree = json.loads(plain.dumps(Edge(3.0, True)).decode())
    missing = {"$": "Edge", "fields": {"factor": 3.0}}
    extra = {"$": "Edge", "fields": {**tree["fields"], "__class__": 1}}
    assert "missing ['inclusive']" in forged(missing)
    assert "unknown ['__class__']" in forged(extra)
    assert "fields are not its own" in forged({"$": "Edge", "fields": [3.0, True]})
    assert "keys" in forged({**tree, "args": []})


def test_an_array_outside_the_allow_list_or_its_shape_is_forged():
    for dtype in ("|O", ">f4", "<c8", "|V8", "<M8[s]", 1):
        assert "an array of dtype" in forged(array(dtype, [1], bytes(8)))
    assert plain.loads(json.dumps(array("<f4", [2], bytes(8))).encode()).tolist() == [0.0, 0.0]
    assert "do not fill" in forged(array("<f4", [3], bytes(8)))
    assert "do not fill" in forged(array("<f4", [2**62, 2**62], bytes(8)))
    assert "shape" in forged(array("<f4", [-2, -1], bytes(8)))
    assert "shape" in forged(array("<f4", [True], bytes(4)))
    assert "do not fill" in forged({**array("<f4", [1], bytes(4)), "data": "not base64!"})


def test_truncated_garbage_or_oversized_messages_are_forged(monkeypatch):
    whole = plain.dumps(("ok", [np.arange(4, dtype=np.float32), 1.5]))
    for cut in (1, len(whole) // 2, len(whole) - 1):
        assert "not a JSON message" in forged(whole[:cut])
    assert "not a JSON message" in forged(b"\xff\xfe\x00garbage")
    assert "not a JSON message" in forged(b"[1]" * 3)
    assert "a bare NaN" in forged(b"[NaN]")
    assert "finite float written as bits" in forged({"$": "float", "bits": struct.pack(">d", 1.0).hex()})
    forged(b"[" * 100_000 + b"]" * 100_000)  # nested past the interpreter's recursion: Forged, not a crash
    forged(b'{"$":"tuple","items":' * 50_000 + b"[]" + b"}" * 50_000)
    monkeypatch.setattr(plain, "REPLY_MAX", len(whole) - 1)
    assert f"a message of {len(whole)} bytes" == forged(whole)
