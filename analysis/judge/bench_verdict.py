"""The benchmark gate: which modes a run may be judged on, with what threshold, and which regressed.

A baseline is two or more runs: a pair of back-to-back runs of one machine,
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

from dataclasses import dataclass

import pandas as pd

REPEATABILITY = 0.05  # the goal: two back-to-back runs within 5 %
SPREAD_FACTOR = 3  # threshold = this many times the baseline's own run-to-run spread (at least the goal)
UNGATED_ABOVE = 2 * REPEATABILITY  # a spread beyond this does not reproduce: report, do not gate


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


def judged_number(df: pd.DataFrame, mode: str) -> tuple[str, float] | None:
    """The number the gate judges for ``mode`` in one run's frame (None when the run lacks it)."""
    part = df[df["mode"] == mode].set_index("kernel")
    if "controller" not in part.index:
        return None
    if part.loc["controller", "set_by"] == "device":
        return "median", float(part.loc["controller", "median_us"])
    if "empty" not in part.index:
        return None
    return "ratio", float(part.loc["controller", "median_us"] / part.loc["empty", "median_us"])


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


def judge(run: pd.DataFrame, *baseline: pd.DataFrame) -> list[ModeCheck]:
    """Each baseline mode's check, with the run's judged number filled in (modes the run lacks stay empty)."""
    out = []
    for check in thresholds(*baseline):
        got = judged_number(run, check.mode)
        out.append(check if got is None else ModeCheck(**{**check.__dict__, "now": got[1]}))
    return out


def regressions(checks: list[ModeCheck]) -> list[str]:
    """One line per regressed mode: what it judged, the baseline, now, the change and the allowed change."""
    lines = []
    for c in checks:
        if c.regressed:
            unit = "µs/step (controller median)" if c.metric == "median" else "× (controller/empty ratio)"
            lines.append(f"REGRESSED {c.mode}: {c.now:.4g} vs baseline {c.base:.4g} {unit}, "
                         f"{c.change:+.1%} > +{c.threshold:.1%} allowed")
    return lines


def wrong_results(df: pd.DataFrame) -> list[str]:
    """One line per sample whose timed path did not compute the spec model's bits."""
    if "matches_spec" not in df:
        return []
    bad = df[df["matches_spec"] == False]  # noqa: E712 (a column of Python bools)
    return [f"WRONG RESULT {r['mode']} [{r['kernel']}]: the timed path does not compute the spec model's bits"
            for _, r in bad.iterrows()]
