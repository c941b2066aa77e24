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
import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from repro.backends.host import FLAGS, HostBackend, HostKernel
from repro.backends.translation_unit import HOST_INCLUDE, HOST_SHIM, compile_error, harness_unit
from repro.core.contract import Controller, Slots
from repro.core.errors import BackendUnavailable
from repro.core.kernel_source import KernelSource
from repro.runners.campaign import GROUPS

_DUMP = '\nextern "C" void __gcov_dump(void);\nextern "C" void rlq_gcov_dump(void) { __gcov_dump(); }\n'
COVERAGE_FLAGS = tuple(f for f in FLAGS if f != "-O2") + ("-O0", "--coverage")


@dataclass(frozen=True)
class Coverage:
    """Execution counts per line of the candidate, and per branch arc (``line → [count per arc]``)."""

    file: str
    lines: dict[int, int]
    branches: dict[int, list[int]]
    faults: list[str] = field(default_factory=list)  # experiments that crashed or hung in the coverage build

    @property
    def lines_hit(self) -> int:
        return sum(1 for c in self.lines.values() if c > 0)

    @property
    def branches_total(self) -> int:
        return sum(len(arcs) for arcs in self.branches.values())

    @property
    def branches_hit(self) -> int:
        return sum(1 for arcs in self.branches.values() for c in arcs if c > 0)

    @property
    def uncovered_lines(self) -> list[int]:
        return sorted(n for n, c in self.lines.items() if c == 0)

    @property
    def partial_branch_lines(self) -> list[int]:
        """Lines with a branch arc that never ran (the line itself may have run)."""
        return sorted(n for n, arcs in self.branches.items() if any(c == 0 for c in arcs))

    @property
    def complete(self) -> bool:
        return not self.uncovered_lines and not self.partial_branch_lines

    def summary(self) -> str:
        """``14/14 lines, 8/8 branches`` plus what was missed."""
        text = f"{self.lines_hit}/{len(self.lines)} lines, {self.branches_hit}/{self.branches_total} branches"
        if self.uncovered_lines:
            text += f"; lines never run: {', '.join(map(str, self.uncovered_lines))}"
        if self.partial_branch_lines:
            text += f"; branches never taken on line(s) {', '.join(map(str, self.partial_branch_lines))}"
        return text

    def as_dict(self) -> dict:
        return {"file": self.file, "lines": self.lines, "branches": self.branches, "faults": self.faults,
                "summary": self.summary()}


def _gcov() -> str:
    found = shutil.which("gcov")
    if not found:
        raise BackendUnavailable("coverage: gcov not found (it comes with g++)")
    return found


def unavailable_reason() -> str | None:
    """None when coverage can be measured here (g++ and gcov), else the one-line reason."""
    try:
        _gcov()
        backend = HostBackend()
    except BackendUnavailable as err:
        return str(err)
    if "clang" in backend.compiler_version.lower():
        return f"coverage: needs g++ for gcov (compiler: {backend.compiler_version})"
    return None


def measure(backend: HostBackend, source: KernelSource, slots: Slots, controller: Controller,
            timeout: float, seed: int = 0, skip: frozenset[str] = frozenset()) -> Coverage:
    """Build with ``--coverage``, run every experiment group in a worker, read the counts back.

    Groups in ``skip`` (those that crashed or hung in the gated build) are not run again.
    """
    from repro.runners.isolation import Worker  # isolation imports campaign; keep this module importable alone

    gcov = _gcov()
    folder = Path(tempfile.mkdtemp(prefix="rlq-coverage-"))
    try:
        unit = folder / "unit.cpp"
        unit.write_text(harness_unit(source, slots, for_device=False) + _DUMP)
        lib = folder / "unit.so"
        cmd = [backend.cxx, *COVERAGE_FLAGS, "-I", str(HOST_INCLUDE), "-include", str(HOST_SHIM), "-x", "c++",
               str(unit), "-o", str(lib)]
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=folder)
        if done.returncode != 0:
            raise compile_error(source.origin, Path(backend.cxx).name, done.stderr)
        worker = Worker(backend, source, slots, controller, seed,
                        load=lambda: HostKernel(ctypes.CDLL(str(lib)), source, slots))
        faults = []
        try:
            faults += [f"{group}: not run (it crashed or hung in the gated build)" for group in GROUPS if group in skip]
            for group in (g for g in GROUPS if g not in skip):
                answer = worker.ask((group, None), timeout)
                if not answer.ok:
                    faults.append(f"{group}: {answer.fault[0] if answer.fault else answer.value}")
            worker.ask("dump", timeout)
        finally:
            worker.stop()
        data = subprocess.run([gcov, "--json-format", "--branch-counts", "--branch-probabilities", "--stdout",
                               *[p.name for p in folder.glob("*.gcda")]], capture_output=True, cwd=folder)
        return _parse(data.stdout, source, faults)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _parse(raw: bytes, source: KernelSource, faults: list[str]) -> Coverage:
    origin = source.origin.replace("\\", "/").replace('"', "'")
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
    return Coverage(source.origin, dict(sorted(lines.items())), dict(sorted(branches.items())), faults)
