"""Plain data across the line between a process that runs a candidate's code and the process that judges it.

A gate worker's pipe is open in the candidate's process (its host code can ``write()`` to it): whatever the
parent reads from there is the candidate's to forge. A pickle naming ``posix.system`` once ran a shell in the
gate's own, unconfined process; a restricted unpickler then stood between them. Here nothing is unpickled: a
message is JSON (UTF-8) and decodes into the few kinds of value the suite's replies hold, each spelt out:

- ``null``, booleans, strings, integers, lists: themselves;
- a float: a JSON number (Python writes the shortest text that reads back to the same bits), or, not finite,
  ``{"$": "float", "bits": "<16 hex digits>"}`` (a NaN's payload kept);
- a tuple: ``{"$": "tuple", "items": [...]}``; a dict: ``{"$": "dict", "items": [[key, value], ...]}``;
- a numpy array: ``{"$": "ndarray", "dtype": "<f4", "shape": [...], "data": "<base64>"}``, its bytes as they were
  (float32 NaN payloads kept); a numpy scalar likewise as ``"$": "scalar"`` without a shape; the dtypes of
  :data:`DTYPES` only, little-endian;
- a dataclass of :data:`TYPES` (the suite's replies): ``{"$": "<class name>", "fields": {name: value}}``, its
  field set exactly the class's.

Anything else (another tag, another class, a field set that differs, an array whose bytes do not fill its
shape, text that is not JSON, more than :data:`REPLY_MAX` bytes) is :class:`Forged`: the gate ends the worker
as a ``sandbox`` fault. A well-formed reply the candidate forged is still read as measured: code that shares the
worker's process can change what it reports (DESIGN.md, what the gate does not defend).

The same values carry what a confined command's child hands back in a file (:func:`read`;
``analysis.cli.confined.measure``), each command checking the tree it reads against its own schema.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import math
import os
import stat
import struct
from pathlib import Path

import numpy as np

from repro.backends.host_state import HostState
from repro.runners.inference import Behaviour, Edge
from repro.runners.probes import ThreadProbe

#: The classes a worker's reply may hold (:func:`repro.runners.campaign.run_group`: ``threads`` a ThreadProbe,
#: ``state`` a HostState; :func:`repro.runners.inference.infer`: a Behaviour with its Edges), by class name.
TYPES = {cls.__name__: cls for cls in (Behaviour, Edge, HostState, ThreadProbe)}
#: numpy dtypes an array or scalar may have (``dtype.str``, little-endian): no objects, no structured records.
DTYPES = frozenset({"|b1", "|i1", "|u1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8", "<f4", "<f8"})
#: The largest message read (bytes): the fixed kernel's largest reply is 1.2 MB as JSON. A length past it is no
#: reply of a worker's (a candidate that promised 2^40 bytes and streamed them took the gate to 1.2 GB in 2 s).
REPLY_MAX = 64 << 20
#: Dimensions an array may have.
MAX_DIMS = 32
#: The tags of the values that are not JSON's own; a class of :data:`TYPES` may not take one of these names.
_TAGS = frozenset({"float", "tuple", "dict", "ndarray", "scalar"})
assert not _TAGS & TYPES.keys()


class Forged(ValueError):
    """A message that is not one the suite sends: the reason, in a few words."""


def dumps(value: object) -> bytes:
    """``value`` as a plain-data message (UTF-8 JSON); TypeError for a value outside what :func:`loads` reads."""
    return json.dumps(_encode(value), allow_nan=False, separators=(",", ":")).encode()


def loads(data: bytes, limit: int | None = None) -> object:
    """The value in ``data`` (see the module doc); :class:`Forged` for anything :func:`dumps` does not write, or
    for more than ``limit`` bytes (default :data:`REPLY_MAX`)."""
    if len(data) > (REPLY_MAX if limit is None else limit):
        raise Forged(f"a message of {len(data)} bytes")
    try:
        tree = json.loads(data.decode("utf-8"), parse_constant=_no_constant)
    except Forged:
        raise
    except (UnicodeDecodeError, ValueError, RecursionError) as err:  # ValueError: JSONDecodeError, a huge integer
        raise Forged(f"not a JSON message ({type(err).__name__})") from None
    try:
        return _decode(tree)
    except RecursionError:
        raise Forged("nested too deep") from None


def read(path: Path, limit: int) -> object:
    """:func:`loads` of the file at ``path``, which a confined child wrote: a regular file (a link is not
    followed), at most ``limit`` bytes (a larger one is not read); :class:`Forged` otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as err:
        raise Forged(f"{path.name}: {err.strerror}") from None
    with os.fdopen(fd, "rb") as file:
        size = os.fstat(fd).st_size
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Forged(f"{path.name} is no regular file")
        if size > limit:
            raise Forged(f"{path.name} holds {size} bytes, past the {limit} expected")
        return loads(file.read(limit + 1), limit)


def _no_constant(name: str):
    raise Forged(f"a bare {name}")  # NaN and ±Infinity are written tagged, never as JSON's extensions


def _encode(x):
    if isinstance(x, (np.ndarray, np.generic)):  # first: np.float64 is a float, and stays np.float64
        a = np.ascontiguousarray(x, dtype=np.asarray(x).dtype.newbyteorder("<"))
        if a.dtype.str not in DTYPES:
            raise TypeError(f"plain data holds no arrays of dtype {a.dtype}")
        out = {"$": "ndarray" if isinstance(x, np.ndarray) else "scalar", "dtype": a.dtype.str,
               "data": base64.b64encode(a.tobytes()).decode("ascii")}
        return out | ({"shape": list(a.shape)} if isinstance(x, np.ndarray) else {})
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, int):
        return int(x)
    if isinstance(x, float):
        return float(x) if math.isfinite(x) else {"$": "float", "bits": struct.pack(">d", x).hex()}
    if isinstance(x, list):
        return [_encode(v) for v in x]
    if isinstance(x, tuple):
        return {"$": "tuple", "items": [_encode(v) for v in x]}
    if isinstance(x, dict):
        return {"$": "dict", "items": [[_encode(k), _encode(v)] for k, v in x.items()]}
    cls = type(x)
    if TYPES.get(cls.__name__) is cls:
        return {"$": cls.__name__, "fields": {f.name: _encode(getattr(x, f.name)) for f in dataclasses.fields(x)}}
    raise TypeError(f"plain data holds no {cls.__module__}.{cls.__qualname__}")


def _keys(node: dict, *names: str) -> None:
    if set(node) != {"$", *names}:
        raise Forged(f"a {node['$']!r} with the keys {sorted(node)}")


def _decode(x):
    if x is None or isinstance(x, (bool, str, int, float)):
        return x
    if isinstance(x, list):
        return [_decode(v) for v in x]
    tag = x.get("$")
    if not isinstance(tag, str):
        raise Forged("an object with no type")
    if tag == "float":
        _keys(x, "bits")
        try:
            (value,) = struct.unpack(">d", bytes.fromhex(x["bits"]))
        except (TypeError, ValueError, struct.error):
            raise Forged("a float's bits unreadable") from None
        if math.isfinite(value):
            raise Forged("a finite float written as bits")
        return value
    if tag == "tuple":
        _keys(x, "items")
        return tuple(_decode(v) for v in _list(x["items"]))
    if tag == "dict":
        _keys(x, "items")
        pairs = [_decode(_list(p)) for p in _list(x["items"])]
        if any(len(p) != 2 for p in pairs):
            raise Forged("a dict's item that is not a pair")
        try:
            return dict(pairs)
        except TypeError:  # a key that is a list, a dict or an array
            raise Forged("a dict's key that cannot be one") from None
    if tag in ("ndarray", "scalar"):
        return _array(x, tag == "ndarray")
    cls = TYPES.get(tag)
    if cls is None:
        raise Forged(f"a {tag!r}, no type of the suite's replies")
    _keys(x, "fields")
    fields = x["fields"]
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    if not isinstance(fields, dict) or set(fields) != names:
        got = set(fields) if isinstance(fields, dict) else set()
        raise Forged(f"a {tag} whose fields are not its own (missing {sorted(names - got)}, "
                     f"unknown {sorted(got - names)})")
    return cls(**{name: _decode(v) for name, v in fields.items()})


def _list(x) -> list:
    if not isinstance(x, list):
        raise Forged(f"a {type(x).__name__} where a list belongs")
    return x


def _array(x: dict, shaped: bool):
    _keys(x, "dtype", "data", *(("shape",) if shaped else ()))
    dtype, data = x["dtype"], x["data"]
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise Forged(f"an array of dtype {str(dtype)[:20]!r}")
    shape = _list(x["shape"]) if shaped else []
    if len(shape) > MAX_DIMS or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
        raise Forged("an array's shape that is none")
    try:
        raw = base64.b64decode(data, validate=True) if isinstance(data, str) else None
    except (binascii.Error, ValueError):
        raw = None
    dt = np.dtype(dtype)
    if raw is None or len(raw) != math.prod(shape) * dt.itemsize:
        raise Forged("an array whose bytes do not fill its shape")
    a = np.frombuffer(bytearray(raw), dtype=dt).reshape(shape)  # writable, as an array unpickled was
    return a if shaped else a[()]
