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
    runs = [_run(slots, sc, lam[: sc.steps, i].copy(), isv[i : i + 1],
                 [o for o in outside if (o < 0 and i == 0) or (o >= 0 and i == last)])
            for i, sc in enumerate(scenarios)]
    return _neighbours_writes(runs, outside, slots.isv_len)


def _neighbours_writes(runs: list[Run], outside: list[int], isv_len: int) -> list[Run]:
    """The looped harness lays the runs' ISVs end to end, so a write outside a run's ISV lands in its
    neighbour's: ``isv[-3]`` of run i+1 is slot 509 of run i, ``isv[600]`` of run i−1 is slot 88 of run i. Only
    the first run's ``isv[-3]`` and the last run's ``isv[600]`` reach the canaries (``outside``). A slot written
    in a row that the same offset explains is the neighbour's write: it is moved to the run that made it, as the
    offset it has there. A row whose own run writes that slot is told apart by the end rows: the last row has
    no run after it to write its slot 509 (the first none before it to write its slot 88), so the slot is moved
    only where the end row shows it unwritten."""
    if len(runs) < 2 or not outside:
        return runs
    after = {isv_len + o for o in outside if o < 0} - set(runs[-1].stray)  # slot s of row i: run i+1 wrote s − isv_len
    before = {o - isv_len for o in outside if o >= isv_len} - set(runs[0].stray)  # run i−1 wrote s + isv_len
    stray = [set(r.stray) for r in runs]
    for i, r in enumerate(runs):
        for slot in r.stray:
            if slot in after and i + 1 < len(runs):
                stray[i].discard(slot)
                stray[i + 1].add(slot - isv_len)
            elif slot in before and i > 0:
                stray[i].discard(slot)
                stray[i - 1].add(slot + isv_len)
    return [Run(r.scenario, r.lam, sorted(s)) for r, s in zip(runs, stray, strict=True)]


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
