"""The studies' statistics: exact binomial intervals, McNemar's exact test, the sign test over seeds.

Pure functions of counts and per-run verdicts (numpy booleans); the studies' judgement
(:mod:`analysis.judge.first_study`, :mod:`analysis.judge.second_study`) and the report's measures call them.
"""

from __future__ import annotations

import contextlib
import warnings

import numpy as np


def exact_interval(k: int, n: int, confidence: float) -> tuple[float, float]:
    """Clopper–Pearson interval of a binomial proportion k/n by scipy's root finder (``binomtest``).

    The first study's interval: its committed results were computed this way, and a re-run reproduces them bit
    for bit. It agrees with :func:`clopper_pearson` to the root finder's tolerance (tests/test_study.py)."""
    from scipy.stats import binomtest

    ci = binomtest(int(k), int(n)).proportion_ci(confidence_level=confidence, method="exact")
    return float(ci.low), float(ci.high)


def clopper_pearson(k: int, n: int, confidence: float) -> tuple[float, float]:
    """The exact (Clopper–Pearson) interval of k/n from beta quantiles (the closed form of scipy's
    ``binomtest(k, n).proportion_ci(method="exact")``): the second study's, which takes thousands per task."""
    from scipy.stats import beta

    alpha = 1.0 - confidence
    lo = 0.0 if k == 0 else float(beta.ppf(alpha / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.isf(alpha / 2, k + 1, n - k))
    return lo, hi


def interval(hit: np.ndarray, confidence: float) -> dict:
    """Runs where ``hit`` holds: count, total, fraction and the :func:`clopper_pearson` interval."""
    lo, hi = clopper_pearson(int(hit.sum()), hit.size, confidence)
    return {"k": int(hit.sum()), "n": int(hit.size), "fraction": float(hit.mean()), "ci_low": lo, "ci_high": hi}


def sign_p(x: int, y: int) -> float:
    """Two-sided exact binomial p-value of x against y successes at p = ½ (McNemar's exact test, the sign test):
    2·P(X ≤ min(x, y)) for X ~ Bin(x + y, ½), at most 1 (the closed form of scipy's binomtest at p = ½, which
    the study calls some 4 000 times per task: the closed form takes a fraction of its time)."""
    from scipy.stats import binom

    return 1.0 if x + y == 0 else float(min(1.0, 2.0 * binom.cdf(min(x, y), x + y, 0.5)))


def mcnemar(a: np.ndarray, b: np.ndarray) -> dict:
    """McNemar's exact test on paired verdicts: discordant counts and the two-sided exact p-value."""
    only_a, only_b = int((a & ~b).sum()), int((b & ~a).sum())
    return {"only_a": only_a, "only_b": only_b, "both": int((a & b).sum()), "n": int(a.size), "p": sign_p(only_a, only_b)}


def seed_sign_test(a: np.ndarray, b: np.ndarray) -> dict:
    """Over seeds (the independent units where grid points reuse them): ``a``, ``b`` are ``[points, seeds]``;
    seeds where a collapses at more points than b, fewer, and the exact sign test's p-value."""
    d = a.sum(axis=0).astype(int) - b.sum(axis=0).astype(int)
    more, fewer = int((d > 0).sum()), int((d < 0).sum())
    return {"seeds_a_more": more, "seeds_b_more": fewer, "p": sign_p(more, fewer)}


@contextlib.contextmanager
def undefined_ok():
    """NumPy statistics over NaN (a diverged run, a slice where every run diverged) and log10(0) without
    warnings: the result is NaN or -inf, which the JSON records as null."""
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield
