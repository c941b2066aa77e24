"""The learning-loop studies' numbers that their JSON does not hold: counts, minima, the paired tests and
significance the report's sections state.

Pure functions of a study's JSON (:mod:`analysis.cli.study_runs`): no loop runs here
and nothing is formatted (``analysis.present.study_section`` does that).
"""

from __future__ import annotations

import numpy as np

from analysis.judge.study_stats import mcnemar

#: The significance level of the second study's paired tests.
ALPHA = 0.05


def significant(m: dict) -> bool:
    """A paired test (:func:`analysis.judge.study_stats.mcnemar`) below :data:`ALPHA`."""
    return m["p"] < ALPHA


def a_more(m: dict) -> bool:
    """The test's ``a`` meets the criterion significantly more often than its ``b``."""
    return significant(m) and m["only_a"] > m["only_b"]


def b_more(m: dict) -> bool:
    """The test's ``b`` meets the criterion significantly more often than its ``a``."""
    return significant(m) and m["only_b"] > m["only_a"]


def final_agreement(e: dict) -> float:
    """First study, one controller's entry for one task: the median over grid points of its final mean agreement
    (the grid points where it is defined; NaN where none is: every run diverged)."""
    kept = [v for v in e["final_agree_mean_per_grid_point"] if v is not None and np.isfinite(v)]
    return float(np.median(kept)) if kept else float("nan")


def wide_brackets(result: dict) -> tuple[int, int]:
    """Either study: the grid points whose constant-λ bracket is wide enough, and the grid points with a bracket."""
    rows = [r for block in result["envs"].values() for r in block["brackets"] or []]
    return sum(r["wide"] for r in rows), len(rows)


def lowest_quartiles(result: dict) -> tuple[tuple[float, str, str], tuple[float, str, str]] | None:
    """First study, controllers without a diverged run: the lowest lower quartile over steps of the minimum
    agreement over visited states (log10) and of the mean agreement, each with its task and controller (None:
    no such controller)."""
    lows, means = [], []
    for env, block in result["envs"].items():
        for name, e in block["controllers"].items():
            if e.get("diverged_fraction", 0.0) > 0:  # runaway logits of a λ without ceiling say nothing here
                continue
            mins = [x for x in e["over_steps"]["log10_agree_min"]["q25"] if x is not None]
            agree = [x for x in e["over_steps"]["agree_mean"]["q25"] if x is not None]
            if mins and agree:
                lows.append((min(mins), env, name))
                means.append((min(agree), env, name))
    return (min(lows), min(means)) if lows else None


#: A grid point where a controller's min-agreement collapse reaches this fraction of its seeds is named in the
#: first study's section.
NAMED_FRACTION = 0.05


def collapse_points(result: dict, name: str, at_least: float = NAMED_FRACTION) -> dict[str, list[int]]:
    """First study, per task that ran ``name``: the grid points (indices) where its min-agreement collapse
    fraction reaches ``at_least``."""
    return {env: [i for i, f in enumerate(block["controllers"][name]["deep_fraction_per_grid_point"]) if f >= at_least]
            for env, block in result["envs"].items() if name in block["controllers"]}


def pair(block: dict) -> dict | None:
    """Second study: one task's paired tests of the original against the fixed kernel (None: not made)."""
    return next((p for p in block["pairs"] if (p["a"], p["b"]) == ("original", "fixed")), None)


def original_vs_fixed(result: dict, crits: tuple[str, ...] = ("relative", "minimum")) -> tuple[int, int, int]:
    """Second study: over every task × agreement criterion × regime, the cells where the original meets the
    criterion significantly more often than the fixed kernel, those where the fixed kernel does, and all cells."""
    tests = [p[c]["per_regime"][j] for b in result["envs"].values() if (p := pair(b)) is not None
             for c in crits for j in range(len(b["regimes"]))]
    return sum(map(a_more, tests)), sum(map(b_more, tests)), len(tests)


def fix_tests(block: dict, crit: str, j: int) -> tuple[list[tuple[dict, str]], list[tuple[dict, str]]]:
    """Second study: one task's paired tests under ``crit`` over regime ``j``, ``[(test, fix)]`` for each fix
    alone against none (the original its ``a``) and for each fix removed from all four (the fixed its ``b``)."""
    fixes = [p for p in block["pairs"] if "fix" in p]
    alone = [(p[crit]["per_regime"][j], p["fix"]) for p in fixes if p["a"] == "original"]
    removed = [(p[crit]["per_regime"][j], p["fix"]) for p in fixes if p["b"] == "fixed"]
    return alone, removed


def largest_gap(result: dict) -> tuple | None:
    """Second study: where the original meets a criterion (relative or minimum) more often than the fixed kernel
    by the most: ``(gap, env, criterion, regime index, regime, original's, fixed's, their paired test)`` (None:
    no task ran both)."""
    best = None
    for env, block in result["envs"].items():
        ctrl = block["controllers"]
        if not {"original", "fixed"} <= set(ctrl):
            continue
        tests = pair(block)
        for crit in ("relative", "minimum"):
            for j, r in enumerate(block["regimes"]):
                o, f = ctrl["original"][crit]["per_regime"][j], ctrl["fixed"][crit]["per_regime"][j]
                if best is None or o["fraction"] - f["fraction"] > best[0]:
                    best = (o["fraction"] - f["fraction"], env, crit, j, r, o, f, tests[crit]["per_regime"][j])
    return best


def regime_test(block: dict, crit: str, a: str, b: str, j: int) -> dict:
    """Second study: McNemar's test of controller ``a``'s per-run verdicts against ``b``'s under ``crit`` over
    regime ``j``'s runs of one task's ``block``."""
    va, vb = (block["controllers"][n][crit]["verdicts"] for n in (a, b))
    K = len(va) // len(block["grid_points"])
    idx = np.concatenate([np.arange(i * K, (i + 1) * K) for i in block["regimes"][j]["points"]])
    return mcnemar(np.asarray(va, bool)[idx], np.asarray(vb, bool)[idx])


def lowest_agreement(result: dict, name: str, sets: tuple[str, ...]) -> tuple | None:
    """Second study, ``name``'s runs: the set, task and regime where the median run's lowest state goes lowest
    (``(median, set, env, regime, regime index, whether the odd states' median equals the visited states')``, the
    latter: the lowest state is one the even-state KL never sees), and where a mean over a set goes lowest
    (``(lowest, set, env, regime)``); None where no set has a median."""
    deepest, mean_low = None, None
    for env, block in result["envs"].items():
        e = block["controllers"].get(name)
        if e is None:
            continue
        for j, r in enumerate(block["regimes"]):
            for s in sets:
                x = e["lowest_log10_agreement"][s][j]
                if x["median"] is not None and (deepest is None or x["median"] < deepest[0]):
                    deepest = (x["median"], s, env, r, j)
                if x["mean_lowest"] is not None and (mean_low is None or x["mean_lowest"] < mean_low[0]):
                    mean_low = (x["mean_lowest"], s, env, r)
    if deepest is None:
        return None
    low = result["envs"][deepest[2]]["controllers"][name]["lowest_log10_agreement"]
    j = deepest[4]
    return (*deepest, low["odd"][j]["median"] == low["visited"][j]["median"]), mean_low


def unique_states(e: dict) -> tuple[float, float]:
    """Second study, one controller: the least and the greatest over grid points of the median number of visited
    states with a unique greedy action at the last evaluation."""
    med = e["final_unique_states_median_per_point"]
    return min(med), max(med)


def incident(result: dict) -> tuple[bool, int | None]:
    """Second study's incident figure: whether its seed's original run shows the whole signature at its grid
    point, and the first step at which the original's λ is at its floor (None: never)."""
    inc = result["incident"]
    block = result["envs"][inc["env"]]
    i = block["grid_points"].index(inc["point"])
    K = result["seeds"][1] - result["seeds"][0]
    shows = block["controllers"]["original"]["signature"]["verdicts"][i * K + inc["seed"] - result["seeds"][0]]
    floor = result["parameters"]["signature"]["floor_lambda"]
    at = next((k for k, x in enumerate(inc["series"]["original"]["lam"]) if x is not None and x <= floor), None)
    return bool(shows), inc["steps"][at] if at is not None else None
