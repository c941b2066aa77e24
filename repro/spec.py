"""The executable specification: the controller rule in NumPy float32, from its description.

Written from the documented rule (kernel comment, commit message), not from
the kernel: per step, if KL > target·tol ramp (λ·ramp, clamped to the
ceiling), if KL < target/tol decay (λ·decay, clamped to the floor), else
hold; KL, target or λ ≤ 0 leave λ alone. Constants come from the contract,
rounded to float32 as a kernel's ``f`` literals are. Every operation is one
float32 operation, so the kernel must match it bit for bit.

Also the closed forms the report sets beside each measurement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from repro.contract import Controller

F32 = np.float32


@dataclass(frozen=True)
class Rule:
    """The rule's constants (λ bounds, dead-zone tolerance ×, per-step rates ×), as float32."""

    floor: np.float32
    ceiling: np.float32
    tolerance: np.float32
    ramp: np.float32
    decay: np.float32

    @classmethod
    def of(cls, controller: Controller, **overrides: float) -> Rule:
        """The documented rule of a contract entry; ``overrides`` replace named constants."""
        values = {k: controller.value(k) for k in ("floor", "ceiling", "tolerance", "ramp", "decay")}
        values.update(overrides)
        return cls(**{k: F32(v) for k, v in values.items()})


def step(rule: Rule, lam: np.ndarray, kl: np.ndarray, target: np.ndarray) -> np.ndarray:
    """λ after one step (float32, elementwise over runs)."""
    lam, kl, target = (np.asarray(a, dtype=F32) for a in (lam, kl, target))
    with np.errstate(all="ignore"):
        upper = target * rule.tolerance
        lower = target / rule.tolerance
        # np.fmin/np.fmax return the non-NaN operand, as C's fminf/fmaxf do.
        ramped = np.fmin(rule.ceiling, lam * rule.ramp)
        decayed = np.fmax(rule.floor, lam * rule.decay)
    new = np.where(kl > upper, ramped, np.where(kl < lower, decayed, lam))
    guarded = (kl <= 0) | (target <= 0) | (lam <= 0)
    return np.where(guarded, lam, new).astype(F32)


def run(rule: Rule, lambda0: np.ndarray, kl: np.ndarray, target: np.ndarray) -> np.ndarray:
    """λ after each step, ``[T, S]`` for step-major ``kl``/``target`` ``[T, S]`` and ``lambda0`` ``[S]``."""
    kl = np.asarray(kl, dtype=F32)
    target = np.broadcast_to(np.asarray(target, dtype=F32), kl.shape)
    lam = np.asarray(lambda0, dtype=F32).copy()
    out = np.empty(kl.shape, dtype=F32)
    for t in range(kl.shape[0]):
        lam = step(rule, lam, kl[t], target[t])
        out[t] = lam
    return out


def band_edges(target: float, tolerance: float) -> dict[str, np.float32]:
    """The float32 dead-zone edges the documented rule computes, and their neighbours.

    ``upper = fl(target·tol)`` and ``lower = fl(target/tol)`` are inside the band
    (the rule's tests are strict); ``above``/``below`` are the nearest floats outside.
    """
    t, tol = F32(target), F32(tolerance)
    upper, lower = F32(t * tol), F32(t / tol)
    inf = F32(np.inf)
    return {
        "upper": upper,
        "above": np.nextafter(upper, inf),
        "inside_upper": np.nextafter(upper, F32(0)),
        "lower": lower,
        "below": np.nextafter(lower, F32(0)),
        "inside_lower": np.nextafter(lower, inf),
    }


# --- closed forms (real arithmetic; the report prints them beside the measurements) ---


def steps_to_double(ramp: float) -> int:
    """⌈ln 2 / ln ramp⌉ steps of sustained high KL double λ."""
    return math.ceil(math.log(2) / math.log(ramp))


def steps_to_halve(decay: float) -> int:
    """⌈ln 2 / −ln decay⌉ steps of sustained low KL halve λ."""
    return math.ceil(math.log(2) / -math.log(decay))


def steps_to_floor(lambda0: float, floor: float, decay: float) -> int:
    """Steps of sustained low KL until λ is clamped at the floor: the least n with λ0·decayⁿ ≤ floor."""
    return math.ceil(math.log(lambda0 / floor) / -math.log(decay))


def in_band_probability(tolerance: float, sigma: float) -> float:
    """P(target/tol ≤ KL ≤ target·tol) for KL = target·exp(σ·N(0,1)): erf(ln tol / (σ√2))."""
    if sigma == 0:
        return 1.0
    return math.erf(math.log(tolerance) / (sigma * math.sqrt(2)))


def decay_to_ramp_log_ratio(ramp: float, decay: float) -> float:
    """How many times slower decay is than ramp, as a ratio of log-rates: ln ramp / −ln decay."""
    return math.log(ramp) / -math.log(decay)
