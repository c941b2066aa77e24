"""The measures a team compares controller designs by, from λ trajectories: pure functions, no kernel runs.

Each takes λ after each step (float32, 1-based steps as in :mod:`repro.runners.runner`) and what the run was
(λ before it, where its input changed, the rule's bounds) and returns numbers; nothing here formats
(:mod:`analysis.present.design_section` does) or runs (:mod:`repro.runners.design_runs` does).

Steps are counted in controller launches. λ spans decades (a ramp ×1.2 per step from a floor of 0.05 to a
ceiling of 1, a rule with no bound to 1e30), so the step response is read on ln λ: a rise time is the same
number of steps whatever the scale λ starts from.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from repro.core.f32 import F32, bits

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
    change = np.log(final) - np.log(before)
    if change == 0:
        return StepResponse(rise=None, overshoot=0.0, settling=0, final=final, why="λ does not respond")
    with np.errstate(divide="ignore"):
        y = (np.log(after) - np.log(before)) / change  # 0 at the step, 1 at the final value
    start, end = _first(y >= RISE_FROM), _first(y >= RISE_TO)
    outside = np.flatnonzero(np.abs(y - 1.0) > SETTLE_BAND)
    return StepResponse(rise=end - start, overshoot=float(max(0.0, y.max() - 1.0)),
                        settling=int(outside[-1]) + 1 if outside.size else 0, final=final)


@dataclass(frozen=True, kw_only=True)
class Cycle:
    """λ's sustained oscillation over the second half of a run. ``amplitude``: max/min of λ over it after its
    trend is taken out (× ; 1: λ holds); ``period``: the lag (steps) at which it repeats, None where it does
    not (λ holds, or no lag reaches :data:`CYCLE_MIN_CORRELATION`)."""

    amplitude: float | None
    period: int | None
    why: str = ""


def cycle(lam: np.ndarray) -> Cycle:
    """The limit cycle of λ over the second half of ``lam`` (the first half is the transient)."""
    half = np.asarray(lam, dtype=np.float64)[len(lam) // 2:]
    if not (np.isfinite(half).all() and (half > 0).all()):
        return Cycle(amplitude=None, period=None, why="λ reaches 0, infinity or NaN")
    y = np.log(half)
    t = np.arange(y.size, dtype=np.float64)
    y = y - np.polyval(np.polyfit(t, y, 1), t) if y.size > 1 else y * 0  # the trend: a drift is no cycle
    amplitude = float(np.exp(y.max() - y.min()))
    if y.max() - y.min() < 1e-9:
        return Cycle(amplitude=1.0, period=None, why="λ holds")
    y = y - y.mean()
    lags = range(2, y.size // 2 + 1)
    corr = [float(np.dot(y[:-k], y[k:]) / np.sqrt(np.dot(y[:-k], y[:-k]) * np.dot(y[k:], y[k:]) or 1.0)) for k in lags]
    best = int(np.argmax(corr)) if corr else None
    if best is None or corr[best] < CYCLE_MIN_CORRELATION:
        return Cycle(amplitude=amplitude, period=None, why="no repeating pattern")
    return Cycle(amplitude=amplitude, period=lags[best])


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

