"""The suite's commands as the tests drive them: in a process of their own, as a user types them, or in this
process through the entry's own dispatch."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys

from analysis.cli.policy import dispatch
from repro.core.paths import ROOT


def environment(started_from, **more: str) -> dict[str, str]:
    """This process's environment as a shell started in ``started_from`` gives it ($PWD, which the hostile
    candidates write to; tox passes none), the suite importable from there, its own path entries kept (the GPU
    machine's site folder holds pyseccomp)."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PWD": str(started_from), "PYTHONPATH": path, **more}


def run(command: str, *args, cwd=ROOT, env: dict[str, str] | None = None, timeout: float = 300
        ) -> subprocess.CompletedProcess:
    """``python -m analysis COMMAND ARGS`` (``pytest``: ``python -m pytest ARGS``) as a user types it in ``cwd``
    (``env``: :func:`environment` of ``cwd`` unless given; ``timeout`` in seconds)."""
    prefix = ["-m", "pytest"] if command == "pytest" else ["-m", "analysis", command]
    return subprocess.run([sys.executable, *prefix, *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=environment(cwd) if env is None else env)


def python(code: str, *args, cwd=ROOT, env: dict[str, str] | None = None, timeout: float = 120
           ) -> subprocess.CompletedProcess:
    """``python -c CODE ARGS`` in a fresh interpreter in ``cwd`` (``env``: this process's environment unless given;
    ``timeout`` in seconds): what a test checks where this process's own state (threads, a running forkserver,
    signal handlers) would say nothing."""
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


def cli(command: str, *args) -> subprocess.CompletedProcess:
    """``python -m analysis COMMAND ARGS`` in this process: the entry's own dispatch and error policy, without
    a process start-up (what only a real process shows, :func:`run` checks)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = dispatch([command, *map(str, args)])
    return subprocess.CompletedProcess([command, *args], code, out.getvalue(), err.getvalue())
