"""Scenarios recorded from the deep loop (issue 34): the KL EMA the controller saw in PyTorch training runs.

``tests/data/deep_kl_traces.npz`` holds, per recording kernel (original, fixed) and window (``cold``: the first
2000 steps from the EMA's start at 0; ``resume``: 500 steps before to 1500 after a mid-run EMA restart with λ kept;
``steady``: the last 2000 of 20000 steps), the KL EMA per step and the λ the recording kernel wrote (float32),
written by ``python -m analysis study --deep --backend cupy --traces`` on the H200 (studies/results/
preregistered_3_cupy.log). The gate replays them for every candidate, beside the catalogue
(:func:`repro.runners.campaign.scenario_groups`): the spec model and both launch modes are held to them as to any
catalogue scenario. The primary cell's KL target (0.1) is the target.

A cold window starts from the judged controller's own seed λ; the others start from the λ the recording kernel
held at the window's first step (a state the loop reached), and replay the KL from the next step on.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

from repro.core.contract import Controller
from repro.core.paths import ROOT
from repro.runners.scenarios import Scenario

TRACES = ROOT / "tests" / "data" / "deep_kl_traces.npz"
TARGET = 0.1  # the primary cell's KL target (studies/preregistered_3.toml)
WINDOWS = {"cold": "the loop's first 600 steps, the EMA starting from 0",
           "resume": "100 steps before to 500 after a mid-run EMA restart from 0 with λ kept (a checkpoint without "
                     "the EMA)",
           "steady": "the last 500 steps of a 20000-step run"}
#: The part of each recorded window the gate replays (the file keeps 2000 steps each): the cold start's ramp, the
#: restart and its recovery, a stretch of the steady state — short, since every candidate replays them in both
#: launch modes (3200 steps for the two recording kernels, beside the catalogue's 6640).
SPANS = {"cold": slice(0, 600), "resume": slice(400, 1000), "steady": slice(-500, None)}


@lru_cache(maxsize=4)
def recorded(path: Path = TRACES) -> dict[tuple[str, str], dict[str, np.ndarray]]:
    """``{(recording kernel, window): {"kl", "lambda", "start"}}`` from the npz (empty where the file is absent)."""
    if not Path(path).is_file():
        return {}
    out: dict[tuple[str, str], dict] = {}
    with np.load(path) as z:
        for key in z.files:
            kernel, window, what = key.split("__")
            out.setdefault((kernel, window), {})[what] = z[key]
    return out


def scenarios(controller: Controller, path: Path = TRACES) -> list[Scenario]:
    """One scenario per recorded (kernel, window), for ``controller``."""
    out = []
    for (kernel, window), rec in sorted(recorded(path).items()):
        kl, lam = rec["kl"][SPANS[window]], rec["lambda"][SPANS[window]]
        if window == "cold":
            trace, lambda0 = kl, controller.value("seed_lambda")
        else:
            trace, lambda0 = kl[1:], float(lam[0])
        out.append(Scenario(f"deep_{kernel}_{window}", "deep_loop", trace, TARGET, lambda0,
                            f"KL EMA recorded in the deep loop under the {kernel} kernel: {WINDOWS[window]}",
                            {"recorded_under": kernel, "window": window,
                             "first_step": int(rec["start"]) + (SPANS[window].start or 0) % max(1, rec["kl"].size)}))
    return out
