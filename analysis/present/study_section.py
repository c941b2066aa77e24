"""The report's section on the learning-loop study: markdown built from the study's JSON.

Pure functions; every number is read from the JSON (:mod:`analysis.cli.study_runs` writes it) or computed from it by
:mod:`analysis.judge.study_measures`.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from urllib.parse import quote

from analysis.judge import study_measures as sm

#: Figures of the section: file name -> caption.
FIGURES = {
    "fig11_study.png": "The learning loop: collapse fraction per controller with its 95 % Clopper–Pearson "
    "interval (both criteria), and q_pi_agree (mean and minimum over visited states), λ and episode return over "
    "steps (median; band: interquartile range for fixed and original), Q-learning and an actor on gymnasium tasks.",
    "fig12_study_grid.png": "The learning loop per grid point of the declared conflicts (entropy bonus H, auxiliary "
    "actor reward aux, π's state view v): fraction of runs whose minimum agreement over visited states falls below "
    "the pre-registered threshold; ✓ marks grid points where the constant-λ bracket is wide enough.",
}


def _pct(x: float) -> str:
    return f"{x:.1%}"


def _exp10(x: float) -> str:
    """A log10 value as a power of ten: 10^-10.3; beyond ±10⁴ (a logit that ran away, finite still) in
    scientific notation, 10^(-5.6e+16), where a fixed decimal would print 17 digits as if each meant something."""
    return f"10^{x:.1f}" if abs(x) < 1e4 else f"10^({x:.2g})"


def collapse_table(result: dict) -> list[str]:
    """Markdown table: env × controller, both criteria with intervals, persisting/recovered, final agreement."""
    lines = ["| environment | controller | runs | mean-agreement collapse [95 % CI] | persists / recovers "
             "| min-agreement collapse [95 % CI] | persists / recovers | diverged | λ hit 0 | median final q_pi_agree |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for env, block in result["envs"].items():
        for name, e in block["controllers"].items():
            median = sm.final_agreement(e)
            final = "— (diverged)" if math.isnan(median) else f"{median:.3f}"
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
    return [*out, "", "The bracket is wide enough at {} of {} grid points.".format(*sm.wide_brackets(result))]


def where_it_collapses(result: dict, name: str = "original") -> list[str]:
    """Grid points where ``name``'s min-agreement collapse fraction reaches
    :data:`~analysis.judge.study_measures.NAMED_FRACTION`, beside the others'."""
    out = []
    for env, hits in sm.collapse_points(result, name).items():
        block = result["envs"][env]
        ctrl = block["controllers"]
        others = [n for n in ("fixed", "const:0.001", "const:1") if n in ctrl and n != name]
        if not hits:
            out.append(f"- {env}: {name}'s min-agreement collapse stays below {_pct(sm.NAMED_FRACTION)} at every "
                       "grid point.")
            continue
        for i in hits:
            p = block["grid_points"][i]
            vals = ", ".join(f"{n} {_pct(ctrl[n]['deep_fraction_per_grid_point'][i])}" for n in others)
            out.append(f"- {env}, entropy bonus {p['entropy_bonus']:g}, aux reward {p['aux_reward']:g}, π view "
                       f"{p['pi_view']:g}: {name} {_pct(ctrl[name]['deep_fraction_per_grid_point'][i])} ({vals}).")
    return out


def mean_vs_min(result: dict) -> list[str]:
    """Which agreement the incident's 1e-22 most likely was, from the study's own numbers."""
    got = sm.lowest_quartiles(result)
    if got is None:
        return []
    lo, mn = got
    return [f"Mean against minimum (controllers without a diverged run): the lower quartile of the minimum over "
            f"visited states reaches {_exp10(lo[0])} "
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
    lines = ["## The learning loop: Q-learning and an actor on gymnasium tasks", "",
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
             f"Where the original collapses (min-agreement criterion, at least {sm.NAMED_FRACTION * 100:g} % of a grid point's "
             "seeds):", "",
             *where_it_collapses(result), "", *mean_vs_min(result), ""]
    for name, caption in FIGURES.items() if figures else ():
        lines += [f"![{caption}]({name})", ""]
    return lines


# ---- the second study ----

#: Figures of the second study's section: file name -> caption.
FIGURES_2 = {
    "fig13_incident.png": "The incident as it happens in the learning loop (second study, one seed, original beside "
    "fixed): λ, the KL the controller sees (its EMA, with target/tolerance, below which the original decays) and "
    "log10 of the lowest agreement (ties excluded) over the odd states — the states the even-state KL never sees — "
    "at every step, with the minimum criterion's threshold. Left: the first steps (the cold start); right: every "
    "step the run took (its title says how many).",
    "fig14_study2.png": "The second study per regime of the KL axis (where the KL is measured × before/after π's "
    "update): fraction of runs meeting each criterion with its 95 % Clopper–Pearson interval, for fixed, original "
    "and the constant-λ bracket; one row per task.",
}


def _regime_name(r: dict) -> str:
    where = {"visited": "visited state", "replay": "replay sample", "even": "even states only"}[r["kl_site"]]
    return f"{where}, {'before' if r['kl_before'] else 'after'} π's update"


def _crit_name(crit: str) -> str:
    """A criterion with its pre-registered rank: relative (primary), minimum (secondary), …"""
    return f"{crit} ({'primary' if crit == sm.PRIMARY else 'secondary'})"


def _ci(e: dict) -> str:
    return f"{_pct(e['fraction'])} [{_pct(e['ci_low'])}, {_pct(e['ci_high'])}]"


def _p(x: float) -> str:
    return f"{x:.2g}" if x >= 1e-3 else f"{x:.1e}"


def _range(lo_hi: tuple[float, float]) -> str:
    lo, hi = lo_hi
    return _pct(lo) if lo == hi else f"{_pct(lo)}–{_pct(hi)}"


def _range3(lo_hi: tuple[float, float]) -> str:
    lo, hi = lo_hi
    return f"{lo:.3f}" if f"{lo:.3f}" == f"{hi:.3f}" else f"{lo:.3f}–{hi:.3f}"


def headline2(result: dict) -> str:
    """The second study's headline, from its pre-registered primary criterion (relative) alone: per task the
    original's and the fixed kernel's fractions over the regimes of the KL axis, and in how many regimes either
    meets it significantly more often (McNemar per regime, uncorrected)."""
    rows = sm.primary_by_task(result)
    if not rows:
        return "The second study ran without both original and fixed."
    parts = []
    for r in rows:
        same = r["equal"] == r["regimes"]
        parts.append(f"{r['env']}, original {_range(r['original'])} against fixed {_range(r['fixed'])}"
                     + (f" in all {r['regimes']} regimes" if same else
                        f" over the {r['regimes']} regimes; the fixed kernel meets it significantly more often in "
                        f"{r['fix_hurts']} of them, the original in {r['fix_helps']}"))
    helps, cells = sum(r["fix_helps"] for r in rows), sum(r["regimes"] for r in rows)
    verdict = ("the pre-registered primary criterion shows no benefit from the fix in any of the "
               f"{cells} task × regime cells" if helps == 0 else
               f"the fix lowers the pre-registered primary criterion significantly in {helps} of {cells} task × "
               "regime cells")
    return (f"Second study, its pre-registered primary criterion ({sm.PRIMARY}: agreement at or below π's own level "
            f"for {result['parameters']['criteria']['consecutive']} evaluations in a row): " + "; ".join(parts)
            + f" — {verdict} (McNemar, p < {sm.ALPHA:g} per regime, uncorrected).")


def secondary_gap(result: dict) -> str:
    """The largest original-vs-fixed gap over every task × agreement criterion × regime cell, labelled what it
    is: exploratory where the pre-registration set no α, multiplicity correction or confirmatory cell; beside it
    the same task and criterion with the KL at the visited state after π's update (the first study's loop)."""
    best = sm.largest_gap(result)
    if best is None:
        return ""
    gap, env, crit, j, r, o, f, m = best
    _, _, cells = sm.original_vs_fixed(result)
    missing = sm.unregistered_tests(result)
    why = (f" Exploratory: the pre-registration sets no {_and(missing)}, so this is the largest of {cells} gaps, not "
           "a confirmatory test." if missing else "")
    if gap <= 0:
        return (f"In none of the {cells} task × criterion × regime cells does the original meet an agreement "
                f"criterion more often than the fixed kernel.{why}")
    block = result["envs"][env]
    first = next(i for i, x in enumerate(block["regimes"]) if x["kl_site"] == "visited" and not x["kl_before"])
    o0, f0 = (block["controllers"][n][crit]["per_regime"][first] for n in ("original", "fixed"))
    m0 = sm.pair(block)[crit]["per_regime"][first]
    return (f"The largest original-against-fixed gap among the {cells} task × criterion × regime cells is on the "
            f"{_crit_name(crit)} criterion: with the controller's KL measured on the {_regime_name(r)} ({env}), the "
            f"original meets it in {_ci(o)} of runs and the fixed kernel in {_ci(f)} (McNemar p = {_p(m['p'])}: "
            f"{m['only_a']} against {m['only_b']} discordant runs)"
            + ("" if first == j else f"; with the KL at the visited state after π's update (the first study's loop): "
               f"{_pct(o0['fraction'])} against {_pct(f0['fraction'])} (p = {_p(m0['p'])})") + "." + why)


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", no ".join(items[:-1]) + " and no " + items[-1]


def signature_lines(result: dict, cold: dict | None = None) -> list[str]:
    """The signature criterion's cold-start confound, from the study's numbers: λ held at 0 shows the whole
    signature as often as the original, and the original's λ is at its floor from the first evaluation; with
    ``cold`` (the exploratory cold-start check's JSON) how often the λ side is met in the first window."""
    rows = sm.signature_vs_lambda0(result)
    if not rows:
        return []
    floor = result["parameters"]["signature"]["floor_lambda"]
    per = "; ".join(f"{r['env']}: original {_range((min(r['original']), max(r['original'])))}, λ = 0 "
                    f"{_range((min(r['lambda0']), max(r['lambda0'])))} — λ = 0 at least as often in "
                    f"{r['lambda0_at_least']} of {r['regimes']} regimes; the original's λ side met at some step in "
                    f"{_pct(r['lambda_side'])} of its runs, and its median run's λ at the floor {floor:g} already at "
                    f"the first evaluation (step {r['first_step']}) in {r['floor_at_first']} of {r['regimes']} regimes"
                    for r in rows)
    return [f"**The signature criterion (secondary) measures the KL EMA's cold start.** {per}. An EMA that starts "
            "from 0 reads as a quiet KL, and the original decays to its floor before the EMA has warmed up; λ held "
            "at 0 (no controller) then “shows the incident's whole signature” whenever its agreement is low. So the "
            "signature says little about the original's mechanism, and its p-values against the fixed kernel (whose "
            "higher floor cannot meet the λ side) hold by construction. " + _cold_start(cold)]


def _cold_start(cold: dict | None) -> str:
    if not cold:
        return ("The exploratory cold-start JSON is absent, so when the λ side is met is not reported; the study's "
                "JSON holds the λ side over the whole run only (and the median run's λ per evaluation).")
    per = "; ".join(
        f"{env}: " + ", ".join(f"{'λ = 0' if n == 'const:0' else n} "
                               f"{_range(_lo_hi([x['fraction'] for x in e['lambda_side_first_window']['per_regime']]))}"
                               for n, e in block["controllers"].items())
        for env, block in cold["envs"].items())
    window = next(iter(cold["envs"].values()))["window_steps"]
    return (f"Exploratory check (not pre-registered; backend `{cold['backend']}`, the study's grid and seeds run for "
            f"their first {window} steps, the same steps as the full runs'): the λ side is met within the first "
            f"{window} steps in, per regime, {per} of runs.")


def _lo_hi(xs: list[float]) -> tuple[float, float]:
    return min(xs), max(xs)


def criterion_lines(result: dict) -> list[str]:
    """Where the fixed kernel meets the primary criterion significantly more often: how much of it is the
    criterion (aliased states; λ = 0's level judged on other states) and how much is agreement."""
    out = []
    warmup = result["parameters"]["criteria"]["warmup"]
    for r in sm.primary_by_task(result):
        a = sm.aliased_criterion(result["envs"][r["env"]], warmup)
        if not r["fix_hurts"] or a is None:
            continue
        alias = (f"at the {a['points']} grid points where π sees s // 4 (states aliased) λ = 1 meets the criterion "
                 f"in {_range(a['lambda1'])} of runs, and λ = 0's median final agreement is above λ = 1's at "
                 f"{a['lambda0_above']} of them — there every arm “collapses” against a level distillation cannot "
                 "reach" if a["lambda1"] else "")
        lo, hi = a["gap"]
        out.append(f"- {r['env']}: the fixed kernel's higher primary-criterion fraction is mostly the criterion. "
                   + (alias[0].upper() + alias[1:] + ". " if alias else "")
                   + f"λ = 0's level is computed on other states: at the last evaluation its median run judges as "
                   f"few as {a['judged_lambda0']:g} state{'' if a['judged_lambda0'] == 1 else 's'} with a unique "
                   f"greedy action at a grid point, the original's {a['judged_original']:g}. Underneath, the median "
                   "run's agreement averaged over the evaluations "
                   f"after step {warmup} differs by {lo:+.3f} to {hi:+.3f} (original − fixed) over the "
                   f"{r['regimes']} regimes, small beside the criterion's fractions; the median run's λ averaged "
                   f"the same way is {_range3(a['lam']['original'])} for the original and "
                   f"{_range3(a['lam']['fixed'])} for the fixed kernel. The paired per-run mean differences of "
                   "agreement and of λ need per-run series, which the JSON does not hold.")
    return out


def exploratory_brief(x: dict) -> str:
    """One clause on the exploratory run for the summary's brief: where the fixed kernel meets the minimum
    criterion significantly more often than the original under it."""
    L, rows = x["parameters"]["learning"], []
    for env, block in x["envs"].items():
        test = sm.pair(block)
        for j, r in enumerate(block["regimes"] if test else ()):
            m = test["minimum"]["per_regime"][j]
            o, f = (block["controllers"][n]["minimum"]["per_regime"][j]["fraction"] for n in ("original", "fixed"))
            if sm.b_more(m):
                rows.append(f"{env}, KL on the {_regime_name(r)}: original {_pct(o)}, fixed {_pct(f)}, p = {_p(m['p'])}")
    return (f"an exploratory run with the KL target at {L['kl_target']:g} (not pre-registered) "
            + (f"reverses it: the fixed kernel collapses more often ({'; '.join(rows)})" if rows else
               "finds the fixed kernel collapsing significantly more often nowhere"))


def exploratory_lines(x: dict | None) -> list[str]:
    """The exploratory run (:data:`repro.learning.study2.EXPLORATORY_TARGET`, its JSON ``x``): per task and
    regime, original against fixed on each agreement criterion with the paired test, and the constant-λ arms
    beside them; a warning, not a confirmation (None: not given)."""
    if not x:
        return []
    L = x["parameters"]["learning"]
    out = [f"### Exploratory, not pre-registered: the KL target at {L['kl_target']:g}", "",
           f"The run ({x.get('exploratory', 'not pre-registered')}): backend `{x['backend']}`, seeds {x['seeds'][0]}–"
           f"{x['seeds'][1] - 1}, {L['steps']} steps, the second study's loop and criteria otherwise. A warning about "
           "how the protection depends on the KL target; no α was set for it and it confirms nothing.", ""]
    for env, block in x["envs"].items():
        ctrl, test = block["controllers"], sm.pair(block)
        if test is None:
            continue
        consts = [n for n in ctrl if n.startswith("const:")]
        for j, r in enumerate(block["regimes"]):
            points = ", ".join(f"{block['grid_points'][i]['policy']} aux {block['grid_points'][i]['aux_reward']:g}"
                               for i in r["points"])
            for crit in ("minimum", sm.PRIMARY):
                m = test[crit]["per_regime"][j]
                o, f = (ctrl[n][crit]["per_regime"][j] for n in ("original", "fixed"))
                side = ("the fixed kernel more often" if sm.b_more(m) else "the original more often" if sm.a_more(m)
                        else "no significant difference")
                others = ", ".join(f"λ = {n[6:]} {_pct(ctrl[n][crit]['per_regime'][j]['fraction'])}" for n in consts)
                out.append(f"- {env} ({points}), KL on the {_regime_name(r)}, {crit} criterion: original {_ci(o)}, "
                           f"fixed {_ci(f)} ({m['only_a']} against {m['only_b']} discordant runs, McNemar p = "
                           f"{_p(m['p'])}: {side}); {others}.")
    return [*out, ""]


def regime_answers(result: dict, target: dict | None = None) -> list[str]:
    """Per task and regime, for each agreement criterion: does the original collapse (more often than λ = 1, by
    McNemar's test on the same runs), and does the fix prevent it (original vs fixed)? A secondary criterion's
    answer is labelled exploratory, with the exploratory run at another KL target (``target``) beside it."""
    out = []
    for env, block in result["envs"].items():
        ctrl, pair = block["controllers"], sm.pair(block)
        if pair is None or "const:1" not in ctrl:
            continue
        for j, r in enumerate(block["regimes"]):
            parts = []
            for crit in ("relative", "minimum"):
                o, f, one = (ctrl[n][crit]["per_regime"][j]["fraction"] for n in ("original", "fixed", "const:1"))
                m = pair[crit]["per_regime"][j]
                against_one = sm.regime_test(block, crit, "original", "const:1", j)
                label = "" if crit == sm.PRIMARY else "exploratory: "
                if not sm.a_more(against_one):  # what "collapse" means here: more often than λ held at 1
                    answer = f"the original does not collapse significantly more often than λ = 1 (p = {_p(against_one['p'])})"
                elif sm.a_more(m):
                    answer = (f"{label}the original collapses and the fix prevents it (p = {_p(m['p'])})"
                              + (f"; {beside}" if label and (beside := target_beside(target, env, r, crit)) else ""))
                elif sm.significant(m):
                    answer = f"the original collapses and the fixed kernel more often still (p = {_p(m['p'])})"
                else:
                    answer = f"the original collapses and the fix does not prevent it (p = {_p(m['p'])})"
                parts.append(f"{_crit_name(crit)}: original {_pct(o)}, fixed {_pct(f)}, λ = 1 {_pct(one)} — {answer}")
            out.append(f"- {env}, KL on the {_regime_name(r)}: " + "; ".join(parts) + ".")
    return out


def target_beside(x: dict | None, env: str, regime: dict, crit: str) -> str:
    """The exploratory run at another KL target (``x``, :func:`exploratory_lines`' JSON) for ``env``, ``regime``
    and ``crit``: original against fixed there, and which way it falls; where it ran no such regime, the regimes
    it ran in that task ("" without the run)."""
    if not x:
        return ""
    t = f"{x['parameters']['learning']['kl_target']:g}"
    block = x["envs"].get(env)
    test = sm.pair(block) if block else None
    if test is None:
        return f"the exploratory run at KL target {t} (not pre-registered) did not run {env}"

    def one(j: int) -> str:
        m = test[crit]["per_regime"][j]
        o, f = (block["controllers"][n][crit]["per_regime"][j]["fraction"] for n in ("original", "fixed"))
        side = ("reversed, the fixed kernel collapses more often" if sm.b_more(m) else
                "the original more often" if sm.a_more(m) else "no significant difference")
        return (f"original {_pct(o)}, fixed {_pct(f)} ({m['only_a']} against {m['only_b']} discordant runs, "
                f"p = {_p(m['p'])}: {side})")

    same = [j for j, q in enumerate(block["regimes"])
            if (q["kl_site"], q["kl_before"]) == (regime["kl_site"], regime["kl_before"])]
    if same:
        return f"beside it, the exploratory run at KL target {t} (not pre-registered), same regime: {one(same[0])}"
    return (f"beside it, the exploratory run at KL target {t} (not pre-registered) did not run this regime; in "
            f"{env} it ran " + "; ".join(f"KL on the {_regime_name(q)}: {one(j)}" for j, q in enumerate(block["regimes"])))


def regime_table(result: dict, names=("original", "fixed", "const:0", "const:0.001", "const:1")) -> list[str]:
    """Per task and regime: each criterion's fraction with its interval for ``names``, and original vs fixed's
    McNemar test (discordant runs original-only / fixed-only, exact p)."""
    lines = ["| task | KL measured on | criterion | " + " | ".join(names) + " | original vs fixed: discordant, McNemar p |",
             "|---|---|---|" + "---|" * len(names) + "---|"]
    for env, block in result["envs"].items():
        ctrl, pair = block["controllers"], sm.pair(block)
        for j, r in enumerate(block["regimes"]):
            for crit in ("relative", "minimum", "signature"):
                cells = [_ci(ctrl[n][crit]["per_regime"][j]) if n in ctrl else "—" for n in names]
                m = pair[crit]["per_regime"][j] if pair else None
                test = f"{m['only_a']} / {m['only_b']}, p = {_p(m['p'])}" if m else "—"
                lines.append(f"| {env} | {_regime_name(r)} | {_crit_name(crit)} | " + " | ".join(cells) + f" | {test} |")
    return lines


def fixes_table(result: dict, crit: str) -> list[str]:
    """Per task and regime, for ``crit``: each fix alone against none and each fix removed against all (fraction of
    the variant, McNemar discordant counts and p), so that the fix carrying the protection can be read off."""
    out = []
    for env, block in result["envs"].items():
        ctrl = block["controllers"]
        rows = [p for p in block["pairs"] if "fix" in p]  # each fix alone vs none, each removed vs all
        if not rows:
            continue
        out += [f"*{env}, {crit} criterion* (variant's fraction; discordant runs a-only / b-only; McNemar p):", "",
                "| pair | " + " | ".join(_regime_name(r) for r in block["regimes"]) + " |",
                "|---|" + "---|" * len(block["regimes"])]
        for p in rows:
            variant = p["b"] if p["a"] == "original" else p["a"]  # the fix alone (b), or all but it (a)
            cells = [f"{_pct(ctrl[variant][crit]['per_regime'][j]['fraction'])}; {m['only_a']}/{m['only_b']}; "
                     f"{_p(m['p'])}" for j, m in enumerate(p[crit]["per_regime"])]
            out.append(f"| {p['kind']} | " + " | ".join(cells) + " |")
        out.append("")
    return out


def fix_worse(result: dict) -> list[str]:
    """Where the fixed kernel meets an agreement criterion significantly more often than the original (p < 0.05)."""
    out = []
    for env, block in result["envs"].items():
        pair = sm.pair(block)
        for crit in ("relative", "minimum") if pair else ():
            for j, r in enumerate(block["regimes"]):
                m = pair[crit]["per_regime"][j]
                if sm.b_more(m):
                    o, f = (block["controllers"][n][crit]["per_regime"][j] for n in ("original", "fixed"))
                    out.append(f"- {env}, KL on the {_regime_name(r)}, {_crit_name(crit)}: fixed {_ci(f)} against original "
                               f"{_ci(o)} ({m['only_b']} against {m['only_a']} discordant runs, p = {_p(m['p'])}).")
    return (["Where the fixed kernel does worse than the original (significant, either agreement criterion):", "", *out]
            if out else ["Nowhere does the fixed kernel meet an agreement criterion significantly more often than the "
                         "original."])


def carrying_fix(result: dict, crit: str = "minimum", target: dict | None = None) -> list[str]:
    """Per task and regime where the original vs fixed difference is significant (p < 0.05): which single fix
    alone lowers the collapse the most, and which fix's removal raises it (read from the paired tests). On a
    secondary criterion each line is labelled exploratory, with the exploratory run at another KL target
    (``target``) beside it."""
    out = []
    secondary = crit != sm.PRIMARY
    for env, block in result["envs"].items():
        pair = sm.pair(block)
        if pair is None:
            continue
        for j, r in enumerate(block["regimes"]):
            m = pair[crit]["per_regime"][j]
            if not sm.a_more(m):
                continue
            alone, removed = sm.fix_tests(block, crit, j)
            protect = [f"{f} (p = {_p(x['p'])})" for x, f in alone if sm.a_more(x)]
            needed = [f"{f} (p = {_p(x['p'])})" for x, f in removed if sm.a_more(x)]
            beside = target_beside(target, env, r, crit) if secondary else ""
            out.append(f"- {env}, KL on the {_regime_name(r)}"
                       + (f", {crit} criterion (secondary, exploratory: no α or correction pre-registered)"
                          if secondary else "")
                       + f": original vs fixed {m['only_a']}/{m['only_b']} "
                       f"(p = {_p(m['p'])}). Alone, a fix that protects significantly: "
                       f"{', '.join(protect) or 'none'}; removed from the four, a fix whose loss costs significantly: "
                       f"{', '.join(needed) or 'none'}" + (f"; {beside}" if beside else "") + ".")
    return out or [f"- Nowhere is the original's {crit} collapse significantly above the fixed's (p < {sm.ALPHA:g})."]


def agreement_sets(result: dict, name: str = "original") -> list[str]:
    """Which agreement the incident's q_pi_agree = 1e-22 most plausibly was: per task and regime, for each set
    (visited states, odd states: those the even-state KL never sees, the replay ring; ties excluded) the median
    over runs of the lowest minimum and of the lowest mean it reached (log10), the lowest over runs, and the
    fraction of runs whose minimum reached 1e-20; then a sentence read from those numbers."""
    sets = ("visited", "odd", "replay")
    lines = ["| task | KL measured on | " + " | ".join(f"{s}: min (median / lowest / ≤ 1e-20) · mean (median / lowest)"
                                                      for s in sets) + " |", "|---|---|---|---|---|"]
    fmt = lambda x: "—" if x is None else f"{x:.1f}"  # noqa: E731
    for env, block in result["envs"].items():
        e = block["controllers"].get(name)
        if e is None:
            continue
        for j, r in enumerate(block["regimes"]):
            cells = []
            for s in sets:
                x = e["lowest_log10_agreement"][s][j]
                cells.append(f"{fmt(x['median'])} / {fmt(x['lowest'])} / {_pct(x['at_most_1e-20'])} · "
                             f"{fmt(x['mean_median'])} / {fmt(x['mean_lowest'])}")
            lines.append(f"| {env} | {_regime_name(r)} | " + " | ".join(cells) + " |")
    got = sm.lowest_agreement(result, name, sets)
    if got is None:
        return lines
    (_, s, env, r, j, blind), mean_low = got
    low = result["envs"][env]["controllers"][name]["lowest_log10_agreement"]
    lines += ["", f"The {name}'s agreement goes lowest with the KL on the {_regime_name(r)} ({env}): the median run's "
              f"lowest state reaches {_exp10(low['visited'][j]['median'])}, the lowest run "
              f"{_exp10(low['visited'][j]['lowest'])}, "
              f"and {_pct(low['visited'][j]['at_most_1e-20'])} of its runs reach 1e-20"
              + (" — and that lowest state is an odd one (the median run's minimum over odd states equals its minimum "
                 "over all visited states), a state the controller's KL never sees." if blind else ".")
              + f" No mean over a set gets near: the lowest mean over any set in any run is {_exp10(mean_low[0])} "
              f"({mean_low[1]} states, {mean_low[2]}, KL on the {_regime_name(mean_low[3])}). So a q_pi_agree of 1e-22 "
              "was not an average over visited states or over a replay sample; it was one state's agreement (a "
              "minimum)" + (", most plausibly on states the KL the controller sees does not cover." if blind else ".")]
    return lines


def ties_lines(result: dict) -> list[str]:
    """How many states agreement is judged on once ties are excluded (at the last evaluation)."""
    out = []
    for env, block in result["envs"].items():
        ctrl = block["controllers"]
        cells = ["{} {:g}–{:g}".format(n, *sm.unique_states(ctrl[n])) for n in ("const:0", "const:1", "original", "fixed")
                 if ctrl.get(n)]
        out.append(f"- Ties excluded, {env} ({block['n_states']} states): at the last evaluation the median number "
                   f"of visited states with a unique greedy action per grid point is {', '.join(cells)}; the rest "
                   "tie and are not judged.")
    return out


def brackets2(result: dict) -> list[str]:
    out = ["| task | KL measured on | policy | aux | relative collapse λ=0.001 / λ=1 | λ=1 − λ=0.001 final agreement "
           "(signed) | wide enough |", "|---|---|---|---|---|---|---|"]
    for env, block in result["envs"].items():
        for r in block["brackets"] or []:
            gap = "—" if r["agree_gap"] is None else f"{r['agree_gap']:+.3f}"
            out.append(f"| {env} | {_regime_name(r)} | {r['policy']} | {r['aux_reward']:g} | "
                       f"{_pct(r['relative_lambda_0.001'])} / {_pct(r['relative_lambda_1'])} | {gap} | "
                       f"{'yes' if r['wide'] else 'no'} |")
    n_wide, n_all = sm.wide_brackets(result)
    return [*out, "", f"The bracket is wide enough at {n_wide} of {n_all} grid points."] if n_all else []


def per_point_table(result: dict, names=("original", "fixed")) -> list[str]:
    lines = ["| task | KL measured on | policy | aux | " + " | ".join(f"{n}: relative / minimum [95 % CI]" for n in names)
             + " | McNemar p (minimum) |", "|---|---|---|---|" + "---|" * len(names) + "---|"]
    for env, block in result["envs"].items():
        ctrl, pair = block["controllers"], sm.pair(block)
        for i, p in enumerate(block["grid_points"]):
            cells = [f"{_pct(ctrl[n]['relative']['per_point'][i]['fraction'])} / {_ci(ctrl[n]['minimum']['per_point'][i])}"
                     for n in names if n in ctrl]
            m = pair["minimum"]["per_point"][i] if pair else None
            lines.append(f"| {env} | {_regime_name(p)} | {p['policy']} | {p['aux_reward']:g} | " + " | ".join(cells)
                         + f" | {_p(m['p']) if m else '—'} |")
    return lines


def incident_lines(result: dict) -> list[str]:
    inc = result.get("incident")
    if not inc:
        return []
    floor = result["parameters"]["signature"]["floor_lambda"]
    shows, first = sm.incident(result)
    how = ("the first seed whose original run shows the whole signature there" if shows else
           "no original run shows the whole signature there, so by the pre-registered rule the first seed")
    return [f"- The incident figure: {inc['env']}, KL on the {_regime_name(inc['point'])}, {inc['point']['policy']}, "
            f"aux {inc['point']['aux_reward']:g}, seed {inc['seed']} ({how}).",
            f"- The λ half of the incident, from the EMA's cold start (figure's seed {inc['seed']}, {inc['env']}): "
            + (f"the original goes from {result['envs'][inc['env']]['controllers']['original']['seed_lambda']:g} to "
               f"its floor {floor:g} by step {first}" if first else "the original never reaches its floor")
            + "; the fixed kernel's floor keeps λ above it by design (its floor is the signature's λ side's bar).",
            *_incident_minimum(result)]


def _incident_minimum(result: dict) -> list[str]:
    got = sm.incident_minimum(result)
    if got is None:
        return ["- The incident's JSON holds no per-step minimum over the odd states (made before the loop wrote "
                "one): its figure shows none."]
    warmup = result["parameters"]["criteria"]["warmup"]
    o, f, stretches = got.get("original"), got.get("fixed"), got["floor_stretches"]
    low = lambda x: "no odd state judged" if x is None else f"{_exp10(x[0])} (step {x[1]})"  # noqa: E731
    where = (f"sits at its floor over steps {', '.join(f'{a}–{b}' for a, b in stretches)}" if stretches
             else "is never at its floor then")
    return [f"- In that run, after step {warmup}, the lowest agreement of a single odd state (a state the even-state "
            f"KL never sees) reaches {low(o)} under the original and {low(f)} under the fixed kernel; the original's "
            f"λ {where}."
            + (f" The incident was remade on backend `{result['incident']['remade_on']}` with every series the "
               "committed run held equal bit for bit." if "remade_on" in result["incident"] else "")]


def second_section(result: dict, exploratory: dict | None = None) -> list[str]:
    """The second study's section, every number read from its JSON and, when given, its exploratory runs' JSONs
    by name (``target``: :func:`exploratory_lines`; ``cold_start``: :func:`signature_lines`); its figures are the
    caller's to link."""
    exploratory = exploratory or {}
    p, c = result["parameters"], result["parameters"]["criteria"]
    sig = p["signature"]
    kind = ("the pre-registered second study" if result["as_preregistered"]
            else "a reduced run of the second study's parameters (fewer steps, seeds, grid points and controllers)")
    return ["## The second learning-loop study: where the controller's KL is measured", "",
            f"**{headline2(result)}**", "",
            f"**Secondary, exploratory.** {secondary_gap(result)}", "",
            *signature_lines(result, exploratory.get("cold_start")), "",
            *(["Where the fixed kernel meets the primary criterion more often:", "", *criterion_lines(result), ""]
              if criterion_lines(result) else []),
            *exploratory_lines(exploratory.get("target")),
            "What the first study's design could not show: its loop measured the KL at the state just visited, so "
            "wherever π drifted from Q the KL EMA rose and λ came back; its primary criterion (mean agreement below "
            "½·1/A) could hardly fire, since a π that follows a random per-state auxiliary action still matches Q's "
            "greedy action in about 1/A of states; FrozenLake's ties (Q ≡ 0) read as agreement 1; its bracket check "
            "took |gap|; and its tests were unpaired on paired seeds. This study measures the KL where deep RL "
            "trainers do, judges agreement with ties excluded, against what π reaches on its own, and pairs its "
            "tests.", "",
            f"- {kind}, parameters from `{result['preregistration']}` (learners from `{result['learning_from']}`); "
            f"backend `{result['backend']}`; seeds {result['seeds'][0]}–{result['seeds'][1] - 1}; "
            f"{p['learning']['steps']} steps per run; grid "
            + ", ".join(f"{k} ∈ {{{', '.join(str(x) for x in v)}}}" for k, v in p["grid"].items())
            + f"; the auxiliary reward on odd states only; the linear policy over {p['features']} features; the "
            f"replay ring holds {p['replay_capacity']} states, {p['replay_sample']} drawn per step.",
            f"- Criteria: *relative* (primary, as pre-registered) — agreement (ties excluded) at or below "
            f"{c['baseline']}'s median at the same "
            f"grid point and evaluation for {c['consecutive']} evaluations in a row after step {c['warmup']}; "
            f"*minimum* (secondary) — the minimum over visited states below {c['min_threshold']:g}; *signature* "
            "(secondary) — λ ≤ "
            f"{sig['floor_lambda']:g} for {sig['steps']} steps in a row while the KL the controller sees is below "
            f"{sig['quiet_kl']:.4g}, then the relative criterion (under the fixed kernel, whose floor is higher, "
            "the λ side cannot happen, so it cannot measure the fix's protection of agreement; what it does "
            "measure is said above: the EMA's cold start). Paired: McNemar's exact test on the same seeds "
            "and grid points; per regime also a sign test over seeds (grid points reuse seeds, so pooled runs are "
            "not independent).", *incident_lines(result), *ties_lines(result), "",
            "Per regime of the KL axis: does the original collapse (more often than λ = 1, McNemar on the same "
            "runs), and does the fix prevent it?", "", *regime_answers(result, exploratory.get("target")), "",
            "Per regime of the KL axis, each criterion's fraction [95 % CI]:", "", *regime_table(result), "",
            "Which single fix carries the protection (secondary minimum criterion, where original vs fixed is "
            "significant; exploratory):",
            "", *carrying_fix(result, "minimum", exploratory.get("target")), "", *carrying_fix(result, "relative"), "",
            *fix_worse(result), "",
            *fixes_table(result, "minimum"), "Where the agreement goes lowest (original):", "",
            *agreement_sets(result), "", "The constant-λ bracket per grid point, with its sign:", "",
            *brackets2(result), "", "Per grid point (original and fixed):", "", *per_point_table(result), ""]


def document(result: dict, at: Path, data: Path | None, figures: list[Path], second: bool = False,
             exploratory: dict | None = None) -> str:
    """A study's section as a Markdown file of its own at ``at``: a title naming the backend, the section (the
    second study's with its ``exploratory`` runs' JSONs by name, when given), and ``data`` (its JSON) and the ``figures``
    beside it linked by their paths relative to ``at``."""
    here = at.resolve().parent
    rel = lambda p: os.path.relpath(p.resolve(), here).replace(os.sep, "/")  # noqa: E731
    link = lambda p: quote(rel(p))  # noqa: E731 - spaces, parentheses and '#' would end or split the link
    title = "The second learning-loop study" if second else "The learning-loop study"
    body = second_section(result, exploratory) if second else section(result, figures=False)
    lines = [f"# {title} (backend `{result['backend']}`)", "",
             "Written by `python -m analysis study` (see its `--help`)"
             + (f" with its JSON in [`{rel(data)}`]({link(data)})" if data else "") + ".", "",
             *body]
    lines += [f"![{p.stem}]({link(p)})" for p in figures]
    return "\n".join(lines) + "\n"
