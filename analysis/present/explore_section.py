"""The fourth study in words: the collapse map (EXPLORATORY search) and its confirmation (pre-registered), read
from their committed judged JSONs (analysis/judge/explore_study.py, analysis/judge/confirm_study.py).

Every number printed here is computed from those files; nothing is typed in. The map's counts are descriptive
(the search is exploratory); only the confirmation's cells carry a test and a verdict word.
"""

from __future__ import annotations

import json
from pathlib import Path

from analysis.judge.explore_study import SENTINEL_FIXED_MOST as HOLDS_AT_MOST
from repro.core.paths import JUDGED_CONFIRMATION, JUDGED_MAP

MAP, CONFIRMATION = JUDGED_MAP, JUDGED_CONFIRMATION
# A cell's kernel "drifts" when most of its runs drift; it "holds" when at most HOLDS_AT_MOST of them do (the
# sentinel rule's bound).


def committed(path: Path = MAP) -> dict | None:
    """A committed judged JSON (None where absent)."""
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _frac(arm: dict) -> float:
    return arm["drifted"] / arm["runs"] if arm["runs"] else float("nan")


def per_task(judged: dict) -> dict[str, dict]:
    """Per task: cells, cells with the precondition (λ at the original's floor with a quiet KL on at least the
    selection's fraction of post-warm-up steps), and among those and the others how often each kernel drifts in
    most runs, and where one drifts while the other holds."""
    need = judged["selection"]["min_precondition"]
    out: dict[str, dict] = {}
    for c in judged["cells"]:
        t = out.setdefault(c["task"], {k: 0 for k in ("cells", "pre", "pre_original", "pre_fixed", "pre_fix_helps",
                                                        "pre_fix_hurts", "off_fixed_only", "off_original_only")})
        o, f = _frac(c["arms"]["original"]), _frac(c["arms"]["fixed"])
        t["cells"] += 1
        if c["precondition"] >= need:
            t["pre"] += 1
            t["pre_original"] += o > 0.5
            t["pre_fixed"] += f > 0.5
            t["pre_fix_helps"] += o > 0.5 and f <= HOLDS_AT_MOST
            t["pre_fix_hurts"] += f > 0.5 and o <= HOLDS_AT_MOST
        else:
            t["off_fixed_only"] += f > 0.5 and o <= HOLDS_AT_MOST
            t["off_original_only"] += o > 0.5 and f <= HOLDS_AT_MOST
    return out


def dose(judged: dict) -> dict[str, dict[str, float]]:
    """Per task, per constant λ: the mean over groups of the fraction of runs drifting (the dose-response)."""
    out: dict[str, dict[str, list]] = {}
    for g in judged["groups"]:
        for arm, b in g["brackets"].items():
            out.setdefault(g["task"], {}).setdefault(arm, []).append(_frac(b))
    return {t: {a: sum(v) / len(v) for a, v in arms.items()} for t, arms in out.items()}


def brief(judged: dict | None, confirmation: dict | None = None) -> list[str]:
    """The In brief's first bullets: what the map says, then the confirmation's verdict (empty without a map)."""
    if judged is None:
        return []
    tasks = per_task(judged)
    parts = [f"{t}: {n['pre']} of {n['cells']} cells; there the original drifts in most runs in {n['pre_original']}, "
             f"the fixed kernel in {n['pre_fixed']}; the fix holds where the original drifts in {n['pre_fix_helps']}, "
             f"the reverse in {n['pre_fix_hurts']}" for t, n in tasks.items()]
    off = "; ".join(f"{t} {n['off_fixed_only']} (the original alone: {n['off_original_only']})" for t, n in tasks.items())
    d = dose(judged)
    doses = "; ".join(f"{t}: " + ", ".join(f"λ {a.split(':')[1]} {v:.0%}" for a, v in arms.items())
                      for t, arms in d.items())
    out = [f"- **Where the fix matters** (fourth study, the collapse map: an EXPLORATORY search, "
           f"{judged['counts']['cells']} cells × {judged['seeds']} seeds; a run drifts when its in-R agreement falls below the "
           f"midpoint of λ held at 1 and at 0.001): the original's precondition — λ at its floor with a quiet KL — "
           f"occurred in {'; in '.join(parts)} (holds: at most {HOLDS_AT_MOST:.0%} of runs drift). Where the "
           f"precondition is absent, the fixed kernel drifts while the original holds in {off} cells. Constant λ, "
           f"mean fraction of runs drifting over groups: {doses}."]
    if confirmation:
        cells = "; ".join(
            f"{c['task']} target {c['kl_target']:g} τ {c['tau']:g} {c['kl_site']} aux {c['aux_reward']:g} π lr "
            f"{c['pi_lr']:g}: original {c['arms']['original']['drifted']}/{c['arms']['original']['runs']} vs fixed "
            f"{c['arms']['fixed']['drifted']}/{c['arms']['fixed']['runs']}, discordant {c['primary']['only_first']}:"
            f"{c['primary']['only_second']}, Holm p {c['primary']['p_holm']:.2g} — **{c['verdict']}**"
            for c in confirmation["cells"])
        out.append(f"- **Confirmed on fresh seeds** (pre-registered after the search; exact McNemar, Holm over "
                   f"{len(confirmation['cells'])} cells): {cells}. Overall: **{confirmation['verdict']}** in the "
                   "cells the search selected (the largest original-vs-fixed gaps, not a random draw of regimes).")
    return out
