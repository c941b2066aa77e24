"""The first learning-loop study's judgement: collapse verdicts per run, their exact intervals, the brackets.

Pure functions of the loop's traces (:class:`repro.learning.agent.Traces`) and the pre-registered criteria
(:class:`repro.learning.prereg.Collapse`); :mod:`analysis.cli.study_runs` runs the loop and calls them. Units: steps
are environment steps; agreement is a probability.
"""

from __future__ import annotations

import json
import math

import numpy as np

from analysis.judge.study_stats import exact_interval, undefined_ok
from repro.core.errors import SuiteError
from repro.core.json_values import finite_or_none
from repro.learning.agent import Traces
from repro.learning.env import Tables
from repro.learning.prereg import GRID_AXES, Collapse


def verdicts(traces: Traces, n_actions: int, c: Collapse) -> dict[str, np.ndarray]:
    """Per run: collapsed (primary), deep (min-over-states criterion), whether each persists, and diverged.

    A run *diverges* when λ or π's logits stop being finite at some evaluation (a rule without a ceiling can
    drive λ to inf, and inf·0 to NaN); its agreement is then undefined and counts as no collapse from there on.
    """
    judged = traces.steps > c.warmup
    low_mean = traces.agree_mean < c.mean_fraction_of_uniform / n_actions
    low_min = traces.log10_agree_min < math.log10(c.min_threshold)
    return {"collapsed": low_mean[judged].any(axis=0), "collapsed_at_end": low_mean[-1],
            "deep": low_min[judged].any(axis=0), "deep_at_end": low_min[-1],
            "diverged": (~np.isfinite(traces.agree_mean) | ~np.isfinite(traces.lam)).any(axis=0),
            "lambda_zero": (traces.lam == 0).any(axis=0)}


def _quantiles(a: np.ndarray) -> dict[str, list]:
    # inf − inf inside the interpolation of a diverged λ, or an evaluation where every run is undefined: NaN, null
    with undefined_ok():
        q = np.nanquantile(a, (0.25, 0.5, 0.75), axis=1) if np.isfinite(a).any() else np.full((3, a.shape[0]), np.nan)
    return {name: [finite_or_none(x) for x in row] for name, row in zip(("q25", "median", "q75"), q, strict=True)}


def env_block(tables: Tables, names: list[str], seed_lambdas: list[float], points: dict[str, np.ndarray],
              traces: Traces, n_seeds: int, c: Collapse) -> dict:
    """One environment's block of the study's JSON: every controller's verdicts, intervals and quantiles over
    steps. Runs are controller-major, then grid point, then seed (``n_seeds`` of them)."""
    P, K = len(points["pi_view"]), n_seeds
    v = verdicts(traces, tables.n_actions, c)
    out = {"n_states": tables.n_states, "n_actions": tables.n_actions, "max_episode_steps": tables.max_episode_steps,
           "reward_range": tables.reward_range, "eval_steps": traces.steps.tolist(),
           "grid_points": [{k: float(points[k][i]) for k in GRID_AXES} for i in range(P)], "controllers": {}}
    for g, name in enumerate(names):
        s = slice(g * P * K, (g + 1) * P * K)
        entry = {"seed_lambda": seed_lambdas[g], "runs": P * K}
        for crit, key in (("collapsed", ""), ("deep", "deep_")):
            hit = v[crit][s]
            lo, hi = exact_interval(hit.sum(), hit.size, c.confidence)
            entry[f"{key}collapse_fraction"], entry[f"{key}ci_low"], entry[f"{key}ci_high"] = float(hit.mean()), lo, hi
            entry[f"{key}persisting"] = int((hit & v[f"{crit}_at_end"][s]).sum())
            entry[f"{key}recovered"] = int((hit & ~v[f"{crit}_at_end"][s]).sum())
            entry[f"{key}fraction_per_grid_point"] = hit.reshape(P, K).mean(axis=1).round(6).tolist()
        for crit in ("diverged", "lambda_zero"):
            hit = v[crit][s]
            entry[f"{crit}_fraction"] = float(hit.mean())
            entry[f"{crit}_ci_low"], entry[f"{crit}_ci_high"] = exact_interval(hit.sum(), hit.size, c.confidence)
        entry["verdicts"] = {k: v[k][s].astype(int).tolist() for k in ("collapsed", "deep", "diverged")}
        with undefined_ok():  # all-NaN: every run diverged there
            final = np.nanmedian(traces.agree_mean[-1, s].reshape(P, K), axis=1).round(6)
        entry["final_agree_mean_per_grid_point"] = [finite_or_none(x) for x in final]
        entry["over_steps"] = {"agree_mean": _quantiles(traces.agree_mean[:, s]),
                               "log10_agree_min": _quantiles(traces.log10_agree_min[:, s]),
                               "lambda": _quantiles(traces.lam[:, s].astype(np.float64)),
                               "episode_return": _quantiles(traces.episode_return[:, s])}
        out["controllers"][name] = entry
    out["brackets"] = brackets(out, c)
    return out


def brackets(block: dict, c: Collapse) -> list[dict] | None:
    """Per grid point: is the constant-λ bracket (λ = 0.001 against λ = 1) wide enough to tell controllers apart?"""
    ctrl = block["controllers"]
    if not {"const:0.001", "const:1"} <= set(ctrl):
        return None
    lo, hi = ctrl["const:0.001"], ctrl["const:1"]
    K = lo["runs"] // len(block["grid_points"])
    rows = []
    for i, point in enumerate(block["grid_points"]):
        row = dict(point)
        for key in ("", "deep_"):
            ka, kb = (round(x[f"{key}fraction_per_grid_point"][i] * K) for x in (lo, hi))
            (a0, a1), (b0, b1) = exact_interval(ka, K, c.confidence), exact_interval(kb, K, c.confidence)
            row[f"{key}collapse_lambda_0.001"], row[f"{key}collapse_lambda_1"] = ka / K, kb / K
            row[f"{key}disjoint"] = bool(a1 < b0 or b1 < a0)
        a, b = lo["final_agree_mean_per_grid_point"][i], hi["final_agree_mean_per_grid_point"][i]
        gap = b - a if a is not None and b is not None else 0.0
        row["agree_gap"] = round(gap, 6)
        row["wide"] = bool(row["disjoint"] or row["deep_disjoint"] or abs(gap) >= c.bracket_min_agreement_gap)
        rows.append(row)
    return rows


def merge(results: list[dict]) -> dict:
    """One study's JSON from runs that split its environments or controllers (runs are independent of the
    batch they share: each run's random numbers depend on its seed only), same parameters and seeds."""
    out = json.loads(json.dumps(results[0]))
    for other in results[1:]:
        if other["parameters"] != out["parameters"] or other["seeds"] != out["seeds"]:
            raise SuiteError("merge: the studies differ in parameters or seeds")
        for env, block in other["envs"].items():
            if env in out["envs"]:
                out["envs"][env]["controllers"].update(block["controllers"])
            else:
                out["envs"][env] = block
        out["controllers"] += [n for n in other["controllers"] if n not in out["controllers"]]
    for block in out["envs"].values():
        block["brackets"] = brackets(block, Collapse(**out["parameters"]["collapse"]))
    return out
