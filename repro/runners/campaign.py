"""Everything the gate and the report measure on one kernel, gathered in one pass.

This module runs kernels (it never judges): the catalogue in both launch
modes, the guard and non-finite cases, the dead-zone probes (band rules), the
vanishing run (rules with no floor), the onset bisection and the
single-thread probe. ``analysis.judge.property_checks`` turns the
evidence into verdicts. The experiments come in named groups so that
:mod:`repro.runners.isolation` can run each in a child process and, when one crashes
or hangs, re-run its scenarios one by one to find the culprit.
"""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np

from repro.backends.base import CompiledKernel
from repro.core.contract import Controller, Slots
from repro.runners import loop_traces
from repro.runners.evidence import GROUPS, Evidence, Fault
from repro.runners.probes import onsets, single_thread
from repro.runners.runner import Run, run_scenarios
from repro.runners.scenarios import (
    REF_TARGET,
    Scenario,
    case,
    catalogue,
    dead_zone_probes,
    guard_cases,
    onset_targets,
    range_probes,
    start_cases,
    vanishing,
)


def scenario_groups(controller: Controller, seed: int = 0) -> dict[str, tuple[list[Scenario], str]]:
    """Experiment groups made of scenarios: name → (scenarios, launch mode). Built once per controller object
    and seed (every group, the assembly and each worker ask again; the scenarios are read-only)."""
    held = _GROUPS.get((id(controller), seed))
    if held is None or held[0] is not controller:
        held = _GROUPS[(id(controller), seed)] = (controller, _scenario_groups(controller, seed))
        while len(_GROUPS) > 32:
            _GROUPS.pop(next(iter(_GROUPS)))
    return held[1]


#: Groups run per (process, kernel source): what the ``state`` group's read comes after.
_SERVED: dict[tuple[int, str], int] = {}

#: scenario_groups' answers by (id of the controller, seed), with the controller kept so that the id stays its own.
_GROUPS: dict[tuple[int, int], tuple[Controller, dict]] = {}


def _scenario_groups(controller: Controller, seed: int) -> dict[str, tuple[list[Scenario], str]]:
    scenarios = catalogue(controller, seed=seed) + loop_traces.scenarios(controller)  # + the deep loop's recordings
    return {
        "catalogue": (scenarios, "looped"),
        "per_step": (scenarios, "per_step"),
        "guards": ([case(controller, c) for c in guard_cases()], "looped"),
        "nonfinite": ([case(controller, c, steps=1) for c in controller.nonfinite], "looped"),
        "dead_zone": (dead_zone_probes(controller) if controller.is_band else [], "looped"),
        "vanishing": ([vanishing(controller)] if controller.bound("floor") is None else [], "looped"),
        "starts": (start_cases(controller), "looped"),
        "ranges": (range_probes(controller), "looped"),
    }


def run_group(kernel: CompiledKernel, controller: Controller, group: str, only: int | tuple[int, ...] | None = None,
              seed: int = 0):
    """The raw result of one group (or of the scenarios ``only`` of a scenario group, in that order), small
    enough to pickle.

    Scenario groups give ``[(λ, stray), …]``; ``onsets`` a dict of arrays; ``threads`` a :class:`ThreadProbe`;
    ``state`` the build's writable data against its load image (:class:`repro.backends.host_state.HostState`, or
    ``False`` where the backend cannot read it), with the number of groups this process ran on the kernel before
    (it runs last, after every other group in the same worker; a worker started after a hang ran none: its read
    shows nothing, and the row says so). It runs nothing itself: a scenario that hangs or crashes is not met again.
    """
    served = (os.getpid(), kernel.source.sha256)  # a forked worker is a process of its own: it starts at none
    if group == "state":
        found = kernel.outside_state()
        return False if found is None else replace(found, runs=_SERVED.get(served, 0))
    _SERVED[served] = _SERVED.get(served, 0) + 1
    if group == "onsets":
        return onsets(kernel, onset_targets(controller), controller.value("seed_lambda"))
    if group == "threads":
        return single_thread(kernel, controller.value("seed_lambda"), REF_TARGET)
    scenarios, mode = scenario_groups(controller, seed)[group]
    if only is not None:
        scenarios = [scenarios[i] for i in ((only,) if isinstance(only, int) else only)]
    return [(r.lam, r.stray) for r in run_scenarios(kernel, scenarios, mode)] if scenarios else []


def assemble(controller: Controller, slots: Slots, results: dict, faults: list[Fault] = (), seed: int = 0,
             **more) -> Evidence:
    """Evidence from group results; a scenario group's result may be partial: ``{index: (λ, stray)}``.

    ``more``: the other :class:`Evidence` fields (limits, static, coverage, …)."""
    groups = scenario_groups(controller, seed)
    runs = {}
    for name, (scenarios, _) in groups.items():
        got = results.get(name, {})
        got = dict(enumerate(got)) if isinstance(got, list) else got
        runs[name] = [Run(sc, *got[i]) for i, sc in enumerate(scenarios) if i in got]
    targets = onset_targets(controller)
    missing = {"ramp": np.full(targets.shape, np.nan, np.float32), "decay": np.full(targets.shape, np.nan, np.float32)}
    return Evidence(
        controller=controller,
        **runs,
        probe_targets=targets,
        onsets=results.get("onsets", missing),
        lambda_slot=slots.lambda_,
        threads=results.get("threads"),
        state=results.get("state") or None,
        faults=list(faults),
        isv_len=slots.isv_len,
        groups_run=frozenset(g for g in GROUPS if g in results and (results[g] not in ({}, [])
                                                                    or not groups.get(g, ([0],))[0])),
        **more,
    )


def collect(kernel: CompiledKernel, controller: Controller, seed: int = 0) -> Evidence:
    """Run every experiment group in this process, unprotected (:func:`repro.runners.gather.gather` runs them
    in children, under limits, and gathers the rest of the evidence)."""
    results = {g: run_group(kernel, controller, g, seed=seed) for g in GROUPS}
    return assemble(controller, kernel.slots, results, seed=seed)
