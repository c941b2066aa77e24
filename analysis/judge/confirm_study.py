"""Judgement of the fourth study's confirmation (studies/preregistered_4.toml, issue 42 items 3–4): the seed count
from the search's discordant pairs, the primary test per cell, Holm's correction, and the five-word verdicts.

Pure: JSON-shaped dicts in, plain data out. The plan (:func:`plan`) is computed from the exploratory search's
judged map before any confirmatory run; :func:`judge` reads only the confirmation's own runs and the midpoints the
pre-registration copied from the search.
"""

from __future__ import annotations

import numpy as np

from analysis.judge.deep_study import clopper_pearson, holm, mcnemar_exact
from analysis.judge.explore_study import drift
from analysis.judge.verdict_words import Verdict, verdict

#: The order in which :func:`overall` ranks the verdict words (the words themselves: analysis/judge/verdict_words.py).
WORDS = (Verdict.CONTRADICTED, Verdict.REPRODUCED_FIX_FAILS, Verdict.REPRODUCED_FIX_HOLDS, Verdict.NOT_REPRODUCED,
         Verdict.PRECONDITION_ABSENT)
CONTROL = "const:1"     # the collapse's reference: λ held at 1 (π pulled towards Q all the time)


def mcnemar_power_discordant(n: int, p10: float, p01: float, alpha: float, first_more: bool = False) -> float:
    """Exact power of the two-sided exact McNemar test with ``n`` pairs whose discordant probabilities are ``p10``
    (first arm only) and ``p01`` (second only), at level ``alpha``; ``first_more``: only the rejections where the
    first arm has the more discordant pairs count (a test that must find the first arm worse)."""
    from scipy import stats

    pd = p10 + p01
    if n < 1 or pd <= 0:
        return 0.0
    share, power = p10 / pd, 0.0
    for d in range(1, n + 1):
        k = np.arange(d + 1)
        pvals = np.minimum(1.0, 2 * np.minimum(stats.binom.cdf(k, d, 0.5), stats.binom.sf(k - 1, d, 0.5)))
        hit = (pvals <= alpha) & (2 * k > d) if first_more else pvals <= alpha
        power += stats.binom.pmf(d, n, pd) * stats.binom.pmf(k, d, share)[hit].sum()
    return float(power)


def pairs_for_power(p10: float, p01: float, alpha: float, power: float, most: int,
                    first_more: bool = False) -> tuple[int, float]:
    """The smallest n ≤ ``most`` whose exact power (:func:`mcnemar_power_discordant`) reaches ``power`` (``most``
    and its power where none does)."""
    at = lambda n: mcnemar_power_discordant(n, p10, p01, alpha, first_more)
    if p10 + p01 <= 0 or p10 == p01 or at(most) < power:
        return most, at(most)
    lo, hi = 2, most
    while lo < hi:  # power is not monotone in n (discreteness): bisect, then step up to an n that reaches it
        mid = (lo + hi) // 2
        if at(mid) >= power:
            hi = mid
        else:
            lo = mid + 1
    while at(lo) < power and lo < most:
        lo += 1
    return lo, at(lo)


def discordant(original: list, fixed: list) -> dict:
    """Per-seed drift of the two arms (None: no in-R state) → pairs with both defined and the discordant counts."""
    both = [(a, b) for a, b in zip(original, fixed, strict=True) if a is not None and b is not None]
    return {"pairs": len(both), "original_only": sum(1 for a, b in both if a and not b),
            "fixed_only": sum(1 for a, b in both if b and not a)}


def discordant_rates(first_only: int, second_only: int, pairs: int) -> tuple[float, float]:
    """The discordant probabilities a power computation assumes from counts seen in ``pairs`` pairs: half a count
    added to each discordant side (of n + 1 pairs), so a side never seen discordant is not taken as impossible,
    which would promise power that 16 seeds cannot show."""
    return (first_only + 0.5) / (pairs + 1), (second_only + 0.5) / (pairs + 1)


def plan(judged_search: dict, alpha: float, power: float, most: int) -> list[dict]:
    """Per selected cell of the judged search: its settings, the search's midpoint, its discordant counts and the
    pairs that give ``power`` at Bonferroni's α/m (Holm's first step: the strictest level a cell can face), the
    discordant rates estimated as (count + ½) / (pairs + 1)."""
    groups = {g["index"]: g for g in judged_search["groups"]}
    cells = judged_search["selected"]
    level = alpha / max(1, len(cells))
    out = []
    for c in cells:
        d = discordant(c["arms"]["original"]["per_seed"], c["arms"]["fixed"]["per_seed"])
        p10, p01 = discordant_rates(d["original_only"], d["fixed_only"], d["pairs"])
        n, reached = pairs_for_power(p10, p01, level, power, most)
        out.append({"task": c["task"], "tau": c["tau"], "aux_reward": c["aux_reward"], "pi_lr": c["pi_lr"],
                    "kl_target": c["kl_target"], "kl_site": c["kl_site"], "midpoint": groups[c["group"]]["midpoint"],
                    "search_group": c["group"], "search_pairs": d["pairs"], "search_original_only": d["original_only"],
                    "search_fixed_only": d["fixed_only"], "level": level, "pairs": n, "power": reached})
    return out


def _fraction(k: int, n: int) -> dict:
    lo, hi = clopper_pearson(k, n)
    return {"drifted": k, "runs": n, "fraction": k / n if n else float("nan"), "low": lo, "high": hi}


def _mean(xs) -> float:
    v = np.array([np.nan if x is None else x for x in xs], dtype=float)
    return float(v[np.isfinite(v)].mean()) if np.isfinite(v).any() else float("nan")


def cell_verdict(precondition: float, min_precondition: float, reproduced: bool, fixed_beyond_control: bool,
                 p_holm: float, alpha: float, original_only: int, fixed_only: int) -> Verdict:
    """The pre-registered rule, in :func:`verdict_words.verdict`'s three questions: the precondition occurred where
    the original's λ sat at its floor with a quiet KL on at least ``min_precondition`` of post-warm-up steps; the
    original collapsed more (``reproduced``) where it drifted in more runs than λ held at 1 on the same seeds (exact
    McNemar at α, uncorrected: a classification, not the primary test); the fixed kernel held where it did not
    (``fixed_beyond_control`` false) and, where the collapse is reproduced, the primary test (Holm) finds it
    drifting in fewer runs than the original."""
    if not np.isfinite(precondition) or precondition < min_precondition:
        return verdict(False)
    held = not fixed_beyond_control
    if reproduced:
        held = held and p_holm < alpha and original_only > fixed_only
    return verdict(True, reproduced, held)


def overall(words: list[str]) -> str:
    """The study's verdict: the first of :data:`WORDS` that any cell has (a claim that the fix prevents the
    collapse falls with one cell that contradicts it or where it does not hold)."""
    return next((w for w in WORDS if w in words), Verdict.PRECONDITION_ABSENT)


def judge(result: dict) -> dict:
    """Per cell: each arm's drift fraction (exact 95 % interval), the original's precondition and time at the
    floor, the primary test (exact McNemar original vs fixed, paired by seed), Holm over the cells, the verdict;
    exploratory beside it: each ablation arm against the original (exact McNemar, uncorrected)."""
    alpha, need = result["alpha"], result["min_precondition"]
    cells = []
    for c in result["cells"]:
        runs = {arm: drift(m["r_geo_avg"], c["midpoint"]) for arm, m in c["arms"].items()}
        arms = {arm: {**_fraction(d["drifted"], d["runs"]), "precondition": _mean(c["arms"][arm]["precondition"]),
                      "at_floor": _mean(c["arms"][arm]["at_floor"])} for arm, d in runs.items()}
        test = paired(runs["original"]["per_seed"], runs["fixed"]["per_seed"])
        against = {a: paired(runs[a]["per_seed"], runs[CONTROL]["per_seed"]) if CONTROL in runs else None
                   for a in ("original", "fixed")}
        reproduced, beyond = (_more(against[a], alpha) for a in ("original", "fixed"))
        ablations = {arm: paired(runs["original"]["per_seed"], d["per_seed"]) for arm, d in runs.items()
                     if arm.startswith("ablation:")}
        cells.append({k: c[k] for k in ("index", "task", "tau", "aux_reward", "pi_lr", "kl_target", "kl_site",
                                        "midpoint", "pairs")}
                     | {"arms": arms, "precondition": arms["original"]["precondition"], "reproduced": reproduced,
                        "fixed_beyond_control": beyond, "against_control": against,
                        "primary": test, "exploratory_ablations": ablations})
    adjusted = holm([c["primary"]["p"] for c in cells]) if cells else []
    for c, p in zip(cells, adjusted, strict=True):
        c["primary"]["p_holm"] = p
        c["verdict"] = cell_verdict(c["precondition"], need, c["reproduced"], c["fixed_beyond_control"], p, alpha,
                                    c["primary"]["only_first"], c["primary"]["only_second"]).value
    return {"study": "confirmation_4", "alpha": alpha, "cells": cells,
            "verdict": overall([Verdict(c["verdict"]) for c in cells]).value}


def _more(test: dict | None, alpha: float) -> bool:
    """The first arm drifted in more runs than the second, by the paired exact McNemar test at ``alpha``."""
    return bool(test is not None and test["p"] < alpha and test["only_first"] > test["only_second"])


def paired(first: list, second: list) -> dict:
    """Exact McNemar on two arms' per-seed drift (None: no in-R state; such a pair is left out)."""
    keep = [(a, b) for a, b in zip(first, second, strict=True) if a is not None and b is not None]
    a, b = np.array([x for x, _ in keep], bool), np.array([y for _, y in keep], bool)
    return {"pairs": len(keep), **mcnemar_exact(a, b)}


def lines(judged: dict) -> list[str]:
    """The judged confirmation in a few printed lines."""
    out = [f"CONFIRMATORY (pre-registered): {len(judged['cells'])} cell(s); overall: {judged['verdict']}"]
    for c in judged["cells"]:
        o, f = c["arms"]["original"], c["arms"]["fixed"]
        t = c["primary"]
        out.append(f"  cell {c['index'] + 1}: {c['task']} target {c['kl_target']:g} τ {c['tau']:g} site {c['kl_site']} "
                   f"aux {c['aux_reward']:g} π lr {c['pi_lr']:g}: precondition {c['precondition']:.0%}; drift "
                   f"original {o['drifted']}/{o['runs']} ({o['low']:.0%}–{o['high']:.0%}) vs fixed "
                   f"{f['drifted']}/{f['runs']} ({f['low']:.0%}–{f['high']:.0%}); discordant {t['only_first']}:"
                   f"{t['only_second']}, Holm p {t['p_holm']:.3g} → {c['verdict']}")
    return out
