"""How long the suite's own commands take on this machine: each run as a whole process, timed from outside.

This is what ``docs/performance.md`` is made from (``python -m analysis timings``): wall-clock seconds and the
CPU seconds the process and its children used (user + system, from ``os.wait4``), per command, with the
machine they were measured on. Nothing here judges a time; the page states what was measured, where and when.

Adding a timed command: one :class:`Timed` entry in :data:`TIMED` (its argv after ``python``; ``device`` when it
needs a GPU and CuPy, so a CPU machine leaves it out and says so).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from repro.core.errors import SuiteError
from repro.core.paths import ROOT

#: The CPU suite as tox's default environment runs it (tox.ini [testenv:tests]).
CPU_TESTS = ("-m", "pytest", "-q", "-m", "not slow", "-n", "2", "--dist", "loadfile", "--benchmark-disable")
#: The GPU suite as the README's GPU command runs it.
GPU_TESTS = ("-m", "pytest", "-q", "-m", "not slow", "-n", "auto", "--dist", "loadgroup", "--benchmark-disable",
             "--require-gpu", "-o", "faulthandler_timeout=120")


@dataclass(frozen=True)
class Timed:
    """One command the page times. ``argv``: after the interpreter, ``{out}`` replaced by a scratch folder
    (so no committed file is written); ``cold``: run with an empty kernel build cache; ``device``: needs a GPU."""

    name: str
    argv: tuple[str, ...]
    what: str
    cold: bool = False
    device: bool = False


TIMED: tuple[Timed, ...] = (
    Timed("tests", CPU_TESTS, "the CPU test suite (tox's default environment)"),
    Timed("gate-cold", ("-m", "analysis", "gate", "kernels/rl_q_distill_lambda_controller.cu", "--backend", "host"),
          "the gate on the fixed kernel, empty build cache", cold=True),
    Timed("gate", ("-m", "analysis", "gate", "kernels/rl_q_distill_lambda_controller.cu", "--backend", "host"),
          "the gate on the fixed kernel, builds cached"),
    Timed("replay", ("-m", "analysis", "replay", "tests/data/sample_trace.csv", "--csv", "{out}/replay.csv"),
          "replay the 60-step sample trace through both controllers"),
    Timed("toy", ("-m", "analysis", "toy", "--controller", "fixed", "--backend", "host"),
          "the closed-loop toy, 2000 steps"),
    Timed("report", ("-m", "analysis", "report", "--backend", "host", "--out", "{out}/report"),
          "the main job on the CPU (reduced studies)"),
    Timed("gpu-tests", GPU_TESTS, "the GPU test suite (the README's GPU command)", device=True),
    Timed("report-gpu", ("-m", "analysis", "report", "--backend", "cupy", "--out", "{out}/report"),
          "the main job on the GPU (studies in full)", device=True),
)


@dataclass(frozen=True)
class Measured:
    """One command's run: wall and CPU seconds, its exit status."""

    name: str
    wall_s: float
    cpu_s: float
    status: int


def machine() -> dict[str, str | int]:
    """What the times were measured on: the processor's model, its cores, and the GPU's name where one answers."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpu = ""
    if shutil.which("nvidia-smi"):
        try:
            done = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                  text=True, timeout=30)
            gpu = done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else ""
        except (OSError, subprocess.SubprocessError, IndexError):
            gpu = ""
    return {"cpu": model, "cores": len(os.sched_getaffinity(0)), "gpu": gpu}


def has_device() -> bool:
    """Whether CuPy imports and a CUDA device answers (the device commands run only then)."""
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no cupy, no driver, no device: each raises its own type
        return False


def run_one(timed: Timed, scratch: Path, timeout_s: float, log: Path | None = None) -> Measured:
    """Run ``timed`` once in the repository as a child process; its output is kept out of the terminal, in
    ``log`` (stdout and stderr together) where given, else dropped."""
    argv = [sys.executable, *(a.replace("{out}", str(scratch)) for a in timed.argv)]
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    if timed.cold:
        env["RLQ_CACHE_DIR"] = tempfile.mkdtemp(prefix="rlq-cold-", dir=scratch)
    try:
        sink = open(log, "wb") if log is not None else subprocess.DEVNULL  # noqa: SIM115 (closed below)
    except OSError as err:
        raise SuiteError(f"cannot write {log}: {err.strerror or err}") from None
    start = time.perf_counter()
    try:
        child = subprocess.Popen(argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=sink,
                                 stderr=subprocess.STDOUT if log is not None else subprocess.DEVNULL)
    except OSError as err:
        raise SuiteError(f"cannot start {timed.name}: {err.strerror or err}") from None
    finally:
        if log is not None:
            sink.close()  # the child holds its own copy
    deadline = start + timeout_s
    while True:
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            child.kill()
            pid, status, usage = os.wait4(child.pid, 0)
            break
        time.sleep(0.05)
    child.returncode = os.waitstatus_to_exitcode(status)  # so Popen's finaliser does not wait again
    return Measured(timed.name, time.perf_counter() - start, usage.ru_utime + usage.ru_stime, child.returncode)


def measure(names: list[str] | None, timeout_s: float, progress: Callable[[str], None] = lambda line: None,
            logs: Path | None = None) -> tuple[list[Measured], list[str]]:
    """Time the commands named (all that this machine can run when ``names`` is None); return the runs and a
    line for each command left out and why. ``logs``: a folder for each command's output, ``<name>.log``."""
    known = {t.name: t for t in TIMED}
    unknown = sorted(set(names or ()) - set(known))
    if unknown:
        raise SuiteError(f"unknown command name(s) {', '.join(map(repr, unknown))} (one of: {', '.join(known)})")
    chosen = [known[n] for n in names] if names else list(TIMED)
    device = has_device()
    left = [f"{t.name}: needs a GPU and CuPy, none here" for t in chosen if t.device and not device]
    runs = []
    with tempfile.TemporaryDirectory(prefix="rlq-timings-") as scratch:
        for timed in (t for t in chosen if device or not t.device):
            progress(f"{timed.name} ({timed.what}) …")
            runs.append(run_one(timed, Path(scratch), timeout_s, logs / f"{timed.name}.log" if logs else None))
            progress(f"{timed.name}: {runs[-1].wall_s:.1f} s wall, {runs[-1].cpu_s:.1f} s CPU, exit {runs[-1].status}")
    return runs, left
