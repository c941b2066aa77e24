"""The report's section on the learning-loop study (issue 13): markdown built from the study's JSON.

Pure functions; every number is read from the JSON (see :mod:`repro.learning.prereg`).
"""

from __future__ import annotations

import numpy as np

#: Figures of the section: file name -> caption.
FIGURES = {
    "fig11_study.png": "The learning loop (issue 13): collapse fraction per controller with its 95 % Clopper–Pearson "
    "interval (both criteria), and q_pi_agree (mean and minimum over visited states), λ and episode return over "
    "steps (median; band: interquartile range for fixed and original), Q-learning and an actor on gymnasium tasks.",
    "fig12_study_grid.png": "The learning loop per grid point of the declared conflicts (entropy bonus H, auxiliary "
    "actor reward aux, π's state view v): fraction of runs whose minimum agreement over visited states falls below "
    "the pre-registered threshold; ✓ marks grid points where the constant-λ bracket is wide enough.",
}


def _pct(x: float) -> str:
    return f"{x:.1%}"


def collapse_table(result: dict) -> list[str]:
    """Markdown table: env × controller, both criteria with intervals, persisting/recovered, final agreement."""
    lines = ["| environment | controller | runs | mean-agreement collapse [95 % CI] | persists / recovers "
             "| min-agreement collapse [95 % CI] | persists / recovers | diverged | λ hit 0 | median final q_pi_agree |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for env, block in result["envs"].items():
        for name, e in block["controllers"].items():
            kept = [x for x in e["final_agree_mean_per_grid_point"] if x is not None and np.isfinite(x)]
            final = f"{np.median(kept):.3f}" if kept else "— (diverged)"
            lines.append(f"| {env} | {name} | {e['runs']} | {_pct(e['collapse_fraction'])} [{_pct(e['ci_low'])}, "
                         f"{_pct(e['ci_high'])}] | {e['persisting']} / {e['recovered']} | "
                         f"{_pct(e['deep_collapse_fraction'])} [{_pct(e['deep_ci_low'])}, {_pct(e['deep_ci_high'])}] | "
                         f"{e['deep_persisting']} / {e['deep_recovered']} | {_pct(e.get('diverged_fraction', 0.0))} | "
                         f"{_pct(e.get('lambda_zero_fraction', 0.0))} | {final} |")
    return lines


def bracket_lines(result: dict) -> list[str]:
    """Per environment and grid point: the constant-λ bracket, and whether it is wide enough (a table)."""
    out = ["| environment | entropy bonus | aux reward | π view | min-agreement collapse λ=0.001 / λ=1 "
           "| mean-agreement collapse λ=0.001 / λ=1 | final agreement gap (λ=1 − λ=0.001) | wide enough |",
           "|---|---|---|---|---|---|---|---|"]
    for env, block in result["envs"].items():
        for r in block["brackets"] or []:
            out.append(f"| {env} | {r['entropy_bonus']:g} | {r['aux_reward']:g} | {r['pi_view']:g} | "
                       f"{_pct(r['deep_collapse_lambda_0.001'])} / {_pct(r['deep_collapse_lambda_1'])} | "
                       f"{_pct(r['collapse_lambda_0.001'])} / {_pct(r['collapse_lambda_1'])} | {r['agree_gap']:+.3f} | "
                       f"{'yes' if r['wide'] else 'no'} |")
    if len(out) == 2:
        return ["(No bracket: the study ran without const:0.001 and const:1.)"]
    n_wide = sum(r["wide"] for b in result["envs"].values() for r in b["brackets"] or [])
    n_all = sum(len(b["brackets"] or []) for b in result["envs"].values())
    return [*out, "", f"The bracket is wide enough at {n_wide} of {n_all} grid points."]


def where_it_collapses(result: dict, name: str = "original", at_least: float = 0.05) -> list[str]:
    """Grid points where ``name``'s min-agreement collapse fraction reaches ``at_least``, beside the others'."""
    out = []
    for env, block in result["envs"].items():
        ctrl = block["controllers"]
        if name not in ctrl:
            continue
        others = [n for n in ("fixed", "const:0.001", "const:1") if n in ctrl and n != name]
        hits = [i for i, f in enumerate(ctrl[name]["deep_fraction_per_grid_point"]) if f >= at_least]
        if not hits:
            out.append(f"- {env}: {name}'s min-agreement collapse stays below {_pct(at_least)} at every grid point.")
            continue
        for i in hits:
            p = block["grid_points"][i]
            vals = ", ".join(f"{n} {_pct(ctrl[n]['deep_fraction_per_grid_point'][i])}" for n in others)
            out.append(f"- {env}, entropy bonus {p['entropy_bonus']:g}, aux reward {p['aux_reward']:g}, π view "
                       f"{p['pi_view']:g}: {name} {_pct(ctrl[name]['deep_fraction_per_grid_point'][i])} ({vals}).")
    return out


def mean_vs_min(result: dict) -> list[str]:
    """Which agreement the incident's 1e-22 most likely was, from the study's own numbers."""
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
    if not lows:
        return []
    lo, mn = min(lows), min(means)
    return [f"Mean against minimum (controllers without a diverged run): the lower quartile of the minimum over "
            f"visited states reaches 10^{lo[0]:.1f} "
            f"({lo[1]}, {lo[2]}), while the lower quartile of the mean over visited states never falls below "
            f"{mn[0]:.3f} ({mn[1]}, {mn[2]}). A mean of probabilities over states cannot reach 1e-22 unless every "
            "state does; a minimum (or one state's value) gets there as soon as one state's logits run away. The "
            "incident's 1e-22 was most likely such a minimum or single-state value, not an average agreement."]


def section(result: dict, figures: bool = True) -> list[str]:
    """The section's markdown lines (with ``figures``, the figures linked under the names in :data:`FIGURES`)."""
    p = result["parameters"]
    L, c = p["learning"], p["collapse"]
    kind = ("the pre-registered study" if result["as_preregistered"]
            else "a reduced run of the pre-registered parameters (fewer steps, seeds, grid points and controllers)")
    lines = ["## The learning loop: Q-learning and an actor on gymnasium tasks (issue 13)", "",
             "The closed loop of the report is the toy. Here the loop learns: tabular Q-learning and a softmax actor "
             "(one-step actor-critic with a learned baseline, entropy bonus and an auxiliary reward as declared "
             "conflicts, π possibly seeing less state than Q) on gymnasium's toy-text tasks, coupled by λ × the "
             "distillation gradient toward Q's Boltzmann policy; the KL EMA goes into the KL slot and the compiled "
             "kernel sets λ every step (`python -m analysis study`).", "",
             f"- {kind}, parameters from `{result['preregistration']}`; backend `{result['backend']}`; seeds "
             f"{result['seeds'][0]}–{result['seeds'][1] - 1}; {L['steps']} steps per run; grid "
             + ", ".join(f"{k} ∈ {{{', '.join(f'{x:g}' for x in v)}}}" for k, v in p["grid"].items()) + ".",
             f"- Collapse (pre-registered): mean over visited states of π(Q's greedy action) below "
             f"{c['mean_fraction_of_uniform']:g}/A at any evaluation after step {c['warmup']}; min-agreement "
             f"collapse: the minimum over visited states below {c['min_threshold']:g}. A collapse *persists* when "
             "the last evaluation is still below, else it *recovers*. A run *diverges* when λ or π's logits stop "
             "being finite (a rule without a ceiling can take λ to inf); *λ hit 0*: λ reached exactly 0, where it "
             "stays (the suite's λ ≤ 0 guard holds it; a peer's next step multiplies 0).", "", *collapse_table(result), "",
             "Can a controller matter? The constant-λ bracket per grid point (λ = 0.001 against λ = 1; wide enough: "
             "disjoint 95 % intervals for a criterion, or a gap in median final agreement of at least "
             f"{c['bracket_min_agreement_gap']:g}):", "", *bracket_lines(result), "",
             "Where the original collapses (min-agreement criterion, at least 5 % of a grid point's seeds):", "",
             *where_it_collapses(result), "", *mean_vs_min(result), ""]
    for name, caption in FIGURES.items() if figures else ():
        lines += [f"![{caption}]({name})", ""]
    return lines
