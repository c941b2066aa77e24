"""Judgement of the closed-loop check (``study --deep --kernel K.cu``; issue 42 item 6): the pairs per sentinel cell
from a power computation on the collapse map, and the verdict on the candidate's runs beside the fixed kernel's.

Pure: the judged map (analysis/judge/explore_study.py) and the check's runs (repro/learning/deep/confirm.py
``closed_loop``) in, plain data out. The sentinel cells are the map's (:func:`explore_study.sentinels`): there
the fixed kernel holds and λ held at 0.001 drifts, so a candidate that lets λ sink to the floor is caught with
the power :func:`plan` computes.
"""

from __future__ import annotations

from analysis.judge.confirm_study import discordant, discordant_rates, paired, pairs_for_power
from analysis.judge.deep_study import clopper_pearson, holm
from analysis.judge.explore_study import LOW, drift

#: Power per sentinel cell against a controller held at the floor (λ = 0.001, the map's LOW bracket).
POWER = 0.9
#: The most pairs per sentinel cell (the power reached there is printed where it falls short).
MOST = 256
#: The settings that name a cell of the map.
SETTINGS = ("task", "tau", "aux_reward", "pi_lr", "kl_target", "kl_site")


def _map_cell(judged_map: dict, cell: dict) -> tuple[dict, dict]:
    """The map's cell with ``cell``'s settings and its group (ValueError where the map has none)."""
    for c in judged_map["cells"]:
        if all(c[k] == cell[k] for k in SETTINGS):
            group = next((g for g in judged_map["groups"] if g["index"] == c["group"]), None)
            if group is not None:
                return c, group
    raise ValueError(f"no cell {', '.join(f'{k} {cell[k]}' for k in SETTINGS)} in the map")


def plan(judged_map: dict, cells: list[dict], alpha: float, power: float = POWER, most: int = MOST) -> list[dict]:
    """Per sentinel cell: its settings, its group's midpoint (log10; a run drifts below it), the map's drift counts
    of λ held at 0.001 and of the fixed kernel on the group's shared seeds, their discordant counts, and the pairs
    that give ``power`` for the exact McNemar test at α / cells (Bonferroni: Holm's first step, the strictest level
    a cell can face) to find a controller held at the floor drifting in more runs than the fixed kernel, at the
    map's discordant rates (:func:`confirm_study.discordant_rates`); at most ``most`` pairs, with the power reached.
    ValueError where the map lacks a cell or the constants' per-seed drift (a map judged before it kept them)."""
    level = alpha / max(1, len(cells))
    out = []
    for c in cells:
        mc, group = _map_cell(judged_map, c)
        low = group["brackets"].get(LOW, {}).get("per_seed")
        if low is None:
            raise ValueError(f"the map keeps no per-seed drift of {LOW} (judge the search again)")
        fixed = mc["arms"]["fixed"]["per_seed"]
        d = discordant(low, fixed)
        n, reached = pairs_for_power(*discordant_rates(d["original_only"], d["fixed_only"], d["pairs"]), level,
                                     power, most, first_more=True)
        out.append({k: c[k] for k in SETTINGS} | {
            "group": group["index"], "why": c.get("why", ""), "midpoint": group["midpoint"],
            "map": {"pairs": d["pairs"], "floor_only": d["original_only"], "fixed_only": d["fixed_only"],
                    "floor_drifted": sum(1 for x in low if x), "fixed_drifted": sum(1 for x in fixed if x),
                    "runs": sum(1 for x in fixed if x is not None)},
            "level": level, "pairs": n, "power": reached})
    return out


def judge(result: dict, planned: list[dict], alpha: float) -> dict:
    """Per cell of the check's runs (``result["cells"]``, in ``planned``'s order): each arm's drift count with its
    exact 95 % interval, the paired exact McNemar test of the candidate against the fixed kernel, Holm over the
    cells; a cell is ``worse`` where the candidate drifts in more runs (more discordant pairs its way) with Holm p
    below ``alpha``. ``worse`` overall: any cell is (the command's exit 1)."""
    cells = []
    for c, p in zip(result["cells"], planned, strict=True):
        runs = {arm: drift(m["r_geo_avg"], c["midpoint"]) for arm, m in c["arms"].items()}
        arms = {arm: {"drifted": d["drifted"], "runs": d["runs"], "per_seed": d["per_seed"],
                      **dict(zip(("low", "high"), clopper_pearson(d["drifted"], d["runs"]), strict=True))}
                for arm, d in runs.items()}
        cells.append({k: c[k] for k in (*SETTINGS, "midpoint", "pairs")}
                     | {"power": p["power"], "level": p["level"], "map": p["map"], "arms": arms,
                        "test": paired(runs["candidate"]["per_seed"], runs["fixed"]["per_seed"])})
    for c, q in zip(cells, holm([c["test"]["p"] for c in cells]) if cells else [], strict=True):
        t = c["test"]
        t["p_holm"] = q
        c["worse"] = bool(q < alpha and t["only_first"] > t["only_second"])
    return {"study": "closed_loop_check", "alpha": alpha, "power_target": POWER, "cells": cells,
            "worse": any(c["worse"] for c in cells)}


def lines(judged: dict) -> list[str]:
    """The check in printed lines: one per sentinel cell, then the verdict."""
    out = []
    for k, c in enumerate(judged["cells"]):
        a, f, t = c["arms"]["candidate"], c["arms"]["fixed"], c["test"]
        out.append(f"sentinel {k + 1}: {c['task']} target {c['kl_target']:g} τ {c['tau']:g} site {c['kl_site']} aux "
                   f"{c['aux_reward']:g} π lr {c['pi_lr']:g}: drift candidate {a['drifted']}/{a['runs']} vs fixed "
                   f"{f['drifted']}/{f['runs']}, discordant {t['only_first']}:{t['only_second']}, exact McNemar p "
                   f"{t['p']:.3g}, Holm p {t['p_holm']:.3g}; {c['pairs']} pairs: power {c['power']:.3f} against λ "
                   f"held at 0.001 (map: {c['map']['floor_only']}:{c['map']['fixed_only']} of {c['map']['pairs']}) "
                   f"at α {c['level']:.3g}")
    n = sum(c["worse"] for c in judged["cells"])
    out.append(f"closed-loop check: the candidate drifts in more runs than the fixed kernel in {n} of "
               f"{len(judged['cells'])} sentinel cell(s) (Holm p < {judged['alpha']:g})"
               + (" → harmful" if judged["worse"] else ""))
    return out
