"""The backends' registry: every way to execute a controller source, by name (``host`` everywhere, ``cupy`` on a GPU).

Adding a backend
================

A backend is one :class:`BackendEntry` in :data:`REGISTRY` and its classes; nothing else names it.

1. Subclass :class:`repro.backends.base.Backend` and :class:`repro.backends.base.CompiledKernel` in a module of
   ``repro/backends/`` (build ``repro.backends.translation_unit.harness_unit(...)``, as ``host.py`` and
   ``cupy_backend.py`` do). Required: ``Backend.compile``, ``Backend.describe`` and the kernel's
   ``run_per_step``, ``run_looped``, ``run_as_threads`` and ``batched_step``. Optional: ``Backend.compile_learner``
   (the learning study's loop) and ``CompiledKernel.run_private`` (the benchmark's throughput harness); a backend
   that leaves them out raises, where they are asked for, the base's one-line :class:`SuiteError` naming the
   backend and what it lacks.
2. Add its :class:`BackendEntry` to :data:`REGISTRY` below (or call :func:`register` from a plugin): the name,
   where its class lives, how isolated workers start (``fork`` where the loaded kernel survives a fork,
   ``forkserver`` for a device runtime that does not, as CUDA, but whose import starts nothing (workers forked
   from a server that imported it once), ``spawn`` for one whose import starts it), the pytest markers its tests
   carry (``gpu`` for a
   device: skipped with the reason where it does not answer) and whether it is a device (the report runs the
   full pre-registered studies on a device, the reduced ones elsewhere; ``auto`` prefers a device).

Then ``get_backend(name)`` returns it, ``--backend name`` takes it, the isolated workers start as its entry
says, and every backend-parametrised test (``conftest.py``'s ``backend_name``) runs on it, bit for bit against
the host. ``tests/test_backends.py`` holds this: a subclass of the host backend registered under a new name,
and nothing else, is returned by ``get_backend`` and collected by every backend-parametrised test.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from repro.backends.base import Backend, CompiledKernel
from repro.core.errors import BackendUnavailable, SuiteError, unavailable_reason


@dataclass(frozen=True)
class BackendEntry:
    """One backend: its name, its class, how its isolated workers start, its test markers, whether it is a device."""

    name: str
    cls: str  # "module:Class", imported on first use (a device runtime is imported only where it is asked for)
    start_method: str  # multiprocessing start method of the gate's isolated workers: START_METHODS
    marks: tuple[str, ...] = ()  # pytest markers its backend-parametrised tests carry (registered in pyproject.toml)
    device: bool = False  # an accelerator: "auto" prefers it; the report runs the full studies on it

    def load(self) -> type[Backend]:
        module, _, name = self.cls.partition(":")
        return getattr(importlib.import_module(module), name)


REGISTRY: dict[str, BackendEntry] = {}
#: How a backend's isolated workers may start (multiprocessing's start methods).
START_METHODS = ("fork", "forkserver", "spawn")


def register(entry: BackendEntry) -> BackendEntry:
    """Add ``entry`` (a name already registered is a :class:`SuiteError`); returns it."""
    if entry.name in REGISTRY or entry.name == "auto":
        raise SuiteError(f"backend {entry.name!r} is already registered")
    if entry.start_method not in START_METHODS:
        raise SuiteError(f"backend {entry.name!r}: start_method must be one of {', '.join(START_METHODS)}, "
                         f"not {entry.start_method!r}")
    REGISTRY[entry.name] = entry
    return entry


register(BackendEntry("host", "repro.backends.host:HostBackend", start_method="fork"))
# CUDA does not survive a fork: its workers come from a forkserver (CuPy imported, CUDA never started there) and
# load the kernel themselves.
register(BackendEntry("cupy", "repro.backends.cupy_backend:CupyBackend", start_method="forkserver", marks=("gpu",),
                      device=True))

_cache: dict[str, Backend] = {}


def backend_names() -> tuple[str, ...]:
    """What ``--backend`` takes: ``auto`` and every registered name."""
    return ("auto", *REGISTRY)


def entry(name: str) -> BackendEntry:
    """The registry's entry of backend ``name``; a one-line :class:`SuiteError` for an unknown one."""
    if name not in REGISTRY:
        raise SuiteError(f"unknown backend {name!r} (choose from {', '.join(backend_names())})")
    return REGISTRY[name]


def get_backend(name: str = "auto") -> Backend:
    """The named backend; ``auto`` is the first device backend that imports and answers, else the first other.

    Raises :class:`BackendUnavailable` (with the reason) when the named one cannot run here.
    """
    if name == "auto":
        ordered = sorted(REGISTRY.values(), key=lambda e: not e.device)
        for e in ordered[:-1]:
            if unavailable_reason(lambda e=e: get_backend(e.name)) is None:
                return get_backend(e.name)
        return get_backend(ordered[-1].name)
    e = entry(name)
    if name not in _cache:
        backend = e.load()()
        backend.name = e.name  # the registry names it (a subclass registered anew is a backend of its own)
        _cache[name] = backend
    return _cache[name]


def backend_unavailable(name: str) -> str | None:
    """None when backend ``name`` runs here, else the one-line reason it does not."""
    return unavailable_reason(lambda: get_backend(name))


__all__ = ["Backend", "BackendEntry", "BackendUnavailable", "CompiledKernel", "REGISTRY", "backend_unavailable",
           "entry", "backend_names", "get_backend", "register"]
