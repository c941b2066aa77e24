"""The third study's judgement (analysis/judge/deep_study.py) on made-up per-seed verdicts, against scipy's exact
tests and the pre-registered reading: no PyTorch, no loop."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.judge import deep_study as judge


def _cell(first: list[bool], second: list[bool], names=("candidate", "fixed")) -> dict:
    a, b = np.array(first), np.array(second)
    arms = {n: {"collapses": int(x.sum()), "fraction": float(x.mean())} for n, x in zip(names, (a, b), strict=True)}
    return {"arms": arms, "mcnemar": judge.mcnemar_exact(a, b)}


def test_mcnemar_is_the_exact_binomial_test_on_the_discordant_pairs():
    from scipy import stats

    a = np.array([1, 1, 1, 1, 1, 1, 1, 0, 0, 1], bool)
    b = np.array([0, 0, 0, 0, 0, 0, 1, 0, 1, 1], bool)
    m = judge.mcnemar_exact(a, b)
    assert (m["only_first"], m["only_second"]) == (6, 1)
    assert m["p"] == stats.binomtest(6, 7, 0.5).pvalue
    assert judge.mcnemar_exact(a, a)["p"] == 1.0


def test_holm_against_its_definition():
    p = [0.01, 0.04, 0.03, 0.5]
    # sorted 0.01, 0.03, 0.04, 0.5 → ×4, ×3, ×2, ×1, running maximum, capped at 1
    assert judge.holm(p) == pytest.approx([0.04, 0.09, 0.09, 0.5], abs=0, rel=1e-12)


@pytest.mark.parametrize("k, n", [(0, 10), (3, 10), (10, 10), (20, 100)])
def test_clopper_pearson_brackets_the_fraction_at_the_stated_confidence(k, n):
    from scipy import stats

    lo, hi = judge.clopper_pearson(k, n)
    assert lo <= k / n <= hi
    if k > 0:  # the lower end: P(X ≥ k | p = lo) = 2.5 %
        assert stats.binom.sf(k - 1, n, lo) == pytest.approx(0.025, rel=1e-6)
    if k < n:
        assert stats.binom.cdf(k, n, hi) == pytest.approx(0.025, rel=1e-6)


@pytest.mark.parametrize("first, second, worse", [
    ([True] * 6 + [False] * 2, [False] * 8, True),          # 6:0, p = 2/64 < 0.05
    ([True] * 5 + [False] * 3, [False] * 8, False),         # 5:0, p = 2/32 > 0.05
    ([False] * 8, [True] * 6 + [False] * 2, False),         # the fixed kernel collapses more
    ([True] * 8, [True] * 8, False),                        # as many
])
def test_the_candidate_is_worse_only_when_it_collapses_more_at_p_below_alpha(first, second, worse):
    assert judge.candidate_worse({"cells": {"primary": _cell(first, second)}}, alpha=0.05) is worse


def test_no_primary_cell_is_no_verdict_against_the_candidate():
    assert judge.candidate_worse({"cells": {"tau_10": _cell([True] * 8, [False] * 8)}}, alpha=0.05) is False


@pytest.mark.parametrize("first, second, verdict", [
    ([True] * 8 + [False] * 12, [False] * 20, "reproduced and supported"),
    ([True] * 1 + [False] * 19, [False] * 20, "not reproduced"),   # below the 10 % the pre-registration asks
    ([False] * 20, [True] * 8 + [False] * 12, "contradicted"),
    ([True] * 4 + [False] * 16, [True] * 3 + [False] * 17, "not reproduced"),
])
def test_the_headline_reads_the_primary_cell_as_preregistered(first, second, verdict):
    cell = _cell(first, second, names=("original", "fixed"))
    assert judge.headline(cell, ("original", "fixed"), 0.05, 0.10)["verdict"] == verdict
