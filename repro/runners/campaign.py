"""Everything the gate and the report measure on one kernel, gathered in one pass.

This module runs kernels (it never judges): the catalogue in both launch
modes, the guard and non-finite cases, the dead-zone probes (band rules), the
vanishing run (rules with no floor), the onset bisection and the
single-thread probe. ``analysis.judge.properties`` turns the
evidence into verdicts. The experiments come in named groups so that
:mod:`repro.runners.isolation` can run each in a child process and, when one crashes
or hangs, re-run its scenarios one by one to find the culprit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from repro.backends.base import CompiledKernel
from repro.core.contract import Controller, Slots
from repro.runners.probes import ThreadProbe, onsets, single_thread
from repro.runners.runner import Run, run_scenarios
from repro.runners.scenarios import (
    PROBE_TARGETS,
    REF_TARGET,
    Scenario,
    case,
    catalogue,
    dead_zone_probes,
    guard_cases,
    vanishing,
)

#: Every experiment group, in the order they run.
GROUPS = ("catalogue", "per_step", "guards", "nonfinite", "dead_zone", "vanishing", "onsets", "threads")


class MissingEvidence(KeyError):
    """An experiment whose result is missing because the candidate crashed or hung in it."""


@dataclass(frozen=True)
class Fault:
    """The candidate crashed (a signal) or hung (no answer within the time limit) in an experiment."""

    group: str  # experiment group (see GROUPS)
    scenario: str  # the scenario that triggers it, "" when not narrowed down
    kind: str  # "crash" or "timeout"
    detail: str  # the signal, or the limit

    def describe(self) -> str:
        where = f"{self.group}: {self.scenario}" if self.scenario else self.group
        return f"{where}: {self.kind} ({self.detail})"


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
    threads: ThreadProbe | None = None  # None when the probe did not finish
    faults: list[Fault] = field(default_factory=list)
    timeout: float | None = None  # s per experiment group, when run isolated
    isv_len: int = 0  # floats in the ISV: a stray index outside [0, isv_len) is a write outside it
    static: object | None = None  # repro.backends.ptx.StaticReport, where NVRTC ran
    groups_run: frozenset[str] = frozenset(GROUPS)  # groups with at least one result (see GROUPS)
    coverage: object | None = None  # repro.runners.coverage.Coverage, where gcov ran
    behaviour: object | None = None  # repro.runners.inference.Behaviour: the rule the kernel behaves as, where measured

    def run(self, name: str) -> Run:
        """The catalogue run of scenario ``name`` (:class:`MissingEvidence` when it did not finish)."""
        found = next((r for r in self.catalogue if r.scenario.name == name), None)
        if found is None:
            raise MissingEvidence(name)
        return found


def scenario_groups(controller: Controller, seed: int = 0) -> dict[str, tuple[list[Scenario], str]]:
    """Experiment groups made of scenarios: name → (scenarios, launch mode)."""
    scenarios = catalogue(controller, seed=seed)
    return {
        "catalogue": (scenarios, "looped"),
        "per_step": (scenarios, "per_step"),
        "guards": ([case(controller, c) for c in guard_cases()], "looped"),
        "nonfinite": ([case(controller, c, steps=1) for c in controller.nonfinite], "looped"),
        "dead_zone": (dead_zone_probes(controller) if controller.is_band else [], "looped"),
        "vanishing": ([vanishing(controller)] if controller.bound("floor") is None else [], "looped"),
    }




def run_group(kernel: CompiledKernel, controller: Controller, group: str, only: int | None = None, seed: int = 0):
    """The raw result of one group (or of scenario ``only`` of a scenario group), small enough to pickle.

    Scenario groups give ``[(λ, stray), …]``; ``onsets`` a dict of arrays; ``threads`` a :class:`ThreadProbe`.
    """
    if group == "onsets":
        return onsets(kernel, np.asarray(PROBE_TARGETS, dtype=np.float32), controller.value("seed_lambda"))
    if group == "threads":
        return single_thread(kernel, controller.value("seed_lambda"), REF_TARGET)
    scenarios, mode = scenario_groups(controller, seed)[group]
    if only is not None:
        scenarios = scenarios[only : only + 1]
    return [(r.lam, r.stray) for r in run_scenarios(kernel, scenarios, mode)] if scenarios else []


def assemble(controller: Controller, slots: Slots, results: dict, faults: list[Fault] = (),
             timeout: float | None = None, seed: int = 0) -> Evidence:
    """Evidence from group results; a scenario group's result may be partial: ``{index: (λ, stray)}``."""
    groups = scenario_groups(controller, seed)
    runs = {}
    for name, (scenarios, _) in groups.items():
        got = results.get(name, {})
        got = dict(enumerate(got)) if isinstance(got, list) else got
        runs[name] = [Run(sc, *got[i]) for i, sc in enumerate(scenarios) if i in got]
    targets = np.asarray(PROBE_TARGETS, dtype=np.float32)
    missing = {"ramp": np.full(targets.shape, np.nan, np.float32), "decay": np.full(targets.shape, np.nan, np.float32)}
    return Evidence(
        controller=controller,
        catalogue=runs["catalogue"],
        per_step=runs["per_step"],
        guards=runs["guards"],
        nonfinite=runs["nonfinite"],
        dead_zone=runs["dead_zone"],
        vanishing=runs["vanishing"],
        probe_targets=targets,
        onsets=results.get("onsets", missing),
        lambda_slot=slots.lambda_,
        threads=results.get("threads"),
        faults=list(faults),
        timeout=timeout,
        isv_len=slots.isv_len,
        groups_run=frozenset(g for g in GROUPS if g in results and (results[g] not in ({}, [])
                                                                    or not groups.get(g, ([0],))[0])),
    )


def collect(kernel: CompiledKernel, controller: Controller, seed: int = 0) -> Evidence:
    """Run every experiment the properties need, in this process (:mod:`repro.runners.isolation` runs them in children)."""
    results = {g: run_group(kernel, controller, g, seed=seed) for g in GROUPS}
    return assemble(controller, kernel.slots, results, seed=seed)
