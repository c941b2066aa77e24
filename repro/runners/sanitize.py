"""A candidate's GPU launches under compute-sanitizer (memcheck, initcheck), each report as data.

A write just past the end of a lone ISV lands in memory the process owns, so
the GPU does not fault and the results can look right; the sanitizer sees it.
:func:`sanitize` runs each launch path (per-step, looped, batched) of the
cupy backend in its own child process under each tool (all at once), with
the CuPy memory pool off (one allocation per array, so "past the end" is past
an allocation) and the kernels built with line information, and parses the
reports into :class:`SanitizerReport` rows naming the kernel line.

Each child runs :func:`child` (:data:`CHILD`, a ``python -c`` line: no command line lives in ``repro/``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from repro.backends import backend_unavailable, get_backend
from repro.core import scratch
from repro.core.contract import Slots
from repro.core.errors import BackendUnavailable, SuiteError
from repro.core.isv import new_isv
from repro.core.kernel_source import KernelSource
from repro.core.paths import ROOT
from repro.runners import confine

TOOLS = ("memcheck", "initcheck")
PATHS = ("per-step", "looped", "batched")
#: What each sanitized process runs: :func:`child` of the spec file and the launch path (its two arguments).
CHILD = "import sys; from repro.runners.sanitize import child; child(sys.argv[1], sys.argv[2])"
_SKIP = ("COMPUTE-SANITIZER", "ERROR SUMMARY", "LEAK SUMMARY", "Target application returned", "Saved host backtrace")
_AT = re.compile(r"^at\s+(?P<func>\S+?)(?:\+0x[0-9a-fA-F]+)?(?:\s+in\s+(?P<file>.+?):(?P<line>\d+))?\s*$")


@dataclass(frozen=True)
class SanitizerReport:
    """One error compute-sanitizer reported: its kind, the kernel and the source line it names."""

    tool: str
    path: str  # the launch path that ran: per-step, looped or batched
    kind: str  # e.g. "Invalid __global__ write of size 4 bytes"
    kernel: str  # the function it names ("" for host API errors)
    file: str = ""
    line: int = 0
    detail: str = ""  # thread/block and the address's relation to the nearest allocation

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}" if self.file else self.kernel or "host"


def executable() -> str | None:
    """The compute-sanitizer program, from PATH or the CUDA install."""
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and (Path(home) / "bin" / "compute-sanitizer").is_file():
            return str(Path(home) / "bin" / "compute-sanitizer")
    return None


def sanitizer_unavailable() -> str | None:
    """None when the sanitizer can run here, else why not."""
    if executable() is None:
        return "compute-sanitizer not found (install the CUDA toolkit or put it on PATH)"
    return backend_unavailable("cupy")


def parse(text: str, tool: str, path: str) -> list[SanitizerReport]:
    """The error reports in compute-sanitizer's output (lines prefixed ``=========``)."""
    found: list[dict] = []  # each report's fields as read so far
    for raw in text.splitlines():
        if not raw.startswith("========="):
            continue
        body = raw[len("========="):]
        stripped = body.strip()
        if not stripped:
            continue
        if not body.startswith("     ") and not stripped.startswith(_SKIP):  # a new report's first line
            found.append({"kind": stripped, "kernel": "", "file": "", "line": 0, "detail": []})
            continue
        if not found or stripped.startswith((*_SKIP, "Host Frame", "Device Frame")):
            continue
        current = found[-1]
        at = _AT.match(stripped)
        if at and not current["kernel"]:
            current.update(kernel=at["func"], file=at["file"] or "", line=int(at["line"] or 0))
        elif stripped.startswith(("by thread", "Access", "Address", "and is", "is ")):
            current["detail"].append(stripped)
    reports = [SanitizerReport(tool, path, r["kind"], r["kernel"], r["file"], r["line"], "; ".join(r["detail"]))
               for r in found]
    if any(r.kernel for r in reports):  # a faulting kernel makes later CUDA calls fail: consequences, not reports
        reports = [r for r in reports if r.kernel or not r.kind.startswith("Program hit")]
    return reports


def sanitize_all(source: KernelSource, slots: Slots, tools: tuple[str, ...] = TOOLS, paths: tuple[str, ...] = PATHS,
                 timeout: float = 600) -> tuple[list[SanitizerReport], list[tuple[str, str]]]:
    """Run ``source``'s launch paths under each tool: (every report, [] when all are clean; the ``(tool, path)``
    children that ran past ``timeout`` s, a hung candidate's, killed).

    Raises :class:`BackendUnavailable` without the sanitizer or a GPU, and :class:`SuiteError` when a child
    fails without a report (its last line says why)."""
    why = sanitizer_unavailable()
    if why:
        raise BackendUnavailable(why)
    with scratch.folder("rlq-sanitize-") as tmp:
        spec = Path(tmp) / "spec.json"
        spec.write_text(json.dumps({"text": source.text, "symbol": source.symbol, "origin": source.origin,
                                    "slots": asdict(slots)}))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(
            os.pathsep)}
        def start(tool: str, path: str, pad: bool) -> subprocess.Popen:
            # padding after every allocation: otherwise a write past one array can land in the next one
            # the driver placed right after it, which memcheck counts as in bounds (seen on the H200)
            cmd = [executable(), "--tool", tool, *(["--padding", "4096"] if pad else []), "--print-limit", "20",
                   sys.executable, "-c", CHILD, str(spec), path]
            return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        jobs = {(tool, path): start(tool, path, tool == "memcheck") for tool in tools for path in paths}
        reports, hung = [], []
        for (tool, path), proc in jobs.items():
            try:
                out, err = proc.communicate(timeout=timeout)
                if proc.returncode != 0 and "padding" in out + err and "COMPUTE-SANITIZER" not in out + err:
                    proc = start(tool, path, False)  # a compute-sanitizer without --padding
                    out, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                hung.append((tool, path))
                continue
            found = parse(out + "\n" + err, tool, path)
            if not found and proc.returncode != 0:
                last = (err.strip() or out.strip() or f"exit {proc.returncode}").splitlines()[-1]
                raise SuiteError(f"compute-sanitizer {tool} on the {path} path failed: {last}")
            reports += found
    return reports, hung


def child(spec_path: str, path: str) -> None:
    """Run one launch path of the spec'd kernel on the GPU, pool off, line information on."""
    from repro.backends.cupy_backend import LINE_INFO
    from repro.backends.translation_unit import NVRTC_OPTIONS

    spec = json.loads(Path(spec_path).read_text())
    fields = spec["slots"]  # JSON gives lists where Slots holds tuples (it is hashed as a cache key)
    slots = Slots(**{**fields, "state": tuple(tuple(pair) for pair in fields.get("state", ()))})
    source = KernelSource(spec["text"], spec["symbol"], spec["origin"])
    be = get_backend("cupy")
    cp = be.cp
    cp.cuda.set_allocator(None)  # one cudaMalloc per array: the sanitizer knows each array's end
    cp.cuda.set_pinned_memory_allocator(None)
    kernel = be.compile(source, slots, options=(*NVRTC_OPTIONS, LINE_INFO))
    # CUDA has started and NVRTC has run: from here on no program started, no write outside a scratch folder, no TCP
    confine.confine_alone(Path(tempfile.mkdtemp(prefix="rlq-sanitize-child-", dir=Path(spec_path).parent)))
    # KL above, below and inside the band for target 0.02, so every branch runs
    kl = np.array([0.5, 0.5, 0.001, 0.001, 0.02, 0.05, 0.007, 0.5], dtype=np.float32)
    n_runs = 4
    isv = new_isv(slots, 0.1, n_runs)
    isv[:, slots.kl], isv[:, slots.target] = np.float32(0.5), np.float32(0.02)
    if path == "per-step":
        kernel.run_per_step(isv[0], kl, np.full_like(kl, 0.02))
    elif path == "looped":
        trace = np.repeat(kl[:, None], n_runs, axis=1)
        kernel.run_looped(isv, trace, np.full_like(trace, 0.02))
    elif path == "batched":
        device = cp.asarray(isv)
        kernel.batched_step(device)
        cp.asnumpy(device)
    else:
        raise SuiteError(f"unknown launch path {path!r} (choose from {', '.join(PATHS)})")
    cp.cuda.Device().synchronize()

