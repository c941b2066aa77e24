"""The report's summary.md and its figures, from what the report measured and judged.

Pure functions of :class:`analysis.judge.report_measures.Report`, the numbers judged from it
(:class:`~analysis.judge.report_measures.Numbers`), the peer table and the committed benchmark's reading
(:func:`analysis.judge.bench_verdict.committed`): no kernel runs, nothing is measured or written here
(``analysis.cli.report`` does both).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from analysis.judge.report_measures import CONTROLLERS, Numbers, Report, critical_lambda, noise_curves
from analysis.judge.study_measures import ALPHA, SECONDARY, original_vs_fixed
from analysis.present import (
    bench_report,
    deep_section,
    design_section,
    explore_section,
    peers_plots,
    peers_section,
    plots,
    render,
    study_section,
    study_sections,
)
from repro.core.ablation import FACTORS
from repro.toy import COLLAPSE

#: The report's own figures (the studies' are in analysis.present.study_sections): file name -> caption.
_OWN_FIGURES = {
    "fig1_collapse.png": "The collapse: λ under sustained aligned KL, original from 0.5 against fixed from 0.1.",
    "fig2_ramp_decay.png": "Ramp and decay: doubling under high KL, halving under low KL, measured steps marked.",
    "fig3_dead_zone.png": "The dead zone: KL drifting through both bands, λ of both controllers below it.",
    "fig4_noise_tolerance.png": "Noise tolerance (fix 3): how often log-normal KL noise moves λ, "
    "measured against erf(ln tol / (σ√2)).",
    "fig5_oscillation_recovery.png": "Oscillation and recovery: the square-wave sawtooth, and the steps needed "
    "to regain the seed λ after an aligned stretch.",
    "fig6_scenarios.png": "The scenario grid: every catalogue scenario, both controllers.",
    "fig7_bad_input.png": ("Bad input: what one step does to λ for NaN, ±inf, 0, −0, negative and subnormal inputs, "
                           "from several starting λ."),
    "fig8_closed_loop.png": "Closed loop: λ and q_pi_agree over steps with each controller kernel driving the "
    "distillation toy (repro/toy/), default parameters, seed 0.",
    "fig9_ablation.png": "Which fix matters: collapse fraction for all 16 combinations of the four changes, over the "
    "robustness grid × seeds.",
    "fig10_peers.png": "Peer controllers: λ under sustained aligned KL for fixed, original and each published "
    "adaptive-KL rule (a cross marks λ reaching exactly 0).",
}


def captions() -> dict[str, str]:
    """Every figure the report promises, in its numbering's order: file name → caption (the report's own, the
    studies' sections', the design measures')."""
    return {**_OWN_FIGURES, **study_sections.captions(), **design_section.FIGURES}


def figures(report: Report) -> dict[str, Callable]:
    """Every figure of :func:`captions`: file name → a callable that draws it (a matplotlib figure)."""
    contracts = {n: report.evidence[n].controller for n in CONTROLLERS}
    floors = {n: report.measures[n].floor_step for n in CONTROLLERS}
    counts = {n: {"double": report.measures[n].steps_to_double, "halve": report.measures[n].steps_to_halve}
              for n in CONTROLLERS}
    traj = report.trajectories
    grid = [s for s in dict.fromkeys(traj.scenario) if traj.loc[traj.scenario == s, "family"].iloc[0] != "bad_values"]
    titles = {r.scenario.name: r.scenario.title for n in CONTROLLERS for r in report.evidence[n].catalogue}
    return {
        "fig1_collapse.png": lambda: plots.collapse(traj, contracts, floors),
        "fig2_ramp_decay.png": lambda: plots.ramp_decay(traj, counts),
        "fig3_dead_zone.png": lambda: plots.dead_zone(traj, contracts),
        "fig4_noise_tolerance.png": lambda: plots.noise_tolerance(report.noise, contracts, noise_curves(report)),
        "fig5_oscillation_recovery.png": lambda: plots.oscillation_recovery(traj, report.recovery),
        "fig6_scenarios.png": lambda: plots.scenario_grid(traj, grid, titles),
        "fig7_bad_input.png": lambda: plots.bad_input(report.outcomes),
        "fig8_closed_loop.png": lambda: plots.closed_loop(report.closed_loop),
        "fig9_ablation.png": lambda: plots.ablation(report.ablation),
        "fig10_peers.png": lambda: peers_plots.aligned(peers_section.aligned_traces(report.measures)),
        **study_sections.drawings(report),
        # issue 35: cold starts and the design measures, every controller
        "fig15_warm_up.png": lambda: design_section.warm_up_figure(report.design.curves, report.design.half),
        "fig16_design_measures.png": lambda: design_section.measures_figure(report.design.panels),
    }


def text(report: Report, numbers: Numbers, peers: pd.DataFrame, bench: tuple | None = None,
         drift: dict[str, dict[str, float]] | None = None, bench_dir: Path | None = None,
         bench_link: str = "bench", judged_map: dict | None = None) -> str:
    """summary.md's text; every number is one of the report's measurements, ``numbers``, the peer table
    (:func:`analysis.present.peers_section.table`) or ``bench``: the committed benchmark runs under ``bench_dir``
    (:func:`analysis.judge.bench_verdict.committed`) with ``drift``, their run-to-run changes; ``bench_link``:
    ``bench_dir`` as the summary's links reach it (relative to the summary's folder, POSIX); ``judged_map``: the
    fourth study's judged map (:func:`map_brief`; None: not run)."""
    h, v = report.header, report.verdicts
    lines = [
        "# λ-controller report: the collapse and the fix",
        "",
        f"- date: {h['date']}",
        f"- suite commit: `{h['suite_commit']}`",
        f"- backend: `{h['backend']}` on {h['device']}",
    ]
    lines += [f"- {n} kernel: `{h['kernels'][n]['path']}` sha256 `{h['kernels'][n]['sha256']}`" for n in CONTROLLERS]
    lines += [f"- {k} learning-loop study: {studied}" for k, studied in h.get("studies", {}).items()]
    lines += ["", *_in_brief(report, numbers, judged_map)]
    lines += ["", "## Verdicts", ""]
    for n in CONTROLLERS:
        ver = v[n]
        state = "every documented property holds" if ver.ok else f"FAILS {', '.join(f.key for f in ver.failed)}"
        lines.append(f"- **{n}** against its own contract: {state} ({len(ver.findings)} properties).")
    lines.append(f"- **original** against the fixed contract: fails {', '.join(f.key for f in report.cross.failed)}"
                 " — the regressions the gate exists to catch.")
    lines += ["", "## Properties: documented, predicted in closed form, measured", "",
              "Predicted values come from the documented constants: ⌈ln 2 / ln ramp⌉, ⌈ln 2 / −ln decay⌉, "
              "⌈ln(λ0/floor) / −ln decay⌉, and the float32 band edges fl(target·tol), fl(target/tol).", "",
              "| property | fixed: documented | predicted | measured | | original: documented | predicted "
              "| measured | |", "|---|---|---|---|---|---|---|---|---|"]
    for key in dict.fromkeys([f.key for f in v["fixed"].findings] + [f.key for f in v["original"].findings]):
        cells = [key]
        for n in CONTROLLERS:
            f = v[n].finding(key)
            cells += ([*(render.md_cell(read(f)) for read in (render.documented, render.predicted, render.measured)),
                       "pass" if f.ok else "**FAIL**"] if f else ["—", "—", "—", ""])
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Where the documentation and the measurements differ", ""]
    lines += _differences(report, numbers)
    lines += [""] + peers_section.markdown(report.measures, peers)
    if report.design is not None:  # issue 35: cold starts and the design measures
        d = report.design
        lines += [""] + design_section.markdown(d.warm_ups, d.designs, design_section.rates_note(d))
    lines += ["", *study_sections.markdown(report)]  # the learning-loop studies, each from its own JSON
    lines += ["## Figures", ""]
    for i, (name, caption) in enumerate(captions().items(), start=1):
        lines += [f"**Figure {i}.** {caption}", "", f"![{caption}]({name})", "", *_figure_notes(report, numbers, name)]
    lines += _bench_section(bench, drift, bench_dir, bench_link) if bench else []
    lines += ["## Data", "", "Everything above is recomputable from `data/`: `trajectories.csv` (tidy: controller, "
              "backend, scenario, step, kl, kl_target, lambda, …), `properties.json` (every measured property), "
              "`noise_tolerance.csv`, `recovery.csv`, `bad_inputs.csv`.", ""]
    return "\n".join(lines)


def _differences(report: Report, numbers: Numbers) -> list[str]:
    v = report.verdicts
    fixed, original = report.evidence["fixed"].controller, report.evidence["original"].controller
    out = []
    if numbers.decay_slowness is not None:
        claim = fixed["decay_slowness"]
        log_ratio, step_ratio = numbers.decay_slowness
        ramp_m, decay_m = v["fixed"].finding("ramp").measured, v["fixed"].finding("decay").measured
        dbl, hlv = report.measures["fixed"].steps_to_double, report.measures["fixed"].steps_to_halve
        out.append(f"- The kernel comment says *\"{claim.quote}\"* Measured: the ratio of "
                   f"log-rates ln {ramp_m:.7f} / −ln {decay_m:.7f} is **{log_ratio:.1f}×**, "
                   f"and steps to halve / steps to double is {hlv} / {dbl} = **{step_ratio:.1f}×** "
                   f"(documented {claim.value:g}×).")
    f = numbers.floor_count_off
    if f is not None:
        out.append(f"- The commit message says *\"{original['steps_to_floor'].doc}\"*. Measured on the "
                   f"reconstruction: {render.measured(f)} — the {int(original['steps_to_floor'].value)} steps bring λ "
                   f"to ≈ {original['floor'].value:g}, the clamp lands one step later (closed form: {render.predicted(f)}).")
    for n in CONTROLLERS:
        for bad in v[n].failed:
            out.append(f"- **{n}: {bad.key} fails**: documented {render.documented(bad)}, measured "
                       f"{render.measured(bad)} (first shows: {render.where(bad.where)}).")
    return out or ["- Nothing: every documented value was measured as documented."]


def _in_brief(report: Report, numbers: Numbers, judged_map: dict | None = None) -> list[str]:
    """The answer first, each number read from the report's data: what each controller does to λ on the
    contract's scenario, in the toy, and in the learning loop, the results that go against the fix included."""
    ab = report.ablation
    candidate = ab[list(FACTORS)].isna().all(axis=1)  # a whole kernel in the fixed controller's place (report --kernel)
    fixed = "the candidate" if candidate.any() else "the fixed kernel"

    def reaches(n: str) -> str:
        step, floor = report.measures[n].floor_step, report.evidence[n].controller.value("floor")
        steps = report.evidence[n].run("aligned").scenario.steps
        return f"{floor:g} by step {step}" if step is not None else f"{floor:g} in none of its {steps} steps"

    out = ["## In brief", "", *map_brief(judged_map),
           f"- **λ under aligned KL** (figure 1): the original drives λ to its floor {reaches('original')}; "
           f"{fixed} reaches its floor {reaches('fixed')}."]
    toy = numbers.toy
    if toy is not None:
        out.append(f"- **In the distillation toy** (figure 9, {toy.runs} runs per variant): "
                   f"q_pi_agree falls below {COLLAPSE:g} at some step in {toy.original:.1%} of the original's runs and "
                   f"{toy.fixed:.1%} of {fixed}'s; of the combinations of the fix's four parts short of all four, "
                   f"{toy.best_variant} gives the fewest, {toy.best:.1%}."
                   + (f" {scales}" if (scales := toy_scales(report)) else ""))
    deep = deep_section.committed()
    if deep:
        gpu = deep["device"].split(" (")[0]
        out.append(f"- **In the deep loop** (third study, pre-registered; PyTorch {deep['torch']} on {gpu}), "
                   f"{deep_section.headline(deep, deep_section.levels(deep['pair'], report.contract))}")
    if report.study2:  # the primary criterion first; the secondary one after it, labelled (sections below)
        more, fewer, cells = original_vs_fixed(report.study2, SECONDARY[:1])
        out.append(f"- **In the learning loop**: {study_section.headline2(report.study2)} On the secondary "
                   f"{SECONDARY[0]} criterion (exploratory: no α or multiplicity correction was pre-registered) the "
                   f"original's agreement collapses significantly more often in {more} of {cells} task × regime "
                   f"cells, the fixed kernel's in {fewer} (McNemar, p < {ALPHA:g} uncorrected)"
                   + (f"; {study_section.exploratory_brief(target)}"
                      if (target := (report.study2_exploratory or {}).get("target")) else "") + ".")
    return out


def map_brief(judged_map: dict | None) -> list[str]:
    """The In brief's first bullets: what the fourth study's map says and what its confirmation found
    (:func:`analysis.present.explore_section.brief`); nothing where no judged map exists."""
    return explore_section.brief(judged_map, explore_section.committed(explore_section.CONFIRMATION))


def toy_scales(report: Report) -> str:
    """The toy's scales, read from its runs' parameters and the robustness grid: the KL target (nats) and the
    critical λ (:func:`analysis.judge.report_measures.critical_lambda`), with how they were chosen."""
    if not report.closed_loop or report.robustness.empty:
        return ""
    params = next(iter(report.closed_loop.values()))["parameters"]
    rb = report.robustness
    crit = sorted({critical_lambda(a, params["conflict"], params["distill_lr"]) for a in rb["actor_lr"]})
    targets = sorted(set(rb["kl_target"]))
    return (f"The toy's scales were tuned on the toy itself for the in-repo controllers (the original and fixed "
            f"kernels in its loop; `repro/toy/model.py`), not measured from a learner: KL target {params['kl_target']:g} nat "
            f"({', '.join(f'{t:g}' for t in targets)} over the grid), critical λ ≈ actor_lr·conflict/(2·distill_lr) "
            f"= {critical_lambda(params['actor_lr'], params['conflict'], params['distill_lr']):g} "
            f"({', '.join(f'{c:g}' for c in crit)} over the grid's actor_lr).")


def _figure_notes(report: Report, numbers: Numbers, name: str) -> list[str]:
    if name == "fig4_noise_tolerance.png":
        rows = ["| σ | " + " | ".join(f"{n}: measured / predicted" for n in CONTROLLERS) + " |",
                "|---|" + "---|" * len(CONTROLLERS)]
        sigmas = report.noise[CONTROLLERS[0]].sigma
        for i in range(0, len(sigmas), 5):
            cells = [f"{report.noise[n].changed_fraction.iloc[i]:.3f} / {numbers.noise_predicted[n][i]:.3f}"
                     for n in CONTROLLERS]
            rows.append(f"| {sigmas.iloc[i]:g} | " + " | ".join(cells) + " |")
        return rows + [""]
    if name == "fig5_oscillation_recovery.png":
        rows = ["| aligned stretch (steps) | " + " | ".join(f"{n}: λ after → steps to regain seed λ"
                                                           for n in CONTROLLERS) + " |",
                "|---|" + "---|" * len(CONTROLLERS)]
        for i, n_steps in enumerate(report.recovery[CONTROLLERS[0]].stretch):
            cells = [f"{report.recovery[n].lambda_after_stretch.iloc[i]:.4g} → "
                     f"{report.recovery[n].recovery_steps.iloc[i]:g}" for n in CONTROLLERS]
            rows.append(f"| {n_steps} | " + " | ".join(cells) + " |")
        return rows + [""]
    if name == "fig8_closed_loop.png":
        rows = ["| controller | λ min | λ final | first step at the floor | q_pi_agree min | min after warm-up | final |",
                "|---|---|---|---|---|---|---|"]
        for n, r in report.closed_loop.items():
            floor = r["steps_to_lambda_floor"] or "never"
            rows.append(f"| {n} | {r['lambda_min']:.4g} | {r['lambda_final']:.4g} | {floor} | "
                        f"10^{r['log10_q_pi_agree_min']:.1f} | {r['q_pi_agree_min_after_warmup']:.3f} | "
                        f"{r['q_pi_agree_final']:.3f} |")
        warm = next(iter(report.closed_loop.values()))["parameters"]["warmup"]
        return rows + ["", f"Warm-up: {warm} steps. Parameters: `data/closed_loop.json`.", ""]
    if name == "fig9_ablation.png":
        lines = ["| variant | collapse fraction | median log10 q_pi_agree min | median λ min – max |",
                 "|---|---|---|---|"]
        for r in report.ablation.itertuples():
            lines.append(f"| {r.variant} | {r.collapse_fraction:.1%} | {r.median_log10_q_pi_agree_min:.1f} | "
                         f"{r.median_lambda_min:.3g} – {r.median_lambda_max:.3g} |")
        lines += ["", "Robustness over the grid (π's own signal × KL EMA rate × KL target, each × seeds): "
                  + ", ".join(f"{c} collapses in {m:.1%} of runs" for c, m in numbers.robustness.items()) + ". "
                  "Grid points where the fixed controller collapses most: "
                  + "; ".join(f"actor_lr {w.actor_lr:g}, EMA rate {w.kl_ema_rate:g}, target {w.kl_target:g}: "
                              f"{w.collapse_fraction:.0%}" for w in numbers.worst.itertuples()) + " (`data/robustness.csv`).", ""]
        return lines
    return []


def _bench_section(bench: tuple, drift: dict[str, dict[str, float]] | None, bench_dir: Path,
                   link: str = "bench") -> list[str]:
    """The benchmark's table and figure, from the committed baseline runs of the reference GPU under ``bench_dir``
    (reached from the summary as ``link``)."""
    df, _, machine, paths, checks = bench
    gpu = machine.get("gpu", {})
    where = f"{gpu['name']}, CuPy {gpu['cupy']}" if gpu else machine.get("cpu", {}).get("brand_raw", "CPU")
    runs = " and ".join(f"`{link}/{p.relative_to(bench_dir).as_posix()}`" for p in paths)
    return ["## Launch overhead (benchmark)", "",
            f"From the benchmark runs {runs} ({where}; pytest-benchmark JSON; a separate job, `tox -e bench`).", "",
            bench_report.table(df, drift, checks), "", f"![launch overhead]({link}/bench.png)", ""]
