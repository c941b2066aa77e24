"""Benchmark results (pytest-benchmark JSON) as a Markdown table and a PNG.

    python -m analysis.bench_report RUN.json [--repeat RUN2.json] [--out DIR]

Per mode: median and IQR in µs per step for the controller and its empty-kernel
twin, their ratio, and the rounds. With ``--repeat`` (a second, back-to-back
run) each median's change between the runs is shown against the 5 %
repeatability goal. Times come from CUDA events where the benchmark recorded
them (``device_us``), else from pytest-benchmark's wall-clock round times
divided by the steps a round holds.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from analysis import plots

REPEATABILITY = 0.05  # the goal: two back-to-back runs' medians within 5 %


def load(path: Path) -> tuple[pd.DataFrame, dict]:
    """One row per benchmark: mode, kernel, median/q1/q3/min/max in µs per step, rounds, clock."""
    try:
        data = json.loads(Path(path).read_text())
        benchmarks = data["benchmarks"]
    except (OSError, ValueError, KeyError) as err:
        raise SystemExit(f"bench_report: error: {path}: not a pytest-benchmark JSON file ({err})") from None
    rows = []
    for b in benchmarks:
        info, stats = b["extra_info"], b["stats"]
        if "device_us" in info and info["device_us"]:
            per = np.asarray(info["device_us"], dtype=float)
            q1, med, q3 = np.percentile(per, [25, 50, 75])
            lo, hi, clock = per.min(), per.max(), "CUDA events"
        else:
            scale = 1e6 / info["ops_per_round"]
            q1, med, q3 = (stats[k] * scale for k in ("q1", "median", "q3"))
            lo, hi, clock = stats["min"] * scale, stats["max"] * scale, "wall clock"
        rows.append({"mode": info["mode"], "kernel": info["kernel"], "median_us": med, "q1_us": q1, "q3_us": q3,
                     "min_us": lo, "max_us": hi, "rounds": stats["rounds"], "steps_per_round": info["ops_per_round"],
                     "clock": clock, **{k: v for k, v in info.items() if k in ("steps_per_s", "achieved_gbs",
                                                                                 "copy_gbs", "copy_fraction")}})
    return pd.DataFrame(rows), data.get("machine_info", {})


def compact(path: Path) -> None:
    """Drop the per-round samples (``stats.data``) from a results file; the summary stats stay."""
    data = json.loads(Path(path).read_text())
    for b in data.get("benchmarks", []):
        b.get("stats", {}).pop("data", None)
    Path(path).write_text(json.dumps(data, indent=1))


def _us(x: float) -> str:
    return f"{x:.3g}" if x < 1 else f"{x:.2f}"


def table(df: pd.DataFrame, repeat: pd.DataFrame | None = None) -> str:
    head = "| mode | controller µs/step: median (IQR) | empty µs/step: median (IQR) | ratio | rounds | clock |"
    sep = "|---|---|---|---|---|---|"
    if repeat is not None:
        head += " run-to-run Δ median (controller / empty) |"
        sep += "---|"
    lines = [head, sep]
    flagged, steady = [], []
    for mode in dict.fromkeys(df["mode"]):
        part = df[df["mode"] == mode].set_index("kernel")
        cells = []
        for k in ("controller", "empty"):
            r = part.loc[k] if k in part.index else None
            cells.append("—" if r is None else f"{_us(r.median_us)} ({_us(r.q1_us)}–{_us(r.q3_us)})")
        ratio = (part.loc["controller", "median_us"] / part.loc["empty", "median_us"]
                 if {"controller", "empty"} <= set(part.index) else float("nan"))
        row = (f"| {mode} | {cells[0]} | {cells[1]} | {ratio:.2f}× | {int(part['rounds'].iloc[0])} "
               f"| {part['clock'].iloc[0]} |")
        if repeat is not None:
            other = repeat[repeat["mode"] == mode].set_index("kernel")
            deltas = []
            for k in ("controller", "empty"):
                if k in part.index and k in other.index:
                    d = other.loc[k, "median_us"] / part.loc[k, "median_us"] - 1
                    deltas.append(f"{d:+.1%}" + (" ⚠" if abs(d) > REPEATABILITY else ""))
                    (flagged if abs(d) > REPEATABILITY else steady).append((mode, abs(d)))
            row += f" {' / '.join(deltas)} |"
        lines.append(row)
    if flagged:
        modes = ", ".join(dict.fromkeys(m for m, _ in flagged))
        calm = sorted({m for m, _ in steady} - {m for m, _ in flagged})
        worst = max((d for m, d in steady if m in calm), default=float("nan"))
        lines += ["", f"⚠ a median that moved more than {REPEATABILITY:.0%} between the two runs: {modes}. These are "
                  "the modes whose time the host sets (a ctypes call, Python launching and waiting, or CUDA events "
                  "around launches the host enqueues one by one), and the host is a shared virtual machine whose "
                  f"CPU state drifts between runs; the other modes moved at most {worst:.1%}."]
    many = df[df["steps_per_s"].notna()] if "steps_per_s" in df else df.iloc[0:0]
    for _, r in many.iterrows():
        lines.append("")
        if r.kernel == "controller":
            lines.append(f"- {r['mode']}, controller: {r.steps_per_s:.3g} steps/s; {r.achieved_gbs:.0f} GB/s of the "
                         f"8 bytes a step must move (KL in, λ out), {r.copy_fraction:.0%} of the {r.copy_gbs:.0f} GB/s "
                         "device-to-device copy measured in the same run.")
        else:  # the empty kernel never reads the KL it is given, so the compiler drops that load
            lines.append(f"- {r['mode']}, empty kernel: {r.steps_per_s:.3g} steps/s (it writes λ but never reads KL, "
                         "so the compiler drops the KL load: a floor, not a bandwidth).")
    return "\n".join(lines)


def figure(df: pd.DataFrame):
    """Bars (log µs per step) with IQR whiskers, the empty-kernel twin beside each mode."""
    modes = list(dict.fromkeys(df["mode"]))
    fig, ax = plots.plt.subplots(figsize=(9, 0.55 * len(modes) + 1.6))
    colors = {"controller": plots.COLORS["fixed"], "empty": "#999999"}
    for j, k in enumerate(("controller", "empty")):
        part = df[df.kernel == k].set_index("mode").reindex(modes)
        y = np.arange(len(modes)) + (j - 0.5) * 0.38
        err = np.vstack([part.median_us - part.q1_us, part.q3_us - part.median_us])
        ax.barh(y, part.median_us, height=0.36, color=colors[k], xerr=err, capsize=3,
                label=f"{k} kernel" if k == "empty" else "controller (fixed)")
    ax.set_yticks(np.arange(len(modes)), modes)
    ax.invert_yaxis()
    ax.set(xscale="log", xlabel="µs per step (median; whiskers: interquartile range; log)",
           title="What the controller costs per training step, beside an empty kernel")
    ax.legend(loc="lower right")
    fig.tight_layout()
    return fig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.bench_report", description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--repeat", type=Path, help="a second, back-to-back run, for the repeatability column")
    parser.add_argument("--out", type=Path, help="folder for bench.md and bench.png (default: beside RUN)")
    args = parser.parse_args(argv)
    if not args.run.is_file():
        print(f"bench_report: error: no such file: {args.run}", file=sys.stderr)
        return 2
    df, machine = load(args.run)
    repeat = load(args.repeat)[0] if args.repeat else None
    out = args.out or args.run.parent
    out.mkdir(parents=True, exist_ok=True)
    gpu = machine.get("gpu", {})
    header = [f"# Launch-overhead benchmark ({args.run.name})", "",
              f"- CPU: {machine.get('cpu', {}).get('brand_raw', machine.get('processor', '?'))}, "
              f"Python {machine.get('python_version', '?')}"]
    if gpu:
        header.append(f"- GPU: {gpu.get('name')} (driver {gpu.get('driver')}, CUDA runtime {gpu.get('runtime')}, "
                      f"CuPy {gpu.get('cupy')})")
    text = "\n".join(header) + "\n\n" + table(df, repeat) + "\n"
    (out / "bench.md").write_text(text)
    plots.save(figure(df), out / "bench.png")
    print(text)
    print(f"wrote {out / 'bench.md'} and {out / 'bench.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
