"""Judgement of the third study (pure: arrays in, numbers out): the primary endpoint per run, the paired exact
McNemar test per cell, Holm's correction over the declared cells, intervals, the secondary endpoints, the power
computation that set the seed count, and the rule that picks the incident figure's run.

Inputs are the per-run evaluation series ``[n_evals, R]`` that :mod:`repro.learning.deep.study` gathers.
"""

from __future__ import annotations

import numpy as np
from scipy import stats


def collapsed(series: np.ndarray, steps: np.ndarray, warmup: int, threshold: float, consecutive: int) -> np.ndarray:
    """Primary endpoint per run: ``consecutive`` evaluations in a row after ``warmup`` (steps) with the probe
    batch's log10 geometric agreement below ``threshold`` (NaN is not below)."""
    below = (series < threshold) & (np.asarray(steps) > warmup)[:, None]
    run = np.zeros(series.shape[1], dtype=int)
    best = np.zeros(series.shape[1], dtype=int)
    for row in below:
        run = np.where(row, run + 1, 0)
        best = np.maximum(best, run)
    return best >= consecutive


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact binomial interval for k of n."""
    if n == 0:
        return float("nan"), float("nan")
    ci = stats.binomtest(k, n).proportion_ci(confidence, method="exact")
    return float(ci.low), float(ci.high)


def mcnemar_exact(a: np.ndarray, b: np.ndarray) -> dict:
    """Paired exact McNemar: ``a`` and ``b`` boolean per seed (same order). Discordant counts and the two-sided
    exact binomial p on them (1 when there are none)."""
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
    keep = np.isfinite(x) & np.isfinite(y)
    diff = np.asarray(x)[keep] - np.asarray(y)[keep]
    if not np.any(diff != 0):
        return {"n": int(keep.sum()), "median_difference": 0.0 if keep.any() else float("nan"), "p": 1.0}
    res = stats.wilcoxon(diff)
    return {"n": int(keep.sum()), "median_difference": float(np.median(diff)), "p": float(res.pvalue)}


def noninferiority(fixed: np.ndarray, original: np.ndarray, margin: float, alpha: float) -> dict:
    """Return: fixed is non-inferior when the one-sided (1 − α) lower bound of the paired mean difference
    (fixed − original, t interval) lies above −margin."""
    keep = np.isfinite(fixed) & np.isfinite(original)
    diff = np.asarray(fixed)[keep] - np.asarray(original)[keep]
    n = diff.size
    if n < 2:
        return {"n": int(n), "mean_difference": float("nan"), "lower_bound": float("nan"), "noninferior": False}
    lower = diff.mean() - stats.t.ppf(1 - alpha, n - 1) * diff.std(ddof=1) / np.sqrt(n)
    return {"n": int(n), "mean_difference": float(diff.mean()), "lower_bound": float(lower),
            "margin": margin, "noninferior": bool(lower > -margin)}


def mcnemar_power(n: int, p_first: float, p_second: float, alpha: float) -> float:
    """Exact power of the two-sided exact McNemar test with ``n`` pairs, the two arms' collapse probabilities
    independent within a pair (discordant probabilities p1(1−p2) and p2(1−p1)), at level ``alpha``."""
    p10, p01 = p_first * (1 - p_second), p_second * (1 - p_first)
    pd = p10 + p01
    share = p10 / pd
    power = 0.0
    for d in range(1, n + 1):
        k = np.arange(d + 1)
        # the exact two-sided p of binomtest(k, d, 0.5): symmetric, so twice the smaller tail (at most 1)
        pvals = np.minimum(1.0, 2 * np.minimum(stats.binom.cdf(k, d, 0.5), stats.binom.sf(k - 1, d, 0.5)))
        reject = pvals <= alpha
        power += stats.binom.pmf(d, n, pd) * stats.binom.pmf(k, d, share)[reject].sum()
    return float(power)


def seeds_for_power(p_first: float, p_second: float, alpha: float, power: float, most: int = 400) -> tuple[int, float]:
    """The smallest n (pairs) whose exact McNemar power reaches ``power``, and that power."""
    lo, hi = 2, most
    while lo < hi:  # power is not strictly monotone in n (discreteness): bisect, then step up to a true n
        mid = (lo + hi) // 2
        if mcnemar_power(mid, p_first, p_second, alpha) >= power:
            hi = mid
        else:
            lo = mid + 1
    n = lo
    while mcnemar_power(n, p_first, p_second, alpha) < power and n < most:
        n += 1
    return n, mcnemar_power(n, p_first, p_second, alpha)


def incident_seed(orig: np.ndarray, fixed: np.ndarray) -> tuple[int, str]:
    """The incident figure's seed (pre-registered rule): the lowest seed where the original collapses and the fixed
    kernel does not; else the lowest where the original collapses; else seed 0."""
    for mask, why in ((orig & ~fixed, "original collapses, fixed does not"), (orig, "original collapses (fixed too)")):
        hits = np.flatnonzero(mask)
        if hits.size:
            return int(hits[0]), why
    return 0, "no run of the original collapses: seed 0"
