"""What the report measured and judged (:class:`Report`), and the numbers its summary states beyond the rows.

Pure functions of the report's runs and verdicts: no kernel runs here and nothing is formatted
(``analysis.present.summary`` does that; ``analysis.cli.report`` measures and writes).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.judge.design_measures import DesignSection
from analysis.judge.findings import Finding
from analysis.judge.peer_measures import PeerMeasures
from analysis.judge.property_checks import classify
from analysis.judge.verdict import Verdict
from repro.core import spec
from repro.core.ablation import FACTORS
from repro.core.contract import Contract
from repro.runners.evidence import Evidence

#: The report's two controllers, in its order.
CONTROLLERS = ("fixed", "original")


@dataclass(frozen=True, kw_only=True)
class Report:
    evidence: dict[str, Evidence]
    verdicts: dict[str, Verdict]
    cross: Verdict  # the original judged against the fixed contract
    trajectories: pd.DataFrame
    noise: dict[str, pd.DataFrame]
    recovery: dict[str, pd.DataFrame]
    outcomes: pd.DataFrame
    closed_loop: dict[str, dict]
    ablation: pd.DataFrame
    robustness: pd.DataFrame
    header: dict
    contract: Contract  # what the controllers were judged against (the report's --contracts file, or the tracked one)
    peers: dict[str, Verdict] = field(default_factory=dict)  # each peer against its own contract
    peer_loop: pd.DataFrame | None = None  # the toy's collapse/diverged fractions, fixed, original and peers
    study: dict | None = None  # the learning-loop study's JSON
    study2: dict | None = None  # the second learning-loop study's JSON
    study2_exploratory: dict | None = None  # its exploratory runs' JSONs by name (not pre-registered)
    measures: dict[str, PeerMeasures] = field(default_factory=dict)  # the comparison's: fixed, original, peers
    design: DesignSection | None = None  # cold starts and the design measures, every controller (issue 35)


def bad_input_outcomes(evidence: dict[str, Evidence]) -> pd.DataFrame:
    """One row per bad-value case and controller: the slot/regime column, the value, the starting λ (``start``:
    seed, or the floor, above it, mid-band, the ceiling: the guard and non-finite cases run from those too),
    λ0, what step 1 did."""
    rows = []
    for name, ev in evidence.items():
        rule = spec.Rule.of(ev.controller)
        from_starts = [r for r in ev.starts if len(r.scenario.inputs) == 1]  # one unusual input, as the catalogue's
        for r in [r for r in ev.catalogue if r.scenario.family == "bad_values"] + from_starts:
            parts = dict(r.scenario.inputs)
            if "lambda" in parts:
                column, value = f"λ (KL {parts['kl']})", parts["lambda"]
            else:
                (slot, value), = parts.items()
                column = "KL" if slot == "kl" else "target"
            rows.append({"controller": name, "case": r.scenario.name, "column": column, "value": value,
                         "start": r.scenario.params.get("start", "seed"), "lambda0": float(r.scenario.lambda0),
                         "outcome": classify(r.scenario.lambda0, r.lam[0], rule)})
    return pd.DataFrame(rows)


@dataclass(frozen=True, kw_only=True)
class Numbers:
    """The summary's numbers that are no row's: each computed from the report's measurements."""

    decay_slowness: tuple[float, float] | None  # fixed, where documented: ln ramp / −ln decay of the measured
    # rates, and steps to halve / steps to double
    floor_count_off: Finding | None  # the original's steps_to_floor row where its count is not the documented one
    noise_predicted: dict[str, list[float]]  # per controller, per σ of its noise run: 1 − P(KL in the band)
    robustness: dict[str, float]  # per controller: collapse fraction, mean over the robustness grid
    worst: pd.DataFrame  # the fixed controller's three grid points of most collapse
    toy: ToyBrief | None  # the toy's ablation in brief (None: it has no original or no whole-fix row)


@dataclass(frozen=True, kw_only=True)
class ToyBrief:
    """The toy's ablation in brief: collapse fractions (of runs) of the original, of the fixed kernel (or the
    candidate in its place), and of the combination of the fix's parts short of all four that collapses least."""

    original: float
    fixed: float
    best_variant: str
    best: float
    runs: int  # per variant


def critical_lambda(actor_lr: float, conflict: float, distill_lr: float) -> float:
    """The toy's critical λ (``repro/toy/model.py``'s docstring): about actor_lr·conflict / (2·distill_lr), the λ
    below which π's logit for Q's best action falls without bound. Units: λ."""
    return actor_lr * conflict / (2 * distill_lr)


def toy_brief(ab: pd.DataFrame) -> ToyBrief | None:
    """:class:`ToyBrief` of the ablation table ``ab`` (a row per variant, the fix's parts as bool columns; a
    candidate's row has None there)."""
    candidate = ab[list(FACTORS)].isna().all(axis=1)
    parts = ab[list(FACTORS)].sum(axis=1)  # how many of the fix's four parts a variant has
    if not ((parts[~candidate] == 0).any() and (parts == len(FACTORS)).any()):
        return None
    best = ab[(parts > 0) & (parts < len(FACTORS))].sort_values("collapse_fraction", kind="stable").iloc[0]
    return ToyBrief(original=ab.loc[(parts == 0) & ~candidate, "collapse_fraction"].iloc[0],
                    fixed=ab.loc[candidate if candidate.any() else parts == len(FACTORS), "collapse_fraction"].iloc[0],
                    best_variant=best["variant"], best=best["collapse_fraction"], runs=int(ab["runs"].iloc[0]))


#: σ of ln(KL / target) at which figure 4 draws the predicted fraction (a smooth curve beside the measured σ).
CURVE_SIGMAS = np.linspace(0, 1.5, 200)


def _moved_fraction(report: Report, name: str, sigmas) -> list[float]:
    """Controller ``name``: 1 − P(KL in its band) under log-normal noise of each σ (the closed form)."""
    tol = report.evidence[name].controller.value("tolerance")
    return [1 - spec.in_band_probability(tol, s) for s in sigmas]


def noise_curves(report: Report) -> tuple[np.ndarray, dict[str, list[float]]]:
    """(σ, per controller the closed form at each σ of :data:`CURVE_SIGMAS`): figure 4's predicted curves."""
    return CURVE_SIGMAS, {n: _moved_fraction(report, n, CURVE_SIGMAS) for n in CONTROLLERS}


def numbers(report: Report) -> Numbers:
    """:class:`Numbers` of ``report``."""
    v, fixed = report.verdicts, report.evidence["fixed"].controller
    slowness = None
    if fixed.has("decay_slowness"):
        ramp, decay = v["fixed"].finding("ramp").measured, v["fixed"].finding("decay").measured
        m = report.measures["fixed"]
        slowness = (spec.decay_to_ramp_log_ratio(ramp, decay), m.steps_to_halve / m.steps_to_double)
    f = v["original"].finding("steps_to_floor")
    off = f if f is not None and f.measured != report.evidence["original"].controller["steps_to_floor"].value else None
    predicted = {n: _moved_fraction(report, n, report.noise[n].sigma) for n in CONTROLLERS}
    rb = report.robustness
    return Numbers(decay_slowness=slowness, floor_count_off=off, noise_predicted=predicted,
                   robustness=dict(rb.groupby("controller").collapse_fraction.mean().items()),
                   worst=rb[rb.controller == "fixed"].nlargest(3, "collapse_fraction"), toy=toy_brief(report.ablation))
