"""The report: figures and a summary that explain the collapse and the fix.

    python -m analysis report [--out DIR] [--backend auto|host|cupy] [--kernel FIXED.cu]

Writes ``DIR/summary.md``, PNG figures beside it, and ``DIR/data/`` (tidy
trajectories as CSV, measured properties as JSON, the tables behind the
figures). Every number in the summary comes from this run's measurements.
``--kernel`` puts a candidate in the fixed controller's place (judged
against the fixed contract), so a report can show what a change breaks.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.cli import policy
from analysis.judge import bench_verdict, peer_measures
from analysis.judge.peer_measures import PeerMeasures
from analysis.judge.properties import classify
from analysis.judge.verdict import Verdict, evaluate, judge
from analysis.present import bench_report, peers_plots, peers_section, plots, render, study_plots, study_section
from repro import toy as closed_loop
from repro.backends import NAMES, Backend, get_backend
from repro.core import spec
from repro.core.contract import Contract, load
from repro.core.errors import SuiteError
from repro.core.kernel_source import KernelSource
from repro.core.outputs import Output, check_outputs
from repro.core.paths import ROOT, shown
from repro.learning import prereg as learning_study
from repro.learning import study2 as learning_study2
from repro.runners import experiments
from repro.runners.evidence import Evidence
from repro.runners.gather import gather
from repro.runners.runner import to_frame

CONTROLLERS = ("fixed", "original")
SIGMAS = tuple(np.round(np.arange(0, 1.51, 0.1), 2))
STRETCHES = (5, 10, 20, 50, 100, 200, 500, 1000, 2000)
#: Every figure the report promises: file name -> caption.
#: The committed report's folder: the default --out, the one tracked folder the report may rewrite.
COMMITTED = ROOT / "reports"
FIGURES = {
    "fig1_collapse.png": "The collapse: λ under sustained aligned KL, original from 0.5 against fixed from 0.1.",
    "fig2_ramp_decay.png": "Ramp and decay: doubling under high KL, halving under low KL, measured steps marked.",
    "fig3_dead_zone.png": "The dead zone: KL drifting through both bands, λ of both controllers below it.",
    "fig4_noise_tolerance.png": "Noise tolerance (fix 3): how often log-normal KL noise moves λ, "
    "measured against erf(ln tol / (σ√2)).",
    "fig5_oscillation_recovery.png": "Oscillation and recovery: the square-wave sawtooth, and the steps needed "
    "to regain the seed λ after an aligned stretch.",
    "fig6_scenarios.png": "The scenario grid: every catalogue scenario, both controllers.",
    "fig7_bad_input.png": "Bad input: what one step does to λ for NaN, ±inf, 0, −0, negative and subnormal inputs.",
    "fig8_closed_loop.png": "Closed loop: λ and q_pi_agree over steps with each controller kernel driving the "
    "distillation toy (repro/toy/), default parameters, seed 0.",
    "fig9_ablation.png": "Which fix matters: collapse fraction for all 16 combinations of the four changes, over the "
    "robustness grid × seeds.",
    "fig10_peers.png": "Peer controllers: λ under sustained aligned KL for fixed, original and each published "
    "adaptive-KL rule (a cross marks λ reaching exactly 0).",
    **study_section.FIGURES,
    **study_section.FIGURES_2,
}


@dataclass
class Report:
    evidence: dict[str, Evidence]
    verdicts: dict[str, Verdict]
    cross: Verdict  # the original judged against the fixed contract
    trajectories: pd.DataFrame
    noise: dict[str, pd.DataFrame]
    recovery: dict[str, pd.DataFrame]
    outcomes: pd.DataFrame
    closed_loop: dict[str, dict]
    ablation: pd.DataFrame
    robustness: pd.DataFrame
    header: dict
    written: list[Path] = field(default_factory=list)
    peers: dict[str, Verdict] = field(default_factory=dict)  # each peer against its own contract
    peer_loop: pd.DataFrame | None = None  # the toy's collapse/diverged fractions, fixed, original and peers
    study: dict | None = None  # the learning-loop study's JSON
    study2: dict | None = None  # the second learning-loop study's JSON
    measures: dict[str, PeerMeasures] = field(default_factory=dict)  # the comparison's: fixed, original, peers


def _git_commit() -> str:
    """The suite's commit (``$RLQ_SUITE_COMMIT`` where the tree travelled without its .git, as to a GPU machine)."""
    import os

    if os.environ.get("RLQ_SUITE_COMMIT"):
        return os.environ["RLQ_SUITE_COMMIT"]
    try:
        rev = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.strip()
        # The report's own outputs (reports/) do not make the suite's code uncommitted.
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!reports"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        return rev + ("+uncommitted changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


def _bad_input_outcomes(evidence: dict[str, Evidence]) -> pd.DataFrame:
    """One row per bad-value case and controller: the slot/regime column, the value, what step 1 did."""
    rows = []
    for name, ev in evidence.items():
        rule = spec.Rule.of(ev.controller)
        for r in ev.catalogue:
            if r.scenario.family != "bad_values":
                continue
            parts = dict(r.scenario.inputs)
            if "lambda" in parts:
                column, value = f"λ (KL {parts['kl']})", parts["lambda"]
            else:
                (slot, value), = parts.items()
                column = "KL" if slot == "kl" else "target"
            rows.append({"controller": name, "case": r.scenario.name, "column": column, "value": value,
                         "outcome": classify(r.scenario.lambda0, r.lam[0], rule)})
    return pd.DataFrame(rows)


def measure(backend: Backend, sources: dict[str, KernelSource], contract: Contract, progress=print,
            closed_loop_seeds: int = 20, grid: dict | None = None, studies: dict[str, Path] | None = None) -> Report:
    """Run every experiment the report needs on ``sources`` (one per controller in CONTROLLERS; nothing is written).

    ``sources["fixed"]`` may be a candidate: every section (gate, experiments,
    closed loop, ablation, robustness) runs the kernel given here. ``closed_loop_seeds``
    and ``grid`` size the closed-loop studies (the tests pass a reduced grid).
    """
    entries = {name: contract.controller(name) for name in CONTROLLERS}
    progress(f"[1/5] gate: both controllers against their contracts on {backend.name} ({backend.describe()})")
    kernels = {name: backend.compile(sources[name], contract.slots) for name in CONTROLLERS}
    evidence, verdicts = {}, {}
    for name in CONTROLLERS:  # the gate's one gathering; the report's sections need no inference of these two
        start = time.perf_counter()
        evidence[name] = gather(backend, sources[name], contract.slots, entries[name], static=False, coverage=False)
        verdicts[name] = judge(evidence[name], sources[name], name, contract, backend, time.perf_counter() - start)
    # The report is about behaviour: the gate's static (PTX) and coverage rows are the gate's business.
    cross = evaluate(sources["original"], "fixed", backend, contract, static=False, coverage=False)
    traj = pd.concat([to_frame(evidence[n].catalogue, n, backend.name) for n in CONTROLLERS], ignore_index=True)
    progress(f"[2/5] experiments: noise tolerance ({len(SIGMAS)} σ values), recovery ({len(STRETCHES)} stretches)")
    noise = {n: experiments.noise_tolerance(kernels[n], entries[n], SIGMAS) for n in CONTROLLERS}
    recovery = {n: experiments.recovery(kernels[n], entries[n], STRETCHES) for n in CONTROLLERS}
    grid = grid or closed_loop.GRID
    n_grid = int(np.prod([len(v) for v in grid.values()]))
    progress(f"[3/5] closed loop: default runs, ablation of 16 variants × {n_grid} grid points × {closed_loop_seeds} seeds")
    subjects = {n: closed_loop.compile_subject(backend, sources[n], contract.slots, entries[n].value("seed_lambda"))
                for n in CONTROLLERS}
    loops = {n: closed_loop.one_run(backend, n, subjects[n]) for n in CONTROLLERS}
    candidate = sources["fixed"].sha256 != contract.source("fixed").sha256
    ablation = closed_loop.ablation(backend, sources["original"], contract.slots, entries["original"], entries["fixed"],
                                    seeds=closed_loop_seeds, grid=grid,
                                    extra={f"candidate ({sources['fixed'].origin})": subjects["fixed"]} if candidate else None)
    progress(f"      peers: {', '.join(contract.peers())} against their contracts, and in the toy")
    peers = {n: evaluate(contract.source(n), n, backend, contract, static=False, coverage=False)
             for n in contract.peers()}
    # One robustness study for ours and the peers (every controller on the same noise); ours are its first rows.
    subjects |= {n: closed_loop.compile_subject(backend, contract.source(n), contract.slots,
                                                contract.controller(n).value("seed_lambda")) for n in contract.peers()}
    peer_toy = closed_loop.robustness(backend, subjects, seeds=closed_loop_seeds, grid=grid)
    robustness = peer_toy[peer_toy.controller.isin(CONTROLLERS)].reset_index(drop=True)
    measures = peer_measures.measure_all({**verdicts, **peers})
    header = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "suite_commit": _git_commit(),
        "backend": backend.name,
        "device": backend.describe(),
        "kernels": {n: {"path": sources[n].origin, "sha256": sources[n].sha256} for n in CONTROLLERS},
    }
    if studies:  # the full studies as committed (made on the H200), not re-run here
        progress(f"      learning loop: both studies read from {', '.join(str(shown(p)) for p in studies.values())}")
        study, study2 = (_read_study(studies[k]) for k in ("first", "second"))
        where = {k: str(shown(p)) for k, p in studies.items()}
    else:
        full = backend.name == "cupy"
        progress("      learning loop: " + ("both pre-registered studies" if full else "the reduced studies (CPU)"))
        study = (learning_study.preregistered_study if full else learning_study.reduced_study)(
            backend, sources={"fixed": sources["fixed"]} if candidate else None)
        # the second study runs the contract's kernels (a candidate is judged by the first study and the gate)
        study2 = learning_study2.run(backend, learning_study2.load_prereg2()) if full else learning_study2.reduced_study(backend)
        where = {"first": "run here", "second": "run here"}
    header["studies"] = {k: f"{where[k]} (backend {s['backend']}, {'as pre-registered' if s['as_preregistered'] else 'reduced'})"
                         for k, s in (("first", study), ("second", study2))}
    return Report(evidence, verdicts, cross, traj, noise, recovery, _bad_input_outcomes(evidence), loops, ablation,
                  robustness, header, peers=peers, peer_loop=peer_toy, study=study, study2=study2, measures=measures)


def _read_study(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise SuiteError(f"{path}: not a study JSON ({err})") from None


def draw(report: Report, out: Path, progress=print) -> None:
    """Write every figure into ``out``."""
    contracts = {n: report.evidence[n].controller for n in CONTROLLERS}
    floors = {n: report.measures[n].floor_step for n in CONTROLLERS}
    counts = {n: {"double": report.measures[n].steps_to_double, "halve": report.measures[n].steps_to_halve}
              for n in CONTROLLERS}
    grid = [s for s in dict.fromkeys(report.trajectories.scenario)
            if report.trajectories.loc[report.trajectories.scenario == s, "family"].iloc[0] != "bad_values"]
    figures = {
        "fig1_collapse.png": lambda: plots.collapse(report.trajectories, contracts, floors),
        "fig2_ramp_decay.png": lambda: plots.ramp_decay(report.trajectories, counts),
        "fig3_dead_zone.png": lambda: plots.dead_zone(report.trajectories, contracts),
        "fig4_noise_tolerance.png": lambda: plots.noise_tolerance(report.noise, contracts),
        "fig5_oscillation_recovery.png": lambda: plots.oscillation_recovery(report.trajectories, report.recovery),
        "fig6_scenarios.png": lambda: plots.scenario_grid(report.trajectories, grid),
        "fig7_bad_input.png": lambda: plots.bad_input(report.outcomes),
        "fig8_closed_loop.png": lambda: plots.closed_loop(report.closed_loop),
        "fig9_ablation.png": lambda: plots.ablation(report.ablation),
        "fig10_peers.png": lambda: peers_plots.aligned(peers_section.aligned_traces(report.measures)),
        "fig11_study.png": lambda: study_plots.overview(report.study),
        "fig12_study_grid.png": lambda: study_plots.grid_heatmap(report.study),
        "fig13_incident.png": lambda: study_plots.incident(report.study2),
        "fig14_study2.png": lambda: study_plots.second_overview(report.study2),
    }
    for i, (name, make) in enumerate(figures.items(), start=1):
        plots.save(make(), out / name)
        report.written.append(out / name)
        progress(f"      figure {i}/{len(figures)}: {name}")


def write_data(report: Report, out: Path) -> None:
    data = out / "data"
    data.mkdir(parents=True, exist_ok=True)
    report.trajectories.to_csv(data / "trajectories.csv", index=False)
    props = {n: report.verdicts[n].as_dict() for n in CONTROLLERS}
    props["original_vs_fixed_contract"] = report.cross.as_dict()
    (data / "properties.json").write_text(json.dumps({"header": report.header, "verdicts": props}, indent=2))
    for name, frames in (("noise_tolerance.csv", report.noise), ("recovery.csv", report.recovery)):
        pd.concat([f.assign(controller=n) for n, f in frames.items()], ignore_index=True).to_csv(data / name,
                                                                                               index=False)
    report.outcomes.to_csv(data / "bad_inputs.csv", index=False)
    report.ablation.to_csv(data / "ablation.csv", index=False)
    report.robustness.to_csv(data / "robustness.csv", index=False)
    _peers_table(report).to_csv(data / "peers.csv", index=False)
    peers_section.aligned_traces(report.measures).to_csv(data / "peers_aligned.csv", index=False)
    if report.peer_loop is not None:
        report.peer_loop.to_csv(data / "peers_closed_loop.csv", index=False)
    (data / "closed_loop.json").write_text(json.dumps(report.closed_loop, indent=1))
    (data / "study.json").write_text(json.dumps(report.study, indent=1))
    (data / "study2.json").write_text(json.dumps(report.study2, separators=(",", ":")))
    report.written += sorted(data.iterdir())


def _peers_table(report: Report) -> pd.DataFrame:
    toy = None if report.peer_loop is None else peer_measures.toy_outcomes(report.measures, report.peer_loop)
    return peers_section.table(report.measures, toy)


def summary(report: Report, bench_dir: Path | None = None) -> str:
    """summary.md's text; every number is read from the report's measurements (and ``bench_dir``'s benchmark run)."""
    h, v = report.header, report.verdicts
    fixed, original = report.evidence["fixed"].controller, report.evidence["original"].controller
    lines = [
        "# λ-controller report: the collapse and the fix",
        "",
        f"- date: {h['date']}",
        f"- suite commit: `{h['suite_commit']}`",
        f"- backend: `{h['backend']}` on {h['device']}",
    ]
    for n in CONTROLLERS:
        k = h["kernels"][n]
        lines.append(f"- {n} kernel: `{k['path']}` sha256 `{k['sha256']}`")
    for k, text in h.get("studies", {}).items():
        lines.append(f"- {k} learning-loop study: {text}")
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
    keys = list(dict.fromkeys([f.key for f in v["fixed"].findings] + [f.key for f in v["original"].findings]))
    for key in keys:
        cells = [key]
        for n in CONTROLLERS:
            f = v[n].finding(key)
            cells += ([*(render.md_cell(read(f)) for read in (render.documented, render.predicted, render.measured)),
                       "pass" if f.ok else "**FAIL**"] if f else ["—", "—", "—", ""])
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Where the documentation and the measurements differ", ""]
    lines += _differences(report, fixed, original)
    lines += [""] + peers_section.markdown(report.measures, _peers_table(report))
    lines += ["", *study_section.section(report.study, figures=False)]
    lines += ["", *study_section.second_section(report.study2, figures=False)]
    lines += ["", "## Figures", ""]
    for i, (name, caption) in enumerate(FIGURES.items(), start=1):
        lines += [f"**Figure {i}.** {caption}", "", f"![{caption}]({name})", ""]
        lines += _figure_notes(report, name)
    lines += _bench_section(bench_dir) if bench_dir else []
    lines += ["## Data", "", "Everything above is recomputable from `data/`: `trajectories.csv` (tidy: controller, "
              "backend, scenario, step, kl, kl_target, lambda, …), `properties.json` (every measured property), "
              "`noise_tolerance.csv`, `recovery.csv`, `bad_inputs.csv`.", ""]
    return "\n".join(lines)


def _differences(report: Report, fixed, original) -> list[str]:
    v = report.verdicts
    out = []
    ramp_m, decay_m = v["fixed"].finding("ramp").measured, v["fixed"].finding("decay").measured
    dbl, hlv = report.measures["fixed"].steps_to_double, report.measures["fixed"].steps_to_halve
    if fixed.has("decay_slowness"):
        claim = fixed["decay_slowness"]
        out.append(f"- The kernel comment says *\"{claim.doc.split(': ', 1)[-1]}\"* Measured: the ratio of "
                   f"log-rates ln {ramp_m:.7f} / −ln {decay_m:.7f} is **{spec.decay_to_ramp_log_ratio(ramp_m, decay_m):.1f}×**, "
                   f"and steps to halve / steps to double is {hlv} / {dbl} = **{hlv / dbl:.1f}×** "
                   f"(documented {claim.value:g}×).")
    f = v["original"].finding("steps_to_floor")
    if f is not None and f.measured != original["steps_to_floor"].value:
        out.append(f"- The commit message says *\"{original['steps_to_floor'].doc}\"*. Measured on the "
                   f"reconstruction: {render.measured(f)} — the {int(original['steps_to_floor'].value)} steps bring λ "
                   f"to ≈ 0.001, the clamp lands one step later (closed form: {render.predicted(f)}).")
    for n in CONTROLLERS:
        for bad in v[n].failed:
            out.append(f"- **{n}: {bad.key} fails**: documented {render.documented(bad)}, measured "
                       f"{render.measured(bad)} (first shows: {render.where(bad.where)}).")
    return out or ["- Nothing: every documented value was measured as documented."]


def _figure_notes(report: Report, name: str) -> list[str]:
    if name == "fig4_noise_tolerance.png":
        rows = ["| σ | " + " | ".join(f"{n}: measured / predicted" for n in CONTROLLERS) + " |",
                "|---|" + "---|" * len(CONTROLLERS)]
        for i, sigma in enumerate(SIGMAS):
            if i % 5:
                continue
            cells = []
            for n in CONTROLLERS:
                tol = report.evidence[n].controller.value("tolerance")
                cells.append(f"{report.noise[n].changed_fraction.iloc[i]:.3f} / "
                             f"{1 - spec.in_band_probability(tol, sigma):.3f}")
            rows.append(f"| {sigma:g} | " + " | ".join(cells) + " |")
        return rows + [""]
    if name == "fig5_oscillation_recovery.png":
        rows = ["| aligned stretch (steps) | " + " | ".join(f"{n}: λ after → steps to regain seed λ"
                                                           for n in CONTROLLERS) + " |",
                "|---|" + "---|" * len(CONTROLLERS)]
        for i, n_steps in enumerate(STRETCHES):
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
        rb = report.robustness.groupby("controller").collapse_fraction
        lines = ["| variant | collapse fraction | median log10 q_pi_agree min | median λ min – max |",
                 "|---|---|---|---|"]
        for r in report.ablation.itertuples():
            lines.append(f"| {r.variant} | {r.collapse_fraction:.1%} | {r.median_log10_q_pi_agree_min:.1f} | "
                         f"{r.median_lambda_min:.3g} – {r.median_lambda_max:.3g} |")
        worst = report.robustness[report.robustness.controller == "fixed"].nlargest(3, "collapse_fraction")
        lines += ["", "Robustness over the grid (π's own signal × KL EMA rate × KL target, each × seeds): "
                  + ", ".join(f"{c} collapses in {m:.1%} of runs" for c, m in rb.mean().items()) + ". "
                  "Grid points where the fixed controller collapses most: "
                  + "; ".join(f"actor_lr {w.actor_lr:g}, EMA rate {w.kl_ema_rate:g}, target {w.kl_target:g}: "
                              f"{w.collapse_fraction:.0%}" for w in worst.itertuples()) + " (`data/robustness.csv`).", ""]
        return lines
    return []


def _bench_section(bench_dir: Path) -> list[str]:
    """The benchmark's table and figure, from the committed baseline runs of the reference GPU under ``bench_dir``."""
    got = bench_verdict.committed(bench_dir)
    if got is None:
        return []
    df, repeat, machine, paths, checks = got
    table = bench_report.table(df, None if repeat is None else bench_verdict.run_to_run(df, repeat), checks)
    gpu = machine.get("gpu", {})
    where = f"{gpu['name']}, CuPy {gpu['cupy']}" if gpu else machine.get("cpu", {}).get("brand_raw", "CPU")
    runs = " and ".join(f"`bench/{p.relative_to(bench_dir).as_posix()}`" for p in paths)
    return ["## Launch overhead (benchmark)", "",
            f"From the benchmark runs {runs} ({where}; pytest-benchmark JSON; a separate job, `tox -e bench`).", "",
            table, "", "![launch overhead](bench/bench.png)", ""]


def write(report: Report, out: Path, progress=print) -> None:
    out.mkdir(parents=True, exist_ok=True)
    progress(f"[4/5] figures → {out}")
    draw(report, out, progress)
    progress(f"[5/5] data and summary → {out}")
    write_data(report, out)
    (out / "summary.md").write_text(summary(report, out / "bench"))
    report.written.append(out / "summary.md")


@policy.command("report")
def main(argv: list[str] | None = None) -> int:
    parser = policy.Parser(prog="python -m analysis report", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=policy.path, default=COMMITTED, help="output folder (default: reports/, "
                        "the committed report; a folder holding other files of the repository is refused)")
    parser.add_argument("--backend", default="auto", choices=NAMES)
    parser.add_argument("--kernel", type=policy.path, help="candidate kernel to report in the fixed controller's place")
    parser.add_argument("--studies", nargs=2, type=policy.path, metavar=("FIRST", "SECOND"),
                        help="read both learning-loop studies from these JSONs (the committed H200 results) "
                        "instead of running them")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    contract = load()
    studies = dict(zip(("first", "second"), args.studies, strict=True)) if args.studies else None
    check_outputs([Output("--out", args.out, folder=True)],
                  inputs=[("kernel", args.kernel), ("contract", contract.path),
                          *((f"{k} study", v) for k, v in (studies or {}).items())], committed=[COMMITTED])
    if args.studies and args.kernel:
        raise SuiteError("--studies reads the contract kernels' studies; a --kernel candidate needs them run")
    sources = {n: contract.source(n) for n in CONTROLLERS}
    if args.kernel:
        sources["fixed"] = contract.source("fixed", args.kernel)
    progress = policy.progress("report")
    report = measure(get_backend(args.backend), sources, contract, progress=progress, studies=studies)
    write(report, args.out, progress=progress)
    figs = sum(p.suffix == ".png" for p in report.written)
    print(f"done in {time.perf_counter() - start:.1f} s: {args.out / 'summary.md'}, {figs} figures, "
          f"data in {args.out / 'data'}")
    return 0
