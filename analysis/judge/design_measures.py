"""The measures a team compares controller designs by, from λ trajectories: pure functions, no kernel runs.

Each takes λ after each step (float32, 1-based steps as in :mod:`repro.runners.runner`) and what the run was
(λ before it, where its input changed, the rule's bounds) and returns numbers; nothing here formats
(:mod:`analysis.present.design_section` does) or runs (:mod:`repro.runners.design_runs` does).

Steps are counted in controller launches. λ spans decades (a ramp ×1.2 per step from a floor of 0.05 to a
ceiling of 1, a rule with no bound to 1e30), so the step response is read on ln λ: a rise time is the same
number of steps whatever the scale λ starts from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from repro.core import libm
from repro.core.f32 import F32, bits
from repro.runners.design_runs import HALF

#: The step response's thresholds: rise from 10 % to 90 % of the change, settled within 2 % of it (of ln λ).
RISE_FROM, RISE_TO, SETTLE_BAND = 0.1, 0.9, 0.02
#: A cycle is reported where the detrended ln λ repeats at that lag with at least this autocorrelation.
CYCLE_MIN_CORRELATION = 0.5


def _first(mask: np.ndarray) -> int | None:
    """0-based index of the first True, or None."""
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else None


@dataclass(frozen=True, kw_only=True)
class StepResponse:
    """λ's response to a step in KL at ``at`` (λ0 the λ before it). ``None``: not defined for this run (named
    in ``why``). Steps count from the first step after the KL changed."""

    rise: int | None  # steps from 10 % to 90 % of the change in ln λ
    overshoot: float | None  # how far ln λ goes past its final value, as a share of the change (0: never)
    settling: int | None  # steps until ln λ stays within 2 % of the change around its final value
    final: float | None  # λ at the end of the run
    why: str = ""


def step_response(lam: np.ndarray, at: int, lambda0: float) -> StepResponse:
    """The step response of a run whose KL stepped before step ``at + 1`` (``at`` steps before the step;
    ``lambda0`` λ before step 1). The final value is λ at the run's end; a run that still moves λ on its last
    step has not settled (no final value to rise to)."""
    lam = np.asarray(lam, dtype=np.float64)
    before = float(lambda0) if at == 0 else float(lam[at - 1])
    after = lam[at:]
    final = float(after[-1])
    if not (np.isfinite(final) and final > 0 and np.isfinite(before) and before > 0):
        return StepResponse(rise=None, overshoot=None, settling=None, final=final,
                            why="λ is 0, infinite or NaN at the step or the end")
    if after.size > 1 and bits(F32(after[-1])) != bits(F32(after[-2])):
        return StepResponse(rise=None, overshoot=None, settling=None, final=final,
                            why=f"λ still moves on the last of {after.size} steps")
    change = math.log(final) - math.log(before)
    if change == 0:
        return StepResponse(rise=None, overshoot=0.0, settling=0, final=final, why="λ does not respond")
    with np.errstate(divide="ignore"):
        y = (libm.log(after) - math.log(before)) / change  # 0 at the step, 1 at the final value
    start, end = _first(y >= RISE_FROM), _first(y >= RISE_TO)
    outside = np.flatnonzero(np.abs(y - 1.0) > SETTLE_BAND)
    return StepResponse(rise=end - start, overshoot=float(max(0.0, y.max() - 1.0)),
                        settling=int(outside[-1]) + 1 if outside.size else 0, final=final)


@dataclass(frozen=True, kw_only=True)
class Cycle:
    """λ's sustained oscillation over the second half of a run. ``amplitude``: max/min of λ over one period
    (× ; 1: λ holds); ``period``: the lag (steps) at which it repeats, None where it does not (λ holds, or no
    lag reaches :data:`CYCLE_MIN_CORRELATION`)."""

    amplitude: float | None
    period: int | None
    why: str = ""


def cycle(lam: np.ndarray) -> Cycle:
    """The limit cycle of λ over the second half of ``lam`` (the first half is the transient): the period from
    the autocorrelation of ln λ with its linear trend removed (a drift is no cycle), the amplitude as max/min of
    λ over the last period (over the detrended half where there is no period)."""
    half = np.asarray(lam, dtype=np.float64)[len(lam) // 2:]
    if not (np.isfinite(half).all() and (half > 0).all()):
        return Cycle(amplitude=None, period=None, why="λ reaches 0, infinity or NaN")
    raw = libm.log(half)
    t = np.arange(raw.size, dtype=np.float64)
    y = raw - np.polyval(np.polyfit(t, raw, 1), t) if raw.size > 1 else raw * 0
    if y.max() - y.min() < 1e-9:
        return Cycle(amplitude=1.0, period=None, why="λ holds")
    y = y - y.mean()
    lags = np.arange(1, y.size // 2 + 1)
    corr = np.array([np.dot(y[:-k], y[k:]) / (np.sqrt(np.dot(y[:-k], y[:-k]) * np.dot(y[k:], y[k:])) or 1.0)
                     for k in lags])
    # The period: the best lag after the autocorrelation first turns negative (a slow wander never does).
    negative = _first(corr < 0)
    best = None if negative is None else negative + int(np.argmax(corr[negative:]))
    if best is None or corr[best] < CYCLE_MIN_CORRELATION:
        return Cycle(amplitude=math.exp(y.max() - y.min()), period=None, why="no repeating pattern")
    period = int(lags[best])
    return Cycle(amplitude=math.exp(np.ptp(raw[-period:])), period=period)


def share_at(lam: np.ndarray, bound: float | None) -> float | None:
    """Share of steps on which λ is ``bound`` bit for bit (float32); None where the rule has no such bound."""
    if bound is None:
        return None
    lam = np.asarray(lam, dtype=F32)
    return float((bits(lam) == bits(F32(bound))).mean()) if lam.size else None


@dataclass(frozen=True, kw_only=True)
class WarmUp:
    """What a KL EMA restarting from 0 (or a λ restarting from its seed) did to λ.

    ``before``: λ when the restart happens (λ0, or λ after the settled steps before it); ``after``: λ once the
    EMA has come within 1 % of its level (``warm_up_steps`` after the restart; the run's end where the EMA was
    kept); ``lowest`` and its first step (counted from the restart); ``at_floor``: steps on the floor (None: the
    rule has none); ``recovery``: steps from the first lowest λ until λ is back at ``before`` or above (0: λ
    never fell; None: not within the ``steps`` the run had after the restart)."""

    before: float
    after: float
    lowest: float
    lowest_step: int
    at_floor: int | None
    recovery: int | None
    steps: int

    @property
    def loss(self) -> float:
        """The share of λ lost by the end of the warm-up (1 − after/before; negative: λ rose)."""
        return 1.0 - self.after / self.before


def warm_up(lam: np.ndarray, lambda0: float, restart: int = 0, warm_steps: int | None = None,
            floor: float | None = None) -> WarmUp:
    """:class:`WarmUp` of a run whose EMA restarted after ``restart`` steps (0: a cold start) and came within
    1 % of its level ``warm_steps`` steps later (None: the EMA was kept; λ after is the run's last)."""
    lam = np.asarray(lam, dtype=F32)
    before = F32(lambda0) if restart == 0 else lam[restart - 1]
    part = lam[restart:]
    after = part[-1] if warm_steps is None else part[min(warm_steps, part.size) - 1]
    low = int(np.argmin(part))
    back = _first(part[low:] >= before)
    fell = bool(part.min() < before)
    at_floor = None if floor is None else int((bits(part) == bits(F32(floor))).sum())
    return WarmUp(before=float(before), after=float(after), lowest=float(part[low]), lowest_step=low + 1,
                  at_floor=at_floor, recovery=(back if back is not None else None) if fell else 0, steps=int(part.size))



#: The catalogue scenarios the measures read: the step in KL (up, down), the square wave, the noise.
STEP_UP, STEP_DOWN, SQUARE, NOISE = "step_up", "step_down", "square_wave", "lognormal_sigma1.0"
#: The cold start whose loss the measures table states (the EMA rate of the issue's replay).
WARM_UP_SCENARIO = "warm_up_a0.01"


@dataclass(frozen=True, kw_only=True)
class Design:
    """One controller's measures: over the catalogue (open loop: the KL trace is given) and in the toy (closed
    loop: the KL answers λ). Shares are of steps; None where the measure does not apply (named in the
    step response's or cycle's ``why``, or no such bound)."""

    controller: str
    step_up: StepResponse
    step_down: StepResponse
    square: Cycle
    noise: Cycle
    at_floor: float | None  # share of the catalogue's steps (ordinary inputs) on the floor
    at_ceiling: float | None
    warm_up: WarmUp  # the cold start at EMA rate 0.01
    half_rate: object  # repro.runners.design_runs.HalfLossRate
    toy_at_floor: float | None
    toy_at_ceiling: float | None
    toy_cycle: Cycle
    toy_lowest: float


def _step_at(scenario) -> int:
    """Steps before the KL changes in a step scenario (its first step whose KL differs from step 1's)."""
    kl = scenario.kl
    return int(np.flatnonzero(bits(kl) != bits(kl[0]))[0])


def design(name: str, ev, half_rate, toy_lambda: np.ndarray) -> Design:
    """:class:`Design` of controller ``name`` from its gathered evidence (``ev``: the catalogue runs), its
    half-loss rate and λ per step in the toy."""
    ctrl = ev.controller
    floor, ceiling = ctrl.bound("floor"), ctrl.bound("ceiling")
    up, down = ev.run(STEP_UP), ev.run(STEP_DOWN)
    ordinary = np.concatenate([r.lam for r in ev.catalogue if r.scenario.family != "bad_values"])
    w = ev.run(WARM_UP_SCENARIO)
    p = w.scenario.params
    toy = np.asarray(toy_lambda, dtype=F32)
    return Design(controller=name,
                  step_up=step_response(up.lam, _step_at(up.scenario), up.scenario.lambda0),
                  step_down=step_response(down.lam, _step_at(down.scenario), down.scenario.lambda0),
                  square=cycle(ev.run(SQUARE).lam), noise=cycle(ev.run(NOISE).lam),
                  at_floor=share_at(ordinary, floor), at_ceiling=share_at(ordinary, ceiling),
                  warm_up=warm_up(w.lam, w.scenario.lambda0, p["restart"], p["warm_up_steps"], floor),
                  half_rate=half_rate, toy_at_floor=share_at(toy, floor), toy_at_ceiling=share_at(toy, ceiling),
                  toy_cycle=cycle(toy), toy_lowest=float(toy.min()))


def warm_ups(evidence: dict) -> list[tuple[str, str, dict, WarmUp]]:
    """Every controller's cold starts and resumes from its catalogue runs: (controller, scenario, its
    parameters, :class:`WarmUp`), controllers in the order given, scenarios in the catalogue's."""
    out = []
    for name, ev in evidence.items():
        floor = ev.controller.bound("floor")
        for r in ev.catalogue:
            if r.scenario.family not in ("warm_up", "resume"):
                continue
            p = r.scenario.params
            out.append((name, r.scenario.name, p,
                        warm_up(r.lam, r.scenario.lambda0, p.get("restart", 0), p.get("warm_up_steps"), floor)))
    return out


def kept_after_warm_up(runs) -> tuple[list[float], list[float]]:
    """(EMA rates, λ after the warm-up ÷ λ before) of a sweep's cold starts (``runs``: catalogue-like runs
    with their rate and warm-up length as parameters)."""
    rates, kept = [], []
    for r in runs:
        p = r.scenario.params
        rates.append(float(p["alpha"]))
        kept.append(float(r.lam[p["warm_up_steps"] - 1]) / float(r.scenario.lambda0))
    return rates, kept


@dataclass(frozen=True, kw_only=True)
class DesignSection:
    """Everything the report's cold-start and design section shows, per controller in the contract's order."""

    warm_ups: list  # (controller, scenario, parameters, WarmUp): every catalogue cold start and resume
    designs: dict  # controller → Design
    curves: dict  # controller → (EMA rates, share of λ kept after the warm-up): the sweep
    half: dict  # controller → HalfLossRate
    panels: dict  # figure panel → controller → (steps, λ ÷ λ at the start; the toy: λ)


def _relative(lam: np.ndarray, before: float) -> np.ndarray:
    return np.concatenate([[1.0], np.asarray(lam, dtype=np.float64) / float(before)])


def checked_against_sweep(h, rates: list[float], kept: list[float]):
    """``h`` (a :class:`repro.runners.design_runs.HalfLossRate`) as the sweep allows: where some rate of the sweep
    loses half while a slower one keeps more, loss is not monotone in the rate, the bisection's bracket means
    nothing, and ``h`` says so (``monotone`` False, ``why`` naming the two rates)."""
    order = np.argsort(rates)
    r, k = np.asarray(rates)[order], np.asarray(kept)[order]
    for i in range(len(r)):
        slower_keeps = np.flatnonzero(k[:i] > HALF)
        if k[i] <= HALF and slower_keeps.size:
            j = slower_keeps[0]
            return replace(h, rate=None, above=None, monotone=False,
                           why=f"not monotone in the rate: loses half at {r[i]:.3g}, keeps {k[j]:.0%} at {r[j]:.3g}")
    return h


def section(evidence: dict, half: dict, sweeps: dict, toy: dict) -> DesignSection:
    """:class:`DesignSection` from each controller's evidence (its catalogue runs), its half-loss rate, its sweep
    of cold starts (runs) and its λ per step in the toy; every dict keyed by controller, in the same order."""
    step = {}
    for name, ev in evidence.items():
        r = ev.run(STEP_UP)
        at = _step_at(r.scenario)
        before = r.scenario.lambda0 if at == 0 else r.lam[at - 1]
        step[name] = (np.arange(r.scenario.steps - at + 1), _relative(r.lam[at:], before))
    panels = {"step": step,
              **{key: {n: (np.arange(ev.run(s).scenario.steps + 1), _relative(ev.run(s).lam, ev.run(s).scenario.lambda0))
                       for n, ev in evidence.items()} for key, s in (("square", SQUARE), ("noise", NOISE))},
              "toy": {n: (np.arange(1, len(lam) + 1), np.asarray(lam, dtype=np.float64)) for n, lam in toy.items()}}
    curves = {n: kept_after_warm_up(sweeps[n]) for n in evidence}
    half = {n: checked_against_sweep(half[n], *curves[n]) for n in evidence}
    return DesignSection(warm_ups=warm_ups(evidence),
                         designs={n: design(n, ev, half[n], toy[n]) for n, ev in evidence.items()},
                         curves=curves, half=half, panels=panels)
