"""The executable specification: the controller rule in NumPy float32, from its description.

Written from the documented rule (kernel comment, commit message), not from
the kernel: per step, if KL > target·tol ramp (λ·ramp, clamped to the
ceiling), if KL < target/tol decay (λ·decay, clamped to the floor), else
hold; KL, target or λ ≤ 0 leave λ alone (the suite's guard). Constants come
from the contract, rounded to float32 as a kernel's ``f`` literals are. Every
operation is one float32 operation, so the kernel must match it bit for bit.
A peer's entry declares its source's rule instead: each threshold in its
source's arithmetic (a double threshold, compared in double or rounded once to
float32), its bounds, no guard, and what it does where both tests hold.

Also the closed forms the report sets beside each measurement.
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass

import numpy as np

from repro.core import stateful
from repro.core.contract import Controller
from repro.core.f32 import F32, columns, equal_bits, same


@dataclass(frozen=True)
class Rule:
    """The rule's constants (λ bounds, band edges, per-step rates ×), as float32.

    The first five fields describe the in-repo controllers' band rule (edges
    target·tol and target/tol, λ·ramp and λ·decay); the keyword fields let a
    contract entry declare another rule (the peers): other edge forms and their
    arithmetic, a rate applied by division, no floor or ceiling (None), bounds
    clipped on every step, no guard, what happens where both tests hold, or the
    proportional rule. For the proportional rule ``ramp`` and ``decay`` are its
    saturated multipliers (error clipped at ±clip).
    """

    floor: np.float32 | None
    ceiling: np.float32 | None
    tolerance: np.float32 | None
    ramp: np.float32
    decay: np.float32
    kind: str = "band"
    # (form, a, dtype): a is float32 for dtype f32, the double the source writes for f64 and f64_f32.
    upper: tuple | None = None  # None: ("mul", tolerance, "f32")
    lower: tuple | None = None  # None: ("div", tolerance, "f32")
    ramp_op: str = "mul"
    decay_op: str = "mul"
    bounds: str = "clamp"  # or clip_by_value: every branch clipped to [floor, ceiling], NaN passing (TF-Agents)
    guarded: bool = True  # KL, target or λ ≤ 0 leave λ alone
    overlap: str = "ramp"  # where both tests hold (a negative target): see repro.core.contract.OVERLAPS
    clip: np.float32 | None = None
    n_steps: np.float32 | None = None
    horizon: np.float32 | None = None

    @classmethod
    def of(cls, controller: Controller, **overrides: float) -> Rule:
        """The documented rule of a contract entry; ``overrides`` replace named constants. A stateful entry's
        rule is a :class:`repro.core.stateful.StatefulRule` (:func:`run` and :func:`run_each` take either)."""
        c = controller
        if c.stateful:
            return stateful.StatefulRule.of(c, **overrides)
        f32 = lambda v: None if v is None else F32(v)  # noqa: E731
        bounds = {k: c.bound(k) for k in ("floor", "ceiling")}
        if c.rule == "proportional":
            clip, n, h = (F32(c.value(k)) for k in ("clip", "n_steps", "horizon"))
            values = {**bounds, "tolerance": None, "ramp": _mult(clip, n, h), "decay": _mult(-clip, n, h), **overrides}
            return cls(**{k: f32(v) for k, v in values.items()}, kind="proportional", clip=clip, n_steps=n,
                       horizon=h, guarded=c.guarded)
        values = {**bounds, "tolerance": c.value("tolerance") if c.has("tolerance") else None,
                  "ramp": c.value("ramp"), "decay": c.value("decay"), **overrides}
        edges = {}
        for side in ("upper", "lower"):
            if c.has(f"{side}_edge"):
                doc = c[f"{side}_edge"]
                dtype = doc.dtype or "f32"
                edges[side] = (doc.form or "mul", F32(doc.value) if dtype == "f32" else np.float64(doc.value), dtype)
        return cls(**{k: f32(v) for k, v in values.items()}, **edges,
                   ramp_op=c["ramp"].op or "mul", decay_op=c["decay"].op or "mul",
                   bounds=c.bounds, guarded=c.guarded, overlap=c.overlap)

    def rate(self, which: str) -> float:
        """The real per-step factor of ``ramp`` or ``decay`` (λ·value, or 1/value where the op divides)."""
        value, op = (self.ramp, self.ramp_op) if which == "ramp" else (self.decay, self.decay_op)
        return 1.0 / float(value) if op == "div" else float(value)


def _mult(err: np.float32, n: np.float32, h: np.float32) -> np.float32:
    """The proportional rule's multiplier for a (clipped) error, in the kernel's order: 1 + (err·n)/h."""
    return F32(F32(1) + F32(F32(err * n) / h))


def _edge(target: np.ndarray, form: str, a, dtype: str = "f32") -> np.ndarray:
    """The threshold in the edge's arithmetic: float32, or double (f64 and f64_f32, rounded later)."""
    wide = np.float64 if dtype != "f32" else F32
    t, a, one = np.asarray(target).astype(wide), wide(a), wide(1)
    if form == "div":
        return t / a
    if form == "mul_one_plus":
        return t * (one + a)
    if form == "mul_one_minus":
        return t * (one - a)
    return t * a


def _sides(rule: Rule) -> tuple[tuple, tuple]:
    return (rule.upper or ("mul", rule.tolerance, "f32")), (rule.lower or ("div", rule.tolerance, "f32"))


def _tests(rule: Rule, kl: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(KL above the upper edge, KL below the lower edge), each compared in the edge's arithmetic."""
    out = []
    for (form, a, dtype), above in zip(_sides(rule), (True, False), strict=True):
        edge = _edge(target, form, a, dtype)
        k = kl.astype(np.float64) if dtype == "f64" else kl
        edge = edge.astype(F32) if dtype == "f64_f32" else edge
        out.append(k > edge if above else k < edge)
    return out[0], out[1]


def _toward(edge64: np.ndarray, up: bool) -> np.ndarray:
    """A double threshold as the float32 edge of the band: the greatest float32 ≤ it (up) or least ≥ it."""
    e = np.asarray(edge64, dtype=np.float64)
    x = e.astype(F32)
    off = (x.astype(np.float64) > e) if up else (x.astype(np.float64) < e)
    return np.where(off, np.nextafter(x, F32(-np.inf if up else np.inf)), x).astype(F32)


def edges(rule: Rule, target) -> tuple[np.ndarray, np.ndarray]:
    """The float32 band edges (upper, lower) the rule computes from ``target``: for a double comparison, the
    float32 KL nearest inside the double threshold (so that, for float32 KL, KL > upper and KL < lower decide
    as the double comparisons do)."""
    out = []
    with np.errstate(all="ignore"):
        target = np.asarray(target, dtype=F32)
        for (form, a, dtype), up in zip(_sides(rule), (True, False), strict=True):
            edge = _edge(target, form, a, dtype)
            out.append(_toward(edge, up) if dtype == "f64" else np.asarray(edge).astype(F32))
    return out[0], out[1]


def _clipped(rule: Rule, x: np.ndarray) -> np.ndarray:
    """tf.clip_by_value(x, floor, ceiling): minimum then maximum, NaN passing through (np.minimum/maximum)."""
    return np.maximum(np.minimum(x, rule.ceiling), rule.floor).astype(F32)


def _moved(rule: Rule, lam: np.ndarray, value: np.float32, op: str, bound: np.float32 | None, clamp) -> np.ndarray:
    """λ·value (or λ/value), then bounded."""
    out = lam / value if op == "div" else lam * value
    if rule.bounds == "clip_by_value":
        return _clipped(rule, out)
    # np.fmin/np.fmax return the non-NaN operand, as C's fminf/fmaxf do.
    return np.asarray(out if bound is None else clamp(bound, out), dtype=F32)


def _ramped(rule: Rule, lam: np.ndarray) -> np.ndarray:
    return _moved(rule, lam, rule.ramp, rule.ramp_op, rule.ceiling, np.fmin)


def _decayed(rule: Rule, lam: np.ndarray) -> np.ndarray:
    return _moved(rule, lam, rule.decay, rule.decay_op, rule.floor, np.fmax)


def ramped(rule: Rule, lam) -> np.ndarray:
    """λ after one ramping step (saturated error for the proportional rule), clamped where a ceiling exists."""
    with np.errstate(all="ignore"):
        return _ramped(rule, np.asarray(lam, dtype=F32))


def decayed(rule: Rule, lam) -> np.ndarray:
    """λ after one decaying step, clamped where a floor exists."""
    with np.errstate(all="ignore"):
        return _decayed(rule, np.asarray(lam, dtype=F32))


def _multiplier(rule: Rule, kl: np.ndarray, target: np.ndarray) -> np.ndarray:
    """The proportional rule's factor on λ this step: 1 + (err·n_steps)/horizon, err = KL/target − 1 clipped."""
    err = F32(kl / target) - F32(1)
    # np.clip's NaN passes through; the kernel writes its clip with comparisons so it does too.
    err = np.where(err < -rule.clip, -rule.clip, np.where(err > rule.clip, rule.clip, err)).astype(F32)
    return (F32(1) + (err * rule.n_steps).astype(F32) / rule.horizon).astype(F32)


def _step(rule: Rule, lam: np.ndarray, kl: np.ndarray, target: np.ndarray, tests=None) -> np.ndarray:
    """One step on float32 arrays (the caller silences floating-point warnings); ``tests``: :func:`_tests` of
    these ``kl`` and ``target``, where the caller holds them constant over many steps."""
    if rule.kind == "proportional":
        new = lam * _multiplier(rule, kl, target)
    else:
        above, below = _tests(rule, kl, target) if tests is None else tests
        held = _clipped(rule, lam * F32(1)) if rule.bounds == "clip_by_value" else lam
        up, down = _ramped(rule, lam), _decayed(rule, lam)
        new = np.where(above, up, np.where(below, down, held))
        overlap = above & below  # only where the band's edges cross (a lower edge above the upper one)
        if overlap.any():
            both = {"ramp": lambda: up, "decay": lambda: down, "unchanged": lambda: lam,
                    "ramp_then_decay": lambda: _decayed(rule, up),
                    "decay_then_ramp": lambda: _ramped(rule, down)}[rule.overlap]()
            new = np.where(overlap, both, new)
    if not rule.guarded:
        return np.asarray(new, dtype=F32)
    guarded = (kl <= 0) | (target <= 0) | (lam <= 0)
    return np.where(guarded, lam, new).astype(F32)


def step(rule: Rule, lam: np.ndarray, kl: np.ndarray, target: np.ndarray) -> np.ndarray:
    """λ after one step (float32, elementwise over runs)."""
    lam, kl, target = (np.asarray(a, dtype=F32) for a in (lam, kl, target))
    with np.errstate(all="ignore"):
        return _step(rule, lam, kl, target)


def run(rule: Rule, lambda0: np.ndarray, kl: np.ndarray, target: np.ndarray) -> np.ndarray:
    """λ after each step, ``[T, S]`` for step-major ``kl``/``target`` ``[T, S]`` and ``lambda0`` ``[S]``
    (a stateful rule: each run from its state slots' start values)."""
    kl = np.asarray(kl, dtype=F32)
    target = np.broadcast_to(np.asarray(target, dtype=F32), kl.shape)
    if isinstance(rule, stateful.StatefulRule):
        return stateful.run(rule, np.asarray(lambda0, dtype=F32), kl, target)[0]
    lam = np.asarray(lambda0, dtype=F32).copy()
    out = np.empty(kl.shape, dtype=F32)
    # Step t repeats step t-1's inputs on every run (bit for bit): where step t-1 also left λ unchanged, the
    # rule (a function of λ and the inputs alone) leaves it unchanged again, so it is not recomputed.
    repeats = np.zeros(kl.shape[0], dtype=bool)
    if kl.shape[0] > 1:
        repeats[1:] = (equal_bits(kl[1:], kl[:-1]) & equal_bits(target[1:], target[:-1])).reshape(kl.shape[0] - 1, -1).all(1)
    still = False
    with np.errstate(all="ignore"):
        # the band's tests are elementwise in KL and target alone: made for every step at once
        above, below = _tests(rule, kl, target) if rule.kind != "proportional" else (None, None)
        for t in range(kl.shape[0]):
            if still and repeats[t]:
                out[t] = lam
                continue
            new = _step(rule, lam, kl[t], target[t], None if above is None else (above[t], below[t]))
            still = same(new, lam)
            lam = new
            out[t] = lam
    return out


def run_each(rule: Rule, runs: list[tuple[float, np.ndarray, np.ndarray]]) -> list[np.ndarray]:
    """λ after each step for each ``(lambda0, kl [T_i], target [T_i])``: one :func:`run` over the runs as
    columns, each padded to the longest with its own last inputs (steps past ``T_i`` are discarded). The
    columns never meet (the rule is elementwise), so each is bit-identical to its own :func:`run`; one call
    costs the longest run's steps instead of the sum of all (the gate's catalogue: about 1.6k against 6.5k)."""
    if not runs:
        return []
    lambda0 = np.array([lam0 for lam0, _, _ in runs], dtype=F32)
    kls = [np.asarray(k, dtype=F32) for _, k, _ in runs]
    targets = [np.broadcast_to(np.asarray(t, dtype=F32), k.shape) for k, (_, _, t) in zip(kls, runs, strict=True)]
    inputs = hashlib.sha256(np.int64(len(runs)).tobytes() + lambda0.tobytes())
    for k, t in zip(kls, targets, strict=True):  # the inputs, not the kernel: candidates judged on a catalogue share a run
        inputs.update(np.int64(len(k)).tobytes() + k.tobytes() + t.tobytes())
    key = (rule, inputs.digest())
    if key not in _RUNS:
        out = run(rule, lambda0, columns(kls), columns(targets))
        out.flags.writeable = False
        _RUNS[key] = [out[:len(k), j] for j, k in enumerate(kls)]
        while len(_RUNS) > 16:
            _RUNS.pop(next(iter(_RUNS)))
    return list(_RUNS[key])


#: run_each's answers by (rule, digest of the inputs), read-only: the gate judges every candidate on the same
#: catalogue, so each mutant, peer or candidate judged in a process pays the spec's run once.
_RUNS: dict[tuple[Rule, bytes], list[np.ndarray]] = {}


def steps_to_settle(rule: Rule, lambda0: float, kl: float, target: float, cap: int = 200_000) -> int:
    """Steps of constant ``kl`` until λ stops moving: it reaches 0 or a float32 fixed point (a clamp, or a
    subnormal that one more step rounds back to itself). ``cap`` when it is still moving then."""
    return len(settling(rule, F32(lambda0), F32(kl), F32(target), cap))


@functools.lru_cache(maxsize=64)
def settling(rule: Rule, lambda0: np.float32, kl: np.float32, target: np.float32, cap: int = 200_000) -> np.ndarray:
    """λ after each step of constant ``kl`` up to the step at which it settles (see :func:`steps_to_settle`;
    cached: tens of thousands of steps for the slow rules, and the vanishing scenario replays them)."""
    lam, kl, target = (np.asarray(x, dtype=F32) for x in (lambda0, kl, target))
    out = []
    with np.errstate(all="ignore"):
        if rule.kind == "proportional" and not rule.guarded:
            # Constant inputs: each step is λ·m with one m, the same float32 product as _step's (about 40k
            # steps for TRL's ×1.00256 down to 0): as float32 scalars, a hundredth of the time.
            m, lam = _multiplier(rule, kl, target)[()], lam[()]
            advance = lambda x: x * m
        else:
            tests = None if rule.kind == "proportional" else _tests(rule, kl, target)  # constant inputs: once
            advance = lambda x: _step(rule, x, kl, target, tests)
        for _ in range(cap):
            new = advance(lam)
            out.append(new)
            if new == 0 or new.view(np.uint32) == lam.view(np.uint32):
                break
            lam = new
    return np.array(out, dtype=F32)


def band_edges(target: float, tolerance: float | Rule) -> dict[str, np.float32]:
    """The float32 dead-zone edges the documented rule computes, and their neighbours.

    ``upper = fl(target·tol)`` and ``lower = fl(target/tol)`` are inside the band
    (the rule's tests are strict); ``above``/``below`` are the nearest floats outside.
    Given a :class:`Rule` in place of ``tol``, its declared edge forms are used.
    """
    t = F32(target)
    if isinstance(tolerance, Rule):
        upper, lower = (F32(e) for e in edges(tolerance, t))
    else:
        tol = F32(tolerance)
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
