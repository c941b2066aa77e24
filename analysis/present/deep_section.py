"""The report's section on the third study (the deep loop, issue 34): markdown from the study's JSON.

Pure functions of the JSON that ``python -m analysis study --deep --json`` writes (the committed H200 result is
``studies/results/preregistered_3_cupy.json``), of the pre-registration's primary cell and of the contract the
caller hands in (the compared controllers' floors, ceilings and tolerances: :func:`levels`); every number is read
from them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from repro.core.contract import Contract
from repro.core.paths import ROOT

COMMITTED = ROOT / "studies" / "results" / "preregistered_3_cupy.json"
CALIBRATION = ROOT / "studies" / "results" / "preregistered_3_calibration.json"
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
    """The primary cell's KL target (nats) from the pre-registration (None where it cannot be read)."""
    return cell_kl_target("primary")


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _ci(a: dict) -> str:
    return f"{_pct(a['fraction'])} [{_pct(a['ci_low'])}, {_pct(a['ci_high'])}]"


def _p(x: float | None) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2g}"


def _median(values) -> float:
    arr = np.array([np.nan if v is None else v for v in values], dtype=float)
    return float(np.nanmedian(arr)) if np.isfinite(arr).any() else float("nan")


def prereg_toml() -> dict | None:
    """The third study's pre-registration (None where it cannot be read)."""
    import tomllib

    try:
        return tomllib.loads((ROOT / "studies" / "preregistered_3.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None


def cell_kl_target(name: str, prereg: dict | None = None) -> float | None:
    """A declared cell's KL target (nats): its own, else the primary cell's (None where it cannot be read)."""
    prereg = prereg_toml() if prereg is None else prereg
    if not prereg:
        return None
    own = next((c for c in prereg.get("cells", []) if c.get("name") == name), {})
    value = own.get("kl_target", prereg.get("primary", {}).get("kl_target"))
    return None if value is None else float(value)


def levels(names, contract: Contract) -> dict[str, dict[str, float]]:
    """Per controller of ``names`` that ``contract`` documents with a floor and a ceiling: its floor, ceiling (λ)
    and dead-zone tolerance (the original lowers λ while the KL EMA is below target/tolerance)."""
    out = {}
    for n in names:
        c = contract.controllers.get(n)
        if c is not None and c.has("floor") and c.has("ceiling") and c.has("tolerance") \
                and c.bound("floor") is not None and c.bound("ceiling") is not None:
            out[n] = {"floor": c.value("floor"), "ceiling": c.value("ceiling"), "tolerance": c.value("tolerance")}
    return out


def five_words(result: dict, lv: dict) -> dict[str, dict]:
    """The study re-read in the five verdict words per cell (:func:`analysis.judge.deep_study.reread`); empty
    where the contract documents no floor for the compared pair (``lv``: :func:`levels` of the pair)."""
    from analysis.judge.deep_study import reread

    if not all(n in lv for n in result["pair"]):
        return {}
    return reread(result, {n: x["floor"] for n, x in lv.items()})


def _g(x: float | None) -> str:
    return "—" if x is None else f"{x:g}"


def _runs(k: int, n: int) -> str:
    """k of n runs, in words."""
    return f"none of its {n} runs" if k == 0 else f"all {n} of its runs" if k == n else f"{k} of its {n} runs"


def _of(k: int, n: int) -> str:
    return f"all {n}" if k == n and n else f"{k} of {n}"


def _kl_edge(kl: float, target: float | None, tolerance: float) -> str:
    """The KL EMA set against the original's lower band edge target/tolerance (nats)."""
    if target is None:
        return f"{kl:.3g} nats"
    edge = target / tolerance
    side = "below" if kl < edge else "at or above"
    return f"{kl:.3g} nats, {side} the original's lower edge target/{tolerance:g} = {edge:.3g}"


def precondition_absent(result: dict, cell: str, lv: dict) -> str:
    """Why a cell's precondition is absent, read from the JSON: the original's λ at its floor (median run per
    evaluation after the warm-up; runs that ended there), both kernels' λ at their ceiling the same ways, the
    median final λ and the median KL EMA at the end."""
    from analysis.judge.deep_study import final_lambda_at, median_lambda_at

    first, second = result["pair"]
    c = result["cells"][cell]
    a, b = c["arms"][first], c["arms"][second]
    fo, fl = lv[first]["floor"], lv[first]["ceiling"]
    k, n = median_lambda_at(c, first, fo, "floor")
    kf, runs = final_lambda_at(a, fo)
    ceil = {x: median_lambda_at(c, x, lv[x]["ceiling"], "ceiling") for x in (first, second)}
    ends = {x: final_lambda_at(c["arms"][x], lv[x]["ceiling"]) for x in (first, second)}
    both = all(kc == nc and nc for kc, nc in ceil.values()) and len({lv[x]["ceiling"] for x in ceil}) == 1
    at_ceiling = (f"λ sat at its ceiling {fl:g} at every one of the {n} evaluations after the warm-up (median run) under "
                  "either kernel" if both else
                  "; ".join(f"the {x}'s median run at its ceiling {lv[x]['ceiling']:g} at {_of(*ceil[x])} evaluations "
                            f"after the warm-up" for x in (first, second)))
    return (f"the original's median run sat at its floor {fo:g} at {_of(k, n)} evaluations after the warm-up and "
            f"{_runs(kf, runs)} ended there; {at_ceiling}, and ended there in {_runs(*ends[first])} ({first}) and "
            f"{_runs(*ends[second])} ({second}); median final λ {_median(a['per_seed']['final_lambda']):.3g} / "
            f"{_median(b['per_seed']['final_lambda']):.3g}; the median KL EMA at the end "
            f"{_kl_edge(_final(a, 'kl_ema'), cell_kl_target(cell), lv[first]['tolerance'])} "
            f"(KL target {_g(cell_kl_target(cell))})")


def precondition_held(result: dict, cell: str, lv: dict, word) -> str:
    """A cell where the original's λ sat at its floor, read from the JSON: how many of its runs ended at the floor,
    its median run's evaluations there, the KL EMA it saw, both kernels' collapse with the paired test, and the
    five-word reading against the reference (or why there is none)."""
    from analysis.judge.deep_study import REFERENCE, final_lambda_at, median_lambda_at

    first, second = result["pair"]
    c = result["cells"][cell]
    a, b = c["arms"][first], c["arms"][second]
    floor = lv[first]["floor"]
    kf, runs = final_lambda_at(a, floor)
    k, n = median_lambda_at(c, first, floor, "floor")
    m = c["mcnemar"]
    target = cell_kl_target(cell)
    reading = (f": **{word}** against λ held at {REFERENCE.split(':')[1]}" if word else
               f"; the cell ran no {REFERENCE} arm, so no five-word reading")
    return (f"{cell} (KL target {_g(target)}): the original's final λ at its floor {floor:g} in {_pct(kf / runs)} of runs "
            f"({kf} of {runs}; its median run there at {_of(k, n)} evaluations after the warm-up, its median KL EMA "
            f"at the end {_kl_edge(_final(a, 'kl_ema'), target, lv[first]['tolerance'])}); collapse {first} "
            f"{_pct(a['fraction'])} against {second} {_pct(b['fraction'])} (discordant {m['only_first']}:"
            f"{m['only_second']}, exact McNemar p {_p(m['p'])}, Holm {_p(m.get('p_holm'))}){reading}")


def headline(result: dict, lv: dict) -> str:
    """A few sentences, from the primary cell: the verdict in the five words (:mod:`analysis.judge.verdict_words`)
    with what it rests on, the primary endpoint's comparison, and the cells where the precondition occurred
    (``lv``: :func:`levels` of the compared pair)."""
    h, c = result["headline"], result["cells"].get("primary")
    if not c or "p" not in h:
        return "The deep loop's primary cell did not run."
    words = five_words(result, lv)
    a, b = (c["arms"][x] for x in result["pair"])
    m = c["mcnemar"]
    compared = (f"the original collapses in {_ci(a)} of runs, the fixed kernel in {_ci(b)} (discordant "
                f"{m['only_first']}:{m['only_second']}, exact McNemar p {_p(m['p'])}, Holm {_p(m.get('p_holm'))})")
    r = words.get("primary")
    if r is None:  # no documented floor for the pair: the pre-registered reading alone
        return f"primary cell ({a['runs']} seeds): {compared}: pre-registered reading **{h['verdict']}**."
    from analysis.judge.verdict_words import Verdict

    word = r["verdict"]
    if word == Verdict.PRECONDITION_ABSENT:
        why = precondition_absent(result, "primary", lv)
    elif word is None:
        why = "the precondition occurred; the cell ran no reference arm"
    else:
        o, f = r["original_vs_reference"], r["fixed_vs_reference"]
        why = (f"against λ held at {r['reference'].split(':')[1]}: original {o['only_first']}:{o['only_second']} "
               f"(p {_p(o['p'])}), fixed {f['only_first']}:{f['only_second']} (p {_p(f['p'])}), exact McNemar")
    held = [n for n, x in words.items() if n != "primary" and x["precondition"]]
    where = ("Where the original's λ did sit at its floor: " + "; ".join(
        precondition_held(result, n, lv, words[n]["verdict"]) for n in held)) if held else \
        "In no other cell did the original's λ sit at its floor"
    return (f"primary cell ({a['runs']} seeds): **{word}** — {why}. Primary endpoint: {compared}. {where}.")


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


def reading(result: dict, lv: dict, contract: Contract) -> list[str]:
    """What the cells say, each number read from the JSON: where λ went, the exploratory arms whose λ was lost
    (with whether ``contract`` documents them without floor and ceiling), the constant-λ bracket, the cells where the
    original's λ sat at its floor (``lv``: :func:`levels` of the compared pair)."""
    from analysis.judge.deep_study import median_lambda_at

    first, second = result["pair"]
    p = result["cells"].get("primary")
    if not p or first not in p["arms"]:
        return []
    arms = p["arms"]
    at_floor = "; ".join(f"{x} {_of(*median_lambda_at(p, x, lv[x]['floor'], 'floor'))} (floor {lv[x]['floor']:g})"
                         for x in (first, second) if x in lv)
    out = [f"- **Where λ went (primary cell).** Median final λ: {first} {_median(arms[first]['per_seed']['final_lambda']):.3g}, "
           f"{second} {_median(arms[second]['per_seed']['final_lambda']):.3g}; the median KL EMA they saw at the end: "
           f"{_final(arms[first], 'kl_ema'):.3g} and {_final(arms[second], 'kl_ema'):.3g} nats (KL target "
           f"{_g(primary_kl_target())})" + (f"; evaluations after the warm-up at which the median run's λ sat at its "
                                            f"floor: {at_floor}" if at_floor else "") + "."]
    entries = contract.controllers
    for arm, v in arms.items():
        fin = _values(v["per_seed"]["final_lambda"])
        if np.isfinite(fin).any():
            continue
        geo = _values(v["per_seed"]["time_avg_geo"])
        c = entries.get(arm)
        unbounded = (" (its contract documents no floor and no ceiling)" if c is not None and c.has("floor")
                     and c.has("ceiling") and c.bound("floor") is None and c.bound("ceiling") is None else "")
        out.append(f"- **λ lost ({arm}, exploratory arm):** final λ not a finite float32 in "
                   f"{_of(int((~np.isfinite(fin)).sum()), fin.size)} runs{unbounded}; the time-averaged probe agreement "
                   "is not finite in "
                   f"{_of(int((~np.isfinite(geo)).sum()), geo.size)} runs.")
    consts = [a for a in arms if a.startswith("const:")]
    if consts:
        fired = [a.split(":")[1] for a in consts if arms[a]["collapses"]]
        quiet = [a.split(":")[1] for a in consts if not arms[a]["collapses"]]
        out.append("- **The constant-λ bracket (primary cell):** " + ", ".join(f"λ = {a.split(':')[1]} {_ci(arms[a])}"
                                                                             for a in consts)
                   + ": the endpoint fires" + (f" in some runs at λ = {', '.join(fired)}" if fired else " in no run")
                   + (f" and in none at λ = {', '.join(quiet)}" if fired and quiet else "") + ".")
    words = five_words(result, lv)
    for n, r in words.items():
        if r["precondition"]:
            c = result["cells"][n]
            const = [f"λ held at {a.split(':')[1]} {_ci(c['arms'][a])}" for a in c["arms"] if a.startswith("const:")]
            out.append(f"- **Where the original's λ sat at its floor.** {precondition_held(result, n, lv, r['verdict'])}"
                       + (f"; {', '.join(const)}" if const else "") + ".")
    return out


#: The descriptives the pre-registration promises ([endpoint]: "Also reported, descriptive"), each by the per-run
#: key of the study's JSON (``per_seed``) that holds it, averaged over the evaluations after the warm-up unless
#: said; a key the JSON lacks is reported as not recorded.
DESCRIPTIVES = {
    "argmax-match fraction (probe)": "time_avg_match",
    "arithmetic mean agreement (probe)": "time_avg_arith",
    "log10 geometric agreement (minibatch)": "time_avg_mb_geo",
    "tied probe states (sum over the evaluations)": "ties",
    "1st-percentile log10 agreement (probe)": "time_avg_p01",
    "fraction of steps with λ at the floor": "time_at_floor",
}


def descriptives(result: dict, lv: dict) -> list[str]:
    """The pre-registered descriptives per cell for the compared pair (median over runs), the median run's λ at
    its floor per evaluation (``lv``: :func:`levels` of the pair), the KL the controller saw; then which
    descriptives the JSON does not record and what it holds in their place."""
    from analysis.judge.deep_study import median_lambda_at

    first, second = result["pair"]
    arms = [a for c in result["cells"].values() for a in (first, second) if a in c["arms"]]
    keys = {name: key for name, key in DESCRIPTIVES.items()
            if arms and all(key in c["arms"][a]["per_seed"] for c in result["cells"].values()
                            for a in (first, second) if a in c["arms"])}
    absent = [name for name in DESCRIPTIVES if name not in keys]
    out = ["| cell | arm | " + " | ".join(f"{name}, median run" for name in keys)
           + " | median run's λ at its floor (evaluations after the warm-up) | median KL EMA at the end (nats) |",
           "|---|---|" + "---|" * len(keys) + "---|---|"]
    for n, c in result["cells"].items():
        for a in (first, second):
            if a not in c["arms"]:
                continue
            v = c["arms"][a]
            floor = _of(*median_lambda_at(c, a, lv[a]["floor"], "floor")) if a in lv else "—"
            out.append(f"| {n} | {a} | " + " | ".join(f"{_median(v['per_seed'][k]):.3g}" for k in keys.values())
                       + f" | {floor} | {_final(v, 'kl_ema'):.3g} |")
    if absent:
        out += ["", f"Not recorded per run in the study's JSON, though pre-registered: {', '.join(absent)}."]
        inc = result.get("incident") or {}
        after = [s > result["cells"]["primary"]["warmup"] for s in inc.get("eval_steps", [])]
        p01 = {a: [x for x, keep in zip(r.get("probe_log10_p01", []), after, strict=False) if keep and x is not None]
               for a, r in inc.get("runs", {}).items()}
        if any(p01.values()):
            out.append(f"The 1st percentile is kept for the incident figure's runs alone (primary cell, seed "
                       f"{inc['seed']}): its lowest value over the evaluations after the warm-up, "
                       + ", ".join(f"{a} {min(x):.3g}" for a, x in p01.items() if x) + " (log10).")
        out.append("In place of each run's time at the floor the table gives the median run's λ per evaluation.")
    return out


def calibration(path: Path = CALIBRATION) -> dict | None:
    """The committed calibration JSON of the third study (None where absent)."""
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def caveats(result: dict, calib: dict | None, prereg: dict | None) -> str:
    """The caveats, each read from the calibration, the pre-registration or the study's JSON."""
    parts = []
    if calib:
        beta = calib["beta"]
        frac = next((v["fraction_meeting_endpoint"] for k, v in calib["betas"].items() if float(k) == beta), None)
        if frac is not None:
            parts.append(f"the calibration's positive control (λ = 0, β = {beta:g}) met the endpoint in {_pct(frac)} of "
                         f"its {calib['seeds']} pilot runs")
        used = (prereg or {}).get("calibrated", {}).get("region_threshold")
        if used is not None and used != calib["region_threshold"]:
            parts.append(f"the region R's threshold is {used:g} rad/s (the pilot's), not the calibration rule's "
                         f"{calib['region_threshold']:.3g} rad/s")
    else:
        parts.append("the calibration's JSON is absent: its positive control is not restated here")
    outside = [n for n, c in result["cells"].items() if c.get("exploratory")]
    if outside:
        parts.append(f"exploratory, outside the {result['endpoint']['correction']} family: {', '.join(outside)}")
    if prereg:
        sites = dict.fromkeys([prereg["primary"].get("kl_site")] + [c["kl_site"] for c in prereg.get("cells", [])
                                                                    if "kl_site" in c])
        parts.append(f"KL sites run: {', '.join(s for s in sites if s)} (the pre-registration's [trim] names those "
                     "left out)")
    inc = result.get("incident")
    if inc:
        parts.append(f"the incident figure shows seed {inc['seed']} of the primary cell ({inc['why']})")
    return "Caveats: " + "; ".join(parts) + "."


def section(result: dict | None, contract: Contract, figures: bool = True, calib: dict | None = None) -> list[str]:
    """The section's markdown lines, the compared controllers' levels read from ``contract`` (``calib``: the
    calibration's JSON, default the committed one)."""
    if not result:
        return ["## The incident end to end: the deep loop (third study)", "",
                "No committed result (studies/results/preregistered_3_cupy.json)."]
    calib = calibration() if calib is None else calib
    lv = levels(result["pair"], contract)
    secs = result.get("loop_seconds", {})
    out = ["## The incident end to end: the deep loop (third study, pre-registered)", "",
           "In the " + headline(result, lv), "",
           "The verdict words, read after the fact (not pre-registered): a cell's precondition occurred where the "
           "original's median run sat at its floor on at least half the evaluations after the warm-up; the reference "
           "is λ held at its ceiling. The JSON keeps λ per run as its final value only, and per evaluation as the "
           "median over runs: the precondition is read from those. " + " ".join(f"*{w}*: {m}." for w, m in _meanings()), "",
           f"Pre-registration `{result['prereg']}` (committed with its calibration before any comparison). "
           f"Primary endpoint: probe batch log10 geometric agreement below {result['endpoint']['threshold']:g} for "
           f"{result['endpoint']['consecutive']} consecutive evaluations after the warm-up; exact McNemar per cell, "
           f"{result['endpoint']['correction']} over {len(result['family'])} cells at α = {result['endpoint']['alpha']:g}. "
           f"Run on {result['device']} (torch {result['torch']}, step in a CUDA graph: {result['graph']}, controller "
           f"launch {result['mode']}): " + ", ".join(f"{k} {v:.1f} s" for k, v in secs.items())
           + (f"; not run: {', '.join(result['not_run'])}" if result.get("not_run") else "") + ".", "",
           "### Per cell (primary endpoint; secondary endpoints labelled)", "", *cell_table(result), "",
           *where_lambda_went(result), "", *fix_worse(result), "", *reading(result, lv, contract), "",
           caveats(result, calib, prereg_toml()), "",
           "### Pre-registered descriptives (original and fixed, every cell)", "", *descriptives(result, lv), "",
           "### Primary cell, every arm (constant λ the bracket; single fixes and peers exploratory)", "",
           *arm_table(result), ""]
    if figures:
        out += [f"![{cap}]({name})" for name, cap in FIGURES.items()] + [""]
    return out


def _meanings():
    from analysis.judge.verdict_words import MEANING

    return MEANING.items()


def _values(xs) -> np.ndarray:
    return np.array([np.nan if x is None else x for x in xs], dtype=float)
