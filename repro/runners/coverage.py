"""Which lines and branches of a candidate the gate's experiments executed (host compiler + gcov).

A separate build of the harness unit with ``--coverage -O0`` (same IEEE flags
otherwise) runs every experiment group in a forked worker
(:mod:`repro.runners.isolation`), which then writes its counters (``__gcov_dump``);
``gcov --json-format`` reads them back. The ``#line`` directives of
:func:`repro.backends.translation_unit.harness_unit` attribute the counts to
the candidate's own ``.cu`` lines; the harness's lines are left out.
"""

from __future__ import annotations

import ctypes
import gzip
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from repro.backends import backend_unavailable, get_backend
from repro.backends.host import FLAGS, HostBackend, HostKernel, build, cache_dir
from repro.backends.translation_unit import HOST_SHIM, harness_unit, line_origin
from repro.core import scratch
from repro.core.contract import Controller, Slots
from repro.core.errors import BackendUnavailable, unavailable_reason
from repro.core.kernel_source import KernelSource
from repro.runners.campaign import scenario_groups
from repro.runners.evidence import GROUPS, Coverage, Fault
from repro.runners.isolation import Clock, GroupRunner, Worker, derive_limits, group_summary, time_reference

__all__ = ["COVERAGE_FLAGS", "Coverage", "measure", "reference_times", "gcov_unavailable"]

_DUMP = '\nextern "C" void __gcov_dump(void);\nextern "C" void rlq_gcov_dump(void) { __gcov_dump(); }\n'
COVERAGE_FLAGS = tuple(f for f in FLAGS if f != "-O2") + ("-O0", "--coverage")
#: s for the worker to write its counters.
LIMIT_DUMP = 10.0


def _gcov() -> str:
    found = shutil.which("gcov")
    if not found:
        raise BackendUnavailable("coverage: gcov not found (it comes with g++)")
    return found


def gcov_unavailable() -> str | None:
    """None when coverage can be measured here (g++ and gcov), else the one-line reason."""
    why = unavailable_reason(_gcov) or backend_unavailable("host")
    if why is None and "clang" in (version := get_backend("host").compiler_version).lower():
        return f"coverage: needs g++ for gcov (compiler: {version})"
    return why


def _build(backend: HostBackend, source: KernelSource, slots: Slots, folder: Path) -> Path:
    """The coverage build of ``source``'s harness unit in ``folder`` (its counters are written there)."""
    unit = folder / "unit.cpp"
    unit.write_text(harness_unit(source, slots, for_device=False) + _DUMP)
    lib = folder / "unit.so"
    build(backend.cxx, unit, lib, source, COVERAGE_FLAGS, cwd=folder)
    return lib


def _cached_build(backend: HostBackend, source: KernelSource, slots: Slots) -> Path:
    """The reference's coverage build, kept in the build cache: it is only timed (its counters are never read)."""
    unit = harness_unit(source, slots, for_device=False) + _DUMP
    key = hashlib.sha256("\0".join([unit, HOST_SHIM.read_text(), " ".join(COVERAGE_FLAGS),
                                    backend.compiler_version]).encode()).hexdigest()[:24]
    lib = cache_dir() / f"{key}.coverage.so"
    if not lib.exists():
        with scratch.folder("rlq-coverage-ref-") as folder:
            cache_dir().mkdir(parents=True, exist_ok=True)
            tmp = cache_dir() / f"{key}.{os.getpid()}.coverage.tmp"
            shutil.copyfile(_build(backend, source, slots, Path(folder)), tmp)
            os.replace(tmp, lib)
    return lib


def reference_times(backend: HostBackend, source: KernelSource, slots: Slots, controller: Controller,
                    seed: int = 0) -> dict[str, float]:
    """The reference kernel's wall time (s) per experiment group in its coverage build (``startup`` included)."""
    lib = _cached_build(backend, source, slots)
    return time_reference(backend, source, slots, controller, seed,
                          load=lambda: HostKernel(ctypes.CDLL(str(lib)), source, slots))[0]


def measure(backend: HostBackend, source: KernelSource, slots: Slots, controller: Controller,
            timeout: float | None = None, seed: int = 0, skip: frozenset[str] = frozenset(),
            reference: dict[str, float] | None = None, clock: Clock | None = None,
            progress: Callable[[str], None] | None = None, hung: dict[str, str] | None = None) -> Coverage:
    """Build with ``--coverage``, run every experiment group in a worker, read the counts back.

    Limits: ``timeout`` s per group, else derived from ``reference`` (:func:`reference_times`), within
    ``clock``'s budget. Groups in ``skip`` (those that crashed or hung in the gated build) are not run
    again, nor are the scenarios in ``hung`` (name → why: they hung in the gated build); once a group
    hangs in this build, the groups after it are not run either.
    """
    gcov = _gcov()
    if timeout is None and reference is None:
        raise ValueError("coverage.measure needs a fixed timeout or the reference's times")
    per = dict.fromkeys(("startup", *GROUPS), timeout) if timeout is not None else derive_limits(reference)
    clock = clock or Clock(None)
    skipped = [(g, "it crashed or hung in the gated build") for g in GROUPS if g in skip]
    sized = {name: len(sc) for name, (sc, _) in scenario_groups(controller, seed).items()}
    if all(g in skip or sized.get(g) == 0 for g in GROUPS):  # nothing left to run: no build to make
        return Coverage(source.origin, {}, {}, (), tuple(skipped))
    with scratch.folder("rlq-coverage-") as folder:  # the candidate's workers write their counts here
        lib = _build(backend, source, slots, folder)
        faults = []
        # confined to the build folder, where its counters are written (repro.runners.confine)
        with Worker(backend, source, slots, controller, seed, startup=per.get("startup"), cpu_time=timeout is None,
                    load=lambda: HostKernel(ctypes.CDLL(str(lib)), source, slots), scratch=folder) as worker:
            runner = GroupRunner(worker, controller, per, clock, seed, narrow=False)  # a dead worker's counts are lost
            runner.not_rerun.update(hung or {})
            for group in (g for g in GROUPS if g not in skip):
                if any(f.kind == "timeout" for f in faults):
                    skipped.append((group, f"the coverage build hung in {faults[0].group}"))
                    continue
                got, bad, left = runner.run(group)
                faults += bad
                skipped += [(g, f"{name}: {why}") for g, name, why in left]
                if progress is not None:
                    progress("coverage " + group_summary(group, bool(got), bad, per[group]))
            if clock.limit(LIMIT_DUMP) > 0:
                worker.ask("dump", clock.limit(LIMIT_DUMP))
        data = subprocess.run([gcov, "--json-format", "--branch-counts", "--branch-probabilities", "--stdout",
                               *[p.name for p in folder.glob("*.gcda")]], capture_output=True, cwd=folder)
        return replace(_parse(data.stdout, source, tuple(faults), tuple(skipped)), waits=tuple(worker.waits))


def _parse(raw: bytes, source: KernelSource, faults: tuple[Fault, ...], skipped: tuple[tuple[str, str], ...]) -> Coverage:
    origin = line_origin(source)
    lines, branches = {}, {}
    text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    for chunk in text.decode().splitlines():
        if not chunk.strip():
            continue
        for entry in json.loads(chunk).get("files", []):
            if entry["file"] != origin:
                continue
            for line in entry["lines"]:
                n = int(line["line_number"])
                lines[n] = lines.get(n, 0) + int(line["count"])
                if line.get("branches"):
                    arcs = [int(b["count"]) for b in line["branches"] if not b.get("throw")]
                    old = branches.get(n, [0] * len(arcs))
                    branches[n] = [a + b for a, b in zip(old, arcs, strict=True)] if len(old) == len(arcs) else arcs
    return Coverage(source.origin, dict(sorted(lines.items())), dict(sorted(branches.items())), faults, skipped)
