"""Benchmark runs (pytest-benchmark JSON, :func:`analysis.judge.bench_verdict.load_run`) as a Markdown table and a PNG.

Per mode: median and IQR in µs per step for the controller and its
empty-kernel twin, their ratio, the controller − empty difference of the
rounds with its 95 % (Welch) confidence interval, the rounds, the clock that timed it and what
sets its time. Handed a second, back-to-back run's changes (:func:`analysis.judge.bench_verdict.run_to_run`),
each median's change between the runs is shown against the 5 % repeatability goal; handed the gate's checks
(:func:`analysis.judge.bench_verdict.thresholds` or ``judge_run``), the gate each mode gets. Nothing is judged
here. A second table says what each mode measures.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis.judge import bench_verdict
from analysis.judge.bench_verdict import REPEATABILITY, ModeCheck, beyond_goal


def _us(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1 else f"{x:.2f}"


def _gate_cell(check: ModeCheck | None) -> str:
    if check is None:
        return "—"
    if not check.gated:
        return f"not gated ({check.spread:.0%} run-to-run)"
    what = "median" if check.metric == "median" else "ratio"
    if check.now is None:
        return f"{what} ≤ +{check.threshold:.1%}"
    return f"{what} {check.change:+.1%} (≤ +{check.threshold:.1%}) {'**REGRESSED**' if check.regressed else 'ok'}"


def table(df: pd.DataFrame, drift: dict[str, dict[str, float]] | None = None,
          checks: list[ModeCheck] | None = None) -> str:
    """The results table; with ``drift`` (:func:`analysis.judge.bench_verdict.run_to_run`) the run-to-run Δ,
    with ``checks`` the gate per mode."""
    by_mode = {c.mode: c for c in checks or []}
    head = ("| mode | controller µs/step: median (IQR) | empty µs/step: median (IQR) | ratio "
            "| controller − empty µs/step (95 % CI) | rounds | clock | set by |")
    sep = "|---|---|---|---|---|---|---|---|"
    if drift is not None:
        head += " run-to-run Δ median (controller / empty) |"
        sep += "---|"
    if checks is not None:
        head += " gate |"
        sep += "---|"
    lines = [head, sep]
    flagged = []
    for mode in dict.fromkeys(df["mode"]):
        part = df[df["mode"] == mode].set_index("kernel")
        cells = []
        for k in ("controller", "empty"):
            r = part.loc[k] if k in part.index else None
            cells.append("—" if r is None else f"{_us(r.median_us)} ({_us(r.q1_us)}–{_us(r.q3_us)})")
        ratio = bench_verdict.ratio(df, mode)
        ratio = float("nan") if ratio is None else ratio  # a kernel missing
        first = part.iloc[0]
        gap = bench_verdict.difference(df, mode)
        diff = "—" if gap is None else f"{_us(gap[0])} ± {_us(gap[1])}"
        row = (f"| {mode} | {cells[0]} | {cells[1]} | {ratio:.2f}× | {diff} | {int(first['rounds'])} | {first['clock']} "
               f"| {first['set_by']} |")
        if drift is not None:
            changes = drift.get(mode, {}).values()
            deltas = [f"{d:+.1%}" + (" ⚠" if beyond_goal(d) else "") for d in changes]
            flagged += [mode] if any(beyond_goal(d) for d in changes) else []
            row += f" {' / '.join(deltas) or '—'} |"
        if checks is not None:
            row += f" {_gate_cell(by_mode.get(mode))} |"
        lines.append(row)
    if flagged:
        lines += ["", f"⚠ a median that moved more than {REPEATABILITY:.0%} between the two runs: "
                  f"{', '.join(flagged)}."]
    lines += _notes(df)
    return "\n".join(lines)


def _notes(df: pd.DataFrame) -> list[str]:
    """Throughput sentences (:func:`analysis.judge.bench_verdict.throughput`)."""
    out = []
    for r in bench_verdict.throughput(df):
        if r["kernel"] == "controller":
            out.append(f"- {r['mode']}, controller: {r['steps_per_s']:.3g} steps/s; {r['achieved_gbs']:.0f} GB/s of the "
                       f"8 bytes a step must move (KL in, λ out), {r['copy_fraction']:.0%} of the {r['copy_gbs']:.0f} "
                       "GB/s device-to-device copy measured in the same run.")
        else:  # the empty kernel never reads the KL it is given, so the compiler drops that load
            out.append(f"- {r['mode']}, empty kernel: {r['steps_per_s']:.3g} steps/s (it writes λ but never reads KL, "
                       "so the compiler drops the KL load: a floor, not a bandwidth).")
    return [""] + out if out else []


def modes_table(df: pd.DataFrame, checks: list[ModeCheck] | None, skipped: dict[str, str]) -> str:
    """What each mode measures, which clock times it, what sets its time, and whether and how it is gated."""
    by_mode = {c.mode: c for c in checks or []}
    lines = ["| mode | what it measures | clock | set by | gated on |", "|---|---|---|---|---|"]
    for mode in dict.fromkeys(df["mode"]):
        r = df[df["mode"] == mode].iloc[0]
        c = by_mode.get(mode)
        if c is None:
            gate = "no baseline for this machine"
        elif not c.gated:
            gate = f"not gated: {c.reason}"
        else:
            what = "controller median" if c.metric == "median" else "controller/empty ratio of the same run"
            gate = f"{what}, fails beyond +{c.threshold:.1%} (baseline spread {c.spread:.1%})"
        lines.append(f"| {mode} | {r['what']} | {r['clock']} | {r['set_by']} | {gate} |")
    lines += [f"| {mode} | not run here: {why} | — | — | — |" for mode, why in skipped.items()]
    return "\n".join(lines)


def figure(df: pd.DataFrame):
    """Bars (log µs per step) with IQR whiskers, the empty-kernel twin beside each mode."""
    from analysis.present import plots  # matplotlib where a figure is drawn, not where a table is

    modes = list(dict.fromkeys(df["mode"]))
    fig, ax = plots.plt.subplots(figsize=(9, 0.55 * len(modes) + 1.6))
    colors = {"controller": plots.COLORS["fixed"], "empty": "#999999"}
    for j, k in enumerate(("controller", "empty")):
        part = df[df.kernel == k].set_index("mode").reindex(modes)
        y = np.arange(len(modes)) + (j - 0.5) * 0.38
        err = np.clip(np.vstack([part.median_us - part.q1_us, part.q3_us - part.median_us]), 0, None)
        ax.barh(y, part.median_us.clip(lower=1e-7), height=0.36, color=colors[k], xerr=err, capsize=3,
                label=f"{k} kernel" if k == "empty" else "controller (fixed)")
    ax.set_yticks(np.arange(len(modes)), modes)
    ax.invert_yaxis()
    ax.set(xscale="log", xlabel="µs per step (median; whiskers: interquartile range; log)",
           title="What the controller costs per training step, beside an empty kernel")
    ax.legend(loc="lower right")
    return plots.tight(fig)


def header(title: str, machine: dict, runs: list[str]) -> str:
    """Title, CPU/GPU lines, and the repo-relative JSON files the table was made from (``runs``)."""
    gpu = machine.get("gpu", {})
    lines = [f"# {title}", "", f"- CPU: {machine.get('cpu', {}).get('brand_raw', '?')}, "
             f"Python {machine.get('python_version', '?')}",
             f"- Data: {', '.join(f'`{r}`' for r in runs)} (pytest-benchmark JSON)"]
    if gpu:
        lines.append(f"- GPU: {gpu.get('name')} (CUDA driver API {gpu.get('cuda_driver_api')}, CUDA runtime "
                     f"{gpu.get('runtime')}, CuPy {gpu.get('cupy')})")
    return "\n".join(lines)


def write(out: Path, title: str, df: pd.DataFrame, machine: dict, drift: dict[str, dict[str, float]] | None,
          checks: list[ModeCheck] | None, skipped: dict[str, str], verdict: list[str], runs: list[str]) -> str:
    """Write ``bench.md`` and ``bench.png`` under ``out``; returns the Markdown (``runs``: the data's paths;
    ``drift`` and ``checks`` as :func:`table`'s; ``verdict``: its lines, as the command says them)."""
    parts = [header(title, machine, runs), table(df, drift, checks),
             "## Verdict\n\n" + "\n".join(f"- {line}" for line in verdict),
             "## Modes\n\n" + modes_table(df, checks, skipped)]
    text = "\n\n".join(parts) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.md").write_text(text)
    from analysis.present import plots

    plots.save(figure(df), out / "bench.png")
    return text

