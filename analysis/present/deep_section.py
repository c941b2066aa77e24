"""The report's section on the third study (the deep loop, issue 34): markdown from the study's JSON.

Pure functions of the JSON that ``python -m analysis study --deep --json`` writes (the committed H200 result is
``studies/results/preregistered_3_cupy.json``) and of the pre-registration's primary cell; every number is read
from them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from repro.core.paths import ROOT

COMMITTED = ROOT / "studies" / "results" / "preregistered_3_cupy.json"
FIGURES = {
    "fig_deep_cells.png": "The deep loop (third study): per declared cell, the fraction of 100 runs whose probe "
    "batch's log10 geometric agreement stays below the pre-registered threshold for 3 consecutive evaluations, "
    "original, fixed and constant λ, with exact 95 % intervals.",
    "fig_deep_incident.png": "The deep loop's incident figure: the run the pre-registered rule picks (primary cell), "
    "original beside fixed on the same seed: λ, the KL EMA the controller sees, and log10 agreement.",
}


def committed(path: Path = COMMITTED) -> dict | None:
    """The committed study JSON (None where absent)."""
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def primary_kl_target() -> float | None:
    """The primary cell's KL target from the pre-registration (None where it cannot be read)."""
    import tomllib

    try:
        return float(tomllib.loads((ROOT / "studies" / "preregistered_3.toml").read_text())["primary"]["kl_target"])
    except (OSError, KeyError, ValueError, tomllib.TOMLDecodeError):
        return None


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _ci(a: dict) -> str:
    return f"{_pct(a['fraction'])} [{_pct(a['ci_low'])}, {_pct(a['ci_high'])}]"


def _p(x: float | None) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2g}"


def _median(values) -> float:
    arr = np.array([np.nan if v is None else v for v in values], dtype=float)
    return float(np.nanmedian(arr)) if np.isfinite(arr).any() else float("nan")


def headline(result: dict) -> str:
    """One sentence, from the primary endpoint in the primary cell."""
    h, c = result["headline"], result["cells"].get("primary")
    if not c or "p" not in h:
        return "The deep loop's primary cell did not run."
    a, b = (c["arms"][x] for x in result["pair"])
    m = c["mcnemar"]
    verdict = {"not reproduced": "**not reproduced**", "reproduced and supported": "**reproduced, and the fix prevents it**",
               "contradicted": "**contradicted: the fix collapses more**"}.get(h["verdict"], h["verdict"])
    return (f"primary cell ({a['runs']} seeds): the original collapses in {_ci(a)} of runs, the "
            f"fixed kernel in {_ci(b)} (discordant {m['only_first']}:{m['only_second']}, exact McNemar p "
            f"{_p(m['p'])}, Holm {_p(m.get('p_holm'))}): {verdict}.")


def cell_table(result: dict) -> list[str]:
    first, second = result["pair"]
    out = [f"| cell | {first} | {second} | const:0.05 | discordant ({first} only : {second} only) | McNemar p | Holm p | "
           f"secondary: time-avg log10 agreement, median paired difference {first} − {second} (Wilcoxon p) | "
           f"secondary: return, mean difference {second} − {first}, one-sided 95 % lower bound (non-inferior) |",
           "|---|---|---|---|---|---|---|---|---|"]
    for name, c in result["cells"].items():
        arms = c["arms"]
        cell = lambda arm, arms=arms: _ci(arms[arm]) if arm in arms else "—"
        m, w, r = c.get("mcnemar", {}), c.get("wilcoxon_time_avg_geo", {}), c.get("return_noninferiority", {})
        label = name + (" (exploratory)" if c.get("exploratory") else "")
        out.append(f"| {label} | {cell(first)} | {cell(second)} | {cell('const:0.05')} | "
                   f"{m.get('only_first', '—')}:{m.get('only_second', '—')} | {_p(m.get('p'))} | {_p(m.get('p_holm'))} | "
                   f"{w.get('median_difference', float('nan')):+.3f} ({_p(w.get('p'))}) | "
                   f"{r.get('mean_difference', float('nan')):+.1f}, {r.get('lower_bound', float('nan')):+.1f} "
                   f"({'yes' if r.get('noninferior') else 'no'}) |")
    return out


def arm_table(result: dict, cell: str = "primary") -> list[str]:
    out = ["| arm | collapse [95 % CI] | median final λ | median time-avg log10 agreement (probe) | median return |",
           "|---|---|---|---|---|"]
    for arm, a in result["cells"][cell]["arms"].items():
        out.append(f"| {arm} | {_ci(a)} | {_median(a['per_seed']['final_lambda']):.3g} | "
                   f"{a['median_time_avg_geo']:.2f} | {a['median_return']:.1f} |")
    return out


def where_lambda_went(result: dict) -> list[str]:
    """Per cell, the median final λ of the compared pair: where the KL left the adaptive kernels."""
    first, second = result["pair"]
    parts = []
    for name, c in result["cells"].items():
        if first in c["arms"] and second in c["arms"]:
            parts.append(f"{name} {_median(c['arms'][first]['per_seed']['final_lambda']):.3g} / "
                         f"{_median(c['arms'][second]['per_seed']['final_lambda']):.3g}")
    return [f"Median final λ ({first} / {second}) per cell: " + "; ".join(parts) + "."]


def fix_worse(result: dict) -> list[str]:
    first, second = result["pair"]
    worse = [f"{n} ({_pct(c['arms'][second]['fraction'])} vs {_pct(c['arms'][first]['fraction'])}, "
             f"{c['mcnemar']['only_first']}:{c['mcnemar']['only_second']}, p {_p(c['mcnemar']['p'])}, "
             f"Holm {_p(c['mcnemar'].get('p_holm'))})"
             for n, c in result["cells"].items() if "mcnemar" in c
             and c["arms"][second]["collapses"] > c["arms"][first]["collapses"]]
    better = [n for n, c in result["cells"].items() if "mcnemar" in c
              and c["arms"][first]["collapses"] > c["arms"][second]["collapses"]]
    return [f"Cells where the {second} kernel collapses in more runs than the {first}: "
            + ("; ".join(worse) if worse else "none") + f". Cells where the {first} collapses in more: "
            + (", ".join(better) if better else "none") + "."]


def _final(a: dict, key: str) -> float:
    """The last finite value of an arm's median series ``key``."""
    xs = [x for x in a["median_series"][key] if x is not None]
    return xs[-1] if xs else float("nan")


def reading(result: dict) -> list[str]:
    """What the cells say, each number read from the JSON: where λ went, the constant-λ bracket, the cells where λ
    sat at the floors."""
    first, second = result["pair"]
    p = result["cells"].get("primary")
    if not p or first not in p["arms"]:
        return []
    arms = p["arms"]
    out = [f"- **Where λ went (primary cell).** Median final λ: {first} {_median(arms[first]['per_seed']['final_lambda']):.3g}, "
           f"{second} {_median(arms[second]['per_seed']['final_lambda']):.3g}; the median KL EMA they saw at the end: "
           f"{_final(arms[first], 'kl_ema'):.3g} and {_final(arms[second], 'kl_ema'):.3g} nats (KL target "
           f"{primary_kl_target()}): neither kernel's λ stayed low here, so the decay towards the floor that the "
           f"incident needs did not happen in this cell."]
    lost = [a for a, v in arms.items() if math.isnan(_median(v["per_seed"]["final_lambda"]))]
    if lost:
        out.append(f"- **λ lost (exploratory arms):** {', '.join(lost)}: median final λ not a finite float32 "
                   "(no guard, no bound in these rules); their runs' π is then not finite either.")
    bracket = [f"λ = {a.split(':')[1]} {_ci(arms[a])}" for a in ("const:0", "const:0.05", "const:1") if a in arms]
    if bracket:
        out.append("- **The constant-λ bracket (primary cell):** " + ", ".join(bracket) + ": the endpoint fires without "
                   "distillation and with λ held at the fixed kernel's floor; it does not fire at λ = 1.")
    floors = [(n, c) for n, c in result["cells"].items() if first in c["arms"] and second in c["arms"]
              and _median(c["arms"][first]["per_seed"]["final_lambda"]) < 0.01]
    for n, c in floors:
        a, b = c["arms"][first], c["arms"][second]
        const = c["arms"].get("const:0.05")
        out.append(f"- **Where the original's λ ended at its floor ({n}: median final λ "
                   f"{_median(a['per_seed']['final_lambda']):.3g} / {_median(b['per_seed']['final_lambda']):.3g}):** "
                   f"{first} {_ci(a)}, {second} {_ci(b)}" + (f", λ = 0.05 held {_ci(const)}" if const else "")
                   + f"; discordant {c['mcnemar']['only_first']}:{c['mcnemar']['only_second']}.")
    return out


def section(result: dict | None, figures: bool = True) -> list[str]:
    """The section's markdown lines."""
    if not result:
        return ["## The incident end to end: the deep loop (third study)", "",
                "No committed result (studies/results/preregistered_3_cupy.json)."]
    secs = result.get("loop_seconds", {})
    out = ["## The incident end to end: the deep loop (third study, pre-registered)", "",
           "In the " + headline(result), "",
           f"Pre-registration `{result['prereg']}` (committed with its calibration before any comparison). "
           f"Primary endpoint: probe batch log10 geometric agreement below {result['endpoint']['threshold']:g} for "
           f"{result['endpoint']['consecutive']} consecutive evaluations after the warm-up; exact McNemar per cell, "
           f"{result['endpoint']['correction']} over {len(result['family'])} cells at α = {result['endpoint']['alpha']:g}. "
           f"Run on {result['device']} (torch {result['torch']}, step in a CUDA graph: {result['graph']}, controller "
           f"launch {result['mode']}): " + ", ".join(f"{k} {v:.1f} s" for k, v in secs.items())
           + (f"; not run: {', '.join(result['not_run'])}" if result.get("not_run") else "") + ".", "",
           "### Per cell (primary endpoint; secondary endpoints labelled)", "", *cell_table(result), "",
           *where_lambda_went(result), "", *fix_worse(result), "", *reading(result), "",
           "Caveats, from the pre-registration: the calibration's positive control (λ = 0) met the endpoint in a "
           "minority of its runs; the region R's threshold is the pilot's, not the calibration rule's; CartPole's "
           "region and τ were not calibrated (exploratory). Trimmed before the run: the KL "
           "sites 'recent on-policy steps' and 'oldest half of the replay'. The incident figure shows the run the "
           "pre-registered rule picks; where no run of the original collapses it is labelled so.", "",
           "### Primary cell, every arm (constant λ the bracket; single fixes and peers exploratory)", "",
           *arm_table(result), ""]
    if figures:
        out += [f"![{cap}]({name})" for name, cap in FIGURES.items()] + [""]
    return out
