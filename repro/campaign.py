"""Everything the gate and the report measure on one kernel, gathered in one pass.

This module runs kernels (it never judges): the catalogue in both launch
modes, the guard and non-finite cases, the dead-zone probes and the onset
bisection. ``analysis.properties`` turns the evidence into verdicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from repro.backends.base import CompiledKernel
from repro.contract import Controller
from repro.probes import onsets
from repro.runner import Run, run_scenarios
from repro.scenarios import PROBE_TARGETS, case, catalogue, dead_zone_probes, guard_cases, vanishing


@dataclass(frozen=True)
class Evidence:
    """Runs of one kernel under one controller's contract (all λ float32)."""

    controller: Controller
    catalogue: list[Run]  # looped harness
    per_step: list[Run]  # the same scenarios, one launch per step
    guards: list[Run]
    nonfinite: list[Run]
    dead_zone: list[Run]
    probe_targets: np.ndarray
    onsets: dict[str, np.ndarray]  # ramp/decay onset KL per probe target
    lambda_slot: int  # the one ISV slot the controller may write
    vanishing: list[Run] = field(default_factory=list)  # aligned until λ settles, then high KL (rules with no floor)

    def run(self, name: str) -> Run:
        """The catalogue run of scenario ``name``."""
        return next(r for r in self.catalogue if r.scenario.name == name)


def collect(kernel: CompiledKernel, controller: Controller, seed: int = 0) -> Evidence:
    """Run every experiment the properties need (about 0.3 s on the host backend)."""
    scenarios = catalogue(controller, seed=seed)
    targets = np.asarray(PROBE_TARGETS, dtype=np.float32)
    return Evidence(
        controller=controller,
        catalogue=run_scenarios(kernel, scenarios, "looped"),
        per_step=run_scenarios(kernel, scenarios, "per_step"),
        guards=run_scenarios(kernel, [case(controller, c) for c in guard_cases()]),
        nonfinite=run_scenarios(kernel, [case(controller, c, steps=1) for c in controller.nonfinite]),
        dead_zone=run_scenarios(kernel, dead_zone_probes(controller)) if controller.is_band else [],
        probe_targets=targets,
        onsets=onsets(kernel, targets, controller.value("seed_lambda")),
        lambda_slot=kernel.slots.lambda_,
        vanishing=run_scenarios(kernel, [vanishing(controller)]) if controller.bound("floor") is None else [],
    )
