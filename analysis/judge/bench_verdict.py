"""The benchmark gate: which modes a run may be judged on, with what threshold, and which regressed.

A run (:class:`BenchRun`) is the JSON pytest-benchmark writes for ``tests/test_bench.py`` (``--benchmark-json``): one
benchmark per mode × kernel, its stats in seconds per call of the mode, what it is in ``extra_info``
(:func:`repro.bench.info`, with the controller steps a call holds). :func:`load_run` reads it as one row per
benchmark, in µs per step.
A baseline is a folder of two or more such runs (``run-1.json``, ``run-2.json``, ...): a pair of back-to-back runs of one machine,
and optionally more pairs from other machines of the same kind (fresh
machines differ more than two runs of one do). Per mode the gate judges
one number: the controller's median µs per step where the device sets the
time (its work is timed on the GPU), and the controller/empty ratio of the
same run where the host sets it (a host's absolute speed drifts between runs
and machines; a ratio measured in one run cancels that drift). A number that
moved more than twice the 5 % run-to-run goal between the baseline's two
back-to-back runs does not reproduce: its mode is reported and not gated. (With
more than two runs, "change" is the largest over the smallest, minus one.) The
others are gated at three times the largest run-to-run change among the gated
modes of the same kind (device medians, or host ratios), never below the 5 %
goal: one mode's change in one pair is a single draw, and modes timed the
same way share the noise that produced it. Only a slower controller (a larger
number) fails.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from repro.core.errors import SuiteError

REPEATABILITY = 0.05  # the goal: two back-to-back runs within 5 %
#: The machine whose baseline the committed table reports/bench/bench.md shows (``repro.bench.machine_tag``).
REFERENCE = "NVIDIA_H200"
SPREAD_FACTOR = 3  # threshold = this many times the baseline's own run-to-run spread (at least the goal)
UNGATED_ABOVE = 2 * REPEATABILITY  # a spread beyond this does not reproduce: report, do not gate
#: A machine without a baseline of its own is gated on what does not depend on the machine: each device-timed mode's
#: controller/empty ratio (both kernels timed side by side in the same run by the device's clock), against the
#: highest mean ratio any committed baseline measured, allowed to rise by this fraction (or SPREAD_FACTOR × that
#: baseline's own run-to-run spread, if larger). A controller whose cost doubles doubles its ratio (+100 %); a ratio
#: that differs between machines by less than half passes. Host-timed modes are not gated this way: their ratio moves
#: with the host (0.57–2.16× over 8 back-to-back runs of the host mode on a 2-core virtual machine).
PORTABLE_RISE = 0.5


@dataclass(frozen=True)
class BenchRun:
    """One pytest-benchmark JSON file of the suite's benchmarks: its rows (µs per step) and machine."""

    path: Path
    df: pd.DataFrame
    machine: dict  # pytest-benchmark's machine_info; "rlq_machine" names the baseline it belongs to

    @property
    def tag(self) -> str:
        return str(self.machine.get("rlq_machine", "?"))


_STATS_US = {"median_us": "median", "q1_us": "q1", "q3_us": "q3", "min_us": "min", "max_us": "max", "mean_us": "mean",
             "stddev_us": "stddev"}


def frame(benchmarks: list[dict]) -> pd.DataFrame:
    """One row per benchmark of pytest-benchmark's ``benchmarks`` list that carries a mode in ``extra_info``:
    its scalar ``extra_info`` (mode, kernel, clock, set_by, what, ...), median/q1/q3/min/max/mean/stddev in µs per
    step (pytest-benchmark's seconds per call / ``steps_per_call``; runs saved before issue 36 stored seconds per
    step, and have no ``steps_per_call``), rounds."""
    rows = []
    for b in benchmarks:
        info = b.get("extra_info", {})
        if "mode" not in info:
            continue
        per = info.get("steps_per_call")  # None: a run saved before issue 36, its stats already per step
        rows.append({**{k: v for k, v in info.items() if isinstance(v, int | float | str | bool)},
                     **{k: b["stats"][s] * 1e6 / (per or 1) for k, s in _STATS_US.items()},
                     "rounds": b["stats"]["rounds"], "steps_per_call": per or info.get("steps_per_round", 1)})
    return pd.DataFrame(rows)


def load_run(path: Path) -> BenchRun:
    """A pytest-benchmark JSON of the suite's benchmarks; a one-line :class:`SuiteError` for anything else."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        df = frame(data["benchmarks"])
        machine = dict(data["machine_info"])
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise SuiteError(f"{path}: not a pytest-benchmark JSON ({type(err).__name__}: {err})".splitlines()[0]) from None
    if df.empty:
        raise SuiteError(f"{path}: a pytest-benchmark JSON without any of tests/test_bench.py's benchmarks")
    return BenchRun(Path(path), df, machine)


def baseline_runs(folder: Path) -> list[Path]:
    """The run files of a baseline folder, in the order they were recorded (run-1.json, run-2.json, ...)."""
    return sorted(Path(folder).glob("run-*.json"), key=lambda p: int(p.stem.split("-")[1]) if
                  p.stem.split("-")[1].isdigit() else 0)


def load_baseline(folder: Path) -> list[BenchRun]:
    """A baseline's runs (at least two, all of one machine); a one-line :class:`SuiteError` otherwise."""
    if not Path(folder).is_dir():
        raise SuiteError(f"{folder}: not a baseline folder (one with run-1.json, run-2.json, ...)")
    runs = [load_run(p) for p in baseline_runs(folder)]
    if len(runs) < 2:
        raise SuiteError(f"{folder}: a baseline needs at least two runs (it has {len(runs)})")
    if len({r.tag for r in runs}) > 1:
        raise SuiteError(f"{folder}: runs of different machines ({', '.join(sorted({r.tag for r in runs}))})")
    return runs


@dataclass(frozen=True)
class ModeCheck:
    """One mode's gate: the judged number in the baseline pair and (when given) in the run under test."""

    mode: str
    metric: str  # "median" (controller µs per step) or "ratio" (controller / empty)
    base: float  # mean over the baseline's runs
    spread: float  # largest / smallest − 1 over the baseline's runs
    threshold: float | None  # allowed relative increase; None = not gated
    now: float | None = None
    reason: str = ""  # why a mode is not gated

    @property
    def gated(self) -> bool:
        return self.threshold is not None

    @property
    def change(self) -> float | None:
        return None if self.now is None else self.now / self.base - 1

    @property
    def regressed(self) -> bool:
        return self.gated and self.change is not None and self.change > self.threshold


def ratio(df: pd.DataFrame, mode: str) -> float | None:
    """``mode``'s controller/empty ratio of medians in one run's frame (None when the run lacks a kernel)."""
    part = df[df["mode"] == mode].set_index("kernel")
    if not {"controller", "empty"} <= set(part.index):
        return None
    return float(part.loc["controller", "median_us"] / part.loc["empty", "median_us"])


def judged_number(df: pd.DataFrame, mode: str) -> tuple[str, float] | None:
    """The number the gate judges for ``mode`` in one run's frame (None when the run lacks it)."""
    part = df[df["mode"] == mode].set_index("kernel")
    if "controller" not in part.index:
        return None
    if part.loc["controller", "set_by"] == "device":
        return "median", float(part.loc["controller", "median_us"])
    got = ratio(df, mode)
    return None if got is None else ("ratio", got)


def difference(df: pd.DataFrame, mode: str) -> tuple[float, float] | None:
    """``mode``'s controller − empty mean µs per step and the half-width of its 95 % Welch interval (the two kernels'
    rounds are independent samples); None when the run lacks a kernel or a spread."""
    from scipy.special import stdtrit  # Student t's quantile; scipy.stats costs seconds to import

    part = df[df["mode"] == mode].set_index("kernel")
    if not {"controller", "empty"} <= set(part.index) or "stddev_us" not in part:
        return None
    (m1, s1, n1), (m2, s2, n2) = (part.loc[k, ["mean_us", "stddev_us", "rounds"]] for k in ("controller", "empty"))
    v1, v2 = s1 ** 2 / n1, s2 ** 2 / n2
    if n1 < 2 or n2 < 2 or v1 + v2 == 0:
        return None
    dof = (v1 + v2) ** 2 / (v1 ** 2 / (n1 - 1) + v2 ** 2 / (n2 - 1))
    return float(m1 - m2), float(stdtrit(dof, 0.975) * (v1 + v2) ** 0.5)


def throughput(df: pd.DataFrame) -> list[dict]:
    """Per row that moved a known number of bytes (``bytes_moved``): steps per second and GB/s at its fastest round,
    and that as a fraction of the device-to-device copy bandwidth measured beside it."""
    if "bytes_moved" not in df:
        return []
    out = []
    for _, r in df[df["bytes_moved"].notna()].iterrows():
        call_s = r["min_us"] * 1e-6 * r["steps_per_call"]
        gbs = r["bytes_moved"] / call_s / 1e9
        out.append({"mode": r["mode"], "kernel": r["kernel"], "steps_per_s": 1 / (r["min_us"] * 1e-6),
                    "achieved_gbs": gbs, "copy_gbs": r["copy_gbs"], "copy_fraction": gbs / r["copy_gbs"]})
    return out


def thresholds(*baseline: pd.DataFrame) -> list[ModeCheck]:
    """Per mode of the baseline's runs: the judged number, its run-to-run spread, and the threshold it earns."""
    numbers = {}
    for mode in dict.fromkeys(baseline[0]["mode"]):
        got = [judged_number(run, mode) for run in baseline]
        if all(g is not None for g in got):
            values = [g[1] for g in got]
            numbers[mode] = (got[0][0], sum(values) / len(values), max(values) / min(values) - 1)
    pooled = {}  # per kind of number: the largest spread among the modes that reproduce
    for metric, _, spread in numbers.values():
        if spread <= UNGATED_ABOVE:
            pooled[metric] = max(pooled.get(metric, 0.0), spread)
    checks = []
    for mode, (metric, base, spread) in numbers.items():
        if spread > UNGATED_ABOVE:
            what = "controller/empty ratio" if metric == "ratio" else "median"
            checks.append(ModeCheck(mode, metric, base, spread, None,
                                    reason=f"its {what} moved {spread:.1%} between the baseline's runs "
                                           f"(> {UNGATED_ABOVE:.0%}): it does not reproduce"))
        else:
            checks.append(ModeCheck(mode, metric, base, spread, max(REPEATABILITY, SPREAD_FACTOR * pooled[metric])))
    return checks


def judge_run(run: pd.DataFrame, *baseline: pd.DataFrame) -> list[ModeCheck]:
    """Each baseline mode's check, with the run's judged number filled in; a mode the run lacks is not gated (its
    reason says so)."""
    out = []
    for check in thresholds(*baseline):
        got = judged_number(run, check.mode)
        if got is None:
            out.append(ModeCheck(**{**check.__dict__, "threshold": None, "reason": "not measured in this run"}))
        else:
            out.append(ModeCheck(**{**check.__dict__, "now": got[1]}))
    return out


def baselines(root: Path) -> dict[str, list[pd.DataFrame]]:
    """Every committed baseline under ``root`` (one folder per machine), as that machine's runs' frames."""
    out = {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        if baseline_runs(folder):
            runs = load_baseline(folder)
            out[runs[0].tag] = [r.df for r in runs]
    return out


def portable(run: pd.DataFrame, committed_runs: dict[str, list[pd.DataFrame]]) -> list[ModeCheck]:
    """The gate of a machine without a baseline: per device-timed mode of ``run`` whose controller/empty ratio some committed
    baseline measured in each of its runs, the highest per-machine mean ratio, the largest per-machine run-to-run
    spread, and the threshold :data:`PORTABLE_RISE` (or :data:`SPREAD_FACTOR` × that spread); not gated where that
    spread exceeds :data:`UNGATED_ABOVE`."""
    out = []
    device = set(run.loc[run["set_by"] == "device", "mode"])
    for mode in dict.fromkeys(run["mode"]):
        if mode not in device:
            continue
        now, per = ratio(run, mode), []
        for frames in committed_runs.values():
            values = [ratio(df, mode) for df in frames]
            if values and all(v is not None for v in values):
                per.append((sum(values) / len(values), max(values) / min(values) - 1))
        if now is None or not per:
            continue
        base, spread = max(m for m, _ in per), max(s for _, s in per)
        if spread > UNGATED_ABOVE:
            out.append(ModeCheck(mode, "ratio", base, spread, None, now=now,
                                 reason=f"its controller/empty ratio moved {spread:.1%} between a baseline's runs"))
        else:
            out.append(ModeCheck(mode, "ratio", base, spread, max(PORTABLE_RISE, SPREAD_FACTOR * spread), now=now))
    return out


def gated_count(checks: list[ModeCheck]) -> int:
    """How many modes the run was judged on: gated, with a number measured now."""
    return sum(c.gated and c.now is not None for c in checks)


def regressions(checks: list[ModeCheck]) -> list[str]:
    """One line per regressed mode: what it judged, the baseline, now, the change and the allowed change."""
    return [f"REGRESSED {c.mode}: {c.now:.4g} vs baseline {c.base:.4g} "
            f"{'µs/step (controller median)' if c.metric == 'median' else '× (controller/empty ratio)'}, "
            f"{c.change:+.1%} > +{c.threshold:.1%} allowed" for c in checks if c.regressed]


def wrong_results(df: pd.DataFrame) -> list[str]:
    """One line per sample whose timed path did not compute the spec model's bits."""
    if "matches_spec" not in df:
        return []
    bad = df[df["matches_spec"] == False]  # noqa: E712 (a column of Python bools)
    return [f"WRONG RESULT {r['mode']} [{r['kernel']}]: the timed path does not compute the spec model's bits"
            for _, r in bad.iterrows()]


def committed(bench_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame | None, dict, list[Path], list[ModeCheck]] | None:
    """The committed table's data under ``bench_dir``: the reference machine's last two baseline runs, the
    machine, their paths, and the gate every mode gets from all the baseline's runs (None: no baseline)."""
    every = baseline_runs(Path(bench_dir) / "baselines" / REFERENCE)
    if not every:
        return None
    runs = [load_run(p) for p in every]
    checks = thresholds(*(r.df for r in runs)) if len(runs) > 1 else []
    last = runs[-2:]
    return last[0].df, last[1].df if len(last) > 1 else None, last[0].machine, every[-2:], checks


def run_to_run(first: pd.DataFrame, second: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Per mode of ``first``, per kernel (controller, empty) timed in both runs: the relative change of its
    median µs per step from ``first`` to ``second``."""
    out = {}
    for mode in dict.fromkeys(first["mode"]):
        a = first[first["mode"] == mode].set_index("kernel")
        b = second[second["mode"] == mode].set_index("kernel")
        out[mode] = {k: b.loc[k, "median_us"] / a.loc[k, "median_us"] - 1 for k in ("controller", "empty")
                     if k in a.index and k in b.index}
    return out


def beyond_goal(change: float) -> bool:
    """Whether a run-to-run change (relative, :func:`run_to_run`) misses the repeatability goal."""
    return abs(change) > REPEATABILITY
