"""Feeding scenarios through a compiled kernel, and the tidy trajectory they produce.

Step numbering: step ``t`` (1-based) is the t-th kernel launch; its row holds
the KL and target fed before that launch and λ after it. λ before step 1 is
the scenario's ``lambda0`` (column ``lambda0``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from repro.backends.base import CompiledKernel
from repro.core.contract import Slots
from repro.core.f32 import columns
from repro.core.isv import PAD, new_window, outside_writes, stray_writes, window_rows
from repro.runners.scenarios import Scenario

if TYPE_CHECKING:
    import pandas as pd

LAUNCH_MODES = ("looped", "per_step")


@dataclass(frozen=True)
class Run:
    """One scenario's result: λ after each step (float32 ``[T]``) and stray ISV writes."""

    scenario: Scenario
    lam: np.ndarray
    stray: list[int]  # slots other than λ's whose bits changed (empty when isolated); < 0 or ≥ isv_len: outside the ISV


def run_scenarios(kernel: CompiledKernel, scenarios: list[Scenario], mode: str = "looped") -> list[Run]:
    """Run every scenario; ``looped`` makes one harness call, ``per_step`` one launch per step."""
    slots = kernel.slots
    if mode == "per_step":
        runs = []
        for sc in scenarios:
            lam, window = kernel.run_per_step(new_window(slots, sc.lambda0), sc.kl, sc.target, pad=PAD)
            runs.append(_run(slots, sc, lam, window_rows(slots, window), outside_writes(slots, window)))
        return runs
    if mode != "looped":
        raise ValueError(f"mode must be one of {LAUNCH_MODES}")
    # Scenarios shorter than the longest repeat their last values; those steps are dropped.
    kl, target = columns([sc.kl for sc in scenarios]), columns([sc.target for sc in scenarios])
    lam, window = kernel.run_looped(new_window(slots, [sc.lambda0 for sc in scenarios]), kl, target, pad=PAD)
    isv, outside = window_rows(slots, window), outside_writes(slots, window)
    last = len(scenarios) - 1
    return [_run(slots, sc, lam[: sc.steps, i].copy(), isv[i : i + 1],
                 [o for o in outside if (o < 0 and i == 0) or (o >= 0 and i == last)])
            for i, sc in enumerate(scenarios)]


def _run(slots: Slots, sc: Scenario, lam: np.ndarray, isv: np.ndarray, outside: list[int] = ()) -> Run:
    stray = stray_writes(slots, isv, sc.kl[-1:], sc.target[-1:])
    return Run(sc, lam, sorted({slot for _, slot in stray} | set(outside)))


def to_frame(runs: list[Run], controller: str, backend: str) -> pd.DataFrame:
    """Tidy trajectories: ``controller, backend, scenario, step, kl, kl_target, lambda`` + parameters."""
    import pandas as pd  # here: the gate never tabulates, and pandas is 0.4 s of its start-up

    frames = []
    for r in runs:
        sc = r.scenario
        frame = pd.DataFrame({"controller": controller, "backend": backend, "scenario": sc.name, "family": sc.family,
                              "step": np.arange(1, sc.steps + 1), "kl": sc.kl, "kl_target": sc.target, "lambda": r.lam,
                              "lambda0": sc.lambda0})
        for key, value in sc.params.items():
            frame[f"param_{key}"] = value
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)
