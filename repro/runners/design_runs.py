"""Runs behind the design measures beyond the catalogue (issue 35): the cold start swept over the KL EMA's
rate, and the rate below which a controller loses half its λ, found by bisection over runs of the kernel.

This module runs kernels and never judges (:mod:`analysis.judge.design_measures` reads the runs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from repro.backends.base import CompiledKernel
from repro.core import libm
from repro.core.contract import Controller
from repro.runners.runner import Run, run_scenarios
from repro.runners.scenarios import WARM_UP_LEVEL, warm_up, warm_up_steps

#: The EMA rates (per step) of the sweep: 10⁻⁴ (a horizon of 10⁴ steps) to 0.9, evenly in log.
SWEEP_RATES = tuple(float(a) for a in libm.geomspace(1e-4, 0.9, 21))
#: "Loses half": λ once the EMA is within 1 % of its level is at most this share of λ before the warm-up.
HALF = 0.5
#: The bisection's bracket (EMA rates per step) and its steps (each halves the bracket in log: 2^-14 of 3.7
#: decades is 0.05 % of the rate).
BRACKET, BISECTIONS = (1e-4, 1.0 - 1e-9), 14


@dataclass(frozen=True)
class HalfLossRate:
    """The EMA rate below which the controller loses at least half its λ in a cold start toward ``level``·target.

    ``rate``: the greatest rate tried at which it loses half; ``above``: the least tried at which it keeps more
    (the bracket left by the bisection). ``rate`` None (keeps more than half everywhere: ``above`` is the
    bracket's low end) or ``above`` None (loses half everywhere) with ``why`` where the bracket holds no change."""

    rate: float | None
    above: float | None
    runs: int  # kernel runs made
    why: str = ""
    #: False where the sweep shows a slower EMA keeping more than a faster one loses (a PID's overshoot): the
    #: bisection's assumption fails and no single rate says it (set by analysis.judge.design_measures)
    monotone: bool = True


def lambda_after_warm_up(run: Run) -> float:
    """λ once the EMA has come within 1 % of its level (the warm-up's length in steps)."""
    return float(run.lam[run.scenario.params["warm_up_steps"] - 1])


def sweep(kernel: CompiledKernel, controller: Controller, rates=SWEEP_RATES, level: float = WARM_UP_LEVEL) -> list[Run]:
    """A cold start per EMA rate (one looped call): the EMA from 0 toward ``level``·target, from the seed λ."""
    return run_scenarios(kernel, [warm_up(controller, a, level) for a in rates], "looped")


def loses_half(kernel: CompiledKernel, controller: Controller, alpha: float, level: float = WARM_UP_LEVEL) -> bool:
    run = run_scenarios(kernel, [warm_up(controller, alpha, level, steps=warm_up_steps(alpha))], "looped")[0]
    return lambda_after_warm_up(run) <= HALF * float(run.scenario.lambda0)


def half_loss_rate(kernel: CompiledKernel, controller: Controller, level: float = WARM_UP_LEVEL,
                   bracket: tuple[float, float] = BRACKET, steps: int = BISECTIONS) -> HalfLossRate:
    """Bisection in ln α over ``bracket``: each step runs the kernel on one cold start. Assumes a slower EMA
    costs at least as much λ (it stays longer below the band); the runs at the bracket's ends say when neither
    or both lose half."""
    lo, hi = bracket
    low_loses, high_loses = loses_half(kernel, controller, lo, level), loses_half(kernel, controller, hi, level)
    if not low_loses:
        return HalfLossRate(None, lo, 2, f"keeps more than half even at rate {lo:g}")
    if high_loses:
        return HalfLossRate(hi, None, 2, f"loses half even at rate {hi:g}")
    for _ in range(steps):  # invariant: loses half at lo, not at hi
        mid = math.exp((math.log(lo) + math.log(hi)) / 2)
        lo, hi = (mid, hi) if loses_half(kernel, controller, mid, level) else (lo, mid)
    return HalfLossRate(lo, hi, 2 + steps)
