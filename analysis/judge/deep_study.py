"""Judgement of the third study (pure: arrays in, numbers out): the primary endpoint per run, the paired exact
McNemar test per cell, Holm's correction over the declared cells, intervals, the secondary endpoints and the rule
that picks the incident figure's run (exact McNemar power: :mod:`analysis.judge.confirm_study`); and the study re-read in
the five verdict words (:func:`reread`, exploratory: after the fact).

Inputs are the per-run evaluation series ``[n_evals, R]`` that :mod:`repro.learning.deep.study` gathers.
"""

from __future__ import annotations

import numpy as np

from analysis.judge.study_stats import exact_interval
from analysis.judge.verdict_words import verdict
from repro.core.endpoint import runs_meeting

# scipy.stats is imported inside each function that uses it: it takes about a second to import, which every
# process importing this module (the suite collects it on each worker) would pay.


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact binomial interval for k of n (the first study's :func:`exact_interval`, scipy's root finder); NaN for
    no runs."""
    return (float("nan"), float("nan")) if n == 0 else exact_interval(k, n, confidence)


def mcnemar_exact(a: np.ndarray, b: np.ndarray) -> dict:
    """Paired exact McNemar: ``a`` and ``b`` boolean per seed (same order). Discordant counts and the two-sided
    exact binomial p on them (1 when there are none)."""
    from scipy import stats
    a, b = np.asarray(a, bool), np.asarray(b, bool)
    only_a, only_b = int((a & ~b).sum()), int((~a & b).sum())
    d = only_a + only_b
    p = float(stats.binomtest(only_a, d, 0.5).pvalue) if d else 1.0
    return {"only_first": only_a, "only_second": only_b, "p": p}


def holm(pvalues: list[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values (same order)."""
    m = len(pvalues)
    order = np.argsort(pvalues)
    adjusted = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return [float(x) for x in adjusted]


def wilcoxon_paired(x: np.ndarray, y: np.ndarray) -> dict:
    """Paired Wilcoxon signed-rank (two-sided) on x − y over pairs where both are finite."""
    from scipy import stats
    keep = np.isfinite(x) & np.isfinite(y)
    diff = np.asarray(x)[keep] - np.asarray(y)[keep]
    if not np.any(diff != 0):
        return {"n": int(keep.sum()), "median_difference": 0.0 if keep.any() else float("nan"), "p": 1.0}
    res = stats.wilcoxon(diff)
    return {"n": int(keep.sum()), "median_difference": float(np.median(diff)), "p": float(res.pvalue)}


def noninferiority(fixed: np.ndarray, original: np.ndarray, margin: float, alpha: float) -> dict:
    """Return: fixed is non-inferior when the one-sided (1 − α) lower bound of the paired mean difference
    (fixed − original, t interval) lies above −margin."""
    from scipy import stats
    keep = np.isfinite(fixed) & np.isfinite(original)
    diff = np.asarray(fixed)[keep] - np.asarray(original)[keep]
    n = diff.size
    if n < 2:
        return {"n": int(n), "mean_difference": float("nan"), "lower_bound": float("nan"), "noninferior": False}
    lower = diff.mean() - stats.t.ppf(1 - alpha, n - 1) * diff.std(ddof=1) / np.sqrt(n)
    return {"n": int(n), "mean_difference": float(diff.mean()), "lower_bound": float(lower),
            "margin": margin, "noninferior": bool(lower > -margin)}


def incident_seed(orig: np.ndarray, fixed: np.ndarray) -> tuple[int, str]:
    """The incident figure's seed (pre-registered rule): the lowest seed where the original collapses and the fixed
    kernel does not; else the lowest where the original collapses; else seed 0."""
    for mask, why in ((orig & ~fixed, "original collapses, fixed does not"), (orig, "original collapses (fixed too)")):
        hits = np.flatnonzero(mask)
        if hits.size:
            return int(hits[0]), why
    return 0, "no run of the original collapses: seed 0"


def _per_run(loop: dict, threshold: float, consecutive: int) -> dict[str, np.ndarray]:
    """Per run of one loop: the primary endpoint and the secondary values."""
    s, steps, warmup = loop["series"], np.asarray(loop["eval_steps"]), loop["cfg"].warmup
    after = steps > warmup
    geo = s["probe_log10_geo"]
    with np.errstate(all="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return {"collapsed": runs_meeting(geo, steps, warmup, threshold, consecutive),
                    "time_avg_geo": np.nanmean(geo[after], 0), "min_geo": np.nanmin(geo[after], 0),
                    "mean_return": np.nanmean(s["ret"][after], 0), "final_lambda": s["lambda"][-1],
                    "time_avg_mb_geo": np.nanmean(s["mb_log10_geo"][after], 0),
                    "time_avg_match": np.nanmean(s["probe_match"][after], 0),
                    "time_avg_arith": np.nanmean(s["probe_arith"][after], 0),
                    "ties": np.nansum(s["probe_ties"][after], 0)}


def _finite(x) -> float | None:
    x = float(x)
    return x if np.isfinite(x) else None


def judge(study: dict, prereg, primary_pair=("original", "fixed")) -> dict:
    """The study's result: per cell and arm the collapse fraction with its exact interval; per cell the paired
    tests of ``primary_pair`` (first vs second); Holm over the non-exploratory cells; the headline from the primary
    cell; the incident run by the pre-registered rule. Plain data (JSON-ready)."""
    e = prereg.endpoint
    cells, series_of = {}, {}
    for key, loop in study["loops"].items():
        per = _per_run(loop, e.threshold, e.consecutive)
        steps = np.asarray(loop["eval_steps"])
        for k, (arm, cell, _u, i) in enumerate(loop["entries"]):
            c = cells.setdefault(cell, {"loop": key, "arms": {}})
            a = c["arms"].setdefault(arm, {"seed": [], "rows": []})
            a["seed"].append(i)
            a["rows"].append(k)
        for cell, c in cells.items():
            if c["loop"] != key:
                continue
            c["eval_steps"] = steps.tolist()
            c["warmup"] = loop["cfg"].warmup
            for arm, a in c["arms"].items():
                rows = np.array(a.pop("rows"))
                order = np.argsort(a["seed"])
                rows = rows[order]
                a["seed"] = [int(x) for x in np.array(a["seed"])[order]]
                series_of[(cell, arm)] = (loop, rows)
                got = {k: v[rows] for k, v in per.items()}
                n, hit = rows.size, int(got["collapsed"].sum())
                lo, hi = clopper_pearson(hit, n)
                med = {f: np.nanmedian(loop["series"][f][:, rows], 1) for f in
                       ("probe_log10_geo", "mb_log10_geo", "lambda", "kl_ema")}
                a.update(runs=int(n), collapses=hit, fraction=hit / n if n else float("nan"), ci_low=lo, ci_high=hi,
                         per_seed={k: [bool(x) if v.dtype == bool else _finite(x) for x in v] for k, v in got.items()},
                         median_time_avg_geo=_finite(np.nanmedian(got["time_avg_geo"])),
                         median_return=_finite(np.nanmedian(got["mean_return"])),
                         median_series={k: [_finite(x) for x in v] for k, v in med.items()})
    first, second = primary_pair
    family = []
    for name, c in cells.items():
        decl = next((d for d in prereg.cells if d.name == name), None)
        c["exploratory"] = bool(decl.exploratory) if decl else True
        if first in c["arms"] and second in c["arms"]:
            A, B = c["arms"][first]["per_seed"], c["arms"][second]["per_seed"]
            c["mcnemar"] = mcnemar_exact(np.array(A["collapsed"]), np.array(B["collapsed"]))
            fl = lambda v: np.array([np.nan if x is None else x for x in v], dtype=float)
            c["wilcoxon_time_avg_geo"] = wilcoxon_paired(fl(A["time_avg_geo"]), fl(B["time_avg_geo"]))
            c["return_noninferiority"] = noninferiority(fl(B["mean_return"]), fl(A["mean_return"]),
                                                        e.noninferiority_return, e.alpha)
            if not c["exploratory"]:
                family.append(name)
    adjusted = holm([cells[n]["mcnemar"]["p"] for n in family])
    for name, p in zip(family, adjusted, strict=True):
        cells[name]["mcnemar"]["p_holm"] = p
    result = {"pair": list(primary_pair), "family": family, "cells": cells, "not_run": study.get("not_run", []),
              "seeds": study.get("seeds"), "endpoint": {"threshold": e.threshold, "consecutive": e.consecutive,
                                                        "alpha": e.alpha, "correction": e.correction}}
    result["headline"] = headline(cells.get("primary"), primary_pair, e.alpha, prereg_min_fraction(prereg))
    result["incident"] = incident(cells, series_of, primary_pair)
    return result


def prereg_min_fraction(prereg) -> float:
    return getattr(prereg, "min_original_fraction", 0.10)


def headline(cell: dict | None, pair, alpha: float, min_fraction: float) -> dict:
    """The pre-registered reading of the primary cell: reproduced and supported / not reproduced / contradicted."""
    if not cell or "mcnemar" not in cell:
        return {"verdict": "not run", "sentence": "the primary cell did not run"}
    a, b = (cell["arms"][x] for x in pair)
    m = cell["mcnemar"]
    p = m.get("p_holm", m["p"])
    if b["fraction"] > a["fraction"] and p < alpha:
        verdict = "contradicted"
    elif a["fraction"] < min_fraction:
        verdict = "not reproduced"
    elif a["fraction"] > b["fraction"] and p < alpha:
        verdict = "reproduced and supported"
    else:
        verdict = "not reproduced"
    return {"verdict": verdict, "first": a["fraction"], "second": b["fraction"], "p": p,
            "discordant": [m["only_first"], m["only_second"]]}


# ---- the study re-read in the five verdict words (analysis.judge.verdict_words) ----

#: The precondition (the original's λ at its floor) counts as occurred in a cell where the median over the
#: original's runs of λ sits at its floor on at least this share of the evaluations after the warm-up. The study's
#: JSON keeps λ per evaluation only as that median (and each run's final λ), not per run.
PRECONDITION_SHARE = 0.5
#: The reference arm that holds π: λ held at the kernels' ceiling (1).
REFERENCE = "const:1"


def _values(xs) -> np.ndarray:
    return np.array([np.nan if x is None else x for x in xs], dtype=float)


def median_lambda_at(cell: dict, arm: str, level: float, side: str = "floor") -> tuple[int, int]:
    """The evaluations after the warm-up at which the median over ``arm``'s runs of λ sits at ``level`` (``side``
    "floor": at or below it; "ceiling": at or above it), and the evaluations after the warm-up. The loop's λ is
    float32: ``level`` is compared as the float32 nearest it, exactly."""
    lam = _values(cell["arms"][arm]["median_series"]["lambda"])
    after = np.asarray(cell["eval_steps"]) > cell["warmup"]
    edge = float(np.float32(level))
    hit = lam[after] <= edge if side == "floor" else lam[after] >= edge
    return int(hit.sum()), int(after.sum())


def final_lambda_at(arm: dict, level: float) -> tuple[int, int]:
    """The runs of ``arm`` whose final λ is the float32 nearest ``level`` exactly, and the runs with a final λ."""
    lam = _values(arm["per_seed"]["final_lambda"])
    return int((lam == float(np.float32(level))).sum()), int(np.isfinite(lam).sum())


def paired(cell: dict, first: str, second: str) -> dict:
    """Exact McNemar of ``first``'s per-run collapse against ``second``'s in one cell, paired by seed."""
    a, b = cell["arms"][first], cell["arms"][second]
    if a["seed"] != b["seed"]:
        raise ValueError(f"{first} and {second} ran different seeds: no paired test")
    return mcnemar_exact(np.array(a["per_seed"]["collapsed"]), np.array(b["per_seed"]["collapsed"]))


def reread(result: dict, floors: dict[str, float], alpha: float | None = None) -> dict[str, dict]:
    """Per cell that ran the compared pair (``result["pair"]``: original, then fixed), the answers of
    :mod:`analysis.judge.verdict_words` and the word: the precondition (:data:`PRECONDITION_SHARE`, ``floors``:
    λ floor per arm name); the original and the fixed kernel each against :data:`REFERENCE` (exact McNemar,
    unadjusted, at ``alpha``, default the pre-registered α): the original collapsed more where its only-collapses
    outnumber the reference's at p < α, the fixed kernel held unless it did so too. Where the precondition
    occurred and the cell ran no reference, ``verdict`` is None. EXPLORATORY: a reading after the fact."""
    first, second = result["pair"]
    alpha = result["endpoint"]["alpha"] if alpha is None else alpha
    out = {}
    for name, c in result["cells"].items():
        if first not in c["arms"] or second not in c["arms"]:
            continue
        k, n = median_lambda_at(c, first, floors[first], "floor")
        row = {"floor_evaluations": [k, n], "precondition": bool(n and k >= PRECONDITION_SHARE * n),
               "reference": REFERENCE if REFERENCE in c["arms"] else None}
        if row["reference"]:
            o, f = paired(c, first, REFERENCE), paired(c, second, REFERENCE)
            more = lambda m: m["only_first"] > m["only_second"] and m["p"] < alpha  # noqa: E731
            row.update(original_vs_reference=o, fixed_vs_reference=f,
                       verdict=verdict(row["precondition"], more(o), not more(f)))
        else:
            row["verdict"] = None if row["precondition"] else verdict(False)
        out[name] = row
    return out


def incident(cells: dict, series_of: dict, pair) -> dict | None:
    """The incident figure's runs (primary cell, the pre-registered rule): per-evaluation λ, KL EMA, probe and
    minibatch log10 geometric agreement of ``pair``'s two runs of the chosen seed, and per-step traces where kept."""
    cell = cells.get("primary")
    if not cell or any(x not in cell["arms"] for x in pair):
        return None
    a, b = (cell["arms"][x] for x in pair)
    seed, why = incident_seed(np.array(a["per_seed"]["collapsed"]), np.array(b["per_seed"]["collapsed"]))
    out = {"seed": seed, "why": why, "eval_steps": cell["eval_steps"], "runs": {}}
    for arm in pair:
        loop, rows = series_of[("primary", arm)]
        row = int(rows[cell["arms"][arm]["seed"].index(seed)])
        run = {f: [_finite(x) for x in loop["series"][f][:, row]] for f in
               ("lambda", "kl_ema", "probe_log10_geo", "mb_log10_geo", "probe_log10_p01", "probe_arith", "probe_match")}
        run["collapsed"] = bool(cell["arms"][arm]["per_seed"]["collapsed"][seed])
        tr = loop.get("trace_rows")
        if tr is not None and row in list(tr):
            j = list(tr).index(row)
            run["trace_every"] = 10
            run["trace_lambda"] = [float(x) for x in loop["trace_lambda"][::10, j]]
            run["trace_kl_ema"] = [float(x) for x in loop["trace_kl"][::10, j]]
        out["runs"][arm] = run
    return out


def candidate_worse(result: dict, alpha: float) -> bool:
    """``study --deep --kernel``'s verdict (exit 1): in the primary cell the candidate collapsed in more runs than
    the fixed kernel, exact McNemar p (unadjusted: one comparison) below the pre-registered α."""
    cell = result["cells"].get("primary", {})
    if "mcnemar" not in cell:
        return False
    arms = cell["arms"]
    return arms["candidate"]["collapses"] > arms["fixed"]["collapses"] and cell["mcnemar"]["p"] < alpha
