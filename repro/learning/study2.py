"""The second pre-registered learning-loop study: where the controller's KL is measured, criteria that
can fire, paired tests.

Its parameters, grid and the criteria's definitions; the study is run by
:mod:`analysis.cli.study_runs` and judged by :mod:`analysis.judge.second_study` (``python -m analysis study
--second``). Every parameter comes from ``studies/preregistered_2.toml`` (the learners' from the first study's file,
unchanged). Units: steps are environment steps (= controller calls); KL in nats; agreement is a probability.

Criteria, per run (judged evaluations: after the warm-up):

- ``relative`` (primary): agreement with ties excluded (mean of π(Q's unique greedy action) over visited states)
  at or below what π reaches on its own objective alone (the median over the ``const:0`` runs of the same grid
  point and evaluation) for at least ``consecutive`` evaluations in a row;
- ``minimum``: the minimum of that agreement over visited states below ``min_threshold`` at a judged evaluation;
- ``signature`` (the incident's whole signature): λ at or below the original's documented floor for at least
  its documented steps-to-floor consecutive steps while the KL the controller sees is below target/(the
  original's tolerance), followed (at or after that evaluation) by ``consecutive`` judged evaluations in a row
  where the relative criterion holds.

A criterion *persists* when it still holds at the last evaluation, else the run *recovered*.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from repro.core.contract import Contract
from repro.core.errors import SuiteError
from repro.core.paths import ROOT
from repro.learning.agent import KL_SITES, Learning, Measure
from repro.learning.prereg import load_prereg, read_prereg

PREREGISTERED_2 = ROOT / "studies" / "preregistered_2.toml"
CRITERIA = ("relative", "minimum", "signature")
#: Agreement sets the loop measures (ties excluded each): visited states, odd states (those the even-state KL
#: never sees, where the auxiliary reward is paid), the replay ring's entries.
SETS = {"visited": ("agree_unique", "log10_min_unique"), "odd": ("agree_odd", "log10_min_odd"),
        "replay": ("agree_replay", "log10_min_replay")}
POLICIES = ("view:1", "view:4", "linear")
#: A grid point's axes, in the grid's order (regime-major: where, then when the KL is measured).
GRID_AXES_2 = ("kl_site", "kl_before", "policy", "aux_reward")


@dataclass(frozen=True)
class Criteria:
    """The pre-registered criteria (the file has each one's sentence)."""

    warmup: int  # steps
    baseline: str  # the controller whose median agreement is the relative criterion's level (const:0)
    consecutive: int  # evaluations in a row (K)
    min_threshold: float  # probability
    signature_of: str  # contract entry whose floor, tolerance and steps-to-floor define the signature
    confidence: float
    bracket_min_agreement_gap: float


@dataclass(frozen=True)
class Prereg2:
    envs: tuple[str, ...]
    seeds: str
    controllers: tuple[str, ...]
    learning: Learning
    features: int  # d of the linear policy
    replay_capacity: int
    replay_sample: int
    grid: dict[str, tuple]
    criteria: Criteria
    incident: dict  # env, grid point and steps of the incident figure
    path: str  # repo-relative
    learning_from: str


def load_prereg2(path: Path | str = PREREGISTERED_2) -> Prereg2:
    def build(data: dict, rel: str) -> Prereg2:
        s, m = data["study"], data["measure"]
        first = load_prereg(ROOT / s["learning_from"])
        grid = {k: tuple(data["grid"][k]) for k in GRID_AXES_2}
        if not set(grid["kl_site"]) <= set(KL_SITES) or not set(grid["policy"]) <= set(POLICIES):
            raise SuiteError(f"{path}: kl_site from {list(KL_SITES)}, policy from {list(POLICIES)}")
        return Prereg2(tuple(s["envs"]), s["seeds"], tuple(s["controllers"]), first.learning, int(m["features"]),
                       int(m["replay_capacity"]), int(m["replay_sample"]), grid, Criteria(**data["criteria"]),
                       dict(data["incident"]), rel, first.path)

    return read_prereg(path, build)


def grid_points(grid: dict[str, tuple]) -> list[dict]:
    """Every combination, regime-major (kl_site, then kl_before), then policy, then aux_reward."""
    return [dict(zip(GRID_AXES_2, c, strict=True)) for c in itertools.product(*(grid[k] for k in GRID_AXES_2))]


def loop_grid(points: list[dict], features: int) -> dict[str, np.ndarray]:
    """The loop's per-point arrays (:func:`repro.learning.agent.run_loop`): the auxiliary reward on odd states."""
    def col(f, dtype=float):
        return np.asarray([f(p) for p in points], dtype)
    return {"entropy_bonus": col(lambda p: 0.0), "aux_reward": col(lambda p: p["aux_reward"]),
            "pi_view": col(lambda p: int(p["policy"].split(":")[1]) if p["policy"].startswith("view:") else 1),
            "kl_site": col(lambda p: KL_SITES[p["kl_site"]], np.int64), "kl_before": col(lambda p: p["kl_before"], np.int64),
            "aux_odd": col(lambda p: 1, np.int64),
            "features": col(lambda p: features if p["policy"] == "linear" else 0, np.int64)}


def measure_of(prereg: Prereg2, contract: Contract) -> Measure:
    """The loop-wide settings: the replay ring, and the signature's thresholds from ``contract``'s entry."""
    entry = contract.controller(prereg.criteria.signature_of)
    quiet = np.float32(prereg.learning.kl_target) / np.float32(entry.value("tolerance"))
    return Measure(prereg.replay_capacity, prereg.replay_sample, float(quiet), float(np.float32(entry.value("floor"))))


def signature_steps(prereg: Prereg2, contract: Contract) -> int:
    """The signature's window (steps): the steps to the floor ``contract``'s entry documents."""
    return int(contract.controller(prereg.criteria.signature_of).value("steps_to_floor"))


#: The reduced second study (CI): fewer steps, seeds, grid points and controllers; same parameters.
REDUCED = {"envs": ("FrozenLake-v1", "CliffWalking-v1"), "seeds": "0:4", "steps": 8000,
           "controllers": ("fixed", "original", "const:0", "const:0.001", "const:1"),
           "grid": {"kl_site": ("visited", "replay", "even"), "kl_before": (0,), "policy": ("view:1",),
                    "aux_reward": (1.0,)}}

#: An exploratory run (not pre-registered: declared after the study's result, from a review of it): the second
#: study's loop and criteria with the KL target at 1.0 instead of the learners' 0.1, on CliffWalking at the
#: incident figure's point with the KL at the visited state or on the even states only. Its JSON is committed as
#: :data:`EXPLORATORY_TARGET_RESULT`; the report shows it as exploratory, a warning, never as a confirmation.
EXPLORATORY_TARGET = {"envs": ("CliffWalking-v1",), "seeds": "1000:1100", "kl_target": 1.0,
                      "controllers": ("original", "fixed", "const:0", "const:0.05", "const:1"),
                      "grid": {"kl_site": ("visited", "even"), "kl_before": (0,), "policy": ("view:1",),
                               "aux_reward": (1.0,)}}
EXPLORATORY_TARGET_RESULT = ROOT / "studies" / "results" / "exploratory_2_target1_host.json"

#: An exploratory check of the signature criterion (not pre-registered; from the same review): the study's
#: grid, seeds and controllers below for the first evaluation window only (its first ``steps`` steps, the same
#: steps as the full runs': nothing in a run depends on its length), and whether the signature's λ side is met
#: there — the KL EMA's cold start. Committed as :data:`EXPLORATORY_COLD_START_RESULT`.
EXPLORATORY_COLD_START = {"controllers": ("original", "const:0"), "windows": 1}
EXPLORATORY_COLD_START_RESULT = ROOT / "studies" / "results" / "exploratory_2_cold_start_host.json"
#: The committed exploratory JSONs by name, and the kind :func:`repro.learning.prereg.read_result` reads each as.
EXPLORATORY_RESULTS = {"target": (EXPLORATORY_TARGET_RESULT, "second"),
                       "cold_start": (EXPLORATORY_COLD_START_RESULT, "cold_start")}
