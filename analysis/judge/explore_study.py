"""Judgement of the fourth study's exploratory search (studies/exploration_4.toml): the relative endpoint, the
constant-λ brackets, each cell's summary and the selection rule (issue 42 item 2), written before the search ran.

Pure: the search's JSON in (``repro.learning.deep.explore``: per group, per arm, per seed, the declared measures),
plain data out. EXPLORATORY: counts and medians, no test.
"""

from __future__ import annotations

import warnings

import numpy as np

from analysis.judge.verdict_words import Verdict

LOW, HIGH = "const:0.001", "const:1"   # the relative endpoint's two anchors (the declaration's [endpoint])


def _arr(xs) -> np.ndarray:
    return np.array([np.nan if x is None else x for x in xs], dtype=float)


def _median(x: np.ndarray) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(np.nanmedian(x)) if np.isfinite(x).any() else float("nan")


def midpoint(group: dict) -> float:
    """The group's drift threshold on r_geo_avg: the mean of const:1's and const:0.001's medians over its seeds."""
    c = group["constants"]
    return (_median(_arr(c[HIGH]["r_geo_avg"])) + _median(_arr(c[LOW]["r_geo_avg"]))) / 2


def drift(values, mid: float) -> dict:
    """Runs whose r_geo_avg lies below ``mid`` (``drifted``) among those with one (``runs``); per seed (None:
    no in-R probe state)."""
    v = _arr(values)
    ok = np.isfinite(v) & np.isfinite(mid)
    per = [bool(x < mid) if k else None for x, k in zip(v, ok, strict=True)]
    return {"drifted": int(sum(1 for x in per if x)), "runs": int(ok.sum()), "per_seed": per}


def separation(group: dict, min_log10: float) -> dict:
    """Selection rule (b): per seed, const:0.001's r_geo_avg ≤ const:1's − ``min_log10``; the fraction of seeds
    (with both defined) where it holds."""
    lo, hi = _arr(group["constants"][LOW]["r_geo_avg"]), _arr(group["constants"][HIGH]["r_geo_avg"])
    ok = np.isfinite(lo) & np.isfinite(hi)
    held = int((lo[ok] <= hi[ok] - min_log10).sum())
    n = int(ok.sum())
    return {"seeds": n, "separated": held, "fraction": held / n if n else float("nan")}


def _mean(x) -> float:
    v = _arr(x)
    return float(np.mean(v[np.isfinite(v)])) if np.isfinite(v).any() else float("nan")


def judge(result: dict) -> dict:
    """Per group the midpoint, the separation and the constant-λ brackets (each constant's drift counts, per-seed
    drift and median in-R agreement); per cell the original's precondition, each arm's time at the floor, drift
    counts, per-seed drift and median in-R agreement; then :func:`select`. A group's seeds are shared by its cells'
    arms and its constants, so per-seed drift pairs across them (the closed-loop check's power reads that)."""
    sel = result["selection"]
    groups, cells = [], []
    for g in result["groups"]:
        mid = midpoint(g)
        sep = separation(g, sel["min_separation"])
        brackets = {arm: {**drift(m["r_geo_avg"], mid), "median_r_geo_avg": _median(_arr(m["r_geo_avg"]))}
                    for arm, m in g["constants"].items()}
        groups.append({"index": g["index"], "task": g["task"], "tau": g["tau"], "aux_reward": g["aux_reward"],
                       "pi_lr": g["pi_lr"], "midpoint": mid, "separation": sep, "brackets": brackets})
        for c in g["cells"]:
            arms = {}
            for arm, m in c["arms"].items():
                d = drift(m["r_geo_avg"], mid)
                arms[arm] = {"precondition": _mean(m["precondition"]), "at_floor": _mean(m["at_floor"]),
                             "drifted": d["drifted"], "runs": d["runs"], "per_seed": d["per_seed"],
                             "median_r_geo_avg": _median(_arr(m["r_geo_avg"])),
                             "median_ret_avg": _median(_arr(m["ret_avg"]))}
            o, f = arms["original"], arms["fixed"]
            gap = (o["drifted"] / o["runs"] if o["runs"] else np.nan) - (f["drifted"] / f["runs"] if f["runs"] else np.nan)
            cells.append({"group": g["index"], "task": g["task"], "tau": g["tau"], "aux_reward": g["aux_reward"],
                          "pi_lr": g["pi_lr"], "kl_target": c["kl_target"], "kl_site": c["kl_site"], "arms": arms,
                          "precondition": o["precondition"], "gap": float(gap),
                          "median_difference": o["median_r_geo_avg"] - f["median_r_geo_avg"],
                          "separated": bool(sep["fraction"] >= sel["min_separated_seeds"])})
    picked = select(cells, sel)
    for k, c in enumerate(cells):
        c["qualifies"] = k in picked["qualifying"]
        c["selected"] = k in picked["selected"]
    half = lambda a: a["runs"] > 0 and a["drifted"] / a["runs"] > 0.5
    counts = {"cells": len(cells), "precondition_holds": sum(c["precondition"] >= sel["min_precondition"] for c in cells),
              "original_drifts_in_most_runs": sum(half(c["arms"]["original"]) for c in cells),
              "fixed_drifts_in_most_runs": sum(half(c["arms"]["fixed"]) for c in cells),
              "qualifying": len(picked["qualifying"]), "selected": len(picked["selected"])}
    return {"study": "exploration_4", "exploratory": True, "selection": sel, "seeds": result.get("grid", {}).get("seeds"),
            "groups": groups, "cells": cells, "counts": counts,
            "selected": [cells[k] | {"rank": n + 1} for n, k in enumerate(picked["selected"])],
            "fewer_than_declared": len(picked["selected"]) < sel["forward"], "not_run": result.get("not_run", [])}


def select(cells: list[dict], sel: dict) -> dict:
    """The declared selection rule (issue 42 item 2; studies/exploration_4.toml [selection]): a cell qualifies
    where (a) the original's precondition (λ at its floor with the KL EMA below its lower edge) holds on at least
    ``min_precondition`` of post-warm-up steps pooled over its runs and (b) its group's const:0.001 lies at least
    ``min_separation`` log10 below const:1 inside R in at least ``min_separated_seeds`` of seeds. The ``forward``
    qualifying cells with the largest |gap| (original's drift fraction − fixed's), ties broken by the larger
    |median difference| then the declaration's order, go forward. Returns indices into ``cells``."""
    qualifying = [k for k, c in enumerate(cells)
                  if np.isfinite(c["precondition"]) and c["precondition"] >= sel["min_precondition"] and c["separated"]
                  and np.isfinite(c["gap"])]
    key = lambda k: (-abs(cells[k]["gap"]), -abs(np.nan_to_num(cells[k]["median_difference"], nan=0.0)), k)
    return {"qualifying": qualifying, "selected": sorted(qualifying, key=key)[:sel["forward"]]}


def lines(judged: dict) -> list[str]:
    """The judged map in a few printed lines (stdout of the search and of ``--from-json``)."""
    n = judged["counts"]
    out = [f"EXPLORATORY search: {n['cells']} cells; original's precondition on ≥ 50 % of steps in "
           f"{n['precondition_holds']}; the original drifts in most runs in {n['original_drifts_in_most_runs']}, "
           f"the fixed kernel in {n['fixed_drifts_in_most_runs']}; {n['qualifying']} qualify"]
    for c in judged["selected"]:
        o, f = c["arms"]["original"], c["arms"]["fixed"]
        out.append(f"  selected #{c['rank']}: {c['task']} target {c['kl_target']:g} τ {c['tau']:g} site {c['kl_site']} "
                   f"aux {c['aux_reward']:g} π lr {c['pi_lr']:g}: precondition {c['precondition']:.0%}, drift "
                   f"original {o['drifted']}/{o['runs']} vs fixed {f['drifted']}/{f['runs']}")
    if judged["fewer_than_declared"]:
        out.append(f"  fewer cells qualify than the declared number to go forward ({len(judged['selected'])})")
    if judged["not_run"]:
        out.append(f"  groups not run: {', '.join(map(str, judged['not_run']))}")
    return out


#: The closed-loop check's sentinel rule (issue 42 item 6), on the judged map: a cell where a controller that lets
#: λ sink is caught — the group's const:0.001 lies ``min_separation`` log10 below const:1 inside R in at least
#: ``min_separated_seeds`` of seeds (selection rule (b)) while the fixed kernel drifts in at most this fraction of
#: its runs (it holds there).
SENTINEL_FIXED_MOST = 0.25


#: At most this many map cells per task serve as sentinels: a check of known power needs few cells, not every one.
SENTINEL_PER_TASK = 1


def sentinels(judged: dict, confirmed: list[dict] | None = None) -> list[dict]:
    """The sentinel cells: per task, the :data:`SENTINEL_PER_TASK` separated cells where the fixed kernel holds
    (drifts in at most :data:`SENTINEL_FIXED_MOST` of its runs), ranked by the fixed kernel's drift fraction (lowest
    first), then the group's separation fraction (highest first), then the map's order; plus the confirmation's
    cells whose verdict is 'reproduced, the fix holds' (``confirmed``: judged confirmation cells)."""
    groups = {g["index"]: g for g in judged["groups"]}
    ranked: dict[str, list] = {}
    for n, c in enumerate(judged["cells"]):
        f = c["arms"]["fixed"]
        if c["separated"] and f["runs"] and f["drifted"] / f["runs"] <= SENTINEL_FIXED_MOST:
            key = (f["drifted"] / f["runs"], -groups[c["group"]]["separation"]["fraction"], n)
            ranked.setdefault(c["task"], []).append((key, c))
    out = []
    for task in ranked:
        for _key, c in sorted(ranked[task], key=lambda kc: kc[0])[:SENTINEL_PER_TASK]:
            f = c["arms"]["fixed"]
            out.append({k: c[k] for k in ("group", "task", "tau", "aux_reward", "pi_lr", "kl_target", "kl_site")}
                       | {"why": "the fixed kernel holds; λ held at 0.001 drifts", "fixed_drifted": f["drifted"],
                          "runs": f["runs"]})
    for c in confirmed or []:
        if c.get("verdict") == Verdict.REPRODUCED_FIX_HOLDS:
            out.append({k: c[k] for k in ("task", "tau", "aux_reward", "pi_lr", "kl_target", "kl_site")}
                       | {"why": "confirmed: the original drifts and the fix holds"})
    return out
