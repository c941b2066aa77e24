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


#: The second study's criteria the pre-registration names primary and secondary (``repro.learning.study2``'s
#: docstring and studies/preregistered_2.toml: relative is primary).
PRIMARY, SECONDARY = "relative", ("minimum", "signature")


def primary_by_task(result: dict) -> list[dict]:
    """Second study, per task that ran original and fixed, under the primary criterion per regime: the original's
    and the fixed kernel's fractions (least and greatest over regimes), and the regimes where the original meets
    it significantly more often (the fix helps), where the fixed kernel does (the fix hurts), and all regimes
    (McNemar per regime, p < :data:`ALPHA`, uncorrected)."""
    out = []
    for env, block in result["envs"].items():
        test = pair(block)
        if test is None:
            continue
        tests = test[PRIMARY]["per_regime"]
        frac = {n: [x["fraction"] for x in block["controllers"][n][PRIMARY]["per_regime"]] for n in ("original", "fixed")}
        out.append({"env": env, "original": (min(frac["original"]), max(frac["original"])),
                    "fixed": (min(frac["fixed"]), max(frac["fixed"])), "fix_helps": sum(map(a_more, tests)),
                    "fix_hurts": sum(map(b_more, tests)), "regimes": len(tests),
                    "equal": sum(o == f for o, f in zip(frac["original"], frac["fixed"], strict=True))})
    return out


def unregistered_tests(result: dict) -> list[str]:
    """Second study: what its paired tests use that the pre-registration's [criteria] does not set (an α, a
    multiplicity correction, which cell is confirmatory), by the keys it would need."""
    c = result["parameters"]["criteria"]
    return [what for what, keys in (("α", ("alpha",)), ("multiplicity correction", ("correction", "multiplicity")),
                                    ("confirmatory cell", ("confirmatory",))) if not any(k in c for k in keys)]


def signature_vs_lambda0(result: dict) -> list[dict]:
    """Second study, per task: the signature criterion's fraction per regime for the original and for λ held at 0
    (``const:0``: no controller at all), the regimes where λ = 0 shows it at least as often, and the original's
    λ side over the whole run (the fraction of its runs), and the regimes where the median original run's λ is at
    its floor already at the first evaluation (the EMA's cold start: a KL EMA from 0 reads as a quiet KL)."""
    floor = result["parameters"]["signature"]["floor_lambda"]
    out = []
    for env, block in result["envs"].items():
        ctrl = block["controllers"]
        if not {"original", "const:0"} <= set(ctrl):
            continue
        o, z = ([x["fraction"] for x in ctrl[n]["signature"]["per_regime"]] for n in ("original", "const:0"))
        out.append({"env": env, "original": o, "lambda0": z, "lambda0_at_least": sum(b >= a for a, b in zip(o, z, strict=True)),
                    "regimes": len(o), "lambda_side": ctrl["original"]["lambda_side"]["fraction"],
                    "first_step": block["eval_steps"][0],
                    "floor_at_first": sum(x[0] is not None and x[0] <= floor
                                          for x in ctrl["original"]["median_over_steps_per_regime"]["lam"])})
    return out


def aliased_criterion(block: dict, warmup: int, view: str = "view:4") -> dict | None:
    """Second study, one task: why the fixed kernel can meet the relative criterion more often without its
    agreement being worse. At the grid points where π sees ``view`` (states aliased): λ = 1's relative fraction
    (least, greatest), and at how many of them λ = 0's median final agreement is above λ = 1's; λ = 0's median
    count of judged states at the last evaluation (least over points) against the original's (greatest); per
    regime, the original's minus the fixed kernel's median agreement averaged over the evaluations after
    ``warmup`` (steps) (least, greatest). None: the block lacks λ = 0, λ = 1, original or fixed."""
    ctrl = block["controllers"]
    if not {"const:0", "const:1", "original", "fixed"} <= set(ctrl):
        return None
    at = [i for i, p in enumerate(block["grid_points"]) if p["policy"] == view]
    one = [ctrl["const:1"]["relative"]["per_point"][i]["fraction"] for i in at]
    final = {n: ctrl[n]["final_agreement_median_per_point"] for n in ("const:0", "const:1")}
    above = sum(final["const:0"][i] is not None and final["const:1"][i] is not None
                and final["const:0"][i] > final["const:1"][i] for i in at)
    judged = np.asarray(block["eval_steps"]) > warmup
    series = {n: ctrl[n]["median_over_steps_per_regime"] for n in ("original", "fixed")}
    gaps, lam = [], {"original": [], "fixed": []}
    for j in range(len(block["regimes"])):
        o, f = (np.asarray(series[n]["agree_unique"][j], float) for n in ("original", "fixed"))
        with np.errstate(invalid="ignore"):
            gaps.append(float(np.nanmean((o - f)[judged])))
            for n in lam:
                lam[n].append(float(np.nanmean(np.asarray(series[n]["lam"][j], float)[judged])))
    return {"points": len(at), "lambda1": (min(one), max(one)) if one else None, "lambda0_above": above,
            "judged_lambda0": min(ctrl["const:0"]["final_unique_states_median_per_point"]),
            "judged_original": max(ctrl["original"]["final_unique_states_median_per_point"]),
            "gap": (min(gaps), max(gaps)), "lam": {n: (min(v), max(v)) for n, v in lam.items()}}


def incident_minimum(result: dict) -> dict | None:
    """Second study's incident figure: per arm, the lowest log10 agreement of one odd state (the states the
    even-state KL never sees) after the warm-up and its step; and the original's λ-at-floor stretches after the
    warm-up (``[(first step, last step)]``). None: the incident holds no per-step minimum (made before it did)."""
    inc = result.get("incident")
    if not inc or any("log10_min_odd" not in s for s in inc["series"].values()):
        return None
    steps = np.asarray(inc["steps"])
    judged = steps > result["parameters"]["criteria"]["warmup"]
    out = {}
    for arm, s in inc["series"].items():
        m = np.where(judged, np.asarray(s["log10_min_odd"], float), np.nan)  # null (no odd state judged) reads NaN
        k = int(np.nanargmin(m)) if np.isfinite(m).any() else None
        out[arm] = None if k is None else (float(m[k]), int(steps[k]))
    lam = np.asarray(inc["series"]["original"]["lam"], float)
    at = steps[judged & (lam <= result["parameters"]["signature"]["floor_lambda"])]
    breaks = np.flatnonzero(np.diff(at) > 1)
    out["floor_stretches"] = [(int(a), int(b)) for a, b in zip(at[np.r_[0, breaks + 1]], at[np.r_[breaks, len(at) - 1]],
                                                               strict=True)] if at.size else []
    return out
