"""The peer comparison's measures: what each controller's runs show, for the report's table and figures.

Pure functions of :class:`analysis.judge.verdict.Verdict` objects (fixed, original and each peer judged
against its own contract) and of the closed-loop toy's frame: no kernel runs here and nothing is formatted
(``analysis.present.peers_section`` does that). Steps are 1-based launches (``repro.runners.runner``), λ is
the float32 coefficient the kernel stores, KL is read in multiples of the target.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.judge.findings import Finding
from analysis.judge.property_checks import classify, first_step, vanishing_summary
from analysis.judge.verdict import Verdict
from repro.core import spec
from repro.core.contract import Controller
from repro.core.f32 import F32, bits
from repro.runners.evidence import Evidence
from repro.runners.runner import Run

#: The σ of the catalogue's log-normal KL scenarios the table reads (``lognormal_sigma{σ}``).
NOISE_SIGMAS = (0.25, 0.5, 1.0)


@dataclass(frozen=True, kw_only=True)
class PeerMeasures:
    """One controller's row of the comparison, measured. "Unfloored": a rule with no floor (it has the
    ``vanishing`` run: aligned KL until λ settles, then as many steps of high KL)."""

    controller: Controller  # the contract entry: labels only (declared bounds, guard, release)
    failed: tuple[str, ...]  # keys of the own-contract rows that fail (empty: every row holds)
    steps_to_double: int | None  # steps of KL = 100·target from the seed λ (None: never, or not measured)
    steps_to_halve: int | None  # steps of KL = target/100
    lowest: float  # λ: the least over aligned KL (the aligned run and the vanishing run)
    highest: float  # λ: the greatest over the diverged run (high KL)
    high_steps: int  # steps of the diverged run
    band: tuple[float, float] | None  # ×target: (greatest KL that lowers λ, least that raises it), medians over
    # the probe targets; None where an onset never happens (``no_onset``)
    band_width: float | None  # band[1] / band[0] (×)
    no_onset: tuple[str, ...]  # "ramp", "decay": onsets no positive KL triggers
    unfloored: bool
    aligned_steps: int  # steps of the aligned run
    floor_step: int | None  # floored rules: the first step λ sits on the floor under aligned KL (None: never)
    first_subnormal: int | None  # unfloored: the first step λ is subnormal under aligned KL
    first_zero: int | None  # unfloored: the first step λ is exactly 0
    stuck_at: float | None  # unfloored: λ at the end of the aligned stretch
    stuck_from: int | None  # unfloored: the first step λ holds ``stuck_at``'s bits
    recovery: int | None  # steps of high KL back to the seed λ or above (floored: from the floor); None: never
    recovery_window: int  # steps of high KL that had to do it
    final: float | None  # unfloored: λ at the end of the high stretch
    held_under_noise: tuple[float, ...]  # share of steps on which λ kept its bits, per NOISE_SIGMAS
    nonfinite_cases: int  # non-finite input cases run
    nonfinite_nan: int  # of them, those that leave λ NaN
    nonfinite_moved: int  # of them, those that change λ
    at_zero_kl: str | None  # what one step of KL = 0 does (``classify``); None where it did not run
    guards: Finding  # the guards row
    aligned: np.ndarray  # λ under sustained aligned KL (float32), step 0 the seed λ; unfloored rules continue
    # into the vanishing run's aligned stretch where it is longer (so that λ reaching 0 shows)


def _count(v: Verdict, key: str) -> int | None:
    f = v.finding(key)
    x = None if f is None else f.measured
    return None if x is None or np.isnan(x) else int(x)


def _band(ev: Evidence) -> tuple[tuple[float, float] | None, tuple[str, ...]]:
    ratios = {k: ev.onsets[k].astype(np.float64) / ev.probe_targets for k in ("ramp", "decay")}
    never = tuple(k for k, r in ratios.items() if not np.isfinite(r).any())
    if never:
        return None, never
    return (float(np.nanmedian(ratios["decay"])), float(np.nanmedian(ratios["ramp"]))), ()


def _held(r: Run) -> float:
    prev = np.concatenate([[r.scenario.lambda0], r.lam[:-1]]).astype(F32)
    return float(np.mean(bits(prev) == bits(r.lam)))


def _aligned_trace(ev: Evidence) -> np.ndarray:
    r = ev.run("aligned")
    lam = r.lam
    n = int(ev.vanishing[0].scenario.params["aligned_steps"]) if ev.vanishing else 0
    if n > lam.size:
        lam = ev.vanishing[0].lam[:n]
    return np.concatenate([[r.scenario.lambda0], lam]).astype(F32)


def measures_of(v: Verdict) -> PeerMeasures:
    """The comparison's measures of one verdict's evidence."""
    ev, ctrl = v.evidence, v.evidence.controller
    aligned, diverged = ev.run("aligned"), ev.run("diverged")
    low = np.concatenate([r.lam for r in (aligned, *ev.vanishing)])
    band, never = _band(ev)
    rule = spec.Rule.of(ctrl)
    at_zero = next((r for r in ev.guards if r.scenario.name == "kl=0"), None)
    common = {
        "controller": ctrl, "failed": tuple(f.key for f in v.failed),
        "steps_to_double": _count(v, "steps_to_double"), "steps_to_halve": _count(v, "steps_to_halve"),
        "lowest": float(low.min()), "highest": float(diverged.lam.max()), "high_steps": diverged.scenario.steps,
        "band": band, "band_width": None if band is None else band[1] / band[0], "no_onset": never,
        "unfloored": bool(ev.vanishing), "aligned_steps": aligned.scenario.steps,
        "held_under_noise": tuple(_held(ev.run(f"lognormal_sigma{s}")) for s in NOISE_SIGMAS),
        "nonfinite_cases": len(ev.nonfinite), "nonfinite_nan": sum(bool(np.isnan(r.lam[0])) for r in ev.nonfinite),
        # a NaN λ left NaN is not moved, whatever the payload: arithmetic on it returns the GPU's canonical NaN
        # but the CPU's input NaN (the count would differ by backend)
        "nonfinite_moved": sum(classify(r.scenario.lambda0, r.lam[0], rule) != "unchanged"
                               and not (np.isnan(r.scenario.lambda0) and np.isnan(r.lam[0])) for r in ev.nonfinite),
        "at_zero_kl": None if at_zero is None else classify(at_zero.scenario.lambda0, at_zero.lam[0], rule),
        "guards": v.finding("guards"), "aligned": _aligned_trace(ev),
    }
    if ev.vanishing:
        r = ev.vanishing[0]
        s = vanishing_summary(r)
        n = int(r.scenario.params["aligned_steps"])
        return PeerMeasures(**common, floor_step=None, first_subnormal=s["first_subnormal"], first_zero=s["first_zero"],
                            stuck_at=float(s["settled"]), stuck_from=first_step(bits(r.lam[:n]) == bits(s["settled"])),
                            recovery=s["recovered"], recovery_window=r.scenario.steps - n, final=float(s["final"]))
    back = ev.run("ramp_from_floor")  # starts at the floor: where aligned KL leaves a floored rule
    return PeerMeasures(**common, floor_step=first_step(bits(aligned.lam) == bits(F32(ctrl.bound("floor")))),
                        first_subnormal=None, first_zero=None, stuck_at=None, stuck_from=None,
                        recovery=first_step(back.lam >= F32(ctrl.value("seed_lambda"))),
                        recovery_window=back.scenario.steps, final=None)


def measure_all(verdicts: dict[str, Verdict]) -> dict[str, PeerMeasures]:
    """:func:`measures_of` every verdict, in the caller's order (fixed, original, then the peers)."""
    return {name: measures_of(v) for name, v in verdicts.items()}


def toy_outcomes(names: Iterable[str], collapse: pd.DataFrame) -> dict[str, tuple[float, float] | None]:
    """Per controller: the closed-loop toy's collapsed and diverged fractions, means over its grid points
    (``collapse``: ``controller``, ``collapse_fraction``, ``diverged_fraction`` per grid point); None where
    the controller is not in the frame."""
    out = {}
    for name in names:
        hit = collapse[collapse.controller == name]
        out[name] = (hit.collapse_fraction.mean(), hit.diverged_fraction.mean()) if len(hit) else None
    return out
