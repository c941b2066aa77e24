"""What the gate reads from a worker's pipe: an unpickler that builds only the suite's data, never calls anything.

A worker's pipe is open in the candidate's process (its host code can ``write()`` to it), and
``Connection.recv()`` unpickles what it reads: a pickle naming ``posix.system`` ran a shell in the gate's own,
unconfined process (found by trying: ``id`` ran as the gate's user). :func:`loads` builds numpy arrays and the
suite's own dataclasses and enums (``repro.*``) and nothing else; anything else is a :class:`Forged` reply,
which ends the worker as a sandbox fault. A well-formed reply the candidate forged is still read as measured:
code that shares the worker's process can change what it reports (DESIGN.md, what the gate does not defend).
"""

from __future__ import annotations

import dataclasses
import enum
import io
import pickle

#: numpy's own reconstructors of an array (pickle protocols up to 4, and 5), a dtype and a scalar (numpy 1.x
#: and 2.x module names).
_NUMPY = frozenset({
    ("numpy", "ndarray"), ("numpy", "dtype"),
    *((f"numpy.{core}.multiarray", n) for core in ("core", "_core") for n in ("_reconstruct", "scalar")),
    *((f"numpy.{core}.numeric", "_frombuffer") for core in ("core", "_core")),
})
_BUILTINS = frozenset({"set", "frozenset", "complex"})


class Forged(pickle.UnpicklingError):
    """A reply that names something the suite never sends."""


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) in _NUMPY or (module == "builtins" and name in _BUILTINS):
            return super().find_class(module, name)
        if module.split(".")[0] == "repro" and "." not in name:
            found = super().find_class(module, name)
            if isinstance(found, type) and (dataclasses.is_dataclass(found) or issubclass(found, enum.Enum)):
                return found
        raise Forged(f"{module}.{name}")


def loads(data: bytes) -> object:
    """The reply in ``data``; :class:`Forged` when it names anything but the suite's data (or is no pickle)."""
    try:
        return _Unpickler(io.BytesIO(data)).load()
    except Forged:
        raise
    except Exception as err:  # truncated, or not a pickle at all
        raise Forged(f"unreadable ({type(err).__name__})") from None
