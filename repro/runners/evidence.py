"""What the gate and the report measure on one kernel, as typed data (no kernel runs here).

:class:`Evidence` is what :func:`repro.runners.gather.gather` returns and what
every judgement (``analysis.judge``) reads. The experiment groups
(:data:`GROUPS`) are named here so that the gathering (isolation, coverage)
and the records of the properties (which groups each one needs) share one list.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from repro.backends.device_view import DeviceViews
from repro.backends.host_state import HostState
from repro.backends.ptx import StaticReport
from repro.core.contract import Controller
from repro.runners.inference import Behaviour
from repro.runners.probes import ThreadProbe
from repro.runners.runner import Run
from repro.runners.sanitize import SanitizerReport

#: The experiment groups that run scenarios (each a list of :class:`Run` in :class:`Evidence`, by that name).
SCENARIO_GROUPS = ("catalogue", "per_step", "guards", "nonfinite", "dead_zone", "vanishing", "starts", "ranges")
#: Every experiment group, in the order they run (``state`` last: it reads what the runs before it left behind).
GROUPS = (*SCENARIO_GROUPS, "onsets", "threads", "state")
#: Evidence that is not an experiment group: the rule inferred, the PTX rules, the coverage build, the sanitizer,
#: the candidate preprocessed as the device compilers and the host build see it.
SOURCES = ("inference", "static", "coverage", "sanitizer", "device_view")


class MissingEvidence(KeyError):
    """An experiment whose result is missing because the candidate crashed or hung in it."""


@dataclass(frozen=True)
class Fault:
    """The candidate crashed (a signal), hung (no answer within the limit), or was not run (the budget was spent)."""

    group: str  # experiment group (see GROUPS), or inference/sanitizer
    scenario: str  # the scenario that triggers it, "" when not narrowed down
    kind: str  # "crash", "timeout" or "budget"
    detail: str  # the signal, or the limit

    def describe(self) -> str:
        where = f"{self.group}: {self.scenario}" if self.scenario else self.group
        return f"{where}: {self.kind} ({self.detail})"


@dataclass(frozen=True)
class Coverage:
    """Execution counts per line of the candidate, and per branch arc (``line → [count per arc]``), in the
    coverage build (host g++ ``-O0 --coverage``)."""

    file: str
    lines: dict[int, int]
    branches: dict[int, list[int]]
    faults: tuple[Fault, ...] = ()  # groups that crashed or hung in the coverage build
    skipped: tuple[tuple[str, str], ...] = ()  # (group, why) not run in the coverage build
    waits: tuple[str, ...] = ()  # as Limits.waits, in the coverage build

    @property
    def lines_hit(self) -> int:
        return sum(1 for c in self.lines.values() if c > 0)

    @property
    def branches_total(self) -> int:
        return sum(len(arcs) for arcs in self.branches.values())

    @property
    def branches_hit(self) -> int:
        return sum(1 for arcs in self.branches.values() for c in arcs if c > 0)

    @property
    def uncovered_lines(self) -> list[int]:
        return sorted(n for n, c in self.lines.items() if c == 0)

    @property
    def partial_branch_lines(self) -> list[int]:
        """Lines with a branch arc that never ran (the line itself may have run)."""
        return sorted(n for n, arcs in self.branches.items() if any(c == 0 for c in arcs))

    @property
    def complete(self) -> bool:
        return not self.uncovered_lines and not self.partial_branch_lines

    @property
    def ran_in_full(self) -> bool:
        """Every experiment group ran to its end in the coverage build (else the counts are of a part)."""
        return not self.faults and not self.skipped

    def missed(self) -> str:
        """What never ran: ``lines never run: 12; branches never taken on line(s) 11`` ("" when complete)."""
        parts = []
        if self.uncovered_lines:
            parts.append(f"lines never run: {', '.join(map(str, self.uncovered_lines))}")
        if self.partial_branch_lines:
            parts.append(f"branches never taken on line(s) {', '.join(map(str, self.partial_branch_lines))}")
        return "; ".join(parts)

    def summary(self) -> str:
        """``14/14 lines, 8/8 branches`` plus what was missed."""
        text = f"{self.lines_hit}/{len(self.lines)} lines, {self.branches_hit}/{self.branches_total} branches"
        return text + (f"; {self.missed()}" if self.missed() else "")

    def fault_lines(self) -> list[str]:
        """What did not run in the coverage build, one line per group."""
        return [f"{g}: not run ({why})" for g, why in self.skipped] + [f"{f.group}: {f.kind}" for f in self.faults]

    def as_dict(self) -> dict:
        return {"file": self.file, "lines": self.lines, "branches": self.branches, "faults": self.fault_lines(),
                "summary": self.summary()}


@dataclass(frozen=True)
class Limits:
    """The wall-clock limits the candidate ran under (s).

    ``per_group``: group → limit; ``fixed``: the ``--timeout`` override (every group), else None;
    ``budget``: the whole gathering's budget (None: none); ``reference``: group → the reference kernel's
    seconds for it in the same run (empty with an override).
    """

    per_group: dict[str, float]
    fixed: float | None = None
    budget: float | None = None
    reference: dict[str, float] = field(default_factory=dict)
    factor: float = 0.0  # limit = max(floor, factor × reference)
    floor: float = 0.0
    stall_cap: float = 0.0  # > 0: the limits count CPU time, wall-clock time capped at stall_cap × them; 0: wall-clock
    waits: tuple[str, ...] = ()  # requests answered past their limit in wall-clock time (it counts CPU time)


@dataclass(frozen=True)
class Evidence:
    """Runs of one kernel under one controller's contract (all λ float32), and what else was measured."""

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
    starts: list[Run] = field(default_factory=list)  # the guard and non-finite cases from other starting λ
    ranges: list[Run] = field(default_factory=list)  # targets 1e-8 to 1e3, extreme KL, λ on its boundaries
    state: HostState | None = None  # the build's own writable data after the runs (None: not measurable here)
    device_views: DeviceViews | None = None  # the candidate's tokens per preprocessor view, where a C++ compiler is
    threads: ThreadProbe | None = None  # None when the probe did not finish
    faults: list[Fault] = field(default_factory=list)
    isv_len: int = 0  # floats in the ISV: a stray index outside [0, isv_len) is a write outside it
    static: StaticReport | None = None  # where NVRTC ran
    groups_run: frozenset[str] = frozenset(GROUPS)  # groups with at least one result (see GROUPS)
    coverage: Coverage | None = None  # where gcov ran
    behaviour: Behaviour | None = None  # the rule the kernel behaves as, where measured
    sanitizer: tuple[SanitizerReport, ...] | None = None  # compute-sanitizer's reports, where it ran
    limits: Limits | None = None  # None: run in this process, unprotected
    notes: tuple[str, ...] = ()  # what was not measured and why (a missing tool), CPU/GPU caveats
    unavailable: frozenset[str] = frozenset()  # SOURCES asked for that this machine cannot measure
    skipped: tuple[tuple[str, str, str], ...] = ()  # (group, scenario, why) not run: it hung in an earlier group
    backend: str = ""  # the backend of the gated build (host, cupy)
    device: str = ""  # the machine it ran on, as the backend describes it (CPU model, GPU name)

    def scenario_runs(self) -> list[Run]:
        """Every run of every scenario group (:data:`SCENARIO_GROUPS`), in that order."""
        return [r for group in SCENARIO_GROUPS for r in getattr(self, group)]

    def run(self, name: str) -> Run:
        """The catalogue run of scenario ``name`` (:class:`MissingEvidence` when it did not finish)."""
        found = next((r for r in self.catalogue if r.scenario.name == name), None)
        if found is None:
            raise MissingEvidence(name)
        return found
