"""Ctrl-C and SIGTERM mean stop: at any moment while the gate runs, exit 2 with one line, never a verdict, and no
temporary folder left behind (analysis/cli/policy.py, repro/core/scratch.py)."""

from __future__ import annotations

import collections
import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from repro.core.paths import ROOT
from tests import commands

#: How many moments each signal is tried at, and over which span after the start (s): the interpreter's start-up,
#: the imports, the reference's timing, the workers' groups, the coverage build and the verdict all fall inside.
MOMENTS, EARLIEST, LATEST = 200, 0.1, 3.0
KERNEL = ROOT / "kernels" / "rl_q_distill_lambda_controller.cu"
#: Seconds a gate may still run after a stop and end in a verdict: the stop came after its output was complete.
IGNORED = 1.0


def _stop_once(index: int, stop: signal.Signals, root: Path) -> dict:
    """One gate started in a folder of its own (its TMPDIR inside it), stopped at a seeded moment: SIGINT to its
    process group as a terminal's Ctrl-C sends it (the workers and compilers get it too), SIGTERM to the gate alone
    as ``timeout`` or a CI runner sends it."""
    moment = random.Random(index).uniform(EARLIEST, LATEST)
    here, tmp = root / f"run{index}", root / f"run{index}-tmp"
    here.mkdir()
    tmp.mkdir()
    env = commands.environment(here, TMPDIR=str(tmp))
    proc = subprocess.Popen([sys.executable, "-m", "analysis", "gate", str(KERNEL), "--backend", "host"], cwd=here,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    time.sleep(moment)
    running = proc.poll() is None
    sent = time.monotonic()
    with contextlib.suppress(ProcessLookupError):
        if stop == signal.SIGINT:
            os.killpg(proc.pid, stop)
        else:
            proc.send_signal(stop)
    out, err = proc.communicate(timeout=120)
    # a gate that went on for more than IGNORED s after the stop and gave a verdict did not stop: a stop is answered
    # at once, and a verdict's last steps (printing, the process's exit) take milliseconds
    early = running and time.monotonic() - sent > IGNORED
    return {"moment": moment, "early": early, "code": proc.returncode, "verdict": "properties hold" in out
            or "properties violated" in out, "errors": [ln for ln in err.splitlines() if "error:" in ln
                                                        or "Traceback" in ln or "Exception" in ln],
            "left": sorted(os.listdir(tmp)) + sorted(os.listdir(here))}


@pytest.mark.slow  # 200 gates a signal, one at a time: about 5 minutes each on 2 cores
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stop_at_any_moment_is_exit_2_in_one_line_with_nothing_left(stop, tmp_path):
    """One gate at a time here, so that the slow job's two workers run two at once (each gate's own workers and
    compilers beside it): the load the moments were measured under. IGNORED (1 s) bounds how long a stopped gate
    may go on to a verdict; under that load a stop ends the gate in well under it."""
    with ThreadPoolExecutor(1) as pool:
        runs = list(pool.map(lambda i: _stop_once(i, stop, tmp_path), range(MOMENTS)))
    counts = collections.Counter((r["code"], r["early"]) for r in runs)
    wrong = [r for r in runs
             if r["left"]  # a temporary folder or a file in the folder it was started from
             or r["code"] not in (0, 1, 2)
             or (r["early"] and r["code"] != 2)  # stopped while it ran, yet it went on to a verdict
             or (r["code"] == 2 and (r["verdict"] or r["errors"] != ["gate: error: interrupted"]))
             or (r["code"] in (0, 1) and (not r["verdict"] or r["errors"]))]
    assert not wrong, f"{dict(counts)}\n" + "\n".join(map(repr, wrong[:5]))
    assert sum(n for (code, _), n in counts.items() if code == 2) >= MOMENTS // 4, dict(counts)  # the test tests stops
