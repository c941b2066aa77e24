"""The second learning-loop study's judgement: the three criteria per run, intervals, paired tests, brackets,
the calibration's trip rates.

Pure functions of the loop's traces (:class:`repro.learning.agent.Traces`) and the pre-registered criteria
(:class:`repro.learning.study2.Criteria`, whose module has each criterion's definition); :mod:`analysis.cli.study_runs`
runs the loop and calls them. Units: steps are environment steps; KL in nats; agreement is a probability.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from analysis.judge.study_stats import interval, mcnemar, seed_sign_test, undefined_ok
from repro.core import libm
from repro.core.ablation import FACTORS
from repro.core.json_values import finite_or_none
from repro.learning.agent import Traces
from repro.learning.env import Tables
from repro.learning.study2 import CRITERIA, GRID_AXES_2, SETS, Criteria

#: The calibration's rule as its JSON records it (the committed calibration has these line breaks).
CALIBRATION_RULE = ("for each candidate K, how often λ = 1 and λ = 0.001 trip\n    the relative criterion at the grid "
                    "points where distillation has an effect to lose (λ = 1's median final\n    agreement above λ = 0's "
                    "by at least the bracket's gap)")


def pairs(names: list[str]) -> list[dict]:
    """The paired comparisons the study makes among ``names``: original vs fixed, each fix alone vs none, each fix
    removed vs all (``a`` is the one expected to collapse more)."""
    out = [{"a": "original", "b": "fixed", "kind": "original vs fixed"}]
    out += [{"a": "original", "b": f"ablation:{f}", "kind": f"{f} alone vs none", "fix": f} for f in FACTORS]
    out += [{"a": "ablation:" + "+".join(g for g in FACTORS if g != f), "b": "fixed", "kind": f"all but {f} vs all",
             "fix": f} for f in FACTORS]
    return [p for p in out if p["a"] in names and p["b"] in names]


def regimes(points: list[dict]) -> list[dict]:
    """The KL axis's regimes (where × when) with the indices of their grid points."""
    out: dict[tuple, list[int]] = {}
    for i, p in enumerate(points):
        out.setdefault((p["kl_site"], p["kl_before"]), []).append(i)
    return [{"kl_site": k[0], "kl_before": k[1], "points": v} for k, v in out.items()]


def _runs_of(mask: np.ndarray, k: int) -> np.ndarray:
    """``[E, N]`` → ``[E, N]``: True at e when mask holds at e and the k − 1 evaluations after it."""
    out = np.zeros_like(mask)
    if k <= mask.shape[0]:
        out[:mask.shape[0] - k + 1] = np.lib.stride_tricks.sliding_window_view(mask, k, axis=0).all(axis=-1)
    return out


def baseline_level(traces: Traces, base: slice, P: int, K: int) -> np.ndarray:
    """``[E, P]``: the median over the baseline's runs of agreement (ties excluded) per evaluation and point."""
    a = traces.agree_unique[:, base].reshape(-1, P, K)
    with undefined_ok():
        return np.nanmedian(a, axis=2)


def verdicts(traces: Traces, level: np.ndarray, P: int, K: int, c: Criteria, quiet_steps: int) -> dict[str, np.ndarray]:
    """Per run (``[N]``, runs group-major, then point, then seed): each criterion, whether it holds at the last
    evaluation, and divergence. ``level``: :func:`baseline_level`; ``quiet_steps``: the signature's steps."""
    E, N = traces.agree_unique.shape
    judged = (traces.steps > c.warmup)[:, None]
    lev = np.tile(np.repeat(level, K, axis=1), (1, N // (P * K)))  # [E, N]
    low = (traces.agree_unique <= lev) & np.isfinite(traces.agree_unique)
    started = _runs_of(low & judged, c.consecutive)
    relative = started.any(axis=0)
    deep = (traces.log10_min_unique < math.log10(c.min_threshold)) & judged
    streak = np.maximum.accumulate(traces.quiet_floor_run >= quiet_steps, axis=0)  # the λ side happened by e
    signature = (started & streak).any(axis=0)
    return {"relative": relative, "relative_at_end": low[-1], "minimum": deep.any(axis=0),
            "minimum_at_end": deep[-1], "signature": signature, "signature_at_end": low[-1] & streak[-1],
            "lambda_side": streak[-1],
            "diverged": (~np.isfinite(traces.agree_mean) | ~np.isfinite(traces.lam)).any(axis=0)}


def _median_series(a: np.ndarray) -> list:
    with undefined_ok():
        m = np.nanmedian(a, axis=1) if a.size else np.array([])
    return [finite_or_none(round(x, 9)) for x in m]


def env_block(tables: Tables, names: list[str], seed_lambdas: list[float], points: list[dict], traces: Traces,
              n_seeds: int, c: Criteria, quiet_steps: int) -> dict:
    """One environment's block of the second study's JSON: every controller's criteria with intervals (overall,
    per point, per regime), the lowest agreements, the median series, the paired tests and the brackets. Runs are
    controller-major, then point, then seed (``n_seeds``); ``names`` holds the baseline."""
    P, K = len(points), n_seeds
    g_of = {n: slice(g * P * K, (g + 1) * P * K) for g, n in enumerate(names)}
    level = baseline_level(traces, g_of[c.baseline], P, K)
    v = verdicts(traces, level, P, K, c, quiet_steps)
    regs = regimes(points)
    judged = traces.steps > c.warmup
    out = {"n_states": tables.n_states, "n_actions": tables.n_actions, "eval_steps": traces.steps.tolist(),
           "grid_points": points, "regimes": regs,
           "baseline_median_agreement": [[finite_or_none(x) for x in row] for row in level.T.round(9)],
           "controllers": {}, "pairs": []}
    for g, name in enumerate(names):
        s = g_of[name]
        entry = {"seed_lambda": seed_lambdas[g], "runs": P * K}
        for crit in CRITERIA:
            hit = v[crit][s]
            e = interval(hit, c.confidence)
            at_end = v[f"{crit}_at_end"][s]
            e["persisting"], e["recovered"] = int((hit & at_end).sum()), int((hit & ~at_end).sum())
            by_point = hit.reshape(P, K)
            e["per_point"] = [interval(by_point[i], c.confidence) for i in range(P)]
            e["per_regime"] = [interval(by_point[r["points"]].ravel(), c.confidence) for r in regs]
            e["verdicts"] = hit.astype(int).tolist()
            entry[crit] = e
        entry["lambda_side"] = interval(v["lambda_side"][s], c.confidence)
        entry["diverged"] = interval(v["diverged"][s], c.confidence)
        # the lowest agreement each set reached at a judged evaluation (log10), per regime: the median over runs
        # and the fraction of runs that reached 1e-20 or below (the incident's q_pi_agree was 1e-22)
        # and the lowest mean over the set (what a metric averaged over a batch of those states would read)
        lowest = {}
        for set_name, (mean_key, log_min) in SETS.items():
            m = getattr(traces, log_min)[judged][:, s].min(axis=0).reshape(P, K)
            with undefined_ok():
                mm = libm.log10(np.nanmin(getattr(traces, mean_key)[judged][:, s], axis=0)).reshape(P, K)
            rows = []
            for r in regs:
                x, y = m[r["points"]].ravel(), mm[r["points"]].ravel()
                fin, fin_y = x[np.isfinite(x)], y[np.isfinite(y)]
                rows.append({"median": finite_or_none(np.median(fin)) if fin.size else None,
                             "lowest": finite_or_none(fin.min()) if fin.size else None,
                             "at_most_1e-20": float((x <= -20).mean()),
                             "mean_median": finite_or_none(np.median(fin_y)) if fin_y.size else None,
                             "mean_lowest": finite_or_none(fin_y.min()) if fin_y.size else None})
            lowest[set_name] = rows
        entry["lowest_log10_agreement"] = lowest
        entry["final_unique_states_median_per_point"] = np.median(traces.n_unique[-1, s].reshape(P, K), axis=1).tolist()
        final = traces.agree_unique[-1, s].reshape(P, K)
        with undefined_ok():
            entry["final_agreement_median_per_point"] = [finite_or_none(x) for x in np.nanmedian(final, axis=1).round(6)]
        if not name.startswith("ablation:"):
            series = {}
            for key in ("lam", "kl_ema", "agree_unique", "agree_odd", "agree_replay", "log10_min_unique"):
                a = getattr(traces, key)[:, s].astype(np.float64).reshape(-1, P, K)
                series[key] = [_median_series(a[:, r["points"]].reshape(a.shape[0], -1)) for r in regs]
            entry["median_over_steps_per_regime"] = series
        out["controllers"][name] = entry
    for pr in pairs(names):
        row = dict(pr)
        for crit in CRITERIA:
            a, b = (v[crit][g_of[pr[x]]].reshape(P, K) for x in ("a", "b"))
            row[crit] = {"per_regime": [{**mcnemar(a[r["points"]].ravel(), b[r["points"]].ravel()),
                                         "seeds": seed_sign_test(a[r["points"]], b[r["points"]])} for r in regs],
                         "per_point": [mcnemar(a[i], b[i]) for i in range(P)],
                         "pooled": mcnemar(a.ravel(), b.ravel())}
        out["pairs"].append(row)
    out["brackets"] = brackets(out, c)
    return out


def brackets(block: dict, c: Criteria) -> list[dict] | None:
    """Per grid point: does λ = 1 do better than λ = 0.001 (with its sign: a negative gap is λ = 1 worse)?
    Wide enough when λ = 0.001's relative-collapse interval lies wholly above λ = 1's, or λ = 1's median final
    agreement exceeds λ = 0.001's by at least the pre-registered gap."""
    ctrl = block["controllers"]
    if not {"const:0.001", "const:1"} <= set(ctrl):
        return None
    lo, hi = ctrl["const:0.001"], ctrl["const:1"]
    rows = []
    for i, point in enumerate(block["grid_points"]):
        a, b = lo["relative"]["per_point"][i], hi["relative"]["per_point"][i]
        fa, fb = lo["final_agreement_median_per_point"][i], hi["final_agreement_median_per_point"][i]
        gap = fb - fa if fa is not None and fb is not None else None
        separated = a["ci_low"] > b["ci_high"]
        rows.append({**point, "relative_lambda_0.001": a["fraction"], "relative_lambda_1": b["fraction"],
                     "separated": bool(separated), "agree_gap": None if gap is None else round(gap, 6),
                     "wide": bool(separated or (gap is not None and gap >= c.bracket_min_agreement_gap))})
    return rows


def incident_seed(result: dict, incident: dict, seeds: np.ndarray) -> int:
    """The first seed whose original run shows the whole signature at the incident figure's grid point
    (``incident``: the pre-registration's env and point); the first seed where none does."""
    block = result["envs"][incident["env"]]
    want = {k: incident[k] for k in GRID_AXES_2}
    i = next((j for j, p in enumerate(block["grid_points"]) if p == want), None)
    if i is None:
        return int(seeds[0])
    K = len(seeds)
    hits = block["controllers"]["original"]["signature"]["verdicts"][i * K:(i + 1) * K]
    return int(seeds[hits.index(1)]) if 1 in hits else int(seeds[0])


def cold_start_block(names: list[str], points: list[dict], traces: Traces, n_seeds: int, quiet_steps: int) -> dict:
    """One task's block of the cold-start check: per controller (runs controller-major as in :func:`env_block`),
    the fraction of runs whose signature λ side (``quiet_steps`` steps in a row at the floor with a quiet KL) is
    met within the first evaluation window, overall and per regime, with intervals (95 %)."""
    P, K = len(points), n_seeds
    side = traces.quiet_floor_run[0] >= quiet_steps  # [N] the first window's longest quiet run at the floor
    regs = regimes(points)
    out = {"window_steps": int(traces.steps[0]), "regimes": regs, "controllers": {}}
    for g, name in enumerate(names):
        hit = side[g * P * K:(g + 1) * P * K].reshape(P, K)
        out["controllers"][name] = {"lambda_side_first_window": {
            **interval(hit.ravel(), 0.95), "per_regime": [interval(hit[r["points"]].ravel(), 0.95) for r in regs]}}
    return out


def calibration_block(tables: Tables, names: list[str], points: list[dict], traces: Traces, n_seeds: int,
                      c: Criteria, quiet_steps: int, candidates) -> tuple[dict, dict]:
    """One environment's block of the calibration (:data:`CALIBRATION_RULE`; ``names`` are the constant-λ
    controllers λ = 0, 0.001, 1 in that order, runs controller-major as in :func:`env_block`), and each candidate
    K's per-run trips at the effective points (``{K: {name: bool array}}``, for :func:`calibration_pooled`)."""
    P, K = len(points), n_seeds
    level = baseline_level(traces, slice(0, P * K), P, K)
    with undefined_ok():
        final = np.nanmedian(traces.agree_unique[-1].reshape(len(names), P, K), axis=2)  # [controller, point]
    effective = final[2] - final[0] >= c.bracket_min_agreement_gap
    block = {"n_states": tables.n_states, "unique_states_final_median": float(np.median(traces.n_unique[-1])),
             "points": [{**pt, "final_agreement": {n: finite_or_none(final[g, i]) for g, n in enumerate(names)},
                         "effective": bool(effective[i])} for i, pt in enumerate(points)], "rates": {}}
    keep = np.repeat(effective, K)
    trips: dict = {k: {} for k in candidates}
    for k in candidates:
        v = verdicts(traces, level, P, K, replace(c, consecutive=k), quiet_steps)
        block["rates"][str(k)] = {}
        for g, n in enumerate(names):
            hit = v["relative"][g * P * K:(g + 1) * P * K]
            trips[k][n] = hit[keep]
            block["rates"][str(k)][n] = {"all_points": float(hit.mean()),
                                         "effective_points": float(hit[keep].mean()) if keep.any() else None}
    return block, trips


def calibration_pooled(trips: list[dict], false_alarm: float) -> tuple[dict, int | None]:
    """Each candidate K's trip rate per controller pooled over the tasks' effective points (``trips``: each
    task's from :func:`calibration_block`), and the K chosen: the smallest with λ = 1's rate at most
    ``false_alarm`` (None: none is)."""
    pooled = {str(k): {n: float(np.concatenate([t[k][n] for t in trips]).mean()) for n in trips[0][k]}
              for k in trips[0]}
    ok = [k for k in trips[0] if pooled[str(k)]["const:1"] <= false_alarm]
    return pooled, (ok[0] if ok else None)
