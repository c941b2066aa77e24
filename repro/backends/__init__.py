"""Backends that execute the controller source: ``host`` everywhere, ``cupy`` on a GPU."""

from __future__ import annotations

from repro.backends.base import Backend, CompiledKernel
from repro.core.errors import BackendUnavailable, SuiteError, unavailable_reason

NAMES = ("auto", "host", "cupy")
_cache: dict[str, Backend] = {}


def get_backend(name: str = "auto") -> Backend:
    """The named backend; ``auto`` is cupy when it imports and a device answers, else host.

    Raises :class:`BackendUnavailable` (with the reason) when the named one cannot run here.
    """
    if name not in NAMES:
        raise SuiteError(f"unknown backend {name!r} (choose from {', '.join(NAMES)})")
    if name == "auto":
        try:
            return get_backend("cupy")
        except BackendUnavailable:
            return get_backend("host")
    if name not in _cache:
        if name == "host":
            from repro.backends.host import HostBackend

            _cache[name] = HostBackend()
        else:
            from repro.backends.cupy_backend import CupyBackend

            _cache[name] = CupyBackend()
    return _cache[name]


def backend_unavailable(name: str) -> str | None:
    """None when backend ``name`` runs here, else the one-line reason it does not."""
    return unavailable_reason(lambda: get_backend(name))


__all__ = ["Backend", "CompiledKernel", "get_backend", "backend_unavailable", "NAMES"]
